"""The child process that reads a Keras 2 ``.h5`` file for :mod:`cudnn_rnn.io.keras.h5`.

HDF5 is a C library that trusts the bytes of the file: a corrupt global heap can make it loop
forever and one wrong byte in an attribute's datatype can make it dereference garbage (SIGSEGV).
So no h5py call on an untrusted file runs in the user's process. :mod:`.h5_file` runs this module
in a fresh interpreter (``python -c BOOT REQUEST``: BOOT gives it the parent's ``sys.path`` and
runs it with ``runpy``; REQUEST is JSON) under a wall-clock limit. It imports only the standard
library, NumPy and h5py (never torch or the rest of ``cudnn_rnn``, so it starts in about 0.1 s),
reads what a Keras reader looks at, and writes plain data to stdout:

- 8 bytes (little-endian) giving the length of a UTF-8 JSON document, the document, then the
  payload: the bytes of the arrays it read, each at a multiple of 8.
- The document is ``{"size", "claimed", "root", "nodes"}`` or ``{"open_error"}``. ``nodes`` is a
  flat list (no nesting, whatever the file's depth): a group is ``{"type": "group", "attrs":
  {name: value}, "links": {name: link}}``, a dataset ``{"type": "dataset", "shape", "kind",
  "itemsize", "dtype", "virtual", "external"}`` (plus ``"data": [offset, nbytes]`` or
  ``"data_error"`` when its values were read), anything else ``{"type": "other"}``, and a node
  h5py failed to open or describe ``{"error": text}``. A link is ``{"kind": "HardLink", "node":
  index}``, ``{"kind": "SoftLink"}`` (or ExternalLink...: never followed), ``{"kind": null}``
  (no such name) or ``{"error": text}``.
  An attribute value is ``{"s": str}``, ``{"b": bytes as latin-1}``, ``{"list": [values]}`` (a 1-D
  array), ``{"array": ndim}`` (another array), ``{"type": name}`` (anything else) or ``{"error":
  text}``.

What it visits is exactly what the parent asks for: the root and ``model_weights``, each name of
``layer_names`` and each name of every layer's ``weight_names`` (a Keras 2 file); or, where the
request says ``paths`` (a Keras 3 weights file, whose weights are named by their place), each
path of the JSON list on its stdin, from the root; one hard link at a time (soft and external
links are reported, never followed, so no other file is opened). Values are read only when
asked, only for the weights of layers that have a ``recurrent_kernel`` (the RNN layers) or for
the datasets the ``paths`` name, only for plain float datasets stored in the file, and only when
their sizes add up to no more than the file's size; they come back in native byte order (``>f4``
becomes ``float32``, as Keras's own loader gives them).

Limits set here on POSIX: no core file; an address space of what the imports took plus twice the
file's size plus 1 GiB (the parent sizes it); an output file of at most what the parent accepts.
The exit status is 0 whenever the document was written (a file h5py cannot open included).

It bounds its own life, not trusting its parent to be there to stop it (a parent killed by
SIGKILL, the OOM killer or a scheduler runs no cleanup, and a file that makes HDF5 loop keeps it
busy in C, where no Python thread or signal handler of its own would run): first thing, before
any import that takes time, it sets RLIMIT_CPU (the parent derives it from its time limit, with
a margin: the kernel sends SIGXCPU at the soft limit, SIGKILL at the hard one), and on Linux it
asks the kernel to kill it the moment its parent dies (``prctl(PR_SET_PDEATHSIG, SIGKILL)``),
then exits if the parent is no longer the process that started it (it died before the request).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
from typing import Any

#: Attributes a Keras reader asks any group for (which ones depends on the group's role, and a
#: hostile file can give one group several roles, so every visited group answers all of them).
#: ``keras_version`` tells which defaults the layers of a weights-only file had; Keras 3 names
#: the layer whose variables a ``vars`` group holds in its ``name``.
ATTRS = ("layer_names", "model_config", "weight_names", "keras_version", "name")
FLOAT_SIZES = (2, 4, 8)
HEADER = 8
ALIGN = 8
#: Exit status of a reader process whose parent had already gone (nobody reads it).
ORPHANED = 3
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _error(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0][:200] if lines else ''}".rstrip(": ")


def _attr_value(value: Any, np: Any, top: bool = True) -> dict[str, Any]:
    """An attribute's value as JSON; a 1-D array's items are texts or type names (never read
    further: a name list holds texts, and nothing here recurses into nested datatypes)."""
    if isinstance(value, bytes):
        return {"b": value.decode("latin-1")}
    if isinstance(value, str):
        return {"s": value}
    if top and isinstance(value, np.ndarray):
        if value.ndim != 1:
            return {"array": int(value.ndim)}
        return {"list": [_attr_value(v, np, top=False) for v in value.tolist()]}
    return {"type": type(value).__name__}


def _name(value: dict[str, Any]) -> str | None:
    """A name as the parent decodes it (UTF-8 bytes or a str that is valid UTF-8), else None:
    the parent refuses it before it asks for anything under it."""
    try:
        if "b" in value:
            return str(value["b"].encode("latin-1").decode("utf-8"))
        if "s" in value:
            text = str(value["s"])
            text.encode("utf-8")
            return text
    except UnicodeError:
        return None
    return None


def _base(weight_name: str) -> str:
    return weight_name.rsplit("/", 1)[-1].split(":", 1)[0]


class Reader:
    """Snapshots of the visited objects, and the open h5py objects behind them."""

    def __init__(self, h5py: Any, np: Any) -> None:
        self.h5py, self.np = h5py, np
        self.nodes: list[dict[str, Any]] = []
        self.objects: list[Any] = []
        self.paths: list[str] = []

    def add(self, obj: Any, path: str) -> int:
        self.nodes.append(self.describe(obj, path))
        self.objects.append(obj)
        self.paths.append(path)
        return len(self.nodes) - 1

    def describe(self, obj: Any, path: str) -> dict[str, Any]:
        h5py = self.h5py
        try:
            if isinstance(obj, h5py.Group):
                return {"type": "group", "attrs": self.attributes(obj, path), "links": {}}
            if isinstance(obj, h5py.Dataset):
                dtype = obj.dtype
                shown = dtype.newbyteorder("=") if dtype.byteorder in "<>" else dtype
                return {
                    "type": "dataset",
                    "shape": [int(d) for d in obj.shape],
                    "kind": dtype.kind,
                    "itemsize": int(dtype.itemsize),
                    "dtype": str(shown)[:80],
                    "virtual": bool(obj.is_virtual),
                    "external": bool(obj.external),
                }
        except Exception as err:  # whatever HDF5 says about a corrupt object
            return {"error": f"object {path!r}: {_error(err)}"}
        return {"type": "other"}

    def attributes(self, group: Any, path: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in ATTRS:
            try:
                if key in group.attrs:
                    out[key] = _attr_value(group.attrs[key], self.np)
            except Exception as err:
                out[key] = {"error": f"attribute {key!r} of {path!r}: {_error(err)}"}
        return out

    def walk(self, index: int, path: str) -> int | None:
        """The node at ``path`` under node ``index``, through hard links only (None: absent,
        not a hard link, or under a dataset)."""
        for part in (p for p in path.split("/") if p):
            node, obj = self.nodes[index], self.objects[index]
            if node.get("type") != "group":
                return None
            links = node["links"]
            if part not in links:
                links[part] = self.link(obj, self.paths[index], part)
            link = links[part]
            if "node" not in link:
                return None
            index = link["node"]
        return index

    def link(self, group: Any, path: str, part: str) -> dict[str, Any]:
        where = f"{path.rstrip('/')}/{part}"
        try:
            link = group.get(part, getlink=True)
            if link is None:
                return {"kind": None}
            kind = type(link).__name__
            if kind != "HardLink":
                return {"kind": kind}
            return {"kind": kind, "node": self.add(group[part], where)}
        except Exception as err:
            return {"error": f"object {where!r}: {_error(err)}"}

    def names(self, index: int, key: str) -> list[str]:
        node = self.nodes[index]
        value = node.get("attrs", {}).get(key, {})
        names = [_name(v) for v in value.get("list", [])]
        return [n for n in names if n is not None]


def snapshot(
    path: str, want_data: bool, paths: list[str] | None = None
) -> tuple[dict[str, Any], list[Any]]:
    import h5py
    import numpy as np

    # The parent refused anything but a regular file with cudnn_rnn.io.files.open_regular; this is
    # the same look again, in case the path was swapped since. It is written out here rather
    # than imported because this process imports only the standard library, NumPy and h5py (it
    # must start fast and trust nothing of the package), and it reports a refusal as data.
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    with os.fdopen(fd, "rb") as raw:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return {"open_error": "not a regular file"}, []
        size = os.fstat(fd).st_size
        try:
            f = h5py.File(raw, "r")
        except Exception as err:  # h5py says "not an HDF5 file" in many ways
            return {"open_error": _error(err)}, []
        with f:
            reader = Reader(h5py, np)
            root = reader.add(f, "/")
            if paths is None:
                layers = _keras2_rnn_weights(reader, root)
            else:
                found = [reader.walk(root, str(p)) for p in paths]
                layers = [i for i in found if i is not None]
            claimed, payload = _read_values(reader, layers, size) if want_data else (0, [])
            doc = {"size": size, "claimed": claimed, "root": root, "nodes": reader.nodes}
            return doc, payload


def _keras2_rnn_weights(reader: Reader, root: int) -> list[int]:
    """The weights of a Keras 2 file's RNN layers (those with a ``recurrent_kernel``), visiting
    every layer's weights on the way."""
    weights_root = reader.walk(root, "model_weights")
    if weights_root is None:
        weights_root = root
    layers: list[int] = []
    for layer in reader.names(weights_root, "layer_names"):
        group = reader.walk(weights_root, layer)
        if group is None:
            continue
        weights = reader.names(group, "weight_names")
        found = [reader.walk(group, w) for w in weights]
        if any(_base(w) == "recurrent_kernel" for w in weights):
            layers.extend(i for i in found if i is not None)
    return layers


