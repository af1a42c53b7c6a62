/* plugq: one disk's spare mappings for aligned write buffers. */
#include <config.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "buffer_pool.h"
#include "common/lock.h"

#define MIN_SHIFT 14                    /* BUFFER_POOL_MIN */
#define MAX_SHIFT 26                    /* BUFFER_POOL_MAX */
#define CLASSES (MAX_SHIFT - MIN_SHIFT + 1)

_Static_assert (BUFFER_POOL_MIN == (size_t) 1 << MIN_SHIFT, "MIN_SHIFT");
_Static_assert (BUFFER_POOL_MAX == (size_t) 1 << MAX_SHIFT, "MAX_SHIFT");

/* A spare mapping links to the next through its own first bytes: the
 * pool needs no memory of its own to hold them.  Its size is its class,
 * written only on its way out (buffer_pool_trim).
 */
struct spare {
  struct spare *next;
  size_t size;
};

struct buffer_pool {
  struct lock lock;
  struct spare *spares[CLASSES];
  _Atomic uint64_t idle;        /* written under lock, read without */
  uint64_t max_idle;
  unsigned nr_spares;
  uint64_t takes;               /* spares handed out, ever */
  uint64_t takes_seen;          /* takes at the last buffer_pool_trim */
};

struct buffer_pool *
buffer_pool_new (uint64_t max_idle)
{
  struct buffer_pool *p = calloc (1, sizeof *p);

  if (p == NULL)
    return NULL;
  lock_init (&p->lock);
  p->max_idle = max_idle;
  return p;
}

void
buffer_pool_free (struct buffer_pool *p)
{
  if (p == NULL)
    return;
  for (unsigned c = 0; c < CLASSES; c++)
    while (p->spares[c]) {
      struct spare *s = p->spares[c];

      p->spares[c] = s->next;
      munmap (s, (size_t) 1 << (c + MIN_SHIFT));
    }
  lock_destroy (&p->lock);
  free (p);
}

/* The class whose mappings hold size bytes, or -1 past the largest. */
static int
size_class (size_t size)
{
  for (unsigned c = 0; c < CLASSES; c++)
    if (size <= (size_t) 1 << (c + MIN_SHIFT))
      return c;
  return -1;
}

static void *
map (size_t size)
{
  void *data = mmap (NULL, size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

  return data == MAP_FAILED ? NULL : data;
}

void *
buffer_pool_get (struct buffer_pool *p, size_t size, size_t *mapped_size)
{
  int c = size_class (size);
  struct spare *s = NULL;

  if (c == -1) {
    *mapped_size = size;
    return map (size);
  }
  *mapped_size = (size_t) 1 << (c + MIN_SHIFT);
  lock_acquire (&p->lock);
  if ((s = p->spares[c]) != NULL) {
    p->spares[c] = s->next;
    p->idle -= *mapped_size;
    p->nr_spares--;
    p->takes++;
  }
  lock_release (&p->lock);
  return s ? (void *) s : map (*mapped_size);
}

void
buffer_pool_put (struct buffer_pool *p, void *data, size_t mapped_size)
{
  int c = size_class (mapped_size);
  bool kept = false;

  if (c != -1 && mapped_size == (size_t) 1 << (c + MIN_SHIFT)) {
    lock_acquire (&p->lock);
    if (p->idle + mapped_size <= p->max_idle
        && p->nr_spares < BUFFER_POOL_SPARES) {
      struct spare *s = data;

      s->next = p->spares[c];
      p->spares[c] = s;
      p->idle += mapped_size;
      p->nr_spares++;
      kept = true;
    }
    lock_release (&p->lock);
  }
  if (!kept)
    munmap (data, mapped_size);
}

/* Takes spares off the lists, the largest class first, until at most
 * keep bytes are idle; returns them linked through their first bytes,
 * each with its size.
 */
static struct spare *
take_excess_locked (struct buffer_pool *p, uint64_t keep)
{
  struct spare *out = NULL;

  lock_assert_held (&p->lock);
  for (int c = CLASSES - 1; c >= 0 && p->idle > keep; c--)
    while (p->spares[c] && p->idle > keep) {
      struct spare *s = p->spares[c];

      p->spares[c] = s->next;
      s->size = (size_t) 1 << (c + MIN_SHIFT);
      s->next = out;
      out = s;
      p->idle -= s->size;
      p->nr_spares--;
    }
  return out;
}

bool
buffer_pool_trim (struct buffer_pool *p, uint64_t keep)
{
  struct spare *excess = NULL;

  lock_acquire (&p->lock);
  if (p->takes == p->takes_seen)
    excess = take_excess_locked (p, keep);
  p->takes_seen = p->takes;
  lock_release (&p->lock);
  while (excess) {
    struct spare *s = excess;

    excess = s->next;
    munmap (s, s->size);
  }
  return buffer_pool_idle_bytes (p) > keep;
}

uint64_t
buffer_pool_idle_bytes (struct buffer_pool *p)
{
  return atomic_load_explicit (&p->idle, memory_order_relaxed);
}
