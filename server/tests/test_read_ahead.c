/* plugq: unit tests for read-ahead (queue_read_ahead.c).
 *
 *  - A stream of reads one at a time is read ahead in windows that grow
 *    up to read-ahead=: far fewer backend reads than reads, every read
 *    right; random reads, read-ahead=off and a backend that reads from
 *    memory never read ahead.
 *  - A write, zero or trim answered before a read is in that read's
 *    answer, whether it is still queued or already written back, and
 *    also when it arrives while the window over it is being filled.
 *  - Reads arriving inside a window being filled wait for it and take
 *    their parts from it.
 *  - A failed fill leaves each read to the ordinary way; a window never
 *    reaches past the disk's end.
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
#define DISK_SIZE (4 * MiB)
#define READ_AT (1 * MiB)
#define MAX_CALLS 256

static unsigned async_mode;
#define MODE (async_mode ? " [async]" : "")

/* Breaches of the backend contract in every case (test_count_breach). */
static _Atomic unsigned breaches;

/* One disk whose backend checks the contract (reads past the end among
 * it), holding 'r' over the whole disk, written back.
 */
static bool
rig (struct test_rig *r, struct queue_config *cfg, bool writes_to_memory)
{
  struct tb_contract c = {
    .merge_limit = cfg->max_merge, .fault = test_count_breach,
    .arg = &breaches,
  };
  struct test_backend *tb;
  bool ok;

  memset (r, 0, sizeof *r);
  tb = test_rig_backend (r, DISK_SIZE);
  ok = CHECK (tb != NULL)
    && (!async_mode || CHECK (test_backend_set_async (tb, 16) == 0))
    && CHECK (test_backend_check_contract (tb, &c) == 0);
  if (ok && writes_to_memory)
    test_backend_set_writes_to_memory (tb);
  ok = ok && CHECK (test_rig_start (r, cfg));
  for (uint64_t at = 0; ok && at < DISK_SIZE; at += MiB)
    ok = CHECK (test_write_fill (r->d[0].q, NULL, 'r', MiB, at, 0) == 0);
  return ok && CHECK (queue_flush (r->d[0].q, NULL) == 0);
}

static struct queue_config
ahead_config (uint64_t read_ahead)
{
  struct queue_config cfg = test_config (TEST_HOUR, 100000);

  cfg.bypass = false;
  cfg.read_ahead = read_ahead;
  return cfg;
}

/* n reads of count bytes from offset, one at a time, each reading as c
 * except where it reads [odd_at, odd_at + odd_count), which reads as odd.
 */
struct run {
  uint64_t offset;
  uint32_t count;
  unsigned n;
  int c;
  uint64_t odd_at, odd_count;
  int odd;
};

static bool
read_run (struct queue *q, const struct run *run)
{
  static unsigned char buf[64 * KiB];

  for (unsigned i = 0; i < run->n; i++) {
    uint64_t at = run->offset + (uint64_t) i * run->count;

    if (!CHECK (queue_pread (q, buf, run->count, at) == 0))
      return false;
    for (uint64_t b = 0; b < run->count; b++) {
      bool odd = at + b >= run->odd_at
        && at + b < run->odd_at + run->odd_count;
      int want = odd ? run->odd : run->c;

      if (buf[b] != want) {
        printf ("# read at %" PRIu64 ": byte %" PRIu64 " is %d, want %c\n",
                at, at + b, buf[b], want);
        return false;
      }
    }
  }
  return true;
}

/* Bytes of the backend reads larger than count: the window fills,
 * since the client's reads are count bytes each.
 */
static uint64_t
fill_bytes (struct test_backend *tb, uint64_t count)
{
  static struct tb_call calls[MAX_CALLS];
  size_t n = test_backend_calls (tb, TB_PREAD, calls, MAX_CALLS);
  uint64_t bytes = 0;

  for (size_t i = 0; i < n && i < MAX_CALLS; i++)
    if (calls[i].count > count)
      bytes += calls[i].count;
  return bytes;
}

