"""Helpers for the client tests with remote NBD disks (nbd.bats, promises.bats):
reading a remote's log, expecting errors, killing and starting remotes."""
import os
import re
import signal
import subprocess
import time

import nbd
from plugqtest import *

_CALL = re.compile(r"connection=(\d+) (\w+) id=(\d+)(.*?) \.\.\.$")


def log_calls(path, act=None):
    """The requests nbdkit's log filter saw, in order, as (action, fields)
    with offset and count as integers; only act if given."""
    out = []
    with open(path) as f:
        for line in f:
            m = _CALL.search(line.rstrip("\n"))
            if not m:
                continue
            fields = dict(kv.split("=", 1) for kv in m.group(4).split()
                          if "=" in kv)
            for k in ("offset", "count"):
                if k in fields:
                    fields[k] = int(fields[k], 16)
            fields["conn"] = int(m.group(1))
            if act is None or m.group(2) == act:
                out.append((m.group(2), fields))
    return out


def ranges(calls):
    """Merged [start, end) intervals covered by calls."""
    iv = sorted((f["offset"], f["offset"] + f["count"]) for _, f in calls)
    out = []
    for s, e in iv:
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [tuple(x) for x in out]


def show(calls):
    return ", ".join("%s %#x+%#x" % (a, f.get("offset", 0), f.get("count", 0))
                     if "offset" in f else a for a, f in calls)


def expect_error(what, want, fn, *args, limit=10, problems=None, **kw):
    """fn(*args) must fail with errno want (e.g. "EIO") within limit s.
    With a list as problems, a wrong outcome is appended to it (for
    check_problems at the end) instead of raised, so the test goes on."""
    def bad(msg):
        if problems is None:
            raise AssertionError(msg)
        problems.append(msg)
    t0 = time.monotonic()
    try:
        fn(*args, **kw)
    except nbd.Error as e:
        dt = time.monotonic() - t0
        if e.errno != want:
            bad("%s: failed with %s (%s), expected %s"
                % (what, e.errno, e.string, want))
        elif dt > limit:
            bad("%s: took %.1fs to fail (limit %ds)" % (what, dt, limit))
        return e
    bad("%s: succeeded, expected it to fail with %s" % (what, want))


def check_problems(problems):
    if problems:
        raise AssertionError("%d problem(s):\n  %s"
                             % (len(problems), "\n  ".join(problems)))


def _gone(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def log_lines(path, word):
    """The lines of the log at path that contain word."""
    with open(path) as f:
        return [l.rstrip("\n") for l in f if word in l]


def kill_remote(pidfile, sig=signal.SIGKILL):
    """Kills the remote nbdkit of pidfile and waits (bounded) until it is
    gone; removes the pid file."""
    with open(pidfile) as f:
        pid = int(f.read())
    os.kill(pid, sig)
    poll(lambda: _gone(pid), 10, "remote nbdkit %d gone after signal %d"
         % (pid, sig))
    os.unlink(pidfile)


def remote_writes_done(path):
    """How many writes the remote answered, from its log filter's log."""
    with open(path) as f:
        return sum(bool(_DONE.search(l)) for l in f)


_DONE = re.compile(r"\.\.\.Write id=\d+ return=0")


def wait_aio(h, cookie, timeout, what):
    """Drives h until command cookie is answered, within timeout s; its
    error, if it failed, is raised."""
    t0 = time.monotonic()
    while not h.aio_command_completed(cookie):
        if time.monotonic() - t0 > timeout:
            raise AssertionError("%s: not answered within %gs" % (what, timeout))
        h.poll(100)


def start_remote(sock, pidfile, *args):
    """A daemonized remote nbdkit on the unix socket sock (a stale socket
    is removed first); returns once it listens."""
    for p in (sock, pidfile):
        if os.path.exists(p):
            os.unlink(p)
    r = subprocess.run([os.environ.get("NBDKIT", "nbdkit"), "-U", sock,
                        "-P", pidfile] + list(args),
                       stdin=subprocess.DEVNULL, capture_output=True,
                       timeout=20)
    if r.returncode != 0 or not os.path.exists(sock):
        raise AssertionError("remote nbdkit %r did not start (%d): %s"
                             % (args, r.returncode, r.stderr.decode()))
    # nbdkit 1.32 listens before it forks; the child writes the pid file.
    poll(lambda: os.path.exists(pidfile) and os.path.getsize(pidfile) > 0,
         10, "pid file of the remote nbdkit")
