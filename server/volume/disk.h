/* plugq: a disk in service: its queue, and who holds it.
 *
 * A disk lives while something holds it: the configuration that defines
 * it, the published table of exports (export_table.h), and every export
 * whose rows reach it (its own, and the volumes over it; export.h).  The
 * last release retires its queue (queue_retire: drained, flushed, its
 * thread stopped, its timer detached, its backend closed), in whichever
 * thread lets go last.  A removed disk therefore lives on until the last
 * connection that can still reach it closes, unless its removal made
 * sure that none can reach it any more (remove --force).
 */
#ifndef PLUGQ_DISK_H
#define PLUGQ_DISK_H

#include <stdatomic.h>
#include <stdbool.h>

#include "queue/queue.h"

struct timer_service;

struct disk {
  struct queue *queue;
  _Atomic unsigned refs;
  bool started;                 /* set before the disk is published */
};

/* Takes ownership of queue (not started); one holder.  NULL when out of
 * memory (the queue is then still the caller's).
 */
struct disk *disk_new (struct queue *);

void disk_hold (struct disk *);
/* The last release retires the queue.  NULL is a no-op. */
void disk_release (struct disk *);

/* Starts the queue's threads (after nbdkit's fork): 0, or -1 after
 * log_error.
 */
int disk_start (struct disk *, struct timer_service *);

/* Drains and stops the queue now, keeping it (the server's last
 * snapshot of counters comes after); its retirement stops nothing more.
 * 0, or -1 when answered data may be lost (queue_stop).
 */
int disk_drain (struct disk *);

#endif /* PLUGQ_DISK_H */
