"""The one bounded zip reader: every zip archive the package reads (torch.save, TorchScript,
``.npz``, a Keras 3 ``.keras`` file, and sniffing) goes through it.

:func:`zip_archive` / :func:`open_zip` check an archive's central directory, end records and
local headers against the file before any member is inflated (entry count, sizes against the
file, compression ratio, overlapping or duplicate members, zip64 consistency; every problem in
one :class:`ZipError`), and a member is then inflated to exactly its declared size, never more
(:meth:`ZipArchive.read`, :meth:`ZipArchive.head`). :meth:`ZipArchive.view` hands another
reader (``torch.load``) the archive with its checked parts served from what was checked
(:func:`~cudnn_rnn.io.files.opening.pinned`). :func:`checked_zip` is the same check for a
caller to whom a file with no end record is no error (sniffing: ``unknown``).

The bounds: at most :data:`MAX_ZIP_ENTRIES` entries in a central directory of at most
:data:`MAX_ZIP_DIRECTORY` bytes; deflated members inflate to at most :data:`MAX_ZIP_RATIO`
times their bytes plus :data:`ZIP_RATIO_GRACE`, each and all together. Standard library only.
"""

from __future__ import annotations

import contextlib
import io
import os
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from cudnn_rnn.errors import FileAccessError
from cudnn_rnn.io.files.escaping import quote
from cudnn_rnn.io.files.opening import FormatError, name_of, open_regular, pinned, read_at, size_of

__all__ = [
    "DEFLATED",
    "MAX_ZIP_DIRECTORY",
    "MAX_ZIP_ENTRIES",
    "MAX_ZIP_RATIO",
    "STORED",
    "ZIP_RATIO_GRACE",
    "ZipArchive",
    "ZipEntry",
    "ZipError",
    "checked_zip",
    "open_zip",
    "zip_archive",
]

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
    archive = checked_zip(f, what)
    if archive is None:
        raise ZipError(
            name_of(f),
            [
                "it has no end record where a zip archive ends, or that record points outside "
                "the file (the file is cut, or is no zip archive)"
            ],
            what,
        )
    return archive


def checked_zip(f: io.BufferedReader, what: str = "zip archive") -> ZipArchive | None:
    """The open file ``f`` checked as :func:`zip_archive` checks it, or None where no end record
    shows a zip archive (:func:`~cudnn_rnn.io.files.sniffing.sniff`: unknown, not an error)."""
    path = name_of(f)
    directory = _directory(f, size_of(f), path, what)
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


def _readinto(f: io.BufferedReader, buffer: bytearray, path: str) -> int:
    try:
        return f.readinto(buffer)
    except OSError as err:
        raise FileAccessError.from_os_error(err, path) from err
