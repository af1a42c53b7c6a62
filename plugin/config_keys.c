/* plugq: the configuration keys, one at a time (nbdkit .config).
 *
 * Grammar (design.md section 2):
 *
 *   [queue keys]...                          the defaults
 *   disk=NAME BACKEND [queue keys]...        BACKEND = a starting key and
 *                                            its further keys, e.g.
 *                                            file=PATH [direct=BOOL]
 *   linear=NAME:MEMBER[,MEMBER]...           MEMBER = NAME | NAME@OFF+LEN
 *   default-export=NAME  stats=PATH  stats-format=json|prometheus
 *   stats-interval=DELAY                     (anywhere)
 *
 * The backend keys come from the table of backend types
 * (backend_type.h), the queue keys from queue_keys.h.  Every
 * configuration error is one nbdkit_error line that names the key and
 * the problem.
 */

#include <config.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include "backends/backend_type.h"
#include "config_entries.h"
#include "common/config_value.h"
#include "queue/queue_keys.h"
#include "setup.h"

/* Where queue and backend keys go: the defaults, the last disk=, or
 * nowhere (a volume has no queue and no backend).
 */
enum scope { SCOPE_DEFAULTS, SCOPE_DISK, SCOPE_VOLUME };

static enum scope scope = SCOPE_DEFAULTS;
static struct entry *current;   /* the last disk= or linear= */

/* ---------------------------------------------------------------- disks */

static int
config_disk (const char *key, const char *value)
{
  current = config_new_entry (key, value, ENTRY_DISK, value, strlen (value));
  if (current == NULL)
    return -1;
  scope = SCOPE_DISK;
  return 0;
}

/* Backend keys belong to the last disk=. */
static struct entry *
backend_target (const char *key, const char *value)
{
  if (scope == SCOPE_DEFAULTS) {
    nbdkit_error ("%s=%s: no disk= before it: a backend key belongs to "
                  "the disk= it follows", key, value);
    return NULL;
  }
  if (scope == SCOPE_VOLUME) {
    nbdkit_error ("%s=%s follows linear=%s, not a disk=: a backend key "
                  "belongs to the disk= it follows", key, value,
                  current->name);
    return NULL;
  }
  return current;
}

/* file=, memory=, nbd=: chooses the disk's one backend. */
static int
config_starting_key (const struct backend_type *t, const char *key,
                     const char *value)
{
  struct entry *d = backend_target (key, value);
  struct disk_backend *db;

  if (d == NULL)
    return -1;
  if (d->backend) {
    nbdkit_error ("%s=%s: disk=%s already has a backend (%s=): "
                  "a disk has exactly one", key, value, d->name,
                  d->backend->name);
    return -1;
  }
  db = config_disk_backend (d, t);
  if (db == NULL || t->start (db->args, d->name, value) == -1)
    return -1;
  d->backend = t;
  return 0;
}

/* The table's own copy of further key key of t, which outlives the
 * command line.
 */
static const char *
table_key (const struct backend_type *t, const char *key)
{
  const char *const *k;

  for (k = t->keys; strcmp (*k, key) != 0; k++)
    ;
  return *k;
}

/* direct=, reconnect=: tunes the backend of type t, whether or not the
 * disk has chosen one yet; config_complete refuses it if t is not the
 * one.
 */
static int
config_further_key (const struct backend_type *t, const char *key,
                    const char *value)
{
  struct entry *d = backend_target (key, value);
  struct disk_backend *db;

  if (d == NULL || (db = config_disk_backend (d, t)) == NULL)
    return -1;
  if (db->further_key == NULL)
    db->further_key = table_key (t, key);
  return t->set (db->args, d->name, key, value);
}

/* ---------------------------------------------------------------- queues */

/* Queue keys set the defaults before any disk=, then the last disk=. */
static int
config_queue_key (const char *key, const char *value)
{
  switch (scope) {
  case SCOPE_DEFAULTS:
    return queue_key_set (&config.defaults, key, value);
  case SCOPE_DISK:
    return queue_key_set (&current->qc, key, value);
  case SCOPE_VOLUME:
    break;
  }
  nbdkit_error ("%s=%s follows linear=%s: a volume has no queue; give "
                "queue keys before any disk= (defaults) or after a disk=",
                key, value, current->name);
  return -1;
}

/* ---------------------------------------------------------------- volumes */

/* The range of a MEMBER after its '@': OFFSET+LENGTH. */
static int
parse_range (const char *key, const char *value, const char *text,
             const char *range, struct member *m)
{
  const char *plus = strchr (range, '+');
  char what[512];
  char *num;
  int r;

  if (plus == NULL) {
    nbdkit_error ("%s=%s: bad member '%s': a range is @OFFSET+LENGTH",
                  key, value, text);
    return -1;
  }
  m->ranged = true;
  snprintf (what, sizeof what, "%s=%s: member '%s': offset",
            key, value, text);
  num = strndup (range, plus - range);
  if (num == NULL) {
    nbdkit_error ("strndup: %m");
    return -1;
  }
  r = config_parse_size (what, num, &m->offset);
  free (num);
  if (r == -1)
    return -1;
  snprintf (what, sizeof what, "%s=%s: member '%s': length",
            key, value, text);
  if (config_parse_size (what, plus + 1, &m->length) == -1)
    return -1;
  if (m->length == 0) {
    nbdkit_error ("%s=%s: member '%s' has length 0", key, value, text);
    return -1;
  }
  if (m->offset + m->length < m->offset) {
    nbdkit_error ("%s=%s: member '%s': range overflows", key, value, text);
    return -1;
  }
  return 0;
}

