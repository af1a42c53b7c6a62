/* plugq: one disk's plugged request queue.
 *
 * Life of a write: the request thread copies the data into a buffer,
 * takes the queue lock, cuts older queued pieces where the new one
 * overlaps them (newest data wins, whatever order they go out in),
 * inserts the piece, plugs an idle queue (arming its unplug timer) or
 * unplugs it when a trigger says so, and answers.  The disk's dispatch
 * thread, woken by an unplug, asks the elevator where to start, takes
 * that piece and the pieces that continue it back to back, drops the
 * lock and issues one backend operation for all of them.
 *
 * Reads and extents never wait for the queue: they snapshot the pieces
 * that overlap them (in flight, then queued: the newer ones), read the
 * backend, and lay the snapshot over the result.
 *
 * FLUSH registers a barrier at the newest sequence number and waits for
 * a backend flush that starts after every piece up to the barrier has
 * been written.  Flushes and FUA writes that arrive together share one
 * backend flush (group commit).
 *
 * A synchronous backend's writes and flushes are issued by whoever holds
 * one of the disk's dispatch tokens: one, or the backend's max_writers.
 * The request thread whose arrival unplugged the queue runs it itself,
 * as a kernel submitter does at blk_finish_plug, and so does one that
 * would otherwise sleep (FUA, FLUSH, ack=dispatched, a full queue); a
 * write that joins a queue already running writes out a few batches
 * (HELP_ROUND) if a token is free.  The dispatch thread does what no
 * request thread is there for (the unplug timer, a volume's flush, a
 * backlog).  Handing every unplug to the dispatch thread cost context
 * switches per request and left that one thread a single thread's share
 * of the CPU against every request thread; leaving it to one holder made
 * the other request threads fill the queue and sleep until it drained.
 * Holders take batches under the lock and never one over bytes still in
 * flight, so nothing in flight can overlap a newer write, and the queue
 * lock is never held across I/O.
 */
#include <config.h>

#include <assert.h>
#include <stddef.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "buffer_pool.h"
#include "elevator.h"
#include "log.h"
#include "queue.h"
#include "request.h"
#include "session.h"
#include "timer_service.h"

#define MS (UINT64_C (1000000))

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

struct flush_state {
  bool wanted;
  bool running;                 /* a backend flush is in progress */
  uint64_t barrier_seq;         /* pieces up to here go before the flush */
  uint64_t next_epoch;          /* the backend flush not yet started */
  uint64_t done_epoch;          /* the last backend flush finished */
  uint64_t failed_epoch;        /* the last backend flush that failed */
  int failed_errno;
};

/* Write-back errors of answered writes, as the kernel's errseq_t. */
struct latched_error {
  uint64_t seq;                 /* bumped on every error */
  int errnum;
  bool seen;
  uint64_t sessions_then;       /* session generation at the latest error */
};

struct queue {
  char *name;
  struct backend *backend;
  struct queue_config cfg;
  uint64_t merge_limit;         /* min (max-merge, backend max_write) */
  unsigned index;               /* this disk's slot in every session */

  pthread_mutex_t lock;
  pthread_cond_t dispatch_wake; /* the dispatch thread sleeps here */
  pthread_cond_t progress;      /* pieces written, space */
  pthread_cond_t flushed;       /* a backend flush finished */

  struct piece_tree by_offset;
  struct piece_list by_age;
  struct piece_tree in_flight;  /* pieces on their way, by offset */
  uint32_t nr_batches;
  uint32_t max_in_flight;       /* batches taken at once */
  struct batch *spare_batches;  /* finished, for the next to reuse */
  struct batch *retrying;       /* in flight, waiting to be tried again */
  struct elevator_state elevator;
  uint32_t nr_queued;
  uint64_t queued_bytes;
  uint64_t next_seq;

  bool plugged;
  bool running;                 /* unplugged: dispatching */
  unsigned holders;             /* dispatch tokens held */
  unsigned max_holders;         /* the backend's max_writers */
  uint64_t unplug_seq;          /* an unplug sends out everything up to here */
  uint32_t full_waiters;
  uint32_t dispatched_waiters;  /* ack=dispatched writers not yet answered */
  bool stopping;

  struct flush_state flush;
  struct latched_error error;

  struct unplug_timer timer;
  struct buffer_pool *buffers;  /* spare mappings for aligned data */
  pthread_t dispatcher;
  bool dispatcher_started;

  struct queue_stats stats;
};

void
queue_config_defaults (struct queue_config *c)
{
  c->elevator = &elevator_deadline;
  c->ack = ACK_QUEUED;
  c->unplug_delay_ns = 3 * MS;
  c->unplug_thresh = 16;
  c->max_merge = 1024 * 1024;
  c->queue_bytes = 64 * 1024 * 1024;
  c->queue_requests = 256;
  c->write_expire_ns = 5000 * MS;
  c->retry_ns = 10000 * MS;
}

/* Spare aligned buffers a disk keeps (buffer_pool.h).  A completed batch
 * frees up to max-merge bytes at once and the next writes take them
 * again, so a few batches' worth covers a stream; never more than the
 * queue itself may hold.
 */
#define SPARE_BUFFERS_MAX (16 * 1024 * 1024)

static uint64_t
spare_buffers_max (const struct queue_config *cfg)
{
  return cfg->queue_bytes < SPARE_BUFFERS_MAX
    ? cfg->queue_bytes : SPARE_BUFFERS_MAX;
}

static void timer_fired (void *q, uint64_t deadline_ns);
static bool batch_reserve (struct queue *q);
static bool run_queue_here (struct queue *q, int steps, unsigned round);
static void wait_or_work (struct queue *q, pthread_cond_t *until);

struct queue *
queue_new (const char *name, struct backend *backend,
           const struct queue_config *cfg)
{
  struct queue *q = calloc (1, sizeof *q);

  if (q == NULL || (q->name = strdup (name)) == NULL
      || (q->buffers = buffer_pool_new (spare_buffers_max (cfg))) == NULL
      || !batch_reserve (q)) {
    if (q) {
      buffer_pool_free (q->buffers);
      free (q->name);
    }
    free (q);
    return NULL;
  }
  q->backend = backend;
  q->cfg = *cfg;
  q->merge_limit = cfg->max_merge;
  if (backend->max_write && backend->max_write < q->merge_limit)
    q->merge_limit = backend->max_write;
  q->index = session_register_queue ();
  pthread_mutex_init (&q->lock, NULL);
  cond_init_monotonic (&q->dispatch_wake);
  pthread_cond_init (&q->progress, NULL);
  pthread_cond_init (&q->flushed, NULL);
  RB_INIT (&q->by_offset);
  TAILQ_INIT (&q->by_age);
  RB_INIT (&q->in_flight);
  q->max_holders = !backend->ops->submit && backend->max_writers > 1
    ? backend->max_writers : 1;
  q->max_in_flight = backend->ops->submit && backend->max_in_flight > 1
    ? backend->max_in_flight : SYNC_ROUND * q->max_holders;
  q->elevator.by_offset = &q->by_offset;
  q->elevator.by_age = &q->by_age;
  q->flush.next_epoch = 1;
  unplug_timer_init (&q->timer, timer_fired, q);
  return q;
}

