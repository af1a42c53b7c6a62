/* plugq: unit tests for writes that go around the queue
 * (queue_bypass.c) on a backend that writes to memory.
 *
 *  - A write nothing can merge with goes to the backend at once, from
 *    the request's own thread, even behind an hour's unplug delay, and
 *    is counted as bypassed.
 *  - FUA writes go around too, and are answered after a backend flush
 *    begun once they were written; those written while a flush runs
 *    share the next one.  A FLUSH waits to start for FUA writes being
 *    written around the queue (it carries them), not for plain ones.
 *  - What the queue is for still takes it: the second write of a
 *    sequential stream (and everything behind it), a write over bytes
 *    a queued piece holds, every write with bypass=never or on a
 *    backend that does not write to memory.  A random write goes around
 *    a queue holding pieces elsewhere.  A write of max-merge
 *    bytes or more goes around even when it continues a stream.
 *  - Ordering: a write over bytes another write is taking around the
 *    queue waits for it (it is queued, and its batch is not taken until
 *    the first is written), so the newer data wins.
 *  - Tokens: no more writers than max_writers; one that finds none free
 *    is queued instead of waiting.
 *  - Errors: a failed write around the queue is its own answer and is
 *    not latched for the next FLUSH.
 *  - On an asynchronous backend with ack=queued, a write of max-merge
 *    bytes goes around from its caller's buffer and is answered once
 *    written; a smaller one is still copied and answered at once.
 *
 * A held backend gate keeps a write in the backend as long as a case
 * needs; every wait is bounded (fixtures.h).
 */

#include <config.h>

#include <errno.h>
#include <pthread.h>
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
#define DISK_SIZE (1024 * KiB)
#define BLOCK (4 * KiB)
#define MAX_CALLS 64

/* An hour's plug and a threshold no case reaches: whatever reaches the
 * backend before a FLUSH went around the queue.
 */
static struct queue_config
bypass_config (bool bypass)
{
  struct queue_config cfg = test_config (TEST_HOUR, 1000);

  cfg.bypass = bypass;
  return cfg;
}

/* One disk on a backend that writes to memory (unless not_memory), with
 * max_writers writers.
 */
static bool
rig_start (struct test_rig *r, const struct queue_config *cfg,
           unsigned writers, bool to_memory)
{
  const struct test_shape shape = {
    .writers = writers, .writes_to_memory = to_memory,
  };

  return test_rig_shaped (r, cfg, DISK_SIZE, &shape);
}

static size_t
backend_writes (struct test_disk *d, struct tb_call *calls)
{
  return test_backend_calls (d->tb, TB_PWRITEV, calls, MAX_CALLS);
}

/* Jobs writing 'a' + i at block 4 i, far enough apart that none
 * continues another.
 */
static void
spread_jobs (struct test_write_job *j, int n, struct queue *q, unsigned flags)
{
  for (int i = 0; i < n; i++)
    j[i] = (struct test_write_job) { q, 'a' + i, BLOCK,
                                     (uint64_t) i * 4 * BLOCK, flags };
}

/* Whether the backend holds what spread_jobs' n jobs wrote. */
static bool
holds_spread (struct test_disk *d, int n)
{
  for (int i = 0; i < n; i++)
    if (!CHECK (test_backend_holds (d->tb, 'a' + i, BLOCK,
                                    (uint64_t) i * 4 * BLOCK)))
      return false;
  return true;
}

/* One block of c at block number i, from this thread. */
static bool
write_block (struct queue *q, int c, uint64_t i, unsigned flags)
{
  return test_write_fill (q, NULL, c, BLOCK, i * BLOCK, flags) == 0;
}

static int flush_job (void *q);

/* ------------------------------------------------------------ around */

