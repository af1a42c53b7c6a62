/* plugq: reaching an RBD image: the cluster handle, its settings, the
 * connection, the pool and the image.
 *
 * Every failure becomes one log_error line that names what was wrong in
 * the user's terms (the pool, the image, the key, the monitors) rather
 * than librados's errno alone.  Connecting is always bounded
 * (client_mount_timeout: the target's timeout, or RBD_CONNECT_TIMEOUT_S
 * with ceph-timeout=0), so unreachable monitors fail the start.  Requests
 * to monitors and OSDs (rados_mon_op_timeout, rados_osd_op_timeout) wait
 * for the cluster with ceph-timeout=0, the default, as krbd and qemu's
 * rbd driver do: Ceph marks a hung OSD down after its heartbeat grace
 * (20 s and more) and resends the requests, and a timeout near that
 * turned routine recoveries into EIO.  With a delay they fail after it,
 * for whoever would rather see an error.
 *
 * librbd's own cache is turned off: plugq's queue already merges and
 * acknowledges writes, and a second write-back cache below it would only
 * copy the data again and report write-out errors later than the
 * request that caused them.  Ceph's logging to stderr is turned off too,
 * so that the line logged here is the only one on the terminal.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_rbd.h"
#include "common/log.h"

/* Sets one option, after the configuration file, so it wins. */
static int
set_option (rados_t cluster, const struct rbd_target *t, const char *name,
            const char *value)
{
  int r = rados_conf_set (cluster, name, value);

  if (r < 0) {
    log_error ("rbd=%s: cannot set the Ceph option %s=%s: %s",
               t->spec, name, value, strerror (-r));
    errno = -r;
    return -1;
  }
  return 0;
}

/* Each request's timeout in whole seconds (rounded up), 0 for none. */
static uint64_t
request_timeout_s (const struct rbd_target *t)
{
  return (t->timeout_ns + 999999999) / 1000000000;
}

/* How long connecting may take, in whole seconds. */
static uint64_t
connect_timeout_s (const struct rbd_target *t)
{
  return t->timeout_ns ? request_timeout_s (t) : RBD_CONNECT_TIMEOUT_S;
}

static int
set_options (rados_t cluster, const struct rbd_target *t)
{
  char connect[32], request[32];

  snprintf (connect, sizeof connect, "%" PRIu64, connect_timeout_s (t));
  snprintf (request, sizeof request, "%" PRIu64, request_timeout_s (t));
  if (set_option (cluster, t, "client_mount_timeout", connect) == -1
      || set_option (cluster, t, "rados_mon_op_timeout", request) == -1
      || set_option (cluster, t, "rados_osd_op_timeout", request) == -1
      || set_option (cluster, t, "rbd_cache", "false") == -1
      || set_option (cluster, t, "log_to_stderr", "false") == -1
      || set_option (cluster, t, "err_to_stderr", "false") == -1)
    return -1;
  if (t->keyring && set_option (cluster, t, "keyring", t->keyring) == -1)
    return -1;
  return 0;
}

static int
read_conf (rados_t cluster, const struct rbd_target *t)
{
  int r = rados_conf_read_file (cluster, t->conf);

  if (r < 0) {
    if (t->conf)
      log_error ("rbd=%s: ceph-conf=%s: cannot read it: %s",
                 t->spec, t->conf, strerror (-r));
    else
      log_error ("rbd=%s: no Ceph configuration found (give "
                 "ceph-conf=PATH, or set CEPH_CONF)", t->spec);
    errno = -r;
    return -1;
  }
  /* CEPH_ARGS, as the ceph and rbd tools read it. */
  rados_conf_parse_env (cluster, NULL);
  return 0;
}

/* What librados says when it cannot connect, in the user's terms.  A
 * keyring without the client's key and a wrong key look the same
 * (EACCES); ENOENT is no keyring at all.
 */
static void
log_connect_error (rados_t cluster, const struct rbd_target *t, int err)
{
  const char *id = t->id ? t->id : "admin";
  char mons[256] = "";

  rados_conf_get (cluster, "mon_host", mons, sizeof mons);
  switch (err) {
  case ETIMEDOUT:
    log_error ("rbd=%s: no answer from the Ceph monitors (%s) within %"
               PRIu64 " s", t->spec, mons[0] ? mons : "none configured",
               connect_timeout_s (t));
    break;
  case EACCES: case EPERM:
    log_error ("rbd=%s: the cluster refused client.%s: wrong key, or none "
               "for it in the keyring", t->spec, id);
    break;
  case ENOENT:
    log_error ("rbd=%s: no keyring for client.%s (give ceph-keyring=PATH, "
               "or keyring= in the Ceph configuration)", t->spec, id);
    break;
  default:
    log_error ("rbd=%s: cannot connect to the Ceph monitors (%s) as "
               "client.%s: %s", t->spec,
               mons[0] ? mons : "none configured", id, strerror (err));
    break;
  }
}

