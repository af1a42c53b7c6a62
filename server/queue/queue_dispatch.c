/* plugq: who writes a queue out, and when.
 *
 * A synchronous backend's writes and flushes are issued by whoever holds
 * one of the disk's dispatch tokens (q->holders, at most the backend's
 * max_writers, one while a flush waits or runs).  The request thread
 * whose arrival unplugged the queue runs it itself, as a kernel
 * submitter does at blk_finish_plug, and so does one that would
 * otherwise sleep (FUA, FLUSH, ack=dispatched, a full queue), until what
 * it waits for is done; a write that joins a queue already running
 * writes out a few batches (HELP_ROUND) if a token is free, so every
 * arrival pays for about its own share.  The disk's dispatch thread
 * does what no request thread is there for: the unplug timer, a
 * volume's flush, a backlog, retries.  On an asynchronous backend the
 * same token holders submit, and the backend's own thread completes.
 *
 * Holders take batches under the lock and never one over bytes still in
 * flight, so nothing in flight can overlap a newer write; the lock is
 * dropped for every backend operation.
 */
#include <config.h>

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>

#include "common/engine_thread.h"
#include "common/log.h"
#include "common/minmax.h"
#include "queue_internal.h"

/* ------------------------------------------------------------ issuing */

static bool dispatcher_needed (const struct queue *);

/* Backend thread, or inside batch_submit: an asynchronous operation
 * finished.  Takes q->lock.
 *
 * The writers waiting for their writes, the one waiting for room and
 * the dispatch thread are woken once the lock is dropped.  Woken while
 * it is held, a waiter on a condition variable would only wake to sleep
 * on the lock (glibc does not move it to the mutex), two more futex
 * calls and a context switch for every completion; and each post is a
 * system call that writers arriving meanwhile would wait out.  No
 * wake-up is lost: a waiter checks under the lock and is already
 * waiting, or checks after this completion.  The queue outlives the
 * call: queue_free closes the backend, which waits for its completions,
 * before it frees the queue.
 */
static void
batch_done (struct backend_io *io, int err)
{
  struct batch *b = (struct batch *) ((char *) io
                                      - offsetof (struct batch, io));
  struct queue *q = b->q;
  struct sleeper *answered = NULL;
  bool kick, room_wanted, wake_writer;

  b->finished_ns = monotonic_ns ();
  lock_acquire (&q->lock);
  batch_complete (q, b, err, &answered);
  /* The freed slot is taken by a writer waiting for room, which writes
   * the queue out before it looks for room (queue_room.c), or by a
   * holder, which looks again before it lets go (release_token).  The
   * dispatch thread is woken only when neither will, or for a flush or
   * a retry, which a woken writer that finds room after all would leave;
   * and only when there is something for it to do (a waiting writer's
   * completion on an empty queue leaves nothing).
   */
  room_wanted = q->full_waiters > 0 && !q->stopping;
  kick = q->holders == 0 && dispatcher_needed (q)
    && (!room_wanted || q->flush.wanted || q->retrying != NULL);
  wake_writer = room_wake_for_slot (q);
  lock_release (&q->lock);
  sleepers_post (answered);
  if (wake_writer)
    pthread_cond_signal (&q->space);
  if (kick)
    pthread_cond_signal (&q->dispatch_wake);
}

/* An asynchronous backend: hands b over.  Drops q->lock while the
 * backend takes it (its completion may run inside the call).
 */
static void
batch_submit (struct queue *q, struct batch *b)
{
  struct backend *be = q->backend;

  queue_assert_locked (q);
  lock_release (&q->lock);
  b->issued_ns = monotonic_ns ();
  batch_prepare (b);
  b->io.done = batch_done;
  if (batch_io (be, b) == -1)
    batch_done (&b->io, errno ? errno : EIO); /* as the backend would */
  lock_acquire (&q->lock);
}

/* An unplug sends out what was queued when it happened.  Requests that
 * arrived during that dispatch plug the queue again unless they already
 * make a threshold's worth, or somebody is waiting for them: so a busy
 * queue keeps building merges instead of trickling out one small
 * operation per arrival.
 */
