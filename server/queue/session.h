/* plugq: a connection's view of each disk's latched errors.
 *
 * Like the kernel's errseq_t: every connection hears of an error on the
 * FLUSH and FUA requests it sent before the error was reported to it
 * (queue_flush.c's error_mark), and an error no connection has seen yet
 * is reported even to connections opened after it happened.  The plugin
 * makes one session per connection; the queues keep a cursor in it.
 */
#ifndef PLUGQ_SESSION_H
#define PLUGQ_SESSION_H

#include <stdint.h>

struct session;

struct session *session_new (void);
void session_free (struct session *);

#define SESSION_SLOT_UNSET UINT64_MAX

/* Every queue gets a slot number when it is created, before any
 * connection can reach it, so a session sizes its cursors once, when it
 * opens, for every disk it can reach.  A freed queue gives its slot back
 * for the next queue (queue_retire).
 */
unsigned session_register_queue (void);
void session_release_queue (unsigned slot);

/* Sessions are numbered from 1 as they open; the generation is the
 * newest number handed out, so every session with id <= it exists.
 */
uint64_t session_generation (void);
uint64_t session_id (const struct session *);

/* The cursor of queue `index`; only touched under that queue's lock. */
uint64_t *session_slot (struct session *, unsigned index);

#endif /* PLUGQ_SESSION_H */
