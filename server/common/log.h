/* plugq: where the engine's messages go.
 *
 * The engine does not know nbdkit; the plugin installs a sink that forwards
 * to nbdkit_error and nbdkit_debug.  Without a sink (unit tests) errors go
 * to stderr and debug messages are dropped unless PLUGQ_DEBUG is set.
 */
#ifndef PLUGQ_LOG_H
#define PLUGQ_LOG_H

#include <stdbool.h>

struct log_sink {
  void (*error) (const char *msg);
  void (*debug) (const char *msg);
};

void log_set_sink (const struct log_sink *);

void log_error (const char *fmt, ...)
  __attribute__ ((format (printf, 1, 2)));
void log_debug (const char *fmt, ...)
  __attribute__ ((format (printf, 1, 2)));

/* -D plugq.queue=1: log every plug and unplug. */
extern bool log_queue_events;

/* Where an error came from, for messages about a configuration file:
 * while set, this thread's errors start with "CONTEXT: " (for example
 * "/etc/plugq.conf:12: ").  The string must stay valid until cleared
 * with NULL.  Thread-local, so configuring on one thread never prefixes
 * another thread's messages.
 */
void log_set_context (const char *context);
const char *log_get_context (void);

/* The errors of one operation, kept as text for whoever asked for it
 * (the control thread answers its client with them) instead of going to
 * the sink.  Between log_capture_begin and log_capture_end this thread's
 * errors are appended to the capture, joined with "; "; other threads
 * log as before.
 */
struct log_capture {
  char text[1024];
  size_t len;
  unsigned count;               /* errors captured */
};

void log_capture_begin (struct log_capture *);
void log_capture_end (struct log_capture *);

#endif /* PLUGQ_LOG_H */
