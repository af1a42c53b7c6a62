/* plugq: batches, the unit of dispatch.
 *
 * A batch is one backend operation: the elevator's first piece and the
 * pieces that continue it back to back, of one kind, up to max-merge
 * bytes and the backend's vector limit.  Taking a batch moves its pieces
 * from the queued trees to the in-flight tree; completing it frees them
 * and tells their waiters.  A batch that failed for want of memory
 * stays in flight and is tried again later (batch_retry_later).
 *
 * Running short of memory never stalls a queue: batches are only freed
 * with the queue, one is made with it, and every allocation on this
 * path happens before the pieces are taken, where failing only ends a
 * merge early.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "buffers/data_buffer.h"
#include "common/minmax.h"
#include "common/log.h"
#include "queue_internal.h"
#include "common/small_vec.h"

static size_t
batch_limit (const struct queue *q)
{
  /* unplug-thresh=1 is the unplugged baseline: one request, one op. */
  if (q->cfg.unplug_thresh <= 1)
    return 1;
  return q->backend->max_iov > 0 ? (size_t) q->backend->max_iov : 1024;
}

/* Whether a piece in flight, or a write going around the queue, has
 * bytes in [start, end).
 */
bool
in_flight_between (struct queue *q, uint64_t start, uint64_t end)
{
  queue_assert_locked (q);
  return pieces_between (&q->in_flight, start, end)
    || bypass_overlaps (q, start, end);
}

/* A piece may not go out while an older piece over the same bytes is
 * still on its way: the two could land in either order.  On a backend
 * that needs aligned I/O the bytes are the whole blocks the piece
 * touches, which its batch may rewrite (queue_align.c).
 */
static bool
overlaps_in_flight (struct queue *q, const struct piece *p)
{
  return in_flight_between (q, block_down (q, p->offset),
                            block_up (q, piece_end (p)));
}

/* The same for a piece that continues the batch being taken: the block
 * it starts in is the batch's last, checked already and holding the
 * batch's own pieces.
 */
static bool
continuation_in_flight (struct queue *q, const struct piece *p)
{
  return in_flight_between (q, p->offset, block_up (q, piece_end (p)));
}

/* A piece that may not start a batch now: it overlaps an operation in
 * flight, waits behind a busy stream (piece_held), or waits for its
 * failed write-back to be tried again (failing).
 */
static bool
must_wait (struct queue *q, const struct piece *p)
{
  queue_assert_locked (q);
  return p->failing || piece_held (q, p) || overlaps_in_flight (q, p);
}

/* When the elevator's choice must wait, the oldest pieces that need not
 * go instead of leaving the backend idle for a round trip.
 */
#define DISPATCHABLE_SCAN 64

static struct piece *
oldest_dispatchable (struct queue *q)
{
  struct piece *p = TAILQ_FIRST (&q->by_age);

  queue_assert_locked (q);
  for (int i = 0; p && i < DISPATCHABLE_SCAN; i++) {
    if (!must_wait (q, p))
      return p;
    p = TAILQ_NEXT (p, by_age);
  }
  return NULL;
}

/* p joins b at its end, in flight. */
void
batch_add (struct queue *q, struct batch *b, struct piece *p, uint64_t now)
{
  queue_assert_locked (q);
  queue_unlink (q, p);
  RB_INSERT (piece_tree, &q->in_flight, p);
  TAILQ_INSERT_TAIL (&b->pieces, p, batch);
  b->fua |= p->fua && q->writes_carry_fua;
  latency_record (&q->stats.queue_time, now - p->arrival_ns);
  b->nr_pieces++;
  b->bytes += p->length;
  q->stats.in_flight++;
}

/* A batch is taken and finished under the queue lock anyway, so keeping
 * finished ones costs nothing.
 */
static struct batch *
batch_alloc (struct queue *q)
{
  struct batch *b = q->spare_batches;

  queue_assert_locked (q);
  if (b == NULL)
    return malloc (sizeof *b);
  q->spare_batches = b->next_free;
  return b;
}

