/* plugq: unit tests for exports in service (volume/disk.h, export.h,
 * export_table.h) and the queue's side of reconfiguration
 * (queue_reconfig.c, session slots, timers attached and detached while
 * the timer loop runs).
 *
 * What the tests watch is outside the code under test: a file's bytes
 * and whether the process still has it open (a retired disk has written
 * its queue and closed its backend), the test backend's calls and gates,
 * and the answers requests get.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "elevator/elevator.h"
#include "fixtures.h"
#include "queue/session.h"
#include "queue/timer_service.h"
#include "queue/queue_internal.h"
#include "tap.h"
#include "test_backends.h"
#include "volume/disk.h"
#include "volume/export.h"
#include "volume/export_table.h"
#include "volume/linear.h"

#define KiB ((uint64_t) 1024)

/* Started once: every disk here joins a loop that already runs, as a
 * disk added in service does.
 */
static struct timer_service *timers;

/* A queue that keeps what it is given until told otherwise. */
static struct queue_config
held_config (void)
{
  struct queue_config c = test_config (TEST_HOUR, 100000);

  c.write_expire_ns = TEST_HOUR;
  c.bypass = false;
  return c;
}

static struct disk *
start_disk (const char *name, struct backend *b,
            const struct queue_config *cfg)
{
  struct queue *q = queue_new (name, b, cfg);
  struct disk *d = q ? disk_new (q) : NULL;

  if (d == NULL || disk_start (d, timers) == -1) {
    printf ("# cannot start disk %s\n", name);
    if (d)
      disk_release (d);
    else if (q)
      queue_retire (q);
    else
      backend_close (b);
    return NULL;
  }
  return d;
}

static struct disk *
test_disk (const char *name, uint64_t size, struct test_backend **tb,
           const struct queue_config *cfg)
{
  *tb = test_backend_new (size);
  return *tb ? start_disk (name, test_backend_get (*tb), cfg) : NULL;
}

/* The export of a whole disk, as the configuration builds it. */
static struct export *
disk_export (struct disk *d)
{
  struct linear *v = linear_new_disk (d->queue);
  struct export *e = v ? export_new (queue_name (d->queue), false, v, &d, 1)
    : NULL;

  if (e == NULL)
    linear_free (v);
  return e;
}

/* ------------------------------------------------------------ files */

struct temp_file {
  char path[64];
};

static bool
temp_file (struct temp_file *f, uint64_t size)
{
  int fd;

  snprintf (f->path, sizeof f->path, "/tmp/plugq-test-exports.XXXXXX");
  fd = mkstemp (f->path);
  if (fd == -1)
    return false;
  if (ftruncate (fd, (off_t) size) == -1) {
    close (fd);
    return false;
  }
  close (fd);
  return true;
}

/* How many of this process's descriptors are open on path. */
static unsigned
open_count (const char *path)
{
  DIR *dir = opendir ("/proc/self/fd");
  struct dirent *de;
  unsigned n = 0;

  if (dir == NULL)
    return UINT_MAX;
  while ((de = readdir (dir)) != NULL) {
    char link[300], target[PATH_MAX];
    ssize_t len;

    snprintf (link, sizeof link, "/proc/self/fd/%s", de->d_name);
    len = readlink (link, target, sizeof target - 1);
    if (len > 0) {
      target[len] = '\0';
      n += strcmp (target, path) == 0;
    }
  }
  closedir (dir);
  return n;
}

/* The file holds count bytes of c at offset. */
static bool
file_holds (const char *path, int c, size_t count, uint64_t offset)
{
  char *buf = malloc (count);
  int fd = open (path, O_RDONLY);
  bool ok;

  ok = buf && fd >= 0 && pread (fd, buf, count, (off_t) offset)
    == (ssize_t) count && bytes_all (buf, c, count);
  if (fd >= 0)
    close (fd);
  free (buf);
  return ok;
}

static struct disk *
file_disk (const char *name, const struct temp_file *f)
{
  struct queue_config cfg = held_config ();
  struct backend *b = backend_file_open (f->path, false, false);

  return b ? start_disk (name, b, &cfg) : NULL;
}

/* ------------------------------------------------------------ requests */

struct request_job {
  struct export_handle *h;
  int kind;                     /* 0: read through the gate, 1: refused */
  char buf[4096];
};

