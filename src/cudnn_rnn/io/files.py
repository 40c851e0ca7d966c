"""The bottom of the file wing: safe opening, the one bounded zip reader, telling formats apart
by content, one base error.

Every reader of the package opens its files with :func:`open_regular`, which opens only a regular
file: a FIFO would block the reader, a device never end, a directory is no file. The file is looked
at (``stat``) before it is opened, opened non-blocking in case it was swapped for a FIFO since,
and looked at again once open (``fstat``), where a size bound given by the caller is checked too.
:func:`regular_size` is the same look for a file that a library opens later. A path that cannot be
looked at or opened (nothing there, a symbolic link loop, a name too long, no permission) is a
:class:`FileAccessError`: the ``OSError`` it was (``FileNotFoundError``...), and a
``CudnnRNNError`` whose message names the path and says what to do.

Every zip archive (torch.save, TorchScript, ``.npz``, and sniffing) is read by one reader,
:func:`zip_archive` / :func:`open_zip`: its central directory, end records and local headers are
checked against the file before any member is inflated (entry count, sizes against the file,
compression ratio, overlapping or duplicate members, zip64 consistency; every problem in one
:class:`ZipError`), and a member is then inflated to exactly its declared size, never more.
:func:`pinned` hands another reader (``torch.load``) the file with its checked parts served from
what was checked.

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
pickle         a plain pickle (``pickle.dump``): protocol 2 to 5 (its ``PROTO`` opcode first),
               or 0 and 1 starting with a dict or list (``(dp0``, ``(lp0``, ``}q``, ``]q``,
               ``}(``, ``](``), and the file's last byte its ``STOP`` (``.``); after the kinds
               above, so a safetensors header length that looks like ``PROTO`` stays one
safetensors    an 8-byte little-endian header length that fits in the file, then ``{``
onnx           protobuf fields of an ``onnx.ModelProto``: ``ir_version`` first, every field a
               known one with its wire type (or an unknown number, as protobuf allows), each
               length inside the file, and a ``graph``; at most 64 fields are read
unknown        none of these: empty, truncated, corrupt, or another format
=============  ==============================================================================

A kind is given only where the content shows it: a zip archive cut before its end record (or
whose end record points outside the file), a safetensors file cut inside its header or an ONNX
model cut inside a field is ``unknown``, and the caller may still hand it to the reader its name
suggests, whose error says what is wrong (as it does for a file whose signature survived the
cut: HDF5, a legacy pickle, a safetensors header that fits). A zip archive whose end record is
found is checked as every reader checks it, and refused (:class:`ZipError`) as they would refuse
it. What is read is bounded: 64 bytes at the start, the last 64 KiB + 22 bytes (a zip archive's
end record), a zip archive's central directory (at most 64 MiB) and its entries' local headers
(at most 200,000), a few bytes at each offset HDF5 allows and at each of 64 protobuf fields.

Every JSON document the readers parse (a Keras 3 ``config.json``, a Keras ``.h5`` file's
``model_config``, a safetensors header and its ``models`` metadata) goes through one loader,
:func:`load_json`: its size and the depth its arrays and objects nest to are checked first, by one
linear scan that skips strings (a bracket inside a string does not count), and a document deeper
than :data:`MAX_JSON_DEPTH` is refused before ``json.loads`` sees it, so that no reader can be
driven into a ``RecursionError`` (or, with a raised recursion limit, a crash).

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

import array
import contextlib
import io
import itertools
import json
import os
import stat
import struct
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from cudnn_rnn.errors import CudnnRNNError, FileAccessError

__all__ = [
    "DEFLATED",
    "HDF5",
    "KINDS",
    "MAX_JSON_DEPTH",
    "MAX_ZIP_DIRECTORY",
    "MAX_ZIP_ENTRIES",
    "MAX_ZIP_RATIO",
    "NPZ",
    "ONNX",
    "PICKLE",
    "SAFETENSORS",
    "STORED",
    "TF1",
    "TF_TABLE_MAGIC",
    "TORCHSCRIPT",
    "TORCH_PICKLE",
    "TORCH_ZIP",
    "UNKNOWN",
    "ZIP",
    "ZIP_RATIO_GRACE",
    "Claims",
    "FileAccessError",
    "FileTooLarge",
    "FormatError",
    "NotRegularFile",
    "ZipArchive",
    "ZipEntry",
    "ZipError",
    "clip",
    "escape",
    "first_line",
    "json_depth",
    "listed",
    "load_json",
    "open_regular",
    "open_zip",
    "pinned",
    "quote",
    "read_at",
    "regular_size",
    "size_of",
    "sniff",
    "sniff_file",
    "special_kind",
    "zip_archive",
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


def names(items: Sequence[object], limit: int = 3) -> str:
    """:func:`listed` for names read from a file: each quoted (:func:`quote`), so that an empty
    name, a comma or a space in one cannot blur where it ends."""
    return listed([quote(i) for i in items], limit)


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

    Raises :class:`NotRegularFile` for anything else, :class:`FileAccessError` (an ``OSError``:
    ``FileNotFoundError``... for nothing there, a symbolic link loop, a name too long) where
    there is nothing to look at.
    """
    name = os.fspath(path)
    try:
        info = os.stat(name)
    except OSError as err:
        raise FileAccessError.from_os_error(err, name) from err
    _check(name, info)
    return info.st_size


