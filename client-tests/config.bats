#!/usr/bin/env bats
# plugq configuration: every bad configuration is one line naming the key
# and a non-zero exit; --help, --dump-plugin; export names are looked up,
# never turned into paths.

load helpers

setup() {
  skip_if_sanitized  # every test here ends in nbdkit exiting on an error
  plugq_setup
  T=$BATS_TEST_TMPDIR
  make_file "$T/a.img" 1M
}

teardown() {
  plugq_teardown
}

# bad_config ARGS...: nbdkit with the plugin and ARGS, which must not start.
# If the configuration were accepted, --run 'exit 0' would make the status 0.
bad_config() {
  run timeout 30 "$NBDKIT" -U - "$PLUGIN" "$@" --run 'exit 0'
}

# assert_config_error WORD...: after bad_config: nbdkit failed (not by a
# signal or the timeout), printed exactly one line, and that line holds
# every WORD (the key, and the offending name where there is one).
assert_config_error() {
  local w
  if [ "$status" -eq 0 ]; then
    fail "the configuration was accepted (exit status 0); output: $output"
  fi
  if [ "$status" -ge 124 ]; then
    fail "nbdkit ended with status $status (timeout or signal), not a configuration error; output: $output"
  fi
  if [ "${#lines[@]}" -ne 1 ]; then
    fail "expected exactly one line of error output, got ${#lines[@]}: $output"
  fi
  for w in "$@"; do
    if [[ "${lines[0]}" != *"$w"* ]]; then
      fail "the error line does not name '$w': ${lines[0]}"
    fi
  done
}

# ---------------------------------------------------------------- control

@test "config: a full valid configuration is accepted (control for the error cases)" {
  make_file "$T/b.img" 2M
  run timeout 30 "$NBDKIT" -U - "$PLUGIN" \
    ack=queued elevator=deadline unplug-delay=3ms unplug-thresh=16 \
    max-merge=1M queue-bytes=64M queue-requests=256 write-expire=5s \
    bypass=auto disk=a file="$T/a.img" bypass=never elevator=noop unplug-delay=500us write-expire=2 \
    disk=b file="$T/b.img" direct=false ack=dispatched unplug-delay=1000000ns \
    disk=m memory=1G unplug-delay=1s \
    linear=vol:a,b@1M+1M,m@0+512K \
    linear=outer:vol@512K+1M,a \
    default-export=vol stats="$T/stats.json" stats-interval=100ms \
    --run 'nbdinfo --size "$uri"'
  assert_success
  # vol = a (1M) + 1M of b + 512K of m = 2.5M, and it is the default export.
  assert_output $((5 * MiB / 2))
}

@test "config: queue keys before disk= are defaults, after disk= they set that disk only" {
  run timeout 30 "$NBDKIT" -U - "$PLUGIN" stats="$T/stats.json" \
    elevator=noop unplug-delay=7ms max-merge=256K \
    disk=a memory=1M unplug-thresh=3 unplug-delay=1500us \
    disk=b memory=1M ack=dispatched write-expire=2 \
    disk=c memory=1M unplug-delay=1000000ns queue-bytes=8M queue-requests=32 \
    --run 'exit 0'
  assert_success
  pyrun "$T/stats.json" <<'EOF'
import sys
from plugqtest import load_stats, stat
doc = load_stats(sys.argv[1])
want = {
    "a": {"elevator": "noop", "ack": "queued", "unplug_delay_us": 1500,
          "unplug_thresh": 3, "max_merge": 256 * 1024},
    "b": {"elevator": "noop", "ack": "dispatched", "unplug_delay_us": 7000,
          "write_expire_us": 2000000, "max_merge": 256 * 1024},
    "c": {"elevator": "noop", "ack": "queued", "unplug_delay_us": 1000,
          "queue_bytes": 8 * 1024 * 1024, "queue_requests": 32},
}
for disk, kv in want.items():
    for k, v in kv.items():
        got = stat(doc, disk, "config." + k)
        assert got == v, "disk %s: config.%s is %r, expected %r" % (disk, k, got, v)
# a's own unplug-thresh did not leak to b and c.
ta, tb, tc = (stat(doc, d, "config.unplug_thresh") for d in "abc")
assert tb == tc and tb != 3, "unplug_thresh a=%r b=%r c=%r" % (ta, tb, tc)
EOF
}

