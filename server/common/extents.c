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

/* The replacement of extents [*lo, *hi] for a new extent of type over
 * [start, end): what survives of the first and last extents around it,
 * and same-type neighbours absorbed into it, keeping the list coalesced
 * as append would have left it.  Widens *lo and *hi to what it replaces;
 * returns the number of extents in rep (at most 3).
 */
static size_t
overlay_replacement (const struct extent_list *l, uint64_t start,
                     uint64_t end, uint32_t type, size_t *lo, size_t *hi,
                     struct extent rep[3])
{
  const struct extent *first = &l->v[*lo], *last = &l->v[*hi];
  uint64_t new_start = start, new_end = end, last_end = extent_end (last);
  size_t n = 0;

  if (first->offset < start) {
    if (first->type == type)
      new_start = first->offset;
    else
      rep[n++] = (struct extent) {
        .offset = first->offset, .length = start - first->offset,
        .type = first->type
      };
  }
  else if (*lo > 0 && l->v[*lo - 1].type == type)
    new_start = l->v[--*lo].offset;

  if (last_end <= end && *hi + 1 < l->len && l->v[*hi + 1].type == type)
    new_end = extent_end (&l->v[++*hi]);
  else if (last_end > end && last->type == type)
    new_end = last_end;

  rep[n++] = (struct extent) {
    .offset = new_start, .length = new_end - new_start, .type = type
  };
  if (last_end > end && last->type != type)
    rep[n++] = (struct extent) {
      .offset = end, .length = last_end - end, .type = last->type
    };
  return n;
}

int
extent_list_overlay (struct extent_list *l, uint64_t offset,
                     uint64_t length, uint32_t type)
{
  uint64_t start, end;
  struct extent rep[3];
  size_t lo, hi, n;

  if (l->len == 0 || length == 0)
    return 0;
  start = MAX (offset, l->v[0].offset);
  end = length > UINT64_MAX - offset ? UINT64_MAX : offset + length;
  end = MIN (end, extent_end (&l->v[l->len - 1]));
  if (start >= end)
    return 0;
  lo = find_extent (l, start);
  hi = find_extent (l, end - 1);
  n = overlay_replacement (l, start, end, type, &lo, &hi, rep);
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
