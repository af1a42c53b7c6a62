/* plugq: the control commands that change the configuration in service
 * (config_live.h): each reads and checks its arguments with the same code
 * as the command line, makes a plan and has config_change.c carry it out.
 */

#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "config_change.h"
#include "config_check.h"
#include "config_diff.h"
#include "config_file.h"
#include "config_keys.h"
#include "config_live.h"
#include "queue/queue_keys.h"

/* --------------------------------------------------------------- directory */

/* Relative paths in configuration keys are read from the directory
 * nbdkit started in, as at startup, though nbdkit (daemonized) has moved
 * to / since: the working directory is process-wide, so it moves back
 * only for the reading, which only the control thread does.  Nothing
 * else in the process uses relative paths after startup.
 */
struct startup_dir {
  int back;                     /* where to return, or -1: never left */
};

static bool
same_dir (int a, int b)
{
  struct stat sa, sb;

  return fstat (a, &sa) == 0 && fstat (b, &sb) == 0
    && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

static void
enter_startup_dir (struct live_config *l, struct startup_dir *s)
{
  s->back = open (".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (s->back >= 0 && (l->startup_dir < 0 || same_dir (s->back,
                                                       l->startup_dir)
                       || fchdir (l->startup_dir) == -1)) {
    close (s->back);
    s->back = -1;
  }
}

static void
leave_startup_dir (struct startup_dir *s)
{
  if (s->back < 0)
    return;
  if (fchdir (s->back) == -1)
    log_error ("cannot return to the working directory: %m");
  close (s->back);
}

/* ---------------------------------------------------------------- add */

int
live_add (struct live_config *l, const struct key_value *keys, size_t n,
          live_output out, void *arg)
{
  struct config wanted;
  struct config_reader r;
  struct config_plan p = { 0 };
  struct startup_dir dir;
  bool read = true;
  int ret = -1;

  config_init (&wanted, &l->config);
  config_reader_init (&r, &wanted, CONFIG_SOURCE_COMMAND);
  enter_startup_dir (l, &dir);
  for (size_t i = 0; i < n && read; i++)
    read = config_reader_key (&r, keys[i].key, keys[i].value) == 0;
  leave_startup_dir (&dir);
  if (!read)
    goto out;
  if (wanted.nr_entries == 0) {
    log_error ("add: nothing to add: give disk=NAME and its backend keys, "
               "or linear=NAME:MEMBERS");
    goto out;
  }
  if (config_check_entries (&wanted) == -1)
    goto out;
  p.wanted = &wanted;
  for (size_t i = 0; i < wanted.nr_entries; i++)
    if (plan_add (&p, wanted.entries[i]) == -1)
      goto out;
  ret = live_apply_plan (l, &p, out, arg);
 out:
  config_plan_free (&p);
  config_free (&wanted);
  return ret;
}

/* ---------------------------------------------------------------- remove */

/* The live volume (other than skip) that names `name` as a member. */
static const struct entry *
volume_using (const struct config *c, const char *name)
{
  for (size_t i = 0; i < c->nr_entries; i++) {
    const struct entry *v = c->entries[i];

    for (size_t j = 0; v->kind == ENTRY_VOLUME && j < v->nr_members; j++)
      if (strcmp (v->members[j].name, name) == 0)
        return v;
  }
  return NULL;
}

struct draining_user {
  const struct disk *disk;
  const char *found;
  char name[NAME_MAX_LEN + 1];
};

static void
find_draining_user (void *arg, struct export *e)
{
  struct draining_user *u = arg;

  if (u->found == NULL && export_uses_disk (e, u->disk)) {
    snprintf (u->name, sizeof u->name, "%s", e->name);
    u->found = u->name;
  }
}

/* A removed disk must be out of every table but its own export's. */
static int
check_removable (struct live_config *l, const struct entry *e,
                 enum live_remove_mode mode)
{
  const struct entry *v = volume_using (&l->config, e->name);
  const char *def = l->config.default_export_name;

  if (v) {
    log_error ("remove %s: linear=%s uses it (remove %s first)", e->name,
               v->spec, v->name);
    return -1;
  }
  if (def && strcmp (def, e->name) == 0) {
    log_error ("remove %s: it is the default export (default-export=%s): "
               "name another one in the config= file and reload first",
               e->name, def);
    return -1;
  }
  if (mode == LIVE_REMOVE_FORCE && e->kind == ENTRY_DISK) {
    struct draining_user u = { .disk = e->disk };

    registry_each_draining (l->registry, find_draining_user, &u);
    if (u.found) {
      log_error ("remove --force %s: volume %s is still draining over it "
                 "(remove --force %s first)", e->name, u.found, u.found);
      return -1;
    }
  }
  return 0;
}

