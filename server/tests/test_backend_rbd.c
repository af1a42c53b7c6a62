/* plugq: unit tests for the rbd backend, against a real cluster.
 *
 * The test starts its own throw-away cluster (client-tests/ceph/
 * cluster.sh: one monitor, one memstore OSD, 127.0.0.1 only) in a
 * temporary directory, runs the backend checks the file and memory
 * backends pass through backend_type_rbd, as the plugin reaches it, then
 * a few seeds of the model test (model.h) with a queue over the image,
 * and stops the cluster by its pids at exit, or cluster.sh's watchdog
 * does once this process is gone (a crash).  Without ceph installed, or
 * in a build without librbd, every case is skipped with the reason.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backends/backend.h"
#include "backend_checks.h"
#include "backends/rbd/backend_rbd.h"
#include "backends/backend_type.h"
#include "elevator/elevator.h"
#include "common/extents.h"
#include "common/log.h"
#include "fixtures.h"
#include "model.h"
#include "tap.h"

#define NR_CASES 21

#ifndef HAVE_LIBRBD

int
main (void)
{
  return tap_skip_all (NR_CASES, "plugq was built without librbd "
                       "(apt-get install librbd-dev librados-dev)");
}

#else

#define KiB ((uint64_t) 1024)
#define MiB (KiB * 1024)
#define IMAGE_SIZE (64 * MiB)
#define OBJECT (4 * MiB)                /* rbd create's default */
#define HZ (EXTENT_HOLE | EXTENT_ZERO)

/* ThreadSanitizer: librados and librbd are not instrumented, so the
 * happens-before of their own atomics is invisible and their threads
 * race with each other in its eyes (seen in CephContext's singletons and
 * the messenger's workers).  Reports with a Ceph library on either stack
 * are dropped; this also hides a race in code that librbd calls back
 * (aio_complete), which the asynchronous cases keep simple: one mutex.
 */
const char *__tsan_default_suppressions (void);

const char *
__tsan_default_suppressions (void)
{
  return "race:libceph-common.so\n"
    "race:librados.so\n"
    "race:librbd.so\n";
}

static char cluster_dir[] = "/tmp/plugq-rbd-XXXXXX";
static char conf[sizeof cluster_dir + 16];
static char script[4096];
static bool cluster_up;

static char last_error[1024];

static void
capture_error (const char *msg)
{
  snprintf (last_error, sizeof last_error, "%s", msg);
  printf ("# log: %s\n", msg);
}

static const struct log_sink capture = { .error = capture_error };

/* ------------------------------------------------------------ cluster */

/* Runs a shell command line; true if it exited 0. */
__attribute__ ((format (printf, 1, 2)))
static bool
run (const char *fmt, ...)
{
  char cmd[8192];
  va_list ap;
  int r;

  va_start (ap, fmt);
  vsnprintf (cmd, sizeof cmd, fmt, ap);
  va_end (ap);
  fflush (stdout);
  r = system (cmd);
  return r != -1 && WIFEXITED (r) && WEXITSTATUS (r) == 0;
}

static void
stop_cluster (void)
{
  if (cluster_up) {
    run ("'%s' stop '%s' >/dev/null 2>&1", script, cluster_dir);
    run ("rm -rf '%s'", cluster_dir);
    cluster_up = false;
  }
}

/* NULL once the cluster is up, else why every case is skipped. */
static const char *
start_cluster (void)
{
  static char why[sizeof script + 64];
  const char *top = getenv ("top_srcdir");
  FILE *fp;

  if (top == NULL)
    return "top_srcdir is not set (run under make check)";
  snprintf (script, sizeof script, "%s/client-tests/ceph/cluster.sh", top);
  snprintf (why, sizeof why, "'%s' available 2>&1", script);
  if ((fp = popen (why, "r")) == NULL)
    return "cannot run cluster.sh";
  if (fgets (why, sizeof why, fp) == NULL)
    why[0] = '\0';
  if (pclose (fp) != 0) {
    why[strcspn (why, "\n")] = '\0';
    return why;
  }
  if (mkdtemp (cluster_dir) == NULL)
    return "cannot make a directory in /tmp";
  cluster_up = true;
  atexit (stop_cluster);
  /* With our pid: a watchdog stops the cluster if we crash. */
  if (!run ("'%s' start '%s' %d >&2", script, cluster_dir, (int) getpid ()))
    return "the test cluster did not start (see the log above)";
  snprintf (conf, sizeof conf, "%s/ceph.conf", cluster_dir);
  return NULL;
}

