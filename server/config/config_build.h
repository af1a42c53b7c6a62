/* plugq: building what serves clients from checked entries: each disk's
 * backend opened, its queue, its disk and its export (one row over the
 * whole disk), and each volume's table and export over its members.
 * Nothing is started here (disk_start does, after nbdkit's fork or at
 * once in service).
 *
 * Members are found by name through a resolver, so that a volume added
 * in service can stand on disks and volumes already serving, and a
 * reload on what it keeps.
 */
#ifndef PLUGQ_CONFIG_BUILD_H
#define PLUGQ_CONFIG_BUILD_H

#include "config_entries.h"

/* The entry a member name stands for, built or to be built; never NULL
 * for a name the checks resolved.
 */
struct config_resolver {
  struct entry *(*resolve) (void *arg, const char *name);
  void *arg;
};

/* Disk entry d: its backend opened, d->disk and d->export made.  0, or
 * -1 after log_error (nothing kept).
 */
int config_build_disk (struct entry *d);

/* Volume entry v: its members (volumes first, built as needed), then
 * its table and v->export.  Does nothing for a volume built already.  0,
 * or -1 after log_error.
 */
int config_build_volume (struct entry *v, const struct config_resolver *);

/* Volume entry v, built, grown by the members extra (spec: the volume's
 * new linear= value, for messages): *version, its current table followed
 * by theirs, and the disks it reaches (*disks, to free; not held).  0, or
 * -1 after log_error.
 */
int config_build_grown (struct entry *v, const struct member *extra,
                        size_t nr_extra, const char *spec,
                        const struct config_resolver *,
                        struct linear **version, struct disk ***disks,
                        size_t *nr_disks);

/* The resolver's entries, recursively: every disk member volume v
 * reaches (to free; not held).  -1 when out of memory.
 */
int config_volume_disks (struct entry *v, const struct config_resolver *,
                         struct disk ***disks, size_t *nr_disks);

#endif /* PLUGQ_CONFIG_BUILD_H */
