/* plugq: the stats= file writer and its JSON document (formats:
 * docs/stats-format.md; the Prometheus one is stats_prometheus.c).
 */
#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

#include <jansson.h>

#include "backends/backend.h"
#include "common/clock.h"
#include "elevator/elevator.h"
#include "common/engine_thread.h"
#include "volume/linear.h"
#include "common/lock.h"
#include "common/log.h"
#include "common/minmax.h"
#include "common/replace_file.h"
#include "queue/queue.h"
#include "stats.h"
#include "stats_file.h"
#include "stats_prometheus.h"

struct stats_file {
  char *path;
  enum stats_format format;
  uint64_t interval_ns;
  struct stats_source source;
  uint64_t start_ns;            /* CLOCK_MONOTONIC, for "uptime" */

  pthread_t thread;
  struct lock lock;             /* protects stopping */
  pthread_cond_t wake;          /* CLOCK_MONOTONIC */
  bool stopping;

  struct lock write_lock;       /* one snapshot written at a time */
  bool failing;                 /* last write failed: log only changes */
};

/* Wall-clock time of a snapshot, for readers matching it to logs. */
static double
realtime_s (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_REALTIME, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---------------------------------------------------------------- JSON */

/* Counters are unsigned; JSON integers in jansson are signed 64 bit. */
static json_t *
num (uint64_t v)
{
  return json_integer ((json_int_t) MIN (v, (uint64_t) INT64_MAX));
}

/* Adds key: value, taking the reference; a NULL value (out of memory)
 * fails the whole document.
 */
static int
set (json_t *obj, const char *key, json_t *value)
{
  return value == NULL ? -1 : json_object_set_new (obj, key, value);
}

static json_t *
op_json (const struct op_counters *op)
{
  json_t *o = json_object ();

  if (o == NULL
      || set (o, "requests", num (op->requests)) == -1
      || set (o, "bytes", num (op->request_bytes)) == -1
      || set (o, "merges", num (op->merges)) == -1
      || set (o, "backend_ops", num (op->backend_ops)) == -1
      || set (o, "backend_bytes", num (op->backend_bytes)) == -1
      || set (o, "ticks_us", num (op->ticks_ms_x1000)) == -1
      || set (o, "errors", num (op->errors)) == -1) {
    json_decref (o);
    return NULL;
  }
  return o;
}

static json_t *
histogram_json (const struct latency_histogram *h)
{
  json_t *o = json_object ();
  json_t *buckets = json_array ();
  size_t i;

  if (o == NULL || buckets == NULL)
    goto fail;
  for (i = 0; i < LATENCY_BUCKETS; i++)
    if (json_array_append_new (buckets, num (h->bucket[i])) == -1)
      goto fail;
  if (set (o, "count", num (h->count)) == -1
      || set (o, "total", num (h->total_us)) == -1)
    goto fail;
  /* json_object_set_new takes the reference even when it fails. */
  if (json_object_set_new (o, "buckets", buckets) == -1) {
    json_decref (o);
    return NULL;
  }
  return o;

 fail:
  json_decref (buckets);
  json_decref (o);
  return NULL;
}

/* read-target= as configured: auto, off, or a delay. */
static const char *
read_target_mode (const struct queue_config *qc)
{
  return qc->read_target_ns == READ_TARGET_AUTO ? "auto"
    : qc->read_target_ns == 0 ? "off" : "fixed";
}

/* The settings in force; read_target_us is the target now (measured,
 * with read-target=auto).
 */
static json_t *
config_json (const struct queue_config *qc, const struct queue_stats *st)
{
  json_t *o = json_object ();
  const char *elevator = qc->elevator ? qc->elevator->name : "";

  if (o == NULL
      || set (o, "elevator", json_string (elevator)) == -1
      || set (o, "ack", json_string (qc->ack == ACK_QUEUED
                                     ? "queued" : "dispatched")) == -1
      || set (o, "unplug_delay_us", num (qc->unplug_delay_ns / 1000)) == -1
      || set (o, "unplug_thresh", num (qc->unplug_thresh)) == -1
      || set (o, "max_merge", num (qc->max_merge)) == -1
      || set (o, "queue_bytes", num (qc->queue_bytes)) == -1
      || set (o, "queue_requests", num (qc->queue_requests)) == -1
      || set (o, "write_expire_us", num (qc->write_expire_ns / 1000)) == -1
      || set (o, "read_target", json_string (read_target_mode (qc))) == -1
      || set (o, "read_target_us", num (st->read_target_ns / 1000)) == -1
      || set (o, "read_ahead", num (qc->read_ahead)) == -1
      || set (o, "bypass", json_string (qc->bypass ? "auto" : "never")) == -1) {
    json_decref (o);
    return NULL;
  }
  return o;
}

static json_t *
unplugs_json (const struct queue_stats *st)
{
  json_t *o = json_object ();
  size_t i;

  if (o == NULL)
    return NULL;
  for (i = 0; i < UNPLUG_CAUSES; i++)
    if (set (o, unplug_cause_names[i], num (st->unplugs[i])) == -1) {
      json_decref (o);
      return NULL;
    }
  return o;
}

static json_t *
flush_json (const struct queue_stats *st)
{
  json_t *o = json_object ();

  if (o == NULL
      || set (o, "requests", num (st->flushes)) == -1
      || set (o, "backend_flushes", num (st->backend_flushes)) == -1) {
    json_decref (o);
    return NULL;
  }
  return o;
}

static json_t *
disk_json (struct queue *q)
{
  const struct backend *b = queue_backend (q);
  struct queue_stats st;
  struct queue_config qc;
  json_t *o = json_object ();
  size_t i;

  queue_stats_snapshot (q, &st);
  queue_config_snapshot (q, &qc);   /* set may change it meanwhile */
  if (o == NULL
      || set (o, "name", json_string (queue_name (q))) == -1
      || set (o, "backend", json_string (b->description
                                         ? b->description
                                         : b->ops->kind)) == -1
      || set (o, "size", num (b->size)) == -1
      || set (o, "config", config_json (&qc, &st)) == -1)
    goto fail;
  for (i = 0; i < OP_KINDS; i++)
    if (set (o, op_kind_names[i], op_json (&st.op[i])) == -1)
      goto fail;
  if (set (o, "flush", flush_json (&st)) == -1
      || set (o, "fua_requests", num (st.fua_requests)) == -1
      || set (o, "plugs", num (st.plugs)) == -1
      || set (o, "unplugs", unplugs_json (&st)) == -1
      || set (o, "pieces_dispatched", num (st.requests_dispatched)) == -1
      || set (o, "full_waits", num (st.full_waits)) == -1
      || set (o, "waits_behind_stream", num (st.waits_behind_stream)) == -1
      || set (o, "waiting_merged", num (st.waiting_merged)) == -1
      || set (o, "latched_errors", num (st.latched_errors)) == -1
      || set (o, "writeback_retries", num (st.writeback_retries)) == -1
      || set (o, "read_modify_writes", num (st.read_modify_writes)) == -1
      || set (o, "bypassed_writes", num (st.bypassed_writes)) == -1
      || set (o, "reads_waited", num (st.reads_waited)) == -1
      || set (o, "read_ahead_hits", num (st.read_ahead_hits)) == -1
      || set (o, "read_ahead_bytes", num (st.read_ahead_bytes)) == -1
      || set (o, "writes_held", num (st.writes_held)) == -1
      || set (o, "queued_requests", num (st.queued_requests)) == -1
      || set (o, "queued_bytes", num (st.queued_bytes)) == -1
      || set (o, "in_flight", num (st.in_flight)) == -1
      || set (o, "oldest_in_flight_us", num (st.oldest_in_flight_us)) == -1
      || set (o, "time_in_queue_us", num (st.time_in_queue_us)) == -1
      || set (o, "queue_time_us", histogram_json (&st.queue_time)) == -1
      || set (o, "dispatch_time_us",
              histogram_json (&st.dispatch_time)) == -1
      || set (o, "flush_time_us", histogram_json (&st.flush_time)) == -1
      || set (o, "read_time_us", histogram_json (&st.read_time)) == -1)
    goto fail;
  return o;

 fail:
  json_decref (o);
  return NULL;
}

static json_t *
row_json (const struct linear_row *row)
{
  json_t *o = json_object ();

  if (o == NULL
      || set (o, "disk", json_string (queue_name (row->disk))) == -1
      || set (o, "start", num (row->start)) == -1
      || set (o, "offset", num (row->disk_offset)) == -1
      || set (o, "length", num (row->length)) == -1) {
    json_decref (o);
    return NULL;
  }
  return o;
}

static json_t *
volume_json (const struct linear *v)
{
  json_t *o = json_object ();
  json_t *members = json_array ();
  size_t i;

  if (o == NULL || members == NULL)
    goto fail;
  for (i = 0; i < v->nr_rows; i++) {
    json_t *row = row_json (&v->rows[i]);

    if (row == NULL || json_array_append_new (members, row) == -1)
      goto fail;
  }
  if (set (o, "name", json_string (v->name)) == -1
      || set (o, "size", num (v->size)) == -1)
    goto fail;
  if (json_object_set_new (o, "members", members) == -1) {
    json_decref (o);
    return NULL;
  }
  return o;

 fail:
  json_decref (members);
  json_decref (o);
  return NULL;
}

static json_t *
document (struct queue **disks, size_t nr_disks,
          struct linear **exports, size_t nr_exports, double uptime_s)
{
  json_t *root = json_object ();
  json_t *da = json_array ();
  json_t *va = json_array ();
  size_t i;

  if (root == NULL || da == NULL || va == NULL)
    goto fail;
  for (i = 0; i < nr_disks; i++) {
    json_t *d = disk_json (disks[i]);

    if (d == NULL || json_array_append_new (da, d) == -1)
      goto fail;
  }
  for (i = 0; i < nr_exports; i++) {
    json_t *v;

    if (!exports[i]->is_volume)
      continue;
    v = volume_json (exports[i]);
    if (v == NULL || json_array_append_new (va, v) == -1)
      goto fail;
  }
  if (set (root, "plugq_stats_version", num (STATS_FILE_VERSION)) == -1
      || set (root, "timestamp",
              json_real (realtime_s ())) == -1
      || set (root, "uptime", json_real (uptime_s)) == -1)
    goto fail;
  if (json_object_set_new (root, "disks", da) == -1) {
    da = NULL;
    goto fail;
  }
  if (json_object_set_new (root, "volumes", va) == -1) {
    json_decref (root);
    return NULL;
  }
  return root;

 fail:
  json_decref (va);
  json_decref (da);
  json_decref (root);
  return NULL;
}

char *
stats_file_render (struct queue **disks, size_t nr_disks,
                   struct linear **exports, size_t nr_exports,
                   double uptime_s)
{
  json_t *root = document (disks, nr_disks, exports, nr_exports, uptime_s);
  char *s;

  if (root == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  /* 16 digits: microseconds in a Unix timestamp, and 0.1 stays 0.1. */
  s = json_dumps (root, JSON_PRESERVE_ORDER | JSON_REAL_PRECISION (16));
  json_decref (root);
  if (s == NULL)
    errno = ENOMEM;
  return s;
}

/* ---------------------------------------------------------------- file */

/* The document, then tail, replace PATH whole (common/replace_file.h:
 * readers never see a half-written file, and nothing another user put in
 * the directory is followed, opened or handed over).  Returns the failing
 * step in *what.  Under write_lock, so that snapshots replace one another
 * in order.
 */
static int
replace_snapshot (struct stats_file *sf, const char *text, const char *tail,
                  const char **what)
{
  const struct iovec parts[] = {
    { .iov_base = (void *) text, .iov_len = strlen (text) },
    { .iov_base = (void *) tail, .iov_len = strlen (tail) },
  };

  lock_assert_held (&sf->write_lock);
  return replace_file (sf->path, 0644, parts, 2, what);
}

/* The disks and volumes in service now. */
static char *
render (const struct stats_file *sf, double uptime)
{
  struct stats_listing l;
  char *text;

  sf->source.take (sf->source.arg, &l);
  if (sf->format == STATS_FORMAT_PROMETHEUS)
    text = stats_prometheus_render (l.disks, l.nr_disks, l.exports,
                                    l.nr_exports, uptime);
  else
    text = stats_file_render (l.disks, l.nr_disks, l.exports, l.nr_exports,
                              uptime);
  sf->source.release (sf->source.arg, &l);
  return text;
}

int
stats_file_write_now (struct stats_file *sf)
{
  double uptime = (monotonic_ns () - sf->start_ns) / 1e9;
  const char *what = "render";
  char *text;
  int r, saved;

  lock_acquire (&sf->write_lock);
  text = render (sf, uptime);
  /* The JSON document is one line without its newline; the exposition
   * ends in one.
   */
  r = text ? replace_snapshot (sf, text,
                               sf->format == STATS_FORMAT_JSON ? "\n" : "",
                               &what) : -1;
  saved = errno;
  free (text);

  /* Every interval would repeat the same message: log changes only. */
  if (r == -1 && !sf->failing)
    log_error ("stats=%s: %s: %s (will retry every interval)",
               sf->path, what, strerror (saved));
  else if (r == 0 && sf->failing)
    log_error ("stats=%s: writing again", sf->path);
  sf->failing = r == -1;
  lock_release (&sf->write_lock);
  errno = saved;
  return r;
}

/* Drops sf->lock while it writes each snapshot. */
static void *
writer_thread (void *arg)
{
  struct stats_file *sf = arg;
  uint64_t next_ns = monotonic_ns ();

  lock_acquire (&sf->lock);
  while (!sf->stopping) {
    uint64_t now;

    lock_release (&sf->lock);
    stats_file_write_now (sf);
    lock_acquire (&sf->lock);

    /* Fixed ticks from the start, so writes do not drift; after a long
     * stall, start counting again from now.
     */
    next_ns += sf->interval_ns;
    now = monotonic_ns ();
    if (next_ns < now)
      next_ns = now + sf->interval_ns;
    while (!sf->stopping
           && lock_wait_until (&sf->wake, &sf->lock, next_ns) == 0)
      ;
  }
  lock_release (&sf->lock);
  return NULL;
}

static void
free_stats_file (struct stats_file *sf)
{
  free (sf->path);
  free (sf);
}

struct stats_file *
stats_file_start (const char *path, enum stats_format format,
                  uint64_t interval_ns, const struct stats_source *source)
{
  struct stats_file *sf;
  int err;

  sf = calloc (1, sizeof *sf);
  if (sf == NULL)
    goto nomem;
  sf->path = strdup (path);
  if (sf->path == NULL) {
    free_stats_file (sf);
    goto nomem;
  }
  sf->format = format;
  sf->interval_ns = interval_ns > 0 ? interval_ns : 1000000000;
  sf->source = *source;
  sf->start_ns = monotonic_ns ();

  lock_init (&sf->lock);
  lock_init (&sf->write_lock);
  cond_init_monotonic (&sf->wake);

  if (engine_thread_create (&sf->thread, "pq-stats", writer_thread, sf) == -1) {
    err = errno;
    log_error ("stats=%s: cannot start the writer thread: %m", path);
    pthread_cond_destroy (&sf->wake);
    lock_destroy (&sf->write_lock);
    lock_destroy (&sf->lock);
    free_stats_file (sf);
    errno = err;
    return NULL;
  }
  return sf;

 nomem:
  log_error ("stats=%s: out of memory", path);
  errno = ENOMEM;
  return NULL;
}

void
stats_file_stop (struct stats_file *sf)
{
  if (sf == NULL)
    return;
  lock_acquire (&sf->lock);
  sf->stopping = true;
  pthread_cond_signal (&sf->wake);
  lock_release (&sf->lock);
  pthread_join (sf->thread, NULL);

  stats_file_write_now (sf);

  pthread_cond_destroy (&sf->wake);
  lock_destroy (&sf->write_lock);
  lock_destroy (&sf->lock);
  free_stats_file (sf);
}
