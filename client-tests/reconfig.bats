#!/usr/bin/env bats
# plugq reconfigured in service: config=FILE, control=PATH and plugqctl
# (list, add, remove [--drain|--force], set, grow, reload), and every way
# in which a change is refused: each refusal is one line saying what and
# why, changes nothing, and the server serves on.

load helpers

setup() {
  plugq_setup
  T=$BATS_TEST_TMPDIR
  CTL=$T/ctl
  QCTL=$top_srcdir/plugqctl
  HELPER_PIDS=()
  NBDKIT_PIDS=()
}

teardown() {
  local p
  for p in "${HELPER_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${NBDKIT_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${HELPER_PIDS[@]}" "${NBDKIT_PIDS[@]}"; do
    wait "$p" 2>/dev/null || true
  done
  plugq_teardown
}

# wait_for_socket PATH: until a socket exists at PATH (bounded, 10 s).
wait_for_socket() {
  local i
  for ((i = 0; i < 200; i++)); do
    [ -S "$1" ] && return 0
    sleep 0.05
  done
  echo "no socket at $1 within 10 s; the server's log:" >&2
  cat "$PLUGQ_LOG" >&2
  return 1
}

# start_control ARGS...: start_plugq with control=$CTL, once it listens.
start_control() {
  start_plugq "$@" control="$CTL"
  wait_for_socket "$CTL"
}

ctl() {
  "$QCTL" "$CTL" "$@"
}

# assert_one_line_error: the last `run` failed with one line of output.
assert_one_line_error() {
  assert_failure
  if [ "${#lines[@]}" -ne 1 ]; then
    fail "expected one line, got ${#lines[@]}: $output"
  fi
}

