"""Pickled objects of any kind, read without importing, calling or running anything they name:
torch.save files that pickle more than tensors (Lightning checkpoints, ``torch.save(model)``,
optimizer state beside the weights, lists of state_dicts) and plain pickles (``pickle.dump`` of a
dict of NumPy arrays, a ``.pkl``), and every tensor inside them, named by its path.

Three kinds of file are read, each checked before a byte of it is unpickled:

================  ===========================================================================
kind              what is read
================  ===========================================================================
torch_zip         ``ROOT/data.pkl`` of the archive (the folder of its first member, as torch
                  reads it), through the one zip reader (:func:`cudnn_rnn.io.files.zip_archive`);
                  storages are the members ``ROOT/data/KEY``, read only when a tensor on them
                  is asked for; ``ROOT/byteorder`` must be this machine's
torch_pickle      a legacy torch.save file: five pickles (magic number, protocol 1001, system
                  info, the object, its storages' keys; at most 64 MiB in all), then each
                  storage as an int64 element count and its bytes; the counts are checked
                  against what the object claims and the file's size, the bytes read when asked
pickle            a plain pickle of any protocol (the file's first one), at most
                  :data:`MAX_PLAIN_PICKLE_BYTES`; its data is inside it
================  ===========================================================================

Every pickle is first walked by the bounded pickle reader (:func:`cudnn_rnn.io.pickles.check`),
then unpickled with a ``find_class`` that never imports a module and never hands the pickle
anything of the interpreter's (:mod:`cudnn_rnn.io.torch.unpickling`: every global it names
becomes an inert record, a few are honoured by small functions that build plain data, and all
that is rebuilt is charged to the read's one budget); a legacy file's format is
:mod:`cudnn_rnn.io.torch.legacy`. Then :class:`~cudnn_rnn.io.torch.contents.Pickled` names
every tensor by its path (:mod:`cudnn_rnn.io.torch.contents`); a RecursionError from anywhere in
a read becomes a :class:`TorchFileError` naming the file.
The RNNs among the names are then found as in any state_dict
(:func:`cudnn_rnn.io.torch.state.find_groups`).

Bounds: the pickles as above; listing reads no storage; :meth:`Pickled.read` reads each storage
of the tensors asked for once and copies each tensor once. A plain pickle is held whole with
the bytes objects made from it: at most about twice the file. What is rebuilt: the budget
above. What pickle's unpickler makes of the opcodes themselves: a few hundred bytes an opcode
at most (an empty set, 232 bytes, is the largest object one opcode makes), at most
:data:`~cudnn_rnn.io.pickles.MAX_PICKLE_OPCODES` opcodes.

>>> import os, pickle, tempfile, numpy as np
>>> path = os.path.join(tempfile.mkdtemp(), "arrays.pkl")
>>> with open(path, "wb") as f:
...     pickle.dump({"rnn.weight_ih_l0": np.ones((8, 3), np.float32), "step": 3}, f)
>>> with open_pickled(path, "pickle") as pickled:
...     pickled.shapes(), pickled.read(["rnn.weight_ih_l0"])["rnn.weight_ih_l0"].dtype
({'rnn.weight_ih_l0': ((8, 3), 'float32')}, torch.float32)
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable, Iterator
from typing import Any, Final

from cudnn_rnn.errors import FileAccessError
from cudnn_rnn.io import pickles
from cudnn_rnn.io.files.escaping import quote
from cudnn_rnn.io.files.opening import FormatError, open_regular, read_at, size_of
from cudnn_rnn.io.files.sniffing import PICKLE, TORCH_PICKLE, TORCH_ZIP
from cudnn_rnn.io.files.zip_reader import ZipArchive, ZipEntry, zip_archive
from cudnn_rnn.io.torch.contents import (
    MAX_DEPTH,
    MAX_NAME,
    MAX_NAME_CHARACTERS,
    MAX_TENSORS,
    Pickled,
    PickledModule,
)
from cudnn_rnn.io.torch.legacy import _legacy_bytes, _legacy_file
from cudnn_rnn.io.torch.state import TorchFileError
from cudnn_rnn.io.torch.torchscript import _Refused, _said, _Storage
from cudnn_rnn.io.torch.unpickling import Opaque, _Called, _storage_id, _unknown_id, _Unpickler

__all__ = [
    "MAX_DEPTH",
    "MAX_NAME",
    "MAX_NAME_CHARACTERS",
    "MAX_PLAIN_PICKLE_BYTES",
    "MAX_TENSORS",
    "Opaque",
    "Pickled",
    "PickledModule",
    "data_pkl",
    "open_pickled",
]

#: The largest plain pickle read (it is held whole: its data is inside it).
MAX_PLAIN_PICKLE_BYTES: Final = 1 << 31
_MAX_CLASSES = 100_000


# -- the read ------------------------------------------------------------------------------


class _Context:
    """The read's :class:`~cudnn_rnn.io.torch.unpickling.Context`, what one file's pickles
    share: the record classes made, where each storage's bytes are (key -> a reader of exactly
    its bytes), and the one budget of what is rebuilt (:class:`cudnn_rnn.io.pickles.Budget`:
    :meth:`allow` counts a pickle read, every honoured global, record and nested pickle
    :meth:`charge` what it makes)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.classes: dict[tuple[str, str], type[Opaque]] = {}
        self.storages: dict[str, Callable[[], bytearray]] = {}
        self.budget = pickles.Budget()
        self.called: type[_Called] = type("Opaque", (_Called,), {"__slots__": (), "context": self})
        self._nested = 0

    def allow(self, pickled: int) -> None:
        """Count ``pickled`` bytes of the file's pickles read."""
        self.budget.allow(pickled)

    def charge(self, made: int) -> None:
        """Count ``made`` bytes rebuilt (:attr:`cudnn_rnn.io.pickles.Budget.Exceeded` past the
        budget)."""
        self.budget.charge(made)

    def opaque_class(self, module: str, name: str) -> type[Opaque]:
        cls = self.classes.get((module, name))
        if cls is None:
            if len(self.classes) >= _MAX_CLASSES:
                raise _Refused(f"more than {_MAX_CLASSES} classes")
            cls = type(
                "Opaque",
                (Opaque,),
                {"__slots__": (), "module": module, "name": name, "context": self},
            )
            self.classes[(module, name)] = cls
        return cls

    def nested(self, data: bytes | bytearray) -> Any:
        """The object of the legacy torch.save file ``data`` (a storage, for
        ``_load_from_bytes``), its storages' keys kept apart from every other's."""
        self._nested += 1
        return _legacy_bytes(self, data, f"<bytes {self._nested}>/")


