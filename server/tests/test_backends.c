/* plugq tests: the counting, gating, failing backend wrapper, and the
 * fixtures the queue and linear tests share.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "tap.h"
#include "test_backends.h"
#include "timer_service.h"

struct tb_kind {
  uint64_t entered;
  uint64_t completed;
  bool gate_shut;
  unsigned tokens;              /* calls the shut gate still lets through */
  unsigned fail_next;
  int fail_errno;
};

struct test_backend {
  struct backend b;             /* first: what the queue calls */
  struct backend *inner;        /* the real memory backend */
  pthread_mutex_t lock;
  pthread_cond_t changed;       /* any count or gate moved */
  struct tb_kind kind[TB_OPS];
  struct tb_call *log;
  size_t log_len, log_cap;

  /* Async mode: submitted operations wait in a ring for a worker. */
  pthread_cond_t work;
  struct backend_io **ring;     /* max_in_flight slots */
  unsigned ring_head, ring_len;
  pthread_t *workers;
  unsigned nr_workers;
  bool stopping;
};

static struct test_backend *
to_tb (struct backend *b)
{
  return (struct test_backend *) b;
}

/* ------------------------------------------------------------ timing */

static struct timespec
deadline_after_ms (unsigned ms)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (long) (ms % 1000) * 1000000;
  if (ts.tv_nsec >= 1000000000) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000;
  }
  return ts;
}

void
test_poll_step (void)
{
  struct timespec ts = { 0, 1000000 };

  nanosleep (&ts, NULL);
}

/* ------------------------------------------------------------ calls */

/* Logs the call, waits at the gate, and says whether to fail it. */
static int
call_begin (struct test_backend *tb, const struct tb_call *call)
{
  struct tb_kind *k = &tb->kind[call->op];
  int err = 0;

  pthread_mutex_lock (&tb->lock);
  if (tb->log_len == tb->log_cap) {
    size_t cap = tb->log_cap ? tb->log_cap * 2 : 64;
    struct tb_call *v = realloc (tb->log, cap * sizeof *v);

    if (v) {
      tb->log = v;
      tb->log_cap = cap;
    }
  }
  if (tb->log_len < tb->log_cap) {
    struct tb_call *logged = &tb->log[tb->log_len++];

    *logged = *call;
    logged->thread = pthread_self ();
    logged->busy = 0;
    for (int op = 0; op < TB_OPS; op++)
      logged->busy += tb->kind[op].entered - tb->kind[op].completed;
  }
  k->entered++;
  pthread_cond_broadcast (&tb->changed);
  while (k->gate_shut && k->tokens == 0)
    pthread_cond_wait (&tb->changed, &tb->lock);
  if (k->gate_shut)
    k->tokens--;
  if (k->fail_next > 0) {
    k->fail_next--;
    err = k->fail_errno;
  }
  pthread_mutex_unlock (&tb->lock);
  return err;
}

static int
call_end (struct test_backend *tb, enum tb_op op, int r)
{
  int saved_errno = errno;

  pthread_mutex_lock (&tb->lock);
  tb->kind[op].completed++;
  pthread_cond_broadcast (&tb->changed);
  pthread_mutex_unlock (&tb->lock);
  errno = saved_errno;
  return r;
}

/* A call the test chose to fail never reaches the memory backend. */
static int
fail_with (int err)
{
  errno = err;
  return -1;
}

static int
tb_pread (struct backend *b, void *buf, size_t count, uint64_t offset)
{
  struct test_backend *tb = to_tb (b);
  struct backend *in = tb->inner;
  struct tb_call c = { .op = TB_PREAD, .offset = offset, .count = count };
  int err = call_begin (tb, &c);

  return call_end (tb, c.op, err ? fail_with (err)
                   : in->ops->pread (in, buf, count, offset));
}

static int
tb_pwritev (struct backend *b, const struct iovec *iov, int iovcnt,
            uint64_t offset)
{
  struct test_backend *tb = to_tb (b);
  struct backend *in = tb->inner;
  struct tb_call c = { .op = TB_PWRITEV, .offset = offset, .iovcnt = iovcnt };
  int err;

  for (int i = 0; i < iovcnt; i++)
    c.count += iov[i].iov_len;
  err = call_begin (tb, &c);
  return call_end (tb, c.op, err ? fail_with (err)
                   : in->ops->pwritev (in, iov, iovcnt, offset));
}