static void
test_random_writes_go_around (void)
{
  struct queue_config cfg = bypass_config (true);
  struct tb_call calls[MAX_CALLS];
  struct test_rig r;
  struct queue_stats st;
  bool ok = CHECK (rig_start (&r, &cfg, 1, true));
  size_t n = 0;

  /* Every other block: none starts where another ended. */
  for (int i = 0; ok && i < 8; i++)
    ok = CHECK (write_block (r.d[0].q, 'a' + i, 2 * i, 0));
  if (ok) {
    n = backend_writes (&r.d[0], calls);
    st = test_stats (r.d[0].q);
    ok = CHECK (n == 8) && CHECK (st.bypassed_writes == 8)
      && CHECK (st.op[OP_WRITE].requests == 8)
      && CHECK (st.op[OP_WRITE].backend_ops == 8)
      && CHECK (st.op[OP_WRITE].merges == 0) && CHECK (st.plugs == 0);
  }
  for (size_t i = 0; ok && i < n; i++)
    ok = CHECK (pthread_equal (calls[i].thread, pthread_self ()))
      && CHECK (calls[i].offset == 2 * i * BLOCK);
  for (int i = 0; ok && i < 8; i++)
    ok = CHECK (test_backend_holds (r.d[0].tb, 'a' + i, BLOCK,
                                    2 * i * BLOCK));
  test_rig_stop (&r);
  tap_ok (ok, "random writes behind an hour's plug go to the backend at"
          " once from the request thread, unqueued (%zu backend writes)", n);
}

/* The first write of a stream goes around; from the second on, the
 * stream is queued and merges as before.
 */
static void
test_stream_is_queued (void)
{
  struct queue_config cfg = bypass_config (true);
  struct tb_call calls[MAX_CALLS];
  struct test_rig r;
  struct queue_stats st;
  bool ok = CHECK (rig_start (&r, &cfg, 1, true));
  size_t n = 0;

  for (int i = 0; ok && i < 4; i++)
    ok = CHECK (write_block (r.d[0].q, 'a' + i, i, 0));
  ok = ok && CHECK (backend_writes (&r.d[0], calls) == 1)
    && CHECK (queue_flush (r.d[0].q, NULL) == 0);
  if (ok) {
    n = backend_writes (&r.d[0], calls);
    st = test_stats (r.d[0].q);
    ok = CHECK (n == 2) && CHECK (calls[1].offset == BLOCK)
      && CHECK (calls[1].count == 3 * BLOCK)
      /* The third and fourth were appended to the second's piece. */
      && CHECK (calls[1].iovcnt == 1)
      && CHECK (st.bypassed_writes == 1)
      && CHECK (st.op[OP_WRITE].merges == 2);
  }
  test_rig_stop (&r);
  tap_ok (ok, "a sequential stream: its first write goes around, the"
          " next three are queued and go out as one (%zu writes)", n);
}

/* A write as large as max-merge merges with nothing, stream or not. */
static void
test_full_size_writes_go_around (void)
{
  struct queue_config cfg = bypass_config (true);
  struct test_rig r;
  uint64_t size = 16 * KiB;
  bool ok;

  cfg.max_merge = size;
  ok = CHECK (rig_start (&r, &cfg, 1, true));
  for (int i = 0; ok && i < 4; i++)
    ok = CHECK (test_write_fill (r.d[0].q, NULL, 'a' + i, size, i * size,
                                 0) == 0);
  ok = ok && CHECK (test_backend_count (r.d[0].tb, TB_PWRITEV) == 4)
    && CHECK (test_stats (r.d[0].q).bypassed_writes == 4);
  test_rig_stop (&r);
  tap_ok (ok, "writes of max-merge bytes go around even when they"
          " continue each other");
}

/* ------------------------------------------------------------ FUA */

/* FUA writes go around too, and are answered only after a backend
 * flush that began once they were written; those arriving while a flush
 * runs share the next one (group commit).
 */
static void
test_fua_goes_around_then_flushes (void)
{
  struct queue_config cfg = bypass_config (true);
  struct test_write_job j[3];
  struct test_thread t[3] = { TEST_THREAD_INIT, TEST_THREAD_INIT,
                              TEST_THREAD_INIT };
  struct test_rig r;
  struct queue_stats st;
  bool ok = CHECK (rig_start (&r, &cfg, 4, true));

  spread_jobs (j, 3, r.d[0].q, REQ_FUA);
  if (ok) {
    test_backend_block (r.d[0].tb, TB_FLUSH);
    ok = CHECK (test_thread_start (&t[0], test_write_job_run, &j[0]) == 0)
      && CHECK (test_backend_wait_entered (r.d[0].tb, TB_FLUSH, 1))
      && CHECK (test_backend_count (r.d[0].tb, TB_PWRITEV) == 1)
      && CHECK (!test_thread_done (&t[0]));
  }
  /* Two more while the first flush is held: written around it, then
   * both wait for the next one.
   */
  for (int i = 1; ok && i < 3; i++)
    ok = CHECK (test_thread_start (&t[i], test_write_job_run, &j[i]) == 0)
      && CHECK (test_backend_wait_count (r.d[0].tb, TB_PWRITEV, i + 1));
  if (ok) {
    test_backend_step (r.d[0].tb, TB_FLUSH, 1);
    ok = CHECK (test_thread_wait (&t[0])) && CHECK (t[0].result == 0)
      && CHECK (test_backend_wait_entered (r.d[0].tb, TB_FLUSH, 2))
      && CHECK (!test_thread_done (&t[1])) && CHECK (!test_thread_done (&t[2]));
  }
  test_backend_release (r.d[0].tb, TB_FLUSH);
  for (int i = 0; i < 3; i++) {
    ok = ok && CHECK (test_thread_wait (&t[i])) && CHECK (t[i].result == 0);
    test_thread_join (&t[i]);
  }
  if (ok) {
    st = test_stats (r.d[0].q);
    ok = CHECK (st.bypassed_writes == 3) && CHECK (st.fua_requests == 3)
      && CHECK (st.backend_flushes == 2)
      && CHECK (test_backend_count (r.d[0].tb, TB_FLUSH) == 2)
      && holds_spread (&r.d[0], 3);
  }
  test_rig_stop (&r);
  tap_ok (ok, "FUA writes go around the queue, are answered after a flush"
          " begun once they were written, and share it");
}