# nbdkit_message TEXT: an nbdkit error line without nbdkit's prefix.
nbdkit_message() {
  local m=${1#nbdkit: }
  m=${m#plugq: }
  printf '%s\n' "${m#error: }"
}

# names_listed: the names `list` shows, one line.
names_listed() {
  ctl list | awk 'NR > 1 { print $1 }' | sort | tr '\n' ' '
}

# ---------------------------------------------------------------- config=

@test "reconfig: a config= file's keys come after the command line's, comments skipped" {
  make_file "$T/a.img" 1M
  make_file "$T/b.img" 2M
  cat >"$T/plugq.conf" <<EOF
# the file continues the command line: this key sets disk a
unplug-delay = 5ms

disk=b
file=$T/b.img
linear=v:a,b
default-export=v
EOF
  run run_nbdkit "$PLUGIN" disk=a file="$T/a.img" config="$T/plugq.conf" \
    stats="$T/s.json" --run 'nbdinfo --size "$uri"'
  assert_success
  assert_output $((3 * MiB))
  assert_equal "$(stats_value "$T/s.json" a config.unplug_delay_us)" 5000
}

@test "reconfig: a bad config= file stops the start, naming FILE:LINE; a missing one is named" {
  skip_if_sanitized
  printf 'disk=a\nmemory=1M\nunplug-delay=3parsecs\n' >"$T/bad.conf"
  run timeout 30 "$NBDKIT" -U - "$PLUGIN" config="$T/bad.conf" --run 'exit 0'
  assert_one_line_error
  assert_output --partial "$T/bad.conf:3: unplug-delay=3parsecs"
  printf 'disk=a\nmemory=1M\nlinear=v:a,nope\n' >"$T/member.conf"
  run timeout 30 "$NBDKIT" -U - "$PLUGIN" config="$T/member.conf" --run 'exit 0'
  assert_one_line_error
  assert_output --partial "$T/member.conf:3: linear=v:a,nope: unknown member 'nope'"
  run timeout 30 "$NBDKIT" -U - "$PLUGIN" config="$T/nothere.conf" --run 'exit 0'
  assert_one_line_error
  assert_output --partial "config=$T/nothere.conf: No such file or directory"
}

# ---------------------------------------------------------------- the socket

@test "reconfig: control= is a 0600 socket; a stale one of ours is replaced, and removed at the end" {
  # A socket nobody listens on, as a killed server leaves it.
  "$PYTHON" -c 'import socket, sys; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])' "$CTL"
  [ -S "$CTL" ]
  start_control disk=a memory=1M
  assert_equal "$(stat -c %a "$CTL")" 600
  assert_equal "$(stat -c %u "$CTL")" "$(id -u)"
  run ctl list
  assert_success
  stop_plugq
  [ ! -e "$CTL" ] || fail "the server left its socket behind"
}

@test "reconfig: control= refuses a symlink, another kind of file and a socket a server listens on" {
  skip_if_sanitized
  ln -s "$T/elsewhere" "$CTL"
  run timeout 30 "$NBDKIT" -U - "$PLUGIN" control="$CTL" --run 'exit 0'
  assert_one_line_error
  assert_output --partial "control=$CTL: is a symbolic link"
  [ ! -e "$T/elsewhere" ] || fail "the link was followed"
  rm "$CTL"
  echo precious >"$CTL"
  run timeout 30 "$NBDKIT" -U - "$PLUGIN" control="$CTL" --run 'exit 0'
  assert_one_line_error
  assert_output --partial "exists and is not a socket"
  assert_equal "$(cat "$CTL")" precious
  rm "$CTL"
  start_control disk=a memory=1M
  run timeout 30 "$NBDKIT" -U - "$PLUGIN" control="$CTL" --run 'exit 0'
  assert_one_line_error
  assert_output --partial "another server is listening on it"
  run ctl list
  assert_success
}

@test "reconfig: a peer of another uid is refused, by the socket's mode and by its uid" {
  [ "$(id -u)" -eq 0 ] || skip "needs root to run plugqctl as nobody"
  local dir
  dir=$(mktemp -d /tmp/plugq-ctl.XXXXXX)
  chmod 755 "$dir"
  CTL=$dir/ctl
  start_control disk=a memory=1M
  run setpriv --reuid=nobody --regid=nogroup --clear-groups "$QCTL" "$CTL" list
  assert_one_line_error
  assert_output --partial "Permission denied"
  assert_output --partial "mode 0600"
  # Were the mode opened, the server still asks the peer's uid.
  chmod 666 "$CTL"
  run setpriv --reuid=nobody --regid=nogroup --clear-groups "$QCTL" "$CTL" \
    add disk=x memory=1M
  assert_one_line_error
  assert_output --partial "permission denied: uid $(id -u nobody) is neither root nor the server's user"
  assert_equal "$(names_listed)" "a "
  stop_plugq
  rm -rf "$dir"
}

@test "reconfig: garbage, a line too long, an idle client and a crashed one change nothing" {
  start_control disk=a memory=1M
  run pyrun "$CTL" <<'EOF'
import os, signal, socket, sys, time
from controltest import raw, listing
ctl = sys.argv[1]
ans = raw(ctl, b"\x00\x01binary\xffjunk\n")
assert ans.startswith("ERR byte 0x00 at 0 is not text"), ans
ans = raw(ctl, b"add disk=" + b"x" * 9000 + b" memory=1M\n")
assert ans.startswith("ERR the command line is longer than 8191 bytes"), ans
ans = raw(ctl, b"add disk=x%zzmemory=1M\n")
assert ans.startswith("ERR bad word") and "hexadecimal" in ans, ans
ans = raw(ctl, b"frobnicate\n")
assert ans.startswith("ERR unknown command 'frobnicate'"), ans
# A client that never ends its line is dropped after the server's timeout.
t0 = time.monotonic()
ans = raw(ctl, b"add disk=idle memory=1M")
assert ans.startswith("ERR no whole command line within 5 s"), ans
assert time.monotonic() - t0 < 15
# A client killed half way through its command.
pid = os.fork()
if pid == 0:
    s = socket.socket(socket.AF_UNIX)
    s.connect(ctl)
    s.sendall(b"add disk=crash memory=1M")
    os.kill(os.getpid(), signal.SIGKILL)
os.waitpid(pid, 0)
names = listing(ctl)
assert sorted(names) == ["a"], names
print("ok")
EOF
  assert_success
  assert_output ok
  run nbdinfo --size "$(uri a)"
  assert_success
}

# ---------------------------------------------------------------- plugqctl

@test "reconfig: plugqctl: a usage error exits 2, a refusal or a dead server 1, each with one line" {
  run "$QCTL"
  assert_equal "$status" 2
  assert_equal "${#lines[@]}" 1
  assert_output --partial "usage: plugqctl PATH COMMAND"
  run "$QCTL" "$T/none"
  assert_equal "$status" 2
  run "$QCTL" "$T/none" list
  assert_one_line_error
  assert_output --partial "$T/none: cannot connect: No such file or directory"
  start_control disk=a memory=1M
  run ctl remove
  assert_one_line_error
  assert_output "plugqctl: remove: expected [--drain|--force] NAME"
  run ctl list extra
  assert_one_line_error
  run ctl list
  assert_success
  assert_line --index 0 --regexp '^NAME +KIND +BYTES +CLIENTS +STATE +DESCRIPTION'
  assert_line --index 1 --regexp '^a +disk +1048576 +0 +live +memory'
}

# ---------------------------------------------------------------- add

@test "reconfig: add a disk and a volume: listed and served at once; remove them" {
  make_file "$T/b.img" 2M
  start_control disk=a memory=1M
  run ctl add disk=b file="$T/b.img" unplug-delay=1ms
  assert_success
  assert_output "added disk=b"
  run ctl add linear=v:a,b@0+1M
  assert_success
  run nbdinfo --list --json "$(uri)"
  assert_success
  for e in a b v; do
    assert_output --partial "\"export-name\": \"$e\""
  done
  run nbdinfo --size "$(uri v)"
  assert_output $((2 * MiB))
  nbdsh_run b 'h.pwrite(b"B" * 4096, 8192)' 'h.flush()'
  [ "$(od -An -c -j 8192 -N 1 "$T/b.img" | tr -d ' ')" = B ]
  assert_equal "$(names_listed)" "a b v "
  run ctl remove v
  assert_success
  run ctl remove b
  assert_success
  assert_equal "$(names_listed)" "a "
  run nbdinfo --size "$(uri b)"
  assert_failure
}

@test "reconfig: add refuses what the command line refuses, with the command line's message" {
  skip_if_sanitized   # the command-line half ends in nbdkit exiting on an error
  start_control disk=a memory=1M
  local keys cmdline_err add_err
  for keys in \
      "disk=x memory=1M frobnicate=1" \
      "disk=a memory=1M" \
      "linear=w:w" \
      "linear=w:a,nope" \
      "disk=x file=$T/missing.img" \
      "disk=x memory=1M unplug-delay=3parsecs" \
      "disk=x memory=1M nbd=nbd://localhost"; do
    # shellcheck disable=SC2086
    cmdline_err=$(timeout 30 "$NBDKIT" -U - "$PLUGIN" disk=a memory=1M $keys --run 'exit 0' 2>&1) &&
      fail "the command line accepted $keys"
    # shellcheck disable=SC2086
    run ctl add $keys
    assert_one_line_error
    add_err=${output#plugqctl: }
    assert_equal "$add_err" "$(nbdkit_message "$cmdline_err")"
  done
  assert_equal "$(names_listed)" "a "
  run nbdinfo --size "$(uri a)"
  assert_success
}

# ---------------------------------------------------------------- remove

@test "reconfig: remove is refused while a client is connected or a volume uses it; queued data reaches the file" {
  make_file "$T/a.img" 1M
  start_control disk=a file="$T/a.img" "${LONG_QUEUE[@]}" disk=b memory=1M \
    linear=v:a,b
  run ctl remove a
  assert_one_line_error
  assert_output "plugqctl: remove a: linear=v:a,b uses it (remove v first)"
  run ctl remove v
  assert_success
  run pyrun "$CTL" "$T/a.img" <<'EOF'
import sys
from plugqtest import connect, pattern, fread
from controltest import refused, must, wait_clients
ctl, img = sys.argv[1:]
data = pattern(7, 64 * 1024)
h = connect("a")
h.pwrite(data, 128 * 1024)          # answered from the queue (ack=queued)
err = refused(ctl, "remove", "a")
assert err == "disk=a: cannot remove it: 1 client is connected (remove --drain or --force refuses them)", err
h.shutdown()
wait_clients(ctl, "a", 0)
assert fread(img, 128 * 1024, len(data)) != data, "written before the removal"
must(ctl, "remove", "a")
assert fread(img, 128 * 1024, len(data)) == data, "the queued write was lost"
print("ok")
EOF
  assert_success
  assert_output ok
  assert_equal "$(names_listed)" "b "
}

@test "reconfig: remove --drain: the client is refused with ESHUTDOWN once its writes are flushed; the disk goes with it" {
  make_file "$T/a.img" 1M
  start_control disk=a file="$T/a.img" "${LONG_QUEUE[@]}" disk=b memory=1M
  run pyrun "$CTL" "$T/a.img" "$(plugq_pid)" <<'EOF'
import os, sys, time
import nbd
from plugqtest import connect, pattern, fread
from controltest import must, refused, listing
ctl, img, pid = sys.argv[1], sys.argv[2], sys.argv[3]
def holds_file():
    return any(os.path.realpath(f"/proc/{pid}/fd/{fd}") == img
               for fd in os.listdir(f"/proc/{pid}/fd"))
data = pattern(11, 64 * 1024)
h = connect("a")
h.pwrite(data, 0)
out = must(ctl, "remove", "--drain", "a")
assert out[-1].startswith("a: draining: 1 client refused with ESHUTDOWN"), out
assert fread(img, 0, len(data)) == data, "the drain did not flush"
for call in (lambda: h.pwrite(data, 0), lambda: h.pread(512, 0), h.flush):
    try:
        call()
        raise AssertionError("a request passed the closed gate")
    except nbd.Error as e:
        assert e.errno == "ESHUTDOWN", e
try:
    connect("a")
    raise AssertionError("a new connection was let in")
except nbd.Error:
    pass
rows = listing(ctl)
assert rows["a"]["state"] == "draining" and rows["a"]["clients"] == 1, rows
assert "still taken" in refused(ctl, "add", "disk=a", "memory=1M")
assert holds_file(), "the backend closed while its client was connected"
h.shutdown()
# The last client's close lets the disk go, on the server's side of it.
for _ in range(200):
    if "a" not in listing(ctl) and not holds_file():
        break
    time.sleep(0.05)
assert "a" not in listing(ctl), listing(ctl)
assert not holds_file(), "the backend is still open after the last client left"
must(ctl, "add", "disk=a", "memory=1M")
print("ok")
EOF
  assert_success
  assert_output ok
}

@test "reconfig: remove --force closes the backend while the client stays; the name is free at once" {
  make_file "$T/a.img" 1M
  start_control disk=a file="$T/a.img" "${LONG_QUEUE[@]}"
  run pyrun "$CTL" "$T/a.img" "$(plugq_pid)" <<'EOF'
import os, sys
import nbd
from plugqtest import connect, pattern, fread
from controltest import must, listing
ctl, img, pid = sys.argv[1], sys.argv[2], sys.argv[3]
def holds_file():
    return any(os.path.realpath(f"/proc/{pid}/fd/{fd}") == img
               for fd in os.listdir(f"/proc/{pid}/fd"))
data = pattern(13, 64 * 1024)
h = connect("a")
h.pwrite(data, 4096)
out = must(ctl, "remove", "--force", "a")
assert out[-1].startswith("a: 1 client refused with ESHUTDOWN"), out
assert fread(img, 4096, len(data)) == data, "the force removal lost a write"
assert not holds_file(), "the backend is still open"
# The name is free: a new disk a, while the old client is still there.
must(ctl, "add", "disk=a", "memory=1M")
g = connect("a")
g.pwrite(b"n" * 512, 0)
try:
    h.pread(512, 0)
    raise AssertionError("the old client reached a disk")
except nbd.Error as e:
    assert e.errno == "ESHUTDOWN", e
assert listing(ctl)["a"]["clients"] == 1
print("ok")
EOF
  assert_success
  assert_output ok
}

# ---------------------------------------------------------------- set

@test "reconfig: set changes queue keys in service; one read without the queue's lock waits for no clients" {
  skip_if_sanitized   # compares with the command line, which exits on an error
  start_control disk=a memory=1M disk=b memory=1M linear=v:a,b \
    stats="$T/s.json" stats-interval=100ms
  run ctl set a unplug-delay=7ms elevator=noop queue-requests=32
  assert_success
  assert_output "set disk=a"
  run pyrun "$T/s.json" <<'EOF'
import sys, time
from plugqtest import load_stats, stat
for _ in range(100):
    doc = load_stats(sys.argv[1])
    if stat(doc, "a", "config.unplug_delay_us") == 7000:
        break
    time.sleep(0.05)
assert stat(doc, "a", "config.unplug_delay_us") == 7000
assert stat(doc, "a", "config.elevator") == "noop"
assert stat(doc, "a", "config.queue_requests") == 32
assert stat(doc, "b", "config.unplug_delay_us") == 3000
print("ok")
EOF
  assert_output ok
  run pyrun "$CTL" <<'EOF'
import sys
from plugqtest import connect
from controltest import refused, must, wait_clients
ctl = sys.argv[1]
h = connect("v")                 # reaches a through the volume
err = refused(ctl, "set", "a", "ack=dispatched")
assert "ack= changes only while no client is connected" in err and "(1 connected)" in err, err
h.shutdown()
wait_clients(ctl, "v", 0)
must(ctl, "set", "a", "ack=dispatched", "max-merge=256K")
print("ok")
EOF
  assert_output ok
  run ctl set a unplug-delay=3parsecs
  assert_one_line_error
  local cmdline
  cmdline=$(timeout 30 "$NBDKIT" -U - "$PLUGIN" disk=a memory=1M unplug-delay=3parsecs --run 'exit 0' 2>&1) || true
  assert_equal "${output#plugqctl: }" "$(nbdkit_message "$cmdline")"
  run ctl set v unplug-delay=1ms
  assert_one_line_error
  assert_output --partial "is a volume"
  run ctl set a direct=true
  assert_one_line_error
  assert_output --partial "direct= is not a queue key"
}

# ---------------------------------------------------------------- grow

@test "reconfig: grow a volume: a connected client keeps its size, a new one sees the new size" {
  start_control disk=a memory=1M disk=b memory=1M disk=c memory=1M \
    linear=v:a linear=w:b@0+4K
  run pyrun "$CTL" <<'EOF'
import sys
import nbd
from plugqtest import connect, pattern
from controltest import must, refused
ctl = sys.argv[1]
MiB = 1024 * 1024
old = connect("v")
assert old.get_size() == MiB
data = pattern(3, 4096)
old.pwrite(data, MiB - 4096)
assert must(ctl, "grow", "v", "b@0+512K", "c") == ["grew linear=v:a,b@0+512K,c"]
assert old.get_size() == MiB
try:
    old.pread(512, MiB)
    raise AssertionError("read past the size the client was told")
except nbd.Error:
    pass
new = connect("v")
assert new.get_size() == 2 * MiB + 512 * 1024, new.get_size()
assert new.pread(4096, MiB - 4096) == data
new.pwrite(b"c" * 4096, MiB + 512 * 1024)
assert connect("c").pread(4096, 0) == b"c" * 4096
assert "cycle in volume members" in refused(ctl, "grow", "v", "v")
assert "unknown member 'nope'" in refused(ctl, "grow", "v", "nope")
assert "is not a volume" in refused(ctl, "grow", "a", "b")
must(ctl, "add", "linear=outer:v")
err = refused(ctl, "grow", "v", "c")
assert "linear=outer uses it whole" in err, err
print("ok")
EOF
  assert_success
  assert_output ok
}

# ---------------------------------------------------------------- reload

@test "reconfig: reload applies the config= file's difference, all or nothing, naming a bad line" {
  cat >"$T/plugq.conf" <<'EOF'
disk=a
memory=1M
disk=b
memory=1M
linear=v:a
EOF
  start_control config="$T/plugq.conf"
  cat >"$T/plugq.conf" <<'EOF'
disk=a
memory=1M
unplug-delay=5ms
disk=c
memory=1M
linear=v:a,c
EOF
  run ctl reload
  assert_success
  assert_line "added disk=c"
  assert_line "grew linear=v:a,c"
  assert_line "set disk=a"
  assert_line "removed disk=b"
  assert_equal "$(names_listed)" "a c v "
  run nbdinfo --size "$(uri v)"
  assert_output $((2 * MiB))
  # Any error: nothing changes, and the line is named.
  cp "$T/plugq.conf" "$T/good.conf"
  printf 'disk=d\nmemory=1M\nfrobnicate=1\n' >>"$T/plugq.conf"
  run ctl reload
  assert_one_line_error
  assert_output "plugqctl: $T/plugq.conf:9: unknown parameter 'frobnicate' (see nbdkit plugq --help)"
  assert_equal "$(names_listed)" "a c v "
  sed 's/^memory=1M$/memory=2M/' "$T/good.conf" >"$T/plugq.conf"
  run ctl reload
  assert_one_line_error
  assert_output --partial "$T/plugq.conf:1: disk=a: its backend changed (memory=2M, was memory=1M)"
  # A removal with a client connected: refused, and nothing else changes.
  printf 'disk=a\nmemory=1M\ndisk=e\nmemory=1M\n' >"$T/plugq.conf"
  run pyrun "$CTL" <<'EOF'
import sys
from plugqtest import connect
from controltest import refused, listing, wait_clients
ctl = sys.argv[1]
h = connect("c")
err = refused(ctl, "reload")
assert "disk=c: cannot remove it: 1 client is connected" in err, err
assert sorted(listing(ctl)) == ["a", "c", "v"], listing(ctl)
h.shutdown()
wait_clients(ctl, "c", 0)
print("ok")
EOF
  assert_output ok
  cp "$T/good.conf" "$T/plugq.conf"
  run ctl reload
  assert_success
  assert_output "nothing changed"
}

@test "reconfig: SIGKILL during a reload: after a restart the server serves what the file says" {
  make_file "$T/a.img" 1M
  # A remote whose first connection hangs in the handshake, so that the
  # reload is still opening its new disk when the server is killed; later
  # connections reach a real server.
  "$NBDKIT" -f -U "$T/remote.sock" -P "$T/remote.pid" memory 1M </dev/null >/dev/null 2>&1 &
  NBDKIT_PIDS+=($!)
  wait_for_socket "$T/remote.sock"
  "$PYTHON" - "$T/proxy.sock" "$T/remote.sock" "$T/held" <<'EOF' &
import os, socket, sys, threading
listen, remote, marker = sys.argv[1:]
srv = socket.socket(socket.AF_UNIX)
srv.bind(listen)
srv.listen(8)
held = []
def pump(a, b):
    while True:
        data = a.recv(65536)
        if not data:
            break
        b.sendall(data)
    b.shutdown(socket.SHUT_WR)
first = True
while True:
    c, _ = srv.accept()
    if first:
        first = False
        held.append(c)
        with open(marker, "w") as f:
            f.write("held\n")
        continue
    r = socket.socket(socket.AF_UNIX)
    r.connect(remote)
    threading.Thread(target=pump, args=(c, r), daemon=True).start()
    threading.Thread(target=pump, args=(r, c), daemon=True).start()
EOF
  HELPER_PIDS+=($!)
  wait_for_socket "$T/proxy.sock"
  printf 'disk=a\nfile=%s\n' "$T/a.img" >"$T/plugq.conf"
  start_control config="$T/plugq.conf"
  nbdsh_run a 'h.pwrite(b"K" * 65536, 0)' 'h.flush()'
  printf 'disk=b\nnbd=nbd+unix:///?socket=%s\n' "$T/proxy.sock" >>"$T/plugq.conf"
  ctl reload >/dev/null 2>&1 &
  HELPER_PIDS+=($!)
  wait_for_file "$T/held"
  kill -KILL "$(plugq_pid)"
  wait "$PLUGQ_PID" 2>/dev/null || true
  PLUGQ_PID=
  # The file is the truth: the restart serves a and b, a's data intact.
  start_control config="$T/plugq.conf"
  assert_equal "$(names_listed)" "a b "
  run nbdsh -u "$(uri a)" -c 'print(h.pread(65536, 0) == b"K" * 65536)'
  assert_output True
  run nbdinfo --size "$(uri b)"
  assert_output $MiB
  stop_plugq                    # while its remote still serves
}

# ---------------------------------------------------------------- stats

@test "reconfig: the stats file and its Prometheus form follow disks as they come and go" {
  start_control disk=a memory=1M stats="$T/s.json" stats-interval=50ms
  run ctl add disk=b memory=2M
  assert_success
  run pyrun "$T/s.json" "$CTL" "$top_srcdir/plugq-stat" <<'EOF'
import sys, time, importlib.machinery, importlib.util
from plugqtest import load_stats
from controltest import must
path, ctl, tool = sys.argv[1:]
def disks():
    return sorted(d["name"] for d in load_stats(path)["disks"])
def wait_for(names):
    for _ in range(200):
        if disks() == names:
            return
        time.sleep(0.05)
    raise AssertionError(f"the stats file lists {disks()}, not {names}")
wait_for(["a", "b"])
must(ctl, "add", "linear=v:a,b")
for _ in range(200):
    vols = [v["name"] for v in load_stats(path)["volumes"]]
    if vols == ["v"]:
        break
    time.sleep(0.05)
assert vols == ["v"], vols
must(ctl, "remove", "v")
must(ctl, "remove", "b")
wait_for(["a"])
# plugq-stat: a disk whose counters went back is a new disk of that name.
loader = importlib.machinery.SourceFileLoader("plugq_stat", tool)
spec = importlib.util.spec_from_loader("plugq_stat", loader)
stat = importlib.util.module_from_spec(spec)
loader.exec_module(stat)
prev = {"uptime": 1.0, "disks": [{"name": "b", "write": {"requests": 500}}]}
cur = {"uptime": 2.0, "disks": [{"name": "b", "write": {"requests": 20}}]}
rep = stat.make_report(cur, prev, path)
assert rep["disks"][0]["counts"]["write.requests"] == 20, rep["disks"][0]["counts"]
print("ok")
EOF
  assert_success
  assert_output ok
  stop_plugq
  start_control disk=a memory=1M stats="$T/s.prom" stats-format=prometheus \
    stats-interval=50ms
  ctl add disk=b memory=2M
  local i
  for ((i = 0; i < 200; i++)); do
    grep -q 'plugq_disk_size_bytes{disk="b"} 2097152' "$T/s.prom" && break
    sleep 0.05
  done
  grep -q 'plugq_disk_size_bytes{disk="b"} 2097152' "$T/s.prom"
  ctl remove b
  for ((i = 0; i < 200; i++)); do
    grep -q 'disk="b"' "$T/s.prom" || break
    sleep 0.05
  done
  ! grep -q 'disk="b"' "$T/s.prom"
}