/* One MEMBER of linear=: NAME or NAME@OFFSET+LENGTH.  Names cannot hold
 * '@', '+' or ',', so the split is unambiguous.
 */
static int
parse_member (const char *key, const char *value, const char *text,
              struct member *m)
{
  const char *at = strchr (text, '@');

  m->text = strdup (text);
  m->name = strndup (text, at ? (size_t) (at - text) : strlen (text));
  if (m->text == NULL || m->name == NULL) {
    nbdkit_error ("strdup: %m");
    return -1;
  }
  if (!config_valid_name (m->name)) {
    nbdkit_error ("%s=%s: bad member '%s': expected NAME or "
                  "NAME@OFFSET+LENGTH", key, value, text);
    return -1;
  }
  if (at == NULL)
    return 0;
  return parse_range (key, value, text, at + 1, m);
}

/* The comma-separated MEMBERs in list, into v->members. */
static int
parse_members (const char *key, const char *value, struct entry *v,
               const char *list)
{
  char *copy, *item, *save = NULL;
  size_t n, i;
  int r = 0;

  if (*list == '\0') {
    nbdkit_error ("%s=%s: volume '%s' has no members", key, value, v->name);
    return -1;
  }
  /* strtok would silently skip empty members ("a,,b"): count first. */
  for (n = 1, i = 0; list[i]; i++)
    if (list[i] == ',')
      n++;
  v->members = calloc (n, sizeof *v->members);
  copy = strdup (list);
  if (v->members == NULL || copy == NULL) {
    nbdkit_error ("malloc: %m");
    free (copy);
    return -1;
  }
  for (item = copy; item && r == 0; item = save) {
    save = strchr (item, ',');
    if (save)
      *save++ = '\0';
    if (*item == '\0') {
      nbdkit_error ("%s=%s: empty member in the list", key, value);
      r = -1;
    }
    else
      r = parse_member (key, value, item, &v->members[v->nr_members++]);
  }
  free (copy);
  return r;
}

static int
config_linear (const char *key, const char *value)
{
  const char *colon = strchr (value, ':');

  if (colon == NULL) {
    nbdkit_error ("%s=%s: expected NAME:MEMBER[,MEMBER]...", key, value);
    return -1;
  }
  current = config_new_entry (key, value, ENTRY_VOLUME, value,
                              colon - value);
  if (current == NULL)
    return -1;
  scope = SCOPE_VOLUME;
  current->spec = strdup (value);
  if (current->spec == NULL) {
    nbdkit_error ("strdup: %m");
    return -1;
  }
  return parse_members (key, value, current, colon + 1);
}

/* ---------------------------------------------------------------- the rest */

static int
replace_string (char **dst, const char *src)
{
  char *copy = strdup (src);

  if (copy == NULL) {
    nbdkit_error ("strdup: %m");
    return -1;
  }
  free (*dst);
  *dst = copy;
  return 0;
}

static int
config_default_export (const char *key, const char *value)
{
  if (*value == '\0') {
    nbdkit_error ("%s=: empty name", key);
    return -1;
  }
  return replace_string (&config.default_export_name, value);
}

static int
config_stats (const char *key, const char *value)
{
  char *path;

  if (*value == '\0') {
    nbdkit_error ("%s=: empty path", key);
    return -1;
  }
  /* Absolute now: nbdkit chdirs to / when it daemonizes.  The file need
   * not exist yet, so not nbdkit_realpath.
   */
  path = nbdkit_absolute_path (value);
  if (path == NULL)
    return -1;
  free (config.stats_path);
  config.stats_path = path;
  return 0;
}

static int
config_stats_format (const char *key, const char *value)
{
  if (strcmp (value, "json") == 0)
    config.stats_format = STATS_FORMAT_JSON;
  else if (strcmp (value, "prometheus") == 0)
    config.stats_format = STATS_FORMAT_PROMETHEUS;
  else {
    nbdkit_error ("%s=%s: expected json or prometheus", key, value);
    return -1;
  }
  return 0;
}

int
plugq_config_key (const char *key, const char *value)
{
  const struct backend_type *t;

  config_init ();
  if (strcmp (key, "disk") == 0)
    return config_disk (key, value);
  if ((t = backend_type_by_name (key)) != NULL)
    return config_starting_key (t, key, value);
  if ((t = backend_type_by_key (key)) != NULL)
    return config_further_key (t, key, value);
  if (strcmp (key, "linear") == 0)
    return config_linear (key, value);
  if (queue_key_known (key))
    return config_queue_key (key, value);
  if (strcmp (key, "default-export") == 0)
    return config_default_export (key, value);
  if (strcmp (key, "stats") == 0)
    return config_stats (key, value);
  if (strcmp (key, "stats-format") == 0)
    return config_stats_format (key, value);
  if (strcmp (key, "stats-interval") == 0)
    return config_parse_delay (key, value, false,
                               &config.stats_interval_ns);

  nbdkit_error ("unknown parameter '%s' (see nbdkit plugq --help)", key);
  return -1;
}
