/* plugq: a connection's cursors into each disk's latched errors. */
#include <config.h>

#include <stdatomic.h>
#include <stdlib.h>

#include "queue.h"
#include "session.h"

struct session {
  uint64_t id;
  unsigned nr_slots;
  uint64_t slots[];
};

/* Written only while the plugin is configured, before any thread or
 * connection exists; read when a connection opens.
 */
static unsigned queues_registered;

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

unsigned
session_register_queue (void)
{
  return queues_registered++;
}

struct session *
session_new (void)
{
  struct session *s;

  s = malloc (sizeof *s + queues_registered * sizeof s->slots[0]);
  if (s == NULL)
    return NULL;
  s->nr_slots = queues_registered;
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
