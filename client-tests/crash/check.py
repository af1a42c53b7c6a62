#!/usr/bin/python3
"""Checks a backing file against a crash-workload journal.

    check.py FILE JOURNAL

For every sector, the journal gives the newest write id the server
promised was durable (FUA answered, or covered by an answered FLUSH).
The file must hold that version or a newer one (a later write that may
or may not have been answered); zeroes or an older version there is a
broken promise.  Sectors holding neither zeroes nor a whole version
(garbage: a torn write, or bytes no request wrote) are failures too,
wherever they are.  Sectors without a promise may hold anything else.

Exit status 0 when every promise is kept, 1 otherwise; prints a summary
line and up to 20 examples of failures.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from crashfmt import SECTOR, parse_sector  # noqa: E402


def load_promises(journal):
    """sector -> newest promised write id."""
    durable = {}
    entries = 0
    with open(journal) as f:
        for line in f:
            parts = line.split()
            if not parts or parts[0] not in ("F", "W"):
                continue
            wid, off, ln = (int(x) for x in parts[1:4])
            entries += 1
            for s in range(off // SECTOR, (off + ln) // SECTOR):
                if durable.get(s, 0) < wid:
                    durable[s] = wid
    return durable, entries


def check(path, journal):
    durable, entries = load_promises(journal)
    with open(path, "rb") as f:
        data = f.read()
    nsec = len(data) // SECTOR
    bad = []
    kept = newer = garbage = 0
    for s in range(nsec):
        buf = data[s * SECTOR:(s + 1) * SECTOR]
        want = durable.get(s, 0)
        if want == 0 and buf == bytes(SECTOR):
            continue
        got = parse_sector(buf, s)
        if got is None:
            garbage += 1
            bad.append("sector %d (offset %d): garbage (neither zeroes nor a "
                       "whole version), promised version %d"
                       % (s, s * SECTOR, want))
        elif got < want:
            bad.append("sector %d (offset %d): holds version %d, but version "
                       "%d was promised durable%s"
                       % (s, s * SECTOR, got, want,
                          " (zeroes: the data is lost)" if got == 0 else
                          " (an older write landed on top)"))
        elif want:
            if got == want:
                kept += 1
            else:
                newer += 1
    missing = [s for s in durable if s >= nsec]
    for s in missing[:5]:
        bad.append("sector %d: promised but beyond the end of the file" % s)
    print("journal=%d promises, %d sectors promised: %d hold the promised "
          "version, %d a newer one, %d garbage, %d broken"
          % (entries, len(durable), kept, newer, garbage, len(bad)))
    for b in bad[:20]:
        print("  " + b)
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(check(sys.argv[1], sys.argv[2]))
