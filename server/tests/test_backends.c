/* plugq tests: the wrapper backend (test_backends.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <config.h>

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "fixtures.h"
#include "common/lock.h"
#include "common/minmax.h"
#include "test_backends.h"

struct tb_kind {
  uint64_t entered;
  uint64_t completed;
  bool gate_shut;
  unsigned tokens;              /* calls the shut gate still lets through */
  unsigned fail_next;
  int fail_errno;
  uint64_t failed;              /* calls failed on purpose */
};

/* The seeded fault mode (test_backend_faults), under tb->lock. */
struct tb_fault_state {
  bool on;
  struct tb_faults cfg;
  uint64_t rng;
  bool failing;                 /* in a failing stretch */
  unsigned left;                /* changing calls left in the stretch */
  int errnum;                   /* the failing stretch's errno */
};

/* A range being changed: a synchronous call's (io NULL) or a submitted
 * operation's.  A free slot has count 0 and io NULL.
 */
struct tb_slot {
  struct backend_io *io;
  uint64_t offset, count;
  uint64_t write_bytes;         /* count, for a write's data */
  uint64_t seq;                 /* submission order */
  bool picked;                  /* a worker is running it */
  /* Passed through to an inner backend with threads of its own: */
  struct test_backend *tb;
  struct tb_call call;          /* as logged */
  struct backend_io inner_io;   /* what the inner backend was handed */
  uint8_t *before;              /* contents_before */
};

struct test_backend {
  struct backend b;             /* first: what the queue calls */
  struct backend *inner;        /* the real backend: memory, or any */
  struct lock lock;
  pthread_cond_t changed;       /* any count or gate moved */
  struct tb_kind kind[TB_OPS];
  struct tb_call *log;
  size_t log_len, log_cap;
  enum tb_trim trim;
  bool jitter;
  uint64_t rng;                 /* under lock */
  struct tb_fault_state faults;

  /* Contract checks: fault is NULL until test_backend_check_contract. */
  struct tb_contract contract;
  _Atomic int writers;          /* synchronous changing calls running */
  _Atomic int flushes;          /* backend flushes running */
  _Atomic bool stopped;         /* queue_stop returned */
  struct tb_slot *running;      /* under lock: max_writers slots */
  uint64_t write_bytes;         /* under lock: of writes running now */
  uint64_t write_bytes_max;     /* under lock: the most at once */
  uint8_t *dirty;               /* under lock: changed since a flush began */

  /* Async mode: submitted operations, pending or running. */
  pthread_cond_t work;
  struct tb_slot *slots;        /* max_in_flight of them */
  unsigned nr_ops;              /* submitted, not yet done */
  unsigned nr_pending;          /* of which no worker picked yet */
  uint64_t next_seq;
  pthread_t *workers;
  unsigned nr_workers, want_workers;
  bool started, stopping;
  /* The inner backend is asynchronous itself: submitted operations go
   * to it as they are, and no worker of ours runs them.
   */
  bool pass_through;
};

/* What a call carries besides its tb_call. */
struct tb_args {
  void *buf;                    /* pread */
  const struct iovec *iov;      /* pwritev */
  struct extent_list *list;     /* extents */
};

static const char *const op_names[TB_OPS] = {
  [TB_PREAD] = "read", [TB_PWRITEV] = "write", [TB_ZERO] = "zero",
  [TB_TRIM] = "trim", [TB_FLUSH] = "flush", [TB_EXTENTS] = "extents",
  [TB_CACHE] = "cache",
};

static struct test_backend *
to_tb (struct backend *b)
{
  return (struct test_backend *) b;
}

/* Under tb->lock: xorshift64*, enough to scatter timings. */
static uint64_t
next_random (struct test_backend *tb)
{
  lock_assert_held (&tb->lock);
  tb->rng ^= tb->rng >> 12;
  tb->rng ^= tb->rng << 25;
  tb->rng ^= tb->rng >> 27;
  return tb->rng * UINT64_C (2685821657736338717);
}

static unsigned
max_writers (const struct test_backend *tb)
{
  return MAX (tb->b.max_writers, 1u);
}

static uint64_t
iov_total (const struct iovec *iov, int iovcnt)
{
  uint64_t total = 0;

  for (int i = 0; i < iovcnt; i++)
    total += iov[i].iov_len;
  return total;
}

/* ------------------------------------------------------------ contract */

__attribute__ ((format (printf, 2, 3)))
static void
tb_fault (struct test_backend *tb, const char *fmt, ...)
{
  char msg[512];
  va_list ap;

  if (tb->contract.fault == NULL)
    return;
  va_start (ap, fmt);
  vsnprintf (msg, sizeof msg, fmt, ap);
  va_end (ap);
  tb->contract.fault (tb->contract.arg, msg);
}

/* Checks for every operation that changes the disk. */
static void
check_range (struct test_backend *tb, const char *what, uint64_t count,
             uint64_t offset)
{
  uint32_t a = tb->b.limits.minimum;

  if (atomic_load (&tb->stopped))
    tb_fault (tb, "backend %s 0x%" PRIx64 "+%" PRIu64
              " after queue_stop returned", what, offset, count);
  if (count == 0 || offset > tb->b.size || count > tb->b.size - offset)
    tb_fault (tb, "backend %s 0x%" PRIx64 "+%" PRIu64
              " outside the disk (size %" PRIu64 ")",
              what, offset, count, tb->b.size);
  if (a > 1 && ((offset | count) & (a - 1)))
    tb_fault (tb, "backend %s 0x%" PRIx64 "+%" PRIu64
              " not aligned to the minimum block size %" PRIu32,
              what, offset, count, a);
}

