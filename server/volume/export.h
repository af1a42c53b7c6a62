/* plugq: an export in service: a name clients open, from its addition
 * until its removal is over.
 *
 * It holds its current table (a struct linear, replaced when the volume
 * grows) and the disks that table reaches (disk.h).  Each connection
 * holds a handle: the export, the table it opened with (so its size
 * stays what the client was told), and its session.
 *
 * Requests pass a gate.  A handle counts its requests inside the engine
 * (export_enter, export_leave); a removal closes the export
 * (export_close): from then on a request is refused at the gate, the
 * removal waits until no handle has one inside, flushes the disks, and
 * only then are the refused requests answered: ESHUTDOWN (NBD's "the
 * server is shutting down"), which tells the client that everything it
 * was answered for before is durable, or EIO when that last flush
 * failed.  nbdkit 1.32 passes the error on and keeps the connection
 * open; the client decides when to go (docs/design.md).
 *
 * The gate costs a request two atomic operations on its own connection's
 * counter and a load of its own export's state: nothing another export
 * shares.  Handles are added and removed under the export's lock, at
 * open and close only.
 */
#ifndef PLUGQ_EXPORT_H
#define PLUGQ_EXPORT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/queue.h>

#include "common/lock.h"
#include "disk.h"
#include "linear.h"

enum export_state {
  EXPORT_OPEN,                  /* serving */
  EXPORT_CLOSING,               /* refusing; requests inside finish */
  EXPORT_CLOSED,                /* flushed; refused requests answered */
};

struct export_handle {
  struct export *export;
  struct linear *version;       /* held: the table it opened with */
  struct session *session;
  _Atomic unsigned inside;      /* requests between enter and leave */
  LIST_ENTRY (export_handle) link;  /* under the export's lock */
};

LIST_HEAD (export_handle_list, export_handle);

struct export {
  char *name;
  bool is_volume;
  _Atomic unsigned refs;        /* export_hold, export_release */
  _Atomic int state;            /* enum export_state */

  struct lock lock;             /* everything below */
  pthread_cond_t changed;       /* the state moved on, or the last
                                 * request of a closing export left */
  int closed_errno;             /* refused requests' answer, once CLOSED */
  struct linear *version;       /* held: the current table */
  struct disk **disks;          /* held: every disk version reaches */
  size_t nr_disks;
  struct export_handle_list handles;
  unsigned nr_handles;
};

/* An open export over version (the caller's hold passes to it) and disks
 * (held anew), with one holder.  NULL when out of memory (nothing taken).
 */
struct export *export_new (const char *name, bool is_volume,
                           struct linear *version,
                           struct disk *const *disks, size_t nr_disks);
void export_hold (struct export *);
/* The last release frees it, releasing its table and its disks.  NULL
 * is a no-op.
 */
void export_release (struct export *);

/* A handle for a new connection, holding the export and the current
 * table.  NULL with errno ESHUTDOWN once the export is closing, or
 * ENOMEM.
 */
struct export_handle *export_attach (struct export *);
/* The connection closed (no request of it is running): frees the
 * handle.  Its hold on the export passes to the caller, who releases it.
 * Returns the handles left.
 */
unsigned export_detach (struct export_handle *);
unsigned export_clients (struct export *);

/* The current table, held for the caller. */
struct linear *export_version (struct export *);
/* Whether the export's table reaches d. */
bool export_uses_disk (struct export *, const struct disk *d);
/* A grown volume: version (the caller's hold passes) becomes current,
 * the old one stays with the connections that opened it.  disks, every
 * disk the new table reaches (the old table's among them), replaces the
 * export's: the array and its holds pass to the export.
 */
void export_replace_version (struct export *, struct linear *version,
                             struct disk **disks, size_t nr_disks);

/* Closes the gate, waits until no request is inside, flushes the table's
 * disks and answers the requests refused meanwhile.  0, or -1 with the
 * flush's errno.  Called once; the export stays closed.
 */
int export_close (struct export *);
/* After export_close: stops holding the disks now rather than when the
 * last handle goes (remove --force).  The handles' tables still name
 * them, but no request passes the gate any more.
 */
void export_release_disks (struct export *);

/* Refused requests wait here: export_close's answer, -1 with errno. */
int export_refused (struct export_handle *);

/* Wakes export_close once the last request left a closing export. */
void export_wake_closer (struct export *);

/* The gate.  seq_cst on both sides: a request counts itself, then reads
 * the state; export_close sets the state, then reads the counters.  So
 * either the closer sees the request counted and waits for it, or the
 * request sees the export closing and turns back.
 */
static inline bool
export_enter (struct export_handle *h)
{
  atomic_fetch_add (&h->inside, 1);
  if (__builtin_expect (atomic_load (&h->export->state) == EXPORT_OPEN, 1))
    return true;
  if (atomic_fetch_sub (&h->inside, 1) == 1)
    export_wake_closer (h->export);
  return false;
}

static inline void
export_leave (struct export_handle *h)
{
  if (atomic_fetch_sub (&h->inside, 1) == 1
      && __builtin_expect (atomic_load (&h->export->state) != EXPORT_OPEN, 0))
    export_wake_closer (h->export);
}

#endif /* PLUGQ_EXPORT_H */
