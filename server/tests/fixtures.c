/* plugq tests: the fixtures the engine tests share (fixtures.h). */
#include <config.h>

#include <errno.h>
#include <stdatomic.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "fixtures.h"
#include "queue/queue_internal.h"
#include "tap.h"
#include "queue/timer_service.h"

#define TIMEOUT_NS ((uint64_t) TB_TIMEOUT_MS * 1000000)

/* ------------------------------------------------------------ waits */

double
test_now_s (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

void
test_sleep_us (uint64_t us)
{
  struct timespec ts = {
    .tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000
  };

  while (nanosleep (&ts, &ts) == -1 && errno == EINTR)
    ;
}

void
test_poll_step (void)
{
  struct timespec ts = { 0, 1000000 };

  nanosleep (&ts, NULL);
}

/* ------------------------------------------------------------ threads */

static void *
test_thread_main (void *arg)
{
  struct test_thread *t = arg;
  int r = t->fn (t->arg);
  int err = errno;

  pthread_mutex_lock (&t->lock);
  t->result = r;
  t->err = err;
  t->done = true;
  pthread_cond_broadcast (&t->cond);
  pthread_mutex_unlock (&t->lock);
  return NULL;
}

int
test_thread_start (struct test_thread *t, int (*fn) (void *), void *arg)
{
  int r;

  t->fn = fn;
  t->arg = arg;
  t->done = false;
  t->joined = false;
  t->result = 0;
  t->err = 0;
  pthread_mutex_init (&t->lock, NULL);
  cond_init_monotonic (&t->cond);
  r = pthread_create (&t->thread, NULL, test_thread_main, t);
  if (r != 0) {
    pthread_mutex_destroy (&t->lock);
    pthread_cond_destroy (&t->cond);
    t->joined = true;
    errno = r;
    return -1;
  }
  return 0;
}

bool
test_thread_done (struct test_thread *t)
{
  bool done;

  if (t->joined)                /* the lock is gone with the thread */
    return t->done;
  pthread_mutex_lock (&t->lock);
  done = t->done;
  pthread_mutex_unlock (&t->lock);
  return done;
}

bool
test_thread_wait (struct test_thread *t)
{
  uint64_t until = monotonic_ns () + TIMEOUT_NS;
  bool done;

  if (t->joined)
    return t->done;
  pthread_mutex_lock (&t->lock);
  while (!t->done && cond_wait_until (&t->cond, &t->lock, until) == 0)
    ;
  done = t->done;
  pthread_mutex_unlock (&t->lock);
  if (done)
    test_thread_join (t);
  return done;
}

void
test_thread_join (struct test_thread *t)
{
  if (t->joined)
    return;
  pthread_join (t->thread, NULL);
  pthread_mutex_destroy (&t->lock);
  pthread_cond_destroy (&t->cond);
  t->joined = true;
}

/* ------------------------------------------------------------ bytes */

bool
test_buffer_is (const void *buf, int c, size_t count, uint64_t offset,
                const char *what)
{
  const unsigned char *p = buf;

  if (bytes_all (buf, c, count))
    return true;
  for (size_t i = 0; i < count; i++)
    if (p[i] != (unsigned char) c) {
      printf ("# %s: byte %#" PRIx64 " is %#x, expected %#x\n",
              what, offset + i, p[i], (unsigned char) c);
      return false;
    }
  return true;
}

bool
test_bytes_equal (const void *got, const void *want, size_t n,
                  const char *what)
{
  const unsigned char *g = got, *w = want;

  if (memcmp (got, want, n) == 0)
    return true;
  for (size_t i = 0; i < n; i++)
    if (g[i] != w[i]) {
      printf ("# %s: byte %#zx is %#x, expected %#x\n", what, i, g[i], w[i]);
      return false;
    }
  return true;
}

uint32_t
test_extent_type_at (const struct extent_list *l, uint64_t pos)
{
  for (size_t i = 0; i < l->len; i++)
    if (pos >= l->v[i].offset && pos - l->v[i].offset < l->v[i].length)
      return l->v[i].type;
  return UINT32_MAX;
}

bool
test_extents_contiguous (const struct extent_list *l, uint64_t offset,
                         uint64_t count)
{
  uint64_t pos = offset;

  if (l->len == 0) {
    printf ("# no extents\n");
    return false;
  }
  for (size_t i = 0; i < l->len; i++) {
    if (l->v[i].offset != pos || l->v[i].length == 0) {
      printf ("# extent %zu at %" PRIu64 "+%" PRIu64 ", expected at %"
              PRIu64 "\n", i, l->v[i].offset, l->v[i].length, pos);
      return false;
    }
    pos += l->v[i].length;
  }
  if (pos > offset + count) {
    printf ("# extents run to %" PRIu64 ", past %" PRIu64 "\n",
            pos, offset + count);
    return false;
  }
  return true;
}

void
test_print_extents (const struct extent_list *l)
{
  for (size_t i = 0; i < l->len; i++)
    printf ("# extent %" PRIu64 "+%" PRIu64 " type %" PRIu32 "\n",
            l->v[i].offset, l->v[i].length, l->v[i].type);
}

/* ------------------------------------------------------------ rig */

struct queue_config
test_config (uint64_t delay_ns, uint32_t thresh)
{
  struct queue_config c;

  queue_config_defaults (&c);
  c.unplug_delay_ns = delay_ns;
  c.unplug_thresh = thresh;
  return c;
}

struct test_backend *
test_rig_backend (struct test_rig *r, uint64_t size)
{
  struct test_backend *tb;

  if (r->n == TEST_MAX_DISKS || (tb = test_backend_new (size)) == NULL)
    return NULL;
  r->d[r->n++].tb = tb;
  return tb;
}

/* Timer watchers join the loop before it runs: queues first. */
bool
test_rig_start (struct test_rig *r, const struct queue_config *cfg)
{
  char name[16];

  r->ts = timer_service_new ();
  if (r->ts == NULL)
    return false;
  for (unsigned i = 0; i < r->n; i++) {
    snprintf (name, sizeof name, "disk%u", i);
    r->d[i].q = queue_new (name, test_backend_get (r->d[i].tb), cfg);
    if (r->d[i].q == NULL || queue_start (r->d[i].q, r->ts) == -1)
      return false;
  }
  return timer_service_start (r->ts) == 0;
}

bool
test_rig_one (struct test_rig *r, const struct queue_config *cfg,
              uint64_t size, unsigned async, unsigned writers)
{
  const struct test_shape shape = { .async = async, .writers = writers };

  return test_rig_shaped (r, cfg, size, &shape);
}

bool
test_rig_shaped (struct test_rig *r, const struct queue_config *cfg,
                 uint64_t size, const struct test_shape *shape)
{
  struct test_backend *tb;

  memset (r, 0, sizeof *r);
  tb = test_rig_backend (r, size);
  if (tb == NULL
      || (shape->async && test_backend_set_async (tb, shape->async) == -1))
    return false;
  if (shape->writers)
    test_backend_get (tb)->max_writers = shape->writers;
  if (shape->fua)
    test_backend_set_fua (tb);
  if (shape->writes_to_memory)
    test_backend_set_writes_to_memory (tb);
  if (shape->buffer_align > 1)
    test_backend_get (tb)->buffer_align = shape->buffer_align;
  test_backend_get (tb)->reads_behind_writes = shape->reads_behind_writes;
  return test_rig_start (r, cfg);
}

/* Gates open first so the drain can finish; the timer loop goes before
 * the queues are freed, since a cancelled timer may still be pending in
 * it and point into its queue.
 */
void
test_rig_stop (struct test_rig *r)
{
  for (unsigned i = 0; i < r->n; i++)
    test_backend_release_all (r->d[i].tb);
  for (unsigned i = 0; i < r->n; i++)
    if (r->d[i].q)
      queue_stop (r->d[i].q);
  timer_service_free (r->ts);
  for (unsigned i = 0; i < r->n; i++) {
    if (r->d[i].q)
      queue_free (r->d[i].q);           /* closes the test backend */
    else
      backend_close (test_backend_get (r->d[i].tb));
  }
  memset (r, 0, sizeof *r);
}

struct queue_stats
test_stats (struct queue *q)
{
  struct queue_stats s;

  queue_stats_snapshot (q, &s);
  return s;
}

int
test_write_fill (struct queue *q, struct session *s, int c, uint64_t count,
                 uint64_t offset, unsigned flags)
{
  unsigned char *buf = malloc (count ? count : 1);
  int r;

  if (buf == NULL)
    return -1;
  memset (buf, c, count);
  r = queue_pwrite (q, s, buf, count, offset, flags);
  free (buf);
  return r;
}

bool
test_reads_as (int (*read) (void *ctx, void *buf, size_t count,
                            uint64_t offset),
               void *ctx, int c, uint64_t count, uint64_t offset,
               const char *what)
{
  unsigned char *buf = malloc (count ? count : 1);
  bool ok;

  if (buf == NULL)
    return false;
  ok = read (ctx, buf, count, offset) == 0
    && test_buffer_is (buf, c, count, offset, what);
  free (buf);
  return ok;
}

static int
read_queue (void *q, void *buf, size_t count, uint64_t offset)
{
  return queue_pread (q, buf, count, offset);
}

void
test_unplug_now (struct queue *q)
{
  lock_acquire (&q->lock);
  queue_unplug_locked (q, UNPLUG_TIMER);
  queue_kick_dispatcher (q);
  lock_release (&q->lock);
}

bool
test_queue_reads_as (struct queue *q, int c, uint64_t count,
                     uint64_t offset)
{
  return test_reads_as (read_queue, q, c, count, offset, "queue read");
}

struct test_mode {
  unsigned async, writers;
};

/* Every case in each of modes[0..nr_modes); *async and *writers (writers
 * may be NULL when every mode has 0 writers) are 0 after.
 */
static void
run_modes (void (*const *cases) (void), size_t n, unsigned *async,
           unsigned *writers, const struct test_mode *modes,
           size_t nr_modes)
{
  for (size_t m = 0; m < nr_modes; m++) {
    *async = modes[m].async;
    if (writers)
      *writers = modes[m].writers;
    for (size_t i = 0; i < n; i++)
      cases[i] ();
  }
  *async = 0;
  if (writers)
    *writers = 0;
}

void
test_each_mode (void (*const *cases) (void), size_t n,
                unsigned *async, unsigned *writers,
                unsigned async_n, unsigned writers_n)
{
  const struct test_mode modes[] = {
    { 0, 0 }, { async_n, 0 }, { 0, writers_n },
  };

  run_modes (cases, n, async, writers, modes, sizeof modes / sizeof modes[0]);
}

void
test_count_breach (void *arg, const char *msg)
{
  _Atomic unsigned *breaches = arg;

  printf ("# backend contract broken: %s\n", msg);
  atomic_fetch_add (breaches, 1);
}

void
test_sync_then_async (void (*const *cases) (void), size_t n,
                      unsigned *async, unsigned async_n)
{
  const struct test_mode modes[] = { { 0, 0 }, { async_n, 0 } };

  run_modes (cases, n, async, NULL, modes, sizeof modes / sizeof modes[0]);
}

int
test_read_job_run (void *job)
{
  struct test_read_job *j = job;

  return queue_pread (j->q, j->buf, j->count, j->offset) == 0 ? 0 : errno;
}

int
test_write_job_run (void *job)
{
  struct test_write_job *j = job;

  return test_write_fill (j->q, NULL, j->c, j->count, j->offset, j->flags);
}
