"""Keras 2 / tf.keras 1.x HDF5 files (``.h5``) -> our layers, without TensorFlow or Keras.

Reads what ``model.save("m.h5")`` (weights + the ``model_config`` JSON) and
``model.save_weights("w.h5")`` (weights only) wrote:

=====================================  ==========  =========================================
Keras 2 layer                          our mode    weights (per direction), Keras gate order
=====================================  ==========  =========================================
``CuDNNLSTM``                          lstm        ``kernel [I, 4H]``, ``recurrent_kernel [H, 4H]``,
                                                   ``bias [8H]`` = (``bW``, ``bR``); i, f, c, o
``CuDNNGRU``                           gru         ``[I, 3H]``, ``[H, 3H]``, ``bias [6H]``; z, r, h
``LSTM``                               lstm        ``[I, 4H]``, ``[H, 4H]``, ``bias [4H]``
``GRU``                                gru         ``[I, 3H]``, ``[H, 3H]``, ``bias [2, 3H]``
                                                   (``reset_after=False``: ``[3H]``)
``SimpleRNN``                          rnn_*       ``[I, H]``, ``[H, H]``, ``bias [H]``
``Bidirectional`` of one               as inside   forward weights, then backward
=====================================  ==========  =========================================

The CuDNN layers hand each gate's ``[I, H]`` column slice of ``kernel`` to cuDNN as the bytes of
its ``[H, I]`` matrix (a reshape, not a transpose) and each ``[H, H]`` slice of
``recurrent_kernel`` unchanged; the plain layers compute ``x @ kernel``, so theirs are transposed.
Keras 2's own loader (``_convert_rnn_weights``) converts between the two the same way. A plain
layer's one bias per gate becomes ``bW`` (``bR = 0``); ``use_bias=False`` gives zero biases.
Every conversion is lossless. Keras 2.0 named a Bidirectional's backward weights ``kernel_1``,
``recurrent_kernel_1`` and ``bias_1`` (both layers in one name scope): read as the backward ones.

What each layer computes beyond cuDNN's math is its spec's
:class:`~cudnn_rnn.core.variant.Variant` (:mod:`.variants`: the activations, with the
``hard_sigmoid`` of the Keras the file's ``keras_version`` names; ``GRU(reset_after=False)``;
``go_backwards=True`` outside ``Bidirectional``, a layer never merged with its neighbours; the
``Bidirectional``'s ``merge_mode``); its record says the variant in ``details["variant"]`` and in
its first note. Refused, naming the layer and the setting (every setting of every layer that
cannot be read, in one error), is what we do not compute: an activation we have no function for,
``merge_mode=None``, a ``Bidirectional`` whose directions compute different math (or whose
forward layer reads backward), and RNN layers of other classes (``RNN(cell)``,
``ConvLSTM2D``...). Settings that do not change the weights or the inference math are accepted:
``unit_forget_bias`` (only an initializer), ``return_sequences``/``return_state``,
``time_major``, ``unroll``, ``implementation``, ``dropout``/``recurrent_dropout`` (training only;
our layers get no dropout) and ``stateful`` (carrying the state from batch to batch is then the
caller's job: pass ``initial_state``). Masks (a ``Masking`` layer) are not part of the weights:
pass ``sequence_lengths``. Other layers (``Dense``, ``Embedding``...) are skipped.

Nested models (a ``Sequential`` or ``Functional`` model used as a layer of another, at any depth)
are read: their RNN layers come in the outer model's order, named by their path
(``encoder/core/gru``). Keras stores all of a nested model's weights flattened under the outer
layer's group, each weight name starting with its own layer's name (``encoder`` holds
``lstm/lstm_cell/kernel:0``, ``gru/gru_cell/kernel:0``...); the config says which layers there are.
A weights-only file has no config, so a group whose weight names start with several layer names
is taken for a nested model and each of those is named ``group/name`` (the levels between are not
recorded: ``encoder/gru``); a Bidirectional's own ``forward_...``/``backward_...`` names are its
two directions, never two layers.

A weights-only file records no activations: its layer classes come from the weight shapes (a CuDNN
layer's bias is twice a plain one's; a GRU's ``[3H]`` bias is ``reset_after=False``'s). CuDNN
layers always compute cuDNN's math; plain ``LSTM``, ``GRU`` and ``SimpleRNN`` layers are refused
unless ``assume_cudnn_activations=True`` says you know they used Keras's default activations: tanh
and the gates the file's Keras defaulted to (``reset_after=True`` for a GRU without bias; a
``Bidirectional``'s merge mode, which it does not record either, Keras's ``"concat"``), with
SimpleRNNs computing ``simple_rnn_activation``: ``"tanh"`` (Keras's default) or ``"relu"`` for
all of them, or a ``{layer name: "tanh" | "relu"}`` mapping (unlisted SimpleRNNs: ``"tanh"``).

Those default gates are ``hard_sigmoid`` for the plain ``LSTM`` and ``GRU`` layers of a
weights-only file whose ``keras_version`` is below 2.3 (``"2.2.4"``, tf.keras's ``"2.2.4-tf"``...),
is not a version, or is missing (the rule and its sources: :mod:`.variants`): they are read so,
and each record's note says it, naming the version, unless ``confirm_keras_version`` repeats the
file's ``keras_version`` (``"unknown"`` for a file without one): your word that they were built
with ``recurrent_activation="sigmoid"``. Whole-model files are judged by their config, which
records every activation, whatever the version; CuDNN layers and SimpleRNNs have no recurrent
activation to choose.

``merge_layers=True`` returns each run of consecutive compatible RNN layers as one multi-layer
layer of ours, named ``"first+second+..."``. Compatible: same mode, same variant (no
``go_backwards``: its outputs are in processing order), same units, all unidirectional or all
``Bidirectional`` (one merge mode; each reads the merged output of the one before), one weight
dtype, the same ``time_major``, and ``return_sequences=True`` in all but the last. Consecutive,
within one model (never across a nested model's boundary): in a ``Sequential``, the next layer,
with nothing in between (a ``Dropout`` or ``Dense`` ends a run); in a ``Functional`` model, the
one layer whose only input is the previous layer's first output, with no other call argument
(no ``initial_state``), the previous layer called once and its outputs used nowhere else (not by
another layer, not as a model output: merging would hide them). A weights-only file records none
of this, so ``merge_layers`` refuses it; ``layers`` picks are merged only with picked neighbours.

:func:`find_rnns` lists the RNN layers as :class:`~cudnn_rnn.io.found.FoundRNN` records and
:func:`read` returns one as data (:class:`~cudnn_rnn.io.found.ReadRNN`: its spec and
canonical tensors), which :func:`cudnn_rnn.load` builds a layer from; :func:`read_layers` returns
them all, which :func:`cudnn_rnn.converters.keras_files.from_keras_h5` builds layers from.

A file is checked before anything is built: it must be a regular file (a FIFO is refused before it
is opened), its weights must have the names, ranks, dtypes and shapes its layers imply, they must
live inside the file (no external or virtual datasets) and their bytes must fit in it. Problems
with the file raise :class:`KerasH5Error`. The ``model_config`` JSON is read by the one bounded
loader (:func:`cudnn_rnn.io.files.load_json`: at most :data:`MAX_CONFIG` bytes, nesting at most
:data:`cudnn_rnn.io.files.MAX_JSON_DEPTH` deep). ``h5py`` is an optional dependency
(``pip install cudnn-rnn[h5]``).

h5py never opens the file in this process: HDF5 trusts a file's bytes, and a corrupt one can
make it loop forever or crash (SIGSEGV). A separate reader process (:mod:`.h5_child`, a
fresh Python importing only NumPy and h5py: about 0.1 s per call) reads the names, attributes,
dataset descriptions and the RNN weights' values, in native byte order (a big-endian ``>f4``
gives the values Keras's loader gives), under a time limit (``time_limit=``; by default
``TIME_LIMIT_BASE`` plus ``TIME_LIMIT_PER_MIB`` per MiB of the file) and, on POSIX, an address
space limit; it sends plain data back (JSON and raw array bytes, checked here), and the layers are
built from that. The reader process never outlives its caller for long, even one killed without
warning (SIGKILL, the OOM killer): it sets its own CPU time limit (twice the time limit and 10 s
more) and, on Linux, the kernel kills it when its parent dies. A loop, a crash or any h5py
error there becomes a :class:`KerasH5Error` naming the file and saying what happened.

The reader is four modules, each standing on those before it: :mod:`.h5_file` runs the reader
process and checks what it sends (the file as groups and datasets, walked by hard links);
:mod:`.h5_layers` finds the layers the file holds (nested models' in their place, and which
feeds which); :mod:`.h5_plans` judges what each RNN layer becomes, or why it cannot. This module
is the front: its functions and their options, merging runs of layers (``merge_layers``), and
building the canonical tensors.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from cudnn_rnn.core.gates import GATE_ORDERS
from cudnn_rnn.core.layout import INPUT, INPUT_BIAS, RECURRENT, RECURRENT_BIAS
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.core.variant import Variant
from cudnn_rnn.io import files
from cudnn_rnn.io.found import FoundRNN, ReadRNN
from cudnn_rnn.io.gate_blocks import BlockKey
from cudnn_rnn.io.keras.h5_file import (
    KerasH5Error,
    _Dataset,
    _dataset,
    _Failed,
    _File,
    _read_file,
)
from cudnn_rnn.io.keras.h5_layers import (
    _WRAPPER,
    MAX_CONFIG,
    _group,
    _layer_names,
    _weight_names,
    _weights_root,
)
from cudnn_rnn.io.keras.h5_plans import (
    SIGMOID_DEFAULT_SINCE,
    UNKNOWN_KERAS_VERSION,
    _Found,
    _Options,
    _Plan,
    _plans,
    _refusal,
    _Refused,
)
from cudnn_rnn.io.keras.layout import canonical_of_blocks, keras_blocks

__all__ = [
    "MAX_CONFIG",
    "SIGMOID_DEFAULT_SINCE",
    "UNKNOWN_KERAS_VERSION",
    "KerasH5Error",
    "describe_keras_h5",
    "find_rnns",
    "keras_h5_weights",
    "read",
    "read_layers",
]

OWNER = "from_keras_h5"
#: The reader process's time limit: this many seconds, plus ``TIME_LIMIT_PER_MIB`` per MiB of
#: the file (30 s for a small file, about 2 minutes for 1 GiB); ``time_limit=`` overrides it.
#: Read at each call (by the Keras 3 reader's too): set them here to change the default.
TIME_LIMIT_BASE = 30.0
TIME_LIMIT_PER_MIB = 0.1


@dataclass(frozen=True)
class _Stack:
    """Consecutive Keras RNN layers merged into one multi-layer layer of ours (``merge_layers``)."""

    plans: tuple[_Plan, ...]

    @property
    def name(self) -> str:
        return "+".join(p.name for p in self.plans)

    def config(self) -> dict[str, Any]:
        first = self.plans[0].config()
        classes = list(dict.fromkeys(p.keras_class for p in self.plans))
        notes = list(dict.fromkeys(n for p in self.plans for n in p.notes))
        return {
            "layer": self.name,
            "keras_layers": [p.name for p in self.plans],
            "keras_class": "+".join(classes),
            "rnn_mode": first["rnn_mode"],
            "num_layers": len(self.plans),
            "num_units": first["num_units"],
            "input_size": first["input_size"],
            "direction": first["direction"],
            **({"variant": first["variant"]} if "variant" in first else {}),
            **({"notes": notes} if notes else {}),
        }


def read_layers(
    path: str | os.PathLike[str],
    *,
    assume_cudnn_activations: bool = False,
    confirm_keras_version: str | None = None,
    simple_rnn_activation: str | Mapping[str, str] = "tanh",
    layers: Sequence[str] | None = None,
    merge_layers: bool = False,
    time_limit: float | None = None,
) -> dict[str, tuple[RNNSpec, list[Tensor], list[Tensor]]]:
    """The canonical ``(spec, weights, biases)`` of the RNN layers of a Keras 2 ``.h5`` file,
    ``{Keras layer name: data}`` in the model's order: what
    :func:`cudnn_rnn.converters.keras_files.from_keras_h5` builds our layers from (its options,
    its checks and refusals)."""
    options = _options(assume_cudnn_activations, confirm_keras_version, simple_rnn_activation)
    _check_merge_layers(merge_layers)
    h5 = _read(path, True, time_limit)
    found = _plans(h5, options)
    if layers is not None:
        known = [p.name for p in found.plans]
        missing = [name for name in layers if name not in known]
        if missing:
            raise ValueError(
                f"{h5.who} has no RNN layer {missing[0]!r}; its RNN layers: {known or 'none'}."
            )
        found = found.only(layers)
    refused = [p for p in found.plans if isinstance(p, _Refused)]
    if refused:
        raise ValueError(_refusal(h5, refused))
    plans = [p for p in found.plans if isinstance(p, _Plan)]
    _check_sizes(h5, plans)
    units = _merged(h5, found, plans) if merge_layers else [_Stack((p,)) for p in plans]
    return {unit.name: _canonical(h5, unit.plans) for unit in units}


def describe_keras_h5(
    path: str | os.PathLike[str],
    *,
    assume_cudnn_activations: bool = False,
    confirm_keras_version: str | None = None,
    simple_rnn_activation: str | Mapping[str, str] = "tanh",
    merge_layers: bool = False,
    time_limit: float | None = None,
) -> list[dict[str, Any]]:
    """What each RNN layer of the file becomes (its ``layer`` name, Keras class, mode, units,
    input size, direction, and where it is not cuDNN's math its ``variant``
    (:meth:`~cudnn_rnn.core.variant.Variant.as_dict`) and ``notes``) or, under ``"refused"``, why
    it cannot; with ``merge_layers=True``, merged runs are one entry that adds ``keras_layers``
    and ``num_layers``. No weight is read.
    The file is read by a separate process, as for :func:`read_layers`."""
    options = _options(assume_cudnn_activations, confirm_keras_version, simple_rnn_activation)
    _check_merge_layers(merge_layers)
    h5 = _read(path, False, time_limit)
    found = _plans(h5, options)
    if not merge_layers:
        return [p.config() for p in found.plans]
    plans = [p for p in found.plans if isinstance(p, _Plan)]
    units = {unit.plans[0].name: unit for unit in _merged(h5, found, plans)}
    out = []
    for p in found.plans:
        if isinstance(p, _Refused):
            out.append(p.config())
        elif p.name in units:
            unit = units[p.name]
            out.append(unit.config() if len(unit.plans) > 1 else p.config())
    return out


def find_rnns(path: str | os.PathLike[str], **options: Any) -> list[FoundRNN]:
    """Every RNN layer of the file (nested models' by their path), what it becomes (its variant
    in ``details["variant"]`` and its first note) and, where it cannot be read, every reason;
    ``options`` as :func:`describe_keras_h5`'s. No weight is read."""
    return [found_record(entry, files.HDF5) for entry in describe_keras_h5(path, **options)]


