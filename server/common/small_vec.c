/* plugq: small vectors (small_vec.h). */
#include <config.h>

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "small_vec.h"

int
small_vec_grow (void **v, size_t *cap, void *inline_v, size_t len,
                size_t want, size_t elem_size)
{
  size_t new_cap = *cap;
  void *p;

  if (want <= *cap)
    return 0;
  while (new_cap < want)
    new_cap = new_cap ? new_cap * 2 : 8;
  if (new_cap > SIZE_MAX / elem_size) {
    errno = ENOMEM;
    return -1;
  }
  if (*v == inline_v) {
    if ((p = malloc (new_cap * elem_size)) == NULL)
      return -1;
    memcpy (p, inline_v, len * elem_size);
  }
  else if ((p = realloc (*v, new_cap * elem_size)) == NULL)
    return -1;
  *v = p;
  *cap = new_cap;
  return 0;
}
