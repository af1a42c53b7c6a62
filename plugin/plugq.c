/* plugq: an nbdkit plugin serving disks through per-disk plugged queues.
 *
 * This file is glue: nbdkit callbacks in, engine calls (server/) out.
 * The configuration lives in the engine (config/config_live.h), which
 * the command line, a config= file and the control socket all change
 * through the same code.  A connection opens an export of the published
 * table (volume/export_table.h) and keeps, in its handle, the export's
 * table as it was (a struct linear: a disk, or a volume of disks) and a
 * session, so that latched write-back errors reach each connection
 * once.  Every request passes the export's gate (export_enter), which a
 * removal closes.
 *
 * Lifecycle, following nbdkit 1.32's fork rules: .config keeps each key;
 * .config_complete reads them with the config= file and checks them;
 * .get_ready opens the backends (errors still reach the terminal) but
 * starts no thread, since nbdkit forks after it; .after_fork starts the
 * timer service, each disk's dispatch thread, the stats writer and the
 * control thread; .cleanup stops the control thread, then drains every
 * queue and joins the rest.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include "backends/backend_type.h"
#include "buffers/heap_tuning.h"
#include "common/extents.h"
#include "common/log.h"
#include "config/config_live.h"
#include "control/control_server.h"
#include "control/control_socket.h"
#include "elevator/elevator.h"
#include "help_text.h"
#include "queue/queue.h"
#include "volume/export.h"
#include "volume/export_table.h"
#include "volume/linear.h"

/* The engine passes extent types through unchanged. */
_Static_assert (EXTENT_HOLE == NBDKIT_EXTENT_HOLE, "extent hole bit");
_Static_assert (EXTENT_ZERO == NBDKIT_EXTENT_ZERO, "extent zero bit");

/* -D plugq.queue=1 logs every plug and unplug. */
NBDKIT_DLL_PUBLIC int plugq_debug_queue = 0;

static struct live_config *live;          /* from the first .config */
static struct control_server *control;   /* NULL without control= */

/* ---------------------------------------------------------------- log */

static void
sink_error (const char *msg)
{
  nbdkit_error ("%s", msg);
}

static void
sink_debug (const char *msg)
{
  nbdkit_debug ("%s", msg);
}

static const struct log_sink nbdkit_sink = {
  .error = sink_error,
  .debug = sink_debug,
};

static void
plugq_load (void)
{
  log_set_sink (&nbdkit_sink);
  nbdkit_debug ("%s", heap_tuning_describe (heap_tuning_apply ()));
}

/* ---------------------------------------------------------------- texts */

static struct nbdkit_plugin plugin;
static char *help_keys;          /* the built .config_help */
static char *description;        /* the built .description */

/* --help and the description list the backends and elevators from their
 * tables.  nbdkit copies the plugin struct as plugin_init returns it,
 * before it calls .load, so a text set in .load would never be seen:
 * they are built when the library is loaded (dlopen runs this), and the
 * short fixed texts stay if memory runs out.
 */
__attribute__ ((constructor))
static void
build_texts (void)
{
  help_keys = help_text_keys ();
  description = help_text_description ();
  if (help_keys)
    plugin.config_help = help_keys;
  if (description)
    plugin.description = description;
}

/* Set by .cleanup when answered data may have been lost in the final
 * drain (queue_stop logged what).
 */
static bool final_write_out_failed;

/* nbdkit's last call into the plugin: nothing reads the texts after it.
 * nbdkit 1.32 exits 0 after a clean shutdown whatever its plugin says,
 * and systemd and scripts must see that answered data was lost, so a
 * failed final write-out ends the process here with status 1, after
 * everything else is done (nbdkit only frees memory after .unload).
 */
static void
plugq_unload (void)
{
  free (help_keys);
  free (description);
  help_keys = description = NULL;
  if (final_write_out_failed) {
    fflush (NULL);
    _exit (EXIT_FAILURE);
  }
}

/* ---------------------------------------------------------------- config */

/* Made at the first key (or at .config_complete without any). */
static int
live_exists (void)
{
  if (live == NULL && (live = live_config_new ()) == NULL) {
    nbdkit_error ("out of memory");
    return -1;
  }
  return 0;
}

