/* plugq: unit tests for how many spare aligned buffers a disk keeps
 * (server/buffers/buffer_pool.c, the dispatch thread's look at them in
 * server/queue/queue_dispatch.c).
 *
 * A disk whose backend needs aligned memory (O_DIRECT) copies each
 * large write into a mapping from its pool.  While it writes, the pool
 * may keep as many freed mappings as the queue can hold, so that a queue
 * whose buffers rise and fall by dozens does not map, fault and zero
 * them again; once the disk takes none for a while it keeps 16 MiB.
 */
#include <config.h>

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "buffers/buffer_pool.h"
#include "fixtures.h"
#include "queue/queue.h"
#include "queue/queue_internal.h"
#include "tap.h"
#include "test_backends.h"

#define MiB ((uint64_t) 1024 * 1024)
#define BLOCK 4096
#define WRITES 24                       /* above what a quiet disk keeps */
#define QUIET (16 * MiB)                /* SPARE_BUFFERS_QUIET */
#define DISK_SIZE (2 * WRITES * MiB)
#define BUSY_S 2.5                      /* over two looks, a second apart */
#define TRIM_TIMEOUT_S 10.0

/* WRITES 1 MiB writes, 2 MiB apart (a piece and a buffer each), all
 * queued at once, then flushed: every buffer is freed together.
 */
static bool
write_apart_and_flush (struct queue *q, int c)
{
  for (int i = 0; i < WRITES; i++)
    if (!CHECK (test_write_fill (q, NULL, c, MiB, 2 * i * MiB, 0) == 0))
      return false;
  return CHECK (queue_flush (q, NULL) == 0);
}

static uint64_t
idle (struct queue *q)
{
  return buffer_pool_idle_bytes (q->buffers);
}

/* Polls until the pool holds at most QUIET; the seconds it took, or a
 * negative number past TRIM_TIMEOUT_S.
 */
static double
wait_for_trim (struct queue *q)
{
  double t0 = test_now_s ();

  while (idle (q) > QUIET) {
    if (test_now_s () - t0 > TRIM_TIMEOUT_S)
      return -1;
    test_poll_step ();
  }
  return test_now_s () - t0;
}

static void
test_busy_disk_keeps_its_spares (void)
{
  /* Every write queued (none around the queue, none unplugging at
   * max-merge bytes), so each takes a buffer.
   */
  struct queue_config cfg = test_config (TEST_HOUR, 100000);
  const struct test_shape aligned = { .buffer_align = BLOCK };
  struct test_rig r;
  double t0, took = -1;
  bool ok;
  struct queue *q;

  cfg.bypass = false;
  cfg.max_merge = 2 * WRITES * MiB;
  ok = CHECK (test_rig_shaped (&r, &cfg, DISK_SIZE, &aligned));
  q = r.d[0].q;
  int rounds = 0;

  ok = ok && write_apart_and_flush (q, 'a');
  if (ok && !CHECK (idle (q) == WRITES * MiB)) {
    printf ("# idle %" PRIu64 " KiB\n", idle (q) / 1024);
    ok = false;
  }
  /* A disk that keeps taking its spares keeps them all. */
  for (t0 = test_now_s (); ok && test_now_s () - t0 < BUSY_S; rounds++) {
    ok = CHECK (test_write_fill (q, NULL, 'b', MiB, 0, 0) == 0)
      && CHECK (queue_flush (q, NULL) == 0);
    test_sleep_us (50 * 1000);
  }
  ok = ok && CHECK (idle (q) == WRITES * MiB);
  /* Quiet, it gives back all but QUIET, a look or two later. */
  if (ok) {
    took = wait_for_trim (q);
    ok = CHECK (took >= 0) && CHECK (idle (q) == QUIET);
  }
  ok = ok && CHECK (test_backend_holds (r.d[0].tb, 'b', MiB, 0))
    && CHECK (test_backend_holds (r.d[0].tb, 'a', MiB, 2 * MiB));
  test_rig_stop (&r);
  tap_ok (ok, "aligned disk: %d freed 1 MiB buffers kept over %d rounds of"
          " writes in %.1f s; quiet, trimmed to 16 MiB after %.1f s",
          WRITES, rounds, BUSY_S, took);
}

int
main (void)
{
  tap_plan (1);
  test_busy_disk_keeps_its_spares ();
  return tap_done ();
}
