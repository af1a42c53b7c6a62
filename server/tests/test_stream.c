/* plugq: unit tests for sequential streams (queue_stream.c): the writes
 * of a stream appended to the newest queued piece.
 *
 *  - A stream's writes after its second are appended to the second's
 *    piece: two pieces hold sixteen requests, which count as queued
 *    requests, as queued bytes and as merges, and go out as one write.
 *  - So they are on a backend that wants aligned memory, into aligned
 *    buffers.
 *  - A stream's pieces end on multiples of 64 KiB (one starting just
 *    short of a multiple runs on to the next).
 *  - Reads see appended bytes before they are written out; a newer write
 *    over some of them cuts them like any queued bytes.
 *  - unplug-thresh counts pieces, not appended requests, and a stream
 *    unplugs at max-merge bytes; on a backend that writes to memory it
 *    counts every request.
 *  - Only the newest piece takes appends: a write that continues an
 *    older piece is a piece of its own, as noop promises; nor does a
 *    write over bytes an older queued piece holds, which it must cut.
 *  - Writes that wait (ack=dispatched, FUA) and unplug-thresh=1 never
 *    append.
 *  - A piece grows no larger than max-merge.
 *
 * Every case holds its writes behind an hour's plug on a backend that
 * does not write to memory, so nothing goes around the queue and nothing
 * is written before a FLUSH.
 */

#include <config.h>

#include <inttypes.h>
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
#define DISK_SIZE (1024 * KiB)
#define BLOCK (4 * KiB)
#define MAX_CALLS 64

static bool
rig_start (struct test_rig *r, const struct queue_config *cfg)
{
  return test_rig_one (r, cfg, DISK_SIZE, 0, 0);
}

/* One block of c at block number i. */
static bool
write_block (struct queue *q, int c, uint64_t i, unsigned flags)
{
  return test_write_fill (q, NULL, c, BLOCK, i * BLOCK, flags) == 0;
}

/* Blocks [from, to) of 'a' + i % 26, in order. */
static bool
write_blocks (struct queue *q, int from, int to, unsigned flags)
{
  for (int i = from; i < to; i++)
    if (!CHECK (write_block (q, 'a' + i % 26, i, flags)))
      return false;
  return true;
}

/* Whether the backend holds blocks [from, to) as write_blocks wrote
 * them.
 */
static bool
blocks_landed (struct test_backend *tb, int from, int to)
{
  for (int i = from; i < to; i++)
    if (!CHECK (test_backend_holds (tb, 'a' + i % 26, BLOCK, i * BLOCK)))
      return false;
  return true;
}

/* Pieces queued, requests appended to them. */
static void
queue_shape (struct queue *q, uint32_t *pieces, uint32_t *appended)
{
  lock_acquire (&q->lock);
  *pieces = q->nr_queued;
  *appended = q->appended_requests;
  lock_release (&q->lock);
}

static size_t
backend_writes (struct test_disk *d, struct tb_call *calls)
{
  return test_backend_calls (d->tb, TB_PWRITEV, calls, MAX_CALLS);
}

/* ------------------------------------------------------------ appending */

static void
test_stream_appends (void)
{
  struct queue_config cfg = test_config (TEST_HOUR, 1000);
  struct tb_call calls[MAX_CALLS];
  struct queue_stats st;
  struct test_rig r;
  uint32_t pieces = 0, appended = 0;
  size_t n = 0;
  bool ok = CHECK (rig_start (&r, &cfg));

  ok = ok && write_blocks (r.d[0].q, 0, 16, 0);
  if (ok) {
    queue_shape (r.d[0].q, &pieces, &appended);
    st = test_stats (r.d[0].q);
    /* The first write is no stream yet; the second gets a buffer with
     * room, and the other fourteen are appended to it.
     */
    ok = CHECK (pieces == 2) && CHECK (appended == 14)
      && CHECK (st.queued_requests == 16)
      && CHECK (st.queued_bytes == 16 * BLOCK)
      && CHECK (st.op[OP_WRITE].requests == 16)
      && CHECK (st.op[OP_WRITE].merges == 14)
      && CHECK (backend_writes (&r.d[0], calls) == 0);
  }
  ok = ok && CHECK (queue_flush (r.d[0].q, NULL) == 0);
  if (ok) {
    n = backend_writes (&r.d[0], calls);
    st = test_stats (r.d[0].q);
    ok = CHECK (n == 1) && CHECK (calls[0].offset == 0)
      && CHECK (calls[0].count == 16 * BLOCK)
      && CHECK (calls[0].iovcnt == 2)
      && CHECK (st.op[OP_WRITE].merges == 15)
      && CHECK (st.op[OP_WRITE].backend_ops == 1)
      && CHECK (st.queued_requests == 0);
  }
  ok = ok && blocks_landed (r.d[0].tb, 0, 16);
  test_rig_stop (&r);
  tap_ok (ok, "a stream's writes are appended to one queued piece: 16"
          " requests in 2 pieces, one backend write (%zu)", n);
}

