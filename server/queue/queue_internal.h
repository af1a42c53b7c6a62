/* plugq: the inside of one disk's queue, shared by the files that make
 * it up.  Internal to server/; the API is queue.h.
 *
 *   queue.c          every function of queue.h: life cycle, plugging,
 *                    submitting, and the entries for reads and flushes
 *   queue_pieces.c   the piece trees: insert, cut, split, byte counts,
 *                    spare pieces
 *   queue_read.c     reads and extents laid over the queue's pieces
 *   queue_read_streams.c  a read request: from a read-ahead window,
 *                    merged behind a busy stream, or at once
 *   queue_read_depth.c    whether the backend queues reads
 *   queue_read_ahead.c    read-ahead windows of sequential streams
 *   queue_flush.c    FLUSH, FUA, group commit and latched errors
 *   queue_batch.c    batches: taking pieces, completing, retrying
 *   queue_align.c    partial blocks on a backend that needs aligned I/O:
 *                    whole-block in-flight ranges, read-modify-write,
 *                    reads through an aligned bounce buffer
 *   queue_dispatch.c who writes the queue out: rounds, dispatch tokens,
 *                    the dispatch thread
 *   queue_room.c     back-pressure: room in the queue, the writers
 *                    waiting for it, and who wakes them
 *   queue_bypass.c   writes that go around the queue: on a backend that
 *                    writes to memory, one nothing can merge with
 *   queue_stream.c   sequential streams: telling them, and appending
 *                    their writes to the newest queued piece
 *   queue_spares.c   giving back the spare buffers of a disk gone quiet
 *   queue_failing.c  answered writes whose write-back failed: kept,
 *                    tried again, and what FLUSH and writers are told
 *   queue_reconfig.c a live disk's keys changed (set), and a queue retired
 *                    from service (stopped, its timer detached, freed)
 *
 * Locking: every field below is protected by q->lock unless it says
 * otherwise.  A helper that needs the lock starts with
 * queue_assert_locked (q); one that drops and retakes it says so in the
 * comment above it, and its callers must not keep pointers into the
 * trees across the call.  The lock is never held across backend I/O.
 * What is read without it is atomic and says so (pieces_present, the
 * read counters, the spare buffers, the unplug timer).
 */
#ifndef PLUGQ_QUEUE_INTERNAL_H
#define PLUGQ_QUEUE_INTERNAL_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "backends/backend.h"
#include "common/clock.h"
#include "buffers/data_buffer.h"
#include "elevator/elevator.h"
#include "common/lock.h"
#include "piece.h"
#include "queue.h"
#include "timer_service.h"

#define NS_PER_MS (UINT64_C (1000000))

#define queue_assert_locked(q) lock_assert_held (&(q)->lock)

/* Where a queue is in its plug cycle (as the kernel's plugged request
 * queue): IDLE holds nothing and waits for a first piece, PLUGGED
 * collects pieces until an unplug trigger, RUNNING is written out until
 * it is empty again (or plugs again, see should_replug).
 */
enum plug_state {
  QUEUE_IDLE,
  QUEUE_PLUGGED,
  QUEUE_RUNNING,
};

struct flush_waiter;            /* queue_flush.c */
TAILQ_HEAD (flush_sleepers, flush_waiter);

struct flush_state {
  bool wanted;
  bool running;                 /* a backend flush is in progress */
  uint64_t barrier_seq;         /* pieces up to here go before the flush */
  uint64_t arrivals;            /* FLUSHes started (flush_start_locked) */
  uint64_t next_epoch;          /* the backend flush not yet started */
  uint64_t done_epoch;          /* the last backend flush finished */
  uint64_t failed_epoch;        /* the last backend flush that failed */
  int failed_errno;
  /* Requests asleep until their epoch ends, answered (and woken one by
   * one) by the thread that ends it.
   */
  struct flush_sleepers sleepers;
};

/* Answered pieces whose write-back failed (queue_failing.c). */
struct failing_state {
  struct piece_list pieces;     /* in by_offset too; by sequence number */
  uint32_t count;
  int errnum;                   /* the latest failure's */
  uint64_t retry_at_ns;         /* when they go out again */
  bool flush_asked;             /* a FLUSH asked for a try at once */
  uint64_t delay_ns;            /* the next delay, doubling */
  uint64_t since_ns;            /* the first failure since all went well */
};

