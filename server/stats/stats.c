/* plugq: the names of the per-disk counters (the histograms are in stats.h). */

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
