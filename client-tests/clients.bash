# client-tests/clients.bash: what clients.bats and clients-qemu.bats share.
# Real clients against plugq: qemu-img, qemu-io, nbdcopy, nbdinfo and fio's
# nbd engine.  Every scenario runs four times: on a plain file disk and on a
# linear volume of two file disks (48 MiB + 80 MiB, so I/O crosses the
# member boundary at 48 MiB), each with ack=queued and ack=dispatched (two
# of the four under the sanitizers: combo_start).  The test name says
# which: [disk|vol, ack=queued|dispatched].
#
# Every server serves the same exports: d (one 128 MiB file), a (48 MiB),
# b (80 MiB) and vol = a,b (128 MiB).  A scenario uses d or vol; after
# nbdkit exited (its cleanup drains every queue) the backing files must
# hold exactly what the client last wrote, and the files of the export the
# scenario did not use must still be all zero.

load helpers

setup() {
  plugq_setup
  T=$BATS_TEST_TMPDIR
}

teardown() {
  plugq_teardown
}

SIZE=$((128 * MiB))
BOUND=$((48 * MiB)) # where member a ends and b begins in vol

# ------------------------------------------------------------- combinations

# combo_start disk|vol queued|dispatched [QUEUE-KEYS...]: fresh sparse
# backing files, a server with the exports above, and for the scenario:
# EXP (export name), URI, BACKING_FILES (the files under EXP, in order),
# OTHER_FILES (the files under the other export), BACKING
# ("path:size,path:size", for Python).
combo_start() {
  COMBO_KIND=$1 COMBO_ACK=$2
  shift 2
  # Under the sanitizers all four combinations of every scenario took six
  # of CI's fifteen minutes.  Two of them go through every code path the
  # other two do (a disk and a volume, each ack mode); the plain build
  # runs all four.
  case $COMBO_KIND/$COMBO_ACK in
    disk/dispatched | vol/queued)
      [ -z "${PLUGQ_SANITIZED:-}" ] \
        || skip "sanitized run: [disk, ack=queued] and [vol, ack=dispatched] cover it"
      ;;
  esac
  make_file "$T/d.img" 128M
  make_file "$T/a.img" 48M
  make_file "$T/b.img" 80M
  COMBO_KEYS=("$@")
  case $COMBO_KIND in
    disk)
      EXP=d
      BACKING_FILES=("$T/d.img")
      OTHER_FILES=("$T/a.img" "$T/b.img")
      ;;
    vol)
      EXP=vol
      BACKING_FILES=("$T/a.img" "$T/b.img")
      OTHER_FILES=("$T/d.img")
      ;;
    *) fail "combo_start: unknown kind $COMBO_KIND"; return 1 ;;
  esac
  local f parts=()
  for f in "${BACKING_FILES[@]}"; do parts+=("$f:$(stat -c %s "$f")"); done
  BACKING=$(IFS=,; echo "${parts[*]}")
  export BACKING EXP
  echo "# scenario: export $EXP ($COMBO_KIND), ack=$COMBO_ACK ${COMBO_KEYS[*]}"
  combo_restart
}

# combo_restart: starts the server again on the same backing files.
combo_restart() {
  start_plugq ack="$COMBO_ACK" "${COMBO_KEYS[@]}" \
    disk=d file="$T/d.img" disk=a file="$T/a.img" disk=b file="$T/b.img" \
    linear=vol:a,b
  URI=$(uri "$EXP")
  export URI
}

