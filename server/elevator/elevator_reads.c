/* plugq: reads against writes, the feedback rule an elevator uses to
 * keep reads within a latency target while writes stream.
 *
 * A reader waits for its data; most writes are answered before they
 * reach the backend.  A backend busy with large merged writes makes every
 * read wait behind them (on a disk, behind the device's queue; on a
 * remote, behind megabytes of write data ahead of it on the socket), so
 * while reads compete, the writes the queue keeps at the backend are
 * held to what lets reads meet read-target, as kyber throttles writes:
 *
 *   - Each read counts itself active from arrival to answer and says,
 *     when answered, whether its latency met the target
 *     (read_feedback_arrive, read_feedback_done); lock-free.
 *   - Reads compete while one is active or one arrived within
 *     READ_QUIET_NS.  Otherwise writes have no limit.
 *   - When reads start competing, writes may keep READ_ALLOWANCE_START
 *     bytes at the backend.  Every READ_WINDOW_NS the window's reads
 *     judge it: more than one in READ_MISSED_SHARE missed the target,
 *     the allowance halves (not below READ_ALLOWANCE_FLOOR); none
 *     missed, it doubles, and past READ_ALLOWANCE_CEILING writes have no
 *     limit again.  A window with no read judges nothing.
 *
 * read-target=auto (the default) sets the target from the backend
 * itself: READ_AUTO_FACTOR times the fastest read of the last
 * READ_BASELINE_NS, within READ_AUTO_MIN_NS (or the backend's own floor,
 * read_target_floor_ns, where higher) and READ_AUTO_MAX_NS.  Under
 * a write stream some reads still find the backend free, so the fastest
 * read is what a read costs that backend unhindered: about 60 us on a
 * local disk through O_DIRECT, the remote's own latency on a remote.  A
 * fixed target fits one kind only: 300 us starves writes on a 1 ms
 * remote, where every read misses it, and 2 ms holds nothing back on a
 * disk, where reads wait 400 us behind a 1 MiB write and still meet it
 * (docs/design.md, "Reads in the elevator").
 *
 * What the allowance is not: a way to starve writes.  The queue lets a
 * batch go whenever no write is in flight, so writes keep flowing at the
 * floor's pace at least, and a batch past write-expire goes whatever the
 * allowance says (batch_take).  With read-target=off (target 0) there is
 * no limit.
 */
#include <config.h>

#include "elevator.h"

#define READ_WINDOW_NS (10 * 1000 * 1000ull)
#define READ_QUIET_NS (20 * 1000 * 1000ull)
#define READ_MISSED_SHARE 10
#define READ_ALLOWANCE_FLOOR (64 * 1024ull)
#define READ_ALLOWANCE_START (1024 * 1024ull)
#define READ_ALLOWANCE_CEILING (64 * 1024 * 1024ull)
#define READ_BASELINE_NS (1000 * 1000 * 1000ull)
#define READ_AUTO_FACTOR 2
#define READ_AUTO_MIN_NS (300 * 1000ull)
#define READ_AUTO_MAX_NS (10 * 1000 * 1000ull)
#define READ_AUTO_FIRST_NS (1000 * 1000ull)     /* before any read */

/* What auto starts from, before any read. */
static uint64_t
auto_first (const struct read_feedback *f)
{
  return f->auto_floor_ns > READ_AUTO_FIRST_NS ? f->auto_floor_ns
    : READ_AUTO_FIRST_NS;
}

void
read_feedback_init (struct read_feedback *f, uint64_t target_ns,
                    uint64_t auto_floor_ns)
{
  f->target_ns = target_ns;
  f->auto_floor_ns = auto_floor_ns > READ_AUTO_MIN_NS ? auto_floor_ns
    : READ_AUTO_MIN_NS;
  atomic_init (&f->effective_ns, target_ns == READ_TARGET_AUTO
               ? auto_first (f) : target_ns);
  atomic_init (&f->fastest_ns, UINT64_MAX);
  f->allowance = UINT64_MAX;
}

void
read_feedback_set_target (struct read_feedback *f, uint64_t target_ns)
{
  f->target_ns = target_ns;
  atomic_store_explicit (&f->effective_ns, target_ns == READ_TARGET_AUTO
                         ? auto_first (f) : target_ns,
                         memory_order_relaxed);
}

