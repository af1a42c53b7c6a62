#!/usr/bin/env bats
# The Linux kernel NBD client (nbd.ko + nbd-client) against plugq (issue 6).
#
# Each test boots a Debian kernel in a QEMU guest under software emulation
# (client-tests/kernel/run-guest-test.sh: no guest network, nbdkit on the host
# reached over virtio-serial), makes ext4 on the export, writes and syncs
# data, unmounts, runs e2fsck, re-attaches on a fresh connection and verifies
# every checksum.  The host then checks the backing files with e2fsck.
#
#   make check                                   # PLUGIN is exported there
#   PLUGIN=/abs/path/nbdkit-plugq-plugin.so bats client-tests/kernel.bats
#
# The first run downloads the kernel package into WORK (default
# /var/tmp/plugq-kernel-cache); later runs reuse it.  Skipped only where QEMU
# cannot run at all.

setup_file() {
    export PATH="$PATH:/usr/sbin:/sbin"
    export TIMEOUT="${TIMEOUT:-480}"
}

setup() {
    bats_load_library bats-support
    bats_load_library bats-assert
    RUN_GUEST="$BATS_TEST_DIRNAME/kernel/run-guest-test.sh"
    [ -n "${PLUGIN:-}" ] || fail "PLUGIN is not set (make check exports it; standalone: PLUGIN=/abs/path/nbdkit-plugq-plugin.so bats $BATS_TEST_FILENAME)"
    [ -f "$PLUGIN" ] || fail "PLUGIN=$PLUGIN does not exist (build the plugin first)"
}

teardown() {
    if [ -n "${KIMG:-}" ]; then rm -f "$KIMG"; fi
}

# guest_run ARGS...: run the guest test, skipping only when QEMU cannot run.
guest_run() {
    run bash "$RUN_GUEST" "$@"
    if [ "$status" -eq 77 ]; then
        local why
        why=$(sed -n 's/^SKIP: //p' <<<"$output" | head -n 1)
        skip "${why:-qemu cannot run here}"
    fi
    assert_success
    assert_line 'GUEST-RESULT: PASS'
    assert_line 'RESULT: PASS'
}

@test "kernel nbd client: ext4 on a plugq disk survives write, e2fsck and re-attach" {
    img="$BATS_TEST_TMPDIR/d.img"
    truncate -s 256M "$img"

    EXPORT= guest_run -- nbdkit -U - "$PLUGIN" disk=d file="$img"

    run e2fsck -f -n "$img"
    assert_success
    # The guest wrote ~32 MiB: it must have reached the file.
    [ "$(du -k "$img" | cut -f1)" -gt 32768 ]
}

@test "kernel nbd client: ext4 on a plugq linear volume of two disks" {
    # 40 MiB + 216 MiB: the 32 MiB data file is bound to cross the boundary.
    a="$BATS_TEST_TMPDIR/a.img"
    b="$BATS_TEST_TMPDIR/b.img"
    truncate -s 40M "$a"
    truncate -s 216M "$b"

    EXPORT=vol guest_run -- nbdkit -U - "$PLUGIN" disk=a file="$a" disk=b file="$b" linear=vol:a,b
    assert_line --partial "attached /dev/nbd0 via /dev/vport0p1 (nbd0): 256 MiB"

    # Both members were written, and their concatenation is the clean ext4
    # the guest made.
    [ "$(du -k "$a" | cut -f1)" -gt 0 ]
    [ "$(du -k "$b" | cut -f1)" -gt 0 ]
    cat "$a" "$b" >"$BATS_TEST_TMPDIR/vol.img"
    run e2fsck -f -n "$BATS_TEST_TMPDIR/vol.img"
    assert_success
    rm -f "$BATS_TEST_TMPDIR/vol.img"
}

@test "kernel nbd client: ext4 with 1 KiB blocks on a direct=true disk attached with -b 1024" {
    # The client ignores the disk's preferred 4096-byte block: the kernel
    # sends 1 KiB requests, which plugq serves by read-modify-write.
    KIMG=$(mktemp /var/tmp/plugq-kernel-direct.XXXXXX)
    if ! dd if=/dev/zero of="$KIMG" bs=4096 count=1 oflag=direct status=none 2>/dev/null; then
        skip "O_DIRECT is refused on /var/tmp"
    fi
    truncate -s 128M "$KIMG"
    stats="$BATS_TEST_TMPDIR/stats.json"

    NBD_BLOCKSIZE=1024 MKFS_OPTS="-b 1024" DATA_MB=8 NFILES=100 EXPORT= \
        guest_run -- nbdkit -U - "$PLUGIN" stats="$stats" disk=d file="$KIMG" direct=true
    assert_line --partial "logical block size 1024"

    run e2fsck -f -n "$KIMG"
    assert_success
    run python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["disks"][0]["read_modify_writes"])' "$stats"
    assert_success
    [ "$output" -ge 1 ] || fail "read_modify_writes is $output: no partial block reached the disk"
}
