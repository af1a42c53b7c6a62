/* plugq: reads, from a read-ahead window, at once or merged behind a
 * busy stream.
 *
 * Where read-ahead= is on, a stream read (1. below) or any read while
 * windows exist first asks the windows (queue_read_ahead.c); what they
 * cannot answer goes on as follows.
 *
 * A read that finds the backend idle goes at once (read_overlaid): at
 * depth 1 nothing is added.  A sequential stream of reads at depth is
 * what the kernel merges in its plug and scheduler; here it merges the
 * way waiting writes do behind a busy stream (queue.c,
 * behind_busy_stream):
 *
 *   1. A read continues a stream when it starts where a recent read
 *      ended (recent_read_ends, a lock-free hint: random reads never
 *      take the stream lock).  Such a read registers what it reads in a
 *      stream slot while it is on its way, so the next can find it.
 *   2. A stream read arriving while more than READ_BUSY reads are active
 *      (the feedback's count: arrived, not answered) that continues a
 *      read on its way, or the last read waiting behind one, waits if
 *      the backend queues reads (read_depth_queues: reads at depth take
 *      longer than alone): it joins that read's chain and sleeps.  On a
 *      backend with room for every read, the read goes at once.
 *   3. When a read on its way is done, its chain (reads back to back
 *      from its end) becomes one backend read: the chain's first read
 *      is woken to issue it, laying the queue's writes over it as any
 *      read does, and hands each read of the chain its part.  That read
 *      then takes the slot, so reads arriving meanwhile chain behind it.
 *
 * Only where each backend operation costs (a disk through O_DIRECT, a
 * remote, an RBD image): a backend that reads from memory gains nothing
 * from fewer, larger reads (unplug_count's rule for writes).
 *
 * Every read counts itself with the read feedback (elevator_reads.c)
 * from arrival to answer, so its latency, waiting included, is what the
 * elevator holds writes for.
 */
#include <config.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/minmax.h"
#include "queue_internal.h"

/* The largest merged read. */
#define READ_MERGE_MAX (1024 * 1024)

/* A read waiting in a chain, on its reader's stack. */
struct read_waiter {
  struct read_waiter *next;     /* the read back to back after it */
  uint64_t offset;
  uint32_t count;
  void *buf;
  int err;
  bool issue;                   /* woken to issue its chain's read */
  struct read_waiter *run;      /* with issue: the reads it carries,
                                 * itself first, linked by next */
  int slot;                     /* with issue: the slot it carries on */
  sem_t woken;
};

/* ------------------------------------------------------------ counting */

static void
count_read (struct queue *q, uint32_t count, uint64_t latency_ns, int err)
{
  uint64_t us = latency_ns / 1000;
  unsigned i = us == 0 ? 0 : 64 - __builtin_clzll (us);

  if (i >= LATENCY_BUCKETS)
    i = LATENCY_BUCKETS - 1;
  atomic_fetch_add_explicit (&q->reads.requests, 1, memory_order_relaxed);
  atomic_fetch_add_explicit (&q->reads.bytes, count, memory_order_relaxed);
  atomic_fetch_add_explicit (&q->reads.ticks_us, us, memory_order_relaxed);
  atomic_fetch_add_explicit (&q->reads.bucket[i], 1, memory_order_relaxed);
  if (err)
    atomic_fetch_add_explicit (&q->reads.errors, 1, memory_order_relaxed);
  read_feedback_done (&q->elevator.reads, latency_ns);
}

static void
count_backend_read (struct queue *q, uint32_t reads)
{
  atomic_fetch_add_explicit (&q->reads.backend_ops, 1, memory_order_relaxed);
  if (reads > 1)
    atomic_fetch_add_explicit (&q->reads.merges, reads - 1,
                               memory_order_relaxed);
}

/* ------------------------------------------------------------ hints */

static unsigned
read_end_slot (uint64_t end)
{
  return (end >> 12) & (RECENT_READ_ENDS - 1);
}

