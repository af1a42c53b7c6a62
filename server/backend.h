/* plugq: the storage under one disk.
 *
 * A backend is what a disk's queue dispatches to: a file or block device,
 * sparse memory, or a remote NBD export.  The queue owns all ordering, so a
 * backend only has to perform its writes, zeroes, trims and flushes one at
 * a time correctly (or max_writers at a time, never two over the same
 * bytes); it may be called for those from any thread that holds one of the
 * disk's dispatch tokens, and for reads, extents and cache from any request
 * thread at the same time.
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

#include "extents.h"

struct block_limits {
  uint32_t minimum;             /* power of 2, 1 .. 64K */
  uint32_t preferred;           /* power of 2, >= minimum */
  uint32_t maximum;             /* largest request the backend accepts */
};

struct backend;

/* An asynchronous write, zero or trim (see backend_ops.submit). */
enum backend_io_kind { BACKEND_WRITE, BACKEND_ZERO, BACKEND_TRIM };

struct backend_io {
  enum backend_io_kind kind;
  const struct iovec *iov;      /* BACKEND_WRITE */
  int iovcnt;
  uint64_t offset;
  uint64_t count;
  bool may_trim;                /* BACKEND_ZERO */
  /* Called once when it is done: from the backend's thread, or from
   * inside submit itself when it finishes (or fails) at once, so submit
   * must never be called with a lock done takes.
   */
  void (*done) (struct backend_io *, int err);
};

struct backend_ops {
  const char *kind;             /* "file", "memory", "nbd" */
  int (*pread) (struct backend *, void *buf, size_t count, uint64_t offset);
  int (*pwritev) (struct backend *, const struct iovec *iov, int iovcnt,
                  uint64_t offset);
  /* Must leave the range reading as zeroes.  may_trim allows holes. */
  int (*zero) (struct backend *, uint64_t count, uint64_t offset,
               bool may_trim);
  /* Advisory: may do nothing. */
  int (*trim) (struct backend *, uint64_t count, uint64_t offset);
  int (*flush) (struct backend *);
  /* Appends extents covering at least [offset, offset+1) in order. */
  int (*extents) (struct backend *, uint64_t count, uint64_t offset,
                  struct extent_list *);
  int (*cache) (struct backend *, uint64_t count, uint64_t offset);
  void (*close) (struct backend *);
  /* Optional, for backends with their own threads (started after nbdkit
   * forks) that accept several operations at once: submit starts io and
   * returns 0, or -1 with errno if it could not be started.
   */
  int (*start) (struct backend *);
  int (*submit) (struct backend *, struct backend_io *);
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
  /* Operations the queue may have outstanding at once (submit only). */
  unsigned max_in_flight;
  /* Synchronous writes, zeroes and trims that may run at once, each from
   * its own thread, on ranges that never overlap; 0 means 1.
   */
  unsigned max_writers;
  /* A zero can be queued as a fast zero: the backend zeroes a range
   * without writing every byte.
   */
  bool can_fast_zero;
  /* A trimmed range reads back as zeroes on this backend. */
  bool trim_reads_zero;
  char *description;            /* "file /srv/db.img (O_DIRECT)" */
};

/* Constructors: NULL with errno set and the reason already logged. */
struct backend *backend_file_open (const char *path, bool direct,
                                   bool readonly);
struct backend *backend_memory_new (uint64_t size);
/* A remote NBD export through libnbd.  reconnect_ns > 0 retries a lost
 * connection with backoff starting there.
 */
struct backend *backend_nbd_open (const char *uri, uint64_t reconnect_ns);

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

static inline void
backend_close (struct backend *b)
{
  if (b)
    b->ops->close (b);
}

#endif /* PLUGQ_BACKEND_H */
