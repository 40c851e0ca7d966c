"""The bottom of the file wing: safe opening, telling formats apart by content, one base error.

Every reader of the package opens its files with :func:`open_regular`, which opens only a regular
file: a FIFO would block the reader, a device never end, a directory is no file. The file is looked
at (``stat``) before it is opened, opened non-blocking in case it was swapped for a FIFO since,
and looked at again once open (``fstat``), where a size bound given by the caller is checked too.
:func:`regular_size` is the same look for a file that a library opens later.

:func:`sniff` tells formats apart by their content, never by the file's name, from a bounded
prefix, the end of the file, and a zip archive's central directory:

=============  ==============================================================================
kind           rule
=============  ==============================================================================
tf1            ``PATH.index`` (or ``PATH`` itself) ends with the magic number of TensorFlow's
               table format: a TF1 checkpoint, named by its prefix or its ``.index``
hdf5           HDF5's signature at offset 0, 512, 1024, 2048, ... (a user block may precede it)
torch_zip      a zip archive (local header first, end record found) holding ``DIR/data.pkl``
               and no TorchScript code: ``torch.save``
torchscript    a zip archive holding ``DIR/constants.pkl`` or ``DIR/code/``: ``torch.jit.save``
npz            a zip archive of ``.npy`` members only: ``np.savez``
zip            any other zip archive (a Keras 3 ``.keras`` file, for example)
torch_pickle   a pickle whose first object is torch's magic number: legacy ``torch.save``
               (``_use_new_zipfile_serialization=False``)
safetensors    an 8-byte little-endian header length that fits in the file, then ``{``
onnx           protobuf fields of an ``onnx.ModelProto``: ``ir_version`` first, every field a
               known one with its wire type (or an unknown number, as protobuf allows), each
               length inside the file, and a ``graph``; at most 64 fields are read
unknown        none of these: empty, truncated, corrupt, or another format
=============  ==============================================================================

A kind is given only where the content shows it: a zip archive cut before its end record, a
safetensors file cut inside its header or an ONNX model cut inside a field is ``unknown``, and the
caller may still hand it to the reader its name suggests, whose error says what is wrong (as it
does for a file whose signature survived the cut: HDF5, a legacy pickle, a safetensors header
that fits). What is read is bounded: 64 bytes at the start, the last 64 KiB + 22 bytes (a zip
archive's end record), the central directory (at most 1 MiB at each end of a longer one), a few
bytes at each offset HDF5 allows and at each of 64 protobuf fields.

:class:`FormatError` is the base of every format error (a ``ValueError``, as they always were).
Standard library only: of the package, only :mod:`cudnn_rnn.errors` is imported, so every module
that reads or writes a file can stand on this one.

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "weights")
>>> with open(path, "wb") as f:
...     _ = f.write(b"\\x89HDF\\r\\n\\x1a\\n" + bytes(100))
>>> sniff(path), KINDS[sniff(path)]
('hdf5', 'an HDF5 file')
"""

from __future__ import annotations

import io
import os
import stat
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from cudnn_rnn.errors import CudnnRNNError

__all__ = [
    "HDF5",
    "KINDS",
    "NPZ",
    "ONNX",
    "SAFETENSORS",
    "TF1",
    "TF_TABLE_MAGIC",
    "TORCHSCRIPT",
    "TORCH_PICKLE",
    "TORCH_ZIP",
    "UNKNOWN",
    "ZIP",
    "Claims",
    "FileTooLarge",
    "FormatError",
    "NotRegularFile",
    "clip",
    "escape",
    "first_line",
    "listed",
    "open_regular",
    "quote",
    "regular_size",
    "sniff",
    "sniff_file",
    "special_kind",
]

#: name -> (shape, dtype name): what a file's header or index says, before any data is read.
Claims = Mapping[str, tuple[tuple[int, ...], str]]


class FormatError(CudnnRNNError, ValueError):
    """A file, or bytes of one, that its reader cannot read: the base of every format error."""


