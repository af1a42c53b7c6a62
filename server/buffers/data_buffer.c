/* plugq: reference-counted copies of written data (data_buffer.h). */
#include <config.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buffer_pool.h"
#include "data_buffer.h"
#include "common/fd_io.h"

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
  if (size < BUFFER_POOL_MIN || align > (uint32_t) getpagesize ())
    return alloc_aligned (size ? size : 1, align);
  return buffer_pool_get (pool, size, &b->mapped_size);
}

/* A buffer with room for capacity bytes, from the heap or the pool. */
static struct data_buffer *
buffer_alloc (uint32_t capacity, uint32_t align, struct buffer_pool *pool)
{
  struct data_buffer *b;

  if (align <= 1) {
    if ((b = malloc (sizeof *b + capacity)) == NULL)
      return NULL;
    b->mapped_size = 0;
    b->data = (unsigned char *) (b + 1);
    return b;
  }
  if ((b = malloc (sizeof *b)) == NULL)
    return NULL;
  b->mapped_size = 0;
  if ((b->data = data_alloc (b, capacity, align, pool)) == NULL) {
    free (b);
    return NULL;
  }
  return b;
}

static void
buffer_release (struct data_buffer *b)
{
  if (b->mapped_size)
    buffer_pool_put (b->pool, b->data, b->mapped_size);
  else if (b->data != (unsigned char *) (b + 1))
    free (b->data);
  free (b);
}

void
data_buffer_spares_init_sized (struct data_buffer_spares *s,
                               uint32_t capacity, unsigned limit)
{
  spare_ring_init_cells (&s->ring, limit);
  s->capacity = capacity;
}

void
data_buffer_spares_init (struct data_buffer_spares *s)
{
  data_buffer_spares_init_sized (s, DATA_BUFFER_SMALL, SPARE_RING_CELLS);
}

static struct data_buffer *
spare_take (struct data_buffer_spares *s)
{
  return spare_ring_take (&s->ring);
}

static bool
spare_park (struct data_buffer_spares *s, struct data_buffer *b)
{
  return spare_ring_park (&s->ring, b);
}

/* b, holding a copy of src and one reference. */
static struct data_buffer *
buffer_fill (struct data_buffer *b, const void *src, uint32_t size,
             uint32_t room, struct data_buffer_spares *spares)
{
  memcpy (b->data, src, size);
  atomic_init (&b->refs, 1);
  b->size = size;
  b->room = room;
  b->spares = spares;
  b->released = NULL;
  return b;
}

struct data_buffer *
data_buffer_lend (struct data_buffer *b, const void *src, uint32_t size,
                  sem_t *released)
{
  atomic_init (&b->refs, 1);
  b->size = b->room = size;
  b->mapped_size = 0;
  b->pool = NULL;
  b->spares = NULL;
  b->data = (unsigned char *) src;      /* only read: it has no room */
  b->released = released;
  return b;
}

struct data_buffer *
data_buffer_new (const void *src, uint32_t size, uint32_t align,
                 struct buffer_pool *pool, struct data_buffer_spares *spares)
{
  bool small = spares && size <= DATA_BUFFER_SMALL;
  struct data_buffer *b = small ? spare_take (spares) : NULL;
  /* A spare of a disk with aligned buffers must not grow: its data
   * would no longer end on the alignment the backend needs.
   */
  uint32_t room = small && align <= 1 ? DATA_BUFFER_SMALL : size;

  if (b == NULL) {
    b = buffer_alloc (small ? DATA_BUFFER_SMALL : size, align, pool);
    if (b == NULL)
      return NULL;
  }
  return buffer_fill (b, src, size, room, small ? spares : NULL);
}

struct data_buffer *
data_buffer_new_room (const void *src, uint32_t size, uint32_t room,
                      uint32_t align, struct buffer_pool *pool,
                      struct data_buffer_spares *spares)
{
  struct data_buffer *b;

  if (room < size)
    room = size;
  /* A spare keeps its data's alignment, and a mapping from the pool
   * goes back to it when the spare is freed.
   */
  if (spares == NULL || room > spares->capacity) {
    if ((b = buffer_alloc (room, align, pool)) == NULL)
      return NULL;
    return buffer_fill (b, src, size, room, NULL);
  }
  if ((b = spare_take (spares)) == NULL
      && (b = buffer_alloc (spares->capacity, align, pool)) == NULL)
    return NULL;
  return buffer_fill (b, src, size, room, spares);
}

void
data_buffer_append (struct data_buffer *b, const void *src, uint32_t count)
{
  memcpy (b->data + b->size, src, count);
  b->size += count;
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
  if (atomic_fetch_sub_explicit (&b->refs, 1, memory_order_acq_rel) != 1)
    return;
  if (b->released)
    sem_post (b->released);     /* the lender's; b is not touched again */
  else if (!(b->spares && spare_park (b->spares, b)))
    buffer_release (b);
}

void
data_buffer_spares_free (struct data_buffer_spares *s)
{
  struct data_buffer *b;

  while ((b = spare_take (s)) != NULL)
    buffer_release (b);
}
