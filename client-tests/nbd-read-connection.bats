#!/usr/bin/env bats
# The read connection of a remote NBD disk (backend_nbd_reader.c): on a
# remote that offers multi-conn, reads take a second connection of their
# own while writes, zeroes and FLUSH keep the first.  nbdkit's log filter
# on the remote numbers its connections, which shows where each command
# went.  Covered: reads there see queued, in-flight and flushed writes; a
# read connection lost under a read in flight (socat between plugq and the
# remote, its child for that connection killed): the read is answered from
# the main connection, and the read connection comes back; a read in
# flight on it when the main connection is lost is answered; a remote
# without multi-conn gets one connection; one that refuses the second
# still serves everything on the first; after a reconnect the read
# connection comes back, and reads see what the replay wrote.

load remotes

setup() {
  remote_setup
}

teardown() {
  local pid rc=0
  # plugq first: its final flush needs the proxy.
  remote_teardown || rc=1
  if [ -s "$T/socat.pid" ]; then
    pid=$(cat "$T/socat.pid")
    pkill -KILL -P "$pid" socat 2>/dev/null || true
    kill -KILL "$pid" 2>/dev/null || true
  fi
  return $rc
}

# start_proxy NAME: socat on $T/NAME-proxy.sock forwarding each connection
# to the remote NAME, one child process per connection.
start_proxy() {
  socat UNIX-LISTEN:"$T/$1-proxy.sock",fork UNIX-CONNECT:"$(rsock "$1")" \
    </dev/null >/dev/null 2>&1 3>&- &
  echo $! >"$T/socat.pid"
  wait_for_file "$T/$1-proxy.sock" -S
}

# start_proxied_remote SEED PLUGQ-ARGS...: a remote over pattern(SEED)
# whose reads stay in flight for 300 ms, behind the socat proxy, and
# plugq in front of the proxy.
start_proxied_remote() {
  prefill "$T/r.img" "$MiB" "$1"
  shift
  start_remote r --filter=log --filter=delay file "$T/r.img" \
    logfile="$T/r.log" delay-read=300ms
  start_proxy r
  start_plugq disk=r nbd="nbd+unix:///?socket=$T/r-proxy.sock" "$@"
}

# The Python side: which connection of the remote's log carried what.
read_connection_py() {
  cat <<'EOF'
import subprocess
import sys
from nbdremote import *

def conns(log, act):
    return {f["conn"] for _, f in log_calls(log, act)}

def wait_for_read_connection(h, log, off, want, old=()):
    """Reads [off, off+len(want)) until one reaches the remote on a
    connection that carried no write, nor is in old; every answer must
    be want.  Returns that connection."""
    def read_went_apart():
        expect_read(h, off, want, "read while the read connection comes up")
        return (conns(log, "Read") - conns(log, "Write") - conns(log, "Flush")
                - set(old))
    poll(read_went_apart, 20, "a read on a connection of its own")
    return max(read_went_apart())

def read_in_flight(h, log, conn, off):
    """An 8 KiB read at off, sent and seen by the remote on connection
    conn; returns its buffer and cookie."""
    buf = nbd.Buffer(8192)
    c = h.aio_pread(buf, off)
    poll(lambda: [f for _, f in log_calls(log, "Read")
                  if f["offset"] == off and f["conn"] == conn],
         10, "the read reaching the remote on connection %d" % conn)
    return buf, c

def kill_proxy_child(T, which):
    """Kills socat's child for one connection: "-o" the oldest (the main
    connection, dialled at open), "-n" the newest (the read connection,
    dialled last)."""
    kids = subprocess.run(["pgrep", which, "-P", open(T + "/socat.pid").read().strip()],
                          capture_output=True, text=True).stdout.split()
    assert kids, "no socat child"
    os.kill(int(kids[0]), signal.SIGKILL)

# Every test runs this script with the test's directory and plugq's log.
T, PLOG = sys.argv[1:3]
LOG = T + "/r.log"
EOF
}

