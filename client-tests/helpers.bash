# shellcheck shell=bash
# Helpers for the plugq client tests.
#
# Under `make check` the environment has PLUGIN (the built .so), NBDKIT,
# top_srcdir and top_builddir.  Standalone:
#   PLUGIN=/path/to/.libs/nbdkit-plugq-plugin.so bats client-tests/x.bats
#
# Servers listen on unix sockets only.  A server started with start_plugq is
# stopped by plugq_teardown (or stop_plugq); nbdkit -U - ... --run is used
# where the whole conversation fits in one command, since nbdkit's cleanup
# (the plugin's drain) has finished when --run returns.

bats_load_library bats-support
bats_load_library bats-assert
bats_load_library bats-file

# nbdsh is a wrapper around python3 -m nbd, and only /usr/bin/python3 has
# the nbd module on this kind of machine.
export PATH="/usr/bin:$PATH"
NBDKIT="${NBDKIT:-nbdkit}"
PYTHON=/usr/bin/python3
export PYTHONPATH="$BATS_TEST_DIRNAME${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1

if [ -z "${PLUGIN:-}" ] && [ -n "${top_builddir:-}" ]; then
  PLUGIN="$top_builddir/.libs/nbdkit-plugq-plugin.so"
fi

KiB=1024
MiB=$((1024 * 1024))
GiB=$((1024 * MiB))
export KiB MiB GiB

# A queue that does not unplug by itself while a test looks: the timer,
# the threshold and the deadline are all far away, and no write goes
# around it (bypass=never: on file and memory disks a lone random write
# would otherwise go straight to the backend).
LONG_QUEUE=(unplug-delay=20s unplug-thresh=100000 write-expire=60s bypass=never)

plugq_setup() {
  if [ -z "${PLUGIN:-}" ] || [ ! -f "$PLUGIN" ]; then
    fail "PLUGIN='${PLUGIN:-}' is not the built plugin: set PLUGIN=/path/to/.libs/nbdkit-plugq-plugin.so"
  fi
  PLUGQ_PID=
  PLUGQ_DIRECT_FILES=()
  PLUGQ_WRAPPER=()
  PLUGQ_SOCK="$BATS_TEST_TMPDIR/plugq.sock"
  PLUGQ_PIDFILE="$BATS_TEST_TMPDIR/plugq.pid"
  PLUGQ_LOG="$BATS_TEST_TMPDIR/plugq.log"
  export PLUGQ_SOCK
}

plugq_teardown() {
  local rc=0 f
  stop_plugq || rc=1
  for f in "${PLUGQ_DIRECT_FILES[@]}"; do rm -f "$f"; done
  PLUGQ_DIRECT_FILES=()
  return $rc
}

# start_plugq [NBDKIT-OPTIONS... --] PLUGIN-ARGS...
# Starts nbdkit in the background on $PLUGQ_SOCK and returns once it is
# listening (pid file written, socket present).  Fails, showing the log, if
# nbdkit exits during startup.  If the array PLUGQ_WRAPPER is set (e.g. to
# strace ...), nbdkit runs under it.
start_plugq() {
  local opts=() a
  for a in "$@"; do
    if [ "$a" = "--" ]; then
      while [ "$1" != "--" ]; do opts+=("$1"); shift; done
      shift
      break
    fi
  done
  [ -z "${PLUGQ_PID:-}" ] || stop_plugq
  rm -f "$PLUGQ_SOCK" "$PLUGQ_PIDFILE"
  "${PLUGQ_WRAPPER[@]}" "$NBDKIT" -f -U "$PLUGQ_SOCK" -P "$PLUGQ_PIDFILE" \
    --exit-with-parent "${opts[@]}" "$PLUGIN" "$@" \
    </dev/null >"$PLUGQ_LOG" 2>&1 3>&- &
  PLUGQ_PID=$!
  local i rc
  for ((i = 0; i < 400; i++)); do   # at most 20 s
    if [ -s "$PLUGQ_PIDFILE" ] && [ -S "$PLUGQ_SOCK" ]; then
      return 0
    fi
    if _pid_gone "$PLUGQ_PID"; then
      rc=0
      wait "$PLUGQ_PID" || rc=$?
      PLUGQ_PID=
      echo "nbdkit exited with status $rc during startup; its log:" >&2
      cat "$PLUGQ_LOG" >&2
      return 1
    fi
    sleep 0.05
  done
  echo "nbdkit did not start listening within 20 s; its log:" >&2
  cat "$PLUGQ_LOG" >&2
  stop_plugq || true
  return 1
}

_pid_gone() {
  local state
  kill -0 "$1" 2>/dev/null || return 0
  # A child that exited but was not reaped yet is a zombie.
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 0
  [ "$state" = Z ]
}

# plugq_pid: the pid of the running nbdkit (from its pid file).
plugq_pid() {
  cat "$PLUGQ_PIDFILE"
}

