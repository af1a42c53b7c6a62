/* plugq: the table of elevators users can name with elevator=.
 *
 * The one list of elevators: lookups, --help, --dump-plugin and the
 * message for an unknown name all walk it.
 */
#include <config.h>

#include "elevator.h"
#include "name_list.h"

#define ELEVATOR_ENTRY(name) &elevator_##name,

static const struct elevator_ops *const elevators[] = {
  ELEVATORS (ELEVATOR_ENTRY)
};

#define NR_ELEVATORS (sizeof elevators / sizeof elevators[0])

const struct elevator_ops *
elevator_at (size_t i)
{
  return i < NR_ELEVATORS ? elevators[i] : NULL;
}

static const char *
name_at (size_t i)
{
  return i < NR_ELEVATORS ? elevators[i]->name : NULL;
}

const struct elevator_ops *
elevator_lookup (const char *name)
{
  ptrdiff_t i = name_list_find (name_at, name);

  return i >= 0 ? elevators[i] : NULL;
}

char *
elevator_names (const char *sep)
{
  return name_list_join (name_at, sep);
}
