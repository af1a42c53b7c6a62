/* plugq: NBD commands for the nbd backend.
 *
 * struct nbd_op is one engine operation, sent as one or more libnbd
 * asynchronous commands (issue_chunks, one issue_* per NBD command).
 * Each completion drops a reference; the last one either answers the
 * queue's backend_io or wakes the waiter in op_wait.
 *
 * With reconnect=, an asynchronous op (the queue's write, zero or trim)
 * whose connection went before it completed, or that came while the
 * remote was away, is not answered: it is held (nb->held) and sent again
 * on the next connection, the queue still waiting for it.  One that
 * completed is recorded in the replay log (backend_nbd_replay.c) before
 * the queue hears of it.
 */
#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <ev.h>
#include <libnbd.h>

#include "backends/backend.h"
#include "backend_nbd.h"
#include "common/lock.h"
#include "common/log.h"
#include "common/minmax.h"

/* Spare ops a backend keeps: its commands in flight, and some. */
#define SPARE_OPS (2 * MAX_IN_FLIGHT)

static struct nbd_op *
op_take_spare (struct nbd_backend *nb)
{
  struct nbd_op *op;

  lock_acquire (&nb->spare_lock);
  if ((op = nb->spare_ops) != NULL) {
    nb->spare_ops = op->next_spare;
    nb->nr_spare_ops--;
  }
  lock_release (&nb->spare_lock);
  return op;
}

struct nbd_op *
op_new (struct nbd_backend *nb)
{
  struct nbd_op *op = op_take_spare (nb);

  if (op == NULL) {
    if ((op = calloc (1, sizeof *op)) == NULL)
      return NULL;
    lock_init (&op->lock);
    pthread_cond_init (&op->cond, NULL);
  }
  op->nb = nb;
  atomic_init (&op->pending, 1);  /* the submitter's own reference */
  atomic_init (&op->err, 0);
  op->bounce = NULL;
  op->io = NULL;
  op->cmd_flags = 0;
  op->done = false;
  op->extents = NULL;
  op->extents_offset = 0;
  op->entry = NULL;
  op->gen = 0;
  op->issue_seq = 0;
  atomic_init (&op->lost, false);
  op->next_held = NULL;
  return op;
}

static void
op_destroy (struct nbd_op *op)
{
  lock_destroy (&op->lock);
  pthread_cond_destroy (&op->cond);
  free (op);
}

static void
op_free (struct nbd_op *op)
{
  struct nbd_backend *nb = op->nb;
  bool kept = false;

  free (op->bounce);
  free (op->entry);
  lock_acquire (&nb->spare_lock);
  if (nb->nr_spare_ops < SPARE_OPS) {
    op->next_spare = nb->spare_ops;
    nb->spare_ops = op;
    nb->nr_spare_ops++;
    kept = true;
  }
  lock_release (&nb->spare_lock);
  if (!kept)
    op_destroy (op);
}

void
ops_free_spares (struct nbd_backend *nb)
{
  struct nbd_op *op;

  while ((op = op_take_spare (nb)) != NULL)
    op_destroy (op);
}

void
wake_loop (struct nbd_backend *nb)
{
  if (nb->started)
    ev_async_send (nb->loop, &nb->wake);
}

/* nb->lock held, commands just sent on the current connection: whether
 * the loop thread must look at it.  libnbd sends a command from the
 * caller's thread while the socket takes it, and the loop already
 * watches for the replies; only a send the socket could not take whole
 * (libnbd then wants to write) or a lost connection needs the loop.
 * Waking it for every command cost a context switch per write.
 */
static bool
loop_must_look (struct nbd_backend *nb)
{
  lock_assert_held (&nb->lock);
  return !nb->connected
    || nbd_aio_get_direction (nb->h) & LIBNBD_AIO_DIRECTION_WRITE;
}

/* ------------------------------------------------------------ held ops */

/* An op whose connection went, or that came while the remote was away:
 * on nb->held, in the order ops were first sent.  Runs where an op
 * finishes, maybe inside a libnbd callback: it takes no lock but
 * held_lock, and leaves the sending to the loop thread (look_again) or
 * to the reconnect.
 */
static void
op_hold (struct nbd_op *op)
{
  struct nbd_backend *nb = op->nb;
  struct nbd_op **p;

  lock_acquire (&nb->held_lock);
  for (p = &nb->held; *p && (*p)->issue_seq < op->issue_seq;
       p = &(*p)->next_held)
    ;
  op->next_held = *p;
  *p = op;
  atomic_fetch_add (&nb->nr_held, 1);
  lock_release (&nb->held_lock);
  wake_loop (nb);
}

