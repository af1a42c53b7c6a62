/* plugq: unit tests for the unplug timer service.
 *
 * A queue arms its timer on every plug and cancels it on every unplug,
 * thousands of times a second, so arming only wakes the libev loop when
 * the pending ev_timer would fire too late.  These cases check that the
 * shortcut never makes a timer fire early, late or twice, and that it
 * does save the wake-ups.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/engine_thread.h"
#include "tap.h"
#include "queue/timer_service.h"

#define MS (UINT64_C (1000000))
/* Generous: a loaded machine under ThreadSanitizer is slow to wake. */
#define SLACK_NS (400 * MS)

/* A timer's owner, as a queue is: it claims each fire under its lock
 * and counts only the fires it claimed.  The first fire can be held
 * between going off and taking the lock, where a queue's timer thread
 * may be descheduled.
 */
struct probe {
  struct unplug_timer timer;
  pthread_mutex_t lock;
  _Atomic unsigned fired;
  _Atomic uint64_t fired_ns;
  _Atomic unsigned not_claimed;
  _Atomic bool hold_first, held, release;
};

static void sleep_ns (uint64_t ns);

static void
probe_fire (void *arg, uint64_t deadline_ns)
{
  struct probe *p = arg;

  if (atomic_exchange (&p->hold_first, false)) {
    atomic_store (&p->held, true);
    while (!atomic_load (&p->release))
      sleep_ns (MS / 10);
  }
  pthread_mutex_lock (&p->lock);
  if (unplug_timer_claim (&p->timer, deadline_ns)) {
    atomic_store (&p->fired_ns, monotonic_ns ());
    atomic_fetch_add (&p->fired, 1);
  }
  else
    atomic_fetch_add (&p->not_claimed, 1);
  pthread_mutex_unlock (&p->lock);
}

static uint64_t
probe_arm (struct probe *p, uint64_t delay_ns)
{
  uint64_t deadline;

  pthread_mutex_lock (&p->lock);
  deadline = unplug_timer_arm (&p->timer, delay_ns);
  pthread_mutex_unlock (&p->lock);
  return deadline;
}

static void
sleep_ns (uint64_t ns)
{
  struct timespec ts = { .tv_sec = ns / 1000000000,
                         .tv_nsec = ns % 1000000000 };

  nanosleep (&ts, NULL);
}

/* Polls until the probe fired n times or the deadline passed. */
static bool
wait_fired (struct probe *p, unsigned n, uint64_t until_ns)
{
  while (atomic_load (&p->fired) < n && monotonic_ns () < until_ns)
    sleep_ns (MS / 2);
  return atomic_load (&p->fired) >= n;
}

/* Polls until the loop thread has set an ev_timer for the probe's
 * deadline, so a case starts from a known state instead of a guess at
 * how long the loop takes.
 */
static bool
wait_loop_set (struct probe *p)
{
  uint64_t until = monotonic_ns () + SLACK_NS;

  while (atomic_load (&p->timer.expiry_ns) == 0 && monotonic_ns () < until)
    sleep_ns (MS / 10);
  return atomic_load (&p->timer.expiry_ns) != 0;
}

static void
probe_init (struct probe *p)
{
  pthread_mutex_init (&p->lock, NULL);
  atomic_init (&p->fired, 0);
  atomic_init (&p->fired_ns, 0);
  atomic_init (&p->not_claimed, 0);
  atomic_init (&p->hold_first, false);
  atomic_init (&p->held, false);
  atomic_init (&p->release, false);
  unplug_timer_init (&p->timer, probe_fire, p);
}

/* A started service with the n probes' timers attached, or NULL. */
static struct timer_service *
service_with_probes (struct probe *probes, unsigned n)
{
  struct timer_service *ts = timer_service_new ();
  bool ok = ts != NULL;

  for (unsigned i = 0; i < n; i++) {
    probe_init (&probes[i]);
    ok = ok && timer_service_attach (ts, &probes[i].timer) == 0;
  }
  if (ts && (!ok || timer_service_start (ts) == -1)) {
    timer_service_free (ts);
    return NULL;
  }
  return ts;
}

static struct timer_service *
service_with (struct probe *p)
{
  return service_with_probes (p, 1);
}

