/* plugq: the stats= counters as a Prometheus text exposition
 * (stats_prometheus.h; the mapping is in docs/stats-format.md).
 *
 * Families are tables of offsets into the snapshot structs, so that every
 * family is written the same way: HELP, TYPE, then one sample per disk
 * (and per op or cause).  The exposition format wants a family's samples
 * together, so all disks are snapshot first, then each family walks them.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "elevator/elevator.h"
#include "volume/linear.h"
#include "queue/queue.h"
#include "stats.h"
#include "stats_prometheus.h"

/* One disk's labels and counters, taken once per exposition. */
struct disk_view {
  const char *name;
  const char *backend;
  uint64_t size;
  const struct queue_config *cfg;   /* &cfg_copy */
  struct queue_config cfg_copy;
  struct queue_stats st;
};

/* Decimal places of a value's scale: counters are integers, times are
 * kept in microseconds (6) or nanoseconds (9) and shown in seconds.
 */
enum scale { SCALE_ONE = 0, SCALE_US = 6, SCALE_NS = 9 };

struct family {
  const char *name;
  const char *type;             /* counter, gauge */
  const char *help;
  size_t offset;                /* of a uint64_t in the struct walked */
  enum scale scale;
};

#define DISK(field) offsetof (struct queue_stats, field)
#define OP(field) offsetof (struct op_counters, field)

/* Per disk, from struct queue_stats. */
static const struct family disk_families[] = {
  { "plugq_flush_requests_total", "counter",
    "NBD FLUSH requests that reached the disk, directly or through a volume.",
    DISK (flushes), SCALE_ONE },
  { "plugq_backend_flushes_total", "counter",
    "Backend flushes issued (concurrent flushes share one).",
    DISK (backend_flushes), SCALE_ONE },
  { "plugq_fua_requests_total", "counter",
    "Writes, zeroes and trims that carried the FUA flag.",
    DISK (fua_requests), SCALE_ONE },
  { "plugq_plugs_total", "counter",
    "Times an idle queue was plugged by a first request.",
    DISK (plugs), SCALE_ONE },
  { "plugq_pieces_dispatched_total", "counter",
    "Queued pieces sent to the backend.",
    DISK (requests_dispatched), SCALE_ONE },
  { "plugq_full_waits_total", "counter",
    "Writers that waited because queue-bytes or queue-requests was reached.",
    DISK (full_waits), SCALE_ONE },
  { "plugq_waits_behind_stream_total", "counter",
    "Waiting writes held to merge behind a busy stream instead of going alone.",
    DISK (waits_behind_stream), SCALE_ONE },
  { "plugq_waiting_merged_total", "counter",
    "Pieces of waiting writes that went out in one operation with other requests.",
    DISK (waiting_merged), SCALE_ONE },
  { "plugq_bypassed_writes_total", "counter",
    "Writes that went to the backend around the queue (bypass=auto).",
    DISK (bypassed_writes), SCALE_ONE },
  { "plugq_reads_waited_total", "counter",
    "Reads that waited behind a busy stream of reads to go out merged.",
    DISK (reads_waited), SCALE_ONE },
  { "plugq_read_ahead_hits_total", "counter",
    "Reads answered from a read-ahead window without a backend read.",
    DISK (read_ahead_hits), SCALE_ONE },
  { "plugq_read_ahead_bytes_total", "counter",
    "Bytes read ahead of sequential streams of reads (read-ahead=).",
    DISK (read_ahead_bytes), SCALE_ONE },
  { "plugq_writes_held_total", "counter",
    "Write dispatches held back while reads competed (read-target).",
    DISK (writes_held), SCALE_ONE },
  { "plugq_latched_errors_total", "counter",
    "Errors that lost answered data (failed backend flushes), latched for FLUSH and FUA.",
    DISK (latched_errors), SCALE_ONE },
  { "plugq_writeback_retries_total", "counter",
    "Write-outs of answered data tried again after they failed.",
    DISK (writeback_retries), SCALE_ONE },
  { "plugq_read_modify_writes_total", "counter",
    "Write-outs of partial blocks of a direct=true disk, by read-modify-write.",
    DISK (read_modify_writes), SCALE_ONE },
  { "plugq_time_in_queue_seconds_total", "counter",
    "Sum over dispatched pieces of the time from arrival to backend completion.",
    DISK (time_in_queue_us), SCALE_US },
  { "plugq_queued_requests", "gauge",
    "Pieces waiting in the queue now, not yet dispatched.",
    DISK (queued_requests), SCALE_ONE },
  { "plugq_queued_bytes", "gauge",
    "Bytes the queued pieces cover now.",
    DISK (queued_bytes), SCALE_ONE },
  { "plugq_in_flight", "gauge",
    "Pieces in backend operations now in progress.",
    DISK (in_flight), SCALE_ONE },
  { "plugq_oldest_in_flight_seconds", "gauge",
    "Age of the oldest backend operation now in progress (0: none); a stalled backend keeps it growing.",
    DISK (oldest_in_flight_us), SCALE_US },
};

