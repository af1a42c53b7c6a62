/* plugq: unit tests for writers that wait for their own write (FUA,
 * ack=dispatched): a busy backend is their plug, and a backend with FUA
 * makes their writes durable without a flush.
 *
 *  - At depth 1 a waiting write goes out at once and alone, even behind
 *    an unplug delay of an hour.
 *  - At depth, waiting writes that continue a write in flight wait for
 *    it and go out merged: on an asynchronous backend once every slot
 *    it has is taken, on a synchronous one while its dispatch token is
 *    held.
 *  - On an asynchronous backend with FUA a FUA batch carries the flag
 *    and no backend flush follows; a FUA piece superseded before it went
 *    out still waits for a flush that covers the newer write.
 *  - A FLUSH promises what was answered before it: it does not wait for
 *    writes still waiting for their answer, but does for one that took
 *    over the bytes of an answered one.
 *
 * Every wait is bounded (fixtures.h); a held backend gate keeps a write
 * in flight for as long as a case needs.
 */

#include <config.h>

#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixtures.h"
#include "queue/queue.h"
#include "queue/queue_internal.h"
#include "tap.h"
#include "test_backends.h"

#define KiB ((uint64_t) 1024)
#define MiB (KiB * 1024)
#define DISK_SIZE (4 * MiB)
#define BLOCK (4 * KiB)
#define ASYNC_IN_FLIGHT 8
#define MAX_CALLS 64

/* Waiting writes through the queue: bypass=never, or on an
 * asynchronous backend the random ones would go around it
 * (test_waiting_writes_go_around).
 */
static struct queue_config
waiting_config (enum ack_mode ack)
{
  struct queue_config cfg = test_config (TEST_HOUR, 16);

  cfg.ack = ack;
  cfg.bypass = false;
  return cfg;
}

/* One disk: async > 0 makes it asynchronous, fua gives it FUA. */
static bool
rig_start (struct test_rig *r, const struct queue_config *cfg,
           unsigned async, bool fua)
{
  const struct test_shape shape = { .async = async, .fua = fua };

  return test_rig_shaped (r, cfg, DISK_SIZE, &shape);
}

/* The backend writes so far, in the order they arrived. */
static size_t
writes (struct test_disk *d, struct tb_call *calls)
{
  return test_backend_calls (d->tb, TB_PWRITEV, calls, MAX_CALLS);
}

/* At least n backend writes have arrived (a bounded wait). */
#define ENTERED(r, n) test_backend_wait_entered ((r).d[0].tb, TB_PWRITEV, (n))

/* Starts a waiting write of one block of c at offset on its own thread
 * and waits until it has reached the queue (counted by `arrived`).
 */
#define START_WRITE(t, j, arrived) \
  (CHECK (test_thread_start ((t), test_write_job_run, (j)) == 0) \
   && CHECK (TEST_WAIT_FOR (arrived)))

/* ------------------------------------------------------------ depth 1 */

static void
test_depth_one_goes_at_once (unsigned async)
{
  struct queue_config cfg = waiting_config (ACK_DISPATCHED);
  struct tb_call calls[MAX_CALLS];
  struct test_rig r;
  struct queue_stats st;
  bool ok = CHECK (rig_start (&r, &cfg, async, false));
  size_t n = 0;

  /* Back to back, one at a time: each continues the one before, which
   * has completed, so nothing is busy and nothing waits for the hour.
   */
  for (int i = 0; ok && i < 8; i++) {
    struct test_write_job j = { r.d[0].q, 'a' + i, BLOCK, i * BLOCK, 0 };
    struct test_thread t = TEST_THREAD_INIT;

    ok = CHECK (test_thread_start (&t, test_write_job_run, &j) == 0)
      && CHECK (test_thread_wait (&t)) && CHECK (t.result == 0);
    test_thread_join (&t);
  }
  if (ok) {
    st = test_stats (r.d[0].q);
    n = writes (&r.d[0], calls);
    ok = CHECK (n == 8) && CHECK (st.waits_behind_stream == 0)
      && CHECK (st.waiting_merged == 0);
  }
  test_rig_stop (&r);
  tap_ok (ok, "depth 1, ack=dispatched behind an hour's unplug delay: each"
          " write goes out at once and alone (%zu backend writes)%s", n,
          async ? " [async]" : "");
}

/* ------------------------------------------------------------ depth */

/* A stream of waiting writes at depth on an asynchronous backend of
 * STREAM_SLOTS slots whose writes are held at the gate: the first
 * STREAM_SLOTS find a free slot and go at once, the next `held` continue
 * the stream it is busy with and wait for it.  Then the gate opens and
 * all are answered.
 */
