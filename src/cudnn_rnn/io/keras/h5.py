"""Keras 2 / tf.keras 1.x HDF5 files (``.h5``) -> our layers, without TensorFlow or Keras.

Reads what ``model.save("m.h5")`` (weights + the ``model_config`` JSON) and
``model.save_weights("w.h5")`` (weights only) wrote, for the layers cuDNN's math computes:

=====================================  ==========  =========================================
Keras 2 layer                          our mode    weights (per direction), Keras gate order
=====================================  ==========  =========================================
``CuDNNLSTM``                          lstm        ``kernel [I, 4H]``, ``recurrent_kernel [H, 4H]``,
                                                   ``bias [8H]`` = (``bW``, ``bR``); i, f, c, o
``CuDNNGRU``                           gru         ``[I, 3H]``, ``[H, 3H]``, ``bias [6H]``; z, r, h
``LSTM``                               lstm        ``[I, 4H]``, ``[H, 4H]``, ``bias [4H]``
``GRU(reset_after=True)``              gru         ``[I, 3H]``, ``[H, 3H]``, ``bias [2, 3H]``
``SimpleRNN`` (tanh / relu)            rnn_*       ``[I, H]``, ``[H, H]``, ``bias [H]``
``Bidirectional`` (``concat``) of one  as inside   forward weights, then backward
=====================================  ==========  =========================================

The CuDNN layers hand each gate's ``[I, H]`` column slice of ``kernel`` to cuDNN as the bytes of
its ``[H, I]`` matrix (a reshape, not a transpose) and each ``[H, H]`` slice of
``recurrent_kernel`` unchanged; the plain layers compute ``x @ kernel``, so theirs are transposed.
Keras 2's own loader (``_convert_rnn_weights``) converts between the two the same way. Plain
LSTM/SimpleRNN keep one bias, which becomes ``bW`` (``bR = 0``); ``use_bias=False`` gives zero
biases. Every conversion is lossless.

What cuDNN cannot compute is refused, naming the layer and the setting (every setting of every
layer that cannot be read, in one error): ``recurrent_activation``
other than ``sigmoid`` (``hard_sigmoid`` was Keras's default before 2.3), ``activation`` other
than ``tanh`` (``tanh``/``relu`` for SimpleRNN), ``GRU(reset_after=False)`` (the default of
tf.keras 1.x), ``Bidirectional`` merge modes other than ``concat`` (or whose forward layer reads
backward), and RNN layers of other classes (``RNN(cell)``, ``ConvLSTM2D``...). A layer with
``go_backwards=True`` outside ``Bidirectional`` is cuDNN's math on the input reversed in time: it
is read, never merged with its neighbours, and its record says how to feed it
(:data:`cudnn_rnn.io.keras.layout.GO_BACKWARDS_NOTE`). Settings
that do not change the weights or the inference math are accepted: ``unit_forget_bias`` (only an
initializer), ``return_sequences``/``return_state``, ``time_major``, ``unroll``,
``implementation``, ``dropout``/``recurrent_dropout`` (training only; our layers get no dropout)
and ``stateful`` (carrying the state from batch to batch is then the caller's job: pass
``initial_state``). Masks (a ``Masking`` layer) are not part of the weights: pass
``sequence_lengths``. Other layers (``Dense``, ``Embedding``...) are skipped.

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
layer's bias is twice a plain one's). CuDNN layers always compute cuDNN's math; plain ``LSTM``,
``GRU`` and ``SimpleRNN`` layers are refused unless ``assume_cudnn_activations=True`` says you
know they used tanh with sigmoid gates (and ``reset_after=True`` for a GRU without bias), with
SimpleRNNs computing ``simple_rnn_activation``: ``"tanh"`` (Keras's default) or ``"relu"`` for
all of them, or a ``{layer name: "tanh" | "relu"}`` mapping (unlisted SimpleRNNs: ``"tanh"``).

That word is not enough for the plain ``LSTM`` and ``GRU`` layers of a weights-only file whose
``keras_version`` is below 2.3 (``"2.2.4"``, tf.keras's ``"2.2.4-tf"``...), is not a version, or
is missing: before Keras 2.3 their ``recurrent_activation`` defaulted to ``hard_sigmoid``, so a
model built with the defaults would load silently and compute something else (see "the Keras that
wrote the file" below for the rule and its sources). They are refused, naming the version and the
layers, unless ``confirm_keras_version`` repeats the file's ``keras_version`` (``"unknown"`` for a
file without one): your second word that they were built with ``recurrent_activation="sigmoid"``.
Whole-model files are judged by their config, which records every activation, whatever the
version; CuDNN layers and SimpleRNNs have no recurrent activation to choose.

``merge_layers=True`` returns each run of consecutive compatible RNN layers as one multi-layer
layer of ours, named ``"first+second+..."``. Compatible: same mode, same units, all
unidirectional or all ``Bidirectional(merge_mode="concat")``, one weight dtype, the same
``time_major``, and ``return_sequences=True`` in all but the last. Consecutive, within one model
(never across a nested model's boundary): in a ``Sequential``, the next layer, with nothing in
between (a ``Dropout`` or ``Dense`` ends a run); in a ``Functional`` model, the one layer whose
only input is the previous layer's first output, with no other call argument (no
``initial_state``), the previous layer called once and its outputs used nowhere else (not by
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
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from cudnn_rnn.core.constants import CUDNN_GRU, CUDNN_LSTM, CUDNN_RNN_RELU, CUDNN_RNN_TANH
from cudnn_rnn.core.gates import GATE_ORDERS
from cudnn_rnn.core.layout import INPUT, INPUT_BIAS, RECURRENT, RECURRENT_BIAS
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.io import files
from cudnn_rnn.io.found import FoundRNN, ReadRNN
from cudnn_rnn.io.gate_blocks import BlockKey
from cudnn_rnn.io.keras.layout import GO_BACKWARDS_NOTE, canonical_of_blocks, keras_blocks

__all__ = [
    "KerasH5Error",
    "describe_keras_h5",
    "find_rnns",
    "keras_h5_weights",
    "read",
    "read_layers",
]

OWNER = "from_keras_h5"
#: Keras class -> (our mode for LSTM/GRU, or None for SimpleRNN; written by a CuDNN layer).
_CLASSES: dict[str, tuple[str | None, bool]] = {
    "CuDNNLSTM": (CUDNN_LSTM, True),
    "CuDNNGRU": (CUDNN_GRU, True),
    "LSTM": (CUDNN_LSTM, False),
    "GRU": (CUDNN_GRU, False),
    "SimpleRNN": (None, False),
}
_WRAPPER = "Bidirectional"
_MODEL_CLASSES = ("Sequential", "Functional", "Model")
_FLOAT_SIZES = (2, 4, 8)
#: The largest ``model_config`` read, in bytes (a model of thousands of layers takes a few MiB),
#: as Keras 3's ``config.json``; it nests at most :data:`cudnn_rnn.io.files.MAX_JSON_DEPTH` deep.
MAX_CONFIG = 64 << 20

#: What a Keras 2 reader assumes for a setting its config leaves out: the defaults of the oldest
#: Keras that wrote such files (hard_sigmoid before 2.3, reset_after=False in tf.keras 1.x), so
#: that a config without them is never read as cuDNN's math by mistake.
KERAS2_DEFAULTS: Mapping[str, Any] = {"recurrent_activation": "hard_sigmoid", "reset_after": False}


class KerasH5Error(files.FormatError):
    """A file that is not a readable Keras 2 HDF5 model or weights file."""


@dataclass(frozen=True)
class _Direction:
    """One direction's weights, as dataset descriptions."""

    kernel: _Dataset
    recurrent: _Dataset
    bias: _Dataset | None


