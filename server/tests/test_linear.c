/* plugq: unit tests for linear volumes (dm-linear tables over disks).
 *
 * Members are queues over test backends with a long unplug delay, so
 * what a volume request did is first seen in each member's own queue at
 * member-relative offsets, and after a flush on each member's backend.
 * Every check compares against the test's own idea of the table (struct
 * map below), never against the engine's rows, so a mapping bug in the
 * engine cannot hide behind itself.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "elevator/elevator.h"
#include "fixtures.h"
#include "volume/linear.h"
#include "common/log.h"
#include "common/minmax.h"
#include "queue/queue.h"
#include "queue/session.h"
#include "tap.h"
#include "test_backends.h"

#define KiB ((uint64_t) 1024)
#define MiB (KiB * 1024)
#define MAX_ROWS 8
#define MAX_VOLUME (256 * KiB)

/* Member sizes: boundaries of the plain volume at 64K and 96K. */
static const uint64_t member_size[] = { 64 * KiB, 32 * KiB, 96 * KiB };
#define MEMBERS 3

/* ------------------------------------------------------------ messages */

/* The last engine error, to check bad tables explain themselves. */
static pthread_mutex_t last_error_lock = PTHREAD_MUTEX_INITIALIZER;
static char last_error[512];

static void
capture_error (const char *msg)
{
  pthread_mutex_lock (&last_error_lock);
  snprintf (last_error, sizeof last_error, "%s", msg);
  pthread_mutex_unlock (&last_error_lock);
}

static bool
error_mentions (const char *a, const char *b)
{
  bool ok;

  pthread_mutex_lock (&last_error_lock);
  ok = strstr (last_error, a) && (b == NULL || strstr (last_error, b));
  if (!ok)
    printf ("# last error: \"%s\"\n", last_error);
  last_error[0] = '\0';
  pthread_mutex_unlock (&last_error_lock);
  return ok;
}

/* ------------------------------------------------------------ volumes */

/* One row as the test expects it: volume rows are consecutive. */
struct map {
  unsigned disk;                /* index in the rig */
  uint64_t disk_offset;
  uint64_t length;
};

struct vol {
  struct linear *l;
  struct map map[MAX_ROWS];
  size_t nr;
  uint64_t size;
  unsigned char model[MAX_VOLUME];      /* what the volume must read as */
};

static struct test_rig rig;

/* Three members of member_size[], started; async > 0: asynchronous
 * backends with that many operations in flight.
 */
static bool
members_start_async (const struct queue_config *cfg, unsigned async)
{
  memset (&rig, 0, sizeof rig);
  for (unsigned i = 0; i < MEMBERS; i++) {
    struct test_backend *tb = test_rig_backend (&rig, member_size[i]);

    if (tb == NULL || (async && test_backend_set_async (tb, async) == -1))
      return false;
  }
  return test_rig_start (&rig, cfg);
}

static bool
members_start (const struct queue_config *cfg)
{
  return members_start_async (cfg, 0);
}

static bool
members_start_default (void)
{
  struct queue_config cfg = test_config (TEST_HOUR, 1000);

  return members_start (&cfg);
}

/* Builds a volume from disk rows and records them as the expectation. */
static bool
vol_build (struct vol *v, const char *name, const struct map *rows,
           size_t nr)
{
  memset (v, 0, sizeof *v);
  v->l = linear_new_volume (name);
  if (v->l == NULL)
    return false;
  for (size_t i = 0; i < nr; i++) {
    if (linear_append_disk (v->l, rig.d[rows[i].disk].q, rows[i].disk_offset,
                            rows[i].length) == -1)
      return false;
    v->map[v->nr++] = rows[i];
    v->size += rows[i].length;
  }
  return linear_finish (v->l) == 0 && v->l->size == v->size;
}

/* The plain table: every member whole, in order. */
static bool
vol_plain (struct vol *v)
{
  struct map rows[MEMBERS];

  for (unsigned i = 0; i < MEMBERS; i++)
    rows[i] = (struct map) { i, 0, member_size[i] };
  return vol_build (v, "vol", rows, MEMBERS);
}

/* Never zero, and different at every nearby position and for every
 * seed, so a byte landing at the wrong offset or member is caught.
 */
static unsigned char
pattern (uint64_t pos, unsigned seed)
{
  return (pos * 13 + (pos >> 9) + seed * 97) % 255 + 1;
}

static int
vol_write (struct vol *v, struct session *s, uint64_t offset,
           uint64_t count, unsigned seed, unsigned flags)
{
  unsigned char *buf = malloc (count);
  int r;

  if (buf == NULL)
    return -1;
  for (uint64_t i = 0; i < count; i++)
    buf[i] = pattern (offset + i, seed);
  r = linear_pwrite (v->l, s, buf, count, offset, flags);
  if (r == 0)
    memcpy (v->model + offset, buf, count);
  free (buf);
  return r;
}

static int
vol_zero (struct vol *v, uint64_t offset, uint64_t count, unsigned flags)
{
  int r = linear_zero (v->l, NULL, count, offset, flags);

  if (r == 0)
    memset (v->model + offset, 0, count);
  return r;
}

/* Trimmed bytes read as zero on memory backends (trim_reads_zero). */
static int
vol_trim (struct vol *v, uint64_t offset, uint64_t count, unsigned flags)
{
  int r = linear_trim (v->l, NULL, count, offset, flags);

  if (r == 0)
    memset (v->model + offset, 0, count);
  return r;
}

/* What member disk must hold: the model where the table maps it, zero
 * (never written) elsewhere.
 */
static void
member_image (const struct vol *v, unsigned disk, unsigned char *img)
{
  uint64_t start = 0;

  memset (img, 0, member_size[disk]);
  for (size_t i = 0; i < v->nr; i++) {
    const struct map *m = &v->map[i];

    if (m->disk == disk)
      memcpy (img + m->disk_offset, v->model + start, m->length);
    start += m->length;
  }
}

/* A member's whole contents against its expected image. */
static bool
member_equal (const unsigned char *got, const unsigned char *want,
              unsigned disk, const char *what)
{
  char label[64];

  snprintf (label, sizeof label, "%s of disk%u", what, disk);
  return test_bytes_equal (got, want, member_size[disk], label);
}

