/* plugq: libFuzzer target over the model harness.
 *
 * The input's first bytes choose the elevator, ack mode, queue knobs and
 * backend properties (on a small disk), the rest is the op stream, read
 * by the same generator as test_model (model.h).  Any difference from
 * the model aborts, so libFuzzer keeps the input as a crash; replay one
 * without clang with
 *   PLUGQ_MODEL_INPUT=crash-... PLUGQ_MODEL_VERBOSE=1 server/tests/test_model
 *
 * An input whose first byte has bits 2-4 set writes an ascending stream
 * through stripes of the disk (harness_params.stripe), with the other
 * ops inside one stripe each.  A quarter of the inputs run on a backend
 * that fails now and then (model.h, fault mode), chosen by bits of the
 * parameter bytes that nothing else reads, so the hand-made inputs keep
 * their meaning; the engine's error messages, of which that makes many,
 * are dropped unless PLUGQ_MODEL_VERBOSE is set.
 *
 * Seed corpus: server/tests/fuzz-corpus/ (hand-made op sequences named
 * after what they exercise, plus 4 KiB of random bytes, which also lets
 * libFuzzer grow inputs to about 300 ops, and 2 KiB of them that make a
 * striped stream on an asynchronous backend with FUA).  In CI, with a scratch copy
 * of the corpus so the tree stays clean:
 *   cp -r server/tests/fuzz-corpus /tmp/corpus
 *   server/tests/fuzz_queue -max_total_time=30 -max_len=4096 -timeout=20 \
 *     /tmp/corpus
 * Build the engine with -fsanitize=fuzzer-no-link in CFLAGS too, or
 * libFuzzer sees no coverage of the queue itself.
 */
#include <config.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/log.h"
#include "model.h"

/* Enough ops to build deep queues; more only slows each exec down. */
#define MAX_OPS 512

int LLVMFuzzerInitialize (int *argc, char ***argv);
int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static void
drop_message (const char *msg)
{
  (void) msg;
}

int
LLVMFuzzerInitialize (int *argc, char ***argv)
{
  (void) argc;
  (void) argv;
  if (getenv ("PLUGQ_MODEL_VERBOSE") == NULL)
    log_set_sink (&(struct log_sink) { .error = drop_message });
  return 0;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  struct run_result r;

  r = run_fuzz_input (data, size, MAX_OPS,
                      getenv ("PLUGQ_MODEL_VERBOSE") != NULL, stdout);
  if (r.fault != FAULT_NONE) {
    fflush (stdout);
    abort ();
  }
  return 0;
}
