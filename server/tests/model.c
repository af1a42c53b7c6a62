/* plugq tests: the disk model, the op generator and the harness.
 *
 * See model.h for what is checked.  Everything here is deterministic
 * given its byte source except the queue's own timing (timer and
 * dispatch thread), which is exactly what the checks must not depend on:
 * every check holds whatever the queue decided to dispatch meanwhile.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/backend.h"
#include "elevator/elevator.h"
#include "common/extents.h"
#include "fixtures.h"
#include "common/minmax.h"
#include "model.h"
#include "queue/queue.h"
#include "queue/queue_internal.h"
#include "queue/session.h"
#include "stats/stats.h"
#include "test_backends.h"
#include "queue/timer_service.h"

#define KiB (UINT64_C (1024))
#define MiB (KiB * 1024)
#define US (UINT64_C (1000))
#define MS (US * 1000)
#define SEC (MS * 1000)

/* Reads and writes stay this small so a run keeps many requests queued;
 * zero, trim and extents may span the whole region.
 */
#define MAX_IO (256 * KiB)

/* A full landed check every this many ops catches durable data that a
 * late write-out changed, even between flushes.
 */
#define LANDED_CHECK_EVERY 16

_Atomic uint64_t harness_progress;

static uint64_t
mix64 (uint64_t x)
{
  x ^= x >> 30;
  x *= UINT64_C (0xbf58476d1ce4e5b9);
  x ^= x >> 27;
  x *= UINT64_C (0x94d049bb133111eb);
  x ^= x >> 31;
  return x;
}

/* ------------------------------------------------------------ ops */

static const char *const op_names[MOP_KINDS] = {
  [MOP_READ] = "read", [MOP_WRITE] = "write", [MOP_ZERO] = "zero",
  [MOP_TRIM] = "trim", [MOP_FLUSH] = "flush", [MOP_EXTENTS] = "extents",
  [MOP_CACHE] = "cache", [MOP_SLEEP] = "sleep", [MOP_FUA_CUT] = "fua-cut",
};

/* Tags of a MOP_FUA_CUT's older write and cutting request: lanes number
 * their tags from lane << 24, so these bits are free.
 */
#define FUA_CUT_OLDER_TAG (UINT32_C (1) << 31)
#define FUA_CUT_NEWER_TAG (UINT32_C (1) << 30)

size_t
model_op_parts (const struct model_op *op, struct model_op *parts)
{
  if (op->kind != MOP_FUA_CUT) {
    parts[0] = *op;
    return 1;
  }
  /* The write in flight that holds the FUA write back, the FUA write,
   * and the newer request that cuts it.
   */
  parts[0] = (struct model_op) {
    .kind = MOP_WRITE, .flags = REQ_FUA, .offset = op->offset,
    .count = op->count, .tag = op->tag ^ FUA_CUT_OLDER_TAG,
  };
  parts[1] = (struct model_op) {
    .kind = MOP_WRITE, .flags = REQ_FUA, .offset = op->offset,
    .count = op->count, .tag = op->tag,
  };
  parts[2] = (struct model_op) {
    .kind = op->cut_kind, .offset = op->cut_offset,
    .count = op->cut_count, .tag = op->tag ^ FUA_CUT_NEWER_TAG,
  };
  return 3;
}

void
model_op_format (const struct model_op *op, char *buf, size_t len)
{
  switch (op->kind) {
  case MOP_FLUSH:
    snprintf (buf, len, "#%" PRIu32 " flush", op->tag);
    return;
  case MOP_SLEEP:
    snprintf (buf, len, "#%" PRIu32 " sleep %" PRIu64 "us", op->tag,
              op->count);
    return;
  case MOP_FUA_CUT:
    snprintf (buf, len, "#%" PRIu32 " fua-cut 0x%" PRIx64 "+%" PRIu64
              " by %s 0x%" PRIx64 "+%" PRIu64, op->tag, op->offset,
              op->count, op->cut_kind == MOP_ZERO ? "zero" : "write",
              op->cut_offset, op->cut_count);
    return;
  default:
    snprintf (buf, len, "#%" PRIu32 " %s 0x%" PRIx64 "+%" PRIu64
              " (to 0x%" PRIx64 ")%s%s%s",
              op->tag, op_names[op->kind], op->offset, op->count,
              op->offset + op->count,
              op->flags & REQ_FUA ? " fua" : "",
              op->flags & REQ_MAY_TRIM ? " may_trim" : "",
              op->flags & REQ_FAST_ZERO ? " fast_zero" : "");
  }
}

/* The pattern of the aligned 8 bytes holding pos, as it sits in memory.
 * A zero byte becomes 0x5a: written data never reads as zero.
 */
static uint64_t
pattern_word (uint32_t tag, uint64_t pos)
{
  uint64_t word = mix64 (((uint64_t) tag << 32) ^ (pos >> 3));
  uint64_t out = 0;

  for (unsigned b = 0; b < 64; b += 8) {
    uint64_t x = (word >> b) & 0xff;

    out |= (x ? x : 0x5a) << b;
  }
  return out;
}

static void
pattern_fill (uint8_t *buf, uint32_t tag, uint64_t offset, uint64_t count)
{
  uint64_t i = 0;

  while (i < count) {
    uint64_t pos = offset + i;
    unsigned first = pos & 7;
    uint64_t n = MIN (8 - first, count - i);
    uint64_t w = pattern_word (tag, pos);

    memcpy (&buf[i], (const uint8_t *) &w + first, n);
    i += n;
  }
}

uint8_t
model_pattern (uint32_t tag, uint64_t pos)
{
  uint8_t b;

  pattern_fill (&b, tag, pos, 1);
  return b;
}

/* ------------------------------------------------------------ model */

int
model_init (struct model *m, uint64_t base, uint64_t size)
{
  m->base = base;
  m->size = size;
  m->data = calloc (size, 1);
  m->landed = calloc (size, 1);
  m->state = malloc (size);
  if (!m->data || !m->landed || !m->state) {
    model_free (m);
    return -1;
  }
  /* A new memory disk reads as zeroes, for good. */
  memset (m->state, MODEL_LANDED | MODEL_DURABLE, size);
  return 0;
}

void
model_free (struct model *m)
{
  free (m->data);
  free (m->landed);
  free (m->state);
  m->data = m->landed = m->state = NULL;
}

void
model_write (struct model *m, uint64_t offset, uint64_t count,
             const uint8_t *data)
{
  uint64_t j = offset - m->base;

  memcpy (&m->data[j], data, count);
  memset (&m->state[j], 0, count);
}

void
model_zero (struct model *m, uint64_t offset, uint64_t count)
{
  uint64_t j = offset - m->base;

  memset (&m->data[j], 0, count);
  memset (&m->state[j], 0, count);
}

/* A trimmed byte keeps data 0, so "reads as zero or don't care" is
 * simply data == 0 (model_first_nonzero).
 */
void
model_trim (struct model *m, uint64_t offset, uint64_t count)
{
  uint64_t j = offset - m->base;

  memset (&m->data[j], 0, count);
  memset (&m->state[j], MODEL_DONTCARE, count);
}

void
model_unspecified (struct model *m, uint64_t offset, uint64_t count)
{
  model_trim (m, offset, count);
}

#define BYTES_OF(b) (UINT64_C (0x0101010101010101) * (b))

void
model_landed (struct model *m, uint64_t offset, uint64_t count,
              bool durable)
{
  uint64_t j = offset - m->base;
  uint8_t *state = &m->state[j];
  uint64_t set = durable ? MODEL_LANDED | MODEL_DURABLE : MODEL_LANDED;
  uint64_t i = 0;

  /* landed[] only matters where LANDED is set: copy it all. */
  memcpy (&m->landed[j], &m->data[j], count);
  /* A trimmed byte may be anything on the backend too: DONTCARE stays
   * alone, every other byte gets `set`.  Eight at a time.
   */
  for (; i + 8 <= count; i += 8) {
    uint64_t w, dc;

    memcpy (&w, &state[i], 8);
    dc = w & BYTES_OF (MODEL_DONTCARE);
    w = dc | (dc ^ BYTES_OF (MODEL_DONTCARE)) * set;
    memcpy (&state[i], &w, 8);
  }
  for (; i < count; i++)
    state[i] = state[i] & MODEL_DONTCARE ? MODEL_DONTCARE : set;
}

int64_t
model_first_undurable (const struct model *m, const uint8_t *dirty,
                       uint64_t offset, uint64_t count)
{
  const uint8_t *state = &m->state[offset - m->base];
  const uint8_t *first = memchr (dirty, 1, count);
  uint64_t i;

  /* Right after a flush nothing is dirty at all. */
  if (first == NULL)
    return -1;
  i = first - dirty;
  /* dirty[] bytes are 0 or 1: line them up with the DURABLE bits. */
  for (; i + 8 <= count; i += 8) {
    uint64_t d, st;

    memcpy (&d, &dirty[i], 8);
    memcpy (&st, &state[i], 8);
    if (d * MODEL_DURABLE & st)
      break;
  }
  for (; i < count; i++)
    if (dirty[i] && (state[i] & MODEL_DURABLE))
      return offset + i;
  return -1;
}

/* Where buf and want first differ at a byte that counts, or count. */
static uint64_t
first_difference (const uint8_t *buf, const uint8_t *want,
                  const uint8_t *state, uint64_t count, bool landed)
{
  for (uint64_t i = 0; i < count; i++) {
    /* Skip whole words that match, or where no byte counts. */
    if ((i & 7) == 0 && count - i >= 8) {
      uint64_t st;

      memcpy (&st, &state[i], 8);
      if (memcmp (&buf[i], &want[i], 8) == 0
          || (landed && (st & BYTES_OF (MODEL_LANDED)) == 0)
          || (!landed && st == BYTES_OF (MODEL_DONTCARE))) {
        i += 7;
        continue;
      }
    }
    if (buf[i] != want[i]
        && (landed ? (state[i] & MODEL_LANDED)
            : !(state[i] & MODEL_DONTCARE)))
      return i;
  }
  return count;
}

bool
model_compare (const struct model *m, const uint8_t *buf, uint64_t offset,
               uint64_t count, bool landed, struct model_mismatch *mm)
{
  uint64_t j = offset - m->base;
  const uint8_t *want = (landed ? m->landed : m->data) + j;
  uint64_t i;

  if (memcmp (buf, want, count) == 0)
    return true;
  i = first_difference (buf, want, m->state + j, count, landed);
  if (i == count)
    return true;
  mm->offset = offset + i;
  mm->expected = want[i];
  mm->got = buf[i];
  mm->length = 0;
  while (i < count && buf[i] != want[i]) {
    mm->length++;
    i++;
  }
  return false;
}

void
model_pin_zero (struct model *m, uint64_t offset, uint64_t count)
{
  uint8_t *state = &m->state[offset - m->base];

  /* data[] of a trimmed byte is already 0. */
  for (uint64_t i = 0; i < count; i++)
    state[i] &= ~MODEL_DONTCARE;
}

int64_t
model_first_nonzero (const struct model *m, uint64_t offset, uint64_t count)
{
  const uint8_t *d = m->data + (offset - m->base);
  static const uint8_t zeroes[4096];

  for (uint64_t i = 0; i < count; i += sizeof zeroes) {
    uint64_t n = MIN (count - i, sizeof zeroes);

    if (memcmp (d + i, zeroes, n) != 0)
      for (uint64_t k = i; k < i + n; k++)
        if (d[k])
          return offset + k;
  }
  return -1;
}

/* ------------------------------------------------------------ byte source */

void
byte_source_buffer (struct byte_source *s, const void *data, size_t len)
{
  *s = (struct byte_source) { .data = data, .len = len };
}

void
byte_source_seed (struct byte_source *s, uint64_t seed)
{
  *s = (struct byte_source) { .rng = mix64 (seed + 1) };
}

uint8_t
byte_source_u8 (struct byte_source *s)
{
  if (s->data == NULL) {
    s->rng += UINT64_C (0x9e3779b97f4a7c15);
    return mix64 (s->rng) & 0xff;
  }
  if (s->pos < s->len)
    return s->data[s->pos++];
  s->exhausted = true;
  return 0;
}

uint32_t
byte_source_u32 (struct byte_source *s)
{
  uint32_t v = 0;

  for (int i = 0; i < 4; i++)
    v = (v << 8) | byte_source_u8 (s);
  return v;
}

uint64_t
byte_source_below (struct byte_source *s, uint64_t n)
{
  return byte_source_u32 (s) % n;
}

/* ------------------------------------------------------------ generator */

void
op_generator_init (struct op_generator *g, uint64_t lo, uint64_t hi,
                   uint64_t max_io, uint32_t align, uint32_t first_tag)
{
  *g = (struct op_generator) {
    .lo = lo, .hi = hi, .max_io = max_io, .align = align ? align : 1,
    .next_tag = first_tag, .max_sleep_us = 4000,
  };
}

