/* plugq: the queue against a flat-array model of the disk.
 *
 * Random sequences of write, zero, trim, read, extents, flush and FUA go
 * through a queue and into the model (model.h); every read, every FLUSH,
 * every FUA and the final drain are checked.  Each (elevator, ack mode)
 * pair runs many seeds, and each seed picks its own queue knobs, disk
 * size and backend properties, so the seeds sweep the configurations too.
 * A quarter of the seeds run on a backend that fails now and then
 * (model.h, fault mode).  Then a few hand-written sequences for the
 * classic ordering traps, among them FUA writes cut while they wait in
 * the queue (issue 39); a multi-threaded run where clients in disjoint
 * regions share one queue, and one where eight clients write interleaved
 * stripes of one disk on an asynchronous backend, so that waiting writes
 * continue each other's writes in flight and are held behind the busy
 * stream (queue.c, behind_busy_stream): every such group must show held
 * and merged waiting writes in the queue's counters.  Then every seed in
 * fault mode, with one client and with four on two sessions, each group
 * showing failed requests, failed FLUSHes and FLUSHes that succeeded
 * after; and the errseq rule's cases, with a failing backend flush held
 * at the gate while a second request arrives.
 *
 * Environment:
 *   PLUGQ_MODEL_SEEDS=N      seeds in all, shared out among the four
 *                            (elevator, ack) pairs, and scaling the
 *                            fault groups (default 160: about 35 s in
 *                            all under AddressSanitizer)
 *   PLUGQ_MODEL_FIRST_SEED=N first seed (default 0)
 *   PLUGQ_MODEL_OPS=N        ops per seed, and per client of the
 *                            threaded runs (default 300)
 *   PLUGQ_MODEL_STRIPE_SEEDS=N  seeds per striped group (default 2)
 *   PLUGQ_MODEL_SEED=N       replay seed N only (all pairs, or the one in
 *                            PLUGQ_MODEL_GROUP, e.g. "noop/dispatched")
 *   PLUGQ_MODEL_FAULTS=L     with a replay: fault level L (1-4) whatever
 *                            the seed chose, as the fault groups do
 *   PLUGQ_MODEL_SHRINK=1     with a replay that fails: cut the ops down
 *                            to a short sequence that still fails
 *   PLUGQ_MODEL_VERBOSE=1    print every op, and every message of the
 *                            engine (else only its last few, on failure)
 *   PLUGQ_MODEL_INPUT=FILE   replay a fuzz_queue input (a crash file)
 *   PLUGQ_MODEL_TIMEOUT=S    abort when no op completes for S seconds
 *                            (default 60): a hang is a failure too
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "elevator/elevator.h"
#include "common/log.h"
#include "common/minmax.h"
#include "fixtures.h"
#include "model.h"
#include "queue/queue.h"
#include "queue/session.h"
#include "tap.h"

#define KiB (UINT64_C (1024))
#define MiB (KiB * 1024)
#define US (UINT64_C (1000))
#define SEC (UINT64_C (1000000000))

#define BATCH 20                /* seeds per TAP line */
#define THREAD_LANES 4
#define THREAD_SEEDS 4          /* per (elevator, ack) pair */
#define REPORT_OPS 40

struct group {
  const char *name;
  const struct elevator_ops *elevator;
  enum ack_mode ack;
};

static const struct group groups[] = {
  { "deadline/queued", &elevator_deadline, ACK_QUEUED },
  { "deadline/dispatched", &elevator_deadline, ACK_DISPATCHED },
  { "noop/queued", &elevator_noop, ACK_QUEUED },
  { "noop/dispatched", &elevator_noop, ACK_DISPATCHED },
};
#define NR_GROUPS (sizeof groups / sizeof groups[0])

static struct {
  uint64_t seeds, first_seed, ops, stripe_seeds;
  bool verbose, shrink;
  unsigned timeout;
  unsigned faults;              /* replays: this fault level, 0: chosen */
} opt;

static uint64_t
env_u64 (const char *name, uint64_t dflt)
{
  const char *s = getenv (name);

  return s && *s ? strtoull (s, NULL, 0) : dflt;
}

/* ------------------------------------------------------------ engine log */

/* The engine's error messages: a backend that fails on purpose makes
 * hundreds, so only the last ENGINE_LINES of the run at hand are kept
 * and printed with its failure (every one with PLUGQ_MODEL_VERBOSE=1).
 */
#define ENGINE_LINES 8

static struct {
  pthread_mutex_t lock;
  char line[ENGINE_LINES][200];
  unsigned next, count;
} engine_log = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void
engine_error (const char *msg)
{
  pthread_mutex_lock (&engine_log.lock);
  snprintf (engine_log.line[engine_log.next], sizeof engine_log.line[0],
            "%s", msg);
  engine_log.next = (engine_log.next + 1) % ENGINE_LINES;
  engine_log.count++;
  if (opt.verbose)
    printf ("# engine: %s\n", msg);
  pthread_mutex_unlock (&engine_log.lock);
}

static void
engine_log_clear (void)
{
  pthread_mutex_lock (&engine_log.lock);
  engine_log.next = engine_log.count = 0;
  pthread_mutex_unlock (&engine_log.lock);
}

/* After a failure: what the engine said last. */
static void
engine_log_print (void)
{
  unsigned n;

  pthread_mutex_lock (&engine_log.lock);
  n = MIN (engine_log.count, (unsigned) ENGINE_LINES);
  if (n)
    printf ("#   the engine's last %u of %u messages:\n", n,
            engine_log.count);
  for (unsigned i = 0; i < n; i++)
    printf ("#     %s\n", engine_log.line[(engine_log.next + ENGINE_LINES
                                             - n + i) % ENGINE_LINES]);
  pthread_mutex_unlock (&engine_log.lock);
}