def read(
    path: str | os.PathLike[str],
    name: str,
    *,
    assume_cudnn_activations: bool = False,
    confirm_keras_version: str | None = None,
    simple_rnn_activation: str | Mapping[str, str] = "tanh",
    merge_layers: bool = False,
    time_limit: float | None = None,
) -> ReadRNN:
    """The RNN layer ``name`` of the file (as :func:`find_rnns` lists it, ``"a+b"`` for a
    merged run with ``merge_layers=True``) as pure data: its spec (its variant included) and
    canonical tensors, in the file's dtype, with its record's notes (the variant; a default the
    file's Keras version decided). Only that layer must be readable; options as
    :func:`read_layers`'s."""
    options = _options(assume_cudnn_activations, confirm_keras_version, simple_rnn_activation)
    _check_merge_layers(merge_layers)
    h5 = _read(path, True, time_limit)
    found = _plans(h5, options)
    plans = [p for p in found.plans if isinstance(p, _Plan)]
    units = _merged(h5, found, plans) if merge_layers else [_Stack((p,)) for p in plans]
    unit = next((u for u in units if u.name == name), None)
    if unit is None:
        refused = [p for p in found.plans if isinstance(p, _Refused) and p.name == name]
        if refused:
            raise ValueError(_refusal(h5, refused))
        known = [u.name for u in units] + [p.name for p in found.plans if isinstance(p, _Refused)]
        raise ValueError(f"{h5.who} has no RNN layer {name!r}; its RNN layers: {known or 'none'}.")
    _check_sizes(h5, list(unit.plans))
    return read_record(h5, unit, files.HDF5)


