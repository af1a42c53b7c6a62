/* plugq: unit tests for a disk's pool of spare buffer mappings. */
#include <config.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "buffers/buffer_pool.h"
#include "tap.h"

#define KiB ((size_t) 1024)
#define MiB (1024 * KiB)

/* The kernel still maps [p, p + size): mincore fails with ENOMEM over
 * any unmapped page.
 */
static bool
is_mapped (void *p, size_t size)
{
  unsigned char vec[4096];

  if (size / (size_t) getpagesize () > sizeof vec)
    size = sizeof vec * (size_t) getpagesize ();
  return mincore (p, size, vec) == 0;
}

static void
test_reuse (void)
{
  struct buffer_pool *pool = buffer_pool_new (16 * MiB);
  size_t got1, got2, got3;
  void *a, *b, *c;
  bool ok;

  a = buffer_pool_get (pool, 600 * KiB, &got1);
  ok = CHECK (a != NULL) && CHECK (got1 == MiB)
    && CHECK ((uintptr_t) a % (uintptr_t) getpagesize () == 0);
  if (ok) {
    memset (a, 'a', 600 * KiB);
    buffer_pool_put (pool, a, got1);
    ok = CHECK (buffer_pool_idle_bytes (pool) == MiB);
  }
  b = buffer_pool_get (pool, MiB, &got2);
  ok = ok && CHECK (b == a) && CHECK (got2 == MiB)
    && CHECK (buffer_pool_idle_bytes (pool) == 0);
  /* Another class is not served from this one's spares. */
  if (ok)
    buffer_pool_put (pool, b, got2);
  c = buffer_pool_get (pool, 200 * KiB, &got3);
  ok = ok && CHECK (c != NULL && c != a) && CHECK (got3 == 256 * KiB)
    && CHECK (buffer_pool_idle_bytes (pool) == MiB);
  if (c)
    buffer_pool_put (pool, c, got3);
  buffer_pool_free (pool);
  ok = ok && CHECK (!is_mapped (a, MiB));
  tap_ok (ok, "a freed 1 MiB mapping serves the next buffer of its class,"
          " not another class, and goes back to the kernel with the pool");
}

#define MANY 5

static void
test_idle_limit (void)
{
  struct buffer_pool *pool = buffer_pool_new (3 * MiB);
  void *v[MANY];
  size_t got[MANY];
  bool ok = true;

  for (int i = 0; i < MANY; i++) {
    v[i] = buffer_pool_get (pool, MiB, &got[i]);
    ok = ok && CHECK (v[i] != NULL);
  }
  for (int i = 0; ok && i < MANY; i++)
    buffer_pool_put (pool, v[i], got[i]);
  ok = ok && CHECK (buffer_pool_idle_bytes (pool) == 3 * MiB);
  for (int i = 0; ok && i < MANY; i++)
    ok = CHECK (is_mapped (v[i], MiB) == (i < 3));
  buffer_pool_free (pool);
  tap_ok (ok, "with a 3 MiB limit, 3 of 5 freed 1 MiB mappings are kept"
          " and the rest unmapped");
}

/* Small buffers hit the count before the bytes. */
static void
test_spare_count_limit (void)
{
  struct buffer_pool *pool = buffer_pool_new (16 * MiB);
  enum { N = BUFFER_POOL_SPARES + 44 };
  static void *v[N];
  size_t got[N];
  bool ok = true;

  for (int i = 0; i < N; i++) {
    v[i] = buffer_pool_get (pool, BUFFER_POOL_MIN, &got[i]);
    ok = ok && CHECK (v[i] != NULL) && CHECK (got[i] == BUFFER_POOL_MIN);
  }
  for (int i = 0; ok && i < N; i++)
    buffer_pool_put (pool, v[i], got[i]);
  ok = ok && CHECK (buffer_pool_idle_bytes (pool)
                    == BUFFER_POOL_SPARES * BUFFER_POOL_MIN)
    && CHECK (is_mapped (v[BUFFER_POOL_SPARES - 1], BUFFER_POOL_MIN))
    && CHECK (!is_mapped (v[BUFFER_POOL_SPARES], BUFFER_POOL_MIN));
  buffer_pool_free (pool);
  tap_ok (ok, "%d freed %zu KiB mappings: %d kept (far under the byte"
          " limit), the rest unmapped", N, BUFFER_POOL_MIN / KiB,
          BUFFER_POOL_SPARES);
}

static void
test_beyond_largest_class (void)
{
  struct buffer_pool *pool = buffer_pool_new (256 * MiB);
  size_t size = BUFFER_POOL_MAX + 4096, got;
  void *p = buffer_pool_get (pool, size, &got);
  bool ok = CHECK (p != NULL) && CHECK (got == size);

  if (ok) {
    memset (p, 'x', size);
    buffer_pool_put (pool, p, got);
    ok = CHECK (buffer_pool_idle_bytes (pool) == 0)
      && CHECK (!is_mapped (p, size));
  }
  buffer_pool_free (pool);
  tap_ok (ok, "a buffer past the largest class is mapped for itself and"
          " unmapped when freed");
}

/* Trimming gives back the largest spares first, down to what it is
 * asked to keep, and nothing when a spare was taken since the last call.
 */
static void
test_trim (void)
{
  struct buffer_pool *pool = buffer_pool_new (16 * MiB);
  void *big[3], *small, *again;
  size_t got[3], got_small, got_again;
  bool ok = true, more_after_take = false, more_after_trim = true;

  for (int i = 0; i < 3; i++) {
    big[i] = buffer_pool_get (pool, MiB, &got[i]);
    ok = ok && CHECK (big[i] != NULL);
  }
  small = buffer_pool_get (pool, 256 * KiB, &got_small);
  ok = ok && CHECK (small != NULL);
  for (int i = 0; ok && i < 3; i++)
    buffer_pool_put (pool, big[i], got[i]);
  if (ok)
    buffer_pool_put (pool, small, got_small);
  ok = ok && CHECK (buffer_pool_idle_bytes (pool) == 3 * MiB + 256 * KiB);
  /* A spare taken since the pool was made: nothing is trimmed. */
  again = buffer_pool_get (pool, MiB, &got_again);
  ok = ok && CHECK (again == big[2]);
  if (ok) {
    buffer_pool_put (pool, again, got_again);
    more_after_take = buffer_pool_trim (pool, MiB);
    ok = CHECK (more_after_take)
      && CHECK (buffer_pool_idle_bytes (pool) == 3 * MiB + 256 * KiB);
  }
  if (ok) {
    more_after_trim = buffer_pool_trim (pool, MiB);
    ok = CHECK (!more_after_trim)
      && CHECK (buffer_pool_idle_bytes (pool) == 256 * KiB)
      && CHECK (is_mapped (small, 256 * KiB));
    for (int i = 0; ok && i < 3; i++)
      ok = CHECK (!is_mapped (big[i], MiB));
  }
  buffer_pool_free (pool);
  tap_ok (ok, "trim to 1 MiB: nothing while spares are taken; then the"
          " three 1 MiB spares go, the 256 KiB one stays");
}

int
main (void)
{
  tap_plan (5);
  test_reuse ();
  test_idle_limit ();
  test_spare_count_limit ();
  test_beyond_largest_class ();
  test_trim ();
  return tap_done ();
}
