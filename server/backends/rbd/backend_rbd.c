/* plugq: a disk whose storage is a Ceph RBD image, through librbd.
 *
 * Writes, zeroes and trims go through librbd's asynchronous API: the
 * queue's dispatcher submits each merged batch as one request
 * (rbd_aio_writev, rbd_aio_write_zeroes, rbd_aio_discard) without
 * waiting, up to RBD_MAX_IN_FLIGHT at once, and librbd calls io->done
 * from its own completion thread.  Reads, flushes and extents come from
 * request threads and wait for librbd (its synchronous calls).
 *
 * FUA: with librbd's caches off for the image (plugq turns its cache
 * off; image or pool settings may turn it on again, and the persistent
 * write-back cache with it), librbd completes a write only once it is
 * on disk on every replica, so a FUA operation is its write
 * (writes_durable, checked at start).  Otherwise, as librbd has no
 * per-write FUA, it is the operation and then rbd_aio_flush, submitted
 * from the first one's completion: both asynchronous, so the queue's
 * dispatcher never waits for them.  A flush after each FUA write
 * waited for every write submitted before it: FUA on every 4 KiB
 * random write ran at half the rate of plain writes.
 *
 * Zeroes: with holes allowed, rbd_aio_write_zeroes (which frees whole
 * objects and truncates partial ones without sending data); without,
 * thick-provisioned zeroes, so the range stays allocated.  Trims are
 * rbd_aio_discard; they may leave partial objects untouched
 * (rbd_skip_partial_discard), so a trim does not promise zeroes.
 *
 * Waiting: with ceph-timeout=0 (the default) no request has a timeout,
 * so an outage the cluster recovers from (an OSD hung until it is marked
 * down, a pool below min_size until its OSDs return) holds requests and
 * fails none, as with krbd and qemu's rbd driver; librados resends them
 * on every new OSD map.  The queue bounds what waits (queue-bytes, the
 * writers block), the stats show the age of the oldest operation, and
 * the watch thread (backend_rbd_watch.c) says in the log what the disk
 * waits for.  It counts every answer from librbd and the requests in
 * flight here.
 *
 * Lifetime: open connects, checks the image and reads its size and
 * object size, then disconnects, because librados's threads would not
 * survive nbdkit's fork; start (after the fork) connects again, keeps
 * the image open and starts the watch; draining (the queue's final
 * drain) tells the watch that nbdkit waits for the cluster to exit;
 * close (after the queue has drained) stops the watch, closes the image,
 * which releases its exclusive lock for the next opener, then the
 * connection.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "backend_rbd.h"
#include "common/extents.h"
#include "common/log.h"
#include "common/minmax.h"
#include "common/size_format.h"

static struct rbd_backend *
to_rbd (struct backend *b)
{
  return (struct rbd_backend *) b;
}

/* librbd's negative errno as a call's -1 and errno. */
static int
librbd_result (ssize_t r)
{
  if (r < 0) {
    errno = backend_client_errno ((int) -r);
    return -1;
  }
  return 0;
}

/* Whether the image is open; before start or after close, false with
 * errno EIO.
 */
static bool
started (struct rbd_backend *rb)
{
  if (!rb->started) {
    errno = EIO;
    return false;
  }
  return true;
}

/* A synchronous librbd call from a request thread begins and ends: the
 * watch counts it in flight, then as an answer, whatever its result.
 */
static void
call_begin (struct rbd_backend *rb)
{
  atomic_fetch_add_explicit (&rb->calls_in_flight, 1, memory_order_relaxed);
}

static void
call_end (struct rbd_backend *rb)
{
  atomic_fetch_add_explicit (&rb->answered, 1, memory_order_relaxed);
  atomic_fetch_sub_explicit (&rb->calls_in_flight, 1, memory_order_relaxed);
}

/* ------------------------------------------------------------ ops */

static int
rbd_backend_pread (struct backend *b, void *buf, size_t count, uint64_t offset)
{
  struct rbd_backend *rb = to_rbd (b);
  ssize_t r;

  if (!backend_range_ok (b, count, offset) || !started (rb))
    return -1;
  call_begin (rb);
  r = rbd_read2 (rb->conn.image, offset, count, buf, 0);
  call_end (rb);
  if (r >= 0 && (size_t) r != count) {
    errno = EIO;                /* the range is inside the image */
    return -1;
  }
  return librbd_result (r);
}

static int
rbd_backend_flush (struct backend *b)
{
  struct rbd_backend *rb = to_rbd (b);
  int r;

  if (!started (rb))
    return -1;
  call_begin (rb);
  r = rbd_flush (rb->conn.image);
  call_end (rb);
  return librbd_result (r);
}

/* One submitted operation, from rbd_backend_io to its completion. */
struct rbd_aio {
  struct rbd_backend *rb;
  struct backend_io *io;
  bool flushing;                /* a FUA operation's flush is running */
};

static void aio_complete (rbd_completion_t c, void *arg);

