/* plugq: unit tests for the file and block device backend. */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <linux/loop.h>

#include "backends/backend.h"
#include "common/fd_io.h"
#include "common/extents.h"
#include "backend_checks.h"
#include "tap.h"

#define KiB ((uint64_t) 1024)
#define MiB (KiB * 1024)
#define GiB (MiB * 1024)
#define HZ (EXTENT_HOLE | EXTENT_ZERO)

/* Every temp file, so a failed case still cleans up. */
static char *temps[16];
static int ntemps;

static const char *
tmpdir (void)
{
  const char *d = getenv ("TMPDIR");

  return d && *d ? d : "/var/tmp";
}

/* A sparse temp file of size bytes; its path stays valid until exit. */
static const char *
make_temp (const char *dir, uint64_t size)
{
  char *path;
  int fd;

  if (ntemps == 16 || asprintf (&path, "%s/plugq-test-XXXXXX", dir) == -1)
    return NULL;
  fd = mkstemp (path);
  if (fd == -1) {
    printf ("# mkstemp %s: %s\n", path, strerror (errno));
    free (path);
    return NULL;
  }
  if (ftruncate (fd, (off_t) size) == -1) {
    printf ("# ftruncate: %s\n", strerror (errno));
    close (fd);
    unlink (path);
    free (path);
    return NULL;
  }
  close (fd);
  temps[ntemps++] = path;
  return path;
}

static void
remove_temps (void)
{
  int i;

  for (i = 0; i < ntemps; i++) {
    unlink (temps[i]);
    free (temps[i]);
  }
  ntemps = 0;
}

static struct backend *
open_temp (uint64_t size, bool direct)
{
  const char *path = make_temp (direct ? "/var/tmp" : tmpdir (), size);

  return path ? backend_file_open (path, direct, false) : NULL;
}

static bool
test_missing (void)
{
  bool ok = true;
  char *path;

  if (asprintf (&path, "%s/plugq-no-such-file-%d", tmpdir (),
                (int) getpid ()) == -1)
    return false;
  errno = 0;
  ok &= CHECK (backend_file_open (path, false, false) == NULL);
  ok &= CHECK (errno == ENOENT);
  free (path);
  return ok;
}

static bool
test_not_a_file (void)
{
  bool ok = true;

  errno = 0;
  ok &= CHECK (backend_file_open ("/dev/null", false, false) == NULL);
  ok &= CHECK (errno == EINVAL);
  errno = 0;
  ok &= CHECK (backend_file_open (tmpdir (), false, true) == NULL);
  ok &= CHECK (errno == EINVAL);
  return ok;
}

static bool
test_properties (void)
{
  const char *path = make_temp (tmpdir (), 8 * MiB);
  struct backend *b;
  char *want;
  bool ok = true;

  if (!CHECK (path != NULL))
    return false;
  b = backend_file_open (path, false, false);
  if (!CHECK (b != NULL))
    return false;
  if (asprintf (&want, "file %s", path) == -1)
    want = NULL;
  ok &= CHECK (want && strcmp (b->description, want) == 0);
  ok &= CHECK (strcmp (b->ops->kind, "file") == 0);
  ok &= CHECK (b->size == 8 * MiB);
  ok &= CHECK (b->limits.minimum == 1 && b->limits.preferred == 4096);
  ok &= CHECK (b->limits.maximum == 64 * MiB);
  ok &= CHECK (b->max_write == 32 * MiB && b->max_iov == IOV_MAX);
  ok &= CHECK (b->max_writers > 1);
  /* Both come from the same punch-hole probe. */
  ok &= CHECK (b->can_fast_zero == b->trim_reads_zero);
  printf ("# %s: can_fast_zero %d\n", tmpdir (), b->can_fast_zero);
  ok &= CHECK (b->ops->flush (b) == 0);
  ok &= CHECK (b->ops->cache (b, MiB, 0) == 0);
  free (want);
  backend_close (b);
  return ok;
}

