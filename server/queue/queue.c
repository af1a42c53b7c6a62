/* plugq: one disk's plugged request queue (queue.h): its life cycle,
 * plugging, and the way in for writes, zeroes and trims.
 *
 * Every function of queue.h is here; what needs more than a few lines
 * is in the file for its job (see queue_internal.h's map).
 *
 * Life of a write: the request thread copies the data into a buffer,
 * takes the queue lock, cuts older queued pieces where the new one
 * overlaps them (queue_pieces.c), inserts the piece, plugs an idle queue
 * (arming its unplug timer) or unplugs it when a trigger says so, and
 * either answers at once (ack=queued) or waits for the backend (FUA,
 * ack=dispatched).  An unplugged queue is written out by whoever holds a
 * dispatch token (queue_dispatch.c), a batch at a time (queue_batch.c).
 * Reads lay the queue over the backend (queue_read.c); FLUSH and FUA are
 * queue_flush.c.  The map of every file is in queue_internal.h.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <semaphore.h>
#include <stdlib.h>
#include <string.h>

#include "buffers/buffer_pool.h"
#include "buffers/data_buffer.h"
#include "common/log.h"
#include "queue_internal.h"
#include "session.h"

void
queue_config_defaults (struct queue_config *c)
{
  c->elevator = &elevator_deadline;
  c->ack = ACK_QUEUED;
  c->unplug_delay_ns = 3 * NS_PER_MS;
  c->unplug_thresh = 16;
  c->max_merge = 1024 * 1024;
  c->queue_bytes = 64 * 1024 * 1024;
  c->queue_requests = 256;
  c->write_expire_ns = 5000 * NS_PER_MS;
  c->read_target_ns = READ_TARGET_AUTO;
  c->retry_ns = 10000 * NS_PER_MS;
  c->read_ahead = 1024 * 1024;
  c->bypass = true;
}

static void timer_fired (void *q, uint64_t deadline_ns);

/* What q->cfg and the backend decide together: the merge limit and
 * which writes may go around the queue.  At creation, and when a disk
 * with no client changes its keys (queue_reconfig.c).
 */
void
queue_derive_settings (struct queue *q)
{
  const struct backend *backend = q->backend;
  const struct queue_config *cfg = &q->cfg;
  /* Writes may go around an asynchronous backend (queue_bypass.c). */
  bool async_around;

  q->merge_limit = cfg->max_merge;
  if (backend->max_write && backend->max_write < q->merge_limit)
    q->merge_limit = backend->max_write;
  q->bypass = cfg->bypass && backend->writes_to_memory
    && !backend_is_async (backend) && q->block_mask == 0
    && backend->buffer_align <= 1;
  async_around = cfg->bypass && backend_is_async (backend)
    && q->block_mask == 0 && backend->buffer_align <= 1;
  q->bypass_large = async_around;
  /* While reads compete, large writes go as they came where a merge
   * would cost reads more than it saves: a remote, where reads wait
   * behind the writes sent before them, and memory, where the merge is
   * one more copy and a queued piece sends reads through the lock
   * (queue_bypass.c).
   */
  q->forward_while_reading = q->bypass
    || (async_around && backend->reads_behind_writes);
  q->bypass_waiting = async_around && cfg->ack == ACK_DISPATCHED;
  q->read_streams.ahead_max = q->read_streams.merging ? cfg->read_ahead : 0;
}

