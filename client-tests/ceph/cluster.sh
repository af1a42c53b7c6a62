#!/usr/bin/env bash
# A throw-away single-node Ceph cluster for plugq's RBD tests and bench.
#
#   cluster.sh start DIR [OWNER] [--osds N]
#                            one monitor and N memstore OSDs (default 1),
#                            no mgr, cephx on, 127.0.0.1 only; pool "rbd"
#                            ready.  One OSD: pool size 1.  Three or more:
#                            pool size 3, min_size 2, each OSD in a CRUSH
#                            host bucket of its own, and failure detection
#                            shortened (see write_conf).  With OWNER (a
#                            pid) a watchdog stops the cluster once OWNER
#                            is gone, even if it crashed before its own
#                            cleanup ran
#   cluster.sh stop DIR      kills every daemon by the pids in DIR
#   cluster.sh kill DIR NAME     SIGKILL to NAME (osd.1, mon.a); waits
#                                until it is gone
#   cluster.sh hang DIR NAME     SIGSTOP: NAME stays alive but answers
#                                nothing (a hung disk, a frozen host)
#   cluster.sh resume DIR NAME   SIGCONT after hang
#   cluster.sh restart DIR NAME  starts a killed NAME again and waits until
#                                the cluster has it back (an OSD "up" in the
#                                OSD map, the monitor in quorum)
#   cluster.sh pid DIR NAME      prints NAME's pid
#   cluster.sh wait-clean DIR    waits until every PG of pool "rbd" is
#                                active+clean (recovery done)
#   cluster.sh kill-osd DIR  kills osd.0 (kill DIR osd.0)
#   cluster.sh available     exit 0 if ceph is installed, else print why
#
# Everything lives in DIR: ceph.conf (point CEPH_CONF at it), the keyring
# with client.admin's key, the daemons' data, logs, pid files and admin
# sockets.  start and restart wait on the daemons' own answers (mon stat,
# osd dump), never for a fixed time, and give up after CEPH_START_TIMEOUT
# seconds (default 60); on a failed start it stops what it started and
# shows the logs.  stop is safe to call twice, after a failed start, and
# with daemons hung (SIGKILL ends a stopped process too).
#
# A memstore OSD keeps its objects in memory: killed, it loses them, and
# restarted it comes back with the empty store mkfs left, so the cluster
# recovers its copies from the other OSDs (three-OSD form only).
set -euo pipefail

PROGS=(ceph-mon ceph-osd ceph rbd ceph-authtool monmaptool)

