/* plugq: a connection's cursors into each disk's latched errors. */
#include <config.h>

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "queue.h"
#include "session.h"

struct session {
  uint64_t id;
  unsigned nr_slots;
  uint64_t slots[];
};

/* Slot numbers of queues: taken when a queue is created and given back
 * when it is freed, so a server that adds and removes disks for years
 * keeps its sessions as small as its largest configuration.  The lock
 * is taken only then, never on the I/O path.
 */
static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;
static bool *slot_used;         /* under slots_lock */
static unsigned slot_room;      /* under slots_lock */
/* One past the highest slot ever taken: a session opened now sizes its
 * cursors by it.  Raised before the queue that took the slot is made
 * public, so a connection that can reach the queue sees it.
 */
static _Atomic unsigned slots_high;

/* Connections opened so far: only touched when one opens. */
static _Atomic uint64_t sessions_opened;

uint64_t
session_generation (void)
{
  return atomic_load (&sessions_opened);
}

uint64_t
session_id (const struct session *s)
{
  return s->id;
}

/* Doubles the table of slots; false when out of memory.  Slots past the
 * old table were handed out while it could not grow
 * (session_register_queue): they stay taken.
 */
static bool
grow_slots (void)
{
  unsigned room = slot_room ? 2 * slot_room : 16;
  bool *used = realloc (slot_used, room * sizeof *used);

  if (used == NULL)
    return false;
  for (unsigned i = slot_room; i < room; i++)
    used[i] = i < atomic_load (&slots_high);
  slot_used = used;
  slot_room = room;
  return true;
}

/* The lowest free slot, or UINT_MAX when out of memory. */
static unsigned
take_free_slot (void)
{
  for (;;) {
    for (unsigned i = 0; i < slot_room; i++)
      if (!slot_used[i])
        return i;
    if (!grow_slots ())
      return UINT_MAX;
  }
}

/* A slot number nobody else holds.  The slot a freed queue gave back is
 * taken again: no session can hold a cursor for the old queue and reach
 * the new one, since a connection only ever reaches the disks that
 * existed when it opened (docs/design.md, "Changing the configuration
 * in service").  Without memory for the table, a slot past every other
 * (never given back): its sessions just hold one more cursor.
 */
unsigned
session_register_queue (void)
{
  unsigned slot;

  pthread_mutex_lock (&slots_lock);
  slot = take_free_slot ();
  if (slot == UINT_MAX)         /* past the table and every slot */
    slot = atomic_load (&slots_high) > slot_room
      ? atomic_load (&slots_high) : slot_room;
  else
    slot_used[slot] = true;
  if (slot + 1 > atomic_load (&slots_high))
    atomic_store (&slots_high, slot + 1);
  pthread_mutex_unlock (&slots_lock);
  return slot;
}

void
session_release_queue (unsigned slot)
{
  pthread_mutex_lock (&slots_lock);
  if (slot < slot_room)
    slot_used[slot] = false;
  pthread_mutex_unlock (&slots_lock);
}

struct session *
session_new (void)
{
  unsigned nr = atomic_load (&slots_high);
  struct session *s;

  s = malloc (sizeof *s + nr * sizeof s->slots[0]);
  if (s == NULL)
    return NULL;
  s->nr_slots = nr;
  s->id = atomic_fetch_add (&sessions_opened, 1) + 1;
  for (unsigned i = 0; i < s->nr_slots; i++)
    s->slots[i] = SESSION_SLOT_UNSET;
  return s;
}

void
session_free (struct session *s)
{
  free (s);
}

uint64_t *
session_slot (struct session *s, unsigned index)
{
  if (s == NULL || index >= s->nr_slots)
    return NULL;
  return &s->slots[index];
}
