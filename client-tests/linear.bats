#!/usr/bin/env bats
# Linear volumes (dm-linear): requests split at member boundaries into the
# members' own queues at member-relative offsets; sub-ranges; nesting; a
# volume's flush reaches every member; members exported by themselves share
# their queue; listing; block size limits.

load helpers

setup() {
  plugq_setup
  T=$BATS_TEST_TMPDIR
}

teardown() {
  plugq_teardown
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

@test "linear: reads through a volume of two file disks map across the boundary" {
  prefill "$T/a.img" "$MiB" 10
  prefill "$T/b.img" "$MiB" 11
  start_plugq disk=a file="$T/a.img" disk=b file="$T/b.img" linear=vol:a,b
  run nbdinfo --size "$(uri vol)"
  assert_output $((2 * MiB))
  pyrun <<'EOF'
from plugqtest import *
h = connect("vol")
a, b = pattern(10, MiB), pattern(11, MiB)
expect_read(h, MiB - 4096, a[-4096:] + b[:4096], "read straddling the boundary")
expect_read(h, MiB - 1, a[-1:] + b[:1], "2-byte read straddling the boundary")
expect_read(h, 0, a + b, "whole volume")
EOF
}

@test "linear: writes, zeroes and trims straddling the boundary land at member-relative offsets" {
  make_file "$T/a.img" 1M
  make_file "$T/b.img" 1M
  start_plugq disk=a file="$T/a.img" disk=b file="$T/b.img" linear=vol:a,b
  pyrun "$T/a.img" "$T/b.img" <<'EOF'
import os, sys, nbd
from plugqtest import *
A, B = sys.argv[1], sys.argv[2]
h = connect("vol")
ha, hb = connect("a"), connect("b")

# An 8K write straddling the boundary.
x = pattern(1, 8192)
h.pwrite(x, MiB - 4096)
expect_read(h, MiB - 4096, x, "read-back before flush")
h.flush()
expect_file(A, MiB - 4096, x[:4096], "a.img tail")
expect_file(B, 0, x[4096:], "b.img head")
expect_read(ha, MiB - 4096, x[:4096], "export a")
expect_read(hb, 0, x[4096:], "export b")

# An unaligned 1000-byte write straddling it.
y = pattern(2, 1000)
h.pwrite(y, MiB - 500)
h.flush()
expect_file(A, MiB - 500, y[:500], "a.img unaligned tail")
expect_file(B, 0, y[500:], "b.img unaligned head")
expect_file(A, MiB - 4096, x[:4096 - 500], "a.img before the unaligned write")
expect_file(B, 500, x[4096 + 500:], "b.img after the unaligned write")

# Zeroes straddling it, aligned and unaligned.
h.pwrite(fill(0xff, 128 * KiB), MiB - 64 * KiB)
h.zero(4096, MiB - 2048)
h.zero(200, MiB - 8192 - 100)      # does not straddle, inside a
h.zero(300, MiB + 16384 - 150)     # inside b
h.flush()
wa = bytearray(fill(0xff, 64 * KiB)); wb = bytearray(fill(0xff, 64 * KiB))
wa[-2048:] = fill(0, 2048); wb[:2048] = fill(0, 2048)
wa[64 * KiB - 8192 - 100:64 * KiB - 8192 + 100] = fill(0, 200)
wb[16384 - 150:16384 + 150] = fill(0, 300)
expect_file(A, MiB - 64 * KiB, bytes(wa), "a.img after zeroes")
expect_file(B, 0, bytes(wb), "b.img after zeroes")
expect_read(h, MiB - 64 * KiB, bytes(wa) + bytes(wb), "volume after zeroes")

# A trim straddling it: the bytes around it stay.
h.trim(64 * KiB, MiB - 32 * KiB)
h.flush()
expect_file(A, MiB - 64 * KiB, bytes(wa[:32 * KiB]), "a.img before the trim")
expect_file(B, 32 * KiB, bytes(wb[32 * KiB:]), "b.img after the trim")
expect_read(h, MiB - 64 * KiB, bytes(wa[:32 * KiB]), "volume before the trim")
expect_read(h, MiB + 32 * KiB, bytes(wb[32 * KiB:]), "volume after the trim")

# The members never grew (the split plugin bug wrote past them).
assert os.path.getsize(A) == MiB, "a.img is %d bytes" % os.path.getsize(A)
assert os.path.getsize(B) == MiB, "b.img is %d bytes" % os.path.getsize(B)

# Extents over the boundary: the 0xff data either side is reported as data.
expect_no_zero_flag(h, MiB - 64 * KiB, 16 * KiB, "volume extents, a side")
expect_no_zero_flag(h, MiB + 48 * KiB, 16 * KiB, "volume extents, b side")
EOF
}

@test "linear: extents are stitched from the members" {
  make_file "$T/a.img" 1M
  prefill "$T/b.img" "$MiB" 3
  make_file "$T/c.img" 1M
  start_plugq disk=a file="$T/a.img" disk=b file="$T/b.img" disk=c file="$T/c.img" \
    linear=vol:a,b,c
  pyrun <<'EOF'
import nbd
from plugqtest import *
h = connect("vol")
ext = extents(h, 3 * MiB, 0)
for off in (0, MiB - 1, 2 * MiB, 3 * MiB - 1):
    assert flags_at(ext, off) & nbd.STATE_ZERO, "sparse member at %d: %r" % (off, ext)
for off in (MiB, 2 * MiB - 1):
    assert flags_at(ext, off) == 0, "data member at %d: %r" % (off, ext)
assert sum(ln for _, ln, _ in ext) == 3 * MiB, ext
EOF
  run nbdinfo --map --json "$(uri vol)"
  assert_success
  run jq -r ".[] | select(.offset <= $MiB and .offset + .length > $MiB) | .description" <<<"$output"
  assert_output data
}

@test "linear: sub-ranges a@1M+2M,b@512K+1M" {
  prefill "$T/a.img" $((4 * MiB)) 20
  prefill "$T/b.img" $((2 * MiB)) 21
  start_plugq disk=a file="$T/a.img" disk=b file="$T/b.img" \
    linear=v:a@1M+2M,b@512K+1M
  run nbdinfo --size "$(uri v)"
  assert_output $((3 * MiB))
  pyrun "$T/a.img" "$T/b.img" <<'EOF'
import sys, nbd
from plugqtest import *
A, B = sys.argv[1], sys.argv[2]
a, b = pattern(20, 4 * MiB), pattern(21, 2 * MiB)
h = connect("v")
expect_read(h, 0, a[MiB:3 * MiB] + b[512 * KiB:1536 * KiB], "whole volume")

x = pattern(1, 8192)
h.pwrite(x, 2 * MiB - 4096)
y = pattern(2, 512)
h.pwrite(y, 3 * MiB - 512)
z = pattern(3, 100)
h.pwrite(z, 10)
h.flush()
expect_file(A, 3 * MiB - 4096, x[:4096], "a.img at 3M-4K")
expect_file(B, 512 * KiB, x[4096:], "b.img at 512K")
expect_file(B, 1536 * KiB - 512, y, "b.img at 1.5M-512")
expect_file(A, MiB + 10, z, "a.img at 1M+10")
# Nothing outside the ranges changed.
expect_file(A, 0, a[:MiB], "a.img before its range")
expect_file(A, 3 * MiB, a[3 * MiB:], "a.img after its range")
expect_file(B, 0, b[:512 * KiB], "b.img before its range")
expect_file(B, 1536 * KiB, b[1536 * KiB:], "b.img after its range")
try:
    h.pread(512, 3 * MiB)
except nbd.Error:
    pass
else:
    raise AssertionError("read past the end of the volume succeeded")
EOF
}

@test "linear: nesting two deep (and three)" {
  make_file "$T/a.img" 1M
  make_file "$T/b.img" 1M
  make_file "$T/c.img" 1M
  start_plugq disk=a file="$T/a.img" disk=b file="$T/b.img" disk=c file="$T/c.img" \
    linear=inner:a,b linear=outer:inner@512K+1M,c linear=top:outer@256K+1M
  run nbdinfo --size "$(uri outer)"
  assert_output $((2 * MiB))
  run nbdinfo --size "$(uri top)"
  assert_output "$MiB"
  pyrun "$T/a.img" "$T/b.img" "$T/c.img" <<'EOF'
import sys
from plugqtest import *
A, B, C = sys.argv[1:4]
h = connect("outer")
p = pattern(1, 2 * MiB)
h.pwrite(p, 0)
h.flush()
# outer = a[512K,1M) b[0,512K) c[0,1M)
expect_file(A, 512 * KiB, p[:512 * KiB], "a.img")
expect_file(B, 0, p[512 * KiB:MiB], "b.img")
expect_file(C, 0, p[MiB:], "c.img")
expect_file(A, 0, fill(0, 512 * KiB), "a.img outside the volume")
expect_file(B, 512 * KiB, fill(0, 512 * KiB), "b.img outside the volume")

t = connect("top")
# top = outer[256K, 1.25M) = a[768K,1M) b[0,512K) c[0,256K)
expect_read(t, 0, p[256 * KiB:1280 * KiB], "top reads outer")
q = pattern(2, MiB)
t.pwrite(q, 0)
t.flush()
expect_file(A, 768 * KiB, q[:256 * KiB], "a.img via top")
expect_file(B, 0, q[256 * KiB:768 * KiB], "b.img via top")
expect_file(C, 0, q[768 * KiB:], "c.img via top")
expect_file(C, 256 * KiB, p[1280 * KiB:], "c.img past top")
expect_read(h, 0, p[:256 * KiB] + q + p[1280 * KiB:], "outer after the write via top")
EOF
}

@test "linear: FLUSH through the volume reaches every member, each flushed once" {
  make_file "$T/a.img" 1M
  make_file "$T/b.img" 1M
  make_file "$T/c.img" 1M
  start_plugq "${LONG_QUEUE[@]}" stats="$T/stats.json" stats-interval=50ms \
    disk=a file="$T/a.img" disk=b file="$T/b.img" disk=c file="$T/c.img" \
    linear=vol:a@0+512K,b,c,a@512K+512K
  pyrun "$T/a.img" "$T/b.img" "$T/c.img" "$T/stats.json" <<'EOF'
import sys
from plugqtest import *
A, B, C, S = sys.argv[1:5]
h = connect("vol")
# vol = a[0,512K) b c a[512K,1M)
w = [(0, A, 0), (512 * KiB + 4096, B, 4096), (1536 * KiB + 8192, C, 8192),
     (2560 * KiB + 4096, A, 512 * KiB + 4096)]
for i, (voff, path, moff) in enumerate(w):
    h.pwrite(pattern(i, 4096), voff)
for i, (voff, path, moff) in enumerate(w):
    expect_file(path, moff, fill(0, 4096), "%s before FLUSH (must still be queued)" % path)
h.flush()
for i, (voff, path, moff) in enumerate(w):
    expect_file(path, moff, pattern(i, 4096), "%s after the volume's FLUSH" % path)

# Each distinct member's backend was flushed, exactly once (a is in the
# table twice).
def flushed():
    try:
        doc = load_stats(S)
        return all(stat(doc, d, "flush.backend_flushes") >= 1 for d in "abc")
    except (OSError, ValueError, AssertionError):
        return False
poll(flushed, 10, "backend_flushes >= 1 for a, b and c in the stats file")
doc = load_stats(S)
for d in "abc":
    n = stat(doc, d, "flush.backend_flushes")
    assert n == 1, "member %s: %d backend flushes for one volume FLUSH" % (d, n)
h.shutdown()
EOF
}

@test "linear: FUA through a volume makes both touched members durable" {
  make_file "$T/a.img" 1M
  make_file "$T/b.img" 1M
  start_plugq "${LONG_QUEUE[@]}" disk=a file="$T/a.img" disk=b file="$T/b.img" \
    linear=vol:a,b
  pyrun "$T/a.img" "$T/b.img" <<'EOF'
import sys, nbd
from plugqtest import *
A, B = sys.argv[1:3]
h = connect("vol")
old = pattern(1, 64 * KiB)
h.pwrite(old, MiB - 32 * KiB)
expect_file(A, MiB - 32 * KiB, fill(0, 32 * KiB), "a.img before FUA (must still be queued)")
x = pattern(2, 8192)
h.pwrite(x, MiB - 4096, nbd.CMD_FLAG_FUA)
expect_file(A, MiB - 4096, x[:4096], "a.img right after the FUA answer")
expect_file(B, 0, x[4096:], "b.img right after the FUA answer")
h.flush()
expect_file(A, MiB - 4096, x[:4096], "a.img after FLUSH (FUA data stays on top)")
expect_file(B, 0, x[4096:], "b.img after FLUSH (FUA data stays on top)")
expect_file(A, MiB - 32 * KiB, old[:28 * KiB], "a.img older write")
expect_file(B, 4096, old[36 * KiB:], "b.img older write")
EOF
}

@test "linear: a member exported by itself shares its queue with the volume" {
  make_file "$T/a.img" 1M
  make_file "$T/b.img" 1M
  start_plugq "${LONG_QUEUE[@]}" disk=a file="$T/a.img" disk=b file="$T/b.img" \
    linear=vol:a,b
  pyrun "$T/a.img" <<'EOF'
import sys
from plugqtest import *
A = sys.argv[1]
v = connect("vol")
a = connect("a")
x = pattern(1, 4096)
v.pwrite(x, 4096)
expect_read(a, 4096, x, "export a reads the write made through vol")
expect_file(A, 4096, fill(0, 4096), "a.img (must still be queued)")
y = pattern(2, 4096)
a.pwrite(y, 8192)
expect_read(v, 8192, y, "vol reads the write made through a")
# A FLUSH through the member covers the write made through the volume.
a.flush()
expect_file(A, 4096, x, "a.img after FLUSH through a (write made via vol)")
expect_file(A, 8192, y, "a.img after FLUSH through a (write made via a)")
# And a FLUSH through the volume covers writes made through the member.
z = pattern(3, 4096)
a.pwrite(z, 16384)
v.flush()
expect_file(A, 16384, z, "a.img after FLUSH through vol (write made via a)")
EOF
}

@test "linear: a FLUSH through one member leaves another member's queue plugged" {
  make_file "$T/a.img" 1M
  make_file "$T/b.img" 1M
  start_plugq "${LONG_QUEUE[@]}" disk=a file="$T/a.img" disk=b file="$T/b.img" \
    linear=vol:a,b
  pyrun "$T/a.img" "$T/b.img" <<'EOF'
import sys
from plugqtest import *
A, B = sys.argv[1:3]
v = connect("vol")
a = connect("a")
v.pwrite(pattern(1, 4096), 4096)          # in a
v.pwrite(pattern(2, 4096), MiB + 4096)    # in b
a.flush()
expect_file(A, 4096, pattern(1, 4096), "a.img after FLUSH through a")
expect_file(B, 4096, fill(0, 4096),
            "b.img after FLUSH through a (b's queue must not be unplugged)")
b = connect("b")
b.flush()
expect_file(B, 4096, pattern(2, 4096), "b.img after FLUSH through b")
EOF
}

@test "linear: nbdinfo --list shows volumes with their members" {
  make_file "$T/a.img" 1M
  start_plugq disk=alpha file="$T/a.img" disk=beta memory=2M \
    linear=vol:alpha,beta@0+512K
  run nbdinfo --list --json "$(uri alpha)"
  assert_success
  local json=$output
  run jq -r '[.exports[]."export-name"] | sort | join(",")' <<<"$json"
  assert_output alpha,beta,vol
  run jq -r '.exports[] | select(."export-name" == "vol") | ."export-size"' <<<"$json"
  assert_output $((3 * MiB / 2))
  run jq -r '.exports[] | select(."export-name" == "vol") | .description // ""' <<<"$json"
  assert_output --partial alpha
  assert_output --partial beta
}

@test "linear: block size limits are the strictest member's (one direct=true member: minimum 1, preferred 4096)" {
  make_direct_file 1M
  make_file "$T/b.img" 1M
  start_plugq disk=a file="$DIRECT_FILE" direct=true disk=b file="$T/b.img" \
    linear=vol:b,a
  pyrun "$DIRECT_FILE" "$T/b.img" <<'EOF'
import sys, nbd
from plugqtest import *
A, B = sys.argv[1:3]
lim = {}
for e in ("a", "b", "vol"):
    h = connect(e)
    lim[e] = [h.get_block_size(k) for k in (nbd.SIZE_MINIMUM, nbd.SIZE_PREFERRED, nbd.SIZE_MAXIMUM)]
    h.shutdown()
# The direct member serves partial blocks (subblock.bats): minimum 1,
# preferred its block.
assert lim["a"][0] == 1 and lim["a"][1] >= 4096, "direct member limits %r" % lim
assert lim["vol"][0] == max(lim["a"][0], lim["b"][0]), "volume minimum: %r" % lim
assert lim["vol"][2] == min(lim["a"][2], lim["b"][2]), "volume maximum: %r" % lim
assert lim["vol"][1] >= max(lim["a"][1], lim["b"][1]), "volume preferred: %r" % lim
h = connect("vol")
x = pattern(1, 8192)
h.pwrite(x, MiB - 4096)       # straddles b -> a, 4096-aligned
h.flush()
expect_file(B, MiB - 4096, x[:4096], "b.img")
expect_file(A, 0, x[4096:], "direct a.img")
EOF
  run nbdinfo --json "$(uri vol)"
  assert_success
  local json=$output
  run jq -r '.exports[0].block_size_minimum' <<<"$json"
  assert_output 1
  run jq -r '.exports[0].block_size_preferred' <<<"$json"
  [ "$output" -ge 4096 ] || fail "vol block_size_preferred=$output"
}

@test "linear: a 100 MiB zero across a member boundary zeroes its far end" {
  start_plugq disk=m1 memory=64M disk=m2 memory=64M linear=vol:m1,m2
  pyrun <<'EOF'
from plugqtest import *
h = connect("vol")
chunk = fill(0xff, 8 * MiB)
aio_pwrite_all(h, [(chunk, off) for off in range(0, 104 * MiB, 8 * MiB)])
h.zero(100 * MiB, 0)
for off, n in ((0, 64 * KiB), (63 * MiB, 2 * MiB), (70 * MiB, MiB), (99 * MiB, MiB)):
    expect_read(h, off, fill(0, n), "100 MiB zero through the volume")
expect_read(h, 100 * MiB, fill(0xff, MiB), "past the zero")
h.flush()
m2 = connect("m2")
expect_read(m2, 35 * MiB, fill(0, MiB), "member m2 at the far end of the zero")
expect_read(m2, 36 * MiB, fill(0xff, MiB), "member m2 past the zero")
EOF
}

@test "linear: CACHE on disks and volumes returns (the split plugin hung)" {
  make_file "$T/a.img" 1M
  prefill "$T/b.img" "$MiB" 5
  start_plugq disk=a file="$T/a.img" disk=b file="$T/b.img" disk=m memory=1M \
    linear=vol:a,b,m
  timeout 30 "$PYTHON" - <<'EOF'
from plugqtest import *
head = {"a": fill(0, 4096), "b": pattern(5, MiB)[:4096], "m": fill(0, 4096),
        "vol": fill(0, 4096)}
for e in ("a", "b", "m", "vol"):
    h = connect(e)
    size = h.get_size()
    h.cache(size, 0)
    h.cache(4096, size - 4096)
    if e == "vol":
        h.cache(8192, MiB - 4096)
        h.cache(8192, 2 * MiB - 4096)
    expect_read(h, 0, head[e], "export %s after CACHE" % e)
    h.shutdown()
v = connect("vol")
expect_read(v, MiB, pattern(5, MiB), "vol reads b after CACHE")
EOF
}
