# shellcheck shell=bash
# Remote NBD servers for the client tests of nbd= disks (nbd.bats,
# promises.bats): each remote is an nbdkit on a unix socket in the test's
# own directory, stopped by its pid in remote_teardown even after a
# failure.  client-tests/nbdremote.py holds the Python side.

load helpers

remote_setup() {
  plugq_setup
  T=$BATS_TEST_TMPDIR
  export NBDKIT
}

remote_teardown() {
  local rc=0 f pid
  plugq_teardown || rc=1
  # Remotes: each remote-NAME.pid is removed once its nbdkit is known gone,
  # and a pid is only signalled while it is still an nbdkit.
  for f in "$T"/remote-*.pid; do
    [ -s "$f" ] || continue
    pid=$(cat "$f")
    if grep -qa nbdkit "/proc/$pid/cmdline" 2>/dev/null; then
      kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
  done
  # A remote whose pid file never appeared: every nbdkit of this test has
  # a socket in this test's own directory.
  for pid in $(pgrep -f -- "nbdkit -U $T/" || true); do
    kill -KILL "$pid" 2>/dev/null || true
  done
  return $rc
}

# rsock NAME / rpid NAME / ruri NAME: a remote's socket, pid file and URI.
rsock() { printf '%s/%s.sock\n' "$T" "$1"; }
rpid() { printf '%s/remote-%s.pid\n' "$T" "$1"; }
ruri() { printf 'nbd+unix:///?socket=%s\n' "$(rsock "$1")"; }

# start_remote NAME NBDKIT-ARGS...: a remote nbdkit (daemonized, so it
# listens once this returns) on $(rsock NAME), pid in $(rpid NAME).
start_remote() {
  local name=$1 sock pidf
  shift
  sock=$(rsock "$name")
  pidf=$(rpid "$name")
  rm -f "$sock" "$pidf"
  if ! timeout 20 "$NBDKIT" -U "$sock" -P "$pidf" "$@" \
       </dev/null >"$T/remote-$name.out" 2>&1 3>&-; then
    echo "remote $name did not start: $(cat "$T/remote-$name.out")" >&2
    return 1
  fi
  # nbdkit 1.32 listens before it forks, but its child writes the pid
  # file a moment after the parent returned.
  wait_for_file "$pidf" || return 1
  [ -S "$sock" ] || { echo "remote $name: no socket $sock" >&2; return 1; }
}

# prefill FILE SIZE SEED: FILE holds pattern(SEED, SIZE).
prefill() {
  pyrun "$@" <<'EOF'
import sys
from plugqtest import pattern
with open(sys.argv[1], "wb") as f:
    f.write(pattern(int(sys.argv[3]), int(sys.argv[2])))
EOF
}

# eval_file_remote FILE CAN_FLUSH CAN_TRIM: sets EVAL_REMOTE to the
# arguments of an eval-plugin remote over FILE, where CAN_FLUSH and
# CAN_TRIM (0 yes, 3 no) are the only differences: no nbdkit filter takes
# FLUSH or TRIM away.  Trim is advisory, so doing nothing is a real one.
eval_file_remote() {
  local f=$1
  EVAL_REMOTE=(eval get_size="stat -c %s $f"
    pread="dd if=$f iflag=skip_bytes,count_bytes skip=\$4 count=\$3 status=none"
    pwrite="dd of=$f oflag=seek_bytes conv=notrunc seek=\$4 status=none"
    can_write='exit 0' can_flush="exit $2" flush="sync $f"
    can_trim="exit $3" trim='exit 0')
}

# A remote that cannot trim (nor report extents; nbdkit emulates zero
# with writes): nbdkit's eval plugin over FILE that cannot trim, under
# the log filter.
# start_notrim_remote NAME FILE LOGFILE
start_notrim_remote() {
  eval_file_remote "$2" 0 3
  start_remote "$1" --filter=log "${EVAL_REMOTE[@]}" logfile="$3"
}
