/* plugq: unit tests for back-pressure (server/queue/queue_room.c): a full
 * queue, the writers waiting for room in it, and who wakes them.
 *
 * A writer woken for room that someone else takes first only goes back
 * to sleep: a context switch for nothing.  On a backend slower than its
 * clients every write waits for room, so those wake-ups would cost more
 * than the queue saves.
 */
#include <config.h>

#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fixtures.h"
#include "queue/queue.h"
#include "queue/queue_internal.h"
#include "tap.h"
#include "test_backends.h"

#define KiB ((uint64_t) 1024)
#define MiB (KiB * 1024)
#define BLOCK (4 * KiB)
#define DISK_SIZE (16 * MiB)
#define QUEUE_REQUESTS 8
#define WRITERS 8
#define WRITES_EACH 400

/* ------------------------------------------------------------ the rules */

/* Runs check on a queue of QUEUE_REQUESTS pieces (async > 0: over an
 * asynchronous backend), under its lock, with the fields the rules read
 * put back afterwards: a check sets them as it pleases.  Nobody really
 * sleeps on the queue; the counts say who would be woken.
 */
static bool
with_rules (unsigned async, bool (*check) (struct queue *))
{
  struct queue_config cfg = test_config (TEST_HOUR, 16);
  struct test_rig r = { 0 };
  bool ok;

  cfg.queue_requests = QUEUE_REQUESTS;
  ok = CHECK (test_rig_one (&r, &cfg, DISK_SIZE, async, 0));
  if (ok) {
    struct queue *q = r.d[0].q;
    uint32_t nr_queued, full_waiters, space_sleepers, space_wakes;
    unsigned holders;

    lock_acquire (&q->lock);
    nr_queued = q->nr_queued;
    full_waiters = q->full_waiters;
    space_sleepers = q->space_sleepers;
    space_wakes = q->space_wakes;
    holders = q->holders;
    ok = check (q);
    q->nr_queued = nr_queued;
    q->full_waiters = full_waiters;
    q->space_sleepers = space_sleepers;
    q->space_wakes = space_wakes;
    q->holders = holders;
    lock_release (&q->lock);
  }
  test_rig_stop (&r);
  return ok;
}

/* A completion wakes a sleeper to send the next batch, one per sleeper,
 * and none while a token is held: the holder looks again before it lets
 * go.
 */
static bool
wakes_for_the_slot (struct queue *q)
{
  bool ok = true;

  q->full_waiters = q->space_sleepers = 2;
  q->space_wakes = 0;
  q->holders = 1;
  ok &= CHECK (!room_wake_for_slot (q));
  q->holders = 0;
  ok &= CHECK (room_wake_for_slot (q) && q->space_wakes == 1);
  ok &= CHECK (room_wake_for_slot (q) && q->space_wakes == 2);
  ok &= CHECK (!room_wake_for_slot (q));        /* both woken already */
  return ok;
}

static void
test_completion_wakes_for_the_slot (void)
{
  tap_ok (with_rules (4, wakes_for_the_slot),
          "a completion wakes one sleeper per freed slot, none while a"
          " dispatch token is held");
}

/* Room left over goes to a sleeper only when nobody awake, or woken
 * already, will take it.
 */
static bool
passes_room_once (struct queue *q)
{
  bool ok = true;

  q->full_waiters = 3;          /* one awake, two asleep */
  q->space_sleepers = 2;
  q->space_wakes = 0;
  q->nr_queued = QUEUE_REQUESTS;
  room_pass_on (q);
  ok &= CHECK (q->space_wakes == 0);            /* no room */
  q->nr_queued = QUEUE_REQUESTS - 1;
  room_pass_on (q);
  ok &= CHECK (q->space_wakes == 0);            /* the awake one's */
  q->nr_queued = QUEUE_REQUESTS - 2;
  room_pass_on (q);
  ok &= CHECK (q->space_wakes == 1);
  room_pass_on (q);
  ok &= CHECK (q->space_wakes == 1);            /* the woken one's */
  q->nr_queued = QUEUE_REQUESTS - 3;
  room_pass_on (q);
  ok &= CHECK (q->space_wakes == 2);
  return ok;
}

static void
test_room_passed_on_once (void)
{
  tap_ok (with_rules (0, passes_room_once),
          "room left over wakes a sleeper only for room no one awake or"
          " already woken will take");
}

/* ------------------------------------------------------------ writers */

struct random_writer {
  struct queue *q;
  unsigned seed;
  int c;
};