# -- the files ------------------------------------------------------------------------------


def data_pkl(path: str, archive: ZipArchive) -> ZipEntry:
    """The member ``ROOT/data.pkl`` of a torch.save archive (``ROOT``: the folder of its first
    member, as torch reads it), at most :data:`cudnn_rnn.io.pickles.MAX_PICKLE_BYTES` once
    inflated; a :class:`TorchFileError` otherwise."""
    first = archive.entries[0].name if archive.entries else ""
    entry = archive.get(f"{first.split('/', 1)[0]}/data.pkl") if "/" in first else None
    if entry is None:
        raise TorchFileError(
            f"{path}: no data.pkl in the folder of its first member {quote(first)}; not a "
            "torch.save archive. Save it with torch.save(module.state_dict(), path)."
        )
    if entry.size > pickles.MAX_PICKLE_BYTES:
        raise TorchFileError(
            f"{path}: member {quote(entry.name)} claims {entry.size} bytes once inflated; at "
            f"most {pickles.MAX_PICKLE_BYTES} are read."
        )
    return entry


def _zip(path: str, f: io.BufferedReader, context: _Context) -> tuple[Any, str]:
    archive = zip_archive(f, "torch file (zip archive)")
    entry = data_pkl(path, archive)
    root = entry.name.removesuffix("data.pkl")
    order = archive.get(f"{root}byteorder")
    if order is not None and (order.size > 16 or archive.read(order).strip() != b"little"):
        raise TorchFileError(
            f"{path}: written on a machine of another byte order; load it there and save "
            "module.state_dict() with torch.save."
        )
    data = archive.read(entry)
    context.allow(len(data))
    claimed: dict[str, _Storage] = {}

    def persistent(pid: Any) -> Any:
        found = _storage_id(pid, 5)
        if found is None:
            return _unknown_id(context)(pid)
        kind, key, numel = found
        storage = _Storage(key, kind.dtype, numel)
        if key in claimed:
            if claimed[key] != storage:
                raise _Refused(f"storage {quote(key)} with two dtypes or sizes")
            return storage
        member = archive.get(f"{root}data/{key}")
        if member is None:
            raise _Refused(f"storage {quote(key)}, which the archive does not hold")
        if member.size != numel * kind.dtype.itemsize:
            raise _Refused(
                f"storage {quote(key)} of {numel} {str(kind.dtype).removeprefix('torch.')} "
                f"elements, whose member holds {member.size} bytes"
            )
        claimed[key] = storage
        context.storages[key] = lambda: archive.read(member)
        return storage

    return _Unpickler(data, entry.name, context, persistent).load(), entry.name


