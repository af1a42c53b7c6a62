/* plugq: an export in service (export.h). */
#include <config.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "export.h"
#include "queue/session.h"

/* Holds each of disks, appended to e's; false when out of memory. */
static bool
hold_disks (struct export *e, struct disk *const *disks, size_t n)
{
  struct disk **all = realloc (e->disks, (e->nr_disks + n) * sizeof *all);

  if (all == NULL && e->nr_disks + n > 0)
    return false;
  e->disks = all;
  for (size_t i = 0; i < n; i++) {
    disk_hold (disks[i]);
    e->disks[e->nr_disks++] = disks[i];
  }
  return true;
}

struct export *
export_new (const char *name, bool is_volume, struct linear *version,
            struct disk *const *disks, size_t nr_disks)
{
  struct export *e = calloc (1, sizeof *e);

  if (e == NULL || (e->name = strdup (name)) == NULL
      || !hold_disks (e, disks, nr_disks)) {
    if (e)
      free (e->name);
    free (e);
    return NULL;
  }
  e->is_volume = is_volume;
  atomic_init (&e->refs, 1);
  atomic_init (&e->state, EXPORT_OPEN);
  lock_init (&e->lock);
  pthread_cond_init (&e->changed, NULL);
  e->version = version;
  LIST_INIT (&e->handles);
  return e;
}

void
export_hold (struct export *e)
{
  atomic_fetch_add_explicit (&e->refs, 1, memory_order_relaxed);
}

/* The last release of a disk retires it (a drain and a flush), so it
 * happens outside e->lock: the array is taken out under it first.
 */
static void
release_disk_array (struct disk **disks, size_t n)
{
  for (size_t i = 0; i < n; i++)
    disk_release (disks[i]);
  free (disks);
}

void
export_release (struct export *e)
{
  if (e == NULL
      || atomic_fetch_sub_explicit (&e->refs, 1, memory_order_acq_rel) != 1)
    return;
  linear_release (e->version);
  release_disk_array (e->disks, e->nr_disks);
  pthread_cond_destroy (&e->changed);
  lock_destroy (&e->lock);
  free (e->name);
  free (e);
}

struct export_handle *
export_attach (struct export *e)
{
  struct export_handle *h = calloc (1, sizeof *h);

  if (h == NULL || (h->session = session_new ()) == NULL) {
    free (h);
    errno = ENOMEM;
    return NULL;
  }
  lock_acquire (&e->lock);
  if (atomic_load (&e->state) != EXPORT_OPEN) {
    lock_release (&e->lock);
    session_free (h->session);
    free (h);
    errno = ESHUTDOWN;
    return NULL;
  }
  h->export = e;
  h->version = e->version;
  linear_hold (h->version);
  atomic_init (&h->inside, 0);
  LIST_INSERT_HEAD (&e->handles, h, link);
  e->nr_handles++;
  export_hold (e);
  lock_release (&e->lock);
  return h;
}

unsigned
export_detach (struct export_handle *h)
{
  struct export *e = h->export;
  unsigned left;

  lock_acquire (&e->lock);
  LIST_REMOVE (h, link);
  left = --e->nr_handles;
  lock_release (&e->lock);
  linear_release (h->version);
  session_free (h->session);
  free (h);
  return left;
}

unsigned
export_clients (struct export *e)
{
  unsigned n;

  lock_acquire (&e->lock);
  n = e->nr_handles;
  lock_release (&e->lock);
  return n;
}

struct linear *
export_version (struct export *e)
{
  struct linear *v;

  lock_acquire (&e->lock);
  v = e->version;
  linear_hold (v);
  lock_release (&e->lock);
  return v;
}

bool
export_uses_disk (struct export *e, const struct disk *d)
{
  bool uses = false;

  lock_acquire (&e->lock);
  for (size_t i = 0; i < e->nr_disks && !uses; i++)
    uses = e->disks[i] == d;
  lock_release (&e->lock);
  return uses;
}

void
export_replace_version (struct export *e, struct linear *version,
                        struct disk **disks, size_t nr_disks)
{
  struct linear *old;
  struct disk **old_disks;
  size_t old_nr;

  lock_acquire (&e->lock);
  old = e->version;
  old_disks = e->disks;
  old_nr = e->nr_disks;
  e->version = version;
  e->disks = disks;
  e->nr_disks = nr_disks;
  lock_release (&e->lock);
  linear_release (old);
  release_disk_array (old_disks, old_nr);
}

/* errno kept: the request that woke the closer answers with it. */
void
export_wake_closer (struct export *e)
{
  int saved = errno;

  lock_acquire (&e->lock);
  pthread_cond_broadcast (&e->changed);
  lock_release (&e->lock);
  errno = saved;
}

/* Until no handle has a request inside.  Drops e->lock while it waits. */
static void
wait_requests_left (struct export *e)
{
  struct export_handle *h;

  lock_assert_held (&e->lock);
 again:
  LIST_FOREACH (h, &e->handles, link)
    if (atomic_load (&h->inside) > 0) {
      lock_wait (&e->changed, &e->lock);
      goto again;               /* the list may have changed meanwhile */
    }
}

int
export_close (struct export *e)
{
  struct linear *v;
  int err = 0;

  lock_acquire (&e->lock);
  atomic_store (&e->state, EXPORT_CLOSING);
  wait_requests_left (e);
  v = e->version;
  linear_hold (v);
  lock_release (&e->lock);

  /* Everything answered before the gate closed goes to the backends. */
  if (linear_flush (v, NULL) == -1)
    err = errno;
  linear_release (v);

  lock_acquire (&e->lock);
  e->closed_errno = err ? EIO : ESHUTDOWN;
  atomic_store (&e->state, EXPORT_CLOSED);
  pthread_cond_broadcast (&e->changed);
  lock_release (&e->lock);
  if (err) {
    errno = err;
    return -1;
  }
  return 0;
}

void
export_release_disks (struct export *e)
{
  struct disk **disks;
  size_t n;

  lock_acquire (&e->lock);
  disks = e->disks;
  n = e->nr_disks;
  e->disks = NULL;
  e->nr_disks = 0;
  lock_release (&e->lock);
  release_disk_array (disks, n);
}

int
export_refused (struct export_handle *h)
{
  struct export *e = h->export;
  int err;

  lock_acquire (&e->lock);
  while (atomic_load (&e->state) != EXPORT_CLOSED)
    lock_wait (&e->changed, &e->lock);
  err = e->closed_errno;
  lock_release (&e->lock);
  errno = err;
  return -1;
}
