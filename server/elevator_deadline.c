/* plugq: the deadline elevator.
 *
 * One ascending sweep by offset from where the last dispatch ended,
 * wrapping to the lowest offset (C-LOOK, the kernel deadline's "one way
 * elevator"), so sequential streams go out in order and merge.  The
 * sweep gives way to the oldest piece once it has waited past its
 * deadline, so a stream that keeps the queue busy cannot starve a piece
 * that sits behind the head forever.
 */
#include <config.h>

#include "elevator.h"

static struct piece *
deadline_first (struct elevator_state *e, uint64_t now_ns)
{
  struct piece *oldest = TAILQ_FIRST (e->by_age);
  struct piece key = { .offset = e->head };
  struct piece *p;

  if (oldest && oldest->expires_ns <= now_ns)
    return oldest;
  p = RB_NFIND (piece_tree, e->by_offset, &key);
  if (p == NULL)
    p = RB_MIN (piece_tree, e->by_offset);
  return p;
}

static struct piece *
deadline_next (struct elevator_state *e, struct piece *prev)
{
  struct piece *p = RB_NEXT (piece_tree, e->by_offset, prev);

  return p && piece_can_follow (prev, p) ? p : NULL;
}

const struct elevator_ops elevator_deadline = {
  .name = "deadline",
  .first = deadline_first,
  .next = deadline_next,
};