static uint64_t
largest_read (struct test_backend *tb, size_t *n)
{
  static struct tb_call calls[MAX_CALLS];
  uint64_t largest = 0;

  *n = test_backend_calls (tb, TB_PREAD, calls, MAX_CALLS);
  for (size_t i = 0; i < *n; i++)
    if (calls[i].count > largest)
      largest = calls[i].count;
  return largest;
}

/* ------------------------------------------------------------ streams */

/* 256 sequential 4 KiB reads (1 MiB): windows of 16, 32, ... KiB up to
 * read-ahead=256K, so about 8 backend reads.
 */
static void
test_stream_read_ahead (void)
{
  struct queue_config cfg = ahead_config (256 * KiB);
  struct run run = { .offset = READ_AT, .count = 4 * KiB, .n = 256,
                     .c = 'r' };
  struct queue_stats st = { 0 };
  struct test_rig r;
  uint64_t largest = 0;
  size_t n = 0;
  bool ok = rig (&r, &cfg, false);

  ok = ok && read_run (r.d[0].q, &run);
  if (ok) {
    st = test_stats (r.d[0].q);
    largest = largest_read (r.d[0].tb, &n);
    ok = CHECK (n <= 12) && CHECK (largest == 256 * KiB)
      && CHECK (st.read_ahead_hits >= 256 - n)
      && CHECK (st.op[OP_READ].backend_ops == n)
      && CHECK (st.read_ahead_bytes >= st.read_ahead_hits * 4 * KiB);
  }
  test_rig_stop (&r);
  tap_ok (ok, "256 sequential reads one at a time: %zu backend reads, the"
          " largest %" PRIu64 " KiB (read-ahead=256K), %" PRIu64 " answered"
          " from windows%s", n, largest / KiB, st.read_ahead_hits, MODE);
}

/* Random reads, read-ahead=off, and a backend that reads from memory:
 * one backend read per read, none answered from a window.
 */
static bool
reads_alone (struct queue_config cfg, bool writes_to_memory, bool random)
{
  static unsigned char buf[4 * KiB];
  struct queue_stats st;
  struct test_rig r;
  bool ok = rig (&r, &cfg, writes_to_memory);

  for (unsigned i = 0; ok && i < 64; i++) {
    uint64_t at = random ? READ_AT + ((i * 37) % 64) * 16 * KiB
      : READ_AT + i * 4 * KiB;

    ok = CHECK (queue_pread (r.d[0].q, buf, sizeof buf, at) == 0)
      && CHECK (test_buffer_is (buf, 'r', sizeof buf, at, "a read"));
  }
  st = test_stats (r.d[0].q);
  ok = ok && CHECK (st.read_ahead_hits == 0)
    && CHECK (st.read_ahead_bytes == 0)
    && CHECK (test_backend_count (r.d[0].tb, TB_PREAD) == 64);
  test_rig_stop (&r);
  return ok;
}

static void
test_no_read_ahead (void)
{
  bool random = reads_alone (ahead_config (MiB), false, true);
  bool off = reads_alone (ahead_config (0), false, false);
  /* Only synchronous backends write to memory (file, memory). */
  bool memory = async_mode || reads_alone (ahead_config (MiB), true, false);

  tap_ok (random && off && memory, "no read-ahead for random reads (%s),"
          " with read-ahead=off (%s), on a backend that reads from memory"
          " (%s)%s", random ? "ok" : "FAILED", off ? "ok" : "FAILED",
          async_mode ? "sync only" : memory ? "ok" : "FAILED", MODE);
}

/* ------------------------------------------------------------ writes */

/* A stream reads 16 KiB, so windows are there up to at least 32 KiB;
 * then a write (kind) over [READ_AT + 20K, +4K), answered; with flush
 * it is written back before the stream goes on.  The stream reads it.
 */