/* Per disk and op (read, write, zero, trim), from struct op_counters. */
static const struct family op_families[] = {
  { "plugq_requests_total", "counter",
    "Client requests: reads when answered, writes, zeroes and trims when queued.",
    OP (requests), SCALE_ONE },
  { "plugq_request_bytes_total", "counter",
    "Bytes the client requests covered.",
    OP (request_bytes), SCALE_ONE },
  { "plugq_merges_total", "counter",
    "Pieces merged into a backend operation another piece started.",
    OP (merges), SCALE_ONE },
  { "plugq_backend_operations_total", "counter",
    "Backend operations issued after merging.",
    OP (backend_ops), SCALE_ONE },
  { "plugq_backend_bytes_total", "counter",
    "Bytes the backend operations covered.",
    OP (backend_bytes), SCALE_ONE },
  { "plugq_io_time_seconds_total", "counter",
    "Reads: arrival to answer; others: arrival in the queue to backend completion, summed.",
    OP (ticks_ms_x1000), SCALE_US },
  { "plugq_errors_total", "counter",
    "Failed reads and failed backend operations.",
    OP (errors), SCALE_ONE },
};

/* Per disk, the latency histograms of struct queue_stats. */
static const struct family histogram_families[] = {
  { "plugq_queue_time_seconds", "histogram",
    "Time from a piece's arrival to the start of its dispatch.",
    DISK (queue_time), SCALE_US },
  { "plugq_dispatch_time_seconds", "histogram",
    "Duration of each backend operation.",
    DISK (dispatch_time), SCALE_US },
  { "plugq_flush_time_seconds", "histogram",
    "Time each FLUSH waited for the drain and the backend flush.",
    DISK (flush_time), SCALE_US },
  { "plugq_read_time_seconds", "histogram",
    "Time from a read's arrival to its answer, waiting included.",
    DISK (read_time), SCALE_US },
};

#define FAMILIES(t) (sizeof (t) / sizeof (t)[0])

static uint64_t
field_at (const void *base, size_t offset)
{
  uint64_t v;

  memcpy (&v, (const char *) base + offset, sizeof v);
  return v;
}

/* v / 10^scale, exactly: no rounding through a double. */
static void
put_scaled (FILE *fp, uint64_t v, enum scale scale)
{
  uint64_t div = 1;
  int i;

  for (i = 0; i < (int) scale; i++)
    div *= 10;
  if (scale == SCALE_ONE)
    fprintf (fp, "%" PRIu64, v);
  else
    fprintf (fp, "%" PRIu64 ".%0*" PRIu64, v / div, (int) scale, v % div);
}

/* A label value: backslash, double quote and newline are escaped. */
static void
put_label_value (FILE *fp, const char *s)
{
  fputc ('"', fp);
  for (; *s; s++) {
    if (*s == '\\' || *s == '"')
      fprintf (fp, "\\%c", *s);
    else if (*s == '\n')
      fputs ("\\n", fp);
    else
      fputc (*s, fp);
  }
  fputc ('"', fp);
}