/* Op kinds by the first byte of each op: writes most, then reads, so
 * queues fill up; a FLUSH about every 16 ops, so they also drain.
 */
static const struct {
  uint8_t below;
  enum model_op_kind kind;
  unsigned flags;
} kind_table[] = {
  { 88, MOP_WRITE, 0 },
  { 136, MOP_READ, 0 },
  { 166, MOP_ZERO, 0 },
  { 194, MOP_TRIM, 0 },
  { 214, MOP_EXTENTS, 0 },
  { 230, MOP_FLUSH, 0 },
  { 240, MOP_CACHE, 0 },
  { 244, MOP_SLEEP, 0 },        /* rare: it only costs wall time */
  { 255, MOP_WRITE, REQ_FUA },  /* FUA writes deserve more than 1 in 8 */
};

static enum model_op_kind
choose_kind (uint8_t b, unsigned *flags)
{
  size_t i = 0;

  while (i + 1 < sizeof kind_table / sizeof kind_table[0]
         && b >= kind_table[i].below)
    i++;
  *flags = kind_table[i].flags;
  return kind_table[i].kind;
}

static unsigned
choose_flags (enum model_op_kind kind, uint8_t b)
{
  unsigned flags = 0;

  if (kind != MOP_WRITE && kind != MOP_ZERO && kind != MOP_TRIM)
    return 0;
  if ((b & 7) == 0)
    flags |= REQ_FUA;
  if (kind == MOP_ZERO && (b & 8))
    flags |= REQ_MAY_TRIM;
  if (kind == MOP_ZERO && (b & 0x70) == 0)
    flags |= REQ_FAST_ZERO;
  return flags;
}

static const struct gen_range *
gen_prev (const struct op_generator *g)
{
  return g->nr_recent ? &g->recent[g->newest] : NULL;
}

/* A length for an op of kind inside [lo, hi). */
static uint64_t
choose_length (struct op_generator *g, struct byte_source *src,
               enum model_op_kind kind, uint64_t lo, uint64_t hi)
{
  uint64_t span = hi - lo;
  bool bulk = kind == MOP_ZERO || kind == MOP_TRIM || kind == MOP_EXTENTS
    || kind == MOP_CACHE;
  uint64_t cap = bulk ? span : MIN (span, g->max_io);
  uint8_t mode = byte_source_u8 (src) & 7;
  uint32_t r = byte_source_u32 (src);
  uint64_t len;

  switch (mode) {
  case 0: len = 1 + r % 16; break;
  case 1: len = 512 * (1 + r % 8); break;
  case 2: len = 4 * KiB * (1 + r % 16); break;
  case 3: len = 4 * KiB * (1 + r % 64); break;
  case 4: len = 1 + r % MIN (cap, MAX_IO); break;
  case 5: len = gen_prev (g) ? gen_prev (g)->count : 4 * KiB; break;
  case 6: len = 1 + r % (4 * KiB); break;
  default: len = bulk ? 1 + r % span : 64 * KiB; break;
  }
  return MIN (len, cap);
}

/* Where an op of len bytes starts inside [lo, hi).  Recent ops may lie
 * elsewhere (in other stripes): offsets taken from them are clamped.
 */
static uint64_t
choose_offset (struct op_generator *g, struct byte_source *src, uint64_t len,
               uint64_t lo, uint64_t hi)
{
  const struct gen_range *prev = gen_prev (g);
  uint8_t mode = byte_source_u8 (src);
  uint8_t align_mode = mode >> 3;
  uint32_t r = byte_source_u32 (src);
  uint64_t room = hi - lo - len;        /* len <= the region */
  uint64_t off;
  bool align = false;

  if (prev == NULL)
    mode = 0;
  switch (mode & 7) {
  case 0:                       /* anywhere */
    off = lo + r % (room + 1);
    align = true;
    break;
  case 1:                       /* right after the previous op */
    off = prev->offset + prev->count;
    break;
  case 2:                       /* right before it */
    off = prev->offset >= lo + len ? prev->offset - len : lo;
    break;
  case 3:                       /* starting inside it */
    off = prev->offset + r % prev->count;
    break;
  case 4:                       /* the last bytes of the region */
    off = hi - len;
    break;
  case 5: {                     /* overlapping a recent op */
    const struct gen_range *o = &g->recent[r % g->nr_recent];
    uint64_t from = o->offset > lo + len - 1 ? o->offset - (len - 1) : lo;
    uint64_t reach = o->offset + o->count;
    uint32_t r2 = byte_source_u32 (src);

    /* One wholly below [lo, hi) reaches no start inside it. */
    off = reach > from ? from + r2 % (reach - from) : lo;
    align = (r & 0x100) != 0;
    break;
  }
  case 6:                       /* the same start as the previous op */
    off = prev->offset;
    break;
  default:                      /* near the start */
    off = lo + r % (8 * KiB);
    align = true;
  }
  if (align && align_mode % 4 == 0)
    off &= ~(uint64_t) (4 * KiB - 1);
  else if (align && align_mode % 4 == 1)
    off &= ~(uint64_t) 511;
  if (off < lo)
    off = lo;
  if (off > hi - len)
    off = hi - len;
  return off;
}

/* Most requests respect the backend's minimum block size; a few do not,
 * and the queue must refuse those without touching anything.
 */
static void
apply_alignment (struct op_generator *g, uint8_t b, struct model_op *op,
                 uint64_t lo, uint64_t hi)
{
  uint64_t a = g->align;

  if (a <= 1 || b % 8 == 0)
    return;
  op->offset &= ~(a - 1);
  op->count = (op->count + a - 1) & ~(a - 1);
  if (op->count > hi - lo)
    op->count = (hi - lo) & ~(a - 1);
  if (op->offset + op->count > hi)
    op->offset = (hi - op->count) & ~(a - 1);
}

static void
remember (struct op_generator *g, const struct model_op *op)
{
  g->newest = g->nr_recent ? (g->newest + 1) % GEN_RECENT : 0;
  g->recent[g->newest].offset = op->offset;
  g->recent[g->newest].count = op->count;
  if (g->nr_recent < GEN_RECENT)
    g->nr_recent++;
}

/* ------------------------------------------------------------ stripes */

/* Of every 256 ops of a striped generator, this many carry its stream
 * on (with fewer, lanes drift apart and seldom continue each other's
 * writes in flight); the rest are of every kind, inside one of its
 * stripes.
 */
#define STREAM_SHARE 208
#define READ_ROW_EVERY 4

uint64_t
stripe_of (uint64_t lo, uint64_t hi, uint64_t stripe, uint64_t pos,
           uint64_t *start, uint64_t *end)
{
  uint64_t k = (pos - lo) / stripe;

  *start = lo + k * stripe;
  *end = MIN (*start + stripe, hi);
  return k;
}

/* How many stripes of [lo, hi) the generator owns: its rows. */
static uint64_t
own_rows (const struct op_generator *g)
{
  uint64_t stripes = (g->hi - g->lo + g->stripe - 1) / g->stripe;

  if (stripes <= g->stripe_first)
    return 0;
  return (stripes - g->stripe_first + g->stripe_step - 1) / g->stripe_step;
}

/* Where the generator's stripe in row (counted without wrapping) starts. */
static uint64_t
row_start (const struct op_generator *g, uint64_t row)
{
  uint64_t k = g->stripe_first + row % own_rows (g) * g->stripe_step;

  return g->lo + k * g->stripe;
}

/* The stream starts a stripe: the one in row, or in the furthest row
 * another lane's stream began, so that neighbouring lanes write
 * neighbouring stripes at the same time.
 */
static void
stream_begin_stripe (struct op_generator *g, uint64_t row)
{
  if (g->front) {
    uint64_t front = atomic_load (g->front);

    while (front < row
           && !atomic_compare_exchange_weak (g->front, &front, row))
      ;
    row = MAX (row, front);
  }
  g->stream_row = row;
  g->stream_pos = row_start (g, row);
}

void
op_generator_stripes (struct op_generator *g, uint64_t stripe,
                      unsigned first, unsigned step, _Atomic uint64_t *front)
{
  g->stripe = stripe;
  g->stripe_first = first;
  g->stripe_step = MAX (step, 1u);
  g->front = front;
  /* A generator that owns no stripe stays unstriped: its region holds
   * nothing of its own to write.
   */
  if (own_rows (g) == 0) {
    g->stripe = 0;
    return;
  }
  g->stream_row = 0;
  g->stream_pos = row_start (g, 0);
}

/* The stream's next piece of its stripe: the rest of it half the time,
 * so that the next lane's stripe continues it, else a piece of it.  It
 * is written (half of the writes FUA: with ack=queued those are the
 * writers that wait), but read in every READ_ROW_EVERY'th row.  The
 * lanes keep to one row (stream_begin_stripe), so there they read
 * neighbouring stripes at once, a lane's read continues its neighbour's
 * still on its way, and they merge (merge_reads_at_any_depth) or are
 * answered from read-ahead windows, over the lanes' writes queued, in
 * flight and arriving.
 */
static void
stream_write (struct op_generator *g, struct byte_source *src,
              struct model_op *op)
{
  uint8_t b = byte_source_u8 (src);
  uint32_t r = byte_source_u32 (src);
  uint64_t a = g->align, start, end, rest, len;

  stripe_of (g->lo, g->hi, g->stripe, g->stream_pos, &start, &end);
  rest = end - g->stream_pos;
  switch (b & 3) {
  case 2: len = MIN (rest, 4 * KiB * (1 + r % 4)); break;
  case 3: len = 1 + r % rest; break;
  default: len = rest;
  }
  /* The stream keeps to the minimum block size: refused requests are
   * the other ops' business.
   */
  if (a > 1)
    len = MIN ((len + a - 1) & ~(a - 1), rest);
  len = MIN (len, g->max_io);
  op->kind = g->stream_row % READ_ROW_EVERY == READ_ROW_EVERY - 1
    ? MOP_READ : MOP_WRITE;
  op->flags = op->kind == MOP_WRITE && b & 4 ? REQ_FUA : 0;
  op->offset = g->stream_pos;
  op->count = len;
  g->stream_pos += len;
  if (g->stream_pos == end)
    stream_begin_stripe (g, g->stream_row + 1);
}

/* The stripe a striped generator's next op stays inside: half the time
 * the stream's, where writes are queued and in flight, else any of its
 * own.
 */
static void
choose_stripe (struct op_generator *g, struct byte_source *src,
               uint64_t *lo, uint64_t *hi)
{
  uint8_t b = byte_source_u8 (src);
  uint32_t r = byte_source_u32 (src);
  uint64_t at = b & 1 ? g->stream_pos : row_start (g, r);

  stripe_of (g->lo, g->hi, g->stripe, at, lo, hi);
}

bool
op_generator_next (struct op_generator *g, struct byte_source *src,
                   struct model_op *op)
{
  static const uint64_t sleeps[] = { 0, 50, 200, 1000, 4000 };
  uint64_t lo = g->lo, hi = g->hi;
  unsigned forced;

  *op = (struct model_op) { .tag = g->next_tag++ };
  if (g->stripe && byte_source_u8 (src) < STREAM_SHARE) {
    stream_write (g, src, op);
    remember (g, op);
    return !src->exhausted;
  }
  op->kind = choose_kind (byte_source_u8 (src), &forced);
  op->flags = choose_flags (op->kind, byte_source_u8 (src)) | forced;
  switch (op->kind) {
  case MOP_FLUSH:
    break;
  case MOP_SLEEP:
    op->count = MIN (sleeps[byte_source_u8 (src) % 5], g->max_sleep_us);
    break;
  default:
    if (g->stripe)
      choose_stripe (g, src, &lo, &hi);
    op->count = choose_length (g, src, op->kind, lo, hi);
    op->offset = choose_offset (g, src, op->count, lo, hi);
    apply_alignment (g, byte_source_u8 (src), op, lo, hi);
    /* Now and then a request that runs past the end of the disk: the
     * queue must refuse it whole.
     */
    if (g->past_end_ok && byte_source_u8 (src) == 0xff)
      op->offset = g->hi - op->count + 1 + byte_source_below (src, 4096);
    remember (g, op);
  }
  return !src->exhausted;
}

/* ------------------------------------------------------------ params */

static const uint32_t thresh_choices[] = { 1, 4, 16, 1000 };
static const uint64_t delay_choices[] = { 0, 100 * US, 3 * MS, 1 * SEC };
static const uint64_t merge_choices[] = { 4 * KiB, 64 * KiB, 1 * MiB };
static const uint64_t qbytes_choices[] = { 64 * KiB, 256 * KiB, 64 * MiB };
static const uint32_t qrequests_choices[] = { 2, 8, 256 };
static const uint64_t expire_choices[] = { 200 * US, 10 * MS, 5 * SEC };