static int
tb_zero (struct backend *b, uint64_t count, uint64_t offset, bool may_trim)
{
  struct test_backend *tb = to_tb (b);
  struct backend *in = tb->inner;
  struct tb_call c = { .op = TB_ZERO, .offset = offset, .count = count,
                       .may_trim = may_trim };
  int err = call_begin (tb, &c);

  return call_end (tb, c.op, err ? fail_with (err)
                   : in->ops->zero (in, count, offset, may_trim));
}

static int
tb_trim (struct backend *b, uint64_t count, uint64_t offset)
{
  struct test_backend *tb = to_tb (b);
  struct backend *in = tb->inner;
  struct tb_call c = { .op = TB_TRIM, .offset = offset, .count = count };
  int err = call_begin (tb, &c);

  return call_end (tb, c.op, err ? fail_with (err)
                   : in->ops->trim (in, count, offset));
}

static int
tb_flush (struct backend *b)
{
  struct test_backend *tb = to_tb (b);
  struct backend *in = tb->inner;
  struct tb_call c = { .op = TB_FLUSH };
  int err = call_begin (tb, &c);

  return call_end (tb, c.op, err ? fail_with (err) : in->ops->flush (in));
}

static int
tb_extents (struct backend *b, uint64_t count, uint64_t offset,
            struct extent_list *list)
{
  struct test_backend *tb = to_tb (b);
  struct backend *in = tb->inner;
  struct tb_call c = { .op = TB_EXTENTS, .offset = offset, .count = count };
  int err = call_begin (tb, &c);

  return call_end (tb, c.op, err ? fail_with (err)
                   : in->ops->extents (in, count, offset, list));
}

static int
tb_cache (struct backend *b, uint64_t count, uint64_t offset)
{
  struct test_backend *tb = to_tb (b);
  struct backend *in = tb->inner;
  struct tb_call c = { .op = TB_CACHE, .offset = offset, .count = count };
  int err = call_begin (tb, &c);

  if (err)
    return call_end (tb, c.op, fail_with (err));
  return call_end (tb, c.op,
                   in->ops->cache ? in->ops->cache (in, count, offset) : 0);
}

static void async_stop (struct test_backend *);

static void
tb_close (struct backend *b)
{
  struct test_backend *tb = to_tb (b);

  async_stop (tb);
  backend_close (tb->inner);
  pthread_mutex_destroy (&tb->lock);
  pthread_cond_destroy (&tb->changed);
  pthread_cond_destroy (&tb->work);
  free (tb->ring);
  free (tb->workers);
  free (tb->log);
  free (tb->b.description);
  free (tb);
}

static const struct backend_ops test_ops = {
  .kind = "test",
  .pread = tb_pread,
  .pwritev = tb_pwritev,
  .zero = tb_zero,
  .trim = tb_trim,
  .flush = tb_flush,
  .extents = tb_extents,
  .cache = tb_cache,
  .close = tb_close,
};

/* ------------------------------------------------------------ async */

/* One submitted operation, through the same counting, gate and failure
 * path as a synchronous call.
 */
static int
async_run (struct test_backend *tb, const struct backend_io *io)
{
  switch (io->kind) {
  case BACKEND_WRITE:
    return tb_pwritev (&tb->b, io->iov, io->iovcnt, io->offset);
  case BACKEND_ZERO:
    return tb_zero (&tb->b, io->count, io->offset, io->may_trim);
  case BACKEND_TRIM:
    return tb_trim (&tb->b, io->count, io->offset);
  }
  errno = EINVAL;
  return -1;
}

/* A worker takes the oldest submitted operation; several workers run
 * operations at the same time, so they may finish in any order.
 */
static void *
async_worker (void *arg)
{
  struct test_backend *tb = arg;
  struct backend_io *io;
  int err;

  pthread_mutex_lock (&tb->lock);
  for (;;) {
    while (tb->ring_len == 0 && !tb->stopping)
      pthread_cond_wait (&tb->work, &tb->lock);
    if (tb->ring_len == 0)
      break;
    io = tb->ring[tb->ring_head];
    tb->ring_head = (tb->ring_head + 1) % tb->b.max_in_flight;
    tb->ring_len--;
    pthread_mutex_unlock (&tb->lock);
    err = async_run (tb, io) == -1 ? errno : 0;
    io->done (io, err);         /* takes the queue lock: not ours */
    pthread_mutex_lock (&tb->lock);
  }
  pthread_mutex_unlock (&tb->lock);
  return NULL;
}