#define STREAM_SLOTS 4
#define STREAM_MAX (STREAM_SLOTS + 4)

static bool
run_stream (struct test_rig *r, struct test_thread *t, unsigned flags,
            int held)
{
  struct test_write_job j[STREAM_MAX];
  int n = STREAM_SLOTS + held;
  bool ok = CHECK (n <= STREAM_MAX);

  for (int i = 0; ok && i < n; i++)
    j[i] = (struct test_write_job) { r->d[0].q, 'a' + i, BLOCK, i * BLOCK,
                                     flags };
  test_backend_block (r->d[0].tb, TB_PWRITEV);
  for (int i = 0; ok && i < STREAM_SLOTS; i++)
    ok = START_WRITE (&t[i], &j[i], ENTERED (*r, (unsigned) i + 1));
  for (int i = STREAM_SLOTS; ok && i < n; i++)
    ok = START_WRITE (&t[i], &j[i], test_stats (r->d[0].q).waits_behind_stream
                      == (uint64_t) (i - STREAM_SLOTS + 1));
  test_backend_release (r->d[0].tb, TB_PWRITEV);
  for (int i = 0; i < n; i++)
    ok = ok && CHECK (test_thread_wait (&t[i])) && CHECK (t[i].result == 0);
  return ok;
}

static void
join_all (struct test_thread *t, int n)
{
  for (int i = 0; i < n; i++)
    test_thread_join (&t[i]);
}

static void
threads_init (struct test_thread *t, int n)
{
  for (int i = 0; i < n; i++)
    t[i] = (struct test_thread) TEST_THREAD_INIT;
}

/* The held writes go out as one operation after the stream ahead. */
static void
test_async_stream_merges (void)
{
  struct queue_config cfg = waiting_config (ACK_DISPATCHED);
  struct test_thread t[STREAM_MAX];
  struct tb_call calls[MAX_CALLS];
  struct test_rig r;
  struct queue_stats st = { 0 };
  size_t n = 0;
  bool ok = CHECK (rig_start (&r, &cfg, STREAM_SLOTS, false));

  threads_init (t, STREAM_MAX);
  ok = ok && run_stream (&r, t, 0, 3);
  if (ok) {
    st = test_stats (r.d[0].q);
    n = writes (&r.d[0], calls);
    ok = CHECK (n == STREAM_SLOTS + 1)
      && CHECK (calls[STREAM_SLOTS].offset == STREAM_SLOTS * BLOCK)
      && CHECK (calls[STREAM_SLOTS].count == 3 * BLOCK)
      && CHECK (st.waiting_merged == 3)
      && CHECK (test_backend_holds (r.d[0].tb, 'a' + STREAM_SLOTS + 2,
                                    BLOCK, (STREAM_SLOTS + 2) * BLOCK));
  }
  join_all (t, STREAM_MAX);
  test_rig_stop (&r);
  tap_ok (ok, "at depth on an asynchronous backend, waiting writes behind a"
          " busy stream merge (%zu backend writes, %" PRIu64 " held, %"
          PRIu64 " merged)", n, st.waits_behind_stream, st.waiting_merged);
}

#define BEHIND_MAX 5

/* n waiting writes of one block each, back to back, on rig r's
 * synchronous backend: the first is held at the gate while the others
 * queue behind it, then the gate opens and every one is answered and
 * joined.  t[i] keeps the thread each ran on.
 */
static bool
writes_behind_held (struct test_rig *r, struct test_thread *t, int n)
{
  struct test_write_job j[BEHIND_MAX];
  bool ok = true;

  for (int i = 0; i < n; i++) {
    j[i] = (struct test_write_job) { r->d[0].q, 'a' + i, BLOCK, i * BLOCK, 0 };
    t[i] = (struct test_thread) TEST_THREAD_INIT;
  }
  test_backend_block (r->d[0].tb, TB_PWRITEV);
  ok = START_WRITE (&t[0], &j[0], ENTERED (*r, 1));
  for (int i = 1; ok && i < n; i++)
    ok = START_WRITE (&t[i], &j[i], test_stats (r->d[0].q).op[OP_WRITE].requests
                      == (uint64_t) i + 1);
  test_backend_release (r->d[0].tb, TB_PWRITEV);
  for (int i = 0; i < n; i++)
    ok = ok && CHECK (test_thread_wait (&t[i])) && CHECK (t[i].result == 0);
  for (int i = 0; i < n; i++)
    test_thread_join (&t[i]);
  return ok;
}