const char *
queue_name (const struct queue *q)
{
  return q->name;
}

const struct backend *
queue_backend (const struct queue *q)
{
  return q->backend;
}

const struct queue_config *
queue_get_config (const struct queue *q)
{
  return &q->cfg;
}

/* ------------------------------------------------------------ plugging */

static void
plug (struct queue *q)
{
  q->plugged = true;
  q->stats.plugs++;
  unplug_timer_arm (&q->timer, q->cfg.unplug_delay_ns);
  if (log_queue_events)
    log_debug ("%s: plug (%" PRIu32 " queued)", q->name, q->nr_queued);
}

/* Called with the lock held.  Only a plugged queue counts an unplug, as
 * in the kernel: a running queue is already draining.
 */
static void
unplug_locked (struct queue *q, enum unplug_cause cause)
{
  if (q->plugged) {
    q->plugged = false;
    unplug_timer_cancel (&q->timer);
    q->stats.unplugs[cause]++;
    if (log_queue_events)
      log_debug ("%s: unplug (%s, %" PRIu32 " queued)",
                 q->name, unplug_cause_names[cause], q->nr_queued);
  }
  q->running = true;
  q->unplug_seq = q->next_seq;
}

/* Wakes the dispatch thread for work no request thread will do.  While
 * a token is held, the last holder looks again before letting go.
 */
static void
kick_dispatcher (struct queue *q)
{
  if (q->holders == 0)
    pthread_cond_signal (&q->dispatch_wake);
}

void
queue_unplug (struct queue *q, enum unplug_cause cause)
{
  pthread_mutex_lock (&q->lock);
  unplug_locked (q, cause);
  kick_dispatcher (q);
  pthread_mutex_unlock (&q->lock);
}

/* Timer thread: hand the unplug to the dispatcher and go.  A claim
 * that fails means this queue unplugged and plugged again after the
 * timer went off: the new plug has a deadline of its own.
 */
static void
timer_fired (void *arg, uint64_t deadline_ns)
{
  struct queue *q = arg;

  pthread_mutex_lock (&q->lock);
  if (unplug_timer_claim (&q->timer, deadline_ns) && q->plugged) {
    unplug_locked (q, UNPLUG_TIMER);
    kick_dispatcher (q);
  }
  pthread_mutex_unlock (&q->lock);
}

/* After a piece joined the queue: plug an idle queue, unplug on a
 * threshold or a sync trigger.  True when this arrival unplugged it.
 *
 * A writer about to wait for its own write (FUA, ack=dispatched) is the
 * kernel's process asleep on its page, which unplugs the device at once
 * (the 2004 sync_page change): holding the plug could only make it wait.
 * Merging goes on regardless: arrivals while the backend is busy queue
 * up and go out together.  Waiting 200 us after the last arrival
 * instead cost a QD16 ack=dispatched stream 60 % of its writes/s.
 */
static bool
after_insert (struct queue *q, unsigned flags, bool waiter)
{
  if (!q->plugged && !q->running)
    plug (q);
  if (waiter)
    unplug_locked (q, UNPLUG_SYNC);
  else if (q->plugged && (q->nr_queued >= q->cfg.unplug_thresh
                          || q->queued_bytes >= q->merge_limit))
    unplug_locked (q, UNPLUG_THRESHOLD);
  else
    return false;
  return true;
}

/* ------------------------------------------------------------ pieces */

static void
queue_link (struct queue *q, struct piece *p, struct piece *after)
{
  RB_INSERT (piece_tree, &q->by_offset, p);
  if (after)
    TAILQ_INSERT_AFTER (&q->by_age, after, p, by_age);
  else
    TAILQ_INSERT_TAIL (&q->by_age, p, by_age);
  q->nr_queued++;
  if (p->kind == OP_WRITE)
    q->queued_bytes += p->length;
}

static void
queue_unlink (struct queue *q, struct piece *p)
{
  RB_REMOVE (piece_tree, &q->by_offset, p);
  TAILQ_REMOVE (&q->by_age, p, by_age);
  q->nr_queued--;
  if (p->kind == OP_WRITE)
    q->queued_bytes -= p->length;
}

static void
piece_free (struct piece *p)
{
  data_buffer_put (p->buf);
  free (p);
}

/* A piece that will never reach the backend because a newer request
 * covers it counts as written for whoever waits on it: the newer data
 * is what the disk must hold.
 */
static void
piece_superseded (struct queue *q, struct piece *p)
{
  queue_unlink (q, p);
  if (p->waiter && --p->waiter->pending == 0)
    pthread_cond_broadcast (&q->progress);
  piece_free (p);
}

static void
piece_drop_front (struct piece *p, uint64_t new_offset)
{
  uint64_t cut = new_offset - p->offset;

  p->offset = new_offset;
  p->length -= cut;
  p->buf_offset += cut;
}

/* The part of p past `end` as a piece of its own, next to p in age. */
static struct piece *
piece_split_tail (struct queue *q, struct piece *p, uint64_t end)
{
  struct piece *tail = malloc (sizeof *tail);

  if (tail == NULL)
    return NULL;
  *tail = *p;
  if (tail->buf)
    data_buffer_get (tail->buf);
  if (tail->waiter)
    tail->waiter->pending++;
  piece_drop_front (tail, end);
  if (p->kind == OP_WRITE)
    q->queued_bytes -= tail->length;     /* re-added by queue_link */
  p->length = end - p->offset;
  queue_link (q, tail, p);
  return tail;
}

/* Whether a pending FLUSH promised p's bytes. */
static bool
flush_covers (const struct queue *q, const struct piece *p)
{
  return q->flush.wanted && p->seq <= q->flush.barrier_seq;
}

/* The first piece of a tree that reaches offset or beyond.  Pieces in
 * one tree never overlap, so only the one before the first that starts
 * at offset or later can reach into the range.
 */
