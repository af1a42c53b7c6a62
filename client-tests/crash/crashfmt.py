"""Self-describing sector contents and the journal format shared by
workload.py (which writes them) and check.py (which verifies them).

Every 512-byte sector a workload write puts on the disk says which write
put it there and where it belongs:

    0   4  magic b"PQCR"
    4   8  write id (>= 1, in the order the workload issued its writes)
    12  8  sector number (offset / 512)
    20  4  crc32 of bytes 0..19 and 24..511
    24 488 filler derived from (write id, sector number)

so the checker can tell, for every sector of the backing file, which
version it holds (0 = never written: all zeroes), or that it holds
neither a whole version nor zeroes ("garbage": a torn or foreign write).

The journal is a text file, one promise per line, appended and fsynced
only after the server's answer arrived:

    F ID OFFSET LENGTH    a FUA write that was answered with success
    W ID OFFSET LENGTH    a write covered by a FLUSH that was answered with
                          success (its answer had arrived before the FLUSH
                          was sent)
    R                     (first line) a new round
"""

import struct
import zlib

SECTOR = 512
MAGIC = b"PQCR"
_HEAD = struct.Struct("<4sQQ")


def sector_bytes(wid, sector):
    head = _HEAD.pack(MAGIC, wid, sector)
    seed = struct.pack("<QQ", wid * 0x9E3779B97F4A7C15 & (2**64 - 1), sector)
    filler = (seed * 31)[:SECTOR - 24]
    crc = zlib.crc32(head + filler)
    return head + struct.pack("<I", crc) + filler


def write_bytes(wid, offset, length):
    assert offset % SECTOR == 0 and length % SECTOR == 0
    first = offset // SECTOR
    return b"".join(sector_bytes(wid, first + i)
                    for i in range(length // SECTOR))


ZERO_SECTOR = bytes(SECTOR)


def parse_sector(buf, sector):
    """The write id a sector holds: 0 for zeroes, None for garbage (not a
    whole version of this very sector)."""
    if buf == ZERO_SECTOR:
        return 0
    if len(buf) != SECTOR or buf[:4] != MAGIC:
        return None
    _, wid, sec = _HEAD.unpack_from(buf)
    if sec != sector or wid == 0:
        return None
    crc, = struct.unpack_from("<I", buf, 20)
    if zlib.crc32(buf[:20] + buf[24:]) != crc:
        return None
    return wid
