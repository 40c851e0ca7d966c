"""TensorFlow tensor-bundle checkpoints (what TF1's ``tf.train.Saver`` writes), without TensorFlow.

A checkpoint with prefix ``P`` is an index, ``P.index``, and data shards
``P.data-00000-of-0000N`` that hold the raw tensor bytes back to back (row-major, in the byte
order the header names). ``P.index`` is a LevelDB-style sorted string table (SSTable) that maps
each tensor name to a ``BundleEntryProto`` (dtype, shape, shard, offset, size, masked crc32c);
its empty key holds a ``BundleHeaderProto`` (number of shards, byte order, format version).
TensorFlow writes one data shard per ``Saver.save`` without ``sharded=True``.

The format has three layers, each importing only the ones below it: the bundle on
:mod:`cudnn_rnn.io.tf1.table` (the SSTable: blocks, restart points, footer, block checksums,
CRC-32C) on :mod:`cudnn_rnn.io.tf1.protobuf_wire` (varints and fields). The bundle is four
modules: this one reads it (the index as a compact mapping, the data shards, every claim checked)
and is its public face; :mod:`~cudnn_rnn.io.tf1.writer` writes it; :mod:`~cudnn_rnn.io.tf1.protos`
is its protos and dtypes, shared by both; :mod:`~cudnn_rnn.io.tf1.prefix` names a prefix's files
and is the crash-safe overwrite protocol. Files are opened by
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
import io
import os
from array import array
from collections.abc import ItemsView, Iterable, Iterator, Mapping, ValuesView
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from cudnn_rnn.io import files
from cudnn_rnn.io.tf1.prefix import bundle_prefix, data_path, readable_prefix
from cudnn_rnn.io.tf1.protobuf_wire import Malformed
from cudnn_rnn.io.tf1.protos import (
    DT_BFLOAT16,
    DTYPES,
    ENUM_OF_NAME,
    SUPPORTED_DTYPES,
    BundleEntry,
    Header,
    decode_entry,
    decode_header,
    dtype_name,
)
from cudnn_rnn.io.tf1.table import (
    FOOTER_SIZE,
    crc32c,
    masked_crc32c,
    read_footer,
    show_key,
    table_entries,
    unmask_crc32c,
)
from cudnn_rnn.io.tf1.writer import write_bundle

# The format's public names, wherever they live (the writer, the protos, the prefix, the table's
# checksums): the package and its users import them from here.
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


@dataclass(frozen=True)
class BundleIndex:
    """A checkpoint's index, read and checked once by :func:`open_bundle`: the prefix its files
    are read from (after the crash-safety reading rule), its header and its entries.
    :func:`read_bundle` and :func:`check_bundle` take one in place of a prefix, so that a caller
    that looks at the index first does not parse it again."""

    prefix: str
    header: Header
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
        enum, shape, shard_id, offset, size, crc, num_slices = decode_entry(
            self._data, start, end, "entry", self._shapes
        )
        return BundleEntry(dtype_name(enum), shape, shard_id, offset, size, crc, num_slices)

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
    prefix = readable_prefix(bundle_prefix(path))
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


def _parse_index(data: bytes) -> tuple[Header, _EntryTable]:
    """The header and the tensors of an index file's bytes, every entry decoded and checked.

    Cost: one pass over the file, a few microseconds an entry; memory: the file and some 30 bytes
    an entry.
    """
    header: Header | None = None
    keys = bytearray()
    key_ends: array[int] = array("q")
    values: array[int] = array("q")
    add_key_end, add_value = key_ends.append, values.append
    shapes: dict[bytes, tuple[int, ...]] = {}
    for key, block, start, end, block_offset in table_entries(data):
        if header is None:
            if key:
                break
            header = decode_header(block[start:end])
            continue
        if not key[0]:
            continue  # one slice of a partitioned variable, listed by its full entry
        try:
            shard_id = decode_entry(block, start, end, "entry", shapes)[2]
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
        path = data_path(index.prefix, shard, index.header.num_shards)
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
    enum = ENUM_OF_NAME[entry.dtype]
    stored = np.dtype(DTYPES[enum][1])
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
    if enum == DT_BFLOAT16 and bfloat16 == "float32":
        import ml_dtypes  # here, not above: only bfloat16 tensors pay for its import

        out = out.view(ml_dtypes.bfloat16).astype(np.float32)  # exact, NaN payloads too
    return out
