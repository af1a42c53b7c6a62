/* plugq: the table of elevators users can name with elevator=.
 *
 * The one list of elevators: lookups, --help, --dump-plugin and the
 * message for an unknown name all walk it.
 */
#include <config.h>

#include "elevator.h"
#include "common/name_list.h"

#define ELEVATOR_ENTRY(name) &elevator_##name,

static const struct elevator_ops *const elevators[] = {
  ELEVATORS (ELEVATOR_ENTRY)
};

NAME_LIST_REGISTRY (struct elevator_ops, elevators, elevator_at,
                    elevator_lookup, elevator_names)
