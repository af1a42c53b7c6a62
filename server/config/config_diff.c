/* plugq: plans, and what a reload changes (config_diff.h). */

#include <config.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "config_check.h"
#include "config_diff.h"

/* ---------------------------------------------------------------- plans */

static int
append (void **array, size_t *n, size_t size, const void *item)
{
  char *p = realloc (*array, (*n + 1) * size);

  if (p == NULL) {
    log_error ("realloc: %m");
    return -1;
  }
  memcpy (p + *n * size, item, size);
  *array = p;
  (*n)++;
  return 0;
}

int
plan_add (struct config_plan *p, struct entry *e)
{
  return append ((void **) &p->add, &p->nr_add, sizeof e, &e);
}

int
plan_remove (struct config_plan *p, struct entry *e)
{
  return append ((void **) &p->remove, &p->nr_remove, sizeof e, &e);
}

int
plan_set (struct config_plan *p, struct entry *live,
          const struct queue_config *qc)
{
  struct plan_set s = { .live = live, .qc = *qc };

  return append ((void **) &p->set, &p->nr_set, sizeof s, &s);
}

int
plan_grow (struct config_plan *p, struct entry *live,
           const struct member *extra, size_t nr_extra, const char *spec)
{
  struct plan_grow g = {
    .live = live, .extra = extra, .nr_extra = nr_extra, .spec = strdup (spec),
  };

  if (g.spec == NULL) {
    log_error ("strdup: %m");
    return -1;
  }
  if (append ((void **) &p->grow, &p->nr_grow, sizeof g, &g) == -1) {
    free (g.spec);
    return -1;
  }
  return 0;
}

void
config_plan_free (struct config_plan *p)
{
  for (size_t i = 0; i < p->nr_grow; i++) {
    free (p->grow[i].spec);
    linear_release (p->grow[i].version);
    for (size_t j = 0; j < p->grow[i].nr_disks; j++)
      disk_release (p->grow[i].disks[j]);
    free (p->grow[i].disks);
  }
  free (p->add);
  free (p->remove);
  free (p->set);
  free (p->grow);
  memset (p, 0, sizeof *p);
}

/* --------------------------------------------------------------- comparing */

bool
queue_config_equal (const struct queue_config *a,
                    const struct queue_config *b)
{
  return a->elevator == b->elevator && a->ack == b->ack
    && a->unplug_delay_ns == b->unplug_delay_ns
    && a->unplug_thresh == b->unplug_thresh
    && a->max_merge == b->max_merge && a->queue_bytes == b->queue_bytes
    && a->queue_requests == b->queue_requests
    && a->write_expire_ns == b->write_expire_ns && a->bypass == b->bypass
    && a->read_target_ns == b->read_target_ns
    && a->read_ahead == b->read_ahead;
}

static const struct key_value *
find_key (const struct entry *d, const char *key)
{
  for (size_t i = 0; i < d->nr_backend_keys; i++)
    if (strcmp (d->backend_keys[i].key, key) == 0)
      return &d->backend_keys[i];
  return NULL;
}

/* The first backend key of a whose value b does not have: true, with
 * it in *key; false when every key of a has the same value in b.
 */
static bool
key_differs (const struct entry *a, const struct entry *b,
             const char **key)
{
  for (size_t i = 0; i < a->nr_backend_keys; i++) {
    const struct key_value *kb = find_key (b, a->backend_keys[i].key);

    if (kb == NULL || strcmp (kb->value, a->backend_keys[i].value) != 0) {
      *key = a->backend_keys[i].key;
      return true;
    }
  }
  return false;
}

/* "key=value" as d has it, or "no key=" (static buffer of the caller). */
static const char *
spell (const struct entry *d, const char *key, char *buf, size_t size)
{
  const struct key_value *kv = find_key (d, key);

  if (kv)
    snprintf (buf, size, "%s=%s", kv->key, kv->value);
  else
    snprintf (buf, size, "no %s=", key);
  return buf;
}

/* A live disk serves on from the backend it opened: a reload cannot
 * change it under its clients.
 */
static int
check_backend_kept (const struct entry *live, const struct entry *want)
{
  char now[512], was[512];
  const char *key, *outer;

  if (!key_differs (live, want, &key) && !key_differs (want, live, &key))
    return 0;
  outer = config_entry_context (want);
  log_error ("disk=%s: its backend changed (%s, was %s): a live disk keeps "
             "its backend; remove it and add it back", want->name,
             spell (want, key, now, sizeof now),
             spell (live, key, was, sizeof was));
  log_set_context (outer);
  return -1;
}

/* The number of live's members that want's list starts with, or
 * SIZE_MAX when want's do not start with all of live's.
 */