static struct piece *
first_reaching (struct piece_tree *tree, uint64_t offset)
{
  struct piece key = { .offset = offset };
  struct piece *p = RB_NFIND (piece_tree, tree, &key);
  struct piece *prev = p ? RB_PREV (piece_tree, tree, p)
    : RB_MAX (piece_tree, tree);

  return prev && piece_end (prev) > offset ? prev : p;
}

/* Makes [offset, end) free of queued pieces, so the new piece is the
 * only source of those bytes.  In-flight pieces are left alone: they are
 * older, already being written, and the new piece goes out after them.
 * 1 when a cut piece was one a pending FLUSH covers: the new piece now
 * holds the only copy of bytes that flush promised.
 */
static int
cut_overlaps (struct queue *q, uint64_t offset, uint64_t end)
{
  struct piece *p = first_reaching (&q->by_offset, offset);
  int covered = 0;

  if (p && p->offset < offset) {        /* keeps its head */
    struct piece *prev = p;

    p = RB_NEXT (piece_tree, &q->by_offset, prev);
    covered |= flush_covers (q, prev);
    if (piece_end (prev) > end && piece_split_tail (q, prev, end) == NULL)
      return -1;
    if (prev->kind == OP_WRITE)
      q->queued_bytes -= piece_end (prev) - offset;
    prev->length = offset - prev->offset;
  }
  while (p && p->offset < end) {
    struct piece *next = RB_NEXT (piece_tree, &q->by_offset, p);

    covered |= flush_covers (q, p);
    if (piece_end (p) <= end)
      piece_superseded (q, p);
    else {
      if (p->kind == OP_WRITE)
        q->queued_bytes -= end - p->offset;
      piece_drop_front (p, end);        /* keeps its place in the tree */
    }
    p = next;
  }
  return covered;
}

/* queue-requests is the kernel's nr_requests: every queued piece costs
 * lookups for every arrival and dispatch, and zeroes and trims hold no
 * data for queue-bytes to count.
 */
static bool
queue_full (const struct queue *q, uint64_t bytes)
{
  return q->nr_queued >= q->cfg.queue_requests
    || (q->queued_bytes > 0 && q->queued_bytes + bytes > q->cfg.queue_bytes);
}

/* Back-pressure: the writer waits, queued data is never dropped. */
static void
wait_for_space (struct queue *q, uint64_t bytes)
{
  bool counted = false;

  while (queue_full (q, bytes)) {
    if (!counted) {
      q->stats.full_waits++;
      counted = true;
    }
    unplug_locked (q, UNPLUG_FULL);
    q->full_waiters++;
    wait_or_work (q, &q->progress);
    q->full_waiters--;
  }
}

static int
check_range (struct queue *q, uint64_t count, uint64_t offset)
{
  uint32_t align = q->backend->limits.minimum;

  if (offset > q->backend->size || count > q->backend->size - offset) {
    errno = ENOSPC;
    return -1;
  }
  /* Direct I/O cannot take a misaligned piece, and the spec lets a
   * server refuse what the advertised minimum block size forbids.
   */
  if (align > 1 && ((offset | count) & (align - 1))) {
    errno = EINVAL;
    return -1;
  }
  return 0;
}

/* ------------------------------------------------------------ errors */

static uint64_t *
error_cursor (struct queue *q, struct session *s)
{
  uint64_t *slot = session_slot (s, q->index);

  /* A cursor is set on first use, but must read as if set when the
   * session opened: a session that existed at the latest error is told
   * of it, and one opened later is told only if nobody has been yet
   * (as errseq_sample does at open).
   */
  if (slot && *slot == SESSION_SLOT_UNSET) {
    bool existed = q->error.seq > 0
      && session_id (s) <= q->error.sessions_then;

    *slot = q->error.seq > 0 && (existed || !q->error.seen)
      ? q->error.seq - 1 : q->error.seq;
  }
  return slot;
}

static void
latch_error (struct queue *q, int errnum)
{
  q->error.seq++;
  q->error.errnum = errnum;
  q->error.seen = false;
  q->error.sessions_then = session_generation ();
  q->stats.latched_errors++;
}

/* The latched error this session has not been told about, or 0. */
static int
take_latched_error (struct queue *q, struct session *s)
{
  uint64_t *cursor = error_cursor (q, s);

  if (q->error.seq == 0)
    return 0;
  if (cursor == NULL) {         /* no session: report what nobody saw */
    if (q->error.seen)
      return 0;
    q->error.seen = true;
    return q->error.errnum;
  }
  if (*cursor >= q->error.seq)
    return 0;
  *cursor = q->error.seq;
  q->error.seen = true;
  return q->error.errnum;
}

/* ------------------------------------------------------------ flushing */

static uint64_t
flush_start_locked (struct queue *q)
{
  q->flush.wanted = true;
  if (q->next_seq > q->flush.barrier_seq)
    q->flush.barrier_seq = q->next_seq;
  unplug_locked (q, UNPLUG_FLUSH);
  return q->flush.next_epoch;
}

static int
flush_wait_locked (struct queue *q, struct session *s, uint64_t ticket)
{
  int err, latched;

  /* Not woken by every written batch: a FUA stream keeps a dozen
   * threads here, and waking them all for each batch cost a quarter
   * of its rate in context switches.  Whoever holds a token, or the
   * dispatch thread after it, brings the flush about.
   */
  while (q->flush.done_epoch < ticket)
    wait_or_work (q, &q->flushed);
  err = q->flush.failed_epoch >= ticket ? q->flush.failed_errno : 0;
  /* Taken even when the flush failed: that answer tells this session. */
  latched = take_latched_error (q, s);
  return err ? err : latched;
}

uint64_t
queue_flush_start (struct queue *q)
{
  uint64_t ticket;

  pthread_mutex_lock (&q->lock);
  q->stats.flushes++;
  ticket = flush_start_locked (q);
  kick_dispatcher (q);          /* a volume starts every member at once */
  pthread_mutex_unlock (&q->lock);
  return ticket;
}

/* Lock held on entry, released on return. */
static int
flush_wait_and_unlock (struct queue *q, struct session *s, uint64_t ticket,
                       uint64_t start_ns)
{
  int err = flush_wait_locked (q, s, ticket);

  latency_record (&q->stats.flush_time, monotonic_ns () - start_ns);
  pthread_mutex_unlock (&q->lock);
  if (err) {
    errno = err;
    return -1;
  }
  return 0;
}

int
queue_flush_wait (struct queue *q, struct session *s, uint64_t ticket)
{
  uint64_t start = monotonic_ns ();

  pthread_mutex_lock (&q->lock);
  return flush_wait_and_unlock (q, s, ticket, start);
}