/* object: its size as rbd spells it ("64K"), NULL for the default. */
static bool
create_image (const char *name, uint64_t size, const char *object)
{
  return run ("timeout 30 rbd --conf '%s' create --size %" PRIu64
              "M%s%s rbd/%s", conf, size / MiB,
              object ? " --object-size " : "", object ? object : "", name);
}

/* ------------------------------------------------------------ opening */

/* Opens POOL/IMAGE through the type with further keys ("key=value"
 * strings, NULL-terminated); NULL after the backend logged why.
 */
static struct backend *
open_with (const char *spec, const char *const *keys)
{
  const struct backend_type *t = &backend_type_rbd;
  void *args = t->new_args ();
  struct backend *b = NULL;
  bool ok = args && t->start (args, "d", spec) == 0
    && t->set (args, "d", "ceph-conf", conf) == 0;

  for (; ok && keys && *keys; keys++) {
    char key[64];
    const char *eq = strchr (*keys, '=');

    snprintf (key, sizeof key, "%.*s", (int) (eq - *keys), *keys);
    ok = t->set (args, "d", key, eq + 1) == 0;
  }
  if (ok)
    b = t->open (args, false);
  if (args)
    t->free_args (args);
  return b;
}

/* Opened and started, as the plugin does across nbdkit's fork. */
static struct backend *
open_started (const char *spec)
{
  struct backend *b = open_with (spec, NULL);

  if (b && b->ops->start (b) == -1) {
    backend_close (b);
    return NULL;
  }
  return b;
}

/* ------------------------------------------------------------ cases */

/* Whether a started disk on spec takes a completed write as durable, and
 * a FUA write of c at offset then reads back.
 */
static bool
fua_write_with (const char *spec, bool want_durable, int c, uint64_t offset)
{
  struct backend *b = open_started (spec);
  char buf[4096];
  struct iovec iov = { .iov_base = buf, .iov_len = sizeof buf };
  bool ok = CHECK (b != NULL);

  memset (buf, c, sizeof buf);
  ok = ok && CHECK (((struct rbd_backend *) b)->writes_durable
                    == want_durable)
    && CHECK (backend_pwritev (b, &iov, 1, offset, true) == 0)
    && reads_as (b, c, sizeof buf, offset);
  backend_close (b);
  return ok;
}

/* With librbd's caches off a completed write is on every replica, and a
 * FUA write is just the write; an image whose own settings turn a cache
 * on gets a flush after each FUA write again.
 */
static bool
test_fua_by_cache_settings (void)
{
  return fua_write_with ("rbd/plain", true, 0x61, 0)
    && CHECK (run ("timeout 30 rbd --conf '%s' config image set rbd/cached"
                   " rbd_cache true", conf))
    && fua_write_with ("rbd/cached", false, 0x62, 4096)
    && CHECK (run ("timeout 30 rbd --conf '%s' config image rm rbd/cached"
                   " rbd_cache && timeout 30 rbd --conf '%s' config image"
                   " set rbd/cached rbd_persistent_cache_mode ssd",
                   conf, conf))
    && fua_write_with ("rbd/cached", false, 0x63, 8192);
}

static bool
test_properties (void)
{
  struct backend *b = open_started ("rbd/plain");
  bool ok = true;

  if (!CHECK (b != NULL))
    return false;
  ok &= CHECK (strcmp (b->ops->kind, "rbd") == 0);
  ok &= CHECK (strcmp (b->description, "rbd rbd/plain (4.0 MiB objects)")
               == 0);
  ok &= CHECK (b->size == IMAGE_SIZE);
  ok &= CHECK (backend_is_async (b) && b->max_in_flight >= 16);
  ok &= CHECK (b->limits.minimum == 1 && b->limits.preferred == 4096);
  ok &= CHECK (b->max_write == b->limits.maximum && b->max_iov >= 64);
  ok &= CHECK (b->can_fua && b->can_fast_zero && !b->trim_reads_zero);
  backend_close (b);
  return ok;
}

