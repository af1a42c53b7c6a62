#!/usr/bin/env bats
# Every command README.md and the man page's EXAMPLES show, run as printed.
# The commands are read from the two documents (README.md: its ```sh
# blocks; the .pod: the verbatim paragraphs of EXAMPLES), so an edited
# example is tested as edited, and a command this file does not know how
# to run fails the first test.  Only paths and addresses change:
#   file=/dev/NAME   a loop device over a sparse file (as root, where
#                    losetup works), else that file
#   file=/PATH       a sparse file under this test's folder on /var/tmp
#                    (a real file system: direct=true needs O_DIRECT)
#   stats=/PATH      a file under this test's folder
#   nbd=nbd://HOST/EXPORT  a throw-away `nbdkit memory` on a unix socket,
#                    asked for the same EXPORT
#   rbd=, ceph-conf=, ceph-keyring=  the throw-away Ceph cluster of
#                    client-tests/ceph/cluster.sh (started once for this
#                    file, stopped by pid; it has the client.plugq the
#                    examples name), with CEPH_CONF naming its
#                    configuration in place of /etc/ceph/ceph.conf
#   nbd://localhost  (a client's address) the server's unix socket
# Each server must list exactly the exports it defines (nbdinfo --list),
# take a write at both ends of each and read it back, serve its
# default-export= under the empty name, and exit 0 on SIGTERM.
# The README's commands that install are known and not run here.

load helpers

TOP="${top_srcdir:-$BATS_TEST_DIRNAME/..}"
DOCS=("$TOP/README.md" "$TOP/docs/nbdkit-plugq-plugin.pod")
CLUSTER_SH="$TOP/client-tests/ceph/cluster.sh"

# Commands the documents show that this test does not run, and why.
declare -gA NOT_RUN=(
  ["./setup.sh serve"]="installs plugq on this machine"
  ["./setup.sh test"]="is the whole suite, this file included"
  ["scripts/install-deps.sh"]="installs Debian packages on this machine"
  ["autoreconf -fi && ./configure && make && make check"]="builds in the source tree; CI builds and checks out of tree (scripts/test-all.sh)"
  ["make install"]="installs on this machine; service.bats installs the build tree into a DESTDIR of its own"
  ["dpkg-buildpackage -us -uc -b"]="client-tests/package.bats builds the package"
  ["apt install ./nbdkit-plugin-plugq_*.deb"]="installs on this machine; package.bats serves a disk from the package unpacked in a throw-away root"
)

# Sparse backing files are this large: more than any OFFSET+LENGTH the
# examples take (10G), and nothing is allocated until written.
BACKING_SIZE=64G