static bool
test_pwritev (void)
{
  struct backend *b = open_temp (4 * MiB, false);
  const size_t lens[] = { 1, 4095, 70000, 3, 131079 };
  bool ok;

  if (!CHECK (b != NULL))
    return false;
  ok = pwritev_reads_back (b, lens, 65436);
  backend_close (b);
  return ok;
}

/* More elements than one pwritev call takes, some of them empty. */
static bool
test_many_iovecs (void)
{
  struct backend *b = open_temp (MiB, false);
  const int n = IOV_MAX + 500;
  struct iovec *iov = calloc ((size_t) n, sizeof *iov);
  unsigned char *data = malloc ((size_t) n * 3), *got = malloc ((size_t) n * 3);
  size_t pos = 0;
  int i;
  bool ok = true;

  if (!CHECK (b && iov && data && got))
    return false;
  for (i = 0; i < n; i++) {
    size_t len = i % 7 == 0 ? 0 : 3;

    memset (data + pos, i % 251 + 1, len);
    iov[i] = (struct iovec) { .iov_base = data + pos, .iov_len = len };
    pos += len;
  }
  ok &= CHECK (backend_pwritev (b, iov, n, 1001, false) == 0);
  ok &= CHECK (b->ops->pread (b, got, pos, 1001) == 0);
  ok &= CHECK (memcmp (got, data, pos) == 0);
  ok &= reads_as (b, 0, 1, 1001 + pos);
  free (iov);
  free (data);
  free (got);
  backend_close (b);
  return ok;
}

static bool
test_zero (bool may_trim)
{
  struct backend *b = open_temp (4 * MiB, false);
  bool ok = true;

  if (!CHECK (b != NULL))
    return false;
  ok &= CHECK (fill (b, 0xaa, 3 * MiB, 0) == 0);
  ok &= CHECK (backend_zero (b, 2 * MiB + 333, 1000, may_trim, false) == 0);
  ok &= reads_as (b, 0xaa, 1000, 0);
  ok &= reads_as (b, 0, 2 * MiB + 333, 1000);
  ok &= reads_as (b, 0xaa, 3 * MiB - (2 * MiB + 1333), 2 * MiB + 1333);
  ok &= CHECK (backend_zero (b, 0, 5, may_trim, false) == 0);
  ok &= reads_as (b, 0xaa, 1000, 0);
  backend_close (b);
  return ok;
}

/* The far end of a 100 MiB zero: nbdkit 1.32.5's write fallback zeroed
 * the first 64 MiB twice and never reached 70 MiB or 99 MiB.  The write
 * path is the fallback itself (fd_write_zeroes), called directly because
 * this file system never needs it.
 */
static bool
test_zero_100m (bool write_path)
{
  const char *path = make_temp (tmpdir (), 128 * MiB);
  struct backend *b = path ? backend_file_open (path, false, false) : NULL;
  bool ok = true;

  if (!CHECK (b != NULL))
    return false;
  ok &= CHECK (fill (b, 0xff, 100 * MiB + 4096, 0) == 0);
  if (write_path) {
    int fd = open (path, O_RDWR);

    ok &= CHECK (fd >= 0 && fd_write_zeroes (fd, 100 * MiB, 0, 1) == 0);
    if (fd >= 0)
      close (fd);
  }
  else
    ok &= CHECK (backend_zero (b, 100 * MiB, 0, false, false) == 0);
  ok &= reads_as (b, 0, 1, 70 * MiB);
  ok &= reads_as (b, 0, 1, 99 * MiB + 4095);
  ok &= reads_as (b, 0, 4096, 100 * MiB - 4096);
  ok &= reads_as (b, 0xff, 4096, 100 * MiB);
  backend_close (b);
  return ok;
}