static bool
test_pwritev (struct backend *b)
{
  static const size_t lens[5] = { 512, 3 * 1024 + 7, 65536, 1, 200000 };

  uint64_t boundary = 3 * OBJECT;

  /* Across an object boundary librbd writes two objects. */
  return pwritev_reads_back (b, lens, 12345)
    && CHECK (fill (b, 0x44, 300000, boundary - 150000) == 0)
    && reads_as (b, 0x44, 300000, boundary - 150000);
}

static bool
test_zero (struct backend *b, bool may_trim)
{
  uint64_t base = (may_trim ? 16 : 24) * MiB;
  bool ok = true;

  ok &= CHECK (fill (b, 0x5a, 2 * MiB, base) == 0);
  ok &= CHECK (backend_zero (b, MiB - 1000, base + 500, may_trim, false)
               == 0);
  ok &= reads_as (b, 0x5a, 500, base);
  ok &= reads_as (b, 0, MiB - 1000, base + 500);
  ok &= reads_as (b, 0x5a, MiB + 500, base + MiB - 500);
  return ok;
}

/* Written objects are data, never written ones holes; a zero with holes
 * allowed over a whole object frees it.
 */
static bool
test_extents (struct backend *b)
{
  uint64_t at = 40 * MiB;
  bool ok = true;

  ok &= CHECK (fill (b, 0x11, OBJECT, at) == 0);
  ok &= CHECK (fill (b, 0x22, OBJECT, at + 2 * OBJECT) == 0);
  ok &= extents_are (b, 3 * OBJECT, at, (struct extent[]) {
      { at, OBJECT, 0 }, { at + OBJECT, OBJECT, HZ },
      { at + 2 * OBJECT, OBJECT, 0 } }, 3);
  ok &= CHECK (backend_zero (b, OBJECT, at, true, false) == 0);
  ok &= extents_are (b, 2 * OBJECT, at, (struct extent[]) {
      { at, 2 * OBJECT, HZ } }, 1);
  ok &= reads_as (b, 0, OBJECT, at);
  ok &= reads_as (b, 0x22, OBJECT, at + 2 * OBJECT);
  return ok;
}

/* One extents call over a large image answers for its first 256 objects
 * only; the caller asks again from there.
 */
static bool
test_extents_bounded (void)
{
  struct backend *b = open_started ("rbd/big");
  struct extent_list l;
  bool ok = CHECK (b != NULL);

  if (!ok)
    return false;
  extent_list_init (&l);
  ok &= CHECK (b->ops->extents (b, b->size, 0, &l) == 0);
  ok &= CHECK (l.len == 1 && l.v[0].offset == 0
               && l.v[0].length == 256 * OBJECT && l.v[0].type == HZ);
  extent_list_clear (&l);
  ok &= CHECK (b->ops->extents (b, b->size - 256 * OBJECT, 256 * OBJECT,
                                &l) == 0);
  ok &= CHECK (l.len == 1 && l.v[0].offset == 256 * OBJECT
               && l.v[0].length == b->size - 256 * OBJECT);
  extent_list_free (&l);
  backend_close (b);
  return ok;
}

static bool
test_trim (struct backend *b)
{
  uint64_t at = 52 * MiB;
  bool ok = true;

  ok &= CHECK (fill (b, 0x33, OBJECT, at) == 0);
  ok &= CHECK (backend_trim (b, OBJECT, at, false) == 0);
  /* A whole object trimmed is gone: a hole reading as zeroes. */
  ok &= extents_are (b, OBJECT, at, (struct extent[]) {
      { at, OBJECT, HZ } }, 1);
  ok &= reads_as (b, 0, OBJECT, at);
  return ok;
}

static bool
test_out_of_range (struct backend *b)
{
  char buf[16];
  bool ok = true;

  errno = 0;
  ok &= CHECK (b->ops->pread (b, buf, 16, IMAGE_SIZE - 8) == -1
               && errno == EINVAL);
  errno = 0;
  ok &= CHECK (fill (b, 1, 16, IMAGE_SIZE - 8) == -1 && errno == EINVAL);
  errno = 0;
  memset (buf, 0x5a, sizeof buf);
  ok &= CHECK (backend_pwritev (b, &(struct iovec) { buf, 16 }, 1, 0, true)
               == 0);           /* FUA: the write, then its own aio flush */
  ok &= reads_as (b, 0x5a, 16, 0);
  return ok;
}