static void
test_fires_once (void)
{
  struct probe p;
  struct timer_service *ts = service_with (&p);
  uint64_t start = monotonic_ns ();
  bool ok = CHECK (ts != NULL);

  if (ok)
    probe_arm (&p, 20 * MS);
  ok = ok && CHECK (wait_fired (&p, 1, start + 20 * MS + SLACK_NS));
  ok = ok && CHECK (atomic_load (&p.fired_ns) >= start + 20 * MS);
  sleep_ns (50 * MS);
  ok = ok && CHECK (atomic_load (&p.fired) == 1);
  timer_service_free (ts);
  tap_ok (ok, "an armed timer fires once, not before its delay");
}

/* Moved later without waking the loop: the earlier ev_timer fires,
 * finds the later deadline and waits for it.
 */
static void
test_moved_later (void)
{
  struct probe p;
  struct timer_service *ts = service_with (&p);
  /* Far longer than the 5 ms steps, so a step stretched by a loaded
   * machine does not let the timer fire between two re-arms.
   */
  const uint64_t delay = 300 * MS;
  uint64_t last = 0;
  bool ok = CHECK (ts != NULL);

  if (ok)
    probe_arm (&p, delay);
  for (int i = 0; ok && i < 10; i++) {
    sleep_ns (5 * MS);
    last = monotonic_ns ();
    probe_arm (&p, delay);
  }
  ok = ok && CHECK (wait_fired (&p, 1, last + delay + SLACK_NS));
  ok = ok && CHECK (atomic_load (&p.fired_ns) >= last + delay);
  sleep_ns (50 * MS);
  ok = ok && CHECK (atomic_load (&p.fired) == 1);
  timer_service_free (ts);
  tap_ok (ok, "re-armed later: fires once, at the last deadline");
}

/* A queue that unplugged and plugged again while its timer was going
 * off: that fire belongs to the old plug and must not end the new one
 * early, and the new plug's own deadline must still fire.
 */
static void
test_stale_fire_not_claimed (void)
{
  struct probe p;
  struct timer_service *ts = service_with (&p);
  const uint64_t new_plug_delay = 50 * MS;
  uint64_t replugged = 0, until = monotonic_ns () + SLACK_NS;
  bool ok = CHECK (ts != NULL);

  if (ok) {
    atomic_store (&p.hold_first, true);
    probe_arm (&p, 5 * MS);
    while (!atomic_load (&p.held) && monotonic_ns () < until)
      sleep_ns (MS / 10);
    ok = CHECK (atomic_load (&p.held));
  }
  if (ok) {
    replugged = monotonic_ns ();
    probe_arm (&p, new_plug_delay);
  }
  atomic_store (&p.release, true);
  ok = ok && CHECK (wait_fired (&p, 1, replugged + new_plug_delay + SLACK_NS));
  ok = ok && CHECK (atomic_load (&p.fired_ns) >= replugged + new_plug_delay);
  ok = ok && CHECK (atomic_load (&p.not_claimed) == 1);
  timer_service_free (ts);
  tap_ok (ok, "a fire held past a re-arm is not claimed; the new deadline"
          " fires on time");
}

/* Moved earlier: the loop must be woken, or the timer fires late. */
static void
test_moved_earlier (void)
{
  struct probe p;
  struct timer_service *ts = service_with (&p);
  uint64_t armed = 0;
  bool ok = CHECK (ts != NULL);

  if (ok)
    probe_arm (&p, 3600 * 1000 * MS);
  ok = ok && CHECK (wait_loop_set (&p));   /* the hour-long ev_timer */
  if (ok) {
    armed = monotonic_ns ();
    probe_arm (&p, 10 * MS);
  }
  ok = ok && CHECK (wait_fired (&p, 1, armed + 10 * MS + SLACK_NS));
  ok = ok && CHECK (atomic_load (&p.fired_ns) >= armed + 10 * MS);
  timer_service_free (ts);
  tap_ok (ok, "re-armed earlier: fires at the earlier deadline");
}

static void
test_cancel (void)
{
  struct probe p;
  struct timer_service *ts = service_with (&p);
  bool ok = CHECK (ts != NULL);

  if (ok) {
    probe_arm (&p, 10 * MS);
    unplug_timer_cancel (&p.timer);
    sleep_ns (60 * MS);
    ok = CHECK (atomic_load (&p.fired) == 0);
    /* Armed again after a lazy cancel: the stale ev_timer must not
     * stand for the new deadline once it has gone off.
     */
    probe_arm (&p, 10 * MS);
  }
  ok = ok && CHECK (wait_fired (&p, 1, monotonic_ns () + 10 * MS + SLACK_NS));
  timer_service_free (ts);
  tap_ok (ok, "a cancelled timer does not fire; armed again, it does");
}

