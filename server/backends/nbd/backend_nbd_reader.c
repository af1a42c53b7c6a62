/* plugq: the nbd backend's read connection.
 *
 * A remote disk's reads share one connection with its writes unless
 * the remote offers a second.  There a read waits behind the write data
 * ahead of it on the socket, and for the remote's workers, which that
 * connection's writes hold; a server that forwards each client's
 * connection to a connection of its own does not make the reads wait.
 * So when the remote offered multi-conn at open, reads take a second
 * connection of their own.
 *
 * The rules:
 * - The loop thread dials it when the loop starts, and again whenever
 *   it is down while the main connection is up.  The handshake runs on
 *   the loop (its socket watched as the main one's is), bounded by
 *   connect-timeout, so a remote that stalls it stalls no write.
 * - It is closed when the main connection is lost, and dialled again
 *   once that is back.
 * - It is used once ready, if it offers multi-conn and the size the disk
 *   was opened with.  One without multi-conn is never dialled again.
 * - Reads go there while it is up and the main connection is connected.
 *   While the remote is away, reads fail as they did on one connection:
 *   a remote that came back is read only once the main connection has
 *   replayed what it may have lost (use_connection marks it connected
 *   only then, and the reader is dialled after that).
 * - A read that the connection left unanswered, or could not send on
 *   it, is read again on the main connection.  The reader is then marked
 *   down, and the loop closes it and redials with backoff (1 s doubling
 *   to 30 s), logging why once for each reason.  A reader closed while
 *   alive (the main connection went) first takes no more reads and is
 *   closed once those in flight are answered: closing a handle drops
 *   the completions of its commands.
 * - Nothing else goes there: writes, zeroes, trims, flushes, cache and
 *   extents stay on the main connection, whose order the replay log and
 *   FLUSH rely on.
 *
 * Why a read there sees the writes: multi-conn is the remote's promise
 * that its connections share one cache, so a write it answered on the
 * main connection is seen by any read sent after the answer.  A write
 * not yet answered is not the remote's to show: the queue's overlay
 * answers for queued and in-flight writes, as it does on one connection
 * (where NBD does not order commands either).
 *
 * The queue still forwards large writes as they came while reads
 * compete (reads_behind_writes): a read on its own connection no longer
 * waits behind their data on the socket, but still for a remote that
 * spends longer on a merged write than on the client's own (a remote's
 * store is shared by its connections; docs/design.md).
 */
#include <config.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>

#include <ev.h>
#include <libnbd.h>

#include "backends/backend.h"
#include "backend_nbd.h"
#include "common/lock.h"
#include "common/log.h"
#include "common/minmax.h"

#define READER_FIRST_BACKOFF_NS (UINT64_C (1000000000))
#define READER_MAX_BACKOFF_NS (UINT64_C (30) * 1000000000)

/* Why the reader is down, as logged: compared by address. */
static const char no_multi_conn[] = "is not offered (no multi-conn)";
static const char not_dialled[] = "could not be opened";
static const char stalled[] = "stalled in its handshake";
static const char different[] = "came with a different size";
static const char lost[] = "was lost";

static void reader_io_cb (struct ev_loop *loop, ev_io *w, int revents);
static void reader_timer_cb (struct ev_loop *loop, ev_timer *w, int revents);

void
reader_init (struct nbd_backend *nb)
{
  struct nbd_reader *r = &nb->reader;

  lock_init (&r->lock);
  r->watched_fd = -1;
  r->state = READER_NONE;
  r->backoff_ns = READER_FIRST_BACKOFF_NS;
  ev_io_init (&r->io, reader_io_cb, -1, 0);
  r->io.data = nb;
  ev_timer_init (&r->timer, reader_timer_cb, 0., 0.);
  r->timer.data = nb;
}

/* ------------------------------------------------------------ the loop */

/* Loop thread: the reader is closed.  No thread sends on it once up is
 * lowered under its lock, and it has no command in flight (it died,
 * which answers them all, or they were answered: reader_drop).
 * Redialled after a backoff unless the remote refused it for good; with
 * why NULL (the main connection went) once the main one is back.
 */