def _read_values(reader: Reader, indices: list[int], size: int) -> tuple[int, list[Any]]:
    """The values of the RNN layers' float datasets, if they can fit in the file."""
    np = reader.np
    wanted = [
        i
        for i in indices
        if reader.nodes[i].get("type") == "dataset"
        and reader.nodes[i]["kind"] == "f"
        and reader.nodes[i]["itemsize"] in FLOAT_SIZES
        and not reader.nodes[i]["virtual"]
        and not reader.nodes[i]["external"]
    ]
    claimed = 0
    for i in wanted:
        count = 1
        for d in reader.nodes[i]["shape"]:
            count *= d
        claimed += count * reader.nodes[i]["itemsize"]
    if claimed > size:  # never allocate from a claim the file's bytes cannot back
        return claimed, []
    payload: list[Any] = []  # contiguous arrays, written as they are (no copy)
    offset = 0
    for i in wanted:
        node = reader.nodes[i]
        try:
            values = np.asarray(reader.objects[i][()])
            if list(values.shape) != node["shape"] or values.dtype.kind != "f":
                raise ValueError(f"read {values.dtype} {list(values.shape)}")
            # Native byte order, as Keras's loader gives big-endian weights to its backend.
            values = np.ascontiguousarray(values, dtype=values.dtype.newbyteorder("="))
        except Exception as err:
            node["data_error"] = f"the values of {reader.paths[i]!r}: {_error(err)}"
            continue
        node["data"] = [offset, int(values.nbytes)]
        payload.append(values)
        offset += int(values.nbytes) + -int(values.nbytes) % ALIGN
    return claimed, payload