# stop_plugq: SIGTERM, wait until the process is gone, remove the socket
# (nbdkit 1.32 leaves it behind).  Fails if nbdkit does not exit within
# 20 s or exits non-zero; the exit status is left in PLUGQ_STATUS.
stop_plugq() {
  [ -n "${PLUGQ_PID:-}" ] || return 0
  local job=$PLUGQ_PID pid i rc=0
  PLUGQ_PID=
  pid=$(cat "$PLUGQ_PIDFILE" 2>/dev/null) || pid=
  [ -n "$pid" ] || pid=$job
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 400; i++)); do
    _pid_gone "$pid" && _pid_gone "$job" && break
    sleep 0.05
  done
  if ! _pid_gone "$pid" || ! _pid_gone "$job"; then
    kill -KILL "$pid" "$job" 2>/dev/null || true
    wait "$job" 2>/dev/null || true
    rm -f "$PLUGQ_SOCK"
    echo "nbdkit (pid $pid) did not exit within 20 s of SIGTERM; its log:" >&2
    cat "$PLUGQ_LOG" >&2
    PLUGQ_STATUS=killed
    return 1
  fi
  wait "$job" || rc=$?
  PLUGQ_STATUS=$rc
  rm -f "$PLUGQ_SOCK"
  if [ "$rc" -ne 0 ]; then
    echo "nbdkit exited with status $rc after SIGTERM; its log:" >&2
    cat "$PLUGQ_LOG" >&2
    return 1
  fi
}

# uri [EXPORT [SOCKET]]: the NBD URI of an export (plain names only).
uri() {
  printf 'nbd+unix:///%s?socket=%s\n' "${1-}" "${2:-$PLUGQ_SOCK}"
}

# nbdsh_run EXPORT CODE...: runs nbdsh connected to EXPORT of the running
# server, each CODE as one -c.
nbdsh_run() {
  local u args=() c
  u=$(uri "$1")
  shift
  for c in "$@"; do args+=(-c "$c"); done
  PATH="/usr/bin:$PATH" nbdsh -u "$u" "${args[@]}"
}

# pyrun [ARGS...] <<'EOF' ... EOF: runs a Python script (stdin) with the
# libnbd bindings and plugqtest.py importable; ARGS are in sys.argv[1:].
pyrun() {
  "$PYTHON" - "$@"
}

# run_nbdkit ARGS...: a captive nbdkit (-U - ... --run), bounded in time.
run_nbdkit() {
  timeout 60 "$NBDKIT" -U - "$@"
}

# make_file PATH SIZE: a sparse file of SIZE bytes.
make_file() {
  rm -f "$1"
  truncate -s "$2" "$1"
}

# nbdinfo_json ARGS...: nbdinfo --json, output only (stderr to the log).
nbdinfo_json() {
  nbdinfo --json "$@"
}

# stats_value FILE DISK DOTTED.PATH: one counter from a stats JSON file.
stats_value() {
  pyrun "$@" <<'EOF'
import sys
from plugqtest import load_stats, stat
print(stat(load_stats(sys.argv[1]), sys.argv[2], sys.argv[3]))
EOF
}

# wait_for_file PATH [TEST]: polls (bounded, 10 s) until PATH passes the
# test TEST, by default -s (exists and is not empty; -S: is a socket).
wait_for_file() {
  local i test=${2:--s}
  for ((i = 0; i < 200; i++)); do
    [ "$test" "$1" ] && return 0
    sleep 0.05
  done
  echo "$1 did not appear within 10 s" >&2
  return 1
}

# make_direct_file SIZE: sets DIRECT_FILE to a new file of SIZE bytes on
# a real file system (/var/tmp, not tmpfs) for direct=true; skips the test
# if O_DIRECT is refused there.  plugq_teardown removes it.
make_direct_file() {
  DIRECT_FILE=$(mktemp /var/tmp/plugq-direct.XXXXXX)
  PLUGQ_DIRECT_FILES+=("$DIRECT_FILE")
  if ! dd if=/dev/zero of="$DIRECT_FILE" bs=4096 count=1 oflag=direct \
       status=none 2>/dev/null; then
    skip "O_DIRECT is refused on /var/tmp"
  fi
  truncate -s "$1" "$DIRECT_FILE"
}

# skip_if_sanitized: for tests whose nbdkit exits after an error.  With
# the sanitizer runtime preloaded into nbdkit (the ASan stage of
# scripts/test-all.sh sets PLUGQ_SANITIZED=1), such an exit can deadlock
# in p11-kit's exit handler (__freelocale waits on glibc's setlocale
# lock); a trivial plugin whose .config fails after a failed stat() does
# the same, so it is not plugq's.  The plain build runs these tests.
skip_if_sanitized() {
  if [ -n "${PLUGQ_SANITIZED:-}" ]; then
    skip "nbdkit with a preloaded sanitizer deadlocks at exit after an error"
  fi
}

# skip_if_sanitized_memory: for tests that bound the server's memory.
# AddressSanitizer's shadow memory and free quarantine grow RSS by design.
skip_if_sanitized_memory() {
  if [ -n "${PLUGQ_SANITIZED:-}" ]; then
    skip "AddressSanitizer's quarantine and shadow memory make RSS bounds meaningless"
  fi
}