def open_regular(path: str | os.PathLike[str], *, max_size: int | None = None) -> io.BufferedReader:
    """``path`` opened for binary reading, if it is a regular file of at most ``max_size`` bytes;
    the file's ``name`` is ``path``.

    Anything else is refused before it is opened (``open`` itself blocks on a FIFO), and again
    once open, in case it was swapped for one since (the open does not block: non-blocking):
    :class:`NotRegularFile`, :class:`FileTooLarge`; :class:`FileAccessError` (an ``OSError``,
    ``FileNotFoundError`` for nothing, with ``filename`` set) where the path cannot be opened.
    """
    name = os.fspath(path)
    regular_size(name)
    try:
        fd = os.open(name, _READ_FLAGS)
    except OSError as err:
        raise FileAccessError.from_os_error(err, name) from err
    try:
        info = os.fstat(fd)
        _check(name, info)
        if max_size is not None and info.st_size > max_size:
            raise FileTooLarge(name, info.st_size, max_size)
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    f.raw.name = name  # type: ignore[attr-defined]  # (the fd otherwise): errors name the path
    return f


# -- sniffing -------------------------------------------------------------------------------------

SAFETENSORS: Final = "safetensors"
TORCH_ZIP: Final = "torch_zip"
TORCHSCRIPT: Final = "torchscript"
TORCH_PICKLE: Final = "torch_pickle"
PICKLE: Final = "pickle"
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
    PICKLE: "a plain pickle (pickle.dump)",
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
#: How a protocol 0 or 1 pickle of a dict or list starts (its first opcodes).
_OLD_PICKLE_STARTS = (b"(dp", b"(lp", b"}q", b"]q", b"}(", b"](")


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
            if _is_table(f, size_of(f)):
                return TF1
        if not os.path.lexists(name):
            return UNKNOWN
    with open_regular(name) as f:
        return sniff_file(f)


def sniff_file(f: io.BufferedReader) -> str:
    """The kind of the open file ``f`` by its content, as :func:`sniff` tells it (a TF1
    checkpoint by its ``.index`` alone); ``f`` is left at an unspecified position."""
    size = size_of(f)
    head = read_at(f, 0, _HEAD)
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
    if _is_pickle(f, head, size):
        return PICKLE
    if _is_table(f, size):
        return TF1
    if _has_hdf5_user_block(f, size):
        return HDF5
    if _is_onnx(f, size):
        return ONNX
    return UNKNOWN


def read_at(f: io.BufferedReader, offset: int, count: int) -> bytes:
    """At most ``count`` bytes of the open file ``f`` from ``offset`` (fewer at its end); an
    ``OSError`` is a :class:`FileAccessError` naming the file."""
    try:
        f.seek(offset)
        return f.read(count)
    except OSError as err:
        raise FileAccessError.from_os_error(err, _name_of(f)) from err


def _readinto(f: io.BufferedReader, buffer: bytearray, path: str) -> int:
    try:
        return f.readinto(buffer)
    except OSError as err:
        raise FileAccessError.from_os_error(err, path) from err


def size_of(f: io.BufferedReader) -> int:
    """The size of the open file ``f`` (``fstat``)."""
    try:
        return os.fstat(f.fileno()).st_size
    except OSError as err:
        raise FileAccessError.from_os_error(err, _name_of(f)) from err


def _name_of(f: object) -> str:
    """The path of a file :func:`open_regular` opened (what messages name)."""
    name = getattr(f, "name", None)
    return name if isinstance(name, str) else "the file"


def _is_table(f: io.BufferedReader, size: int) -> bool:
    return size >= _TABLE_FOOTER and read_at(f, size - 8, 8) == TF_TABLE_MAGIC.to_bytes(8, "little")


def _is_pickle(f: io.BufferedReader, head: bytes, size: int) -> bool:
    """A plain pickle's first opcodes, and its STOP as the file's last byte."""
    proto = len(head) > 2 and head[0] == 0x80 and head[1] in _PICKLE_PROTOCOLS
    if not (proto or head.startswith(_OLD_PICKLE_STARTS)):
        return False
    return read_at(f, size - 1, 1) == b"."