/* librbd's completion thread: a FUA operation just written starts its
 * flush.  0, or librbd's negative errno when the flush was refused.
 */
static int
flush_after (struct rbd_aio *a)
{
  rbd_completion_t c;
  int r;

  a->flushing = true;
  if ((r = rbd_aio_create_completion (a, aio_complete, &c)) < 0)
    return r;
  if ((r = rbd_aio_flush (a->rb->conn.image, c)) < 0)
    rbd_aio_release (c);
  return r;
}

/* librbd's completion thread: the answer, then the queue is told. */
static void
aio_complete (rbd_completion_t c, void *arg)
{
  struct rbd_aio *a = arg;
  struct backend_io *io = a->io;
  ssize_t r = rbd_aio_get_return_value (c);

  rbd_aio_release (c);
  atomic_fetch_add_explicit (&a->rb->answered, 1, memory_order_relaxed);
  if (r >= 0 && io->fua && !a->rb->writes_durable && !a->flushing
      && (r = flush_after (a)) == 0)
    return;                     /* answered when the flush completes */
  /* Pairs with the submitter's increment: what it wrote before
   * submitting is seen here, whatever librbd synchronises internally.
   */
  atomic_fetch_sub_explicit (&a->rb->in_flight, 1, memory_order_acq_rel);
  free (a);
  io->done (io, r < 0 ? backend_client_errno ((int) -r) : 0);
}

/* Submits io as one librbd request completed by c: 0, or librbd's
 * negative errno when it refused the request before taking it.
 */
static int
submit (struct rbd_backend *rb, const struct backend_io *io,
        rbd_completion_t c)
{
  rbd_image_t image = rb->conn.image;

  switch (io->kind) {
  case OP_WRITE:
    return rbd_aio_writev (image, io->iov, io->iovcnt, io->offset, c);
  case OP_ZERO:
    return rbd_aio_write_zeroes (image, io->offset, io->count, c,
                                 io->may_trim ? 0
                                 : RBD_WRITE_ZEROES_FLAG_THICK_PROVISION, 0);
  case OP_TRIM:
    return rbd_aio_discard (image, io->offset, io->count, c);
  default:
    return -EINVAL;
  }
}

static int
rbd_backend_io (struct backend *b, struct backend_io *io)
{
  struct rbd_backend *rb = to_rbd (b);
  struct rbd_aio *a;
  rbd_completion_t c;
  int r;

  if (!backend_range_ok (b, io->count, io->offset) || !started (rb))
    return -1;
  if ((a = malloc (sizeof *a)) == NULL)
    return -1;
  *a = (struct rbd_aio) { .rb = rb, .io = io };
  if ((r = rbd_aio_create_completion (a, aio_complete, &c)) < 0) {
    free (a);
    return librbd_result (r);
  }
  atomic_fetch_add_explicit (&rb->in_flight, 1, memory_order_release);
  if ((r = submit (rb, io, c)) < 0) {
    /* Refused before librbd took it: the completion never runs. */
    atomic_fetch_sub (&rb->in_flight, 1);
    rbd_aio_release (c);
    free (a);
    return librbd_result (r);
  }
  return BACKEND_IO_STARTED;
}

/* ------------------------------------------------------------ extents */

/* The allocation map being built for [cursor, end): rbd_diff_iterate2
 * reports the allocated ranges, and what lies between them is a hole.
 */
struct extents_walk {
  struct extent_list *list;
  uint64_t cursor;              /* the list covers [start, cursor) */
  uint64_t end;
};

/* Appends a hole up to offset, then data over [offset, offset+length). */
static int
walk_data (uint64_t offset, size_t length, int exists, void *arg)
{
  struct extents_walk *w = arg;
  uint64_t end = MIN (offset + length, w->end);

  if (!exists || end <= w->cursor)
    return 0;
  if (offset > w->cursor) {
    if (extent_list_append (w->list, w->cursor, offset - w->cursor,
                            EXTENT_HOLE | EXTENT_ZERO) == -1)
      return -ENOMEM;
    w->cursor = offset;
  }
  if (extent_list_append (w->list, w->cursor, end - w->cursor, 0) == -1)
    return -ENOMEM;
  w->cursor = end;
  return 0;
}

static int
rbd_backend_extents (struct backend *b, uint64_t count, uint64_t offset,
             struct extent_list *list)
{
  struct rbd_backend *rb = to_rbd (b);
  struct extents_walk w = {
    .list = list, .cursor = offset, .end = offset + count,
  };
  int r;

  if (!backend_range_ok (b, count, offset) || !started (rb))
    return -1;
  /* Without whole_object librbd asks RADOS about every object in the
   * range, so one call looks at a bounded number of them; the caller
   * asks again for the rest.
   */
  count = MIN (count, RBD_EXTENTS_OBJECTS * rb->object_size);
  w.end = offset + count;
  /* Reported in ascending order; a range seen twice is skipped. */
  call_begin (rb);
  r = rbd_diff_iterate2 (rb->conn.image, NULL, offset, count, 1, 0,
                         walk_data, &w);
  call_end (rb);
  if (r < 0)
    return librbd_result (r);
  if (w.cursor < w.end)
    return extent_list_append (list, w.cursor, w.end - w.cursor,
                               EXTENT_HOLE | EXTENT_ZERO);
  return 0;
}

