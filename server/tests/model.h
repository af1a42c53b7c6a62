/* plugq tests: a flat-array model of a disk, and a harness that drives one
 * queue and the model side by side.
 *
 * The model is what the NBD rules (design.md §3) say a client must see:
 * the newest write wins byte for byte, zeroes read as zero, a trimmed byte
 * may read as anything until it is written again (or until an extent
 * list calls it zero).  On top of that it tracks which bytes the backend
 * itself must already hold (with ack=dispatched every answered write),
 * and which must also be durable, covered by a backend flush: everything
 * answered before a FLUSH, and a FUA request's bytes.  The harness checks
 * reads and extents against the model as it goes, reads the backend
 * directly (bypassing the queue) after every FLUSH and FUA and every 16
 * ops, and compares the whole backend after the queue has drained.
 * Durable means what a power cut could leave: the backend's bytes not
 * changed since its last flush began must be no older than promised.
 *
 * The queue writes through the test backend (test_backends.h) over the
 * memory backend, which checks the backend contract as it is used
 * (limits, merging, one writer or at most max_writers, one flush at a
 * time, nothing after queue_stop, no overlapping operations in flight),
 * records what was written since the last backend flush, and stands in
 * for other backends: no fast zero, trims that do nothing or leave junk,
 * a minimum block size, an aligned-only backend (min_block: requests of
 * any size, partial blocks read-modify-written by the queue and every
 * backend call refused unless whole blocks), small max_write and max_iov,
 * writes from several
 * token holders at once, or asynchronous operations completed out of
 * order on its own threads.
 *
 * In fault mode (backend_params.faults, a quarter of the runs) it also
 * fails writes, zeroes and trims in stretches (EIO or ENOSPC, now and
 * then ENOMEM) and now and then a flush, as a disk filling up or a
 * remote going away does.  The rules the harness holds the queue to
 * then (queue_failing.c, queue_flush.c):
 *   - reads and extents stay exact: an answered write whose write-back
 *     fails is kept and tried again, never dropped (ack=queued);
 *   - a write, zero or trim may fail (ack=dispatched or FUA: its own
 *     write-out failed; around the queue; or the queue was full while
 *     data was failing): its range is unspecified from then on;
 *   - a FLUSH or FUA may fail, and promises nothing then; one that
 *     succeeds keeps its promise, checked as above;
 *   - at the end the backend recovers: a FLUSH must succeed by its
 *     second try (the first may report a failed backend flush its
 *     session was not told of), queue_stop must not lose data, and the
 *     drain's comparison is exact.
 * A failed backend flush loses nothing in the memory backend, so what
 * the errseq rule adds (every FLUSH and FUA that arrived before the
 * failure was reported to its session fails) shows only in scripted
 * cases that hold the flush at the gate (test_model.c).
 *
 * The same op generator serves the random model test and the fuzzer: it
 * turns a byte stream (a seeded PRNG or the fuzzer's input) into requests
 * that hit overlaps, exact adjacency, disk boundaries and unaligned cases.
 *
 * Several lanes (clients, one thread each) share one queue, each with a
 * model of its own that stays exact because no lane touches another's
 * bytes: either each lane owns a region of the disk, or the disk is cut
 * into stripes dealt out to the lanes in turn, and each lane writes its
 * own mostly in ascending order, so that lanes continue each other's
 * writes as clients writing one interleaved stream do.  Lanes may share
 * sessions (harness_params.sessions), as requests of one connection in
 * flight at once.  A FLUSH on any lane covers what every lane was
 * answered before it was sent (multi-conn): a record of every lane's
 * answers on one clock is checked against the backend after each.
 *
 * A scripted op, MOP_FUA_CUT, holds an older write at the backend's gate,
 * queues a FUA write behind it and cuts that in the queue with a newer
 * write or zero: the FUA write's answer must find its whole range
 * durable, with the newer bytes (issue 39).
 */
#ifndef PLUGQ_TESTS_MODEL_H
#define PLUGQ_TESTS_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "queue/queue.h"
#include "test_backends.h"

/* ------------------------------------------------------------ ops */

