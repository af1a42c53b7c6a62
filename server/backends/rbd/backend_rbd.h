/* plugq: the inside of the rbd backend, shared by the files that make it
 * up.  Internal to server/; the backend is reached through its type,
 * backend_type_rbd (backend_type.h), whose open returns it.
 *
 *   backend_rbd.c          the ops (read, write, zero, trim, flush,
 *                          extents), opening, starting, closing
 *   backend_rbd_cluster.c  connecting to the cluster and opening the
 *                          image, with one clear line for each failure
 *   backend_rbd_args.c     the rbd= value and the ceph-* keys: the type
 */
#ifndef PLUGQ_BACKEND_RBD_H
#define PLUGQ_BACKEND_RBD_H

#include <stdatomic.h>
#include <stdint.h>

#include <rados/librados.h>
#include <rbd/librbd.h>

#include "backends/backend.h"

/* Operations the queue may keep outstanding on one image: enough merged
 * writes to keep several OSDs busy, each one librbd request.
 */
#define RBD_MAX_IN_FLIGHT 32

/* The largest read, write, zero or trim asked of librbd at once. */
#define RBD_MAX_REQUEST (32 * 1024 * 1024)

/* Objects one extents call looks at (rbd_diff_iterate2 asks RADOS about
 * each): 1 GiB of an image of 4 MiB objects.
 */
#define RBD_EXTENTS_OBJECTS 256

/* Unless ceph-timeout= says otherwise: how long connecting, and then
 * each request to a monitor or an OSD, may take before it fails.
 */
#define RBD_DEFAULT_TIMEOUT_NS (UINT64_C (30) * 1000 * 1000 * 1000)

/* Where the image is and how to reach it, as the configuration gave it. */
struct rbd_target {
  char *spec;                   /* the rbd= value, for messages */
  char *pool;
  char *ns;                     /* NULL: the pool's default namespace */
  char *image;
  char *conf;                   /* absolute; NULL: librados's search */
  char *id;                     /* client id ("admin"); NULL: default */
  char *keyring;                /* absolute; NULL: from the conf */
  uint64_t timeout_ns;
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

/* backend_rbd_args.c: copies and frees a target. */
int rbd_target_copy (struct rbd_target *dst, const struct rbd_target *src);
void rbd_target_free (struct rbd_target *);

/* backend_rbd.c: the backend on t's image, checked by connecting once
 * (so a wrong pool, image or key fails on the terminal) and reconnected
 * by start.  NULL with errno set, the reason logged.
 */
struct backend *backend_rbd_open (const struct rbd_target *t);

#endif /* PLUGQ_BACKEND_RBD_H */
