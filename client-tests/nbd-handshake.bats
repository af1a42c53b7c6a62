#!/usr/bin/env bats
# An nbd= remote that accepts the connection but never says a word of the
# NBD handshake (issue 43): a hung or hostile server, or something else
# listening where the remote was.  Dialling it must neither hang that
# disk for good, nor any other disk, nor SIGTERM's drain, nor nbdkit's
# start: connect-timeout= bounds each dial, and shutdown abandons one in
# progress at once.

load helpers

setup() {
  plugq_setup
  T=$BATS_TEST_TMPDIR
  SILENT_PID=
  REMOTE_PID=
  cat >"$T/silent.py" <<'EOF'
# silent.py SOCKET: accepts every connection on SOCKET and says nothing.
# SOCKET.ready appears once it listens; SOCKET.accepted holds how many
# connections it has accepted.
import os, socket, sys
path = sys.argv[1]
s = socket.socket(socket.AF_UNIX)
s.bind(path)
s.listen(16)
open(path + ".ready", "w").close()
held = []
while True:
    c, _ = s.accept()
    held.append(c)
    with open(path + ".tmp", "w") as f:
        f.write("%d\n" % len(held))
    os.replace(path + ".tmp", path + ".accepted")
EOF
}

teardown() {
  plugq_teardown
  stop_job "$SILENT_PID"
  stop_job "$REMOTE_PID"
}

# stop_job PID: kills a server this test started in the background and
# reaps it (quietly: it dies of the signal).
stop_job() {
  [ -n "$1" ] || return 0
  kill -KILL "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

# start_silent SOCKET: the silent server on SOCKET, once it listens.
start_silent() {
  rm -f "$1" "$1.ready" "$1.accepted"
  "$PYTHON" "$T/silent.py" "$1" </dev/null >"$T/silent.log" 2>&1 3>&- &
  SILENT_PID=$!
  wait_for_path "$1.ready"
}

# start_remote SOCKET: a real remote, nbdkit memory 64M, once it listens.
start_remote() {
  rm -f "$1" "$T/remote.pid"
  "$NBDKIT" -f -U "$1" -P "$T/remote.pid" memory 64M \
    </dev/null >"$T/remote.log" 2>&1 3>&- &
  REMOTE_PID=$!
  wait_for_path "$T/remote.pid"
  wait_for_path "$1"
}

# wait_for_path PATH: until PATH exists (bounded, 10 s).
wait_for_path() {
  local i
  for ((i = 0; i < 200; i++)); do
    [ -e "$1" ] && return 0
    sleep 0.05
  done
  fail "$1 did not appear within 10 s"
}

# accepted_at_least N SOCKET: until the silent server has accepted N
# connections (bounded, 20 s).
accepted_at_least() {
  local i
  for ((i = 0; i < 400; i++)); do
    [ "$(cat "$2.accepted" 2>/dev/null || echo 0)" -ge "$1" ] && return 0
    sleep 0.05
  done
  cat "$PLUGQ_LOG" >&2
  fail "plugq did not dial the silent server $1 times within 20 s"
}

# stop_within SECONDS [STATUS]: SIGTERM, then nbdkit must be gone
# (polled, bounded) within SECONDS and have exited with STATUS (0).
stop_within() {
  local pid job=$PLUGQ_PID i rc=0
  pid=$(plugq_pid)
  PLUGQ_PID=
  kill -TERM "$pid"
  for ((i = 0; i < $1 * 20; i++)); do
    _pid_gone "$pid" && break
    sleep 0.05
  done
  if ! _pid_gone "$pid"; then
    kill -KILL "$pid" "$job" 2>/dev/null || true
    wait "$job" 2>/dev/null || true
    cat "$PLUGQ_LOG" >&2
    fail "nbdkit was still running $1 s after SIGTERM"
  fi
  wait "$job" || rc=$?
  [ "$rc" = "${2:-0}" ] || { cat "$PLUGQ_LOG" >&2; fail "nbdkit exited with status $rc"; }
}

@test "nbd handshake: a silent remote after a loss hangs only its own disk, and SIGTERM still ends nbdkit" {
  # The drain's flush of the lost disk fails, and logs so, before exit.
  skip_if_sanitized
  local rs=$T/remote.sock
  start_remote "$rs"
  # connect-timeout= longer than the test: SIGTERM must not wait for it.
  start_plugq disk=far nbd="nbd+unix:///?socket=$rs" reconnect=50ms \
    connect-timeout=3600s disk=near memory=16M
  nbdsh_run far 'h.pwrite(b"f" * 4096, 0)' 'h.flush()'

  stop_job "$REMOTE_PID"
  REMOTE_PID=
  start_silent "$rs"
  accepted_at_least 1 "$rs"

  # While plugq waits for the silent server's handshake: the other disk
  # reads and writes, and this one fails at once rather than hang.
  pyrun <<'EOF'
import time, nbd
from plugqtest import *
h = connect("near")
h.pwrite(pattern(7, 64 * KiB), MiB)
h.flush()
expect_read(h, MiB, pattern(7, 64 * KiB), "near, while far dials")
h.shutdown()
h = connect("far")
t0 = time.monotonic()
try:
    h.pread(4096, 0)
    raise AssertionError("far read while its remote is a silent server")
except nbd.Error as e:
    assert e.errno == "EIO", "far: %s, expected EIO" % e
assert time.monotonic() - t0 < 5, "far's read took %.1fs to fail" % (time.monotonic() - t0)
h.shutdown()
EOF
  # The lost disk's final flush fails: what was written there since its
  # last flush may be gone, and the exit status says so.
  stop_within 5 1
  grep -q "far: data may be lost" "$PLUGQ_LOG"
}

@test "nbd handshake: connect-timeout= gives up on a silent remote, redials, and takes a real one back" {
  local rs=$T/remote.sock
  start_remote "$rs"
  start_plugq disk=far nbd="nbd+unix:///?socket=$rs" reconnect=50ms \
    connect-timeout=300ms
  stop_job "$REMOTE_PID"
  REMOTE_PID=
  start_silent "$rs"
  # Each dial is abandoned after 300 ms and the next one made.
  accepted_at_least 2 "$rs"
  grep -q "no NBD handshake within 300ms" "$PLUGQ_LOG" \
    || { cat "$PLUGQ_LOG" >&2; fail "the log does not say why the dial was abandoned"; }

  stop_job "$SILENT_PID"
  SILENT_PID=
  start_remote "$rs"
  pyrun <<'EOF'
import nbd
from plugqtest import *
def serves():
    h = connect("far")
    try:
        return reads_as(h, 0, bytes(4096))
    finally:
        h.shutdown()
poll(serves, 30, "far served by the real remote again")
EOF
  grep -q "reconnected" "$PLUGQ_LOG" || fail "the log does not say it reconnected"
  stop_within 5
}

@test "nbd handshake: a silent remote at startup fails nbdkit with a clear error after connect-timeout=" {
  skip_if_sanitized
  local rs=$T/remote.sock
  start_silent "$rs"
  SECONDS=0
  run timeout 30 "$NBDKIT" -U - "$PLUGIN" \
    disk=far nbd="nbd+unix:///?socket=$rs" connect-timeout=500ms --run true
  assert_failure
  [ "$status" != 124 ] || fail "nbdkit was still starting after 30 s"
  [ "$SECONDS" -lt 10 ] || fail "nbdkit took $SECONDS s to give up"
  assert_output --partial "nbd=nbd+unix:///?socket=$rs: cannot connect: no NBD handshake within 500ms"
}
