/* plugq: the configuration in service: startup, listing and cleanup
 * (config_live.h).  Its changes are config_change.c.
 */

#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "config_build.h"
#include "config_change.h"
#include "config_check.h"
#include "config_file.h"
#include "config_live.h"
#include "queue/timer_service.h"
#include "stats/stats_file.h"

struct live_config *
live_config_new (void)
{
  struct live_config *l = calloc (1, sizeof *l);

  if (l == NULL)
    return NULL;
  config_init (&l->config, NULL);
  l->startup_dir = -1;
  l->registry = registry_new ();
  if (l->registry == NULL) {
    free (l);
    return NULL;
  }
  return l;
}

int
live_config_arg (struct live_config *l, const char *key, const char *value)
{
  struct key_value *p = realloc (l->args, (l->nr_args + 1) * sizeof *p);

  if (p == NULL) {
    log_error ("realloc: %m");
    return -1;
  }
  l->args = p;
  p[l->nr_args].key = strdup (key);
  p[l->nr_args].value = strdup (value);
  if (p[l->nr_args].key == NULL || p[l->nr_args].value == NULL) {
    free (p[l->nr_args].key);
    free (p[l->nr_args].value);
    log_error ("strdup: %m");
    return -1;
  }
  l->nr_args++;
  return 0;
}

int
live_config_complete (struct live_config *l)
{
  /* Before nbdkit daemonizes and moves to /. */
  l->startup_dir = open (".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (l->startup_dir == -1) {
    log_error ("the working directory: %m");
    return -1;
  }
  if (config_read_sources (&l->config, l->args, l->nr_args) == -1
      || config_add_default_disk (&l->config) == -1
      || config_check_entries (&l->config) == -1
      || config_check_settings (&l->config) == -1)
    return -1;
  return 0;
}

/* Startup's resolver: the configuration's own entries. */
static struct entry *
resolve_own (void *arg, const char *name)
{
  return config_find_entry (arg, name);
}

int
live_config_build (struct live_config *l)
{
  struct config_resolver rs = { resolve_own, &l->config };
  struct config *c = &l->config;

  for (size_t i = 0; i < c->nr_entries; i++)
    if (c->entries[i]->kind == ENTRY_DISK
        && config_build_disk (c->entries[i]) == -1)
      return -1;
  for (size_t i = 0; i < c->nr_entries; i++)
    if (c->entries[i]->kind == ENTRY_VOLUME
        && config_build_volume (c->entries[i], &rs) == -1)
      return -1;
  return live_publish_entries (l);
}

/* ---------------------------------------------------------------- stats */

/* The stats writer lists the disks and volumes of the published table,
 * taken afresh for each snapshot: disks added and removed in service
 * come and go in the file.
 */
static void
stats_take (void *arg, struct stats_listing *out)
{
  struct live_config *l = arg;
  struct export_table *t = registry_table (l->registry);

  out->disks = t->queues;
  out->nr_disks = t->nr_disks;
  out->exports = t->versions;
  out->nr_exports = t->nr_exports;
  out->token = t;
}

static void
stats_release (void *arg, struct stats_listing *listing)
{
  export_table_release (listing->token);
}

static int
start_stats (struct live_config *l)
{
  const struct config *c = &l->config;
  struct stats_source source = {
    .take = stats_take, .release = stats_release, .arg = l,
  };

  if (c->stats_path == NULL)
    return 0;
  l->stats = stats_file_start (c->stats_path, c->stats_format,
                               c->stats_interval_ns, &source);
  if (l->stats == NULL) {
    log_error ("stats=%s: cannot start the stats writer", c->stats_path);
    return -1;
  }
  return 0;
}

int
live_config_start (struct live_config *l)
{
  struct config *c = &l->config;

  l->timers = timer_service_new ();
  if (l->timers == NULL) {
    log_error ("cannot create the timer service");
    return -1;
  }
  /* Each queue attaches its unplug timer here; the loop starts after. */
  for (size_t i = 0; i < c->nr_entries; i++)
    if (c->entries[i]->kind == ENTRY_DISK
        && disk_start (c->entries[i]->disk, l->timers) == -1)
      return -1;
  if (timer_service_start (l->timers) == -1) {
    log_error ("cannot start the timer service");
    return -1;
  }
  l->started = true;
  return start_stats (l);
}

/* All connections are closed when this runs.  Queues drain first while
 * the stats writer still runs, so its final write (at stop) shows the
 * drained queues and the drain unplugs; the timer loop goes last since a
 * draining queue may still arm or cancel its timer.
 */
int
live_config_free (struct live_config *l)
{
  struct config *c;
  int r = 0;

  if (l == NULL)
    return 0;
  c = &l->config;
  for (size_t i = 0; i < c->nr_entries; i++)
    if (c->entries[i]->kind == ENTRY_DISK && c->entries[i]->disk
        && c->entries[i]->disk->started
        && disk_drain (c->entries[i]->disk) == -1)
      r = -1;
  stats_file_stop (l->stats);
  registry_free (l->registry);
  config_free (c);
  timer_service_free (l->timers);
  for (size_t i = 0; i < l->nr_args; i++) {
    free (l->args[i].key);
    free (l->args[i].value);
  }
  free (l->args);
  if (l->startup_dir >= 0)
    close (l->startup_dir);
  free (l);
  return r;
}

/* ---------------------------------------------------------------- list */

static const char *
state_of (struct export *e)
{
  switch (atomic_load (&e->state)) {
  case EXPORT_OPEN: return "live";
  case EXPORT_CLOSING: return "closing";
  default: return "draining";
  }
}

/* One line of list: NAME KIND BYTES CLIENTS STATE DESCRIPTION (which
 * says the size in words, and the backend or the members).
 */
static void
list_line (live_output out, void *arg, struct export *e, const char *state)
{
  struct linear *v = export_version (e);
  char *line;

  if (asprintf (&line, "%-16s %-6s %14" PRIu64 " %7u %-8s %s",
                e->name, e->is_volume ? "volume" : "disk", v->size,
                export_clients (e), state, v->description) != -1) {
    out (arg, line);
    free (line);
  }
  linear_release (v);
}

struct draining_out {
  live_output out;
  void *arg;
};

static void
list_draining (void *arg, struct export *e)
{
  struct draining_out *d = arg;

  list_line (d->out, d->arg, e, state_of (e));
}

int
live_list (struct live_config *l, live_output out, void *arg)
{
  struct export_table *t = registry_table (l->registry);
  struct draining_out d = { out, arg };
  char *header;

  if (asprintf (&header, "%-16s %-6s %14s %7s %-8s %s", "NAME", "KIND",
                "BYTES", "CLIENTS", "STATE", "DESCRIPTION") != -1) {
    out (arg, header);
    free (header);
  }
  for (size_t i = 0; i < t->nr_exports; i++)
    list_line (out, arg, t->exports[i], "live");
  export_table_release (t);
  registry_each_draining (l->registry, list_draining, &d);
  return 0;
}
