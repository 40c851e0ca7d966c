"""TensorFlow tensor-bundle checkpoints (what TF1's ``tf.train.Saver`` writes), without TensorFlow.

A checkpoint with prefix ``P`` is an index, ``P.index``, and data shards
``P.data-00000-of-0000N`` that hold the raw tensor bytes back to back (row-major, in the byte
order the header names). ``P.index`` is a LevelDB-style sorted string table (SSTable) that maps
each tensor name to a ``BundleEntryProto`` (dtype, shape, shard, offset, size, masked crc32c);
its empty key holds a ``BundleHeaderProto`` (number of shards, byte order, format version).
TensorFlow writes one data shard per ``Saver.save`` without ``sharded=True``.

The format has three layers, one module each, each importing only the one below it: this module
(the bundle: its protos, the data shards, reading, the crash-safe writer) on
:mod:`cudnn_rnn.io.tf1.table` (the SSTable: blocks, restart points, footer, block checksums,
CRC-32C) on :mod:`cudnn_rnn.io.tf1.protobuf_wire` (varints and fields). Files are opened by
:func:`cudnn_rnn.io.files.open_regular` (regular files only).

The reader trusts nothing in the files: every length, offset and count is checked against the file
sizes before it is used, every block and tensor checksum is verified, and anything corrupt,
truncated or hostile raises :class:`TF1BundleError` naming the file and what was wrong.

Supported dtypes: float16/32/64, bfloat16, complex64/128, int8/16/32/64, uint8/16/32/64, bool.
NumPy has no bfloat16: the reader widens it to float32 (exactly, with ``ml_dtypes``) or returns
the raw ``uint16`` bits (``bfloat16="bits"``); the writer stores as bfloat16 the names listed in
``bfloat16=`` (``uint16`` bits, or float32 values that bfloat16 holds exactly) and any
``ml_dtypes.bfloat16`` array. Strings, resources, variants, quantized types and partitioned
(sliced) variables are listed by :func:`read_bundle_index` but cannot be read.

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
import io
import math
import os
import re
from array import array
from collections.abc import Collection, ItemsView, Iterable, Iterator, Mapping, ValuesView
from dataclasses import dataclass
from typing import Any, BinaryIO, Literal

import numpy as np
import numpy.typing as npt

from cudnn_rnn.io import atomic, files
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

# The writer's table builder and TensorFlow's table settings, under the private names the
# bundle has always had (tests and the fuzz worker build hostile indexes with them, and a test
# shrinks _BLOCK_SIZE to make the writer produce many blocks).
from cudnn_rnn.io.tf1.table import BLOCK_SIZE as _BLOCK_SIZE
from cudnn_rnn.io.tf1.table import (
    FOOTER_SIZE,
    crc32c,
    masked_crc32c,
    read_footer,
    show_key,
    table_entries,
    unmask_crc32c,
)
from cudnn_rnn.io.tf1.table import RESTART_INTERVAL as _RESTART_INTERVAL
from cudnn_rnn.io.tf1.table import build_table as _build_table

__all__ = [
    "SUPPORTED_DTYPES",
    "BundleEntry",
    "BundleIndex",
    "TF1BundleError",
    "bundle_prefix",
    "check_bundle",
    "crc32c",
    "masked_crc32c",
    "open_bundle",
    "read_bundle",
    "read_bundle_index",
    "write_bundle",
]

Array = npt.NDArray[Any]


class TF1BundleError(files.FormatError):
    """A tensor bundle that is corrupt, truncated, hostile, or uses a feature this reader lacks."""


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
    return _Header(num_shards=num_shards, big_endian=endianness == 1)


def _decode_shape(payload: bytes, what: str) -> tuple[int, ...]:
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
_ITEMSIZE = {enum: np.dtype(code).itemsize for enum, (_, code) in _DTYPES.items()}
# BundleEntryProto's scalar fields -> their wire type: dtype, shard_id, offset, size, crc32c
_ENTRY_WIRES = {1: VARINT, 3: VARINT, 4: VARINT, 5: VARINT, 6: FIXED32}

# (dtype enum, shape, shard_id, offset, size, masked crc32c, num_slices) of a BundleEntryProto
_EntryFields = tuple[int, tuple[int, ...], int, int, int, int, int]


def _decode_entry(
    buf: bytes, pos: int, end: int, what: str, shapes: dict[bytes, tuple[int, ...]]
) -> _EntryFields:
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
            f"{what}: size is {size} bytes, but a {_dtype_name(enum)} tensor of shape "
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


def _encode_entry(enum: int, shape: tuple[int, ...], offset: int, size: int, crc: int) -> bytes:
    dims = b"".join(bytes_field(2, varint_field(1, d)) for d in shape)
    return (
        varint_field(1, enum)
        + bytes_field(2, dims)  # present even for a scalar, as TensorFlow writes it
        + varint_field(4, offset)
        + varint_field(5, size)
        + fixed32_field(6, crc)
    )


# Header of a one-shard little-endian bundle: num_shards 1, version {producer 1}.
_HEADER = varint_field(1, 1) + bytes_field(3, varint_field(1, _BUNDLE_VERSION))


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
class BundleIndex:
    """A checkpoint's index, read and checked once by :func:`open_bundle`: the prefix its files
    are read from (after the crash-safety reading rule), its header and its entries.
    :func:`read_bundle` and :func:`check_bundle` take one in place of a prefix, so that a caller
    that looks at the index first does not parse it again."""

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


def open_bundle(path: str | os.PathLike[str]) -> BundleIndex:
    """The checked index of the checkpoint ``path`` names (its prefix or its ``.index``).

    Raises :class:`TF1BundleError` for a corrupt index, or one that is not a regular file;
    ``FileNotFoundError`` for a missing one.
    """
    prefix = _readable_prefix(bundle_prefix(path))
    index_path = prefix + ".index"
    try:
        f, size = _open_regular(index_path, "index")
    except FileNotFoundError:
        raise FileNotFoundError(
            f"TF1 checkpoint: no index file {index_path} (give the checkpoint prefix, the path "
            "without '.index')"
        ) from None
    try:
        with f:
            # The footer first, from the end: a file that is no index (or a truncated one) is
            # refused before its bulk is read, however large it is.
            f.seek(max(0, size - FOOTER_SIZE))
            read_footer(f.read(FOOTER_SIZE), size)
            f.seek(0)
            data = f.read()
        header, entries = _parse_index(data)
    except Malformed as err:
        raise TF1BundleError(f"TF1 checkpoint index {index_path}: {err}.") from None
    return BundleIndex(prefix, header, entries)


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
    for key, block, start, end, block_offset in table_entries(data):
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
                raise Malformed(f"entry: shard {shard_id} of a {shards}-shard bundle")
        except Malformed as err:  # name the tensor: only now, a name costs at 300k entries
            name = show_key(key.decode("utf-8", "backslashreplace"))
            raise Malformed(f"entry {name}{str(err).removeprefix('entry')}") from None
        keys += key
        add_key_end(len(keys))
        add_value(block_offset + start)
        add_value(block_offset + end)
    if header is None:
        raise Malformed("no header entry (the empty key)")
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
            raise Malformed(f"tensor name {show_key(key)} is not UTF-8") from None
        start = end


def read_bundle_index(prefix: str | os.PathLike[str]) -> Mapping[str, BundleEntry]:
    """Name -> :class:`BundleEntry` of every tensor in the checkpoint, in the index's order.

    Only ``PREFIX.index`` is read (the data shards need not exist); its checksums and every entry
    are checked. The result is a read-only mapping that builds each :class:`BundleEntry` when it is
    asked for (an index may list hundreds of thousands of tensors). Raises :class:`TF1BundleError`
    for a corrupt index, or one that is not a regular file; ``FileNotFoundError`` for a missing one.
    """
    return open_bundle(prefix).entries


def read_bundle(
    source: str | os.PathLike[str] | BundleIndex,
    names: Iterable[str] | None = None,
    *,
    bfloat16: Literal["float32", "bits"] = "float32",
) -> dict[str, Array]:
    """Read the tensors of a checkpoint (all of them, or ``names``) as NumPy arrays.

    ``source`` is the checkpoint's prefix, or its index from :func:`open_bundle`. Arrays are
    writable, C-contiguous, in native byte order. Every tensor's checksum is verified.
    ``bfloat16="float32"`` widens bfloat16 tensors to float32 (exactly); ``"bits"`` returns their
    raw ``uint16`` bit patterns. Raises :class:`TF1BundleError` for a corrupt, truncated or hostile
    checkpoint, a name it lacks, or a tensor this module cannot read (strings, partitioned
    variables, ...: pass ``names`` to read the others); ``FileNotFoundError`` (also a
    :class:`TF1BundleError`) for a missing data shard, and ``FileNotFoundError`` for a missing
    index. Every data shard is checked against the index (:func:`check_bundle`) before any tensor
    is read, so a lying index cannot make this allocate more memory than the data files' size.
    """
    if bfloat16 not in ("float32", "bits"):
        raise ValueError(f"read_bundle: bfloat16 must be 'float32' or 'bits', got {bfloat16!r}.")
    index, wanted, entries, shards = _plan_read(source, names)
    tensors: dict[str, Array] = {}
    for path, ks in shards:
        f, file_size = _open_regular(path, "data shard")
        with f:
            _check_claims(path, file_size, [(wanted[k], entries[k]) for k in ks])  # no race
            for k in ks:
                raw = _read_tensor_bytes(f, path, file_size, wanted[k], entries[k])
                tensors[wanted[k]] = _decode_tensor(
                    raw, entries[k], index.header.big_endian, bfloat16, path, wanted[k]
                )
    return {name: tensors[name] for name in wanted}


def check_bundle(
    source: str | os.PathLike[str] | BundleIndex, names: Iterable[str] | None = None
) -> None:
    """Check, without reading a tensor, what :func:`read_bundle` checks before it reads: the
    tensors (all, or ``names``) are in the index and readable, and every data shard they lie in
    exists, is a regular file and holds every byte the index claims for them. Raises as
    :func:`read_bundle` does; the checksums are verified only when the tensors are read."""
    _plan_read(source, names)


def _plan_read(
    source: str | os.PathLike[str] | BundleIndex, names: Iterable[str] | None
) -> tuple[BundleIndex, list[str], list[BundleEntry], list[tuple[str, list[int]]]]:
    """The index, the names wanted, their entries, and per data shard (checked against the
    index) the positions of the tensors it holds in file order: what reading them takes."""
    if isinstance(names, str):
        raise TypeError(f"read_bundle: names must be a list of names, got the string {names!r}.")
    index = source if isinstance(source, BundleIndex) else open_bundle(source)
    table = index.entries
    index_path = index.prefix + ".index"
    wanted = list(table) if names is None else list(dict.fromkeys(names))
    positions = range(len(table)) if names is None else [table._find(n) for n in wanted]
    missing = [show_key(n) for n, i in zip(wanted, positions) if i < 0]
    if missing:
        raise TF1BundleError(
            f"TF1 checkpoint {index_path}: no tensor(s) {_listing(missing)} "
            f"(it holds {len(table)})."
        )
    entries = [table._entry(i) for i in positions]
    unreadable = [
        f"{show_key(n)} ({_why_unreadable(e)})" for n, e in zip(wanted, entries) if not e.readable
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
            file_size = _regular_file_size(path, "data shard")
        except FileNotFoundError:
            raise _MissingShardError(
                f"TF1 checkpoint: no data shard {path} (its index {index_path} says the "
                f"checkpoint has {index.header.num_shards} shard(s))."
            ) from None
        ks.sort(key=lambda k: entries[k].offset)  # read the file front to back
        _check_claims(path, file_size, [(wanted[k], entries[k]) for k in ks])
        shards.append((path, ks))
    return index, wanted, entries, shards


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
            f"TF1 checkpoint data {path}: tensor {show_key(name)} (offset {entry.offset}, "
            f"{entry.size} bytes){others} runs past the end of the file ({file_size} bytes); "
            "the file is truncated or the index is corrupt."
        )
    total = sum(e.size for _, e in claims)
    if total > file_size:
        raise TF1BundleError(
            f"TF1 checkpoint data {path}: its {len(claims)} tensor(s) claim {total} bytes in all, "
            f"more than the file's {file_size}; they overlap, so the index is corrupt."
        )


def _regular_file_size(path: str, what: str) -> int:
    """The size of ``path``, if it is a regular file; anything else is refused before it is
    opened (opening a FIFO blocks forever, reading a device may never end)."""
    try:
        return files.regular_size(path)
    except files.NotRegularFile as err:
        raise _not_regular(err, what) from None


def _not_regular(err: files.NotRegularFile, what: str) -> TF1BundleError:
    return TF1BundleError(f"TF1 checkpoint {what} {err.path} is {err.kind}, not a regular file.")


def _open_regular(path: str, what: str) -> tuple[io.BufferedReader, int]:
    """The regular file ``path`` open for reading (:func:`cudnn_rnn.io.files.open_regular`), and
    its size."""
    try:
        f = files.open_regular(path)
    except files.NotRegularFile as err:
        raise _not_regular(err, what) from None
    return f, os.fstat(f.fileno()).st_size


def _read_tensor_bytes(
    f: io.BufferedReader, path: str, file_size: int, name: str, entry: BundleEntry
) -> bytearray:
    if entry.offset > file_size or entry.size > file_size - entry.offset:
        _check_claims(path, file_size, [(name, entry)])
    try:
        raw = bytearray(entry.size)
    except MemoryError:
        raise TF1BundleError(
            f"TF1 checkpoint data {path}: tensor {show_key(name)} takes {entry.size} bytes, "
            "more memory than is available."
        ) from None
    f.seek(entry.offset)
    if f.readinto(raw) != entry.size:
        raise TF1BundleError(f"TF1 checkpoint data {path}: short read of tensor {show_key(name)}.")
    actual = crc32c(raw)
    if actual != unmask_crc32c(entry.crc32c):
        raise TF1BundleError(
            f"TF1 checkpoint data {path}: tensor {show_key(name)}: crc32c mismatch (stored "
            f"{unmask_crc32c(entry.crc32c):#010x}, computed {actual:#010x}); the file is corrupt."
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
                f"TF1 checkpoint data {path}: bool tensor {show_key(name)} holds bytes other "
                "than 0 and 1."
            )
    out = np.frombuffer(raw, dtype=stored).reshape(entry.shape)
    out = out.astype(stored.newbyteorder("="), copy=False)
    if enum == _DT_BFLOAT16 and bfloat16 == "float32":
        import ml_dtypes  # here, not above: only bfloat16 tensors pay for its import

        out = out.view(ml_dtypes.bfloat16).astype(np.float32)  # exact, NaN payloads too
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
            # Not ml_dtypes' cast: it rounds, and turns every NaN into the one quiet NaN (with a
            # RuntimeWarning). Values bfloat16 holds exactly are float32 words with a zero low
            # half, and their bfloat16 bits are the high half, NaN payloads included.
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
    Only regular files are replaced: a directory, FIFO, device or socket at ``PREFIX.index`` or
    ``PREFIX.data-00000-of-00001`` (or a symbolic link to one) is refused before anything is
    written, with :class:`cudnn_rnn.io.atomic.NotRegularTarget` naming it.
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
        # Before anything is written or backed up: only regular files are replaced (a FIFO,
        # a device or a directory there, or a link to one, is refused naming it).
        for path in (prefix_str + ".index", _data_path(prefix_str, 0, 1)):
            atomic.check_replaceable(path)
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
