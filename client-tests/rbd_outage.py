"""The writer of client-tests/rbd-outage.bats: a client that keeps writing
through a Ceph outage and records what it was promised.

  rbd_outage.py write --export NAME --state FILE [options]
      4 KiB random writes over --blocks blocks, --depth in flight, a FLUSH
      after every --flush-every writes, through plugq on $PLUGQ_SOCK.  It
      writes for --warmup seconds, runs each --fault command (a shell
      command: cluster.sh hang DIR osd.1 ...), keeps writing for --hold
      seconds, runs each --recover command, and keeps writing until the
      first FLUSH sent during the outage has been answered, then --after
      seconds more (the disk resumed), and stops without a final FLUSH.
      With --image-cmd (a command printing the raw image on stdout, e.g.
      rbd export IMAGE -) it checks that no FLUSH lied: every write
      answered before the latest successful FLUSH was sent is on the
      image, or a newer write of its block is.  It checks twice: the
      moment the outage's first FLUSH is answered, with plugq (--pid)
      frozen by SIGSTOP meanwhile, so that nothing it still holds can
      land before the image is read; and at the end, when no command is
      in flight.  With --check-after-recover the first check waits for
      the first FLUSH answered after the recovery instead (the image
      cannot be read while the monitor is down).  --stats FILE and --pid sample plugq's stats file and
      resident memory during the hold.  The result (counts, failures,
      stalls, samples, and every block's last answered write) goes to
      --state as JSON.  Exits 1 if a request failed, unless
      --expect-failures, or if a check failed.

  rbd_outage.py verify --state FILE --export NAME
      Reads the blocks back through plugq on $PLUGQ_SOCK: each must hold
      its last answered write (never written: zeroes).

Every block written carries its block number and the write's sequence
number, repeated over its 4 KiB, so a block read back names the write it
came from.  Two writes of one block are never in flight at once: NBD does
not order them, and the checks could not tell which should win.
"""

import argparse
import json
import os
import random
import signal
import struct
import subprocess
import sys
import time

import nbd

BLOCK = 4096
HEADER = struct.Struct("<QQ")


