"""Our safetensors checkpoint files: the reader that believes nothing, the writer, the models.

A checkpoint is one safetensors file of TF canonical tensors with a metadata block (``format``,
``format_version``, ``models``), specified in ``docs/checkpoint_format.md``. A file whose
models compute cuDNN's math is version 1, byte for byte what it always was; one that holds a
variant (a model entry's ``variant``) is version 2, which a reader of version 1 refuses as newer
than itself, so no older reader takes a variant for cuDNN's math. :func:`open_checked`
opens one and checks its whole header against the file (see "Reading" there) before any tensor is
made; :func:`load_file` reads every tensor, :func:`describe` the models of the metadata, and
:func:`write` writes one atomically. Any problem raises :class:`CheckpointError` naming the file;
:mod:`cudnn_rnn.checkpoint` fits what is read to the objects and re-exports that error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import io
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch
from safetensors.torch import save as st_save
from torch import Tensor

from cudnn_rnn.core.constants import CUDNN_RNN_BIDIRECTION, DIRECTIONS, INPUT_MODES, MODES
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.core.variant import CUDNN, Variant
from cudnn_rnn.io import atomic
from cudnn_rnn.io.files.escaping import clip, first_line, quote
from cudnn_rnn.io.files.json_loader import load_json
from cudnn_rnn.io.files.opening import FormatError, NotRegularFile, open_regular
from cudnn_rnn.io.files.sniffing import KINDS, SAFETENSORS, UNKNOWN, sniff_file

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MAX_LISTED_PROBLEMS",
    "PLAIN_FORMAT_VERSION",
    "VARIANT_FORMAT_VERSION",
    "CheckpointError",
    "SafetensorsFile",
    "describe",
    "described_variants",
    "gc_paused",
    "load_file",
    "open_checked",
    "write",
]

FORMAT = "cudnn_rnn.canonical"
#: The version of a file whose every model computes cuDNN's math (what every file was before
#: variants).
PLAIN_FORMAT_VERSION = 1
#: The version of a file that holds a variant (a model entry's ``variant``): readers of version
#: 1 refuse it as newer than themselves rather than read the variant as cuDNN's math.
VARIANT_FORMAT_VERSION = 2
#: The newest version this library reads (and writes).
FORMAT_VERSION = VARIANT_FORMAT_VERSION

#: At most this many problems are spelled out in an error message.
MAX_LISTED_PROBLEMS = 20
#: The largest header read, in bytes: the safetensors format's own bound (the reference
#: implementation refuses larger ones); a header of 200,000 tensors takes about 20 MB.
MAX_HEADER = 100_000_000


class CheckpointError(FormatError):
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


def write(
    path: str | os.PathLike[str], tensors: Mapping[str, Tensor], models: Sequence[Mapping[str, Any]]
) -> None:
    """Write ``tensors`` (contiguous, on the CPU) and the descriptions of ``models`` to ``path``
    as a checkpoint of this format, atomically; the folder is created if missing. The version
    is :data:`VARIANT_FORMAT_VERSION` where a model has a ``variant``, else
    :data:`PLAIN_FORMAT_VERSION`."""
    variant = any("variant" in m for m in models)
    metadata = {
        "format": FORMAT,
        "format_version": str(VARIANT_FORMAT_VERSION if variant else PLAIN_FORMAT_VERSION),
        "models": json.dumps(list(models), sort_keys=True),
    }
    data = st_save(dict(tensors), metadata=metadata)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic.write_file(path, data)


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
_MAX_DIMS = 64


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


#: What ``Path.exists`` takes for "nothing there": no such file, a file where a folder should be,
#: a symbolic link loop.
def _open(path: Path) -> io.BufferedReader:
    """``path`` opened for reading if it is a regular file (CheckpointError for anything else;
    a path that cannot be opened is the :class:`~cudnn_rnn.errors.FileAccessError` of
    :func:`files.open_regular`, a ``FileNotFoundError`` where nothing is there)."""
    try:
        return open_regular(path)
    except NotRegularFile as err:
        raise CheckpointError(
            path, f"{err.kind}, not a regular file; give the path of a checkpoint file."
        ) from None


class SafetensorsFile:
    """An open checkpoint whose header and format were checked against the file: ``entries``
    (name -> where its bytes are, its shape and dtype) and ``metadata``; nothing else is read
    until :meth:`read` is asked for tensors."""

    def __init__(
        self, f: io.BufferedReader, path: Path, entries: dict[str, _Entry], metadata: dict[str, str]
    ) -> None:
        self._file = f
        self.path = path
        self.entries = entries
        self.metadata = metadata

    def claims(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """Name -> (shape, dtype name) of every tensor, as the checked header says."""
        return {n: (e.shape, e.dtype_name) for n, e in self.entries.items()}

    def read(self, names: Iterable[str]) -> dict[str, Tensor]:
        """The tensors ``names`` (each in ``entries``), each read into its own buffer."""
        return _read_tensors(self._file, self.path, self.entries, names)


@contextlib.contextmanager
def open_checked(path: str | os.PathLike[str]) -> Iterator[SafetensorsFile]:
    """The checkpoint ``path``, open and its header checked (:class:`CheckpointError` for any
    problem); it is closed when the block ends."""
    p = Path(path)
    with _open(p) as f:
        entries, metadata = _read_header(f, p)
        _check_format(p, metadata)
        yield SafetensorsFile(f, p, entries, metadata)


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
        # Most likely another format altogether (a torch zip's first bytes read as a length):
        # say which, when its content tells.
        kind = sniff_file(f)
        other = "" if kind in (UNKNOWN, SAFETENSORS) else f"; it is {KINDS[kind]}"
        raise bad(f"the header length {header_len} exceeds the {size - 8} bytes after it{other}")
    if header_len > MAX_HEADER:  # refused before it is read
        raise bad(f"its header is {header_len} bytes, more than the {MAX_HEADER} read")
    raw = f.read(header_len)
    if len(raw) != header_len:
        raise bad("the file shrank while it was read")
    with gc_paused():
        return _parse_header(raw, 8 + header_len, size, bad)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
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
    # Size and depth checked before it is parsed; UTF-8, as the format says.
    header = load_json(raw, lambda reason: bad(f"its header {reason}"), max_size=MAX_HEADER)
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
            raise bad(f"tensor {quote(name)} is not an object of dtype, shape and data_offsets")
        code = info.get("dtype")
        shape = info.get("shape")
        offsets = info.get("data_offsets")
        if shape is None or offsets is None:
            raise bad(f"tensor {quote(name)} is not an object of dtype, shape and data_offsets")
        known = info_of(code) if type(code) is str else None
        if known is None:
            raise bad(f"tensor {quote(name)} has unknown dtype {quote(code)}")
        if type(shape) is not list or len(shape) > _MAX_DIMS:
            raise bad(f"tensor {quote(name)} has shape {quote(shape)}, not a list")
        count = 1
        for d in shape:
            if type(d) is not int or d < 0:
                raise bad(
                    f"tensor {quote(name)} has shape {quote(shape)}, not a list of at most "
                    f"{_MAX_DIMS} non-negative integers"
                )
            count *= d  # Python ints: no overflow
        if type(offsets) is not list or len(offsets) != 2:
            raise bad(f"tensor {quote(name)} has data_offsets {quote(offsets)}, not a pair")
        begin, end = offsets
        if type(begin) is not int or type(end) is not int or not 0 <= begin <= end <= data_len:
            raise bad(
                f"tensor {quote(name)} has data_offsets {quote(offsets)}, not [begin, end] "
                f"within the {data_len} data bytes"
            )
        nbytes = count * known[2]
        if nbytes != end - begin:
            needs = f"{nbytes} bytes" if nbytes < 10**30 else "more bytes than the file holds"
            raise bad(
                f"tensor {quote(name)} of shape {quote(shape)} and dtype {code} needs "
                f"{needs}, but its data_offsets span {end - begin}"
            )
        entries[name] = _Entry(start + begin, start + end, tuple(shape), known[0], known[1])
    position = start
    for begin, end in sorted((e.begin, e.end) for e in entries.values()):
        if begin != position:
            name = next(n for n, e in entries.items() if (e.begin, e.end) == (begin, end))
            where = "overlaps the tensor before it" if begin < position else "leaves a gap"
            raise bad(f"tensor {quote(name)} {where} (data_offsets must tile the data)")
        position = end
    if position != size:
        raise bad(f"its tensors end at byte {position} of {size}; the file is truncated or padded")
    return entries


def _check_format(path: Path, metadata: Mapping[str, str]) -> None:
    fmt = metadata.get("format")
    if fmt is not None and fmt != FORMAT:
        raise CheckpointError(path, f"format {quote(fmt)} is not {FORMAT!r}.")
    version = metadata.get("format_version")
    if version is None:
        return
    # ASCII only: "²".isdigit() is True, and int() refuses it.
    if not (version.isascii() and version.isdigit() and len(version) <= 18):
        raise CheckpointError(
            path, f"format_version {quote(version)} is not a number; the file is corrupt."
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
    with open_checked(path) as checked:
        return checked.read(checked.entries), checked.metadata


# -- the models of the metadata -----------------------------------------------------------------

_STACK_KINDS = {"multi_rnn_cell": ("cells",), "stack_bidirectional_rnn": ("cells_fw", "cells_bw")}
_MODEL_KINDS = (None, "layer", "cudnn_saveable")


def describe(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The model descriptions stored in a checkpoint's metadata (``[]`` if it has none).

    Only the header is read. ``models`` must be a JSON list of objects of the kinds ``save``
    writes, with their keys and types; anything else raises :class:`CheckpointError`.
    """
    p = Path(path)
    with open_checked(p) as checked:
        text = checked.metadata.get("models")
        version = int(checked.metadata.get("format_version", PLAIN_FORMAT_VERSION))
    if text is None:
        return []

    def bad(reason: str) -> CheckpointError:
        return CheckpointError(
            p, f"metadata 'models' {reason}; the file is corrupt or was not written by cudnn_rnn."
        )

    models = load_json(text, bad)  # (inside the header: its size is bounded)
    if not isinstance(models, list) or not all(isinstance(m, dict) for m in models):
        raise bad("is not a JSON list of objects")
    for i, model in enumerate(models):
        problem = _model_problem(model)
        if problem is not None:
            raise bad(f"entry {i}: {problem}")
        if "variant" in model:
            _check_variant(p, i, model, version)
    return models


