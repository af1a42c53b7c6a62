/* plugq tests: a backend wrapper that lets a unit test watch and steer
 * what a queue does to its backend.
 *
 * It wraps a real memory backend and forwards every call, so data
 * behaves exactly as in production, while the test can:
 *
 *  - count calls of each kind and read a log of every call (offset,
 *    bytes, iovcnt), to see merges, ordering and how many flushes a
 *    group commit needed;
 *  - hold calls of one kind at a gate until released (all at once or a
 *    few at a time), to prove what does not wait for a slow backend;
 *  - fail the next N calls of one kind with a chosen errno, to drive
 *    write-back error latching;
 *  - behave as an asynchronous backend (submit, several operations in
 *    flight), so the same cases cover that dispatch path.
 *
 * Test code only: the engine has no hooks, this is just a backend.
 * Below it are the small fixtures the queue and linear tests share:
 * bounded waits, threads that cannot hang a run, and a rig of disks
 * with their queues and a timer service.
 */
#ifndef PLUGQ_TESTS_TEST_BACKENDS_H
#define PLUGQ_TESTS_TEST_BACKENDS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "queue.h"

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
  bool may_trim;                /* zero only */
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
struct backend *test_backend_get (struct test_backend *);

/* Makes the backend asynchronous, as an NBD backend is: it offers
 * submit, and n worker threads run up to n operations at once, finishing
 * in any order, through the same counts, gates and failures.  Call
 * before queue_new.
 */
int test_backend_set_async (struct test_backend *, unsigned n);

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

/* The gate.  block: calls of kind op wait on arrival.  step: let n of
 * them through and keep the gate shut.  release: open it for good.
 */
void test_backend_block (struct test_backend *, enum tb_op);
void test_backend_step (struct test_backend *, enum tb_op, unsigned n);
void test_backend_release (struct test_backend *, enum tb_op);
/* Opens every gate and cancels pending failures: teardown must drain. */
void test_backend_release_all (struct test_backend *);

/* The next n calls of kind op fail with errnum without reaching the
 * memory backend.
 */
void test_backend_fail (struct test_backend *, enum tb_op, unsigned n,
                        int errnum);

/* Reads the memory backend directly: what is really "on disk", with no
 * queue, gate, count or failure in the way.
 */
int test_backend_read (struct test_backend *, void *buf, size_t count,
                       uint64_t offset);
/* The backend holds byte c over [offset, offset+count); prints the first
 * difference as a TAP comment.
 */
bool test_backend_holds (struct test_backend *, int c, size_t count,
                         uint64_t offset);

/* ------------------------------------------------------------ helpers */

/* Sleeps one polling step (1 ms). */
void test_poll_step (void);

/* Polls cond every millisecond for at most TB_TIMEOUT_MS; its value. */
#define TEST_WAIT_FOR(cond) \
  ({ \
    bool ok_ = (cond); \
    for (unsigned i_ = 0; !ok_ && i_ < TB_TIMEOUT_MS; i_++) { \
      test_poll_step (); \
      ok_ = (cond); \
    } \
    ok_; \
  })

/* A call run on its own thread, so a test can tell "still waiting" from
 * "returned" without ever hanging on an engine bug.
 */
struct test_thread {
  pthread_t thread;
  int (*fn) (void *arg);
  void *arg;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  bool done;
  bool joined;
  int result;                   /* fn's return value */
  int err;                      /* errno after fn */
};

/* A thread never started: join is a no-op, done is false. */
#define TEST_THREAD_INIT { .joined = true }

int test_thread_start (struct test_thread *, int (*fn) (void *), void *arg);
/* True if fn returned within TB_TIMEOUT_MS (then it is joined). */
bool test_thread_wait (struct test_thread *);
/* Without waiting. */
bool test_thread_done (struct test_thread *);
/* Joins whatever happens: call after opening the gates it may wait on. */
void test_thread_join (struct test_thread *);

/* buf holds byte c over count bytes (offset: where buf starts, for the
 * message); prints the first difference as a TAP comment.
 */
bool test_buffer_is (const void *buf, int c, size_t count, uint64_t offset,
                     const char *what);
/* got equals want over n bytes; prints the first difference. */
bool test_bytes_equal (const void *got, const void *want, size_t n,
                       const char *what);

/* The type of the extent holding pos, UINT32_MAX if none does. */
uint32_t test_extent_type_at (const struct extent_list *, uint64_t pos);
/* Not empty, ascending, no gap, from offset, within offset+count;
 * prints the first fault.
 */
bool test_extents_contiguous (const struct extent_list *, uint64_t offset,
                              uint64_t count);
void test_print_extents (const struct extent_list *);

/* ------------------------------------------------------------ rig */

#define TEST_MS (UINT64_C (1000000))
#define TEST_HOUR (3600 * 1000 * TEST_MS)   /* "never" within one test */
#define TEST_MAX_DISKS 4

struct test_disk {
  struct test_backend *tb;
  struct queue *q;
};

/* Disks on test backends, their queues and one timer service, started
 * and stopped in the order the plugin uses.
 */
struct test_rig {
  struct timer_service *ts;
  struct test_disk d[TEST_MAX_DISKS];
  unsigned n;
};

/* The defaults with this unplug delay and threshold. */
struct queue_config test_config (uint64_t delay_ns, uint32_t thresh);

/* Adds a disk's backend; adjust it before test_rig_start if needed.
 * Zero the rig first.
 */
struct test_backend *test_rig_backend (struct test_rig *, uint64_t size);
/* Builds and starts a queue named diskN over every backend added. */
bool test_rig_start (struct test_rig *, const struct queue_config *);
/* One disk of size bytes, started; async > 0: an asynchronous backend
 * with that many operations in flight; writers > 0: its max_writers.
 */
bool test_rig_one (struct test_rig *, const struct queue_config *,
                   uint64_t size, unsigned async, unsigned writers);
/* Opens every gate, drains and frees everything; the rig is zeroed. */
void test_rig_stop (struct test_rig *);

struct queue_stats test_stats (struct queue *);

/* queue_pwrite of count bytes of c. */
int test_write_fill (struct queue *, struct session *, int c, uint64_t count,
                     uint64_t offset, unsigned flags);
/* queue_pread of the range reads as c. */
bool test_queue_reads_as (struct queue *, int c, uint64_t count,
                          uint64_t offset);

#endif /* PLUGQ_TESTS_TEST_BACKENDS_H */
