/* plugq: unit tests for back-pressure (server/queue_room.c): a full
 * queue, the writers waiting for room in it, and who wakes them.
 *
 * A writer woken for room that someone else takes first only goes back
 * to sleep: a context switch for nothing.  On a backend slower than its
 * clients every write waits for room, so those wake-ups would cost more
 * than the queue saves.
 */
#include <config.h>

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fixtures.h"
#include "queue.h"
#include "queue_internal.h"
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

/* The fields the rules read, saved so a case can set them and put the
 * queue back as it was.
 */
struct room_fields {
  uint32_t nr_queued, full_waiters, space_sleepers, space_wakes;
  unsigned holders;
};

static struct room_fields
room_fields_save (const struct queue *q)
{
  return (struct room_fields) {
    q->nr_queued, q->full_waiters, q->space_sleepers, q->space_wakes,
    q->holders,
  };
}

static void
room_fields_restore (struct queue *q, const struct room_fields *f)
{
  q->nr_queued = f->nr_queued;
  q->full_waiters = f->full_waiters;
  q->space_sleepers = f->space_sleepers;
  q->space_wakes = f->space_wakes;
  q->holders = f->holders;
}

/* A completion wakes a sleeper to send the next batch, one per sleeper,
 * and none while a token is held: the holder looks again before it lets
 * go.  Nobody really sleeps here; the counts say who would be woken.
 */
static void
test_completion_wakes_for_the_slot (void)
{
  struct queue_config cfg = test_config (TEST_HOUR, 16);
  struct test_rig r = { 0 };
  struct queue *q;
  struct room_fields saved;
  bool ok;

  ok = CHECK (test_rig_one (&r, &cfg, DISK_SIZE, 4, 0));
  if (ok) {
    q = r.d[0].q;
    lock_acquire (&q->lock);
    saved = room_fields_save (q);
    q->full_waiters = q->space_sleepers = 2;
    q->space_wakes = 0;
    q->holders = 1;
    ok &= CHECK (!room_wake_for_slot (q));
    q->holders = 0;
    ok &= CHECK (room_wake_for_slot (q) && q->space_wakes == 1);
    ok &= CHECK (room_wake_for_slot (q) && q->space_wakes == 2);
    ok &= CHECK (!room_wake_for_slot (q));      /* both woken already */
    room_fields_restore (q, &saved);
    lock_release (&q->lock);
  }
  test_rig_stop (&r);
  tap_ok (ok, "a completion wakes one sleeper per freed slot, none"
               " while a dispatch token is held");
}

/* Room left over goes to a sleeper only when nobody awake, or woken
 * already, will take it.
 */
static void
test_room_passed_on_once (void)
{
  struct queue_config cfg = test_config (TEST_HOUR, 16);
  struct test_rig r = { 0 };
  struct queue *q;
  struct room_fields saved;
  bool ok;

  cfg.queue_requests = QUEUE_REQUESTS;
  ok = CHECK (test_rig_one (&r, &cfg, DISK_SIZE, 0, 0));
  if (ok) {
    q = r.d[0].q;
    lock_acquire (&q->lock);
    saved = room_fields_save (q);
    q->full_waiters = 3;        /* one awake, two asleep */
    q->space_sleepers = 2;
    q->space_wakes = 0;
    q->nr_queued = QUEUE_REQUESTS;
    room_pass_on (q);
    ok &= CHECK (q->space_wakes == 0);          /* no room */
    q->nr_queued = QUEUE_REQUESTS - 1;
    room_pass_on (q);
    ok &= CHECK (q->space_wakes == 0);          /* the awake one's */
    q->nr_queued = QUEUE_REQUESTS - 2;
    room_pass_on (q);
    ok &= CHECK (q->space_wakes == 1);
    room_pass_on (q);
    ok &= CHECK (q->space_wakes == 1);          /* the woken one's */
    q->nr_queued = QUEUE_REQUESTS - 3;
    room_pass_on (q);
    ok &= CHECK (q->space_wakes == 2);
    room_fields_restore (q, &saved);
    lock_release (&q->lock);
  }
  test_rig_stop (&r);
  tap_ok (ok, "room left over wakes a sleeper only for room no one"
               " awake or already woken will take");
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

/* WRITERS threads of random 4 KiB writes (ack=queued) on a queue of
 * QUEUE_REQUESTS pieces over a backend that takes its time: the queue
 * is full much of the time.  A writer sleeps about once per wait (less
 * when it can write the queue out itself); waking writers for room or
 * slots others took cost 1.2 to 1.8 sleeps per wait.
 */
static void
writers_on_full_queue (const struct test_shape *shape, uint64_t min_waits,
                       const char *what)
{
  struct queue_config cfg = test_config (TEST_HOUR, 16);
  struct test_thread t[WRITERS];
  struct random_writer w[WRITERS];
  struct test_rig r = { 0 };
  struct queue_stats st;
  uint64_t sleeps = 0;
  bool ok;

  cfg.queue_requests = QUEUE_REQUESTS;
  ok = CHECK (test_rig_shaped (&r, &cfg, DISK_SIZE, shape));
  if (ok)
    test_backend_jitter (r.d[0].tb, 42);
  for (int i = 0; i < WRITERS; i++) {
    t[i] = (struct test_thread) TEST_THREAD_INIT;
    w[i] = (struct random_writer) { ok ? r.d[0].q : NULL, 1000 + i, 'a' + i };
    ok = ok && CHECK (test_thread_start (&t[i], random_writer_run,
                                         &w[i]) == 0);
  }
  for (int i = 0; i < WRITERS; i++) {
    if (t[i].joined)
      continue;
    ok &= CHECK (test_thread_wait (&t[i]) && t[i].result == 0);
    test_thread_join (&t[i]);
  }
  if (ok) {
    ok &= CHECK (queue_flush (r.d[0].q, NULL) == 0);
    st = test_stats (r.d[0].q);
    lock_acquire (&r.d[0].q->lock);
    sleeps = r.d[0].q->space_sleeps;
    lock_release (&r.d[0].q->lock);
    printf ("# %s: %u writes, %" PRIu64 " waited for room, %" PRIu64
            " sleeps\n", what, WRITERS * WRITES_EACH, st.full_waits, sleeps);
    ok &= CHECK (st.full_waits >= min_waits);
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

  writers_on_full_queue (&shape, WRITERS * WRITES_EACH / 4,
                         "asynchronous backend, 4 in flight");
}

static void
test_writers_on_full_sync_queue (void)
{
  const struct test_shape shape = { .writers = 2 };

  /* Its writers write the queue out themselves: it fills less often. */
  writers_on_full_queue (&shape, WRITERS * WRITES_EACH / 20,
                         "synchronous backend, 2 writers");
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
