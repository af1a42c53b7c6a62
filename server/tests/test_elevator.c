/* plugq: unit tests for the elevators, driven directly.
 *
 * The queue guarantees its pieces never overlap and keeps them in two
 * orders, by offset and by age; an elevator only chooses the first piece
 * of a dispatch and which piece may follow.  These tests build those two
 * orders by hand, so every answer can be predicted exactly, with no
 * threads or timing involved.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "elevator/elevator.h"
#include "queue/piece.h"
#include "tap.h"

#define MAX_PIECES 16
#define NOW (UINT64_C (1000000000))     /* an arbitrary "current time" */
#define LATER (NOW + 1)                 /* not expired at NOW */

/* A hand-built queue: what struct queue holds for the elevator. */
struct fake_queue {
  struct piece_tree by_offset;
  struct piece_list by_age;
  struct elevator_state e;
  struct piece pieces[MAX_PIECES];
  unsigned n;
};

static void
fake_init (struct fake_queue *f, uint64_t head)
{
  memset (f, 0, sizeof *f);
  RB_INIT (&f->by_offset);
  TAILQ_INIT (&f->by_age);
  f->e.by_offset = &f->by_offset;
  f->e.by_age = &f->by_age;
  f->e.head = head;
}

/* Queues a piece as the newest arrival, as the queue's submit does. */
static struct piece *
fake_add (struct fake_queue *f, uint64_t offset, uint64_t length,
          enum op_kind kind, bool may_trim, uint64_t expires_ns)
{
  struct piece *p = &f->pieces[f->n++];

  p->offset = offset;
  p->length = length;
  p->kind = kind;
  p->may_trim = may_trim;
  p->seq = f->n;
  p->expires_ns = expires_ns;
  RB_INSERT (piece_tree, &f->by_offset, p);
  TAILQ_INSERT_TAIL (&f->by_age, p, by_age);
  return p;
}

static struct piece *
fake_write (struct fake_queue *f, uint64_t offset, uint64_t length)
{
  return fake_add (f, offset, length, OP_WRITE, false, LATER);
}

static void
fake_remove (struct fake_queue *f, struct piece *p)
{
  RB_REMOVE (piece_tree, &f->by_offset, p);
  TAILQ_REMOVE (&f->by_age, p, by_age);
}

/* Empties the queue one dispatch at a time, as the queue's batch_take
 * does (first, then next while it answers, head = end of the run), and
 * records the offset each piece went out at.
 */
static unsigned
drain_order (struct fake_queue *f, const struct elevator_ops *ops,
             uint64_t now, uint64_t *order)
{
  unsigned n = 0;

  while (!RB_EMPTY (&f->by_offset)) {
    struct piece *p = ops->first (&f->e, now);

    while (p) {
      struct piece *next = ops->next (&f->e, p);

      fake_remove (f, p);
      order[n++] = p->offset;
      f->e.head = piece_end (p);
      p = next;
    }
  }
  return n;
}

static bool
order_is (const uint64_t *got, unsigned n, const uint64_t *want,
          unsigned nwant)
{
  bool ok = n == nwant;

  for (unsigned i = 0; ok && i < n; i++)
    ok = got[i] == want[i];
  if (!ok) {
    printf ("# order:");
    for (unsigned i = 0; i < n; i++)
      printf (" %" PRIu64, got[i]);
    printf ("\n# want: ");
    for (unsigned i = 0; i < nwant; i++)
      printf (" %" PRIu64, want[i]);
    printf ("\n");
  }
  return ok;
}

/* ------------------------------------------------------------ deadline */

/* C-LOOK: the first piece at or after the head, whatever arrived first. */
static void
test_deadline_first_from_head (void)
{
  struct fake_queue f;
  struct piece *p0, *p20, *p30;
  bool ok = true;

  fake_init (&f, 12);
  p30 = fake_write (&f, 30, 5);
  p0 = fake_write (&f, 0, 5);
  p20 = fake_write (&f, 20, 5);
  fake_write (&f, 10, 5);
  ok &= CHECK (elevator_deadline.first (&f.e, NOW) == p20);
  f.e.head = 20;                /* exactly at a piece: that piece */
  ok &= CHECK (elevator_deadline.first (&f.e, NOW) == p20);
  f.e.head = 0;
  ok &= CHECK (elevator_deadline.first (&f.e, NOW) == p0);
  f.e.head = 26;
  ok &= CHECK (elevator_deadline.first (&f.e, NOW) == p30);
  tap_ok (ok, "deadline: first is the lowest offset at or after the head");
}

