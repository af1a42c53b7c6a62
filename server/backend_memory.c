/* plugq: sparse RAM backend.
 *
 * The disk is cut into 64 KiB pages, allocated on first write.  Pages are
 * grouped in 256 MiB chunks, and the chunks that hold at least one page sit
 * in a vector sorted by chunk number.  Memory therefore follows what was
 * written, never the disk size: a 2^63 byte disk with nothing written costs
 * one small struct, and skipping an unwritten region of any size is one
 * binary search.
 *
 * Locking lets several of the queue's writes run at once (max_writers):
 * the directory lock is taken shared by reads and by writes into chunks
 * that exist, and exclusively only to add or drop a chunk or to zero.
 * Bytes are copied under one of PAGE_LOCKS mutexes chosen by page, so a
 * reader and a writer of one page never touch it at the same time, and
 * two writers of different pages never wait for each other.  A write
 * that spans pages is therefore not atomic to a reader; it need not be:
 * the queue lays every write still in flight over what a read returns.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <config.h>

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
#include "backend_type.h"
#include "config_value.h"
#include "lock.h"
#include "log.h"
#include "minmax.h"
#include "size_format.h"

#define MEM_PAGE_SHIFT 16
#define MEM_PAGE_SIZE ((uint64_t) 1 << MEM_PAGE_SHIFT)
#define MEM_CHUNK_SHIFT 28
#define MEM_CHUNK_SIZE ((uint64_t) 1 << MEM_CHUNK_SHIFT)
#define PAGES_PER_CHUNK (1u << (MEM_CHUNK_SHIFT - MEM_PAGE_SHIFT))
#define PAGE_LOCKS 64
/* The queue's holders of one disk rarely exceed the CPUs that run them. */
#define MEM_MAX_WRITERS 8

struct chunk {
  uint64_t index;               /* offset >> MEM_CHUNK_SHIFT */
  unsigned npages;              /* non-NULL entries in pages (atomic) */
  unsigned char *pages[PAGES_PER_CHUNK];      /* set under a page lock */
};

struct memory_backend {
  struct backend b;             /* first, so the two pointers convert */
  pthread_rwlock_t lock;        /* the directory */
  struct lock page_lock[PAGE_LOCKS];
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

/* Page pointers are read without the page's lock where only "is there a
 * page" matters (extents, zero), while a writer may be adding one.
 */
static unsigned char *
page_at (const struct chunk *c, unsigned p)
{
  return __atomic_load_n (&c->pages[p], __ATOMIC_ACQUIRE);
}

/* Directory lock held exclusively. */
static void
free_page (struct chunk *c, unsigned p)
{
  free (c->pages[p]);
  __atomic_store_n (&c->pages[p], NULL, __ATOMIC_RELEASE);
  __atomic_fetch_sub (&c->npages, 1, __ATOMIC_RELAXED);
}

static unsigned
page_in_chunk (uint64_t offset)
{
  return (offset & (MEM_CHUNK_SIZE - 1)) >> MEM_PAGE_SHIFT;
}

static struct lock *
page_lock (struct memory_backend *m, uint64_t offset)
{
  return &m->page_lock[(offset >> MEM_PAGE_SHIFT) % PAGE_LOCKS];
}

/* The bytes from offset to the end of its page, or count if fewer. */
static size_t
span_in_page (uint64_t offset, size_t count)
{
  uint64_t left = MEM_PAGE_SIZE - (offset & (MEM_PAGE_SIZE - 1));

  return MIN (left, (uint64_t) count);
}

/* The page holding offset, allocated if need be.  Directory lock held
 * shared, and the page's lock held.
 */
static unsigned char *
page_for_write (struct memory_backend *m, struct chunk *c, uint64_t offset)
{
  unsigned p = page_in_chunk (offset);
  unsigned char *page;

  lock_assert_held (page_lock (m, offset));
  page = page_at (c, p);
  if (page == NULL) {
    page = calloc (1, MEM_PAGE_SIZE);
    if (page == NULL)
      return NULL;
    __atomic_store_n (&c->pages[p], page, __ATOMIC_RELEASE);
    __atomic_fetch_add (&c->npages, 1, __ATOMIC_RELAXED);
  }
  return page;
}

/* Drops m->lock, held shared on entry and on return, while it adds the
 * chunk for index.  A zero elsewhere may drop that chunk again before the
 * caller looks (it holds no page yet), so the caller looks again.
 */
static int
add_chunk (struct memory_backend *m, uint64_t index)
{
  struct chunk *c;

  pthread_rwlock_unlock (&m->lock);
  pthread_rwlock_wrlock (&m->lock);
  c = get_chunk (m, index);
  pthread_rwlock_unlock (&m->lock);
  pthread_rwlock_rdlock (&m->lock);
  return c ? 0 : -1;
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
    size_t n = span_in_page (offset, count);
    const struct chunk *c = find_chunk (m, offset >> MEM_CHUNK_SHIFT);
    struct lock *lock = page_lock (m, offset);
    const unsigned char *page;

    lock_acquire (lock);
    page = c ? page_at (c, page_in_chunk (offset)) : NULL;
    if (page)
      memcpy (out, page + (offset & (MEM_PAGE_SIZE - 1)), n);
    else
      memset (out, 0, n);
    lock_release (lock);
    out += n;
    offset += n;
    count -= n;
  }
  pthread_rwlock_unlock (&m->lock);
  return 0;
}

