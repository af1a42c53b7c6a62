#!/usr/bin/env bats
# What a FLUSH or FUA success promises, under backend failure: every write
# answered before it is on persistent storage (a FUA write: that write).
# Each case once broke the promise while the tests passed: concurrent
# FLUSHes after a failed write-back (only the first failed), a FUA write
# over several members of a volume beside a FLUSH of the same connection,
# a FUA write partly overwritten before it went out (answered with no
# backend flush), and a final write-out at shutdown that failed while
# nbdkit exited 0.  The remotes are nbdkit servers on unix sockets
# (remotes.bash) behind nbdkit's error, delay and log filters.

load remotes

setup() {
  remote_setup
}

teardown() {
  remote_teardown
}

# A queue that holds what it is given until a FLUSH or FUA: nothing is
# written back before the test has made the remote fail.
HOLD=(unplug-delay=30s unplug-thresh=100000 write-expire=60s)

# start_failing_remote NAME: a remote memory disk whose writes fail with
# EIO while $T/NAME.fail exists.
start_failing_remote() {
  start_remote "$1" --filter=error memory 64M error-pwrite=EIO \
    error-pwrite-rate=100% error-pwrite-file="$T/$1.fail"
}

@test "promises: concurrent FLUSHes after a failed write-back all fail, and FLUSH fails until the data is written" {
  skip_if_sanitized
  start_failing_remote r
  start_plugq "${HOLD[@]}" disk=r nbd="$(ruri r)"
  pyrun "$T/r.fail" <<'EOF'
import os, sys, nbd
from nbdremote import *
FAIL = sys.argv[1]
h = connect("r")
other = connect("r")
for i in range(16):
    h.pwrite(pattern(i, 4096), i * 64 * KiB)        # answered from the queue
open(FAIL, "w").close()
# Eight FLUSHes at once: each covers the 16 writes, so each must fail.
cookies = [h.aio_flush() for _ in range(8)]
while h.aio_in_flight() > 0:
    h.poll(-1)
outcomes = []
for c in cookies:
    try:
        h.aio_command_completed(c)
        outcomes.append("ok")
    except nbd.Error as e:
        outcomes.append(e.errno)
assert outcomes == ["EIO"] * 8, \
    "8 concurrent FLUSHes over 16 lost writes answered %s; every one must fail" % outcomes
# The data is kept, not dropped: it reads back, and every FLUSH on any
# connection fails until the remote takes it.
for i in range(16):
    expect_read(other, i * 64 * KiB, pattern(i, 4096), "read of a write the remote refused")
expect_error("a later FLUSH while the remote still fails", "EIO", h.flush)
expect_error("FLUSH on another connection", "EIO", other.flush)
os.unlink(FAIL)
h.flush()
other.flush()
for i in range(16):
    expect_read(connect("r"), i * 64 * KiB, pattern(i, 4096), "read after the FLUSH")
EOF
}