static void
queue_init_fields (struct queue *q, struct backend *backend,
                   const struct queue_config *cfg)
{
  q->backend = backend;
  q->cfg = *cfg;
  q->block_mask = backend->min_block > 1 ? backend->min_block - 1 : 0;
  q->index = session_register_queue ();
  lock_init (&q->lock);
  lock_init (&q->read_streams.lock);
  q->read_streams.merging = !backend->writes_to_memory;
  q->read_streams.busy = READ_BUSY;
  cond_init_monotonic (&q->dispatch_wake);
  pthread_cond_init (&q->space, NULL);
  RB_INIT (&q->by_offset);
  TAILQ_INIT (&q->by_age);
  RB_INIT (&q->in_flight);
  TAILQ_INIT (&q->failing.pieces);
  TAILQ_INIT (&q->batches_in_flight);
  TAILQ_INIT (&q->spare_pieces);
  data_buffer_spares_init (&q->spare_buffers);
  presence_init (q, backend->size);
  data_buffer_spares_init_sized (&q->stream_buffers, STREAM_ROOM_MOST,
                                 STREAM_SPARES);
  q->max_holders = !backend_is_async (backend) && backend->max_writers > 1
    ? backend->max_writers : 1;
  q->max_in_flight = backend_is_async (backend) && backend->max_in_flight > 1
    ? backend->max_in_flight : SYNC_ROUND * q->max_holders;
  q->writes_carry_fua = backend_is_async (backend) && backend->can_fua;
  queue_derive_settings (q);
  q->elevator.by_offset = &q->by_offset;
  q->elevator.by_age = &q->by_age;
  read_feedback_init (&q->elevator.reads, cfg->read_target_ns,
                      backend->read_target_floor_ns);
  q->flush.next_epoch = 1;
  TAILQ_INIT (&q->flush.sleepers);
  q->state = QUEUE_IDLE;
  unplug_timer_init (&q->timer, timer_fired, q);
}

/* Undoes queue_init_fields and what queue_new allocated before it. */
static void
queue_destroy (struct queue *q)
{
  batches_free (q);
  data_buffer_spares_free (&q->spare_buffers);
  data_buffer_spares_free (&q->stream_buffers);
  buffer_pool_free (q->buffers);
  lock_destroy (&q->lock);
  lock_destroy (&q->read_streams.lock);
  pthread_cond_destroy (&q->dispatch_wake);
  pthread_cond_destroy (&q->space);
  free (q->name);
  free (q);
}