static int
plugq_config (const char *key, const char *value)
{
  if (live_exists () == -1)
    return -1;
  return live_config_arg (live, key, value);
}

/* The control socket's path is checked now, while errors still reach
 * the terminal; it is made after the fork, as the user nbdkit serves as.
 */
static int
plugq_config_complete (void)
{
  if (live_exists () == -1 || live_config_complete (live) == -1)
    return -1;
  if (live->config.control_path
      && control_socket_check (live->config.control_path) == -1)
    return -1;
  return 0;
}

/* The names come from the tables, so scripts see every backend and
 * elevator this build has.
 */
/* Whether nbdkit MAJOR.MINOR.MICRO aborts when a client hangs up with
 * replies still to send ("raw_send_socket: Assertion `sock >= 0'"): from
 * "server: Give client EOF when we are done writing" (1.32.4, 1.33.3) to
 * "server: Don't assert on send if client hangs up early" (1.33.10, so
 * 1.34.0).  scripts/nbdkit-early-hangup-abort.sh holds the same rule.
 */
static bool
nbdkit_aborts_on_early_hangup (int major, int minor, int micro)
{
  return major == 1
    && ((minor == 32 && micro >= 4) || (minor == 33 && micro >= 3
                                        && micro <= 9));
}

static void
plugq_dump_plugin (void)
{
  char *elevators = elevator_names (",");
  char *backends = backend_type_names (",");

  printf ("plugq_version=%s\n", PACKAGE_VERSION);
  printf ("plugq_elevators=%s\n", elevators ? elevators : "");
  printf ("plugq_backends=%s\n", backends ? backends : "");
  /* nbdkit 1.32 tells a plugin nothing of its own version while it runs:
   * these are the headers plugq was built with (man page, SECURITY).
   */
  printf ("plugq_nbdkit_build_version=%s\n", NBDKIT_VERSION_STRING);
  printf ("plugq_nbdkit_early_hangup_abort=%s\n",
          nbdkit_aborts_on_early_hangup (NBDKIT_VERSION_MAJOR,
                                         NBDKIT_VERSION_MINOR,
                                         NBDKIT_VERSION_MICRO)
          ? "yes" : "no");
  free (elevators);
  free (backends);
}

/* ---------------------------------------------------------------- lifecycle */

static int
plugq_get_ready (void)
{
  log_queue_events = plugq_debug_queue != 0;
  return live_config_build (live);
}

static int
plugq_after_fork (void)
{
  if (live_config_start (live) == -1)
    return -1;
  if (live->config.control_path) {
    control = control_server_start (live->config.control_path, live);
    if (control == NULL)
      return -1;
  }
  return 0;
}

/* All connections are closed when this runs.  No command may change the
 * configuration while it goes: the control thread stops first.
 */
static void
plugq_cleanup (void)
{
  control_server_stop (control);
  control = NULL;
  if (live_config_free (live) == -1)
    final_write_out_failed = true;
  live = NULL;
}

/* ---------------------------------------------------------------- exports */

/* The exports of the table published now. */
static int
plugq_list_exports (int readonly, int is_tls, struct nbdkit_exports *exports)
{
  struct export_table *t = registry_table (live->registry);
  int r = 0;

  for (size_t i = 0; i < t->nr_exports && r == 0; i++)
    r = nbdkit_add_export (exports, t->exports[i]->name,
                           t->versions[i]->description);
  export_table_release (t);
  return r;
}

/* Interned: the export may be removed before nbdkit is done with it. */
static const char *
plugq_default_export (int readonly, int is_tls)
{
  struct export_table *t = registry_table (live->registry);
  const char *name = t->default_export
    ? nbdkit_strdup_intern (t->default_export->name) : NULL;

  export_table_release (t);
  return name;
}

/* The handle is the engine's: the export, its table as it is now, and
 * the connection's session.
 */
