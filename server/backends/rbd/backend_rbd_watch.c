/* plugq: the rbd backend's watch over the cluster's answers.
 *
 * By default an rbd disk waits for the cluster as krbd and qemu's rbd
 * driver do (ceph-timeout=0): an OSD that hangs until Ceph marks it down,
 * or a pool below min_size, holds requests for as long as it lasts, and
 * nothing fails.  Such a disk must say that it waits.  One thread per
 * disk looks once a second: when requests are in flight and librbd has
 * answered none of them since RBD_STALL_REPORT_NS, it logs once
 *
 *   rbd=POOL/IMAGE: waiting for the cluster: 12 writes in flight, none
 *   answered for 10 s
 *
 * and when answers come again, once
 *
 *   rbd=POOL/IMAGE: the cluster answers again: resumed after 41 s
 *
 * While nbdkit shuts down (the queue's final drain, rbd_backend_draining)
 * it says after RBD_DRAIN_REPORT_NS already that the drain waits, since
 * nbdkit does not exit until then.  The I/O path only counts (atomics in
 * struct rbd_backend); the thread never touches a queue.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "backend_rbd.h"
#include "common/clock.h"
#include "common/engine_thread.h"
#include "common/log.h"

#define NS_PER_S UINT64_C (1000000000)

/* How often the thread looks. */
#define WATCH_INTERVAL_NS NS_PER_S

enum rbd_stall_news
rbd_stall_look (struct rbd_stall *s, uint64_t now_ns, bool busy,
                uint64_t answered, bool draining, uint64_t *quiet_ns)
{
  uint64_t quiet = now_ns - s->quiet_since_ns;

  *quiet_ns = quiet;
  if (!busy || answered != s->answered) {
    bool was_reported = s->reported;

    s->answered = answered;
    s->quiet_since_ns = now_ns;
    s->reported = s->drain_reported = false;
    return was_reported ? RBD_STALL_ENDED : RBD_STALL_NONE;
  }
  if (draining && !s->drain_reported && quiet >= RBD_DRAIN_REPORT_NS) {
    s->reported = s->drain_reported = true;
    return RBD_STALL_DRAIN;
  }
  if (!s->reported && quiet >= RBD_STALL_REPORT_NS) {
    s->reported = true;
    return RBD_STALL_BEGAN;
  }
  return RBD_STALL_NONE;
}

/* "12 writes", "1 write and 2 other requests": what is in flight. */
static void
describe_in_flight (char *buf, size_t size, unsigned writes, unsigned calls)
{
  int n = 0;

  if (writes)
    n = snprintf (buf, size, "%u write%s", writes, writes == 1 ? "" : "s");
  if (calls)
    snprintf (buf + n, size - n, "%s%u %srequest%s", writes ? " and " : "",
              calls, writes ? "other " : "", calls == 1 ? "" : "s");
}

static void
report (const struct rbd_backend *rb, enum rbd_stall_news news,
        uint64_t quiet_ns, unsigned writes, unsigned calls)
{
  const char *spec = rb->t.spec;
  uint64_t secs = quiet_ns / NS_PER_S;
  char what[96] = "";

  describe_in_flight (what, sizeof what, writes, calls);
  switch (news) {
  case RBD_STALL_BEGAN:
    log_error ("rbd=%s: waiting for the cluster: %s in flight, none answered"
               " for %" PRIu64 " s", spec, what, secs);
    break;
  case RBD_STALL_DRAIN:
    log_error ("rbd=%s: shutting down: waiting for the cluster: %s in "
               "flight, none answered for %" PRIu64 " s; nbdkit exits once"
               " every answered write is on the cluster (a second signal"
               " does not stop this, SIGKILL loses them)", spec, what, secs);
    break;
  case RBD_STALL_ENDED:
    log_error ("rbd=%s: the cluster answers again: resumed after %" PRIu64
               " s", spec, secs);
    break;
  case RBD_STALL_NONE:
    break;
  }
}

/* One look: the counters are read without a lock, as a snapshot. */
static void
look (struct rbd_backend *rb, struct rbd_stall *s)
{
  unsigned writes = atomic_load_explicit (&rb->in_flight,
                                          memory_order_relaxed);
  unsigned calls = atomic_load_explicit (&rb->calls_in_flight,
                                         memory_order_relaxed);
  uint64_t answered = atomic_load_explicit (&rb->answered,
                                            memory_order_relaxed);
  bool draining = atomic_load_explicit (&rb->draining, memory_order_relaxed);
  uint64_t quiet;
  enum rbd_stall_news news = rbd_stall_look (s, monotonic_ns (),
                                             writes + calls > 0, answered,
                                             draining, &quiet);

  report (rb, news, quiet, writes, calls);
}

/* Looks every WATCH_INTERVAL_NS, and once more when told to stop (the
 * drain is over), so that a stall in the log gets its end.  Drops
 * rb->watch_lock while it looks.
 */
static void *
watch_thread (void *arg)
{
  struct rbd_backend *rb = arg;
  struct rbd_stall s = { .quiet_since_ns = monotonic_ns () };
  uint64_t next = s.quiet_since_ns;
  bool stopping = false;

  lock_acquire (&rb->watch_lock);
  while (!stopping) {
    next += WATCH_INTERVAL_NS;
    while (!rb->watch_stopping
           && lock_wait_until (&rb->watch_wake, &rb->watch_lock, next) == 0)
      ;
    stopping = rb->watch_stopping;
    lock_release (&rb->watch_lock);
    look (rb, &s);
    lock_acquire (&rb->watch_lock);
  }
  lock_release (&rb->watch_lock);
  return NULL;
}

int
rbd_watch_start (struct rbd_backend *rb)
{
  lock_init (&rb->watch_lock);
  cond_init_monotonic (&rb->watch_wake);
  rb->watch_stopping = false;
  if (engine_thread_create (&rb->watch, "pq-rbd", watch_thread, rb) == -1) {
    int err = errno;

    log_error ("rbd=%s: cannot start its watch thread: %m", rb->t.spec);
    pthread_cond_destroy (&rb->watch_wake);
    lock_destroy (&rb->watch_lock);
    errno = err;
    return -1;
  }
  rb->watching = true;
  return 0;
}

void
rbd_watch_stop (struct rbd_backend *rb)
{
  if (!rb->watching)
    return;
  lock_acquire (&rb->watch_lock);
  rb->watch_stopping = true;
  pthread_cond_signal (&rb->watch_wake);
  lock_release (&rb->watch_lock);
  pthread_join (rb->watch, NULL);
  pthread_cond_destroy (&rb->watch_wake);
  lock_destroy (&rb->watch_lock);
  rb->watching = false;
}