def _has_hdf5_user_block(f: io.BufferedReader, size: int) -> bool:
    offset = 512
    while offset + len(_HDF5_SIGNATURE) <= size:
        if read_at(f, offset, len(_HDF5_SIGNATURE)) == _HDF5_SIGNATURE:
            return True
        offset *= 2
    return False


# -- zip archives: the one bounded reader ----------------------------------------------------------

#: The most entries an archive may list. torch.save and TorchScript write one member a storage;
#: 200,000 is far above what they hold, and its central directory and local headers are read and
#: checked in about a second.
MAX_ZIP_ENTRIES: Final = 200_000
#: The largest central directory read (200,000 entries with names of 300 bytes).
MAX_ZIP_DIRECTORY: Final = 64 << 20
#: What deflated members may inflate to: at most MAX_ZIP_RATIO times their deflated bytes, plus
#: ZIP_RATIO_GRACE (an archive of F bytes asks for at most 100 F + 64 MiB), each member and all
#: together. Weights deflate by a few percent, code and JSON about 10:1; an array of zeros, which
#: deflates ~1000:1, is accepted up to the grace.
MAX_ZIP_RATIO: Final = 100
ZIP_RATIO_GRACE: Final = 64 << 20
STORED: Final = 0
DEFLATED: Final = 8

_END = b"PK\x05\x06"
_END_SIZE = 22
_END_SEARCH = _END_SIZE + 0xFFFF  # the end record, and a comment of at most 64 KiB
_ZIP64_LOCATOR = b"PK\x06\x07"
_ZIP64_LOCATOR_SIZE = 20
_ZIP64_END = b"PK\x06\x06"
_ZIP64_END_SIZE = 56
_ZIP64_END_MOST = 1 << 16  # its extensible data, which no writer we read uses
_ENTRY = b"PK\x01\x02"
_ENTRY_SIZE = 46
_LOCAL = b"PK\x03\x04"
_LOCAL_SIZE = 30
_U16, _U32 = 0xFFFF, 0xFFFFFFFF  # "see the zip64 record / extra field"
_DEFLATE_MOST = 1032  # deflate makes at most 1032 bytes of one (a run of 258 from 2 bits)
_ENCRYPTED = 0x0001 | 0x0040
_DESCRIPTOR = 0x0008  # crc and sizes follow the data, the local header has zeros
_UTF8 = 0x0800
_NAMES = ("cp437", "utf-8")  # a name's encoding, without and with the UTF-8 flag
_KEPT_PROBLEMS = 100
_SHOWN_PROBLEMS = 4
_HEAD_CHUNK = 1 << 16


class ZipError(FormatError):
    """A zip archive that the one zip reader refuses (``problems``: every reason found, the
    first 100 of ``count``), or a member of one that does not read back as its entry says."""

    def __init__(
        self, path: str, problems: Sequence[str], what: str = "zip archive", count: int = 0
    ) -> None:
        self.path = path
        self.problems = tuple(problems)
        self.what = what
        self.count = max(count, len(self.problems))
        more = self.count - min(len(self.problems), _SHOWN_PROBLEMS)
        shown = "; ".join(self.problems[:_SHOWN_PROBLEMS]) + (f"; and {more} more" if more else "")
        super().__init__(
            f"{path}: not a readable {what}: {shown}. The archive is cut, corrupt or made to "
            "exhaust its reader; it is not read."
        )

    def __reduce__(self) -> tuple[type[ZipError], tuple[str, tuple[str, ...], str, int]]:
        return type(self), (self.path, self.problems, self.what, self.count)


@dataclass(frozen=True, slots=True)
class ZipEntry:
    """One member of a checked archive: its ``name``, ``method`` (:data:`STORED` or
    :data:`DEFLATED`), ``crc``, ``compressed`` bytes at ``data`` (after its local header at
    ``header``) and ``size`` once inflated."""

    name: str
    method: int
    crc: int
    compressed: int
    size: int
    header: int
    data: int

    @property
    def end(self) -> int:
        """Where its data ends in the file."""
        return self.data + self.compressed


@dataclass(frozen=True)
class _Directory:
    start: int  # of the central directory
    length: int
    count: int
    end: int  # of the end record
    records: bytes  # the bytes [start, end + 22) as checked, the comment's length set to 0


