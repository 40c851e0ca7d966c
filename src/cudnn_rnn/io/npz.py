"""NumPy ``.npz`` archives (``np.savez``, ``np.savez_compressed``): checked reading, and the
documented way in for NumPy arrays, canonical weights.

An archive is a zip of ``NAME.npy`` members, read by the one zip reader
(:func:`cudnn_rnn.io.files.open_zip`: every entry checked against the file before anything is
inflated, each member inflated to exactly its size and checked against its CRC). :func:`open_npz`
then checks every member's ``.npy`` header: a version 1 or 2 header that NumPy's own parser
accepts (at most 10000 bytes, read from the member's first bytes only), and the header plus the
claimed shape's bytes are exactly the member's size. Listing (:meth:`NpzFile.claims`) reads headers
only; :meth:`NpzFile.read` reads the arrays asked for from their checked bytes (never a pickle:
object arrays are refused), each into a contiguous native-endian array.

Two kinds of ``.npz`` describe an RNN:

* **torch names**, as ``np.savez(path, **{k: v.numpy() for k, v in module.state_dict().items()})``
  writes them: listed by :func:`cudnn_rnn.io.torch.file.find_rnns` and loaded by
  ``from_torch(path, prefix=...)`` like a torch.save file.
* **canonical weights**, as ``np.savez(path, *weights, *biases)`` writes the ``(weights,
  biases)`` that ``params_to_canonical`` returns (ours, or TF1's ``CudnnLSTM``'s, in the same
  order): the members ``arr_0 .. arr_{N-1}`` hold no names, so :func:`read_canonical` takes
  the model's spec from the caller and checks every array against it (the layer is built above,
  by :func:`cudnn_rnn.converters.npz.from_numpy_canonical`).

Errors are :class:`~cudnn_rnn.io.torch.state.TorchFileError` (a ``ValueError``) naming the
file, or :class:`~cudnn_rnn.io.files.ZipError` for an archive the zip reader refuses.

>>> import os, tempfile, numpy as np
>>> from cudnn_rnn.core.spec import RNNSpec
>>> spec = RNNSpec("gru", 1, 4, 3)
>>> arrays = [np.full(p.shape, i, np.float32) for i, p in enumerate(layout_of(spec).weights)]
>>> arrays += [np.zeros(p.shape, np.float32) for p in layout_of(spec).biases]
>>> path = os.path.join(tempfile.mkdtemp(), "gru.npz")
>>> np.savez(path, *arrays)
>>> weights, biases = read_canonical(path, spec, "example")
>>> [tuple(w.shape) for w in weights][:2], float(weights[1][0, 0])
([(4, 3), (4, 3)], 1.0)
"""

from __future__ import annotations

import contextlib
import io
import math
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from numpy.lib import format as npy_format

from cudnn_rnn.core.layout import layout_of
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.io.files.escaping import clip, first_line, listed, quote
from cudnn_rnn.io.files.zip_reader import ZipArchive, ZipEntry, open_zip
from cudnn_rnn.io.torch.state import TorchFileError

__all__ = ["FLOAT_DTYPES", "NpzFile", "open_npz", "read_canonical"]

_MAX_HEADER = 10_000
_HEAD = 12 + _MAX_HEADER  # magic, version and header length, then the header
_MAX_DIMS = 64
#: The dtypes canonical arrays may have, by name.
FLOAT_DTYPES = {"float16": torch.float16, "float32": torch.float32, "float64": torch.float64}


@dataclass(frozen=True)
class _Member:
    entry: ZipEntry
    start: int  # where the data begins in the member (after the .npy header)
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    fortran: bool


