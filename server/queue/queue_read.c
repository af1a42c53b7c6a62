/* plugq: reads and extents, laid over what the queue still holds.
 *
 * Reads never wait for the queue and never unplug it.  They snapshot,
 * under the lock, the pieces that overlap them (in flight first, then
 * queued: the newer layer), taking references on their buffers; read
 * the backend without the lock; then lay the snapshot over the result.
 * A piece that completes in between is already on the backend; one that
 * arrives in between is concurrent with the read, so either answer is
 * allowed.
 */
#include <config.h>

#include <errno.h>
#include <string.h>

#include "buffers/data_buffer.h"
#include "common/minmax.h"
#include "queue_internal.h"
#include "common/small_vec.h"

struct overlay {
  uint64_t offset, length;
  enum op_kind kind;
  struct data_buffer *buf;
  uint32_t buf_offset;
};

typedef SMALL_VEC (struct overlay, 8) overlay_set;

static int
overlay_add (overlay_set *set, const struct piece *p)
{
  if (small_vec_room_for_one (set) == -1)
    return -1;
  set->v[set->len++] = (struct overlay) {
    .offset = p->offset, .length = p->length, .kind = p->kind,
    .buf_offset = p->buf_offset,
    .buf = p->buf ? data_buffer_get (p->buf) : NULL,
  };
  return 0;
}

static void
overlay_free (overlay_set *set)
{
  for (size_t i = 0; i < set->len; i++)
    data_buffer_put (set->v[i].buf);
  small_vec_free (set);
}

/* Every piece of tree over [offset, end), in offset order. */
static int
collect_tree (struct piece_tree *tree, uint64_t offset, uint64_t end,
              overlay_set *set)
{
  struct piece *p = first_reaching (tree, offset);

  for (; p && p->offset < end; p = RB_NEXT (piece_tree, tree, p))
    if (overlay_add (set, p) == -1)
      return -1;
  return 0;
}

/* snapshot's work where pieces are present: every piece over
 * [offset, end), oldest layer first.  Pieces in flight are always older
 * than any queued piece they overlap (a queued piece older than them
 * would have been cut when they arrived), and never overlap each other
 * (overlaps_in_flight).  Takes and drops q->lock, unless no present
 * piece reaches the range's regions (queue_presence.c).
 */
static int
snapshot_present (struct queue *q, uint64_t offset, uint64_t end,
                  overlay_set *set)
{
  int r;

  if (presence_clear (q, offset, end - offset))
    return 0;                   /* nothing queued or in flight there */
  lock_acquire (&q->lock);
  r = collect_tree (&q->in_flight, offset, end, set);
  if (r == 0)
    r = collect_tree (&q->by_offset, offset, end, set);
  lock_release (&q->lock);
  if (r == -1) {
    overlay_free (set);
    errno = ENOMEM;
  }
  return r;
}

/* The pieces a read lays over the backend, into set.  Inline: a read of
 * a disk with nothing queued or in flight asks only pieces_present, and
 * out of line this cost such a read about 20 instructions (the cost
 * bench's W6).
 */
static inline __attribute__ ((always_inline)) int
snapshot (struct queue *q, uint64_t offset, uint64_t end, overlay_set *set)
{
  small_vec_init (set);
  if (atomic_load_explicit (&q->pieces_present, memory_order_acquire) == 0)
    return 0;                   /* nothing queued or in flight */
  return snapshot_present (q, offset, end, set);
}

static void
overlay_apply_data (const overlay_set *set, bool trim_reads_zero,
                    unsigned char *buf, uint64_t offset, uint64_t end)
{
  for (size_t i = 0; i < set->len; i++) {
    const struct overlay *o = &set->v[i];
    uint64_t from = MAX (o->offset, offset);
    uint64_t to = MIN (o->offset + o->length, end);

    if (from >= to)
      continue;
    if (o->kind == OP_WRITE)
      memcpy (buf + (from - offset),
              o->buf->data + o->buf_offset + (from - o->offset), to - from);
    else if (o->kind == OP_ZERO || trim_reads_zero)
      memset (buf + (from - offset), 0, to - from);
  }
}

/* One backend read with the queue laid over it (counted by the caller,
 * queue_read_streams.c).
 */
int
read_overlaid (struct queue *q, void *buf, uint32_t count, uint64_t offset)
{
  overlay_set set;
  int r;

  if (snapshot (q, offset, offset + count, &set) == -1)
    return -1;
  r = read_backend (q, buf, count, offset);
  if (r == 0)
    overlay_apply_data (&set, q->backend->trim_reads_zero, buf, offset,
                        offset + count);
  overlay_free (&set);
  return r;
}

/* queue_extents, once the range is checked.  Queued data reads as data,
 * queued zeroes as zero; a queued trim may or may not punch a hole, so
 * it claims nothing.
 */
int
extents_overlaid (struct queue *q, uint64_t count, uint64_t offset,
                  struct extent_list *list)
{
  overlay_set set;
  uint64_t end = offset + count;
  int r;

  if (snapshot (q, offset, end, &set) == -1)
    return -1;
  r = q->backend->ops->extents (q->backend, count, offset, list);
  if (r == 0)
    extent_list_truncate (list, end);
  for (size_t i = 0; r == 0 && i < set.len; i++) {
    const struct overlay *o = &set.v[i];
    uint32_t type = o->kind == OP_ZERO ? EXTENT_ZERO : 0;

    r = extent_list_overlay (list, o->offset, o->length, type);
  }
  overlay_free (&set);
  return r;
}