/* Member disk's backend holds its part of the model. */
static bool
member_durable (const struct vol *v, unsigned disk)
{
  static unsigned char got[MAX_VOLUME], want[MAX_VOLUME];

  member_image (v, disk, want);
  return CHECK (test_backend_read (rig.d[disk].tb, got, member_size[disk], 0)
                == 0)
    && member_equal (got, want, disk, "backend");
}

/* The volume reads as the model, and each member, through its own queue
 * (and with durable, on its backend), holds its part of it.
 */
static bool
vol_verify (const struct vol *v, bool durable)
{
  static unsigned char got[MAX_VOLUME], want[MAX_VOLUME];
  bool ok;

  ok = CHECK (linear_pread (v->l, got, v->size, 0) == 0)
    && test_bytes_equal (got, v->model, v->size, "volume read");
  for (unsigned d = 0; ok && d < MEMBERS; d++) {
    member_image (v, d, want);
    ok = CHECK (queue_pread (rig.d[d].q, got, member_size[d], 0) == 0)
      && member_equal (got, want, d, "queue read");
    if (ok && durable)
      ok = member_durable (v, d);
  }
  return ok;
}

/* Queued-state check, then flush, then the same on the backends. */
static bool
vol_verify_both (const struct vol *v)
{
  return CHECK (vol_verify (v, false))
    && CHECK (linear_flush (v->l, NULL) == 0)
    && CHECK (vol_verify (v, true));
}

static void
vol_done (struct vol *v)
{
  linear_free (v->l);
  v->l = NULL;
}

static void
finish (struct vol *v)
{
  vol_done (v);
  test_rig_stop (&rig);
}

/* ------------------------------------------------------------ data */

static const uint64_t boundaries[] = { 64 * KiB, 96 * KiB };
#define NR_BOUNDARIES 2

static struct vol v;

static void
test_writes_straddle (void)
{
  bool ok = CHECK (members_start_default ()) && CHECK (vol_plain (&v));

  for (unsigned i = 0; ok && i < NR_BOUNDARIES; i++) {
    uint64_t b = boundaries[i];

    ok = CHECK (vol_write (&v, NULL, b - 4 * KiB, 8 * KiB, 1, 0) == 0)
      && CHECK (vol_write (&v, NULL, b - 1, 2, 2, 0) == 0)
      && CHECK (vol_write (&v, NULL, b - 3, 1, 3, 0) == 0)
      && CHECK (vol_write (&v, NULL, b, 1, 4, 0) == 0);
  }
  /* One request over all three members, and the whole volume. */
  ok = ok && CHECK (vol_write (&v, NULL, 60 * KiB, 40 * KiB, 5, 0) == 0);
  ok = ok && CHECK (vol_verify_both (&v));
  ok = ok && CHECK (vol_write (&v, NULL, 0, v.size, 6, 0) == 0);
  ok = ok && CHECK (vol_write (&v, NULL, 63 * KiB, 34 * KiB, 7, 0) == 0);
  ok = ok && CHECK (vol_verify_both (&v));
  finish (&v);
  tap_ok (ok, "writes straddling every member boundary land at member-"
          "relative offsets");
}

/* Reads across each boundary, of a few sizes, against the model. */
static bool
reads_straddle (const struct vol *vol)
{
  unsigned char buf[16 * KiB];
  bool ok = true;

  for (unsigned i = 0; ok && i < NR_BOUNDARIES; i++) {
    uint64_t b = boundaries[i];
    const uint64_t starts[] = { b - 5 * KiB, b - 1, b - 8 * KiB, b - 1 };
    const uint64_t lens[] = { 10 * KiB, 2, 16 * KiB, 1 };

    for (unsigned j = 0; ok && j < 4; j++)
      ok = CHECK (linear_pread (vol->l, buf, lens[j], starts[j]) == 0)
        && test_bytes_equal (buf, vol->model + starts[j], lens[j],
                             "volume read");
  }
  return ok;
}

/* From the members' queues, then from their backends. */
static void
test_reads_straddle (void)
{
  bool ok = CHECK (members_start_default ()) && CHECK (vol_plain (&v));

  ok = ok && CHECK (vol_write (&v, NULL, 0, v.size, 1, 0) == 0);
  ok = ok && CHECK (reads_straddle (&v));
  ok = ok && CHECK (linear_flush (v.l, NULL) == 0);
  ok = ok && CHECK (reads_straddle (&v));
  finish (&v);
  tap_ok (ok, "reads straddling every member boundary");
}

static void
test_zero_straddle (void)
{
  bool ok = CHECK (members_start_default ()) && CHECK (vol_plain (&v));

  ok = ok && CHECK (vol_write (&v, NULL, 0, v.size, 1, 0) == 0);
  ok = ok && CHECK (linear_flush (v.l, NULL) == 0);
  for (unsigned i = 0; ok && i < NR_BOUNDARIES; i++) {
    uint64_t b = boundaries[i];

    ok = CHECK (vol_zero (&v, b - 3 * KiB, 6 * KiB, 0) == 0)
      && CHECK (vol_zero (&v, b - 10 * KiB, 2 * KiB, REQ_MAY_TRIM) == 0)
      && CHECK (vol_zero (&v, b - 1, 2, 0) == 0);
  }
  /* Zero over all three, then new data over part of the queued zero. */
  ok = ok && CHECK (vol_zero (&v, 62 * KiB, 36 * KiB, 0) == 0);
  ok = ok && CHECK (vol_write (&v, NULL, 95 * KiB, 2 * KiB, 2, 0) == 0);
  ok = ok && CHECK (vol_verify_both (&v));
  finish (&v);
  tap_ok (ok, "zeroes straddling every member boundary");
}

