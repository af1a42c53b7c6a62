#!/usr/bin/env bats
# Remote NBD disks (nbd=URI): a plugq disk whose backend is another nbdkit
# on a unix socket.  The remote's own backing file is read directly to see
# what landed where, and nbdkit's log filter on the remote records what
# plugq sent it (merged writes, FLUSH, Zero vs Write, Trim).  Covers
# pass-through and emulation of zero and trim, extents, size and block
# size from the remote, a volume of two remotes, a remote write error
# (ack=queued latches it, ack=dispatched returns it), a remote short of
# memory for a while (the write-out is retried), a remote that dies,
# reconnect= to a new remote on the same socket (refused while it offers
# less than the first one did, taken but not widened when it offers
# more; writes the restarted remote had not made durable written again,
# writes in flight or submitted while it was away sent to the new one),
# and bad URIs.

load remotes

setup() {
  remote_setup
}

teardown() {
  remote_teardown
}

# ---------------------------------------------------------------- data path

@test "nbd: reads, writes, FLUSH and FUA reach the remote's file at the right offsets" {
  prefill "$T/r.img" $((4 * MiB)) 7
  start_remote r --filter=log file "$T/r.img" logfile="$T/r.log"
  start_plugq "${LONG_QUEUE[@]}" disk=r nbd="$(ruri r)"
  run nbdinfo --size "$(uri r)"
  assert_success
  assert_output $((4 * MiB))
  pyrun "$T/r.img" "$T/r.log" <<'EOF'
import sys, nbd
from nbdremote import *
R, LOG = sys.argv[1:3]
r = pattern(7, 4 * MiB)
h = connect("r")
expect_read(h, 0, r, "whole disk read through the remote")
expect_read(h, 3 * MiB + 17, r[3 * MiB + 17:3 * MiB + 1017], "unaligned read")

w = [(0, pattern(1, 4096)), (MiB + 123, pattern(2, 1000)),
     (4 * MiB - 512, pattern(3, 512)), (2 * MiB, pattern(4, 256 * KiB))]
for off, d in w:
    h.pwrite(d, off)
for off, d in w:
    expect_read(h, off, d, "read-back of a queued write")
    expect_file(R, off, r[off:off + len(d)],
                "remote file before FLUSH (the write must still be queued)")
assert not log_calls(LOG, "Write"), "writes sent before FLUSH: %s" % show(log_calls(LOG))
h.flush()
for off, d in w:
    expect_file(R, off, d, "remote file after FLUSH")
expect_file(R, 4096, r[4096:MiB + 123], "remote file between the writes")
expect_file(R, MiB + 1123, r[MiB + 1123:2 * MiB], "remote file between the writes")
calls = log_calls(LOG)
writes = [c for c in calls if c[0] == "Write"]
want = sorted((off, off + len(d)) for off, d in w)
assert ranges(writes) == want, \
    "remote writes cover %r, expected exactly %r" % (ranges(writes), want)
last_write = max(i for i, c in enumerate(calls) if c[0] == "Write")
assert any(c[0] == "Flush" for c in calls[last_write:]), \
    "no Flush reached the remote after the writes: %s" % show(calls)

# FUA: durable on the remote when answered (a FUA write, or a write then
# a Flush, before the answer).
n = len(calls)
d = pattern(5, 8192)
h.pwrite(d, 3 * MiB, nbd.CMD_FLAG_FUA)
expect_file(R, 3 * MiB, d, "remote file right after the FUA answer")
calls = log_calls(LOG)[n:]
wi = [i for i, c in enumerate(calls) if c[0] == "Write"
      and c[1]["offset"] <= 3 * MiB < c[1]["offset"] + c[1]["count"]]
assert wi, "the FUA write did not reach the remote: %s" % show(calls)
assert calls[wi[-1]][1].get("fua") == "1" or \
    any(c[0] == "Flush" for c in calls[wi[-1]:]), \
    "FUA write reached the remote neither with fua=1 nor followed by a Flush: %s" % show(calls)
h.shutdown()
EOF
}

@test "nbd: 64 pipelined sequential 4K writes reach the remote as a few large NBD writes" {
  make_file "$T/r.img" 4M
  make_file "$T/q.img" 4M
  start_remote r --filter=log file "$T/r.img" logfile="$T/r.log"
  start_remote q --filter=log file "$T/q.img" logfile="$T/q.log"
  # r: default queue; q: plugged until FLUSH.
  start_plugq disk=r nbd="$(ruri r)" disk=q nbd="$(ruri q)" "${LONG_QUEUE[@]}"
  pyrun "$T/r.img" "$T/r.log" "$T/q.img" "$T/q.log" <<'EOF'
import sys
from nbdremote import *
data = [pattern(i, 4096) for i in range(64)]
for name, path, log in (("r", sys.argv[1], sys.argv[2]), ("q", sys.argv[3], sys.argv[4])):
    h = connect(name)
    aio_pwrite_all(h, [(d, MiB + i * 4096) for i, d in enumerate(data)])
    if name == "q":
        assert not log_calls(log, "Write"), \
            "q: writes sent before FLUSH: %s" % show(log_calls(log))
    h.flush()
    expect_file(path, MiB, b"".join(data), "%s: remote file after FLUSH" % name)
    calls = log_calls(log)
    writes = [c for c in calls if c[0] == "Write"]
    assert ranges(writes) == [(MiB, MiB + 256 * KiB)], \
        "%s: remote writes cover %r: %s" % (name, ranges(writes), show(writes))
    total = sum(f["count"] for _, f in writes)
    assert total == 256 * KiB, \
        "%s: remote got %d bytes for 256K of writes: %s" % (name, total, show(writes))
    if name == "r":
        # Default queue (unplug-thresh=16).  nbdkit's worker threads may
        # hand the pipelined writes to plugq out of order, so allow some
        # fragments, but far fewer NBD writes than client writes.
        assert len(writes) <= 16, \
            "r: 64 pipelined 4K writes became %d remote writes: %s" % (len(writes), show(writes))
    else:
        # All 64 were queued when the FLUSH came and went out as one
        # merged write.  NBD has no vectored write: each of the stream's
        # 64K pieces is an NBD write of its own (runs of smaller pieces
        # are gathered into one), so 256K reach the remote as 4 or a few
        # more where out-of-order arrivals cut the pieces.
        assert len(writes) <= 8, \
            "q: 64 queued sequential 4K writes became %d remote writes: %s" \
            % (len(writes), show(writes))
    last = max(i for i, c in enumerate(calls) if c[0] == "Write")
    assert any(c[0] == "Flush" for c in calls[last:]), \
        "%s: no Flush after the writes: %s" % (name, show(calls))
    h.shutdown()
EOF
}

