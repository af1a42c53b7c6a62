#!/bin/bash
# bench/rbd.sh: plugq's rbd= backend against qemu-nbd's rbd: driver on the
# same image of a throw-away local Ceph cluster (make -C bench rbd).
#
# Two parts (PARTS):
#
# workloads: both servers serve one RBD image with librbd's cache off;
# bench/nbdbench drives each over a unix socket with the same workloads.
# Every measurement starts a fresh server and stops it cleanly (which
# releases the image's lock for the other); the two servers alternate,
# A B A B, and the order flips every run.  Prints, per workload, the
# median IOPS and MiB/s of each server over RUNS runs, their ratio, and
# plugq's backend writes per client write (from its stats: how much
# merging cut the RADOS requests).  On one monitor and one memstore OSD.
#
# fault: an OSD killed under load, on a three-OSD pool (size 3, min_size
# 2).  The same client (client-tests/rbd_outage.py: 4 KiB random writes,
# 8 in flight, a FLUSH after every 32) writes through each server in turn;
# FAULT_PRE seconds in, osd.1 is killed (SIGKILL), FAULT_HOLD seconds
# later restarted, and the client writes FAULT_POST seconds more.  Per
# server, medians over FAULT_RUNS runs (servers alternating as above):
# the writes answered per second before the fault, the longest time
# without an answer from the kill on (the stall), the writes answered
# between the kill and the restart, and the requests that failed.  The
# cluster recovers fully (every PG active+clean) before the next run.
# Writes $OUT/fault.md, the table for docs/benchmarks-waiting-rbd.md.
#
# Environment (all optional):
#   RUNTIME=10  seconds per measurement     RUNS=3  runs per server and workload
#   QUICK=1     RUNTIME=1 RUNS=1, and a short fault run: proves the script
#               works, no figures to keep
#   SIZE=256M   the image                   WORKLOADS="..." a subset, by name
#   PARTS="workloads fault"  the parts to run
#   FAULT_RUNS=3 FAULT_PRE=5 FAULT_HOLD=15 FAULT_POST=10 (seconds)
#   FAULT_SIZE=256M  the fault run's image
#   PLUGIN=path/to/nbdkit-plugq-plugin.so   OUT=bench/out/rbd  logs and results
#   PLUGQ_ARGS="key=value ..."  extra plugq keys for the disk
#
# The clusters (client-tests/ceph/cluster.sh) live in OUT and are stopped
# by pid on every exit; the fault part's starts once the first is gone.
set -u
BENCH_SRC=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$BENCH_SRC/lib.sh"

QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then
  RUNTIME=${RUNTIME:-1} RUNS=${RUNS:-1}
  FAULT_RUNS=${FAULT_RUNS:-1} FAULT_PRE=${FAULT_PRE:-1}
  FAULT_HOLD=${FAULT_HOLD:-2} FAULT_POST=${FAULT_POST:-1}
  FAULT_SIZE=${FAULT_SIZE:-64M}
fi
RUNTIME=${RUNTIME:-10}
RUNS=${RUNS:-3}
SIZE=${SIZE:-256M}
PARTS=${PARTS:-workloads fault}
FAULT_RUNS=${FAULT_RUNS:-3}
FAULT_PRE=${FAULT_PRE:-5}
FAULT_HOLD=${FAULT_HOLD:-15}
FAULT_POST=${FAULT_POST:-10}
FAULT_SIZE=${FAULT_SIZE:-256M}
OUT=${OUT:-$BENCH_SRC/out/rbd}
PLUGIN=${PLUGIN:-}
NBDBENCH=${NBDBENCH:-$BENCH_SRC/nbdbench}
CLUSTER_SH=$BENCH_SRC/../client-tests/ceph/cluster.sh
WRITER=$BENCH_SRC/../client-tests/rbd_outage.py
# The cluster and image the servers serve: the workloads part's, then the
# fault part's.
CEPH_DIR=$OUT/ceph
CONF=$CEPH_DIR/ceph.conf
IMAGE=rbd/bench
SOCK=$OUT/sock
RESULTS=$OUT/results.txt
FAULT_RESULTS=$OUT/fault.txt

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

