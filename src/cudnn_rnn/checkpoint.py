"""Canonical-format checkpoints: one safetensors file of TF canonical tensors plus metadata.

``save(path, objects)`` writes every tensor of every object under its TF canonical name (the names
``tf.contrib.cudnn_rnn``'s saveables write), never the opaque buffer, so a file saved from a fused
layer restores into compatible cells and back. ``restore(path, objects)`` checks the whole file
against what the objects expect and reports every missing, unexpected or misshapen tensor in one
error before it changes anything. The file format is specified in ``docs/checkpoint_format.md``.

TF1 checkpoints (``PREFIX.index`` + ``PREFIX.data-*``, TensorFlow not needed) are read by
``restore(PREFIX, objects)`` and written by ``save(PREFIX, objects, format="tf")``. TF's saver
also stores the opaque kernel, ``global_step`` and optimizer slots; restoring from a TF1 file
therefore ignores tensors nobody asked for unless ``strict=True``.

Objects are layers, saveables, cell containers (``MultiRNNCell``, ``BidirectionalStack``), or any
``nn.Module`` that contains them (its checkpointable submodules are used, outermost first).

>>> import tempfile, os, torch
>>> from cudnn_rnn import CudnnLSTM
>>> a, b = CudnnLSTM(2, 4, input_size=3, seed=1), CudnnLSTM(2, 4, input_size=3, seed=2)
>>> path = os.path.join(tempfile.mkdtemp(), "model.safetensors")
>>> save(path, a)
>>> restore(path, b)
>>> bool(torch.equal(a(torch.ones(2, 1, 3))[0], b(torch.ones(2, 1, 3))[0]))
True
"""

from __future__ import annotations

import contextlib
import copy
import gc
import io
import json
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch
from safetensors.torch import save as st_save
from torch import Tensor, nn

from cudnn_rnn import atomic
from cudnn_rnn.checkpointable import Checkpointable, Shape
from cudnn_rnn.core.constants import DIRECTIONS, INPUT_MODES, MODES
from cudnn_rnn.errors import CudnnRNNError

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "CheckpointError",
    "describe",
    "is_tf_checkpoint",
    "load_file",
    "restore",
    "save",
]

FORMAT = "cudnn_rnn.canonical"
FORMAT_VERSION = 1


#: At most this many problems are spelled out in an error message.
MAX_LISTED_PROBLEMS = 20


class CheckpointError(CudnnRNNError, ValueError):
    """A checkpoint that cannot be read, or does not fit the objects.

    ``problems`` lists the mismatches a restore found (or the one reason a file cannot be read),
    ``count`` how many there are: unexpected tensors beyond what the message shows are counted
    (``more``), not listed, so a file of 200k stray tensors costs no 200k strings. The message
    spells out the first :data:`MAX_LISTED_PROBLEMS` and counts the rest. ``path`` is the file
    (or TF1 prefix) concerned.
    """

    def __init__(
        self, path: str | os.PathLike[str], problems: str | Sequence[str], *, more: int = 0
    ) -> None:
        self.path = os.fspath(path)
        if isinstance(problems, str):
            self.problems = [problems]
            self.count = 1
            super().__init__(f"checkpoint {self.path}: {problems}")
            return
        self.problems = list(problems)
        self.count = len(self.problems) + more
        shown = self.problems[:MAX_LISTED_PROBLEMS]
        rest = self.count - len(shown)
        lines = "\n  ".join(shown) + (f"\n  ... and {rest} more" if rest else "")
        super().__init__(
            f"checkpoint {self.path}: {self.count} problem(s), nothing was restored:\n  {lines}"
        )


def checkpointables(objects: Any) -> list[Checkpointable]:
    """The checkpointable objects in ``objects`` (one object, or a list/tuple of them)."""
    items = list(objects) if isinstance(objects, (list, tuple)) else [objects]
    found: list[Checkpointable] = []
    for item in items:
        found.extend(_walk(item))
    if not found:
        raise TypeError(
            "checkpoint: no checkpointable object given (layers, saveables, MultiRNNCell, "
            f"BidirectionalStack, or modules containing them); got {_kinds(items)}."
        )
    return found