/* On a backend that wants aligned memory (O_DIRECT), a stream's writes
 * are appended as on any other, into an aligned buffer: its merged
 * write goes out from aligned vectors, with no bounce.
 */
static void
test_aligned_stream_appends (void)
{
  struct queue_config cfg = test_config (TEST_HOUR, 1000);
  const struct test_shape aligned = { .buffer_align = BLOCK };
  struct tb_call calls[MAX_CALLS];
  struct test_rig r;
  uint32_t pieces = 0, appended = 0;
  size_t n = 0;
  bool ok = CHECK (test_rig_shaped (&r, &cfg, DISK_SIZE, &aligned));

  ok = ok && write_blocks (r.d[0].q, 0, 8, 0);
  if (ok) {
    queue_shape (r.d[0].q, &pieces, &appended);
    ok = CHECK (pieces == 2) && CHECK (appended == 6);
  }
  ok = ok && CHECK (queue_flush (r.d[0].q, NULL) == 0);
  if (ok) {
    n = backend_writes (&r.d[0], calls);
    ok = CHECK (n == 1) && CHECK (calls[0].count == 8 * BLOCK)
      && CHECK (calls[0].iovcnt == 2) && CHECK (calls[0].memory_aligned);
  }
  ok = ok && blocks_landed (r.d[0].tb, 0, 8);
  test_rig_stop (&r);
  tap_ok (ok, "buffer_align 4096: 8 writes of a stream in 2 pieces, one"
          " backend write from aligned memory (%zu)", n);
}

/* Writes blocks [from, to) of 'a' + i % 26 in order; whether the queue
 * then holds want_pieces pieces with want_appended requests appended.
 */
static bool
stream_shape (struct queue *q, int from, int to, uint32_t want_pieces,
              uint32_t want_appended)
{
  uint32_t pieces, appended;

  if (!write_blocks (q, from, to, 0))
    return false;
  queue_shape (q, &pieces, &appended);
  return CHECK (pieces == want_pieces) && CHECK (appended == want_appended);
}

/* Pieces of a stream end on multiples of 64 KiB; one that would start
 * just short of one runs on to the next instead of taking a few bytes.
 */
static void
test_pieces_end_on_grain (void)
{
  struct queue_config cfg = test_config (TEST_HOUR, 1000);
  struct test_rig r;
  bool ok = CHECK (rig_start (&r, &cfg));

  /* From 56 KiB: the second write starts 4 KiB short of 64 KiB. */
  ok = ok && stream_shape (r.d[0].q, 14, 21, 2, 5);
  /* 32 more fill the second piece to 128 KiB, a third to 192 KiB, and
   * start a fourth.
   */
  ok = ok && stream_shape (r.d[0].q, 21, 53, 4, 35);
  ok = ok && CHECK (queue_flush (r.d[0].q, NULL) == 0);
  ok = ok && blocks_landed (r.d[0].tb, 14, 53);
  test_rig_stop (&r);
  tap_ok (ok, "a stream's pieces end on multiples of 64 KiB, and one"
          " starting just short of one runs on to the next");
}

static void
test_reads_and_cuts (void)
{
  struct queue_config cfg = test_config (TEST_HOUR, 1000);
  struct test_rig r;
  uint32_t pieces = 0, appended = 0;
  bool ok = CHECK (rig_start (&r, &cfg));

  ok = ok && write_blocks (r.d[0].q, 0, 4, 0);
  for (int i = 0; ok && i < 4; i++)
    ok = CHECK (test_queue_reads_as (r.d[0].q, 'a' + i, BLOCK, i * BLOCK));
  /* 'z' over the third block cuts the piece it was appended to. */
  ok = ok && CHECK (write_block (r.d[0].q, 'z', 2, 0));
  if (ok) {
    queue_shape (r.d[0].q, &pieces, &appended);
    ok = CHECK (test_stats (r.d[0].q).queued_bytes == 4 * BLOCK)
      && CHECK (test_queue_reads_as (r.d[0].q, 'z', BLOCK, 2 * BLOCK))
      && CHECK (test_queue_reads_as (r.d[0].q, 'd', BLOCK, 3 * BLOCK));
  }
  ok = ok && CHECK (queue_flush (r.d[0].q, NULL) == 0)
    && CHECK (test_backend_holds (r.d[0].tb, 'a', BLOCK, 0))
    && CHECK (test_backend_holds (r.d[0].tb, 'b', BLOCK, BLOCK))
    && CHECK (test_backend_holds (r.d[0].tb, 'z', BLOCK, 2 * BLOCK))
    && CHECK (test_backend_holds (r.d[0].tb, 'd', BLOCK, 3 * BLOCK));
  test_rig_stop (&r);
  tap_ok (ok, "appended bytes read back before they are written, and a"
          " newer write over some of them wins (%" PRIu32 " pieces)",
          pieces);
}

