/* plugq: elevators choose the order in which queued pieces go out.
 *
 * The queue keeps its pieces in two orders, by offset and by age, and
 * guarantees they never overlap, so an elevator only chooses: where the
 * next dispatch starts, and which piece may follow the last one in the
 * same backend operation.  A new elevator is one file with one of these
 * plus its entry in ELEVATORS below; its name, help and the names that
 * --help, --dump-plugin and elevator='s messages list come from there.
 */
#ifndef PLUGQ_ELEVATOR_H
#define PLUGQ_ELEVATOR_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "queue/piece.h"

/* How reads fare against writes (elevator_reads.c): written by readers
 * without the queue lock, read by the elevator under it.
 */
/* read-target=auto in read_feedback.target_ns. */
#define READ_TARGET_AUTO UINT64_MAX

struct read_feedback {
  uint64_t target_ns;           /* read-target; 0: off, READ_TARGET_AUTO */
  uint64_t auto_floor_ns;       /* with auto, no target below this */
  /* The target in force: target_ns, or with auto READ_AUTO_FACTOR times
   * the fastest read of the last READ_BASELINE_NS (elevator_reads.c).
   */
  _Atomic uint64_t effective_ns;
  _Atomic uint64_t fastest_ns;  /* the fastest read since baseline_ns */
  uint64_t baseline_ns;         /* under the queue lock: when fastest_ns
                                 * was last turned into a target */
  _Atomic uint32_t active;      /* reads arrived and not yet answered */
  _Atomic uint64_t last_ns;     /* the newest read's arrival */
  _Atomic uint32_t met, missed; /* this window's reads, by the target */
  /* Under the queue lock: */
  uint64_t window_start_ns;
  uint64_t allowance;           /* write bytes in flight; UINT64_MAX: any */
  uint64_t held;                /* dispatches held back for reads */
};

struct elevator_state {
  struct piece_tree *by_offset;
  struct piece_list *by_age;
  uint64_t head;                /* end of the last dispatch (C-LOOK) */
  /* While a FLUSH waits, pieces up to here must go first; 0 = none. */
  uint64_t barrier_seq;
  struct read_feedback reads;
  /* The elevator's own state, set by its init and freed by its exit;
   * NULL for an elevator without init.
   */
  void *private;
};

struct elevator_ops {
  const char *name;             /* as elevator= names it */
  /* One line for --help: what order it dispatches in. */
  const char *help;
  /* Optional.  A queue that uses the elevator calls init once, before
   * its first dispatch and with private NULL, and exit once, after its
   * last dispatch and only if init returned 0; no dispatch runs during
   * either.  init sets up private and returns 0, or -1 after log_error,
   * and then the queue does not start.  exit frees what init set up.
   */
  int (*init) (struct elevator_state *);
  void (*exit) (struct elevator_state *);
  /* The piece the next dispatch starts with; the queue is not empty. */
  struct piece *(*first) (struct elevator_state *, uint64_t now_ns);
  /* The piece that may be merged after prev, or NULL. */
  struct piece *(*next) (struct elevator_state *, struct piece *prev);
  /* Optional: the bytes of writes the queue may have at the backend at
   * once now, so that reads competing with them meet read-target;
   * UINT64_MAX for no limit, and without this function.  The queue lets
   * one batch go whenever none is in flight, and a batch past
   * write-expire whatever this says.  Under the queue lock.
   */
  uint64_t (*write_allowance) (struct elevator_state *, uint64_t now_ns);
};

/* elevator_reads.c: the feedback rule elevators share. */

/* A read arrives (the reads now active, itself included) / is answered
 * after latency_ns.  Lock-free.
 */
unsigned read_feedback_arrive (struct read_feedback *, uint64_t now_ns);
void read_feedback_done (struct read_feedback *, uint64_t latency_ns);
/* Under the queue lock: write bytes in flight that reads can live with
 * (the rule in elevator_reads.c's header).
 */
uint64_t read_feedback_allowance (struct read_feedback *, uint64_t now_ns);
/* Whether reads are competing with writes now. */
bool read_feedback_competing (const struct read_feedback *, uint64_t now_ns);
/* Before the queue's first read: the target from read-target=, and
 * auto's floor from the backend (0: the elevator's own).
 */
void read_feedback_init (struct read_feedback *, uint64_t target_ns,
                         uint64_t auto_floor_ns);
/* The same on a queue no request reaches (queue_set_config). */
void read_feedback_set_target (struct read_feedback *, uint64_t target_ns);

/* The table: every elevator, in the order --help lists them.  A new
 * elevator joins with one X (name) here, naming the elevator_NAME its
 * file defines; the declarations and elevator.c's table both come from
 * this one line.
 */
#define ELEVATORS(X) X (deadline) X (noop)

#define ELEVATOR_DECLARE(name) extern const struct elevator_ops elevator_##name;
ELEVATORS (ELEVATOR_DECLARE)

/* By name, NULL if unknown. */
const struct elevator_ops *elevator_lookup (const char *name);

/* The table in order: the i-th elevator, NULL past the last. */
const struct elevator_ops *elevator_at (size_t i);

/* Every name joined with sep ("deadline,noop").  Heap string, NULL if
 * out of memory.
 */
char *elevator_names (const char *sep);

#endif /* PLUGQ_ELEVATOR_H */
