/* plugq: read-ahead for sequential streams of reads.
 *
 * The kernel reads ahead of a file read in order through its page
 * cache; a disk whose every backend operation costs (a file through
 * O_DIRECT, a remote, an RBD image: read_streams.merging) has no page
 * cache in front of it, and a stream of small reads pays a backend
 * operation each.  Here a stream reads ahead in windows, per disk:
 *
 *   1. A stream read (it starts where a recent read ended) that no
 *      window holds opens one at its own offset, 4 times its size, and
 *      fills it with one backend read laid over the queue as any read
 *      is (read_overlaid); then it takes its part.  Reads that arrive
 *      inside a window while it fills wait for it.
 *   2. A read that a filled window holds copies its part out and never
 *      reaches the backend.
 *   3. The first read that ends past the first quarter of a window
 *      opens the window after it, twice as large (at most read-ahead=),
 *      and fills it before it answers, while the reads behind it still
 *      find their data in the window before; the first past its half
 *      opens the one after that, so that two windows may be filling
 *      ahead of the reads.  A window whose last byte has been read is
 *      dropped.
 *   4. Every write, zero and trim forgets the windows it overlaps after
 *      its data is in the queue or the backend and before it is
 *      answered (read_ahead_forget).  A window is listed before its
 *      fill takes the queue's snapshot, so a fill either sees such a
 *      write (queued, in flight, or written) or is forgotten by it; a
 *      read that began before the write was answered was concurrent
 *      with it and may see either.
 *
 * A window never reaches past the disk's end nor over the backend's
 * largest request.  At most READ_AHEAD_WINDOWS windows per disk (the
 * least recently read filled one gives way); a read the windows cannot
 * serve (across two of them, after a failed fill, with every window
 * filling, short of memory) goes the ordinary way.  Nothing is shared
 * between disks.
 */
#include <config.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/fd_io.h"
#include "common/minmax.h"
#include "queue_internal.h"

/* A window's first size, in reads of the size of the one opening it. */
#define FIRST_WINDOW_READS 4

/* A read waiting for a window's fill, on its reader's stack. */
struct window_waiter {
  struct window_waiter *next;
  sem_t filled;
};

enum window_state { WINDOW_FILLING, WINDOW_FILLED, WINDOW_FAILED };

struct read_ahead_window {
  uint64_t offset, end;
  uint64_t used;                /* the table's clock when last read */
  _Atomic unsigned refs;        /* the table's while listed, and one for
                                 * each reader holding it */
  int slot;                     /* its place in the table, -1 once out of
                                 * it (a write overlapping it was answered,
                                 * it was read to its end or gave way) */
  enum window_state state;
  struct window_waiter *waiters;
  unsigned char *data;
};

#define read_ahead_assert_locked(q) \
  lock_assert_held (&(q)->read_streams.lock)

static uint64_t
window_length (const struct read_ahead_window *w)
{
  return w->end - w->offset;
}

/* Lock-free: the last reference frees the window. */
static void
window_put (struct read_ahead_window *w)
{
  if (atomic_fetch_sub_explicit (&w->refs, 1, memory_order_acq_rel) == 1) {
    free (w->data);
    free (w);
  }
}

/* Takes w, listed, out of the table, and drops the table's reference. */
static void
window_unlist (struct queue *q, struct read_ahead_window *w)
{
  struct read_streams *rs = &q->read_streams;

  read_ahead_assert_locked (q);
  rs->window[w->slot] = NULL;
  w->slot = -1;
  atomic_fetch_sub (&rs->windows_listed, 1);
  window_put (w);
}

/* The listed window holding [offset, end), or NULL. */
static struct read_ahead_window *
window_holding (struct queue *q, uint64_t offset, uint64_t end)
{
  read_ahead_assert_locked (q);
  for (int i = 0; i < READ_AHEAD_WINDOWS; i++) {
    struct read_ahead_window *w = q->read_streams.window[i];

    if (w && w->offset <= offset && end <= w->end)
      return w;
  }
  return NULL;
}

/* The listed window starting at offset, or NULL. */
static struct read_ahead_window *
window_at (struct queue *q, uint64_t offset)
{
  read_ahead_assert_locked (q);
  for (int i = 0; i < READ_AHEAD_WINDOWS; i++)
    if (q->read_streams.window[i]
        && q->read_streams.window[i]->offset == offset)
      return q->read_streams.window[i];
  return NULL;
}

