#!/usr/bin/env bats
# The plugged queue seen from clients: plugging, FLUSH and FUA, the timer,
# the threshold, ack=dispatched, drain at shutdown and after disconnect,
# merges in the statistics.  Backing files are read directly, so "queued"
# and "written" are told apart.

load helpers

setup() {
  plugq_setup
  T=$BATS_TEST_TMPDIR
  F=$T/f.img
}

teardown() {
  plugq_teardown
}

@test "queue: with a long unplug-delay, data is absent from the file before FLUSH and present after" {
  make_file "$F" 16M
  start_plugq "${LONG_QUEUE[@]}" disk=f file="$F"
  pyrun "$F" <<'EOF'
import sys
from plugqtest import *
path = sys.argv[1]
h = connect("f")
w = [(MiB, pattern(1, 64 * KiB)), (5 * MiB + 123, pattern(2, 4096)),
     (16 * MiB - 512, pattern(3, 512))]
for off, data in w:
    h.pwrite(data, off)
for off, data in w:
    expect_read(h, off, data, "read of queued data")
    expect_file(path, off, fill(0, len(data)),
                "backing file before FLUSH (the write must still be queued)")
h.flush()
for off, data in w:
    expect_file(path, off, data, "backing file after FLUSH")
h.shutdown()
EOF
}

@test "queue: read-after-write across two connections before any flush" {
  make_file "$F" 4M
  start_plugq "${LONG_QUEUE[@]}" disk=f file="$F"
  pyrun "$F" <<'EOF'
import sys
from plugqtest import *
path = sys.argv[1]
h1 = connect("f")
h2 = connect("f")
a = pattern(1, 64 * KiB)
h1.pwrite(a, MiB)
expect_read(h2, MiB, a, "connection 2 reads connection 1's queued write")
expect_file(path, MiB, fill(0, len(a)), "backing file (the write must still be queued)")

# A zero on connection 2 over part of it, seen by connection 1.
h2.zero(8 * KiB, MiB + 4 * KiB)
want = bytearray(a); want[4 * KiB:12 * KiB] = fill(0, 8 * KiB)
expect_read(h1, MiB, bytes(want), "connection 1 after connection 2's zero")

# Overlapping writes from both: the newest wins on both connections.
b = pattern(2, 16 * KiB)
h1.pwrite(b, MiB + 8 * KiB)
want[8 * KiB:24 * KiB] = b
c = fill(0xcc, 100)
h2.pwrite(c, MiB + 20 * KiB - 50)
want[20 * KiB - 50:20 * KiB + 50] = c
expect_read(h1, MiB, bytes(want), "connection 1 after overlapping writes")
expect_read(h2, MiB, bytes(want), "connection 2 after overlapping writes")

# FLUSH on connection 2 makes connection 1's answered writes durable too.
h2.flush()
expect_file(path, MiB, bytes(want), "backing file after connection 2's FLUSH")
h1.shutdown()
h2.shutdown()
EOF
}

@test "queue: extents see queued data" {
  make_file "$F" 4M
  start_plugq "${LONG_QUEUE[@]}" disk=f file="$F"
  pyrun "$F" <<'EOF'
import sys, nbd
from plugqtest import *
path = sys.argv[1]
h = connect("f")
h.pwrite(pattern(1, 64 * KiB), MiB)
expect_file(path, MiB, fill(0, 64 * KiB), "backing file (the write must still be queued)")
expect_no_zero_flag(h, MiB, 64 * KiB, "extents over queued data")
# Another connection sees the same.
h2 = connect("f")
expect_no_zero_flag(h2, MiB, 64 * KiB, "extents over queued data, other connection")
EOF
  run nbdinfo --map --json "$(uri f)"
  assert_success
  run jq -r ".[] | select(.offset <= $MiB and .offset + .length > $MiB) | .type" <<<"$output"
  assert_output 0
}

