/* plugq: a queue's piece trees.
 *
 * Queued pieces sit in two orders, by offset (a red-black tree the
 * elevator sweeps) and by age (a list the deadline check and the flush
 * barrier read), and never overlap: before a piece is inserted it cuts
 * every older queued piece it covers (cut_overlaps), so the newest data
 * wins whatever order the elevator dispatches in.  Pieces in flight have
 * a tree of their own and are never cut.
 *
 * queued_bytes counts the data of queued writes; every change of a
 * write piece's length goes through account_bytes.
 */
#include <config.h>

#include <assert.h>
#include <stdlib.h>

#include "buffers/data_buffer.h"
#include "queue_internal.h"

RB_GENERATE (piece_tree, piece, by_offset, piece_cmp);

void
piece_init (const struct queue *q, struct piece *p, enum op_kind kind,
            uint64_t count, uint64_t offset, unsigned flags)
{
  *p = (struct piece) {
    .offset = offset, .length = count, .kind = kind,
    .may_trim = (flags & REQ_MAY_TRIM) != 0, .fua = (flags & REQ_FUA) != 0,
    .arrival_ns = monotonic_ns (),
  };
  p->expires_ns = p->arrival_ns + q->cfg.write_expire_ns;
}

/* Spare pieces are linked by their by_age entry.  A queue keeps as many
 * as it may hold queued, so a steady stream allocates none.
 */
struct piece *
piece_alloc (struct queue *q)
{
  struct piece *p = TAILQ_FIRST (&q->spare_pieces);

  queue_assert_locked (q);
  if (p == NULL)
    return malloc (sizeof *p);
  TAILQ_REMOVE (&q->spare_pieces, p, by_age);
  q->nr_spare_pieces--;
  return p;
}

/* p has left the queue for good, having counted in span while present:
 * no read needs to see it any more, and no flush needs to wait for it.
 */
void
piece_gone_from (struct queue *q, const struct piece *p,
                 struct presence_span span)
{
  queue_assert_locked (q);
  q->promised_pieces -= p->promised;
  presence_drop (q, span);
  atomic_fetch_sub_explicit (&q->pieces_present, 1, memory_order_release);
}

void
piece_release (struct queue *q, struct piece *p)
{
  queue_assert_locked (q);
  data_buffer_put (p->buf);
  p->buf = NULL;
  if (q->nr_spare_pieces >= q->cfg.queue_requests) {
    free (p);
    return;
  }
  TAILQ_INSERT_HEAD (&q->spare_pieces, p, by_age);
  q->nr_spare_pieces++;
}

/* With the queue. */
void
pieces_free (struct queue *q)
{
  struct piece *p;

  queue_assert_locked (q);
  while ((p = TAILQ_FIRST (&q->by_age)) != NULL
         || (p = TAILQ_FIRST (&q->failing.pieces)) != NULL) {
    queue_unlink (q, p);
    piece_release (q, p);
  }
  while ((p = TAILQ_FIRST (&q->spare_pieces)) != NULL) {
    TAILQ_REMOVE (&q->spare_pieces, p, by_age);
    free (p);
  }
  q->nr_spare_pieces = 0;
}

/* Adds delta (which may be negative) to the queued data when p holds
 * data; zeroes and trims hold none.
 */
static void
account_bytes (struct queue *q, const struct piece *p, int64_t delta)
{
  queue_assert_locked (q);
  if (p->kind == OP_WRITE)
    q->queued_bytes += delta;
}

/* A failing piece joins the failing list in sequence order, after
 * `after` when given (a fragment of it).
 */
static void
failing_list_insert (struct queue *q, struct piece *p, struct piece *after)
{
  struct piece_list *list = &q->failing.pieces;

  queue_assert_locked (q);
  if (after == NULL) {
    after = TAILQ_LAST (list, piece_list);
    while (after && after->seq > p->seq)
      after = TAILQ_PREV (after, piece_list, by_age);
  }
  if (after)
    TAILQ_INSERT_AFTER (list, after, p, by_age);
  else
    TAILQ_INSERT_HEAD (list, p, by_age);
  q->failing.count++;
}

void
queue_link (struct queue *q, struct piece *p, struct piece *after)
{
  queue_assert_locked (q);
  RB_INSERT (piece_tree, &q->by_offset, p);
  if (p->failing)
    failing_list_insert (q, p, after);
  else if (after)
    TAILQ_INSERT_AFTER (&q->by_age, after, p, by_age);
  else
    TAILQ_INSERT_TAIL (&q->by_age, p, by_age);
  q->nr_queued++;
  q->appended_requests += p->appended;
  account_bytes (q, p, p->length);
  q->promised_pieces += p->promised;
  presence_add (q, p);
  atomic_fetch_add_explicit (&q->pieces_present, 1, memory_order_relaxed);
}

void
queue_unlink (struct queue *q, struct piece *p)
{
  queue_assert_locked (q);
  RB_REMOVE (piece_tree, &q->by_offset, p);
  if (p->failing) {
    TAILQ_REMOVE (&q->failing.pieces, p, by_age);
    q->failing.count--;
  }
  else {
    forget_if_newest (q, p);
    TAILQ_REMOVE (&q->by_age, p, by_age);
  }
  q->nr_queued--;
  q->appended_requests -= p->appended;
  account_bytes (q, p, -(int64_t) p->length);
}

/* The newest queued piece takes count more bytes, appended to its buffer
 * for one more request (queue_stream.c).
 */
void
piece_grow (struct queue *q, struct piece *p, uint32_t count)
{
  queue_assert_locked (q);
  p->length += count;
  presence_grow (q, p);
  p->appended++;
  q->appended_requests++;
  account_bytes (q, p, count);
}