static const unsigned async_choices[] = { 2, 4, 16 };
static const unsigned writers_choices[] = { 2, 4, 8 };

#define PICK_INDEX(a, i) ((a)[(i) % (sizeof (a) / sizeof (a)[0])])
#define PICK(src, a) PICK_INDEX (a, byte_source_u8 (src))

static void
choose_params (struct harness_params *p, struct byte_source *src,
               const struct elevator_ops *elevator, enum ack_mode ack,
               uint64_t disk_base)
{
  struct queue_config *c = &p->config;
  uint8_t b;

  *p = (struct harness_params) { .lanes = 1 };
  queue_config_defaults (c);
  c->elevator = elevator;
  c->ack = ack;
  /* One run in eight keeps the shipped defaults. */
  if (byte_source_u8 (src) % 8 != 0) {
    c->unplug_thresh = PICK (src, thresh_choices);
    c->unplug_delay_ns = PICK (src, delay_choices);
    c->max_merge = PICK (src, merge_choices);
    c->queue_bytes = PICK (src, qbytes_choices);
    c->queue_requests = PICK (src, qrequests_choices);
    c->write_expire_ns = PICK (src, expire_choices);
  }
  /* ack=dispatched answers a write only once it is written, so a lone
   * writer behind a long plug waits out the whole delay on every write.
   */
  if (ack == ACK_DISPATCHED && c->unplug_thresh > 1
      && c->unplug_delay_ns > 100 * US)
    c->unplug_delay_ns = byte_source_u8 (src) & 1 ? 100 * US : 0;

  b = byte_source_u8 (src);
  p->backend.trim = b % 4 == 2 ? TB_TRIM_NOOP
    : b % 4 == 3 ? TB_TRIM_SCRIBBLE : TB_TRIM_PASS;
  p->backend.no_fast_zero = (b & 0x0c) == 0;
  p->backend.max_write = (b & 0x30) == 0 ? 64 * KiB : 0;
  p->backend.max_iov = (b & 0xc0) == 0 ? 4 : 0;
  b = byte_source_u8 (src);
  p->backend.minimum = b % 8 == 0 ? 512 : 0;
  /* Two runs in eight on an aligned-only backend that still takes
   * requests of any size (direct=true): partial blocks are the queue's.
   */
  p->backend.min_block = b % 8 == 1 ? 4096 : b % 8 == 2 ? 512 : 0;
  switch ((b >> 3) % 4) {
  case 0: p->disk_size = disk_base - 512; break;
  case 1: p->disk_size = disk_base + 1234; break;   /* a ragged end */
  default: p->disk_size = disk_base;
  }
  if (p->backend.minimum)
    p->disk_size &= ~(uint64_t) (p->backend.minimum - 1);
  /* One run in four on a backend with its own threads, like nbd, and
   * one in four on one that takes writes from several token holders at
   * once, like memory.
   */
  b = byte_source_u8 (src);
  if (b % 4 == 0) {
    p->backend.async = PICK_INDEX (async_choices, b >> 2);
    p->backend.fua = (b & 0x80) != 0;
  }
  else if (b % 4 == 1)
    p->backend.writers = PICK_INDEX (writers_choices, b >> 2);
  /* Partial blocks race only between token holders writing at once. */
  else if (b % 4 == 2 && p->backend.min_block)
    p->backend.writers = PICK_INDEX (writers_choices, b >> 2);
  /* Half the synchronous runs on a backend that writes to memory, as
   * file and memory disks do, where writes nothing can merge with go
   * around the queue, unless bypass=never.
   */
  b = byte_source_u8 (src);
  p->backend.writes_to_memory = !p->backend.async && !p->backend.min_block
    && (b & 1);
  c->bypass = (b & 6) != 0;
  /* One run in four on a backend that fails now and then, from bits no
   * other choice reads, so that every other choice and every op of a
   * seed or fuzzer input stay what they were.
   */
  if ((b & 0x18) == 0x18)
    p->backend.faults = 1 + (b >> 5) % HARNESS_FAULT_LEVELS;
}

void
harness_params_choose (struct harness_params *p, struct byte_source *src,
                       const struct elevator_ops *elevator, enum ack_mode ack)
{
  choose_params (p, src, elevator, ack, 1 * MiB);
}

static const uint64_t stripe_choices[] = { 4 * KiB, 8 * KiB, 16 * KiB };
/* Fewer slots than the lanes (test_model.c, STRIPE_LANES): a waiting
 * write is held behind the stream only while every slot is taken.
 */
static const unsigned stream_async_choices[] = { 2, 4, 6 };

void
harness_params_choose_striped (struct harness_params *p,
                               struct byte_source *src,
                               const struct elevator_ops *elevator,
                               enum ack_mode ack, unsigned lanes)
{
  struct queue_config *c = &p->config;

  /* A small disk: the streams wrap often and run over their own writes
   * still queued or in flight.
   */
  choose_params (p, src, elevator, ack, 256 * KiB);
  p->lanes = lanes;
  p->stripe = PICK (src, stripe_choices);
  /* A queue of 2 requests never fills the backend's slots with a
   * stream, and stripes cannot merge beyond a max-merge of one.
   */
  c->queue_requests = MAX (c->queue_requests, 8u);
  c->max_merge = MAX (c->max_merge, 64 * KiB);
  p->backend.async = PICK (src, stream_async_choices);
  p->backend.fua = byte_source_u8 (src) & 1;
  p->backend.writers = 0;
  p->backend.writes_to_memory = false;      /* synchronous backends only */
}

void
harness_params_choose_all (struct harness_params *p, struct byte_source *src)
{
  uint8_t b = byte_source_u8 (src);

  /* A small disk: more overlaps per op, and more execs per second. */
  choose_params (p, src, b & 1 ? &elevator_noop : &elevator_deadline,
                 b & 2 ? ACK_DISPATCHED : ACK_QUEUED, 64 * KiB);
  /* One input in eight writes a stream through stripes, which on an
   * asynchronous backend holds waiting writes behind the lane's own
   * writes in flight.  Bits of the first byte that the hand-made inputs
   * of the corpus leave clear, so they keep their meaning.
   */
  if ((b & 0x1c) == 0x1c)
    p->stripe = PICK_INDEX (stripe_choices, b >> 5);
}

static const char *
human (uint64_t v, char *buf, size_t len, const char *const units[],
       const uint64_t scale[], size_t n)
{
  for (size_t i = n; i-- > 0;)
    if (v >= scale[i] && v % scale[i] == 0) {
      snprintf (buf, len, "%" PRIu64 "%s", v / scale[i], units[i]);
      return buf;
    }
  snprintf (buf, len, "%" PRIu64 "%s", v, units[0]);
  return buf;
}

static const char *
human_bytes (uint64_t v, char *buf, size_t len)
{
  static const char *const u[] = { "", "K", "M" };
  static const uint64_t s[] = { 1, KiB, MiB };

  return human (v, buf, len, u, s, 3);
}

static const char *
human_ns (uint64_t v, char *buf, size_t len)
{
  static const char *const u[] = { "ns", "us", "ms", "s" };
  static const uint64_t s[] = { 1, US, MS, SEC };

  return human (v, buf, len, u, s, 4);
}

void
harness_params_format (const struct harness_params *p, char *buf,
                       size_t len)
{
  static const char *const trims[] = { "pass", "noop", "scribble" };
  const struct queue_config *c = &p->config;
  char b[6][32];

  snprintf (buf, len,
            "%s ack=%s thresh=%" PRIu32 " delay=%s max-merge=%s"
            " queue-bytes=%s queue-requests=%" PRIu32 " expire=%s"
            " disk=%" PRIu64 " lanes=%u"
            " backend=%s trim=%s fast-zero=%s max-write=%s max-iov=%d"
            " minimum=%" PRIu32
            " min-block=%" PRIu32 " async=%u%s%s writers=%u stripe=%s"
            " sessions=%u faults=%u%s%s",
            c->elevator->name,
            c->ack == ACK_QUEUED ? "queued" : "dispatched",
            c->unplug_thresh,
            human_ns (c->unplug_delay_ns, b[0], sizeof b[0]),
            human_bytes (c->max_merge, b[1], sizeof b[1]),
            human_bytes (c->queue_bytes, b[2], sizeof b[2]),
            c->queue_requests,
            human_ns (c->write_expire_ns, b[3], sizeof b[3]),
            p->disk_size, p->lanes,
            p->backend.name ? p->backend.name : "memory",
            trims[p->backend.trim],
            p->backend.no_fast_zero ? "no" : "yes",
            p->backend.max_write
            ? human_bytes (p->backend.max_write, b[4], sizeof b[4]) : "own",
            p->backend.max_iov, p->backend.minimum, p->backend.min_block,
            p->backend.async, p->backend.fua ? "+fua" : "",
            p->backend.async && p->backend.steady ? "+steady" : "",
            p->backend.writers,
            p->stripe ? human_bytes (p->stripe, b[5], sizeof b[5]) : "none",
            p->sessions, p->backend.faults,
            p->backend.writes_to_memory ? " writes-to-memory" : "",
            c->bypass ? "" : " bypass=never");
}

/* ------------------------------------------------------------ harness */

const char *const harness_fault_names[FAULT_KINDS] = {
  [FAULT_NONE] = "none", [FAULT_SETUP] = "setup",
  [FAULT_RESULT] = "result", [FAULT_READ] = "read",
  [FAULT_EXTENTS] = "extents", [FAULT_FLUSH] = "flush",
  [FAULT_FUA] = "fua", [FAULT_ACKED] = "acked",
  [FAULT_LANDED] = "landed", [FAULT_BACKEND] = "backend",
  [FAULT_DRAIN] = "drain", [FAULT_STATS] = "stats",
};

struct lane_counts {
  uint64_t reads_ok, reads;
  uint64_t writes_ok, writes, write_bytes;
  uint64_t zeros_ok, zeros;
  uint64_t trims_ok, trims;
  uint64_t flushes, fua;
  uint64_t flush_ns_max;        /* slowest FLUSH answer */
  /* Fault mode: requests answered with an error, those of them that
   * were FUA, and the bytes of the writes among them.
   */
  uint64_t failed, fua_failed, write_bytes_failed;
  uint64_t flushes_failed;
  uint64_t flushes_after_failure;       /* succeeded after one failed */
  uint64_t fua_cuts, fua_cuts_held;     /* MOP_FUA_CUT (harness_tally) */
};

struct lane {
  uint64_t lo, hi;
  struct session *session;      /* the harness's, maybe shared */
  struct model model;
  struct model_op *log;         /* every op applied, in order */
  size_t nr_ops, cap;
  uint8_t *buf;                 /* MAX_IO bytes of scratch */
  uint8_t *dirty;               /* and MAX_IO more for the dirty map */
  struct lane_counts n;
};

/* What every lane was answered, on one clock, for the rule that a
 * FLUSH on any connection covers the writes answered on every
 * connection before it arrived (multi-conn).  Each lane keeps to its own
 * bytes, so each byte's record changes only on its lane's thread; all
 * of it is read, and written, under lock.  Per byte of the disk: want,
 * what the newest request there left, and loose, whether it may hold
 * anything (trimmed, or the request failed).  Per granule of
 * ANSWER_GRANULE bytes: since, the clock when the newest request that
 * touched it was answered (ANSWER_PENDING while one is on its way).  A
 * FLUSH takes the clock when it is sent; once it succeeds, every byte
 * whose granule's newest request was answered before then must be on the
 * backend, as it was left, and durable.  A granule touched by a newer
 * request is left alone as a whole: a little less checked, never a byte
 * checked that a newer request may change (a lane's requests come one at
 * a time, and no two lanes share a granule).
 */
#define ANSWER_PENDING UINT32_MAX
#define ANSWER_GRANULE 64

struct answers {
  pthread_mutex_t lock;
  uint32_t clock;
  uint32_t *since;              /* per granule */
  uint8_t *want;
  uint8_t *loose;
  uint8_t *buf, *dirty;         /* ANSWER_CHUNK bytes of scratch each */
};

struct harness {
  struct harness_params p;
  struct test_backend *tb;      /* what the queue writes through */
  struct timer_service *ts;
  struct queue *q;
  unsigned nr_lanes;
  struct lane lane[HARNESS_MAX_LANES];
  unsigned nr_sessions;
  struct session *session[HARNESS_MAX_LANES];
  struct answers *answers;      /* several lanes only */
  _Atomic uint64_t stream_front;  /* striped lanes' generators share it */
  _Atomic bool flush_failed;    /* a FLUSH on any lane failed */
  bool recovered;               /* the fault mode is over */
  bool finished;

  pthread_mutex_t lock;         /* the fault record and verbose output */
  _Atomic bool failed;
  enum harness_fault fault;
  unsigned fault_lane;
  size_t fault_op;
  char why[1536];
};