/* Errors of answered data that the backend lost after taking it (a
 * failed backend flush), as the kernel's errseq_t.
 */
struct latched_error {
  uint64_t seq;                 /* bumped on every error */
  int errnum;
  uint64_t told_seq;            /* the newest reported to anybody */
  uint64_t sessions_then;       /* session generation at the latest error */
};

/* Vectors a batch carries without an allocation: random writes make
 * batches of one piece.
 */
#define BATCH_INLINE_IOV 4

/* One backend operation and the pieces it carries. */
struct batch {
  struct queue *q;
  struct batch *next_free;      /* on the queue's spare list */
  struct piece_list pieces;
  uint32_t nr_pieces;
  uint32_t requests;            /* distinct requests among them */
  uint64_t offset;
  uint64_t bytes;
  uint64_t limit;               /* bytes it may grow to (batch_limits) */
  enum op_kind kind;
  bool may_trim;
  bool fua;                     /* carries a FUA piece (writes_carry_fua) */
  bool unaligned;               /* partial blocks: queue_align.c writes it */
  uint64_t taken_ns;            /* taken for dispatch, under the lock */
  uint64_t flushes_before;      /* q->flush.arrivals when taken */
  TAILQ_ENTRY (batch) taken_order; /* on q->batches_in_flight */
  uint64_t issued_ns;
  uint64_t finished_ns;         /* its backend operation, not the round */
  struct iovec *iov;            /* room for every piece */
  uint32_t iov_room;
  struct iovec inline_iov[BATCH_INLINE_IOV];
  struct backend_io io;
  struct batch *next_retry;     /* on the queue's retrying list */
  uint64_t first_failed_ns;     /* 0: has not failed for want of memory */
  uint64_t retry_delay_ns;
  uint64_t retry_at_ns;
};

/* Writes going around the queue at once (queue_bypass.c); more wait
 * for a slot in the queue instead.
 */
#define BYPASS_SLOTS 16
/* Regions a disk is cut into for reads that take no lock
 * (queue_presence.c).
 */
#define PRESENCE_REGIONS 256

/* Write ends remembered to tell a stream from random writes, each in
 * the slot its end hashes to (queue_stream.c); a power of 2.
 */
#define RECENT_END_SLOTS 8

/* The same for reads (queue_read_streams.c), and the stream reads
 * tracked on their way, each with the reads chained behind it.
 */
#define RECENT_READ_ENDS 8
#define READ_STREAM_SLOTS 16

/* Read-ahead windows per disk (queue_read_ahead.c): a stream reads in
 * one while the next fills.
 */
#define READ_AHEAD_WINDOWS 8

struct read_ahead_window;       /* queue_read_ahead.c */

struct read_waiter;             /* queue_read_streams.c */

struct read_stream_slot {
  bool busy;
  uint64_t chain_end;           /* the end of its read, or of the last
                                 * read chained behind it */
  struct read_waiter *first, *last;
};

/* What reads cost the backend alone and at depth (queue_read_depth.c);
 * 0 until known.
 */
struct read_depth {
  _Atomic uint64_t fastest_ns;
  _Atomic uint64_t at_depth_ns;
  _Atomic unsigned at_depth_reads;      /* samples in at_depth_ns, up to
                                         * READ_DEPTH_KNOWN */
};

/* Reads at depth before their average says anything. */
#define READ_DEPTH_KNOWN 8

/* Reads active before a stream read waits to merge.  Waiting costs a
 * sleep and a wake-up as a backend read does, so on a disk that takes
 * reads in parallel (O_DIRECT on a virtio disk: 4 KiB sequential reads
 * QD16 at the same rate whatever this is) it only pays where each
 * backend operation costs more than a wake-up: a remote, an RBD image.
 * Eight on their way keep a disk busy enough.
 */
#define READ_BUSY 8

