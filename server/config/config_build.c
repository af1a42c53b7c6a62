/* plugq: queues and exports built from checked entries
 * (config_build.h).  Errors about an entry read from a config= file
 * start with its FILE:LINE.
 */

#include <config.h>

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend_type.h"
#include "common/log.h"
#include "config_build.h"
#include "config_check.h"
#include "queue/queue.h"
#include "volume/linear.h"

/* ---------------------------------------------------------------- disks */

static struct queue *
open_queue (struct entry *d)
{
  const struct disk_backend *db = config_disk_backend (d, d->backend);
  struct backend *b;
  struct queue *q;

  if (db == NULL)
    return NULL;
  b = d->backend->open (db->args, false);
  if (b == NULL)
    return NULL;                /* the backend has said why, in one line */
  /* Said here, in the user's terms, rather than by the export's range
   * check; nothing could be stored on it anyway.
   */
  if (b->size == 0) {
    log_error ("disk=%s: %s is empty (size 0)", d->name, b->description);
    backend_close (b);
    return NULL;
  }
  q = queue_new (d->name, b, &d->qc);
  if (q == NULL) {
    /* queue_new owns b only once it returns a queue. */
    backend_close (b);
    log_error ("disk=%s: cannot create its queue: %m", d->name);
  }
  return q;
}

static int
build_disk_here (struct entry *d)
{
  struct queue *q = open_queue (d);
  struct linear *version;

  if (q == NULL)
    return -1;
  d->disk = disk_new (q);
  if (d->disk == NULL) {
    queue_retire (q);
    log_error ("disk=%s: %m", d->name);
    return -1;
  }
  version = linear_new_disk (q);
  if (version == NULL
      || (d->export = export_new (d->name, false, version, &d->disk, 1))
         == NULL) {
    linear_free (version);
    disk_release (d->disk);
    d->disk = NULL;
    log_error ("disk=%s: cannot create its export", d->name);
    return -1;
  }
  return 0;
}

int
config_build_disk (struct entry *d)
{
  const char *outer = config_entry_context (d);
  int r = build_disk_here (d);

  log_set_context (outer);
  return r;
}

/* --------------------------------------------------------------- disk sets */

struct disk_set {
  struct disk **v;
  size_t n;
};

static int
set_add (struct disk_set *s, struct disk *d)
{
  struct disk **p;

  for (size_t i = 0; i < s->n; i++)
    if (s->v[i] == d)
      return 0;
  p = realloc (s->v, (s->n + 1) * sizeof *p);
  if (p == NULL)
    return -1;
  s->v = p;
  s->v[s->n++] = d;
  return 0;
}

static int
collect (struct entry *e, const struct config_resolver *rs,
         struct disk_set *s)
{
  if (e->kind == ENTRY_DISK)
    return set_add (s, e->disk);
  for (size_t i = 0; i < e->nr_members; i++)
    if (collect (rs->resolve (rs->arg, e->members[i].name), rs, s) == -1)
      return -1;
  return 0;
}

int
config_volume_disks (struct entry *v, const struct config_resolver *rs,
                     struct disk ***disks, size_t *nr)
{
  struct disk_set s = { 0 };

  if (collect (v, rs, &s) == -1) {
    free (s.v);
    return -1;
  }
  *disks = s.v;
  *nr = s.n;
  return 0;
}

/* Of the candidates, the disks whose queues the table's rows reach. */
static int
reached (const struct linear *l, const struct disk_set *candidates,
         struct disk_set *out)
{
  for (size_t i = 0; i < l->nr_members; i++)
    for (size_t j = 0; j < candidates->n; j++)
      if (candidates->v[j]->queue == l->members[i]
          && set_add (out, candidates->v[j]) == -1)
        return -1;
  return 0;
}

/* ---------------------------------------------------------------- volumes */

static int build_volume (struct entry *v, const struct config_resolver *);

/* One member's rows appended to version (spec: the volume's value, for
 * messages); its disks join candidates.
 */
