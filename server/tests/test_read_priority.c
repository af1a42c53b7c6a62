/* plugq: unit tests for reads in the elevator (elevator_reads.c,
 * queue_read_streams.c, batch_room in queue_batch.c).
 *
 *  - While a read competes (here: held at the backend), the writes the
 *    queue keeps at the backend stay within the elevator's allowance,
 *    and writes held back are counted; once reads stop, writes go at
 *    max-merge again.  With read-target=off nothing is held.
 *  - Held writes never wait past write-expire.
 *  - Sequential reads at depth wait behind the reads on their way and go
 *    out as one backend read, each getting its part with the queue's
 *    writes laid over it; one at a time (depth 1) they never wait, nor
 *    on a backend that reads at depth about as fast as alone
 *    (queue_read_depth.c, whose rule is also checked on chosen
 *    latencies).
 *
 * Each case runs over a synchronous and an asynchronous backend; every
 * wait is bounded (fixtures.h).
 */
#include <config.h>

#include <errno.h>
#include <stdatomic.h>
#include <inttypes.h>
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
#define MiB (1024 * KiB)
#define DISK_SIZE (16 * MiB)
#define READ_AT (12 * MiB)      /* reads here, writes below */
#define MAX_CALLS 256

static unsigned async_mode;
#define MODE (async_mode ? " [async]" : "")

/* Breaches of the backend contract in every case (test_count_breach). */
static _Atomic unsigned breaches;

/* One disk whose backend checks the contract (and so counts the write
 * bytes it runs at once).
 */
static bool
rig (struct test_rig *r, struct queue_config *cfg)
{
  struct tb_contract c = {
    .merge_limit = cfg->max_merge, .fault = test_count_breach,
    .arg = &breaches,
  };
  struct test_backend *tb;

  memset (r, 0, sizeof *r);
  tb = test_rig_backend (r, DISK_SIZE);
  return CHECK (tb != NULL)
    && (!async_mode || CHECK (test_backend_set_async (tb, 16) == 0))
    && CHECK (test_backend_check_contract (tb, &c) == 0)
    && CHECK (test_rig_start (r, cfg));
}

/* count bytes of c at offset, as stream writes of 64 KiB. */
static bool
write_stream (struct queue *q, int c, uint64_t count, uint64_t offset)
{
  for (uint64_t at = 0; at < count; at += 64 * KiB)
    if (!CHECK (test_write_fill (q, NULL, c, 64 * KiB, offset + at, 0) == 0))
      return false;
  return true;
}

/* ------------------------------------------------------------ priority */

/* The cases' queue: nothing goes out before the FLUSH that starts each
 * case's writing (16 MiB merges: 8 MiB queued do not unplug it), so the
 * allowance, not max-merge, caps what is held back.
 */
static struct queue_config
priority_config (void)
{
  struct queue_config cfg = test_config (TEST_HOUR, 100000);

  cfg.max_merge = 16 * MiB;
  cfg.bypass = false;
  cfg.read_target_ns = 1 * TEST_MS;
  return cfg;
}

struct flush_job {
  struct queue *q;
};

static int
flush_job_run (void *arg)
{
  struct flush_job *j = arg;

  return queue_flush (j->q, NULL) == 0 ? 0 : errno;
}

/* A read held at the backend competes with 16 MiB of writes, each held
 * at the backend too.  Returns with the read's and the flush's threads
 * running; released and joined by the caller.
 */
static bool
writes_beside_held_read (struct test_rig *r, struct test_read_job *rj,
                         struct test_thread *rt, struct flush_job *fj,
                         struct test_thread *ft)
{
  struct queue *q = r->d[0].q;
  bool ok;