@test "nbd read connection: reads take a second connection on a multi-conn remote and see queued, in-flight and flushed writes" {
  prefill "$T/r.img" $((4 * MiB)) 3
  # Writes stay in flight at the remote for 500 ms.
  start_remote r --filter=log --filter=delay file "$T/r.img" \
    logfile="$T/r.log" delay-write=500ms
  # The write stays queued until the FLUSH sends it.
  start_plugq "${LONG_QUEUE[@]}" disk=r nbd="$(ruri r)"
  timeout 60 "$PYTHON" - "$T" "$PLUGQ_LOG" <<EOF
$(read_connection_py)
IMG = T + "/r.img"
r = pattern(3, 4 * MiB)
h = connect("r")
wait_for_read_connection(h, LOG, MiB, r[MiB:MiB + 4096])

x = pattern(40, 64 * KiB)
h.pwrite(x, 0)                                  # queued (ack=queued)
expect_read(h, 0, x, "read of a queued write")
c = h.aio_flush()                               # sends it; in flight 500 ms
poll(lambda: log_calls(LOG, "Write"), 10, "the write reaching the remote")
n = len(log_calls(LOG, "Read"))
expect_read(h, 0, x, "read of a write in flight at the remote")
expect_read(h, 16 * KiB, x[16 * KiB:20 * KiB], "read inside a write in flight")
assert len(log_calls(LOG, "Read")) > n, "the reads never reached the remote"
assert remote_writes_done(LOG) == 0, "the write was done before the reads were answered"
expect_file(IMG, 0, r[:64 * KiB], "remote file while the write is in flight")
wait_aio(h, c, 20, "FLUSH")
expect_file(IMG, 0, x, "remote file after the FLUSH")
n = len(log_calls(LOG, "Read"))
expect_read(h, 0, x, "read of the flushed write")
expect_read(h, 2 * MiB + 512, r[2 * MiB + 512:2 * MiB + 4608], "unaligned read of the remote")
reads = log_calls(LOG, "Read")[n:]
assert reads, "the reads after the FLUSH never reached the remote"

writers = conns(LOG, "Write") | conns(LOG, "Flush")
readers = conns(LOG, "Read")
assert len(writers) == 1, "writes and FLUSH on more than one connection: %r" % writers
assert {f["conn"] for _, f in reads} & writers == set(), \
    "reads after the read connection came up went with the writes: %s" % show(reads)
assert len(writers | readers) == 2, "more than two connections: %r" % (writers | readers)
h.shutdown()
EOF
  ! grep -q "read connection" "$PLUGQ_LOG" || fail "$(cat "$PLUGQ_LOG")"
}

@test "nbd read connection: lost under a read in flight, the read is answered from the main connection, and it comes back" {
  start_proxied_remote 6
  timeout 60 "$PYTHON" - "$T" "$PLUGQ_LOG" <<EOF
$(read_connection_py)
r = pattern(6, MiB)
h = connect("r")
# The main connection is the remote's first: plugq dials it at open.
main = {1}
first = wait_for_read_connection(h, LOG, 0, r[:4096])
assert first == 2, "the read connection is the remote's connection %d" % first
buf, c = read_in_flight(h, LOG, first, 256 * KiB)
at = lambda f: f["offset"] == 256 * KiB
kill_proxy_child(T, "-n")
wait_aio(h, c, 20, "the read in flight when its connection was lost")
expect_bytes(buf.to_bytearray(), r[256 * KiB:264 * KiB], "the read in flight when its connection was lost")
again = [f for _, f in log_calls(LOG, "Read") if at(f) and f["conn"] in main]
assert again, "the read was not sent again on the main connection: %s" % show(log_calls(LOG))
poll(lambda: log_lines(PLOG, "read connection was lost"), 10, "plugq saying the read connection was lost")
expect_read(h, 512 * KiB, r[512 * KiB:516 * KiB], "read while the read connection is away")
wait_for_read_connection(h, LOG, 0, r[:4096], old=(first,))
said = log_lines(PLOG, "read connection")
assert len(said) == 2 and "reads share the main one meanwhile" in said[0] \
    and "is back" in said[1], "plugq's log: %s" % said
h.shutdown()
EOF
}

@test "nbd read connection: a read in flight on it is answered when the main connection is lost, and both come back" {
  start_proxied_remote 7 reconnect=50ms
  timeout 60 "$PYTHON" - "$T" "$PLUGQ_LOG" <<EOF
$(read_connection_py)
r = pattern(7, MiB)
h = connect("r")
first = wait_for_read_connection(h, LOG, 0, r[:4096])
buf, c = read_in_flight(h, LOG, first, 256 * KiB)
kill_proxy_child(T, "-o")
poll(lambda: log_lines(PLOG, "connection lost"), 10, "plugq noticing the loss")
wait_aio(h, c, 20, "the read in flight on the read connection when the main one was lost")
expect_bytes(buf.to_bytearray(), r[256 * KiB:264 * KiB], "the read in flight")
poll(lambda: log_lines(PLOG, "reconnected"), 20, "the reconnect")
wait_for_read_connection(h, LOG, 0, r[:4096], old=(first,))
h.pwrite(pattern(8, 4096), 4096)
h.flush()
expect_file(T + "/r.img", 4096, pattern(8, 4096), "remote file after the FLUSH")
EOF
}