/* The kernel's plug counts requests, not the bios merged into them:
 * unplug-thresh counts pieces, and a stream's appended writes count
 * towards max-merge bytes only.
 */
static void
test_thresh_counts_pieces (void)
{
  struct queue_config cfg = test_config (TEST_HOUR, 4);
  struct test_rig r;
  uint32_t pieces = 0, appended = 0;
  bool ok;

  cfg.max_merge = 16 * BLOCK;
  ok = CHECK (rig_start (&r, &cfg)) && write_blocks (r.d[0].q, 0, 8, 0);
  if (ok)
    queue_shape (r.d[0].q, &pieces, &appended);
  ok = ok && CHECK (pieces == 2) && CHECK (appended == 6)
    && CHECK (test_stats (r.d[0].q).unplugs[UNPLUG_THRESHOLD] == 0)
    /* Two random pieces make four. */
    && CHECK (write_block (r.d[0].q, 'x', 100, 0))
    && CHECK (test_stats (r.d[0].q).unplugs[UNPLUG_THRESHOLD] == 0)
    && CHECK (write_block (r.d[0].q, 'y', 200, 0))
    && CHECK (test_stats (r.d[0].q).unplugs[UNPLUG_THRESHOLD] == 1)
    && CHECK (queue_flush (r.d[0].q, NULL) == 0)
    /* A stream alone unplugs once max-merge bytes are queued. */
    && write_blocks (r.d[0].q, 16, 31, 0)
    && CHECK (test_stats (r.d[0].q).unplugs[UNPLUG_THRESHOLD] == 1)
    && write_blocks (r.d[0].q, 31, 32, 0)
    && CHECK (test_stats (r.d[0].q).unplugs[UNPLUG_THRESHOLD] == 2)
    && CHECK (queue_flush (r.d[0].q, NULL) == 0)
    && blocks_landed (r.d[0].tb, 0, 8) && blocks_landed (r.d[0].tb, 16, 32)
    && CHECK (test_backend_holds (r.d[0].tb, 'y', BLOCK, 200 * BLOCK));
  test_rig_stop (&r);
  tap_ok (ok, "unplug-thresh=4 counts pieces: 8 stream writes in 2 pieces"
          " stay plugged, 2 random writes more unplug; a stream alone"
          " unplugs at max-merge bytes");
}

/* On a backend whose writes only reach memory, a write-out costs next to
 * nothing per operation: there unplug-thresh counts every request.
 */
static void
test_thresh_counts_appended_in_memory (void)
{
  struct queue_config cfg = test_config (TEST_HOUR, 4);
  const struct test_shape shape = { .writes_to_memory = true };
  struct test_rig r;
  bool ok;

  cfg.bypass = false;
  ok = CHECK (test_rig_shaped (&r, &cfg, DISK_SIZE, &shape))
    && write_blocks (r.d[0].q, 0, 3, 0)
    && CHECK (test_stats (r.d[0].q).unplugs[UNPLUG_THRESHOLD] == 0)
    && write_blocks (r.d[0].q, 3, 4, 0)
    && CHECK (test_stats (r.d[0].q).unplugs[UNPLUG_THRESHOLD] == 1)
    && CHECK (queue_flush (r.d[0].q, NULL) == 0)
    && blocks_landed (r.d[0].tb, 0, 4);
  test_rig_stop (&r);
  tap_ok (ok, "unplug-thresh=4 on a backend that writes to memory counts"
          " appended requests: the 4th write of a stream unplugs");
}

/* ------------------------------------------------------------ not appended */