/* Records the first failure; later ones are consequences. */
__attribute__ ((format (printf, 5, 6)))
static bool
fail (struct harness *h, unsigned lane, size_t op_index,
      enum harness_fault kind, const char *fmt, ...)
{
  va_list ap;

  pthread_mutex_lock (&h->lock);
  if (h->fault == FAULT_NONE) {
    h->fault = kind;
    h->fault_lane = lane;
    h->fault_op = op_index;
    va_start (ap, fmt);
    vsnprintf (h->why, sizeof h->why, fmt, ap);
    va_end (ap);
    atomic_store (&h->failed, true);
  }
  pthread_mutex_unlock (&h->lock);
  return false;
}

/* ------------------------------------------------------------ backend */

/* The test backend (test_backends.h) wrapped around the memory backend
 * (or the backend the run opens) gives the queue the backend properties
 * this run asks for and checks every call against the backend contract
 * as it happens; in async mode it plays a backend with its own threads
 * (like nbd) that completes operations out of order and late, unless the
 * inner backend has threads of its own.
 */
#define BACKEND_WORKERS 2

/* A breach found on a queue or backend thread: blame the op lane 0 is
 * on.
 */
static void
backend_fault (void *arg, const char *msg)
{
  struct harness *h = arg;

  fail (h, 0, h->lane[0].nr_ops ? h->lane[0].nr_ops - 1 : 0,
        FAULT_BACKEND, "%s", msg);
}

/* The limits this run asks for, over the memory backend's own. */
static void
shape_backend (struct backend *b, const struct backend_params *bp)
{
  b->max_writers = bp->writers;
  if (bp->max_write)
    b->max_write = bp->max_write;
  if (bp->max_iov)
    b->max_iov = bp->max_iov;
  if (bp->no_fast_zero)
    b->can_fast_zero = false;
  if (bp->minimum) {
    b->limits.minimum = bp->minimum;
    b->limits.preferred = MAX (b->limits.preferred, bp->minimum);
  }
  if (bp->min_block) {
    b->min_block = bp->min_block;
    b->limits.preferred = MAX (b->limits.preferred, bp->min_block);
  }
  /* No request may be larger than one write can carry. */
  if (b->max_write)
    b->limits.maximum = MIN (b->limits.maximum, b->max_write);
}

/* The test backend over a memory backend, or over the one the run
 * opens; NULL after a setup fault.
 */
static struct test_backend *
wrapped_backend (struct harness *h)
{
  const struct backend_params *bp = &h->p.backend;
  struct test_backend *tb;
  const struct backend *b;

  if (bp->open == NULL)
    tb = test_backend_new (h->p.disk_size);
  else
    tb = test_backend_wrap (bp->open (bp->open_arg));
  if (tb == NULL) {
    fail (h, 0, 0, FAULT_SETUP, "test backend over %s: %m",
          bp->name ? bp->name : "memory");
    return NULL;
  }
  b = test_backend_get (tb);
  /* The wrapper's record of changed bytes cannot read an inner backend
   * from the inner backend's own thread (test_backend_wrap).
   */
  if (b->size != h->p.disk_size
      || (backend_is_async (b) && (bp->min_block || bp->writers > 1))) {
    fail (h, 0, 0, FAULT_SETUP, "%s: %" PRIu64 " bytes, asynchronous: %s;"
          " the run wants %" PRIu64 " bytes, min-block %" PRIu32
          ", writers %u", b->description, b->size,
          backend_is_async (b) ? "yes" : "no", h->p.disk_size,
          bp->min_block, bp->writers);
    backend_close (test_backend_get (tb));
    return NULL;
  }
  return tb;
}

/* Asynchronous as the run asks: an inner backend with threads of its
 * own is already, and keeps its FUA only if the run wants FUA carried.
 */
static int
make_async (struct test_backend *tb, const struct backend_params *bp)
{
  struct backend *b = test_backend_get (tb);

  if (backend_is_async (b)) {
    b->can_fua &= bp->fua;
    return 0;
  }
  if (bp->async == 0)
    return 0;
  if (test_backend_set_async_workers (tb, bp->async, BACKEND_WORKERS) == -1)
    return -1;
  if (bp->fua)
    test_backend_set_fua (tb);
  return 0;
}

/* How a backend in fault mode fails (backend_params.faults - 1): short
 * outages where everything fails; a flaky backend failing half the
 * calls of long stretches; long outages; and a mostly healthy one whose
 * flushes fail often.  Stretches count writes, zeroes and trims: a run
 * of 300 ops makes a hundred or more.
 */
static const struct tb_faults fault_levels[HARNESS_FAULT_LEVELS] = {
  { .healthy_calls = 48, .failing_calls = 8, .fail_percent = 100,
    .flush_percent = 5 },
  { .healthy_calls = 32, .failing_calls = 32, .fail_percent = 50,
    .flush_percent = 10 },
  { .healthy_calls = 16, .failing_calls = 64, .fail_percent = 100,
    .flush_percent = 0 },
  { .healthy_calls = 96, .failing_calls = 16, .fail_percent = 25,
    .flush_percent = 25 },
};

/* The fault mode the run asks for, seeded by its knobs. */
static void
start_faults (struct harness *h)
{
  const struct queue_config *c = &h->p.config;
  struct tb_faults f;

  if (h->p.backend.faults == 0)
    return;
  f = fault_levels[(h->p.backend.faults - 1) % HARNESS_FAULT_LEVELS];
  f.seed = mix64 (h->p.disk_size ^ c->unplug_delay_ns ^ c->max_merge
                  ^ ((uint64_t) c->unplug_thresh << 40)
                  ^ ((uint64_t) h->p.backend.faults << 56));
  test_backend_faults (h->tb, &f);
}

/* Calls the backend failed on purpose so far. */
static uint64_t
backend_failures (struct harness *h)
{
  static const enum tb_op kinds[] = { TB_PWRITEV, TB_ZERO, TB_TRIM,
                                      TB_FLUSH };
  uint64_t n = 0;

  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    n += test_backend_failed (h->tb, kinds[i]);
  return n;
}

static struct test_backend *
backend_new (struct harness *h)
{
  const struct backend_params *bp = &h->p.backend;
  struct test_backend *tb = wrapped_backend (h);
  struct backend *b;
  struct tb_contract c = {
    .no_merging = h->p.config.unplug_thresh <= 1,
    .fault = backend_fault, .arg = h,
  };

  if (tb == NULL)
    return NULL;
  b = test_backend_get (tb);
  shape_backend (b, bp);
  test_backend_set_trim (tb, bp->trim);
  c.merge_limit = MIN (h->p.config.max_merge,
                       b->max_write ? b->max_write : UINT64_MAX);
  if (test_backend_check_contract (tb, &c) == -1
      || make_async (tb, bp) == -1) {
    backend_close (b);
    return NULL;
  }
  if (bp->writes_to_memory)
    test_backend_set_writes_to_memory (tb);
  if (!bp->steady)
    test_backend_jitter (tb, h->p.disk_size ^ h->p.config.unplug_thresh);
  return tb;
}

/* ------------------------------------------------------------ setup */

static int
lane_init (struct harness *h, struct lane *l, uint64_t lo, uint64_t hi)
{
  l->lo = lo;
  l->hi = hi;
  if (model_init (&l->model, lo, hi - lo) == -1)
    return -1;
  l->buf = malloc (MAX_IO);
  l->dirty = malloc (MAX_IO);
  return l->buf && l->dirty ? 0 : -1;
}

static void
lane_free (struct lane *l)
{
  model_free (&l->model);
  free (l->buf);
  free (l->dirty);
  free (l->log);
}

/* Sessions, shared by the lanes as harness_params.sessions says. */
static int
sessions_init (struct harness *h)
{
  h->nr_sessions = h->p.sessions ? MIN (h->p.sessions, h->nr_lanes)
    : h->nr_lanes;
  for (unsigned i = 0; i < h->nr_sessions; i++)
    if ((h->session[i] = session_new ()) == NULL)
      return -1;
  for (unsigned i = 0; i < h->nr_lanes; i++)
    h->lane[i].session = h->session[i % h->nr_sessions];
  return 0;
}

/* The chunks check_answers reads the backend in: small, so that the
 * bytes newer requests changed meanwhile cost a byte-by-byte look only
 * near them.
 */
#define ANSWER_CHUNK (4 * KiB)

static void
answers_free (struct answers *a)
{
  if (a == NULL)
    return;
  pthread_mutex_destroy (&a->lock);
  free (a->since);
  free (a->want);
  free (a->loose);
  free (a->buf);
  free (a->dirty);
  free (a);
}

/* A new disk reads as zeroes, durably: answered before any FLUSH. */
static struct answers *
answers_new (uint64_t size)
{
  struct answers *a = calloc (1, sizeof *a);

  if (a == NULL)
    return NULL;
  pthread_mutex_init (&a->lock, NULL);
  a->since = calloc ((size + ANSWER_GRANULE - 1) / ANSWER_GRANULE,
                     sizeof *a->since);
  a->want = calloc (size, 1);
  a->loose = calloc (size, 1);
  a->buf = malloc (ANSWER_CHUNK);
  a->dirty = malloc (ANSWER_CHUNK);
  if (!a->since || !a->want || !a->loose || !a->buf || !a->dirty) {
    answers_free (a);
    return NULL;
  }
  return a;
}

/* Lanes split the disk into adjacent regions, so requests of different
 * lanes merge across the borders but never overlap.  Striped lanes each
 * model the whole disk but touch and check only their own stripes
 * (own_span).  Their sessions are made first, and with several lanes
 * the record of answers.
 */
static int
lanes_init (struct harness *h)
{
  uint64_t size = h->p.disk_size;
  uint64_t share = (size / h->nr_lanes) & ~(uint64_t) (4 * KiB - 1);

  if (sessions_init (h) == -1)
    return -1;
  if (h->nr_lanes > 1 && (h->answers = answers_new (size)) == NULL)
    return -1;
  if (h->p.stripe) {
    for (unsigned i = 0; i < h->nr_lanes; i++)
      if (lane_init (h, &h->lane[i], 0, size) == -1)
        return -1;
    return 0;
  }
  for (unsigned i = 0; i < h->nr_lanes; i++) {
    uint64_t lo = i * share;
    uint64_t hi = i + 1 == h->nr_lanes ? size : lo + share;

    if (lane_init (h, &h->lane[i], lo, hi) == -1)
      return -1;
  }
  return 0;
}

/* A stream read waits to merge while READ_BUSY (8) other reads are
 * active, on a backend that queues reads: more lanes than the model has,
 * and a test backend whose reads the rule could judge either way.  Here
 * any other read active is enough, and a first read of 1 ns (the fastest
 * never rises) makes the backend one that queues reads as soon as
 * READ_DEPTH_KNOWN reads at depth are counted, so the lanes' streams
 * merge wherever they can.
 */
static void
merge_reads_at_any_depth (struct queue *q)
{
  q->read_streams.busy = 1;
  read_depth_note (&q->read_streams.depth, 1, 1);
}

static bool
harness_start (struct harness *h)
{
  char cfg[512];

  if ((h->tb = backend_new (h)) == NULL)
    return fail (h, 0, 0, FAULT_SETUP, "test backend: %m");
  if ((h->ts = timer_service_new ()) == NULL) {
    backend_close (test_backend_get (h->tb));
    h->tb = NULL;
    return fail (h, 0, 0, FAULT_SETUP, "timer_service_new: %m");
  }
  h->q = queue_new ("model", test_backend_get (h->tb), &h->p.config);
  if (h->q == NULL) {
    backend_close (test_backend_get (h->tb));
    h->tb = NULL;
    harness_params_format (&h->p, cfg, sizeof cfg);
    return fail (h, 0, 0, FAULT_SETUP, "queue_new refused %s: %m", cfg);
  }
  merge_reads_at_any_depth (h->q);
  /* Timers attach to the loop before it runs (timer_service.h). */
  if (queue_start (h->q, h->ts) == -1)
    return fail (h, 0, 0, FAULT_SETUP, "queue_start: %m");
  if (timer_service_start (h->ts) == -1)
    return fail (h, 0, 0, FAULT_SETUP, "timer_service_start: %m");
  /* Sessions size their error cursors by the queues that exist. */
  if (lanes_init (h) == -1)
    return fail (h, 0, 0, FAULT_SETUP, "out of memory for the model");
  start_faults (h);
  return true;
}

/* Stripes a multiple of 4 KiB, so no two lanes share a block of any
 * minimum or min_block the harness chooses, and every lane owns one.
 */
static bool
stripes_fit (const struct harness_params *p, unsigned lanes)
{
  return p->stripe == 0
    || (p->stripe % (4 * KiB) == 0
        && (uint64_t) (lanes - 1) * p->stripe < p->disk_size);
}

