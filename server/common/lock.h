/* plugq: the engine's mutexes, with checkable ownership.
 *
 * Every lock in server/ is a struct lock.  With --enable-lock-checks (the
 * test builds) it remembers which thread holds it, so a helper that needs
 * it states that with lock_assert_held () at its top and a caller that
 * forgot the lock fails at once instead of racing.  Without the checks it
 * is a bare pthread mutex and the assertions compile to nothing.
 *
 * A condition wait goes through lock_wait (), which hands the ownership
 * record over with the mutex.  A thread that waits with no lock held,
 * for one poster (a completion, a writer's answer), sleeps on a
 * semaphore through semaphore_wait ().
 */
#ifndef PLUGQ_LOCK_H
#define PLUGQ_LOCK_H

/* struct lock's layout depends on PLUGQ_LOCK_CHECKS, so it comes from
 * the compiler flags (configure's LOCK_CHECK_CPPFLAGS), which every file
 * sees alike, and never from a header.
 */

#include <pthread.h>
#include <semaphore.h>
#include <stdbool.h>
#include <stdint.h>

struct lock {
  pthread_mutex_t mutex;
#ifdef PLUGQ_LOCK_CHECKS
  pthread_t owner;              /* valid while held */
  bool held;
#endif
};

void lock_init (struct lock *);
void lock_destroy (struct lock *);

#ifdef PLUGQ_LOCK_CHECKS
void lock_acquire (struct lock *);
void lock_release (struct lock *);
/* Aborts with the caller's location unless this thread holds l. */
void lock_check_held (const struct lock *, const char *file, int line,
                      const char *func);
#define lock_assert_held(l) \
  lock_check_held ((l), __FILE__, __LINE__, __func__)
#else
static inline void
lock_acquire (struct lock *l)
{
  pthread_mutex_lock (&l->mutex);
}

static inline void
lock_release (struct lock *l)
{
  pthread_mutex_unlock (&l->mutex);
}

#define lock_assert_held(l) ((void) (l))
#endif

/* pthread_cond_wait on l, which the caller holds, and holds again on
 * return.
 */
void lock_wait (pthread_cond_t *, struct lock *);

/* The same, until deadline_ns (monotonic_ns ()) at the latest, for a
 * condition variable made by cond_init_monotonic ().  ETIMEDOUT once the
 * deadline passed, else 0.
 */
int lock_wait_until (pthread_cond_t *, struct lock *, uint64_t deadline_ns);

/* sem_wait until posted, through signals; errno is left as it was. */
void semaphore_wait (sem_t *);

/* A thread asleep on its own semaphore, which whoever answers it can put
 * on a list and post once it has dropped its lock: a post is a system
 * call, and every thread waiting for the lock would wait it out.
 */
struct sleeper {
  struct sleeper *next;
  sem_t sem;
};

/* Posts every sleeper on the list.  Each may return, and its sleeper go,
 * as soon as it is posted, so its successor is read first; each is left
 * with no list of its own.
 */
void sleepers_post (struct sleeper *list);

#endif /* PLUGQ_LOCK_H */
