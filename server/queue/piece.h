/* plugq: a queued piece of a write, zero or trim, as the queue and the
 * elevators see it.  Internal to server/.
 *
 * A client request enters the queue as one piece.  Newer requests cut
 * older pieces where they overlap, so pieces in one queue never overlap
 * and a piece may be a fragment of its request.  Fragments share their
 * request's data_buffer.
 */
#ifndef PLUGQ_PIECE_H
#define PLUGQ_PIECE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include <bsd/sys/tree.h>

#include "common/lock.h"
#include "common/op.h"

struct data_buffer;

/* What a waiting client (FUA, ack=dispatched) watches.  Its pieces are
 * counted down under the queue lock.  A writer that goes to sleep sets
 * `sleeping` and waits on `written` without the lock; whoever writes its
 * last piece (or supersedes it) posts it, so a write wakes only its own
 * writer, and that writer answers without taking the lock again.
 */
struct completion {
  uint32_t pending;             /* pieces not yet written */
  int err;                      /* first backend errno */
  uint64_t error_mark;          /* a FUA request's error_mark at arrival */
  bool needs_flush;             /* a piece was written without FUA, or
                                 * superseded: only a backend flush makes
                                 * the request durable */
  bool sleeping;                /* on `written`, q->lock dropped */
  struct sleeper written;       /* posted once answered, after q->lock is
                                 * dropped (sleepers_post) */
};

/* The regions a piece counts in (queue_presence.c). */
struct presence_span {
  uint16_t first, last;
};

struct piece {
  RB_ENTRY (piece) by_offset;   /* queued pieces, by offset */
  TAILQ_ENTRY (piece) by_age;   /* queued pieces, oldest first */
  TAILQ_ENTRY (piece) batch;    /* in-flight pieces of one dispatch */
  uint64_t offset;
  uint64_t length;
  enum op_kind kind;            /* OP_WRITE, OP_ZERO or OP_TRIM */
  bool may_trim;                /* zero: holes allowed */
  bool fua;                     /* its request carried FUA */
  /* A FLUSH started from now on must wait for it: its request was
   * answered (ack=queued), it is FUA, or it took over bytes of a request
   * that may have been answered.  A waiting write's piece is not: its
   * request is answered only once it is written.
   */
  bool promised;
  uint64_t seq;                 /* arrival order of its request */
  uint64_t arrival_ns;
  uint64_t expires_ns;          /* deadline */
  struct data_buffer *buf;      /* OP_WRITE only */
  uint32_t buf_offset;          /* where this piece's bytes start in buf */
  struct completion *waiter;    /* NULL when nobody waits */
  /* Behind a busy stream (queue.c): not to go out before the queue's
   * batches_done reaches this, unless merged into a batch it continues.
   * 0 when it may go at once.
   */
  uint64_t held_until;
  /* Requests appended to it after its own (queue_stream.c), each a
   * merge: they count as queued requests while it is queued.
   */
  uint32_t appended;
  /* Its write-back failed and nobody waits for it: queued again on the
   * failing list instead of by_age, until it is tried again
   * (queue_failing.c).
   */
  bool failing;
  struct presence_span presence;
};

RB_HEAD (piece_tree, piece);
TAILQ_HEAD (piece_list, piece);

static inline int
piece_cmp (const struct piece *a, const struct piece *b)
{
  return a->offset < b->offset ? -1 : a->offset > b->offset;
}

RB_PROTOTYPE (piece_tree, piece, by_offset, piece_cmp);

static inline uint64_t
piece_end (const struct piece *p)
{
  return p->offset + p->length;
}

/* Two pieces can go out as one backend operation. */
static inline bool
piece_can_follow (const struct piece *prev, const struct piece *next)
{
  return piece_end (prev) == next->offset && prev->kind == next->kind
    && (prev->kind != OP_ZERO || prev->may_trim == next->may_trim);
}

#endif /* PLUGQ_PIECE_H */
