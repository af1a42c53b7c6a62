/* plugq: unit tests for answered writes whose write-back failed
 * (queue_failing.c).
 *
 *  - The data is kept: reads see it, the backend does not have it, and
 *    every FLUSH fails with its errno (ENOSPC stays ENOSPC) for as long
 *    as the backend refuses it, however many FLUSHes are in flight.
 *  - Once the backend takes writes again, the next FLUSH tries the data
 *    again at once, writes it and succeeds, even when a try that began
 *    before it came fails; without a FLUSH the data is tried again by
 *    itself after a delay.
 *  - A newer write over kept data replaces it as any queued write does;
 *    only the bytes no newer queued piece holds are kept.
 *  - A writer that finds the queue full while data is failing fails with
 *    that errno instead of waiting for room that may never come.
 *  - At shutdown what still fails is dropped, latched and reported:
 *    queue_stop says answered data was lost.
 *
 * Every case runs over a synchronous and an asynchronous backend; every
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
#include "queue/session.h"
#include "tap.h"
#include "test_backends.h"

#define KiB ((uint64_t) 1024)
#define MiB (1024 * KiB)
#define DISK_SIZE (4 * MiB)
#define FOREVER 1000000u        /* failures: until cancelled */

static unsigned async_mode;
#define MODE (async_mode ? " [async]" : "")

/* One disk, plugged for an hour: nothing is written back before a
 * FLUSH, or a case's unplug.
 */
static bool
rig (struct test_rig *r, unsigned queue_requests)
{
  struct queue_config cfg = test_config (TEST_HOUR, 1000);

  cfg.bypass = false;
  if (queue_requests)
    cfg.queue_requests = queue_requests;
  memset (r, 0, sizeof *r);
  return test_rig_one (r, &cfg, DISK_SIZE, async_mode, 0);
}

static int
flush_errno (struct queue *q, struct session *s)
{
  return queue_flush (q, s) == 0 ? 0 : errno;
}

/* The backend refuses writes with err until stop_failing. */
static void
fail_writes (struct test_rig *r, int err)
{
  test_backend_fail (r->d[0].tb, TB_PWRITEV, FOREVER, err);
}

static void
stop_failing (struct test_rig *r)
{
  test_backend_fail (r->d[0].tb, TB_PWRITEV, 0, 0);
}

static void
test_kept_while_failing (int err)
{
  struct test_rig r;
  struct session *s = NULL;
  int f1 = 0, f2 = 0, f3 = -1;
  bool ok;

  ok = CHECK (rig (&r, 0)) && CHECK ((s = session_new ()) != NULL);
  ok = ok && CHECK (test_write_fill (r.d[0].q, s, 'a', 64 * KiB, MiB, 0)
                    == 0);
  if (ok) {
    fail_writes (&r, err);
    f1 = flush_errno (r.d[0].q, s);
    f2 = flush_errno (r.d[0].q, s);
  }
  ok = ok && CHECK (test_queue_reads_as (r.d[0].q, 'a', 64 * KiB, MiB));
  ok = ok && CHECK (test_backend_holds (r.d[0].tb, 0, 64 * KiB, MiB));
  if (ok) {
    stop_failing (&r);
    f3 = flush_errno (r.d[0].q, s);
  }
  ok = ok && CHECK (test_backend_holds (r.d[0].tb, 'a', 64 * KiB, MiB));
  ok = ok && CHECK (test_stats (r.d[0].q).latched_errors == 0);
  test_rig_stop (&r);
  session_free (s);
  tap_ok (ok && f1 == err && f2 == err && f3 == 0,
          "a failed write-back of answered data (%s) is kept and read back;"
          " every FLUSH fails with it while it fails (%s, %s); the first"
          " FLUSH after the backend recovers writes it and succeeds (%s)%s",
          strerror (err), strerror (f1), strerror (f2),
          f3 ? strerror (f3) : "0", MODE);
}

static void
test_kept_enospc (void)
{
  test_kept_while_failing (ENOSPC);
}

static void
test_kept_eio (void)
{
  test_kept_while_failing (EIO);
}

