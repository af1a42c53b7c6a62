# bench/servers.sh: start and stop the servers under test (sourced).
#
# Every server listens on a unix socket only (TCP costs 15-25 % here and
# would reach beyond this machine's loopback for nothing).
#
#   server_supports NAME BACKEND      -> exit status
#   start_server NAME BACKEND [N]     -> SRV_PID, SRV_URIS (N exports), SRV_STATS
#   stop_server                       -> waits until the process is gone
#
# NAME:    plugq plugq-noop plugq-unplugged (deadline/noop/unplug-thresh=1,
#          ack=queued) and the same with -dispatched (ack=dispatched);
#          nbdkit-file nbdkit-memory nbdkit-file-cachewb nbd-server qemu-nbd;
#          nbdkit-null (answers at once, stores nothing: the most a plugin
#          could give on this machine, for reading the issue-3 (c) figures);
#          nbdkit-nbd (nbdkit's nbd plugin, for the remote backend);
#          qemu-nbd-native (disk-direct: --cache=none --aio=native, as a
#          user serving an O_DIRECT disk would); nbdkit-file-nocache
#          (disk-direct: nbdkit file cache=none, which in nbdkit 1.32 is
#          not O_DIRECT but posix_fadvise(DONTNEED) after each request);
#          nbdkit-bare-direct (disk-direct: bench/nbdkit-bare-direct-plugin.so,
#          read-only, nothing but an O_DIRECT pread per request: the most an
#          nbdkit 1.32 plugin reads from this disk);
#          plugq-base (plugq with BASE_PLUGIN: an older build, same keys)
# BACKEND: disk (file on $WORK, page cache), disk-direct (same file with
#          O_DIRECT), shm (file on /dev/shm), memory (RAM inside the server),
#          remote (an NBD export: nbdkit memory behind the delay filter,
#          REMOTE_DELAY per write, and REMOTE_DELAY_READ per read when
#          set, started and stopped with the server), rbd (the image
#          RBD_IMAGE of the cluster whose ceph.conf is RBD_CONF: plugq
#          rbd=, qemu-nbd's rbd: driver, librbd's cache off for both)
#
# Optional:
#   SRV_WRAP=(CMD ARGS...)  run nbdkit/qemu-nbd under CMD (valgrind, strace,
#                           bench/rusage); the server still runs in the
#                           foreground, so SRV_PID is the server itself and
#                           stop_server also waits for the wrapper.
#   SRV_WAIT_TRIES=200      50 ms polls for the pid file (valgrind is slow)
#   PLUGQ_STATS=0           no stats= file (it costs CPU every interval)
#
# Needs: RUNDIR, WORK, SHM, SIZE, PLUGIN (for plugq), lib.sh.

# Keys every plugq variant gets; PLUGQ_ARGS adds more (e.g. unplug-delay=1ms).
plugq_variant_args() {
  local name=$1 elevator=deadline thresh='' ack=queued
  case $name in
    *-dispatched) ack=dispatched; name=${name%-dispatched} ;;
  esac
  case $name in
    plugq|plugq-base) ;;
    plugq-noop) elevator=noop ;;
    plugq-unplugged) thresh=unplug-thresh=1 ;;
    *) return 1 ;;
  esac
  echo "elevator=$elevator ack=$ack $thresh ${PLUGQ_ARGS:-}"
}

server_supports() {
  local name=$1 backend=$2
  case $name:$backend in
    plugq*:disk|plugq*:disk-direct|plugq*:shm|plugq*:memory) ;;
    nbdkit-file:disk|nbdkit-file:shm) ;;
    nbdkit-memory:memory) ;;
    nbdkit-null:disk|nbdkit-null:memory) ;;
    nbdkit-nbd:remote|plugq*:remote) ;;
    nbdkit-file-cachewb:disk) ;;
    nbd-server:disk|nbd-server:shm) ;;
    qemu-nbd:disk|qemu-nbd:disk-direct|qemu-nbd:shm) ;;
    qemu-nbd-native:disk-direct|nbdkit-file-nocache:disk-direct) ;;
    nbdkit-bare-direct:disk-direct) [ -f "$BENCH_SRC/nbdkit-bare-direct-plugin.so" ] ;;
    plugq*:rbd|qemu-nbd:rbd) ;;
    *) return 1 ;;
  esac
  # A plugq variant needs the built plugin (plugq-base the older one).
  case $name in
    plugq-base*) [ -n "${BASE_PLUGIN:-}" ] && [ -f "$BASE_PLUGIN" ] ;;
    plugq*) [ -n "${PLUGIN:-}" ] && [ -f "$PLUGIN" ] ;;
  esac
}

backing_dir() {
  case $1 in
    disk|disk-direct) echo "$WORK" ;;
    shm) echo "$SHM" ;;
    *) return 1 ;;
  esac
}

# backing_path BACKEND I: the file behind export I (same name for every
# server, so nbdkit file dir= exports it as "diskI.img").
backing_path() { echo "$(backing_dir "$1")/disk$2.img"; }

