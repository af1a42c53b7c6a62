#!/usr/bin/env bash
# bench/reads.sh: reads in the elevator (issue 40, part 5): make -C bench reads.
#
# Every row the issue's targets need, measured in one run, servers
# interleaved (A B A B, the order flipping every run), with the ceilings
# measured in the same run.  fio's nbd engine drives every read workload:
#
#   mixr4k-qd1-w64k-qd16  4 KiB random reads QD1 beside 64 KiB sequential
#                         writes QD16 on the same export, MIX_RUNTIME s: one
#                         fio run of two jobs (group_reporting off), each
#                         its own NBD connection: reads/s, read p50/p99 µs,
#                         write MB/s
#   seqr4k-qd16           4 KiB sequential reads QD16, reads/s
#   randr4k-qd16          4 KiB random reads QD16, reads/s
#   seqr64k-qd16          64 KiB sequential reads QD16, MB/s
#   randr4k-qd1           4 KiB random reads QD1 on an idle disk: reads/s,
#                         p50/p99 µs (the mix's ceiling: plugq's own rate)
#
# on each backend (group), against the servers a user compares plugq with:
#   direct     a FILE_SIZE file on WORK, filled once, the page cache
#              dropped before every run: plugq file= direct=true against
#              qemu-nbd -t -f raw --cache=none --aio=native and nbdkit file
#              cache=none (nbdkit 1.32's file plugin has no O_DIRECT: its
#              cache=none is posix_fadvise(DONTNEED) after each request);
#              ceiling: fio's libaio engine straight on the file, O_DIRECT
#              (64 KiB sequential QD16, 4 KiB random QD16); and for the
#              random reads, bench/nbdkit-bare-direct-plugin.so, an nbdkit
#              plugin that does nothing but O_DIRECT preads (what nbdkit's
#              thread per request allows any plugin on this disk)
#   pagecache  the same file, synced and wholly in the page cache before
#              every run: plugq file= against nbdkit file and qemu-nbd
#              --cache=writeback
#   remote     plugq nbd= in front of nbdkit --filter=delay memory
#              REMOTE_SIZE delay-read=REMOTE_LAT delay-write=REMOTE_LAT
#              (fresh, so unwritten: nbdkit memory reads holes as zeroes),
#              against nbdkit's nbd plugin in front of the same remote;
#              ceiling: fio straight on the remote (64 KiB sequential QD16).
#              nbdkit 1.32's delay filter takes whole seconds or whole
#              milliseconds only: it reads "0.2ms" with sscanf %u as 0 ms,
#              no delay at all (what issue 40's "0.2 ms" rows measured), so
#              the default is the 1 ms remote of part 5, and a fraction is
#              refused
#   rbd        one RBD_SIZE image, filled once, on a throw-away local
#              cluster (client-tests/ceph/cluster.sh, stopped by pid):
#              plugq rbd= against qemu-nbd's rbd: driver (--cache=none,
#              rbd_cache=false; plugq turns librbd's cache off itself);
#              ceiling: rbd bench, 64 KiB sequential reads, 16 threads,
#              librbd's cache off.  Skipped, with the reason, when ceph or
#              qemu's rbd driver is not installed.
#   s16        issue 40 part 4: 4 KiB sequential writes QD16 (nbdbench) on
#              a remote with S16_LAT per write: plugq ack=dispatched against
#              nbdkit nbd; ceiling: nbdbench straight on the remote
#   ceiling    the server's own limit: plugq memory= (filled) and nbdkit
#              null, 4 KiB random reads QD16
#
# With BASE_PLUGIN (an older build of the plugin, e.g. the landed one) the
# idle QD1 reads also run on it, as server plugq-base: the issue's "no
# added latency" target is then measured in the same run.
#
# plugq runs write a stats= file; its read counters (and any counter of
# writes held for reads, whatever the engine names it) go beside the
# figures, only those the stats have.
#
# Writes bench/out/reads/results.jsonl and reads.md (bench/report.py
# reads), and with DOCS (the Makefile's reads target passes it) the build's
# section of DOCS/benchmarks-reads.md; QUICK=1 never writes DOCS.
#
# Knobs (QUICK=1 changes the defaults in brackets):
#   RUNTIME=8 [1]  seconds per run          MIX_RUNTIME=8 [2]  the mix's
#   RUNS=3 [1]     interleaved runs (at least 3 for a median)
#   FILE_SIZE=1G [256M]  RBD_SIZE=1G [256M]  MEM_SIZE=1G [256M]
#   REMOTE_SIZE=2G  REMOTE_LAT=1ms (0ms: no delay)  S16_LAT=1ms
#   READ_GROUPS="direct pagecache remote rbd s16 ceiling"
#   READ_WORKLOADS="mixr4k-qd1-w64k-qd16 seqr4k-qd16 randr4k-qd16 seqr64k-qd16 randr4k-qd1"
#   RBD_SEQ_TODAY=18600  plugq's 4 KiB sequential reads QD16 on rbd before
#                  issue 40 (the rbd target is twice that)
#   BASE_PLUGIN    PLUGIN  OUT=bench/out  DOCS  WORK=/var/tmp/plugq-bench-reads
#   PLUGQ_ARGS="key=value ..."  extra keys for every plugq disk
set -euo pipefail
BENCH_SRC=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$BENCH_SRC/lib.sh"
# shellcheck source=servers.sh
. "$BENCH_SRC/servers.sh"
# shellcheck source=workloads.sh
. "$BENCH_SRC/workloads.sh"

QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then
  RUNTIME=${RUNTIME:-1} MIX_RUNTIME=${MIX_RUNTIME:-2} RUNS=${RUNS:-1}
  FILE_SIZE=${FILE_SIZE:-256M} RBD_SIZE=${RBD_SIZE:-256M} MEM_SIZE=${MEM_SIZE:-256M}
else
  RUNTIME=${RUNTIME:-8} MIX_RUNTIME=${MIX_RUNTIME:-8} RUNS=${RUNS:-3}
  FILE_SIZE=${FILE_SIZE:-1G} RBD_SIZE=${RBD_SIZE:-1G} MEM_SIZE=${MEM_SIZE:-1G}
fi
REMOTE_SIZE=${REMOTE_SIZE:-2G}
REMOTE_LAT=${REMOTE_LAT:-1ms}
S16_LAT=${S16_LAT:-1ms}
READ_GROUPS=${READ_GROUPS:-direct pagecache remote rbd s16 ceiling}
READ_WORKLOADS=${READ_WORKLOADS:-mixr4k-qd1-w64k-qd16 seqr4k-qd16 randr4k-qd16 seqr64k-qd16 randr4k-qd1}
RBD_SEQ_TODAY=${RBD_SEQ_TODAY:-18600}
PLUGIN=${PLUGIN:-}
BASE_PLUGIN=${BASE_PLUGIN:-}
OUT=${OUT:-$BENCH_SRC/out}
DOCS=${DOCS:-}
WORK=${WORK:-/var/tmp/plugq-bench-reads}
SHM=${SHM:-/dev/shm/plugq-bench-reads}
R_OUT=$OUT/reads
RUNDIR=$R_OUT/run
RESULTS=$R_OUT/results.jsonl
CLUSTER_SH=$BENCH_SRC/../client-tests/ceph/cluster.sh
CEPH_DIR=$R_OUT/ceph
# servers.sh: memory disks and nbdkit null are MEM_SIZE; plugq's stats
# file is rewritten once a second (its cost stays small).
SIZE=$MEM_SIZE STATS_INTERVAL=1s
RBD_IMAGE=rbd/reads RBD_CONF=$CEPH_DIR/ceph.conf
RBD_SKIPPED=''
export RUNTIME

# --- what runs where --------------------------------------------------------

declare -A GROUP_BACKEND=([direct]=disk-direct [pagecache]=disk [remote]=remote
                          [rbd]=rbd [s16]=remote [ceiling]=memory)
# Servers, the reference (the ratios' denominator) second; the ceilings
# with no server (fio-direct, remote-alone, rbd-bench) run only the
# workloads group_servers lists for them.
declare -A GROUP_SERVERS=(
  [direct]="plugq qemu-nbd-native nbdkit-file-nocache fio-direct nbdkit-bare-direct"
  [pagecache]="plugq nbdkit-file qemu-nbd"
  [remote]="plugq nbdkit-nbd remote-alone"
  [rbd]="plugq qemu-nbd rbd-bench"
  [s16]="plugq-dispatched nbdkit-nbd remote-alone"
  [ceiling]="plugq nbdkit-null"
)

group_workloads() {
  case $1 in
    s16) echo seqw4k-qd16-nbdbench ;;
    ceiling) echo randr4k-qd16 ;;
    *) echo "$READ_WORKLOADS" ;;
  esac
}