static void
batch_release (struct queue *q, struct batch *b)
{
  if (b->iov != b->inline_iov)
    free (b->iov);
  b->next_free = q->spare_batches;
  q->spare_batches = b;
}

/* Batches are never freed before the queue, so with one made here there
 * is always one to take when nothing is in flight.  Before the queue is
 * shared: no lock needed.
 */
bool
batch_reserve (struct queue *q)
{
  struct batch *b = malloc (sizeof *b);

  if (b == NULL)
    return false;
  b->iov = b->inline_iov;
  batch_release (q, b);
  return true;
}

/* With the queue: nothing is in flight any more. */
void
batches_free (struct queue *q)
{
  while (q->spare_batches) {
    struct batch *b = q->spare_batches;

    q->spare_batches = b->next_free;
    free (b);
  }
}

/* Before a batch takes one more piece: its vector is grown here, where
 * running out of memory only ends the merge, and not once the pieces
 * are taken, where it would fail answered writes.
 */
static bool
batch_has_room (struct batch *b)
{
  struct iovec *iov;
  uint32_t room = b->iov_room < 64 ? 64 : b->iov_room * 2;

  if (b->kind != OP_WRITE || b->nr_pieces < b->iov_room)
    return true;
  iov = b->iov == b->inline_iov ? malloc (room * sizeof *iov)
    : realloc (b->iov, room * sizeof *iov);
  if (iov == NULL)
    return false;
  b->iov = iov;
  b->iov_room = room;
  return true;
}

/* Whether p fits in b: its piece count and the bytes it may grow to. */
static bool
batch_within_limits (const struct queue *q, const struct batch *b,
                     const struct piece *p)
{
  return b->nr_pieces < batch_limit (q) && b->bytes + p->length <= b->limit;
}

/* Whether b may take p as well: the batch limits, and room for it in
 * the vector.
 */
bool
batch_may_grow (struct queue *q, struct batch *b, const struct piece *p)
{
  queue_assert_locked (q);
  return batch_within_limits (q, b, p) && batch_has_room (b);
}

static void
batch_init (struct queue *q, struct batch *b, const struct piece *first,
            uint64_t limit)
{
  *b = (struct batch) {
    .q = q, .offset = first->offset, .kind = first->kind,
    .may_trim = first->may_trim, .limit = limit, .iov = b->inline_iov,
    .iov_room = BATCH_INLINE_IOV,
  };
  TAILQ_INIT (&b->pieces);
}

/* The bytes a batch starting with p may grow to: max-merge, or while
 * reads compete, what the elevator allows beside the write batches in
 * flight (write_allowance), in parts of at most an eighth of it: one
 * batch of it all completes when its slowest command does, and leaves
 * the backend idle meanwhile (a 1 ms remote ran writes at 482 MB/s with
 * one 1 MiB batch at a time, at 703 with eight of 128 KiB).  0 when no batch may start now: the
 * allowance is used up by batches in flight, and p has not waited past
 * write-expire.  With nothing in flight a batch may always start, so
 * writes keep moving at the allowance's pace.  Zeroes and trims carry
 * no data to put ahead of a read, and are not held.
 */
static uint64_t
batch_room (struct queue *q, const struct piece *p, uint64_t now)
{
  const struct elevator_ops *e = q->cfg.elevator;
  uint64_t allowance;

  queue_assert_locked (q);
  if (e->write_allowance == NULL || p->kind != OP_WRITE
      || (allowance = e->write_allowance (&q->elevator, now)) == UINT64_MAX)
    return q->merge_limit;
  if (q->batch_bytes < allowance) {
    uint64_t part = MIN (q->merge_limit, allowance / READ_ALLOWANCE_PARTS);

    return MIN (part, allowance - q->batch_bytes);
  }
  if (q->batch_bytes == 0 || p->expires_ns <= now)
    return MIN (q->merge_limit, allowance);
  q->elevator.reads.held++;
  q->writes_held = true;
  return 0;
}

/* The elevator's next run of pieces, or NULL when what it would start
 * with has to wait for an operation in flight, or for reads (batch_room).
 */
