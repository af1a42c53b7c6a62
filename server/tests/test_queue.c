/* plugq: unit tests for one disk's plugged queue (design.md §1, §3).
 *
 * Every queue here sits on a test backend (test_backends.h): a memory
 * backend that counts, logs, holds or fails calls on demand.  A long
 * unplug delay keeps data queued for as long as a test needs; a held
 * backend call keeps a dispatch in flight.  Nothing waits a fixed time:
 * every wait is a bounded poll or a condition variable, so a failure is
 * reported instead of hanging the run.
 */

#include <config.h>

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "elevator/elevator.h"
#include "fixtures.h"
#include "common/minmax.h"
#include "queue/queue.h"
#include "queue/queue_internal.h"
#include "queue/session.h"
#include "tap.h"
#include "test_backends.h"

/* What the unplug timer does when it fires, without waiting for it: the
 * tests' queues plug for an hour.  White box: queue_internal.h.
 */
static void
unplug_now (struct queue *q, enum unplug_cause cause)
{
  lock_acquire (&q->lock);
  queue_unplug_locked (q, cause);
  queue_kick_dispatcher (q);
  lock_release (&q->lock);
}

#define KiB ((uint64_t) 1024)
#define MiB (KiB * 1024)
#define MS TEST_MS
#define HOUR TEST_HOUR
#define DISK_SIZE (4 * MiB)

/* ------------------------------------------------------------ helpers */

/* Cases that hold whatever the backend's concurrency run three times:
 * over a synchronous backend (one operation at a time), over one that
 * takes writes from several token holders at once (max_writers), and
 * over an asynchronous one with several operations in flight.
 */
static unsigned async_mode;
static unsigned writers_mode;
#define ASYNC_IN_FLIGHT 4
#define WRITERS 2
#define STR(x) #x
#define XSTR(x) STR(x)
#define MODE (async_mode ? " [async]" \
              : writers_mode ? " [" XSTR (WRITERS) " writers]" : "")

static bool
rig_one (struct test_rig *r, const struct queue_config *cfg, uint64_t size)
{
  return test_rig_one (r, cfg, size, async_mode, writers_mode);
}

/* Queues 4 KiB of 'a' at 0 for session s (NULL: none), the next
 * `times` write-outs of the disk failing with err.
 */
static bool
write_failing_writeout (struct test_rig *r, struct session *s,
                        unsigned times, int err)
{
  test_backend_fail (r->d[0].tb, TB_PWRITEV, times, err);
  return CHECK (test_write_fill (r->d[0].q, s, 'a', 4 * KiB, 0, 0) == 0);
}

static uint64_t
total_unplugs (const struct queue_stats *s)
{
  uint64_t n = 0;

  for (int i = 0; i < UNPLUG_CAUSES; i++)
    n += s->unplugs[i];
  return n;
}

/* ------------------------------------------------------------ data */

/* A flat picture of what the first bytes of a disk must read as. */
#define FLAT_SIZE (256 * KiB)

struct flat {
  unsigned char b[FLAT_SIZE];
};

static int
flat_write (struct flat *f, struct queue *q, int c, uint64_t count,
            uint64_t offset)
{
  memset (f->b + offset, c, count);
  return test_write_fill (q, NULL, c, count, offset, 0);
}

static int
flat_zero (struct flat *f, struct queue *q, uint64_t count, uint64_t offset,
           unsigned flags)
{
  memset (f->b + offset, 0, count);
  return queue_zero (q, NULL, count, offset, flags);
}

/* Trim reads as zero on the memory backend (trim_reads_zero). */
static int
flat_trim (struct flat *f, struct queue *q, uint64_t count, uint64_t offset)
{
  memset (f->b + offset, 0, count);
  return queue_trim (q, NULL, count, offset, 0);
}

/* The queue (and, once durable, the backend itself) reads as f. */
static bool
flat_matches (const struct flat *f, struct test_disk *d, bool backend_too)
{
  static unsigned char got[FLAT_SIZE];
  bool ok;

  ok = CHECK (queue_pread (d->q, got, FLAT_SIZE, 0) == 0)
    && test_bytes_equal (got, f->b, FLAT_SIZE, "queue read");
  if (ok && backend_too)
    ok = CHECK (test_backend_read (d->tb, got, FLAT_SIZE, 0) == 0)
      && test_bytes_equal (got, f->b, FLAT_SIZE, "backend");
  return ok;
}

/* ------------------------------------------------------------ threads */

struct flush_job {
  struct queue *q;
  struct session *s;
};

static int
flush_job_run (void *arg)
{
  struct flush_job *j = arg;

  return queue_flush (j->q, j->s);
}

struct read_job {
  struct queue *q;
  void *buf;
  uint64_t count, offset;
};

static int
read_job_run (void *arg)
{
  struct read_job *j = arg;

  return queue_pread (j->q, j->buf, j->count, j->offset);
}

/* Runs fn on a thread and waits for it, boundedly.  A job that does not
 * return stays with t for the caller to join after opening the gates.
 */
static bool
run_bounded (struct test_thread *t, int (*fn) (void *), void *arg,
             int *result)
{
  if (test_thread_start (t, fn, arg) == -1 || !test_thread_wait (t))
    return false;
  *result = t->result;
  return true;
}

/* ------------------------------------------------------------ triggers */

/* The timer alone makes progress: nothing else unplugs the queue. */
static void
test_timer_unplug (void)
{
  struct queue_config cfg = test_config (10 * MS, 1000);
  struct test_rig r;
  struct queue_stats s;
  bool ok;

  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'a', 4 * KiB, 0, 0) == 0);
  ok = ok && CHECK (test_backend_wait_count (r.d[0].tb, TB_PWRITEV, 1));
  if (ok) {
    s = test_stats (r.d[0].q);
    ok &= CHECK (s.plugs == 1);
    ok &= CHECK (s.unplugs[UNPLUG_TIMER] == 1);
    ok &= CHECK (total_unplugs (&s) == 1);
    ok &= CHECK (test_backend_holds (r.d[0].tb, 'a', 4 * KiB, 0));
  }
  test_rig_stop (&r);
  tap_ok (ok, "first request plugs; the unplug timer alone dispatches it%s",
          MODE);
}

/* unplug-thresh=4: three queued requests stay, the fourth unplugs. */
static void
test_threshold (void)
{
  struct queue_config cfg = test_config (HOUR, 4);
  struct test_rig r;
  struct queue_stats s;
  bool ok;

  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  for (unsigned i = 0; ok && i < 3; i++)
    ok = CHECK (test_write_fill (r.d[0].q, NULL, 'a' + i, 4 * KiB,
                                 i * 64 * KiB, 0) == 0);
  if (ok) {
    /* With no unplug counted the dispatcher cannot have run: an unplug
     * is the only way it starts.
     */
    s = test_stats (r.d[0].q);
    ok &= CHECK (s.queued_requests == 3);
    ok &= CHECK (total_unplugs (&s) == 0);
    ok &= CHECK (test_backend_entered (r.d[0].tb, TB_PWRITEV) == 0);
  }
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'd', 4 * KiB,
                                     3 * 64 * KiB, 0) == 0);
  ok = ok && CHECK (test_backend_wait_count (r.d[0].tb, TB_PWRITEV, 4));
  if (ok) {
    s = test_stats (r.d[0].q);
    ok &= CHECK (s.unplugs[UNPLUG_THRESHOLD] == 1);
    ok &= CHECK (total_unplugs (&s) == 1);
    for (unsigned i = 0; i < 4; i++)
      ok &= CHECK (test_backend_holds (r.d[0].tb, 'a' + i, 4 * KiB,
                                       i * 64 * KiB));
  }
  test_rig_stop (&r);
  tap_ok (ok, "unplug-thresh=4: 3 requests stay queued, the 4th unplugs%s",
          MODE);
}

/* FUA: durable when answered, and an older overlapping queued write can
 * never land on top of it.
 */
static void
test_fua (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct test_rig r;
  struct queue_stats s;
  bool ok;

  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'a', 8 * KiB, 0, 0) == 0);
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'b', 8 * KiB, 4 * KiB,
                                     REQ_FUA) == 0);
  if (ok) {
    ok &= CHECK (test_backend_holds (r.d[0].tb, 'b', 8 * KiB, 4 * KiB));
    ok &= CHECK (test_backend_count (r.d[0].tb, TB_FLUSH) >= 1);
    s = test_stats (r.d[0].q);
    ok &= CHECK (s.unplugs[UNPLUG_SYNC] == 1);
    ok &= CHECK (s.fua_requests == 1);
  }
  ok = ok && CHECK (queue_flush (r.d[0].q, NULL) == 0);
  if (ok) {
    ok &= CHECK (test_backend_holds (r.d[0].tb, 'a', 4 * KiB, 0));
    ok &= CHECK (test_backend_holds (r.d[0].tb, 'b', 8 * KiB, 4 * KiB));
  }
  test_rig_stop (&r);
  tap_ok (ok, "FUA write is on the backend and flushed when it returns%s",
          MODE);
}

/* FLUSH: everything answered before it is written, then flushed. */
static void
test_flush (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct test_rig r;
  struct queue_stats s;
  struct tb_call calls[8];
  size_t n;
  bool ok;

  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'a', 4 * KiB, 0, 0) == 0);
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'b', 4 * KiB, MiB,
                                     0) == 0);
  ok = ok && CHECK (queue_zero (r.d[0].q, NULL, 4 * KiB, 2 * MiB, 0) == 0);
  ok = ok && CHECK (test_backend_entered (r.d[0].tb, TB_PWRITEV) == 0);
  ok = ok && CHECK (queue_flush (r.d[0].q, NULL) == 0);
  if (ok) {
    ok &= CHECK (test_backend_holds (r.d[0].tb, 'a', 4 * KiB, 0));
    ok &= CHECK (test_backend_holds (r.d[0].tb, 'b', 4 * KiB, MiB));
    ok &= CHECK (test_backend_count (r.d[0].tb, TB_ZERO) == 1);
    ok &= CHECK (test_backend_count (r.d[0].tb, TB_FLUSH) == 1);
    /* The backend flush came after every write it covers. */
    n = test_backend_calls (r.d[0].tb, TB_OPS, calls, 8);
    ok &= CHECK (n == 4 && calls[n - 1].op == TB_FLUSH);
    s = test_stats (r.d[0].q);
    ok &= CHECK (s.unplugs[UNPLUG_FLUSH] == 1);
    ok &= CHECK (s.flushes == 1 && s.backend_flushes == 1);
    ok &= CHECK (s.queued_requests == 0);
  }
  test_rig_stop (&r);
  tap_ok (ok, "FLUSH writes everything answered before it, then flushes%s",
          MODE);
}

#define GROUP 8

/* Flushes that arrive while a backend flush runs share the next one. */
static void
test_group_commit (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct test_rig r;
  struct test_thread first = TEST_THREAD_INIT, t[GROUP];
  struct flush_job job;
  struct queue_stats s;
  unsigned started = 0;
  bool ok;

  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  job = (struct flush_job) { r.d[0].q, NULL };
  if (ok) {
    test_backend_block (r.d[0].tb, TB_FLUSH);
    ok = CHECK (test_write_fill (r.d[0].q, NULL, 'a', 4 * KiB, 0, 0) == 0);
  }
  ok = ok && CHECK (test_thread_start (&first, flush_job_run, &job) == 0);
  ok = ok && CHECK (test_backend_wait_entered (r.d[0].tb, TB_FLUSH, 1));

  /* Answered while the first backend flush runs: the later flushes
   * must cover it, so they cannot share the flush already under way.
   */
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'b', 4 * KiB, MiB,
                                     0) == 0);
  for (; ok && started < GROUP; started++)
    ok = CHECK (test_thread_start (&t[started], flush_job_run, &job) == 0);
  ok = ok && CHECK (TEST_WAIT_FOR (test_stats (r.d[0].q).flushes
                                   == GROUP + 1));
  test_backend_release (r.d[0].tb, TB_FLUSH);

  ok = ok && CHECK (test_thread_wait (&first) && first.result == 0);
  for (unsigned i = 0; i < started; i++)
    ok &= CHECK (test_thread_wait (&t[i]) && t[i].result == 0);
  if (ok) {
    s = test_stats (r.d[0].q);
    printf ("# %" PRIu64 " flushes, %" PRIu64 " backend flushes\n",
            s.flushes, s.backend_flushes);
    ok &= CHECK (s.backend_flushes < s.flushes);
    ok &= CHECK (s.backend_flushes == 2);
    ok &= CHECK (test_backend_count (r.d[0].tb, TB_FLUSH) == 2);
    ok &= CHECK (test_backend_holds (r.d[0].tb, 'b', 4 * KiB, MiB));
  }
  test_thread_join (&first);
  for (unsigned i = 0; i < started; i++)
    test_thread_join (&t[i]);
  test_rig_stop (&r);
  tap_ok (ok, "group commit: %d concurrent flushes share 2 backend flushes%s",
          GROUP + 1, MODE);
}