# group_servers GROUP WORKLOAD: who runs this cell, plugq-base added to
# the idle reads when BASE_PLUGIN is set.
group_servers() {
  local s out=()
  for s in ${GROUP_SERVERS[$1]}; do
    case $s:$2 in
      fio-direct:seqr64k-qd16|fio-direct:randr4k-qd16) ;;
      nbdkit-bare-direct:randr4k-qd16|nbdkit-bare-direct:randr4k-qd1) ;;
      nbdkit-bare-direct:*) continue ;;
      remote-alone:seqr64k-qd16|remote-alone:seqw4k-qd16-nbdbench) ;;
      remote-alone:mixr4k-qd1-w64k-qd16) ;;
      rbd-bench:seqr64k-qd16) ;;
      fio-direct:*|remote-alone:*|rbd-bench:*) continue ;;
    esac
    out+=("$s")
  done
  if [ -n "$BASE_PLUGIN" ] && [ "$2" = randr4k-qd1 ]; then out+=(plugq-base); fi
  echo "${out[@]}"
}

# group_env GROUP: the remote's latency for this group's runs.
group_env() {
  case $1 in
    s16) REMOTE_DELAY=$S16_LAT REMOTE_DELAY_READ='' ;;
    *) REMOTE_DELAY=$REMOTE_LAT REMOTE_DELAY_READ=$REMOTE_LAT ;;
  esac
}

# --- storage -----------------------------------------------------------------

FILE=
# prepare_state GROUP: the same starting state for every server of a
# group.  direct: nothing dirty, nothing cached (lib.sh's drop_caches);
# pagecache: nothing dirty, the whole file cached; the rest: nothing dirty.
prepare_state() {
  case $1 in
    direct) drop_caches ;;
    pagecache) sync; dd if="$FILE" of=/dev/null bs=1M status=none ;;
    *) sync ;;
  esac
}

# fill_memory: plugq memory= starts empty; written whole (256 KiB writes),
# reads then hit data.
fill_memory() {
  timeout --kill-after=10 600 "$NBDBENCH" -u "${SRV_URIS[0]}" -m write -b 256k \
    -q 16 -n $(($(size_bytes "$MEM_SIZE") / 262144)) >/dev/null 2>>"$RUNDIR/fill.log"
}

start_cluster() {
  local why
  if ! why=$("$CLUSTER_SH" available 2>&1); then
    if [ "$(id -u)" -eq 0 ]; then
      log "ceph missing ($why): scripts/install-deps.sh"
      "$BENCH_SRC/../scripts/install-deps.sh" >&2 || true
    fi
    why=$("$CLUSTER_SH" available 2>&1) || { RBD_SKIPPED=$why; return 1; }
  fi
  qemu-img --help 2>/dev/null | grep -w rbd >/dev/null || {
    RBD_SKIPPED="qemu has no rbd driver (apt-get install qemu-block-extra)"; return 1; }
  log "starting the cluster in $CEPH_DIR"
  rm -rf "$CEPH_DIR"
  CEPH_MEMSTORE_BYTES=$((3 * $(size_bytes "$RBD_SIZE"))) \
    "$CLUSTER_SH" start "$CEPH_DIR" $$ >>"$R_OUT/cluster.log" 2>&1 ||
    { RBD_SKIPPED="the cluster did not start (see $R_OUT/cluster.log)"; return 1; }
  CLUSTER_UP=1
  timeout 60 rbd --conf "$RBD_CONF" create --size "$RBD_SIZE" "$RBD_IMAGE" \
      >>"$R_OUT/cluster.log" 2>&1 ||
    { RBD_SKIPPED="cannot create $RBD_IMAGE (see $R_OUT/cluster.log)"; return 1; }
  # Written whole once, so reads hit data and no write allocates objects.
  log "filling $RBD_IMAGE ($RBD_SIZE)"
  timeout 600 rbd --conf "$RBD_CONF" bench --io-type write --io-size 4M \
    --io-pattern seq --io-total "$RBD_SIZE" "$RBD_IMAGE" >>"$R_OUT/cluster.log" 2>&1 ||
    { RBD_SKIPPED="cannot fill $RBD_IMAGE (see $R_OUT/cluster.log)"; return 1; }
}

CLUSTER_UP=
stop_cluster() {
  [ -n "$CLUSTER_UP" ] || return 0
  "$CLUSTER_SH" stop "$CEPH_DIR" >>"$R_OUT/cluster.log" 2>&1 || true
  CLUSTER_UP=
}

cleanup() {
  stop_server
  stop_remote
  stop_cluster
  rm -f "$FILE"
  rmdir "$WORK" 2>/dev/null || true
  return 0
}

