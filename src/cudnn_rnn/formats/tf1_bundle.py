"""TensorFlow tensor-bundle checkpoints (what TF1's ``tf.train.Saver`` writes), without TensorFlow.

A checkpoint with prefix ``P`` is an index, ``P.index``, and data shards
``P.data-00000-of-0000N`` that hold the raw tensor bytes back to back (row-major, in the byte
order the header names). ``P.index`` is a LevelDB-style sorted string table (SSTable) that maps
each tensor name to a ``BundleEntryProto`` (dtype, shape, shard, offset, size, masked crc32c);
its empty key holds a ``BundleHeaderProto`` (number of shards, byte order, format version)::

    P.index  = [data block][trailer] ... [metaindex block][trailer] [index block][trailer] footer
    block    = entry* restart_offset:u32* num_restarts:u32     (keys prefix-compressed; a
    entry    = shared:varint non_shared:varint value_len:varint   restart point stores a
               key[shared:] value                                  whole key)
    trailer  = compression:u8 (0: none) masked_crc32c(block + compression):u32
    footer   = metaindex handle, index handle (varint offset, varint size each),
               zero padding to 40 bytes, magic 0xdb4775248b80fb57:u64   (48 bytes in all)
    index    = a block with one entry per data block: a key >= the block's keys, its handle

Integers are little-endian, ``varint`` is protobuf's base-128 encoding, keys are sorted bytewise,
``masked_crc32c(x) = rotr(crc32c(x), 15) + 0xa282ead8``. TensorFlow writes the index uncompressed
(snappy-compressed blocks are refused with a clear error) and one data shard per ``Saver.save``
without ``sharded=True``.

The reader trusts nothing in the files: every length, offset and count is checked against the file
sizes before it is used, every block and tensor checksum is verified, and anything corrupt,
truncated or hostile raises :class:`TF1BundleError` naming the file and what was wrong.

Supported dtypes: float16/32/64, bfloat16, complex64/128, int8/16/32/64, uint8/16/32/64, bool.
NumPy has no bfloat16: the reader widens it to float32 (exactly) or returns the raw ``uint16``
bits (``bfloat16="bits"``); the writer stores as bfloat16 the names listed in ``bfloat16=``
(``uint16`` bits, or float32 values that bfloat16 holds exactly) and any ``ml_dtypes.bfloat16``
array. Strings, resources, variants, quantized types and partitioned (sliced) variables are listed
by :func:`read_bundle_index` but cannot be read.

>>> import os, tempfile, numpy as np
>>> prefix = os.path.join(tempfile.mkdtemp(), "model.ckpt")
>>> write_bundle(prefix, {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "step": np.int64(7)})
>>> sorted(os.listdir(os.path.dirname(prefix)))
['model.ckpt.data-00000-of-00001', 'model.ckpt.index']
>>> read_bundle_index(prefix)["w"].shape
(2, 3)
>>> tensors = read_bundle(prefix)
>>> tensors["w"].tolist(), tensors["step"].dtype
([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], dtype('int64'))
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import io
import math
import os
import re
import stat
import struct
from array import array
from collections.abc import Collection, ItemsView, Iterable, Iterator, Mapping, ValuesView
from dataclasses import dataclass
from typing import Any, BinaryIO, Literal

import numpy as np
import numpy.typing as npt

from cudnn_rnn import atomic

__all__ = [
    "SUPPORTED_DTYPES",
    "BundleEntry",
    "TF1BundleError",
    "bundle_prefix",
    "crc32c",
    "masked_crc32c",
    "read_bundle",
    "read_bundle_index",
    "write_bundle",
]

Array = npt.NDArray[Any]


class TF1BundleError(ValueError):
    """A tensor bundle that is corrupt, truncated, hostile, or uses a feature this reader lacks."""


class _Malformed(Exception):
    """Raised while parsing; the public function adds the file's path and re-raises."""


# --------------------------------------------------------------------------------------------
# dtypes: TensorFlow DataType enum <-> NumPy (little-endian storage)

_DT_BFLOAT16 = 14
_DTYPES: dict[int, tuple[str, str]] = {  # enum -> (name, little-endian NumPy code of the bytes)
    1: ("float32", "<f4"),
    2: ("float64", "<f8"),
    3: ("int32", "<i4"),
    4: ("uint8", "|u1"),
    5: ("int16", "<i2"),
    6: ("int8", "|i1"),
    8: ("complex64", "<c8"),
    9: ("int64", "<i8"),
    10: ("bool", "|b1"),
    _DT_BFLOAT16: ("bfloat16", "<u2"),
    17: ("uint16", "<u2"),
    18: ("complex128", "<c16"),
    19: ("float16", "<f2"),
    22: ("uint32", "<u4"),
    23: ("uint64", "<u8"),
}
_UNSUPPORTED_DTYPES = {
    7: "string",
    11: "qint8",
    12: "quint8",
    13: "qint32",
    15: "qint16",
    16: "quint16",
    20: "resource",
    21: "variant",
    24: "float8_e5m2",
    25: "float8_e4m3fn",
}
#: Names of the dtypes this module reads and writes.
SUPPORTED_DTYPES: tuple[str, ...] = tuple(sorted(name for name, _ in _DTYPES.values()))
# NumPy storage code -> enum, for the writer (bfloat16 is chosen explicitly, never by code).
_ENUM_OF_CODE = {code: enum for enum, (_, code) in _DTYPES.items() if enum != _DT_BFLOAT16}
_ENUM_OF_NAME = {name: enum for enum, (name, _) in _DTYPES.items()}


def _dtype_name(enum: int) -> str:
    if enum in _DTYPES:
        return _DTYPES[enum][0]
    return _UNSUPPORTED_DTYPES.get(enum, f"DataType({enum})")


# --------------------------------------------------------------------------------------------
# crc32c (Castagnoli), table-driven; long buffers are checksummed in parallel lanes with NumPy

_MASK32 = 0xFFFFFFFF
_CRC_POLY = 0x82F63B78  # the Castagnoli polynomial, bit-reversed
_CRC_MASK_DELTA = 0xA282EAD8


def _crc_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ _CRC_POLY if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc_table()
_CRC_TABLE_NP = np.array(_CRC_TABLE, dtype=np.uint32)
_CRC_VECTOR_MIN = 1 << 13  # below this, the plain loop is faster


def crc32c(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """CRC-32C of ``data``; pass the crc of preceding bytes as ``crc`` to continue it.

    >>> hex(crc32c(b"123456789"))
    '0xe3069283'
    >>> crc32c(b"6789", crc32c(b"12345")) == crc32c(b"123456789")
    True
    """
    view = memoryview(data).cast("B")
    state = (crc ^ _MASK32) & _MASK32
    if len(view) < _CRC_VECTOR_MIN:
        table = _CRC_TABLE
        for byte in view:
            state = table[(state ^ byte) & 0xFF] ^ (state >> 8)
        return state ^ _MASK32
    return _crc_lanes(view, state) ^ _MASK32


def masked_crc32c(data: bytes | bytearray | memoryview) -> int:
    """The masked CRC-32C that TensorFlow stores (so a crc of crc-bearing data is not trivial)."""
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & _MASK32) + _CRC_MASK_DELTA) & _MASK32


def _unmask(masked: int) -> int:
    rot = (masked - _CRC_MASK_DELTA) & _MASK32
    return ((rot >> 17) | (rot << 15)) & _MASK32


