/* plugq: the inside of the nbd backend, shared by the files that make it
 * up.  Internal to server/; the API is backend_nbd_open (backend.h).
 *
 *   backend_nbd.c             the ops (read, write, zero, trim, flush,
 *                             cache, extents), opening, the backend type
 *   backend_nbd_commands.c    struct nbd_op: issuing NBD commands in
 *                             chunks, completing them, waiting for them
 *   backend_nbd_connection.c  the remote's capabilities, the libev loop
 *                             thread, dialling, reconnecting, closing
 *   backend_nbd_replay.c      with reconnect=: the log of completed
 *                             writes no flush covers yet, replaying it
 *                             on a new connection, the backend's own
 *                             flush that bounds it
 *   backend_nbd_reader.c      the second connection reads take on a
 *                             remote that offers multi-conn: dialling it
 *                             on the loop, reading on it, losing it
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
#define ZERO_CHUNK (1024 * 1024 * 1024)        /* under NBD's 32-bit count */
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
  bool can_multi_conn;          /* not required again on reconnect: only
                                 * the reader depends on it, and checks
                                 * its own connection */
};

/* Operations the queue may keep outstanding on one remote. */
#define MAX_IN_FLIGHT 16

/* One write, zero or trim the remote completed, kept until a flush
 * covers it (backend_nbd_replay.c).  A write's data is a copy, made
 * before it is sent, and the write is sent from it.
 */
struct replay_entry {
  struct replay_entry *next;
  uint64_t seq;                 /* completion order */
  enum op_kind kind;            /* OP_WRITE, OP_ZERO or OP_TRIM */
  bool may_trim;                /* OP_ZERO */
  bool fua;
  uint64_t offset;
  uint64_t count;
  char data[];                  /* OP_WRITE: count bytes */
};

/* What a restarted remote may have lost: every write, zero and trim
 * completed on the connection since the last flush that covers it, in
 * completion order.  Only with reconnect= on a remote that can flush
 * (one that cannot writes through, so what it completed is durable).
 */
struct replay_log {
  bool enabled;
  struct lock lock;             /* guards what follows, but gen's reads */
  struct replay_entry *first;
  struct replay_entry **last_next;
  uint64_t next_seq;
  uint64_t bytes;               /* write data held */
  /* The connection entries are recorded for; raised when a lost one's
   * entries are taken to be replayed, so an op that completed there
   * but is recorded later is sent again instead (replay_record).
   */
  _Atomic unsigned gen;
  bool flushing;                /* the backend's own flush is out */
  uint64_t flush_mark;          /* ... and covers seq below this */
  _Atomic bool flush_wanted;    /* for the loop thread to send it */
  bool lost;                    /* a replay the remote refused */
};

/* The second connection, for reads only (backend_nbd_reader.c).  Reads
 * that share the writes' connection wait behind the write data ahead of
 * them on the socket and for the remote workers that connection's
 * writes hold.  A remote that offers multi-conn keeps its connections
 * consistent, so a read there sees every write another connection
 * completed.
 */
enum reader_state {
  READER_NONE,                  /* none; maybe a redial timer pending */
  READER_DIALLING,              /* handshake on the loop, deadline set */
  READER_UP,                    /* reads go here while up is true */
  READER_DRAINING,              /* takes no reads; closed once those in
                                 * flight are answered */
  READER_REFUSED,               /* no multi-conn: never dialled again */
};

struct nbd_reader {
  /* Guards h and up: reads are issued under it, so the loop thread can
   * close a lost handle once no thread can be sending on it.  Only the
   * loop thread sets h and raises up; a reader that finds the
   * connection dead lowers up and wakes the loop.
   */
  struct lock lock;
  struct nbd_handle *h;
  _Atomic bool up;
  _Atomic bool look;            /* a reader asks the loop to look */
  /* Loop thread only. */
  enum reader_state state;
  ev_io io;
  int watched_fd;               /* its own dup of h's socket, or -1 */
  ev_timer timer;               /* the handshake's deadline, or a redial */
  uint64_t backoff_ns;
  const char *said;             /* why it is down, logged once */
  const char *drain_why;        /* READER_DRAINING: why, for the close */
};

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

  struct replay_log replay;

  /* With reconnect=: writes, zeroes and trims of the queue that a lost
   * connection left undone, or that came while the remote was away, in
   * the order they were first sent (issue_seq); the queue still waits
   * for each.  Sent again on the next connection.  held_lock is taken
   * last, under nb->lock or a libnbd callback, and nothing under it.
   */
  struct lock held_lock;
  struct nbd_op *held;          /* linked through next_held */
  _Atomic unsigned nr_held;
  bool held_said;               /* loop thread: logged for this loss */
  _Atomic uint64_t next_issue_seq;

  struct nbd_reader reader;
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
  /* Asynchronous ops with reconnect= only. */
  struct replay_entry *entry;   /* the log's copy, recorded at success */
  unsigned gen;                 /* the connection it was sent on */
  uint64_t issue_seq;
  _Atomic bool lost;            /* its connection went: send it again */
  struct nbd_op *next_held;     /* on nb->held */
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
/* Has the loop thread look at its connections again (look_again). */
void wake_loop (struct nbd_backend *nb);
void op_fail (struct nbd_op *op, int err);
int op_wait (struct nbd_op *op, int issue_result);
int run_sync (struct nbd_backend *nb, issue_fn fn, void *buf, uint64_t count,
              uint64_t offset, uint64_t chunk);
