#!/usr/bin/env bats
# contrib/plugq.service and plugq.socket: plugq run the way systemd runs
# it, without systemd.
#
# systemd-socket-activate (Debian's systemd package) listens on
# 127.0.0.1:PORT, then on the first connection execs the command line of
# the unit's ExecStart with LISTEN_FDS/LISTEN_PID set, as systemd does for
# plugq.socket.  The test stops the server with SIGTERM, as systemctl stop
# does, and checks that every write the server answered is in the backing
# file, including writes still queued (ack=queued, long unplug delay) when
# the signal came.

load helpers

CONTRIB="${top_srcdir:-$BATS_TEST_DIRNAME/..}/contrib"

setup() {
  plugq_setup
  T=$BATS_TEST_TMPDIR
  SA_PID=
  STATS_DIR=
}

teardown() {
  if [ -n "$SA_PID" ]; then
    kill -TERM "$SA_PID" 2>/dev/null || true
    wait_gone "$SA_PID" 400 || kill -KILL "$SA_PID" 2>/dev/null || true
    wait "$SA_PID" 2>/dev/null || true
  fi
  [ -z "$STATS_DIR" ] || rm -rf "$STATS_DIR"
  plugq_teardown
}

# wait_gone PID TICKS: polls (TICKS x 50 ms) until PID has exited.
wait_gone() {
  local i
  for ((i = 0; i < $2; i++)); do
    _pid_gone "$1" && return 0
    sleep 0.05
  done
  return 1
}

