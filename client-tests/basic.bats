#!/usr/bin/env bats
# plugq basics: the default disk, file and memory disks, export listing,
# default export, trim / zero / extents, a 100 MiB zero, data reaching the
# backing file, direct=true, the engine threads' names.

load helpers

setup() {
  plugq_setup
  T=$BATS_TEST_TMPDIR
}

teardown() {
  plugq_teardown
}

@test "basic: the default is one 1 GiB memory disk named default (nbdinfo, qemu-img)" {
  start_plugq
  run nbdinfo --size "$(uri)"
  assert_success
  assert_output "$GiB"
  run nbdinfo --size "$(uri default)"
  assert_success
  assert_output "$GiB"
  run qemu-img info --output=json "$(uri)"
  assert_success
  run jq -r '."virtual-size"' <<<"$output"
  assert_output "$GiB"
  run nbdinfo --list --json "$(uri)"
  assert_success
  run jq -r '[.exports[]."export-name"] | join(",")' <<<"$output"
  assert_output default
}

@test "basic: read-after-write on the default memory disk" {
  start_plugq
  nbdsh_run "" '
from plugqtest import *
writes = [(0, pattern(1, 4096)), (4096 * 7 + 13, pattern(2, 777)),
          (MiB - 100, pattern(3, 200)), (GiB - 512, pattern(4, 512))]
for off, data in writes:
    h.pwrite(data, off)
for off, data in writes:
    expect_read(h, off, data, "memory read-after-write")
# Never-written space reads as zero.
expect_read(h, 512 * MiB, fill(0, 65536), "unwritten memory")
'
}

@test "basic: read-after-write on a file disk" {
  make_file "$T/f.img" 4M
  start_plugq disk=f file="$T/f.img"
  nbdsh_run f '
from plugqtest import *
writes = [(0, pattern(1, 4096)), (4096 * 7 + 13, pattern(2, 777)),
          (4 * MiB - 100, pattern(3, 100))]
for off, data in writes:
    h.pwrite(data, off)
for off, data in writes:
    expect_read(h, off, data, "file read-after-write")
# Overwrite part of a write: the newer bytes win.
h.pwrite(fill(0xee, 100), 4096 * 7 + 100)
want = bytearray(pattern(2, 777)); want[87:187] = fill(0xee, 100)
expect_read(h, 4096 * 7 + 13, bytes(want), "overwrite")
'
}

@test "basic: disk=a file=X disk=b memory=1G lists both, with descriptions" {
  make_file "$T/x.img" 1M
  start_plugq disk=a file="$T/x.img" disk=b memory=1G
  run nbdinfo --list --json "$(uri a)"
  assert_success
  local json=$output
  run jq -r '[.exports[]."export-name"] | sort | join(",")' <<<"$json"
  assert_output a,b
  run jq -r '.exports[] | select(."export-name" == "a") | ."export-size"' <<<"$json"
  assert_output "$MiB"
  run jq -r '.exports[] | select(."export-name" == "b") | ."export-size"' <<<"$json"
  assert_output "$GiB"
  run jq -r '.exports[] | select(."export-name" == "a") | .description // ""' <<<"$json"
  [ -n "$output" ] || fail "export a has no description: $json"
  assert_output --regexp '[Ff]ile|x\.img'
  run jq -r '.exports[] | select(."export-name" == "b") | .description // ""' <<<"$json"
  [ -n "$output" ] || fail "export b has no description: $json"
  assert_output --regexp '[Mm]emory'
}

@test "basic: exports advertise flush, FUA, multi-conn, trim, zero, fast zero, cache" {
  make_file "$T/x.img" 1M
  start_plugq disk=a file="$T/x.img" disk=b memory=1G
  local e f json
  for e in a b; do
    json=$(nbdinfo --json "$(uri $e)")
    for f in can_flush can_fua can_multi_conn can_trim can_zero can_fast_zero can_cache; do
      run jq -r ".exports[0].$f" <<<"$json"
      [ "$output" = true ] || fail "export $e: $f is $output: $json"
    done
    run jq -r '.exports[0].is_read_only' <<<"$json"
    assert_output false
  done
  # FUA is native: nbdkit does not turn it into a separate flush.
  run timeout 30 "$NBDKIT" --dump-plugin "$PLUGIN"
  assert_line has_flush=1
  assert_line has_zero=1
  assert_line has_trim=1
  assert_line has_extents=1
  assert_line has_cache=1
  assert_line has_can_fua=1
  assert_line has_can_multi_conn=1
}

