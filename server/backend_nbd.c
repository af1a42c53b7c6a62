/* plugq: a disk whose storage is an NBD export on another server.
 *
 * Everything goes through libnbd's asynchronous API.  Each remote disk
 * has its own libev loop in its own thread that watches the connection's
 * socket and feeds libnbd (nbd_aio_notify_read/write); any thread may
 * issue commands, then wakes the loop so it watches for the right
 * direction.  The queue's dispatcher submits merged writes, zeroes and
 * trims without waiting (several in flight); reads, flushes and extents
 * are issued the same way and waited for.
 *
 * A lost connection fails every command that needed it (libnbd completes
 * them with an error, which the queue latches for answered writes).  With
 * reconnect= the loop thread dials again with exponential backoff and
 * swaps the new connection in once it offers everything the first one
 * did; until then commands fail at once.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ev.h>
#include <libnbd.h>

#include "backend.h"
#include "backend_type.h"
#include "config_value.h"
#include "engine_thread.h"
#include "lock.h"
#include "log.h"
#include "minmax.h"

#define NBD_DEFAULT_PAYLOAD (32 * 1024 * 1024) /* the spec's default max */
#define MAX_IN_FLIGHT 16
#define ZERO_CHUNK (1024 * 1024 * 1024)        /* under NBD's 32-bit count */
#define MAX_BACKOFF_NS (UINT64_C (30) * 1000000000)

/* What the remote offered when the disk was opened.  It was advertised to
 * nbdkit's clients and built into the queue's limits, and neither can be
 * taken back, so a reconnected remote must offer all of it again
 * (capabilities_still_met).  One that offers more is used as the first
 * one was: nothing is widened.
 */
struct remote_caps {
  int64_t size;
  uint32_t minimum;             /* block size */
  uint32_t preferred;
  uint32_t max_payload;         /* at most NBD_DEFAULT_PAYLOAD */
  bool read_only;
  bool can_flush, can_trim, can_zero, can_fast_zero, can_cache, can_extents;
  bool can_fua;
};

struct nbd_backend {
  struct backend b;
  char *uri;
  struct remote_caps caps;      /* read once, at open */
  uint64_t reconnect_ns;
  uint64_t backoff_ns;

  /* Guards h and connected: commands are issued under it, so the loop
   * thread can swap a reconnected handle in safely.
   */
  struct lock lock;
  struct nbd_handle *h;
  bool connected;
  bool lost;                    /* loop thread: loss handled, redialling */
  const char *refused;          /* loop thread: why, logged once per loss */

  struct ev_loop *loop;
  ev_io io;
  ev_async wake;
  ev_async stop;
  ev_timer retry;
  pthread_t thread;
  bool started;
  void *zeroes;                 /* max_payload zero bytes, to emulate zero */
};

static struct nbd_backend *
to_nbd (struct backend *b)
{
  return (struct nbd_backend *) b;
}

/* ------------------------------------------------------------ commands */

/* One engine operation, possibly sent as several NBD commands. */
struct nbd_op {
  struct nbd_backend *nb;
  _Atomic unsigned pending;
  _Atomic int err;
  void *bounce;                 /* gathered write data */
  struct backend_io *io;        /* asynchronous: tell the queue */
  uint32_t cmd_flags;           /* LIBNBD_CMD_FLAG_FUA for a FUA io */
  struct lock lock;             /* synchronous: the waiter sleeps here */
  pthread_cond_t cond;
  bool done;
  struct extent_list *extents;  /* block status */
  uint64_t extents_offset;
};

static struct nbd_op *
op_new (struct nbd_backend *nb)
{
  struct nbd_op *op = calloc (1, sizeof *op);

  if (op == NULL)
    return NULL;
  op->nb = nb;
  atomic_init (&op->pending, 1);  /* the submitter's own reference */
  lock_init (&op->lock);
  pthread_cond_init (&op->cond, NULL);
  return op;
}

static void
op_free (struct nbd_op *op)
{
  lock_destroy (&op->lock);
  pthread_cond_destroy (&op->cond);
  free (op->bounce);
  free (op);
}

static void
op_finish (struct nbd_op *op)
{
  if (op->io) {
    struct backend_io *io = op->io;
    int err = atomic_load (&op->err);

    op_free (op);
    io->done (io, err);
    return;
  }
  lock_acquire (&op->lock);
  op->done = true;
  pthread_cond_signal (&op->cond);
  lock_release (&op->lock);
}