struct harness *
harness_new (const struct harness_params *p)
{
  struct harness *h = calloc (1, sizeof *h);

  if (h == NULL)
    return NULL;
  h->p = *p;
  h->nr_lanes = MIN (MAX (p->lanes, 1u), (unsigned) HARNESS_MAX_LANES);
  if (p->verbose) {
    char cfg[512];

    harness_params_format (p, cfg, sizeof cfg);
    printf ("# config: %s\n", cfg);
  }
  pthread_mutex_init (&h->lock, NULL);
  atomic_init (&h->stream_front, 0);
  if (!stripes_fit (p, h->nr_lanes))
    fail (h, 0, 0, FAULT_SETUP, "stripes of %" PRIu64 " bytes do not fit"
          " %u lanes on %" PRIu64 " bytes", p->stripe, h->nr_lanes,
          p->disk_size);
  else
    harness_start (h);
  return h;
}

void
harness_lane_generator (struct harness *h, unsigned i,
                        struct op_generator *g)
{
  const struct lane *l = &h->lane[i];
  const struct backend *b = h->tb ? test_backend_get (h->tb) : NULL;
  uint64_t max_io = MAX_IO;

  if (b && b->limits.maximum)
    max_io = MIN (max_io, (uint64_t) b->limits.maximum);
  op_generator_init (g, l->lo, l->hi, max_io, b ? b->limits.minimum : 1,
                     (i << 24) + 1);
  /* Only the last lane may run off the end: past any other lane's end
   * is the next lane's region.  Striped lanes all end at the disk's end.
   */
  g->past_end_ok = l->hi == h->p.disk_size;
  if (h->p.stripe)
    op_generator_stripes (g, h->p.stripe, i, h->nr_lanes,
                          h->nr_lanes > 1 ? &h->stream_front : NULL);
}

/* The first range at or after pos that lane li owns: its whole region
 * without stripes, else the rest of the stripe holding pos if it is the
 * lane's, or the lane's next stripe.  False when none is left.
 */
static bool
own_span (const struct harness *h, unsigned li, uint64_t pos,
          uint64_t *start, uint64_t *end)
{
  const struct lane *l = &h->lane[li];
  uint64_t k;

  if (pos < l->lo)
    pos = l->lo;
  if (pos >= l->hi)
    return false;
  if (h->p.stripe == 0) {
    *start = pos;
    *end = l->hi;
    return true;
  }
  k = stripe_of (l->lo, l->hi, h->p.stripe, pos, start, end);
  if (k % h->nr_lanes == li)
    *start = pos;
  else {
    k += (li + h->nr_lanes - k % h->nr_lanes) % h->nr_lanes;
    if (k * h->p.stripe >= l->hi - l->lo)
      return false;
    stripe_of (l->lo, l->hi, h->p.stripe, l->lo + k * h->p.stripe, start,
               end);
  }
  return true;
}

/* Every range lane li owns, first to last. */
#define FOR_EACH_OWN_SPAN(h, li, s, e) \
  for (uint64_t s, e, pos_ = 0; own_span ((h), (li), pos_, &s, &e); \
       pos_ = e)

/* ------------------------------------------------------------ checks */

/* What the queue must answer: 0, or -1 with one of two errnos (0: any). */
struct expect {
  bool error;
  int errno1, errno2;
};

static bool
misaligned (const struct harness *h, const struct model_op *op)
{
  uint32_t a = test_backend_get (h->tb)->limits.minimum;

  return a > 1 && ((op->offset | op->count) & (a - 1));
}

/* On an aligned-only backend, a request that reaches into a last block
 * the disk's size cuts short: that block cannot be written whole.
 */
static bool
in_partial_last_block (const struct harness *h, const struct model_op *op)
{
  uint64_t a = h->p.backend.min_block;

  return a > 1 && ((op->offset + op->count + a - 1) & ~(a - 1))
    > h->p.disk_size;
}

static struct expect
expect_for (const struct harness *h, const struct model_op *op)
{
  if (op->offset + op->count > h->p.disk_size)
    return (struct expect) { .error = true };
  if (misaligned (h, op) || in_partial_last_block (h, op))
    return (struct expect) { .error = true, .errno1 = EINVAL };
  return (struct expect) { .error = false };
}

/* What the newest op in the log that could have put `got` at pos was. */
static void
explain_byte (const struct harness *h, const struct lane *l, uint64_t pos,
              uint8_t got, char *buf, size_t len)
{
  for (size_t i = l->nr_ops; i-- > 0;) {
    struct model_op parts[MODEL_OP_MAX_PARTS];

    for (size_t k = model_op_parts (&l->log[i], parts); k-- > 0;) {
      const struct model_op *o = &parts[k];
      char op[160];

      if (pos < o->offset || pos >= o->offset + o->count)
        continue;
      if ((o->kind == MOP_WRITE && model_pattern (o->tag, pos) == got)
          || (o->kind == MOP_ZERO && got == 0)
          || o->kind == MOP_TRIM) {
        model_op_format (o, op, sizeof op);
        snprintf (buf, len, "got matches %s", op);
        return;
      }
    }
  }
  snprintf (buf, len, got == 0 ? "got matches the initial zeroes"
            : "got matches no op over that byte");
}

/* The tag of the newest accepted op that set pos, 0 for none. */
static uint32_t
setter (const struct harness *h, const struct lane *l, uint64_t pos)
{
  for (size_t i = l->nr_ops; i-- > 0;) {
    struct model_op parts[MODEL_OP_MAX_PARTS];

    for (size_t k = model_op_parts (&l->log[i], parts); k-- > 0;) {
      const struct model_op *o = &parts[k];

      if ((o->kind == MOP_WRITE || o->kind == MOP_ZERO
           || o->kind == MOP_TRIM)
          && pos >= o->offset && pos < o->offset + o->count
          && !expect_for (h, o).error)
        return o->tag;
    }
  }
  return 0;
}

static bool
mismatch (struct harness *h, unsigned li, size_t index,
          enum harness_fault kind, const char *what,
          const struct model_mismatch *mm)
{
  struct lane *l = &h->lane[li];
  char expl[256];

  explain_byte (h, l, mm->offset, mm->got, expl, sizeof expl);
  return fail (h, li, index, kind,
               "%s: byte 0x%" PRIx64 " is 0x%02x, expected 0x%02x"
               " (set by #%" PRIu32 "), %" PRIu64 " bytes differ from there;"
               " %s", what, mm->offset, mm->got, mm->expected,
               setter (h, l, mm->offset), mm->length, expl);
}

/* The backend's bytes [pos, pos + n) as read into buf, with the record
 * of bytes changed since the last backend flush in dirty: every landed
 * byte must hold what the model says it must, and none that must be
 * durable may have been written since the last backend flush.
 */
static bool
check_landed_bytes (struct harness *h, unsigned li, size_t index,
                    uint64_t pos, uint64_t n, const uint8_t *buf,
                    const uint8_t *dirty, enum harness_fault kind,
                    const char *what)
{
  struct lane *l = &h->lane[li];
  struct model_mismatch mm;
  int64_t bad;

  if (!model_compare (&l->model, buf, pos, n, true, &mm))
    return mismatch (h, li, index, kind, what, &mm);
  bad = model_first_undurable (&l->model, dirty, pos, n);
  if (bad >= 0)
    return fail (h, li, index, kind,
                 "%s: byte 0x%" PRIx64 " (set by #%" PRIu32 ") was"
                 " written without a backend flush after it", what,
                 (uint64_t) bad, setter (h, l, bad));
  return true;
}

/* The backend itself, read directly, must hold every landed byte of
 * [from, to), and no backend write since the last backend flush may
 * have touched a durable one.
 */
static bool
check_landed (struct harness *h, unsigned li, size_t index,
              uint64_t from, uint64_t to, enum harness_fault kind,
              const char *what)
{
  struct lane *l = &h->lane[li];

  for (uint64_t pos = from; pos < to; pos += MAX_IO) {
    uint64_t n = MIN (MAX_IO, to - pos);

    test_backend_dirty (h->tb, l->dirty, n, pos);
    if (test_backend_read (h->tb, l->buf, n, pos) == -1)
      return fail (h, li, index, kind, "backend pread: %m");
    if (!check_landed_bytes (h, li, index, pos, n, l->buf, l->dirty, kind,
                             what))
      return false;
  }
  return true;
}

/* check_landed over every range lane li owns. */
static bool
check_lane_landed (struct harness *h, unsigned li, size_t index,
                   enum harness_fault kind, const char *what)
{
  FOR_EACH_OWN_SPAN (h, li, s, e)
    if (!check_landed (h, li, index, s, e, kind, what))
      return false;
  return true;
}

/* A FLUSH answered: whatever lane li was answered is durable now. */
static void
lane_durable (struct harness *h, unsigned li)
{
  FOR_EACH_OWN_SPAN (h, li, s, e)
    model_landed (&h->lane[li].model, s, e - s, true);
}

/* An answered write or zero (noun): with FUA its bytes are durable on
 * the backend now, with ack=dispatched they are on it.
 */
static bool
settle (struct harness *h, unsigned li, size_t index,
        const struct model_op *op, const char *noun)
{
  bool fua = (op->flags & REQ_FUA) != 0;
  char what[64];

  if (!fua && h->p.config.ack != ACK_DISPATCHED)
    return true;
  snprintf (what, sizeof what, "after %s %s the backend",
            fua ? "a FUA" : "an ack=dispatched", noun);
  model_landed (&h->lane[li].model, op->offset, op->count, fua);
  return check_landed (h, li, index, op->offset, op->offset + op->count,
                       fua ? FAULT_FUA : FAULT_ACKED, what);
}

static bool
check_result (struct harness *h, unsigned li, size_t index,
              const char *call, int r, int err, struct expect e)
{
  if (!e.error && r != 0)
    return fail (h, li, index, FAULT_RESULT, "%s returned %d: %s",
                 call, r, strerror (err));
  if (e.error && r != -1)
    return fail (h, li, index, FAULT_RESULT,
                 "%s returned %d, expected an error (%s)", call, r,
                 e.errno1 ? strerror (e.errno1) : "any");
  if (e.error && e.errno1 && err != e.errno1 && err != e.errno2)
    return fail (h, li, index, FAULT_RESULT,
                 "%s failed with %s, expected %s", call, strerror (err),
                 strerror (e.errno1));
  return true;
}

/* Whether a request the queue should take may have failed with err (r
 * -1): in fault mode, with an errno the backend fails calls with, once
 * it has failed some.  A FLUSH fails while answered data cannot be
 * written or after a failed backend flush; a write, zero or trim fails
 * when it waits for its own write-out (ack=dispatched, FUA), goes
 * around the queue, or finds the queue full while data is failing.
 */
static bool
fault_allowed (struct harness *h, int r, int err)
{
  return h->p.backend.faults && r == -1
    && (err == EIO || err == ENOSPC || err == ENOMEM)
    && backend_failures (h) > 0;
}

/* ------------------------------------------------------------ answers */

/* The granules op's range touches: [first, end). */
static uint64_t
granule_first (const struct model_op *op)
{
  return op->offset / ANSWER_GRANULE;
}

static uint64_t
granule_end (const struct model_op *op)
{
  return (op->offset + op->count + ANSWER_GRANULE - 1) / ANSWER_GRANULE;
}

/* Lane's request over op's range is on its way: until it is answered,
 * those bytes promise nothing.
 */
static void
answers_sent (struct harness *h, const struct model_op *op)
{
  struct answers *a = h->answers;

  if (a == NULL)
    return;
  pthread_mutex_lock (&a->lock);
  for (uint64_t g = granule_first (op); g < granule_end (op); g++)
    a->since[g] = ANSWER_PENDING;
  pthread_mutex_unlock (&a->lock);
}

/* ... and answered now: a write that left buf there, a zero, or (loose)
 * a trim or a failed request.
 */
static void
answers_answered (struct harness *h, const struct model_op *op,
                  const uint8_t *buf, bool loose)
{
  struct answers *a = h->answers;
  uint32_t now;

  if (a == NULL)
    return;
  pthread_mutex_lock (&a->lock);
  now = ++a->clock;
  for (uint64_t g = granule_first (op); g < granule_end (op); g++)
    a->since[g] = now;
  if (op->kind == MOP_WRITE && buf)
    memcpy (&a->want[op->offset], buf, op->count);
  else
    memset (&a->want[op->offset], 0, op->count);
  memset (&a->loose[op->offset], loose || op->kind == MOP_TRIM, op->count);
  pthread_mutex_unlock (&a->lock);
}

/* A FLUSH is sent now: its time on the clock. */
static uint32_t
answers_flush_sent (struct harness *h)
{
  struct answers *a = h->answers;
  uint32_t now;

  if (a == NULL)
    return 0;
  pthread_mutex_lock (&a->lock);
  now = ++a->clock;
  pthread_mutex_unlock (&a->lock);
  return now;
}

