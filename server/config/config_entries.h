/* plugq: the disks and volumes a configuration defines, and the settings
 * that apply to all of them.
 *
 * A configuration is read key by key (config_keys.c) from the command
 * line and a config= file (config_file.c), checked as a whole
 * (config_check.c), built into queues and exports (config_build.c), and
 * changed in service by the control commands (config_live.c,
 * config_change.c).  The same code reads, checks and builds the command
 * line at startup, an `add`, and a `reload`, so each gives the same
 * messages.
 *
 * One thread at a time uses a configuration: nbdkit's main thread until
 * the server serves, then the control thread.  What serves clients is
 * what was built from it (volume/export_table.h), never the entries.
 */
#ifndef PLUGQ_CONFIG_ENTRIES_H
#define PLUGQ_CONFIG_ENTRIES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/backend_type.h"
#include "queue/queue.h"
#include "stats/stats_file.h"
#include "volume/disk.h"
#include "volume/export.h"

#define NAME_MAX_LEN 255

enum entry_kind { ENTRY_DISK, ENTRY_VOLUME };
enum visit { UNVISITED, VISITING, VISITED };

/* One volume member as written: "db@1M+4M". */
struct member {
  char *text;                   /* for messages, and to compare configs */
  char *name;
  bool ranged;
  uint64_t offset;
  uint64_t length;
  struct entry *target;         /* resolved by config_check_entries */
};

/* The args of one backend type for one disk: the type its starting key
 * chose, or a type whose further keys were given after the disk= (which
 * config_check_entries refuses if its starting key never came).
 */
struct disk_backend {
  const struct backend_type *type;
  void *args;                   /* the type's, freed by its free_args */
  const char *further_key;      /* the first further key given, or NULL */
};

/* A key as written, for telling whether a reload changed a live disk's
 * backend (the args themselves are the backend's own).
 */
struct key_value {
  char *key;
  char *value;
};

/* A disk= or a linear=.  Both are exports, so they share one namespace. */
struct entry {
  enum entry_kind kind;
  char *name;
  /* Where its disk= or linear= was read: "FILE:LINE", or NULL for the
   * command line and control commands.  Errors about it start with it.
   */
  char *origin;

  /* disk= */
  const struct backend_type *backend;   /* NULL until its starting key */
  struct disk_backend *backends;        /* every type its keys named */
  size_t nr_backends;
  struct key_value *backend_keys;       /* each backend key's last value */
  size_t nr_backend_keys;
  struct queue_config qc;

  /* linear= */
  char *spec;                   /* the value as written */
  struct member *members;
  size_t nr_members;
  enum visit visit;

  /* What was built from it (config_build.c), held; NULL until then. */
  struct disk *disk;            /* disk= only */
  struct export *export;
};

struct config {
  /* The configuration in service that this one adds to (an `add`): its
   * names are taken and its entries may be members.  NULL otherwise.
   */
  const struct config *base;
  struct queue_config defaults; /* what queue keys before any disk= set */
  struct entry **entries;       /* in the order they were read */
  size_t nr_entries;
  char *default_export_name;    /* NULL: the first entry */
  char *stats_path;             /* absolute; NULL: no stats= */
  enum stats_format stats_format;
  uint64_t stats_interval_ns;
  char *control_path;           /* absolute; NULL: no control= */
  char *config_path;            /* absolute; NULL: no config= */
};

/* An empty configuration with the default settings, adding to base (or
 * NULL).
 */
void config_init (struct config *, const struct config *base);
/* Frees every entry, releasing what was built from it, and the
 * settings.  The configuration is empty after.
 */
void config_free (struct config *);

/* 1 to NAME_MAX_LEN characters of A-Z a-z 0-9 . _ - */
bool config_valid_name (const char *s);

/* The entry called name here or in the base; NULL if none. */
struct entry *config_find_entry (const struct config *, const char *name);

/* Checks the name (name_len bytes of name) and appends a new entry with
 * the current defaults; key and value are the key that defines it, for
 * messages, origin where it was read (or NULL).  NULL after log_error.
 */
struct entry *config_new_entry (struct config *, const char *key,
                                const char *value, enum entry_kind kind,
                                const char *name, size_t name_len,
                                const char *origin);

/* Disk d's args of type t, made empty the first time.  NULL after
 * log_error.
 */
struct disk_backend *config_disk_backend (struct entry *d,
                                          const struct backend_type *t);

/* Records key=value among d's backend keys (replacing an earlier value
 * of key).  -1 after log_error.
 */
int config_note_backend_key (struct entry *d, const char *key,
                             const char *value);

/* Takes e out of c (without freeing it). */
void config_unlink_entry (struct config *, struct entry *e);
/* Appends e, which belongs to no configuration.  -1 after log_error. */
int config_append_entry (struct config *, struct entry *e);
/* Frees one entry that belongs to no configuration, releasing what was
 * built from it.
 */
void config_free_entry (struct entry *e);

/* "disk" or "linear", the key that defines an entry of kind. */
const char *config_kind_key (enum entry_kind kind);

#endif /* PLUGQ_CONFIG_ENTRIES_H */