# ---------------------------------------------------------------- keys

@test "config: unknown key" {
  bad_config disk=a memory=1M bogus-key=1
  assert_config_error bogus-key
}

@test "config: file= before any disk=" {
  bad_config file="$T/a.img"
  assert_config_error file
}

@test "config: memory= before any disk=" {
  bad_config memory=1M
  assert_config_error memory
}

@test "config: direct= before any disk=" {
  bad_config direct=true disk=a file="$T/a.img"
  assert_config_error direct
}

@test "config: two backends for one disk (file then memory)" {
  bad_config disk=d1 file="$T/a.img" memory=1M
  assert_config_error memory
}

@test "config: two backends for one disk (memory twice)" {
  bad_config disk=d1 memory=1M memory=2M
  assert_config_error memory
}

@test "config: duplicate disk names" {
  bad_config disk=twin memory=1M disk=twin memory=2M
  assert_config_error twin
}

@test "config: a volume with the name of a disk" {
  bad_config disk=x1 memory=1M disk=x2 memory=1M linear=x1:x2
  assert_config_error x1
}

@test "config: disk= with an empty name" {
  bad_config disk= memory=1M
  assert_config_error disk
}

@test "config: missing file" {
  bad_config disk=a file="$T/no-such-dir/no-such.img"
  assert_config_error no-such.img
}

@test "config: an empty file as a disk" {
  : >"$T/empty.img"
  bad_config disk=e file="$T/empty.img"
  assert_config_error disk=e empty.img "size 0"
}

@test "config: file= naming a directory" {
  mkdir "$T/adir"
  bad_config disk=a file="$T/adir"
  assert_config_error adir
}

@test "config: bad size (unknown suffix)" {
  bad_config disk=a memory=12Q
  assert_config_error memory
}

@test "config: bad size (negative)" {
  bad_config disk=a memory=-1M
  assert_config_error memory
}

@test "config: memory disk without a size" {
  bad_config disk=a memory=
  assert_config_error memory
}

@test "config: disk without any backend" {
  bad_config disk=lonely
  assert_config_error lonely
}

@test "config: bad direct= value" {
  bad_config disk=a file="$T/a.img" direct=maybe
  assert_config_error direct
}

@test "config: direct= on a disk whose backend is not file=" {
  bad_config disk=m memory=1M direct=true
  assert_config_error disk=m "direct= is only for a file= backend"
}

@test "config: reconnect= on a disk whose backend is not nbd=" {
  bad_config disk=f file="$T/a.img" reconnect=50ms
  assert_config_error disk=f "reconnect= is only for an nbd= backend"
}

@test "config: an nbd= value that is not an NBD URI" {
  bad_config disk=r nbd=http://example.invalid/x
  assert_config_error nbd=http "not an NBD URI" disk=r
}

@test "config: default-export naming no export" {
  bad_config disk=a memory=1M default-export=ghost
  assert_config_error default-export ghost
}

# ---------------------------------------------------------------- linear

@test "config: unknown linear member" {
  bad_config disk=a memory=1M linear=vol:a,ghost
  assert_config_error linear ghost
}

@test "config: linear volume that contains itself" {
  bad_config disk=a memory=1M linear=selfvol:a,selfvol
  assert_config_error linear selfvol
}

@test "config: linear cycle of two volumes" {
  bad_config disk=a memory=1M linear=loopx:a,loopy linear=loopy:a,loopx
  assert_config_error linear
  assert_output --regexp 'loopx|loopy'
}

@test "config: linear sub-range past the member's end" {
  bad_config disk=small memory=1M linear=pastend:small@512K+1M
  assert_config_error linear small
}

@test "config: linear sub-range starting past the member's end" {
  bad_config disk=small memory=1M linear=pastend:small@2M+4K
  assert_config_error linear small
}