static int
request_job_run (void *arg)
{
  struct request_job *j = arg;
  int r;

  if (j->kind == 1)
    return export_refused (j->h);
  if (!export_enter (j->h))
    return export_refused (j->h);
  r = linear_pread (j->h->version, j->buf, sizeof j->buf, 0);
  export_leave (j->h);
  return r;
}

static int
close_job_run (void *arg)
{
  return export_close (arg);
}

/* A write through the gate, as the plugin makes it. */
static int
gated_write (struct export_handle *h, int c, uint64_t count, uint64_t offset)
{
  char *buf = malloc (count);
  int r;

  if (buf == NULL)
    return -1;
  memset (buf, c, count);
  if (!export_enter (h))
    r = export_refused (h);
  else {
    r = linear_pwrite (h->version, h->session, buf, count, offset, 0);
    export_leave (h);
  }
  free (buf);
  return r;
}

/* ------------------------------------------------------------ cases */

static void
test_last_holder_retires (void)
{
  struct temp_file f;
  struct disk *d;
  struct export *e = NULL;
  struct export_table *t = NULL;
  bool ok = CHECK (temp_file (&f, 64 * KiB));

  ok = ok && CHECK ((d = file_disk ("retire", &f)) != NULL);
  ok = ok && CHECK ((e = disk_export (d)) != NULL)
    && CHECK ((t = export_table_new ()) != NULL)
    && CHECK (export_table_add (t, e, NULL, d) == 0);
  ok = ok && CHECK (test_write_fill (d->queue, NULL, 'x', 4 * KiB, 0, 0)
                    == 0);
  if (ok) {
    disk_release (d);           /* the configuration's hold */
    export_release (e);
  }
  /* The table still holds both: the queue keeps its write, the file stays
   * open.
   */
  ok = ok && CHECK (file_holds (f.path, 0, 4 * KiB, 0))
    && CHECK (open_count (f.path) > 0);
  export_table_release (t);
  ok = ok && CHECK (file_holds (f.path, 'x', 4 * KiB, 0))
    && CHECK (open_count (f.path) == 0);
  unlink (f.path);
  tap_ok (ok, "a disk is retired by its last holder: its queued write "
          "reaches the file, then the file is closed");
}

static void
test_table_swap (void)
{
  struct queue_config cfg = held_config ();
  struct test_backend *tba, *tbb;
  struct disk *a = test_disk ("a", 64 * KiB, &tba, &cfg);
  struct disk *b = test_disk ("b", 64 * KiB, &tbb, &cfg);
  struct export *ea = a ? disk_export (a) : NULL;
  struct export *eb = b ? disk_export (b) : NULL;
  struct registry *r = registry_new ();
  struct export_table *t1 = export_table_new (), *t2 = export_table_new ();
  struct export_table *reader = NULL;
  struct export_handle *h = NULL, *h2 = NULL;
  unsigned held_before = 0;
  bool ok = CHECK (ea && eb && r && t1 && t2);

  ok = ok && CHECK (export_table_add (t1, ea, NULL, a) == 0)
    && CHECK (export_table_add (t1, eb, NULL, b) == 0)
    && CHECK (export_table_add (t2, eb, NULL, b) == 0);
  if (ok) {
    t1->default_export = ea;
    t2->default_export = eb;
    ok = CHECK (registry_commit (r, t1, NULL, NULL) == 0);
    t1 = NULL;
  }
  ok = ok && CHECK ((h = registry_open (r, "")) != NULL)
    && CHECK (h->export == ea);
  reader = ok ? registry_table (r) : NULL;
  held_before = ok ? atomic_load (&ea->refs) : 0;
  ok = ok && CHECK (registry_commit (r, t2, NULL, NULL) == 0);
  t2 = NULL;
  /* New connections see the new table; a is gone from it. */
  if (ok) {
    errno = 0;
    ok = CHECK (registry_open (r, "a") == NULL && errno == ENOENT);
  }
  ok = ok && CHECK ((h2 = registry_open (r, "")) != NULL)
    && CHECK (h2->export == eb);
  /* The old table lives on with its reader, and holds a until it goes. */
  ok = ok && CHECK (reader->nr_exports == 2 && reader->exports[0] == ea)
    && CHECK (atomic_load (&ea->refs) == held_before);
  if (reader)
    export_table_release (reader);
  ok = ok && CHECK (atomic_load (&ea->refs) == held_before - 1);
  /* The connection opened on the old table keeps a until it closes. */
  ok = ok && CHECK (gated_write (h, 'q', 4 * KiB, 0) == 0)
    && CHECK (test_queue_reads_as (a->queue, 'q', 4 * KiB, 0));
  if (h)
    registry_close (r, h);
  if (h2)
    registry_close (r, h2);
  export_table_release (t1);
  export_table_release (t2);
  registry_free (r);
  export_release (ea);
  export_release (eb);
  disk_release (a);
  disk_release (b);
  tap_ok (ok, "a published table: opens see the new one, a reader and a "
          "connection keep the old one's exports until they let go");
}