/* A synchronous backend with one dispatch token: while its holder is in
 * the backend, the waiting writes behind it queue up and go out as one.
 */
static void
test_sync_token_merges (void)
{
  struct queue_config cfg = waiting_config (ACK_DISPATCHED);
  struct test_thread t[BEHIND_MAX];
  struct tb_call calls[MAX_CALLS];
  struct test_rig r;
  struct queue_stats st = { 0 };
  size_t n = 0;
  bool ok = CHECK (rig_start (&r, &cfg, 0, false))
    && writes_behind_held (&r, t, 5);

  if (ok) {
    st = test_stats (r.d[0].q);
    n = writes (&r.d[0], calls);
    ok = CHECK (n == 2) && CHECK (calls[1].count == 4 * BLOCK)
      && CHECK (st.waiting_merged == 4);
  }
  test_rig_stop (&r);
  tap_ok (ok, "at depth on a synchronous backend, waiting writes queue"
          " while its token is busy and merge (%zu backend writes)", n);
}

/* The writer whose write was held at the gate is done once it lands:
 * it answers then, and the batch queued behind it meanwhile is written
 * by another thread (the dispatch thread or a writer of that batch), not
 * by it on its way out.  Its client waited for one backend write, not
 * two.
 */
static void
test_waiter_stops_once_written (void)
{
  struct queue_config cfg = waiting_config (ACK_DISPATCHED);
  struct test_thread t[BEHIND_MAX];
  struct tb_call calls[MAX_CALLS];
  struct test_rig r;
  size_t n = 0;
  bool ok = CHECK (rig_start (&r, &cfg, 0, false))
    && writes_behind_held (&r, t, 3);

  if (ok) {
    n = writes (&r.d[0], calls);
    ok = CHECK (n == 2) && CHECK (calls[0].offset == 0)
      && CHECK (pthread_equal (calls[0].thread, t[0].thread))
      && CHECK (calls[1].count == 2 * BLOCK)
      && CHECK (!pthread_equal (calls[1].thread, t[0].thread));
  }
  test_rig_stop (&r);
  tap_ok (ok, "a waiting writer that writes the queue out stops once its own"
          " write is done (%zu backend writes)", n);
}

/* ------------------------------------------------------------ FUA */

static size_t
flushes (struct test_disk *d)
{
  return test_backend_count (d->tb, TB_FLUSH);
}

/* FUA writes back to back at depth on a backend with FUA: every backend
 * write carries FUA, the held ones merged, and no flush.
 */
static void
test_fua_rides_on_writes (void)
{
  struct queue_config cfg = waiting_config (ACK_QUEUED);
  struct test_thread t[STREAM_MAX];
  struct tb_call calls[MAX_CALLS];
  struct test_rig r;
  size_t n = 0, fua = 0;
  bool ok = CHECK (rig_start (&r, &cfg, STREAM_SLOTS, true));

  threads_init (t, STREAM_MAX);
  ok = ok && run_stream (&r, t, REQ_FUA, 2);
  if (ok) {
    n = writes (&r.d[0], calls);
    for (size_t i = 0; i < n; i++)
      fua += calls[i].fua;
    ok = CHECK (n == STREAM_SLOTS + 1) && CHECK (fua == n)
      && CHECK (flushes (&r.d[0]) == 0)
      && CHECK (calls[STREAM_SLOTS].count == 2 * BLOCK);
  }
  join_all (t, STREAM_MAX);
  test_rig_stop (&r);
  tap_ok (ok, "FUA writes on a backend with FUA: %zu backend writes, %zu with"
          " FUA, no backend flush", n, fua);
}

/* A FUA write waits in the queue behind an older write in flight over
 * the same bytes; a newer ordinary write replaces it there.  Its answer
 * must wait for a backend flush after the newer write: the disk holds
 * neither version durably before that.
 */
