# bench/lib.sh: helpers shared by the bench scripts (sourced, not run).
#
# Everything here measures or prepares; nothing decides what to run.

# The system Python has the libnbd bindings; pyenv's python3 does not.
export PATH=/usr/bin:$PATH
PY=/usr/bin/python3
BENCH_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

log() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "error: $*"; exit 1; }

# build_id: what was measured.  HEAD of the tree the plugin was built from
# (its build directory's Makefile names the source tree), the last commit
# that changed the plugin's sources, "-dirty" if they have uncommitted
# changes, and "STALE" if a source is newer than the plugin file.
# The engine's tests are not the plugin's sources.
PLUGIN_SOURCES=(server plugin ':!server/tests')
build_id() {
  local dir top head src dirty='' stale=''
  [ -n "$PLUGIN" ] && [ -f "$PLUGIN" ] || { echo "no plugin"; return; }
  dir=$(dirname "$PLUGIN")
  [ "$(basename "$dir")" != .libs ] || dir=$(dirname "$dir")
  top=$(sed -n 's/^abs_top_srcdir = //p' "$dir/Makefile" 2>/dev/null || true)
  [ -n "$top" ] || top=$dir
  head=$(git -C "$top" rev-parse --short HEAD 2>/dev/null) || { echo "unknown (not a git tree)"; return; }
  src=$(cd "$top" && git log -1 --format=%h -- "${PLUGIN_SOURCES[@]}")
  [ -z "$(cd "$top" && git status --porcelain --untracked-files=no -- "${PLUGIN_SOURCES[@]}")" ] ||
    dirty=-dirty
  [ -z "$(cd "$top" && find server plugin -path server/tests -prune -o \
            -newer "$PLUGIN" -type f -name '*.[ch]' -print -quit)" ] ||
    stale=", STALE: a source is newer than the plugin"
  echo "$head$dirty (plugin sources last changed in $src$stale)"
}

# need_tools COMMAND:PACKAGE...: every COMMAND on PATH.  Missing ones are
# installed with scripts/install-deps.sh when running as root (it installs
# every package the bench uses), else named with their Debian packages.
need_tools() {
  local missing=() packages=() t
  for t in "$@"; do
    command -v "${t%%:*}" >/dev/null || { missing+=("${t%%:*}"); packages+=("${t#*:}"); }
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  if [ "$(id -u)" -eq 0 ]; then
    log "installing ${packages[*]} for ${missing[*]} (scripts/install-deps.sh)"
    "$BENCH_SRC/../scripts/install-deps.sh" || die "scripts/install-deps.sh failed"
    for t in "${missing[@]}"; do
      command -v "$t" >/dev/null || die "$t is still missing after scripts/install-deps.sh"
    done
  else
    die "missing ${missing[*]}: install the Debian packages ${packages[*]} (scripts/install-deps.sh as root)"
  fi
}

# size_bytes 512M -> 536870912 (K, M, G suffixes, powers of two)
size_bytes() {
  local v=${1%[KkMmGg]} s=${1: -1}
  case $s in
    K|k) echo $((v << 10)) ;;
    M|m) echo $((v << 20)) ;;
    G|g) echo $((v << 30)) ;;
    *) echo "$1" ;;
  esac
}

# --- CPU accounting from /proc -----------------------------------------

CLK_TCK=$(getconf CLK_TCK)

# descendants PID: PID and every process below it.  nbd-server forks one
# child per connection, so its CPU is spread over a tree.
descendants() {
  ps -e -o pid=,ppid= | awk -v root="$1" '
    { kids[$2] = kids[$2] " " $1 }
    END {
      todo[1] = root; n = 1
      while (n > 0) {
        p = todo[n--]; print p
        k = split(kids[p], c, " ")
        for (i = 1; i <= k; i++) todo[++n] = c[i]
      }
    }'
}

# tree_cpu_ticks PID: utime+stime of the live tree plus the root's reaped
# children (cutime+cstime), so a connection child that exited still counts.
tree_cpu_ticks() {
  local root=$1 p total=0 f
  for p in $(descendants "$root"); do
    # Fields after the ")" of comm: $12 utime $13 stime $14 cutime $15 cstime.
    f=$(sed 's/.*) //' /proc/"$p"/stat 2>/dev/null) || continue
    set -- $f
    total=$((total + ${12} + ${13}))
    [ "$p" = "$root" ] && total=$((total + ${14} + ${15}))
  done
  echo "$total"
}

# tree_rss_kb PID: resident memory of the server tree in KiB.
tree_rss_kb() {
  local p total=0 v
  for p in $(descendants "$1"); do
    v=$(awk '/^VmRSS:/ {print $2}' /proc/"$p"/status 2>/dev/null)
    total=$((total + ${v:-0}))
  done
  echo "$total"
}