def block_data(block, seq):
    """Block number + 1 (so that zeroes mean never written) and seq."""
    return HEADER.pack(block + 1, seq) * (BLOCK // HEADER.size)


def block_seq(data, block):
    """The seq of the write whose data is `data`, 0 for zeroes; raises
    if it is neither a whole block of this block's writes nor zeroes."""
    if data == bytes(BLOCK):
        return 0
    num, seq = HEADER.unpack_from(data)
    if num != block + 1 or data != block_data(block, seq):
        raise AssertionError("block %d holds neither zeroes nor one whole write "
                             "of it (header block %d seq %d)" % (block, num - 1, seq))
    return seq


def connect(export):
    h = nbd.NBD()
    h.set_export_name(export)
    h.connect_unix(os.environ["PLUGQ_SOCK"])
    return h


class Writer:
    def __init__(self, args):
        self.a = args
        self.h = connect(args.export)
        self.rng = random.Random(args.seed)
        self.seq = 0
        self.inflight = {}          # cookie -> command record
        self.busy_blocks = set()    # blocks with a write in flight
        self.last_acked = {}        # block -> seq of its last answered write
        self.acks = []              # (block, seq) in the order answered
        self.ack_times = []         # monotonic time of each answer
        self.good_flushes = []      # acks answered before each successful FLUSH was sent
        self.failures = []
        self.since_flush = 0
        self.t0 = time.monotonic()
        self.t_fault = self.t_recover = None
        self.t_faulted = None       # once the fault commands returned
        self.outage_flush = None    # cookie of the first FLUSH sent in the outage
        self.outage_flush_done = None
        self.samples = []
        self.flushes_ok = self.flushes_failed = 0
        self.checks = {}
        self.recovered = False      # the recover commands have run
        self.frozen = []            # (from, to): plugq stopped for a check

    def now(self):
        return time.monotonic() - self.t0

    # --- submitting -------------------------------------------------------
    def submit_write(self):
        block = self.rng.randrange(self.a.blocks)
        while block in self.busy_blocks:
            block = self.rng.randrange(self.a.blocks)
        self.seq += 1
        buf = nbd.Buffer.from_bytearray(bytearray(block_data(block, self.seq)))
        c = self.h.aio_pwrite(buf, block * BLOCK)
        self.inflight[c] = ("write", block, self.seq, buf, self.now())
        self.busy_blocks.add(block)
        self.since_flush += 1

    def submit_flush(self):
        c = self.h.aio_flush()
        t = self.now()
        self.inflight[c] = ("flush", len(self.acks), None, None, t)
        self.since_flush = 0
        if (self.outage_flush is None and self.t_fault is not None
                and self.t_recover is None):
            self.outage_flush = c

    def fill(self):
        while len(self.inflight) < self.a.depth:
            if self.since_flush >= self.a.flush_every:
                self.submit_flush()
            else:
                self.submit_write()

    # --- answers ----------------------------------------------------------
    def retire(self):
        while self.inflight:
            c = self.h.aio_peek_command_completed()
            if c <= 0:
                return
            kind, x, seq, buf, t_sent = self.inflight.pop(c)
            err = None
            try:
                self.h.aio_command_completed(c)
            except nbd.Error as e:
                err = e.errno or str(e)
            t = self.now()
            if kind == "write":
                self.busy_blocks.discard(x)
                if err is None:
                    self.last_acked[x] = seq
                    self.acks.append((x, seq))
                    self.ack_times.append(t)
            elif err is None:
                self.flushes_ok += 1
                self.good_flushes.append(x)
            else:
                self.flushes_failed += 1
            if err is not None:
                self.failures.append({"kind": kind, "errno": err, "sent": round(t_sent, 3),
                                      "answered": round(t, 3)})
            if c == self.outage_flush:
                self.outage_flush_done = t
            if (err is None and kind == "flush" and self.a.image_cmd
                    and "at_outage_flush" not in self.checks
                    and self.check_due(c)):
                self.checks["at_outage_flush"] = self.check_frozen()

    def step(self, submit=True):
        if submit:
            self.fill()
        if self.inflight:
            self.h.poll(100)
        self.retire()

    def run_commands(self, cmds, what):
        """Each command in turn, writing on meanwhile: an answer is timed
        when it comes, not when a command lets the writer look."""
        for cmd in cmds:
            p = subprocess.Popen(cmd, shell=True, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True)
            while p.poll() is None:
                self.step()
            if p.returncode != 0:
                raise AssertionError("%s command failed (%d): %s\n%s"
                                     % (what, p.returncode, cmd, p.stdout.read()))

    def run_for(self, seconds, sample=False):
        end = time.monotonic() + seconds
        next_sample = 0.0
        while time.monotonic() < end:
            self.step()
            if sample and time.monotonic() >= next_sample:
                self.sample()
                next_sample = time.monotonic() + 0.2

    def drain(self, limit):
        end = time.monotonic() + limit
        while self.inflight:
            if time.monotonic() > end:
                raise AssertionError("%d commands still unanswered %d s after the "
                                     "writer stopped sending" % (len(self.inflight), limit))
            self.step(submit=False)

    # --- observing plugq --------------------------------------------------
    def sample(self):
        s = {"t": round(self.now(), 3), "acked": len(self.acks)}
        if self.a.stats:
            try:
                with open(self.a.stats) as f:
                    d = json.load(f)["disks"][0]
                s.update(queued_bytes=d["queued_bytes"], queued_requests=d["queued_requests"],
                         in_flight=d["in_flight"],
                         oldest_in_flight_us=d.get("oldest_in_flight_us"),
                         queue_bytes=d["config"]["queue_bytes"],
                         full_waits=d["full_waits"])
            except (OSError, ValueError, KeyError, IndexError):
                pass
        if self.a.pid:
            with open("/proc/%d/status" % self.a.pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        s["rss_kib"] = int(line.split()[1])
        self.samples.append(s)

    # --- the FLUSH check ------------------------------------------------
    def check_due(self, cookie):
        """Whether the FLUSH `cookie`, just answered with success, is the
        one to check the image at: the outage's first; if that one failed,
        the first to succeed once the cluster is whole again; with
        --check-after-recover, the first answered then."""
        if self.a.check_after_recover:
            return self.recovered
        return cookie == self.outage_flush or (
            self.outage_flush_done is not None and self.recovered)

    def set_frozen(self, frozen):
        """SIGSTOP or SIGCONT to plugq, and wait until the kernel shows it."""
        os.kill(self.a.pid, signal.SIGSTOP if frozen else signal.SIGCONT)
        end = time.monotonic() + 10
        while time.monotonic() < end:
            with open("/proc/%d/stat" % self.a.pid) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            if (state == "T") == frozen:
                return
            time.sleep(0.001)
        raise AssertionError("plugq did not %s" % ("stop" if frozen else "continue"))

    def check_frozen(self):
        """The FLUSH check with plugq stopped: what it answered for is on
        the image already, not on its way."""
        if not self.a.pid:
            return self.check_flushes()
        t = self.now()
        self.set_frozen(True)
        try:
            return self.check_flushes()
        finally:
            self.set_frozen(False)
            self.frozen.append((t, self.now()))

    def check_flushes(self):
        """Every write answered before the latest successful FLUSH was sent
        is on the image, or a newer write of its block is.  Earlier FLUSHes
        promised a prefix of the same answers, so the latest one says all."""
        if not self.good_flushes:
            raise AssertionError("no FLUSH succeeded before the check")
        covered = max(self.good_flushes)
        need = {}
        for block, seq in self.acks[:covered]:
            need[block] = seq
        image = subprocess.run(self.a.image_cmd, shell=True, check=True,
                               stdout=subprocess.PIPE).stdout
        short = []
        for block, seq in need.items():
            got = block_seq(image[block * BLOCK:(block + 1) * BLOCK], block)
            if got < seq:
                short.append((block, seq, got))
        if short:
            raise AssertionError(
                "a FLUSH lied: %d of the %d blocks written before the latest successful "
                "FLUSH (sent after %d answered writes) hold older data on the image, "
                "e.g. (block, promised seq, found seq) %s"
                % (len(short), len(need), covered, short[:5]))
        return {"flush_covered_writes": covered, "flush_checked_blocks": len(need)}

    # --- the run -----------------------------------------------------------
    def gap(self, a, b):
        """Seconds from a to b without the time plugq was frozen for a
        check: no answer could come then."""
        return b - a - sum(max(0.0, min(b, t1) - max(a, t0)) for t0, t1 in self.frozen)

    def gap_at(self, t):
        """Seconds from t to the first answer after it."""
        for at in self.ack_times:
            if at >= t:
                return self.gap(t, at)
        return None

    def longest_gap(self, since):
        """The longest time without an answer, from since on."""
        times = [since] + [at for at in self.ack_times if at >= since]
        return max((self.gap(a, b) for a, b in zip(times, times[1:])), default=None)

    def run(self):
        a = self.a
        self.run_for(a.warmup)
        warm = len(self.acks)
        self.t_fault = self.now()
        self.sample()
        self.run_commands(a.fault, "fault")
        self.t_faulted = self.now()
        # One FLUSH in the outage whatever the depth: with the queue full
        # when the fault comes, no write may be answered before the
        # recovery, and the FLUSH every flush_every writes never sent.
        if self.outage_flush is None:
            self.submit_flush()
        self.run_for(a.hold, sample=True)
        held = len(self.acks)
        self.t_recover = self.now()
        self.run_commands(a.recover, "recover")
        self.recovered = True
        if self.outage_flush is None and a.image_cmd and not a.check_after_recover:
            raise AssertionError("no FLUSH was sent during the outage: nothing "
                                 "to check (a longer --hold?)")
        deadline = time.monotonic() + a.settle
        while ((self.outage_flush is not None and self.outage_flush_done is None)
               or (a.image_cmd and "at_outage_flush" not in self.checks)):
            if time.monotonic() > deadline:
                raise AssertionError("the FLUSH to check at (the first sent during the "
                                     "outage) was not answered within %d s of the "
                                     "recovery" % a.settle)
            self.step()
        self.run_for(a.after, sample=True)
        self.drain(a.settle)
        if a.image_cmd:
            self.checks["at_end"] = self.check_flushes()
        result = {"checks": self.checks}
        result.update({
            "warmup_acked": warm, "hold_acked": held - warm,
            "acked": len(self.acks), "flushes_ok": self.flushes_ok,
            "flushes_failed": self.flushes_failed, "failures": self.failures,
            "t_fault": round(self.t_fault, 3), "t_faulted": round(self.t_faulted, 3),
            "t_recover": round(self.t_recover, 3),
            "outage_flush_answered": self.outage_flush_done,
            "stall_at_recover": self.gap_at(self.t_recover),
            "longest_gap": self.longest_gap(self.t_fault),
            "acked_after_recover": sum(1 for t in self.ack_times if t >= self.t_recover),
            "samples": self.samples,
            "last_acked": {str(b): s for b, s in self.last_acked.items()},
            "blocks": a.blocks,
        })
        return result


def write(args):
    w = Writer(args)
    try:
        result = w.run()
    finally:
        w.h.shutdown()
    with open(args.state, "w") as f:
        json.dump(result, f)
    summary = {k: v for k, v in result.items() if k not in ("samples", "last_acked")}
    summary["failures"] = result["failures"][:5]
    print(json.dumps(summary))
    if result["failures"] and not args.expect_failures:
        print("%d requests failed, first: %s" % (len(result["failures"]),
                                                 result["failures"][0]), file=sys.stderr)
        return 1
    return 0


def verify(args):
    with open(args.state) as f:
        state = json.load(f)
    last = {int(b): s for b, s in state["last_acked"].items()}
    h = connect(args.export)
    chunk = 256
    wrong = []
    for first in range(0, state["blocks"], chunk):
        n = min(chunk, state["blocks"] - first)
        data = h.pread(n * BLOCK, first * BLOCK)
        for i in range(n):
            block = first + i
            got = block_seq(data[i * BLOCK:(i + 1) * BLOCK], block)
            if got != last.get(block, 0):
                wrong.append((block, last.get(block, 0), got))
    h.shutdown()
    if wrong:
        raise AssertionError("%d blocks do not hold their last answered write, e.g. "
                             "(block, answered seq, found seq) %s" % (len(wrong), wrong[:5]))
    print("%d blocks checked, %d written" % (state["blocks"], len(last)))
    return 0


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("--export", required=True)
    w.add_argument("--state", required=True)
    w.add_argument("--blocks", type=int, default=4096)
    w.add_argument("--depth", type=int, default=8)
    w.add_argument("--flush-every", type=int, default=32)
    w.add_argument("--warmup", type=float, default=2)
    w.add_argument("--fault", action="append", default=[])
    w.add_argument("--hold", type=float, default=5)
    w.add_argument("--recover", action="append", default=[])
    w.add_argument("--after", type=float, default=3)
    w.add_argument("--settle", type=float, default=60,
                   help="longest wait for answers once the cluster is back")
    w.add_argument("--image-cmd")
    w.add_argument("--stats")
    w.add_argument("--pid", type=int)
    w.add_argument("--seed", type=int, default=1)
    w.add_argument("--expect-failures", action="store_true")
    w.add_argument("--check-after-recover", action="store_true")
    v = sub.add_parser("verify")
    v.add_argument("--state", required=True)
    v.add_argument("--export", required=True)
    args = p.parse_args()
    return write(args) if args.cmd == "write" else verify(args)


if __name__ == "__main__":
    sys.exit(main())