static void
test_gate (void)
{
  struct queue_config cfg = held_config ();
  struct test_backend *tb;
  struct disk *d = test_disk ("gate", 64 * KiB, &tb, &cfg);
  struct export *e = d ? disk_export (d) : NULL;
  struct export_handle *reader = NULL, *writer = NULL;
  struct request_job read = { .kind = 0 }, refused = { .kind = 1 };
  struct test_thread tr = TEST_THREAD_INIT, tc = TEST_THREAD_INIT;
  struct test_thread tf = TEST_THREAD_INIT;
  bool ok = CHECK (e != NULL);

  ok = ok && CHECK ((reader = export_attach (e)) != NULL)
    && CHECK ((writer = export_attach (e)) != NULL)
    && CHECK (export_clients (e) == 2);
  /* Answered at once (ack=queued): only the close's flush writes it. */
  ok = ok && CHECK (gated_write (writer, 'y', 4 * KiB, 8 * KiB) == 0);
  if (ok) {
    test_backend_block (tb, TB_PREAD);
    read.h = reader;
    refused.h = writer;
    ok = CHECK (test_thread_start (&tr, request_job_run, &read) == 0)
      && CHECK (test_backend_wait_entered (tb, TB_PREAD, 1))
      && CHECK (test_thread_start (&tc, close_job_run, e) == 0);
  }
  /* The close waits for the read inside; a new request turns back and
   * waits for the close's verdict.
   */
  ok = ok && CHECK (!TEST_SOON (test_thread_done (&tc)))
    && CHECK (atomic_load (&e->state) == EXPORT_CLOSING)
    && CHECK (!export_enter (writer))
    && CHECK (test_thread_start (&tf, request_job_run, &refused) == 0)
    && CHECK (!TEST_SOON (test_thread_done (&tf)))
    && CHECK (test_backend_count (tb, TB_PWRITEV) == 0);
  test_backend_release_all (tb);
  ok = ok && CHECK (test_thread_wait (&tr) && tr.result == 0)
    && CHECK (test_thread_wait (&tc) && tc.result == 0)
    && CHECK (test_thread_wait (&tf) && tf.result == -1
              && tf.err == ESHUTDOWN)
    && CHECK (test_backend_holds (tb, 'y', 4 * KiB, 8 * KiB))
    && CHECK (test_backend_count (tb, TB_FLUSH) >= 1);
  if (ok) {
    errno = 0;
    ok = CHECK (export_attach (e) == NULL && errno == ESHUTDOWN);
  }
  test_thread_join (&tr);
  test_thread_join (&tc);
  test_thread_join (&tf);
  /* A detached handle's hold on the export passes to its closer. */
  if (reader) {
    export_detach (reader);
    export_release (e);
  }
  if (writer) {
    export_detach (writer);
    export_release (e);
  }
  export_release (e);
  disk_release (d);
  tap_ok (ok, "export_close waits for the request inside, flushes what was "
          "answered, then refuses the rest with ESHUTDOWN");
}