/* One disk: no other member to overlap with, so the flushing thread
 * does the work itself instead of waking the dispatch thread for it.
 */
int
queue_flush (struct queue *q, struct session *s)
{
  uint64_t start = monotonic_ns ();

  pthread_mutex_lock (&q->lock);
  q->stats.flushes++;
  return flush_wait_and_unlock (q, s, flush_start_locked (q), start);
}

/* ------------------------------------------------------------ submit */

static struct piece *
piece_new (struct queue *q, enum op_kind kind, uint64_t count,
           uint64_t offset, unsigned flags)
{
  struct piece *p = calloc (1, sizeof *p);

  if (p == NULL)
    return NULL;
  p->offset = offset;
  p->length = count;
  p->kind = kind;
  p->may_trim = (flags & REQ_MAY_TRIM) != 0;
  p->arrival_ns = monotonic_ns ();
  p->expires_ns = p->arrival_ns + q->cfg.write_expire_ns;
  return p;
}

/* Queues p (unlocked on entry) and waits as the ack mode and FUA say. */
static int
submit (struct queue *q, struct session *s, struct piece *p, unsigned flags)
{
  struct completion done = { .pending = 1 };
  bool wait = (flags & REQ_FUA) || q->cfg.ack == ACK_DISPATCHED;
  struct op_counters *c = &q->stats.op[p->kind];
  bool unplugged;
  int covered, err = 0;

  pthread_mutex_lock (&q->lock);
  wait_for_space (q, p->kind == OP_WRITE ? p->length : 0);
  covered = cut_overlaps (q, p->offset, piece_end (p));
  if (covered == -1) {
    pthread_mutex_unlock (&q->lock);
    piece_free (p);
    errno = ENOMEM;
    return -1;
  }
  error_cursor (q, s);          /* this session now has writes here */
  p->seq = ++q->next_seq;
  /* The flush that covered what p replaced now waits for p. */
  if (covered)
    q->flush.barrier_seq = p->seq;
  p->waiter = wait ? &done : NULL;
  c->requests++;
  c->request_bytes += p->length;
  if (flags & REQ_FUA)
    q->stats.fua_requests++;
  queue_link (q, p, NULL);
  unplugged = after_insert (q, flags, wait);

  if (flags & REQ_FUA)
    err = flush_wait_locked (q, s, flush_start_locked (q));
  else if (wait) {
    q->dispatched_waiters++;
    while (done.pending > 0)
      wait_or_work (q, &q->progress);
    q->dispatched_waiters--;
  }
  else if (unplugged)
    run_queue_here (q, STEPS_HERE, SYNC_ROUND);
  else if (q->running)          /* joined a running queue: its share */
    run_queue_here (q, 1, HELP_ROUND);
  if (wait && done.err)
    err = done.err;
  pthread_mutex_unlock (&q->lock);
  if (err) {
    errno = err;
    return -1;
  }
  return 0;
}

int
queue_pwrite (struct queue *q, struct session *s, const void *buf,
              uint32_t count, uint64_t offset, unsigned flags)
{
  struct piece *p;

  if (check_range (q, count, offset) == -1)
    return -1;
  if (count == 0)
    return 0;
  p = piece_new (q, OP_WRITE, count, offset, flags);
  if (p == NULL
      || (p->buf = data_buffer_new (buf, count, q->backend->buffer_align,
                                    q->buffers)) == NULL) {
    free (p);
    errno = ENOMEM;
    return -1;
  }
  return submit (q, s, p, flags);
}

/* Zeroes and trims: a piece with no data. */
static int
submit_dataless (struct queue *q, struct session *s, enum op_kind kind,
                 uint64_t count, uint64_t offset, unsigned flags)
{
  struct piece *p;

  if (count == 0)
    return 0;
  if ((p = piece_new (q, kind, count, offset, flags)) == NULL) {
    errno = ENOMEM;
    return -1;
  }
  return submit (q, s, p, flags);
}

int
queue_zero (struct queue *q, struct session *s, uint64_t count,
            uint64_t offset, unsigned flags)
{
  if (check_range (q, count, offset) == -1)
    return -1;
  /* A queued zero is answered at once, but it can only promise to be
   * fast when the backend zeroes without writing every byte.
   */
  if ((flags & REQ_FAST_ZERO) && !q->backend->can_fast_zero) {
    errno = ENOTSUP;
    return -1;
  }
  return submit_dataless (q, s, OP_ZERO, count, offset, flags);
}

int
queue_trim (struct queue *q, struct session *s, uint64_t count,
            uint64_t offset, unsigned flags)
{
  if (check_range (q, count, offset) == -1)
    return -1;
  return submit_dataless (q, s, OP_TRIM, count, offset, flags & REQ_FUA);
}

/* ------------------------------------------------------------ reads */

struct overlay {
  uint64_t offset, length;
  enum op_kind kind;
  bool may_trim;
  struct data_buffer *buf;
  uint32_t buf_offset;
};

struct overlay_set {
  struct overlay *v;
  size_t len, cap;
  struct overlay inline_v[8];
};

static int
overlay_add (struct overlay_set *set, const struct piece *p)
{
  if (set->len == set->cap) {
    size_t cap = set->cap * 2;
    struct overlay *v = malloc (cap * sizeof *v);

    if (v == NULL)
      return -1;
    memcpy (v, set->v, set->len * sizeof *v);
    if (set->v != set->inline_v)
      free (set->v);
    set->v = v;
    set->cap = cap;
  }
  set->v[set->len++] = (struct overlay) {
    .offset = p->offset, .length = p->length, .kind = p->kind,
    .may_trim = p->may_trim, .buf_offset = p->buf_offset,
    .buf = p->buf ? data_buffer_get (p->buf) : NULL,
  };
  return 0;
}

static void
overlay_free (struct overlay_set *set)
{
  for (size_t i = 0; i < set->len; i++)
    data_buffer_put (set->v[i].buf);
  if (set->v != set->inline_v)
    free (set->v);
}

/* Under the lock: every piece over [offset, end), oldest layer first.
 * Pieces in flight are always older than any queued piece they overlap:
 * a queued piece older than them would have been cut when they arrived.
 */
static int
collect_tree (struct piece_tree *tree, uint64_t offset, uint64_t end,
              struct overlay_set *set)
{
  struct piece *p = first_reaching (tree, offset);

  for (; p && p->offset < end; p = RB_NEXT (piece_tree, tree, p))
    if (overlay_add (set, p) == -1)
      return -1;
  return 0;
}

