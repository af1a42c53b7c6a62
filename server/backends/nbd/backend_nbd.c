/* plugq: a disk whose storage is an NBD export on another server.
 *
 * Everything goes through libnbd's asynchronous API.  Each remote disk
 * has its own libev loop in its own thread that watches the connection's
 * socket and feeds libnbd (nbd_aio_notify_read/write); any thread may
 * issue commands, and wakes the loop only when libnbd could not send one
 * whole (it then wants to write) or the connection went.  The queue's
 * dispatcher submits merged writes, zeroes and trims without waiting
 * (several in flight); reads, flushes and extents are issued the same
 * way and waited for.  On a remote that offers multi-conn, reads take a
 * second connection of their own (backend_nbd_reader.c).
 *
 * A lost connection fails every command that needed it (libnbd completes
 * them with an error, which the queue latches for answered writes).  With
 * reconnect= the loop thread dials again with exponential backoff and
 * swaps the new connection in once it offers everything the first one
 * did.  Meanwhile reads, flushes, extents and cache fail at once, but
 * writes, zeroes and trims wait: those the lost connection left
 * unanswered and those the queue sends while the remote is away are held
 * and sent again on the new connection, the queue waiting for them (its
 * back-pressure stops writers once it is full).  And since a remote may
 * lose what it answered but had not flushed (a volatile cache), each
 * completed one is kept until a flush covers it and written again on the
 * new connection before anything else (backend_nbd_replay.c).
 *
 * This file holds the ops, opening and the backend type.  The commands
 * (and the held ops) are in backend_nbd_commands.c; the loop thread,
 * dialling and reconnecting in backend_nbd_connection.c; the replay log
 * in backend_nbd_replay.c; backend_nbd.h holds what they share.
 */
#include <config.h>

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>

#include <libnbd.h>

#include "backends/backend.h"
#include "backend_nbd.h"
#include "backends/backend_type.h"
#include "common/config_value.h"
#include "buffers/iovec.h"
#include "common/log.h"

/* ------------------------------------------------------------ ops */

static int
remote_pread (struct backend *b, void *buf, size_t count, uint64_t offset)
{
  struct nbd_backend *nb = to_nbd (b);
  int r = reader_pread (nb, buf, count, offset);

  if (r != READER_NOT_TAKEN)
    return r;
  return run_sync (nb, issue_pread, buf, count, offset, nb->caps.max_payload);
}

/* A flush that succeeds makes what completed before it was sent
 * durable: the replay log drops it.  After a replay the new remote
 * refused, one flush fails instead: the queue latches that, so every
 * connection hears that answered writes were lost.
 */