static void
test_superseded_fua_flushes (void)
{
  struct queue_config cfg = test_config (TEST_HOUR, 1);
  struct test_write_job fua_job = { .c = 'f', .count = BLOCK, .offset = 0,
                                    .flags = REQ_FUA };
  struct test_thread t = TEST_THREAD_INIT;
  struct tb_call calls[MAX_CALLS];
  struct test_rig r;
  size_t n = 0, last_write = 0, flush_at = SIZE_MAX;
  bool ok = CHECK (rig_start (&r, &cfg, ASYNC_IN_FLIGHT, true));

  fua_job.q = r.d[0].q;
  if (ok)
    test_backend_block (r.d[0].tb, TB_PWRITEV);
  /* 'x' goes out (unplug-thresh=1) and is held in the backend, */
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'x', BLOCK, 0, 0) == 0);
  ok = ok && CHECK (ENTERED (r, 1));
  /* the FUA 'f' over it must wait in the queue, */
  ok = ok && START_WRITE (&t, &fua_job,
                          test_stats (r.d[0].q).fua_requests == 1);
  /* and 'y' replaces 'f' there before it went out. */
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'y', BLOCK, 0, 0) == 0);
  test_backend_release (r.d[0].tb, TB_PWRITEV);
  ok = ok && CHECK (test_thread_wait (&t)) && CHECK (t.result == 0);
  if (ok) {
    n = test_backend_calls (r.d[0].tb, TB_OPS, calls, MAX_CALLS);
    for (size_t i = 0; i < n; i++) {
      if (calls[i].op == TB_PWRITEV)
        last_write = i;
      else if (calls[i].op == TB_FLUSH)
        flush_at = i;
    }
    ok = CHECK (flush_at != SIZE_MAX && flush_at > last_write)
      && CHECK (test_backend_holds (r.d[0].tb, 'y', BLOCK, 0));
  }
  test_thread_join (&t);
  test_rig_stop (&r);
  tap_ok (ok, "a FUA write replaced in the queue by a newer write is"
          " answered after a backend flush that covers the newer one");
}

/* ------------------------------------------------------------ stress */

/* STRESS_WRITERS clients, each waiting for every write, write one
 * interleaved stream: client k writes blocks k, k + STRESS_WRITERS, ...,
 * so nearly every write continues another client's write in flight, on
 * an asynchronous backend that finishes operations late and out of
 * order.  Every third write is FUA.  The backend checks its contract as
 * it goes (no overlapping operations in flight, merge limits); a FUA
 * write must find its block durable when it is answered; at the end the
 * backend holds every block's write, and waiting writes were held and
 * merged.
 */
#define STRESS_WRITERS 8
#define STRESS_ROUNDS 96

struct stress {
  struct test_disk *d;
  unsigned k;
  bool ok;
};

static atomic_bool breached;
static char breach[256];

static void
record_breach (void *arg, const char *msg)
{
  (void) arg;
  if (!atomic_exchange (&breached, true))
    snprintf (breach, sizeof breach, "%s", msg);
}

/* Fewer slots than writers: a write only waits behind the stream when
 * every slot is taken (behind_busy_stream).
 */
#define STRESS_SLOTS (STRESS_WRITERS / 2)

static int
stress_writer (void *arg)
{
  struct stress *s = arg;

  for (unsigned r = 0; s->ok && r < STRESS_ROUNDS; r++) {
    uint64_t block = (uint64_t) r * STRESS_WRITERS + s->k;
    unsigned flags = block % 3 == 0 ? REQ_FUA : 0;
    uint8_t dirty[BLOCK];

    if (test_write_fill (s->d->q, NULL, (int) (block % 251) + 1, BLOCK,
                         block * BLOCK, flags) == -1) {
      s->ok = false;
      break;
    }
    if (flags) {
      test_backend_dirty (s->d->tb, dirty, BLOCK, block * BLOCK);
      s->ok = test_buffer_is (dirty, 0, BLOCK, block * BLOCK,
                              "a FUA block's dirty map when answered");
    }
  }
  return s->ok ? 0 : -1;
}

