/* plugq: a change to the configuration in service, as a plan: what to
 * add, remove, grow and set.  Every control command makes one (an `add`
 * adds, a `grow` grows ...) and config_change.c carries it out, all or
 * nothing; a `reload` makes it by comparing the configuration it read
 * with the one in service (config_diff), which this file does.
 */
#ifndef PLUGQ_CONFIG_DIFF_H
#define PLUGQ_CONFIG_DIFF_H

#include <stdbool.h>
#include <stddef.h>

#include "config_entries.h"
#include "volume/linear.h"

/* A live disk's queue keys changed. */
struct plan_set {
  struct entry *live;
  struct queue_config qc;
};

/* A live volume grown by members appended to it. */
struct plan_grow {
  struct entry *live;
  const struct member *extra;   /* the members appended (not owned) */
  size_t nr_extra;
  char *spec;                   /* the volume's linear= value after */
  /* Built by config_change.c: */
  struct linear *version;
  struct disk **disks;          /* every disk it reaches, held */
  size_t nr_disks;
};

/* What becomes of the clients of what a plan removes. */
enum plan_removal {
  PLAN_REMOVE_SAFE,             /* none may be connected */
  PLAN_REMOVE_DRAIN,            /* refused; the export goes with them */
  PLAN_REMOVE_FORCE,            /* refused; the disks go now */
};

struct config_plan {
  /* The entries to add live in `wanted` (a reload's whole new
   * configuration, or an add's entries over the live one as base).
   * With replace_all (reload) wanted becomes the configuration in
   * service, keeping what serves the names it keeps.
   */
  struct config *wanted;
  bool replace_all;
  struct entry **add;           /* entries of wanted */
  size_t nr_add;
  struct entry **remove;        /* live entries */
  size_t nr_remove;
  enum plan_removal removal;
  struct plan_set *set;
  size_t nr_set;
  struct plan_grow *grow;
  size_t nr_grow;
};

void config_plan_free (struct config_plan *);

int plan_add (struct config_plan *, struct entry *);
int plan_remove (struct config_plan *, struct entry *);
int plan_set (struct config_plan *, struct entry *live,
              const struct queue_config *qc);
/* spec: the volume's new linear= value (copied). */
int plan_grow (struct config_plan *, struct entry *live,
               const struct member *extra, size_t nr_extra,
               const char *spec);

/* Whether two sets of queue keys are the same. */
bool queue_config_equal (const struct queue_config *,
                         const struct queue_config *);

/* What turns the live configuration into wanted (read afresh, checked):
 * names gone are removed, new names added, a disk's changed queue keys
 * set, a volume whose members were appended to grown, and a name whose
 * kind or volume members changed otherwise removed and added again.  A
 * live disk whose backend keys changed, or a changed server setting
 * (stats=, stats-format=, stats-interval=, control=), is an error
 * naming wanted's line.  0, or -1 after log_error.
 */
int config_diff (const struct config *live, struct config *wanted,
                 struct config_plan *);

#endif /* PLUGQ_CONFIG_DIFF_H */
