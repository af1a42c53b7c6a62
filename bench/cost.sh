#!/bin/bash
# bench/cost.sh: what one request costs the server, plugq against the nbdkit
# plugin (or server) it replaces, for the workloads of issue 20.
#
# For each workload the servers run interleaved (A B A B ...), each fresh on
# freshly filled storage, and the report gives per request, for the server
# process only (its threads, not the client, not the kernel's writeback):
#   instructions   valgrind --tool=callgrind, N requests minus 0 requests,
#                  counted from after start and fill (callgrind_control -z)
#   user/sys µs, voluntary/involuntary context switches
#                  wait4() rusage of the server (bench/rusage), N minus 0
#   syscalls       strace -c -f, N minus 0
#   throughput     nbdbench -t RUNTIME, RUNS runs, median (min–max), and the
#                  ratio to the reference paired within each run; the timed
#                  runs' servers also run under bench/rusage, which gives
#                  user+sys and context switches per request over far more
#                  requests than N (the zero-request run subtracted likewise)
# "0 requests" is the same server start, fill, connect, disconnect and stop.
#
# Environment (all optional; QUICK=1 changes the defaults in brackets):
#   N=20000 [4000]      requests per fixed-count run (4 KiB workloads)
#   N_LARGE=2000 [400]  requests per fixed-count run, 1 MiB workloads
#   RUNTIME=10 [3]      seconds per throughput run    RUNS=5 [3]  throughput runs
#   FILE_SIZE=256M [64M]  file disks    ISO_SIZE=64M [16M]  each of W9's 8 files
#   MEM_SIZE=1G          memory disks and the remote's size
#   SPAN=64M             memory workloads fill and use the first SPAN bytes
#   COST_WORKLOADS="W1 W2 W3 W4 W5 W6 W7r W7s W8m W8d W9"   which workloads
#   COST_MEASURES="callgrind rusage strace rate"            which measurements
#   PLUGIN  OUT=bench/out  DOCS=docs  WORK=/var/tmp/plugq-bench
#   CLIENT_TIMEOUT=600   seconds any one client run may take
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
  N=${N:-4000} N_LARGE=${N_LARGE:-400} RUNTIME=${RUNTIME:-3} RUNS=${RUNS:-3}
  FILE_SIZE=${FILE_SIZE:-64M} ISO_SIZE=${ISO_SIZE:-16M}
else
  N=${N:-20000} N_LARGE=${N_LARGE:-2000} RUNTIME=${RUNTIME:-10} RUNS=${RUNS:-5}
  FILE_SIZE=${FILE_SIZE:-256M} ISO_SIZE=${ISO_SIZE:-64M}
fi
# The fill is in both runs of a difference; kept small, its noise in the
# rusage of the zero-request run stays small next to N requests.
MEM_SIZE=${MEM_SIZE:-1G} SPAN=${SPAN:-64M}
OUT=${OUT:-$BENCH_SRC/out}
DOCS=${DOCS:-$BENCH_SRC/../docs}
WORK=${WORK:-/var/tmp/plugq-bench}
SHM=${SHM:-/dev/shm/plugq-bench}
PLUGIN=${PLUGIN:-}
COST_WORKLOADS=${COST_WORKLOADS:-W1 W2 W3 W4 W5 W6 W7r W7s W8m W8d W9}
COST_MEASURES=${COST_MEASURES:-callgrind rusage strace rate}
CLIENT_TIMEOUT=${CLIENT_TIMEOUT:-600}
COST_OUT=$OUT/cost
RUNDIR=$COST_OUT/run
RAW=$COST_OUT/raw
RESULTS=$COST_OUT/results.jsonl
# servers.sh: memory disks, nbdkit memory and the remote are MEM_SIZE; plugq
# writes no stats file (its rewrite is not a cost of serving requests).
SIZE=$MEM_SIZE REMOTE_SIZE=$MEM_SIZE REMOTE_DELAY=1ms PLUGQ_STATS=0
export RUNTIME  # lib.sh's timed_client bounds a client by RUNTIME + 120 s
ISO_DISKS=8 ISO_FLUSH_US=1000

