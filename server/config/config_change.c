/* plugq: a change of the configuration in service, carried out all or
 * nothing (config_change.h).
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "config_build.h"
#include "config_change.h"
#include "config_check.h"
#include "queue/queue.h"

struct change {
  struct live_config *live;
  struct config_plan *plan;
};

/* ---------------------------------------------------------------- names */

static bool
in_list (struct entry *const *list, size_t n, const struct entry *e)
{
  for (size_t i = 0; i < n; i++)
    if (list[i] == e)
      return true;
  return false;
}

/* The entry that serves a name once the plan is carried out: one it
 * adds, else the live one.
 */
static struct entry *
resolve_planned (void *arg, const char *name)
{
  struct change *c = arg;

  for (size_t i = 0; i < c->plan->nr_add; i++)
    if (strcmp (c->plan->add[i]->name, name) == 0)
      return c->plan->add[i];
  return config_find_entry (&c->live->config, name);
}

static const struct plan_grow *
grow_of (const struct config_plan *p, const struct entry *live)
{
  for (size_t i = 0; i < p->nr_grow; i++)
    if (p->grow[i].live == live)
      return &p->grow[i];
  return NULL;
}

/* Calls fn for the name of every entry of the configuration the plan
 * leaves, in its order: wanted's (reload), or the live ones it keeps and
 * then those it adds.  Stops at the first -1.
 */
static int
each_final_name (struct change *c,
                 int (*fn) (struct change *, const char *name, void *arg),
                 void *arg)
{
  const struct config_plan *p = c->plan;
  const struct config *live = &c->live->config;

  if (p->replace_all) {
    for (size_t i = 0; i < p->wanted->nr_entries; i++)
      if (fn (c, p->wanted->entries[i]->name, arg) == -1)
        return -1;
    return 0;
  }
  for (size_t i = 0; i < live->nr_entries; i++)
    if (!in_list (p->remove, p->nr_remove, live->entries[i])
        && fn (c, live->entries[i]->name, arg) == -1)
      return -1;
  for (size_t i = 0; i < p->nr_add; i++)
    if (fn (c, p->add[i]->name, arg) == -1)
      return -1;
  return 0;
}

/* ---------------------------------------------------------------- checks */

/* A volume of the final configuration that uses a member whole (no
 * range): it would change with the member's size.
 */
struct whole_user {
  const char *member;
  const char *found;            /* the volume's name */
};

static int
find_whole_user (struct change *c, const char *name, void *arg)
{
  struct whole_user *w = arg;
  struct entry *v = resolve_planned (c, name);
  struct entry *spec = v;

  /* A reload's wanted entry says what the volume will be made of. */
  if (c->plan->replace_all)
    for (size_t i = 0; i < c->plan->wanted->nr_entries; i++)
      if (strcmp (c->plan->wanted->entries[i]->name, name) == 0)
        spec = c->plan->wanted->entries[i];
  if (v->kind != ENTRY_VOLUME)
    return 0;
  for (size_t i = 0; i < spec->nr_members; i++)
    if (!spec->members[i].ranged
        && strcmp (spec->members[i].name, w->member) == 0) {
      w->found = spec->name;
      return -1;
    }
  return 0;
}

/* A grown volume changes size; a volume using it whole would have to
 * grow with it, in the middle of its own table if the grown one is not
 * its last member.  Refused: such a volume takes a range of it instead.
 */
static int
check_grows (struct change *c)
{
  const struct config_plan *p = c->plan;

  for (size_t i = 0; i < p->nr_grow; i++) {
    struct whole_user w = { p->grow[i].live->name, NULL };

    if (each_final_name (c, find_whole_user, &w) == -1) {
      log_error ("linear=%s: cannot grow: linear=%s uses it whole, and "
                 "would change size under its clients (give it a range "
                 "of %s instead)", p->grow[i].spec, w.found, w.member);
      return -1;
    }
  }
  return 0;
}

