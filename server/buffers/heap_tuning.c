/* plugq: glibc malloc settings suited to queued request buffers.
 *
 * A queue frees request buffers a batch at a time, in whichever thread
 * wrote the batch out.  glibc hands an arena's free top back to the
 * kernel as soon as it exceeds M_TRIM_THRESHOLD, 128 KiB by default:
 * 32 queued 4 KiB writes.  So nearly every batch would trim the heap
 * (madvise), and the next writes take it back page by page, with page
 * faults and TLB shootdowns on every CPU that runs the process.
 *
 * Setting the trim threshold also stops glibc from sliding its mmap
 * threshold up as large blocks are freed, which would leave every buffer
 * over 128 KiB to its own mmap and munmap.  So both are set where
 * glibc's own sliding rule ends once it has seen a 32 MiB block: mmap
 * threshold 32 MiB (its largest), trim threshold twice that.  A trim
 * threshold below the largest buffers, say 4 MiB, would have every freed
 * buffer of that size trim and regrow the heap.  docs/design.md
 * ("Request buffers and malloc") has the measurements.
 *
 * What this keeps: free heap of up to the trim threshold per arena,
 * reused by the next writes, as glibc would after one large write.  An
 * operator who sets malloc's own environment (GLIBC_TUNABLES, MALLOC_*_)
 * keeps those settings.
 */
#include <config.h>

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "heap_tuning.h"

/* In MiB, so that the log line is spelled from the same numbers. */
#define MMAP_THRESHOLD_MIB 32           /* glibc's maximum on 64-bit */
#define TRIM_THRESHOLD_MIB 64           /* glibc's rule: twice the mmap one */
_Static_assert (TRIM_THRESHOLD_MIB == 2 * MMAP_THRESHOLD_MIB,
                "glibc slides the trim threshold to twice the mmap threshold");
#define MIB_TO_BYTES(n) ((n) * 1024 * 1024)
#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_ (x)

static bool
operator_sets_malloc (void)
{
  static const char *const legacy[] = {
    "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_",
  };
  const char *tunables = getenv ("GLIBC_TUNABLES");

  for (size_t i = 0; i < sizeof legacy / sizeof legacy[0]; i++)
    if (getenv (legacy[i]))
      return true;
  return tunables
    && (strstr (tunables, "glibc.malloc.trim_threshold")
        || strstr (tunables, "glibc.malloc.mmap_threshold")
        || strstr (tunables, "glibc.malloc.top_pad"));
}

enum heap_tuning
heap_tuning_apply (void)
{
  if (operator_sets_malloc ())
    return HEAP_LEFT_TO_OPERATOR;
#if defined (__GLIBC__) && defined (M_TRIM_THRESHOLD)
  /* A replaced malloc (the sanitizers') answers mallopt with 0. */
  if (mallopt (M_MMAP_THRESHOLD, MIB_TO_BYTES (MMAP_THRESHOLD_MIB)) == 1
      && mallopt (M_TRIM_THRESHOLD, MIB_TO_BYTES (TRIM_THRESHOLD_MIB)) == 1)
    return HEAP_TUNED;
#endif
  return HEAP_UNAVAILABLE;
}

const char *
heap_tuning_describe (enum heap_tuning t)
{
  switch (t) {
  case HEAP_TUNED:
    return "malloc: trim threshold " STRINGIFY (TRIM_THRESHOLD_MIB)
      " MiB, mmap threshold " STRINGIFY (MMAP_THRESHOLD_MIB) " MiB";
  case HEAP_LEFT_TO_OPERATOR:
    return "malloc: settings from the environment kept";
  case HEAP_UNAVAILABLE:
    break;
  }
  return "malloc: not glibc's, left as it is";
}