@test "nbd: ack=dispatched writers go one by one at depth 1 and merge at depth behind a busy remote" {
  make_file "$T/r.img" 4M
  # A write is held only while all 16 of the remote's slots are taken
  # (behind_busy_stream): 64 nbdkit threads let the 64 pipelined writes
  # below reach plugq at once, and the remote's delay must outlast the
  # arrivals even on a loaded machine.
  start_remote r --filter=log --filter=delay file "$T/r.img" \
    logfile="$T/r.log" delay-write=20ms
  start_plugq --threads=64 -- disk=r nbd="$(ruri r)" ack=dispatched \
    unplug-delay=20s stats="$T/stats.json" stats-interval=20ms
  pyrun "$T/r.img" "$T/r.log" "$T/stats.json" <<'EOF'
import sys
from nbdremote import *
img, log, stats = sys.argv[1:]
h = connect("r")
# Depth 1: each write is answered before the next, behind a 20 s plug.
one = [pattern(i, 4096) for i in range(16)]
for i, d in enumerate(one):
    h.pwrite(d, i * 4096)
n1 = len(log_calls(log, "Write"))
assert n1 == 16, "16 writes at depth 1 became %d remote writes" % n1
# Depth: 64 pipelined sequential writes while the remote is busy.
deep = [pattern(100 + i, 4096) for i in range(64)]
aio_pwrite_all(h, [(d, MiB + i * 4096) for i, d in enumerate(deep)])
n2 = len(log_calls(log, "Write")) - n1
expect_file(img, 0, b"".join(one), "remote file at depth 1")
expect_file(img, MiB, b"".join(deep), "remote file at depth")
# nbdkit's threads may hand plugq the pipelined writes out of order, and
# a write that continues nothing goes at once: allow for that, but the
# held ones must have merged.
assert n2 <= 48, "64 pipelined waiting writes became %d remote writes" % n2
# Whether a write is held behind the stream (waits_behind_stream) or
# just finds every slot taken depends on the order nbdkit's threads hand
# them over; either way the waiting writes merge.
def merged():
    doc = load_stats(stats)
    return stat(doc, "r", "waiting_merged"), stat(doc, "r", "waits_behind_stream")
poll(lambda: merged()[0] > 0, 10, "merged waiting writes counted in the stats")
print("# depth 1: 16 remote writes; depth: 64 writes became %d; "
      "waiting_merged, waits_behind_stream = %s" % (n2, merged()))
h.shutdown()
EOF
}

@test "nbd: stream reads merge at depth on a remote that queues reads, never at depth 1 nor on a remote with room for them" {
  # a: one thread, so reads at depth wait at the remote for those ahead;
  # b: a thread per read, so at depth each takes what one alone takes.
  # A stream read waits to merge only where reads at depth are slower
  # than the fastest read (queue_read_depth.c); 5 ms per read keeps b's
  # reads at depth within that margin on a loaded machine.
  start_remote a --threads=1 --filter=delay memory 16M delay-read=5ms
  start_remote b --filter=delay memory 16M delay-read=5ms
  # read-ahead=off: the chains, not the read-ahead windows (next test).
  start_plugq read-ahead=off disk=a nbd="$(ruri a)" disk=b nbd="$(ruri b)" \
    stats="$T/stats.json" stats-interval=20ms
  # Under ASan the server itself is slow enough at depth 16 that b's reads
  # take more than 1.5 times as long as alone, as plugq measures them, and
  # the rule rightly merges them (two CI runs: 1 and 9 waited): there the
  # "room for every read" side cannot be shown, only a's.
  pyrun "$T/stats.json" "${PLUGQ_SANITIZED:-}" <<'EOF'
import sys, nbd
from nbdremote import *
stats = sys.argv[1]
sanitized = len(sys.argv) > 2 and sys.argv[2] != ""
N, DEPTH = 256, 16
data = pattern(7, N * 4096)

def reads_at(h, depth):
    """N sequential 4K reads in order, depth in flight at most."""
    bufs, cookies = [], []
    while len(cookies) < N or h.aio_in_flight() > 0:
        while len(cookies) < N and h.aio_in_flight() < depth:
            b = nbd.Buffer(4096)
            bufs.append(b)
            cookies.append(h.aio_pread(b, len(cookies) * 4096))
        h.poll(-1)
    for c in cookies:
        if not h.aio_command_completed(c):
            raise AssertionError("read %d did not complete" % c)
    return b"".join(b.to_bytearray() for b in bufs)

def counters(disk, reads):
    def seen():
        return stat(load_stats(stats), disk, "read_time_us.count") >= reads
    poll(seen, 10, "%d reads of %s counted in the stats" % (reads, disk))
    doc = load_stats(stats)
    return stat(doc, disk, "reads_waited"), stat(doc, disk, "read.merges")

got = {}
for disk in ("a", "b"):
    h = connect(disk)
    h.pwrite(data, 0)
    h.flush()
    expect_bytes(reads_at(h, 1), data, "%s: reads at depth 1" % disk)
    waited, merges = counters(disk, N)
    assert (waited, merges) == (0, 0), \
        "%s: at depth 1 %d reads waited, %d merged" % (disk, waited, merges)
    expect_bytes(reads_at(h, DEPTH), data, "%s: reads at depth %d" % (disk, DEPTH))
    got[disk] = counters(disk, 2 * N)
    h.shutdown()
print("# at depth %d: reads waited, merged: a %s, b %s" % (DEPTH, got["a"], got["b"]))
assert got["a"][0] > 0 and got["a"][1] > 0, \
    "a (one thread): reads at depth waited %d, merged %d" % got["a"]
assert sanitized or got["b"] == (0, 0), \
    "b (room for every read): reads at depth waited %d, merged %d" % got["b"]
EOF
}

@test "nbd: a stream of reads is read ahead, at depth 1 and 16, and a write from another connection is read at once" {
  prefill "$T/r.img" $((4 * MiB)) 9
  start_remote r --filter=log file "$T/r.img" logfile="$T/r.log"
  start_plugq read-ahead=256K disk=r nbd="$(ruri r)" \
    stats="$T/stats.json" stats-interval=20ms
  pyrun "$T/r.img" "$T/r.log" "$T/stats.json" <<'EOF'
import sys, nbd
from nbdremote import *
img, log, stats = sys.argv[1:]
N = 256
r = pattern(9, 4 * MiB)

def remote_reads():
    return log_calls(log, "Read")

def reads_at(h, start, depth, n=N):
    """n sequential 4K reads from start, depth in flight at most."""
    bufs, cookies = [], []
    while len(cookies) < n or h.aio_in_flight() > 0:
        while len(cookies) < n and h.aio_in_flight() < depth:
            b = nbd.Buffer(4096)
            bufs.append(b)
            cookies.append(h.aio_pread(b, start + len(cookies) * 4096))
        h.poll(-1)
    for c in cookies:
        if not h.aio_command_completed(c):
            raise AssertionError("read %d did not complete" % c)
    return b"".join(b.to_bytearray() for b in bufs)

h = connect("r")
for depth, start in ((1, 0), (16, MiB)):
    before = len(remote_reads())
    expect_bytes(reads_at(h, start, depth), r[start:start + N * 4096],
                 "reads at depth %d" % depth)
    sent = remote_reads()[before:]
    assert len(sent) <= N // 8, \
        "%d sequential reads at depth %d became %d remote reads" % (N, depth, len(sent))
    assert max(f["count"] for _, f in sent) == 256 * KiB, \
        "the largest remote read: %d" % max(f["count"] for _, f in sent)
    print("# depth %d: %d reads, %d remote reads" % (depth, N, len(sent)))

def hits():
    return stat(load_stats(stats), "r", "read_ahead_hits")
poll(lambda: hits() >= N, 10, "reads answered from windows in the stats")

# A stream part way into its windows; another connection writes just
# ahead of it, and the stream reads that write.
start = 2 * MiB
expect_bytes(reads_at(h, start, 1, 16), r[start:start + 16 * 4096], "the stream")
other = connect("r")
new = pattern(77, 8192)
other.pwrite(new, start + 20 * 4096)
other.shutdown()
want = r[start + 16 * 4096:start + 20 * 4096] + new + \
    r[start + 22 * 4096:start + 48 * 4096]
expect_bytes(reads_at(h, start + 16 * 4096, 1, 32), want,
             "the stream after another connection wrote ahead of it")
h.flush()
expect_file(img, start + 20 * 4096, new, "the remote file after FLUSH")
h.shutdown()
EOF
}