/* A count that does not fit in 32 bits, on a 6 GiB sparse file. */
static bool
test_zero_huge (bool may_trim)
{
  struct backend *b = open_temp (6 * GiB, false);
  const uint64_t start = 512 * MiB, count = 5 * GiB;
  bool ok = true;

  if (!CHECK (b != NULL))
    return false;
  ok &= CHECK (fill (b, 0xff, 4096, 5 * GiB) == 0);
  ok &= CHECK (fill (b, 0xff, 4096, start - 4096) == 0);
  ok &= CHECK (fill (b, 0xff, 4096, start + count) == 0);
  ok &= CHECK (backend_zero (b, count, start, may_trim, false) == 0);
  ok &= reads_as (b, 0, 4096, 5 * GiB);
  ok &= reads_as (b, 0xff, 4096, start - 4096);
  ok &= reads_as (b, 0xff, 4096, start + count);
  backend_close (b);
  return ok;
}

static bool
test_trim (void)
{
  struct backend *b = open_temp (4 * MiB, false);
  const struct extent want[] = { { MiB, MiB, HZ } };
  bool ok = true;

  if (!CHECK (b != NULL))
    return false;
  ok &= CHECK (fill (b, 0x55, 3 * MiB, 0) == 0);
  ok &= CHECK (backend_trim (b, MiB, MiB, false) == 0);
  ok &= reads_as (b, 0x55, MiB, 0);
  ok &= reads_as (b, 0x55, MiB, 2 * MiB);
  if (b->trim_reads_zero) {
    ok &= reads_as (b, 0, MiB, MiB);
    ok &= extents_are (b, MiB, MiB, want, 1);
  }
  else
    printf ("# trim does not read as zeroes here: contents not checked\n");
  backend_close (b);
  return ok;
}

static bool
test_extents (void)
{
  struct backend *b = open_temp (16 * MiB, false);
  const uint64_t d = 64 * KiB;
  const struct extent all[] = {
    { 0, 4 * MiB, HZ }, { 4 * MiB, d, 0 }, { 4 * MiB + d, 8 * MiB - d, HZ },
    { 12 * MiB, d, 0 }, { 12 * MiB + d, 4 * MiB - d, HZ },
  };
  const struct extent mid_hole[] = {
    { MiB, 3 * MiB, HZ }, { 4 * MiB, d, 0 }, { 4 * MiB + d, MiB - d, HZ },
  };
  const struct extent mid_data[] = { { 4 * MiB + 4096, 4096, 0 } };
  const struct extent tail[] = { { 16 * MiB - 1, 1, HZ } };
  struct extent_list l;
  bool ok = true;

  if (!CHECK (b != NULL))
    return false;
  ok &= CHECK (fill (b, 1, d, 4 * MiB) == 0);
  ok &= CHECK (fill (b, 1, d, 12 * MiB) == 0);
  ok &= extents_are (b, 16 * MiB, 0, all, 5);
  ok &= extents_are (b, 4 * MiB, MiB, mid_hole, 3);
  ok &= extents_are (b, 4096, 4 * MiB + 4096, mid_data, 1);
  ok &= extents_are (b, 100 * MiB, 16 * MiB - 1, tail, 1);

  /* Appends onto a list that ends where it starts. */
  extent_list_init (&l);
  ok &= CHECK (b->ops->extents (b, MiB, 0, &l) == 0);
  ok &= CHECK (b->ops->extents (b, 4 * MiB, MiB, &l) == 0);
  ok &= CHECK (l.len == 3 && l.v[0].length == 4 * MiB && l.v[1].type == 0);
  extent_list_free (&l);

  extent_list_init (&l);
  errno = 0;
  ok &= CHECK (b->ops->extents (b, 1, 16 * MiB, &l) == -1 && errno == EINVAL);
  extent_list_free (&l);
  backend_close (b);
  return ok;
}

static bool
test_readonly (void)
{
  const char *path = make_temp (tmpdir (), MiB);
  struct backend *b;
  char buf[512];
  bool ok = true;

  if (!CHECK (path != NULL))
    return false;
  b = backend_file_open (path, false, false);
  ok &= CHECK (b && fill (b, 0x33, 512, 0) == 0);
  backend_close (b);
  b = backend_file_open (path, false, true);
  if (!CHECK (b != NULL))
    return false;
  ok &= CHECK (strstr (b->description, "(read-only)") != NULL);
  ok &= CHECK (!b->can_fast_zero && !b->trim_reads_zero);
  ok &= reads_as (b, 0x33, 512, 0);
  errno = 0;
  ok &= CHECK (write_buf (b, buf, 512, 0) == -1 && errno == EROFS);
  errno = 0;
  ok &= CHECK (backend_zero (b, 512, 0, true, false) == -1 && errno == EROFS);
  errno = 0;
  ok &= CHECK (backend_trim (b, 512, 0, false) == -1 && errno == EROFS);
  ok &= CHECK (b->ops->flush (b) == 0);
  backend_close (b);
  return ok;
}