static size_t
kept_members (const struct entry *live, const struct entry *want)
{
  if (want->nr_members < live->nr_members)
    return SIZE_MAX;
  for (size_t i = 0; i < live->nr_members; i++)
    if (strcmp (live->members[i].text, want->members[i].text) != 0)
      return SIZE_MAX;
  return live->nr_members;
}

static int
diff_entry (struct config_plan *p, struct entry *live, struct entry *want)
{
  size_t kept;

  if (live->kind != want->kind)
    return plan_remove (p, live) == -1 ? -1 : plan_add (p, want);
  if (live->kind == ENTRY_DISK) {
    if (check_backend_kept (live, want) == -1)
      return -1;
    return queue_config_equal (&live->qc, &want->qc)
      ? 0 : plan_set (p, live, &want->qc);
  }
  kept = kept_members (live, want);
  if (kept == SIZE_MAX)         /* members changed: a new volume */
    return plan_remove (p, live) == -1 ? -1 : plan_add (p, want);
  if (kept == want->nr_members)
    return 0;
  return plan_grow (p, live, &want->members[kept],
                    want->nr_members - kept, want->spec);
}

static bool
same_string (const char *a, const char *b)
{
  return (a == NULL && b == NULL) || (a && b && strcmp (a, b) == 0);
}

/* What only a restart changes: the writer and the socket started with
 * the server.
 */
static int
check_settings_kept (const struct config *live, const struct config *want)
{
  const char *what = NULL;

  if (!same_string (live->stats_path, want->stats_path))
    what = "stats=";
  else if (live->stats_format != want->stats_format)
    what = "stats-format=";
  else if (live->stats_interval_ns != want->stats_interval_ns)
    what = "stats-interval=";
  else if (!same_string (live->control_path, want->control_path))
    what = "control=";
  if (what == NULL)
    return 0;
  log_error ("%s changed: it takes effect only when the server restarts "
             "(nothing was changed)", what);
  return -1;
}


static struct entry *
find_own (const struct config *c, const char *name)
{
  for (size_t i = 0; i < c->nr_entries; i++)
    if (strcmp (c->entries[i]->name, name) == 0)
      return c->entries[i];
  return NULL;
}

static bool
planned (struct entry *const *list, size_t n, const char *name)
{
  for (size_t i = 0; i < n; i++)
    if (strcmp (list[i]->name, name) == 0)
      return true;
  return false;
}

/* Whether volume v of wanted reaches (through members, by name) an entry
 * the plan replaces: a kept table still points at what is going.
 */
static bool
reaches_replaced (const struct config *want, const struct config_plan *p,
                  const struct entry *v, unsigned depth)
{
  if (depth > want->nr_entries)
    return false;               /* the checks ruled cycles out */
  for (size_t i = 0; i < v->nr_members; i++) {
    const char *name = v->members[i].name;
    const struct entry *m = find_own (want, name);

    if (planned (p->remove, p->nr_remove, name))
      return true;
    if (m && m->kind == ENTRY_VOLUME
        && reaches_replaced (want, p, m, depth + 1))
      return true;
  }
  return false;
}

/* A volume the plan keeps (or grows) over a member it replaces is
 * replaced too, or its table would stay on the old member; until no
 * more are.
 */
static int
replace_dependents (const struct config *live, struct config *want,
                    struct config_plan *p)
{
  bool again = true;

  while (again) {
    again = false;
    for (size_t i = 0; i < want->nr_entries; i++) {
      struct entry *w = want->entries[i];
      struct entry *l = find_own (live, w->name);

      if (w->kind != ENTRY_VOLUME || l == NULL || l->kind != ENTRY_VOLUME
          || planned (p->add, p->nr_add, w->name)
          || !reaches_replaced (want, p, w, 0))
        continue;
      for (size_t j = 0; j < p->nr_grow; j++)
        if (p->grow[j].live == l) {
          free (p->grow[j].spec);
          p->grow[j] = p->grow[--p->nr_grow];
          break;
        }
      if (plan_remove (p, l) == -1 || plan_add (p, w) == -1)
        return -1;
      again = true;
    }
  }
  return 0;
}

int
config_diff (const struct config *live, struct config *want,
             struct config_plan *p)
{
  memset (p, 0, sizeof *p);
  p->wanted = want;
  p->replace_all = true;
  if (check_settings_kept (live, want) == -1)
    return -1;
  for (size_t i = 0; i < live->nr_entries; i++) {
    struct entry *l = live->entries[i];
    struct entry *w = find_own (want, l->name);

    if (w == NULL ? plan_remove (p, l) == -1 : diff_entry (p, l, w) == -1)
      return -1;
  }
  for (size_t i = 0; i < want->nr_entries; i++)
    if (find_own (live, want->entries[i]->name) == NULL
        && plan_add (p, want->entries[i]) == -1)
      return -1;
  return replace_dependents (live, want, p);
}
