/* plugq: the table of exports in service and its registry
 * (export_table.h).
 */
#include <config.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/lock.h"
#include "export_table.h"

struct registry {
  struct lock lock;             /* table and the draining list */
  struct export_table *table;
  struct export **draining;     /* held */
  size_t nr_draining;
};

/* ------------------------------------------------------------ tables */

struct export_table *
export_table_new (void)
{
  struct export_table *t = calloc (1, sizeof *t);

  if (t)
    atomic_init (&t->refs, 1);
  return t;
}

static bool
grow (void **array, size_t n, size_t size)
{
  void *p = realloc (*array, (n + 1) * size);

  if (p == NULL)
    return false;
  *array = p;
  return true;
}

int
export_table_add (struct export_table *t, struct export *e,
                  struct linear *version, struct disk *d)
{
  if (!grow ((void **) &t->exports, t->nr_exports, sizeof *t->exports)
      || !grow ((void **) &t->versions, t->nr_exports, sizeof *t->versions)
      || (d && (!grow ((void **) &t->disks, t->nr_disks, sizeof *t->disks)
                || !grow ((void **) &t->queues, t->nr_disks,
                          sizeof *t->queues)))) {
    errno = ENOMEM;
    return -1;
  }
  export_hold (e);
  t->exports[t->nr_exports] = e;
  if (version)
    linear_hold (version);
  else
    version = export_version (e);
  t->versions[t->nr_exports++] = version;
  if (d) {
    disk_hold (d);
    t->disks[t->nr_disks] = d;
    t->queues[t->nr_disks++] = d->queue;
  }
  return 0;
}

void
export_table_hold (struct export_table *t)
{
  atomic_fetch_add_explicit (&t->refs, 1, memory_order_relaxed);
}

/* The last reader may be a request thread's close or the stats writer:
 * a disk whose last holder was this table is retired there.
 */
void
export_table_release (struct export_table *t)
{
  if (t == NULL
      || atomic_fetch_sub_explicit (&t->refs, 1, memory_order_acq_rel) != 1)
    return;
  for (size_t i = 0; i < t->nr_exports; i++) {
    linear_release (t->versions[i]);
    export_release (t->exports[i]);
  }
  for (size_t i = 0; i < t->nr_disks; i++)
    disk_release (t->disks[i]);
  free (t->exports);
  free (t->versions);
  free (t->disks);
  free (t->queues);
  free (t);
}

struct export *
export_table_find (const struct export_table *t, const char *name)
{
  for (size_t i = 0; i < t->nr_exports; i++)
    if (strcmp (t->exports[i]->name, name) == 0)
      return t->exports[i];
  return NULL;
}

/* ------------------------------------------------------------ registry */

struct registry *
registry_new (void)
{
  struct registry *r = calloc (1, sizeof *r);

  if (r == NULL || (r->table = export_table_new ()) == NULL) {
    free (r);
    return NULL;
  }
  lock_init (&r->lock);
  return r;
}

void
registry_free (struct registry *r)
{
  if (r == NULL)
    return;
  export_table_release (r->table);
  for (size_t i = 0; i < r->nr_draining; i++)
    export_release (r->draining[i]);
  free (r->draining);
  lock_destroy (&r->lock);
  free (r);
}

struct export_table *
registry_table (struct registry *r)
{
  struct export_table *t;

  lock_acquire (&r->lock);
  t = r->table;
  export_table_hold (t);
  lock_release (&r->lock);
  return t;
}

int
registry_commit (struct registry *r, struct export_table *t,
                 int (*commit) (void *arg), void *arg)
{
  struct export_table *old;

  lock_acquire (&r->lock);
  if (commit && commit (arg) == -1) {
    lock_release (&r->lock);
    export_table_release (t);
    return -1;
  }
  old = r->table;
  r->table = t;
  lock_release (&r->lock);
  /* Outside the lock: this may retire the disks it held last. */
  export_table_release (old);
  return 0;
}

