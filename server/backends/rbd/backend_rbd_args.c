/* plugq: the rbd backend's configuration and its backend type.
 *
 *   rbd=POOL/IMAGE or rbd=POOL/NAMESPACE/IMAGE   the image
 *   ceph-conf=PATH      the cluster's ceph.conf (default: librados's
 *                       search: $CEPH_CONF, /etc/ceph/ceph.conf, ...)
 *   ceph-id=NAME        the client id, "admin" or "client.admin"
 *   ceph-keyring=PATH   the keyring holding that client's key
 *   ceph-timeout=DELAY  0 (the default): requests wait for the cluster;
 *                       a delay: each request fails after it, and
 *                       connecting is bounded by it
 *
 * The value is only split here: whether the pool and image exist is
 * learnt at open (before nbdkit forks), whose error still reaches the
 * terminal.  A snapshot (IMAGE@SNAP) is refused at once: it is
 * read-only, and a plugq disk is always writable.  Paths are made
 * absolute and checked now, as file= does: nbdkit chdirs to / when it
 * daemonizes.
 */
#include <config.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_rbd.h"
#include "backends/backend_type.h"
#include "common/config_value.h"
#include "common/log.h"

static void *
rbd_new_args (void)
{
  struct rbd_target *t = calloc (1, sizeof *t);

  if (t)
    t->timeout_ns = RBD_DEFAULT_TIMEOUT_NS;
  return t;
}

static void
free_location (struct rbd_target *t)
{
  free (t->spec);
  free (t->pool);
  free (t->ns);
  free (t->image);
  t->spec = t->pool = t->ns = t->image = NULL;
}

/* Splits POOL/IMAGE or POOL/NAMESPACE/IMAGE into t: 0, or -1 when the
 * value has another shape (errno 0) or memory ran out (errno ENOMEM).
 */
static int
split_spec (struct rbd_target *t, const char *value)
{
  const char *s1 = strchr (value, '/');
  const char *s2 = s1 ? strchr (s1 + 1, '/') : NULL;
  const char *image = s2 ? s2 + 1 : s1 ? s1 + 1 : NULL;

  errno = 0;
  if (s1 == NULL || s1 == value || *image == '\0' || strchr (image, '/')
      || (s2 && s2 == s1 + 1))
    return -1;
  t->spec = strdup (value);
  t->pool = strndup (value, s1 - value);
  t->ns = s2 ? strndup (s1 + 1, s2 - s1 - 1) : NULL;
  t->image = strdup (image);
  if (!t->spec || !t->pool || !t->image || (s2 && !t->ns)) {
    free_location (t);
    errno = ENOMEM;
    return -1;
  }
  return 0;
}

static int
rbd_start_key (void *args, const char *disk, const char *value)
{
  struct rbd_target *t = args;

  if (strchr (value, '@')) {
    log_error ("rbd=%s: a snapshot is read-only, and plugq's disks are "
               "writable: give an image, not IMAGE@SNAP (disk=%s)",
               value, disk);
    return -1;
  }
  free_location (t);
  if (split_spec (t, value) == -1) {
    if (errno == ENOMEM)
      log_error ("rbd: %m");
    else
      log_error ("rbd=%s: not POOL/IMAGE or POOL/NAMESPACE/IMAGE "
                 "(disk=%s)", value, disk);
    return -1;
  }
  return 0;
}

/* A path that must exist now, kept absolute. */
static int
set_path (char **slot, const char *key, const char *value, const char *disk)
{
  char *abs;

  if (*value == '\0') {
    log_error ("%s=: empty path (disk=%s)", key, disk);
    return -1;
  }
  if ((abs = realpath (value, NULL)) == NULL
      || access (abs, R_OK) == -1) {
    log_error ("%s=%s: %m (disk=%s)", key, value, disk);
    free (abs);
    return -1;
  }
  free (*slot);
  *slot = abs;
  return 0;
}

/* "admin" and "client.admin" name the same client. */
static int
set_id (struct rbd_target *t, const char *value, const char *disk)
{
  const char *id = strncmp (value, "client.", 7) == 0 ? value + 7 : value;

  if (*id == '\0') {
    log_error ("ceph-id=%s: empty client id (disk=%s)", value, disk);
    return -1;
  }
  free (t->id);
  if ((t->id = strdup (id)) == NULL) {
    log_error ("ceph-id: %m");
    return -1;
  }
  return 0;
}

static int
rbd_set (void *args, const char *disk, const char *key, const char *value)
{
  struct rbd_target *t = args;

  if (strcmp (key, "ceph-conf") == 0)
    return set_path (&t->conf, key, value, disk);
  if (strcmp (key, "ceph-keyring") == 0)
    return set_path (&t->keyring, key, value, disk);
  if (strcmp (key, "ceph-id") == 0)
    return set_id (t, value, disk);
  return config_parse_delay (key, value, true, &t->timeout_ns);
}

static struct backend *
rbd_open_args (const void *args, bool readonly)
{
  return backend_rbd_open (args);
}

void
rbd_target_free (struct rbd_target *t)
{
  free_location (t);
  free (t->conf);
  free (t->id);
  free (t->keyring);
  t->conf = t->id = t->keyring = NULL;
}

static int
copy_string (char **dst, const char *src)
{
  *dst = src ? strdup (src) : NULL;
  return src && *dst == NULL ? -1 : 0;
}

int
rbd_target_copy (struct rbd_target *dst, const struct rbd_target *src)
{
  *dst = (struct rbd_target) { .timeout_ns = src->timeout_ns };
  if (copy_string (&dst->spec, src->spec) == -1
      || copy_string (&dst->pool, src->pool) == -1
      || copy_string (&dst->ns, src->ns) == -1
      || copy_string (&dst->image, src->image) == -1
      || copy_string (&dst->conf, src->conf) == -1
      || copy_string (&dst->id, src->id) == -1
      || copy_string (&dst->keyring, src->keyring) == -1) {
    rbd_target_free (dst);
    errno = ENOMEM;
    return -1;
  }
  return 0;
}

static void
rbd_free_args (void *args)
{
  if (args)
    rbd_target_free (args);
  free (args);
}

const struct backend_type backend_type_rbd = {
  .name = "rbd",
  .article = "an",
  .value_name = "POOL/IMAGE",
  .keys = (const char *const[]) {
    "ceph-conf", "ceph-id", "ceph-keyring", "ceph-timeout", NULL
  },
  .summary = "Ceph RBD images",
  .help =
  "rbd=<POOL/[NS/]IMAGE>       Backend of the last disk=: a Ceph RBD image.\n"
  "ceph-conf=<PATH>            With rbd=: the cluster's ceph.conf.\n"
  "ceph-id=<NAME>              With rbd=: the Ceph client id (admin).\n"
  "ceph-keyring=<PATH>         With rbd=: the keyring holding its key.\n"
  "ceph-timeout=<DELAY>        With rbd=: fail requests after it (0: wait, default).\n",
  .new_args = rbd_new_args,
  .start = rbd_start_key,
  .set = rbd_set,
  .open = rbd_open_args,
  .free_args = rbd_free_args,
};
