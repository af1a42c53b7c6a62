/* plugq: answered writes whose write-back failed.
 *
 * With ack=queued a write is answered before the backend has it, so its
 * write-back has nobody to fail to.  Dropping it and reporting the error
 * once (as a page cache does) breaks two promises: a FLUSH retried after
 * the failure was reported succeeds over data that is gone (qemu's
 * werror=enospc pauses the guest on ENOSPC and retries the request once
 * space has been freed), and reads return older data than what was
 * answered.  So the data stays:
 *
 *   1. KEEP    A piece nobody waits for (its request was answered) whose
 *              write-back failed goes back to the queue as a *failing*
 *              piece (piece_keep_failed): in the offset tree, so reads
 *              see it and newer writes cut it as any queued piece, but
 *              on the failing list instead of by_age, so neither the
 *              elevator's age order nor a FLUSH's barrier waits for it.
 *              Only the bytes no newer queued piece holds go back: those
 *              newer pieces are all younger than it (nothing queued over
 *              a piece in flight is older).
 *   2. RETRY   After a delay that doubles from FAILING_FIRST_NS to
 *              FAILING_MAX_NS, or at once when a FLUSH arrives
 *              (flush_start_locked), every failing piece returns to
 *              by_age in sequence order (failing_retry) and goes out
 *              again; one that fails again is kept again.  A FLUSH that
 *              came while a try was in flight gets one more try when
 *              that one fails: its answer is about the backend as it is
 *              after the FLUSH came.  The first success resets the
 *              delay.
 *   3. ANSWER  A backend flush that starts while a failing piece it
 *              covers (sequence number at or below the barrier) is kept
 *              answers its epoch with that piece's errno
 *              (failing_error_for): ENOSPC stays ENOSPC, so a client
 *              that waits for space and retries gets a true answer each
 *              time.  Once the pieces are written, FLUSH succeeds again.
 *              A writer that finds the queue full while pieces are
 *              failing gets their errno instead of waiting for room that
 *              may never come (failing_blocks_writers).
 *   4. GIVE UP At shutdown the drain tries them once more; what still
 *              fails is dropped and logged (failing_drop_all), and the
 *              final write-out fails (nbdkit exits 1).
 *
 * A request that waits for its write (ack=dispatched, FUA) gets the
 * error itself and keeps nothing here.  Failing pieces count towards
 * queue-bytes and queue-requests: a backend that keeps failing fills the
 * queue, and then writers fail rather than block.
 */
#include <config.h>

#include <inttypes.h>
#include <string.h>

#include "buffers/data_buffer.h"
#include "common/log.h"
#include "queue_internal.h"

#define FAILING_FIRST_NS (10 * NS_PER_MS)
#define FAILING_MAX_NS (1000 * NS_PER_MS)

/* ------------------------------------------------------------ keeping */

/* p, or a copy of it for [offset, end), as a failing piece; NULL when a
 * copy could not be had.  orig is p as it was before any of it was kept.
 */
static struct piece *
failing_fragment (struct queue *q, struct piece *p, const struct piece *orig,
                  uint64_t offset, uint64_t end)
{
  struct piece *f = p ? p : piece_alloc (q);

  queue_assert_locked (q);
  if (f == NULL)
    return NULL;
  *f = *orig;
  if (p == NULL) {
    f->appended = 0;            /* the first fragment keeps the count */
    if (f->buf)
      data_buffer_get (f->buf);
  }
  f->buf_offset += offset - orig->offset;
  f->offset = offset;
  f->length = end - offset;
  f->held_until = 0;
  f->failing = true;
  return f;
}

/* Queues [offset, end) of orig as failing: in p's own struct when p is
 * given, else in a new one.  Without memory for a new one those bytes are
 * lost, and latched as a failed backend flush would be.
 */
static void
keep_range (struct queue *q, struct piece *p, const struct piece *orig,
            uint64_t offset, uint64_t end, int err)
{
  struct piece *f = failing_fragment (q, p, orig, offset, end);

  if (f == NULL) {
    latch_error (q, err);
    log_error ("%s: no memory to keep %" PRIu64 " bytes at %" PRIu64
               " whose write-back failed: they are lost", q->name,
               end - offset, offset);
    return;
  }
  queue_link (q, f, NULL);
}

/* The bytes of p no queued piece holds go back as failing pieces, the
 * first in p itself.  Whether p was used.
 */
static bool
keep_uncovered (struct queue *q, struct piece *p, int err)
{
  const struct piece orig = *p;
  uint64_t at = orig.offset, end = piece_end (&orig);
  struct piece *n = first_reaching (&q->by_offset, at);
  bool used = false;

  queue_assert_locked (q);
  while (at < end) {
    uint64_t gap_end = n && n->offset < end ? n->offset : end;

    if (gap_end > at) {
      keep_range (q, used ? NULL : p, &orig, at, gap_end, err);
      used = true;
    }
    if (n == NULL || n->offset >= end)
      break;
    at = piece_end (n);
    n = RB_NEXT (piece_tree, &q->by_offset, n);
  }
  return used;
}

/* Piece p of a batch whose write-back failed with err, out of the
 * in-flight tree, nobody waiting for it: back to the queue as failing
 * (step 1), each fragment counted as present and promised anew.  When a
 * FLUSH came after the batch was taken (flush_came_since) and still
 * waits, the batch's try was not the FLUSH's own: it gets one at once
 * (step 2).  True
 * when p itself was queued again (the caller must not release it); the
 * caller then uncounts p as it was in flight (piece_gone), after, so
 * that pieces_present never reads 0 meanwhile.
 */