static int
append_member (const char *spec, struct linear *version,
               const struct member *m, const struct config_resolver *rs,
               struct disk_set *candidates)
{
  struct entry *t = rs->resolve (rs->arg, m->name);
  struct linear *member = NULL;
  uint64_t size, offset = 0, length;
  int r;

  if (t->kind == ENTRY_VOLUME) {
    if (build_volume (t, rs) == -1)
      return -1;
    member = export_version (t->export);
    size = member->size;
  }
  else
    size = queue_backend (t->disk->queue)->size;
  length = size;
  if (m->ranged) {
    offset = m->offset;
    length = m->length;
  }
  if (m->ranged && offset + length > size) {
    log_error ("linear=%s: member '%s' ends at %" PRIu64 ", past the end "
               "of '%s' (%" PRIu64 " bytes)", spec, m->text,
               offset + length, t->name, size);
    r = -1;
  }
  else if (collect (t, rs, candidates) == -1) {
    log_error ("linear=%s: %m", spec);
    r = -1;
  }
  /* The engine says why it refuses a member. */
  else if (member)
    r = linear_append_linear (version, member, offset, length);
  else
    r = linear_append_disk (version, t->disk->queue, offset, length);
  linear_release (member);
  return r;
}

/* The table finished, and the disks it reaches (in *reach). */
static int
finish_table (const char *spec, struct linear *version,
              const struct disk_set *candidates, struct disk_set *reach)
{
  if (linear_finish (version) == -1) {
    log_error ("linear=%s: the volume is empty", spec);
    return -1;
  }
  if (reached (version, candidates, reach) == -1) {
    log_error ("linear=%s: %m", spec);
    return -1;
  }
  return 0;
}

/* Members first (dependency order): the checks ruled out cycles, and an
 * export says the volume is built.
 */
static int
build_volume (struct entry *v, const struct config_resolver *rs)
{
  struct disk_set candidates = { 0 }, reach = { 0 };
  struct linear *version;
  int r = -1;

  if (v->export)
    return 0;
  version = linear_new_volume (v->name);
  if (version == NULL) {
    log_error ("linear=%s: cannot create the volume: %m", v->spec);
    return -1;
  }
  for (size_t i = 0; i < v->nr_members; i++)
    if (append_member (v->spec, version, &v->members[i], rs,
                       &candidates) == -1)
      goto out;
  if (finish_table (v->spec, version, &candidates, &reach) == -1)
    goto out;
  v->export = export_new (v->name, true, version, reach.v, reach.n);
  if (v->export == NULL)
    log_error ("linear=%s: cannot create the volume: %m", v->spec);
  else {
    version = NULL;             /* the export's now */
    r = 0;
  }
 out:
  linear_free (version);
  free (candidates.v);
  free (reach.v);
  return r;
}

int
config_build_volume (struct entry *v, const struct config_resolver *rs)
{
  const char *outer = config_entry_context (v);
  int r = build_volume (v, rs);

  log_set_context (outer);
  return r;
}

int
config_build_grown (struct entry *v, const struct member *extra,
                    size_t nr_extra, const char *spec,
                    const struct config_resolver *rs,
                    struct linear **out, struct disk ***disks, size_t *nr)
{
  struct disk_set candidates = { 0 }, reach = { 0 };
  struct linear *old = export_version (v->export);
  struct linear *version = linear_new_volume (v->name);
  int r = -1;

  if (version == NULL) {
    log_error ("linear=%s: cannot create the volume: %m", spec);
    goto out;
  }
  if (linear_append_linear (version, old, 0, old->size) == -1
      || collect (v, rs, &candidates) == -1)
    goto out;
  for (size_t i = 0; i < nr_extra; i++)
    if (append_member (spec, version, &extra[i], rs, &candidates) == -1)
      goto out;
  if (finish_table (spec, version, &candidates, &reach) == -1)
    goto out;
  *out = version;
  *disks = reach.v;
  *nr = reach.n;
  version = NULL;
  reach.v = NULL;
  r = 0;
 out:
  linear_release (old);
  linear_free (version);
  free (candidates.v);
  free (reach.v);
  return r;
}
