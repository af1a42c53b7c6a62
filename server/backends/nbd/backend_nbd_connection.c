/* plugq: the nbd backend's connection to its remote.
 *
 * What the remote offers, read at open and again on every reconnect; the
 * libev loop thread that feeds libnbd from the socket and handles a lost
 * connection once; dialling, with a deadline on the handshake, and
 * redialling with backoff until the remote offers everything it did at
 * open, then replaying what the lost one had not flushed and sending
 * again what it left undone before the new one is used; starting and
 * closing it all.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <ev.h>
#include <libnbd.h>

#include "backends/backend.h"
#include "backend_nbd.h"
#include "common/clock.h"
#include "common/engine_thread.h"
#include "common/lock.h"
#include "common/log.h"
#include "common/minmax.h"

#define MAX_BACKOFF_NS (UINT64_C (30) * 1000000000)

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
int
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
  c->can_multi_conn = nbd_can_multi_conn (h) == 1;
  return 0;
}

/* Whether a reconnected remote (h) still offers everything this disk was
 * opened with: NULL if it does, else what it lost, for the log.  Each
 * loss would have plugq send commands or sizes the remote refuses (or,
 * for FAST_ZERO, break a promise made to clients).  The preferred block
 * size is only a hint, so it may change.
 */
static const struct {
  size_t flag;                  /* offset of a bool in struct remote_caps */
  const char *lost;
} kept_flags[] = {
  { offsetof (struct remote_caps, can_zero), "without WRITE_ZEROES" },
  { offsetof (struct remote_caps, can_fast_zero), "without FAST_ZERO" },
  { offsetof (struct remote_caps, can_flush), "without FLUSH" },
  { offsetof (struct remote_caps, can_trim), "without TRIM" },
  { offsetof (struct remote_caps, can_cache), "without CACHE" },
  { offsetof (struct remote_caps, can_fua), "without FUA" },
  { offsetof (struct remote_caps, can_extents),
    "without base:allocation extents" },
};

static bool
caps_flag (const struct remote_caps *c, size_t flag)
{
  return *(const bool *) ((const char *) c + flag);
}

static const char *
capabilities_still_met (const struct nbd_backend *nb, struct nbd_handle *h)
{
  const struct remote_caps *was = &nb->caps;
  struct remote_caps now;

  if (read_capabilities (h, &now) == -1 || now.size != was->size)
    return "with a different size";
  if (now.read_only && !was->read_only)
    return "read-only";
  for (size_t i = 0; i < sizeof kept_flags / sizeof kept_flags[0]; i++)
    if (caps_flag (was, kept_flags[i].flag)
        && !caps_flag (&now, kept_flags[i].flag))
      return kept_flags[i].lost;
  if (now.max_payload < was->max_payload)
    return "with a smaller maximum payload";
  if (now.minimum > was->minimum)
    return "with a larger minimum block size";
  return NULL;
}

/* ------------------------------------------------------------ loop */

/* Loop thread: the descriptor the loop watches for handle h, in *fd.
 * libnbd closes a dead connection's socket in whichever thread meets the
 * error first, and libev's epoll backend aborts on a descriptor closed
 * under it; a duplicate that only this thread closes (socket_forget)
 * cannot be.  -1 when the handle has no socket or none could be had.
 */
static int
socket_watched (struct nbd_handle *h, int *fd)
{
  int libnbd_fd;

  if (*fd >= 0)
    return *fd;
  libnbd_fd = nbd_aio_get_fd (h);
  if (libnbd_fd >= 0)
    *fd = fcntl (libnbd_fd, F_DUPFD_CLOEXEC, 0);
  return *fd;
}

void
socket_forget (struct ev_loop *loop, ev_io *io, int *fd)
{
  ev_io_stop (loop, io);
  if (*fd >= 0)
    close (*fd);
  *fd = -1;
}

/* Each libnbd call takes the handle's lock, which a thread sending a
 * command holds, so the loop asks libnbd as little as it can: the
 * descriptor once per handle (socket_watched).
 */
