/* plugq: unit tests for requests smaller than the block of a backend that
 * needs aligned I/O (server/queue/queue_align.c).
 *
 * Every queue here sits on a test backend with min_block 4096: like
 * O_DIRECT, it refuses (EINVAL) any read, write, zero or trim that is not
 * whole blocks, and reports it as a breach of the contract, so every
 * case also checks that the queue never sent one.  The cases look at the
 * backend calls themselves (how many reads of a block, which writes) and
 * at the backend's bytes, around partial blocks, the in-flight rule that
 * keeps two rewrites of one block apart, zeroes, trims, reads and FUA.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "elevator/elevator.h"
#include "fixtures.h"
#include "queue/queue.h"
#include "queue/session.h"
#include "tap.h"
#include "test_backends.h"

#define KiB ((uint64_t) 1024)
#define MiB (KiB * 1024)
#define HOUR TEST_HOUR
#define BLOCK (4 * KiB)
#define DISK_SIZE (1 * MiB)
#define FILLED (16 * KiB)        /* 'x' over [0, FILLED) before each case */

/* Cases that hold whatever the backend's concurrency run three times, as
 * in test_queue.c: synchronous, several token holders, asynchronous.
 */
static unsigned async_mode;
static unsigned writers_mode;
#define ASYNC_IN_FLIGHT 4
#define WRITERS 2
#define MODE (async_mode ? " [async]" : writers_mode ? " [2 writers]" : "")

/* ------------------------------------------------------------ contract */

static _Atomic bool breached;
static char breach[512];

static void
record_breach (void *arg, const char *msg)
{
  if (!atomic_exchange (&breached, true))
    snprintf (breach, sizeof breach, "%s", msg);
}

/* No call the backend got was anything but whole blocks (or any other
 * breach of the contract).
 */
static bool
contract_kept (void)
{
  if (!atomic_exchange (&breached, false))
    return true;
  printf ("# backend contract broken: %s\n", breach);
  return false;
}

/* ------------------------------------------------------------ rig */

/* One disk over an aligned-only backend, 'x' over [0, FILLED) on it. */
static bool
align_rig (struct test_rig *r, const struct queue_config *cfg, uint64_t size,
           enum tb_trim trim)
{
  struct tb_contract c = {
    .merge_limit = cfg->max_merge, .no_merging = cfg->unplug_thresh <= 1,
    .fault = record_breach,
  };
  struct test_backend *tb;
  struct backend *b;

  memset (r, 0, sizeof *r);
  if ((tb = test_rig_backend (r, size)) == NULL)
    return false;
  b = test_backend_get (tb);
  b->min_block = BLOCK;
  b->limits.minimum = 1;
  if (writers_mode)
    b->max_writers = writers_mode;
  test_backend_set_trim (tb, trim);
  if ((async_mode && test_backend_set_async (tb, async_mode) == -1)
      || test_backend_check_contract (tb, &c) == -1
      || !test_rig_start (r, cfg))
    return false;
  return test_write_fill (r->d[0].q, NULL, 'x', FILLED, 0, 0) == 0
    && queue_flush (r->d[0].q, NULL) == 0;
}

/* The backend's bytes [offset, offset+count) are c. */
static bool
holds (struct test_rig *r, int c, uint64_t count, uint64_t offset)
{
  return test_backend_holds (r->d[0].tb, c, count, offset);
}

/* Calls of kind op that arrived since `since` (a count taken before). */
static uint64_t
calls_since (struct test_rig *r, enum tb_op op, uint64_t since)
{
  return test_backend_entered (r->d[0].tb, op) - since;
}

/* Whether a call of kind op over exactly offset+count was logged. */
static bool
saw_call (struct test_rig *r, enum tb_op op, uint64_t offset, uint64_t count)
{
  struct tb_call calls[256];
  size_t n = test_backend_calls (r->d[0].tb, op, calls, 256);

  for (size_t i = 0; i < n && i < 256; i++)
    if (calls[i].offset == offset && calls[i].count == count)
      return true;
  return false;
}

/* ------------------------------------------------------------ cases */

/* 1 KiB inside a block: one read of the block, one write of it, the
 * rest of the block as it was; read back unaligned through the queue.
 */
