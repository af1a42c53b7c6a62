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

#define CASES 7
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

/* Buffers with room to append to come back for the next one with room,
 * up to the limit; one of more room than the spares hold is not kept.
 */
static void
test_room_buffers_kept (void)
{
  enum { LIMIT = 4, CAPACITY = 96 * 1024 };
  struct data_buffer_spares rooms;
  struct data_buffer *v[LIMIT + 1] = { 0 }, *w[LIMIT + 1] = { 0 };
  struct data_buffer *big = NULL;
  char c[4096];
  size_t reused = 0;
  bool ok = true;

  memset (c, 'r', sizeof c);
  data_buffer_spares_init_sized (&rooms, CAPACITY, LIMIT);
  for (size_t i = 0; ok && i <= LIMIT; i++)
    ok = CHECK ((v[i] = data_buffer_new_room (c, sizeof c, 64 * 1024, 1,
                                              NULL, &rooms)) != NULL);
  for (size_t i = 0; ok && i <= LIMIT; i++)
    data_buffer_put (v[i]);     /* the last finds the limit reached */
  ok = ok && CHECK (spare_ring_count (&rooms.ring) == LIMIT);
  for (size_t i = 0; ok && i <= LIMIT; i++) {
    ok = CHECK ((w[i] = data_buffer_new_room (c, 100, 32 * 1024, 1, NULL,
                                              &rooms)) != NULL)
      && CHECK (w[i]->room == 32 * 1024) && CHECK (w[i]->size == 100)
      && CHECK (data_buffer_fits (w[i], 32 * 1024 - 100))
      && CHECK (!data_buffer_fits (w[i], 32 * 1024 - 99));
    for (size_t j = 0; ok && i < LIMIT && j <= LIMIT; j++)
      reused += w[i] == v[j];
  }
  ok = ok && CHECK (spare_ring_count (&rooms.ring) == 0);
  if (ok) {
    data_buffer_append (w[0], c, sizeof c);
    ok = CHECK (memcmp (w[0]->data + 100, c, sizeof c) == 0);
  }
  for (size_t i = 0; i <= LIMIT; i++)
    data_buffer_put (w[i]);
  ok = ok && CHECK ((big = data_buffer_new_room (c, sizeof c, CAPACITY + 1,
                                                 1, NULL, &rooms)) != NULL)
    && CHECK (big->spares == NULL);
  data_buffer_put (big);
  data_buffer_spares_free (&rooms);
  tap_ok (ok && reused == LIMIT,
          "buffers with room are kept for the next, %d at most (%zu reused),"
          " with the room asked for; larger ones are not kept", LIMIT,
          reused);
}

/* On a disk whose buffers are aligned (O_DIRECT), a kept buffer with
 * room is still aligned and its mapping goes back to the pool at the end.
 */
static void
test_aligned_room_buffers_kept (void)
{
  enum { ALIGN = 4096, CAPACITY = 96 * 1024 };
  struct buffer_pool *pool = buffer_pool_new (1024 * 1024);
  struct data_buffer_spares rooms;
  struct data_buffer *x = NULL, *y = NULL;
  char c[ALIGN];
  bool ok = CHECK (pool != NULL);

  memset (c, 'a', sizeof c);
  data_buffer_spares_init_sized (&rooms, CAPACITY, 2);
  ok = ok && CHECK ((x = data_buffer_new_room (c, sizeof c, 64 * 1024,
                                               ALIGN, pool, &rooms)) != NULL)
    && CHECK ((uintptr_t) x->data % ALIGN == 0);
  data_buffer_put (x);
  ok = ok && CHECK ((y = data_buffer_new_room (c, sizeof c, 48 * 1024,
                                               ALIGN, pool, &rooms)) != NULL)
    && CHECK (y == x) && CHECK ((uintptr_t) y->data % ALIGN == 0)
    && CHECK (y->room == 48 * 1024)
    && CHECK (memcmp (y->data, c, sizeof c) == 0);
  data_buffer_put (y);
  data_buffer_spares_free (&rooms);
  buffer_pool_free (pool);
  tap_ok (ok, "an aligned buffer with room is kept aligned for the next");
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
  test_room_buffers_kept ();
  test_aligned_room_buffers_kept ();
  test_large_not_kept ();
  test_threads ();
  return tap_done ();
}
