/* plugq: unit tests for extent lists. */

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/extents.h"
#include "common/minmax.h"
#include "tap.h"

#define HZ (EXTENT_HOLE | EXTENT_ZERO)

static void
dump (const struct extent_list *l)
{
  size_t i;

  for (i = 0; i < l->len; i++)
    printf ("#   [%zu] %" PRIu64 "+%" PRIu64 " type %" PRIu32 "\n",
            i, l->v[i].offset, l->v[i].length, l->v[i].type);
}

/* Contiguous, ascending, no empty extents, neighbours differ in type. */
static bool
well_formed (const struct extent_list *l)
{
  size_t i;

  for (i = 0; i < l->len; i++) {
    if (!CHECK (l->v[i].length > 0))
      return false;
    if (i > 0) {
      if (!CHECK (l->v[i].offset == l->v[i - 1].offset + l->v[i - 1].length))
        return false;
      if (!CHECK (l->v[i].type != l->v[i - 1].type))
        return false;
    }
  }
  return true;
}

static bool
same (const struct extent_list *l, const struct extent *want, size_t n)
{
  size_t i;

  if (!well_formed (l) || !CHECK (l->len == n)) {
    dump (l);
    return false;
  }
  for (i = 0; i < n; i++) {
    if (l->v[i].offset != want[i].offset || l->v[i].length != want[i].length
        || l->v[i].type != want[i].type) {
      printf ("# extent %zu differs\n", i);
      dump (l);
      return false;
    }
  }
  return true;
}

static void
test_append (void)
{
  struct extent_list l;
  bool ok = true;
  const struct extent want[] = {
    { 0, 300, 0 }, { 300, 50, HZ }, { 350, 10, 0 },
  };

  extent_list_init (&l);
  ok &= CHECK (extent_list_append (&l, 0, 100, 0) == 0);
  ok &= CHECK (extent_list_append (&l, 100, 200, 0) == 0);
  ok &= CHECK (extent_list_append (&l, 300, 0, HZ) == 0);
  ok &= CHECK (extent_list_append (&l, 300, 50, HZ) == 0);
  ok &= CHECK (extent_list_append (&l, 350, 10, 0) == 0);
  errno = 0;
  ok &= CHECK (extent_list_append (&l, 400, 10, 0) == -1 && errno == EINVAL);
  errno = 0;
  ok &= CHECK (extent_list_append (&l, 355, 10, 0) == -1 && errno == EINVAL);
  ok &= same (&l, want, 3);
  extent_list_free (&l);
  ok &= CHECK (l.v == NULL && l.len == 0 && l.cap == 0);
  tap_ok (ok, "append coalesces same types and rejects gaps and overlaps");
}

static void
test_append_many (void)
{
  struct extent_list l;
  bool ok = true;
  uint64_t i;

  extent_list_init (&l);
  for (i = 0; i < 10000; i++)
    ok &= CHECK (extent_list_append (&l, i * 4096, 4096, i & 1 ? HZ : 0) == 0);
  ok &= CHECK (l.len == 10000 && well_formed (&l));
  extent_list_clear (&l);
  ok &= CHECK (l.len == 0);
  ok &= CHECK (extent_list_append (&l, 1u << 20, 512, HZ) == 0);
  ok &= CHECK (l.len == 1 && l.v[0].offset == 1u << 20);
  extent_list_free (&l);
  tap_ok (ok, "append grows the vector; clear empties it for a new start");
}

static void
test_overlay_split (void)
{
  struct extent_list l;
  bool ok = true;
  const struct extent want[] = {
    { 0, 100, HZ }, { 100, 50, 0 }, { 150, 850, HZ },
  };

  extent_list_init (&l);
  extent_list_append (&l, 0, 1000, HZ);
  ok &= CHECK (extent_list_overlay (&l, 100, 50, 0) == 0);
  ok &= same (&l, want, 3);
  extent_list_free (&l);
  tap_ok (ok, "overlay inside one extent splits it in three");
}

