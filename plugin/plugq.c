/* plugq: an nbdkit plugin serving disks through per-disk plugged queues.
 *
 * This file is glue: nbdkit callbacks in, engine calls (server/) out.
 * Every export is a struct linear (a disk, or a volume of disks); every
 * connection gets a session so that latched write-back errors are
 * reported to each connection once.
 *
 * Lifecycle, following nbdkit 1.32's fork rules: .get_ready opens the
 * backends (errors still reach the terminal) but starts no thread, since
 * nbdkit forks after it; .after_fork starts the timer service, each disk's
 * dispatch thread and the stats writer; .cleanup drains every queue and
 * joins all of them.
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

#include "setup.h"
#include "backends/backend_type.h"
#include "elevator/elevator.h"
#include "common/extents.h"
#include "help_text.h"
#include "buffers/heap_tuning.h"
#include "volume/linear.h"
#include "common/log.h"
#include "queue/queue.h"
#include "queue/session.h"
#include "stats/stats_file.h"
#include "queue/timer_service.h"

/* The engine passes extent types through unchanged. */
_Static_assert (EXTENT_HOLE == NBDKIT_EXTENT_HOLE, "extent hole bit");
_Static_assert (EXTENT_ZERO == NBDKIT_EXTENT_ZERO, "extent zero bit");

/* -D plugq.queue=1 logs every plug and unplug. */
NBDKIT_DLL_PUBLIC int plugq_debug_queue = 0;

static struct plugq_setup setup;         /* built in get_ready */
static struct timer_service *timers;     /* after_fork .. cleanup */
static size_t nr_started;                /* queues started so far */
static struct stats_file *stats_writer;  /* NULL without stats= */

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

static int
plugq_config (const char *key, const char *value)
{
  return plugq_config_key (key, value);
}

static int
plugq_config_complete_cb (void)
{
  return plugq_config_complete ();
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
  return plugq_config_build (&setup);
}

static int
plugq_after_fork (void)
{
  timers = timer_service_new ();
  if (timers == NULL) {
    nbdkit_error ("cannot create the timer service");
    return -1;
  }
  /* Each queue attaches its unplug timer here; the loop starts after. */
  for (nr_started = 0; nr_started < setup.nr_disks; nr_started++) {
    if (queue_start (setup.disks[nr_started], timers) == -1) {
      nbdkit_error ("disk %s: cannot start its queue",
                    queue_name (setup.disks[nr_started]));
      return -1;
    }
  }
  if (timer_service_start (timers) == -1) {
    nbdkit_error ("cannot start the timer service");
    return -1;
  }
  if (setup.stats_path) {
    stats_writer = stats_file_start (setup.stats_path, setup.stats_format,
                                     setup.stats_interval_ns,
                                     setup.disks, setup.nr_disks,
                                     setup.exports, setup.nr_exports);
    if (stats_writer == NULL) {
      nbdkit_error ("stats=%s: cannot start the stats writer",
                    setup.stats_path);
      return -1;
    }
  }
  return 0;
}

/* All connections are closed when this runs.  Queues drain first while
 * the stats writer still runs, so its final write (at stop) shows the
 * drained queues and the drain unplugs; the timer loop goes last since a
 * draining queue may still arm or cancel its timer.
 */
static void
plugq_cleanup (void)
{
  size_t i;

  for (i = 0; i < nr_started; i++)
    if (queue_stop (setup.disks[i]) == -1)
      final_write_out_failed = true;
  nr_started = 0;
  if (stats_writer) {
    stats_file_stop (stats_writer);
    stats_writer = NULL;
  }
  if (timers) {
    timer_service_free (timers);
    timers = NULL;
  }
  plugq_config_free (&setup);
}

/* ---------------------------------------------------------------- exports */

static int
plugq_list_exports (int readonly, int is_tls, struct nbdkit_exports *exports)
{
  size_t i;

  for (i = 0; i < setup.nr_exports; i++)
    if (nbdkit_add_export (exports, setup.exports[i]->name,
                           setup.exports[i]->description) == -1)
      return -1;
  return 0;
}

static const char *
plugq_default_export (int readonly, int is_tls)
{
  return setup.default_export->name;
}

struct handle {
  struct linear *export;
  struct session *session;
};

static void *
plugq_open (int readonly)
{
  const char *name = nbdkit_export_name ();
  struct linear *export;
  struct handle *h;

  /* Looked up in the table, never turned into a path. */
  export = plugq_setup_lookup (&setup, name);
  if (export == NULL) {
    nbdkit_error ("unknown export '%s'", name ? name : "");
    return NULL;
  }
  h = malloc (sizeof *h);
  if (h == NULL) {
    nbdkit_error ("malloc: %m");
    return NULL;
  }
  h->export = export;
  h->session = session_new ();
  if (h->session == NULL) {
    nbdkit_error ("session_new: %m");
    free (h);
    return NULL;
  }
  return h;
}

static void
plugq_close (void *handle)
{
  struct handle *h = handle;

  session_free (h->session);
  free (h);
}

#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL

static const char *
plugq_export_description (void *handle)
{
  struct handle *h = handle;

  return h->export->description;
}

static int64_t
plugq_get_size (void *handle)
{
  struct handle *h = handle;

  return h->export->size;
}

static int
plugq_block_size (void *handle,
                  uint32_t *minimum, uint32_t *preferred, uint32_t *maximum)
{
  struct handle *h = handle;

  *minimum = h->export->limits.minimum;
  *preferred = h->export->limits.preferred;
  *maximum = h->export->limits.maximum;
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
  struct handle *h = handle;

  return linear_can_fast_zero (h->export);
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

static int
plugq_pread (void *handle, void *buf, uint32_t count, uint64_t offset,
             uint32_t flags)
{
  struct handle *h = handle;

  return linear_pread (h->export, buf, count, offset);
}

static int
plugq_pwrite (void *handle, const void *buf, uint32_t count, uint64_t offset,
              uint32_t flags)
{
  struct handle *h = handle;

  return linear_pwrite (h->export, h->session, buf, count, offset,
                        req_flags (flags, NBDKIT_FLAG_FUA));
}

static int
plugq_zero (void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  struct handle *h = handle;

  return linear_zero (h->export, h->session, count, offset,
                      req_flags (flags, NBDKIT_FLAG_FUA
                                 | NBDKIT_FLAG_MAY_TRIM
                                 | NBDKIT_FLAG_FAST_ZERO));
}

static int
plugq_trim (void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  struct handle *h = handle;

  return linear_trim (h->export, h->session, count, offset,
                      req_flags (flags, NBDKIT_FLAG_FUA));
}

static int
plugq_flush (void *handle, uint32_t flags)
{
  struct handle *h = handle;

  return linear_flush (h->export, h->session);
}

/* The engine's extents start at or before offset (the ones before it
 * are ignored by nbdkit).  With REQ_ONE only the extent covering offset
 * is passed.
 */
static int
plugq_extents (void *handle, uint32_t count, uint64_t offset,
               uint32_t flags, struct nbdkit_extents *extents)
{
  struct handle *h = handle;
  struct extent_list list;
  bool req_one = flags & NBDKIT_FLAG_REQ_ONE;
  bool covered = false;
  uint64_t end = offset;
  size_t i;
  int r = -1;

  extent_list_init (&list);
  if (linear_extents (h->export, count, offset, &list) == -1)
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
  struct handle *h = handle;

  if (flags != 0) {
    nbdkit_error ("cache: unknown flags 0x%" PRIx32, flags);
    errno = EINVAL;
    return -1;
  }
  return linear_cache (h->export, count, offset);
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
  .config_complete    = plugq_config_complete_cb,
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
