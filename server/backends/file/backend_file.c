/* plugq: regular file or block device backend.
 *
 * All I/O uses pread/pwrite/pwritev with explicit offsets, so the file
 * position of the I/O descriptor is never relied on and request threads
 * can read while the dispatch thread writes.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>
#include <linux/fs.h>

#include "backends/backend.h"
#include "backend_file.h"
#include "backends/backend_type.h"
#include "common/config_value.h"
#include "common/fd_io.h"
#include "common/log.h"
#include "common/minmax.h"

#define MAX_REQUEST (64 * 1024 * 1024) /* nbdkit's cap on one request */
#define MAX_WRITE (32 * 1024 * 1024)
#define DIRECT_MIN_ALIGN 4096
/* Token holders that may write a page-cache file at once.  ext4 takes
 * the inode lock for each buffered write anyway, but its rwsem spins on
 * a running owner, so with one holder the request threads pile up
 * behind it.  O_DIRECT keeps one: each write is a device I/O, merging is
 * what the queue is for, and parallel holders would split a sequential
 * stream into smaller merges.
 */
#define BUFFERED_WRITERS 4

static int
file_pread (struct backend *b, void *buf, size_t count, uint64_t offset)
{
  struct file_backend *f = to_file (b);
  int r;

  if (!backend_range_ok (b, count, offset))
    return -1;
  if (f->direct)
    r = direct_pread (f, buf, count, offset);
  else
    r = full_pread (f->fd, buf, count, offset);
  if (r == -1 && errno != EINVAL)
    log_error ("%s: pread %zu bytes at %" PRIu64 ": %m",
               f->path, count, offset);
  return r;
}

static int
file_pwritev (struct backend *b, const struct iovec *iov, int iovcnt,
              uint64_t offset)
{
  struct file_backend *f = to_file (b);
  uint64_t total = 0;
  int i, r;

  for (i = 0; i < iovcnt; i++)
    total += iov[i].iov_len;
  if (!writable (f) || !backend_range_ok (b, total, offset))
    return -1;
  if (total == 0)
    return 0;
  if (f->direct)
    r = direct_pwritev (f, iov, iovcnt, total, offset);
  else
    r = full_pwritev (f->fd, iov, iovcnt, offset);
  if (r == -1 && errno != EINVAL)
    log_error ("%s: pwritev %" PRIu64 " bytes at %" PRIu64 ": %m",
               f->path, total, offset);
  return r;
}

static int
file_flush (struct backend *b)
{
  struct file_backend *f = to_file (b);

  if (fdatasync (f->fd) == -1) {
    log_error ("%s: fdatasync: %m", f->path);
    return -1;
  }
  return 0;
}

/* The seek descriptor has its own file position, and SEEK_DATA/SEEK_HOLE
 * take an absolute offset and answer in the return value, so concurrent
 * callers need no lock.
 */
static int
seek_extents (struct file_backend *f, uint64_t pos, uint64_t end,
              struct extent_list *list, bool *lseek_failed)
{
  size_t first = list->len;

  *lseek_failed = false;
  while (pos < end && list->len - first < MAX_EXTENTS_PER_CALL) {
    off_t data, hole;

    data = lseek (f->seek_fd, (off_t) pos, SEEK_DATA);
    if (data == -1 && errno == ENXIO)
      data = (off_t) end;
    else if (data == -1) {
      *lseek_failed = true;
      return -1;
    }
    if ((uint64_t) data > pos) {
      uint64_t stop = MIN ((uint64_t) data, end);

      if (extent_list_append (list, pos, stop - pos,
                              EXTENT_HOLE | EXTENT_ZERO) == -1)
        return -1;
      pos = stop;
      continue;
    }

    hole = lseek (f->seek_fd, (off_t) pos, SEEK_HOLE);
    if (hole == -1 && errno == ENXIO)
      hole = (off_t) end;
    else if (hole == -1) {
      *lseek_failed = true;
      return -1;
    }
    if ((uint64_t) hole <= pos)
      hole = (off_t) end;       /* cannot happen; never loop on it */
    if ((uint64_t) hole > end)
      hole = (off_t) end;
    if (extent_list_append (list, pos, (uint64_t) hole - pos, 0) == -1)
      return -1;
    pos = (uint64_t) hole;
  }
  return 0;
}

static int
file_extents (struct backend *b, uint64_t count, uint64_t offset,
              struct extent_list *list)
{
  struct file_backend *f = to_file (b);
  uint64_t end;

  if (offset >= b->size || count == 0) {
    errno = EINVAL;
    return -1;
  }
  end = count > b->size - offset ? b->size : offset + count;

  if (atomic_load_explicit (&f->can_seek, memory_order_relaxed)) {
    bool lseek_failed;

    if (seek_extents (f, offset, end, list, &lseek_failed) == 0)
      return 0;
    if (!lseek_failed)
      return -1;
    if (!(errno == EINVAL || is_unsupported (errno))) {
      log_error ("%s: lseek: %m", f->path);
      return -1;
    }
    atomic_store_explicit (&f->can_seek, false, memory_order_relaxed);
    /* Start again from the caller's list; the first extent may have been
     * joined onto the caller's last one, so cut rather than reset len.
     */
    extent_list_truncate (list, offset);
  }
  /* Without SEEK_DATA all we know is that it may hold data. */
  return extent_list_append (list, offset, end - offset, 0);
}

