/* plugq: the texts "nbdkit plugq --help" prints.
 *
 * The plugin's own keys are fixed here; each backend type adds its own
 * lines and the elevator= line lists the table's elevators.  Key columns
 * are KEY_WIDTH wide, as nbdkit's own plugins print them.
 */

#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend_type.h"
#include "elevator/elevator.h"
#include "help_text.h"
#include "queue/queue.h"

#define KEY_WIDTH 28

/* "key=<VALUE>" then text in the second column; a key too wide for its
 * column puts the text on the next line.
 */
static void
key_line (FILE *fp, const char *key, const char *text)
{
  if (strlen (key) < KEY_WIDTH)
    fprintf (fp, "%-*s%s\n", KEY_WIDTH, key, text);
  else
    fprintf (fp, "%s\n%-*s%s\n", key, KEY_WIDTH, "", text);
}

static void
backend_lines (FILE *fp)
{
  const struct backend_type *t;

  for (size_t i = 0; (t = backend_type_at (i)) != NULL; i++)
    fputs (t->help, fp);
}

/* elevator=deadline|noop, then one line per elevator. */
static void
elevator_lines (FILE *fp)
{
  const struct elevator_ops *e;
  struct queue_config defaults;
  char key[256], text[128];
  char *names = elevator_names ("|");

  queue_config_defaults (&defaults);
  snprintf (key, sizeof key, "elevator=%s", names ? names : "<NAME>");
  snprintf (text, sizeof text, "Dispatch order (default %s):",
            defaults.elevator->name);
  key_line (fp, key, text);
  for (size_t i = 0; (e = elevator_at (i)) != NULL; i++)
    fprintf (fp, "%-*s  %s: %s\n", KEY_WIDTH, "", e->name, e->help);
  free (names);
}

/* A string from what fill writes; NULL if out of memory. */
static char *
build (void (*fill) (FILE *))
{
  char *s = NULL;
  size_t len;
  FILE *fp = open_memstream (&s, &len);

  if (fp == NULL)
    return NULL;
  fill (fp);
  if (ferror (fp)) {
    fclose (fp);
    free (s);
    return NULL;
  }
  if (fclose (fp) == EOF) {
    free (s);
    return NULL;
  }
  return s;
}

struct key_help {
  const char *key;              /* "" continues the line above */
  const char *text;
};

#define KEY_LINES(fp, table) \
  key_lines ((fp), (table), sizeof (table) / sizeof (table)[0])

static void
key_lines (FILE *fp, const struct key_help *k, size_t n)
{
  for (size_t i = 0; i < n; i++)
    key_line (fp, k[i].key, k[i].text);
}

static const struct key_help volume_help[] = {
  { "linear=<NAME>:<M>[,<M>...]",
    "A volume of disks/volumes end to end; M may be" },
  { "", "NAME@OFFSET+LENGTH for a sub-range." },
  { "ack=queued|dispatched",
    "Answer writes once queued (default) or written." },
};

static const struct key_help queue_help[] = {
  { "unplug-delay=<DELAY>",
    "Unplug timer, e.g. 3ms (ns|us|ms|s; bare = s)." },
  { "unplug-thresh=<N>", "Queued requests that unplug at once (>= 1)." },
  { "max-merge=<SIZE>", "Largest merged backend operation." },
  { "queue-bytes=<SIZE>", "Queued data before writers wait." },
  { "queue-requests=<N>", "Queued requests before writers wait (>= 1)." },
  { "write-expire=<DELAY>", "Deadline: no request waits longer." },
  { "read-ahead=<SIZE>|off",
    "Read ahead of sequential reads (default 1M)." },
  { "bypass=auto|never",
    "Writes nothing can merge with skip the queue on" },
  { "", "file and memory disks (auto, default) or never." },
  { "", "(Queue keys before any disk= set the defaults," },
  { "", "after a disk= they set that disk alone.)" },
  { "default-export=<NAME>", "Export for clients asking for \"\"." },
  { "stats=<PATH>", "Keep a snapshot of every queue's counters." },
  { "stats-format=json|prometheus",
    "JSON (default) or Prometheus text for node_exporter." },
  { "config=<FILE>", "More keys, one key=value per line (# comments)," },
  { "", "read after the command line's; reload reads it again." },
  { "control=<PATH>", "Unix socket for plugqctl: list, add, remove, set," },
  { "", "grow, reload while serving (root or nbdkit's user)." },
};

static void
fill_keys (FILE *fp)
{
  key_line (fp, "disk=<NAME>", "Start a disk (an export of its own).");
  backend_lines (fp);
  KEY_LINES (fp, volume_help);
  elevator_lines (fp);
  KEY_LINES (fp, queue_help);
  /* nbdkit adds the last newline. */
  fprintf (fp, "%-*s%s", KEY_WIDTH, "stats-interval=<DELAY>",
           "How often stats= is rewritten (default 1s).");
}

char *
help_text_keys (void)
{
  return build (fill_keys);
}

/* "files and block devices (file=), sparse memory (memory=) or remote
 * NBD exports (nbd=)".
 */
static void
backend_summaries (FILE *fp)
{
  const struct backend_type *t;

  for (size_t i = 0; (t = backend_type_at (i)) != NULL; i++)
    fprintf (fp, "%s%s (%s=)",
             i == 0 ? "" : backend_type_at (i + 1) ? ", " : " or ",
             t->summary, t->name);
}

static void
fill_description (FILE *fp)
{
  char *elevators = elevator_names (", ");

  fputs ("Serves disks backed by ", fp);
  backend_summaries (fp);
  fprintf (fp, ", and linear volumes of them; every disk has its own "
           "plugged request queue with an elevator (%s) and an unplug "
           "timer, and FLUSH/FUA unplug at once.",
           elevators ? elevators : "see elevator=");
  free (elevators);
}

char *
help_text_description (void)
{
  return build (fill_description);
}
