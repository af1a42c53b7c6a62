/* plugq: where a queue holds data its backend does not have yet, for
 * reads that take no lock.
 *
 * A read lays every piece queued or in flight over its range on what
 * the backend returns (queue_read.c), and finding them takes the queue
 * lock.  Under a write stream that lock is busy, and where the backend
 * answers reads from memory (the page cache) waiting for it was most of
 * a read's time (docs/design.md, "Reads and extents look at the
 * queue").  Yet a random read rarely touches the few megabytes a stream
 * holds.  So the disk is cut into PRESENCE_REGIONS regions of
 * 2^presence_shift bytes, each counting the present pieces that reach
 * into it (present: counted in pieces_present, queued, in flight or
 * failing); a read whose regions all count 0 reads the backend without
 * the lock, as one that finds no piece present at all.
 *
 * What keeps that safe:
 *   - A piece counts in every region from its first byte's to its last
 *     byte's when it is linked (presence_add, from queue_link), and in
 *     any it grows into (presence_grow), under the lock that makes it
 *     present, so before its request is answered (as pieces_present).
 *     It records the regions it counts in and leaves exactly those when
 *     it is gone (presence_drop, from piece_gone): once its data is on
 *     the backend, or once the newer piece that covers it counts
 *     (pieces_superseded_done).  A piece that shrinks keeps its regions:
 *     a count may be high, never low.
 *   - Only lock holders change counts, so a change is a load and a
 *     store.  The store that lowers a count is a release and a reader's
 *     load an acquire: a reader that sees the lower count sees the
 *     backend write that allowed it.  A newer piece's count in a region
 *     rises before an older piece's there falls, and one thread's stores
 *     to one count are seen in that order, so no reader sees the older
 *     gone and the newer not yet there.
 *   - Offsets past the last region (a disk grown live) count in the
 *     last one.
 */
#include <config.h>

#include "queue_internal.h"

/* The smallest region: a disk of up to PRESENCE_REGIONS times this has
 * regions this large.
 */
#define PRESENCE_MIN_SHIFT 16

void
presence_init (struct queue *q, uint64_t size)
{
  unsigned shift = PRESENCE_MIN_SHIFT;

  while (shift < 62 && (size >> shift) > PRESENCE_REGIONS)
    shift++;
  q->presence_shift = shift;
  for (unsigned i = 0; i < PRESENCE_REGIONS; i++)
    atomic_init (&q->presence[i], 0);
}

bool
presence_clear (const struct queue *q, uint64_t offset, uint64_t count)
{
  unsigned last = last_region_of (q, offset, count);

  for (unsigned i = region_of (q, offset); i <= last; i++)
    if (atomic_load_explicit (&q->presence[i], memory_order_acquire))
      return false;
  return true;
}
