#!/bin/bash
# bench/rbd.sh: plugq's rbd= backend against qemu-nbd's rbd: driver on the
# same image of a throw-away local Ceph cluster (make -C bench rbd).
#
# Both servers serve one RBD image with librbd's cache off; bench/nbdbench
# drives each over a unix socket with the same workloads.  Every
# measurement starts a fresh server and stops it cleanly (which releases
# the image's lock for the other); the two servers alternate, A B A B,
# and the order flips every run.  Prints, per workload, the median IOPS
# and MiB/s of each server over RUNS runs, their ratio, and plugq's
# backend writes per client write (from its stats: how much merging cut
# the RADOS requests).
#
# Environment (all optional):
#   RUNTIME=10  seconds per measurement     RUNS=3  runs per server and workload
#   QUICK=1     RUNTIME=1 RUNS=1: proves the script works, no figures to keep
#   SIZE=256M   the image                   WORKLOADS="..." a subset, by name
#   PLUGIN=path/to/nbdkit-plugq-plugin.so   OUT=bench/out/rbd  logs and results
#   PLUGQ_ARGS="key=value ..."  extra plugq keys for the disk
#
# The cluster (client-tests/ceph/cluster.sh: one monitor, one memstore
# OSD) lives in OUT and is stopped by pid on every exit.
set -u
BENCH_SRC=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$BENCH_SRC/lib.sh"

QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then
  RUNTIME=${RUNTIME:-1} RUNS=${RUNS:-1}
fi
RUNTIME=${RUNTIME:-10}
RUNS=${RUNS:-3}
SIZE=${SIZE:-256M}
OUT=${OUT:-$BENCH_SRC/out/rbd}
PLUGIN=${PLUGIN:-}
NBDBENCH=${NBDBENCH:-$BENCH_SRC/nbdbench}
CLUSTER_SH=$BENCH_SRC/../client-tests/ceph/cluster.sh
CEPH_DIR=$OUT/ceph
CONF=$CEPH_DIR/ceph.conf
IMAGE=rbd/bench
SOCK=$OUT/sock
RESULTS=$OUT/results.txt

declare -A WORKLOAD_ARGS=(
  [seqw4k-qd16]="-m write -b 4k -q 16"
  [randw4k-qd16]="-m randwrite -b 4k -q 16"
  [randw4k-qd16-flush32]="-m randwrite -b 4k -q 16 -f 32"
  [randw4k-qd16-fua]="-m randwrite -b 4k -q 16 -F"
  [seqw1m-qd16]="-m write -b 1m -q 16"
  [randr4k-qd16]="-m randread -b 4k -q 16"
)
ALL_WORKLOADS="seqw4k-qd16 randw4k-qd16 randw4k-qd16-flush32 randw4k-qd16-fua
  seqw1m-qd16 randr4k-qd16"
WORKLOADS=${WORKLOADS:-$ALL_WORKLOADS}

SRV_JOB=

cleanup() {
  stop_server
  "$CLUSTER_SH" stop "$CEPH_DIR" || true
}

# wait_for PATH: a pid file or socket, 20 s at most.
wait_for() {
  local i
  for ((i = 0; i < 400; i++)); do
    [ -s "$1" ] || [ -S "$1" ] && return 0
    sleep 0.05
  done
  return 1
}

start_plugq() {
  # shellcheck disable=SC2086 # PLUGQ_ARGS is a word list
  nbdkit -f -U "$SOCK" -P "$OUT/pid" "$PLUGIN" stats="$OUT/stats.json" \
    stats-interval=1s disk=d rbd="$IMAGE" ceph-conf="$CONF" ${PLUGQ_ARGS:-} \
    </dev/null >>"$OUT/server.log" 2>&1 &
  SRV_JOB=$!
  URI="nbd+unix:///d?socket=$SOCK"
}

start_qemu_nbd() {
  CEPH_CONF=$CONF qemu-nbd -t -e 8 -f raw --cache=none -x d -k "$SOCK" \
    --pid-file="$OUT/pid" "rbd:$IMAGE:conf=$CONF:rbd_cache=false" \
    </dev/null >>"$OUT/server.log" 2>&1 &
  SRV_JOB=$!
  URI="nbd+unix:///d?socket=$SOCK"
}

start_server() {
  rm -f "$SOCK" "$OUT/pid" "$OUT/stats.json"
  echo "=== $(date +%T) start $1" >>"$OUT/server.log"
  "start_${1//-/_}"
  wait_for "$OUT/pid" && wait_for "$SOCK" && return 0
  log "$1 did not start (see $OUT/server.log)"
  stop_server
  return 1
}

# stop_server: SIGTERM, so plugq drains, writes its final stats and
# closes the image (its lock is then free for the other server).
stop_server() {
  local i
  [ -n "$SRV_JOB" ] || return 0
  kill -TERM "$SRV_JOB" 2>/dev/null || true
  for ((i = 0; i < 1200; i++)); do
    kill -0 "$SRV_JOB" 2>/dev/null || break
    sleep 0.05
  done
  kill -KILL "$SRV_JOB" 2>/dev/null || true
  wait "$SRV_JOB" 2>/dev/null || true
  SRV_JOB=
  rm -f "$SOCK"
}