@dataclass(frozen=True)
class _Refused:
    """An RNN layer of the file that cannot be read, with every reason why: each a sentence that
    names the setting and says what to do."""

    name: str
    shown: str | None  # the Keras class as shown ("LSTM", "Bidirectional(GRU)"); None: unknown
    problems: tuple[str, ...]

    @property
    def label(self) -> str:
        return f"{self.name!r}" + (f" ({self.shown})" if self.shown else "")

    def config(self) -> dict[str, Any]:
        return {"layer": self.name, "refused": " ".join(self.problems), "reasons": self.problems}


@dataclass(frozen=True)
class _Plan:
    """One RNN layer of the file, checked: what it becomes and where its weights are."""

    name: str
    keras_class: str
    mode: str
    cudnn: bool
    directions: tuple[_Direction, ...]
    go_backwards: bool = False  # a layer alone that reads its input backward (see keras.py)

    @property
    def num_units(self) -> int:
        return int(self.directions[0].recurrent.shape[0])

    @property
    def input_size(self) -> int:
        return int(self.directions[0].kernel.shape[0])

    @property
    def dtypes(self) -> set[str]:
        weights = [ds for d in self.directions for ds in (d.kernel, d.recurrent, d.bias)]
        return {ds.dtype for ds in weights if ds is not None}

    def config(self) -> dict[str, Any]:
        return {
            "layer": self.name,
            "keras_class": self.keras_class,
            "rnn_mode": self.mode,
            "num_units": self.num_units,
            "input_size": self.input_size,
            "direction": "bidirectional" if len(self.directions) == 2 else "unidirectional",
            **({"go_backwards": True} if self.go_backwards else {}),
        }


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
        return {
            "layer": self.name,
            "keras_layers": [p.name for p in self.plans],
            "keras_class": "+".join(classes),
            "rnn_mode": first["rnn_mode"],
            "num_layers": len(self.plans),
            "num_units": first["num_units"],
            "input_size": first["input_size"],
            "direction": first["direction"],
        }


@dataclass(frozen=True)
class _Options:
    """What the caller says about what the file does not record."""

    assume: bool  # plain layers of a weights-only file used cuDNN's activations
    confirm: str | None  # ... even though its keras_version defaulted them to hard_sigmoid
    simple_activation: Mapping[str, str]


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
    input size, direction, and ``go_backwards: True`` for a layer that reads its input
    backward) or, under ``"refused"``, why it cannot; with ``merge_layers=True``,
    merged runs are one entry that adds ``keras_layers`` and ``num_layers``. No weight is read.
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
    """Every RNN layer of the file (nested models' by their path), what it becomes and, where it
    cannot be read, every reason; ``options`` as :func:`describe_keras_h5`'s. No weight is read.
    A ``go_backwards=True`` layer says how to feed it in ``details["note"]``."""
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
    merged run with ``merge_layers=True``) as pure data: its spec and canonical tensors, in the
    file's dtype, with what a user must know to feed it (``go_backwards``) in ``notes``. Only
    that layer must be readable; options as :func:`read_layers`'s."""
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
    reader's), in a file of ``kind``."""
    name = str(entry["layer"])
    if "refused" in entry:
        reasons = tuple(str(r) for r in entry["reasons"])
        where = f"Keras layer {name!r}"
        return FoundRNN(name, where, kind, None, computable=False, reasons=reasons)
    details = {k: v for k, v in entry.items() if k in ("keras_class", "keras_layers")}
    if entry.get("go_backwards"):
        details.update(go_backwards=True, note=GO_BACKWARDS_NOTE)
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
        notes=(GO_BACKWARDS_NOTE,) if entry.get("go_backwards") else (),
    )


