/* plugq: unit tests for the sparse memory backend. */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "backends/backend.h"
#include "common/extents.h"
#include "backend_checks.h"
#include "common/minmax.h"
#include "tap.h"

#define KiB ((uint64_t) 1024)
#define MiB (KiB * 1024)
#define GiB (MiB * 1024)
#define TiB (GiB * 1024)
#define PG (64 * KiB)
#define HZ (EXTENT_HOLE | EXTENT_ZERO)

static uint64_t
rss_bytes (void)
{
  FILE *fp = fopen ("/proc/self/statm", "r");
  unsigned long size, resident = 0;

  if (fp == NULL)
    return 0;
  if (fscanf (fp, "%lu %lu", &size, &resident) != 2)
    resident = 0;
  fclose (fp);
  return (uint64_t) resident * (uint64_t) sysconf (_SC_PAGESIZE);
}

static bool
test_new_rejects (void)
{
  struct backend *b;
  bool ok = true;

  errno = 0;
  ok &= CHECK (backend_memory_new (0) == NULL && errno == EINVAL);
  errno = 0;
  ok &= CHECK (backend_memory_new ((uint64_t) INT64_MAX + 1) == NULL
               && errno == EINVAL);
  b = backend_memory_new (INT64_MAX);
  ok &= CHECK (b != NULL);
  if (b)
    ok &= CHECK (strcmp (b->description, "memory 8.0 EiB (sparse)") == 0);
  backend_close (b);
  return ok;
}

static bool
test_properties (void)
{
  struct backend *b = backend_memory_new (GiB);
  bool ok = true;

  if (!CHECK (b != NULL))
    return false;
  ok &= CHECK (strcmp (b->ops->kind, "memory") == 0);
  ok &= CHECK (strcmp (b->description, "memory 1.0 GiB (sparse)") == 0);
  ok &= CHECK (b->size == GiB);
  ok &= CHECK (b->limits.minimum == 1 && b->limits.preferred == 4096);
  ok &= CHECK (b->limits.maximum == 64 * MiB);
  ok &= CHECK (b->max_write == 32 * MiB && b->max_iov == IOV_MAX);
  ok &= CHECK (b->max_writers > 1);
  ok &= CHECK (b->can_fast_zero && b->trim_reads_zero);
  ok &= CHECK (b->ops->flush (b) == 0);
  ok &= CHECK (b->ops->cache (b, MiB, 0) == 0);
  backend_close (b);

  b = backend_memory_new (512);
  ok &= CHECK (b && strcmp (b->description, "memory 512 B (sparse)") == 0);
  backend_close (b);
  return ok;
}

static bool
test_fresh (void)
{
  struct backend *b = backend_memory_new (GiB);
  const struct extent want[] = { { 0, GiB, HZ } };
  bool ok = true;

  if (!CHECK (b != NULL))
    return false;
  ok &= reads_as (b, 0, 3 * PG + 17, PG - 9);
  ok &= reads_as (b, 0, 1, GiB - 1);
  ok &= extents_are (b, GiB, 0, want, 1);
  backend_close (b);
  return ok;
}

/* Elements across page boundaries; the second read starts and ends
 * inside pages.
 */
static bool
test_pwritev (void)
{
  struct backend *b = backend_memory_new (16 * MiB);
  const size_t lens[] = { 1, 4095, 70000, 3, 2 * PG + 7 };
  bool ok;

  if (!CHECK (b != NULL))
    return false;
  ok = pwritev_reads_back (b, lens, PG - 100);
  backend_close (b);
  return ok;
}

static bool
test_zero_partial (bool may_trim)
{
  struct backend *b = backend_memory_new (16 * MiB);
  const struct extent want[] = {
    { 0, PG, 0 }, { PG, PG, HZ }, { 2 * PG, PG, 0 }, { 3 * PG, 16 * MiB - 3 * PG, HZ },
  };
  const struct extent want2[] = { { 0, 16 * MiB, HZ } };
  bool ok = true;

  if (!CHECK (b != NULL))
    return false;
  ok &= CHECK (fill (b, 0xaa, 3 * PG, 0) == 0);
  ok &= CHECK (backend_zero (b, 2 * PG + 100, 100, may_trim, false) == 0);
  ok &= reads_as (b, 0xaa, 100, 0);
  ok &= reads_as (b, 0, 2 * PG + 100, 100);
  ok &= reads_as (b, 0xaa, PG - 200, 2 * PG + 200);
  /* The page wholly inside the range is gone; the cut ones stay. */
  ok &= extents_are (b, 16 * MiB, 0, want, 4);
  /* Clearing what is left of the cut pages frees them too. */
  ok &= CHECK (backend_zero (b, 100, 0, may_trim, false) == 0);
  ok &= CHECK (backend_zero (b, PG - 200, 2 * PG + 200, may_trim, false) == 0);
  ok &= extents_are (b, 16 * MiB, 0, want2, 1);
  ok &= reads_as (b, 0, 3 * PG, 0);
  backend_close (b);
  return ok;
}

