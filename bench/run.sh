#!/bin/bash
# bench/run.sh: run plugq's benchmarks and write the report.
#
# Environment (all optional):
#   RUNTIME=10   seconds per measurement      RUNS=3   repetitions (median, min, max)
#   QUICK=1      only the issue-3 targets, printed as ratios
#   SUITES="matrix isolation scale volflush"  which suites (ignored with QUICK=1)
#   SERVERS=...  BACKENDS=...  WORKLOADS=...  restrict the matrix
#   SIZE=512M    per-export size              PLUGIN=path/to/nbdkit-plugq-plugin.so
#   OUT=bench/out  raw results and logs       DOCS=docs  where the report goes
#   WORK=/var/tmp/plugq-bench  disk backing   PLUGQ_ARGS="key=value ..." extra plugq keys
#
# Every measurement starts a fresh server on freshly filled backing storage,
# and every ratio in the report pairs two measurements of the same run.
set -u
BENCH_SRC=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$BENCH_SRC/lib.sh"
# shellcheck source=servers.sh
. "$BENCH_SRC/servers.sh"
# shellcheck source=workloads.sh
. "$BENCH_SRC/workloads.sh"

RUNTIME=${RUNTIME:-10}
RUNS=${RUNS:-3}
QUICK=${QUICK:-0}
SIZE=${SIZE:-512M}
OUT=${OUT:-$BENCH_SRC/out}
DOCS=${DOCS:-$BENCH_SRC/../docs}
WORK=${WORK:-/var/tmp/plugq-bench}
SHM=${SHM:-/dev/shm/plugq-bench}
RUNDIR=$OUT/run
RESULTS=$OUT/results.jsonl
PLUGIN=${PLUGIN:-}
SUITES=${SUITES:-matrix isolation scale volflush}
ALL_SERVERS="plugq plugq-noop plugq-unplugged plugq-dispatched plugq-noop-dispatched
  plugq-unplugged-dispatched nbdkit-file nbdkit-memory nbdkit-file-cachewb nbd-server qemu-nbd"
SERVERS=${SERVERS:-$ALL_SERVERS}
BACKENDS=${BACKENDS:-disk disk-direct memory}
WORKLOADS=${WORKLOADS:-${WORKLOAD_ORDER[*]}}
ISO_DISKS=8 ISO_SIZE=${ISO_SIZE:-128M} ISO_QD=${ISO_QD:-4} ISO_FLUSH_US=1000
SCALE_COUNTS=${SCALE_COUNTS:-1 2 4 8 16 64} SCALE_SIZE=${SCALE_SIZE:-16M}
ISO_SERVERS=${ISO_SERVERS:-plugq nbdkit-file}
VOL_WRITES=${VOL_WRITES:-16 1024}

# --- one measurement -------------------------------------------------------

# prepare_backing BACKEND N SIZE: recreate, fill with 4 KiB writes, sync,
# drop caches: the same page-cache history before every measurement.
prepare_backing() {
  local backend=$1 n=$2 size=$3 dir i
  if dir=$(backing_dir "$backend"); then
    mkdir -p "$dir"
    rm -f "$dir"/disk*.img
    for ((i = 0; i < n; i++)); do fill_file "$dir/disk$i.img" "$size"; done
  fi
  drop_caches
}

# snapshot_stats DEST: the first plugq stats snapshot taken after now, so
# counters from a fill are not charged to the workload.
snapshot_stats() {
  local dest=$1 since i t
  : >"$dest"
  [ -n "$SRV_STATS" ] || return 0
  since=$(date +%s.%N)
  for ((i = 0; i < 60; i++)); do
    t=$($PY "$BENCH_SRC/results.py" stats-time "$SRV_STATS")
    if awk -v t="$t" -v s="$since" 'BEGIN { exit !(t > s) }'; then
      cp "$SRV_STATS" "$dest"
      return 0
    fi
    sleep 0.05
  done
  log "no fresh stats snapshot in 3 s: counting from server start"
}