/* Whether every vector starts on the backend's buffer_align, as O_DIRECT
 * wants (the file backend bounces the rest, at the cost of a copy).
 */
static bool
vectors_aligned (const struct backend *b, const struct iovec *iov,
                 int iovcnt)
{
  uintptr_t a = b->buffer_align > 1 ? b->buffer_align : 1;

  for (int i = 0; i < iovcnt; i++)
    if ((uintptr_t) iov[i].iov_base & (a - 1))
      return false;
  return true;
}

/* A (possibly merged) write must fit the limits the backend gave. */
static void
check_write (struct test_backend *tb, const struct iovec *iov, int iovcnt,
             uint64_t offset)
{
  uint64_t total = iov_total (iov, iovcnt);

  check_range (tb, "write", total, offset);
  if (iovcnt < 1 || (tb->b.max_iov > 0 && iovcnt > tb->b.max_iov))
    tb_fault (tb, "write with %d vectors (max-iov %d)", iovcnt,
              tb->b.max_iov);
  if (tb->b.max_write && total > tb->b.max_write)
    tb_fault (tb, "write of %" PRIu64 " bytes at 0x%" PRIx64
              ": more than max_write %" PRIu32, total, offset,
              tb->b.max_write);
  if (iovcnt > 1 && tb->contract.no_merging)
    tb_fault (tb, "write merged %d requests at 0x%" PRIx64
              " with unplug-thresh=1 (no merging)", iovcnt, offset);
  if (iovcnt > 1 && total > tb->contract.merge_limit)
    tb_fault (tb, "merged write of %" PRIu64 " bytes at 0x%" PRIx64
              ": more than max-merge %" PRIu64, total, offset,
              tb->contract.merge_limit);
}

/* Under tb->lock: operations in flight together never overlap (queue.c
 * promises it, and a backend may run them in any order).
 */
static void
check_no_overlap (struct test_backend *tb, const struct tb_slot *slots,
                  unsigned n, uint64_t offset, uint64_t count)
{
  lock_assert_held (&tb->lock);
  for (unsigned i = 0; i < n; i++) {
    const struct tb_slot *o = &slots[i];

    if (o->count && offset < o->offset + o->count
        && o->offset < offset + count)
      tb_fault (tb, "backend operation 0x%" PRIx64 "+%" PRIu64
                " submitted while 0x%" PRIx64 "+%" PRIu64
                " over the same bytes is in flight",
                offset, count, o->offset, o->count);
  }
}

/* The backend contract: writes, zeroes, trims and flushes come one at a
 * time (from whichever thread holds the disk's dispatch token), or up to
 * max_writers at a time over ranges that never overlap, unless the
 * backend takes asynchronous operations.  The slot the call runs in, or
 * -1 for a flush or when nothing is checked.
 */
/* Under tb->lock: n more (or, negative, fewer) bytes of writes at the
 * backend at once.
 */
static void
count_write_bytes (struct test_backend *tb, int64_t n)
{
  lock_assert_held (&tb->lock);
  tb->write_bytes += n;
  if (tb->write_bytes > tb->write_bytes_max)
    tb->write_bytes_max = tb->write_bytes;
}

static int
writer_enter (struct test_backend *tb, const struct tb_call *c)
{
  unsigned limit = max_writers (tb);
  int running = atomic_fetch_add (&tb->writers, 1);
  int slot = -1;

  if (running >= (int) limit)
    tb_fault (tb, "backend %s with %d backend calls already running"
              " (max_writers %u)", op_names[c->op], running, limit);
  if (c->count == 0 || tb->running == NULL)
    return -1;                  /* a flush: no range to keep apart */
  lock_acquire (&tb->lock);
  check_no_overlap (tb, tb->running, limit, c->offset, c->count);
  for (unsigned i = 0; i < limit && slot == -1; i++)
    if (tb->running[i].count == 0) {
      tb->running[i] = (struct tb_slot) {
        .offset = c->offset, .count = c->count,
        .write_bytes = c->op == TB_PWRITEV ? c->count : 0,
      };
      count_write_bytes (tb, tb->running[i].write_bytes);
      slot = (int) i;
    }
  lock_release (&tb->lock);
  return slot;
}

static void
writer_leave (struct test_backend *tb, int slot)
{
  if (slot >= 0) {
    lock_acquire (&tb->lock);
    count_write_bytes (tb, -(int64_t) tb->running[slot].write_bytes);
    tb->running[slot].count = 0;
    lock_release (&tb->lock);
  }
  atomic_fetch_sub (&tb->writers, 1);
}

/* After the operation, before the queue hears of it.  before: what the
 * range held until then, or NULL when every byte counts as changed.
 */
static void
mark_dirty (struct test_backend *tb, uint64_t count, uint64_t offset,
            const uint8_t *before)
{
  uint8_t *now = NULL;

  if (tb->dirty == NULL || offset >= tb->b.size)
    return;
  count = MIN (count, tb->b.size - offset);
  if (before && ((now = malloc (count)) == NULL
                 || tb->inner->ops->pread (tb->inner, now, count,
                                           offset) == -1)) {
    free (now);
    now = NULL;
    before = NULL;
  }
  lock_acquire (&tb->lock);
  for (uint64_t i = 0; before == NULL && i < count; i++)
    tb->dirty[offset + i] = 1;
  for (uint64_t i = 0; before && i < count; i++)
    tb->dirty[offset + i] |= before[i] != now[i];
  lock_release (&tb->lock);
  free (now);
}

/* A read-modify-write puts back bytes of a partial block as it read
 * them, and on a real disk the block is written whole: on a backend
 * with min_block, a byte counts as changed only if its value did.  The
 * range's contents before the call, or NULL where every byte counts.
 */