static bool
write_into_windows (int kind, bool flush)
{
  struct queue_config cfg = ahead_config (MiB);
  struct run before = { .offset = READ_AT, .count = 4 * KiB, .n = 4,
                        .c = 'r' };
  struct run after = { .offset = READ_AT + 16 * KiB, .count = 4 * KiB,
                       .n = 60, .c = 'r', .odd_at = READ_AT + 20 * KiB,
                       .odd_count = 4 * KiB, .odd = kind == 'w' ? 'n' : 0 };
  struct queue_stats st;
  struct test_rig r;
  struct queue *q;
  bool ok = rig (&r, &cfg, false);

  q = r.d[0].q;
  ok = ok && read_run (q, &before);
  st = test_stats (q);
  ok = ok && CHECK (st.read_ahead_hits > 0);
  if (ok && kind == 'w')
    ok = CHECK (test_write_fill (q, NULL, 'n', 4 * KiB, READ_AT + 20 * KiB,
                                 0) == 0);
  else if (ok)
    ok = CHECK (queue_zero (q, NULL, 4 * KiB, READ_AT + 20 * KiB, 0) == 0);
  if (ok && flush)
    ok = CHECK (queue_flush (q, NULL) == 0);
  ok = ok && read_run (q, &after);
  test_rig_stop (&r);
  return ok;
}

static void
test_write_forgets_windows (void)
{
  bool queued = write_into_windows ('w', false);
  bool written = write_into_windows ('w', true);
  bool zero = write_into_windows ('z', true);

  tap_ok (queued && written && zero, "a write into the windows ahead of a"
          " stream is read: queued (%s), written back (%s), a zero written"
          " back (%s)%s", queued ? "ok" : "FAILED",
          written ? "ok" : "FAILED", zero ? "ok" : "FAILED", MODE);
}

/* A stream read's window fill is held at the backend; reads inside the
 * window arrive and wait for it (no backend read of their own); a write
 * into the window is written back meanwhile.  Once the fill is let go,
 * the waiting reads have their data, and a read of the written range
 * afterwards sees the write: the window it arrived during is not kept.
 */
static void
test_reads_wait_for_fill (void)
{
  struct queue_config cfg = ahead_config (MiB);
  struct test_thread t[3] = { TEST_THREAD_INIT, TEST_THREAD_INIT,
                              TEST_THREAD_INIT };
  static struct test_read_job j[3];
  struct run first = { .offset = READ_AT, .count = 4 * KiB, .n = 1,
                       .c = 'r' };
  struct run later = { .offset = READ_AT + 12 * KiB, .count = 4 * KiB,
                       .n = 1, .c = 'n' };
  struct test_rig r;
  struct queue *q;
  uint64_t preads = 0;
  bool ok = rig (&r, &cfg, false);

  q = r.d[0].q;
  ok = ok && read_run (q, &first);
  if (ok) {
    preads = test_backend_entered (r.d[0].tb, TB_PREAD);
    test_backend_block (r.d[0].tb, TB_PREAD);
  }
  /* Opens [READ_AT + 4K, READ_AT + 20K) and fills it, held. */
  for (unsigned i = 0; ok && i < 3; i++) {
    j[i] = (struct test_read_job) {
      .q = q, .offset = READ_AT + (i + 1) * 4 * KiB, .count = 4 * KiB,
    };
    ok = CHECK (test_thread_start (&t[i], test_read_job_run, &j[i]) == 0);
    if (ok && i == 0)
      ok = CHECK (test_backend_wait_entered (r.d[0].tb, TB_PREAD,
                                             preads + 1));
  }
  /* Neither later read reaches the backend; both are asleep. */
  for (unsigned i = 1; ok && i < 3; i++)
    ok = CHECK (!test_thread_done (&t[i]));
  ok = ok && CHECK (test_backend_entered (r.d[0].tb, TB_PREAD) == preads + 1);
  ok = ok && CHECK (test_write_fill (q, NULL, 'n', 4 * KiB,
                                     READ_AT + 12 * KiB, 0) == 0)
    && CHECK (queue_flush (q, NULL) == 0);
  test_backend_release (r.d[0].tb, TB_PREAD);
  for (unsigned i = 0; i < 3; i++)
    ok = ok && CHECK (test_thread_wait (&t[i])) && CHECK (t[i].result == 0);
  /* Before the write or concurrent with it: either is right for these. */
  for (unsigned i = 0; ok && i < 3; i++)
    ok = CHECK (test_buffer_is (j[i].buf, i == 2 && j[i].buf[0] == 'n'
                                ? 'n' : 'r', 4 * KiB, j[i].offset,
                                "a read waiting for the fill"));
  ok = ok && read_run (q, &later);
  test_backend_release_all (r.d[0].tb);
  for (unsigned i = 0; i < 3; i++)
    test_thread_join (&t[i]);
  test_rig_stop (&r);
  tap_ok (ok, "reads inside a window being filled wait for it; a write"
          " answered during the fill is read afterwards%s", MODE);
}