# final_stats DEST: after a clean exit the stats file holds the totals.
final_stats() { if [ -n "$SRV_STATS" ]; then cp "$SRV_STATS" "$1" 2>/dev/null || : >"$1"; fi; }

plugq_kv() {
  [ -n "$SRV_STATS" ] || return 0
  $PY "$BENCH_SRC/results.py" plugq "$1.before.json" "$1.after.json"
}

# measure_cell SUITE RUN SERVER BACKEND WORKLOAD: one fresh server, one
# client run, one results line.
measure_cell() {
  local suite=$1 run=$2 server=$3 backend=$4 wl=$5 prefix win rss
  prefix=$OUT/raw/$suite-$server-$backend-$wl-r$run
  mkdir -p "$OUT/raw"
  log "$suite run $run: $server on $backend, $wl"
  prepare_backing "$backend" 1 "$SIZE"
  start_server "$server" "$backend" || return 0
  if [ "$backend" = memory ] && ! fill_exports "${SRV_URIS[@]}"; then
    log "fill failed"; stop_server; return 0
  fi
  snapshot_stats "$prefix.before.json"
  window_begin "$SRV_PID"
  if ! run_client "$wl" "${SRV_URIS[0]}" "$prefix"; then stop_server; return 0; fi
  win=$(window_end "$SRV_PID" "$(client_cpu_s "$prefix")")
  rss=$(tree_rss_kb "$SRV_PID")
  stop_server
  final_stats "$prefix.after.json"
  # shellcheck disable=SC2046 # the pair lists split into words on purpose
  $PY "$BENCH_SRC/results.py" emit "$RESULTS" suite="$suite" run="$run" \
    server="$server" backend="$backend" workload="$wl" runtime="$RUNTIME" \
    $CLIENT_KV $win rss_kb="$rss" $(plugq_kv "$prefix")
}

# --- suites -------------------------------------------------------------------

# The server order flips every run, so a slow drift of the machine does not
# always favour the same server.
ordered() {
  local run=$1; shift
  if ((run % 2)); then printf '%s\n' "$@"; else printf '%s\n' "$@" | tac; fi
}

suite_matrix() {
  local run backend wl server
  for ((run = 1; run <= RUNS; run++)); do
    for backend in $BACKENDS; do
      for wl in $WORKLOADS; do
        for server in $(ordered "$run" $SERVERS); do
          server_supports "$server" "$backend" || continue
          measure_cell matrix "$run" "$server" "$backend" "$wl"
        done
      done
    done
  done
}

# The issue-3 targets: each pair measured back to back in the same run.
QUICK_CELLS=(
  "a plugq disk-direct seqw4k-qd16"
  "a plugq-unplugged disk-direct seqw4k-qd16"
  "a nbdkit-file disk seqw4k-qd16"
  "b plugq memory randw4k-qd32"
  "b nbdkit-memory memory randw4k-qd32"
  "c plugq disk randw4k-qd16-flush32"
  "c nbdkit-file disk randw4k-qd16-flush32"
  "c plugq disk randw4k-qd16-fua"
  "c nbdkit-file disk randw4k-qd16-fua"
  "c nbdkit-null disk randw4k-qd16-flush32"
  "c syncbound disk randw4k-qd16-fua"
)

