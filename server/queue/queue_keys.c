/* plugq: the configuration keys that set a queue_config. */
#include <config.h>

#include <stdlib.h>
#include <string.h>

#include "common/config_value.h"
#include "elevator/elevator.h"
#include "common/log.h"
#include "queue_keys.h"

const char *const queue_keys[] = {
  "ack", "elevator", "unplug-delay", "unplug-thresh", "max-merge",
  "queue-bytes", "queue-requests", "write-expire", "read-target", "bypass",
  "read-ahead", NULL,
};

bool
queue_key_known (const char *key)
{
  for (size_t i = 0; queue_keys[i]; i++)
    if (strcmp (key, queue_keys[i]) == 0)
      return true;
  return false;
}

/* value as one of two words: *first says which.  0, or -1 with one
 * clear line.
 */
static int
parse_either (const char *key, const char *value, const char *one,
              const char *other, bool *first)
{
  *first = strcmp (value, one) == 0;
  if (*first || strcmp (value, other) == 0)
    return 0;
  log_error ("%s=%s: expected %s or %s", key, value, one, other);
  return -1;
}

static int
set_ack (struct queue_config *qc, const char *key, const char *value)
{
  bool queued;

  if (parse_either (key, value, "queued", "dispatched", &queued) == -1)
    return -1;
  qc->ack = queued ? ACK_QUEUED : ACK_DISPATCHED;
  return 0;
}

static int
set_bypass (struct queue_config *qc, const char *key, const char *value)
{
  bool bypass;

  if (parse_either (key, value, "auto", "never", &bypass) == -1)
    return -1;
  qc->bypass = bypass;
  return 0;
}

/* A delay; off: no limit on writes for the sake of reads; auto: from
 * the backend's own read latency (elevator_reads.c).
 */
static int
set_read_target (struct queue_config *qc, const char *key, const char *value)
{
  if (strcmp (value, "off") == 0) {
    qc->read_target_ns = 0;
    return 0;
  }
  if (strcmp (value, "auto") == 0) {
    qc->read_target_ns = READ_TARGET_AUTO;
    return 0;
  }
  return config_parse_delay (key, value, false, &qc->read_target_ns);
}

/* A size up to READ_AHEAD_MAX; off or 0: no read-ahead. */
static int
set_read_ahead (struct queue_config *qc, const char *key, const char *value)
{
  if (strcmp (value, "off") == 0) {
    qc->read_ahead = 0;
    return 0;
  }
  if (config_parse_size_key (key, value, true, &qc->read_ahead) == -1)
    return -1;
  if (qc->read_ahead > READ_AHEAD_MAX) {
    log_error ("%s=%s: at most %d MiB", key, value,
               READ_AHEAD_MAX / (1024 * 1024));
    return -1;
  }
  return 0;
}

/* The message lists the elevators of the table, as --help does. */
static int
set_elevator (struct queue_config *qc, const char *key, const char *value)
{
  const struct elevator_ops *e = elevator_lookup (value);
  char *known;

  if (e == NULL) {
    known = elevator_names (", ");
    log_error ("%s=%s: unknown elevator (known: %s)", key, value,
               known ? known : "?");
    free (known);
    return -1;
  }
  qc->elevator = e;
  return 0;
}

int
queue_key_set (struct queue_config *qc, const char *key, const char *value)
{
  if (strcmp (key, "ack") == 0)
    return set_ack (qc, key, value);
  if (strcmp (key, "elevator") == 0)
    return set_elevator (qc, key, value);
  if (strcmp (key, "bypass") == 0)
    return set_bypass (qc, key, value);
  if (strcmp (key, "unplug-delay") == 0)
    return config_parse_delay (key, value, true, &qc->unplug_delay_ns);
  if (strcmp (key, "write-expire") == 0)
    return config_parse_delay (key, value, false, &qc->write_expire_ns);
  if (strcmp (key, "read-target") == 0)
    return set_read_target (qc, key, value);
  if (strcmp (key, "read-ahead") == 0)
    return set_read_ahead (qc, key, value);
  if (strcmp (key, "unplug-thresh") == 0)
    return config_parse_count (key, value, &qc->unplug_thresh);
  if (strcmp (key, "queue-requests") == 0)
    return config_parse_count (key, value, &qc->queue_requests);
  if (strcmp (key, "max-merge") == 0)
    return config_parse_size_key (key, value, false, &qc->max_merge);
  if (strcmp (key, "queue-bytes") == 0)
    return config_parse_size_key (key, value, false, &qc->queue_bytes);
  abort ();                     /* not a queue key: see queue_key_known */
}
