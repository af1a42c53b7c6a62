/* plugq: FLUSH, FUA, group commit, and the errors of answered writes.
 *
 * The sequence a FLUSH goes through, as blk-flush.c's PREFLUSH, DATA,
 * POSTFLUSH:
 *
 *   1. BARRIER  flush_start_locked raises flush.barrier_seq to the newest
 *               piece's sequence number, unplugs the queue, and returns
 *               a ticket: flush.next_epoch, the first backend flush not
 *               yet started.
 *   2. DRAIN    while flush.wanted, dispatch sends only pieces at or
 *               below the barrier (can_dispatch, the elevator's
 *               barrier_seq), so newer writes cannot hold the flush
 *               back.  A newer write that cuts a covered queued piece
 *               raises the barrier to itself: it now holds the only copy
 *               of bytes the flush promised.
 *   3. FLUSH    once nothing at or below the barrier is queued and no
 *               batch is in flight, or no promised piece is left at all
 *               (flush_due), one dispatch token holder runs one backend
 *               flush (backend_flush_locked) for epoch next_epoch++.  One
 *               runs at a time, so epochs end in order.  A FLUSH promises
 *               what was answered before it: a writer still waiting for
 *               its own write (ack=dispatched) has not been, and a flush
 *               does not wait for it.
 *   4. ANSWER   every waiter whose ticket <= done_epoch is answered, by
 *               the thread that ended the flush: all FLUSHes and FUAs
 *               that registered before the backend flush started share
 *               it (group commit).  That thread wakes the first sleeper
 *               of the group and the first the rest, so the next flush
 *               does not wait for a dozen wake-ups.
 *
 * A FUA write is queued like any write (cutting older pieces, so no
 * older write can land over it later), unplugs (sync trigger), and goes
 * through the same sequence from step 1; one that goes around the queue
 * (queue_bypass.c) starts at step 1 once it is written.  On a queue
 * whose writes carry FUA (an asynchronous backend with FUA), its batch
 * goes out with FUA instead, and only a FUA piece that was superseded
 * before it went out takes the sequence (fua_written_and_unlock).
 *
 * Errors: a backend flush that fails fails every ticket of its epoch.
 * A write-out failure that no waiting request hears of (ack=queued) and
 * a failed backend flush are latched (latch_error), as the kernel's
 * errseq_t: each session has a cursor per disk, and a FLUSH or FUA
 * reports every error latched after the cursor it found when it
 * arrived (error_mark), then moves the cursor past it.  So every FLUSH
 * and FUA that arrived before the error was reported fails, however many
 * run at once on one connection, and only one that arrives after a
 * failure was answered may succeed; a session opened after the error is
 * told too if nobody has been yet.  A volume's FUA across members takes
 * its mark before it queues the first part (queue_error_mark).
 */
#include <config.h>

#include <assert.h>
#include <errno.h>
#include <semaphore.h>
#include <string.h>

#include "common/log.h"
#include "queue_internal.h"
#include "session.h"

/* ------------------------------------------------------------ errors */

/* The session's cursor for this disk, set on first use to what it would
 * have been had it been set when the session opened: a session that
 * existed at the latest error is told of it, and one opened later only
 * if nobody has been yet (as errseq_sample does at open).
 */
static uint64_t *
error_cursor (struct queue *q, struct session *s)
{
  uint64_t *slot = session_slot (s, q->index);

  queue_assert_locked (q);
  if (slot && *slot == SESSION_SLOT_UNSET) {
    bool existed = q->error.seq > 0
      && session_id (s) <= q->error.sessions_then;

    *slot = q->error.seq > 0 && (existed || q->error.told_seq < q->error.seq)
      ? q->error.seq - 1 : q->error.seq;
  }
  return slot;
}

/* A session writes to this disk: from now on it hears of the disk's
 * write-back errors.  Before the first error there is nothing to note:
 * a cursor first set after it, for a session that existed then, tells
 * the session just as one set now would.
 */
void
session_writes_here (struct queue *q, struct session *s)
{
  queue_assert_locked (q);
  if (q->error.seq > 0)
    error_cursor (q, s);
}

void
latch_error (struct queue *q, int errnum)
{
  queue_assert_locked (q);
  q->error.seq++;
  q->error.errnum = errnum;
  q->error.sessions_then = session_generation ();
  q->stats.latched_errors++;
}

/* The session's cursor for this disk as a FLUSH or FUA arriving now
 * finds it: the errors latched after it are what that request must
 * report.  With no session (the drain at shutdown), every error not yet
 * reported to anyone.
 */
uint64_t
error_mark (struct queue *q, struct session *s)
{
  uint64_t *cursor;

  queue_assert_locked (q);
  if (q->error.seq == 0)
    return 0;
  cursor = error_cursor (q, s);
  return cursor ? *cursor : q->error.told_seq;
}

/* The latched error a request marked with `mark` must report, or 0;
 * its session's cursor moves past it.  Requests marked before the same
 * error all report it, whichever is answered first.
 */
