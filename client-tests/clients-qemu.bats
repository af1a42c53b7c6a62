#!/usr/bin/env bats
# qemu-img and qemu-io against plugq, on a disk and on a volume, with
# each ack mode (client-tests/clients.bash says how).  Apart from
# clients.bats so that make -j runs the two halves side by side.

load clients

@test "clients: qemu-img info, convert in and out, compare, 1-byte change [disk, ack=queued]" { qemu_img_raw disk queued; }
@test "clients: qemu-img info, convert in and out, compare, 1-byte change [disk, ack=dispatched]" { qemu_img_raw disk dispatched; }
@test "clients: qemu-img info, convert in and out, compare, 1-byte change [vol, ack=queued]" { qemu_img_raw vol queued; }
@test "clients: qemu-img info, convert in and out, compare, 1-byte change [vol, ack=dispatched]" { qemu_img_raw vol dispatched; }

@test "clients: qemu-img create/convert/check a qcow2 inside the export [disk, ack=queued]" { qemu_img_qcow2 disk queued; }
@test "clients: qemu-img create/convert/check a qcow2 inside the export [disk, ack=dispatched]" { qemu_img_qcow2 disk dispatched; }
@test "clients: qemu-img create/convert/check a qcow2 inside the export [vol, ack=queued]" { qemu_img_qcow2 vol queued; }
@test "clients: qemu-img create/convert/check a qcow2 inside the export [vol, ack=dispatched]" { qemu_img_qcow2 vol dispatched; }

@test "clients: qemu-img map / nbdinfo --map of a sparse pattern [disk, ack=queued]" { qemu_img_map disk queued; }
@test "clients: qemu-img map / nbdinfo --map of a sparse pattern [disk, ack=dispatched]" { qemu_img_map disk dispatched; }
@test "clients: qemu-img map / nbdinfo --map of a sparse pattern [vol, ack=queued]" { qemu_img_map vol queued; }
@test "clients: qemu-img map / nbdinfo --map of a sparse pattern [vol, ack=dispatched]" { qemu_img_map vol dispatched; }

@test "clients: qemu-io FUA, flush, write -z, discard, aio [disk, ack=queued]" { qemu_io_scenario disk queued; }
@test "clients: qemu-io FUA, flush, write -z, discard, aio [disk, ack=dispatched]" { qemu_io_scenario disk dispatched; }
@test "clients: qemu-io FUA, flush, write -z, discard, aio [vol, ack=queued]" { qemu_io_scenario vol queued; }
@test "clients: qemu-io FUA, flush, write -z, discard, aio [vol, ack=dispatched]" { qemu_io_scenario vol dispatched; }
