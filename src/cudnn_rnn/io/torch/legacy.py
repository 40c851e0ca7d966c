"""torch's legacy (non-zip) ``torch.save`` format, read without running anything: five pickles
(magic number, protocol 1001, system info, the object, its storages' keys; at most 64 MiB in
all, read 1 MiB first and more as they need), then each storage as an int64 element count and
its bytes, in the order of the keys.

Each pickle is unpickled as :mod:`cudnn_rnn.io.torch.unpickling` says; the object's persistent
ids claim each storage's dtype and element count, and the storages are found by those claims:
each one's count must be the one its data says and its bytes inside the file. A file is refused
that breaks a claim, was written on a machine of another byte order, holds data for a storage
no tensor names or lacks a storage's data, or has a storage of a type whose element size is not
known (so neither is where the storages after it are). Nothing of a storage is read until a
tensor on it is asked for.

The same format is met inside a pickle: ``pickle.dumps`` of a tensor holds its storage as a
legacy file in bytes, which ``torch.storage._load_from_bytes`` rebuilds; the read's
:class:`~cudnn_rnn.io.torch.unpickling.Context` reads it with :func:`_legacy_bytes`, its
storages' keys kept apart from every other's."""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from typing import Any

from cudnn_rnn.errors import FileAccessError
from cudnn_rnn.io import pickles
from cudnn_rnn.io.files.escaping import quote
from cudnn_rnn.io.files.opening import read_at, size_of
from cudnn_rnn.io.pickles import shown
from cudnn_rnn.io.torch.state import TorchFileError
from cudnn_rnn.io.torch.torchscript import _Refused, _Storage
from cudnn_rnn.io.torch.unpickling import (
    _OPCODES,
    Context,
    _storage_id,
    _unknown_id,
    _Unpickler,
)

_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_LEGACY_PROTOCOL = 1001
_LEGACY_PICKLES = 5
_LEGACY_FIRST_READ = 1 << 20


def _plain_value(data: bytes, what: str) -> Any:
    """A pickle of plain values (no global, no persistent id)."""
    return pickles.Unpickler(data, what=what, allowed=_OPCODES).load()


def _legacy(
    context: Context,
    head: bytes,
    ends: list[int],
    size: int,
    read: Callable[[int, int], bytes],
    reader: Callable[[int, int], Callable[[], bytearray]],
    prefix: str,
    what: str,
) -> Any:
    """The object of a legacy torch.save file whose five pickles are ``head[:ends[4]]`` and
    whose storages follow (``read``: bytes of the file; ``reader``: a reader of a storage's)."""
    starts = [0, *ends[:-1]]
    parts = [head[a:b] for a, b in zip(starts, ends)]
    magic, protocol, info = (_plain_value(p, what) for p in parts[:3])
    if magic != _LEGACY_MAGIC or protocol != _LEGACY_PROTOCOL or type(info) is not dict:
        raise _Refused(
            f"a magic number {shown(magic)} and protocol {shown(protocol)}, not those of a "
            "legacy torch.save file"
        )
    if info.get("little_endian") is not (sys.byteorder == "little"):
        raise _Refused("storages of another byte order than this machine's")
    claimed: dict[str, _Storage] = {}
    unknown: dict[str, str] = {}  # key -> the storage type no size is known of

    def persistent(pid: Any) -> Any:
        if type(pid) is tuple and len(pid) == 4 and pid[0] == "module":
            return pid[1]  # torch.nn module classes of old torch.save(model) files
        found = _storage_id(pid, 6)
        if found is None or pid[5] is not None:  # pid[5]: a view of a storage (torch < 0.4)
            if type(pid) is tuple and len(pid) == 6 and type(pid[2]) is str:
                unknown[pid[2]] = shown(pid[1])
            return _unknown_id(context)(pid)
        kind, key, numel = found
        storage = _Storage(prefix + key, kind.dtype, numel)
        if claimed.setdefault(key, storage) != storage:
            raise _Refused(f"storage {quote(key)} with two dtypes or sizes")
        return storage

    top = _Unpickler(parts[3], what, context, persistent).load()
    keys = _plain_value(parts[4], what)
    if type(keys) is not list or not all(type(k) is str for k in keys):
        raise _Refused(f"storage keys {shown(keys)}, not a list of names")
    offset = ends[4]
    for key in keys:
        storage = claimed.pop(key, None)
        if key in unknown and storage is None:
            raise _Refused(
                f"storage {quote(key)} of type {unknown[key]}, whose element size "
                "this reader does not know (so not where the storages after it are)"
            )
        if storage is None:
            raise _Refused(f"data for storage {quote(key)}, which no tensor names")
        count = read(offset, 8)
        nbytes = storage.numel * storage.dtype.itemsize
        if len(count) != 8 or offset + 8 + nbytes > size:
            raise _Refused(
                f"storage {quote(key)} of {nbytes} bytes at byte {offset}, past the end of the "
                f"file ({size} bytes)"
            )
        if int.from_bytes(count, "little", signed=True) != storage.numel:
            raise _Refused(
                f"storage {quote(key)} of {storage.numel} elements, whose data says "
                f"{int.from_bytes(count, 'little', signed=True)}"
            )
        context.storages[storage.key] = reader(offset + 8, nbytes)
        offset += 8 + nbytes
    if claimed:
        raise _Refused(f"storage {quote(next(iter(claimed)))}, whose data the file does not hold")
    return top


