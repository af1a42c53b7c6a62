/* plugq: the deadline elevator.
 *
 * One ascending sweep by offset from where the last dispatch ended,
 * wrapping to the lowest offset (C-LOOK, the kernel deadline's "one way
 * elevator"), so sequential streams go out in order and merge.  The
 * sweep gives way to the oldest piece once it has waited past its
 * deadline, so a stream that keeps the queue busy cannot starve a piece
 * that sits behind the head forever.  While a FLUSH waits, the sweep
 * only starts at pieces the flush covers: the stream ahead of the head
 * must not make an fsync wait for write-expire.  While reads compete,
 * the writes it keeps at the backend are held to what lets reads meet
 * read-target (write_allowance, elevator_reads.c).
 */
#include <config.h>

#include <stdbool.h>

#include "elevator.h"

static bool
covered (const struct elevator_state *e, const struct piece *p)
{
  return e->barrier_seq == 0 || p->seq <= e->barrier_seq;
}

/* The first covered piece at or after the head, wrapping once. */
static struct piece *
sweep_from_head (struct elevator_state *e)
{
  struct piece key = { .offset = e->head };
  struct piece *p;

  for (p = RB_NFIND (piece_tree, e->by_offset, &key); p;
       p = RB_NEXT (piece_tree, e->by_offset, p))
    if (covered (e, p))
      return p;
  for (p = RB_MIN (piece_tree, e->by_offset); p;
       p = RB_NEXT (piece_tree, e->by_offset, p))
    if (covered (e, p))
      return p;
  return RB_MIN (piece_tree, e->by_offset);
}

static struct piece *
deadline_first (struct elevator_state *e, uint64_t now_ns)
{
  struct piece *oldest = TAILQ_FIRST (e->by_age);

  if (oldest && oldest->expires_ns <= now_ns)
    return oldest;
  return sweep_from_head (e);
}

static struct piece *
deadline_next (struct elevator_state *e, struct piece *prev)
{
  struct piece *p = RB_NEXT (piece_tree, e->by_offset, prev);

  return p && piece_can_follow (prev, p) ? p : NULL;
}

/* Reads first, as mq-deadline dispatches them: writes at the backend are
 * held to what lets reads meet read-target (elevator_reads.c).
 */
static uint64_t
deadline_write_allowance (struct elevator_state *e, uint64_t now_ns)
{
  return read_feedback_allowance (&e->reads, now_ns);
}

const struct elevator_ops elevator_deadline = {
  .name = "deadline",
  .help = "Sweep by offset; expired requests first; reads before writes.",
  .first = deadline_first,
  .next = deadline_next,
  .write_allowance = deadline_write_allowance,
};