/* Under the lock: every piece over [offset, end), oldest layer first.
 * Pieces in flight are always older than any queued piece they overlap
 * (a queued piece older than them would have been cut when they
 * arrived), and never overlap each other (see overlaps_in_flight).
 */
static int
overlay_collect (struct queue *q, uint64_t offset, uint64_t end,
                 struct overlay_set *set)
{
  set->v = set->inline_v;
  set->len = 0;
  set->cap = sizeof set->inline_v / sizeof set->inline_v[0];
  if (collect_tree (&q->in_flight, offset, end, set) == -1)
    return -1;
  return collect_tree (&q->by_offset, offset, end, set);
}

static void
overlay_apply_data (const struct overlay_set *set, bool trim_reads_zero,
                    unsigned char *buf, uint64_t offset, uint64_t end)
{
  for (size_t i = 0; i < set->len; i++) {
    const struct overlay *o = &set->v[i];
    uint64_t from = o->offset > offset ? o->offset : offset;
    uint64_t to = o->offset + o->length < end ? o->offset + o->length : end;

    if (from >= to)
      continue;
    if (o->kind == OP_WRITE)
      memcpy (buf + (from - offset),
              o->buf->data + o->buf_offset + (from - o->offset), to - from);
    else if (o->kind == OP_ZERO || trim_reads_zero)
      memset (buf + (from - offset), 0, to - from);
  }
}

static int
snapshot (struct queue *q, uint64_t offset, uint64_t end,
          struct overlay_set *set)
{
  int r;

  pthread_mutex_lock (&q->lock);
  r = overlay_collect (q, offset, end, set);
  pthread_mutex_unlock (&q->lock);
  if (r == -1) {
    overlay_free (set);
    errno = ENOMEM;
  }
  return r;
}

int
queue_pread (struct queue *q, void *buf, uint32_t count, uint64_t offset)
{
  struct overlay_set set;
  uint64_t start = monotonic_ns ();
  int r;

  if (check_range (q, count, offset) == -1)
    return -1;
  if (snapshot (q, offset, offset + count, &set) == -1)
    return -1;
  r = q->backend->ops->pread (q->backend, buf, count, offset);
  if (r == 0)
    overlay_apply_data (&set, q->backend->trim_reads_zero, buf, offset,
                        offset + count);
  overlay_free (&set);

  pthread_mutex_lock (&q->lock);
  q->stats.op[OP_READ].requests++;
  q->stats.op[OP_READ].request_bytes += count;
  q->stats.op[OP_READ].backend_ops++;
  q->stats.op[OP_READ].backend_bytes += count;
  q->stats.op[OP_READ].ticks_ms_x1000 += (monotonic_ns () - start) / 1000;
  if (r == -1)
    q->stats.op[OP_READ].errors++;
  pthread_mutex_unlock (&q->lock);
  return r;
}

/* Queued data reads as data, queued zeroes as zero; a queued trim may
 * or may not punch a hole, so it claims nothing.
 */
int
queue_extents (struct queue *q, uint64_t count, uint64_t offset,
               struct extent_list *list)
{
  struct overlay_set set;
  uint64_t end;
  int r;

  if (count == 0) {
    errno = EINVAL;
    return -1;
  }
  if (check_range (q, count, offset) == -1)
    return -1;
  end = offset + count;
  if (snapshot (q, offset, end, &set) == -1)
    return -1;
  r = q->backend->ops->extents (q->backend, count, offset, list);
  if (r == 0)
    extent_list_truncate (list, end);
  for (size_t i = 0; r == 0 && i < set.len; i++) {
    const struct overlay *o = &set.v[i];
    uint32_t type = o->kind == OP_ZERO ? EXTENT_ZERO : 0;

    r = extent_list_overlay (list, o->offset, o->length, type);
  }
  overlay_free (&set);
  return r;
}

int
queue_cache (struct queue *q, uint64_t count, uint64_t offset)
{
  if (check_range (q, count, offset) == -1)
    return -1;
  return q->backend->ops->cache
    ? q->backend->ops->cache (q->backend, count, offset) : 0;
}

/* ------------------------------------------------------------ dispatch */

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
  enum op_kind kind;
  bool may_trim;
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

static size_t
batch_limit (const struct queue *q)
{
  /* unplug-thresh=1 is the unplugged baseline: one request, one op. */
  if (q->cfg.unplug_thresh <= 1)
    return 1;
  return q->backend->max_iov > 0 ? (size_t) q->backend->max_iov : 1024;
}

/* A piece may not go out while an older piece over the same bytes is
 * still on its way: the two could land in either order.
 */
static bool
overlaps_in_flight (struct queue *q, const struct piece *p)
{
  struct piece *f = first_reaching (&q->in_flight, p->offset);

  return f && f->offset < piece_end (p);
}

/* When the elevator's choice must wait for an operation in flight, the
 * oldest pieces that need not wait go instead of leaving the backend
 * idle for a round trip.
 */
#define DISPATCHABLE_SCAN 64

static struct piece *
oldest_dispatchable (struct queue *q)
{
  struct piece *p = TAILQ_FIRST (&q->by_age);

  for (int i = 0; p && i < DISPATCHABLE_SCAN; i++) {
    if (!overlaps_in_flight (q, p))
      return p;
    p = TAILQ_NEXT (p, by_age);
  }
  return NULL;
}

static void
batch_add (struct queue *q, struct batch *b, struct piece *p, uint64_t now)
{
  queue_unlink (q, p);
  RB_INSERT (piece_tree, &q->in_flight, p);
  TAILQ_INSERT_TAIL (&b->pieces, p, batch);
  latency_record (&q->stats.queue_time, now - p->arrival_ns);
  b->nr_pieces++;
  b->bytes += p->length;
  q->stats.in_flight++;
}

/* Under the lock.  A batch is taken and finished under the queue lock
 * anyway, so keeping finished ones costs nothing, and a queue of random
 * writes allocated and freed one per request.
 */
static struct batch *
batch_alloc (struct queue *q)
{
  struct batch *b = q->spare_batches;

  if (b == NULL)
    return malloc (sizeof *b);
  q->spare_batches = b->next_free;
  return b;
}

static void
batch_release (struct queue *q, struct batch *b)
{
  if (b->iov != b->inline_iov)
    free (b->iov);
  b->next_free = q->spare_batches;
  q->spare_batches = b;
}

/* Batches are never freed before the queue, so with one made here there
 * is always one to take when nothing is in flight: running out of
 * memory can slow a queue down but never stall it.
 */
static bool
batch_reserve (struct queue *q)
{
  struct batch *b = malloc (sizeof *b);

  if (b == NULL)
    return false;
  b->iov = b->inline_iov;
  batch_release (q, b);
  return true;
}

