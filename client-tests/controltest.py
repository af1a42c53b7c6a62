"""Helpers for the reconfiguration tests: plugqctl's own code, loaded from
the source tree, to talk to a control=PATH socket from Python (a Bats
test runs the plugqctl command itself; loops that send hundreds of
commands use this, to spare a Python start per command).
"""

import importlib.machinery
import importlib.util
import os
import socket

_TOP = os.environ.get("top_srcdir") or os.path.join(os.path.dirname(__file__), "..")


def _load_plugqctl():
    path = os.path.join(_TOP, "plugqctl")
    loader = importlib.machinery.SourceFileLoader("plugqctl", path)
    spec = importlib.util.spec_from_loader("plugqctl", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


plugqctl = _load_plugqctl()


def control(path, *words):
    """Runs one command: (data lines, None) or (data lines, the ERR message)."""
    with plugqctl.connect(path) as s:
        s.sendall(plugqctl.command_line(words))
        return plugqctl.read_answer(s, path)


def must(path, *words):
    """Runs one command that must succeed; its data lines."""
    out, err = control(path, *words)
    if err is not None:
        raise AssertionError(f"{' '.join(words)}: refused: {err}")
    return out


def refused(path, *words):
    """Runs one command that must be refused; its message."""
    out, err = control(path, *words)
    if err is None:
        raise AssertionError(f"{' '.join(words)}: accepted, expected a refusal "
                             f"(said: {out})")
    return err


def raw(path, data, read=True, timeout=30):
    """Sends bytes as they are (no encoding, no newline added); the whole
    answer as text ('' if the server said nothing)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(path)
    try:
        s.sendall(data)
        if not read:
            return ""
        chunks = []
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks).decode("utf-8", "replace")
    finally:
        s.close()


def listing(path):
    """list as {name: {kind, bytes, clients, state}}."""
    rows = {}
    for line in must(path, "list")[1:]:
        f = line.split()
        rows[f[0]] = {"kind": f[1], "bytes": int(f[2]), "clients": int(f[3]),
                      "state": f[4]}
    return rows


def wait_clients(path, name, n, timeout=10):
    """Until list shows n clients on name: a client's disconnect returns
    before the server has run its close."""
    import time
    deadline = time.monotonic() + timeout
    while True:
        rows = listing(path)
        if name in rows and rows[name]["clients"] == n:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{name}: not {n} clients within {timeout} s: {rows.get(name)}")
        time.sleep(0.01)