static void
test_close_flush_fails (void)
{
  struct queue_config cfg = held_config ();
  struct test_backend *tb;
  struct disk *d = test_disk ("fails", 64 * KiB, &tb, &cfg);
  struct export *e = d ? disk_export (d) : NULL;
  struct export_handle *h = NULL;
  bool ok = CHECK (e != NULL) && CHECK ((h = export_attach (e)) != NULL);

  ok = ok && CHECK (gated_write (h, 'z', 4 * KiB, 0) == 0);
  if (ok) {
    test_backend_fail (tb, TB_PWRITEV, 1, EIO);
    errno = 0;
    ok = CHECK (export_close (e) == -1 && errno == EIO);
  }
  if (ok) {
    errno = 0;
    ok = CHECK (gated_write (h, 'z', 4 * KiB, 0) == -1 && errno == EIO);
  }
  test_backend_release_all (tb);
  if (h) {
    export_detach (h);
    export_release (e);
  }
  export_release (e);
  disk_release (d);
  tap_ok (ok, "when the close's flush fails, refused requests get EIO, not "
          "ESHUTDOWN: what they wrote may be lost");
}

static void
test_grown_version (void)
{
  struct queue_config cfg = held_config ();
  struct test_backend *tb1, *tb2;
  struct disk *d1 = test_disk ("m1", 64 * KiB, &tb1, &cfg);
  struct disk *d2 = test_disk ("m2", 32 * KiB, &tb2, &cfg);
  struct linear *v1 = linear_new_volume ("vol");
  struct linear *v2 = linear_new_volume ("vol");
  struct disk **both = calloc (2, sizeof *both);
  struct export *e = NULL;
  struct export_handle *old = NULL, *new = NULL;
  bool ok = CHECK (d1 && d2 && v1 && v2 && both);

  ok = ok && CHECK (linear_append_disk (v1, d1->queue, 0, 64 * KiB) == 0)
    && CHECK (linear_finish (v1) == 0)
    && CHECK ((e = export_new ("vol", true, v1, &d1, 1)) != NULL);
  if (ok)
    v1 = NULL;
  ok = ok && CHECK ((old = export_attach (e)) != NULL)
    && CHECK (!export_uses_disk (e, d2));
  /* Grown: the old table whole, then m2. */
  ok = ok && CHECK (linear_append_linear (v2, old->version, 0, 64 * KiB) == 0)
    && CHECK (linear_append_disk (v2, d2->queue, 0, 32 * KiB) == 0)
    && CHECK (linear_finish (v2) == 0);
  if (ok) {
    both[0] = d1;
    both[1] = d2;
    disk_hold (d1);
    disk_hold (d2);
    export_replace_version (e, v2, both, 2);
    v2 = NULL;
    both = NULL;
  }
  ok = ok && CHECK ((new = export_attach (e)) != NULL)
    && CHECK (old->version->size == 64 * KiB)
    && CHECK (new->version->size == 96 * KiB)
    && CHECK (export_uses_disk (e, d2));
  ok = ok && CHECK (gated_write (new, 'g', 4 * KiB, 64 * KiB) == 0)
    && CHECK (test_queue_reads_as (d2->queue, 'g', 4 * KiB, 0));
  if (ok) {
    errno = 0;
    ok = CHECK (gated_write (old, 'g', 4 * KiB, 64 * KiB) == -1
                && errno == ENOSPC);
  }
  if (old) {
    export_detach (old);
    export_release (e);
  }
  if (new) {
    export_detach (new);
    export_release (e);
  }
  export_release (e);
  linear_free (v1);
  linear_free (v2);
  free (both);
  disk_release (d1);
  disk_release (d2);
  tap_ok (ok, "a grown volume: a connection keeps the size it opened with, "
          "a new one sees the new member");
}

static void
test_draining (void)
{
  struct temp_file f;
  struct disk *d = NULL;
  struct export *e = NULL;
  struct registry *r = registry_new ();
  struct export_table *t = export_table_new (), *empty = export_table_new ();
  struct export_handle *h = NULL;
  bool ok = CHECK (r && t && empty) && CHECK (temp_file (&f, 64 * KiB));

  ok = ok && CHECK ((d = file_disk ("drained", &f)) != NULL)
    && CHECK ((e = disk_export (d)) != NULL)
    && CHECK (export_table_add (t, e, NULL, d) == 0)
    && CHECK (registry_commit (r, t, NULL, NULL) == 0);
  t = NULL;
  ok = ok && CHECK ((h = registry_open (r, "drained")) != NULL)
    && CHECK (gated_write (h, 'd', 4 * KiB, 0) == 0);
  /* remove --drain: out of the table, closed, kept for its client. */
  ok = ok && CHECK (registry_commit (r, empty, NULL, NULL) == 0);
  empty = NULL;
  ok = ok && CHECK (export_close (e) == 0)
    && CHECK (file_holds (f.path, 'd', 4 * KiB, 0));
  if (ok) {
    registry_add_draining (r, e);
    export_release (e);         /* the configuration's holds */
    disk_release (d);
    e = NULL;
    d = NULL;
    errno = 0;
    ok = CHECK (registry_open (r, "drained") == NULL && errno == ESHUTDOWN)
      && CHECK (open_count (f.path) > 0);
  }
  if (h)
    registry_close (r, h);
  ok = ok && CHECK (open_count (f.path) == 0);
  if (ok) {
    errno = 0;
    ok = CHECK (registry_open (r, "drained") == NULL && errno == ENOENT);
  }
  export_table_release (t);
  export_table_release (empty);
  registry_free (r);
  export_release (e);
  disk_release (d);
  unlink (f.path);
  tap_ok (ok, "a draining export refuses new connections and goes, with its "
          "disk, when its last client closes");
}