#define ROUNDS 100

struct flush_rounds_job {
  struct test_backend *tb;
  struct queue *q;
  int c;                        /* this thread's byte */
  unsigned early;               /* FLUSHes answered before their flush */
};

/* ROUNDS times: a write of its own, then a FLUSH, which must not be
 * answered before a backend flush that started after it has ended.
 */
static int
flush_rounds_run (void *arg)
{
  struct flush_rounds_job *j = arg;

  for (unsigned i = 0; i < ROUNDS; i++) {
    uint64_t before, after;

    if (test_write_fill (j->q, NULL, j->c, 4 * KiB,
                         (uint64_t) (j->c - 'a') * 4 * KiB, 0) != 0)
      return -1;
    before = test_backend_entered (j->tb, TB_FLUSH);
    if (queue_flush (j->q, NULL) != 0)
      return -1;
    after = test_backend_count (j->tb, TB_FLUSH);
    if (after < before + 1)
      j->early++;
  }
  return 0;
}

/* Group commits one after another, each sleeper woken once: the thread
 * that ends a flush wakes one sleeper, which wakes the rest, and a
 * sleeper woken twice would answer its next FLUSH early.
 */
static void
test_group_commit_rounds (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct test_rig r;
  struct test_thread t[GROUP];
  struct flush_rounds_job jobs[GROUP];
  unsigned started = 0, early = 0;
  bool ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));

  for (; ok && started < GROUP; started++) {
    jobs[started] = (struct flush_rounds_job) {
      r.d[0].tb, r.d[0].q, 'a' + (int) started, 0,
    };
    t[started] = (struct test_thread) TEST_THREAD_INIT;
    ok = CHECK (test_thread_start (&t[started], flush_rounds_run,
                                   &jobs[started]) == 0);
  }
  for (unsigned i = 0; i < started; i++) {
    ok &= CHECK (test_thread_wait (&t[i]) && t[i].result == 0);
    early += jobs[i].early;
  }
  ok = ok && CHECK (early == 0);
  for (unsigned i = 0; ok && i < started; i++)
    ok = CHECK (test_backend_holds (r.d[0].tb, 'a' + (int) i, 4 * KiB,
                                    i * 4 * KiB));
  for (unsigned i = 0; i < started; i++)
    test_thread_join (&t[i]);
  test_rig_stop (&r);
  tap_ok (ok, "group commit: %d threads x %d FLUSHes, none answered before"
          " a backend flush that began after it (%u early)%s",
          GROUP, ROUNDS, early, MODE);
}

#define CHUNK (16 * KiB)
/* More than the queue's room (4 chunks) and what the backend can hold
 * at once: 4 batches in flight (async) or 2 writers (sync), each of up
 * to the 4 chunks a full queue merges into one, so the writer must wait.
 */
#define CHUNKS (4 + ASYNC_IN_FLIGHT * 4 + 4)
_Static_assert (CHUNKS > 4 + WRITERS * 4, "CHUNKS");

struct full_writer {
  struct queue *q;
  bool zeroes;                  /* CHUNKS zeroes a CHUNK apart, not writes */
  _Atomic unsigned done;
};

static int
full_writer_run (void *arg)
{
  struct full_writer *w = arg;

  for (unsigned i = 0; i < CHUNKS; i++) {
    int r = w->zeroes ? queue_zero (w->q, NULL, CHUNK, i * 2 * CHUNK, 0)
      : test_write_fill (w->q, NULL, 'A' + i, CHUNK, i * CHUNK, 0);

    if (r == -1)
      return -1;
    atomic_store (&w->done, i + 1);
  }
  return 0;
}

/* The writer w, on its own thread against disk d whose backend holds
 * every operation of kind op, must end up waiting for room in the queue
 * before it is done; once the backend moves it finishes, and a flush
 * writes everything out.
 */
static bool
writer_waits_for_room (struct test_disk *d, enum tb_op op,
                       struct full_writer *w)
{
  struct test_thread t = TEST_THREAD_INIT;
  bool ok;

  w->q = d->q;
  test_backend_block (d->tb, op);
  ok = CHECK (test_thread_start (&t, full_writer_run, w) == 0);
  ok = ok && CHECK (test_backend_wait_entered (d->tb, op, 1));
  ok = ok && CHECK (TEST_WAIT_FOR (test_stats (d->q).full_waits >= 1));
  if (ok) {
    /* Every dispatch is held in the backend, so the writer cannot get
     * all its chunks in: the queue is full until something lands.
     */
    ok &= CHECK (!test_thread_done (&t));
    ok &= CHECK (atomic_load (&w->done) < CHUNKS);
    printf ("# writer blocked after %u of %u chunks, %" PRIu64 " queued\n",
            atomic_load (&w->done), CHUNKS,
            test_stats (d->q).queued_requests);
  }
  test_backend_release (d->tb, op);
  ok = ok && CHECK (test_thread_wait (&t) && t.result == 0);
  ok = ok && CHECK (queue_flush (d->q, NULL) == 0);
  test_thread_join (&t);
  return ok && CHECK (test_stats (d->q).unplugs[UNPLUG_FULL] >= 1);
}

/* queue-bytes reached: the writer waits while the backend is stuck,
 * carries on once it moves, and nothing queued is lost.
 */
static void
test_full_queue (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct full_writer w = { .done = 0 };
  struct test_rig r;
  bool ok;

  cfg.queue_bytes = 4 * CHUNK;
  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE))
    && writer_waits_for_room (&r.d[0], TB_PWRITEV, &w);
  ok = ok && CHECK (test_stats (r.d[0].q).op[OP_WRITE].requests == CHUNKS);
  for (unsigned i = 0; ok && i < CHUNKS; i++)
    ok &= CHECK (test_backend_holds (r.d[0].tb, 'A' + i, CHUNK, i * CHUNK));
  test_rig_stop (&r);
  tap_ok (ok, "full queue: the writer blocks, then proceeds; nothing lost%s",
          MODE);
}

/* queue-requests reached: zeroes hold no data for queue-bytes to count,
 * so the number of queued pieces bounds them, and the writer waits.
 */
static void
test_queue_requests (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct full_writer w = { .zeroes = true };
  struct test_rig r;
  bool ok;

  cfg.queue_requests = 4;
  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  /* Data under every zero, so the backend shows which ones landed. */
  for (unsigned i = 0; ok && i < CHUNKS; i++)
    ok = CHECK (test_write_fill (r.d[0].q, NULL, 'x', CHUNK, i * 2 * CHUNK,
                                 0) == 0);
  ok = ok && CHECK (queue_flush (r.d[0].q, NULL) == 0)
    && writer_waits_for_room (&r.d[0], TB_ZERO, &w);
  for (unsigned i = 0; ok && i < CHUNKS; i++)
    ok &= CHECK (test_backend_holds (r.d[0].tb, 0, CHUNK, i * 2 * CHUNK));
  test_rig_stop (&r);
  tap_ok (ok, "queue-requests=4 bounds zero pieces: the writer blocks, then"
          " proceeds%s", MODE);
}

/* The backend has seen want calls of kind op (TB_OPS: any), all made
 * by this thread, the last of them a last_op; *n is how many it saw.
 */
static bool
calls_on_this_thread (struct test_backend *tb, enum tb_op op, size_t want,
                      enum tb_op last_op, size_t *n)
{
  struct tb_call calls[8];
  bool ok;

  *n = test_backend_calls (tb, op, calls, 8);
  ok = CHECK (*n == want && want <= 8);
  ok = ok && CHECK (calls[want - 1].op == last_op);
  for (size_t i = 0; ok && i < want; i++)
    ok &= CHECK (pthread_equal (calls[i].thread, pthread_self ()));
  return ok;
}

/* The request that unplugs a synchronous queue writes it out on its own
 * thread before it is answered: no hand-off to the dispatch thread.
 */
static void
test_unplugger_dispatches (void)
{
  struct queue_config cfg = test_config (HOUR, 4);
  struct test_rig r;
  size_t n = 0;
  bool ok;

  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  for (unsigned i = 0; ok && i < 4; i++)
    ok = CHECK (test_write_fill (r.d[0].q, NULL, 'a' + i, 4 * KiB,
                                 i * 64 * KiB, 0) == 0);
  /* No waiting: the writes must be there when the 4th write returns. */
  ok = ok && calls_on_this_thread (r.d[0].tb, TB_PWRITEV, 4, TB_PWRITEV, &n);
  test_rig_stop (&r);
  tap_ok (ok, "the request that unplugs writes the queue out itself"
          " (%zu backend writes on its thread)", n);
}

/* A FUA write would only sleep while another thread wrote and flushed
 * for it: it does both itself.
 */
static void
test_waiter_dispatches (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct test_rig r;
  size_t n;
  bool ok;

  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'a', 4 * KiB, 0, 0)
                    == 0);
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'b', 4 * KiB, 64 * KiB,
                                     REQ_FUA) == 0);
  /* Two writes, then the flush. */
  ok = ok && calls_on_this_thread (r.d[0].tb, TB_OPS, 3, TB_FLUSH, &n);
  test_rig_stop (&r);
  tap_ok (ok, "a FUA writer writes and flushes on its own thread instead"
          " of sleeping");
}

/* A write that a pending FLUSH covers is cut away by a newer write to
 * the same bytes before it went out: the flush must wait for the newer
 * write, or it answers with neither version on the disk.  (Found by
 * the crash-durability test in reliability.bats.)
 */
static void
test_flush_covers_superseding_write (void)
{
  struct queue_config cfg = test_config (HOUR, 1);
  struct test_write_job w0 = { .c = 'a', .count = 4 * KiB, .offset = 0 };
  struct flush_job f = { .s = NULL };
  struct test_thread t0 = TEST_THREAD_INIT, t1 = TEST_THREAD_INIT;
  struct tb_call calls[16];
  struct test_rig r;
  size_t n = 0, writes_before_flush = 0;
  bool ok;

  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  w0.q = f.q = r.d[0].q;
  if (ok)
    test_backend_block (r.d[0].tb, TB_PWRITEV);
  /* 'a' goes out and is held in the backend ... */
  ok = ok && CHECK (test_thread_start (&t0, test_write_job_run, &w0) == 0);
  ok = ok && CHECK (test_backend_wait_entered (r.d[0].tb, TB_PWRITEV, 1));
  /* ... so 'b', over the same bytes, has to wait in the queue, */
  ok = ok && CHECK (test_write_fill (f.q, NULL, 'b', 4 * KiB, 0, 0) == 0);
  /* a FLUSH now promises 'b' (or newer), */
  ok = ok && CHECK (test_thread_start (&t1, flush_job_run, &f) == 0);
  ok = ok && CHECK (TEST_WAIT_FOR (test_stats (f.q).flushes == 1));
  /* and 'c' replaces 'b' in the queue before 'b' was written. */
  ok = ok && CHECK (test_write_fill (f.q, NULL, 'c', 4 * KiB, 0, 0) == 0);
  test_backend_release (r.d[0].tb, TB_PWRITEV);
  ok = ok && CHECK (test_thread_wait (&t1) && t1.result == 0);
  ok = ok && CHECK (test_thread_wait (&t0) && t0.result == 0);
  if (ok) {
    n = test_backend_calls (r.d[0].tb, TB_OPS, calls, 16);
    for (size_t i = 0; i < n && i < 16 && calls[i].op != TB_FLUSH; i++)
      if (calls[i].op == TB_PWRITEV && calls[i].offset == 0)
        writes_before_flush++;
    /* 'a', then 'c', and only then the backend flush. */
    ok &= CHECK (writes_before_flush == 2);
  }
  test_backend_release_all (r.d[0].tb);
  test_thread_join (&t0);
  test_thread_join (&t1);
  test_rig_stop (&r);
  tap_ok (ok, "FLUSH waits for a newer write that replaced one it covers"
          " (%zu writes before the backend flush)%s", writes_before_flush,
          MODE);
}