static void
test_interleaved_waiting_writers (bool fua)
{
  struct queue_config cfg = waiting_config (ACK_DISPATCHED);
  struct tb_contract c = {
    .merge_limit = cfg.max_merge, .fault = record_breach,
  };
  struct stress s[STRESS_WRITERS];
  struct test_thread t[STRESS_WRITERS];
  struct queue_stats st = { 0 };
  struct test_backend *tb;
  struct test_rig r;
  bool ok;

  memset (&r, 0, sizeof r);
  threads_init (t, STRESS_WRITERS);
  tb = test_rig_backend (&r, DISK_SIZE);
  ok = CHECK (tb != NULL)
    && CHECK (test_backend_set_async (tb, STRESS_SLOTS) == 0)
    && CHECK (test_backend_check_contract (tb, &c) == 0);
  if (ok && fua)
    test_backend_set_fua (tb);
  if (ok)
    test_backend_jitter (tb, 42 + fua);
  ok = ok && CHECK (test_rig_start (&r, &cfg));
  for (unsigned k = 0; ok && k < STRESS_WRITERS; k++) {
    s[k] = (struct stress) { &r.d[0], k, true };
    ok = CHECK (test_thread_start (&t[k], stress_writer, &s[k]) == 0);
  }
  for (unsigned k = 0; k < STRESS_WRITERS; k++)
    ok = ok && CHECK (test_thread_wait (&t[k])) && CHECK (t[k].result == 0);
  for (uint64_t b = 0; ok && b < STRESS_ROUNDS * STRESS_WRITERS; b++)
    ok = test_backend_holds (r.d[0].tb, (int) (b % 251) + 1, BLOCK, b * BLOCK);
  /* How many writes were held and merged depends on the threads'
   * timing (a sanitizer's slowdown can leave none to merge), so this test
   * checks only what must hold in every schedule: the data and the
   * backend contract.  test_async_stream_merges and
   * test_sync_token_merges pin down holding and merging.
   */
  if (ok)
    st = test_stats (r.d[0].q);
  if (atomic_exchange (&breached, false)) {
    printf ("# backend contract broken: %s\n", breach);
    ok = false;
  }
  join_all (t, STRESS_WRITERS);
  test_rig_stop (&r);
  tap_ok (ok, "%d clients writing one interleaved stream, waiting for each"
          " write%s: all land, %" PRIu64 " held, %" PRIu64 " merged",
          STRESS_WRITERS, fua ? ", FUA carried" : ", FUA by flush",
          st.waits_behind_stream, st.waiting_merged);
}

/* ------------------------------------------------------------ FLUSH */

static int
flush_run (void *arg)
{
  return queue_flush (arg, NULL);
}

/* The index of the last call of kind op in calls[0..n), or SIZE_MAX. */
static size_t
last_call (const struct tb_call *calls, size_t n, enum tb_op op)
{
  size_t at = SIZE_MAX;

  for (size_t i = 0; i < n; i++)
    if (calls[i].op == op)
      at = i;
  return at;
}

/* With ack=dispatched a FLUSH promises only what was answered before
 * it.  'b' waits in the queue behind 'a' in flight; 'c' replaces it
 * there, which answers 'b' (its bytes will be 'c').  A FLUSH now must
 * wait for 'c', although nobody has been answered for 'c' itself.
 */
static void
test_flush_waits_for_superseding_waiter (unsigned async)
{
  struct queue_config cfg = waiting_config (ACK_DISPATCHED);
  struct test_write_job j[3];
  struct test_thread t[3] = {
    TEST_THREAD_INIT, TEST_THREAD_INIT, TEST_THREAD_INIT,
  };
  struct test_thread f = TEST_THREAD_INIT;
  struct tb_call calls[MAX_CALLS];
  struct test_rig r;
  size_t n = 0;
  bool ok = CHECK (rig_start (&r, &cfg, async, false));

  for (int i = 0; i < 3; i++)
    j[i] = (struct test_write_job) { r.d[0].q, 'a' + i, BLOCK, 0, 0 };
  if (ok)
    test_backend_block (r.d[0].tb, TB_PWRITEV);
  ok = ok && START_WRITE (&t[0], &j[0], ENTERED (r, 1));
  ok = ok && START_WRITE (&t[1], &j[1],
                          test_stats (r.d[0].q).op[OP_WRITE].requests == 2);
  ok = ok && START_WRITE (&t[2], &j[2],
                          test_stats (r.d[0].q).op[OP_WRITE].requests == 3);
  /* 'b' was answered when 'c' replaced it. */
  ok = ok && CHECK (test_thread_wait (&t[1])) && CHECK (t[1].result == 0);
  ok = ok && CHECK (test_thread_start (&f, flush_run, r.d[0].q) == 0)
    && CHECK (TEST_WAIT_FOR (test_stats (r.d[0].q).flushes == 1));
  test_backend_release (r.d[0].tb, TB_PWRITEV);
  ok = ok && CHECK (test_thread_wait (&f)) && CHECK (f.result == 0);
  if (ok) {
    n = test_backend_calls (r.d[0].tb, TB_OPS, calls, MAX_CALLS);
    ok = CHECK (last_call (calls, n, TB_FLUSH) != SIZE_MAX)
      && CHECK (last_call (calls, n, TB_FLUSH)
                > last_call (calls, n, TB_PWRITEV))
      && CHECK (test_backend_holds (r.d[0].tb, 'c', BLOCK, 0));
  }
  for (int i = 0; i < 3; i++) {
    ok = ok && CHECK (test_thread_wait (&t[i])) && CHECK (t[i].result == 0);
    test_thread_join (&t[i]);
  }
  test_thread_join (&f);
  test_rig_stop (&r);
  tap_ok (ok, "ack=dispatched: a FLUSH after a waiting write was answered by"
          " being replaced waits for the write that replaced it%s",
          async ? " [async]" : "");
}