  *rj = (struct test_read_job) { .q = q, .offset = READ_AT, .count = 4 * KiB };
  *fj = (struct flush_job) { .q = q };
  test_backend_block (r->d[0].tb, TB_PREAD);
  ok = CHECK (test_thread_start (rt, test_read_job_run, rj) == 0)
    && CHECK (test_backend_wait_entered (r->d[0].tb, TB_PREAD, 1));
  ok = ok && write_stream (q, 'w', 8 * MiB, 0);
  if (ok)
    test_backend_block (r->d[0].tb, TB_PWRITEV);
  ok = ok && CHECK (test_thread_start (ft, flush_job_run, fj) == 0)
    && CHECK (test_backend_wait_entered (r->d[0].tb, TB_PWRITEV, 1));
  return ok;
}

static void
test_writes_held_for_reads (void)
{
  struct queue_config cfg = priority_config ();
  struct test_thread rt = TEST_THREAD_INIT, ft = TEST_THREAD_INIT;
  struct test_read_job rj;
  struct flush_job fj;
  struct test_rig r;
  uint64_t held_max = 0, after_max = 0;
  bool ok, held = false, released = false;

  ok = rig (&r, &cfg) && writes_beside_held_read (&r, &rj, &rt, &fj, &ft);
  /* The starting allowance (1 MiB, in parts of an eighth) is on its
   * way, and no more while the read competes.
   */
  held = ok && TEST_WAIT_FOR (test_stats (r.d[0].q).writes_held > 0)
    && !TEST_SOON (test_backend_max_write_bytes (r.d[0].tb, false)
                   > 1 * MiB);
  ok = ok && CHECK (held);
  held_max = test_backend_max_write_bytes (r.d[0].tb, true);
  ok = ok && CHECK (held_max <= 1 * MiB);
  /* The read ends: once reads are quiet, writes go at max-merge again.
   * When that is is the engine's to say (elevator_reads.c): more writes
   * and FLUSHes until one goes out as one large write, within the
   * bounded wait.
   */
  test_backend_release (r.d[0].tb, TB_PREAD);
  ok = ok && CHECK (test_thread_wait (&rt)) && CHECK (rt.result == 0);
  test_backend_release (r.d[0].tb, TB_PWRITEV);
  ok = ok && CHECK (test_thread_wait (&ft)) && CHECK (ft.result == 0);
  ok = ok && CHECK (test_backend_holds (r.d[0].tb, 'w', 8 * MiB, 0));
  released = ok && TEST_WAIT_FOR (write_stream (r.d[0].q, 'x', 2 * MiB,
                                                8 * MiB)
                                  && queue_flush (r.d[0].q, NULL) == 0
                                  && test_backend_max_write_bytes (r.d[0].tb,
                                                                   false)
                                  > 1 * MiB);
  after_max = test_backend_max_write_bytes (r.d[0].tb, false);
  test_backend_release_all (r.d[0].tb);
  test_thread_join (&rt);
  test_thread_join (&ft);
  test_rig_stop (&r);
  tap_ok (ok && released, "while a read competes, writes at the backend stay"
          " within the allowance (%" PRIu64 " KiB at most), the rest held;"
          " after it, they go at max-merge (%" PRIu64 " KiB at once)%s",
          held_max / KiB, after_max / KiB, MODE);
}

static void
test_read_target_off (void)
{
  struct queue_config cfg = priority_config ();
  struct test_thread rt = TEST_THREAD_INIT, ft = TEST_THREAD_INIT;
  struct test_read_job rj;
  struct flush_job fj;
  struct test_rig r;
  bool ok;

  cfg.read_target_ns = 0;
  ok = rig (&r, &cfg) && writes_beside_held_read (&r, &rj, &rt, &fj, &ft);
  /* All 8 MiB at once: nothing held. */
  ok = ok && CHECK (test_backend_max_write_bytes (r.d[0].tb, false)
                    == 8 * MiB);
  ok = ok && CHECK (test_stats (r.d[0].q).writes_held == 0);
  test_backend_release_all (r.d[0].tb);
  ok = ok && CHECK (test_thread_wait (&rt)) && CHECK (test_thread_wait (&ft));
  test_thread_join (&rt);
  test_thread_join (&ft);
  test_rig_stop (&r);
  tap_ok (ok, "read-target=off: writes are not held for reads%s", MODE);
}

