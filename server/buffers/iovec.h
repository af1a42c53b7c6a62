/* plugq: copying bytes out of an I/O vector, and cutting one down. */
#ifndef PLUGQ_IOVEC_H
#define PLUGQ_IOVEC_H

#include <stdint.h>
#include <sys/uio.h>

/* Copies n bytes of the vector, from byte skip of it on, to dst.  The
 * vector holds at least skip + n bytes.
 */
void iov_copy_out (void *dst, const struct iovec *iov, int iovcnt,
                   uint64_t skip, uint64_t n);

/* Cuts a vector down to its bytes [skip, skip+len), len > 0, in place:
 * its first element, and *iovcnt its length.
 */
struct iovec *iov_cut (struct iovec *v, int *iovcnt, uint64_t skip,
                       uint64_t len);

#endif /* PLUGQ_IOVEC_H */