def read_record(h5: _File, unit: _Stack, kind: str) -> ReadRNN:
    """One checked layer (or merged run) of a file read with its values, as pure data."""
    spec, weights, biases = _canonical(h5, unit.plans)
    found = found_record(unit.plans[0].config() if len(unit.plans) == 1 else unit.config(), kind)
    notes = (GO_BACKWARDS_NOTE,) if any(p.go_backwards for p in unit.plans) else ()
    return ReadRNN(found, spec, weights, biases, notes)


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


# -- reading the file: in a child process ----------------------------------------------------
#
# HDF5 trusts the file's bytes: a corrupt global heap can make it loop forever and one wrong
# byte in an attribute's datatype can crash it (SIGSEGV). So this process never opens the file
# with h5py. ``_keras_h5_child`` (a script that imports only NumPy and h5py) reads the parts a
# Keras reader looks at, in its own process under a time and a memory limit, and sends back
# plain data; everything below checks that data and builds the layers from it.

#: The reader process's time limit: this many seconds, plus ``TIME_LIMIT_PER_MIB`` per MiB of
#: the file (30 s for a small file, about 2 minutes for 1 GiB); ``time_limit=`` overrides it.
TIME_LIMIT_BASE = 30.0
TIME_LIMIT_PER_MIB = 0.1
_MIB = 1 << 20
_CHILD = "cudnn_rnn.io.keras.h5_child"
_CPU_SIGNAL = getattr(signal, "SIGXCPU", None)  # what RLIMIT_CPU sends first (POSIX)
_HEADER = 8


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


def _time_limit(given: float | None, size: int, owner: str = OWNER) -> float:
    if given is None:
        return TIME_LIMIT_BASE + TIME_LIMIT_PER_MIB * size / _MIB
    if isinstance(given, bool) or not isinstance(given, (int, float)):
        raise TypeError(
            f"{owner}: time_limit must be a number of seconds or None, got {type(given).__name__}."
        )
    if not math.isfinite(given) or given <= 0:
        raise ValueError(
            f"{owner}: time_limit must be a positive, finite number of seconds, got {given!r}."
        )
    return float(given)


def _read(
    path: str | os.PathLike[str],
    values: bool,
    time_limit: float | None,
    *,
    paths: Sequence[str] | None = None,
    owner: str = OWNER,
    shown: str | None = None,
) -> _File:
    """The parts of the file a Keras reader looks at (and the RNN weights' values when
    ``values``), read by the child process; any failure is a KerasH5Error naming the file.

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
    limit = _time_limit(time_limit, size, owner)
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


def _weights_root(h5: _File) -> _Node:
    """The group holding one subgroup per layer: ``model_weights`` of a whole-model file, the
    file itself for weights only."""
    inner = _child(h5, h5.root, "model_weights")
    root = h5.root if inner is None else inner
    if _attribute(h5, root, "layer_names") is _MISSING:
        raise KerasH5Error(
            f"{h5.who} is not a Keras 2 model or weights file (no 'layer_names'); a "
            "Keras 3 .keras file is read by cudnn_rnn.io.keras.keras3, and a Keras 3 "
            ".weights.h5 alone records no layers: load it in Keras 3 and use "
            "cudnn_rnn.convert.from_keras."
        )
    return root


def _layer_names(h5: _File, root: _Node) -> list[str]:
    return _names(h5, root, "layer_names", "the weights group")


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


def _group(h5: _File, root: _Node, layer: str) -> _Group:
    group = _child(h5, root, layer)
    if not isinstance(group, _Group):
        raise KerasH5Error(f"{h5.who}: layer {layer!r} has no weights group.")
    return group


def _weight_names(h5: _File, group: _Group, layer: str) -> list[str]:
    return _names(h5, group, "weight_names", f"layer {layer!r}")


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


def _config_model(h5: _File) -> dict[str, Any] | None:
    """The model's config (``class_name``, ``config``), or None for a weights-only file."""
    who = h5.who
    value = _attribute(h5, h5.root, "model_config")
    if value is _MISSING:
        return None
    text = _text(value, "model_config", who)
    config = files.load_json(
        text, lambda reason: KerasH5Error(f"{who}: model_config {reason}."), max_size=MAX_CONFIG
    )
    if not isinstance(config, dict) or _model_layers(config) is None:
        raise KerasH5Error(f"{who}: model_config has no list of layers (class_name, config).")
    return config


def _model_layers(model: dict[str, Any]) -> list[dict[str, Any]] | None:
    """A model config's layer entries, or None when they are not a list of ``{class_name,
    config}`` (a nested model's config may itself be the list, as Keras 2.0/2.1 wrote a
    Sequential's)."""
    inner = model.get("config")
    layers = inner.get("layers") if isinstance(inner, dict) else inner
    if not isinstance(layers, list):
        return None
    for entry in layers:
        if not isinstance(entry, dict):
            return None
        config = entry.get("config")
        if not isinstance(config, dict) and not (
            entry.get("class_name") in _MODEL_CLASSES and isinstance(config, list)
        ):
            return None
    return layers


def _layer_name(entry: dict[str, Any]) -> str:
    config = entry["config"]
    name = config.get("name", entry.get("name")) if isinstance(config, dict) else entry.get("name")
    return name if isinstance(name, str) else ""