class ZipArchive:
    """A zip archive whose central directory and local headers passed every check of
    :func:`zip_archive`: ``entries`` in the directory's order, each member read only when asked
    (:meth:`read`, :meth:`head`), never beyond its declared size. Valid while its file is open.
    """

    def __init__(
        self,
        f: io.BufferedReader,
        path: str,
        what: str,
        directory: _Directory,
        entries: Sequence[ZipEntry],
    ) -> None:
        self._f = f
        self.path = path
        self.what = what
        self._directory = directory
        self.entries = tuple(entries)
        self._by_name = {e.name: e for e in self.entries}
        self._pinned: list[tuple[int, bytes]] = []

    def names(self) -> list[str]:
        """The members' names, in the central directory's order."""
        return [e.name for e in self.entries]

    def get(self, name: str) -> ZipEntry | None:
        """The member ``name``, or None."""
        return self._by_name.get(name)

    def entry(self, name: str) -> ZipEntry:
        """The member ``name`` (a :class:`ZipError` where there is none)."""
        entry = self._by_name.get(name)
        if entry is None:
            raise ZipError(self.path, [f"it holds no member {quote(name)}"], self.what)
        return entry

    def read(self, entry: ZipEntry, *, pin: bool = False) -> bytearray:
        """The bytes of ``entry``, inflated to exactly its declared size and checked against its
        CRC (:class:`ZipError` otherwise). ``pin``: what was read (local header and data) is also
        what :meth:`view` shows of it, whatever the file holds by then."""
        start = entry.header if pin else entry.data
        raw = bytearray(entry.end - start)
        self._f.seek(start)
        if _readinto(self._f, raw, self.path) != len(raw):
            raise self._error(entry, "ends early: the file is shorter than when it was checked")
        if pin:
            self._pinned.append((start, bytes(raw)))
            raw = raw[entry.data - start :]
        data = raw if entry.method == STORED else self._inflate(entry, raw)
        if zlib.crc32(data) != entry.crc:
            raise self._error(entry, "fails its CRC check: its bytes are not the ones written")
        return data

    def head(self, entry: ZipEntry, count: int) -> bytes:
        """The first ``count`` bytes of ``entry`` (all of a shorter one), inflating no more."""
        want = min(count, entry.size)
        if entry.method == STORED:
            return read_at(self._f, entry.data, want)
        inflater = zlib.decompressobj(-15)
        out = bytearray()
        pos, end = entry.data, entry.end
        while len(out) < want and not inflater.eof:
            data = inflater.unconsumed_tail
            if not data:
                data = read_at(self._f, pos, min(_HEAD_CHUNK, end - pos))
                pos += len(data)
                if not data:
                    break
            try:
                out += inflater.decompress(data, want - len(out))
            except zlib.error as err:
                raise self._error(entry, f"is no deflate stream ({err})") from None
        return bytes(out)

    def view(self) -> io.RawIOBase:
        """The archive as it was checked, for a reader of its own (``torch.load``): the file up
        to its end record, whose comment is left out, with the central directory, the end
        records and every pinned member served from what was checked (see :func:`pinned`)."""
        d = self._directory
        return pinned(self._f, d.end + _END_SIZE, [(d.start, d.records), *self._pinned])

    def _inflate(self, entry: ZipEntry, raw: bytearray) -> bytearray:
        inflater = zlib.decompressobj(-15)
        try:
            out = inflater.decompress(raw, entry.size + 1)  # never more than it declares
        except zlib.error as err:
            raise self._error(entry, f"is no deflate stream ({err})") from None
        if len(out) > entry.size:
            raise self._error(entry, f"inflates to more than the {entry.size} bytes it declares")
        if not inflater.eof or len(out) != entry.size:
            raise self._error(entry, f"inflates to {len(out)} bytes, not the {entry.size} declared")
        return bytearray(out)

    def _error(self, entry: ZipEntry, why: str) -> ZipError:
        return ZipError(self.path, [f"member {quote(entry.name)} {why}"], self.what)


@contextlib.contextmanager
def open_zip(path: str | os.PathLike[str], what: str = "zip archive") -> Iterator[ZipArchive]:
    """The regular file ``path`` (:func:`open_regular`) as a checked :class:`ZipArchive`
    (:func:`zip_archive`); closed when the block ends."""
    with open_regular(path) as f:
        yield zip_archive(f, what)


def zip_archive(f: io.BufferedReader, what: str = "zip archive") -> ZipArchive:
    """The open file ``f`` as a zip archive, checked before anything of it is inflated; a
    :class:`ZipError` saying that it is no readable ``what`` lists every problem found.

    From the end record, the zip64 end record (whose values must agree with the end record's)
    and the central directory: at most :data:`MAX_ZIP_ENTRIES` entries in a directory of at most
    :data:`MAX_ZIP_DIRECTORY` bytes that ends where the (zip64) end record begins; one disk; no
    encryption; stored or deflated members only, each with the zip64 fields it needs; no name
    twice. From each entry's local header: it is where the entry says, names the same member
    with the same method (and, without a data descriptor, the same sizes and CRC); its data ends
    before the central directory, and no two members' local header and data overlap. Sizes: a
    stored member's data is its size; a deflated member declares no more than deflate can make
    of its bytes, and no more than :data:`MAX_ZIP_RATIO` times them plus
    :data:`ZIP_RATIO_GRACE`, alone and all deflated members together.
    """
    size = size_of(f)
    path = _name_of(f)
    archive = _checked_zip(f, size, path, what)
    if archive is None:
        raise ZipError(
            path,
            [
                "it has no end record where a zip archive ends, or that record points outside "
                "the file (the file is cut, or is no zip archive)"
            ],
            what,
        )
    return archive