/* Past the highest piece the sweep wraps to the lowest (one-way). */
static void
test_deadline_wraps (void)
{
  struct fake_queue f;
  struct piece *p0;
  uint64_t order[MAX_PIECES];
  const uint64_t want[] = { 20, 30, 0, 10 };
  bool ok = true;

  fake_init (&f, 31);
  fake_write (&f, 30, 5);
  p0 = fake_write (&f, 0, 5);
  fake_write (&f, 20, 5);
  fake_write (&f, 10, 5);
  ok &= CHECK (elevator_deadline.first (&f.e, NOW) == p0);

  /* A whole sweep from the middle: up to the top, then from the bottom. */
  f.e.head = 12;
  ok &= CHECK (order_is (order, drain_order (&f, &elevator_deadline, NOW,
                                             order), want, 4));
  tap_ok (ok, "deadline: the sweep wraps to the lowest offset (C-LOOK)");
}

/* The oldest piece goes first once it has waited past its deadline,
 * even behind the head; only the FIFO head is looked at.
 */
static void
test_deadline_expiry (void)
{
  struct fake_queue f;
  struct piece *old, *middle, *top;
  bool ok = true;

  fake_init (&f, 1000);
  old = fake_add (&f, 0, 5, OP_WRITE, false, NOW);   /* expires at NOW */
  middle = fake_add (&f, 2000, 5, OP_WRITE, false, NOW + 10);
  top = fake_add (&f, 3000, 5, OP_ZERO, false, NOW + 20);

  ok &= CHECK (elevator_deadline.first (&f.e, NOW - 1) == middle);
  ok &= CHECK (elevator_deadline.first (&f.e, NOW) == old);
  ok &= CHECK (elevator_deadline.first (&f.e, NOW + 100) == old);

  /* With the expired piece gone and the head past the middle piece,
   * that piece is reached by the sweep only after a wrap, unless it is
   * the expired FIFO head: then it goes before the piece at the head.
   */
  fake_remove (&f, old);
  f.e.head = 2500;
  ok &= CHECK (elevator_deadline.first (&f.e, NOW + 9) == top);
  ok &= CHECK (elevator_deadline.first (&f.e, NOW + 10) == middle);
  tap_ok (ok, "deadline: an expired FIFO head goes first, behind the head");
}

/* next: only a back-to-back piece of the same kind (and for zeroes the
 * same may_trim) joins the same backend operation.
 */
static void
test_deadline_next (void)
{
  struct fake_queue f;
  struct piece *w0, *w1, *gap, *z0, *z1, *z2, *t0, *t1, *w2;
  bool ok = true;

  fake_init (&f, 0);
  w0 = fake_write (&f, 0, 10);
  w1 = fake_write (&f, 10, 10);                      /* back to back */
  gap = fake_write (&f, 21, 9);                      /* 1-byte gap */
  z0 = fake_add (&f, 30, 10, OP_ZERO, true, LATER);  /* other kind */
  z1 = fake_add (&f, 40, 10, OP_ZERO, true, LATER);
  z2 = fake_add (&f, 50, 10, OP_ZERO, false, LATER); /* other may_trim */
  t0 = fake_add (&f, 60, 10, OP_TRIM, false, LATER);
  t1 = fake_add (&f, 70, 10, OP_TRIM, false, LATER);
  w2 = fake_write (&f, 80, 10);

  ok &= CHECK (elevator_deadline.next (&f.e, w0) == w1);
  ok &= CHECK (elevator_deadline.next (&f.e, w1) == NULL);
  ok &= CHECK (elevator_deadline.next (&f.e, gap) == NULL);
  ok &= CHECK (elevator_deadline.next (&f.e, z0) == z1);
  ok &= CHECK (elevator_deadline.next (&f.e, z1) == NULL);
  ok &= CHECK (elevator_deadline.next (&f.e, z2) == NULL);
  ok &= CHECK (elevator_deadline.next (&f.e, t0) == t1);
  ok &= CHECK (elevator_deadline.next (&f.e, t1) == NULL);
  ok &= CHECK (elevator_deadline.next (&f.e, w2) == NULL);   /* last */
  tap_ok (ok, "deadline: next only for back-to-back same-kind pieces");
}

