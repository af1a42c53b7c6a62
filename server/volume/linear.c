/* plugq: exports as linear tables over disks (dm-linear).
 *
 * A request is cut at row boundaries and each part goes to its member's
 * own queue at the member-relative offset, so each member keeps its own
 * plugging, merging and elevator.  A FLUSH unplugs and flushes every
 * distinct member once, all of them at the same time: each member's
 * dispatch thread does its own drain and backend flush while this thread
 * only waits.  A FUA request over several members flushes the members
 * it touched in the same way.  No lock of the volume exists: a table
 * never changes once finished (growing a volume makes a new one).
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "linear.h"
#include "common/log.h"
#include "common/minmax.h"
#include "common/size_format.h"
#include "common/small_vec.h"

static struct linear *
linear_alloc (const char *name, bool is_volume)
{
  struct linear *l = calloc (1, sizeof *l);

  if (l == NULL || (l->name = strdup (name)) == NULL) {
    free (l);
    return NULL;
  }
  atomic_init (&l->refs, 1);
  l->is_volume = is_volume;
  return l;
}

struct linear *
linear_new_volume (const char *name)
{
  return linear_alloc (name, true);
}

struct linear *
linear_new_disk (struct queue *disk)
{
  struct linear *l = linear_alloc (queue_name (disk), false);

  if (l == NULL)
    return NULL;
  if (linear_append_disk (l, disk, 0, queue_backend (disk)->size) == -1
      || linear_finish (l) == -1) {
    linear_free (l);
    return NULL;
  }
  return l;
}

static int
append_row (struct linear *l, struct queue *disk, uint64_t disk_offset,
            uint64_t length)
{
  struct linear_row *rows;

  rows = realloc (l->rows, (l->nr_rows + 1) * sizeof *rows);
  if (rows == NULL) {
    log_error ("linear=%s: %m", l->name);
    return -1;
  }
  l->rows = rows;
  rows[l->nr_rows++] = (struct linear_row) {
    .start = l->size, .length = length,
    .disk = disk, .disk_offset = disk_offset,
  };
  l->size += length;
  return 0;
}

int
linear_append_disk (struct linear *l, struct queue *disk, uint64_t offset,
                    uint64_t length)
{
  uint64_t disk_size = queue_backend (disk)->size;
  uint32_t align = queue_backend (disk)->limits.minimum;

  if (length == 0 || offset > disk_size || length > disk_size - offset) {
    log_error ("linear=%s: range %" PRIu64 "+%" PRIu64
               " is not inside %s (%" PRIu64 " bytes)",
               l->name, offset, length, queue_name (disk), disk_size);
    errno = ERANGE;
    return -1;
  }
  /* A request aligned for the volume must stay aligned for the member. */
  if (align > 1 && ((offset | length | l->size) & (align - 1))) {
    log_error ("linear=%s: %s needs %" PRIu32 "-byte alignment; offset "
               "%" PRIu64 ", length %" PRIu64 " and position %" PRIu64
               " in the volume must be multiples of it",
               l->name, queue_name (disk), align, offset, length, l->size);
    errno = EINVAL;
    return -1;
  }
  return append_row (l, disk, offset, length);
}

/* Flattening: the rows of `member` that fall in [offset, offset+length)
 * become rows of l, so no request ever walks a tree of volumes.
 */
int
linear_append_linear (struct linear *l, const struct linear *member,
                      uint64_t offset, uint64_t length)
{
  uint64_t end = offset + length;

  if (length == 0 || offset > member->size || length > member->size - offset) {
    log_error ("linear=%s: range %" PRIu64 "+%" PRIu64
               " is not inside %s (%" PRIu64 " bytes)",
               l->name, offset, length, member->name, member->size);
    errno = ERANGE;
    return -1;
  }
  for (size_t i = 0; i < member->nr_rows; i++) {
    const struct linear_row *r = &member->rows[i];
    uint64_t from = r->start > offset ? r->start : offset;
    uint64_t to = r->start + r->length < end ? r->start + r->length : end;

    if (from < to
        && linear_append_disk (l, r->disk, r->disk_offset + (from - r->start),
                               to - from) == -1)
      return -1;
  }
  return 0;
}

static bool
has_member (const struct linear *l, const struct queue *disk)
{
  for (size_t i = 0; i < l->nr_members; i++)
    if (l->members[i] == disk)
      return true;
  return false;
}

static int
collect_members (struct linear *l)
{
  l->members = calloc (l->nr_rows, sizeof *l->members);
  if (l->members == NULL)
    return -1;
  for (size_t i = 0; i < l->nr_rows; i++)
    if (!has_member (l, l->rows[i].disk))
      l->members[l->nr_members++] = l->rows[i].disk;
  return 0;
}