static uint8_t *
contents_before (struct test_backend *tb, uint64_t count, uint64_t offset)
{
  uint8_t *before;

  if (tb->b.min_block <= 1 || tb->dirty == NULL || offset >= tb->b.size)
    return NULL;
  count = MIN (count, tb->b.size - offset);
  before = malloc (count);
  if (before && tb->inner->ops->pread (tb->inner, before, count,
                                       offset) == -1) {
    free (before);
    before = NULL;
  }
  return before;
}

/* A backend with min_block takes only whole blocks, as O_DIRECT does:
 * anything else is refused with EINVAL, and is a breach, since the queue
 * must make every call whole blocks (queue_align.c).
 */
static bool
refuses_unaligned (struct test_backend *tb, const struct tb_call *c)
{
  uint32_t a = tb->b.min_block;

  if (a <= 1 || c->op == TB_FLUSH || c->op == TB_EXTENTS
      || c->op == TB_CACHE || ((c->offset | c->count) & (a - 1)) == 0)
    return false;
  tb_fault (tb, "backend %s 0x%" PRIx64 "+%" PRIu64 " not whole blocks"
            " of min_block %" PRIu32, op_names[c->op], c->offset, c->count,
            a);
  return true;
}

/* A FUA operation's range is durable once it completes: it no longer
 * waits for a flush.
 */
static void
mark_durable (struct test_backend *tb, uint64_t count, uint64_t offset)
{
  if (tb->dirty == NULL || offset >= tb->b.size)
    return;
  count = MIN (count, tb->b.size - offset);
  lock_acquire (&tb->lock);
  memset (&tb->dirty[offset], 0, count);
  lock_release (&tb->lock);
}

/* What completed before a flush starts is what it covers.  With other
 * writers running, a flush that takes its time lets them try to start
 * another.
 */
static void
flush_begins (struct test_backend *tb)
{
  bool delay;

  lock_acquire (&tb->lock);
  if (tb->dirty)
    memset (tb->dirty, 0, tb->b.size);
  delay = tb->jitter && max_writers (tb) > 1 && next_random (tb) % 4 == 0;
  lock_release (&tb->lock);
  if (delay)
    test_sleep_us (200);
}

int
test_backend_check_contract (struct test_backend *tb,
                             const struct tb_contract *c)
{
  tb->dirty = calloc (tb->b.size, 1);
  tb->running = calloc (max_writers (tb), sizeof *tb->running);
  if (tb->dirty == NULL || tb->running == NULL) {
    free (tb->dirty);
    free (tb->running);
    tb->dirty = NULL;
    tb->running = NULL;
    return -1;
  }
  tb->contract = *c;
  return 0;
}

void
test_backend_dirty (struct test_backend *tb, uint8_t *out, uint64_t count,
                    uint64_t offset)
{
  lock_acquire (&tb->lock);
  memcpy (out, &tb->dirty[offset], count);
  lock_release (&tb->lock);
}

void
test_backend_stopped (struct test_backend *tb)
{
  atomic_store (&tb->stopped, true);
}

/* ------------------------------------------------------------ calls */

/* Under tb->lock: the call joins the log, if there is room for it. */
static void
log_call (struct test_backend *tb, const struct tb_call *call)
{
  struct tb_call *logged;

  lock_assert_held (&tb->lock);
  if (tb->log_len == tb->log_cap) {
    size_t cap = tb->log_cap ? tb->log_cap * 2 : 64;
    struct tb_call *v = realloc (tb->log, cap * sizeof *v);

    if (v == NULL)
      return;
    tb->log = v;
    tb->log_cap = cap;
  }
  logged = &tb->log[tb->log_len++];
  *logged = *call;
  logged->thread = pthread_self ();
  logged->busy = 0;
  for (int op = 0; op < TB_OPS; op++)
    logged->busy += tb->kind[op].entered - tb->kind[op].completed;
}

/* Under tb->lock: the fault mode's next draw (xorshift64*). */
static uint64_t
fault_random (struct test_backend *tb)
{
  uint64_t *x = &tb->faults.rng;

  lock_assert_held (&tb->lock);
  *x ^= *x >> 12;
  *x ^= *x << 25;
  *x ^= *x >> 27;
  return *x * UINT64_C (2685821657736338717);
}

/* Under tb->lock: the next stretch of changing calls, the other kind
 * of the last one.
 */
static void
fault_next_stretch (struct test_backend *tb)
{
  struct tb_fault_state *f = &tb->faults;
  unsigned longest = f->failing ? f->cfg.healthy_calls : f->cfg.failing_calls;

  lock_assert_held (&tb->lock);
  f->failing = !f->failing;
  f->left = 1 + fault_random (tb) % MAX (longest, 1u);
  f->errnum = fault_random (tb) & 1 ? ENOSPC : EIO;
}

/* Under tb->lock: the errno the fault mode fails a call of kind op
 * with, or 0.
 */
static int
fault_errno (struct test_backend *tb, enum tb_op op)
{
  struct tb_fault_state *f = &tb->faults;

  lock_assert_held (&tb->lock);
  if (op == TB_FLUSH)
    return fault_random (tb) % 100 < f->cfg.flush_percent ? EIO : 0;
  if (op != TB_PWRITEV && op != TB_ZERO && op != TB_TRIM)
    return 0;
  if (f->left == 0)
    fault_next_stretch (tb);
  f->left--;
  if (!f->failing || fault_random (tb) % 100 >= f->cfg.fail_percent)
    return 0;
  return fault_random (tb) % 8 == 0 ? ENOMEM : f->errnum;
}