/* A FLUSH does not wait for writes nobody has been answered for: with
 * ack=dispatched and a write held in an asynchronous backend, the
 * backend flush runs at once.  (A synchronous backend runs one flush or
 * write at a time anyway.)
 */
static void
test_flush_does_not_wait_for_waiters (void)
{
  struct queue_config cfg = waiting_config (ACK_DISPATCHED);
  struct test_write_job j = { .c = 'a', .count = BLOCK };
  struct test_thread t = TEST_THREAD_INIT, f = TEST_THREAD_INIT;
  struct test_rig r;
  bool ok = CHECK (rig_start (&r, &cfg, ASYNC_IN_FLIGHT, false));

  j.q = r.d[0].q;
  if (ok)
    test_backend_block (r.d[0].tb, TB_PWRITEV);
  ok = ok && START_WRITE (&t, &j, ENTERED (r, 1));
  ok = ok && CHECK (test_thread_start (&f, flush_run, r.d[0].q) == 0)
    && CHECK (test_thread_wait (&f)) && CHECK (f.result == 0)
    && CHECK (test_backend_count (r.d[0].tb, TB_FLUSH) == 1)
    && CHECK (!test_thread_done (&t));
  test_backend_release (r.d[0].tb, TB_PWRITEV);
  ok = ok && CHECK (test_thread_wait (&t)) && CHECK (t.result == 0);
  test_thread_join (&t);
  test_thread_join (&f);
  test_rig_stop (&r);
  tap_ok (ok, "ack=dispatched: a FLUSH does not wait for a write still"
          " waiting for its answer [async]");
}

/* On an asynchronous backend the FLUSH's thread lends its token while
 * the backend flush runs: a waiting write that arrives meanwhile is sent
 * beside the flush instead of waiting out its round trip.
 */
static void
test_write_beside_async_flush (void)
{
  struct queue_config cfg = waiting_config (ACK_DISPATCHED);
  struct test_write_job j = { .c = 'b', .count = BLOCK };
  struct test_thread t = TEST_THREAD_INIT, f = TEST_THREAD_INIT;
  struct test_rig r;
  bool ok = CHECK (rig_start (&r, &cfg, ASYNC_IN_FLIGHT, false));

  j.q = r.d[0].q;
  if (ok)
    test_backend_block (r.d[0].tb, TB_FLUSH);
  ok = ok && CHECK (test_thread_start (&f, flush_run, r.d[0].q) == 0)
    && CHECK (test_backend_wait_entered (r.d[0].tb, TB_FLUSH, 1));
  ok = ok && CHECK (test_thread_start (&t, test_write_job_run, &j) == 0)
    && CHECK (ENTERED (r, 1)) && CHECK (test_thread_wait (&t))
    && CHECK (t.result == 0) && CHECK (!test_thread_done (&f));
  test_backend_release (r.d[0].tb, TB_FLUSH);
  ok = ok && CHECK (test_thread_wait (&f)) && CHECK (f.result == 0)
    && CHECK (test_backend_holds (r.d[0].tb, 'b', BLOCK, 0));
  test_thread_join (&t);
  test_thread_join (&f);
  test_rig_stop (&r);
  tap_ok (ok, "ack=dispatched: a write arriving while a backend flush runs"
          " is sent and answered beside it [async]");
}

/* A write whose request waits for it (ack=dispatched) lends its own
 * buffer to the queue, uncopied: the backend writes from the caller's
 * memory.  An answered one (ack=queued) is a copy.
 */
static bool
write_reaches_backend_from (enum ack_mode ack, unsigned async,
                            bool *from_callers)
{
  struct queue_config cfg = waiting_config (ack);
  unsigned char *buf = malloc (BLOCK);
  struct tb_call calls[MAX_CALLS];
  struct test_rig r;
  bool ok = CHECK (buf != NULL) && CHECK (rig_start (&r, &cfg, async, false));

  if (buf)
    memset (buf, 'l', BLOCK);
  ok = ok && CHECK (queue_pwrite (r.d[0].q, NULL, buf, BLOCK, 0, 0) == 0)
    && CHECK (queue_flush (r.d[0].q, NULL) == 0)
    && CHECK (writes (&r.d[0], calls) == 1)
    && CHECK (test_backend_holds (r.d[0].tb, 'l', BLOCK, 0));
  if (ok)
    *from_callers = calls[0].first_base == buf;
  test_rig_stop (&r);
  free (buf);
  return ok;
}

