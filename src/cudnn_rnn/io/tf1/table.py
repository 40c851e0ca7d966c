"""The sorted string table (SSTable) of TensorFlow's checkpoint index: LevelDB's table format.

A table maps byte-string keys, sorted bytewise, to byte-string values; TensorFlow's tensor bundle
(:mod:`cudnn_rnn.io.tf1.bundle`) keeps its index in one::

    table    = [data block][trailer] ... [metaindex block][trailer] [index block][trailer] footer
    block    = entry* restart_offset:u32* num_restarts:u32     (keys prefix-compressed; a
    entry    = shared:varint non_shared:varint value_len:varint   restart point stores a
               key[shared:] value                                  whole key)
    trailer  = compression:u8 (0: none) masked_crc32c(block + compression):u32
    footer   = metaindex handle, index handle (varint offset, varint size each),
               zero padding to 40 bytes, magic 0xdb4775248b80fb57:u64   (48 bytes in all)
    index    = a block with one entry per data block: a key >= the block's keys, its handle

Integers are little-endian, ``varint`` is protobuf's base-128 encoding
(:mod:`cudnn_rnn.io.tf1.protobuf_wire`), ``masked_crc32c(x) = rotr(crc32c(x), 15) +
0xa282ead8`` (CRC-32C from the ``google-crc32c`` library). TensorFlow writes checkpoint indexes
uncompressed: a snappy-compressed block is refused with a clear error.

The reader trusts nothing: every handle is checked against the table's size, every block's
checksum is verified, keys must be strictly increasing and restart points at whole keys, and
anything else raises :class:`~cudnn_rnn.io.tf1.protobuf_wire.Malformed`. The writer lays a
table out byte for byte as TensorFlow's ``TableBuilder`` does.

>>> data = build_table([(b"a", b"1"), (b"b", b"22")], BLOCK_SIZE, RESTART_INTERVAL)
>>> read_table(data)
[(b'a', b'1'), (b'b', b'22')]
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator

import google_crc32c

from cudnn_rnn.io.files.sniffing import TF_TABLE_MAGIC
from cudnn_rnn.io.tf1.protobuf_wire import Malformed, encode_varint, read_varint

__all__ = [
    "BLOCK_SIZE",
    "FOOTER_SIZE",
    "HANDLES_SIZE",
    "MAGIC",
    "NO_COMPRESSION",
    "RESTART_INTERVAL",
    "SNAPPY",
    "TRAILER_SIZE",
    "BlockBuilder",
    "block_entries",
    "build_table",
    "crc32c",
    "finish_block",
    "masked_crc32c",
    "parse_block",
    "read_block",
    "read_footer",
    "read_handle",
    "read_table",
    "show_key",
    "table_entries",
    "unmask_crc32c",
]

MAGIC = TF_TABLE_MAGIC  # 0xdb4775248b80fb57; cudnn_rnn.io.files.sniff knows an index by it
FOOTER_SIZE = 48
HANDLES_SIZE = 40  # two BlockHandles, zero-padded
TRAILER_SIZE = 5
NO_COMPRESSION, SNAPPY = 0, 1
BLOCK_SIZE = 262144  # TensorFlow's table defaults
RESTART_INTERVAL = 16
_KEY_BYTES_PER_BLOCK_BYTE = 256  # bounds the work a hostile, deeply prefix-shared block can cause

# --------------------------------------------------------------------------------------------
# checksums

_MASK32 = 0xFFFFFFFF
_CRC_MASK_DELTA = 0xA282EAD8
# google-crc32c takes only ``bytes``: other buffers are checksummed a slice at a time, each copied
# while it is small enough to stay in the cache.
_CRC_CHUNK = 1 << 20


def crc32c(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """CRC-32C (Castagnoli) of ``data``; pass the crc of preceding bytes as ``crc`` to continue it.

    >>> hex(crc32c(b"123456789"))
    '0xe3069283'
    >>> crc32c(b"6789", crc32c(b"12345")) == crc32c(b"123456789")
    True
    """
    if isinstance(data, bytes):
        return int(google_crc32c.extend(crc, data))
    view = memoryview(data).cast("B")
    for start in range(0, len(view), _CRC_CHUNK):
        crc = int(google_crc32c.extend(crc, bytes(view[start : start + _CRC_CHUNK])))
    return crc


def masked_crc32c(data: bytes | bytearray | memoryview) -> int:
    """The masked CRC-32C that TensorFlow stores (so a crc of crc-bearing data is not trivial).

    >>> hex(masked_crc32c(b""))
    '0xa282ead8'
    """
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & _MASK32) + _CRC_MASK_DELTA) & _MASK32


def unmask_crc32c(masked: int) -> int:
    """The CRC-32C that :func:`masked_crc32c` masked."""
    rot = (masked - _CRC_MASK_DELTA) & _MASK32
    return ((rot >> 17) | (rot << 15)) & _MASK32


# --------------------------------------------------------------------------------------------
# reading


def read_handle(buf: bytes, pos: int, end: int, what: str) -> tuple[int, int, int]:
    """The BlockHandle (offset, size) at ``buf[pos:end]``, and the position after it."""
    offset, pos = read_varint(buf, pos, end, 64, what)
    size, pos = read_varint(buf, pos, end, 64, what)
    return offset, size, pos


def _check_span(offset: int, size: int, limit: int, what: str) -> None:
    if offset + size + TRAILER_SIZE > limit:
        raise Malformed(
            f"{what} (offset {offset}, {size} bytes + {TRAILER_SIZE}-byte trailer) runs past "
            f"the end of the table data ({limit} bytes before the footer)"
        )


def read_footer(footer: bytes, n: int) -> tuple[int, int, int, int]:
    """The metaindex and index block handles (offset, size, offset, size) of a table of ``n``
    bytes whose last :data:`FOOTER_SIZE` bytes are ``footer``: its magic number checked and the
    blocks inside the table. A reader calls it with the file's end before it reads the bulk."""
    if n < FOOTER_SIZE:
        raise Malformed(f"{n} bytes is too short for a table (its footer alone is 48 bytes)")
    magic = int.from_bytes(footer[HANDLES_SIZE:], "little")
    if magic != MAGIC:
        raise Malformed(
            f"bad magic number {magic:#018x} (expected {MAGIC:#018x}): not a TensorFlow "
            "checkpoint index, or truncated"
        )
    meta_offset, meta_size, pos = read_handle(footer, 0, HANDLES_SIZE, "footer")
    index_offset, index_size, _ = read_handle(footer, pos, HANDLES_SIZE, "footer")
    _check_span(meta_offset, meta_size, n - FOOTER_SIZE, "metaindex block")
    _check_span(index_offset, index_size, n - FOOTER_SIZE, "index block")
    return meta_offset, meta_size, index_offset, index_size


