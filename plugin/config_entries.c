/* plugq: the disks and volumes the configuration defines. */

#include <config.h>

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include "config_entries.h"

#define DEFAULT_STATS_INTERVAL_NS UINT64_C (1000000000)

struct config config = {
  .stats_format = STATS_FORMAT_JSON,
  .stats_interval_ns = DEFAULT_STATS_INTERVAL_NS,
};

void
config_init (void)
{
  static bool initialised;

  if (!initialised) {
    queue_config_defaults (&config.defaults);
    initialised = true;
  }
}

bool
config_valid_name (const char *s)
{
  size_t len = strlen (s);

  if (len == 0 || len > NAME_MAX_LEN)
    return false;
  return strspn (s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                 "0123456789._-") == len;
}

struct entry *
config_find_entry (const char *name)
{
  size_t i;

  for (i = 0; i < config.nr_entries; i++)
    if (strcmp (config.entries[i]->name, name) == 0)
      return config.entries[i];
  return NULL;
}

static const char *
kind_key (enum entry_kind kind)
{
  return kind == ENTRY_DISK ? "disk" : "linear";
}

/* The name as a string, if it is valid and not taken; NULL after
 * nbdkit_error.
 */
static char *
new_name (const char *key, const char *value, const char *name,
          size_t name_len)
{
  struct entry *old;
  char *copy;

  copy = strndup (name, name_len);
  if (copy == NULL) {
    nbdkit_error ("strndup: %m");
    return NULL;
  }
  if (!config_valid_name (copy)) {
    nbdkit_error ("%s=%s: invalid name '%s': use 1 to %d characters of "
                  "A-Z a-z 0-9 . _ -", key, value, copy, NAME_MAX_LEN);
    free (copy);
    return NULL;
  }
  old = config_find_entry (copy);
  if (old) {
    nbdkit_error ("%s=%s: the name '%s' is already used by %s=%s "
                  "(disks and volumes share one namespace)",
                  key, value, copy, kind_key (old->kind), old->name);
    free (copy);
    return NULL;
  }
  return copy;
}

struct entry *
config_new_entry (const char *key, const char *value, enum entry_kind kind,
                  const char *name, size_t name_len)
{
  struct entry *e, **p;
  char *copy = new_name (key, value, name, name_len);

  if (copy == NULL)
    return NULL;
  e = calloc (1, sizeof *e);
  p = realloc (config.entries, (config.nr_entries + 1) * sizeof *p);
  if (e == NULL || p == NULL) {
    nbdkit_error ("malloc: %m");
    free (e);
    free (copy);
    if (p)
      config.entries = p;
    return NULL;
  }
  config.entries = p;
  e->kind = kind;
  e->name = copy;
  e->qc = config.defaults;
  config.entries[config.nr_entries++] = e;
  return e;
}

struct disk_backend *
config_disk_backend (struct entry *d, const struct backend_type *t)
{
  struct disk_backend *p;
  size_t i;

  for (i = 0; i < d->nr_backends; i++)
    if (d->backends[i].type == t)
      return &d->backends[i];
  p = realloc (d->backends, (d->nr_backends + 1) * sizeof *p);
  if (p == NULL) {
    nbdkit_error ("realloc: %m");
    return NULL;
  }
  d->backends = p;
  p = &d->backends[d->nr_backends];
  *p = (struct disk_backend) { .type = t, .args = t->new_args () };
  if (p->args == NULL) {
    nbdkit_error ("%s: %m", t->name);
    return NULL;
  }
  d->nr_backends++;
  return p;
}

static void
free_entry (struct entry *e)
{
  size_t i;

  for (i = 0; i < e->nr_members; i++) {
    free (e->members[i].text);
    free (e->members[i].name);
  }
  free (e->members);
  for (i = 0; i < e->nr_backends; i++)
    e->backends[i].type->free_args (e->backends[i].args);
  free (e->backends);
  free (e->spec);
  free (e->name);
  /* export and queue belong to the setup once built. */
  free (e);
}

void
config_free_entries (void)
{
  size_t i;

  for (i = 0; i < config.nr_entries; i++)
    free_entry (config.entries[i]);
  free (config.entries);
  config.entries = NULL;
  config.nr_entries = 0;
  free (config.default_export_name);
  config.default_export_name = NULL;
  free (config.stats_path);
  config.stats_path = NULL;
}