@test "nbd: FUA writes reach a remote with FUA as FUA writes, with no Flush" {
  make_file "$T/r.img" 4M
  start_remote r --filter=log --filter=delay file "$T/r.img" \
    logfile="$T/r.log" delay-write=1ms
  start_plugq disk=r nbd="$(ruri r)"
  pyrun "$T/r.img" "$T/r.log" <<'EOF'
import sys
from nbdremote import *
img, log = sys.argv[1:]
h = connect("r")
data = [pattern(i, 4096) for i in range(32)]
aio_pwrite_all(h, [(d, i * 4096) for i, d in enumerate(data)],
               flags=nbd.CMD_FLAG_FUA)
calls = log_calls(log)
writes = [f for a, f in calls if a == "Write"]
assert writes and all(f.get("fua") == "1" for f in writes), \
    "remote writes without fua=1: %s" % show(calls)
assert not [a for a, _ in calls if a == "Flush"], \
    "FUA writes were followed by a Flush: %s" % show(calls)
expect_file(img, 0, b"".join(data), "remote file after FUA writes")
h.shutdown()
EOF
}

@test "nbd: merged writes fill the remote's maximum payload (64K) and never exceed it" {
  make_file "$T/r.img" 4M
  start_remote r --filter=log --filter=blocksize-policy file "$T/r.img" \
    logfile="$T/r.log" blocksize-maximum=64K blocksize-error-policy=error
  start_plugq "${LONG_QUEUE[@]}" disk=r nbd="$(ruri r)"
  pyrun "$T/r.img" "$T/r.log" <<'EOF'
import sys
from nbdremote import *
R, LOG = sys.argv[1:3]
h = connect("r")
assert h.get_block_size(nbd.SIZE_MAXIMUM) == 64 * KiB, h.get_block_size(nbd.SIZE_MAXIMUM)
# One after the other (each answered before the next is sent), so they
# reach the queue in order: the 64K merge limit unplugs every 16 writes.
data = [pattern(i, 4096) for i in range(64)]
for i, d in enumerate(data):
    h.pwrite(d, MiB + i * 4096)
h.flush()
first = log_calls(LOG, "Write")
# Then 64 pipelined ones (they may reach the queue out of order).
more = [pattern(100 + i, 4096) for i in range(64)]
aio_pwrite_all(h, [(d, 2 * MiB + i * 4096) for i, d in enumerate(more)])
h.flush()
expect_file(R, MiB, b"".join(data), "remote file after FLUSH (sequential writes)")
expect_file(R, 2 * MiB, b"".join(more), "remote file after FLUSH (pipelined writes)")
writes = log_calls(LOG, "Write")
big = [f["count"] for _, f in writes if f["count"] > 64 * KiB]
assert not big, "writes over the remote's 64K maximum: %s" % show(writes)
assert ranges(writes) == [(MiB, MiB + 256 * KiB), (2 * MiB, 2 * MiB + 256 * KiB)], \
    "remote writes: %s" % show(writes)
assert sum(f["count"] for _, f in writes) == 512 * KiB, "bytes written: %s" % show(writes)
assert len(first) == 4 and all(f["count"] == 64 * KiB for _, f in first), \
    "256K of in-order sequential writes with a 64K remote maximum: expected 4 writes of 64K, got %s" \
    % show(first)
h.shutdown()
EOF
}

# ---------------------------------------------------------------- zero / trim

@test "nbd: zero is passed through as NBD Zero, and emulated with writes when the remote cannot zero" {
  make_file "$T/z.img" 4M
  make_file "$T/n.img" 4M
  start_remote z --filter=log file "$T/z.img" logfile="$T/z.log"
  start_remote n --filter=log --filter=nozero file "$T/n.img" logfile="$T/n.log" zeromode=none
  run nbdinfo --json "$(ruri n)"
  assert_success
  run jq -r '.exports[0].can_zero' <<<"$output"
  assert_output false     # control: the remote really cannot zero
  start_plugq disk=z nbd="$(ruri z)" disk=n nbd="$(ruri n)"
  pyrun "$T/z.img" "$T/z.log" "$T/n.img" "$T/n.log" <<'EOF'
import sys, nbd
from nbdremote import *
Z, ZLOG, N, NLOG = sys.argv[1:5]
for name, path, log, can in (("z", Z, ZLOG, True), ("n", N, NLOG, False)):
    h = connect(name)
    assert h.can_zero(), "plugq export %s does not offer zero" % name
    h.pwrite(fill(0xff, 512 * KiB), 0)
    h.pwrite(fill(0xff, 2 * MiB), 2 * MiB)
    h.flush()
    before = len(log_calls(log))
    h.zero(64 * KiB, 64 * KiB)                              # may trim
    h.zero(16 * KiB, 192 * KiB, nbd.CMD_FLAG_NO_HOLE)       # must write
    h.zero(MiB + 512 * KiB, 2 * MiB + 256 * KiB)            # large
    h.flush()
    want = bytearray(fill(0xff, 512 * KiB))
    want[64 * KiB:128 * KiB] = fill(0, 64 * KiB)
    want[192 * KiB:208 * KiB] = fill(0, 16 * KiB)
    expect_file(path, 0, bytes(want), "%s: remote file after zeroes" % name)
    expect_file(path, 2 * MiB, fill(0xff, 256 * KiB), "%s: before the large zero" % name)
    expect_file(path, 2 * MiB + 256 * KiB, fill(0, MiB + 512 * KiB), "%s: large zero" % name)
    expect_file(path, 3 * MiB + 768 * KiB, fill(0xff, 256 * KiB), "%s: after the large zero" % name)
    expect_read(h, 0, bytes(want), "%s: read back" % name)
    calls = log_calls(log)[before:]
    zeroes = [c for c in calls if c[0] == "Zero"]
    writes = [c for c in calls if c[0] == "Write"]
    want_ranges = [(64 * KiB, 128 * KiB), (192 * KiB, 208 * KiB),
                   (2 * MiB + 256 * KiB, 3 * MiB + 768 * KiB)]
    if can:
        assert not writes, "%s: zeroes sent as writes to a remote that can zero: %s" % (name, show(calls))
        assert ranges(zeroes) == want_ranges, "%s: remote Zero commands: %s" % (name, show(calls))
        nohole = [f for _, f in zeroes if f["offset"] == 192 * KiB]
        assert nohole and all(f.get("trim") == "0" for f in nohole), \
            "%s: NO_HOLE zero reached the remote with trim allowed: %s" % (name, nohole)
    else:
        assert not zeroes, "%s: Zero sent to a remote that cannot zero: %s" % (name, show(calls))
        assert ranges(writes) == want_ranges, \
            "%s: emulated zero writes cover %r, expected %r: %s" % (name, ranges(writes), want_ranges, show(calls))
    h.shutdown()
EOF
}

@test "nbd: trim is passed through, and dropped (not emulated) when the remote cannot trim" {
  make_file "$T/t.img" 1M
  make_file "$T/n.img" 1M
  start_remote t --filter=log file "$T/t.img" logfile="$T/t.log"
  start_notrim_remote n "$T/n.img" "$T/n.log"
  run nbdinfo --json "$(ruri n)"
  assert_success
  run jq -r '.exports[0].can_trim' <<<"$output"
  assert_output false     # control: the remote really cannot trim
  start_plugq disk=t nbd="$(ruri t)" disk=n nbd="$(ruri n)"
  pyrun "$T/t.img" "$T/t.log" "$T/n.img" "$T/n.log" <<'EOF'
import sys
from nbdremote import *
TI, TLOG, NI, NLOG = sys.argv[1:5]
for name, path, log, can in (("t", TI, TLOG, True), ("n", NI, NLOG, False)):
    h = connect(name)
    h.pwrite(fill(0xff, 256 * KiB), 0)
    h.flush()
    before = len(log_calls(log))
    h.trim(64 * KiB, 64 * KiB)
    h.flush()
    calls = log_calls(log)[before:]
    trims = [c for c in calls if c[0] == "Trim"]
    others = [c for c in calls if c[0] in ("Write", "Zero")]
    assert not others, "%s: trim turned into writes or zeroes: %s" % (name, show(calls))
    if can:
        assert ranges(trims) == [(64 * KiB, 128 * KiB)], "%s: remote trims: %s" % (name, show(calls))
    else:
        assert not trims, "%s: Trim sent to a remote that cannot trim: %s" % (name, show(calls))
        expect_file(path, 64 * KiB, fill(0xff, 64 * KiB), "%s: trimmed range (trim dropped)" % name)
    expect_file(path, 0, fill(0xff, 64 * KiB), "%s: before the trim" % name)
    expect_file(path, 128 * KiB, fill(0xff, 128 * KiB), "%s: after the trim" % name)
    assert any(c[0] == "Flush" for c in calls), "%s: no Flush reached the remote: %s" % (name, show(calls))
    h.shutdown()
EOF
}