@test "queue: FUA over an older overlapping queued write wins, now and after exit" {
  # The file starts full of 0x11, so zeroes show in it.
  make_file "$F" 1M
  pyrun "$F" <<'EOF'
import sys
open(sys.argv[1], "r+b").write(b"\x11" * (1 << 20))
EOF
  start_plugq "${LONG_QUEUE[@]}" disk=f file="$F"
  pyrun "$F" <<'EOF'
import sys, nbd
from plugqtest import *
path = sys.argv[1]
FUA = nbd.CMD_FLAG_FUA
h = connect("f")
a = pattern(1, 64 * KiB)
h.pwrite(a, 0)
expect_file(path, 0, fill(0x11, 64 * KiB), "backing file (the old write must still be queued)")
b = pattern(2, 4 * KiB)
h.pwrite(b, 4 * KiB, FUA)
expect_file(path, 4 * KiB, b, "backing file right after the FUA write's answer")

# A FUA zero over another older queued write.
c = pattern(3, 16 * KiB)
h.pwrite(c, 128 * KiB)
h.zero(4 * KiB, 132 * KiB, FUA)
expect_file(path, 132 * KiB, fill(0, 4 * KiB), "backing file right after the FUA zero's answer")

# A FUA write that covers the head of an older write and one covering it all.
d = pattern(4, 8 * KiB)
h.pwrite(d, 256 * KiB)
e = pattern(5, 4 * KiB)
h.pwrite(e, 256 * KiB - 2 * KiB, FUA)
f = pattern(6, 4 * KiB)
h.pwrite(fill(0x77, 4 * KiB), 512 * KiB)
h.pwrite(f, 512 * KiB, FUA)
expect_file(path, 256 * KiB - 2 * KiB, e, "FUA over the head of a queued write")
expect_file(path, 512 * KiB, f, "FUA over a whole queued write")

want = bytearray(fill(0x11, MiB))
want[0:64 * KiB] = a
want[4 * KiB:8 * KiB] = b
want[128 * KiB:144 * KiB] = c
want[132 * KiB:136 * KiB] = fill(0, 4 * KiB)
want[256 * KiB:264 * KiB] = d
want[254 * KiB:258 * KiB] = e
want[512 * KiB:516 * KiB] = f
want = bytes(want)
expect_read(h, 0, want, "read back")
# Let everything older be written out: the FUA data must stay on top.
h.flush()
expect_file(path, 0, want, "backing file after FLUSH")
h.shutdown()
open(path + ".want", "wb").write(want)
EOF
  stop_plugq
  cmp "$F" "$F.want"
}

@test "queue: queued zeroes and trims keep their order against writes (deadline and noop)" {
  local elv
  for elv in deadline noop; do
    make_file "$F" 1M
    start_plugq "${LONG_QUEUE[@]}" elevator="$elv" disk=f file="$F"
    pyrun "$F" "$elv" <<'EOF'
import sys
from plugqtest import *
path, elv = sys.argv[1], sys.argv[2]
h = connect("f")
h.pwrite(fill(0xaa, 256 * KiB), 0)
h.flush()
# Queued: a trim, then a write inside it; a zero, then a write inside it;
# a write, then a zero over it; a write, a zero, a write again.
h.trim(64 * KiB, 0)
h.pwrite(fill(0xbb, 4096), 16 * KiB)
h.zero(64 * KiB, 64 * KiB)
h.pwrite(fill(0xcc, 4096), 96 * KiB)
h.pwrite(fill(0xdd, 8192), 136 * KiB)
h.zero(64 * KiB, 128 * KiB)
h.pwrite(fill(0xee, 4096), 192 * KiB)
h.zero(4096, 192 * KiB)
h.pwrite(fill(0x11, 1000), 192 * KiB + 100)
want = bytearray(fill(0xaa, 256 * KiB))
want[64 * KiB:128 * KiB] = fill(0, 64 * KiB)
want[96 * KiB:100 * KiB] = fill(0xcc, 4096)
want[128 * KiB:192 * KiB] = fill(0, 64 * KiB)
want[192 * KiB:196 * KiB] = fill(0, 4096)
want[192 * KiB + 100:192 * KiB + 1100] = fill(0x11, 1000)
want = bytes(want)
tag = "elevator=%s" % elv
expect_read(h, 16 * KiB, fill(0xbb, 4096), tag + ": write after a queued trim")
expect_read(h, 64 * KiB, want[64 * KiB:], tag + ": read of queued zeroes and writes")
h.flush()
expect_file(path, 16 * KiB, fill(0xbb, 4096), tag + ": write after a trim, in the file")
expect_file(path, 64 * KiB, want[64 * KiB:], tag + ": zeroes and writes, in the file")
expect_read(h, 64 * KiB, want[64 * KiB:], tag + ": read after FLUSH")
h.shutdown()
EOF
    stop_plugq
  done
}