static bool
should_replug (const struct queue *q)
{
  const struct piece *oldest = TAILQ_FIRST (&q->by_age);

  queue_assert_locked (q);
  return oldest && oldest->seq > q->unplug_seq
    && q->cfg.unplug_thresh > 1
    && unplug_count (q) < q->cfg.unplug_thresh
    && q->queued_bytes < q->merge_limit
    && !q->flush.wanted && !q->stopping && q->full_waiters == 0
    && q->dispatched_waiters == 0;
}

/* While a FLUSH waits, only what it covers goes out: newer batches
 * would keep operations in flight and hold the flush back.
 */
static bool
can_dispatch (const struct queue *q)
{
  const struct piece *oldest = TAILQ_FIRST (&q->by_age);

  queue_assert_locked (q);
  if (q->state != QUEUE_RUNNING || oldest == NULL
      || ops_in_flight (q) >= q->max_in_flight)
    return false;
  return !q->flush.wanted || oldest->seq <= q->flush.barrier_seq;
}

/* Performs the batches without the lock, one after the other. */
static void
round_write (struct backend *be, struct batch **round, int *err, unsigned n)
{
  for (unsigned i = 0; i < n; i++) {
    round[i]->issued_ns = monotonic_ns ();
    batch_prepare (round[i]);
    err[i] = 0;
    if (batch_io (be, round[i]) == -1)
      err[i] = errno ? errno : EIO;
    round[i]->finished_ns = monotonic_ns ();
  }
}

/* A synchronous backend: every batch the elevator will give (up to
 * limit, at most SYNC_ROUND) is taken under one hold of the lock and
 * written in one go without it, so one-piece batches of random writes
 * do not make the lock the limit.  Drops q->lock while writing, and
 * again to wake the waiters it answered.
 */
static void
dispatch_round (struct queue *q, struct batch *first, unsigned limit)
{
  struct batch *round[SYNC_ROUND], *b;
  struct sleeper *answered = NULL;
  int err[SYNC_ROUND];
  unsigned n = 0;

  queue_assert_locked (q);
  round[n++] = first;
  while (n < limit && can_dispatch (q) && !should_replug (q)
         && (b = batch_take (q)) != NULL)
    round[n++] = b;
  lock_release (&q->lock);
  round_write (q->backend, round, err, n);
  lock_acquire (&q->lock);
  for (unsigned i = 0; i < n; i++)
    batch_complete (q, round[i], err[i], &answered);
  room_pass_on (q);
  if (answered) {               /* posted without the lock (piece_written) */
    lock_release (&q->lock);
    sleepers_post (answered);
    lock_acquire (&q->lock);
  }
}

/* b and up to round - 1 more, by the backend's kind.  Drops q->lock. */
static void
dispatch_batches (struct queue *q, struct batch *b, unsigned round)
{
  if (backend_is_async (q->backend))
    batch_submit (q, b);
  else
    dispatch_round (q, b, round);
}

/* ------------------------------------------------------------ steps */

/* Holding a dispatch token: one step of writing the queue out, at most
 * `round` batches.  False when there is nothing to do now.  May drop
 * q->lock (the backend I/O of the step).
 */
static bool
dispatch_step (struct queue *q, unsigned round)
{
  struct batch *b;

  queue_assert_locked (q);
  if (q->retrying && (b = retry_due (q)) != NULL) {
    dispatch_batches (q, b, 1);
    return true;
  }
  if (q->failing.count && failing_retry (q, monotonic_ns ()))
    return true;
  if (flush_due (q)) {
    backend_flush_locked (q);
    return true;
  }
  if (q->state == QUEUE_RUNNING && should_replug (q)) {
    queue_plug (q);
    return false;
  }
  if (can_dispatch (q) && (b = batch_take (q)) != NULL) {
    dispatch_batches (q, b, round);
    return true;
  }
  if (q->nr_queued == 0 && q->nr_batches == 0
      && q->state == QUEUE_RUNNING)
    q->state = QUEUE_IDLE;      /* the next arrival plugs again */
  return false;
}

/* What the dispatch thread must still do when a holder lets go. */
static bool
dispatcher_needed (const struct queue *q)
{
  queue_assert_locked (q);
  return q->stopping || flush_due (q) || q->retrying || q->failing.count
    || (can_dispatch (q) && !should_replug (q));
}