# ---------------------------------------------------------------- extents, sizes

@test "nbd: extents come from the remote (and from the queue before a flush)" {
  make_file "$T/r.img" 4M
  dd if=/dev/urandom of="$T/r.img" bs=64K count=1 seek=16 conv=notrunc status=none   # data at 1M
  cp --sparse=always "$T/r.img" "$T/x.img"
  start_remote r file "$T/r.img"
  start_remote x --filter=noextents file "$T/x.img"
  start_plugq "${LONG_QUEUE[@]}" disk=r nbd="$(ruri r)" disk=x nbd="$(ruri x)"
  pyrun "$T/r.img" <<'EOF'
import sys, nbd
from nbdremote import *
R = sys.argv[1]
h = connect("r")
ext = extents(h, 4 * MiB, 0)
assert sum(ln for _, ln, _ in ext) == 4 * MiB, ext
for off in (0, MiB - 1, MiB + 64 * KiB, 2 * MiB, 4 * MiB - 1):
    assert flags_at(ext, off) & nbd.STATE_ZERO, "sparse remote range at %d: %r" % (off, ext)
for off in (MiB, MiB + 64 * KiB - 1):
    assert flags_at(ext, off) == 0, "remote data at %d: %r" % (off, ext)

# A queued write is data before it reaches the remote.
h.pwrite(pattern(1, 8192), 3 * MiB)
expect_file(R, 3 * MiB, fill(0, 8192), "remote file (the write must still be queued)")
expect_no_zero_flag(h, 3 * MiB, 8192, "extents of a queued write")
h.flush()
expect_file(R, 3 * MiB, pattern(1, 8192), "remote file after FLUSH")
expect_no_zero_flag(h, 3 * MiB, 8192, "extents after FLUSH")
ext = extents(h, MiB, 3 * MiB)
assert flags_at(ext, 3 * MiB + 8192) & nbd.STATE_ZERO, "sparse after the write: %r" % ext

# A remote without extents: everything is data (never wrongly zero).
x = connect("x")
ext = extents(x, 4 * MiB, 0)
assert sum(ln for _, ln, _ in ext) == 4 * MiB, ext
assert all(fl == 0 for _, _, fl in ext), "remote without extents reported %r" % ext
EOF
}

@test "nbd: size and block size limits come from the remote" {
  make_file "$T/r.img" $((5 * MiB + 12 * KiB))
  start_remote r --filter=blocksize-policy file "$T/r.img" \
    blocksize-minimum=4096 blocksize-preferred=64K blocksize-maximum=1M
  start_plugq disk=r nbd="$(ruri r)"
  run nbdinfo --json "$(uri r)"
  assert_success
  local json=$output
  run jq -r '.exports[0] | [."export-size", .block_size_minimum, .block_size_preferred, .block_size_maximum] | @tsv' <<<"$json"
  assert_output "$(printf '%d\t%d\t%d\t%d' $((5 * MiB + 12 * KiB)) 4096 65536 "$MiB")"
  # Reads and writes at the end of the odd-sized disk.
  pyrun "$T/r.img" <<'EOF'
import sys
from nbdremote import *
R = sys.argv[1]
h = connect("r")
end = 5 * MiB + 12 * KiB
h.pwrite(pattern(1, 8192), end - 8192)
h.flush()
expect_file(R, end - 8192, pattern(1, 8192), "remote file end")
expect_read(h, end - 8192, pattern(1, 8192), "read at the end")
EOF
}

@test "nbd: a volume of two remote members maps reads and writes across the boundary" {
  prefill "$T/a.img" "$MiB" 10
  prefill "$T/b.img" "$MiB" 11
  start_remote a --filter=log file "$T/a.img" logfile="$T/a.log"
  start_remote b --filter=log file "$T/b.img" logfile="$T/b.log"
  start_plugq "${LONG_QUEUE[@]}" disk=a nbd="$(ruri a)" disk=b nbd="$(ruri b)" linear=vol:a,b
  run nbdinfo --size "$(uri vol)"
  assert_output $((2 * MiB))
  pyrun "$T/a.img" "$T/b.img" "$T/a.log" "$T/b.log" <<'EOF'
import sys
from nbdremote import *
A, B, ALOG, BLOG = sys.argv[1:5]
a, b = pattern(10, MiB), pattern(11, MiB)
h = connect("vol")
expect_read(h, MiB - 4096, a[-4096:] + b[:4096], "read straddling the boundary")
expect_read(h, 0, a + b, "whole volume")
x = pattern(1, 8192)
h.pwrite(x, MiB - 4096)
y = pattern(2, 1000)
h.pwrite(y, MiB - 300)
expect_file(A, MiB - 4096, a[-4096:], "a.img before FLUSH (must still be queued)")
h.flush()
want = bytearray(x); want[4096 - 300:4096 + 700] = y
expect_file(A, MiB - 4096, bytes(want[:4096]), "remote a's file tail")
expect_file(B, 0, bytes(want[4096:]), "remote b's file head")
expect_file(A, 0, a[:MiB - 4096], "remote a's file before the write")
expect_file(B, 4096, b[4096:], "remote b's file after the write")
expect_read(h, MiB - 4096, bytes(want), "volume read-back")
for name, log, want_r in (("a", ALOG, [(MiB - 4096, MiB)]), ("b", BLOG, [(0, 4096)])):
    calls = log_calls(log)
    assert ranges([c for c in calls if c[0] == "Write"]) == want_r, \
        "remote %s got writes %s, expected %r" % (name, show(calls), want_r)
    last = max(i for i, c in enumerate(calls) if c[0] == "Write")
    assert any(c[0] == "Flush" for c in calls[last:]), \
        "remote %s: the volume's FLUSH did not reach it: %s" % (name, show(calls))
EOF
}

# ---------------------------------------------------------------- errors

@test "nbd: a remote write error with ack=queued fails every FLUSH until the remote takes the data" {
  skip_if_sanitized
  make_file "$T/r.img" 1M
  start_remote r --filter=error file "$T/r.img" \
    error-pwrite-rate=100% error-pwrite=EIO error-pwrite-file="$T/inject"
  start_plugq ack=queued disk=r nbd="$(ruri r)"
  pyrun "$T/r.img" "$T/inject" <<'EOF'
import os, sys
from nbdremote import *
R, INJECT = sys.argv[1:3]
h1 = connect("r")
h2 = connect("r")
h1.pwrite(pattern(1, 4096), 0)
h1.flush()
expect_file(R, 0, pattern(1, 4096), "remote file after the first FLUSH (no errors yet)")

open(INJECT, "w").close()
h1.pwrite(pattern(2, 4096), 64 * KiB)       # answered: queued
expect_error("FLUSH after a failed write-back", "EIO", h1.flush)
expect_error("FLUSH on a second connection", "EIO", h2.flush)
expect_error("the next FLUSH, the remote still failing", "EIO", h1.flush)
expect_read(h2, 64 * KiB, pattern(2, 4096), "read of the write the remote refused (kept)")
expect_file(R, 64 * KiB, fill(0, 4096), "remote file while it refuses the write")
os.unlink(INJECT)
h1.flush()      # tries the kept write again: the remote takes it
h2.flush()
expect_file(R, 64 * KiB, pattern(2, 4096), "remote file once it takes writes again")

h1.pwrite(pattern(3, 4096), 128 * KiB)
h1.flush()
expect_file(R, 128 * KiB, pattern(3, 4096), "remote file after recovery")
expect_file(R, 0, pattern(1, 4096), "remote file, first write")
EOF
}