struct nbd_op *
resend_held (struct nbd_backend *nb, struct nbd_handle *h, unsigned *n)
{
  struct nbd_op *list, *op;

  lock_assert_held (&nb->lock);
  lock_acquire (&nb->held_lock);
  list = nb->held;
  nb->held = NULL;
  atomic_store (&nb->nr_held, 0);
  lock_release (&nb->held_lock);
  *n = 0;
  for (op = list; op; op = op->next_held) {
    atomic_store (&op->pending, 1);     /* the resender's, op_put_all's */
    atomic_store (&op->err, 0);
    atomic_store (&op->lost, false);
    op->gen = atomic_load (&nb->replay.gen);
    if (op_send_io (nb, h, op) == -1) {
      int err = errno;

      if (connection_gone (nb, h))
        atomic_store (&op->lost, true);
      else
        op_fail (op, err);
    }
    (*n)++;
  }
  return list;
}

void
op_put_all (struct nbd_op *list)
{
  while (list) {
    struct nbd_op *next = list->next_held;

    list->next_held = NULL;
    op_put (list);
    list = next;
  }
}

void
fail_held (struct nbd_backend *nb)
{
  struct nbd_op *list;

  lock_acquire (&nb->held_lock);
  list = nb->held;
  nb->held = NULL;
  atomic_store (&nb->nr_held, 0);
  lock_release (&nb->held_lock);
  if (list)
    log_error ("%s: closing with writes the remote never took: they "
               "are lost", nb->uri);
  while (list) {
    struct nbd_op *next = list->next_held;
    struct backend_io *io = list->io;

    op_free (list);
    io->done (io, EIO);
    list = next;
  }
}

/* ------------------------------------------------------------ finishing */

/* An asynchronous op's last reference went.  A completed one goes into
 * the replay log (if there is one) before the queue hears of it: its
 * answer may be answered to a client, and from then on only the log
 * keeps it until a flush covers it.
 */
static void
io_finish (struct nbd_op *op)
{
  struct nbd_backend *nb = op->nb;
  struct backend_io *io = op->io;
  int err = atomic_load (&op->err);
  bool flush = false;

  if (atomic_load (&op->lost)) {
    op_hold (op);
    return;
  }
  if (err == 0 && op->entry) {
    /* Its connection was given up before it got here: the replay did
     * not have it, so it goes out again.
     */
    if (!replay_record (&nb->replay, op->entry, op->gen, &flush)) {
      op_hold (op);
      return;
    }
    op->entry = NULL;
    if (flush)
      wake_loop (nb);
  }
  op_free (op);
  io->done (io, err);
}

static void
op_finish (struct nbd_op *op)
{
  if (op->io) {
    io_finish (op);
    return;
  }
  lock_acquire (&op->lock);
  op->done = true;
  pthread_cond_signal (&op->cond);
  lock_release (&op->lock);
}

void
op_put (struct nbd_op *op)
{
  if (atomic_fetch_sub (&op->pending, 1) == 1)
    op_finish (op);
}

void
op_fail (struct nbd_op *op, int err)
{
  int zero = 0;

  atomic_compare_exchange_strong (&op->err, &zero,
                                  backend_client_errno (err));
}

/* libnbd calls this from the loop thread (or at once on an error).
 * ENOTCONN is libnbd's own, for a command its dying connection never
 * answered: with reconnect= an asynchronous op is then sent again, and
 * a read on the read connection is read again on the main one.
 */
static int
command_done (void *user_data, int *error)
{
  struct nbd_op *op = user_data;
  bool io_again = op->io && op->nb->reconnect_ns;

  if (*error == ENOTCONN && (op->io == NULL || io_again))
    atomic_store (&op->lost, true);
  if (*error && !(*error == ENOTCONN && io_again))
    op_fail (op, *error);
  op_put (op);
  return 1;
}

/* ------------------------------------------------------------ issuing */

int
issue_chunks_on (struct nbd_backend *nb, struct nbd_handle *h,
                 struct nbd_op *op, issue_fn fn, const char *arg,
                 bool arg_advances, uint64_t count, uint64_t offset,
                 uint64_t chunk)
{
  lock_assert_held (&nb->lock);
  return issue_chunks_h (h, op, fn, arg, arg_advances, count, offset, chunk);
}

int
issue_chunks_h (struct nbd_handle *h, struct nbd_op *op, issue_fn fn,
                const char *arg, bool arg_advances, uint64_t count,
                uint64_t offset, uint64_t chunk)
{
  while (count > 0) {
    uint64_t n = MIN (count, chunk);

    atomic_fetch_add (&op->pending, 1);
    if (fn (h, op, arg, n, offset) == -1) {
      int err = nbd_get_errno ();

      atomic_fetch_sub (&op->pending, 1);
      errno = err ? err : EIO;
      return -1;
    }
    if (arg && arg_advances)
      arg += n;
    offset += n;
    count -= n;
  }
  return 0;
}

/* A command can be the first to find the connection gone; libnbd then
 * refuses every later one with EINVAL.  It is a lost remote.
 */
