/* plugq: unit tests for the configuration model (server/config/): the
 * key grammar, config= files, checks over a live base, and what a reload
 * changes (config_diff).  Nothing is built: the tests look at entries,
 * plans and the messages, captured from the engine's log.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "config/config_check.h"
#include "config/config_diff.h"
#include "config/config_file.h"
#include "config/config_keys.h"
#include "elevator/elevator.h"
#include "tap.h"

#define MS UINT64_C (1000000)

/* ------------------------------------------------------------ helpers */

static struct log_capture errors;

/* Reads the words "key=value" of line into c as the given source; 0 or
 * -1.  Errors land in `errors`.
 */
static int
read_words (struct config *c, enum config_source source, const char *line)
{
  struct config_reader r;
  char *copy = strdup (line), *save = NULL, *w;
  int ret = 0;

  config_reader_init (&r, c, source);
  log_capture_begin (&errors);
  for (w = strtok_r (copy, " ", &save); w && ret == 0;
       w = strtok_r (NULL, " ", &save)) {
    char *eq = strchr (w, '=');

    *eq = '\0';
    ret = config_reader_key (&r, w, eq + 1);
  }
  log_capture_end (&errors);
  free (copy);
  return ret;
}

/* A command line of words and the checks a startup runs. */
static int
read_checked (struct config *c, const char *line)
{
  int r = read_words (c, CONFIG_SOURCE_COMMAND_LINE, line);

  log_capture_begin (&errors);
  if (r == 0)
    r = config_add_default_disk (c) == -1 || config_check_entries (c) == -1
      || config_check_settings (c) == -1 ? -1 : 0;
  log_capture_end (&errors);
  return r;
}

static bool
error_says (const char *a, const char *b)
{
  bool ok = errors.count > 0 && strstr (errors.text, a)
    && (b == NULL || strstr (errors.text, b));

  if (!ok)
    printf ("# captured: \"%s\"\n", errors.count ? errors.text : "");
  return ok;
}

static struct entry *
find (const struct config *c, const char *name)
{
  return config_find_entry (c, name);
}

struct conf_file {
  char path[64];
};

static bool
write_file (struct conf_file *f, const char *text)
{
  FILE *fp;
  int fd;

  snprintf (f->path, sizeof f->path, "/tmp/plugq-test-config.XXXXXX");
  fd = mkstemp (f->path);
  if (fd == -1 || (fp = fdopen (fd, "w")) == NULL)
    return false;
  fputs (text, fp);
  return fclose (fp) == 0;
}

/* The command line "config=FILE" plus what comes before it. */
static int
read_with_file (struct config *c, const char *before, const char *path)
{
  struct key_value args[8];
  char *copy = strdup (before), *save = NULL, *w, *cfg = NULL;
  size_t n = 0;
  int r;

  for (w = strtok_r (copy, " ", &save); w && n < 7;
       w = strtok_r (NULL, " ", &save)) {
    char *eq = strchr (w, '=');

    *eq = '\0';
    args[n++] = (struct key_value) { w, eq + 1 };
  }
  if (asprintf (&cfg, "%s", path) == -1)
    cfg = NULL;
  args[n++] = (struct key_value) { (char *) "config", cfg };
  log_capture_begin (&errors);
  r = config_read_sources (c, args, n);
  if (r == 0)
    r = config_add_default_disk (c) == -1 || config_check_entries (c) == -1
      ? -1 : 0;
  log_capture_end (&errors);
  free (cfg);
  free (copy);
  return r;
}

static const char *
backend_key (const struct entry *d, const char *key)
{
  for (size_t i = 0; i < d->nr_backend_keys; i++)
    if (strcmp (d->backend_keys[i].key, key) == 0)
      return d->backend_keys[i].value;
  return NULL;
}

/* ------------------------------------------------------------ cases */

static void
test_grammar (void)
{
  struct config c;
  struct entry *a, *b, *v;
  bool ok;

  config_init (&c, NULL);
  ok = CHECK (read_checked (&c, "unplug-delay=7ms disk=a memory=1M "
                           "ack=dispatched disk=b memory=2M elevator=noop "
                           "linear=v:a,b@0+1M stats=rel.json "
                           "control=/run/x.sock") == 0);
  a = find (&c, "a");
  b = find (&c, "b");
  v = find (&c, "v");
  ok = ok && CHECK (c.nr_entries == 3 && a && b && v)
    && CHECK (a->qc.unplug_delay_ns == 7 * MS && a->qc.ack == ACK_DISPATCHED)
    && CHECK (b->qc.unplug_delay_ns == 7 * MS && b->qc.ack == ACK_QUEUED
              && b->qc.elevator == &elevator_noop)
    && CHECK (backend_key (b, "memory")
              && strcmp (backend_key (b, "memory"), "2M") == 0)
    && CHECK (v->nr_members == 2 && v->members[1].ranged
              && v->members[1].target == b)
    && CHECK (c.stats_path && c.stats_path[0] == '/'
              && strstr (c.stats_path, "/rel.json"))
    && CHECK (c.control_path && strcmp (c.control_path, "/run/x.sock") == 0);
  config_free (&c);
  tap_ok (ok, "the grammar: queue keys before disk= are defaults, after it "
          "that disk's; backend keys are kept as written; paths absolute");
}