/* p is on the backend (durable there when it went out with FUA) or
 * superseded: its waiter, if any, has one piece less to wait for.  A
 * waiter asleep on its last piece is answered and stops counting as a
 * dispatched waiter here, as it will not take the lock again for that.
 * It is posted now, or, with wake_later, put on that list for the
 * caller to post once it has dropped q->lock (sleepers_post).
 */
void
piece_written (struct queue *q, struct piece *p, bool durable,
               struct sleeper **wake_later)
{
  struct completion *w = p->waiter;

  queue_assert_locked (q);
  if (w == NULL)
    return;
  if (!durable)
    w->needs_flush = true;
  if (--w->pending > 0 || !w->sleeping)
    return;
  q->dispatched_waiters--;
  if (wake_later) {
    w->written.next = *wake_later;
    *wake_later = &w->written;
  }
  else
    sem_post (&w->written.sem);
}

/* A piece that will never reach the backend because a newer request
 * covers it counts as written for whoever waits on it: the newer data
 * is what the disk must hold.  It stops counting as present only after
 * that newer piece counts: a read that finds nothing present
 * (pieces_present, without the lock) reads the backend alone, which
 * holds neither, and the superseded piece's request may already have
 * been answered.
 */
void
pieces_superseded_done (struct queue *q, struct piece_list *superseded)
{
  struct piece *p;

  queue_assert_locked (q);
  while ((p = TAILQ_FIRST (superseded)) != NULL) {
    TAILQ_REMOVE (superseded, p, by_age);
    assert (atomic_load_explicit (&q->pieces_present,
                                  memory_order_relaxed) > 1);
    piece_gone (q, p);
    piece_written (q, p, false, NULL);
    piece_release (q, p);
  }
}

/* Drops p's bytes before new_offset; it keeps its place in both orders
 * (its start moves up, but never past its successor's).
 */
static void
piece_drop_front (struct queue *q, struct piece *p, uint64_t new_offset)
{
  uint64_t cut = new_offset - p->offset;

  account_bytes (q, p, -(int64_t) cut);
  p->offset = new_offset;
  p->length -= cut;
  p->buf_offset += cut;
}

/* Drops p's bytes from new_end on. */
static void
piece_drop_back (struct queue *q, struct piece *p, uint64_t new_end)
{
  if (!p->failing)
    forget_if_newest (q, p);
  account_bytes (q, p, -(int64_t) (piece_end (p) - new_end));
  p->length = new_end - p->offset;
}

/* The part of p past `end` as a piece of its own, next to p in age;
 * p keeps the part before end.  NULL when out of memory (p unchanged).
 */
static struct piece *
piece_split_tail (struct queue *q, struct piece *p, uint64_t end)
{
  struct piece *tail = piece_alloc (q);

  if (tail == NULL)
    return NULL;
  *tail = *p;
  tail->appended = 0;           /* p keeps the count */
  if (tail->buf)
    data_buffer_get (tail->buf);
  if (tail->waiter)
    tail->waiter->pending++;
  tail->length = piece_end (p) - end;
  tail->buf_offset += end - p->offset;
  tail->offset = end;
  piece_drop_back (q, p, end);
  queue_link (q, tail, p);
  return tail;
}

/* The first piece of a tree that reaches offset or beyond.  Pieces in
 * one tree never overlap, so only the one before the first that starts
 * at offset or later can reach into the range.
 */
struct piece *
first_reaching (struct piece_tree *tree, uint64_t offset)
{
  struct piece key = { .offset = offset };
  struct piece *p = RB_NFIND (piece_tree, tree, &key);
  struct piece *prev = p ? RB_PREV (piece_tree, tree, p)
    : RB_MAX (piece_tree, tree);

  return prev && piece_end (prev) > offset ? prev : p;
}

/* p loses bytes to a newer request while it is queued: a request that
 * waits for it must not be answered as durable on p's own backend write
 * (a FUA write going out with FUA), since the bytes it lost are the
 * newer request's to write, which may go out without FUA.  Only a
 * backend flush after the newer piece makes the whole of it durable.
 */
static void
piece_cut (struct queue *q, struct piece *p)
{
  queue_assert_locked (q);
  if (p->waiter)
    p->waiter->needs_flush = true;
}

/* Makes [offset, end) free of queued pieces, so the new piece is the
 * only source of those bytes.  In-flight pieces are left alone: they are
 * older, already being written, and the new piece goes out after them.
 * CUT_ANY when it cut something, with CUT_COVERED when a cut piece was
 * one a pending FLUSH covers: the new piece now holds the only copy of
 * bytes that flush promised.  -1 when out of memory, with nothing cut.
 */
int
cut_overlaps (struct queue *q, uint64_t offset, uint64_t end,
              struct piece_list *superseded)
{
  struct piece *p = first_reaching (&q->by_offset, offset);
  int cut = 0;

  queue_assert_locked (q);
  if (p && p->offset < offset) {        /* keeps its head */
    struct piece *head = p;

    p = RB_NEXT (piece_tree, &q->by_offset, head);
    if (piece_end (head) > end && piece_split_tail (q, head, end) == NULL)
      return -1;
    cut |= CUT_ANY | (flush_covers (q, head) ? CUT_COVERED : 0);
    piece_cut (q, head);
    piece_drop_back (q, head, offset);
  }
  while (p && p->offset < end) {
    struct piece *next = RB_NEXT (piece_tree, &q->by_offset, p);

    cut |= CUT_ANY | (flush_covers (q, p) ? CUT_COVERED : 0);
    if (piece_end (p) <= end) {
      queue_unlink (q, p);
      TAILQ_INSERT_TAIL (superseded, p, by_age);
    }
    else {
      piece_cut (q, p);
      piece_drop_front (q, p, end);
    }
    p = next;
  }
  return cut;
}
