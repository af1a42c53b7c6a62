/* plugq: unit tests for replace_file, both ways it creates the new file
 * (O_TMPFILE, and the mkstemp it falls back to where the file system or
 * the process cannot use O_TMPFILE, which no client test can reach).
 * client-tests/stats-file-safety.bats tests the stats file through it,
 * with another user's names planted in a sticky directory.
 */
#include <config.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/replace_file.h"
#include "tap.h"

#define CASES_PER_WAY 7

typedef int replace_fn (const char *, mode_t, const struct iovec *, int,
                        const char **);

static char dir[] = "/tmp/plugq-replace-file.XXXXXX";
static char path[sizeof dir + 32];
static char victim[sizeof dir + 32];

static const struct iovec parts[] = {
  { .iov_base = (void *) "hello, ", .iov_len = 7 },
  { .iov_base = (void *) "world\n", .iov_len = 6 },
};

/* Whether name holds exactly text. */
static bool
holds (const char *name, const char *text)
{
  char buf[256];
  int fd = open (name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  ssize_t n;

  if (fd == -1)
    return false;
  n = read (fd, buf, sizeof buf);
  close (fd);
  return n == (ssize_t) strlen (text) && memcmp (buf, text, n) == 0;
}

/* Whether path is the new file: regular (not a link, FIFO or directory
 * reached through one), ours, with exactly mode, holding both parts.
 */
static bool
is_new_file (mode_t mode)
{
  struct stat st;

  return lstat (path, &st) == 0
    && CHECK (S_ISREG (st.st_mode))
    && CHECK (st.st_uid == geteuid ())
    && CHECK ((st.st_mode & 07777) == mode)
    && CHECK (st.st_nlink == 1)
    && CHECK (holds (path, "hello, world\n"));
}

static void
write_victim (void)
{
  FILE *fp = fopen (victim, "w");

  if (fp == NULL || fputs ("victim\n", fp) == EOF || fclose (fp) == EOF)
    abort ();
}

/* Whether the directory holds nothing but path's and the victim's names:
 * no temporary file was left behind.
 */
static bool
only_expected_names (void)
{
  DIR *d = opendir (dir);
  struct dirent *e;
  bool ok = d != NULL;

  while (d && (e = readdir (d)) != NULL)
    if (strcmp (e->d_name, ".") && strcmp (e->d_name, "..")
        && strcmp (e->d_name, "file") && strcmp (e->d_name, "victim")) {
      printf ("# left behind: %s\n", e->d_name);
      ok = false;
    }
  if (d)
    closedir (d);
  return ok;
}

static void
clean (void)
{
  unlink (path);
  rmdir (path);
  unlink (victim);
}

static void
test_way (replace_fn *replace, const char *way)
{
  const char *step = NULL;
  char missing[sizeof dir + 32];
  int r;

  clean ();
  r = replace (path, 0644, parts, 2, &step);
  tap_ok (CHECK (r == 0) && is_new_file (0644) && only_expected_names (),
          "%s: a new file, both parts, mode 0644 under umask 077", way);

  r = replace (path, 0640, parts, 2, &step);
  tap_ok (CHECK (r == 0) && is_new_file (0640) && only_expected_names (),
          "%s: over the old one, mode 0640 exactly", way);

  /* A second name of the file at PATH sees whether it was written in
   * place: rename only moves the name.
   */
  clean ();
  write_victim ();
  if (link (victim, path) == -1)
    abort ();
  r = replace (path, 0644, parts, 2, &step);
  tap_ok (CHECK (r == 0) && is_new_file (0644)
          && CHECK (holds (victim, "victim\n")),
          "%s: a file at PATH is replaced, not written into", way);

  clean ();
  write_victim ();
  if (symlink (victim, path) == -1)
    abort ();
  r = replace (path, 0644, parts, 2, &step);
  tap_ok (CHECK (r == 0) && is_new_file (0644)
          && CHECK (holds (victim, "victim\n")) && only_expected_names (),
          "%s: a symlink at PATH is replaced, its target untouched", way);

  /* Opening a FIFO for writing would block until a reader came: the
   * alarm turns that into a failure.
   */
  clean ();
  if (mkfifo (path, 0666) == -1)
    abort ();
  alarm (10);
  r = replace (path, 0644, parts, 2, &step);
  alarm (0);
  tap_ok (CHECK (r == 0) && is_new_file (0644),
          "%s: a FIFO at PATH is replaced without being opened", way);

  /* A directory at PATH cannot be replaced: the error names the step,
   * and the temporary file goes.
   */
  clean ();
  if (mkdir (path, 0755) == -1)
    abort ();
  step = NULL;
  r = replace (path, 0644, parts, 2, &step);
  tap_ok (CHECK (r == -1) && CHECK (errno == EISDIR)
          && CHECK (step && strcmp (step, "rename") == 0)
          && only_expected_names (),
          "%s: a directory at PATH fails the rename, nothing left", way);

  snprintf (missing, sizeof missing, "%s/none/file", dir);
  step = NULL;
  r = replace (missing, 0644, parts, 2, &step);
  tap_ok (CHECK (r == -1) && CHECK (errno == ENOENT)
          && CHECK (step && strcmp (step, "open the directory") == 0),
          "%s: a missing directory fails, naming the step", way);
}

int
main (void)
{
  signal (SIGALRM, SIG_DFL);
  umask (077);
  if (mkdtemp (dir) == NULL) {
    perror ("mkdtemp");
    return EXIT_FAILURE;
  }
  snprintf (path, sizeof path, "%s/file", dir);
  snprintf (victim, sizeof victim, "%s/victim", dir);

  tap_plan (2 * CASES_PER_WAY);
  test_way (replace_file, "replace_file (O_TMPFILE here)");
  test_way (replace_file_by_mkstemp, "replace_file_by_mkstemp");

  clean ();
  rmdir (dir);
  return tap_done ();
}