def pinned(f: io.BufferedReader, length: int, patches: Sequence[tuple[int, bytes]]) -> io.RawIOBase:
    """A read-only view of the first ``length`` bytes of the open file ``f`` in which each
    ``(offset, data)`` of ``patches`` is served from ``data``: what another reader (``torch.load``)
    reads of the checked parts of a file is then what was checked, even if the file changes
    underneath. It reads with ``pread`` (``f``'s position is left alone) and lives as long as
    ``f`` is open; it has no ``fileno``, so nothing reads the file behind it."""
    return _Pinned(f.fileno(), length, sorted(patches), _name_of(f))


class _Pinned(io.RawIOBase):
    def __init__(self, fd: int, length: int, patches: list[tuple[int, bytes]], path: str) -> None:
        super().__init__()
        self._fd = fd
        self._length = length
        self._patches = patches
        self._path = path
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._length}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        start = self._pos
        want = max(0, min(len(view), self._length - start))
        got = 0
        try:
            while got < want:
                n = _pread_into(self._fd, view[got:want], start + got)
                if not n:
                    break
                got += n
        except OSError as err:
            raise FileAccessError.from_os_error(err, self._path) from err
        for offset, data in self._patches:
            low, high = max(offset, start), min(offset + len(data), start + got)
            if low < high:
                view[low - start : high - start] = data[low - offset : high - offset]
        self._pos = start + got
        return got


def _pread_into(fd: int, view: memoryview, offset: int) -> int:
    """Read into ``view`` from ``offset`` of ``fd``: straight into it where the system can (a
    storage of gigabytes is not held twice), else through a copy."""
    if hasattr(os, "preadv"):
        return os.preadv(fd, [view], offset)
    data = os.pread(fd, len(view), offset)
    view[: len(data)] = data
    return len(data)


def _checked_zip(f: io.BufferedReader, size: int, path: str, what: str) -> ZipArchive | None:
    """The checked archive, or None where no end record shows one (:func:`sniff`: unknown)."""
    directory = _directory(f, size, path, what)
    if directory is None:
        return None
    return ZipArchive(f, path, what, directory, _ZipCheck(f, path, what, directory).run())


def _directory(f: io.BufferedReader, size: int, path: str, what: str) -> _Directory | None:
    """Where the central directory is, checked, from the end record (and zip64's); None where
    there is no end record or the directory would lie outside the file."""
    end = _find_end(f, size)
    if end is None:
        return None
    disk, start_disk, here, count, length, start = struct.unpack_from(
        "<4xHHHHII", read_at(f, end, _END_SIZE)
    )
    problems = [] if disk == start_disk == 0 and here == count else ["it spans several disks"]
    stop = end  # where the directory must end
    locator = read_at(f, end - _ZIP64_LOCATOR_SIZE, _ZIP64_LOCATOR_SIZE) if end >= 20 else b""
    if locator.startswith(_ZIP64_LOCATOR):
        zip64 = _zip64_directory(f, end, locator, (count, length, start), problems)
        if zip64 is None:
            return None
        stop, count, length, start = zip64
    elif count == _U16 or _U32 in (length, start):
        return None
    if start + length > stop:
        return None
    if start + length < stop:
        problems.append(
            f"{stop - start - length} bytes lie between its central directory and its end "
            "record (its offsets would be read differently by different readers)"
        )
    if count > MAX_ZIP_ENTRIES or length > MAX_ZIP_DIRECTORY:
        problems.append(
            f"it lists {count} entries in {length} bytes; at most {MAX_ZIP_ENTRIES} entries in "
            f"{MAX_ZIP_DIRECTORY >> 20} MiB are read"
        )
    if count * _ENTRY_SIZE > length:
        problems.append(f"{count} entries cannot fit in a central directory of {length} bytes")
    if problems:
        raise ZipError(path, problems, what)
    records = bytearray(read_at(f, start, end + _END_SIZE - start))
    records[-2:] = b"\0\0"  # no comment: where the end record is can then not be read otherwise
    return _Directory(start, length, count, end, bytes(records))


