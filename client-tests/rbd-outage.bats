#!/usr/bin/env bats
# Ceph RBD disks through the outages Ceph itself rides out, on a
# throw-away three-OSD cluster (client-tests/ceph/cluster.sh --osds 3: one
# monitor, three memstore OSDs each in a CRUSH host of its own, pool size
# 3 min_size 2, failure detection shortened to about 6 s) that this file
# starts once in setup_file and stops by pid in teardown_file, even after
# a failure.
#
# Each test runs the writer of rbd_outage.py against an RBD disk: 4 KiB
# random writes, 8 in flight, a FLUSH after every 32, every answer
# recorded.  During the writes it kills, hangs (SIGSTOP) or restarts
# daemons, then undoes that.  With plugq's default (ceph-timeout=0: wait
# for the cluster, as krbd and qemu do) no request may fail; the image
# read back with `rbd export` right after the outage must hold every write
# answered before the latest successful FLUSH (no FLUSH lied); and after a
# clean plugq restart every answered block must read back.  With
# ceph-timeout=5s a hang fails requests after 5 s as it did: FLUSHes fail
# with EIO, and the answered writes are kept and tried again until the
# cluster takes them.
#
# A hang lasts $HANG seconds (35): longer than any timeout plugq sets by
# default (client_mount_timeout, 30 s, applies to connecting only) and
# than the per-request timeout of 30 s plugq had before, under which the
# hang tests failed (EIO answered to FLUSHes, write-back errors latched).
#
# Under the ASan pass (PLUGQ_SANITIZED) only the short kill-and-restart
# test runs: the others, two of them holding the cluster down for over
# half a minute, would double that stage's time.

load helpers

CLUSTER_SH="${top_srcdir:-$BATS_TEST_DIRNAME/..}/client-tests/ceph/cluster.sh"
WRITER="$BATS_TEST_DIRNAME/rbd_outage.py"
HANG=35

setup_file() {
  export CEPH_DIR="$BATS_FILE_TMPDIR/ceph"
  if ! "$NBDKIT" "$PLUGIN" --dump-plugin | grep -qE '^plugq_backends=.*rbd'; then
    export CEPH_MISSING="plugq was built without librbd (apt-get install librbd-dev librados-dev)"
    return 0
  fi
  if ! CEPH_MISSING=$("$CLUSTER_SH" available); then
    export CEPH_MISSING
    return 0
  fi
  export CEPH_MISSING=
  # With our pid: its watchdog stops the cluster if bats is killed.
  "$CLUSTER_SH" start "$CEPH_DIR" $$ --osds 3 >&3 2>&1
}

teardown_file() {
  [ -n "${CEPH_MISSING:-}" ] || "$CLUSTER_SH" stop "$CEPH_DIR"
}

setup() {
  [ -z "${CEPH_MISSING:-}" ] || skip "$CEPH_MISSING"
  plugq_setup
  T=$BATS_TEST_TMPDIR
  CONF=$CEPH_DIR/ceph.conf
  IMG=img$BATS_TEST_NUMBER
  export T
}

# Whatever a failed test left killed or hung comes back, so that the next
# test starts on a whole cluster.
heal_cluster() {
  local d pid rc=0
  for d in mon.a osd.0 osd.1 osd.2; do
    if pid=$("$CLUSTER_SH" pid "$CEPH_DIR" "$d" 2>/dev/null) && kill -0 "$pid" 2>/dev/null; then
      "$CLUSTER_SH" resume "$CEPH_DIR" "$d" || rc=1
    else
      "$CLUSTER_SH" restart "$CEPH_DIR" "$d" || rc=1
    fi
  done
  return $rc
}

teardown() {
  [ -z "${CEPH_MISSING:-}" ] || return 0
  local rc=0
  heal_cluster || rc=1
  plugq_teardown || rc=1
  return $rc
}

skip_if_sanitized_outage() {
  if [ -n "${PLUGQ_SANITIZED:-}" ]; then
    skip "an outage of 5-${HANG} s with plugq restarts: under ASan the kill-and-restart test stands for this file"
  fi
}

