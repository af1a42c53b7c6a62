/* plugq: the unplug timer service (one libev loop, one thread). */
#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "common/clock.h"
#include "common/engine_thread.h"
#include "common/log.h"
#include "timer_service.h"

struct timer_service {
  struct ev_loop *loop;
  ev_async stop;
  pthread_t thread;
  bool running;

  /* A timer to attach or detach while the loop runs: libev watchers
   * start and stop only in the loop's thread, so another thread leaves
   * the request here, wakes the loop with `change` and waits for it.
   * Only disks added or removed in service do this, never the I/O path.
   */
  ev_async change;
  pthread_mutex_t change_lock;
  pthread_cond_t change_done;
  struct unplug_timer *change_timer;  /* NULL: no request pending */
  bool change_attach;                 /* else detach */
};

/* libev's timers run on the loop's own clock; convert our absolute
 * monotonic deadline into a fresh relative delay each time.
 */
static void
start_ev_timer (struct ev_loop *loop, struct unplug_timer *t,
                uint64_t deadline)
{
  for (;;) {
    uint64_t now = monotonic_ns (), latest;
    ev_tstamp after = deadline > now ? (deadline - now) / 1e9 : 0.;

    ev_timer_stop (loop, &t->timer);
    ev_now_update (loop);
    ev_timer_set (&t->timer, after, 0.);
    ev_timer_start (loop, &t->timer);
    atomic_store (&t->expiry_ns, deadline);
    /* An arm that read the expiry before the store above may have
     * skipped its wake-up for an earlier deadline: look once more.
     */
    latest = atomic_load (&t->deadline_ns);
    if (latest == 0 || latest >= deadline)
      return;
    deadline = latest;
  }
}

/* A plug often ends before the loop gets here: the timer is set for the
 * cancelled deadline all the same, so that the next plugs, whose
 * deadlines are later, find it pending and need not wake the loop.  It
 * fires, finds nothing, and sleeps until an arm wakes it again.
 */
static void
wake_cb (struct ev_loop *loop, ev_async *w, int revents)
{
  struct unplug_timer *t = w->data;
  uint64_t deadline = atomic_load (&t->deadline_ns);

  if (deadline == 0)
    deadline = atomic_load (&t->last_deadline_ns);
  if (deadline != 0)
    start_ev_timer (loop, t, deadline);
}

/* Loop thread: only hands the unplug over, never does I/O. */
static void
timer_cb (struct ev_loop *loop, ev_timer *w, int revents)
{
  struct unplug_timer *t = w->data;
  uint64_t deadline;

  /* No longer pending: from here an arm must wake the loop.  Cleared
   * before the deadline is read, so an arm that saw the old expiry (and
   * skipped the wake-up) has its deadline read here.
   */
  atomic_store (&t->expiry_ns, 0);
  deadline = atomic_load (&t->deadline_ns);
  if (deadline == 0)
    return;                     /* cancelled after it was set */
  if (monotonic_ns () < deadline) {
    start_ev_timer (loop, t, deadline);     /* moved later meanwhile */
    return;
  }
  /* Not consumed here: only the owner, under its lock, can tell this
   * deadline from a newer plug's (unplug_timer_claim).
   */
  t->fire (t->arg, deadline);
}

static void
stop_cb (struct ev_loop *loop, ev_async *w, int revents)
{
  ev_break (loop, EVBREAK_ALL);
}

/* In the loop's thread, or before it starts and after it stopped. */
static void
attach_here (struct timer_service *ts, struct unplug_timer *t)
{
  ev_async_start (ts->loop, &t->wake);
  /* A deadline set before attaching still has to fire. */
  if (atomic_load (&t->deadline_ns))
    ev_async_send (ts->loop, &t->wake);
}

/* The same: after this no callback of t runs again. */
static void
detach_here (struct timer_service *ts, struct unplug_timer *t)
{
  ev_timer_stop (ts->loop, &t->timer);
  ev_async_stop (ts->loop, &t->wake);
  atomic_store (&t->expiry_ns, 0);
}

/* Loop thread: the attach or detach another thread asked for. */
static void
change_cb (struct ev_loop *loop, ev_async *w, int revents)
{
  struct timer_service *ts = w->data;

  pthread_mutex_lock (&ts->change_lock);
  if (ts->change_timer) {
    if (ts->change_attach)
      attach_here (ts, ts->change_timer);
    else
      detach_here (ts, ts->change_timer);
    ts->change_timer = NULL;
    pthread_cond_broadcast (&ts->change_done);
  }
  pthread_mutex_unlock (&ts->change_lock);
}

