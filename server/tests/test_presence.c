/* plugq: unit tests for reads that take no lock (queue_presence.c).
 *
 *  - A read over regions no present piece reaches is answered while
 *    another thread holds the queue lock; one over a queued piece waits
 *    for the lock and reads the piece's data.
 *  - The regions count exactly the pieces present: a queued piece, one
 *    grown by appends into the next region, one superseded by a newer
 *    write, and one whose write-back failed and is kept each keep their
 *    regions counted until their data is on the backend, and then every
 *    count is 0 again; a failed write kept only in part leaves the
 *    regions it counted in while in flight.
 *
 * Each case runs over a synchronous and an asynchronous backend; every
 * wait is bounded (fixtures.h).
 */
#include <config.h>

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fixtures.h"
#include "queue/queue.h"
#include "queue/queue_internal.h"
#include "tap.h"
#include "test_backends.h"

#define KiB ((uint64_t) 1024)
#define MiB (1024 * KiB)
#define DISK_SIZE (16 * MiB)    /* regions of 64 KiB */
#define REGION (DISK_SIZE / PRESENCE_REGIONS)
#define FOREVER 1000000u        /* failures: until cancelled */

static unsigned async_mode;
#define MODE (async_mode ? " [async]" : "")

/* One disk, plugged for an hour: nothing is written back before a
 * FLUSH.
 */
static bool
rig (struct test_rig *r)
{
  struct queue_config cfg = test_config (TEST_HOUR, 1000);

  cfg.bypass = false;
  return test_rig_one (r, &cfg, DISK_SIZE, async_mode, 0);
}

static bool
all_clear (struct queue *q)
{
  for (unsigned i = 0; i < PRESENCE_REGIONS; i++)
    if (atomic_load (&q->presence[i]) != 0)
      return false;
  return true;
}

static bool
region_clear (struct queue *q, uint64_t offset)
{
  return presence_clear (q, offset, 1);
}

static void
test_read_beside_held_lock (void)
{
  struct test_rig r;
  struct test_read_job far, near;
  struct test_thread tf = TEST_THREAD_INIT, tn = TEST_THREAD_INIT;
  bool ok, far_done = false, near_waited = false;

  ok = CHECK (rig (&r))
    && CHECK (test_write_fill (r.d[0].q, NULL, 'a', 4 * KiB, 0, 0) == 0);
  far = (struct test_read_job) { .q = r.d[0].q, .offset = 8 * MiB,
                                 .count = 4 * KiB };
  near = (struct test_read_job) { .q = r.d[0].q, .offset = 0,
                                  .count = 4 * KiB };
  if (ok) {
    lock_acquire (&r.d[0].q->lock);
    ok = CHECK (test_thread_start (&tf, test_read_job_run, &far) == 0)
      && CHECK (test_thread_start (&tn, test_read_job_run, &near) == 0);
    far_done = ok && TEST_WAIT_FOR (test_thread_done (&tf));
    near_waited = ok && !TEST_SOON (test_thread_done (&tn));
    lock_release (&r.d[0].q->lock);
  }
  ok = ok && CHECK (far_done) && CHECK (near_waited)
    && CHECK (test_thread_wait (&tf)) && CHECK (tf.result == 0)
    && CHECK (test_thread_wait (&tn)) && CHECK (tn.result == 0)
    && CHECK (near.buf[0] == 'a' && near.buf[4 * KiB - 1] == 'a')
    && CHECK (far.buf[0] == 0);
  test_thread_join (&tf);
  test_thread_join (&tn);
  test_rig_stop (&r);
  tap_ok (ok, "a read where nothing is queued is answered while the queue"
          " lock is held; one over a queued write waits for it and reads"
          " the write%s", MODE);
}

static void
test_counts_follow_pieces (void)
{
  struct test_rig r;
  struct queue *q;
  bool ok;

  ok = CHECK (rig (&r));
  q = r.d[0].q;
  /* Queued; then a stream grown by appends across into region 2: its
   * first piece starts late in region 1 and takes room to the middle of
   * region 2 (stream_room).
   */
  ok = ok && CHECK (all_clear (q))
    && CHECK (test_write_fill (q, NULL, 'a', 4 * KiB, 5 * REGION, 0) == 0)
    && CHECK (!region_clear (q, 5 * REGION))
    && CHECK (region_clear (q, 4 * REGION))
    && CHECK (region_clear (q, 6 * REGION));
  for (uint64_t at = REGION + 48 * KiB; ok && at < 2 * REGION + 32 * KiB;
       at += 4 * KiB)
    ok = CHECK (test_write_fill (q, NULL, 's', 4 * KiB, at, 0) == 0);
  ok = ok && CHECK (test_stats (q).op[OP_WRITE].merges > 0)
    && CHECK (!region_clear (q, REGION))
    && CHECK (!region_clear (q, 2 * REGION))
    && CHECK (region_clear (q, 3 * REGION));
  /* Superseded by a newer write over it: still counted. */
  ok = ok && CHECK (test_write_fill (q, NULL, 'b', 4 * KiB, 5 * REGION, 0)
                    == 0)
    && CHECK (!region_clear (q, 5 * REGION));
  ok = ok && CHECK (queue_flush (q, NULL) == 0) && CHECK (all_clear (q))
    && CHECK (test_backend_holds (r.d[0].tb, 'b', 4 * KiB, 5 * REGION));
  test_rig_stop (&r);
  tap_ok (ok, "regions count a queued write, a stream grown across a region"
          " boundary and a superseded write, and are all clear once written%s",
          MODE);
}

