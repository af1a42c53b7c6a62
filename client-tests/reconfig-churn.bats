#!/usr/bin/env bats
# plugq reconfigured under load: a client writing and flushing on one disk
# sees no error and loses nothing while other disks and volumes are added,
# set, grown and removed 200 times around it.

load helpers

setup() {
  plugq_setup
  T=$BATS_TEST_TMPDIR
  CTL=$T/ctl
}

teardown() {
  plugq_teardown
}

@test "reconfig-churn: a writer on disk A loses nothing while 200 rounds of add, set, grow and remove go on around it" {
  make_file "$T/a.img" 16M
  start_plugq disk=A file="$T/a.img" control="$CTL"
  local i
  for ((i = 0; i < 200; i++)); do
    [ -S "$CTL" ] && break
    sleep 0.05
  done
  run pyrun "$CTL" "$T/a.img" <<'EOF'
import sys, threading, time
from plugqtest import connect, pattern, fread
from controltest import must, listing, wait_clients

ctl, img = sys.argv[1:]
BLOCK, BLOCKS = 4096, 1024                # 4 MiB of A, rewritten in turn
errors, written = [], {}
stop = threading.Event()

def writer():
    h = connect("A")
    n = 0
    try:
        while not stop.is_set():
            off = (n % BLOCKS) * BLOCK
            data = pattern(n, BLOCK)
            h.pwrite(data, off)
            written[off] = data
            n += 1
            if n % 16 == 0:
                h.flush()
            if n % 64 == 0:               # a block written earlier reads back
                back = (n * 7919 % min(n, BLOCKS)) * BLOCK
                if h.pread(BLOCK, back) != written[back]:
                    errors.append(f"block at {back} read back wrong")
        h.flush()
        h.shutdown()
    except Exception as e:                # any error fails the test
        errors.append(f"writer: {e}")
    writer.count = n

t = threading.Thread(target=writer)
t.start()
start = time.monotonic()
try:
    for r in range(200):
        d, e, v = f"d{r}", f"e{r}", f"v{r}"
        must(ctl, "add", f"disk={d}", "memory=1M", "unplug-delay=1ms")
        must(ctl, "add", f"disk={e}", "memory=1M", f"linear={v}:{d}")
        must(ctl, "set", d, "unplug-delay=2ms", "queue-requests=64", "elevator=noop")
        must(ctl, "grow", v, f"{e}@0+512K")
        if r % 25 == 0:                   # a volume in use while it changes
            g = connect(v)
            g.pwrite(pattern(r, 8192), 1024 * 1024 - 4096)
            assert g.pread(8192, 1024 * 1024 - 4096) == pattern(r, 8192)
            g.shutdown()
            wait_clients(ctl, v, 0)
        must(ctl, "remove", v)
        # d goes by each kind of removal in turn, with a client on it for
        # drain and force.
        mode = ("", "--drain", "--force")[r % 3]
        if mode:
            c = connect(d)
            c.pwrite(b"x" * 4096, 0)
            must(ctl, "remove", mode, d)
            c.shutdown()
        else:
            must(ctl, "remove", d)
        must(ctl, "remove", e)
finally:
    stop.set()
    t.join()
took = time.monotonic() - start
assert not errors, errors
for _ in range(200):                      # the last drained disk goes
    if sorted(listing(ctl)) == ["A"]:
        break
    time.sleep(0.05)
assert sorted(listing(ctl)) == ["A"], listing(ctl)
# Everything the writer was answered for is on A, then in its file.
h = connect("A")
for off, data in written.items():
    assert h.pread(BLOCK, off) == data, f"block at {off} lost"
h.flush()
h.shutdown()
for off, data in written.items():
    assert fread(img, off, BLOCK) == data, f"block at {off} not in the file"
print(f"ok: {writer.count} writes during 200 rounds in {took:.1f} s")
EOF
  assert_success
  assert_output --regexp '^ok: [0-9]+ writes during 200 rounds'
  echo "# $output" >&3
}