struct queue *
queue_new (const char *name, struct backend *backend,
           const struct queue_config *cfg)
{
  struct queue *q = calloc (1, sizeof *q);

  if (q == NULL || (q->name = strdup (name)) == NULL
      || (q->buffers = buffer_pool_new (cfg->queue_bytes)) == NULL
      || !batch_reserve (q)) {
    if (q) {
      batches_free (q);
      buffer_pool_free (q->buffers);
      free (q->name);
    }
    free (q);
    return NULL;
  }
  queue_init_fields (q, backend, cfg);
  if (cfg->elevator->init && cfg->elevator->init (&q->elevator) == -1) {
    queue_destroy (q);
    return NULL;
  }
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

void
queue_plug (struct queue *q)
{
  queue_assert_locked (q);
  q->state = QUEUE_PLUGGED;
  q->stats.plugs++;
  unplug_timer_arm (&q->timer, q->cfg.unplug_delay_ns);
  if (log_queue_events)
    log_debug ("%s: plug (%" PRIu32 " queued)", q->name, q->nr_queued);
}

/* Only a plugged queue counts an unplug, as in the kernel: a running
 * queue is already draining.
 */
void
queue_unplug_locked (struct queue *q, enum unplug_cause cause)
{
  queue_assert_locked (q);
  if (q->state == QUEUE_PLUGGED) {
    unplug_timer_cancel (&q->timer);
    q->stats.unplugs[cause]++;
    if (log_queue_events)
      log_debug ("%s: unplug (%s, %" PRIu32 " queued)",
                 q->name, unplug_cause_names[cause], q->nr_queued);
  }
  q->state = QUEUE_RUNNING;
  q->unplug_seq = q->next_seq;
}

/* Timer thread: hand the unplug to the dispatcher and go.  A claim
 * that fails means this queue unplugged and plugged again after the
 * timer went off: the new plug has a deadline of its own.
 */
static void
timer_fired (void *arg, uint64_t deadline_ns)
{
  struct queue *q = arg;

  lock_acquire (&q->lock);
  if (unplug_timer_claim (&q->timer, deadline_ns)
      && q->state == QUEUE_PLUGGED) {
    queue_unplug_locked (q, UNPLUG_TIMER);
    queue_kick_dispatcher (q);
  }
  lock_release (&q->lock);
}

/* After a piece joined the queue: plug an idle queue, unplug on a
 * threshold or a sync trigger.  True when this arrival unplugged it.
 * The thresholds are unplug-thresh (unplug_count) and max-merge bytes.
 *
 * A writer about to wait for its own write (FUA, ack=dispatched) is the
 * kernel's process asleep on its page, which unplugs the device at once
 * (the 2004 sync_page change): holding the plug could only make it wait.
 * Merging goes on regardless: arrivals while the backend is busy queue
 * up and go out together (behind_busy_stream).
 */
static bool
after_insert (struct queue *q, bool waiter)
{
  queue_assert_locked (q);
  if (q->state == QUEUE_IDLE)
    queue_plug (q);
  if (waiter)
    queue_unplug_locked (q, UNPLUG_SYNC);
  else if (q->state == QUEUE_PLUGGED
           && (unplug_count (q) >= q->cfg.unplug_thresh
               || q->queued_bytes >= q->merge_limit))
    queue_unplug_locked (q, UNPLUG_THRESHOLD);
  else
    return false;
  return true;
}

/* A busy backend is itself the plug.  On an asynchronous backend a
 * waiting writer's piece that continues a write already on its way (back
 * to back with a piece in flight, or with a queued piece waiting the
 * same way) waits for that write instead of going out alone, but only
 * while every slot of the backend is taken: it is held (piece_held)
 * until a batch completes, and then the pieces queued behind it go out
 * as one operation.  A piece that continues nothing, or finds a free
 * slot, goes at once, so depth 1 never waits and a latency-bound remote
 * sees the full depth its clients give it: a free slot is worth more
 * than a merge (docs/design.md).  No timer is involved: whatever
 * completes next sends the stream on.  A synchronous backend needs none
 * of this: while its dispatch tokens are all in the backend, arrivals
 * queue up and the next holder takes them as one batch.
 */

static bool
behind_busy_stream (struct queue *q, const struct piece *p)
{
  const struct piece *prev;

  queue_assert_locked (q);
  if (p->waiter == NULL || !backend_is_async (q->backend)
      || ops_in_flight (q) < q->max_in_flight || p->offset == 0)
    return false;
  prev = first_reaching (&q->in_flight, p->offset - 1);
  if (prev && piece_can_follow (prev, p))
    return true;
  prev = RB_PREV (piece_tree, &q->by_offset, (struct piece *) p);
  return prev && piece_held (q, prev) && piece_can_follow (prev, p);
}

/* ------------------------------------------------------------ submitting */

/* Inline: every write looks, and the queue is rarely full.  0, or the
 * errno the writer fails with (wait_for_space_slow).
 */
static inline int
wait_for_space (struct queue *q, uint64_t bytes)
{
  queue_assert_locked (q);
  if (__builtin_expect (queue_full (q, bytes), 0))
    return wait_for_space_slow (q, bytes);
  return 0;
}

/* Whether a request's range is one this disk serves: 0, or -1 with
 * errno.  Inline: every request starts here.
 */
static inline int
queue_check_range (const struct queue *q, uint64_t count, uint64_t offset)
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
  /* Partial blocks are rewritten whole (queue_align.c), but a last
   * block the disk's size cuts short cannot be.
   */
  if (block_up (q, offset + count) > q->backend->size) {
    errno = EINVAL;
    return -1;
  }
  return 0;
}

/* The request r joins the queue as a piece: it cuts what it covers,
 * takes its sequence number, is counted, and moves the plug.  The piece,
 * valid until q->lock is dropped; NULL (ENOMEM) when no piece could be
 * had or a cut could not be made.
 */
static const struct piece *
insert_piece (struct queue *q, struct session *s, const struct piece *r,
              unsigned flags, struct completion *waiter, bool *unplugged)
{
  struct piece_list superseded = TAILQ_HEAD_INITIALIZER (superseded);
  struct piece *p = piece_alloc (q);
  int cut;

  queue_assert_locked (q);
  if (p == NULL)
    return NULL;
  cut = cut_overlaps (q, r->offset, piece_end (r), &superseded);
  if (cut == -1) {
    p->buf = NULL;
    piece_release (q, p);
    return NULL;
  }
  *p = *r;
  note_request (q, s, p->kind, p->length, p->offset, flags);
  p->seq = ++q->next_seq;
  /* The flush that covered what p replaced now waits for p. */
  if (cut & CUT_COVERED)
    q->flush.barrier_seq = p->seq;
  p->waiter = waiter;
  p->promised = waiter == NULL || p->fua || (cut & CUT_ANY);
  queue_link (q, p, NULL);
  if (!TAILQ_EMPTY (&superseded))
    pieces_superseded_done (q, &superseded);
  note_newest_piece (q, p);
  if (behind_busy_stream (q, p)) {
    p->held_until = q->batches_done + 1;
    q->stats.waits_behind_stream++;
  }
  *unplugged = after_insert (q, waiter != NULL);
  return p;
}