# plugq's backend write operations per client write, from its final
# stats ("-" for qemu-nbd).
writes_per_write() {
  [ "$1" = plugq ] || { echo -; return; }
  $PY - "$OUT/stats.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))["disks"][0]["write"]
print("%.3f" % (d["backend_ops"] / d["requests"]) if d["requests"] else "-")
EOF
}

# measure RUN SERVER WORKLOAD: one fresh server, one nbdbench run, one line
# in RESULTS.
measure() {
  local run=$1 server=$2 wl=$3 prefix kv wpw
  prefix=$OUT/raw/$server-$wl-r$run
  log "run $run: $server, $wl"
  start_server "$server" || return 1
  # shellcheck disable=SC2086 # the workload's arguments split on purpose
  if ! "$NBDBENCH" -u "$URI" -t "$RUNTIME" ${WORKLOAD_ARGS[$wl]} \
       >"$prefix.out" 2>"$prefix.log"; then
    log "nbdbench failed (see $prefix.log)"
    stop_server
    return 1
  fi
  stop_server
  wpw=$(writes_per_write "$server")
  kv=$(tr ' ' '\n' <"$prefix.out" | grep -E '^(iops|MiBps|lat_us_p99)=' | tr '\n' ' ')
  echo "server=$server workload=$wl run=$run $kv backend_writes_per_write=$wpw" \
    | tee -a "$RESULTS" >&2
}

summary() {
  $PY - "$RESULTS" <<'EOF'
import statistics, sys
rows = [dict(kv.split("=", 1) for kv in line.split()) for line in open(sys.argv[1])]
order = []
for r in rows:
    if r["workload"] not in order:
        order.append(r["workload"])
def med(wl, server, key):
    v = [float(r[key]) for r in rows
         if r["workload"] == wl and r["server"] == server and r.get(key, "-") != "-"]
    return statistics.median(v) if v else None
print("%-22s %12s %12s %8s %12s %12s %10s" % ("workload", "plugq IOPS", "qemu IOPS",
      "ratio", "plugq MiB/s", "qemu MiB/s", "wr/write"))
for wl in order:
    p, q = med(wl, "plugq", "iops"), med(wl, "qemu-nbd", "iops")
    pm, qm = med(wl, "plugq", "MiBps"), med(wl, "qemu-nbd", "MiBps")
    w = med(wl, "plugq", "backend_writes_per_write")
    f = lambda x, fmt: fmt % x if x is not None else "-"
    print("%-22s %12s %12s %8s %12s %12s %10s" % (wl, f(p, "%.0f"), f(q, "%.0f"),
          f(p / q, "%.2f") if p and q else "-", f(pm, "%.1f"), f(qm, "%.1f"),
          f(w, "%.3f")))
EOF
}

main() {
  local run wl server servers
  command -v qemu-nbd >/dev/null || die "qemu-nbd is not installed (apt-get install qemu-utils)"
  qemu-img --help | grep -qw rbd \
    || die "qemu has no rbd driver (apt-get install qemu-block-extra)"
  [ -x "$NBDBENCH" ] || die "$NBDBENCH is not built (make -C bench nbdbench)"
  [ -f "$PLUGIN" ] || die "PLUGIN='$PLUGIN' is not the built plugin"
  "$CLUSTER_SH" available >&2 || exit 1
  rm -rf "$OUT"
  mkdir -p "$OUT/raw"
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  log "starting the cluster in $CEPH_DIR"
  CEPH_MEMSTORE_BYTES=$((3 * $(size_bytes "$SIZE"))) \
    "$CLUSTER_SH" start "$CEPH_DIR" >>"$OUT/cluster.log" 2>&1 \
    || die "the cluster did not start (see $OUT/cluster.log)"
  timeout 60 rbd --conf "$CONF" create --size "$SIZE" "$IMAGE" \
    || die "cannot create $IMAGE"
  # Written whole once, so reads hit data and no write allocates objects.
  log "filling $IMAGE ($SIZE)"
  timeout 600 rbd --conf "$CONF" bench --io-type write --io-size 4M \
    --io-pattern seq --io-total "$SIZE" "$IMAGE" >>"$OUT/cluster.log" 2>&1 \
    || die "cannot fill $IMAGE"
  : >"$RESULTS"
  for ((run = 1; run <= RUNS; run++)); do
    for wl in $WORKLOADS; do
      [ -n "${WORKLOAD_ARGS[$wl]:-}" ] || die "unknown workload $wl"
      # A B A B: the servers alternate, first one first on odd runs.
      if ((run % 2)); then servers="plugq qemu-nbd"; else servers="qemu-nbd plugq"; fi
      for server in $servers; do
        measure "$run" "$server" "$wl" || die "measurement failed"
      done
    done
  done
  summary | tee "$OUT/summary.txt"
  [ "$QUICK" != 1 ] || log "QUICK=1: a check that the bench runs, not figures to keep"
}

main "$@"
