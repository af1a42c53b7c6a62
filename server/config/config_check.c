/* plugq: the checks that need a whole configuration (config_check.h):
 * at startup (nbdkit .config_complete), for what an `add` defines and
 * for what a `reload` reads.
 */

#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/backend_type.h"
#include "common/log.h"
#include "config_check.h"

/* With no disk and no volume at all, one 1 GiB memory disk, so that a
 * bare "nbdkit plugq" serves something.
 */
#define DEFAULT_DISK_NAME "default"
#define DEFAULT_DISK_BACKEND "memory"
#define DEFAULT_DISK_VALUE "1G"

/* "file=PATH, memory=SIZE or nbd=URI", from the table. */
static void
backend_choices (char *buf, size_t size)
{
  const struct backend_type *t;
  size_t i, len = 0;

  buf[0] = '\0';
  for (i = 0; (t = backend_type_at (i)) != NULL && len < size; i++)
    len += snprintf (buf + len, size - len, "%s%s=%s",
                     i == 0 ? "" : backend_type_at (i + 1) ? ", " : " or ",
                     t->name, t->value_name);
}

static const struct disk_backend *
find_backend (const struct entry *d, const struct backend_type *t)
{
  size_t i;

  for (i = 0; i < d->nr_backends; i++)
    if (d->backends[i].type == t)
      return &d->backends[i];
  return NULL;
}

/* A backend, and no further key of another type (in table order, so
 * that the message does not depend on the order of the keys).
 */
static int
check_disk (const struct entry *d)
{
  const struct backend_type *t;
  const struct disk_backend *db;
  char choices[256];
  size_t i;

  if (d->backend == NULL) {
    backend_choices (choices, sizeof choices);
    log_error ("disk=%s: no backend: give %s after it", d->name,
               choices);
    return -1;
  }
  for (i = 0; (t = backend_type_at (i)) != NULL; i++) {
    db = find_backend (d, t);
    if (t != d->backend && db && db->further_key) {
      log_error ("disk=%s: %s= is only for %s %s= backend",
                 d->name, db->further_key, t->article, t->name);
      return -1;
    }
  }
  return 0;
}

const char *
config_entry_context (const struct entry *e)
{
  const char *outer = log_get_context ();

  if (e->origin)
    log_set_context (e->origin);
  return outer;
}

static int
resolve_members (const struct config *c, struct entry *v)
{
  size_t i;

  for (i = 0; i < v->nr_members; i++) {
    struct member *m = &v->members[i];

    m->target = config_find_entry (c, m->name);
    if (m->target == NULL) {
      log_error ("linear=%s: unknown member '%s' (no disk= or linear= "
                 "of that name)", v->spec, m->name);
      return -1;
    }
  }
  return 0;
}

/* Depth-first over volume members; a member met while it is still being
 * visited closes a cycle, and the stack gives its path for the message.
 */
static int
find_cycles (struct entry *v, struct entry **stack, size_t depth)
{
  size_t i;

  if (v->visit == VISITED)
    return 0;
  if (v->visit == VISITING) {
    char path[1024] = "";
    size_t j = 0;

    while (j < depth && stack[j] != v)
      j++;
    for (; j < depth; j++) {
      strncat (path, stack[j]->name, sizeof path - strlen (path) - 1);
      strncat (path, " -> ", sizeof path - strlen (path) - 1);
    }
    strncat (path, v->name, sizeof path - strlen (path) - 1);
    log_error ("linear=%s: cycle in volume members: %s", v->spec, path);
    return -1;
  }

  v->visit = VISITING;
  stack[depth] = v;
  for (i = 0; i < v->nr_members; i++) {
    struct entry *t = v->members[i].target;

    if (t->kind == ENTRY_VOLUME && find_cycles (t, stack, depth + 1) == -1)
      return -1;
  }
  v->visit = VISITED;
  return 0;
}

static size_t
count_all (const struct config *c)
{
  size_t n = 0;

  for (; c; c = c->base)
    n += c->nr_entries;
  return n;
}

static void
clear_visits (const struct config *c)
{
  for (; c; c = c->base)
    for (size_t i = 0; i < c->nr_entries; i++)
      c->entries[i]->visit = UNVISITED;
}

/* The base's volumes were checked when they were defined, and none of
 * them can name an entry of c: a cycle can only pass through c's.
 */
static int
check_volumes (struct config *c)
{
  struct entry **stack;
  size_t i;
  int r = 0;

  stack = calloc (count_all (c) + 1, sizeof *stack);
  if (stack == NULL) {
    log_error ("calloc: %m");
    return -1;
  }
  clear_visits (c);
  for (i = 0; i < c->nr_entries && r == 0; i++)
    if (c->entries[i]->kind == ENTRY_VOLUME) {
      const char *outer = config_entry_context (c->entries[i]);

      r = find_cycles (c->entries[i], stack, 0);
      log_set_context (outer);
    }
  clear_visits (c);
  free (stack);
  return r;
}

/* The stats writer starts after the fork, where a failure only reaches
 * the log: check now that its directory takes the file.
 */
static int
check_stats_dir (const struct config *c)
{
  char *dir = strdup (c->stats_path);
  char *slash;
  int r = 0;

  if (dir == NULL) {
    log_error ("strdup: %m");
    return -1;
  }
  slash = strrchr (dir, '/');   /* absolute, so there is one */
  if (slash == dir)
    slash[1] = '\0';
  else if (slash)
    *slash = '\0';
  if (access (dir, W_OK | X_OK) == -1) {
    log_error ("stats=%s: directory %s: %m", c->stats_path, dir);
    r = -1;
  }
  free (dir);
  return r;
}

int
config_add_default_disk (struct config *c)
{
  const struct backend_type *t = backend_type_by_name (DEFAULT_DISK_BACKEND);
  struct disk_backend *db;
  struct entry *d;

  if (c->nr_entries > 0)
    return 0;
  if (t == NULL)
    abort ();                   /* the table lost the memory backend */
  d = config_new_entry (c, "disk", DEFAULT_DISK_NAME, ENTRY_DISK,
                        DEFAULT_DISK_NAME, strlen (DEFAULT_DISK_NAME), NULL);
  if (d == NULL || (db = config_disk_backend (d, t)) == NULL
      || t->start (db->args, d->name, DEFAULT_DISK_VALUE) == -1
      || config_note_backend_key (d, t->name, DEFAULT_DISK_VALUE) == -1)
    return -1;
  d->backend = t;
  return 0;
}

static int
check_entry (const struct config *c, struct entry *e)
{
  const char *outer = config_entry_context (e);
  int r = e->kind == ENTRY_DISK ? check_disk (e) : resolve_members (c, e);

  log_set_context (outer);
  return r;
}

int
config_check_entries (struct config *c)
{
  for (size_t i = 0; i < c->nr_entries; i++)
    if (check_entry (c, c->entries[i]) == -1)
      return -1;
  return check_volumes (c);
}

int
config_check_settings (const struct config *c)
{
  if (c->stats_path && check_stats_dir (c) == -1)
    return -1;
  if (c->default_export_name
      && config_find_entry (c, c->default_export_name) == NULL) {
    log_error ("default-export=%s: no disk or volume of that name",
               c->default_export_name);
    return -1;
  }
  return 0;
}