def _check_variant(path: Path, index: int, model: dict[str, Any], version: int) -> None:
    """A model entry's ``variant``: held by a file of :data:`VARIANT_FORMAT_VERSION` or newer,
    every field one this version knows with a value it takes, and one the model's mode and
    direction have; else one line of :class:`CheckpointError`."""
    where = f"metadata 'models' entry {index}: variant"
    value = model["variant"]
    if version < VARIANT_FORMAT_VERSION:
        raise CheckpointError(
            path,
            f"{where} in a file of format_version {version}; a variant needs format_version "
            f"{VARIANT_FORMAT_VERSION} (readers that know no variant read version "
            f"{PLAIN_FORMAT_VERSION} as cuDNN's math); "
            "the file is corrupt or was not written by cudnn_rnn.",
        )
    if type(value) is not dict:
        raise CheckpointError(
            path, f"{where} must be an object of fields, got {quote(value)}; the file is corrupt."
        )
    known = {f.name for f in dataclasses.fields(Variant)}
    unknown = sorted(set(value) - known)
    if unknown:
        raise CheckpointError(
            path,
            f"{where} has field(s) {', '.join(quote(k, 40) for k in unknown[:5])} that this "
            f"version of cudnn_rnn does not know (it knows {', '.join(sorted(known))}); upgrade "
            "cudnn_rnn, or the file is corrupt.",
        )
    try:
        variant = Variant.from_dict(value)
        # Sizes checked by _model_problem; nothing is allocated.
        spec = RNNSpec(
            model["rnn_mode"], model["num_layers"], model["num_units"], model["input_size"],
            model.get("input_mode", INPUT_MODES[0]), model["direction"], model.get("num_proj"),
            variant=variant, owner="variant",
        )  # fmt: skip
    except (TypeError, ValueError) as err:
        raise CheckpointError(
            path,
            f"{where} {quote(value, 200)} does not describe a model ({clip(first_line(err))}); "
            "the file is corrupt.",
        ) from None
    if (spec.mode, spec.variant) != (model["rnn_mode"], variant):
        raise CheckpointError(
            path,
            f"{where} {quote(value, 200)} is not as cudnn_rnn writes it (it is rnn_mode "
            f"{spec.mode!r} with {spec.variant.describe() or 'no variant'}); the file is corrupt.",
        )


