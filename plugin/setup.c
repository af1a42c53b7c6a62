/* plugq: configuration keys, and the disks and exports built from them.
 *
 * Grammar (design.md section 2):
 *
 *   [queue keys]...                          the defaults
 *   disk=NAME (file=PATH [direct=BOOL] | memory=SIZE
 *             | nbd=URI [reconnect=DELAY]) [queue keys]...
 *   linear=NAME:MEMBER[,MEMBER]...           MEMBER = NAME | NAME@OFF+LEN
 *   default-export=NAME  stats=PATH  stats-interval=DELAY   (anywhere)
 *
 * Every configuration error is one nbdkit_error line that names the key
 * and the problem.  (At get_ready, a backend that cannot open logs its own
 * reason first.)
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include "backend.h"
#include "config_value.h"
#include "setup.h"
#include "linear.h"
#include "queue.h"
#include "queue_keys.h"

#define NAME_MAX_LEN 255
#define DEFAULT_DISK_NAME "default"
#define DEFAULT_DISK_SIZE (UINT64_C (1) << 30)
#define DEFAULT_STATS_INTERVAL_NS UINT64_C (1000000000)

enum entry_kind { ENTRY_DISK, ENTRY_VOLUME };
enum backend_kind { BACKEND_NONE, BACKEND_FILE, BACKEND_MEMORY, BACKEND_NBD };
enum visit { UNVISITED, VISITING, VISITED };

/* One volume member as written on the command line. */
struct member {
  char *text;                   /* "db@1M+4M", for messages */
  char *name;
  bool ranged;
  uint64_t offset;
  uint64_t length;
  struct entry *target;         /* resolved by config_complete */
};

/* A disk= or a linear=.  Both are exports, so they share one namespace. */
struct entry {
  enum entry_kind kind;
  char *name;

  /* disk= */
  enum backend_kind backend;
  char *file;                   /* absolute */
  bool direct;
  bool direct_given;
  uint64_t memory_size;
  char *uri;
  uint64_t reconnect_ns;
  bool reconnect_given;
  struct queue_config qc;
  struct queue *queue;          /* owned until added to the setup */

  /* linear= */
  char *spec;                   /* the value as written */
  struct member *members;
  size_t nr_members;
  enum visit visit;

  struct linear *export;        /* owns the export's name and description */
};

/* Where queue and backend keys go: the defaults, the last disk=, or
 * nowhere (a volume has no queue and no backend).
 */
enum scope { SCOPE_DEFAULTS, SCOPE_DISK, SCOPE_VOLUME };

static bool initialised;
static struct queue_config defaults;
static enum scope scope = SCOPE_DEFAULTS;
static struct entry *current;   /* the last disk= or linear= */
static struct entry **entries;  /* in command-line order */
static size_t nr_entries;
static char *default_export_name;
static char *stats_path;
static uint64_t stats_interval_ns = DEFAULT_STATS_INTERVAL_NS;

static void
ensure_initialised (void)
{
  if (!initialised) {
    queue_config_defaults (&defaults);
    initialised = true;
  }
}

/* ---------------------------------------------------------------- values */

static bool
valid_name (const char *s)
{
  size_t len = strlen (s);

  if (len == 0 || len > NAME_MAX_LEN)
    return false;
  return strspn (s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                 "0123456789._-") == len;
}

/* ---------------------------------------------------------------- entries */

static struct entry *
find_entry (const char *name)
{
  size_t i;

  for (i = 0; i < nr_entries; i++)
    if (strcmp (entries[i]->name, name) == 0)
      return entries[i];
  return NULL;
}

static const char *
kind_key (enum entry_kind kind)
{
  return kind == ENTRY_DISK ? "disk" : "linear";
}