/* remove --force of an export already draining: its disks go now. */
static int
force_draining (struct live_config *l, const char *name, live_output out,
                void *arg)
{
  struct export *e = registry_find_draining (l->registry, name);
  char line[NAME_MAX_LEN + 64];

  if (e == NULL) {
    log_error ("remove %s: no disk or volume of that name", name);
    return -1;
  }
  export_release_disks (e);
  registry_drop_draining (l->registry, e);
  snprintf (line, sizeof line, "removed %s (it was draining)", name);
  out (arg, line);
  export_release (e);
  return 0;
}

static int
not_found (struct live_config *l, const char *name,
           enum live_remove_mode mode, live_output out, void *arg)
{
  struct export *e;
  unsigned n;

  if (mode == LIVE_REMOVE_FORCE)
    return force_draining (l, name, out, arg);
  e = registry_find_draining (l->registry, name);
  if (e == NULL) {
    log_error ("remove %s: no disk or volume of that name", name);
    return -1;
  }
  n = export_clients (e);
  export_release (e);
  log_error ("remove %s: already draining (%u client%s connected); "
             "remove --force %s ends that", name, n, n == 1 ? "" : "s",
             name);
  return -1;
}

int
live_remove (struct live_config *l, const char *name,
             enum live_remove_mode mode, live_output out, void *arg)
{
  struct entry *e = config_find_entry (&l->config, name);
  struct config_plan p = { 0 };
  int ret;

  if (e == NULL)
    return not_found (l, name, mode, out, arg);
  if (check_removable (l, e, mode) == -1 || plan_remove (&p, e) == -1) {
    config_plan_free (&p);
    return -1;
  }
  p.removal = mode == LIVE_REMOVE_SAFE ? PLAN_REMOVE_SAFE
    : mode == LIVE_REMOVE_DRAIN ? PLAN_REMOVE_DRAIN : PLAN_REMOVE_FORCE;
  ret = live_apply_plan (l, &p, out, arg);
  config_plan_free (&p);
  return ret;
}

/* ---------------------------------------------------------------- set */

int
live_set (struct live_config *l, const char *name,
          const struct key_value *keys, size_t n, live_output out, void *arg)
{
  struct entry *e = config_find_entry (&l->config, name);
  struct config_plan p = { 0 };
  struct queue_config qc;
  int ret;

  if (e == NULL) {
    log_error ("set %s: no disk of that name", name);
    return -1;
  }
  if (e->kind != ENTRY_DISK) {
    log_error ("set %s: linear=%s is a volume: queue keys belong to its "
               "disks", name, e->spec);
    return -1;
  }
  if (n == 0) {
    log_error ("set %s: no KEY=VALUE given", name);
    return -1;
  }
  qc = e->qc;
  for (size_t i = 0; i < n; i++) {
    if (!queue_key_known (keys[i].key)) {
      log_error ("set %s: %s= is not a queue key (ack, elevator, "
                 "unplug-delay, unplug-thresh, max-merge, queue-bytes, "
                 "queue-requests, write-expire, bypass, read-target, read-ahead)",
                 name,
                 keys[i].key);
      return -1;
    }
    if (queue_key_set (&qc, keys[i].key, keys[i].value) == -1)
      return -1;
  }
  if (queue_config_equal (&qc, &e->qc)) {
    out (arg, "nothing changed");
    return 0;
  }
  if (plan_set (&p, e, &qc) == -1)
    return -1;
  ret = live_apply_plan (l, &p, out, arg);
  config_plan_free (&p);
  return ret;
}

/* ---------------------------------------------------------------- grow */

/* Whether entry e (by its members' names, in c) reaches volume v. */
static bool
reaches (const struct config *c, const struct entry *e, const struct entry *v,
         unsigned depth)
{
  if (e == v)
    return true;
  if (e->kind != ENTRY_VOLUME || depth > c->nr_entries)
    return false;
  for (size_t i = 0; i < e->nr_members; i++) {
    const struct entry *m = config_find_entry (c, e->members[i].name);

    if (m && reaches (c, m, v, depth + 1))
      return true;
  }
  return false;
}

/* The members of `grow`, as linear= would read them, each serving. */
static int
check_grow_members (struct live_config *l, struct entry *v, const char *key,
                    const char *value, struct member *m, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    struct entry *t = config_find_entry (&l->config, m[i].name);

    if (t == NULL) {
      log_error ("%s=%s: unknown member '%s' (no disk= or linear= of that "
                 "name)", key, value, m[i].name);
      return -1;
    }
    if (reaches (&l->config, t, v, 0)) {
      log_error ("%s=%s: cycle in volume members: %s -> %s%s", key, value,
                 v->name, t->name, t == v ? "" : " -> ...");
      return -1;
    }
    m[i].target = t;
  }
  return 0;
}

