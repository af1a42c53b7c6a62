/* plugq: the queues and exports built from the checked configuration
 * (nbdkit .get_ready): each disk's backend is opened and gets its queue
 * and its export, then each volume is built over its members.  No thread
 * is started here: the plugin starts them in .after_fork.
 */

#include <config.h>

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include "backends/backend_type.h"
#include "config_entries.h"
#include "volume/linear.h"
#include "queue/queue.h"
#include "setup.h"

static int
build_disk (struct entry *d)
{
  const struct disk_backend *db = config_disk_backend (d, d->backend);
  struct backend *b;

  if (db == NULL)
    return -1;
  b = d->backend->open (db->args, false);
  if (b == NULL)
    return -1;                  /* the backend has said why, in one line */
  /* Said here, in the user's terms, rather than by the export's range
   * check; nothing could be stored on it anyway.
   */
  if (b->size == 0) {
    nbdkit_error ("disk=%s: %s is empty (size 0)", d->name, b->description);
    backend_close (b);
    return -1;
  }

  d->queue = queue_new (d->name, b, &d->qc);
  if (d->queue == NULL) {
    /* queue_new owns b only once it returns a queue. */
    backend_close (b);
    nbdkit_error ("disk=%s: cannot create its queue: %m", d->name);
    return -1;
  }
  d->export = linear_new_disk (d->queue);
  if (d->export == NULL) {
    nbdkit_error ("disk=%s: cannot create its export", d->name);
    return -1;
  }
  return 0;
}

static int build_volume (struct entry *v);

static int
append_member (struct entry *v, const struct member *m)
{
  struct entry *t = m->target;
  uint64_t size, offset = 0, length;

  if (t->kind == ENTRY_VOLUME && build_volume (t) == -1)
    return -1;
  size = t->export->size;
  length = size;
  if (m->ranged) {
    offset = m->offset;
    length = m->length;
    if (offset + length > size) {
      nbdkit_error ("linear=%s: member '%s' ends at %" PRIu64 ", past the "
                    "end of '%s' (%" PRIu64 " bytes)",
                    v->spec, m->text, offset + length, t->name, size);
      return -1;
    }
  }

  /* The engine says why it refuses a member. */
  return t->kind == ENTRY_DISK
    ? linear_append_disk (v->export, t->queue, offset, length)
    : linear_append_linear (v->export, t->export, offset, length);
}

/* Members first (dependency order); config_complete ruled out cycles,
 * the visit flag only stops a volume being built twice.
 */
static int
build_volume (struct entry *v)
{
  size_t i;

  if (v->visit == VISITED)
    return 0;
  v->visit = VISITED;

  v->export = linear_new_volume (v->name);
  if (v->export == NULL) {
    nbdkit_error ("linear=%s: cannot create the volume: %m", v->spec);
    return -1;
  }
  for (i = 0; i < v->nr_members; i++)
    if (append_member (v, &v->members[i]) == -1)
      return -1;
  if (linear_finish (v->export) == -1) {
    nbdkit_error ("linear=%s: the volume is empty", v->spec);
    return -1;
  }
  return 0;
}

static void
free_built (void)
{
  size_t i;

  /* Volumes reference disks' queues: exports go before queues. */
  for (i = 0; i < config.nr_entries; i++) {
    linear_free (config.entries[i]->export);
    config.entries[i]->export = NULL;
  }
  for (i = 0; i < config.nr_entries; i++) {
    if (config.entries[i]->queue)
      queue_free (config.entries[i]->queue);
    config.entries[i]->queue = NULL;
  }
}

static int
fill_setup (struct plugq_setup *s)
{
  const char *want = config.default_export_name;
  size_t i;

  memset (s, 0, sizeof *s);
  s->disks = calloc (config.nr_entries, sizeof *s->disks);
  s->exports = calloc (config.nr_entries, sizeof *s->exports);
  if (s->disks == NULL || s->exports == NULL) {
    nbdkit_error ("calloc: %m");
    return -1;
  }
  for (i = 0; i < config.nr_entries; i++) {
    struct entry *e = config.entries[i];

    if (e->kind == ENTRY_DISK)
      s->disks[s->nr_disks++] = e->queue;
    s->exports[s->nr_exports++] = e->export;
    if (want ? strcmp (e->name, want) == 0 : s->default_export == NULL)
      s->default_export = e->export;
  }
  s->stats_path = config.stats_path;
  s->stats_format = config.stats_format;
  s->stats_interval_ns = config.stats_interval_ns;
  return 0;
}

static void
free_setup_arrays (struct plugq_setup *s)
{
  free (s->disks);
  free (s->exports);
  memset (s, 0, sizeof *s);
}

int
plugq_config_build (struct plugq_setup *s)
{
  size_t i;

  memset (s, 0, sizeof *s);
  for (i = 0; i < config.nr_entries; i++) {
    struct entry *e = config.entries[i];

    e->visit = UNVISITED;
    if (e->kind == ENTRY_DISK && build_disk (e) == -1)
      goto fail;
  }
  for (i = 0; i < config.nr_entries; i++) {
    struct entry *e = config.entries[i];

    if (e->kind == ENTRY_VOLUME && build_volume (e) == -1)
      goto fail;
  }
  if (fill_setup (s) == -1)
    goto fail;
  return 0;

 fail:
  plugq_config_free (s);
  return -1;
}

void
plugq_config_free (struct plugq_setup *s)
{
  free_setup_arrays (s);
  free_built ();
  config_free_entries ();
}

struct linear *
plugq_setup_lookup (const struct plugq_setup *s, const char *name)
{
  size_t i;

  if (name == NULL || *name == '\0')
    return s->default_export;
  for (i = 0; i < s->nr_exports; i++)
    if (strcmp (s->exports[i]->name, name) == 0)
      return s->exports[i];
  return NULL;
}