static void
op_put (struct nbd_op *op)
{
  if (atomic_fetch_sub (&op->pending, 1) == 1)
    op_finish (op);
}

/* The remote's errors as the engine passes them on.  A lost connection
 * (ENOTCONN, ESHUTDOWN) becomes EIO: nbdkit takes ESHUTDOWN from a
 * plugin to mean that nbdkit itself is shutting down, and closes the
 * client's connection.
 */
static int
client_errno (int err)
{
  switch (err) {
  case EPERM: case EIO: case ENOMEM: case EINVAL: case ENOSPC:
  case EOVERFLOW: case ENOTSUP: case EROFS: case EFBIG:
    return err;
  default:
    return EIO;
  }
}

static void
op_fail (struct nbd_op *op, int err)
{
  int zero = 0;

  atomic_compare_exchange_strong (&op->err, &zero, client_errno (err));
}

/* libnbd calls this from the loop thread (or at once on an error). */
static int
command_done (void *user_data, int *error)
{
  struct nbd_op *op = user_data;

  if (*error)
    op_fail (op, *error);
  op_put (op);
  return 1;
}

static void
wake_loop (struct nbd_backend *nb)
{
  if (nb->started)
    ev_async_send (nb->loop, &nb->wake);
}

typedef int64_t (*issue_fn) (struct nbd_handle *, struct nbd_op *,
                             const void *arg, uint64_t count,
                             uint64_t offset);

/* Sends [offset, offset+count) as commands of at most `chunk` bytes.
 * Each command holds a reference on op.
 */
static int
issue_chunks (struct nbd_backend *nb, struct nbd_op *op, issue_fn fn,
              const char *arg, bool arg_advances, uint64_t count,
              uint64_t offset, uint64_t chunk)
{
  int r = 0;

  lock_acquire (&nb->lock);
  if (!nb->connected) {
    lock_release (&nb->lock);
    wake_loop (nb);
    errno = ENOTCONN;
    return -1;
  }
  while (count > 0) {
    uint64_t n = MIN (count, chunk);

    atomic_fetch_add (&op->pending, 1);
    if (fn (nb->h, op, arg, n, offset) == -1) {
      int err = nbd_get_errno ();

      atomic_fetch_sub (&op->pending, 1);
      /* A command can be the first to find the connection gone; libnbd
       * then refuses every later one with EINVAL.  It is a lost remote.
       */
      if (nbd_aio_is_dead (nb->h) || nbd_aio_is_closed (nb->h)) {
        nb->connected = false;
        err = EIO;
      }
      else
        log_error ("%s: %s", nb->uri, nbd_get_error ());
      errno = err ? err : EIO;
      r = -1;
      break;
    }
    if (arg && arg_advances)
      arg += n;
    offset += n;
    count -= n;
  }
  lock_release (&nb->lock);
  wake_loop (nb);
  return r;
}

static nbd_completion_callback
completion (struct nbd_op *op)
{
  return (nbd_completion_callback) { .callback = command_done,
                                     .user_data = op };
}

static int64_t
issue_pread (struct nbd_handle *h, struct nbd_op *op, const void *buf,
             uint64_t count, uint64_t offset)
{
  return nbd_aio_pread (h, (void *) buf, count, offset, completion (op), 0);
}

static int64_t
issue_pwrite (struct nbd_handle *h, struct nbd_op *op, const void *buf,
              uint64_t count, uint64_t offset)
{
  return nbd_aio_pwrite (h, buf, count, offset, completion (op),
                         op->cmd_flags);
}

static int64_t
issue_zero_no_hole (struct nbd_handle *h, struct nbd_op *op,
                    const void *unused, uint64_t count, uint64_t offset)
{
  return nbd_aio_zero (h, count, offset, completion (op),
                       LIBNBD_CMD_FLAG_NO_HOLE | op->cmd_flags);
}

static int64_t
issue_zero_may_trim (struct nbd_handle *h, struct nbd_op *op,
                     const void *unused, uint64_t count, uint64_t offset)
{
  return nbd_aio_zero (h, count, offset, completion (op), op->cmd_flags);
}