/* A free slot of the table, else that of the least recently read filled
 * window (unlisted here); -1 when every window is being filled.
 */
static int
window_slot (struct queue *q)
{
  struct read_streams *rs = &q->read_streams;
  int oldest = -1;

  read_ahead_assert_locked (q);
  for (int i = 0; i < READ_AHEAD_WINDOWS; i++) {
    struct read_ahead_window *w = rs->window[i];

    if (w == NULL)
      return i;
    if (w->state == WINDOW_FILLED
        && (oldest == -1 || w->used < rs->window[oldest]->used))
      oldest = i;
  }
  if (oldest >= 0)
    window_unlist (q, rs->window[oldest]);
  return oldest;
}

/* The end of a window of length bytes at offset: not past the disk's
 * end nor over the backend's largest request.
 */
static uint64_t
window_end (const struct queue *q, uint64_t offset, uint64_t length)
{
  uint32_t largest = q->backend->limits.maximum;

  if (largest)
    length = MIN (length, (uint64_t) largest);
  return MIN (offset + length, q->backend->size);
}

/* Lists a window [offset, end) for the caller to fill, who holds the
 * reference returned besides the table's.  NULL when the table has no
 * slot or memory is short.  Its buffer comes with the fill, outside the
 * stream lock: up to read-ahead= bytes may be a fresh mapping.
 */
static struct read_ahead_window *
window_open (struct queue *q, uint64_t offset, uint64_t end)
{
  struct read_streams *rs = &q->read_streams;
  struct read_ahead_window *w;
  int i;

  read_ahead_assert_locked (q);
  i = window_slot (q);
  if (i == -1)
    return NULL;
  if ((w = calloc (1, sizeof *w)) == NULL)
    return NULL;
  w->offset = offset;
  w->end = end;
  w->used = rs->clock;
  w->slot = i;
  w->state = WINDOW_FILLING;
  atomic_init (&w->refs, 2);
  rs->window[i] = w;
  /* Before the fill's snapshot of the queue (read_ahead_forget). */
  atomic_fetch_add (&rs->windows_listed, 1);
  return w;
}

/* The window a stream read that no window holds opens, or NULL. */
static struct read_ahead_window *
open_first (struct queue *q, uint32_t count, uint64_t offset)
{
  uint64_t length = MIN ((uint64_t) count * FIRST_WINDOW_READS,
                         q->read_streams.ahead_max);
  uint64_t end = window_end (q, offset, length);

  if (end <= offset + count)
    return NULL;                /* nothing to read ahead */
  return window_open (q, offset, end);
}

/* The window after prev, twice its size up to read-ahead=, or NULL
 * when prev reaches the disk's end or the window is there already.
 */
static struct read_ahead_window *
open_after (struct queue *q, const struct read_ahead_window *prev)
{
  uint64_t length = MIN (2 * window_length (prev),
                         q->read_streams.ahead_max);

  if (prev->end >= q->backend->size || window_at (q, prev->end))
    return NULL;
  return window_open (q, prev->end, window_end (q, prev->end, length));
}

/* The window the read ending at end in w opens, or NULL: past w's first
 * quarter the one after w, and past its half the one after that, so
 * that a stream whose reads in flight fill a window (64 KiB reads at
 * QD16 in 1 MiB windows) finds the next one read already.
 */
static struct read_ahead_window *
maybe_open_next (struct queue *q, const struct read_ahead_window *w,
                 uint64_t end)
{
  const struct read_ahead_window *next;

  read_ahead_assert_locked (q);
  if (end <= w->offset + window_length (w) / 4)
    return NULL;
  next = window_at (q, w->end);
  if (next == NULL)
    return open_after (q, w);
  if (end <= w->offset + window_length (w) / 2)
    return NULL;
  return open_after (q, next);
}

/* Fills w, opened by the caller, and wakes the reads waiting for it.
 * Called without the stream lock; takes and drops it.  No one reads
 * w->data before w is WINDOW_FILLED.
 */