/* ------------------------------------------------------------ watchdog */

/* A queue that deadlocks never returns; say where it stuck, then abort
 * so the test fails instead of timing out silently.
 */
static pthread_mutex_t watch_lock = PTHREAD_MUTEX_INITIALIZER;
static char watch_what[256];

__attribute__ ((format (printf, 1, 2)))
static void
watch (const char *fmt, ...)
{
  va_list ap;

  pthread_mutex_lock (&watch_lock);
  va_start (ap, fmt);
  vsnprintf (watch_what, sizeof watch_what, fmt, ap);
  va_end (ap);
  pthread_mutex_unlock (&watch_lock);
  engine_log_clear ();          /* a new run */
}

static void *
watchdog (void *arg)
{
  uint64_t last = UINT64_MAX;
  unsigned idle = 0;

  for (;;) {
    uint64_t now;

    sleep (1);
    now = atomic_load (&harness_progress);
    idle = now == last ? idle + 1 : 0;
    last = now;
    if (idle >= opt.timeout) {
      pthread_mutex_lock (&watch_lock);
      printf ("# watchdog: no op finished for %u s in %s"
              " (replay it with PLUGQ_MODEL_VERBOSE=1 to see the op)\n",
              idle, watch_what);
      engine_log_print ();
      fflush (stdout);
      abort ();
    }
  }
  return NULL;
}

/* ------------------------------------------------------------ shrinking */

/* Same kind of failure, allowing for the queue's timing: a candidate
 * that passes once gets a second chance to fail.
 */
static bool
still_fails (const struct harness_params *p, const struct model_op *ops,
             size_t n, enum harness_fault kind)
{
  for (int attempt = 0; attempt < 2; attempt++)
    if (run_ops (p, ops, n, NULL).fault == kind)
      return true;
  return false;
}

/* Delta debugging over whole ops: drop ever smaller chunks while the
 * same fault still shows.  Returns the new length.
 */
static size_t
shrink_ops (const struct harness_params *p, struct model_op *ops, size_t n,
            enum harness_fault kind)
{
  struct model_op *cand = malloc (n * sizeof *cand);

  if (cand == NULL)
    return n;
  for (size_t chunk = n / 2; chunk >= 1; chunk /= 2) {
    for (size_t i = 0; i + chunk <= n;) {
      memcpy (cand, ops, i * sizeof *ops);
      memcpy (cand + i, ops + i + chunk, (n - i - chunk) * sizeof *ops);
      if (n > chunk && still_fails (p, cand, n - chunk, kind)) {
        n -= chunk;
        memcpy (ops, cand, n * sizeof *ops);
      }
      else
        i += chunk;
    }
  }
  free (cand);
  return n;
}

/* Replays the failing lane's ops up to the failure, shrinks them and
 * prints the result with how often it reproduces.
 */
static void
shrink_and_report (const struct harness_params *params,
                   const struct model_op *log, size_t n,
                   enum harness_fault kind)
{
  struct model_op *ops = malloc (n * sizeof *ops);
  struct harness_params quiet = *params, *p = &quiet;
  unsigned hits = 0;

  if (ops == NULL)
    return;
  quiet.verbose = false;        /* thousands of candidate runs */
  memcpy (ops, log, n * sizeof *ops);
  printf ("# shrinking %zu ops (%s fault)...\n", n,
          harness_fault_names[kind]);
  fflush (stdout);
  n = shrink_ops (p, ops, n, kind);
  for (int i = 0; i < 10; i++)
    hits += run_ops (p, ops, n, NULL).fault == kind;
  printf ("# shrunk to %zu ops, fails %u times in 10:\n", n, hits);
  run_ops (p, ops, n, stdout);
  free (ops);
}

/* ------------------------------------------------------------ seeds */

/* faults > 0: that fault level whatever the seed chose. */
static void
seed_params (const struct group *g, uint64_t seed, unsigned faults,
             struct harness_params *p, struct byte_source *src)
{
  /* Same seed, same knobs and ops in every pair: only the elevator and
   * the ack mode differ, which makes a failure easy to compare.
   */
  byte_source_seed (src, seed);
  harness_params_choose (p, src, g->elevator, g->ack);
  if (faults)
    p->backend.faults = faults;
  p->verbose = opt.verbose;
}

/* One seed, at fault level faults (0: as the seed chose); on failure
 * the report goes to stdout as TAP comments, and with shrink the failing
 * ops are cut down.  What the fault mode did goes to *tally.
 */
static bool
run_seed (const struct group *g, uint64_t seed, unsigned faults, bool shrink,
          struct harness_tally *tally)
{
  struct harness_params p;
  struct byte_source src;
  struct op_generator gen;
  struct harness *h;
  struct model_op op;
  enum harness_fault kind;
  size_t index, n;
  const struct model_op *log;
  bool ok;

  seed_params (g, seed, faults, &p, &src);
  watch ("%s seed %" PRIu64 " (PLUGQ_MODEL_FAULTS=%u)", g->name, seed,
         p.backend.faults);
  h = harness_new (&p);
  if (h == NULL)
    return false;
  harness_lane_generator (h, 0, &gen);
  for (uint64_t i = 0; i < opt.ops && !harness_failed (h); i++)
    if (!op_generator_next (&gen, &src, &op) || !harness_apply (h, 0, &op))
      break;
  ok = harness_finish (h);
  harness_tally (h, tally);
  if (!ok) {
    kind = harness_fault (h, NULL, &index);
    printf ("# %s seed %" PRIu64 " failed; replay: PLUGQ_MODEL_SEED=%"
            PRIu64 " PLUGQ_MODEL_GROUP=%s PLUGQ_MODEL_FAULTS=%u\n",
            g->name, seed, seed, g->name, p.backend.faults);
    harness_report (h, stdout, REPORT_OPS);
    engine_log_print ();
    log = harness_lane_ops (h, 0, &n);
    if (shrink && kind != FAULT_SETUP)
      shrink_and_report (&p, log, index == SIZE_MAX ? n : index + 1, kind);
  }
  fflush (stdout);
  harness_free (h);
  return ok;
}