/* Logs the call, waits at the gate, and says whether to fail it.  Drops
 * tb->lock while the gate is shut.
 */
static int
call_begin (struct test_backend *tb, const struct tb_call *call)
{
  struct tb_kind *k = &tb->kind[call->op];
  int err = 0;

  lock_acquire (&tb->lock);
  log_call (tb, call);
  k->entered++;
  pthread_cond_broadcast (&tb->changed);
  while (k->gate_shut && k->tokens == 0)
    lock_wait (&tb->changed, &tb->lock);
  if (k->gate_shut)
    k->tokens--;
  if (k->fail_next > 0) {
    k->fail_next--;
    err = k->fail_errno;
  }
  else if (tb->faults.on)
    err = fault_errno (tb, call->op);
  if (err)
    k->failed++;
  lock_release (&tb->lock);
  return err;
}

static int
call_end (struct test_backend *tb, enum tb_op op, int r)
{
  int saved_errno = errno;

  lock_acquire (&tb->lock);
  tb->kind[op].completed++;
  pthread_cond_broadcast (&tb->changed);
  lock_release (&tb->lock);
  errno = saved_errno;
  return r;
}

/* Junk that is neither zero nor any write's pattern in general. */
static int
scribble (struct backend *inner, uint64_t count, uint64_t offset, bool fua)
{
  uint8_t junk[4096];

  while (count > 0) {
    size_t n = MIN (count, (uint64_t) sizeof junk);
    struct iovec iov = { .iov_base = junk, .iov_len = n };

    for (size_t i = 0; i < n; i++)
      junk[i] = 0xa5 ^ ((offset + i) & 0x0f);
    if (backend_pwritev (inner, &iov, 1, offset, fua) == -1)
      return -1;
    count -= n;
    offset += n;
  }
  return 0;
}

static int
do_trim (struct test_backend *tb, uint64_t count, uint64_t offset, bool fua)
{
  switch (tb->trim) {
  case TB_TRIM_PASS:
    return backend_trim (tb->inner, count, offset, fua);
  case TB_TRIM_NOOP:
    return 0;
  case TB_TRIM_SCRIBBLE:
    return scribble (tb->inner, count, offset, fua);
  }
  abort ();
}

/* A call made with FUA keeps it: an inner backend other than memory
 * must make the range durable before the call is counted durable.
 */
static int
pass_on (struct test_backend *tb, const struct tb_call *c,
         const struct tb_args *a)
{
  struct backend *in = tb->inner;

  switch (c->op) {
  case TB_PREAD:
    return in->ops->pread (in, a->buf, c->count, c->offset);
  case TB_PWRITEV:
    return backend_pwritev (in, a->iov, c->iovcnt, c->offset, c->fua);
  case TB_ZERO:
    return backend_zero (in, c->count, c->offset, c->may_trim, c->fua);
  case TB_TRIM:
    return do_trim (tb, c->count, c->offset, c->fua);
  case TB_FLUSH:
    return in->ops->flush (in);
  case TB_EXTENTS:
    return in->ops->extents (in, c->count, c->offset, a->list);
  case TB_CACHE:
    return in->ops->cache ? in->ops->cache (in, c->count, c->offset) : 0;
  case TB_OPS:
    break;
  }
  abort ();
}

static bool
changes_disk (const struct tb_call *c)
{
  return c->op == TB_PWRITEV || c->op == TB_ZERO || c->op == TB_TRIM;
}

/* A call on its way to the inner backend: logged and counted, held at
 * its gate, then to be failed as the test asked or as the contract
 * says (its errno; it is then over but for call_end), or 0.
 */
static int
call_enter (struct test_backend *tb, const struct tb_call *c)
{
  int err = call_begin (tb, c);

  if (err == 0 && refuses_unaligned (tb, c))
    err = EINVAL;
  if (err == 0 && c->op == TB_FLUSH)
    flush_begins (tb);
  return err;
}

/* The inner backend is done with a call (r as its ops return): what it
 * changed is recorded, as durable if it carried FUA, and the call is
 * counted finished.  Frees before (contents_before).  Returns r.
 */
static int
call_leave (struct test_backend *tb, const struct tb_call *c,
            uint8_t *before, int r)
{
  int saved_errno = errno;

  if (changes_disk (c) && c->fua && r == 0)
    mark_durable (tb, c->count, c->offset);
  else if (changes_disk (c))
    mark_dirty (tb, c->count, c->offset, before);
  free (before);
  errno = saved_errno;
  return call_end (tb, c->op, r);
}

/* Every call, synchronous or submitted: logged and counted, held at its
 * gate, then failed as the test asked (never reaching the inner
 * backend) or passed on.
 */
static int
run_call (struct test_backend *tb, const struct tb_call *c,
          const struct tb_args *a)
{
  int err = call_enter (tb, c);
  uint8_t *before = NULL;

  if (err) {
    errno = err;
    return call_end (tb, c->op, -1);
  }
  if (changes_disk (c))
    before = contents_before (tb, c->count, c->offset);
  return call_leave (tb, c, before, pass_on (tb, c, a));
}

/* ------------------------------------------------------------ ops */

static uint64_t jitter_us (struct test_backend *tb);

/* With jitter, a read now and then takes its time, as a disk's or a
 * remote's does: reads arriving meanwhile find it on its way.
 */
static void
read_jitter (struct test_backend *tb)
{
  uint64_t delay;

  lock_acquire (&tb->lock);
  delay = jitter_us (tb);
  lock_release (&tb->lock);
  if (delay)
    test_sleep_us (delay);
}