/* Submitted operations, answered from librbd's thread. */
struct waiter {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  unsigned done, failed;
};

static struct waiter waiter = {
  PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0
};

static void
io_done (struct backend_io *io, int err)
{
  pthread_mutex_lock (&waiter.lock);
  waiter.done++;
  waiter.failed += err != 0;
  pthread_cond_broadcast (&waiter.cond);
  pthread_mutex_unlock (&waiter.lock);
}

static bool
wait_done (unsigned n)
{
  struct timespec until;
  bool ok = true;

  clock_gettime (CLOCK_REALTIME, &until);
  until.tv_sec += 30;
  pthread_mutex_lock (&waiter.lock);
  while (ok && waiter.done < n)
    ok = pthread_cond_timedwait (&waiter.cond, &waiter.lock, &until) == 0;
  pthread_mutex_unlock (&waiter.lock);
  return ok;
}

/* As many writes as the queue may have in flight, all at once, each a
 * merged batch of two buffers; then a flush.
 */
static bool
test_in_flight (struct backend *b)
{
  enum { N = 32, LEN = 64 * 1024 };
  static struct backend_io ios[N];
  static struct iovec iov[N][2];
  static unsigned char data[N][LEN];
  bool ok = CHECK (b->max_in_flight >= N);

  waiter.done = waiter.failed = 0;
  for (unsigned i = 0; ok && i < N; i++) {
    memset (data[i], 'A' + i, LEN);
    iov[i][0] = (struct iovec) { data[i], LEN / 2 };
    iov[i][1] = (struct iovec) { data[i] + LEN / 2, LEN / 2 };
    ios[i] = (struct backend_io) {
      .kind = OP_WRITE, .iov = iov[i], .iovcnt = 2,
      .offset = 8 * MiB + i * (uint64_t) LEN, .count = LEN, .done = io_done,
    };
    ok &= CHECK (b->ops->io (b, &ios[i]) == BACKEND_IO_STARTED);
  }
  ok &= CHECK (wait_done (N));
  ok &= CHECK (waiter.failed == 0);
  ok &= CHECK (b->ops->flush (b) == 0);
  for (unsigned i = 0; ok && i < N; i++)
    ok &= reads_as (b, 'A' + i, LEN, 8 * MiB + i * (uint64_t) LEN);
  return ok;
}

/* The file holds byte c over [offset, offset+len). */
static bool
file_holds (const char *path, int c, size_t len, uint64_t offset)
{
  FILE *fp = fopen (path, "r");
  unsigned char *buf = malloc (len);
  bool ok = fp && buf && fseek (fp, offset, SEEK_SET) == 0
    && fread (buf, 1, len, fp) == len && bytes_all (buf, c, len);

  if (fp)
    fclose (fp);
  free (buf);
  return ok;
}

/* What plugq wrote, the rbd tool reads; close released the image. */
static bool
test_export_after_close (void)
{
  char out[sizeof cluster_dir + 32];
  struct backend *b = open_started ("rbd/exported");
  bool ok = CHECK (b != NULL);

  if (!ok)
    return false;
  ok &= CHECK (fill (b, 0x77, 3 * MiB, 5 * MiB + 3) == 0);
  ok &= CHECK (b->ops->flush (b) == 0);
  backend_close (b);
  snprintf (out, sizeof out, "%s/exported.raw", cluster_dir);
  ok &= CHECK (run ("timeout 30 rbd --conf '%s' export rbd/exported '%s' "
                    ">/dev/null 2>&1", conf, out));
  ok &= CHECK (file_holds (out, 0, 5 * MiB + 3, 0));
  ok &= CHECK (file_holds (out, 0x77, 3 * MiB, 5 * MiB + 3));
  ok &= CHECK (file_holds (out, 0, IMAGE_SIZE - 8 * MiB - 3, 8 * MiB + 3));
  /* Nobody watches the image any more: its lock is free. */
  ok &= CHECK (run ("timeout 30 rbd --conf '%s' status rbd/exported "
                    "| grep -q 'Watchers: none'", conf));
  return ok;
}