/* One TAP line per BATCH seeds of one pair. */
static void
run_batches (const struct group *g)
{
  for (uint64_t b = 0; b < opt.seeds; b += BATCH) {
    uint64_t first = opt.first_seed + b;
    uint64_t last = first + MIN (opt.seeds - b, (uint64_t) BATCH);
    uint64_t failed = UINT64_MAX;
    double t0 = test_now_s ();

    /* The first failure ends the batch: its report is the useful one. */
    for (uint64_t s = first; s < last; s++) {
      struct harness_tally t;

      if (!run_seed (g, s, 0, false, &t)) {
        failed = s;
        break;
      }
    }
    if (failed != UINT64_MAX)
      tap_ok (false, "%s: seeds %" PRIu64 "..%" PRIu64 ", %" PRIu64
              " ops each: seed %" PRIu64 " failed", g->name, first,
              last - 1, opt.ops, failed);
    else
      tap_ok (true, "%s: seeds %" PRIu64 "..%" PRIu64 ", %" PRIu64
              " ops each (%.1f s)", g->name, first, last - 1, opt.ops,
              test_now_s () - t0);
  }
}

/* ------------------------------------------------------------ scenarios */

/* The classic ordering traps, written out.  Offsets below zero count
 * from the end of the disk.
 */
struct step {
  enum model_op_kind kind;
  int64_t offset;
  uint64_t count;
  unsigned flags;
  /* MOP_FUA_CUT: the newer request that cuts the FUA write. */
  enum model_op_kind cut_kind;
  int64_t cut_offset;
  uint64_t cut_count;
};

struct scenario {
  const char *name;
  uint64_t queue_bytes;         /* 0: the default */
  struct step steps[24];
};

#define STEP(k, o, n, f) { .kind = (k), .offset = (o), .count = (n), .flags = (f) }
#define R(o, n) STEP (MOP_READ, (o), (n), 0)
#define W(o, n) STEP (MOP_WRITE, (o), (n), 0)
#define WF(o, n) STEP (MOP_WRITE, (o), (n), REQ_FUA)
#define Z(o, n, f) STEP (MOP_ZERO, (o), (n), (f))
#define T(o, n) STEP (MOP_TRIM, (o), (n), 0)
#define X(o, n) STEP (MOP_EXTENTS, (o), (n), 0)
#define F STEP (MOP_FLUSH, 0, 0, 0)
/* A FUA write of [o, o + n) held behind an older write in flight, cut
 * by a newer k (MOP_WRITE or MOP_ZERO) of [co, co + cn) in the queue.
 */
#define FC(o, n, k, co, cn) \
  { .kind = MOP_FUA_CUT, .offset = (o), .count = (n), .flags = REQ_FUA, \
    .cut_kind = (k), .cut_offset = (co), .cut_count = (cn) }
#define END STEP (MOP_KINDS, 0, 0, 0)

static const struct scenario scenarios[] = {
  { "newer overlapping write sorts first (W1[8,16) then W2[0,12))", 0,
    { W (8, 8), W (0, 12), R (0, 16), F, R (0, 16), END } },
  { "same start, shorter newer write", 0,
    { W (4096, 8192), W (4096, 100), R (4096, 8192), X (0, 16384), F,
      R (4096, 8192), END } },
  { "zero over a queued write, then extents", 0,
    { W (0, 65536), Z (16384, 16384, 0), X (0, 65536), R (0, 65536),
      Z (20000, 3, REQ_MAY_TRIM), X (0, 65536), F, R (0, 65536), END } },
  { "write after a queued trim", 0,
    { W (0, 65536), T (0, 65536), W (4096, 4096), R (0, 65536), F,
      R (4096, 4096), END } },
  { "trim over part of a write, write inside the trim", 0,
    { W (0, 32768), T (1000, 20000), W (5000, 7), R (0, 32768),
      X (0, 32768), F, R (0, 32768), END } },
  { "FUA over an older overlapping queued write", 0,
    { W (0, 131072), WF (32768, 4096), W (200000, 512), R (0, 131072), F,
      R (0, 131072), END } },
  { "FUA inside a queued zero and a queued trim", 0,
    { Z (0, 65536, REQ_MAY_TRIM), T (65536, 65536), WF (60000, 10000),
      X (0, 131072), F, R (0, 131072), END } },
  { "the last bytes of the disk", 0,
    { W (-1, 1), W (-4096, 4095), R (-4096, 4096), Z (-513, 513, 0),
      X (-8192, 8192), WF (-2, 2), F, R (-8192, 8192), END } },
  { "back merges, front merges and a split in the middle", 0,
    { W (0, 4096), W (4096, 4096), W (8192, 4096), W (-8192, 4096),
      W (-12288, 4096), W (-16384, 4096), W (6000, 100), R (0, 12288),
      F, R (0, 12288), R (-16384, 12288), END } },
  { "one big write cut by many small ones", 0,
    { W (0, 262144), W (1, 1), W (4095, 2), W (65536, 65536),
      Z (131071, 3, 0), T (200000, 1), W (262143, 1), R (0, 262144), F,
      R (0, 262144), END } },
  { "writes larger than queue-bytes (back-pressure)", 64 * KiB,
    { W (0, 262144), W (131072, 262144), W (65536, 1), R (0, 262144),
      R (131072, 262144),
      W (500000, 262144), R (393216, 262144), F, R (0, 262144), END } },
  { "zeroes with and without may_trim side by side", 0,
    { W (0, 65536), Z (0, 4096, REQ_MAY_TRIM), Z (4096, 4096, 0),
      Z (8192, 4096, REQ_MAY_TRIM), X (0, 65536), R (0, 65536), F,
      X (0, 65536), R (0, 65536), END } },
  /* Issue 39: its pieces went out with FUA and it was answered, while
   * the zero in its middle went out without; a power cut could leave
   * neither there.  A FLUSH after each leaves the queue empty for the
   * next, so that its older write is the one the gate holds.
   */
  { "a waiting FUA write cut in the middle by a zero, then by a write", 0,
    { FC (0, 12288, MOP_ZERO, 4096, 4096), F, R (0, 12288),
      FC (65536, 12288, MOP_WRITE, 69632, 4096), F, R (65536, 12288),
      FC (131072, 10000, MOP_WRITE, 133000, 100), F, R (131072, 10000),
      END } },
  { "a waiting FUA write cut at the front and at the back", 0,
    { FC (0, 12288, MOP_ZERO, 0, 4096), F,
      FC (65536, 12288, MOP_ZERO, 73728, 4096), F,
      FC (131072, 12288, MOP_WRITE, 131072, 4096), F,
      FC (196608, 12288, MOP_WRITE, 204800, 4096), F,
      R (0, 262144), END } },
};

