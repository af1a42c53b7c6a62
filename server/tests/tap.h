/* plugq: a few TAP helpers for the C unit tests, so automake's TAP driver
 * counts every case (not every program) in the test summary.
 */
#ifndef PLUGQ_TAP_H
#define PLUGQ_TAP_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Which sanitizer the test was built with (gcc and clang spell it
 * differently), for tests that must scale or skip under one.
 */
#if defined (__SANITIZE_ADDRESS__)
#define TAP_ASAN 1
#endif
#if defined (__SANITIZE_THREAD__)
#define TAP_TSAN 1
#endif
#if defined (__has_feature)
#if __has_feature (address_sanitizer)
#define TAP_ASAN 1
#endif
#if __has_feature (thread_sanitizer)
#define TAP_TSAN 1
#endif
#endif

static int tap_count, tap_failed;

static inline void
tap_plan (int n)
{
  printf ("1..%d\n", n);
  fflush (stdout);
}

__attribute__ ((format (printf, 2, 3)))
static inline bool
tap_ok (bool ok, const char *fmt, ...)
{
  va_list ap;

  printf ("%s %d - ", ok ? "ok" : "not ok", ++tap_count);
  va_start (ap, fmt);
  vprintf (fmt, ap);
  va_end (ap);
  printf ("\n");
  fflush (stdout);
  if (!ok)
    tap_failed++;
  return ok;
}

/* Inside a test case: report a failed check with its location, then let
 * the case carry on or bail out as the caller chooses.
 */
#define CHECK(cond) \
  ((cond) ? true : (fprintf (stdout, "# %s:%d: check failed: %s\n", \
                             __FILE__, __LINE__, #cond), false))

/* Whether all len bytes at buf are c.  One memcmp of the buffer against
 * itself a byte on: the sanitizers check that as one range, where a loop
 * costs them a check per byte (seconds on the tests' large buffers).
 */
static inline bool
bytes_all (const void *buf, int c, size_t len)
{
  const unsigned char *p = buf;

  return len == 0
    || (p[0] == (unsigned char) c && memcmp (p, p + 1, len - 1) == 0);
}

/* A program with nothing to test here: its whole plan, skipped. */
static inline int
tap_skip_all (int n, const char *why)
{
  tap_plan (n);
  for (int i = 0; i < n; i++)
    printf ("ok %d # SKIP %s\n", i + 1, why);
  fflush (stdout);
  return EXIT_SUCCESS;
}

static inline int
tap_done (void)
{
  fflush (stdout);
  return tap_failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif /* PLUGQ_TAP_H */