SRV_PID=
SRV_JOB=
SRV_SOCK=
SRV_STATS=
SRV_URIS=()
SRV_WRAP=()
REMOTE_PID=
REMOTE_SOCK=

# wait_for_file PATH [TRIES]: pidfiles and sockets appear after listen().
wait_for_file() {
  local i
  for ((i = 0; i < ${2:-200}; i++)); do
    [ -s "$1" ] || [ -S "$1" ] && return 0
    sleep 0.05
  done
  return 1
}

plugq_cmd() {
  local name=$1 backend=$2 n=$3 i extra plugin=$PLUGIN
  extra=$(plugq_variant_args "$name") || return 1
  case $name in plugq-base*) plugin=$BASE_PLUGIN ;; esac
  # Queue keys before any disk= are the defaults for every disk.
  echo "$plugin $extra"
  [ -z "$SRV_STATS" ] || echo "stats=$SRV_STATS stats-interval=${STATS_INTERVAL:-200ms}"
  for ((i = 0; i < n; i++)); do
    case $backend in
      memory) echo "disk=d$i memory=$SIZE" ;;
      remote) echo "disk=d$i nbd=nbd+unix:///?socket=$REMOTE_SOCK" ;;
      disk-direct) echo "disk=d$i file=$(backing_path disk "$i") direct=true" ;;
      rbd) echo "disk=d$i rbd=$RBD_IMAGE ceph-conf=$RBD_CONF" ;;
      *) echo "disk=d$i file=$(backing_path "$backend" "$i")" ;;
    esac
  done
  echo "${PLUGQ_TAIL:-}"
}

# start_nbdkit ARGS...: foreground nbdkit in the background, so its log
# stays ours and its pid is the process that does the work.  Under
# SRV_WRAP, SRV_JOB is the wrapper and SRV_PID still nbdkit (from -P).
start_nbdkit() {
  "${SRV_WRAP[@]}" nbdkit -f -U "$SRV_SOCK" -P "$RUNDIR/pid" "$@" \
    </dev/null >>"$RUNDIR/server.log" 2>&1 &
  SRV_JOB=$!
  wait_for_file "$RUNDIR/pid" "${SRV_WAIT_TRIES:-200}" || return 1
  SRV_PID=$(cat "$RUNDIR/pid")
}

# start_remote: the remote backend, nbdkit memory with REMOTE_DELAY added
# to every write, on its own socket; never wrapped, its cost is not the
# front server's.
start_remote() {
  REMOTE_SOCK=$RUNDIR/remote.sock
  rm -f "$REMOTE_SOCK" "$RUNDIR/remote.pid"
  nbdkit -f -U "$REMOTE_SOCK" -P "$RUNDIR/remote.pid" --filter=delay \
    memory "${REMOTE_SIZE:-$SIZE}" delay-write="${REMOTE_DELAY:-1ms}" \
    ${REMOTE_DELAY_READ:+delay-read="$REMOTE_DELAY_READ"} \
    </dev/null >>"$RUNDIR/remote.log" 2>&1 &
  REMOTE_PID=$!
  wait_for_file "$RUNDIR/remote.pid" || return 1
}

stop_remote() {
  local i
  [ -n "$REMOTE_PID" ] || return 0
  kill -TERM "$REMOTE_PID" 2>/dev/null || true
  for ((i = 0; i < 1200; i++)); do
    kill -0 "$REMOTE_PID" 2>/dev/null || break
    sleep 0.05
  done
  kill -KILL "$REMOTE_PID" 2>/dev/null || true
  wait "$REMOTE_PID" 2>/dev/null || true
  rm -f "$REMOTE_SOCK"
  REMOTE_PID=
}

start_nbd_server() {
  local backend=$1 n=$2 i
  {
    printf '[generic]\nunixsock = %s\n' "$SRV_SOCK"
    for ((i = 0; i < n; i++)); do
      printf '[disk%d.img]\nexportname = %s\nflush = true\nfua = true\ntrim = true\n' \
        "$i" "$(backing_path "$backend" "$i")"
    done
  } > "$RUNDIR/nbd-server.conf"
  nbd-server -C "$RUNDIR/nbd-server.conf" -p "$RUNDIR/pid" \
    >>"$RUNDIR/server.log" 2>&1 || return 1
  wait_for_file "$SRV_SOCK" && wait_for_file "$RUNDIR/pid" || return 1
  SRV_PID=$(cat "$RUNDIR/pid")
}

