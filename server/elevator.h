/* plugq: elevators choose the order in which queued pieces go out.
 *
 * The queue keeps its pieces in two orders, by offset and by age, and
 * guarantees they never overlap, so an elevator only chooses: where the
 * next dispatch starts, and which piece may follow the last one in the
 * same backend operation.  A new elevator is one file with one of these.
 */
#ifndef PLUGQ_ELEVATOR_H
#define PLUGQ_ELEVATOR_H

#include <stdint.h>

#include "piece.h"

struct elevator_state {
  struct piece_tree *by_offset;
  struct piece_list *by_age;
  uint64_t head;                /* end of the last dispatch (C-LOOK) */
  /* While a FLUSH waits, pieces up to here must go first; 0 = none. */
  uint64_t barrier_seq;
};

struct elevator_ops {
  const char *name;
  /* The piece the next dispatch starts with; the queue is not empty. */
  struct piece *(*first) (struct elevator_state *, uint64_t now_ns);
  /* The piece that may be merged after prev, or NULL. */
  struct piece *(*next) (struct elevator_state *, struct piece *prev);
};

extern const struct elevator_ops elevator_deadline;
extern const struct elevator_ops elevator_noop;

/* By name, NULL if unknown. */
const struct elevator_ops *elevator_lookup (const char *name);

#endif /* PLUGQ_ELEVATOR_H */