static bool
test_trim (void)
{
  struct backend *b = backend_memory_new (16 * MiB);
  const struct extent want[] = {
    { 0, MiB, 0 }, { MiB, MiB, HZ }, { 2 * MiB, MiB, 0 },
  };
  bool ok = true;

  if (!CHECK (b != NULL))
    return false;
  ok &= CHECK (fill (b, 0x55, 3 * MiB, 0) == 0);
  ok &= CHECK (backend_trim (b, MiB, MiB, false) == 0);
  ok &= reads_as (b, 0, MiB, MiB);
  ok &= reads_as (b, 0x55, MiB, 0);
  ok &= reads_as (b, 0x55, MiB, 2 * MiB);
  ok &= extents_are (b, 3 * MiB, 0, want, 3);
  backend_close (b);
  return ok;
}

static bool
test_extents (void)
{
  struct backend *b = backend_memory_new (GiB);
  const uint64_t chunk = 256 * MiB;
  const struct extent all[] = {
    { 0, 2 * PG, HZ }, { 2 * PG, PG, 0 }, { 3 * PG, 2 * PG, HZ },
    { 5 * PG, PG, 0 }, { 6 * PG, chunk - 7 * PG, HZ },
    { chunk - PG, 2 * PG, 0 }, { chunk + PG, GiB - chunk - PG, HZ },
  };
  const struct extent mid_hole[] = {
    { 100, 2 * PG - 100, HZ }, { 2 * PG, 1, 0 },
  };
  const struct extent mid_data[] = { { 2 * PG + 5, 10, 0 } };
  const struct extent tail[] = { { GiB - 1, 1, HZ } };
  struct extent_list l;
  bool ok = true;

  if (!CHECK (b != NULL))
    return false;
  ok &= CHECK (fill (b, 1, 1, 2 * PG + 7) == 0);
  ok &= CHECK (fill (b, 1, PG, 5 * PG) == 0);
  /* One write across a chunk boundary. */
  ok &= CHECK (fill (b, 1, 2 * PG, chunk - PG) == 0);
  ok &= extents_are (b, GiB, 0, all, 7);
  ok &= extents_are (b, 2 * PG + 1 - 100, 100, mid_hole, 2);
  ok &= extents_are (b, 10, 2 * PG + 5, mid_data, 1);
  ok &= extents_are (b, 1000, GiB - 1, tail, 1);

  /* Appends to a list that already ends at the offset asked for. */
  extent_list_init (&l);
  ok &= CHECK (b->ops->extents (b, PG, 0, &l) == 0);
  ok &= CHECK (b->ops->extents (b, 2 * PG, PG, &l) == 0);
  ok &= CHECK (l.len == 2 && l.v[0].length == 2 * PG && l.v[1].type == 0);
  extent_list_free (&l);

  errno = 0;
  extent_list_init (&l);
  ok &= CHECK (b->ops->extents (b, 1, GiB, &l) == -1 && errno == EINVAL);
  extent_list_free (&l);
  backend_close (b);
  return ok;
}

static bool
test_zero_100m (void)
{
  struct backend *b = backend_memory_new (GiB);
  const struct extent want[] = { { 0, 100 * MiB, HZ } };
  bool ok = true;
  uint64_t off;

  if (!CHECK (b != NULL))
    return false;
  for (off = 0; off < 100 * MiB + MiB && ok; off += MiB)
    ok &= CHECK (fill (b, 0xff, MiB, off) == 0);
  ok &= CHECK (backend_zero (b, 100 * MiB, 0, false, false) == 0);
  ok &= reads_as (b, 0, 1, 70 * MiB);
  ok &= reads_as (b, 0, 1, 99 * MiB + 4095);
  ok &= reads_as (b, 0, 1, 100 * MiB - 1);
  ok &= reads_as (b, 0xff, 1, 100 * MiB);
  ok &= extents_are (b, 100 * MiB, 0, want, 1);
  backend_close (b);
  return ok;
}

