#!/usr/bin/env bats
# TLS with a pre-shared key: nbdkit --tls=require --tls-psk=FILE in front
# of plugq.  A client with the right user name and key reads and writes
# (through an nbds+unix:// URI and through the explicit libnbd calls); a
# client without TLS, with the wrong key or an unknown user name is
# refused and changes nothing.  libnbd 1.14 takes the PSK user name from
# the URI's user part (nbds+unix://alice@/...), and URIs may name a local
# PSK file only after set_uri_allow_local_file(True) (so plain nbdsh -u
# cannot use one).

load helpers

setup() {
  plugq_setup
  T=$BATS_TEST_TMPDIR
  F=$T/f.img
  local key
  key=$(openssl rand -hex 32)
  printf 'alice:%s\n' "$key" >"$T/keys.psk"
  printf 'alice:%s\n' "$(openssl rand -hex 32)" >"$T/wrong.psk"
  printf 'mallory:%s\n' "$key" >"$T/user.psk"
  chmod 600 "$T"/*.psk
  make_file "$F" 4M
  start_plugq --tls=require --tls-psk="$T/keys.psk" -- disk=f file="$F" disk=m memory=1M
}

teardown() {
  plugq_teardown
}

# tls_uri USER PSKFILE [EXPORT]
tls_uri() {
  printf 'nbds+unix://%s@/%s?socket=%s&tls-psk-file=%s\n' "$1" "${3:-f}" "$PLUGQ_SOCK" "$2"
}

@test "tls: a client with the right PSK reads and writes (URI and explicit settings)" {
  skip_if_sanitized
  pyrun "$F" "$(tls_uri alice "$T/keys.psk")" "$T/keys.psk" <<'EOF'
import sys, nbd
from plugqtest import *
path, u, psk = sys.argv[1:4]
h = nbd.NBD()
h.set_uri_allow_local_file(True)
h.connect_uri(u)
assert h.get_tls_negotiated(), "connected without TLS"
data = pattern(1, 64 * KiB)
h.pwrite(data, MiB)
expect_read(h, MiB, data, "read back over TLS")
h.flush()
expect_file(path, MiB, data, "backing file after FLUSH over TLS")
h.shutdown()

h = nbd.NBD()
h.set_tls(nbd.TLS_REQUIRE)
h.set_tls_psk_file(psk)
h.set_tls_username("alice")
h.set_export_name("m")
h.connect_unix(SOCK)
assert h.get_tls_negotiated(), "connected without TLS"
h.pwrite(pattern(2, 4096), 0, nbd.CMD_FLAG_FUA)
expect_read(h, 0, pattern(2, 4096), "memory disk over TLS")
h.shutdown()
EOF
  # nbdinfo takes the same URI (it allows local files).
  run nbdinfo --json "$(tls_uri alice "$T/keys.psk")"
  assert_success
  [ "$(jq -r '.exports[0]."export-size"' <<<"$output")" = $((4 * MiB)) ] \
    || fail "nbdinfo over TLS: $output"
}

@test "tls: a client without TLS is refused and writes nothing" {
  pyrun "$F" <<'EOF'
import socket, struct, sys, nbd
from plugqtest import *
path = sys.argv[1]
for name, setup in (("plain URI", None), ("TLS disabled", nbd.TLS_DISABLE)):
    h = nbd.NBD()
    if setup is not None:
        h.set_tls(setup)
    h.set_export_name("f")
    try:
        h.connect_unix(SOCK)
    except nbd.Error as e:
        assert "requires TLS" in e.string, "%s: unclear error %s" % (name, e.string)
        continue
    h.pwrite(pattern(9, 4096), 0)
    raise AssertionError("%s: connected and wrote without TLS" % name)

# On the wire: NBD_OPT_GO before STARTTLS gets NBD_REP_ERR_TLS_REQD.
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
s.connect(SOCK)
assert s.recv(18)[:16] == b"NBDMAGICIHAVEOPT"
s.sendall(struct.pack(">I", 3))
data = struct.pack(">I", 1) + b"f" + struct.pack(">H", 0)
s.sendall(b"IHAVEOPT" + struct.pack(">II", 7, len(data)) + data)
hdr = b""
while len(hdr) < 20:
    c = s.recv(20 - len(hdr))
    assert c, "server hung up instead of answering NBD_OPT_GO"
    hdr += c
_, opt, rtype, ln = struct.unpack(">QIII", hdr)
assert rtype == 0x80000005, "NBD_OPT_GO without TLS: reply type %#x, expected NBD_REP_ERR_TLS_REQD" % rtype
s.close()
expect_file(path, 0, fill(0, 4096), "backing file after the refused clients")
EOF
  run nbdinfo --list "$(uri f)"
  assert_failure
  run nbdsh -u "$(uri f)" -c 'h.pwrite(b"x" * 512, 0)'
  assert_failure
  assert_output --partial "TLS"
}

@test "tls: a wrong key or an unknown PSK user is refused; the right client still works" {
  skip_if_sanitized
  pyrun "$F" "$T" <<'EOF'
import sys, nbd
from plugqtest import *
path, T = sys.argv[1:3]
for what, user, psk in (("wrong key", "alice", T + "/wrong.psk"),
                        ("unknown user", "mallory", T + "/user.psk")):
    h = nbd.NBD()
    h.set_tls(nbd.TLS_REQUIRE)
    h.set_tls_psk_file(psk)
    h.set_tls_username(user)
    h.set_export_name("f")
    try:
        h.connect_unix(SOCK)
    except nbd.Error as e:
        assert "gnutls" in e.string or "TLS" in e.string, \
            "%s: refused, but not by the TLS handshake: %s" % (what, e.string)
        print("%s: %s" % (what, e.string))
        continue
    h.pwrite(pattern(9, 4096), 0)
    raise AssertionError("%s: connected and wrote" % what)
expect_file(path, 0, fill(0, 4096), "backing file after the refused clients")

h = nbd.NBD()
h.set_uri_allow_local_file(True)
h.connect_uri("nbds+unix://alice@/f?socket=%s&tls-psk-file=%s/keys.psk" % (SOCK, T))
h.pwrite(pattern(3, 4096), 0, nbd.CMD_FLAG_FUA)
expect_file(path, 0, pattern(3, 4096), "backing file after the right client's FUA write")
EOF
  echo "$output"
  grep -q "gnutls_handshake" "$PLUGQ_LOG" || fail "no handshake error in the server log: $(cat "$PLUGQ_LOG")"
}
