/* plugq: one disk's spare mappings for aligned write buffers.
 * Internal to server/.
 *
 * O_DIRECT needs aligned buffers, and all but the smallest get their
 * own mapping (data_buffer.c says why not the heap).  A fresh mapping
 * costs the kernel a zeroed page and a fault per page, and giving it
 * back a TLB shootdown, so a mapping per buffer is far slower than the
 * heap (docs/design.md).  The pool keeps freed mappings, by power-of-two
 * size class, for the next buffer of the class, up to a byte limit and
 * a count (each spare is a kernel memory map entry, and a process has
 * about 65,000 of them: vm.max_map_count); past them they are unmapped.
 * Each disk has its own pool and lock.
 */
#ifndef PLUGQ_BUFFER_POOL_H
#define PLUGQ_BUFFER_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Smaller buffers come from malloc; larger than the biggest class are
 * mapped and unmapped each time.
 */
#define BUFFER_POOL_MIN ((size_t) 16 * 1024)
#define BUFFER_POOL_MAX ((size_t) 64 * 1024 * 1024)

/* Spares one pool keeps at most, whatever their size. */
#define BUFFER_POOL_SPARES 256

struct buffer_pool;

/* Keeps at most max_idle bytes (and BUFFER_POOL_SPARES) of spare
 * mappings; NULL on ENOMEM.
 */
struct buffer_pool *buffer_pool_new (uint64_t max_idle);

/* Unmaps every spare mapping.  Buffers still out must not come back. */
void buffer_pool_free (struct buffer_pool *);

/* Page-aligned memory for size bytes (size >= BUFFER_POOL_MIN), from
 * the pool or a new mapping; NULL with errno set when it cannot map.
 * Its previous contents are not cleared.  *mapped_size is what to hand
 * back to buffer_pool_put.
 */
void *buffer_pool_get (struct buffer_pool *, size_t size,
                       size_t *mapped_size);
void buffer_pool_put (struct buffer_pool *, void *data, size_t mapped_size);

/* Bytes of spare mappings held now, read without the pool's lock: a
 * put or take running beside the call may or may not be in it.
 */
uint64_t buffer_pool_idle_bytes (struct buffer_pool *);

/* Gives spare mappings back to the kernel, the largest first, until at
 * most keep bytes are idle, but only when no spare was taken since the
 * previous call: a disk still writing would map them again at once.
 * True while more than keep bytes stay idle (call again later).
 */
bool buffer_pool_trim (struct buffer_pool *, uint64_t keep);

#endif /* PLUGQ_BUFFER_POOL_H */