/* A queue's plug/unplug cycle: arm, cancel, arm a little later...
 *
 * Each time an arm wakes the loop, the loop sets the timer's ev_timer
 * for the deadline armed last, later than any before it.  So once every
 * wake-up sent has been handled, an ev_timer still set for the first
 * deadline means no arm after the first woke the loop.
 */
static void
test_cycles_save_wakeups (void)
{
  struct probe p[2];            /* p[1] is only the barrier below */
  struct timer_service *ts = service_with_probes (p, 2);
  const unsigned cycles = 500;
  uint64_t first = 0;
  bool ok = CHECK (ts != NULL);

  /* Plugs a few tens of microseconds long, all within one delay.  The
   * first arm wakes the loop; once it has set its ev_timer, every later
   * deadline is further off than that expiry and wakes nothing.
   */
  if (ok) {
    first = probe_arm (&p[0], 1000 * MS);
    ok = CHECK (wait_loop_set (&p[0]));
    unplug_timer_cancel (&p[0].timer);
  }
  for (unsigned i = 1; ok && i < cycles; i++) {
    probe_arm (&p[0], 1000 * MS);
    sleep_ns (MS / 20);
    unplug_timer_cancel (&p[0].timer);
  }
  /* A barrier: libev hands the loop every ev_async sent so far on the
   * wake-up that carries the barrier's, so by the time the barrier's
   * immediate deadline has fired, any wake-up a cycle sent was handled.
   */
  if (ok) {
    probe_arm (&p[1], 0);
    ok = CHECK (wait_fired (&p[1], 1, monotonic_ns () + SLACK_NS));
  }
  if (ok) {
    ok &= CHECK (atomic_load (&p[0].timer.expiry_ns) == first);
    sleep_ns (1100 * MS);
    ok &= CHECK (atomic_load (&p[0].fired) == 0);
  }
  timer_service_free (ts);
  tap_ok (ok, "%u plug/unplug cycles woke the timer loop once: its"
          " ev_timer still waits for the first deadline", cycles);
}

static void
closed_fd_cb (struct ev_loop *loop, ev_io *w, int revents)
{
  *(int *) w->data = revents;
  ev_io_stop (loop, w);
}

static void
idle_cb (struct ev_loop *loop, ev_idle *w, int revents)
{
  *(bool *) w->data = true;
  ev_idle_stop (loop, w);
}

/* The remote backend's loop watches libnbd's socket, which libnbd closes
 * in whatever thread finds the connection dead, possibly between the
 * loop thread changing its watcher and libev applying the change.  With
 * epoll, libev aborts nbdkit there; the watcher must fail instead.
 */
static void
test_loop_survives_closed_fd (void)
{
  struct ev_loop *loop = engine_loop_new ();
  int sv[2] = { -1, -1 }, revents = 0;
  bool ok = loop != NULL && socketpair (AF_UNIX, SOCK_STREAM, 0, sv) == 0;
  bool went_on = false;
  ev_io io;
  ev_idle idle;

  if (ok) {
    ev_io_init (&io, closed_fd_cb, sv[0], EV_READ);
    io.data = &revents;
    ev_io_start (loop, &io);
    ev_run (loop, EVRUN_NOWAIT);
    ev_io_stop (loop, &io);
    ev_io_set (&io, sv[0], EV_READ | EV_WRITE);
    ev_io_start (loop, &io);
    close (sv[0]);
    ev_run (loop, EVRUN_NOWAIT);
    /* ... and the loop still runs its other watchers. */
    ev_idle_init (&idle, idle_cb);
    idle.data = &went_on;
    ev_idle_start (loop, &idle);
    ev_run (loop, EVRUN_NOWAIT);
    ok = (revents & EV_ERROR) && went_on;
  }
  tap_ok (ok, "an engine loop fails a watcher whose descriptor another"
          " thread closed (revents %#x), and carries on", revents);
  if (sv[1] >= 0)
    close (sv[1]);
  if (loop)
    ev_loop_destroy (loop);
}

int
main (void)
{
  test_fires_once ();
  test_moved_later ();
  test_moved_earlier ();
  test_stale_fire_not_claimed ();
  test_cancel ();
  test_cycles_save_wakeups ();
  test_loop_survives_closed_fd ();
  tap_plan (tap_count);
  return tap_done ();
}