void
socket_watch (struct ev_loop *loop, ev_io *io, int *fd, struct nbd_handle *h,
              unsigned dir)
{
  int events = 0;

  if (dir & LIBNBD_AIO_DIRECTION_READ)
    events |= EV_READ;
  if (dir & LIBNBD_AIO_DIRECTION_WRITE)
    events |= EV_WRITE;
  if (ev_is_active (io) && events == (io->events & (EV_READ | EV_WRITE)))
    return;
  ev_io_stop (loop, io);
  if (events && socket_watched (h, fd) >= 0) {
    ev_io_set (io, *fd, events);
    ev_io_start (loop, io);
  }
}

/* Loop thread: watch the main connection's socket for what libnbd wants
 * next (dir, from nbd_aio_get_direction), while it is connected.
 */
static void
update_watcher (struct nbd_backend *nb, unsigned dir)
{
  if (!nb->connected) {
    ev_io_stop (nb->loop, &nb->io);
    return;
  }
  socket_watch (nb->loop, &nb->io, &nb->watched_fd, nb->h, dir);
}

/* Loop thread: whoever noticed first (a reply, or a command that could
 * not be sent), the loss is handled here once.  libnbd is asked only
 * when it wants nothing from the socket (dir 0), which is how a dead or
 * closed handle looks.
 */
static void
check_lost (struct nbd_backend *nb, unsigned dir)
{
  if (nb->lost)
    return;
  if (dir == 0 && (nbd_aio_is_dead (nb->h) || nbd_aio_is_closed (nb->h))) {
    lock_acquire (&nb->lock);
    nb->connected = false;
    lock_release (&nb->lock);
  }
  if (nb->connected)
    return;
  nb->lost = true;
  nb->refused = NULL;           /* a new loss: say it again */
  ev_io_stop (nb->loop, &nb->io);
  reader_main_lost (nb);
  log_error ("%s: connection lost%s", nb->uri,
             nb->reconnect_ns ? ", reconnecting" : "");
  if (nb->reconnect_ns) {
    nb->backoff_ns = nb->reconnect_ns;
    ev_timer_set (&nb->retry, nb->backoff_ns / 1e9, 0.);
    ev_timer_start (nb->loop, &nb->retry);
  }
}

/* Loop thread, connected: what finishing ops left for it, which they
 * could not send themselves (they may run inside a libnbd callback):
 * ops held though their connection had already been replaced, and the
 * replay log's own flush.  Whether it sent anything.
 */
static bool
send_deferred (struct nbd_backend *nb)
{
  bool sent = false;

  if (atomic_load (&nb->nr_held) > 0) {
    struct nbd_op *resent = NULL;
    unsigned n;

    lock_acquire (&nb->lock);
    if (nb->connected)
      resent = resend_held (nb, nb->h, &n);
    lock_release (&nb->lock);
    op_put_all (resent);
    sent = resent != NULL;
  }
  if (atomic_load (&nb->replay.flush_wanted)) {
    replay_flush_if_wanted (nb);
    sent = true;
  }
  return sent;
}

/* Loop thread, the remote away: once per loss, as soon as a write
 * waits for it.
 */
static void
say_held (struct nbd_backend *nb)
{
  if (nb->held_said || atomic_load (&nb->nr_held) == 0)
    return;
  nb->held_said = true;
  log_error ("%s: writes wait until the remote is back (reads and "
             "flushes fail meanwhile; a shutdown waits for the writes)",
             nb->uri);
}

/* Loop thread: after the socket was served, or a command was issued. */
static void
look_again (struct nbd_backend *nb)
{
  unsigned dir = nbd_aio_get_direction (nb->h);

  check_lost (nb, dir);
  if (!nb->connected)
    say_held (nb);
  else if (send_deferred (nb))
    dir = nbd_aio_get_direction (nb->h);
  update_watcher (nb, dir);
  reader_look (nb);
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
  look_again (nb);
}

static void
wake_cb (struct ev_loop *loop, ev_async *w, int revents)
{
  look_again (w->data);
}

static void
stop_cb (struct ev_loop *loop, ev_async *w, int revents)
{
  ev_break (loop, EVBREAK_ALL);
}

