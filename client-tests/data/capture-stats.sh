#!/bin/bash
# client-tests/data/capture-stats.sh PLUGIN: re-create the stats files that
# client-tests/plugq-stat.bats reads, from real plugq runs.
#
#   stats-one.json         one file disk: 32 sequential writes, 8 reads, a
#                          FLUSH, 4 FUA writes, a zero, a trim, a FLUSH
#   stats-vol.json         disks a, b and linear=vol:a,b@1M+4M; writes that
#                          straddle the member boundary, a volume FLUSH
#   stats-busy-{1,2}.json  two consecutive snapshots (stats-interval=1s) of
#                          a disk under a random read/write load
#
# The tests check plugq-stat's arithmetic against the numbers in these
# files, so re-capturing means re-deriving the expected values in the test.
set -eu
PLUGIN=${1:?usage: capture-stats.sh /path/to/nbdkit-plugq-plugin.so}
DATA=$(cd "$(dirname "$0")" && pwd)
NBDBENCH=${NBDBENCH:-$DATA/../../bench/nbdbench}
export PATH=/usr/bin:$PATH
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

capture_one() {
  truncate -s 16M "$TMP/one.img"
  cat >"$TMP/one.py" <<'EOF'
import sys, time, nbd
h = nbd.NBD()
h.connect_uri(sys.argv[1])
buf = b"\x5a" * 4096
for i in range(32):
    h.pwrite(buf, i * 4096)
for i in range(8):
    h.pread(4096, 1048576 + i * 4096)
h.flush()
for i in range(4):
    h.pwrite(buf, (4 + i) * 1048576, nbd.CMD_FLAG_FUA)
h.zero(1048576, 8 * 1048576)
h.trim(1048576, 12 * 1048576)
h.flush()
time.sleep(1)           # a realistic uptime, so rates are readable
h.shutdown()
EOF
  nbdkit -U - "$PLUGIN" disk=one file="$TMP/one.img" stats="$TMP/one.json" \
    --run "/usr/bin/python3 $TMP/one.py \"\$uri\""
  cp "$TMP/one.json" "$DATA/stats-one.json"
}

capture_vol() {
  cat >"$TMP/vol.py" <<'EOF'
import sys, time, nbd
def conn(name):
    h = nbd.NBD()
    h.set_export_name(name)
    h.connect_unix(sys.argv[1])
    return h
vol, b = conn("vol"), conn("b")
buf = b"\xa5" * 4096
for i in range(4):
    vol.pwrite(buf, 8 * 1048576 - 8192 + i * 4096)
for i in range(16):
    b.pwrite(buf, 6 * 1048576 + i * 4096)
vol.pread(65536, 0)
vol.flush()
time.sleep(1)
vol.shutdown()
b.shutdown()
EOF
  nbdkit -U - "$PLUGIN" disk=a memory=8M disk=b memory=8M \
    linear=vol:a,b@1M+4M stats="$TMP/vol.json" \
    --run "/usr/bin/python3 $TMP/vol.py \"\$unixsocket\""
  cp "$TMP/vol.json" "$DATA/stats-vol.json"
}

# Two snapshots in a row: wait for one past 1.5 s of uptime, then for the
# next rewrite.
capture_busy() {
  truncate -s 64M "$TMP/busy.img"
  cat >"$TMP/busy.sh" <<'EOF'
S=$1 U=$2 OUT=$3 NBDBENCH=$4
"$NBDBENCH" -u "$U" -m randrw -r 30 -q 8 -b 4k -f 64 -S 8M -t 4 >/dev/null &
up() { /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["uptime"])' "$S" 2>/dev/null || echo 0; }
while awk -v u="$(up)" 'BEGIN { exit !(u < 1.5) }'; do sleep 0.05; done
cp "$S" "$OUT/stats-busy-1.json"; u1=$(up)
while [ "$(up)" = "$u1" ]; do sleep 0.05; done
cp "$S" "$OUT/stats-busy-2.json"
wait
EOF
  nbdkit -U - "$PLUGIN" disk=busy file="$TMP/busy.img" stats="$TMP/busy.json" \
    stats-interval=1s \
    --run "bash $TMP/busy.sh $TMP/busy.json \"nbd+unix:///busy?socket=\$unixsocket\" $DATA $NBDBENCH"
}

capture_one
capture_vol
capture_busy