static void
reader_close_now (struct nbd_backend *nb, const char *why)
{
  struct nbd_reader *r = &nb->reader;
  struct nbd_handle *h;

  lock_acquire (&r->lock);
  atomic_store (&r->up, false);
  h = r->h;
  r->h = NULL;
  lock_release (&r->lock);
  ev_timer_stop (nb->loop, &r->timer);
  socket_forget (nb->loop, &r->io, &r->watched_fd);
  nbd_close (h);
  r->state = READER_NONE;
  if (why == NULL)              /* the main connection went: no timer */
    return;
  if (why != r->said)
    log_error ("%s: the read connection %s; reads share the main one%s",
               nb->uri, why, why == no_multi_conn ? "" : " meanwhile");
  r->said = why;
  if (why == no_multi_conn) {
    r->state = READER_REFUSED;
    return;
  }
  ev_timer_set (&r->timer, r->backoff_ns / 1e9, 0.);
  ev_timer_start (nb->loop, &r->timer);
  r->backoff_ns = MIN (r->backoff_ns * 2, READER_MAX_BACKOFF_NS);
}

/* Whether h's connection is dead: every command it had is answered. */
static bool
handle_dead (struct nbd_handle *h)
{
  return nbd_aio_is_dead (h) == 1 || nbd_aio_is_closed (h) == 1;
}

/* Loop thread: reads go to the main connection from now on, and the
 * reader is closed, at once or, while reads are in flight on a live
 * connection, once they are answered (closing the handle would drop
 * their completions, and their readers would wait for ever).
 */
static void
reader_drop (struct nbd_backend *nb, const char *why)
{
  struct nbd_reader *r = &nb->reader;

  lock_acquire (&r->lock);
  atomic_store (&r->up, false);
  lock_release (&r->lock);
  if (r->h && !handle_dead (r->h) && nbd_aio_in_flight (r->h) > 0) {
    ev_timer_stop (nb->loop, &r->timer);
    r->state = READER_DRAINING;
    r->drain_why = why;
    return;
  }
  reader_close_now (nb, why);
}

/* Loop thread: starts the handshake; reader_check goes on with it. */
static void
reader_dial (struct nbd_backend *nb)
{
  struct nbd_reader *r = &nb->reader;
  struct nbd_handle *h = nbd_create ();

  lock_acquire (&r->lock);
  r->h = h;
  lock_release (&r->lock);
  r->state = READER_DIALLING;
  if (h == NULL || nbd_aio_connect_uri (h, nb->uri) == -1) {
    reader_drop (nb, not_dialled);
    return;
  }
  ev_timer_set (&r->timer, nb->connect_timeout_ns / 1e9, 0.);
  ev_timer_start (nb->loop, &r->timer);
}

/* Loop thread: the handshake is over; the reader is used if the remote
 * offers what it must.
 */
static void
reader_handshake_done (struct nbd_backend *nb)
{
  struct nbd_reader *r = &nb->reader;

  if (nbd_aio_is_ready (r->h) != 1) {
    reader_drop (nb, not_dialled);
    return;
  }
  if (nbd_can_multi_conn (r->h) != 1) {
    reader_drop (nb, no_multi_conn);
    return;
  }
  if (nbd_get_size (r->h) != nb->caps.size) {
    reader_drop (nb, different);
    return;
  }
  ev_timer_stop (nb->loop, &r->timer);
  r->state = READER_UP;
  r->backoff_ns = READER_FIRST_BACKOFF_NS;
  if (r->said)
    log_error ("%s: the read connection is back", nb->uri);
  r->said = NULL;
  lock_acquire (&r->lock);
  atomic_store (&r->up, true);
  lock_release (&r->lock);
}

/* Loop thread: after the reader's socket was served, a reader woke the
 * loop, a timer fired, or the main connection came back.
 */
static void
reader_check (struct nbd_backend *nb)
{
  struct nbd_reader *r = &nb->reader;
  unsigned dir;

  switch (r->state) {
  case READER_REFUSED:
    return;
  case READER_NONE:
    if (!ev_is_active (&r->timer) && atomic_load (&nb->connected))
      reader_dial (nb);
    if (r->state != READER_DIALLING)
      return;
    /* fall through */
  case READER_DIALLING:
    if (nbd_aio_is_connecting (r->h) != 1)
      reader_handshake_done (nb);
    break;
  case READER_UP:
    dir = nbd_aio_get_direction (r->h);
    if (!atomic_load (&r->up) || (dir == 0 && handle_dead (r->h)))
      reader_drop (nb, lost);
    break;
  case READER_DRAINING:
    if (handle_dead (r->h) || nbd_aio_in_flight (r->h) == 0)
      reader_close_now (nb, r->drain_why);
    break;
  }
  if (r->state == READER_DIALLING || r->state == READER_UP
      || r->state == READER_DRAINING)
    socket_watch (nb->loop, &r->io, &r->watched_fd, r->h,
                  nbd_aio_get_direction (r->h));
}

