/* plugq: byte counts as people read them in descriptions and messages. */
#ifndef PLUGQ_SIZE_FORMAT_H
#define PLUGQ_SIZE_FORMAT_H

#include <stddef.h>
#include <stdint.h>

/* "512 B", "1.0 GiB", "3.5 TiB": binary units, one decimal. */
void format_size (char *buf, size_t n, uint64_t bytes);

#endif /* PLUGQ_SIZE_FORMAT_H */