/* While a FLUSH waits to start (a FUA write around the queue holds the
 * token it needs: the flush waits to carry it), another FUA write still
 * goes around: it waits for that flush anyway.  A plain write is queued
 * instead, so writes that keep arriving cannot keep the flush waiting.
 */
static void
test_fua_around_waiting_flush (void)
{
  struct queue_config cfg = bypass_config (true);
  struct test_write_job ja = { .c = 'a', .count = BLOCK, .offset = 0,
                               .flags = REQ_FUA };
  struct test_write_job jb = { .c = 'b', .count = BLOCK,
                               .offset = 4 * BLOCK, .flags = REQ_FUA };
  struct test_thread ta = TEST_THREAD_INIT, tb = TEST_THREAD_INIT;
  struct test_thread tf = TEST_THREAD_INIT;
  struct test_rig r;
  struct queue_stats st;
  bool ok = CHECK (rig_start (&r, &cfg, 2, true));

  ja.q = jb.q = r.d[0].q;
  if (ok) {
    test_backend_block (r.d[0].tb, TB_PWRITEV);
    test_backend_block (r.d[0].tb, TB_FLUSH);
    ok = CHECK (test_thread_start (&ta, test_write_job_run, &ja) == 0)
      && CHECK (test_backend_wait_entered (r.d[0].tb, TB_PWRITEV, 1))
      && CHECK (test_thread_start (&tf, flush_job, r.d[0].q) == 0)
      && CHECK (TEST_WAIT_FOR (test_stats (r.d[0].q).flushes == 1))
      && CHECK (test_thread_start (&tb, test_write_job_run, &jb) == 0)
      && CHECK (test_backend_wait_entered (r.d[0].tb, TB_PWRITEV, 2))
      && CHECK (write_block (r.d[0].q, 'c', 8, 0))
      && CHECK (test_backend_entered (r.d[0].tb, TB_PWRITEV) == 2)
      && CHECK (test_stats (r.d[0].q).queued_requests == 1);
  }
  test_backend_release (r.d[0].tb, TB_PWRITEV);
  /* The flush starts once both are written, and answers the FUA write. */
  ok = ok && CHECK (test_backend_wait_entered (r.d[0].tb, TB_FLUSH, 1))
    && CHECK (test_backend_count (r.d[0].tb, TB_PWRITEV) >= 2)
    && CHECK (!test_thread_done (&tb));
  test_backend_release (r.d[0].tb, TB_FLUSH);
  ok = ok && CHECK (test_thread_wait (&ta)) && CHECK (ta.result == 0)
    && CHECK (test_thread_wait (&tb)) && CHECK (tb.result == 0)
    && CHECK (test_thread_wait (&tf)) && CHECK (tf.result == 0);
  test_thread_join (&ta);
  test_thread_join (&tb);
  test_thread_join (&tf);
  ok = ok && CHECK (queue_flush (r.d[0].q, NULL) == 0);
  if (ok) {
    st = test_stats (r.d[0].q);
    ok = CHECK (st.bypassed_writes == 2)
      && CHECK (test_backend_holds (r.d[0].tb, 'a', BLOCK, 0))
      && CHECK (test_backend_holds (r.d[0].tb, 'b', BLOCK, 4 * BLOCK))
      && CHECK (test_backend_holds (r.d[0].tb, 'c', BLOCK, 8 * BLOCK));
  }
  test_rig_stop (&r);
  tap_ok (ok, "while a FLUSH waits to start, a FUA write goes around the"
          " queue and a plain one is queued");
}

