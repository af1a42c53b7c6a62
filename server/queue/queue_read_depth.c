/* plugq: whether a backend queues reads, judged from their latency.
 *
 * A stream read waits to merge behind the read ahead of it
 * (queue_read_streams.c) only where waiting pays: where the backend
 * queues reads, so that a read at depth takes longer than one that
 * finds it free, and one larger read costs less than several.  A backend
 * that reads at depth about as fast as alone (a remote whose every read
 * costs its round trip, however many are in flight) has room for each
 * read: making one wait for the read ahead adds a round trip and halves
 * the depth the backend sees, as holding waiting writes did on free
 * slots (docs/design.md, "Reads in the elevator").
 *
 * From the reads that did not wait, arrival to answer, lock-free:
 *   - fastest: the fastest such read so far, what a read costs the
 *     backend unhindered;
 *   - at depth: a moving average (1/READ_DEPTH_WEIGHT per read) of those
 *     that arrived with READ_DEPTH_ACTIVE or more reads active
 *     (themselves included).
 * The backend queues reads when the average at depth is more than
 * READ_QUEUED_NUM / READ_QUEUED_DEN times the fastest.  Until both are
 * known, the average from READ_DEPTH_KNOWN reads at least, reads go at
 * once: the backend has to show that it queues them, which the first
 * reads at depth do, and one read held up by the scheduler (a loaded
 * machine, a sanitizer) shows nothing.  The fastest never rises: a backend
 * that has become slower for good is taken to queue reads, and its
 * streams merge.
 * Updates race benignly: a lost sample of an average changes nothing
 * that the next does not.
 */
#include <config.h>

#include "queue_internal.h"

#define READ_DEPTH_ACTIVE 4
#define READ_DEPTH_WEIGHT 8
#define READ_QUEUED_NUM 3
#define READ_QUEUED_DEN 2

static void
note_fastest_read (struct read_depth *d, uint64_t ns)
{
  uint64_t fastest = atomic_load_explicit (&d->fastest_ns,
                                           memory_order_relaxed);

  while ((fastest == 0 || ns < fastest)
         && !atomic_compare_exchange_weak_explicit (&d->fastest_ns, &fastest,
                                                    ns, memory_order_relaxed,
                                                    memory_order_relaxed))
    ;
}

static void
note_read_at_depth (struct read_depth *d, uint64_t ns)
{
  uint64_t avg = atomic_load_explicit (&d->at_depth_ns, memory_order_relaxed);

  if (avg == 0)
    avg = ns;
  else if (ns >= avg)
    avg += (ns - avg) / READ_DEPTH_WEIGHT;
  else
    avg -= (avg - ns) / READ_DEPTH_WEIGHT;
  atomic_store_explicit (&d->at_depth_ns, avg ? avg : 1,
                         memory_order_relaxed);
  if (atomic_load_explicit (&d->at_depth_reads, memory_order_relaxed)
      < READ_DEPTH_KNOWN)
    atomic_fetch_add_explicit (&d->at_depth_reads, 1, memory_order_relaxed);
}

void
read_depth_note (struct read_depth *d, unsigned active_at_arrival,
                 uint64_t latency_ns)
{
  if (latency_ns == 0)
    latency_ns = 1;             /* 0 means not known yet */
  note_fastest_read (d, latency_ns);
  if (active_at_arrival >= READ_DEPTH_ACTIVE)
    note_read_at_depth (d, latency_ns);
}

bool
read_depth_queues (const struct read_depth *d)
{
  uint64_t fastest = atomic_load_explicit (&d->fastest_ns,
                                           memory_order_relaxed);
  uint64_t at_depth = atomic_load_explicit (&d->at_depth_ns,
                                            memory_order_relaxed);

  if (fastest == 0 || at_depth == 0
      || atomic_load_explicit (&d->at_depth_reads, memory_order_relaxed)
         < READ_DEPTH_KNOWN)
    return false;
  return at_depth * READ_QUEUED_DEN > fastest * READ_QUEUED_NUM;
}