# start_cluster DIR [cluster.sh options]: a cluster in DIR, made current.
start_cluster() {
  local dir=$1
  shift
  CEPH_DIR=$dir
  CONF=$CEPH_DIR/ceph.conf
  log "starting the cluster in $CEPH_DIR $*"
  "$CLUSTER_SH" start "$CEPH_DIR" "$@" >>"$OUT/cluster.log" 2>&1 \
    || die "the cluster did not start (see $OUT/cluster.log)"
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

# make_image SIZE: IMAGE on the current cluster, written whole once, so
# reads hit data and no write allocates objects.
make_image() {
  timeout 60 rbd --conf "$CONF" create --size "$1" "$IMAGE" \
    || die "cannot create $IMAGE"
  log "filling $IMAGE ($1)"
  timeout 600 rbd --conf "$CONF" bench --io-type write --io-size 4M \
    --io-pattern seq --io-total "$1" "$IMAGE" >>"$OUT/cluster.log" 2>&1 \
    || die "cannot fill $IMAGE"
}

# The workloads part, on one OSD.
workloads_part() {
  local run wl server servers
  [ -x "$NBDBENCH" ] || die "$NBDBENCH is not built (make -C bench nbdbench)"
  CEPH_MEMSTORE_BYTES=$((3 * $(size_bytes "$SIZE"))) start_cluster "$OUT/ceph"
  IMAGE=rbd/bench
  make_image "$SIZE"
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
  "$CLUSTER_SH" stop "$CEPH_DIR"
}

# fault_measure RUN SERVER: one fresh server, the writer through an OSD's
# death and return, one line in FAULT_RESULTS.
fault_measure() {
  local run=$1 server=$2 state kv
  state=$OUT/raw/fault-$server-r$run.json
  log "fault run $run: $server, osd.1 killed after ${FAULT_PRE} s for ${FAULT_HOLD} s"
  start_server "$server" || return 1
  if ! PLUGQ_SOCK=$SOCK "$PY" "$WRITER" write --export d --state "$state" \
       --blocks $(($(size_bytes "$FAULT_SIZE") / 4096)) --depth 8 --flush-every 32 \
       --warmup "$FAULT_PRE" --hold "$FAULT_HOLD" --after "$FAULT_POST" \
       --fault "$CLUSTER_SH kill $CEPH_DIR osd.1" \
       --recover "$CLUSTER_SH restart $CEPH_DIR osd.1" \
       --expect-failures >"$state.out" 2>"$state.log"; then
    log "the writer failed (see $state.log)"
    stop_server
    return 1
  fi
  stop_server
  "$CLUSTER_SH" wait-clean "$CEPH_DIR" >>"$OUT/cluster.log" 2>&1 \
    || die "the cluster did not recover after the run (see $OUT/cluster.log)"
  kv=$("$PY" - "$state" "$FAULT_PRE" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print("before_wps=%.0f stall_s=%.2f during=%d failed=%d" % (
    r["warmup_acked"] / float(sys.argv[2]), r["longest_gap"] or 0,
    r["hold_acked"], len(r["failures"])))
EOF
  )
  echo "server=$server run=$run $kv" | tee -a "$FAULT_RESULTS" >&2
}

fault_summary() {
  $PY - "$FAULT_RESULTS" "$FAULT_HOLD" "$(build_id)" <<'EOF'
import statistics, sys
rows = [dict(kv.split("=", 1) for kv in line.split()) for line in open(sys.argv[1])]
hold = sys.argv[2]
runs = len(rows) // 2 or 1
print("Build %s; osd.1 of 3 killed for %s s under 4 KiB random writes, 8 in flight, "
      "a FLUSH every 32; medians of %d run%s per server.\n"
      % (sys.argv[3], hold, runs, "" if runs == 1 else "s"))
print("| server | writes/s before | stall (s) | writes during the fault | failed requests |")
print("|---|---:|---:|---:|---:|")
for server in ("plugq", "qemu-nbd"):
    got = [r for r in rows if r["server"] == server]
    if not got:
        continue
    med = lambda k: statistics.median(float(r[k]) for r in got)
    print("| %s | %.0f | %.2f | %.0f | %d |" % (server, med("before_wps"), med("stall_s"),
          med("during"), sum(int(r["failed"]) for r in got)))
EOF
}

# The fault part, on three OSDs.
fault_part() {
  local run server servers
  CEPH_MEMSTORE_BYTES=$((3 * $(size_bytes "$FAULT_SIZE"))) \
    start_cluster "$OUT/ceph3" --osds 3
  IMAGE=rbd/fault
  make_image "$FAULT_SIZE"
  : >"$FAULT_RESULTS"
  for ((run = 1; run <= FAULT_RUNS; run++)); do
    if ((run % 2)); then servers="plugq qemu-nbd"; else servers="qemu-nbd plugq"; fi
    for server in $servers; do
      fault_measure "$run" "$server" || die "fault measurement failed"
    done
  done
  fault_summary | tee "$OUT/fault.md"
  "$CLUSTER_SH" stop "$CEPH_DIR"
}

main() {
  local part
  command -v qemu-nbd >/dev/null || die "qemu-nbd is not installed (apt-get install qemu-utils)"
  qemu-img --help | grep -qw rbd \
    || die "qemu has no rbd driver (apt-get install qemu-block-extra)"
  [ -f "$PLUGIN" ] || die "PLUGIN='$PLUGIN' is not the built plugin"
  "$CLUSTER_SH" available >&2 || exit 1
  rm -rf "$OUT"
  mkdir -p "$OUT/raw"
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  for part in $PARTS; do
    case $part in
    workloads) workloads_part ;;
    fault) fault_part ;;
    *) die "unknown part $part (workloads, fault)" ;;
    esac
  done
  [ "$QUICK" != 1 ] || log "QUICK=1: a check that the bench runs, not figures to keep"
}

main "$@"