/* A write that arrives while the FLUSH's own thread writes the queue out
 * is newer than the FLUSH and none of its business: once its flush is
 * done the thread answers, and the write is left plugged under the
 * unplug timer, not in a running queue nobody looks at.
 */
static void
test_write_behind_flush_left_plugged (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct flush_job f = { .s = NULL };
  struct test_thread t = TEST_THREAD_INIT;
  struct queue_stats s;
  struct test_rig r;
  bool ok;

  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  f.q = r.d[0].q;
  ok = ok && CHECK (test_write_fill (f.q, NULL, 'a', 4 * KiB, 0, 0) == 0);
  if (ok)
    test_backend_block (r.d[0].tb, TB_PWRITEV);
  /* The FLUSH writes 'a' out itself and is held in the backend ... */
  ok = ok && CHECK (test_thread_start (&t, flush_job_run, &f) == 0)
    && CHECK (test_backend_wait_entered (r.d[0].tb, TB_PWRITEV, 1));
  /* ... while 'b' arrives and is queued behind it. */
  ok = ok && CHECK (test_write_fill (f.q, NULL, 'b', 4 * KiB, MiB, 0) == 0);
  test_backend_release (r.d[0].tb, TB_PWRITEV);
  ok = ok && CHECK (test_thread_wait (&t) && t.result == 0);
  if (ok) {
    s = test_stats (f.q);
    ok = CHECK (s.backend_flushes == 1) && CHECK (s.queued_requests == 1)
      && CHECK (s.plugs == 2)
      && CHECK (test_backend_count (r.d[0].tb, TB_PWRITEV) == 1);
  }
  test_thread_join (&t);
  ok = ok && CHECK (queue_flush (f.q, NULL) == 0)
    && CHECK (test_backend_holds (r.d[0].tb, 'b', 4 * KiB, MiB));
  test_rig_stop (&r);
  tap_ok (ok, "a write queued while the FLUSH's thread writes the queue out"
          " is left plugged when the flush is done%s", MODE);
}

/* Unload drains: queue_stop writes everything out. */
static void
test_drain (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct queue_stats s;
  struct test_rig r;
  bool ok;

  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'a', 8 * KiB, 0, 0) == 0);
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'b', 8 * KiB, MiB,
                                     0) == 0);
  ok = ok && CHECK (test_backend_entered (r.d[0].tb, TB_PWRITEV) == 0);
  if (ok) {
    queue_stop (r.d[0].q);
    ok &= CHECK (test_backend_holds (r.d[0].tb, 'a', 8 * KiB, 0));
    ok &= CHECK (test_backend_holds (r.d[0].tb, 'b', 8 * KiB, MiB));
    ok &= CHECK (test_backend_count (r.d[0].tb, TB_FLUSH) == 1);
    s = test_stats (r.d[0].q);
    ok &= CHECK (s.unplugs[UNPLUG_DRAIN] == 1);
    ok &= CHECK (s.queued_requests == 0);
  }
  test_rig_stop (&r);
  tap_ok (ok, "queue_stop drains the queue and flushes the backend%s", MODE);
}

/* ------------------------------------------------------------ merging */

/* The pwritev calls so far, at most max of them. */
static size_t
writes_of (struct test_backend *tb, struct tb_call *calls, size_t max)
{
  size_t n = test_backend_calls (tb, TB_PWRITEV, calls, max);

  return MIN (n, max);
}

static void
print_calls (const struct tb_call *calls, size_t n)
{
  for (size_t i = 0; i < n; i++)
    printf ("# pwritev %zu: offset %" PRIu64 " bytes %" PRIu64
            " iovcnt %d\n", i, calls[i].offset, calls[i].count,
            calls[i].iovcnt);
}

#define SEQ_WRITES 32

/* Sequential adjacent writes go out as a few writes of max-merge each:
 * the pieces they were appended to (queue_stream.c), which end on
 * multiples of max-merge, merged in batches.
 */
static void
test_merge (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct tb_call calls[SEQ_WRITES];
  struct queue_stats s;
  struct test_rig r;
  uint64_t bytes = 0;
  size_t n = 0;
  bool ok;

  cfg.max_merge = 64 * KiB;
  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  for (unsigned i = 0; ok && i < SEQ_WRITES; i++)
    ok = CHECK (test_write_fill (r.d[0].q, NULL, 'a' + i % 26, 4 * KiB,
                                 i * 4 * KiB, 0) == 0);
  ok = ok && CHECK (queue_flush (r.d[0].q, NULL) == 0);
  if (ok) {
    n = writes_of (r.d[0].tb, calls, SEQ_WRITES);
    for (size_t i = 0; i < n; i++) {
      ok &= CHECK (calls[i].count <= cfg.max_merge);
      bytes += calls[i].count;
    }
    ok &= CHECK (bytes == SEQ_WRITES * 4 * KiB);
    ok &= CHECK (n == SEQ_WRITES * 4 * KiB / cfg.max_merge);
    s = test_stats (r.d[0].q);
    ok &= CHECK (s.op[OP_WRITE].requests == SEQ_WRITES);
    ok &= CHECK (s.op[OP_WRITE].backend_ops == n);
    ok &= CHECK (s.op[OP_WRITE].backend_ops < s.op[OP_WRITE].requests);
    ok &= CHECK (s.op[OP_WRITE].merges == SEQ_WRITES - n);
    for (unsigned i = 0; i < SEQ_WRITES; i++)
      ok &= CHECK (test_backend_holds (r.d[0].tb, 'a' + i % 26, 4 * KiB,
                                       i * 4 * KiB));
    if (!ok)
      print_calls (calls, n);
  }
  test_rig_stop (&r);
  tap_ok (ok, "sequential writes merge into pwritev calls of <= max-merge%s",
          MODE);
}

/* unplug-thresh=1 is the unplugged baseline: one request, one call. */
static void
test_thresh_one_never_merges (void)
{
  struct queue_config cfg = test_config (HOUR, 1);
  struct tb_call calls[16];
  struct queue_stats s;
  struct test_rig r;
  size_t n;
  bool ok;

  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  for (unsigned i = 0; ok && i < 8; i++)
    ok = CHECK (test_write_fill (r.d[0].q, NULL, 'a' + i, 4 * KiB,
                                 i * 4 * KiB, 0) == 0);
  ok = ok && CHECK (queue_flush (r.d[0].q, NULL) == 0);
  if (ok) {
    n = writes_of (r.d[0].tb, calls, 16);
    ok &= CHECK (n == 8);
    for (size_t i = 0; i < n; i++)
      ok &= CHECK (calls[i].iovcnt == 1 && calls[i].count == 4 * KiB);
    s = test_stats (r.d[0].q);
    ok &= CHECK (s.op[OP_WRITE].merges == 0);
    ok &= CHECK (s.unplugs[UNPLUG_THRESHOLD] >= 1);
    if (!ok)
      print_calls (calls, n);
  }
  test_rig_stop (&r);
  tap_ok (ok, "unplug-thresh=1 dispatches every write alone, never merges%s",
          MODE);
}

/* Fragments of one request cut apart by newer writes and written out
 * together again count as one request, not as merges: A over 16 KiB,
 * then B inside it, then C inside B go out as one operation of five
 * pieces (A B C B A) carrying three requests.
 */
static void
test_fragments_are_not_merges (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct tb_call calls[4];
  struct queue_stats s;
  struct test_rig r;
  size_t n = 0;
  bool ok;

  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'A', 16 * KiB, 0,
                                     0) == 0);
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'B', 8 * KiB, 4 * KiB,
                                     0) == 0);
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'C', 2 * KiB, 6 * KiB,
                                     0) == 0);
  ok = ok && CHECK (queue_flush (r.d[0].q, NULL) == 0);
  if (ok) {
    n = writes_of (r.d[0].tb, calls, 4);
    ok &= CHECK (n == 1 && calls[0].iovcnt == 5
                 && calls[0].count == 16 * KiB);
    s = test_stats (r.d[0].q);
    ok &= CHECK (s.op[OP_WRITE].requests == 3);
    ok &= CHECK (s.op[OP_WRITE].merges == 2);
    if (!ok)
      print_calls (calls, n);
  }
  test_rig_stop (&r);
  tap_ok (ok, "fragments of one request joined again are not merges%s",
          MODE);
}

/* An elevator with state of its own: deadline's order, plus a count of
 * its dispatches kept in private.
 */
static int counting_inits, counting_exits, counting_fail;
static uint64_t counting_seen;

static int
counting_init (struct elevator_state *e)
{
  counting_inits++;
  if (counting_fail || e->private != NULL)
    return -1;
  e->private = calloc (1, sizeof (uint64_t));
  return e->private ? 0 : -1;
}

static void
counting_exit (struct elevator_state *e)
{
  counting_exits++;
  counting_seen = *(uint64_t *) e->private;
  free (e->private);
}

static struct piece *
counting_first (struct elevator_state *e, uint64_t now_ns)
{
  ++*(uint64_t *) e->private;
  return elevator_deadline.first (e, now_ns);
}

static const struct elevator_ops elevator_counting = {
  .name = "counting", .help = "deadline, counting its dispatches",
  .init = counting_init, .exit = counting_exit,
  .first = counting_first, .next = NULL,
};

static void
test_elevator_private_state (void)
{
  struct elevator_ops ops = elevator_counting;
  struct queue_config cfg = test_config (HOUR, 1000);
  struct test_rig r;
  bool ok;

  ops.next = elevator_deadline.next;
  cfg.elevator = &ops;
  counting_inits = counting_exits = counting_fail = 0;
  counting_seen = 0;
  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  ok = ok && CHECK (counting_inits == 1 && counting_exits == 0);
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'a', 4 * KiB, 0, 0) == 0);
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'b', 4 * KiB, MiB,
                                     0) == 0);
  ok = ok && CHECK (queue_flush (r.d[0].q, NULL) == 0);
  test_rig_stop (&r);
  ok = ok && CHECK (counting_exits == 1 && counting_seen >= 2);
  /* An init that fails: no queue, and no exit for it. */
  counting_fail = 1;
  if (ok) {
    struct backend *b = backend_memory_new (MiB);

    ok = CHECK (b != NULL && queue_new ("failing", b, &cfg) == NULL);
    backend_close (b);          /* a queue that failed did not take it */
  }
  ok = ok && CHECK (counting_inits == 2 && counting_exits == 1);
  tap_ok (ok, "an elevator's init and exit bracket its queue's dispatches"
          " (%" PRIu64 " dispatches counted)%s", counting_seen, MODE);
}

/* backend_io_wait on a backend without FUA of its own: the write, then
 * a flush, in that order; synchronous or asynchronous.
 */
static void
test_io_wait_fua_is_write_then_flush (void)
{
  struct test_backend *tb = test_backend_new (MiB);
  struct backend *b = tb ? test_backend_get (tb) : NULL;
  unsigned char data[4096];
  struct iovec iov = { .iov_base = data, .iov_len = sizeof data };
  struct tb_call calls[4];
  size_t n = 0;
  bool ok;

  memset (data, 'f', sizeof data);
  ok = CHECK (b != NULL);
  if (ok && async_mode)
    ok = CHECK (test_backend_set_async (tb, 2) == 0
                && b->ops->start (b) == 0);
  ok = ok && CHECK (!b->can_fua);
  ok = ok && CHECK (backend_pwritev (b, &iov, 1, 8192, true) == 0);
  if (ok)
    n = test_backend_calls (tb, TB_OPS, calls, 4);
  ok = ok && CHECK (n == 2 && calls[0].op == TB_PWRITEV
                    && calls[0].offset == 8192 && calls[1].op == TB_FLUSH);
  ok = ok && CHECK (test_backend_holds (tb, 'f', sizeof data, 8192));
  if (b)
    backend_close (b);
  tap_ok (ok, "FUA through backend_io_wait without backend FUA: the write,"
          " then a flush%s", MODE);
}