# --- the workloads ------------------------------------------------------------
#
# ID|what|disks|nbdbench arguments|servers (NAME:BACKEND, the reference last
# but for dd, which only has a rate)
WORKLOAD_DEFS=(
  "W1|memory, 4 KiB random writes, QD32|1|-m randwrite -b 4k -q 32|plugq:memory nbdkit-memory:memory"
  "W2|file on the page cache, 4 KiB random writes, QD16|1|-m randwrite -b 4k -q 16|plugq:disk nbdkit-file:disk"
  "W3|W2 + FLUSH every 32 writes|1|-m randwrite -b 4k -q 16 -f 32|plugq:disk nbdkit-file:disk"
  "W4|W2 + FUA on every write|1|-m randwrite -b 4k -q 16 -F|plugq:disk nbdkit-file:disk"
  "W5|file, 4 KiB sequential writes, QD16|1|-m write -b 4k -q 16|plugq:disk plugq:disk-direct nbdkit-file:disk"
  "W6|memory (filled), 4 KiB random reads, QD16|1|-m randread -b 4k -q 16|plugq:memory nbdkit-memory:memory"
  "W7r|remote (nbdkit memory, delay-write=1ms), 4 KiB random writes, QD16|1|-m randwrite -b 4k -q 16|plugq:remote nbdkit-nbd:remote"
  "W7s|remote (nbdkit memory, delay-write=1ms), 4 KiB sequential writes, QD16|1|-m write -b 4k -q 16|plugq:remote nbdkit-nbd:remote"
  "W8m|memory, 1 MiB sequential writes, QD16|1|-m write -b 1m -q 16|plugq:memory nbdkit-memory:memory"
  "W8d|file with O_DIRECT, 1 MiB sequential writes, QD16|1|-m write -b 1m -q 16|plugq:disk-direct qemu-nbd:disk-direct dd:disk-direct"
  "W9|8 file disks, a 4 KiB random writer each (QD4), disk 0 also flushed every ms|8|-m randwrite -b 4k -q 4|plugq:disk nbdkit-file:disk"
)

# wl_field ID FIELD#: one field of a workload's definition.
wl_field() {
  local def
  for def in "${WORKLOAD_DEFS[@]}"; do
    [ "${def%%|*}" = "$1" ] || continue
    cut -d'|' -f"$2" <<<"$def"
    return 0
  done
  return 1
}

# wl_requests ID: N, or N_LARGE for the 1 MiB workloads.
wl_requests() {
  case $(wl_field "$1" 4) in
    *"-b 1m"*) echo "$N_LARGE" ;;
    *) echo "$N" ;;
  esac
}

# --- storage ----------------------------------------------------------------

# prepare BACKEND DISKS: the files recreated and written once with 4 KiB
# writes, then synced and left in the page cache (W2-W5 are "on the page
# cache"; O_DIRECT ignores it).  Nothing to do for memory and remote.
prepare() {
  local backend=$1 disks=$2 size=$FILE_SIZE i
  case $backend in disk|disk-direct) ;; *) return 0 ;; esac
  [ "$disks" -eq 1 ] || size=$ISO_SIZE
  rm -f "$WORK"/disk*.img
  for ((i = 0; i < disks; i++)); do fill_file "$(backing_path disk "$i")" "$size"; done
}

# span_args BACKEND: memory disks are filled over SPAN and used there.
span_args() { [ "$1" != memory ] || echo "-S $SPAN"; }

# fill BACKEND: a memory export written whole over SPAN, 256 KiB at a time
# (a fill in 4 KiB writes would dominate the valgrind runs), so reads hit
# data and the workload overwrites instead of allocating.
fill() {
  [ "$1" = memory ] || return 0
  timeout --kill-after=10 "$CLIENT_TIMEOUT" "$NBDBENCH" -u "${SRV_URIS[0]}" \
    -m write -b 256k -q 16 -S "$SPAN" -n $(($(size_bytes "$SPAN") / 262144)) \
    >/dev/null 2>>"$RUNDIR/fill.log"
}