def _limit(request: dict[str, Any]) -> None:
    try:
        import resource
    except ImportError:  # not POSIX: the parent's time limit still holds
        return

    def lower(which: int, value: int) -> None:
        soft, hard = resource.getrlimit(which)
        if value < 0:
            return
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        if soft == resource.RLIM_INFINITY or value < soft:
            resource.setrlimit(which, (value, hard))

    lower(resource.RLIMIT_CORE, 0)
    lower(resource.RLIMIT_FSIZE, int(request["output_limit"]))
    try:
        with open("/proc/self/status") as status:
            used = next(int(line.split()[1]) * 1024 for line in status if line[:7] == "VmSize:")
    except (OSError, StopIteration, ValueError):
        return
    lower(resource.RLIMIT_AS, used + int(request["memory_headroom"]))


def _bound_life(request: dict[str, Any]) -> None:
    """Die with the parent, and after ``cpu_limit`` seconds of CPU time (see the module)."""
    try:
        import resource
    except ImportError:  # not POSIX: the parent's time limit is all there is
        return
    # SIGXCPU at the soft limit, SIGKILL at the hard one a few seconds later (should SIGXCPU
    # not end the process); never above a hard limit already set.
    soft, hard = int(request["cpu_limit"]), int(request["cpu_limit"]) + 5
    ceiling = resource.getrlimit(resource.RLIMIT_CPU)[1]
    if ceiling != resource.RLIM_INFINITY:
        soft, hard = min(soft, ceiling), min(hard, ceiling)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):  # no prctl to call: RLIMIT_CPU still holds
            pass
    # The parent may have died before the request above; then this process has a new one.
    if os.getppid() != int(request["parent"]):
        os._exit(ORPHANED)


def main(argv: list[str]) -> int:
    request = json.loads(argv[-1])
    _bound_life(request)
    import h5py  # noqa: F401  (imported before the memory limit is measured)
    import numpy  # noqa: F401

    _limit(request)
    # The places to look at (a Keras 3 weights file) come on stdin, written by the parent.
    paths = json.loads(sys.stdin.buffer.read()) if request.get("paths") else None
    doc, payload = snapshot(request["path"], bool(request["data"]), paths)
    text = json.dumps(doc, separators=(",", ":")).encode("utf-8")
    out = sys.stdout.buffer
    out.write(len(text).to_bytes(HEADER, "little"))
    out.write(text)
    for values in payload:
        out.write(memoryview(values).cast("B"))
        out.write(b"\0" * (-int(values.nbytes) % ALIGN))
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
