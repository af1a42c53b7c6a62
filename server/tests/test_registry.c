/* plugq: unit tests for the registries the configuration walks: the
 * backend types (backend_type.h), the elevators (elevator.h) and the
 * queue keys (queue_keys.h).
 *
 * The plugin dispatches every key through these tables and prints its
 * --help, --dump-plugin and messages from them, so a type with a missing
 * field, a key two tables claim, or a lookup that misses one is a
 * configuration the plugin cannot read correctly.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <config.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/backend.h"
#include "backends/backend_type.h"
#include "elevator/elevator.h"
#include "common/log.h"
#include "queue/queue.h"
#include "queue/queue_keys.h"
#include "tap.h"

/* The plugin's own keys (plugin/config_keys.c), which no backend may
 * take either.
 */
static const char *const plugin_keys[] = {
  "disk", "linear", "default-export", "stats", "stats-interval", NULL,
};

/* The last error the engine logged. */
static char last_error[1024];

static void
capture_error (const char *msg)
{
  snprintf (last_error, sizeof last_error, "%s", msg);
}

static const struct log_sink capture = { .error = capture_error };

/* Whether help has a line that starts with "key=". */
static bool
help_has_key (const char *help, const char *key)
{
  size_t len = strlen (key);

  for (const char *line = help; line && *line;
       line = strchr (line, '\n') ? strchr (line, '\n') + 1 : NULL)
    if (strncmp (line, key, len) == 0 && line[len] == '=')
      return true;
  return false;
}

/* Whether names is exactly name_at (0) sep name_at (1) ... */
static bool
names_match (const char *names, const char *sep,
             const char *(*name_at) (size_t))
{
  const char *p = names, *name;
  size_t i;

  if (names == NULL)
    return false;
  for (i = 0; (name = name_at (i)) != NULL; i++) {
    if (i > 0) {
      if (strncmp (p, sep, strlen (sep)) != 0)
        return false;
      p += strlen (sep);
    }
    if (strncmp (p, name, strlen (name)) != 0)
      return false;
    p += strlen (name);
  }
  return i > 0 && *p == '\0';
}

static const char *
type_name_at (size_t i)
{
  const struct backend_type *t = backend_type_at (i);

  return t ? t->name : NULL;
}

static const char *
elevator_name_at (size_t i)
{
  const struct elevator_ops *e = elevator_at (i);

  return e ? e->name : NULL;
}

/* ------------------------------------------------------------ backends */

static bool
type_complete (const struct backend_type *t)
{
  bool ok = true;

  ok &= CHECK (t->name && *t->name);
  ok &= CHECK (t->article && (strcmp (t->article, "a") == 0
                              || strcmp (t->article, "an") == 0));
  ok &= CHECK (t->value_name && *t->value_name);
  ok &= CHECK (t->keys != NULL);
  ok &= CHECK (t->summary && *t->summary);
  ok &= CHECK (t->help && t->help[strlen (t->help) - 1] == '\n');
  ok &= CHECK (t->new_args && t->start && t->open && t->free_args);
  if (!ok)
    return false;
  /* --help shows the starting key first, then each further key. */
  ok &= CHECK (strncmp (t->help, t->name, strlen (t->name)) == 0
               && t->help[strlen (t->name)] == '=');
  for (const char *const *k = t->keys; *k; k++)
    ok &= CHECK (help_has_key (t->help, *k));
  ok &= CHECK ((t->set != NULL) == (t->keys[0] != NULL));
  return ok;
}

static void
test_types_complete (void)
{
  const struct backend_type *t;
  bool ok = true;
  size_t i;

  for (i = 0; (t = backend_type_at (i)) != NULL; i++)
    if (!type_complete (t)) {
      printf ("# backend type %zu (%s) is incomplete\n", i,
              t->name ? t->name : "?");
      ok = false;
    }
  ok &= CHECK (i >= 3);
  tap_ok (ok, "every backend type has a name, value, summary, help (with "
          "each of its keys), args functions and open");
}

/* Every key any table or the plugin claims, with who claims it. */
struct claim {
  const char *key;
  const char *owner;
};

static size_t
add_claims (struct claim *c, size_t n, const char *const *keys,
            const char *owner)
{
  for (; *keys; keys++)
    c[n++] = (struct claim) { *keys, owner };
  return n;
}

static void
test_keys_unique (void)
{
  struct claim claims[128];
  const struct backend_type *t;
  size_t n = 0, i, j;
  bool ok = true;

  n = add_claims (claims, n, queue_keys, "queue");
  n = add_claims (claims, n, plugin_keys, "plugin");
  for (i = 0; (t = backend_type_at (i)) != NULL; i++) {
    claims[n++] = (struct claim) { t->name, t->name };
    n = add_claims (claims, n, t->keys, t->name);
  }
  for (i = 0; i < n; i++)
    for (j = i + 1; j < n; j++)
      if (strcmp (claims[i].key, claims[j].key) == 0) {
        printf ("# %s= is claimed by %s and by %s\n", claims[i].key,
                claims[i].owner, claims[j].owner);
        ok = false;
      }
  tap_ok (ok, "no key is claimed twice: backend names, backend keys, "
          "queue keys and the plugin's keys are all distinct (%zu keys)", n);
}

