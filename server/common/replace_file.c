/* plugq: replacing a file that others may read, in a directory that
 * others may write (replace_file.h says what it guarantees).
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fd_io.h"
#include "replace_file.h"

/* A temporary name is ".BASE.XXXXXXXX" with BASE cut to fit NAME_MAX:
 * hidden, and never ending like PATH (node_exporter's textfile collector
 * reads every *.prom of its directory).
 */
#define BASE_IN_TMP_NAME 200
#define RANDOM_CHARS 8
#define TMP_NAME_SIZE (1 + BASE_IN_TMP_NAME + 1 + RANDOM_CHARS + 1)
/* Attempts at a random name before giving up with EEXIST. */
#define LINK_ATTEMPTS 16

/* The directory PATH is in, held open so that every step happens in the
 * same one even if its name is moved meanwhile.
 */
struct target {
  int dirfd;                    /* O_PATH */
  char *dir;                    /* its name, for mkstemp's template */
  const char *base;             /* PATH's last component */
};

static int
target_open (struct target *t, const char *path)
{
  const char *slash = strrchr (path, '/');

  t->dirfd = -1;
  t->base = slash ? slash + 1 : path;
  if (*t->base == '\0') {
    errno = EISDIR;
    return -1;
  }
  if (slash == NULL)
    t->dir = strdup (".");
  else if (slash == path)
    t->dir = strdup ("/");
  else
    t->dir = strndup (path, slash - path);
  if (t->dir == NULL)
    return -1;
  /* O_PATH opens nothing (a FIFO there is refused by O_DIRECTORY before
   * anything could block); a symlink in the directory's own name is the
   * operator's, and followed.
   */
  t->dirfd = open (t->dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (t->dirfd == -1) {
    int err = errno;

    free (t->dir);
    errno = err;
    return -1;
  }
  return 0;
}

static void
target_close (struct target *t)
{
  int err = errno;

  close (t->dirfd);
  free (t->dir);
  errno = err;
}

/* close() that keeps errno: for descriptors given up after an error. */
static void
close_quietly (int fd)
{
  int err = errno;

  close (fd);
  errno = err;
}

/* Removes this writer's temporary name after an error, keeping errno. */
static void
unlink_quietly (const struct target *t, const char *name)
{
  int err = errno;

  unlinkat (t->dirfd, name, 0);
  errno = err;
}

/* The contents and the mode, through the descriptor of a file this
 * process just created (umask and mkstemp's 0600 do not stay).
 */
static int
fill (int fd, mode_t mode, const struct iovec *iov, int iovcnt,
      const char **step)
{
  *step = "write";
  if (full_pwritev (fd, iov, iovcnt, 0) == -1)
    return -1;
  *step = "chmod";
  return fchmod (fd, mode);
}

/* A fresh ".BASE.XXXXXXXX" in name (TMP_NAME_SIZE bytes).  -1 if the
 * kernel has no randomness to give without waiting (early boot).
 */
static int
random_name (const char *base, char *name)
{
  static const char chars[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  unsigned char bytes[RANDOM_CHARS];
  char suffix[RANDOM_CHARS + 1];

  if (getrandom (bytes, sizeof bytes, GRND_NONBLOCK) != sizeof bytes)
    return -1;
  for (size_t i = 0; i < RANDOM_CHARS; i++)
    suffix[i] = chars[bytes[i] % (sizeof chars - 1)];
  suffix[RANDOM_CHARS] = '\0';
  snprintf (name, TMP_NAME_SIZE, ".%.*s.%s", BASE_IN_TMP_NAME, base, suffix);
  return 0;
}

/* Links the unnamed file fd into the directory under a random name.
 * linkat never follows or replaces anything already at that name (it
 * fails with EEXIST, and another name is tried).  1 once linked; -1
 * with EEXIST if every name tried was taken; 0 if it cannot be linked
 * (no /proc, and no CAP_DAC_READ_SEARCH for AT_EMPTY_PATH), or no random
 * name can be had: mkstemp then does it, and reports an error of the
 * directory itself (full, read-only) as its own.
 */
static int
link_unnamed (int fd, const struct target *t, char *name)
{
  char proc_path[64];

  snprintf (proc_path, sizeof proc_path, "/proc/self/fd/%d", fd);
  for (int i = 0; i < LINK_ATTEMPTS; i++) {
    if (random_name (t->base, name) == -1)
      return 0;
    if (linkat (AT_FDCWD, proc_path, t->dirfd, name, AT_SYMLINK_FOLLOW) == 0)
      return 1;
    if (errno == ENOENT
        && linkat (fd, "", t->dirfd, name, AT_EMPTY_PATH) == 0)
      return 1;
    if (errno != EEXIST)
      return 0;
  }
  return -1;
}

/* The new file, written, under a temporary name in name: through
 * O_TMPFILE, so that no name exists until it is whole.  1 if done, 0 if
 * the file system or the process cannot (the caller uses mkstemp), -1
 * on an error.
 */
static int
create_by_tmpfile (const struct target *t, mode_t mode,
                   const struct iovec *iov, int iovcnt, char *name,
                   const char **step)
{
  int fd, r;

  *step = "create";
  fd = openat (t->dirfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
  if (fd == -1)
    /* EOPNOTSUPP: the file system has none; EISDIR or EINVAL: the
     * kernel refuses it.
     */
    return errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL
      ? 0 : -1;
  if (fill (fd, mode, iov, iovcnt, step) == -1) {
    close_quietly (fd);
    return -1;
  }
  *step = "link";
  r = link_unnamed (fd, t, name);
  if (r != 1) {
    close_quietly (fd);
    return r;
  }
  if (close (fd) == -1) {
    *step = "close";
    unlink_quietly (t, name);
    return -1;
  }
  return 1;
}

/* The new file, written, under a temporary name from mkstemp (which
 * creates it with O_EXCL: nothing already there is followed or opened).
 */
static int
create_by_mkstemp (const struct target *t, mode_t mode,
                   const struct iovec *iov, int iovcnt, char *name,
                   const char **step)
{
  char *template;
  int fd;

  *step = "create";
  if (asprintf (&template, "%s/.%.*s.XXXXXX", t->dir, BASE_IN_TMP_NAME,
                t->base) == -1)
    return -1;
  fd = mkostemp (template, O_CLOEXEC);
  if (fd >= 0)
    snprintf (name, TMP_NAME_SIZE, "%s", strrchr (template, '/') + 1);
  free (template);
  if (fd == -1)
    return -1;
  if (fill (fd, mode, iov, iovcnt, step) == -1) {
    close_quietly (fd);
    unlink_quietly (t, name);
    return -1;
  }
  if (close (fd) == -1) {
    *step = "close";
    unlink_quietly (t, name);
    return -1;
  }
  return 0;
}

/* Renames the whole new file over PATH.  rename() replaces a symlink,
 * FIFO or file at PATH as the name it is, never looking through it.
 */
static int
put_in_place (const struct target *t, const char *name, const char **step)
{
  *step = "rename";
  if (renameat (t->dirfd, name, t->dirfd, t->base) == -1) {
    unlink_quietly (t, name);
    return -1;
  }
  return 0;
}

static int
replace (const char *path, mode_t mode, const struct iovec *iov, int iovcnt,
         bool try_tmpfile, const char **step)
{
  struct target t;
  char name[TMP_NAME_SIZE];
  int r = 0;

  *step = "open the directory";
  if (target_open (&t, path) == -1)
    return -1;
  if (try_tmpfile)
    r = create_by_tmpfile (&t, mode, iov, iovcnt, name, step);
  if (r == 0)
    r = create_by_mkstemp (&t, mode, iov, iovcnt, name, step) == 0 ? 1 : -1;
  if (r == 1)
    r = put_in_place (&t, name, step);
  target_close (&t);
  return r;
}

int
replace_file (const char *path, mode_t mode,
              const struct iovec *iov, int iovcnt, const char **step)
{
  return replace (path, mode, iov, iovcnt, true, step);
}

int
replace_file_by_mkstemp (const char *path, mode_t mode,
                         const struct iovec *iov, int iovcnt,
                         const char **step)
{
  return replace (path, mode, iov, iovcnt, false, step);
}