static void
test_overlay_same_type (void)
{
  struct extent_list l;
  bool ok = true;
  const struct extent want[] = { { 0, 1000, HZ } };

  extent_list_init (&l);
  extent_list_append (&l, 0, 1000, HZ);
  ok &= CHECK (extent_list_overlay (&l, 100, 50, HZ) == 0);
  ok &= same (&l, want, 1);
  extent_list_free (&l);
  tap_ok (ok, "overlay with the same type changes nothing");
}

static void
test_overlay_span (void)
{
  struct extent_list l;
  bool ok = true;
  const struct extent want[] = {
    { 0, 50, 0 }, { 50, 200, EXTENT_ZERO }, { 250, 50, 0 }, { 300, 100, HZ },
  };

  extent_list_init (&l);
  extent_list_append (&l, 0, 100, 0);
  extent_list_append (&l, 100, 100, HZ);
  extent_list_append (&l, 200, 100, 0);
  extent_list_append (&l, 300, 100, HZ);
  ok &= CHECK (extent_list_overlay (&l, 50, 200, EXTENT_ZERO) == 0);
  ok &= same (&l, want, 4);
  extent_list_free (&l);
  tap_ok (ok, "overlay across several extents keeps both cut ends");
}

static void
test_overlay_coalesce (void)
{
  struct extent_list l;
  bool ok = true;
  const struct extent want1[] = { { 0, 300, 0 }, { 300, 100, HZ } };
  const struct extent want2[] = { { 0, 400, 0 } };

  extent_list_init (&l);
  extent_list_append (&l, 0, 100, 0);
  extent_list_append (&l, 100, 100, HZ);
  extent_list_append (&l, 200, 100, 0);
  extent_list_append (&l, 300, 100, HZ);
  /* Exactly one extent, turned into its neighbours' type. */
  ok &= CHECK (extent_list_overlay (&l, 100, 100, 0) == 0);
  ok &= same (&l, want1, 2);
  /* Ends exactly on the list's end. */
  ok &= CHECK (extent_list_overlay (&l, 300, 100, 0) == 0);
  ok &= same (&l, want2, 1);
  extent_list_free (&l);
  tap_ok (ok, "overlay joins neighbours of the new type");
}

static void
test_overlay_edges (void)
{
  struct extent_list l;
  bool ok = true;
  const struct extent want1[] = {
    { 1000, 100, 0 }, { 1100, 900, HZ },
  };
  const struct extent want2[] = {
    { 1000, 100, 0 }, { 1100, 800, HZ }, { 1900, 100, 0 },
  };

  extent_list_init (&l);
  /* Overlay on an empty list is ignored. */
  ok &= CHECK (extent_list_overlay (&l, 0, 100, 0) == 0 && l.len == 0);
  extent_list_append (&l, 1000, 1000, HZ);
  /* Starts before the list: clipped. */
  ok &= CHECK (extent_list_overlay (&l, 0, 1100, 0) == 0);
  ok &= same (&l, want1, 2);
  /* Runs past the list and past UINT64_MAX: clipped. */
  ok &= CHECK (extent_list_overlay (&l, 1900, UINT64_MAX, 0) == 0);
  ok &= same (&l, want2, 3);
  /* Wholly outside, and zero length: ignored. */
  ok &= CHECK (extent_list_overlay (&l, 0, 1000, HZ) == 0);
  ok &= CHECK (extent_list_overlay (&l, 2000, 1000, HZ) == 0);
  ok &= CHECK (extent_list_overlay (&l, 1500, 0, 0) == 0);
  ok &= same (&l, want2, 3);
  extent_list_free (&l);
  tap_ok (ok, "overlay clips to the list and ignores ranges outside it");
}