/* A FLUSH need not cover a plain write still being written around the
 * queue (nobody was answered for it): it starts and ends beside it,
 * from its own thread, instead of waiting for that write's token.
 */
static void
test_flush_beside_plain_write (void)
{
  struct queue_config cfg = bypass_config (true);
  struct test_write_job ja = { .c = 'a', .count = BLOCK, .offset = 0 };
  struct test_thread ta = TEST_THREAD_INIT, tf = TEST_THREAD_INIT;
  struct test_rig r;
  bool ok = CHECK (rig_start (&r, &cfg, 2, true));

  ja.q = r.d[0].q;
  if (ok) {
    test_backend_block (r.d[0].tb, TB_PWRITEV);
    ok = CHECK (test_thread_start (&ta, test_write_job_run, &ja) == 0)
      && CHECK (test_backend_wait_entered (r.d[0].tb, TB_PWRITEV, 1))
      && CHECK (test_thread_start (&tf, flush_job, r.d[0].q) == 0)
      && CHECK (test_thread_wait (&tf)) && CHECK (tf.result == 0)
      && CHECK (test_backend_count (r.d[0].tb, TB_FLUSH) == 1)
      && CHECK (test_backend_count (r.d[0].tb, TB_PWRITEV) == 0)
      && CHECK (!test_thread_done (&ta));
  }
  test_backend_release (r.d[0].tb, TB_PWRITEV);
  ok = ok && CHECK (test_thread_wait (&ta)) && CHECK (ta.result == 0)
    && CHECK (test_stats (r.d[0].q).bypassed_writes == 1)
    && CHECK (test_backend_holds (r.d[0].tb, 'a', BLOCK, 0));
  test_thread_join (&ta);
  test_thread_join (&tf);
  test_rig_stop (&r);
  tap_ok (ok, "a FLUSH runs beside a plain write still going around the"
          " queue");
}

/* ------------------------------------------------------------ queued */

/* With the stream's second write queued, a random write elsewhere goes
 * around the queue; one over the queued piece's bytes is queued, and
 * the newer data wins.
 */
static void
test_around_a_queue (void)
{
  struct queue_config cfg = bypass_config (true);
  struct test_rig r;
  bool ok = CHECK (rig_start (&r, &cfg, 1, true))
    && CHECK (write_block (r.d[0].q, 'a', 0, 0))
    && CHECK (write_block (r.d[0].q, 'b', 1, 0))
    && CHECK (write_block (r.d[0].q, 'c', 100, 0))
    && CHECK (write_block (r.d[0].q, 'd', 1, 0));

  ok = ok && CHECK (test_backend_count (r.d[0].tb, TB_PWRITEV) == 2)
    && CHECK (test_backend_holds (r.d[0].tb, 'c', BLOCK, 100 * BLOCK))
    && CHECK (test_stats (r.d[0].q).bypassed_writes == 2)
    && CHECK (test_stats (r.d[0].q).queued_requests == 1)
    && CHECK (test_queue_reads_as (r.d[0].q, 'd', BLOCK, BLOCK))
    && CHECK (queue_flush (r.d[0].q, NULL) == 0)
    && CHECK (test_backend_holds (r.d[0].tb, 'd', BLOCK, BLOCK));
  test_rig_stop (&r);
  tap_ok (ok, "a random write goes around a queue holding a piece"
          " elsewhere; one over the piece's bytes is queued and wins");
}

/* bypass=never, and a backend that does not write to memory. */
static void
test_bypass_off (bool bypass, bool to_memory, const char *what)
{
  struct queue_config cfg = bypass_config (bypass);
  struct test_rig r;
  bool ok = CHECK (rig_start (&r, &cfg, 1, to_memory))
    && CHECK (write_block (r.d[0].q, 'a', 10, 0));

  ok = ok && CHECK (test_backend_count (r.d[0].tb, TB_PWRITEV) == 0)
    && CHECK (test_stats (r.d[0].q).bypassed_writes == 0)
    && CHECK (queue_flush (r.d[0].q, NULL) == 0)
    && CHECK (test_backend_holds (r.d[0].tb, 'a', BLOCK, 10 * BLOCK));
  test_rig_stop (&r);
  tap_ok (ok, "%s: a random write is queued", what);
}

