/* plugq: sequential streams, told from random writes, and their writes
 * appended to the queued piece they continue.
 *
 * Telling a stream: the queue remembers where recent writes ended
 * (note_write_end, whichever way each went), each end in the one of
 * RECENT_END_SLOTS slots it hashes to, which keeps the newest end that
 * hashed there; a write that starts at a remembered end continues a
 * stream.  One load tells it, so asking costs next to nothing to a
 * write going around the queue (queue_bypass.c), which asks in order to
 * leave streams to the queue.  A stream stays told while the writes
 * between two of its own miss its slot.  Few slots keep random writes
 * from being taken for streams: a random write starts at a remembered
 * end by chance once in (disk blocks / slots).
 *
 * Appending: the kernel merges a bio into a request already waiting in
 * the plug list (blk_attempt_plug_merge, a back merge) instead of making
 * a request of its own.  The queue does the same for the next write of
 * a stream: its bytes are copied after the data of the newest queued
 * piece, which grows, instead of into a buffer and a piece of their own
 * that the trees, the elevator and a batch would each handle once more.
 * A write that continues a stream gets a buffer with room for more, up
 * to the next multiple of 64 KiB or max-merge (stream_room), so the
 * writes after it can be appended.
 *
 * A write is appended (append_to_stream) when:
 *   - it waits for nothing (ack=queued, not FUA): one piece then answers
 *     no one, and may carry several requests;
 *   - the disk merges at all (unplug-thresh > 1);
 *   - the newest queued piece is a write nobody waits for, ends where
 *     this one starts, and ends its buffer, which has room for the bytes
 *     (can_take_appends);
 *   - the grown piece stays within max-merge, and no queued piece
 *     overlaps the write (none overlaps the newest piece, so only the
 *     next one in offset order can).
 * The newest piece only: a write merges with the arrival before it, as
 * noop promises, and the hint q->append_end (that piece's end, 0 when it
 * takes none) lets every other write pass by without the lock.
 *
 * On a disk that wants aligned memory (O_DIRECT) a stream's buffer is
 * aligned like any other, so the pieces of a stream of aligned writes
 * start aligned and go out without a bounce buffer; a sub-block stream
 * grows one piece, whose partial blocks queue_align.c completes.
 *
 * What stays true: the write counts as a request and as a merge (the
 * kernel counts a bio merge so too), and towards unplug-thresh
 * (appended_requests); its bytes count in queue-bytes; the piece keeps
 * its sequence number, deadline and place, so the bytes only go out
 * sooner than their own piece would have, and a FLUSH covering it writes
 * them too, which it may.  A reader that took the piece's buffer earlier
 * reads only bytes that were there then.
 */
#include <config.h>

#include "buffers/data_buffer.h"
#include "common/minmax.h"
#include "queue_internal.h"

/* ------------------------------------------------------------ telling */

/* The slot an end is remembered in: the top bits of a multiplicative
 * hash of its 512-byte sector, so ends of neighbouring streams spread.
 */
static unsigned
end_slot (uint64_t end)
{
  return (unsigned) (((end >> 9) * UINT64_C (0x9e3779b97f4a7c15))
                     >> (64 - __builtin_ctz (RECENT_END_SLOTS)));
}

/* Remembers where a write ends, whichever way it goes.  The ends are
 * atomic so a write can look before it takes the lock; they change under
 * it.
 */
void
note_write_end (struct queue *q, uint64_t end)
{
  queue_assert_locked (q);
  atomic_store_explicit (&q->recent_ends[end_slot (end)], end,
                         memory_order_relaxed);
}

/* Whether offset is where a recent write ended.  Nothing ends at 0,
 * which is also what a slot not yet used holds.  Without the lock, an
 * answer that is a moment old: a hint.
 */
bool
continues_recent_write (const struct queue *q, uint64_t offset)
{
  return offset != 0
    && atomic_load_explicit (&q->recent_ends[end_slot (offset)],
                             memory_order_relaxed) == offset;
}

/* ------------------------------------------------------------ appending */

static bool
appends_allowed (const struct queue *q, unsigned flags)
{
  return !(flags & REQ_FUA) && q->cfg.ack == ACK_QUEUED
    && q->cfg.unplug_thresh > 1;
}

/* Without the lock: the room for a new write's buffer, when it continues
 * a stream whose next writes may be appended to it; else 0.  The room
 * ends on a multiple of the grain (STREAM_ROOM, or max-merge if less),
 * so no piece of a stream crosses one: pieces of an aligned stream then
 * make batches of exactly max-merge, where pieces cut anywhere would
 * leave a batch short each time the next piece does not fit.  A piece
 * that starts just short of a multiple (writes arriving out of order
 * start new pieces anywhere) runs on to the next one, where max-merge
 * has room for two grains.
 */
uint32_t
stream_room (const struct queue *q, uint32_t count, uint64_t offset,
             unsigned flags)
{
  uint64_t grain = MIN (q->merge_limit, STREAM_ROOM);
  uint64_t room = grain - offset % grain;

  if (room < grain / 2 && 2 * grain <= q->merge_limit)
    room += grain;
  if (room <= count || !appends_allowed (q, flags)
      || !continues_recent_write (q, offset))
    return 0;
  return (uint32_t) room;
}

/* Without the lock: whether the newest queued piece looked able to take
 * this write.  append_to_stream decides.
 */
bool
append_may_fit (const struct queue *q, uint64_t offset, unsigned flags)
{
  return offset != 0 && appends_allowed (q, flags)
    && atomic_load_explicit (&q->append_end, memory_order_relaxed) == offset;
}

static bool
can_take_appends (const struct piece *p)
{
  return p->kind == OP_WRITE && p->waiter == NULL && p->buf != NULL
    && p->buf_offset + p->length == p->buf->size
    && p->buf->room > p->buf->size;
}

/* p is now the newest queued piece, just queued or grown. */
void
note_newest_piece (struct queue *q, const struct piece *p)
{
  queue_assert_locked (q);
  atomic_store_explicit (&q->append_end,
                         can_take_appends (p) ? piece_end (p) : 0,
                         memory_order_relaxed);
}

/* p leaves the queue, or loses its end: if it was the newest piece, no
 * write is appended to it any more.
 */
void
forget_if_newest (struct queue *q, const struct piece *p)
{
  queue_assert_locked (q);
  if (p == TAILQ_LAST (&q->by_age, piece_list))
    atomic_store_explicit (&q->append_end, 0, memory_order_relaxed);
}

/* The write, appended to the newest queued piece and counted, when that
 * piece may take it (the conditions above): true.  False, with nothing
 * changed, when it must be queued on its own.
 */
bool
append_to_stream (struct queue *q, struct session *s, const void *buf,
                  uint32_t count, uint64_t offset)
{
  struct piece *p = TAILQ_LAST (&q->by_age, piece_list);
  struct piece *next;

  queue_assert_locked (q);
  if (p == NULL || !can_take_appends (p) || piece_end (p) != offset
      || p->length + count > q->merge_limit
      || !data_buffer_fits (p->buf, count))
    return false;
  next = RB_NEXT (piece_tree, &q->by_offset, p);
  if (next && next->offset < offset + count)
    return false;
  data_buffer_append (p->buf, buf, count);
  piece_grow (q, p, count);
  note_request (q, s, OP_WRITE, count, offset, 0);
  q->stats.op[OP_WRITE].merges++;
  note_newest_piece (q, p);
  return true;
}
