"""Canonical-format checkpoints: one safetensors file of TF canonical tensors plus metadata.

``save(path, objects)`` writes every tensor of every object under its TF canonical name (the names
``tf.contrib.cudnn_rnn``'s saveables write), never the opaque buffer, so a file saved from a fused
layer restores into compatible cells and back. ``restore(path, objects)`` checks the whole file
against what the objects expect and reports every missing, unexpected or misshapen tensor in one
error before it changes anything. The file format is specified in ``docs/checkpoint_format.md``.

TF1 checkpoints (``PREFIX.index`` + ``PREFIX.data-*``, TensorFlow not needed) are read by
``restore(PREFIX, objects)`` and written by ``save(PREFIX, objects, format="tf1")``. TF's saver
also stores the opaque kernel, ``global_step`` and optimizer slots; restoring from a TF1 file
therefore ignores tensors nobody asked for unless ``strict=True``.

Objects are layers, saveables, cell containers (``MultiRNNCell``, ``BidirectionalStack``), or any
``nn.Module`` that contains them (its checkpointable submodules are used, outermost first).

A layer or saveable of a variant (:class:`~cudnn_rnn.core.variant.Variant`: a model that is not
cuDNN's math) is saved to our files only: their metadata holds the variant (format version 2),
an LSTM's peepholes are three more tensors per layer-direction. A TF1 checkpoint holds TF's
cuDNN-compatible cells, which compute cuDNN's math only: ``format="tf1"`` refuses a variant, and
so does restoring a TF1 checkpoint into one. A restore compares what each object computes with
what the file says its model computes, and refuses where they differ.

This module fits files to objects; it parses no file itself: the safetensors files are read and
written by :mod:`cudnn_rnn.io.safetensors` (whose :class:`CheckpointError` it re-exports),
TF1 checkpoints by :mod:`cudnn_rnn.io.tf1`.

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

import copy
import dataclasses
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from cudnn_rnn.checkpointable import Checkpointable, Shape
from cudnn_rnn.converters import tf1_legacy as tf1_legacy
from cudnn_rnn.converters import tf1_opaque as tf1_opaque
from cudnn_rnn.core import tf_names
from cudnn_rnn.core.variant import CUDNN, Variant
from cudnn_rnn.io import safetensors
from cudnn_rnn.io.files import Claims
from cudnn_rnn.io.files.escaping import first_line, quote
from cudnn_rnn.io.once import once
from cudnn_rnn.io.safetensors import (
    FORMAT,
    FORMAT_VERSION,
    MAX_LISTED_PROBLEMS,
    CheckpointError,
    describe,
    load_file,
)
from cudnn_rnn.io.tf1 import bundle as tf1_bundle
from cudnn_rnn.io.tf1 import prefix as tf1_prefix
from cudnn_rnn.io.tf1 import state as tf1_state
from cudnn_rnn.io.tf1 import writer as tf1_writer

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MAX_LISTED_PROBLEMS",
    "CheckpointError",
    "check_expected",
    "describe",
    "is_tf_checkpoint",
    "load_file",
    "load_into",
    "read_claims",
    "read_expected",
    "restore",
    "save",
]


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

    ``format="safetensors"`` (default) writes one file with metadata (a model's variant
    included); ``format="tf1"`` (or ``"tf"``, its older name) writes a TF1 bundle
    ``PREFIX.index`` + ``PREFIX.data-00000-of-00001`` that TensorFlow reads, and refuses
    (ValueError, before anything is written) an object that computes a variant.
    """
    if format not in ("safetensors", "tf1", "tf"):
        raise ValueError(
            f"checkpoint.save: format must be 'safetensors' or 'tf1' ('tf' is its older name), "
            f"got {format!r}."
        )
    format = "tf1" if format == "tf" else format
    found = checkpointables(objects)
    if format == "tf1":
        for obj in found:
            variant = _variant_of(obj)
            if not variant.is_cudnn:
                raise ValueError(
                    f"checkpoint: a TF1 checkpoint holds TF's cuDNN-compatible cells, which "
                    f"compute cuDNN's math only, and {type(obj).__name__} computes a variant "
                    f"({variant.describe()}): save it to .safetensors (format='safetensors', the "
                    "default), which holds the variant."
                )
    tensors: dict[str, Tensor] = {}
    for obj in found:
        for name, tensor in obj.checkpoint_entries().items():
            if name in tensors:
                raise ValueError(
                    f"checkpoint: two objects write {name!r}; give their layers or "
                    "saveables different scopes."
                )
            tensors[name] = tensor.detach().to("cpu").contiguous()
    if format == "tf1":
        _save_tf(path, tensors)
        return
    safetensors.write(path, tensors, [obj.checkpoint_spec() for obj in found])