@test "nbd read connection: a remote without multi-conn gets one connection, and reads go with the writes" {
  prefill "$T/r.img" "$MiB" 4
  start_remote r --filter=multi-conn --filter=log file "$T/r.img" \
    logfile="$T/r.log" multi-conn-mode=disable
  start_plugq disk=r nbd="$(ruri r)"
  timeout 60 "$PYTHON" - "$T" "$PLUGQ_LOG" <<EOF
$(read_connection_py)
h = connect("r")
x = pattern(41, 8192)
h.pwrite(x, 4096)
h.flush()
for i in range(20):
    expect_read(h, 4096, x, "read of the flushed write")
assert len(log_calls(LOG, "Read")) >= 20, "reads did not reach the remote: %s" % show(log_calls(LOG))
used = conns(LOG, None)
assert used == {1}, "a remote without multi-conn saw connections %r" % used
h.shutdown()
EOF
  ! grep -q "read connection" "$PLUGQ_LOG" || fail "$(cat "$PLUGQ_LOG")"
}

@test "nbd read connection: a remote that refuses the second connection serves everything on the first, said once" {
  prefill "$T/r.img" "$MiB" 5
  # The limit filter closes every connection past the first.
  start_remote r --filter=limit --filter=log file "$T/r.img" \
    logfile="$T/r.log" limit=1
  start_plugq disk=r nbd="$(ruri r)"
  timeout 60 "$PYTHON" - "$T" "$PLUGQ_LOG" <<EOF
$(read_connection_py)
r = pattern(5, MiB)
h = connect("r")
poll(lambda: log_lines(PLOG, "read connection"), 20, "plugq saying the read connection failed")
x = pattern(42, 8192)
h.pwrite(x, 0)
h.flush()
expect_read(h, 0, x, "read of the flushed write")
expect_read(h, 512 * KiB, r[512 * KiB:516 * KiB], "read of the remote")
assert conns(LOG, None) == {1}, "commands on connections %r" % conns(LOG, None)
said = log_lines(PLOG, "read connection")
assert len(said) == 1 and "could not be opened" in said[0] \
    and "reads share the main one" in said[0], "plugq's log: %s" % said
h.shutdown()
EOF
}

@test "nbd read connection: after reconnect= it comes back, and reads on it see the replayed writes" {
  # The lost connection is logged as an error.
  skip_if_sanitized
  make_file "$T/r.img" 1M
  # A remote with a volatile cache: what it had not flushed dies with it.
  start_remote r --filter=log --filter=cache file "$T/r.img" \
    cache=writeback logfile="$T/r.log"
  start_plugq disk=r nbd="$(ruri r)" reconnect=50ms
  timeout 60 "$PYTHON" - "$T" "$PLUGQ_LOG" "$(rsock r)" "$(rpid r)" <<EOF
$(read_connection_py)
SOCK, PIDF = sys.argv[3:5]
IMG = T + "/r.img"
h = connect("r")
wait_for_read_connection(h, LOG, 512 * KiB, fill(0, 4096))
h.pwrite(fill(0x11, 64 * KiB), 0)
h.flush()
done = remote_writes_done(LOG)
h.pwrite(fill(0xaa, 64 * KiB), 0)
# ack=queued answered it from the queue: wait until the remote took it.
poll(lambda: remote_writes_done(LOG) > done, 10, "the remote answering the 0xaa write")
expect_read(h, 0, fill(0xaa, 64 * KiB), "read of the remote's cache before the kill")
kill_remote(PIDF)
expect_file(IMG, 0, fill(0x11, 64 * KiB), "remote file after SIGKILL (the cache is gone)")
start_remote(SOCK, PIDF, "--filter=log", "--filter=cache", "file", IMG, "cache=writeback",
             "logfile=%s/r2.log" % T)
poll(lambda: log_lines(PLOG, "reconnected"), 20, "plugq's log saying it reconnected")
# No FLUSH yet: only the replay put 0xaa into the new remote's cache.
wait_for_read_connection(h, T + "/r2.log", 0, fill(0xaa, 64 * KiB))
EOF
}
