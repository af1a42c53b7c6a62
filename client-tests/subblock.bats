#!/usr/bin/env bats
# Requests smaller than the block of a direct=true disk (O_DIRECT wants
# whole 4096-byte blocks): a direct=true file and a loop block device
# advertise a minimum block size of 1, and 1 KiB and odd-sized writes,
# reads, zeroes, FLUSH and FUA are served by read-modify-write.  Every
# check reads the backing file itself, byte for byte.

load helpers

setup() {
  plugq_setup
  T=$BATS_TEST_TMPDIR
  LOOP_DEV=
  LOOP_FILE=
}

teardown() {
  local rc=0
  plugq_teardown || rc=1
  if [ -n "$LOOP_DEV" ]; then losetup -d "$LOOP_DEV" || rc=1; fi
  if [ -n "$LOOP_FILE" ]; then rm -f "$LOOP_FILE"; fi
  return $rc
}

# prefill FILE SIZE SEED: FILE holds pattern(SEED, SIZE), so that what a
# partial block keeps of its old bytes can be told from zeroes.
prefill() {
  pyrun "$@" <<'EOF'
import os, sys
from plugqtest import pattern
with open(sys.argv[1], "r+b") as f:
    f.write(pattern(int(sys.argv[3]), int(sys.argv[2])))
    f.flush()
    os.fsync(f.fileno())
EOF
}

# subblock_io EXPORT BACKING SIZE SEED: the conversation both disks get.
# BACKING held pattern(SEED, SIZE) before the server started.
subblock_io() {
  pyrun "$@" <<'EOF'
import sys, nbd
from plugqtest import *
export, backing, size, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
h = connect(export)
assert h.get_block_size(nbd.SIZE_MINIMUM) == 1, \
    "minimum block size %d" % h.get_block_size(nbd.SIZE_MINIMUM)
assert h.get_block_size(nbd.SIZE_PREFERRED) >= 4096, \
    "preferred block size %d" % h.get_block_size(nbd.SIZE_PREFERRED)
disk = bytearray(pattern(seed, size))
tag = [100]

def write(off, n, flags=0):
    tag[0] += 1
    data = pattern(tag[0], n)
    h.pwrite(data, off, flags)
    disk[off:off + n] = data

def zero(off, n):
    h.zero(n, off)
    disk[off:off + n] = bytes(n)

def check_reads(what):
    # Unaligned reads, through the queue, of what was written so far.
    for off, n in ((1000, 3000), (4095, 2), (8190, 10000), (40000, 12345),
                   (0, 1), (size - 777, 777)):
        expect_read(h, off, disk[off:off + n], "%s: read %d+%d" % (what, off, n))

write(1024, 1024)                   # inside a block
write(5 * 4096 + 3072, 1024)        # the end of a block
write(100000, 1)                    # one byte
write(8191, 777)                    # across a block boundary
write(40001, 10007)                 # odd start, odd length, whole blocks between
for i in (3, 2, 1, 0):              # a block in 1 KiB pieces, backwards
    write(16 * 4096 + i * 1024, 1024)
zero(50001, 9000)                   # a zero of odd bounds
write(60003, 100)                   # inside the zeroed range's last block
check_reads("before FLUSH")
h.flush()
expect_file(backing, 0, disk, "after FLUSH")

# FUA: answered only once its block is written and flushed.
write(12288 + 512, 1024, nbd.CMD_FLAG_FUA)
expect_file(backing, 12288, disk[12288:12288 + 4096], "after a 1 KiB FUA write")
write(70000, 5000, nbd.CMD_FLAG_FUA)
expect_file(backing, 65536, disk[65536:81920], "after an odd-sized FUA write")

# Requests that overlap each other in the queue, then all read back.
for i in range(64):
    write((i * 1237) % (size - 3000), 1 + (i * 389) % 2999)
check_reads("overlapping writes")
h.flush()
expect_file(backing, 0, disk, "after the last FLUSH")
expect_read(h, 0, disk, "the whole disk")
h.shutdown()
EOF
}

@test "subblock: 1 KiB and odd-sized I/O, FLUSH and FUA on a direct=true file disk" {
  make_direct_file 1M
  prefill "$DIRECT_FILE" "$MiB" 7
  start_plugq stats="$T/stats.json" disk=d file="$DIRECT_FILE" direct=true
  subblock_io d "$DIRECT_FILE" "$MiB" 7
  run nbdinfo --json "$(uri d)"
  assert_success
  run jq -r '.exports[0].block_size_minimum' <<<"$output"
  assert_output 1
  stop_plugq
  run stats_value "$T/stats.json" d read_modify_writes
  assert_success
  [ "$output" -ge 1 ] || fail "read_modify_writes is $output"
}

@test "subblock: 1 KiB and odd-sized I/O, FLUSH and FUA on a loop block device with 4096-byte sectors, direct=true" {
  LOOP_FILE=$(mktemp /var/tmp/plugq-loop.XXXXXX)
  truncate -s 1M "$LOOP_FILE"
  prefill "$LOOP_FILE" "$MiB" 8
  if ! LOOP_DEV=$(losetup --find --show --sector-size 4096 "$LOOP_FILE" 2>"$T/losetup.err"); then
    LOOP_DEV=
    skip "cannot attach a loop device here: $(cat "$T/losetup.err")"
  fi
  [ "$(blockdev --getss "$LOOP_DEV")" = 4096 ] || fail "$LOOP_DEV has $(blockdev --getss "$LOOP_DEV")-byte sectors"
  start_plugq disk=b file="$LOOP_DEV" direct=true
  subblock_io b "$LOOP_FILE" "$MiB" 8
}

@test "subblock: a volume over a direct=true member at a sub-block offset advertises 1 and stays exact" {
  make_direct_file 1M
  prefill "$DIRECT_FILE" "$MiB" 9
  make_file "$T/p.img" 64K
  start_plugq disk=d file="$DIRECT_FILE" direct=true disk=p file="$T/p.img" \
    linear=vol:p,d@512+500000
  pyrun "$DIRECT_FILE" "$T/p.img" <<'EOF'
import sys, nbd
from plugqtest import *
direct, plain = sys.argv[1:3]
h = connect("vol")
assert h.get_block_size(nbd.SIZE_MINIMUM) == 1, h.get_block_size(nbd.SIZE_MINIMUM)
assert h.get_block_size(nbd.SIZE_PREFERRED) >= 4096, h.get_block_size(nbd.SIZE_PREFERRED)
want = bytearray(pattern(9, MiB))
x = pattern(1, 3000)
h.pwrite(x, 64 * KiB - 1000)        # the plain member's end, then d at 512
y = pattern(2, 1024)
h.pwrite(y, 64 * KiB + 4000, nbd.CMD_FLAG_FUA)
want[512:512 + 2000] = x[1000:]
want[4512:4512 + 1024] = y
expect_file(direct, 4096, want[4096:8192], "direct member after FUA")
h.flush()
expect_file(plain, 64 * KiB - 1000, x[:1000], "plain member")
expect_file(direct, 0, want, "direct member")
expect_read(h, 64 * KiB - 1000, x[:1000] + want[512:512 + 8000], "volume read")
h.shutdown()
EOF
}
