/* plugq tests: checks on a backend read straight through its ops. */
#ifndef PLUGQ_TEST_BACKEND_CHECKS_H
#define PLUGQ_TEST_BACKEND_CHECKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"
#include "common/extents.h"

int write_buf (struct backend *, const void *buf, size_t len,
               uint64_t offset);
/* len bytes of c at offset, from an O_DIRECT-aligned buffer. */
int fill (struct backend *, int c, size_t len, uint64_t offset);
/* The range reads back as all c; prints the first difference. */
bool reads_as (struct backend *, int c, size_t len, uint64_t offset);
/* The backend's extents of the range are exactly want[0..n). */
bool extents_are (struct backend *, uint64_t count, uint64_t offset,
                  const struct extent *want, size_t n);

/* Five vector elements of lens[] bytes written at base with one pwritev
 * read back right, in the first 4 MiB and in a read that starts and
 * ends inside the written range.
 */
bool pwritev_reads_back (struct backend *, const size_t lens[5],
                         uint64_t base);

#endif