static bool
test_out_of_range (void)
{
  struct backend *b = open_temp (MiB, false);
  char buf[16] = { 0 };
  bool ok = true;

  if (!CHECK (b != NULL))
    return false;
  errno = 0;
  ok &= CHECK (b->ops->pread (b, buf, 16, MiB - 8) == -1 && errno == EINVAL);
  errno = 0;
  ok &= CHECK (write_buf (b, buf, 16, MiB - 8) == -1 && errno == EINVAL);
  errno = 0;
  ok &= CHECK (backend_zero (b, 16, UINT64_MAX - 8, false, false) == -1
               && errno == EINVAL);
  backend_close (b);
  return ok;
}

/* The O_DIRECT cases share one disk; NULL with a reason means skip. */
static struct backend *direct_disk;
static const char *direct_skip;

static void
open_direct (void)
{
  direct_disk = open_temp (4 * MiB, true);
  if (direct_disk == NULL && errno == EINVAL)
    direct_skip = "O_DIRECT not supported on /var/tmp";
  else if (direct_disk == NULL)
    direct_skip = "could not open a temp file in /var/tmp";
}

static void
skip (const char *what, const char *why)
{
  tap_ok (true, "%s # SKIP %s", what, why);
}

static bool
test_direct_limits (void)
{
  struct backend *b = direct_disk;
  bool ok = true;

  /* Offsets and lengths must be whole blocks (min_block); the queue
   * serves smaller requests, so the disk advertises a minimum of 1.
   */
  ok &= CHECK (b->min_block >= 4096);
  ok &= CHECK (b->limits.minimum == 1);
  ok &= CHECK (b->limits.preferred == b->min_block);
  ok &= CHECK (b->limits.maximum == 64 * MiB);
  ok &= CHECK (b->max_writers <= 1);      /* merging is the point */
  ok &= CHECK (strstr (b->description, " (O_DIRECT)") != NULL);
  return ok;
}

static bool
test_direct_pwritev (void)
{
  struct backend *b = direct_disk;
  struct iovec iov[3];
  unsigned char *p[3], *odd;
  const size_t lens[3] = { 4096, 8192, 4096 };
  int i;
  bool ok = true;

  for (i = 0; i < 3; i++) {
    if (posix_memalign ((void **) &p[i], 4096, lens[i]))
      return CHECK (false);
    memset (p[i], 0x10 + i, lens[i]);
    iov[i] = (struct iovec) { .iov_base = p[i], .iov_len = lens[i] };
  }
  /* Aligned elements go straight to pwritev. */
  ok &= CHECK (backend_pwritev (b, iov, 3, 8192, false) == 0);
  ok &= reads_as (b, 0x10, 4096, 8192);
  ok &= reads_as (b, 0x11, 8192, 12288);
  ok &= reads_as (b, 0x12, 4096, 20480);

  /* Unaligned elements with an aligned total go through a bounce buffer. */
  odd = malloc (3 * 4096 + 1);
  memset (odd, 0x77, 3 * 4096 + 1);
  iov[0] = (struct iovec) { .iov_base = odd + 1, .iov_len = 1000 };
  iov[1] = (struct iovec) { .iov_base = odd + 1001, .iov_len = 3 * 4096 - 1000 };
  ok &= CHECK (backend_pwritev (b, iov, 2, MiB, false) == 0);
  ok &= reads_as (b, 0x77, 3 * 4096, MiB);

  errno = 0;
  ok &= CHECK (backend_pwritev (b, iov, 1, MiB, false) == -1 && errno == EINVAL);
  for (i = 0; i < 3; i++)
    free (p[i]);
  free (odd);
  return ok;
}