@test "config: linear sub-range that does not parse" {
  bad_config disk=a memory=1M linear=v:a@xyz+1M
  assert_config_error linear
}

@test "config: empty linear volume" {
  bad_config disk=a memory=1M linear=empty:
  assert_config_error linear empty
}

@test "config: linear= without a member list" {
  bad_config disk=a memory=1M linear=nocolon
  assert_config_error linear
}

@test "config: queue key after linear=" {
  bad_config disk=a memory=1M linear=v:a elevator=noop
  assert_config_error elevator
}

# ---------------------------------------------------------------- queue keys

@test "config: bad elevator" {
  bad_config elevator=cfq
  assert_config_error elevator
}

@test "config: bad elevator on one disk" {
  bad_config disk=a memory=1M elevator=anticipatory
  assert_config_error elevator
}

@test "config: bad ack" {
  bad_config ack=sometimes
  assert_config_error ack
}

@test "config: bad unplug-delay (unknown unit)" {
  bad_config unplug-delay=3xs
  assert_config_error unplug-delay
}

@test "config: bad unplug-delay (not a number)" {
  bad_config disk=a memory=1M unplug-delay=soon
  assert_config_error unplug-delay
}

@test "config: bad write-expire (negative)" {
  bad_config write-expire=-5ms
  assert_config_error write-expire
}

@test "config: bad stats-interval (hours are not a unit)" {
  bad_config stats="$T/s.json" stats-interval=1h
  assert_config_error stats-interval
}

@test "config: bad unplug-thresh" {
  bad_config unplug-thresh=lots
  assert_config_error unplug-thresh
}

@test "config: bad max-merge" {
  bad_config max-merge=12Q
  assert_config_error max-merge
}

@test "config: bad read-ahead (not a size, over 64M)" {
  bad_config read-ahead=lots
  assert_config_error read-ahead
  bad_config read-ahead=65M
  assert_config_error read-ahead 64
}

@test "config: read-ahead= off, 0 and a size, per disk" {
  run timeout 30 "$NBDKIT" -U - "$PLUGIN" stats="$T/stats.json" \
    read-ahead=256K disk=a memory=1M disk=b memory=1M read-ahead=off \
    disk=c memory=1M read-ahead=0 disk=d memory=1M \
    --run 'exit 0'
  assert_success
  pyrun "$T/stats.json" <<'EOF'
import sys
from plugqtest import load_stats, stat
doc = load_stats(sys.argv[1])
got = {d: stat(doc, d, "config.read_ahead") for d in "abcd"}
assert got == {"a": 256 * 1024, "b": 0, "c": 0, "d": 256 * 1024}, got
EOF
}

@test "config: bad queue-bytes" {
  bad_config queue-bytes=many
  assert_config_error queue-bytes
}

@test "config: bad queue-requests" {
  local v
  for v in 0 -1 many 4294967296; do
    bad_config queue-requests=$v
    assert_config_error queue-requests
  done
}

@test "config: bad bypass" {
  bad_config disk=a memory=1M bypass=sometimes
  assert_config_error bypass
  assert_output --partial "expected auto or never"
}

# ---------------------------------------------------------------- help, version

@test "config: --help lists every key" {
  run timeout 30 "$NBDKIT" "$PLUGIN" --help
  assert_success
  local k
  for k in disk file direct memory linear default-export ack elevator \
           unplug-delay unplug-thresh max-merge queue-bytes queue-requests \
           write-expire bypass \
           stats stats-format stats-interval; do
    if ! grep -qE "(^|[^a-z-])$k=" <<<"$output"; then
      fail "--help does not list $k=: $output"
    fi
  done
}

@test "config: --help shows each backend's keys at the start of a line, and every elevator" {
  run timeout 30 "$NBDKIT" "$PLUGIN" --help
  assert_success
  local k
  for k in file direct memory nbd reconnect; do
    if ! grep -qE "^$k=<" <<<"$output"; then
      fail "--help has no line for $k=: $output"
    fi
  done
  assert_line --regexp '^elevator=deadline\|noop +Dispatch order'
  assert_line --regexp '^ +deadline: '
  assert_line --regexp '^ +noop: '
}

