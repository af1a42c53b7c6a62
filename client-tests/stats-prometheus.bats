#!/usr/bin/env bats
# stats-format=prometheus and plugq-stat --prometheus: the counters of the
# stats file in the Prometheus text format (docs/stats-format.md).
#
# Every exposition is read by a real parser (promcheck.py: Debian's
# python3-prometheus-client, plus the format rules that parser lets
# through), and by promtool when it is installed.  Values are checked
# against the JSON document: by hand for a captured snapshot, and between
# two runs of the same deterministic workload, one writing each format.

load helpers

DATA="$BATS_TEST_DIRNAME/data"
PLUGQ_STAT="${top_srcdir:-$BATS_TEST_DIRNAME/..}/plugq-stat"

setup() {
  T=$BATS_TEST_TMPDIR
  REMOTE_PID=
  "$PYTHON" -c 'import prometheus_client.parser' 2>/dev/null \
    || fail "python3-prometheus-client is missing (scripts/install-deps.sh installs it)"
}

teardown() {
  local rc=0
  plugq_teardown || rc=1
  if [ -n "$REMOTE_PID" ]; then
    kill -TERM "$REMOTE_PID" 2>/dev/null || true
    wait "$REMOTE_PID" 2>/dev/null || true
  fi
  return $rc
}

# promtool_check FILE: promtool's own lint where promtool is installed.
promtool_check() {
  command -v promtool >/dev/null || return 0
  promtool check metrics <"$1"
}

# run_workload FORMAT: the same requests against two disks and a volume,
# with a queue that only a FLUSH unplugs, so every counter but the times
# is the same from run to run.  The final snapshot is in $T/stats.FORMAT.
run_workload() {
  cat >"$T/workload.py" <<'EOF'
import sys
import nbd
h = nbd.NBD()
h.set_export_name("v")
h.connect_unix(sys.argv[1])
for i in range(16):
    h.pwrite(b"x" * 4096, i * 4096)
h.zero(8192, 1 << 20)
h.trim(4096, 2 << 20)
h.pwrite(b"y" * 512, (64 << 20) + 512, nbd.CMD_FLAG_FUA)
h.flush()
h.pread(512, 0)
h.pread(4096, 64 << 20)
EOF
  run_nbdkit "$PLUGIN" "${LONG_QUEUE[@]}" \
    disk=a memory=64M disk=b memory=1M linear=v:a,b \
    stats="$T/stats.$1" stats-format="$1" \
    --run "$PYTHON $T/workload.py \"\$unixsocket\""
}

@test "stats-format=prometheus: a real parser reads it and it holds the JSON counters" {
  run_workload json
  run_workload prometheus
  run find "$T" -name '.stats.prometheus.*'
  assert_output ""    # no temporary file of the atomic rename was left
  promtool_check "$T/stats.prometheus"
  "$PLUGQ_STAT" --prometheus "$T/stats.json" >"$T/converted.prom"

  pyrun "$T/stats.prometheus" "$T/converted.prom" "$T/stats.json" <<'EOF'
import json, sys
from promcheck import parse, value
prom = parse(open(sys.argv[1]).read())
conv = parse(open(sys.argv[2]).read())
snap = json.load(open(sys.argv[3]))
a = next(d for d in snap["disks"] if d["name"] == "a")

# By hand: 16 writes of 4 KiB merged into one backend write by the flush.
assert value(prom, "plugq_requests_total", disk="a", op="write") == 16
assert value(prom, "plugq_request_bytes_total", disk="a", op="write") == 65536
assert value(prom, "plugq_merges_total", disk="a", op="write") == 15
assert value(prom, "plugq_backend_operations_total", disk="a", op="write") == 1
assert value(prom, "plugq_requests_total", disk="b", op="write") == 1   # the FUA write
assert value(prom, "plugq_fua_requests_total", disk="b") == 1
assert value(prom, "plugq_unplugs_total", disk="a", cause="flush") == 1
assert value(prom, "plugq_unplugs_total", disk="b", cause="sync") == 1
assert value(prom, "plugq_disk_size_bytes", disk="a") == 64 << 20
assert value(prom, "plugq_volume_size_bytes", volume="v") == 65 << 20
assert value(prom, "plugq_unplug_delay_seconds", disk="a") == 20.0
assert value(prom, "plugq_disk_info", disk="a", backend=a["backend"],
             elevator="deadline", ack="queued") == 1

# The same as the JSON run, counter for counter.
for key in ("requests", "bytes", "merges", "backend_ops", "backend_bytes", "errors"):
    name = {"bytes": "plugq_request_bytes_total",
            "backend_ops": "plugq_backend_operations_total"}.get(key, f"plugq_{key}_total")
    for op in ("read", "write", "zero", "trim"):
        assert value(prom, name, disk="a", op=op) == a[op][key], (name, op)
assert value(prom, "plugq_dispatch_time_seconds_count", disk="a") == a["dispatch_time_us"]["count"]
assert value(prom, "plugq_backend_flushes_total", disk="a") == a["flush"]["backend_flushes"]

# plugq-stat --prometheus and the plugin write the same families, labels
# and (apart from measured times) values.
assert prom.keys() == conv.keys(), prom.keys() ^ conv.keys()
timed = ("plugq_uptime_seconds", "plugq_io_time_seconds_total", "plugq_time_in_queue_seconds_total",
         "plugq_queue_time_seconds", "plugq_dispatch_time_seconds", "plugq_flush_time_seconds",
         "plugq_read_time_seconds")
differ = [k for k in prom if prom[k] != conv[k] and not k[0].startswith(timed)]
assert not differ, differ
print(len(prom), "samples")
EOF
}