static bool
test_direct_unaligned_read (void)
{
  struct backend *b = direct_disk;
  unsigned char *raw = malloc (64 * KiB + 1), *buf = raw + 1;
  size_t i;
  bool ok = true;

  ok &= CHECK (fill (b, 0x42, 64 * KiB, 2 * MiB) == 0);
  ok &= CHECK (b->ops->pread (b, buf, 64 * KiB, 2 * MiB) == 0);
  for (i = 0; i < 64 * KiB && ok; i++)
    ok &= CHECK (buf[i] == 0x42);
  errno = 0;
  ok &= CHECK (b->ops->pread (b, buf, 4096, 2 * MiB + 512) == -1
               && errno == EINVAL);
  errno = 0;
  ok &= CHECK (b->ops->pread (b, buf, 100, 2 * MiB) == -1 && errno == EINVAL);
  free (raw);
  return ok;
}

static bool
test_direct_zero (void)
{
  struct backend *b = direct_disk;
  bool ok = true;

  ok &= CHECK (fill (b, 0xee, 1 * MiB, 3 * MiB) == 0);
  ok &= CHECK (backend_zero (b, 64 * KiB, 3 * MiB, false, false) == 0);
  ok &= reads_as (b, 0, 64 * KiB, 3 * MiB);
  ok &= CHECK (backend_zero (b, 512 * KiB, 3 * MiB + 256 * KiB, true, false) == 0);
  ok &= reads_as (b, 0, 512 * KiB, 3 * MiB + 256 * KiB);
  ok &= reads_as (b, 0xee, 192 * KiB, 3 * MiB + 64 * KiB);
  ok &= reads_as (b, 0xee, 256 * KiB, 3 * MiB + 768 * KiB);
  errno = 0;
  ok &= CHECK (backend_zero (b, 100, 3 * MiB, false, false) == -1 && errno == EINVAL);
  return ok;
}

/* A loop device over a temp file, detached when the last user closes it.
 * Returns the loop device's fd, or -1 when that cannot be done here.
 */
static int
attach_loop (const char *file, char *dev, size_t devlen)
{
  int ctl, backing, tries, lfd = -1;

#ifndef LOOP_CONFIGURE
  return -1;                    /* kernel headers older than 5.8 */
#endif
  ctl = open ("/dev/loop-control", O_RDWR | O_CLOEXEC);
  if (ctl == -1)
    return -1;
  backing = open (file, O_RDWR | O_CLOEXEC);
  for (tries = 0; backing >= 0 && tries < 20; tries++) {
    struct loop_config cfg = {
      .fd = (uint32_t) backing,
      .info = { .lo_flags = LO_FLAGS_AUTOCLEAR },
    };
    int n = ioctl (ctl, LOOP_CTL_GET_FREE);

    if (n < 0)
      break;
    snprintf (dev, devlen, "/dev/loop%d", n);
    lfd = open (dev, O_RDWR | O_CLOEXEC);
    if (lfd == -1)
      break;
    if (ioctl (lfd, LOOP_CONFIGURE, &cfg) == 0)
      break;
    close (lfd);
    lfd = -1;
    if (errno != EBUSY)
      break;
  }
  if (backing >= 0)
    close (backing);
  close (ctl);
  return lfd;
}

static bool
test_block_device (struct backend *b, uint64_t size)
{
  const struct extent want[] = { { 0, size, 0 } };
  bool ok = true;

  ok &= CHECK (b->size == size);
  ok &= CHECK (strstr (b->description, "(block device") != NULL);
  ok &= CHECK (!b->can_fast_zero && !b->trim_reads_zero);
  ok &= CHECK (fill (b, 0x99, 4 * MiB, 0) == 0);
  ok &= reads_as (b, 0x99, 4 * MiB, 0);
  ok &= CHECK (backend_zero (b, MiB, 0, true, false) == 0);
  ok &= CHECK (backend_zero (b, MiB + 3, MiB - 1, false, false) == 0);
  ok &= reads_as (b, 0, 2 * MiB + 2, 0);
  ok &= reads_as (b, 0x99, 2 * MiB - 2, 2 * MiB + 2);
  ok &= CHECK (backend_trim (b, MiB + 1000, 2 * MiB - 500, false) == 0);
  ok &= CHECK (b->ops->flush (b) == 0);
  ok &= CHECK (b->ops->cache (b, MiB, 0) == 0);
  ok &= extents_are (b, size, 0, want, 1);
  return ok;
}