def found_record(entry: Mapping[str, Any], kind: str) -> FoundRNN:
    """The :class:`FoundRNN` of one entry of :func:`describe_keras_h5` (or of the Keras 3
    reader's), in a file of ``kind``: a variant of cuDNN's math is in ``details["variant"]``
    (:meth:`~cudnn_rnn.core.variant.Variant.as_dict`) and said in its first note."""
    name = str(entry["layer"])
    if "refused" in entry:
        reasons = tuple(str(r) for r in entry["reasons"])
        where = f"Keras layer {name!r}"
        return FoundRNN(name, where, kind, None, computable=False, reasons=reasons)
    details = {k: v for k, v in entry.items() if k in ("keras_class", "keras_layers", "variant")}
    notes = tuple(str(n) for n in entry.get("notes", ()))
    if "variant" in entry:
        words = Variant.from_dict(entry["variant"]).describe()
        notes = (f"it computes {entry['rnn_mode']} with a variant: {words}", *notes)
    return FoundRNN(
        name,
        f"Keras layer {name!r} ({files.escape(str(entry['keras_class']))})",
        kind,
        str(entry["rnn_mode"]),
        num_layers=int(entry.get("num_layers", 1)),
        num_units=int(entry["num_units"]),
        input_size=int(entry["input_size"]),
        direction=str(entry["direction"]),
        details=details,
        notes=notes,
    )