static int
connect_cluster (struct rbd_conn *c, const struct rbd_target *t)
{
  int r = rados_create (&c->cluster, t->id);

  if (r < 0) {
    log_error ("rbd=%s: cannot create a Ceph client%s%s: %s", t->spec,
               t->id ? " for ceph-id=" : "", t->id ? t->id : "",
               strerror (-r));
    c->cluster = NULL;
    errno = -r;
    return -1;
  }
  if (read_conf (c->cluster, t) == -1 || set_options (c->cluster, t) == -1)
    return -1;
  if ((r = rados_connect (c->cluster)) < 0) {
    log_connect_error (c->cluster, t, -r);
    errno = -r;
    return -1;
  }
  return 0;
}

static int
open_pool (struct rbd_conn *c, const struct rbd_target *t)
{
  int r = rados_ioctx_create (c->cluster, t->pool, &c->ioctx);

  if (r < 0) {
    c->ioctx = NULL;
    if (r == -ENOENT)
      log_error ("rbd=%s: no pool '%s' in the cluster", t->spec, t->pool);
    else
      log_error ("rbd=%s: cannot open pool '%s': %s", t->spec, t->pool,
                 strerror (-r));
    errno = -r;
    return -1;
  }
  if (t->ns)
    rados_ioctx_set_namespace (c->ioctx, t->ns);
  return 0;
}

static int
open_image (struct rbd_conn *c, const struct rbd_target *t)
{
  int r = rbd_open (c->ioctx, t->image, &c->image, NULL);

  if (r < 0) {
    c->image = NULL;
    if (r == -ENOENT)
      log_error ("rbd=%s: no image '%s' in pool '%s'%s%s%s", t->spec,
                 t->image, t->pool, t->ns ? " (namespace '" : "",
                 t->ns ? t->ns : "", t->ns ? "')" : "");
    else if (r == -EPERM || r == -EACCES)
      log_error ("rbd=%s: the cluster does not let this client open image "
                 "'%s' (its caps?): %s", t->spec, t->image, strerror (-r));
    else if (r == -EROFS)
      log_error ("rbd=%s: image '%s' is read-only", t->spec, t->image);
    else
      log_error ("rbd=%s: cannot open image '%s': %s", t->spec, t->image,
                 strerror (-r));
    errno = -r;
    return -1;
  }
  return 0;
}

int
rbd_conn_open (struct rbd_conn *c, const struct rbd_target *t)
{
  *c = (struct rbd_conn) { .cluster = NULL };
  if (connect_cluster (c, t) == -1 || open_pool (c, t) == -1
      || open_image (c, t) == -1) {
    int err = errno;

    rbd_conn_close (c);
    errno = err;
    return -1;
  }
  return 0;
}

/* Whether option `name` is listed with `value`; an option librbd does
 * not list does not delay writes.
 */
static bool
option_is (const rbd_config_option_t *options, int n, const char *name,
           const char *value)
{
  for (int i = 0; i < n; i++)
    if (strcmp (options[i].name, name) == 0)
      return strcmp (options[i].value, value) == 0;
  return true;
}

bool
rbd_conn_writes_durable (const struct rbd_conn *c)
{
  rbd_config_option_t *options;
  int n = 0;
  bool durable;

  if (rbd_config_image_list (c->image, NULL, &n) != -ERANGE || n <= 0
      || (options = calloc (n, sizeof *options)) == NULL)
    return false;
  if (rbd_config_image_list (c->image, options, &n) < 0) {
    free (options);
    return false;
  }
  durable = option_is (options, n, "rbd_cache", "false")
    && option_is (options, n, "rbd_persistent_cache_mode", "disabled");
  rbd_config_image_list_cleanup (options, n);
  free (options);
  return durable;
}

void
rbd_conn_close (struct rbd_conn *c)
{
  if (c->image)
    rbd_close (c->image);
  if (c->ioctx)
    rados_ioctx_destroy (c->ioctx);
  if (c->cluster)
    rados_shutdown (c->cluster);
  *c = (struct rbd_conn) { .cluster = NULL };
}