static void
test_write_inside_block (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct test_rig r;
  uint64_t reads, writes;
  char got[100];
  bool ok;

  ok = CHECK (align_rig (&r, &cfg, DISK_SIZE, TB_TRIM_PASS));
  reads = test_backend_entered (r.d[0].tb, TB_PREAD);
  writes = test_backend_entered (r.d[0].tb, TB_PWRITEV);
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'a', KiB, KiB, 0) == 0)
    && CHECK (queue_flush (r.d[0].q, NULL) == 0);
  ok = ok && CHECK (calls_since (&r, TB_PREAD, reads) == 1)
    && CHECK (calls_since (&r, TB_PWRITEV, writes) == 1)
    && CHECK (saw_call (&r, TB_PREAD, 0, BLOCK))
    && CHECK (saw_call (&r, TB_PWRITEV, 0, BLOCK));
  ok = ok && CHECK (holds (&r, 'x', KiB, 0)) && CHECK (holds (&r, 'a', KiB, KiB))
    && CHECK (holds (&r, 'x', FILLED - 2 * KiB, 2 * KiB));
  ok = ok && CHECK (test_stats (r.d[0].q).read_modify_writes == 1);
  ok = ok && CHECK (queue_pread (r.d[0].q, got, sizeof got, 2 * KiB - 50) == 0)
    && CHECK (test_buffer_is (got, 'a', 50, 2 * KiB - 50, "read")
              && test_buffer_is (got + 50, 'x', 50, 2 * KiB, "read"));
  ok &= contract_kept ();
  test_rig_stop (&r);
  tap_ok (ok, "1 KiB inside a block: read once, written whole, the rest"
          " kept%s", MODE);
}

/* Odd sizes across block boundaries: each partial block at an end is
 * rewritten, the whole blocks between go down as they are.
 */
static void
test_write_across_blocks (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct test_rig r;
  uint64_t reads;
  bool ok;

  ok = CHECK (align_rig (&r, &cfg, DISK_SIZE, TB_TRIM_PASS));
  reads = test_backend_entered (r.d[0].tb, TB_PREAD);
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'b', 10007, 1001,
                                     0) == 0)
    && CHECK (queue_flush (r.d[0].q, NULL) == 0);
  /* [1001, 11008): head block 0, tail block 8192, middle [4096, 8192). */
  ok = ok && CHECK (calls_since (&r, TB_PREAD, reads) == 2)
    && CHECK (saw_call (&r, TB_PWRITEV, 0, BLOCK))
    && CHECK (saw_call (&r, TB_PWRITEV, 2 * BLOCK, BLOCK))
    && CHECK (saw_call (&r, TB_PWRITEV, BLOCK, BLOCK));
  ok = ok && CHECK (holds (&r, 'x', 1001, 0))
    && CHECK (holds (&r, 'b', 10007, 1001))
    && CHECK (holds (&r, 'x', FILLED - 11008, 11008));
  ok &= contract_kept ();
  test_rig_stop (&r);
  tap_ok (ok, "an odd-sized write across blocks: edges rewritten, middle"
          " written%s", MODE);
}

/* 1 KiB pieces that fill a block, in an order the elevator does not
 * merge by itself: they coalesce in the queue and go out as one aligned
 * write, with no read at all.
 */
static void
test_pieces_coalesce (const struct elevator_ops *elevator)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  static const uint64_t order[] = { 2, 3, 1, 0 };
  struct test_rig r;
  uint64_t reads, writes;
  bool ok;

  cfg.elevator = elevator;
  ok = CHECK (align_rig (&r, &cfg, DISK_SIZE, TB_TRIM_PASS));
  reads = test_backend_entered (r.d[0].tb, TB_PREAD);
  writes = test_backend_entered (r.d[0].tb, TB_PWRITEV);
  for (size_t i = 0; ok && i < 4; i++)
    ok = CHECK (test_write_fill (r.d[0].q, NULL, 'c' + order[i], KiB,
                                 BLOCK + order[i] * KiB, 0) == 0);
  ok = ok && CHECK (queue_flush (r.d[0].q, NULL) == 0);
  ok = ok && CHECK (calls_since (&r, TB_PREAD, reads) == 0)
    && CHECK (calls_since (&r, TB_PWRITEV, writes) == 1)
    && CHECK (saw_call (&r, TB_PWRITEV, BLOCK, BLOCK));
  for (uint64_t i = 0; ok && i < 4; i++)
    ok = CHECK (holds (&r, 'c' + i, KiB, BLOCK + i * KiB));
  ok = ok && CHECK (test_stats (r.d[0].q).read_modify_writes == 0);
  ok &= contract_kept ();
  test_rig_stop (&r);
  tap_ok (ok, "%s: 1 KiB pieces that fill a block go out as one write,"
          " unread", elevator->name);
}

/* The lost update: A rewrites block 0 for [0, 1K) and is held in the
 * backend; B, [1K, 2K) of the same block, must neither read nor write
 * the block until A is done (with two token holders, B's own thread
 * would otherwise take it at once), and both end up on the disk.
 */