# A GF(2)-linear map of the 32-bit register, as 4 tables of 256 entries: one per input byte.
_Operator = npt.NDArray[np.uint32]


def _apply(op: _Operator, v: npt.NDArray[np.uint32]) -> npt.NDArray[np.uint32]:
    out: npt.NDArray[np.uint32] = (
        op[0][v & 0xFF] ^ op[1][(v >> 8) & 0xFF] ^ op[2][(v >> 16) & 0xFF] ^ op[3][v >> 24]
    )
    return out


def _compose(a: _Operator, b: _Operator) -> _Operator:
    """The operator ``a(b(x))``."""
    return np.stack([_apply(a, b[i]) for i in range(4)])


@functools.cache
def _zeros_operator(log2_n: int) -> _Operator:
    """The effect of ``2**log2_n`` zero bytes on the crc register."""
    if log2_n:
        half = _zeros_operator(log2_n - 1)
        return _compose(half, half)
    x = np.arange(256, dtype=np.uint32)
    tables = []
    for i in range(4):  # one zero byte: reg -> T[reg & 0xFF] ^ (reg >> 8), per input byte
        s = x << (8 * i)
        tables.append(_CRC_TABLE_NP[s & 0xFF] ^ (s >> 8))
    return np.stack(tables)


@functools.cache
def _word_tables() -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32]]:
    """Tables that run the register over one 4-byte word: ``reg = lo[r & 0xFFFF] ^ hi[r >> 16]``
    after ``r = reg ^ word`` (Z^4 split by the two 16-bit halves of its input)."""
    op = _zeros_operator(2)
    low = np.arange(1 << 16, dtype=np.uint32)
    lo = op[0][low & 0xFF] ^ op[1][low >> 8]
    hi = op[2][low & 0xFF] ^ op[3][low >> 8]
    return lo, hi


