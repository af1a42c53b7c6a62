/* plugq: how many spare aligned buffers a disk keeps, and when the
 * dispatch thread gives the rest back to the kernel.
 *
 * A disk whose backend needs aligned memory (O_DIRECT) copies each write
 * of 16 KiB or more into a mapping from its pool (buffer_pool.h).  While
 * the disk writes, the pool keeps up to queue-bytes of freed mappings:
 * with a full queue of 1 MiB direct writes the buffers queued and in
 * flight rise and fall by 40 and more, and a mapping given back was
 * mapped again, faulted and zeroed page by page moments later (docs/
 * design.md, "Request buffers and malloc").  A disk that took no spare
 * for a whole look (SPARE_LOOK_NS) keeps SPARE_BUFFERS_QUIET, so a
 * quiet disk holds no more than that.
 *
 *   ARM    a completed batch whose buffers left more than
 *          SPARE_BUFFERS_QUIET idle sets q->spares_look_ns, the next
 *          look, and wakes the dispatch thread so it sleeps until then.
 *          A buffer a reader still held then counts at the next batch.
 *   LOOK   when it is due, the dispatch thread trims the pool, which
 *          gives back all but SPARE_BUFFERS_QUIET only when no spare was
 *          taken since its previous look (buffer_pool_trim).
 *   AGAIN  while more stays idle, the next look is SPARE_LOOK_NS later:
 *          a busy disk costs the dispatch thread one wake-up a second.
 *
 * q->spares_look_ns is 0 when disarmed; it is read and written under
 * q->lock.
 */
#include <config.h>

#include "buffers/buffer_pool.h"
#include "queue_internal.h"

#define SPARE_BUFFERS_QUIET (16 * 1024 * 1024)
#define SPARE_LOOK_NS (1000 * NS_PER_MS)

void
spares_arm_look (struct queue *q)
{
  queue_assert_locked (q);
  if (q->spares_look_ns == 0
      && buffer_pool_idle_bytes (q->buffers) > SPARE_BUFFERS_QUIET) {
    q->spares_look_ns = monotonic_ns () + SPARE_LOOK_NS;
    pthread_cond_signal (&q->dispatch_wake);
  }
}

bool
spares_look_due (struct queue *q)
{
  queue_assert_locked (q);
  return q->spares_look_ns != 0 && monotonic_ns () >= q->spares_look_ns;
}

void
spares_trim (struct queue *q)
{
  bool more;

  queue_assert_locked (q);
  lock_release (&q->lock);
  more = buffer_pool_trim (q->buffers, SPARE_BUFFERS_QUIET);
  lock_acquire (&q->lock);
  q->spares_look_ns = more ? monotonic_ns () + SPARE_LOOK_NS : 0;
}