def _walk(item: Any) -> Iterator[Checkpointable]:
    if isinstance(item, Checkpointable):
        yield item
    elif isinstance(item, nn.Module):
        for child in item.children():
            yield from _walk(child)


def _kinds(items: Iterable[Any]) -> str:
    return ", ".join(type(i).__name__ for i in items) or "nothing"


def save(path: str | os.PathLike[str], objects: Any, *, format: str = "safetensors") -> None:
    """Write the canonical tensors of ``objects`` to ``path``, atomically.

    ``format="safetensors"`` (default) writes one file with metadata; ``format="tf"`` writes a
    TF1 bundle ``PREFIX.index`` + ``PREFIX.data-00000-of-00001`` that TensorFlow reads.
    """
    if format not in ("safetensors", "tf"):
        raise ValueError(f"checkpoint: format must be 'safetensors' or 'tf', got {format!r}.")
    found = checkpointables(objects)
    tensors: dict[str, Tensor] = {}
    for obj in found:
        for name, tensor in obj.checkpoint_entries().items():
            if name in tensors:
                raise ValueError(
                    f"checkpoint: two objects write {name!r}; give their layers or "
                    "saveables different scopes."
                )
            tensors[name] = tensor.detach().to("cpu").contiguous()
    if format == "tf":
        _save_tf(path, tensors)
        return
    metadata = {
        "format": FORMAT,
        "format_version": str(FORMAT_VERSION),
        "models": json.dumps([obj.checkpoint_spec() for obj in found], sort_keys=True),
    }
    data = st_save(tensors, metadata=metadata)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic.write_file(path, data)


def _save_tf(prefix: str | os.PathLike[str], tensors: dict[str, Tensor]) -> None:
    from cudnn_rnn.formats import tf1_bundle

    # NumPy has no bfloat16: such tensors travel as float32 (exact) and are marked for the writer.
    bf16 = [name for name, t in tensors.items() if t.dtype == torch.bfloat16]
    arrays = {name: (t.float() if name in bf16 else t).numpy() for name, t in tensors.items()}
    tf1_bundle.write_bundle(str(prefix), arrays, bfloat16=bf16)