/* Sequential pieces that arrived in any order go out as one ascending
 * run, which is what lets the dispatcher merge them.
 */
static void
test_deadline_merges_unordered_arrivals (void)
{
  struct fake_queue f;
  const uint64_t offsets[] = { 3, 0, 2, 1 };
  unsigned runs = 0;
  struct piece *p;
  bool ok = true;

  fake_init (&f, 0);
  for (unsigned i = 0; i < 4; i++)
    fake_write (&f, offsets[i] * 4096, 4096);
  p = elevator_deadline.first (&f.e, NOW);
  ok &= CHECK (p && p->offset == 0);
  while (p) {
    runs++;
    p = elevator_deadline.next (&f.e, p);
  }
  ok &= CHECK (runs == 4);
  tap_ok (ok, "deadline: arrivals out of order form one back-to-back run");
}

/* ------------------------------------------------------------ noop */

static void
test_noop_fifo (void)
{
  struct fake_queue f;
  uint64_t order[MAX_PIECES];
  const uint64_t want[] = { 30, 0, 20, 10 };
  bool ok = true;

  fake_init (&f, 15);
  fake_write (&f, 30, 5);
  fake_write (&f, 0, 5);
  fake_write (&f, 20, 5);
  fake_write (&f, 10, 5);
  ok &= CHECK (elevator_noop.first (&f.e, NOW)->offset == 30);
  ok &= CHECK (order_is (order, drain_order (&f, &elevator_noop, NOW, order),
                         want, 4));
  tap_ok (ok, "noop: arrival order, ignoring offsets and the head");
}

/* noop merges only with the next arrival, not with a neighbour by
 * offset that arrived at another time.
 */
static void
test_noop_next (void)
{
  struct fake_queue f;
  struct piece *a, *b, *c, *d, *z0, *z1;
  bool ok = true;

  fake_init (&f, 0);
  a = fake_write (&f, 0, 10);
  b = fake_write (&f, 10, 10);          /* next arrival, back to back */
  c = fake_write (&f, 30, 10);
  d = fake_write (&f, 20, 10);          /* follows b by offset, not age */
  z0 = fake_add (&f, 40, 10, OP_ZERO, false, LATER);
  z1 = fake_add (&f, 50, 10, OP_ZERO, true, LATER);

  ok &= CHECK (elevator_noop.next (&f.e, a) == b);
  ok &= CHECK (elevator_noop.next (&f.e, b) == NULL);
  ok &= CHECK (elevator_noop.next (&f.e, c) == NULL);
  ok &= CHECK (elevator_noop.next (&f.e, d) == NULL);
  ok &= CHECK (elevator_noop.next (&f.e, z0) == NULL);   /* may_trim */
  ok &= CHECK (elevator_noop.next (&f.e, z1) == NULL);   /* newest */
  tap_ok (ok, "noop: merges only with the next arrival when back to back");
}

/* ------------------------------------------------------------ table */

static void
test_lookup (void)
{
  bool ok = true;

  ok &= CHECK (elevator_lookup ("deadline") == &elevator_deadline);
  ok &= CHECK (elevator_lookup ("noop") == &elevator_noop);
  ok &= CHECK (elevator_lookup ("cfq") == NULL);
  ok &= CHECK (elevator_lookup ("") == NULL);
  ok &= CHECK (elevator_lookup ("Deadline") == NULL);
  ok &= CHECK (strcmp (elevator_deadline.name, "deadline") == 0);
  ok &= CHECK (strcmp (elevator_noop.name, "noop") == 0);
  tap_ok (ok, "elevator_lookup finds both elevators by exact name");
}

int
main (void)
{
  tap_plan (8);
  test_deadline_first_from_head ();
  test_deadline_wraps ();
  test_deadline_expiry ();
  test_deadline_next ();
  test_deadline_merges_unordered_arrivals ();
  test_noop_fifo ();
  test_noop_next ();
  test_lookup ();
  return tap_done ();
}
