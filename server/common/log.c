/* plugq: where the engine's messages go. */

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

bool log_queue_events;

/* This thread's context prefix and capture, if any. */
static __thread const char *context;
static __thread struct log_capture *capture;

void
log_set_context (const char *c)
{
  context = c;
}

const char *
log_get_context (void)
{
  return context;
}

void
log_capture_begin (struct log_capture *c)
{
  c->text[0] = '\0';
  c->len = 0;
  c->count = 0;
  capture = c;
}

void
log_capture_end (struct log_capture *c)
{
  if (capture == c)
    capture = NULL;
}

/* Appends msg to the capture, cut short rather than lost when full. */
static void
capture_append (struct log_capture *c, const char *msg)
{
  int n;

  if (c->len + 1 >= sizeof c->text)
    return;
  n = snprintf (c->text + c->len, sizeof c->text - c->len, "%s%s",
                c->count ? "; " : "", msg);
  c->count++;
  if (n < 0)
    return;
  c->len += (size_t) n;
  if (c->len >= sizeof c->text)
    c->len = sizeof c->text - 1;
}

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

/* The message with this thread's context before it, into buf (or a
 * heap string when it does not fit, freed by the caller).
 */
static const char *
with_context (char *buf, size_t size, char **heap, const char *msg)
{
  size_t need = strlen (context) + 2 + strlen (msg) + 1;

  *heap = NULL;
  if (need > size && (*heap = malloc (need)) != NULL) {
    buf = *heap;
    size = need;
  }
  snprintf (buf, size, "%s: %s", context, msg);
  return buf;
}

/* An error for the sink: the context first, and into the capture
 * instead while this thread captures.
 */
static void
error_sink (const char *msg)
{
  char buf[1024], *heap = NULL;

  if (context)
    msg = with_context (buf, sizeof buf, &heap, msg);
  if (capture)
    capture_append (capture, msg);
  else if (sink.error)
    sink.error (msg);
  else
    fprintf (stderr, "plugq: %s\n", msg);
  free (heap);
}

void
log_error (const char *fmt, ...)
{
  va_list ap;

  va_start (ap, fmt);
  emit (error_sink, "", fmt, ap);
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