static int
file_cache (struct backend *b, uint64_t count, uint64_t offset)
{
  struct file_backend *f = to_file (b);
  int err;

  /* O_DIRECT reads bypass the page cache, so prefetching would only
   * spend memory.
   */
  if (f->direct)
    return 0;
  err = posix_fadvise (f->fd, (off_t) offset, (off_t) count,
                       POSIX_FADV_WILLNEED);
  if (err) {
    errno = err;
    log_error ("%s: posix_fadvise: %m", f->path);
    return -1;
  }
  return 0;
}

static void
file_close (struct backend *b)
{
  struct file_backend *f = to_file (b);

  if (f->seek_fd >= 0)
    close (f->seek_fd);
  if (f->fd >= 0)
    close (f->fd);
  direct_bounces_free (f);
  free (f->path);
  free (b->description);
  free (f);
}

/* The one entry for writes, zeroes and trims.  FUA: the page cache or
 * the device's cache is flushed before the operation is answered.
 */
static const struct backend_sync_ops file_sync_ops = {
  .pwritev = file_pwritev, .zero = file_zero, .trim = file_trim,
};

static int
file_io (struct backend *b, struct backend_io *io)
{
  return backend_io_by_kind (b, io, &file_sync_ops);
}

static const struct backend_ops file_ops = {
  .kind = "file",
  .pread = file_pread,
  .io = file_io,
  .flush = file_flush,
  .extents = file_extents,
  .cache = file_cache,
  .close = file_close,
};

/* O_NONBLOCK keeps open from hanging on a FIFO before the type check
 * rejects it; it means nothing for files and disks and is cleared after.
 */