static void
test_type_lookups (void)
{
  const struct backend_type *t;
  bool ok = true;

  for (size_t i = 0; (t = backend_type_at (i)) != NULL; i++) {
    ok &= CHECK (backend_type_by_name (t->name) == t);
    ok &= CHECK (backend_type_by_key (t->name) == NULL);
    for (const char *const *k = t->keys; *k; k++) {
      ok &= CHECK (backend_type_by_key (*k) == t);
      ok &= CHECK (backend_type_by_name (*k) == NULL);
    }
  }
  ok &= CHECK (backend_type_by_name ("file") == &backend_type_file);
  ok &= CHECK (backend_type_by_name ("memory") == &backend_type_memory);
  ok &= CHECK (backend_type_by_name ("nbd") == &backend_type_nbd);
  ok &= CHECK (backend_type_by_key ("direct") == &backend_type_file);
  ok &= CHECK (backend_type_by_key ("reconnect") == &backend_type_nbd);
  ok &= CHECK (backend_type_by_name ("File") == NULL);
  ok &= CHECK (backend_type_by_name ("") == NULL);
  ok &= CHECK (backend_type_by_key ("elevator") == NULL);
  ok &= CHECK (backend_type_by_key ("disk") == NULL);
  tap_ok (ok, "lookups find each type by its starting key and by each "
          "further key, and nothing else");
}

static void
test_type_names (void)
{
  char *comma = backend_type_names (",");
  char *spaced = backend_type_names (", ");
  bool ok = true;

  ok &= CHECK (names_match (comma, ",", type_name_at));
  ok &= CHECK (names_match (spaced, ", ", type_name_at));
#ifdef HAVE_LIBRBD
  ok &= CHECK (comma && strcmp (comma, "file,memory,nbd,rbd") == 0);
#else
  ok &= CHECK (comma && strcmp (comma, "file,memory,nbd") == 0);
#endif
  tap_ok (ok, "backend_type_names lists every type in table order (%s)",
          comma ? comma : "NULL");
  free (comma);
  free (spaced);
}

/* A type's args from its starting key's value, or NULL (error logged). */
static void *
started (const struct backend_type *t, const char *value)
{
  void *args = t->new_args ();

  if (args && t->start (args, "d", value) == 0)
    return args;
  if (args)
    t->free_args (args);
  return NULL;
}

static void
test_memory_type (void)
{
  const struct backend_type *t = &backend_type_memory;
  struct backend *b = NULL;
  void *args;
  bool ok = true;

  args = started (t, "2M");
  ok &= CHECK (args != NULL);
  if (args) {
    b = t->open (args, false);
    ok &= CHECK (b && b->size == 2 * 1024 * 1024);
    backend_close (b);
    t->free_args (args);
  }
  ok &= CHECK (started (t, "12Q") == NULL);
  ok &= CHECK (strcmp (last_error, "memory=12Q: '12Q' is not a size "
                       "(digits with an optional suffix b, k, M, G, T, P, "
                       "E or s, e.g. 512M)") == 0);
  ok &= CHECK (started (t, "0") == NULL);
  ok &= CHECK (strcmp (last_error,
                       "memory=0: size must be greater than 0") == 0);
  tap_ok (ok, "memory=: the size opens a disk of that size; a bad size "
          "is refused with its message");
}

/* file= takes a relative path, which must exist, and keeps it absolute:
 * nbdkit chdirs to / when it daemonizes.
 */
