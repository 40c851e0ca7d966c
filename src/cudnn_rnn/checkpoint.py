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

import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import Tensor, nn

from cudnn_rnn.checkpointable import Checkpointable, Shape

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


class CheckpointError(ValueError):
    """A checkpoint that does not fit the objects; ``problems`` lists every mismatch."""

    def __init__(self, path: str, problems: list[str]) -> None:
        self.problems = problems
        lines = "\n  ".join(problems)
        super().__init__(
            f"checkpoint {path}: {len(problems)} problem(s), nothing was restored:\n  {lines}"
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
    _atomic_write(Path(path), data)


def _atomic_write(path: Path, data: bytes) -> None:
    # Write beside the target and rename, so a crash never leaves a half-written checkpoint.
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _save_tf(prefix: str | os.PathLike[str], tensors: dict[str, Tensor]) -> None:
    from cudnn_rnn.formats import tf1_bundle

    # NumPy has no bfloat16: such tensors travel as float32 (exact) and are marked for the writer.
    bf16 = [name for name, t in tensors.items() if t.dtype == torch.bfloat16]
    arrays = {name: (t.float() if name in bf16 else t).numpy() for name, t in tensors.items()}
    tf1_bundle.write_bundle(str(prefix), arrays, bfloat16=bf16)


def is_tf_checkpoint(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names a TF1 bundle (its prefix, or its ``.index`` file)."""
    text = str(path)
    return text.endswith(".index") or Path(text + ".index").is_file()


def _load_tf(path: str | os.PathLike[str], wanted: Iterable[str]) -> dict[str, Tensor]:
    from cudnn_rnn.formats import tf1_bundle

    prefix = tf1_bundle.bundle_prefix(str(path))
    index = tf1_bundle.read_bundle_index(prefix)
    names = [n for n in wanted if n in index]
    arrays = tf1_bundle.read_bundle(prefix, names=names)
    shapes = {n: e.shape for n, e in index.items()}
    out = {n: torch.from_numpy(a) for n, a in arrays.items()}
    # Tensors not read still count for the report (their shapes come from the index).
    return {**{n: torch.empty(shapes[n], device="meta") for n in index if n not in out}, **out}


def load_file(path: str | os.PathLike[str]) -> tuple[dict[str, Tensor], dict[str, str]]:
    """The tensors and the metadata block of a checkpoint file, with its format checked."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"checkpoint: no file at {p}.")
    data = p.read_bytes()
    try:
        tensors = st_load(data)
    except (SafetensorError, ValueError, RuntimeError) as err:
        raise ValueError(f"checkpoint {p}: not a readable safetensors file ({err}).") from err
    header_len = int.from_bytes(data[:8], "little")
    metadata = json.loads(data[8 : 8 + header_len]).get("__metadata__", {}) or {}
    fmt = metadata.get("format")
    if fmt is not None and fmt != FORMAT:
        raise ValueError(f"checkpoint {p}: format {fmt!r} is not {FORMAT!r}.")
    version = metadata.get("format_version")
    if version is not None and (not version.isdigit() or int(version) > FORMAT_VERSION):
        raise ValueError(
            f"checkpoint {p}: format_version {version!r} is newer than this "
            f"library's ({FORMAT_VERSION}); upgrade cudnn_rnn."
        )
    return tensors, metadata


def restore(path: str | os.PathLike[str], objects: Any, *, strict: bool | None = None) -> None:
    """Load ``path`` (safetensors file or TF1 prefix) into ``objects`` in place; all-or-nothing.

    Every expected name must be in the file with a matching shape. With ``strict`` the file may
    hold no other tensors; the default is strict for our files and not for TF1 checkpoints, whose
    saver also stores the opaque kernel, ``global_step`` and optimizer slots. Values are cast to
    each object's dtype.
    """
    found = checkpointables(objects)
    expected: dict[str, Shape] = {}
    for obj in found:
        expected.update(obj.checkpoint_shapes())
    tf = is_tf_checkpoint(path)
    tensors = _load_tf(path, expected) if tf else load_file(path)[0]
    if strict is None:
        strict = not tf
    problems = [
        f"missing tensor {name!r} (expected shape {_shape(shape)})"
        for name, shape in expected.items()
        if name not in tensors
    ]
    problems += [
        f"tensor {name!r} has shape {_shape(tuple(tensors[name].shape))}, expected {_shape(shape)}"
        for name, shape in expected.items()
        if name in tensors and not _fits(tuple(tensors[name].shape), shape)
    ]
    if strict:
        problems += [
            f"unexpected tensor {name!r} (shape {_shape(tuple(t.shape))})"
            for name, t in tensors.items()
            if name not in expected
        ]
    if problems:
        raise CheckpointError(str(path), problems)
    for obj in found:
        obj.checkpoint_load({name: tensors[name] for name in obj.checkpoint_shapes()})


def _fits(got: tuple[int, ...], want: Shape) -> bool:
    return len(got) == len(want) and all(w is None or g == w for g, w in zip(got, want))


def _shape(shape: Shape) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def describe(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The model descriptions stored in a checkpoint's metadata (``[]`` if it has none)."""
    _, metadata = load_file(path)
    models: list[dict[str, Any]] = json.loads(metadata.get("models", "[]"))
    return models