static int
tb_start (struct backend *b)
{
  struct test_backend *tb = to_tb (b);

  for (; tb->nr_workers < tb->b.max_in_flight; tb->nr_workers++)
    if (pthread_create (&tb->workers[tb->nr_workers], NULL, async_worker,
                        tb) != 0) {
      errno = EAGAIN;
      return -1;
    }
  return 0;
}

static int
tb_submit (struct backend *b, struct backend_io *io)
{
  struct test_backend *tb = to_tb (b);
  int r = 0;

  pthread_mutex_lock (&tb->lock);
  /* The queue promises never to exceed max_in_flight. */
  if (tb->ring_len == tb->b.max_in_flight || tb->nr_workers == 0) {
    errno = EBUSY;
    r = -1;
  }
  else {
    tb->ring[(tb->ring_head + tb->ring_len++) % tb->b.max_in_flight] = io;
    pthread_cond_signal (&tb->work);
  }
  pthread_mutex_unlock (&tb->lock);
  return r;
}

static void
async_stop (struct test_backend *tb)
{
  pthread_mutex_lock (&tb->lock);
  tb->stopping = true;
  pthread_cond_broadcast (&tb->work);
  pthread_cond_broadcast (&tb->changed);
  pthread_mutex_unlock (&tb->lock);
  for (unsigned i = 0; i < tb->nr_workers; i++)
    pthread_join (tb->workers[i], NULL);
  tb->nr_workers = 0;
}

static const struct backend_ops test_async_ops = {
  .kind = "test-async",
  .pread = tb_pread,
  .pwritev = tb_pwritev,
  .zero = tb_zero,
  .trim = tb_trim,
  .flush = tb_flush,
  .extents = tb_extents,
  .cache = tb_cache,
  .close = tb_close,
  .start = tb_start,
  .submit = tb_submit,
};

int
test_backend_set_async (struct test_backend *tb, unsigned n)
{
  tb->ring = calloc (n, sizeof *tb->ring);
  tb->workers = calloc (n, sizeof *tb->workers);
  if (tb->ring == NULL || tb->workers == NULL)
    return -1;
  tb->b.ops = &test_async_ops;
  tb->b.max_in_flight = n;
  return 0;
}

/* ------------------------------------------------------------ setup */

struct test_backend *
test_backend_new (uint64_t size)
{
  struct test_backend *tb = calloc (1, sizeof *tb);

  if (tb == NULL)
    return NULL;
  tb->inner = backend_memory_new (size);
  if (tb->inner == NULL) {
    free (tb);
    return NULL;
  }
  tb->b = *tb->inner;
  tb->b.ops = &test_ops;
  /* One writer at a time unless a test asks for more: the memory
   * backend's own max_writers would make every "synchronous" case run
   * with several dispatch tokens.
   */
  tb->b.max_writers = 1;
  if (asprintf (&tb->b.description, "test over %s",
                tb->inner->description) == -1) {
    backend_close (tb->inner);
    free (tb);
    return NULL;
  }
  pthread_mutex_init (&tb->lock, NULL);
  cond_init_monotonic (&tb->changed);
  pthread_cond_init (&tb->work, NULL);
  return tb;
}

struct backend *
test_backend_get (struct test_backend *tb)
{
  return &tb->b;
}

/* ------------------------------------------------------------ watching */

static uint64_t
read_counter (struct test_backend *tb, const uint64_t *counter)
{
  uint64_t v;

  pthread_mutex_lock (&tb->lock);
  v = *counter;
  pthread_mutex_unlock (&tb->lock);
  return v;
}

uint64_t
test_backend_entered (struct test_backend *tb, enum tb_op op)
{
  return read_counter (tb, &tb->kind[op].entered);
}

uint64_t
test_backend_count (struct test_backend *tb, enum tb_op op)
{
  return read_counter (tb, &tb->kind[op].completed);
}

static bool
wait_counter (struct test_backend *tb, const uint64_t *counter, uint64_t n)
{
  struct timespec until = deadline_after_ms (TB_TIMEOUT_MS);
  bool ok;

  pthread_mutex_lock (&tb->lock);
  while (*counter < n
         && pthread_cond_timedwait (&tb->changed, &tb->lock, &until) == 0)
    ;
  ok = *counter >= n;
  pthread_mutex_unlock (&tb->lock);
  return ok;
}

