/* plugq: NBD commands for the nbd backend.
 *
 * struct nbd_op is one engine operation, sent as one or more libnbd
 * asynchronous commands (issue_chunks, one issue_* per NBD command).
 * Each completion drops a reference; the last one either answers the
 * queue's backend_io or wakes the waiter in op_wait.
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

/* Sends [offset, offset+count) as commands of at most `chunk` bytes.
 * Each command holds a reference on op.
 */
int
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