struct read_streams {
  bool merging;                 /* set at creation: each backend read
                                 * costs (not writes_to_memory) */
  unsigned busy;                /* READ_BUSY; the model test, which has
                                 * fewer clients, sets it lower */
  struct read_depth depth;
  _Atomic uint64_t ends[RECENT_READ_ENDS];
  struct lock lock;             /* the slots; never held with q->lock
                                 * nor across I/O */
  struct read_stream_slot slot[READ_STREAM_SLOTS];
  _Atomic uint64_t waited;      /* reads that waited in a chain */
  uint64_t ahead_max;           /* read-ahead= where merging; 0: none.
                                 * Changes only with no request in the
                                 * queue (queue_reconfig.c) */
  _Atomic unsigned windows_listed;
  uint64_t clock;               /* under lock: counts window reads */
  struct read_ahead_window *window[READ_AHEAD_WINDOWS]; /* under lock */
  _Atomic uint64_t ahead_hits;  /* reads answered from a window */
  _Atomic uint64_t ahead_bytes; /* bytes read ahead */
};

struct queue {
  /* Set at creation, read-only after. */
  char *name;
  struct backend *backend;
  struct queue_config cfg;
  uint64_t merge_limit;         /* min (max-merge, backend max_write) */
  uint64_t block_mask;          /* the backend's min_block - 1, or 0 */
  unsigned index;               /* this disk's slot in every session */
  unsigned max_holders;         /* the backend's max_writers */
  uint32_t max_in_flight;       /* batches taken at once */
  /* FUA requests ride on their batch's backend write, which is then
   * durable on its own, instead of waiting for a backend flush.  Only
   * for an asynchronous backend with FUA (a remote server): that costs
   * no round trip more than the write.  A synchronous backend would
   * sync once per batch where group commit shares one flush among many.
   */
  bool writes_carry_fua;
  /* Writes nothing can merge with go around the queue (bypass=auto on a
   * synchronous backend that writes to memory at any alignment).
   */
  bool bypass;
  /* The same for writes that wait for their answer anyway (bypass=auto,
   * ack=dispatched) on an asynchronous backend.
   */
  bool bypass_waiting;
  /* The same for writes of max-merge bytes or more on an asynchronous
   * backend whatever the ack mode (bypass=auto): nothing can merge with
   * them, so queuing would only copy them.
   */
  bool bypass_large;
  /* Asynchronous with reads_behind_writes, or q->bypass (memory): while
   * reads compete, writes of READ_FORWARD_MIN or more go around too
   * (queue_bypass.c).
   */
  bool forward_while_reading;
  struct buffer_pool *buffers;  /* spare mappings for aligned data, up
                                 * to queue-bytes, fewer once quiet
                                 * (queue_spares.c); has its own lock */
  uint64_t spares_look_ns;      /* the next look at buffers, or 0
                                 * (queue_spares.c) */
  struct data_buffer_spares spare_buffers; /* lock-free */
  struct data_buffer_spares stream_buffers; /* lock-free */

  struct lock lock;
  pthread_cond_t dispatch_wake; /* the dispatch thread sleeps here */
  pthread_cond_t space;         /* full_waiters sleep here, woken one at a
                                 * time as batches complete */

  struct piece_tree by_offset;
  struct piece_list by_age;
  struct piece_tree in_flight;  /* pieces on their way, by offset */
  /* Pieces queued or in flight, changed under the lock; a read that
   * finds none (an acquire load) has nothing to lay over the backend,
   * and every write it could have missed is already there.
   */
  _Atomic uint64_t pieces_present;
  /* Present pieces per region of the disk, for reads that take no lock
   * (queue_presence.c).
   */
  unsigned presence_shift;
  _Atomic uint32_t presence[PRESENCE_REGIONS];
  uint64_t promised_pieces;     /* queued or in flight, piece->promised */
  struct piece_list spare_pieces; /* for the next requests to reuse */
  uint32_t nr_spare_pieces;
  uint32_t nr_batches;
  uint64_t batch_bytes;         /* of the write batches in flight */
  bool writes_held;             /* the last batch_take held writes back for
                                 * reads: the dispatch thread looks again
                                 * within READ_HOLD_LOOK_NS */
  /* The batches in flight, oldest taken first: the stats' age of the
   * oldest backend operation.
   */
  TAILQ_HEAD (batch_list, batch) batches_in_flight;
  uint64_t batches_done;        /* completed, for piece->held_until */
  struct batch *spare_batches;  /* finished, for the next to reuse */
  struct batch *retrying;       /* in flight, waiting to be tried again */
  struct elevator_state elevator;
  uint32_t nr_queued;           /* pieces */
  uint32_t appended_requests;   /* appended to queued pieces */
  /* The end of the newest queued piece while writes may be appended to
   * it, else 0; changed under the lock, read without it as a hint.
   */
  _Atomic uint64_t append_end;
  uint64_t queued_bytes;
  uint64_t next_seq;

