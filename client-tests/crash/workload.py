#!/usr/bin/python3
"""Crash-durability workload: random writes, periodic FLUSH and FUA writes
over two connections (plugq advertises multi-conn, so a FLUSH on one
covers the answered writes of the other), with a journal of every
durability promise the server made.

    workload.py URI_SOCKET EXPORT JOURNAL [--seed N] [--seconds S]
                [--qd N] [--fua-pct P] [--flush-every N]

Runs until the server goes away (it is SIGKILLed by the driver) or for
--seconds.  Writes are 4 KiB aligned, 4-64 KiB long, with self-describing
sectors (crashfmt.py).  Two writes never overlap while both are in
flight, so for every sector the write ids are in the order the server
saw them: a higher id is a newer version.

A line goes into the journal (and is fsynced) only after the answer
arrived:
  - a FUA write answered with success: "F id off len";
  - a FLUSH answered with success: "W id off len" for every write whose
    success answer had arrived before that FLUSH was sent.
Writes answered while a FLUSH was in flight are not covered by it (the
server may legitimately have processed the FLUSH first).

Prints one summary line at the end: writes, fua, flushes, promises,
and how it ended (server-gone or time).
"""

import argparse
import os
import random
import select
import sys
import time

import nbd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from crashfmt import write_bytes  # noqa: E402

BLOCK = 4096


class Op:
    __slots__ = ("kind", "wid", "off", "len", "buf", "h", "cookie",
                 "covers", "fua")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sock")
    ap.add_argument("export")
    ap.add_argument("journal")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--qd", type=int, default=8)
    ap.add_argument("--fua-pct", type=int, default=15)
    ap.add_argument("--flush-every", type=int, default=12)
    ap.add_argument("--ready", help="file created once connected")
    a = ap.parse_args()

    rng = random.Random(a.seed)
    handles = []
    for _ in range(2):
        h = nbd.NBD()
        h.set_export_name(a.export)
        h.connect_unix(a.sock)
        handles.append(h)
    size = handles[0].get_size()
    nblocks = size // BLOCK
    assert handles[0].can_multi_conn(), "the server must advertise multi-conn"

    jfd = os.open(a.journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def journal(lines):
        if lines:
            os.write(jfd, "".join(lines).encode())
            os.fsync(jfd)

    if a.ready:
        open(a.ready, "w").close()

    next_id = 1
    inflight = []           # Op
    busy = set()            # blocks under an in-flight write
    answered = {}           # wid -> (off, len): answered, not yet promised
    writes = fuas = flushes = promises = 0
    since_flush = 0
    t_end = time.monotonic() + a.seconds
    ended = "time"

    def issue_write():
        nonlocal next_id, writes, since_flush
        for _ in range(20):
            n = rng.randint(1, 16)
            b0 = rng.randrange(0, nblocks - n + 1)
            if not any(b in busy for b in range(b0, b0 + n)):
                break
        else:
            return False
        op = Op()
        op.kind = "w"
        op.wid = next_id
        next_id += 1
        op.off = b0 * BLOCK
        op.len = n * BLOCK
        op.fua = rng.randrange(100) < a.fua_pct
        op.buf = nbd.Buffer.from_bytearray(
            bytearray(write_bytes(op.wid, op.off, op.len)))
        op.h = rng.choice(handles)
        op.cookie = op.h.aio_pwrite(op.buf, op.off,
                                    flags=nbd.CMD_FLAG_FUA if op.fua else 0)
        busy.update(range(b0, b0 + n))
        inflight.append(op)
        writes += 1
        since_flush += 1
        return True

    def issue_flush():
        nonlocal flushes, since_flush
        op = Op()
        op.kind = "f"
        op.covers = dict(answered)      # answers that arrived before it
        op.h = rng.choice(handles)
        op.cookie = op.h.aio_flush()
        inflight.append(op)
        flushes += 1
        since_flush = 0

    def pump(timeout):
        rl, wl, by_fd = [], [], {}
        for h in handles:
            fd = h.aio_get_fd()
            d = h.aio_get_direction()
            by_fd[fd] = h
            if d & nbd.AIO_DIRECTION_READ:
                rl.append(fd)
            if d & nbd.AIO_DIRECTION_WRITE:
                wl.append(fd)
        r, w, _ = select.select(rl, wl, [], timeout)
        for fd in r:
            by_fd[fd].aio_notify_read()
        for fd in w:
            by_fd[fd].aio_notify_write()

    try:
        while time.monotonic() < t_end:
            nw = sum(1 for op in inflight if op.kind == "w")
            while nw < a.qd and issue_write():
                nw += 1
            if since_flush >= a.flush_every and rng.randrange(3) == 0:
                issue_flush()
            pump(0.5)
            lines = []
            still = []
            for op in inflight:
                if not op.h.aio_command_completed(op.cookie):   # raises on error
                    still.append(op)
                    continue
                if op.kind == "w":
                    busy.difference_update(range(op.off // BLOCK,
                                                 (op.off + op.len) // BLOCK))
                    if op.fua:
                        lines.append("F %d %d %d\n" % (op.wid, op.off, op.len))
                        fuas += 1
                        promises += 1
                    else:
                        answered[op.wid] = (op.off, op.len)
                else:
                    for wid, (off, ln) in sorted(op.covers.items()):
                        if wid in answered:
                            lines.append("W %d %d %d\n" % (wid, off, ln))
                            del answered[wid]
                            promises += 1
            inflight[:] = still
            journal(lines)
    except nbd.Error as e:
        ended = "server-gone (%s)" % (e.errno or e.string.split(":")[-1].strip())
    finally:
        os.close(jfd)
    print("writes=%d fua=%d flushes=%d promises=%d ended=%s"
          % (writes, fuas, flushes, promises, ended))


if __name__ == "__main__":
    main()