@test "basic: the default export is the first disk; default-export= picks another" {
  make_file "$T/x.img" 1M
  start_plugq disk=a file="$T/x.img" disk=b memory=2M
  run nbdinfo --size "$(uri)"
  assert_success
  assert_output "$MiB"
  stop_plugq
  start_plugq disk=a file="$T/x.img" disk=b memory=2M default-export=b
  run nbdinfo --size "$(uri)"
  assert_success
  assert_output $((2 * MiB))
  # The named exports are still there.
  run nbdinfo --size "$(uri a)"
  assert_output "$MiB"
}

# trim_zero_extents EXPORT [BACKING-FILE]: the same checks on a file and a
# memory disk of 4 MiB.
trim_zero_extents() {
  pyrun "$@" <<'EOF'
import sys, os, nbd
from plugqtest import *
export = sys.argv[1]
path = sys.argv[2] if len(sys.argv) > 2 else None
HZ = nbd.STATE_HOLE | nbd.STATE_ZERO
h = connect(export)
size = h.get_size()
assert size == 4 * MiB, size

# A fresh disk is all hole and zero.
for o, ln, fl in extents(h, size, 0):
    assert fl & nbd.STATE_ZERO, "fresh disk: extent %d+%d flags %d" % (o, ln, fl)

# 1 MiB of data at 1 MiB.
h.pwrite(fill(0xff, MiB), MiB)
h.flush()
ext = extents(h, size, 0)
for off in (MiB, MiB + 4096, 2 * MiB - 1):
    assert flags_at(ext, off) & HZ == 0, "data at %d reported as %d: %r" % (off, flags_at(ext, off), ext)
for off in (0, MiB - 1, 2 * MiB, 4 * MiB - 1):
    assert flags_at(ext, off) & nbd.STATE_ZERO, "unwritten %d reported as %d: %r" % (off, flags_at(ext, off), ext)

# Zero 256K in the middle of the data.
h.zero(256 * KiB, MiB + 256 * KiB)
expect_read(h, MiB + 256 * KiB, fill(0, 256 * KiB), "zeroed range")
expect_read(h, MiB, fill(0xff, 256 * KiB), "data before the zeroed range")
expect_read(h, MiB + 512 * KiB, fill(0xff, 512 * KiB), "data after the zeroed range")

# Trim the last 512K of the data.
h.trim(512 * KiB, MiB + 512 * KiB)
h.flush()
ext = extents(h, size, 0)
for off in (MiB + 512 * KiB, 2 * MiB - 1):
    assert flags_at(ext, off) & nbd.STATE_HOLE, "trimmed %d reported as %d: %r" % (off, flags_at(ext, off), ext)
expect_read(h, MiB + 512 * KiB, fill(0, 512 * KiB), "trimmed range")
expect_read(h, MiB, fill(0xff, 256 * KiB), "data before zero and trim")
for o, ln, fl in ext:
    if o < MiB + 256 * KiB and o + ln > MiB:
        assert fl & HZ == 0, "data range reported %d+%d flags %d" % (o, ln, fl)

if path:
    # Flushed: the backing file shows the same.
    assert os.path.getsize(path) == 4 * MiB, os.path.getsize(path)
    expect_file(path, MiB, fill(0xff, 256 * KiB))
    expect_file(path, MiB + 256 * KiB, fill(0, 768 * KiB))
    fd = os.open(path, os.O_RDONLY)
    try:
        hole = os.lseek(fd, MiB + 512 * KiB, os.SEEK_HOLE)
        assert hole == MiB + 512 * KiB, "trim did not punch a hole: next hole at %d" % hole
    finally:
        os.close(fd)
h.shutdown()
EOF
}

@test "basic: trim, zero and extents on a file disk" {
  make_file "$T/f.img" 4M
  start_plugq disk=f file="$T/f.img"
  trim_zero_extents f "$T/f.img"
  # nbdinfo --map agrees: data at 1M..1.25M, zero/hole at the start.
  run nbdinfo --map --json "$(uri f)"
  assert_success
  local json=$output
  run jq -r '.[] | select(.offset <= 0 and .offset + .length > 0) | .type' <<<"$json"
  assert_output --regexp '^[23]$'
  run jq -r ".[] | select(.offset <= $MiB and .offset + .length > $MiB) | .description" <<<"$json"
  assert_output data
}

