/* plugq tests: checks on a backend read straight through its ops. */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "backend_checks.h"
#include "tap.h"

#define MiB ((size_t) 1024 * 1024)

int
write_buf (struct backend *b, const void *buf, size_t len, uint64_t offset)
{
  struct iovec iov = { .iov_base = (void *) buf, .iov_len = len };

  return backend_pwritev (b, &iov, 1, offset, false);
}

int
fill (struct backend *b, int c, size_t len, uint64_t offset)
{
  char *buf;
  int r;

  if (posix_memalign ((void **) &buf, 4096, len ? len : 1))
    return -1;
  memset (buf, c, len);
  r = write_buf (b, buf, len, offset);
  free (buf);
  return r;
}

bool
reads_as (struct backend *b, int c, size_t len, uint64_t offset)
{
  unsigned char *buf;
  bool ok = true;
  size_t i;

  if (posix_memalign ((void **) &buf, 4096, len ? len : 1))
    return CHECK (false);
  if (b->ops->pread (b, buf, len, offset) == -1) {
    printf ("# pread %zu at %" PRIu64 ": %s\n", len, offset, strerror (errno));
    free (buf);
    return CHECK (false);
  }
  if (!bytes_all (buf, c, len))
    for (i = 0; i < len; i++)
      if (buf[i] != (unsigned char) c) {
        printf ("# byte %" PRIu64 " is %#x, expected %#x\n",
                offset + i, buf[i], (unsigned char) c);
        ok = false;
        break;
      }
  free (buf);
  return ok;
}

bool
extents_are (struct backend *b, uint64_t count, uint64_t offset,
             const struct extent *want, size_t n)
{
  struct extent_list l;
  bool ok = true;
  size_t i;

  extent_list_init (&l);
  if (!CHECK (b->ops->extents (b, count, offset, &l) == 0))
    ok = false;
  else if (!CHECK (l.len == n))
    ok = false;
  else
    for (i = 0; i < n; i++)
      if (l.v[i].offset != want[i].offset || l.v[i].length != want[i].length
          || l.v[i].type != want[i].type)
        ok = false;
  if (!ok)
    for (i = 0; i < l.len; i++)
      printf ("#   got %" PRIu64 "+%" PRIu64 " type %" PRIu32 "\n",
              l.v[i].offset, l.v[i].length, l.v[i].type);
  extent_list_free (&l);
  return ok;
}

bool
pwritev_reads_back (struct backend *b, const size_t lens[5], uint64_t base)
{
  struct iovec iov[5];
  unsigned char *model = calloc (1, 4 * MiB), *got = malloc (4 * MiB);
  uint64_t total = 0;
  bool ok = CHECK (model != NULL && got != NULL);

  for (size_t i = 0; i < 5; i++) {
    unsigned char *p = malloc (lens[i]);

    for (size_t j = 0; p && j < lens[i]; j++)
      p[j] = (unsigned char) (i * 37 + j * 11 + 1);
    if (p && model)
      memcpy (model + base + total, p, lens[i]);
    iov[i] = (struct iovec) { .iov_base = p, .iov_len = lens[i] };
    ok &= CHECK (p != NULL);
    total += lens[i];
  }
  ok = ok && CHECK (backend_pwritev (b, iov, 5, base, false) == 0);
  ok = ok && CHECK (b->ops->pread (b, got, 4 * MiB, 0) == 0);
  ok = ok && CHECK (memcmp (got, model, 4 * MiB) == 0);
  ok = ok && CHECK (b->ops->pread (b, got, 77777, base + 3) == 0);
  ok = ok && CHECK (memcmp (got, model + base + 3, 77777) == 0);
  for (size_t i = 0; i < 5; i++)
    free (iov[i].iov_base);
  free (model);
  free (got);
  return ok;
}