# --- clients ---------------------------------------------------------------------

CLIENT_PIDS=()

# client PREFIX WL COUNT|-t: the workload's client(s) against SRV_URIS,
# COUNT requests or RUNTIME seconds (-t).  W9_MODE: flush (disk 0's writer
# also flushes every ms), noflush (it does not), alone (no writer on disk 0).
# Output in PREFIX.out (W9: PREFIX.d0.out and PREFIX.rest.out).
client() {
  local prefix=$1 wl=$2 count=$3 args span len rc=0 pid
  local -a limit rest
  args=$(wl_field "$wl" 4)
  span=$(span_args "${SRV_BACKEND}")
  if [ "$wl" != W9 ]; then
    if [ "$count" = -t ]; then limit=(-t "$RUNTIME"); else limit=(-n "$count"); fi
    # shellcheck disable=SC2086 # argument lists by construction
    timeout --kill-after=10 "$CLIENT_TIMEOUT" "$NBDBENCH" -u "${SRV_URIS[0]}" \
      $args $span "${limit[@]}" >"$prefix.out" 2>"$prefix.log" || return 1
    return 0
  fi
  # W9: nbdbench flushes every target alike, so disk 0 (flushed every ms)
  # and the other seven (not flushed) are two processes; a fixed count is
  # shared out one eighth to disk 0.
  rest=()
  for len in "${SRV_URIS[@]:1}"; do rest+=(-u "$len"); done
  local -a lim0 lim7 flush=(-I "$ISO_FLUSH_US")
  [ "${W9_MODE:-flush}" = flush ] || flush=()
  if [ "$count" = -t ]; then
    lim0=(-t "$RUNTIME") lim7=(-t "$RUNTIME")
  else
    lim0=(-n $((count / ISO_DISKS))) lim7=(-n $((count - count / ISO_DISKS)))
  fi
  CLIENT_PIDS=()
  if [ "${W9_MODE:-flush}" != alone ]; then
    # shellcheck disable=SC2086
    timeout --kill-after=10 "$CLIENT_TIMEOUT" "$NBDBENCH" -u "${SRV_URIS[0]}" \
      $args "${flush[@]}" "${lim0[@]}" >"$prefix.d0.out" 2>"$prefix.d0.log" &
    CLIENT_PIDS+=($!)
  fi
  # shellcheck disable=SC2086
  timeout --kill-after=10 "$CLIENT_TIMEOUT" "$NBDBENCH" "${rest[@]}" -s 7 \
    $args "${lim7[@]}" >"$prefix.rest.out" 2>"$prefix.rest.log" &
  CLIENT_PIDS+=($!)
  for pid in "${CLIENT_PIDS[@]}"; do wait "$pid" || rc=1; done
  CLIENT_PIDS=()
  return $rc
}

kill_clients() {
  local pid
  for pid in "${CLIENT_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${CLIENT_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  CLIENT_PIDS=()
}

# --- one server run ----------------------------------------------------------------

SRV_BACKEND=

# serve SERVER BACKEND DISKS: start the server (under SRV_WRAP) on prepared
# storage and fill it.
serve() {
  local server=$1 backend=$2 disks=$3
  prepare "$backend" "$disks" || { log "could not prepare $backend"; return 1; }
  SRV_BACKEND=$backend
  start_server "$server" "$backend" "$disks" || return 1
  fill "$backend" || { log "fill failed (see $RUNDIR/fill.log)"; stop_server; return 1; }
}

# wrap_for TOOL PREFIX: SRV_WRAP for a fixed-count measurement.
wrap_for() {
  local tool=$1 prefix=$2
  SRV_WAIT_TRIES=200
  case $tool in
    callgrind)
      # nbdkit -f and qemu-nbd (no --fork) do not fork: valgrind follows
      # the server itself, every thread, into one output file.
      SRV_WRAP=(valgrind --tool=callgrind --trace-children=no
                --callgrind-out-file="$prefix.cg" --log-file="$prefix.vg.log")
      SRV_WAIT_TRIES=1200 ;;
    rusage) SRV_WRAP=("$BENCH_SRC/rusage" "$prefix.ru") ;;
    strace) SRV_WRAP=(strace -f -c -o "$prefix.st") ;;
    *) return 1 ;;
  esac
}