static void *
plugq_open (int readonly)
{
  const char *name = nbdkit_export_name ();
  struct export_handle *h;

  /* Looked up in the table, never turned into a path. */
  h = registry_open (live->registry, name);
  if (h == NULL && errno == ENOENT)
    nbdkit_error ("unknown export '%s'", name ? name : "");
  else if (h == NULL && errno == ESHUTDOWN)
    nbdkit_error ("export '%s' is being removed: new connections are "
                  "refused", name);
  else if (h == NULL)
    nbdkit_error ("export '%s': %m", name ? name : "");
  return h;
}

static void
plugq_close (void *handle)
{
  registry_close (live->registry, handle);
}

#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL

/* What a connection is told comes from its table: a volume grown since
 * it opened keeps, for it, the size it was told.
 */
static const char *
plugq_export_description (void *handle)
{
  struct export_handle *h = handle;

  return h->version->description;
}

static int64_t
plugq_get_size (void *handle)
{
  struct export_handle *h = handle;

  return h->version->size;
}

static int
plugq_block_size (void *handle,
                  uint32_t *minimum, uint32_t *preferred, uint32_t *maximum)
{
  struct export_handle *h = handle;

  *minimum = h->version->limits.minimum;
  *preferred = h->version->limits.preferred;
  *maximum = h->version->limits.maximum;
  return 0;
}

static int
plugq_can_write (void *handle)
{
  return 1;
}

static int
plugq_can_flush (void *handle)
{
  return 1;
}

static int
plugq_is_rotational (void *handle)
{
  return 0;
}

static int
plugq_can_trim (void *handle)
{
  return 1;
}

static int
plugq_can_zero (void *handle)
{
  return 1;
}

static int
plugq_can_fast_zero (void *handle)
{
  struct export_handle *h = handle;

  return linear_can_fast_zero (h->version);
}

/* The queue makes FUA requests durable itself (and keeps an older queued
 * overlapping write from landing on top of them later).
 */
static int
plugq_can_fua (void *handle)
{
  return NBDKIT_FUA_NATIVE;
}

/* Every connection to a disk shares its one queue, and a flush drains it
 * whichever connection wrote the data.
 */
static int
plugq_can_multi_conn (void *handle)
{
  return 1;
}

static int
plugq_can_extents (void *handle)
{
  return 1;
}

static int
plugq_can_cache (void *handle)
{
  return NBDKIT_CACHE_NATIVE;
}

/* ---------------------------------------------------------------- data */

/* nbdkit flags to the engine's REQ_* flags; anything else is dropped. */
static unsigned
req_flags (uint32_t flags, uint32_t allowed)
{
  unsigned req = 0;

  flags &= allowed;
  if (flags & NBDKIT_FLAG_FUA)
    req |= REQ_FUA;
  if (flags & NBDKIT_FLAG_MAY_TRIM)
    req |= REQ_MAY_TRIM;
  if (flags & NBDKIT_FLAG_FAST_ZERO)
    req |= REQ_FAST_ZERO;
  return req;
}

/* Each request passes the export's gate; a closed one answers with its
 * removal's verdict (export.h).  export_leave keeps errno.
 */
static int
plugq_pread (void *handle, void *buf, uint32_t count, uint64_t offset,
             uint32_t flags)
{
  struct export_handle *h = handle;
  int r;

  if (!export_enter (h))
    return export_refused (h);
  r = linear_pread (h->version, buf, count, offset);
  export_leave (h);
  return r;
}

static int
plugq_pwrite (void *handle, const void *buf, uint32_t count, uint64_t offset,
              uint32_t flags)
{
  struct export_handle *h = handle;
  int r;

  if (!export_enter (h))
    return export_refused (h);
  r = linear_pwrite (h->version, h->session, buf, count, offset,
                     req_flags (flags, NBDKIT_FLAG_FUA));
  export_leave (h);
  return r;
}

static int
plugq_zero (void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  struct export_handle *h = handle;
  int r;

  if (!export_enter (h))
    return export_refused (h);
  r = linear_zero (h->version, h->session, count, offset,
                   req_flags (flags, NBDKIT_FLAG_FUA | NBDKIT_FLAG_MAY_TRIM
                              | NBDKIT_FLAG_FAST_ZERO));
  export_leave (h);
  return r;
}

