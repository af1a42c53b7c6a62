/* plugq: small vectors that live on the stack until they outgrow it.
 *
 * Most requests touch one or two pieces, rows or members, so a vector
 * starts in its inline array and only an unusually large one allocates.
 *
 *   SMALL_VEC (uint64_t, 8) tickets;
 *   small_vec_init (&tickets);
 *   if (small_vec_reserve (&tickets, n) == -1) ...ENOMEM...
 *   tickets.v[tickets.len++] = x;
 *   small_vec_free (&tickets);
 */
#ifndef PLUGQ_SMALL_VEC_H
#define PLUGQ_SMALL_VEC_H

#include <stddef.h>
#include <stdlib.h>

#define SMALL_VEC(type, n)                                              \
  struct { type *v; size_t len, cap; type inline_v[n]; }

#define small_vec_init(sv)                                              \
  ((sv)->v = (sv)->inline_v, (sv)->len = 0,                             \
   (sv)->cap = sizeof (sv)->inline_v / sizeof (sv)->inline_v[0])

/* Room for at least `want` elements in all: 0, or -1 with errno ENOMEM
 * and the vector unchanged.
 */
#define small_vec_reserve(sv, want)                                     \
  small_vec_grow ((void **) &(sv)->v, &(sv)->cap, (sv)->inline_v,       \
                  (sv)->len, (want), sizeof *(sv)->v)

/* Room for one more element. */
#define small_vec_room_for_one(sv) small_vec_reserve ((sv), (sv)->len + 1)

#define small_vec_free(sv)                                              \
  do {                                                                  \
    if ((sv)->v != (sv)->inline_v)                                      \
      free ((sv)->v);                                                   \
    small_vec_init (sv);                                                \
  } while (0)

int small_vec_grow (void **v, size_t *cap, void *inline_v, size_t len,
                    size_t want, size_t elem_size);

#endif /* PLUGQ_SMALL_VEC_H */
