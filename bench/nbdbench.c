/* nbdbench: a small libnbd aio load generator for plugq's benchmarks.
 *
 * Why not fio alone: fio's fsync=N is only exact at iodepth=1 (at QD16 it
 * sends about one flush per two writes), and plugq's group commit has to be
 * measured with an exact cadence at depth.  This tool keeps QD requests in
 * flight per connection and issues a FLUSH after exactly every N writes
 * (pipelined, or as a barrier), or every T microseconds, or FUA on every
 * write.  It can drive several connections to one export (multi-conn) and
 * several exports at once (one event loop, so 64 writers cost one process).
 *
 * Output: one line of key=value pairs on stdout; errors on stderr.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <libnbd.h>

#define MAX_TARGETS 256
/* Log-linear latency histogram: 2^SUB_BITS buckets per power of two keeps
 * every percentile within 1/64 (1.6 %) of the true value in 30 KB. */
#define SUB_BITS 6
#define SUB_COUNT (1u << SUB_BITS)
#define HIST_BUCKETS ((64 - SUB_BITS + 1) * SUB_COUNT)

enum mode { MODE_WRITE, MODE_READ, MODE_RANDWRITE, MODE_RANDREAD, MODE_RANDRW };
enum op { OP_READ, OP_WRITE, OP_FLUSH };
enum barrier { BARRIER_NONE, BARRIER_DRAINING, BARRIER_FLUSHING };

struct options {
  const char *uris[MAX_TARGETS];
  unsigned nuris;
  enum mode mode;
  const char *mode_name;
  uint64_t bs;
  unsigned qd;              /* in flight per connection, flushes included */
  double secs;
  uint64_t nreq;            /* with nreq_set: stop after nreq data requests */
  bool nreq_set;            /* -n given; -n 0 connects and disconnects only */
  uint64_t flush_every;     /* FLUSH after every N writes (all connections) */
  uint64_t flush_interval_us; /* FLUSH every T us on the first connection */
  bool barrier;
  bool fua;
  unsigned read_pct;
  unsigned conns;           /* connections per URI */
  uint64_t span;            /* 0: whole export */
  uint64_t seed;
};

struct hist {
  uint64_t counts[HIST_BUCKETS];
  uint64_t n, max;
};

struct target {
  const char *uri;
  uint64_t span;            /* usable bytes, a multiple of bs */
  uint64_t seq_off;         /* shared by this target's connections */
};

struct bench;
struct conn;

struct slot {
  struct bench *b;
  struct conn *c;
  enum op op;
  uint64_t t0;
  unsigned idx;
  char *buf;
};

struct conn {
  struct nbd_handle *h;
  struct target *t;
  struct slot *slots;
  unsigned *free_idx;       /* stack of free slot indexes */
  unsigned nfree;
  bool flush_due;
};

struct bench {
  struct options o;
  struct target targets[MAX_TARGETS];
  struct conn *conns;
  unsigned nconns;
  uint64_t rng;
  uint64_t start_ns, end_ns, last_done_ns, next_flush_ns;
  bool stopping;
  enum barrier barrier;
  uint64_t data_issued, writes_issued, inflight;
  uint64_t reads_done, writes_done, flushes_done, bytes_done, errors;
  int first_errno;
  struct hist data_lat, flush_lat;
};