#undef R
#undef W
#undef WF
#undef Z
#undef T
#undef X
#undef F
#undef FC
#undef END
#undef STEP

static size_t
scenario_ops (const struct scenario *sc, uint64_t size, struct model_op *ops)
{
  size_t n = 0;

  for (const struct step *s = sc->steps; s->kind != MOP_KINDS; s++, n++)
    ops[n] = (struct model_op) {
      .kind = s->kind, .flags = s->flags, .count = s->count,
      .offset = s->offset < 0 ? size + s->offset : (uint64_t) s->offset,
      .tag = n + 1, .cut_kind = s->cut_kind, .cut_count = s->cut_count,
      .cut_offset = s->cut_offset < 0 ? size + s->cut_offset
      : (uint64_t) s->cut_offset,
    };
  return n;
}

/* Long plugs keep every request queued until a trigger; short ones let
 * the timer race the requests, and an asynchronous backend completes
 * them out of order, with FUA or without (its batches carry FUA, as an
 * NBD backend's to a server with FUA).  Defaults otherwise, whole
 * memory disk.
 */
enum variant { LONG_PLUG, SHORT_PLUG, ASYNC_BACKEND, ASYNC_FUA, VARIANTS };

static const char *const variant_names[VARIANTS] = {
  "long plugs", "short plugs", "short plugs, async backend",
  "short plugs, async backend with FUA",
};

static void
scenario_params (const struct group *g, const struct scenario *sc,
                 enum variant v, struct harness_params *p)
{
  *p = (struct harness_params) { .disk_size = 1 * MiB, .lanes = 1,
                                 .verbose = opt.verbose };
  queue_config_defaults (&p->config);
  p->config.elevator = g->elevator;
  p->config.ack = g->ack;
  if (sc->queue_bytes)
    p->config.queue_bytes = sc->queue_bytes;
  p->config.unplug_thresh = v == LONG_PLUG ? 1000 : 4;
  p->config.unplug_delay_ns = v == LONG_PLUG && g->ack == ACK_QUEUED
    ? 1 * SEC : 100 * US;
  if (v == ASYNC_BACKEND || v == ASYNC_FUA)
    p->backend.async = 4;
  p->backend.fua = v == ASYNC_FUA;
}

static void
run_scenario (const struct scenario *sc)
{
  struct model_op ops[sizeof sc->steps / sizeof sc->steps[0]];
  unsigned failures = 0, runs = 0;
  double t0 = test_now_s ();

  for (size_t gi = 0; gi < NR_GROUPS; gi++)
    for (enum variant v = 0; v < VARIANTS; v++) {
      struct harness_params p;
      struct run_result r;
      size_t n;

      scenario_params (&groups[gi], sc, v, &p);
      n = scenario_ops (sc, p.disk_size, ops);
      watch ("scenario \"%s\" %s", sc->name, groups[gi].name);
      runs++;
      r = run_ops (&p, ops, n, stdout);
      /* Each fua-cut must have held its FUA write behind the older
       * write in flight, or it tested something else.
       */
      if (r.fault == FAULT_NONE && r.tally.fua_cuts_held < r.tally.fua_cuts)
        printf ("# only %" PRIu64 " of %" PRIu64 " fua-cuts had their FUA"
                " write wait behind the older write the gate held\n",
                r.tally.fua_cuts_held, r.tally.fua_cuts);
      if (r.fault != FAULT_NONE || r.tally.fua_cuts_held < r.tally.fua_cuts) {
        engine_log_print ();
        printf ("# ... in %s with %s\n", groups[gi].name, variant_names[v]);
        failures++;
      }
    }
  tap_ok (failures == 0, "scenario: %s (%u of %u configs failed, %.1f s)",
          sc->name, failures, runs, test_now_s () - t0);
}

/* ------------------------------------------------------------ threads */

/* FLUSH latency while other clients keep writing: reported, not
 * judged, because it depends on the machine's load.
 */
static uint64_t threaded_flush_ns_max;

/* p->lanes clients at once (run_threaded).  On failure the report names
 * the run as `what`.
 */
static struct run_result
run_lanes (const struct harness_params *p, const char *what, uint64_t seed)
{
  struct run_result r;

  watch ("%s seed %" PRIu64 " (fault level %u)", what, seed,
         p->backend.faults);
  r = run_threaded (p, seed, opt.ops, stdout);
  if (r.max_flush_ns > threaded_flush_ns_max)
    threaded_flush_ns_max = r.max_flush_ns;
  if (r.fault != FAULT_NONE) {
    printf ("# (that was %s seed %" PRIu64 ", fault level %u)\n", what,
            seed, p->backend.faults);
    engine_log_print ();
  }
  return r;
}