/* Until every piece of the request is written, asleep: piece_written
 * posts done and uncounts the waiter.  0 or the first errno of its
 * pieces.  q->lock held on entry, released on return.
 */
static int
sleep_until_written (struct queue *q, struct completion *done)
{
  queue_assert_locked (q);
  if (done->pending == 0) {
    q->dispatched_waiters--;
    lock_release (&q->lock);
    return done->err;
  }
  done->sleeping = true;
  lock_release (&q->lock);
  semaphore_wait (&done->written.sem);
  return done->err;
}

/* Until every piece of the request is written: 0 or its errno.  A
 * request behind a busy stream (held, behind_busy_stream) only sleeps,
 * leaving its pieces to whoever completes the stream's write in flight
 * instead of sending them alone; any other helps write the queue out
 * until its own pieces are written (run_queue_until_written).  Counted
 * as a dispatched waiter meanwhile, so the queue is not plugged again
 * under it.  q->lock held on entry, released on return.
 */
static int
wait_written_and_unlock (struct queue *q, struct completion *done, bool held)
{
  queue_assert_locked (q);
  q->dispatched_waiters++;
  if (!held)
    while (done->pending > 0 && run_queue_until_written (q, done))
      ;
  return sleep_until_written (q, done);
}

/* A request that waits for nothing helps write out the queue its
 * arrival unplugged, or a little of a running queue it joined.  May drop
 * q->lock (run_queue_here).
 */
static void
help_after_queueing (struct queue *q, bool unplugged)
{
  queue_assert_locked (q);
  if (unplugged)
    run_queue_here (q, STEPS_HERE, SYNC_ROUND);
  else if (q->state == QUEUE_RUNNING)   /* joined a running queue */
    run_queue_here (q, 1, HELP_ROUND);
}

/* A request that waits (ack=dispatched, FUA) after its piece p was
 * queued: 0 or an errno.  q->lock held on entry, released on return.
 */
static int
wait_for_request (struct queue *q, struct session *s, const struct piece *p,
                  unsigned flags, struct completion *done)
{
  bool held = p->held_until != 0;
  int err;

  if (!(flags & REQ_FUA))
    return wait_written_and_unlock (q, done, held);
  if (!q->writes_carry_fua) {
    if (held) {
      wait_written_and_unlock (q, done, true);
      lock_acquire (&q->lock);
    }
    return fua_wait_and_unlock (q, s, done);
  }
  err = wait_written_and_unlock (q, done, held);
  if (err)
    return err;
  lock_acquire (&q->lock);
  return fua_written_and_unlock (q, s, done);
}

/* Queues the request r (unlocked on entry; r's buffer, if any, passes
 * to the queue) and waits as the ack mode and FUA say.
 */
static int
submit (struct queue *q, struct session *s, const struct piece *r,
        unsigned flags)
{
  struct completion done = { .pending = 1 };
  bool wait = (flags & REQ_FUA) || q->cfg.ack == ACK_DISPATCHED;
  const struct piece *p;
  bool unplugged;
  int err = 0;

  if (wait)
    sem_init (&done.written.sem, 0, 0);
  lock_acquire (&q->lock);
  if (flags & REQ_FUA)
    done.error_mark = error_mark (q, s);
  err = wait_for_space (q, r->kind == OP_WRITE ? r->length : 0);
  p = err ? NULL
    : insert_piece (q, s, r, flags, wait ? &done : NULL, &unplugged);
  room_pass_on (q);
  if (p == NULL) {
    lock_release (&q->lock);
    data_buffer_put (r->buf);
    if (err == 0)
      err = ENOMEM;
  }
  else if (wait)
    err = wait_for_request (q, s, p, flags, &done);
  else {
    help_after_queueing (q, unplugged);
    lock_release (&q->lock);
  }
  if (wait)
    sem_destroy (&done.written.sem);
  return queue_answer (err);
}