static int
tb_pread (struct backend *b, void *buf, size_t count, uint64_t offset)
{
  struct tb_call c = { .op = TB_PREAD, .offset = offset, .count = count };

  read_jitter (to_tb (b));
  return run_call (to_tb (b), &c, &(struct tb_args) { .buf = buf });
}

static int
tb_pwritev (struct backend *b, const struct iovec *iov, int iovcnt,
            uint64_t offset)
{
  struct test_backend *tb = to_tb (b);
  struct tb_call c = { .op = TB_PWRITEV, .offset = offset, .iovcnt = iovcnt,
                       .count = iov_total (iov, iovcnt),
                       .memory_aligned = vectors_aligned (b, iov, iovcnt),
                       .first_base = iovcnt > 0 ? iov[0].iov_base : NULL };
  int slot = writer_enter (tb, &c);
  int r;

  check_write (tb, iov, iovcnt, offset);
  r = run_call (tb, &c, &(struct tb_args) { .iov = iov });
  writer_leave (tb, slot);
  return r;
}

/* Zero and trim. */
static int
changing_call (struct test_backend *tb, const struct tb_call *c)
{
  int slot = writer_enter (tb, c);
  int r;

  check_range (tb, op_names[c->op], c->count, c->offset);
  r = run_call (tb, c, &(struct tb_args) { .buf = NULL });
  writer_leave (tb, slot);
  return r;
}

static int
tb_zero (struct backend *b, uint64_t count, uint64_t offset, bool may_trim)
{
  struct tb_call c = { .op = TB_ZERO, .offset = offset, .count = count,
                       .may_trim = may_trim };

  return changing_call (to_tb (b), &c);
}

static int
tb_trim (struct backend *b, uint64_t count, uint64_t offset)
{
  struct tb_call c = { .op = TB_TRIM, .offset = offset, .count = count };

  return changing_call (to_tb (b), &c);
}

static int
tb_flush (struct backend *b)
{
  struct test_backend *tb = to_tb (b);
  struct tb_call c = { .op = TB_FLUSH };
  int slot = writer_enter (tb, &c);
  int r;

  /* Flush epochs are answered in order: one backend flush at a time. */
  if (atomic_fetch_add (&tb->flushes, 1) != 0)
    tb_fault (tb, "backend flush while another backend flush is running");
  if (atomic_load (&tb->stopped))
    tb_fault (tb, "backend flush after queue_stop returned");
  r = run_call (tb, &c, &(struct tb_args) { .buf = NULL });
  atomic_fetch_sub (&tb->flushes, 1);
  writer_leave (tb, slot);
  return r;
}

static int
tb_extents (struct backend *b, uint64_t count, uint64_t offset,
            struct extent_list *list)
{
  struct tb_call c = { .op = TB_EXTENTS, .offset = offset, .count = count };

  return run_call (to_tb (b), &c, &(struct tb_args) { .list = list });
}

static int
tb_cache (struct backend *b, uint64_t count, uint64_t offset)
{
  struct tb_call c = { .op = TB_CACHE, .offset = offset, .count = count };

  return run_call (to_tb (b), &c, &(struct tb_args) { .buf = NULL });
}

static void async_stop (struct test_backend *);

static void
tb_close (struct backend *b)
{
  struct test_backend *tb = to_tb (b);

  async_stop (tb);
  backend_close (tb->inner);
  lock_destroy (&tb->lock);
  pthread_cond_destroy (&tb->changed);
  pthread_cond_destroy (&tb->work);
  free (tb->slots);
  free (tb->workers);
  free (tb->running);
  free (tb->dirty);
  free (tb->log);
  free (tb->b.description);
  free (tb);
}

/* The synchronous entry.  No FUA: can_fua is false, so the queue and
 * backend_io_wait flush instead.
 */
static const struct backend_sync_ops tb_sync_ops = {
  .pwritev = tb_pwritev, .zero = tb_zero, .trim = tb_trim,
};

static int
tb_io (struct backend *b, struct backend_io *io)
{
  if (io->fua) {
    errno = EINVAL;
    return -1;
  }
  return backend_io_by_kind (b, io, &tb_sync_ops);
}

static const struct backend_ops test_ops = {
  .kind = "test",
  .pread = tb_pread,
  .io = tb_io,
  .flush = tb_flush,
  .extents = tb_extents,
  .cache = tb_cache,
  .close = tb_close,
};

/* ------------------------------------------------------------ async */

static uint64_t
io_count (const struct backend_io *io)
{
  return io->kind == OP_WRITE ? iov_total (io->iov, io->iovcnt)
    : io->count;
}

/* The call a submitted write, zero or trim makes. */
static struct tb_call
call_of_io (const struct backend *b, const struct backend_io *io)
{
  struct tb_call c = { .offset = io->offset, .count = io_count (io),
                       .fua = io->fua };

  switch (io->kind) {
  case OP_WRITE:
    c.op = TB_PWRITEV;
    c.iovcnt = io->iovcnt;
    c.memory_aligned = vectors_aligned (b, io->iov, io->iovcnt);
    c.first_base = io->iovcnt > 0 ? io->iov[0].iov_base : NULL;
    break;
  case OP_ZERO:
    c.op = TB_ZERO;
    c.may_trim = io->may_trim;
    break;
  default:
    c.op = TB_TRIM;
  }
  return c;
}

/* One submitted operation, through the same counting, gate and failure
 * path as a synchronous call: 0, or the errno it failed with.
 */
static int
run_io (struct test_backend *tb, const struct backend_io *io)
{
  struct tb_call c = call_of_io (&tb->b, io);

  errno = 0;
  if (run_call (tb, &c, &(struct tb_args) { .iov = io->iov }) == -1)
    return errno ? errno : EIO;
  return 0;
}

