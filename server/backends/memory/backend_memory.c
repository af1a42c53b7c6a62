/* plugq: sparse RAM backend.
 *
 * The disk is cut into 64 KiB pages, allocated on first write.  Pages are
 * grouped in 256 MiB chunks, found through a three-level directory
 * indexed by chunk number whose nodes are allocated on first use.
 * Memory therefore follows what was written, never the disk size: a 2^63
 * byte disk with nothing written costs one small struct, and skipping an
 * unwritten region of any size skips whole directory nodes.
 *
 * Locking lets several of the queue's writes run at once (max_writers)
 * and costs a write or a read one page mutex.  Directory nodes and chunks
 * are only ever added (under grow_lock, published with a release store)
 * and freed at close, so finding a chunk takes no lock at all; a chunk
 * whose pages were all zeroed stays, empty, until the disk closes (32 KiB
 * for each 256 MiB region ever written).  Bytes are copied, and pages
 * added or freed, under one of PAGE_LOCKS mutexes chosen by page, so a
 * reader, a writer and a zero of one page never touch it at the same
 * time, and two writers of different pages seldom wait for each other.
 * A write or zero that spans pages is therefore not atomic to a reader;
 * it need not be: the queue lays every write still in flight over what
 * a read returns.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "backends/backend.h"
#include "backends/backend_type.h"
#include "common/config_value.h"
#include "common/lock.h"
#include "common/log.h"
#include "common/minmax.h"
#include "common/size_format.h"

#define MEM_PAGE_SHIFT 16
#define MEM_PAGE_SIZE ((uint64_t) 1 << MEM_PAGE_SHIFT)
#define MEM_CHUNK_SHIFT 28
#define MEM_CHUNK_SIZE ((uint64_t) 1 << MEM_CHUNK_SHIFT)
#define PAGES_PER_CHUNK (1u << (MEM_CHUNK_SHIFT - MEM_PAGE_SHIFT))
#define PAGE_LOCKS 64
/* The queue's holders of one disk rarely exceed the CPUs that run them. */
#define MEM_MAX_WRITERS 8

/* Chunk numbers (below 2^35 on a disk below 2^63 bytes) split into a
 * top, a middle and a leaf index.
 */
#define DIR_LEAF_BITS 12
#define DIR_MID_BITS 12
#define DIR_TOP_BITS (63 - MEM_CHUNK_SHIFT - DIR_MID_BITS - DIR_LEAF_BITS)
#define DIR_FANOUT (1u << DIR_LEAF_BITS)   /* = 1 << DIR_MID_BITS */

struct chunk {
  uint64_t index;               /* offset >> MEM_CHUNK_SHIFT */
  unsigned char *pages[PAGES_PER_CHUNK];      /* set under a page lock */
};

/* Every pointer in the directory is set once, under grow_lock, and read
 * with an acquire load.
 */
struct dir_leaf {
  struct chunk *chunk[DIR_FANOUT];
};

struct dir_mid {
  struct dir_leaf *leaf[DIR_FANOUT];
};

