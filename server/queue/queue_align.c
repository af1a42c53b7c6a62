/* plugq: requests smaller than the block of a backend that needs aligned
 * I/O (min_block > 1: a direct=true file or block device).
 *
 * Such a disk still advertises a minimum block of 1, as qemu-nbd
 * --cache=none does, because clients that ignore block sizes exist.  Its
 * queue takes any request; this file makes every backend call whole
 * blocks:
 *
 *  - Pieces coalesce in the queue first.  A batch whose ends fall inside
 *    a block takes the queued pieces that continue it back to back, of
 *    its kind, up to the block boundary at either end (batch_align), so
 *    1 KiB writes that fill a block go out as one aligned write.
 *  - A batch still unaligned at an end is written by read-modify-write
 *    (batch_io_unaligned, unlocked): the partial block at each end is
 *    read from the backend, the batch's bytes (or zeroes) laid into it,
 *    and the block written whole; the aligned middle goes down as it is.
 *    A trim's partial blocks are zeroed when the disk promises that
 *    trimmed bytes read as zeroes, and left alone otherwise (a trim is
 *    advice).
 *  - Reads of a range that is not whole blocks go through an aligned
 *    bounce buffer (read_unaligned); the queue's overlay still applies
 *    on top (queue_read.c).
 *
 * The race, and why the in-flight rules keep it away.  Say batch A
 * carries [0, 1024) of a 4 KiB block and rewrites [0, 4096) from what it
 * read.  If batch B, [1024, 2048) of the same block, were in flight at
 * the same time, either rewrite would put back the other's old bytes: a
 * lost update.  And if A read its edges while another write over them
 * was in flight, A would write back stale bytes over that newer write.
 * So on such a backend a piece's in-flight range is the whole blocks it
 * touches: a batch is taken only when no piece in flight has bytes in
 * the blocks its pieces touch (overlaps_in_flight and
 * continuation_in_flight, queue_batch.c, round with block_mask).  As a
 * batch's pieces are back to back, the blocks they touch are exactly
 * the blocks it rewrites; two batches that share a block therefore
 * never run together, and while A runs nothing else writes its blocks,
 * so the edges it reads are current and what it writes back over them
 * is unchanged.  A queued piece over A's edges is left queued: A writes
 * back the old bytes under it, and it goes out after A (it waits for
 * A's block), with its own read of A's result.
 *
 * A read that meets A in flight reads, for A's edges, the same bytes
 * before, during and after A, and lays A's pieces over the rest, as for
 * any batch in flight.  A FUA or FLUSH waits for A's completion, which
 * comes after its last write returned, and then for a backend flush; a
 * batch that carries FUA itself (writes_carry_fua) writes every part
 * with FUA.  FUA and FLUSH mean what they always meant.
 *
 * Everything here runs only when block_mask is not 0; the queue's other
 * backends reach none of it (batch_io and read_backend test one field).
 */
#include <config.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/fd_io.h"
#include "buffers/iovec.h"
#include "common/minmax.h"
#include "queue_internal.h"

/* Reads through the bounce buffer go in chunks of at most this. */
#define READ_BOUNCE_MAX ((uint64_t) 1024 * 1024)

static uint64_t
block_size (const struct queue *q)
{
  return q->block_mask + 1;
}

/* What a bounce buffer of this backend is aligned to. */
static uint32_t
buffer_align (const struct queue *q)
{
  return MAX ((uint32_t) block_size (q), q->backend->buffer_align);
}

static uint64_t
batch_end (const struct batch *b)
{
  return b->offset + b->bytes;
}

/* ------------------------------------------------------------ taking */

/* Takes the queued pieces that continue b from its end to the end of
 * the block, while they may join it.
 */
static void
extend_back (struct queue *q, struct batch *b, uint64_t now)
{
  queue_assert_locked (q);
  while (block_down (q, batch_end (b)) != batch_end (b)) {
    uint64_t end = batch_end (b);
    struct piece *last = TAILQ_LAST (&b->pieces, piece_list);
    struct piece *next = first_reaching (&q->by_offset, end);

    if (next == NULL || next->offset != end || next->failing
        || !piece_can_follow (last, next) || !batch_may_grow (q, b, next)
        || in_flight_between (q, end, block_up (q, piece_end (next))))
      return;
    batch_add (q, b, next, now);
  }
}

/* The same before b's start, down to the start of its block. */
static void
extend_front (struct queue *q, struct batch *b, uint64_t now)
{
  queue_assert_locked (q);
  while (block_down (q, b->offset) != b->offset) {
    struct piece *first = TAILQ_FIRST (&b->pieces);
    struct piece *prev = first_reaching (&q->by_offset, b->offset - 1);

    if (prev == NULL || piece_end (prev) != b->offset || prev->failing
        || !piece_can_follow (prev, first) || !batch_may_grow (q, b, prev)
        || in_flight_between (q, block_down (q, prev->offset), b->offset))
      return;
    batch_add (q, b, prev, now);
    TAILQ_REMOVE (&b->pieces, prev, batch);
    TAILQ_INSERT_HEAD (&b->pieces, prev, batch);
    b->offset = prev->offset;
  }
}