/* Under the lock, before a batch takes one more piece: its vector is
 * grown here, where running out of memory only ends the merge, and not
 * once the pieces are taken, where it would fail answered writes.
 */
static bool
batch_has_room (struct batch *b)
{
  struct iovec *iov;
  uint32_t room = b->iov_room < 64 ? 64 : b->iov_room * 2;

  if (b->kind != OP_WRITE || b->nr_pieces < b->iov_room)
    return true;
  iov = b->iov == b->inline_iov ? malloc (room * sizeof *iov)
    : realloc (b->iov, room * sizeof *iov);
  if (iov == NULL)
    return false;
  b->iov = iov;
  b->iov_room = room;
  return true;
}

/* Under the lock: the elevator's next run of pieces, or NULL when what it
 * would start with has to wait for an operation in flight.
 */
static struct batch *
batch_take (struct queue *q)
{
  uint64_t now = monotonic_ns ();
  struct piece *p;
  size_t limit = batch_limit (q);
  struct batch *b;

  q->elevator.barrier_seq = q->flush.wanted ? q->flush.barrier_seq : 0;
  p = q->cfg.elevator->first (&q->elevator, now);
  if (p && overlaps_in_flight (q, p))
    p = oldest_dispatchable (q);
  if (p == NULL || (b = batch_alloc (q)) == NULL)
    return NULL;
  *b = (struct batch) {
    .q = q, .offset = p->offset, .kind = p->kind, .may_trim = p->may_trim,
    .iov = b->inline_iov, .iov_room = BATCH_INLINE_IOV,
  };
  TAILQ_INIT (&b->pieces);
  for (;;) {
    struct piece *next = q->cfg.elevator->next (&q->elevator, p);

    batch_add (q, b, p, now);
    if (next == NULL || b->nr_pieces >= limit
        || b->bytes + next->length > q->merge_limit
        || overlaps_in_flight (q, next) || !batch_has_room (b))
      break;
    p = next;
  }
  q->elevator.head = b->offset + b->bytes;
  q->nr_batches++;
  return b;
}

static int
seq_cmp (const void *a, const void *b)
{
  uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;

  return x < y ? -1 : x > y;
}

/* Requests in the batch: fragments of one request cut apart by a newer
 * one and joined again are not merges.
 */
static uint32_t
batch_requests (const struct batch *b)
{
  uint64_t inline_seqs[32], *seqs = inline_seqs;
  const struct piece *p;
  uint32_t n = 0, distinct = 0;

  if (b->nr_pieces == 1)
    return 1;
  if (b->nr_pieces > 32
      && (seqs = malloc (b->nr_pieces * sizeof *seqs)) == NULL)
    return b->nr_pieces;
  TAILQ_FOREACH (p, &b->pieces, batch)
    seqs[n++] = p->seq;
  qsort (seqs, n, sizeof *seqs, seq_cmp);
  for (uint32_t i = 0; i < n; i++)
    if (i == 0 || seqs[i] != seqs[i - 1])
      distinct++;
  if (seqs != inline_seqs)
    free (seqs);
  return distinct;
}

/* Unlocked: describe the batch as one backend operation. */
static void
batch_prepare (struct batch *b)
{
  static const enum backend_io_kind kinds[] = {
    [OP_WRITE] = BACKEND_WRITE, [OP_ZERO] = BACKEND_ZERO,
    [OP_TRIM] = BACKEND_TRIM,
  };
  struct piece *p;
  int i = 0;

  /* For the merge count, here rather than under the lock at completion:
   * the pieces cannot change while they are in flight.
   */
  b->requests = batch_requests (b);
  b->io = (struct backend_io) {
    .kind = kinds[b->kind], .offset = b->offset, .count = b->bytes,
    .may_trim = b->may_trim,
  };
  if (b->kind != OP_WRITE)
    return;
  TAILQ_FOREACH (p, &b->pieces, batch) {
    b->iov[i].iov_base = p->buf->data + p->buf_offset;
    b->iov[i].iov_len = p->length;
    i++;
  }
  b->io.iov = b->iov;
  b->io.iovcnt = i;
}

static int
batch_run_sync (struct backend *be, const struct backend_io *io)
{
  switch (io->kind) {
  case BACKEND_WRITE:
    return be->ops->pwritev (be, io->iov, io->iovcnt, io->offset);
  case BACKEND_ZERO:
    return be->ops->zero (be, io->count, io->offset, io->may_trim);
  case BACKEND_TRIM:
    return be->ops->trim (be, io->count, io->offset);
  }
  abort ();
}


/* A write-out that failed for want of memory (here, in libnbd, on a
 * remote server or in the kernel) is tried again, backing off, while
 * its pieces stay in flight: reads still see them, no newer write over
 * the same bytes can overtake them, and a FLUSH waits for them.  Only a
 * shortage that outlasts retry_ns costs answered data, and is latched.
 */
#define RETRY_FIRST_NS (1 * MS)
#define RETRY_MAX_NS (1000 * MS)

static bool
batch_retry_later (struct queue *q, struct batch *b, uint64_t now)
{
  if (b->first_failed_ns == 0) {
    b->first_failed_ns = now;
    b->retry_delay_ns = RETRY_FIRST_NS;
    log_error ("%s: write-out of %" PRIu64 " bytes at %" PRIu64 " short of"
               " memory, trying again", q->name, b->bytes, b->offset);
  }
  else if (now - b->first_failed_ns >= q->cfg.retry_ns)
    return false;
  else if (b->retry_delay_ns < RETRY_MAX_NS)
    b->retry_delay_ns *= 2;
  b->retry_at_ns = now + b->retry_delay_ns;
  b->next_retry = q->retrying;
  q->retrying = b;
  q->stats.writeback_retries++;
  pthread_cond_signal (&q->dispatch_wake);
  return true;
}

/* Under the lock: a batch whose retry time has come, taken off the list. */
static struct batch *
retry_due (struct queue *q)
{
  uint64_t now = monotonic_ns ();

  for (struct batch **link = &q->retrying; *link; link = &(*link)->next_retry)
    if ((*link)->retry_at_ns <= now) {
      struct batch *b = *link;

      *link = b->next_retry;
      return b;
    }
  return NULL;
}

static uint64_t
next_retry_ns (const struct queue *q)
{
  uint64_t first = UINT64_MAX;

  for (const struct batch *b = q->retrying; b; b = b->next_retry)
    if (b->retry_at_ns < first)
      first = b->retry_at_ns;
  return first;
}