# --- one measurement ---------------------------------------------------------

# fio_args WORKLOAD: the workload's fio options (WORKLOAD_CMD without "fio").
fio_args() { local tool args; read -r tool args <<<"${WORKLOAD_CMD[$1]}"; echo "$args"; }

emit() { "$PY" "$BENCH_SRC/results.py" emit "$RESULTS" "$@"; }

# measure_alone RUN GROUP CEILING WORKLOAD PREFIX: no server in between.
measure_alone() {
  local run=$1 group=$2 what=$3 wl=$4 prefix=$5 l0 kv=''
  l0=$(loadavg)
  case $what in
    fio-direct)
      # shellcheck disable=SC2046 # one word per fio option
      run_fio_file "$wl" "$FILE" "$prefix" $(fio_args "$wl") || return 1
      kv=$CLIENT_KV ;;
    remote-alone)
      start_remote || return 1
      run_client "$wl" "nbd+unix:///?socket=$REMOTE_SOCK" "$prefix" || { stop_remote; return 1; }
      stop_remote
      kv=$CLIENT_KV ;;
    rbd-bench)
      timeout --kill-after=10 $((RUNTIME + 300)) rbd --conf "$RBD_CONF" bench \
        --io-type read --io-size 64K --io-threads 16 --io-pattern seq \
        --io-total "$RBD_SIZE" --rbd_cache=false "$RBD_IMAGE" \
        >"$prefix.out" 2>"$prefix.log" || return 1
      kv=$("$PY" "$BENCH_SRC/results.py" rbd-bench "$prefix.out" 65536) || return 1 ;;
  esac
  # shellcheck disable=SC2086 # the pair lists split into words on purpose
  emit kind=cell run="$run" group="$group" backend="${GROUP_BACKEND[$group]}" \
    server="$what" workload="$wl" $kv loadavg_before="$l0" loadavg_after="$(loadavg)"
}

# measure RUN GROUP SERVER WORKLOAD: one fresh server (or ceiling), one
# client run, one record in RESULTS.  A failure is logged and skipped.
measure() {
  local run=$1 group=$2 server=$3 wl=$4 backend prefix win stats=''
  backend=${GROUP_BACKEND[$group]}
  prefix=$R_OUT/raw/$group-$server-$wl-r$run
  log "run $run/$RUNS: $group, $wl, $server"
  group_env "$group"
  prepare_state "$group"
  case $server in
    fio-direct|remote-alone|rbd-bench)
      measure_alone "$run" "$group" "$server" "$wl" "$prefix" ||
        log "$server failed (see $prefix.log)"
      return 0 ;;
  esac
  start_server "$server" "$backend" || return 0
  if [ "$backend" = memory ] && [ "${server%%-*}" = plugq ] && ! fill_memory; then
    log "fill failed (see $RUNDIR/fill.log)"; stop_server; return 0
  fi
  # lib.sh's CPU accounting reads /proc of processes that may vanish
  # meanwhile (kthread_snapshot's cat): not an error under set -e.
  window_begin "$SRV_PID" || true
  if ! run_client "$wl" "${SRV_URIS[0]}" "$prefix"; then stop_server; return 0; fi
  win=$(window_end "$SRV_PID" "$(client_cpu_s "$prefix")") || win=""
  stop_server
  # Counters from the server's start: nothing but the fill (writes, on
  # the memory disk) comes before the client.
  if [ -n "$SRV_STATS" ] && [ -s "$SRV_STATS" ]; then
    cp "$SRV_STATS" "$prefix.stats.json"
    stats=$("$PY" "$BENCH_SRC/results.py" plugq-reads /dev/null "$prefix.stats.json")
  fi
  # shellcheck disable=SC2086 # the pair lists split into words on purpose
  emit kind=cell run="$run" group="$group" backend="$backend" server="$server" \
    workload="$wl" $CLIENT_KV $win $stats
}

# ordered RUN WORD...: as given on odd runs, reversed on even ones.
ordered() {
  local run=$1; shift
  if ((run % 2)); then printf '%s\n' "$@"; else printf '%s\n' "$@" | tac; fi
}

# --- the run -----------------------------------------------------------------

