/* plugq: reference-counted copies of written data.
 *
 * A write's data is copied once, into a buffer that every piece cut from
 * the write shares, that readers overlay without copying it under the
 * queue lock, and that a merged backend write points its vector at.  The
 * last reference frees it, in whichever thread drops it.
 *
 * A buffer may have room past its data: the next write of a sequential
 * stream is appended there (data_buffer_append) instead of getting a
 * buffer and a piece of its own.
 *
 * A buffer may also be lent (data_buffer_lend): the caller's own memory,
 * uncopied, for a request whose caller waits until the queue is done
 * with it.  Its last reference posts the lender's semaphore instead of
 * freeing anything.
 */
#ifndef PLUGQ_DATA_BUFFER_H
#define PLUGQ_DATA_BUFFER_H

#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spare_ring.h"

struct buffer_pool;
struct data_buffer;

/* Writes of up to DATA_BUFFER_SMALL bytes get a buffer of exactly that
 * room, and a disk keeps up to SPARE_RING_CELLS freed ones for its next
 * writes in a lock-free ring: a stream of small writes then allocates
 * nothing.  A disk may keep a second, smaller set of the larger buffers
 * sequential writes are appended to (data_buffer_new_room): those come
 * and go every few writes of a stream, a malloc and a free each time.
 */
#define DATA_BUFFER_SMALL 4096

struct data_buffer_spares {
  struct spare_ring ring;       /* its size bounds how many are kept */
  uint32_t capacity;            /* data bytes of every buffer kept */
};

/* Spares of DATA_BUFFER_SMALL bytes, up to SPARE_RING_CELLS of them. */
void data_buffer_spares_init (struct data_buffer_spares *);
/* Spares of capacity bytes, up to limit (a power of 2, at most
 * SPARE_RING_CELLS).
 */
void data_buffer_spares_init_sized (struct data_buffer_spares *,
                                    uint32_t capacity, unsigned limit);

struct data_buffer {
  _Atomic uint32_t refs;
  uint32_t size;                /* bytes of data */
  uint32_t room;                /* bytes data has room for */
  size_t mapped_size;           /* data is a mapping from pool, or 0 */
  struct buffer_pool *pool;
  struct data_buffer_spares *spares; /* a small buffer goes back here */
  unsigned char *data;          /* right after the header unless aligned */
  sem_t *released;              /* lent: posted by the last reference */
};

/* A copy of src; its data aligned to align (a power of 2) when that is
 * more than 1, as O_DIRECT needs.  Aligned buffers of BUFFER_POOL_MIN
 * or more come from pool and go back to it; small ones come from and go
 * back to spares (NULL: none kept).  A disk passes the same align,
 * pool and spares every time.
 */
struct data_buffer *data_buffer_new (const void *src, uint32_t size,
                                     uint32_t align,
                                     struct buffer_pool *pool,
                                     struct data_buffer_spares *spares);
/* A copy of src with room for `room` bytes in all (at least size), for
 * data_buffer_append to add to; aligned and from pool as for
 * data_buffer_new.  Buffers whose room fits spares' capacity come from
 * and go back to spares (NULL: none kept), which a disk uses with one
 * align and pool only.
 */
struct data_buffer *data_buffer_new_room (const void *src, uint32_t size,
                                          uint32_t room, uint32_t align,
                                          struct buffer_pool *pool,
                                          struct data_buffer_spares *spares);
/* b, set up as a buffer lent from src: no copy, no room to append (so
 * never written), and one reference, whose last holder posts released.
 * The lender keeps b and src until then.
 */
struct data_buffer *data_buffer_lend (struct data_buffer *b, const void *src,
                                      uint32_t size, sem_t *released);
/* Whether count more bytes fit after b's data. */
static inline bool
data_buffer_fits (const struct data_buffer *b, uint32_t count)
{
  return b->room - b->size >= count;
}
/* Adds count bytes of src after b's data (data_buffer_fits).  The caller
 * serializes appends to b; holders of other references read only bytes
 * that were there when they took them, which this never touches.
 */
void data_buffer_append (struct data_buffer *b, const void *src,
                         uint32_t count);
struct data_buffer *data_buffer_get (struct data_buffer *);
/* Drops a reference; NULL is ignored. */
void data_buffer_put (struct data_buffer *);

/* Frees the spare buffers, once no buffer can come back to them. */
void data_buffer_spares_free (struct data_buffer_spares *);

#endif /* PLUGQ_DATA_BUFFER_H */