  enum plug_state state;
  unsigned holders;             /* dispatch tokens held */
  unsigned plain_bypassers;     /* of those, writes around the queue that
                                 * no flush waits for (not FUA) */
  uint64_t unplug_seq;          /* an unplug sends out everything up to here */
  uint32_t full_waiters;        /* writers waiting for room */
  uint32_t space_sleepers;      /* of those, asleep on space */
  uint32_t space_wakes;         /* of those, woken and not yet up */
  uint64_t space_sleeps;        /* times a writer slept for room (for
                                 * the tests: not in the stats) */
  uint32_t dispatched_waiters;  /* ack=dispatched writers not yet answered:
                                 * each counts itself, and whoever wakes
                                 * a sleeping one uncounts it */
  /* Writes going around the queue, each holding a dispatch token on a
   * synchronous backend (none on an asynchronous one); a free slot has
   * end 0.
   */
  struct { uint64_t start, end, since_ns; } bypassing[BYPASS_SLOTS];
  unsigned nr_bypassing;
  _Atomic uint64_t recent_ends[RECENT_END_SLOTS]; /* changed under the lock */
  bool stopping;

  struct flush_state flush;
  struct latched_error error;
  struct failing_state failing;

  struct unplug_timer timer;    /* lock-free; see timer_service.h */
  pthread_t dispatcher;         /* touched by start and stop only */
  bool dispatcher_started;

  struct queue_stats stats;
  /* Reads are counted without the lock; queue_stats_snapshot folds
   * these into stats.op[OP_READ] and stats.read_time.
   */
  struct {
    _Atomic uint64_t requests, bytes, ticks_us, errors;
    _Atomic uint64_t backend_ops, merges;
    _Atomic uint64_t bucket[LATENCY_BUCKETS];
  } reads;
  struct read_streams read_streams;
};

/* Requests queued: pieces, and the requests appended to them. */
static inline uint32_t
queued_requests (const struct queue *q)
{
  return q->nr_queued + q->appended_requests;
}

/* What unplug-thresh counts.  Where each backend operation costs (a
 * disk through O_DIRECT, a remote, an RBD image) it counts pieces, as
 * the kernel's plug counts requests and not the bios merged into them,
 * so a stream goes out in operations of max-merge.  Where writes only
 * reach memory, operations cost next to nothing and a max-merge write
 * only holds the thread that writes it out longer: every request.
 */
static inline uint32_t
unplug_count (const struct queue *q)
{
  return q->backend->writes_to_memory ? queued_requests (q) : q->nr_queued;
}

/* A request's answer: 0, or -1 with errno err. */
static inline int
queue_answer (int err)
{
  if (err) {
    errno = err;
    return -1;
  }
  return 0;
}

/* Releases q->lock and answers a request. */
static inline int
queue_release_answer (struct queue *q, int err)
{
  lock_release (&q->lock);
  return queue_answer (err);
}

/* queue.c */
void queue_derive_settings (struct queue *);
void queue_plug (struct queue *);
void queue_unplug_locked (struct queue *, enum unplug_cause);

/* queue_presence.c (its header comment is the rule; the helpers every
 * write runs are inline here): the regions of a disk of size bytes, all
 * clear.
 */
void presence_init (struct queue *, uint64_t size);
/* Without the lock: whether no present piece reaches the regions of
 * [offset, offset + count).
 */
bool presence_clear (const struct queue *, uint64_t offset, uint64_t count);

