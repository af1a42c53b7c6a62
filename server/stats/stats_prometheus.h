/* plugq: the stats= counters in the Prometheus text exposition format
 * (version 0.0.4), for node_exporter's textfile collector.
 *
 * The same counters as the JSON document (stats_file.h), in base units:
 * microseconds become seconds, sizes are bytes.  Every family has HELP
 * and TYPE lines and its samples together; counters end in _total; each
 * disk's samples carry a disk label, and op (read, write, zero, trim) or
 * cause (the unplug causes) where the JSON has one object per kind.  The
 * latency histograms become cumulative _bucket{le=...}, _sum and _count
 * series.  docs/stats-format.md lists the mapping; plugq-stat --prometheus
 * writes the same from a JSON snapshot.
 */
#ifndef PLUGQ_STATS_PROMETHEUS_H
#define PLUGQ_STATS_PROMETHEUS_H

#include <stddef.h>

struct linear;
struct queue;

/* The whole exposition, ending in a newline, as a string to free().
 * uptime_s is plugq_uptime_seconds.  NULL with errno set.
 */
char *stats_prometheus_render (struct queue **disks, size_t nr_disks,
                               struct linear **exports, size_t nr_exports,
                               double uptime_s);

#endif /* PLUGQ_STATS_PROMETHEUS_H */