/* Checks the name and adds a new entry; the entry is current. */
static struct entry *
new_entry (const char *key, const char *value, enum entry_kind kind,
           const char *name, size_t name_len)
{
  struct entry *e, *old, **p;
  char *copy;

  copy = strndup (name, name_len);
  if (copy == NULL) {
    nbdkit_error ("strndup: %m");
    return NULL;
  }
  if (!valid_name (copy)) {
    nbdkit_error ("%s=%s: invalid name '%s': use 1 to %d characters of "
                  "A-Z a-z 0-9 . _ -", key, value, copy, NAME_MAX_LEN);
    free (copy);
    return NULL;
  }
  old = find_entry (copy);
  if (old) {
    nbdkit_error ("%s=%s: the name '%s' is already used by %s=%s "
                  "(disks and volumes share one namespace)",
                  key, value, copy, kind_key (old->kind), old->name);
    free (copy);
    return NULL;
  }

  e = calloc (1, sizeof *e);
  p = realloc (entries, (nr_entries + 1) * sizeof *entries);
  if (e == NULL || p == NULL) {
    nbdkit_error ("malloc: %m");
    free (e);
    free (copy);
    if (p)
      entries = p;
    return NULL;
  }
  entries = p;
  e->kind = kind;
  e->name = copy;
  e->qc = defaults;
  entries[nr_entries++] = e;
  current = e;
  return e;
}

static void
free_entry (struct entry *e)
{
  size_t i;

  if (e == NULL)
    return;
  for (i = 0; i < e->nr_members; i++) {
    free (e->members[i].text);
    free (e->members[i].name);
  }
  free (e->members);
  free (e->spec);
  free (e->file);
  free (e->uri);
  free (e->name);
  /* export and queue belong to the setup once built. */
  free (e);
}

/* ---------------------------------------------------------------- keys */