/* The strictest limits of all members: every member must accept what a
 * client sends the volume.
 */
static void
combine_limits (struct linear *l)
{
  l->limits = (struct block_limits) { 1, 512, UINT32_MAX };
  for (size_t i = 0; i < l->nr_members; i++) {
    const struct block_limits *m = &queue_backend (l->members[i])->limits;

    if (m->minimum > l->limits.minimum)
      l->limits.minimum = m->minimum;
    if (m->preferred > l->limits.preferred)
      l->limits.preferred = m->preferred;
    if (m->maximum < l->limits.maximum)
      l->limits.maximum = m->maximum;
  }
  if (l->limits.preferred < l->limits.minimum)
    l->limits.preferred = l->limits.minimum;
  if (l->limits.maximum < l->limits.preferred)
    l->limits.maximum = l->limits.preferred;
}

/* A disk's export: its backend's description, with the size when it does
 * not say it: "memory 1.0 GiB (sparse)", "file /srv/db.img (O_DIRECT),
 * 10.0 GiB".
 */
static int
describe_disk (struct linear *l)
{
  const struct backend *b = queue_backend (l->members[0]);
  const char *desc = b->description ? b->description : b->ops->kind;
  char size[32];

  format_size (size, sizeof size, b->size);
  if (strstr (desc, size))
    l->description = strdup (desc);
  else if ((l->description = malloc (strlen (desc) + strlen (size) + 3)))
    sprintf (l->description, "%s, %s", desc, size);
  return l->description ? 0 : -1;
}

/* A volume's: "linear volume 3.0 GiB: db, logs" (distinct disks). */
static int
describe (struct linear *l)
{
  char size[32];
  size_t len = 0, cap = 64;
  char *d;

  if (!l->is_volume)
    return describe_disk (l);
  for (size_t i = 0; i < l->nr_members; i++)
    cap += strlen (queue_name (l->members[i])) + 2;
  if ((d = malloc (cap)) == NULL)
    return -1;
  format_size (size, sizeof size, l->size);
  len = snprintf (d, cap, "linear volume %s:", size);
  for (size_t i = 0; i < l->nr_members; i++)
    len += snprintf (d + len, cap - len, "%s%s", i ? ", " : " ",
                     queue_name (l->members[i]));
  l->description = d;
  return 0;
}

static bool
members_zero_fast (const struct linear *l)
{
  for (size_t i = 0; i < l->nr_members; i++)
    if (!queue_backend (l->members[i])->can_fast_zero)
      return false;
  return true;
}

int
linear_finish (struct linear *l)
{
  if (l->nr_rows == 0) {
    log_error ("linear=%s: a volume needs at least one member", l->name);
    errno = EINVAL;
    return -1;
  }
  if (collect_members (l) == -1)
    return -1;
  combine_limits (l);
  l->can_fast_zero = members_zero_fast (l);
  return describe (l);
}

void
linear_free (struct linear *l)
{
  if (l == NULL)
    return;
  free (l->name);
  free (l->description);
  free (l->rows);
  free (l->members);
  free (l);
}

void
linear_hold (struct linear *l)
{
  if (l)
    atomic_fetch_add_explicit (&l->refs, 1, memory_order_relaxed);
}

/* The last holder's release sees every other holder's use of the table
 * done (acq_rel), so freeing it races with none.
 */
void
linear_release (struct linear *l)
{
  if (l && atomic_fetch_sub_explicit (&l->refs, 1, memory_order_acq_rel) == 1)
    linear_free (l);
}

/* ------------------------------------------------------------ mapping */