/* ------------------------------------------------------------ lifetime */

static int
rbd_backend_start (struct backend *b)
{
  struct rbd_backend *rb = to_rbd (b);
  uint64_t size;

  if (rb->started)
    return 0;
  if (rbd_conn_open (&rb->conn, &rb->t) == -1)
    return -1;
  /* The image was checked before the fork; it may have changed since. */
  if (rbd_get_size (rb->conn.image, &size) < 0 || size != b->size) {
    log_error ("rbd=%s: the image's size changed since plugq opened it",
               rb->t.spec);
    rbd_conn_close (&rb->conn);
    errno = EIO;
    return -1;
  }
  rb->writes_durable = rbd_conn_writes_durable (&rb->conn);
  if (rbd_watch_start (rb) == -1) {
    int err = errno;

    rbd_conn_close (&rb->conn);
    errno = err;
    return -1;
  }
  rb->started = true;
  return 0;
}

/* The queue's final drain begins: the watch says so if it waits. */
static void
rbd_backend_draining (struct backend *b)
{
  atomic_store (&to_rbd (b)->draining, true);
}

static void
rbd_backend_close (struct backend *b)
{
  struct rbd_backend *rb = to_rbd (b);

  rbd_watch_stop (rb);
  /* The queue has drained: nothing can still be in flight. */
  if (atomic_load (&rb->in_flight) != 0)
    log_error ("rbd=%s: closed with %u operations in flight", rb->t.spec,
               atomic_load (&rb->in_flight));
  rbd_conn_close (&rb->conn);
  rb->started = false;
  rbd_target_free (&rb->t);
  free (b->description);
  free (rb);
}

static const struct backend_ops rbd_ops = {
  .kind = "rbd",
  .pread = rbd_backend_pread,
  .io = rbd_backend_io,
  .flush = rbd_backend_flush,
  .extents = rbd_backend_extents,
  .cache = NULL,
  .close = rbd_backend_close,
  .start = rbd_backend_start,
  .draining = rbd_backend_draining,
};

/* ------------------------------------------------------------ open */

/* The size and the object size, from an image opened to check it. */
static int
read_image (struct rbd_backend *rb)
{
  rbd_image_info_t info;
  int r;

  if (rbd_conn_open (&rb->conn, &rb->t) == -1)
    return -1;
  r = rbd_stat (rb->conn.image, &info, sizeof info);
  rbd_conn_close (&rb->conn);
  if (r < 0) {
    log_error ("rbd=%s: cannot read the image's size: %s", rb->t.spec,
               strerror (-r));
    errno = -r;
    return -1;
  }
  rb->b.size = info.size;
  rb->object_size = info.obj_size;
  return 0;
}

static void
set_limits (struct rbd_backend *rb)
{
  struct backend *b = &rb->b;

  /* RADOS objects are byte-addressed: any offset and length will do. */
  b->limits.minimum = 1;
  b->limits.preferred = 4096;
  b->limits.maximum = RBD_MAX_REQUEST;
  b->max_write = RBD_MAX_REQUEST;
  b->max_iov = 1024;
  b->max_in_flight = RBD_MAX_IN_FLIGHT;
  b->read_target_floor_ns = RBD_READ_TARGET_FLOOR_NS;
  b->can_fast_zero = true;
  b->can_fua = true;             /* the write, or a flush after it */
  b->trim_reads_zero = false;
}

struct backend *
backend_rbd_open (const struct rbd_target *t)
{
  struct rbd_backend *rb = calloc (1, sizeof *rb);
  char objects[32];

  if (rb == NULL || rbd_target_copy (&rb->t, t) == -1) {
    log_error ("rbd=%s: %s", t->spec, strerror (ENOMEM));
    if (rb)
      rbd_target_free (&rb->t);
    free (rb);
    errno = ENOMEM;
    return NULL;
  }
  rb->b.ops = &rbd_ops;
  atomic_init (&rb->in_flight, 0);
  atomic_init (&rb->calls_in_flight, 0);
  atomic_init (&rb->answered, 0);
  atomic_init (&rb->draining, false);
  if (read_image (rb) == -1) {
    int err = errno;

    rbd_backend_close (&rb->b);
    errno = err;
    return NULL;
  }
  set_limits (rb);
  format_size (objects, sizeof objects, rb->object_size);
  if (asprintf (&rb->b.description, "rbd %s (%s objects)", t->spec,
                objects) == -1) {
    rb->b.description = NULL;
    rbd_backend_close (&rb->b);
    errno = ENOMEM;
    return NULL;
  }
  return &rb->b;
}