static int64_t
issue_trim (struct nbd_handle *h, struct nbd_op *op, const void *unused,
            uint64_t count, uint64_t offset)
{
  return nbd_aio_trim (h, count, offset, completion (op), op->cmd_flags);
}

static int64_t
issue_cache (struct nbd_handle *h, struct nbd_op *op, const void *unused,
             uint64_t count, uint64_t offset)
{
  return nbd_aio_cache (h, count, offset, completion (op), 0);
}

static int64_t
issue_flush (struct nbd_handle *h, struct nbd_op *op, const void *unused,
             uint64_t count, uint64_t offset)
{
  return nbd_aio_flush (h, completion (op), 0);
}

/* The remote's allocation map, moved into an extent_list as it comes. */
static int
extent_cb (void *user_data, const char *context, uint64_t offset,
           uint32_t *entries, size_t nr_entries, int *error)
{
  struct nbd_op *op = user_data;
  uint64_t pos = op->extents_offset;

  if (strcmp (context, LIBNBD_CONTEXT_BASE_ALLOCATION) != 0)
    return 0;
  for (size_t i = 0; i + 1 < nr_entries; i += 2) {
    uint32_t type = entries[i + 1] & (EXTENT_HOLE | EXTENT_ZERO);

    if (extent_list_append (op->extents, pos, entries[i], type) == -1) {
      *error = ENOMEM;
      return -1;
    }
    pos += entries[i];
  }
  op->extents_offset = pos;
  return 0;
}

static int64_t
issue_block_status (struct nbd_handle *h, struct nbd_op *op,
                    const void *unused, uint64_t count, uint64_t offset)
{
  nbd_extent_callback cb = { .callback = extent_cb, .user_data = op };

  return nbd_aio_block_status (h, count, offset, cb, completion (op), 0);
}

/* Drops the submitter's reference and waits for the commands. */
static int
op_wait (struct nbd_op *op, int issue_result)
{
  int err;

  if (issue_result == -1)
    op_fail (op, errno);
  op_put (op);
  lock_acquire (&op->lock);
  while (!op->done)
    lock_wait (&op->cond, &op->lock);
  lock_release (&op->lock);
  err = atomic_load (&op->err);
  op_free (op);
  if (err) {
    errno = err;
    return -1;
  }
  return 0;
}

static int
run_sync (struct nbd_backend *nb, issue_fn fn, void *buf, uint64_t count,
          uint64_t offset, uint64_t chunk)
{
  struct nbd_op *op = op_new (nb);

  if (op == NULL)
    return -1;
  return op_wait (op, issue_chunks (nb, op, fn, buf, true, count, offset,
                                    chunk));
}

/* ------------------------------------------------------------ ops */

static int
remote_pread (struct backend *b, void *buf, size_t count, uint64_t offset)
{
  struct nbd_backend *nb = to_nbd (b);

  return run_sync (nb, issue_pread, buf, count, offset, nb->caps.max_payload);
}

static int
remote_flush (struct backend *b)
{
  struct nbd_backend *nb = to_nbd (b);

  /* A server that cannot flush writes through (the spec's reading). */
  if (!nb->caps.can_flush)
    return 0;
  return run_sync (nb, issue_flush, NULL, 1, 0, 1);
}

static int
remote_cache (struct backend *b, uint64_t count, uint64_t offset)
{
  struct nbd_backend *nb = to_nbd (b);

  if (!nb->caps.can_cache)
    return 0;
  return run_sync (nb, issue_cache, NULL, count, offset, ZERO_CHUNK);
}

static int
remote_extents (struct backend *b, uint64_t count, uint64_t offset,
             struct extent_list *list)
{
  struct nbd_backend *nb = to_nbd (b);
  struct nbd_op *op;

  if (!nb->caps.can_extents)
    return extent_list_append (list, offset, count, 0);
  if ((op = op_new (nb)) == NULL)
    return -1;
  op->extents = list;
  op->extents_offset = offset;
  /* One command: the answer may be shorter, which callers accept. */
  if (count > ZERO_CHUNK)
    count = ZERO_CHUNK;
  return op_wait (op, issue_chunks (nb, op, issue_block_status, NULL, false,
                                    count, offset, count));
}