static bool
test_open_errors (void)
{
  char keyring[sizeof cluster_dir + 32];
  bool ok = true;

  ok &= CHECK (open_with ("rbd/missing", NULL) == NULL);
  ok &= CHECK (strcmp (last_error, "rbd=rbd/missing: no image 'missing' "
                       "in pool 'rbd'") == 0);
  ok &= CHECK (open_with ("nopool/x", NULL) == NULL);
  ok &= CHECK (strcmp (last_error, "rbd=nopool/x: no pool 'nopool' in the "
                       "cluster") == 0);
  snprintf (keyring, sizeof keyring, "%s/wrong.keyring", cluster_dir);
  ok &= CHECK (run ("ceph-authtool --create-keyring '%s' --gen-key "
                    "-n client.admin >/dev/null", keyring));
  {
    char key[sizeof keyring + 16];
    const char *keys[] = { key, NULL };

    snprintf (key, sizeof key, "ceph-keyring=%s", keyring);
    ok &= CHECK (open_with ("rbd/plain", keys) == NULL);
    ok &= CHECK (strcmp (last_error, "rbd=rbd/plain: the cluster refused "
                         "client.admin: wrong key, or none for it in the "
                         "keyring") == 0);
  }
  return ok;
}

/* The arguments alone: shapes of rbd= and the keys' values. */
static bool
test_args (void)
{
  const struct backend_type *t = &backend_type_rbd;
  void *args = t->new_args ();
  bool ok = CHECK (args != NULL);

  if (!ok)
    return false;
  ok &= CHECK (t->start (args, "d", "pool/ns/image") == 0);
  ok &= CHECK (t->start (args, "d", "pool/image") == 0);
  ok &= CHECK (t->start (args, "d", "image") == -1);
  ok &= CHECK (strcmp (last_error, "rbd=image: not POOL/IMAGE or "
                       "POOL/NAMESPACE/IMAGE (disk=d)") == 0);
  ok &= CHECK (t->start (args, "d", "a/b/c/d") == -1);
  ok &= CHECK (t->start (args, "d", "/image") == -1);
  ok &= CHECK (t->start (args, "d", "pool//image") == -1);
  ok &= CHECK (t->start (args, "d", "pool/image/") == -1);
  ok &= CHECK (t->start (args, "d", "pool/image@snap") == -1);
  ok &= CHECK (strstr (last_error, "rbd=pool/image@snap: a snapshot is "
                       "read-only") == last_error);
  ok &= CHECK (t->set (args, "d", "ceph-conf", "/nonexistent/ceph.conf")
               == -1);
  ok &= CHECK (strcmp (last_error, "ceph-conf=/nonexistent/ceph.conf: No "
                       "such file or directory (disk=d)") == 0);
  ok &= CHECK (t->set (args, "d", "ceph-id", "client.") == -1);
  ok &= CHECK (t->set (args, "d", "ceph-id", "client.admin") == 0);
  ok &= CHECK (((struct rbd_target *) args)->timeout_ns == 0);
  ok &= CHECK (t->set (args, "d", "ceph-timeout", "2s") == 0);
  ok &= CHECK (((struct rbd_target *) args)->timeout_ns == 2000000000);
  ok &= CHECK (t->set (args, "d", "ceph-timeout", "0") == 0);
  ok &= CHECK (((struct rbd_target *) args)->timeout_ns == 0);
  ok &= CHECK (t->set (args, "d", "ceph-timeout", "-1") == -1);
  t->free_args (args);
  return ok;
}

/* Whether a started disk's librados option `name` reads `want`. */
static bool
option_reads (struct backend *b, const char *name, const char *want)
{
  char got[64] = "";

  if (rados_conf_get (((struct rbd_backend *) b)->conn.cluster, name, got,
                      sizeof got) < 0 || strcmp (got, want) != 0) {
    printf ("# %s is '%s', expected '%s'\n", name, got, want);
    return false;
  }
  return true;
}

/* A disk started with the keys given, then its timeouts as librados
 * holds them: connecting, monitor requests, OSD requests.
 */
static bool
timeouts_are (const char *const *keys, const char *mount, const char *mon,
              const char *osd)
{
  struct backend *b = open_with ("rbd/plain", keys);
  bool ok = CHECK (b != NULL) && CHECK (b->ops->start (b) == 0);

  ok = ok && option_reads (b, "client_mount_timeout", mount)
    && option_reads (b, "rados_mon_op_timeout", mon)
    && option_reads (b, "rados_osd_op_timeout", osd);
  backend_close (b);
  return ok;
}

