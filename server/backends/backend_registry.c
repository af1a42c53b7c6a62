/* plugq: the table of backend types (backend_type.h).
 *
 * The one list of backends: the plugin's key dispatch, its messages,
 * --help, --dump-plugin and its description all walk it.
 */
#include <config.h>

#include <string.h>

#include "backend_type.h"
#include "common/name_list.h"

#define BACKEND_TYPE_ENTRY(name) &backend_type_##name,

static const struct backend_type *const types[] = {
  BACKEND_TYPES (BACKEND_TYPE_ENTRY)
};

NAME_LIST_REGISTRY (struct backend_type, types, backend_type_at,
                    backend_type_by_name, backend_type_names)

const struct backend_type *
backend_type_by_key (const char *key)
{
  const struct backend_type *t;

  for (size_t i = 0; (t = backend_type_at (i)) != NULL; i++)
    for (const char *const *k = t->keys; *k; k++)
      if (strcmp (*k, key) == 0)
        return t;
  return NULL;
}
