/* plugq: what the nbdkit glue (plugq.c) calls to configure the plugin.
 *
 * .config records each key (config_keys.c), .config_complete checks what
 * needs the whole command line (config_check.c), and .get_ready opens the
 * backends and builds every queue and export (config_build.c).  No thread
 * is started here: the plugin starts them in .after_fork.
 */
#ifndef PLUGQ_PLUGIN_SETUP_H
#define PLUGQ_PLUGIN_SETUP_H

#include <stddef.h>
#include <stdint.h>

#include "volume/linear.h"
#include "queue/queue.h"
#include "stats/stats_file.h"

/* What .get_ready built.  Arrays are in command-line order. */
struct plugq_setup {
  struct queue **disks;         /* every disk's queue */
  size_t nr_disks;
  struct linear **exports;      /* every disk and volume, named by itself */
  size_t nr_exports;
  struct linear *default_export;
  const char *stats_path;       /* NULL: no stats= */
  enum stats_format stats_format;
  uint64_t stats_interval_ns;
};

/* nbdkit .config and .config_complete.  -1 after nbdkit_error. */
int plugq_config_key (const char *key, const char *value);
int plugq_config_complete (void);

/* nbdkit .get_ready: opens backends, builds queues and exports into
 * *setup.  -1 after nbdkit_error, with nothing left allocated.
 */
int plugq_config_build (struct plugq_setup *setup);

/* Frees the exports, then the queues (stop them first), then the
 * configuration itself.
 */
void plugq_config_free (struct plugq_setup *setup);

/* The export called name, or NULL.  name is untrusted client data: it is
 * only ever compared, never used as a path.
 */
struct linear *plugq_setup_lookup (const struct plugq_setup *setup,
                                   const char *name);

#endif /* PLUGQ_PLUGIN_SETUP_H */