# examples DOC: DOC's commands, one per line as "BLOCK<TAB>COMMAND"
# (BLOCK numbers the code block or verbatim paragraph), with continuation
# lines joined, comments dropped and spaces squeezed.
examples() {
  case "$1" in
  *.md)
    awk '/^```/ {
           if (inblock) inblock = 0
           else if ($0 ~ /^```(sh|bash)?[[:space:]]*$/) { inblock = 1; block++ }
           next
         }
         inblock { print block "\t" $0 }' "$1" ;;
  *.pod)
    awk '/^=head1 / { in_examples = ($0 == "=head1 EXAMPLES"); next }
         in_examples && /^[ \t]/ { if (!verbatim) block++; verbatim = 1
                                   print block "\t" $0; next }
         in_examples { verbatim = 0 }' "$1" ;;
  esac | awk -F'\t' '
    { line = (pending != "") ? pending " " $2 : $2 }
    line ~ /\\[ \t]*$/ { sub(/\\[ \t]*$/, "", line); pending = line; next }
    { pending = ""
      sub(/(^|[ \t]+)#.*$/, "", line)
      gsub(/[ \t]+/, " ", line); sub(/^ /, "", line); sub(/ $/, "", line)
      if (line != "") print $1 "\t" line }'
}

# kind COMMAND: server (nbdkit plugq ...), client (nbdinfo on
# nbd://localhost), not-run (NOT_RUN) or unknown.
kind() {
  if [ -n "${NOT_RUN[$1]+set}" ]; then
    echo not-run
  elif [[ "$1" =~ ^nbdkit\ plugq(\ [a-z-]+=[^\ \'\"\$\`\;\&\|\<\>]*)*$ ]]; then
    echo server
  elif [[ "$1" =~ ^nbdinfo(\ --?[a-z-]+)*\ nbd://localhost/?$ ]]; then
    echo client
  else
    echo unknown
  fi
}

setup_file() {
  export CEPH_DIR="$BATS_FILE_TMPDIR/ceph" CEPH_MISSING=
  local doc
  for doc in "${DOCS[@]}"; do
    examples "$doc" | grep -q ' rbd=' && break
    doc=
  done
  [ -n "$doc" ] || { export CEPH_MISSING="no example uses rbd="; return 0; }
  if ! "$NBDKIT" "$PLUGIN" --dump-plugin | grep -qE '^plugq_backends=.*rbd'; then
    export CEPH_MISSING="plugq was built without librbd (apt-get install librbd-dev librados-dev)"
    return 0
  fi
  if ! CEPH_MISSING=$("$CLUSTER_SH" available); then
    export CEPH_MISSING
    return 0
  fi
  # With our pid: its watchdog stops the cluster if bats is killed.
  "$CLUSTER_SH" start "$CEPH_DIR" $$ >&3 2>&1
  # The examples' ceph-id=plugq: its key in a keyring of its own (for
  # ceph-keyring=) and in the cluster's keyring, which the configuration
  # names (for the examples without ceph-keyring=).
  timeout 60 ceph --conf "$CEPH_DIR/ceph.conf" auth get-or-create client.plugq \
    mon 'profile rbd' osd 'profile rbd pool=rbd' \
    -o "$CEPH_DIR/ceph.client.plugq.keyring" >&3 2>&1
  cat "$CEPH_DIR/ceph.client.plugq.keyring" >>"$CEPH_DIR/keyring"
}

teardown_file() {
  [ ! -e "$CEPH_DIR/ceph.conf" ] || "$CLUSTER_SH" stop "$CEPH_DIR"
}

setup() {
  plugq_setup
  T=$BATS_TEST_TMPDIR
  W=$(mktemp -d /var/tmp/plugq-examples.XXXXXX)
  LOOPS=()
  REMOTES=()
  IMAGES=()
}

teardown() {
  local rc=0 pid dev
  plugq_teardown || rc=1
  for pid in "${REMOTES[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${REMOTES[@]}"; do
    wait_gone "$pid" || { kill -KILL "$pid"; rc=1; }
  done
  for dev in "${LOOPS[@]}"; do
    losetup -d "$dev" || rc=1
  done
  for dev in "${IMAGES[@]}"; do
    timeout 60 rbd --conf "$CEPH_DIR/ceph.conf" rm "$dev" >/dev/null 2>&1 || rc=1
  done
  rm -rf "$W"
  return $rc
}

# wait_gone PID: polls (at most 20 s) until PID has exited.
wait_gone() {
  local i
  for ((i = 0; i < 400; i++)); do
    _pid_gone "$1" && return 0
    sleep 0.05
  done
  return 1
}

# backing_file PATH: a sparse file of BACKING_SIZE for the example's PATH,
# under $W; its name in SUBST.
backing_file() {
  SUBST=$W$1
  mkdir -p "$(dirname "$SUBST")"
  [ -e "$SUBST" ] || truncate -s "$BACKING_SIZE" "$SUBST"
}

# backing_device /dev/NAME: a loop device over a backing file where one
# can be attached, else the file; in SUBST.
backing_device() {
  local dev
  backing_file "$1"
  [ "$(id -u)" -eq 0 ] || return 0
  if dev=$(losetup --find --show "$SUBST" 2>"$T/losetup.err"); then
    LOOPS+=("$dev")
    SUBST=$dev
  else
    echo "# $1: a file, no loop device: $(cat "$T/losetup.err")" >&3
  fi
}

# remote URI: a throw-away nbdkit memory disk for nbd=URI, asked for the
# URI's export; its nbd+unix URI in SUBST.
remote() {
  local export=${1#nbd://*/} n=${#REMOTES[@]} sock pidf
  [[ "$1" =~ ^nbd://[^/]+(/[^?]*)?$ ]] || fail "nbd=$1: not a nbd://HOST/EXPORT this test can stand in for"
  [ "$export" != "$1" ] || export=
  sock=$T/remote$n.sock pidf=$T/remote$n.pid
  timeout 20 "$NBDKIT" -U "$sock" -P "$pidf" memory 64M </dev/null 3>&- \
    || fail "nbdkit memory for nbd=$1 did not start"
  wait_for_file "$pidf" || fail "nbdkit memory for nbd=$1 wrote no pid file"
  REMOTES+=("$(cat "$pidf")")
  SUBST="nbd+unix:///$export?socket=$sock"
}

# serve_example COMMAND: starts COMMAND (nbdkit plugq KEY=VALUE...) with
# paths and addresses moved here; sets EXPORTS (the names it defines),
# DEFAULT_EXPORT and STATS (the stats file, if any).
serve_example() {
  local words arg key value args=() ceph_conf=
  read -r -a words <<<"$1"
  EXPORTS=() DEFAULT_EXPORT= STATS=
  for arg in "${words[@]:2}"; do
    key=${arg%%=*} value=${arg#*=}
    case "$key" in
    disk) EXPORTS+=("$value") ;;
    linear) EXPORTS+=("${value%%:*}") ;;
    default-export) DEFAULT_EXPORT=$value ;;
    esac
    SUBST=$value
    case "$key=$value" in
    file=/dev/*) backing_device "$value" ;;
    file=/*) backing_file "$value" ;;
    stats=/*) SUBST=$T$value STATS=$T$value; mkdir -p "$(dirname "$SUBST")" ;;
    nbd=*) remote "$value" ;;
    rbd=*)
      if [[ " ${IMAGES[*]} " != *" $value "* ]]; then
        timeout 60 rbd --conf "$CEPH_DIR/ceph.conf" create --size 64M "$value" \
          || fail "rbd create $value in the throw-away cluster failed"
        IMAGES+=("$value")
      fi
      ceph_conf=$CEPH_DIR/ceph.conf ;;
    direct=true)
      dd if=/dev/zero of="$W/direct-probe" bs=4096 count=1 oflag=direct status=none \
        2>/dev/null || skip "O_DIRECT is refused on /var/tmp (direct=true)" ;;
    ceph-conf=/*) SUBST=$CEPH_DIR/ceph.conf ;;
    ceph-keyring=/*)
      SUBST=$CEPH_DIR/$(basename "$value")
      [ -f "$SUBST" ] || fail "$arg: the throw-away cluster has no $(basename "$value")" ;;
    *=/*) fail "$arg: a path this test does not know how to stand in for" ;;
    esac
    args+=("$key=$SUBST")
  done
  [ ${#EXPORTS[@]} -gt 0 ] || EXPORTS=(default)
  echo "# nbdkit plugq ${args[*]}" >&3
  # For nbdkit (and librados in it) alone, until this function returns.
  [ -z "$ceph_conf" ] || local -x CEPH_CONF=$ceph_conf
  start_plugq "${args[@]}"
}

# check_exports: the running server lists exactly EXPORTS, and each takes
# a write at its first and last 4 KiB and reads both back; the empty name
# is DEFAULT_EXPORT's disk or volume.
check_exports() {
  nbdinfo --list --json "$(uri)" >"$T/list.json"
  run jq -r '[.exports[]."export-name"] | sort | join(" ")' "$T/list.json"
  assert_output "$(printf '%s\n' "${EXPORTS[@]}" | LC_ALL=C sort | xargs)"
  pyrun "$DEFAULT_EXPORT" "${EXPORTS[@]}" <<'PY'
import sys
from plugqtest import *
default, names = sys.argv[1], sys.argv[2:]
for seed, name in enumerate(names):
    h = connect(name)
    end = h.get_size() - 4 * KiB
    for off in (0, end):
        h.pwrite(pattern(seed * 2 + off, 4 * KiB), off)
    h.flush()
    for off in (0, end):
        expect_read(h, off, pattern(seed * 2 + off, 4 * KiB), f"export {name} at {off}")
    h.shutdown()
if default:
    h, d = connect(""), connect(default)
    assert h.get_size() == d.get_size(), "the empty name is not " + default
    h.pwrite(pattern(999, 4 * KiB), 4 * KiB)
    h.flush()
    expect_read(d, 4 * KiB, pattern(999, 4 * KiB), f"{default} after a write to the empty name")
print(f"{len(names)} exports written and read back")
PY
}

# run_client COMMAND: an nbdinfo example against the running server; it
# must succeed and name every export.
run_client() {
  local cmd=${1/nbd:\/\/localhost/$(uri)} name
  cmd=${cmd%/}
  echo "# $cmd" >&3
  run $cmd
  assert_success
  for name in "${EXPORTS[@]}"; do
    assert_output --partial "export=\"$name\""
  done
}

# run_examples DOC WITH_RBD: runs DOC's servers (those with an rbd= disk
# if WITH_RBD is yes, the others if no), each with the clients of its own
# block; at least one must run.
run_examples() {
  local doc=$1 with_rbd=$2 block cmd servers=0 b
  local -A clients=()
  while IFS=$'\t' read -r block cmd; do
    [ "$(kind "$cmd")" = client ] && clients[$block]+="$cmd"$'\n'
  done < <(examples "$doc")
  while IFS=$'\t' read -r block cmd; do
    [ "$(kind "$cmd")" = server ] || continue
    if [[ " $cmd " == *" rbd="* ]]; then b=yes; else b=no; fi
    [ "$b" = "$with_rbd" ] || continue
    serve_example "$cmd"
    check_exports
    while read -r b; do
      [ -z "$b" ] || run_client "$b"
    done <<<"${clients[$block]:-}"
    stop_plugq
    [ -z "$STATS" ] || [ -s "$STATS" ] || fail "stats=$STATS was not written"
    servers=$((servers + 1))
  done < <(examples "$doc")
  [ "$servers" -gt 0 ] || skip "$(basename "$doc") shows no server command with$([ "$with_rbd" = yes ] || echo out) rbd="
}

@test "examples: every command README.md and the man page show is run here, or known not to be" {
  local doc block cmd unknown=() servers
  for doc in "${DOCS[@]}"; do
    [ -f "$doc" ] || fail "$doc is missing"
    servers=0
    while IFS=$'\t' read -r block cmd; do
      case "$(kind "$cmd")" in
      server) servers=$((servers + 1)) ;;
      not-run) echo "# not run here: $cmd: ${NOT_RUN[$cmd]}" >&3 ;;
      unknown) unknown+=("$(basename "$doc"): $cmd") ;;
      esac
    done < <(examples "$doc")
    # The reading itself: both documents show servers.
    [ "$servers" -gt 0 ] || fail "no nbdkit plugq command found in $doc"
  done
  [ ${#unknown[@]} -eq 0 ] || fail "$(printf 'not known how to run: %s\n' "${unknown[@]}")"
  # Every NOT_RUN entry is still shown somewhere: a stale one would hide
  # nothing, but says the table no longer matches the documents.
  for cmd in "${!NOT_RUN[@]}"; do
    cat "${DOCS[@]}" | grep -qF -- "$cmd" || fail "NOT_RUN names '$cmd', which no document shows"
  done
}

@test "examples: README.md's commands without rbd=, as printed" {
  run_examples "$TOP/README.md" no
}

@test "examples: README.md's commands with rbd=, as printed" {
  [ -z "$CEPH_MISSING" ] || skip "$CEPH_MISSING"
  run_examples "$TOP/README.md" yes
}

@test "examples: the man page's EXAMPLES without rbd=, as printed" {
  run_examples "$TOP/docs/nbdkit-plugq-plugin.pod" no
}

@test "examples: the man page's EXAMPLES with rbd=, as printed" {
  [ -z "$CEPH_MISSING" ] || skip "$CEPH_MISSING"
  run_examples "$TOP/docs/nbdkit-plugq-plugin.pod" yes
}