enum model_op_kind {
  MOP_READ,
  MOP_WRITE,
  MOP_ZERO,
  MOP_TRIM,
  MOP_FLUSH,
  MOP_EXTENTS,
  MOP_CACHE,
  MOP_SLEEP,                    /* lets unplug timers fire between ops */
  /* A FUA write held in the queue and cut there (harness_apply): three
   * requests at once, on threads of their own.  Scripted cases only.
   */
  MOP_FUA_CUT,
  MOP_KINDS
};

struct model_op {
  enum model_op_kind kind;
  unsigned flags;               /* REQ_FUA, REQ_MAY_TRIM, REQ_FAST_ZERO */
  uint64_t offset;
  uint64_t count;               /* bytes; microseconds for MOP_SLEEP */
  uint32_t tag;                 /* names the op and seeds a write's data */
  /* MOP_FUA_CUT: the newer request that cuts the FUA write, a MOP_WRITE
   * or MOP_ZERO of [cut_offset, cut_offset + cut_count) inside it.
   */
  enum model_op_kind cut_kind;
  uint64_t cut_offset, cut_count;
};

/* The requests op sends, oldest first, into parts (room for
 * MODEL_OP_MAX_PARTS): op itself, or a MOP_FUA_CUT's three writes.
 * Their tags differ.  Returns how many.
 */
#define MODEL_OP_MAX_PARTS 3
size_t model_op_parts (const struct model_op *, struct model_op *parts);

/* "write 0x1000+512 fua" */
void model_op_format (const struct model_op *, char *buf, size_t len);

/* The byte a write tagged `tag` puts at disk offset pos: never zero, so
 * written data is always told apart from zeroes, and different for
 * different tags at almost every position.
 */
uint8_t model_pattern (uint32_t tag, uint64_t pos);

/* ------------------------------------------------------------ model */

/* Bits of model.state, one byte per disk byte. */
#define MODEL_DONTCARE 1u       /* trimmed since last written: any value */
#define MODEL_LANDED   2u       /* the backend must hold model.landed */
#define MODEL_DURABLE  4u       /* ... and a backend flush covered it */

struct model {
  uint64_t base;                /* disk offset of byte 0 of the region */
  uint64_t size;
  uint8_t *data;                /* what a read must return */
  uint8_t *landed;              /* what the backend must hold, if LANDED */
  uint8_t *state;
};

int model_init (struct model *, uint64_t base, uint64_t size);
void model_free (struct model *);

/* Offsets are disk offsets inside [base, base + size). */
void model_write (struct model *, uint64_t offset, uint64_t count,
                  const uint8_t *data);
void model_zero (struct model *, uint64_t offset, uint64_t count);
void model_trim (struct model *, uint64_t offset, uint64_t count);
/* A write, zero or trim that failed: NBD leaves its range unspecified,
 * so it may read as anything until written again (as if trimmed).
 */
void model_unspecified (struct model *, uint64_t offset, uint64_t count);
/* The backend now holds the current contents of the range, and with
 * durable a backend flush has covered them (FLUSH, FUA).
 */
void model_landed (struct model *, uint64_t offset, uint64_t count,
                   bool durable);

/* A difference between what was read and what the model expects. */
struct model_mismatch {
  uint64_t offset;              /* first differing byte */
  uint64_t length;              /* differing bytes from there on, in a row */
  uint8_t expected, got;
};

/* Compares buf (count bytes read at offset) with the data a read must
 * return, skipping don't-care bytes.  With landed, compares only bytes
 * the backend must hold, against what it must hold.
 */
bool model_compare (const struct model *, const uint8_t *buf,
                    uint64_t offset, uint64_t count, bool landed,
                    struct model_mismatch *);

/* The first byte of the range that must be durable but is marked in
 * dirty (dirty[0] is offset: written since the last backend flush), or
 * -1.
 */
int64_t model_first_undurable (const struct model *, const uint8_t *dirty,
                               uint64_t offset, uint64_t count);

/* Trimmed bytes of the range read as zero from now on (the queue said
 * so in an extent list).
 */
void model_pin_zero (struct model *, uint64_t offset, uint64_t count);