def read_block(data: bytes, offset: int, size: int, limit: int, what: str) -> bytes:
    """The contents of the block at ``offset``, its trailer's checksum verified."""
    _check_span(offset, size, limit, what)
    end = offset + size
    stored = int.from_bytes(data[end + 1 : end + TRAILER_SIZE], "little")
    actual = crc32c(memoryview(data)[offset : end + 1])  # the crc covers the compression byte too
    if unmask_crc32c(stored) != actual:
        raise Malformed(
            f"{what} (offset {offset}): crc32c mismatch (stored {unmask_crc32c(stored):#010x}, "
            f"computed {actual:#010x}); the file is corrupt"
        )
    kind = data[end]
    if kind == SNAPPY:
        raise Malformed(
            f"{what} is snappy-compressed; TensorFlow writes checkpoint indexes uncompressed "
            "and this reader does not decompress snappy"
        )
    if kind != NO_COMPRESSION:
        raise Malformed(f"{what}: unknown compression type {kind}")
    return data[offset:end]


def block_entries(block: bytes, what: str) -> Iterator[tuple[bytes, int, int]]:
    """Every entry of a block as (key, start, end), its value being ``block[start:end]``; all
    checked: in bounds, keys strictly increasing, restart points at whole keys (the last checks
    end the iteration, so consume it all).

    Runs once per entry of the index: the one-byte varints that nearly every entry has are decoded
    inline, and values stay in the block (offsets, no copies); memory does not grow with the
    block's entries.
    """
    size = len(block)
    if size < 4:
        raise Malformed(f"{what}: {size} bytes is too short for a block")
    num_restarts = int.from_bytes(block[size - 4 :], "little")
    if num_restarts > (size - 4) // 4:
        raise Malformed(f"{what}: {num_restarts} restart points do not fit in {size} bytes")
    end = size - 4 - 4 * num_restarts
    restarts = struct.unpack_from(f"<{num_restarts}I", block, end)
    for i in range(1, num_restarts):
        if restarts[i] <= restarts[i - 1]:
            raise Malformed(f"{what}: restart point {restarts[i]} is not the start of a whole key")
    next_restart = 0  # index into restarts: every restart point must be met at a whole key
    budget = _KEY_BYTES_PER_BLOCK_BYTE * size + 65536
    read = read_varint
    key = b""
    pos = 0
    while pos < end:
        start = pos
        shared = block[pos]
        if shared < 0x80:
            pos += 1
        else:
            shared, pos = read(block, pos, end, 32, what)
        if pos < end and block[pos] < 0x80:
            non_shared = block[pos]
            pos += 1
        else:
            non_shared, pos = read(block, pos, end, 32, what)
        if pos < end and block[pos] < 0x80:
            value_len = block[pos]
            pos += 1
        else:
            value_len, pos = read(block, pos, end, 32, what)
        if shared > len(key):
            raise Malformed(
                f"{what}: entry at {start} shares {shared} bytes of a {len(key)}-byte key"
            )
        if non_shared + value_len > end - pos:
            raise Malformed(f"{what}: entry at {start} runs past the end of the block")
        budget -= shared + non_shared
        if budget < 0:
            raise Malformed(f"{what}: keys are implausibly long for the block's size")
        if next_restart < num_restarts and restarts[next_restart] <= start:
            restart = restarts[next_restart]
            if restart < start or shared:
                raise Malformed(f"{what}: restart point {restart} is not the start of a whole key")
            next_restart += 1
        elif not start:
            raise Malformed(f"{what}: the first entry is not a restart point")
        if shared:
            new_key = key[:shared] + block[pos : pos + non_shared]
        else:
            new_key = block[pos : pos + non_shared]
        if new_key <= key and start:
            raise Malformed(f"{what}: keys are not in strictly increasing order at entry {start}")
        key = new_key
        pos += non_shared
        yield key, pos, pos + value_len
        pos += value_len
    for restart in restarts[next_restart:]:
        if end or restart:  # an empty block has the one restart point 0
            raise Malformed(f"{what}: restart point {restart} is not the start of a whole key")