# measure_syncbound RUN: the FUA stream's bounds with no server at all
# (bench/syncbound fua): 16 threads of write+fdatasync; one thread
# grouping 16 writes per fdatasync; one grouping 8; two grouping 8 each.
# Four results lines, as servers syncbound-concurrent, -grouped,
# -half-grouped and -half-grouped-two.
measure_syncbound() {
  local run=$1 prefix=$OUT/raw/quick-syncbound-r$1 what rate
  log "quick run $run: syncbound fua, 16 threads"
  prepare_backing disk 1 "$SIZE"
  "$BENCH_SRC/syncbound" fua "$WORK" 16 "$RUNTIME" >"$prefix.out" 2>"$prefix.log" ||
    { log "syncbound failed (see $prefix.log)"; return 0; }
  for what in concurrent:concurrent_fdatasync grouped:grouped \
              half-grouped:half_grouped \
              half-grouped-two:half_grouped_two_in_flight; do
    rate=$(sed -n "s/.* ${what#*:}_writes_per_s=\([0-9.]*\).*/\1/p" "$prefix.out")
    [ -n "$rate" ] || { log "syncbound printed no ${what%%:*} rate"; continue; }
    $PY "$BENCH_SRC/results.py" emit "$RESULTS" suite=quick run="$run" \
      server="syncbound-${what%%:*}" backend=disk workload=randw4k-qd16-fua \
      runtime="$RUNTIME" iops="$rate"
  done
}

suite_quick() {
  local run cell server backend wl
  for ((run = 1; run <= RUNS; run++)); do
    # fd 3, so a client that reads stdin cannot eat the list.
    while read -r cell <&3; do
      read -r _ server backend wl <<<"$cell"   # the target letter is for readers
      if [ "$server" = syncbound ]; then measure_syncbound "$run"; continue; fi
      server_supports "$server" "$backend" || { log "skip $cell: no plugin"; continue; }
      measure_cell quick "$run" "$server" "$backend" "$wl"
    done 3< <(ordered "$run" "${QUICK_CELLS[@]}")
  done
}

# start_writers PREFIX FLUSH_URI URI...: one nbdbench per export, in the
# background; the first export's writer also flushes every ISO_FLUSH_US
# when FLUSH_URI is "flush".
start_writers() {
  local prefix=$1 mode=$2 i=0 uri extra
  shift 2
  WRITER_PIDS=()
  for uri in "$@"; do
    extra=()
    [ "$mode" = flush ] && [ $i -eq 0 ] && extra=(-I "$ISO_FLUSH_US")
    timed_client "$prefix.w$i" "$NBDBENCH" -u "$uri" -m randwrite -b 4k \
      -q "$ISO_QD" -t "$RUNTIME" -s $((i + 1)) "${extra[@]}" \
      >"$prefix.w$i.out" 2>"$prefix.w$i.log" &
    WRITER_PIDS+=($!)
    i=$((i + 1))
  done
}

# writer_sums PREFIX N: "first_iops=.. first_flushes=.. others_iops=.."
writer_sums() {
  local prefix=$1 n=$2
  for ((i = 0; i < n; i++)); do
    sed -n 's/.* iops=\([0-9]*\) .* flushes=\([0-9]*\) .*/\1 \2/p' "$prefix.w$i.out"
  done | awk 'NR == 1 { f = $1; ff = $2; next } { o += $1; n++ }
    END { printf "first_iops=%d first_flushes=%d others_iops=%d others=%d", f, ff, o, n }'
}

writers_cpu() {
  local prefix=$1 n=$2 i
  for ((i = 0; i < n; i++)); do client_cpu_s "$prefix.w$i"; done |
    awk '{ s += $1 } END { printf "%.3f", s }'
}

# isolation_cell RUN SERVER MODE: 8 disks, a writer each; with MODE=flush
# disk 0 also gets a FLUSH every millisecond.
isolation_cell() {
  local run=$1 server=$2 mode=$3 prefix win sums
  prefix=$OUT/raw/isolation-$server-$mode-r$run
  mkdir -p "$OUT/raw"
  log "isolation run $run: $server, $mode"
  prepare_backing disk "$ISO_DISKS" "$ISO_SIZE"
  start_server "$server" disk "$ISO_DISKS" || return 0
  window_begin "$SRV_PID"
  start_writers "$prefix" "$mode" "${SRV_URIS[@]}"
  wait "${WRITER_PIDS[@]}"
  win=$(window_end "$SRV_PID" "$(writers_cpu "$prefix" "$ISO_DISKS")")
  stop_server
  sums=$(writer_sums "$prefix" "$ISO_DISKS")
  # shellcheck disable=SC2086
  $PY "$BENCH_SRC/results.py" emit "$RESULTS" suite=isolation run="$run" \
    server="$server" backend=disk mode="$mode" runtime="$RUNTIME" $sums $win
}