# figures TOOL PREFIX: the key=value pairs a fixed-count run left.
figures() {
  case $1 in
    callgrind) $PY "$BENCH_SRC/results.py" callgrind "$2.cg" ;;
    rusage) cat "$2.ru" ;;
    strace) $PY "$BENCH_SRC/results.py" strace "$2.st" ;;
  esac
}

# fixed_run TOOL WL SERVER:BACKEND COUNT: one server under TOOL, COUNT
# requests (0: connect and disconnect only), one results line.
fixed_run() {
  local tool=$1 wl=$2 sb=$3 count=$4 server backend disks prefix load0 kv
  server=${sb%%:*} backend=${sb#*:}
  disks=$(wl_field "$wl" 3)
  prefix=$RAW/$tool-$wl-$server-$backend-n$count
  [ "$count" -gt 0 ] || prefix=$RAW/$tool-zero-$server-$backend-x$disks
  log "$tool: $server on $backend, ${wl}, $count requests"
  wrap_for "$tool" "$prefix"
  load0=$(loadavg)
  serve "$server" "$backend" "$disks" || { SRV_WRAP=(); return 1; }
  # Start counting instructions only now: the start (dynamic linking) and
  # the fill, the same in both runs, would otherwise add their own run-to-run
  # variation (plugq's memset over a 64 MiB fill varies by ~2 %) to both.
  if [ "$tool" = callgrind ] && ! callgrind_control -z "$SRV_PID" >>"$prefix.vg.log" 2>&1; then
    log "callgrind_control -z failed (see $prefix.vg.log)"
    stop_server; SRV_WRAP=(); return 1
  fi
  if ! client "$prefix" "$wl" "$count"; then
    log "client failed (see $prefix*.log)"
    kill_clients; stop_server; SRV_WRAP=(); return 1
  fi
  stop_server
  SRV_WRAP=()
  kv=$(figures "$tool" "$prefix") || { log "no $tool figures in $prefix.*"; return 1; }
  # shellcheck disable=SC2086 # key=value pairs
  $PY "$BENCH_SRC/results.py" emit "$RESULTS" kind=fixed tool="$tool" \
    workload="$([ "$count" -gt 0 ] && echo "$wl" || echo zero)" \
    server="$server" backend="$backend" disks="$disks" requests="$count" \
    loadavg_before="$load0" loadavg_after="$(loadavg)" $kv
}

# The zero-request run of a server setup is the same for every workload on
# it (W2-W5 share plugq:disk), so each is run once per tool.
declare -A ZERO_DONE=()

fixed_pair() {
  local tool=$1 wl=$2 sb=$3 key
  key=$tool:$sb:$(wl_field "$wl" 3)
  if [ -z "${ZERO_DONE[$key]:-}" ]; then
    fixed_run "$tool" "$wl" "$sb" 0 && ZERO_DONE[$key]=1 ||
      log "zero-request run failed: $key"
  fi
  fixed_run "$tool" "$wl" "$sb" "$(wl_requests "$wl")" ||
    log "$tool run failed: $wl $sb"
}

# rate_run RUN WL SERVER:BACKEND: one timed run, one results line.
rate_run() {
  local run=$1 wl=$2 sb=$3 server backend disks prefix load0 kv
  server=${sb%%:*} backend=${sb#*:}
  disks=$(wl_field "$wl" 3)
  prefix=$RAW/rate-$wl-$server-$backend-${W9_MODE:-flush}-r$run
  log "rate run $run: $server on $backend, $wl${W9_MODE:+ ($W9_MODE)}"
  load0=$(loadavg)
  if [ "$server" = dd ]; then
    prepare "$backend" 1 && kv=$(dd_rate "$prefix") || { log "dd failed"; return 1; }
  else
    SRV_WRAP=("$BENCH_SRC/rusage" "$prefix.ru")
    serve "$server" "$backend" "$disks" || { SRV_WRAP=(); return 1; }
    if ! client "$prefix" "$wl" -t; then
      log "client failed (see $prefix*.log)"
      kill_clients; stop_server; SRV_WRAP=(); return 1
    fi
    stop_server
    SRV_WRAP=()
    if [ "$wl" = W9 ]; then
      kv="mode=${W9_MODE:-flush} $(w9_rates "$prefix")"
    else
      kv=$($PY "$BENCH_SRC/results.py" nbdbench "$prefix.out" | tr ' ' '\n' |
           grep -E '^(iops|MiBps|lat_us_p50|lat_us_p99|flushes|reqs|secs)=' | tr '\n' ' ')
    fi
    kv="$kv disks=$disks $(cat "$prefix.ru")"
  fi
  # shellcheck disable=SC2086
  $PY "$BENCH_SRC/results.py" emit "$RESULTS" kind=rate workload="$wl" run="$run" \
    server="$server" backend="$backend" runtime="$RUNTIME" \
    loadavg_before="$load0" loadavg_after="$(loadavg)" $kv
}

# w9_rates PREFIX: disk 0's and the other seven's requests/s (disk 0's
# are 0 when it had no writer).
w9_rates() {
  local d0='iops=0 flushes=0 reads=0 writes=0' rest
  if [ "${W9_MODE:-flush}" != alone ]; then
    d0=$($PY "$BENCH_SRC/results.py" nbdbench "$1.d0.out") || return 1
  fi
  rest=$($PY "$BENCH_SRC/results.py" nbdbench "$1.rest.out") || return 1
  awk -v a="$d0" -v b="$rest" 'BEGIN {
    n = split(a, x, " "); for (i = 1; i <= n; i++) { split(x[i], kv, "="); A[kv[1]] = kv[2] }
    n = split(b, y, " "); for (i = 1; i <= n; i++) { split(y[i], kv, "="); B[kv[1]] = kv[2] }
    printf "d0_iops=%s d0_flushes=%s others_iops=%s iops=%d reqs=%d\n", A["iops"], A["flushes"], \
      B["iops"], A["iops"] + B["iops"], A["reads"] + A["writes"] + B["reads"] + B["writes"]
  }'
}

# dd_rate PREFIX: the disk's own rate for 1 MiB O_DIRECT writes, no server:
# dd over the prepared file again and again for RUNTIME seconds.
dd_rate() {
  local prefix=$1 file bytes=0 secs=0 out b s t0
  file=$(backing_path disk 0)
  t0=$SECONDS
  : >"$prefix.log"
  while ((SECONDS - t0 < RUNTIME)); do
    out=$(timeout --kill-after=10 "$CLIENT_TIMEOUT" dd if=/dev/zero of="$file" bs=1M \
            count=$(($(size_bytes "$FILE_SIZE") >> 20)) oflag=direct conv=notrunc 2>&1) ||
      { echo "$out" >>"$prefix.log"; return 1; }
    echo "$out" >>"$prefix.log"
    # "67108864 bytes (67 MB, 64 MiB) copied, 0.21 s, 320 MB/s"
    read -r b s < <(sed -n 's/^\([0-9]*\) bytes.* copied, \([0-9.e-]*\) s,.*/\1 \2/p' <<<"$out")
    bytes=$((bytes + b))
    secs=$(awk -v a="$secs" -v b="$s" 'BEGIN { print a + b }')
  done
  awk -v b="$bytes" -v s="$secs" 'BEGIN {
    printf "iops=%.0f MiBps=%.2f secs=%.3f\n", b / 1048576 / s, b / 1048576 / s, s }'
}