def parse_block(block: bytes, what: str) -> list[tuple[bytes, int, int]]:
    """All of :func:`block_entries`."""
    return list(block_entries(block, what))


def table_entries(data: bytes) -> Iterator[tuple[bytes, bytes, int, int, int]]:
    """Every entry of an SSTable, in key order, as (key, its block's contents, start and end of
    the value in the block, offset of the block in ``data``); all checksums verified, one block
    in memory at a time."""
    n = len(data)
    meta_offset, meta_size, index_offset, index_size = read_footer(data[-FOOTER_SIZE:], n)
    limit = n - FOOTER_SIZE
    read_block(data, meta_offset, meta_size, limit, "metaindex block")  # checksum only
    index = read_block(data, index_offset, index_size, limit, "index block")
    lower: bytes | None = None  # every key of a block is > the previous block's separator
    next_free = 0
    for separator, start, end in parse_block(index, "index block"):
        offset, size, used = read_handle(index, start, end, "index block entry")
        if used != end:
            raise Malformed("index block entry: trailing bytes after the block handle")
        if offset < next_free:
            raise Malformed(f"index block: data block at offset {offset} overlaps the one before")
        what = f"data block at offset {offset}"
        block = read_block(data, offset, size, limit, what)
        for key, value_start, value_end in block_entries(block, what):
            if (lower is not None and key <= lower) or key > separator:
                raise Malformed(f"{what}: key {show_key(key)} lies outside its index range")
            yield key, block, value_start, value_end, offset
        lower = separator
        next_free = offset + size + TRAILER_SIZE


