#!/usr/bin/env bash
# Issue 5: 4 KiB sequential writes at QD16 through a plugq disk whose
# backend is a remote NBD export, against nbdkit's nbd plugin forwarding
# to the same kind of remote.  The remote (nbdkit memory behind the stats
# filter) counts the NBD writes that reach it.
# Usage: bench/remote-member.sh [PLUGIN]   (RUNTIME=seconds, RUNS=n)
set -euo pipefail
export PATH=/usr/bin:$PATH
plugin=${1:-$(dirname "$0")/../_build/gcc/.libs/nbdkit-plugq-plugin.so}
runtime=${RUNTIME:-5} runs=${RUNS:-3}
work=$(mktemp -d /tmp/plugq-remote.XXXXXX)
trap 'rm -rf "$work"' EXIT

stop() {
  local pid; pid=$(cat "$1")
  kill "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
}

# run NAME FRONT-ARGS...: one fio run through a fresh remote and front.
run() {
  local name=$1; shift
  rm -f "$work"/*.sock "$work/remote.stats"
  nbdkit -U "$work/remote.sock" -P "$work/remote.pid" --filter=stats \
    memory 1G statsfile="$work/remote.stats"
  nbdkit -U "$work/front.sock" -P "$work/front.pid" "$@"
  fio --name=t --ioengine=nbd --uri="nbd+unix:///?socket=$work/front.sock" \
    --rw=write --bs=4k --iodepth=16 --time_based --runtime="$runtime" \
    --output-format=json --output="$work/fio.json" >/dev/null 2>&1
  stop "$work/front.pid"
  stop "$work/remote.pid"
  python3 - "$name" "$work/fio.json" "$work/remote.stats" <<'PY'
import json, re, sys
w = json.load(open(sys.argv[2]))["jobs"][0]["write"]
sent = int(re.search(r"write: (\d+) ops", open(sys.argv[3]).read()).group(1))
print(f"| {sys.argv[1]} | {w['iops']:.0f} | {w['total_ios']} | {sent} | "
      f"{sent / w['total_ios']:.4f} |")
PY
}

echo "| front | IOPS | client writes | NBD writes at the remote | NBD writes per client write |"
echo "|---|---:|---:|---:|---:|"
for i in $(seq "$runs"); do
  run plugq "$plugin" disk=far nbd="nbd+unix:///?socket=$work/remote.sock"
  run nbdkit-nbd nbd socket="$work/remote.sock"
done
