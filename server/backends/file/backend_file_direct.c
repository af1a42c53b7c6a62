/* plugq: O_DIRECT reads and writes for the file backend.
 *
 * O_DIRECT wants offsets, lengths and buffer addresses aligned to
 * f->align.  Offsets and lengths that are not are refused (EINVAL): the
 * backend's min_block says so, and the queue sends only whole blocks,
 * serving smaller requests by read-modify-write (queue_align.c).  Caller
 * memory that is not aligned goes through a bounce buffer: nbdkit hands
 * reads a buffer from malloc.  Bounce buffers of DIRECT_BOUNCE_SMALL
 * bytes or less come from, and go back to, a lock-free ring of spares
 * (spare_ring.h): an allocation and a free for every 4 KiB read cost
 * about a sixth of its instructions.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "backends/backend.h"
#include "backend_file.h"
#include "common/fd_io.h"
#include "buffers/iovec.h"
#include "common/minmax.h"

/* Bounce and zero buffers: large enough to keep the disk streaming, small
 * enough not to matter next to the queue's own memory.
 */
#define BOUNCE_SIZE ((size_t) 4 * 1024 * 1024)

/* The bounce buffers kept for the next read or write. */
#define DIRECT_BOUNCE_SMALL ((size_t) 64 * 1024)

void
direct_bounces_init (struct file_backend *f)
{
  spare_ring_init (&f->bounces);
}

void
direct_bounces_free (struct file_backend *f)
{
  void *p;

  while ((p = spare_ring_take (&f->bounces)) != NULL)
    free (p);
}

/* A bounce buffer of at least min (count, BOUNCE_SIZE) bytes. */
static char *
bounce_get (struct file_backend *f, size_t count)
{
  char *b;

  if (count > DIRECT_BOUNCE_SMALL)
    return alloc_aligned (MIN (count, BOUNCE_SIZE), f->align);
  if ((b = spare_ring_take (&f->bounces)) != NULL)
    return b;
  return alloc_aligned (DIRECT_BOUNCE_SMALL, f->align);
}

static void
bounce_put (struct file_backend *f, char *b, size_t count)
{
  if (count > DIRECT_BOUNCE_SMALL || !spare_ring_park (&f->bounces, b))
    free (b);
}

/* O_DIRECT wants the buffer address aligned too; reads into a caller's
 * unaligned buffer go through a bounce buffer.
 */
int
direct_pread (struct file_backend *f, void *buf, size_t count,
              uint64_t offset)
{
  char *out = buf, *bounce;
  size_t all = count;

  if (!is_aligned (offset, f->align) || !is_aligned (count, f->align)) {
    errno = EINVAL;
    return -1;
  }
  if (is_aligned ((uintptr_t) buf, f->align))
    return full_pread (f->fd, buf, count, offset);

  bounce = bounce_get (f, count);
  if (bounce == NULL)
    return -1;
  while (count > 0) {
    size_t n = MIN (count, BOUNCE_SIZE);

    if (full_pread (f->fd, bounce, n, offset) == -1) {
      bounce_put (f, bounce, all);
      return -1;
    }
    memcpy (out, bounce, n);
    out += n;
    offset += n;
    count -= n;
  }
  bounce_put (f, bounce, all);
  return 0;
}

static bool
iov_aligned (const struct iovec *iov, int iovcnt, uint32_t align)
{
  int i;

  for (i = 0; i < iovcnt; i++)
    if (!is_aligned ((uintptr_t) iov[i].iov_base, align)
        || !is_aligned (iov[i].iov_len, align))
      return false;
  return true;
}

int
direct_pwritev (struct file_backend *f, const struct iovec *iov, int iovcnt,
                uint64_t total, uint64_t offset)
{
  char *bounce;
  uint64_t done = 0, all = total;

  if (!is_aligned (offset, f->align) || !is_aligned (total, f->align)) {
    errno = EINVAL;
    return -1;
  }
  if (iov_aligned (iov, iovcnt, f->align))
    return full_pwritev (f->fd, iov, iovcnt, offset);

  bounce = bounce_get (f, total);
  if (bounce == NULL)
    return -1;
  while (total > 0) {
    size_t n = MIN (total, BOUNCE_SIZE);

    iov_copy_out (bounce, iov, iovcnt, done, n);
    if (full_pwrite (f->fd, bounce, n, offset) == -1) {
      bounce_put (f, bounce, all);
      return -1;
    }
    done += n;
    offset += n;
    total -= n;
  }
  bounce_put (f, bounce, all);
  return 0;
}