# combo_stop: stops nbdkit (must exit 0: its cleanup drained the queues),
# makes $T/backing.img the backing files of EXP (the file itself for a
# disk, the members joined for a volume) and checks that the other
# export's files were never written.
combo_stop() {
  stop_plugq || { fail "nbdkit did not exit cleanly"; return 1; }
  rm -f "$T/backing.img"
  if [ ${#BACKING_FILES[@]} -eq 1 ]; then
    ln -s "${BACKING_FILES[0]}" "$T/backing.img"
  else
    cat "${BACKING_FILES[@]}" >"$T/backing.img"
  fi
  local f
  for f in "${OTHER_FILES[@]}"; do
    # combo_start made them sparse: no block allocated means nothing was
    # written, and spares reading them (half a second each).
    [ "$(stat -c %b "$f")" -eq 0 ] || cmp -n "$(stat -c %s "$f")" "$f" /dev/zero ||
      { fail "$(basename "$f") belongs to the export this scenario did not use, but it is not all zero"; return 1; }
  done
}

# expect_backing FILE: after combo_stop, the backing files of EXP hold
# exactly FILE.
expect_backing() {
  local out
  out=$(cmp "$T/backing.img" "$1" 2>&1) && return 0
  local byte
  byte=$(sed -n 's/.*differ: byte \([0-9]*\).*/\1/p' <<<"$out")
  if [ -n "$byte" ]; then
    fail "backing files of $EXP differ from what the client last wrote ($1) at offset $((byte - 1))$(backing_where $((byte - 1))): $out"; return 1
  fi
  fail "backing files of $EXP differ from $1: $out"; return 1
}

# expect_backing_now FILE: while the server runs, the backing files of EXP
# already hold FILE (what a FLUSH made durable).
expect_backing_now() {
  local out
  out=$(cat "${BACKING_FILES[@]}" | cmp - "$1" 2>&1) && return 0
  fail "backing files of $EXP (read while the server runs) differ from $1: $out"; return 1
}

# backing_where OFFSET: " (file+offset)" for an offset of EXP.
backing_where() {
  local off=$1 f size
  for f in "${BACKING_FILES[@]}"; do
    size=$(stat -c %s "$f")
    if [ "$off" -lt "$size" ]; then
      echo " ($(basename "$f")+$off)"
      return
    fi
    off=$((off - size))
  done
}

# random_src: prints the path of a 128 MiB file of random data, made once
# per file of tests.
random_src() {
  local f=$BATS_FILE_TMPDIR/random.raw
  if [ ! -s "$f" ]; then
    head -c "$SIZE" /dev/urandom >"$f.tmp" && mv "$f.tmp" "$f"
  fi
  echo "$f"
}

# qemu_io_ok IMAGE-OPTS... -- CMD...: runs qemu-io with each CMD as a -c
# and checks every command's result, since qemu-io goes on after a failed
# command: no error line, and one "wrote/read/discard N/N bytes at offset
# O" line per write, read and discard command, with its own offset and
# length.
qemu_io_ok() {
  local opts=() cmds=() c args=()
  while [ "$1" != "--" ]; do opts+=("$1"); shift; done
  shift
  cmds=("$@")
  for c in "${cmds[@]}"; do args+=(-c "$c"); done
  run qemu-io "${opts[@]}" "${args[@]}"
  if [ "$status" -ne 0 ]; then
    fail "qemu-io ${opts[*]} exited $status: $output"; return 1
  fi
  if grep -Eiq 'fail|error|invalid|not found|not supported|unrecognized|mismatch' <<<"$output"; then
    fail "qemu-io ${opts[*]} reported an error: $output"; return 1
  fi
  local verb len off word words
  for c in "${cmds[@]}"; do
    read -ra words <<<"$c"
    verb=${words[0]}
    # The last two words are OFFSET LENGTH for these commands.
    off=${words[-2]} len=${words[-1]}
    case $verb in
      write | aio_write) word=wrote ;;
      read | aio_read) word=read ;;
      discard | aio_discard) word=discard ;;
      *) continue ;;
    esac
    grep -Fqx "$word $len/$len bytes at offset $off" <<<"$output" ||
      { fail "qemu-io: no '$word $len/$len bytes at offset $off' for '$c': $output"; return 1; }
  done
}

# pyclient ARGS... <<'EOF': like pyrun, with the helpers in CLIENTS_PY
# defined first (URI, EXP and BACKING come from the environment).
pyclient() {
  { printf '%s\n' "$CLIENTS_PY"; cat; } | pyrun "$@"
}

