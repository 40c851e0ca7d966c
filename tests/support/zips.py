"""Zip archives assembled byte by byte, for tests of the one zip reader: members whose central
directory entries may point anywhere, declare any size, or repeat; zip64 records on demand.

:func:`archive` writes each :class:`Member`'s local header and bytes in turn, then one central
directory entry per member (``entries`` may edit, add or drop them first), then the end records.
Nothing here checks anything: that is the point.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

STORED, DEFLATED = 0, 8
_U32 = 0xFFFFFFFF


@dataclass(frozen=True)
class Member:
    """A member as the archive tells it: ``data`` is what lies in the file (deflated already
    for ``method=DEFLATED``); ``size`` and ``crc`` are what its entries declare."""

    name: str
    data: bytes
    size: int
    crc: int
    method: int = STORED
    offset: int = 0  # of the local header, set by archive()
    descriptor: bool = False  # flag bit 3: sizes after the data, zeros in the local header


def stored(name: str, data: bytes) -> Member:
    return Member(name, data, len(data), zlib.crc32(data))


def deflated(name: str, chunks: Iterable[bytes]) -> Member:
    """A deflated member of the concatenated ``chunks`` (never all held at once)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    out, size, crc = [], 0, 0
    for chunk in chunks:
        out.append(compressor.compress(chunk))
        size += len(chunk)
        crc = zlib.crc32(chunk, crc)
    out.append(compressor.flush())
    return Member(name, b"".join(out), size, crc, DEFLATED)


def zeros(total: int, chunk: int = 1 << 20) -> Iterable[bytes]:
    block = bytes(chunk)
    for start in range(0, total, chunk):
        yield block[: min(chunk, total - start)]


def local_header(m: Member) -> bytes:
    name = m.name.encode()
    flags = 0x0808 if m.descriptor else 0x0800
    crc, compressed, size = (0, 0, 0) if m.descriptor else (m.crc, len(m.data), m.size)
    return (
        struct.pack(
            "<4sHHHHHIIIHH", b"PK\x03\x04", 20, flags, m.method, 0, 0x21, crc, compressed, size,
            len(name), 0,
        )
        + name
    )  # fmt: skip


def _central(m: Member, zip64: bool) -> bytes:
    name = m.name.encode()
    values = (m.size, len(m.data), m.offset)
    extra = b""
    if zip64:
        extra = struct.pack("<HH3Q", 1, 24, *values)
        values = (_U32, _U32, _U32)
    size, compressed, offset = values
    flags = 0x0808 if m.descriptor else 0x0800
    return (
        struct.pack(
            "<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 45, 20, flags, m.method, 0, 0x21, m.crc,
            compressed, size, len(name), len(extra), 0, 0, 0, 0, offset,
        )
        + name
        + extra
    )  # fmt: skip


def archive(
    members: list[Member],
    entries: Callable[[list[Member]], list[Member]] = lambda ms: ms,
    *,
    zip64: bool = False,
    comment: bytes = b"",
    count: int | None = None,
) -> bytes:
    """The bytes of an archive of ``members``; ``entries`` maps the placed members (offsets
    set) to the central directory's entries; ``count`` overrides the count the end records
    give; ``zip64`` writes zip64 extra fields and end records."""
    out = bytearray()
    placed = []
    for m in members:
        placed.append(replace(m, offset=len(out)))
        out += local_header(m) + m.data
    start = len(out)
    listed = entries(placed)
    for m in listed:
        out += _central(m, zip64)
    length = len(out) - start
    n = len(listed) if count is None else count
    if zip64:
        record = len(out)
        out += struct.pack("<4sQHHIIQQQQ", b"PK\x06\x06", 44, 45, 45, 0, 0, n, n, length, start)
        out += struct.pack("<4sIQI", b"PK\x06\x07", 0, record, 1)
        n16, length32, start32 = 0xFFFF, _U32, _U32
    else:
        n16, length32, start32 = n, length, start
    out += struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, n16, n16, length32, start32, len(comment))
    return bytes(out + comment)


def members_of(data: bytes) -> list[Member]:
    """The members of a stored zip that Python's zipfile reads (to rebuild it another way)."""
    import io
    import zipfile

    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return [
            Member(i.filename, z.read(i), i.file_size, i.CRC)
            for i in z.infolist()
            if i.compress_type == zipfile.ZIP_STORED
        ]