# qemu-nbd in the foreground, like nbdkit: a wrapper can then wait4 it.
# AIO (default threads) is qemu's --aio: native needs --cache=none.  On
# the rbd backend the image goes through qemu's rbd: driver, librbd's
# cache off (as plugq's rbd= sets it).
start_qemu_nbd() {
  local backend=$1 aio=${2:-threads} cache=writeback target envs=()
  [ "$backend" = disk-direct ] && cache=none
  if [ "$backend" = rbd ]; then
    cache=none target="rbd:$RBD_IMAGE:conf=$RBD_CONF:rbd_cache=false"
    envs=(env CEPH_CONF="$RBD_CONF")
  else
    target=$(backing_path "${backend/-direct/}" 0)
  fi
  "${SRV_WRAP[@]}" "${envs[@]}" qemu-nbd -f raw -k "$SRV_SOCK" -t -e 16 \
    --pid-file="$RUNDIR/pid" --cache=$cache --aio="$aio" --discard=unmap -x disk0.img \
    "$target" </dev/null >>"$RUNDIR/server.log" 2>&1 &
  SRV_JOB=$!
  wait_for_file "$RUNDIR/pid" "${SRV_WAIT_TRIES:-200}" &&
    wait_for_file "$SRV_SOCK" "${SRV_WAIT_TRIES:-200}" || return 1
  SRV_PID=$(cat "$RUNDIR/pid")
}

# Export names: plugq "dI", nbd-server and nbdkit file dir= "diskI.img".
set_uris() {
  local name=$1 n=$2 i ename
  SRV_URIS=()
  for ((i = 0; i < n; i++)); do
    case $name in
      plugq*) ename=d$i ;;
      nbdkit-memory|nbdkit-file-cachewb|nbdkit-null|nbdkit-nbd|nbdkit-file-nocache|nbdkit-bare-direct) ename='' ;;
      nbdkit-file) [ "$n" -gt 1 ] && ename=disk$i.img || ename='' ;;
      *) ename=disk$i.img ;;
    esac
    SRV_URIS+=("nbd+unix:///$ename?socket=$SRV_SOCK")
  done
}

start_server() {
  local name=$1 backend=$2 n=${3:-1}
  server_supports "$name" "$backend" || return 1
  mkdir -p "$RUNDIR"
  SRV_SOCK=$RUNDIR/sock SRV_STATS='' SRV_PID='' SRV_JOB=''
  rm -f "$SRV_SOCK" "$RUNDIR/pid" "$RUNDIR/stats.json"
  echo "=== $(date +%T) start $name $backend x$n" >>"$RUNDIR/server.log"
  if [ "$backend" = remote ]; then
    start_remote || { log "could not start the remote (see $RUNDIR/remote.log)"; stop_remote; return 1; }
  fi
  case $name in
    plugq*)
      [ "${PLUGQ_STATS:-1}" = 0 ] || SRV_STATS=$RUNDIR/stats.json
      # shellcheck disable=SC2046 # one word per key=value, by design
      start_nbdkit $(plugq_cmd "$name" "$backend" "$n") ;;
    nbdkit-memory) start_nbdkit memory "$SIZE" ;;
    nbdkit-nbd) start_nbdkit nbd socket="$REMOTE_SOCK" ;;
    nbdkit-null) start_nbdkit null "$SIZE" ;;
    nbdkit-file)
      if [ "$n" -gt 1 ]; then start_nbdkit file dir="$(backing_dir "$backend")"
      else start_nbdkit file "$(backing_path "$backend" 0)"; fi ;;
    nbdkit-file-cachewb)
      TMPDIR=$WORK start_nbdkit --filter=cache file "$(backing_path disk 0)" cache=writeback ;;
    nbd-server) start_nbd_server "$backend" "$n" ;;
    nbdkit-file-nocache) start_nbdkit file "$(backing_path disk 0)" cache=none ;;
    nbdkit-bare-direct)
      start_nbdkit "$BENCH_SRC/nbdkit-bare-direct-plugin.so" file="$(backing_path disk 0)" ;;
    qemu-nbd) start_qemu_nbd "$backend" ;;
    qemu-nbd-native) start_qemu_nbd "$backend" native ;;
  esac || { log "could not start $name on $backend (see $RUNDIR/server.log)"; stop_server; return 1; }
  set_uris "$name" "$n"
}

# stop_server: SIGTERM lets plugq drain its queues and write its final
# stats; nbdkit 1.32 leaves its socket behind, so remove it ourselves.
# Then the wrapper, if any, has written its figures; then the remote goes.
# Safe under set -e, and when the server never wrote its pid file (the
# wrapper's job is then stopped instead).
stop_server() {
  local pids i
  if [ -z "$SRV_PID" ] && [ -n "$SRV_JOB" ] && kill -0 "$SRV_JOB" 2>/dev/null; then
    SRV_PID=$SRV_JOB
  fi
  if [ -n "$SRV_PID" ]; then
    pids=$(descendants "$SRV_PID")
    # shellcheck disable=SC2086 # one word per pid
    kill -TERM $pids 2>/dev/null || true
    for ((i = 0; i < 1200; i++)); do
      kill -0 "$SRV_PID" 2>/dev/null || break
      sleep 0.05
    done
    if kill -0 "$SRV_PID" 2>/dev/null; then
      log "server $SRV_PID ignored SIGTERM for 60 s; killing it"
      # shellcheck disable=SC2086
      kill -KILL $pids 2>/dev/null || true
    fi
    wait "$SRV_PID" 2>/dev/null || true
  fi
  [ -z "$SRV_JOB" ] || wait "$SRV_JOB" 2>/dev/null || true
  rm -f "$SRV_SOCK"
  SRV_PID='' SRV_JOB=''
  stop_remote
}