static inline unsigned
region_of (const struct queue *q, uint64_t offset)
{
  uint64_t r = offset >> q->presence_shift;

  return r < PRESENCE_REGIONS ? (unsigned) r : PRESENCE_REGIONS - 1;
}

static inline unsigned
last_region_of (const struct queue *q, uint64_t offset, uint64_t length)
{
  return region_of (q, length ? offset + length - 1 : offset);
}

/* Only lock holders change counts: a load and a store each. */
static inline void
regions_raise (struct queue *q, unsigned first, unsigned last)
{
  queue_assert_locked (q);
  for (unsigned i = first; i <= last; i++) {
    uint32_t c = atomic_load_explicit (&q->presence[i], memory_order_relaxed);

    atomic_store_explicit (&q->presence[i], c + 1, memory_order_relaxed);
  }
}

/* Under the lock: p, just linked, counts in the regions it reaches, and
 * records them.
 */
static inline void
presence_add (struct queue *q, struct piece *p)
{
  p->presence = (struct presence_span) {
    .first = region_of (q, p->offset),
    .last = last_region_of (q, p->offset, p->length),
  };
  regions_raise (q, p->presence.first, p->presence.last);
}

/* Under the lock: p grew, and counts in the regions it reaches now.
 * Every append asks, so the usual answer (no new region) is one shift
 * and a compare; past the last region, region_of's clamp leaves nothing
 * to raise.
 */
static inline void
presence_grow (struct queue *q, struct piece *p)
{
  uint64_t last_byte = p->offset + p->length - 1;

  if ((last_byte >> q->presence_shift) > p->presence.last) {
    unsigned last = region_of (q, last_byte);

    regions_raise (q, p->presence.last + 1, last);
    p->presence.last = last;
  }
}

/* Under the lock: a piece gone no longer counts in span; a release, for
 * a reader that then finds the region clear.
 */
static inline void
presence_drop (struct queue *q, struct presence_span span)
{
  queue_assert_locked (q);
  for (unsigned i = span.first; i <= span.last; i++) {
    uint32_t c = atomic_load_explicit (&q->presence[i], memory_order_relaxed);

    atomic_store_explicit (&q->presence[i], c - 1, memory_order_release);
  }
}

/* queue_pieces.c */
void piece_init (const struct queue *, struct piece *, enum op_kind,
                 uint64_t count, uint64_t offset, unsigned flags);
struct piece *piece_alloc (struct queue *);
void piece_release (struct queue *, struct piece *);
/* p has left the queue for good, having counted in span while present
 * (p's own regions, until it is linked again as something else).
 */
void piece_gone_from (struct queue *, const struct piece *,
                      struct presence_span span);
static inline void
piece_gone (struct queue *q, const struct piece *p)
{
  piece_gone_from (q, p, p->presence);
}
void pieces_free (struct queue *);
void queue_link (struct queue *, struct piece *, struct piece *after);
void queue_unlink (struct queue *, struct piece *);
void piece_grow (struct queue *, struct piece *, uint32_t count);
void piece_written (struct queue *, struct piece *, bool durable,
                    struct sleeper **wake_later);
struct piece *first_reaching (struct piece_tree *, uint64_t offset);

/* Whether a piece of the tree has bytes in [start, end).  Inline: on
 * the way around the queue both trees are usually empty, one load each.
 */
static inline bool
pieces_between (struct piece_tree *tree, uint64_t start, uint64_t end)
{
  struct piece *p;

  if (RB_EMPTY (tree))
    return false;
  p = first_reaching (tree, start);
  return p && p->offset < end;
}
/* What cut_overlaps cut: any queued piece, one a pending FLUSH covers. */
#define CUT_ANY 1
#define CUT_COVERED 2
/* Pieces it covers whole leave the queue onto *superseded, still
 * counted present: pieces_superseded_done finishes them once the piece
 * that covers them is linked.
 */
int cut_overlaps (struct queue *, uint64_t offset, uint64_t end,
                  struct piece_list *superseded);
void pieces_superseded_done (struct queue *, struct piece_list *superseded);

/* queue_flush.c */
uint64_t flush_start_locked (struct queue *);
int flush_wait_and_unlock (struct queue *, struct session *, uint64_t ticket,
                           uint64_t mark, uint64_t start_ns);
