/* plugq: a registry's names as one string, for help and messages. */
#ifndef PLUGQ_NAME_LIST_H
#define PLUGQ_NAME_LIST_H

#include <stddef.h>

/* name_at (0), name_at (1), ... up to the first NULL, joined with sep:
 * "file,memory,nbd".  Heap string; NULL with errno set if out of memory.
 */
char *name_list_join (const char *(*name_at) (size_t i), const char *sep);

#endif /* PLUGQ_NAME_LIST_H */