def read_record(h5: _File, unit: _Stack, kind: str) -> ReadRNN:
    """One checked layer (or merged run) of a file read with its values, as pure data."""
    spec, weights, biases = _canonical(h5, unit.plans)
    found = found_record(unit.plans[0].config() if len(unit.plans) == 1 else unit.config(), kind)
    return ReadRNN(found, spec, weights, biases, found.notes)


def keras_h5_weights(
    path: str | os.PathLike[str], *, time_limit: float | None = None
) -> dict[str, tuple[tuple[int, ...], str]]:
    """Every weight of every layer (``layer/weight name``) with its shape and dtype (in native
    byte order: ``float32`` for a big-endian ``>f4``, as Keras reads it); no data is read. The
    file is read by a separate process, as for :func:`read_layers`."""
    h5 = _read(path, False, time_limit)
    root = _weights_root(h5)
    out = {}
    for layer in _layer_names(h5, root):
        group = _group(h5, root, layer)
        for name in _weight_names(h5, group, layer):
            ds = _dataset(h5, group, name, layer)
            out[f"{layer}/{name}" if not name.startswith(f"{layer}/") else name] = (
                ds.shape,
                ds.dtype,
            )
    return out


def _activations(given: str | Mapping[str, str]) -> Mapping[str, str]:
    """``simple_rnn_activation`` as a mapping of layer names to activations (every name
    answers: a string applies to all, a mapping's missing names are ``"tanh"``)."""
    table = dict(given) if isinstance(given, Mapping) else {}
    values = list(table.values()) if isinstance(given, Mapping) else [given]
    bad = [v for v in values if v not in ("tanh", "relu")]
    if bad:
        raise ValueError(
            f"{OWNER}: simple_rnn_activation must be 'tanh' or 'relu' (or a mapping of layer "
            f"names to them), got {bad[0]!r}."
        )
    default = "tanh" if isinstance(given, Mapping) else given
    return defaultdict(lambda: default, table)