def _activation_name(value: Any) -> Any:
    """``"tanh"`` for ``"tanh"`` and for a serialized ``{"config": {"name": "tanh"}}``."""
    if isinstance(value, dict):
        inner = value.get("config")
        return inner.get("name") if isinstance(inner, dict) else value.get("class_name")
    return value


# -- the Keras that wrote the file -----------------------------------------------------------
#
# Keras 2.3.0 (September 2019) made "sigmoid" the default recurrent_activation of LSTM and GRU
# ("Change default recurrent activation to sigmoid (from hard_sigmoid) in all RNN layers", its
# release notes); every Keras before it, 1.x included, defaulted to "hard_sigmoid". tf.keras
# followed in TF 2.0 (TF 1.x's tf.keras.layers.LSTM/GRU defaulted to hard_sigmoid). The
# version a file records is ``keras_version``: standalone Keras wrote its own ("2.2.4"), tf.keras
# its own with "-tf" ("2.1.6-tf", "2.2.4-tf" in TF 1.13-1.15, and also in TF 2.0 and 2.1, whose
# layers already defaulted to sigmoid: the file cannot tell those apart, so "2.2.4-tf" counts as
# old), then "2.3.0-tf", "2.4.0"... and tf-keras its package version ("2.21.0"). A version below
# 2.3, one that is not a version number, and no keras_version at all (Keras's own loader takes
# that for a Keras 1 file) mean the plain layers of a weights-only file may have computed
# hard_sigmoid without anyone choosing it. ``backend`` plays no part: the default was the same on
# every backend.

#: The first Keras whose LSTM and GRU defaulted to recurrent_activation="sigmoid".
SIGMOID_DEFAULT_SINCE = (2, 3)
#: ``confirm_keras_version`` for a file without a ``keras_version`` attribute.
UNKNOWN_KERAS_VERSION = "unknown"


def _keras_version(h5: _File, root: _Node) -> str:
    """The ``keras_version`` attribute where Keras's own loader reads it (the weights group),
    else the file's; ``UNKNOWN_KERAS_VERSION`` without one."""
    for node in (root, h5.root):
        value = _attribute(h5, node, "keras_version")
        if value is not _MISSING:
            return _text(value, "keras_version", h5.who)
    return UNKNOWN_KERAS_VERSION


def _predates_sigmoid_default(version: str) -> bool:
    """Whether LSTM and GRU defaulted to hard_sigmoid in the Keras that wrote ``version`` (yes
    for anything that does not start with a major and a minor version number)."""
    numbers = []
    for part in version.split(".")[:2]:
        digits = ""
        for char in part:
            if char not in "0123456789":
                break
            digits += char
        if not digits:
            return True
        numbers.append(int(digits))
    return len(numbers) < 2 or tuple(numbers) < SIGMOID_DEFAULT_SINCE


def _old_keras_problem(version: str) -> str:
    if version == UNKNOWN_KERAS_VERSION:
        who = (
            "this weights-only file has no keras_version attribute (Keras's own loader then "
            "takes it for a Keras 1 file)"
        )
    else:
        who = f"this weights-only file's keras_version is {version!r}"
    return (
        f"recurrent_activation unknown: {who}, and before Keras 2.3 LSTM and GRU defaulted to "
        "recurrent_activation='hard_sigmoid', not cuDNN's 'sigmoid' (the outputs would differ), "
        "so assume_cudnn_activations=True is not enough: if they were built with "
        f"recurrent_activation='sigmoid', say so again with confirm_keras_version={version!r}, "
        "or read the whole-model file, whose config records it."
    )


# -- which layers the file holds -------------------------------------------------------------


@dataclass(frozen=True)
class _Leaf:
    """A layer that is not a model: its name (``outer/inner`` inside nested models), the
    top-level layer group holding its weights, the nested models above it, its own name, its
    config (None in a weights-only file) and, in a weights-only file, its weight names."""

    name: str
    group: str
    scope: tuple[str, ...]
    own: str
    entry: dict[str, Any] | None
    weights: tuple[str, ...] = ()
    twin: bool = False  # another layer under the same group has its own name


@dataclass(frozen=True)
class _Found:
    """What each RNN layer becomes, the layers by name, and which layer feeds which (None: a
    weights-only file, which does not record it)."""

    plans: list[_Plan | _Refused]
    leaves: dict[str, _Leaf]
    links: dict[str, str] | None

    def only(self, names: Sequence[str]) -> _Found:
        return _Found([p for p in self.plans if p.name in names], self.leaves, self.links)


def _config_leaves(
    h5: _File, layers: list[dict[str, Any]], group: str | None, scope: tuple[str, ...]
) -> list[_Leaf]:
    """The layers of a model config, nested models' layers in their place. Keras writes a
    nested model's weights, all its layers' (however deep) flattened, under the top-level
    layer's group, each weight name starting with its own layer's name."""
    out: list[_Leaf] = []
    for entry in layers:
        own = _layer_name(entry)
        path = "/".join((*scope, own))
        if entry.get("class_name") in _MODEL_CLASSES:
            inner = _model_layers(entry)
            if inner is None and not _has_rnn(entry):
                continue  # nothing of ours in it: skipped like any other layer
            if inner is None:
                raise KerasH5Error(
                    f"{h5.who}: the config of nested model {path!r} has no list of "
                    "layers (class_name, config)."
                )
            out.extend(_config_leaves(h5, inner, group or own, (*scope, own)))
        else:
            out.append(_Leaf(path, group or own, scope, own, entry))
    if group is None:  # the top: mark nested layers whose weights a name cannot tell apart
        seen: defaultdict[tuple[str, str], int] = defaultdict(int)
        for leaf in out:
            seen[leaf.group, leaf.own] += 1 if leaf.scope else 0
        out = [
            _Leaf(leaf.name, leaf.group, leaf.scope, leaf.own, leaf.entry, twin=True)
            if leaf.scope and seen[leaf.group, leaf.own] > 1
            else leaf
            for leaf in out
        ]
    return out