@test "nbd: a remote out of memory for a while: the write-out is retried, nothing is lost" {
  make_file "$T/r.img" 1M
  start_remote r --filter=error file "$T/r.img" \
    error-pwrite-rate=100% error-pwrite=ENOMEM error-pwrite-file="$T/inject"
  start_plugq ack=queued stats="$T/stats.json" stats-interval=20ms \
    disk=r nbd="$(ruri r)"
  pyrun "$T/r.img" "$T/inject" "$T/stats.json" <<'EOF'
import os, sys
from nbdremote import *
R, INJECT, STATS = sys.argv[1:4]
h1 = connect("r")
h2 = connect("r")
open(INJECT, "w").close()
h1.pwrite(pattern(1, 4096), 64 * KiB)       # answered: queued
poll(lambda: stat(load_stats(STATS), "r", "writeback_retries") >= 2, 10,
     "plugq retrying the write-out the remote refused for memory")
expect_read(h2, 64 * KiB, pattern(1, 4096), "read while the write-out waits to retry")
os.unlink(INJECT)
h1.flush()      # no error: the data was never lost
h2.flush()
expect_file(R, 64 * KiB, pattern(1, 4096), "remote file after the FLUSH")
EOF
  stop_plugq
  run stats_value "$T/stats.json" r latched_errors
  assert_output 0
}

@test "nbd: a remote write error with ack=dispatched fails the write itself" {
  make_file "$T/r.img" 1M
  start_remote r --filter=error file "$T/r.img" \
    error-pwrite-rate=100% error-pwrite=EIO error-pwrite-file="$T/inject"
  start_plugq ack=dispatched disk=r nbd="$(ruri r)"
  pyrun "$T/r.img" "$T/inject" <<'EOF'
import os, sys, nbd
from nbdremote import *
R, INJECT = sys.argv[1:3]
h = connect("r")
h.pwrite(pattern(1, 4096), 0)
expect_file(R, 0, pattern(1, 4096), "remote file after an ack=dispatched write")
open(INJECT, "w").close()
expect_error("write while the remote fails writes", "EIO", h.pwrite, pattern(2, 4096), 64 * KiB)
expect_error("FUA write while the remote fails writes", "EIO", h.pwrite, pattern(2, 4096),
             128 * KiB, nbd.CMD_FLAG_FUA)
os.unlink(INJECT)
h.flush()       # the errors were returned by the writes themselves
h.pwrite(pattern(3, 4096), 192 * KiB)
h.flush()
expect_file(R, 192 * KiB, pattern(3, 4096), "remote file after recovery")
expect_file(R, 64 * KiB, fill(0, 4096), "remote file where the failed write was")
EOF
}

@test "nbd: a lost remote fails reads and FLUSH with EIO; the connection and other disks live on" {
  skip_if_sanitized
  # Four remote disks, lost one after the other (whether the client's
  # next command or plugq's own I/O thread meets the dead socket first
  # is a race: each loss is a separate try), and a volume of r1 and a
  # memory disk.
  local i args=()
  for i in 1 2 3 4; do
    prefill "$T/r$i.img" "$MiB" "$i"
    start_remote "r$i" file "$T/r$i.img"
    args+=(disk="r$i" nbd="$(ruri "r$i")")
  done
  start_plugq "${args[@]}" disk=m memory=1M linear=vol:r1,m
  timeout 60 "$PYTHON" - "$T" <<'EOF'
import sys, nbd
from nbdremote import *
T = sys.argv[1]
hs = {i: connect("r%d" % i) for i in range(1, 5)}
hv, hm = connect("vol"), connect("m")
x = pattern(20, 4096)
for i, h in hs.items():
    h.pwrite(x, 8192)
    h.flush()
    expect_file("%s/r%d.img" % (T, i), 8192, x, "remote r%d's file before the loss" % i)
y = pattern(21, 8192)
hm.pwrite(y, 0)
r1 = pattern(1, MiB)
expect_read(hv, 0, r1[:8192] + x + r1[12288:65536], "volume before the loss")

# Wrong errnos are collected and reported at the end, so the rest of the
# test still runs.
P = []
for i, h in hs.items():
    kill_remote("%s/remote-r%d.pid" % (T, i))
    expect_error("r%d: read right after its remote was lost" % i, "EIO",
                 h.pread, 4096, 64 * KiB, problems=P)
    expect_error("r%d: FLUSH after the failed read" % i, "EIO", h.flush, problems=P)
    h.pwrite(pattern(4, 4096), 128 * KiB)       # queued (ack=queued)
    expect_error("r%d: FLUSH after a write to the lost remote" % i, "EIO", h.flush, problems=P)
    expect_error("r%d: another read" % i, "EIO", h.pread, 4096, 256 * KiB, problems=P)
    assert h.aio_is_ready(), "r%d: the client's connection is gone after the errors" % i

# The volume: its remote part fails, its memory part still reads, on the
# same connection.
expect_error("volume read of the lost member", "EIO", hv.pread, 4096, 512 * KiB, problems=P)
expect_error("volume read straddling into the lost member", "EIO", hv.pread, 8192, MiB - 4096,
             problems=P)
expect_read(hv, MiB, y, "volume read of the memory member after the loss")
expect_error("volume FLUSH with a lost member", "EIO", hv.flush, problems=P)
expect_read(hv, MiB, y, "volume read of the memory member after the failed FLUSH")
expect_read(hm, 0, y, "memory disk after the loss")
hm.pwrite(pattern(5, 4096), 4096)
hm.flush()
hm2 = connect("m")
expect_read(hm2, 4096, pattern(5, 4096), "a new connection to the memory disk")
check_problems(P)
EOF
  kill -0 "$(plugq_pid)" || fail "plugq exited after its remotes were lost"
  # The final flush of each lost remote fails at shutdown: what was
  # written there since its last flush may be gone, and the exit status
  # says so.
  stop_plugq && fail "nbdkit exited 0 though the final flushes failed"
  [ "$PLUGQ_STATUS" = 1 ]
  grep -q "r1: data may be lost" "$PLUGQ_LOG"
}

@test "nbd: reconnect= dials a new remote on the same socket, and new writes land there" {
  skip_if_sanitized
  prefill "$T/r1.img" "$MiB" 1
  prefill "$T/r2.img" $((2 * MiB)) 2     # wrong size: must not be used
  prefill "$T/r3.img" "$MiB" 3
  start_remote r file "$T/r1.img"
  start_plugq disk=r nbd="$(ruri r)" reconnect=50ms
  timeout 60 "$PYTHON" - "$(rsock r)" "$(rpid r)" "$T" "$PLUGQ_LOG" <<'EOF'
import sys, time
from nbdremote import *
SOCK, PIDF, T, PLOG = sys.argv[1:5]
h = connect("r")
x = pattern(10, 4096)
h.pwrite(x, 0)
h.flush()
expect_file(T + "/r1.img", 0, x, "first remote after FLUSH")

kill_remote(PIDF)
# Wrong errnos are collected and reported at the end, with whatever
# stopped the test, so one run shows every symptom.
P = []
try:
    expect_error("read while the remote is gone", "EIO", h.pread, 4096, 8192, problems=P)
    expect_error("FLUSH while the remote is gone (right after the failed read)", "EIO",
                 h.flush, problems=P)

    # A remote of another size on that socket is not taken.
    start_remote(SOCK, PIDF, "file", T + "/r2.img")
    poll(lambda: log_lines(PLOG, "different size"), 10,
         "plugq redialling: its log saying the 2M remote on the socket has a different size")
    expect_error("read while only a wrong-size remote is there", "EIO", h.pread, 4096, 8192,
                 problems=P)
    kill_remote(PIDF)

    start_remote(SOCK, PIDF, "file", T + "/r3.img")
    y = pattern(11, 4096)
    def write_flush():
        try:
            h.pwrite(y, 64 * KiB)
            h.flush()
            return True
        except nbd.Error as e:
            if e.errno != "EIO":
                msg = "write+flush while reconnecting: %s (%s), expected EIO or success" \
                    % (e.errno, e.string)
                if msg not in P:
                    P.append(msg)
            return False
    poll(write_flush, 20, "write+flush succeeding after the new remote came up", 0.05)
    expect_file(T + "/r3.img", 64 * KiB, y, "new remote after FLUSH")
    expect_file(T + "/r2.img", 64 * KiB, pattern(2, 2 * MiB)[64 * KiB:68 * KiB],
                "wrong-size remote (must be untouched)")
    expect_read(h, 8192, pattern(3, MiB)[8192:12288], "read from the new remote")
    assert log_lines(PLOG, "reconnected"), "plugq's log does not say it reconnected"
except AssertionError as e:
    P.append(str(e))
check_problems(P)
EOF
}