/* Hands t to the running loop's thread and waits until it is attached
 * (or detached) there.
 */
static void
change_in_loop (struct timer_service *ts, struct unplug_timer *t, bool attach)
{
  pthread_mutex_lock (&ts->change_lock);
  while (ts->change_timer)      /* another thread's request first */
    pthread_cond_wait (&ts->change_done, &ts->change_lock);
  ts->change_timer = t;
  ts->change_attach = attach;
  ev_async_send (ts->loop, &ts->change);
  while (ts->change_timer == t)
    pthread_cond_wait (&ts->change_done, &ts->change_lock);
  pthread_mutex_unlock (&ts->change_lock);
}

struct timer_service *
timer_service_new (void)
{
  struct timer_service *ts = calloc (1, sizeof *ts);

  if (ts == NULL)
    return NULL;
  ts->loop = engine_loop_new ();
  if (ts->loop == NULL) {
    log_error ("cannot create the libev loop for unplug timers");
    free (ts);
    errno = ENOMEM;
    return NULL;
  }
  ev_async_init (&ts->stop, stop_cb);
  ev_async_start (ts->loop, &ts->stop);
  ev_async_init (&ts->change, change_cb);
  ts->change.data = ts;
  ev_async_start (ts->loop, &ts->change);
  pthread_mutex_init (&ts->change_lock, NULL);
  pthread_cond_init (&ts->change_done, NULL);
  return ts;
}

void
unplug_timer_init (struct unplug_timer *t,
                   void (*fire) (void *, uint64_t), void *arg)
{
  t->service = NULL;
  atomic_init (&t->deadline_ns, 0);
  atomic_init (&t->expiry_ns, 0);
  atomic_init (&t->last_deadline_ns, 0);
  t->fire = fire;
  t->arg = arg;
  ev_timer_init (&t->timer, timer_cb, 0., 0.);
  t->timer.data = t;
  ev_async_init (&t->wake, wake_cb);
  t->wake.data = t;
}

int
timer_service_attach (struct timer_service *ts, struct unplug_timer *t)
{
  t->service = ts;
  if (ts->running)
    change_in_loop (ts, t, true);
  else
    attach_here (ts, t);
  return 0;
}

void
timer_service_detach (struct unplug_timer *t)
{
  struct timer_service *ts = t->service;

  if (ts == NULL)
    return;
  if (ts->running)
    change_in_loop (ts, t, false);
  else
    detach_here (ts, t);
  t->service = NULL;
}

static void *
loop_thread (void *arg)
{
  struct timer_service *ts = arg;

  ev_run (ts->loop, 0);
  return NULL;
}

int
timer_service_start (struct timer_service *ts)
{
  if (engine_thread_create (&ts->thread, "pq-unplug", loop_thread, ts) == -1) {
    log_error ("cannot start the unplug timer thread: %m");
    return -1;
  }
  ts->running = true;
  return 0;
}

void
timer_service_free (struct timer_service *ts)
{
  if (ts == NULL)
    return;
  if (ts->running) {
    ev_async_send (ts->loop, &ts->stop);
    pthread_join (ts->thread, NULL);
  }
  ev_loop_destroy (ts->loop);
  pthread_cond_destroy (&ts->change_done);
  pthread_mutex_destroy (&ts->change_lock);
  free (ts);
}

/* A queue plugs and unplugs thousands of times a second and each new
 * deadline is later than the last, so the loop is only woken when its
 * pending ev_timer would fire too late or not at all: an earlier one
 * fires, finds the later deadline and sleeps on.  One wake-up per
 * unplug-delay instead of one per plug.
 */
uint64_t
unplug_timer_arm (struct unplug_timer *t, uint64_t delay_ns)
{
  uint64_t deadline = monotonic_ns () + delay_ns;
  uint64_t expiry;

  atomic_store (&t->last_deadline_ns, deadline);
  atomic_store (&t->deadline_ns, deadline);
  expiry = atomic_load (&t->expiry_ns);
  if (t->service && (expiry == 0 || expiry > deadline))
    ev_async_send (t->service->loop, &t->wake);
  return deadline;
}

/* Lazy: the pending ev_timer fires later, finds no deadline and does
 * nothing.  That saves a loop wake-up on every unplug.
 */
void
unplug_timer_cancel (struct unplug_timer *t)
{
  atomic_store (&t->deadline_ns, 0);
}

bool
unplug_timer_claim (struct unplug_timer *t, uint64_t deadline_ns)
{
  return atomic_compare_exchange_strong (&t->deadline_ns, &deadline_ns, 0);
}