static int
random_writer_run (void *arg)
{
  struct random_writer *w = arg;

  for (int i = 0; i < WRITES_EACH; i++) {
    uint64_t block = (uint64_t) rand_r (&w->seed) % (DISK_SIZE / BLOCK);

    if (test_write_fill (w->q, NULL, w->c, BLOCK, block * BLOCK, 0) != 0)
      return -1;
  }
  return 0;
}

/* Lets the gated backend write one batch every PACE_US until stopped:
 * a disk slower than the writers, however fast the machine.
 */
#define PACE_US 100

struct pacer {
  struct test_backend *tb;
  atomic_bool stop;
};

static int
pacer_run (void *arg)
{
  struct pacer *p = arg;

  while (!atomic_load (&p->stop)) {
    test_backend_step (p->tb, TB_PWRITEV, 1);
    test_sleep_us (PACE_US);
  }
  return 0;
}

/* WRITERS threads of random 4 KiB writes (ack=queued) on a queue of
 * QUEUE_REQUESTS pieces over a backend that takes its time (jitter on
 * an asynchronous one, a pacer on a synchronous one, whose writers
 * would otherwise write the queue out as fast as they fill it): the
 * queue is full much of the time.  A writer sleeps about once per wait
 * (less when it can write the queue out itself).  Waking writers for
 * room or slots others took cost 1.7 sleeps per wait here on the
 * asynchronous backend and 3 on the synchronous one.
 */
static void
writers_on_full_queue (const struct test_shape *shape, const char *what)
{
  struct queue_config cfg = test_config (TEST_HOUR, 16);
  struct test_thread t[WRITERS], paced = TEST_THREAD_INIT;
  struct random_writer w[WRITERS];
  struct pacer pacer = { .stop = false };
  struct test_rig r = { 0 };
  struct queue_stats st;
  uint64_t sleeps = 0;
  bool ok;

  cfg.queue_requests = QUEUE_REQUESTS;
  ok = CHECK (test_rig_shaped (&r, &cfg, DISK_SIZE, shape));
  if (ok && shape->async)
    test_backend_jitter (r.d[0].tb, 42);
  else if (ok) {
    pacer.tb = r.d[0].tb;
    test_backend_block (pacer.tb, TB_PWRITEV);
    ok = CHECK (test_thread_start (&paced, pacer_run, &pacer) == 0);
  }
  for (int i = 0; i < WRITERS; i++) {
    t[i] = (struct test_thread) TEST_THREAD_INIT;
    w[i] = (struct random_writer) { ok ? r.d[0].q : NULL, 1000 + i, 'a' + i };
    ok = ok && CHECK (test_thread_start (&t[i], random_writer_run,
                                         &w[i]) == 0);
  }
  for (int i = 0; i < WRITERS; i++)
    if (!t[i].joined)
      ok &= CHECK (test_thread_wait (&t[i]) && t[i].result == 0);
  if (pacer.tb) {               /* the gate opens before any join */
    atomic_store (&pacer.stop, true);
    test_thread_join (&paced);
    test_backend_release (pacer.tb, TB_PWRITEV);
  }
  for (int i = 0; i < WRITERS; i++)
    test_thread_join (&t[i]);
  if (ok) {
    ok &= CHECK (queue_flush (r.d[0].q, NULL) == 0);
    st = test_stats (r.d[0].q);
    lock_acquire (&r.d[0].q->lock);
    sleeps = r.d[0].q->space_sleeps;
    lock_release (&r.d[0].q->lock);
    printf ("# %s: %u writes, %" PRIu64 " waited for room, %" PRIu64
            " sleeps\n", what, WRITERS * WRITES_EACH, st.full_waits, sleeps);
    ok &= CHECK (st.full_waits >= WRITERS * WRITES_EACH / 4);
    ok &= CHECK (sleeps <= st.full_waits + st.full_waits / 10 + WRITERS);
  }
  test_rig_stop (&r);
  tap_ok (ok, "%s: writers on a full queue sleep about once per wait",
               what);
}

static void
test_writers_on_full_async_queue (void)
{
  const struct test_shape shape = { .async = 4 };

  writers_on_full_queue (&shape, "asynchronous backend, 4 in flight");
}

static void
test_writers_on_full_sync_queue (void)
{
  const struct test_shape shape = { .writers = 2 };

  writers_on_full_queue (&shape, "synchronous backend, 2 writers");
}

int
main (void)
{
  tap_plan (4);
  test_completion_wakes_for_the_slot ();
  test_room_passed_on_once ();
  test_writers_on_full_async_queue ();
  test_writers_on_full_sync_queue ();
  return tap_done ();
}