@test "basic: trim, zero and extents on a memory disk" {
  start_plugq disk=m memory=4M
  trim_zero_extents m
  run nbdinfo --map --json "$(uri m)"
  assert_success
  local json=$output
  run jq -r '.[] | select(.offset <= 0 and .offset + .length > 0) | .type' <<<"$json"
  assert_output --regexp '^[23]$'
  run jq -r ".[] | select(.offset <= $MiB and .offset + .length > $MiB) | .description" <<<"$json"
  assert_output data
}

# zero_100m EXPORT [BACKING-FILE]: fill 104 MiB with 0xff, zero the first
# 100 MiB in one request, check the far end byte by byte.
zero_100m() {
  pyrun "$@" <<'EOF'
import sys, nbd
from plugqtest import *
export = sys.argv[1]
path = sys.argv[2] if len(sys.argv) > 2 else None
h = connect(export)
chunk = fill(0xff, 8 * MiB)
aio_pwrite_all(h, [(chunk, off) for off in range(0, 104 * MiB, 8 * MiB)])
h.flush()
expect_read(h, 99 * MiB, fill(0xff, 4096), "before the zero")
h.zero(100 * MiB, 0, nbd.CMD_FLAG_NO_HOLE if path else 0)
for off, n in ((0, 64 * KiB), (64 * MiB - 4096, 8192), (70 * MiB, 1 * MiB),
               (99 * MiB, 1 * MiB)):
    expect_read(h, off, fill(0, n), "100 MiB zero")
expect_read(h, 100 * MiB, fill(0xff, 1 * MiB), "past the 100 MiB zero")
h.flush()
if path:
    for off, n in ((0, 64 * KiB), (70 * MiB, 1 * MiB), (99 * MiB, 1 * MiB)):
        expect_file(path, off, fill(0, n), "backing file after the 100 MiB zero")
    expect_file(path, 100 * MiB, fill(0xff, 1 * MiB), "backing file past the zero")
h.shutdown()
EOF
}

@test "basic: a 100 MiB zero request zeroes its far end (memory disk)" {
  start_plugq disk=m memory=128M
  zero_100m m
}

@test "basic: a 100 MiB zero request zeroes its far end (file disk)" {
  make_file "$T/f.img" 128M
  start_plugq disk=f file="$T/f.img"
  zero_100m f "$T/f.img"
}

@test "basic: data reaches the backing file after flush" {
  make_file "$T/f.img" 4M
  start_plugq disk=f file="$T/f.img"
  pyrun "$T/f.img" <<'EOF'
import sys
from plugqtest import *
path = sys.argv[1]
h = connect("f")
writes = [(0, pattern(1, 4096)), (4096 + 17, pattern(2, 5000)),
          (2 * MiB - 3, pattern(3, 4099)), (4 * MiB - 100, pattern(4, 100))]
for off, data in writes:
    h.pwrite(data, off)
h.flush()
for off, data in writes:
    expect_file(path, off, data, "backing file after flush")
h.shutdown()
EOF
  # A real client too: qemu-io writes and flushes, the file has the bytes.
  run qemu-io -f raw "$(uri f)" -c 'write -P 0xab 3M 64k' -c 'flush'
  assert_success
  refute_output --partial 'error'
  dd if="$T/f.img" of="$T/got" bs=64k skip=48 count=1 status=none
  head -c 65536 /dev/zero | tr '\0' '\253' >"$T/want"
  cmp "$T/got" "$T/want"
  # And the whole file equals what the export reads.
  run qemu-img compare -f raw -F raw "$T/f.img" "$(uri f)"
  assert_success
}

