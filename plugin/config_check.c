/* plugq: the checks that need the whole command line (nbdkit
 * .config_complete): every disk has a backend and only its keys, volume
 * members exist (they may be defined after the volume) and form no
 * cycle, the default export exists, stats= can be written.
 */

#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include "backends/backend_type.h"
#include "config_entries.h"
#include "setup.h"

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
    nbdkit_error ("disk=%s: no backend: give %s after it", d->name,
                  choices);
    return -1;
  }
  for (i = 0; (t = backend_type_at (i)) != NULL; i++) {
    db = find_backend (d, t);
    if (t != d->backend && db && db->further_key) {
      nbdkit_error ("disk=%s: %s= is only for %s %s= backend",
                    d->name, db->further_key, t->article, t->name);
      return -1;
    }
  }
  return 0;
}

static int
resolve_members (struct entry *v)
{
  size_t i;

  for (i = 0; i < v->nr_members; i++) {
    struct member *m = &v->members[i];

    m->target = config_find_entry (m->name);
    if (m->target == NULL) {
      nbdkit_error ("linear=%s: unknown member '%s' (no disk= or linear= "
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
    nbdkit_error ("linear=%s: cycle in volume members: %s", v->spec, path);
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

static int
check_volumes (void)
{
  struct entry **stack;
  size_t i;
  int r = 0;

  stack = calloc (config.nr_entries, sizeof *stack);
  if (stack == NULL) {
    nbdkit_error ("calloc: %m");
    return -1;
  }
  for (i = 0; i < config.nr_entries && r == 0; i++)
    if (config.entries[i]->kind == ENTRY_VOLUME)
      r = find_cycles (config.entries[i], stack, 0);
  free (stack);
  return r;
}

/* The stats writer starts after the fork, where a failure only reaches
 * the log: check now that its directory takes the file.
 */
static int
check_stats_dir (void)
{
  char *dir = strdup (config.stats_path);
  char *slash;
  int r = 0;

  if (dir == NULL) {
    nbdkit_error ("strdup: %m");
    return -1;
  }
  slash = strrchr (dir, '/');   /* absolute, so there is one */
  if (slash == dir)
    slash[1] = '\0';
  else if (slash)
    *slash = '\0';
  if (access (dir, W_OK | X_OK) == -1) {
    nbdkit_error ("stats=%s: directory %s: %m", config.stats_path, dir);
    r = -1;
  }
  free (dir);
  return r;
}

static int
add_default_disk (void)
{
  const struct backend_type *t = backend_type_by_name (DEFAULT_DISK_BACKEND);
  struct disk_backend *db;
  struct entry *d;

  if (t == NULL)
    abort ();                   /* the table lost the memory backend */
  d = config_new_entry ("disk", DEFAULT_DISK_NAME, ENTRY_DISK,
                        DEFAULT_DISK_NAME, strlen (DEFAULT_DISK_NAME));
  if (d == NULL || (db = config_disk_backend (d, t)) == NULL
      || t->start (db->args, d->name, DEFAULT_DISK_VALUE) == -1)
    return -1;
  d->backend = t;
  return 0;
}

int
plugq_config_complete (void)
{
  size_t i;

  config_init ();
  if (config.nr_entries == 0 && add_default_disk () == -1)
    return -1;

  for (i = 0; i < config.nr_entries; i++) {
    struct entry *e = config.entries[i];

    if (e->kind == ENTRY_DISK && check_disk (e) == -1)
      return -1;
    if (e->kind == ENTRY_VOLUME && resolve_members (e) == -1)
      return -1;
  }
  if (check_volumes () == -1)
    return -1;
  if (config.stats_path && check_stats_dir () == -1)
    return -1;
  if (config.default_export_name
      && config_find_entry (config.default_export_name) == NULL) {
    nbdkit_error ("default-export=%s: no disk or volume of that name",
                  config.default_export_name);
    return -1;
  }
  return 0;
}
