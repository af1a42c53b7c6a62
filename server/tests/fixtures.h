/* plugq tests: the small fixtures the engine tests share.
 *
 * Bounded waits, so a hang becomes a failure instead of a stuck run;
 * calls on threads of their own, to tell "still waiting" from
 * "returned"; byte and extent comparisons that say where they differ;
 * and a rig of disks on test backends with their queues and a timer
 * service, started and stopped in the order the plugin uses.
 */
#ifndef PLUGQ_TESTS_FIXTURES_H
#define PLUGQ_TESTS_FIXTURES_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/extents.h"
#include "queue/queue.h"
#include "test_backends.h"

/* ------------------------------------------------------------ waits */

/* Sleeps us microseconds, however often a signal interrupts it. */
void test_sleep_us (uint64_t us);

/* The monotonic clock in seconds, for durations a test reports. */
double test_now_s (void);

/* Sleeps one polling step (1 ms). */
void test_poll_step (void);

/* Polls cond every millisecond for at most ms milliseconds; its value. */
#define TEST_POLL_FOR(cond, ms) \
  ({ \
    bool ok_ = (cond); \
    for (unsigned i_ = 0; !ok_ && i_ < (ms); i_++) { \
      test_poll_step (); \
      ok_ = (cond); \
    } \
    ok_; \
  })

/* For what must happen: polls for at most TB_TIMEOUT_MS. */
#define TEST_WAIT_FOR(cond) TEST_POLL_FOR (cond, TB_TIMEOUT_MS)

/* For what must NOT happen: polls for about 200 ms.  The engine acts at
 * once when allowed, so a short window shows it held back.
 */
#define TEST_SOON(cond) TEST_POLL_FOR (cond, 200)

/* ------------------------------------------------------------ threads */

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

/* ------------------------------------------------------------ bytes */

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
/* What test_rig_shaped gives the backend before the queue is made. */
struct test_shape {
  unsigned async;               /* > 0: asynchronous, this many in flight */
  unsigned writers;             /* > 0: its max_writers */
  bool fua;                     /* test_backend_set_fua */
  bool writes_to_memory;        /* test_backend_set_writes_to_memory */
  uint32_t buffer_align;        /* > 1: its buffer_align */
  bool reads_behind_writes;     /* its reads_behind_writes (a remote) */
};
/* test_rig_one with a backend of that shape. */
bool test_rig_shaped (struct test_rig *, const struct queue_config *,
                      uint64_t size, const struct test_shape *);
/* Opens every gate, drains and frees everything; the rig is zeroed. */
void test_rig_stop (struct test_rig *);

struct queue_stats test_stats (struct queue *);

/* Runs every case of cases[0..n) three times: over a synchronous backend
 * (*async = *writers = 0), an asynchronous one (*async = async_n) and a
 * synchronous one with several writers (*writers = writers_n); the cases
 * read *async and *writers when they make their rig.  Both are 0 after.
 */
void test_each_mode (void (*const *cases) (void), size_t n,
                     unsigned *async, unsigned *writers,
                     unsigned async_n, unsigned writers_n);

/* A tb_contract fault hook (test_backends.h): prints each breach of the
 * backend contract and counts it in the _Atomic unsigned at arg.
 */
void test_count_breach (void *arg, const char *msg);

/* Runs every case of cases[0..n) over a synchronous backend
 * (*async = 0), then an asynchronous one (*async = async_n); *async is 0
 * after.
 */
void test_sync_then_async (void (*const *cases) (void), size_t n,
                           unsigned *async, unsigned async_n);

/* A queue_pwrite of count bytes of c at offset, with flags and no
 * session, to run on a test_thread: test_write_job_run (job).
 */
struct test_write_job {
  struct queue *q;
  int c;
  uint64_t count, offset;
  unsigned flags;
};
int test_write_job_run (void *job);

/* A queue_pread of count bytes (at most 64 KiB) at offset into buf,
 * to run on a test_thread: test_read_job_run (job) answers 0 or errno.
 */
struct test_read_job {
  struct queue *q;
  uint64_t offset;
  uint32_t count;
  unsigned char buf[64 * 1024];
};
int test_read_job_run (void *job);

/* queue_pwrite of count bytes of c. */
int test_write_fill (struct queue *, struct session *, int c, uint64_t count,
                     uint64_t offset, unsigned flags);
/* read (ctx, buf, count, offset) into a buffer of its own, then
 * test_buffer_is (..., what): whether the range reads as c.
 */
bool test_reads_as (int (*read) (void *ctx, void *buf, size_t count,
                                 uint64_t offset),
                    void *ctx, int c, uint64_t count, uint64_t offset,
                    const char *what);
/* queue_pread of the range reads as c. */
/* Sends out what q holds queued now, as the unplug timer would. */
void test_unplug_now (struct queue *);
bool test_queue_reads_as (struct queue *, int c, uint64_t count,
                          uint64_t offset);

#endif /* PLUGQ_TESTS_FIXTURES_H */