# ---------------------------------------------------------------- reconnect: what was not durable

# A remote answers writes from a volatile cache (nbdkit's cache filter in
# write-back mode), which SIGKILL loses: only a FLUSH made them durable.
# With reconnect= plugq keeps what the remote completed until a flush
# covers it, writes it again on the next connection, and sends again
# what the lost connection left unanswered.  The remote's file is read
# directly: what is there is what survives.

# volatile_remote NAME FILE [ARGS...]: a remote over FILE that keeps
# unflushed writes in memory only, its log filter logging to NAME.log.
volatile_remote() {
  local name=$1 file=$2
  shift 2
  start_remote "$name" --filter=log --filter=cache file "$file" \
    cache=writeback logfile="$T/$name.log" "$@"
}

# unflushed_survive ACK: written and flushed 0x11, then 0xaa answered by
# the remote's cache; the remote is killed and restarted: the FLUSH after
# the reconnect succeeds, so 0xaa must be in the remote's file.
unflushed_survive() {
  make_file "$T/r.img" 1M
  volatile_remote r "$T/r.img"
  start_plugq disk=r nbd="$(ruri r)" reconnect=50ms ack="$1"
  timeout 60 "$PYTHON" - "$(rsock r)" "$(rpid r)" "$T" "$PLUGQ_LOG" <<'EOF'
import sys
from nbdremote import *
SOCK, PIDF, T, PLOG = sys.argv[1:5]
IMG = T + "/r.img"
h = connect("r")
h.pwrite(fill(0x11, 64 * KiB), 0)
h.flush()
expect_file(IMG, 0, fill(0x11, 64 * KiB), "remote file after the first FLUSH")
done = remote_writes_done(T + "/r.log")
h.pwrite(fill(0xaa, 64 * KiB), 0)
# ack=queued answered it from the queue: wait until the remote took it.
poll(lambda: remote_writes_done(T + "/r.log") > done, 10, "the remote answering the 0xaa write")
expect_file(IMG, 0, fill(0x11, 64 * KiB), "remote file before the kill (0xaa only cached)")
kill_remote(PIDF)
expect_file(IMG, 0, fill(0x11, 64 * KiB), "remote file after SIGKILL (the cache is gone)")
start_remote(SOCK, PIDF, "--filter=cache", "file", IMG, "cache=writeback")
poll(lambda: log_lines(PLOG, "reconnected"), 20, "plugq's log saying it reconnected")
h.flush()
expect_file(IMG, 0, fill(0xaa, 64 * KiB), "remote file after the FLUSH that followed the reconnect")
expect_read(h, 0, fill(0xaa, 64 * KiB), "read after the reconnect")
EOF
}

@test "nbd: reconnect= writes again what the restarted remote had not flushed (ack=queued)" {
  # The lost connection is logged as an error.
  skip_if_sanitized
  unflushed_survive queued
}

@test "nbd: reconnect= writes again what the restarted remote had not flushed (ack=dispatched)" {
  # The lost connection is logged as an error.
  skip_if_sanitized
  unflushed_survive dispatched
}

@test "nbd: reconnect= sends writes in flight when the remote died to the new one, and the FLUSH is true" {
  # The lost connection is logged as an error.
  skip_if_sanitized
  make_file "$T/r.img" 1M
  # The delay keeps the write in flight until the remote is killed.
  start_remote r --filter=log --filter=delay file "$T/r.img" \
    logfile="$T/r.log" delay-write=20
  start_plugq disk=r nbd="$(ruri r)" reconnect=50ms
  timeout 60 "$PYTHON" - "$(rsock r)" "$(rpid r)" "$T" "$PLUGQ_LOG" <<'EOF'
import sys
from nbdremote import *
SOCK, PIDF, T, PLOG = sys.argv[1:5]
IMG = T + "/r.img"
h = connect("r")
x = pattern(60, 128 * KiB)
h.pwrite(x, 256 * KiB)                       # answered: queued
c = h.aio_flush()                            # sends it, and waits for it
poll(lambda: log_calls(T + "/r.log", "Write"), 10, "the write reaching the remote")
kill_remote(PIDF)
expect_file(IMG, 256 * KiB, fill(0, 128 * KiB), "remote file after the kill (the write never ran)")
start_remote(SOCK, PIDF, "file", IMG)
wait_aio(h, c, 20, "FLUSH after the remote came back")
expect_file(IMG, 256 * KiB, x, "remote file after the FLUSH")
said = log_lines(PLOG, "reconnected")
assert said and "resent 1 operations" in said[0], \
    "plugq's log does not say it sent the write again: %s" % said
EOF
}

@test "nbd: reconnect= holds writes while the remote is away (reads and FLUSH fail) and sends them when it is back" {
  skip_if_sanitized
  make_file "$T/r.img" 1M
  start_remote r file "$T/r.img"
  start_plugq disk=r nbd="$(ruri r)" reconnect=50ms ack=dispatched
  timeout 60 "$PYTHON" - "$(rsock r)" "$(rpid r)" "$T" "$PLUGQ_LOG" <<'EOF'
import sys
from nbdremote import *
SOCK, PIDF, T, PLOG = sys.argv[1:5]
IMG = T + "/r.img"
h = connect("r")
h.pwrite(fill(0x11, 4096), 0)
h.flush()
kill_remote(PIDF)
poll(lambda: log_lines(PLOG, "connection lost"), 10, "plugq noticing the loss")
y = pattern(61, 64 * KiB)
buf = nbd.Buffer.from_bytearray(bytearray(y))
c = h.aio_pwrite(buf, 512 * KiB)             # ack=dispatched: waits for the remote
poll(lambda: log_lines(PLOG, "writes wait until the remote is back"), 10,
     "plugq's log saying writes are held")
assert not h.aio_command_completed(c), "the write was answered while the remote was away"
expect_error("read while the remote is away", "EIO", h.pread, 4096, 0)
expect_error("FLUSH while the remote is away", "EIO", h.flush)
assert not h.aio_command_completed(c), "the write was answered while the remote was away"
start_remote(SOCK, PIDF, "file", IMG)
wait_aio(h, c, 20, "the held write once the remote is back")
expect_file(IMG, 512 * KiB, y, "remote file after the held write was answered")
h.flush()
expect_read(h, 0, fill(0x11, 4096), "read after the reconnect")
held = log_lines(PLOG, "writes wait")
assert len(held) == 1, "plugq should say once that writes are held: %s" % held
EOF
}

