/* plugq: the stats= file, a snapshot of every disk's counters, in JSON or
 * in the Prometheus text format (stats-format=, stats_prometheus.h).
 *
 * A thread of its own rewrites PATH every interval: the document goes to
 * a fresh temporary file in PATH's directory, then rename() replaces PATH
 * (common/replace_file.h), so a reader always sees one whole snapshot, and
 * nothing another user planted in the directory is written through or
 * blocked on.  The temporary name starts with a dot and never ends like
 * PATH, so node_exporter's textfile collector, which reads only *.prom,
 * never sees it.  docs/stats-format.md describes both formats.  Start it
 * after fork and stop it at cleanup; stopping writes once more, so the
 * last snapshot holds the final counters.
 */
#ifndef PLUGQ_STATS_FILE_H
#define PLUGQ_STATS_FILE_H

#include <stddef.h>
#include <stdint.h>

struct linear;
struct queue;

#define STATS_FILE_VERSION 1

struct stats_file;

enum stats_format {
  STATS_FORMAT_JSON,
  STATS_FORMAT_PROMETHEUS,
};

/* What one snapshot lists. */
struct stats_listing {
  struct queue **disks;
  size_t nr_disks;
  struct linear **exports;      /* the volumes among them are listed */
  size_t nr_exports;
  void *token;                  /* the source's own */
};

/* Where the writer finds the disks and volumes to list: taken afresh for
 * each snapshot and released after it, so that disks added and removed
 * while the server runs come and go in the file.  What take gives stays
 * valid until its release.
 */
struct stats_source {
  void (*take) (void *arg, struct stats_listing *);
  void (*release) (void *arg, struct stats_listing *);
  void *arg;
};

/* The first snapshot is written at once.  NULL with errno set (and
 * logged) if the thread cannot start.
 */
struct stats_file *stats_file_start (const char *path, enum stats_format,
                                     uint64_t interval_ns,
                                     const struct stats_source *);

/* Writes a snapshot now, from any thread.  0 or -1 with errno set. */
int stats_file_write_now (struct stats_file *);

/* Joins the thread, writes the final snapshot, frees.  NULL is a no-op. */
void stats_file_stop (struct stats_file *);

/* The document stats_file_write_now writes, as a string to free(), for
 * tests and other outputs.  uptime_s is the "uptime" field.  NULL with
 * errno set.
 */
char *stats_file_render (struct queue **disks, size_t nr_disks,
                         struct linear **exports, size_t nr_exports,
                         double uptime_s);

#endif /* PLUGQ_STATS_FILE_H */
