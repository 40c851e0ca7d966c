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

What cuDNN cannot compute is refused, naming the layer and the setting: ``recurrent_activation``
other than ``sigmoid`` (``hard_sigmoid`` was Keras's default before 2.3), ``activation`` other
than ``tanh`` (``tanh``/``relu`` for SimpleRNN), ``GRU(reset_after=False)`` (the default of
tf.keras 1.x), ``Bidirectional`` merge modes other than ``concat``, ``go_backwards=True`` outside
``Bidirectional``, and RNN layers of other classes (``RNN(cell)``, ``ConvLSTM2D``...). Settings
that do not change the weights or the inference math are accepted: ``unit_forget_bias`` (only an
initializer), ``return_sequences``/``return_state``, ``time_major``, ``unroll``,
``implementation``, ``dropout``/``recurrent_dropout`` (training only; our layers get no dropout)
and ``stateful`` (carrying the state from batch to batch is then the caller's job: pass
``initial_state``). Masks (a ``Masking`` layer) are not part of the weights: pass
``sequence_lengths``. Other layers (``Dense``, ``Embedding``...) are skipped.

A weights-only file records no activations: its layer classes come from the weight shapes (a CuDNN
layer's bias is twice a plain one's). CuDNN layers always compute cuDNN's math; plain ``LSTM``,
``GRU`` and ``SimpleRNN`` layers are refused unless ``assume_cudnn_activations=True`` says you
know they used tanh with sigmoid gates (and ``reset_after=True`` for a GRU without bias), with
SimpleRNNs computing ``simple_rnn_activation``: ``"tanh"`` (Keras's default) or ``"relu"`` for
all of them, or a ``{layer name: "tanh" | "relu"}`` mapping (unlisted SimpleRNNs: ``"tanh"``).

A file is checked before anything is built: it must be a regular file (a FIFO is refused before it
is opened), its weights must have the names, ranks, dtypes and shapes its layers imply, they must
live inside the file (no external or virtual datasets) and their bytes must fit in it. Problems
with the file raise :class:`KerasH5Error`. ``h5py`` is an optional dependency
(``pip install cudnn-rnn[h5]``), imported only when a file is read.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from cudnn_rnn import checkpoint
from cudnn_rnn.core.constants import CUDNN_GRU, CUDNN_LSTM, CUDNN_RNN_RELU, CUDNN_RNN_TANH
from cudnn_rnn.core.gates import GATE_ORDERS
from cudnn_rnn.core.layout import INPUT, INPUT_BIAS, RECURRENT, RECURRENT_BIAS
from cudnn_rnn.formats.gate_blocks import BlockKey
from cudnn_rnn.formats.keras import keras_blocks, layer_of_blocks
from cudnn_rnn.layers import _CudnnRNN

__all__ = ["KerasH5Error", "describe_keras_h5", "from_keras_h5", "keras_h5_weights"]

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


class KerasH5Error(ValueError):
    """A file that is not a readable Keras 2 HDF5 model or weights file."""


def _h5py() -> Any:
    try:
        import h5py
    except ImportError as err:  # pragma: no cover - exercised only without h5py
        raise ImportError(
            f"{OWNER}: reading Keras .h5 files needs h5py (pip install cudnn-rnn[h5])."
        ) from err
    return h5py


@dataclass(frozen=True)
class _Direction:
    """One direction's weights, as datasets (nothing read yet)."""

    kernel: Any
    recurrent: Any
    bias: Any | None


@dataclass(frozen=True)
class _Refused:
    """An RNN layer of the file that cuDNN's math cannot compute, and why."""

    name: str
    reason: str

    def config(self) -> dict[str, Any]:
        # The reason without the "from_keras_h5: 'file': layer 'name'" it starts with.
        short = self.reason.split(f"layer {self.name!r}", 1)[-1].lstrip(": ")
        return {"layer": self.name, "refused": short}


@dataclass(frozen=True)
class _Plan:
    """One RNN layer of the file, checked: what it becomes and where its weights are."""

    name: str
    keras_class: str
    mode: str
    cudnn: bool
    directions: tuple[_Direction, ...]

    @property
    def num_units(self) -> int:
        return int(self.directions[0].recurrent.shape[0])

    @property
    def input_size(self) -> int:
        return int(self.directions[0].kernel.shape[0])

    def config(self) -> dict[str, Any]:
        return {
            "layer": self.name,
            "keras_class": self.keras_class,
            "rnn_mode": self.mode,
            "num_units": self.num_units,
            "input_size": self.input_size,
            "direction": "bidirectional" if len(self.directions) == 2 else "unidirectional",
        }


def from_keras_h5(
    path: str | os.PathLike[str],
    *,
    assume_cudnn_activations: bool = False,
    simple_rnn_activation: str | Mapping[str, str] = "tanh",
    layers: Sequence[str] | None = None,
) -> dict[str, _CudnnRNN]:
    """Our layers for the RNN layers of a Keras 2 ``.h5`` file: ``{Keras layer name: layer}`` in
    the model's order, one entry per Keras layer (a ``Bidirectional`` wrapper is one
    bidirectional layer; stacked layers stay separate, each with its own input size).

    ``assume_cudnn_activations`` and ``simple_rnn_activation`` matter only for plain layers of
    weights-only files (see the module docs); ``layers`` picks some layer names (the others are
    not built, nor refused for settings cuDNN cannot compute; the whole file is still checked).
    Our layers take time-major input by default: call them with
    ``time_major=False`` for Keras's batch-major data.
    """
    activations = _activations(simple_rnn_activation)
    with _open(path) as (f, label, size):
        found = _plans(f, label, assume_cudnn_activations, activations)
        if layers is not None:
            known = [p.name for p in found]
            missing = [name for name in layers if name not in known]
            if missing:
                raise ValueError(
                    f"{OWNER}: {label} has no RNN layer {missing[0]!r}; its RNN layers: "
                    f"{known or 'none'}."
                )
            found = [p for p in found if p.name in layers]
        plans = []
        for p in found:
            if isinstance(p, _Refused):
                raise ValueError(p.reason)
            plans.append(p)
        _check_sizes(plans, label, size)
        return {p.name: _build(p) for p in plans}


def describe_keras_h5(
    path: str | os.PathLike[str],
    *,
    assume_cudnn_activations: bool = False,
    simple_rnn_activation: str | Mapping[str, str] = "tanh",
) -> list[dict[str, Any]]:
    """What each RNN layer of the file becomes (its ``layer`` name, Keras class, mode, units,
    input size, direction) or, under ``"refused"``, why it cannot; no weight is read."""
    activations = _activations(simple_rnn_activation)
    with _open(path) as (f, label, _):
        found = _plans(f, label, assume_cudnn_activations, activations)
    return [p.config() for p in found]


def keras_h5_weights(path: str | os.PathLike[str]) -> dict[str, tuple[tuple[int, ...], str]]:
    """Every weight of every layer (``layer/weight name``) with its shape and dtype; no data is
    read."""
    with _open(path) as (f, label, _):
        root = _weights_root(f, label)
        out = {}
        for layer in _layer_names(root, label):
            group = _group(root, layer, label)
            for name in _weight_names(group, layer, label):
                ds = _dataset(group, name, layer, label)
                out[f"{layer}/{name}" if not name.startswith(f"{layer}/") else name] = (
                    tuple(int(d) for d in ds.shape),
                    str(ds.dtype),
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


# -- reading the file ------------------------------------------------------------------------


@contextlib.contextmanager
def _open(path: str | os.PathLike[str]) -> Iterator[tuple[Any, str, int]]:
    """The open ``h5py.File``, the label errors start with and the file's size; every failure of
    h5py while it is open becomes a KerasH5Error."""
    h5py = _h5py()
    label = f"{os.fspath(path)!r}"
    try:
        raw = checkpoint.open_regular(path)  # a FIFO or device is refused before any open
    except checkpoint.CheckpointError as err:
        raise KerasH5Error(f"{OWNER}: {label}: {err.problems[0]}") from err
    with raw:
        size = os.fstat(raw.fileno()).st_size
        try:
            f = h5py.File(raw, "r")
        except Exception as err:  # h5py says "not an HDF5 file" in many ways
            raise KerasH5Error(
                f"{OWNER}: {label} is not a readable HDF5 file ({type(err).__name__}: "
                f"{_first_line(err)})."
            ) from err
        with f:
            try:
                yield f, label, size
            except (KerasH5Error, ValueError, TypeError, ImportError):
                raise
            except (OSError, KeyError, RuntimeError, RecursionError) as err:
                raise KerasH5Error(
                    f"{OWNER}: {label} is corrupt ({type(err).__name__}: {_first_line(err)})."
                ) from err


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return lines[0][:200] if lines else type(err).__name__


def _text(value: Any, what: str, label: str) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as err:
            raise KerasH5Error(f"{OWNER}: {label}: {what} is not UTF-8 text.") from err
    if isinstance(value, str):
        return value
    raise KerasH5Error(f"{OWNER}: {label}: {what} is a {type(value).__name__}, not text.")


def _names(attrs: Any, key: str, what: str, label: str) -> list[str]:
    if key not in attrs:
        raise KerasH5Error(f"{OWNER}: {label}: {what} has no {key!r} attribute.")
    values = attrs[key]
    if not isinstance(values, np.ndarray) or values.ndim != 1:
        raise KerasH5Error(f"{OWNER}: {label}: {what}'s {key!r} is not a list of names.")
    return [_text(v, f"{what}'s {key!r}", label) for v in values.tolist()]


def _weights_root(f: Any, label: str) -> Any:
    """The group holding one subgroup per layer: ``model_weights`` of a whole-model file, the
    file itself for weights only."""
    root = _child(f, "model_weights", label) if "model_weights" in f else f
    if "layer_names" not in root.attrs:
        raise KerasH5Error(
            f"{OWNER}: {label} is not a Keras 2 model or weights file (no 'layer_names'); a "
            "Keras 3 .weights.h5 or .keras file: load it in Keras 3 and use "
            "cudnn_rnn.convert.from_keras."
        )
    return root


def _layer_names(root: Any, label: str) -> list[str]:
    return _names(root.attrs, "layer_names", "the weights group", label)


def _child(parent: Any, path: str, label: str) -> Any:
    """``parent[path]`` through hard links only, or None: a soft or external link could name
    another file (a FIFO, a device), and nothing outside this file is ever opened."""
    node = parent
    for part in (p for p in path.split("/") if p):
        if not hasattr(node, "get") or hasattr(node, "shape"):
            return None
        link = node.get(part, getlink=True)
        if link is None:
            return None
        if type(link).__name__ != "HardLink":
            raise KerasH5Error(
                f"{OWNER}: {label}: {path!r} is a {type(link).__name__}; only objects stored in "
                "the file are read."
            )
        node = node[part]
    return node


def _group(root: Any, layer: str, label: str) -> Any:
    group = _child(root, layer, label)
    if group is None or not hasattr(group, "attrs") or hasattr(group, "shape"):
        raise KerasH5Error(f"{OWNER}: {label}: layer {layer!r} has no weights group.")
    return group


def _weight_names(group: Any, layer: str, label: str) -> list[str]:
    return _names(group.attrs, "weight_names", f"layer {layer!r}", label)


def _dataset(group: Any, name: str, layer: str, label: str) -> Any:
    ds = _child(group, name, label)
    if ds is None or not hasattr(ds, "shape") or not hasattr(ds, "dtype"):
        raise KerasH5Error(f"{OWNER}: {label}: layer {layer!r} has no dataset {name!r}.")
    if ds.dtype.kind != "f" or ds.dtype.itemsize not in _FLOAT_SIZES:
        raise KerasH5Error(
            f"{OWNER}: {label}: {name!r} of layer {layer!r} has dtype {ds.dtype}, expected "
            "float16, float32 or float64."
        )
    if ds.is_virtual or getattr(ds, "external", None):
        # HDF5 can point a dataset at other files: nothing outside this file is ever read.
        raise KerasH5Error(
            f"{OWNER}: {label}: {name!r} of layer {layer!r} stores its data outside the file "
            "(an external or virtual dataset); refused."
        )
    return ds


def _config_layers(f: Any, label: str) -> list[dict[str, Any]] | None:
    """The model's layer configs (``class_name``, ``config``), or None for a weights-only file."""
    if "model_config" not in f.attrs:
        return None
    text = _text(f.attrs["model_config"], "model_config", label)
    try:
        config = json.loads(text)
    except (ValueError, RecursionError) as err:
        raise KerasH5Error(f"{OWNER}: {label}: model_config is not JSON ({err}).") from err
    inner = config.get("config") if isinstance(config, dict) else None
    layers = inner.get("layers") if isinstance(inner, dict) else inner  # Keras 2.0: a list
    if not isinstance(layers, list) or not all(
        isinstance(entry, dict) and isinstance(entry.get("config"), dict) for entry in layers
    ):
        raise KerasH5Error(
            f"{OWNER}: {label}: model_config has no list of layers (class_name, config)."
        )
    return layers


def _layer_name(entry: dict[str, Any]) -> str:
    name = entry["config"].get("name", entry.get("name"))
    return name if isinstance(name, str) else ""


def _activation_name(value: Any) -> Any:
    """``"tanh"`` for ``"tanh"`` and for a serialized ``{"config": {"name": "tanh"}}``."""
    if isinstance(value, dict):
        inner = value.get("config")
        return inner.get("name") if isinstance(inner, dict) else value.get("class_name")
    return value


# -- what each layer becomes -----------------------------------------------------------------


def _plans(
    f: Any, label: str, assume: bool, simple_activation: Mapping[str, str]
) -> list[_Plan | _Refused]:
    """The RNN layers in the model's order: what each becomes, or why it cannot."""
    root = _weights_root(f, label)
    names = _layer_names(root, label)
    configs = _config_layers(f, label)
    plans: list[_Plan | _Refused] = []
    candidates: list[tuple[str, dict[str, Any] | None]] = (
        [(name, None) for name in names]
        if configs is None
        else [(_layer_name(entry), entry) for entry in configs]
    )
    for name, entry in candidates:
        try:
            plan = _plan(root, name, entry, names, label, assume, simple_activation)
        except KerasH5Error:
            raise
        except ValueError as err:
            plans.append(_Refused(name, str(err)))
            continue
        if plan is not None:
            plans.append(plan)
    return plans


def _plan(
    root: Any,
    name: str,
    entry: dict[str, Any] | None,
    names: list[str],
    label: str,
    assume: bool,
    simple_activation: Mapping[str, str],
) -> _Plan | None:
    """What layer ``name`` becomes; None for a layer that is not an RNN. ValueError for an RNN
    cuDNN cannot compute, KerasH5Error for weights that do not fit."""
    where = f"{OWNER}: {label}: layer {name!r}"
    if entry is not None:
        cls = entry.get("class_name")
        if cls in _MODEL_CLASSES:
            if _has_rnn(entry):
                raise ValueError(
                    f"{where} is a nested {cls} holding RNN layers; nested models are not "
                    "read: save the inner model on its own."
                )
            return None
        if not isinstance(cls, str) or not _is_rnn_class(cls, entry):
            return None
        if name not in names:
            raise KerasH5Error(f"{where} ({cls}) has no weights in the file.")
    elif name not in names or not _looks_recurrent(root, name, label):
        return None
    group = _group(root, name, label)
    directions = _read_directions(group, name, label)
    if entry is None:
        return _plan_from_shapes(name, directions, where, assume, simple_activation[name])
    return _plan_from_config(name, entry, directions, where)


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


def _looks_recurrent(root: Any, name: str, label: str) -> bool:
    group = _group(root, name, label)
    return any(_base(w) == "recurrent_kernel" for w in _weight_names(group, name, label))


def _base(weight_name: str) -> str:
    """``kernel`` for ``lstm/lstm_cell/kernel:0`` (the name's last part, no ``:0``)."""
    return weight_name.rsplit("/", 1)[-1].split(":", 1)[0]


def _read_directions(group: Any, layer: str, label: str) -> tuple[_Direction, ...]:
    """One or two (kernel, recurrent_kernel[, bias]) triples, in the order of weight_names."""
    where = f"{OWNER}: {label}: layer {layer!r}"
    names = _weight_names(group, layer, label)
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
        ds = [_dataset(group, w, layer, label) for w in run]
        out.append(_Direction(ds[0], ds[1], ds[2] if len(ds) == 3 else None))
    return tuple(out)


def _shape_family(
    directions: tuple[_Direction, ...], where: str
) -> tuple[int, bool | None, str | None]:
    """(gates, written by a CuDNN layer (None: no bias says nothing), GRU reset variant) implied
    by the shapes, which must agree across directions."""
    found = set()
    for d in directions:
        k, r = tuple(d.kernel.shape), tuple(d.recurrent.shape)
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
        b = None if d.bias is None else tuple(d.bias.shape)
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
    name: str, directions: tuple[_Direction, ...], where: str, assume: bool, activation: str
) -> _Plan:
    gates, cudnn, variant = _shape_family(directions, where)
    if variant == "reset_before":
        raise ValueError(
            f"{where}: a GRU bias of shape [3H] means GRU(reset_after=False), which applies the "
            "reset gate before the recurrent matmul; cuDNN applies it after, so the outputs "
            "would differ. Retrain with GRU(reset_after=True) (or CuDNNGRU)."
        )
    mode = {4: CUDNN_LSTM, 3: CUDNN_GRU}.get(gates, f"rnn_{activation}")
    if cudnn:
        cls = "CuDNNLSTM" if mode == CUDNN_LSTM else "CuDNNGRU"
        return _Plan(name, cls, mode, True, directions)
    cls = {CUDNN_LSTM: "LSTM", CUDNN_GRU: "GRU"}.get(mode, "SimpleRNN")
    if not assume:
        used = {
            "LSTM": "tanh with sigmoid gates",
            "GRU": "tanh with sigmoid gates and reset_after=True",
            "SimpleRNN": "tanh, or relu with simple_rnn_activation='relu'",
        }[cls]
        raise ValueError(
            f"{where}: a weights-only file does not record the activations of this plain {cls}; "
            f"if it used cuDNN's ({used}), pass assume_cudnn_activations=True (cudnn-rnn: "
            "--activation tanh|relu), or read the whole-model file."
        )
    if len(directions) == 2:
        cls = f"{_WRAPPER}({cls})"
    elif cudnn is None and cls != "SimpleRNN":
        cls = f"{cls} (no bias)"
    return _Plan(name, cls, mode, False, directions)


def _plan_from_config(
    name: str, entry: dict[str, Any], directions: tuple[_Direction, ...], where: str
) -> _Plan:
    cls = entry["class_name"]
    config = entry["config"]
    inner_configs = [(cls, config)]
    if cls == _WRAPPER:
        merge = config.get("merge_mode", "concat")
        if merge != "concat":
            raise ValueError(
                f"{where} (Bidirectional): merge_mode {merge!r} is not supported; cuDNN "
                "concatenates the two directions (merge_mode='concat')."
            )
        inner = [config.get("layer"), config.get("backward_layer") or config.get("layer")]
        if not all(isinstance(i, dict) and isinstance(i.get("config"), dict) for i in inner):
            raise KerasH5Error(f"{where} (Bidirectional): its config has no inner layer.")
        inner_configs = [(i["class_name"], i["config"]) for i in inner]
        if len(directions) != 2:
            raise KerasH5Error(
                f"{where} (Bidirectional): weights of {len(directions)} direction(s)."
            )
    elif len(directions) != 1:
        raise KerasH5Error(f"{where} ({cls}): weights of {len(directions)} directions.")
    modes = set()
    for index, (inner_cls, inner_config) in enumerate(inner_configs):
        shown = inner_cls if cls != _WRAPPER else f"{cls}({inner_cls})"
        backward = cls == _WRAPPER and index == 1 and config.get("backward_layer") is not None
        modes.add(_mode_of_config(inner_cls, inner_config, f"{where} ({shown})", backward))
    if len(modes) != 1:
        raise ValueError(
            f"{where} (Bidirectional): its directions compute different modes {sorted(modes)}."
        )
    mode, cudnn = modes.pop()
    gates, shape_cudnn, variant = _shape_family(directions, where)
    expected_gates = len(GATE_ORDERS["keras"][mode])
    inner_cls = inner_configs[0][0]
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
    units = {c.get("units") for _, c in inner_configs}
    if units != {int(directions[0].recurrent.shape[0])}:
        raise KerasH5Error(
            f"{where}: config units {sorted(map(str, units))} differ from the weights' "
            f"{int(directions[0].recurrent.shape[0])}."
        )
    return _Plan(name, cls if cls != _WRAPPER else f"{cls}({inner_cls})", mode, cudnn, directions)


def _mode_of_config(
    cls: str, config: dict[str, Any], where: str, backward: bool
) -> tuple[str, bool]:
    """(our mode, CuDNN layer) for one Keras RNN layer config; ValueError for other math."""
    if cls not in _CLASSES:
        raise ValueError(
            f"{where}: {cls} layers are not supported; only CuDNNLSTM, CuDNNGRU, LSTM, "
            "GRU(reset_after=True), SimpleRNN and Bidirectional wrappers of them."
        )
    if bool(config.get("go_backwards", False)) != backward:
        raise ValueError(
            f"{where}: go_backwards=True is not supported outside a Bidirectional wrapper (our "
            "layers read sequences forward); reverse the time axis of your input instead."
        )
    mode, cudnn = _CLASSES[cls]
    if cudnn:
        return mode, True  # type: ignore[return-value]
    act = _activation_name(config.get("activation", "tanh"))
    if mode is None:
        if act not in ("tanh", "relu"):
            raise ValueError(
                f"{where}: activation {act!r} has no cuDNN mode; SimpleRNN must use 'tanh' or "
                "'relu'."
            )
        return (CUDNN_RNN_TANH if act == "tanh" else CUDNN_RNN_RELU), False
    if act != "tanh":
        raise ValueError(f"{where}: activation {act!r} is not cuDNN's 'tanh'.")
    rec = _activation_name(config.get("recurrent_activation", "hard_sigmoid"))
    if rec != "sigmoid":
        raise ValueError(
            f"{where}: recurrent_activation {rec!r} is not cuDNN's 'sigmoid' (Keras before 2.3 "
            "defaulted to 'hard_sigmoid'); the outputs would differ."
        )
    if mode == CUDNN_GRU and not config.get("reset_after", False):
        raise ValueError(
            f"{where}: reset_after=False applies the reset gate before the recurrent matmul; "
            "cuDNN applies it after, so the outputs would differ. Retrain with "
            "GRU(reset_after=True) (or CuDNNGRU)."
        )
    return mode, False


# -- building --------------------------------------------------------------------------------


def _check_sizes(plans: list[_Plan], label: str, size: int) -> None:
    """Nothing is read before the bytes the weights claim are known to fit in the file (Keras
    stores them uncompressed), so a hostile shape cannot make us allocate."""
    claimed = sum(
        int(ds.nbytes)
        for p in plans
        for d in p.directions
        for ds in (d.kernel, d.recurrent, d.bias)
        if ds is not None
    )
    if claimed > size:
        raise KerasH5Error(
            f"{OWNER}: {label}: its RNN weights claim {claimed} bytes but the file has {size}; "
            "it is truncated or corrupt."
        )


def _build(plan: _Plan) -> _CudnnRNN:
    blocks: dict[BlockKey, Tensor] = {}
    for d, direction in enumerate(plan.directions):
        kernel = np.asarray(direction.kernel[()])
        recurrent = np.asarray(direction.recurrent[()])
        bias = None if direction.bias is None else np.asarray(direction.bias[()])
        if plan.cudnn and bias is not None:  # a CuDNN layer always has a bias (checked)
            made = _cudnn_blocks(kernel, recurrent, bias, plan.mode)
        else:
            made = keras_blocks(kernel, recurrent, bias, plan.mode)
        blocks.update({(0, d, kind): value for kind, value in made.items()})
    return layer_of_blocks(plan.mode, blocks, 1, len(plan.directions), OWNER)


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
