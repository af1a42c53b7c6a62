/* plugq: per-connection error cursors (internal to server/). */
#ifndef PLUGQ_SESSION_H
#define PLUGQ_SESSION_H

#include <stdint.h>

#define SESSION_SLOT_UNSET UINT64_MAX

/* Every queue gets a slot number when it is created (configuration time,
 * before any connection exists), so a session can size its cursors once.
 */
unsigned session_register_queue (void);

/* Sessions are numbered from 1 as they open; the generation is the
 * newest number handed out, so every session with id <= it exists.
 */
uint64_t session_generation (void);
uint64_t session_id (const struct session *);

/* The cursor of queue `index`; only touched under that queue's lock. */
uint64_t *session_slot (struct session *, unsigned index);

#endif /* PLUGQ_SESSION_H */
