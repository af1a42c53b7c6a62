/* plugq: a registry's names: looking one up, and all of them as one
 * string for help and messages.  A registry gives name_at (i), its i-th
 * entry's name, NULL past the last.
 */
#ifndef PLUGQ_NAME_LIST_H
#define PLUGQ_NAME_LIST_H

#include <stddef.h>

/* name_at (0), name_at (1), ... up to the first NULL, joined with sep:
 * "file,memory,nbd".  Heap string; NULL with errno set if out of memory.
 */
char *name_list_join (const char *(*name_at) (size_t i), const char *sep);

/* The index of the entry called name, or -1. */
ptrdiff_t name_list_find (const char *(*name_at) (size_t i), const char *name);

#endif /* PLUGQ_NAME_LIST_H */