def _legacy_file(path: str, f: io.BufferedReader, context: Context) -> tuple[Any, str]:
    """The object of the legacy torch.save file ``f`` (at ``path``), and what messages call
    its pickles."""
    size = size_of(f)
    what = "its pickles"

    def read(offset: int, count: int) -> bytes:
        return read_at(f, offset, count)

    def reader(offset: int, count: int) -> Callable[[], bytearray]:
        return lambda: _read_exact(f, path, offset, count)

    head, ends = _leading_pickles(read, size, what, path)
    context.allow(ends[-1])
    return _legacy(context, head, ends, size, read, reader, "", what), what


def _legacy_bytes(context: Context, data: bytes | bytearray, prefix: str) -> Any:
    """The object of the legacy torch.save file held in ``data`` (a storage pickled in a
    pickle), its storages' keys prefixed with ``prefix``."""
    view = memoryview(data)

    def read(offset: int, count: int) -> bytes:
        return bytes(view[offset : offset + count])

    def reader(offset: int, count: int) -> Callable[[], bytearray]:
        return lambda: bytearray(view[offset : offset + count])

    what = "a pickled storage"
    head, ends = _leading_pickles(read, len(data), what, context.path)
    return _legacy(context, head, ends, len(data), read, reader, prefix, what)


def _leading_pickles(
    read: Callable[[int, int], bytes], size: int, what: str, path: str
) -> tuple[bytes, list[int]]:
    """A legacy torch.save file's five leading pickles (from ``read``, of a file of ``size``
    bytes) and where each ends: read 1 MiB first, then more as they need, up to 64 MiB."""
    most = min(size, pickles.MAX_PICKLE_BYTES)
    want = min(most, _LEGACY_FIRST_READ)
    while True:
        head = read(0, want)
        try:
            return head, pickles.ends(head, what=what, allowed=_OPCODES, count=_LEGACY_PICKLES)
        except pickles.PickleError as err:
            if err.short and want < most:
                want = min(most, 4 * want)
                continue
            if err.short and most < size:
                raise TorchFileError(
                    f"{path}: {what} run past the first {pickles.MAX_PICKLE_BYTES >> 20} MiB, "
                    "which is all that is read; the file is corrupt or made to exhaust its "
                    "reader."
                ) from err
            raise


def _read_exact(f: io.BufferedReader, path: str, offset: int, count: int) -> bytearray:
    buffer = bytearray(count)
    try:
        f.seek(offset)
        got = f.readinto(buffer)
    except OSError as err:
        raise FileAccessError.from_os_error(err, path) from err
    if got != count:
        raise TorchFileError(f"{path}: ends inside a storage; the file is shorter than it was.")
    return buffer
