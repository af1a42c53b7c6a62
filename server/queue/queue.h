/* plugq: one disk's plugged request queue.
 *
 * Every disk owns one queue between its clients and its backend, with its
 * own lock, its own unplug timer and its own dispatch thread.  Nothing here
 * is shared with any other disk: a flush on one disk never waits on another.
 *
 * The queue holds writes, zeroes and trims as non-overlapping pieces: a new
 * request trims away the parts of older queued pieces it covers, so the
 * newest data always wins whatever order the elevator dispatches in.  The
 * elevator chooses where each dispatch starts; the dispatcher then merges
 * the pieces that follow it back to back into one backend operation.
 */
#ifndef PLUGQ_QUEUE_H
#define PLUGQ_QUEUE_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/backend.h"
#include "common/extents.h"
#include "stats/stats.h"

struct elevator_ops;
struct timer_service;
struct queue;

enum ack_mode {
  ACK_QUEUED,                   /* answer a write once it is queued */
  ACK_DISPATCHED,               /* answer a write once the backend wrote it */
};

struct queue_config {
  const struct elevator_ops *elevator;
  enum ack_mode ack;
  uint64_t unplug_delay_ns;
  uint32_t unplug_thresh;       /* 1 = no plugging, no merging */
  uint64_t max_merge;           /* bytes in one merged backend operation */
  uint64_t queue_bytes;         /* queued data before writers wait */
  uint32_t queue_requests;      /* queued pieces before writers wait */
  uint64_t write_expire_ns;     /* deadline: no request waits longer */
  uint64_t read_target_ns;      /* reads' latency target while writes
                                 * compete (elevator_reads.c); 0: off */
  uint64_t read_ahead;          /* largest read-ahead window of a stream
                                 * of reads (queue_read_ahead.c); 0: off */
  bool bypass;                  /* writes nothing can merge with go around
                                 * the queue where the backend writes to
                                 * memory (queue_bypass.c) */
  uint64_t retry_ns;            /* a write-out short of memory is tried
                                 * again for this long (not a parameter:
                                 * tests shorten it) */
};

/* The largest read-ahead= (a window is one backend read). */
#define READ_AHEAD_MAX (64 * 1024 * 1024)

/* The defaults, chosen by measurement (docs/tuning.md). */
void queue_config_defaults (struct queue_config *);

/* Request flags (the engine's own, mapped from NBD by the plugin). */
#define REQ_FUA       (1u << 0)
#define REQ_MAY_TRIM  (1u << 1)
#define REQ_FAST_ZERO (1u << 2)

struct session;                 /* session.h */

/* Takes ownership of backend. */
struct queue *queue_new (const char *name, struct backend *backend,
                         const struct queue_config *);
void queue_free (struct queue *);

/* Threads: start after fork, stop (draining everything) at cleanup.
 * queue_stop: 0, or -1 when answered data may be lost (the final
 * write-out or flush failed, or a write-back error was never reported
 * to any client), which it has logged.
 */
int queue_start (struct queue *, struct timer_service *);
int queue_stop (struct queue *);

const char *queue_name (const struct queue *);
const struct backend *queue_backend (const struct queue *);
const struct queue_config *queue_get_config (const struct queue *);

int queue_pread (struct queue *, void *buf, uint32_t count, uint64_t offset);
int queue_pwrite (struct queue *, struct session *, const void *buf,
                  uint32_t count, uint64_t offset, unsigned flags);
int queue_zero (struct queue *, struct session *, uint64_t count,
                uint64_t offset, unsigned flags);
int queue_trim (struct queue *, struct session *, uint64_t count,
                uint64_t offset, unsigned flags);
int queue_extents (struct queue *, uint64_t count, uint64_t offset,
                   struct extent_list *);
int queue_cache (struct queue *, uint64_t count, uint64_t offset);

/* FLUSH: every write answered before this call is durable when it
 * returns, or it fails.  Split so a volume can flush its members in
 * parallel: the session's error mark first (every write-back error
 * latched after it fails the FLUSH, however many FLUSHes of the session
 * run at once), then the ticket, then the wait.  A volume's FUA request
 * takes each member's mark before it queues its part there.
 */
uint64_t queue_error_mark (struct queue *, struct session *);
uint64_t queue_flush_start (struct queue *);
int queue_flush_wait (struct queue *, struct session *, uint64_t ticket,
                      uint64_t mark);
int queue_flush (struct queue *, struct session *);

/* A copy of the counters, taken under the queue lock. */
void queue_stats_snapshot (struct queue *, struct queue_stats *);

/* ------------------------------------------------ in service (queue_reconfig.c) */

/* A copy of the queue's keys, taken under its lock: set may change them
 * (queue_get_config's are only stable while nothing can).
 */
void queue_config_snapshot (struct queue *, struct queue_config *);

/* The first key whose value differs between the queue's keys and cfg
 * among those every request reads without the queue's lock (ack=,
 * bypass=, max-merge=, unplug-thresh=, write-expire=, read-target=), by
 * its name ("ack"); NULL if none does.
 */
const char *queue_config_unlocked_key (struct queue *,
                                       const struct queue_config *cfg);

/* Gives the queue cfg's keys (retry_ns excepted).  The keys read only
 * under the queue's lock change at once, under it: unplug-delay= from the
 * next plug, elevator= from the next dispatch, queue-bytes= and
 * queue-requests= for the next write (writers waiting for room are woken
 * if it grew).  The others (queue_config_unlocked_key) only with
 * no_requests: the caller guarantees that no request can be in the queue
 * or arrive while this runs; else -1 with EBUSY and nothing changed.  -1
 * after log_error if the new elevator cannot start (the old one stays).
 */
int queue_set_config (struct queue *, const struct queue_config *cfg,
                      bool no_requests);

/* Takes a queue out of service: drains it and flushes its backend (as
 * queue_stop), stops its dispatch thread, detaches its unplug timer,
 * closes its backend, frees it and gives its session slot back.  For a
 * queue started or not; no request may reach it any more.
 */
void queue_retire (struct queue *);

#endif /* PLUGQ_QUEUE_H */