class NotRegularFile(FormatError):
    """A path that is not a regular file (a directory, a FIFO, a device, a socket); ``kind``
    says which, in words."""

    def __init__(self, path: str | os.PathLike[str], kind: str) -> None:
        self.path = os.fspath(path)
        self.kind = kind
        super().__init__(f"{self.path} is {kind}, not a regular file; only regular files are read.")

    def __reduce__(self) -> tuple[type[NotRegularFile], tuple[str, str]]:
        return type(self), (self.path, self.kind)  # picklable, for a pool of readers


class FileTooLarge(FormatError):
    """A regular file larger than its reader accepts (``size`` > ``limit`` bytes)."""

    def __init__(self, path: str | os.PathLike[str], size: int, limit: int) -> None:
        self.path = os.fspath(path)
        self.size = size
        self.limit = limit
        super().__init__(f"{self.path} is {size} bytes, more than the {limit} its reader takes.")

    def __reduce__(self) -> tuple[type[FileTooLarge], tuple[str, int, int]]:
        return type(self), (self.path, self.size, self.limit)


# -- how the file wing words its messages ---------------------------------------------------------

_MAX_QUOTED = 120  # characters of a name or value quoted in an error message


def clip(text: str, limit: int = 160) -> str:
    """``text`` cut to at most ``limit`` characters, ``...`` marking the cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def escape(text: str) -> str:
    """``text`` with every character that does not print written as an escape, as Python writes
    it in a string literal: control characters (``\\x1b``, ``\\n``, ``\\r``), Unicode format
    characters (the bidi overrides: ``\\u202e``), line and paragraph separators, and the rest
    ``str.isprintable`` refuses. What a file names can then neither drive the terminal (a
    title, a cleared screen, colours), nor start a line of its own, nor reorder what follows.
    Backslashes are left as they are, so escaping twice changes nothing.

    >>> escape("a\\nb\\x1b[2J\\u202e")
    'a\\\\nb\\\\x1b[2J\\\\u202e'
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def quote(value: object, limit: int | None = _MAX_QUOTED) -> str:
    """How every message and listing shows a name or value a file gave: ``repr(value)``
    (quoted, backslashes and quotes escaped), what does not print escaped (:func:`escape`: a
    string's ``repr`` already does it; an object's ``repr`` may not), cut after ``limit``
    characters (None: whole)."""
    text = escape(repr(value))
    return text if limit is None else clip(text, limit + 3)


def listed(items: Sequence[str], limit: int = 3) -> str:
    """The first ``limit`` of ``items`` (each escaped and clipped), and how many more there are."""
    more = len(items) - limit
    shown = ", ".join(clip(escape(i)) for i in items[:limit])
    return shown + (f" and {more} more" if more > 0 else "")


def first_line(err: BaseException) -> str:
    """The first line of an error's message, escaped (its class name if it has none)."""
    lines = str(err).strip().splitlines()
    return escape(lines[0].strip()) if lines else type(err).__name__


_SPECIAL: tuple[tuple[Callable[[int], bool], str], ...] = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)


# -- opening --------------------------------------------------------------------------------------


