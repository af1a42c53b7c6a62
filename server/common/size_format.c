/* plugq: byte counts as people read them. */
#include <config.h>

#include <inttypes.h>
#include <stdio.h>

#include "size_format.h"

void
format_size (char *buf, size_t n, uint64_t bytes)
{
  static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB",
                                       "EiB" };
  double v = bytes;
  int u = -1;

  while (v >= 1024 && u < 5) {
    v /= 1024;
    u++;
  }
  if (u < 0)
    snprintf (buf, n, "%" PRIu64 " B", bytes);
  else
    snprintf (buf, n, "%.1f %s", v, units[u]);
}
