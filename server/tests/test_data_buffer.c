/* plugq: unit tests for data buffers and a disk's spare small buffers. */
#include <config.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buffers/buffer_pool.h"
#include "buffers/data_buffer.h"
#include "tap.h"

#define CASES 5
#define THREADS 4
#define ROUNDS 20000

static struct data_buffer_spares spares;

static void
test_small_buffer_reused (void)
{
  char a[100], b[DATA_BUFFER_SMALL];
  struct data_buffer *x, *y;
  bool ok;

  memset (a, 'a', sizeof a);
  memset (b, 'b', sizeof b);
  data_buffer_spares_init (&spares);
  x = data_buffer_new (a, sizeof a, 1, NULL, &spares);
  ok = CHECK (x != NULL && x->size == sizeof a && bytes_all (x->data, 'a', 100));
  data_buffer_put (x);
  /* The freed buffer serves the next small write, of any small size. */
  y = data_buffer_new (b, sizeof b, 1, NULL, &spares);
  ok = ok && CHECK (y == x && y->size == sizeof b
                    && bytes_all (y->data, 'b', sizeof b));
  data_buffer_put (y);
  data_buffer_spares_free (&spares);
  tap_ok (ok, "a freed small buffer serves the next small write");
}

static void
test_references (void)
{
  char a[64] = "x";
  struct data_buffer *x, *y;
  bool ok;

  data_buffer_spares_init (&spares);
  x = data_buffer_new (a, sizeof a, 1, NULL, &spares);
  data_buffer_get (x);
  data_buffer_put (x);
  /* Still referenced: not parked, so not handed out again. */
  y = data_buffer_new (a, sizeof a, 1, NULL, &spares);
  ok = CHECK (x != NULL && y != NULL && y != x);
  data_buffer_put (x);
  data_buffer_put (y);
  data_buffer_spares_free (&spares);
  tap_ok (ok, "a buffer still referenced is not reused");
}

static void
test_ring_bounded (void)
{
  struct data_buffer *v[SPARE_RING_CELLS + 1], *w[SPARE_RING_CELLS + 1];
  char c = 'c';
  size_t reused = 0;
  bool ok = true;

  data_buffer_spares_init (&spares);
  for (size_t i = 0; i <= SPARE_RING_CELLS; i++)
    ok &= CHECK ((v[i] = data_buffer_new (&c, 1, 1, NULL, &spares)) != NULL);
  for (size_t i = 0; ok && i <= SPARE_RING_CELLS; i++)
    data_buffer_put (v[i]);     /* the last finds the ring full */
  for (size_t i = 0; ok && i <= SPARE_RING_CELLS; i++) {
    ok &= CHECK ((w[i] = data_buffer_new (&c, 1, 1, NULL, &spares)) != NULL);
    for (size_t j = 0; ok && j < SPARE_RING_CELLS; j++)
      if (w[i] == v[j]) {
        reused++;
        break;
      }
  }
  for (size_t i = 0; ok && i <= SPARE_RING_CELLS; i++)
    data_buffer_put (w[i]);
  data_buffer_spares_free (&spares);
  tap_ok (ok && reused == SPARE_RING_CELLS,
          "the spares keep %d buffers, no more (%zu reused)",
          SPARE_RING_CELLS, reused);
}

static void
test_large_not_kept (void)
{
  size_t n = DATA_BUFFER_SMALL + 1;
  char *a = calloc (1, n);
  struct data_buffer *x;
  bool ok;

  data_buffer_spares_init (&spares);
  x = a ? data_buffer_new (a, n, 1, NULL, &spares) : NULL;
  ok = CHECK (x != NULL && x->spares == NULL);
  data_buffer_put (x);
  data_buffer_spares_free (&spares);
  free (a);
  tap_ok (ok, "a buffer larger than %d bytes is not kept",
          DATA_BUFFER_SMALL);
}

/* Each thread fills buffers with its own byte and checks them after a
 * yield: two threads handed the same buffer would see each other's.
 */
static void *
churn (void *arg)
{
  unsigned char mine = (unsigned char) (uintptr_t) arg, data[512];
  struct data_buffer *held[4] = { NULL };
  intptr_t bad = 0;

  memset (data, mine, sizeof data);
  for (int i = 0; i < ROUNDS; i++) {
    int k = i % 4;

    if (held[k]) {
      if (!bytes_all (held[k]->data, mine, sizeof data))
        bad++;
      data_buffer_put (held[k]);
    }
    held[k] = data_buffer_new (data, sizeof data, 1, NULL, &spares);
    if (held[k] == NULL)
      bad++;
  }
  for (int k = 0; k < 4; k++)
    data_buffer_put (held[k]);
  return (void *) bad;
}

static void
test_threads (void)
{
  pthread_t t[THREADS];
  bool ok = true;
  int rounds = ROUNDS;

  data_buffer_spares_init (&spares);
  for (uintptr_t i = 0; i < THREADS; i++)
    ok &= CHECK (pthread_create (&t[i], NULL, churn, (void *) (i + 1)) == 0);
  for (int i = 0; i < THREADS; i++) {
    void *bad = (void *) 1;

    pthread_join (t[i], &bad);
    ok &= CHECK (bad == NULL);
  }
  data_buffer_spares_free (&spares);
  tap_ok (ok, "%d threads, %d buffers each, never share one",
          THREADS, rounds);
}

int
main (void)
{
  tap_plan (CASES);
  test_small_buffer_reused ();
  test_references ();
  test_ring_bounded ();
  test_large_not_kept ();
  test_threads ();
  return tap_done ();
}