static void
test_rewrites_of_one_block_never_overlap (void)
{
  struct queue_config cfg = test_config (HOUR, 1);
  struct test_thread ta = TEST_THREAD_INIT, tb = TEST_THREAD_INIT;
  struct test_write_job a, b;
  struct test_rig r;
  uint64_t reads, writes;
  bool ok;

  ok = CHECK (align_rig (&r, &cfg, DISK_SIZE, TB_TRIM_PASS));
  a = (struct test_write_job) { r.d[0].q, 'a', KiB, 0, 0 };
  b = (struct test_write_job) { r.d[0].q, 'b', KiB, KiB, 0 };
  reads = test_backend_entered (r.d[0].tb, TB_PREAD);
  writes = test_backend_entered (r.d[0].tb, TB_PWRITEV);
  if (ok)
    test_backend_block (r.d[0].tb, TB_PWRITEV);
  ok = ok && CHECK (test_thread_start (&ta, test_write_job_run, &a) == 0);
  ok = ok && CHECK (test_backend_wait_entered (r.d[0].tb, TB_PWRITEV,
                                               writes + 1));
  /* B is queued and answered (ack=queued) without touching the block:
   * had its thread taken it, it would be held at the gate too.
   */
  ok = ok && CHECK (test_thread_start (&tb, test_write_job_run, &b) == 0)
    && CHECK (test_thread_wait (&tb) && tb.result == 0);
  ok = ok && CHECK (calls_since (&r, TB_PREAD, reads) == 1)
    && CHECK (calls_since (&r, TB_PWRITEV, writes) == 1)
    && CHECK (test_stats (r.d[0].q).queued_requests == 1);
  test_backend_release (r.d[0].tb, TB_PWRITEV);
  ok = ok && CHECK (test_thread_wait (&ta) && ta.result == 0);
  ok = ok && CHECK (queue_flush (r.d[0].q, NULL) == 0);
  ok = ok && CHECK (holds (&r, 'a', KiB, 0)) && CHECK (holds (&r, 'b', KiB, KiB))
    && CHECK (holds (&r, 'x', FILLED - 2 * KiB, 2 * KiB));
  ok &= contract_kept ();
  test_backend_release_all (r.d[0].tb);
  test_thread_join (&ta);
  test_thread_join (&tb);
  test_rig_stop (&r);
  tap_ok (ok, "two partial writes of one block: the second waits for the"
          " first's rewrite, neither is lost%s", MODE);
}

/* A zero of odd bounds: partial blocks rewritten with zeroes, the whole
 * blocks between zeroed by the backend.
 */
static void
test_zero_unaligned (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct test_rig r;
  bool ok;

  ok = CHECK (align_rig (&r, &cfg, DISK_SIZE, TB_TRIM_PASS));
  ok = ok && CHECK (queue_zero (r.d[0].q, NULL, 10000, 1000, 0) == 0)
    && CHECK (queue_flush (r.d[0].q, NULL) == 0);
  ok = ok && CHECK (saw_call (&r, TB_ZERO, BLOCK, BLOCK))
    && CHECK (saw_call (&r, TB_PWRITEV, 0, BLOCK))
    && CHECK (saw_call (&r, TB_PWRITEV, 2 * BLOCK, BLOCK));
  ok = ok && CHECK (holds (&r, 'x', 1000, 0)) && CHECK (holds (&r, 0, 10000, 1000))
    && CHECK (holds (&r, 'x', FILLED - 11000, 11000));
  ok &= contract_kept ();
  test_rig_stop (&r);
  tap_ok (ok, "an unaligned zero: edges rewritten with zeroes, middle"
          " zeroed%s", MODE);
}

/* A trim of odd bounds.  Where trimmed bytes must read as zeroes, its
 * partial blocks are zeroed; where a trim is only advice, they are left
 * alone and only the whole blocks are trimmed, without reading anything.
 */
static void
test_trim_unaligned (enum tb_trim trim)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  bool reads_zero = trim == TB_TRIM_PASS;
  struct test_rig r;
  uint64_t reads;
  bool ok;

  ok = CHECK (align_rig (&r, &cfg, DISK_SIZE, trim));
  reads = test_backend_entered (r.d[0].tb, TB_PREAD);
  ok = ok && CHECK (queue_trim (r.d[0].q, NULL, 10000, 1000, 0) == 0)
    && CHECK (queue_flush (r.d[0].q, NULL) == 0);
  ok = ok && CHECK (saw_call (&r, TB_TRIM, BLOCK, BLOCK))
    && CHECK (calls_since (&r, TB_PREAD, reads) == (reads_zero ? 2 : 0));
  ok = ok && CHECK (holds (&r, 'x', 1000, 0))
    && CHECK (holds (&r, 'x', FILLED - 11000, 11000));
  if (reads_zero)
    ok = ok && CHECK (holds (&r, 0, 10000, 1000));
  else
    ok = ok && CHECK (holds (&r, 'x', BLOCK - 1000, 1000))
      && CHECK (holds (&r, 'x', 11000 - 2 * BLOCK, 2 * BLOCK));
  ok = ok && CHECK (test_stats (r.d[0].q).read_modify_writes
                    == (reads_zero ? 1 : 0));
  ok &= contract_kept ();
  test_rig_stop (&r);
  tap_ok (ok, "an unaligned trim, %s: %s%s",
          reads_zero ? "trimmed bytes read as zeroes" : "trim is advice",
          reads_zero ? "edges zeroed" : "edges untouched, nothing read",
          MODE);
}