/* The lane whose requests write byte pos. */
static unsigned
owner_of (const struct harness *h, uint64_t pos)
{
  if (h->p.stripe)
    return (pos / h->p.stripe) % h->nr_lanes;
  for (unsigned i = 0; i < h->nr_lanes; i++)
    if (pos >= h->lane[i].lo && pos < h->lane[i].hi)
      return i;
  return 0;
}

/* Under a->lock: whether the 8 bytes at i of the chunk at pos need a
 * look of their own: one differs from what was left there, or changed
 * since the last backend flush, and not all of them may hold anything.
 */
static bool
answers_word_suspect (const struct answers *a, uint64_t pos, uint64_t i)
{
  uint64_t got, want, dirty, loose;

  memcpy (&got, &a->buf[i], 8);
  memcpy (&want, &a->want[pos + i], 8);
  memcpy (&dirty, &a->dirty[i], 8);
  memcpy (&loose, &a->loose[pos + i], 8);
  return (got != want || dirty != 0) && loose != BYTES_OF (1);
}

/* Under a->lock: the record of [pos, pos + n), with the backend's bytes
 * in a->buf and its changes since the last backend flush in a->dirty,
 * after a FLUSH sent at `sent` succeeded on lane li (op index).
 */
static bool
check_answers_chunk (struct harness *h, unsigned li, size_t index,
                     uint32_t sent, uint64_t pos, uint64_t n)
{
  struct answers *a = h->answers;

  /* Everything as it was left and durable: no byte need be looked at. */
  if (memcmp (a->buf, &a->want[pos], n) == 0
      && memchr (a->dirty, 1, n) == NULL)
    return true;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t b = pos + i;

    /* Whole words that are fine, or may hold anything, at once. */
    if (i % 8 == 0 && n - i >= 8 && !answers_word_suspect (a, pos, i)) {
      i += 7;
      continue;
    }
    if (a->since[b / ANSWER_GRANULE] >= sent || a->loose[b])
      continue;
    if (a->buf[i] != a->want[b] || a->dirty[i])
      return fail (h, li, index, FAULT_FLUSH,
                   "after a FLUSH on lane %u, byte 0x%" PRIx64 " that"
                   " lane %u was answered for before it was sent %s"
                   " (0x%02x, expected 0x%02x): a FLUSH covers the writes"
                   " answered on every connection", li, b, owner_of (h, b),
                   a->buf[i] != a->want[b] ? "is not on the backend"
                   : "was written without a backend flush after it",
                   a->buf[i], a->want[b]);
  }
  return true;
}

/* After a FLUSH sent at `sent` on lane li succeeded: every byte whose
 * newest request, on any lane, was answered before then is on the
 * backend as that request left it, and no backend write since the last
 * backend flush touched it.  The lock keeps other lanes from sending
 * anything new meanwhile; what they sent before is pending, or newer
 * than the FLUSH, and left alone.
 */
static bool
check_answers (struct harness *h, unsigned li, size_t index, uint32_t sent)
{
  struct answers *a = h->answers;
  bool ok = true;

  if (a == NULL)
    return true;
  pthread_mutex_lock (&a->lock);
  for (uint64_t pos = 0; ok && pos < h->p.disk_size; pos += ANSWER_CHUNK) {
    uint64_t n = MIN (ANSWER_CHUNK, h->p.disk_size - pos);

    test_backend_dirty (h->tb, a->dirty, n, pos);
    if (test_backend_read (h->tb, a->buf, n, pos) == -1)
      ok = fail (h, li, index, FAULT_FLUSH, "backend pread: %m");
    else
      ok = check_answers_chunk (h, li, index, sent, pos, n);
  }
  pthread_mutex_unlock (&a->lock);
  return ok;
}

/* ------------------------------------------------------------ requests */

static const char *const request_calls[MOP_KINDS] = {
  [MOP_WRITE] = "queue_pwrite", [MOP_ZERO] = "queue_zero",
  [MOP_TRIM] = "queue_trim",
};

/* What the queue must answer a write, zero or trim. */
static struct expect
request_expect (const struct harness *h, const struct model_op *op)
{
  struct expect e = expect_for (h, op);
  bool refuse_fast = op->kind == MOP_ZERO && (op->flags & REQ_FAST_ZERO)
    && !test_backend_get (h->tb)->can_fast_zero;

  /* A fast zero the backend cannot do fails at once with ENOTSUP; with
   * a misaligned range too, either error will do.
   */
  if (refuse_fast && !e.error)
    e = (struct expect) { .error = true, .errno1 = ENOTSUP };
  else if (refuse_fast && e.errno1)
    e.errno2 = ENOTSUP;
  return e;
}

/* Sends a write of buf, a zero or a trim through session s: the queue's
 * answer, its errno in *err.
 */
static int
send_request (struct harness *h, struct session *s,
              const struct model_op *op, const uint8_t *buf, int *err)
{
  int r;

  errno = 0;
  switch (op->kind) {
  case MOP_WRITE:
    r = queue_pwrite (h->q, s, buf, op->count, op->offset, op->flags);
    break;
  case MOP_ZERO:
    r = queue_zero (h->q, s, op->count, op->offset, op->flags);
    break;
  default:
    r = queue_trim (h->q, s, op->count, op->offset, op->flags);
  }
  *err = errno;
  return r;
}

static void
count_request (struct lane_counts *n, const struct model_op *op, bool ok)
{
  switch (op->kind) {
  case MOP_WRITE:
    n->writes++;
    n->writes_ok += ok;
    n->write_bytes += ok ? op->count : 0;
    break;
  case MOP_ZERO:
    n->zeros++;
    n->zeros_ok += ok;
    break;
  default:
    n->trims++;
    n->trims_ok += ok;
  }
  n->fua += ok && (op->flags & REQ_FUA);
}

/* A write, zero or trim the fault mode failed: its range may hold
 * anything now, and nothing of it is promised.
 */
static bool
request_failed (struct harness *h, unsigned li, const struct model_op *op)
{
  struct lane *l = &h->lane[li];

  count_request (&l->n, op, false);
  l->n.failed++;
  l->n.fua_failed += (op->flags & REQ_FUA) != 0;
  l->n.write_bytes_failed += op->kind == MOP_WRITE ? op->count : 0;
  model_unspecified (&l->model, op->offset, op->count);
  answers_answered (h, op, NULL, true);
  return true;
}

/* Lane li's write of buf, zero or trim was answered r (errno err), where
 * e was expected: checked, counted, and into the lane's model and the
 * record of answers; with settle_now, what its answer promised about the
 * backend is checked as well (settle).
 */
static bool
request_answered (struct harness *h, unsigned li, size_t index,
                  const struct model_op *op, struct expect e,
                  const uint8_t *buf, int r, int err, bool settle_now)
{
  struct lane *l = &h->lane[li];

  if (!e.error && fault_allowed (h, r, err))
    return request_failed (h, li, op);
  if (!check_result (h, li, index, request_calls[op->kind], r, err, e)) {
    count_request (&l->n, op, false);
    return false;
  }
  count_request (&l->n, op, !e.error);
  if (e.error)
    return true;
  switch (op->kind) {
  case MOP_WRITE:
    model_write (&l->model, op->offset, op->count, buf);
    break;
  case MOP_ZERO:
    model_zero (&l->model, op->offset, op->count);
    break;
  default:
    model_trim (&l->model, op->offset, op->count);
  }
  answers_answered (h, op, buf, false);
  if (!settle_now || op->kind == MOP_TRIM)
    return true;
  return settle (h, li, index, op, op->kind == MOP_WRITE ? "write" : "zero");
}

/* A write, zero or trim of lane li. */
static bool
apply_request (struct harness *h, unsigned li, size_t index,
               const struct model_op *op)
{
  struct lane *l = &h->lane[li];
  struct expect e = request_expect (h, op);
  int r, err;

  if (op->kind == MOP_WRITE)
    pattern_fill (l->buf, op->tag, op->offset, op->count);
  if (!e.error)
    answers_sent (h, op);
  r = send_request (h, l->session, op, l->buf, &err);
  return request_answered (h, li, index, op, e, l->buf, r, err, true);
}

static bool
apply_read (struct harness *h, unsigned li, size_t index,
            const struct model_op *op)
{
  struct lane *l = &h->lane[li];
  struct expect e = expect_for (h, op);
  struct model_mismatch mm;
  int r, err;

  errno = 0;
  r = queue_pread (h->q, l->buf, op->count, op->offset);
  err = errno;
  l->n.reads++;
  if (!check_result (h, li, index, "queue_pread", r, err, e))
    return false;
  if (e.error)
    return true;
  l->n.reads_ok++;
  if (!model_compare (&l->model, l->buf, op->offset, op->count, false, &mm))
    return mismatch (h, li, index, FAULT_READ, "read through the queue", &mm);
  return true;
}

/* Shape: contiguous, ascending, non-empty extents from at or before the
 * request's start, inside the disk, with only the HOLE and ZERO bits.
 */
static bool
check_extent_shape (struct harness *h, unsigned li, size_t index,
                    const struct model_op *op, const struct extent_list *list)
{
  const struct extent *v = list->v;

  if (list->len == 0)
    return fail (h, li, index, FAULT_EXTENTS, "queue_extents: empty list");
  if (v[0].offset > op->offset || v[0].offset + v[0].length <= op->offset)
    return fail (h, li, index, FAULT_EXTENTS,
                 "queue_extents: first extent 0x%" PRIx64 "+%" PRIu64
                 " does not cover the start 0x%" PRIx64,
                 v[0].offset, v[0].length, op->offset);
  for (size_t i = 0; i < list->len; i++) {
    if (v[i].length == 0 || (v[i].type & ~(EXTENT_HOLE | EXTENT_ZERO))
        || v[i].offset + v[i].length > h->p.disk_size
        || (i > 0 && v[i].offset != v[i - 1].offset + v[i - 1].length))
      return fail (h, li, index, FAULT_EXTENTS,
                   "queue_extents: bad extent %zu: 0x%" PRIx64 "+%" PRIu64
                   " type %" PRIu32, i, v[i].offset, v[i].length,
                   v[i].type);
  }
  return true;
}

/* A range reported ZERO must read as zero. */
static bool
check_extent_zeroes (struct harness *h, unsigned li, size_t index,
                     const struct model_op *op,
                     const struct extent_list *list)
{
  struct lane *l = &h->lane[li];

  for (size_t i = 0; i < list->len; i++) {
    const struct extent *x = &list->v[i];
    /* Beyond the request the list is a hint nobody must act on. */
    uint64_t from = MAX (x->offset, op->offset);
    uint64_t to = MIN (x->offset + x->length, op->offset + op->count);
    int64_t pos;

    if (!(x->type & EXTENT_ZERO) || from >= to)
      continue;
    pos = model_first_nonzero (&l->model, from, to - from);
    if (pos >= 0)
      return fail (h, li, index, FAULT_EXTENTS,
                   "queue_extents: extent %zu 0x%" PRIx64 "+%" PRIu64
                   " type %" PRIu32 " claims zeroes, but byte 0x%" PRIx64
                   " holds 0x%02x written by #%" PRIu32,
                   i, x->offset, x->length, x->type, (uint64_t) pos,
                   l->model.data[pos - l->model.base],
                   setter (h, l, pos));
    /* A trimmed byte may read as anything, but once reported as zero
     * it has to go on reading as zero until it is written again.
     */
    model_pin_zero (&l->model, from, to - from);
  }
  return true;
}

static bool
apply_extents (struct harness *h, unsigned li, size_t index,
               const struct model_op *op)
{
  struct expect e = expect_for (h, op);
  struct extent_list list;
  bool ok;
  int r, err;

  extent_list_init (&list);
  errno = 0;
  r = queue_extents (h->q, op->count, op->offset, &list);
  err = errno;
  ok = check_result (h, li, index, "queue_extents", r, err, e);
  if (ok && !e.error)
    ok = check_extent_shape (h, li, index, op, &list)
      && check_extent_zeroes (h, li, index, op, &list);
  extent_list_free (&list);
  return ok;
}

static uint64_t
now_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * SEC + ts.tv_nsec;
}

static bool
apply_flush (struct harness *h, unsigned li, size_t index)
{
  struct lane *l = &h->lane[li];
  uint32_t sent = answers_flush_sent (h);
  uint64_t start = now_ns ();
  int r, err;

  errno = 0;
  r = queue_flush (h->q, l->session);
  err = errno;
  l->n.flushes++;
  if (now_ns () - start > l->n.flush_ns_max)
    l->n.flush_ns_max = now_ns () - start;
  /* A failed FLUSH promises nothing. */
  if (fault_allowed (h, r, err)) {
    l->n.flushes_failed++;
    atomic_store (&h->flush_failed, true);
    return true;
  }
  if (!check_result (h, li, index, "queue_flush", r, err,
                     (struct expect) { .error = false }))
    return false;
  l->n.flushes_after_failure += atomic_load (&h->flush_failed);
  /* Everything this lane was answered before the flush is on the disk,
   * and so is what every other lane was (multi-conn).
   */
  lane_durable (h, li);
  return check_lane_landed (h, li, index, FAULT_FLUSH,
                            "after FLUSH the backend")
    && check_answers (h, li, index, sent);
}