bool
connection_gone (struct nbd_backend *nb, struct nbd_handle *h)
{
  lock_assert_held (&nb->lock);
  if (nbd_aio_is_dead (h) || nbd_aio_is_closed (h)) {
    if (h == nb->h)
      nb->connected = false;
    return true;
  }
  log_error ("%s: %s", nb->uri, nbd_get_error ());
  return false;
}

/* Sends [offset, offset+count) as commands of at most `chunk` bytes.
 * Each command holds a reference on op.
 */
int
issue_chunks (struct nbd_backend *nb, struct nbd_op *op, issue_fn fn,
              const char *arg, bool arg_advances, uint64_t count,
              uint64_t offset, uint64_t chunk)
{
  int r = -1, err = ENOTCONN;
  bool wake;

  lock_acquire (&nb->lock);
  if (nb->connected) {
    r = issue_chunks_on (nb, nb->h, op, fn, arg, arg_advances, count,
                         offset, chunk);
    err = errno;
    if (r == -1 && connection_gone (nb, nb->h))
      err = EIO;
  }
  wake = r == -1 || loop_must_look (nb);
  lock_release (&nb->lock);
  if (wake)
    wake_loop (nb);
  errno = err;
  return r;
}

void
op_start_io (struct nbd_op *op)
{
  struct nbd_backend *nb = op->nb;
  bool lost = true, wake;

  op->issue_seq = atomic_fetch_add (&nb->next_issue_seq, 1);
  lock_acquire (&nb->lock);
  if (nb->connected) {
    op->gen = atomic_load (&nb->replay.gen);
    lost = false;
    if (op_send_io (nb, nb->h, op) == -1) {
      int err = errno;

      lost = connection_gone (nb, nb->h);
      if (!lost)
        op_fail (op, err);
    }
  }
  wake = lost || loop_must_look (nb);
  lock_release (&nb->lock);
  if (wake)
    wake_loop (nb);
  /* Commands already sent complete later, as lost. */
  if (lost && nb->reconnect_ns)
    atomic_store (&op->lost, true);
  else if (lost)
    op_fail (op, EIO);
}

static nbd_completion_callback
completion (struct nbd_op *op)
{
  return (nbd_completion_callback) { .callback = command_done,
                                     .user_data = op };
}

int64_t
issue_pread (struct nbd_handle *h, struct nbd_op *op, const void *buf,
             uint64_t count, uint64_t offset)
{
  return nbd_aio_pread (h, (void *) buf, count, offset, completion (op), 0);
}

int64_t
issue_pwrite (struct nbd_handle *h, struct nbd_op *op, const void *buf,
              uint64_t count, uint64_t offset)
{
  return nbd_aio_pwrite (h, buf, count, offset, completion (op),
                         op->cmd_flags);
}

int64_t
issue_zero_no_hole (struct nbd_handle *h, struct nbd_op *op,
                    const void *unused, uint64_t count, uint64_t offset)
{
  return nbd_aio_zero (h, count, offset, completion (op),
                       LIBNBD_CMD_FLAG_NO_HOLE | op->cmd_flags);
}

int64_t
issue_zero_may_trim (struct nbd_handle *h, struct nbd_op *op,
                     const void *unused, uint64_t count, uint64_t offset)
{
  return nbd_aio_zero (h, count, offset, completion (op), op->cmd_flags);
}

int64_t
issue_trim (struct nbd_handle *h, struct nbd_op *op, const void *unused,
            uint64_t count, uint64_t offset)
{
  return nbd_aio_trim (h, count, offset, completion (op), op->cmd_flags);
}

int64_t
issue_cache (struct nbd_handle *h, struct nbd_op *op, const void *unused,
             uint64_t count, uint64_t offset)
{
  return nbd_aio_cache (h, count, offset, completion (op), 0);
}

int64_t
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

int64_t
issue_block_status (struct nbd_handle *h, struct nbd_op *op,
                    const void *unused, uint64_t count, uint64_t offset)
{
  nbd_extent_callback cb = { .callback = extent_cb, .user_data = op };

  return nbd_aio_block_status (h, count, offset, cb, completion (op), 0);
}

/* Drops the submitter's reference and waits for the commands. */
int
op_wait (struct nbd_op *op, int issue_result)
{
  bool lost;

  return op_wait_lost (op, issue_result, &lost);
}

int
op_wait_lost (struct nbd_op *op, int issue_result, bool *lost)
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
  *lost = atomic_load (&op->lost);
  op_free (op);
  if (err) {
    errno = err;
    return -1;
  }
  return 0;
}

int
run_sync (struct nbd_backend *nb, issue_fn fn, void *buf, uint64_t count,
          uint64_t offset, uint64_t chunk)
{
  struct nbd_op *op = op_new (nb);

  if (op == NULL)
    return -1;
  return op_wait (op, issue_chunks (nb, op, fn, buf, true, count, offset,
                                    chunk));
}
