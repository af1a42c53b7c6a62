/* plugq tests: the wrapper backend every engine test writes through.
 *
 * It wraps a real backend (memory, unless a test hands it another) and
 * forwards every call, so data behaves exactly as in production, while a
 * test can:
 *
 *  - count calls of each kind and read a log of every call (offset,
 *    bytes, iovcnt), to see merges, ordering and how many flushes a
 *    group commit needed;
 *  - hold calls of one kind at a gate until released (all at once or a
 *    few at a time), to prove what does not wait for a slow backend;
 *  - fail the next N calls of one kind with a chosen errno, to drive
 *    write-back error latching; or, seeded, fail writes, zeroes and trims
 *    in stretches and now and then a flush, as a disk that fills up or
 *    a remote that goes away and comes back does;
 *  - behave as an asynchronous backend (submit, several operations in
 *    flight), so the same cases cover that dispatch path, with the
 *    operations finished oldest first or, with jitter, late and in any
 *    order; over an inner backend that is asynchronous itself (rbd),
 *    operations pass through to it as they are and complete on its
 *    threads;
 *  - stand in for other backends: any limits written into its struct
 *    backend, and trims that do nothing or leave junk; with min_block
 *    set, it refuses (EINVAL) any read, write, zero or trim that is not
 *    whole blocks, as O_DIRECT does;
 *  - check the backend contract (backend.h) on every call as it is made
 *    and record which bytes changed since the last backend flush began,
 *    so the model harness can tell written data from durable data.
 *
 * Test code only: the engine has no hooks, this is just a backend.
 */
#ifndef PLUGQ_TESTS_TEST_BACKENDS_H
#define PLUGQ_TESTS_TEST_BACKENDS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"

enum tb_op {
  TB_PREAD,
  TB_PWRITEV,
  TB_ZERO,
  TB_TRIM,
  TB_FLUSH,
  TB_EXTENTS,
  TB_CACHE,
  TB_OPS
};

/* One call as the backend received it, logged when it arrives (before
 * the gate), so a test can see which call is being held.
 */
struct tb_call {
  enum tb_op op;
  uint64_t offset;
  uint64_t count;               /* bytes (0 for flush) */
  int iovcnt;                   /* pwritev only */
  bool memory_aligned;          /* pwritev: every vector starts on the
                                 * backend's buffer_align */
  const void *first_base;       /* pwritev: where its first vector's
                                 * memory starts */
  bool may_trim;                /* zero only */
  bool fua;                     /* submitted with FUA (test_backend_set_fua) */
  pthread_t thread;             /* the thread that made it */
  unsigned busy;                /* calls still unfinished when it arrived:
                                 * a flush with 0 started after every
                                 * call logged before it had finished */
};

/* Every bounded wait in the tests gives up after this long: long enough
 * for a loaded machine under ThreadSanitizer, short enough that a hang
 * becomes a failure rather than a stuck test run.
 */
#define TB_TIMEOUT_MS 5000

struct test_backend;

/* A wrapped memory backend of size bytes, or NULL.  Its struct backend
 * (test_backend_get) starts as a copy of the memory backend's, so a test
 * may change limits, can_fast_zero and the like before handing it to
 * queue_new, which takes ownership: the wrapper is freed by queue_free.
 */
struct test_backend *test_backend_new (uint64_t size);
/* The same around any backend, which the wrapper owns from now on (it
 * closes it, also when this fails: NULL).  An inner backend with start
 * makes the wrapper asynchronous at once, with the inner backend's
 * max_in_flight and FUA: each submitted operation goes to the inner
 * backend's io after the wrapper's log, gate, failures and contract
 * checks, and completes on the inner backend's thread (a shut gate
 * holds the submitting thread).  Its start starts the inner backend.
 * Not with min_block, whose record of changed bytes reads the inner
 * backend from that thread.
 */
struct test_backend *test_backend_wrap (struct backend *inner);
struct backend *test_backend_get (struct test_backend *);

/* Makes the backend asynchronous, as an NBD backend is: it offers
 * submit, and n worker threads run up to n operations at once, finishing
 * in any order, through the same counts, gates and failures.  Call
 * before queue_new.  -1 (EINVAL) over an inner backend that is
 * asynchronous already.
 */
int test_backend_set_async (struct test_backend *, unsigned n);
/* The same with fewer workers than operations in flight, so submitted
 * operations also wait their turn.
 */
int test_backend_set_async_workers (struct test_backend *, unsigned n,
                                    unsigned workers);
/* An asynchronous backend that honours FUA, as an NBD backend to a
 * server with FUA does: a write, zero or trim submitted with it is
 * durable when it completes (no later flush needed for its range).
 */
void test_backend_set_fua (struct test_backend *);
/* Synchronous only: it says its writes land in memory, so writes the
 * queue cannot merge go around it (queue_bypass.c).
 */
void test_backend_set_writes_to_memory (struct test_backend *);

/* From now on calls take their time now and then, by a PRNG seeded with
 * seed: an asynchronous operation is picked at random among the pending
 * ones and may first sleep up to 300 us, so they finish late and out of
 * order; with max_writers > 1 a flush may sleep 200 us, so other writers
 * try to start meanwhile.
 */
void test_backend_jitter (struct test_backend *, uint64_t seed);

