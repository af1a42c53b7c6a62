/* plugq: allocation maps (NBD base:allocation) as the engine sees them. */

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "extents.h"
#include "minmax.h"

void
extent_list_init (struct extent_list *l)
{
  l->v = NULL;
  l->len = l->cap = 0;
}

void
extent_list_free (struct extent_list *l)
{
  free (l->v);
  extent_list_init (l);
}

void
extent_list_clear (struct extent_list *l)
{
  l->len = 0;
}

static uint64_t
extent_end (const struct extent *e)
{
  return e->offset + e->length;
}

static int
reserve (struct extent_list *l, size_t n)
{
  size_t cap;
  struct extent *v;

  if (n <= l->cap)
    return 0;
  cap = l->cap ? l->cap : 16;
  while (cap < n) {
    if (cap > SIZE_MAX / 2 / sizeof *v) {
      errno = ENOMEM;
      return -1;
    }
    cap *= 2;
  }
  v = realloc (l->v, cap * sizeof *v);
  if (v == NULL)
    return -1;
  l->v = v;
  l->cap = cap;
  return 0;
}

int
extent_list_append (struct extent_list *l, uint64_t offset,
                    uint64_t length, uint32_t type)
{
  struct extent *last;

  if (length == 0)
    return 0;
  if (length > UINT64_MAX - offset) {
    errno = EINVAL;
    return -1;
  }

  if (l->len > 0) {
    last = &l->v[l->len - 1];
    /* A gap or an overlap would make the list lie about the range it
     * covers, which copy tools trust to skip data.
     */
    if (offset != extent_end (last)) {
      errno = EINVAL;
      return -1;
    }
    if (last->type == type) {
      last->length += length;
      return 0;
    }
  }

  if (reserve (l, l->len + 1) == -1)
    return -1;
  l->v[l->len++] = (struct extent) {
    .offset = offset, .length = length, .type = type
  };
  return 0;
}

/* Index of the extent containing pos; pos must lie inside the list. */
static size_t
find_extent (const struct extent_list *l, uint64_t pos)
{
  size_t lo = 0, hi = l->len;

  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;

    if (l->v[mid].offset <= pos)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

/* Swaps extents [lo, hi] for the n extents in rep. */
static int
replace_range (struct extent_list *l, size_t lo, size_t hi,
               const struct extent *rep, size_t n)
{
  size_t removed = hi - lo + 1;
  size_t tail = l->len - hi - 1;

  if (n > removed && reserve (l, l->len + n - removed) == -1)
    return -1;
  memmove (&l->v[lo + n], &l->v[hi + 1], tail * sizeof l->v[0]);
  memcpy (&l->v[lo], rep, n * sizeof rep[0]);
  l->len = l->len - removed + n;
  return 0;
}

int
extent_list_overlay (struct extent_list *l, uint64_t offset,
                     uint64_t length, uint32_t type)
{
  uint64_t list_start, list_end, start, end, new_start, new_end, jend;
  struct extent rep[3];
  size_t i, j, lo, hi, n = 0;
  bool has_right = false;
  struct extent right = { 0 };

  if (l->len == 0 || length == 0)
    return 0;

  list_start = l->v[0].offset;
  list_end = extent_end (&l->v[l->len - 1]);
  start = MAX (offset, list_start);
  end = length > UINT64_MAX - offset ? UINT64_MAX : offset + length;
  if (end > list_end)
    end = list_end;
  if (start >= end)
    return 0;

  i = find_extent (l, start);
  j = find_extent (l, end - 1);
  lo = i;
  hi = j;
  new_start = start;
  new_end = end;

  /* What survives of the first extent stays in front, unless it has the
   * new type and so simply becomes part of the new extent.  Neighbours
   * of the same type are absorbed too, keeping the list coalesced as
   * append would have left it.
   */
  if (l->v[i].offset < start) {
    if (l->v[i].type == type)
      new_start = l->v[i].offset;
    else
      rep[n++] = (struct extent) {
        .offset = l->v[i].offset, .length = start - l->v[i].offset,
        .type = l->v[i].type
      };
  }
  else if (i > 0 && l->v[i - 1].type == type) {
    lo = i - 1;
    new_start = l->v[i - 1].offset;
  }

  jend = extent_end (&l->v[j]);
  if (jend > end) {
    if (l->v[j].type == type)
      new_end = jend;
    else {
      has_right = true;
      right = (struct extent) {
        .offset = end, .length = jend - end, .type = l->v[j].type
      };
    }
  }
  else if (j + 1 < l->len && l->v[j + 1].type == type) {
    hi = j + 1;
    new_end = extent_end (&l->v[j + 1]);
  }

  rep[n++] = (struct extent) {
    .offset = new_start, .length = new_end - new_start, .type = type
  };
  if (has_right)
    rep[n++] = right;

  return replace_range (l, lo, hi, rep, n);
}

void
extent_list_truncate (struct extent_list *l, uint64_t end)
{
  size_t i;

  if (l->len == 0 || end >= extent_end (&l->v[l->len - 1]))
    return;
  if (end <= l->v[0].offset) {
    l->len = 0;
    return;
  }
  i = find_extent (l, end - 1);
  l->v[i].length = end - l->v[i].offset;
  l->len = i + 1;
}