static void
test_trim_straddle (void)
{
  bool ok = CHECK (members_start_default ()) && CHECK (vol_plain (&v));

  ok = ok && CHECK (vol_write (&v, NULL, 0, v.size, 1, 0) == 0);
  ok = ok && CHECK (linear_flush (v.l, NULL) == 0);
  for (unsigned i = 0; ok && i < NR_BOUNDARIES; i++)
    ok = CHECK (vol_trim (&v, boundaries[i] - 2 * KiB, 4 * KiB, 0) == 0);
  ok = ok && CHECK (vol_trim (&v, 63 * KiB, 34 * KiB, 0) == 0);
  ok = ok && CHECK (vol_verify_both (&v));
  ok = ok && CHECK (test_backend_count (rig.d[0].tb, TB_TRIM) >= 1
                    && test_backend_count (rig.d[1].tb, TB_TRIM) >= 1
                    && test_backend_count (rig.d[2].tb, TB_TRIM) >= 1);
  finish (&v);
  tap_ok (ok, "trims straddling every member boundary reach each member");
}

/* Rows that take parts of members, out of order, skipping some. */
static void
test_sub_ranges (void)
{
  const struct map rows[] = {
    { 0, 16 * KiB, 16 * KiB },
    { 2, 32 * KiB, 32 * KiB },
    { 1, 8 * KiB, 8 * KiB },
    { 0, 48 * KiB, 4 * KiB },
  };
  bool ok = CHECK (members_start_default ())
    && CHECK (vol_build (&v, "sub", rows, 4));

  ok = ok && CHECK (v.l->size == 60 * KiB);
  ok = ok && CHECK (vol_write (&v, NULL, 0, v.size, 1, 0) == 0);
  ok = ok && CHECK (vol_write (&v, NULL, 15 * KiB, 2 * KiB, 2, 0) == 0);
  ok = ok && CHECK (vol_zero (&v, 47 * KiB, 2 * KiB, 0) == 0);
  ok = ok && CHECK (vol_write (&v, NULL, 55 * KiB, 2 * KiB, 3, 0) == 0);
  ok = ok && CHECK (vol_verify_both (&v));
  ok = ok && CHECK (v.l->nr_members == 3);
  finish (&v);
  tap_ok (ok, "sub-ranges: data lands inside each member's range only");
}

static bool
row_is (const struct linear_row *r, uint64_t start, unsigned disk,
        uint64_t disk_offset, uint64_t length)
{
  if (r->start == start && r->disk == rig.d[disk].q
      && r->disk_offset == disk_offset && r->length == length)
    return true;
  printf ("# row at %" PRIu64 ": %s@%" PRIu64 "+%" PRIu64 ", expected "
          "%" PRIu64 ": disk%u@%" PRIu64 "+%" PRIu64 "\n",
          r->start, queue_name (r->disk), r->disk_offset, r->length,
          start, disk, disk_offset, length);
  return false;
}

/* vol1 = d0,d1; vol2 = vol1@32K+64K, d2@0+32K; vol3 = vol2@16K+64K,
 * d2@64K+32K.  vol3 must be flat rows of disks.
 */
static void
test_nesting (void)
{
  struct linear *vol1 = NULL, *vol2 = NULL;
  const struct map expect[] = {
    { 0, 48 * KiB, 16 * KiB },
    { 1, 0, 32 * KiB },
    { 2, 0, 16 * KiB },
    { 2, 64 * KiB, 32 * KiB },
  };
  uint64_t start = 0;
  bool ok = CHECK (members_start_default ());

  memset (&v, 0, sizeof v);
  ok = ok && CHECK ((vol1 = linear_new_volume ("vol1")) != NULL)
    && CHECK (linear_append_disk (vol1, rig.d[0].q, 0, 64 * KiB) == 0)
    && CHECK (linear_append_disk (vol1, rig.d[1].q, 0, 32 * KiB) == 0)
    && CHECK (linear_finish (vol1) == 0);
  ok = ok && CHECK ((vol2 = linear_new_volume ("vol2")) != NULL)
    && CHECK (linear_append_linear (vol2, vol1, 32 * KiB, 64 * KiB) == 0)
    && CHECK (linear_append_disk (vol2, rig.d[2].q, 0, 32 * KiB) == 0)
    && CHECK (linear_finish (vol2) == 0);
  ok = ok && CHECK ((v.l = linear_new_volume ("vol3")) != NULL)
    && CHECK (linear_append_linear (v.l, vol2, 16 * KiB, 64 * KiB) == 0)
    && CHECK (linear_append_disk (v.l, rig.d[2].q, 64 * KiB, 32 * KiB) == 0)
    && CHECK (linear_finish (v.l) == 0);

  ok = ok && CHECK (v.l->nr_rows == 4) && CHECK (v.l->nr_members == 3);
  for (size_t i = 0; ok && i < 4; i++) {
    ok = CHECK (row_is (&v.l->rows[i], start, expect[i].disk,
                        expect[i].disk_offset, expect[i].length));
    v.map[v.nr++] = expect[i];
    start += expect[i].length;
  }
  v.size = start;
  ok = ok && CHECK (v.l->size == 96 * KiB);
  ok = ok && CHECK (vol_write (&v, NULL, 0, v.size, 1, 0) == 0);
  ok = ok && CHECK (vol_write (&v, NULL, 15 * KiB, 34 * KiB, 2, 0) == 0);
  ok = ok && CHECK (vol_zero (&v, 63 * KiB, 2 * KiB, 0) == 0);
  ok = ok && CHECK (vol_verify_both (&v));
  linear_free (vol1);
  linear_free (vol2);
  finish (&v);
  tap_ok (ok, "nesting two deep flattens into rows of disks");
}