/* ------------------------------------------------------------ ordering */

/* Write a goes around and is held in the backend; write b over the same
 * bytes cannot go around it, is queued and unplugs at once
 * (unplug-thresh=1), and a second token is free to send it: it must
 * still wait until a is written, so b lands second and wins.
 */
static void
test_overlapping_write_waits (void)
{
  struct queue_config cfg = bypass_config (true);
  struct test_write_job ja = { NULL, 'a', BLOCK, 5 * BLOCK, 0 };
  struct test_write_job jb = { NULL, 'b', BLOCK, 5 * BLOCK, 0 };
  struct test_thread ta = TEST_THREAD_INIT, tb = TEST_THREAD_INIT;
  struct test_rig r;
  bool ok;

  cfg.unplug_thresh = 1;
  ok = CHECK (rig_start (&r, &cfg, 2, true));
  ja.q = jb.q = r.d[0].q;
  if (ok) {
    test_backend_block (r.d[0].tb, TB_PWRITEV);
    ok = CHECK (test_thread_start (&ta, test_write_job_run, &ja) == 0)
      && CHECK (test_backend_wait_entered (r.d[0].tb, TB_PWRITEV, 1))
      && CHECK (test_thread_start (&tb, test_write_job_run, &jb) == 0)
      /* b is answered once queued, unless it was sent at once. */
      && CHECK (TEST_WAIT_FOR (test_thread_done (&tb)
                               || test_backend_entered (r.d[0].tb,
                                                        TB_PWRITEV) > 1))
      && CHECK (test_backend_entered (r.d[0].tb, TB_PWRITEV) == 1)
      && CHECK (test_stats (r.d[0].q).queued_requests == 1);
  }
  test_backend_release (r.d[0].tb, TB_PWRITEV);
  ok = ok && CHECK (test_thread_wait (&ta)) && CHECK (ta.result == 0)
    && CHECK (test_thread_wait (&tb)) && CHECK (tb.result == 0)
    && CHECK (queue_flush (r.d[0].q, NULL) == 0)
    && CHECK (test_backend_count (r.d[0].tb, TB_PWRITEV) == 2)
    && CHECK (test_backend_holds (r.d[0].tb, 'b', BLOCK, 5 * BLOCK))
    && CHECK (test_stats (r.d[0].q).bypassed_writes == 1);
  test_thread_join (&ta);
  test_thread_join (&tb);
  test_rig_stop (&r);
  tap_ok (ok, "a write over bytes going around the queue is queued and"
          " goes out only after them: the newer data wins");
}

/* ------------------------------------------------------------ tokens */

/* Two writers held in the backend take both tokens; a third write finds
 * none, is queued and answered without waiting for them.
 */
static void
test_no_token_means_queued (void)
{
  struct queue_config cfg = bypass_config (true);
  struct test_write_job j[3];
  struct test_thread t[3] = { TEST_THREAD_INIT, TEST_THREAD_INIT,
                              TEST_THREAD_INIT };
  struct test_rig r;
  struct queue_stats st;
  bool ok = CHECK (rig_start (&r, &cfg, 2, true));

  spread_jobs (j, 3, r.d[0].q, 0);
  if (ok)
    test_backend_block (r.d[0].tb, TB_PWRITEV);
  for (int i = 0; ok && i < 2; i++)
    ok = CHECK (test_thread_start (&t[i], test_write_job_run, &j[i]) == 0)
      && CHECK (test_backend_wait_entered (r.d[0].tb, TB_PWRITEV, i + 1));
  ok = ok && CHECK (test_thread_start (&t[2], test_write_job_run, &j[2]) == 0)
    && CHECK (test_thread_wait (&t[2])) && CHECK (t[2].result == 0);
  if (ok) {
    st = test_stats (r.d[0].q);
    ok = CHECK (st.queued_requests == 1)
      && CHECK (test_backend_entered (r.d[0].tb, TB_PWRITEV) == 2);
  }
  test_backend_release (r.d[0].tb, TB_PWRITEV);
  for (int i = 0; i < 2; i++) {
    ok = ok && CHECK (test_thread_wait (&t[i])) && CHECK (t[i].result == 0);
    test_thread_join (&t[i]);
  }
  test_thread_join (&t[2]);
  ok = ok && CHECK (queue_flush (r.d[0].q, NULL) == 0)
    && CHECK (test_stats (r.d[0].q).bypassed_writes == 2)
    && holds_spread (&r.d[0], 3);
  test_rig_stop (&r);
  tap_ok (ok, "max_writers writes around the queue at most; the next is"
          " queued and answered at once");
}