suite_isolation() {
  local run server
  for ((run = 1; run <= RUNS; run++)); do
    for server in $(ordered "$run" $ISO_SERVERS); do
      server_supports "$server" disk || continue
      isolation_cell "$run" "$server" noflush
      isolation_cell "$run" "$server" flush
    done
  done
}

# scale_cell RUN SERVER N: N disks on /dev/shm, one writer each (all from one
# nbdbench process, so the client's cost does not grow with N processes).
scale_cell() {
  local run=$1 server=$2 n=$3 prefix win rss more u
  prefix=$OUT/raw/scale-$server-$n-r$run
  mkdir -p "$OUT/raw"
  log "scale run $run: $server, $n disks"
  prepare_backing shm "$n" "$SCALE_SIZE"
  SIZE=$SCALE_SIZE start_server "$server" shm "$n" || return 0
  more=()
  for u in "${SRV_URIS[@]:1}"; do more+=(-u "$u"); done
  window_begin "$SRV_PID"
  if ! run_nbdbench "${SRV_URIS[0]}" "$prefix" "${more[@]}" -m randwrite -b 4k -q 4; then
    stop_server; return 0
  fi
  win=$(window_end "$SRV_PID" "$(client_cpu_s "$prefix")")
  rss=$(tree_rss_kb "$SRV_PID")
  stop_server
  # shellcheck disable=SC2086
  $PY "$BENCH_SRC/results.py" emit "$RESULTS" suite=scale run="$run" \
    server="$server" backend=shm disks="$n" runtime="$RUNTIME" \
    $CLIENT_KV $win rss_kb="$rss"
  rm -f "$SHM"/disk*.img
}

suite_scale() {
  local run server n
  for ((run = 1; run <= RUNS; run++)); do
    for n in $SCALE_COUNTS; do
      for server in $(ordered "$run" $ISO_SERVERS); do
        server_supports "$server" shm || continue
        scale_cell "$run" "$server" "$n"
      done
    done
  done
}

# volflush_cell RUN WRITES: 5 repetitions of "each member flushed alone,
# then the volume", WRITES random 4 KiB writes queued per member each time.
volflush_cell() {
  local run=$1 writes=$2 kv log=$OUT/raw/volflush-$2-r$1.log
  if kv=$(timeout $((RUNTIME + 120)) $PY "$BENCH_SRC/volflush.py" \
            "$SRV_SOCK" vol 8 5 "$writes" 2>"$log"); then
    # shellcheck disable=SC2086
    $PY "$BENCH_SRC/results.py" emit "$RESULTS" suite=volflush run="$run" \
      server=plugq backend=disk $kv
  else
    log "volflush failed (see $log)"
  fi
}

# Issue 4: a volume of 8 file members, each holding queued data; the
# volume's flush against the slowest member's own flush.  Two amounts of
# queued data: with little, a flush is mostly fdatasync latency; with a
# lot, the 8 members share one device's bandwidth.
suite_volflush() {
  local run members i writes
  server_supports plugq disk || { log "volflush: no plugin, skipped"; return 0; }
  members=d0
  for ((i = 1; i < 8; i++)); do members+=",d$i"; done
  for ((run = 1; run <= RUNS; run++)); do
    log "volflush run $run"
    prepare_backing disk 8 "$ISO_SIZE"
    # A long timer and a high threshold keep the written data queued until
    # the flush, which is what the flush has to dispatch.
    PLUGQ_ARGS="unplug-delay=10s unplug-thresh=1000000 queue-bytes=1G ${PLUGQ_ARGS:-}" \
      PLUGQ_TAIL="linear=vol:$members" start_server plugq disk 8 || continue
    for writes in $VOL_WRITES; do
      volflush_cell "$run" "$writes"
    done
    stop_server
  done
}

