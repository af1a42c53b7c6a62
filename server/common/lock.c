/* plugq: the engine's mutexes (lock.h). */
#include <config.h>

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "clock.h"
#include "lock.h"

void
lock_init (struct lock *l)
{
  pthread_mutex_init (&l->mutex, NULL);
#ifdef PLUGQ_LOCK_CHECKS
  l->held = false;
#endif
}

void
lock_destroy (struct lock *l)
{
  pthread_mutex_destroy (&l->mutex);
}

#ifdef PLUGQ_LOCK_CHECKS
void
lock_acquire (struct lock *l)
{
  pthread_mutex_lock (&l->mutex);
  l->owner = pthread_self ();
  l->held = true;
}

void
lock_release (struct lock *l)
{
  l->held = false;
  pthread_mutex_unlock (&l->mutex);
}

void
lock_check_held (const struct lock *l, const char *file, int line,
                 const char *func)
{
  /* Only the holder wrote these, under the mutex: a thread that holds
   * it reads its own writes; one that does not has the bug reported.
   */
  if (!l->held || !pthread_equal (l->owner, pthread_self ())) {
    fprintf (stderr, "%s:%d: %s: lock not held by this thread\n",
             file, line, func);
    abort ();
  }
}

static void
lock_handed_back (struct lock *l)
{
  l->owner = pthread_self ();
  l->held = true;
}
#else
static inline void
lock_handed_back (struct lock *l)
{
}
#endif

void
lock_wait (pthread_cond_t *cond, struct lock *l)
{
#ifdef PLUGQ_LOCK_CHECKS
  l->held = false;
#endif
  pthread_cond_wait (cond, &l->mutex);
  lock_handed_back (l);
}

int
lock_wait_until (pthread_cond_t *cond, struct lock *l, uint64_t deadline_ns)
{
  int r;

#ifdef PLUGQ_LOCK_CHECKS
  l->held = false;
#endif
  r = cond_wait_until (cond, &l->mutex, deadline_ns);
  lock_handed_back (l);
  return r;
}

void
semaphore_wait (sem_t *s)
{
  int saved_errno = errno;

  while (sem_wait (s) == -1)
    assert (errno == EINTR);
  errno = saved_errno;
}

void
sleepers_post (struct sleeper *list)
{
  while (list) {
    struct sleeper *s = list;

    list = s->next;
    s->next = NULL;
    sem_post (&s->sem);
  }
}
