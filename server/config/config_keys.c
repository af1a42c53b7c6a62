/* plugq: the configuration keys, one at a time.
 *
 * Grammar (design.md section 2):
 *
 *   [queue keys]...                          the defaults
 *   disk=NAME BACKEND [queue keys]...        BACKEND = a starting key and
 *                                            its further keys, e.g.
 *                                            file=PATH [direct=BOOL]
 *   linear=NAME:MEMBER[,MEMBER]...           MEMBER = NAME | NAME@OFF+LEN
 *   default-export=NAME  stats=PATH  stats-format=json|prometheus
 *   stats-interval=DELAY  control=PATH       (anywhere)
 *   config=FILE                              (the command line only)
 *
 * The backend keys come from the table of backend types
 * (backend_type.h), the queue keys from queue_keys.h.  The command line,
 * a config= file and the control command `add` all go through here.
 * Every configuration error is one log_error line that names the key and
 * the problem.
 */

#include <config.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/backend_type.h"
#include "common/config_value.h"
#include "common/log.h"
#include "config_keys.h"
#include "queue/queue_keys.h"

/* ---------------------------------------------------------------- disks */

static int
config_disk (struct config_reader *r, const char *key, const char *value)
{
  r->current = config_new_entry (r->config, key, value, ENTRY_DISK, value,
                                 strlen (value), r->origin);
  if (r->current == NULL)
    return -1;
  r->scope = SCOPE_DISK;
  return 0;
}

/* Backend keys belong to the last disk=. */
static struct entry *
backend_target (struct config_reader *r, const char *key, const char *value)
{
  if (r->scope == SCOPE_DEFAULTS) {
    log_error ("%s=%s: no disk= before it: a backend key belongs to "
               "the disk= it follows", key, value);
    return NULL;
  }
  if (r->scope == SCOPE_VOLUME) {
    log_error ("%s=%s follows linear=%s, not a disk=: a backend key "
               "belongs to the disk= it follows", key, value,
               r->current->name);
    return NULL;
  }
  return r->current;
}

/* file=, memory=, nbd=: chooses the disk's one backend. */
static int
config_starting_key (struct config_reader *r, const struct backend_type *t,
                     const char *key, const char *value)
{
  struct entry *d = backend_target (r, key, value);
  struct disk_backend *db;

  if (d == NULL)
    return -1;
  if (d->backend) {
    log_error ("%s=%s: disk=%s already has a backend (%s=): "
               "a disk has exactly one", key, value, d->name,
               d->backend->name);
    return -1;
  }
  db = config_disk_backend (d, t);
  if (db == NULL || t->start (db->args, d->name, value) == -1
      || config_note_backend_key (d, key, value) == -1)
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
config_further_key (struct config_reader *r, const struct backend_type *t,
                    const char *key, const char *value)
{
  struct entry *d = backend_target (r, key, value);
  struct disk_backend *db;

  if (d == NULL || (db = config_disk_backend (d, t)) == NULL)
    return -1;
  if (db->further_key == NULL)
    db->further_key = table_key (t, key);
  if (t->set (db->args, d->name, key, value) == -1)
    return -1;
  return config_note_backend_key (d, key, value);
}

/* ---------------------------------------------------------------- queues */

/* Queue keys set the defaults before any disk=, then the last disk=. */
static int
config_queue_key (struct config_reader *r, const char *key,
                  const char *value)
{
  switch (r->scope) {
  case SCOPE_DEFAULTS:
    return queue_key_set (&r->config->defaults, key, value);
  case SCOPE_DISK:
    return queue_key_set (&r->current->qc, key, value);
  case SCOPE_VOLUME:
    break;
  }
  log_error ("%s=%s follows linear=%s: a volume has no queue; give "
             "queue keys before any disk= (defaults) or after a disk=",
             key, value, r->current->name);
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
    log_error ("%s=%s: bad member '%s': a range is @OFFSET+LENGTH",
               key, value, text);
    return -1;
  }
  m->ranged = true;
  snprintf (what, sizeof what, "%s=%s: member '%s': offset",
            key, value, text);
  num = strndup (range, plus - range);
  if (num == NULL) {
    log_error ("strndup: %m");
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
    log_error ("%s=%s: member '%s' has length 0", key, value, text);
    return -1;
  }
  if (m->offset + m->length < m->offset) {
    log_error ("%s=%s: member '%s': range overflows", key, value, text);
    return -1;
  }
  return 0;
}