/* While a flush waits or runs, more writers only compete with it for the
 * disk.  A backend that writes to memory has no disk to compete for:
 * while its flush runs, queued writes go out beside it, so the queue
 * drains and writes that arrive can go around it again.
 *
 * While a flush waits to start, only one token may be held, but a
 * write going around the queue that is not FUA does not count against
 * it: the flush need not cover a write nobody was answered for yet, and
 * waiting for it to end would put the flush on the dispatch thread, two
 * context switches later.  No such write starts meanwhile
 * (take_bypass_token).  A FUA write around the queue does count: it
 * needs the next flush, and the flush that waits for it carries it too.
 */
static unsigned
token_limit (const struct queue *q)
{
  if (q->flush.running && q->backend->writes_to_memory)
    return q->max_holders;
  if (q->flush.wanted || q->flush.running)
    return MIN (1 + q->plain_bypassers, q->max_holders);
  return q->max_holders;
}

/* Wakes the dispatch thread for work no request thread will do.  While
 * a token is held, the last holder looks again before letting go; with
 * every slot in flight and nothing else due, the next completion wakes
 * it (batch_done, release_token), so a writer waiting for room does not
 * wake it for each look.
 */
void
queue_kick_dispatcher (struct queue *q)
{
  queue_assert_locked (q);
  if (q->holders == 0
      && (ops_in_flight (q) < q->max_in_flight || dispatcher_needed (q)))
    pthread_cond_signal (&q->dispatch_wake);
}

/* One of the disk's dispatch tokens, if one is free.  On an asynchronous
 * backend too: a request thread that submits the next batch itself (a
 * send) saves the dispatch thread a wake-up, a context switch, for
 * every batch.
 */
static bool
take_token (struct queue *q)
{
  queue_assert_locked (q);
  if (q->holders >= token_limit (q))
    return false;               /* the last holder looks again */
  if (q->stopping) {
    queue_kick_dispatcher (q);
    return false;
  }
  q->holders++;
  return true;
}

/* A token for a write going around the queue (queue_bypass.c), if one
 * is free: it never waits and wakes nobody.  Not while a FLUSH waits to
 * start, which needs every holder gone: writers arriving all the time
 * could keep it waiting for ever.  While a backend flush runs, writes
 * the FLUSH need not cover may run beside it, as writers still waiting
 * for their answer do, even when the next FLUSH is already wanted: that
 * one cannot start before the running one ends, and then no new token
 * is given until it has.  A FUA write may take one while a FLUSH waits
 * to start: it is answered only after that flush, so FUA writes cannot
 * keep arriving without it, and it holds the token for its write alone.
 */
bool
take_bypass_token (struct queue *q, bool fua)
{
  queue_assert_locked (q);
  if (q->holders >= q->max_holders || q->stopping
      || (q->flush.wanted && !q->flush.running && !fua))
    return false;
  q->holders++;
  if (!fua)
    q->plain_bypassers++;
  return true;
}

/* The token of a write around the queue that is written.  A FUA write
 * whose write succeeded keeps going into the flush (hand_token_to_flush)
 * instead.
 */
void
release_bypass_token (struct queue *q, bool fua)
{
  queue_assert_locked (q);
  if (!fua)
    q->plain_bypassers--;
  release_token (q);
}

/* The last holder out plugs a running queue that should collect again
 * (as its next step would have), or hands what is left to the dispatch
 * thread.  A holder may stop between steps (run_queue_here's limit,
 * run_queue_until_flushed), and a running queue nobody looks at would
 * keep its pieces until the next arrival.
 */
void
release_token (struct queue *q)
{
  queue_assert_locked (q);
  if (--q->holders > 0)
    return;
  room_pass_on (q);             /* what its batches left the queue */
  if (q->state == QUEUE_RUNNING && should_replug (q))
    queue_plug (q);
  else if (dispatcher_needed (q))
    pthread_cond_signal (&q->dispatch_wake);
}

/* A holder that goes on, without dropping q->lock, to wait for a flush
 * (flush_wait_and_unlock) gives its token back without release_token's
 * look: the wait takes a token at once and writes the queue out, which
 * is that look, and ends with release_token.  A token still held by
 * another holder is looked after by that one.  So a FUA write around the
 * queue does not wake the dispatch thread for the flush it is about to
 * run itself.
 */
void
hand_token_to_flush (struct queue *q)
{
  queue_assert_locked (q);
  assert (q->holders > 0);
  q->holders--;
}