static void
test_waiting_write_lends_its_buffer (unsigned async)
{
  bool lent = false, copied = true;
  bool ok = write_reaches_backend_from (ACK_DISPATCHED, async, &lent)
    && write_reaches_backend_from (ACK_QUEUED, async, &copied);

  tap_ok (ok && CHECK (lent) && CHECK (!copied),
          "a waiting write goes to the backend from its caller's buffer,"
          " an answered one from a copy%s", async ? " [async]" : "");
}

/* A waiting writer whose caller scribbles over its buffer and frees it
 * as soon as it is answered, as nbdkit may.
 */
static int
scribbling_write (void *q)
{
  unsigned char *buf = malloc (BLOCK);
  int r;

  if (buf == NULL)
    return -1;
  memset (buf, 'l', BLOCK);
  r = queue_pwrite (q, NULL, buf, BLOCK, 0, 0);
  memset (buf, 'x', BLOCK);
  free (buf);
  return r;
}

struct read_job {
  struct queue *q;
  unsigned char buf[2 * BLOCK];
};

static int
read_two_blocks (void *arg)
{
  struct read_job *j = arg;

  return queue_pread (j->q, j->buf, sizeof j->buf, 0);
}

/* A read that laid a lent piece over its result keeps a reference on
 * the buffer while it reads the backend for the rest: the writer, once
 * written, is not answered until the read has copied its bytes.
 */
static void
test_lent_buffer_outlives_readers (void)
{
  struct queue_config cfg = waiting_config (ACK_DISPATCHED);
  struct test_thread w = TEST_THREAD_INIT, rd = TEST_THREAD_INIT;
  struct read_job j;
  struct test_rig r;
  bool ok = CHECK (rig_start (&r, &cfg, ASYNC_IN_FLIGHT, false));
  bool answered_early = false;

  j.q = r.d[0].q;
  if (ok) {
    test_backend_block (r.d[0].tb, TB_PWRITEV);
    test_backend_block (r.d[0].tb, TB_PREAD);
  }
  ok = ok && CHECK (test_thread_start (&w, scribbling_write, j.q) == 0)
    && CHECK (ENTERED (r, 1))
    && CHECK (test_thread_start (&rd, read_two_blocks, &j) == 0)
    && CHECK (test_backend_wait_entered (r.d[0].tb, TB_PREAD, 1));
  test_backend_release (r.d[0].tb, TB_PWRITEV);
  ok = ok && CHECK (TEST_WAIT_FOR (test_stats (j.q).in_flight == 0));
  /* Answered now, the writer would scribble at once. */
  for (int i = 0; ok && i < 200 && !answered_early; i++) {
    test_poll_step ();
    answered_early = test_thread_done (&w);
  }
  test_backend_release (r.d[0].tb, TB_PREAD);
  ok = ok && CHECK (!answered_early)
    && CHECK (test_thread_wait (&rd)) && CHECK (rd.result == 0)
    && CHECK (test_thread_wait (&w)) && CHECK (w.result == 0)
    && CHECK (j.buf[0] == 'l' && j.buf[BLOCK - 1] == 'l');
  test_thread_join (&w);
  test_thread_join (&rd);
  test_rig_stop (&r);
  tap_ok (ok, "a lent buffer outlives a read still copying from it: its"
          " writer is answered after the read [async]");
}

/* A disk on an asynchronous backend taking `in_flight` operations, with
 * ack=dispatched and bypass=auto, its writes held in the backend.
 */
static bool
around_rig_start (struct test_rig *r, unsigned in_flight)
{
  struct queue_config cfg = waiting_config (ACK_DISPATCHED);

  cfg.bypass = true;
  if (!CHECK (rig_start (r, &cfg, in_flight, false)))
    return false;
  test_backend_block (r->d[0].tb, TB_PWRITEV);
  return true;
}

/* While ok, waits for n writer threads and asks whether each wrote; joins
 * them either way.
 */
static bool
writers_done (struct test_thread *t, int n, bool ok)
{
  for (int i = 0; i < n; i++) {
    ok = ok && CHECK (test_thread_wait (&t[i])) && CHECK (t[i].result == 0);
    test_thread_join (&t[i]);
  }
  return ok;
}

/* bypass=auto on an asynchronous backend: waiting random writes go
 * around the queue, several at once, from their own threads; a write
 * over bytes one of them is still writing takes the queue and goes out
 * after it, so the newer data wins.
 */