usage() {
  cat >&2 <<EOF
usage: $0 start DIR [OWNER-PID] [--osds N] | stop DIR
       | kill|hang|resume|restart|pid DIR osd.N|mon.a | wait-clean DIR
       | kill-osd DIR | available
EOF
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

# The pool's replication: one OSD holds the only copy; with three or
# more, three copies of which two must be up for I/O (Ceph's defaults).
pool_conf() {
  if [ "$OSDS" -eq 1 ]; then
    cat <<EOF
osd pool default size = 1
osd pool default min size = 1
osd crush chooseleaf type = 0
mon allow pool size one = true
mon warn on pool no redundancy = false
EOF
  else
    # Each OSD in a host bucket of its own: with all of them under this
    # machine's one host, mon_osd_reporter_subtree_level=host counts the
    # survivors as a single reporter, fewer than mon_osd_min_down_reporters
    # (2), and a hung OSD is never marked down.  Copies go to distinct
    # hosts (chooseleaf type 1), as on a real cluster.
    #
    # Failure detection, shortened for test time: peers ping every second
    # (osd_heartbeat_interval, 6 s by default) and report an OSD silent
    # for 5 s (osd_heartbeat_grace above, 20 s by default), so a hung OSD
    # is marked down after about 6 s instead of 25-35 s.  The monitor does not lengthen
    # the grace for an OSD that flapped before
    # (mon_osd_adjust_heartbeat_grace, on by default), so every test of
    # a file sees the same detection time.  What the tests show does not
    # depend on these: a client that waits rides out detection whatever it
    # takes.  mon_osd_report_timeout stays 900 s: two OSDs of three hung
    # are never marked down (one survivor is one reporter), so the pool
    # stops (min_size) until they resume.
    cat <<EOF
osd pool default size = 3
osd pool default min size = 2
osd crush chooseleaf type = 1
osd heartbeat interval = 1
mon osd adjust heartbeat grace = false
[osd]
crush location = root=default host=plugq-osd-\$id
EOF
  fi
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
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd min pg log entries = 100
osd max pg log entries = 500
mon allow pool delete = true
mon data avail warn = 1
mon mgr mkfs grace = 100000000
paxos propose interval = 0.1
osd heartbeat grace = 5
EOF
  # Sections after [global]: pool_conf may open [osd].  Clients (plugq,
  # the rbd and ceph tools, several at once) get no admin socket: one
  # path for all of them only made each warn that it exists.
  pool_conf >>"$DIR/ceph.conf"
  printf '[client]\nadmin socket =\n' >>"$DIR/ceph.conf"
}

make_keyring() {
  local k=$DIR/keyring i
  ceph-authtool --create-keyring "$k" --gen-key -n mon. --cap mon 'allow *' \
    >/dev/null
  ceph-authtool "$k" --gen-key -n client.admin --cap mon 'allow *' \
    --cap osd 'allow *' --cap mds 'allow *' --cap mgr 'allow *' >/dev/null
  for ((i = 0; i < OSDS; i++)); do
    ceph-authtool "$k" --gen-key -n "osd.$i" --cap mon 'allow profile osd' \
      --cap osd 'allow *' --cap mgr 'allow profile osd' >/dev/null
  done
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

start_mon() {
  ceph-mon --conf "$DIR/ceph.conf" -i a 2>>"$DIR/mon.a.stderr"
  wait_for 'quorum' ceph_cmd mon stat
}

start_osd() {
  ceph-osd --conf "$DIR/ceph.conf" -i "$1" 2>>"$DIR/osd.$1.stderr"
}

# Until osd.$1 is up in the OSD map.
wait_osd_up() {
  wait_for "^osd.$1 up" ceph_cmd osd dump
}

start() {
  local port fsid uuid i
  mkdir -p "$DIR"
  port=$(free_port)
  fsid=$(cat /proc/sys/kernel/random/uuid)
  write_conf "$port" "$fsid"
  make_keyring
  monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$port]" \
    "$DIR/monmap" >/dev/null
  mkdir -p "$DIR/mon.a"
  ceph-mon --conf "$DIR/ceph.conf" --mkfs -i a --monmap "$DIR/monmap" \
    --keyring "$DIR/keyring"
  start_mon
  for ((i = 0; i < OSDS; i++)); do
    uuid=$(cat /proc/sys/kernel/random/uuid)
    mkdir -p "$DIR/osd.$i"
    ceph_cmd osd new "$uuid" "$i" >/dev/null
    ceph-osd --conf "$DIR/ceph.conf" -i "$i" --mkfs --osd-uuid "$uuid" \
      >/dev/null 2>&1
    start_osd "$i"
  done
  ceph_cmd osd pool create rbd 8 8 >/dev/null 2>&1
  for ((i = 0; i < OSDS; i++)); do
    wait_osd_up "$i"
  done
  # Writes its first object: returns once the pool's PGs serve I/O.
  timeout 30 rbd --conf "$DIR/ceph.conf" pool init rbd
}

# Until every PG of pool rbd is active+clean, each asked of its primary
# OSD (ceph pg stat would wait forever for a mgr).
wait_clean() {
  local pool pgs i deadline=$(($(date +%s) + ${CEPH_START_TIMEOUT:-60}))
  read -r pool pgs < <(ceph_cmd osd pool ls detail |
    sed -n "s/^pool \([0-9]*\) 'rbd' .* pg_num \([0-9]*\) .*/\1 \2/p")
  [ -n "$pgs" ] || { echo "cluster.sh: no pool rbd" >&2; return 1; }
  for ((i = 0; i < pgs; i++)); do
    until ceph_cmd pg "$pool.$(printf %x "$i")" query 2>/dev/null |
        grep -q '"state": "active+clean"'; do
      if [ "$(date +%s)" -ge "$deadline" ]; then
        echo "cluster.sh: PG $pool.$(printf %x "$i") not active+clean" >&2
        return 1
      fi
      sleep 0.2
    done
  done
}

# The daemons this cluster has, by their pid files.
daemons() {
  local f
  for f in "$DIR"/osd.*.pid "$DIR"/mon.*.pid; do
    [ -e "$f" ] && basename "$f" .pid
  done
}

# The pid of daemon $1, from its pid file; fails if it has none.
daemon_pid() {
  local pidfile=$DIR/$1.pid
  if [ ! -s "$pidfile" ]; then
    echo "cluster.sh: $1 is not running (no $pidfile)" >&2
    return 1
  fi
  cat "$pidfile"
}

# Kills daemon $1 by the pid in DIR/$1.pid, and waits until it is gone
# (SIGKILL: the cluster is thrown away, and a hung daemon takes it too).
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

# SIGSTOP or SIGCONT to daemon $1, then waits until the kernel shows the
# process in the state asked for (T stopped, anything else running).
signal_daemon() {
  local name=$1 sig=$2 pid i state
  pid=$(daemon_pid "$name")
  kill "-$sig" "$pid"
  for ((i = 0; i < 200; i++)); do
    state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || break
    if [ "$sig" = STOP ] && [ "$state" = T ]; then return 0; fi
    if [ "$sig" = CONT ] && [ "$state" != T ]; then return 0; fi
    sleep 0.05
  done
  echo "cluster.sh: $name (pid $pid) did not take SIG$sig" >&2
  return 1
}

restart_daemon() {
  local name=$1
  if [ -s "$DIR/$name.pid" ] && kill -0 "$(cat "$DIR/$name.pid")" 2>/dev/null; then
    echo "cluster.sh: $name is still running: kill it first" >&2
    return 1
  fi
  case $name in
  mon.a) start_mon ;;
  osd.*) start_osd "${name#osd.}" && wait_osd_up "${name#osd.}" ;;
  *) echo "cluster.sh: no daemon $name" >&2; return 1 ;;
  esac
}

