/* plugq: the disks and volumes a configuration defines. */

#include <config.h>

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "config_entries.h"

#define DEFAULT_STATS_INTERVAL_NS UINT64_C (1000000000)

void
config_init (struct config *c, const struct config *base)
{
  memset (c, 0, sizeof *c);
  c->base = base;
  queue_config_defaults (&c->defaults);
  c->stats_format = STATS_FORMAT_JSON;
  c->stats_interval_ns = DEFAULT_STATS_INTERVAL_NS;
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
config_find_entry (const struct config *c, const char *name)
{
  for (; c; c = c->base)
    for (size_t i = 0; i < c->nr_entries; i++)
      if (strcmp (c->entries[i]->name, name) == 0)
        return c->entries[i];
  return NULL;
}

const char *
config_kind_key (enum entry_kind kind)
{
  return kind == ENTRY_DISK ? "disk" : "linear";
}

/* The name as a string, if it is valid and not taken; NULL after
 * log_error.
 */
static char *
new_name (const struct config *c, const char *key, const char *value,
          const char *name, size_t name_len)
{
  struct entry *old;
  char *copy;

  copy = strndup (name, name_len);
  if (copy == NULL) {
    log_error ("strndup: %m");
    return NULL;
  }
  if (!config_valid_name (copy)) {
    log_error ("%s=%s: invalid name '%s': use 1 to %d characters of "
               "A-Z a-z 0-9 . _ -", key, value, copy, NAME_MAX_LEN);
    free (copy);
    return NULL;
  }
  old = config_find_entry (c, copy);
  if (old) {
    log_error ("%s=%s: the name '%s' is already used by %s=%s "
               "(disks and volumes share one namespace)",
               key, value, copy, config_kind_key (old->kind), old->name);
    free (copy);
    return NULL;
  }
  return copy;
}

int
config_append_entry (struct config *c, struct entry *e)
{
  struct entry **p = realloc (c->entries, (c->nr_entries + 1) * sizeof *p);

  if (p == NULL) {
    log_error ("realloc: %m");
    return -1;
  }
  c->entries = p;
  c->entries[c->nr_entries++] = e;
  return 0;
}

void
config_unlink_entry (struct config *c, struct entry *e)
{
  for (size_t i = 0; i < c->nr_entries; i++)
    if (c->entries[i] == e) {
      memmove (&c->entries[i], &c->entries[i + 1],
               (c->nr_entries - i - 1) * sizeof *c->entries);
      c->nr_entries--;
      return;
    }
}

struct entry *
config_new_entry (struct config *c, const char *key, const char *value,
                  enum entry_kind kind, const char *name, size_t name_len,
                  const char *origin)
{
  struct entry *e;
  char *copy = new_name (c, key, value, name, name_len);

  if (copy == NULL)
    return NULL;
  e = calloc (1, sizeof *e);
  if (e == NULL || (origin && (e->origin = strdup (origin)) == NULL)) {
    log_error ("malloc: %m");
    free (e);
    free (copy);
    return NULL;
  }
  e->kind = kind;
  e->name = copy;
  e->qc = c->defaults;
  if (config_append_entry (c, e) == -1) {
    free (e->origin);
    free (e);
    free (copy);
    return NULL;
  }
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
    log_error ("realloc: %m");
    return NULL;
  }
  d->backends = p;
  p = &d->backends[d->nr_backends];
  *p = (struct disk_backend) { .type = t, .args = t->new_args () };
  if (p->args == NULL) {
    log_error ("%s: %m", t->name);
    return NULL;
  }
  d->nr_backends++;
  return p;
}

int
config_note_backend_key (struct entry *d, const char *key, const char *value)
{
  struct key_value *kv = NULL, *p;
  char *copy = strdup (value);

  for (size_t i = 0; i < d->nr_backend_keys && kv == NULL; i++)
    if (strcmp (d->backend_keys[i].key, key) == 0)
      kv = &d->backend_keys[i];
  if (copy == NULL) {
    log_error ("strdup: %m");
    return -1;
  }
  if (kv) {
    free (kv->value);
    kv->value = copy;
    return 0;
  }
  p = realloc (d->backend_keys, (d->nr_backend_keys + 1) * sizeof *p);
  if (p == NULL || (p[d->nr_backend_keys].key = strdup (key)) == NULL) {
    log_error ("malloc: %m");
    if (p)
      d->backend_keys = p;
    free (copy);
    return -1;
  }
  d->backend_keys = p;
  p[d->nr_backend_keys++].value = copy;
  return 0;
}

void
config_free_entry (struct entry *e)
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
  for (i = 0; i < e->nr_backend_keys; i++) {
    free (e->backend_keys[i].key);
    free (e->backend_keys[i].value);
  }
  free (e->backend_keys);
  free (e->spec);
  free (e->name);
  free (e->origin);
  /* Exports before disks: a volume's export holds its members. */
  export_release (e->export);
  disk_release (e->disk);
  free (e);
}

void
config_free (struct config *c)
{
  /* Volumes' exports hold disks: let them go first, then the rest. */
  for (size_t i = 0; i < c->nr_entries; i++)
    if (c->entries[i]->kind == ENTRY_VOLUME) {
      export_release (c->entries[i]->export);
      c->entries[i]->export = NULL;
    }
  for (size_t i = 0; i < c->nr_entries; i++)
    config_free_entry (c->entries[i]);
  free (c->entries);
  free (c->default_export_name);
  free (c->stats_path);
  free (c->control_path);
  free (c->config_path);
  config_init (c, NULL);
}