def _find_end(f: io.BufferedReader, size: int) -> int | None:
    """Where the end record is: the last one whose comment reaches exactly to the end."""
    tail_start = max(0, size - _END_SEARCH)
    tail = read_at(f, tail_start, size - tail_start)
    pos = tail.rfind(_END)
    while pos >= 0:
        if pos + _END_SIZE <= len(tail):
            (comment,) = struct.unpack_from("<H", tail, pos + 20)
            if pos + _END_SIZE + comment == len(tail):
                return tail_start + pos
        pos = tail.rfind(_END, 0, pos)
    return None


def _zip64_directory(
    f: io.BufferedReader,
    end: int,
    locator: bytes,
    short: tuple[int, int, int],
    problems: list[str],
) -> tuple[int, int, int, int] | None:
    """(where the zip64 end record is, entry count, directory length, directory offset) from
    the zip64 end record that ``locator`` points at; the end record's own values (``short``)
    must be the escape value or the same. None where there is no such record."""
    disk, record, disks = struct.unpack_from("<4xIQI", locator)
    locator_at = end - _ZIP64_LOCATOR_SIZE
    if record + _ZIP64_END_SIZE > locator_at:
        return None
    data = read_at(f, record, _ZIP64_END_SIZE)
    if not data.startswith(_ZIP64_END):
        return None
    rest, disk64, start_disk, here, count, length, start = struct.unpack_from("<4xQ4xIIQQQQ", data)
    if disk or disks > 1 or disk64 or start_disk or here != count:
        problems.append("it spans several disks")
    if record + 12 + rest != locator_at or rest > _ZIP64_END_MOST:
        problems.append(
            f"its zip64 end record at byte {record} says it is {12 + rest} bytes, but the "
            f"locator follows {locator_at - record} bytes after it"
        )
    for what, value, wide, escape in zip(
        ("entry count", "directory size", "directory offset"),
        short,
        (count, length, start),
        (_U16, _U32, _U32),
    ):
        if value not in (escape, wide):
            problems.append(f"its end record says {what} {value}, its zip64 end record {wide}")
    return record, count, length, start