/* THREAD_LANES clients at once, each in its own region, so each one's
 * model stays exact while the queue interleaves them; at fault level
 * faults (0: as the seed chose) with `sessions` sessions (0: one each).
 */
static struct run_result
run_threaded_seed (const struct group *g, uint64_t seed, unsigned faults,
                   unsigned sessions)
{
  struct harness_params p;
  struct byte_source src;
  char what[96];

  seed_params (g, seed, faults, &p, &src);
  p.lanes = THREAD_LANES;
  p.sessions = sessions;
  snprintf (what, sizeof what, "threads %s%s", g->name,
            faults ? " with faults" : "");
  return run_lanes (&p, what, seed);
}

static void
run_threaded_group (const struct group *g)
{
  uint64_t first = opt.first_seed, last = first + THREAD_SEEDS;
  uint64_t failed = UINT64_MAX;
  double t0 = test_now_s ();

  threaded_flush_ns_max = 0;
  for (uint64_t s = first; s < last; s++)
    if (run_threaded_seed (g, s, 0, 0).fault != FAULT_NONE) {
      failed = s;
      break;
    }
  if (failed != UINT64_MAX)
    tap_ok (false, "threads: %s, %d clients x %" PRIu64 " ops, seeds %"
            PRIu64 "..%" PRIu64 ": seed %" PRIu64 " failed", g->name,
            THREAD_LANES, opt.ops, first, last - 1, failed);
  else
    tap_ok (true, "threads: %s, %d clients x %" PRIu64 " ops, seeds %"
            PRIu64 "..%" PRIu64 " (%.1f s, slowest FLUSH %.1f ms)",
            g->name, THREAD_LANES, opt.ops, first, last - 1,
            test_now_s () - t0, threaded_flush_ns_max / 1e6);
}

/* ------------------------------------------------------------ faults */

/* Every seed here has the fault mode (a quarter of the seeds above have
 * it by their own choice): the backend fails writes, zeroes and trims in
 * stretches and now and then a flush, at the seed's level
 * (backend_params.faults).  Reads must match the model exactly
 * throughout; a write, zero, trim, FLUSH or FUA may fail, and one that
 * succeeds must keep its promise; a FLUSH on any client covers what
 * every client was answered before it; the run ends with the backend
 * recovered and a FLUSH that succeeds by its second try, then an exact
 * drain.  One client, then THREAD_LANES clients on FAULT_SESSIONS
 * sessions (each with requests of two clients in flight at once).  Each
 * group must show failed requests, failed FLUSHes and FLUSHes that
 * succeeded after one had failed: the mode must be exercised, not only
 * on.  Per pair, two fifths as many seeds as above with one client, a
 * fifth with several (16 and 8 by default), and at least a seed at each
 * fault level with one client.
 */
#define FAULT_SESSIONS 2

static uint64_t
fault_seeds (void)
{
  return MAX (opt.seeds * 2 / 5, (uint64_t) HARNESS_FAULT_LEVELS);
}

static uint64_t
fault_thread_seeds (void)
{
  return MAX (opt.seeds / 5, (uint64_t) 2);
}

static unsigned
fault_level (uint64_t seed)
{
  return 1 + seed % HARNESS_FAULT_LEVELS;
}

static void
tally_add (struct harness_tally *sum, const struct harness_tally *t)
{
  sum->backend_failures += t->backend_failures;
  sum->requests_failed += t->requests_failed;
  sum->flushes_failed += t->flushes_failed;
  sum->flushes_after_failure += t->flushes_after_failure;
  sum->fua_cuts += t->fua_cuts;
  sum->fua_cuts_held += t->fua_cuts_held;
}

/* Whether the fault mode was exercised over a group's seeds; says what
 * was missing.
 */
static bool
faults_exercised (const struct harness_tally *t)
{
  if (t->requests_failed == 0)
    printf ("# no write, zero or trim failed\n");
  if (t->flushes_failed == 0)
    printf ("# no FLUSH failed\n");
  if (t->flushes_after_failure == 0)
    printf ("# no FLUSH succeeded after one had failed\n");
  return t->requests_failed > 0 && t->flushes_failed > 0
    && t->flushes_after_failure > 0;
}

/* One TAP line for a fault group: what failed, or the seed that did. */
static void
fault_group_report (const char *what, uint64_t first, uint64_t last,
                    uint64_t failed, const struct harness_tally *t,
                    double t0)
{
  if (failed != UINT64_MAX) {
    tap_ok (false, "%s, seeds %" PRIu64 "..%" PRIu64 ": seed %" PRIu64
            " failed", what, first, last - 1, failed);
    return;
  }
  tap_ok (faults_exercised (t), "%s, seeds %" PRIu64 "..%" PRIu64 ": %"
          PRIu64 " backend calls failed, %" PRIu64 " requests and %" PRIu64
          " FLUSHes failed, %" PRIu64 " FLUSHes succeeded after (%.1f s)",
          what, first, last - 1, t->backend_failures, t->requests_failed,
          t->flushes_failed, t->flushes_after_failure, test_now_s () - t0);
}

static void
run_fault_group (const struct group *g)
{
  uint64_t first = opt.first_seed, last = first + fault_seeds ();
  uint64_t failed = UINT64_MAX;
  struct harness_tally sum = { 0 };
  double t0 = test_now_s ();
  char what[96];

  for (uint64_t s = first; s < last; s++) {
    struct harness_tally t;

    if (!run_seed (g, s, fault_level (s), false, &t)) {
      failed = s;
      break;
    }
    tally_add (&sum, &t);
  }
  snprintf (what, sizeof what, "faults: %s, one client x %" PRIu64 " ops",
            g->name, opt.ops);
  fault_group_report (what, first, last, failed, &sum, t0);
}