struct batch *
batch_take (struct queue *q)
{
  uint64_t now = monotonic_ns ();
  struct piece *p;
  struct batch *b;
  uint64_t limit;

  queue_assert_locked (q);
  q->elevator.barrier_seq = q->flush.wanted ? q->flush.barrier_seq : 0;
  p = q->cfg.elevator->first (&q->elevator, now);
  if (p && must_wait (q, p))
    p = oldest_dispatchable (q);
  if (p == NULL || (limit = batch_room (q, p, now)) == 0
      || (b = batch_alloc (q)) == NULL)
    return NULL;
  q->writes_held = false;
  batch_init (q, b, p, limit);
  for (;;) {
    struct piece *next = q->cfg.elevator->next (&q->elevator, p);

    batch_add (q, b, p, now);
    if (next == NULL || next->failing || !batch_within_limits (q, b, next)
        || continuation_in_flight (q, next) || !batch_has_room (b))
      break;
    p = next;
  }
  if (q->block_mask)
    batch_align (q, b, now);
  q->elevator.head = b->offset + b->bytes;
  q->nr_batches++;
  if (b->kind == OP_WRITE)
    q->batch_bytes += b->bytes;
  b->taken_ns = now;
  b->flushes_before = q->flush.arrivals;
  TAILQ_INSERT_TAIL (&q->batches_in_flight, b, taken_order);
  return b;
}

/* Requests in the batch: fragments of one request cut apart by a newer
 * one and joined again are not merges.
 *
 * One pass in offset order with a stack of sequence numbers: a request
 * is only ever split by newer ones landing inside it, so everything
 * between two of its fragments is newer than it.  Popping what is newer
 * than the current piece leaves its own request on top if a fragment of
 * it came before.
 */
static uint32_t
batch_requests (const struct batch *b)
{
  SMALL_VEC (uint64_t, 32) open;
  const struct piece *p;
  uint32_t distinct = 0;

  if (b->nr_pieces == 1)
    return 1;
  small_vec_init (&open);
  if (small_vec_reserve (&open, b->nr_pieces) == -1)
    return b->nr_pieces;
  TAILQ_FOREACH (p, &b->pieces, batch) {
    while (open.len > 0 && open.v[open.len - 1] > p->seq)
      open.len--;
    if (open.len > 0 && open.v[open.len - 1] == p->seq)
      continue;
    open.v[open.len++] = p->seq;
    distinct++;
  }
  small_vec_free (&open);
  return distinct;
}

/* Unlocked, while the batch is in flight (its pieces cannot change):
 * the batch as one backend operation.
 */
void
batch_prepare (struct batch *b)
{
  struct piece *p;
  int i = 0;

  b->requests = batch_requests (b);
  b->io = (struct backend_io) {
    .kind = b->kind, .offset = b->offset, .count = b->bytes,
    .may_trim = b->may_trim, .fua = b->fua,
  };
  if (b->kind != OP_WRITE)
    return;
  TAILQ_FOREACH (p, &b->pieces, batch) {
    b->iov[i].iov_base = p->buf->data + p->buf_offset;
    b->iov[i].iov_len = p->length;
    i++;
  }
  b->io.iov = b->iov;
  b->io.iovcnt = i;
}

/* ------------------------------------------------------------ retries */

/* A write-out that failed for want of memory (here, in libnbd, on a
 * remote server or in the kernel) is tried again, backing off, while
 * its pieces stay in flight: reads still see them, no newer write over
 * the same bytes can overtake them, and a FLUSH waits for them.  A
 * shortage that outlasts retry_ns fails the write-out as any other error
 * does: its waiters are told, and answered pieces are kept as failing
 * (queue_failing.c).
 */
#define RETRY_FIRST_NS (1 * NS_PER_MS)
#define RETRY_MAX_NS (1000 * NS_PER_MS)