static void
test_file (void)
{
  struct conf_file f;
  struct config c;
  struct entry *a, *v;
  char origin[96];
  bool ok = CHECK (write_file (&f, "# a comment\n"
                               "\n"
                               "  unplug-delay = 5ms \n"
                               "disk=b\n"
                               "memory=1M\n"
                               "linear=v:a,b\n"
                               "   # indented comment\n"));

  config_init (&c, NULL);
  ok = ok && CHECK (read_with_file (&c, "disk=a memory=1M", f.path) == 0);
  a = find (&c, "a");
  v = find (&c, "v");
  snprintf (origin, sizeof origin, "%s:6", f.path);
  /* Line 3 continues the command line's last disk=. */
  ok = ok && CHECK (c.nr_entries == 3 && a && v)
    && CHECK (a->qc.unplug_delay_ns == 5 * MS)
    && CHECK (a->origin == NULL)
    && CHECK (v->origin && strcmp (v->origin, origin) == 0);
  config_free (&c);
  unlink (f.path);
  tap_ok (ok, "a config= file continues the command line: comments and "
          "blanks skipped, each entry knows its line");
}

static void
test_file_errors (void)
{
  struct conf_file bad_key, no_eq, bad_member, nested;
  struct config c;
  char want[96];
  bool ok = CHECK (write_file (&bad_key, "disk=a\nmemory=1M\nfrobnicate=1\n"))
    && CHECK (write_file (&no_eq, "disk=x\nmemory\n"))
    && CHECK (write_file (&bad_member, "disk=a\nmemory=1M\n"
                          "linear=v:a,nope\n"))
    && CHECK (write_file (&nested, "config=/etc/other\n"));

  config_init (&c, NULL);
  snprintf (want, sizeof want, "%s:3: ", bad_key.path);
  ok = ok && CHECK (read_with_file (&c, "", bad_key.path) == -1)
    && CHECK (error_says (want, "unknown parameter 'frobnicate'"));
  config_free (&c);
  snprintf (want, sizeof want, "%s:2: ", no_eq.path);
  ok = ok && CHECK (read_with_file (&c, "", no_eq.path) == -1)
    && CHECK (error_says (want, "expected KEY=VALUE"));
  config_free (&c);
  /* A check's error names the line of the entry it is about. */
  snprintf (want, sizeof want, "%s:3: ", bad_member.path);
  ok = ok && CHECK (read_with_file (&c, "", bad_member.path) == -1)
    && CHECK (error_says (want, "unknown member 'nope'"));
  config_free (&c);
  ok = ok && CHECK (read_with_file (&c, "", nested.path) == -1)
    && CHECK (error_says ("cannot name another", NULL));
  config_free (&c);
  ok = ok && CHECK (read_with_file (&c, "", "/nonexistent/plugq.conf") == -1)
    && CHECK (error_says ("config=/nonexistent/plugq.conf",
                          "No such file"));
  config_free (&c);
  unlink (bad_key.path);
  unlink (no_eq.path);
  unlink (bad_member.path);
  unlink (nested.path);
  tap_ok (ok, "a config= file's errors name FILE:LINE, a check's the line "
          "of its entry; nested and missing files are refused");
}

static void
test_add_over_base (void)
{
  struct config live, add;
  bool ok;

  config_init (&live, NULL);
  ok = CHECK (read_checked (&live, "disk=a memory=1M disk=b memory=1M "
                            "linear=v:a") == 0);
  config_init (&add, &live);
  ok = ok && CHECK (read_words (&add, CONFIG_SOURCE_COMMAND,
                                "disk=a memory=1M") == -1)
    && CHECK (error_says ("the name 'a' is already used by disk=a", NULL));
  config_free (&add);
  config_init (&add, &live);
  ok = ok && CHECK (read_words (&add, CONFIG_SOURCE_COMMAND,
                                "linear=w:v,b@0+4K disk=c memory=1M") == 0);
  log_capture_begin (&errors);
  ok = ok && CHECK (config_check_entries (&add) == 0);
  log_capture_end (&errors);
  ok = ok && CHECK (add.nr_entries == 2)
    && CHECK (find (&add, "w")->members[0].target == find (&live, "v"));
  config_free (&add);
  config_init (&add, &live);
  ok = ok && CHECK (read_words (&add, CONFIG_SOURCE_COMMAND,
                                "linear=x:y linear=y:a,x") == 0);
  log_capture_begin (&errors);
  ok = ok && CHECK (config_check_entries (&add) == -1);
  log_capture_end (&errors);
  ok = ok && CHECK (error_says ("cycle in volume members", "x -> y -> x"));
  config_free (&add);
  config_init (&add, &live);
  ok = ok && CHECK (read_words (&add, CONFIG_SOURCE_COMMAND,
                                "stats=/tmp/s.json") == -1)
    && CHECK (error_says ("only the command line or the config= file", NULL));
  config_free (&add);
  config_free (&live);
  tap_ok (ok, "an add reads over the live configuration: its names are "
          "taken, its entries may be members, cycles are found, server "
          "settings refused");
}