/* Held writes go once the oldest has waited past write-expire, though
 * the read still competes.
 */
static void
test_held_writes_expire (void)
{
  struct queue_config cfg = priority_config ();
  struct test_thread rt = TEST_THREAD_INIT, ft = TEST_THREAD_INIT;
  struct test_read_job rj;
  struct flush_job fj;
  struct test_rig r;
  bool ok;

  cfg.write_expire_ns = 100 * TEST_MS;
  ok = rig (&r, &cfg) && writes_beside_held_read (&r, &rj, &rt, &fj, &ft);
  if (ok && !async_mode)        /* one writer: let the first batch end */
    test_backend_step (r.d[0].tb, TB_PWRITEV, 1);
  ok = ok && CHECK (TEST_WAIT_FOR (test_backend_entered (r.d[0].tb,
                                                         TB_PWRITEV) > 1));
  ok = ok && CHECK (!test_thread_done (&rt));   /* the read still waits */
  test_backend_release_all (r.d[0].tb);
  ok = ok && CHECK (test_thread_wait (&rt)) && CHECK (test_thread_wait (&ft));
  ok = ok && CHECK (test_backend_holds (r.d[0].tb, 'w', 8 * MiB, 0));
  test_thread_join (&rt);
  test_thread_join (&ft);
  test_rig_stop (&r);
  tap_ok (ok, "writes held for a read go once past write-expire%s", MODE);
}

/* ------------------------------------------------------------ merging */

/* What earlier reads showed the queue: alone_ns for a read alone, and
 * at_depth_ns for enough reads at depth 16 to count.
 */
static void
learn_depth (struct queue *q, uint64_t alone_ns, uint64_t at_depth_ns)
{
  read_depth_note (&q->read_streams.depth, 1, alone_ns);
  for (int i = 0; i < READ_DEPTH_KNOWN; i++)
    read_depth_note (&q->read_streams.depth, 16, at_depth_ns);
}

#define STREAM_READS 12

/* Sequential 4 KiB reads from READ_AT, one thread each, started in order
 * while the backend holds reads, on a queue that has seen reads at depth
 * take 4 times as long as alone: the first ones go at once, those past
 * the busy mark wait behind them and go as one read.  A write queued
 * over one of them is laid over its part.  With room_for_reads, reads
 * at depth took 1.1 times as long as alone: none waits, each goes at
 * once.
 */
