/* plugq: zeroing and trimming for the file backend.
 *
 * Zeroes try the fast ways first: punching a hole (when the request may
 * trim), FALLOC_FL_ZERO_RANGE, a hole punched then allocated again, and
 * BLKZEROOUT on a block device; then writing zeroes, which always works.
 * Trims punch holes in files and BLKDISCARD block devices.  A method the
 * kernel says it lacks is remembered in struct file_backend and not
 * tried again; probe_punch asks once at open whether holes work at all.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/types.h>
#include <linux/fs.h>

#include "backends/backend.h"
#include "backend_file.h"
#include "common/fd_io.h"
#include "common/log.h"

/* After a zeroing method failed with errno: 1 when the next method
 * should be tried (and, if the call is unsupported here, this one never
 * again), -1 for a real error.  mode: fallocate's, or -1.
 */
static int
zero_method_failed (struct file_backend *f, atomic_bool *can,
                    const char *what, int mode)
{
  if (is_unsupported (errno)) {
    atomic_store_explicit (can, false, memory_order_relaxed);
    if (mode >= 0)
      log_debug ("%s: %s mode %#x unsupported, not trying again",
                 f->path, what, (unsigned) mode);
    else
      log_debug ("%s: %s unsupported, not trying again", f->path, what);
    return 1;
  }
  /* Block devices refuse ranges not aligned to their sector. */
  return errno == EINVAL ? 1 : -1;
}

/* 0: done; 1: this method cannot do it, try the next; -1: error. */
static int
try_fallocate (struct file_backend *f, atomic_bool *can, int mode,
               uint64_t count, uint64_t offset)
{
  if (!atomic_load_explicit (can, memory_order_relaxed))
    return 1;
  if (fallocate (f->fd, mode, (off_t) offset, (off_t) count) == 0)
    return 0;
  return zero_method_failed (f, can, "fallocate", mode);
}

static int
try_zeroout (struct file_backend *f, uint64_t count, uint64_t offset)
{
  uint64_t range[2] = { offset, count };

  if (!f->is_block || !atomic_load_explicit (&f->can_zeroout,
                                             memory_order_relaxed)
      || !is_aligned (offset, f->sector) || !is_aligned (count, f->sector))
    return 1;
  if (ioctl (f->fd, BLKZEROOUT, range) == 0)
    return 0;
  return zero_method_failed (f, &f->can_zeroout, "BLKZEROOUT", -1);
}

/* Without ZERO_RANGE but with punch hole (tmpfs, for one), a hole and
 * then allocation keeps "no hole" requests allocated at fallocate speed.
 */
static int
punch_and_allocate (struct file_backend *f, uint64_t count, uint64_t offset)
{
  int r = try_fallocate (f, &f->can_punch,
                         FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                         count, offset);

  if (r != 0)
    return r;
  if (fallocate (f->fd, 0, (off_t) offset, (off_t) count) == -1
      && !is_unsupported (errno))
    return -1;
  return 0;
}

static int
fast_zero (struct file_backend *f, uint64_t count, uint64_t offset,
           bool may_trim)
{
  int r;

  if (may_trim) {
    r = try_fallocate (f, &f->can_punch,
                       FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                       count, offset);
    if (r <= 0)
      return r;
  }
  r = try_fallocate (f, &f->can_zero_range,
                     FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE,
                     count, offset);
  if (r <= 0)
    return r;
  if (!may_trim && !f->is_block) {
    r = punch_and_allocate (f, count, offset);
    if (r <= 0)
      return r;
  }
  return try_zeroout (f, count, offset);
}

int
file_zero (struct backend *b, uint64_t count, uint64_t offset, bool may_trim)
{
  struct file_backend *f = to_file (b);
  int r = 1;

  if (!writable (f) || !backend_range_ok (b, count, offset))
    return -1;
  if (count == 0)
    return 0;
  if (f->direct && (!is_aligned (offset, f->align)
                    || !is_aligned (count, f->align))) {
    errno = EINVAL;
    return -1;
  }

  r = fast_zero (f, count, offset, may_trim);
  if (r == 1)
    r = fd_write_zeroes (f->fd, count, offset, f->align);
  if (r == -1)
    log_error ("%s: zero %" PRIu64 " bytes at %" PRIu64 ": %m",
               f->path, count, offset);
  return r;
}

static int
discard_block (struct file_backend *f, uint64_t count, uint64_t offset)
{
  uint64_t start = (offset + f->sector - 1) & ~((uint64_t) f->sector - 1);
  uint64_t end = (offset + count) & ~((uint64_t) f->sector - 1);
  uint64_t range[2];

  if (!atomic_load_explicit (&f->can_discard, memory_order_relaxed)
      || end <= start)
    return 0;
  range[0] = start;
  range[1] = end - start;
  if (ioctl (f->fd, BLKDISCARD, range) == 0)
    return 0;
  if (is_unsupported (errno)) {
    atomic_store_explicit (&f->can_discard, false, memory_order_relaxed);
    return 0;
  }
  return -1;
}

int
file_trim (struct backend *b, uint64_t count, uint64_t offset)
{
  struct file_backend *f = to_file (b);
  int r;

  if (!writable (f) || !backend_range_ok (b, count, offset))
    return -1;
  if (count == 0)
    return 0;

  if (f->is_block)
    r = discard_block (f, count, offset);
  else {
    r = try_fallocate (f, &f->can_punch,
                       FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                       count, offset);
    /* Trim is only advice, but this disk promised that trimmed ranges
     * read as zeroes, and the queue relies on that.
     */
    if (r == 1 && b->trim_reads_zero)
      return file_zero (b, count, offset, false);
    if (r == 1)
      r = 0;
  }
  if (r == -1)
    log_error ("%s: trim %" PRIu64 " bytes at %" PRIu64 ": %m",
               f->path, count, offset);
  return r;
}

/* Punching a hole past the end of the file changes nothing, so it shows
 * whether the filesystem can zero without writing.
 */
void
probe_punch (struct file_backend *f, uint64_t file_size)
{
  uint64_t past_end = (file_size + 4095) & ~(uint64_t) 4095;

  if (fallocate (f->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                 (off_t) past_end, 4096) == 0) {
    f->b.can_fast_zero = true;
    f->b.trim_reads_zero = true;
    return;
  }
  log_debug ("%s: punch hole probe: %m", f->path);
  if (is_unsupported (errno))
    atomic_store (&f->can_punch, false);
}
