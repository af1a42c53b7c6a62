/* plugq: the inside of the nbd backend, shared by the files that make it
 * up.  Internal to server/; the API is backend_nbd_open (backend.h).
 *
 *   backend_nbd.c             the ops (read, write, zero, trim, flush,
 *                             cache, extents), opening, the backend type
 *   backend_nbd_commands.c    struct nbd_op: issuing NBD commands in
 *                             chunks, completing them, waiting for them
 *   backend_nbd_connection.c  the remote's capabilities, the libev loop
 *                             thread, dialling, reconnecting, closing
 */
#ifndef PLUGQ_BACKEND_NBD_H
#define PLUGQ_BACKEND_NBD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <ev.h>
#include <libnbd.h>

#include "backends/backend.h"
#include "common/lock.h"

#define NBD_DEFAULT_PAYLOAD (32 * 1024 * 1024) /* the spec's default max */
#define NBD_DEFAULT_CONNECT_TIMEOUT_NS (UINT64_C (30) * 1000 * 1000 * 1000)

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

/* Operations the queue may keep outstanding on one remote. */
#define MAX_IN_FLIGHT 16

struct nbd_backend {
  struct backend b;
  char *uri;
  struct remote_caps caps;      /* read once, at open */
  uint64_t reconnect_ns;
  uint64_t backoff_ns;
  uint64_t connect_timeout_ns;  /* bound on one dial, handshake included */
  int stop_fd;                  /* eventfd, readable once closing: ends a
                                 * dial in progress (-1 if none) */

  /* Guards h and connected: commands are issued under it, so the loop
   * thread can swap a reconnected handle in safely.  The loop thread,
   * which alone replaces h, reads h and connected without it: it runs
   * once per reply, and taking the lock there made it wait for every
   * command being sent.
   */
  struct lock lock;
  struct nbd_handle *h;
  _Atomic bool connected;
  bool lost;                    /* loop thread: loss handled, redialling */
  const char *refused;          /* loop thread: why, logged once per loss */

  struct ev_loop *loop;
  ev_io io;
  int watched_fd;               /* loop thread: its own dup of h's socket,
                                 * or -1 */
  ev_async wake;
  ev_async stop;
  ev_timer retry;
  pthread_t thread;
  bool started;
  void *zeroes;                 /* max_payload zero bytes, to emulate zero */

  /* Finished ops, for the next commands: one op per write would cost a
   * calloc and a free.  Its own lock, since ops are freed on the loop
   * thread and taken by whoever issues a command.
   */
  struct lock spare_lock;
  struct nbd_op *spare_ops;     /* linked through nb */
  unsigned nr_spare_ops;
};

static inline struct nbd_backend *
to_nbd (struct backend *b)
{
  return (struct nbd_backend *) b;
}

/* One engine operation, possibly sent as several NBD commands. */
struct nbd_op {
  struct nbd_backend *nb;
  struct nbd_op *next_spare;    /* on nb->spare_ops */
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

typedef int64_t (*issue_fn) (struct nbd_handle *, struct nbd_op *,
                             const void *arg, uint64_t count,
                             uint64_t offset);

/* backend_nbd_commands.c: an op holds the submitter's reference from
 * op_new until op_put or op_wait; each command sent holds another.
 */
struct nbd_op *op_new (struct nbd_backend *nb);
/* At close, once no command is in flight. */
void ops_free_spares (struct nbd_backend *nb);
void op_put (struct nbd_op *op);
void op_fail (struct nbd_op *op, int err);
int op_wait (struct nbd_op *op, int issue_result);
int run_sync (struct nbd_backend *nb, issue_fn fn, void *buf, uint64_t count,
              uint64_t offset, uint64_t chunk);
int issue_chunks (struct nbd_backend *nb, struct nbd_op *op, issue_fn fn,
                  const char *arg, bool arg_advances, uint64_t count,
                  uint64_t offset, uint64_t chunk);

/* One issue_fn per NBD command, for issue_chunks and run_sync. */
#define ISSUE_FN(name)                                                  \
  int64_t name (struct nbd_handle *h, struct nbd_op *op, const void *arg, \
                uint64_t count, uint64_t offset)
ISSUE_FN (issue_pread);
ISSUE_FN (issue_pwrite);
ISSUE_FN (issue_zero_no_hole);
ISSUE_FN (issue_zero_may_trim);
ISSUE_FN (issue_trim);
ISSUE_FN (issue_cache);
ISSUE_FN (issue_flush);
ISSUE_FN (issue_block_status);

/* backend_nbd_connection.c */
int read_capabilities (struct nbd_handle *h, struct remote_caps *c);
struct nbd_handle *dial (struct nbd_backend *nb, bool quiet);
int remote_start (struct backend *b);
void nbd_backend_close (struct backend *b);

#endif /* PLUGQ_BACKEND_NBD_H */