/* An unaligned read goes through whole blocks, and what is queued still
 * lies over it.
 */
static void
test_read_unaligned_overlay (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  unsigned char got[4000];
  struct test_rig r;
  bool ok;

  ok = CHECK (align_rig (&r, &cfg, DISK_SIZE, TB_TRIM_PASS));
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'q', 100, 1500, 0) == 0);
  ok = ok && CHECK (test_stats (r.d[0].q).queued_requests == 1);
  ok = ok && CHECK (queue_pread (r.d[0].q, got, sizeof got, 1000) == 0)
    && CHECK (test_buffer_is (got, 'x', 500, 1000, "read")
              && test_buffer_is (got + 500, 'q', 100, 1500, "read")
              && test_buffer_is (got + 600, 'x', 3400, 1600, "read"));
  ok &= contract_kept ();
  test_rig_stop (&r);
  tap_ok (ok, "an unaligned read: whole blocks from the backend, the queue"
          " laid over them%s", MODE);
}

/* A FUA write of 1 KiB: answered once its block is written and a backend
 * flush has followed that write.
 */
static void
test_fua_inside_block (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  struct tb_call calls[512];
  struct test_rig r;
  size_t n, last_write = 0, last_flush = 0;
  bool ok;

  ok = CHECK (align_rig (&r, &cfg, DISK_SIZE, TB_TRIM_PASS));
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'f', KiB, 5000,
                                     REQ_FUA) == 0);
  ok = ok && CHECK (holds (&r, 'f', KiB, 5000))
    && CHECK (holds (&r, 'x', 5000 - BLOCK, BLOCK))
    && CHECK (holds (&r, 'x', 2 * BLOCK - 6024, 6024));
  n = test_backend_calls (r.d[0].tb, TB_OPS, calls, 512);
  for (size_t i = 0; ok && i < n && i < 512; i++) {
    if (calls[i].op == TB_PWRITEV && calls[i].offset == BLOCK)
      last_write = i;
    if (calls[i].op == TB_FLUSH)
      last_flush = i;
  }
  ok = ok && CHECK (n <= 512) && CHECK (last_write > 0)
    && CHECK (last_flush > last_write);
  ok &= contract_kept ();
  test_rig_stop (&r);
  tap_ok (ok, "a 1 KiB FUA write: its block written, then a backend"
          " flush, before the answer%s", MODE);
}

/* A last block that the disk's size cuts short cannot be rewritten whole:
 * requests that reach into it fail, those before it are served.
 */
static void
test_partial_last_block (void)
{
  struct queue_config cfg = test_config (HOUR, 1000);
  uint64_t size = 64 * KiB + 1000;
  char buf[10];
  struct test_rig r;
  bool ok;

  ok = CHECK (align_rig (&r, &cfg, size, TB_TRIM_PASS));
  errno = 0;
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'e', 10, 64 * KiB + 10,
                                     0) == -1 && errno == EINVAL);
  errno = 0;
  ok = ok && CHECK (queue_pread (r.d[0].q, buf, 10, 64 * KiB - 5) == -1
                    && errno == EINVAL);
  ok = ok && CHECK (test_write_fill (r.d[0].q, NULL, 'e', 10, 64 * KiB - 10,
                                     0) == 0)
    && CHECK (queue_flush (r.d[0].q, NULL) == 0)
    && CHECK (holds (&r, 'e', 10, 64 * KiB - 10));
  ok &= contract_kept ();
  test_rig_stop (&r);
  tap_ok (ok, "a request into the cut-short last block fails with EINVAL");
}

static void (*const every_mode[]) (void) = {
  test_write_inside_block,
  test_write_across_blocks,
  test_rewrites_of_one_block_never_overlap,
  test_zero_unaligned,
  test_read_unaligned_overlay,
  test_fua_inside_block,
};

int
main (void)
{
  test_each_mode (every_mode, sizeof every_mode / sizeof every_mode[0],
                  &async_mode, &writers_mode, ASYNC_IN_FLIGHT, WRITERS);
  test_pieces_coalesce (&elevator_deadline);
  test_pieces_coalesce (&elevator_noop);
  test_trim_unaligned (TB_TRIM_PASS);
  test_trim_unaligned (TB_TRIM_NOOP);
  test_partial_last_block ();
  tap_plan (tap_count);
  return tap_done ();
}