/* Gathers a merged write into one buffer: NBD has no vectored write. */
static const void *
gather (struct nbd_op *op, const struct iovec *iov, int iovcnt,
        uint64_t count)
{
  char *p;

  if (iovcnt == 1)
    return iov[0].iov_base;
  if ((op->bounce = malloc (count)) == NULL)
    return NULL;
  p = op->bounce;
  for (int i = 0; i < iovcnt; i++) {
    memcpy (p, iov[i].iov_base, iov[i].iov_len);
    p += iov[i].iov_len;
  }
  return op->bounce;
}

/* Zeroes on a server without WRITE_ZEROES: writes of a zero buffer. */
static int
issue_zero_writes (struct nbd_backend *nb, struct nbd_op *op, uint64_t count,
                   uint64_t offset)
{
  /* The same zero buffer for every chunk: it does not advance. */
  return issue_chunks (nb, op, issue_pwrite, nb->zeroes, false, count, offset,
                       nb->caps.max_payload);
}

static int
issue_io (struct nbd_backend *nb, struct nbd_op *op,
          const struct backend_io *io)
{
  const void *data;

  switch (io->kind) {
  case OP_WRITE:
    data = gather (op, io->iov, io->iovcnt, io->count);
    if (data == NULL)
      return -1;
    return issue_chunks (nb, op, issue_pwrite, data, true, io->count,
                         io->offset, nb->caps.max_payload);
  case OP_ZERO:
    if (!nb->caps.can_zero)
      return issue_zero_writes (nb, op, io->count, io->offset);
    return issue_chunks (nb, op, io->may_trim ? issue_zero_may_trim
                         : issue_zero_no_hole, NULL, false, io->count,
                         io->offset, ZERO_CHUNK);
  case OP_TRIM:
    if (!nb->caps.can_trim)
      return 0;                 /* advisory */
    return issue_chunks (nb, op, issue_trim, NULL, false, io->count,
                         io->offset, ZERO_CHUNK);
  default:
    errno = EINVAL;
    return -1;
  }
}

/* The one entry for writes, zeroes and trims: sent at once, answered
 * through io->done from the loop thread.
 */
static int
remote_io (struct backend *b, struct backend_io *io)
{
  struct nbd_backend *nb = to_nbd (b);
  struct nbd_op *op;

  if (io->fua && !nb->caps.can_fua) {
    errno = EINVAL;
    return -1;
  }
  if ((op = op_new (nb)) == NULL)
    return -1;
  op->io = io;
  op->cmd_flags = io->fua ? LIBNBD_CMD_FLAG_FUA : 0;
  if (issue_io (nb, op, io) == -1)
    op_fail (op, errno);
  /* Commands already sent complete later and report the failure. */
  op_put (op);
  return BACKEND_IO_STARTED;
}

/* ------------------------------------------------------------ capabilities */

static uint32_t
block_size_or (struct nbd_handle *h, int which, uint32_t fallback)
{
  int64_t v = nbd_get_block_size (h, which);

  return v > 0 && v <= UINT32_MAX ? (uint32_t) v : fallback;
}

/* Read the same way at open and on every reconnect, so that the two
 * compare like for like.  -1 if the size cannot be had (a handle that is
 * not connected), with libnbd's error left for the caller.
 */
static int
read_capabilities (struct nbd_handle *h, struct remote_caps *c)
{
  uint32_t max;

  if ((c->size = nbd_get_size (h)) < 0)
    return -1;
  max = block_size_or (h, LIBNBD_SIZE_MAXIMUM, NBD_DEFAULT_PAYLOAD);
  c->minimum = block_size_or (h, LIBNBD_SIZE_MINIMUM, 1);
  c->preferred = block_size_or (h, LIBNBD_SIZE_PREFERRED, 4096);
  if (c->preferred < c->minimum)
    c->preferred = c->minimum;
  c->max_payload = MIN (max, (uint32_t) NBD_DEFAULT_PAYLOAD);
  c->read_only = nbd_is_read_only (h) == 1;
  c->can_flush = nbd_can_flush (h) == 1;
  c->can_trim = nbd_can_trim (h) == 1;
  c->can_zero = nbd_can_zero (h) == 1;
  c->can_fast_zero = nbd_can_fast_zero (h) == 1;
  c->can_cache = nbd_can_cache (h) == 1;
  c->can_fua = nbd_can_fua (h) == 1;
  c->can_extents =
    nbd_can_meta_context (h, LIBNBD_CONTEXT_BASE_ALLOCATION) == 1;
  return 0;
}