/* What a trim does to the backend under the wrapper. */
enum tb_trim {
  TB_TRIM_PASS,                 /* the inner backend's own trim */
  TB_TRIM_NOOP,                 /* trim is advisory: do nothing */
  TB_TRIM_SCRIBBLE,             /* overwrite with junk: "unspecified" */
};

/* Other than TB_TRIM_PASS, a trimmed range no longer reads as zeroes. */
void test_backend_set_trim (struct test_backend *, enum tb_trim);

/* ------------------------------------------------------------ contract */

struct tb_contract {
  uint64_t merge_limit;         /* largest vectored write allowed */
  bool no_merging;              /* unplug-thresh=1: one request a write */
  /* Each breach, as it happens, from whichever thread made the call. */
  void (*fault) (void *arg, const char *msg);
  void *arg;
};

/* From now on every call is checked against the backend contract: its
 * range, alignment and the limits in the struct backend, merges,
 * max_writers and max_in_flight, no two operations over the same bytes
 * at once, one flush at a time, start before submit, nothing after
 * test_backend_stopped; and the bytes changed since the last backend
 * flush began are recorded.  Call after setting the limits, before
 * queue_new.  0, or -1 without memory.
 */
int test_backend_check_contract (struct test_backend *,
                                 const struct tb_contract *);

/* Copies the record of bytes changed since the last backend flush began
 * (1: changed) for [offset, offset+count).  Only once the contract is
 * checked: the record starts there.
 */
void test_backend_dirty (struct test_backend *, uint8_t *out,
                         uint64_t count, uint64_t offset);

/* queue_stop returned: any later change or flush is a breach. */
void test_backend_stopped (struct test_backend *);

/* Submitted operations not yet done. */
unsigned test_backend_in_flight (struct test_backend *);

/* The most bytes of writes the backend had running at once since the
 * contract was checked (or the last reset, which starts again from what
 * runs now).  Only once the contract is checked.
 */
uint64_t test_backend_max_write_bytes (struct test_backend *, bool reset);

/* ------------------------------------------------------------ watching */

/* Calls that arrived / finished (failed ones included). */
uint64_t test_backend_entered (struct test_backend *, enum tb_op);
uint64_t test_backend_count (struct test_backend *, enum tb_op);

/* Bounded waits: true once at least n calls arrived / finished. */
bool test_backend_wait_entered (struct test_backend *, enum tb_op,
                                uint64_t n);
bool test_backend_wait_count (struct test_backend *, enum tb_op, uint64_t n);

/* Copies up to max logged calls of kind op (TB_OPS: every kind), oldest
 * first, and returns how many there are in all.
 */
size_t test_backend_calls (struct test_backend *, enum tb_op,
                           struct tb_call *out, size_t max);

/* Whether a call of kind op at offset has arrived. */
bool test_backend_saw (struct test_backend *, enum tb_op, uint64_t offset);

/* ------------------------------------------------------------ steering */

/* The gate.  block: calls of kind op wait on arrival.  step: let n of
 * them through and keep the gate shut.  release: open it for good.
 */
void test_backend_block (struct test_backend *, enum tb_op);
void test_backend_step (struct test_backend *, enum tb_op, unsigned n);
void test_backend_release (struct test_backend *, enum tb_op);
/* Opens every gate, cancels pending failures and ends the fault mode:
 * teardown must drain.
 */
void test_backend_release_all (struct test_backend *);

/* The next n calls of kind op fail with errnum without reaching the
 * inner backend.
 */
void test_backend_fail (struct test_backend *, enum tb_op, unsigned n,
                        int errnum);

/* ------------------------------------------------------------ faults */

/* A backend that fails now and then.  Writes, zeroes and trims come in
 * stretches, counted in those calls: a healthy stretch of
 * 1..healthy_calls, where none fails, then a failing one of
 * 1..failing_calls, where fail_percent of them fail, and so on.  A
 * failing stretch has one errno, EIO or ENOSPC, and one failure in eight
 * is ENOMEM instead (which the queue tries again while the batch stays
 * in flight).  Any backend flush fails with EIO at flush_percent.  A
 * failed call never reaches the inner backend: it changes nothing, and
 * a failed flush leaves what was written as it was (the memory backend
 * loses nothing), only not durable.  Lengths and choices come from a
 * PRNG seeded with seed, drawn in the order calls arrive.
 */
struct tb_faults {
  uint64_t seed;
  unsigned healthy_calls;       /* > 0 */
  unsigned failing_calls;       /* > 0 */
  unsigned fail_percent;
  unsigned flush_percent;
};

/* From now on, until test_backend_faults_off: calls fail as f says,
 * starting with a healthy stretch.  Calls held at a gate are decided
 * when they pass it.
 */
void test_backend_faults (struct test_backend *, const struct tb_faults *f);
void test_backend_faults_off (struct test_backend *);

/* Calls of kind op failed on purpose so far (test_backend_fail or
 * faults): they never reached the inner backend.
 */
uint64_t test_backend_failed (struct test_backend *, enum tb_op);

/* ------------------------------------------------------------ contents */

/* Reads the inner backend directly: what is really "on disk", with no
 * queue, gate, count or failure in the way.
 */
int test_backend_read (struct test_backend *, void *buf, size_t count,
                       uint64_t offset);
/* The backend holds byte c over [offset, offset+count); prints the first
 * difference as a TAP comment.
 */
bool test_backend_holds (struct test_backend *, int c, size_t count,
                         uint64_t offset);

#endif /* PLUGQ_TESTS_TEST_BACKENDS_H */