/* Under tb->lock: the oldest pending operation, or with jitter one at
 * random, so operations complete in any order.
 */
static unsigned
pick_pending (struct test_backend *tb)
{
  unsigned best = 0, n;

  lock_assert_held (&tb->lock);
  if (tb->jitter) {
    n = next_random (tb) % tb->nr_pending;
    for (unsigned i = 0;; i++)
      if (tb->slots[i].io && !tb->slots[i].picked && n-- == 0)
        return i;
  }
  for (unsigned i = 0; i < tb->b.max_in_flight; i++) {
    const struct tb_slot *s = &tb->slots[i];

    if (s->io && !s->picked
        && (tb->slots[best].io == NULL || tb->slots[best].picked
            || s->seq < tb->slots[best].seq))
      best = i;
  }
  return best;
}

/* Under tb->lock: how long a picked operation waits before it runs. */
static uint64_t
jitter_us (struct test_backend *tb)
{
  lock_assert_held (&tb->lock);
  if (!tb->jitter || next_random (tb) % 8 != 0)
    return 0;
  return next_random (tb) % 300;
}

/* A worker runs one pending operation at a time.  Drops tb->lock while
 * it runs each one and while the queue hears that it is done.
 */
static void *
async_worker (void *arg)
{
  struct test_backend *tb = arg;

  lock_acquire (&tb->lock);
  for (;;) {
    struct backend_io *io;
    unsigned slot;
    uint64_t delay;
    int err;

    while (tb->nr_pending == 0 && !tb->stopping)
      lock_wait (&tb->work, &tb->lock);
    if (tb->nr_pending == 0)
      break;
    slot = pick_pending (tb);
    tb->slots[slot].picked = true;
    tb->nr_pending--;
    io = tb->slots[slot].io;
    delay = jitter_us (tb);
    lock_release (&tb->lock);

    if (delay)
      test_sleep_us (delay);
    err = run_io (tb, io);

    /* Free the slot before done: the queue may submit again at once. */
    lock_acquire (&tb->lock);
    tb->slots[slot] = (struct tb_slot) { .io = NULL };
    tb->nr_ops--;
    lock_release (&tb->lock);
    io->done (io, err);         /* takes the queue lock: not ours */
    lock_acquire (&tb->lock);
  }
  lock_release (&tb->lock);
  return NULL;
}

static int
tb_start (struct backend *b)
{
  struct test_backend *tb = to_tb (b);

  if (tb->started) {
    tb_fault (tb, "backend start called twice");
    return 0;
  }
  if (tb->inner->ops->start && tb->inner->ops->start (tb->inner) == -1)
    return -1;
  for (; tb->nr_workers < tb->want_workers; tb->nr_workers++)
    if (pthread_create (&tb->workers[tb->nr_workers], NULL, async_worker,
                        tb) != 0) {
      errno = EAGAIN;
      return -1;
    }
  tb->started = true;
  return 0;
}

/* ------------------------------------------------------------ pass-through */

/* An inner backend with threads of its own (rbd, nbd) is handed each
 * submitted operation as it is, after the same log, gate, failures and
 * contract checks as any call, and completes it on its own thread: the
 * wrapper adds no thread and no delay (jitter does nothing here).
 */

static void
slot_free (struct test_backend *tb, struct tb_slot *s)
{
  lock_acquire (&tb->lock);
  count_write_bytes (tb, -(int64_t) s->write_bytes);
  *s = (struct tb_slot) { .io = NULL };
  tb->nr_ops--;
  lock_release (&tb->lock);
}

/* Frees slot s, then tells the queue its operation is done. */
static void
slot_complete (struct tb_slot *s, int err)
{
  struct backend_io *io = s->io;

  slot_free (s->tb, s);
  io->done (io, err);           /* takes the queue lock: not ours */
}

/* The inner backend's thread (or pass_through): the operation is over. */
static void
pass_through_done (struct backend_io *inner_io, int err)
{
  struct tb_slot *s = (struct tb_slot *) ((char *) inner_io
                                          - offsetof (struct tb_slot,
                                                      inner_io));

  call_leave (s->tb, &s->call, s->before, err ? -1 : 0);
  slot_complete (s, err);
}

/* Hands slot s's operation to the inner backend: BACKEND_IO_STARTED, or
 * -1 with errno when the inner backend refused it (nothing is left of it
 * then).  Failures the test asked for, and trims the test redefines, are
 * done here and completed at once.
 */
static int
pass_through (struct test_backend *tb, struct tb_slot *s)
{
  int err = call_enter (tb, &s->call);
  int r;

  if (err) {
    call_end (tb, s->call.op, -1);
    slot_complete (s, err);
    return BACKEND_IO_STARTED;
  }
  s->before = contents_before (tb, s->call.count, s->call.offset);
  if (s->call.op == TB_TRIM && tb->trim != TB_TRIM_PASS) {
    r = do_trim (tb, s->call.count, s->call.offset, s->call.fua);
    pass_through_done (&s->inner_io, r == -1 ? errno : 0);
    return BACKEND_IO_STARTED;
  }
  s->inner_io = *s->io;
  s->inner_io.done = pass_through_done;
  /* Once started, s may be completed and reused at any moment. */
  r = tb->inner->ops->io (tb->inner, &s->inner_io);
  if (r == BACKEND_IO_STARTED)
    return r;
  if (r == BACKEND_IO_DONE) {
    pass_through_done (&s->inner_io, 0);
    return BACKEND_IO_STARTED;
  }
  err = errno;
  call_leave (tb, &s->call, s->before, -1);
  slot_free (tb, s);
  errno = err;
  return -1;
}