/* Reads skip the queue lock when pieces_present is 0, so it must count
 * every queued and in-flight piece: through splits, supersedes and
 * write-out, and back to 0 once the queue has drained.  White box.
 */
static void
test_pieces_present_counted (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct test_rig r;
  struct queue *q;
  uint64_t present = 0, queued = 0;
  bool ok;

  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  q = r.d[0].q;
  ok = ok && CHECK (test_write_fill (q, NULL, 'A', 16 * KiB, 0, 0) == 0);
  ok = ok && CHECK (test_write_fill (q, NULL, 'B', 4 * KiB, 4 * KiB, 0) == 0);
  ok = ok && CHECK (test_write_fill (q, NULL, 'C', 16 * KiB, MiB, 0) == 0);
  ok = ok && CHECK (test_write_fill (q, NULL, 'D', 16 * KiB, MiB, 0) == 0);
  if (ok) {
    lock_acquire (&q->lock);
    present = atomic_load (&q->pieces_present);
    queued = q->nr_queued;
    lock_release (&q->lock);
    /* A split in two around B, B, and D (C superseded). */
    ok = CHECK (queued == 4 && present == queued);
  }
  ok = ok && CHECK (queue_flush (q, NULL) == 0);
  ok = ok && CHECK (test_queue_reads_as (q, 'B', 4 * KiB, 4 * KiB));
  if (ok)
    ok = CHECK ((present = atomic_load (&q->pieces_present)) == 0);
  test_rig_stop (&r);
  tap_ok (ok, "pieces_present counts queued and in-flight pieces, 0 once"
          " drained (%" PRIu64 ")%s", present, MODE);
}

/* Four scattered writes, flushed: the offsets in backend order. */
static bool
dispatch_order (const struct elevator_ops *elevator, const uint64_t *want)
{
  const uint64_t arrival[] = { 3, 1, 2, 0 };
  struct queue_config cfg = test_config (HOUR, 1000);
  struct tb_call calls[4];
  struct test_rig r;
  bool ok;

  cfg.elevator = elevator;
  /* Sync only: asynchronous workers may start in any order. */
  ok = CHECK (test_rig_one (&r, &cfg, DISK_SIZE, 0, 0));
  for (unsigned i = 0; ok && i < 4; i++)
    ok = CHECK (test_write_fill (r.d[0].q, NULL, 'a', 4 * KiB,
                                 arrival[i] * 64 * KiB, 0) == 0);
  ok = ok && CHECK (queue_flush (r.d[0].q, NULL) == 0);
  ok = ok && CHECK (writes_of (r.d[0].tb, calls, 4) == 4);
  for (unsigned i = 0; ok && i < 4; i++)
    ok &= CHECK (calls[i].offset == want[i] * 64 * KiB);
  if (!ok)
    print_calls (calls, 4);
  test_rig_stop (&r);
  return ok;
}

static void
test_noop_order (void)
{
  const uint64_t want[] = { 3, 1, 2, 0 };

  tap_ok (dispatch_order (&elevator_noop, want),
          "noop dispatches in arrival order");
}

static void
test_deadline_order (void)
{
  const uint64_t want[] = { 0, 1, 2, 3 };

  tap_ok (dispatch_order (&elevator_deadline, want),
          "deadline dispatches in ascending offset order");
}

/* ------------------------------------------------------------ ordering */

static struct flat flat;

/* Overlapping writes: the newest byte wins, before and after dispatch,
 * through the queue and on the backend itself.
 */
static bool
newest_wins (const struct elevator_ops *elevator)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct test_rig r;
  bool ok;

  cfg.elevator = elevator;
  memset (&flat, 0, sizeof flat);
  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  ok = ok && CHECK (flat_write (&flat, r.d[0].q, 'A', 8 * KiB, 8 * KiB) == 0);
  ok = ok && CHECK (flat_write (&flat, r.d[0].q, 'B', 12 * KiB, 0) == 0);
  ok = ok && CHECK (flat_write (&flat, r.d[0].q, 'C', 2 * KiB, 4 * KiB) == 0);
  ok = ok && CHECK (flat_write (&flat, r.d[0].q, 'D', 6 * KiB,
                                14 * KiB) == 0);
  ok = ok && CHECK (flat_write (&flat, r.d[0].q, 'E', 1, 13 * KiB) == 0);
  ok = ok && CHECK (flat_matches (&flat, &r.d[0], false));
  ok = ok && CHECK (queue_flush (r.d[0].q, NULL) == 0);
  ok = ok && CHECK (flat_matches (&flat, &r.d[0], true));
  test_rig_stop (&r);
  return ok;
}

static void
test_newest_wins (void)
{
  tap_ok (newest_wins (&elevator_deadline),
          "deadline: overlapping writes, the newest byte wins%s", MODE);
  tap_ok (newest_wins (&elevator_noop),
          "noop: overlapping writes, the newest byte wins%s", MODE);
}

/* Zeroes and trims over queued writes, writes over queued zeroes. */
static void
test_zero_trim_ordering (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct test_rig r;
  bool ok;

  memset (&flat, 0, sizeof flat);
  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  ok = ok && CHECK (flat_write (&flat, r.d[0].q, 'A', 64 * KiB, 0) == 0);
  ok = ok && CHECK (flat_zero (&flat, r.d[0].q, 16 * KiB, 16 * KiB, 0) == 0);
  ok = ok && CHECK (flat_trim (&flat, r.d[0].q, 16 * KiB, 48 * KiB) == 0);
  ok = ok && CHECK (flat_zero (&flat, r.d[0].q, 64 * KiB, 64 * KiB,
                               REQ_MAY_TRIM) == 0);
  ok = ok && CHECK (flat_write (&flat, r.d[0].q, 'E', 4 * KiB,
                                72 * KiB) == 0);
  ok = ok && CHECK (flat_write (&flat, r.d[0].q, 'F', 8 * KiB,
                                124 * KiB) == 0);
  ok = ok && CHECK (flat_zero (&flat, r.d[0].q, 1, 125 * KiB, 0) == 0);
  ok = ok && CHECK (flat_matches (&flat, &r.d[0], false));
  ok = ok && CHECK (queue_flush (r.d[0].q, NULL) == 0);
  ok = ok && CHECK (flat_matches (&flat, &r.d[0], true));
  test_rig_stop (&r);
  tap_ok (ok, "zero and trim over queued writes, writes over queued zeroes%s",
          MODE);
}

/* A read sees a write whose backend write is still in flight (held in
 * the backend), and neither the read nor another write waits for it:
 * the queue lock is not held across backend I/O.
 */
static void
test_read_while_in_flight (void)
{
  struct queue_config cfg = test_config (1 * MS, 1000);
  struct test_thread t1 = TEST_THREAD_INIT, t2 = TEST_THREAD_INIT;
  struct test_thread t3 = TEST_THREAD_INIT;
  struct read_job rj;
  struct test_write_job wj;
  unsigned char buf[8 * KiB];
  int result = -1;
  struct test_rig r;
  bool ok;

  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  if (ok)
    test_backend_block (r.d[0].tb, TB_PWRITEV);
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'A', 8 * KiB, 0, 0) == 0);
  ok = ok && CHECK (test_backend_wait_entered (r.d[0].tb, TB_PWRITEV, 1));
  ok = ok && CHECK (test_backend_holds (r.d[0].tb, 0, 8 * KiB, 0));

  rj = (struct read_job) { r.d[0].q, buf, sizeof buf, 0 };
  ok = ok && CHECK (run_bounded (&t1, read_job_run, &rj, &result)
                    && result == 0);
  ok = ok && CHECK (test_buffer_is (buf, 'A', sizeof buf, 0, "in flight"));

  wj = (struct test_write_job) { r.d[0].q, 'B', 4 * KiB, 0, 0 };
  ok = ok && CHECK (run_bounded (&t2, test_write_job_run, &wj, &result)
                    && result == 0);
  ok = ok && CHECK (run_bounded (&t3, read_job_run, &rj, &result)
                    && result == 0);
  ok = ok && CHECK (test_buffer_is (buf, 'B', 4 * KiB, 0, "newer")
                    && test_buffer_is (buf + 4 * KiB, 'A', 4 * KiB, 4 * KiB,
                                       "in flight"));
  ok = ok && CHECK (test_backend_entered (r.d[0].tb, TB_PWRITEV) == 1);

  test_backend_release (r.d[0].tb, TB_PWRITEV);
  ok = ok && CHECK (queue_flush (r.d[0].q, NULL) == 0);
  ok = ok && CHECK (test_backend_holds (r.d[0].tb, 'B', 4 * KiB, 0)
                    && test_backend_holds (r.d[0].tb, 'A', 4 * KiB, 4 * KiB));
  test_thread_join (&t1);
  test_thread_join (&t2);
  test_thread_join (&t3);
  test_rig_stop (&r);
  tap_ok (ok, "reads and writes do not wait for an in-flight backend write%s",
          MODE);
}

/* Extents see queued writes as data and queued zeroes as zero. */
static void
test_extents_over_queue (void)
{
  const uint32_t HZ = EXTENT_HOLE | EXTENT_ZERO;
  const struct { uint64_t at; uint32_t type; } want[] = {
    { 0, HZ }, { 64 * KiB, 0 }, { 95 * KiB, 0 }, { 96 * KiB, EXTENT_ZERO },
    { 100 * KiB, 0 }, { 110 * KiB, 0 }, { 127 * KiB, 0 }, { 128 * KiB, HZ },
    { 192 * KiB, EXTENT_ZERO }, { 199 * KiB, EXTENT_ZERO }, { 200 * KiB, HZ },
  };
  struct queue_config cfg = test_config (HOUR, 1000);
  struct extent_list l;
  struct test_rig r;
  bool ok;

  extent_list_init (&l);
  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'a', 64 * KiB, 64 * KiB,
                                     0) == 0);
  ok = ok && CHECK (queue_zero (r.d[0].q, NULL, 4 * KiB, 96 * KiB, 0) == 0);
  ok = ok && CHECK (queue_trim (r.d[0].q, NULL, 2 * KiB, 110 * KiB, 0) == 0);
  ok = ok && CHECK (queue_zero (r.d[0].q, NULL, 8 * KiB, 192 * KiB, 0) == 0);
  ok = ok && CHECK (queue_extents (r.d[0].q, 256 * KiB, 0, &l) == 0);
  ok = ok && CHECK (test_extents_contiguous (&l, 0, 256 * KiB));
  for (size_t i = 0; ok && i < sizeof want / sizeof want[0]; i++)
    if (l.v[l.len - 1].offset + l.v[l.len - 1].length > want[i].at)
      ok &= CHECK (test_extent_type_at (&l, want[i].at)
                   == want[i].type);
  if (!ok)
    test_print_extents (&l);
  extent_list_free (&l);
  test_rig_stop (&r);
  tap_ok (ok, "extents over queued writes (data) and zeroes (zero)%s", MODE);
}

/* ------------------------------------------------------------ errors */

/* "-1 (Input/output error)" or "0", for a case's description. */
static const char *
outcome (int r, int err)
{
  static char buf[4][64];
  static unsigned next;
  char *b = buf[next++ % 4];

  if (r == 0)
    return "0";
  snprintf (b, sizeof buf[0], "%d (%s)", r, strerror (err));
  return b;
}

/* A latched error (here a failed backend flush, whose page cache may
 * have dropped what it could not write) is reported once per session,
 * on its next FLUSH, counted from each request's arrival (error_mark).
 */
