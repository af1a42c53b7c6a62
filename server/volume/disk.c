/* plugq: a disk in service (disk.h). */
#include <config.h>

#include <stdlib.h>

#include "common/log.h"
#include "disk.h"

struct disk *
disk_new (struct queue *q)
{
  struct disk *d = calloc (1, sizeof *d);

  if (d == NULL)
    return NULL;
  d->queue = q;
  atomic_init (&d->refs, 1);
  return d;
}

void
disk_hold (struct disk *d)
{
  atomic_fetch_add_explicit (&d->refs, 1, memory_order_relaxed);
}

/* acq_rel: whoever lets go last sees every other holder's use done. */
void
disk_release (struct disk *d)
{
  if (d == NULL
      || atomic_fetch_sub_explicit (&d->refs, 1, memory_order_acq_rel) != 1)
    return;
  queue_retire (d->queue);
  free (d);
}

int
disk_start (struct disk *d, struct timer_service *ts)
{
  if (queue_start (d->queue, ts) == -1) {
    log_error ("disk %s: cannot start its queue", queue_name (d->queue));
    return -1;
  }
  d->started = true;
  return 0;
}

int
disk_drain (struct disk *d)
{
  return queue_stop (d->queue);
}