static int
flush_job (void *q)
{
  return queue_flush (q, NULL);
}

/* A backend flush held in the backend: a write arriving meanwhile need
 * not be covered by it, and goes around the queue beside it.
 */
static void
test_write_beside_running_flush (void)
{
  struct queue_config cfg = bypass_config (true);
  struct test_thread tf = TEST_THREAD_INIT;
  struct test_rig r;
  bool ok = CHECK (rig_start (&r, &cfg, 2, true));

  if (ok) {
    test_backend_block (r.d[0].tb, TB_FLUSH);
    ok = CHECK (test_thread_start (&tf, flush_job, r.d[0].q) == 0)
      && CHECK (test_backend_wait_entered (r.d[0].tb, TB_FLUSH, 1))
      && CHECK (write_block (r.d[0].q, 'w', 9, 0))
      && CHECK (test_backend_count (r.d[0].tb, TB_PWRITEV) == 1)
      && CHECK (test_stats (r.d[0].q).bypassed_writes == 1)
      && CHECK (!test_thread_done (&tf));
  }
  test_backend_release (r.d[0].tb, TB_FLUSH);
  ok = ok && CHECK (test_thread_wait (&tf)) && CHECK (tf.result == 0);
  test_thread_join (&tf);
  test_rig_stop (&r);
  tap_ok (ok, "while a backend flush runs, a write goes around the queue"
          " beside it");
}

/* With bypass=never, on a backend that writes to memory: a write queued
 * while a backend flush runs is written beside it, by the thread that
 * queued it, so the queue does not fill up behind the flush.  (Every
 * write unplugs: nothing waits for the plug.)
 */
static void
test_queued_write_beside_running_flush (void)
{
  struct queue_config cfg = bypass_config (false);
  struct test_thread tf = TEST_THREAD_INIT;
  struct test_rig r;
  bool ok;

  cfg.unplug_thresh = 1;
  ok = CHECK (rig_start (&r, &cfg, 2, true));

  ok = ok && CHECK (write_block (r.d[0].q, 'a', 0, 0));
  if (ok) {
    test_backend_block (r.d[0].tb, TB_FLUSH);
    ok = CHECK (test_thread_start (&tf, flush_job, r.d[0].q) == 0)
      && CHECK (test_backend_wait_entered (r.d[0].tb, TB_FLUSH, 1))
      && CHECK (test_backend_count (r.d[0].tb, TB_PWRITEV) == 1)
      && CHECK (write_block (r.d[0].q, 'b', 9, 0))
      && CHECK (test_backend_count (r.d[0].tb, TB_PWRITEV) == 2)
      && CHECK (test_stats (r.d[0].q).queued_requests == 0)
      && CHECK (!test_thread_done (&tf));
  }
  test_backend_release (r.d[0].tb, TB_FLUSH);
  ok = ok && CHECK (test_thread_wait (&tf)) && CHECK (tf.result == 0)
    && CHECK (test_stats (r.d[0].q).bypassed_writes == 0)
    && CHECK (test_backend_holds (r.d[0].tb, 'b', BLOCK, 9 * BLOCK));
  test_thread_join (&tf);
  test_rig_stop (&r);
  tap_ok (ok, "while a backend flush runs, a queued write is written beside"
          " it");
}

/* ------------------------------------------------------------ errors */

static void
test_error_is_the_answer (void)
{
  struct queue_config cfg = bypass_config (true);
  struct test_rig r;
  struct queue_stats st;
  bool ok = CHECK (rig_start (&r, &cfg, 1, true));
  int err = 0;

  if (ok) {
    test_backend_fail (r.d[0].tb, TB_PWRITEV, 1, EIO);
    ok = CHECK (!write_block (r.d[0].q, 'a', 7, 0));
    err = errno;
  }
  ok = ok && CHECK (err == EIO) && CHECK (queue_flush (r.d[0].q, NULL) == 0);
  if (ok) {
    st = test_stats (r.d[0].q);
    ok = CHECK (st.latched_errors == 0)
      && CHECK (st.op[OP_WRITE].errors == 1)
      && CHECK (st.bypassed_writes == 1);
  }
  test_rig_stop (&r);
  tap_ok (ok, "a failed write around the queue fails its own request,"
          " and the next FLUSH does not report it again");
}