/* The first byte of the range a read must not see as zero, or -1. */
int64_t model_first_nonzero (const struct model *, uint64_t offset,
                             uint64_t count);

/* ------------------------------------------------------------ byte source */

/* Where the generator's decisions come from: a buffer (the fuzzer's
 * input; reads past its end give zeroes and set exhausted) or an endless
 * PRNG stream.
 */
struct byte_source {
  const uint8_t *data;
  size_t len, pos;
  uint64_t rng;
  bool exhausted;
};

void byte_source_buffer (struct byte_source *, const void *data, size_t len);
void byte_source_seed (struct byte_source *, uint64_t seed);
uint8_t byte_source_u8 (struct byte_source *);
uint32_t byte_source_u32 (struct byte_source *);
/* A value in [0, n), n > 0. */
uint64_t byte_source_below (struct byte_source *, uint64_t n);

/* ------------------------------------------------------------ generator */

#define GEN_RECENT 8

struct gen_range {
  uint64_t offset, count;
};

struct op_generator {
  uint64_t lo, hi;              /* requests stay inside [lo, hi) */
  uint64_t max_io;              /* largest read or write */
  uint32_t align;               /* backend minimum block size */
  uint32_t next_tag;
  uint64_t max_sleep_us;
  bool past_end_ok;             /* hi is the disk's end: may run past it */
  struct gen_range recent[GEN_RECENT];  /* the last ops' ranges */
  unsigned nr_recent, newest;
  /* Striped (op_generator_stripes): [lo, hi) is cut into stripes of
   * this many bytes, and requests stay inside stripe_first,
   * stripe_first + stripe_step, ...; 0: anywhere in [lo, hi).
   */
  uint64_t stripe;
  unsigned stripe_first, stripe_step;
  uint64_t stream_row;          /* the row (stripes counted by stripe_step,
                                 * never wrapped) the stream writes in */
  uint64_t stream_pos;          /* and its next byte, in that row's stripe */
  _Atomic uint64_t *front;      /* shared by lanes: the furthest row any
                                 * stream began; NULL alone */
};

void op_generator_init (struct op_generator *, uint64_t lo, uint64_t hi,
                        uint64_t max_io, uint32_t align, uint32_t first_tag);
/* From now on requests stay inside the stripes first, first + step, ...
 * of [lo, hi), each stripe bytes long (a multiple of the alignment), and
 * most ops are writes that carry on an ascending stream through those
 * stripes, row after row, wrapping at hi.  Lanes whose generators share
 * front join the furthest row any of them began whenever they start a
 * stripe, so their streams interleave as one: lane i's stripe continues
 * lane i - 1's while both write it.
 */
void op_generator_stripes (struct op_generator *, uint64_t stripe,
                           unsigned first, unsigned step,
                           _Atomic uint64_t *front);
/* The stripe of [lo, hi) holding pos: its bounds, and its index. */
uint64_t stripe_of (uint64_t lo, uint64_t hi, uint64_t stripe, uint64_t pos,
                    uint64_t *start, uint64_t *end);
/* False once a buffer source is exhausted. */
bool op_generator_next (struct op_generator *, struct byte_source *,
                        struct model_op *);

/* ------------------------------------------------------------ harness */

/* How the test backend wrapped around the memory backend behaves, so one
 * run can stand in for a file or NBD backend's properties; or which real
 * backend it wraps instead.
 */
struct backend_params {
  /* NULL: a memory backend of disk_size.  Else opens, for each run, the
   * backend to wrap (test_backend_wrap): disk_size bytes that read as
   * zeroes, durably.  One with threads of its own (rbd) takes the
   * queue's operations as they are, with FUA only if fua, and async,
   * min_block and writers do not apply.
   */
  struct backend *(*open) (void *arg);
  void *open_arg;
  const char *name;             /* what open opens, in reports */
  enum tb_trim trim;
  bool no_fast_zero;            /* clear can_fast_zero */
  uint32_t max_write;           /* 0: the memory backend's own */
  int max_iov;                  /* 0: the memory backend's own */
  uint32_t minimum;             /* 0: the memory backend's own */
  uint32_t min_block;           /* >1: refuses partial blocks, as O_DIRECT */
  unsigned async;               /* >0: submit, this many in flight */
  bool fua;                     /* async only: honours FUA */
  bool steady;                  /* no jitter: async operations finish in
                                 * order and without delay */
  unsigned writers;             /* >1: max_writers of a synchronous one */
  bool writes_to_memory;        /* synchronous: writes may go around the
                                 * queue (queue_bypass.c) */
  /* > 0: the backend fails writes, zeroes and trims in stretches and
   * now and then a flush (test_backend_faults), as fault level `faults`
   * (1..HARNESS_FAULT_LEVELS) sets out; until the run ends, when it
   * recovers (harness_flush_all).
   */
  unsigned faults;
};