stop() {
  local rc=0 d
  # OSDs first: without their monitor they would wait to report.
  for d in $(daemons); do
    kill_daemon "$d" || rc=1
  done
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

# NAME must be a daemon of this script's kind.
check_name() {
  [[ $1 =~ ^(osd\.[0-9]+|mon\.a)$ ]] || usage
}

[ $# -ge 1 ] || usage
case $1 in
available)
  available
  ;;
start)
  [ $# -ge 2 ] || usage
  DIR=$(realpath -m "$2")
  shift 2
  OWNER=
  OSDS=1
  while [ $# -gt 0 ]; do
    case $1 in
    --osds) [ $# -ge 2 ] && [[ $2 =~ ^[0-9]+$ ]] || usage; OSDS=$2; shift 2 ;;
    [0-9]*) [ -z "$OWNER" ] || usage; OWNER=$1; shift ;;
    *) usage ;;
    esac
  done
  if [ "$OSDS" -ne 1 ] && [ "$OSDS" -lt 3 ]; then
    echo "cluster.sh: --osds is 1, or 3 or more (pool size 3)" >&2
    exit 2
  fi
  available >&2 || exit 1
  if ! (start); then
    echo "cluster.sh: the cluster did not start" >&2
    show_logs
    stop || true
    exit 1
  fi
  [ -z "$OWNER" ] || watch_owner "$OWNER"
  ;;
stop)
  [ $# -eq 2 ] || usage
  DIR=$(realpath -m "$2")
  stop
  ;;
kill|hang|resume|restart|pid)
  [ $# -eq 3 ] || usage
  DIR=$(realpath -m "$2")
  check_name "$3"
  case $1 in
  kill) kill_daemon "$3" ;;
  hang) signal_daemon "$3" STOP ;;
  resume) signal_daemon "$3" CONT ;;
  restart) restart_daemon "$3" ;;
  pid) daemon_pid "$3" ;;
  esac
  ;;
wait-clean)
  [ $# -eq 2 ] || usage
  DIR=$(realpath -m "$2")
  wait_clean
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