CLIENTS_PY=$(cat <<'PYEOF'
import json, os, re, select, subprocess, sys, time
from plugqtest import *

SIZE = 128 * MiB
BOUND = 48 * MiB
URI = os.environ.get("URI")
LAYOUT = [(p, int(s)) for p, s in
          (x.rsplit(":", 1) for x in os.environ.get("BACKING", "x:0").split(","))]


def backing_where(off):
    base = 0
    for path, size in LAYOUT:
        if off < base + size:
            return "%s+%d" % (os.path.basename(path), off - base)
        base += size
    return "past the end"


def backing_read(off, n):
    """n bytes at export offset off, read straight from the backing file(s)."""
    out = bytearray()
    base = 0
    for path, size in LAYOUT:
        lo, hi = max(off, base), min(off + n, base + size)
        if lo < hi:
            out += fread(path, lo - base, hi - lo)
        base += size
    return bytes(out)


def expect_backing(off, want, what):
    got = backing_read(off, len(want))
    try:
        expect_bytes(got, want, what, off)
    except AssertionError as e:
        raise AssertionError("%s [backing files of export %s, range starts at %s]"
                             % (e, os.environ.get("EXP"), backing_where(off)))


ERROR_RE = re.compile(r"fail|error|invalid|not found|not supported|unrecognized|mismatch",
                      re.I)
PROMPT = "qemu-io> "


class QemuIO:
    """qemu-io as a long-running child fed one command at a time, so that
    the backing files can be inspected between commands while the image is
    still open (qemu-io flushes when it closes)."""

    def __init__(self, *args):
        self.p = subprocess.Popen(["qemu-io"] + list(args), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.buf = ""
        self.pos = 0
        self.log = []
        self._wait_prompt("start")

    def _wait_prompt(self, what, timeout=60):
        fd = self.p.stdout.fileno()
        deadline = time.monotonic() + timeout
        while True:
            i = self.buf.find(PROMPT, self.pos)
            if i >= 0:
                out = self.buf[self.pos:i]
                self.pos = i + len(PROMPT)
                return out
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("qemu-io: no prompt after %r within %ds; output so far:\n%s"
                                     % (what, timeout, self.buf))
            r, _, _ = select.select([fd], [], [], left)
            if r:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise AssertionError("qemu-io exited during %r; output:\n%s"
                                         % (what, self.buf))
                self.buf += chunk.decode(errors="replace")

    def cmd(self, c, expect=()):
        """Runs one command; fails on any error text, or if a line of
        expect (exact lines) is missing.  Returns the output."""
        self.p.stdin.write((c + "\n").encode())
        self.p.stdin.flush()
        out = self._wait_prompt(c)
        self.log.append("qemu-io> %s\n%s" % (c, out))
        if ERROR_RE.search(out):
            raise AssertionError("qemu-io command %r failed:\n%s" % (c, out))
        lines = out.splitlines()
        for e in expect:
            if e not in lines:
                raise AssertionError("qemu-io command %r: expected the line %r, got:\n%s"
                                     % (c, e, out))
        return out

    def write(self, off, n, byte, flags=""):
        """write [flags] -P byte off n; flags "-f" is FUA, "-z" zeroes."""
        pat = "" if "-z" in flags else "-P %d " % byte
        return self.cmd("write %s %s%d %d" % (flags, pat, off, n),
                        ["wrote %d/%d bytes at offset %d" % (n, n, off)])

    def read(self, off, n, byte):
        return self.cmd("read -P %d %d %d" % (byte, off, n),
                        ["read %d/%d bytes at offset %d" % (n, n, off)])

    def discard(self, off, n):
        return self.cmd("discard %d %d" % (off, n),
                        ["discard %d/%d bytes at offset %d" % (n, n, off)])

    def aio_group(self, cmds, expect):
        """Submits every aio command, then aio_flush (which waits for them
        all); the completions must print every line of expect."""
        out = ""
        for c in cmds:
            out += self.cmd(c)
        out += self.cmd("aio_flush")
        lines = out.splitlines()
        for e in expect:
            if lines.count(e) != 1:
                raise AssertionError("qemu-io aio group: expected the line %r once, got:\n%s"
                                     % (e, out))
        return out

    def close(self):
        self.p.stdin.write(b"quit\n")
        self.p.stdin.close()
        rest = self.p.stdout.read().decode(errors="replace")
        rc = self.p.wait(timeout=60)
        if rc != 0 or ERROR_RE.search(rest):
            raise AssertionError("qemu-io exited %d; last output:\n%s" % (rc, rest))
PYEOF
)

# ------------------------------------------------------------ qemu-img

# qemu_img_raw KIND ACK: info; a 128 MiB random raw file converted into
# the export (out of order, -W -m 16) and back out; compare both ways; one byte changed over NBD
# makes compare fail at that sector; the backing files hold the source
# with that byte.
qemu_img_raw() {
  combo_start "$@"
  local src json off old new
  src=$(random_src)

  run qemu-img info --output=json "$URI"
  assert_success
  json=$output
  run jq -r '."virtual-size"' <<<"$json"
  assert_output "$SIZE"
  run jq -r '.format' <<<"$json"
  assert_output raw

  # Out of order (-W) with 16 coroutines: many writes in flight at once.
  run qemu-img convert -n -W -m 16 -f raw -O raw "$src" "$URI"
  assert_success
  run qemu-img compare -f raw -F raw "$src" "$URI"
  assert_success
  assert_output "Images are identical."
  run qemu-img compare -f raw -F raw "$URI" "$src"
  assert_success
  assert_output "Images are identical."

  run qemu-img convert -f raw -O raw "$URI" "$T/out.raw"
  assert_success
  cmp "$src" "$T/out.raw" || { fail "qemu-img convert out of $EXP differs from what was converted in"; return 1; }

  # One byte changed through NBD: the first byte of member b in vol.
  off=$BOUND
  old=$(od -An -tu1 -j "$off" -N1 "$src" | tr -d ' ')
  new=$((old ^ 0xff))
  qemu_io_ok -f raw "$URI" -- "write -P $new $off 1"
  run qemu-img compare -f raw -F raw "$src" "$URI"
  assert_failure 1
  assert_output "Content mismatch at offset $((off / 512 * 512))!"
  run qemu-img compare -f raw -F raw "$URI" "$src"
  assert_failure 1
  assert_output "Content mismatch at offset $((off / 512 * 512))!"

  cp "$src" "$T/expected.raw"
  printf "\\x$(printf %02x "$new")" |
    dd of="$T/expected.raw" bs=1 seek="$off" conv=notrunc status=none
  combo_stop
  expect_backing "$T/expected.raw"
}

# qemu_img_qcow2 KIND ACK: qemu-img create -f qcow2 INTO the export (the
# nbd protocol cannot create, so qemu-img opens the existing export and
# formats it), info shows qcow2, convert -n of 64 MiB of random data into
# it (the qcow2 file then crosses 48 MiB: both members of vol), check,
# compare both ways, convert out, a qemu-io write into the qcow2; after
# nbdkit exits, the joined backing files are a clean qcow2 holding the
# same data.
qemu_img_qcow2() {
  combo_start "$@"
  local src json end
  head -c $((64 * MiB)) "$(random_src)" >"$T/src64.raw"
  src=$T/src64.raw

  run qemu-img create -f qcow2 "$URI" 64M
  assert_success
  run qemu-img info --output=json "$URI"
  assert_success
  json=$output
  run jq -r '.format' <<<"$json"
  assert_output qcow2
  run jq -r '."virtual-size"' <<<"$json"
  assert_output $((64 * MiB))
  run qemu-img check "$URI"
  assert_success
  assert_line "No errors were found on the image."

  run qemu-img convert -n -f raw -O qcow2 "$src" "$URI"
  assert_success
  run qemu-img check --output=json "$URI"
  assert_success
  json=$output
  run jq -r '[.corruptions // 0, .leaks // 0, ."check-errors"] | join(",")' <<<"$json"
  assert_output 0,0,0
  run jq -r '."allocated-clusters"' <<<"$json"
  assert_output 1024
  end=$(jq -r '."image-end-offset"' <<<"$json")
  [ "$end" -gt "$BOUND" ] || { fail "the qcow2 ends at $end, before the 48 MiB boundary: $json"; return 1; }

  run qemu-img compare -f raw -F qcow2 "$src" "$URI"
  assert_success
  assert_output "Images are identical."
  run qemu-img compare -f qcow2 -F raw "$URI" "$src"
  assert_success
  assert_output "Images are identical."
  run qemu-img convert -f qcow2 -O raw "$URI" "$T/out.raw"
  assert_success
  cmp "$src" "$T/out.raw" || { fail "raw converted out of the qcow2 in $EXP differs from the source"; return 1; }

  # A guest-style write into the qcow2, then check again.
  qemu_io_ok -f qcow2 "$URI" -- "write -P 0x5a $((40 * MiB)) $((3 * MiB))" \
    "read -P 0x5a $((40 * MiB)) $((3 * MiB))"
  cp "$src" "$T/expected64.raw"
  head -c $((3 * MiB)) /dev/zero | tr '\0' '\132' |
    dd of="$T/expected64.raw" bs=1M seek=40 conv=notrunc status=none
  run qemu-img check "$URI"
  assert_success
  assert_line "No errors were found on the image."
  run qemu-img compare -f raw -F qcow2 "$T/expected64.raw" "$URI"
  assert_success

  combo_stop
  run qemu-img info --output=json "$T/backing.img"
  assert_success
  run jq -r '.format' <<<"$output"
  assert_output qcow2
  run qemu-img check -f qcow2 "$T/backing.img"
  assert_success
  assert_line "No errors were found on the image."
  run qemu-img compare -f raw -F qcow2 "$T/expected64.raw" "$T/backing.img"
  assert_success
  assert_output "Images are identical."
}

# qemu_img_map KIND ACK: a sparse pattern written with qemu-io (data, write
# -z inside data across 48 MiB, discard inside data, data at the very end);
# qemu-img map and nbdinfo --map report exactly those data and zero regions,
# before and after a restart; the contents read back and land in the files.
MAP_CMDS=(
  "write -P 0xaa $((1 * MiB)) $((1 * MiB))"
  "write -P 0xbb $((47 * MiB)) $((2 * MiB))"
  "write -z $((47 * MiB + 512 * KiB)) $((1 * MiB))"
  "write -P 0xcc $((100 * MiB)) $((4 * MiB))"
  "discard $((101 * MiB)) $((1 * MiB))"
  "write -P 0xdd $((128 * MiB - 64 * KiB)) $((64 * KiB))"
)
MAP_READS=(
  "read -P 0 0 $((1 * MiB))"
  "read -P 0xaa $((1 * MiB)) $((1 * MiB))"
  "read -P 0 $((2 * MiB)) $((45 * MiB))"
  "read -P 0xbb $((47 * MiB)) $((512 * KiB))"
  "read -P 0 $((47 * MiB + 512 * KiB)) $((1 * MiB))"
  "read -P 0xbb $((48 * MiB + 512 * KiB)) $((512 * KiB))"
  "read -P 0 $((49 * MiB)) $((51 * MiB))"
  "read -P 0xcc $((100 * MiB)) $((1 * MiB))"
  "read -P 0 $((101 * MiB)) $((1 * MiB))"
  "read -P 0xcc $((102 * MiB)) $((2 * MiB))"
  "read -P 0 $((104 * MiB)) $((24 * MiB - 64 * KiB))"
  "read -P 0xdd $((128 * MiB - 64 * KiB)) $((64 * KiB))"
)

# check_map strict|loose: qemu-img map --output=json and nbdinfo --map
# --json of URI against the pattern: data regions must be data and not
# zero, never-written and discarded regions zero.  The write -z region is
# an unwritten extent on ext4, which SEEK_DATA reports as a hole only while
# none of its pages is cached: "strict" (before anything read it) wants it
# zero, "loose" (after reads) also accepts data there, which NBD allows.
check_map() {
  local mode=$1
  run qemu-img map --output=json -f raw "$URI"
  assert_success
  echo "$output" >"$T/qmap.json"
  run nbdinfo --map --json "$URI"
  assert_success
  echo "$output" >"$T/nmap.json"
  pyclient "$T/qmap.json" "$T/nmap.json" "$mode" <<'EOF'
M, K = MiB, KiB
want = [(0, 1*M, True), (1*M, 1*M, False), (2*M, 45*M, True),
        (47*M, 512*K, False), (47*M + 512*K, 1*M, True), (48*M + 512*K, 512*K, False),
        (49*M, 51*M, True), (100*M, 1*M, False), (101*M, 1*M, True),
        (102*M, 2*M, False), (104*M, 24*M - 64*K, True), (128*M - 64*K, 64*K, False)]
wants = [want]
if sys.argv[3] == "loose":
    # The write -z region read as data: one data region 47M..49M.
    wants.append(want[:3] + [(47*M, 2*M, False)] + want[6:])

def merge(ext):
    out = []
    for o, n, z in ext:
        if out and out[-1][2] == z and out[-1][0] + out[-1][1] == o:
            out[-1] = (out[-1][0], out[-1][1] + n, z)
        else:
            out.append((o, n, z))
    return out

q = json.load(open(sys.argv[1]))
for e in q:
    if not e["zero"] and not e["data"]:
        raise AssertionError("qemu-img map: %r is neither data nor zero" % e)
got = merge([(e["start"], e["length"], e["zero"]) for e in q])
if got not in wants:
    raise AssertionError("qemu-img map (offset, length, zero) on %s:\n got  %r\n want %r\n raw %s"
                         % (os.environ["EXP"], got, want, json.dumps(q)))
n = json.load(open(sys.argv[2]))
got = merge([(e["offset"], e["length"], bool(e["type"] & 2)) for e in n])
if got not in wants:
    raise AssertionError("nbdinfo --map (offset, length, zero) on %s:\n got  %r\n want %r"
                         % (os.environ["EXP"], got, want))
EOF
}

qemu_img_map() {
  combo_start "$@"
  qemu_io_ok -f raw "$URI" -- "${MAP_CMDS[@]}"
  check_map strict
  qemu_io_ok -f raw "$URI" -- "${MAP_READS[@]}"
  check_map loose
  # The expected image.
  pyclient "$T/expected.raw" <<'EOF'
img = bytearray(SIZE)
for off, n, b in ((1*MiB, MiB, 0xaa), (47*MiB, 512*KiB, 0xbb), (48*MiB + 512*KiB, 512*KiB, 0xbb),
                  (100*MiB, MiB, 0xcc), (102*MiB, 2*MiB, 0xcc), (128*MiB - 64*KiB, 64*KiB, 0xdd)):
    img[off:off + n] = fill(b, n)
save_image(sys.argv[1], img)
EOF
  combo_stop
  expect_backing "$T/expected.raw"
  # Restarted on the same files: the same map and contents.
  combo_restart
  check_map loose
  qemu_io_ok -f raw "$URI" -- "${MAP_READS[@]}"
  combo_stop
  expect_backing "$T/expected.raw"
}

# ------------------------------------------------------------- qemu-io

# qemu_io_scenario KIND ACK: one long-running qemu-io (so it does not flush
# on close between steps); the backing files are read straight after each
# FUA write and each flush.  The queue is made long (LONG_QUEUE): with
# ack=queued a plain write stays queued, so the FUA and flush checks are
# not satisfied by a timer that happened to fire; with ack=dispatched every
# answered write must already be in the files, which only the writer's own
# unplug can bring about.
qemu_io_scenario() {
  combo_start "$1" "$2" "${LONG_QUEUE[@]}"
  pyclient "$COMBO_ACK" "$T/expected.raw" <<'EOF'
ack, expected_path = sys.argv[1], sys.argv[2]
B = BOUND
img = bytearray(SIZE)
# qemu-io's default cache mode is writethrough, which sends every write
# with FUA; writeback makes plain writes plain.
q = QemuIO("-t", "writeback", "-f", "raw", URI)

def wrote(off, n, byte):
    img[off:off + n] = fill(byte, n)

# 1. A plain write straddling 48 MiB, read back through the server.
q.write(B - 64*KiB, 128*KiB, 0x11); wrote(B - 64*KiB, 128*KiB, 0x11)
q.read(B - 64*KiB, 128*KiB, 0x11)
if ack == "dispatched":
    expect_backing(B - 64*KiB, fill(0x11, 128*KiB), "ack=dispatched: answered write")
else:
    # Control: with a long queue the plain write is not in the files yet,
    # so what the FUA check below sees is the FUA's doing.
    if backing_read(B - 64*KiB, 128*KiB) == fill(0x11, 128*KiB):
        raise AssertionError("ack=queued with a long queue: the plain write is already in "
                             "the backing files, the FUA check would prove nothing")

# 2. FUA write over the middle of it: durable before the answer.
q.write(B - 32*KiB, 64*KiB, 0x22, "-f"); wrote(B - 32*KiB, 64*KiB, 0x22)
expect_backing(B - 32*KiB, fill(0x22, 64*KiB), "right after write -f (FUA)")
q.read(B - 64*KiB, 32*KiB, 0x11)
q.read(B - 32*KiB, 64*KiB, 0x22)
q.read(B + 32*KiB, 32*KiB, 0x11)

# 3. flush: everything answered before it is in the files.
q.cmd("flush")
expect_backing(B - 64*KiB, bytes(img[B - 64*KiB:B + 64*KiB]), "right after flush")

# 4. write -z (zeroes) straddling 48 MiB, and a FUA write -z.
q.write(B - 16*KiB, 32*KiB, 0, "-z"); wrote(B - 16*KiB, 32*KiB, 0)
q.read(B - 16*KiB, 32*KiB, 0)
q.read(B - 32*KiB, 16*KiB, 0x22)
q.read(B + 16*KiB, 16*KiB, 0x22)
q.write(B + 40*KiB, 8*KiB, 0, "-z -f"); wrote(B + 40*KiB, 8*KiB, 0)
expect_backing(B + 40*KiB, fill(0, 8*KiB), "right after write -z -f (FUA zero)")
q.read(B + 32*KiB, 8*KiB, 0x11)
q.read(B + 40*KiB, 8*KiB, 0)
q.read(B + 48*KiB, 16*KiB, 0x11)

# 4b. Unaligned: 3000 bytes of data and 1000 bytes of zeroes across 48 MiB.
q.write(B - 1000, 3000, 0x12); wrote(B - 1000, 3000, 0x12)
q.write(B - 500, 1000, 0, "-z"); wrote(B - 500, 1000, 0)
q.read(B - 1000, 500, 0x12)
q.read(B - 500, 1000, 0)
q.read(B + 500, 1500, 0x12)

# 5. discard inside data on member a, reads as zero.
q.write(B - 2*MiB, 256*KiB, 0x33); wrote(B - 2*MiB, 256*KiB, 0x33)
q.discard(B - 2*MiB + 64*KiB, 64*KiB); wrote(B - 2*MiB + 64*KiB, 64*KiB, 0)
q.read(B - 2*MiB, 64*KiB, 0x33)
q.read(B - 2*MiB + 64*KiB, 64*KiB, 0)
q.read(B - 2*MiB + 128*KiB, 128*KiB, 0x33)
q.cmd("flush")
expect_backing(B - 2*MiB, bytes(img[B - 2*MiB:B - 2*MiB + 256*KiB]), "flush after discard")

# 6. aio: eight 256 KiB writes from 47 MiB to 49 MiB in flight at once,
#    aio reads of each, a FUA aio write, then flush.
base = B - MiB
ws = [(base + i*256*KiB, 0x41 + i) for i in range(8)]
q.aio_group(["aio_write -P %d %d %d" % (b, o, 256*KiB) for o, b in ws],
            ["wrote %d/%d bytes at offset %d" % (256*KiB, 256*KiB, o) for o, b in ws])
for o, b in ws:
    wrote(o, 256*KiB, b)
q.aio_group(["aio_read -P %d %d %d" % (b, o, 256*KiB) for o, b in ws],
            ["read %d/%d bytes at offset %d" % (256*KiB, 256*KiB, o) for o, b in ws])
q.aio_group(["aio_write -f -P 0x55 %d %d" % (B + 2*MiB, 64*KiB)],
            ["wrote %d/%d bytes at offset %d" % (64*KiB, 64*KiB, B + 2*MiB)])
wrote(B + 2*MiB, 64*KiB, 0x55)
expect_backing(B + 2*MiB, fill(0x55, 64*KiB), "right after aio_write -f (FUA)")
q.cmd("flush")
expect_backing(base, bytes(img[base:base + 2*MiB]), "aio writes after flush")

# 7. Last, plain writes that stay queued until qemu-io closes: the close
#    flushes, nbdkit's exit drains; the files must hold them.
q.write(0, 4096, 0x66); wrote(0, 4096, 0x66)
q.write(SIZE - 4096, 4096, 0x77); wrote(SIZE - 4096, 4096, 0x77)
q.write(B - 100, 200, 0x88); wrote(B - 100, 200, 0x88)
q.read(B - 100, 200, 0x88)
q.close()
save_image(expected_path, img)
EOF
  combo_stop
  expect_backing "$T/expected.raw"
}

# ------------------------------------------------------------- nbdcopy

# sparse_src PATH: 128 MiB with random data at 0..5M, 46M..49M and at the
# last MiB, holes elsewhere.
sparse_src() {
  local src
  src=$(random_src)
  make_file "$1" 128M
  dd if="$src" of="$1" bs=1M count=5 conv=notrunc status=none
  dd if="$src" of="$1" bs=1M skip=60 seek=46 count=3 conv=notrunc status=none
  dd if="$src" of="$1" bs=1M skip=90 seek=127 count=1 conv=notrunc status=none
}

# nbdcopy_scenario KIND ACK: file -> plugq over 4 connections with --flush
# (all of it durable when nbdcopy returns), plugq -> file, then a sparse file -> plugq over 4
# connections (multi-conn) without flush, plugq -> file over 4
# connections; cmp each; after nbdkit exits the files hold the last copy.
nbdcopy_scenario() {
  combo_start "$@"
  local src
  src=$(random_src)

  # Four connections, and a flush at the end: with multi-conn, the flush
  # covers what every connection wrote, so the files hold it all now.
  run nbdcopy -v --flush --connections=4 --threads=4 "$src" "$URI"
  assert_success
  grep -q '^nbdcopy: connections=4 ' <<<"$output" ||
    { fail "nbdcopy --flush did not use 4 connections (multi-conn): $(grep '^nbdcopy:' <<<"$output")"; return 1; }
  grep -Eq 'nbd_(aio_)?flush: enter' <<<"$output" ||
    { fail "nbdcopy --flush sent no flush: $(grep '^nbdcopy:' <<<"$output")"; return 1; }
  expect_backing_now "$src"
  run nbdcopy "$URI" "$T/out1.raw"
  assert_success
  cmp "$src" "$T/out1.raw" || { fail "nbdcopy out of $EXP differs from what was copied in"; return 1; }

  sparse_src "$T/sparse.raw"
  run nbdcopy -v --connections=4 --threads=4 "$T/sparse.raw" "$URI"
  assert_success
  grep -q '^nbdcopy: connections=4 ' <<<"$output" ||
    { fail "nbdcopy did not use 4 connections (multi-conn): $(grep '^nbdcopy:' <<<"$output")"; return 1; }
  [ "$(grep -c 'dst[0-9]*: nbd_connect_uri: enter' <<<"$output")" -eq 4 ] ||
    { fail "nbdcopy did not open 4 destination connections: $(grep 'nbd_connect_uri: enter' <<<"$output")"; return 1; }
  run nbdcopy -v -C 4 -T 4 "$URI" "$T/out2.raw"
  assert_success
  grep -q '^nbdcopy: connections=4 ' <<<"$output" ||
    { fail "nbdcopy (reading) did not use 4 connections: $(grep '^nbdcopy:' <<<"$output")"; return 1; }
  cmp "$T/sparse.raw" "$T/out2.raw" ||
    { fail "nbdcopy out of $EXP (4 connections) differs from the sparse file copied in"; return 1; }
  # The earlier random data under the holes must be gone (zeroed).
  run qemu-img compare -f raw -F raw "$T/sparse.raw" "$URI"
  assert_success

  combo_stop
  expect_backing "$T/sparse.raw"
}

# ------------------------------------------------------------- nbdinfo

# nbdinfo_scenario KIND ACK: --list shows every disk and the volume with
# their sizes; --size; --can fua/flush/trim/zero/multi-conn/fast-zero/cache
# exit 0 and --is read-only exits non-zero; --json fields; --map sees data
# written (not flushed; with ack=queued still queued) by a connection that
# is already closed.
nbdinfo_scenario() {
  if [ "$2" = queued ]; then
    combo_start "$1" "$2" "${LONG_QUEUE[@]}"
  else
    combo_start "$1" "$2"
  fi
  local json c

  run nbdinfo --list --json "$URI"
  assert_success
  json=$output
  run jq -r '[.exports[] | "\(."export-name")=\(."export-size")"] | sort | join(" ")' <<<"$json"
  assert_output "a=$((48 * MiB)) b=$((80 * MiB)) d=$SIZE vol=$SIZE"
  run jq -r '.exports[] | select(."export-name" == "vol") | .description' <<<"$json"
  assert_output --regexp 'a.*b'
  run nbdinfo --list "$URI"
  assert_success
  for c in d a b vol; do assert_line "export=\"$c\":"; done

  run nbdinfo --size "$URI"
  assert_success
  assert_output "$SIZE"

  for c in fua flush trim zero multi-conn fast-zero cache write; do
    run nbdinfo --can "$c" "$URI"
    [ "$status" -eq 0 ] || { fail "nbdinfo --can $c $URI exited $status: $output"; return 1; }
  done
  run nbdinfo --is read-only "$URI"
  [ "$status" -ne 0 ] || { fail "nbdinfo --is read-only $URI says yes"; return 1; }
  [ "$status" -eq 2 ] || { fail "nbdinfo --is read-only $URI failed ($status): $output"; return 1; }

  run nbdinfo --json "$URI"
  assert_success
  json=$output
  run jq -r '.exports | length' <<<"$json"
  assert_output 1
  run jq -r '.exports[0] | [."export-name", ."export-size", .is_read_only,
    .can_flush, .can_fua, .can_trim, .can_zero, .can_fast_zero, .can_multi_conn,
    .can_cache, (.contexts | index("base:allocation") != null),
    .block_size_minimum, .block_size_preferred] | map(tostring) | join(" ")' <<<"$json"
  assert_output "$EXP $SIZE false true true true true true true true true 1 4096"
  run jq -r '.structured' <<<"$json"
  assert_output true

  # Data written on one connection, not flushed (320 KiB in all, below
  # max-merge, so a long queue keeps it); --map on another connection.
  pyclient "$COMBO_ACK" <<'EOF'
h = connect(os.environ["EXP"])
h.pwrite(fill(0xee, 256 * KiB), BOUND - 128 * KiB)
h.pwrite(fill(0xef, 64 * KiB), 100 * MiB)
h.shutdown()
if sys.argv[1] == "queued":
    # Control: still queued, so --map below has to see the queue.
    if backing_read(BOUND - 128 * KiB, 256 * KiB) == fill(0xee, 256 * KiB):
        raise AssertionError("ack=queued with a long queue: the write is already in the files")
else:
    expect_backing(BOUND - 128 * KiB, fill(0xee, 256 * KiB), "ack=dispatched: answered write")
EOF
  run nbdinfo --map --json "$URI"
  assert_success
  # Data extents (not zero), adjacent ones joined (a volume may split
  # them at the member boundary).
  run jq -r '[.[] | select(.type % 4 < 2)]
    | reduce .[] as $e ([]; if length > 0 and (.[-1][0] + .[-1][1]) == $e.offset
                            then .[-1][1] += $e.length else . + [[$e.offset, $e.length]] end)
    | .[] | "\(.[0])+\(.[1])"' <<<"$output"
  assert_output "$((BOUND - 128 * KiB))+$((256 * KiB))
$((100 * MiB))+$((64 * KiB))"
  run nbdinfo --map --totals "$URI"
  assert_success
  assert_line --regexp "^ *$((320 * KiB)) +[0-9.]+% +0 +data\$"

  pyclient "$T/expected.raw" <<'EOF'
img = bytearray(SIZE)
img[BOUND - 128 * KiB:BOUND + 128 * KiB] = fill(0xee, 256 * KiB)
img[100 * MiB:100 * MiB + 64 * KiB] = fill(0xef, 64 * KiB)
save_image(sys.argv[1], img)
EOF
  combo_stop
  expect_backing "$T/expected.raw"
}

