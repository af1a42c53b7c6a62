#!/usr/bin/env bats
# stats=PATH in a directory other local users can write (issue 43).
#
# nbdkit usually runs as root, and fs.protected_symlinks, _regular and
# _fifos are 0 on many hosts.  Another user plants a symlink, a FIFO or a
# file of their own at every name of the directory they can predict (the
# stats file itself, and PATH.tmp, the fixed temporary name plugq once
# used): plugq must never write through the link, never block on the FIFO
# (which would hang SIGTERM's join of the stats thread) and never hand
# the other user's file over as the stats file.  The stats file must still
# be written, whole and correct, owned by the user nbdkit runs as, mode
# 0644, and nbdkit must exit promptly on SIGTERM.
#
# The directory is world-writable and sticky, like /tmp.  Run as root (as
# in CI), the planted names belong to nobody (setpriv); run as anyone
# else, they belong to that user, which tests the same mechanics.

load helpers

setup() {
  plugq_setup
  T=$BATS_TEST_TMPDIR
  # Directly under /tmp: nobody cannot reach into Bats' private 0700
  # directories.
  D=$(mktemp -d /tmp/plugq-stats-safety.XXXXXX)
  chmod 1777 "$D"
  # The file the attacker wants root to overwrite: root's, mode 600, in a
  # directory only root can reach.
  VICTIM="$T/victim"
  echo "root's secret" >"$VICTIM"
  chmod 600 "$VICTIM"
  VICTIM_SUM=$(sha256sum <"$VICTIM")
  ME=$(id -un)
}

teardown() {
  plugq_teardown
  rm -rf "$D"
}

# as_other CMD...: CMD as another user when the test runs as root.
as_other() {
  if [ "$(id -u)" = 0 ]; then
    setpriv --reuid=nobody --regid=nogroup --clear-groups -- "$@"
  else
    "$@"
  fi
}

other_user() {
  if [ "$(id -u)" = 0 ]; then echo nobody; else id -un; fi
}

# plant KIND NAME: a symlink to the victim, a FIFO or a world-writable
# file of the other user's at $D/NAME.
plant() {
  case $1 in
    symlink) as_other ln -s "$VICTIM" "$D/$2" ;;
    fifo) as_other mkfifo -m 666 "$D/$2" ;;
    file) as_other sh -c 'echo "planted" >"$1" && chmod 666 "$1"' sh "$D/$2" ;;
  esac
}

# stop_within SECONDS: SIGTERM, then wait (polling, bounded) for nbdkit to
# be gone; fails, after SIGKILL, if it is still there after SECONDS.
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
  [ "$rc" = 0 ] || { cat "$PLUGQ_LOG" >&2; fail "nbdkit exited with status $rc"; }
}

# serve_and_stop FORMAT: plugq with stats= in $D, one write, SIGTERM
# within 5 s.  The final snapshot holds the write.
serve_and_stop() {
  STATS="$D/plugq.$1"
  start_plugq disk=d memory=16M stats="$STATS" stats-format="$1" \
    stats-interval=50ms
  wait_until_regular "$STATS"
  nbdsh_run d 'h.pwrite(b"x" * 4096, 0)' 'h.flush()'
  stop_within 5
}

# wait_until_regular PATH: until PATH is a regular file (bounded, 10 s):
# the planted file there is replaced by the first snapshot.
wait_until_regular() {
  local i
  for ((i = 0; i < 200; i++)); do
    [ -f "$1" ] && [ ! -L "$1" ] && [ "$(stat -c %U "$1")" = "$ME" ] && return 0
    sleep 0.05
  done
  cat "$PLUGQ_LOG" >&2
  fail "$1 was not replaced by a stats snapshot within 10 s"
}

# check_victim: the file the planted links point at is as it was.
check_victim() {
  assert_equal "$(sha256sum <"$VICTIM")" "$VICTIM_SUM"
  assert_equal "$(stat -c '%U %a' "$VICTIM")" "$ME 600"
}

# check_snapshot FORMAT: the stats file is plugq's (owner, 0644, a regular
# file), whole, and holds the one write.  Nothing else of plugq's is left
# in the directory.
check_snapshot() {
  [ -f "$STATS" ] && [ ! -L "$STATS" ] || fail "$STATS is not a regular file"
  assert_equal "$(stat -c '%U %a' "$STATS")" "$ME 644"
  if [ "$1" = json ]; then
    assert_equal "$(stats_value "$STATS" d write.requests)" 1
  else
    pyrun "$STATS" <<'EOF'
import sys
from promcheck import parse, value
prom = parse(open(sys.argv[1]).read())
assert value(prom, "plugq_requests_total", disk="d", op="write") == 1
EOF
  fi
  run find "$D" -mindepth 1 -user "$ME" ! -path "$STATS"
  assert_output ""
}

@test "stats=: symlinks planted at PATH.tmp and PATH are never written through" {
  plant symlink plugq.json.tmp
  plant symlink plugq.json
  serve_and_stop json
  check_victim
  check_snapshot json
  [ -L "$D/plugq.json.tmp" ] || fail "the planted link at PATH.tmp was removed"
}

@test "stats=: FIFOs planted at PATH.tmp and PATH neither block the writer nor SIGTERM" {
  plant fifo plugq.json.tmp
  plant fifo plugq.json
  serve_and_stop json
  check_snapshot json
  [ -p "$D/plugq.json.tmp" ] || fail "the planted FIFO at PATH.tmp was touched"
}

@test "stats=: another user's files at PATH.tmp and PATH are not handed over as the stats file" {
  plant file plugq.json.tmp
  plant file plugq.json
  serve_and_stop json
  check_snapshot json
  assert_equal "$(cat "$D/plugq.json.tmp")" planted
  assert_equal "$(stat -c '%U %a' "$D/plugq.json.tmp")" "$(other_user) 666"
}

@test "stats-format=prometheus: the same writer, the same planted names" {
  plant symlink plugq.prometheus.tmp
  plant fifo plugq.prometheus
  serve_and_stop prometheus
  check_victim
  check_snapshot prometheus
  [ -L "$D/plugq.prometheus.tmp" ] || fail "the planted link at PATH.tmp was removed"
}