@test "plugq-stat --prometheus: a captured snapshot, value by value" {
  run "$PLUGQ_STAT" --prometheus "$DATA/stats-one.json"
  assert_success
  printf '%s\n' "$output" >"$T/one.prom"
  promtool_check "$T/one.prom"
  pyrun "$T/one.prom" <<'EOF'
import sys
from promcheck import parse, value
p = parse(open(sys.argv[1]).read())
d = dict(disk="one")
# write: requests 36, bytes 147456, merges 30, backend_ops 6, ticks_us 7137
assert value(p, "plugq_requests_total", op="write", **d) == 36
assert value(p, "plugq_request_bytes_total", op="write", **d) == 147456
assert value(p, "plugq_merges_total", op="write", **d) == 30
assert value(p, "plugq_backend_operations_total", op="write", **d) == 6
assert value(p, "plugq_io_time_seconds_total", op="write", **d) == 0.007137
# flush: requests 2, backend_flushes 7; unplugs threshold 2, sync 4, flush 1
assert value(p, "plugq_flush_requests_total", **d) == 2
assert value(p, "plugq_backend_flushes_total", **d) == 7
assert value(p, "plugq_unplugs_total", cause="threshold", **d) == 2
assert value(p, "plugq_unplugs_total", cause="sync", **d) == 4
assert value(p, "plugq_unplugs_total", cause="timer", **d) == 0
# dispatch_time_us: count 8, total 97, buckets [0,1,0,1,4,1,1,0...]:
# cumulative 0 (<1us), 1 (<2), 1 (<4), 2 (<8), 6 (<16), 7 (<32), 8 (<64)
for le, n in (("0.000001", 0), ("0.000002", 1), ("0.000004", 1), ("0.000008", 2),
              ("0.000016", 6), ("0.000032", 7), ("0.000064", 8), ("+Inf", 8)):
    assert value(p, "plugq_dispatch_time_seconds_bucket", le=le, **d) == n, le
assert value(p, "plugq_dispatch_time_seconds_sum", **d) == 0.000097
assert value(p, "plugq_dispatch_time_seconds_count", **d) == 8
# config: unplug_delay_us 3000, write_expire_us 5000000
assert value(p, "plugq_unplug_delay_seconds", **d) == 0.003
assert value(p, "plugq_write_expire_seconds", **d) == 5.0
EOF
}

@test "plugq-stat --prometheus: names with quotes and backslashes are escaped" {
  "$PYTHON" - "$DATA/stats-one.json" "$T/odd.json" <<'EOF'
import json, sys
snap = json.load(open(sys.argv[1]))
snap["disks"][0]["backend"] = 'file /srv/a "b"\\c\nd'
json.dump(snap, open(sys.argv[2], "w"))
EOF
  "$PLUGQ_STAT" --prometheus "$T/odd.json" >"$T/odd.prom"
  pyrun "$T/odd.prom" <<'EOF'
import sys
from promcheck import parse
p = parse(open(sys.argv[1]).read())
backends = [dict(l)["backend"] for (n, l) in p if n == "plugq_disk_info"]
assert backends == ['file /srv/a "b"\\c\nd'], backends
EOF
}

@test "stats-format: anything but json or prometheus is refused" {
  skip_if_sanitized
  run run_nbdkit "$PLUGIN" stats="$T/s" stats-format=xml --run true
  assert_failure
  assert_output --partial "stats-format=xml: expected json or prometheus"
}

@test "stats-format=prometheus: a backend path with quotes and backslashes is escaped" {
  local odd="$T/a \"quoted\" back\\slash.img"
  make_file "$odd" $((1 * MiB))
  run_nbdkit "$PLUGIN" disk=odd file="$odd" stats="$T/odd.prom" \
    stats-format=prometheus --run true
  pyrun "$T/odd.prom" "$odd" <<'EOF'
import sys
from promcheck import parse
p = parse(open(sys.argv[1]).read())
backends = [dict(l)["backend"] for (n, l) in p if n == "plugq_disk_info"]
assert backends == [f"file {sys.argv[2]}"], (backends, sys.argv[2])
EOF
}

# A remote that takes 4 s to answer a write (nbdkit's delay filter): while
# the disk waits, the exposition's gauge shows the write's age.
@test "stats-format=prometheus: plugq_oldest_in_flight_seconds grows while the backend holds a write" {
  plugq_setup
  "$NBDKIT" -f -U "$T/remote.sock" -P "$T/remote.pid" --filter=delay memory 16M \
    delay-write=4 </dev/null >"$T/remote.log" 2>&1 &
  REMOTE_PID=$!
  wait_for_file "$T/remote.pid"
  start_plugq disk=q nbd="nbd+unix:///?socket=$T/remote.sock" \
    stats="$T/s.prom" stats-format=prometheus stats-interval=100ms
  pyrun "$T/s.prom" <<'EOF'
import sys
from plugqtest import *
from promcheck import parse, value
h = connect("q")
h.pwrite(fill(1, 4096), 0)                   # answered, written out after
def old():
    return value(parse(open(sys.argv[1]).read()),
                 "plugq_oldest_in_flight_seconds", disk="q") >= 1.5
poll(old, 3.5, "a write 1.5 s old in the exposition")
EOF
  stop_plugq
  pyrun "$T/s.prom" <<'EOF'
import sys
from promcheck import parse, value
assert value(parse(open(sys.argv[1]).read()), "plugq_oldest_in_flight_seconds", disk="q") == 0
EOF
}