# unit_exec_start: the words of plugq.service's ExecStart, with the
# unit's ${VAR} and $VAR expanded the way systemd does (a $VAR alone is
# split on spaces; an empty one disappears) from the variables of the same
# names here, /usr/bin/nbdkit replaced by $NBDKIT and the plugin name by
# the built plugin.  Sets the array UNIT_ARGV.
unit_exec_start() {
  local line word
  line=$(sed -n 's/^ExecStart=//p' "$CONTRIB/plugq.service")
  [ -n "$line" ] || fail "no ExecStart= in $CONTRIB/plugq.service"
  UNIT_ARGV=()
  for word in $line; do
    case "$word" in
    /usr/bin/nbdkit) UNIT_ARGV+=("$NBDKIT") ;;
    plugq) UNIT_ARGV+=("$PLUGIN") ;;
    \$NBDKIT_OPTIONS) UNIT_ARGV+=($NBDKIT_OPTIONS) ;;
    \$PLUGQ_ARGS) UNIT_ARGV+=($PLUGQ_ARGS) ;;
    *)
      word=${word//\$\{PLUGQ_USER\}/$PLUGQ_USER}
      word=${word//\$\{PLUGQ_GROUP\}/$PLUGQ_GROUP}
      [[ "$word" != *'$'* ]] || fail "ExecStart word '$word' is not expanded by this test"
      UNIT_ARGV+=("$word") ;;
    esac
  done
}

# free_port: a TCP port on 127.0.0.1 that nothing listens on now.
free_port() {
  "$PYTHON" -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# socket_activate ARGV...: systemd-socket-activate -l 127.0.0.1:PORT ARGV
# in the background; returns once it listens (it says so on stderr), with
# PORT and SA_PID set.  A port taken in between is tried again.
socket_activate() {
  local try i
  for ((try = 0; try < 5; try++)); do
    PORT=$(free_port)
    systemd-socket-activate -l "127.0.0.1:$PORT" "$@" \
      </dev/null >"$PLUGQ_LOG" 2>&1 3>&- &
    SA_PID=$!
    for ((i = 0; i < 200; i++)); do
      grep -q "^Listening on 127.0.0.1:$PORT" "$PLUGQ_LOG" && return 0
      _pid_gone "$SA_PID" && break
      sleep 0.05
    done
    wait "$SA_PID" 2>/dev/null || true
    SA_PID=
    grep -q "in use" "$PLUGQ_LOG" || break
  done
  cat "$PLUGQ_LOG" >&2
  fail "systemd-socket-activate did not listen on 127.0.0.1"
}

# install_build_tree ROOT: make install of the build tree under test into
# ROOT (DESTDIR), so what the units name is checked against what the
# same install put there, never against an earlier install on the machine.
install_build_tree() {
  local builddir=${top_builddir:-${PLUGIN%/.libs/*}}
  make -s -C "$builddir" install DESTDIR="$1" >"$T/install.log" 2>&1 \
    || { cat "$T/install.log" >&2; fail "make install DESTDIR=$1 in $builddir failed"; }
}

# man_pages UNIT...: the units' Documentation=man: pages, one per line as
# "SECTION NAME" (man's arguments).
man_pages() {
  sed -n 's/^Documentation=//p' "$@" | tr ' ' '\n' \
    | sed -n 's/^man:\(.*\)(\([0-9a-z]*\))$/\2 \1/p' | sort -u
}

@test "service: the installed unit files pass systemd-analyze verify" {
  command -v systemd-analyze >/dev/null || skip "systemd-analyze is not installed"
  command -v man >/dev/null || skip "man is not installed (Debian package man-db)"
  local root=$T/root units mandir section name foreign_missing=() line
  install_build_tree "$root"
  units=$(find "$root" -path '*/systemd/system/plugq.socket' -printf '%h\n')
  [ -n "$units" ] && [ -f "$units/plugq.service" ] \
    || fail "make install put no plugq.socket and plugq.service in a systemd/system folder"
  mandir=$(find "$root" -path '*/man1/nbdkit-plugq-plugin.1' -printf '%h\n')
  [ -n "$mandir" ] || fail "make install put no man1/nbdkit-plugq-plugin.1"
  mandir=${mandir%/man1}

  # plugq's own pages must be in this install; nbdkit's (nbdkit-service(1))
  # come from the machine.  Where nbdkit's pages are all missing (man pages
  # left out of the system), that is reported, not held against the units.
  while read -r section name; do
    if [[ "$name" == nbdkit-plugq* ]]; then
      run env MANPATH="$mandir" man -w "$section" "$name"
      assert_success
      assert_output "$mandir/man$section/$name.$section"
    elif ! env -u MANPATH man -w "$section" "$name" >/dev/null 2>&1; then
      env -u MANPATH man -w 1 nbdkit >/dev/null 2>&1 \
        && fail "the units name $name($section): nbdkit(1) is installed here, that page is not"
      echo "# $name($section) is not installed on this machine, nor nbdkit(1)" >&3
      foreign_missing+=("$name($section)")
    fi
  done < <(man_pages "$units/plugq.socket" "$units/plugq.service")

  # verify loads the units with systemd's own parser; it needs no running
  # systemd, but it does need /usr/bin/nbdkit (ExecStart), a writable
  # runtime directory, and man for every Documentation=man: page (MANPATH
  # ending in ':' adds the machine's own pages after this install's).
  # Unknown keys and bad values are only warnings, so any output fails too.
  run env MANPATH="$mandir:" systemd-analyze verify "$units/plugq.socket" "$units/plugq.service"
  if [ "$status" -ne 0 ] && [[ "$output" == *"Failed to initialize manager"* ||
       "$output" == *"Failed to allocate manager"* ]]; then
    skip "systemd-analyze cannot start its manager here: $output"
  fi
  for name in "${foreign_missing[@]}"; do
    output=$(grep -vF "Command 'man $name' failed" <<<"$output") || true
  done
  [ ${#foreign_missing[@]} -gt 0 ] || assert_success
  assert_output ""
}

@test "service: make install puts the example plugq.env where the installed unit reads it" {
  local root=$T/root env_file
  install_build_tree "$root"
  env_file=$(sed -n 's/^EnvironmentFile=-//p' "$(find "$root" -path '*/systemd/system/plugq.service')")
  [ -n "$env_file" ] || fail "the installed plugq.service has no EnvironmentFile=-PATH"
  cmp "$CONTRIB/plugq.env" "$root$env_file"
  # An administrator's edited file is kept by the next make install.
  echo "PLUGQ_ARGS=disk=mine memory=1G" >"$root$env_file"
  install_build_tree "$root"
  assert_equal "$(cat "$root$env_file")" "PLUGQ_ARGS=disk=mine memory=1G"
}

@test "service: the unit's ExecStart needs socket activation, not --exit-with-parent" {
  run grep -E '^(ExecStart=.*(--exit-with-parent|-U|-p|--run|-s )|Accept=yes)' \
    "$CONTRIB/plugq.service" "$CONTRIB/plugq.socket"
  assert_failure
  run grep -E '^(ListenStream=|Requires=plugq.socket)' \
    "$CONTRIB/plugq.service" "$CONTRIB/plugq.socket"
  assert_success
}

@test "service: socket activated as the unit runs it; SIGTERM writes out every answered write" {
  command -v systemd-socket-activate >/dev/null \
    || skip "systemd-socket-activate is not installed (Debian package systemd)"
  make_file "$T/disk.img" $((64 * MiB))
  # The unit's defaults drop root: the stats writer then runs as nobody,
  # in a directory of its own (the unit's /run/plugq).
  STATS_DIR=$(mktemp -d /tmp/plugq-service.XXXXXX)
  if [ "$(id -u)" -eq 0 ]; then
    PLUGQ_USER=nobody PLUGQ_GROUP=nogroup
    chown nobody:nogroup "$STATS_DIR"
  else
    PLUGQ_USER=$(id -un) PLUGQ_GROUP=$(id -gn)
  fi
  NBDKIT_OPTIONS=
  PLUGQ_ARGS="disk=d file=$T/disk.img ack=queued ${LONG_QUEUE[*]} stats=$STATS_DIR/plugq.json"
  unit_exec_start
  socket_activate "${UNIT_ARGV[@]}"

  # Phase 1: 32 answered writes that stay queued (checked in the file);
  # phase 2: 64 more in flight while SIGTERM arrives.  Every write the
  # server answered must be in the file after it exits; writes it refused
  # (shutting down) may or may not be.
  pyrun "$PORT" "$SA_PID" "$T/disk.img" "$T/answered" <<'EOF'
import os, signal, sys
import nbd
from plugqtest import KiB, pattern, file_has

port, pid, img, answered_path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
h = nbd.NBD()
h.connect_uri(f"nbd://127.0.0.1:{port}/d")
blocks = [(i, i * 64 * KiB) for i in range(96)]
answered = []
for i, off in blocks[:32]:
    h.pwrite(pattern(i, 4 * KiB), off)
    answered.append(i)
for i, off in blocks[:32]:
    assert not file_has(img, off, pattern(i, 4 * KiB)), \
        f"block {i} is in the file before SIGTERM: it was not queued"

pending = set(i for i, _ in blocks[32:])

def done(i, err):
    pending.discard(i)
    if err.value == 0:
        answered.append(i)
    return 1                    # retire the command

for i, off in blocks[32:]:
    h.aio_pwrite(pattern(i, 4 * KiB), off,
                 completion=lambda err, i=i: done(i, err))
os.kill(pid, signal.SIGTERM)

# Until the server closes the connection, collect what it answered.
while pending and not (h.aio_is_dead() or h.aio_is_closed()):
    try:
        h.poll(1)
    except nbd.Error:
        break
with open(answered_path, "w") as f:
    f.write(" ".join(map(str, answered)))
EOF
  wait_gone "$SA_PID" 400 || fail "nbdkit did not exit within 20 s of SIGTERM"
  local rc=0
  wait "$SA_PID" || rc=$?
  SA_PID=
  [ "$rc" -eq 0 ] || { cat "$PLUGQ_LOG" >&2; fail "nbdkit exited with status $rc"; }

  pyrun "$T/disk.img" "$T/answered" <<'EOF'
import sys
from plugqtest import KiB, pattern, expect_file
answered = [int(x) for x in open(sys.argv[2]).read().split()]
assert len(answered) >= 32, f"only {len(answered)} writes answered"
for i in answered:
    expect_file(sys.argv[1], i * 64 * KiB, pattern(i, 4 * KiB), f"answered write {i}")
print(f"{len(answered)} answered writes all in the file")
EOF
  # The queue was drained by shutdown, not by a timer or a flush, and the
  # stats writer (running as the unit's user) wrote the final snapshot.
  assert_equal "$(stats_value "$STATS_DIR/plugq.json" d unplugs.drain)" 1
  assert_equal "$(stats_value "$STATS_DIR/plugq.json" d unplugs.timer)" 0
  assert_equal "$(stats_value "$STATS_DIR/plugq.json" d flush.requests)" 0
  [ "$(id -u)" -ne 0 ] || assert_equal "$(stat -c %U "$STATS_DIR/plugq.json")" nobody
}

@test "service: the example plugq.env starts plugq as it stands (paths moved here)" {
  local args
  args=$(sed -n 's/^PLUGQ_ARGS=//p' "$CONTRIB/plugq.env")
  [ -n "$args" ] || fail "no PLUGQ_ARGS= in $CONTRIB/plugq.env"
  args=${args//\/srv\//$T/}
  args=${args//\/run\/plugq\//$T/}
  [[ "$args" != *" /"* && "$args" != *"=/srv"* && "$args" != *"=/run"* ]] \
    || fail "a path of plugq.env is not moved into the test directory: $args"
  make_file "$T/db.img" $((16 * MiB))
  # shellcheck disable=SC2086 # split on spaces as systemd splits $PLUGQ_ARGS
  run_nbdkit "$PLUGIN" $args --run 'nbdinfo --list --json "$uri"' >"$T/list.json"
  jq -e '[.exports[]."export-name"] | sort == ["db", "scratch"]' "$T/list.json"
  "$PYTHON" "$BATS_TEST_DIRNAME/promcheck.py" "$T/plugq.prom"
}
