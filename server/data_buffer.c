/* plugq: reference-counted copies of written data (data_buffer.h). */
#include <config.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buffer_pool.h"
#include "fd_io.h"
#include "data_buffer.h"

/* Buffers for disks without alignment needs are one malloc with their
 * header.  Aligned ones are separate, and all but the smallest are
 * mappings from the disk's pool: glibc serves posix_memalign from size
 * plus alignment, so freed aligned buffers never fit the next one and
 * would fragment the heap far past queue-bytes (docs/design.md, "Request
 * buffers and malloc").
 */
static void *
data_alloc (struct data_buffer *b, uint32_t size, uint32_t align,
            struct buffer_pool *pool)
{
  b->pool = pool;
  b->mapped_size = 0;
  if (size < BUFFER_POOL_MIN || align > (uint32_t) getpagesize ())
    return alloc_aligned (size ? size : 1, align);
  return buffer_pool_get (pool, size, &b->mapped_size);
}

struct data_buffer *
data_buffer_new (const void *src, uint32_t size, uint32_t align,
                 struct buffer_pool *pool)
{
  struct data_buffer *b;
  void *data;

  if (align <= 1) {
    b = malloc (sizeof *b + size);
    if (b == NULL)
      return NULL;
    b->mapped_size = 0;
    data = b + 1;
  }
  else {
    if ((b = malloc (sizeof *b)) == NULL)
      return NULL;
    if ((data = data_alloc (b, size, align, pool)) == NULL) {
      free (b);
      return NULL;
    }
  }
  memcpy (data, src, size);
  b->refs = 1;
  b->size = size;
  b->data = data;
  return b;
}

struct data_buffer *
data_buffer_get (struct data_buffer *b)
{
  atomic_fetch_add_explicit (&b->refs, 1, memory_order_relaxed);
  return b;
}

void
data_buffer_put (struct data_buffer *b)
{
  if (b == NULL)
    return;
  if (atomic_fetch_sub_explicit (&b->refs, 1, memory_order_acq_rel) == 1) {
    if (b->mapped_size)
      buffer_pool_put (b->pool, b->data, b->mapped_size);
    else if (b->data != (unsigned char *) (b + 1))
      free (b->data);
    free (b);
  }
}