int fua_wait_and_unlock (struct queue *, struct session *,
                         const struct completion *);
int fua_written_and_unlock (struct queue *, struct session *,
                            const struct completion *);
bool flush_covers (const struct queue *, const struct piece *);
bool flush_due (const struct queue *);
void backend_flush_locked (struct queue *);
void session_writes_here (struct queue *, struct session *);
void latch_error (struct queue *, int errnum);
uint64_t error_mark (struct queue *, struct session *);

/* queue_failing.c */
bool piece_keep_failed (struct queue *, struct piece *, int err,
                        bool flush_came_since, uint64_t now);
bool failing_retry (struct queue *, uint64_t now);
uint64_t failing_retry_ns (const struct queue *);
void failing_note_success (struct queue *, uint64_t now);
int failing_error_for (const struct queue *, uint64_t barrier_seq);
int failing_blocks_writers (const struct queue *);
void failing_drop_all (struct queue *);

/* queue_read_depth.c: a read that did not wait, for what it says about
 * the backend; whether the backend queues reads, so that a stream read
 * at depth should wait to merge.  Lock-free.
 */
void read_depth_note (struct read_depth *, unsigned active_at_arrival,
                      uint64_t latency_ns);
bool read_depth_queues (const struct read_depth *);

/* queue_read_ahead.c: a read answered from a read-ahead window (true),
 * or left to the caller (false); stream: it continues a recent read
 * and may open a window.  Forgetting: a write, zero or trim, after it
 * is in the queue or the backend and before its answer.
 */
bool read_ahead_read (struct queue *, void *buf, uint32_t count,
                      uint64_t offset, bool stream);
void read_ahead_forget (struct queue *, uint64_t count, uint64_t offset);
void read_ahead_forget_all (struct queue *);
/* Whether a window may be listed, for a writer to skip read_ahead_forget
 * without a call.  Sequentially consistent with window_open's count:
 * either the writer sees the window, or the window's fill sees the write.
 */
static inline bool
read_ahead_windows_listed (struct queue *q)
{
  return atomic_load (&q->read_streams.windows_listed) > 0;
}

/* queue_read_streams.c: a read request, at once or merged behind a
 * busy stream, counted; 0 or -1 with errno.
 */
int read_request (struct queue *, void *buf, uint32_t count,
                  uint64_t offset);

/* queue_stream.c */
void note_write_end (struct queue *, uint64_t end);
bool continues_recent_write (const struct queue *, uint64_t offset);
/* The grain a stream's buffer ends on (stream_room), and the most room
 * it gives one: less than a grain and a half.
 */
#define STREAM_ROOM (UINT64_C (64) * 1024)
#define STREAM_ROOM_MOST (STREAM_ROOM * 3 / 2)
/* Freed stream buffers a disk keeps for the next ones: a stream frees a
 * few with every batch written, and allocates as many.
 */
#define STREAM_SPARES 8
uint32_t stream_room (const struct queue *, uint32_t count, uint64_t offset,
                      unsigned flags);
bool append_may_fit (const struct queue *, uint64_t offset, unsigned flags);
void note_newest_piece (struct queue *, const struct piece *);
void forget_if_newest (struct queue *, const struct piece *);
bool append_to_stream (struct queue *, struct session *, const void *buf,
                       uint32_t count, uint64_t offset);

/* Under the lock: a request arrives, whichever way it then goes
 * (queued, appended, around the queue).  It is counted, its session
 * hears of this disk's write-back errors from now on, and a write's end
 * is remembered to tell streams by.  Inline: it is on every write's
 * path, and the kind is known where it is called.
 */
static inline void
note_request (struct queue *q, struct session *s, enum op_kind kind,
              uint64_t count, uint64_t offset, unsigned flags)
{
  struct op_counters *c = &q->stats.op[kind];

  queue_assert_locked (q);
  session_writes_here (q, s);
  c->requests++;
  c->request_bytes += count;
  if (kind == OP_WRITE)
    note_write_end (q, offset + count);
  if (flags & REQ_FUA)
    q->stats.fua_requests++;
}