@test "basic: direct=true file disk: minimum block size 1, preferred 4096, aligned I/O, O_DIRECT" {
  make_direct_file 4M
  make_file "$T/plain.img" 4M
  start_plugq disk=d file="$DIRECT_FILE" direct=true disk=p file="$T/plain.img"
  run nbdinfo --json "$(uri d)"
  assert_success
  local min pref
  min=$(jq -r '.exports[0].block_size_minimum // 0' <<<"$output")
  pref=$(jq -r '.exports[0].block_size_preferred // 0' <<<"$output")
  # Partial blocks are served by read-modify-write (subblock.bats).
  [ "$min" -eq 1 ] || fail "direct=true reports block_size_minimum=$min: $output"
  [ "$pref" -ge 4096 ] || fail "direct=true reports block_size_preferred=$pref: $output"
  pyrun "$DIRECT_FILE" "$T/plain.img" "$(plugq_pid)" <<'EOF'
import os, sys, nbd
from plugqtest import *
path, plain, pid = sys.argv[1], sys.argv[2], sys.argv[3]
h = connect("d")
assert h.get_block_size(nbd.SIZE_MINIMUM) == 1, h.get_block_size(nbd.SIZE_MINIMUM)
assert h.get_block_size(nbd.SIZE_PREFERRED) >= 4096, h.get_block_size(nbd.SIZE_PREFERRED)
mx = h.get_block_size(nbd.SIZE_MAXIMUM)
assert mx >= 64 * KiB, "maximum block size %d" % mx
data = pattern(7, 64 * KiB)
h.pwrite(data, 8 * KiB)
h.pwrite(pattern(8, 4096), 4 * MiB - 4096)
expect_read(h, 8 * KiB, data, "direct read-after-write")
h.flush()
expect_file(path, 8 * KiB, data, "direct backing file")
expect_file(path, 4 * MiB - 4096, pattern(8, 4096), "direct backing file end")
h.zero(16 * KiB, 8 * KiB)
h.flush()
expect_file(path, 8 * KiB, fill(0, 16 * KiB), "direct zero")
expect_file(path, 24 * KiB, data[16 * KiB:], "direct after zero")

# The server does its I/O on the direct file through an O_DIRECT fd (a
# read-only fd, e.g. for SEEK_DATA/SEEK_HOLE, may exist beside it), and on
# the plain file without O_DIRECT.
p = connect("p")
p.pwrite(b"x" * 4096, 0)
p.flush()
O_DIRECT, O_ACCMODE = 0o40000, 0o3
seen = {}
for fd in os.listdir("/proc/%s/fd" % pid):
    try:
        target = os.readlink("/proc/%s/fd/%s" % (pid, fd))
        with open("/proc/%s/fdinfo/%s" % (pid, fd)) as f:
            info = dict(l.split(":", 1) for l in f.read().splitlines() if ":" in l)
    except OSError:
        continue
    if target in (path, plain):
        flags = int(info["flags"].strip(), 8)
        if flags & O_ACCMODE != os.O_RDONLY:
            seen.setdefault(target, []).append(bool(flags & O_DIRECT))
assert seen.get(path), "the server has no writable fd on %s" % path
assert all(seen[path]), "direct=true file opened for writing without O_DIRECT: %r" % seen
assert seen.get(plain) and not any(seen[plain]), "plain file fds: %r" % seen
EOF
}

@test "basic: each disk's dispatch thread is named for its disk; the unplug timer's is pq-unplug" {
  make_file "$T/f.img" 4M
  start_plugq disk=alpha memory=16M disk=f file="$T/f.img"
  run nbdinfo --size "$(uri f)"   # serving: the threads have started
  assert_success
  run cat /proc/"$(plugq_pid)"/task/*/comm
  assert_success
  assert_line "pq-d:alpha"
  assert_line "pq-d:f"
  assert_line "pq-unplug"
}

# Queued buffers are freed a batch at a time; with glibc's default 128 KiB
# trim threshold nearly every batch went back to the kernel and was faulted
# in again (server/buffers/heap_tuning.c).
@test "basic: at load plugq sets malloc's trim and mmap thresholds, unless the environment sets malloc's own" {
  run timeout 30 "$NBDKIT" -v -U - "$PLUGIN" --run 'exit 0'
  assert_success
  if [ -n "${PLUGQ_SANITIZED:-}" ]; then
    assert_output --partial "malloc: not glibc's, left as it is"
  else
    assert_output --partial "malloc: trim threshold 64 MiB, mmap threshold 32 MiB"
  fi
  GLIBC_TUNABLES=glibc.malloc.trim_threshold=1048576 \
    run timeout 30 "$NBDKIT" -v -U - "$PLUGIN" --run 'exit 0'
  assert_success
  assert_output --partial "malloc: settings from the environment kept"
  refute_output --partial "trim threshold 64 MiB"
}
