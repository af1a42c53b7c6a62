/* plugq: unit tests for the malloc settings the queue's buffers need. */

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "buffers/heap_tuning.h"
#include "tap.h"

#define KiB 1024
#define MiB (1024 * 1024)
#define CASES 5

/* ASan and TSan bring their own malloc, which glibc's tunables do not
 * reach.
 */
#if defined (TAP_ASAN) || defined (TAP_TSAN)
#define MALLOC_REPLACED 1
#endif

#if defined (__GLIBC__) && !defined (MALLOC_REPLACED)

/* What glibc has mapped for its heap (not counting mmapped blocks), and
 * how many blocks it serves with their own mmap.
 */
static size_t
heap_bytes (void)
{
  return mallinfo2 ().arena;
}

static size_t
mmapped_blocks (void)
{
  return mallinfo2 ().hblks;
}

/* Where every allocation goes, so the compiler cannot drop a malloc and
 * free pair that nothing else reads (clang does).
 */
static void *volatile escape;

static void *
allocate (size_t size)
{
  void *p = malloc (size);

  if (p == NULL)
    abort ();
  escape = p;
  return p;
}

/* The queue's pattern: a burst of 4 KiB buffers, freed oldest first.
 * Sets the heap's size with all of them live and once they are freed.
 */
static void
burst (size_t n, size_t *peak, size_t *after)
{
  void **v = calloc (n, sizeof *v);

  if (v == NULL)
    abort ();
  for (size_t i = 0; i < n; i++)
    v[i] = allocate (4 * KiB);
  *peak = heap_bytes ();
  for (size_t i = 0; i < n; i++)
    free (v[i]);
  free (v);
  *after = heap_bytes ();
}

int
main (void)
{
  enum heap_tuning t;
  size_t blocks, peak, after;
  void *big, *two;

  tap_plan (CASES);

  /* Before plugq's settings: the operator's come first. */
  setenv ("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=262144", 1);
  t = heap_tuning_apply ();
  blocks = mmapped_blocks ();
  /* Large buffers are kept to the end: freeing one that was mmapped
   * would raise glibc's sliding thresholds, which a stream of small
   * writes never does.
   */
  big = allocate (1 * MiB);
  tap_ok (t == HEAP_LEFT_TO_OPERATOR && mmapped_blocks () == blocks + 1,
          "GLIBC_TUNABLES with a malloc threshold: left alone (%s;"
          " a 1 MiB buffer still has its own mmap)", heap_tuning_describe (t));
  unsetenv ("GLIBC_TUNABLES");

  setenv ("MALLOC_TOP_PAD_", "131072", 1);
  t = heap_tuning_apply ();
  tap_ok (t == HEAP_LEFT_TO_OPERATOR, "MALLOC_TOP_PAD_ set: left alone");
  unsetenv ("MALLOC_TOP_PAD_");

  t = heap_tuning_apply ();
  blocks = mmapped_blocks ();
  two = allocate (2 * MiB);
  tap_ok (t == HEAP_TUNED && mmapped_blocks () == blocks,
          "tuned (%s): a 2 MiB write's buffer comes from the heap, not"
          " its own mmap and munmap", heap_tuning_describe (t));

  /* 3 MiB of 4 KiB buffers: a few dozen batches of a busy queue. */
  burst (768, &peak, &after);
  tap_ok (CHECK (peak >= 3 * MiB) && CHECK (after + 256 * KiB >= peak),
          "768 buffers of 4 KiB freed oldest first: the heap keeps the"
          " memory for the next writes (heap %zu KiB with them, %zu KiB"
          " after)", peak / KiB, after / KiB);

  /* Still live: the 2 MiB buffer and a few KiB of the test's own. */
  burst (17408, &peak, &after);
  tap_ok (CHECK (peak >= 68 * MiB) && CHECK (after <= 5 * MiB),
          "68 MiB of them: past 64 MiB free, the heap still goes back to"
          " the kernel"
          " (heap %zu KiB with them, %zu KiB after)", peak / KiB,
          after / KiB);
  free (two);
  free (big);
  return tap_done ();
}

#else

int
main (void)
{
  return tap_skip_all (CASES, "malloc is not glibc's here (sanitizer or libc)");
}

#endif