/* queue_read.c: a read or extents laid over the queue's pieces; 0, or
 * -1 with errno.
 */
int read_overlaid (struct queue *, void *buf, uint32_t count,
                   uint64_t offset);
int extents_overlaid (struct queue *, uint64_t count, uint64_t offset,
                      struct extent_list *);

/* Write batches the read allowance is shared among (batch_room). */
#define READ_ALLOWANCE_PARTS 8

/* How soon the dispatch thread looks again at writes held back for
 * reads (batch_room): reads may have stopped, the allowance grown, or the
 * oldest write expired, and none of those wakes it.
 */
#define READ_HOLD_LOOK_NS (5 * NS_PER_MS)

/* Whether p still waits behind a busy stream (piece->held_until). */
static inline bool
piece_held (const struct queue *q, const struct piece *p)
{
  return p->held_until > q->batches_done;
}

/* queue_batch.c */
bool batch_reserve (struct queue *);
void batches_free (struct queue *);
struct batch *batch_take (struct queue *);
void batch_add (struct queue *, struct batch *, struct piece *,
                uint64_t now);
bool batch_may_grow (struct queue *, struct batch *, const struct piece *);
bool in_flight_between (struct queue *, uint64_t start, uint64_t end);
void batch_prepare (struct batch *);
void batch_complete (struct queue *, struct batch *, int err,
                     struct sleeper **wake_later);
struct batch *retry_due (struct queue *);
uint64_t next_retry_ns (const struct queue *);

/* One backend operation of that kind, carrying `pieces` queued pieces
 * (or one request that went around the queue), done after took_ns.
 * Inline: it runs for every backend operation.
 */
static inline void
count_backend_op (struct queue *q, enum op_kind kind, uint64_t bytes,
                  uint32_t pieces, uint64_t took_ns, int err)
{
  struct op_counters *c = &q->stats.op[kind];

  queue_assert_locked (q);
  c->backend_ops++;
  c->backend_bytes += bytes;
  q->stats.requests_dispatched += pieces;
  latency_record (&q->stats.dispatch_time, took_ns);
  if (err)
    c->errors++;
}

/* queue_align.c: what a backend with min_block > 1 needs; block_mask
 * is 0 for every other, and these cost it nothing.
 */
static inline uint64_t
block_down (const struct queue *q, uint64_t offset)
{
  return offset & ~q->block_mask;
}

static inline uint64_t
block_up (const struct queue *q, uint64_t offset)
{
  return (offset + q->block_mask) & ~q->block_mask;
}

void batch_align (struct queue *, struct batch *, uint64_t now);
int batch_io_unaligned (struct backend *, struct batch *);
int read_unaligned (struct queue *, void *buf, uint32_t count,
                    uint64_t offset);

/* A prepared batch to its backend, unlocked: ops->io, or for a batch
 * that does not cover whole blocks the read-modify-write of
 * queue_align.c.  As ops->io returns.
 */
static inline int
batch_io (struct backend *be, struct batch *b)
{
  if (b->unaligned)
    return batch_io_unaligned (be, b);
  return be->ops->io (be, &b->io);
}

/* The backend's pread, through an aligned bounce buffer where the range
 * is not whole blocks of a backend that needs them.
 */
static inline int
read_backend (struct queue *q, void *buf, uint32_t count, uint64_t offset)
{
  if ((offset | count) & q->block_mask)
    return read_unaligned (q, buf, count, offset);
  return q->backend->ops->pread (q->backend, buf, count, offset);
}

/* queue_dispatch.c */

/* Batches a synchronous backend is given per hold of the queue lock. */
#define SYNC_ROUND 32

/* Steps a request thread takes before leaving the rest to the dispatch
 * thread: enough for what its own unplug sent out, bounded so that a
 * stream of arrivals cannot keep one client's answer waiting.
 */
#define STEPS_HERE 4

/* Batches a request thread writes out when its write joins a queue that
 * is already running: each arrival pays for about its own share, so the
 * queue drains as fast as it fills without one thread doing it all.
 */
#define HELP_ROUND 4