# --- the run ---------------------------------------------------------------------

# ordered RUN ITEM...: as given on odd runs, reversed on even ones.
ordered() {
  local run=$1; shift
  if ((run % 2)); then printf '%s\n' "$@"; else printf '%s\n' "$@" | tac; fi
}

measure_workload() {
  local wl=$1 servers tool sb run mode
  servers=$(wl_field "$wl" 5) || { log "unknown workload $wl"; return 0; }
  # shellcheck disable=SC2086
  $PY "$BENCH_SRC/results.py" emit "$RESULTS" kind=workload workload="$wl" \
    what="$(wl_field "$wl" 2)" servers="$servers" requests="$(wl_requests "$wl")" \
    disks="$(wl_field "$wl" 3)" client="$(wl_field "$wl" 4)"
  for tool in callgrind rusage strace; do
    case " $COST_MEASURES " in *" $tool "*) ;; *) continue ;; esac
    for sb in $servers; do
      [ "${sb%%:*}" != dd ] || continue
      server_supports "${sb%%:*}" "${sb#*:}" || { log "skip $sb: not available"; continue; }
      fixed_pair "$tool" "$wl" "$sb"
    done
  done
  case " $COST_MEASURES " in *" rate "*) ;; *) return 0 ;; esac
  for ((run = 1; run <= RUNS; run++)); do
    # shellcheck disable=SC2086 # a word list
    for sb in $(ordered "$run" $servers); do
      [ "${sb%%:*}" = dd ] || server_supports "${sb%%:*}" "${sb#*:}" || continue
      if [ "$wl" = W9 ]; then
        for mode in alone noflush flush; do
          W9_MODE=$mode rate_run "$run" "$wl" "$sb" || log "rate run failed: $wl $sb $mode"
        done
      else
        rate_run "$run" "$wl" "$sb" || log "rate run failed: $wl $sb"
      fi
    done
  done
}