/* Whether a reconnected remote (h) still offers everything this disk was
 * opened with: NULL if it does, else what it lost, for the log.  Each
 * loss would have plugq send commands or sizes the remote refuses (or,
 * for FAST_ZERO, break a promise made to clients).  The preferred block
 * size is only a hint, so it may change.
 */
static const char *
capabilities_still_met (const struct nbd_backend *nb, struct nbd_handle *h)
{
  const struct remote_caps *was = &nb->caps;
  struct remote_caps now;

  if (read_capabilities (h, &now) == -1 || now.size != was->size)
    return "with a different size";
  if (now.read_only && !was->read_only)
    return "read-only";
  if (was->can_zero && !now.can_zero)
    return "without WRITE_ZEROES";
  if (was->can_fast_zero && !now.can_fast_zero)
    return "without FAST_ZERO";
  if (was->can_flush && !now.can_flush)
    return "without FLUSH";
  if (was->can_trim && !now.can_trim)
    return "without TRIM";
  if (was->can_cache && !now.can_cache)
    return "without CACHE";
  if (was->can_fua && !now.can_fua)
    return "without FUA";
  if (was->can_extents && !now.can_extents)
    return "without base:allocation extents";
  if (now.max_payload < was->max_payload)
    return "with a smaller maximum payload";
  if (now.minimum > was->minimum)
    return "with a larger minimum block size";
  return NULL;
}

/* ------------------------------------------------------------ loop */

/* Watch the socket for what libnbd wants next. */
static void
update_watcher (struct nbd_backend *nb)
{
  unsigned dir;
  int events = 0, fd;

  lock_acquire (&nb->lock);
  if (!nb->connected) {
    lock_release (&nb->lock);
    ev_io_stop (nb->loop, &nb->io);
    return;
  }
  fd = nbd_aio_get_fd (nb->h);
  dir = nbd_aio_get_direction (nb->h);
  lock_release (&nb->lock);
  if (dir & LIBNBD_AIO_DIRECTION_READ)
    events |= EV_READ;
  if (dir & LIBNBD_AIO_DIRECTION_WRITE)
    events |= EV_WRITE;
  /* A reconnected socket may reuse the lost one's descriptor number. */
  if (!ev_is_active (&nb->io) || fd != nb->io.fd
      || events != (nb->io.events & (EV_READ | EV_WRITE))) {
    ev_io_stop (nb->loop, &nb->io);
    if (fd >= 0 && events) {
      ev_io_set (&nb->io, fd, events);
      ev_io_start (nb->loop, &nb->io);
    }
  }
}

/* Loop thread: whoever noticed first (a reply, or a command that could
 * not be sent), the loss is handled here once.
 */
static void
check_lost (struct nbd_backend *nb)
{
  bool lost;

  if (nb->lost)
    return;
  lock_acquire (&nb->lock);
  if (nbd_aio_is_dead (nb->h) || nbd_aio_is_closed (nb->h))
    nb->connected = false;
  lost = !nb->connected;
  lock_release (&nb->lock);
  if (!lost)
    return;
  nb->lost = true;
  nb->refused = NULL;           /* a new loss: say it again */
  ev_io_stop (nb->loop, &nb->io);
  log_error ("%s: connection lost%s", nb->uri,
             nb->reconnect_ns ? ", reconnecting" : "");
  if (nb->reconnect_ns) {
    nb->backoff_ns = nb->reconnect_ns;
    ev_timer_set (&nb->retry, nb->backoff_ns / 1e9, 0.);
    ev_timer_start (nb->loop, &nb->retry);
  }
}

static void
io_cb (struct ev_loop *loop, ev_io *w, int revents)
{
  struct nbd_backend *nb = w->data;
  struct nbd_handle *h = nb->h;   /* only this thread replaces it */

  if (revents & EV_READ)
    nbd_aio_notify_read (h);
  if (revents & EV_WRITE)
    nbd_aio_notify_write (h);
  check_lost (nb);
  update_watcher (nb);
}