static void
run_fault_threaded_group (const struct group *g)
{
  uint64_t first = opt.first_seed, last = first + fault_thread_seeds ();
  uint64_t failed = UINT64_MAX;
  struct harness_tally sum = { 0 };
  double t0 = test_now_s ();
  char what[128];

  for (uint64_t s = first; s < last; s++) {
    struct run_result r = run_threaded_seed (g, s, fault_level (s),
                                             FAULT_SESSIONS);

    if (r.fault != FAULT_NONE) {
      failed = s;
      break;
    }
    tally_add (&sum, &r.tally);
  }
  snprintf (what, sizeof what, "faults: %s, %d clients on %d sessions x %"
            PRIu64 " ops", g->name, THREAD_LANES, FAULT_SESSIONS, opt.ops);
  fault_group_report (what, first, last, failed, &sum, t0);
}

/* ------------------------------------------------------------ stripes */

/* STRIPE_LANES clients share the disk in stripes (harness_params.stripe)
 * and write their own mostly in ascending order, so that a lane's write
 * often continues another's still in flight, as clients writing one
 * interleaved stream do.  In every fourth row they read their stripes
 * instead, so that a lane's read continues another's and waits to go out
 * merged with it (odd seeds), or is answered from a read-ahead window
 * (even seeds), over the lanes' writes queued, in flight and arriving
 * (merge_reads_at_any_depth in model.c); the groups together must show
 * both (check_stripe_reads).  On an asynchronous backend a waiting writer's
 * piece there (ack=dispatched, FUA) is held while every slot of the
 * backend is taken (queue.c, behind_busy_stream) and goes
 * out merged: the random model test reaches that rule only here.  Each
 * (elevator, ack) pair runs with FUA carried by the backend's writes and
 * by flushes, with the backend's jitter and without, and once more
 * with FUA carried on a backend in fault mode, the clients two to a
 * session; each mode must show held and merged waiting writes over its
 * seeds.
 */
#define STRIPE_LANES 8

struct stripe_mode {
  bool fua_carried;             /* test_backend_set_fua */
  bool jitter;                  /* operations finish late and in any order */
  bool faults;                  /* fault_level (seed), two lanes a session */
};

static const struct stripe_mode stripe_modes[] = {
  { true, true, false }, { false, true, false }, { true, false, false },
  { false, false, false }, { true, true, true },
};
#define NR_STRIPE_MODES (sizeof stripe_modes / sizeof stripe_modes[0])

/* The seed's knobs and stripes, on the asynchronous backend the mode
 * says.
 */
static void
stripe_params (const struct group *g, const struct stripe_mode *m,
               uint64_t seed, struct harness_params *p)
{
  struct byte_source src;

  byte_source_seed (&src, seed);
  harness_params_choose_striped (p, &src, g->elevator, g->ack, STRIPE_LANES);
  p->backend.fua = m->fua_carried;
  p->backend.steady = !m->jitter;
  /* Odd seeds merge stream reads in chains; even ones read them ahead in
   * small windows, which the lanes' writes keep overlapping.
   */
  p->config.read_ahead = seed % 2 ? 0 : seed % 4 ? 16 * KiB : 64 * KiB;
  if (m->faults) {
    p->backend.faults = fault_level (seed);
    p->sessions = STRIPE_LANES / 2;
  }
  p->verbose = opt.verbose;
}

/* Stream reads merged over every striped group: with jitter some wait
 * in each mode, but how many is the threads' timing, so the check is on
 * the sum (check_stripe_reads).
 */
static uint64_t stripe_reads_waited, stripe_read_ahead_hits;

static void
run_striped_group (const struct group *g, const struct stripe_mode *m)
{
  uint64_t first = opt.first_seed, last = first + opt.stripe_seeds;
  uint64_t failed = UINT64_MAX, held = 0, merged = 0, reads_waited = 0;
  bool may_merge = false;
  double t0 = test_now_s ();
  char what[96];

  snprintf (what, sizeof what, "stripes: %s, FUA %s, %s%s", g->name,
            m->fua_carried ? "carried" : "by flush",
            m->jitter ? "jitter" : "steady", m->faults ? ", faults" : "");
  for (uint64_t s = first; s < last; s++) {
    struct harness_params p;
    struct run_result r;

    stripe_params (g, m, s, &p);
    /* unplug-thresh=1 never merges (queue.h). */
    may_merge |= p.config.unplug_thresh > 1;
    r = run_lanes (&p, what, s);
    if (r.fault != FAULT_NONE) {
      failed = s;
      break;
    }
    held += r.stats.waits_behind_stream;
    merged += r.stats.waiting_merged;
    reads_waited += r.stats.reads_waited;
    stripe_read_ahead_hits += r.stats.read_ahead_hits;
  }
  if (failed != UINT64_MAX) {
    tap_ok (false, "%s, %d clients x %" PRIu64 " ops, seeds %" PRIu64
            "..%" PRIu64 ": seed %" PRIu64 " failed", what, STRIPE_LANES,
            opt.ops, first, last - 1, failed);
    return;
  }
  if (held == 0)
    printf ("# no waiting write was held behind a busy stream: the lanes"
            " never reached behind_busy_stream's rule\n");
  else if (merged == 0 && may_merge)
    printf ("# no waiting write went out merged with another request\n");
  stripe_reads_waited += reads_waited;
  tap_ok (held > 0 && (merged > 0 || !may_merge),
          "%s, %d clients x %" PRIu64 " ops, seeds %" PRIu64 "..%" PRIu64
          ": %" PRIu64 " waiting writes held behind a busy stream, %" PRIu64
          " merged; %" PRIu64 " reads merged behind another lane's (%.1f s)",
          what, STRIPE_LANES, opt.ops, first, last - 1, held, merged,
          reads_waited, test_now_s () - t0);
}