@test "queue: merged writes never write a byte no request wrote (gaps keep the file's data)" {
  make_file "$F" 1M
  pyrun "$F" <<'EOF'
import sys
open(sys.argv[1], "r+b").write(b"\x55" * (1 << 20))
EOF
  start_plugq "${LONG_QUEUE[@]}" disk=f file="$F"
  pyrun "$F" <<'EOF'
import sys
from plugqtest import *
path = sys.argv[1]
h = connect("f")
want = bytearray(fill(0x55, MiB))
w = []
# 4K writes with a 4K gap, a 1-byte gap, an unaligned run, and a zero
# beside a write with a 100-byte gap.
for off in (0, 4096, 12288, 16384):
    w.append((off, pattern(off, 4096)))
w.append((20481, pattern(1, 4095)))       # gap of 1 byte at 20480
w.append((64 * KiB + 7, pattern(2, 993)))
w.append((64 * KiB + 1000, pattern(3, 24)))
w.append((64 * KiB + 1024, pattern(4, 3000)))
aio_pwrite_all(h, [(d, o) for o, d in w])
for o, d in w:
    want[o:o + len(d)] = d
h.zero(4096, 128 * KiB)
h.pwrite(pattern(5, 4096), 128 * KiB + 4096 + 100)
want[128 * KiB:132 * KiB] = fill(0, 4096)
want[132 * KiB + 100:136 * KiB + 100] = pattern(5, 4096)
h.flush()
expect_file(path, 0, bytes(want), "backing file after merged write-out")
h.shutdown()
EOF
}

@test "queue: the unplug timer alone writes queued data out" {
  make_file "$F" 4M
  start_plugq unplug-delay=100ms unplug-thresh=100000 write-expire=60s \
    bypass=never stats="$T/stats.json" stats-interval=50ms disk=f file="$F"
  pyrun "$F" <<'EOF'
import sys, time
from plugqtest import *
path = sys.argv[1]
h = connect("f")
data = pattern(1, 64 * KiB)
t0 = time.monotonic()
h.pwrite(data, MiB)
poll(lambda: file_has(path, MiB, data), 10, "queued data in the backing file, no flush sent")
took = time.monotonic() - t0
# The data waited for the timer (100 ms), it was not written through.
assert took >= 0.05, "data reached the file after %.3fs, before the 100ms unplug timer" % took
h.shutdown()
EOF
  stop_plugq
  run stats_value "$T/stats.json" f unplugs.timer
  assert_success
  [ "$output" -ge 1 ] || fail "unplugs.timer is $output"
  run stats_value "$T/stats.json" f flush.requests
  assert_output 0
}

@test "queue: unplug-thresh requests unplug the queue at once (stats: threshold)" {
  make_file "$F" 4M
  start_plugq unplug-delay=20s unplug-thresh=4 write-expire=60s \
    bypass=never stats="$T/stats.json" stats-interval=50ms disk=f file="$F"
  pyrun "$F" <<'EOF'
import sys
from plugqtest import *
path = sys.argv[1]
h = connect("f")
w = [(i * MiB, pattern(i, 4096)) for i in range(4)]   # not adjacent: no merge
for off, data in w[:3]:
    h.pwrite(data, off)
for off, data in w[:3]:
    expect_file(path, off, fill(0, 4096), "backing file below the threshold (3 of 4 queued)")
h.pwrite(w[3][1], w[3][0])
for off, data in w:
    poll(lambda: file_has(path, off, data), 10,
         "write at %d in the backing file after the 4th request (unplug-thresh=4)" % off)
h.shutdown()
EOF
  stop_plugq
  run stats_value "$T/stats.json" f unplugs.threshold
  assert_success
  [ "$output" -ge 1 ] || fail "unplugs.threshold is $output"
  run stats_value "$T/stats.json" f unplugs.timer
  assert_output 0
  run stats_value "$T/stats.json" f write.requests
  assert_output 4
}