/* Under the lock: the batch is on the backend (or failed).  The caller
 * wakes the waiters (batch_wake), once for however many batches it
 * completed.
 */
static void
batch_complete (struct queue *q, struct batch *b, int err)
{
  uint64_t now = b->finished_ns;
  struct op_counters *c = &q->stats.op[b->kind];
  struct piece *p;
  bool latched = false;

  if (err == ENOMEM && batch_retry_later (q, b, now))
    return;
  c->backend_ops++;
  c->backend_bytes += b->bytes;
  c->merges += b->requests - 1;
  q->stats.requests_dispatched += b->nr_pieces;
  latency_record (&q->stats.dispatch_time, now - b->issued_ns);
  if (err)
    c->errors++;
  while ((p = TAILQ_FIRST (&b->pieces)) != NULL) {
    TAILQ_REMOVE (&b->pieces, p, batch);
    RB_REMOVE (piece_tree, &q->in_flight, p);
    q->stats.in_flight--;
    c->ticks_ms_x1000 += (now - p->arrival_ns) / 1000;
    q->stats.time_in_queue_us += (now - p->arrival_ns) / 1000;
    if (err && p->waiter && p->waiter->err == 0)
      p->waiter->err = err;
    else if (err && !p->waiter && !latched) {
      latch_error (q, err);     /* nobody left to tell but a flush */
      log_error ("%s: write-back failed: %s (reported on the next flush)",
                 q->name, strerror (err));
      latched = true;
    }
    if (p->waiter)
      p->waiter->pending--;
    piece_free (p);
  }
  q->nr_batches--;
  batch_release (q, b);
}

static void
batch_wake (struct queue *q)
{
  pthread_cond_broadcast (&q->progress);
  pthread_cond_signal (&q->dispatch_wake);
}

/* Backend thread: an asynchronous operation finished. */
static void
batch_done (struct backend_io *io, int err)
{
  struct batch *b = (struct batch *) ((char *) io
                                      - offsetof (struct batch, io));
  struct queue *q = b->q;

  b->finished_ns = monotonic_ns ();

  pthread_mutex_lock (&q->lock);
  batch_complete (q, b, err);
  batch_wake (q);
  pthread_mutex_unlock (&q->lock);
}

/* Called with the lock held; drops it while the backend takes it. */
static void
batch_submit (struct queue *q, struct batch *b)
{
  struct backend *be = q->backend;

  pthread_mutex_unlock (&q->lock);
  b->issued_ns = monotonic_ns ();
  batch_prepare (b);
  b->io.done = batch_done;
  if (be->ops->submit (be, &b->io) == 0) {
    pthread_mutex_lock (&q->lock);
    return;                     /* batch_done completes it */
  }
  /* Not submitted: complete it here as the backend would have. */
  batch_done (&b->io, errno ? errno : EIO);
  pthread_mutex_lock (&q->lock);
}

/* An unplug sends out what was queued when it happened.  Requests that
 * arrived during that dispatch plug the queue again unless they already
 * make a threshold's worth, or somebody is waiting for them: so a busy
 * queue keeps building merges instead of trickling out one small
 * operation per arrival.
 */
static bool
should_replug (const struct queue *q)
{
  const struct piece *oldest = TAILQ_FIRST (&q->by_age);

  return oldest && oldest->seq > q->unplug_seq
    && q->cfg.unplug_thresh > 1
    && q->nr_queued < q->cfg.unplug_thresh
    && q->queued_bytes < q->merge_limit
    && !q->flush.wanted && !q->stopping && q->full_waiters == 0
    && q->dispatched_waiters == 0;
}

/* While a FLUSH waits, only what it covers goes out: newer batches
 * would keep operations in flight and hold the flush back.
 */
static bool
can_dispatch (const struct queue *q)
{
  const struct piece *oldest = TAILQ_FIRST (&q->by_age);

  if (!q->running || oldest == NULL || q->nr_batches >= q->max_in_flight)
    return false;
  return !q->flush.wanted || oldest->seq <= q->flush.barrier_seq;
}

/* A synchronous backend: every batch the elevator will give (up to
 * SYNC_ROUND) is taken under one hold of the lock and written in one
 * go without it.  Random writes make one-piece batches; taking the lock
 * twice for each of them made the request threads and the dispatcher
 * fight over it (the lock, not the backend, limited IOPS).
 */
static void
dispatch_round (struct queue *q, struct batch *first, unsigned limit)
{
  struct batch *round[SYNC_ROUND], *b;
  int err[SYNC_ROUND];
  unsigned n = 0;

  round[n++] = first;
  while (n < limit && can_dispatch (q) && !should_replug (q)
         && (b = batch_take (q)) != NULL)
    round[n++] = b;
  pthread_mutex_unlock (&q->lock);
  for (unsigned i = 0; i < n; i++) {
    round[i]->issued_ns = monotonic_ns ();
    err[i] = 0;
    batch_prepare (round[i]);
    if (batch_run_sync (q->backend, &round[i]->io) == -1)
      err[i] = errno ? errno : EIO;
    round[i]->finished_ns = monotonic_ns ();
  }
  pthread_mutex_lock (&q->lock);
  for (unsigned i = 0; i < n; i++)
    batch_complete (q, round[i], err[i]);
  pthread_cond_broadcast (&q->progress);
}

/* Pieces up to the flush barrier are still queued or in flight. */
static bool
flush_blocked (const struct queue *q)
{
  const struct piece *oldest = TAILQ_FIRST (&q->by_age);

  return q->nr_batches > 0
    || (oldest && oldest->seq <= q->flush.barrier_seq);
}

/* A flush goes first once its barrier is clear, or a stream of new writes
 * would keep it waiting for an empty queue forever.  One at a time: with
 * several token holders a second could finish first, and epochs are
 * answered in order.
 */
static bool
flush_due (const struct queue *q)
{
  return q->flush.wanted && !q->flush.running && !flush_blocked (q);
}

static void
backend_flush_locked (struct queue *q)
{
  uint64_t epoch = q->flush.next_epoch++;
  int err = 0;

  q->flush.wanted = false;
  q->flush.running = true;
  pthread_mutex_unlock (&q->lock);
  if (q->backend->ops->flush (q->backend) == -1)
    err = errno ? errno : EIO;
  pthread_mutex_lock (&q->lock);
  q->flush.running = false;
  q->stats.backend_flushes++;
  /* The answered writes it carried may be lost (a page cache drops a
   * page it could not write back, and reports that once): every
   * session with writes before it must hear of it, not only the
   * requests waiting on this flush.
   */
  if (err) {
    q->flush.failed_epoch = epoch;
    q->flush.failed_errno = err;
    latch_error (q, err);
    log_error ("%s: backend flush failed: %s (reported on each"
               " connection's next flush)", q->name, strerror (err));
  }
  q->flush.done_epoch = epoch;
  pthread_cond_broadcast (&q->flushed);
}



