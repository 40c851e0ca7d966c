"""A Keras ``.h5`` file as the reader process saw it: plain, checked data, never h5py here.

HDF5 trusts the file's bytes: a corrupt global heap can make it loop forever and one wrong
byte in an attribute's datatype can crash it (SIGSEGV). So this process never opens the file
with h5py. :func:`_read_file` runs :mod:`.h5_child` (a script that imports only NumPy and h5py),
which reads the parts a Keras reader looks at, in its own process under a time and a memory
limit, and sends back plain data. Here that data is checked and becomes a :class:`_File`: its
groups (:class:`_Group`, their attributes and the names looked up in them) and datasets
(:class:`_Dataset`, their descriptions and the values read), walked by hard links only
(:func:`_child`). What the objects mean is the Keras readers' business: :mod:`.h5_layers` and
:mod:`.h5_plans` for Keras 2, :mod:`.keras3` for a Keras 3 weights file. Anything wrong with the
file, or with what the reader process did or sent, is a :class:`KerasH5Error` naming the file.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import select
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cudnn_rnn.io import files

__all__ = ["KerasH5Error"]

_FLOAT_SIZES = (2, 4, 8)
_MIB = 1 << 20
_CHILD = "cudnn_rnn.io.keras.h5_child"
_CPU_SIGNAL = getattr(signal, "SIGXCPU", None)  # what RLIMIT_CPU sends first (POSIX)
_HEADER = 8


class KerasH5Error(files.FormatError):
    """A file that is not a readable Keras 2 HDF5 model or weights file."""


@dataclass(frozen=True)
class _Failed:
    """What h5py raised, in the reader process, on one part of the file."""

    error: str


@dataclass(frozen=True)
class _Other:
    """An attribute value that is not text or a list (its Python type's name), or an HDF5
    object that is neither a group nor a dataset."""

    name: str


@dataclass(frozen=True, eq=False)
class _Dataset:
    """A dataset's description, and its values (native byte order) if they were read."""

    shape: tuple[int, ...]
    kind: str
    itemsize: int
    dtype: str
    virtual: bool
    external: bool
    values: np.ndarray | _Failed | None

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize


@dataclass(frozen=True)
class _Link:
    """A name in a group: its kind (``HardLink``, ``SoftLink``, ``ExternalLink``...) and, for a
    hard link, the object it names."""

    kind: str
    target: _Node | None


@dataclass
class _Group:
    """A group's Keras attributes (str, bytes, a list of them, _Other or _Failed) and the names
    in it that were looked up (None: no such name)."""

    attrs: dict[str, Any]
    links: dict[str, _Link | _Failed | None] = field(default_factory=dict)


_Node = _Group | _Dataset | _Other | _Failed


@dataclass(frozen=True)
class _File:
    """What the reader process saw: the file's size, its root group, and the bytes the RNN
    layers' datasets claim (their values are read only when that fits in the file). ``who``
    begins every message about it: the reader and the file (``from_keras_h5: 'model.h5'``)."""

    who: str
    size: int
    claimed: int
    root: _Node

    def corrupt(self, failed: _Failed) -> KerasH5Error:
        return KerasH5Error(
            f"{self.who} is corrupt (HDF5 failed on {files.escape(failed.error)}); "
            "re-save the model with Keras, or use an intact copy."
        )


# -- running the reader process --------------------------------------------------------------


def _time_limit(given: float | None, owner: str, default: float) -> float:
    """``time_limit=`` checked; ``default`` where it is None."""
    if given is None:
        return default
    if isinstance(given, bool) or not isinstance(given, (int, float)):
        raise TypeError(
            f"{owner}: time_limit must be a number of seconds or None, got {type(given).__name__}."
        )
    if not math.isfinite(given) or given <= 0:
        raise ValueError(
            f"{owner}: time_limit must be a positive, finite number of seconds, got {given!r}."
        )
    return float(given)


def _read_file(
    path: str | os.PathLike[str],
    values: bool,
    time_limit: float | None,
    *,
    base: float,
    per_mib: float,
    owner: str,
    paths: Sequence[str] | None = None,
    shown: str | None = None,
) -> _File:
    """The parts of the file a Keras reader looks at (and the RNN weights' values when
    ``values``), read by the child process; any failure is a KerasH5Error naming the file. The
    child gets ``time_limit`` seconds (None: ``base`` plus ``per_mib`` per MiB of the file).

    By default the parts of a Keras 2 file (its ``layer_names``, each layer's ``weight_names``).
    ``paths`` names the objects to look at instead, from the root, through hard links (a Keras 3
    weights file, which names its weights by their place: ``layers/lstm/cell/vars/0``); every
    float dataset among them is read when ``values``. Messages begin with ``owner`` and the file
    as ``shown`` (by default the path, quoted).
    """
    if importlib.util.find_spec("h5py") is None:  # pragma: no cover - exercised only without h5py
        raise ImportError(
            f"{owner}: reading Keras .h5 files needs h5py (pip install cudnn-rnn[h5])."
        )
    who = f"{owner}: {os.fspath(path)!r}" if shown is None else f"{owner}: {shown}"
    try:
        raw = files.open_regular(path)  # a FIFO or device is refused before any open
    except files.NotRegularFile as err:
        raise KerasH5Error(f"{who}: {err.kind}, not a regular file.") from err
    with raw:
        size = os.fstat(raw.fileno()).st_size
    limit = _time_limit(time_limit, owner, base + per_mib * size / _MIB)
    # The most a sound file can make the child write (names and descriptions as JSON, values
    # that fit in the file); more is refused, and the child cannot write more (RLIMIT_FSIZE).
    output_limit = 4 * size + 64 * _MIB
    request = {
        "path": os.fspath(path),
        "data": values,
        # The places, if any, come on the reader's stdin: a command-line argument has a length
        # limit (128 KiB on Linux) that a model of many layers could reach.
        "paths": paths is not None,
        "output_limit": output_limit,
        "memory_headroom": 2 * size + 1024 * _MIB,
        # The child's own bounds, for when this process is no longer there to stop it: CPU
        # time (this process stops it at `limit` of wall-clock time first), and this pid.
        "cpu_limit": _cpu_limit(limit),
        "parent": os.getpid(),
    }
    with contextlib.ExitStack() as files_of_the_run:
        given, out, errors = (
            files_of_the_run.enter_context(tempfile.TemporaryFile()) for _ in range(3)
        )
        if paths is not None:
            given.write(json.dumps(list(paths)).encode("utf-8"))
            given.seek(0)
        code = _run_child(request, given, out, errors, limit, who)
        if _CPU_SIGNAL is not None and code == -_CPU_SIGNAL:  # out of CPU time before the clock
            raise _too_slow(who, f"used more than {request['cpu_limit']} s of CPU time")
        if code != 0:
            errors.seek(max(0, os.fstat(errors.fileno()).st_size - 4096))
            raise _child_failure(code, errors.read().decode("utf-8", "replace"), who)
        written = os.fstat(out.fileno()).st_size
        if written > output_limit:
            raise KerasH5Error(
                f"{who}: the reader process sent {written} bytes, more than a file "
                f"of {size} bytes can explain; refused."
            )
        out.seek(0)
        blob = bytearray(written)
        out.readinto(blob)
    return _parse(blob, who)


def _run_child(
    request: dict[str, Any], given: Any, out: Any, err: Any, limit: float, who: str
) -> int:
    """Run the reader process on the request, with ``given`` as its stdin; its exit status
    (negative: the signal that killed it)."""
    if not sys.executable:  # pragma: no cover - an embedded Python with no interpreter path
        raise RuntimeError(
            f"{who}: cannot start the process that reads it: sys.executable is empty."
        )
    # The child imports from this process's sys.path (the same h5py; the current directory
    # only if this process looks there too) and loads no HDF5 filter plugin (Keras writes none).
    paths = [p for p in sys.path if isinstance(p, str)]
    boot = (
        f"import sys; sys.path[:] = {paths!r}; import runpy; "
        f"runpy.run_module({_CHILD!r}, run_name='__main__', alter_sys=True)"
    )
    env = dict(os.environ, HDF5_PLUGIN_PRELOAD="::", OMP_NUM_THREADS="1")
    env.update(OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proc = subprocess.Popen(
        [sys.executable, "-c", boot, json.dumps(request)],
        stdin=given,
        stdout=out,
        stderr=err,
        env=env,
    )
    try:
        return _wait(proc, limit)
    except subprocess.TimeoutExpired:
        raise _too_slow(who, f"took longer than {limit:.1f} s") from None
    finally:
        if proc.poll() is None:  # the time limit, or an interrupt while waiting
            proc.kill()
            proc.wait()


def _cpu_limit(limit: float) -> int:
    """The reader process's RLIMIT_CPU, in whole seconds, for a time limit of ``limit`` s of
    wall-clock time: twice that and 10 s more, so that this process, which stops it at
    ``limit``, is always first while it runs (its threads may add up CPU time faster than the
    clock); the limit only ends a reader process this one left behind."""
    return math.ceil(2 * limit) + 10


def _too_slow(who: str, how: str) -> KerasH5Error:
    return KerasH5Error(
        f"{who}: reading it {how}, so the reader process was stopped (a corrupt "
        "HDF5 file can make HDF5 loop forever); if the file is sound but slow to read, pass a "
        "larger time_limit."
    )


def _wait(proc: subprocess.Popen[bytes], limit: float) -> int:
    """``proc.wait(timeout=limit)``, waking the moment the process ends where Linux gives a
    process file descriptor (``Popen.wait`` polls, up to 50 ms late)."""
    try:
        fd = os.pidfd_open(proc.pid)  # type: ignore[attr-defined,unused-ignore]
    except (AttributeError, OSError):
        return proc.wait(timeout=limit)
    try:
        poller = select.poll()  # not select.select: a descriptor may be above FD_SETSIZE
        poller.register(fd, select.POLLIN)
        if not poller.poll(math.ceil(limit * 1000)):
            raise subprocess.TimeoutExpired(proc.args, limit)
    finally:
        os.close(fd)
    return proc.wait()


def _child_failure(code: int, stderr: str, who: str) -> Exception:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    last = lines[-1].strip()[:300] if lines else "no message"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return KerasH5Error(
            f"{who}: HDF5 crashed reading it ({name} in the reader process, which "
            "runs apart from yours); the file is corrupt: re-save the model with Keras, or use "
            "an intact copy."
        )
    if "ModuleNotFoundError" in last and "h5py" in last:
        return ImportError(
            f"{who}: reading Keras .h5 files needs h5py (pip install cudnn-rnn[h5]); the "
            f"reader process could not import it ({last})."
        )
    return KerasH5Error(
        f"{who}: the reader process failed (exit status {code}: {last}); the file "
        "is corrupt or hostile."
    )


# -- what it sent, checked -------------------------------------------------------------------


def _parse(blob: bytearray, who: str) -> _File:
    """The child's output as checked objects (a malformed one is a KerasH5Error)."""
    try:
        length = int.from_bytes(blob[:_HEADER], "little")
        if len(blob) < _HEADER or length > len(blob) - _HEADER:
            raise ValueError(f"{len(blob)} bytes, a document of {length}")
        # Our reader process's document, not the file's JSON: flat by construction (nodes in a
        # list; an attribute nests at most HDF5's 32 dimensions), the file's model_config in
        # it a string that _config_model parses with the bounded loader.
        doc = json.loads(blob[_HEADER : _HEADER + length].decode("utf-8"))
        if "open_error" in doc:
            raise KerasH5Error(
                f"{who} is not a readable HDF5 file ({files.escape(str(doc['open_error']))})."
            )
        payload = memoryview(blob)[_HEADER + length :]
        raw_nodes = doc["nodes"]
        nodes = [_node(raw, payload) for raw in raw_nodes]
        for raw, node in zip(raw_nodes, nodes):
            if isinstance(node, _Group):
                node.links.update(
                    (str(name), _link(link, nodes)) for name, link in raw["links"].items()
                )
        return _File(who, int(doc["size"]), int(doc["claimed"]), nodes[int(doc["root"])])
    except KerasH5Error:
        raise
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError) as err:
        raise KerasH5Error(
            f"{who}: the reader process sent a malformed result "
            f"({type(err).__name__}: {files.clip(files.first_line(err), 200)})."
        ) from err


def _node(raw: dict[str, Any], payload: memoryview) -> _Node:
    if "error" in raw:
        return _Failed(str(raw["error"]))
    if raw["type"] == "group":
        return _Group({str(k): _attr(v) for k, v in raw["attrs"].items()})
    if raw["type"] != "dataset":
        return _Other(str(raw["type"]))
    shape = tuple(int(d) for d in raw["shape"])
    kind, itemsize = str(raw["kind"]), int(raw["itemsize"])
    values: np.ndarray | _Failed | None = None
    if "data_error" in raw:
        values = _Failed(str(raw["data_error"]))
    elif "data" in raw:
        offset, nbytes = (int(v) for v in raw["data"])
        if kind != "f" or itemsize not in _FLOAT_SIZES or nbytes != math.prod(shape) * itemsize:
            raise ValueError(f"values of {nbytes} bytes for {kind}{itemsize} {list(shape)}")
        if offset < 0 or offset + nbytes > len(payload):
            raise ValueError(f"values at {offset}..{offset + nbytes} of {len(payload)} bytes")
        dtype = np.dtype(f"f{itemsize}")  # native byte order, as the child wrote them
        values = np.frombuffer(payload, dtype, nbytes // itemsize, offset).reshape(shape)
    virtual, external = bool(raw["virtual"]), bool(raw["external"])
    return _Dataset(shape, kind, itemsize, str(raw["dtype"]), virtual, external, values)


def _attr(raw: dict[str, Any]) -> Any:
    """An attribute value: str, bytes, a list of them, _Other or _Failed."""
    if "s" in raw:
        return str(raw["s"])
    if "b" in raw:
        return str(raw["b"]).encode("latin-1")
    if "list" in raw:
        return [_attr(v) if ("s" in v or "b" in v) else _Other(str(v["type"])) for v in raw["list"]]
    if "array" in raw:
        return _Other(f"{int(raw['array'])}-D array")
    if "error" in raw:
        return _Failed(str(raw["error"]))
    return _Other(str(raw["type"]))


def _link(raw: dict[str, Any], nodes: list[_Node]) -> _Link | _Failed | None:
    if "error" in raw:
        return _Failed(str(raw["error"]))
    if raw["kind"] is None:
        return None
    return _Link(str(raw["kind"]), nodes[int(raw["node"])] if "node" in raw else None)


# -- walking the file: by hard links, checking what is found ---------------------------------


def _text(value: Any, what: str, who: str) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as err:
            raise KerasH5Error(f"{who}: {what} is not UTF-8 text.") from err
    if isinstance(value, str):
        try:  # h5py keeps bytes that are not UTF-8 as surrogates
            value.encode("utf-8")
        except UnicodeEncodeError as err:
            raise KerasH5Error(f"{who}: {what} is not UTF-8 text.") from err
        return value
    name = value.name if isinstance(value, _Other) else type(value).__name__
    raise KerasH5Error(f"{who}: {what} is a {name}, not text.")


_MISSING = _Other("missing")


def _attribute(h5: _File, node: _Node, key: str) -> Any:
    """``node.attrs[key]``, or _MISSING."""
    if not isinstance(node, _Group):
        return _MISSING
    value = node.attrs.get(key, _MISSING)
    if isinstance(value, _Failed):
        raise h5.corrupt(value)
    return value


def _names(h5: _File, node: _Node, key: str, what: str) -> list[str]:
    values = _attribute(h5, node, key)
    if values is _MISSING:
        raise KerasH5Error(f"{h5.who}: {what} has no {key!r} attribute.")
    if not isinstance(values, list):
        raise KerasH5Error(f"{h5.who}: {what}'s {key!r} is not a list of names.")
    return [_text(v, f"{what}'s {key!r}", h5.who) for v in values]


def _child(h5: _File, parent: _Node, path: str) -> _Node | None:
    """``parent[path]`` through hard links only, or None: a soft or external link could name
    another file (a FIFO, a device), and nothing outside this file is ever opened (the reader
    process never follows one either)."""
    node = parent
    for part in (p for p in path.split("/") if p):
        if isinstance(node, _Failed):
            raise h5.corrupt(node)
        if not isinstance(node, _Group):
            return None
        link = node.links.get(part)
        if link is None:
            return None
        if isinstance(link, _Failed):
            raise h5.corrupt(link)
        if link.kind != "HardLink" or link.target is None:
            raise KerasH5Error(
                f"{h5.who}: {path!r} is a {link.kind}; only objects stored in the file are read."
            )
        node = link.target
    if isinstance(node, _Failed):
        raise h5.corrupt(node)
    return node


def _dataset(h5: _File, group: _Group, name: str, layer: str) -> _Dataset:
    ds = _child(h5, group, name)
    who = h5.who
    if not isinstance(ds, _Dataset):
        raise KerasH5Error(f"{who}: layer {layer!r} has no dataset {name!r}.")
    if ds.kind != "f" or ds.itemsize not in _FLOAT_SIZES:
        raise KerasH5Error(
            f"{who}: {name!r} of layer {layer!r} has dtype {ds.dtype}, expected "
            "float16, float32 or float64."
        )
    if ds.virtual or ds.external:
        # HDF5 can point a dataset at other files: nothing outside this file is ever read.
        raise KerasH5Error(
            f"{who}: {name!r} of layer {layer!r} stores its data outside the file "
            "(an external or virtual dataset); refused."
        )
    return ds
