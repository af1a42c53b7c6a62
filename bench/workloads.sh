# bench/workloads.sh: the client side of one measurement (sourced).
#
#   run_client WORKLOAD URI PREFIX -> CLIENT_KV (key=value pairs) or status 1
#   fill_exports URI...            -> writes every block once, 4 KiB at a time
#
# fio (nbd engine) runs the plain workloads.  The flush and FUA workloads use
# nbdbench, because fio's fsync=N is not an exact cadence at depth > 1.
# "fiomix" workloads are one fio run of two jobs (group_reporting off),
# each with its own NBD connection to the same export: the first job's
# reads and the second job's writes are reported apart (results.py fio-mix).
#
#   run_fio_file NAME FILE PREFIX FIO-ARGS... -> CLIENT_KV: fio straight on
#                                     a file (libaio, O_DIRECT), no server

declare -A WORKLOAD_CMD=(
  [seqw4k-qd1]="fio --rw=write --bs=4k --iodepth=1"
  [seqw4k-qd16]="fio --rw=write --bs=4k --iodepth=16"
  [randw4k-qd32]="fio --rw=randwrite --bs=4k --iodepth=32"
  [seqw64k-qd16]="fio --rw=write --bs=64k --iodepth=16"
  [seqw1m-qd16]="fio --rw=write --bs=1m --iodepth=16"
  [randr4k-qd16]="fio --rw=randread --bs=4k --iodepth=16"
  [mix70-4k-qd16]="fio --rw=randrw --rwmixread=70 --unified_rw_reporting=mixed --bs=4k --iodepth=16"
  [randw4k-qd16-flush32]="nbdbench -m randwrite -b 4k -q 16 -f 32"
  [randw4k-qd16-fua]="nbdbench -m randwrite -b 4k -q 16 -F"
  # bench/reads.sh (issue 40)
  [mixr4k-qd1-w64k-qd16]="fiomix --rw=randread --bs=4k --iodepth=1 --name=writes --rw=write --bs=64k --iodepth=16"
  [seqr4k-qd16]="fio --rw=read --bs=4k --iodepth=16"
  [seqr64k-qd16]="fio --rw=read --bs=64k --iodepth=16"
  [randr4k-qd1]="fio --rw=randread --bs=4k --iodepth=1"
  [seqw4k-qd16-nbdbench]="nbdbench -m write -b 4k -q 16"
)
# Report order, and what each one is called in tables.
WORKLOAD_ORDER=(seqw4k-qd1 seqw4k-qd16 randw4k-qd32 seqw64k-qd16 seqw1m-qd16
                randr4k-qd16 mix70-4k-qd16 randw4k-qd16-flush32 randw4k-qd16-fua)

NBDBENCH=${NBDBENCH:-$BENCH_SRC/nbdbench}

run_fio() {
  local name=$1 uri=$2 prefix=$3; shift 3
  timed_client "$prefix" fio --name="$name" --ioengine=nbd --uri="$uri" \
    --time_based --runtime="$RUNTIME" --norandommap --randrepeat=0 \
    --lat_percentiles=1 --output-format=json --output="$prefix.json" "$@" \
    >"$prefix.log" 2>&1 || return 1
  CLIENT_KV=$($PY "$BENCH_SRC/results.py" fio "$prefix.json") || return 1
}

# run_fio_mix NAME URI PREFIX JOB-ARGS...: the options before the first
# --name are global in fio, so every job gets the engine, the URI and the
# run length; JOB-ARGS hold the first job's options, then --name=... and
# the second's.  Each job opens its own connection.
run_fio_mix() {
  local name=$1 uri=$2 prefix=$3; shift 3
  timed_client "$prefix" fio --ioengine=nbd --uri="$uri" \
    --time_based --runtime="$RUNTIME" --norandommap --randrepeat=0 \
    --lat_percentiles=1 --output-format=json --output="$prefix.json" \
    --name="$name" "$@" >"$prefix.log" 2>&1 || return 1
  CLIENT_KV=$($PY "$BENCH_SRC/results.py" fio-mix "$prefix.json") || return 1
}

run_fio_file() {
  local name=$1 file=$2 prefix=$3; shift 3
  timed_client "$prefix" fio --name="$name" --filename="$file" --ioengine=libaio \
    --direct=1 --time_based --runtime="$RUNTIME" --norandommap --randrepeat=0 \
    --lat_percentiles=1 --output-format=json --output="$prefix.json" "$@" \
    >"$prefix.log" 2>&1 || return 1
  CLIENT_KV=$($PY "$BENCH_SRC/results.py" fio "$prefix.json") || return 1
}

run_nbdbench() {
  local uri=$1 prefix=$2; shift 2
  timed_client "$prefix" "$NBDBENCH" -u "$uri" -t "$RUNTIME" "$@" \
    >"$prefix.out" 2>"$prefix.log" || return 1
  CLIENT_KV=$($PY "$BENCH_SRC/results.py" nbdbench "$prefix.out") || return 1
}

run_client() {
  local wl=$1 uri=$2 prefix=$3 tool args
  read -r tool args <<<"${WORKLOAD_CMD[$wl]:?unknown workload $wl}"
  CLIENT_KV=
  # shellcheck disable=SC2086 # args is a word list by construction
  case $tool in
    fio) run_fio "$wl" "$uri" "$prefix" $args ;;
    fiomix) run_fio_mix "$wl" "$uri" "$prefix" $args ;;
    nbdbench) run_nbdbench "$uri" "$prefix" $args ;;
  esac || { log "client $wl failed (see $prefix.log)"; return 1; }
  CLIENT_KV="$CLIENT_KV client_cpu_s=$(client_cpu_s "$prefix")"
}

# fill_exports URI...: a memory export starts empty, so write it whole
# (4 KiB writes, one barrier flush at the end) before measuring: reads then
# hit data, and nbdkit memory's first-touch cost is out of the window.
fill_exports() {
  local uri blocks
  blocks=$(( $(size_bytes "$SIZE") / 4096 ))
  for uri in "$@"; do
    "$NBDBENCH" -u "$uri" -m write -b 4k -q 16 -n "$blocks" -f "$blocks" -B \
      >/dev/null || return 1
  done
}
