/* plugq: exports as linear maps of disks (dm-linear).
 *
 * Every export is a linear table: a plain disk is a table of one row that
 * covers it, a volume is a table of rows mapping ranges of the volume onto
 * ranges of member disks.  Nested volumes are flattened when they are
 * defined, so a request is split once, straight into the members' own
 * queues, at member-relative offsets.  A volume has no queue of its own.
 *
 * A table never changes once finished.  Growing a volume makes a new
 * table; a connection keeps the one it opened with (it holds a reference,
 * linear_hold), so it keeps the size it was told.  Whoever holds a table
 * keeps its member disks alive too (export.h says who).
 */
#ifndef PLUGQ_LINEAR_H
#define PLUGQ_LINEAR_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"
#include "common/extents.h"
#include "queue/queue.h"

struct linear_row {
  uint64_t start;               /* offset in the export */
  uint64_t length;
  struct queue *disk;
  uint64_t disk_offset;         /* offset in the member disk */
};

struct linear {
  _Atomic unsigned refs;        /* linear_hold, linear_release */
  char *name;                   /* the export's name */
  /* The export's description: a disk's backend and size, or a volume's
   * size and member disks.
   */
  char *description;
  uint64_t size;
  struct linear_row *rows;
  size_t nr_rows;
  struct queue **members;       /* distinct member disks, in table order */
  size_t nr_members;
  struct block_limits limits;   /* the strictest of the members' */
  bool is_volume;               /* defined by linear=, not a plain disk */
  /* Every member zeroes fast: kept at linear_finish, so a connection can
   * be answered without its members (which a removal may have closed).
   */
  bool can_fast_zero;
};

/* The export for one whole disk. */
struct linear *linear_new_disk (struct queue *disk);

/* An empty volume; add rows with linear_append (a range of a disk) or
 * linear_append_linear (a range of another export, flattened).
 */
struct linear *linear_new_volume (const char *name);
int linear_append_disk (struct linear *, struct queue *disk,
                        uint64_t offset, uint64_t length);
int linear_append_linear (struct linear *, const struct linear *member,
                          uint64_t offset, uint64_t length);
/* Computes members, limits and the description.  -1 if empty. */
int linear_finish (struct linear *);
/* Frees the table, whatever its references. */
void linear_free (struct linear *);
/* One more holder (a new table has one); the last release frees it.
 * NULL is a no-op.
 */
void linear_hold (struct linear *);
void linear_release (struct linear *);

int linear_pread (struct linear *, void *buf, uint32_t count,
                  uint64_t offset);
/* Writes, zeroes and trims: with REQ_FUA across rows, the parts are
 * queued plainly and the members touched then flushed in parallel.
 */
int linear_pwrite (struct linear *, struct session *, const void *buf,
                   uint32_t count, uint64_t offset, unsigned flags);
int linear_zero (struct linear *, struct session *, uint64_t count,
                 uint64_t offset, unsigned flags);
int linear_trim (struct linear *, struct session *, uint64_t count,
                 uint64_t offset, unsigned flags);
/* Unplugs and flushes every distinct member in parallel. */
int linear_flush (struct linear *, struct session *);
int linear_extents (struct linear *, uint64_t count, uint64_t offset,
                    struct extent_list *);
int linear_cache (struct linear *, uint64_t count, uint64_t offset);
int linear_can_fast_zero (const struct linear *);

#endif /* PLUGQ_LINEAR_H */