struct flush_job {
  struct queue *q;
  struct session *s;
};

static int
flush_job_run (void *arg)
{
  struct flush_job *j = arg;

  return flush_errno (j->q, j->s);
}

/* Eight FLUSHes of one session at once over failing data: every one
 * covers it, so every one fails.
 */
static void
test_concurrent_flushes_all_fail (void)
{
  enum { N = 8 };
  struct test_thread t[N];
  struct flush_job j;
  struct test_rig r;
  unsigned failed = 0;
  bool ok;

  for (unsigned i = 0; i < N; i++)
    t[i] = (struct test_thread) TEST_THREAD_INIT;
  ok = CHECK (rig (&r, 0));
  j = (struct flush_job) { .q = r.d[0].q, .s = session_new () };
  ok = ok && CHECK (j.s != NULL);
  for (unsigned i = 0; ok && i < 16; i++)
    ok = CHECK (test_write_fill (j.q, j.s, 'a' + i, 4 * KiB, i * 64 * KiB, 0)
                == 0);
  if (ok)
    fail_writes (&r, EIO);
  for (unsigned i = 0; ok && i < N; i++)
    ok = CHECK (test_thread_start (&t[i], flush_job_run, &j) == 0);
  for (unsigned i = 0; i < N; i++)
    if (ok && CHECK (test_thread_wait (&t[i])))
      failed += t[i].result == EIO;
  if (ok)
    stop_failing (&r);
  for (unsigned i = 0; i < N; i++)
    test_thread_join (&t[i]);
  ok = ok && CHECK (flush_errno (j.q, j.s) == 0);
  for (unsigned i = 0; ok && i < 16; i++)
    ok = CHECK (test_backend_holds (r.d[0].tb, 'a' + i, 4 * KiB,
                                    i * 64 * KiB));
  test_rig_stop (&r);
  session_free (j.s);
  tap_ok (ok && failed == N, "%u of %d FLUSHes in flight at once over failing"
          " data fail; once the backend recovers every write lands%s",
          failed, N, MODE);
}

/* Whether the backend holds byte c over the range, without a word: for
 * polling.
 */
static bool
backend_has (struct test_backend *tb, int c, uint64_t count, uint64_t offset)
{
  unsigned char buf[4 * KiB];

  if (count > sizeof buf || test_backend_read (tb, buf, count, offset) == -1)
    return false;
  for (uint64_t i = 0; i < count; i++)
    if (buf[i] != c)
      return false;
  return true;
}

/* Without any FLUSH, failing data is tried again by itself. */
static void
test_retried_without_flush (void)
{
  struct test_rig r;
  bool ok;

  ok = CHECK (rig (&r, 0));
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'a', 4 * KiB, 0, 0)
                    == 0);
  if (ok) {
    test_backend_fail (r.d[0].tb, TB_PWRITEV, 2, ENOSPC);
    test_unplug_now (r.d[0].q);
  }
  ok = ok && CHECK (TEST_WAIT_FOR (backend_has (r.d[0].tb, 'a', 4 * KiB, 0)));
  ok = ok && CHECK (test_stats (r.d[0].q).writeback_retries >= 2);
  test_rig_stop (&r);
  tap_ok (ok, "failing data is tried again after a delay, without a FLUSH,"
          " and lands%s", MODE);
}

static bool
flush_waits (struct queue *q)
{
  bool w;

  lock_acquire (&q->lock);
  w = q->flush.wanted;
  lock_release (&q->lock);
  return w;
}

/* A FLUSH that comes while a try of answered data is in flight, a try
 * that then fails, gets a try of its own: the backend took writes again
 * before the FLUSH came, so the FLUSH succeeds.
 */