cleanup() {
  kill_clients
  stop_server
  SRV_WRAP=()
  rm -f "$WORK"/disk*.img
  rmdir "$WORK" "$SHM" 2>/dev/null || true
}

main() {
  local wl t0=$SECONDS
  [ -x "$NBDBENCH" ] && [ -x "$BENCH_SRC/rusage" ] ||
    die "build the tools first: make -C bench"
  need_tools valgrind:valgrind callgrind_control:valgrind strace:strace \
    nbdkit:nbdkit qemu-nbd:qemu-utils
  [ -z "$PLUGIN" ] || [ -f "$PLUGIN" ] || die "PLUGIN=$PLUGIN does not exist"
  [ -n "$PLUGIN" ] || log "no PLUGIN given: measuring the stock servers only"
  [ -z "$PLUGIN" ] || PLUGIN=$(realpath "$PLUGIN")
  mkdir -p "$COST_OUT" "$WORK" "$SHM" "$RUNDIR"
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  [ -f "$RESULTS" ] && mv "$RESULTS" "$RESULTS.prev"
  rm -rf "$RAW"
  mkdir -p "$RAW"
  : >"$RUNDIR/server.log"
  $PY "$BENCH_SRC/results.py" emit "$RESULTS" kind=meta build="$(build_id)" \
    plugin="${PLUGIN:-none}" date="$(date -u '+%Y-%m-%d %H:%M UTC')" \
    loadavg_start="$(loadavg)" quick="$QUICK" N="$N" N_LARGE="$N_LARGE" \
    RUNTIME="$RUNTIME" RUNS="$RUNS" FILE_SIZE="$FILE_SIZE" ISO_SIZE="$ISO_SIZE" \
    MEM_SIZE="$MEM_SIZE" SPAN="$SPAN" \
    machine="$(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | sort -u | head -1), kernel $(uname -r)" \
    versions="nbdkit $(nbdkit --version | cut -d' ' -f2), $(qemu-nbd --version | head -1), $(valgrind --version), strace $(strace -V | head -1 | awk '{print $NF}')"
  for wl in $COST_WORKLOADS; do
    measure_workload "$wl"
  done
  $PY "$BENCH_SRC/results.py" emit "$RESULTS" kind=end loadavg_end="$(loadavg)" \
    duration_s=$((SECONDS - t0))
  $PY "$BENCH_SRC/report.py" cost "$COST_OUT" "$DOCS"
}

main "$@"