def _crc_lanes(view: memoryview, state: int) -> int:
    """The crc register after ``view``, starting from ``state``, computed in parallel lanes.

    The buffer, zero-padded in front (zeros leave a zero register unchanged; ``state`` is xored
    into the first 4 real bytes instead), is cut into ``k`` lanes of ``width`` bytes; every lane
    runs the table loop at once, one 4-byte word column per step; the lane registers are then
    merged pairwise: ``reg(a + b) = Z^len(b)(reg(a)) ^ reg(b)``, ``Z`` one zero byte.
    """
    n = len(view)
    log2_width = max(8, (n.bit_length() - 2) // 2)
    width = 1 << log2_width
    k = -(-n // width)
    padded = np.zeros(k * width, dtype=np.uint8)
    start = k * width - n
    padded[start:] = np.frombuffer(view, dtype=np.uint8)
    padded[start : start + 4] ^= np.frombuffer(state.to_bytes(4, "little"), dtype=np.uint8)
    columns = np.ascontiguousarray(padded.view("<u4").reshape(k, width // 4).T)
    lo, hi = _word_tables()
    reg = np.zeros(k, dtype=np.uint32)
    for column in columns:
        reg ^= column
        reg = lo[reg & 0xFFFF] ^ hi[reg >> 16]
    level = log2_width
    while len(reg) > 1:
        if len(reg) % 2:
            reg = np.concatenate([np.zeros(1, dtype=np.uint32), reg])  # a zero lane in front
        reg = _apply(_zeros_operator(level), reg[0::2]) ^ reg[1::2]
        level += 1
    return int(reg[0])


# --------------------------------------------------------------------------------------------
# protobuf wire format (only what the bundle protos need)

_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5
_Field = tuple[int, int | bytes]  # (wire type, value)


def _read_varint(buf: bytes, pos: int, end: int, bits: int, what: str) -> tuple[int, int]:
    """Decode a varint of at most ``bits`` bits at ``buf[pos:end]``; return it and the new pos."""
    result = shift = 0
    max_shift = 7 * -(-bits // 7)  # a 64-bit varint has at most 10 bytes, a 32-bit one 5
    while True:
        if pos >= end:
            raise _Malformed(f"{what}: truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
        if shift >= max_shift:
            raise _Malformed(f"{what}: varint longer than a {bits}-bit integer allows")
    if result >> bits:
        raise _Malformed(f"{what}: varint {result} does not fit in {bits} bits")
    return result, pos


# One field as _fields returns it: (number, wire type, value, end). For varint and fixed-width
# fields ``value`` is the integer and ``end`` is 0; for a length-delimited field the payload is
# ``buf[value:end]`` (offsets, not a copy: an index holds hundreds of thousands of these).
_Span = tuple[int, int, int, int]


def _fields(buf: bytes, pos: int, end: int, what: str) -> list[_Span]:
    """Every field of the message at ``buf[pos:end]``, in order, each checked to lie inside it.

    The one-byte varints that make up nearly all of a checkpoint's protos are decoded inline;
    this loop is what parsing an index costs, once per entry.
    """
    out: list[_Span] = []
    while pos < end:
        tag = buf[pos]
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = _read_varint(buf, pos, end, 32, what)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise _Malformed(f"{what}: protobuf field number 0")
        if wire == _VARINT or wire == _BYTES:
            if pos < end and buf[pos] < 0x80:
                value = buf[pos]
                pos += 1
            else:
                value, pos = _read_varint(buf, pos, end, 64, what)
            if wire == _VARINT:
                out.append((number, wire, value, 0))
                continue
            if value > end - pos:
                raise _Malformed(
                    f"{what}: field {number} declares {value} bytes, only {end - pos} remain"
                )
            out.append((number, wire, pos, pos + value))
            pos += value
        elif wire == _FIXED64 or wire == _FIXED32:
            width = 8 if wire == _FIXED64 else 4
            if end - pos < width:
                raise _Malformed(f"{what}: truncated fixed-width field {number}")
            out.append((number, wire, int.from_bytes(buf[pos : pos + width], "little"), 0))
            pos += width
        else:
            raise _Malformed(f"{what}: unsupported protobuf wire type {wire} (field {number})")
    return out


def _parse_message(buf: bytes, what: str) -> dict[int, list[_Field]]:
    """Field number -> every (wire type, value) occurrence, in order (payloads as bytes)."""
    fields: dict[int, list[_Field]] = {}
    for number, wire, value, end in _fields(buf, 0, len(buf), what):
        fields.setdefault(number, []).append((wire, buf[value:end] if wire == _BYTES else value))
    return fields


def _signed(value: int, bits: int, what: str) -> int:
    """A varint's value as the signed ``bits``-bit integer (int32/int64/enum) it encodes."""
    if value >= 1 << 63:
        value -= 1 << 64
    if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
        raise _Malformed(f"{what} = {value} is out of range for int{bits}")
    return value


def _int_field(fields: dict[int, list[_Field]], number: int, bits: int, what: str) -> int:
    """A signed varint field (int32/int64/enum); proto3 default 0; the last occurrence wins."""
    if number not in fields:
        return 0
    wire, value = fields[number][-1]
    if wire != _VARINT or not isinstance(value, int):
        raise _Malformed(f"{what}: field {number} has wire type {wire}, expected a varint")
    return _signed(value, bits, f"{what}: field {number}")


def _repeated_ints(occurrences: list[_Field], what: str) -> list[int]:
    """A repeated int32 field, packed (proto3's default) or not."""
    values: list[int] = []
    for wire, value in occurrences:
        if wire == _VARINT and isinstance(value, int):
            values.append(value)
        elif wire == _BYTES and isinstance(value, bytes):
            pos = 0
            while pos < len(value):
                item, pos = _read_varint(value, pos, len(value), 64, what)
                values.append(item)
        else:
            raise _Malformed(f"{what}: wire type {wire}, expected varints")
    return [v - (1 << 64) if v >= 1 << 63 else v for v in values]


def _message_fields(fields: dict[int, list[_Field]], number: int, what: str) -> list[bytes]:
    payloads = []
    for wire, value in fields.get(number, []):
        if wire != _BYTES or not isinstance(value, bytes):
            raise _Malformed(f"{what}: field {number} has wire type {wire}, expected a message")
        payloads.append(value)
    return payloads


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _pb_varint(number: int, value: int) -> bytes:
    """A varint field, omitted when 0 (proto3 default), as protobuf serializes it."""
    return _varint(number << 3 | _VARINT) + _varint(value) if value else b""


def _pb_bytes(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | _BYTES) + _varint(len(payload)) + payload


def _pb_fixed32(number: int, value: int) -> bytes:
    return _varint(number << 3 | _FIXED32) + value.to_bytes(4, "little") if value else b""


# --------------------------------------------------------------------------------------------
# the bundle protos

_MAX_DIMS = 254  # TensorFlow's TensorShape limit
_BUNDLE_VERSION = 1  # kTensorBundleVersion: the format version this reader consumes


@dataclass(frozen=True)
class BundleEntry:
    """One tensor's record in a bundle's index.

    ``dtype`` is a NumPy-style name (``"float32"``, ``"bfloat16"``, ...; ``"string"`` and the
    like for types this module cannot read), ``crc32c`` the masked checksum as stored, and
    ``num_slices`` is non-zero for a partitioned variable (its slices are stored elsewhere and
    cannot be read here).
    """

    dtype: str
    shape: tuple[int, ...]
    shard_id: int
    offset: int
    size: int
    crc32c: int
    num_slices: int = 0

    @property
    def readable(self) -> bool:
        """Whether :func:`read_bundle` can read this tensor."""
        return self.dtype in SUPPORTED_DTYPES and self.num_slices == 0


@dataclass(frozen=True)
class _Header:
    num_shards: int
    big_endian: bool


def _decode_header(value: bytes) -> _Header:
    what = "header entry (BundleHeaderProto)"
    fields = _parse_message(value, what)
    num_shards = _int_field(fields, 1, 32, what)
    endianness = _int_field(fields, 2, 32, what)
    if num_shards < 1:
        raise _Malformed(f"{what}: num_shards is {num_shards}, expected at least 1")
    if endianness not in (0, 1):
        raise _Malformed(f"{what}: endianness is {endianness}, expected 0 (little) or 1 (big)")
    for payload in _message_fields(fields, 3, what):
        version = _parse_message(payload, f"{what} version")
        min_consumer = _int_field(version, 2, 32, f"{what} version")
        bad = _repeated_ints(version.get(3, []), f"{what} version bad_consumers")
        if min_consumer > _BUNDLE_VERSION or _BUNDLE_VERSION in bad:
            raise _Malformed(
                f"{what}: written by a newer bundle format (min_consumer {min_consumer}, "
                f"bad_consumers {bad}); this reader implements version {_BUNDLE_VERSION}"
            )
    return _Header(num_shards=num_shards, big_endian=endianness == 1)


def _decode_shape(payload: bytes, what: str) -> tuple[int, ...]:
    """The dimensions of one TensorShapeProto payload, each checked."""
    shape = _parse_message(payload, f"{what} shape")
    if _int_field(shape, 3, 32, f"{what} shape"):
        raise _Malformed(f"{what}: shape has unknown rank")
    payloads = _message_fields(shape, 2, f"{what} shape")
    _check_rank(len(payloads), what)
    dims: list[int] = []
    for dim_payload in payloads:
        size = _int_field(_parse_message(dim_payload, f"{what} dim"), 1, 64, f"{what} dim")
        if size < 0:
            raise _Malformed(f"{what}: shape has a dimension of size {size}")
        dims.append(size)
    return tuple(dims)


def _check_rank(rank: int, what: str) -> None:
    if rank > _MAX_DIMS:
        raise _Malformed(f"{what}: shape has {rank} dimensions, at most {_MAX_DIMS} allowed")


# Shapes (a dimension of 0 counted as 1) must hold fewer elements than this, so that the size in
# bytes of a tensor of any dtype (16 bytes at most an element), and every stride, fits in int64:
# TensorFlow allows (0, 2**62, 2**62) (no elements), which NumPy and torch cannot represent.
_MAX_ELEMENTS = 1 << 59
_SHAPE_CACHE_SIZE = 4096  # distinct shape payloads remembered while an index is read
_ITEMSIZE = {enum: np.dtype(code).itemsize for enum, (_, code) in _DTYPES.items()}
# BundleEntryProto's scalar fields -> their wire type: dtype, shard_id, offset, size, crc32c
_ENTRY_WIRES = {1: _VARINT, 3: _VARINT, 4: _VARINT, 5: _VARINT, 6: _FIXED32}

# (dtype enum, shape, shard_id, offset, size, masked crc32c, num_slices) of a BundleEntryProto
_EntryFields = tuple[int, tuple[int, ...], int, int, int, int, int]


def _decode_entry(
    buf: bytes, pos: int, end: int, what: str, shapes: dict[bytes, tuple[int, ...]]
) -> _EntryFields:
    """The BundleEntryProto at ``buf[pos:end]``, every field checked, its shape above all.

    An index has one entry per tensor, and this is most of what reading one costs: one pass of
    :func:`_fields` (one-byte tags and varints decoded inline), and ``shapes`` caching decoded
    shape payloads (checkpoints repeat a few shapes many times). A scalar field's last occurrence
    wins, as in protobuf; a message field's occurrences merge.
    """
    values = [0] * 7  # by field number: the scalar fields' values
    wrong: dict[int, int] = {}  # scalar field -> wire type of its last occurrence, where wrong
    shape: tuple[int, ...] = ()
    num_slices = 0
    for number, wire, value, stop in _fields(buf, pos, end, what):
        if wire == _BYTES:
            if number == 2:  # the shape
                payload = buf[value:stop]
                dims = shapes.get(payload)
                if dims is None:
                    dims = _decode_shape(payload, what)
                    if len(shapes) < _SHAPE_CACHE_SIZE:
                        shapes[payload] = dims
                if shape:  # a repeated singular message merges: its dims concatenate
                    dims = shape + dims
                    _check_rank(len(dims), what)
                shape = dims
                continue
            if number == 7:  # one slice of a partitioned variable
                num_slices += 1
                continue
        elif number == 2 or number == 7:
            raise _Malformed(f"{what}: field {number} has wire type {wire}, expected a message")
        expected = _ENTRY_WIRES.get(number)
        if expected is None:
            continue  # a field this reader does not use
        if wire == expected:
            values[number] = value
            if wrong:
                wrong.pop(number, None)
        else:
            wrong[number] = wire
    if wrong:
        number = min(wrong)
        if number == 6:
            raise _Malformed(f"{what}: crc32c field has wire type {wrong[6]}, expected fixed32")
        raise _Malformed(f"{what}: field {number} has wire type {wrong[number]}, expected a varint")
    _, enum, _, shard_id, offset, size, crc = values
    if enum >= 1 << 31:
        enum = _signed(enum, 32, f"{what}: field 1")
    if shard_id >= 1 << 31:
        shard_id = _signed(shard_id, 32, f"{what}: field 3")
    if offset >= 1 << 63:
        offset -= 1 << 64
    if size >= 1 << 63:
        size -= 1 << 64
    for label, number in (("shard_id", shard_id), ("offset", offset), ("size", size)):
        if number < 0:
            raise _Malformed(f"{what}: {label} is negative ({number})")
    count = math.prod(shape)
    if enum in _ITEMSIZE and not num_slices and count * _ITEMSIZE[enum] != size:
        raise _Malformed(
            f"{what}: size is {size} bytes, but a {_dtype_name(enum)} tensor of shape "
            f"{_show_shape(shape)} takes {count * _ITEMSIZE[enum]}"
        )
    if count >= _MAX_ELEMENTS or (not count and _extent(shape) >= _MAX_ELEMENTS):
        raise _Malformed(
            f"{what}: shape {_show_shape(shape)} has too many elements (counting a dimension of "
            f"0 as 1, at most 2**59 - 1 are allowed)"
        )
    return enum, shape, shard_id, offset, size, crc, num_slices


def _extent(shape: tuple[int, ...]) -> int:
    """Elements of ``shape`` with each 0 counted as 1: what strides and allocations see."""
    extent = 1
    for dim in shape:
        extent *= dim or 1
    return extent


def _show_shape(shape: tuple[int, ...]) -> str:
    """``shape`` for a message: a hostile one may have 254 dimensions of 19 digits."""
    if len(shape) <= 8:
        return str(list(shape))
    return f"[{', '.join(map(str, shape[:8]))}, ... ({len(shape)} dimensions)]"


def _encode_entry(enum: int, shape: tuple[int, ...], offset: int, size: int, crc: int) -> bytes:
    dims = b"".join(_pb_bytes(2, _pb_varint(1, d)) for d in shape)
    return (
        _pb_varint(1, enum)
        + _pb_bytes(2, dims)  # present even for a scalar, as TensorFlow writes it
        + _pb_varint(4, offset)
        + _pb_varint(5, size)
        + _pb_fixed32(6, crc)
    )


# Header of a one-shard little-endian bundle: num_shards 1, version {producer 1}.
_HEADER = _pb_varint(1, 1) + _pb_bytes(3, _pb_varint(1, _BUNDLE_VERSION))


# --------------------------------------------------------------------------------------------
# the SSTable

_MAGIC = 0xDB4775248B80FB57
_FOOTER_SIZE = 48
_HANDLES_SIZE = 40  # two BlockHandles, zero-padded
_TRAILER_SIZE = 5
_NO_COMPRESSION, _SNAPPY = 0, 1
_BLOCK_SIZE = 262144  # TensorFlow's table defaults
_RESTART_INTERVAL = 16
_KEY_BYTES_PER_BLOCK_BYTE = 256  # bounds the work a hostile, deeply prefix-shared block can cause


def _read_handle(buf: bytes, pos: int, end: int, what: str) -> tuple[int, int, int]:
    offset, pos = _read_varint(buf, pos, end, 64, what)
    size, pos = _read_varint(buf, pos, end, 64, what)
    return offset, size, pos


def _read_block(data: bytes, offset: int, size: int, limit: int, what: str) -> bytes:
    """The contents of the block at ``offset``, its trailer's checksum verified."""
    if offset + size + _TRAILER_SIZE > limit:
        raise _Malformed(
            f"{what} (offset {offset}, {size} bytes + {_TRAILER_SIZE}-byte trailer) runs past "
            f"the end of the table data ({limit} bytes before the footer)"
        )
    end = offset + size
    stored = int.from_bytes(data[end + 1 : end + _TRAILER_SIZE], "little")
    actual = crc32c(memoryview(data)[offset : end + 1])  # the crc covers the compression byte too
    if _unmask(stored) != actual:
        raise _Malformed(
            f"{what} (offset {offset}): crc32c mismatch (stored {_unmask(stored):#010x}, "
            f"computed {actual:#010x}); the file is corrupt"
        )
    kind = data[end]
    if kind == _SNAPPY:
        raise _Malformed(
            f"{what} is snappy-compressed; TensorFlow writes checkpoint indexes uncompressed "
            "and this reader does not decompress snappy"
        )
    if kind != _NO_COMPRESSION:
        raise _Malformed(f"{what}: unknown compression type {kind}")
    return data[offset:end]


def _block_entries(block: bytes, what: str) -> Iterator[tuple[bytes, int, int]]:
    """Every entry of a block as (key, start, end), its value being ``block[start:end]``; all
    checked: in bounds, keys strictly increasing, restart points at whole keys (the last checks
    end the iteration, so consume it all).

    Runs once per entry of the index: the one-byte varints that nearly every entry has are decoded
    inline, and values stay in the block (offsets, no copies); memory does not grow with the
    block's entries.
    """
    size = len(block)
    if size < 4:
        raise _Malformed(f"{what}: {size} bytes is too short for a block")
    num_restarts = int.from_bytes(block[size - 4 :], "little")
    if num_restarts > (size - 4) // 4:
        raise _Malformed(f"{what}: {num_restarts} restart points do not fit in {size} bytes")
    end = size - 4 - 4 * num_restarts
    restarts = struct.unpack_from(f"<{num_restarts}I", block, end)
    for i in range(1, num_restarts):
        if restarts[i] <= restarts[i - 1]:
            raise _Malformed(f"{what}: restart point {restarts[i]} is not the start of a whole key")
    next_restart = 0  # index into restarts: every restart point must be met at a whole key
    budget = _KEY_BYTES_PER_BLOCK_BYTE * size + 65536
    read = _read_varint
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
            raise _Malformed(
                f"{what}: entry at {start} shares {shared} bytes of a {len(key)}-byte key"
            )
        if non_shared + value_len > end - pos:
            raise _Malformed(f"{what}: entry at {start} runs past the end of the block")
        budget -= shared + non_shared
        if budget < 0:
            raise _Malformed(f"{what}: keys are implausibly long for the block's size")
        if next_restart < num_restarts and restarts[next_restart] <= start:
            restart = restarts[next_restart]
            if restart < start or shared:
                raise _Malformed(f"{what}: restart point {restart} is not the start of a whole key")
            next_restart += 1
        elif not start:
            raise _Malformed(f"{what}: the first entry is not a restart point")
        if shared:
            new_key = key[:shared] + block[pos : pos + non_shared]
        else:
            new_key = block[pos : pos + non_shared]
        if new_key <= key and start:
            raise _Malformed(f"{what}: keys are not in strictly increasing order at entry {start}")
        key = new_key
        pos += non_shared
        yield key, pos, pos + value_len
        pos += value_len
    for restart in restarts[next_restart:]:
        if end or restart:  # an empty block has the one restart point 0
            raise _Malformed(f"{what}: restart point {restart} is not the start of a whole key")


def _parse_block(block: bytes, what: str) -> list[tuple[bytes, int, int]]:
    """All of :func:`_block_entries`."""
    return list(_block_entries(block, what))


def _table_entries(data: bytes) -> Iterator[tuple[bytes, bytes, int, int, int]]:
    """Every entry of an SSTable, in key order, as (key, its block's contents, start and end of
    the value in the block, offset of the block in ``data``); all checksums verified, one block
    in memory at a time."""
    n = len(data)
    if n < _FOOTER_SIZE:
        raise _Malformed(f"{n} bytes is too short for a table (its footer alone is 48 bytes)")
    footer = data[n - _FOOTER_SIZE :]
    magic = int.from_bytes(footer[_HANDLES_SIZE:], "little")
    if magic != _MAGIC:
        raise _Malformed(
            f"bad magic number {magic:#018x} (expected {_MAGIC:#018x}): not a TensorFlow "
            "checkpoint index, or truncated"
        )
    limit = n - _FOOTER_SIZE
    meta_offset, meta_size, pos = _read_handle(footer, 0, _HANDLES_SIZE, "footer")
    index_offset, index_size, _ = _read_handle(footer, pos, _HANDLES_SIZE, "footer")
    _read_block(data, meta_offset, meta_size, limit, "metaindex block")  # checksum only
    index = _read_block(data, index_offset, index_size, limit, "index block")
    lower: bytes | None = None  # every key of a block is > the previous block's separator
    next_free = 0
    for separator, start, end in _parse_block(index, "index block"):
        offset, size, used = _read_handle(index, start, end, "index block entry")
        if used != end:
            raise _Malformed("index block entry: trailing bytes after the block handle")
        if offset < next_free:
            raise _Malformed(f"index block: data block at offset {offset} overlaps the one before")
        what = f"data block at offset {offset}"
        block = _read_block(data, offset, size, limit, what)
        for key, value_start, value_end in _block_entries(block, what):
            if (lower is not None and key <= lower) or key > separator:
                raise _Malformed(f"{what}: key {_show_key(key)} lies outside its index range")
            yield key, block, value_start, value_end, offset
        lower = separator
        next_free = offset + size + _TRAILER_SIZE


def _read_table(data: bytes) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of an SSTable, in order, all checksums verified."""
    return [(key, block[start:end]) for key, block, start, end, _ in _table_entries(data)]


def _show_key(key: bytes | str) -> str:
    """``repr(key)``, cut short: a key may be megabytes long, an error message should not be."""
    if len(key) <= 200:
        return repr(key)
    return f"{key[:200]!r}... ({len(key)} long)"


def _block_builder_finish(buffer: bytearray, restarts: list[int]) -> bytes:
    return bytes(buffer) + struct.pack(f"<{len(restarts) + 1}I", *restarts, len(restarts))


class _BlockBuilder:
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
        self.buffer += _varint(shared) + _varint(len(key) - shared) + _varint(len(value))
        self.buffer += key[shared:] + value
        self.last_key = key
        self.counter += 1

    def size_estimate(self) -> int:
        return len(self.buffer) + 4 * len(self.restarts) + 4

    def finish(self) -> bytes:
        return _block_builder_finish(self.buffer, self.restarts)


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


def _build_table(
    entries: Iterable[tuple[bytes, bytes]], block_size: int, restart_interval: int
) -> bytes:
    """An SSTable of sorted ``entries``, laid out exactly as TensorFlow's TableBuilder does."""
    out = bytearray()

    def write_block(contents: bytes) -> bytes:
        handle = _varint(len(out)) + _varint(len(contents))
        out.extend(contents)
        out.append(_NO_COMPRESSION)
        out.extend(masked_crc32c(contents + bytes([_NO_COMPRESSION])).to_bytes(4, "little"))
        return handle

    data_block = _BlockBuilder(restart_interval)
    index_block = _BlockBuilder(1)
    pending: bytes | None = None  # handle of the last data block, awaiting its index key
    last_key = b""
    first = True

    def flush() -> None:
        nonlocal data_block, pending
        if data_block.buffer:
            pending = write_block(data_block.finish())
            data_block = _BlockBuilder(restart_interval)

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
    meta_handle = write_block(_BlockBuilder(restart_interval).finish())
    if pending is not None:
        index_block.add(_short_successor(last_key), pending)
    index_handle = write_block(index_block.finish())
    handles = meta_handle + index_handle
    out.extend(handles + bytes(_HANDLES_SIZE - len(handles)) + _MAGIC.to_bytes(8, "little"))
    return bytes(out)


# --------------------------------------------------------------------------------------------
# paths

_SUFFIX = re.compile(r"\.(index|data-\d{5,}-of-\d{5,})$")


def bundle_prefix(path: str | os.PathLike[str]) -> str:
    """The checkpoint prefix of ``path``: ``path`` itself, or, for an existing ``PREFIX.index``
    or ``PREFIX.data-00000-of-00001`` file, ``PREFIX``.

    >>> bundle_prefix("/nonexistent/model.ckpt")
    '/nonexistent/model.ckpt'
    """
    p = os.fspath(path)
    match = _SUFFIX.search(p)
    if match and os.path.isfile(p) and not os.path.isfile(p + ".index"):
        return p[: match.start()]
    return p


def _data_path(prefix: str, shard: int, num_shards: int) -> str:
    return f"{prefix}.data-{shard:05d}-of-{num_shards:05d}"


# An overwrite stages the new pair and keeps the old one under these prefixes until it is done
# (docs/checkpoint_format.md, "Crash safety"); both are bundles of their own.
_STAGED, _BACKUP = "cudnn-rnn-new", "cudnn-rnn-old"


def _side_prefix(prefix: str, kind: str) -> str:
    directory, base = os.path.split(prefix)
    return os.path.join(directory, f".{base}.{kind}")


def _data_files(prefix: str) -> list[str]:
    """The data shards of ``prefix`` that exist, whatever their number."""
    directory, base = os.path.split(prefix)
    pattern = re.compile(re.escape(base) + r"\.data-\d{5,}-of-\d{5,}\Z")
    try:
        names = sorted(e.name for e in os.scandir(directory or "."))
    except OSError:
        return []
    return [os.path.join(directory, n) for n in names if pattern.match(n)]


def _readable_prefix(prefix: str) -> str:
    """The prefix whose files hold a whole checkpoint: ``prefix``, or its backup pair while an
    interrupted overwrite is between backing up the old pair and renaming the new index into place
    (then the staged new index still exists and the live data may already be the new one)."""
    backup, staged = _side_prefix(prefix, _BACKUP), _side_prefix(prefix, _STAGED)
    if os.path.isfile(backup + ".index") and os.path.lexists(staged + ".index"):
        return backup
    return prefix


# --------------------------------------------------------------------------------------------
# reading


@dataclass(frozen=True)
class _Index:
    prefix: str
    header: _Header
    entries: _EntryTable


class _EntryTable(Mapping[str, BundleEntry]):
    """Name -> :class:`BundleEntry` of an index's tensors, in the index's (bytewise key) order.

    Every entry was decoded and checked when the index was read. What is kept is the index's bytes,
    the keys back to back and where each value lies (some 30 bytes a tensor, where a dict of
    :class:`BundleEntry` takes hundreds: an index may list 300,000 tensors); an entry is decoded
    again when it is asked for, and a name is found by bisection (the keys are sorted).
    """

    def __init__(
        self, data: bytes, keys: bytearray, key_ends: array[int], values: array[int]
    ) -> None:
        self._data = data
        self._keys = keys  # the keys back to back; key i ends at key_ends[i]
        self._key_ends = key_ends
        self._values = values  # value i is data[values[2 * i] : values[2 * i + 1]]
        self._shapes: dict[bytes, tuple[int, ...]] = {}

    def __len__(self) -> int:
        return len(self._key_ends)

    def __iter__(self) -> Iterator[str]:
        start = 0
        for end in self._key_ends:
            yield self._keys[start:end].decode("utf-8")
            start = end

    def __contains__(self, name: object) -> bool:
        return self._find(name) >= 0

    def __getitem__(self, name: str) -> BundleEntry:
        i = self._find(name)
        if i < 0:
            raise KeyError(name)
        return self._entry(i)

    def __repr__(self) -> str:
        return f"<TF1 bundle index of {len(self)} tensors>"

    def items(self) -> ItemsView[str, BundleEntry]:
        return _EntryItems(self)

    def values(self) -> ValuesView[BundleEntry]:
        return _EntryValues(self)

    def _key(self, i: int) -> bytes:
        return bytes(self._keys[self._key_ends[i - 1] if i else 0 : self._key_ends[i]])

    def _find(self, name: object) -> int:
        """The position of ``name``, or -1."""
        if not isinstance(name, str):
            return -1
        try:
            key = name.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: no key of a valid index
            return -1
        i = bisect.bisect_left(range(len(self)), key, key=self._key)
        return i if i < len(self) and self._key(i) == key else -1

    def _entry(self, i: int) -> BundleEntry:
        start, end = self._values[2 * i], self._values[2 * i + 1]
        enum, shape, shard_id, offset, size, crc, num_slices = _decode_entry(
            self._data, start, end, "entry", self._shapes
        )
        return BundleEntry(_dtype_name(enum), shape, shard_id, offset, size, crc, num_slices)

    def _pairs(self) -> Iterator[tuple[str, BundleEntry]]:
        for i, name in enumerate(self):
            yield name, self._entry(i)


class _EntryItems(ItemsView[str, BundleEntry]):
    """The items of an :class:`_EntryTable` in one pass (no bisection per name)."""

    def __init__(self, table: _EntryTable) -> None:
        super().__init__(table)
        self._table = table

    def __iter__(self) -> Iterator[tuple[str, BundleEntry]]:
        return self._table._pairs()


class _EntryValues(ValuesView[BundleEntry]):
    def __init__(self, table: _EntryTable) -> None:
        super().__init__(table)
        self._table = table

    def __iter__(self) -> Iterator[BundleEntry]:
        return (entry for _, entry in self._table._pairs())


def _load_index(path: str | os.PathLike[str]) -> _Index:
    prefix = _readable_prefix(bundle_prefix(path))
    index_path = prefix + ".index"
    try:
        data = _read_file(index_path, "index")
    except FileNotFoundError:
        raise FileNotFoundError(
            f"TF1 checkpoint: no index file {index_path} (give the checkpoint prefix, the path "
            "without '.index')"
        ) from None
    try:
        header, entries = _parse_index(data)
    except _Malformed as err:
        raise TF1BundleError(f"TF1 checkpoint index {index_path}: {err}.") from None
    return _Index(prefix, header, entries)


def _parse_index(data: bytes) -> tuple[_Header, _EntryTable]:
    """The header and the tensors of an index file's bytes, every entry decoded and checked.

    Cost: one pass over the file, a few microseconds an entry; memory: the file and some 30 bytes
    an entry.
    """
    header: _Header | None = None
    keys = bytearray()
    key_ends: array[int] = array("q")
    values: array[int] = array("q")
    add_key_end, add_value = key_ends.append, values.append
    shapes: dict[bytes, tuple[int, ...]] = {}
    for key, block, start, end, block_offset in _table_entries(data):
        if header is None:
            if key:
                break
            header = _decode_header(block[start:end])
            continue
        if not key[0]:
            continue  # one slice of a partitioned variable, listed by its full entry
        try:
            shard_id = _decode_entry(block, start, end, "entry", shapes)[2]
            if shard_id >= header.num_shards:
                shards = header.num_shards
                raise _Malformed(f"entry: shard {shard_id} of a {shards}-shard bundle")
        except _Malformed as err:  # name the tensor: only now, a name costs at 300k entries
            name = _show_key(key.decode("utf-8", "backslashreplace"))
            raise _Malformed(f"entry {name}{str(err).removeprefix('entry')}") from None
        keys += key
        add_key_end(len(keys))
        add_value(block_offset + start)
        add_value(block_offset + end)
    if header is None:
        raise _Malformed("no header entry (the empty key)")
    _check_utf8(keys, key_ends)
    return header, _EntryTable(data, keys, key_ends, values)


def _check_utf8(keys: bytearray, key_ends: array[int]) -> None:
    """Every key of ``keys`` (back to back, the ith ending at ``key_ends[i]``) is UTF-8.

    At once: the concatenation decodes and no key starts with a continuation byte (then every key
    is whole characters); key by key only to name the culprit.
    """
    starts = np.frombuffer(key_ends, dtype=np.int64)[:-1]
    try:
        keys.decode("utf-8")
        whole = not np.any(np.frombuffer(keys, dtype=np.uint8)[starts] & 0xC0 == 0x80)
    except UnicodeDecodeError:
        whole = False
    if whole:
        return
    start = 0
    for end in key_ends:
        key = bytes(keys[start:end])
        try:
            key.decode("utf-8")
        except UnicodeDecodeError:
            raise _Malformed(f"tensor name {_show_key(key)} is not UTF-8") from None
        start = end


def read_bundle_index(prefix: str | os.PathLike[str]) -> Mapping[str, BundleEntry]:
    """Name -> :class:`BundleEntry` of every tensor in the checkpoint, in the index's order.

    Only ``PREFIX.index`` is read (the data shards need not exist); its checksums and every entry
    are checked. The result is a read-only mapping that builds each :class:`BundleEntry` when it is
    asked for (an index may list hundreds of thousands of tensors). Raises :class:`TF1BundleError`
    for a corrupt index, or one that is not a regular file; ``FileNotFoundError`` for a missing one.
    """
    return _load_index(prefix).entries


def read_bundle(
    prefix: str | os.PathLike[str],
    names: Iterable[str] | None = None,
    *,
    bfloat16: Literal["float32", "bits"] = "float32",
) -> dict[str, Array]:
    """Read the tensors of a checkpoint (all of them, or ``names``) as NumPy arrays.

    Arrays are writable, C-contiguous, in native byte order. Every tensor's checksum is verified.
    ``bfloat16="float32"`` widens bfloat16 tensors to float32 (exactly); ``"bits"`` returns their
    raw ``uint16`` bit patterns. Raises :class:`TF1BundleError` for a corrupt, truncated or hostile
    checkpoint, a name it lacks, or a tensor this module cannot read (strings, partitioned
    variables, ...: pass ``names`` to read the others); ``FileNotFoundError`` (also a
    :class:`TF1BundleError`) for a missing data shard, and ``FileNotFoundError`` for a missing
    index. Every data shard is checked against the index (it exists, is a regular file, holds
    every byte the index claims) before any tensor is read, so a lying index cannot make this
    allocate more memory than the data files' size.
    """
    if bfloat16 not in ("float32", "bits"):
        raise ValueError(f"read_bundle: bfloat16 must be 'float32' or 'bits', got {bfloat16!r}.")
    if isinstance(names, str):
        raise TypeError(f"read_bundle: names must be a list of names, got the string {names!r}.")
    index = _load_index(prefix)
    table = index.entries
    index_path = index.prefix + ".index"
    wanted = list(table) if names is None else list(dict.fromkeys(names))
    positions = range(len(table)) if names is None else [table._find(n) for n in wanted]
    missing = [_show_key(n) for n, i in zip(wanted, positions) if i < 0]
    if missing:
        raise TF1BundleError(
            f"TF1 checkpoint {index_path}: no tensor(s) {_listing(missing)} "
            f"(it holds {len(table)})."
        )
    entries = [table._entry(i) for i in positions]
    unreadable = [
        f"{_show_key(n)} ({_why_unreadable(e)})" for n, e in zip(wanted, entries) if not e.readable
    ]
    if unreadable:
        raise TF1BundleError(
            f"TF1 checkpoint {index_path}: cannot read {_listing(unreadable)}; pass names= "
            "to read the other tensors."
        )
    by_shard: dict[int, list[int]] = {}
    for k, entry in enumerate(entries):
        by_shard.setdefault(entry.shard_id, []).append(k)
    shards: list[tuple[str, list[int]]] = []
    for shard, ks in sorted(by_shard.items()):  # check every shard before reading any
        path = _data_path(index.prefix, shard, index.header.num_shards)
        try:
            file_size = _regular_file_size(os.stat(path), path, "data shard")
        except FileNotFoundError:
            raise _MissingShardError(
                f"TF1 checkpoint: no data shard {path} (its index {index_path} says the "
                f"checkpoint has {index.header.num_shards} shard(s))."
            ) from None
        ks.sort(key=lambda k: entries[k].offset)  # read the file front to back
        _check_claims(path, file_size, [(wanted[k], entries[k]) for k in ks])
        shards.append((path, ks))
    tensors: dict[str, Array] = {}
    for path, ks in shards:
        fd, file_size = _open_regular(path, "data shard")
        with os.fdopen(fd, "rb") as f:
            _check_claims(path, file_size, [(wanted[k], entries[k]) for k in ks])  # no race
            for k in ks:
                raw = _read_tensor_bytes(f, path, file_size, wanted[k], entries[k])
                tensors[wanted[k]] = _decode_tensor(
                    raw, entries[k], index.header.big_endian, bfloat16, path, wanted[k]
                )
    return {name: tensors[name] for name in wanted}


class _MissingShardError(FileNotFoundError, TF1BundleError):
    """A data shard that the index names is missing (both a ``FileNotFoundError``, as it always
    was, and a :class:`TF1BundleError`: the checkpoint cannot be read)."""


def _listing(items: list[str], limit: int = 20) -> str:
    """The first ``limit`` of ``items``, comma-separated, and how many more there are."""
    shown = ", ".join(items[:limit])
    return shown if len(items) <= limit else f"{shown} and {len(items) - limit} more"


def _why_unreadable(entry: BundleEntry) -> str:
    if entry.num_slices:
        return f"a partitioned variable in {entry.num_slices} slices"
    return f"dtype {entry.dtype} is not supported"


def _check_claims(path: str, file_size: int, claims: list[tuple[str, BundleEntry]]) -> None:
    """Every tensor of ``claims`` (in offset order) lies inside the file, and together they take
    no more bytes than it has (TensorFlow stores each tensor once: overlaps mean corruption)."""
    past = [(n, e) for n, e in claims if e.offset > file_size or e.size > file_size - e.offset]
    if past:
        name, entry = past[0]
        others = f" (and {len(past) - 1} other tensor(s))" if len(past) > 1 else ""
        raise TF1BundleError(
            f"TF1 checkpoint data {path}: tensor {_show_key(name)} (offset {entry.offset}, "
            f"{entry.size} bytes){others} runs past the end of the file ({file_size} bytes); "
            "the file is truncated or the index is corrupt."
        )
    total = sum(e.size for _, e in claims)
    if total > file_size:
        raise TF1BundleError(
            f"TF1 checkpoint data {path}: its {len(claims)} tensor(s) claim {total} bytes in all, "
            f"more than the file's {file_size}; they overlap, so the index is corrupt."
        )


def _regular_file_size(st: os.stat_result, path: str, what: str) -> int:
    """``st``'s size, if it is a regular file's; a FIFO, device, socket or directory is refused
    (opening a FIFO blocks forever, reading a device may never end)."""
    if not stat.S_ISREG(st.st_mode):
        mode = st.st_mode
        kind = (
            "a FIFO (named pipe)"
            if stat.S_ISFIFO(mode)
            else "a directory"
            if stat.S_ISDIR(mode)
            else "a socket"
            if stat.S_ISSOCK(mode)
            else "a device"
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "not a regular file"
        )
        raise TF1BundleError(f"TF1 checkpoint {what} {path} is {kind}, not a regular file.")
    return st.st_size


def _open_regular(path: str, what: str) -> tuple[int, int]:
    """A descriptor open for reading on the regular file ``path``, and the file's size.

    The file is checked before it is opened (``open`` itself blocks on a FIFO), opened
    non-blocking (in case it was swapped for one since) and checked again once open.
    """
    _regular_file_size(os.stat(path), path, what)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags)
    try:
        return fd, _regular_file_size(os.fstat(fd), path, what)
    except BaseException:
        os.close(fd)
        raise


def _read_file(path: str, what: str) -> bytes:
    """The bytes of the regular file ``path`` (see :func:`_open_regular`)."""
    fd, _ = _open_regular(path, what)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def _read_tensor_bytes(
    f: io.BufferedReader, path: str, file_size: int, name: str, entry: BundleEntry
) -> bytearray:
    if entry.offset > file_size or entry.size > file_size - entry.offset:
        _check_claims(path, file_size, [(name, entry)])
    try:
        raw = bytearray(entry.size)
    except MemoryError:
        raise TF1BundleError(
            f"TF1 checkpoint data {path}: tensor {_show_key(name)} takes {entry.size} bytes, "
            "more memory than is available."
        ) from None
    f.seek(entry.offset)
    if f.readinto(raw) != entry.size:
        raise TF1BundleError(f"TF1 checkpoint data {path}: short read of tensor {_show_key(name)}.")
    actual = crc32c(raw)
    if actual != _unmask(entry.crc32c):
        raise TF1BundleError(
            f"TF1 checkpoint data {path}: tensor {_show_key(name)}: crc32c mismatch (stored "
            f"{_unmask(entry.crc32c):#010x}, computed {actual:#010x}); the file is corrupt."
        )
    return raw


def _decode_tensor(
    raw: bytearray, entry: BundleEntry, big_endian: bool, bfloat16: str, path: str, name: str
) -> Array:
    enum = _ENUM_OF_NAME[entry.dtype]
    stored = np.dtype(_DTYPES[enum][1])
    if big_endian:
        stored = stored.newbyteorder(">")
    if stored.kind == "b":
        flat_bytes = np.frombuffer(raw, dtype=np.uint8)
        if flat_bytes.size and int(flat_bytes.max()) > 1:
            raise TF1BundleError(
                f"TF1 checkpoint data {path}: bool tensor {_show_key(name)} holds bytes other "
                "than 0 and 1."
            )
    out = np.frombuffer(raw, dtype=stored).reshape(entry.shape)
    out = out.astype(stored.newbyteorder("="), copy=False)
    if enum == _DT_BFLOAT16 and bfloat16 == "float32":
        out = (out.astype(np.uint32) << 16).view(np.float32)
    return out


# --------------------------------------------------------------------------------------------
# writing


def _stored_form(name: str, value: object, as_bfloat16: bool) -> tuple[int, Array]:
    """(DataType enum, C-contiguous little-endian array of the bytes to store) of one tensor."""
    if isinstance(value, np.generic):
        value = np.asarray(value)
    if not isinstance(value, np.ndarray):
        raise TypeError(
            f"write_bundle: tensor {name!r} must be a numpy array, got {type(value).__name__} "
            "(convert a torch tensor with .detach().cpu().numpy())."
        )
    array: Array = value
    if as_bfloat16 or array.dtype.name == "bfloat16":  # ml_dtypes.bfloat16 arrays count too
        if array.dtype.name == "bfloat16" or array.dtype == np.uint16:
            bits = array.view(np.uint16)
        elif array.dtype == np.float32:
            words = array.view(np.uint32)
            if np.any(words & 0xFFFF):
                raise ValueError(
                    f"write_bundle: tensor {name!r} has float32 values that bfloat16 cannot hold "
                    "exactly; round them to bfloat16 first (e.g. torch's .bfloat16())."
                )
            bits = (words >> 16).astype(np.uint16)
        else:
            raise TypeError(
                f"write_bundle: bfloat16 tensor {name!r} must be given as uint16 bit patterns or "
                f"float32 values, got {array.dtype}."
            )
        return _DT_BFLOAT16, np.asarray(bits, dtype="<u2", order="C")
    code = array.dtype.newbyteorder("<").str
    if code not in _ENUM_OF_CODE:
        raise TypeError(
            f"write_bundle: tensor {name!r} has dtype {array.dtype}, which TF checkpoints "
            f"written here cannot hold; supported: {', '.join(SUPPORTED_DTYPES)}."
        )
    return _ENUM_OF_CODE[code], np.asarray(array, dtype=code, order="C")


def _check_name(name: object) -> bytes:
    if not isinstance(name, str):
        raise TypeError(f"write_bundle: tensor names must be str, got {type(name).__name__}.")
    if not name or name.startswith("\x00"):
        raise ValueError(
            f"write_bundle: tensor name {name!r} is reserved (the empty key is the header, "
            "keys starting with NUL are slices)."
        )
    try:
        return name.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(f"write_bundle: tensor name {name!r} is not valid Unicode.") from err


def write_bundle(
    prefix: str | os.PathLike[str],
    tensors: Mapping[str, Array],
    *,
    bfloat16: Collection[str] = (),
) -> None:
    """Write ``tensors`` as a one-shard TF checkpoint (``PREFIX.index``, ``PREFIX.data-*``).

    The files are what TensorFlow's own writer produces for the same tensors (keys sorted, data in
    key order, checksums written); ``tf.train.load_checkpoint`` reads them. Names in ``bfloat16``
    are stored as bfloat16 (give ``uint16`` bit patterns, or float32 values bfloat16 holds
    exactly). New files get the umask's permissions, overwritten ones keep theirs.

    The write is crash-safe: until the new pair is complete, :func:`read_bundle` (and
    ``checkpoint.restore``) read the old checkpoint, whenever the process dies; the next write of
    the prefix rolls an interrupted one back and removes its files. Writers of one directory are
    serialised by a lock. The protocol is in docs/checkpoint_format.md, "Crash safety".
    """
    bf16 = set(bfloat16)
    unknown = sorted(bf16 - set(tensors))
    if unknown:
        raise ValueError(f"write_bundle: bfloat16 names {unknown} are not among the tensors.")
    items = []
    for name, value in tensors.items():
        key = _check_name(name)
        enum, stored = _stored_form(name, value, name in bf16)
        items.append((key, enum, stored))
    items.sort(key=lambda item: item[0])

    prefix_str = os.fspath(prefix)
    directory = os.path.dirname(os.path.abspath(prefix_str))
    os.makedirs(directory, exist_ok=True)
    entries: list[tuple[bytes, bytes]] = [(b"", _HEADER)]

    def write_data(f: BinaryIO) -> None:
        offset = 0
        for key, enum, stored in items:
            raw = stored.reshape(-1).view(np.uint8).data
            f.write(raw)
            crc = masked_crc32c(raw)
            entries.append((key, _encode_entry(enum, stored.shape, offset, len(raw), crc)))
            offset += len(raw)

    staged = _side_prefix(prefix_str, _STAGED)
    with atomic.directory_lock(directory):
        _settle(prefix_str)
        for path in (prefix_str + ".index", _data_path(prefix_str, 0, 1)):
            if os.path.isdir(path):
                raise IsADirectoryError(f"write_bundle: {path} is a directory; remove it first.")
        try:
            live_data = _data_path(prefix_str, 0, 1)
            atomic.write_file(_data_path(staged, 0, 1), write_data, mode_of=live_data)
            table = _build_table(entries, _BLOCK_SIZE, _RESTART_INTERVAL)
            atomic.write_file(staged + ".index", table, mode_of=prefix_str + ".index")
            _swap_in(prefix_str, staged)
        except BaseException:
            with contextlib.suppress(OSError):
                _settle(prefix_str)  # back to the old pair, and no staged or backup file left
            raise


def _swap_in(prefix: str, staged: str) -> None:
    """Move the staged pair onto ``prefix``, keeping the old pair as a backup until it is done.

    The backup index is linked last (so it implies complete backup data) and the live index is
    renamed last: from the backup index's creation to that rename, :func:`_readable_prefix` reads
    the backup; before and after, the live pair, old or new, is whole.
    """
    live_index, live_data = prefix + ".index", _data_path(prefix, 0, 1)
    backup = _side_prefix(prefix, _BACKUP)
    if os.path.isfile(live_index) and os.path.lexists(live_data):
        for path in _data_files(prefix):
            atomic.link_or_copy(path, backup + path[len(prefix) :])
        atomic.link_or_copy(live_index, backup + ".index")
    atomic.replace(_data_path(staged, 0, 1), live_data)
    atomic.replace(staged + ".index", live_index)  # the commit point
    _remove_pair(backup)


def _settle(prefix: str) -> None:
    """Finish what an interrupted :func:`write_bundle` of ``prefix`` left: make the pair that
    :func:`_readable_prefix` reads the live one, then remove the staged and backup files."""
    backup, staged = _side_prefix(prefix, _BACKUP), _side_prefix(prefix, _STAGED)
    if _readable_prefix(prefix) == backup:  # stopped before the commit: roll the data back
        for path in _data_files(backup):
            atomic.link_or_copy(path, prefix + path[len(backup) :])
    _remove_pair(staged)  # from here on readers read the live pair
    _remove_pair(backup)


def _remove_pair(prefix: str) -> None:
    """Remove a staged or backup pair, index first, and the temporary files of its names."""
    for path in (prefix + ".index", *_data_files(prefix)):
        atomic.remove(path)
    for path in (prefix + ".index", _data_path(prefix, 0, 1)):
        atomic.remove_leftovers(path)
    atomic.fsync_directory(os.path.dirname(os.path.abspath(prefix)))
