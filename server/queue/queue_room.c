/* plugq: room in the queue (back-pressure), and the writers waiting for
 * it.
 *
 * A queue holds at most queue-requests pieces and queue-bytes of data
 * (queue_full).  A write that finds it full waits; queued data is never
 * dropped.  Room appears when a batch is taken for dispatch, since its
 * pieces leave the queue then; a completion frees a backend slot, which
 * lets the next batch go.  So:
 *
 *   1. A writer waiting for room first writes the queue out itself if it
 *      can (a free dispatch token and slot), then takes the room that
 *      made without sleeping.
 *   2. With nothing it can do, it sleeps on q->space (space_sleepers).
 *   3. A completion wakes one sleeper to send the next batch
 *      (room_wake_for_slot), but not while a dispatch token is held: the
 *      holder looks again before it lets go, and a sleeper woken
 *      meanwhile would find the token taken and sleep again.
 *   4. Room left over is passed on (room_pass_on): by a writer that took
 *      its own, by a holder letting go of the last token, and by the
 *      dispatch thread after its steps.  A sleeper is woken only for
 *      room no one else will take: not the writers awake and waiting,
 *      nor sleepers woken already and not yet up (space_wakes).
 *   5. Until a woken sleeper is up, a piece's room is held for it
 *      (queue_full counts space_wakes): a writer arriving meanwhile
 *      waits as well, and may write the queue out itself (1).
 *
 * Every wake-up of a sleeper that then finds no room is a context
 * switch for nothing, and with a backend slower than its clients (a
 * remote disk) nearly every write waits here.
 */
#include <config.h>

#include "queue_internal.h"

/* Whether a sleeper not yet woken is there to wake: if so, counts the
 * wake.  Each woken sleeper uncounts itself when it is up (room_sleep).
 */
static bool
room_wake_due (struct queue *q)
{
  queue_assert_locked (q);
  if (q->space_sleepers <= q->space_wakes)
    return false;
  q->space_wakes++;
  return true;
}

/* Sleeps on q->space until woken.  Drops q->lock while asleep. */
static void
room_sleep (struct queue *q)
{
  queue_assert_locked (q);
  q->space_sleepers++;
  q->space_sleeps++;
  lock_wait (&q->space, &q->lock);
  q->space_sleepers--;
  if (q->space_wakes > 0)       /* 0 after a wake-up nobody sent */
    q->space_wakes--;
}

int
wait_for_space_slow (struct queue *q, uint64_t bytes)
{
  bool counted = false;
  int err = 0;

  queue_assert_locked (q);
  while (queue_full (q, bytes) && (err = failing_blocks_writers (q)) == 0) {
    if (!counted) {
      q->stats.full_waits++;
      counted = true;
    }
    queue_unplug_locked (q, UNPLUG_FULL);
    q->full_waiters++;
    if (!run_queue_here (q, STEPS_HERE, SYNC_ROUND))
      room_sleep (q);
    q->full_waiters--;
  }
  return err;
}

bool
room_wake_for_slot (struct queue *q)
{
  queue_assert_locked (q);
  return q->full_waiters > 0 && q->holders == 0 && !q->stopping
    && room_wake_due (q);
}

void
room_pass_on_slow (struct queue *q)
{
  uint32_t awake = q->full_waiters - q->space_sleepers;
  uint32_t spoken_for = awake + q->space_wakes;

  queue_assert_locked (q);
  if (q->nr_queued + spoken_for < q->cfg.queue_requests
      && !queue_full (q, 0) && room_wake_due (q))
    pthread_cond_signal (&q->space);
}