struct memory_backend {
  struct backend b;             /* first, so the two pointers convert */
  struct lock grow_lock;        /* adding to the directory */
  struct lock page_lock[PAGE_LOCKS];
  struct dir_mid *top[1u << DIR_TOP_BITS];
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

static unsigned
top_slot (uint64_t index)
{
  return (unsigned) (index >> (DIR_MID_BITS + DIR_LEAF_BITS));
}

static unsigned
mid_slot (uint64_t index)
{
  return (unsigned) (index >> DIR_LEAF_BITS) & (DIR_FANOUT - 1);
}

static unsigned
leaf_slot (uint64_t index)
{
  return (unsigned) index & (DIR_FANOUT - 1);
}

#define LOAD(p) __atomic_load_n (&(p), __ATOMIC_ACQUIRE)
#define PUBLISH(p, v) __atomic_store_n (&(p), (v), __ATOMIC_RELEASE)

/* The first chunk numbered from index to last, or NULL: whole nodes that
 * were never allocated are skipped at once.  No lock.
 */
static struct chunk *
next_chunk (const struct memory_backend *m, uint64_t index, uint64_t last)
{
  const uint64_t mid_span = (uint64_t) DIR_FANOUT * DIR_FANOUT;

  while (index <= last) {
    const struct dir_mid *mid = LOAD (m->top[top_slot (index)]);
    const struct dir_leaf *leaf;
    struct chunk *c;

    if (mid == NULL) {
      index = (index | (mid_span - 1)) + 1;
      continue;
    }
    leaf = LOAD (mid->leaf[mid_slot (index)]);
    if (leaf == NULL) {
      index = (index | (DIR_FANOUT - 1)) + 1;
      continue;
    }
    c = LOAD (leaf->chunk[leaf_slot (index)]);
    if (c)
      return c;
    index++;
  }
  return NULL;
}

/* The chunk numbered index, or NULL.  No lock. */
static struct chunk *
find_chunk (const struct memory_backend *m, uint64_t index)
{
  const struct dir_mid *mid = LOAD (m->top[top_slot (index)]);
  const struct dir_leaf *leaf;

  if (mid == NULL)
    return NULL;
  leaf = LOAD (mid->leaf[mid_slot (index)]);
  return leaf ? LOAD (leaf->chunk[leaf_slot (index)]) : NULL;
}

/* *slot, allocated (size bytes, zeroed) and published if it was NULL.
 * grow_lock held.
 */
static void *
node_at (struct memory_backend *m, void **slot, size_t size)
{
  void *node = *slot;

  lock_assert_held (&m->grow_lock);
  if (node == NULL) {
    node = calloc (1, size);
    if (node)
      PUBLISH (*slot, node);
  }
  return node;
}

/* The chunk numbered index, added with the directory nodes it needs if
 * no writer did first; NULL when out of memory.  Takes grow_lock.
 */
static struct chunk *
add_chunk (struct memory_backend *m, uint64_t index)
{
  struct dir_mid *mid;
  struct dir_leaf *leaf = NULL;
  struct chunk *c = NULL;

  lock_acquire (&m->grow_lock);
  mid = node_at (m, (void **) &m->top[top_slot (index)], sizeof *mid);
  if (mid)
    leaf = node_at (m, (void **) &mid->leaf[mid_slot (index)], sizeof *leaf);
  if (leaf) {
    c = leaf->chunk[leaf_slot (index)];
    if (c == NULL && (c = calloc (1, sizeof *c)) != NULL) {
      c->index = index;
      PUBLISH (leaf->chunk[leaf_slot (index)], c);
    }
  }
  lock_release (&m->grow_lock);
  return c;
}

/* Page pointers are read without the page's lock where only "is there a
 * page" matters (extents), while a writer may be adding one or a zero
 * freeing it.
 */
static unsigned char *
page_at (const struct chunk *c, unsigned p)
{
  return __atomic_load_n (&c->pages[p], __ATOMIC_ACQUIRE);
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

/* The page holding offset, allocated if need be.  The page's lock held. */
static unsigned char *
page_for_write (struct memory_backend *m, struct chunk *c, uint64_t offset)
{
  unsigned p = page_in_chunk (offset);
  unsigned char *page;

  lock_assert_held (page_lock (m, offset));
  page = c->pages[p];
  if (page == NULL) {
    page = calloc (1, MEM_PAGE_SIZE);
    if (page)
      PUBLISH (c->pages[p], page);
  }
  return page;
}

static int
mem_pread (struct backend *b, void *buf, size_t count, uint64_t offset)
{
  struct memory_backend *m = to_mem (b);
  unsigned char *out = buf;

  if (!backend_range_ok (b, count, offset))
    return -1;

  while (count > 0) {
    size_t n = span_in_page (offset, count);
    const struct chunk *c = find_chunk (m, offset >> MEM_CHUNK_SHIFT);
    struct lock *lock = page_lock (m, offset);
    const unsigned char *page;

    lock_acquire (lock);
    page = c ? c->pages[page_in_chunk (offset)] : NULL;
    if (page)
      memcpy (out, page + (offset & (MEM_PAGE_SIZE - 1)), n);
    else
      memset (out, 0, n);
    lock_release (lock);
    out += n;
    offset += n;
    count -= n;
  }
  return 0;
}

static int
write_bytes (struct memory_backend *m, const unsigned char *in, size_t count,
             uint64_t offset)
{
  while (count > 0) {
    size_t n = span_in_page (offset, count);
    uint64_t index = offset >> MEM_CHUNK_SHIFT;
    struct chunk *c = find_chunk (m, index);
    struct lock *lock = page_lock (m, offset);
    unsigned char *page;

    if (c == NULL && (c = add_chunk (m, index)) == NULL)
      return -1;
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

  for (i = 0; i < iovcnt && r == 0; i++) {
    r = write_bytes (m, iov[i].iov_base, iov[i].iov_len, offset);
    offset += iov[i].iov_len;
  }
  if (r == -1) {
    log_error ("%s: out of memory writing %" PRIu64 " bytes",
               b->description, total);
    errno = ENOMEM;
  }
  return r;
}

/* Clears [from, to) of the page of chunk c at disk offset ps, under the
 * page's lock: the page is freed when that is all of it, or when nothing
 * but zeroes is left.
 */
static void
zero_in_page (struct memory_backend *m, struct chunk *c, uint64_t ps,
              uint64_t from, uint64_t to)
{
  unsigned p = page_in_chunk (ps);
  struct lock *lock = page_lock (m, ps);
  unsigned char *page;

  lock_acquire (lock);
  page = c->pages[p];
  if (page && !(from == 0 && to == MEM_PAGE_SIZE)) {
    memset (page + from, 0, to - from);
    if (!is_zero (page, MEM_PAGE_SIZE))
      page = NULL;              /* keeps it */
  }
  if (page) {
    PUBLISH (c->pages[p], NULL);
    free (page);
  }
  lock_release (lock);
}

/* Clears [s, e) inside chunk c, a page at a time. */
static void
zero_in_chunk (struct memory_backend *m, struct chunk *c, uint64_t s,
               uint64_t e)
{
  uint64_t base = c->index << MEM_CHUNK_SHIFT;
  unsigned p = (unsigned) ((s - base) >> MEM_PAGE_SHIFT);
  unsigned last = (unsigned) ((e - 1 - base) >> MEM_PAGE_SHIFT);

  for (; p <= last; p++) {
    uint64_t ps = base + ((uint64_t) p << MEM_PAGE_SHIFT);
    uint64_t from = s > ps ? s - ps : 0;
    uint64_t to = MIN (e - ps, MEM_PAGE_SIZE);

    if (page_at (c, p))
      zero_in_page (m, c, ps, from, to);
  }
}

static int
mem_zero (struct backend *b, uint64_t count, uint64_t offset, bool may_trim)
{
  struct memory_backend *m = to_mem (b);
  uint64_t end = offset + count;
  uint64_t index, last;
  struct chunk *c;

  if (!backend_range_ok (b, count, offset))
    return -1;
  if (count == 0)
    return 0;

  /* Walks only the chunks that exist, so zeroing a huge unwritten range
   * costs nothing.
   */
  last = (end - 1) >> MEM_CHUNK_SHIFT;
  for (index = offset >> MEM_CHUNK_SHIFT;
       (c = next_chunk (m, index, last)) != NULL; index = c->index + 1) {
    uint64_t cs = c->index << MEM_CHUNK_SHIFT;

    zero_in_chunk (m, c, MAX (offset, cs), MIN (end, cs + MEM_CHUNK_SIZE));
  }
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
  uint64_t end, last;
  int r = 0;

  if (offset >= b->size || count == 0) {
    errno = EINVAL;
    return -1;
  }
  end = count > b->size - offset ? b->size : offset + count;
  last = (end - 1) >> MEM_CHUNK_SHIFT;

  while (offset < end && r == 0 && list->len - first < MAX_EXTENTS_PER_CALL) {
    uint64_t index = offset >> MEM_CHUNK_SHIFT;
    const struct chunk *c = next_chunk (m, index, last);
    uint64_t stop;

    if (c && c->index == index) {
      stop = MIN (end, (index << MEM_CHUNK_SHIFT) + MEM_CHUNK_SIZE);
      r = chunk_extents (c, offset, stop, list);
    }
    else {
      stop = c ? c->index << MEM_CHUNK_SHIFT : end;
      r = extent_list_append (list, offset, stop - offset,
                              EXTENT_HOLE | EXTENT_ZERO);
    }
    offset = stop;
  }
  return r;
}

static void
destroy_locks (struct memory_backend *m)
{
  lock_destroy (&m->grow_lock);
  for (unsigned i = 0; i < PAGE_LOCKS; i++)
    lock_destroy (&m->page_lock[i]);
}

static void
free_chunk (struct chunk *c)
{
  for (unsigned p = 0; p < PAGES_PER_CHUNK; p++)
    free (c->pages[p]);
  free (c);
}

static void
free_mid (struct dir_mid *mid)
{
  for (unsigned i = 0; i < DIR_FANOUT; i++) {
    struct dir_leaf *leaf = mid->leaf[i];

    if (leaf == NULL)
      continue;
    for (unsigned j = 0; j < DIR_FANOUT; j++)
      if (leaf->chunk[j])
        free_chunk (leaf->chunk[j]);
    free (leaf);
  }
  free (mid);
}

static void
mem_close (struct backend *b)
{
  struct memory_backend *m = to_mem (b);

  for (unsigned i = 0; i < (1u << DIR_TOP_BITS); i++)
    if (m->top[i])
      free_mid (m->top[i]);
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

static void
init_locks (struct memory_backend *m)
{
  lock_init (&m->grow_lock);
  for (unsigned i = 0; i < PAGE_LOCKS; i++)
    lock_init (&m->page_lock[i]);
}

struct backend *
backend_memory_new (uint64_t size)
{
  struct memory_backend *m;

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
  init_locks (m);
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
