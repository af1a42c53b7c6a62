#!/usr/bin/env bats
# Remote members across hosts (issue 5): three back-end nbdkit servers,
# each in its own network namespace behind its own veth link (10.231.i.2,
# addresses that exist only inside these namespaces), serving a disk over
# TCP: two stock `file` plugins and one plugq with a file disk.  A front
# plugq in a fourth namespace stacks them in one linear volume.  The test
# writes and flushes through the volume and reads each back-end's file
# directly, then kills one back-end and checks what the client sees.
# Skips, saying why, where namespaces cannot be made.

load helpers
load netns/topology

# The volume: vol = p1 (1M, file) + p2 (2M, plugq) + p3 (1.5M, file).
S1=$((1024 * 1024))
S2=$((2 * 1024 * 1024))
S3=$((3 * 512 * 1024))

setup_file() {
  netns_file_setup
}

teardown_file() {
  netns_file_teardown
}

setup() {
  plugq_setup
  T=$BATS_TEST_TMPDIR
  netns_setup
  local i
  for i in 1 2 3; do
    netns_link "$i" || fail "could not set up back-end $i's namespace and link"
  done
  netns_check_routes || fail "the front namespace can reach more than the test's links"
  prefill "$T/b1.img" "$S1" 1
  prefill "$T/b2.img" "$S2" 2
  prefill "$T/b3.img" "$S3" 3
  netns_start_backend 1 file "$T/b1.img"
  netns_start_backend 2 "$PLUGIN" disk=d file="$T/b2.img"
  netns_start_backend 3 file "$T/b3.img"
  PLUGQ_WRAPPER=(ip netns exec "$NETNS_FRONT")
  start_plugq disk=p1 nbd="$(netns_uri 1)" disk=p2 nbd="$(netns_uri 2 d)" \
    disk=p3 nbd="$(netns_uri 3)" linear=vol:p1,p2,p3
}

teardown() {
  local rc=0
  plugq_teardown || rc=1
  netns_teardown || rc=1
  return $rc
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

@test "netns: a volume over three back-ends in their own namespaces: each back-end's file holds its part" {
  run nbdinfo --size "$(uri vol)"
  assert_success
  assert_output $((S1 + S2 + S3))
  # The members are what the back-ends serve over TCP.
  run nbdinfo --list --json "$(uri vol)"
  assert_success
  run jq -r '.exports[] | select(."export-name" == "p1") | .description' <<<"$output"
  assert_output --partial "nbd://10.231.1.2:10809/"
  pyrun "$T" "$S1" "$S2" "$S3" <<'EOF'
import sys
from plugqtest import *
T = sys.argv[1]
S1, S2, S3 = map(int, sys.argv[2:5])
files = [T + "/b1.img", T + "/b2.img", T + "/b3.img"]
base = [0, S1, S1 + S2]
old = [pattern(1, S1), pattern(2, S2), pattern(3, S3)]
h = connect("vol")
expect_read(h, 0, b"".join(old), "the whole volume reads the three back-ends in order")

# The whole volume in 64K pipelined writes, then writes across both
# member boundaries.
v = bytearray(pattern(10, S1 + S2 + S3))
aio_pwrite_all(h, [(bytes(v[o:o + 64 * KiB]), o) for o in range(0, len(v), 64 * KiB)])
for off, n, seed in ((S1 - 4096, 8192, 11), (S1 + S2 - 1000, 3000, 12),
                     (S1 - 100, S2 + 200, 13)):
    d = pattern(seed, n)
    h.pwrite(d, off)
    v[off:off + n] = d
expect_read(h, 0, bytes(v), "volume read-back before FLUSH")
h.flush()
for i in range(3):
    size = (S1, S2, S3)[i]
    expect_file(files[i], 0, bytes(v[base[i]:base[i] + size]),
                "back-end %d's file after the volume's FLUSH" % (i + 1))
expect_read(h, 0, bytes(v), "volume read-back after FLUSH")

# Each member exported by itself sees its part at member offsets.
for i, name in enumerate(("p1", "p2", "p3")):
    m = connect(name)
    expect_read(m, 0, bytes(v[base[i]:base[i] + 65536]), "export %s" % name)
EOF
}

@test "netns: a killed back-end fails its part with EIO; the other parts still read and write" {
  skip_if_sanitized
  pyrun "$T" "$S1" "$S2" "$S3" "$T/backend-2.pid" <<'EOF'
import sys, time, nbd, os, signal
from plugqtest import *
T = sys.argv[1]
S1, S2, S3 = map(int, sys.argv[2:5])
PIDF = sys.argv[5]
old = [pattern(1, S1), pattern(2, S2), pattern(3, S3)]
h = connect("vol")
x = pattern(20, 8192)
h.pwrite(x, S1 - 4096)
h.flush()
expect_file(T + "/b1.img", S1 - 4096, x[:4096], "back-end 1 before the kill")
expect_file(T + "/b2.img", 0, x[4096:], "back-end 2 before the kill")

pid = int(open(PIDF).read())
os.kill(pid, signal.SIGKILL)
def gone():
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
poll(gone, 10, "back-end 2 gone after SIGKILL")

problems = []
def expect_eio(what, fn, *args):
    t0 = time.monotonic()
    try:
        fn(*args)
    except nbd.Error as e:
        if e.errno != "EIO":
            problems.append("%s: failed with %s (%s), expected EIO" % (what, e.errno, e.string))
        elif time.monotonic() - t0 > 10:
            problems.append("%s: took %.1fs to fail" % (what, time.monotonic() - t0))
        return
    problems.append("%s: succeeded, expected EIO" % what)

expect_eio("read inside the killed back-end's part", h.pread, 4096, S1 + 64 * KiB)
expect_eio("FLUSH of the volume with a killed back-end", h.flush)
expect_eio("read straddling into the killed back-end's part", h.pread, 8192, S1 + S2 - 4096)
expect_eio("second read inside the killed back-end's part", h.pread, 4096, S1 + S2 - 4096)

# The same connection still serves the other parts.
expect_read(h, 0, old[0][:S1 - 4096] + x[:4096], "part on back-end 1 after the kill")
expect_read(h, S1 + S2, old[2], "part on back-end 3 after the kill")
y = pattern(21, 8192)
h.pwrite(y, S1 + S2 + 4096)
expect_read(h, S1 + S2 + 4096, y, "write to back-end 3's part, read back")

# The other members still write through to their back-ends.
for name, path, seed in (("p1", T + "/b1.img", 31), ("p3", T + "/b3.img", 33)):
    m = connect(name)
    m.pwrite(pattern(seed, 4096), 64 * KiB)
    m.flush()
    expect_file(path, 64 * KiB, pattern(seed, 4096),
                "back-end of %s after a write and FLUSH through it" % name)
# The write made through the volume went out with p3's FLUSH (one queue).
expect_file(T + "/b3.img", 4096, y, "back-end 3: the write made through the volume")
if problems:
    raise AssertionError("%d problem(s):\n  %s" % (len(problems), "\n  ".join(problems)))
EOF
  kill -0 "$(plugq_pid)" || fail "the front plugq exited after a back-end was killed"
  # The killed back-end's final flush fails at shutdown, and the exit
  # status says what was written there since its last flush may be gone.
  stop_plugq && fail "nbdkit exited 0 though p2's final flush failed"
  [ "$PLUGQ_STATUS" = 1 ]
  grep -q "p2: data may be lost" "$PLUGQ_LOG"
}