/* Extents stitched from the members' queues and backends. */
static void
test_extents (void)
{
  const uint32_t HZ = EXTENT_HOLE | EXTENT_ZERO;
  const struct { uint64_t at; uint32_t type; } want[] = {
    { 0, HZ }, { 47 * KiB, HZ }, { 48 * KiB, 0 }, { 63 * KiB, 0 },
    { 64 * KiB, 0 }, { 71 * KiB, 0 }, { 72 * KiB, HZ }, { 89 * KiB, HZ },
    { 90 * KiB, EXTENT_ZERO }, { 96 * KiB, EXTENT_ZERO },
    { 99 * KiB, EXTENT_ZERO }, { 100 * KiB, HZ }, { 191 * KiB, HZ },
  };
  const uint64_t ranges[][2] = {
    { 0, 192 * KiB }, { 50 * KiB, 100 * KiB }, { 64 * KiB, 32 * KiB },
    { 95 * KiB, 2 * KiB },
  };
  struct extent_list l;
  bool ok = CHECK (members_start_default ()) && CHECK (vol_plain (&v));

  extent_list_init (&l);
  ok = ok && CHECK (vol_write (&v, NULL, 48 * KiB, 24 * KiB, 1, 0) == 0);
  ok = ok && CHECK (vol_zero (&v, 90 * KiB, 10 * KiB, 0) == 0);
  for (size_t r = 0; ok && r < sizeof ranges / sizeof ranges[0]; r++) {
    uint64_t off = ranges[r][0], count = ranges[r][1], end;

    extent_list_clear (&l);
    ok = CHECK (linear_extents (v.l, count, off, &l) == 0)
      && CHECK (test_extents_contiguous (&l, off, count));
    end = ok ? l.v[l.len - 1].offset + l.v[l.len - 1].length : 0;
    for (size_t i = 0; ok && i < sizeof want / sizeof want[0]; i++)
      if (want[i].at >= off && want[i].at < end)
        ok = CHECK (test_extent_type_at (&l, want[i].at)
                    == want[i].type);
    if (!ok) {
      printf ("# extents of %" PRIu64 "+%" PRIu64 ":\n", off, count);
      test_print_extents (&l);
    }
  }
  extent_list_free (&l);
  finish (&v);
  tap_ok (ok, "extents are stitched across members at volume offsets");
}

/* FUA on a volume makes the parts it touched durable, in those members
 * only.
 */
static void
test_fua (void)
{
  unsigned char got[8 * KiB];
  bool ok = CHECK (members_start_default ()) && CHECK (vol_plain (&v));

  ok = ok && CHECK (vol_write (&v, NULL, 60 * KiB, 8 * KiB, 1, REQ_FUA) == 0);
  ok = ok && CHECK (test_backend_read (rig.d[0].tb, got, 4 * KiB, 60 * KiB)
                    == 0
                    && test_backend_read (rig.d[1].tb, got + 4 * KiB,
                                          4 * KiB, 0) == 0)
    && test_bytes_equal (got, v.model + 60 * KiB, 8 * KiB, "backends");
  ok = ok && CHECK (test_backend_count (rig.d[0].tb, TB_FLUSH) >= 1
                    && test_backend_count (rig.d[1].tb, TB_FLUSH) >= 1
                    && test_backend_count (rig.d[2].tb, TB_FLUSH) == 0);
  /* Inside one member FUA goes through: that queue group-commits it. */
  ok = ok && CHECK (vol_write (&v, NULL, 100 * KiB, 8 * KiB, 2, REQ_FUA)
                    == 0);
  ok = ok && CHECK (test_stats (rig.d[2].q).fua_requests == 1)
    && CHECK (member_durable (&v, 2));
  finish (&v);
  tap_ok (ok, "FUA on a volume is durable in each member it touched");
}

/* FAST_ZERO fails before changing anything if any member cannot. */
static void
test_fast_zero (void)
{
  struct queue_config cfg = test_config (TEST_HOUR, 1000);
  bool ok;

  memset (&rig, 0, sizeof rig);
  ok = true;
  for (unsigned i = 0; ok && i < MEMBERS; i++)
    ok = CHECK (test_rig_backend (&rig, member_size[i]) != NULL);
  if (ok)
    test_backend_get (rig.d[2].tb)->can_fast_zero = false;
  ok = ok && CHECK (test_rig_start (&rig, &cfg)) && CHECK (vol_plain (&v));
  ok = ok && CHECK (vol_write (&v, NULL, 0, v.size, 1, 0) == 0);
  ok = ok && CHECK (!linear_can_fast_zero (v.l));
  if (ok) {
    errno = 0;
    ok = CHECK (linear_zero (v.l, NULL, 64 * KiB, 32 * KiB, REQ_FAST_ZERO)
                == -1 && errno == ENOTSUP);
  }
  ok = ok && CHECK (vol_verify_both (&v));
  finish (&v);
  tap_ok (ok, "FAST_ZERO: ENOTSUP before any member changes");
}

static void
test_out_of_range (void)
{
  unsigned char buf[8 * KiB] = { 0 };
  bool ok = CHECK (members_start_default ()) && CHECK (vol_plain (&v));

  ok = ok && CHECK (linear_pwrite (v.l, NULL, buf, 8 * KiB,
                                   v.size - 4 * KiB, 0) == -1);
  ok = ok && CHECK (linear_pread (v.l, buf, 1, v.size) == -1);
  ok = ok && CHECK (linear_zero (v.l, NULL, 2, v.size - 1, 0) == -1);
  ok = ok && CHECK (linear_trim (v.l, NULL, UINT64_MAX, 1, 0) == -1);
  ok = ok && CHECK (test_stats (rig.d[2].q).op[OP_WRITE].requests == 0);
  finish (&v);
  tap_ok (ok, "volume requests past its end fail and change nothing");
}

/* ------------------------------------------------------------ flush */

/* A table that names d2 twice: it is still flushed once. */
static bool
vol_repeat (struct vol *vol)
{
  const struct map rows[] = {
    { 0, 0, 64 * KiB },
    { 2, 0, 32 * KiB },
    { 1, 0, 32 * KiB },
    { 2, 64 * KiB, 32 * KiB },
  };

  return vol_build (vol, "repeat", rows, 4);
}

static void
test_flush_every_member (void)
{
  bool ok = CHECK (members_start_default ()) && CHECK (vol_repeat (&v));

  ok = ok && CHECK (v.l->nr_members == 3);
  ok = ok && CHECK (vol_write (&v, NULL, 0, v.size, 1, 0) == 0);
  for (unsigned d = 0; ok && d < MEMBERS; d++)
    ok = CHECK (test_backend_entered (rig.d[d].tb, TB_PWRITEV) == 0);
  ok = ok && CHECK (linear_flush (v.l, NULL) == 0);
  for (unsigned d = 0; ok && d < MEMBERS; d++) {
    struct queue_stats s = test_stats (rig.d[d].q);

    ok = CHECK (test_backend_count (rig.d[d].tb, TB_FLUSH) == 1)
      && CHECK (s.flushes == 1 && s.unplugs[UNPLUG_FLUSH] == 1);
  }
  ok = ok && CHECK (vol_verify (&v, true));
  finish (&v);
  tap_ok (ok, "volume flush unplugs and flushes every distinct member once");
}