static void
test_error_latching (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct session *a = NULL, *idle = NULL, *writer = NULL, *late = NULL;
  struct test_rig r;
  int r1 = 0, e1 = 0, r2 = -1;
  bool ok;

  /* Sessions size their cursors by the queues that exist: queue first. */
  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  ok = ok && CHECK ((a = session_new ()) && (idle = session_new ())
                    && (writer = session_new ()));
  ok = ok && CHECK (test_write_fill (r.d[0].q, writer, 'w', 4 * KiB, MiB,
                                     0) == 0);
  ok = ok && CHECK (queue_flush (r.d[0].q, writer) == 0);

  ok = ok && CHECK (test_write_fill (r.d[0].q, a, 'a', 4 * KiB, 0, 0) == 0);
  if (ok) {
    test_backend_fail (r.d[0].tb, TB_FLUSH, 1, EIO);
    r1 = queue_flush (r.d[0].q, a);
    e1 = errno;
    r2 = queue_flush (r.d[0].q, a);
    ok = CHECK (test_stats (r.d[0].q).latched_errors == 1);
  }
  tap_ok (ok && r1 == -1 && e1 == EIO && r2 == 0,
          "latched error: the failed FLUSH gets EIO, the one after 0"
          " (got %s, then %d)%s", outcome (r1, e1), r2, MODE);

  if (ok) {
    r1 = queue_flush (r.d[0].q, writer);
    e1 = errno;
    r2 = queue_flush (r.d[0].q, writer);
  }
  tap_ok (ok && r1 == -1 && e1 == EIO && r2 == 0,
          "latched error: another session that wrote before it gets EIO once"
          " (got %s, then %d)%s", outcome (r1, e1), r2, MODE);

  if (ok) {
    r1 = queue_flush (r.d[0].q, idle);
    e1 = errno;
    r2 = queue_flush (r.d[0].q, idle);
  }
  tap_ok (ok && r1 == -1 && e1 == EIO && r2 == 0,
          "latched error: a session opened before it (no I/O yet) gets EIO"
          " once (got %s, then %d)%s", outcome (r1, e1), r2, MODE);

  if (ok) {
    ok = CHECK ((late = session_new ()) != NULL);
    r1 = ok ? queue_flush (r.d[0].q, late) : -1;
  }
  tap_ok (ok && r1 == 0,
          "latched error: a session opened after it was seen gets nothing%s",
          MODE);

  test_rig_stop (&r);
  session_free (a);
  session_free (idle);
  session_free (writer);
  session_free (late);
}

struct session_flush_job {
  struct queue *q;
  struct session *s;
};

static int
session_flush_run (void *arg)
{
  struct session_flush_job *j = arg;

  return queue_flush (j->q, j->s) == 0 ? 0 : errno;
}

/* Two FLUSHes of one session in flight at once: the first waits on a
 * backend flush that fails, the second, arrived meanwhile, on the next
 * one, which succeeds.  The second arrived before the failure was
 * reported, so what it covers includes the lost data: it must fail too,
 * though the first one told the session already.
 */
static void
test_error_concurrent_flushes (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct test_thread t1 = TEST_THREAD_INIT, t2 = TEST_THREAD_INIT;
  struct session_flush_job j;
  struct test_rig r;
  bool ok;

  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  j = (struct session_flush_job) { .q = r.d[0].q, .s = session_new () };
  ok = ok && CHECK (j.s != NULL);
  ok = ok && CHECK (test_write_fill (j.q, j.s, 'a', 4 * KiB, 0, 0) == 0);
  if (ok) {
    test_backend_block (r.d[0].tb, TB_FLUSH);
    test_backend_fail (r.d[0].tb, TB_FLUSH, 1, EIO);
  }
  ok = ok && CHECK (test_thread_start (&t1, session_flush_run, &j) == 0);
  ok = ok && CHECK (test_backend_wait_entered (r.d[0].tb, TB_FLUSH, 1));
  ok = ok && CHECK (test_thread_start (&t2, session_flush_run, &j) == 0);
  ok = ok && CHECK (TEST_WAIT_FOR (test_stats (j.q).flushes == 2));
  test_backend_release (r.d[0].tb, TB_FLUSH);
  ok = ok && CHECK (test_thread_wait (&t1)) && CHECK (t1.result == EIO);
  ok = ok && CHECK (test_thread_wait (&t2)) && CHECK (t2.result == EIO);
  ok = ok && CHECK (test_backend_count (r.d[0].tb, TB_FLUSH) == 2);
  ok = ok && CHECK (queue_flush (j.q, j.s) == 0);
  test_backend_release_all (r.d[0].tb);
  test_thread_join (&t1);
  test_thread_join (&t2);
  test_rig_stop (&r);
  session_free (j.s);
  tap_ok (ok, "two FLUSHes of one session in flight at once around a failed"
          " backend flush both fail; the next succeeds%s", MODE);
}

/* ack=dispatched: the failing write itself returns the error. */
static void
test_error_ack_dispatched (void)
{
  struct queue_config cfg = test_config (1 * MS, 1000);
  struct session *a = NULL;
  struct test_rig r;
  int r1 = 0, e1 = 0;
  bool ok;

  cfg.ack = ACK_DISPATCHED;
  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  ok = ok && CHECK ((a = session_new ()) != NULL);
  if (ok) {
    test_backend_fail (r.d[0].tb, TB_PWRITEV, 1, EIO);
    r1 = test_write_fill (r.d[0].q, a, 'a', 4 * KiB, 0, 0);
    e1 = errno;
    ok = CHECK (r1 == -1 && e1 == EIO);
  }
  /* The next write is answered once it really is on the backend. */
  ok = ok && CHECK (test_write_fill (r.d[0].q, a, 'b', 4 * KiB, 0, 0) == 0);
  ok = ok && CHECK (test_backend_holds (r.d[0].tb, 'b', 4 * KiB, 0));
  test_rig_stop (&r);
  session_free (a);
  tap_ok (ok, "ack=dispatched: the failing write returns the error itself%s",
          MODE);
}

/* ack=dispatched: a lone writer is a process asleep on its page; its
 * write must not sit out a long unplug-delay when nothing follows it.
 */
static void
test_lone_dispatched_writer (void)
{
  struct queue_config cfg = test_config (60000 * MS, 1000);
  struct session *a = NULL;
  struct test_rig r;
  uint64_t start, took = 0;
  bool ok;

  cfg.ack = ACK_DISPATCHED;
  cfg.bypass = false;           /* through the queue, not around it */
  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  ok = ok && CHECK ((a = session_new ()) != NULL);
  if (ok) {
    start = monotonic_ns ();
    ok = CHECK (test_write_fill (r.d[0].q, a, 'w', 4 * KiB, 0, 0) == 0);
    took = monotonic_ns () - start;
    ok = ok && CHECK (took < 5000 * MS);
    ok = ok && CHECK (test_backend_holds (r.d[0].tb, 'w', 4 * KiB, 0));
    /* Its own arrival sent it out, as a FUA does: no timer. */
    ok = ok && CHECK (test_stats (r.d[0].q).unplugs[UNPLUG_TIMER] == 0);
    ok = ok && CHECK (test_stats (r.d[0].q).unplugs[UNPLUG_SYNC] == 1);
  }
  test_rig_stop (&r);
  session_free (a);
  tap_ok (ok, "ack=dispatched: a lone write unplugs the queue itself"
          " (answered in %" PRIu64 " ms, unplug-delay=60s)%s", took / MS,
          MODE);
}

/* An ack=dispatched write that arrives while the queue is busy must not
 * be plugged again behind the whole unplug-delay once the backend is
 * free: its writer is waiting for it.
 */
static void
test_dispatched_writer_behind_busy_backend (void)
{
  struct queue_config cfg = test_config (60000 * MS, 1000);
  struct test_write_job w0 = { .c = 'a', .count = 4 * KiB, .offset = 0 };
  struct test_write_job w1 = { .c = 'b', .count = 4 * KiB, .offset = 64 * KiB };
  struct test_thread t0 = TEST_THREAD_INIT, t1 = TEST_THREAD_INIT;
  struct test_rig r;
  bool ok;

  cfg.ack = ACK_DISPATCHED;
  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  w0.q = w1.q = r.d[0].q;
  if (ok)
    test_backend_block (r.d[0].tb, TB_PWRITEV);
  ok = ok && CHECK (test_thread_start (&t0, test_write_job_run, &w0) == 0);
  ok = ok && CHECK (test_backend_wait_entered (r.d[0].tb, TB_PWRITEV, 1));
  ok = ok && CHECK (test_thread_start (&t1, test_write_job_run, &w1) == 0);
  ok = ok && CHECK (TEST_WAIT_FOR (test_stats (w1.q).op[OP_WRITE].requests
                                   == 2));
  test_backend_release (r.d[0].tb, TB_PWRITEV);
  ok = ok && CHECK (test_thread_wait (&t0) && t0.result == 0);
  ok = ok && CHECK (test_thread_wait (&t1) && t1.result == 0);
  ok = ok && CHECK (test_stats (w1.q).unplugs[UNPLUG_TIMER] == 0);
  test_backend_release_all (r.d[0].tb);
  test_thread_join (&t0);
  test_thread_join (&t1);
  test_rig_stop (&r);
  tap_ok (ok, "ack=dispatched: a write queued behind a busy backend goes"
          " out when it is free, with no timer%s", MODE);
}

/* FUA reports a latched error, like FLUSH. */
static void
test_error_fua (void)
{
  struct queue_config cfg = test_config (1 * MS, 1000);
  struct session *a = NULL, *b = NULL;
  struct test_rig r;
  int r1 = 0, e1 = 0;
  bool ok;

  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  ok = ok && CHECK ((a = session_new ()) && (b = session_new ()));
  ok = ok && CHECK (test_write_fill (r.d[0].q, a, 'a', 4 * KiB, 0, 0) == 0);
  if (ok) {
    test_backend_fail (r.d[0].tb, TB_FLUSH, 1, EIO);
    ok = CHECK (queue_flush (r.d[0].q, a) == -1 && errno == EIO);
  }
  if (ok) {
    r1 = test_write_fill (r.d[0].q, b, 'b', 4 * KiB, MiB, REQ_FUA);
    e1 = errno;
    ok = CHECK (r1 == -1 && e1 == EIO);
  }
  ok = ok && CHECK (test_write_fill (r.d[0].q, b, 'c', 4 * KiB, MiB,
                                     REQ_FUA) == 0);
  ok = ok && CHECK (test_backend_holds (r.d[0].tb, 'c', 4 * KiB, MiB));
  test_rig_stop (&r);
  session_free (a);
  session_free (b);
  tap_ok (ok, "FUA reports a latched error once%s", MODE);
}

/* A failed backend flush fails the FLUSH that waited for it. */
static void
test_flush_failure (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct test_rig r;
  int r1 = 0, e1 = 0;
  bool ok;

  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'a', 4 * KiB, 0, 0) == 0);
  if (ok) {
    test_backend_fail (r.d[0].tb, TB_FLUSH, 1, EIO);
    r1 = queue_flush (r.d[0].q, NULL);
    e1 = errno;
    ok = CHECK (r1 == -1 && e1 == EIO);
  }
  ok = ok && CHECK (queue_flush (r.d[0].q, NULL) == 0);
  test_rig_stop (&r);
  tap_ok (ok, "a failed backend flush fails the FLUSH waiting on it%s", MODE);
}

/* A failed backend flush is a write-back error of every answered write
 * it carried (fdatasync reports a lost page once): every other session
 * open at the time, with writes (b) or without (c), hears of it on its
 * next FLUSH or FUA, and the session it already failed is not told
 * twice.  test_flush_failure covers the same without a session.
 */
static void
test_flush_failure_reaches_other_sessions (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct session *a = NULL, *b = NULL, *c = NULL;
  struct test_rig r;
  int ra = 0, ea = 0, rb = 0, eb = 0, rc = 0, ec = 0, ra2 = -1, rb2 = -1;
  bool ok;

  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  ok = ok && CHECK ((a = session_new ()) && (b = session_new ())
                    && (c = session_new ()));
  ok = ok && CHECK (test_write_fill (r.d[0].q, a, 'a', 4 * KiB, 0, 0) == 0);
  ok = ok && CHECK (test_write_fill (r.d[0].q, b, 'b', 4 * KiB, MiB, 0) == 0);
  if (ok) {
    test_backend_fail (r.d[0].tb, TB_FLUSH, 1, EIO);
    ra = queue_flush (r.d[0].q, a);
    ea = errno;
    ra2 = queue_flush (r.d[0].q, a);
    rb = queue_flush (r.d[0].q, b);
    eb = errno;
    rb2 = queue_flush (r.d[0].q, b);
    rc = test_write_fill (r.d[0].q, c, 'c', 4 * KiB, 2 * MiB, REQ_FUA);
    ec = errno;
  }
  tap_ok (ok && ra == -1 && ea == EIO && ra2 == 0,
          "failed backend flush: its FLUSH gets EIO, the next one 0"
          " (got %s, then %d)%s", outcome (ra, ea), ra2, MODE);
  tap_ok (ok && rb == -1 && eb == EIO && rb2 == 0,
          "failed backend flush: another session's next FLUSH gets EIO once"
          " (got %s, then %d)%s", outcome (rb, eb), rb2, MODE);
  tap_ok (ok && rc == -1 && ec == EIO,
          "failed backend flush: a session open then hears of it on its"
          " next FUA (got %s)%s", outcome (rc, ec), MODE);
  test_rig_stop (&r);
  session_free (a);
  session_free (b);
  session_free (c);
}