static void
wake_cb (struct ev_loop *loop, ev_async *w, int revents)
{
  check_lost (w->data);
  update_watcher (w->data);
}

static void
stop_cb (struct ev_loop *loop, ev_async *w, int revents)
{
  ev_break (loop, EVBREAK_ALL);
}

/* A fresh connection; its callers check it before using it. */
static struct nbd_handle *
dial (struct nbd_backend *nb, bool quiet)
{
  struct nbd_handle *h = nbd_create ();

  if (h == NULL)
    goto fail;
  if (nbd_add_meta_context (h, LIBNBD_CONTEXT_BASE_ALLOCATION) == -1
      || nbd_connect_uri (h, nb->uri) == -1)
    goto fail;
  return h;
fail:
  if (!quiet)
    log_error ("nbd=%s: cannot connect: %s", nb->uri, nbd_get_error ());
  nbd_close (h);
  return NULL;
}

static void
retry_cb (struct ev_loop *loop, ev_timer *w, int revents)
{
  struct nbd_backend *nb = w->data;
  struct nbd_handle *h = dial (nb, true), *old;
  const char *lost;

  /* A weaker remote is dialled on every backoff step, for as long as it
   * stays; one line says so, and another only if the reason changes.
   */
  if (h && (lost = capabilities_still_met (nb, h)) != NULL) {
    if (lost != nb->refused)
      log_error ("%s: came back %s; not using it", nb->uri, lost);
    nb->refused = lost;
    nbd_close (h);
    h = NULL;
  }
  if (h == NULL) {
    nb->backoff_ns = MIN (nb->backoff_ns * 2, MAX_BACKOFF_NS);
    ev_timer_set (&nb->retry, nb->backoff_ns / 1e9, 0.);
    ev_timer_start (loop, &nb->retry);
    return;
  }
  lock_acquire (&nb->lock);
  old = nb->h;
  nb->h = h;
  nb->connected = true;
  lock_release (&nb->lock);
  nb->lost = false;
  nbd_close (old);
  log_error ("%s: reconnected", nb->uri);
  update_watcher (nb);
}

static void *
loop_thread (void *arg)
{
  struct nbd_backend *nb = arg;

  update_watcher (nb);
  ev_run (nb->loop, 0);
  return NULL;
}

static int
remote_start (struct backend *b)
{
  struct nbd_backend *nb = to_nbd (b);

  nb->loop = engine_loop_new ();
  if (nb->loop == NULL) {
    log_error ("%s: cannot create its event loop", nb->uri);
    return -1;
  }
  ev_io_init (&nb->io, io_cb, -1, 0);
  nb->io.data = nb;
  ev_async_init (&nb->wake, wake_cb);
  nb->wake.data = nb;
  ev_async_start (nb->loop, &nb->wake);
  ev_async_init (&nb->stop, stop_cb);
  ev_async_start (nb->loop, &nb->stop);
  ev_timer_init (&nb->retry, retry_cb, 0., 0.);
  nb->retry.data = nb;
  if (engine_thread_create (&nb->thread, loop_thread, nb) == -1) {
    log_error ("%s: cannot start its I/O thread: %m", nb->uri);
    return -1;
  }
  nb->started = true;
  return 0;
}

static void
nbd_backend_close (struct backend *b)
{
  struct nbd_backend *nb = to_nbd (b);

  if (nb->started) {
    ev_async_send (nb->loop, &nb->stop);
    pthread_join (nb->thread, NULL);
  }
  if (nb->loop)
    ev_loop_destroy (nb->loop);
  if (nb->h) {
    if (nb->connected)
      nbd_shutdown (nb->h, 0);
    nbd_close (nb->h);
  }
  lock_destroy (&nb->lock);
  free (nb->zeroes);
  free (nb->uri);
  free (nb->b.description);
  free (nb);
}

static const struct backend_ops nbd_ops = {
  .kind = "nbd",
  .pread = remote_pread,
  .io = remote_io,
  .flush = remote_flush,
  .extents = remote_extents,
  .cache = remote_cache,
  .close = nbd_backend_close,
  .start = remote_start,
};

/* ------------------------------------------------------------ open */