static int
flush_run (void *arg)
{
  struct linear *l = arg;

  return linear_flush (l, NULL);
}

/* While the first member's backend flush is held, the others' flushes
 * run: the volume does not flush one member after another.
 */
static void
test_flush_parallel (void)
{
  struct test_thread t = TEST_THREAD_INIT;
  bool ok = CHECK (members_start_default ()) && CHECK (vol_plain (&v));

  ok = ok && CHECK (vol_write (&v, NULL, 0, v.size, 1, 0) == 0);
  if (ok)
    test_backend_block (rig.d[0].tb, TB_FLUSH);
  ok = ok && CHECK (test_thread_start (&t, flush_run, v.l) == 0);
  ok = ok && CHECK (test_backend_wait_entered (rig.d[0].tb, TB_FLUSH, 1));
  ok = ok && CHECK (test_backend_wait_count (rig.d[1].tb, TB_FLUSH, 1))
    && CHECK (test_backend_wait_count (rig.d[2].tb, TB_FLUSH, 1));
  ok = ok && CHECK (!test_thread_done (&t));
  ok = ok && CHECK (test_backend_count (rig.d[0].tb, TB_FLUSH) == 0);
  test_backend_release (rig.d[0].tb, TB_FLUSH);
  ok = ok && CHECK (test_thread_wait (&t) && t.result == 0);
  ok = ok && CHECK (vol_verify (&v, true));
  test_thread_join (&t);
  finish (&v);
  tap_ok (ok, "members flush in parallel: one held, the others complete");
}

/* A member's latched write-back error fails the volume's flush, once;
 * the other members are still flushed.
 */
static void
test_member_error (void)
{
  struct session *s = NULL;
  int r1 = 0, e1 = 0;
  bool ok = CHECK (members_start_default ()) && CHECK (vol_plain (&v));

  ok = ok && CHECK ((s = session_new ()) != NULL);
  if (ok)
    test_backend_fail (rig.d[1].tb, TB_PWRITEV, 1, EIO);
  ok = ok && CHECK (vol_write (&v, s, 0, v.size, 1, 0) == 0);
  if (ok) {
    r1 = linear_flush (v.l, s);
    e1 = errno;
    ok = CHECK (r1 == -1 && e1 == EIO);
  }
  for (unsigned d = 0; ok && d < MEMBERS; d++)
    ok = CHECK (test_backend_count (rig.d[d].tb, TB_FLUSH) == 1);
  if (ok) {
    unsigned char want[MAX_VOLUME], got[MAX_VOLUME];

    for (unsigned d = 0; ok && d < MEMBERS; d += 2) {
      member_image (&v, d, want);
      ok = CHECK (test_backend_read (rig.d[d].tb, got, member_size[d], 0)
                  == 0)
        && member_equal (got, want, d, "backend");
    }
  }
  ok = ok && CHECK (linear_flush (v.l, s) == 0);
  finish (&v);
  session_free (s);
  tap_ok (ok, "a member's write-back error fails the volume flush once");
}

/* ------------------------------------------------------------ FUA */

/* FUA over several members: the parts are queued plainly and the
 * members flushed together, as a volume FLUSH does, so N members cost
 * one round of flushes rather than N FUAs one after another.
 */

enum fua_op { FUA_WRITE, FUA_ZERO, FUA_TRIM, FUA_OPS };

static const char *const fua_op_names[FUA_OPS] = { "write", "zero", "trim" };

struct fua_job {
  struct vol *vol;
  struct session *s;
  enum fua_op op;
  uint64_t offset, count;
};

static int
fua_run (void *arg)
{
  struct fua_job *j = arg;

  switch (j->op) {
  case FUA_WRITE:
    return vol_write (j->vol, j->s, j->offset, j->count, 9, REQ_FUA);
  case FUA_ZERO:
    return vol_zero (j->vol, j->offset, j->count, REQ_FUA);
  default:
    return vol_trim (j->vol, j->offset, j->count, REQ_FUA);
  }
}

/* Data everywhere, durable, so a zero or trim has something to change;
 * one backend flush on each member so far.
 */
static bool
vol_fill_durable (struct vol *vol)
{
  return CHECK (vol_write (vol, NULL, 0, vol->size, 1, 0) == 0)
    && CHECK (linear_flush (vol->l, NULL) == 0);
}

/* A FUA request over all three members while the first member's backend
 * flush is held: the other two members' flushes are issued and finish
 * meanwhile, and the request is answered only once the held one is.
 * Serial FUA parts would not reach the second member until the first
 * member's FUA returned, so the wait for its flush would time out.
 */
static void
test_fua_parallel (void)
{
  for (enum fua_op op = 0; op < FUA_OPS; op++) {
    struct test_thread t = TEST_THREAD_INIT;
    struct fua_job job = { &v, NULL, op, 60 * KiB, 40 * KiB };
    bool ok = CHECK (members_start_default ()) && CHECK (vol_plain (&v))
      && CHECK (vol_fill_durable (&v));

    if (ok)
      test_backend_block (rig.d[0].tb, TB_FLUSH);
    ok = ok && CHECK (test_thread_start (&t, fua_run, &job) == 0);
    ok = ok && CHECK (test_backend_wait_entered (rig.d[0].tb, TB_FLUSH, 2));
    ok = ok && CHECK (test_backend_wait_count (rig.d[1].tb, TB_FLUSH, 2))
      && CHECK (test_backend_wait_count (rig.d[2].tb, TB_FLUSH, 2));
    ok = ok && CHECK (!test_thread_done (&t));
    test_backend_release (rig.d[0].tb, TB_FLUSH);
    ok = ok && CHECK (test_thread_wait (&t) && t.result == 0);
    ok = ok && CHECK (vol_verify (&v, true));
    /* One flush per member for the request, no FUA left in them. */
    for (unsigned d = 0; ok && d < MEMBERS; d++)
      ok = CHECK (test_backend_count (rig.d[d].tb, TB_FLUSH) == 2)
        && CHECK (test_stats (rig.d[d].q).fua_requests == 0);
    test_thread_join (&t);
    finish (&v);
    tap_ok (ok, "FUA %s over three members: their flushes run in parallel",
            fua_op_names[op]);
  }
}