/* A name being drained is still taken: its clients still use it. */
static int
check_names_free (struct change *c)
{
  for (size_t i = 0; i < c->plan->nr_add; i++) {
    struct entry *e = c->plan->add[i];
    struct export *d = registry_find_draining (c->live->registry, e->name);
    const char *outer;

    if (d == NULL)
      continue;
    outer = config_entry_context (e);
    log_error ("%s=%s: the name is still taken by an export being drained "
               "(%u clients connected; remove --force %s ends that)",
               config_kind_key (e->kind), e->name, export_clients (d),
               e->name);
    log_set_context (outer);
    export_release (d);
    return -1;
  }
  return 0;
}

/* ---------------------------------------------------------------- building */

static int
build_added (struct change *c, const struct config_resolver *rs)
{
  struct config_plan *p = c->plan;
  struct live_config *l = c->live;

  for (size_t i = 0; i < p->nr_add; i++) {
    struct entry *e = p->add[i];

    if (e->kind != ENTRY_DISK)
      continue;
    if (config_build_disk (e) == -1
        || (l->started && disk_start (e->disk, l->timers) == -1))
      return -1;
  }
  for (size_t i = 0; i < p->nr_add; i++)
    if (p->add[i]->kind == ENTRY_VOLUME
        && config_build_volume (p->add[i], rs) == -1)
      return -1;
  for (size_t i = 0; i < p->nr_grow; i++) {
    struct plan_grow *g = &p->grow[i];

    if (config_build_grown (g->live, g->extra, g->nr_extra, g->spec, rs,
                            &g->version, &g->disks, &g->nr_disks) == -1)
      return -1;
    for (size_t j = 0; j < g->nr_disks; j++)
      disk_hold (g->disks[j]);
  }
  return 0;
}

/* Undoes build_added: the new disks are retired (their threads stopped,
 * their backends closed) as the entries let them go.
 */
static void
unbuild_added (struct config_plan *p)
{
  for (size_t i = 0; i < p->nr_add; i++) {
    export_release (p->add[i]->export);
    p->add[i]->export = NULL;
  }
  for (size_t i = 0; i < p->nr_add; i++) {
    disk_release (p->add[i]->disk);
    p->add[i]->disk = NULL;
  }
}

/* --------------------------------------------------------------- the table */

static int
add_to_table (struct change *c, const char *name, void *arg)
{
  struct export_table *building = arg;
  struct entry *e = resolve_planned (c, name);
  const struct plan_grow *g = grow_of (c->plan, e);

  if (export_table_add (building, e->export, g ? g->version : NULL,
                        e->kind == ENTRY_DISK ? e->disk : NULL) == -1) {
    log_error ("%s=%s: %m", config_kind_key (e->kind), name);
    return -1;
  }
  return 0;
}

/* The table of exports the plan leaves. */
static struct export_table *
table_for (struct change *c)
{
  const struct config *c_final = c->plan->replace_all
    ? c->plan->wanted : &c->live->config;
  const char *name = c_final->default_export_name;
  struct export_table *t = export_table_new ();

  if (t == NULL) {
    log_error ("malloc: %m");
    return NULL;
  }
  if (each_final_name (c, add_to_table, t) == -1) {
    export_table_release (t);
    return NULL;
  }
  t->default_export = name ? export_table_find (t, name)
    : t->nr_exports ? t->exports[0] : NULL;
  return t;
}

/* ---------------------------------------------------------------- commit */

/* Under the registry's lock: no connection opens or closes meanwhile. */
static int
check_removals (struct config_plan *p)
{
  for (size_t i = 0; i < p->nr_remove; i++) {
    struct entry *e = p->remove[i];
    unsigned n = export_clients (e->export);

    if (n > 0) {
      /* No FILE:LINE: a reload removes what the file no longer has. */
      log_error ("%s=%s: cannot remove it: %u client%s connected (remove "
                 "--drain or --force refuses them)", config_kind_key (e->kind),
                 e->name, n, n == 1 ? " is" : "s are");
      return -1;
    }
  }
  return 0;
}

