/* plugq: a bounded lock-free ring of spare buffers (spare_ring.h). */
#include <config.h>

#include <assert.h>
#include <stdint.h>

#include "spare_ring.h"

void
spare_ring_init_cells (struct spare_ring *r, size_t cells)
{
  assert (cells >= 1 && cells <= SPARE_RING_CELLS
          && (cells & (cells - 1)) == 0);
  r->cells = cells;
  for (size_t i = 0; i < cells; i++)
    atomic_init (&r->cell[i].seq, i);
  atomic_init (&r->head, 0);
  atomic_init (&r->tail, 0);
}

void
spare_ring_init (struct spare_ring *r)
{
  spare_ring_init_cells (r, SPARE_RING_CELLS);
}

size_t
spare_ring_count (struct spare_ring *r)
{
  return atomic_load (&r->tail) - atomic_load (&r->head);
}

/* Cell i holds a spare when its seq is the take position + 1. */
void *
spare_ring_take (struct spare_ring *r)
{
  size_t pos = atomic_load_explicit (&r->head, memory_order_relaxed);

  for (;;) {
    struct spare_ring_cell *c = &r->cell[pos & (r->cells - 1)];
    size_t seq = atomic_load_explicit (&c->seq, memory_order_acquire);
    intptr_t ahead = (intptr_t) (seq - (pos + 1));

    if (ahead < 0)
      return NULL;              /* empty */
    if (ahead > 0)
      pos = atomic_load_explicit (&r->head, memory_order_relaxed);
    else if (atomic_compare_exchange_weak_explicit (&r->head, &pos, pos + 1,
                                                    memory_order_relaxed,
                                                    memory_order_relaxed)) {
      void *p = c->p;

      atomic_store_explicit (&c->seq, pos + r->cells,
                             memory_order_release);
      return p;
    }
  }
}

/* Cell i is free to fill when its seq is the fill position. */
bool
spare_ring_park (struct spare_ring *r, void *p)
{
  size_t pos = atomic_load_explicit (&r->tail, memory_order_relaxed);

  for (;;) {
    struct spare_ring_cell *c = &r->cell[pos & (r->cells - 1)];
    size_t seq = atomic_load_explicit (&c->seq, memory_order_acquire);
    intptr_t ahead = (intptr_t) (seq - pos);

    if (ahead < 0)
      return false;             /* full */
    if (ahead > 0)
      pos = atomic_load_explicit (&r->tail, memory_order_relaxed);
    else if (atomic_compare_exchange_weak_explicit (&r->tail, &pos, pos + 1,
                                                    memory_order_relaxed,
                                                    memory_order_relaxed)) {
      c->p = p;
      atomic_store_explicit (&c->seq, pos + 1, memory_order_release);
      return true;
    }
  }
}