/* A member that holds two rows the request crosses is flushed once. */
static void
test_fua_repeat (void)
{
  bool ok = CHECK (members_start_default ()) && CHECK (vol_repeat (&v));

  /* d0, d2, d1, d2 */
  ok = ok && CHECK (vol_write (&v, NULL, 60 * KiB, 72 * KiB, 1, REQ_FUA)
                    == 0);
  for (unsigned d = 0; ok && d < MEMBERS; d++)
    ok = CHECK (test_backend_count (rig.d[d].tb, TB_FLUSH) == 1)
      && CHECK (member_durable (&v, d));
  finish (&v);
  tap_ok (ok, "FUA over two rows of one member flushes it once");
}

/* In member's log, a write covering [offset, offset+count) and after it
 * a flush that arrived with nothing unfinished: the write was on the
 * backend before that flush began.
 */
static bool
flushed_after_write (unsigned disk, uint64_t offset, uint64_t count)
{
  struct tb_call calls[64];
  size_t n = test_backend_calls (rig.d[disk].tb, TB_OPS, calls, 64);
  size_t written = n;

  if (n > 64) {
    printf ("# disk%u: %zu calls, more than the test looks at\n", disk, n);
    return false;
  }
  for (size_t i = 0; i < n; i++) {
    const struct tb_call *c = &calls[i];

    if (c->op == TB_PWRITEV && c->offset <= offset
        && c->offset + c->count >= offset + count)
      written = i;
    else if (c->op == TB_FLUSH && written < i && c->busy == 0)
      return true;
  }
  printf ("# disk%u: no flush after a finished write of %" PRIu64 "+%"
          PRIu64 " (write at call %zu of %zu)\n",
          disk, offset, count, written, n);
  return false;
}

/* A FUA write over d0 and d1, with d1's flush held: not answered while
 * it is held; when answered, each member's backend has the data and a
 * flush that began after the data was written, and d2 saw nothing.
 */
static bool
fua_ordering (unsigned async)
{
  struct test_thread t = TEST_THREAD_INIT;
  struct fua_job job = { &v, NULL, FUA_WRITE, 60 * KiB, 8 * KiB };
  struct queue_config cfg = test_config (TEST_HOUR, 1000);
  bool ok = CHECK (members_start_async (&cfg, async))
    && CHECK (vol_plain (&v));
  if (ok)
    test_backend_block (rig.d[1].tb, TB_FLUSH);
  ok = ok && CHECK (test_thread_start (&t, fua_run, &job) == 0);
  ok = ok && CHECK (test_backend_wait_entered (rig.d[1].tb, TB_FLUSH, 1));
  ok = ok && CHECK (test_backend_wait_count (rig.d[0].tb, TB_FLUSH, 1));
  ok = ok && CHECK (!test_thread_done (&t));
  test_backend_release (rig.d[1].tb, TB_FLUSH);
  ok = ok && CHECK (test_thread_wait (&t) && t.result == 0);
  ok = ok && CHECK (test_backend_count (rig.d[1].tb, TB_FLUSH) == 1)
    && CHECK (flushed_after_write (0, 60 * KiB, 4 * KiB))
    && CHECK (flushed_after_write (1, 0, 4 * KiB))
    && CHECK (member_durable (&v, 0)) && CHECK (member_durable (&v, 1))
    && CHECK (test_backend_entered (rig.d[2].tb, TB_FLUSH) == 0
              && test_backend_entered (rig.d[2].tb, TB_PWRITEV) == 0);
  test_thread_join (&t);
  finish (&v);
  return ok;
}

static void
test_fua_ordering (void)
{
  tap_ok (fua_ordering (0), "FUA over two members is answered after each "
          "backend has the data and a flush begun after it");
  tap_ok (fua_ordering (4), "the same on asynchronous members");
}

/* 8K across the d0/d1 boundary with FUA through session s; buf gets
 * the data.
 */
static int
fua_write_pair (struct session *s, unsigned char *buf)
{
  for (uint64_t i = 0; i < 8 * KiB; i++)
    buf[i] = pattern (60 * KiB + i, 7);
  return linear_pwrite (v.l, s, buf, 8 * KiB, 60 * KiB, REQ_FUA);
}

/* The member's backend holds its half of fua_write_pair's buf. */
static bool
pair_landed (unsigned disk, const unsigned char *buf)
{
  unsigned char got[4 * KiB];
  uint64_t at = disk == 0 ? 60 * KiB : 0;

  return CHECK (test_backend_read (rig.d[disk].tb, got, 4 * KiB, at) == 0)
    && test_bytes_equal (got, buf + (disk == 0 ? 0 : 4 * KiB), 4 * KiB,
                         disk == 0 ? "disk0 backend" : "disk1 backend");
}

/* Members of cfg, the plain volume and a session that knows them. */
static bool
fua_error_start (const struct queue_config *cfg, struct session **s)
{
  return CHECK (members_start (cfg)) && CHECK (vol_plain (&v))
    && CHECK ((*s = session_new ()) != NULL);
}

static void
fua_error_finish (struct session **s)
{
  finish (&v);
  session_free (*s);
  *s = NULL;
}

/* Errors: a member's failed flush, a part's latched write-back error,
 * and a part that fails outright, each returned by the FUA request,
 * while the other member is still flushed.
 */