# --- the machine --------------------------------------------------------------

describe_machine() {
  {
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "host: $(hostname)"
    echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | sort | uniq -c | sed 's/^ *//')"
    echo "nproc: $(nproc)"
    echo "memory: $(free -h | awk '/^Mem:/ {print $2 " total, " $7 " available"}')"
    echo "kernel: $(uname -r)"
    echo "disk: $(df -h --output=source,fstype,size "$WORK" | tail -1 | tr -s ' ') $(disk_kind "$WORK")"
    echo "versions: nbdkit $(nbdkit --version | cut -d' ' -f2), $(fio --version)," \
      "libnbd $(nbdsh --version 2>/dev/null | awk 'NR==2 {print $2}'), $(nbd-server -V 2>&1 | head -1)," \
      "$(qemu-nbd --version | head -1)"
    echo "settings: RUNTIME=$RUNTIME s, RUNS=$RUNS, SIZE=$SIZE"
    echo "build: $(build_id)"
    echo "plugin: $(plugin_id)"
  } >"$OUT/machine.txt"
}

# plugin_id: the plugin file measured (build_id names its commit).
plugin_id() {
  [ -f "$PLUGIN" ] || { echo "not built"; return; }
  echo "$PLUGIN, built $(date -r "$PLUGIN" '+%Y-%m-%d %H:%M'), sha256 $(sha256sum "$PLUGIN" | cut -c1-12)"
}

# disk_kind PATH: "(vda, rotational=0, scheduler ...)" for the disk under PATH.
disk_kind() {
  local dev
  dev=$(basename "$(df --output=source "$1" | tail -1)")
  dev=${dev%%[0-9]*}
  [ -d /sys/block/"$dev" ] || return 0
  echo "($dev, rotational=$(cat /sys/block/"$dev"/queue/rotational)," \
       "scheduler $(cat /sys/block/"$dev"/queue/scheduler))"
}

# Remove only what the bench created: the backing files and their folders.
cleanup() {
  stop_server
  rm -f "$WORK"/disk*.img "$SHM"/disk*.img
  rmdir "$WORK" "$SHM" 2>/dev/null
  return 0
}

main() {
  [ -x "$NBDBENCH" ] && [ -x "$BENCH_SRC/syncbound" ] ||
    die "build nbdbench and syncbound first: make -C bench"
  need_tools fio:fio nbdsh:libnbd-bin nbdkit:nbdkit nbd-server:nbd-server \
    qemu-nbd:qemu-utils
  # Only the full report draws plots: find out now, not hours from now.
  [ "$QUICK" = 1 ] || need_tools gnuplot:gnuplot-nox
  [ -z "$PLUGIN" ] || [ -f "$PLUGIN" ] || die "PLUGIN=$PLUGIN does not exist"
  [ -n "$PLUGIN" ] || log "no PLUGIN given: measuring the stock servers only"
  [ -z "$PLUGIN" ] || PLUGIN=$(realpath "$PLUGIN")
  mkdir -p "$OUT" "$WORK" "$SHM"
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  # A results file describes one invocation; keep the previous one aside.
  [ -f "$RESULTS" ] && mv "$RESULTS" "$RESULTS.prev"
  rm -rf "$OUT/raw"
  mkdir -p "$OUT/raw"
  describe_machine
  if [ "$QUICK" = 1 ]; then
    suite_quick
    $PY "$BENCH_SRC/report.py" quick "$OUT"
    return
  fi
  local s
  for s in $SUITES; do "suite_$s"; done
  $PY "$BENCH_SRC/report.py" full "$OUT" "$DOCS"
}

main "$@"