rbd_cmd() {
  timeout 60 rbd --conf "$CONF" "$@"
}

# cluster ACTION NAME: the cluster.sh command line the writer runs.
cluster() {
  printf '%q %s %q %s' "$CLUSTER_SH" "$1" "$CEPH_DIR" "$2"
}

# start_disk [PLUGQ-KEYS...]: a new image and plugq serving it as disk d,
# with its stats file every 200 ms.
start_disk() {
  rbd_cmd create --size 64M "rbd/$IMG"
  start_plugq disk=d rbd="rbd/$IMG" ceph-conf="$CONF" \
    stats="$T/stats.json" stats-interval=200ms "$@"
}

# write_through FAULT-ARGS...: the writer against disk d, with the image
# read back for the FLUSH check; its result is in $T/state.json and its
# summary in $output.
write_through() {
  run "$PYTHON" "$WRITER" write --export d --state "$T/state.json" \
    --image-cmd "timeout 60 rbd --conf $(printf %q "$CONF") export --no-progress rbd/$IMG -" \
    --stats "$T/stats.json" --pid "$(plugq_pid)" "$@"
  echo "$output"
  assert_success
}

# rode_out: what every outage under the default must end with: no request
# failed, the disk wrote again after the recovery, and a FLUSH sent
# during the outage was answered and checked against the image.
rode_out() {
  result 'not r["failures"]' 'r["acked_after_recover"] > 0' \
    'r["outage_flush_answered"] is not None' \
    '"at_outage_flush" in r["checks"] and "at_end" in r["checks"]'
}

# result EXPR...: each Python expression holds for the writer's result r.
result() {
  "$PYTHON" - "$T/state.json" "$@" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
hold = [s for s in r["samples"] if r["t_fault"] <= s["t"] <= r["t_recover"]]
for expr in sys.argv[2:]:
    if not eval(expr):
        sys.exit("failed: %s\n(result: %s)" % (expr, json.dumps(
            {k: v for k, v in r.items() if k != "last_acked"})[:3000]))
EOF
}

# restart_and_verify: a clean stop (the drain) and a new plugq on the same
# image: every answered block reads back.
restart_and_verify() {
  stop_plugq
  start_plugq disk=d rbd="rbd/$IMG" ceph-conf="$CONF"
  "$PYTHON" "$WRITER" verify --state "$T/state.json" --export d
}

@test "rbd outage: one OSD killed and restarted: no request fails, nothing answered is lost" {
  start_disk
  write_through --fault "$(cluster kill osd.2)" --hold 5 \
    --recover "$(cluster restart osd.2)"
  rode_out
  restart_and_verify
}

@test "rbd outage: one OSD hung for longer than any plugq timeout, then continued" {
  skip_if_sanitized_outage
  start_disk
  write_through --fault "$(cluster hang osd.1)" --hold "$HANG" \
    --recover "$(cluster resume osd.1)"
  # Ceph marks the OSD down and the pool goes on with two copies: the
  # disk writes on during the hang, then through the OSD's return.
  rode_out
  result 'r["hold_acked"] > 100'
  restart_and_verify
}