static void
check_stripe_reads (void)
{
  tap_ok (stripe_reads_waited > 0 && stripe_read_ahead_hits > 0,
          "stripes: %" PRIu64 " stream reads waited behind another lane's"
          " on its way and went out in its chain, %" PRIu64 " were"
          " answered from read-ahead windows, every read checked against"
          " the model", stripe_reads_waited, stripe_read_ahead_hits);
}

/* ------------------------------------------------------------ error marks */

/* The errseq rule (queue_flush.c, issue 39): a failed backend flush
 * fails every FLUSH and FUA that a session had sent before the failure
 * was reported to that session, however many it has in flight; only
 * one sent after that may succeed, and every other session hears of the
 * failure on its next FLUSH.  The memory backend loses nothing when its
 * flush fails, so the model cannot see a FLUSH that succeeds over such
 * a failure; and a client's requests arrive in an order no harness can
 * observe.  So these cases hold the failing backend flush at the gate
 * until a second request has arrived, then let it fail.
 */
enum second_request {
  SECOND_FLUSH,                 /* a FLUSH of the same session */
  SECOND_FUA,                   /* a FUA write of the same session */
  SECOND_OTHER,                 /* a FLUSH of another session */
  SECOND_KINDS
};

static const char *const second_names[SECOND_KINDS] = {
  "a second FLUSH of the same connection",
  "a FUA write of the same connection",
  "a FLUSH of another connection",
};

struct mark_job {
  struct queue *q;
  struct session *s;
  bool fua_write;               /* else a FLUSH */
};

static int
mark_job_run (void *arg)
{
  struct mark_job *j = arg;

  if (j->fua_write)
    return test_write_fill (j->q, j->s, 'f', 4096, 64 * KiB, REQ_FUA);
  return queue_flush (j->q, j->s);
}

/* Whether the request started by second has arrived at the queue: it
 * took its session's error mark in the same hold of the queue lock.
 */
static bool
second_arrived (struct queue *q, enum second_request second)
{
  struct queue_stats st = test_stats (q);

  return second == SECOND_FUA ? st.fua_requests >= 1 : st.flushes >= 2;
}

/* A FLUSH through s, as it must be answered: ok, or failing with EIO. */
static bool
flush_answers (struct queue *q, struct session *s, bool ok,
               const char *what)
{
  int r, err;

  errno = 0;
  r = queue_flush (q, s);
  err = errno;
  if (ok ? r == 0 : r == -1 && err == EIO)
    return true;
  printf ("# %s returned %d (%s), expected %s\n", what, r,
          r ? strerror (err) : "success", ok ? "success" : "EIO");
  return false;
}

/* A thread's request answered as it must be: failing with EIO. */
static bool
failed_with_eio (struct test_thread *t, const char *what)
{
  if (!test_thread_wait (t)) {
    printf ("# %s was not answered within %d ms\n", what, TB_TIMEOUT_MS);
    return false;
  }
  if (t->result == -1 && t->err == EIO)
    return true;
  printf ("# %s returned %d (%s), expected EIO\n", what, t->result,
          t->result ? strerror (t->err) : "success");
  return false;
}

/* Session a's FLUSH waits on a backend flush that the gate holds and
 * that fails; second arrives meanwhile; then the gate opens.
 */
static bool
error_mark_case (unsigned async, enum second_request second)
{
  struct queue_config cfg = test_config (100 * US, 4);
  struct test_thread t1 = TEST_THREAD_INIT, t2 = TEST_THREAD_INIT;
  struct session *a = NULL, *b = NULL;
  struct mark_job j1, j2;
  struct test_rig r;
  bool ok;

  cfg.elevator = &elevator_deadline;
  ok = test_rig_one (&r, &cfg, 1 * MiB, async, 0)
    && (a = session_new ()) != NULL && (b = session_new ()) != NULL;
  j1 = (struct mark_job) { .q = r.d[0].q, .s = a };
  j2 = (struct mark_job) { .q = r.d[0].q, .s = second == SECOND_OTHER ? b : a,
                           .fua_write = second == SECOND_FUA };
  /* An answered write for the flushes to cover. */
  ok = ok && test_write_fill (r.d[0].q, a, 'w', 4096, 0, 0) == 0;
  if (ok) {
    test_backend_block (r.d[0].tb, TB_FLUSH);
    test_backend_fail (r.d[0].tb, TB_FLUSH, 1, EIO);
  }
  ok = ok && test_thread_start (&t1, mark_job_run, &j1) == 0
    && test_backend_wait_entered (r.d[0].tb, TB_FLUSH, 1)
    && test_thread_start (&t2, mark_job_run, &j2) == 0
    && TEST_WAIT_FOR (second_arrived (r.d[0].q, second));
  if (r.n)
    test_backend_release (r.d[0].tb, TB_FLUSH);
  ok = ok && failed_with_eio (&t1, "the FLUSH whose backend flush failed");
  /* It arrived before the failure was reported to its session. */
  ok = ok && failed_with_eio (&t2, second_names[second]);
  /* Told now: a FLUSH sent after the answers succeeds on either
   * session (b was told by the second request, or is told once now).
   */
  ok = ok && flush_answers (r.d[0].q, a, true, "a FLUSH sent after them");
  if (ok && second != SECOND_OTHER)
    ok = flush_answers (r.d[0].q, b, false, "another connection's first"
                        " FLUSH after the failure");
  ok = ok && flush_answers (r.d[0].q, b, true, "another connection's"
                            " FLUSH after it was told");
  test_rig_stop (&r);
  test_thread_join (&t1);
  test_thread_join (&t2);
  session_free (a);
  session_free (b);
  return ok;
}

