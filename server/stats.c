/* plugq: names and latency histograms for the per-disk counters. */

#include <stdint.h>

#include "stats.h"

/* Indexed by enum unplug_cause; these are also the JSON keys of the stats
 * file, so they never change once released.
 */
const char *const unplug_cause_names[UNPLUG_CAUSES] = {
  [UNPLUG_TIMER] = "timer",
  [UNPLUG_THRESHOLD] = "threshold",
  [UNPLUG_SYNC] = "sync",
  [UNPLUG_FLUSH] = "flush",
  [UNPLUG_FULL] = "full",
  [UNPLUG_DRAIN] = "drain",
};

const char *const op_kind_names[OP_KINDS] = {
  [OP_READ] = "read",
  [OP_WRITE] = "write",
  [OP_ZERO] = "zero",
  [OP_TRIM] = "trim",
};

/* Bucket 0 counts < 1 us, bucket i counts [2^(i-1), 2^i) us: i is the
 * bit length of the value in microseconds.  Everything from 2^26 us
 * (about 67 s) up lands in the last bucket.
 */
void
latency_record (struct latency_histogram *h, uint64_t ns)
{
  uint64_t us = ns / 1000;
  unsigned i = us == 0 ? 0 : 64 - __builtin_clzll (us);

  if (i >= LATENCY_BUCKETS)
    i = LATENCY_BUCKETS - 1;
  h->bucket[i]++;
  h->count++;
  h->total_us += us;
}
