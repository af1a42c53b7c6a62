#!/usr/bin/env bash
# Measures the queue defaults (unplug-delay, unplug-thresh, queue-requests)
# that docs/tuning.md explains: fio's nbd engine against plugq on
#   (a) 4 KiB sequential writes, QD16, file disk with direct=true
#   (b) 4 KiB random writes, QD32, memory disk
#   (c) 4 KiB sequential writes, QD1, ack=dispatched (latency)
# Usage: bench/tune-defaults.sh [PLUGIN] > table.md   (RUNTIME=seconds)
set -euo pipefail
export PATH=/usr/bin:$PATH
plugin=${1:-$(dirname "$0")/../_build/gcc/.libs/nbdkit-plugq-plugin.so}
runtime=${RUNTIME:-5}
work=$(mktemp -d /var/tmp/plugq-tune.XXXXXX)
trap 'rm -rf "$work"' EXIT
sock=$work/sock pid=$work/pid img=$work/disk.img

# fio_run FIO-ARGS -- PLUGQ-ARGS: prints "iops p99_us writes_per_op"
fio_run() {
  local fioargs=() ; while [ "$1" != -- ]; do fioargs+=("$1"); shift; done; shift
  rm -f "$sock" "$work/stats.json"
  nbdkit -U "$sock" -P "$pid" "$plugin" stats="$work/stats.json" "$@"
  fio --name=t --ioengine=nbd --uri="nbd+unix:///?socket=$sock" "${fioargs[@]}" \
      --time_based --runtime="$runtime" --norandommap --randrepeat=0 \
      --output-format=json --output="$work/fio.json" >/dev/null 2>&1
  kill "$(cat "$pid")"
  while kill -0 "$(cat "$pid")" 2>/dev/null; do sleep 0.05; done
  python3 - "$work/fio.json" "$work/stats.json" <<'PY'
import json, sys
w = json.load(open(sys.argv[1]))["jobs"][0]["write"]
d = json.load(open(sys.argv[2]))["disks"][0]["write"]
p99 = w["clat_ns"]["percentile"]["99.000000"] / 1000
print(f'{w["iops"]:.0f} {p99:.0f} {d["requests"] / max(1, d["backend_ops"]):.1f}')
PY
}

echo "| workload | unplug-delay | unplug-thresh | IOPS | p99 µs | client writes per backend write |"
echo "|---|---|---|---:|---:|---:|"
truncate -s 1G "$img"
for thresh in 4 16 32 64; do
  for delay in 1ms 3ms 10ms; do
    read -r iops p99 ratio < <(fio_run --rw=write --bs=4k --iodepth=16 -- \
      disk=d file="$img" direct=true unplug-delay=$delay unplug-thresh=$thresh)
    echo "| seq write QD16, file O_DIRECT | $delay | $thresh | $iops | $p99 | $ratio |"
  done
done
for thresh in 4 16 32 64; do
  read -r iops p99 ratio < <(fio_run --rw=randwrite --bs=4k --iodepth=32 -- \
    disk=m memory=1G unplug-thresh=$thresh)
  echo "| rand write QD32, memory | 3ms | $thresh | $iops | $p99 | $ratio |"
done
for delay in 100us 1ms 3ms; do
  read -r iops p99 ratio < <(fio_run --rw=write --bs=4k --iodepth=1 -- \
    disk=d file="$img" ack=dispatched unplug-delay=$delay)
  echo "| seq write QD1, ack=dispatched | $delay | 16 | $iops | $p99 | $ratio |"
done

# queue-requests: a deep queue in front of a fast disk only makes every
# lookup slower; a shallow one limits merges in front of a slow one.
echo
echo "| workload | queue-requests | IOPS | p99 µs | client writes per backend write |"
echo "|---|---:|---:|---:|---:|"
for rounds in 1 2; do
  for nr in 64 256 1024 65536; do
    read -r iops p99 ratio < <(fio_run --rw=randwrite --bs=4k --iodepth=32 -- \
      disk=m memory=1G queue-requests=$nr)
    echo "| rand write QD32, memory | $nr | $iops | $p99 | $ratio |"
    read -r iops p99 ratio < <(fio_run --rw=write --bs=4k --iodepth=16 -- \
      disk=d file="$img" direct=true queue-requests=$nr)
    echo "| seq write QD16, file O_DIRECT | $nr | $iops | $p99 | $ratio |"
  done
done