static void
test_failed_writeback_stays_counted (void)
{
  struct test_rig r;
  struct queue *q;
  bool ok;

  ok = CHECK (rig (&r));
  q = r.d[0].q;
  ok = ok && CHECK (test_write_fill (q, NULL, 'f', 64 * KiB, 7 * REGION, 0)
                    == 0);
  if (ok)
    test_backend_fail (r.d[0].tb, TB_PWRITEV, FOREVER, EIO);
  ok = ok && CHECK (queue_flush (q, NULL) == -1)
    && CHECK (test_stats (q).queued_requests > 0)
    && CHECK (!region_clear (q, 7 * REGION))
    && CHECK (test_queue_reads_as (q, 'f', 64 * KiB, 7 * REGION));
  if (ok)
    test_backend_fail (r.d[0].tb, TB_PWRITEV, 0, 0);
  ok = ok && CHECK (queue_flush (q, NULL) == 0) && CHECK (all_clear (q))
    && CHECK (test_backend_holds (r.d[0].tb, 'f', 64 * KiB, 7 * REGION));
  test_rig_stop (&r);
  tap_ok (ok, "a write whose write-back failed keeps its region counted"
          " until it is written, then every region is clear%s", MODE);
}

/* A write over regions 7 and 8 fails its write-back while a newer one
 * over region 7 is queued: only region 8's bytes are kept, and the
 * regions it counted in while in flight are uncounted, not the kept
 * part's.
 */
static void
test_kept_part_counts_its_own (void)
{
  struct test_write_job w = {
    .c = 'b', .count = REGION, .offset = 7 * REGION,
  };
  struct test_thread t = TEST_THREAD_INIT;
  struct test_rig r;
  bool ok;

  ok = CHECK (rig (&r));
  w.q = r.d[0].q;
  ok = ok && CHECK (test_write_fill (w.q, NULL, 'a', 2 * REGION, 7 * REGION,
                                     0) == 0);
  if (ok) {
    test_backend_block (r.d[0].tb, TB_PWRITEV);
    test_backend_fail (r.d[0].tb, TB_PWRITEV, 1, EIO);
    test_unplug_now (w.q);
  }
  ok = ok && CHECK (test_backend_wait_entered (r.d[0].tb, TB_PWRITEV, 1))
    && CHECK (test_thread_start (&t, test_write_job_run, &w) == 0)
    && CHECK (test_thread_wait (&t) && t.result == 0);
  if (ok)
    test_backend_step (r.d[0].tb, TB_PWRITEV, 1);
  ok = ok && CHECK (TEST_WAIT_FOR (test_backend_count (r.d[0].tb, TB_PWRITEV)
                                   >= 1))
    && CHECK (!region_clear (w.q, 7 * REGION))
    && CHECK (!region_clear (w.q, 8 * REGION));
  test_backend_release (r.d[0].tb, TB_PWRITEV);
  ok = ok && CHECK (queue_flush (w.q, NULL) == 0) && CHECK (all_clear (w.q))
    && CHECK (test_backend_holds (r.d[0].tb, 'b', REGION, 7 * REGION))
    && CHECK (test_backend_holds (r.d[0].tb, 'a', REGION, 8 * REGION));
  test_backend_release_all (r.d[0].tb);
  test_thread_join (&t);
  test_rig_stop (&r);
  tap_ok (ok, "a failed write-back kept in part counts only that part once"
          " written elsewhere: every region clear after the retry%s", MODE);
}

int
main (void)
{
  static void (*const cases[]) (void) = {
    test_read_beside_held_lock,
    test_counts_follow_pieces,
    test_failed_writeback_stays_counted,
    test_kept_part_counts_its_own,
  };

  tap_plan (2 * sizeof cases / sizeof cases[0]);
  test_sync_then_async (cases, sizeof cases / sizeof cases[0], &async_mode,
                        4);
  return tap_done ();
}
