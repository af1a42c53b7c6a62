#!/usr/bin/python3
"""Crash-durability rounds: start plugq on a file disk, run workload.py
against it, SIGKILL nbdkit at a random moment, check the backing file
against the journal (check.py).  Repeats for --rounds rounds (bounded by
--max-seconds), cycling through queue configurations.

    rounds.py --plugin PATH --dir DIR [--rounds 15] [--max-seconds 90]
              [--seed N] [--nbdkit nbdkit]

Prints one line per round and a summary; exit status 0 only if every
round kept every promise and every round made promises.
"""

import argparse
import os
import random
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3"

CONFIGS = [
    ("default", []),
    ("ack=dispatched", ["ack=dispatched"]),
    ("long-delay", ["unplug-delay=5s", "unplug-thresh=100000",
                    "write-expire=30s"]),
    ("small-queue", ["unplug-delay=20ms", "queue-bytes=256K",
                     "elevator=noop"]),
]


def wait_for(cond, timeout, what):
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise RuntimeError("%s: not within %gs" % (what, timeout))
        time.sleep(0.01)


def gone(proc):
    return proc.poll() is not None


def one_round(a, n, name, cfg, rng):
    d = os.path.join(a.dir, "r%02d" % n)
    os.makedirs(d, exist_ok=True)
    img = os.path.join(d, "disk.img")
    journal = os.path.join(d, "journal")
    sock = os.path.join(d, "sock")
    pidf = os.path.join(d, "pid")
    ready = os.path.join(d, "ready")
    with open(img, "wb") as f:
        f.truncate(a.size)
    open(journal, "w").close()
    log = open(os.path.join(d, "nbdkit.log"), "w")
    srv = subprocess.Popen([a.nbdkit, "-f", "-U", sock, "-P", pidf,
                            a.plugin] + cfg + ["disk=d", "file=" + img],
                           stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    wl = None
    try:
        wait_for(lambda: gone(srv) or (os.path.exists(pidf)
                                       and os.path.getsize(pidf) > 0
                                       and os.path.exists(sock)),
                 20, "nbdkit listening")
        if gone(srv):
            raise RuntimeError("nbdkit exited at startup (status %s), log in %s"
                               % (srv.returncode, log.name))
        wl = subprocess.Popen([PY, os.path.join(HERE, "workload.py"), sock, "d",
                               journal, "--seed", str(rng.randrange(1 << 30)),
                               "--seconds", "60", "--ready", ready],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
        wait_for(lambda: os.path.exists(ready) or gone(wl), 20,
                 "workload connected")
        if gone(wl):
            raise RuntimeError("workload exited early: %s" % wl.stdout.read())
        # Once the server made its first promise, a random moment for the
        # crash (the sleep is the moment, not a wait for the server).
        wait_for(lambda: os.path.getsize(journal) > 0 or gone(wl), 20,
                 "the first durable promise in the journal")
        delay = rng.uniform(0, a.max_delay)
        time.sleep(delay)
        os.kill(srv.pid, signal.SIGKILL)
        srv.wait(timeout=20)
        out, _ = wl.communicate(timeout=30)
        wl = None
    finally:
        if not gone(srv):
            srv.kill()
            srv.wait()
        if wl is not None and not gone(wl):
            wl.kill()
            wl.wait()
        log.close()
    out = out.strip().splitlines()
    summary = out[-1] if out else ""
    chk = subprocess.run([PY, os.path.join(HERE, "check.py"), img, journal],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    promises = int(summary.split("promises=")[1].split()[0]) \
        if "promises=" in summary else 0
    ok = chk.returncode == 0 and promises > 0 and "server-gone" in summary
    print("round %2d %-15s kill@+%.2fs  %s\n          check: %s"
          % (n, name, delay, summary or "(no workload summary: %r)" % out,
             chk.stdout.strip().replace("\n", "\n          ")))
    if promises == 0:
        print("          FAIL: the workload made no durable promise before the kill")
    if "server-gone" not in summary:
        print("          FAIL: the workload did not see the server go away")
    sys.stdout.flush()
    if ok and not a.keep:
        for p in (img, journal):
            os.unlink(p)
    return ok, promises


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plugin", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--nbdkit", default=os.environ.get("NBDKIT", "nbdkit"))
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--max-seconds", type=float, default=90)
    ap.add_argument("--max-delay", type=float, default=1.2)
    ap.add_argument("--size", type=int, default=8 << 20)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--keep", action="store_true",
                    help="keep images and journals of passing rounds")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    print("seed=%d rounds=%d" % (a.seed, a.rounds))
    t0 = time.monotonic()
    failed = done = total = 0
    for n in range(a.rounds):
        if time.monotonic() - t0 > a.max_seconds:
            print("stopping after %d rounds: %.0fs budget used"
                  % (n, a.max_seconds))
            break
        name, cfg = CONFIGS[n % len(CONFIGS)]
        ok, p = one_round(a, n, name, cfg, rng)
        done += 1
        total += p
        failed += not ok
    print("rounds=%d failed=%d promises=%d seconds=%.1f"
          % (done, failed, total, time.monotonic() - t0))
    return 1 if failed or done == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