def described_variants(path: str | os.PathLike[str]) -> dict[tuple[str | None, bool], Variant]:
    """What each model of a checkpoint computes, by ``(scope, bidirectional)`` (which sets its
    names apart): the variant of a model entry that has one, cuDNN's math (:data:`CUDNN`) for
    every other entry (a cell stack included). A file of :data:`PLAIN_FORMAT_VERSION` holds no
    variant (:func:`describe` refuses one there): ``{}``, its ``models`` not read."""
    with open_checked(path) as checked:
        version = int(checked.metadata.get("format_version", PLAIN_FORMAT_VERSION))
    if version < VARIANT_FORMAT_VERSION:
        return {}
    out: dict[tuple[str | None, bool], Variant] = {}
    for model in describe(path):
        kind = model.get("kind")
        bidirectional = (
            kind == "stack_bidirectional_rnn"
            if kind in _STACK_KINDS
            else model.get("direction") == CUDNN_RNN_BIDIRECTION
        )
        variant = Variant.from_dict(model["variant"]) if "variant" in model else CUDNN
        out[model.get("scope") or None, bidirectional] = variant
    return out


def _model_problem(model: dict[str, Any]) -> str | None:
    """What is wrong with one entry of ``models``, or None."""
    kind = model.get("kind")
    scope = model.get("scope")
    if scope is not None and not isinstance(scope, str):
        return f"scope must be a string or null, got {quote(scope)}"
    if kind in _STACK_KINDS:
        for key in _STACK_KINDS[kind]:
            cells = model.get(key)
            if not isinstance(cells, list) or not all(isinstance(c, dict) for c in cells):
                return f"{key} must be a list of objects, got {quote(cells)}"
        return None
    if kind not in _MODEL_KINDS:
        return f"unknown kind {quote(kind)}"
    choices = (("rnn_mode", MODES), ("direction", DIRECTIONS))
    for key, allowed in choices:
        if model.get(key) not in allowed:
            return f"{key} must be one of {', '.join(allowed)}, got {quote(model.get(key))}"
    if model.get("input_mode", INPUT_MODES[0]) not in INPUT_MODES:
        return f"input_mode must be one of {', '.join(INPUT_MODES)}"
    for key in ("num_layers", "num_units", "input_size", "num_proj"):
        value = model.get(key)
        if key == "num_proj" and value is None:
            continue
        if type(value) is not int or value < 1:
            return f"{key} must be an integer >= 1, got {quote(value)}"
    return None