static bool
continues_recent_read (struct queue *q, uint64_t offset)
{
  return atomic_load_explicit (&q->read_streams.ends[read_end_slot (offset)],
                               memory_order_relaxed) == offset
    && offset != 0;
}

static void
note_read_end (struct queue *q, uint64_t end)
{
  atomic_store_explicit (&q->read_streams.ends[read_end_slot (end)], end,
                         memory_order_relaxed);
}

/* ------------------------------------------------------------ slots */

#define read_streams_assert_locked(q) \
  lock_assert_held (&(q)->read_streams.lock)

/* The slot whose read or chain ends at offset, or -1. */
static int
slot_continued (struct queue *q, uint64_t offset)
{
  struct read_streams *rs = &q->read_streams;

  read_streams_assert_locked (q);
  for (int i = 0; i < READ_STREAM_SLOTS; i++)
    if (rs->slot[i].busy && rs->slot[i].chain_end == offset)
      return i;
  return -1;
}

/* A free slot for a read ending at end, or -1 when all are taken (the
 * read then goes untracked: its stream may not merge behind it).
 */
static int
slot_claim (struct queue *q, uint64_t end)
{
  struct read_streams *rs = &q->read_streams;

  read_streams_assert_locked (q);
  for (int i = 0; i < READ_STREAM_SLOTS; i++)
    if (!rs->slot[i].busy) {
      rs->slot[i] = (struct read_stream_slot) {
        .busy = true, .chain_end = end, .first = NULL, .last = NULL,
      };
      return i;
    }
  return -1;
}

/* ------------------------------------------------------------ reading */

/* The backend read of a chain: into the first read's own buffer when it
 * is alone, else into one buffer whose parts go to each.  0 or errno.
 */
static int
read_run (struct queue *q, struct read_waiter *run)
{
  uint64_t start = run->offset, end = start;
  uint32_t reads = 0;
  unsigned char *buf;
  int err = 0;

  for (struct read_waiter *w = run; w; w = w->next) {
    end = w->offset + w->count;
    reads++;
  }
  count_backend_read (q, reads);
  if (reads == 1)
    return read_overlaid (q, run->buf, run->count, start) == -1
      ? (errno ? errno : EIO) : 0;
  buf = malloc (end - start);
  if (buf == NULL)
    return ENOMEM;
  if (read_overlaid (q, buf, end - start, start) == -1)
    err = errno ? errno : EIO;
  for (struct read_waiter *w = run; err == 0 && w; w = w->next)
    memcpy (w->buf, buf + (w->offset - start), w->count);
  free (buf);
  return err;
}

/* Slot i's read is done: its chain, if any, goes next, as one read
 * issued by the chain's first reader (woken here); else the slot is
 * free.  Takes the stream lock.
 */
static void
slot_done (struct queue *q, int i)
{
  struct read_streams *rs = &q->read_streams;
  struct read_stream_slot *s;
  struct read_waiter *run, *last, *rest = NULL;
  uint64_t bytes = 0;

  if (i < 0)
    return;
  lock_acquire (&rs->lock);
  s = &rs->slot[i];
  run = s->first;
  if (run == NULL) {
    s->busy = false;
    lock_release (&rs->lock);
    return;
  }
  /* At most READ_MERGE_MAX bytes go at once; the rest stays chained. */
  for (last = run; ; last = last->next) {
    bytes += last->count;
    if (last->next == NULL || bytes + last->next->count > READ_MERGE_MAX)
      break;
  }
  rest = last->next;
  last->next = NULL;
  s->first = rest;
  if (rest == NULL)
    s->last = NULL;
  run->issue = true;
  run->run = run;
  run->slot = i;
  lock_release (&rs->lock);
  sem_post (&run->woken);
}

/* The woken first read of a chain: reads the chain, hands each read its
 * part and answer, passes the slot on.  0 or its own errno.
 */
