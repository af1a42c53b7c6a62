/* plugq: the threads the engine starts, and the libev loops they run.
 *
 * nbdkit owns the process: its own threads must keep receiving the
 * signals it handles, and nothing here may install a signal handler.
 */
#ifndef PLUGQ_ENGINE_THREAD_H
#define PLUGQ_ENGINE_THREAD_H

#include <pthread.h>

struct ev_loop;

/* pthread_create with every signal blocked in the new thread, so nbdkit's
 * threads keep receiving SIGTERM and SIGINT.  The thread is named `name`
 * (cut to the kernel's 15 bytes), so top -H, ps -L and perf tell the
 * engine's threads from nbdkit's.  0, or -1 with errno set.
 */
int engine_thread_create (pthread_t *, const char *name,
                          void *(*fn) (void *), void *arg);

/* A libev loop for an engine thread, or NULL.  It must survive a
 * watched descriptor closed under it by another thread (libnbd closes
 * a dead connection's socket in whichever thread meets the error).
 */
struct ev_loop *engine_loop_new (void);

/* A libev loop on epoll, or NULL: cheaper per wake-up than select, whose
 * libev backend scans every bit of each ready word.  Only for a thread
 * that watches descriptors no other thread closes, and whose timers may
 * fire to the millisecond.
 */
struct ev_loop *engine_loop_new_epoll (void);

#endif /* PLUGQ_ENGINE_THREAD_H */