/* One MEMBER: NAME or NAME@OFFSET+LENGTH.  Names cannot hold '@', '+'
 * or ',', so the split is unambiguous.
 */
static int
parse_member (const char *key, const char *value, const char *text,
              struct member *m)
{
  const char *at = strchr (text, '@');

  m->text = strdup (text);
  m->name = strndup (text, at ? (size_t) (at - text) : strlen (text));
  if (m->text == NULL || m->name == NULL) {
    log_error ("strdup: %m");
    return -1;
  }
  if (!config_valid_name (m->name)) {
    log_error ("%s=%s: bad member '%s': expected NAME or "
               "NAME@OFFSET+LENGTH", key, value, text);
    return -1;
  }
  if (at == NULL)
    return 0;
  return parse_range (key, value, text, at + 1, m);
}

int
config_parse_members (const char *key, const char *value, const char *name,
                      const char *list, struct member **members, size_t *nr)
{
  char *copy, *item, *save = NULL;
  size_t n, i;
  int r = 0;

  *members = NULL;
  *nr = 0;
  if (*list == '\0') {
    log_error ("%s=%s: volume '%s' has no members", key, value, name);
    return -1;
  }
  /* strtok would silently skip empty members ("a,,b"): count first. */
  for (n = 1, i = 0; list[i]; i++)
    if (list[i] == ',')
      n++;
  *members = calloc (n, sizeof **members);
  copy = strdup (list);
  if (*members == NULL || copy == NULL) {
    log_error ("malloc: %m");
    free (copy);
    return -1;
  }
  for (item = copy; item && r == 0; item = save) {
    save = strchr (item, ',');
    if (save)
      *save++ = '\0';
    if (*item == '\0') {
      log_error ("%s=%s: empty member in the list", key, value);
      r = -1;
    }
    else
      r = parse_member (key, value, item, &(*members)[(*nr)++]);
  }
  free (copy);
  return r;
}

void
config_free_members (struct member *members, size_t nr)
{
  for (size_t i = 0; i < nr; i++) {
    free (members[i].text);
    free (members[i].name);
  }
  free (members);
}

static int
config_linear (struct config_reader *r, const char *key, const char *value)
{
  const char *colon = strchr (value, ':');
  struct entry *v;

  if (colon == NULL) {
    log_error ("%s=%s: expected NAME:MEMBER[,MEMBER]...", key, value);
    return -1;
  }
  v = r->current = config_new_entry (r->config, key, value, ENTRY_VOLUME,
                                     value, colon - value, r->origin);
  if (v == NULL)
    return -1;
  r->scope = SCOPE_VOLUME;
  v->spec = strdup (value);
  if (v->spec == NULL) {
    log_error ("strdup: %m");
    return -1;
  }
  return config_parse_members (key, value, v->name, colon + 1, &v->members,
                               &v->nr_members);
}

/* ---------------------------------------------------------------- the rest */

static int
replace_string (char **dst, const char *src)
{
  char *copy = strdup (src);

  if (copy == NULL) {
    log_error ("strdup: %m");
    return -1;
  }
  free (*dst);
  *dst = copy;
  return 0;
}

/* value made absolute against the working directory: nbdkit chdirs to /
 * when it daemonizes.  The file need not exist yet, so not realpath.
 * NULL after log_error.
 */