static int
take_latched_error (struct queue *q, struct session *s, uint64_t mark)
{
  uint64_t *cursor;

  queue_assert_locked (q);
  if (q->error.seq <= mark)
    return 0;
  cursor = error_cursor (q, s);
  if (cursor && *cursor < q->error.seq)
    *cursor = q->error.seq;
  q->error.told_seq = q->error.seq;
  return q->error.errnum;
}

/* ------------------------------------------------------------ tickets */

/* Step 1: the barrier, the unplug, the ticket.  Answered data whose
 * write-back failed is tried again at once: a client that retries its
 * FLUSH once the backend can take the data (qemu after an ENOSPC pause)
 * must not wait for the retry's backoff, nor be told of a failure that
 * is over.  A try already in flight began before this FLUSH came: if it
 * fails, the FLUSH still gets a try of its own (piece_keep_failed).
 */
uint64_t
flush_start_locked (struct queue *q)
{
  queue_assert_locked (q);
  q->flush.arrivals++;
  if (q->failing.count) {
    q->failing.retry_at_ns = 0;
    q->failing.flush_asked = true;
  }
  q->flush.wanted = true;
  if (q->next_seq > q->flush.barrier_seq)
    q->flush.barrier_seq = q->next_seq;
  queue_unplug_locked (q, UNPLUG_FLUSH);
  return q->flush.next_epoch;
}

/* A request asleep until the backend flush of its ticket has ended.
 * Whoever ends that flush answers it under q->lock (flush_answer) and
 * wakes it by its own semaphore, so the woken request goes straight to
 * its reply: a group commit of a dozen FUA writes would otherwise wake
 * a dozen threads to queue up on q->lock one after the other.
 *
 * The flush's thread wakes only the first sleeper of the group; that
 * one wakes the rest (sleepers_post) before it replies.  A post costs a
 * system call, and the thread that ended the flush usually starts the
 * next one: posting a dozen first would hold every write of the next
 * flush back by as long.
 */
struct flush_waiter {
  TAILQ_ENTRY (flush_waiter) link;
  uint64_t ticket;
  struct session *session;
  uint64_t mark;                /* error_mark at the request's arrival */
  uint64_t start_ns;            /* a FLUSH request's arrival, else 0 */
  int err;                      /* the answer */
  struct sleeper answered;      /* .next: answered with it, woken by it */
};

/* The answer to a ticket whose epoch has ended: 0 or an errno. */
static int
flush_answer (struct queue *q, struct session *s, uint64_t ticket,
              uint64_t mark, uint64_t start_ns)
{
  int err, latched;

  queue_assert_locked (q);
  assert (q->flush.done_epoch >= ticket);
  err = q->flush.failed_epoch >= ticket ? q->flush.failed_errno : 0;
  /* Taken even when the flush failed: that answer tells this session. */
  latched = take_latched_error (q, s, mark);
  if (start_ns)
    latency_record (&q->stats.flush_time, monotonic_ns () - start_ns);
  return err ? err : latched;
}

/* Step 4 for the sleepers whose epoch has ended: each is answered, and
 * the first woken, with the others chained behind it.
 */
static void
answer_sleepers (struct queue *q)
{
  struct flush_waiter *w, *next;
  struct sleeper *first = NULL, **tail = &first;

  queue_assert_locked (q);
  for (w = TAILQ_FIRST (&q->flush.sleepers); w != NULL; w = next) {
    next = TAILQ_NEXT (w, link);
    if (w->ticket > q->flush.done_epoch)
      continue;
    TAILQ_REMOVE (&q->flush.sleepers, w, link);
    w->err = flush_answer (q, w->session, w->ticket, w->mark, w->start_ns);
    w->answered.next = NULL;
    *tail = &w->answered;
    tail = &w->answered.next;
  }
  if (first)
    sem_post (&first->sem);
}

/* Sleeps until answer_sleepers answers the ticket.  q->lock held on
 * entry, released on return.
 */
static int
sleep_until_answered (struct queue *q, struct session *s, uint64_t ticket,
                      uint64_t mark, uint64_t start_ns)
{
  struct flush_waiter w = {
    .ticket = ticket, .session = s, .mark = mark, .start_ns = start_ns,
  };

  queue_assert_locked (q);
  sem_init (&w.answered.sem, 0, 0);
  TAILQ_INSERT_TAIL (&q->flush.sleepers, &w, link);
  lock_release (&q->lock);
  semaphore_wait (&w.answered.sem);
  sleepers_post (w.answered.next);
  sem_destroy (&w.answered.sem);
  return w.err;
}

/* Step 4: waits for the ticket's epoch, helping to write the queue out
 * while it can (run_queue_until_flushed), then asleep.  Returns 0 or an
 * errno; q->lock held on entry, released on return.  mark is the
 * request's error_mark at its arrival; start_ns, when not 0, a FLUSH
 * request's arrival, for its latency.
 *
 * Not woken by every written batch: a FUA stream keeps a dozen threads
 * here, and waking them all for each batch costs context switches.
 * Whoever holds a token, or the dispatch thread after it, brings the
 * flush about.
 */
