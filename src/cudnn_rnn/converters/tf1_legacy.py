"""TF1 checkpoints written under older names: TF 1.3's saveable and TF 1.8-1.15's object graph.

``checkpoint.restore(PREFIX, objects)`` reads a TF1 bundle by the canonical names the objects
expect (docs/checkpoint_format.md). Two older forms are read as aliases of them, before the
usual checks of names, shapes and dtypes, so errors and all-or-nothing stay as they are:

- TF 1.3's ``RNNParamsSaveable`` named unidirectional LSTMs and GRUs
  ``[<scope>/]multi_rnn_cell/cell_<l>/<cell>/...`` (no ``rnn/``) and stored, beside each summed
  bias, the two exact biases ``bW`` and ``bR`` of its gates. Where they are in the file they are
  used exactly (both biases of every gate), not the half split of the sum.
- TF 1.8-1.15's ``tf.train.Checkpoint`` of a unidirectional ``CudnnLSTM`` keyed its canonical
  ``kernel``/``bias`` by the layer's path in the object graph (``<path>/cell-<l>/kernel/
  .ATTRIBUTES/VARIABLE_VALUE``). The path is ``object_path=`` or, when one path of the file fits
  the model, found.

The names themselves are built and parsed by :mod:`cudnn_rnn.core.tf_names`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from torch import Tensor

from cudnn_rnn.checkpointable import Shape
from cudnn_rnn.core import tf_names
from cudnn_rnn.core.gates import GATE_ORDERS
from cudnn_rnn.core.layout import INPUT_BIAS, RECURRENT_BIAS, layout_of
from cudnn_rnn.io.files import Claims
from cudnn_rnn.io.files.escaping import quote
from cudnn_rnn.layers import _CudnnRNN
from cudnn_rnn.saveable.saveables import CudnnOpaqueParamsSaveable

__all__ = ["ExactBiases", "FileNames", "exact_biases", "file_names"]


@dataclass
class FileNames:
    """Where each expected canonical tensor is in the file, and what else to read."""

    #: canonical name -> the name in the file (itself, a TF 1.3 alias or an object key).
    names: dict[str, str]
    #: TF 1.3 exact biases to read too: file name -> expected shape.
    extra: dict[str, Shape] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def expected(self, shapes: Mapping[str, Shape]) -> dict[str, Shape]:
        """The file's names with their expected shapes."""
        out = {self.names[n]: s for n, s in shapes.items()}
        out.update(self.extra)
        return out