static bool
apply_cache (struct harness *h, unsigned li, size_t index,
             const struct model_op *op)
{
  int r, err;

  errno = 0;
  r = queue_cache (h->q, op->count, op->offset);
  err = errno;
  return check_result (h, li, index, "queue_cache", r, err,
                       expect_for (h, op));
}

/* ------------------------------------------------------------ fua-cut */

/* One request of a MOP_FUA_CUT, on a thread of its own. */
struct side_request {
  struct harness *h;
  struct session *session;
  struct model_op op;
  struct expect e;
  uint8_t *buf;                 /* a write's data */
  struct test_thread thread;
};

static int
side_request_run (void *arg)
{
  struct side_request *s = arg;
  int err, r;

  r = send_request (s->h, s->session, &s->op, s->buf, &err);
  errno = err;
  return r;
}

/* Requests of op's kind the queue has taken so far (stats). */
static uint64_t
requests_taken (struct harness *h, enum model_op_kind kind, bool fua)
{
  struct queue_stats st;

  harness_queue_stats (h, &st);
  if (fua)
    return st.fua_requests;
  return st.op[kind == MOP_ZERO ? OP_ZERO : OP_WRITE].requests;
}

/* Whether the first write that reached the backend's gate since the
 * first `before` writes covers [offset, offset + count).
 */
static bool
gate_holds_range (struct harness *h, uint64_t before, uint64_t offset,
                  uint64_t count)
{
  struct tb_call *calls = calloc (before + 1, sizeof *calls);
  bool covers = false;

  if (calls && test_backend_calls (h->tb, TB_PWRITEV, calls, before + 1)
      > before) {
    const struct tb_call *c = &calls[before];

    covers = c->offset <= offset && c->offset + c->count >= offset + count;
  }
  free (calls);
  return covers;
}

/* The three requests' answers, oldest first, into the lane's model. */
static bool
fua_cut_answers (struct harness *h, unsigned li, size_t index,
                 struct side_request *side, size_t n)
{
  bool ok = true;

  for (size_t i = 0; ok && i < n; i++)
    /* Only the newest one's promise still stands as it was made: the
     * older write's bytes are all newer now, and the FUA write's
     * promise is checked as it stood when it was answered.
     */
    ok = request_answered (h, li, index, &side[i].op, side[i].e,
                           side[i].buf, side[i].thread.result,
                           side[i].thread.err, i + 1 == n);
  return ok;
}

/* Sends the three requests of a MOP_FUA_CUT: the older write, held at
 * the backend's gate; the FUA write, queued behind it; the newer
 * request that cuts the FUA write in the queue; then opens the gate.
 * Sets *held when the older write was the one the gate held.  False
 * when one of them did not get as far in time (gate open again).
 */
static bool
fua_cut_send (struct harness *h, struct side_request *side, bool *held)
{
  const struct model_op *older = &side[0].op, *cut = &side[2].op;
  uint64_t entered = test_backend_entered (h->tb, TB_PWRITEV);
  uint64_t fua_before = requests_taken (h, MOP_WRITE, true);
  /* The older write and the FUA write count too if the cut writes. */
  uint64_t cut_before = requests_taken (h, cut->kind, false)
    + (cut->kind == MOP_WRITE ? 2 : 0);
  bool ok;

  test_backend_block (h->tb, TB_PWRITEV);
  ok = test_thread_start (&side[0].thread, side_request_run, &side[0]) == 0
    && TEST_WAIT_FOR (test_backend_entered (h->tb, TB_PWRITEV) > entered);
  *held = ok && gate_holds_range (h, entered, older->offset, older->count);
  ok = ok
    && test_thread_start (&side[1].thread, side_request_run, &side[1]) == 0
    && TEST_WAIT_FOR (requests_taken (h, MOP_WRITE, true) >= fua_before + 2)
    && test_thread_start (&side[2].thread, side_request_run, &side[2]) == 0
    && TEST_WAIT_FOR (requests_taken (h, cut->kind, false) > cut_before);
  test_backend_release (h->tb, TB_PWRITEV);
  return ok;
}

/* MOP_FUA_CUT: a FUA write waits in the queue behind an older write over
 * its bytes that the backend's gate holds in flight, and a newer write
 * or zero cuts part of it there (front, back or middle).  When the FUA
 * write is answered its whole range must be durable, holding it and the
 * newer request's bytes: where its pieces go out with FUA (a backend
 * whose writes carry it) the newer one may go out without, so only a
 * backend flush after that keeps the promise (piece_cut, issue 39).
 * The backend is read the moment the FUA write is answered; the three
 * answers go into the model once all are in, oldest first.  One lane
 * only: the gate holds every lane's writes.
 */
static bool
apply_fua_cut (struct harness *h, unsigned li, size_t index,
               const struct model_op *op)
{
  struct lane *l = &h->lane[li];
  struct model_op parts[MODEL_OP_MAX_PARTS];
  struct side_request side[MODEL_OP_MAX_PARTS];
  size_t n = model_op_parts (op, parts);
  /* What the backend held when the FUA write was answered (the lane's
   * scratch serves the other requests' checks).
   */
  uint8_t *held_data = malloc (op->count), *held_dirty = malloc (op->count);
  bool ok = true, held = false;

  if (h->nr_lanes > 1)
    return fail (h, li, index, FAULT_SETUP, "fua-cut holds every write at"
                 " the gate: one lane only");
  if (op->cut_offset < op->offset || op->cut_count == 0
      || op->cut_offset + op->cut_count > op->offset + op->count
      || (op->cut_kind != MOP_WRITE && op->cut_kind != MOP_ZERO))
    return fail (h, li, index, FAULT_SETUP, "fua-cut: the cut must be a"
                 " write or zero inside the FUA write");
  if (held_data == NULL || held_dirty == NULL)
    ok = fail (h, li, index, FAULT_SETUP, "out of memory");
  for (size_t i = 0; i < n; i++) {
    side[i] = (struct side_request) {
      .h = h, .session = l->session, .op = parts[i],
      .e = request_expect (h, &parts[i]), .thread = TEST_THREAD_INIT,
    };
    if (side[i].e.error)
      ok = fail (h, li, index, FAULT_SETUP, "fua-cut: the backend refuses"
                 " a range of it");
    if (parts[i].kind == MOP_WRITE
        && (side[i].buf = malloc (parts[i].count)) != NULL)
      pattern_fill (side[i].buf, parts[i].tag, parts[i].offset,
                    parts[i].count);
    else if (parts[i].kind == MOP_WRITE)
      ok = fail (h, li, index, FAULT_SETUP, "out of memory");
  }
  if (ok && !fua_cut_send (h, side, &held))
    ok = fail (h, li, index, FAULT_RESULT, "fua-cut: a request did not"
               " reach the backend or the queue within %d ms",
               TB_TIMEOUT_MS);
  /* The FUA write's answer, and what the backend held right then. */
  if (ok && !test_thread_wait (&side[1].thread))
    ok = fail (h, li, index, FAULT_RESULT, "fua-cut: the FUA write was not"
               " answered within %d ms", TB_TIMEOUT_MS);
  if (ok) {
    test_backend_dirty (h->tb, held_dirty, op->count, op->offset);
    if (test_backend_read (h->tb, held_data, op->count, op->offset) == -1)
      ok = fail (h, li, index, FAULT_SETUP, "backend pread: %m");
  }
  for (size_t i = 0; i < n; i++)
    if (ok && !test_thread_wait (&side[i].thread))
      ok = fail (h, li, index, FAULT_RESULT, "fua-cut: a request was not"
                 " answered within %d ms", TB_TIMEOUT_MS);
  if (!ok)
    test_backend_release_all (h->tb);
  for (size_t i = 0; i < n; i++)
    test_thread_join (&side[i].thread);
  ok = ok && fua_cut_answers (h, li, index, side, n);
  if (ok && side[1].thread.result == 0) {
    model_landed (&l->model, op->offset, op->count, true);
    ok = check_landed_bytes (h, li, index, op->offset, op->count,
                             held_data, held_dirty, FAULT_FUA, "when a FUA"
                             " write cut in the queue was answered, the"
                             " backend");
  }
  l->n.fua_cuts++;
  l->n.fua_cuts_held += held;
  for (size_t i = 0; i < n; i++)
    free (side[i].buf);
  free (held_data);
  free (held_dirty);
  return ok;
}

static int
log_append (struct lane *l, const struct model_op *op)
{
  if (l->nr_ops == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 256;
    struct model_op *v = realloc (l->log, cap * sizeof *v);

    if (v == NULL)
      return -1;
    l->log = v;
    l->cap = cap;
  }
  l->log[l->nr_ops++] = *op;
  return 0;
}

static void
print_op (struct harness *h, unsigned li, const struct model_op *op)
{
  char buf[160];

  model_op_format (op, buf, sizeof buf);
  flockfile (stdout);
  printf ("# lane %u: %s\n", li, buf);
  funlockfile (stdout);
}

bool
harness_apply (struct harness *h, unsigned li, const struct model_op *op)
{
  struct lane *l = &h->lane[li];
  size_t index = l->nr_ops;
  bool ok = true;

  if (atomic_load (&h->failed) || h->finished)
    return false;
  if (log_append (l, op) == -1)
    return fail (h, li, index, FAULT_SETUP, "out of memory for the op log");
  if (h->p.verbose)
    print_op (h, li, op);
  if ((op->kind == MOP_READ || op->kind == MOP_WRITE
       || op->kind == MOP_FUA_CUT) && op->count > MAX_IO)
    return fail (h, li, index, FAULT_SETUP,
                 "ops larger than %" PRIu64 " bytes do not fit the harness",
                 MAX_IO);
  switch (op->kind) {
  case MOP_READ: ok = apply_read (h, li, index, op); break;
  case MOP_WRITE:
  case MOP_ZERO:
  case MOP_TRIM: ok = apply_request (h, li, index, op); break;
  case MOP_FLUSH: ok = apply_flush (h, li, index); break;
  case MOP_EXTENTS: ok = apply_extents (h, li, index, op); break;
  case MOP_CACHE: ok = apply_cache (h, li, index, op); break;
  case MOP_SLEEP: test_sleep_us (op->count); break;
  case MOP_FUA_CUT: ok = apply_fua_cut (h, li, index, op); break;
  default: abort ();
  }
  if (ok && (index + 1) % LANDED_CHECK_EVERY == 0)
    ok = check_lane_landed (h, li, index, FAULT_LANDED,
                            "durable data changed later: the backend");
  atomic_fetch_add (&harness_progress, 1);
  return ok && !atomic_load (&h->failed);
}

/* A FLUSH on lane 0 covers what every lane was answered before it:
 * the queue is shared by all connections (multi-conn).
 */
bool
harness_flush_all (struct harness *h)
{
  struct lane *l0 = &h->lane[0];
  /* After a fault mode the first FLUSH may report a failed backend
   * flush that lane 0's session was not told of yet; the next one must
   * succeed, since every write goes through now.
   */
  unsigned tries = h->p.backend.faults ? 2 : 1;
  int r, err;

  if (atomic_load (&h->failed) || h->finished)
    return false;
  h->recovered = true;
  test_backend_faults_off (h->tb);
  for (unsigned t = 1;; t++) {
    errno = 0;
    r = queue_flush (h->q, l0->session);
    err = errno;
    l0->n.flushes++;
    if (r == 0 || t == tries || !fault_allowed (h, r, err))
      break;
    l0->n.flushes_failed++;
  }
  if (!check_result (h, 0, SIZE_MAX, h->p.backend.faults
                     ? "queue_flush after the backend recovered"
                     : "queue_flush", r, err,
                     (struct expect) { .error = false }))
    return false;
  for (unsigned i = 0; i < h->nr_lanes; i++) {
    lane_durable (h, i);
    if (!check_lane_landed (h, i, SIZE_MAX, FAULT_FLUSH,
                            "after a FLUSH on lane 0 the backend"))
      return false;
  }
  return true;
}

/* ------------------------------------------------------------ finish */

struct stat_rule {
  const char *name;
  uint64_t v, lo, hi;
};

