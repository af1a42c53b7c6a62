#!/bin/bash
# bench/soak.sh: several minutes of mixed, verified I/O against plugq, with
# the server's memory and every error count reported.  Not a timed test:
# it prints a report and exits non-zero if anything went wrong (a fio
# error or verify failure, a latched write-back error, a connection that
# could not be made, or the server dying).
#
#   PLUGIN=/path/to/.libs/nbdkit-plugq-plugin.so bench/soak.sh
#
# Environment:
#   SOAK_SECONDS  run time (default 180)
#   SOAK_DIR      where the backing files go (default a new dir in /var/tmp;
#                 a real file system, not tmpfs)
#   SOAK_SIZE     size of the file disk; the volume's members are half
#                 of it each (default 512M)
#   SOAK_JOBS     fio jobs per export (default 4), each on its own region
#   PLUGQ_ARGS    extra plugq keys (e.g. "ack=dispatched unplug-delay=1ms")
#   KEEP=1        keep the backing files and logs
#
# What runs, all at once, against one plugq server:
#   - export f   (disk on a file):  fio randwrite 4k-64k + verify=crc32c
#                with verify_backlog (written blocks are read back and
#                checked while the run goes on), FLUSH every 32 writes
#                (fsync=32), plus a randread job;
#   - export vol (linear volume a,b over two files): the same, so fio
#                regions straddle the member boundary;
#   - a python libnbd client doing FUA writes + FLUSH + read-back checks
#     on a reserved region of f, and connection churn (open/close);
#   - a sampler: server VmRSS every second, stats= JSON every second.

set -u
BENCH_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench/lib.sh
. "$BENCH_SRC/lib.sh"

SOAK_SECONDS=${SOAK_SECONDS:-180}
SOAK_SIZE=${SOAK_SIZE:-512M}
SOAK_JOBS=${SOAK_JOBS:-4}
PLUGIN=${PLUGIN:-$BENCH_SRC/../.libs/nbdkit-plugq-plugin.so}
NBDKIT=${NBDKIT:-nbdkit}
[ -f "$PLUGIN" ] || die "PLUGIN=$PLUGIN is not the built plugin"
command -v fio >/dev/null || die "fio is not installed"
fio --enghelp 2>/dev/null | grep -qw nbd || die "fio has no nbd engine"

size=$(size_bytes "$SOAK_SIZE")
half=$((size / 2))
# The last 16 MiB of f belong to the python client, the rest to fio.
pyregion=$((16 << 20))
fio_f=$((size - pyregion))
region_f=$(((fio_f / SOAK_JOBS) & ~0xfffff))
region_v=$(((size / SOAK_JOBS) & ~0xfffff))

DIR=${SOAK_DIR:-$(mktemp -d /var/tmp/plugq-soak.XXXXXX)}
mkdir -p "$DIR"
SOCK=$DIR/plugq.sock
PIDF=$DIR/plugq.pid
STATS=$DIR/stats.json
SRV_PID=
SAMPLER=
PIDS=()