/* Directory lock held shared; drops m->lock while add_chunk adds a
 * chunk.
 */
static int
write_bytes (struct memory_backend *m, const unsigned char *in, size_t count,
             uint64_t offset)
{
  while (count > 0) {
    size_t n = span_in_page (offset, count);
    struct chunk *c = find_chunk (m, offset >> MEM_CHUNK_SHIFT);
    struct lock *lock = page_lock (m, offset);
    unsigned char *page;

    if (c == NULL) {
      if (add_chunk (m, offset >> MEM_CHUNK_SHIFT) == -1)
        return -1;
      continue;
    }
    lock_acquire (lock);
    page = page_for_write (m, c, offset);
    if (page)
      memcpy (page + (offset & (MEM_PAGE_SIZE - 1)), in, n);
    lock_release (lock);
    if (page == NULL)
      return -1;
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

  pthread_rwlock_rdlock (&m->lock);
  for (i = 0; i < iovcnt && r == 0; i++) {
    r = write_bytes (m, iov[i].iov_base, iov[i].iov_len, offset);
    offset += iov[i].iov_len;
  }
  pthread_rwlock_unlock (&m->lock);
  if (r == -1) {
    log_error ("%s: out of memory writing %" PRIu64 " bytes",
               b->description, total);
    errno = ENOMEM;
  }
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
    uint64_t to = MIN (e - ps, MEM_PAGE_SIZE);

    if (page_at (c, p) == NULL)
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
    uint64_t s = MAX (offset, cs);
    uint64_t e = MIN (end, cs + MEM_CHUNK_SIZE);

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
    uint64_t n = MIN (page_end, end) - pos;
    uint32_t type = page_at (c, p) ? 0 : EXTENT_HOLE | EXTENT_ZERO;

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

      stop = MIN (end, cs + MEM_CHUNK_SIZE);
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
destroy_locks (struct memory_backend *m)
{
  pthread_rwlock_destroy (&m->lock);
  for (unsigned i = 0; i < PAGE_LOCKS; i++)
    lock_destroy (&m->page_lock[i]);
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
  destroy_locks (m);
  free (b->description);
  free (m);
}

/* The one entry for writes, zeroes and trims.  Memory is as durable
 * as it will ever be once written: its flush, which FUA calls, does
 * nothing.
 */
static const struct backend_sync_ops mem_sync_ops = {
  .pwritev = mem_pwritev, .zero = mem_zero, .trim = mem_trim,
};

static int
mem_io (struct backend *b, struct backend_io *io)
{
  return backend_io_by_kind (b, io, &mem_sync_ops);
}

static const struct backend_ops memory_ops = {
  .kind = "memory",
  .pread = mem_pread,
  .io = mem_io,
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
init_locks (struct memory_backend *m)
{
  pthread_rwlockattr_t attr;
  int err;

  /* glibc's default rwlock lets a stream of reads and writes starve a
   * zero, or a write's new chunk, forever.
   */
  pthread_rwlockattr_init (&attr);
  pthread_rwlockattr_setkind_np (&attr,
                                 PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  err = pthread_rwlock_init (&m->lock, &attr);
  pthread_rwlockattr_destroy (&attr);
  for (unsigned i = 0; err == 0 && i < PAGE_LOCKS; i++)
    lock_init (&m->page_lock[i]);
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
  err = init_locks (m);
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
  m->b.max_writers = MEM_MAX_WRITERS;
  m->b.writes_to_memory = true;
  m->b.can_fua = true;
  m->b.can_fast_zero = true;
  m->b.trim_reads_zero = true;
  m->b.description = describe (size);
  if (m->b.description == NULL) {
    log_error ("memory: %m");
    destroy_locks (m);
    free (m);
    errno = ENOMEM;
    return NULL;
  }
  return &m->b;
}

/* ------------------------------------------------------------ type */

struct memory_args {
  uint64_t size;
};

static void *
memory_new_args (void)
{
  return calloc (1, sizeof (struct memory_args));
}

static int
memory_start (void *args, const char *disk, const char *value)
{
  struct memory_args *a = args;

  return config_parse_size_key ("memory", value, false, &a->size);
}

static struct backend *
memory_open_args (const void *args, bool readonly)
{
  const struct memory_args *a = args;

  return backend_memory_new (a->size);
}

const struct backend_type backend_type_memory = {
  .name = "memory",
  .article = "a",
  .value_name = "SIZE",
  .keys = (const char *const[]) { NULL },
  .summary = "sparse memory",
  .help =
  "memory=<SIZE>               Backend of the last disk=: sparse RAM of SIZE.\n",
  .new_args = memory_new_args,
  .start = memory_start,
  .open = memory_open_args,
  .free_args = free,
};