static bool
test_1tib (void)
{
  struct backend *b;
  const struct extent want[] = {
    { 0, 1023 * GiB, HZ }, { 1023 * GiB, MiB, 0 },
    { 1023 * GiB + MiB, GiB - MiB, HZ },
  };
  uint64_t before, after;
  bool ok = true;

  before = rss_bytes ();
  b = backend_memory_new (TiB);
  if (!CHECK (b != NULL))
    return false;
  ok &= CHECK (fill (b, 0x5a, MiB, 1023 * GiB) == 0);
  after = rss_bytes ();
  printf ("# RSS grew by %" PRIu64 " KiB\n", (after - before) / KiB);
  /* 1 MiB of pages, one chunk, and the test's own 1 MiB buffer. */
  ok &= CHECK (before > 0 && after < before + 16 * MiB);
  ok &= reads_as (b, 0x5a, MiB, 1023 * GiB);
  ok &= reads_as (b, 0, 4096, 1023 * GiB - 4096);
  ok &= reads_as (b, 0, 4096, TiB - 4096);
  ok &= extents_are (b, TiB, 0, want, 3);
  backend_close (b);
  return ok;
}

static bool
test_huge (void)
{
  const uint64_t size = INT64_MAX;
  struct backend *b = backend_memory_new (size);
  const uint64_t last_page = size & ~(PG - 1);
  /* Allocation is tracked per page, so the whole last page is data. */
  const struct extent want[] = {
    { 0, last_page, HZ }, { last_page, size - last_page, 0 },
  };
  bool ok = true;

  if (!CHECK (b != NULL))
    return false;
  ok &= CHECK (fill (b, 7, 10, size - 10) == 0);
  ok &= reads_as (b, 7, 10, size - 10);
  ok &= extents_are (b, size, 0, want, 2);
  ok &= CHECK (backend_zero (b, size, 0, false, false) == 0);
  ok &= reads_as (b, 0, 10, size - 10);
  backend_close (b);
  return ok;
}

static bool
test_out_of_range (void)
{
  struct backend *b = backend_memory_new (MiB);
  char buf[16];
  bool ok = true;

  if (!CHECK (b != NULL))
    return false;
  errno = 0;
  ok &= CHECK (b->ops->pread (b, buf, 16, MiB - 8) == -1 && errno == EINVAL);
  errno = 0;
  ok &= CHECK (write_buf (b, buf, 16, MiB - 8) == -1 && errno == EINVAL);
  errno = 0;
  ok &= CHECK (backend_zero (b, 16, UINT64_MAX - 8, false, false) == -1
               && errno == EINVAL);
  errno = 0;
  ok &= CHECK (backend_trim (b, 2 * MiB, 0, false) == -1 && errno == EINVAL);
  ok &= CHECK (b->ops->pread (b, buf, 8, MiB - 8) == 0);
  backend_close (b);
  return ok;
}

/* Random writes, zeroes and trims checked against a flat array. */
static bool
test_random (void)
{
  const size_t size = 4 * MiB;
  struct backend *b = backend_memory_new (size);
  unsigned char *model = calloc (1, size), *buf = malloc (size);
  bool ok = true;
  int i;

  if (!CHECK (b != NULL && model && buf))
    return false;
  srand (4242);
  for (i = 0; i < 2000 && ok; i++) {
    uint64_t off = (uint64_t) rand () % size;
    uint64_t len = (uint64_t) rand () % (3 * PG);
    int op = rand () % 4;

    if (len > size - off)
      len = size - off;
    if (op <= 1) {
      memset (buf, i & 0xff ? i & 0xff : 1, len);
      ok &= CHECK (write_buf (b, buf, len, off) == 0);
      memcpy (model + off, buf, len);
    }
    else {
      if (op == 2)
        ok &= CHECK (backend_zero (b, len, off, i & 1, false) == 0);
      else
        ok &= CHECK (backend_trim (b, len, off, false) == 0);
      memset (model + off, 0, len);
    }
  }
  ok &= CHECK (b->ops->pread (b, buf, size, 0) == 0);
  ok &= CHECK (memcmp (buf, model, size) == 0);
  if (ok) {
    /* Whatever extents call a hole must read as zeroes. */
    struct extent_list l;
    size_t e;
    uint64_t k;

    extent_list_init (&l);
    ok &= CHECK (b->ops->extents (b, size, 0, &l) == 0);
    for (e = 0; e < l.len && ok; e++)
      if (l.v[e].type & EXTENT_ZERO)
        for (k = l.v[e].offset; k < l.v[e].offset + l.v[e].length; k++)
          if (model[k] != 0) {
            ok = CHECK (model[k] == 0);
            break;
          }
    extent_list_free (&l);
  }
  free (model);
  free (buf);
  backend_close (b);
  return ok;
}

