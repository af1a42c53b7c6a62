/* plugq: the table of elevators users can name with elevator=. */
#include <config.h>

#include <string.h>

#include "elevator.h"

static const struct elevator_ops *const elevators[] = {
  &elevator_deadline,
  &elevator_noop,
};

const struct elevator_ops *
elevator_lookup (const char *name)
{
  for (size_t i = 0; i < sizeof elevators / sizeof elevators[0]; i++)
    if (strcmp (elevators[i]->name, name) == 0)
      return elevators[i];
  return NULL;
}