def _owned(leaf: _Leaf, weights: list[str]) -> list[str]:
    """The weight names of a nested layer among its group's: those whose scope starts with its
    own name, after any names of the models above it (which some Keras versions put first)."""
    out = []
    for weight in weights:
        scope = weight.split("/")[:-1]
        while len(scope) > 1 and scope[0] in leaf.scope and scope[0] != leaf.own:
            scope = scope[1:]
        if scope and scope[0] == leaf.own:
            out.append(weight)
    return out


def _weights_only_leaves(h5: _File, root: _Node, names: list[str]) -> list[_Leaf]:
    out = []
    for layer in names:
        weights = _weight_names(h5, _group(h5, root, layer), layer)
        for own, owned in _split_nested(layer, weights):
            if own is None:
                out.append(_Leaf(layer, layer, (), layer, None, tuple(owned)))
            else:
                out.append(_Leaf(f"{layer}/{own}", layer, (layer,), own, None, tuple(owned)))
    return out


def _split_nested(layer: str, weights: list[str]) -> list[tuple[str | None, list[str]]]:
    """A weights-only file's layer group as ``[(None, its weight names)]`` for one layer, or
    ``[(inner layer, its weight names), ...]`` for a nested model.

    A layer's weight names all start with one name (its own: ``lstm/lstm_cell/kernel:0``;
    a Bidirectional's then go on with ``forward_...`` and ``backward_...``). A nested model's
    start with its layers' names (``lstm/...``, ``dense/...``), or with its own name and then
    theirs (``encoder/lstm_1/kernel:0``, as graph-mode Keras scoped them). A nested model whose
    only layer with weights is an RNN cannot be told from that layer: it is read under the
    outer name.
    """
    scopes = [w.split("/")[:-1] for w in weights]

    def names_at(depth: int) -> list[str]:
        return list(dict.fromkeys(s[depth] if len(s) > depth else "" for s in scopes))

    firsts = names_at(0)
    depth = None
    if len(firsts) > 1 and "" not in firsts:
        depth = 0
    elif firsts == [layer]:
        seconds = names_at(1)
        is_pair = len(seconds) == 2 and seconds[0].startswith("forward_")
        is_pair = is_pair and seconds[1].startswith("backward_")
        if len(seconds) > 1 and "" not in seconds and not is_pair:
            depth = 1
    if depth is None:
        return [(None, weights)]
    return [
        (inner, [w for w, s in zip(weights, scopes) if s[depth] == inner])
        for inner in names_at(depth)
    ]


def _links(config: dict[str, Any], scope: tuple[str, ...] = ()) -> dict[str, str]:
    """``{A: B}`` (path names) for each layer A whose output goes to layer B alone, B taking
    nothing else, in the same model: the next layer of a Sequential, or in a Functional model
    the one layer whose only input is A's first output (no ``initial_state``, no other call
    arguments), A called once and its outputs used nowhere else (not even as the model's)."""
    layers = _model_layers(config) or []
    names = [_layer_name(entry) for entry in layers]
    path = {name: "/".join((*scope, name)) for name in names}
    out: dict[str, str] = {}
    for entry, name in zip(layers, names):
        if entry.get("class_name") in _MODEL_CLASSES:
            out.update(_links(entry, (*scope, name)))
    if config.get("class_name") == "Sequential":
        out.update((path[names[i - 1]], path[names[i]]) for i in range(1, len(names)))
        return out
    uses: defaultdict[str, int] = defaultdict(int)
    fed_by: dict[str, str] = {}
    called_once = set()
    for entry, name in zip(layers, names):
        nodes = entry.get("inbound_nodes")
        if not isinstance(nodes, list):
            continue
        inputs = [t for node in nodes if isinstance(node, list) for t in node]
        for t in inputs:
            if isinstance(t, list) and t and isinstance(t[0], str):
                uses[t[0]] += 1
        called_once.update([name] if len(nodes) == 1 else [])
        if len(nodes) == 1 and len(inputs) == 1 and isinstance(inputs[0], list):
            source = inputs[0]
            kwargs = source[3] if len(source) == 4 else {}
            if len(source) in (3, 4) and source[1:3] == [0, 0] and kwargs in ({}, None):
                fed_by[name] = str(source[0])
    inner = config.get("config")
    outputs = inner.get("output_layers", []) if isinstance(inner, dict) else []
    if isinstance(outputs, list) and outputs and isinstance(outputs[0], str):
        outputs = [outputs]  # one output, written flat by some Keras versions
    for t in outputs if isinstance(outputs, list) else []:
        if isinstance(t, list) and t and isinstance(t[0], str):
            uses[t[0]] += 1
    for b, a in fed_by.items():
        if a in path and uses[a] == 1 and a in called_once:
            out[path[a]] = path[b]
    return out


# -- what each layer becomes -----------------------------------------------------------------


