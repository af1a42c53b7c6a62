"""Helpers for the plugq client tests (run by /usr/bin/python3, which has
the libnbd bindings).  Every check raises AssertionError with a message
that says what was expected and what was found, so a failing Bats test
shows the reason.

The socket of the server started by start_plugq is in $PLUGQ_SOCK.
"""

import json
import os
import random
import time

import nbd

KiB = 1024
MiB = 1024 * 1024
GiB = 1024 * MiB
SOCK = os.environ.get("PLUGQ_SOCK")


def connect(export="", sock=None, meta=True):
    """A connected handle to export on the unix socket."""
    h = nbd.NBD()
    if meta:
        h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
    h.set_export_name(export)
    h.connect_unix(sock or SOCK)
    return h


def fill(byte, n):
    return bytes([byte]) * n


def pattern(seed, n):
    """n deterministic pseudo-random bytes: every seed gives other data."""
    return random.Random(seed).randbytes(n)


def save_image(path, img, chunk=MiB):
    """Writes img to path as a sparse file: only its chunks that hold a
    non-zero byte.  A 128 MiB image written whole costs a second or more
    here, which every real-client scenario used to pay."""
    zero = bytes(chunk)
    view = memoryview(img)
    with open(path, "wb") as f:
        for off in range(0, len(img), chunk):
            piece = view[off:off + chunk]
            if piece != zero[:len(piece)]:
                f.seek(off)
                f.write(piece)
        f.truncate(len(img))


def fread(path, off, n):
    with open(path, "rb") as f:
        f.seek(off)
        return f.read(n)


def _first_diff(got, want):
    for i in range(min(len(got), len(want))):
        if got[i] != want[i]:
            return i
    return min(len(got), len(want))


def expect_bytes(got, want, what, base=0):
    """got must equal want; base is the offset of got[0], for the message."""
    got = bytes(got)
    want = bytes(want)
    if got == want:
        return
    i = _first_diff(got, want)
    g = "%#04x" % got[i] if i < len(got) else "EOF"
    w = "%#04x" % want[i] if i < len(want) else "EOF"
    # Count how far the mismatch runs, to tell one byte from a whole range.
    j = i
    while j < min(len(got), len(want)) and got[j] != want[j]:
        j += 1
    raise AssertionError(
        "%s: mismatch at offset %d (+%d into the checked range of %d bytes): "
        "got %s, expected %s; %d bytes differ from there (got %d bytes)"
        % (what, base + i, i, len(want), g, w, max(j - i, 1), len(got)))


def expect_file(path, off, want, what=None):
    """The file holds want at off (read straight from the file)."""
    expect_bytes(fread(path, off, len(want)), want,
                 what or "file %s" % os.path.basename(path), off)


def file_has(path, off, want):
    return fread(path, off, len(want)) == bytes(want)


def expect_read(h, off, want, what="read"):
    expect_bytes(h.pread(len(want), off), want, what, off)


def expect_read_fill(h, off, n, byte, what="read", chunk=4 * MiB):
    """Every byte of [off, off+n) reads as byte, checked chunk by chunk."""
    end = off + n
    while off < end:
        c = min(chunk, end - off)
        expect_bytes(h.pread(c, off), fill(byte, c), what, off)
        off += c


def poll(cond, timeout, what, interval=0.01):
    """Polls cond() until it is true; fails after timeout seconds.
    Returns the seconds it took."""
    t0 = time.monotonic()
    while True:
        if cond():
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise AssertionError("%s: not seen within %gs" % (what, timeout))
        time.sleep(interval)


def reads_as(h, off, want):
    """Whether h reads want at off; False while the disk answers EIO
    (a lost remote, say), any other error raises."""
    try:
        return h.pread(len(want), off) == want
    except nbd.Error as e:
        if e.errno != "EIO":
            raise
        return False


def aio_pwrite_all(h, writes, flags=0):
    """Submits every (data, offset) at once (pipelined), then waits for all
    answers.  Fails if any write failed."""
    bufs = []
    cookies = []
    for data, off in writes:
        b = nbd.Buffer.from_bytearray(bytearray(data))
        bufs.append(b)
        cookies.append(h.aio_pwrite(b, off, flags=flags))
    while h.aio_in_flight() > 0:
        h.poll(-1)
    for c in cookies:
        if not h.aio_command_completed(c):
            raise AssertionError("aio write %d did not complete" % c)
    return len(cookies)


def extents(h, count, off):
    """base:allocation extents as a list of (offset, length, flags),
    clipped to the request."""
    out = []

    def cb(metacontext, offset, entries, err):
        if metacontext != nbd.CONTEXT_BASE_ALLOCATION:
            return 0
        o = offset
        for i in range(0, len(entries), 2):
            out.append((o, entries[i], entries[i + 1]))
            o += entries[i]
        return 0

    end = off + count
    pos = off
    while pos < end:
        before = len(out)
        h.block_status(end - pos, pos, cb)
        if len(out) == before:
            raise AssertionError("block_status at %d returned no extent" % pos)
        pos = out[-1][0] + out[-1][1]
    return [(o, min(ln, end - o), fl) for (o, ln, fl) in out if o < end]


def flags_at(ext, off):
    for o, ln, fl in ext:
        if o <= off < o + ln:
            return fl
    raise AssertionError("no extent covers offset %d: %r" % (off, ext))


def expect_no_zero_flag(h, off, n, what):
    """Extents must not call [off, off+n) zero or hole: it holds data."""
    for o, ln, fl in extents(h, n, off):
        if fl & (nbd.STATE_HOLE | nbd.STATE_ZERO):
            raise AssertionError(
                "%s: extent %d+%d has flags %d (hole=1, zero=2) but holds data"
                % (what, o, ln, fl))


# ---------------------------------------------------------------- stats

def load_stats(path):
    with open(path) as f:
        return json.load(f)


def _candidates(node, key=None, out=None):
    """(key, object) for every JSON object that holds queue counters."""
    if out is None:
        out = []
    if isinstance(node, dict):
        if "unplugs" in node or "write" in node and isinstance(node["write"], dict):
            out.append((key, node))
        for k, v in node.items():
            _candidates(v, k, out)
    elif isinstance(node, list):
        for v in node:
            _candidates(v, key, out)
    return out


def disk_stats(doc, disk):
    """The counters object of one disk, whether the document keys disks by
    name ({"disks": {"d": {...}}}) or lists them ([{"name": "d", ...}])."""
    cands = _candidates(doc)
    for k, obj in cands:
        if obj.get("name") == disk or obj.get("disk") == disk:
            return obj
    for k, obj in cands:
        if k == disk:
            return obj
    raise AssertionError("no statistics for disk %r in %s"
                         % (disk, json.dumps(doc)[:2000]))


def stat(doc, disk, dotted):
    node = disk_stats(doc, disk)
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise AssertionError("statistics of %r have no %s: %s"
                                 % (disk, dotted, json.dumps(disk_stats(doc, disk))[:2000]))
        node = node[part]
    return node