#define HARNESS_FAULT_LEVELS 4

#define HARNESS_MAX_LANES 8

struct harness_params {
  struct queue_config config;
  struct backend_params backend;
  uint64_t disk_size;
  unsigned lanes;               /* clients, each in its own region
                                 * (or stripes) */
  /* >0: the lanes share the whole disk instead, cut into stripes of this
   * many bytes (a multiple of 4 KiB, so no block is shared): lane i owns
   * stripes i, i + lanes, i + 2 * lanes, ... and writes them mostly in
   * ascending order (op_generator_stripes), so lanes' writes continue
   * each other as several clients writing one interleaved stream do.
   */
  uint64_t stripe;
  /* > 0: the lanes share this many sessions, lane i the session
   * i % sessions, as requests of one connection in flight at once;
   * 0: a session each.
   */
  unsigned sessions;
  bool verbose;                 /* print every op as a TAP comment */
};

/* Chooses every queue knob, the disk size and backend properties from
 * src, keeping the elevator and ack mode given.  Combinations that would
 * make a run crawl (ack=dispatched waiting out a 1 s plug) are avoided.
 */
void harness_params_choose (struct harness_params *, struct byte_source *,
                            const struct elevator_ops *, enum ack_mode);
/* The same for lanes clients sharing a small disk in stripes, on an
 * asynchronous backend (with FUA or without), where waiting writers
 * continue each other's writes in flight (harness_params.stripe).
 * Knobs that would keep a stream from ever filling the backend's
 * slots, or its stripes from merging, are raised.
 */
void harness_params_choose_striped (struct harness_params *,
                                    struct byte_source *,
                                    const struct elevator_ops *,
                                    enum ack_mode, unsigned lanes);
/* Elevator and ack mode from src too (the fuzzer). */
void harness_params_choose_all (struct harness_params *,
                                struct byte_source *);
/* "deadline ack=queued thresh=4 delay=100us max-merge=64K ..." */
void harness_params_format (const struct harness_params *, char *buf,
                            size_t len);

enum harness_fault {
  FAULT_NONE,
  FAULT_SETUP,                  /* could not build the queue */
  FAULT_RESULT,                 /* unexpected return value or errno */
  FAULT_READ,                   /* a read differs from the model */
  FAULT_EXTENTS,                /* malformed list, or ZERO over data */
  FAULT_FLUSH,                  /* after a FLUSH: not on disk, or not
                                 * covered by a backend flush */
  FAULT_FUA,                    /* the same for a FUA request's data */
  FAULT_ACKED,                  /* ack=dispatched write not on backend */
  FAULT_LANDED,                 /* landed or durable data changed later */
  FAULT_BACKEND,                /* the queue misused the backend */
  FAULT_DRAIN,                  /* after queue_stop: backend differs, or
                                 * no backend flush after a write */
  FAULT_STATS,                  /* counters disagree with what was sent */
  FAULT_KINDS
};

extern const char *const harness_fault_names[FAULT_KINDS];

struct harness;

/* Builds the backend, queue, timer service and one session per lane, and
 * starts them.  NULL only if memory runs out; a queue that cannot be
 * built is a FAULT_SETUP on the returned harness.
 */
struct harness *harness_new (const struct harness_params *);

/* A generator for lane i: inside the region it owns, or striped over
 * its stripes (harness_params.stripe).
 */
void harness_lane_generator (struct harness *, unsigned lane,
                             struct op_generator *);

