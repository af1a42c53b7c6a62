/* plugq: a registry's names (name_list.h). */
#include <config.h>

#include <stdlib.h>
#include <string.h>

#include "name_list.h"

char *
name_list_join (const char *(*name_at) (size_t i), const char *sep)
{
  size_t len = 1, i;
  const char *name;
  char *s;

  for (i = 0; (name = name_at (i)) != NULL; i++)
    len += strlen (name) + strlen (sep);
  s = malloc (len);
  if (s == NULL)
    return NULL;
  *s = '\0';
  for (i = 0; (name = name_at (i)) != NULL; i++) {
    if (i > 0)
      strcat (s, sep);
    strcat (s, name);
  }
  return s;
}

ptrdiff_t
name_list_find (const char *(*name_at) (size_t i), const char *name)
{
  const char *n;

  for (size_t i = 0; (n = name_at (i)) != NULL; i++)
    if (strcmp (n, name) == 0)
      return (ptrdiff_t) i;
  return -1;
}