/* Whether writing b out reads the blocks at its ends. */
static bool
reads_edges (const struct queue *q, const struct batch *b)
{
  return b->kind != OP_TRIM || q->backend->trim_reads_zero;
}

/* Just taken, still under the lock: b grows to block boundaries with
 * what is queued, and is marked for read-modify-write if it falls short
 * of them.
 */
void
batch_align (struct queue *q, struct batch *b, uint64_t now)
{
  queue_assert_locked (q);
  extend_back (q, b, now);
  extend_front (q, b, now);
  if (block_down (q, b->offset) == b->offset
      && block_down (q, batch_end (b)) == batch_end (b))
    return;
  b->unaligned = true;
  if (reads_edges (q, b))
    q->stats.read_modify_writes++;
}

/* ------------------------------------------------------------ writing */

/* The block at `block` with b's bytes of it laid in: read, filled with
 * b's data (or zeroes), written whole.  buf holds one block.
 */
static int
rewrite_block (struct backend *be, const struct batch *b, uint64_t block,
               char *buf)
{
  const struct queue *q = b->q;
  uint64_t from = MAX (block, b->offset);
  uint64_t to = MIN (block + block_size (q), batch_end (b));
  struct iovec v = { .iov_base = buf, .iov_len = block_size (q) };
  struct backend_io io = {
    .kind = OP_WRITE, .fua = b->io.fua, .iov = &v, .iovcnt = 1,
    .offset = block, .count = block_size (q),
  };

  if (be->ops->pread (be, buf, block_size (q), block) == -1)
    return -1;
  if (b->kind == OP_WRITE)
    iov_copy_out (buf + (from - block), b->io.iov, b->io.iovcnt,
                  from - b->offset, to - from);
  else
    memset (buf + (from - block), 0, to - from);
  return backend_io_wait (be, &io);
}

/* The blocks at b's ends, each once. */
static int
rewrite_edges (struct backend *be, const struct batch *b)
{
  const struct queue *q = b->q;
  uint64_t head = block_down (q, b->offset);
  uint64_t tail = block_down (q, batch_end (b) - 1);
  char *buf = alloc_aligned (block_size (q), buffer_align (q));
  int r = 0;

  if (buf == NULL)
    return -1;                  /* ENOMEM: the batch is tried again later */
  if (head != b->offset)
    r = rewrite_block (be, b, head, buf);
  if (r == 0 && block_up (q, batch_end (b)) != batch_end (b)
      && (tail != head || head == b->offset))
    r = rewrite_block (be, b, tail, buf);
  free (buf);
  return r;
}

/* The whole blocks [from, to) between b's partial ends, as b's own
 * kind.  b->iov is cut down to them in place: batch_prepare builds it
 * again for a retry.
 */
static int
write_middle (struct backend *be, struct batch *b, uint64_t from,
              uint64_t to)
{
  struct backend_io io = {
    .kind = b->kind, .fua = b->io.fua, .may_trim = b->may_trim,
    .offset = from, .count = to - from,
  };

  if (b->kind == OP_WRITE)
    io.iov = iov_cut (b->iov, &io.iovcnt, from - b->offset, to - from);
  return backend_io_wait (be, &io);
}

/* Unlocked, b in flight and prepared (batch_prepare): b written as whole
 * blocks.  As ops->io returns: an asynchronous backend's done is called
 * here, once everything is written.
 */
int
batch_io_unaligned (struct backend *be, struct batch *b)
{
  const struct queue *q = b->q;
  uint64_t from = block_up (q, b->offset);
  uint64_t to = block_down (q, batch_end (b));

  if (reads_edges (q, b) && rewrite_edges (be, b) == -1)
    return -1;
  if (from < to && write_middle (be, b, from, to) == -1)
    return -1;
  if (backend_is_async (be)) {
    b->io.done (&b->io, 0);
    return BACKEND_IO_STARTED;
  }
  return BACKEND_IO_DONE;
}

/* ------------------------------------------------------------ reading */

/* Unlocked: [offset, offset+count) of the backend, read as the whole
 * blocks that cover it through an aligned bounce buffer, a chunk at a
 * time.
 */
int
read_unaligned (struct queue *q, void *buf, uint32_t count, uint64_t offset)
{
  struct backend *be = q->backend;
  uint64_t lo = block_down (q, offset), hi = block_up (q, offset + count);
  uint64_t chunk = MIN (hi - lo, MAX (READ_BOUNCE_MAX, block_size (q)));
  char *out = buf;
  char *bounce = alloc_aligned (chunk, buffer_align (q));

  if (bounce == NULL)
    return -1;
  for (uint64_t pos = lo; pos < hi; pos += chunk) {
    uint64_t n = MIN (chunk, hi - pos);
    uint64_t from = MAX (pos, offset), to = MIN (pos + n, offset + count);

    if (be->ops->pread (be, bounce, n, pos) == -1) {
      int err = errno;

      free (bounce);
      errno = err;
      return -1;
    }
    memcpy (out + (from - offset), bounce + (from - pos), to - from);
  }
  free (bounce);
  return 0;
}