static unsigned
clients_through (struct export *e, const struct disk *d)
{
  return export_uses_disk (e, d) ? export_clients (e) : 0;
}

unsigned
registry_disk_clients (struct registry *r, const struct disk *d)
{
  unsigned n = 0;

  lock_assert_held (&r->lock);
  for (size_t i = 0; i < r->table->nr_exports; i++)
    n += clients_through (r->table->exports[i], d);
  for (size_t i = 0; i < r->nr_draining; i++)
    n += clients_through (r->draining[i], d);
  return n;
}

static bool
is_draining (struct registry *r, const char *name)
{
  lock_assert_held (&r->lock);
  for (size_t i = 0; i < r->nr_draining; i++)
    if (strcmp (r->draining[i]->name, name) == 0)
      return true;
  return false;
}

struct export_handle *
registry_open (struct registry *r, const char *name)
{
  struct export *e;
  struct export_handle *h = NULL;

  lock_acquire (&r->lock);
  e = name == NULL || *name == '\0' ? r->table->default_export
    : export_table_find (r->table, name);
  if (e)
    h = export_attach (e);
  else
    errno = name && is_draining (r, name) ? ESHUTDOWN : ENOENT;
  lock_release (&r->lock);
  return h;
}

/* Takes e off the draining list; false if it was not on it. */
static bool
take_draining (struct registry *r, struct export *e)
{
  lock_assert_held (&r->lock);
  for (size_t i = 0; i < r->nr_draining; i++)
    if (r->draining[i] == e) {
      memmove (&r->draining[i], &r->draining[i + 1],
               (r->nr_draining - i - 1) * sizeof *r->draining);
      r->nr_draining--;
      return true;
    }
  return false;
}

void
registry_close (struct registry *r, struct export_handle *h)
{
  struct export *e = h->export, *drained = NULL;

  /* The handle holds e until export_release below, so e is the same
   * export while the list is searched.
   */
  lock_acquire (&r->lock);
  if (export_detach (h) == 0 && take_draining (r, e))
    drained = e;
  lock_release (&r->lock);
  export_release (drained);
  export_release (e);
}

void
registry_add_draining (struct registry *r, struct export *e)
{
  lock_acquire (&r->lock);
  if (grow ((void **) &r->draining, r->nr_draining, sizeof *r->draining)) {
    export_hold (e);
    r->draining[r->nr_draining++] = e;
  }
  /* Without memory for the list, the export goes with its last client
   * all the same (its handles hold it); it is only missing from list.
   */
  lock_release (&r->lock);
}

struct export *
registry_find_draining (struct registry *r, const char *name)
{
  struct export *e = NULL;

  lock_acquire (&r->lock);
  for (size_t i = 0; i < r->nr_draining && e == NULL; i++)
    if (strcmp (r->draining[i]->name, name) == 0) {
      e = r->draining[i];
      export_hold (e);
    }
  lock_release (&r->lock);
  return e;
}

bool
registry_drop_draining (struct registry *r, struct export *e)
{
  bool dropped;

  lock_acquire (&r->lock);
  dropped = take_draining (r, e);
  lock_release (&r->lock);
  if (dropped)
    export_release (e);
  return dropped;
}

void
registry_each_draining (struct registry *r,
                        void (*fn) (void *arg, struct export *), void *arg)
{
  struct export **copy;
  size_t n;

  lock_acquire (&r->lock);
  n = r->nr_draining;
  copy = calloc (n ? n : 1, sizeof *copy);
  if (copy == NULL)
    n = 0;
  for (size_t i = 0; i < n; i++) {
    copy[i] = r->draining[i];
    export_hold (copy[i]);
  }
  lock_release (&r->lock);
  for (size_t i = 0; i < n; i++) {
    fn (arg, copy[i]);
    export_release (copy[i]);
  }
  free (copy);
}