static int
config_disk (const char *key, const char *value)
{
  if (new_entry (key, value, ENTRY_DISK, value, strlen (value)) == NULL)
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

static const char *
backend_key (enum backend_kind b)
{
  return b == BACKEND_FILE ? "file" : b == BACKEND_NBD ? "nbd" : "memory";
}

static int
check_one_backend (struct entry *d, const char *key, const char *value)
{
  if (d->backend != BACKEND_NONE) {
    nbdkit_error ("%s=%s: disk=%s already has a backend (%s=): "
                  "a disk has exactly one", key, value, d->name,
                  backend_key (d->backend));
    return -1;
  }
  return 0;
}

static int
config_file (const char *key, const char *value)
{
  struct entry *d = backend_target (key, value);
  struct stat st;

  if (d == NULL || check_one_backend (d, key, value) == -1)
    return -1;
  if (*value == '\0') {
    nbdkit_error ("%s=: empty path (disk=%s)", key, d->name);
    return -1;
  }
  /* stat first so that a missing file gives one line naming the key. */
  if (stat (value, &st) == -1) {
    nbdkit_error ("%s=%s: %m (disk=%s)", key, value, d->name);
    return -1;
  }
  if (!S_ISREG (st.st_mode) && !S_ISBLK (st.st_mode)) {
    nbdkit_error ("%s=%s: not a regular file or block device (disk=%s)",
                  key, value, d->name);
    return -1;
  }
  /* Absolute now: nbdkit chdirs to / when it daemonizes. */
  d->file = nbdkit_realpath (value);
  if (d->file == NULL)
    return -1;
  d->backend = BACKEND_FILE;
  return 0;
}

static int
config_direct (const char *key, const char *value)
{
  struct entry *d = backend_target (key, value);

  if (d == NULL || config_parse_bool (key, value, &d->direct) == -1)
    return -1;
  d->direct_given = true;
  return 0;
}

static int
config_memory (const char *key, const char *value)
{
  struct entry *d = backend_target (key, value);

  if (d == NULL || check_one_backend (d, key, value) == -1)
    return -1;
  if (config_parse_size_key (key, value, false, &d->memory_size) == -1)
    return -1;
  d->backend = BACKEND_MEMORY;
  return 0;
}

/* The URI is only checked for its scheme here; libnbd parses the rest
 * and connects at get_ready, where its error still reaches the terminal.
 */
static int
config_nbd (const char *key, const char *value)
{
  struct entry *d = backend_target (key, value);

  if (d == NULL || check_one_backend (d, key, value) == -1)
    return -1;
  if (strncmp (value, "nbd://", 6) != 0 && strncmp (value, "nbds://", 7) != 0
      && strncmp (value, "nbd+unix://", 11) != 0
      && strncmp (value, "nbds+unix://", 12) != 0) {
    nbdkit_error ("%s=%s: not an NBD URI (nbd://, nbds://, nbd+unix://, "
                  "nbds+unix://) (disk=%s)", key, value, d->name);
    return -1;
  }
  if ((d->uri = strdup (value)) == NULL) {
    nbdkit_error ("%s: %m", key);
    return -1;
  }
  d->backend = BACKEND_NBD;
  return 0;
}

static int
config_reconnect (const char *key, const char *value)
{
  struct entry *d = backend_target (key, value);

  if (d == NULL
      || config_parse_delay (key, value, false, &d->reconnect_ns) == -1)
    return -1;
  d->reconnect_given = true;
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
  const char *plus;
  char what[512];
  char *num;
  int r;

  m->text = strdup (text);
  m->name = strndup (text, at ? (size_t) (at - text) : strlen (text));
  if (m->text == NULL || m->name == NULL) {
    nbdkit_error ("strdup: %m");
    return -1;
  }
  if (!valid_name (m->name)) {
    nbdkit_error ("%s=%s: bad member '%s': expected NAME or "
                  "NAME@OFFSET+LENGTH", key, value, text);
    return -1;
  }
  if (at == NULL)
    return 0;

  plus = strchr (at + 1, '+');
  if (plus == NULL) {
    nbdkit_error ("%s=%s: bad member '%s': a range is @OFFSET+LENGTH",
                  key, value, text);
    return -1;
  }
  m->ranged = true;
  snprintf (what, sizeof what, "%s=%s: member '%s': offset",
            key, value, text);
  num = strndup (at + 1, plus - (at + 1));
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

static int
config_linear (const char *key, const char *value)
{
  const char *colon = strchr (value, ':');
  struct entry *v;
  char *list, *item, *save = NULL;
  size_t n, i;

  if (colon == NULL) {
    nbdkit_error ("%s=%s: expected NAME:MEMBER[,MEMBER]...", key, value);
    return -1;
  }
  v = new_entry (key, value, ENTRY_VOLUME, value, colon - value);
  if (v == NULL)
    return -1;
  scope = SCOPE_VOLUME;
  v->spec = strdup (value);
  if (v->spec == NULL) {
    nbdkit_error ("strdup: %m");
    return -1;
  }

  list = v->spec + (colon - value) + 1;
  if (*list == '\0') {
    nbdkit_error ("%s=%s: volume '%s' has no members", key, value, v->name);
    return -1;
  }
  /* strtok would silently skip empty members ("a,,b"): count first. */
  for (n = 1, i = 0; list[i]; i++)
    if (list[i] == ',')
      n++;
  v->members = calloc (n, sizeof *v->members);
  if (v->members == NULL) {
    nbdkit_error ("calloc: %m");
    return -1;
  }
  list = strdup (list);
  if (list == NULL) {
    nbdkit_error ("strdup: %m");
    return -1;
  }
  for (item = list; item; item = save) {
    save = strchr (item, ',');
    if (save)
      *save++ = '\0';
    if (*item == '\0') {
      nbdkit_error ("%s=%s: empty member in the list", key, value);
      free (list);
      return -1;
    }
    if (parse_member (key, value, item,
                      &v->members[v->nr_members++]) == -1) {
      free (list);
      return -1;
    }
  }
  free (list);
  return 0;
}

/* Queue keys set the defaults before any disk=, then the last disk=. */
static int
config_queue_key (const char *key, const char *value)
{
  switch (scope) {
  case SCOPE_DEFAULTS:
    return queue_key_set (&defaults, key, value);
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

int
plugq_config_key (const char *key, const char *value)
{
  ensure_initialised ();

  if (strcmp (key, "disk") == 0)
    return config_disk (key, value);
  if (strcmp (key, "file") == 0)
    return config_file (key, value);
  if (strcmp (key, "direct") == 0)
    return config_direct (key, value);
  if (strcmp (key, "memory") == 0)
    return config_memory (key, value);
  if (strcmp (key, "nbd") == 0)
    return config_nbd (key, value);
  if (strcmp (key, "reconnect") == 0)
    return config_reconnect (key, value);
  if (strcmp (key, "linear") == 0)
    return config_linear (key, value);
  if (queue_key_known (key))
    return config_queue_key (key, value);

  if (strcmp (key, "default-export") == 0) {
    if (*value == '\0') {
      nbdkit_error ("%s=: empty name", key);
      return -1;
    }
    return replace_string (&default_export_name, value);
  }
  if (strcmp (key, "stats") == 0) {
    char *path;

    if (*value == '\0') {
      nbdkit_error ("%s=: empty path", key);
      return -1;
    }
    /* The file need not exist yet, so not nbdkit_realpath. */
    path = nbdkit_absolute_path (value);
    if (path == NULL)
      return -1;
    free (stats_path);
    stats_path = path;
    return 0;
  }
  if (strcmp (key, "stats-interval") == 0)
    return config_parse_delay (key, value, false, &stats_interval_ns);

  nbdkit_error ("unknown parameter '%s' (see nbdkit plugq --help)", key);
  return -1;
}

/* ---------------------------------------------------------------- complete */

static int
check_disk (const struct entry *d)
{
  if (d->backend == BACKEND_NONE) {
    nbdkit_error ("disk=%s: no backend: give file=PATH, memory=SIZE or "
                  "nbd=URI after it", d->name);
    return -1;
  }
  if (d->direct_given && d->backend != BACKEND_FILE) {
    nbdkit_error ("disk=%s: direct= is only for a file= backend",
                  d->name);
    return -1;
  }
  if (d->reconnect_given && d->backend != BACKEND_NBD) {
    nbdkit_error ("disk=%s: reconnect= is only for an nbd= backend",
                  d->name);
    return -1;
  }
  return 0;
}

static int
resolve_members (struct entry *v)
{
  size_t i;

  for (i = 0; i < v->nr_members; i++) {
    struct member *m = &v->members[i];

    m->target = find_entry (m->name);
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

/* The stats writer starts after the fork, where a failure only reaches
 * the log: check now that its directory takes the file.
 */
static int
check_stats_dir (void)
{
  char *dir = strdup (stats_path);
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
    nbdkit_error ("stats=%s: directory %s: %m", stats_path, dir);
    r = -1;
  }
  free (dir);
  return r;
}

/* The embedded default: with no disk and no volume at all, one 1 GiB
 * memory disk, so that a bare "nbdkit plugq" serves something.
 */
static int
add_default_disk (void)
{
  struct entry *d;

  d = new_entry ("disk", DEFAULT_DISK_NAME, ENTRY_DISK, DEFAULT_DISK_NAME,
                 strlen (DEFAULT_DISK_NAME));
  if (d == NULL)
    return -1;
  d->backend = BACKEND_MEMORY;
  d->memory_size = DEFAULT_DISK_SIZE;
  return 0;
}

int
plugq_config_complete (void)
{
  struct entry **stack;
  size_t i;
  int r = 0;

  ensure_initialised ();
  if (nr_entries == 0 && add_default_disk () == -1)
    return -1;

  for (i = 0; i < nr_entries; i++) {
    if (entries[i]->kind == ENTRY_DISK && check_disk (entries[i]) == -1)
      return -1;
    if (entries[i]->kind == ENTRY_VOLUME
        && resolve_members (entries[i]) == -1)
      return -1;
  }

  stack = calloc (nr_entries, sizeof *stack);
  if (stack == NULL) {
    nbdkit_error ("calloc: %m");
    return -1;
  }
  for (i = 0; i < nr_entries && r == 0; i++)
    if (entries[i]->kind == ENTRY_VOLUME)
      r = find_cycles (entries[i], stack, 0);
  free (stack);
  if (r == -1)
    return -1;

  if (stats_path && check_stats_dir () == -1)
    return -1;
  if (default_export_name && find_entry (default_export_name) == NULL) {
    nbdkit_error ("default-export=%s: no disk or volume of that name",
                  default_export_name);
    return -1;
  }
  return 0;
}

/* ---------------------------------------------------------------- build */

static int
build_disk (struct entry *d)
{
  struct backend *b;

  if (d->backend == BACKEND_FILE)
    b = backend_file_open (d->file, d->direct, false);
  else if (d->backend == BACKEND_NBD)
    b = backend_nbd_open (d->uri, d->reconnect_ns);
  else
    b = backend_memory_new (d->memory_size);
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

static uint64_t
entry_size (const struct entry *e)
{
  return e->kind == ENTRY_DISK ? queue_backend (e->queue)->size
    : e->export->size;
}

static int build_volume (struct entry *v);

static int
append_member (struct entry *v, const struct member *m)
{
  struct entry *t = m->target;
  uint64_t size, offset = 0, length;

  if (t->kind == ENTRY_VOLUME && build_volume (t) == -1)
    return -1;
  size = entry_size (t);
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
  for (i = 0; i < nr_entries; i++) {
    linear_free (entries[i]->export);
    entries[i]->export = NULL;
  }
  for (i = 0; i < nr_entries; i++) {
    if (entries[i]->queue)
      queue_free (entries[i]->queue);
    entries[i]->queue = NULL;
  }
}

static void
free_config (void)
{
  size_t i;

  for (i = 0; i < nr_entries; i++)
    free_entry (entries[i]);
  free (entries);
  entries = NULL;
  nr_entries = 0;
  current = NULL;
  free (default_export_name);
  default_export_name = NULL;
  free (stats_path);
  stats_path = NULL;
}

static int
fill_setup (struct plugq_setup *s)
{
  size_t i;

  memset (s, 0, sizeof *s);
  s->disks = calloc (nr_entries, sizeof *s->disks);
  s->exports = calloc (nr_entries, sizeof *s->exports);
  if (s->disks == NULL || s->exports == NULL) {
    nbdkit_error ("calloc: %m");
    return -1;
  }
  for (i = 0; i < nr_entries; i++) {
    struct entry *e = entries[i];

    if (e->kind == ENTRY_DISK)
      s->disks[s->nr_disks++] = e->queue;
    s->exports[s->nr_exports++] = e->export;
    if (default_export_name ? strcmp (e->name, default_export_name) == 0
        : s->default_export == NULL)
      s->default_export = e->export;
  }
  s->stats_path = stats_path;
  s->stats_interval_ns = stats_interval_ns;
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
  for (i = 0; i < nr_entries; i++) {
    entries[i]->visit = UNVISITED;
    if (entries[i]->kind == ENTRY_DISK && build_disk (entries[i]) == -1)
      goto fail;
  }
  for (i = 0; i < nr_entries; i++)
    if (entries[i]->kind == ENTRY_VOLUME && build_volume (entries[i]) == -1)
      goto fail;
  if (fill_setup (s) == -1)
    goto fail;
  return 0;

 fail:
  free_setup_arrays (s);
  free_built ();
  free_config ();
  return -1;
}

void
plugq_config_free (struct plugq_setup *s)
{
  free_setup_arrays (s);
  free_built ();
  free_config ();
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