static int
remote_flush (struct backend *b)
{
  struct nbd_backend *nb = to_nbd (b);
  uint64_t mark;

  if (replay_take_loss (&nb->replay)) {
    errno = EIO;
    return -1;
  }
  /* A server that cannot flush writes through (the spec's reading). */
  if (!nb->caps.can_flush)
    return 0;
  mark = replay_mark (&nb->replay);
  if (run_sync (nb, issue_flush, NULL, 1, 0, 1) == -1)
    return -1;
  replay_trim (&nb->replay, mark);
  return 0;
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

/* NBD has no vectored write.  A merged write's buffer of SEND_DIRECT
 * bytes or more (a stream's piece), or a small one between two such,
 * goes as its own commands from where it is; each run of two or more
 * smaller buffers is gathered into its place in one bounce buffer and
 * goes as one command.  Copying every buffer into one command had made
 * a stream's every byte be copied twice; sending every buffer alone
 * would split merged small writes into as many commands again.
 */
#define SEND_DIRECT (64 * 1024)

static bool
is_small (const struct iovec *iov, int iovcnt, int i)
{
  return i >= 0 && i < iovcnt && iov[i].iov_len < SEND_DIRECT;
}

/* Whether iov[i] is gathered: small, next to another small one. */
static bool
gathered (const struct iovec *iov, int iovcnt, int i)
{
  return is_small (iov, iovcnt, i)
    && (is_small (iov, iovcnt, i - 1) || is_small (iov, iovcnt, i + 1));
}

static size_t
gathered_bytes (const struct iovec *iov, int iovcnt)
{
  size_t n = 0;

  for (int i = 0; i < iovcnt; i++)
    if (gathered (iov, iovcnt, i))
      n += iov[i].iov_len;
  return n;
}

/* The length of the run of small buffers from iov[*i] on; moves *i past
 * it.
 */
static size_t
run_length (const struct iovec *iov, int iovcnt, int *i)
{
  size_t len = 0;

  for (; is_small (iov, iovcnt, *i); (*i)++)
    len += iov[*i].iov_len;
  return len;
}

/* Before a write is sent (without nb->lock): each run of small buffers
 * is copied into its place in op->bounce.
 */
static int
gather_write (struct nbd_op *op, const struct backend_io *io)
{
  const struct iovec *iov = io->iov;
  size_t small = gathered_bytes (iov, io->iovcnt);
  char *next;

  if (small == 0)
    return 0;
  if ((next = op->bounce = malloc (small)) == NULL)
    return -1;
  for (int i = 0; i < io->iovcnt;) {
    int first = i;

    if (gathered (iov, io->iovcnt, i)) {
      size_t len = run_length (iov, io->iovcnt, &i);

      iov_copy_out (next, iov + first, i - first, 0, len);
      next += len;
    }
    else
      i++;
  }
  return 0;
}

/* A gathered write's commands: each large buffer from where it is, each
 * run of small ones from its place in op->bounce.
 */
static int
send_write (struct nbd_backend *nb, struct nbd_handle *h, struct nbd_op *op,
            const struct backend_io *io)
{
  const struct iovec *iov = io->iov;
  uint64_t offset = io->offset;
  const char *next = op->bounce;

  for (int i = 0; i < io->iovcnt;) {
    const char *data = iov[i].iov_base;
    size_t len = iov[i].iov_len;

    if (gathered (iov, io->iovcnt, i)) {
      data = next;
      len = run_length (iov, io->iovcnt, &i);
      next += len;
    }
    else
      i++;
    if (issue_chunks_on (nb, h, op, issue_pwrite, data, true, len, offset,
                         nb->caps.max_payload) == -1)
      return -1;
    offset += len;
  }
  return 0;
}

int
op_send_io (struct nbd_backend *nb, struct nbd_handle *h, struct nbd_op *op)
{
  const struct backend_io *io = op->io;
  uint64_t max = nb->caps.max_payload;

  lock_assert_held (&nb->lock);
  switch (io->kind) {
  case OP_WRITE:
    if (op->entry)              /* the log's copy: one buffer */
      return issue_chunks_on (nb, h, op, issue_pwrite, op->entry->data,
                              true, io->count, io->offset, max);
    return send_write (nb, h, op, io);
  case OP_ZERO:
    /* A server without WRITE_ZEROES: writes of one zero buffer, which
     * does not advance.
     */
    if (!nb->caps.can_zero)
      return issue_chunks_on (nb, h, op, issue_pwrite, nb->zeroes, false,
                              io->count, io->offset, max);
    return issue_chunks_on (nb, h, op, io->may_trim ? issue_zero_may_trim
                            : issue_zero_no_hole, NULL, false, io->count,
                            io->offset, ZERO_CHUNK);
  case OP_TRIM:
    if (!nb->caps.can_trim)
      return 0;                 /* advisory */
    return issue_chunks_on (nb, h, op, issue_trim, NULL, false, io->count,
                            io->offset, ZERO_CHUNK);
  default:
    errno = EINVAL;
    return -1;
  }
}

/* What an op needs before it is sent, made without nb->lock: the
 * replay log's copy of it (which a write is then sent from), or a
 * write's gathered buffers.  A trim the remote cannot take leaves
 * nothing to replay.
 */
static int
prepare_io (struct nbd_backend *nb, struct nbd_op *op,
            const struct backend_io *io)
{
  if (nb->replay.enabled && (io->kind != OP_TRIM || nb->caps.can_trim))
    return (op->entry = replay_entry_new (io)) ? 0 : -1;
  if (io->kind == OP_WRITE)
    return gather_write (op, io);
  return 0;
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
  if (io->kind != OP_WRITE && io->kind != OP_ZERO && io->kind != OP_TRIM)
    op_fail (op, EINVAL);
  else if (prepare_io (nb, op, io) == -1)
    op_fail (op, errno);
  else
    op_start_io (op);
  op_put (op);
  return BACKEND_IO_STARTED;
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
  nb->b.reads_behind_writes = true;
}

struct backend *
backend_nbd_open (const char *uri, uint64_t reconnect_ns,
                  uint64_t connect_timeout_ns)
{
  struct nbd_backend *nb = calloc (1, sizeof *nb);

  if (nb == NULL)
    goto nomem;
  nb->watched_fd = -1;
  nb->stop_fd = -1;
  lock_init (&nb->lock);
  lock_init (&nb->spare_lock);
  lock_init (&nb->held_lock);
  replay_init (&nb->replay, false);
  reader_init (nb);
  if ((nb->uri = strdup (uri)) == NULL)
    goto nomem;
  nb->b.ops = &nbd_ops;
  nb->reconnect_ns = reconnect_ns;
  nb->connect_timeout_ns = connect_timeout_ns;
  if ((nb->stop_fd = eventfd (0, EFD_CLOEXEC | EFD_NONBLOCK)) == -1) {
    log_error ("%s: eventfd: %m", uri);
    goto fail;
  }
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
  /* A remote without FLUSH writes through: what it completed is kept. */
  nb->replay.enabled = reconnect_ns > 0 && nb->caps.can_flush;
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
  uint64_t connect_timeout_ns;
};

static void *
nbd_new_args (void)
{
  struct nbd_args *a = calloc (1, sizeof *a);

  if (a)
    a->connect_timeout_ns = NBD_DEFAULT_CONNECT_TIMEOUT_NS;
  return a;
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

  if (strcmp (key, "connect-timeout") == 0)
    return config_parse_delay (key, value, false, &a->connect_timeout_ns);
  return config_parse_delay (key, value, false, &a->reconnect_ns);
}

static struct backend *
nbd_open_args (const void *args, bool readonly)
{
  const struct nbd_args *a = args;

  return backend_nbd_open (a->uri, a->reconnect_ns, a->connect_timeout_ns);
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
  .keys = (const char *const[]) { "reconnect", "connect-timeout", NULL },
  .summary = "remote NBD exports",
  .help =
  "nbd=<URI>                   Backend of the last disk=: a remote NBD export.\n"
  "reconnect=<DELAY>           With nbd=: redial a lost server, backoff from DELAY.\n"
  "connect-timeout=<DELAY>     With nbd=: limit on each dial and handshake (30s).\n",
  .new_args = nbd_new_args,
  .start = nbd_start,
  .set = nbd_set,
  .open = nbd_open_args,
  .free_args = nbd_free_args,
};
