#!/usr/bin/env bats
# A client that pipelines reads, never reads the replies and hangs up
# (issue 43).  nbdkit 1.32.4 and 1.32.5 (Debian 12's) then abort on
# "raw_send_socket: Assertion `sock >= 0' failed", taking every disk and
# every other client down; upstream fixed it in 1.34 ("server: Don't
# assert on send if client hangs up early").  plugq cannot work around
# it, so on those versions this test is skipped, and the man page's
# SECURITY says what to do.  On any other nbdkit the server must survive
# and serve the next client.
#
# The race needs one worker thread blocked sending a reply larger than
# the socket buffers while the others wait to send theirs: the client
# hangs up only once the stats file counts every read done.  16 reads of
# 4 MiB race as the 16 reads of 64 MiB of the report did, at a sixteenth
# of the memory (verified by hand against 1.32.5: it aborts on the first
# hang-up either way).

load helpers

ABORTS="${top_srcdir:-$BATS_TEST_DIRNAME/..}/scripts/nbdkit-early-hangup-abort.sh"

setup() {
  plugq_setup
  T=$BATS_TEST_TMPDIR
}

teardown() {
  plugq_teardown
}

@test "early hang-up: 16 pipelined reads never read, 3 times; nbdkit survives and serves the next client" {
  local v
  v=$("$NBDKIT" --version | awk '{ print $2 }')
  if "$ABORTS" "$v"; then
    skip "nbdkit $v aborts when a client hangs up early (fixed in nbdkit 1.34; man nbdkit-plugq-plugin, SECURITY)"
  fi
  start_plugq disk=d memory=64M disk=e memory=16M \
    stats="$T/s.json" stats-interval=20ms
  wait_for_file "$T/s.json"
  pyrun "$(uri d)" "$T/s.json" <<'EOF'
import sys, nbd
from plugqtest import *
u, stats = sys.argv[1:3]
buf = nbd.Buffer(4 * MiB)
for n in range(1, 4):
    h = nbd.NBD()
    h.connect_uri(u)
    for i in range(16):
        h.aio_pread(buf, i * 4 * MiB)
    poll(lambda: stat(load_stats(stats), "d", "read.requests") >= 16 * n,
         20, "the server done with all 16 reads of round %d" % n)
    del h                       # hangs up with every reply unread
for export in ("d", "e"):
    h = connect(export)
    h.pwrite(pattern(n, 64 * KiB), MiB, nbd.CMD_FLAG_FUA)
    expect_read(h, MiB, pattern(n, 64 * KiB), "the next client on " + export)
    h.shutdown()
EOF
  kill -0 "$(plugq_pid)" || fail "nbdkit is gone: $(cat "$PLUGQ_LOG")"
  run grep -i assert "$PLUGQ_LOG"
  assert_failure
  stop_plugq
}

# The headers plugq was built with are nbdkit's development package's
# (configure's pkg-config), and the verdict is the script's for them.
@test "early hang-up: --dump-plugin names the nbdkit plugq was built with and whether it aborts" {
  local built want=no
  built=$(pkg-config --modversion nbdkit)
  "$ABORTS" "$built" && want=yes
  run timeout 30 "$NBDKIT" --dump-plugin "$PLUGIN"
  assert_success
  assert_line "plugq_nbdkit_build_version=$built"
  assert_line "plugq_nbdkit_early_hangup_abort=$want"
}