def _save_tf(prefix: str | os.PathLike[str], tensors: dict[str, Tensor]) -> None:
    # NumPy has no bfloat16: such tensors travel as float32 (exact) and are marked for the writer.
    bf16 = [name for name, t in tensors.items() if t.dtype == torch.bfloat16]
    arrays = {name: (t.float() if name in bf16 else t).numpy() for name, t in tensors.items()}
    tf1_writer.write_bundle(str(prefix), arrays, bfloat16=bf16)


def is_tf_checkpoint(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names a TF1 bundle (its prefix, or its ``.index`` file)."""
    text = str(path)
    # os.path.isfile: False, not an OSError, when PATH.index is longer than a name may be.
    return text.endswith(".index") or os.path.isfile(text + ".index")


# -- reading ------------------------------------------------------------------------------------

#: The dtypes restore accepts: those every checkpointable object casts to its own.
FLOATING_DTYPES = ("float16", "bfloat16", "float32", "float64")


def read_claims(path: str | os.PathLike[str]) -> Claims:
    """Name -> (shape, dtype name) of every tensor of a safetensors file or TF1 checkpoint, from
    its checked header or index alone (no tensor data is read)."""
    if is_tf_checkpoint(path):
        return _tf_claims(_tf_bundle(path))
    with safetensors.open_checked(path) as checked:
        return checked.claims()


def _tf_bundle(path: str | os.PathLike[str]) -> Any:
    """The checked index of a TF1 checkpoint (``tf1_bundle.BundleIndex``), read once per call
    of the functions here (once per operation inside :func:`cudnn_rnn.io.once.one_operation`)
    and handed to every step that needs it."""
    name = os.fspath(path)

    def parse() -> Any:
        try:  # the reader refuses FIFOs, devices and directories before it opens them
            return tf1_bundle.open_bundle(tf1_prefix.bundle_prefix(name))
        except tf1_bundle.TF1BundleError as err:
            raise CheckpointError(path, first_line(err)) from err

    # Once per operation (cudnn_rnn.io.once): the steps of one load share the checked index.
    return once("tf1 index", tf1_prefix.bundle_prefix(name), parse)


def _tf_claims(bundle: Any) -> Claims:
    return {n: (e.shape, e.dtype) for n, e in bundle.entries.items()}


def _tf_data(
    path: str | os.PathLike[str], bundle: Any, names: Sequence[str], *, read: bool = True
) -> dict[str, Tensor]:
    """The tensors ``names`` of a TF1 checkpoint, already checked against its index; with
    ``read=False`` only the data shards are checked against the index (nothing is read)."""
    try:
        if not read:
            tf1_bundle.check_bundle(bundle, names)
            return {}
        arrays = tf1_bundle.read_bundle(bundle, names=names)
    except tf1_bundle.TF1BundleError as err:
        raise CheckpointError(path, first_line(err)) from err
    return {n: torch.from_numpy(a) for n, a in arrays.items()}


def _check_claims(
    path: str | os.PathLike[str], expected: Mapping[str, Shape], claims: Claims, strict: bool
) -> None:
    """Every name, shape and dtype of ``claims`` against ``expected``; one error lists all."""
    problems = [
        f"missing tensor {quote(name)} (expected shape {_shape(shape)})"
        for name, shape in expected.items()
        if name not in claims
    ]
    problems += [
        f"tensor {quote(name)} has shape {_shape(claims[name][0])}, expected {_shape(shape)}"
        for name, shape in expected.items()
        if name in claims and not _fits(claims[name][0], shape)
    ]
    problems += [
        f"tensor {quote(name)} has dtype {claims[name][1]}, expected a floating dtype "
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
            f"unexpected tensor {quote(name)} (shape {_shape(claims[name][0])})"
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
    with safetensors.open_checked(path) as checked:
        with safetensors.gc_paused():
            _check_claims(checked.path, expected, checked.claims(), strict is None or strict)
        return checked.read(expected) if read else {}


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
    A TF1 checkpoint directory, or its ``checkpoint`` state file, means the latest checkpoint it
    names, as ``tf.train.latest_checkpoint`` reads it (:func:`cudnn_rnn.io.tf1.state.resolve`).

    Every expected name must be in the file with a matching shape and a floating dtype. With
    ``strict`` the file may hold no other tensors; the default is strict for our files and not
    for TF1 checkpoints, whose saver also stores the opaque kernel, ``global_step`` and optimizer
    slots. Values are cast to each object's dtype. Every object is checked before any is
    written, and one :class:`CheckpointError` lists every problem; if an object still refuses
    its tensors while loading, the objects loaded before it are put back as they were.

    TF1 training checkpoints (:mod:`cudnn_rnn.converters.tf1_opaque`): where the file also holds a
    layer's opaque kernel (``opaque_name``, else the layer's ``<scope>/<name>/opaque_kernel``,
    else the only ``*/opaque_kernel`` of a fitting size; ``False``: ignore it), its layout is
    discovered from the canonical tensors and every weight and both biases of every gate come
    from it exactly. ``optimizer`` (Adam, SGD with momentum, RMSprop, Adagrad holding the
    layer's ``opaque_kernel``) gets its state from TF's slots of that variable.

    Older TF1 names (:mod:`cudnn_rnn.converters.tf1_legacy`) are read as aliases of the canonical
    ones: TF 1.3's ``multi_rnn_cell/...`` names, whose exact biases ``bias_cudnn_*`` are used
    exactly, and TF 1.8-1.15's object-based keys of a unidirectional ``CudnnLSTM``, at
    ``object_path`` (e.g. ``"model/lstm"``) or the one path of the file that fits.

    What each object computes must be what the file says its model computes (matched by scope
    and direction): a variant in our files' metadata, cuDNN's math in a file without one and in
    every TF1 checkpoint. Where they differ, nothing is restored.
    """
    path = tf1_state.resolve(path)
    found = checkpointables(objects)
    expected: dict[str, Shape] = {}
    for obj in found:
        expected.update(obj.checkpoint_shapes())
    if not is_tf_checkpoint(path):
        if object_path is not None:
            raise CheckpointError(
                path, "object_path= reads a TF1 object-based checkpoint; this file is not TF1."
            )
        _check_math(path, found, safetensors.described_variants(path), tf1=False)
        tensors = read_expected(path, expected, strict=strict)
        _opaque_plan(path, None, found, tensors, optimizer, opaque_name)  # refuses TF1 options
        load_into(path, found, tensors)
        return
    _check_math(path, found, {}, tf1=True)
    bundle = _tf_bundle(path)  # the index is parsed once for every step below
    claims = _tf_claims(bundle)
    where = tf1_legacy.file_names(expected, claims, found, object_path)
    if where.problems:
        raise CheckpointError(path, where.problems)
    wanted = where.expected(expected)
    try:
        _check_claims(path, wanted, claims, strict=False)  # strict: below, once the plan is known
    except CheckpointError as err:
        hint = _scope_hint(wanted, claims)
        if hint is None:
            raise
        more = err.count - len(err.problems)
        raise CheckpointError(path, [*err.problems, hint], more=more) from None
    read = _tf_data(path, bundle, list(wanted))
    tensors = {name: read[where.names[name]] for name in expected}
    problems: list[str] = []
    legacy = tf1_legacy.exact_biases(found, tensors, {n: read[n] for n in where.extra}, problems)
    if problems:
        raise CheckpointError(path, problems)
    exact = _opaque_plan(path, bundle, found, tensors, optimizer, opaque_name)
    if strict:  # the opaque kernel, its slots and beta powers the restore uses are expected too
        used = {n: claims[n][0] for n in (exact.used if exact is not None else ())}
        _check_claims(path, {**wanted, **used}, claims, strict=True)
    # Every final buffer is known before anything is written, and each is written once: a
    # layer's exact buffer from its opaque kernel, else from TF 1.3's exact biases, else from
    # the canonical tensors (each summed bias split in halves).
    buffers = {id(param): value for param, value in legacy.writes}
    if exact is not None:
        buffers.update({id(param): value for param, value in exact.writes})
    load_into(path, found, tensors, buffers)
    if exact is not None:
        exact.apply_states()


def _variant_of(obj: Checkpointable) -> Variant:
    """What ``obj`` computes: its ``checkpoint_spec``'s variant, cuDNN's math without one."""
    described = obj.checkpoint_spec().get("variant")
    return CUDNN if described is None else Variant.from_dict(described)


def _check_math(
    path: str | os.PathLike[str],
    objects: Sequence[Checkpointable],
    held: Mapping[tuple[str | None, bool], Variant],
    *,
    tf1: bool,
) -> None:
    """CheckpointError where an object computes other than the file's model of its scope and
    direction (``held``: :func:`~cudnn_rnn.io.safetensors.described_variants`; empty for a file
    that holds no variant and for a TF1 checkpoint, ``tf1``)."""
    problems = []
    for obj in objects:
        spec = obj.checkpoint_spec()
        kind = spec.get("kind")
        if kind in ("multi_rnn_cell", "stack_bidirectional_rnn"):
            bidirectional = kind == "stack_bidirectional_rnn"
        else:
            bidirectional = spec.get("direction") == "bidirectional"
        ours = _variant_of(obj)
        theirs = held.get((spec.get("scope") or None, bidirectional), CUDNN)
        if ours == theirs:
            continue
        if tf1:
            problems.append(
                f"{type(obj).__name__} computes {_math(ours)}, and a TF1 checkpoint holds TF's "
                "cuDNN-compatible cells, which compute cuDNN's math only; restore it from a "
                ".safetensors checkpoint, which holds the variant"
            )
        else:
            problems.append(
                f"{type(obj).__name__} computes {_math(ours)}, and the file's model of its "
                f"scope and direction computes {_math(theirs)}; restore into a layer of the "
                "file's model (cudnn_rnn.load builds one)"
            )
    if problems:
        raise CheckpointError(path, problems)


def _math(variant: Variant) -> str:
    return "cuDNN's math" if variant.is_cudnn else f"a variant ({variant.describe()})"


def _scope_hint(expected: Mapping[str, Shape], claims: Claims) -> str | None:
    """Where the file holds the expected canonical names under another scope (a TF 1.x layer
    built by its first call inside ``variable_scope("model")`` saves under
    ``model/cudnn_lstm/rnn/...``, the layer's own scope, not ``model/rnn/...``): the scope to
    pass, in words; None when no such scope holds them all."""
    scopes: set[str] | None = None
    for name in expected:
        parsed = tf_names.parse(name)
        if parsed is None:
            return None
        tail = "/" + str(dataclasses.replace(parsed, scope=None))
        here = {c[: -len(tail)] for c in claims if c.endswith(tail) and c != name}
        scopes = here if scopes is None else scopes & here
        if not scopes:
            return None
    if not scopes or len(scopes) != 1:
        return None
    (scope,) = scopes
    return (
        f"the file holds every one of these tensors under the scope {quote(scope)} (a TF 1.x "
        f"layer built by its first call names its tensors under its own scope): build the "
        f"layer with scope={scope!r}"
    )


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
            path, [f"{type(obj).__name__} refused the tensors: {first_line(err)}"]
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
