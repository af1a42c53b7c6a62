/* plugq: the control commands (control_commands.h). */

#include <config.h>

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "config/config_live.h"
#include "control_commands.h"

/* The words of a command line, decoded. */
struct words {
  char **v;
  size_t n;
};

static void
words_free (struct words *w)
{
  free (w->v);
}

static int
hex_digit (char c)
{
  if (c >= '0' && c <= '9')
    return c - '0';
  c = (char) tolower ((unsigned char) c);
  return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Decodes %XX in word, in place.  false, with the reason in *why, for a
 * bad escape or an escaped NUL.
 */
static bool
decode (char *word, const char **why)
{
  char *out = word;

  for (char *in = word; *in; in++) {
    int hi, lo;

    if (*in != '%') {
      *out++ = *in;
      continue;
    }
    hi = hex_digit (in[1]);
    lo = hi < 0 ? -1 : hex_digit (in[2]);
    if (lo < 0) {
      *why = "a % not followed by two hexadecimal digits";
      return false;
    }
    if (hi == 0 && lo == 0) {
      *why = "an escaped NUL byte";
      return false;
    }
    *out++ = (char) (hi * 16 + lo);
    in += 2;
  }
  *out = '\0';
  return true;
}

/* Splits line (changed in place) at blanks.  -1 after control_refuse. */
static int
split (char *line, struct words *w, FILE *fp)
{
  char *save = NULL, *word;
  const char *why;

  w->v = NULL;
  w->n = 0;
  for (word = strtok_r (line, " \t", &save); word;
       word = strtok_r (NULL, " \t", &save)) {
    char **v = realloc (w->v, (w->n + 1) * sizeof *v);

    if (v == NULL) {
      control_refuse (fp, "out of memory");
      return -1;
    }
    w->v = v;
    if (!decode (word, &why)) {
      control_refuse (fp, "bad word '%s' in the command: %s", word, why);
      return -1;
    }
    w->v[w->n++] = word;
  }
  return 0;
}

void
control_refuse (FILE *fp, const char *fmt, ...)
{
  va_list ap;

  fputs ("ERR ", fp);
  va_start (ap, fmt);
  vfprintf (fp, fmt, ap);
  va_end (ap);
  fputc ('\n', fp);
}

/* A DATA line, its newlines turned into blanks: one line each. */
static void
data_line (void *arg, const char *line)
{
  FILE *fp = arg;

  fputs ("DATA ", fp);
  for (; *line; line++)
    fputc (*line == '\n' || *line == '\r' ? ' ' : *line, fp);
  fputc ('\n', fp);
}

/* The words KEY=VALUE into keys (pointing into them).  -1 after
 * log_error.
 */
static int
key_values (const char *command, char **words, size_t n,
            struct key_value **keys)
{
  *keys = calloc (n ? n : 1, sizeof **keys);
  if (*keys == NULL) {
    log_error ("%s: %m", command);
    return -1;
  }
  for (size_t i = 0; i < n; i++) {
    char *eq = strchr (words[i], '=');

    if (eq == NULL || eq == words[i]) {
      log_error ("%s: '%s' is not KEY=VALUE", command, words[i]);
      return -1;
    }
    *eq = '\0';
    (*keys)[i] = (struct key_value) { words[i], eq + 1 };
  }
  return 0;
}

static int
run_add (struct live_config *l, struct words *w, FILE *fp)
{
  struct key_value *keys = NULL;
  int r = -1;

  if (w->n < 2)
    log_error ("add: expected disk=NAME BACKEND-KEYS [QUEUE-KEYS] or "
               "linear=NAME:MEMBERS");
  else if (key_values ("add", w->v + 1, w->n - 1, &keys) == 0)
    r = live_add (l, keys, w->n - 1, data_line, fp);
  free (keys);
  return r;
}

static int
run_set (struct live_config *l, struct words *w, FILE *fp)
{
  struct key_value *keys = NULL;
  int r = -1;

  if (w->n < 3)
    log_error ("set: expected NAME QUEUE-KEY=VALUE...");
  else if (key_values ("set", w->v + 2, w->n - 2, &keys) == 0)
    r = live_set (l, w->v[1], keys, w->n - 2, data_line, fp);
  free (keys);
  return r;
}

static int
run_remove (struct live_config *l, struct words *w, FILE *fp)
{
  enum live_remove_mode mode = LIVE_REMOVE_SAFE;
  size_t i = 1;

  if (i < w->n && strcmp (w->v[i], "--drain") == 0) {
    mode = LIVE_REMOVE_DRAIN;
    i++;
  }
  else if (i < w->n && strcmp (w->v[i], "--force") == 0) {
    mode = LIVE_REMOVE_FORCE;
    i++;
  }
  if (i + 1 != w->n || w->v[i][0] == '-') {
    log_error ("remove: expected [--drain|--force] NAME");
    return -1;
  }
  return live_remove (l, w->v[i], mode, data_line, fp);
}

static int
run_grow (struct live_config *l, struct words *w, FILE *fp)
{
  if (w->n < 3) {
    log_error ("grow: expected VOLUME MEMBER...");
    return -1;
  }
  return live_grow (l, w->v[1], w->v + 2, w->n - 2, data_line, fp);
}

static int
run_bare (const char *command, struct words *w)
{
  if (w->n != 1) {
    log_error ("%s: takes no arguments", command);
    return -1;
  }
  return 0;
}

static int
run_words (struct live_config *l, struct words *w, FILE *fp)
{
  const char *command = w->v[0];

  if (strcmp (command, "list") == 0)
    return run_bare (command, w) == -1 ? -1 : live_list (l, data_line, fp);
  if (strcmp (command, "reload") == 0)
    return run_bare (command, w) == -1 ? -1 : live_reload (l, data_line, fp);
  if (strcmp (command, "add") == 0)
    return run_add (l, w, fp);
  if (strcmp (command, "remove") == 0)
    return run_remove (l, w, fp);
  if (strcmp (command, "set") == 0)
    return run_set (l, w, fp);
  if (strcmp (command, "grow") == 0)
    return run_grow (l, w, fp);
  log_error ("unknown command '%s' (list, add, remove, set, grow, reload)",
             command);
  return -1;
}

void
control_run (struct live_config *l, char *line, FILE *fp)
{
  struct log_capture errors;
  struct words w;
  int r;

  if (split (line, &w, fp) == -1) {
    words_free (&w);
    return;
  }
  if (w.n == 0) {
    control_refuse (fp, "empty command (list, add, remove, set, grow, "
                    "reload)");
    words_free (&w);
    return;
  }
  log_capture_begin (&errors);
  r = run_words (l, &w, fp);
  log_capture_end (&errors);
  if (r == 0 && errors.count)   /* done, with something to say */
    data_line (fp, errors.text);
  if (r == 0)
    fputs ("OK\n", fp);
  else
    control_refuse (fp, "%s", errors.count ? errors.text
                    : "failed, and said nothing of why");
  log_debug ("control: %s: %s%s", w.v[0], r == 0 ? "done" : "refused: ",
             r == 0 ? "" : errors.text);
  words_free (&w);
}
