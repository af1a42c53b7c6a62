/* plugq: per-disk counters, named as in /proc/diskstats and iostat -x.
 *
 * "Requests" are what clients sent; "backend operations" are what the
 * queue dispatched after merging.  merges = requests absorbed into a
 * backend operation started by another request (iostat's rrqm/wrqm).
 */
#ifndef PLUGQ_STATS_H
#define PLUGQ_STATS_H

#include <stdint.h>
#include <stdio.h>

#include "common/op.h"

enum unplug_cause {
  UNPLUG_TIMER,
  UNPLUG_THRESHOLD,
  UNPLUG_SYNC,                  /* FUA request */
  UNPLUG_FLUSH,
  UNPLUG_FULL,                  /* queue-bytes reached: back-pressure */
  UNPLUG_DRAIN,                 /* shutdown */
  UNPLUG_CAUSES
};

extern const char *const unplug_cause_names[UNPLUG_CAUSES];

/* log2 buckets of microseconds: bucket i counts [2^(i-1), 2^i) us,
 * bucket 0 counts < 1 us, the last bucket everything above.
 */
#define LATENCY_BUCKETS 28

struct latency_histogram {
  uint64_t bucket[LATENCY_BUCKETS];
  uint64_t count;
  uint64_t total_us;
};

/* Inline: every backend operation records one (bucket i is the bit
 * length of the value in microseconds; everything from 2^26 us, about
 * 67 s, up lands in the last bucket).
 */
static inline void
latency_record (struct latency_histogram *h, uint64_t ns)
{
  uint64_t us = ns / 1000;
  unsigned i = us == 0 ? 0 : 64 - __builtin_clzll (us);

  if (i >= LATENCY_BUCKETS)
    i = LATENCY_BUCKETS - 1;
  h->bucket[i]++;
  h->count++;
  h->total_us += us;
}

extern const char *const op_kind_names[OP_KINDS];

struct op_counters {
  uint64_t requests;            /* client requests */
  uint64_t request_bytes;
  uint64_t merges;              /* requests merged into another's op */
  uint64_t backend_ops;         /* backend operations issued */
  uint64_t backend_bytes;
  uint64_t ticks_ms_x1000;      /* sum of request latencies, us (diskstats
                                 * field 4/8 in ms is this / 1000) */
  uint64_t errors;
};

struct queue_stats {
  struct op_counters op[OP_KINDS];
  uint64_t flushes;             /* FLUSH requests */
  uint64_t backend_flushes;     /* backend flushes (group commit shares) */
  uint64_t fua_requests;
  uint64_t plugs;
  uint64_t unplugs[UNPLUG_CAUSES];
  uint64_t requests_dispatched; /* pieces dispatched, for IOs per unplug */
  uint64_t full_waits;          /* writers that waited for queue space */
  uint64_t waits_behind_stream; /* waiting writes left to merge behind a
                                 * busy stream instead of going alone */
  uint64_t waiting_merged;      /* pieces of waiting writes that went out
                                 * in one operation with other requests */
  uint64_t latched_errors;
  uint64_t writeback_retries;   /* write-outs tried again for memory */
  uint64_t read_modify_writes;  /* write-outs that read partial blocks */
  uint64_t bypassed_writes;     /* writes that went around the queue */
  uint64_t reads_waited;        /* reads that waited behind a busy stream
                                 * to go out merged */
  uint64_t read_ahead_hits;     /* reads answered from a read-ahead
                                 * window, without a backend read */
  uint64_t read_ahead_bytes;    /* bytes read ahead (window fills that
                                 * succeeded) */
  uint64_t writes_held;         /* write dispatches held back while reads
                                 * competed (read-target) */
  uint64_t read_target_ns;      /* now: the read target in force (with
                                 * read-target=auto, as measured); 0: off */
  uint64_t queued_requests;     /* now */
  uint64_t queued_bytes;        /* now */
  uint64_t in_flight;           /* now */
  uint64_t oldest_in_flight_us; /* now: age of the oldest backend
                                 * operation in progress, 0 with none */
  uint64_t time_in_queue_us;    /* sum over requests of queued time
                                 * (diskstats field 11, weighted) */
  struct latency_histogram queue_time;    /* arrival -> dispatch start */
  struct latency_histogram dispatch_time; /* backend operation duration */
  struct latency_histogram flush_time;    /* FLUSH request latency */
  struct latency_histogram read_time;     /* read request latency */
};

#endif /* PLUGQ_STATS_H */
