#!/usr/bin/python3
"""bench/volflush.py SOCKET VOLUME NMEMBERS [REPS] [WRITES]

Flush latency of a linear volume against its members' own flushes
(issue 4).  Members are exports d0..dN-1 of the same plugq server, set up
with a long unplug timer so written data stays queued until the flush.

Each repetition:
  1. for every member alone: queue WRITES random 4 KiB writes through the
     member's export, then time that export's FLUSH;
  2. queue the same amount on every member through the volume, then time
     the volume's FLUSH.
The volume must flush its members in parallel, so its flush should cost
about the slowest member's, not their sum.

Prints one line of key=value pairs (medians over the repetitions).
"""
import random
import statistics
import sys
import time

import nbd

BLOCK = 4096


def connect(sock, export):
    h = nbd.NBD()
    h.set_export_name(export)
    h.connect_unix(sock)
    return h


def queue_writes(h, base, span, count, rng, buf):
    for _ in range(count):
        h.pwrite(buf, base + rng.randrange(span // BLOCK) * BLOCK)


def timed_flush_ms(h):
    t = time.monotonic()
    h.flush()
    return (time.monotonic() - t) * 1000.0


def one_rep(vol, members, sizes, writes, rng, buf):
    member_ms = []
    for h, size in zip(members, sizes):
        queue_writes(h, 0, size, writes, rng, buf)
        member_ms.append(timed_flush_ms(h))
    base = 0
    for size in sizes:
        queue_writes(vol, base, size, writes, rng, buf)
        base += size
    return member_ms, timed_flush_ms(vol)


def main(argv):
    sock, volname, n = argv[1], argv[2], int(argv[3])
    reps = int(argv[4]) if len(argv) > 4 else 5
    writes = int(argv[5]) if len(argv) > 5 else 1024
    members = [connect(sock, f"d{i}") for i in range(n)]
    vol = connect(sock, volname)
    sizes = [h.get_size() for h in members]
    if vol.get_size() != sum(sizes):
        sys.exit(f"volume size {vol.get_size()} != sum of members {sum(sizes)}")
    rng = random.Random(1)
    buf = bytes([0x5A]) * BLOCK
    slowest, total, vol_ms, ratios = [], [], [], []
    for _ in range(reps):
        m, v = one_rep(vol, members, sizes, writes, rng, buf)
        slowest.append(max(m))
        total.append(sum(m))
        vol_ms.append(v)
        ratios.append(v / max(m))
    med = statistics.median
    print(f"members={n} reps={reps} writes_per_member={writes}"
          f" vol_flush_ms={med(vol_ms):.2f} member_flush_ms_max={med(slowest):.2f}"
          f" member_flush_ms_sum={med(total):.2f} vol_over_slowest={med(ratios):.3f}")
    for h in members + [vol]:
        h.shutdown()


if __name__ == "__main__":
    main(sys.argv)