def _plans(h5: _File, options: _Options) -> _Found:
    """The RNN layers in the model's order (nested models' in their place): what each becomes,
    or why it cannot."""
    root = _weights_root(h5)
    names = _layer_names(h5, root)
    model = _config_model(h5)
    version = None
    if model is None or options.confirm is not None:
        version = _keras_version(h5, root)
    if options.confirm is not None and options.confirm != version:
        raise ValueError(
            f"{h5.who}: confirm_keras_version={options.confirm!r}, but the file's "
            f"keras_version is {version!r}: confirm the version the file records."
        )
    if model is None:
        leaves = _weights_only_leaves(h5, root, names)
        links = None
    else:
        leaves = _config_leaves(h5, _model_layers(model) or [], None, ())
        links = _links(model)
    plans: list[_Plan | _Refused] = []
    for leaf in leaves:
        plan = _plan(h5, root, leaf, names, options, version)
        if plan is not None:
            plans.append(plan)
    return _Found(plans, {leaf.name: leaf for leaf in leaves}, links)


def _plan(
    h5: _File,
    root: _Node,
    leaf: _Leaf,
    names: list[str],
    options: _Options,
    version: str | None,
) -> _Plan | _Refused | None:
    """What a layer becomes; None for a layer that is not an RNN, _Refused for an RNN that
    cannot be read as it is. KerasH5Error for weights that do not fit."""
    where = f"{h5.who}: layer {leaf.name!r}"
    entry = leaf.entry
    if entry is None:
        if not any(_base(w) == "recurrent_kernel" for w in leaf.weights):
            return None
        directions = _read_directions(h5, _group(h5, root, leaf.group), leaf.name, leaf.weights)
        return _plan_from_shapes(leaf.name, directions, where, options, version)
    cls = entry.get("class_name")
    if not isinstance(cls, str) or not _is_rnn_class(cls, entry):
        return None
    shown = f"{where} ({files.escape(cls)})"  # the file's class: any text with LSTM, GRU, RNN
    if leaf.twin:
        raise KerasH5Error(
            f"{shown}: another layer inside {leaf.group!r} is also named {leaf.own!r}, "
            "and Keras names a nested layer's weights by its own name, so theirs cannot be told "
            "apart; rename one in Keras and save the model again."
        )
    if leaf.group not in names:
        raise KerasH5Error(f"{shown} has no weights in the file.")
    group = _group(h5, root, leaf.group)
    weights = _weight_names(h5, group, leaf.group)
    if leaf.scope:
        weights = _owned(leaf, weights)
        if not weights:
            raise KerasH5Error(
                f"{shown} has no weights in the file (no weight of {leaf.group!r} is "
                f"named {leaf.own}/...)."
            )
    directions = _read_directions(h5, group, leaf.name, weights)
    return _plan_from_config(leaf.name, entry, directions, where)


def _is_rnn_class(cls: str, entry: dict[str, Any]) -> bool:
    """Whether a config entry is an RNN layer (ours or one we must refuse, never skip)."""
    if cls == _WRAPPER or cls in _CLASSES:
        return True
    if cls in ("TimeDistributed",):
        return _has_rnn(entry)
    return any(token in cls for token in ("LSTM", "GRU", "RNN"))


def _has_rnn(entry: Any) -> bool:
    """Whether a (nested) config holds an RNN layer class anywhere."""
    if isinstance(entry, dict):
        cls = entry.get("class_name")
        if isinstance(cls, str) and cls not in _MODEL_CLASSES and cls != "TimeDistributed":
            if cls == _WRAPPER or any(token in cls for token in ("LSTM", "GRU", "RNN")):
                return True
        return any(_has_rnn(v) for v in entry.values())
    if isinstance(entry, list):
        return any(_has_rnn(v) for v in entry)
    return False


def _base(weight_name: str) -> str:
    """``kernel`` for ``lstm/lstm_cell/kernel:0`` (the name's last part, no ``:0``)."""
    return weight_name.rsplit("/", 1)[-1].split(":", 1)[0]


def _read_directions(
    h5: _File, group: _Group, layer: str, names: Sequence[str]
) -> tuple[_Direction, ...]:
    """One or two (kernel, recurrent_kernel[, bias]) triples, in the order of ``names``."""
    where = f"{h5.who}: layer {layer!r}"
    runs: list[list[str]] = []
    for w in names:
        if _base(w) == "kernel":
            runs.append([])
        if not runs:
            raise KerasH5Error(f"{where}: weight {w!r} comes before any kernel.")
        runs[-1].append(w)
    if len(runs) not in (1, 2):
        raise KerasH5Error(
            f"{where}: {len(runs)} kernels; an RNN layer has one per direction (1 or 2)."
        )
    out = []
    for run in runs:
        bases = [_base(w) for w in run]
        if bases not in (["kernel", "recurrent_kernel"], ["kernel", "recurrent_kernel", "bias"]):
            raise KerasH5Error(
                f"{where}: weights {bases}, expected kernel, recurrent_kernel and bias (or no "
                "bias)."
            )
        ds = [_dataset(h5, group, w, layer) for w in run]
        out.append(_Direction(ds[0], ds[1], ds[2] if len(ds) == 3 else None))
    return tuple(out)


