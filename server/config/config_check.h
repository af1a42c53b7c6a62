/* plugq: what needs a whole configuration: every disk has a backend and
 * only its keys, volume members exist (they may be defined after the
 * volume, or be in service already) and form no cycle, the default
 * export exists, stats= can be written.
 *
 * Errors about an entry read from a config= file start with the
 * FILE:LINE of its disk= or linear= (entry->origin).
 */
#ifndef PLUGQ_CONFIG_CHECK_H
#define PLUGQ_CONFIG_CHECK_H

#include "config_entries.h"

/* With no disk and no volume at all, one 1 GiB memory disk named
 * "default", so that a bare "nbdkit plugq" serves something.  0, or -1
 * after log_error.
 */
int config_add_default_disk (struct config *);

/* The entries of c (and, for members, of its base).  0, or -1 after
 * log_error.
 */
int config_check_entries (struct config *);

/* default-export= names an entry, stats= can be written.  0, or -1
 * after log_error.
 */
int config_check_settings (const struct config *);

/* Sets the context of this thread's messages to where e was read (for
 * errors about it), returning the context to restore.
 */
const char *config_entry_context (const struct entry *e);

#endif /* PLUGQ_CONFIG_CHECK_H */