cleanup() {
  local p
  for p in "${PIDS[@]}" $SAMPLER; do kill "$p" 2>/dev/null; done
  if [ -n "$SRV_PID" ] && kill -0 "$SRV_PID" 2>/dev/null; then
    kill -TERM "$SRV_PID"
    for _ in $(seq 200); do kill -0 "$SRV_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$SRV_PID" 2>/dev/null
  fi
  if [ "${KEEP:-0}" != 1 ]; then
    rm -f "$DIR"/*.img
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for f in f a b; do rm -f "$DIR/$f.img"; done
truncate -s "$size" "$DIR/f.img"
truncate -s "$half" "$DIR/a.img"
truncate -s "$half" "$DIR/b.img"

log "soak: ${SOAK_SECONDS}s, f=$SOAK_SIZE, vol=a+b ($((half >> 20))M each), $SOAK_JOBS fio jobs/export, dir $DIR"
rm -f "$SOCK" "$PIDF"
# shellcheck disable=SC2086
"$NBDKIT" -f -U "$SOCK" -P "$PIDF" "$PLUGIN" ${PLUGQ_ARGS:-} \
  stats="$STATS" stats-interval=1s \
  disk=f file="$DIR/f.img" disk=a file="$DIR/a.img" disk=b file="$DIR/b.img" \
  linear=vol:a,b </dev/null >"$DIR/nbdkit.log" 2>&1 &
SRV_PID=$!
for _ in $(seq 400); do
  [ -s "$PIDF" ] && [ -S "$SOCK" ] && break
  kill -0 "$SRV_PID" 2>/dev/null || { cat "$DIR/nbdkit.log" >&2; die "nbdkit exited at startup"; }
  sleep 0.05
done
[ -S "$SOCK" ] || die "nbdkit did not listen within 20 s"

# Server memory, one sample a second: "seconds VmRSS_KiB".
(
  t0=$SECONDS
  while kill -0 "$SRV_PID" 2>/dev/null; do
    echo "$((SECONDS - t0)) $(awk '/^VmRSS:/ {print $2}' /proc/"$SRV_PID"/status 2>/dev/null)"
    sleep 1
  done
) >"$DIR/rss.txt" &
SAMPLER=$!

# fio_export NAME REGION: writes $DIR/fio-NAME.json
fio_export() {
  local name=$1 region=$2
  # In $DIR: fio leaves files behind in its working directory otherwise.
  cd "$DIR" || return 1
  fio --output-format=json --output="$DIR/fio-$name.json" \
    --ioengine=nbd --uri="nbd+unix:///$name?socket=$SOCK" \
    --time_based --runtime="$SOAK_SECONDS" --randrepeat=0 \
    --name=verify-$name --rw=randwrite --bsrange=4k-64k --bs_unaligned=0 \
    --blockalign=4k --iodepth=16 --numjobs="$SOAK_JOBS" \
    --size="$region" --offset_increment="$region" \
    --verify=crc32c --verify_backlog=64 --verify_fatal=1 --do_verify=1 \
    --verify_state_save=0 \
    --fsync=32 \
    --name=read-$name --rw=randread --bs=4k --iodepth=8 --numjobs=1 \
    --size="$((region * SOAK_JOBS))" --offset=0 --offset_increment=0 \
    --verify=0 --fsync=0 \
    >"$DIR/fio-$name.out" 2>&1
}

fio_export f "$region_f" &
PIDS+=($!)
fio_export vol "$region_v" &
PIDS+=($!)

# FUA + FLUSH + read-back checks on f's last 16 MiB, and connection churn.
$PY - "$SOCK" "$DIR/f.img" "$fio_f" "$pyregion" "$SOAK_SECONDS" \
  >"$DIR/py.out" 2>&1 <<'EOF' &
import os, random, sys, time
import nbd
sock, path, base, span, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
rng = random.Random(1)
def conn():
    h = nbd.NBD(); h.set_export_name("f"); h.connect_unix(sock); return h
h = conn()
want = {}
stats = dict(fua=0, flush=0, checks=0, bad=0, churn=0, errors=0)
t_end = time.monotonic() + secs
n = 0
while time.monotonic() < t_end:
    try:
        blk = rng.randrange(span // 4096)
        data = rng.randbytes(4096)
        off = base + blk * 4096
        fua = rng.randrange(4) == 0
        h.pwrite(data, off, nbd.CMD_FLAG_FUA if fua else 0)
        want[off] = data
        stats["fua"] += fua
        if fua:
            # A FUA write's data is in the file when it is answered.
            with open(path, "rb") as f:
                f.seek(off)
                if f.read(4096) != data:
                    stats["bad"] += 1
                    print("FUA write at %d not in the file after its answer" % off, flush=True)
            stats["checks"] += 1
        n += 1
        if n % 64 == 0:
            h.flush()
            stats["flush"] += 1
            with open(path, "rb") as f:
                for o, d in rng.sample(sorted(want.items()), min(32, len(want))):
                    f.seek(o)
                    if f.read(4096) != d:
                        stats["bad"] += 1
                        print("write at %d not in the file after FLUSH" % o, flush=True)
                    stats["checks"] += 1
        if n % 256 == 0:
            c = conn(); c.pread(4096, base); c.shutdown(); stats["churn"] += 1
            o = rng.choice(list(want))
            if h.pread(4096, o) != want[o]:
                stats["bad"] += 1
                print("read back of %d differs" % o, flush=True)
    except nbd.Error as e:
        stats["errors"] += 1
        print("nbd error: %s" % e, flush=True)
        if stats["errors"] > 10:
            break
        time.sleep(0.1)
print("pyclient " + " ".join("%s=%d" % kv for kv in stats.items()), flush=True)
sys.exit(1 if stats["bad"] or stats["errors"] else 0)
EOF
PIDS+=($!)

rc=0
wait "${PIDS[0]}" || rc=1
wait "${PIDS[1]}" || rc=1
wait "${PIDS[2]}" || rc=1
PIDS=()
alive=yes
kill -0 "$SRV_PID" 2>/dev/null || { alive=no; rc=1; }
sleep 1.2   # one more stats snapshot (stats-interval=1s) before the report
cp "$STATS" "$DIR/stats-end.json" 2>/dev/null

$PY - "$DIR" "$SOAK_SECONDS" "$alive" <<'EOF' || rc=1
import json, os, sys
d, secs, alive = sys.argv[1], float(sys.argv[2]), sys.argv[3]
bad = alive != "yes"
print("== plugq soak: %.0f s, server alive at the end: %s" % (secs, alive))
for name in ("f", "vol"):
    p = os.path.join(d, "fio-%s.json" % name)
    try:
        txt = open(p).read()
        j = json.loads(txt[txt.index("{"):])
    except (OSError, ValueError) as e:
        print("export %-4s fio: no JSON (%s); see fio-%s.out" % (name, e, name))
        bad = True
        continue
    jobs = j["jobs"]
    vj = [job for job in jobs if job["jobname"].startswith("verify-")]
    rj = [job for job in jobs if job["jobname"].startswith("read-")]
    errs = sum(job.get("error", 0) for job in jobs)
    w_bw = sum(job["write"]["bw_bytes"] for job in vj) / 2**20
    w_iops = sum(job["write"]["iops"] for job in vj)
    w_gb = sum(job["write"]["io_bytes"] for job in vj) / 2**30
    v_n = sum(job["read"]["total_ios"] for job in vj)
    r_bw = sum(job["read"]["bw_bytes"] for job in rj) / 2**20
    r_iops = sum(job["read"]["iops"] for job in rj)
    syncs = sum(job.get("sync", {}).get("total_ios", 0) for job in vj)
    p99 = max(job["write"]["clat_ns"].get("percentile", {}).get("99.000000", 0) for job in vj) / 1000
    print("export %-4s fio: %d verify jobs + %d read job, errors %d; write %.1f MiB/s (%.0f IOPS, "
          "%.2f GiB), %d verify reads (crc32c), FLUSHes %d, write p99 %.0f us; "
          "randread 4k %.1f MiB/s (%.0f IOPS)"
          % (name, len(vj), len(rj), errs, w_bw, w_iops, w_gb, v_n, syncs, p99, r_bw, r_iops))
    bad |= errs != 0
rss = []
for line in open(os.path.join(d, "rss.txt")):
    parts = line.split()
    if len(parts) == 2:
        rss.append((int(parts[0]), int(parts[1])))
if rss:
    vals = [v for _, v in rss]
    q = len(vals) // 4 or 1
    print("server VmRSS: min %d KiB, max %d KiB, first %d, last %d, mean of last quarter %d (%d samples)"
          % (min(vals), max(vals), vals[0], vals[-1], sum(vals[-q:]) // q, len(vals)))
    step = max(1, len(rss) // 12)
    print("  over time (s:MiB): " + " ".join("%d:%.0f" % (t, v / 1024) for t, v in rss[::step]))
try:
    st = json.load(open(os.path.join(d, "stats-end.json")))
    for disk in st["disks"]:
        print("disk %-2s stats: latched_errors %d, write requests %d (errors %d), flush requests %d, "
              "backend flushes %d, full_waits %d, queued_bytes now %d"
              % (disk["name"], disk["latched_errors"], disk["write"]["requests"],
                 disk["write"].get("errors", 0), disk["flush"]["requests"],
                 disk["flush"]["backend_flushes"], disk["full_waits"], disk["queued_bytes"]))
        bad |= disk["latched_errors"] != 0 or disk["write"].get("errors", 0) != 0
except (OSError, ValueError, KeyError) as e:
    print("no stats: %s" % e)
    bad = True
py = open(os.path.join(d, "py.out")).read().strip().splitlines()
print(py[-1] if py else "pyclient: no output")
if any(l.startswith(("FUA write", "write at", "read back", "nbd error")) for l in py):
    bad = True
    print("\n".join(l for l in py if not l.startswith("pyclient"))[:2000])
print("result: %s" % ("FAIL" if bad else "ok"))
sys.exit(1 if bad else 0)
EOF
grep -i "error" "$DIR/nbdkit.log" | head -5
log "logs and JSON in $DIR"
exit $rc
