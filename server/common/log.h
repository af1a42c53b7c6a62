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

#endif /* PLUGQ_LOG_H */