def _options(
    assume: bool, confirm: str | None, simple_rnn_activation: str | Mapping[str, str]
) -> _Options:
    if confirm is not None and not isinstance(confirm, str):
        raise TypeError(
            f"{OWNER}: confirm_keras_version must be the file's keras_version as a str (or "
            f"None), got {type(confirm).__name__}."
        )
    if confirm is not None and not assume:
        raise ValueError(
            f"{OWNER}: confirm_keras_version={confirm!r} confirms assume_cudnn_activations=True "
            "for a file written by an old Keras; pass both."
        )
    return _Options(bool(assume), confirm, _activations(simple_rnn_activation))


def _check_merge_layers(merge_layers: bool) -> None:
    if not isinstance(merge_layers, bool):
        raise TypeError(
            f"{OWNER}: merge_layers must be True or False, got {type(merge_layers).__name__}."
        )


def _read(
    path: str | os.PathLike[str],
    values: bool,
    time_limit: float | None,
    *,
    paths: Sequence[str] | None = None,
    owner: str = OWNER,
    shown: str | None = None,
) -> _File:
    """What the reader process saw of the file (:func:`.h5_file._read_file`: the parts a
    Keras reader looks at, or the ``paths``; the RNN weights' values when ``values``), under
    ``time_limit`` or this module's default."""
    return _read_file(
        path,
        values,
        time_limit,
        base=TIME_LIMIT_BASE,
        per_mib=TIME_LIMIT_PER_MIB,
        owner=owner,
        paths=paths,
        shown=shown,
    )