int issue_chunks (struct nbd_backend *nb, struct nbd_op *op, issue_fn fn,
                  const char *arg, bool arg_advances, uint64_t count,
                  uint64_t offset, uint64_t chunk);
/* The same on h, which the caller holds nb->lock for; no check that it
 * is connected.
 */
int issue_chunks_on (struct nbd_backend *nb, struct nbd_handle *h,
                     struct nbd_op *op, issue_fn fn, const char *arg,
                     bool arg_advances, uint64_t count, uint64_t offset,
                     uint64_t chunk);
/* The same, for a caller that holds whichever lock guards h. */
int issue_chunks_h (struct nbd_handle *h, struct nbd_op *op, issue_fn fn,
                    const char *arg, bool arg_advances, uint64_t count,
                    uint64_t offset, uint64_t chunk);
/* op_wait that also says whether a command was left unanswered by its
 * dying connection (libnbd's ENOTCONN), which op_wait reports as EIO.
 */
int op_wait_lost (struct nbd_op *op, int issue_result, bool *lost);
/* After a command could not be sent on h (nb->lock held): whether its
 * connection is gone, then marked lost if h is the current one;
 * otherwise libnbd's error is logged.
 */
bool connection_gone (struct nbd_backend *nb, struct nbd_handle *h);
/* Sends an asynchronous op's commands on the current connection, or,
 * with reconnect= while it is away, holds the op for the next one.
 */
void op_start_io (struct nbd_op *op);
/* nb->lock held: sends every held op again on h and takes them off the
 * list.  Returns them linked through next_held, for op_put_all once the
 * lock is dropped, and their number in *n.
 */
struct nbd_op *resend_held (struct nbd_backend *nb, struct nbd_handle *h,
                            unsigned *n);
void op_put_all (struct nbd_op *list);
/* At close, once the loop thread is gone: fails what is still held. */
void fail_held (struct nbd_backend *nb);

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

/* backend_nbd.c: sends op->io's commands on h (nb->lock held). */
int op_send_io (struct nbd_backend *nb, struct nbd_handle *h,
                struct nbd_op *op);

/* backend_nbd_replay.c */
void replay_init (struct replay_log *log, bool enabled);
void replay_destroy (struct replay_log *log);
/* The entry io will be recorded as, with a copy of its data; NULL with
 * errno ENOMEM.
 */
struct replay_entry *replay_entry_new (const struct backend_io *io);
void replay_free_list (struct replay_entry *list);
/* e completed on connection gen: appended, and true, unless that
 * connection was already given up (false: send the op again).  Sets
 * *flush if the log outgrew its limit and a flush of its own is due.
 */
bool replay_record (struct replay_log *log, struct replay_entry *e,
                    unsigned gen, bool *flush);
/* A flush is about to be sent: once it succeeds, replay_trim (mark)
 * drops what completed before.
 */
uint64_t replay_mark (struct replay_log *log);
void replay_trim (struct replay_log *log, uint64_t mark);
/* Loop thread, connected: sends the backend's own flush if one is due. */
void replay_flush_if_wanted (struct nbd_backend *nb);
/* Reconnecting: gives the lost connection up and takes its entries. */
struct replay_entry *replay_take (struct replay_log *log, uint64_t *ops,
                                  uint64_t *bytes);
/* A replay that could not finish: the entries go back, first. */
void replay_put_back (struct replay_log *log, struct replay_entry *list);
/* Loop thread, reconnecting: takes the log and writes it on h (not yet
 * published) with libnbd's blocking calls, then flushes; *ops entries
 * with *bytes of data.  -1 if h's connection went (the log is put
 * back).  Entries the remote refused are lost: logged, and the next
 * flush fails (replay_take_loss).
 */
int replay_log_on (struct nbd_backend *nb, struct nbd_handle *h,
                   uint64_t *ops, uint64_t *bytes);
/* Whether a replay was refused since the last call. */
bool replay_take_loss (struct replay_log *log);

/* backend_nbd_reader.c */
void reader_init (struct nbd_backend *nb);
/* Loop thread: at start, and whenever the reader may need looking at
 * (a reader woke the loop, the main connection came back).
 */
void reader_start (struct nbd_backend *nb);
void reader_look (struct nbd_backend *nb);
/* Loop thread: the main connection was lost; so is the reader. */
void reader_main_lost (struct nbd_backend *nb);
/* Reads [offset, offset+count) on the read connection: 0 or -1 with
 * errno as remote_pread, or READER_NOT_TAKEN when there is none up (or
 * it went during this read), for the caller to read on the main one.
 */
#define READER_NOT_TAKEN (-2)
int reader_pread (struct nbd_backend *nb, void *buf, uint64_t count,
                  uint64_t offset);
/* At close, once the loop thread is gone. */
void reader_close (struct nbd_backend *nb);

/* backend_nbd_connection.c */
/* Loop thread: watch h's socket, through the loop's own duplicate of it
 * in *fd, for what libnbd wants (dir, from nbd_aio_get_direction); and
 * stop, closing the duplicate, once h is gone.
 */
void socket_watch (struct ev_loop *loop, ev_io *io, int *fd,
                   struct nbd_handle *h, unsigned dir);
void socket_forget (struct ev_loop *loop, ev_io *io, int *fd);
int read_capabilities (struct nbd_handle *h, struct remote_caps *c);
struct nbd_handle *dial (struct nbd_backend *nb, bool quiet);
int remote_start (struct backend *b);
void nbd_backend_close (struct backend *b);

#endif /* PLUGQ_BACKEND_NBD_H */