static void
test_truncate (void)
{
  struct extent_list l;
  bool ok = true;
  const struct extent want1[] = { { 100, 100, 0 }, { 200, 50, HZ } };
  const struct extent want2[] = { { 100, 100, 0 } };

  extent_list_init (&l);
  extent_list_append (&l, 100, 100, 0);
  extent_list_append (&l, 200, 100, HZ);
  extent_list_append (&l, 300, 100, 0);
  extent_list_truncate (&l, 1000);
  ok &= CHECK (l.len == 3);
  extent_list_truncate (&l, 250);
  ok &= same (&l, want1, 2);
  extent_list_truncate (&l, 200);
  ok &= same (&l, want2, 1);
  extent_list_truncate (&l, 100);
  ok &= CHECK (l.len == 0);
  extent_list_truncate (&l, 50);
  ok &= CHECK (l.len == 0);
  extent_list_free (&l);
  tap_ok (ok, "truncate shortens the extent across the end and drops the rest");
}

/* Random overlays and truncates against a flat array of types. */
#define UNITS 256

static bool
matches_model (const struct extent_list *l, const uint32_t *model,
               uint64_t base, uint64_t end)
{
  size_t i;
  uint64_t u;

  if (!well_formed (l))
    return false;
  if (end == base)
    return CHECK (l->len == 0);
  if (!CHECK (l->len > 0 && l->v[0].offset == base
              && l->v[l->len - 1].offset + l->v[l->len - 1].length == end))
    return false;
  for (i = 0; i < l->len; i++)
    for (u = l->v[i].offset; u < l->v[i].offset + l->v[i].length; u++)
      if (model[u] != l->v[i].type) {
        printf ("# unit %" PRIu64 " model %" PRIu32 " list %" PRIu32 "\n",
                u, model[u], l->v[i].type);
        return false;
      }
  return true;
}

static void
test_random (void)
{
  uint32_t model[UNITS];
  struct extent_list l;
  bool ok = true;
  unsigned seed = 12345;
  int round, op;

  srand (seed);
  extent_list_init (&l);
  for (round = 0; round < 200 && ok; round++) {
    uint64_t base = (uint64_t) (rand () % 16), end = UNITS, u;

    extent_list_clear (&l);
    for (u = base; u < end; u++) {
      model[u] = (uint32_t) (rand () % 3);
      ok &= CHECK (extent_list_append (&l, u, 1, model[u]) == 0);
    }
    for (op = 0; op < 100 && ok; op++) {
      uint64_t off = (uint64_t) (rand () % (UNITS + 8));
      uint64_t len = (uint64_t) (rand () % 64);
      uint32_t type = (uint32_t) (rand () % 3);

      if (rand () % 20 == 0) {
        uint64_t cut = (uint64_t) (rand () % (UNITS + 1));

        extent_list_truncate (&l, cut);
        if (cut < end)
          end = MAX (cut, base);
      }
      else {
        ok &= CHECK (extent_list_overlay (&l, off, len, type) == 0);
        for (u = off; u < off + len && u < end; u++)
          if (u >= base)
            model[u] = type;
      }
      ok &= matches_model (&l, model, base, end);
      if (end == base)
        break;
    }
  }
  extent_list_free (&l);
  tap_ok (ok, "random overlays and truncates match a flat model");
}

int
main (void)
{
  tap_plan (10);
  test_append ();
  test_append_many ();
  test_overlay_split ();
  test_overlay_same_type ();
  test_overlay_span ();
  test_overlay_coalesce ();
  test_overlay_edges ();
  test_truncate ();
  test_random ();
  {
    struct extent_list l;
    bool ok;

    extent_list_init (&l);
    ok = CHECK (extent_list_append (&l, UINT64_MAX - 10, 20, 0) == -1
                && errno == EINVAL);
    ok &= CHECK (extent_list_append (&l, UINT64_MAX - 10, 10, 0) == 0);
    extent_list_free (&l);
    tap_ok (ok, "append rejects a range past the 64 bit offset space");
  }
  return tap_done ();
}
