/* plugq: the nbd backend's replay log, for reconnect=.
 *
 * A remote may answer a write from a volatile cache (nbdkit's cache
 * filter, qemu-nbd with a write-back cache) and lose it when it restarts:
 * only a successful flush makes what it answered before durable.  The
 * queue answered those writes long ago (and a FLUSH succeeding later
 * promises them), so the backend keeps each write, zero and trim the
 * remote completed, with a copy of its data, until a flush sent after it
 * completed succeeds.  When a lost remote comes back, the log is written
 * again on the new connection, in completion order, before anything
 * else, and flushed.
 *
 * Completion order is enough: the queue never has two overlapping
 * operations in flight, so of two overlapping entries the later one
 * was sent after the earlier one completed.  FUA writes are recorded
 * too (and replayed with FUA): leaving one out would let an older
 * overlapping entry be written over it.
 *
 * The log is bounded: past REPLAY_LOG_LIMIT bytes of data the loop
 * thread sends a flush of the backend's own, one at a time, whose
 * success drops what completed before it was sent.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include <libnbd.h>

#include "backends/backend.h"
#include "backend_nbd.h"
#include "buffers/iovec.h"
#include "common/lock.h"
#include "common/log.h"
#include "common/minmax.h"

/* As much as a queue holds by default (queue-bytes=64M): the log at most
 * doubles what a disk's answered writes cost in memory, and one flush
 * per 64 MiB written costs a remote that writes at speed little.  Past
 * it the log still grows for the round trip of that flush.
 */
#define REPLAY_LOG_LIMIT (UINT64_C (64) * 1024 * 1024)

void
replay_init (struct replay_log *log, bool enabled)
{
  lock_init (&log->lock);
  log->enabled = enabled;
  log->first = NULL;
  log->last_next = &log->first;
  log->next_seq = 1;
  log->bytes = 0;
  atomic_init (&log->gen, 0);
  log->flushing = false;
  atomic_init (&log->flush_wanted, false);
  log->lost = false;
}

void
replay_free_list (struct replay_entry *list)
{
  while (list) {
    struct replay_entry *next = list->next;

    free (list);
    list = next;
  }
}

void
replay_destroy (struct replay_log *log)
{
  replay_free_list (log->first);
  log->first = NULL;
  lock_destroy (&log->lock);
}

