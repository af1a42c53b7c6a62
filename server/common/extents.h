/* plugq: allocation maps (NBD base:allocation) as the engine sees them. */
#ifndef PLUGQ_EXTENTS_H
#define PLUGQ_EXTENTS_H

#include <stddef.h>
#include <stdint.h>

/* Same bit values as NBD and nbdkit, so the plugin passes them through. */
#define EXTENT_HOLE 1u
#define EXTENT_ZERO 2u

/* A backend answers with at most this many extents and the caller asks
 * again: one call's time and memory stay bounded on a fragmented disk.
 */
#define MAX_EXTENTS_PER_CALL 65536

struct extent {
  uint64_t offset;
  uint64_t length;
  uint32_t type;
};

/* Contiguous, ascending extents. */
struct extent_list {
  struct extent *v;
  size_t len, cap;
};

void extent_list_init (struct extent_list *);
void extent_list_free (struct extent_list *);
void extent_list_clear (struct extent_list *);

/* Appends [offset, offset+length) of type, joining it to the last extent
 * when the types match.  The new extent must start where the list ends
 * (or the list must be empty).  Returns -1 with errno on allocation failure.
 */
int extent_list_append (struct extent_list *, uint64_t offset,
                        uint64_t length, uint32_t type);

/* Replaces the type of [offset, offset+length) with type, splitting
 * extents where needed.  Ranges outside the list are ignored.
 */
int extent_list_overlay (struct extent_list *, uint64_t offset,
                         uint64_t length, uint32_t type);

/* Drops everything at or past end, shortening the extent across it. */
void extent_list_truncate (struct extent_list *, uint64_t end);

#endif /* PLUGQ_EXTENTS_H */