# ------------------------------------------------------------- fio

# fio_json FILE: the JSON document fio wrote (it may put warnings first).
fio_json() {
  sed -n '/^{/,$p' "$1"
}

# fio_expect_ok JSON-FILE NJOBS BYTES: fio ran NJOBS jobs, none failed, each
# wrote (unless verify-only) and verified BYTES.
fio_expect_ok() {
  local json
  json=$(fio_json "$1")
  run jq -r '.jobs | length' <<<"$json"
  [ "$output" = "$2" ] || { fail "fio ran $output jobs, not $2: $(head -c 3000 <<<"$json")"; return 1; }
  run jq -r '.jobs[] | select(.error != 0) | "\(.jobname): error \(.error)"' <<<"$json"
  [ -z "$output" ] || { fail "fio jobs failed: $output"; return 1; }
  run jq -r ".jobs[] | select(.read.io_bytes != $3) | \"\(.jobname): verified \(.read.io_bytes)\"" <<<"$json"
  [ -z "$output" ] || { fail "fio did not verify $3 bytes per job: $output"; return 1; }
  if [ "${4:-}" != verify-only ]; then
    run jq -r ".jobs[] | select(.write.io_bytes != $3) | \"\(.jobname): wrote \(.write.io_bytes)\"" <<<"$json"
    [ -z "$output" ] || { fail "fio did not write $3 bytes per job: $output"; return 1; }
  fi
}

