/* plugq: the engine's clock (clock.h). */
#include <config.h>

#include <time.h>

#include "clock.h"

void
cond_init_monotonic (pthread_cond_t *cond)
{
  pthread_condattr_t attr;

  pthread_condattr_init (&attr);
  pthread_condattr_setclock (&attr, CLOCK_MONOTONIC);
  pthread_cond_init (cond, &attr);
  pthread_condattr_destroy (&attr);
}

int
cond_wait_until (pthread_cond_t *cond, pthread_mutex_t *lock,
                 uint64_t deadline_ns)
{
  struct timespec ts = {
    .tv_sec = deadline_ns / 1000000000, .tv_nsec = deadline_ns % 1000000000,
  };

  return pthread_cond_timedwait (cond, lock, &ts);
}
