/* plugq: a bounded lock-free ring of spare buffers.
 *
 * What a thread frees on one side and another takes on the other
 * (a written batch's buffers, a read's bounce buffer) without a lock:
 * each cell's sequence number says whether it is free to fill or to
 * take, and the claims are compare-and-swaps of head and tail.
 */
#ifndef PLUGQ_SPARE_RING_H
#define PLUGQ_SPARE_RING_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#define SPARE_RING_CELLS 64     /* the most a ring holds, a power of 2 */

struct spare_ring_cell {
  _Atomic size_t seq;
  void *p;
};

struct spare_ring {
  struct spare_ring_cell cell[SPARE_RING_CELLS];
  size_t cells;                 /* in use: a power of 2, the ring's bound */
  _Atomic size_t head;          /* next cell to take */
  _Atomic size_t tail;          /* next cell to fill */
};

/* A ring of SPARE_RING_CELLS. */
void spare_ring_init (struct spare_ring *);
/* A ring that holds at most cells (a power of 2, 1 to SPARE_RING_CELLS). */
void spare_ring_init_cells (struct spare_ring *, size_t cells);
/* The spares parked: exact while no thread parks or takes one. */
size_t spare_ring_count (struct spare_ring *);
/* A spare, or NULL when there is none. */
void *spare_ring_take (struct spare_ring *);
/* Parks p; false when the ring is full (p is still the caller's). */
bool spare_ring_park (struct spare_ring *, void *p);

#endif /* PLUGQ_SPARE_RING_H */
