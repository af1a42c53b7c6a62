/* plugq: engine threads and their libev loops (engine_thread.h). */
#include <config.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>

#include <ev.h>

#include "engine_thread.h"

/* Every thread the engine starts blocks signals, so nbdkit's own threads
 * keep receiving SIGTERM and SIGINT.
 */
int
engine_thread_create (pthread_t *thread, const char *name,
                      void *(*fn) (void *), void *arg)
{
  char comm[16];
  sigset_t all, old;
  int r;

  sigfillset (&all);
  pthread_sigmask (SIG_SETMASK, &all, &old);
  r = pthread_create (thread, NULL, fn, arg);
  pthread_sigmask (SIG_SETMASK, &old, NULL);
  if (r != 0) {
    errno = r;
    return -1;
  }
  /* A name only helps whoever looks: a failure to set it is no error. */
  snprintf (comm, sizeof comm, "%s", name);
  pthread_setname_np (*thread, comm);
  return 0;
}

/* No signal mask games and no SIGCHLD handler inside nbdkit.  The
 * select backend, for two reasons:
 * - epoll and poll sleep in whole milliseconds, and an unplug deadline
 *   is often shorter;
 * - when a watched descriptor is closed under them, epoll_ctl fails
 *   with EBADF and poll returns POLLNVAL, and libev asserts on both,
 *   which aborts nbdkit when a remote's socket dies in a request
 *   thread.  libev recovers from select's EBADF by failing that watcher
 *   with EV_ERROR.
 * Each loop watches one or two descriptors, so select costs nothing.
 */
struct ev_loop *
engine_loop_new (void)
{
  return ev_loop_new (EVBACKEND_SELECT | EVFLAG_NOSIGMASK);
}

struct ev_loop *
engine_loop_new_epoll (void)
{
  return ev_loop_new (EVBACKEND_EPOLL | EVFLAG_NOSIGMASK);
}