def _shape_family(
    directions: tuple[_Direction, ...], where: str
) -> tuple[int, bool | None, str | None]:
    """(gates, written by a CuDNN layer (None: no bias says nothing), GRU reset variant) implied
    by the shapes, which must agree across directions."""
    found = set()
    for d in directions:
        k, r = d.kernel.shape, d.recurrent.shape
        if len(k) != 2 or len(r) != 2 or r[0] < 1 or k[0] < 1 or k[1] != r[1] or r[1] % r[0]:
            raise KerasH5Error(
                f"{where}: kernel {list(k)} and recurrent_kernel {list(r)} are not [in, G*H] "
                "and [H, G*H]."
            )
        h, gates = r[0], r[1] // r[0]
        if gates not in (1, 3, 4):
            raise KerasH5Error(
                f"{where}: recurrent_kernel {list(r)} holds {gates} gates; LSTM has 4, GRU 3, "
                "SimpleRNN 1."
            )
        b = None if d.bias is None else d.bias.shape
        cudnn: bool | None = None
        variant = None
        if b is None:
            pass
        elif b == (2 * gates * h,) and gates > 1:
            cudnn = True
        elif b == (gates * h,):
            cudnn = False
            variant = "reset_before" if gates == 3 else None
        elif b == (2, gates * h) and gates == 3:
            cudnn, variant = False, "reset_after"
        else:
            raise KerasH5Error(
                f"{where}: bias {list(b)} fits no Keras RNN of {gates} gate(s) and {h} units."
            )
        found.add((tuple(k), tuple(r), b, gates, cudnn, variant))
    if len(found) != 1:
        raise KerasH5Error(f"{where}: its two directions have different weight shapes.")
    (_, _, _, gates, cudnn, variant) = found.pop()
    return gates, cudnn, variant


def _plan_from_shapes(
    name: str,
    directions: tuple[_Direction, ...],
    where: str,
    options: _Options,
    version: str | None,
) -> _Plan | _Refused:
    gates, cudnn, variant = _shape_family(directions, where)
    mode = {4: CUDNN_LSTM, 3: CUDNN_GRU}.get(gates, f"rnn_{options.simple_activation[name]}")
    if cudnn:  # a CuDNN layer: no activation to choose, whatever Keras wrote it
        cls = "CuDNNLSTM" if mode == CUDNN_LSTM else "CuDNNGRU"
        return _Plan(name, cls, mode, True, directions)
    cls = {CUDNN_LSTM: "LSTM", CUDNN_GRU: "GRU"}.get(mode, "SimpleRNN")
    if variant == "reset_before":  # refused whatever the activations were
        return _Refused(
            name,
            None,
            (
                "a GRU bias of shape [3H] means GRU(reset_after=False), which applies the reset "
                "gate before the recurrent matmul; cuDNN applies it after, so the outputs would "
                "differ. Retrain with GRU(reset_after=True) (or CuDNNGRU).",
            ),
        )
    problems = []
    if not options.assume:
        used = {
            "LSTM": "tanh with sigmoid gates",
            "GRU": "tanh with sigmoid gates and reset_after=True",
            "SimpleRNN": "tanh, or relu with simple_rnn_activation='relu'",
        }[cls]
        problems.append(
            f"a weights-only file does not record the activations of plain {cls} layers; if "
            f"they used cuDNN's ({used}), pass assume_cudnn_activations=True (cudnn-rnn: "
            "--activation tanh|relu), or read the whole-model file."
        )
    old = version is not None and _predates_sigmoid_default(version)
    if cls != "SimpleRNN" and old and options.confirm is None:
        problems.append(_old_keras_problem(str(version)))
    if problems:
        return _Refused(name, None, tuple(problems))
    if len(directions) == 2:
        cls = f"{_WRAPPER}({cls})"
    elif cudnn is None and cls != "SimpleRNN":
        cls = f"{cls} (no bias)"
    return _Plan(name, cls, mode, False, directions)


def _plan_from_config(
    name: str,
    entry: dict[str, Any],
    directions: tuple[_Direction, ...],
    where: str,
    defaults: Mapping[str, Any] = KERAS2_DEFAULTS,
) -> _Plan | _Refused:
    """What a layer with a config becomes, its weights checked against the config (a
    KerasH5Error where they disagree). ``defaults`` as :func:`_judge`'s."""
    cls = entry["class_name"]
    config = entry["config"]
    shown = files.escape(cls)  # the file's class names are shown escaped
    problems: list[str] = []
    sides: list[tuple[str, dict[str, Any], bool | None, str]] = [(cls, config, None, "")]
    if cls == _WRAPPER:
        merge = config.get("merge_mode", "concat")
        backward = config.get("backward_layer")
        inner = [config.get("layer"), backward or config.get("layer")]
        if not all(
            isinstance(i, dict)
            and isinstance(i.get("config"), dict)
            and isinstance(i.get("class_name"), str)
            for i in inner
        ):
            raise KerasH5Error(f"{where} (Bidirectional): its config has no inner layer.")
        shown = f"{cls}({files.escape(inner[0]['class_name'])})"
        if merge != "concat":
            problems.append(
                f"merge_mode {merge!r} is not supported; cuDNN concatenates the two directions "
                "(merge_mode='concat'): retrain with it, or merge the halves of our output "
                "yourself."
            )
        sides = [(inner[0]["class_name"], inner[0]["config"], False, "")]
        if backward is None:  # Keras builds the backward layer from the forward one
            sides.append((sides[0][0], sides[0][1], False, ""))
        else:
            sides.append((inner[1]["class_name"], inner[1]["config"], True, "backward layer: "))
    modes = []
    for side_cls, side_config, is_backward, prefix in sides:
        judged, found = _judge(side_cls, side_config, is_backward, defaults)
        modes.append(judged)
        problems.extend(prefix + p for p in found if prefix + p not in problems)
    known = [m for m in modes if m is not None]
    if len(known) == len(modes) and len(set(known)) > 1:
        problems.append(
            f"its two directions compute different modes {sorted(m[0] for m in known)}; cuDNN "
            "runs one mode both ways."
        )
    if problems or not known:
        return _Refused(name, shown, tuple(problems))
    wanted = 2 if cls == _WRAPPER else 1
    if len(directions) != wanted:
        raise KerasH5Error(f"{where} ({cls}): weights of {len(directions)} direction(s).")
    mode, cudnn = known[0]
    gates, shape_cudnn, variant = _shape_family(directions, where)
    expected_gates = len(GATE_ORDERS["keras"][mode])
    inner_cls = sides[0][0]
    if gates != expected_gates or (shape_cudnn is not None and shape_cudnn != cudnn):
        raise KerasH5Error(
            f"{where}: its config says {inner_cls} but its weights are those of another layer "
            f"({gates} gate(s), {'CuDNN' if shape_cudnn else 'plain'} bias)."
        )
    if shape_cudnn is None and cudnn:
        raise KerasH5Error(f"{where}: a {inner_cls} always has a bias; the file has none.")
    if variant == "reset_before":
        raise KerasH5Error(
            f"{where}: its config says GRU(reset_after=True) but its bias is [3H] (reset_after"
            "=False's)."
        )
    units = {c.get("units") for _, c, _, _ in sides}
    if units != {int(directions[0].recurrent.shape[0])}:
        raise KerasH5Error(
            f"{where}: config units {sorted(map(str, units))} differ from the weights' "
            f"{int(directions[0].recurrent.shape[0])}."
        )
    go_backwards = cls != _WRAPPER and bool(config.get("go_backwards", False))
    return _Plan(name, shown, mode, cudnn, directions, go_backwards)


