"""Opening a file safely, reading it at an offset, and the base of every format error.

Every reader of the package opens its files with :func:`open_regular`, which opens only a regular
file: a FIFO would block the reader, a device never end, a directory is no file. The file is looked
at (``stat``) before it is opened, opened non-blocking in case it was swapped for a FIFO since,
and looked at again once open (``fstat``), where a size bound given by the caller is checked too.
:func:`regular_size` is the same look for a file that a library opens later. A path that cannot be
looked at or opened (nothing there, a symbolic link loop, a name too long, no permission) is a
:class:`FileAccessError`: the ``OSError`` it was (``FileNotFoundError``...), and a
``CudnnRNNError`` whose message names the path and says what to do; so is an error reading an
open file (:func:`read_at`, :func:`size_of`).

:func:`pinned` hands another reader (``torch.load``) a file with the parts that were checked
served from what was checked, so that what it reads is what was checked even if the file
changes underneath.

:class:`FormatError` is the base of every format error (a ``ValueError``, as they always were);
:class:`NotRegularFile` and :class:`FileTooLarge` are the refusals of a path before its content
is read. Standard library only: of the package, only :mod:`cudnn_rnn.errors`.
"""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Callable, Sequence
from typing import Any

from cudnn_rnn.errors import CudnnRNNError, FileAccessError

__all__ = [
    "FileTooLarge",
    "FormatError",
    "NotRegularFile",
    "name_of",
    "open_regular",
    "pinned",
    "read_at",
    "regular_size",
    "size_of",
    "special_kind",
]


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


# -- opening --------------------------------------------------------------------------------------

_SPECIAL: tuple[tuple[Callable[[int], bool], str], ...] = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)


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


# -- reading an open file ----------------------------------------------------------------------


def read_at(f: io.BufferedReader, offset: int, count: int) -> bytes:
    """At most ``count`` bytes of the open file ``f`` from ``offset`` (fewer at its end); an
    ``OSError`` is a :class:`FileAccessError` naming the file."""
    try:
        f.seek(offset)
        return f.read(count)
    except OSError as err:
        raise FileAccessError.from_os_error(err, name_of(f)) from err


def size_of(f: io.BufferedReader) -> int:
    """The size of the open file ``f`` (``fstat``)."""
    try:
        return os.fstat(f.fileno()).st_size
    except OSError as err:
        raise FileAccessError.from_os_error(err, name_of(f)) from err


def name_of(f: object) -> str:
    """The path of a file :func:`open_regular` opened (what messages name)."""
    name = getattr(f, "name", None)
    return name if isinstance(name, str) else "the file"


# -- what another reader is handed ---------------------------------------------------------------


def pinned(f: io.BufferedReader, length: int, patches: Sequence[tuple[int, bytes]]) -> io.RawIOBase:
    """A read-only view of the first ``length`` bytes of the open file ``f`` in which each
    ``(offset, data)`` of ``patches`` is served from ``data``: what another reader (``torch.load``)
    reads of the checked parts of a file is then what was checked, even if the file changes
    underneath. It reads with ``pread`` (``f``'s position is left alone) and lives as long as
    ``f`` is open; it has no ``fileno``, so nothing reads the file behind it."""
    return _Pinned(f.fileno(), length, sorted(patches), name_of(f))


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