static void
stream_reads_at_depth (bool room_for_reads)
{
  struct queue_config cfg = test_config (TEST_HOUR, 100000);
  struct test_thread t[STREAM_READS];
  static struct test_read_job j[STREAM_READS];
  struct tb_call calls[MAX_CALLS];
  struct queue_stats st;
  struct test_rig r;
  uint64_t waited = 0;
  size_t n = 0;
  bool ok;

  for (unsigned i = 0; i < STREAM_READS; i++)
    t[i] = (struct test_thread) TEST_THREAD_INIT;
  cfg.bypass = false;
  cfg.read_ahead = 0;           /* the chains, not the windows */
  ok = rig (&r, &cfg);
  /* What earlier reads showed: 1 ms alone, and at depth 4 ms (the
   * backend queues reads) or 1.1 ms (it has room for them).
   */
  if (ok)
    learn_depth (r.d[0].q, 1000000, room_for_reads ? 1100000 : 4000000);
  ok = ok && write_stream (r.d[0].q, 'r', 64 * KiB, READ_AT);
  ok = ok && CHECK (queue_flush (r.d[0].q, NULL) == 0);
  /* Queued over the eleventh read's bytes. */
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'n', 4 * KiB,
                                     READ_AT + 10 * 4 * KiB, 0) == 0);
  if (ok)
    test_backend_block (r.d[0].tb, TB_PREAD);
  for (unsigned i = 0; ok && i < STREAM_READS; i++) {
    j[i] = (struct test_read_job) {
      .q = r.d[0].q, .offset = READ_AT + i * 4 * KiB, .count = 4 * KiB,
    };
    ok = CHECK (test_thread_start (&t[i], test_read_job_run, &j[i]) == 0);
    /* In order: each is either at the backend or waiting before the
     * next starts.
     */
    ok = ok && CHECK (TEST_WAIT_FOR (test_backend_entered (r.d[0].tb,
                                                           TB_PREAD)
                                     + test_stats (r.d[0].q).reads_waited
                                     == i + 1));
  }
  if (ok)
    waited = test_stats (r.d[0].q).reads_waited;
  test_backend_release (r.d[0].tb, TB_PREAD);
  for (unsigned i = 0; i < STREAM_READS; i++)
    ok = ok && CHECK (test_thread_wait (&t[i])) && CHECK (t[i].result == 0);
  for (unsigned i = 0; ok && i < STREAM_READS; i++)
    ok = CHECK (test_buffer_is (j[i].buf, i == 10 ? 'n' : 'r', 4 * KiB,
                                j[i].offset, "a read of the stream"));
  if (ok) {
    n = test_backend_calls (r.d[0].tb, TB_PREAD, calls, MAX_CALLS);
    st = test_stats (r.d[0].q);
    ok = CHECK (n == STREAM_READS - waited + (waited > 0))
      && CHECK (waited == 0 || calls[n - 1].count == waited * 4 * KiB)
      && CHECK (st.op[OP_READ].merges == (waited > 0 ? waited - 1 : 0))
      && CHECK (st.op[OP_READ].backend_ops == n)
      && CHECK (st.read_time.count == STREAM_READS);
  }
  test_backend_release_all (r.d[0].tb);
  for (unsigned i = 0; i < STREAM_READS; i++)
    test_thread_join (&t[i]);
  test_rig_stop (&r);
  if (room_for_reads)
    tap_ok (ok && waited == 0, "sequential reads at depth on a backend as"
            " fast at depth as alone: %" PRIu64 " waited, %zu backend reads"
            " for %d reads%s", waited, n, STREAM_READS, MODE);
  else
    tap_ok (ok && waited > 1, "sequential reads at depth: %" PRIu64 " waited"
            " and went as one backend read (%zu in all for %d reads), the"
            " queued write laid over its part%s", waited, n, STREAM_READS,
            MODE);
}

static void
test_stream_reads_merge (void)
{
  stream_reads_at_depth (false);
}

static void
test_stream_reads_room (void)
{
  stream_reads_at_depth (true);
}

/* queue_read_depth.c's rule on chosen latencies (ns). */
static void
test_read_depth_rule (void)
{
  struct read_depth d = { 0 };
  bool ok = CHECK (!read_depth_queues (&d));  /* nothing known */

  read_depth_note (&d, 1, 1000000);
  ok = ok && CHECK (!read_depth_queues (&d)); /* nothing at depth yet */
  /* One read held up at depth (the scheduler, a sanitizer) says nothing;
   * the first few do not either.
   */
  read_depth_note (&d, 16, 9000000);
  ok = ok && CHECK (!read_depth_queues (&d));
  for (int i = 0; i < READ_DEPTH_KNOWN - 2; i++)
    read_depth_note (&d, 16, 1100000);
  ok = ok && CHECK (!read_depth_queues (&d));
  for (int i = 0; i < 32; i++)
    read_depth_note (&d, 16, 1100000);
  ok = ok && CHECK (!read_depth_queues (&d));
  /* Reads with few active say nothing about depth. */
  for (int i = 0; i < 32; i++)
    read_depth_note (&d, 2, 9000000);
  ok = ok && CHECK (!read_depth_queues (&d));
  for (int i = 0; i < 32; i++)
    read_depth_note (&d, 8, 4000000);
  ok = ok && CHECK (read_depth_queues (&d));
  /* Back to the fastest's pace: room again. */
  for (int i = 0; i < 64; i++)
    read_depth_note (&d, 8, 1000000);
  ok = ok && CHECK (!read_depth_queues (&d));
  tap_ok (ok, "a backend queues reads when those at depth take over 1.5x"
          " the fastest: unknown no, one slow read no, 1.1x no, 4x yes,"
          " 1x no%s", MODE);
}