/* ------------------------------------------------------------ limits */

/* The window fill fails: the read goes the ordinary way and succeeds;
 * so does the stream after it.
 */
static void
test_failed_fill (void)
{
  struct queue_config cfg = ahead_config (MiB);
  struct run first = { .offset = READ_AT, .count = 4 * KiB, .n = 1,
                       .c = 'r' };
  struct run rest = { .offset = READ_AT + 4 * KiB, .count = 4 * KiB,
                      .n = 63, .c = 'r' };
  struct queue_stats st = { 0 };
  struct test_rig r;
  bool ok = rig (&r, &cfg, false);

  ok = ok && read_run (r.d[0].q, &first);
  if (ok)
    test_backend_fail (r.d[0].tb, TB_PREAD, 1, EIO);
  ok = ok && read_run (r.d[0].q, &rest);
  if (ok)
    st = test_stats (r.d[0].q);
  /* The failed fill was the stream's first window, four reads long. */
  ok = ok && CHECK (test_backend_failed (r.d[0].tb, TB_PREAD) == 1)
    && CHECK (st.op[OP_READ].errors == 0) && CHECK (st.read_ahead_hits > 0)
    && CHECK (st.read_ahead_bytes
              == fill_bytes (r.d[0].tb, 4 * KiB) - 16 * KiB);
  test_rig_stop (&r);
  tap_ok (ok, "a failed window fill leaves the read to the ordinary way"
          " (no error), is not counted in read_ahead_bytes, and the stream"
          " reads ahead again%s", MODE);
}

/* A stream up to the disk's last byte: no window past it (the contract
 * checker sees every backend read), every read right.
 */
static void
test_disk_end (void)
{
  struct queue_config cfg = ahead_config (MiB);
  struct run run = { .offset = DISK_SIZE - 256 * KiB, .count = 4 * KiB,
                     .n = 64, .c = 'r' };
  static struct tb_call calls[MAX_CALLS];
  struct test_rig r;
  size_t n = 0;
  bool ok = rig (&r, &cfg, false);

  ok = ok && read_run (r.d[0].q, &run);
  if (ok)
    n = test_backend_calls (r.d[0].tb, TB_PREAD, calls, MAX_CALLS);
  for (size_t i = 0; ok && i < n; i++)
    ok = CHECK (calls[i].offset + calls[i].count <= DISK_SIZE);
  ok = ok && CHECK (n < 64);
  test_rig_stop (&r);
  tap_ok (ok, "a stream to the disk's end: %zu backend reads, none past"
          " it%s", n, MODE);
}

int
main (void)
{
  static void (*const cases[]) (void) = {
    test_stream_read_ahead,
    test_no_read_ahead,
    test_write_forgets_windows,
    test_reads_wait_for_fill,
    test_failed_fill,
    test_disk_end,
  };

  test_sync_then_async (cases, sizeof cases / sizeof cases[0], &async_mode,
                        4);
  tap_ok (atomic_load (&breaches) == 0, "the backend contract held in every"
          " case: %u breaches", atomic_load (&breaches));
  tap_plan (tap_count);
  return tap_done ();
}