@test "nbd: reconnect= never writes an older replayed write over a newer FUA write" {
  # The lost connection is logged as an error.
  skip_if_sanitized
  make_file "$T/r.img" 1M
  # 4K cache blocks: the FUA write writes only its own block through.
  volatile_remote r "$T/r.img" cache-min-block-size=4096
  start_plugq disk=r nbd="$(ruri r)" reconnect=50ms ack=dispatched
  timeout 60 "$PYTHON" - "$(rsock r)" "$(rpid r)" "$T" "$PLUGQ_LOG" <<'EOF'
import sys
from nbdremote import *
SOCK, PIDF, T, PLOG = sys.argv[1:5]
IMG = T + "/r.img"
h = connect("r")
h.pwrite(fill(0x11, 8192), 0)
h.flush()
h.pwrite(fill(0xaa, 8192), 0)                # answered by the remote's cache
h.pwrite(fill(0xbb, 4096), 0, nbd.CMD_FLAG_FUA)
expect_file(IMG, 0, fill(0xbb, 4096) + fill(0x11, 4096),
            "remote file before the kill (the FUA block written through)")
kill_remote(PIDF)
start_remote(SOCK, PIDF, "--filter=cache", "file", IMG, "cache=writeback",
             "cache-min-block-size=4096")
poll(lambda: log_lines(PLOG, "reconnected"), 20, "plugq's log saying it reconnected")
h.flush()
want = fill(0xbb, 4096) + fill(0xaa, 4096)
expect_file(IMG, 0, want, "remote file after the FLUSH that followed the reconnect")
expect_read(h, 0, want, "read after the reconnect")
EOF
}

@test "nbd: reconnect= to a remote that refuses the replay fails the next FLUSH with EIO" {
  skip_if_sanitized
  make_file "$T/r.img" 1M
  volatile_remote r "$T/r.img"
  start_plugq disk=r nbd="$(ruri r)" reconnect=50ms ack=dispatched
  timeout 60 "$PYTHON" - "$(rsock r)" "$(rpid r)" "$T" "$PLUGQ_LOG" <<'EOF'
import os, sys
from nbdremote import *
SOCK, PIDF, T, PLOG = sys.argv[1:5]
IMG, INJECT = T + "/r.img", T + "/inject"
h = connect("r")
h.pwrite(fill(0x11, 4096), 0)
h.flush()
h.pwrite(fill(0xaa, 4096), 0)                # answered by the remote's cache
kill_remote(PIDF)
open(INJECT, "w").close()
start_remote(SOCK, PIDF, "--filter=error", "--filter=cache", "file", IMG,
             "cache=writeback", "error-pwrite-rate=100%", "error-pwrite=EIO",
             "error-pwrite-file=" + INJECT)
poll(lambda: log_lines(PLOG, "reconnected"), 20, "plugq's log saying it reconnected")
os.unlink(INJECT)
expect_error("FLUSH after the remote refused the replay", "EIO", h.flush)
refused = log_lines(PLOG, "the remote refused")
assert refused and "they are lost" in refused[0], \
    "plugq's log does not say the replay was refused: %s" % refused
expect_file(IMG, 0, fill(0x11, 4096), "remote file (the lost write)")
EOF
}

@test "nbd: reconnect= bounds what it keeps for a replay with flushes of its own" {
  start_remote r --filter=log memory 128M logfile="$T/r.log"
  start_plugq disk=r nbd="$(ruri r)" reconnect=50ms
  pyrun "$T/r.log" <<'EOF'
import sys
from nbdremote import *
LOG = sys.argv[1]
h = connect("r")
chunk = fill(0x5a, 4 * MiB)
for i in range(24):                          # 96 MiB, and no FLUSH
    h.pwrite(chunk, i * 4 * MiB)
poll(lambda: log_calls(LOG, "Flush"), 10,
     "a Flush of plugq's own once 64 MiB of writes were unflushed")
EOF
}

# ---------------------------------------------------------------- reconnect: capabilities

# What plugq advertised to its clients when it opened a remote must stay
# true, so a remote that comes back offering less is not used.

# start_store: a memory disk on $(rsock store) that outlives the remotes
# in front of it (nbdkit's nbd plugin), so data written through one
# remote is there in the next.  Sets STORE to the nbd plugin's socket=.
start_store() {
  start_remote store memory 1M
  STORE=socket=$(rsock store)
}


# refused_then_back WHAT GOOD-ARGS... -- WEAK-ARGS...: plugq with
# reconnect=50ms serves the remote r (nbdkit GOOD-ARGS), data is written
# through it, and r is killed.  Then nbdkit WEAK-ARGS comes up on r's
# socket, offering less than GOOD-ARGS: plugq must not use it, and say
# "came back WHAT; not using it" once, however often it dials (and
# nothing else), while reads still fail.  Last GOOD-ARGS comes back: plugq
# reconnects and serves the data written before the loss, and takes new
# writes and zeroes.
refused_then_back() {
  local what=$1 a good=()
  shift
  for a in "$@"; do
    shift
    [ "$a" = "--" ] && break
    good+=("$a")
  done
  start_remote r "${good[@]}"
  start_plugq disk=r nbd="$(ruri r)" reconnect=50ms
  timeout 60 "$PYTHON" - "$(rsock r)" "$(rpid r)" "$PLUGQ_LOG" "$what" \
    "$T/weak.log" "${good[@]}" -- "$@" <<'EOF'
import sys, nbd
from nbdremote import *
SOCK, PIDF, PLOG, WHAT, WEAK_LOG = sys.argv[1:6]
rest = sys.argv[6:]
GOOD, WEAK = rest[:rest.index("--")], rest[rest.index("--") + 1:]

x = pattern(30, 64 * KiB)
zeroed = fill(0xff, 16 * KiB) + fill(0, 32 * KiB) + fill(0xff, 16 * KiB)
h = connect("r")
h.pwrite(x, 0)
h.pwrite(fill(0xff, 64 * KiB), 256 * KiB)
h.zero(32 * KiB, 256 * KiB + 16 * KiB)
h.flush()
expect_read(h, 256 * KiB, zeroed, "zeroed range before the loss")

kill_remote(PIDF)
expect_error("read while the remote is gone", "EIO", h.pread, 4096, 0)

# The log filter, outermost, records each of plugq's dials.
start_remote(SOCK, PIDF, "--filter=log", *WEAK, "logfile=" + WEAK_LOG)
want = "came back %s; not using it" % WHAT
def dials():
    with open(WEAK_LOG) as f:
        return sum(" Connect " in l for l in f)
def took_it():
    taken = log_lines(PLOG, "reconnected")
    assert not taken, "plugq took the remote that came back %s: %s" % (WHAT, taken)
def refused_twice():
    took_it()
    return log_lines(PLOG, "not using it") and dials() >= 2
poll(refused_twice, 10,
     "plugq refusing, and dialling twice, the remote that came back %s" % WHAT)
expect_error("read while only the weaker remote is there", "EIO", h.pread, 4096, 0)
refusals = log_lines(PLOG, "not using it")
wrong = [l for l in refusals if want not in l or SOCK not in l]
assert not wrong, "plugq refused the remote (%s) for another reason than %r: %s" \
    % (" ".join(WEAK), want, wrong)
assert len(refusals) == 1, "plugq dialled the weaker remote %d times and said so %d" \
    " times, not once: %s" % (dials(), len(refusals), refusals)
took_it()
kill_remote(PIDF)

start_remote(SOCK, PIDF, *GOOD)
poll(lambda: reads_as(h, 0, x), 20,
     "reads served again once the original remote is back", 0.05)
expect_read(h, 256 * KiB, zeroed, "zeroed range written before the loss")
y = pattern(31, 64 * KiB)
h.pwrite(y, 512 * KiB)
h.zero(16 * KiB, 512 * KiB + 8 * KiB)
h.flush()
expect_read(h, 512 * KiB, y[:8 * KiB] + fill(0, 16 * KiB) + y[24 * KiB:],
            "write and zero after the reconnect")
assert len(log_lines(PLOG, "reconnected")) == 1, \
    "plugq's log should say 'reconnected' once: %s" % log_lines(PLOG, "reconnected")
EOF
}