class _ZipCheck:
    """Every check of one archive's entries, problems gathered to be raised together."""

    def __init__(self, f: io.BufferedReader, path: str, what: str, directory: _Directory) -> None:
        self.f = f
        self.path = path
        self.what = what
        self.d = directory
        self.problems: tuple[list[str], list[str]] = ([], [])  # the telling ones first
        self.count = 0

    def problem(self, text: str, *, first: bool = False) -> None:
        """Note a problem; ``first``: one that says what the archive does (members read twice),
        shown before the rest."""
        self.count += 1
        kept = self.problems[0 if first else 1]
        if len(kept) < _KEPT_PROBLEMS:
            kept.append(text)

    def member(self, name: str, why: str) -> None:
        self.problem(f"member {quote(name)} {why}")

    def header(self, name: str, offset: int, why: str) -> None:
        self.member(name, f"has the local header at byte {offset}, which {why}")

    def run(self) -> list[ZipEntry]:
        entries: list[ZipEntry] = []
        seen: set[str] = set()
        pos = 0
        for i in range(self.d.count):
            entry, pos = self.central(i, pos)
            if entry is None:
                continue
            if entry.name in seen:
                self.problem(f"the name {quote(entry.name)} is listed twice", first=True)
            seen.add(entry.name)
            entries.append(entry)
        if pos != self.d.length:
            self.problem(
                f"its central directory holds {self.d.length - pos} bytes after its entries"
            )
        self.overlaps(entries)
        self.total(entries)
        if self.count:
            kept = [*self.problems[0], *self.problems[1]][:_KEPT_PROBLEMS]
            raise ZipError(self.path, kept, self.what, self.count)
        return entries

    def central(self, i: int, pos: int) -> tuple[ZipEntry | None, int]:
        """The entry at ``pos`` of the directory, and where the next one starts."""
        buf = self.d.records
        fields = None
        if buf.startswith(_ENTRY, pos) and pos + _ENTRY_SIZE <= self.d.length:
            fields = struct.unpack_from("<8xHH4xIIIHHHH6xI", buf, pos)
        after = pos + _ENTRY_SIZE + (sum(fields[5:8]) if fields else 0)
        if fields is None or after > self.d.length:
            raise ZipError(
                self.path,
                [f"its central directory entry {i} (byte {self.d.start + pos}) is no whole entry"],
                self.what,
            )
        flags, method, crc, compressed, size, name_size, extra_size, _, disk, offset = fields
        raw_name = buf[pos + _ENTRY_SIZE : pos + _ENTRY_SIZE + name_size]
        extra = buf[pos + _ENTRY_SIZE + name_size : pos + _ENTRY_SIZE + name_size + extra_size]
        try:  # ASCII, the names torch and NumPy write, reads the same in both encodings
            name = raw_name.decode("ascii" if raw_name.isascii() else _NAMES[bool(flags & _UTF8)])
        except UnicodeDecodeError:
            self.problem(f"the name {quote(raw_name)} is not the UTF-8 its entry says")
            return None, after
        if _U32 in (size, compressed, offset):
            wide = [v == _U32 for v in (size, compressed, offset)]
            values = _zip64_extra(extra, sum(wide))
            if values is None:
                self.member(name, "lacks the zip64 sizes its entry refers to")
                return None, after
            given = iter(values)
            size, compressed, offset = (
                next(given) if w else v for w, v in zip(wide, (size, compressed, offset))
            )
        why = ""
        if flags & _ENCRYPTED:
            why = "is encrypted"
        elif disk:
            why = f"starts on disk {disk}"
        elif method not in (STORED, DEFLATED):
            why = f"is compressed with method {method}"
        if why:
            self.member(name, f"{why}; only stored and deflated members are read")
            return None, after
        data = self.local(name, raw_name, method, (crc, compressed, size), offset)
        if data is None:
            return None, after
        entry = ZipEntry(name, method, crc, compressed, size, offset, data)
        self.sizes(entry)
        return entry, after

    def local(
        self, name: str, raw_name: bytes, method: int, central: tuple[int, int, int], offset: int
    ) -> int | None:
        """Where the data of the member whose local header is at ``offset`` starts, or None
        (a problem said) where that header is not the entry's."""
        if offset + _LOCAL_SIZE + len(raw_name) > self.d.start:
            self.header(name, offset, "runs into the central directory")
            return None
        header = read_at(self.f, offset, _LOCAL_SIZE + len(raw_name))
        signature, flags, local_method, *local, name_size, extra_size = struct.unpack_from(
            "<4s2xHH4xIIIHH", header
        )
        if signature != _LOCAL:
            self.header(name, offset, "is no local header")
            return None
        if header[_LOCAL_SIZE:] != raw_name or name_size != len(raw_name):
            self.header(name, offset, "names another member")
        if local_method != method:
            self.header(name, offset, f"says compression method {local_method}, not {method}")
        if not flags & _DESCRIPTOR and _U32 not in local and tuple(local) != central:
            self.header(name, offset, f"says CRC and sizes {tuple(local)}, not {central}")
        data: int = offset + _LOCAL_SIZE + name_size + extra_size
        if data + central[1] > self.d.start:
            self.member(
                name,
                f"has its {central[1]} bytes from byte {data} run into the central directory "
                f"at byte {self.d.start}",
            )
            return None
        return data

    def sizes(self, entry: ZipEntry) -> None:
        size, compressed = entry.size, entry.compressed
        if entry.method == STORED and size != compressed:
            self.member(entry.name, f"is stored, but its entry says {compressed} bytes hold {size}")
        elif entry.method == DEFLATED and size > _DEFLATE_MOST * compressed:
            self.member(
                entry.name,
                f"claims {size} bytes from {compressed} deflated, more than deflate makes of them",
            )
        elif entry.method == DEFLATED and size > _inflate_bound(compressed):
            self.member(
                entry.name,
                f"inflates {compressed} bytes to {size}, a ratio of {size // compressed}:1; at "
                f"most {MAX_ZIP_RATIO}:1 beyond the first {ZIP_RATIO_GRACE >> 20} MiB is read",
            )

    def overlaps(self, entries: list[ZipEntry]) -> None:
        """Members whose local header and data share bytes: a member read twice (a zip bomb's
        trick) or a header read as data."""
        reach: ZipEntry | None = None
        for entry in sorted(entries, key=lambda e: (e.header, e.end)):
            if reach is not None and entry.header < reach.end:
                self.problem(
                    f"members {quote(reach.name)} (bytes {reach.header}-{reach.end}) and "
                    f"{quote(entry.name)} (bytes {entry.header}-{entry.end}) overlap",
                    first=True,
                )
            if reach is None or entry.end > reach.end:
                reach = entry

    def total(self, entries: list[ZipEntry]) -> None:
        deflated = [e for e in entries if e.method == DEFLATED]
        size = sum(e.size for e in deflated)
        compressed = sum(e.compressed for e in deflated)
        if size > _inflate_bound(compressed):
            self.problem(
                f"its {len(deflated)} deflated members inflate {compressed} bytes to {size} in "
                f"all; at most {MAX_ZIP_RATIO} times their bytes plus "
                f"{ZIP_RATIO_GRACE >> 20} MiB is read"
            )


def _inflate_bound(compressed: int) -> int:
    return MAX_ZIP_RATIO * compressed + ZIP_RATIO_GRACE


