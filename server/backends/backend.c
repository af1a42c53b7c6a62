/* plugq: calling a backend outside the queue's dispatch (backend.h). */
#include <config.h>

#include <errno.h>
#include <semaphore.h>

#include "backend.h"
#include "common/lock.h"

/* An asynchronous operation and the thread that waits for it.  The
 * completion posts a semaphore: a condition variable signalled under its
 * mutex would wake the waiter only to sleep on that mutex.
 */
struct io_waiter {
  struct backend_io io;
  sem_t done;
  int err;
};

static void
io_waiter_done (struct backend_io *io, int err)
{
  struct io_waiter *w = (struct io_waiter *) io;

  w->err = err;
  sem_post (&w->done);          /* w is not touched after this */
}

static int
io_wait_async (struct backend *b, const struct backend_io *io)
{
  struct io_waiter w = { .io = *io };
  int r;

  w.io.done = io_waiter_done;
  sem_init (&w.done, 0, 0);
  r = b->ops->io (b, &w.io);
  if (r != -1) {
    semaphore_wait (&w.done);
    if (w.err) {
      errno = w.err;
      r = -1;
    }
  }
  sem_destroy (&w.done);
  return r == -1 ? -1 : 0;
}

int
backend_io_by_kind (struct backend *b, const struct backend_io *io,
                    const struct backend_sync_ops *ops)
{
  int r;

  switch (io->kind) {
  case OP_WRITE:
    r = ops->pwritev (b, io->iov, io->iovcnt, io->offset);
    break;
  case OP_ZERO:
    r = ops->zero (b, io->count, io->offset, io->may_trim);
    break;
  case OP_TRIM:
    r = ops->trim (b, io->count, io->offset);
    break;
  default:
    errno = EINVAL;
    return -1;
  }
  if (r == 0 && io->fua)
    r = b->ops->flush (b);
  return r == -1 ? -1 : BACKEND_IO_DONE;
}

int
backend_io_wait (struct backend *b, struct backend_io *io)
{
  struct backend_io plain = *io;
  int r;

  /* A backend without FUA gets the operation and then a flush. */
  if (io->fua && !b->can_fua)
    plain.fua = false;
  if (backend_is_async (b))
    r = io_wait_async (b, &plain);
  else
    r = b->ops->io (b, &plain) == -1 ? -1 : 0;
  if (r == 0 && io->fua && !b->can_fua)
    r = b->ops->flush (b);
  return r;
}

int
backend_pwritev (struct backend *b, const struct iovec *iov, int iovcnt,
                 uint64_t offset, bool fua)
{
  struct backend_io io = {
    .kind = OP_WRITE, .fua = fua, .iov = iov, .iovcnt = iovcnt,
    .offset = offset,
  };

  for (int i = 0; i < iovcnt; i++)
    io.count += iov[i].iov_len;
  return backend_io_wait (b, &io);
}

int
backend_zero (struct backend *b, uint64_t count, uint64_t offset,
              bool may_trim, bool fua)
{
  struct backend_io io = {
    .kind = OP_ZERO, .fua = fua, .may_trim = may_trim, .offset = offset,
    .count = count,
  };

  return backend_io_wait (b, &io);
}

int
backend_trim (struct backend *b, uint64_t count, uint64_t offset, bool fua)
{
  struct backend_io io = {
    .kind = OP_TRIM, .fua = fua, .offset = offset, .count = count,
  };

  return backend_io_wait (b, &io);
}

int
backend_client_errno (int err)
{
  switch (err) {
  case EPERM: case EIO: case ENOMEM: case EINVAL: case ENOSPC:
  case EOVERFLOW: case ENOTSUP: case EROFS: case EFBIG:
    return err;
  default:
    return EIO;
  }
}
