#!/usr/bin/env bash
# bench/waiting.sh: writers that wait for their own writes (issue 23):
# ack=dispatched and FUA, where a busy backend is the plug.
#
# Against a remote that takes 1 ms per write (nbdkit memory behind
# --filter=delay delay-write=1ms, the cost bench's W7 remote), plugq's nbd=
# disk against nbdkit's nbd plugin in front of the same remote, 4 KiB
# writes, RUNTIME seconds each, RUNS runs interleaved (A B A B):
#   S16  sequential, QD16, plugq ack=dispatched
#   F32  random, QD16, a FLUSH every 32 writes, plugq ack=dispatched
#   FUA  sequential, QD16, FUA on every write
#   S1   sequential, QD1, plugq ack=dispatched: p50 latency
# each with its ceiling: nbdbench straight on the remote (no server between).
# On an O_DIRECT file (WORK):
#   D16  sequential, QD16, ack=dispatched: plugq against plugq unplug-thresh=1
#
# Writes bench/out/waiting/waiting.md (medians, ratios, backend writes per
# client write from plugq's stats, build, load average) and prints it.
#
# Knobs: RUNTIME=5 RUNS=3 (QUICK=1: 2 s x 1)  PLUGIN  OUT=bench/out
#        WORK=/var/tmp/plugq-bench  FILE_SIZE=256M  WAITING_CASES="S16 F32 FUA S1 D16"
set -euo pipefail
BENCH_SRC=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$BENCH_SRC/lib.sh"
# shellcheck source=servers.sh
. "$BENCH_SRC/servers.sh"

if [ "${QUICK:-0}" = 1 ]; then
  RUNTIME=${RUNTIME:-2} RUNS=${RUNS:-1}
else
  RUNTIME=${RUNTIME:-5} RUNS=${RUNS:-3}
fi
OUT=${OUT:-$BENCH_SRC/out}
WORK=${WORK:-/var/tmp/plugq-bench}
SHM=${SHM:-/dev/shm/plugq-bench}
FILE_SIZE=${FILE_SIZE:-256M}
PLUGIN=${PLUGIN:-}
WAITING_CASES=${WAITING_CASES:-S16 F32 FUA S1 D16}
W_OUT=$OUT/waiting
RUNDIR=$W_OUT/run
RESULTS=$W_OUT/results.tsv
SIZE=1G REMOTE_SIZE=1G REMOTE_DELAY=1ms STATS_INTERVAL=100ms
export RUNTIME
NBDBENCH=$BENCH_SRC/nbdbench

[ -x "$NBDBENCH" ] || die "build nbdbench first (make -C bench)"
[ -n "$PLUGIN" ] && [ -f "$PLUGIN" ] || die "no plugin: PLUGIN=path/to/nbdkit-plugq-plugin.so"
need_tools nbdkit:nbdkit

# CASE|what|nbdbench arguments|NAME:BACKEND:LABEL (server variants; the
# reference last)
CASES=(
  "S16|remote, sequential, QD16, ack=dispatched|-m write -b 4k -q 16|plugq-dispatched:remote:plugq nbdkit-nbd:remote:nbdkit-nbd ceiling:remote:remote-alone"
  "F32|remote, random, QD16, FLUSH every 32, ack=dispatched|-m randwrite -b 4k -q 16 -f 32|plugq-dispatched:remote:plugq nbdkit-nbd:remote:nbdkit-nbd ceiling:remote:remote-alone"
  "FUA|remote, sequential, QD16, FUA on every write|-m write -b 4k -q 16 -F|plugq:remote:plugq nbdkit-nbd:remote:nbdkit-nbd ceiling:remote:remote-alone"
  "S1|remote, sequential, QD1, ack=dispatched|-m write -b 4k -q 1|plugq-dispatched:remote:plugq nbdkit-nbd:remote:nbdkit-nbd ceiling:remote:remote-alone"
  "D16|O_DIRECT file, sequential, QD16, ack=dispatched|-m write -b 4k -q 16|plugq-dispatched:disk-direct:plugq plugq-unplugged-dispatched:disk-direct:plugq-thresh1"
)

# case_field CASE N: the Nth |-separated field of a CASES entry.
case_field() { local f; IFS='|' read -r -a f <<<"$1"; echo "${f[$2 - 1]}"; }