static uint64_t
now_ns (void)
{
  struct timespec ts;
  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

/* xorshift64*: fast, and a fixed seed gives the same offsets every run. */
static uint64_t
rng_next (uint64_t *s)
{
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ULL;
}

static unsigned
hist_index (uint64_t v)
{
  if (v < SUB_COUNT)
    return (unsigned) v;
  unsigned e = 63 - (unsigned) __builtin_clzll (v);
  unsigned shift = e - SUB_BITS;
  return (shift + 1) * SUB_COUNT + (unsigned) ((v >> shift) & (SUB_COUNT - 1));
}

/* The lower bound of a bucket, the inverse of hist_index. */
static uint64_t
hist_value (unsigned idx)
{
  if (idx < SUB_COUNT)
    return idx;
  unsigned shift = idx / SUB_COUNT - 1;
  return ((uint64_t) SUB_COUNT + idx % SUB_COUNT) << shift;
}

static void
hist_add (struct hist *h, uint64_t v)
{
  h->counts[hist_index (v)]++;
  h->n++;
  if (v > h->max)
    h->max = v;
}

static double
hist_pct_us (const struct hist *h, double pct)
{
  if (h->n == 0)
    return 0;
  uint64_t rank = (uint64_t) (pct / 100.0 * (double) h->n + 0.999999);
  uint64_t seen = 0;
  if (rank == 0)
    rank = 1;
  for (unsigned i = 0; i < HIST_BUCKETS; i++) {
    seen += h->counts[i];
    if (seen >= rank)
      return (double) hist_value (i) / 1000.0;
  }
  return (double) h->max / 1000.0;
}

static void
usage (FILE *fp)
{
  fprintf (fp,
"usage: nbdbench -u URI [-u URI2 ...] [-m write|read|randwrite|randread|randrw]\n"
"                [-b BS] [-q QD] [-t SECS] [-n REQS] [-f N] [-I USECS] [-B] [-F]\n"
"                [-r READPCT] [-c CONNS] [-S SPAN] [-s SEED]\n"
"  -q QD     requests in flight per connection (flushes count) [16]\n"
"  -t SECS   stop issuing after SECS [10 unless -n]; -n REQS after REQS data requests\n"
"            (-n 0: connect and disconnect only, the baseline of a cost run)\n"
"  -f N      FLUSH after exactly every N writes (counted over all connections)\n"
"  -I USECS  FLUSH every USECS microseconds on the first connection\n"
"  -B        flushes are barriers: drain all writes, flush, then continue\n"
"  -F        FUA on every write\n"
"  -r PCT    read percentage for randrw [50]\n"
"  -c N      connections per URI (multi-conn) [1]\n"
"  -S SPAN   use only the first SPAN bytes of each export\n"
"prints: mode iops MiBps reads writes flushes errors lat_us_p50 lat_us_p99\n"
"        lat_us_p999 lat_us_max flush_us_p50 flush_us_p99 cpu_s ...\n");
}

static uint64_t
parse_size (const char *s)
{
  char *end;
  errno = 0;
  unsigned long long v = strtoull (s, &end, 10);
  if (errno || end == s) {
    fprintf (stderr, "nbdbench: bad size: %s\n", s);
    exit (2);
  }
  switch (*end) {
  case 'k': case 'K': v <<= 10; end++; break;
  case 'm': case 'M': v <<= 20; end++; break;
  case 'g': case 'G': v <<= 30; end++; break;
  default: break;
  }
  if (*end != '\0') {
    fprintf (stderr, "nbdbench: bad size: %s\n", s);
    exit (2);
  }
  return v;
}

static bool
parse_mode (struct options *o, const char *s)
{
  static const struct { const char *name; enum mode m; } modes[] = {
    { "write", MODE_WRITE }, { "read", MODE_READ },
    { "randwrite", MODE_RANDWRITE }, { "randread", MODE_RANDREAD },
    { "randrw", MODE_RANDRW },
  };
  for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
    if (strcmp (s, modes[i].name) == 0) {
      o->mode = modes[i].m;
      o->mode_name = modes[i].name;
      return true;
    }
  return false;
}

static void
parse_options (struct options *o, int argc, char **argv)
{
  int ch;

  *o = (struct options) {
    .mode = MODE_RANDWRITE, .mode_name = "randwrite", .bs = 4096, .qd = 16,
    .read_pct = 50, .conns = 1, .seed = 0x9e3779b97f4a7c15ULL,
  };
  while ((ch = getopt (argc, argv, "u:m:b:q:t:n:f:I:BFr:c:S:s:h")) != -1) {
    switch (ch) {
    case 'u':
      if (o->nuris == MAX_TARGETS) {
        fprintf (stderr, "nbdbench: at most %d URIs\n", MAX_TARGETS);
        exit (2);
      }
      o->uris[o->nuris++] = optarg;
      break;
    case 'm':
      if (!parse_mode (o, optarg)) {
        fprintf (stderr, "nbdbench: unknown mode: %s\n", optarg);
        exit (2);
      }
      break;
    case 'b': o->bs = parse_size (optarg); break;
    case 'q': o->qd = (unsigned) parse_size (optarg); break;
    case 't': o->secs = atof (optarg); break;
    case 'n': o->nreq = parse_size (optarg); o->nreq_set = true; break;
    case 'f': o->flush_every = parse_size (optarg); break;
    case 'I': o->flush_interval_us = parse_size (optarg); break;
    case 'B': o->barrier = true; break;
    case 'F': o->fua = true; break;
    case 'r': o->read_pct = (unsigned) parse_size (optarg); break;
    case 'c': o->conns = (unsigned) parse_size (optarg); break;
    case 'S': o->span = parse_size (optarg); break;
    case 's': o->seed = parse_size (optarg) | 1; break;
    case 'h': usage (stdout); exit (0);
    default: usage (stderr); exit (2);
    }
  }
  if (o->nuris == 0 || optind != argc || o->bs == 0 || o->qd == 0 ||
      o->conns == 0 || o->read_pct > 100) {
    usage (stderr);
    exit (2);
  }
  if (o->secs <= 0 && !o->nreq_set)
    o->secs = 10;
  if (o->mode == MODE_RANDREAD || o->mode == MODE_READ)
    o->read_pct = 100;
  else if (o->mode != MODE_RANDRW)
    o->read_pct = 0;
}

/* --- issuing requests ------------------------------------------------ */

static void complete_op (struct slot *s, int err);

static int
completion_cb (void *user_data, int *error)
{
  struct slot *s = user_data;
  complete_op (s, *error);
  return 1;                     /* retire the command: we keep no cookie */
}

static struct slot *
take_slot (struct conn *c, enum op op)
{
  struct slot *s = &c->slots[c->free_idx[--c->nfree]];
  s->op = op;
  s->t0 = now_ns ();
  return s;
}

static void
release_slot (struct slot *s)
{
  s->c->free_idx[s->c->nfree++] = s->idx;
}

static void
fail_submit (struct bench *b, struct slot *s, const char *what)
{
  fprintf (stderr, "nbdbench: %s: %s\n", what, nbd_get_error ());
  release_slot (s);
  b->inflight--;
  b->errors++;
  b->stopping = true;           /* a broken connection ends the run */
}

static void
submit_flush (struct bench *b, struct conn *c)
{
  struct slot *s = take_slot (c, OP_FLUSH);
  nbd_completion_callback cb = { .callback = completion_cb, .user_data = s };
  b->inflight++;
  c->flush_due = false;
  if (nbd_aio_flush (c->h, cb, 0) == -1)
    fail_submit (b, s, "flush");
}

static uint64_t
next_offset (struct bench *b, struct target *t)
{
  if (b->o.mode == MODE_WRITE || b->o.mode == MODE_READ) {
    uint64_t off = t->seq_off;
    t->seq_off = (off + b->o.bs) % t->span;
    return off;
  }
  return rng_next (&b->rng) % (t->span / b->o.bs) * b->o.bs;
}

static bool
next_is_read (struct bench *b)
{
  if (b->o.read_pct == 0 || b->o.read_pct == 100)
    return b->o.read_pct == 100;
  return rng_next (&b->rng) % 100 < b->o.read_pct;
}

/* A write that completes a flush period schedules the flush: pipelined on
 * the same connection, or as a barrier that first drains every write. */
static void
count_write (struct bench *b, struct conn *c)
{
  b->writes_issued++;
  if (b->o.flush_every == 0 || b->writes_issued % b->o.flush_every != 0)
    return;
  if (b->o.barrier)
    b->barrier = BARRIER_DRAINING;
  else
    c->flush_due = true;
}

static void
submit_data (struct bench *b, struct conn *c)
{
  bool rd = next_is_read (b);
  struct slot *s = take_slot (c, rd ? OP_READ : OP_WRITE);
  uint64_t off = next_offset (b, c->t);
  nbd_completion_callback cb = { .callback = completion_cb, .user_data = s };
  int64_t r;

  b->inflight++;
  b->data_issued++;
  if (rd)
    r = nbd_aio_pread (c->h, s->buf, b->o.bs, off, cb, 0);
  else {
    r = nbd_aio_pwrite (c->h, s->buf, b->o.bs, off, cb,
                        b->o.fua ? LIBNBD_CMD_FLAG_FUA : 0);
    count_write (b, c);
  }
  if (r == -1)
    fail_submit (b, s, rd ? "pread" : "pwrite");
}

static bool
want_data (const struct bench *b)
{
  return !b->stopping && b->barrier == BARRIER_NONE;
}

/* Fill every connection up to its queue depth. */
static void
submit_all (struct bench *b)
{
  /* A flush owed by the write count is sent even after the end of the run:
   * the cadence stays exact, and -n N -f N -B ends with one full flush. */
  if (b->barrier == BARRIER_DRAINING && b->inflight == 0) {
    b->barrier = BARRIER_FLUSHING;
    submit_flush (b, &b->conns[0]);
  }
  for (unsigned i = 0; i < b->nconns; i++) {
    struct conn *c = &b->conns[i];
    while (c->nfree > 0) {
      if (c->flush_due)
        submit_flush (b, c);
      else if (want_data (b) &&
               (!b->o.nreq_set || b->data_issued < b->o.nreq))
        submit_data (b, c);
      else
        break;
    }
  }
}

static void
complete_op (struct slot *s, int err)
{
  struct bench *b = s->b;
  uint64_t t = now_ns ();
  uint64_t lat = t - s->t0;

  b->inflight--;
  b->last_done_ns = t;
  if (err != 0) {
    if (b->errors++ == 0)
      b->first_errno = err;
  }
  switch (s->op) {
  case OP_FLUSH:
    b->flushes_done++;
    hist_add (&b->flush_lat, lat);
    if (b->barrier == BARRIER_FLUSHING)
      b->barrier = BARRIER_NONE;
    break;
  case OP_READ:
  case OP_WRITE:
    if (s->op == OP_READ)
      b->reads_done++;
    else
      b->writes_done++;
    b->bytes_done += b->o.bs;
    hist_add (&b->data_lat, lat);
    break;
  }
  release_slot (s);
}

/* --- the event loop -------------------------------------------------- */

/* Time-based flushes (-I) and the end of the run both need a wake-up. */
static void
tick (struct bench *b, uint64_t t)
{
  if (b->o.secs > 0 && t >= b->end_ns)
    b->stopping = true;
  if (b->o.nreq_set && b->data_issued >= b->o.nreq)
    b->stopping = true;
  if (b->o.flush_interval_us == 0 || b->stopping || t < b->next_flush_ns)
    return;
  b->next_flush_ns += b->o.flush_interval_us * 1000;
  if (b->next_flush_ns < t)     /* fell behind: keep the period, skip the backlog */
    b->next_flush_ns = t + b->o.flush_interval_us * 1000;
  if (b->o.barrier) {
    if (b->barrier == BARRIER_NONE)
      b->barrier = BARRIER_DRAINING;
  }
  else
    b->conns[0].flush_due = true;
}

static uint64_t
wait_timeout_ns (const struct bench *b, uint64_t t)
{
  uint64_t until = UINT64_MAX;
  if (b->o.secs > 0 && !b->stopping)
    until = b->end_ns;
  if (b->o.flush_interval_us && !b->stopping && b->next_flush_ns < until)
    until = b->next_flush_ns;
  if (until == UINT64_MAX)
    return 1000000000;          /* only completions to wait for */
  return until > t ? until - t : 0;
}

static int
wait_events (struct bench *b, struct pollfd *fds)
{
  uint64_t t = now_ns ();
  uint64_t to = wait_timeout_ns (b, t);
  struct timespec ts = { .tv_sec = (time_t) (to / 1000000000u),
                         .tv_nsec = (long) (to % 1000000000u) };

  for (unsigned i = 0; i < b->nconns; i++) {
    unsigned dir = nbd_aio_get_direction (b->conns[i].h);
    fds[i].fd = nbd_aio_get_fd (b->conns[i].h);
    fds[i].events = (short) (((dir & LIBNBD_AIO_DIRECTION_READ) ? POLLIN : 0) |
                             ((dir & LIBNBD_AIO_DIRECTION_WRITE) ? POLLOUT : 0));
    fds[i].revents = 0;
  }
  if (ppoll (fds, b->nconns, &ts, NULL) == -1) {
    if (errno == EINTR)
      return 0;
    perror ("nbdbench: ppoll");
    return -1;
  }
  for (unsigned i = 0; i < b->nconns; i++) {
    struct nbd_handle *h = b->conns[i].h;
    int r = 0;
    if (fds[i].revents & (POLLIN | POLLHUP | POLLERR))
      r = nbd_aio_notify_read (h);
    else if (fds[i].revents & POLLOUT)
      r = nbd_aio_notify_write (h);
    if (r == -1) {
      fprintf (stderr, "nbdbench: connection %u: %s\n", i, nbd_get_error ());
      return -1;
    }
  }
  return 0;
}

static int
run (struct bench *b)
{
  struct pollfd *fds = calloc (b->nconns, sizeof *fds);
  int r = 0;

  if (fds == NULL)
    return -1;
  b->start_ns = b->last_done_ns = now_ns ();
  b->end_ns = b->start_ns + (uint64_t) (b->o.secs * 1e9);
  b->next_flush_ns = b->start_ns + b->o.flush_interval_us * 1000;
  for (;;) {
    tick (b, now_ns ());
    submit_all (b);
    if (b->stopping && b->inflight == 0)
      break;
    if (wait_events (b, fds) == -1) {
      r = -1;
      break;
    }
  }
  free (fds);
  return r;
}

/* --- setup ----------------------------------------------------------- */

static struct nbd_handle *
connect_one (const struct bench *b, const char *uri)
{
  struct nbd_handle *h = nbd_create ();
  if (h == NULL || nbd_connect_uri (h, uri) == -1) {
    fprintf (stderr, "nbdbench: %s: %s\n", uri, nbd_get_error ());
    exit (1);
  }
  if ((b->o.fua && nbd_can_fua (h) != 1) ||
      ((b->o.flush_every || b->o.flush_interval_us) && nbd_can_flush (h) != 1)) {
    fprintf (stderr, "nbdbench: %s: server cannot %s\n", uri,
             b->o.fua ? "FUA" : "FLUSH");
    exit (1);
  }
  return h;
}

static void
init_target (struct bench *b, struct target *t, struct nbd_handle *h)
{
  int64_t size = nbd_get_size (h);
  uint64_t span = (uint64_t) (size < 0 ? 0 : size);

  if (b->o.span && b->o.span < span)
    span = b->o.span;
  t->span = span / b->o.bs * b->o.bs;
  if (t->span == 0) {
    fprintf (stderr, "nbdbench: %s: export smaller than one block\n", t->uri);
    exit (1);
  }
}

static void
init_slots (struct bench *b, struct conn *c)
{
  c->slots = calloc (b->o.qd, sizeof *c->slots);
  c->free_idx = calloc (b->o.qd, sizeof *c->free_idx);
  if (c->slots == NULL || c->free_idx == NULL) {
    perror ("nbdbench: calloc");
    exit (1);
  }
  for (unsigned i = 0; i < b->o.qd; i++) {
    struct slot *s = &c->slots[i];
    *s = (struct slot) { .b = b, .c = c, .idx = i };
    if (posix_memalign ((void **) &s->buf, 4096, b->o.bs) != 0) {
      perror ("nbdbench: posix_memalign");
      exit (1);
    }
    /* Not zeroes: no server or filesystem may turn the data into holes. */
    memset (s->buf, 0x5a ^ (int) (i & 0xff), b->o.bs);
    c->free_idx[i] = b->o.qd - 1 - i;
  }
  c->nfree = b->o.qd;
}

static void
setup (struct bench *b)
{
  b->nconns = b->o.nuris * b->o.conns;
  b->conns = calloc (b->nconns, sizeof *b->conns);
  if (b->conns == NULL) {
    perror ("nbdbench: calloc");
    exit (1);
  }
  b->rng = b->o.seed;
  for (unsigned u = 0; u < b->o.nuris; u++) {
    struct target *t = &b->targets[u];
    t->uri = b->o.uris[u];
    for (unsigned k = 0; k < b->o.conns; k++) {
      struct conn *c = &b->conns[u * b->o.conns + k];
      c->h = connect_one (b, t->uri);
      c->t = t;
      if (k == 0)
        init_target (b, t, c->h);
      if (k == 1 && nbd_can_multi_conn (c->h) != 1)
        fprintf (stderr, "nbdbench: warning: %s does not advertise multi-conn\n",
                 t->uri);
      init_slots (b, c);
    }
  }
}

static void
teardown (struct bench *b)
{
  for (unsigned i = 0; i < b->nconns; i++) {
    struct conn *c = &b->conns[i];
    nbd_shutdown (c->h, 0);
    nbd_close (c->h);
    for (unsigned k = 0; k < b->o.qd; k++)
      free (c->slots[k].buf);
    free (c->slots);
    free (c->free_idx);
  }
  free (b->conns);
}

static double
cpu_seconds (void)
{
  struct rusage ru;
  getrusage (RUSAGE_SELF, &ru);
  return (double) ru.ru_utime.tv_sec + (double) ru.ru_utime.tv_usec / 1e6 +
         (double) ru.ru_stime.tv_sec + (double) ru.ru_stime.tv_usec / 1e6;
}

static void
report (const struct bench *b, double cpu)
{
  double secs = (double) (b->last_done_ns - b->start_ns) / 1e9;
  uint64_t ops = b->reads_done + b->writes_done;

  if (secs <= 0)
    secs = 1e-9;
  printf ("mode=%s bs=%" PRIu64 " qd=%u conns=%u targets=%u secs=%.3f"
          " iops=%.0f MiBps=%.2f reads=%" PRIu64 " writes=%" PRIu64
          " flushes=%" PRIu64 " errors=%" PRIu64
          " lat_us_p50=%.1f lat_us_p99=%.1f lat_us_p999=%.1f lat_us_max=%.1f"
          " flush_us_p50=%.1f flush_us_p99=%.1f cpu_s=%.3f\n",
          b->o.mode_name, b->o.bs, b->o.qd, b->o.conns, b->o.nuris, secs,
          (double) ops / secs, (double) b->bytes_done / secs / 1048576.0,
          b->reads_done, b->writes_done, b->flushes_done, b->errors,
          hist_pct_us (&b->data_lat, 50), hist_pct_us (&b->data_lat, 99),
          hist_pct_us (&b->data_lat, 99.9), (double) b->data_lat.max / 1000.0,
          hist_pct_us (&b->flush_lat, 50), hist_pct_us (&b->flush_lat, 99),
          cpu);
  if (b->errors)
    fprintf (stderr, "nbdbench: %" PRIu64 " requests failed, first: %s\n",
             b->errors, strerror (b->first_errno));
}

int
main (int argc, char **argv)
{
  static struct bench b;        /* static: the histograms are 60 KB */
  int r;

  parse_options (&b.o, argc, argv);
  setup (&b);
  r = run (&b);
  report (&b, cpu_seconds ());
  teardown (&b);
  return r == 0 && b.errors == 0 ? 0 : 1;
}