/* malloc is wrapped in this program (Makefile.am: --wrap=malloc) so a
 * case can make it fail in every thread, as when the machine is out of
 * memory: the rig's dispatch thread must not rescue the request thread.
 */
void *__real_malloc (size_t);
void *__wrap_malloc (size_t);
static atomic_bool malloc_fails;

void *
__wrap_malloc (size_t size)
{
  if (malloc_fails) {
    errno = ENOMEM;
    return NULL;
  }
  return __real_malloc (size);
}

static int
flush_without_memory_run (void *arg)
{
  int r;

  malloc_fails = true;
  r = flush_job_run (arg);
  malloc_fails = false;
  return r;
}

/* Out of memory while writing the queue out (a batch, a merged write's
 * vector) costs merging, never answered data and never progress: the
 * FLUSH writes everything and succeeds.
 */
static void
test_dispatch_without_memory (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct flush_job f;
  struct test_thread t = TEST_THREAD_INIT;
  struct test_rig r;
  int result = -1;
  bool ok, returned = false;

  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  f = (struct flush_job) { .q = r.d[0].q };
  /* Last first: each its own piece, none appended to another. */
  for (int i = 7; ok && i >= 0; i--)
    ok = CHECK (test_write_fill (r.d[0].q, NULL, 'a' + i, 4 * KiB,
                                  i * 4 * KiB, 0) == 0);
  if (ok) {
    returned = run_bounded (&t, flush_without_memory_run, &f, &result);
    malloc_fails = false;
    if (!returned)              /* an arrival gets a stalled queue going */
      ok = CHECK (test_write_fill (r.d[0].q, NULL, 'z', 4 * KiB, MiB,
                                    0) == 0);
  }
  test_thread_join (&t);
  for (int i = 0; ok && i < 8; i++)
    ok = CHECK (test_backend_holds (r.d[0].tb, 'a' + i, 4 * KiB,
                                    i * 4 * KiB));
  /* Only a batch's inline vector was left: two writes of four. */
  ok = ok && CHECK (test_backend_count (r.d[0].tb, TB_PWRITEV) == 2);
  test_rig_stop (&r);
  tap_ok (ok && returned && result == 0,
          "out of memory in the dispatch path: a FLUSH still writes 8"
          " adjacent writes out, unmerged past 4, and succeeds (%s, %d)%s",
          returned ? "returned" : "stalled until the next arrival", result,
          MODE);
}

/* A write-out that fails for want of memory is tried again: memory
 * comes back, and the data was answered.  Only a shortage that outlasts
 * retry_ns is latched, as any other write-back error.
 */
static void
test_writeback_retried_without_memory (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct session *a = NULL;
  struct queue_stats s;
  struct test_rig r;
  int r1 = -1, e1 = 0;
  bool ok;

  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  ok = ok && CHECK ((a = session_new ()) != NULL);
  ok = ok && write_failing_writeout (&r, a, 3, ENOMEM);
  if (ok) {
    r1 = queue_flush (r.d[0].q, a);
    e1 = errno;
    s = test_stats (r.d[0].q);
    ok = CHECK (test_backend_holds (r.d[0].tb, 'a', 4 * KiB, 0));
    ok &= CHECK (s.latched_errors == 0 && s.op[OP_WRITE].errors == 0);
    ok &= CHECK (s.writeback_retries == 3);
    ok &= CHECK (test_backend_count (r.d[0].tb, TB_PWRITEV) == 4);
  }
  test_rig_stop (&r);
  session_free (a);
  tap_ok (ok && r1 == 0,
          "out of memory in write-out, 3 times: retried, written, the FLUSH"
          " succeeds and nothing is latched (got %s)%s", outcome (r1, e1),
          MODE);
}

/* A shortage that outlasts retry_ns fails the write-out like any other
 * error: the answered write is kept (queue_failing.c), the FLUSH gets
 * ENOMEM while it fails, and once memory is back the next FLUSH tries it
 * again and succeeds.  Nothing is lost, so nothing is latched.
 */
static void
test_writeback_memory_shortage_kept (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct session *a = NULL;
  struct test_rig r;
  int r1 = 0, e1 = 0, r2 = -1;
  bool ok;

  cfg.retry_ns = 50 * MS;
  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  ok = ok && CHECK ((a = session_new ()) != NULL);
  ok = ok && write_failing_writeout (&r, a, 1000000, ENOMEM);
  if (ok) {
    r1 = queue_flush (r.d[0].q, a);
    e1 = errno;
    test_backend_fail (r.d[0].tb, TB_PWRITEV, 0, 0);
    r2 = queue_flush (r.d[0].q, a);
    ok = CHECK (test_stats (r.d[0].q).latched_errors == 0);
    ok &= CHECK (test_stats (r.d[0].q).writeback_retries >= 2);
    ok &= CHECK (test_backend_holds (r.d[0].tb, 'a', 4 * KiB, 0));
  }
  test_rig_stop (&r);
  session_free (a);
  tap_ok (ok && r1 == -1 && e1 == ENOMEM && r2 == 0,
          "out of memory in write-out past retry_ns: kept, the FLUSH gets"
          " ENOMEM, the next one writes it and succeeds (got %s, then %d)%s",
          outcome (r1, e1), r2, MODE);
}

/* dispatch_time is each backend operation's own duration, even when one
 * hold of the lock sends out several: a fast write followed by one held
 * for 100 ms is not counted as two slow ones.
 */
static void
test_dispatch_time_per_operation (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct test_thread t = TEST_THREAD_INIT;
  struct flush_job f;
  struct latency_histogram h = { 0 };
  struct test_rig r;
  uint64_t held;
  bool ok;

  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  f = (struct flush_job) { .q = r.d[0].q };
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'a', 4 * KiB, 0, 0) == 0);
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'b', 4 * KiB, MiB,
                                     0) == 0);
  if (ok)
    test_backend_block (r.d[0].tb, TB_PWRITEV);
  ok = ok && CHECK (test_thread_start (&t, flush_job_run, &f) == 0);
  ok = ok && CHECK (test_backend_wait_entered (r.d[0].tb, TB_PWRITEV, 1));
  if (ok)
    test_backend_step (r.d[0].tb, TB_PWRITEV, 1);
  ok = ok && CHECK (test_backend_wait_entered (r.d[0].tb, TB_PWRITEV, 2));
  held = monotonic_ns ();
  while (ok && monotonic_ns () - held < 100 * MS)
    test_poll_step ();          /* the second write takes 100 ms */
  test_backend_release_all (r.d[0].tb);
  ok = ok && CHECK (test_thread_wait (&t) && t.result == 0);
  test_thread_join (&t);
  if (ok) {
    h = test_stats (r.d[0].q).dispatch_time;
    ok = CHECK (h.count == 2);
  }
  test_rig_stop (&r);
  tap_ok (ok && h.total_us >= 100000 && h.total_us < 150000,
          "dispatch time: a fast write and one held 100 ms add up to"
          " %" PRIu64 " ms, not twice 100%s", h.total_us / 1000, MODE);
}

/* ------------------------------------------------------------ refusals */

static void
test_fast_zero_unsupported (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct queue_stats s;
  struct test_rig r;
  int r1 = 0, e1 = 0;
  bool ok;

  memset (&r, 0, sizeof r);
  ok = CHECK (test_rig_backend (&r, DISK_SIZE) != NULL);
  if (ok)
    test_backend_get (r.d[0].tb)->can_fast_zero = false;
  ok = ok && CHECK (test_rig_start (&r, &cfg));
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'a', 64 * KiB, 0,
                                     0) == 0);
  if (ok) {
    r1 = queue_zero (r.d[0].q, NULL, 64 * KiB, 0, REQ_FAST_ZERO);
    e1 = errno;
    ok = CHECK (r1 == -1 && e1 == ENOTSUP);
    s = test_stats (r.d[0].q);
    ok &= CHECK (s.op[OP_ZERO].requests == 0 && s.queued_requests == 1);
  }
  ok = ok && CHECK (test_queue_reads_as (r.d[0].q, 'a', 64 * KiB, 0));
  ok = ok && CHECK (queue_flush (r.d[0].q, NULL) == 0);
  ok = ok && CHECK (test_backend_count (r.d[0].tb, TB_ZERO) == 0);
  ok = ok && CHECK (test_backend_holds (r.d[0].tb, 'a', 64 * KiB, 0));
  /* An ordinary zero still works there. */
  ok = ok && CHECK (queue_zero (r.d[0].q, NULL, 64 * KiB, 0, 0) == 0);
  ok = ok && CHECK (test_queue_reads_as (r.d[0].q, 0, 64 * KiB, 0));
  test_rig_stop (&r);
  tap_ok (ok, "FAST_ZERO without can_fast_zero: ENOTSUP, nothing changes");
}