/* "A,B,C" from the members as given. */
static char *
join (char *const *items, size_t n)
{
  size_t len = 1;
  char *s;

  for (size_t i = 0; i < n; i++)
    len += strlen (items[i]) + 1;
  s = malloc (len);
  if (s == NULL)
    return NULL;
  s[0] = '\0';
  for (size_t i = 0; i < n; i++) {
    if (i)
      strcat (s, ",");
    strcat (s, items[i]);
  }
  return s;
}

/* Room for the members in v's list, and its new spec (*spec), so that
 * nothing can fail once the grown table is in service.
 */
static int
prepare_entry (struct entry *v, const char *list, size_t n, char **spec)
{
  struct member *m = realloc (v->members,
                              (v->nr_members + n) * sizeof *m);

  if (m == NULL || asprintf (spec, "%s,%s", v->spec, list) == -1) {
    if (m)
      v->members = m;
    log_error ("grow %s: %m", v->name);
    return -1;
  }
  v->members = m;
  return 0;
}

int
live_grow (struct live_config *l, const char *name, char *const *members,
           size_t n, live_output out, void *arg)
{
  struct entry *v = config_find_entry (&l->config, name);
  struct config_plan p = { 0 };
  struct member *extra = NULL;
  size_t nr_extra = 0;
  char *list = NULL, *value = NULL, *spec = NULL;
  int ret = -1;

  if (v == NULL || v->kind != ENTRY_VOLUME) {
    log_error (v ? "grow %s: disk=%s is not a volume"
               : "grow %s: no volume of that name", name, name);
    return -1;
  }
  if (n == 0) {
    log_error ("grow %s: no member given", name);
    return -1;
  }
  list = join (members, n);
  if (list == NULL || asprintf (&value, "%s:%s", name, list) == -1) {
    log_error ("grow %s: %m", name);
    goto out;
  }
  if (config_parse_members ("grow", value, name, list, &extra, &nr_extra)
      == -1
      || check_grow_members (l, v, "grow", value, extra, nr_extra) == -1
      || prepare_entry (v, list, nr_extra, &spec) == -1
      || plan_grow (&p, v, extra, nr_extra, spec) == -1)
    goto out;
  ret = live_apply_plan (l, &p, out, arg);
  if (ret == 0) {
    /* The members move to the volume's entry. */
    memcpy (&v->members[v->nr_members], extra, nr_extra * sizeof *extra);
    v->nr_members += nr_extra;
    free (extra);
    extra = NULL;
    nr_extra = 0;
    free (v->spec);
    v->spec = spec;
    spec = NULL;
  }
 out:
  config_plan_free (&p);
  config_free_members (extra, nr_extra);
  free (spec);
  free (value);
  free (list);
  return ret;
}

/* ---------------------------------------------------------------- reload */

static int
read_again (struct live_config *l, struct config *wanted)
{
  struct startup_dir dir;
  int r;

  enter_startup_dir (l, &dir);
  r = config_read_sources (wanted, l->args, l->nr_args);
  leave_startup_dir (&dir);
  if (r == -1 || config_add_default_disk (wanted) == -1
      || config_check_entries (wanted) == -1
      || config_check_settings (wanted) == -1)
    return -1;
  return 0;
}

static bool
same_default (const struct config *a, const struct config *b)
{
  const char *x = a->default_export_name, *y = b->default_export_name;

  return (x == NULL && y == NULL) || (x && y && strcmp (x, y) == 0);
}

int
live_reload (struct live_config *l, live_output out, void *arg)
{
  struct config wanted;
  struct config_plan p = { 0 };
  bool new_default;
  int ret = -1;

  if (l->config.config_path == NULL) {
    log_error ("reload: the server has no config= file to read");
    return -1;
  }
  config_init (&wanted, NULL);
  if (read_again (l, &wanted) == -1
      || config_diff (&l->config, &wanted, &p) == -1)
    goto out;
  new_default = !same_default (&l->config, &wanted);
  /* Applied even when it changes nothing: the entries read now, with
   * the lines they come from, replace the old ones.
   */
  ret = live_apply_plan (l, &p, out, arg);
  if (ret == 0 && new_default)
    out (arg, "default export changed");
  else if (ret == 0 && p.nr_add + p.nr_remove + p.nr_set + p.nr_grow == 0)
    out (arg, "nothing changed");
 out:
  config_plan_free (&p);
  config_free (&wanted);
  return ret;
}
