/* bench/nbdkit-bare-direct-plugin.so: the ceiling of an nbdkit 1.32
 * plugin reading a file through O_DIRECT.
 *
 * It does nothing but the read: one pread into a buffer of the thread's
 * own, aligned as O_DIRECT wants, and a copy into nbdkit's buffer.  No
 * queue, no overlay, no stats, no bounce pool.  Whatever it reaches is what
 * nbdkit's model (a worker thread per request, each blocking in its own
 * pread) allows on this disk; a plugin that does anything more cannot do
 * better.  bench/reads.sh runs it as "nbdkit bare O_DIRECT" beside plugq
 * direct=true and qemu-nbd cache=none aio=native.
 *
 *   nbdkit ./nbdkit-bare-direct-plugin.so file=PATH
 *
 * Read-only, 4 KiB-aligned requests only (fio's 4K and 64K reads are).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL
#define ALIGN 4096
#define MAX_READ (4 * 1024 * 1024)

static char *path;
static int fd = -1;
static __thread void *thread_buf;

static int
bare_config (const char *key, const char *value)
{
  if (strcmp (key, "file") != 0) {
    nbdkit_error ("unknown parameter '%s'", key);
    return -1;
  }
  free (path);
  if ((path = strdup (value)) == NULL) {
    nbdkit_error ("strdup: %m");
    return -1;
  }
  return 0;
}

static int
bare_get_ready (void)
{
  if (path == NULL) {
    nbdkit_error ("file= is required");
    return -1;
  }
  if ((fd = open (path, O_RDONLY | O_DIRECT | O_CLOEXEC)) == -1) {
    nbdkit_error ("open %s: %m", path);
    return -1;
  }
  return 0;
}

static void
bare_unload (void)
{
  if (fd >= 0)
    close (fd);
  free (path);
}

static void *
bare_open (int readonly)
{
  return &fd;
}

static int64_t
bare_get_size (void *handle)
{
  off_t size = lseek (fd, 0, SEEK_END);

  if (size == -1)
    nbdkit_error ("lseek: %m");
  return size;
}

static int
bare_block_size (void *handle, uint32_t *minimum, uint32_t *preferred,
                 uint32_t *maximum)
{
  *minimum = *preferred = ALIGN;
  *maximum = MAX_READ;
  return 0;
}

static int
bare_pread (void *handle, void *buf, uint32_t count, uint64_t offset,
            uint32_t flags)
{
  ssize_t r;

  /* Each worker thread keeps one buffer for the life of the server. */
  if (thread_buf == NULL
      && posix_memalign (&thread_buf, ALIGN, MAX_READ) != 0) {
    thread_buf = NULL;
    nbdkit_error ("posix_memalign: %m");
    return -1;
  }
  if (count % ALIGN || offset % ALIGN || count > MAX_READ) {
    nbdkit_error ("unaligned read: %" PRIu32 " bytes at %" PRIu64,
                  count, offset);
    errno = EINVAL;
    return -1;
  }
  r = pread (fd, thread_buf, count, offset);
  if (r != (ssize_t) count) {
    nbdkit_error ("pread: %s", r == -1 ? strerror (errno) : "short read");
    return -1;
  }
  memcpy (buf, thread_buf, count);
  return 0;
}

static int
bare_can_write (void *handle)
{
  return 0;
}

static struct nbdkit_plugin plugin = {
  .name = "bare-direct",
  .longname = "bench: nothing but O_DIRECT reads",
  .version = "1",
  .config = bare_config,
  .config_help = "file=<PATH>   The file to read through O_DIRECT.",
  .get_ready = bare_get_ready,
  .unload = bare_unload,
  .open = bare_open,
  .get_size = bare_get_size,
  .block_size = bare_block_size,
  .can_write = bare_can_write,
  .pread = bare_pread,
};

NBDKIT_REGISTER_PLUGIN (plugin)
