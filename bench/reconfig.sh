#!/usr/bin/env bash
# bench/reconfig.sh: a writer's latency while the configuration changes
# around it (issue 41).
#
# One plugq server with disk A (a file on WORK) and a control= socket.  A
# writer (nbdbench) on A: 4 KiB random writes, QD16, a FLUSH every 32,
# RUNTIME seconds.  Measured twice per run, alternating: quiet, and with
# reconfig-churn.py beside it, a round every CHURN_INTERVAL seconds of add
# (two disks and a volume), set, grow and remove on the control socket.
# The writer's p99 write latency (nbdbench's lat_us_p99, arrival to
# answer) with the churn must stay within LIMIT (1.2) times without it: a
# change of configuration touches no lock, list or thread the writer's
# disk uses.
#
# Writes bench/out/reconfig/reconfig.md (per run, medians, the ratio and
# PASS or FAIL against LIMIT, the build, load averages) and, unless QUICK=1,
# docs/benchmarks-reconfig.md.
#
# Knobs: RUNTIME=20 RUNS=3 (QUICK=1: 2 s x 1, a smoke test)  PLUGIN
#        OUT=bench/out  DOCS=docs  WORK=/var/tmp/plugq-bench  FILE_SIZE=256M
#        CHURN_INTERVAL=0.05  LIMIT=1.2
set -euo pipefail
BENCH_SRC=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$BENCH_SRC/lib.sh"

if [ "${QUICK:-0}" = 1 ]; then
  RUNTIME=${RUNTIME:-2} RUNS=${RUNS:-1}
else
  RUNTIME=${RUNTIME:-20} RUNS=${RUNS:-3}
fi
OUT=${OUT:-$BENCH_SRC/out}
DOCS=${DOCS:-$BENCH_SRC/../docs}
WORK=${WORK:-/var/tmp/plugq-bench}
FILE_SIZE=${FILE_SIZE:-256M}
CHURN_INTERVAL=${CHURN_INTERVAL:-0.05}
LIMIT=${LIMIT:-1.2}
PLUGIN=${PLUGIN:-}
R_OUT=$OUT/reconfig
RUNDIR=$R_OUT/run
NBDBENCH=$BENCH_SRC/nbdbench
WRITER_ARGS=(-m randwrite -b 4k -q 16 -f 32)

[ -x "$NBDBENCH" ] || die "build nbdbench first (make -C bench)"
[ -n "$PLUGIN" ] && [ -f "$PLUGIN" ] || die "no plugin: PLUGIN=path/to/nbdkit-plugq-plugin.so"
need_tools nbdkit:nbdkit

SOCK=$RUNDIR/nbd.sock
CTL=$RUNDIR/control
PIDFILE=$RUNDIR/nbdkit.pid
IMG=$WORK/reconfig-a.img
SERVER_PID=

stop_plugq() {
  [ -n "$SERVER_PID" ] || return 0
  kill "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=
}
trap stop_plugq EXIT

start_plugq() {
  rm -f "$SOCK" "$CTL" "$PIDFILE"
  nbdkit -f -U "$SOCK" -P "$PIDFILE" "$PLUGIN" \
    disk=A file="$IMG" control="$CTL" >"$RUNDIR/nbdkit.log" 2>&1 &
  SERVER_PID=$!
  local i
  for ((i = 0; i < 200; i++)); do
    [ -S "$SOCK" ] && [ -S "$CTL" ] && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.05
  done
  cat "$RUNDIR/nbdkit.log" >&2
  die "plugq did not start"
}