def is_tf_checkpoint(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names a TF1 bundle (its prefix, or its ``.index`` file)."""
    text = str(path)
    # os.path.isfile: False, not an OSError, when PATH.index is longer than a name may be.
    return text.endswith(".index") or os.path.isfile(text + ".index")


# -- reading ------------------------------------------------------------------------------------

#: safetensors dtype codes -> torch dtypes: every code the reader knows (restore takes floats).
_ST_DTYPES: dict[str, torch.dtype] = {
    "BOOL": torch.bool,
    "U8": torch.uint8,
    "I8": torch.int8,
    "I16": torch.int16,
    "U16": torch.uint16,
    "I32": torch.int32,
    "U32": torch.uint32,
    "I64": torch.int64,
    "U64": torch.uint64,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F32": torch.float32,
    "F64": torch.float64,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
}
_ENTRY_KEYS = {"dtype", "shape", "data_offsets"}
#: The dtypes restore accepts: those every checkpointable object casts to its own.
FLOATING_DTYPES = ("float16", "bfloat16", "float32", "float64")
_MAX_DIMS = 64
_MAX_QUOTED = 120  # characters of a name or value quoted in an error message

#: name -> (shape, dtype name): what a file's header or index says, before any data is read.
Claims = dict[str, tuple[tuple[int, ...], str]]


class _Entry(NamedTuple):
    """One tensor of a safetensors file, checked against the file: its bytes are [begin, end)."""

    begin: int
    end: int
    shape: tuple[int, ...]
    dtype_name: str
    dtype: torch.dtype


# code -> (dtype name, dtype, bytes per element)
_ST_INFO = {
    code: (str(_dtype).removeprefix("torch."), _dtype, _dtype.itemsize)
    for code, _dtype in _ST_DTYPES.items()
}


def _quote(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_QUOTED else text[:_MAX_QUOTED] + "..."


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


def _refuse_special(path: Path) -> None:
    """Refuse a FIFO, device, socket or directory before anything opens it for reading (a FIFO
    would block, a device never end). A missing path is left to the reader to report."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if stat.S_ISREG(mode):
        return
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    kind = next((name for test, name in kinds if test(mode)), "not a regular file")
    raise CheckpointError(path, f"{kind}, not a regular file; give the path of a checkpoint file.")


def open_regular(path: str | os.PathLike[str]) -> io.BufferedReader:
    """``path`` opened for binary reading; only a regular file is opened (CheckpointError for
    anything else, FileNotFoundError for nothing)."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"checkpoint: no file at {p}.")
    _refuse_special(p)
    # Non-blocking, in case the path was swapped for a FIFO since the look above.
    fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    f = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        f.close()
        raise CheckpointError(p, "not a regular file; give the path of a checkpoint file.")
    return f


def _read_header(f: io.BufferedReader, path: Path) -> tuple[dict[str, _Entry], dict[str, str]]:
    """The checked tensor entries and metadata of an open safetensors file; no data is read.

    Everything the header claims is checked against the file before it is believed: the header
    fits in the file, each dtype is known, each shape's bytes equal its byte range, and the
    ranges tile the data exactly (in bounds, no overlap, no gap), as the safetensors spec says.
    """
    size = os.fstat(f.fileno()).st_size

    def bad(reason: str) -> CheckpointError:
        return CheckpointError(path, f"not a readable safetensors file ({reason}).")

    if size < 8:
        raise bad(f"{size} bytes, fewer than the 8 of the header length")
    header_len = int.from_bytes(f.read(8), "little")
    if header_len > size - 8:
        raise bad(f"the header length {header_len} exceeds the {size - 8} bytes after it")
    raw = f.read(header_len)
    if len(raw) != header_len:
        raise bad("the file shrank while it was read")
    with _gc_paused():
        return _parse_header(raw, 8 + header_len, size, bad)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    # A header of 200k small tensors makes 200k dicts, lists and tuples: the collector would
    # walk them over and over (3x the parse time), and nothing here makes cycles.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _parse_header(
    raw: bytes, start: int, size: int, bad: Callable[[str], CheckpointError]
) -> tuple[dict[str, _Entry], dict[str, str]]:
    try:
        header = json.loads(raw)
    except RecursionError:
        raise bad("its header nests too deeply") from None
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError, too many digits
        raise bad(f"its header is not JSON: {_first_line(err)}") from None
    if type(header) is not dict:
        raise bad("its header is not a JSON object")
    metadata = header.pop("__metadata__", None)
    if metadata is None:
        metadata = {}
    if type(metadata) is not dict or not all(type(v) is str for v in metadata.values()):
        raise bad("__metadata__ is not an object of strings")
    return _check_entries(header, start, size, bad), metadata


def _check_entries(
    header: dict[str, Any], start: int, size: int, bad: Callable[[str], CheckpointError]
) -> dict[str, _Entry]:
    data_len = size - start
    entries: dict[str, _Entry] = {}
    info_of = _ST_INFO.get
    # One pass, the common case first: a header of 200k tensors spends its time here.
    for name, info in header.items():
        if type(info) is not dict or len(info) != 3:
            raise bad(f"tensor {_quote(name)} is not an object of dtype, shape and data_offsets")
        code = info.get("dtype")
        shape = info.get("shape")
        offsets = info.get("data_offsets")
        if shape is None or offsets is None:
            raise bad(f"tensor {_quote(name)} is not an object of dtype, shape and data_offsets")
        known = info_of(code) if type(code) is str else None
        if known is None:
            raise bad(f"tensor {_quote(name)} has unknown dtype {_quote(code)}")
        if type(shape) is not list or len(shape) > _MAX_DIMS:
            raise bad(f"tensor {_quote(name)} has shape {_quote(shape)}, not a list")
        count = 1
        for d in shape:
            if type(d) is not int or d < 0:
                raise bad(
                    f"tensor {_quote(name)} has shape {_quote(shape)}, not a list of at most "
                    f"{_MAX_DIMS} non-negative integers"
                )
            count *= d  # Python ints: no overflow
        if type(offsets) is not list or len(offsets) != 2:
            raise bad(f"tensor {_quote(name)} has data_offsets {_quote(offsets)}, not a pair")
        begin, end = offsets
        if type(begin) is not int or type(end) is not int or not 0 <= begin <= end <= data_len:
            raise bad(
                f"tensor {_quote(name)} has data_offsets {_quote(offsets)}, not [begin, end] "
                f"within the {data_len} data bytes"
            )
        nbytes = count * known[2]
        if nbytes != end - begin:
            needs = f"{nbytes} bytes" if nbytes < 10**30 else "more bytes than the file holds"
            raise bad(
                f"tensor {_quote(name)} of shape {_quote(shape)} and dtype {code} needs "
                f"{needs}, but its data_offsets span {end - begin}"
            )
        entries[name] = _Entry(start + begin, start + end, tuple(shape), known[0], known[1])
    position = start
    for begin, end in sorted((e.begin, e.end) for e in entries.values()):
        if begin != position:
            name = next(n for n, e in entries.items() if (e.begin, e.end) == (begin, end))
            where = "overlaps the tensor before it" if begin < position else "leaves a gap"
            raise bad(f"tensor {_quote(name)} {where} (data_offsets must tile the data)")
        position = end
    if position != size:
        raise bad(f"its tensors end at byte {position} of {size}; the file is truncated or padded")
    return entries


def _check_format(path: Path, metadata: Mapping[str, str]) -> None:
    fmt = metadata.get("format")
    if fmt is not None and fmt != FORMAT:
        raise CheckpointError(path, f"format {_quote(fmt)} is not {FORMAT!r}.")
    version = metadata.get("format_version")
    if version is None:
        return
    # ASCII only: "²".isdigit() is True, and int() refuses it.
    if not (version.isascii() and version.isdigit() and len(version) <= 18):
        raise CheckpointError(
            path, f"format_version {_quote(version)} is not a number; the file is corrupt."
        )
    if int(version) > FORMAT_VERSION:
        raise CheckpointError(
            path,
            f"format_version {version!r} is newer than this library's ({FORMAT_VERSION}); "
            "upgrade cudnn_rnn.",
        )


def _read_tensors(
    f: io.BufferedReader, path: Path, entries: Mapping[str, _Entry], names: Iterable[str]
) -> dict[str, Tensor]:
    """The tensors ``names`` of checked ``entries``, each read into its own buffer."""
    wanted = list(names)
    out: dict[str, Tensor] = {}
    for name in sorted(wanted, key=lambda n: entries[n].begin):  # front to back
        entry = entries[name]
        buffer = bytearray(entry.end - entry.begin)
        f.seek(entry.begin)
        if f.readinto(buffer) != len(buffer):
            raise CheckpointError(path, "not a readable safetensors file (it shrank while read).")
        out[name] = (
            torch.frombuffer(buffer, dtype=entry.dtype).reshape(entry.shape)
            if buffer
            else torch.empty(entry.shape, dtype=entry.dtype)
        )
    return {name: out[name] for name in wanted}


def load_file(path: str | os.PathLike[str]) -> tuple[dict[str, Tensor], dict[str, str]]:
    """The tensors and the metadata block of a safetensors checkpoint, its format checked.

    The whole header is checked against the file (see ``docs/checkpoint_format.md``, "Reading")
    before any tensor is made; any problem raises :class:`CheckpointError` naming the file.
    Only regular files are opened.
    """
    p = Path(path)
    with open_regular(p) as f:
        entries, metadata = _read_header(f, p)
        _check_format(p, metadata)
        return _read_tensors(f, p, entries, entries), metadata


def read_claims(path: str | os.PathLike[str]) -> Claims:
    """Name -> (shape, dtype name) of every tensor of a safetensors file or TF1 checkpoint, from
    its checked header or index alone (no tensor data is read)."""
    if is_tf_checkpoint(path):
        return _tf_claims(_tf_bundle(path))
    p = Path(path)
    with open_regular(p) as f:
        entries, metadata = _read_header(f, p)
    _check_format(p, metadata)
    return {n: (e.shape, e.dtype_name) for n, e in entries.items()}


def _tf_bundle(path: str | os.PathLike[str]) -> Any:
    """The checked index of a TF1 checkpoint (``tf1_bundle.BundleIndex``), read once per call
    of the functions here and handed to every step that needs it."""
    from cudnn_rnn.formats import tf1_bundle

    try:  # the reader refuses FIFOs, devices and directories before it opens them
        return tf1_bundle.open_bundle(tf1_bundle.bundle_prefix(os.fspath(path)))
    except tf1_bundle.TF1BundleError as err:
        raise CheckpointError(path, _first_line(err)) from err


def _tf_claims(bundle: Any) -> Claims:
    return {n: (e.shape, e.dtype) for n, e in bundle.entries.items()}


def _tf_data(
    path: str | os.PathLike[str], bundle: Any, names: Sequence[str], *, read: bool = True
) -> dict[str, Tensor]:
    """The tensors ``names`` of a TF1 checkpoint, already checked against its index; with
    ``read=False`` only the data shards are checked against the index (nothing is read)."""
    from cudnn_rnn.formats import tf1_bundle

    try:
        if not read:
            tf1_bundle.check_bundle(bundle, names)
            return {}
        arrays = tf1_bundle.read_bundle(bundle, names=names)
    except tf1_bundle.TF1BundleError as err:
        raise CheckpointError(path, _first_line(err)) from err
    return {n: torch.from_numpy(a) for n, a in arrays.items()}


def _check_claims(
    path: str | os.PathLike[str], expected: Mapping[str, Shape], claims: Claims, strict: bool
) -> None:
    """Every name, shape and dtype of ``claims`` against ``expected``; one error lists all."""
    problems = [
        f"missing tensor {_quote(name)} (expected shape {_shape(shape)})"
        for name, shape in expected.items()
        if name not in claims
    ]
    problems += [
        f"tensor {_quote(name)} has shape {_shape(claims[name][0])}, expected {_shape(shape)}"
        for name, shape in expected.items()
        if name in claims and not _fits(claims[name][0], shape)
    ]
    problems += [
        f"tensor {_quote(name)} has dtype {claims[name][1]}, expected a floating dtype "
        f"({', '.join(FLOATING_DTYPES)})"
        for name in expected
        if name in claims and claims[name][1] not in FLOATING_DTYPES
    ]
    more = 0
    if strict:
        unexpected = [name for name in claims if name not in expected]
        # Spelled out up to what a message shows (a file may hold 200k strangers); counted after.
        shown = max(0, MAX_LISTED_PROBLEMS - len(problems))
        problems += [
            f"unexpected tensor {_quote(name)} (shape {_shape(claims[name][0])})"
            for name in unexpected[:shown]
        ]
        more = len(unexpected) - min(shown, len(unexpected))
    if problems or more:
        raise CheckpointError(path, problems, more=more)


def read_expected(
    path: str | os.PathLike[str], expected: Mapping[str, Shape], *, strict: bool | None = None
) -> dict[str, Tensor]:
    """The tensors named by ``expected`` (name -> shape), read from ``path`` only after its
    header or index was checked against them: names, shapes, floating dtypes and, with
    ``strict`` (default: for our files, not for TF1), no other tensors. A file that does not fit
    raises :class:`CheckpointError` listing every problem, and its data is never read."""
    return _expected(path, expected, strict, read=True)


def check_expected(
    path: str | os.PathLike[str], expected: Mapping[str, Shape], *, strict: bool | None = None
) -> None:
    """What :func:`read_expected` checks before it reads, without reading any tensor: the
    header or index against ``expected``, and every byte range the file claims for those
    tensors against the file (a TF1 checkpoint's data shards). Checksums are verified only when
    the tensors are read."""
    _expected(path, expected, strict, read=False)


def _expected(
    path: str | os.PathLike[str], expected: Mapping[str, Shape], strict: bool | None, read: bool
) -> dict[str, Tensor]:
    if is_tf_checkpoint(path):
        bundle = _tf_bundle(path)
        claims = _tf_claims(bundle)
        _check_claims(path, expected, claims, bool(strict))  # None: not strict for TF1
        return _tf_data(path, bundle, list(expected), read=read)
    p = Path(path)
    with open_regular(p) as f:
        entries, metadata = _read_header(f, p)
        _check_format(p, metadata)
        with _gc_paused():
            claims = {n: (e.shape, e.dtype_name) for n, e in entries.items()}
            _check_claims(p, expected, claims, strict is None or strict)
        return _read_tensors(f, p, entries, expected) if read else {}


def restore(
    path: str | os.PathLike[str],
    objects: Any,
    *,
    strict: bool | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    opaque_name: str | bool | None = None,
    object_path: str | None = None,
) -> None:
    """Load ``path`` (safetensors file or TF1 prefix) into ``objects`` in place; all-or-nothing.

    Every expected name must be in the file with a matching shape and a floating dtype. With
    ``strict`` the file may hold no other tensors; the default is strict for our files and not
    for TF1 checkpoints, whose saver also stores the opaque kernel, ``global_step`` and optimizer
    slots. Values are cast to each object's dtype. Every object is checked before any is
    written, and one :class:`CheckpointError` lists every problem; if an object still refuses
    its tensors while loading, the objects loaded before it are put back as they were.

    TF1 training checkpoints (:mod:`cudnn_rnn.formats.tf1_opaque`): where the file also holds a
    layer's opaque kernel (``opaque_name``, else the layer's ``<scope>/<name>/opaque_kernel``,
    else the only ``*/opaque_kernel`` of a fitting size; ``False``: ignore it), its layout is
    discovered from the canonical tensors and every weight and both biases of every gate come
    from it exactly. ``optimizer`` (Adam, SGD with momentum, RMSprop, Adagrad holding the
    layer's ``opaque_kernel``) gets its state from TF's slots of that variable.

    Older TF1 names (:mod:`cudnn_rnn.formats.tf1_legacy`) are read as aliases of the canonical
    ones: TF 1.3's ``multi_rnn_cell/...`` names, whose exact biases ``bias_cudnn_*`` are used
    exactly, and TF 1.8-1.15's object-based keys of a unidirectional ``CudnnLSTM``, at
    ``object_path`` (e.g. ``"model/lstm"``) or the one path of the file that fits.
    """
    found = checkpointables(objects)
    expected: dict[str, Shape] = {}
    for obj in found:
        expected.update(obj.checkpoint_shapes())
    if not is_tf_checkpoint(path):
        if object_path is not None:
            raise CheckpointError(
                path, "object_path= reads a TF1 object-based checkpoint; this file is not TF1."
            )
        tensors = read_expected(path, expected, strict=strict)
        _opaque_plan(path, None, found, tensors, optimizer, opaque_name)  # refuses TF1 options
        load_into(path, found, tensors)
        return
    from cudnn_rnn.formats import tf1_legacy

    bundle = _tf_bundle(path)  # the index is parsed once for every step below
    claims = _tf_claims(bundle)
    where = tf1_legacy.file_names(expected, claims, found, object_path)
    if where.problems:
        raise CheckpointError(path, where.problems)
    wanted = where.expected(expected)
    _check_claims(path, wanted, claims, bool(strict))
    read = _tf_data(path, bundle, list(wanted))
    tensors = {name: read[where.names[name]] for name in expected}
    problems: list[str] = []
    legacy = tf1_legacy.exact_biases(found, tensors, {n: read[n] for n in where.extra}, problems)
    if problems:
        raise CheckpointError(path, problems)
    exact = _opaque_plan(path, bundle, found, tensors, optimizer, opaque_name)
    # Every final buffer is known before anything is written, and each is written once: a
    # layer's exact buffer from its opaque kernel, else from TF 1.3's exact biases, else from
    # the canonical tensors (each summed bias split in halves).
    buffers = {id(param): value for param, value in legacy.writes}
    if exact is not None:
        buffers.update({id(param): value for param, value in exact.writes})
    load_into(path, found, tensors, buffers)
    if exact is not None:
        exact.apply_states()


def _opaque_plan(
    path: str | os.PathLike[str],
    bundle: Any,
    found: Sequence[Checkpointable],
    tensors: Mapping[str, Tensor],
    optimizer: torch.optim.Optimizer | None,
    opaque_name: str | bool | None,
) -> Any:
    """The exact opaque writes and optimizer states of a TF1 file (``bundle``, its index), or
    None for our files (``bundle`` None)."""
    if bundle is None:
        if optimizer is not None or isinstance(opaque_name, str):
            raise CheckpointError(
                path,
                "optimizer= and opaque_name= read a TF1 training checkpoint's opaque kernel; "
                "this file is not a TF1 checkpoint.",
            )
        return None
    from cudnn_rnn.formats import tf1_opaque

    try:
        return tf1_opaque.plan(
            _tf_claims(bundle),
            lambda names: _tf_data(path, bundle, names),
            found,
            tensors,
            opaque_name=opaque_name,
            optimizer=optimizer,
        )
    except tf1_opaque.OpaqueRestoreError as err:
        raise CheckpointError(path, err.problems) from err


def load_into(
    path: str | os.PathLike[str],
    objects: Sequence[Checkpointable],
    tensors: Mapping[str, Tensor],
    buffers: Mapping[int, Tensor] | None = None,
) -> None:
    """Load checked ``tensors`` into every object, all or nothing (see :func:`restore`).

    ``buffers`` maps ``id`` of an object's opaque buffer to its final value, which is written
    instead of the buffer the canonical tensors give (a TF1 file's exact biases)."""
    plans = [(obj, obj.checkpoint_shapes()) for obj in objects]
    # An object with a dimension the file decides (an unbuilt cell) is built by its load, which
    # cannot be undone: try it on a copy first, and load it last.
    open_ended = [any(None in shape for shape in shapes.values()) for _, shapes in plans]
    for (obj, shapes), trial in zip(plans, open_ended):
        if trial:
            try:
                replica = copy.deepcopy(obj)
            except Exception:  # not copyable: its own load still checks before it builds
                continue
            _load_one(path, replica, shapes, tensors, [], buffers)
    order = [p for p, t in zip(plans, open_ended) if not t]
    order += [p for p, t in zip(plans, open_ended) if t]
    # Each object's own load is all-or-nothing; those loaded before the last are snapshotted
    # (before anything is written), so that a later refusal puts them back.
    snapshots = [_snapshot(obj) for obj, _ in order[:-1]]
    for i, (obj, shapes) in enumerate(order):
        _load_one(path, obj, shapes, tensors, snapshots[:i], buffers)


def _load_one(
    path: str | os.PathLike[str],
    obj: Checkpointable,
    names: Iterable[str],
    tensors: Mapping[str, Tensor],
    snapshots: Sequence[list[tuple[Tensor, Tensor]]],
    buffers: Mapping[int, Tensor] | None = None,
) -> None:
    opaque = _opaque_of(obj)
    try:
        if buffers and opaque is not None and id(opaque) in buffers:
            with torch.no_grad():
                opaque.copy_(buffers[id(opaque)])
        else:
            obj.checkpoint_load({name: tensors[name] for name in names})
    except Exception as err:
        with torch.no_grad():
            for snapshot in snapshots:
                for tensor, old in snapshot:
                    tensor.copy_(old)
        raise CheckpointError(
            path, [f"{type(obj).__name__} refused the tensors: {_first_line(err)}"]
        ) from err


def _opaque_of(obj: Checkpointable) -> Tensor | None:
    """A layer's ``opaque_kernel`` or a saveable's ``opaque_params`` (None for a cell)."""
    for attr in ("opaque_kernel", "opaque_params"):
        value = getattr(obj, attr, None)
        if isinstance(value, Tensor):
            return value
    return None


def _snapshot(obj: Checkpointable) -> list[tuple[Tensor, Tensor]]:
    """(tensor, copy) of everything a load may write in ``obj``."""
    held: list[Tensor]
    if isinstance(obj, nn.Module):
        held = list(obj.parameters())
    else:
        opaque = _opaque_of(obj)
        held = [opaque] if opaque is not None else []
    with torch.no_grad():
        return [(t, t.detach().clone()) for t in held]


def _fits(got: tuple[int, ...], want: Shape) -> bool:
    return len(got) == len(want) and all(w is None or g == w for g, w in zip(got, want))


def _shape(shape: Shape) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


# -- the models of the metadata -----------------------------------------------------------------

_STACK_KINDS = {"multi_rnn_cell": ("cells",), "stack_bidirectional_rnn": ("cells_fw", "cells_bw")}
_MODEL_KINDS = (None, "layer", "cudnn_saveable")


def describe(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The model descriptions stored in a checkpoint's metadata (``[]`` if it has none).

    Only the header is read. ``models`` must be a JSON list of objects of the kinds ``save``
    writes, with their keys and types; anything else raises :class:`CheckpointError`.
    """
    p = Path(path)
    with open_regular(p) as f:
        _, metadata = _read_header(f, p)
    _check_format(p, metadata)
    text = metadata.get("models")
    if text is None:
        return []

    def bad(reason: str) -> CheckpointError:
        return CheckpointError(
            p, f"metadata 'models' {reason}; the file is corrupt or was not written by cudnn_rnn."
        )

    try:
        models = json.loads(text)
    except RecursionError:
        raise bad("nests too deeply") from None
    except ValueError as err:
        raise bad(f"is not JSON ({_first_line(err)})") from None
    if not isinstance(models, list) or not all(isinstance(m, dict) for m in models):
        raise bad("is not a JSON list of objects")
    for i, model in enumerate(models):
        problem = _model_problem(model)
        if problem is not None:
            raise bad(f"entry {i}: {problem}")
    return models


def _model_problem(model: dict[str, Any]) -> str | None:
    """What is wrong with one entry of ``models``, or None."""
    kind = model.get("kind")
    scope = model.get("scope")
    if scope is not None and not isinstance(scope, str):
        return f"scope must be a string or null, got {_quote(scope)}"
    if kind in _STACK_KINDS:
        for key in _STACK_KINDS[kind]:
            cells = model.get(key)
            if not isinstance(cells, list) or not all(isinstance(c, dict) for c in cells):
                return f"{key} must be a list of objects, got {_quote(cells)}"
        return None
    if kind not in _MODEL_KINDS:
        return f"unknown kind {_quote(kind)}"
    choices = (("rnn_mode", MODES), ("direction", DIRECTIONS))
    for key, allowed in choices:
        if model.get(key) not in allowed:
            return f"{key} must be one of {', '.join(allowed)}, got {_quote(model.get(key))}"
    if model.get("input_mode", INPUT_MODES[0]) not in INPUT_MODES:
        return f"input_mode must be one of {', '.join(INPUT_MODES)}"
    for key in ("num_layers", "num_units", "input_size", "num_proj"):
        value = model.get(key)
        if key == "num_proj" and value is None:
            continue
        if type(value) is not int or value < 1:
            return f"{key} must be an integer >= 1, got {_quote(value)}"
    return None