@test "nbd: reconnect= refuses a remote that came back without WRITE_ZEROES, then takes the original back" {
  skip_if_sanitized
  start_store
  refused_then_back "without WRITE_ZEROES" nbd "$STORE" \
    -- --filter=nozero nbd "$STORE" zeromode=none
}

@test "nbd: reconnect= refuses a remote that came back with a smaller maximum payload" {
  skip_if_sanitized
  start_store
  refused_then_back "with a smaller maximum payload" nbd "$STORE" \
    -- --filter=blocksize-policy nbd "$STORE" blocksize-maximum=64K
}

@test "nbd: reconnect= refuses a remote that came back with a larger minimum block size" {
  skip_if_sanitized
  start_store
  refused_then_back "with a larger minimum block size" nbd "$STORE" \
    -- --filter=blocksize-policy nbd "$STORE" blocksize-minimum=4096
}

@test "nbd: reconnect= refuses a remote that came back read-only" {
  skip_if_sanitized
  start_store
  refused_then_back "read-only" nbd "$STORE" -- -r nbd "$STORE"
}

@test "nbd: reconnect= refuses a remote that came back without FAST_ZERO" {
  skip_if_sanitized
  start_store
  refused_then_back "without FAST_ZERO" nbd "$STORE" \
    -- --filter=nozero nbd "$STORE" zeromode=plugin fastzeromode=none
}

@test "nbd: reconnect= refuses a remote that came back without CACHE" {
  skip_if_sanitized
  start_store
  refused_then_back "without CACHE" nbd "$STORE" \
    -- --filter=nocache nbd "$STORE" cachemode=none
}

@test "nbd: reconnect= refuses a remote that came back without base:allocation extents" {
  skip_if_sanitized
  start_store
  # Without structured replies there are no meta contexts.
  refused_then_back "without base:allocation extents" nbd "$STORE" -- --no-sr nbd "$STORE"
}

# refused_eval_then_back WHAT FLUSH TRIM: refused_then_back between two
# eval remotes on one file, the weaker one with eval_file_remote's
# FLUSH and TRIM answers.
refused_eval_then_back() {
  local good
  make_file "$T/r.img" 1M
  eval_file_remote "$T/r.img" 0 0
  good=("${EVAL_REMOTE[@]}")
  eval_file_remote "$T/r.img" "$2" "$3"
  refused_then_back "$1" "${good[@]}" -- "${EVAL_REMOTE[@]}"
}

@test "nbd: reconnect= refuses a remote that came back without FLUSH" {
  skip_if_sanitized
  refused_eval_then_back "without FLUSH" 3 0
}

@test "nbd: reconnect= refuses a remote that came back without TRIM" {
  skip_if_sanitized
  refused_eval_then_back "without TRIM" 0 3
}

@test "nbd: reconnect= takes a remote that came back stronger, and keeps to what it advertised" {
  skip_if_sanitized
  start_store
  # Opened without zero and with a 64K maximum; comes back with zero and
  # the default 32M maximum.
  start_remote r --filter=nozero --filter=blocksize-policy \
    nbd "$STORE" zeromode=none blocksize-maximum=64K
  start_plugq "${LONG_QUEUE[@]}" disk=r nbd="$(ruri r)" reconnect=50ms
  run nbdinfo --json "$(uri r)"
  assert_success
  local before=$output
  timeout 60 "$PYTHON" - "$(rsock r)" "$(rpid r)" "$PLUGQ_LOG" "$T/r2.log" "$STORE" <<'EOF'
import sys, nbd
from nbdremote import *
SOCK, PIDF, PLOG, LOG2, S = sys.argv[1:6]
h = connect("r")
x = pattern(40, 64 * KiB)
h.pwrite(x, 0)
h.flush()
kill_remote(PIDF)
start_remote(SOCK, PIDF, "--filter=log", "nbd", S, "logfile=" + LOG2)
poll(lambda: reads_as(h, 0, x), 20, "reads served by the stronger remote", 0.05)
assert log_lines(PLOG, "reconnected"), "plugq's log does not say it reconnected"
# Still what was advertised: zero emulated with writes, writes of 64K
# at most (the queue merges up to the old maximum).
h.pwrite(fill(0xff, 128 * KiB), 128 * KiB)
aio_pwrite_all(h, [(pattern(50 + i, 4096), 512 * KiB + i * 4096) for i in range(64)])
h.zero(64 * KiB, 128 * KiB + 32 * KiB)
h.flush()
calls = log_calls(LOG2)
assert not [c for c in calls if c[0] == "Zero"], \
    "Zero sent after reconnecting, though the remote could not zero when opened: %s" % show(calls)
writes = [c for c in calls if c[0] == "Write"]
assert ranges(writes) == [(128 * KiB, 256 * KiB), (512 * KiB, 768 * KiB)], \
    "writes after reconnecting: %s" % show(writes)
big = [c for c in writes if c[1]["count"] > 64 * KiB]
assert not big, "writes over the 64K maximum plugq opened with: %s" % show(big)
expect_read(h, 128 * KiB, fill(0xff, 32 * KiB) + fill(0, 64 * KiB) + fill(0xff, 32 * KiB),
            "zero emulated after the reconnect")
EOF
  run nbdinfo --json "$(uri r)"
  assert_success
  assert_equal "$output" "$before"
}

# ---------------------------------------------------------------- bad URIs

# assert_one_line_error WORD...: after run: nbdkit failed (not by a signal
# or the timeout), printed exactly one line, holding every WORD.
assert_one_line_error() {
  local w
  if [ "$status" -eq 0 ] || [ "$status" -ge 124 ]; then
    fail "expected a configuration failure, got exit status $status; output: $output"
  fi
  if [ "${#lines[@]}" -ne 1 ]; then
    fail "expected exactly one line of error output, got ${#lines[@]}: $output"
  fi
  for w in "$@"; do
    [[ "${lines[0]}" == *"$w"* ]] || fail "the error line does not name '$w': ${lines[0]}"
  done
}

@test "nbd: a URI where nothing listens makes nbdkit exit non-zero with one clear error line" {
  skip_if_sanitized
  local none=$T/none.sock
  run timeout 30 "$NBDKIT" -U - "$PLUGIN" disk=d nbd="nbd+unix:///?socket=$none" --run 'exit 0'
  assert_one_line_error "$none" "No such file"
  # A stale socket: the file exists, nobody listens.
  pyrun "$T/stale.sock" <<'EOF'
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.close()
EOF
  run timeout 30 "$NBDKIT" -U - "$PLUGIN" disk=d nbd="nbd+unix:///?socket=$T/stale.sock" --run 'exit 0'
  assert_one_line_error "$T/stale.sock" "refused"
}

@test "nbd: a non-NBD URI is rejected at configuration time, naming nbd=" {
  run timeout 30 "$NBDKIT" -U - "$PLUGIN" disk=d nbd=http://x --run 'exit 0'
  assert_one_line_error "nbd=http://x"
  run timeout 30 "$NBDKIT" -U - "$PLUGIN" disk=d nbd=file:///etc/passwd --run 'exit 0'
  assert_one_line_error "nbd=file:///etc/passwd"
  run timeout 30 "$NBDKIT" -U - "$PLUGIN" disk=d memory=1M reconnect=1s --run 'exit 0'
  assert_one_line_error "reconnect=" "disk=d"
  run timeout 30 "$NBDKIT" -U - "$PLUGIN" disk=d nbd="nbd+unix:///?socket=$T/x.sock" reconnect=soon --run 'exit 0'
  assert_one_line_error "reconnect=soon"
}
