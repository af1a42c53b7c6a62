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

/* The functions a registry offers over its table, an array of pointers
 * to structs with a name field:
 *   const TYPE *AT (size_t i)           the i-th entry, NULL past the last
 *   const TYPE *LOOKUP (const char *)   the entry called name, or NULL
 *   char *NAMES (const char *sep)       every name joined with sep
 */
#define NAME_LIST_REGISTRY(TYPE, TABLE, AT, LOOKUP, NAMES)              \
  const TYPE *                                                          \
  AT (size_t i)                                                         \
  {                                                                     \
    return i < sizeof TABLE / sizeof TABLE[0] ? TABLE[i] : NULL;        \
  }                                                                     \
                                                                        \
  static const char *                                                   \
  AT##_name (size_t i)                                                  \
  {                                                                     \
    const TYPE *e = AT (i);                                             \
                                                                        \
    return e ? e->name : NULL;                                          \
  }                                                                     \
                                                                        \
  const TYPE *                                                          \
  LOOKUP (const char *name)                                             \
  {                                                                     \
    ptrdiff_t i = name_list_find (AT##_name, name);                     \
                                                                        \
    return i >= 0 ? TABLE[i] : NULL;                                    \
  }                                                                     \
                                                                        \
  char *                                                                \
  NAMES (const char *sep)                                               \
  {                                                                     \
    return name_list_join (AT##_name, sep);                             \
  }

#endif /* PLUGQ_NAME_LIST_H */
