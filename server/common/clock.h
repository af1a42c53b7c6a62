/* plugq: the engine's clock, and condition variables that wait on it.
 *
 * Every deadline in the engine is a monotonic_ns () value, so a step of
 * the wall clock can neither stretch nor cut a plug, a retry or a timed
 * wait.
 */
#ifndef PLUGQ_CLOCK_H
#define PLUGQ_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC, in nanoseconds.  Inline: a write around the queue
 * reads it twice, and the call would cost as much as the arithmetic.
 */
static inline uint64_t
monotonic_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (uint64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A condition variable whose timed waits take monotonic_ns deadlines, so
 * a wall clock step cannot stretch or cut them, and such a wait: the
 * result of pthread_cond_timedwait (ETIMEDOUT once deadline_ns passed).
 */
void cond_init_monotonic (pthread_cond_t *);
int cond_wait_until (pthread_cond_t *, pthread_mutex_t *,
                     uint64_t deadline_ns);

#endif /* PLUGQ_CLOCK_H */
