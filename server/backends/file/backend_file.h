/* plugq: the inside of the file backend, shared by the files that make
 * it up.  Internal to server/; the API is backend_file_open (backend.h).
 *
 *   backend_file.c         opening, limits, the ops table, read, write,
 *                          flush, extents, cache, close, the backend type
 *   backend_file_zero.c    zeroing and trimming: fallocate modes,
 *                          BLKZEROOUT, BLKDISCARD, writing zeroes, and the
 *                          methods not to try again
 *   backend_file_direct.c  O_DIRECT reads and writes, through bounce
 *                          buffers for unaligned memory
 */
#ifndef PLUGQ_BACKEND_FILE_H
#define PLUGQ_BACKEND_FILE_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "backends/backend.h"
#include "buffers/spare_ring.h"

struct file_backend {
  struct backend b;             /* first, so the two pointers convert */
  int fd;                       /* all I/O */
  int seek_fd;                  /* SEEK_DATA/SEEK_HOLE only */
  char *path;
  bool is_block;
  bool direct;
  bool readonly;
  uint32_t align;               /* O_DIRECT granule; 1 without O_DIRECT */
  uint32_t sector;              /* logical block size of a block device */

  /* Methods the kernel told us it lacks (EOPNOTSUPP) are not tried again.
   * Atomic because several token holders may zero at once.
   */
  atomic_bool can_punch;
  atomic_bool can_zero_range;
  atomic_bool can_zeroout;
  atomic_bool can_discard;
  atomic_bool can_seek;

  /* O_DIRECT: aligned bounce buffers of DIRECT_BOUNCE_SMALL bytes for
   * reads and writes into unaligned memory (backend_file_direct.c).
   */
  struct spare_ring bounces;
};

static inline struct file_backend *
to_file (struct backend *b)
{
  return (struct file_backend *) b;
}

static inline bool
is_aligned (uint64_t v, uint32_t align)
{
  return (v & (align - 1)) == 0;
}

static inline bool
writable (const struct file_backend *f)
{
  if (f->readonly) {
    errno = EROFS;
    return false;
  }
  return true;
}

/* The kernel's ways of saying "this call will never work here". */
static inline bool
is_unsupported (int err)
{
  return err == EOPNOTSUPP || err == ENOSYS || err == ENODEV || err == ENOTTY;
}

/* backend_file_zero.c: the ops for OP_ZERO and OP_TRIM, and the open-time
 * probe for punching holes.
 */
int file_zero (struct backend *b, uint64_t count, uint64_t offset,
               bool may_trim);
int file_trim (struct backend *b, uint64_t count, uint64_t offset);
void probe_punch (struct file_backend *f, uint64_t file_size);

/* backend_file_direct.c: reads and writes on an O_DIRECT descriptor.
 * -1 with EINVAL for an offset or length not aligned to f->align.
 */
int direct_pread (struct file_backend *f, void *buf, size_t count,
                  uint64_t offset);
int direct_pwritev (struct file_backend *f, const struct iovec *iov,
                    int iovcnt, uint64_t total, uint64_t offset);
/* The spare bounce buffers: set up at open, freed at close. */
void direct_bounces_init (struct file_backend *f);
void direct_bounces_free (struct file_backend *f);

#endif /* PLUGQ_BACKEND_FILE_H */