static void
window_fill (struct queue *q, struct read_ahead_window *w)
{
  struct read_streams *rs = &q->read_streams;
  struct window_waiter *waiter, *next;
  bool ok;

  w->data = alloc_aligned (window_length (w),
                           MAX (q->backend->buffer_align, 64u));
  ok = w->data != NULL;
  if (ok) {
    atomic_fetch_add_explicit (&q->reads.backend_ops, 1,
                               memory_order_relaxed);
    ok = read_overlaid (q, w->data, window_length (w), w->offset) == 0;
  }
  if (ok)                       /* read_ahead_bytes: what windows hold */
    atomic_fetch_add_explicit (&rs->ahead_bytes, window_length (w),
                               memory_order_relaxed);
  lock_acquire (&rs->lock);
  w->state = ok ? WINDOW_FILLED : WINDOW_FAILED;
  if (!ok && w->slot >= 0)
    window_unlist (q, w);
  waiter = w->waiters;
  w->waiters = NULL;
  lock_release (&rs->lock);
  for (; waiter; waiter = next) {
    next = waiter->next;
    sem_post (&waiter->filled);
  }
}

/* Asleep until w is filled.  Drops the stream lock meanwhile (held on
 * entry and on return).
 */
static void
window_wait (struct queue *q, struct read_ahead_window *w)
{
  struct window_waiter me = { .next = w->waiters };

  read_ahead_assert_locked (q);
  sem_init (&me.filled, 0, 0);
  w->waiters = &me;
  lock_release (&q->read_streams.lock);
  semaphore_wait (&me.filled);
  lock_acquire (&q->read_streams.lock);
  sem_destroy (&me.filled);
}

/* The window holding the read, filled, with a reference for the caller
 * (opened and filled here when none holds it and the read is a stream
 * read), or NULL.  Takes and drops the stream lock (held on entry and
 * on return).
 */
static struct read_ahead_window *
filled_window (struct queue *q, uint32_t count, uint64_t offset, bool stream)
{
  struct read_ahead_window *w = window_holding (q, offset, offset + count);

  if (w) {
    atomic_fetch_add_explicit (&w->refs, 1, memory_order_relaxed);
    if (w->state == WINDOW_FILLING)
      window_wait (q, w);
  }
  else if (stream && (w = open_first (q, count, offset)) != NULL) {
    lock_release (&q->read_streams.lock);
    window_fill (q, w);
    lock_acquire (&q->read_streams.lock);
  }
  if (w && w->state == WINDOW_FAILED) {
    window_put (w);
    return NULL;
  }
  return w;
}

bool
read_ahead_read (struct queue *q, void *buf, uint32_t count,
                 uint64_t offset, bool stream)
{
  struct read_streams *rs = &q->read_streams;
  struct read_ahead_window *w, *next = NULL;
  uint64_t end = offset + count;

  lock_acquire (&rs->lock);
  w = filled_window (q, count, offset, stream);
  if (w == NULL) {
    lock_release (&rs->lock);
    return false;
  }
  w->used = ++rs->clock;
  next = maybe_open_next (q, w, end);
  if (end == w->end && w->slot >= 0)
    window_unlist (q, w);       /* read to its end */
  lock_release (&rs->lock);
  memcpy (buf, w->data + (offset - w->offset), count);
  window_put (w);
  atomic_fetch_add_explicit (&rs->ahead_hits, 1, memory_order_relaxed);
  if (next) {
    window_fill (q, next);
    window_put (next);
  }
  return true;
}

void
read_ahead_forget (struct queue *q, uint64_t count, uint64_t offset)
{
  struct read_streams *rs = &q->read_streams;

  if (!read_ahead_windows_listed (q))
    return;
  lock_acquire (&rs->lock);
  for (int i = 0; i < READ_AHEAD_WINDOWS; i++) {
    struct read_ahead_window *w = rs->window[i];

    if (w && w->offset < offset + count && offset < w->end)
      window_unlist (q, w);
  }
  lock_release (&rs->lock);
}

void
read_ahead_forget_all (struct queue *q)
{
  lock_acquire (&q->read_streams.lock);
  for (int i = 0; i < READ_AHEAD_WINDOWS; i++)
    if (q->read_streams.window[i])
      window_unlist (q, q->read_streams.window[i]);
  lock_release (&q->read_streams.lock);
}
