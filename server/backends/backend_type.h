/* plugq: a kind of backend as the configuration names it.
 *
 * Each backend file ends with one of these; backend_registry.c lists them
 * all in one table, which the plugin walks for its key dispatch, its
 * checks, --help, --dump-plugin and its description.  A new backend is
 * therefore its own file (ops, open, and this type at its end) plus one
 * entry in BACKEND_TYPES below.
 *
 * In the configuration a disk's backend is chosen by its starting key
 * (file=PATH) and tuned by further keys (direct=BOOL), all after the
 * disk= they belong to and in any order among themselves.  A further key
 * may come before its type's starting key, or belong to another type than
 * the one the disk ends up with (which the plugin refuses once the
 * command line is complete), so a disk may hold args of several types
 * while its keys are read: args are made empty, then filled by the
 * starting key and the further keys as they come.
 *
 * start and set return 0, or -1 after one log_error line that starts
 * with key=value; open returns NULL after the backend has logged why.
 */
#ifndef PLUGQ_BACKEND_TYPE_H
#define PLUGQ_BACKEND_TYPE_H

#include <stdbool.h>

#include "backend.h"

struct backend_type {
  const char *name;             /* its starting key: "file" */
  const char *article;          /* "a" or "an", before "file=" in messages */
  const char *value_name;       /* its starting key's value: "PATH" */
  const char *const *keys;      /* further keys, NULL-terminated */
  /* What it serves, for the plugin's description: "files and block
   * devices".
   */
  const char *summary;
  /* Its --help lines, starting key first, each ending in a newline. */
  const char *help;

  /* Empty args for one disk; NULL if out of memory. */
  void *(*new_args) (void);
  /* The starting key's value, for disk (its name, for messages). */
  int (*start) (void *args, const char *disk, const char *value);
  /* One further key (one of keys) and its value; NULL when keys is
   * empty.
   */
  int (*set) (void *args, const char *disk, const char *key,
              const char *value);
  /* The backend described by args, once start succeeded. */
  struct backend *(*open) (const void *args, bool readonly);
  void (*free_args) (void *args);
};

/* The table: every backend type, in the order --help lists them.  A new
 * backend joins with one X (name) here, naming the backend_type_NAME its
 * file defines; the declarations and backend_registry.c's table both
 * come from this one line.
 */
#define BACKEND_TYPES(X) X (file) X (memory) X (nbd) BACKEND_TYPES_RBD (X)

/* rbd= exists where configure found librbd (HAVE_LIBRBD, config.h). */
#ifdef HAVE_LIBRBD
#define BACKEND_TYPES_RBD(X) X (rbd)
#else
#define BACKEND_TYPES_RBD(X)
#endif

#define BACKEND_TYPE_DECLARE(name) \
  extern const struct backend_type backend_type_##name;
BACKEND_TYPES (BACKEND_TYPE_DECLARE)

/* The table in order: the i-th type, NULL past the last. */
const struct backend_type *backend_type_at (size_t i);

/* The type whose starting key is key, or NULL. */
const struct backend_type *backend_type_by_name (const char *key);

/* The type that takes key as a further key, or NULL. */
const struct backend_type *backend_type_by_key (const char *key);

/* Every type's name joined with sep ("file,memory,nbd").  Heap string,
 * NULL if out of memory.
 */
char *backend_type_names (const char *sep);

#endif /* PLUGQ_BACKEND_TYPE_H */