static void
test_waiting_writes_go_around (void)
{
  struct test_write_job j[4] = {
    { .c = 'a', .count = BLOCK, .offset = 0 },
    { .c = 'b', .count = BLOCK, .offset = 8 * BLOCK },
    { .c = 'c', .count = BLOCK, .offset = 16 * BLOCK },
    { .c = 'z', .count = BLOCK, .offset = 0 },
  };
  struct test_thread t[4] = { TEST_THREAD_INIT, TEST_THREAD_INIT,
                              TEST_THREAD_INIT, TEST_THREAD_INIT };
  struct test_rig r;
  bool ok = around_rig_start (&r, ASYNC_IN_FLIGHT);

  for (int i = 0; ok && i < 3; i++) {
    j[i].q = r.d[0].q;
    ok = CHECK (test_thread_start (&t[i], test_write_job_run, &j[i]) == 0)
      && CHECK (ENTERED (r, i + 1));
  }
  j[3].q = r.d[0].q;
  ok = ok && CHECK (test_stats (r.d[0].q).queued_requests == 0)
    && CHECK (test_thread_start (&t[3], test_write_job_run, &j[3]) == 0)
    && CHECK (TEST_WAIT_FOR (test_stats (r.d[0].q).queued_requests == 1))
    && CHECK (test_backend_entered (r.d[0].tb, TB_PWRITEV) == 3);
  test_backend_release (r.d[0].tb, TB_PWRITEV);
  ok = writers_done (t, 4, ok)
    && CHECK (test_stats (r.d[0].q).bypassed_writes == 3)
    && CHECK (test_backend_holds (r.d[0].tb, 'z', BLOCK, 0))
    && CHECK (test_backend_holds (r.d[0].tb, 'c', BLOCK, 16 * BLOCK));
  test_rig_stop (&r);
  tap_ok (ok, "bypass=auto, asynchronous backend: waiting random writes go"
          " around the queue together; one over bytes still being written"
          " is queued and lands after it [async]");
}

/* Writes around the queue count against the backend's max_in_flight
 * with its batches: with two held, a third waiting write is queued and
 * goes out once one of them is written.
 */
static void
test_writes_around_count_in_flight (void)
{
  struct test_write_job j[3] = {
    { .c = 'a', .count = BLOCK, .offset = 0 },
    { .c = 'b', .count = BLOCK, .offset = 8 * BLOCK },
    { .c = 'c', .count = BLOCK, .offset = 16 * BLOCK },
  };
  struct test_thread t[3] = { TEST_THREAD_INIT, TEST_THREAD_INIT,
                              TEST_THREAD_INIT };
  struct test_rig r;
  bool ok = around_rig_start (&r, 2);

  for (int i = 0; ok && i < 3; i++) {
    j[i].q = r.d[0].q;
    ok = CHECK (test_thread_start (&t[i], test_write_job_run, &j[i]) == 0)
      && (i == 2 || CHECK (ENTERED (r, i + 1)));
  }
  ok = ok
    && CHECK (TEST_WAIT_FOR (test_stats (r.d[0].q).queued_requests == 1))
    && CHECK (test_backend_entered (r.d[0].tb, TB_PWRITEV) == 2);
  test_backend_release (r.d[0].tb, TB_PWRITEV);
  ok = writers_done (t, 3, ok)
    && CHECK (test_stats (r.d[0].q).bypassed_writes == 2)
    && CHECK (test_backend_holds (r.d[0].tb, 'c', BLOCK, 16 * BLOCK));
  test_rig_stop (&r);
  tap_ok (ok, "writes around the queue count against max_in_flight: with"
          " two of two held, the third is queued and lands after [async]");
}

int
main (void)
{
  test_depth_one_goes_at_once (0);
  test_depth_one_goes_at_once (ASYNC_IN_FLIGHT);
  test_async_stream_merges ();
  test_sync_token_merges ();
  test_waiter_stops_once_written ();
  test_fua_rides_on_writes ();
  test_superseded_fua_flushes ();
  test_flush_waits_for_superseding_waiter (0);
  test_flush_waits_for_superseding_waiter (ASYNC_IN_FLIGHT);
  test_flush_does_not_wait_for_waiters ();
  test_write_beside_async_flush ();
  test_waiting_write_lends_its_buffer (0);
  test_waiting_write_lends_its_buffer (ASYNC_IN_FLIGHT);
  test_lent_buffer_outlives_readers ();
  test_waiting_writes_go_around ();
  test_writes_around_count_in_flight ();
  test_interleaved_waiting_writers (false);
  test_interleaved_waiting_writers (true);
  tap_plan (tap_count);
  return tap_done ();
}