@test "queue: ack=dispatched: the data is in the file when the write is answered" {
  make_file "$F" 4M
  # With ack=queued the 500 ms timer would keep the data out of the file
  # for half a second; with ack=dispatched the answer waits for it.
  start_plugq ack=dispatched unplug-delay=500ms unplug-thresh=100000 \
    write-expire=60s disk=f file="$F"
  pyrun "$F" <<'EOF'
import sys
from plugqtest import *
path = sys.argv[1]
h = connect("f")
data = pattern(1, 64 * KiB)
h.pwrite(data, MiB)
expect_file(path, MiB, data, "backing file right after the answer (ack=dispatched)")
w = [(pattern(10 + i, 4096), 2 * MiB + i * 4096) for i in range(8)]
aio_pwrite_all(h, w)
for data, off in w:
    expect_file(path, off, data, "backing file right after the aio answers (ack=dispatched)")
h.shutdown()
EOF
}

@test "queue: ack= on one disk only: the other disk keeps the default" {
  make_file "$F" 4M
  make_file "$T/g.img" 4M
  start_plugq "${LONG_QUEUE[@]}" disk=f file="$F" \
    disk=g file="$T/g.img" ack=dispatched unplug-delay=200ms
  pyrun "$F" "$T/g.img" <<'EOF'
import sys
from plugqtest import *
f, g = sys.argv[1], sys.argv[2]
hf = connect("f")
hg = connect("g")
hf.pwrite(pattern(1, 4096), 0)
hg.pwrite(pattern(2, 4096), 0)
expect_file(g, 0, pattern(2, 4096), "disk g (ack=dispatched) right after the answer")
expect_file(f, 0, fill(0, 4096), "disk f (ack=queued, 20s delay) must still queue")
EOF
}

@test "queue: SIGTERM drains the queue" {
  # nbdkit 1.32 itself waits for open connections before it exits on
  # SIGTERM, so the client disconnects (without flushing) first.
  make_file "$F" 4M
  start_plugq "${LONG_QUEUE[@]}" stats="$T/stats.json" disk=f file="$F"
  local t0=$SECONDS
  pyrun "$F" <<'EOF'
import sys
from plugqtest import *
path = sys.argv[1]
h = connect("f")
h.pwrite(pattern(1, 256 * KiB), MiB)
h.pwrite(pattern(2, 100), 3 * MiB + 1)
expect_file(path, MiB, fill(0, 256 * KiB), "backing file before SIGTERM (must still be queued)")
h.shutdown()
EOF
  stop_plugq
  assert_equal "$PLUGQ_STATUS" 0
  # Well before the 20 s unplug timer could have written it.
  [ $((SECONDS - t0)) -lt 15 ] || fail "took $((SECONDS - t0)) s"
  pyrun "$F" <<'EOF'
import sys
from plugqtest import *
path = sys.argv[1]
expect_file(path, MiB, pattern(1, 256 * KiB), "backing file after SIGTERM")
expect_file(path, 3 * MiB + 1, pattern(2, 100), "backing file after SIGTERM")
EOF
  run stats_value "$T/stats.json" f unplugs.drain
  assert_success
  [ "$output" -ge 1 ] || fail "unplugs.drain is $output"
}