static void
run_error_marks (void)
{
  for (enum second_request k = 0; k < SECOND_KINDS; k++) {
    double t0 = test_now_s ();
    bool ok = true;

    for (unsigned async = 0; async <= 4; async += 4) {
      watch ("error marks: %s, async %u", second_names[k], async);
      if (!error_mark_case (async, k)) {
        printf ("# ... on a%s backend\n", async ? "n asynchronous"
                : " synchronous");
        ok = false;
      }
    }
    tap_ok (ok, "error marks: a backend flush fails while %s waits: both"
            " fail, and only a FLUSH sent after succeeds (%.1f s)",
            second_names[k], test_now_s () - t0);
  }
}

/* ------------------------------------------------------------ replays */

static int
replay_input (const char *path)
{
  FILE *f = fopen (path, "rb");
  uint8_t *data = NULL;
  size_t size = 0, cap = 0, got;
  struct run_result r;

  if (f == NULL) {
    perror (path);
    return EXIT_FAILURE;
  }
  do {
    if (size == cap) {
      cap = cap ? cap * 2 : 4096;
      if ((data = realloc (data, cap)) == NULL) {
        perror ("realloc");
        return EXIT_FAILURE;
      }
    }
    got = fread (data + size, 1, cap - size, f);
    size += got;
  } while (got > 0);
  fclose (f);
  tap_plan (1);
  watch ("input %s", path);
  r = run_fuzz_input (data, size, SIZE_MAX, opt.verbose, stdout);
  tap_ok (r.fault == FAULT_NONE, "fuzz input %s (%zu bytes, %zu ops)", path,
          size, r.ops_applied);
  free (data);
  return tap_done ();
}

static int
replay_seed (uint64_t seed, const char *group)
{
  size_t n = 0;

  for (size_t gi = 0; gi < NR_GROUPS; gi++)
    n += group == NULL || strcmp (group, groups[gi].name) == 0;
  if (n == 0) {
    fprintf (stderr, "PLUGQ_MODEL_GROUP: no pair named %s\n", group);
    return EXIT_FAILURE;
  }
  tap_plan (n);
  for (size_t gi = 0; gi < NR_GROUPS; gi++) {
    const struct group *g = &groups[gi];
    struct harness_params p;
    struct harness_tally t;
    struct byte_source src;
    char cfg[512];

    if (group && strcmp (group, g->name) != 0)
      continue;
    seed_params (g, seed, opt.faults, &p, &src);
    harness_params_format (&p, cfg, sizeof cfg);
    printf ("# %s seed %" PRIu64 ": %s\n", g->name, seed, cfg);
    tap_ok (run_seed (g, seed, opt.faults, opt.shrink, &t),
            "%s seed %" PRIu64, g->name, seed);
  }
  return tap_done ();
}

int
main (void)
{
  pthread_t dog;
  const char *input = getenv ("PLUGQ_MODEL_INPUT");
  const char *seed = getenv ("PLUGQ_MODEL_SEED");
  size_t nr_scenarios = sizeof scenarios / sizeof scenarios[0];

  opt.seeds = (env_u64 ("PLUGQ_MODEL_SEEDS", 160) + NR_GROUPS - 1)
    / NR_GROUPS;
  opt.first_seed = env_u64 ("PLUGQ_MODEL_FIRST_SEED", 0);
  opt.ops = env_u64 ("PLUGQ_MODEL_OPS", 300);
  opt.stripe_seeds = env_u64 ("PLUGQ_MODEL_STRIPE_SEEDS", 2);
  opt.verbose = env_u64 ("PLUGQ_MODEL_VERBOSE", 0) != 0;
  opt.shrink = env_u64 ("PLUGQ_MODEL_SHRINK", 0) != 0;
  opt.timeout = env_u64 ("PLUGQ_MODEL_TIMEOUT", 60);
  opt.faults = env_u64 ("PLUGQ_MODEL_FAULTS", 0) % (HARNESS_FAULT_LEVELS + 1);
  if (opt.timeout == 0)
    opt.timeout = 1;
  if (pthread_create (&dog, NULL, watchdog, NULL) != 0) {
    perror ("pthread_create");
    return EXIT_FAILURE;
  }
  pthread_detach (dog);
  log_set_sink (&(struct log_sink) { .error = engine_error });

  if (input && *input)
    return replay_input (input);
  if (seed && *seed)
    return replay_seed (strtoull (seed, NULL, 0),
                        getenv ("PLUGQ_MODEL_GROUP"));

  tap_plan (NR_GROUPS * ((opt.seeds + BATCH - 1) / BATCH) + nr_scenarios
            + NR_GROUPS + NR_GROUPS * NR_STRIPE_MODES + 1 + 2 * NR_GROUPS
            + SECOND_KINDS);
  printf ("# %" PRIu64 " seeds per (elevator, ack) pair from %" PRIu64
          ", %" PRIu64 " ops each; replay one with PLUGQ_MODEL_SEED=N\n",
          opt.seeds, opt.first_seed, opt.ops);
  for (size_t gi = 0; gi < NR_GROUPS; gi++)
    run_batches (&groups[gi]);
  for (size_t i = 0; i < nr_scenarios; i++)
    run_scenario (&scenarios[i]);
  for (size_t gi = 0; gi < NR_GROUPS; gi++)
    run_threaded_group (&groups[gi]);
  for (size_t gi = 0; gi < NR_GROUPS; gi++)
    for (size_t mi = 0; mi < NR_STRIPE_MODES; mi++)
      run_striped_group (&groups[gi], &stripe_modes[mi]);
  check_stripe_reads ();
  for (size_t gi = 0; gi < NR_GROUPS; gi++)
    run_fault_group (&groups[gi]);
  for (size_t gi = 0; gi < NR_GROUPS; gi++)
    run_fault_threaded_group (&groups[gi]);
  run_error_marks ();
  return tap_done ();
}