@test "rbd outage: two OSDs of three hung: the pool stops, plugq waits in bounds, says so, resumes" {
  skip_if_sanitized_outage
  # A small queue, so that it fills during the stall.
  start_disk queue-bytes=256K
  write_through --fault "$(cluster hang osd.1)" --fault "$(cluster hang osd.2)" \
    --hold "$HANG" --recover "$(cluster resume osd.1)" --recover "$(cluster resume osd.2)"
  rode_out
  result 'r["stall_at_recover"] is not None and r["stall_at_recover"] < 10' \
    'all(s["queued_bytes"] <= s["queue_bytes"] for s in hold)' \
    'max(s["queued_bytes"] for s in hold) > 0' \
    'hold[-1]["full_waits"] > 0' \
    'hold[-1]["oldest_in_flight_us"] >= (r["t_recover"] - r["t_faulted"] - 8) * 1e6'
  # Writers blocked: from 5 s into the stall nothing more was answered,
  # and the server's memory did not grow.
  result 'len({s["acked"] for s in hold if s["t"] >= r["t_faulted"] + 5}) == 1' \
    'max(s["rss_kib"] for s in hold if s["t"] >= r["t_faulted"] + 5) - min(s["rss_kib"] for s in hold if s["t"] >= r["t_faulted"] + 5) < 4096'
  # Once per stall: what it waits for, and when it resumed.
  run grep -c "rbd=rbd/$IMG: waiting for the cluster: [0-9]* writes* in flight" "$PLUGQ_LOG"
  assert_output 1
  run grep -c "rbd=rbd/$IMG: .*resumed after [0-9]* s" "$PLUGQ_LOG"
  assert_output 1
  restart_and_verify
}

@test "rbd outage: the monitor killed and restarted" {
  skip_if_sanitized_outage
  start_disk
  # Without the monitor the image cannot be read: the FLUSH check waits
  # for its return.
  write_through --fault "$(cluster kill mon.a)" --hold 5 \
    --recover "$(cluster restart mon.a)" --check-after-recover
  rode_out
  restart_and_verify
}

@test "rbd outage: ceph-timeout=5s: a hang longer than that fails the FLUSH; the writes are kept and land" {
  skip_if_sanitized_outage
  start_disk ceph-timeout=5s
  run "$PYTHON" "$WRITER" write --export d --state "$T/state.json" \
    --fault "$(cluster hang osd.1)" --fault "$(cluster hang osd.2)" --hold 12 \
    --recover "$(cluster resume osd.1)" --recover "$(cluster resume osd.2)" \
    --expect-failures
  echo "$output"
  assert_success
  result 'any(f["kind"] == "flush" and f["errno"] == "EIO" for f in r["failures"])' \
    'all(f["answered"] >= r["t_fault"] + 4 for f in r["failures"])'
  grep -q "write-back of answered data failed" "$PLUGQ_LOG"
}

@test "rbd outage: SIGTERM while the pool is stopped: the drain waits for the cluster, says so, loses nothing" {
  skip_if_sanitized_outage
  rbd_cmd create --size 64M "rbd/$IMG"
  start_plugq disk=d rbd="rbd/$IMG" ceph-conf="$CONF" "${LONG_QUEUE[@]}"
  pyrun <<'EOF'
from plugqtest import *
h = connect("d")
for i in range(64):                          # answered, still queued
    h.pwrite(pattern(i, 4096), i * 65536)
EOF
  "$CLUSTER_SH" hang "$CEPH_DIR" osd.1
  "$CLUSTER_SH" hang "$CEPH_DIR" osd.2
  pid=$(plugq_pid)
  kill -TERM "$pid"
  pyrun "$PLUGQ_LOG" <<'EOF'
import sys
from plugqtest import poll
poll(lambda: "shutting down: waiting for the cluster" in open(sys.argv[1]).read(),
     20, "the drain's message")
EOF
  # nbdkit cannot act on a second signal while the plugin drains.
  kill -TERM "$pid"
  pyrun "$pid" <<'EOF'
import os, sys, time
end = time.monotonic() + 2
while time.monotonic() < end:
    os.kill(int(sys.argv[1]), 0)             # raises once it is gone
    time.sleep(0.1)
EOF
  "$CLUSTER_SH" resume "$CEPH_DIR" osd.1
  "$CLUSTER_SH" resume "$CEPH_DIR" osd.2
  stop_plugq                                 # already stopping: waits
  grep "resumed after" "$PLUGQ_LOG"
  rbd_cmd export --no-progress "rbd/$IMG" "$T/out.raw"
  pyrun "$T/out.raw" <<'EOF'
import sys
from plugqtest import *
for i in range(64):
    expect_file(sys.argv[1], i * 65536, pattern(i, 4096), "answered write %d" % i)
EOF
}
