#!/usr/bin/env bats
# plugq-stat: iostat -x columns from plugq's stats file.
#
# The first tests read stats files captured from real plugq runs
# (client-tests/data/capture-stats.sh); each expected number is worked out
# by hand from the counters in that file, shown in the comment above it.
# The last tests run plugq here, drive I/O with nbdsh and read the file it
# writes.

load helpers

DATA="$BATS_TEST_DIRNAME/data"
PLUGQ_STAT="${top_srcdir:-$BATS_TEST_DIRNAME/..}/plugq-stat"

setup() {
  T=$BATS_TEST_TMPDIR
  REMOTE_PID=
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

# col_value NAME WHICH TABLE-TITLE: the value of column NAME on the row named
# WHICH of the table whose header starts with TABLE-TITLE, from $output.
col_value() {
  awk -v col="$1" -v row="$2" -v title="$3" '
    $1 == title { n = 0; for (i = 2; i <= NF; i++) idx[$i] = i; inside = 1; next }
    NF == 0 { inside = 0 }
    inside && $1 == row { print $(idx[col]); exit }' <<<"$output"
}

# json_check FILE PYTHON-EXPR...: each expression must hold for the reports
# in FILE (one JSON object per line, as the list r).
json_check() {
  local file=$1
  shift
  "$PYTHON" - "$file" "$@" <<'EOF'
import json, sys
r = [json.loads(line) for line in open(sys.argv[1])]
def disk(i, name): return next(d for d in r[i]["disks"] if d["name"] == name)
def near(a, b, tol=0.005): return abs(a - b) <= tol * max(1.0, abs(b))
for expr in sys.argv[2:]:
    if not eval(expr):
        sys.exit(f"failed: {expr}")
EOF
}

@test "plugq-stat: one disk since start, iostat columns from a captured run" {
  run "$PLUGQ_STAT" "$DATA/stats-one.json"
  assert_success
  assert_line --partial "uptime 1.03 s  (since start)"
  # uptime 1.027630821 s
  assert_equal "$(col_value r/s one Disk)" 7.78       # 8 backend reads / 1.0276
  assert_equal "$(col_value w/s one Disk)" 5.84       # 6 backend writes / 1.0276
  assert_equal "$(col_value rMB/s one Disk)" 0.03     # 32768 B / 1.0276 / 2^20
  assert_equal "$(col_value wMB/s one Disk)" 0.14     # 147456 B / 1.0276 / 2^20
  assert_equal "$(col_value wrqm/s one Disk)" 29.19   # 30 merges / 1.0276
  assert_equal "$(col_value %wrqm one Disk)" 83.33    # 30 / (30 + 6) * 100
  assert_equal "$(col_value %rrqm one Disk)" 0.00     # reads never merge
  assert_equal "$(col_value w_await one Disk)" 0.20   # 7137 us / (6 + 30) pieces / 1000
  assert_equal "$(col_value r_await one Disk)" 0.01   # 76 us / 8 reads / 1000
  assert_equal "$(col_value aqu-sz one Disk)" 0.01    # 7226 us / 1027630.821 us
  assert_equal "$(col_value rareq-sz one Disk)" 4.00  # 32768 / 8 / 1024
  assert_equal "$(col_value wareq-sz one Disk)" 24.00 # 147456 / 6 / 1024
  assert_equal "$(col_value d/s one Disk)" 0.97       # 1 trim / 1.0276
  assert_equal "$(col_value z/s one Disk)" 0.97       # 1 zero / 1.0276
  assert_equal "$(col_value f/s one Disk)" 1.95       # 2 flushes / 1.0276
  assert_equal "$(col_value f_await one Disk)" 0.75   # 1498 us / 2 / 1000
}

@test "plugq-stat: plugs and unplugs by cause, per second" {
  run "$PLUGQ_STAT" "$DATA/stats-one.json"
  assert_success
  # The second "Disk" table; col_value takes the first, so cut it out.
  output=$(sed -n '/plugs\/s/,$p' <<<"$output")
  assert_equal "$(col_value plugs/s one Disk)" 6.81   # 7 plugs / 1.0276
  assert_equal "$(col_value threshold one Disk)" 1.95 # 2 / 1.0276
  assert_equal "$(col_value sync one Disk)" 3.89      # 4 FUA unplugs / 1.0276
  assert_equal "$(col_value flush one Disk)" 0.97     # 1 / 1.0276
  assert_equal "$(col_value timer one Disk)" 0.00
}

@test "plugq-stat: a volume lists its members and sums their counters" {
  run "$PLUGQ_STAT" "$DATA/stats-vol.json"
  assert_success
  # uptime 1.024107436 s; a: 1 backend write, b: 3
  assert_equal "$(col_value w/s a Disk)" 0.98         # 1 / 1.0241
  assert_equal "$(col_value w/s b Disk)" 2.93         # 3 / 1.0241
  assert_equal "$(col_value w/s vol Volume\*)" 3.91   # (1 + 3) / 1.0241
  assert_equal "$(col_value %wrqm vol Volume\*)" 80.00    # (1 + 15) / (16 + 4) * 100
  assert_equal "$(col_value wareq-sz vol Volume\*)" 20.00 # (8192 + 73728) / 4 / 1024
  assert_equal "$(col_value w_await vol Volume\*)" 0.47   # (2734 + 6747) us / 20 pieces / 1000
  assert_equal "$(col_value rareq-sz vol Volume\*)" 64.00 # one 64 KiB read on a
  assert_line --regexp '^vol +12\.0MiB +a\[0B\+8\.0MiB\] @0B b\[1\.0MiB\+4\.0MiB\] @8\.0MiB$'
}

@test "plugq-stat --json: parses, and carries the same numbers" {
  run "$PLUGQ_STAT" --json "$DATA/stats-one.json"
  assert_success
  echo "$output" >"$T/one.jsonl"
  assert_equal "$(wc -l <"$T/one.jsonl")" 1
  json_check "$T/one.jsonl" \
    'r[0]["since_start"] and near(r[0]["interval_s"], 1.027630821)' \
    'near(disk(0, "one")["columns"]["w/s"], 6 / 1.027630821)' \
    'near(disk(0, "one")["columns"]["%wrqm"], 30 / 36 * 100)' \
    'disk(0, "one")["counts"]["write.merges"] == 30' \
    'near(disk(0, "one")["plugging"]["sync"], 4 / 1.027630821)'
}

@test "plugq-stat FILE INTERVAL 2: the second report is the difference of two snapshots" {
  cp "$DATA/stats-busy-1.json" "$T/s.json"
  "$PLUGQ_STAT" --json "$T/s.json" 2 2 >"$T/out" 2>"$T/err" 3>&- &
  local pid=$! i
  # Once the since-start report is out, put the next snapshot in place the
  # way plugq does (rename), well before the 2 s interval ends.
  for ((i = 0; i < 100; i++)); do [ -s "$T/out" ] && break; sleep 0.05; done
  cp "$DATA/stats-busy-2.json" "$T/s.json.tmp"
  mv "$T/s.json.tmp" "$T/s.json"
  wait "$pid"
  assert_equal "$(wc -l <"$T/out")" 2
  # uptimes 2.000150711 -> 3.000223221: 1.00007251 s
  json_check "$T/out" \
    'r[0]["since_start"] and not r[1]["since_start"]' \
    'near(r[1]["interval_s"], 1.00007251, 1e-6)' \
    'near(disk(1, "busy")["columns"]["w/s"], 46589.62)' \
    'near(disk(1, "busy")["columns"]["r/s"], 21333.45)' \
    'near(disk(1, "busy")["columns"]["wrqm/s"], 1936.86)' \
    'near(disk(1, "busy")["columns"]["%wrqm"], 3.99135)' \
    'near(disk(1, "busy")["columns"]["w_await"], 0.89073)' \
    'near(disk(1, "busy")["columns"]["aqu-sz"], 43.2240)' \
    'near(disk(1, "busy")["columns"]["wareq-sz"], 4.16627)' \
    'near(disk(1, "busy")["columns"]["f_await"], 2.39737)' \
    'near(disk(1, "busy")["plugging"]["plugs/s"], 587.96)'
  # The numbers above, by hand (busy-2 minus busy-1):
  #   w/s      (142902 - 96309) / 1.00007251 = 46593 / 1.0000725
  #   r/s      (64699 - 43364) / 1.0000725 = 21335 / 1.0000725
  #   wrqm/s   (5590 - 3653) / 1.0000725 = 1937 / 1.0000725
  #   %wrqm    1937 / (1937 + 46593) * 100
  #   w_await  (120701281 - 77474130) us / 48530 pieces / 1000
  #   aqu-sz   43227151 us / 1000072.51 us
  #   wareq-sz (608223232 - 409444352) / 46593 / 1024
  #   f_await  (4931447 - 3071091) us / (2361 - 1585) / 1000
  #   plugs/s  (1743 - 1155) / 1.0000725
}

@test "plugq-stat FILE INTERVAL COUNT: text mode prints COUNT reports, flags a file not rewritten" {
  run "$PLUGQ_STAT" "$DATA/stats-one.json" 0.2 2
  assert_success
  assert_equal "$(grep -c '^.*stats-one.json  .*uptime' <<<"$output")" 2
  assert_line --partial "(since start)"
  assert_line --partial "[stats file not rewritten during this interval]"
}

@test "plugq-stat: -y leaves out the since-start report" {
  run "$PLUGQ_STAT" --json -y "$DATA/stats-one.json" 0.1 1
  assert_success
  echo "$output" >"$T/y.jsonl"
  json_check "$T/y.jsonl" 'len(r) == 1 and not r[0]["since_start"]'
}

@test "plugq-stat: usage errors exit 2, unreadable files exit 1" {
  run "$PLUGQ_STAT"
  assert_failure 2
  run "$PLUGQ_STAT" "$DATA/stats-one.json" 0
  assert_failure 2
  run "$PLUGQ_STAT" "$DATA/stats-one.json" 1 x
  assert_failure 2
  run "$PLUGQ_STAT" "$T/missing.json"
  assert_failure 1
  echo '{"disks": []}' >"$T/bad.json"
  run "$PLUGQ_STAT" "$T/bad.json"
  assert_failure 1
  assert_output --partial "not a version 1 plugq stats file"
}

# A live run: 64 adjacent 4 KiB writes held by a long queue, then one FLUSH,
# go out as one 256 KiB backend write with 63 merges.
@test "plugq-stat: a live plugq run, 64 writes merged into one backend write" {
  plugq_setup
  start_plugq "${LONG_QUEUE[@]}" disk=d memory=16M stats="$T/s.json" stats-interval=100ms
  nbdsh_run d 'for i in range(64): h.pwrite(b"\x5a" * 4096, i * 4096)' 'h.flush()'
  stop_plugq
  run "$PLUGQ_STAT" --json "$T/s.json"
  assert_success
  echo "$output" >"$T/live.jsonl"
  json_check "$T/live.jsonl" \
    'disk(0, "d")["counts"]["write.requests"] == 64' \
    'disk(0, "d")["counts"]["write.backend_ops"] == 1' \
    'disk(0, "d")["counts"]["write.merges"] == 63' \
    'near(disk(0, "d")["columns"]["%wrqm"], 63 / 64 * 100)' \
    'near(disk(0, "d")["columns"]["wareq-sz"], 256.0)' \
    'near(disk(0, "d")["columns"]["w/s"], 1 / r[0]["uptime"])' \
    'near(disk(0, "d")["plugging"]["flush"], 1 / r[0]["uptime"])'
  run "$PLUGQ_STAT" "$T/s.json"
  assert_success
  assert_equal "$(col_value %wrqm d Disk)" 98.44
  assert_equal "$(col_value wareq-sz d Disk)" 256.00
}

@test "plugq-stat FILE 0.3 2 on a running server: two reports, the second over the interval" {
  plugq_setup
  start_plugq disk=d memory=16M stats="$T/s.json" stats-interval=100ms
  wait_for_file "$T/s.json"
  nbdsh_run d 'for i in range(32): h.pwrite(b"\x5a" * 4096, i * 8192)' 'h.flush()'
  # The file is rewritten every 100 ms: wait for a snapshot that has them.
  local i
  for ((i = 0; i < 100; i++)); do
    [ "$(stats_value "$T/s.json" d write.requests)" = 32 ] && break
    sleep 0.05
  done
  run "$PLUGQ_STAT" --json "$T/s.json" 0.3 2
  assert_success
  echo "$output" >"$T/two.jsonl"
  json_check "$T/two.jsonl" \
    'len(r) == 2 and r[0]["since_start"] and not r[1]["since_start"]' \
    'r[1]["uptime"] > r[0]["uptime"] and 0.1 < r[1]["interval_s"] < 1.5' \
    'disk(0, "d")["counts"]["write.requests"] == 32' \
    'disk(1, "d")["counts"]["write.requests"] == 0'
}

# A write the backend does not answer for 4 s: a remote NBD disk behind
# nbdkit's delay filter.  Through a queued disk it is a batch in flight,
# through an ack=dispatched one a write around the queue; both show in
# oldest_in_flight_us, the oldest_s column and its Prometheus gauge while
# they wait, and 0 once they are done.
@test "plugq-stat: oldest_s shows the age of a backend write that has not come back" {
  plugq_setup
  "$NBDKIT" -f -U "$T/remote.sock" -P "$T/remote.pid" --filter=delay memory 16M \
    delay-write=4 </dev/null >"$T/remote.log" 2>&1 &
  REMOTE_PID=$!
  wait_for_file "$T/remote.pid"
  remote="nbd+unix:///?socket=$T/remote.sock"
  start_plugq disk=q nbd="$remote" disk=w nbd="$remote" ack=dispatched \
    stats="$T/s.json" stats-interval=100ms
  pyrun "$T/s.json" "$PLUGQ_STAT" <<'EOF'
import json, subprocess, sys
from plugqtest import *
from promcheck import parse, value
stats, plugq_stat = sys.argv[1], sys.argv[2]
q, w = connect("q"), connect("w")
q.pwrite(fill(1, 4096), 0)                   # answered, written out after
cookie = w.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(4096)), 8192)
def both_old():
    doc = load_stats(stats)
    return all(stat(doc, d, "oldest_in_flight_us") >= 1500000 for d in ("q", "w"))
poll(both_old, 3.5, "operations 1.5 s old in the stats of both disks")
report = json.loads(subprocess.check_output([plugq_stat, "--json", stats]))
for d in report["disks"]:
    assert 1.5 <= d["columns"]["oldest_s"] < 4.5, d
text = subprocess.check_output([plugq_stat, stats], text=True)
assert "oldest_s" in text.splitlines()[2], text
prom = parse(subprocess.check_output([plugq_stat, "--prometheus", stats], text=True))
for d in ("q", "w"):
    assert value(prom, "plugq_oldest_in_flight_seconds", disk=d) >= 1.5
while not w.aio_command_completed(cookie):
    w.poll(-1)
EOF
  stop_plugq
  # Nothing in flight in the final snapshot; w's write went around the
  # queue.
  [ "$(stats_value "$T/s.json" q oldest_in_flight_us)" = 0 ]
  [ "$(stats_value "$T/s.json" w oldest_in_flight_us)" = 0 ]
  [ "$(stats_value "$T/s.json" w bypassed_writes)" = 1 ]
}