static void
test_fua_errors (void)
{
  struct queue_config cfg = test_config (TEST_HOUR, 1000);
  unsigned char buf[8 * KiB];
  struct session *s = NULL;
  bool ok = fua_error_start (&cfg, &s);

  if (ok)
    test_backend_fail (rig.d[1].tb, TB_FLUSH, 1, EIO);
  ok = ok && CHECK (fua_write_pair (s, buf) == -1 && errno == EIO);
  ok = ok && CHECK (test_backend_count (rig.d[0].tb, TB_FLUSH) == 1)
    && CHECK (pair_landed (0, buf));
  ok = ok && CHECK (linear_flush (v.l, s) == 0);
  fua_error_finish (&s);
  tap_ok (ok, "FUA over two members: a member's failed flush is returned");

  /* ack=queued: d0's part fails after it was answered; the latched
   * error reaches this request through d0's flush, once.
   */
  ok = fua_error_start (&cfg, &s);
  if (ok)
    test_backend_fail (rig.d[0].tb, TB_PWRITEV, 1, EIO);
  ok = ok && CHECK (fua_write_pair (s, buf) == -1 && errno == EIO);
  ok = ok && CHECK (test_backend_count (rig.d[1].tb, TB_FLUSH) == 1)
    && CHECK (pair_landed (1, buf));
  ok = ok && CHECK (linear_flush (v.l, s) == 0);
  fua_error_finish (&s);
  tap_ok (ok, "FUA over two members: a part's latched write-back error is "
          "returned, once");

  /* ack=dispatched: d1's part fails in the call itself, and its error
   * wins over d0's failed flush that follows it.
   */
  cfg.ack = ACK_DISPATCHED;
  ok = fua_error_start (&cfg, &s);
  if (ok) {
    test_backend_fail (rig.d[1].tb, TB_PWRITEV, 1, EIO);
    test_backend_fail (rig.d[0].tb, TB_FLUSH, 1, ENOSPC);
  }
  ok = ok && CHECK (fua_write_pair (s, buf) == -1 && errno == EIO);
  ok = ok && CHECK (test_backend_count (rig.d[0].tb, TB_FLUSH) == 1)
    && CHECK (pair_landed (0, buf));
  fua_error_finish (&s);
  tap_ok (ok, "FUA over two members: a failed part's error comes first");
}

/* ------------------------------------------------------------ tables */

/* A disk whose backend insists on 4096-byte blocks. */
#define ALIGNED 3

static bool
members_start_with_aligned (void)
{
  struct queue_config cfg = test_config (TEST_HOUR, 1000);
  struct test_backend *tb;

  memset (&rig, 0, sizeof rig);
  for (unsigned i = 0; i < MEMBERS; i++)
    if (test_rig_backend (&rig, member_size[i]) == NULL)
      return false;
  if ((tb = test_rig_backend (&rig, 64 * KiB)) == NULL)
    return false;
  test_backend_get (tb)->limits = (struct block_limits) {
    .minimum = 4096, .preferred = 8192, .maximum = 1 * MiB
  };
  return test_rig_start (&rig, &cfg);
}

/* One bad row on a fresh volume: -1 and a message naming both. */
static bool
bad_disk_row (unsigned disk, uint64_t offset, uint64_t length)
{
  struct linear *l = linear_new_volume ("badvol");
  bool ok;

  ok = CHECK (l != NULL)
    && CHECK (linear_append_disk (l, rig.d[disk].q, offset, length) == -1)
    && CHECK (error_mentions ("badvol", queue_name (rig.d[disk].q)))
    && CHECK (l->nr_rows == 0 && l->size == 0);
  linear_free (l);
  return ok;
}

static void
test_bad_tables (void)
{
  struct linear *l = NULL, *inner = NULL;
  bool ok;

  log_set_sink (&(struct log_sink) { .error = capture_error });
  ok = CHECK (members_start_with_aligned ());

  tap_ok (ok && bad_disk_row (0, 60 * KiB, 8 * KiB)
          && bad_disk_row (0, 65 * KiB, 1)
          && bad_disk_row (1, 0, 32 * KiB + 1)
          && bad_disk_row (1, UINT64_MAX, 2),
          "bad table: a range past the member's end");
  tap_ok (ok && bad_disk_row (0, 0, 0) && bad_disk_row (2, 96 * KiB, 0),
          "bad table: a zero-length range");

  if (ok) {
    l = linear_new_volume ("emptyvol");
    ok = CHECK (l != NULL) && CHECK (linear_finish (l) == -1)
      && CHECK (error_mentions ("emptyvol", NULL));
    linear_free (l);
  }
  tap_ok (ok, "bad table: an empty volume (linear_finish)");

  tap_ok (ok && bad_disk_row (ALIGNED, 512, 4096)
          && bad_disk_row (ALIGNED, 0, 1000)
          && bad_disk_row (ALIGNED, 4096, 4096 + 512),
          "bad table: a misaligned sub-range of a 4096-byte member");

  /* Aligned itself, but at a misaligned place in the volume. */
  if (ok) {
    l = linear_new_volume ("shifted");
    ok = CHECK (l != NULL)
      && CHECK (linear_append_disk (l, rig.d[0].q, 0, 512) == 0)
      && CHECK (linear_append_disk (l, rig.d[ALIGNED].q, 0, 4096) == -1)
      && CHECK (error_mentions ("shifted", queue_name (rig.d[ALIGNED].q)));
    linear_free (l);
  }
  tap_ok (ok, "bad table: a 4096-byte member at a misaligned position");

  /* Through a nested volume: the same rules after flattening. */
  if (ok) {
    inner = linear_new_volume ("inner");
    l = linear_new_volume ("outer");
    ok = CHECK (inner && l)
      && CHECK (linear_append_disk (inner, rig.d[ALIGNED].q, 0, 64 * KiB)
                == 0)
      && CHECK (linear_finish (inner) == 0)
      && CHECK (linear_append_linear (l, inner, 512, 4096) == -1)
      && CHECK (linear_append_linear (l, inner, 60 * KiB, 8 * KiB) == -1)
      && CHECK (error_mentions ("outer", "inner"))
      && CHECK (linear_append_linear (l, inner, 0, 0) == -1)
      && CHECK (l->nr_rows == 0);
    linear_free (inner);
    linear_free (l);
  }
  tap_ok (ok, "bad table: bad ranges of a nested volume");

  test_rig_stop (&rig);
  log_set_sink (NULL);
}

