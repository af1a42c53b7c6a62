/* plugq: sparse RAM backend.
 *
 * The disk is cut into 64 KiB pages, allocated on first write.  Pages are
 * grouped in 256 MiB chunks, and the chunks that hold at least one page sit
 * in a vector sorted by chunk number.  Memory therefore follows what was
 * written, never the disk size: a 2^63 byte disk with nothing written costs
 * one small struct, and skipping an unwritten region of any size is one
 * binary search.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "backend.h"
#include "size_format.h"
#include "log.h"

#define MEM_PAGE_SHIFT 16
#define MEM_PAGE_SIZE ((uint64_t) 1 << MEM_PAGE_SHIFT)
#define MEM_CHUNK_SHIFT 28
#define MEM_CHUNK_SIZE ((uint64_t) 1 << MEM_CHUNK_SHIFT)
#define PAGES_PER_CHUNK (1u << (MEM_CHUNK_SHIFT - MEM_PAGE_SHIFT))

struct chunk {
  uint64_t index;               /* offset >> MEM_CHUNK_SHIFT */
  unsigned npages;              /* non-NULL entries in pages */
  unsigned char *pages[PAGES_PER_CHUNK];
};

struct memory_backend {
  struct backend b;             /* first, so the two pointers convert */
  pthread_rwlock_t lock;
  struct chunk **dir;           /* sorted by index */
  size_t nchunks, cap;
};

static struct memory_backend *
to_mem (struct backend *b)
{
  return (struct memory_backend *) b;
}

static bool
is_zero (const unsigned char *p, size_t len)
{
  return len == 0 || (p[0] == 0 && memcmp (p, p + 1, len - 1) == 0);
}