/* The backend's limits, from what the remote offered at open. */
static void
set_limits (struct nbd_backend *nb)
{
  const struct remote_caps *c = &nb->caps;

  nb->b.size = c->size;
  nb->b.limits.minimum = c->minimum;
  nb->b.limits.preferred = c->preferred;
  nb->b.limits.maximum = c->max_payload;
  nb->b.max_write = c->max_payload;
  nb->b.max_iov = 1024;
  nb->b.max_in_flight = MAX_IN_FLIGHT;
  /* Fast zero rides on WRITE_ZEROES: without it zero is emulated. */
  nb->b.can_fast_zero = c->can_zero && c->can_fast_zero;
  nb->b.trim_reads_zero = false;
  nb->b.can_fua = c->can_fua;
}

struct backend *
backend_nbd_open (const char *uri, uint64_t reconnect_ns)
{
  struct nbd_backend *nb = calloc (1, sizeof *nb);

  if (nb == NULL || (nb->uri = strdup (uri)) == NULL)
    goto nomem;
  lock_init (&nb->lock);
  nb->b.ops = &nbd_ops;
  nb->reconnect_ns = reconnect_ns;
  /* Connect now (before nbdkit forks) so the size is known when volumes
   * are built and a wrong URI fails on the terminal.
   */
  if ((nb->h = dial (nb, false)) == NULL) {
    errno = ENOTCONN;
    goto fail;
  }
  if (read_capabilities (nb->h, &nb->caps) == -1) {
    log_error ("%s: %s", uri, nbd_get_error ());
    errno = EIO;
    goto fail;
  }
  nb->connected = true;
  set_limits (nb);
  if (!nb->caps.can_zero
      && (nb->zeroes = calloc (1, nb->caps.max_payload)) == NULL)
    goto nomem;
  if (asprintf (&nb->b.description, "nbd %s", uri) == -1) {
    nb->b.description = NULL;
    goto nomem;
  }
  return &nb->b;

nomem:
  errno = ENOMEM;
fail:
  if (nb) {
    int err = errno;

    nbd_backend_close (&nb->b);
    errno = err;
  }
  return NULL;
}

/* ------------------------------------------------------------ type */

struct nbd_args {
  char *uri;
  uint64_t reconnect_ns;        /* 0: no reconnect= */
};

static void *
nbd_new_args (void)
{
  return calloc (1, sizeof (struct nbd_args));
}

/* Only the scheme is checked here; libnbd parses the rest and connects
 * at open (before nbdkit forks), where its error still reaches the
 * terminal.
 */
static int
nbd_start (void *args, const char *disk, const char *value)
{
  static const char *const schemes[] = {
    "nbd://", "nbds://", "nbd+unix://", "nbds+unix://",
  };
  struct nbd_args *a = args;
  size_t i;

  for (i = 0; i < sizeof schemes / sizeof schemes[0]; i++)
    if (strncmp (value, schemes[i], strlen (schemes[i])) == 0)
      break;
  if (i == sizeof schemes / sizeof schemes[0]) {
    log_error ("nbd=%s: not an NBD URI (nbd://, nbds://, nbd+unix://, "
               "nbds+unix://) (disk=%s)", value, disk);
    return -1;
  }
  if ((a->uri = strdup (value)) == NULL) {
    log_error ("nbd: %m");
    return -1;
  }
  return 0;
}

static int
nbd_set (void *args, const char *disk, const char *key, const char *value)
{
  struct nbd_args *a = args;

  return config_parse_delay (key, value, false, &a->reconnect_ns);
}

static struct backend *
nbd_open_args (const void *args, bool readonly)
{
  const struct nbd_args *a = args;

  return backend_nbd_open (a->uri, a->reconnect_ns);
}

static void
nbd_free_args (void *args)
{
  struct nbd_args *a = args;

  if (a)
    free (a->uri);
  free (a);
}

const struct backend_type backend_type_nbd = {
  .name = "nbd",
  .article = "an",
  .value_name = "URI",
  .keys = (const char *const[]) { "reconnect", NULL },
  .summary = "remote NBD exports",
  .help =
  "nbd=<URI>                   Backend of the last disk=: a remote NBD export.\n"
  "reconnect=<DELAY>           With nbd=: redial a lost server, backoff from DELAY.\n",
  .new_args = nbd_new_args,
  .start = nbd_start,
  .set = nbd_set,
  .open = nbd_open_args,
  .free_args = nbd_free_args,
};