/* Under the lock, holding a dispatch token: one step of writing the
 * queue out, at most `round` batches.  False when there is nothing to do
 * now.
 */
static bool
dispatch_step (struct queue *q, unsigned round)
{
  struct batch *b;

  if (q->retrying && (b = retry_due (q)) != NULL) {
    if (q->backend->ops->submit)
      batch_submit (q, b);
    else
      dispatch_round (q, b, 1);
    return true;
  }
  if (flush_due (q)) {
    backend_flush_locked (q);
    return true;
  }
  if (q->running && should_replug (q)) {
    q->running = false;
    plug (q);
    return false;
  }
  if (can_dispatch (q) && (b = batch_take (q)) != NULL) {
    if (q->backend->ops->submit)
      batch_submit (q, b);
    else
      dispatch_round (q, b, round);
    return true;
  }
  if (q->nr_queued == 0 && q->nr_batches == 0)
    q->running = false;         /* idle: the next arrival plugs again */
  return false;
}

/* What the dispatch thread must still do when a holder lets go. */
static bool
dispatcher_needed (const struct queue *q)
{
  return q->stopping || flush_due (q) || q->retrying
    || (can_dispatch (q) && !should_replug (q));
}

/* While a flush waits or runs, more writers only compete with it for the
 * disk: a FUA stream on a page-cache file lost a quarter of its rate to
 * four holders.
 */
static unsigned
token_limit (const struct queue *q)
{
  return q->flush.wanted || q->flush.running ? 1 : q->max_holders;
}

/* Under the lock: one of the disk's dispatch tokens, if one is free.  A
 * synchronous backend's queue is run by request threads; an asynchronous
 * backend's submit costs no more than the wake-up, so its queue stays
 * with the dispatch thread.
 */
static bool
take_token (struct queue *q)
{
  if (q->holders >= token_limit (q))
    return false;               /* the last holder looks again */
  if (q->backend->ops->submit || q->stopping) {
    kick_dispatcher (q);
    return false;
  }
  q->holders++;
  return true;
}

/* The last holder out hands what is left to the dispatch thread. */
static void
release_token (struct queue *q)
{
  if (--q->holders == 0 && dispatcher_needed (q))
    pthread_cond_signal (&q->dispatch_wake);
}

/* Under the lock: a request thread writes an unplugged queue out itself
 * when a token is free, up to `steps` steps of `round` batches.  True
 * when this thread did some of the work.
 */
static bool
run_queue_here (struct queue *q, int steps, unsigned round)
{
  bool worked = false;

  if (!take_token (q))
    return false;
  for (int i = 0; i < steps && dispatch_step (q, round); i++)
    worked = true;
  release_token (q);
  return worked;
}

/* A request thread that must wait helps first, as long as it can, then
 * sleeps until the condition it waits for is signalled.
 */
static void
wait_or_work (struct queue *q, pthread_cond_t *until)
{
  if (!run_queue_here (q, STEPS_HERE, SYNC_ROUND))
    pthread_cond_wait (until, &q->lock);
}

/* Until woken, or until a retry is due.  A retry already due waits for
 * the token's holder, whose release wakes this thread.
 */
static void
dispatcher_sleep (struct queue *q)
{
  uint64_t until = next_retry_ns (q);

  if (until == UINT64_MAX || until <= monotonic_ns ())
    pthread_cond_wait (&q->dispatch_wake, &q->lock);
  else
    cond_wait_until (&q->dispatch_wake, &q->lock, until);
}

static void *
dispatch_thread (void *arg)
{
  struct queue *q = arg;

  pthread_mutex_lock (&q->lock);
  for (;;) {
    if (q->holders < token_limit (q)) {
      bool worked;

      q->holders++;
      worked = dispatch_step (q, SYNC_ROUND);
      q->holders--;
      if (worked)
        continue;
      if (q->nr_queued == 0 && q->nr_batches == 0 && q->stopping)
        break;
    }
    dispatcher_sleep (q);
  }
  pthread_mutex_unlock (&q->lock);
  return NULL;
}

int
queue_start (struct queue *q, struct timer_service *ts)
{
  if (ts && timer_service_attach (ts, &q->timer) == -1)
    return -1;
  if (q->backend->ops->start && q->backend->ops->start (q->backend) == -1)
    return -1;
  if (engine_thread_create (&q->dispatcher, dispatch_thread, q) == -1) {
    log_error ("%s: cannot start the dispatch thread: %m", q->name);
    return -1;
  }
  q->dispatcher_started = true;
  return 0;
}

/* Drains everything and makes it durable before the threads go. */
void
queue_stop (struct queue *q)
{
  uint64_t ticket;

  if (!q->dispatcher_started)
    return;
  pthread_mutex_lock (&q->lock);
  if (q->plugged)
    unplug_locked (q, UNPLUG_DRAIN);
  ticket = flush_start_locked (q);
  if (flush_wait_locked (q, NULL, ticket) != 0)
    log_error ("%s: data may be lost: the final write-out failed",
               q->name);
  q->stopping = true;
  pthread_cond_signal (&q->dispatch_wake);
  pthread_mutex_unlock (&q->lock);
  pthread_join (q->dispatcher, NULL);
  q->dispatcher_started = false;
  unplug_timer_cancel (&q->timer);
}

void
queue_free (struct queue *q)
{
  struct piece *p;

  if (q == NULL)
    return;
  queue_stop (q);
  while ((p = TAILQ_FIRST (&q->by_age)) != NULL) {
    queue_unlink (q, p);
    piece_free (p);
  }
  while (q->spare_batches) {
    struct batch *b = q->spare_batches;

    q->spare_batches = b->next_free;
    free (b);
  }
  backend_close (q->backend);
  buffer_pool_free (q->buffers);
  pthread_mutex_destroy (&q->lock);
  pthread_cond_destroy (&q->dispatch_wake);
  pthread_cond_destroy (&q->progress);
  pthread_cond_destroy (&q->flushed);
  free (q->name);
  free (q);
}

void
queue_stats_snapshot (struct queue *q, struct queue_stats *out)
{
  pthread_mutex_lock (&q->lock);
  *out = q->stats;
  out->queued_requests = q->nr_queued;
  out->queued_bytes = q->queued_bytes;
  pthread_mutex_unlock (&q->lock);
}