static void
test_flush_gets_its_own_try (void)
{
  struct test_rig r;
  struct flush_job j;
  struct test_thread t = TEST_THREAD_INIT;
  bool ok;

  ok = CHECK (rig (&r, 0));
  j = (struct flush_job) { .q = r.d[0].q, .s = session_new () };
  ok = ok && CHECK (j.s != NULL)
    && CHECK (test_write_fill (j.q, j.s, 'a', 4 * KiB, 0, 0) == 0);
  if (ok) {
    test_backend_block (r.d[0].tb, TB_PWRITEV);
    test_unplug_now (j.q);
  }
  /* The write-back is at the backend, decided to fail only once the
   * gate opens: the backend failed it before the FLUSH came.
   */
  ok = ok && CHECK (test_backend_wait_entered (r.d[0].tb, TB_PWRITEV, 1))
    && CHECK (test_thread_start (&t, flush_job_run, &j) == 0)
    && CHECK (TEST_WAIT_FOR (flush_waits (j.q)));
  if (ok)
    test_backend_fail (r.d[0].tb, TB_PWRITEV, 1, EIO);
  test_backend_release (r.d[0].tb, TB_PWRITEV);
  ok = ok && CHECK (test_thread_wait (&t)) && CHECK (t.result == 0)
    && CHECK (test_backend_holds (r.d[0].tb, 'a', 4 * KiB, 0))
    && CHECK (test_backend_failed (r.d[0].tb, TB_PWRITEV) == 1);
  test_thread_join (&t);
  test_rig_stop (&r);
  session_free (j.s);
  tap_ok (ok, "a FLUSH that came while a try of failing data was in flight"
          " gets its own try when that one fails, and succeeds%s", MODE);
}

/* A newer write over kept data replaces it; a write of other bytes that
 * the backend takes does not make a FLUSH succeed while the kept data
 * still fails.
 */
static void
test_newer_write_replaces_kept (void)
{
  struct test_rig r;
  int f1 = 0, f2 = -1;
  bool ok;

  ok = CHECK (rig (&r, 0));
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'a', 8 * KiB, 0, 0)
                    == 0);
  if (ok) {
    test_backend_fail (r.d[0].tb, TB_PWRITEV, 1, ENOSPC);
    f1 = flush_errno (r.d[0].q, NULL);
  }
  /* The retry of the FLUSH below would succeed: block it, and replace
   * half of the kept data meanwhile.
   */
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'b', 4 * KiB, 0, 0)
                    == 0);
  ok = ok && CHECK (test_queue_reads_as (r.d[0].q, 'b', 4 * KiB, 0));
  ok = ok && CHECK (test_queue_reads_as (r.d[0].q, 'a', 4 * KiB, 4 * KiB));
  if (ok)
    f2 = flush_errno (r.d[0].q, NULL);
  ok = ok && CHECK (test_backend_holds (r.d[0].tb, 'b', 4 * KiB, 0));
  ok = ok && CHECK (test_backend_holds (r.d[0].tb, 'a', 4 * KiB, 4 * KiB));
  test_rig_stop (&r);
  tap_ok (ok && f1 == ENOSPC && f2 == 0,
          "a newer write over kept data replaces it, the rest of it is kept,"
          " and the next FLUSH writes both%s", MODE);
}

/* Only what no newer queued write holds is kept: the newer one, queued
 * while the older was in flight, stays the newest data.
 */