describe() {
  emit kind=meta build="$(build_id)" plugin="$PLUGIN" \
    base_build="$(if [ -n "$BASE_PLUGIN" ]; then PLUGIN=$BASE_PLUGIN build_id; else echo -; fi)" \
    base_plugin="${BASE_PLUGIN:--}" date="$(date -u '+%Y-%m-%d %H:%M UTC')" \
    host="$(hostname)" \
    machine="$(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | sort -u | head -1), $(free -h | awk '/^Mem:/ {print $2}') RAM, kernel $(uname -r)" \
    disk="$(df -h --output=source,fstype "$WORK" | tail -1 | tr -s ' ')" \
    versions="nbdkit $(nbdkit --version | cut -d' ' -f2), $(fio --version), $(qemu-nbd --version | head -1)$(command -v ceph >/dev/null && echo ", $(ceph --version | cut -d' ' -f1-3)")" \
    quick="$QUICK" RUNTIME="$RUNTIME" MIX_RUNTIME="$MIX_RUNTIME" RUNS="$RUNS" \
    FILE_SIZE="$FILE_SIZE" RBD_SIZE="$RBD_SIZE" MEM_SIZE="$MEM_SIZE" \
    REMOTE_SIZE="$REMOTE_SIZE" REMOTE_LAT="$REMOTE_LAT" S16_LAT="$S16_LAT" \
    RBD_SEQ_TODAY="$RBD_SEQ_TODAY" groups="$READ_GROUPS" \
    plugq_args="${PLUGQ_ARGS:-}"
}

main() {
  local t0 run group wl server groups=()
  t0=$(date +%s)
  [ -x "$NBDBENCH" ] || die "build nbdbench first (make -C bench)"
  [ -n "$PLUGIN" ] && [ -f "$PLUGIN" ] || die "no plugin: PLUGIN=path/to/nbdkit-plugq-plugin.so"
  PLUGIN=$(realpath "$PLUGIN")
  [ -z "$BASE_PLUGIN" ] || [ -f "$BASE_PLUGIN" ] || die "BASE_PLUGIN=$BASE_PLUGIN does not exist"
  [ -z "$BASE_PLUGIN" ] || BASE_PLUGIN=$(realpath "$BASE_PLUGIN")
  need_tools fio:fio nbdkit:nbdkit qemu-nbd:qemu-utils qemu-img:qemu-utils
  local d
  for d in "$REMOTE_LAT" "$S16_LAT"; do
    [[ $d =~ ^[0-9]+(ms)?$ ]] ||
      die "remote latency '$d': nbdkit's delay filter takes whole seconds or NNms (it reads 0.2ms as 0 ms)"
  done
  rm -rf "$R_OUT"
  mkdir -p "$R_OUT/raw" "$RUNDIR" "$WORK"
  FILE=$(backing_path disk 0)
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  for group in $READ_GROUPS; do
    [ -n "${GROUP_BACKEND[$group]:-}" ] || die "unknown group $group"
    case $group in
      rbd) start_cluster || { stop_cluster; log "rbd rows skipped: $RBD_SKIPPED"; continue; } ;;
    esac
    groups+=("$group")
  done
  case " ${groups[*]} " in
    *" direct "*|*" pagecache "*)
      log "filling $FILE ($FILE_SIZE)"
      fill_file "$FILE" "$FILE_SIZE" ;;
  esac
  describe
  [ -z "$RBD_SKIPPED" ] || emit kind=skip group=rbd reason="$RBD_SKIPPED"
  log "build $(build_id), load $(loadavg)"
  for ((run = 1; run <= RUNS; run++)); do
    emit kind=run run="$run" loadavg_start="$(loadavg)" start="$(date +%T)"
    for group in "${groups[@]}"; do
      for wl in $(group_workloads "$group"); do
        # shellcheck disable=SC2046 # one server per word
        for server in $(ordered "$run" $(group_servers "$group" "$wl")); do
          if [ "$wl" = mixr4k-qd1-w64k-qd16 ]; then
            RUNTIME=$MIX_RUNTIME measure "$run" "$group" "$server" "$wl"
          else
            measure "$run" "$group" "$server" "$wl"
          fi
        done
      done
    done
    emit kind=run_end run="$run" loadavg_end="$(loadavg)" end="$(date +%T)"
  done
  emit kind=end duration_s=$(($(date +%s) - t0)) loadavg_end="$(loadavg)"
  if [ "$QUICK" = 1 ] && [ -n "$DOCS" ]; then
    log "QUICK=1: $DOCS/benchmarks-reads.md left alone (a smoke test is no measurement)"
    DOCS=
  fi
  "$PY" "$BENCH_SRC/report.py" reads "$R_OUT" ${DOCS:+"$DOCS"}
}

main "$@"