def _plain(path: str, f: io.BufferedReader, context: _Context) -> tuple[Any, str]:
    what = "the pickle"
    data = read_at(f, 0, size_of(f))  # the pickle holds its data: all of it
    context.allow(len(data))
    return _Unpickler(data, what, context, _unknown_id(context)).load(), what


_READERS: dict[str, Callable[[str, io.BufferedReader, _Context], tuple[Any, str]]] = {
    TORCH_ZIP: _zip,
    TORCH_PICKLE: _legacy_file,
    PICKLE: _plain,
}


@contextlib.contextmanager
def open_pickled(path: str | os.PathLike[str], kind: str) -> Iterator[Pickled]:
    """The file ``path`` of ``kind`` (``torch_zip``, ``torch_pickle`` or ``pickle``, as
    :func:`cudnn_rnn.io.files.sniff` tells them) read as the module says; its storages stay
    readable until the block ends. Raises :class:`TorchFileError` naming the file and what it
    asks for that is not read (:class:`~cudnn_rnn.io.files.ZipError` for an archive the zip
    reader refuses, :class:`~cudnn_rnn.io.files.FileTooLarge` for a plain pickle over
    :data:`MAX_PLAIN_PICKLE_BYTES`)."""
    name = os.fspath(path)
    read = _READERS[kind]
    limit = MAX_PLAIN_PICKLE_BYTES if kind == PICKLE else None
    with open_regular(name, max_size=limit) as f:
        context = _Context(name)
        top = _unpickled(name, lambda: read(name, f, context))
        try:
            pickled = Pickled(name, kind, top, context.storages, context.budget)
        except pickles.Budget.Exceeded as err:
            raise _exhausting(name, err) from None
        except RecursionError:  # the last net: every walk of the data is bounded or iterative
            raise _too_deep(name) from None
        yield pickled


def _exhausting(path: str, err: FormatError) -> TorchFileError:
    return TorchFileError(
        f"{path}: {err}; the file is made to exhaust its reader (a pickle calling a function "
        "on one object again and again, or naming one object again and again)."
    )


def _too_deep(path: str) -> TorchFileError:
    return TorchFileError(
        f"{path}: its objects nest too deep to be read; the file is corrupt or made to "
        "exhaust its reader."
    )


def _unpickled(path: str, load: Callable[[], tuple[Any, str]]) -> Any:
    """What ``load`` reads, its failures as one TorchFileError naming ``path``."""
    try:
        return load()[0]
    except pickles.PickleError as err:
        if err.opcode is not None:
            raise TorchFileError(
                f"{path}: {err.what} uses the pickle opcode {err.opcode}, which this reader "
                "does not read (the extension registry and out-of-band buffers are the "
                "process's, not the file's)."
            ) from err
        raise TorchFileError(
            f"{path}: refused before anything is unpickled: {err.what} at byte {err.offset}: "
            f"{err.problem}; the file is corrupt, made to exhaust its reader, or no pickle."
        ) from err
    except pickles.Budget.Exceeded as err:
        raise _exhausting(path, err) from None
    except _Refused as why:
        raise TorchFileError(
            f"{path}: it asks for {why}, which this reader does not rebuild; the file is "
            "corrupt or made to mislead its reader."
        ) from None
    except RecursionError:
        raise _too_deep(path) from None
    except (TorchFileError, FormatError, FileAccessError):
        raise
    except Exception as err:  # a corrupt pickle fails in many ways
        raise TorchFileError(
            f"{path}: not a readable pickle ({type(err).__name__}: {_said(err)}); "
            "the file is corrupt."
        ) from None