@test "queue: the end of nbdkit --run drains the queue" {
  make_file "$F" 4M
  cat >"$T/client.sh" <<EOF
set -e
nbdsh -u "\$1" -c 'h.pwrite(b"\xab" * 65536, 1048576)'
# Still queued while the server runs (20 s unplug delay).
cmp -n 65536 -i 1048576:0 "$F" /dev/zero
EOF
  run run_nbdkit "$PLUGIN" "${LONG_QUEUE[@]}" disk=f file="$F" --run "sh $T/client.sh \"\$uri\""
  assert_success
  head -c 65536 /dev/zero | tr '\0' '\253' >"$T/want"
  cmp -i 1048576:0 -n 65536 "$F" "$T/want"
}

@test "queue: a client that disconnects without flushing still has its data written" {
  make_file "$F" 4M
  start_plugq unplug-delay=200ms unplug-thresh=100000 write-expire=60s disk=f file="$F"
  # Client 1 disconnects politely (NBD_CMD_DISC, no flush).
  pyrun <<'EOF'
from plugqtest import *
h = connect("f")
h.pwrite(pattern(1, 64 * KiB), 0)
h.shutdown()
EOF
  # Client 2 just goes away (socket closed, no DISC, no flush).
  pyrun <<'EOF'
import os
from plugqtest import *
h = connect("f")
h.pwrite(pattern(2, 64 * KiB), 2 * MiB)
os._exit(0)
EOF
  pyrun "$F" <<'EOF'
import sys
from plugqtest import *
path = sys.argv[1]
h = connect("f")
expect_read(h, 0, pattern(1, 64 * KiB), "client 1's data")
expect_read(h, 2 * MiB, pattern(2, 64 * KiB), "client 2's data")
h.shutdown()
poll(lambda: file_has(path, 0, pattern(1, 64 * KiB)), 10, "client 1's data in the backing file")
poll(lambda: file_has(path, 2 * MiB, pattern(2, 64 * KiB)), 10, "client 2's data in the backing file")
EOF
}

@test "queue: 64 sequential pipelined 4k writes merge (stats: backend_ops < requests)" {
  make_file "$F" 4M
  start_plugq unplug-delay=20s unplug-thresh=1000 write-expire=60s \
    stats="$T/stats.json" stats-interval=50ms disk=f file="$F"
  pyrun "$F" <<'EOF'
import sys
from plugqtest import *
path = sys.argv[1]
h = connect("f")
data = pattern(1, 64 * 4096)
aio_pwrite_all(h, [(data[i * 4096:(i + 1) * 4096], MiB + i * 4096) for i in range(64)])
h.flush()
expect_file(path, MiB, data, "backing file after FLUSH")
h.shutdown()
EOF
  # The stats file is kept up to date while the server runs.
  wait_for_file "$T/stats.json"
  jq -e . "$T/stats.json" >/dev/null
  stop_plugq
  jq -e . "$T/stats.json" >/dev/null
  local req merges ops
  req=$(stats_value "$T/stats.json" f write.requests)
  merges=$(stats_value "$T/stats.json" f write.merges)
  ops=$(stats_value "$T/stats.json" f write.backend_ops)
  assert_equal "$req" 64
  [ "$merges" -gt 0 ] || fail "write.merges=$merges (requests=$req backend_ops=$ops)"
  [ "$ops" -ge 1 ] && [ "$ops" -lt "$req" ] || fail "write.backend_ops=$ops, requests=$req"
  run stats_value "$T/stats.json" f flush.requests
  assert_output 1
  run stats_value "$T/stats.json" f flush.backend_flushes
  [ "$output" -ge 1 ] || fail "flush.backend_flushes=$output"
  run stats_value "$T/stats.json" f unplugs.flush
  [ "$output" -ge 1 ] || fail "unplugs.flush=$output"
}

@test "queue: unplug-thresh=1 means no plugging: every write goes out on its own" {
  make_file "$F" 4M
  start_plugq unplug-delay=20s unplug-thresh=1 write-expire=60s \
    stats="$T/stats.json" stats-interval=50ms disk=f file="$F"
  pyrun "$F" <<'EOF'
import sys
from plugqtest import *
path = sys.argv[1]
h = connect("f")
data = pattern(1, 4096)
h.pwrite(data, 0)
poll(lambda: file_has(path, 0, data), 10, "the write in the backing file (unplug-thresh=1)")
h.shutdown()
EOF
  stop_plugq
  run stats_value "$T/stats.json" f unplugs.timer
  assert_output 0
}