struct race {
  struct backend *b;
  atomic_bool stop;
  atomic_bool torn;
};

#define RACE_LEN (2 * PG)
#define RACE_OFFSET (PG / 2)
#define RACE_READERS 2

/* ThreadSanitizer reports a race the first time the accesses meet, and
 * checks every byte copied, so a tenth of the rounds does its job; the
 * plain builds need them all, since only a torn page shows a race there.
 */
#ifdef TAP_TSAN
#define RACE_ROUNDS 300
#else
#define RACE_ROUNDS 3000
#endif

/* Whether every page's share of buf (read from offset) holds one byte. */
static bool
pages_uniform (const unsigned char *buf, size_t len, uint64_t offset)
{
  size_t i = 0;

  while (i < len) {
    size_t in_page = PG - (offset + i) % PG;
    size_t end = MIN (i + in_page, len);

    if (!bytes_all (buf + i, buf[i], end - i))
      return false;
    i = end;
  }
  return true;
}

static void *
race_reader (void *arg)
{
  struct race *r = arg;
  unsigned char *buf = malloc (RACE_LEN);

  while (!atomic_load (&r->stop) && buf) {
    if (r->b->ops->pread (r->b, buf, RACE_LEN, RACE_OFFSET) == -1
        || !pages_uniform (buf, RACE_LEN, RACE_OFFSET)) {
      atomic_store (&r->torn, true);
      break;
    }
  }
  free (buf);
  return NULL;
}

/* A reader sees each page of a write whole or not at all.  (A write over
 * several pages may be half seen: the queue lays writes in flight over
 * every read, so no client can tell.)
 */
static bool
test_concurrent (void)
{
  struct race r = { .b = backend_memory_new (MiB) };
  pthread_t t[RACE_READERS];
  int i, n;
  bool ok = true;

  if (!CHECK (r.b != NULL))
    return false;
  for (i = 0; i < RACE_READERS; i++)
    pthread_create (&t[i], NULL, race_reader, &r);
  for (n = 0; n < RACE_ROUNDS && ok; n++) {
    ok &= CHECK (fill (r.b, n % 255 + 1, RACE_LEN, RACE_OFFSET) == 0);
    if (n % 3 == 0)
      ok &= CHECK (backend_zero (r.b, RACE_LEN, RACE_OFFSET, true, false) == 0);
  }
  atomic_store (&r.stop, true);
  for (i = 0; i < RACE_READERS; i++)
    pthread_join (t[i], NULL);
  ok &= CHECK (!atomic_load (&r.torn));
  backend_close (r.b);
  return ok;
}

/* Writers of max_writers threads, each on its own ranges, as the queue's
 * token holders are: lanes interleave within pages and chunks, so new
 * pages and new chunks are added by several threads at once, while one
 * more lane writes and zeroes its own bytes of the same pages (clearing
 * part of a page another thread writes, and freeing pages), and a
 * zeroer empties other chunks.
 */
#define LANES 4
#define LANE_ROUNDS 200
#define LANE_STRIDE (LANES * 3 * KiB)

struct lane {
  struct backend *b;
  pthread_barrier_t *round;     /* lanes reach each new page together */
  unsigned id;
  bool ok;
};

/* Lane id owns [k*(64M+STRIDE) + id*3K, +3K) for every k: the lanes'
 * ranges of one k share a 64 KiB page (or two), and k runs across many
 * 256 MiB chunks, four per chunk.
 */
static uint64_t
lane_offset (unsigned id, unsigned k)
{
  return k * (64 * MiB + LANE_STRIDE) + id * 3 * KiB;
}