/* One block of chars[i] at blocks[i] for each of n writes, none of them
 * appended, in want_pieces pieces; the newest write of each block wins.
 */
static void
test_not_appended (const uint64_t *blocks, const char *chars, int n,
                   uint32_t want_pieces, const char *what)
{
  struct queue_config cfg = test_config (TEST_HOUR, 1000);
  struct test_rig r;
  uint32_t pieces = 0, appended = 0;
  bool ok = CHECK (rig_start (&r, &cfg));

  for (int i = 0; ok && i < n; i++)
    ok = CHECK (write_block (r.d[0].q, chars[i], blocks[i], 0));
  if (ok) {
    queue_shape (r.d[0].q, &pieces, &appended);
    ok = CHECK (pieces == want_pieces) && CHECK (appended == 0);
  }
  ok = ok && CHECK (queue_flush (r.d[0].q, NULL) == 0);
  for (int i = 0; ok && i < n; i++) {
    bool newest = true;

    for (int k = i + 1; k < n; k++)
      newest &= blocks[k] != blocks[i];
    ok = !newest || CHECK (test_backend_holds (r.d[0].tb, chars[i], BLOCK,
                                               blocks[i] * BLOCK));
  }
  test_rig_stop (&r);
  tap_ok (ok, "%s", what);
}

static void
test_no_append (enum ack_mode ack, uint32_t thresh, unsigned flags,
                const char *what)
{
  struct queue_config cfg = test_config (TEST_HOUR, thresh);
  struct test_rig r;
  uint32_t pieces = 0, appended = 0;
  bool ok;

  cfg.ack = ack;
  ok = CHECK (rig_start (&r, &cfg));
  ok = ok && write_blocks (r.d[0].q, 0, 4, flags);
  if (ok) {
    queue_shape (r.d[0].q, &pieces, &appended);
    ok = CHECK (appended == 0)
      && CHECK (test_stats (r.d[0].q).op[OP_WRITE].requests == 4);
  }
  ok = ok && CHECK (queue_flush (r.d[0].q, NULL) == 0);
  ok = ok && blocks_landed (r.d[0].tb, 0, 4);
  test_rig_stop (&r);
  tap_ok (ok, "%s: nothing is appended", what);
}

static void
test_max_merge_bounds_growth (void)
{
  struct queue_config cfg = test_config (TEST_HOUR, 1000);
  struct tb_call calls[MAX_CALLS];
  struct test_rig r;
  struct queue_stats st;
  size_t n = 0;
  bool ok;

  /* Each max-merge of queued bytes unplugs, as it does without appends. */
  cfg.max_merge = 4 * BLOCK;
  ok = CHECK (rig_start (&r, &cfg));
  ok = ok && write_blocks (r.d[0].q, 0, 12, 0);
  ok = ok && CHECK (queue_flush (r.d[0].q, NULL) == 0);
  if (ok) {
    n = backend_writes (&r.d[0], calls);
    st = test_stats (r.d[0].q);
    for (size_t i = 0; i < n; i++)
      ok &= CHECK (calls[i].count <= 4 * BLOCK);
    ok &= CHECK (n >= 3)
      && CHECK (st.op[OP_WRITE].merges == 12 - st.op[OP_WRITE].backend_ops);
  }
  ok = ok && blocks_landed (r.d[0].tb, 0, 12);
  test_rig_stop (&r);
  tap_ok (ok, "pieces grow no larger than max-merge (%zu backend writes)",
          n);
}

int
main (void)
{
  tap_plan (12);
  test_stream_appends ();
  test_aligned_stream_appends ();
  test_pieces_end_on_grain ();
  test_reads_and_cuts ();
  test_thresh_counts_pieces ();
  test_thresh_counts_appended_in_memory ();
  test_not_appended ((const uint64_t[]) { 0, 1, 100, 2 }, "abrc", 4, 4,
                     "a write that continues an older piece than the"
                     " newest is a piece of its own");
  /* An older queued piece inside the write's bytes: the write must cut
   * it, not grow the newest piece over it.
   */
  test_not_appended ((const uint64_t[]) { 2, 0, 1, 2 }, "qabc", 4, 3,
                     "a write over an older queued piece cuts it and is not"
                     " appended");
  test_no_append (ACK_DISPATCHED, 1000, 0, "ack=dispatched");
  test_no_append (ACK_QUEUED, 1000, REQ_FUA, "FUA writes");
  test_no_append (ACK_QUEUED, 1, 0, "unplug-thresh=1");
  test_max_merge_bounds_growth ();
  return tap_done ();
}