void queue_kick_dispatcher (struct queue *);
bool take_bypass_token (struct queue *, bool fua);
void release_bypass_token (struct queue *, bool fua);
void release_token (struct queue *);
void hand_token_to_flush (struct queue *);
bool run_queue_here (struct queue *, int steps, unsigned round);
bool run_queue_until_flushed (struct queue *, uint64_t ticket);
bool run_queue_until_written (struct queue *, const struct completion *);
int dispatch_thread_start (struct queue *);

/* queue_bypass.c */

/* bypass_write's answer when the write must take the queue. */
#define BYPASS_DECLINED 1

/* Unlocked: the write around the queue when bypass_allowed says it may
 * go, answered (0, or -1 with errno); BYPASS_DECLINED, with nothing
 * done, when it must be queued.
 */
int bypass_write (struct queue *, struct session *, const void *buf,
                  uint32_t count, uint64_t offset, unsigned flags);
bool bypass_overlaps (const struct queue *, uint64_t start, uint64_t end);

/* The smallest write forwarded while reads compete
 * (forward_while_reading).
 */
#define READ_FORWARD_MIN (64 * 1024)

/* Whether reads compete with writes now (read_feedback_competing). */
bool reads_compete_now (const struct queue *);

/* Without the lock or under it: whether a write of count bytes goes to
 * the backend as it came rather than merged, when it may go around the
 * queue at all: it fills a batch alone (max-merge), or reads compete on
 * a backend where they would wait behind a merged batch.
 */
static inline bool
write_goes_as_it_came (const struct queue *q, uint64_t count)
{
  return count >= q->merge_limit
    || (q->forward_while_reading && count >= READ_FORWARD_MIN
        && reads_compete_now (q));
}

/* queue_room.c */

/* queue-requests is the kernel's nr_requests: every queued piece costs
 * lookups for every arrival and dispatch, and zeroes and trims hold no
 * data for queue-bytes to count.  A writer woken for room and not yet
 * up holds a piece's room (space_wakes), so that a writer arriving
 * meanwhile does not take it and send the woken one back to sleep.
 */
static inline bool
queue_full (const struct queue *q, uint64_t bytes)
{
  queue_assert_locked (q);
  return q->nr_queued + q->space_wakes >= q->cfg.queue_requests
    || (q->queued_bytes > 0 && q->queued_bytes + bytes > q->cfg.queue_bytes);
}

/* Back-pressure on a full queue: the writer helps write it out, or
 * sleeps until room is passed to it.  Drops q->lock meanwhile.  0, or
 * the errno of answered data failing to be written back, which fills the
 * queue for as long as it fails (queue_failing.c).
 */
int wait_for_space_slow (struct queue *, uint64_t bytes);
/* A completion freed a backend slot: whether to wake a writer waiting
 * for room to use it (signalled once the caller drops q->lock).
 */
bool room_wake_for_slot (struct queue *);
void room_pass_on_slow (struct queue *);

/* Wakes a writer asleep for room if some is left that nobody awake, or
 * already woken, will take.  Inline: a sleeper to wake is rare.
 */
static inline void
room_pass_on (struct queue *q)
{
  queue_assert_locked (q);
  if (__builtin_expect (q->space_sleepers > q->space_wakes, 0))
    room_pass_on_slow (q);
}

/* queue_spares.c */

/* After a batch freed its buffers: arms the dispatch thread's look at
 * the spare buffers, if they grew past what a quiet disk keeps.
 */
void spares_arm_look (struct queue *);
/* Whether that look is due now. */
bool spares_look_due (struct queue *);
/* The look: gives back the spares of a disk that took none since the
 * previous one.  Drops q->lock around the munmaps.
 */
void spares_trim (struct queue *);

/* Under the lock: the operations the queue has outstanding on its
 * backend, which an asynchronous backend's max_in_flight bounds: its
 * batches and the writes going around it.  A synchronous backend's
 * writes around the queue hold dispatch tokens instead.
 */
static inline uint32_t
ops_in_flight (const struct queue *q)
{
  queue_assert_locked (q);
  return backend_is_async (q->backend) ? q->nr_batches + q->nr_bypassing
    : q->nr_batches;
}

#endif /* PLUGQ_QUEUE_INTERNAL_H */