bool
test_backend_wait_entered (struct test_backend *tb, enum tb_op op,
                           uint64_t n)
{
  return wait_counter (tb, &tb->kind[op].entered, n);
}

bool
test_backend_wait_count (struct test_backend *tb, enum tb_op op, uint64_t n)
{
  return wait_counter (tb, &tb->kind[op].completed, n);
}

size_t
test_backend_calls (struct test_backend *tb, enum tb_op op,
                    struct tb_call *out, size_t max)
{
  size_t n = 0;

  pthread_mutex_lock (&tb->lock);
  for (size_t i = 0; i < tb->log_len; i++) {
    if (op != TB_OPS && tb->log[i].op != op)
      continue;
    if (n < max)
      out[n] = tb->log[i];
    n++;
  }
  pthread_mutex_unlock (&tb->lock);
  return n;
}

bool
test_backend_saw (struct test_backend *tb, enum tb_op op, uint64_t offset)
{
  bool saw = false;

  pthread_mutex_lock (&tb->lock);
  for (size_t i = 0; !saw && i < tb->log_len; i++)
    saw = tb->log[i].op == op && tb->log[i].offset == offset;
  pthread_mutex_unlock (&tb->lock);
  return saw;
}

/* ------------------------------------------------------------ steering */

void
test_backend_block (struct test_backend *tb, enum tb_op op)
{
  pthread_mutex_lock (&tb->lock);
  tb->kind[op].gate_shut = true;
  tb->kind[op].tokens = 0;
  pthread_mutex_unlock (&tb->lock);
}

void
test_backend_step (struct test_backend *tb, enum tb_op op, unsigned n)
{
  pthread_mutex_lock (&tb->lock);
  tb->kind[op].tokens += n;
  pthread_cond_broadcast (&tb->changed);
  pthread_mutex_unlock (&tb->lock);
}

void
test_backend_release (struct test_backend *tb, enum tb_op op)
{
  pthread_mutex_lock (&tb->lock);
  tb->kind[op].gate_shut = false;
  tb->kind[op].tokens = 0;
  pthread_cond_broadcast (&tb->changed);
  pthread_mutex_unlock (&tb->lock);
}

void
test_backend_release_all (struct test_backend *tb)
{
  pthread_mutex_lock (&tb->lock);
  for (int op = 0; op < TB_OPS; op++) {
    tb->kind[op].gate_shut = false;
    tb->kind[op].tokens = 0;
    tb->kind[op].fail_next = 0;
  }
  pthread_cond_broadcast (&tb->changed);
  pthread_mutex_unlock (&tb->lock);
}

void
test_backend_fail (struct test_backend *tb, enum tb_op op, unsigned n,
                   int errnum)
{
  pthread_mutex_lock (&tb->lock);
  tb->kind[op].fail_next = n;
  tb->kind[op].fail_errno = errnum;
  pthread_mutex_unlock (&tb->lock);
}

int
test_backend_read (struct test_backend *tb, void *buf, size_t count,
                   uint64_t offset)
{
  return tb->inner->ops->pread (tb->inner, buf, count, offset);
}

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

bool
test_backend_holds (struct test_backend *tb, int c, size_t count,
                    uint64_t offset)
{
  unsigned char *buf = malloc (count ? count : 1);
  bool ok;

  if (buf == NULL)
    return false;
  ok = test_backend_read (tb, buf, count, offset) == 0
    && test_buffer_is (buf, c, count, offset, "backend");
  free (buf);
  return ok;
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
  struct timespec until = deadline_after_ms (TB_TIMEOUT_MS);
  bool done;

  if (t->joined)
    return t->done;
  pthread_mutex_lock (&t->lock);
  while (!t->done
         && pthread_cond_timedwait (&t->cond, &t->lock, &until) == 0)
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
  struct test_backend *tb;

  memset (r, 0, sizeof *r);
  tb = test_rig_backend (r, size);
  if (tb && writers)
    test_backend_get (tb)->max_writers = writers;
  return tb && (async == 0 || test_backend_set_async (tb, async) == 0)
    && test_rig_start (r, cfg);
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
test_queue_reads_as (struct queue *q, int c, uint64_t count,
                     uint64_t offset)
{
  unsigned char *buf = malloc (count ? count : 1);
  bool ok;

  if (buf == NULL)
    return false;
  ok = queue_pread (q, buf, count, offset) == 0
    && test_buffer_is (buf, c, count, offset, "queue read");
  free (buf);
  return ok;
}