class NpzFile:
    """An open ``.npz`` archive whose members' entries and headers were checked."""

    def __init__(self, path: str, archive: ZipArchive, members: dict[str, _Member]) -> None:
        self.path = path
        self._zip = archive
        self._members = members

    def claims(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """Array name (the member's, without ``.npy``) -> (shape, dtype name); nothing read."""
        return {n: (m.shape, m.dtype.name) for n, m in self._members.items()}

    def read(self, names: Iterable[str]) -> dict[str, np.ndarray[Any, Any]]:
        """The arrays ``names`` (keys of :meth:`claims`), each contiguous and native-endian."""
        out = {}
        for name in names:
            m = self._members[name]
            if m.dtype.hasobject or m.dtype.kind not in "biufc":
                raise TorchFileError(
                    f"{self.path}: array {quote(name)} has dtype {m.dtype.name}, not a number; "
                    "it is not read."
                )
            raw = self._zip.read(m.entry)  # exactly its size, its CRC checked
            flat = np.frombuffer(raw, dtype=m.dtype, offset=m.start)
            array = flat.reshape(m.shape, order="F" if m.fortran else "C")
            out[name] = np.array(array, dtype=m.dtype.newbyteorder("="), order="C")  # a copy
        return out


@contextlib.contextmanager
def open_npz(path: str | os.PathLike[str]) -> Iterator[NpzFile]:
    """The ``.npz`` archive ``path``, every member checked as the module says
    (:class:`~cudnn_rnn.io.torch.state.TorchFileError` otherwise); closed when the block
    ends. Only a regular file is opened."""
    name = os.fspath(path)
    with open_zip(name, ".npz archive (np.savez)") as archive:
        members = {}
        for entry in archive.entries:
            if not entry.name.endswith(".npy"):
                raise TorchFileError(
                    f"{name}: member {quote(entry.name)} is no .npy array; not an .npz "
                    "archive as np.savez writes it."
                )
            members[entry.name.removesuffix(".npy")] = _checked(name, archive, entry)
        yield NpzFile(name, archive, members)


def _checked(path: str, archive: ZipArchive, entry: ZipEntry) -> _Member:
    """One member's .npy header, read from its first bytes and checked against its size."""

    def bad(why: str) -> TorchFileError:
        return TorchFileError(f"{path}: member {quote(entry.name)} {why}.")

    member = io.BytesIO(archive.head(entry, _HEAD))
    try:
        version = npy_format.read_magic(member)
        if version == (1, 0):
            shape, fortran, dtype = npy_format.read_array_header_1_0(member, _MAX_HEADER)
        elif version == (2, 0):
            shape, fortran, dtype = npy_format.read_array_header_2_0(member, _MAX_HEADER)
        else:
            raise bad(f"is .npy version {version[0]}.{version[1]}; versions 1.0 and 2.0 are read")
        start = member.tell()
    except TorchFileError:
        raise
    except (OSError, EOFError, ValueError, RuntimeError) as err:
        raise bad(f"has no readable .npy header ({clip(first_line(err))})") from err
    if len(shape) > _MAX_DIMS or any(type(d) is not int or d < 0 for d in shape):
        raise bad(f"has shape {quote(shape)}")
    nbytes = math.prod(shape) * dtype.itemsize
    if start + nbytes != entry.size:
        raise bad(
            f"of shape {list(shape)} and dtype {dtype.name} needs {start + nbytes} bytes, but "
            f"holds {entry.size}"
        )
    return _Member(entry, start, tuple(shape), dtype, bool(fortran))


# -- canonical weights ----------------------------------------------------------------------


def read_canonical(
    source: str | os.PathLike[str] | Sequence[Any], spec: RNNSpec, owner: str
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The canonical ``(weights, biases)`` of ``spec`` given as NumPy arrays: ``source`` is the
    path of an ``.npz`` archive that ``np.savez(path, *weights, *biases)`` wrote (members
    ``arr_0 .. arr_{N-1}``), or the arrays themselves (NumPy arrays or tensors), ``[*weights,
    *biases]``, in canonical order. Every array's count, shape and dtype is checked against the
    layout, all problems in one error (for a file, before any array is read); arrays given are
    copied, never shared."""
    layout = layout_of(spec)
    table = [*layout.weights, *layout.biases]
    names = [f"arr_{i}" for i in range(len(table))]
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        with open_npz(path) as npz:
            claims = npz.claims()
            problems = [f"missing {n}" for n in names if n not in claims]
            problems += [f"unexpected {quote(n)}" for n in claims if n not in names]
            problems += _shape_problems(
                [(n, claims[n][0], claims[n][1]) for n in names if n in claims], table
            )
            if problems:
                raise TorchFileError(
                    f"{path}: not the {len(table)} canonical arrays of {_what(spec)} "
                    f"(np.savez(path, *weights, *biases)): {listed(problems, 6)}."
                )
            arrays: list[Any] = list(npz.read(names).values())
    else:
        if isinstance(source, (np.ndarray, torch.Tensor)) or not isinstance(source, Sequence):
            raise TypeError(
                f"{owner}: expected a path or a sequence of arrays [*weights, *biases], got "
                f"{type(source).__name__}."
            )
        # np.array copies: the layer never shares memory with the caller's arrays.
        arrays = [a if isinstance(a, torch.Tensor) else np.array(a) for a in source]
        problems = [] if len(arrays) == len(table) else [f"{len(arrays)} arrays given"]
        problems += _shape_problems(
            [
                (f"#{i}", tuple(a.shape), str(a.dtype).removeprefix("torch."))
                for i, a in enumerate(arrays)
            ],
            table,
        )
        if problems:
            raise ValueError(
                f"{owner}: not the {len(table)} canonical arrays of {_what(spec)}: "
                f"{listed(problems, 6)}."
            )
    tensors = [a if isinstance(a, torch.Tensor) else torch.from_numpy(a) for a in arrays]
    nw = len(layout.weights)
    return tensors[:nw], tensors[nw:]


def _what(spec: RNNSpec) -> str:
    proj = f", num_proj={spec.num_proj}" if spec.num_proj else ""
    return (
        f"a {spec.num_layers}-layer {spec.direction} {spec.mode} of {spec.num_units} units on "
        f"inputs of {spec.input_size}{proj}"
    )


def _shape_problems(
    given: list[tuple[str, tuple[int, ...], str]], table: Sequence[Any]
) -> list[str]:
    """What is wrong with each (name, shape, dtype name) against the layout's tensors."""
    problems = []
    for (name, shape, dtype), p in zip(given, table):
        if tuple(shape) != p.shape:
            problems.append(f"{name} has shape {list(shape)}, expected {list(p.shape)}")
        if dtype not in (*FLOAT_DTYPES, "bfloat16"):
            problems.append(f"{name} has dtype {dtype}, not float16, float32 or float64")
    return problems