static void
put_header (FILE *fp, const char *name, const char *type, const char *help)
{
  fprintf (fp, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name{disk="D"[,KEY="VALUE"]} VALUE */
static void
put_sample (FILE *fp, const char *name, const char *disk,
            const char *key, const char *value, uint64_t v,
            enum scale scale)
{
  fprintf (fp, "%s{disk=", name);
  put_label_value (fp, disk);
  if (key) {
    fprintf (fp, ",%s=", key);
    put_label_value (fp, value);
  }
  fputs ("} ", fp);
  put_scaled (fp, v, scale);
  fputc ('\n', fp);
}

static void
put_disk_families (FILE *fp, const struct disk_view *dv, size_t n)
{
  size_t f, i;

  for (f = 0; f < FAMILIES (disk_families); f++) {
    const struct family *fam = &disk_families[f];

    put_header (fp, fam->name, fam->type, fam->help);
    for (i = 0; i < n; i++)
      put_sample (fp, fam->name, dv[i].name, NULL, NULL,
                  field_at (&dv[i].st, fam->offset), fam->scale);
  }
}

static void
put_op_families (FILE *fp, const struct disk_view *dv, size_t n)
{
  size_t f, i;
  int op;

  for (f = 0; f < FAMILIES (op_families); f++) {
    const struct family *fam = &op_families[f];

    put_header (fp, fam->name, fam->type, fam->help);
    for (i = 0; i < n; i++)
      for (op = 0; op < OP_KINDS; op++)
        put_sample (fp, fam->name, dv[i].name, "op", op_kind_names[op],
                    field_at (&dv[i].st.op[op], fam->offset), fam->scale);
  }
}

static void
put_unplugs (FILE *fp, const struct disk_view *dv, size_t n)
{
  const char *name = "plugq_unplugs_total";
  size_t i;
  int c;

  put_header (fp, name, "counter",
              "Unplugs of a plugged queue, by cause.");
  for (i = 0; i < n; i++)
    for (c = 0; c < UNPLUG_CAUSES; c++)
      put_sample (fp, name, dv[i].name, "cause", unplug_cause_names[c],
                  dv[i].st.unplugs[c], SCALE_ONE);
}

/* Bucket i of struct latency_histogram counts samples under 2^i us (and
 * at least 2^(i-1)); the last one has no upper bound.  Prometheus buckets
 * are cumulative, so bucket i becomes le=2^i us with the sum of buckets
 * 0..i, and the last becomes le="+Inf", which equals the count.
 */
static void
put_histogram (FILE *fp, const char *name, const char *disk,
               const struct latency_histogram *h)
{
  uint64_t cumulative = 0;
  size_t i;

  for (i = 0; i < LATENCY_BUCKETS; i++) {
    cumulative += h->bucket[i];
    fprintf (fp, "%s_bucket{disk=", name);
    put_label_value (fp, disk);
    fputs (",le=\"", fp);
    if (i + 1 < LATENCY_BUCKETS)
      put_scaled (fp, UINT64_C (1) << i, SCALE_US);
    else
      fputs ("+Inf", fp);
    fprintf (fp, "\"} %" PRIu64 "\n", cumulative);
  }
  fprintf (fp, "%s_sum{disk=", name);
  put_label_value (fp, disk);
  fputs ("} ", fp);
  put_scaled (fp, h->total_us, SCALE_US);
  fprintf (fp, "\n%s_count{disk=", name);
  put_label_value (fp, disk);
  fprintf (fp, "} %" PRIu64 "\n", h->count);
}

static void
put_histogram_families (FILE *fp, const struct disk_view *dv, size_t n)
{
  size_t f, i;

  for (f = 0; f < FAMILIES (histogram_families); f++) {
    const struct family *fam = &histogram_families[f];

    put_header (fp, fam->name, fam->type, fam->help);
    for (i = 0; i < n; i++)
      put_histogram (fp, fam->name, dv[i].name,
                     (const struct latency_histogram *)
                     ((const char *) &dv[i].st + fam->offset));
  }
}

/* The settings in force: what the JSON has under "config". */
static void
put_config (FILE *fp, const struct disk_view *dv, size_t n)
{
  static const char *const names[] = {
    "plugq_unplug_delay_seconds", "plugq_unplug_threshold_requests",
    "plugq_max_merge_bytes", "plugq_queue_limit_bytes",
    "plugq_queue_limit_requests", "plugq_write_expire_seconds",
    "plugq_read_target_seconds",
  };
  static const char *const helps[] = {
    "The unplug timer (unplug-delay=).",
    "Queued requests that unplug at once (unplug-thresh=).",
    "Largest merged backend operation (max-merge=).",
    "Queued data before writers wait (queue-bytes=).",
    "Queued pieces before writers wait (queue-requests=).",
    "The deadline elevator's expiry (write-expire=).",
    "Reads' latency target in force while writes compete (read-target=; 0: off).",
  };
  size_t k, i;

  for (k = 0; k < FAMILIES (names); k++) {
    put_header (fp, names[k], "gauge", helps[k]);
    for (i = 0; i < n; i++) {
      const struct queue_config *c = dv[i].cfg;
      const uint64_t values[] = {
        c->unplug_delay_ns, c->unplug_thresh, c->max_merge,
        c->queue_bytes, c->queue_requests, c->write_expire_ns,
        dv[i].st.read_target_ns,
      };
      enum scale scale = k == 0 || k == 5 || k == 6 ? SCALE_NS : SCALE_ONE;

      put_sample (fp, names[k], dv[i].name, NULL, NULL, values[k], scale);
    }
  }
}

/* plugq_disk_info{disk,backend,elevator,ack} 1 and the disk sizes. */
static void
put_disk_info (FILE *fp, const struct disk_view *dv, size_t n)
{
  size_t i;

  put_header (fp, "plugq_disk_info", "gauge",
              "Always 1: the disk's backend, elevator and ack mode as labels.");
  for (i = 0; i < n; i++) {
    fputs ("plugq_disk_info{disk=", fp);
    put_label_value (fp, dv[i].name);
    fputs (",backend=", fp);
    put_label_value (fp, dv[i].backend);
    fputs (",elevator=", fp);
    put_label_value (fp, dv[i].cfg->elevator ? dv[i].cfg->elevator->name : "");
    fputs (",ack=", fp);
    put_label_value (fp, dv[i].cfg->ack == ACK_QUEUED ? "queued" : "dispatched");
    fputs ("} 1\n", fp);
  }
  put_header (fp, "plugq_disk_size_bytes", "gauge", "Size of the disk.");
  for (i = 0; i < n; i++)
    put_sample (fp, "plugq_disk_size_bytes", dv[i].name, NULL, NULL,
                dv[i].size, SCALE_ONE);
}

static void
put_volumes (FILE *fp, struct linear **exports, size_t nr_exports)
{
  size_t i;

  put_header (fp, "plugq_volume_size_bytes", "gauge",
              "Size of a linear= volume (its counters are its member disks').");
  for (i = 0; i < nr_exports; i++) {
    if (!exports[i]->is_volume)
      continue;
    fputs ("plugq_volume_size_bytes{volume=", fp);
    put_label_value (fp, exports[i]->name);
    fprintf (fp, "} %" PRIu64 "\n", exports[i]->size);
  }
}

static void
take_views (struct disk_view *dv, struct queue **disks, size_t n)
{
  size_t i;

  for (i = 0; i < n; i++) {
    const struct backend *b = queue_backend (disks[i]);

    dv[i].name = queue_name (disks[i]);
    dv[i].backend = b->description ? b->description : b->ops->kind;
    dv[i].size = b->size;
    queue_config_snapshot (disks[i], &dv[i].cfg_copy); /* set changes it */
    dv[i].cfg = &dv[i].cfg_copy;
    queue_stats_snapshot (disks[i], &dv[i].st);
  }
}

char *
stats_prometheus_render (struct queue **disks, size_t nr_disks,
                         struct linear **exports, size_t nr_exports,
                         double uptime_s)
{
  struct disk_view *dv = calloc (nr_disks ? nr_disks : 1, sizeof *dv);
  char *text = NULL;
  size_t len;
  FILE *fp;
  int failed;

  if (dv == NULL)
    return NULL;
  fp = open_memstream (&text, &len);
  if (fp == NULL) {
    free (dv);
    return NULL;
  }
  take_views (dv, disks, nr_disks);
  put_header (fp, "plugq_uptime_seconds", "gauge",
              "Seconds since the server started serving.");
  fprintf (fp, "plugq_uptime_seconds %.6f\n", uptime_s);
  put_disk_info (fp, dv, nr_disks);
  put_config (fp, dv, nr_disks);
  put_op_families (fp, dv, nr_disks);
  put_disk_families (fp, dv, nr_disks);
  put_unplugs (fp, dv, nr_disks);
  put_histogram_families (fp, dv, nr_disks);
  put_volumes (fp, exports, nr_exports);
  free (dv);

  failed = ferror (fp);
  if (fclose (fp) != 0 || failed) {
    free (text);
    errno = ENOMEM;
    return NULL;
  }
  return text;
}
