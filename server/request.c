/* plugq: queued pieces and their shared data buffers. */
#include <config.h>

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fd_io.h"
#include "request.h"

/* Buffers for disks without alignment needs are one malloc with their
 * header.  Aligned ones are separate: glibc serves posix_memalign from
 * size + alignment, so a freed aligned 64 KiB buffer never fits the
 * next one, and a stream of them fragments the heap far past
 * queue-bytes (168 MB resident for an 8 MiB queue, reliability.bats).
 * Large aligned ones get their own mapping.  With the mmap threshold
 * plugq sets (heap_tuning.c) they would come from the heap too, and
 * 1 MiB O_DIRECT writes left 1.2 GB resident for a 64 MiB queue.  A
 * mapping costs a page fault per page, and is given back whole.
 */
#define MAPPED_MIN (128 * 1024)

static void *
data_alloc (uint32_t size, uint32_t align, bool *mapped)
{
  void *data;

  *mapped = size >= MAPPED_MIN && align <= (uint32_t) getpagesize ();
  if (!*mapped)
    return alloc_aligned (size ? size : 1, align);
  data = mmap (NULL, size, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return data == MAP_FAILED ? NULL : data;
}

struct data_buffer *
data_buffer_new (const void *src, uint32_t size, uint32_t align)
{
  struct data_buffer *b;
  void *data;
  bool mapped = false;

  if (align <= 1) {
    b = malloc (sizeof *b + size);
    if (b == NULL)
      return NULL;
    data = b + 1;
  }
  else {
    if ((b = malloc (sizeof *b)) == NULL)
      return NULL;
    if ((data = data_alloc (size, align, &mapped)) == NULL) {
      free (b);
      return NULL;
    }
  }
  memcpy (data, src, size);
  b->refs = 1;
  b->size = size;
  b->mapped = mapped;
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
    if (b->mapped)
      munmap (b->data, b->size);
    else if (b->data != (unsigned char *) (b + 1))
      free (b->data);
    free (b);
  }
}

RB_GENERATE (piece_tree, piece, by_offset, piece_cmp);
