/* plugq: unplug timers on one libev loop in its own thread.
 *
 * The loop only wakes things up: when a disk's timer fires it calls that
 * disk's callback, which hands the unplug to the disk's own dispatch
 * thread.  No backend I/O ever runs here, so a slow disk cannot delay
 * another disk's timer.  Arming and cancelling are lock-free from any
 * thread: each timer has its own ev_async, so no list or lock is shared
 * by all disks.
 */
#ifndef PLUGQ_TIMER_SERVICE_H
#define PLUGQ_TIMER_SERVICE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <ev.h>

/* Deadlines are monotonic_ns () values. */
#include "common/clock.h"

struct timer_service;

struct unplug_timer {
  struct timer_service *service;
  ev_timer timer;
  ev_async wake;
  _Atomic uint64_t deadline_ns; /* CLOCK_MONOTONIC; 0 = not armed */
  _Atomic uint64_t last_deadline_ns; /* the latest armed, kept by cancel */
  _Atomic uint64_t expiry_ns;   /* the pending ev_timer's; 0 = none */
  void (*fire) (void *arg, uint64_t deadline_ns);
  void *arg;
};

struct timer_service *timer_service_new (void);
/* Attaches a timer to the service, before or after start (a disk added
 * in service: the loop's thread then starts its watchers while the
 * caller waits).
 *
 * fire runs on the loop thread once deadline_ns has passed.  The timer
 * may have been re-armed for a newer plug between then and the moment
 * fire takes its owner's lock, so fire must claim the deadline under
 * that lock before acting on it.
 */
void unplug_timer_init (struct unplug_timer *,
                        void (*fire) (void *arg, uint64_t deadline_ns),
                        void *arg);
int timer_service_attach (struct timer_service *, struct unplug_timer *);
/* Takes the timer off its service (none: nothing to do), waiting for the
 * loop's thread if it runs: once it returns no callback of the timer
 * runs again, so its owner may be freed.  Nothing may arm it after.
 */
void timer_service_detach (struct unplug_timer *);
int timer_service_start (struct timer_service *);
/* Stops and joins the loop thread; frees the service. */
void timer_service_free (struct timer_service *);

/* From any thread.  Arming an armed timer moves its deadline.  Returns
 * the deadline (CLOCK_MONOTONIC ns), so the caller need not read the
 * clock again.
 */
uint64_t unplug_timer_arm (struct unplug_timer *, uint64_t delay_ns);
void unplug_timer_cancel (struct unplug_timer *);
/* From fire, under the lock its owner arms and cancels with: true when
 * deadline_ns is still the armed one (it is then disarmed), false when
 * the timer was cancelled or armed again since it fired.
 */
bool unplug_timer_claim (struct unplug_timer *, uint64_t deadline_ns);

#endif /* PLUGQ_TIMER_SERVICE_H */