# sys_cpu_ticks: "busy steal" jiffies over all CPUs from /proc/stat.
sys_cpu_ticks() {
  awk '/^cpu / {print $2+$3+$4+$7+$8, $9}' /proc/stat
}

# kthread_snapshot: "pid ticks" of every kernel thread (a child of
# kthreadd, pid 2).  Kernel-thread CPU (mostly writeback: kworkers flushing
# a disk backend's dirty pages) is the bench's own cost, not foreign load.
kthread_snapshot() {
  cat /proc/[0-9]*/stat 2>/dev/null | awk '
    { s = $0; sub(/.*\) /, "", s); split(s, f, " ")
      if (f[2] == 2) print $1, f[12] + f[13] }'
}

# kthread_ticks_since SNAPSHOT: CPU used since SNAPSHOT by kernel threads,
# per thread, so threads that exited meanwhile do not make it negative.
kthread_ticks_since() {
  awk 'NR == FNR { before[$1] = $2; next }
       { d = $2 - before[$1]; if (d > 0) t += d }
       END { print t + 0 }' <(echo "$1") <(kthread_snapshot)
}

loadavg() { cut -d' ' -f1-3 /proc/loadavg | tr ' ' '/'; }

# --- a measurement window around one client run --------------------------
#
# window_begin SERVER_PID / window_end SERVER_PID CLIENT_CPU_S print
# key=value pairs: server CPU, kernel-thread CPU (mostly writeback for the
# disk backends), other CPU (everything else on the machine: other
# engineers' jobs, interrupts), steal, load average.

window_begin() {
  W_LOAD0=$(loadavg)
  read -r W_BUSY0 W_STEAL0 < <(sys_cpu_ticks)
  W_SRV0=$(tree_cpu_ticks "$1")
  W_KT0=$(kthread_snapshot)
  W_T0=$(date +%s.%N)
}

window_end() {
  local pid=$1 client_s=$2 busy1 steal1 srv1 kt1 t1
  t1=$(date +%s.%N)
  srv1=$(tree_cpu_ticks "$pid")
  kt1=$(kthread_ticks_since "$W_KT0")
  read -r busy1 steal1 < <(sys_cpu_ticks)
  awk -v t0="$W_T0" -v t1="$t1" -v b0="$W_BUSY0" -v b1="$busy1" \
      -v s0="$W_STEAL0" -v s1="$steal1" -v v0="$W_SRV0" -v v1="$srv1" \
      -v kt="$kt1" \
      -v c="$client_s" -v hz="$CLK_TCK" -v ncpu="$(nproc)" \
      -v l0="$W_LOAD0" -v l1="$(loadavg)" 'BEGIN {
        wall = t1 - t0; srv = (v1 - v0) / hz
        kt = kt / hz
        other = (b1 - b0) / hz - srv - c - kt; if (other < 0) other = 0
        printf "wall_s=%.3f server_cpu_s=%.3f client_cpu_s=%.3f", wall, srv, c
        printf " kthread_cpu_pct=%.1f", 100 * kt / wall
        printf " other_cpu_pct=%.1f steal_pct=%.1f", 100 * other / wall, \
               100 * (s1 - s0) / hz / wall / ncpu
        printf " loadavg_before=%s loadavg_after=%s\n", l0, l1
      }'
}

# timed_client OUTFILE CMD...: run a client, leaving "user sys" CPU seconds
# in OUTFILE.time.  Bounded: a hung client cannot stall the whole bench.
timed_client() {
  local out=$1; shift
  timeout --kill-after=10 $((RUNTIME + 120)) \
    /usr/bin/time -f '%U %S' -o "$out.time" "$@"
}

client_cpu_s() { awk '{print $1 + $2}' "$1.time" 2>/dev/null || echo 0; }

# --- backing storage -----------------------------------------------------

drop_caches() {
  sync
  echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
}

# fill_file PATH SIZE: recreate PATH and write every block with 4 KiB
# writes.  Why 4 KiB: with ext4 large folios, a file filled with big
# writes leaves big folios, and every later 4 KiB write then dirties a
# whole folio (3-4x slower): the fill decides the result, so fix it.
fill_file() {
  local path=$1 bytes
  bytes=$(size_bytes "$2")
  rm -f "$path"
  # Not zeroes from /dev/zero straight: tr makes a non-zero byte pattern so
  # no layer can keep the file sparse.  tr dies of SIGPIPE when dd has
  # enough: a process substitution keeps that out of a pipefail status.
  dd of="$path" bs=4k count=$((bytes / 4096)) iflag=fullblock \
     status=none 2>/dev/null < <(tr '\0' '\132' < /dev/zero)
  sync "$path"
}