static char *
absolute_path (const char *key, const char *value)
{
  char *cwd, *path;

  if (*value == '/')
    path = strdup (value);
  else if ((cwd = getcwd (NULL, 0)) == NULL) {
    log_error ("%s=%s: getcwd: %m", key, value);
    return NULL;
  }
  else {
    if (asprintf (&path, "%s/%s", cwd, value) == -1)
      path = NULL;
    free (cwd);
  }
  if (path == NULL)
    log_error ("%s=%s: %m", key, value);
  return path;
}

static int
config_path_key (const char *key, const char *value, char **dst)
{
  char *path;

  if (*value == '\0') {
    log_error ("%s=: empty path", key);
    return -1;
  }
  path = absolute_path (key, value);
  if (path == NULL)
    return -1;
  free (*dst);
  *dst = path;
  return 0;
}

static int
config_default_export (struct config_reader *r, const char *key,
                       const char *value)
{
  if (*value == '\0') {
    log_error ("%s=: empty name", key);
    return -1;
  }
  return replace_string (&r->config->default_export_name, value);
}

static int
config_stats_format (struct config_reader *r, const char *key,
                     const char *value)
{
  if (strcmp (value, "json") == 0)
    r->config->stats_format = STATS_FORMAT_JSON;
  else if (strcmp (value, "prometheus") == 0)
    r->config->stats_format = STATS_FORMAT_PROMETHEUS;
  else {
    log_error ("%s=%s: expected json or prometheus", key, value);
    return -1;
  }
  return 0;
}

/* config= names one file, and only on the command line. */
static int
config_file_key (struct config_reader *r, const char *key, const char *value)
{
  if (r->source == CONFIG_SOURCE_FILE) {
    log_error ("%s=%s: a configuration file cannot name another", key,
               value);
    return -1;
  }
  if (r->config->config_path) {
    log_error ("%s=%s: config= is given twice (already %s)", key, value,
               r->config->config_path);
    return -1;
  }
  return config_path_key (key, value, &r->config->config_path);
}

/* What applies to the whole server is written once, where the server
 * starts from, and never by a control command.
 */
static bool
settings_key (const char *key)
{
  static const char *const keys[] = {
    "default-export", "stats", "stats-format", "stats-interval",
    "control", "config", NULL,
  };

  for (size_t i = 0; keys[i]; i++)
    if (strcmp (key, keys[i]) == 0)
      return true;
  return false;
}

static int
config_settings_key (struct config_reader *r, const char *key,
                     const char *value)
{
  if (r->source == CONFIG_SOURCE_COMMAND) {
    log_error ("%s=%s: only the command line or the config= file sets "
               "%s= (see reload)", key, value, key);
    return -1;
  }
  if (strcmp (key, "default-export") == 0)
    return config_default_export (r, key, value);
  if (strcmp (key, "stats") == 0)
    return config_path_key (key, value, &r->config->stats_path);
  if (strcmp (key, "stats-format") == 0)
    return config_stats_format (r, key, value);
  if (strcmp (key, "stats-interval") == 0)
    return config_parse_delay (key, value, false,
                               &r->config->stats_interval_ns);
  if (strcmp (key, "control") == 0)
    return config_path_key (key, value, &r->config->control_path);
  return config_file_key (r, key, value);
}

void
config_reader_init (struct config_reader *r, struct config *c,
                    enum config_source source)
{
  *r = (struct config_reader) {
    .config = c, .source = source, .scope = SCOPE_DEFAULTS,
  };
}

int
config_reader_key (struct config_reader *r, const char *key,
                   const char *value)
{
  const struct backend_type *t;

  if (strcmp (key, "disk") == 0)
    return config_disk (r, key, value);
  if ((t = backend_type_by_name (key)) != NULL)
    return config_starting_key (r, t, key, value);
  if ((t = backend_type_by_key (key)) != NULL)
    return config_further_key (r, t, key, value);
  if (strcmp (key, "linear") == 0)
    return config_linear (r, key, value);
  if (queue_key_known (key))
    return config_queue_key (r, key, value);
  if (settings_key (key))
    return config_settings_key (r, key, value);

  log_error ("unknown parameter '%s' (see nbdkit plugq --help)", key);
  return -1;
}
