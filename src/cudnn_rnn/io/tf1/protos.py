"""The tensor bundle's protos, without protobuf: TF's ``DataType`` enum <-> NumPy,
``BundleHeaderProto``, ``BundleEntryProto`` and its ``TensorShapeProto``.

What an index maps each tensor name to, decoded field by field on
:mod:`cudnn_rnn.io.tf1.protobuf_wire` and checked as it is decoded (a hostile index may claim
any rank, size or offset: :class:`~cudnn_rnn.io.tf1.protobuf_wire.Malformed` says which), and
encoded as TensorFlow writes it. The reader (:mod:`cudnn_rnn.io.tf1.bundle`) and the writer
(:mod:`cudnn_rnn.io.tf1.writer`) share this one table of dtypes and this one codec, so what one
writes the other reads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cudnn_rnn.io.tf1.protobuf_wire import (
    BYTES,
    FIXED32,
    VARINT,
    Malformed,
    bytes_field,
    fixed32_field,
    int_field,
    message_fields,
    parse_message,
    repeated_ints,
    scan_fields,
    signed,
    varint_field,
)

__all__ = [
    "DTYPES",
    "DT_BFLOAT16",
    "ENUM_OF_CODE",
    "ENUM_OF_NAME",
    "HEADER",
    "SUPPORTED_DTYPES",
    "BundleEntry",
    "EntryFields",
    "Header",
    "decode_entry",
    "decode_header",
    "decode_shape",
    "dtype_name",
    "encode_entry",
]

# --------------------------------------------------------------------------------------------
# dtypes: TensorFlow DataType enum <-> NumPy (little-endian storage)

DT_BFLOAT16 = 14  # stored as uint16 bits; NumPy has no bfloat16
DTYPES: dict[int, tuple[str, str]] = {  # enum -> (name, little-endian NumPy code of the bytes)
    1: ("float32", "<f4"),
    2: ("float64", "<f8"),
    3: ("int32", "<i4"),
    4: ("uint8", "|u1"),
    5: ("int16", "<i2"),
    6: ("int8", "|i1"),
    8: ("complex64", "<c8"),
    9: ("int64", "<i8"),
    10: ("bool", "|b1"),
    DT_BFLOAT16: ("bfloat16", "<u2"),
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
#: Names of the dtypes the bundle's reader and writer handle.
SUPPORTED_DTYPES: tuple[str, ...] = tuple(sorted(name for name, _ in DTYPES.values()))
# NumPy storage code -> enum, for the writer (bfloat16 is chosen explicitly, never by code).
ENUM_OF_CODE = {code: enum for enum, (_, code) in DTYPES.items() if enum != DT_BFLOAT16}
ENUM_OF_NAME = {name: enum for enum, (name, _) in DTYPES.items()}


def dtype_name(enum: int) -> str:
    """The NumPy-style name of the ``DataType`` ``enum`` (TF's name for one NumPy lacks)."""
    if enum in DTYPES:
        return DTYPES[enum][0]
    return _UNSUPPORTED_DTYPES.get(enum, f"DataType({enum})")


# --------------------------------------------------------------------------------------------
# the bundle protos

_MAX_DIMS = 254  # TensorFlow's TensorShape limit
_BUNDLE_VERSION = 1  # kTensorBundleVersion: the format version this reader consumes


@dataclass(frozen=True)
class BundleEntry:
    """One tensor's record in a bundle's index.

    ``dtype`` is a NumPy-style name (``"float32"``, ``"bfloat16"``, ...; ``"string"`` and the
    like for types the reader cannot read), ``crc32c`` the masked checksum as stored, and
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
        """Whether :func:`~cudnn_rnn.io.tf1.bundle.read_bundle` can read this tensor."""
        return self.dtype in SUPPORTED_DTYPES and self.num_slices == 0


@dataclass(frozen=True)
class Header:
    """What a bundle's ``BundleHeaderProto`` says that the reader uses."""

    num_shards: int
    big_endian: bool


def decode_header(value: bytes) -> Header:
    """The index's header entry (the empty key), checked: shards, byte order, version."""
    what = "header entry (BundleHeaderProto)"
    fields = parse_message(value, what)
    num_shards = int_field(fields, 1, 32, what)
    endianness = int_field(fields, 2, 32, what)
    if num_shards < 1:
        raise Malformed(f"{what}: num_shards is {num_shards}, expected at least 1")
    if endianness not in (0, 1):
        raise Malformed(f"{what}: endianness is {endianness}, expected 0 (little) or 1 (big)")
    for payload in message_fields(fields, 3, what):
        version = parse_message(payload, f"{what} version")
        min_consumer = int_field(version, 2, 32, f"{what} version")
        bad = repeated_ints(version.get(3, []), f"{what} version bad_consumers")
        if min_consumer > _BUNDLE_VERSION or _BUNDLE_VERSION in bad:
            raise Malformed(
                f"{what}: written by a newer bundle format (min_consumer {min_consumer}, "
                f"bad_consumers {bad}); this reader implements version {_BUNDLE_VERSION}"
            )
    return Header(num_shards=num_shards, big_endian=endianness == 1)


def decode_shape(payload: bytes, what: str) -> tuple[int, ...]:
    """The dimensions of one TensorShapeProto payload, each checked."""
    shape = parse_message(payload, f"{what} shape")
    if int_field(shape, 3, 32, f"{what} shape"):
        raise Malformed(f"{what}: shape has unknown rank")
    payloads = message_fields(shape, 2, f"{what} shape")
    _check_rank(len(payloads), what)
    dims: list[int] = []
    for dim_payload in payloads:
        size = int_field(parse_message(dim_payload, f"{what} dim"), 1, 64, f"{what} dim")
        if size < 0:
            raise Malformed(f"{what}: shape has a dimension of size {size}")
        dims.append(size)
    return tuple(dims)


def _check_rank(rank: int, what: str) -> None:
    if rank > _MAX_DIMS:
        raise Malformed(f"{what}: shape has {rank} dimensions, at most {_MAX_DIMS} allowed")


# Shapes (a dimension of 0 counted as 1) must hold fewer elements than this, so that the size in
# bytes of a tensor of any dtype (16 bytes at most an element), and every stride, fits in int64:
# TensorFlow allows (0, 2**62, 2**62) (no elements), which NumPy and torch cannot represent.
_MAX_ELEMENTS = 1 << 59
_SHAPE_CACHE_SIZE = 4096  # distinct shape payloads remembered while an index is read
_ITEMSIZE = {enum: np.dtype(code).itemsize for enum, (_, code) in DTYPES.items()}
# BundleEntryProto's scalar fields -> their wire type: dtype, shard_id, offset, size, crc32c
_ENTRY_WIRES = {1: VARINT, 3: VARINT, 4: VARINT, 5: VARINT, 6: FIXED32}

# (dtype enum, shape, shard_id, offset, size, masked crc32c, num_slices) of a BundleEntryProto
EntryFields = tuple[int, tuple[int, ...], int, int, int, int, int]


def decode_entry(
    buf: bytes, pos: int, end: int, what: str, shapes: dict[bytes, tuple[int, ...]]
) -> EntryFields:
    """The BundleEntryProto at ``buf[pos:end]``, every field checked, its shape above all.

    An index has one entry per tensor, and this is most of what reading one costs: one pass of
    :func:`scan_fields` (one-byte tags and varints decoded inline), and ``shapes`` caching decoded
    shape payloads (checkpoints repeat a few shapes many times). A scalar field's last occurrence
    wins, as in protobuf; a message field's occurrences merge.
    """
    values = [0] * 7  # by field number: the scalar fields' values
    wrong: dict[int, int] = {}  # scalar field -> wire type of its last occurrence, where wrong
    shape: tuple[int, ...] = ()
    num_slices = 0
    for number, wire, value, stop in scan_fields(buf, pos, end, what):
        if wire == BYTES:
            if number == 2:  # the shape
                payload = buf[value:stop]
                dims = shapes.get(payload)
                if dims is None:
                    dims = decode_shape(payload, what)
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
            raise Malformed(f"{what}: field {number} has wire type {wire}, expected a message")
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
            raise Malformed(f"{what}: crc32c field has wire type {wrong[6]}, expected fixed32")
        raise Malformed(f"{what}: field {number} has wire type {wrong[number]}, expected a varint")
    _, enum, _, shard_id, offset, size, crc = values
    if enum >= 1 << 31:
        enum = signed(enum, 32, f"{what}: field 1")
    if shard_id >= 1 << 31:
        shard_id = signed(shard_id, 32, f"{what}: field 3")
    if offset >= 1 << 63:
        offset -= 1 << 64
    if size >= 1 << 63:
        size -= 1 << 64
    for label, number in (("shard_id", shard_id), ("offset", offset), ("size", size)):
        if number < 0:
            raise Malformed(f"{what}: {label} is negative ({number})")
    count = math.prod(shape)
    if enum in _ITEMSIZE and not num_slices and count * _ITEMSIZE[enum] != size:
        raise Malformed(
            f"{what}: size is {size} bytes, but a {dtype_name(enum)} tensor of shape "
            f"{_show_shape(shape)} takes {count * _ITEMSIZE[enum]}"
        )
    if count >= _MAX_ELEMENTS or (not count and _extent(shape) >= _MAX_ELEMENTS):
        raise Malformed(
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


def encode_entry(enum: int, shape: tuple[int, ...], offset: int, size: int, crc: int) -> bytes:
    """The ``BundleEntryProto`` of a tensor in shard 0, as TensorFlow writes it."""
    dims = b"".join(bytes_field(2, varint_field(1, d)) for d in shape)
    return (
        varint_field(1, enum)
        + bytes_field(2, dims)  # present even for a scalar, as TensorFlow writes it
        + varint_field(4, offset)
        + varint_field(5, size)
        + fixed32_field(6, crc)
    )


#: The header of a one-shard little-endian bundle: num_shards 1, version {producer 1}.
HEADER = varint_field(1, 1) + bytes_field(3, varint_field(1, _BUNDLE_VERSION))
