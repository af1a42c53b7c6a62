/* plugq: writes that go around the queue.
 *
 * On a backend whose writes only reach memory (the page cache, RAM:
 * backend.writes_to_memory) a write that nothing can merge with gains
 * nothing by waiting in the queue: the order writes reach memory in
 * does not matter, and the backend's own write costs less than the
 * copy, the trees and the hand-over of the way through the queue.  As
 * blk-mq issues a request straight to a device with a free tag when it
 * finds nothing to merge it with, such a write goes to the backend from
 * the request's own thread and the client's buffer, and is answered once
 * it is written.
 *
 * A write goes around the queue (bypass_allowed) when:
 *   - the disk has bypass=auto (the default) and a backend that writes
 *     to memory, synchronously, at any alignment (q->bypass);
 *   - no piece queued or in flight through the queue holds any of its
 *     bytes (pieces_between, in_flight_between): pieces elsewhere may
 *     stay queued, as the order writes to distinct bytes reach memory in
 *     does not matter;
 *   - a dispatch token is free and, unless it is FUA, no FLUSH waits to
 *     start while no backend flush runs (take_bypass_token): the writer
 *     holds it while it writes, so the backend never sees more than
 *     max_writers writers, and a FLUSH is never kept waiting by writes
 *     that keep arriving (FUA writes cannot: each waits for it);
 *   - no other write going around the queue touches its bytes: two
 *     writes over the same bytes are never on the backend at once;
 *   - it does not start where a recent write ended (continues_recent_write),
 *     unless it goes as it came (write_goes_as_it_came): max-merge bytes
 *     or more, or READ_FORWARD_MIN or more while reads compete.  A
 *     sequential stream is what the queue merges, so from its second
 *     write on it is queued; but while reads compete, merging large
 *     writes into memory is one more copy of each byte, and the pieces
 *     it leaves queued make reads take the queue lock (queue_presence.c):
 *     on the page cache's mix, 64 KiB writes as they came ran at 0.95x
 *     nbdkit file's MB/s against 0.85x merged (docs/design.md).
 *
 * A FUA write goes around the same way and then, once written, takes a
 * ticket for the next backend flush (queue_flush.c, step 1), which it
 * shares with every FLUSH and FUA waiting then: group commit is in the
 * flush, not in the write.
 *
 * On an asynchronous backend (a remote, an RBD image) a write whose
 * request waits for it anyway (ack=dispatched, not FUA) goes around the
 * queue the same way when nothing is queued, nothing in flight touches
 * its bytes and it does not continue a recent write (q->bypass_waiting,
 * async_bypass_allowed): its thread submits it from the client's
 * buffer and sleeps until it completes.  It needs no dispatch token
 * (submitting is a send, and a FLUSH does not wait for writes nobody
 * was answered for), only one of the BYPASS_SLOTS, and counts with the
 * queue's batches against the backend's max_in_flight.  So does a write of
 * max-merge bytes or more (not FUA) whatever the ack mode
 * (q->bypass_large): nothing can merge with it, and with ack=queued
 * the queue would only copy it before sending it as it is.  And so does
 * a write of READ_FORWARD_MIN or more while reads compete
 * (read_feedback_competing) on a backend where a read waits behind the
 * writes sent before it (backend.reads_behind_writes, a remote: one
 * connection carries commands in order, and a merged write keeps the
 * remote's worker and the connection longer than the client's own):
 * q->forward_while_reading.  Sent as it came, it puts nothing larger
 * ahead of a read than the client did, and the client's own depth
 * bounds the writes in flight, as a server that only forwards does;
 * the queue still merges smaller writes, within the read allowance.
 *
 * What stays true: the write is answered only once it is on the backend
 * (more than ack=queued promises), so every FLUSH answered after it
 * covers it; its error is its own answer, not latched; a queued piece
 * over its bytes waits for it (in_flight_between asks
 * bypass_overlaps); reads see the backend, as for any write not yet
 * answered.
 */
#include <config.h>

#include <errno.h>

#include "queue_internal.h"

/* Under the lock: whether [start, end) touches a write going around the
 * queue.
 */
bool
bypass_overlaps (const struct queue *q, uint64_t start, uint64_t end)
{
  queue_assert_locked (q);
  /* Slots are claimed lowest first: stop once every busy one is seen. */
  for (unsigned i = 0, seen = 0; seen < q->nr_bypassing; i++) {
    if (q->bypassing[i].end == 0)
      continue;
    seen++;
    if (q->bypassing[i].end > start && q->bypassing[i].start < end)
      return true;
  }
  return false;
}

/* Out of line: only writes that may be forwarded ask. */
bool
reads_compete_now (const struct queue *q)
{
  return read_feedback_competing (&q->elevator.reads, monotonic_ns ());
}

