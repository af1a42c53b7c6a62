/* plugq: unit tests for the lock ownership checks (server/common/lock.h).
 *
 * A check that fails aborts the process, so each case that expects a
 * failure runs in a child and looks for SIGABRT.
 */
#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/backend.h"
#include "common/lock.h"
#include "queue/queue_internal.h"
#include "tap.h"
#include "queue/timer_service.h"

#define CASES 6

#ifdef PLUGQ_LOCK_CHECKS

/* Runs fn in a child: its wait status (-1 if it could not be run), with
 * what it wrote to stderr in report.
 */
static int
run_child (void (*fn) (void), char *report, size_t size)
{
  FILE *err = tmpfile ();
  pid_t pid;
  int status;
  size_t n;

  if (err == NULL)
    return -1;
  fflush (stdout);
  pid = fork ();
  if (pid == 0) {
    if (dup2 (fileno (err), STDERR_FILENO) == -1)
      _exit (2);
    fn ();
    _exit (0);
  }
  if (pid == -1 || waitpid (pid, &status, 0) != pid) {
    fclose (err);
    return -1;
  }
  rewind (err);
  n = fread (report, 1, size - 1, err);
  report[n] = '\0';
  fclose (err);
  return status;
}

/* fn dies of SIGABRT after the lock check's report (not another abort). */
static bool
aborts (void (*fn) (void))
{
  char report[256];
  int status = run_child (fn, report, sizeof report);

  return status != -1 && WIFSIGNALED (status)
    && WTERMSIG (status) == SIGABRT
    && strstr (report, "lock not held by this thread") != NULL;
}

static bool
exits_cleanly (void (*fn) (void))
{
  char report[256];
  int status = run_child (fn, report, sizeof report);

  return status != -1 && WIFEXITED (status) && WEXITSTATUS (status) == 0;
}

static struct lock shared;

static void
assert_unheld (void)
{
  lock_assert_held (&shared);
}

static pthread_mutex_t handoff = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t handoff_cond = PTHREAD_COND_INITIALIZER;
static bool other_holds;

static void *
hold_forever (void *arg)
{
  lock_acquire (&shared);
  pthread_mutex_lock (&handoff);
  other_holds = true;
  pthread_cond_signal (&handoff_cond);
  pthread_mutex_unlock (&handoff);
  for (;;)
    pause ();
  return NULL;
}

static void
assert_held_by_other (void)
{
  pthread_t t;

  pthread_create (&t, NULL, hold_forever, NULL);
  pthread_mutex_lock (&handoff);
  while (!other_holds)
    pthread_cond_wait (&handoff_cond, &handoff);
  pthread_mutex_unlock (&handoff);
  lock_assert_held (&shared);
}

static void
assert_after_release (void)
{
  lock_acquire (&shared);
  lock_release (&shared);
  lock_assert_held (&shared);
}

/* A queue helper called without the queue lock. */
static void
queue_helper_unlocked (void)
{
  struct queue_config cfg;
  struct backend *b = backend_memory_new (1024 * 1024);
  struct queue *q;

  queue_config_defaults (&cfg);
  q = b ? queue_new ("unlocked", b, &cfg) : NULL;
  if (q == NULL)
    _exit (3);
  queue_plug (q);
}

/* Holds, asserts, releases: must not abort. */
static void
test_holder_passes_quietly (void)
{
  lock_acquire (&shared);
  lock_assert_held (&shared);
  lock_release (&shared);
}

static void
test_holder_passes (void)
{
  pthread_cond_t cond;
  bool ok;

  lock_init (&shared);
  lock_acquire (&shared);
  lock_assert_held (&shared);
  cond_init_monotonic (&cond);
  /* A wait hands the lock back to the waiter with its ownership. */
  ok = CHECK (lock_wait_until (&cond, &shared, monotonic_ns ()) == ETIMEDOUT);
  lock_assert_held (&shared);
  lock_release (&shared);
  pthread_cond_destroy (&cond);
  tap_ok (ok, "the holder passes, also after a timed wait");
}

int
main (void)
{
  tap_plan (CASES);
  test_holder_passes ();
  tap_ok (aborts (assert_unheld), "a lock nobody holds fails the check");
  tap_ok (aborts (assert_held_by_other),
          "a lock another thread holds fails the check");
  tap_ok (aborts (assert_after_release),
          "a released lock fails the check");
  tap_ok (aborts (queue_helper_unlocked),
          "a queue helper called without the queue lock aborts");
  lock_init (&shared);
  tap_ok (exits_cleanly (test_holder_passes_quietly),
          "a holder in a child does not abort");
  return tap_done ();
}

#else

int
main (void)
{
  return tap_skip_all (CASES, "built without --enable-lock-checks");
}

#endif