# measure MODE RUN: one writer run (quiet or churn) on a fresh server;
# appends "mode run p99_us p50_us iops rounds" to RESULTS.
measure() {
  local mode=$1 run=$2 out=$RUNDIR/$1-r$2.out churn_pid='' rounds=0 p99 p50 iops
  start_plugq
  if [ "$mode" = churn ]; then
    /usr/bin/python3 "$BENCH_SRC/reconfig-churn.py" "$CTL" "$CHURN_INTERVAL" \
      "$RUNTIME" >"$RUNDIR/$mode-r$run.churn" &
    churn_pid=$!
  fi
  timed_client "$out" "$NBDBENCH" -u "nbd+unix:///A?socket=$SOCK" -t "$RUNTIME" \
    "${WRITER_ARGS[@]}" >"$out"
  if [ -n "$churn_pid" ]; then
    wait "$churn_pid" || die "the churn failed: $(cat "$RUNDIR/$mode-r$run.churn")"
    rounds=$(sed -n 's/^rounds=//p' "$RUNDIR/$mode-r$run.churn")
  fi
  stop_plugq
  grep -q ' errors=0' "$out" || die "the writer saw errors: $(cat "$out")"
  p99=$(grep -o 'lat_us_p99=[0-9.]*' "$out" | cut -d= -f2)
  p50=$(grep -o 'lat_us_p50=[0-9.]*' "$out" | cut -d= -f2)
  iops=$(grep -o 'iops=[0-9.]*' "$out" | cut -d= -f2)
  echo "$mode $run $p99 $p50 $iops $rounds" >>"$RESULTS"
  log "$mode run $run: p99 ${p99} us, p50 ${p50} us, ${iops} writes/s, $rounds rounds of churn"
}

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

report() {
  local q c ratio verdict
  q=$(awk '$1 == "quiet" {print $3}' "$RESULTS" | median)
  c=$(awk '$1 == "churn" {print $3}' "$RESULTS" | median)
  ratio=$(awk -v q="$q" -v c="$c" 'BEGIN {printf "%.2f", c / q}')
  verdict=$(awk -v r="$ratio" -v l="$LIMIT" 'BEGIN {print (r <= l) ? "PASS" : "FAIL"}')
  cat <<EOF
# Reconfiguration under load (\`make -C bench reconfig\`)

A writer on disk A (4 KiB random writes, QD16, a FLUSH every 32, on a file in
\`$WORK\`) for $RUNTIME s per run, $RUNS run(s) each way, alternating: quiet, and
with a round of add (two disks and a volume), set, grow and remove on the
control socket every $CHURN_INTERVAL s (\`bench/reconfig-churn.py\`).  p99 is
nbdbench's write latency, arrival to answer.  Issue 41: p99 with the churn
within $LIMIT times without.

- build: $(build_id)
- date: $(date -u '+%Y-%m-%d %H:%M UTC'); host: $(nproc) CPUs; load averages $LOAD_BEFORE before, $(loadavg) after
$( [ "${QUICK:-0}" = 1 ] && echo "- QUICK=1: a smoke test, not a measurement" )

| run | mode | p99 (us) | p50 (us) | writes/s | churn rounds |
|---|---|---|---|---|---|
$(awk '{printf "| %s | %s | %s | %s | %s | %s |\n", $2, $1, $3, $4, $5, $6}' "$RESULTS")

Median p99: quiet $q us, with churn $c us: ratio **$ratio** (limit $LIMIT): **$verdict**.
EOF
}

mkdir -p "$RUNDIR" "$WORK"
RESULTS=$R_OUT/results.tsv
: >"$RESULTS"
LOAD_BEFORE=$(loadavg)
log "filling $IMG ($FILE_SIZE)"
fill_file "$IMG" "$FILE_SIZE"
for ((run = 1; run <= RUNS; run++)); do
  measure quiet "$run"
  measure churn "$run"
done
report >"$R_OUT/reconfig.md"
cat "$R_OUT/reconfig.md"
if [ "${QUICK:-0}" != 1 ]; then
  cp "$R_OUT/reconfig.md" "$DOCS/benchmarks-reconfig.md"
  log "wrote $DOCS/benchmarks-reconfig.md"
fi
rm -f "$IMG"