/* What both rules ask: a free slot, no stream to leave to the queue
 * (unless the write goes as it came: write_goes_as_it_came), and nothing
 * in flight over its bytes.  Always inlined: every bypassed write asks,
 * and gcc otherwise leaves it out of line (docs/benchmarks-quick.md).
 */
static inline __attribute__ ((always_inline)) bool
may_go_around (struct queue *q, uint64_t count, uint64_t offset)
{
  queue_assert_locked (q);
  return q->nr_bypassing < BYPASS_SLOTS
    && (write_goes_as_it_came (q, count)
        || !continues_recent_write (q, offset))
    && !in_flight_between (q, offset, offset + count);
}

static bool
bypass_allowed (struct queue *q, uint64_t count, uint64_t offset,
                unsigned flags)
{
  queue_assert_locked (q);
  return may_go_around (q, count, offset)
    && !pieces_between (&q->by_offset, offset, offset + count)
    && take_bypass_token (q, (flags & REQ_FUA) != 0);
}

/* The same for a write on an asynchronous backend that waits for its
 * answer or is of max-merge bytes or more (queue_pwrite asked): no
 * token, nothing queued, and room under the backend's max_in_flight.
 */
static bool
async_bypass_allowed (struct queue *q, uint64_t count, uint64_t offset)
{
  queue_assert_locked (q);
  return q->nr_queued == 0 && !q->stopping
    && ops_in_flight (q) < q->max_in_flight
    && may_go_around (q, count, offset);
}

/* Under the lock, with a token (none on an asynchronous backend): a
 * free slot, holding the range.
 */
static unsigned
claim_slot (struct queue *q, uint64_t count, uint64_t offset)
{
  unsigned i = 0;

  queue_assert_locked (q);
  while (q->bypassing[i].end != 0)
    i++;
  q->bypassing[i].start = offset;
  q->bypassing[i].end = offset + count;
  q->nr_bypassing++;
  return i;
}

static void
release_slot (struct queue *q, unsigned i)
{
  queue_assert_locked (q);
  q->bypassing[i].start = q->bypassing[i].end = 0;
  q->nr_bypassing--;
}

/* The write as one backend operation from the client's buffer, without
 * the lock: 0 or an errno.  An asynchronous backend's is waited for
 * (backend_io_wait); a synchronous one's is called directly, as it is
 * on every random write's path (backend_io_wait's FUA handling and the
 * call cost it about 30 instructions a write).
 */
static int
write_around (struct backend *be, const void *buf, uint32_t count,
              uint64_t offset)
{
  struct iovec iov = { .iov_base = (void *) buf, .iov_len = count };
  struct backend_io io = {
    .kind = OP_WRITE, .iov = &iov, .iovcnt = 1,
    .offset = offset, .count = count,
  };
  int r = backend_is_async (be) ? backend_io_wait (be, &io)
    : be->ops->io (be, &io);

  return r == -1 ? (errno ? errno : EIO) : 0;
}

static void
count_bypass (struct queue *q, uint32_t count, uint64_t start_ns, int err)
{
  uint64_t took = monotonic_ns () - start_ns;

  queue_assert_locked (q);
  count_backend_op (q, OP_WRITE, count, 1, took, err);
  q->stats.op[OP_WRITE].ticks_ms_x1000 += took / 1000;
  q->stats.time_in_queue_us += took / 1000;
  q->stats.bypassed_writes++;
}

int
bypass_write (struct queue *q, struct session *s, const void *buf,
              uint32_t count, uint64_t offset, unsigned flags)
{
  bool async = backend_is_async (q->backend);
  uint64_t start_ns, mark;
  unsigned slot;
  bool fua_flush;
  int err;

  lock_acquire (&q->lock);
  if (async ? !async_bypass_allowed (q, count, offset)
      : !bypass_allowed (q, count, offset, flags)) {
    lock_release (&q->lock);
    return BYPASS_DECLINED;
  }
  slot = claim_slot (q, count, offset);
  note_request (q, s, OP_WRITE, count, offset, flags);
  mark = flags & REQ_FUA ? error_mark (q, s) : 0;
  start_ns = q->bypassing[slot].since_ns = monotonic_ns ();
  lock_release (&q->lock);

  err = write_around (q->backend, buf, count, offset);

  lock_acquire (&q->lock);
  count_bypass (q, count, start_ns, err);
  release_slot (q, slot);
  fua_flush = err == 0 && (flags & REQ_FUA);
  if (async) {
    if (q->nr_queued > 0)       /* a piece may have waited for its bytes */
      queue_kick_dispatcher (q);
  }
  else if (fua_flush)
    hand_token_to_flush (q);
  else
    release_bypass_token (q, flags & REQ_FUA);
  if (fua_flush)
    return queue_answer (flush_wait_and_unlock (q, s, flush_start_locked (q),
                                                mark, 0));
  return queue_release_answer (q, err);
}