# One run: VARIANT (NAME:BACKEND:LABEL), nbdbench ARGS; appends a line
# "case label run iops p50_us backend_writes_per_write" to RESULTS.
run_one() {
  local id=$1 variant=$2 args=$3 run=$4 name backend label out ratio=-
  IFS=: read -r name backend label <<<"$variant"
  out=$RUNDIR/$id-$label-r$run.out
  if [ "$name" = ceiling ]; then
    mkdir -p "$RUNDIR"
    start_remote || die "could not start the remote"
    # shellcheck disable=SC2086 # one word per nbdbench argument
    timed_client "$out" "$NBDBENCH" -u "nbd+unix:///?socket=$REMOTE_SOCK" -t "$RUNTIME" $args >"$out"
    stop_remote
  else
    start_server "$name" "$backend" || die "could not start $name on $backend"
    # shellcheck disable=SC2086
    timed_client "$out" "$NBDBENCH" -u "${SRV_URIS[0]}" -t "$RUNTIME" $args >"$out"
    stop_server
    if [ -n "$SRV_STATS" ] && [ -s "$SRV_STATS" ]; then
      ratio=$("$PY" -c '
import json, sys
d = json.load(open(sys.argv[1]))["disks"][0]["write"]
print("%.3f" % (d["backend_ops"] / d["requests"]) if d["requests"] else "-")' "$SRV_STATS")
    fi
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$id" "$label" "$run" \
    "$(sed -n 's/.* iops=\([0-9]*\).*/\1/p' "$out")" \
    "$(sed -n 's/.* lat_us_p50=\([0-9.]*\).*/\1/p' "$out")" "$ratio" >>"$RESULTS"
}

main() {
  local c id args variant run
  mkdir -p "$W_OUT" "$WORK"
  rm -rf "$RUNDIR"; mkdir -p "$RUNDIR"
  : >"$RESULTS"
  trap 'stop_server; stop_remote' EXIT
  case " $WAITING_CASES " in
    *" D16 "*) log "preparing $WORK/disk0.img ($FILE_SIZE)"
               fill_file "$(backing_path disk 0)" "$FILE_SIZE" ;;
  esac
  log "build $(build_id), load $(loadavg)"
  for ((run = 1; run <= RUNS; run++)); do
    for c in "${CASES[@]}"; do
      id=$(case_field "$c" 1)
      case " $WAITING_CASES " in *" $id "*) ;; *) continue ;; esac
      args=$(case_field "$c" 3)
      for variant in $(case_field "$c" 4); do
        log "run $run/$RUNS: $id ${variant##*:}"
        run_one "$id" "$variant" "$args" "$run"
      done
    done
  done
  "$PY" - "$RESULTS" "$(build_id)" "$(loadavg)" "$RUNTIME" "$RUNS" \
    "${CASES[@]}" >"$W_OUT/waiting.md" <<'EOF'
import statistics, sys
results, build, load, runtime, runs = sys.argv[1:6]
cases = [c.split("|") for c in sys.argv[6:]]
rows = {}
for line in open(results):
    cid, label, run, iops, p50, ratio = line.rstrip("\n").split("\t")
    rows.setdefault((cid, label), []).append(
        (int(iops or 0), float(p50 or 0), ratio))
def med(xs):
    return statistics.median(xs) if xs else 0
print("## Waiting writers (bench/waiting.sh)\n")
print("Build %s; %s s per run, %s runs interleaved, medians; load average "
      "at the start %s.\n" % (build, runtime, runs, load))
print("| case | server | IOPS | p50 µs | vs reference | backend writes per write |")
print("|---|---|---:|---:|---:|---:|")
for cid, what, _, variants in cases:
    labels = [v.split(":")[2] for v in variants.split()]
    have = [l for l in labels if (cid, l) in rows]
    if not have:
        continue
    ref = med([r[0] for r in rows.get((cid, labels[1]), [])])
    for l in have:
        r = rows[(cid, l)]
        iops = med([x[0] for x in r])
        ratios = [x[2] for x in r if x[2] != "-"]
        print("| %s: %s | %s | %d | %.0f | %s | %s |" % (
            cid, what, l, iops, med([x[1] for x in r]),
            "%.2fx" % (iops / ref) if ref else "-",
            ratios[len(ratios) // 2] if ratios else "-"))
EOF
  cat "$W_OUT/waiting.md"
}

main "$@"