static void *
lane_writer (void *arg)
{
  struct lane *l = arg;

  l->ok = true;
  for (unsigned k = 0; k < LANE_ROUNDS; k++) {
    pthread_barrier_wait (l->round);
    if (l->ok)
      l->ok = fill (l->b, (int) (l->id * LANE_ROUNDS + k) % 251 + 1,
                    3 * KiB, lane_offset (l->id, k)) == 0;
  }
  return NULL;
}

/* The lane after the writers: writes its range, then zeroes it. */
static void *
lane_zeroer (void *arg)
{
  struct lane *l = arg;

  l->ok = true;
  for (unsigned k = 0; k < LANE_ROUNDS; k++) {
    uint64_t offset = lane_offset (l->id, k);

    pthread_barrier_wait (l->round);
    if (l->ok)
      l->ok = fill (l->b, 9, 3 * KiB, offset) == 0
        && backend_zero (l->b, 3 * KiB, offset, k & 1, false) == 0;
  }
  return NULL;
}

/* Past every lane's ranges. */
#define ZEROER_BASE (16 * GiB)
#define ZEROER_CHUNKS 32

static void *
chunk_zeroer (void *arg)
{
  struct lane *l = arg;
  l->ok = true;
  for (unsigned k = 0; k < LANE_ROUNDS && l->ok; k++) {
    uint64_t chunk = ZEROER_BASE + k % ZEROER_CHUNKS * 256 * MiB;

    l->ok = fill (l->b, 7, 3 * KiB, chunk) == 0
      && backend_zero (l->b, 256 * MiB, chunk, true, false) == 0;
  }
  return NULL;
}

static bool
test_parallel_writers (void)
{
  struct backend *b = backend_memory_new (64 * GiB);
  struct lane lanes[LANES + 2];
  pthread_t t[LANES + 2];
  pthread_barrier_t round;
  bool ok = true;

  if (!CHECK (b != NULL))
    return false;
  pthread_barrier_init (&round, NULL, LANES + 1);
  for (unsigned i = 0; i <= LANES + 1; i++) {
    lanes[i] = (struct lane) { .b = b, .round = &round, .id = i };
    pthread_create (&t[i], NULL,
                    i < LANES ? lane_writer
                    : i == LANES ? lane_zeroer : chunk_zeroer, &lanes[i]);
  }
  for (unsigned i = 0; i <= LANES + 1; i++) {
    pthread_join (t[i], NULL);
    ok &= CHECK (lanes[i].ok);
  }
  pthread_barrier_destroy (&round);
  for (unsigned id = 0; id < LANES && ok; id++)
    for (unsigned k = 0; k < LANE_ROUNDS && ok; k++)
      ok = reads_as (b, (int) (id * LANE_ROUNDS + k) % 251 + 1, 3 * KiB,
                     lane_offset (id, k));
  for (unsigned k = 0; k < LANE_ROUNDS && ok; k++)
    ok = reads_as (b, 0, 3 * KiB, lane_offset (LANES, k));
  /* The zeroer's last word on each of its chunks was a zero. */
  for (unsigned k = 0; k < ZEROER_CHUNKS && ok; k++)
    ok = reads_as (b, 0, 3 * KiB, ZEROER_BASE + k * 256 * MiB);
  backend_close (b);
  return ok;
}

int
main (void)
{
  tap_plan (15);
  tap_ok (test_new_rejects (), "size 0 and sizes past 2^63-1 are refused");
  tap_ok (test_properties (), "limits, flags and description");
  tap_ok (test_fresh (), "a new disk reads as zeroes and is one hole");
  tap_ok (test_pwritev (), "pwritev of several unaligned iovecs reads back");
  tap_ok (test_zero_partial (false), "zero without may_trim: partial pages");
  tap_ok (test_zero_partial (true), "zero with may_trim: partial pages");
  tap_ok (test_trim (), "trim reads back as zeroes and becomes a hole");
  tap_ok (test_extents (), "extents: data and hole boundaries");
  tap_ok (test_zero_100m (), "zero of 100 MiB reaches its far end");
  tap_ok (test_1tib (), "1 TiB disk: write at 1023 GiB costs little RSS");
  tap_ok (test_huge (), "2^63-1 byte disk: write, extents, zero all");
  tap_ok (test_out_of_range (), "requests past the end fail with EINVAL");
  tap_ok (test_random (), "random writes, zeroes and trims match a model");
  tap_ok (test_concurrent (), "readers never see a torn page");
  tap_ok (test_parallel_writers (),
          "parallel writers and a zeroer on shared pages and chunks");
  return tap_done ();
}