/* Whether a write's own buffer can go into the queue uncopied: its
 * request waits for it to be written (ack=dispatched, FUA), so nbdkit
 * keeps it meanwhile, and it is aligned as the backend needs.
 */
static bool
may_lend (const struct queue *q, const void *buf, unsigned flags)
{
  uint32_t align = q->backend->buffer_align;

  return ((flags & REQ_FUA) || q->cfg.ack == ACK_DISPATCHED)
    && (align <= 1 || ((uintptr_t) buf & (align - 1)) == 0);
}

/* A waiting write (may_lend) queued with its own buffer.  Its answer
 * waits until the queue's last reference to the buffer is gone as well:
 * a read laid over the piece may still be copying from it.
 */
static int
submit_lent (struct queue *q, struct session *s, const void *buf,
             uint32_t count, uint64_t offset, unsigned flags)
{
  struct data_buffer lent;
  sem_t released;
  struct piece r;
  int ret;

  sem_init (&released, 0, 0);
  piece_init (q, &r, OP_WRITE, count, offset, flags);
  r.buf = data_buffer_lend (&lent, buf, count, &released);
  ret = submit (q, s, &r, flags);
  semaphore_wait (&released);
  sem_destroy (&released);
  return ret;
}

/* A write the newest queued piece looked able to take (append_may_fit):
 * appended and answered, or APPEND_DECLINED with nothing done.
 */
#define APPEND_DECLINED 1

static int
submit_append (struct queue *q, struct session *s, const void *buf,
               uint32_t count, uint64_t offset)
{
  bool appended;

  lock_acquire (&q->lock);
  if (wait_for_space (q, count) != 0) {
    lock_release (&q->lock);
    return APPEND_DECLINED;     /* submit answers the error */
  }
  appended = append_to_stream (q, s, buf, count, offset);
  room_pass_on (q);
  if (appended)
    help_after_queueing (q, after_insert (q, false));
  lock_release (&q->lock);
  return appended ? 0 : APPEND_DECLINED;
}

/* Without the lock, a hint: whether the write may go around the queue
 * (bypass_write decides under the lock).  A write may go around pieces
 * queued or in flight elsewhere (not over them); on a queue holding
 * pieces, a write continuing a stream takes the queue without asking.
 * q->bypass is a synchronous backend's rule, bypass_waiting and
 * bypass_large an asynchronous one's: at most one side applies.
 */
static inline bool
worth_asking_to_go_around (const struct queue *q, uint32_t count,
                           uint64_t offset, unsigned flags)
{
  if (q->bypass)
    return atomic_load_explicit (&q->pieces_present,
                                 memory_order_relaxed) == 0
      || !continues_recent_write (q, offset);
  return !(flags & REQ_FUA)
    && (q->bypass_waiting
        || (q->bypass_large && write_goes_as_it_came (q, count)));
}

/* queue_pwrite, once the range is checked.  Inlined there: a bypassed
 * small write is only a few calls deep, and one more call showed in its
 * instructions per request (the cost bench's W1).
 */
static inline __attribute__ ((always_inline)) int
write_request (struct queue *q, struct session *s, const void *buf,
               uint32_t count, uint64_t offset, unsigned flags)
{
  struct piece r;
  uint32_t room;

  if (worth_asking_to_go_around (q, count, offset, flags)) {
    int answer = bypass_write (q, s, buf, count, offset, flags);

    if (answer != BYPASS_DECLINED)
      return answer;
  }
  if (append_may_fit (q, offset, flags)
      && submit_append (q, s, buf, count, offset) == 0)
    return 0;
  if (may_lend (q, buf, flags))
    return submit_lent (q, s, buf, count, offset, flags);
  piece_init (q, &r, OP_WRITE, count, offset, flags);
  room = stream_room (q, count, offset, flags);
  r.buf = room
    ? data_buffer_new_room (buf, count, room, q->backend->buffer_align,
                            q->buffers, &q->stream_buffers)
    : data_buffer_new (buf, count, q->backend->buffer_align, q->buffers,
                       &q->spare_buffers);
  if (r.buf == NULL) {
    errno = ENOMEM;
    return -1;
  }
  return submit (q, s, &r, flags);
}