int
flush_wait_and_unlock (struct queue *q, struct session *s, uint64_t ticket,
                       uint64_t mark, uint64_t start_ns)
{
  int err;

  queue_assert_locked (q);
  while (q->flush.done_epoch < ticket)
    if (!run_queue_until_flushed (q, ticket))
      return sleep_until_answered (q, s, ticket, mark, start_ns);
  err = flush_answer (q, s, ticket, mark, start_ns);
  lock_release (&q->lock);
  return err;
}

/* A FUA request, queued with done as its waiter: the flush sequence
 * from step 1 covers it.  0, or its own write-out's errno before the
 * flush's.  q->lock held on entry, released on return.  done->err is
 * final by then: the flush waited for the write.
 */
int
fua_wait_and_unlock (struct queue *q, struct session *s,
                     const struct completion *done)
{
  int err;

  queue_assert_locked (q);
  err = flush_wait_and_unlock (q, s, flush_start_locked (q),
                               done->error_mark, 0);
  return done->err ? done->err : err;
}

/* A FUA request whose pieces are all written (writes_carry_fua): durable
 * already if each went out with FUA; one superseded by a newer write, or
 * written without FUA, takes the flush sequence.  0 or an errno.  q->lock
 * held on entry, released on return.
 */
int
fua_written_and_unlock (struct queue *q, struct session *s,
                        const struct completion *done)
{
  int err;

  queue_assert_locked (q);
  if (done->needs_flush)
    return flush_wait_and_unlock (q, s, flush_start_locked (q),
                                  done->error_mark, 0);
  err = take_latched_error (q, s, done->error_mark);
  lock_release (&q->lock);
  return err;
}

/* ------------------------------------------------------------ the flush */

/* Whether a pending FLUSH promised p's bytes (step 2). */
bool
flush_covers (const struct queue *q, const struct piece *p)
{
  queue_assert_locked (q);
  return q->flush.wanted && p->seq <= q->flush.barrier_seq;
}

/* Pieces up to the flush barrier are still queued or in flight.  Only
 * promised ones count (piece.h): with none left, everything a FLUSH
 * must cover is on the backend, and writers still waiting for their own
 * writes (ack=dispatched) do not hold it back.
 */
static bool
flush_blocked (const struct queue *q)
{
  const struct piece *oldest = TAILQ_FIRST (&q->by_age);

  queue_assert_locked (q);
  if (q->promised_pieces == 0)
    return false;
  return q->nr_batches > 0
    || (oldest && oldest->seq <= q->flush.barrier_seq);
}

/* Step 3's condition.  A flush goes first once its barrier is clear, or
 * a stream of new writes would keep it waiting for an empty queue
 * forever.  One at a time: with several token holders a second could
 * finish first, and epochs are answered in order.
 */
bool
flush_due (const struct queue *q)
{
  queue_assert_locked (q);
  return q->flush.wanted && !q->flush.running && !flush_blocked (q);
}

/* Step 3: one backend flush, run by a dispatch token holder.  Drops
 * q->lock during the backend flush.
 *
 * On an asynchronous backend the holder lends its token while it waits:
 * sending a write there is not competing for a disk, and writes the
 * flush need not cover (newer ones, writers still waiting for their
 * own) would otherwise wait out its round trip.  No second flush can
 * start meanwhile (flush.running).
 */
void
backend_flush_locked (struct queue *q)
{
  uint64_t epoch = q->flush.next_epoch++;
  bool lend = backend_is_async (q->backend);
  /* Answered data it covers that could not be written yet: the flush
   * makes the rest durable, and answers with that data's errno.
   */
  int unwritten = failing_error_for (q, q->flush.barrier_seq);
  int err = 0;

  queue_assert_locked (q);
  q->flush.wanted = false;
  q->flush.running = true;
  if (lend)
    release_token (q);
  lock_release (&q->lock);
  if (q->backend->ops->flush (q->backend) == -1)
    err = errno ? errno : EIO;
  lock_acquire (&q->lock);
  if (lend)
    q->holders++;
  q->flush.running = false;
  q->stats.backend_flushes++;
  /* The answered writes it carried may be lost (a page cache drops a
   * page it could not write back, and reports that once): every
   * session with writes before it must hear of it, not only the
   * requests waiting on this flush.
   */
  if (err) {
    q->flush.failed_epoch = epoch;
    q->flush.failed_errno = err;
    latch_error (q, err);
    log_error ("%s: backend flush failed: %s (reported on each"
               " connection's next flush)", q->name, strerror (err));
  }
  else if (unwritten) {
    q->flush.failed_epoch = epoch;
    q->flush.failed_errno = unwritten;
  }
  q->flush.done_epoch = epoch;
  answer_sleepers (q);
}
