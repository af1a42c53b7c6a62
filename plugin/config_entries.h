/* plugq: the disks and volumes the configuration defines, and the
 * settings that apply to all of them.
 *
 * config_keys.c records them key by key, config_check.c checks what needs
 * the whole command line, config_build.c turns them into queues and
 * exports.  All of it runs on nbdkit's main thread, before any other
 * thread exists, so the state is plain globals.
 */
#ifndef PLUGQ_PLUGIN_CONFIG_ENTRIES_H
#define PLUGQ_PLUGIN_CONFIG_ENTRIES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/backend_type.h"
#include "volume/linear.h"
#include "queue/queue.h"
#include "stats/stats_file.h"

#define NAME_MAX_LEN 255

enum entry_kind { ENTRY_DISK, ENTRY_VOLUME };
enum visit { UNVISITED, VISITING, VISITED };

/* One volume member as written on the command line. */
struct member {
  char *text;                   /* "db@1M+4M", for messages */
  char *name;
  bool ranged;
  uint64_t offset;
  uint64_t length;
  struct entry *target;         /* resolved by config_complete */
};

/* The args of one backend type for one disk: the type its starting key
 * chose, or a type whose further keys were given after the disk= (which
 * config_complete refuses if its starting key never came).
 */
struct disk_backend {
  const struct backend_type *type;
  void *args;                   /* the type's, freed by its free_args */
  const char *further_key;      /* the first further key given, or NULL */
};

/* A disk= or a linear=.  Both are exports, so they share one namespace. */
struct entry {
  enum entry_kind kind;
  char *name;

  /* disk= */
  const struct backend_type *backend;   /* NULL until its starting key */
  struct disk_backend *backends;        /* every type its keys named */
  size_t nr_backends;
  struct queue_config qc;
  struct queue *queue;          /* owned until added to the setup */

  /* linear= */
  char *spec;                   /* the value as written */
  struct member *members;
  size_t nr_members;
  enum visit visit;

  struct linear *export;        /* owns the export's name and description */
};

struct config {
  struct queue_config defaults; /* what queue keys before any disk= set */
  struct entry **entries;       /* in command-line order */
  size_t nr_entries;
  char *default_export_name;    /* NULL: the first entry */
  char *stats_path;             /* absolute; NULL: no stats= */
  enum stats_format stats_format;
  uint64_t stats_interval_ns;
};

extern struct config config;

/* Sets the defaults the first time; later calls do nothing. */
void config_init (void);

/* 1 to NAME_MAX_LEN characters of A-Z a-z 0-9 . _ - */
bool config_valid_name (const char *s);

struct entry *config_find_entry (const char *name);

/* Checks the name (name_len bytes of name) and appends a new entry with
 * the current defaults; key and value are the key that defines it, for
 * messages.  NULL after nbdkit_error.
 */
struct entry *config_new_entry (const char *key, const char *value,
                                enum entry_kind kind, const char *name,
                                size_t name_len);

/* Disk d's args of type t, made empty the first time.  NULL after
 * nbdkit_error.
 */
struct disk_backend *config_disk_backend (struct entry *d,
                                          const struct backend_type *t);

/* Frees every entry (not the exports and queues built from them) and
 * the strings of the settings.
 */
void config_free_entries (void);

#endif /* PLUGQ_PLUGIN_CONFIG_ENTRIES_H */