/* Every write, zero and trim, once it is in the queue or the backend:
 * no read-ahead window may answer from before it (queue_read_ahead.c).
 */
static inline int
forget_read_ahead (struct queue *q, uint64_t count, uint64_t offset,
                   int answer)
{
  if (read_ahead_windows_listed (q)) {
    int saved = errno;          /* answer's, if it failed */

    read_ahead_forget (q, count, offset);
    errno = saved;
  }
  return answer;
}

int
queue_pwrite (struct queue *q, struct session *s, const void *buf,
              uint32_t count, uint64_t offset, unsigned flags)
{
  if (queue_check_range (q, count, offset) == -1)
    return -1;
  if (count == 0)
    return 0;
  return forget_read_ahead (q, count, offset,
                            write_request (q, s, buf, count, offset, flags));
}

/* Zeroes and trims: a piece with no data. */
static int
submit_dataless (struct queue *q, struct session *s, enum op_kind kind,
                 uint64_t count, uint64_t offset, unsigned flags)
{
  struct piece r;

  if (count == 0)
    return 0;
  piece_init (q, &r, kind, count, offset, flags);
  return forget_read_ahead (q, count, offset, submit (q, s, &r, flags));
}

int
queue_zero (struct queue *q, struct session *s, uint64_t count,
            uint64_t offset, unsigned flags)
{
  if (queue_check_range (q, count, offset) == -1)
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
  if (queue_check_range (q, count, offset) == -1)
    return -1;
  return submit_dataless (q, s, OP_TRIM, count, offset, flags & REQ_FUA);
}

/* ------------------------------------------------------------ reading */

int
queue_pread (struct queue *q, void *buf, uint32_t count, uint64_t offset)
{
  if (queue_check_range (q, count, offset) == -1)
    return -1;
  return read_request (q, buf, count, offset);
}

int
queue_extents (struct queue *q, uint64_t count, uint64_t offset,
               struct extent_list *list)
{
  if (count == 0) {
    errno = EINVAL;
    return -1;
  }
  if (queue_check_range (q, count, offset) == -1)
    return -1;
  return extents_overlaid (q, count, offset, list);
}

int
queue_cache (struct queue *q, uint64_t count, uint64_t offset)
{
  if (queue_check_range (q, count, offset) == -1)
    return -1;
  return q->backend->ops->cache
    ? q->backend->ops->cache (q->backend, count, offset) : 0;
}

/* ------------------------------------------------------------ flushing */

uint64_t
queue_error_mark (struct queue *q, struct session *s)
{
  uint64_t mark;

  lock_acquire (&q->lock);
  mark = error_mark (q, s);
  lock_release (&q->lock);
  return mark;
}

uint64_t
queue_flush_start (struct queue *q)
{
  uint64_t ticket;

  lock_acquire (&q->lock);
  q->stats.flushes++;
  ticket = flush_start_locked (q);
  queue_kick_dispatcher (q);    /* a volume starts every member at once */
  lock_release (&q->lock);
  return ticket;
}

int
queue_flush_wait (struct queue *q, struct session *s, uint64_t ticket,
                  uint64_t mark)
{
  uint64_t start = monotonic_ns ();

  lock_acquire (&q->lock);
  return queue_answer (flush_wait_and_unlock (q, s, ticket, mark, start));
}

/* One disk: no other member to overlap with, so the flushing thread
 * does the work itself instead of waking the dispatch thread for it.
 */
int
queue_flush (struct queue *q, struct session *s)
{
  uint64_t start = monotonic_ns ();

  uint64_t mark;

  lock_acquire (&q->lock);
  q->stats.flushes++;
  mark = error_mark (q, s);
  return queue_answer (flush_wait_and_unlock (q, s, flush_start_locked (q),
                                              mark, start));
}

/* ------------------------------------------------------------ life cycle */

