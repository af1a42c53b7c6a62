/* plugq: reference-counted copies of written data.
 *
 * A write's data is copied once, into a buffer that every piece cut from
 * the write shares, that readers overlay without copying it under the
 * queue lock, and that a merged backend write points its vector at.  The
 * last reference frees it, in whichever thread drops it.
 */
#ifndef PLUGQ_DATA_BUFFER_H
#define PLUGQ_DATA_BUFFER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct buffer_pool;

struct data_buffer {
  _Atomic uint32_t refs;
  uint32_t size;
  size_t mapped_size;           /* data is a mapping from pool, or 0 */
  struct buffer_pool *pool;
  unsigned char *data;          /* right after the header unless aligned */
};

/* A copy of src; its data aligned to align (a power of 2) when that is
 * more than 1, as O_DIRECT needs.  Aligned buffers of BUFFER_POOL_MIN
 * or more come from pool and go back to it.
 */
struct data_buffer *data_buffer_new (const void *src, uint32_t size,
                                     uint32_t align,
                                     struct buffer_pool *pool);
struct data_buffer *data_buffer_get (struct data_buffer *);
/* Drops a reference; NULL is ignored. */
void data_buffer_put (struct data_buffer *);

#endif /* PLUGQ_DATA_BUFFER_H */
