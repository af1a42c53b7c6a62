/* plugq: the storage under one disk.
 *
 * A backend is what a disk's queue dispatches to: a file or block device,
 * sparse memory, or a remote NBD export.  The queue owns all ordering, so a
 * backend only has to perform its writes, zeroes, trims and flushes one at
 * a time correctly (or max_writers at a time, never two over the same
 * bytes); it may be called for those from any thread that holds one of the
 * disk's dispatch tokens, and for reads, extents and cache from any request
 * thread at the same time.  Writes, zeroes and trims all come down one
 * entry point, io, as a struct backend_io.
 *
 * Every call returns 0 on success or -1 with errno set.
 */
#ifndef PLUGQ_BACKEND_H
#define PLUGQ_BACKEND_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "common/extents.h"
#include "common/op.h"

struct block_limits {
  uint32_t minimum;             /* power of 2, 1 .. 64K */
  uint32_t preferred;           /* power of 2, >= minimum */
  uint32_t maximum;             /* largest request the backend accepts */
};

struct backend;

/* A write, zero or trim on its way to the backend: the one form in which
 * the queue hands a dispatched batch down (backend_ops.io).
 */
struct backend_io {
  enum op_kind kind;            /* OP_WRITE, OP_ZERO or OP_TRIM */
  bool fua;                     /* durable before it completes */
  bool may_trim;                /* OP_ZERO: holes allowed */
  const struct iovec *iov;      /* OP_WRITE */
  int iovcnt;
  uint64_t offset;
  uint64_t count;
  /* Asynchronous backends only: called once when io is done, from the
   * backend's thread or from inside io () itself when it finished at
   * once, so io () must never be called with a lock done takes.
   */
  void (*done) (struct backend_io *, int err);
};

/* What backend_ops.io returned. */
#define BACKEND_IO_DONE 0       /* performed, successfully */
#define BACKEND_IO_STARTED 1    /* asynchronous: done () will follow */

struct backend_ops {
  const char *kind;             /* "file", "memory", "nbd" */
  int (*pread) (struct backend *, void *buf, size_t count, uint64_t offset);
  /* Writes, zeroes and trims.  A zero must leave the range reading as
   * zeroes; a trim is advisory and may do nothing; fua makes the range
   * durable before io completes.
   *
   * A synchronous backend performs io and returns BACKEND_IO_DONE, or -1
   * with errno set.  An asynchronous one (with start) returns
   * BACKEND_IO_STARTED and later calls io->done, or -1 with errno when
   * io could not be started (done is then never called).
   */
  int (*io) (struct backend *, struct backend_io *);
  int (*flush) (struct backend *);
  /* Appends extents covering at least [offset, offset+1) in order. */
  int (*extents) (struct backend *, uint64_t count, uint64_t offset,
                  struct extent_list *);
  int (*cache) (struct backend *, uint64_t count, uint64_t offset);
  void (*close) (struct backend *);
  /* Asynchronous backends: starts their own threads (after nbdkit
   * forks).  A backend with start completes io through io->done.
   */
  int (*start) (struct backend *);
  /* Optional: the queue's final drain begins (nbdkit shuts down), and
   * close follows once it is done.  Nothing is expected of the backend;
   * one that may keep the drain waiting can say so.
   */
  void (*draining) (struct backend *);
};

