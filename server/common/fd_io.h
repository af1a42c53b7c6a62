/* plugq: whole-range I/O on file descriptors.
 *
 * pread, pwrite and pwritev may stop early (signals, huge counts); these
 * finish the job or fail with errno set.  Offsets are always explicit:
 * the file offset is shared by every thread using the descriptor.
 */
#ifndef PLUGQ_FD_IO_H
#define PLUGQ_FD_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

int full_pread (int fd, void *buf, size_t count, uint64_t offset);
int full_pwrite (int fd, const void *buf, size_t count, uint64_t offset);
int full_pwritev (int fd, const struct iovec *iov, int iovcnt,
                  uint64_t offset);

/* size bytes aligned to align (a power of 2), for O_DIRECT; free(). */
void *alloc_aligned (size_t size, uint32_t align);

/* Writes zeroes over [offset, offset+count) in aligned chunks: the way
 * of zeroing that works on every file and device, used when nothing
 * faster does.  count may exceed 4 GiB.
 */
int fd_write_zeroes (int fd, uint64_t count, uint64_t offset,
                     uint32_t align);

#endif /* PLUGQ_FD_IO_H */