@test "promises: a FUA write across a volume's members fails when a part's write-back failed, beside a FLUSH" {
  skip_if_sanitized
  # a's writes fail once $T/a.fail exists and its flush takes 1 s, so a
  # FLUSH sent just before the FUA write is still waiting on a when the
  # FUA write's part there has failed.
  make_file "$T/a.img" 1M
  start_remote a eval get_size="stat -c %s $T/a.img" \
    pread="dd if=$T/a.img iflag=skip_bytes,count_bytes skip=\$4 count=\$3 status=none" \
    pwrite="if [ -e $T/a.fail ]; then echo 'EIO injected' >&2; exit 1; fi
            dd of=$T/a.img oflag=seek_bytes conv=notrunc seek=\$4 status=none" \
    can_write='exit 0' can_flush='exit 0' flush='sleep 1' \
    thread_model='echo parallel'
  start_remote b memory 1M
  start_plugq "${HOLD[@]}" stats="$T/stats.json" stats-interval=20ms \
    disk=a nbd="$(ruri a)" disk=b nbd="$(ruri b)" linear=vol:a,b
  pyrun "$T/a.fail" "$T/stats.json" "$T/a.img" <<'EOF'
import os, sys, nbd
from nbdremote import *
FAIL, STATS, IMG = sys.argv[1:4]
h = connect("vol")
open(FAIL, "w").close()
flush = h.aio_flush()
poll(lambda: stat(load_stats(STATS), "a", "flush.requests") >= 1, 10, "the FLUSH reaching disk a")
buf = nbd.Buffer.from_bytearray(bytearray(pattern(2, 8192)))
fua = h.aio_pwrite(buf, MiB - 4096, flags=nbd.CMD_FLAG_FUA)
while h.aio_in_flight() > 0:
    h.poll(-1)
def outcome(c):
    try:
        h.aio_command_completed(c)
        return "ok"
    except nbd.Error as e:
        return e.errno
assert outcome(fua) == "EIO", \
    "a FUA write whose part on the failing member was lost answered %s" % outcome(fua)
os.unlink(FAIL)
h.flush()
expect_file(IMG, MiB - 4096, pattern(2, 8192)[:4096], "a's file once it takes writes")
EOF
}

@test "promises: a FUA write partly overwritten before it goes out is answered only after a backend flush covers the overwrite" {
  # W0 is in flight at the remote (each write takes 1 s there); W1, FUA,
  # waits behind it; a plain zero cuts W1's middle.  W1's outer parts go
  # out with FUA, the zero without: W1 must not be answered until a flush
  # (or FUA) has covered the zero, or a power cut could leave neither W1
  # nor the zero in the middle.
  start_remote r --filter=log --filter=delay memory 64M delay-write=1 \
    delay-zero=1 logfile="$T/r.log"
  start_plugq unplug-thresh=1 stats="$T/stats.json" stats-interval=20ms \
    disk=r nbd="$(ruri r)"
  pyrun "$T/r.log" "$T/stats.json" <<'EOF'
import sys, nbd
from nbdremote import *
LOG, STATS = sys.argv[1:3]
h = connect("r")
h.pwrite(pattern(0, 12 * KiB), 0)                   # W0, answered, goes out
buf = nbd.Buffer.from_bytearray(bytearray(pattern(1, 12 * KiB)))
w1 = h.aio_pwrite(buf, 0, flags=nbd.CMD_FLAG_FUA)
poll(lambda: stat(load_stats(STATS), "r", "fua_requests") >= 1, 10,
     "the FUA write W1 queued behind W0")
h.zero(4 * KiB, 4 * KiB)                            # answered from the queue
while not h.aio_command_completed(w1):
    h.poll(-1)
calls = log_calls(LOG)
zeroes = [i for i, c in enumerate(calls) if c[0] == "Zero"]
assert zeroes, "the zero never reached the remote before W1 was answered: %s" % show(calls)
covered = any(c[0] == "Flush" for c in calls[zeroes[-1]:]) \
    or calls[zeroes[-1]][1].get("fua") == "1"
assert covered, "W1 (FUA) was answered with no flush after the zero that cut it: %s" \
    % show(calls)
EOF
}

@test "promises: a final write-out that fails at shutdown makes nbdkit exit non-zero" {
  skip_if_sanitized
  start_failing_remote r
  start_plugq "${HOLD[@]}" disk=r nbd="$(ruri r)"
  pyrun <<'EOF'
from nbdremote import *
h = connect("r")
h.pwrite(pattern(1, 64 * KiB), 0)                   # answered from the queue
h.shutdown()
EOF
  touch "$T/r.fail"
  stop_plugq && fail "nbdkit exited 0 after its final write-out failed"
  [ "$PLUGQ_STATUS" = 1 ] || fail "nbdkit exited with status $PLUGQ_STATUS, expected 1"
  grep -q "data may be lost" "$PLUGQ_LOG"
}