/* With a token, if one is free: steps of `round` batches, at most
 * `steps`, while flush epoch `until` has not ended and, with `written`,
 * while that request still has pieces to write.  True when this thread
 * did some of the work.  May drop q->lock (dispatch_step).
 */
static bool
run_steps (struct queue *q, int steps, unsigned round, uint64_t until,
           const struct completion *written)
{
  bool worked = false;

  queue_assert_locked (q);
  if (!take_token (q))
    return false;
  for (int i = 0; i < steps && q->flush.done_epoch < until
         && (written == NULL || written->pending > 0)
         && dispatch_step (q, round); i++)
    worked = true;
  release_token (q);
  return worked;
}

/* A request thread writes an unplugged queue out itself when a token is
 * free, up to `steps` steps of `round` batches.  True when this thread
 * did some of the work.  May drop q->lock (dispatch_step).
 */
bool
run_queue_here (struct queue *q, int steps, unsigned round)
{
  return run_steps (q, steps, round, UINT64_MAX, NULL);
}

/* run_queue_here for a request waiting for its own write: it helps
 * until that is written and no longer, so its answer does not wait for
 * the batches of others that arrived meanwhile.  True when it did some
 * of the work.  May drop q->lock (dispatch_step).
 */
bool
run_queue_until_written (struct queue *q, const struct completion *done)
{
  return run_steps (q, STEPS_HERE, SYNC_ROUND, UINT64_MAX, done);
}

/* run_queue_here for a request waiting for flush epoch ticket: it helps
 * until that epoch has ended and no longer, so the thread that ran its
 * flush answers at once and leaves the next flush to others (the
 * dispatch thread, woken by release_token).  True when it did some of
 * the work.  May drop q->lock (dispatch_step).
 */
bool
run_queue_until_flushed (struct queue *q, uint64_t ticket)
{
  return run_steps (q, INT_MAX, SYNC_ROUND, ticket, NULL);
}

/* ------------------------------------------------------------ the thread */

/* Until woken, until a retry is due, until the next look at the spare
 * buffers, or while writes are held for reads until the next look at
 * them.  A retry already due waits for the token's holder, whose release
 * wakes this thread; but never for long: a holder that gives its token
 * back without a look (a replug, a token handed to a flush) would leave
 * it asleep over a due retry, and every writer asleep on the flush that
 * waits for it.  Drops q->lock.
 */
#define DUE_RETRY_LOOK_NS (1 * NS_PER_MS)

static void
dispatcher_sleep (struct queue *q)
{
  uint64_t now = monotonic_ns ();
  uint64_t wake = MIN (next_retry_ns (q), failing_retry_ns (q));

  if (wake <= now)
    wake = now + DUE_RETRY_LOOK_NS;
  if (q->writes_held)
    wake = MIN (wake, now + READ_HOLD_LOOK_NS);
  if (q->spares_look_ns)
    wake = MIN (wake, q->spares_look_ns);
  if (wake == UINT64_MAX)
    lock_wait (&q->dispatch_wake, &q->lock);
  else
    lock_wait_until (&q->dispatch_wake, &q->lock, wake);
}

static void *
dispatch_thread (void *arg)
{
  struct queue *q = arg;

  lock_acquire (&q->lock);
  for (;;) {
    if (q->holders < token_limit (q)) {
      bool worked;

      q->holders++;
      worked = dispatch_step (q, SYNC_ROUND);
      q->holders--;
      room_pass_on (q);
      if (worked)
        continue;
      if (q->nr_queued == 0 && q->nr_batches == 0 && q->stopping)
        break;
    }
    if (spares_look_due (q)) {
      spares_trim (q);
      continue;                 /* the lock was dropped: look again */
    }
    dispatcher_sleep (q);
  }
  lock_release (&q->lock);
  return NULL;
}

/* Named pq-d:DISK, as far as 15 bytes go. */
int
dispatch_thread_start (struct queue *q)
{
  char name[16];

  snprintf (name, sizeof name, "pq-d:%s", q->name);
  if (engine_thread_create (&q->dispatcher, name, dispatch_thread, q) == -1) {
    log_error ("%s: cannot start the dispatch thread: %m", q->name);
    return -1;
  }
  q->dispatcher_started = true;
  return 0;
}
