#!/usr/bin/python3
"""bench/reconfig-churn.py SOCKET INTERVAL_S SECONDS: the reconfiguration
churn bench/reconfig.sh runs beside its writer.

Every INTERVAL_S seconds, one round on plugq's control socket: add two
memory disks and a volume over one, set queue keys, grow the volume by the
other, remove all three.  For SECONDS seconds; prints "rounds=N".  It
talks to the socket with plugqctl's own code (the repository's plugqctl),
in one process: a Python start per command would load the machine more
than the commands do.
"""
import importlib.machinery
import importlib.util
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def load_plugqctl():
    path = os.path.join(HERE, "..", "plugqctl")
    loader = importlib.machinery.SourceFileLoader("plugqctl", path)
    spec = importlib.util.spec_from_loader("plugqctl", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def main(argv):
    sock, interval, seconds = argv[1], float(argv[2]), float(argv[3])
    ctl = load_plugqctl()

    def run(*words):
        with ctl.connect(sock) as s:
            s.sendall(ctl.command_line(words))
            _, err = ctl.read_answer(s, sock)
        if err is not None:
            raise SystemExit(f"reconfig-churn: {' '.join(words)}: {err}")

    rounds = 0
    end = time.monotonic() + seconds
    next_round = time.monotonic()
    while time.monotonic() < end:
        d, e, v = f"churn-d{rounds}", f"churn-e{rounds}", f"churn-v{rounds}"
        run("add", f"disk={d}", "memory=64M", "unplug-delay=1ms")
        run("add", f"disk={e}", "memory=64M", f"linear={v}:{d}")
        run("set", d, "unplug-delay=2ms", "queue-requests=128", "elevator=noop")
        run("grow", v, e)
        run("remove", v)
        run("remove", d)
        run("remove", e)
        rounds += 1
        next_round += interval
        pause = next_round - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    print(f"rounds={rounds}")


if __name__ == "__main__":
    main(sys.argv)