/* ------------------------------------------------------------ dialling */

/* A delay as connect-timeout= spells it ("300ms", "30s"), for messages. */
static void
format_delay (char *buf, size_t n, uint64_t ns)
{
  static const struct { const char *unit; uint64_t scale; } units[] = {
    { "s", UINT64_C (1000000000) }, { "ms", UINT64_C (1000000) },
    { "us", UINT64_C (1000) }, { "ns", 1 },
  };
  size_t i = 0;

  while (ns % units[i].scale != 0)
    i++;
  snprintf (buf, n, "%" PRIu64 "%s", ns / units[i].scale, units[i].unit);
}

/* Milliseconds for poll() until deadline_ns, rounded up. */
static int
poll_ms_until (uint64_t deadline_ns, uint64_t now_ns)
{
  uint64_t ms = (deadline_ns - now_ns + 999999) / 1000000;

  return ms > INT_MAX ? INT_MAX : (int) ms;
}

/* Feeds h's socket to libnbd until the handshake is done, h is dead, the
 * deadline passes (*stalled) or the backend is closing (nb->stop_fd).
 * libnbd 1.14 has no handshake timeout, and nbd_poll watches no second
 * descriptor, so this is nbd_poll with both.  0 once h is ready; -1
 * otherwise, with why empty if libnbd's error says it.
 */
static int
finish_handshake (struct nbd_backend *nb, struct nbd_handle *h,
                  char *why, size_t why_size, bool *stalled)
{
  uint64_t deadline = monotonic_ns () + nb->connect_timeout_ns;

  while (nbd_aio_is_connecting (h) == 1) {
    unsigned dir = nbd_aio_get_direction (h);
    struct pollfd fds[2] = {
      { .fd = nbd_aio_get_fd (h),
        .events = (dir & LIBNBD_AIO_DIRECTION_READ ? POLLIN : 0)
                  | (dir & LIBNBD_AIO_DIRECTION_WRITE ? POLLOUT : 0) },
      { .fd = nb->stop_fd, .events = POLLIN },
    };
    uint64_t now = monotonic_ns ();
    short ready;
    int r;

    if (fds[0].fd < 0)
      return -1;
    if (now >= deadline) {
      char delay[32];

      format_delay (delay, sizeof delay, nb->connect_timeout_ns);
      snprintf (why, why_size, "no NBD handshake within %s", delay);
      *stalled = true;
      return -1;
    }
    r = poll (fds, 2, poll_ms_until (deadline, now));
    if (r == -1 && errno == EINTR)
      continue;
    if (r == -1) {
      snprintf (why, why_size, "poll: %s", strerror (errno));
      return -1;
    }
    if (fds[1].revents) {
      snprintf (why, why_size, "given up: the disk is closing");
      return -1;
    }
    ready = fds[0].revents;
    r = 0;
    if (ready & (POLLIN | POLLHUP | POLLERR)
        && dir & LIBNBD_AIO_DIRECTION_READ)
      r = nbd_aio_notify_read (h);
    else if (ready & (POLLOUT | POLLHUP | POLLERR | POLLNVAL))
      r = nbd_aio_notify_write (h);
    if (r == -1)
      return -1;
  }
  return nbd_aio_is_ready (h) == 1 ? 0 : -1;
}

/* Why a quiet redial last failed in its handshake, logged once per loss
 * (retry_cb resets nb->refused on a new loss).
 */
static const char stalled_handshake[] = "a stalled handshake";

/* A fresh connection, or NULL after at most connect-timeout; its callers
 * check it before using it.  quiet (redialling) logs only a remote that
 * accepts and then stalls, once per loss: the others fail fast and are
 * expected while a remote is away.
 */