# -- merging consecutive layers (merge_layers=True) ------------------------------------------


def _merged(h5: _File, found: _Found, plans: list[_Plan]) -> list[_Stack]:
    """The plans as runs of consecutive compatible layers, each run in the model's order."""
    if found.links is None:
        raise ValueError(
            f"{h5.who}: merge_layers=True needs to know which layer feeds which, "
            "and a weights-only file (model.save_weights) does not record it: read the "
            "whole-model file (model.save), or leave merge_layers out and stack the layers "
            "yourself (cudnn_rnn.convert.from_keras stacks built Keras layers)."
        )
    fed_by = {b: a for a, b in found.links.items()}
    runs: list[list[_Plan]] = []
    ends: dict[str, list[_Plan]] = {}  # the last layer of a run -> the run
    for plan in plans:
        run = ends.pop(fed_by.get(plan.name, ""), None)
        if run is None or not _stackable(run[-1], plan, found):
            run = []
            runs.append(run)
        run.append(plan)
        ends[plan.name] = run
    return [_Stack(tuple(run)) for run in runs]


def _stackable(a: _Plan, b: _Plan, found: _Found) -> bool:
    """Whether ``b``, fed by ``a`` alone, can be ``a``'s next layer in one layer of ours."""
    first, second = found.leaves[a.name].entry, found.leaves[b.name].entry
    if first is None or second is None:  # pragma: no cover - a config gives every layer one
        return False
    return (
        a.mode == b.mode
        and a.variant == b.variant
        # its outputs in processing order: the next layer would read them reversed
        and a.variant.time != "go_backwards"
        and a.num_units == b.num_units
        and len(a.directions) == len(b.directions)
        and b.input_size == a.output_width
        and len(a.dtypes) == 1
        and a.dtypes == b.dtypes
        and _rnn_setting(first, "return_sequences") is True
        and bool(_rnn_setting(first, "time_major")) == bool(_rnn_setting(second, "time_major"))
    )