/* read-target=auto on chosen latencies: twice the fastest read of the
 * last second, not below 300 us nor the backend's floor.  The second's
 * reads are answered, then the allowance is asked for a second later.
 */
static uint64_t
auto_target (uint64_t floor_ns, uint64_t fastest_ns)
{
  struct read_feedback f = { 0 };

  read_feedback_init (&f, READ_TARGET_AUTO, floor_ns);
  read_feedback_arrive (&f, 1);
  read_feedback_done (&f, fastest_ns);
  read_feedback_arrive (&f, 2);
  read_feedback_done (&f, 3 * fastest_ns);
  read_feedback_allowance (&f, 2 * 1000 * TEST_MS);
  return atomic_load (&f.effective_ns);
}

static void
test_auto_target_rule (void)
{
  uint64_t disk = auto_target (0, 60000);           /* 60 us: the floor */
  uint64_t remote = auto_target (0, 1200000);       /* 1.2 ms: twice it */
  uint64_t rbd = auto_target (1250000, 250000);     /* the rbd floor */
  uint64_t slow_rbd = auto_target (1250000, 5000000);

  tap_ok (disk == 300000 && remote == 2400000 && rbd == 1250000
          && slow_rbd == 10000000, "read-target=auto: %" PRIu64 " us on a"
          " disk (300 us floor), %" PRIu64 " us on a 1.2 ms remote, %"
          PRIu64 " us on a backend with a 1.25 ms floor, %" PRIu64 " us"
          " capped%s", disk / 1000, remote / 1000, rbd / 1000,
          slow_rbd / 1000, MODE);
}

/* One at a time, a stream never waits, even on a backend that queues
 * reads: nothing is added at depth 1.
 */
static void
test_stream_reads_depth_one (void)
{
  struct queue_config cfg = test_config (TEST_HOUR, 100000);
  struct test_read_job j;
  struct queue_stats st;
  struct test_rig r;
  bool ok;

  cfg.read_ahead = 0;           /* the chains, not the windows */
  ok = rig (&r, &cfg);
  if (ok)
    learn_depth (r.d[0].q, 1000000, 4000000);
  for (unsigned i = 0; ok && i < 32; i++) {
    j = (struct test_read_job) {
      .q = r.d[0].q, .offset = READ_AT + i * 4 * KiB, .count = 4 * KiB,
    };
    ok = CHECK (test_read_job_run (&j) == 0);
  }
  st = test_stats (r.d[0].q);
  ok = ok && CHECK (st.reads_waited == 0)
    && CHECK (st.op[OP_READ].backend_ops == 32)
    && CHECK (st.op[OP_READ].merges == 0);
  test_rig_stop (&r);
  tap_ok (ok, "sequential reads one at a time never wait%s", MODE);
}

int
main (void)
{
  static void (*const cases[]) (void) = {
    test_writes_held_for_reads,
    test_read_target_off,
    test_held_writes_expire,
    test_stream_reads_merge,
    test_stream_reads_room,
    test_stream_reads_depth_one,
    test_read_depth_rule,
    test_auto_target_rule,
  };

  test_sync_then_async (cases, sizeof cases / sizeof cases[0], &async_mode,
                        4);
  tap_ok (atomic_load (&breaches) == 0, "the backend contract held in every"
          " case: %u breaches", atomic_load (&breaches));
  tap_plan (tap_count);
  return tap_done ();
}
