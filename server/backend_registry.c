/* plugq: the table of backend types (backend_type.h).
 *
 * The one list of backends: the plugin's key dispatch, its messages,
 * --help, --dump-plugin and its description all walk it.
 */
#include <config.h>

#include <string.h>

#include "backend_type.h"
#include "name_list.h"

#define BACKEND_TYPE_ENTRY(name) &backend_type_##name,

static const struct backend_type *const types[] = {
  BACKEND_TYPES (BACKEND_TYPE_ENTRY)
};

#define NR_TYPES (sizeof types / sizeof types[0])

const struct backend_type *
backend_type_at (size_t i)
{
  return i < NR_TYPES ? types[i] : NULL;
}

static const char *
name_at (size_t i)
{
  return i < NR_TYPES ? types[i]->name : NULL;
}

const struct backend_type *
backend_type_by_name (const char *key)
{
  ptrdiff_t i = name_list_find (name_at, key);

  return i >= 0 ? types[i] : NULL;
}

const struct backend_type *
backend_type_by_key (const char *key)
{
  for (size_t i = 0; i < NR_TYPES; i++)
    for (const char *const *k = types[i]->keys; *k; k++)
      if (strcmp (*k, key) == 0)
        return types[i];
  return NULL;
}

char *
backend_type_names (const char *sep)
{
  return name_list_join (name_at, sep);
}