/* How many of this process's threads are named `name` (/proc). */
static int
threads_named (const char *name)
{
  DIR *dir = opendir ("/proc/self/task");
  struct dirent *e;
  int n = 0;

  if (dir == NULL)
    return -1;
  while ((e = readdir (dir)) != NULL) {
    char path[300], comm[32] = "";
    FILE *fp;

    if (e->d_name[0] == '.')
      continue;
    snprintf (path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    if ((fp = fopen (path, "r")) == NULL)
      continue;                 /* the thread has just ended */
    if (fgets (comm, sizeof comm, fp))
      comm[strcspn (comm, "\n")] = '\0';
    fclose (fp);
    n += strcmp (comm, name) == 0;
  }
  closedir (dir);
  return n;
}

/* An operator looking at top -H or perf sees which disk a dispatch
 * thread serves, and which thread runs the unplug timers.
 */
static void
test_engine_threads_named (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct test_rig r;
  bool ok;

  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  ok = ok && CHECK (threads_named ("pq-d:disk0") == 1);
  ok = ok && CHECK (threads_named ("pq-unplug") == 1);
  test_rig_stop (&r);
  tap_ok (ok, "the dispatch thread is named for its disk, the timer"
          " thread for its job");
}

static void
test_out_of_range (void)
{
  const uint64_t size = MiB;
  struct queue_config cfg = test_config (HOUR, 1000);
  unsigned char buf[8 * KiB];
  struct extent_list l;
  struct queue_stats s;
  struct queue *q;
  struct test_rig r;
  bool ok;

  extent_list_init (&l);
  memset (buf, 'x', sizeof buf);
  ok = CHECK (rig_one (&r, &cfg, size));
  q = r.d[0].q;
  if (ok) {
    ok &= CHECK (queue_pwrite (q, NULL, buf, 8 * KiB, size - 4 * KiB, 0)
                 == -1);
    ok &= CHECK (queue_pwrite (q, NULL, buf, 1, size, 0) == -1);
    ok &= CHECK (queue_pwrite (q, NULL, buf, 1, UINT64_MAX, 0) == -1);
    ok &= CHECK (queue_zero (q, NULL, 8 * KiB, size - 4 * KiB, 0) == -1);
    ok &= CHECK (queue_zero (q, NULL, UINT64_MAX, 1, 0) == -1);
    ok &= CHECK (queue_trim (q, NULL, 8 * KiB, size - 4 * KiB, 0) == -1);
    ok &= CHECK (queue_pread (q, buf, 8 * KiB, size - 4 * KiB) == -1);
    ok &= CHECK (queue_extents (q, 8 * KiB, size, &l) == -1);
    ok &= CHECK (queue_cache (q, 8 * KiB, size - 4 * KiB) == -1);
    /* The last byte itself is fine. */
    ok &= CHECK (queue_pwrite (q, NULL, buf, 1, size - 1, 0) == 0);
    s = test_stats (q);
    ok &= CHECK (s.op[OP_WRITE].requests == 1 && s.op[OP_ZERO].requests == 0
                 && s.op[OP_TRIM].requests == 0);
    ok &= CHECK (queue_flush (q, NULL) == 0);
    ok &= CHECK (test_backend_holds (r.d[0].tb, 0, 4 * KiB,
                                     size - 4 * KiB - 1));
  }
  extent_list_free (&l);
  test_rig_stop (&r);
  tap_ok (ok, "requests past the end of the disk fail and change nothing");
}

/* ------------------------------------------------------------ deadline */

#define STREAM_PIECE 64                 /* small: many steps, little RAM */

struct stream {
  struct queue *q;
  struct test_backend *tb;
  uint64_t base, limit;
  _Atomic bool stop;
  _Atomic uint64_t steps;
};

/* Keeps exactly one piece queued just ahead of the head at every
 * dispatch: it queues piece k while the dispatcher is held in the
 * backend with piece k-1, then lets that call finish and waits until
 * the dispatcher is back in the backend.  Without write-expire, C-LOOK
 * would never turn back to a piece behind the head.
 *
 * Each write runs on a thread of its own: a write that joins a running
 * queue may write the queue out itself when a token is free (between an
 * unplug and the dispatch thread waking), and would then sit at the very
 * gate this thread opens.  A writer's round is at most HELP_ROUND (4)
 * backend calls, one step each, so the writer of piece k is done by the
 * time piece k + STREAM_WRITERS is started.
 */
#define STREAM_WRITERS 8

static int
stream_run (void *arg)
{
  struct stream *st = arg;
  struct test_thread w[STREAM_WRITERS];
  struct test_write_job j[STREAM_WRITERS];
  int r = 0;
  uint64_t k;

  for (unsigned i = 0; i < STREAM_WRITERS; i++)
    w[i] = (struct test_thread) TEST_THREAD_INIT;
  for (k = 1; !atomic_load (&st->stop) && r == 0; k++) {
    unsigned slot = k % STREAM_WRITERS;
    uint64_t offset = st->base + k * STREAM_PIECE;

    if (offset + STREAM_PIECE > st->limit) {
      r = -1;
      break;
    }
    if (!w[slot].joined
        && !(test_thread_wait (&w[slot]) && w[slot].result == 0)) {
      r = -1;
      break;
    }
    j[slot] = (struct test_write_job) { st->q, 's', STREAM_PIECE, offset, 0 };
    /* Queued (pieces 0..k and the old one) before k-1 may finish. */
    if (test_thread_start (&w[slot], test_write_job_run, &j[slot]) == -1
        || !TEST_WAIT_FOR (test_stats (st->q).op[OP_WRITE].requests
                           >= k + 2)) {
      r = -1;
      break;
    }
    test_backend_step (st->tb, TB_PWRITEV, 1);
    if (!test_backend_wait_entered (st->tb, TB_PWRITEV, k + 1))
      r = -1;
    else
      atomic_store (&st->steps, k);
  }
  /* stream_stop opens the gate before it waits for this thread. */
  for (unsigned i = 0; i < STREAM_WRITERS; i++) {
    if (!w[i].joined && !(test_thread_wait (&w[i]) && w[i].result == 0))
      r = -1;
    test_thread_join (&w[i]);
  }
  return r;
}

/* A stream running on its own thread while an old piece ('p', 4 KiB at
 * offset 0) waits behind the head.
 */
struct stream_rig {
  struct test_rig r;
  struct stream st;
  struct test_thread t;
  uint64_t old_queued_ns;       /* just before the old piece was queued */
};

static bool
stream_start (struct stream_rig *sr, uint64_t write_expire_ns)
{
  struct queue_config cfg = test_config (1 * MS, 1000);
  struct test_rig *r = &sr->r;
  struct stream *st = &sr->st;
  bool ok;

  cfg.write_expire_ns = write_expire_ns;
  sr->t = (struct test_thread) TEST_THREAD_INIT;
  /* Sync only: the stream steps one backend operation at a time. */
  ok = CHECK (test_rig_one (r, &cfg, 64 * MiB, 0, 0));
  st->q = r->d[0].q;
  st->tb = r->d[0].tb;
  st->base = MiB;
  st->limit = 64 * MiB;
  atomic_init (&st->stop, false);
  atomic_init (&st->steps, 0);
  if (ok)
    test_backend_block (r->d[0].tb, TB_PWRITEV);

  /* Stream piece 0, held in flight, moves the head past the old piece. */
  ok = ok && CHECK (test_write_fill (r->d[0].q, NULL, 's', STREAM_PIECE,
                                     MiB, 0) == 0);
  ok = ok && CHECK (test_backend_wait_entered (r->d[0].tb, TB_PWRITEV, 1));
  sr->old_queued_ns = monotonic_ns ();
  ok = ok && CHECK (test_write_fill (r->d[0].q, NULL, 'p', 4 * KiB, 0,
                                     0) == 0);
  ok = ok && CHECK (test_thread_start (&sr->t, stream_run, st) == 0);
  return ok;
}

/* Stops the stream (and joins other, the caller's thread, if any) and
 * checks that nothing it or the old piece wrote was lost.
 */
static bool
stream_stop (struct stream_rig *sr, bool ok, struct test_thread *other)
{
  struct test_rig *r = &sr->r;
  uint64_t steps;

  atomic_store (&sr->st.stop, true);
  test_backend_release (r->d[0].tb, TB_PWRITEV);
  if (!sr->t.joined)
    ok &= CHECK (test_thread_wait (&sr->t) && sr->t.result == 0);
  test_thread_join (&sr->t);
  if (other)
    test_thread_join (other);
  steps = atomic_load (&sr->st.steps);
  ok = ok && CHECK (queue_flush (r->d[0].q, NULL) == 0);
  ok = ok && CHECK (test_backend_holds (r->d[0].tb, 'p', 4 * KiB, 0));
  ok = ok && CHECK (test_backend_holds (r->d[0].tb, 's',
                                        (steps + 1) * STREAM_PIECE, MiB));
  test_rig_stop (r);
  return ok;
}

/* The stream is still going: it makes a few more steps. */
static bool
stream_alive (struct stream_rig *sr)
{
  uint64_t then = atomic_load (&sr->st.steps);

  return CHECK (TEST_WAIT_FOR (atomic_load (&sr->st.steps) >= then + 3
                               || test_thread_done (&sr->t)))
    && CHECK (!test_thread_done (&sr->t));
}

static struct stream_rig stream_rig;

/* write-expire under a stream that never lets the queue empty: a piece
 * behind the head goes out once it expires, not when the stream stops.
 */
static void
test_deadline_expiry_under_stream (void)
{
  const uint64_t expire = 200 * MS, slack = 2000 * MS;
  struct stream_rig *sr = &stream_rig;
  struct test_backend *tb;
  uint64_t waited;
  bool ok;

  ok = stream_start (sr, expire);
  tb = sr->r.d[0].tb;
  ok = ok && CHECK (TEST_WAIT_FOR (test_backend_saw (tb, TB_PWRITEV, 0)
                                   || test_thread_done (&sr->t)));
  if (ok) {
    waited = monotonic_ns () - sr->old_queued_ns;
    printf ("# old piece dispatched after %" PRIu64 " ms, %" PRIu64
            " stream writes\n", waited / MS, atomic_load (&sr->st.steps));
    /* The requirement is the upper bound.  It may go sooner: a dispatch
     * round that empties the sweep wraps to it (C-LOOK); test_elevator
     * checks that an expired piece is taken ahead of the sweep.
     */
    ok &= CHECK (test_backend_saw (tb, TB_PWRITEV, 0));
    ok &= CHECK (waited < expire + slack);
    /* ... while the stream was still going, and it keeps going. */
    ok &= stream_alive (sr);
  }
  ok = stream_stop (sr, ok, NULL);
  tap_ok (ok, "deadline: a piece behind the head goes out within"
          " write-expire under a continuous stream");
}

/* A FLUSH must not wait for write-expire either: the pieces it waits
 * for go out as soon as it asks, whatever the stream at the head does.
 */
static void
test_flush_under_stream (void)
{
  const uint64_t expire = 1000 * MS;
  struct stream_rig *sr = &stream_rig;
  struct test_thread t = TEST_THREAD_INIT;
  struct flush_job job;
  uint64_t start = 0, waited = 0;
  bool ok;

  ok = stream_start (sr, expire);
  job = (struct flush_job) { sr->r.d[0].q, NULL };
  if (ok) {
    start = monotonic_ns ();
    ok = CHECK (test_thread_start (&t, flush_job_run, &job) == 0)
      && CHECK (test_thread_wait (&t) && t.result == 0);
    waited = monotonic_ns () - start;
    printf ("# flush returned after %" PRIu64 " ms (write-expire %" PRIu64
            " ms)\n", waited / MS, expire / MS);
    ok = ok && CHECK (test_backend_holds (sr->r.d[0].tb, 'p', 4 * KiB, 0));
    ok = ok && CHECK (waited < expire / 2);
    ok = ok && stream_alive (sr);
  }
  ok = stream_stop (sr, ok, &t);
  tap_ok (ok, "deadline: FLUSH under a continuous stream does not wait for"
          " write-expire");
}

/* ------------------------------------------------------------ isolation */

/* A disk stuck in its backend delays neither another disk's unplug
 * timer nor its FLUSH.
 */
static void
test_slow_disk_isolation (void)
{
  struct queue_config cfg = test_config (5 * MS, 1000);
  struct test_thread slow_flush = TEST_THREAD_INIT;
  struct test_thread fast_flush = TEST_THREAD_INIT;
  struct flush_job slow_job, fast_job;
  struct test_disk *fast, *slow;
  struct queue_stats s;
  struct test_rig r;
  int result = -1;
  bool ok;

  memset (&r, 0, sizeof r);
  ok = CHECK (test_rig_backend (&r, DISK_SIZE)
              && test_rig_backend (&r, DISK_SIZE));
  for (unsigned i = 0; ok && async_mode && i < 2; i++)
    ok = CHECK (test_backend_set_async (r.d[i].tb, async_mode) == 0);
  ok = ok && CHECK (test_rig_start (&r, &cfg));
  fast = &r.d[0];
  slow = &r.d[1];
  slow_job = (struct flush_job) { slow->q, NULL };
  fast_job = (struct flush_job) { fast->q, NULL };

  if (ok) {
    test_backend_block (slow->tb, TB_PWRITEV);
    test_backend_block (slow->tb, TB_FLUSH);
    ok = CHECK (test_write_fill (slow->q, NULL, 's', 4 * KiB, 0, 0) == 0);
  }
  ok = ok && CHECK (test_backend_wait_entered (slow->tb, TB_PWRITEV, 1));
  ok = ok && CHECK (test_thread_start (&slow_flush, flush_job_run,
                                       &slow_job) == 0);

  ok = ok && CHECK (test_write_fill (fast->q, NULL, 'f', 4 * KiB, 0, 0) == 0);
  ok = ok && CHECK (test_backend_wait_count (fast->tb, TB_PWRITEV, 1));
  if (ok) {
    s = test_stats (fast->q);
    ok &= CHECK (s.unplugs[UNPLUG_TIMER] == 1);
  }
  ok = ok && CHECK (test_write_fill (fast->q, NULL, 'g', 4 * KiB, MiB,
                                     0) == 0);
  ok = ok && CHECK (run_bounded (&fast_flush, flush_job_run, &fast_job,
                                 &result) && result == 0);
  ok = ok && CHECK (test_backend_holds (fast->tb, 'g', 4 * KiB, MiB));
  ok = ok && CHECK (!test_thread_done (&slow_flush));
  ok = ok && CHECK (test_backend_count (slow->tb, TB_PWRITEV) == 0);

  test_backend_release (slow->tb, TB_PWRITEV);
  test_backend_release (slow->tb, TB_FLUSH);
  if (!slow_flush.joined)
    ok &= CHECK (test_thread_wait (&slow_flush) && slow_flush.result == 0);
  ok = ok && CHECK (test_backend_holds (slow->tb, 's', 4 * KiB, 0));
  test_thread_join (&slow_flush);
  test_thread_join (&fast_flush);
  test_rig_stop (&r);
  tap_ok (ok, "a disk stuck in its backend delays no other disk's timer"
          " or flush%s", MODE);
}

/* ------------------------------------------------------------ async */

/* A FLUSH on an asynchronous backend must not wait behind batches newer
 * than itself: while it waits, only what it covers goes out, and once
 * that is written the flush runs even if a newer write is stuck in the
 * backend.  Which of the flush and that newer write reaches the backend
 * first is left open: the flush lends its token (backend_flush_locked),
 * so the newer one may go out beside it.
 */
static void
test_async_flush_not_overtaken (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct test_backend *tb;
  struct test_rig r;
  struct queue *q;
  uint64_t ticket = 0;
  bool ok;

  ok = CHECK (test_rig_one (&r, &cfg, DISK_SIZE, ASYNC_IN_FLIGHT, 0));
  q = r.d[0].q;
  tb = r.d[0].tb;
  if (ok)
    test_backend_block (tb, TB_PWRITEV);
  ok = ok && CHECK (test_write_fill (q, NULL, 'A', 4 * KiB, 0, 0) == 0);
  if (ok) {
    unplug_now (q, UNPLUG_TIMER);
    ticket = queue_flush_start (q);
  }
  ok = ok && CHECK (test_backend_wait_entered (tb, TB_PWRITEV, 1));
  /* Newer than the flush, on a running queue with room in flight. */
  ok = ok && CHECK (test_write_fill (q, NULL, 'N', 4 * KiB, MiB, 0) == 0);
  if (ok)
    unplug_now (q, UNPLUG_TIMER);
  ok = ok && CHECK (!TEST_SOON (test_backend_entered (tb, TB_PWRITEV) >= 2));
  /* A's write ends; the gate stays shut for N's. */
  if (ok)
    test_backend_step (tb, TB_PWRITEV, 1);
  ok = ok && CHECK (test_backend_wait_count (tb, TB_FLUSH, 1));
  ok = ok && CHECK (test_backend_count (tb, TB_PWRITEV) == 1);
  ok = ok && CHECK (queue_flush_wait (q, NULL, ticket, 0) == 0);
  test_backend_release (tb, TB_PWRITEV);
  ok = ok && CHECK (queue_flush (q, NULL) == 0);
  ok = ok && CHECK (test_backend_holds (tb, 'N', 4 * KiB, MiB));
  test_rig_stop (&r);
  tap_ok (ok, "async: a FLUSH runs before batches newer than itself end");
}

/* With several operations in flight, a piece never goes out while an
 * older one over the same bytes is still on its way (they could land in
 * either order), but pieces elsewhere do not wait for it.
 */
static void
test_async_overlap (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct test_backend *tb;
  struct test_rig r;
  struct queue *q;
  bool ok;

  ok = CHECK (test_rig_one (&r, &cfg, DISK_SIZE, ASYNC_IN_FLIGHT, 0));
  q = r.d[0].q;
  tb = r.d[0].tb;
  if (ok)
    test_backend_block (tb, TB_PWRITEV);
  ok = ok && CHECK (test_write_fill (q, NULL, 'A', 8 * KiB, 0, 0) == 0);
  if (ok)
    unplug_now (q, UNPLUG_TIMER);
  ok = ok && CHECK (test_backend_wait_entered (tb, TB_PWRITEV, 1));

  ok = ok && CHECK (test_write_fill (q, NULL, 'B', 8 * KiB, 4 * KiB, 0) == 0);
  ok = ok && CHECK (test_write_fill (q, NULL, 'C', 4 * KiB, MiB, 0) == 0);
  if (ok)
    unplug_now (q, UNPLUG_TIMER);
  ok = ok && CHECK (test_backend_wait_entered (tb, TB_PWRITEV, 2));
  ok = ok && CHECK (test_backend_saw (tb, TB_PWRITEV, MiB));
  /* The dispatcher considers the overlapping piece right after the
   * other one, so by now it would be in flight if it were allowed to.
   */
  if (ok) {
    struct queue_stats s = test_stats (q);

    ok = CHECK (s.in_flight == 2 && s.queued_requests == 1);
  }
  ok = ok && CHECK (!test_backend_saw (tb, TB_PWRITEV, 4 * KiB));
  ok = ok && CHECK (test_queue_reads_as (q, 'A', 4 * KiB, 0)
                    && test_queue_reads_as (q, 'B', 8 * KiB, 4 * KiB));

  test_backend_release (tb, TB_PWRITEV);
  ok = ok && CHECK (queue_flush (q, NULL) == 0);
  ok = ok && CHECK (test_backend_saw (tb, TB_PWRITEV, 4 * KiB));
  ok = ok && CHECK (test_backend_holds (tb, 'A', 4 * KiB, 0)
                    && test_backend_holds (tb, 'B', 8 * KiB, 4 * KiB)
                    && test_backend_holds (tb, 'C', 4 * KiB, MiB));
  test_rig_stop (&r);
  tap_ok (ok, "async: overlapping pieces never in flight together, others"
          " go out alongside");
}

/* ------------------------------------------------------------ writers */

/* max_writers=2: a second request thread writes alongside one held in
 * the backend, and a third finds no token free and only queues.
 */
static void
test_writers_in_parallel (void)
{
  struct queue_config cfg = test_config (HOUR, 1);
  struct test_thread t1 = TEST_THREAD_INIT, t2 = TEST_THREAD_INIT;
  struct test_write_job w1, w2;
  struct test_rig r;
  bool ok;

  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE));
  if (ok)
    test_backend_block (r.d[0].tb, TB_PWRITEV);
  w1 = (struct test_write_job) { r.d[0].q, 'a', 4 * KiB, 0, 0 };
  w2 = (struct test_write_job) { r.d[0].q, 'b', 4 * KiB, MiB, 0 };
  ok = ok && CHECK (test_thread_start (&t1, test_write_job_run, &w1) == 0);
  ok = ok && CHECK (test_backend_wait_entered (r.d[0].tb, TB_PWRITEV, 1));
  ok = ok && CHECK (test_thread_start (&t2, test_write_job_run, &w2) == 0);
  ok = ok && CHECK (test_backend_wait_entered (r.d[0].tb, TB_PWRITEV, 2));
  /* Both tokens are held: this one is queued and answered. */
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'c', 4 * KiB, 2 * MiB,
                                     0) == 0);
  ok = ok && CHECK (test_backend_entered (r.d[0].tb, TB_PWRITEV) == 2);
  test_backend_release (r.d[0].tb, TB_PWRITEV);
  ok = ok && CHECK (test_thread_wait (&t1) && t1.result == 0);
  ok = ok && CHECK (test_thread_wait (&t2) && t2.result == 0);
  ok = ok && CHECK (queue_flush (r.d[0].q, NULL) == 0);
  ok = ok && CHECK (test_backend_holds (r.d[0].tb, 'a', 4 * KiB, 0)
                    && test_backend_holds (r.d[0].tb, 'b', 4 * KiB, MiB)
                    && test_backend_holds (r.d[0].tb, 'c', 4 * KiB, 2 * MiB));
  test_backend_release_all (r.d[0].tb);
  test_thread_join (&t1);
  test_thread_join (&t2);
  test_rig_stop (&r);
  tap_ok (ok, "max_writers=2: two request threads write at once, a third"
          " queues");
}