bool
piece_keep_failed (struct queue *q, struct piece *p, int err,
                   bool flush_came_since, uint64_t now)
{
  struct failing_state *f = &q->failing;

  queue_assert_locked (q);
  if (f->count == 0 && f->since_ns == 0) {
    f->since_ns = now;
    log_error ("%s: write-back of answered data failed: %s; keeping it and"
               " trying again (FLUSH fails until it is written)", q->name,
               strerror (err));
  }
  f->errnum = err;
  if (flush_came_since && q->flush.wanted) {
    f->retry_at_ns = 0;         /* the waiting FLUSH's own try */
    f->flush_asked = true;
  }
  else if (f->retry_at_ns == 0) {
    if (f->delay_ns == 0)
      f->delay_ns = FAILING_FIRST_NS;
    f->retry_at_ns = now + f->delay_ns;
    if (f->delay_ns < FAILING_MAX_NS)
      f->delay_ns *= 2;
  }
  if (q->space_sleepers > 0)     /* they fail now rather than wait */
    pthread_cond_broadcast (&q->space);
  /* The dispatch thread may be asleep with no time to wake at (nothing
   * was failing when it went to sleep): it must see the retry time, or
   * the data and every writer waiting behind it wait for the next
   * request, which may never come.
   */
  pthread_cond_signal (&q->dispatch_wake);
  return keep_uncovered (q, p, err);
}

/* ------------------------------------------------------------ retrying */

/* A failing piece goes back to by_age, in sequence order: a FLUSH's
 * barrier and the deadline look at its oldest piece first.
 */
static void
back_in_age_order (struct queue *q, struct piece *p)
{
  struct piece *at = TAILQ_LAST (&q->by_age, piece_list);

  queue_assert_locked (q);
  while (at && at->seq > p->seq)
    at = TAILQ_PREV (at, piece_list, by_age);
  if (at)
    TAILQ_INSERT_AFTER (&q->by_age, at, p, by_age);
  else
    TAILQ_INSERT_HEAD (&q->by_age, p, by_age);
}

/* Step 2, when due: every failing piece goes out again.  While a FLUSH
 * waits, only the try it asked for: a FLUSH waits for what it covers to
 * be written, and a try coming due while it waits would make it wait a
 * whole failing round more (a backend that times out) before it is
 * answered.
 */
bool
failing_retry (struct queue *q, uint64_t now)
{
  struct piece *p;

  queue_assert_locked (q);
  if (q->failing.count == 0 || now < q->failing.retry_at_ns
      || (q->flush.wanted && !q->failing.flush_asked))
    return false;
  q->failing.flush_asked = false;
  while ((p = TAILQ_FIRST (&q->failing.pieces)) != NULL) {
    TAILQ_REMOVE (&q->failing.pieces, p, by_age);
    q->failing.count--;
    p->failing = false;
    back_in_age_order (q, p);
  }
  q->failing.retry_at_ns = 0;
  q->stats.writeback_retries++;
  queue_unplug_locked (q, UNPLUG_TIMER);
  return true;
}

uint64_t
failing_retry_ns (const struct queue *q)
{
  queue_assert_locked (q);
  return q->failing.count ? q->failing.retry_at_ns : UINT64_MAX;
}

/* A write-back succeeded: once nothing fails any more, the episode is
 * over and the next failure starts from the first delay again.
 */
void
failing_note_success (struct queue *q, uint64_t now)
{
  struct failing_state *f = &q->failing;

  queue_assert_locked (q);
  f->delay_ns = 0;
  if (f->count == 0 && f->since_ns) {
    log_error ("%s: write-back works again; the data kept since it failed"
               " %.1f s ago is written", q->name,
               (now - f->since_ns) / 1e9);
    f->since_ns = 0;
  }
}

/* ------------------------------------------------------------ answers */

/* Step 3: the errno a backend flush with this barrier must answer, or 0.
 * The failing list is in sequence order.
 */
int
failing_error_for (const struct queue *q, uint64_t barrier_seq)
{
  const struct piece *oldest = TAILQ_FIRST (&q->failing.pieces);

  queue_assert_locked (q);
  return oldest && oldest->seq <= barrier_seq ? q->failing.errnum : 0;
}

int
failing_blocks_writers (const struct queue *q)
{
  queue_assert_locked (q);
  return q->failing.count ? q->failing.errnum : 0;
}

/* ------------------------------------------------------------ giving up */

/* Step 4, at shutdown: what still fails is lost.  Latched, so that the
 * final flush's answer fails.
 */
void
failing_drop_all (struct queue *q)
{
  struct piece *p;
  uint64_t bytes = 0;
  uint32_t n = 0;

  queue_assert_locked (q);
  while ((p = TAILQ_FIRST (&q->failing.pieces)) != NULL) {
    bytes += p->length;
    n++;
    queue_unlink (q, p);
    piece_gone (q, p);
    piece_release (q, p);
  }
  if (n == 0)
    return;
  latch_error (q, q->failing.errnum);
  log_error ("%s: data lost: %" PRIu32 " answered writes (%" PRIu64
             " bytes) could not be written back before shutdown: %s",
             q->name, n, bytes, strerror (q->failing.errnum));
}