static int
check_sets (struct live_config *l, struct config_plan *p)
{
  for (size_t i = 0; i < p->nr_set; i++) {
    struct entry *e = p->set[i].live;
    const char *key = queue_config_unlocked_key (e->disk->queue,
                                                 &p->set[i].qc);
    unsigned n = key ? registry_disk_clients (l->registry, e->disk) : 0;

    if (n > 0) {
      log_error ("disk=%s: %s= changes only while no client is connected "
                 "to the disk or a volume over it (%u connected): every "
                 "request reads it without the queue's lock", e->name, key,
                 n);
      return -1;
    }
  }
  return 0;
}

/* Queue keys last: only a new elevator's init can fail, and none of the
 * elevators has one (a failure there leaves the earlier sets done).
 */
static int
apply_sets (struct live_config *l, struct config_plan *p)
{
  for (size_t i = 0; i < p->nr_set; i++) {
    struct disk *d = p->set[i].live->disk;
    bool idle = registry_disk_clients (l->registry, d) == 0;

    if (queue_set_config (d->queue, &p->set[i].qc, idle) == -1)
      return -1;
  }
  return 0;
}

static int
commit (void *arg)
{
  struct change *c = arg;
  struct config_plan *p = c->plan;

  if ((p->removal == PLAN_REMOVE_SAFE && check_removals (p) == -1)
      || check_sets (c->live, p) == -1)
    return -1;
  for (size_t i = 0; i < p->nr_grow; i++) {
    struct plan_grow *g = &p->grow[i];

    export_replace_version (g->live->export, g->version, g->disks,
                            g->nr_disks);
    g->version = NULL;          /* the export's now */
    g->disks = NULL;
    g->nr_disks = 0;
  }
  return apply_sets (c->live, p);
}

/* ---------------------------------------------------------------- after */

/* After a removal closed an export: its clients, refused from now on,
 * keep it (drain) until they go, or it lets its disks go now (force).
 */
static void
settle_clients (struct live_config *l, struct config_plan *p,
                struct entry *e, live_output out, void *arg)
{
  unsigned n = export_clients (e->export);
  char line[NAME_MAX_LEN + 160];

  if (p->removal == PLAN_REMOVE_FORCE) {
    export_release_disks (e->export);
    if (n == 0)
      return;
    snprintf (line, sizeof line, "%s: %u client%s refused with ESHUTDOWN "
              "until %s", e->name, n, n == 1 ? "" : "s",
              n == 1 ? "it disconnects" : "they disconnect");
    out (arg, line);
    return;
  }
  if (p->removal != PLAN_REMOVE_DRAIN || n == 0)
    return;
  registry_add_draining (l->registry, e->export);
  /* The last client may have gone before the export was listed. */
  if (export_clients (e->export) == 0)
    registry_drop_draining (l->registry, e->export);
  snprintf (line, sizeof line, "%s: draining: %u client%s refused with "
            "ESHUTDOWN; it goes when the last one disconnects", e->name, n,
            n == 1 ? "" : "s");
  out (arg, line);
}

/* Closes each removed export (its gate, then a flush of its disks);
 * the entries let them go later.  -1 if a flush failed.
 */
static int
close_removed (struct live_config *l, struct config_plan *p,
               live_output out, void *arg)
{
  int r = 0;

  for (size_t i = 0; i < p->nr_remove; i++) {
    struct entry *e = p->remove[i];
    char line[NAME_MAX_LEN + 64];

    if (export_close (e->export) == -1) {
      log_error ("%s=%s: removed, but its last flush failed (%m): data "
                 "may be lost", config_kind_key (e->kind), e->name);
      r = -1;
    }
    snprintf (line, sizeof line, "removed %s=%s", config_kind_key (e->kind),
              e->name);
    out (arg, line);
    settle_clients (l, p, e, out, arg);
  }
  return r;
}

