/* plugq: where the engine's messages go. */

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "log.h"

bool log_queue_events;

/* A copy, so the caller may pass a temporary.  The sink is installed once
 * while the plugin loads, before any engine thread exists, so readers need
 * no lock.
 */
static struct log_sink sink;

void
log_set_sink (const struct log_sink *s)
{
  if (s)
    sink = *s;
  else
    sink = (struct log_sink) { 0 };
}

/* Formats into buf when it fits, otherwise into a heap string the caller
 * frees.  On allocation failure the truncated text in buf is still better
 * than no message at all.
 */
__attribute__ ((format (printf, 4, 0)))
static const char *
format_message (char *buf, size_t size, char **heap,
                const char *fmt, va_list ap)
{
  va_list ap2;
  int n;

  *heap = NULL;
  va_copy (ap2, ap);
  n = vsnprintf (buf, size, fmt, ap);
  if (n >= 0 && (size_t) n >= size) {
    *heap = malloc ((size_t) n + 1);
    if (*heap)
      vsnprintf (*heap, (size_t) n + 1, fmt, ap2);
  }
  va_end (ap2);
  if (n < 0)
    return fmt;
  return *heap ? *heap : buf;
}

static bool
debug_to_stderr (void)
{
  const char *v = getenv ("PLUGQ_DEBUG");

  return v && *v && !(v[0] == '0' && v[1] == '\0');
}

/* Formats and hands the message to sink_fn, or to stderr after prefix.
 * errno is saved because callers log and then return -1 with errno set.
 */
__attribute__ ((format (printf, 3, 0)))
static void
emit (void (*sink_fn) (const char *), const char *prefix, const char *fmt,
      va_list ap)
{
  int saved_errno = errno;
  char buf[1024], *heap;
  const char *msg = format_message (buf, sizeof buf, &heap, fmt, ap);

  if (sink_fn)
    sink_fn (msg);
  else
    fprintf (stderr, "%s%s\n", prefix, msg);
  free (heap);
  errno = saved_errno;
}

void
log_error (const char *fmt, ...)
{
  va_list ap;

  va_start (ap, fmt);
  emit (sink.error, "plugq: ", fmt, ap);
  va_end (ap);
}

void
log_debug (const char *fmt, ...)
{
  va_list ap;

  if (!sink.debug && !debug_to_stderr ())
    return;
  va_start (ap, fmt);
  emit (sink.debug, "plugq: debug: ", fmt, ap);
  va_end (ap);
}