struct replay_entry *
replay_entry_new (const struct backend_io *io)
{
  size_t data = io->kind == OP_WRITE ? io->count : 0;
  struct replay_entry *e = malloc (sizeof *e + data);

  if (e == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  e->next = NULL;
  e->seq = 0;
  e->kind = io->kind;
  e->may_trim = io->may_trim;
  e->fua = io->fua;
  e->offset = io->offset;
  e->count = io->count;
  if (data)
    iov_copy_out (e->data, io->iov, io->iovcnt, 0, data);
  return e;
}

static uint64_t
entry_bytes (const struct replay_entry *e)
{
  return e->kind == OP_WRITE ? e->count : 0;
}

/* Whether the log outgrew its limit with no flush of its own out: if
 * so, that flush is claimed, for the loop thread to send.
 */
static bool
claim_flush (struct replay_log *log)
{
  lock_assert_held (&log->lock);
  if (log->bytes <= REPLAY_LOG_LIMIT || log->flushing)
    return false;
  log->flushing = true;
  atomic_store (&log->flush_wanted, true);
  return true;
}

bool
replay_record (struct replay_log *log, struct replay_entry *e, unsigned gen,
               bool *flush)
{
  lock_acquire (&log->lock);
  if (gen != atomic_load (&log->gen)) {
    lock_release (&log->lock);
    return false;
  }
  e->seq = log->next_seq++;
  e->next = NULL;
  *log->last_next = e;
  log->last_next = &e->next;
  log->bytes += entry_bytes (e);
  *flush = claim_flush (log);
  lock_release (&log->lock);
  return true;
}

uint64_t
replay_mark (struct replay_log *log)
{
  uint64_t mark;

  lock_acquire (&log->lock);
  mark = log->next_seq;
  lock_release (&log->lock);
  return mark;
}

void
replay_trim (struct replay_log *log, uint64_t mark)
{
  struct replay_entry *drop = NULL, **tail = &drop;

  lock_acquire (&log->lock);
  while (log->first && log->first->seq < mark) {
    struct replay_entry *e = log->first;

    log->first = e->next;
    log->bytes -= entry_bytes (e);
    *tail = e;
    tail = &e->next;
  }
  *tail = NULL;
  if (log->first == NULL)
    log->last_next = &log->first;
  lock_release (&log->lock);
  replay_free_list (drop);      /* freeing up to 64 MiB: not under the lock */
}

/* ------------------------------------------------------------ own flush */

/* libnbd, with the handle's lock held: no libnbd call here. */
static int
own_flush_done (void *user_data, int *error)
{
  struct nbd_backend *nb = user_data;
  struct replay_log *log = &nb->replay;
  uint64_t mark;

  lock_acquire (&log->lock);
  mark = log->flush_mark;
  log->flushing = false;
  lock_release (&log->lock);
  /* Failed: the next entry past the limit asks again, and a lost
   * connection's replay ends with a flush of its own.
   */
  if (*error == 0)
    replay_trim (log, mark);
  return 1;
}

void
replay_flush_if_wanted (struct nbd_backend *nb)
{
  struct replay_log *log = &nb->replay;
  nbd_completion_callback cb = { .callback = own_flush_done,
                                 .user_data = nb };
  int64_t r;

  if (!atomic_exchange (&log->flush_wanted, false))
    return;
  lock_acquire (&log->lock);
  log->flush_mark = log->next_seq;
  lock_release (&log->lock);
  lock_acquire (&nb->lock);
  r = nb->connected ? nbd_aio_flush (nb->h, cb, 0) : -1;
  if (r == -1 && nb->connected)
    connection_gone (nb, nb->h);
  lock_release (&nb->lock);
  if (r == -1) {
    lock_acquire (&log->lock);
    log->flushing = false;
    lock_release (&log->lock);
  }
}

/* ------------------------------------------------------------ replaying */

struct replay_entry *
replay_take (struct replay_log *log, uint64_t *ops, uint64_t *bytes)
{
  struct replay_entry *list;

  lock_acquire (&log->lock);
  atomic_fetch_add (&log->gen, 1);
  list = log->first;
  *bytes = log->bytes;
  log->first = NULL;
  log->last_next = &log->first;
  log->bytes = 0;
  lock_release (&log->lock);
  *ops = 0;
  for (const struct replay_entry *e = list; e; e = e->next)
    (*ops)++;
  return list;
}

void
replay_put_back (struct replay_log *log, struct replay_entry *list)
{
  struct replay_entry **tail = &list;
  uint64_t bytes = 0;

  if (list == NULL)
    return;
  for (; *tail; tail = &(*tail)->next)
    bytes += entry_bytes (*tail);
  lock_acquire (&log->lock);
  *tail = log->first;
  if (log->first == NULL)
    log->last_next = tail;
  log->first = list;
  log->bytes += bytes;
  lock_release (&log->lock);
}

/* One entry on h, in chunks, with libnbd's blocking calls: 0, or -1
 * with libnbd's error.
 */
static int
replay_entry_on (const struct nbd_backend *nb, struct nbd_handle *h,
                 const struct replay_entry *e)
{
  uint32_t fua = e->fua ? LIBNBD_CMD_FLAG_FUA : 0;
  uint64_t chunk = e->kind == OP_WRITE || !nb->caps.can_zero
    ? nb->caps.max_payload : ZERO_CHUNK;

  for (uint64_t done = 0; done < e->count;) {
    uint64_t n = MIN (e->count - done, chunk), off = e->offset + done;
    int r;

    switch (e->kind) {
    case OP_WRITE:
      r = nbd_pwrite (h, e->data + done, n, off, fua);
      break;
    case OP_ZERO:
      r = nb->caps.can_zero
        ? nbd_zero (h, n, off, fua | (e->may_trim ? 0
                                      : LIBNBD_CMD_FLAG_NO_HOLE))
        : nbd_pwrite (h, nb->zeroes, n, off, fua);
      break;
    default:                    /* OP_TRIM: only recorded if it can */
      r = nbd_trim (h, n, off, fua);
      break;
    }
    if (r == -1)
      return -1;
    done += n;
  }
  return 0;
}

static bool
handle_gone (struct nbd_handle *h)
{
  return nbd_aio_is_dead (h) || nbd_aio_is_closed (h);
}

static int
replay_on (struct nbd_backend *nb, struct nbd_handle *h,
           const struct replay_entry *list, uint64_t *refused,
           uint64_t *refused_bytes)
{
  uint64_t ops = 0, bytes = 0;

  *refused = *refused_bytes = 0;
  if (list == NULL)
    return 0;
  for (const struct replay_entry *e = list; e; e = e->next) {
    ops++;
    bytes += entry_bytes (e);
    if (replay_entry_on (nb, h, e) == 0)
      continue;
    if (handle_gone (h))
      return -1;
    log_error ("%s: replaying a %s of %" PRIu64 " bytes at %" PRIu64
               ": %s", nb->uri, e->kind == OP_WRITE ? "write"
               : e->kind == OP_ZERO ? "zero" : "trim", e->count,
               e->offset, nbd_get_error ());
    (*refused)++;
    *refused_bytes += entry_bytes (e);
  }
  /* What the remote took must be durable before the log drops it. */
  if (nbd_flush (h, 0) == -1) {
    if (handle_gone (h))
      return -1;
    log_error ("%s: flushing the replayed writes: %s", nb->uri,
               nbd_get_error ());
    *refused = ops;
    *refused_bytes = bytes;
  }
  return 0;
}

static void
replay_note_loss (struct replay_log *log)
{
  lock_acquire (&log->lock);
  log->lost = true;
  lock_release (&log->lock);
}

int
replay_log_on (struct nbd_backend *nb, struct nbd_handle *h,
               uint64_t *ops, uint64_t *bytes)
{
  struct replay_entry *list = replay_take (&nb->replay, ops, bytes);
  uint64_t refused, refused_bytes;

  if (replay_on (nb, h, list, &refused, &refused_bytes) == -1) {
    replay_put_back (&nb->replay, list);
    return -1;
  }
  replay_free_list (list);
  if (refused) {
    replay_note_loss (&nb->replay);
    log_error ("%s: the remote refused %" PRIu64 " of the %" PRIu64
               " writes, zeroes and trims answered before the loss (%"
               PRIu64 " bytes of data): they are lost, and the next flush"
               " fails", nb->uri, refused, *ops, refused_bytes);
  }
  return 0;
}

bool
replay_take_loss (struct replay_log *log)
{
  bool lost;

  lock_acquire (&log->lock);
  lost = log->lost;
  log->lost = false;
  lock_release (&log->lock);
  return lost;
}