/* Under tb->lock: whether io may join the operations in flight. */
static bool
may_submit (struct test_backend *tb, uint64_t offset, uint64_t count)
{
  lock_assert_held (&tb->lock);
  if (!tb->started) {
    tb_fault (tb, "backend submit before start");
    return false;
  }
  /* The queue promises never to exceed max_in_flight. */
  if (tb->nr_ops >= tb->b.max_in_flight) {
    tb_fault (tb, "more than max_in_flight %u operations submitted",
              tb->b.max_in_flight);
    return false;
  }
  check_no_overlap (tb, tb->slots, tb->b.max_in_flight, offset, count);
  return true;
}

static int
tb_submit (struct backend *b, struct backend_io *io)
{
  struct test_backend *tb = to_tb (b);
  uint64_t count = io_count (io);
  unsigned slot;

  if ((io->kind != OP_WRITE && io->kind != OP_ZERO && io->kind != OP_TRIM)
      || (io->fua && !tb->b.can_fua)) {
    errno = EINVAL;
    return -1;
  }
  if (io->kind == OP_WRITE)
    check_write (tb, io->iov, io->iovcnt, io->offset);
  else
    check_range (tb, io->kind == OP_ZERO ? "zero" : "trim", count,
                 io->offset);
  lock_acquire (&tb->lock);
  if (!may_submit (tb, io->offset, count)) {
    lock_release (&tb->lock);
    errno = EBUSY;
    return -1;
  }
  for (slot = 0; tb->slots[slot].io; slot++)
    ;
  tb->slots[slot] = (struct tb_slot) {
    .io = io, .offset = io->offset, .count = count, .seq = tb->next_seq++,
    .write_bytes = io->kind == OP_WRITE ? count : 0,
  };
  count_write_bytes (tb, tb->slots[slot].write_bytes);
  tb->nr_ops++;
  if (tb->pass_through) {
    tb->slots[slot].picked = true;
    tb->slots[slot].tb = tb;
    tb->slots[slot].call = call_of_io (&tb->b, io);
    lock_release (&tb->lock);
    return pass_through (tb, &tb->slots[slot]);
  }
  tb->nr_pending++;
  pthread_cond_signal (&tb->work);
  lock_release (&tb->lock);
  return BACKEND_IO_STARTED;
}

static void
async_stop (struct test_backend *tb)
{
  lock_acquire (&tb->lock);
  tb->stopping = true;
  pthread_cond_broadcast (&tb->work);
  pthread_cond_broadcast (&tb->changed);
  lock_release (&tb->lock);
  for (unsigned i = 0; i < tb->nr_workers; i++)
    pthread_join (tb->workers[i], NULL);
  tb->nr_workers = 0;
}

unsigned
test_backend_in_flight (struct test_backend *tb)
{
  unsigned n;

  lock_acquire (&tb->lock);
  n = tb->nr_ops;
  lock_release (&tb->lock);
  return n;
}

static const struct backend_ops test_async_ops = {
  .kind = "test-async",
  .pread = tb_pread,
  .io = tb_submit,
  .flush = tb_flush,
  .extents = tb_extents,
  .cache = tb_cache,
  .close = tb_close,
  .start = tb_start,
};

int
test_backend_set_async_workers (struct test_backend *tb, unsigned n,
                                unsigned workers)
{
  if (tb->pass_through) {
    errno = EINVAL;             /* asynchronous already, on its own */
    return -1;
  }
  tb->slots = calloc (n, sizeof *tb->slots);
  tb->workers = calloc (workers, sizeof *tb->workers);
  if (tb->slots == NULL || tb->workers == NULL)
    return -1;
  tb->b.ops = &test_async_ops;
  tb->b.max_in_flight = n;
  tb->want_workers = workers;
  return 0;
}

void
test_backend_set_fua (struct test_backend *tb)
{
  assert (tb->b.ops == &test_async_ops);
  assert (!tb->pass_through || tb->inner->can_fua);
  tb->b.can_fua = true;
}

void
test_backend_set_writes_to_memory (struct test_backend *tb)
{
  assert (tb->b.ops == &test_ops);
  tb->b.writes_to_memory = true;
}

int
test_backend_set_async (struct test_backend *tb, unsigned n)
{
  return test_backend_set_async_workers (tb, n, n);
}

/* ------------------------------------------------------------ setup */

/* An asynchronous inner backend: operations pass through to it, as
 * many at once as it takes, with FUA if it has FUA.
 */
static int
pass_through_init (struct test_backend *tb)
{
  tb->slots = calloc (tb->inner->max_in_flight, sizeof *tb->slots);
  if (tb->slots == NULL)
    return -1;
  tb->b.ops = &test_async_ops;
  tb->b.can_fua = tb->inner->can_fua;
  tb->pass_through = true;
  return 0;
}

struct test_backend *
test_backend_wrap (struct backend *inner)
{
  struct test_backend *tb;

  if (inner == NULL)
    return NULL;
  if ((tb = calloc (1, sizeof *tb)) == NULL) {
    backend_close (inner);
    return NULL;
  }
  tb->inner = inner;
  tb->b = *inner;
  tb->b.ops = &test_ops;
  tb->b.description = NULL;
  /* One writer at a time unless a test asks for more: the memory
   * backend's own max_writers would make every "synchronous" case run
   * with several dispatch tokens.
   */
  tb->b.max_writers = 1;
  /* It refuses FUA (tb_io), so callers must flush instead. */
  tb->b.can_fua = false;
  /* Writes take the queue unless a test lets them go around it
   * (test_backend_set_writes_to_memory).
   */
  tb->b.writes_to_memory = false;
  lock_init (&tb->lock);
  cond_init_monotonic (&tb->changed);
  pthread_cond_init (&tb->work, NULL);
  if (asprintf (&tb->b.description, "test over %s",
                inner->description) == -1) {
    tb->b.description = NULL;
    tb_close (&tb->b);
    return NULL;
  }
  if (backend_is_async (inner) && pass_through_init (tb) == -1) {
    tb_close (&tb->b);
    return NULL;
  }
  return tb;
}

