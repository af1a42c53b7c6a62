/* plugq: the table of elevators users can name with elevator=.
 *
 * The one list of elevators: lookups, --help, --dump-plugin and the
 * message for an unknown name all walk it.
 */
#include <config.h>

#include <string.h>

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

const struct elevator_ops *
elevator_lookup (const char *name)
{
  for (size_t i = 0; i < NR_ELEVATORS; i++)
    if (strcmp (elevators[i]->name, name) == 0)
      return elevators[i];
  return NULL;
}

static const char *
name_at (size_t i)
{
  return i < NR_ELEVATORS ? elevators[i]->name : NULL;
}

char *
elevator_names (const char *sep)
{
  return name_list_join (name_at, sep);
}