def file_names(
    expected: Mapping[str, Shape],
    claims: Claims,
    objects: Sequence[Any],
    object_path: str | None = None,
) -> FileNames:
    """Map each canonical name of ``expected`` to the name the file ``claims`` holds it under.

    A name in the file is itself; else its TF 1.3 alias where the file has that; else, for the
    names of a unidirectional LSTM object, its object-based key. Names found nowhere stay as
    they are (the checks after this report them missing).
    """
    if object_path is not None and (not isinstance(object_path, str) or not object_path):
        raise TypeError(
            "checkpoint.restore: object_path must be a non-empty str (the layer's path in a "
            f"tf.train.Checkpoint, e.g. 'model/lstm'), got {object_path!r}."
        )
    out = FileNames({n: n for n in expected})
    for name in expected:
        if name in claims:
            continue
        parsed = tf_names.parse(name)
        legacy = None if parsed is None else tf_names.legacy_name(parsed)
        if legacy is not None and str(legacy) in claims:
            out.names[name] = str(legacy)
            assert parsed is not None
            exact = tf_names.exact_bias_names(parsed)
            if exact is not None and all(e in claims for e in exact):
                out.extra.update(dict.fromkeys(exact, expected[name]))
    for obj in objects:
        shapes = obj.checkpoint_shapes()
        if all(out.names[n] in claims for n in shapes):
            continue
        layers = _lstm_layers(shapes)
        if layers is None:
            continue
        path = _object_path(layers, claims, object_path, type(obj).__name__, out.problems)
        if path is not None:
            for (layer, variable), name in layers.items():
                out.names[name] = _key(path, layer, variable, len(layers) // 2, claims)
    if object_path is not None and not any(
        tf_names.parse_object_key(n) is not None for n in out.names.values()
    ):
        out.problems.append(
            f"object_path={object_path!r}: no restored object is a unidirectional CudnnLSTM "
            "(or an LSTM cell stack) whose kernel and bias the file holds under it"
        )
    return out


def _lstm_layers(shapes: Mapping[str, Shape]) -> dict[tuple[int, str], str] | None:
    """(layer, kernel|bias) -> name, when ``shapes`` are a unidirectional LSTM's and only
    those (what TF 1.x could save object-based)."""
    out: dict[tuple[int, str], str] = {}
    for name in shapes:
        p = tf_names.parse(name)
        if (
            p is None
            or p.bidirectional
            or p.cell != tf_names.LSTM_CELL
            or p.variable not in (tf_names.KERNEL, tf_names.BIAS)
        ):
            return None
        out[p.layer, p.variable] = name
    num_layers = len(out) // 2
    wanted = {(layer, v) for layer in range(num_layers) for v in (tf_names.KERNEL, tf_names.BIAS)}
    return out if out and set(out) == wanted else None


def _key(path: str, layer: int, variable: str, num_layers: int, claims: Claims) -> str:
    key = tf_names.object_key(path, layer, variable, num_layers=num_layers)
    if num_layers == 1 and key not in claims:  # also tracked as cell-0 (a MultiRNNCell's form)
        return str(tf_names.ObjectKey(path, 0, variable))
    return key


def _object_path(
    layers: Mapping[tuple[int, str], str],
    claims: Claims,
    given: str | None,
    label: str,
    problems: list[str],
) -> str | None:
    num_layers = len(layers) // 2
    found: dict[str, set[tuple[int | None, str]]] = {}
    for name in claims:
        key = tf_names.parse_object_key(name)
        if key is not None:
            found.setdefault(key.path, set()).add((key.layer, key.variable))

    def fits(path: str) -> bool:
        have = found.get(path, set())
        if any(layer is not None and layer >= num_layers for layer, _ in have):
            return False  # a deeper model
        return all(_key(path, n, v, num_layers, claims) in claims for n, v in layers)

    if given is not None:
        return given if fits(given) else None
    fitting = sorted(p for p in found if fits(p))
    if len(fitting) > 1:
        problems.append(
            f"{label}: the file holds several object-based LSTMs of its shape "
            f"({', '.join(map(quote, fitting))}); pass object_path= to pick one"
        )
        return None
    return fitting[0] if fitting else None


@dataclass
class ExactBiases:
    """The opaque buffers to write instead of the canonical load's: TF 1.3's exact biases."""

    writes: list[tuple[Tensor, Tensor]] = field(default_factory=list)


def exact_biases(
    objects: Sequence[Any],
    canonical: Mapping[str, Tensor],
    extra: Mapping[str, Tensor],
    problems: list[str],
) -> ExactBiases:
    """The buffers of the layers and saveables in ``objects`` whose TF 1.3 exact biases were
    read (``extra``): every weight from the canonical tensors, both biases of every gate
    exactly. ``bW + bR`` must equal the saved sum (TF added them once, in the file's dtype; one
    ulp is forgiven); else a problem is reported and nothing is planned."""
    out = ExactBiases()
    for obj in objects:
        param: Tensor
        if isinstance(obj, _CudnnRNN):
            if not obj.built:
                continue
            saveable, param, label = obj.saveable, obj.opaque_kernel, type(obj).__name__
        elif isinstance(obj, CudnnOpaqueParamsSaveable):
            saveable, param, label = obj, obj.opaque_params, type(obj).__name__
        else:
            continue
        pairs = _pairs(saveable, canonical, extra, label, problems)
        if not pairs:
            continue
        spec = saveable.spec
        tf_list = [canonical[n] for n in saveable.checkpoint_shapes()]
        flat = saveable.format_converter.tf_canonical_to_opaque(tf_list).detach().clone()
        _, biases = layout_of(spec).unpack(flat)
        gates = GATE_ORDERS["tf"][spec.mode]
        for p, view in zip(layout_of(spec).biases, biases):
            if p.gate not in gates or p.layer not in pairs:
                continue  # the GRU candidate's biases are exact already
            which = {INPUT_BIAS: 0, RECURRENT_BIAS: 1}[p.kind]
            block = gates.index(p.gate)
            h = p.shape[0]
            view.copy_(pairs[p.layer][which][block * h : (block + 1) * h])
        out.writes.append((param, flat.to(param.device, param.dtype)))
    return out


def _pairs(
    saveable: CudnnOpaqueParamsSaveable,
    canonical: Mapping[str, Tensor],
    extra: Mapping[str, Tensor],
    label: str,
    problems: list[str],
) -> dict[int, tuple[Tensor, Tensor]]:
    """layer -> (bW, bR) in TF's gate order, for the layers whose exact biases were read."""
    out: dict[int, tuple[Tensor, Tensor]] = {}
    for name in saveable.checkpoint_shapes():
        parsed = tf_names.parse(name)
        exact = None if parsed is None else tf_names.exact_bias_names(parsed)
        if exact is None or not all(e in extra for e in exact):
            continue
        assert parsed is not None
        w, r = (extra[e] for e in exact)
        summed = canonical[name]
        if not (w.dtype == r.dtype == summed.dtype):
            problems.append(
                f"{label}: {exact[0]!r}, {exact[1]!r} and {tf_names.legacy_name(parsed)}'s sum "
                "differ in dtype"
            )
            continue
        total, want = (w + r).numpy(), summed.numpy()
        ulp = np.spacing(np.maximum(np.abs(total), np.abs(want)))
        if not np.all(np.abs(total.astype(np.float64) - want.astype(np.float64)) <= ulp):
            problems.append(
                f"{label}: {exact[0]!r} + {exact[1]!r} is not the summed bias "
                f"{str(tf_names.legacy_name(parsed))!r}; the file is inconsistent"
            )
            continue
        out[parsed.layer] = (w, r)
    return out