/* Applies op through the queue and to lane's model and checks it.  Safe
 * to call from one thread per lane (MOP_FUA_CUT: of a harness with one
 * lane).  False once the lane has failed.
 */
bool harness_apply (struct harness *, unsigned lane, const struct model_op *);

/* Quiescent lanes only: a FLUSH through lane 0's session, then every
 * lane's data must be on the backend.  In fault mode the backend
 * recovers first, for good, and the FLUSH may fail once (a failed
 * backend flush lane 0's session was not told of), not twice.
 */
bool harness_flush_all (struct harness *);

/* Drains the queue (queue_stop, which must not report lost data),
 * compares the whole backend with every lane's model and checks the
 * counters; in fault mode after harness_flush_all, unless it ran.  Call
 * once, after all lanes.
 */
bool harness_finish (struct harness *);

/* Any lane failed, or the setup did; safe from any thread. */
bool harness_failed (const struct harness *);

/* The first failure: kind, which lane and op (ops applied by that lane
 * before it, or SIZE_MAX for one found at finish), and why.
 */
enum harness_fault harness_fault (const struct harness *, unsigned *lane,
                                  size_t *op_index);
const char *harness_why (const struct harness *);

/* TAP comments: the configuration, the failure and the ops leading to it
 * on the failing lane (at most last_ops of them).
 */
void harness_report (const struct harness *, FILE *, size_t last_ops);

/* The queue's counters (after harness_finish: the whole run's); zeroes
 * when there is no queue.
 */
void harness_queue_stats (const struct harness *, struct queue_stats *);

/* The slowest FLUSH any lane saw (after the lanes are done). */
uint64_t harness_max_flush_ns (const struct harness *);

/* What a run's fault mode and MOP_FUA_CUT ops did, over every lane (a
 * test that tells what it covered reads it after the lanes are done).
 */
struct harness_tally {
  uint64_t backend_failures;    /* calls the backend failed on purpose */
  uint64_t requests_failed;     /* writes, zeroes, trims answered -1 */
  uint64_t flushes_failed;      /* FLUSHes answered -1 */
  uint64_t flushes_after_failure;       /* FLUSHes that succeeded after
                                         * one had failed */
  uint64_t fua_cuts;            /* MOP_FUA_CUT ops */
  uint64_t fua_cuts_held;       /* ... whose FUA write waited behind the
                                 * older write held at the gate */
};

void harness_tally (const struct harness *, struct harness_tally *);

/* The ops lane applied so far, in order. */
const struct model_op *harness_lane_ops (const struct harness *,
                                         unsigned lane, size_t *n);

void harness_free (struct harness *);

/* Bumped after every op; a watchdog reads it to tell a hang. */
extern _Atomic uint64_t harness_progress;

/* ------------------------------------------------------------ runs */

struct run_result {
  enum harness_fault fault;
  size_t op_index;              /* SIZE_MAX: at finish */
  size_t ops_applied;           /* by lane 0 */
  struct queue_stats stats;     /* the queue's counters at the end */
  uint64_t max_flush_ns;        /* the slowest FLUSH */
  struct harness_tally tally;
};

/* One lane, ops from src until max_ops or the source runs out.  With
 * report, a failure is described there.
 */
struct run_result run_from_source (const struct harness_params *,
                                   struct byte_source *, size_t max_ops,
                                   uint64_t max_sleep_us, FILE *report);

/* p->lanes clients at once, one thread each: lane i's ops come from a
 * PRNG seeded with seed * 64 + i, max_ops of them; then a FLUSH on lane
 * 0, after which every lane's data must be durable, and the drain.
 */
struct run_result run_threaded (const struct harness_params *,
                                uint64_t seed, size_t max_ops, FILE *report);

/* One lane, exactly these ops. */
struct run_result run_ops (const struct harness_params *,
                           const struct model_op *, size_t n, FILE *report);

/* A fuzzer input: parameters from its first bytes, then ops. */
struct run_result run_fuzz_input (const uint8_t *data, size_t size,
                                  size_t max_ops, bool verbose, FILE *report);

#endif /* PLUGQ_TESTS_MODEL_H */