struct nbd_handle *
dial (struct nbd_backend *nb, bool quiet)
{
  struct nbd_handle *h = nbd_create ();
  char why[128] = "";
  bool stalled = false;

  if (h == NULL)
    goto fail;
  if (nbd_add_meta_context (h, LIBNBD_CONTEXT_BASE_ALLOCATION) == -1
      || nbd_aio_connect_uri (h, nb->uri) == -1
      || finish_handshake (nb, h, why, sizeof why, &stalled) == -1)
    goto fail;
  return h;
fail:
  if (!quiet)
    log_error ("nbd=%s: cannot connect: %s", nb->uri,
               *why ? why : nbd_get_error ());
  else if (stalled && nb->refused != stalled_handshake) {
    log_error ("%s: %s; redialling", nb->uri, why);
    nb->refused = stalled_handshake;
  }
  nbd_close (h);
  return NULL;
}

/* Loop thread: h, with the lost connection's log replayed on it,
 * becomes the connection.  First the ops the queue still waits for go
 * out on it, while no other thread can send there: each was sent before
 * whatever the queue sends next.  Their own order does not matter (the
 * queue never has two overlapping ops out), but they keep the order they
 * were first sent in.
 */
static void
use_connection (struct nbd_backend *nb, struct nbd_handle *h,
                uint64_t replayed, uint64_t bytes)
{
  struct nbd_handle *old;
  struct nbd_op *resent;
  unsigned nr_resent;

  lock_acquire (&nb->lock);
  resent = resend_held (nb, h, &nr_resent);
  old = nb->h;
  nb->h = h;
  nb->connected = true;
  lock_release (&nb->lock);
  nb->lost = false;
  nb->held_said = false;
  nbd_close (old);
  socket_forget (nb->loop, &nb->io, &nb->watched_fd);
  log_error ("%s: reconnected; replayed %" PRIu64 " writes, zeroes and "
             "trims it had not flushed (%" PRIu64 " bytes of data), resent "
             "%u operations held meanwhile", nb->uri, replayed, bytes,
             nr_resent);
  op_put_all (resent);
  look_again (nb);
}

static void
retry_cb (struct ev_loop *loop, ev_timer *w, int revents)
{
  struct nbd_backend *nb = w->data;
  struct nbd_handle *h = dial (nb, true);
  uint64_t replayed, bytes;
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
  /* What the lost remote may have dropped goes first, and synchronously:
   * NBD does not order concurrent commands.  A new remote that goes
   * meanwhile is dialled again, the log kept.
   */
  if (h && replay_log_on (nb, h, &replayed, &bytes) == -1) {
    nbd_close (h);
    h = NULL;
  }
  if (h == NULL) {
    nb->backoff_ns = MIN (nb->backoff_ns * 2, MAX_BACKOFF_NS);
    ev_timer_set (&nb->retry, nb->backoff_ns / 1e9, 0.);
    ev_timer_start (loop, &nb->retry);
    return;
  }
  use_connection (nb, h, replayed, bytes);
}

static void *
loop_thread (void *arg)
{
  struct nbd_backend *nb = arg;

  reader_start (nb);
  look_again (nb);
  ev_run (nb->loop, 0);
  return NULL;
}

int
remote_start (struct backend *b)
{
  struct nbd_backend *nb = to_nbd (b);

  nb->loop = engine_loop_new_epoll ();
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
  if (engine_thread_create (&nb->thread, "pq-nbd", loop_thread, nb) == -1) {
    log_error ("%s: cannot start its I/O thread: %m", nb->uri);
    return -1;
  }
  nb->started = true;
  return 0;
}

void
nbd_backend_close (struct backend *b)
{
  struct nbd_backend *nb = to_nbd (b);

  if (nb->started) {
    /* A dial in progress gives up at once rather than at its deadline. */
    eventfd_write (nb->stop_fd, 1);
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
  if (nb->watched_fd >= 0)
    close (nb->watched_fd);
  reader_close (nb);
  fail_held (nb);
  if (nb->stop_fd >= 0)
    close (nb->stop_fd);
  ops_free_spares (nb);
  replay_destroy (&nb->replay);
  lock_destroy (&nb->held_lock);
  lock_destroy (&nb->spare_lock);
  lock_destroy (&nb->lock);
  free (nb->zeroes);
  free (nb->uri);
  free (nb->b.description);
  free (nb);
}