/* By default requests wait for the cluster (no per-request timeout) while
 * connecting stays bounded; a ceph-timeout bounds all three, in whole
 * seconds rounded up.
 */
static bool
test_timeouts (void)
{
  return timeouts_are (NULL, "30", "0", "0")
    && timeouts_are ((const char *[]) { "ceph-timeout=0", NULL },
                     "30", "0", "0")
    && timeouts_are ((const char *[]) { "ceph-timeout=5s", NULL },
                     "5", "5", "5")
    && timeouts_are ((const char *[]) { "ceph-timeout=1500ms", NULL },
                     "2", "2", "2");
}

/* The watch's rule: requests in flight with no answer for
 * RBD_STALL_REPORT_NS are reported once, their answer once; an idle disk
 * is no stall; while the drain runs, the wait is reported after
 * RBD_DRAIN_REPORT_NS, and once even when the stall was reported before.
 */
static bool
test_stall_rule (void)
{
  const uint64_t s = 1000000000;
  struct rbd_stall st = { .quiet_since_ns = 0 };
  uint64_t quiet;
  bool ok = true;

  /* Idle for a minute: nothing. */
  ok &= CHECK (rbd_stall_look (&st, 60 * s, false, 0, false, &quiet)
               == RBD_STALL_NONE);
  /* Answers keep coming: nothing. */
  for (uint64_t t = 61; t < 80; t++)
    ok &= CHECK (rbd_stall_look (&st, t * s, true, t, false, &quiet)
                 == RBD_STALL_NONE);
  /* The last answer at 79 s; quiet from there. */
  ok &= CHECK (rbd_stall_look (&st, 88 * s, true, 79, false, &quiet)
               == RBD_STALL_NONE);
  ok &= CHECK (rbd_stall_look (&st, 89 * s, true, 79, false, &quiet)
               == RBD_STALL_BEGAN && quiet == 10 * s);
  ok &= CHECK (rbd_stall_look (&st, 100 * s, true, 79, false, &quiet)
               == RBD_STALL_NONE);
  /* The drain starts during it: said once. */
  ok &= CHECK (rbd_stall_look (&st, 101 * s, true, 79, true, &quiet)
               == RBD_STALL_DRAIN && quiet == 22 * s);
  ok &= CHECK (rbd_stall_look (&st, 102 * s, true, 79, true, &quiet)
               == RBD_STALL_NONE);
  /* Answered: the end, once. */
  ok &= CHECK (rbd_stall_look (&st, 120 * s, true, 80, true, &quiet)
               == RBD_STALL_ENDED && quiet == 41 * s);
  ok &= CHECK (rbd_stall_look (&st, 121 * s, false, 80, true, &quiet)
               == RBD_STALL_NONE);
  /* Draining: a new wait is said after a second, and its end. */
  ok &= CHECK (rbd_stall_look (&st, 122 * s, true, 80, true, &quiet)
               == RBD_STALL_DRAIN && quiet == s);
  ok &= CHECK (rbd_stall_look (&st, 135 * s, true, 80, true, &quiet)
               == RBD_STALL_NONE);
  ok &= CHECK (rbd_stall_look (&st, 136 * s, false, 80, true, &quiet)
               == RBD_STALL_ENDED && quiet == 15 * s);
  return ok;
}

/* Monitors that never answer: a bounded, named failure. */
static bool
test_unreachable (void)
{
  char bad[sizeof cluster_dir + 32];
  const struct backend_type *t = &backend_type_rbd;
  void *args = t->new_args ();
  time_t start = time (NULL);
  bool ok = CHECK (args != NULL);

  snprintf (bad, sizeof bad, "%s/unreachable.conf", cluster_dir);
  /* Port 1 on 127.0.0.1: nothing listens there. */
  ok &= CHECK (run ("sed 's/^mon host = .*/mon host = [v2:127.0.0.1:1]/' "
                    "'%s' >'%s'", conf, bad));
  ok &= CHECK (args && t->start (args, "d", "rbd/plain") == 0
               && t->set (args, "d", "ceph-conf", bad) == 0
               && t->set (args, "d", "ceph-timeout", "1") == 0);
  ok &= CHECK (args && t->open (args, false) == NULL);
  ok &= CHECK (strcmp (last_error, "rbd=rbd/plain: no answer from the Ceph "
                       "monitors ([v2:127.0.0.1:1]) within 1 s") == 0);
  ok &= CHECK (time (NULL) - start < 10);
  if (args)
    t->free_args (args);
  return ok;
}