# fio_run JOBFILE OUT: runs fio against the export; fails with fio's output.
fio_run() {
  # fio runs in the test's directory: it may leave files in its cwd.
  run bash -c 'cd "$1" && timeout 120 fio "$2" --output-format=json --output="$3"' \
    _ "$T" "$1" "$2"
  [ "$status" -eq 0 ] || { fail "fio $1 exited $status: $output $(cat "$2")"; return 1; }
}

# fio_verify_backing JOBFILE OUT: the same jobs with verify_only=1 and the
# psync engine on the joined backing files (after combo_stop): the files
# hold what fio last wrote, each block at its own offset.
fio_verify_backing() {
  sed -e 's/^ioengine=nbd$/ioengine=psync/' \
      -e "s|^uri=.*|filename=$T/backing.img|" "$1" >"$1.verify"
  sed -i 's/^\[global\]$/[global]\nverify_only=1/' "$1.verify"
  fio_run "$1.verify" "$2"
}

# expect_zero_outside "START:LEN ...": after combo_stop, every byte of
# backing.img outside the listed ranges is zero.
expect_zero_outside() {
  pyclient "$T/backing.img" "$@" <<'EOF'
path = sys.argv[1]
ranges = sorted(tuple(int(x) for x in r.split(":")) for r in sys.argv[2:])
pos = 0
with open(path, "rb") as f:
    for start, n in ranges + [(os.path.getsize(path), 0)]:
        if start > pos:
            f.seek(pos)
            data = f.read(start - pos)
            if data.count(0) != len(data):
                i = next(i for i, b in enumerate(data) if b)
                raise AssertionError("byte %d of %s (outside what fio wrote) is %#x, not zero"
                                     % (pos + i, os.environ["EXP"], data[i]))
        pos = max(pos, start + n)
EOF
}