@test "config: the description names every backend, nbd too" {
  run timeout 30 "$NBDKIT" "$PLUGIN" --help
  assert_success
  # nbdkit prints the description on the line after "(PLUGIN)".
  local desc b
  desc=$(awk -v p="($PLUGIN)" 'found { print; exit } $0 == p { found = 1 }' \
           <<<"$output")
  [ -n "$desc" ] || fail "no description after ($PLUGIN): $output"
  for b in file memory nbd; do
    if [[ "$desc" != *"($b=)"* ]]; then
      fail "the description does not name $b=: $desc"
    fi
  done
  [[ "$desc" == *"remote NBD exports"* ]] || fail "no NBD in: $desc"
}

@test "config: --dump-plugin lists the backends and the elevators" {
  run timeout 30 "$NBDKIT" --dump-plugin "$PLUGIN"
  assert_success
  # rbd only where configure found librbd.
  assert_line --regexp '^plugq_backends=file,memory,nbd(,rbd)?$'
  assert_line 'plugq_elevators=deadline,noop'
}

@test "config: --dump-plugin reports plugq_version" {
  run timeout 30 "$NBDKIT" --dump-plugin "$PLUGIN"
  assert_success
  assert_line --regexp '^name=plugq$'
  assert_line --regexp '^plugq_version=[0-9]+\.[0-9]+'
  assert_line 'thread_model=parallel'
  # The version is the one configure.ac declares.
  local want
  want=$(sed -n 's/^AC_INIT(\[plugq\], *\[\([^]]*\)\].*/\1/p' \
           "$BATS_TEST_DIRNAME/../configure.ac")
  [ -n "$want" ] || skip "no version found in configure.ac"
  assert_line --regexp "^plugq_version=${want//./\\.}"
}

# ---------------------------------------------------------------- export names

@test "config: an unknown export name is refused" {
  start_plugq disk=a file="$T/a.img" disk=b memory=1M
  run nbdinfo --size "$(uri nosuch)"
  assert_failure
  run nbdinfo --size "$(uri a)"
  assert_success
  assert_output "$MiB"
  pyrun <<'EOF'
import nbd
from plugqtest import connect
for name in ["nosuch", "A", "a ", "b/", "a.img", "default"]:
    try:
        connect(name)
    except nbd.Error:
        continue
    raise AssertionError("export name %r was accepted" % name)
EOF
}

@test "config: path-like export names are refused and never opened" {
  # nbdkit runs in $T/srv/x/y, so ../../etc/passwd names $T/srv/etc/passwd.
  mkdir -p "$T/srv/x/y" "$T/srv/etc"
  echo SECRET >"$T/srv/etc/passwd"
  local trace="$T/strace.out" traced=0
  if strace -f -qq -o /dev/null true 2>/dev/null; then
    PLUGQ_WRAPPER=(strace -f -qq -s 4096 -o "$trace" -e trace=%file)
    traced=1
  fi
  cd "$T/srv/x/y"
  start_plugq disk=a file="$T/a.img"
  cd "$T"
  pyrun "$T/srv/etc/passwd" "$T/a.img" <<'EOF'
import sys, nbd
from plugqtest import connect
names = ["../../etc/passwd", "/etc/passwd", "etc/passwd", "./a",
         "../a.img", sys.argv[1], sys.argv[2]]
for name in names:
    try:
        h = connect(name)
    except nbd.Error:
        continue
    raise AssertionError("export name %r was accepted (size %d, starts %r)"
                         % (name, h.get_size(), bytes(h.pread(6, 0))))
EOF
  stop_plugq
  if [ "$traced" = 1 ]; then
    assert_file_exists "$trace"
    # The server did trace its own start (sanity: the trace is real).
    grep -qF "$T/a.img" "$trace" || fail "strace did not trace nbdkit: $(head -5 "$trace")"
    run grep -E 'etc/passwd|\.\./a\.img|"\./a"' "$trace"
    if [ "$status" -eq 0 ]; then
      fail "nbdkit used an export name as a path: $output"
    fi
  fi
}