/* ------------------------------------------------------------ model */

/* The model test with the rbd backend under the test backend: the queue
 * writes through librbd's asynchronous calls, with FUA as a write and
 * then rbd_aio_flush, reads and extents come from the image, and the
 * harness reads the image directly to check what landed and what is
 * durable.  Every run opens the same image and zeroes it first; its
 * objects are small, so that requests cross objects and zeroes free
 * whole ones.
 */
#define MODEL_IMAGE_SIZE (1 * MiB)
#define MODEL_OBJECT "64K"
#define MODEL_OPS 200
#define MODEL_SEEDS 2
#define MODEL_LANES 8
#define MODEL_MAX_SLEEP_US 200
/* All of them take about a second; a queue that deadlocks on the image
 * would otherwise hang the test run.
 */
#define MODEL_TIMEOUT_S 300

/* The model image, reading as zeroes: its objects are freed, durably. */
static struct backend *
open_model_image (void *spec)
{
  struct backend *b = open_started (spec);

  if (b && backend_zero (b, b->size, 0, true, true) == -1) {
    backend_close (b);
    return NULL;
  }
  return b;
}

/* The seed's queue knobs over the model image; FUA carried by the
 * image's writes or by the queue's flushes, as fua says.
 */
static void
on_model_image (struct harness_params *p, bool fua)
{
  p->disk_size = MODEL_IMAGE_SIZE;
  p->backend.open = open_model_image;
  p->backend.open_arg = "rbd/model";
  p->backend.name = "rbd";
  p->backend.fua = fua;
  /* Properties of the memory backend's stand-ins that rbd has or not
   * of its own.
   */
  p->backend.async = 0;
  p->backend.writers = 0;
  p->backend.min_block = 0;
  p->backend.writes_to_memory = false;
  p->backend.trim = TB_TRIM_PASS;
}

static bool
model_passed (const struct run_result *r, const char *what, uint64_t seed)
{
  if (r->fault == FAULT_NONE)
    return true;
  printf ("# model on rbd, %s, seed %" PRIu64 ": %s fault\n", what, seed,
          harness_fault_names[r->fault]);
  return false;
}

/* One client, MODEL_OPS ops per seed: the first seed with FUA carried,
 * the next with FUA by flush.
 */
static bool
test_model_one_client (enum ack_mode ack)
{
  bool ok = true;

  for (uint64_t seed = 0; ok && seed < MODEL_SEEDS; seed++) {
    struct harness_params p;
    struct byte_source src;
    struct run_result r;

    byte_source_seed (&src, seed);
    harness_params_choose (&p, &src, &elevator_deadline, ack);
    on_model_image (&p, seed % 2 == 0);
    r = run_from_source (&p, &src, MODEL_OPS, MODEL_MAX_SLEEP_US, stdout);
    ok = model_passed (&r, "one client", seed);
  }
  return ok;
}

/* MODEL_LANES clients on threads writing interleaved stripes, so that
 * waiting writes continue each other's writes in flight in librbd.
 * The waiting writes held and merged are reported, not judged: how many
 * batches librbd keeps in flight is the cluster's timing.
 */
static bool
test_model_clients (enum ack_mode ack, uint64_t *held, uint64_t *merged)
{
  struct harness_params p;
  struct byte_source src;
  struct run_result r;

  byte_source_seed (&src, 0);
  harness_params_choose_striped (&p, &src, &elevator_noop, ack, MODEL_LANES);
  on_model_image (&p, true);
  r = run_threaded (&p, 0, MODEL_OPS, stdout);
  *held = r.stats.waits_behind_stream;
  *merged = r.stats.waiting_merged;
  return model_passed (&r, "clients", 0);
}

