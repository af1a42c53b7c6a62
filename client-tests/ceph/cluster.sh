#!/usr/bin/env bash
# A throw-away single-node Ceph cluster for plugq's RBD tests and bench.
#
#   cluster.sh start DIR [OWNER]
#                            one monitor and one memstore OSD, no mgr,
#                            cephx on, 127.0.0.1 only; pool "rbd" ready.
#                            With OWNER (a pid) a watchdog stops the
#                            cluster once OWNER is gone, even if it
#                            crashed before its own cleanup ran
#   cluster.sh stop DIR      kills both daemons by the pids in DIR
#   cluster.sh kill-osd DIR  kills the OSD alone (fault tests)
#   cluster.sh available     exit 0 if ceph is installed, else print why
#
# Everything lives in DIR: ceph.conf (point CEPH_CONF at it), the keyring
# with client.admin's key, the daemons' data, logs, pid files and admin
# sockets.  start waits on the daemons' own answers (mon stat, osd dump),
# never for a fixed time, and gives up after CEPH_START_TIMEOUT seconds
# (default 60); on any failure it stops what it started and shows the
# logs.  stop is safe to call twice or after a failed start.
set -euo pipefail

PROGS=(ceph-mon ceph-osd ceph rbd ceph-authtool monmaptool)

usage() {
  echo "usage: $0 start DIR [OWNER-PID] | stop DIR | kill-osd DIR | available" >&2
  exit 2
}

available() {
  local p
  for p in "${PROGS[@]}"; do
    if ! command -v "$p" >/dev/null 2>&1; then
      echo "ceph is not installed ($p not found: apt-get install" \
        "--no-install-recommends ceph-mon ceph-osd ceph-common)"
      return 1
    fi
  done
}

# A free TCP port on 127.0.0.1, as the kernel picks it.
free_port() {
  /usr/bin/python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

# Every ceph call is bounded: some commands wait forever for a mgr.
ceph_cmd() {
  timeout 20 ceph --conf "$DIR/ceph.conf" "$@"
}

write_conf() {
  local port=$1 fsid=$2
  cat >"$DIR/ceph.conf" <<EOF
[global]
fsid = $fsid
mon host = [v2:127.0.0.1:$port]
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind msgr1 = false
ms bind ipv6 = false
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
auth allow insecure global id reclaim = false
keyring = $DIR/keyring
run dir = $DIR
pid file = $DIR/\$name.pid
admin socket = $DIR/\$name.asok
log file = $DIR/\$name.log
mon data = $DIR/mon.\$id
osd data = $DIR/osd.\$id
osd objectstore = memstore
memstore device bytes = ${CEPH_MEMSTORE_BYTES:-2147483648}
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
osd min pg log entries = 100
osd max pg log entries = 500
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon data avail warn = 1
mon mgr mkfs grace = 100000000
paxos propose interval = 0.1
osd heartbeat grace = 5
EOF
}

make_keyring() {
  local k=$DIR/keyring
  ceph-authtool --create-keyring "$k" --gen-key -n mon. --cap mon 'allow *' \
    >/dev/null
  ceph-authtool "$k" --gen-key -n client.admin --cap mon 'allow *' \
    --cap osd 'allow *' --cap mds 'allow *' --cap mgr 'allow *' >/dev/null
  ceph-authtool "$k" --gen-key -n osd.0 --cap mon 'allow profile osd' \
    --cap osd 'allow *' --cap mgr 'allow profile osd' >/dev/null
}

# Polls cmd (a bounded ceph call) until it prints a line matching re.
wait_for() {
  local re=$1 deadline=$(($(date +%s) + ${CEPH_START_TIMEOUT:-60}))
  shift
  until "$@" 2>/dev/null | grep -q -- "$re"; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "cluster.sh: timed out waiting for '$re' from: $*" >&2
      return 1
    fi
    sleep 0.1
  done
}

start() {
  local port fsid uuid
  mkdir -p "$DIR"
  port=$(free_port)
  fsid=$(cat /proc/sys/kernel/random/uuid)
  uuid=$(cat /proc/sys/kernel/random/uuid)
  write_conf "$port" "$fsid"
  make_keyring
  monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$port]" \
    "$DIR/monmap" >/dev/null
  mkdir -p "$DIR/mon.a" "$DIR/osd.0"
  ceph-mon --conf "$DIR/ceph.conf" --mkfs -i a --monmap "$DIR/monmap" \
    --keyring "$DIR/keyring"
  ceph-mon --conf "$DIR/ceph.conf" -i a 2>>"$DIR/mon.a.stderr"
  wait_for 'quorum' ceph_cmd mon stat
  ceph_cmd osd new "$uuid" 0 >/dev/null
  ceph-osd --conf "$DIR/ceph.conf" -i 0 --mkfs --osd-uuid "$uuid" \
    >/dev/null 2>&1
  ceph-osd --conf "$DIR/ceph.conf" -i 0 2>>"$DIR/osd.0.stderr"
  ceph_cmd osd pool create rbd 8 8 >/dev/null 2>&1
  wait_for '^osd.0 up' ceph_cmd osd dump
  timeout 30 rbd --conf "$DIR/ceph.conf" pool init rbd
}

# Kills the daemon whose pid file is DIR/NAME.pid, and waits until it
# is gone (SIGKILL: the cluster is thrown away).
kill_daemon() {
  local pidfile=$DIR/$1.pid pid i
  [ -s "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  rm -f "$pidfile"
  kill -KILL "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 200; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.05
  done
  echo "cluster.sh: $1 (pid $pid) did not exit" >&2
  return 1
}

stop() {
  local rc=0
  # The OSD first: without its monitor it would wait to report.
  kill_daemon osd.0 || rc=1
  kill_daemon mon.a || rc=1
  return $rc
}

# Stops the cluster once process $1 has exited (checked every second).
watch_owner() {
  local owner=$1
  (
    while kill -0 "$owner" 2>/dev/null; do sleep 1; done
    stop
  ) </dev/null >/dev/null 2>&1 3>&- &
  disown
}

show_logs() {
  local f
  for f in "$DIR"/*.log; do
    [ -f "$f" ] || continue
    echo "--- $f (last lines)" >&2
    tail -n 20 "$f" >&2
  done
}

[ $# -ge 1 ] || usage
case $1 in
available)
  available
  ;;
start)
  [ $# -eq 2 ] || [ $# -eq 3 ] || usage
  DIR=$(realpath -m "$2")
  available >&2 || exit 1
  if ! (start); then
    echo "cluster.sh: the cluster did not start" >&2
    show_logs
    stop || true
    exit 1
  fi
  [ $# -eq 2 ] || watch_owner "$3"
  ;;
stop)
  [ $# -eq 2 ] || usage
  DIR=$(realpath -m "$2")
  stop
  ;;
kill-osd)
  [ $# -eq 2 ] || usage
  DIR=$(realpath -m "$2")
  kill_daemon osd.0
  ;;
*)
  usage
  ;;
esac
