#!/usr/bin/env bats
# nbdcopy, nbdinfo and fio's nbd engine against plugq, on a disk and on a
# volume, with each ack mode (client-tests/clients.bash says how).  The
# qemu clients are in clients-qemu.bats.

load clients

@test "clients: nbdcopy in and out, --flush, 4 connections [disk, ack=queued]" { nbdcopy_scenario disk queued; }
@test "clients: nbdcopy in and out, --flush, 4 connections [disk, ack=dispatched]" { nbdcopy_scenario disk dispatched; }
@test "clients: nbdcopy in and out, --flush, 4 connections [vol, ack=queued]" { nbdcopy_scenario vol queued; }
@test "clients: nbdcopy in and out, --flush, 4 connections [vol, ack=dispatched]" { nbdcopy_scenario vol dispatched; }

@test "clients: nbdinfo --list, --can, --json, --map [disk, ack=queued]" { nbdinfo_scenario disk queued; }
@test "clients: nbdinfo --list, --can, --json, --map [disk, ack=dispatched]" { nbdinfo_scenario disk dispatched; }
@test "clients: nbdinfo --list, --can, --json, --map [vol, ack=queued]" { nbdinfo_scenario vol queued; }
@test "clients: nbdinfo --list, --can, --json, --map [vol, ack=dispatched]" { nbdinfo_scenario vol dispatched; }

@test "clients: fio nbd crc32c verify, rand+seq at QD 1/16/64 [disk, ack=queued]" { fio_depths disk queued; }
@test "clients: fio nbd crc32c verify, rand+seq at QD 1/16/64 [disk, ack=dispatched]" { fio_depths disk dispatched; }
@test "clients: fio nbd crc32c verify, rand+seq at QD 1/16/64 [vol, ack=queued]" { fio_depths vol queued; }
@test "clients: fio nbd crc32c verify, rand+seq at QD 1/16/64 [vol, ack=dispatched]" { fio_depths vol dispatched; }

@test "clients: fio nbd numjobs=4 on multi-conn, crc32c verify [disk, ack=queued]" { fio_multiconn disk queued; }
@test "clients: fio nbd numjobs=4 on multi-conn, crc32c verify [disk, ack=dispatched]" { fio_multiconn disk dispatched; }
@test "clients: fio nbd numjobs=4 on multi-conn, crc32c verify [vol, ack=queued]" { fio_multiconn vol queued; }
@test "clients: fio nbd numjobs=4 on multi-conn, crc32c verify [vol, ack=dispatched]" { fio_multiconn vol dispatched; }