def _zip64_extra(extra: bytes, count: int) -> tuple[int, ...] | None:
    """The first ``count`` 8-byte values of the zip64 extra field (id 1) in ``extra``."""
    pos = 0
    while pos + 4 <= len(extra):
        tag, length = struct.unpack_from("<HH", extra, pos)
        if tag == 1:
            if length < 8 * count or pos + 4 + length > len(extra):
                return None
            return struct.unpack_from(f"<{count}Q", extra, pos + 4)
        pos += 4 + length
    return None


def _zip_kind(f: io.BufferedReader, size: int) -> str:
    archive = _checked_zip(f, size, _name_of(f), "zip archive")
    if archive is None:
        return UNKNOWN
    names = archive.names()
    if names and all(n.endswith(".npy") for n in names):
        return NPZ
    inside = [n.split("/", 1)[1] for n in names if "/" in n]
    if any(n == "constants.pkl" or n.startswith("code/") for n in inside):
        return TORCHSCRIPT
    return TORCH_ZIP if "data.pkl" in inside else ZIP


# -- JSON: the one bounded loader ------------------------------------------------------------------

#: The deepest nesting of arrays and objects :func:`load_json` accepts. The files read hold far
#: less (a Keras config about 10 levels, 3 more per model nested in a model; a safetensors header
#: 3); Python's parser recurses once per level and its recursion limit (1000 by default) is
#: shared with the caller's stack, which this leaves room for.
MAX_JSON_DEPTH: Final = 200

# Brackets as signed steps (+1 in, -1 out); every other byte deleted.
_JSON_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_JSON_OTHER = bytes(b for b in range(256) if b not in b"[]{}")
_JSON_BLOCK = 1 << 16  # bytes scanned at a time: what one block's pieces take is bounded


def json_depth(text: bytes) -> int:
    """How deep the arrays and objects of the JSON text ``text`` (UTF-8) nest, in one linear
    pass that skips strings (a bracket in one does not count).

    Escapes go first: each escaped backslash (``\\\\``), then each escaped quote (``\\"``, which
    ends no string); then, block by block, the quotes split the text into what is outside
    strings and inside them (the rest of the text, after an unterminated one), and the brackets
    outside are counted in and out. Memory: one copy of ``text`` where it holds a backslash,
    and a bounded block's pieces.

    >>> json_depth(b'{"a": [[1], "]]]["], "b": {}}')
    3
    """
    if b"\\" in text:
        text = text.replace(b"\\\\", b"").replace(b'\\"', b"")
    inside = False  # in a string at the start of the block
    depth = deepest = 0
    for start in range(0, len(text), _JSON_BLOCK):
        pieces = text[start : start + _JSON_BLOCK].split(b'"')
        outside = b"".join(pieces[1::2] if inside else pieces[0::2])
        inside ^= len(pieces) % 2 == 0  # an odd number of quotes
        steps = array.array("b", outside.translate(_JSON_STEPS, _JSON_OTHER))
        if steps:
            deepest = max(deepest, max(itertools.accumulate(steps, initial=depth)))
            depth += sum(steps)
    return deepest


def load_json(
    data: bytes | bytearray | memoryview | str,
    fail: Callable[[str], Exception],
    *,
    max_size: int | None = None,
    max_depth: int = MAX_JSON_DEPTH,
) -> Any:
    """The JSON document ``data`` (UTF-8 bytes, or text), checked before it is parsed: at most
    ``max_size`` bytes (None: no bound), nesting at most ``max_depth`` arrays and objects deep
    (:func:`json_depth`: linear time, a few copies of ``data`` at most in memory).

    Any problem raises ``fail(reason)``, the reader's own error naming its file, where
    ``reason`` follows the document's name: ``"is N bytes, more than the M read"``, ``"nests
    too deeply: D levels of arrays and objects, more than the B read"``, ``"is not JSON
    (...)"`` (UTF-8 errors included). Never a ``RecursionError``.
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if max_size is not None and len(raw) > max_size:
        raise fail(f"is {len(raw)} bytes, more than the {max_size} read")
    depth = json_depth(raw)
    if depth > max_depth:
        raise fail(
            f"nests too deeply: {depth} levels of arrays and objects, more than the {max_depth} "
            "read"
        )
    try:
        text = data if isinstance(data, str) else raw.decode("utf-8")
        return json.loads(text)
    except UnicodeDecodeError as err:
        raise fail(f"is not JSON (not UTF-8: {err.reason} at byte {err.start})") from None
    except RecursionError:  # a caller already deep in its own stack
        raise fail(f"nests too deeply for the stack left ({depth} levels)") from None
    except ValueError as err:  # JSONDecodeError; an integer of too many digits
        raise fail(f"is not JSON ({clip(first_line(err))})") from None


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
    data = read_at(f, pos, 10)
    value = 0
    for i, byte in enumerate(data):
        value |= (byte & 0x7F) << (7 * i)
        if byte < 0x80:
            return value, pos + i + 1
    return None