static void
test_set_config (void)
{
  struct queue_config cfg = held_config ();
  struct test_backend *tb;
  struct disk *d = test_disk ("keys", 64 * KiB, &tb, &cfg);
  struct queue_config want;
  bool ok = CHECK (d != NULL);

  if (ok) {
    want = *queue_get_config (d->queue);
    want.unplug_delay_ns = 2 * TEST_MS;
    want.queue_requests = 64;
    want.elevator = &elevator_noop;
    want.ack = ACK_DISPATCHED;
    ok = CHECK (queue_config_unlocked_key (d->queue, &want) != NULL)
      && CHECK (strcmp (queue_config_unlocked_key (d->queue, &want), "ack")
                == 0);
    errno = 0;
    ok = ok && CHECK (queue_set_config (d->queue, &want, false) == -1
                      && errno == EBUSY)
      && CHECK (queue_get_config (d->queue)->unplug_delay_ns == TEST_HOUR)
      && CHECK (queue_get_config (d->queue)->ack == ACK_QUEUED);
    want.ack = ACK_QUEUED;
    ok = ok && CHECK (queue_set_config (d->queue, &want, false) == 0)
      && CHECK (queue_get_config (d->queue)->unplug_delay_ns == 2 * TEST_MS)
      && CHECK (queue_get_config (d->queue)->queue_requests == 64)
      && CHECK (queue_get_config (d->queue)->elevator == &elevator_noop);
  }
  /* The shorter delay holds from the next plug: the timer, attached while
   * the loop ran, writes the queue out.
   */
  ok = ok && CHECK (test_write_fill (d->queue, NULL, 'k', 4 * KiB, 0, 0)
                    == 0)
    && CHECK (test_backend_wait_count (tb, TB_PWRITEV, 1))
    && CHECK (test_stats (d->queue).unplugs[UNPLUG_TIMER] == 1);
  if (ok) {
    want.ack = ACK_DISPATCHED;
    want.max_merge = 64 * KiB;
    ok = CHECK (queue_set_config (d->queue, &want, true) == 0)
      && CHECK (queue_get_config (d->queue)->ack == ACK_DISPATCHED)
      && CHECK (queue_get_config (d->queue)->max_merge == 64 * KiB);
  }
  if (ok) {
    want.read_target_ns = 5 * TEST_MS;
    ok = CHECK (queue_config_unlocked_key (d->queue, &want)
                && strcmp (queue_config_unlocked_key (d->queue, &want),
                           "read-target") == 0)
      && CHECK (queue_set_config (d->queue, &want, true) == 0)
      && CHECK (queue_get_config (d->queue)->read_target_ns == 5 * TEST_MS);
  }
  disk_release (d);
  tap_ok (ok, "set: keys read under the queue's lock change with clients, "
          "those read without it only with none; a new unplug-delay holds "
          "from the next plug");
}

struct reader {
  struct queue *q;
  _Atomic bool stop;
  _Atomic unsigned reads;
};

static int
reader_run (void *arg)
{
  struct reader *r = arg;
  char buf[4096];

  while (!atomic_load (&r->stop)) {
    if (queue_pread (r->q, buf, sizeof buf, 0) == -1)
      return -1;
    atomic_fetch_add (&r->reads, 1);
  }
  return 0;
}