static int
issue_run (struct queue *q, struct read_waiter *me)
{
  struct read_waiter *w, *next;
  int err;

  err = read_run (q, me->run);
  slot_done (q, me->slot);
  for (w = me->run->next; w; w = next) {
    next = w->next;
    w->err = err;
    w->issue = false;
    sem_post (&w->woken);
  }
  return err;
}

/* A stream read that found the stream busy: chained behind slot i,
 * asleep until its read is done or it is woken to issue it.  Takes and
 * drops the stream lock (held on entry).
 */
static int
wait_in_chain (struct queue *q, int i, void *buf, uint32_t count,
               uint64_t offset)
{
  struct read_streams *rs = &q->read_streams;
  struct read_stream_slot *s = &rs->slot[i];
  struct read_waiter w = {
    .offset = offset, .count = count, .buf = buf,
  };
  int err;

  read_streams_assert_locked (q);
  sem_init (&w.woken, 0, 0);
  if (s->last)
    s->last->next = &w;
  else
    s->first = &w;
  s->last = &w;
  s->chain_end = offset + count;
  atomic_fetch_add_explicit (&rs->waited, 1, memory_order_relaxed);
  lock_release (&rs->lock);
  semaphore_wait (&w.woken);
  err = w.issue ? issue_run (q, &w) : w.err;
  sem_destroy (&w.woken);
  return err;
}

/* Whether a stream read that continues a read on its way should wait
 * for it: the stream is busy and the backend queues reads.
 */
static bool
stream_busy (struct queue *q)
{
  return atomic_load_explicit (&q->elevator.reads.active,
                               memory_order_relaxed) > q->read_streams.busy
    && read_depth_queues (&q->read_streams.depth);
}

/* A stream read: waits in a chain (*waited) if the stream is busy, else
 * goes at once in a slot of its own.  0 or errno.
 */
static int
stream_read (struct queue *q, void *buf, uint32_t count, uint64_t offset,
             bool *waited)
{
  struct read_streams *rs = &q->read_streams;
  int i, err;

  lock_acquire (&rs->lock);
  i = slot_continued (q, offset);
  *waited = i >= 0 && stream_busy (q);
  if (*waited)
    return wait_in_chain (q, i, buf, count, offset);
  i = slot_claim (q, offset + count);
  lock_release (&rs->lock);
  count_backend_read (q, 1);
  err = read_overlaid (q, buf, count, offset) == -1 ? (errno ? errno : EIO)
    : 0;
  slot_done (q, i);
  return err;
}

/* Whether the read-ahead windows may answer a read: a stream read may
 * open one, any read may find one.
 */
static bool
may_read_ahead (struct queue *q, bool stream)
{
  return q->read_streams.ahead_max
    && (stream || atomic_load_explicit (&q->read_streams.windows_listed,
                                        memory_order_relaxed));
}

int
read_request (struct queue *q, void *buf, uint32_t count, uint64_t offset)
{
  uint64_t start = monotonic_ns (), latency;
  unsigned active = read_feedback_arrive (&q->elevator.reads, start);
  bool stream = q->read_streams.merging && continues_recent_read (q, offset);
  /* A read answered from a window, or that waited in a chain, says
   * nothing of what a read alone costs the backend at this depth.
   */
  bool from_window = false, waited = false;
  int err;

  if (q->read_streams.merging)
    note_read_end (q, offset + count);
  if (may_read_ahead (q, stream)
      && read_ahead_read (q, buf, count, offset, stream)) {
    from_window = true;
    err = 0;
  }
  else if (stream)
    err = stream_read (q, buf, count, offset, &waited);
  else {
    count_backend_read (q, 1);
    err = read_overlaid (q, buf, count, offset) == -1 ? (errno ? errno : EIO)
      : 0;
  }
  latency = monotonic_ns () - start;
  if (q->read_streams.merging && !from_window && !waited && err == 0)
    read_depth_note (&q->read_streams.depth, active, latency);
  count_read (q, count, latency, err);
  return queue_answer (err);
}