static void
test_kept_under_newer_queued (void)
{
  struct test_write_job w = {
    .c = 'b', .count = 4 * KiB, .offset = 4 * KiB,
  };
  struct test_thread t = TEST_THREAD_INIT;
  struct test_rig r;
  bool ok;

  ok = CHECK (rig (&r, 0));
  w.q = r.d[0].q;
  ok = ok && CHECK (test_write_fill (w.q, NULL, 'a', 12 * KiB, 0, 0) == 0);
  if (ok) {
    test_backend_block (r.d[0].tb, TB_PWRITEV);
    test_backend_fail (r.d[0].tb, TB_PWRITEV, 1, EIO);
    test_unplug_now (w.q);
  }
  ok = ok && CHECK (test_backend_wait_entered (r.d[0].tb, TB_PWRITEV, 1));
  /* Queued over the middle of the write in flight. */
  ok = ok && CHECK (test_thread_start (&t, test_write_job_run, &w) == 0);
  ok = ok && CHECK (test_thread_wait (&t) && t.result == 0);
  if (ok)
    test_backend_step (r.d[0].tb, TB_PWRITEV, 1);
  ok = ok && CHECK (TEST_WAIT_FOR (test_backend_count (r.d[0].tb, TB_PWRITEV)
                                   >= 1));
  ok = ok && CHECK (test_queue_reads_as (w.q, 'a', 4 * KiB, 0));
  ok = ok && CHECK (test_queue_reads_as (w.q, 'b', 4 * KiB, 4 * KiB));
  ok = ok && CHECK (test_queue_reads_as (w.q, 'a', 4 * KiB, 8 * KiB));
  test_backend_release (r.d[0].tb, TB_PWRITEV);
  ok = ok && CHECK (queue_flush (w.q, NULL) == 0);
  ok = ok && CHECK (test_backend_holds (r.d[0].tb, 'a', 4 * KiB, 0));
  ok = ok && CHECK (test_backend_holds (r.d[0].tb, 'b', 4 * KiB, 4 * KiB));
  ok = ok && CHECK (test_backend_holds (r.d[0].tb, 'a', 4 * KiB, 8 * KiB));
  test_backend_release_all (r.d[0].tb);
  test_thread_join (&t);
  test_rig_stop (&r);
  tap_ok (ok, "only the bytes no newer queued write holds are kept; newer"
          " data still wins once both are written%s", MODE);
}

/* A full queue of failing data fails the next writer with its errno. */
static void
test_full_queue_fails_writers (void)
{
  struct test_rig r;
  int w = 0, e = 0;
  bool ok;

  ok = CHECK (rig (&r, 4));
  for (unsigned i = 0; ok && i < 4; i++)
    ok = CHECK (test_write_fill (r.d[0].q, NULL, 'a' + i, 4 * KiB,
                                 i * 64 * KiB, 0) == 0);
  if (ok) {
    fail_writes (&r, ENOSPC);
    ok = CHECK (flush_errno (r.d[0].q, NULL) == ENOSPC);
  }
  if (ok) {
    w = test_write_fill (r.d[0].q, NULL, 'z', 4 * KiB, MiB, 0);
    e = errno;
  }
  if (ok)
    stop_failing (&r);
  ok = ok && CHECK (flush_errno (r.d[0].q, NULL) == 0);
  for (unsigned i = 0; ok && i < 4; i++)
    ok = CHECK (test_backend_holds (r.d[0].tb, 'a' + i, 4 * KiB,
                                    i * 64 * KiB));
  test_rig_stop (&r);
  tap_ok (ok && w == -1 && e == ENOSPC, "a writer finding the queue full of"
          " failing data fails with its errno instead of waiting%s", MODE);
}

/* At shutdown, data that still fails is lost, and queue_stop says so. */
static void
test_shutdown_drops_and_reports (void)
{
  struct test_rig r;
  int stopped = 0;
  bool ok;

  ok = CHECK (rig (&r, 0));
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'a', 4 * KiB, 0, 0)
                    == 0);
  if (ok) {
    fail_writes (&r, EIO);
    ok = CHECK (flush_errno (r.d[0].q, NULL) == EIO);
  }
  if (ok)
    stopped = queue_stop (r.d[0].q);
  ok = ok && CHECK (test_backend_holds (r.d[0].tb, 0, 4 * KiB, 0));
  ok = ok && CHECK (test_stats (r.d[0].q).latched_errors == 1);
  test_rig_stop (&r);
  tap_ok (ok && stopped == -1, "at shutdown, data whose write-back still"
          " fails is dropped and queue_stop reports answered data lost%s",
          MODE);
}

int
main (void)
{
  static void (*const cases[]) (void) = {
    test_kept_enospc,
    test_kept_eio,
    test_concurrent_flushes_all_fail,
    test_retried_without_flush,
    test_flush_gets_its_own_try,
    test_newer_write_replaces_kept,
    test_kept_under_newer_queued,
    test_full_queue_fails_writers,
    test_shutdown_drops_and_reports,
  };

  test_sync_then_async (cases, sizeof cases / sizeof cases[0], &async_mode,
                        4);
  tap_plan (tap_count);
  return tap_done ();
}
