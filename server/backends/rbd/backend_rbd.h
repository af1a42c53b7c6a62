/* plugq: the inside of the rbd backend, shared by the files that make it
 * up.  Internal to server/; the backend is reached through its type,
 * backend_type_rbd (backend_type.h), whose open returns it.
 *
 *   backend_rbd.c          the ops (read, write, zero, trim, flush,
 *                          extents), opening, starting, closing
 *   backend_rbd_cluster.c  connecting to the cluster and opening the
 *                          image, with one clear line for each failure
 *   backend_rbd_args.c     the rbd= value and the ceph-* keys: the type
 *   backend_rbd_watch.c    the watch over the cluster's answers: a disk
 *                          that waits for the cluster says so in the log
 */
#ifndef PLUGQ_BACKEND_RBD_H
#define PLUGQ_BACKEND_RBD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <rados/librados.h>
#include <rbd/librbd.h>

#include "backends/backend.h"
#include "common/lock.h"

/* Operations the queue may keep outstanding on one image: enough merged
 * writes to keep several OSDs busy, each one librbd request.
 */
#define RBD_MAX_IN_FLIGHT 32

/* read-target=auto's floor on an RBD image.  A read crosses the network
 * to an OSD whose queue holds our own writes, so reads vary far more than
 * the fastest one says: at twice the fastest most reads miss, and writes
 * sit at the elevator's smallest allowance.  The value is the sweep's in
 * docs/tuning.md ("read-target=auto, and its floor on RBD").
 */
#define RBD_READ_TARGET_FLOOR_NS (1250 * 1000ull)

/* The largest read, write, zero or trim asked of librbd at once. */
#define RBD_MAX_REQUEST (32 * 1024 * 1024)

/* Objects one extents call looks at (rbd_diff_iterate2 asks RADOS about
 * each): 1 GiB of an image of 4 MiB objects.
 */
#define RBD_EXTENTS_OBJECTS 256

/* The default ceph-timeout, 0: requests wait for the cluster however
 * long it takes, as krbd and qemu's rbd driver do.  A delay instead fails
 * each request that takes longer (rados_osd_op_timeout,
 * rados_mon_op_timeout), and bounds connecting too.
 */
#define RBD_DEFAULT_TIMEOUT_NS 0

/* With ceph-timeout=0: how long connecting may take
 * (client_mount_timeout), so that unreachable monitors still fail the
 * start with one line instead of hanging it.
 */
#define RBD_CONNECT_TIMEOUT_S 30

/* How long requests may be in flight with none answered before the log
 * says the disk waits for the cluster (once per stall); while nbdkit shuts
 * down and the drain waits, after RBD_DRAIN_REPORT_NS already.
 */
#define RBD_STALL_REPORT_NS (UINT64_C (10) * 1000 * 1000 * 1000)
#define RBD_DRAIN_REPORT_NS (UINT64_C (1) * 1000 * 1000 * 1000)

/* Where the image is and how to reach it, as the configuration gave it. */
struct rbd_target {
  char *spec;                   /* the rbd= value, for messages */
  char *pool;
  char *ns;                     /* NULL: the pool's default namespace */
  char *image;
  char *conf;                   /* absolute; NULL: librados's search */
  char *id;                     /* client id ("admin"); NULL: default */
  char *keyring;                /* absolute; NULL: from the conf */
  uint64_t timeout_ns;          /* ceph-timeout; 0: wait */
};

/* A stall as the watch sees it (backend_rbd_watch.c): requests in
 * flight and none answered since quiet_since_ns.  Touched by the watch
 * thread only.
 */
struct rbd_stall {
  uint64_t answered;            /* the answers counted at the last look */
  uint64_t quiet_since_ns;      /* the last look that saw an answer, or
                                 * nothing in flight */
  bool reported;                /* this stall is in the log */
  bool drain_reported;          /* ... and that the drain waits for it */
};

/* What a look at the cluster's answers found to log. */
enum rbd_stall_news {
  RBD_STALL_NONE,
  RBD_STALL_BEGAN,              /* waiting for RBD_STALL_REPORT_NS */
  RBD_STALL_DRAIN,              /* the drain waits, RBD_DRAIN_REPORT_NS */
  RBD_STALL_ENDED,              /* answered again after a reported stall */
};

/* One connection to the cluster with the image open on it. */
struct rbd_conn {
  rados_t cluster;
  rados_ioctx_t ioctx;
  rbd_image_t image;
};

struct rbd_backend {
  struct backend b;
  struct rbd_target t;          /* a copy: open's args may go first */
  uint64_t object_size;
  /* Set by start (after nbdkit forks), cleared by close: librados's
   * threads do not survive a fork, so open only checks the image.
   */
  struct rbd_conn conn;
  bool started;
  /* Set by start: a completed write is on disk on every replica, so a
   * FUA operation needs no flush after it (rbd_conn_writes_durable).
   */
  bool writes_durable;
  /* Asynchronous operations submitted and not yet completed.  Also the
   * release/acquire pair between a submitter and librbd's completion
   * thread.
   */
  _Atomic unsigned in_flight;
  /* Synchronous calls (reads, flushes, extents) in progress. */
  _Atomic unsigned calls_in_flight;
  /* Every answer from librbd, asynchronous or not, failed or not: what
   * the watch counts as the cluster's progress.
   */
  _Atomic uint64_t answered;
  /* Set once the queue's final drain starts (nbdkit shuts down). */
  _Atomic bool draining;
  /* The watch thread, from start to close. */
  pthread_t watch;
  bool watching;
  struct lock watch_lock;       /* protects watch_stopping */
  pthread_cond_t watch_wake;    /* monotonic */
  bool watch_stopping;
};

/* backend_rbd_cluster.c: connects and opens t's image.  0, or -1 with
 * errno set after one log_error line that starts with "rbd=SPEC: "; the
 * connection is then closed again.
 */
int rbd_conn_open (struct rbd_conn *, const struct rbd_target *);
/* Whether librbd completes a write on c's open image only once it is on
 * disk on every replica: neither its cache nor its persistent write-back
 * cache is on for the image, as the client, pool and image settings
 * decide between them.  False when librbd cannot say.
 */
bool rbd_conn_writes_durable (const struct rbd_conn *c);
/* Closes the image (releasing its lock), then the connection.  Safe on
 * a connection never or only partly opened.
 */
void rbd_conn_close (struct rbd_conn *);

/* backend_rbd_watch.c: one look at the cluster's answers at now_ns,
 * with busy (requests in flight), the answers counted so far and whether
 * the drain runs: what to log, and for RBD_STALL_ENDED the stall's length
 * in *quiet_ns.
 */
enum rbd_stall_news rbd_stall_look (struct rbd_stall *, uint64_t now_ns,
                                    bool busy, uint64_t answered,
                                    bool draining, uint64_t *quiet_ns);
/* Starts and stops rb's watch thread.  Start: 0, or -1 with errno. */
int rbd_watch_start (struct rbd_backend *rb);
void rbd_watch_stop (struct rbd_backend *rb);

/* backend_rbd_args.c: copies and frees a target. */
int rbd_target_copy (struct rbd_target *dst, const struct rbd_target *src);
void rbd_target_free (struct rbd_target *);

/* backend_rbd.c: the backend on t's image, checked by connecting once
 * (so a wrong pool, image or key fails on the terminal) and reconnected
 * by start.  NULL with errno set, the reason logged.
 */
struct backend *backend_rbd_open (const struct rbd_target *t);

#endif /* PLUGQ_BACKEND_RBD_H */
