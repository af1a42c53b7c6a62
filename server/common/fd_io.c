/* plugq: whole-range I/O on file descriptors. */
#include <config.h>

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fd_io.h"
#include "minmax.h"

#define ZERO_BUF_SIZE (1024 * 1024)

int
full_pread (int fd, void *buf, size_t count, uint64_t offset)
{
  char *p = buf;

  while (count > 0) {
    ssize_t r = pread (fd, p, count, (off_t) offset);

    if (r == -1) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    /* Only a file truncated under us ends early: the range was checked. */
    if (r == 0) {
      errno = EIO;
      return -1;
    }
    p += r;
    offset += (uint64_t) r;
    count -= (size_t) r;
  }
  return 0;
}

int
full_pwrite (int fd, const void *buf, size_t count, uint64_t offset)
{
  const char *p = buf;

  while (count > 0) {
    ssize_t r = pwrite (fd, p, count, (off_t) offset);

    if (r == -1) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    if (r == 0) {
      errno = EIO;
      return -1;
    }
    p += r;
    offset += (uint64_t) r;
    count -= (size_t) r;
  }
  return 0;
}

/* pwritev may stop anywhere, even inside a vector element.  The rest of a
 * cut element is finished with pwrite, so the caller's const array is
 * never copied or modified.
 */
int
full_pwritev (int fd, const struct iovec *iov, int iovcnt, uint64_t offset)
{
  while (iovcnt > 0) {
    int n = MIN (iovcnt, IOV_MAX);
    const struct iovec *before = iov;
    ssize_t r = pwritev (fd, iov, n, (off_t) offset);
    size_t done;

    if (r == -1) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    offset += (uint64_t) r;
    done = (size_t) r;
    while (iovcnt > 0 && done >= iov->iov_len) {
      done -= iov->iov_len;
      iov++;
      iovcnt--;
    }
    if (done > 0) {
      if (full_pwrite (fd, (const char *) iov->iov_base + done,
                       iov->iov_len - done, offset) == -1)
        return -1;
      offset += iov->iov_len - done;
      iov++;
      iovcnt--;
    }
    else if (iov == before) {
      /* Nothing written and nothing skipped: it would spin forever. */
      errno = EIO;
      return -1;
    }
  }
  return 0;
}

void *
alloc_aligned (size_t size, uint32_t align)
{
  void *p;
  int err = posix_memalign (&p, align < sizeof (void *) ? sizeof (void *)
                            : align, size);

  if (err) {
    errno = err;
    return NULL;
  }
  return p;
}

/* The path that always works.  The offset advances with every chunk:
 * nbdkit 1.32.5's own fallback forgets to, and zeroes the first 64 MiB
 * over and over.
 */
int
fd_write_zeroes (int fd, uint64_t count, uint64_t offset, uint32_t align)
{
  size_t size = MIN (count, (uint64_t) ZERO_BUF_SIZE);
  char *zeroes;

  size = (size + align - 1) & ~((size_t) align - 1);
  zeroes = alloc_aligned (size, align);
  if (zeroes == NULL)
    return -1;
  memset (zeroes, 0, size);
  while (count > 0) {
    size_t n = MIN (count, (uint64_t) size);

    if (full_pwrite (fd, zeroes, n, offset) == -1) {
      free (zeroes);
      return -1;
    }
    offset += n;
    count -= n;
  }
  free (zeroes);
  return 0;
}