@test "queue: a small queue-bytes applies back-pressure and loses nothing" {
  make_file "$F" 16M
  # max-merge above queue-bytes: a merge's worth of queued bytes would
  # otherwise unplug the queue (threshold) before it is ever full.
  start_plugq "${LONG_QUEUE[@]}" \
    max-merge=8M queue-bytes=1M stats="$T/stats.json" stats-interval=50ms disk=f file="$F"
  pyrun "$F" <<'EOF'
import sys
from plugqtest import *
path = sys.argv[1]
h = connect("f")
data = pattern(1, 8 * MiB)
# 128 pipelined 64K writes, far apart so they do not merge into one piece.
w = [(data[i * 64 * KiB:(i + 1) * 64 * KiB], i * 128 * KiB) for i in range(128)]
aio_pwrite_all(h, w)
for chunk, off in w:
    expect_read(h, off, chunk, "read back under back-pressure")
h.flush()
for chunk, off in w:
    expect_file(path, off, chunk, "backing file after FLUSH")
h.shutdown()
EOF
  stop_plugq
  run stats_value "$T/stats.json" f unplugs.full
  assert_success
  [ "$output" -ge 1 ] || fail "unplugs.full is $output"
}

@test "queue: -D plugq.queue=1 logs plugs and unplugs" {
  local n0 n1
  start_plugq -v -- bypass=never disk=m memory=1M
  nbdsh_run m 'h.pwrite(b"x" * 4096, 0)' 'h.flush()'
  stop_plugq
  n0=$(grep -ci 'unplug' "$PLUGQ_LOG" || true)
  start_plugq -v -D plugq.queue=1 -- bypass=never disk=m memory=1M
  nbdsh_run m 'h.pwrite(b"x" * 4096, 0)' 'h.flush()'
  stop_plugq
  n1=$(grep -ci 'unplug' "$PLUGQ_LOG" || true)
  if grep -qi 'does not contain a global variable' "$PLUGQ_LOG"; then
    fail "nbdkit does not find the debug flag: $(grep -i 'global variable' "$PLUGQ_LOG")"
  fi
  [ "$n1" -gt "$n0" ] || fail "with -D plugq.queue=1: $n1 lines about unplugs, without: $n0"
  grep -qiE '(^|[^n])plug' "$PLUGQ_LOG" || fail "no plug event logged"
}

@test "queue: bypass=auto: random writes on a file disk go straight to the file, a stream is still merged" {
  make_file "$F" 16M
  start_plugq unplug-delay=20s unplug-thresh=100000 write-expire=60s \
    stats="$T/stats.json" stats-interval=50ms disk=f file="$F"
  pyrun "$F" <<'EOF'
import sys
from plugqtest import *
path = sys.argv[1]
h = connect("f")
# One at a time, none where another ended: each is in the file when answered.
w = [(i * MiB + 4096, pattern(i, 4096)) for i in range(8)]
for off, data in w:
    h.pwrite(data, off)
    expect_file(path, off, data, "backing file right after the answer, no FLUSH")
# A stream after them: its first write goes straight through, the rest
# continue it and wait in the queue (20 s plug) until the FLUSH.
s = pattern(9, 16 * 4096)
for i in range(16):
    h.pwrite(s[i * 4096:(i + 1) * 4096], 12 * MiB + i * 4096)
expect_read(h, 12 * MiB, s, "read of the stream")
expect_file(path, 12 * MiB + 4096, fill(0, 15 * 4096), "the stream's queued writes before FLUSH")
h.flush()
expect_file(path, 12 * MiB, s, "the stream after FLUSH")
h.shutdown()
EOF
  stop_plugq
  run stats_value "$T/stats.json" f bypassed_writes
  assert_output 9
  run stats_value "$T/stats.json" f write.requests
  assert_output 24
  run stats_value "$T/stats.json" f write.merges
  assert_output 14
  run stats_value "$T/stats.json" f config.bypass
  assert_output auto
}
