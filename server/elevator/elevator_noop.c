/* plugq: the noop elevator: arrival order.
 *
 * No sorting; a piece is merged only with the piece that arrived right
 * after it, when that one continues it back to back (the kernel noop's
 * "merge with the newest request").  For backends that do their own
 * scheduling, where sorting only adds latency.
 */
#include <config.h>

#include "elevator.h"

static struct piece *
noop_first (struct elevator_state *e, uint64_t now_ns)
{
  return TAILQ_FIRST (e->by_age);
}

static struct piece *
noop_next (struct elevator_state *e, struct piece *prev)
{
  struct piece *p = TAILQ_NEXT (prev, by_age);

  return p && piece_can_follow (prev, p) ? p : NULL;
}

const struct elevator_ops elevator_noop = {
  .name = "noop",
  .help = "Arrival order, no sorting.",
  .first = noop_first,
  .next = noop_next,
};