/* ------------------------------------------------------------ asynchronous */

struct buffer_job {
  struct queue *q;
  const unsigned char *buf;
  uint64_t count, offset;
};

static int
write_buffer (void *arg)
{
  struct buffer_job *j = arg;

  return queue_pwrite (j->q, NULL, j->buf, j->count, j->offset, 0);
}

/* ack=queued on an asynchronous backend: queuing a write of max-merge
 * bytes would only copy it, so it goes to the backend from the
 * caller's buffer and its request waits for it; a 4 KiB write beside
 * it is queued and answered at once.
 */
static void
test_large_write_around_async (void)
{
  struct queue_config cfg = bypass_config (true);
  const struct test_shape shape = { .async = 4 };
  uint64_t size = 16 * KiB;
  unsigned char *buf = malloc (size);
  struct buffer_job j = { .buf = buf, .count = size, .offset = 0 };
  struct test_thread t = TEST_THREAD_INIT;
  struct tb_call calls[MAX_CALLS];
  struct test_rig r;
  bool ok;

  cfg.max_merge = size;
  ok = CHECK (buf != NULL)
    && CHECK (test_rig_shaped (&r, &cfg, DISK_SIZE, &shape));
  if (!ok) {
    free (buf);
    tap_ok (false, "large write around an asynchronous backend: no rig");
    return;
  }
  memset (buf, 'L', size);
  j.q = r.d[0].q;
  test_backend_block (r.d[0].tb, TB_PWRITEV);
  ok = CHECK (test_thread_start (&t, write_buffer, &j) == 0)
    && CHECK (test_backend_wait_entered (r.d[0].tb, TB_PWRITEV, 1))
    && CHECK (!TEST_SOON (test_thread_done (&t)))
    && CHECK (write_block (r.d[0].q, 'b', 100, 0))
    && CHECK (test_stats (r.d[0].q).queued_requests == 1)
    && CHECK (test_backend_entered (r.d[0].tb, TB_PWRITEV) == 1);
  test_backend_release (r.d[0].tb, TB_PWRITEV);
  ok = ok && CHECK (test_thread_wait (&t)) && CHECK (t.result == 0)
    && CHECK (backend_writes (&r.d[0], calls) == 1)
    && CHECK (calls[0].first_base == buf) && CHECK (calls[0].count == size)
    && CHECK (test_stats (r.d[0].q).bypassed_writes == 1)
    && CHECK (queue_flush (r.d[0].q, NULL) == 0)
    && CHECK (test_backend_holds (r.d[0].tb, 'L', size, 0))
    && CHECK (test_backend_holds (r.d[0].tb, 'b', BLOCK, 100 * BLOCK));
  test_thread_join (&t);
  test_rig_stop (&r);
  free (buf);
  tap_ok (ok, "ack=queued, asynchronous backend: a write of max-merge bytes"
          " goes around from its caller's buffer and is answered once"
          " written; a 4 KiB one is queued [async]");
}

/* Two 64 KiB writes of a stream, from buf, at offset; true when both
 * were answered.
 */
static bool
write_stream_pair (struct queue *q, const unsigned char *buf,
                   uint64_t offset)
{
  return CHECK (queue_pwrite (q, NULL, buf, 64 * KiB, offset, 0) == 0)
    && CHECK (queue_pwrite (q, NULL, buf + 64 * KiB, 64 * KiB,
                            offset + 64 * KiB, 0) == 0);
}

/* The backend of a test_forward_while_reading case. */
enum forward_backend {
  FORWARD_REMOTE,               /* async, reads wait behind writes */
  FORWARD_ASYNC,                /* async, reads do not */
  FORWARD_MEMORY,               /* sync, writes to memory */
};

/* ack=queued, max-merge 1 MiB: a stream of 64 KiB writes is queued and
 * merged while no read competes (on memory its first write goes around,
 * as any write that continues nothing).  While a read competes (held at
 * the backend), on a remote or memory and with a read target, each goes
 * to the backend as it came, from its caller's buffer, answered once
 * written; on another asynchronous backend, or with read-target=off, it
 * is queued as before.
 */