/* The wanted entries take over what serves the names they keep. */
static void
take_over_kept (struct live_config *l, struct config_plan *p)
{
  for (size_t i = 0; i < p->wanted->nr_entries; i++) {
    struct entry *w = p->wanted->entries[i];
    struct entry *old;

    if (in_list (p->add, p->nr_add, w))
      continue;
    old = config_find_entry (&l->config, w->name);
    w->disk = old->disk;
    w->export = old->export;
    old->disk = NULL;
    old->export = NULL;
  }
}

/* The live configuration becomes what the plan made it. */
static void
adopt (struct live_config *l, struct config_plan *p)
{
  if (p->replace_all) {
    struct config old = l->config;

    take_over_kept (l, p);
    l->config = *p->wanted;
    l->config.base = NULL;
    config_init (p->wanted, NULL);
    config_free (&old);         /* what is left: the removed entries */
    return;
  }
  for (size_t i = 0; i < p->nr_remove; i++) {
    config_unlink_entry (&l->config, p->remove[i]);
    config_free_entry (p->remove[i]);
  }
  for (size_t i = 0; i < p->nr_set; i++)
    p->set[i].live->qc = p->set[i].qc;
  if (p->wanted) {
    /* An add: its entries join (room was checked before the commit). */
    for (size_t i = 0; i < p->wanted->nr_entries; i++)
      l->config.entries[l->config.nr_entries++] = p->wanted->entries[i];
    p->wanted->nr_entries = 0;
  }
}

static void
say_changes (const struct config_plan *p, live_output out, void *arg)
{
  char line[512];

  for (size_t i = 0; i < p->nr_add; i++) {
    snprintf (line, sizeof line, "added %s=%s",
              config_kind_key (p->add[i]->kind), p->add[i]->name);
    out (arg, line);
  }
  for (size_t i = 0; i < p->nr_grow; i++) {
    snprintf (line, sizeof line, "grew linear=%s", p->grow[i].spec);
    out (arg, line);
  }
  for (size_t i = 0; i < p->nr_set; i++) {
    snprintf (line, sizeof line, "set disk=%s", p->set[i].live->name);
    out (arg, line);
  }
}

/* Room for an add's entries in the live configuration, so that adopting
 * them after the commit cannot fail.
 */
static int
reserve_entries (struct live_config *l, const struct config_plan *p)
{
  size_t n = l->config.nr_entries + (p->wanted ? p->wanted->nr_entries : 0);
  struct entry **e;

  if (p->replace_all || p->wanted == NULL)
    return 0;
  e = realloc (l->config.entries, (n ? n : 1) * sizeof *e);
  if (e == NULL) {
    log_error ("realloc: %m");
    return -1;
  }
  l->config.entries = e;
  return 0;
}

int
live_apply_plan (struct live_config *l, struct config_plan *p,
                 live_output out, void *arg)
{
  struct change c = { l, p };
  struct config_resolver rs = { resolve_planned, &c };
  struct export_table *t;
  int r;

  if (check_grows (&c) == -1 || check_names_free (&c) == -1
      || reserve_entries (l, p) == -1)
    return -1;
  if (build_added (&c, &rs) == -1 || (t = table_for (&c)) == NULL) {
    unbuild_added (p);
    return -1;
  }
  if (registry_commit (l->registry, t, commit, &c) == -1) {
    unbuild_added (p);
    return -1;
  }
  say_changes (p, out, arg);
  r = close_removed (l, p, out, arg);
  adopt (l, p);
  return r;
}

int
live_publish_entries (struct live_config *l)
{
  struct config_plan p = { 0 };
  struct change c = { l, &p };
  struct export_table *t;

  t = table_for (&c);
  if (t == NULL)
    return -1;
  return registry_commit (l->registry, t, NULL, NULL);
}
