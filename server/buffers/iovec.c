/* plugq: copying bytes out of an I/O vector, and cutting one down. */
#include <config.h>

#include <string.h>

#include "iovec.h"
#include "common/minmax.h"

void
iov_copy_out (void *dst, const struct iovec *iov, int iovcnt, uint64_t skip,
              uint64_t n)
{
  char *out = dst;

  for (int i = 0; i < iovcnt && n > 0; i++) {
    uint64_t len = iov[i].iov_len;
    uint64_t k;

    if (skip >= len) {
      skip -= len;
      continue;
    }
    k = MIN (len - skip, n);
    memcpy (out, (const char *) iov[i].iov_base + skip, k);
    out += k;
    n -= k;
    skip = 0;
  }
}

struct iovec *
iov_cut (struct iovec *v, int *iovcnt, uint64_t skip, uint64_t len)
{
  uint64_t seen = 0;
  int k = 0;

  while (v->iov_len <= skip) {
    skip -= v->iov_len;
    v++;
  }
  v->iov_base = (char *) v->iov_base + skip;
  v->iov_len -= skip;
  while (seen + v[k].iov_len < len)
    seen += v[k++].iov_len;
  v[k].iov_len = len - seen;
  *iovcnt = k + 1;
  return v;
}
