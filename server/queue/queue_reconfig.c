/* plugq: a queue in service: its keys changed (set, reload) and its
 * retirement (remove).
 *
 * The queue reads some of its keys only under its lock (unplug-delay=
 * when it plugs, elevator= when it dispatches, queue-bytes= and
 * queue-requests= when a write looks for room), so those change under
 * the lock while clients write.  Every request reads the others before
 * it takes the lock (ack= and write-expire= when it arrives, max-merge=,
 * unplug-thresh= and bypass= when it decides whether to go around the
 * queue or append to a stream, read-target= when a read counts itself):
 * changing them under a running client would race with those reads, so
 * they change only while no request can be in the queue (the caller
 * guarantees it: no connection reaches the disk, and none can open
 * meanwhile).
 */
#include <config.h>

#include <errno.h>
#include <string.h>

#include "common/log.h"
#include "queue_internal.h"
#include "session.h"

void
queue_config_snapshot (struct queue *q, struct queue_config *out)
{
  lock_acquire (&q->lock);
  *out = q->cfg;
  lock_release (&q->lock);
}

/* Under the lock, or while nobody else changes q->cfg. */
static const char *
unlocked_key (const struct queue_config *now, const struct queue_config *cfg)
{
  if (cfg->ack != now->ack)
    return "ack";
  if (cfg->bypass != now->bypass)
    return "bypass";
  if (cfg->max_merge != now->max_merge)
    return "max-merge";
  if (cfg->unplug_thresh != now->unplug_thresh)
    return "unplug-thresh";
  if (cfg->write_expire_ns != now->write_expire_ns)
    return "write-expire";
  if (cfg->read_target_ns != now->read_target_ns)
    return "read-target";       /* each read looks at it, lock-free */
  if (cfg->read_ahead != now->read_ahead)
    return "read-ahead";        /* so does each stream read */
  return NULL;
}

const char *
queue_config_unlocked_key (struct queue *q, const struct queue_config *cfg)
{
  struct queue_config now;

  queue_config_snapshot (q, &now);
  return unlocked_key (&now, cfg);
}

/* The elevator's contract: init and exit with no dispatch running, which
 * the lock ensures (dispatches ask the elevator only under it).  Only
 * its private state changes hands: the rest of the state (the read
 * feedback among it, which reads count into without the lock) stays in
 * place.  The new one starts before the old one goes, so a failure
 * keeps the old.
 */
static int
swap_elevator (struct queue *q, const struct elevator_ops *e)
{
  void *old = q->elevator.private, *new;

  queue_assert_locked (q);
  q->elevator.private = NULL;
  if (e->init && e->init (&q->elevator) == -1) {
    q->elevator.private = old;
    return -1;
  }
  new = q->elevator.private;
  q->elevator.private = old;
  if (q->cfg.elevator->exit)
    q->cfg.elevator->exit (&q->elevator);
  q->elevator.private = new;
  q->cfg.elevator = e;
  return 0;
}

int
queue_set_config (struct queue *q, const struct queue_config *cfg,
                  bool no_requests)
{
  bool ahead_changed;

  lock_acquire (&q->lock);
  ahead_changed = cfg->read_ahead != q->cfg.read_ahead;
  if (!no_requests && unlocked_key (&q->cfg, cfg)) {
    lock_release (&q->lock);
    errno = EBUSY;
    return -1;
  }
  if (cfg->elevator != q->cfg.elevator
      && swap_elevator (q, cfg->elevator) == -1) {
    log_error ("%s: elevator=%s cannot start; the disk keeps elevator=%s",
               q->name, cfg->elevator->name, q->cfg.elevator->name);
    lock_release (&q->lock);
    return -1;
  }
  q->cfg.unplug_delay_ns = cfg->unplug_delay_ns;
  q->cfg.queue_bytes = cfg->queue_bytes;
  q->cfg.queue_requests = cfg->queue_requests;
  if (no_requests) {
    q->cfg.ack = cfg->ack;
    q->cfg.bypass = cfg->bypass;
    q->cfg.max_merge = cfg->max_merge;
    q->cfg.unplug_thresh = cfg->unplug_thresh;
    q->cfg.write_expire_ns = cfg->write_expire_ns;
    q->cfg.read_target_ns = cfg->read_target_ns;
    q->cfg.read_ahead = cfg->read_ahead;
    read_feedback_set_target (&q->elevator.reads, cfg->read_target_ns);
    queue_derive_settings (q);
  }
  /* A larger queue has room for a writer asleep waiting for it. */
  room_pass_on (q);
  lock_release (&q->lock);
  /* Windows of the old size go; none of a disk that reads ahead no more. */
  if (no_requests && ahead_changed)
    read_ahead_forget_all (q);
  return 0;
}

void
queue_retire (struct queue *q)
{
  unsigned slot = q->index;

  queue_stop (q);
  /* After the drain: a draining queue still arms and cancels its timer. */
  timer_service_detach (&q->timer);
  queue_free (q);
  session_release_queue (slot);
}