static bool
planned (struct entry *const *list, size_t n, const struct entry *e)
{
  for (size_t i = 0; i < n; i++)
    if (list[i] == e)
      return true;
  return false;
}

static void
test_diff (void)
{
  struct config live, want;
  struct config_plan p = { 0 };
  bool ok;

  config_init (&live, NULL);
  config_init (&want, NULL);
  ok = CHECK (read_checked (&live, "disk=a memory=1M disk=b memory=1M "
                            "disk=c memory=1M linear=v:a linear=x:b") == 0)
    && CHECK (read_checked (&want, "disk=a memory=1M unplug-delay=5ms "
                            "disk=c memory=1M linear=v:a,c@0+4K "
                            "disk=d memory=1M") == 0);
  log_capture_begin (&errors);
  ok = ok && CHECK (config_diff (&live, &want, &p) == 0);
  log_capture_end (&errors);
  ok = ok && CHECK (p.nr_add == 1 && p.add[0] == find (&want, "d"))
    && CHECK (p.nr_remove == 2 && planned (p.remove, 2, find (&live, "b"))
              && planned (p.remove, 2, find (&live, "x")))
    && CHECK (p.nr_set == 1 && p.set[0].live == find (&live, "a")
              && p.set[0].qc.unplug_delay_ns == 5 * MS)
    && CHECK (p.nr_grow == 1 && p.grow[0].live == find (&live, "v")
              && p.grow[0].nr_extra == 1
              && strcmp (p.grow[0].extra[0].text, "c@0+4K") == 0);
  config_plan_free (&p);
  config_free (&live);
  config_free (&want);
  tap_ok (ok, "a reload's plan: new names added, gone ones removed, changed "
          "queue keys set, appended members grow a volume");
}

static void
test_diff_refusals (void)
{
  struct conf_file f;
  struct config live, want;
  struct config_plan p = { 0 };
  char line[96];
  bool ok;

  config_init (&live, NULL);
  config_init (&want, NULL);
  ok = CHECK (read_checked (&live, "disk=a memory=1M") == 0)
    && CHECK (write_file (&f, "# the same disk on a new backend\n"
                          "disk=a\nmemory=2M\n"));
  ok = ok && CHECK (read_with_file (&want, "", f.path) == 0);
  log_capture_begin (&errors);
  ok = ok && CHECK (config_diff (&live, &want, &p) == -1);
  log_capture_end (&errors);
  snprintf (line, sizeof line, "%s:2: ", f.path);
  ok = ok && CHECK (error_says (line, "its backend changed (memory=2M, was "
                                "memory=1M)"));
  config_plan_free (&p);
  config_free (&want);
  config_init (&want, NULL);
  ok = ok && CHECK (read_checked (&want, "disk=a memory=1M "
                                  "stats=/tmp/other.json") == 0);
  log_capture_begin (&errors);
  ok = ok && CHECK (config_diff (&live, &want, &p) == -1);
  log_capture_end (&errors);
  ok = ok && CHECK (error_says ("stats= changed", "restart"));
  config_plan_free (&p);
  config_free (&want);
  config_free (&live);
  unlink (f.path);
  tap_ok (ok, "a reload refuses a live disk's new backend (naming the "
          "file's line) and a changed server setting");
}

static void
test_diff_dependents (void)
{
  struct config live, want;
  struct config_plan p = { 0 };
  bool ok;

  config_init (&live, NULL);
  config_init (&want, NULL);
  /* a becomes a volume: v, unchanged as written, stood on the old a. */
  ok = CHECK (read_checked (&live, "disk=a memory=1M linear=v:a "
                            "linear=w:v") == 0)
    && CHECK (read_checked (&want, "disk=c memory=1M linear=a:c "
                            "linear=v:a linear=w:v") == 0);
  log_capture_begin (&errors);
  ok = ok && CHECK (config_diff (&live, &want, &p) == 0);
  log_capture_end (&errors);
  ok = ok && CHECK (p.nr_remove == 3) && CHECK (p.nr_add == 4)
    && CHECK (planned (p.remove, 3, find (&live, "v"))
              && planned (p.remove, 3, find (&live, "w")))
    && CHECK (planned (p.add, 4, find (&want, "v"))
              && planned (p.add, 4, find (&want, "w")));
  config_plan_free (&p);
  config_free (&live);
  config_free (&want);
  tap_ok (ok, "a reload replaces the volumes over a replaced member, "
          "however deep, rather than keep their old tables");
}

int
main (void)
{
  void (*const cases[]) (void) = {
    test_grammar,
    test_file,
    test_file_errors,
    test_add_over_base,
    test_diff,
    test_diff_refusals,
    test_diff_dependents,
  };
  size_t n = sizeof cases / sizeof cases[0];

  tap_plan ((int) n);
  for (size_t i = 0; i < n; i++)
    cases[i] ();
  return tap_done ();
}