# fio_depths KIND ACK: random and sequential writes at iodepth 1, 16 and 64,
# one after another (stonewall), each in its own 16 MiB region (the
# QD16 random one straddles 48 MiB), crc32c verify with verify_fatal.
fio_depths() {
  combo_start "$@"
  local job=$T/depths.fio
  cat >"$job" <<EOF
[global]
ioengine=nbd
uri=$URI
size=16M
verify=crc32c
do_verify=1
verify_fatal=1
verify_state_save=0
stonewall

[rand-qd1]
rw=randwrite
bs=64k
iodepth=1
offset=0

[seq-qd1]
rw=write
bs=64k
iodepth=1
offset=20M

[rand-qd16]
rw=randwrite
bs=4k
iodepth=16
offset=40M

[seq-qd16]
rw=write
bs=16k
iodepth=16
offset=60M

[rand-qd64]
rw=randwrite
bs=4k
iodepth=64
offset=80M

[seq-qd64]
rw=write
bs=16k
iodepth=64
offset=100M
EOF
  fio_run "$job" "$T/fio.json"
  fio_expect_ok "$T/fio.json" 6 $((16 * MiB))
  combo_stop
  fio_verify_backing "$job" "$T/fio-verify.json"
  fio_expect_ok "$T/fio-verify.json" 6 $((16 * MiB)) verify-only
  expect_zero_outside 0:$((16 * MiB)) $((20 * MiB)):$((16 * MiB)) \
    $((40 * MiB)):$((16 * MiB)) $((60 * MiB)):$((16 * MiB)) \
    $((80 * MiB)):$((16 * MiB)) $((100 * MiB)):$((16 * MiB))
}

# fio_multiconn KIND ACK: numjobs=4 (four connections at once, multi-conn),
# random writes at iodepth 16, each job its own 16 MiB region
# (offset_increment; the first one straddles 48 MiB), crc32c verify.
fio_multiconn() {
  combo_start "$@"
  run nbdinfo --can multi-conn "$URI"
  assert_success
  local job=$T/multi.fio
  cat >"$job" <<EOF
[global]
ioengine=nbd
uri=$URI
verify=crc32c
do_verify=1
verify_fatal=1
verify_state_save=0

[mc]
rw=randwrite
bs=4k
iodepth=16
size=16M
offset=40M
offset_increment=20M
numjobs=4
EOF
  fio_run "$job" "$T/fio.json"
  fio_expect_ok "$T/fio.json" 4 $((16 * MiB))
  combo_stop
  fio_verify_backing "$job" "$T/fio-verify.json"
  fio_expect_ok "$T/fio-verify.json" 4 $((16 * MiB)) verify-only
  expect_zero_outside $((40 * MiB)):$((16 * MiB)) $((60 * MiB)):$((16 * MiB)) \
    $((80 * MiB)):$((16 * MiB)) $((100 * MiB)):$((16 * MiB))
}
