/* plugq: the configuration in service, from nbdkit's first .config to
 * its .cleanup, and its changes by the control commands.
 *
 * At startup the plugin hands it the command line's keys
 * (live_config_arg), then reads and checks them with the config= file
 * (live_config_complete), builds (live_config_build) and starts
 * (live_config_start) what serves.  In service only the control thread
 * changes it (config_change.c): every change is all or nothing, so a
 * command that fails leaves the server as it was and says why.
 *
 * What serves clients is what the configuration built and published in
 * the registry (volume/export_table.h); the plugin's connections and the
 * stats writer only ever look there.
 */
#ifndef PLUGQ_CONFIG_LIVE_H
#define PLUGQ_CONFIG_LIVE_H

#include <stdbool.h>
#include <stddef.h>

#include "config_entries.h"
#include "volume/export_table.h"

struct stats_file;
struct timer_service;

struct live_config {
  struct config config;         /* what serves: each entry built */
  struct key_value *args;       /* the command line, for reload */
  size_t nr_args;
  /* Where nbdkit was started from: relative paths in the command line,
   * the config= file and `add` are read from there, before and after
   * nbdkit (daemonized) moved to /.  -1 until the first key.
   */
  int startup_dir;
  struct registry *registry;
  struct timer_service *timers; /* live_config_start .. free */
  struct stats_file *stats;
  bool started;                 /* disks added now start at once */
};

/* Where a control command's output lines go. */
typedef void (*live_output) (void *arg, const char *line);

enum live_remove_mode {
  LIVE_REMOVE_SAFE,             /* refused while a client is connected */
  LIVE_REMOVE_DRAIN,            /* clients refused, kept until they go */
  LIVE_REMOVE_FORCE,            /* clients refused, backend closed now */
};

/* ---------------------------------------------------------------- startup */

/* NULL when out of memory. */
struct live_config *live_config_new (void);

/* nbdkit .config: one command-line key, kept until the command line is
 * complete.  -1 after log_error.
 */
int live_config_arg (struct live_config *, const char *key,
                     const char *value);
/* nbdkit .config_complete: reads the command line and its config=
 * file, adds the default disk to an empty configuration, and checks it.
 */
int live_config_complete (struct live_config *);
/* nbdkit .get_ready: opens backends, builds queues and exports, and
 * publishes them.  No thread is started.
 */
int live_config_build (struct live_config *);
/* nbdkit .after_fork: the timer service, every disk's threads and the
 * stats writer.
 */
int live_config_start (struct live_config *);
/* nbdkit .cleanup, once the control thread stopped and every connection
 * closed: drains every disk, writes the last stats, frees everything.
 * 0, or -1 when a disk's final write-out failed (answered data may be
 * lost; queue_stop logged it).  NULL is a no-op.
 */
int live_config_free (struct live_config *);

/* -------------------------------------------------------------- in service */

/* Each returns 0, or -1 after log_error with nothing changed (unless
 * the message says otherwise: a removal whose last flush failed is
 * done, and says that data may be lost).
 */

/* Every disk and volume: its kind, size, connected clients, state and
 * backend, one per line after a header line.
 */
int live_list (struct live_config *, live_output, void *arg);
/* The keys of `add`: disk= and linear= with their keys, as on the
 * command line.
 */
int live_add (struct live_config *, const struct key_value *keys,
              size_t nr_keys, live_output, void *arg);
int live_remove (struct live_config *, const char *name,
                 enum live_remove_mode, live_output, void *arg);
/* Queue keys of a live disk. */
int live_set (struct live_config *, const char *name,
              const struct key_value *keys, size_t nr_keys,
              live_output, void *arg);
/* Members appended to a live volume (as linear= writes them). */
int live_grow (struct live_config *, const char *volume,
               char *const *members, size_t nr_members,
               live_output, void *arg);
/* Reads the command line and the config= file again and applies the
 * difference.
 */
int live_reload (struct live_config *, live_output, void *arg);

#endif /* PLUGQ_CONFIG_LIVE_H */