static size_t
row_at (const struct linear *l, uint64_t offset)
{
  size_t lo = 0, hi = l->nr_rows;

  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;

    if (l->rows[mid].start <= offset)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

/* One member-sized part of a request. */
struct part {
  const struct linear_row *row;
  uint64_t disk_offset;
  uint64_t length;
  uint64_t done;                /* bytes of the request before this part */
};

typedef int (*part_fn) (struct part *, void *arg);

static int
for_each_part (struct linear *l, uint64_t count, uint64_t offset,
               part_fn fn, void *arg)
{
  uint64_t done = 0;

  if (offset > l->size || count > l->size - offset) {
    errno = ENOSPC;
    return -1;
  }
  for (size_t i = row_at (l, offset); done < count; i++) {
    const struct linear_row *r = &l->rows[i];
    uint64_t pos = offset + done;
    uint64_t in_row = pos - r->start;
    uint64_t n = MIN (r->length - in_row, count - done);
    struct part p = { r, r->disk_offset + in_row, n, done };

    if (fn (&p, arg) == -1)
      return -1;
    done += n;
  }
  return 0;
}

/* A member a volume's FLUSH or FUA request flushes: its error mark,
 * taken when the request reached it (queue_error_mark), and its ticket.
 */
struct member_flush {
  struct queue *q;
  uint64_t mark;
  uint64_t ticket;
};

/* Starts a flush on every member before waiting for any, so their
 * dispatch threads drain and flush at the same time.
 */
static int
flush_members (struct member_flush *m, size_t n, struct session *s)
{
  int first_err = 0;

  for (size_t i = 0; i < n; i++)
    m[i].ticket = queue_flush_start (m[i].q);
  /* Wait for all, even after an error: each member must still be told
   * its latched errors were reported, and a failed member must not
   * hide whether the others made it.
   */
  for (size_t i = 0; i < n; i++)
    if (queue_flush_wait (m[i].q, s, m[i].ticket, m[i].mark) == -1
        && !first_err)
      first_err = errno;
  if (first_err) {
    errno = first_err;
    return -1;
  }
  return 0;
}

struct io_args {
  struct session *session;
  void *buf;
  unsigned flags;
};

static int
read_part (struct part *p, void *arg)
{
  struct io_args *a = arg;

  return queue_pread (p->row->disk, (char *) a->buf + p->done, p->length,
                      p->disk_offset);
}

static int
write_part (struct part *p, void *arg)
{
  struct io_args *a = arg;

  return queue_pwrite (p->row->disk, a->session, (char *) a->buf + p->done,
                       p->length, p->disk_offset, a->flags);
}

static int
zero_part (struct part *p, void *arg)
{
  struct io_args *a = arg;

  return queue_zero (p->row->disk, a->session, p->length, p->disk_offset,
                     a->flags);
}

static int
trim_part (struct part *p, void *arg)
{
  struct io_args *a = arg;

  return queue_trim (p->row->disk, a->session, p->length, p->disk_offset,
                     a->flags);
}

static int
cache_part (struct part *p, void *arg)
{
  return queue_cache (p->row->disk, p->length, p->disk_offset);
}

/* Every distinct member a FUA request hands a part to, marked before
 * its first part there is queued: a write-back error of that part is
 * then this request's to report, even if a FLUSH of the same
 * connection reports it first.
 */
struct fua_args {
  part_fn fn;
  void *arg;
  struct session *session;
  SMALL_VEC (struct member_flush, 8) touched;
};

static int
fua_part (struct part *p, void *arg)
{
  struct fua_args *f = arg;
  struct queue *q = p->row->disk;
  size_t i = 0;

  /* A member can hold several rows: flush it once however many parts
   * went to it.
   */
  while (i < f->touched.len && f->touched.v[i].q != q)
    i++;
  if (i == f->touched.len)
    f->touched.v[f->touched.len++] = (struct member_flush) {
      .q = q, .mark = queue_error_mark (q, f->session),
    };
  return f->fn (p, f->arg);
}

static bool
in_one_row (const struct linear *l, uint64_t count, uint64_t offset)
{
  const struct linear_row *r;

  if (offset > l->size || count > l->size - offset)
    return true;                /* for_each_part refuses it */
  r = &l->rows[row_at (l, offset)];
  return count <= r->length - (offset - r->start);
}

/* Writes, zeroes and trims.  A FUA part is a write and a backend flush
 * its caller waits for, so passing FUA to each of N parts would cost N
 * such round trips one after the other.  Instead the parts are queued
 * as ordinary requests and the members they went to are flushed
 * together, as linear_flush does.  That keeps FUA's promise on every
 * member: an ordinary queued part still cuts away the older queued
 * pieces it overlaps (newest wins), so no older write can land on top
 * of it later, and a flush started after it was queued waits until it
 * and everything older on that member are on the backend, then flushes
 * the backend.  The session goes to the flush so a write-back error of
 * a part queued with ack=queued is reported here, as FUA would have.
 * One part keeps FUA: its member's queue group-commits it itself.
 */
static int
submit_parts (struct linear *l, uint64_t count, uint64_t offset, part_fn fn,
              struct io_args *a)
{
  struct fua_args f = { .fn = fn, .arg = a, .session = a->session };
  int err = 0;

  if (!(a->flags & REQ_FUA) || in_one_row (l, count, offset))
    return for_each_part (l, count, offset, fn, a);
  small_vec_init (&f.touched);
  if (small_vec_reserve (&f.touched, l->nr_members) == -1)
    return -1;
  a->flags &= ~REQ_FUA;
  if (for_each_part (l, count, offset, fua_part, &f) == -1)
    err = errno;
  /* Even after a failed part: the parts before it are left as durable
   * as FUA on each part would have left them, and the part's error
   * still wins over a flush's.
   */
  if (f.touched.len > 0
      && flush_members (f.touched.v, f.touched.len, a->session) == -1 && !err)
    err = errno;
  small_vec_free (&f.touched);
  if (err) {
    errno = err;
    return -1;
  }
  return 0;
}

/* A disk served as itself is one row, the whole disk at offset 0: its
 * requests go straight to its queue, which checks their range the same
 * way.  NULL for a volume.
 */
static struct queue *
whole_disk (const struct linear *l)
{
  return l->is_volume ? NULL : l->rows[0].disk;
}

int
linear_pread (struct linear *l, void *buf, uint32_t count, uint64_t offset)
{
  struct io_args a = { .buf = buf };
  struct queue *q = whole_disk (l);

  if (q)
    return queue_pread (q, buf, count, offset);
  return for_each_part (l, count, offset, read_part, &a);
}

int
linear_pwrite (struct linear *l, struct session *s, const void *buf,
               uint32_t count, uint64_t offset, unsigned flags)
{
  struct io_args a = { s, (void *) buf, flags };
  struct queue *q = whole_disk (l);

  if (q)
    return queue_pwrite (q, s, buf, count, offset, flags);
  return submit_parts (l, count, offset, write_part, &a);
}

int
linear_zero (struct linear *l, struct session *s, uint64_t count,
             uint64_t offset, unsigned flags)
{
  struct io_args a = { s, NULL, flags };

  /* A fast zero must fail before it changes anything. */
  if ((flags & REQ_FAST_ZERO) && !linear_can_fast_zero (l)) {
    errno = ENOTSUP;
    return -1;
  }
  return submit_parts (l, count, offset, zero_part, &a);
}

int
linear_trim (struct linear *l, struct session *s, uint64_t count,
             uint64_t offset, unsigned flags)
{
  struct io_args a = { s, NULL, flags };

  return submit_parts (l, count, offset, trim_part, &a);
}

int
linear_cache (struct linear *l, uint64_t count, uint64_t offset)
{
  return for_each_part (l, count, offset, cache_part, NULL);
}

struct extents_args {
  struct extent_list *out;
  struct extent_list member;
  bool short_answer;
};

/* Member extents, moved to volume offsets and clipped to the part. */
static int
extents_part (struct part *p, void *arg)
{
  struct extents_args *a = arg;
  uint64_t volume_pos = p->row->start + (p->disk_offset - p->row->disk_offset);
  uint64_t end = p->disk_offset + p->length;

  if (a->short_answer)
    return 0;                   /* the answer must stay contiguous */
  extent_list_clear (&a->member);
  if (queue_extents (p->row->disk, p->length, p->disk_offset,
                     &a->member) == -1)
    return -1;
  for (size_t i = 0; i < a->member.len; i++) {
    const struct extent *e = &a->member.v[i];
    uint64_t from = MAX (e->offset, p->disk_offset);
    uint64_t to = MIN (e->offset + e->length, end);

    if (from >= to)
      continue;
    if (extent_list_append (a->out, volume_pos + (from - p->disk_offset),
                            to - from, e->type) == -1)
      return -1;
    if (to < end && i + 1 == a->member.len)
      a->short_answer = true;
  }
  return 0;
}

int
linear_extents (struct linear *l, uint64_t count, uint64_t offset,
                struct extent_list *out)
{
  struct extents_args a = { .out = out };
  int r;

  extent_list_init (&a.member);
  r = for_each_part (l, count, offset, extents_part, &a);
  extent_list_free (&a.member);
  return r;
}

int
linear_flush (struct linear *l, struct session *s)
{
  SMALL_VEC (struct member_flush, 8) m;
  int r;

  /* One member: nothing to overlap its flush with, so this thread does
   * the work itself instead of waking the dispatch thread for it.
   */
  if (l->nr_members == 1)
    return queue_flush (l->members[0], s);
  small_vec_init (&m);
  if (small_vec_reserve (&m, l->nr_members) == -1)
    return -1;
  for (size_t i = 0; i < l->nr_members; i++)
    m.v[m.len++] = (struct member_flush) {
      .q = l->members[i], .mark = queue_error_mark (l->members[i], s),
    };
  r = flush_members (m.v, m.len, s);
  small_vec_free (&m);
  return r;
}

int
linear_can_fast_zero (const struct linear *l)
{
  return l->can_fast_zero;
}