/* Reads count themselves in the elevator's read feedback without the
 * queue's lock: a new elevator must leave that state where it is.  (A
 * swap that copied the elevator's state out and back lost the counts
 * of reads made meanwhile, and ThreadSanitizer saw the race.)
 */
static void
test_elevator_under_reads (void)
{
  struct queue_config cfg = held_config ();
  struct test_backend *tb;
  struct disk *d = test_disk ("swap", 64 * KiB, &tb, &cfg);
  struct reader r = { .q = d ? d->queue : NULL };
  struct test_thread t = TEST_THREAD_INIT;
  struct queue_config want;
  bool ok = CHECK (d != NULL)
    && CHECK (test_thread_start (&t, reader_run, &r) == 0);

  unsigned swaps = 0, before = 0;

  ok = ok && CHECK (TEST_WAIT_FOR (atomic_load (&r.reads) > 0));
  before = atomic_load (&r.reads);
  /* Swaps until the reads made meanwhile number a few hundred. */
  while (ok && (swaps < 200 || atomic_load (&r.reads) - before < 200)
         && swaps < 1000000) {
    want = *queue_get_config (d->queue);
    want.elevator = swaps++ % 2 ? &elevator_deadline : &elevator_noop;
    ok = CHECK (queue_set_config (d->queue, &want, false) == 0);
  }
  atomic_store (&r.stop, true);
  ok = CHECK (test_thread_wait (&t) && t.result == 0) && ok
    && CHECK (atomic_load (&r.reads) - before >= 200)
    && CHECK (atomic_load (&d->queue->elevator.reads.active) == 0);
  printf ("# %u reads during %u elevator swaps\n",
          atomic_load (&r.reads) - before, swaps);
  test_thread_join (&t);
  disk_release (d);
  tap_ok (ok, "an elevator swapped under reads leaves the read feedback "
          "they count into where it is");
}

/* A retired disk's timer is taken off the loop: its pending ev_timer
 * must not fire into the freed queue (ASan and TSan builds would say so),
 * and the loop keeps serving the other disks.
 */
static void
test_timer_detached (void)
{
  struct queue_config quick = test_config (20 * TEST_MS, 100000);
  struct test_backend *tb1, *tb2;
  struct disk *gone, *stays;
  bool ok;

  quick.bypass = false;
  gone = test_disk ("gone", 64 * KiB, &tb1, &quick);
  stays = test_disk ("stays", 64 * KiB, &tb2, &quick);
  ok = CHECK (gone && stays);
  ok = ok && CHECK (test_write_fill (gone->queue, NULL, 'o', 4 * KiB, 0, 0)
                    == 0);
  disk_release (gone);          /* its timer armed for 20 ms */
  test_sleep_us (60 * 1000);
  ok = ok && CHECK (test_write_fill (stays->queue, NULL, 's', 4 * KiB, 0, 0)
                    == 0)
    && CHECK (test_backend_wait_count (tb2, TB_PWRITEV, 1))
    && CHECK (test_stats (stays->queue).unplugs[UNPLUG_TIMER] == 1);
  disk_release (stays);
  tap_ok (ok, "a retired disk's armed timer is detached: the loop serves "
          "the other disks' timers on");
}

static void
test_session_slots (void)
{
  unsigned a = session_register_queue ();
  unsigned b = session_register_queue ();
  unsigned c;
  bool ok;

  session_release_queue (a);
  c = session_register_queue ();
  ok = CHECK (a != b) && CHECK (c == a);
  session_release_queue (b);
  session_release_queue (c);
  tap_ok (ok, "a retired queue's session slot goes to the next queue");
}

int
main (void)
{
  void (*const cases[]) (void) = {
    test_last_holder_retires,
    test_table_swap,
    test_gate,
    test_close_flush_fails,
    test_grown_version,
    test_draining,
    test_set_config,
    test_elevator_under_reads,
    test_timer_detached,
    test_session_slots,
  };
  size_t n = sizeof cases / sizeof cases[0];

  tap_plan ((int) n);
  timers = timer_service_new ();
  if (timers == NULL || timer_service_start (timers) == -1) {
    printf ("Bail out! no timer service\n");
    return EXIT_FAILURE;
  }
  for (size_t i = 0; i < n; i++)
    cases[i] ();
  timer_service_free (timers);
  return tap_done ();
}
