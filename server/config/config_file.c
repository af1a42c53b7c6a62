/* plugq: the command line and its config= file (config_file.h). */

#include <config.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "config_file.h"

/* s without the blanks at either end (s is changed in place). */
static char *
trim (char *s)
{
  char *end;

  while (isspace ((unsigned char) *s))
    s++;
  end = s + strlen (s);
  while (end > s && isspace ((unsigned char) end[-1]))
    *--end = '\0';
  return s;
}

/* One line's key=value, line being len bytes: 0, or -1 after log_error
 * (the context names the line).
 */
static int
read_line (struct config_reader *r, char *line, size_t len)
{
  char *text, *eq, *key;

  if (strlen (line) != len) {
    log_error ("the line holds a NUL byte: not a configuration file?");
    return -1;
  }
  text = trim (line);
  if (*text == '\0' || *text == '#')
    return 0;
  eq = strchr (text, '=');
  if (eq == NULL) {
    log_error ("expected KEY=VALUE, not '%s'", text);
    return -1;
  }
  *eq = '\0';
  key = trim (text);
  if (*key == '\0') {
    log_error ("expected KEY=VALUE: no key before '='");
    return -1;
  }
  return config_reader_key (r, key, trim (eq + 1));
}

int
config_read_file (struct config_reader *r, const char *path)
{
  const char *outer = log_get_context ();
  char *line = NULL, *where = NULL;
  size_t room = 0;
  unsigned lineno = 0;
  ssize_t len;
  int ret = 0;
  FILE *fp = fopen (path, "re");

  if (fp == NULL) {
    log_error ("config=%s: %m", path);
    return -1;
  }
  while (ret == 0 && (len = getline (&line, &room, fp)) != -1) {
    lineno++;
    free (where);
    if (asprintf (&where, "%s:%u", path, lineno) == -1) {
      where = NULL;
      log_error ("config=%s: %m", path);
      ret = -1;
      break;
    }
    log_set_context (where);
    r->origin = where;
    if (len > 0 && line[len - 1] == '\n')
      line[--len] = '\0';
    ret = read_line (r, line, (size_t) len);
    log_set_context (outer);
    r->origin = NULL;
  }
  if (ret == 0 && ferror (fp)) {
    log_error ("config=%s: read: %m", path);
    ret = -1;
  }
  free (where);
  free (line);
  fclose (fp);
  return ret;
}

int
config_read_sources (struct config *c, const struct key_value *args,
                     size_t nr_args)
{
  struct config_reader r;

  config_reader_init (&r, c, CONFIG_SOURCE_COMMAND_LINE);
  for (size_t i = 0; i < nr_args; i++)
    if (config_reader_key (&r, args[i].key, args[i].value) == -1)
      return -1;
  if (c->config_path == NULL)
    return 0;
  r.source = CONFIG_SOURCE_FILE;
  return config_read_file (&r, c->config_path);
}