/* The process ends, and cluster.sh's watchdog stops the cluster. */
static void
model_timed_out (int sig)
{
  static const char msg[] = "# the model runs on rbd did not finish within "
    "their time: a hang\nBail out! model on rbd hung\n";

  (void) sig;
  if (write (STDOUT_FILENO, msg, sizeof msg - 1) == -1)
    _exit (2);                  /* not even that could be said */
  _exit (EXIT_FAILURE);
}

static void
run_model_cases (void)
{
  static const enum ack_mode acks[] = { ACK_QUEUED, ACK_DISPATCHED };

  signal (SIGALRM, model_timed_out);
  alarm (MODEL_TIMEOUT_S);
  for (size_t i = 0; i < 2; i++) {
    const char *ack = acks[i] == ACK_QUEUED ? "queued" : "dispatched";
    uint64_t held = 0, merged = 0;
    double start = test_now_s ();
    bool ok = test_model_one_client (acks[i]);

    tap_ok (ok, "model on an rbd image, ack=%s: one client, %d seeds x %d"
            " ops (%.1f s)", ack, MODEL_SEEDS, MODEL_OPS, test_now_s () - start);
    start = test_now_s ();
    ok = test_model_clients (acks[i], &held, &merged);
    tap_ok (ok, "model on an rbd image, ack=%s: %d clients in stripes x %d"
            " ops: %" PRIu64 " waiting writes held behind a busy stream, %"
            PRIu64 " merged (%.1f s)", ack, MODEL_LANES, MODEL_OPS, held,
            merged, test_now_s () - start);
  }
  alarm (0);
}

static void
skip_all_cases (const char *why)
{
  tap_skip_all (NR_CASES, why);
}

int
main (void)
{
  const char *why;
  struct backend *b;

  log_set_sink (&capture);
  if ((why = start_cluster ()) != NULL) {
    skip_all_cases (why);
    return EXIT_SUCCESS;
  }
  if (!create_image ("plain", IMAGE_SIZE, NULL)
      || !create_image ("exported", IMAGE_SIZE, NULL)
      || !create_image ("big", 1536 * MiB, NULL)
      || !create_image ("cached", IMAGE_SIZE, NULL)
      || !create_image ("model", MODEL_IMAGE_SIZE, MODEL_OBJECT)) {
    skip_all_cases ("could not create the test images");
    return EXIT_FAILURE;
  }
  tap_plan (NR_CASES);
  tap_ok (test_args (), "rbd= and ceph-* values are checked as given");
  tap_ok (test_properties (), "kind, size, limits and description "
          "from the image");
  b = open_started ("rbd/plain");
  tap_ok (b != NULL, "open and start (connect again after a fork)");
  if (b) {
    tap_ok (test_pwritev (b), "pwritev of several iovecs reads back, "
            "across an object boundary too");
    tap_ok (test_zero (b, false), "zero without holes, unaligned");
    tap_ok (test_zero (b, true), "zero with holes allowed, unaligned");
    tap_ok (test_extents (b), "extents: written objects are data, the "
            "rest and freed objects holes");
    tap_ok (test_trim (b), "trim of a whole object leaves a hole");
    tap_ok (test_out_of_range (b), "requests past the end fail with "
            "EINVAL; FUA is a flush");
    tap_ok (test_in_flight (b), "32 asynchronous writes in flight "
            "at once complete and read back");
    backend_close (b);
  }
  else
    for (int i = 0; i < 7; i++)
      tap_ok (false, "skipped: the image did not open");
  tap_ok (test_fua_by_cache_settings (), "FUA is the write alone while"
          " librbd's caches are off, a flush after it where the image"
          " turns its cache or persistent cache on");
  tap_ok (test_extents_bounded (), "extents of a large image come 256 "
          "objects at a time");
  tap_ok (test_export_after_close (), "rbd export reads what was written; "
          "close leaves no watcher");
  tap_ok (test_open_errors (), "missing image, missing pool and a wrong "
          "key each fail with one clear line");
  tap_ok (test_unreachable (), "unreachable monitors fail within the "
          "ceph-timeout");
  tap_ok (test_timeouts (), "requests wait for the cluster by default, "
          "connecting is bounded; ceph-timeout bounds every request");
  tap_ok (test_stall_rule (), "a stall is logged once after 10 s, its end "
          "once; the drain's wait after 1 s");
  run_model_cases ();
  stop_cluster ();
  return tap_done ();
}

#endif /* HAVE_LIBRBD */