static bool
batch_retry_later (struct queue *q, struct batch *b, uint64_t now)
{
  queue_assert_locked (q);
  if (b->first_failed_ns == 0) {
    b->first_failed_ns = now;
    b->retry_delay_ns = RETRY_FIRST_NS;
    log_error ("%s: write-out of %" PRIu64 " bytes at %" PRIu64 " short of"
               " memory, trying again", q->name, b->bytes, b->offset);
  }
  else if (now - b->first_failed_ns >= q->cfg.retry_ns)
    return false;
  else if (b->retry_delay_ns < RETRY_MAX_NS)
    b->retry_delay_ns *= 2;
  b->retry_at_ns = now + b->retry_delay_ns;
  b->next_retry = q->retrying;
  q->retrying = b;
  q->stats.writeback_retries++;
  pthread_cond_signal (&q->dispatch_wake);
  return true;
}

/* A batch whose retry time has come, taken off the list. */
struct batch *
retry_due (struct queue *q)
{
  uint64_t now = monotonic_ns ();

  queue_assert_locked (q);
  for (struct batch **link = &q->retrying; *link; link = &(*link)->next_retry)
    if ((*link)->retry_at_ns <= now) {
      struct batch *b = *link;

      *link = b->next_retry;
      return b;
    }
  return NULL;
}

uint64_t
next_retry_ns (const struct queue *q)
{
  uint64_t first = UINT64_MAX;

  queue_assert_locked (q);
  for (const struct batch *b = q->retrying; b; b = b->next_retry)
    if (b->retry_at_ns < first)
      first = b->retry_at_ns;
  return first;
}

/* ------------------------------------------------------------ completion */

/* One piece of a completed batch: counted, its waiter told, freed; or,
 * answered already and failed, queued again (queue_failing.c).
 */
static void
piece_complete (struct queue *q, const struct batch *b, struct piece *p,
                int err, uint64_t now, struct sleeper **wake_later)
{
  struct op_counters *c = &q->stats.op[p->kind];
  struct presence_span in_flight = p->presence;
  bool kept;

  RB_REMOVE (piece_tree, &q->in_flight, p);
  q->stats.in_flight--;
  /* Kept before it is gone: a read that finds no piece present
   * (pieces_present, without the lock) reads the backend alone, which
   * does not have this one's data.
   */
  kept = err && !p->waiter
    && piece_keep_failed (q, p, err, q->flush.arrivals != b->flushes_before,
                          now);
  piece_gone_from (q, p, in_flight);
  if (kept)
    return;
  c->ticks_ms_x1000 += (now - p->arrival_ns) / 1000;
  q->stats.time_in_queue_us += (now - p->arrival_ns) / 1000;
  if (err && p->waiter && p->waiter->err == 0)
    p->waiter->err = err;
  piece_written (q, p, b->fua && err == 0, wake_later);
  piece_release (q, p);
}

/* The batch is on the backend (or failed).  Its waiters that are
 * answered go on wake_later, for the caller to post once it has dropped
 * q->lock (sleepers_post); the caller also passes on the room and slots
 * it left, once for however many batches it completed.
 */
void
batch_complete (struct queue *q, struct batch *b, int err,
                struct sleeper **wake_later)
{
  uint64_t now = b->finished_ns;
  struct piece *p;

  queue_assert_locked (q);
  if (err == ENOMEM && batch_retry_later (q, b, now))
    return;
  if (err == 0 && q->failing.since_ns)
    failing_note_success (q, now);
  count_backend_op (q, b->kind, b->bytes, b->nr_pieces, now - b->issued_ns,
                    err);
  q->stats.op[b->kind].merges += b->requests - 1;
  while ((p = TAILQ_FIRST (&b->pieces)) != NULL) {
    TAILQ_REMOVE (&b->pieces, p, batch);
    if (p->waiter && b->requests > 1)
      q->stats.waiting_merged++;
    piece_complete (q, b, p, err, now, wake_later);
  }
  q->nr_batches--;
  if (b->kind == OP_WRITE)
    q->batch_bytes -= b->bytes;
  TAILQ_REMOVE (&q->batches_in_flight, b, taken_order);
  q->batches_done++;            /* frees the pieces held behind it */
  batch_release (q, b);
  spares_arm_look (q);
}