static void
test_file_type (void)
{
  const struct backend_type *t = &backend_type_file;
  char dir[] = "/tmp/plugq-registry-XXXXXX", cwd[4096];
  struct backend *b = NULL;
  void *args = NULL;
  bool ok = true;
  FILE *fp;

  char *real;

  if (mkdtemp (dir) == NULL || (real = realpath (dir, NULL)) == NULL
      || getcwd (cwd, sizeof cwd) == NULL || chdir (dir) == -1
      || (fp = fopen ("f.img", "w")) == NULL) {
    tap_ok (false, "file=: cannot set up a directory in /tmp");
    return;
  }
  ok &= CHECK (fwrite ("0123456789abcdef", 1, 16, fp) == 16);
  ok &= CHECK (fclose (fp) == 0);
  args = started (t, "f.img");
  ok &= CHECK (args && t->set (args, "d", "direct", "no") == 0);
  ok &= CHECK (chdir ("/") == 0);
  if (args) {
    b = t->open (args, true);
    ok &= CHECK (b && b->size == 16);
    ok &= CHECK (b && strstr (b->description, real) != NULL);
    backend_close (b);
    ok &= CHECK (t->set (args, "d", "direct", "maybe") == -1);
    ok &= CHECK (strstr (last_error, "direct=maybe: expected a boolean")
                 == last_error);
    t->free_args (args);
  }
  ok &= CHECK (started (t, "no-such.img") == NULL);
  ok &= CHECK (strcmp (last_error, "file=no-such.img: No such file or "
                       "directory (disk=d)") == 0);
  ok &= CHECK (started (t, "") == NULL);
  ok &= CHECK (strcmp (last_error, "file=: empty path (disk=d)") == 0);
  ok &= CHECK (chdir (dir) == 0 && unlink ("f.img") == 0
               && chdir (cwd) == 0 && rmdir (dir) == 0);
  free (real);
  tap_ok (ok, "file=: a relative path is made absolute at once and opens "
          "from another directory; missing and empty paths are refused");
}

static void
test_nbd_type (void)
{
  const struct backend_type *t = &backend_type_nbd;
  void *args;
  bool ok = true;

  args = started (t, "nbd+unix:///x?socket=/nonexistent");
  ok &= CHECK (args != NULL);
  if (args) {
    ok &= CHECK (t->set (args, "d", "reconnect", "50ms") == 0);
    ok &= CHECK (t->set (args, "d", "reconnect", "0") == -1);
    ok &= CHECK (strcmp (last_error,
                         "reconnect=0: delay must be greater than 0") == 0);
    t->free_args (args);
  }
  ok &= CHECK (started (t, "http://x") == NULL);
  ok &= CHECK (strcmp (last_error, "nbd=http://x: not an NBD URI (nbd://, "
                       "nbds://, nbd+unix://, nbds+unix://) (disk=d)") == 0);
  tap_ok (ok, "nbd=: NBD URIs are taken, other schemes refused; "
          "reconnect= takes a delay above 0");
}

/* ------------------------------------------------------------ elevators */

static void
test_elevators (void)
{
  const struct elevator_ops *e;
  char *names = elevator_names (",");
  bool ok = true;
  size_t i;

  for (i = 0; (e = elevator_at (i)) != NULL; i++) {
    ok &= CHECK (e->name && *e->name && e->help && *e->help);
    ok &= CHECK (e->first && e->next);
    ok &= CHECK ((e->init == NULL) == (e->exit == NULL));
    ok &= CHECK (elevator_lookup (e->name) == e);
    for (size_t j = 0; j < i; j++)
      ok &= CHECK (strcmp (elevator_at (j)->name, e->name) != 0);
  }
  ok &= CHECK (i >= 2);
  ok &= CHECK (names_match (names, ",", elevator_name_at));
  ok &= CHECK (names && strcmp (names, "deadline,noop") == 0);
  tap_ok (ok, "every elevator has a name, help and ops, is found by its "
          "name, and elevator_names lists them all (%s)",
          names ? names : "NULL");
  free (names);
}

/* ------------------------------------------------------------ queue keys */

static void
test_queue_keys (void)
{
  struct queue_config qc;
  bool ok = true;

  for (size_t i = 0; queue_keys[i]; i++)
    ok &= CHECK (queue_key_known (queue_keys[i]));
  ok &= CHECK (!queue_key_known ("disk") && !queue_key_known ("direct"));
  queue_config_defaults (&qc);
  ok &= CHECK (queue_key_set (&qc, "elevator", "noop") == 0
               && qc.elevator == &elevator_noop);
  ok &= CHECK (queue_key_set (&qc, "elevator", "cfq") == -1
               && qc.elevator == &elevator_noop);
  ok &= CHECK (strcmp (last_error, "elevator=cfq: unknown elevator "
                       "(known: deadline, noop)") == 0);
  ok &= CHECK (queue_key_set (&qc, "queue-bytes", "8M") == 0
               && qc.queue_bytes == 8 * 1024 * 1024);
  ok &= CHECK (queue_key_set (&qc, "unplug-delay", "500us") == 0
               && qc.unplug_delay_ns == 500000);
  ok &= CHECK (queue_key_set (&qc, "ack", "dispatched") == 0
               && qc.ack == ACK_DISPATCHED);
  tap_ok (ok, "queue keys are known and set their field; an unknown "
          "elevator's message lists the table's names");
}

int
main (void)
{
  log_set_sink (&capture);
  tap_plan (9);
  test_types_complete ();
  test_keys_unique ();
  test_type_lookups ();
  test_type_names ();
  test_memory_type ();
  test_file_type ();
  test_nbd_type ();
  test_elevators ();
  test_queue_keys ();
  return tap_done ();
}