def special_kind(mode: int) -> str | None:
    """What a file of ``st_mode`` ``mode`` is, in words, unless it is a regular file (None)."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _SPECIAL if test(mode)), "a special file")


def _check(path: str, info: os.stat_result) -> None:
    kind = special_kind(info.st_mode)
    if kind is not None:
        raise NotRegularFile(path, kind)


def regular_size(path: str | os.PathLike[str]) -> int:
    """The size of the regular file ``path``, looked at without opening it (a link is followed).

    Raises :class:`NotRegularFile` for anything else, ``OSError`` (``FileNotFoundError``...)
    where there is nothing to look at.
    """
    name = os.fspath(path)
    info = os.stat(name)
    _check(name, info)
    return info.st_size


def open_regular(path: str | os.PathLike[str], *, max_size: int | None = None) -> io.BufferedReader:
    """``path`` opened for binary reading, if it is a regular file of at most ``max_size`` bytes.

    Anything else is refused before it is opened (``open`` itself blocks on a FIFO), and again
    once open, in case it was swapped for one since (the open does not block: non-blocking):
    :class:`NotRegularFile`, :class:`FileTooLarge`; ``OSError`` where the path cannot be opened
    (``FileNotFoundError`` for nothing, with ``filename`` set).
    """
    name = os.fspath(path)
    regular_size(name)
    fd = os.open(name, _READ_FLAGS)
    try:
        info = os.fstat(fd)
        _check(name, info)
        if max_size is not None and info.st_size > max_size:
            raise FileTooLarge(name, info.st_size, max_size)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


# -- sniffing -------------------------------------------------------------------------------------

SAFETENSORS: Final = "safetensors"
TORCH_ZIP: Final = "torch_zip"
TORCHSCRIPT: Final = "torchscript"
TORCH_PICKLE: Final = "torch_pickle"
NPZ: Final = "npz"
ZIP: Final = "zip"
HDF5: Final = "hdf5"
ONNX: Final = "onnx"
TF1: Final = "tf1"
UNKNOWN: Final = "unknown"

#: Every kind :func:`sniff` returns -> what it is, in words (for messages).
KINDS: Mapping[str, str] = {
    SAFETENSORS: "a safetensors file",
    TORCH_ZIP: "a torch.save archive (zip)",
    TORCHSCRIPT: "a TorchScript archive (torch.jit.save)",
    TORCH_PICKLE: "a legacy torch.save file (pickle)",
    NPZ: "a NumPy .npz archive (np.savez)",
    ZIP: "a zip archive that is no torch, TorchScript or .npz archive",
    HDF5: "an HDF5 file",
    ONNX: "an ONNX model (protobuf)",
    TF1: "a TF1 checkpoint",
    UNKNOWN: "of no format recognised by its content",
}

#: The magic number that ends a TensorFlow table (a TF1 checkpoint's ``.index``), little-endian.
TF_TABLE_MAGIC = 0xDB4775248B80FB57
_TABLE_FOOTER = 48
_HEAD = 64
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_TORCH_MAGIC = b"\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little")  # a pickled long
_PICKLE_PROTOCOLS = range(2, 6)


def sniff(path: str | os.PathLike[str]) -> str:
    """The kind of file at ``path`` (one of :data:`KINDS`), by its content (see the module).

    A TF1 checkpoint is named by its prefix (``PATH.index`` exists) or by its ``.index``. Raises
    as :func:`open_regular` does for a path that is no regular file (a prefix whose ``.index``
    is no table while ``PATH`` does not exist: ``unknown``).
    """
    name = os.fspath(path)
    index = name + ".index"
    if not name.endswith(".index") and os.path.isfile(index):
        with open_regular(index) as f:
            if _is_table(f, os.fstat(f.fileno()).st_size):
                return TF1
        if not os.path.lexists(name):
            return UNKNOWN
    with open_regular(name) as f:
        return sniff_file(f)


def sniff_file(f: io.BufferedReader) -> str:
    """The kind of the open file ``f`` by its content, as :func:`sniff` tells it (a TF1
    checkpoint by its ``.index`` alone); ``f`` is left at an unspecified position."""
    size = os.fstat(f.fileno()).st_size
    head = _read_at(f, 0, _HEAD)
    if head.startswith(_HDF5_SIGNATURE):
        return HDF5
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return _zip_kind(f, size)
    if len(head) > 1 and head[0] == 0x80 and head[1] in _PICKLE_PROTOCOLS and _TORCH_MAGIC in head:
        return TORCH_PICKLE
    if len(head) >= 10:
        header_length = int.from_bytes(head[:8], "little")
        if 2 <= header_length <= size - 8 and head[8:9] == b"{":
            return SAFETENSORS
    if _is_table(f, size):
        return TF1
    if _has_hdf5_user_block(f, size):
        return HDF5
    if _is_onnx(f, size):
        return ONNX
    return UNKNOWN


def _read_at(f: io.BufferedReader, offset: int, count: int) -> bytes:
    f.seek(offset)
    return f.read(count)


def _is_table(f: io.BufferedReader, size: int) -> bool:
    return size >= _TABLE_FOOTER and _read_at(f, size - 8, 8) == TF_TABLE_MAGIC.to_bytes(
        8, "little"
    )


def _has_hdf5_user_block(f: io.BufferedReader, size: int) -> bool:
    offset = 512
    while offset + len(_HDF5_SIGNATURE) <= size:
        if _read_at(f, offset, len(_HDF5_SIGNATURE)) == _HDF5_SIGNATURE:
            return True
        offset *= 2
    return False


# -- zip archives: the names in the central directory ---------------------------------------------

_END = b"PK\x05\x06"
_END_SIZE = 22
_END_SEARCH = _END_SIZE + 0xFFFF  # the end record, and a comment of at most 64 KiB
_ZIP64_LOCATOR = b"PK\x06\x07"
_ZIP64_LOCATOR_SIZE = 20
_ZIP64_END = b"PK\x06\x06"
_ZIP64_END_SIZE = 56
_ENTRY = b"PK\x01\x02"
_ENTRY_SIZE = 46
_NAMES_BYTES = 1 << 20  # of the central directory, read at each end
_TAIL_STARTS = 16  # where an entry may begin in the tail, tried in turn


def _zip_kind(f: io.BufferedReader, size: int) -> str:
    names = _zip_names(f, size)
    if names is None:
        return UNKNOWN
    if names and all(n.endswith(".npy") for n in names):
        return NPZ
    inside = [n.split("/", 1)[1] for n in names if "/" in n]
    if any(n == "constants.pkl" or n.startswith("code/") for n in inside):
        return TORCHSCRIPT
    return TORCH_ZIP if "data.pkl" in inside else ZIP


def _zip_names(f: io.BufferedReader, size: int) -> list[str] | None:
    """The member names of the central directory (both ends of a long one), or None when the
    end record is missing or points outside the file."""
    found = _central_directory(f, size)
    if found is None:
        return None
    start, length = found
    if length <= 2 * _NAMES_BYTES:
        return _entry_names(_read_at(f, start, length), 0, whole=True)
    head = _entry_names(_read_at(f, start, _NAMES_BYTES), 0, whole=False) or []
    tail = _read_at(f, start + length - _NAMES_BYTES, _NAMES_BYTES)
    # The tail starts inside an entry: the first signature from which whole entries run to its
    # end begins one (a signature inside a name would not run to the end).
    begin = tail.find(_ENTRY)
    for _ in range(_TAIL_STARTS):
        if begin < 0:
            break
        names = _entry_names(tail, begin, whole=True)
        if names is not None:
            return head + names
        begin = tail.find(_ENTRY, begin + 1)
    return head


def _central_directory(f: io.BufferedReader, size: int) -> tuple[int, int] | None:
    """(offset, length) of the central directory, from the end record (zip64's if needed)."""
    tail_start = max(0, size - _END_SEARCH)
    tail = _read_at(f, tail_start, size - tail_start)
    pos = tail.rfind(_END)
    while pos >= 0:  # the end record: its comment reaches exactly to the end of the file
        if pos + _END_SIZE <= len(tail):
            (comment,) = struct.unpack_from("<H", tail, pos + 20)
            if pos + _END_SIZE + comment == len(tail):
                break
        pos = tail.rfind(_END, 0, pos)
    if pos < 0:
        return None
    end = tail_start + pos
    count, length, start = struct.unpack_from("<HII", tail, pos + 10)
    if 0xFFFF == count or 0xFFFFFFFF in (length, start):
        zip64 = _zip64_directory(f, end)
        if zip64 is None:
            return None
        end, length, start = zip64
    return (start, length) if start + length <= end else None


def _zip64_directory(f: io.BufferedReader, end: int) -> tuple[int, int, int] | None:
    """(where the zip64 end record is, directory length, directory offset), or None."""
    if end < _ZIP64_LOCATOR_SIZE:
        return None
    locator = _read_at(f, end - _ZIP64_LOCATOR_SIZE, _ZIP64_LOCATOR_SIZE)
    if not locator.startswith(_ZIP64_LOCATOR):
        return None
    (record,) = struct.unpack_from("<Q", locator, 8)
    if record + _ZIP64_END_SIZE > end - _ZIP64_LOCATOR_SIZE:
        return None
    data = _read_at(f, record, _ZIP64_END_SIZE)
    if not data.startswith(_ZIP64_END):
        return None
    length, start = struct.unpack_from("<QQ", data, 40)
    return record, length, start


def _entry_names(buf: bytes, pos: int, *, whole: bool) -> list[str] | None:
    """The names of the central directory entries from ``pos``: to exactly the end of ``buf``
    (``whole``; None otherwise), or as many as ``buf`` holds."""
    names: list[str] = []
    while pos < len(buf):
        fits = buf.startswith(_ENTRY, pos) and pos + _ENTRY_SIZE <= len(buf)
        lengths = struct.unpack_from("<HHH", buf, pos + 28) if fits else (0, 0, 0)
        end = pos + _ENTRY_SIZE + sum(lengths)
        if not fits or end > len(buf):
            return None if whole else names
        names.append(
            buf[pos + _ENTRY_SIZE : pos + _ENTRY_SIZE + lengths[0]].decode("utf-8", "replace")
        )
        pos = end
    return names


# -- ONNX: the first fields of a ModelProto --------------------------------------------------------

#: ModelProto's field numbers -> wire type (0: varint, 2: length-delimited), from onnx.proto.
_MODEL_FIELDS = {1: 0, 2: 2, 3: 2, 4: 2, 5: 0, 6: 2, 7: 2, 8: 2, 14: 2, 20: 2, 25: 2, 26: 2}
_IR_VERSION, _GRAPH = 1, 7
_MAX_IR_VERSION = 1000
_MAX_FIELDS = 64
_FIXED_SIZES = {1: 8, 5: 4}  # wire types of fixed-size fields


def _is_onnx(f: io.BufferedReader, size: int) -> bool:
    """Whether the file starts as an ONNX model: ``ir_version`` first, then fields of
    ModelProto (or unknown numbers, as protobuf allows) whose lengths stay in the file, a
    ``graph`` among them; only the fields' keys and lengths are read, at most 64 of them."""
    pos = 0
    seen: set[int] = set()
    for _ in range(_MAX_FIELDS):
        if pos == size:
            break
        key = _varint(f, pos)
        if key is None:
            return False
        pos = key[1]
        number, wire = key[0] >> 3, key[0] & 7
        if number == 0 or _MODEL_FIELDS.get(number, wire) != wire:
            return False
        if not seen and number != _IR_VERSION:
            return False
        if wire in _FIXED_SIZES:
            pos += _FIXED_SIZES[wire]
        elif wire in (0, 2):
            value = _varint(f, pos)
            if value is None:
                return False
            pos = value[1] + (value[0] if wire == 2 else 0)
            if number == _IR_VERSION and not 1 <= value[0] <= _MAX_IR_VERSION:
                return False
        else:  # groups (3, 4) are not in ONNX; 6 and 7 are no wire types
            return False
        if pos > size:
            return False
        seen.add(number)
    return _GRAPH in seen


def _varint(f: io.BufferedReader, pos: int) -> tuple[int, int] | None:
    """(value, position after it) of the varint at ``pos``, or None if there is none."""
    data = _read_at(f, pos, 10)
    value = 0
    for i, byte in enumerate(data):
        value |= (byte & 0x7F) << (7 * i)
        if byte < 0x80:
            return value, pos + i + 1
    return None