static int
plugq_trim (void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  struct export_handle *h = handle;
  int r;

  if (!export_enter (h))
    return export_refused (h);
  r = linear_trim (h->version, h->session, count, offset,
                   req_flags (flags, NBDKIT_FLAG_FUA));
  export_leave (h);
  return r;
}

static int
plugq_flush (void *handle, uint32_t flags)
{
  struct export_handle *h = handle;
  int r;

  if (!export_enter (h))
    return export_refused (h);
  r = linear_flush (h->version, h->session);
  export_leave (h);
  return r;
}

/* The engine's extents start at or before offset (the ones before it
 * are ignored by nbdkit).  With REQ_ONE only the extent covering offset
 * is passed.
 */
static int
plugq_extents (void *handle, uint32_t count, uint64_t offset,
               uint32_t flags, struct nbdkit_extents *extents)
{
  struct export_handle *h = handle;
  struct extent_list list;
  bool req_one = flags & NBDKIT_FLAG_REQ_ONE;
  bool covered = false;
  uint64_t end = offset;
  size_t i;
  int r = -1, got;

  if (!export_enter (h))
    return export_refused (h);
  extent_list_init (&list);
  got = linear_extents (h->version, count, offset, &list);
  export_leave (h);
  if (got == -1)
    goto out;
  for (i = 0; i < list.len; i++) {
    const struct extent *e = &list.v[i];

    if (nbdkit_add_extent (extents, e->offset, e->length, e->type) == -1)
      goto out;
    end = e->offset + e->length;
    if (end > offset) {
      covered = true;
      if (req_one)
        break;
    }
  }
  /* Never leave offset uncovered: "data" is always a safe answer. */
  if (!covered
      && nbdkit_add_extent (extents, end, offset + count - end, 0) == -1)
    goto out;
  r = 0;
 out:
  extent_list_free (&list);
  return r;
}

static int
plugq_cache (void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  struct export_handle *h = handle;
  int r;

  if (flags != 0) {
    nbdkit_error ("cache: unknown flags 0x%" PRIx32, flags);
    errno = EINVAL;
    return -1;
  }
  if (!export_enter (h))
    return export_refused (h);
  r = linear_cache (h->version, count, offset);
  export_leave (h);
  return r;
}

/* ---------------------------------------------------------------- plugin */

/* Without the texts built from the tables (out of memory). */
#define plugq_description \
  "Serves disks through per-disk plugged request queues."
#define plugq_config_help "See nbdkit-plugq-plugin(1)."

static struct nbdkit_plugin plugin = {
  .name               = "plugq",
  .longname           = "plugq: plugged per-disk request queues",
  .version            = PACKAGE_VERSION,
  .description        = plugq_description,
  .load               = plugq_load,
  .unload             = plugq_unload,
  .config             = plugq_config,
  .config_complete    = plugq_config_complete,
  .config_help        = plugq_config_help,
  .dump_plugin        = plugq_dump_plugin,
  .get_ready          = plugq_get_ready,
  .after_fork         = plugq_after_fork,
  .cleanup            = plugq_cleanup,
  .list_exports       = plugq_list_exports,
  .default_export     = plugq_default_export,
  .open               = plugq_open,
  .close              = plugq_close,
  .export_description = plugq_export_description,
  .get_size           = plugq_get_size,
  .block_size         = plugq_block_size,
  .can_write          = plugq_can_write,
  .can_flush          = plugq_can_flush,
  .is_rotational      = plugq_is_rotational,
  .can_trim           = plugq_can_trim,
  .can_zero           = plugq_can_zero,
  .can_fast_zero      = plugq_can_fast_zero,
  .can_fua            = plugq_can_fua,
  .can_multi_conn     = plugq_can_multi_conn,
  .can_extents        = plugq_can_extents,
  .can_cache          = plugq_can_cache,
  .pread              = plugq_pread,
  .pwrite             = plugq_pwrite,
  .zero               = plugq_zero,
  .trim               = plugq_trim,
  .flush              = plugq_flush,
  .extents            = plugq_extents,
  .cache              = plugq_cache,
  .errno_is_preserved = 1,
};

NBDKIT_REGISTER_PLUGIN (plugin)