def read_table(data: bytes) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of an SSTable, in order, all checksums verified."""
    return [(key, block[start:end]) for key, block, start, end, _ in table_entries(data)]


def show_key(key: bytes | str) -> str:
    """``repr(key)``, cut short: a key may be megabytes long, an error message should not be."""
    if len(key) <= 200:
        return repr(key)
    return f"{key[:200]!r}... ({len(key)} long)"


# --------------------------------------------------------------------------------------------
# writing


def finish_block(buffer: bytearray, restarts: list[int]) -> bytes:
    """A block's entries ``buffer`` closed by its restart points and their count."""
    return bytes(buffer) + struct.pack(f"<{len(restarts) + 1}I", *restarts, len(restarts))


class BlockBuilder:
    """LevelDB's block builder: prefix-compressed keys, a restart point every ``interval``."""

    def __init__(self, interval: int) -> None:
        self.interval = interval
        self.buffer = bytearray()
        self.restarts = [0]
        self.counter = 0
        self.last_key = b""

    def add(self, key: bytes, value: bytes) -> None:
        shared = 0
        if self.counter < self.interval:
            limit = min(len(key), len(self.last_key))
            while shared < limit and key[shared] == self.last_key[shared]:
                shared += 1
        else:
            self.restarts.append(len(self.buffer))
            self.counter = 0
        self.buffer += (
            encode_varint(shared) + encode_varint(len(key) - shared) + encode_varint(len(value))
        )
        self.buffer += key[shared:] + value
        self.last_key = key
        self.counter += 1

    def size_estimate(self) -> int:
        return len(self.buffer) + 4 * len(self.restarts) + 4

    def finish(self) -> bytes:
        return finish_block(self.buffer, self.restarts)


def _shortest_separator(start: bytes, limit: bytes) -> bytes:
    """A short key in ``[start, limit)`` (TensorFlow's table builder's choice, byte for byte)."""
    n = min(len(start), len(limit))
    i = 0
    while i < n and start[i] == limit[i]:
        i += 1
    if i < n and start[i] < 0xFF and start[i] + 1 < limit[i]:
        return start[:i] + bytes([start[i] + 1])
    return start


def _short_successor(key: bytes) -> bytes:
    """A short key >= ``key``."""
    for i, byte in enumerate(key):
        if byte != 0xFF:
            return key[:i] + bytes([byte + 1])
    return key


def build_table(
    entries: Iterable[tuple[bytes, bytes]], block_size: int, restart_interval: int
) -> bytes:
    """An SSTable of sorted ``entries``, laid out exactly as TensorFlow's TableBuilder does."""
    out = bytearray()

    def write_block(contents: bytes) -> bytes:
        handle = encode_varint(len(out)) + encode_varint(len(contents))
        out.extend(contents)
        out.append(NO_COMPRESSION)
        out.extend(masked_crc32c(contents + bytes([NO_COMPRESSION])).to_bytes(4, "little"))
        return handle

    data_block = BlockBuilder(restart_interval)
    index_block = BlockBuilder(1)
    pending: bytes | None = None  # handle of the last data block, awaiting its index key
    last_key = b""
    first = True

    def flush() -> None:
        nonlocal data_block, pending
        if data_block.buffer:
            pending = write_block(data_block.finish())
            data_block = BlockBuilder(restart_interval)

    for key, value in entries:
        if not first and len(key) + len(value) >= 2 * block_size:
            flush()  # an overly large entry gets a block of its own
        if pending is not None:
            index_block.add(_shortest_separator(last_key, key), pending)
            pending = None
        last_key, first = key, False
        data_block.add(key, value)
        if data_block.size_estimate() >= block_size:
            flush()
    flush()
    meta_handle = write_block(BlockBuilder(restart_interval).finish())
    if pending is not None:
        index_block.add(_short_successor(last_key), pending)
    index_handle = write_block(index_block.finish())
    handles = meta_handle + index_handle
    out.extend(handles + bytes(HANDLES_SIZE - len(handles)) + MAGIC.to_bytes(8, "little"))
    return bytes(out)
