/* plugq: the table of exports in service, and the registry that
 * publishes it.
 *
 * A table never changes once published: the exports a client can open,
 * in configuration order, the default one, and the disks of the
 * plain-disk exports (which the stats writer lists).  It holds every one
 * of them.  A change of configuration builds a new table and publishes
 * it under the registry's lock, the one lock all exports share, which
 * only connection opens and closes, export listings, the stats writer
 * and configuration changes take, never a request.  A reader takes a
 * reference to the table under the lock and reads it outside (as RCU
 * readers do); the old table goes when its last reader lets go.
 *
 * The registry also keeps the exports being drained (remove --drain):
 * closed, out of the table, clients still connected.  The last of those
 * clients lets such an export go.
 */
#ifndef PLUGQ_EXPORT_TABLE_H
#define PLUGQ_EXPORT_TABLE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "disk.h"
#include "export.h"
#include "linear.h"

struct export_table {
  _Atomic unsigned refs;
  struct export **exports;      /* held, in configuration order */
  struct linear **versions;     /* held: each export's table now */
  size_t nr_exports;
  struct disk **disks;          /* held: every plain disk's */
  struct queue **queues;        /* their queues */
  size_t nr_disks;
  struct export *default_export;  /* one of exports, or NULL */
};

/* An empty table, one holder; NULL when out of memory. */
struct export_table *export_table_new (void);
/* Appends e (held anew) with its table version (held anew; NULL: its
 * current one) and, for a plain disk's export, its disk d.  -1 when out
 * of memory.
 */
int export_table_add (struct export_table *, struct export *e,
                      struct linear *version, struct disk *d);
void export_table_hold (struct export_table *);
void export_table_release (struct export_table *);
/* By name; NULL if no export of the table has it. */
struct export *export_table_find (const struct export_table *,
                                  const char *name);

struct registry;

struct registry *registry_new (void);
/* Lets go of the table and the draining exports. */
void registry_free (struct registry *);

/* The published table, held for the caller; never NULL. */
struct export_table *registry_table (struct registry *);

/* Under the registry's lock: commit (arg) decides, and when it returns
 * 0, t (the caller's hold passes) replaces the published table; else t
 * is released and -1 returned.  commit may look at clients
 * (export_clients, registry_disk_clients) and change queues that need no
 * new connection to come meanwhile; none can open until it returns.
 * NULL commit publishes t.
 */
int registry_commit (struct registry *, struct export_table *t,
                     int (*commit) (void *arg), void *arg);

/* Inside commit: the connections that reach disk d through any export,
 * published or draining.
 */
unsigned registry_disk_clients (struct registry *, const struct disk *d);

/* A connection to the export called name ("" or NULL: the default).
 * NULL with errno ENOENT (no such export) or ESHUTDOWN (it is being
 * removed), or ENOMEM.
 */
struct export_handle *registry_open (struct registry *, const char *name);
/* The connection closed; a drained export whose last client this was
 * goes.
 */
void registry_close (struct registry *, struct export_handle *);

/* Exports being drained: kept (held) until their last client closes. */
void registry_add_draining (struct registry *, struct export *);
/* The draining export called name, held for the caller, or NULL. */
struct export *registry_find_draining (struct registry *, const char *name);
/* Lets a draining export go now (remove --force); false if it was not
 * draining.
 */
bool registry_drop_draining (struct registry *, struct export *);
/* Each draining export, in the order they began, held for fn's call. */
void registry_each_draining (struct registry *,
                             void (*fn) (void *arg, struct export *),
                             void *arg);

#endif /* PLUGQ_EXPORT_TABLE_H */