static void
run_block_device_cases (void)
{
  const char *file = make_temp (tmpdir (), 16 * MiB);
  char dev[64];
  int lfd = file ? attach_loop (file, dev, sizeof dev) : -1;
  struct backend *b;

  if (lfd == -1) {
    skip ("block device (loop)", "cannot attach a loop device here");
    skip ("block device with O_DIRECT", "cannot attach a loop device here");
    return;
  }
  b = backend_file_open (dev, false, false);
  tap_ok (b && test_block_device (b, 16 * MiB),
          "block device (loop): size, I/O, zero, trim, extents");
  backend_close (b);

  b = backend_file_open (dev, true, false);
  if (b == NULL)
    tap_ok (false, "block device with O_DIRECT: open failed");
  else {
    bool ok = CHECK (b->min_block >= 4096 && b->limits.minimum == 1);

    ok &= CHECK (fill (b, 0x31, 64 * KiB, 8 * MiB) == 0);
    ok &= reads_as (b, 0x31, 64 * KiB, 8 * MiB);
    ok &= CHECK (backend_zero (b, 8 * KiB, 8 * MiB, false, false) == 0);
    ok &= reads_as (b, 0, 8 * KiB, 8 * MiB);
    tap_ok (ok, "block device with O_DIRECT: aligned I/O and zero");
    backend_close (b);
  }
  close (lfd);
}

int
main (void)
{
  tap_plan (21);
  tap_ok (test_missing (), "missing file: NULL with ENOENT");
  tap_ok (test_not_a_file (), "character device and directory are refused");
  tap_ok (test_properties (), "limits, flags and description");
  tap_ok (test_pwritev (), "pwritev of several unaligned iovecs reads back");
  tap_ok (test_many_iovecs (), "pwritev with more than IOV_MAX iovecs");
  tap_ok (test_zero (false), "zero without may_trim, unaligned");
  tap_ok (test_zero (true), "zero with may_trim, unaligned");
  tap_ok (test_zero_100m (false), "zero of 100 MiB reaches its far end");
  tap_ok (test_zero_100m (true),
          "fd_write_zeroes of 100 MiB reaches its far end");
  tap_ok (test_zero_huge (false), "zero of 5 GiB on a 6 GiB sparse file");
  tap_ok (test_zero_huge (true),
          "zero of 5 GiB with may_trim on a 6 GiB sparse file");
  tap_ok (test_trim (), "trim");
  tap_ok (test_extents (), "extents on a sparse file");
  tap_ok (test_readonly (), "read-only: reads work, writes fail with EROFS");
  tap_ok (test_out_of_range (), "requests past the end fail with EINVAL");

  open_direct ();
  if (direct_disk) {
    tap_ok (test_direct_limits (), "O_DIRECT: limits and description");
    tap_ok (test_direct_pwritev (),
            "O_DIRECT: aligned and bounced pwritev");
    tap_ok (test_direct_unaligned_read (),
            "O_DIRECT: read into an unaligned buffer; unaligned ranges EINVAL");
    tap_ok (test_direct_zero (), "O_DIRECT: zero, fast and by writing");
    backend_close (direct_disk);
  }
  else {
    skip ("O_DIRECT: limits and description", direct_skip);
    skip ("O_DIRECT: aligned and bounced pwritev", direct_skip);
    skip ("O_DIRECT: read into an unaligned buffer", direct_skip);
    skip ("O_DIRECT: zero", direct_skip);
  }

  run_block_device_cases ();
  remove_temps ();
  return tap_done ();
}