static void
test_forward_while_reading (enum forward_backend kind, bool target,
                            const char *what)
{
  struct queue_config cfg = bypass_config (true);
  const struct test_shape shape = {
    .async = kind == FORWARD_MEMORY ? 0 : 4,
    .reads_behind_writes = kind == FORWARD_REMOTE,
    .writers = kind == FORWARD_MEMORY ? 2 : 0,
    .writes_to_memory = kind == FORWARD_MEMORY,
  };
  bool forwarded = kind != FORWARD_ASYNC && target;
  /* Writes around the queue before the read: memory's first one. */
  unsigned before = kind == FORWARD_MEMORY ? 1 : 0;
  unsigned char *buf = malloc (256 * KiB);
  struct test_read_job rj;
  struct test_thread t = TEST_THREAD_INIT;
  struct tb_call calls[MAX_CALLS];
  struct test_rig r;
  size_t n = 0;
  bool ok;

  cfg.max_merge = 1024 * KiB;
  if (!target)
    cfg.read_target_ns = 0;
  ok = CHECK (buf != NULL)
    && CHECK (test_rig_shaped (&r, &cfg, DISK_SIZE, &shape));
  if (!ok) {
    free (buf);
    tap_ok (false, "writes forwarded while reads compete (%s): no rig", what);
    return;
  }
  memset (buf, 'q', 128 * KiB);
  memset (buf + 128 * KiB, 'f', 128 * KiB);
  ok = write_stream_pair (r.d[0].q, buf, 0)
    && CHECK (test_stats (r.d[0].q).bypassed_writes == before)
    && CHECK (queue_flush (r.d[0].q, NULL) == 0);
  rj = (struct test_read_job) { .q = r.d[0].q, .offset = 768 * KiB,
                                .count = 4 * KiB };
  test_backend_block (r.d[0].tb, TB_PREAD);
  ok = ok && CHECK (test_thread_start (&t, test_read_job_run, &rj) == 0)
    && CHECK (test_backend_wait_entered (r.d[0].tb, TB_PREAD, 1))
    && write_stream_pair (r.d[0].q, buf + 128 * KiB, 128 * KiB);
  if (ok) {
    struct queue_stats st = test_stats (r.d[0].q);

    n = backend_writes (&r.d[0], calls);
    ok = forwarded
      ? CHECK (st.bypassed_writes == before + 2)
        && CHECK (st.queued_requests == 0) && CHECK (n == before + 3)
        && CHECK (calls[before + 1].first_base == buf + 128 * KiB)
        && CHECK (calls[before + 2].first_base == buf + 192 * KiB)
      : CHECK (st.bypassed_writes == before)
        && CHECK (st.queued_requests > 0) && CHECK (n == before + 1);
  }
  test_backend_release (r.d[0].tb, TB_PREAD);
  ok = ok && CHECK (test_thread_wait (&t)) && CHECK (t.result == 0)
    && CHECK (queue_flush (r.d[0].q, NULL) == 0)
    && CHECK (test_backend_holds (r.d[0].tb, 'q', 128 * KiB, 0))
    && CHECK (test_backend_holds (r.d[0].tb, 'f', 128 * KiB, 128 * KiB));
  test_thread_join (&t);
  test_rig_stop (&r);
  free (buf);
  tap_ok (ok, "ack=queued, %s: while a read competes, 64 KiB stream writes"
          " are %s", what, forwarded ? "written as they came" : "queued");
}

int
main (void)
{
  tap_plan (20);
  test_random_writes_go_around ();
  test_stream_is_queued ();
  test_full_size_writes_go_around ();
  test_fua_goes_around_then_flushes ();
  test_fua_around_waiting_flush ();
  test_flush_beside_plain_write ();
  test_around_a_queue ();
  test_bypass_off (false, true, "bypass=never");
  test_bypass_off (true, false, "a backend that does not write to memory");
  test_overlapping_write_waits ();
  test_no_token_means_queued ();
  test_write_beside_running_flush ();
  test_queued_write_beside_running_flush ();
  test_error_is_the_answer ();
  test_large_write_around_async ();
  test_forward_while_reading (FORWARD_REMOTE, true, "asynchronous backend,"
                              " reads wait behind writes [async]");
  test_forward_while_reading (FORWARD_ASYNC, true, "asynchronous backend,"
                              " reads do not wait behind writes [async]");
  test_forward_while_reading (FORWARD_REMOTE, false, "asynchronous backend,"
                              " read-target=off [async]");
  test_forward_while_reading (FORWARD_MEMORY, true, "a backend that writes"
                              " to memory, a read target");
  test_forward_while_reading (FORWARD_MEMORY, false, "a backend that writes"
                              " to memory, read-target=off");
  return tap_done ();
}