int
queue_start (struct queue *q, struct timer_service *ts)
{
  if (ts && timer_service_attach (ts, &q->timer) == -1)
    return -1;
  if (q->backend->ops->start && q->backend->ops->start (q->backend) == -1)
    return -1;
  return dispatch_thread_start (q);
}

/* Drains everything and makes it durable before the threads go. */
int
queue_stop (struct queue *q)
{
  uint64_t ticket, mark;
  int r = 0;

  if (!q->dispatcher_started)
    return 0;
  if (q->backend->ops->draining)
    q->backend->ops->draining (q->backend);
  lock_acquire (&q->lock);
  if (q->state == QUEUE_PLUGGED)
    queue_unplug_locked (q, UNPLUG_DRAIN);
  mark = error_mark (q, NULL);
  q->failing.retry_at_ns = 0;   /* one more try for what failed */
  ticket = flush_start_locked (q);
  if (flush_wait_and_unlock (q, NULL, ticket, mark, 0) != 0) {
    log_error ("%s: data may be lost: the final write-out failed",
               q->name);
    r = -1;
  }
  lock_acquire (&q->lock);
  failing_drop_all (q);
  q->stopping = true;
  pthread_cond_signal (&q->dispatch_wake);
  lock_release (&q->lock);
  pthread_join (q->dispatcher, NULL);
  q->dispatcher_started = false;
  unplug_timer_cancel (&q->timer);
  return r;
}

void
queue_free (struct queue *q)
{
  if (q == NULL)
    return;
  queue_stop (q);
  lock_acquire (&q->lock);      /* for the helpers' assertions */
  pieces_free (q);
  lock_release (&q->lock);
  read_ahead_forget_all (q);
  if (q->cfg.elevator->exit)
    q->cfg.elevator->exit (&q->elevator);
  backend_close (q->backend);
  queue_destroy (q);
}

/* Under the lock: how long the oldest backend operation in progress (a
 * batch, or a write around the queue) has been on its way, in
 * microseconds; 0 when none is.  A stalled backend shows here.
 */
static uint64_t
oldest_in_flight_us (const struct queue *q)
{
  const struct batch *b;
  uint64_t now, since;

  queue_assert_locked (q);
  b = TAILQ_FIRST (&q->batches_in_flight);
  now = monotonic_ns ();
  since = b ? b->taken_ns : now;
  for (unsigned i = 0, seen = 0; seen < q->nr_bypassing; i++)
    if (q->bypassing[i].end != 0) {
      seen++;
      if (q->bypassing[i].since_ns < since)
        since = q->bypassing[i].since_ns;
    }
  return (now - since) / 1000;
}

void
queue_stats_snapshot (struct queue *q, struct queue_stats *out)
{
  struct op_counters *r = &out->op[OP_READ];

  lock_acquire (&q->lock);
  *out = q->stats;
  out->queued_requests = queued_requests (q);
  out->queued_bytes = q->queued_bytes;
  out->writes_held = q->elevator.reads.held;
  out->read_target_ns = q->elevator.reads.target_ns == 0 ? 0
    : atomic_load (&q->elevator.reads.effective_ns);
  out->oldest_in_flight_us = oldest_in_flight_us (q);
  lock_release (&q->lock);
  r->requests = atomic_load (&q->reads.requests);
  r->backend_ops = atomic_load (&q->reads.backend_ops);
  r->merges = atomic_load (&q->reads.merges);
  r->request_bytes = r->backend_bytes = atomic_load (&q->reads.bytes);
  r->ticks_ms_x1000 = atomic_load (&q->reads.ticks_us);
  r->errors = atomic_load (&q->reads.errors);
  for (int i = 0; i < LATENCY_BUCKETS; i++)
    out->read_time.bucket[i] = atomic_load (&q->reads.bucket[i]);
  out->read_time.count = r->requests;
  out->read_time.total_us = r->ticks_ms_x1000;
  out->reads_waited = atomic_load (&q->read_streams.waited);
  out->read_ahead_hits = atomic_load (&q->read_streams.ahead_hits);
  out->read_ahead_bytes = atomic_load (&q->read_streams.ahead_bytes);
}