void
reader_start (struct nbd_backend *nb)
{
  if (!nb->caps.can_multi_conn) {
    nb->reader.state = READER_REFUSED;
    return;
  }
  reader_check (nb);
}

/* A reader outlives no main connection: the remote that the main one
 * comes back to may be another server, or have lost writes it answered
 * and not yet have them replayed.
 */
void
reader_main_lost (struct nbd_backend *nb)
{
  struct nbd_reader *r = &nb->reader;

  if (r->state == READER_DIALLING || r->state == READER_UP)
    reader_drop (nb, NULL);
  else if (r->state == READER_DRAINING)
    r->drain_why = NULL;
}

void
reader_look (struct nbd_backend *nb)
{
  struct nbd_reader *r = &nb->reader;

  /* Up, and no reader asked (reader_ask): nothing to look at. */
  if (r->state == READER_UP && !atomic_exchange (&r->look, false))
    return;
  reader_check (nb);
}

static void
reader_io_cb (struct ev_loop *loop, ev_io *w, int revents)
{
  struct nbd_backend *nb = w->data;
  struct nbd_handle *h = nb->reader.h;  /* only this thread replaces it */

  if (revents & EV_READ)
    nbd_aio_notify_read (h);
  if (revents & EV_WRITE)
    nbd_aio_notify_write (h);
  reader_check (nb);
}

static void
reader_timer_cb (struct ev_loop *loop, ev_timer *w, int revents)
{
  struct nbd_backend *nb = w->data;

  if (nb->reader.state == READER_DIALLING)
    reader_drop (nb, stalled);
  else
    reader_check (nb);
}

/* ------------------------------------------------------------ reading */

/* Has the loop thread look at the reader (reader_look). */
static void
reader_ask (struct nbd_backend *nb)
{
  atomic_store (&nb->reader.look, true);
  wake_loop (nb);
}

/* Under r->lock: whether h's connection is dead; it then takes no more
 * reads.
 */
static bool
reader_gone (struct nbd_reader *r)
{
  lock_assert_held (&r->lock);
  if (handle_dead (r->h)) {
    atomic_store (&r->up, false);
    return true;
  }
  return false;
}

/* A read whose connection went: the reader takes no more, and the loop
 * closes it.
 */
static void
reader_lost (struct nbd_backend *nb)
{
  struct nbd_reader *r = &nb->reader;

  lock_acquire (&r->lock);
  atomic_store (&r->up, false);
  lock_release (&r->lock);
  reader_ask (nb);
}

int
reader_pread (struct nbd_backend *nb, void *buf, uint64_t count,
              uint64_t offset)
{
  struct nbd_reader *r = &nb->reader;
  struct nbd_op *op;
  bool gone = false, ask = false, lost_here;
  int rc = -1, err = 0;

  if (!atomic_load_explicit (&r->up, memory_order_relaxed)
      || !atomic_load (&nb->connected))
    return READER_NOT_TAKEN;
  if ((op = op_new (nb)) == NULL)
    return -1;
  lock_acquire (&r->lock);
  if (!atomic_load (&r->up))
    gone = true;
  else if ((rc = issue_chunks_h (r->h, op, issue_pread, buf, true, count,
                                 offset, nb->caps.max_payload)) == -1) {
    err = errno;
    gone = ask = reader_gone (r);
  }
  else
    ask = nbd_aio_get_direction (r->h) & LIBNBD_AIO_DIRECTION_WRITE;
  lock_release (&r->lock);
  if (ask)
    reader_ask (nb);
  /* Commands sent before it went are answered, as lost. */
  errno = err;
  rc = op_wait_lost (op, gone ? 0 : rc, &lost_here);
  if (gone)
    return READER_NOT_TAKEN;
  if (rc == -1 && lost_here) {
    reader_lost (nb);
    return READER_NOT_TAKEN;
  }
  return rc;
}

/* ------------------------------------------------------------ closing */

void
reader_close (struct nbd_backend *nb)
{
  struct nbd_reader *r = &nb->reader;

  if (r->h) {
    if (atomic_load (&r->up))
      nbd_shutdown (r->h, 0);
    nbd_close (r->h);
  }
  if (r->watched_fd >= 0)
    close (r->watched_fd);
  lock_destroy (&r->lock);
}
