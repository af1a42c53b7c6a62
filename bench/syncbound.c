/* bench/syncbound: what this machine's disk allows for the flush targets,
 * with no NBD server at all.  plugq cannot flush faster than the kernel
 * and the device under it, so these are the bounds the issue-3 (c) and
 * issue-4 figures are read against.
 *
 *   syncbound parallel DIR FILES WRITES REPS
 *     FILES files, each given WRITES random 4 KiB writes (page cache),
 *     then fdatasync'd: one file alone, then all FILES at once, one
 *     thread each.  Prints the median times and their ratio: the volume
 *     flush of issue 4 against its slowest member, as the device gives it.
 *
 *   syncbound fua DIR THREADS SECONDS
 *     THREADS threads each loop "one random 4 KiB write, fdatasync" on
 *     one file, as a QD-THREADS stream of FUA writes served by nbdkit's
 *     file plugin; then group commit with no server: one thread writing
 *     THREADS pages per fdatasync (every write of the stream in each
 *     flush), one thread writing THREADS/2 (what a server that runs one
 *     flush at a time and holds none back groups: the other half of the
 *     stream is being answered), and two such threads at once (two
 *     group flushes in flight).  Prints the four rates.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BLOCK 4096
#define FILE_BLOCKS 32768               /* 128 MiB files */
#define MAX_FILES 64

static double
now_s (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void
die (const char *what)
{
  fprintf (stderr, "syncbound: %s: %s\n", what, strerror (errno));
  exit (EXIT_FAILURE);
}

/* For calls that return their error instead of setting errno. */
static void
check (int err, const char *what)
{
  if (err != 0) {
    errno = err;
    die (what);
  }
}

static int
open_file (const char *dir, int i)
{
  char path[4096];
  int fd;

  snprintf (path, sizeof path, "%s/syncbound.%d", dir, i);
  fd = open (path, O_RDWR | O_CREAT, 0600);
  if (fd == -1)
    die (path);
  unlink (path);
  /* Allocated, so fdatasync writes data only, as on a served disk. */
  check (posix_fallocate (fd, 0, (off_t) FILE_BLOCKS * BLOCK),
         "posix_fallocate");
  if (fsync (fd) == -1)
    die ("fsync");
  return fd;
}

static void
dirty (int fd, int writes, unsigned *seed)
{
  static const char page[BLOCK] = { 1 };

  for (int i = 0; i < writes; i++)
    if (pwrite (fd, page, BLOCK,
                (off_t) (rand_r (seed) % FILE_BLOCKS) * BLOCK) != BLOCK)
      die ("pwrite");
}

struct flusher {
  int fd;
  pthread_t thread;
};

static void *
flush_one (void *arg)
{
  struct flusher *f = arg;

  if (fdatasync (f->fd) == -1)
    die ("fdatasync");
  return NULL;
}

static int
cmp_double (const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;

  return x < y ? -1 : x > y;
}

static double
median (double *v, int n)
{
  qsort (v, n, sizeof *v, cmp_double);
  return v[n / 2];
}

static int
parallel (const char *dir, int files, int writes, int reps)
{
  struct flusher f[MAX_FILES];
  double alone[64], together[64];
  unsigned seed = 1;

  if (files < 1 || files > MAX_FILES || reps < 1 || reps > 64)
    return 2;
  for (int i = 0; i < files; i++)
    f[i].fd = open_file (dir, i);
  for (int r = 0; r < reps; r++) {
    double t;

    dirty (f[0].fd, writes, &seed);
    t = now_s ();
    flush_one (&f[0]);
    alone[r] = now_s () - t;

    for (int i = 0; i < files; i++)
      dirty (f[i].fd, writes, &seed);
    t = now_s ();
    for (int i = 0; i < files; i++)
      check (pthread_create (&f[i].thread, NULL, flush_one, &f[i]),
             "pthread_create");
    for (int i = 0; i < files; i++)
      pthread_join (f[i].thread, NULL);
    together[r] = now_s () - t;
  }
  printf ("files=%d writes=%d alone_ms=%.2f together_ms=%.2f ratio=%.2f\n",
          files, writes, median (alone, reps) * 1e3,
          median (together, reps) * 1e3,
          median (together, reps) / median (alone, reps));
  return 0;
}

struct fua_loop {
  int fd;
  int group;                    /* writes per fdatasync */
  double until;
  unsigned seed;
  uint64_t done;
  pthread_t thread;
};

static void *
fua_thread (void *arg)
{
  struct fua_loop *l = arg;

  while (now_s () < l->until) {
    dirty (l->fd, l->group, &l->seed);
    if (fdatasync (l->fd) == -1)
      die ("fdatasync");
    l->done += l->group;
  }
  return NULL;
}

/* Writes a second by `threads` threads on fd, each looping "group
 * random 4 KiB writes, one fdatasync", for `seconds`.
 */
static double
fua_rate (int fd, int threads, int group, double seconds)
{
  struct fua_loop l[MAX_FILES];
  uint64_t total = 0;
  double t = now_s ();

  for (int i = 0; i < threads; i++) {
    l[i] = (struct fua_loop) {
      .fd = fd, .group = group, .until = t + seconds, .seed = i + 1,
    };
    check (pthread_create (&l[i].thread, NULL, fua_thread, &l[i]),
           "pthread_create");
  }
  for (int i = 0; i < threads; i++) {
    pthread_join (l[i].thread, NULL);
    total += l[i].done;
  }
  return total / (now_s () - t);
}

static int
fua (const char *dir, int threads, double seconds)
{
  int fd, half = threads / 2 > 0 ? threads / 2 : 1;

  if (threads < 1 || threads > MAX_FILES)
    return 2;
  fd = open_file (dir, 0);
  printf ("threads=%d concurrent_fdatasync_writes_per_s=%.0f\n", threads,
          fua_rate (fd, threads, 1, seconds));
  printf ("threads=%d grouped_writes_per_s=%.0f\n", threads,
          fua_rate (fd, 1, threads, seconds));
  printf ("threads=%d half_grouped_writes_per_s=%.0f\n", threads,
          fua_rate (fd, 1, half, seconds));
  printf ("threads=%d half_grouped_two_in_flight_writes_per_s=%.0f\n",
          threads, fua_rate (fd, 2, half, seconds));
  return 0;
}

int
main (int argc, char **argv)
{
  if (argc == 6 && strcmp (argv[1], "parallel") == 0)
    return parallel (argv[2], atoi (argv[3]), atoi (argv[4]), atoi (argv[5]));
  if (argc == 5 && strcmp (argv[1], "fua") == 0)
    return fua (argv[2], atoi (argv[3]), atof (argv[4]));
  fprintf (stderr, "usage: syncbound parallel DIR FILES WRITES REPS\n"
           "       syncbound fua DIR THREADS SECONDS\n");
  return 2;
}
