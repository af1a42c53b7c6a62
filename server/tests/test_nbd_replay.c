/* plugq: unit tests for the nbd backend's replay log
 * (server/backends/nbd/backend_nbd_replay.c), without a remote: which
 * entries a flush drops, a connection given up refusing late entries,
 * a failed replay putting its entries back first, and the log asking
 * for a flush of its own past its limit.  The client tests (nbd.bats)
 * show the replay itself against a restarted remote; the races these
 * cover (an entry recorded while a flush is out, an op completing after
 * its connection was given up) cannot be timed from a client.
 */
#include <config.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "backends/nbd/backend_nbd.h"
#include "tap.h"

#define KiB 1024
#define MiB (1024 * 1024)

/* A write entry of count bytes of byte c, from a vector of two pieces. */
static struct replay_entry *
write_entry (uint64_t offset, size_t count, int c)
{
  char *buf = malloc (count);
  struct iovec iov[2] = {
    { .iov_base = buf, .iov_len = count / 2 },
    { .iov_base = buf + count / 2, .iov_len = count - count / 2 },
  };
  struct backend_io io = {
    .kind = OP_WRITE, .iov = iov, .iovcnt = 2, .offset = offset,
    .count = count,
  };
  struct replay_entry *e;

  memset (buf, c, count);
  e = replay_entry_new (&io);
  free (buf);
  return e;
}

static struct replay_entry *
zero_entry (uint64_t offset, uint64_t count)
{
  struct backend_io io = {
    .kind = OP_ZERO, .may_trim = true, .fua = true, .offset = offset,
    .count = count,
  };

  return replay_entry_new (&io);
}

static bool
record (struct replay_log *log, struct replay_entry *e, unsigned gen)
{
  bool flush;

  return replay_record (log, e, gen, &flush);
}

/* The offsets of the log's entries, in order, as "a,b,c". */
static const char *
offsets (const struct replay_entry *e)
{
  static char s[256];
  size_t n = 0;

  s[0] = '\0';
  for (; e && n < sizeof s - 24; e = e->next)
    n += snprintf (s + n, sizeof s - n, "%s%llu", n ? "," : "",
                   (unsigned long long) (e->offset / KiB));
  return s;
}

static void
test_entry_copies_io (void)
{
  struct replay_entry *w = write_entry (8 * KiB, 12 * KiB, 0x5a);
  struct replay_entry *z = zero_entry (64 * KiB, MiB);

  tap_ok (w && w->kind == OP_WRITE && w->offset == 8 * KiB
          && w->count == 12 * KiB && bytes_all (w->data, 0x5a, 12 * KiB)
          && z && z->kind == OP_ZERO && z->may_trim && z->fua
          && z->count == MiB,
          "an entry holds the op and a copy of every piece of its data");
  free (w);
  free (z);
}

static void
test_flush_drops_only_what_completed_before_it (void)
{
  struct replay_log log;
  uint64_t mark;
  bool ok = true;

  replay_init (&log, true);
  ok &= CHECK (record (&log, write_entry (0, 4 * KiB, 1), 0));
  ok &= CHECK (record (&log, zero_entry (4 * KiB, 4 * KiB), 0));
  mark = replay_mark (&log);          /* a flush is sent */
  ok &= CHECK (record (&log, write_entry (8 * KiB, 4 * KiB, 2), 0));
  replay_trim (&log, mark);           /* ... and succeeds */
  ok &= CHECK (strcmp (offsets (log.first), "8") == 0);
  ok &= CHECK (log.bytes == 4 * KiB);
  replay_trim (&log, replay_mark (&log));
  ok &= CHECK (log.first == NULL && log.bytes == 0);
  /* Emptied, it appends again at its head. */
  ok &= CHECK (record (&log, write_entry (12 * KiB, 4 * KiB, 3), 0));
  ok &= CHECK (strcmp (offsets (log.first), "12") == 0);
  replay_destroy (&log);
  tap_ok (ok, "a flush drops what completed before it was sent, and "
          "keeps what completed while it was out");
}

static void
test_take_gives_the_connection_up (void)
{
  struct replay_log log;
  struct replay_entry *list, *late;
  uint64_t ops, bytes;
  bool ok = true;

  replay_init (&log, true);
  record (&log, write_entry (0, 4 * KiB, 1), 0);
  record (&log, zero_entry (4 * KiB, 4 * KiB), 0);
  record (&log, write_entry (8 * KiB, 8 * KiB, 2), 0);
  list = replay_take (&log, &ops, &bytes);
  ok &= CHECK (strcmp (offsets (list), "0,4,8") == 0);
  ok &= CHECK (ops == 3 && bytes == 12 * KiB);
  ok &= CHECK (log.first == NULL && log.bytes == 0);
  /* An op of the old connection that finishes only now is refused: the
   * replay did not have it, so its op must be sent again.
   */
  late = write_entry (32 * KiB, 4 * KiB, 9);
  ok &= CHECK (!record (&log, late, 0));
  free (late);
  /* The new connection's ops are recorded after the taken ones. */
  ok &= CHECK (record (&log, write_entry (16 * KiB, 4 * KiB, 3), 1));
  replay_put_back (&log, list);       /* its replay failed */
  ok &= CHECK (strcmp (offsets (log.first), "0,4,8,16") == 0);
  ok &= CHECK (log.bytes == 16 * KiB);
  ok &= CHECK (record (&log, write_entry (20 * KiB, 4 * KiB, 4), 1));
  ok &= CHECK (strcmp (offsets (log.first), "0,4,8,16,20") == 0);
  replay_destroy (&log);
  tap_ok (ok, "taking the log gives its connection up; a failed replay "
          "puts the entries back first");
}

static void
test_limit_asks_for_one_flush (void)
{
  struct replay_log log;
  unsigned asked = 0, first = 0;
  bool ok = true;

  replay_init (&log, true);
  for (unsigned i = 0; i < 70; i++) {
    bool flush = false;

    ok &= CHECK (replay_record (&log, write_entry (i * MiB, MiB, i), 0,
                                &flush));
    if (flush && asked++ == 0)
      first = i;
  }
  /* 64 MiB is the limit: the 65th MiB outgrows it. */
  ok &= CHECK (asked == 1 && first == 64);
  ok &= CHECK (atomic_load (&log.flush_wanted));
  replay_destroy (&log);
  tap_ok (ok, "past 64 MiB the log asks once for a flush of its own "
          "(asked %u times, first at %u MiB)", asked, first + 1);
}

int
main (void)
{
  tap_plan (4);
  test_entry_copies_io ();
  test_flush_drops_only_what_completed_before_it ();
  test_take_gives_the_connection_up ();
  test_limit_asks_for_one_flush ();
  return tap_done ();
}