struct test_backend *
test_backend_new (uint64_t size)
{
  return test_backend_wrap (backend_memory_new (size));
}

struct backend *
test_backend_get (struct test_backend *tb)
{
  return &tb->b;
}

void
test_backend_jitter (struct test_backend *tb, uint64_t seed)
{
  tb->jitter = true;
  tb->rng = seed | 1;           /* xorshift needs a bit set */
}

void
test_backend_set_trim (struct test_backend *tb, enum tb_trim trim)
{
  tb->trim = trim;
  if (trim != TB_TRIM_PASS)
    tb->b.trim_reads_zero = false;
}

/* ------------------------------------------------------------ watching */

static uint64_t
read_counter (struct test_backend *tb, const uint64_t *counter)
{
  uint64_t v;

  lock_acquire (&tb->lock);
  v = *counter;
  lock_release (&tb->lock);
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
  uint64_t until = monotonic_ns () + (uint64_t) TB_TIMEOUT_MS * 1000000;
  bool ok;

  lock_acquire (&tb->lock);
  while (*counter < n && lock_wait_until (&tb->changed, &tb->lock, until) == 0)
    ;
  ok = *counter >= n;
  lock_release (&tb->lock);
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

  lock_acquire (&tb->lock);
  for (size_t i = 0; i < tb->log_len; i++) {
    if (op != TB_OPS && tb->log[i].op != op)
      continue;
    if (n < max)
      out[n] = tb->log[i];
    n++;
  }
  lock_release (&tb->lock);
  return n;
}

bool
test_backend_saw (struct test_backend *tb, enum tb_op op, uint64_t offset)
{
  bool saw = false;

  lock_acquire (&tb->lock);
  for (size_t i = 0; !saw && i < tb->log_len; i++)
    saw = tb->log[i].op == op && tb->log[i].offset == offset;
  lock_release (&tb->lock);
  return saw;
}

/* ------------------------------------------------------------ steering */

void
test_backend_block (struct test_backend *tb, enum tb_op op)
{
  lock_acquire (&tb->lock);
  tb->kind[op].gate_shut = true;
  tb->kind[op].tokens = 0;
  lock_release (&tb->lock);
}

void
test_backend_step (struct test_backend *tb, enum tb_op op, unsigned n)
{
  lock_acquire (&tb->lock);
  tb->kind[op].tokens += n;
  pthread_cond_broadcast (&tb->changed);
  lock_release (&tb->lock);
}

void
test_backend_release (struct test_backend *tb, enum tb_op op)
{
  lock_acquire (&tb->lock);
  tb->kind[op].gate_shut = false;
  tb->kind[op].tokens = 0;
  pthread_cond_broadcast (&tb->changed);
  lock_release (&tb->lock);
}

void
test_backend_release_all (struct test_backend *tb)
{
  lock_acquire (&tb->lock);
  for (int op = 0; op < TB_OPS; op++) {
    tb->kind[op].gate_shut = false;
    tb->kind[op].tokens = 0;
    tb->kind[op].fail_next = 0;
  }
  tb->faults.on = false;
  pthread_cond_broadcast (&tb->changed);
  lock_release (&tb->lock);
}

void
test_backend_fail (struct test_backend *tb, enum tb_op op, unsigned n,
                   int errnum)
{
  lock_acquire (&tb->lock);
  tb->kind[op].fail_next = n;
  tb->kind[op].fail_errno = errnum;
  lock_release (&tb->lock);
}

/* ------------------------------------------------------------ faults */

void
test_backend_faults (struct test_backend *tb, const struct tb_faults *f)
{
  lock_acquire (&tb->lock);
  tb->faults = (struct tb_fault_state) {
    .on = true, .cfg = *f, .rng = f->seed | 1, .failing = true,
  };
  /* Healthy first: the stretch after a failing one of no calls. */
  fault_next_stretch (tb);
  lock_release (&tb->lock);
}

void
test_backend_faults_off (struct test_backend *tb)
{
  lock_acquire (&tb->lock);
  tb->faults.on = false;
  lock_release (&tb->lock);
}

uint64_t
test_backend_failed (struct test_backend *tb, enum tb_op op)
{
  return read_counter (tb, &tb->kind[op].failed);
}

/* ------------------------------------------------------------ contents */

int
test_backend_read (struct test_backend *tb, void *buf, size_t count,
                   uint64_t offset)
{
  return tb->inner->ops->pread (tb->inner, buf, count, offset);
}

static int
read_inner (void *tb, void *buf, size_t count, uint64_t offset)
{
  return test_backend_read (tb, buf, count, offset);
}

bool
test_backend_holds (struct test_backend *tb, int c, size_t count,
                    uint64_t offset)
{
  return test_reads_as (read_inner, tb, c, count, offset, "backend");
}

uint64_t
test_backend_max_write_bytes (struct test_backend *tb, bool reset)
{
  uint64_t max;

  lock_acquire (&tb->lock);
  max = tb->write_bytes_max;
  if (reset)
    tb->write_bytes_max = tb->write_bytes;
  lock_release (&tb->lock);
  return max;
}