def _rnn_setting(entry: dict[str, Any], key: str) -> Any:
    """A setting of an RNN layer's config (of its inner layer for a Bidirectional wrapper)."""
    config = entry["config"]
    if entry.get("class_name") == _WRAPPER:
        inner = config.get("layer")
        config = inner.get("config", {}) if isinstance(inner, dict) else {}
    return config.get(key, False)


# -- building --------------------------------------------------------------------------------


def _check_sizes(h5: _File, plans: list[_Plan]) -> None:
    """Nothing was read unless the bytes the weights claim fit in the file (Keras stores them
    uncompressed), so a hostile shape cannot make either process allocate."""
    claimed = sum(
        ds.nbytes
        for p in plans
        for d in p.directions
        for ds in (d.kernel, d.recurrent, d.bias)
        if ds is not None
    )
    # The reader process read no values if all the RNN layers' weights together did not fit.
    claimed = max(claimed, h5.claimed)
    if claimed > h5.size:
        raise KerasH5Error(
            f"{h5.who}: its RNN weights claim {claimed} bytes but the file has "
            f"{h5.size}; it is truncated or corrupt."
        )


def _values(h5: _File, ds: _Dataset) -> np.ndarray:
    if isinstance(ds.values, _Failed):
        raise h5.corrupt(ds.values)
    if ds.values is None:  # pragma: no cover - read for every RNN layer whose weights fit
        raise KerasH5Error(f"{h5.who}: the reader process sent no values to build.")
    return ds.values


def _canonical(h5: _File, plans: tuple[_Plan, ...]) -> tuple[RNNSpec, list[Tensor], list[Tensor]]:
    """``(spec, weights, biases)`` of one Keras layer, or of a run of them stacked."""
    blocks: dict[BlockKey, Tensor] = {}
    for index, plan in enumerate(plans):
        for d, direction in enumerate(plan.directions):
            kernel = _values(h5, direction.kernel)
            recurrent = _values(h5, direction.recurrent)
            bias = None if direction.bias is None else _values(h5, direction.bias)
            if plan.cudnn and bias is not None:  # a CuDNN layer always has a bias (checked)
                made = _cudnn_blocks(kernel, recurrent, bias, plan.mode)
            else:
                made = keras_blocks(kernel, recurrent, bias)
            blocks.update({(index, d, kind): value for kind, value in made.items()})
    first = plans[0]
    return canonical_of_blocks(first.mode, blocks, len(plans), len(first.directions), first.variant)


def _cudnn_blocks(
    kernel: np.ndarray, recurrent: np.ndarray, bias: np.ndarray, mode: str
) -> dict[str, Tensor]:
    """A CuDNN layer's blocks, Keras gate order, oriented ``[G*H, ...]`` like ours.

    CuDNNLSTM/CuDNNGRU flatten each gate's ``[in, H]`` column slice in C order and cuDNN reads
    those bytes as its ``[H, in]`` matrix: a reshape, which is not a transpose (Keras 2's loader
    undoes it with ``kernel.T.reshape(kernel.shape, order="F")``). A ``[H, H]`` slice reshapes to
    itself. The bias is ``bW`` (all gates) then ``bR``.
    """
    gates = len(GATE_ORDERS["keras"][mode])
    h, width = recurrent.shape[0], kernel.shape[0]
    arrays = {
        INPUT: np.concatenate([k.reshape(h, width) for k in np.split(kernel, gates, axis=1)]),
        RECURRENT: np.concatenate(np.split(recurrent, gates, axis=1)),
        INPUT_BIAS: np.split(bias, 2)[0],
        RECURRENT_BIAS: np.split(bias, 2)[1],
    }
    return {kind: torch.from_numpy(np.ascontiguousarray(a)) for kind, a in arrays.items()}
