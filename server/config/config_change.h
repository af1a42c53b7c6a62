/* plugq: carrying out a change of the configuration in service, all or
 * nothing (the control commands of config_live.h are built on it).
 *
 * A change is a plan (config_diff.h).  Carrying it out:
 *  1. builds what it adds: backends opened, queues made and started,
 *     volume tables over their members, grown tables;
 *  2. commits under the registry's lock, where no connection can open:
 *     checks what depends on clients (a safe removal, a key the queue
 *     reads without its lock), sets queue keys, puts the grown tables in
 *     place and publishes the new table of exports;
 *  3. then closes what it removed (each export's gate closed, its disks
 *     flushed) and lets it go.
 * A failure in 1 or 2 undoes 1 (the new disks are retired) and leaves
 * the server as it was.
 */
#ifndef PLUGQ_CONFIG_CHANGE_H
#define PLUGQ_CONFIG_CHANGE_H

#include "config_diff.h"
#include "config_live.h"

/* Carries p out; output lines say what changed.  0, or -1 after
 * log_error (with nothing changed, unless a removal's last flush failed
 * after the commit: then it says data may be lost).
 */
int live_apply_plan (struct live_config *, struct config_plan *p,
                     live_output, void *arg);

/* Publishes the table of the configuration as it is (startup). */
int live_publish_entries (struct live_config *);

#endif /* PLUGQ_CONFIG_CHANGE_H */