static void
test_limits (void)
{
  struct linear *l = NULL, *disk = NULL;
  bool ok = CHECK (members_start_with_aligned ());

  ok = ok && CHECK ((l = linear_new_volume ("limits")) != NULL)
    && CHECK (linear_append_disk (l, rig.d[ALIGNED].q, 0, 64 * KiB) == 0)
    && CHECK (linear_append_disk (l, rig.d[0].q, 0, 64 * KiB) == 0)
    && CHECK (linear_finish (l) == 0);
  ok = ok && CHECK (l->limits.minimum == 4096)
    && CHECK (l->limits.preferred == 8192)
    && CHECK (l->limits.maximum == 1 * MiB);
  /* A plain disk export keeps its own limits. */
  ok = ok && CHECK ((disk = linear_new_disk (rig.d[0].q)) != NULL)
    && CHECK (disk->limits.minimum
              == queue_backend (rig.d[0].q)->limits.minimum)
    && CHECK (disk->limits.maximum
              == queue_backend (rig.d[0].q)->limits.maximum)
    && CHECK (disk->nr_rows == 1 && disk->size == member_size[0]);
  linear_free (l);
  linear_free (disk);
  test_rig_stop (&rig);
  tap_ok (ok, "a volume's block limits are the strictest of its members'");
}

/* ------------------------------------------------------------ model */

/* The queue's model test, on a volume: random writes, zeroes, trims
 * (some of each with FUA), flushes and reads over a table of sub-ranges
 * (so every member boundary and member-relative offset is exercised),
 * read back through the volume against a flat array after every
 * operation, and at the end through every member's own queue and on its
 * backend.
 */
static uint64_t
rand_below (unsigned *state, uint64_t n)
{
  return n ? (uint64_t) rand_r (state) % n : 0;
}

/* Mostly near a row boundary, so straddling is common. */
static uint64_t
random_offset (const struct vol *vol, unsigned *state)
{
  uint64_t start = 0, pick = rand_below (state, vol->nr + 1);

  if (rand_below (state, 4) == 0)
    return rand_below (state, vol->size);
  for (size_t i = 0; i < pick && i < vol->nr; i++)
    start += vol->map[i].length;
  start += rand_below (state, 2 * KiB);
  start = start > 1024 ? start - 1024 : 0;
  return MIN (start, vol->size - 1);
}

static bool
random_step (struct vol *vol, struct session *s, unsigned *state,
             unsigned i)
{
  static unsigned char got[MAX_VOLUME];
  uint64_t off = random_offset (vol, state);
  uint64_t len = 1 + rand_below (state, 24 * KiB);

  if (len > vol->size - off)
    len = vol->size - off;
  switch (rand_below (state, 8)) {
  case 0: case 1: case 2:
    return CHECK (vol_write (vol, s, off, len, i, 0) == 0);
  case 3:
    return CHECK (vol_write (vol, s, off, len, i, REQ_FUA) == 0);
  case 4:
    return CHECK (vol_zero (vol, off, len, (rand_below (state, 2)
                                            ? REQ_MAY_TRIM : 0)
                            | (i % 3 == 0 ? REQ_FUA : 0)) == 0);
  case 5:
    return CHECK (vol_trim (vol, off, len, i % 3 == 0 ? REQ_FUA : 0) == 0);
  case 6:
    return CHECK (linear_flush (vol->l, s) == 0);
  default:
    return CHECK (linear_pread (vol->l, got, len, off) == 0)
      && test_bytes_equal (got, vol->model + off, len, "volume read");
  }
}

static bool
random_run (const struct elevator_ops *elevator, enum ack_mode ack,
            unsigned seed)
{
  static const uint64_t delays[] = { 0, 100 * 1000, TEST_HOUR };
  static const uint32_t threshes[] = { 1, 4, 1000 };
  unsigned state = seed;
  struct queue_config cfg = test_config (delays[seed % 3],
                                         threshes[(seed / 3) % 3]);
  const struct map rows[] = {
    { 1, 4 * KiB, 20 * KiB }, { 0, 0, 64 * KiB }, { 2, 32 * KiB, 64 * KiB },
    { 1, 24 * KiB, 8 * KiB },
  };
  struct session *s = NULL;
  bool ok;

  cfg.elevator = elevator;
  cfg.ack = ack;
  ok = CHECK (members_start (&cfg));
  ok = ok && CHECK (vol_build (&v, "vol", rows, 4));
  ok = ok && CHECK ((s = session_new ()) != NULL);
  for (unsigned i = 0; ok && i < 150; i++) {
    ok = random_step (&v, s, &state, i);
    if (ok) {
      static unsigned char got[MAX_VOLUME];

      ok = CHECK (linear_pread (v.l, got, v.size, 0) == 0)
        && test_bytes_equal (got, v.model, v.size, "whole volume");
    }
    if (!ok)
      printf ("# seed %u failed at op %u\n", seed, i);
  }
  ok = ok && vol_verify_both (&v);
  session_free (s);
  finish (&v);
  return ok;
}

static void
test_random_model (void)
{
  static const struct elevator_ops *const elevators[] = {
    &elevator_deadline, &elevator_noop,
  };

  for (unsigned e = 0; e < 2; e++)
    for (int ack = ACK_QUEUED; ack <= ACK_DISPATCHED; ack++) {
      bool ok = true;

      for (unsigned seed = 1; ok && seed <= 9; seed++)
        ok = random_run (elevators[e], ack, seed);
      tap_ok (ok, "model: random ops over a volume of sub-ranges match a "
              "flat array (%s, ack=%s)", elevators[e]->name,
              ack == ACK_QUEUED ? "queued" : "dispatched");
    }
}

int
main (void)
{
  test_writes_straddle ();
  test_reads_straddle ();
  test_zero_straddle ();
  test_trim_straddle ();
  test_sub_ranges ();
  test_nesting ();
  test_extents ();
  test_fua ();
  test_fast_zero ();
  test_out_of_range ();
  test_flush_every_member ();
  test_flush_parallel ();
  test_member_error ();
  test_fua_parallel ();
  test_fua_repeat ();
  test_fua_ordering ();
  test_fua_errors ();
  test_bad_tables ();
  test_limits ();
  test_random_model ();
  /* A trailing plan: the count follows from the cases that ran. */
  tap_plan (tap_count);
  return tap_done ();
}