def _judge(
    cls: str,
    config: dict[str, Any],
    backward: bool | None,
    defaults: Mapping[str, Any] = KERAS2_DEFAULTS,
) -> tuple[tuple[str, bool] | None, list[str]]:
    """(our mode, written by a CuDNN layer) for one Keras RNN layer config (None: no mode of
    ours), and every setting of it cuDNN cannot compute, each a sentence naming the setting.
    ``backward``: which side of a Bidirectional wrapper the config is (None: a layer alone, which
    may read its input either way); ``defaults``: the settings a config may leave out."""
    if cls not in _CLASSES:
        return None, [
            f"{files.escape(cls)} layers are not supported; only CuDNNLSTM, CuDNNGRU, LSTM, "
            "GRU(reset_after=True), SimpleRNN and Bidirectional wrappers of them are."
        ]
    problems = []
    if backward is not None and bool(config.get("go_backwards", False)) != backward:
        problems.append(
            "go_backwards=False in the backward layer reads the sequence forward; cuDNN's "
            "backward direction reads it backward. Rebuild it with go_backwards=True."
            if backward
            else "go_backwards=True in the forward layer of a Bidirectional wrapper reads the "
            "sequence backward; cuDNN's forward direction reads it forward. Rebuild it with "
            "go_backwards=False."
        )
    mode, cudnn = _CLASSES[cls]
    if cudnn:
        return (str(mode), True), problems
    act = _activation_name(config.get("activation", "tanh"))
    if mode is None:
        if act not in ("tanh", "relu"):
            problems.append(
                f"activation {act!r} has no cuDNN mode; SimpleRNN must use 'tanh' or 'relu' "
                "(retrain with one of them)."
            )
            return None, problems
        return (CUDNN_RNN_TANH if act == "tanh" else CUDNN_RNN_RELU, False), problems
    if act != "tanh":
        problems.append(
            f"activation {act!r} is not cuDNN's 'tanh'; the outputs would differ (retrain with "
            "activation='tanh')."
        )
    rec = _activation_name(config.get("recurrent_activation", defaults["recurrent_activation"]))
    if rec != "sigmoid":
        problems.append(
            f"recurrent_activation {rec!r} is not cuDNN's 'sigmoid' (Keras before 2.3 defaulted "
            "to 'hard_sigmoid'); the outputs would differ (retrain with "
            "recurrent_activation='sigmoid')."
        )
    if mode == CUDNN_GRU and not config.get("reset_after", defaults["reset_after"]):
        problems.append(
            "reset_after=False applies the reset gate before the recurrent matmul; cuDNN "
            "applies it after, so the outputs would differ. Retrain with "
            "GRU(reset_after=True) (or CuDNNGRU)."
        )
    return (mode, False), problems


def _refusal(h5: _File, refused: list[_Refused]) -> str:
    """One message for every layer that cannot be read: each problem once, with the layers it
    concerns, numbered when there are several."""
    concerns: dict[str, list[_Refused]] = {}
    for layer in refused:
        for problem in layer.problems:
            concerns.setdefault(problem, []).append(layer)
    parts = [
        f"layer{'s' if len(layers) > 1 else ''} {', '.join(r.label for r in layers)}: {problem}"
        for problem, layers in concerns.items()
    ]
    if len(parts) == 1:
        return f"{h5.who}: {parts[0]}"
    layers = f"{len(refused)} RNN layer{'s' if len(refused) > 1 else ''}"
    numbered = " ".join(f"({i}) {part}" for i, part in enumerate(parts, 1))
    return f"{h5.who}: {len(parts)} problems in {layers}: {numbered}"


# -- merging consecutive layers (merge_layers=True) -------------------------------------------


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
    dirs = len(a.directions)
    return (
        a.mode == b.mode
        and not (a.go_backwards or b.go_backwards)  # each reads its own input backward
        and a.num_units == b.num_units
        and dirs == len(b.directions)
        and b.input_size == dirs * a.num_units
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
                made = keras_blocks(kernel, recurrent, bias, plan.mode)
            blocks.update({(index, d, kind): value for kind, value in made.items()})
    first = plans[0]
    return canonical_of_blocks(first.mode, blocks, len(plans), len(first.directions))


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