static int
open_checked (const char *path, int flags, struct stat *st)
{
  int fd = open (path, flags | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  int fl;

  if (fd == -1)
    return -1;
  if (fstat (fd, st) == -1)
    goto fail;
  if (!S_ISREG (st->st_mode) && !S_ISBLK (st->st_mode)) {
    errno = EINVAL;
    goto fail;
  }
  fl = fcntl (fd, F_GETFL);
  if (fl == -1 || fcntl (fd, F_SETFL, fl & ~O_NONBLOCK) == -1)
    goto fail;
  return fd;

 fail:
  {
    int err = errno;

    close (fd);
    errno = err;
  }
  return -1;
}

static int
block_geometry (struct file_backend *f)
{
  uint64_t size;
  int ssz;

  if (ioctl (f->fd, BLKGETSIZE64, &size) == -1) {
    log_error ("%s: ioctl BLKGETSIZE64: %m", f->path);
    return -1;
  }
  if (ioctl (f->fd, BLKSSZGET, &ssz) == -1) {
    log_error ("%s: ioctl BLKSSZGET: %m", f->path);
    return -1;
  }
  if (ssz < 512 || ssz > 65536 || (ssz & (ssz - 1)) != 0) {
    log_error ("%s: unusable logical block size %d", f->path, ssz);
    errno = EINVAL;
    return -1;
  }
  f->b.size = size;
  f->sector = (uint32_t) ssz;
  return 0;
}

/* Notes are short fixed strings; notes has room for all of them. */
static void
add_note (char *notes, const char *note)
{
  if (*notes)
    strcat (notes, ", ");
  strcat (notes, note);
}

/* "file /srv/db.img (O_DIRECT)": the path, then whatever is unusual. */
static char *
describe (const struct file_backend *f)
{
  char notes[64] = "";
  char *s;

  if (f->is_block)
    add_note (notes, "block device");
  if (f->direct)
    add_note (notes, "O_DIRECT");
  if (f->readonly)
    add_note (notes, "read-only");
  if (asprintf (&s, "file %s%s%s%s", f->path, *notes ? " (" : "", notes,
                *notes ? ")" : "") == -1)
    return NULL;
  return s;
}

static void
set_limits (struct file_backend *f)
{
  if (f->direct) {
    f->align = MAX (f->sector, (uint32_t) DIRECT_MIN_ALIGN);
    /* The queue completes partial blocks by read-modify-write, as
     * qemu-nbd --cache=none does: clients that ignore block sizes work.
     */
    f->b.limits.minimum = 1;
    f->b.limits.preferred = f->align;
    f->b.min_block = f->align;
    f->b.buffer_align = f->align;
    f->b.max_writers = 1;
  }
  else {
    f->align = 1;
    f->b.limits.minimum = 1;
    f->b.limits.preferred = 4096;
    f->b.max_writers = BUFFERED_WRITERS;
    f->b.writes_to_memory = true;
  }
  f->b.limits.maximum = MAX_REQUEST;
  f->b.max_write = MAX_WRITE;
  f->b.max_iov = IOV_MAX;
  f->b.can_fua = true;
}

static int
open_fds (struct file_backend *f, struct stat *st)
{
  int flags = (f->readonly ? O_RDONLY : O_RDWR) | (f->direct ? O_DIRECT : 0);
  struct stat st2;

  f->fd = open_checked (f->path, flags, st);
  if (f->fd == -1) {
    if (f->direct && errno == EINVAL)
      log_error ("%s: open with O_DIRECT: %m "
                 "(not a regular file or block device, or the filesystem "
                 "has no O_DIRECT)", f->path);
    else if (errno == EINVAL)
      log_error ("%s: not a regular file or block device: %m", f->path);
    else
      log_error ("%s: open: %m", f->path);
    return -1;
  }
  /* A second open could reach a different file if the path was replaced
   * in between; extents of the wrong file would be silent corruption.
   */
  f->seek_fd = open_checked (f->path, O_RDONLY, &st2);
  if (f->seek_fd == -1) {
    log_error ("%s: open: %m", f->path);
    return -1;
  }
  else if (st2.st_dev != st->st_dev || st2.st_ino != st->st_ino) {
    log_error ("%s: file was replaced while opening it", f->path);
    errno = ESTALE;
    return -1;
  }
  return 0;
}

struct backend *
backend_file_open (const char *path, bool direct, bool readonly)
{
  struct file_backend *f;
  struct stat st;

  f = calloc (1, sizeof *f);
  if (f == NULL || (f->path = strdup (path)) == NULL) {
    log_error ("%s: %m", path);
    free (f);
    return NULL;
  }
  f->fd = f->seek_fd = -1;
  direct_bounces_init (f);
  f->direct = direct;
  f->readonly = readonly;
  f->b.ops = &file_ops;
  atomic_init (&f->can_punch, true);
  atomic_init (&f->can_zero_range, true);
  atomic_init (&f->can_zeroout, true);
  atomic_init (&f->can_discard, true);
  atomic_init (&f->can_seek, true);

  if (open_fds (f, &st) == -1)
    goto fail;

  f->is_block = S_ISBLK (st.st_mode);
  if (f->is_block) {
    if (block_geometry (f) == -1)
      goto fail;
  }
  else {
    f->b.size = (uint64_t) st.st_size;
    f->sector = 512;
    if (!readonly)
      probe_punch (f, f->b.size);
  }
  set_limits (f);
  if (direct && !is_aligned (f->b.size, f->align))
    log_debug ("%s: size %" PRIu64 " is not a multiple of %" PRIu32
               ": O_DIRECT cannot reach the last partial block",
               path, f->b.size, f->align);

  f->b.description = describe (f);
  if (f->b.description == NULL) {
    log_error ("%s: %m", path);
    goto fail;
  }
  return &f->b;

 fail:
  {
    int err = errno;

    file_close (&f->b);
    errno = err;
  }
  return NULL;
}

/* ------------------------------------------------------------ type */

struct file_args {
  char *path;                   /* absolute */
  bool direct;
};

static void *
file_new_args (void)
{
  return calloc (1, sizeof (struct file_args));
}

/* The file must exist already, so that a wrong path is one line naming
 * the key now rather than an open error later; and the path is made
 * absolute now, since nbdkit chdirs to / when it daemonizes.
 */
static int
file_start (void *args, const char *disk, const char *value)
{
  struct file_args *a = args;
  struct stat st;

  if (*value == '\0') {
    log_error ("file=: empty path (disk=%s)", disk);
    return -1;
  }
  if (stat (value, &st) == -1) {
    log_error ("file=%s: %m (disk=%s)", value, disk);
    return -1;
  }
  if (!S_ISREG (st.st_mode) && !S_ISBLK (st.st_mode)) {
    log_error ("file=%s: not a regular file or block device (disk=%s)",
               value, disk);
    return -1;
  }
  a->path = realpath (value, NULL);
  if (a->path == NULL) {
    log_error ("realpath: %s: %m", value);
    return -1;
  }
  return 0;
}

static int
file_set (void *args, const char *disk, const char *key, const char *value)
{
  struct file_args *a = args;

  return config_parse_bool (key, value, &a->direct);  /* direct= */
}

static struct backend *
file_open_args (const void *args, bool readonly)
{
  const struct file_args *a = args;

  return backend_file_open (a->path, a->direct, readonly);
}

static void
file_free_args (void *args)
{
  struct file_args *a = args;

  if (a)
    free (a->path);
  free (a);
}

const struct backend_type backend_type_file = {
  .name = "file",
  .article = "a",
  .value_name = "PATH",
  .keys = (const char *const[]) { "direct", NULL },
  .summary = "files and block devices",
  .help =
  "file=<PATH>                 Backend of the last disk=: a file or block device.\n"
  "direct=<BOOL>               Open that file= with O_DIRECT (default false).\n",
  .new_args = file_new_args,
  .start = file_start,
  .set = file_set,
  .open = file_open_args,
  .free_args = file_free_args,
};