/* max_writers=2: 'a' and a FLUSH whose backend call of kind held (the
 * write, or the flush itself) is held at the gate; then 'b' and a second
 * FLUSH.  The second FLUSH's thread finds a free token, but must neither
 * write 'b' (a second holder would compete with the flush for the disk)
 * nor start a backend flush while one runs (the later epoch could finish
 * first).  Then the gate opens and both FLUSHes must succeed.
 */
static bool
second_flush_behind_held (struct test_rig *r, enum tb_op held)
{
  struct test_thread t1 = TEST_THREAD_INIT, t2 = TEST_THREAD_INIT;
  struct flush_job fj = { r->d[0].q, NULL };
  struct test_backend *tb = r->d[0].tb;
  bool ok = true;

  test_backend_block (tb, held);
  ok = ok && CHECK (test_write_fill (fj.q, NULL, 'a', 4 * KiB, 0, 0) == 0);
  ok = ok && CHECK (test_thread_start (&t1, flush_job_run, &fj) == 0);
  ok = ok && CHECK (test_backend_wait_entered (tb, held, 1));
  ok = ok && CHECK (test_write_fill (fj.q, NULL, 'b', 4 * KiB, MiB, 0) == 0);
  ok = ok && CHECK (test_thread_start (&t2, flush_job_run, &fj) == 0);
  ok = ok && CHECK (TEST_WAIT_FOR (test_stats (fj.q).flushes == 2));
  /* Either would follow in microseconds on t2's thread. */
  for (int i = 0; i < 20 && ok; i++) {
    test_poll_step ();
    ok = CHECK (test_backend_entered (tb, TB_PWRITEV) == 1
                && test_backend_entered (tb, TB_FLUSH) == (held == TB_FLUSH));
  }
  ok = ok && CHECK (!test_thread_done (&t2));
  test_backend_release (tb, held);
  ok = ok && CHECK (test_thread_wait (&t1) && t1.result == 0);
  ok = ok && CHECK (test_thread_wait (&t2) && t2.result == 0);
  ok = ok && CHECK (test_backend_holds (tb, 'b', 4 * KiB, MiB));
  test_backend_release_all (tb);
  test_thread_join (&t1);
  test_thread_join (&t2);
  return ok;
}

static void
test_one_backend_flush_at_a_time (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct tb_call calls[8];
  struct test_rig r;
  size_t n = 0;
  bool ok;

  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE))
    && second_flush_behind_held (&r, TB_FLUSH);
  if (ok)
    n = test_backend_calls (r.d[0].tb, TB_OPS, calls, 8);
  /* a, its flush (held), b, and only then b's flush. */
  ok = ok && CHECK (n == 4 && calls[1].op == TB_FLUSH
                    && calls[2].op == TB_PWRITEV && calls[3].op == TB_FLUSH);
  test_rig_stop (&r);
  tap_ok (ok, "max_writers=2: one backend flush at a time");
}

static void
test_one_holder_while_flush_waits (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct test_rig r;
  bool ok;

  ok = CHECK (rig_one (&r, &cfg, DISK_SIZE))
    && second_flush_behind_held (&r, TB_PWRITEV);
  test_rig_stop (&r);
  tap_ok (ok, "max_writers=2: one holder while a flush waits");
}

/* Valid whatever the backend's concurrency. */
static void (*const every_mode[]) (void) = {
  test_timer_unplug,
  test_threshold,
  test_fua,
  test_flush,
  test_group_commit,
  test_group_commit_rounds,
  test_full_queue,
  test_queue_requests,
  test_flush_covers_superseding_write,
  test_write_behind_flush_left_plugged,
  test_drain,
  test_merge,
  test_thresh_one_never_merges,
  test_fragments_are_not_merges,
  test_elevator_private_state,
  test_io_wait_fua_is_write_then_flush,
  test_pieces_present_counted,
  test_newest_wins,
  test_zero_trim_ordering,
  test_read_while_in_flight,
  test_extents_over_queue,
  test_error_latching,
  test_error_concurrent_flushes,
  test_error_ack_dispatched,
  test_lone_dispatched_writer,
  test_dispatched_writer_behind_busy_backend,
  test_error_fua,
  test_flush_failure,
  test_flush_failure_reaches_other_sessions,
  test_dispatch_without_memory,
  test_writeback_retried_without_memory,
  test_writeback_memory_shortage_kept,
  test_dispatch_time_per_operation,
  test_slow_disk_isolation,
};

int
main (void)
{
  test_each_mode (every_mode, sizeof every_mode / sizeof every_mode[0],
                  &async_mode, &writers_mode, ASYNC_IN_FLIGHT, WRITERS);
  writers_mode = WRITERS;
  test_writers_in_parallel ();
  test_one_backend_flush_at_a_time ();
  test_one_holder_while_flush_waits ();
  writers_mode = 0;
  async_mode = 0;
  test_unplugger_dispatches ();
  test_waiter_dispatches ();
  test_async_overlap ();
  test_async_flush_not_overtaken ();
  test_noop_order ();
  test_deadline_order ();
  test_fast_zero_unsupported ();
  test_out_of_range ();
  test_engine_threads_named ();
  test_deadline_expiry_under_stream ();
  test_flush_under_stream ();
  /* A trailing plan: the count follows from the cases that ran. */
  tap_plan (tap_count);
  return tap_done ();
}