/* The fastest read since the last baseline, lowered lock-free. */
static void
note_fastest (struct read_feedback *f, uint64_t latency_ns)
{
  uint64_t fastest = atomic_load_explicit (&f->fastest_ns,
                                           memory_order_relaxed);

  while (latency_ns < fastest
         && !atomic_compare_exchange_weak_explicit (&f->fastest_ns, &fastest,
                                                    latency_ns,
                                                    memory_order_relaxed,
                                                    memory_order_relaxed))
    ;
}

/* With auto, once per READ_BASELINE_NS: the fastest read of the period
 * makes the next period's target.  Under the queue lock.
 */
static void
rebase_target (struct read_feedback *f, uint64_t now_ns)
{
  uint64_t fastest, target;

  if (f->target_ns != READ_TARGET_AUTO
      || now_ns - f->baseline_ns < READ_BASELINE_NS)
    return;
  f->baseline_ns = now_ns;
  fastest = atomic_exchange_explicit (&f->fastest_ns, UINT64_MAX,
                                      memory_order_relaxed);
  if (fastest == UINT64_MAX)
    return;                     /* no read: keep the target */
  target = fastest * READ_AUTO_FACTOR;
  if (target < f->auto_floor_ns)
    target = f->auto_floor_ns;
  if (target > READ_AUTO_MAX_NS)
    target = READ_AUTO_MAX_NS;
  atomic_store_explicit (&f->effective_ns, target, memory_order_relaxed);
}

/* active is counted with read-target=off too: streams of reads merge by
 * it (queue_read_streams.c).
 */
unsigned
read_feedback_arrive (struct read_feedback *f, uint64_t now_ns)
{
  unsigned active = atomic_fetch_add_explicit (&f->active, 1,
                                               memory_order_relaxed) + 1;

  if (f->target_ns)
    atomic_store_explicit (&f->last_ns, now_ns, memory_order_relaxed);
  return active;
}

void
read_feedback_done (struct read_feedback *f, uint64_t latency_ns)
{
  atomic_fetch_sub_explicit (&f->active, 1, memory_order_relaxed);
  if (f->target_ns == 0)
    return;
  if (f->target_ns == READ_TARGET_AUTO)
    note_fastest (f, latency_ns);
  if (latency_ns <= atomic_load_explicit (&f->effective_ns,
                                          memory_order_relaxed))
    atomic_fetch_add_explicit (&f->met, 1, memory_order_relaxed);
  else
    atomic_fetch_add_explicit (&f->missed, 1, memory_order_relaxed);
}

bool
read_feedback_competing (const struct read_feedback *f, uint64_t now_ns)
{
  return f->target_ns
    && (atomic_load_explicit (&f->active, memory_order_relaxed) > 0
        || now_ns - atomic_load_explicit (&f->last_ns, memory_order_relaxed)
           < READ_QUIET_NS);
}

/* The window's verdict on the allowance: enough reads missed, halve it
 * (from no limit, start at READ_ALLOWANCE_START); none missed, double it
 * (past the ceiling, no limit).
 */
static void
judge_window (struct read_feedback *f)
{
  uint32_t met = atomic_exchange_explicit (&f->met, 0, memory_order_relaxed);
  uint32_t missed = atomic_exchange_explicit (&f->missed, 0,
                                              memory_order_relaxed);

  if (missed * READ_MISSED_SHARE > met + missed) {
    f->allowance = f->allowance == UINT64_MAX ? READ_ALLOWANCE_START
      : f->allowance / 2;
    if (f->allowance < READ_ALLOWANCE_FLOOR)
      f->allowance = READ_ALLOWANCE_FLOOR;
  }
  else if (missed == 0 && met > 0 && f->allowance != UINT64_MAX) {
    f->allowance *= 2;
    if (f->allowance > READ_ALLOWANCE_CEILING)
      f->allowance = UINT64_MAX;
  }
}

uint64_t
read_feedback_allowance (struct read_feedback *f, uint64_t now_ns)
{
  rebase_target (f, now_ns);
  if (!read_feedback_competing (f, now_ns)) {
    f->allowance = UINT64_MAX;
    f->window_start_ns = 0;
    return UINT64_MAX;
  }
  if (f->window_start_ns == 0) {        /* reads start competing */
    atomic_store_explicit (&f->met, 0, memory_order_relaxed);
    atomic_store_explicit (&f->missed, 0, memory_order_relaxed);
    f->allowance = READ_ALLOWANCE_START;
    f->window_start_ns = now_ns;
  }
  else if (now_ns - f->window_start_ns >= READ_WINDOW_NS) {
    judge_window (f);
    f->window_start_ns = now_ns;
  }
  return f->allowance;
}
