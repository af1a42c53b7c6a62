/* plugq: queued pieces and their shared data buffers. */
#include <config.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "request.h"

/* Aligned for O_DIRECT: a merged write hands these buffers straight to
 * pwritev, and direct I/O needs every vector element aligned.
 */
#define BUFFER_ALIGN 4096

struct data_buffer *
data_buffer_new (const void *src, uint32_t size)
{
  struct data_buffer *b = malloc (sizeof *b);
  void *data;

  if (b == NULL)
    return NULL;
  if (posix_memalign (&data, BUFFER_ALIGN, size ? size : 1) != 0) {
    free (b);
    errno = ENOMEM;
    return NULL;
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
    free (b->data);
    free (b);
  }
}

RB_GENERATE (piece_tree, piece, by_offset, piece_cmp);