struct backend {
  const struct backend_ops *ops;
  uint64_t size;
  struct block_limits limits;
  /* Largest vector a single pwritev accepts, and the largest merged
   * write the queue may build (the max_sectors analogue).
   */
  uint32_t max_write;
  int max_iov;
  /* Memory alignment the data of pwritev must have (O_DIRECT); 0 or 1
   * when any buffer will do.
   */
  uint32_t buffer_align;
  /* Offsets and lengths of every pread and io must be multiples of this
   * (a power of 2; O_DIRECT's granule); 0 or 1 when any will do.  The
   * queue serves requests that are not (server/queue/queue_align.c), so such
   * a backend still advertises limits.minimum 1.
   */
  uint32_t min_block;
  /* Operations the queue may have outstanding at once (asynchronous
   * backends only): its batches and the writes going around it together.
   */
  unsigned max_in_flight;
  /* read-target=auto never sets a target below this (0: the elevator's
   * own floor, elevator_reads.c): a backend whose reads vary more than
   * its fastest one says.
   */
  uint64_t read_target_floor_ns;
  /* Synchronous writes, zeroes and trims that may run at once, each from
   * its own thread, on ranges that never overlap; 0 means 1.
   */
  unsigned max_writers;
  /* A zero can be queued as a fast zero: the backend zeroes a range
   * without writing every byte.
   */
  bool can_fast_zero;
  /* io honours fua itself; without it, fua is refused (EINVAL) and the
   * caller flushes instead.
   */
  bool can_fua;
  /* A write returns once its data is in memory (the page cache, RAM),
   * without waiting for a device: the order writes arrive in costs
   * nothing, so one the queue cannot merge goes around it
   * (queue_bypass.c).
   */
  bool writes_to_memory;
  /* A read waits behind the writes sent before it (asynchronous backends:
   * one ordered connection, a remote's workers): while reads compete,
   * the queue forwards large writes as they came instead of merging
   * them (queue_bypass.c).
   */
  bool reads_behind_writes;
  /* A trimmed range reads back as zeroes on this backend. */
  bool trim_reads_zero;
  char *description;            /* "file /srv/db.img (O_DIRECT)" */
};

/* Constructors: NULL with errno set and the reason already logged. */
struct backend *backend_file_open (const char *path, bool direct,
                                   bool readonly);
struct backend *backend_memory_new (uint64_t size);
/* A remote NBD export through libnbd.  reconnect_ns > 0 retries a lost
 * connection with backoff starting there.  connect_timeout_ns bounds each
 * dial: the connection and the whole NBD handshake.
 */
struct backend *backend_nbd_open (const char *uri, uint64_t reconnect_ns,
                                  uint64_t connect_timeout_ns);

/* Every backend refuses a range past its end the same way. */
static inline bool
backend_range_ok (const struct backend *b, uint64_t count, uint64_t offset)
{
  if (count > b->size || offset > b->size - count) {
    errno = EINVAL;
    return false;
  }
  return true;
}

static inline bool
backend_is_async (const struct backend *b)
{
  return b->ops->start != NULL;
}

/* How a synchronous backend performs each kind of io. */
struct backend_sync_ops {
  int (*pwritev) (struct backend *, const struct iovec *iov, int iovcnt,
                  uint64_t offset);
  /* Must leave the range reading as zeroes.  may_trim allows holes. */
  int (*zero) (struct backend *, uint64_t count, uint64_t offset,
               bool may_trim);
  /* Advisory: may do nothing. */
  int (*trim) (struct backend *, uint64_t count, uint64_t offset);
};

/* A synchronous backend's ops->io: the function for io's kind, then for
 * FUA the backend's flush.  BACKEND_IO_DONE, or -1 with errno.
 */
int backend_io_by_kind (struct backend *, const struct backend_io *,
                        const struct backend_sync_ops *);

/* A remote's error as the engine passes it on: the errnos NBD carries
 * stay, anything else (a lost connection, a timeout) becomes EIO.  Not
 * ESHUTDOWN: nbdkit sends it to the client as NBD_ESHUTDOWN, which says
 * that this server is going away (plugqctl remove --drain uses it so);
 * a remote's trouble is not that.
 */
int backend_client_errno (int err);

/* Performs io and waits for it, on any backend: for callers outside the
 * queue's dispatch (tests, a wrapper backend).  0, or -1 with errno.
 */
int backend_io_wait (struct backend *, struct backend_io *);

/* The same, one operation at a time. */
int backend_pwritev (struct backend *, const struct iovec *iov, int iovcnt,
                     uint64_t offset, bool fua);
int backend_zero (struct backend *, uint64_t count, uint64_t offset,
                  bool may_trim, bool fua);
int backend_trim (struct backend *, uint64_t count, uint64_t offset,
                  bool fua);

static inline void
backend_close (struct backend *b)
{
  if (b)
    b->ops->close (b);
}

#endif /* PLUGQ_BACKEND_H */