/* The counters must agree with what the lanes sent. */
static bool
check_stats (struct harness *h)
{
  struct lane_counts t = { 0 };
  struct queue_stats s;

  for (unsigned i = 0; i < h->nr_lanes; i++) {
    const struct lane_counts *n = &h->lane[i].n;

    t.reads_ok += n->reads_ok; t.reads += n->reads;
    t.writes_ok += n->writes_ok; t.writes += n->writes;
    t.write_bytes += n->write_bytes;
    t.zeros_ok += n->zeros_ok; t.zeros += n->zeros;
    t.trims_ok += n->trims_ok; t.trims += n->trims;
    t.flushes += n->flushes; t.fua += n->fua;
    t.fua_failed += n->fua_failed;
    t.write_bytes_failed += n->write_bytes_failed;
  }
  queue_stats_snapshot (h->q, &s);
  /* A failed request may have been counted or not, and a write-back
   * that failed is sent again, merged anew: with faults, backend bytes
   * and merges have no upper bound.
   */
  uint64_t no_bound = h->p.backend.faults ? UINT64_MAX : 0;

  /* Refused requests may or may not be counted: [ok, tried]. */
  const struct stat_rule rules[] = {
    { "queued_requests after drain", s.queued_requests, 0, 0 },
    { "queued_bytes after drain", s.queued_bytes, 0, 0 },
    { "in_flight after drain", s.in_flight, 0, 0 },
    { "read requests", s.op[OP_READ].requests, t.reads_ok, t.reads },
    { "write requests", s.op[OP_WRITE].requests, t.writes_ok, t.writes },
    { "zero requests", s.op[OP_ZERO].requests, t.zeros_ok, t.zeros },
    { "trim requests", s.op[OP_TRIM].requests, t.trims_ok, t.trims },
    { "write request_bytes", s.op[OP_WRITE].request_bytes,
      t.write_bytes, t.write_bytes + t.write_bytes_failed },
    /* Merging never writes a byte no request wrote. */
    { "write backend_bytes", s.op[OP_WRITE].backend_bytes,
      0, MAX (t.write_bytes + t.write_bytes_failed, no_bound) },
    { "flushes (FLUSH requests)", s.flushes, t.flushes, t.flushes },
    { "fua_requests", s.fua_requests, t.fua, t.fua + t.fua_failed },
    /* merges count requests absorbed into another's operation, and
     * unplug-thresh=1 means no merging at all (queue.h).
     */
    { "write merges", s.op[OP_WRITE].merges, 0,
      h->p.config.unplug_thresh <= 1 ? 0
      : MAX (s.op[OP_WRITE].requests, no_bound) },
    { "zero merges", s.op[OP_ZERO].merges, 0,
      h->p.config.unplug_thresh <= 1 ? 0
      : MAX (s.op[OP_ZERO].requests, no_bound) },
    { "trim merges", s.op[OP_TRIM].merges, 0,
      h->p.config.unplug_thresh <= 1 ? 0
      : MAX (s.op[OP_TRIM].requests, no_bound) },
  };

  for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
    const struct stat_rule *r = &rules[i];

    if (r->v < r->lo || r->v > r->hi)
      return fail (h, 0, SIZE_MAX, FAULT_STATS,
                   "stats: %s is %" PRIu64 ", expected %" PRIu64
                   "..%" PRIu64, r->name, r->v, r->lo, r->hi);
  }
  return true;
}

/* After the drain every byte of [from, to), which lane li owns, is what
 * its model says, and a backend flush came after the last write there.
 */
static bool
check_drained_range (struct harness *h, unsigned li, uint64_t from,
                     uint64_t to)
{
  struct lane *l = &h->lane[li];

  for (uint64_t pos = from; pos < to; pos += MAX_IO) {
    uint64_t n = MIN (MAX_IO, to - pos);
    struct model_mismatch mm;
    const uint8_t *d;

    test_backend_dirty (h->tb, l->dirty, n, pos);
    if ((d = memchr (l->dirty, 1, n)) != NULL)
      return fail (h, li, SIZE_MAX, FAULT_DRAIN,
                   "after queue_stop byte 0x%" PRIx64 " is not durable:"
                   " no backend flush after its write",
                   pos + (d - l->dirty));
    if (test_backend_read (h->tb, l->buf, n, pos) == -1)
      return fail (h, li, SIZE_MAX, FAULT_DRAIN, "backend pread: %m");
    if (!model_compare (&l->model, l->buf, pos, n, false, &mm))
      return mismatch (h, li, SIZE_MAX, FAULT_DRAIN,
                       "after queue_stop the backend", &mm);
  }
  return true;
}

/* After the drain every byte of the backend is what the model of the
 * lane that owns it says.
 */
static bool
check_drained (struct harness *h)
{
  for (unsigned i = 0; i < h->nr_lanes; i++)
    FOR_EACH_OWN_SPAN (h, i, s, e)
      if (!check_drained_range (h, i, s, e))
        return false;
  return true;
}

/* A run in fault mode ends with the backend working again and a FLUSH
 * that succeeds (harness_flush_all), so that the drain has nothing to
 * give up and the comparison is exact.  queue_stop says whether it lost
 * answered data.
 */
bool
harness_finish (struct harness *h)
{
  int stopped;

  if (h->finished || h->q == NULL)
    return !atomic_load (&h->failed);
  if (h->p.backend.faults && !h->recovered)
    harness_flush_all (h);
  h->finished = true;
  /* A run that failed on the way drains with a working backend too. */
  test_backend_faults_off (h->tb);
  stopped = queue_stop (h->q);
  test_backend_stopped (h->tb);
  if (stopped != 0)
    fail (h, 0, SIZE_MAX, FAULT_DRAIN, "queue_stop says answered data was"
          " lost: the final write-out failed, or an error was never"
          " reported");
  if (test_backend_in_flight (h->tb) > 0)
    fail (h, 0, SIZE_MAX, FAULT_BACKEND,
          "queue_stop returned with %u backend operations in flight",
          test_backend_in_flight (h->tb));
  if (!atomic_load (&h->failed))
    check_drained (h);
  if (!atomic_load (&h->failed))
    check_stats (h);
  return !atomic_load (&h->failed);
}

bool
harness_failed (const struct harness *h)
{
  return atomic_load (&h->failed);
}

void
harness_queue_stats (const struct harness *h, struct queue_stats *out)
{
  if (h->q)
    queue_stats_snapshot (h->q, out);
  else
    memset (out, 0, sizeof *out);
}

uint64_t
harness_max_flush_ns (const struct harness *h)
{
  uint64_t max = 0;

  for (unsigned i = 0; i < h->nr_lanes; i++)
    if (h->lane[i].n.flush_ns_max > max)
      max = h->lane[i].n.flush_ns_max;
  return max;
}

void
harness_tally (const struct harness *h, struct harness_tally *t)
{
  static const enum tb_op kinds[] = { TB_PWRITEV, TB_ZERO, TB_TRIM,
                                      TB_FLUSH };

  *t = (struct harness_tally) { 0 };
  for (size_t i = 0; h->tb && i < sizeof kinds / sizeof kinds[0]; i++)
    t->backend_failures += test_backend_failed (h->tb, kinds[i]);
  for (unsigned i = 0; i < h->nr_lanes; i++) {
    const struct lane_counts *n = &h->lane[i].n;

    t->requests_failed += n->failed;
    t->flushes_failed += n->flushes_failed;
    t->flushes_after_failure += n->flushes_after_failure;
    t->fua_cuts += n->fua_cuts;
    t->fua_cuts_held += n->fua_cuts_held;
  }
}

enum harness_fault
harness_fault (const struct harness *h, unsigned *lane, size_t *op_index)
{
  if (lane)
    *lane = h->fault_lane;
  if (op_index)
    *op_index = h->fault_op;
  return h->fault;
}

const char *
harness_why (const struct harness *h)
{
  return h->why;
}

const struct model_op *
harness_lane_ops (const struct harness *h, unsigned lane, size_t *n)
{
  *n = h->lane[lane].nr_ops;
  return h->lane[lane].log;
}

void
harness_report (const struct harness *h, FILE *f, size_t last_ops)
{
  const struct lane *l = &h->lane[h->fault_lane];
  size_t end = h->fault_op == SIZE_MAX ? l->nr_ops : h->fault_op + 1;
  size_t start = end > last_ops ? end - last_ops : 0;
  char buf[512];

  if (h->fault == FAULT_NONE)
    return;
  harness_params_format (&h->p, buf, sizeof buf);
  fprintf (f, "# %s fault on lane %u ", harness_fault_names[h->fault],
           h->fault_lane);
  if (h->fault_op == SIZE_MAX)
    fprintf (f, "after all %zu ops (at the end)\n", l->nr_ops);
  else
    fprintf (f, "at op index %zu\n", h->fault_op);
  fprintf (f, "#   %s\n#   config: %s\n", h->why, buf);
  fprintf (f, "#   ops %zu..%zu of lane %u:\n", start, end - 1,
           h->fault_lane);
  for (size_t i = start; i < end && i < l->nr_ops; i++) {
    model_op_format (&l->log[i], buf, sizeof buf);
    fprintf (f, "#     [%zu] %s\n", i, buf);
  }
}

void
harness_free (struct harness *h)
{
  if (h == NULL)
    return;
  if (h->q) {
    harness_finish (h);
    /* The loop must stop before the queue (and its timer) goes. */
    timer_service_free (h->ts);
    queue_free (h->q);
  }
  else
    timer_service_free (h->ts);
  for (unsigned i = 0; i < h->nr_lanes; i++)
    lane_free (&h->lane[i]);
  for (unsigned i = 0; i < h->nr_sessions; i++)
    session_free (h->session[i]);
  answers_free (h->answers);
  pthread_mutex_destroy (&h->lock);
  free (h);
}

/* ------------------------------------------------------------ runs */

static struct run_result
run_end (struct harness *h, FILE *report)
{
  struct run_result r = { .fault = FAULT_SETUP };

  if (h == NULL)
    return r;
  harness_finish (h);
  r.fault = harness_fault (h, NULL, &r.op_index);
  r.ops_applied = h->lane[0].nr_ops;
  harness_queue_stats (h, &r.stats);
  r.max_flush_ns = harness_max_flush_ns (h);
  harness_tally (h, &r.tally);
  if (r.fault != FAULT_NONE && report)
    harness_report (h, report, 40);
  harness_free (h);
  return r;
}

struct lane_job {
  struct harness *h;
  unsigned lane;
  uint64_t seed;
  size_t max_ops;
};

static void *
lane_main (void *arg)
{
  struct lane_job *job = arg;
  struct op_generator gen;
  struct byte_source src;
  struct model_op op;

  byte_source_seed (&src, job->seed * 64 + job->lane);
  harness_lane_generator (job->h, job->lane, &gen);
  for (size_t i = 0; i < job->max_ops && !harness_failed (job->h); i++)
    if (!op_generator_next (&gen, &src, &op)
        || !harness_apply (job->h, job->lane, &op))
      break;
  return NULL;
}

struct run_result
run_threaded (const struct harness_params *p, uint64_t seed, size_t max_ops,
              FILE *report)
{
  struct lane_job jobs[HARNESS_MAX_LANES];
  pthread_t threads[HARNESS_MAX_LANES];
  struct harness *h = harness_new (p);
  unsigned started = 0;

  if (h == NULL)
    return run_end (h, report);
  for (; !harness_failed (h) && started < h->nr_lanes; started++) {
    jobs[started] = (struct lane_job) {
      .h = h, .lane = started, .seed = seed, .max_ops = max_ops,
    };
    if (pthread_create (&threads[started], NULL, lane_main,
                        &jobs[started]) != 0) {
      fail (h, started, 0, FAULT_SETUP, "pthread_create failed");
      break;
    }
  }
  for (unsigned i = 0; i < started; i++)
    pthread_join (threads[i], NULL);
  harness_flush_all (h);
  return run_end (h, report);
}

struct run_result
run_from_source (const struct harness_params *p, struct byte_source *src,
                 size_t max_ops, uint64_t max_sleep_us, FILE *report)
{
  struct harness *h = harness_new (p);
  struct op_generator g;
  struct model_op op;

  if (h && !harness_failed (h)) {
    harness_lane_generator (h, 0, &g);
    g.max_sleep_us = max_sleep_us;
    for (size_t i = 0; i < max_ops; i++)
      if (!op_generator_next (&g, src, &op) || !harness_apply (h, 0, &op))
        break;
  }
  return run_end (h, report);
}

struct run_result
run_ops (const struct harness_params *p, const struct model_op *ops,
         size_t n, FILE *report)
{
  struct harness *h = harness_new (p);

  if (h && !atomic_load (&h->failed))
    for (size_t i = 0; i < n; i++)
      if (!harness_apply (h, 0, &ops[i]))
        break;
  return run_end (h, report);
}

struct run_result
run_fuzz_input (const uint8_t *data, size_t size, size_t max_ops,
                bool verbose, FILE *report)
{
  struct harness_params p;
  struct byte_source src;

  byte_source_buffer (&src, data, size);
  harness_params_choose_all (&p, &src);
  p.verbose = verbose;
  /* Long sleeps would only slow the fuzzer down. */
  return run_from_source (&p, &src, max_ops, 200, report);
}