/* Position of the first chunk whose index is >= index. */
static size_t
chunk_lower_bound (const struct memory_backend *m, uint64_t index)
{
  size_t lo = 0, hi = m->nchunks;

  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;

    if (m->dir[mid]->index < index)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static struct chunk *
find_chunk (const struct memory_backend *m, uint64_t index)
{
  size_t pos = chunk_lower_bound (m, index);

  if (pos < m->nchunks && m->dir[pos]->index == index)
    return m->dir[pos];
  return NULL;
}

static struct chunk *
get_chunk (struct memory_backend *m, uint64_t index)
{
  size_t pos = chunk_lower_bound (m, index);
  struct chunk *c;

  if (pos < m->nchunks && m->dir[pos]->index == index)
    return m->dir[pos];

  if (m->nchunks == m->cap) {
    size_t cap = m->cap ? m->cap * 2 : 16;
    struct chunk **dir = realloc (m->dir, cap * sizeof *dir);

    if (dir == NULL)
      return NULL;
    m->dir = dir;
    m->cap = cap;
  }
  c = calloc (1, sizeof *c);
  if (c == NULL)
    return NULL;
  c->index = index;
  memmove (&m->dir[pos + 1], &m->dir[pos],
           (m->nchunks - pos) * sizeof m->dir[0]);
  m->dir[pos] = c;
  m->nchunks++;
  return c;
}

static void
drop_chunk (struct memory_backend *m, size_t pos)
{
  free (m->dir[pos]);
  memmove (&m->dir[pos], &m->dir[pos + 1],
           (m->nchunks - pos - 1) * sizeof m->dir[0]);
  m->nchunks--;
}

static void
free_page (struct chunk *c, unsigned p)
{
  free (c->pages[p]);
  c->pages[p] = NULL;
  c->npages--;
}

static const unsigned char *
page_for_read (const struct memory_backend *m, uint64_t offset)
{
  const struct chunk *c = find_chunk (m, offset >> MEM_CHUNK_SHIFT);

  if (c == NULL)
    return NULL;
  return c->pages[(offset & (MEM_CHUNK_SIZE - 1)) >> MEM_PAGE_SHIFT];
}

static unsigned char *
page_for_write (struct memory_backend *m, uint64_t offset)
{
  struct chunk *c = get_chunk (m, offset >> MEM_CHUNK_SHIFT);
  unsigned p;

  if (c == NULL)
    return NULL;
  p = (offset & (MEM_CHUNK_SIZE - 1)) >> MEM_PAGE_SHIFT;
  if (c->pages[p] == NULL) {
    c->pages[p] = calloc (1, MEM_PAGE_SIZE);
    if (c->pages[p] == NULL) {
      /* Keep "every chunk in the directory holds a page" true. */
      if (c->npages == 0)
        drop_chunk (m, chunk_lower_bound (m, c->index));
      return NULL;
    }
    c->npages++;
  }
  return c->pages[p];
}

static int
mem_pread (struct backend *b, void *buf, size_t count, uint64_t offset)
{
  struct memory_backend *m = to_mem (b);
  unsigned char *out = buf;

  if (!backend_range_ok (b, count, offset))
    return -1;

  pthread_rwlock_rdlock (&m->lock);
  while (count > 0) {
    uint64_t in_page = offset & (MEM_PAGE_SIZE - 1);
    size_t n = MEM_PAGE_SIZE - in_page < count
      ? (size_t) (MEM_PAGE_SIZE - in_page) : count;
    const unsigned char *page = page_for_read (m, offset);

    if (page)
      memcpy (out, page + in_page, n);
    else
      memset (out, 0, n);
    out += n;
    offset += n;
    count -= n;
  }
  pthread_rwlock_unlock (&m->lock);
  return 0;
}

/* Caller holds the lock exclusively. */
static int
write_bytes (struct memory_backend *m, const unsigned char *in, size_t count,
             uint64_t offset)
{
  while (count > 0) {
    uint64_t in_page = offset & (MEM_PAGE_SIZE - 1);
    size_t n = MEM_PAGE_SIZE - in_page < count
      ? (size_t) (MEM_PAGE_SIZE - in_page) : count;
    unsigned char *page = page_for_write (m, offset);

    if (page == NULL) {
      errno = ENOMEM;
      return -1;
    }
    memcpy (page + in_page, in, n);
    in += n;
    offset += n;
    count -= n;
  }
  return 0;
}

static int
mem_pwritev (struct backend *b, const struct iovec *iov, int iovcnt,
             uint64_t offset)
{
  struct memory_backend *m = to_mem (b);
  uint64_t total = 0;
  int i, r = 0;

  for (i = 0; i < iovcnt; i++)
    total += iov[i].iov_len;
  if (!backend_range_ok (b, total, offset))
    return -1;

  /* The whole vector goes in under one lock hold, so a reader sees either
   * none or all of one write, as it would from the queue's merged write.
   */
  pthread_rwlock_wrlock (&m->lock);
  for (i = 0; i < iovcnt && r == 0; i++) {
    r = write_bytes (m, iov[i].iov_base, iov[i].iov_len, offset);
    offset += iov[i].iov_len;
  }
  pthread_rwlock_unlock (&m->lock);
  if (r == -1)
    log_error ("%s: out of memory writing %" PRIu64 " bytes",
               b->description, total);
  return r;
}

/* Clears [s, e) inside chunk c: whole pages are freed, partial ones cleared
 * and freed too once nothing but zeroes is left in them.
 */
static void
zero_in_chunk (struct chunk *c, uint64_t s, uint64_t e)
{
  uint64_t base = c->index << MEM_CHUNK_SHIFT;
  unsigned p = (unsigned) ((s - base) >> MEM_PAGE_SHIFT);
  unsigned last = (unsigned) ((e - 1 - base) >> MEM_PAGE_SHIFT);

  for (; p <= last; p++) {
    uint64_t ps = base + ((uint64_t) p << MEM_PAGE_SHIFT);
    uint64_t from = s > ps ? s - ps : 0;
    uint64_t to = e < ps + MEM_PAGE_SIZE ? e - ps : MEM_PAGE_SIZE;

    if (c->pages[p] == NULL)
      continue;
    if (from == 0 && to == MEM_PAGE_SIZE) {
      free_page (c, p);
      continue;
    }
    memset (c->pages[p] + from, 0, to - from);
    if (is_zero (c->pages[p], MEM_PAGE_SIZE))
      free_page (c, p);
  }
}

static int
mem_zero (struct backend *b, uint64_t count, uint64_t offset, bool may_trim)
{
  struct memory_backend *m = to_mem (b);
  uint64_t end = offset + count;
  size_t pos;

  if (!backend_range_ok (b, count, offset))
    return -1;
  if (count == 0)
    return 0;

  /* Walks only the chunks that exist, so zeroing a huge unwritten range
   * costs nothing.
   */
  pthread_rwlock_wrlock (&m->lock);
  pos = chunk_lower_bound (m, offset >> MEM_CHUNK_SHIFT);
  while (pos < m->nchunks && m->dir[pos]->index <= (end - 1) >> MEM_CHUNK_SHIFT) {
    struct chunk *c = m->dir[pos];
    uint64_t cs = c->index << MEM_CHUNK_SHIFT;
    uint64_t s = offset > cs ? offset : cs;
    uint64_t e = end < cs + MEM_CHUNK_SIZE ? end : cs + MEM_CHUNK_SIZE;

    zero_in_chunk (c, s, e);
    if (c->npages == 0)
      drop_chunk (m, pos);
    else
      pos++;
  }
  pthread_rwlock_unlock (&m->lock);
  return 0;
}

static int
mem_trim (struct backend *b, uint64_t count, uint64_t offset)
{
  return mem_zero (b, count, offset, true);
}

static int
mem_flush (struct backend *b)
{
  return 0;
}

static int
mem_cache (struct backend *b, uint64_t count, uint64_t offset)
{
  return 0;
}

/* Appends the extents of [pos, end) inside one existing chunk. */
static int
chunk_extents (const struct chunk *c, uint64_t pos, uint64_t end,
               struct extent_list *list)
{
  uint64_t base = c->index << MEM_CHUNK_SHIFT;

  while (pos < end) {
    unsigned p = (unsigned) ((pos - base) >> MEM_PAGE_SHIFT);
    uint64_t page_end = base + ((uint64_t) (p + 1) << MEM_PAGE_SHIFT);
    uint64_t n = (page_end < end ? page_end : end) - pos;
    uint32_t type = c->pages[p] ? 0 : EXTENT_HOLE | EXTENT_ZERO;

    if (extent_list_append (list, pos, n, type) == -1)
      return -1;
    pos += n;
  }
  return 0;
}

static int
mem_extents (struct backend *b, uint64_t count, uint64_t offset,
             struct extent_list *list)
{
  struct memory_backend *m = to_mem (b);
  size_t first = list->len;
  uint64_t end;
  int r = 0;

  if (offset >= b->size || count == 0) {
    errno = EINVAL;
    return -1;
  }
  end = count > b->size - offset ? b->size : offset + count;

  pthread_rwlock_rdlock (&m->lock);
  while (offset < end && r == 0 && list->len - first < MAX_EXTENTS_PER_CALL) {
    uint64_t index = offset >> MEM_CHUNK_SHIFT;
    size_t pos = chunk_lower_bound (m, index);
    uint64_t stop;

    if (pos < m->nchunks && m->dir[pos]->index == index) {
      uint64_t cs = index << MEM_CHUNK_SHIFT;

      stop = end - cs < MEM_CHUNK_SIZE ? end : cs + MEM_CHUNK_SIZE;
      r = chunk_extents (m->dir[pos], offset, stop, list);
    }
    else {
      stop = pos < m->nchunks ? m->dir[pos]->index << MEM_CHUNK_SHIFT : end;
      if (stop > end)
        stop = end;
      r = extent_list_append (list, offset, stop - offset,
                              EXTENT_HOLE | EXTENT_ZERO);
    }
    offset = stop;
  }
  pthread_rwlock_unlock (&m->lock);
  return r;
}

static void
mem_close (struct backend *b)
{
  struct memory_backend *m = to_mem (b);
  size_t i;
  unsigned p;

  for (i = 0; i < m->nchunks; i++) {
    for (p = 0; p < PAGES_PER_CHUNK; p++)
      free (m->dir[i]->pages[p]);
    free (m->dir[i]);
  }
  free (m->dir);
  pthread_rwlock_destroy (&m->lock);
  free (b->description);
  free (m);
}

static const struct backend_ops memory_ops = {
  .kind = "memory",
  .pread = mem_pread,
  .pwritev = mem_pwritev,
  .zero = mem_zero,
  .trim = mem_trim,
  .flush = mem_flush,
  .extents = mem_extents,
  .cache = mem_cache,
  .close = mem_close,
};

/* "memory 1.0 GiB (sparse)": what a user typed, give or take rounding. */
static char *
describe (uint64_t size)
{
  char text[32], *s;

  format_size (text, sizeof text, size);
  return asprintf (&s, "memory %s (sparse)", text) == -1 ? NULL : s;
}

static int
init_lock (pthread_rwlock_t *lock)
{
  pthread_rwlockattr_t attr;
  int err;

  /* glibc's default rwlock lets a stream of readers starve the dispatch
   * thread's writes forever.
   */
  pthread_rwlockattr_init (&attr);
  pthread_rwlockattr_setkind_np (&attr,
                                 PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  err = pthread_rwlock_init (lock, &attr);
  pthread_rwlockattr_destroy (&attr);
  return err;
}

struct backend *
backend_memory_new (uint64_t size)
{
  struct memory_backend *m;
  int err;

  if (size == 0 || size > INT64_MAX) {
    log_error ("memory: size %" PRIu64 " must be between 1 and 2^63-1 bytes",
               size);
    errno = EINVAL;
    return NULL;
  }

  m = calloc (1, sizeof *m);
  if (m == NULL) {
    log_error ("memory: %m");
    return NULL;
  }
  err = init_lock (&m->lock);
  if (err) {
    free (m);
    errno = err;
    log_error ("memory: pthread_rwlock_init: %m");
    return NULL;
  }
  m->b.ops = &memory_ops;
  m->b.size = size;
  m->b.limits = (struct block_limits) {
    .minimum = 1, .preferred = 4096, .maximum = 64 * 1024 * 1024
  };
  m->b.max_write = 32 * 1024 * 1024;
  m->b.max_iov = IOV_MAX;
  m->b.can_fast_zero = true;
  m->b.trim_reads_zero = true;
  m->b.description = describe (size);
  if (m->b.description == NULL) {
    log_error ("memory: %m");
    pthread_rwlock_destroy (&m->lock);
    free (m);
    errno = ENOMEM;
    return NULL;
  }
  return &m->b;
}
