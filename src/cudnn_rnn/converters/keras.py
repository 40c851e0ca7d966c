"""Keras 3 <-> our layers: ``LSTM``, ``GRU``, ``SimpleRNN``, ``Bidirectional``, with their variants.

Keras stores, per layer and direction, ``kernel [in, G*H]``, ``recurrent_kernel [H, G*H]`` and a
bias, with gates in its own order (LSTM i, f, c, o; GRU z(=u), r, h):

* LSTM, SimpleRNN and GRU ``reset_after=False``: one bias ``[G*H]``. From Keras it becomes
  ``bW`` (``bR = 0``): lossless. To Keras we write ``bW + bR``: the split is lost but the outputs
  are the same (the sum is all the math sees; a reset-before GRU's candidate adds ``bR`` after its
  product too), like TF's own canonical format.
* GRU ``reset_after=True``: bias ``[2, 3H]`` = (input biases, recurrent biases), the reset gate
  applied after the recurrent matmul, exactly cuDNN's GRU: lossless both ways.

What a layer's settings compute beyond cuDNN's math (its activations, ``reset_after=False``,
``go_backwards``, a ``Bidirectional``'s ``merge_mode``) is the file readers' mapping
(:mod:`cudnn_rnn.io.keras.variants`): the layer we build has that variant, and :func:`to_keras`
writes a variant back where Keras has the setting. Keras layers run batch-major: call our layer
with ``time_major=False`` to compare. Keras stays an optional dependency: it is imported only
when a function here runs. Keras's weight layout (blocks of gates, orientation, biases) is
:mod:`cudnn_rnn.io.keras.layout`, shared with those readers.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch import Tensor

from cudnn_rnn.converters.canonical import layer_canonical, layer_from_canonical
from cudnn_rnn.core.constants import CUDNN_GRU, CUDNN_LSTM
from cudnn_rnn.core.layout import INPUT, INPUT_BIAS, RECURRENT, RECURRENT_BIAS
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.core.variant import CUDNN, Activation, Variant
from cudnn_rnn.io.files.escaping import first_line
from cudnn_rnn.io.gate_blocks import BlockKey, stack_gates
from cudnn_rnn.io.keras.layout import canonical_of_blocks, keras_blocks
from cudnn_rnn.io.keras.variants import Dialect, judge, keras_names, merged
from cudnn_rnn.layers import _CudnnRNN

__all__ = ["from_keras", "layer_of_blocks", "layer_of_canonical", "to_keras"]


def _keras() -> Any:
    try:
        import keras
    except ImportError as err:
        raise ImportError(_why_no_keras(err)) from err
    return keras


def _why_no_keras(err: ImportError) -> str:
    """What is missing where ``import keras`` failed with ``err``: keras itself, or (keras is
    installed) the backend it was asked to run on, whose module is not installed."""
    missing = (err.name or "").partition(".")[0]
    if missing == "keras" or importlib.util.find_spec("keras") is None:
        return (
            "cudnn_rnn.convert: Keras conversion needs keras 3 (pip install keras, or "
            "pip install '.[keras]' in a clone of cudnn-rnn)."
        )
    asked = os.environ.get("KERAS_BACKEND")
    backend = (
        f"KERAS_BACKEND={asked}"
        if asked
        else "its default backend, tensorflow, or the one ~/.keras/keras.json names"
    )
    return (
        f"cudnn_rnn.convert: keras is installed, but cannot be imported: it runs on {backend}, "
        f"and {missing or 'a module it needs'} is not installed ({first_line(err)}). Keras 3 "
        "runs on torch: set KERAS_BACKEND=torch before keras is first imported (in the shell, "
        f"or os.environ['KERAS_BACKEND'] = 'torch'), or install {missing or 'that backend'}."
    )


def _math_of(keras: Any, layer: Any, backward: bool | None) -> tuple[str, Variant]:
    """Our mode and variant for one Keras RNN layer (``backward``: its side of a Bidirectional;
    None: a layer alone), refusing what we do not compute."""
    classes = (("LSTM", keras.layers.LSTM), ("GRU", keras.layers.GRU))
    cls = next((name for name, c in classes if isinstance(layer, c)), None)
    if cls is None and isinstance(layer, keras.layers.SimpleRNN):
        cls = "SimpleRNN"
    if cls is None:
        raise TypeError(
            "from_keras: expected Keras LSTM, GRU, SimpleRNN or Bidirectional layers, got "
            f"{type(layer).__name__}."
        )
    judged = judge(cls, layer.get_config(), backward, Dialect(str(keras.__version__), 3))
    if judged.problems or judged.mode is None:
        raise ValueError(f"from_keras: {layer.name}: {' '.join(judged.problems)}")
    variant = judged.variant
    if backward is None and layer.go_backwards:
        variant = replace(variant, time="go_backwards")
    return judged.mode, variant


def _directions(keras: Any, layer: Any) -> list[Any]:
    """A layer's directions: its own, or a Bidirectional's two."""
    if isinstance(layer, keras.layers.Bidirectional):
        return [layer.forward_layer, layer.backward_layer]
    return [layer]


def from_keras(layers: Any) -> _CudnnRNN:
    """Our layer computing what a (stack of) built Keras RNN layer(s) computes.

    ``layers``: one Keras ``LSTM``/``GRU``/``SimpleRNN``, a ``Bidirectional`` wrapper of one,
    or a list of them stacked (each feeding the next), all of one mode and variant (a
    ``go_backwards`` layer alone: its outputs come in processing order).
    """
    keras = _keras()
    stack = list(layers) if isinstance(layers, (list, tuple)) else [layers]
    if not stack:
        raise ValueError("from_keras: no layers given.")
    maths = set()
    dirs = []
    for layer in stack:
        directions = _directions(keras, layer)
        dirs.append(directions)
        for i, direction in enumerate(directions):
            mode, variant = _math_of(keras, direction, None if len(directions) == 1 else i == 1)
            if len(directions) == 2:
                merge, why = merged(variant, layer.merge_mode)
                if merge is None:
                    raise ValueError(f"from_keras: {layer.name}: {why}")
                variant = merge
            maths.add((mode, variant))
    if len(maths) != 1 or len({len(d) for d in dirs}) != 1:
        raise ValueError(
            "from_keras: stacked layers must share one type, variant and direction, got "
            f"{sorted(m for m, _ in maths)} with {[len(d) for d in dirs]} direction(s)."
        )
    mode, variant = maths.pop()
    if variant.time == "go_backwards" and len(stack) > 1:
        raise ValueError(
            "from_keras: go_backwards layers return their outputs in processing order, which "
            "the next layer would read reversed: convert each with from_keras on its own."
        )
    cells = [d for per_layer in dirs for d in per_layer]
    if any(not d.built for d in cells):
        raise ValueError("from_keras: build the Keras layers first (call them once on data).")
    units = {int(d.units) for d in cells}
    if len(units) != 1:
        raise ValueError(f"from_keras: stacked layers must have equal units, got {sorted(units)}.")
    h, num_dirs = units.pop(), len(dirs[0])
    blocks: dict[BlockKey, Tensor] = {
        (index, d, kind): value
        for index, per_layer in enumerate(dirs)
        for d, direction in enumerate(per_layer)
        for kind, value in _keras_blocks(direction).items()
    }
    width = h * (num_dirs if variant.merge == "concat" else 1)
    for index in range(1, len(stack)):
        given = int(blocks[(index, 0, INPUT)].shape[1])
        if given != width:
            raise ValueError(
                f"from_keras: layer {index} takes {given} inputs but layer {index - 1} gives "
                f"{width}."
            )
    return layer_of_blocks(mode, blocks, len(stack), num_dirs, "from_keras", variant)


def layer_of_blocks(
    mode: str,
    blocks: dict[BlockKey, Tensor],
    num_layers: int,
    num_dirs: int,
    owner: str,
    variant: Variant = CUDNN,
) -> _CudnnRNN:
    """Our layer holding stacked blocks in Keras gate order (float16/float64 kept, else float32)
    computing ``variant``; ``num_units`` and ``input_size`` come from layer 0's input block."""
    spec, weights, biases = canonical_of_blocks(mode, blocks, num_layers, num_dirs, variant)
    return layer_of_canonical(spec, weights, biases, owner)


def layer_of_canonical(
    spec: RNNSpec, weights: list[Tensor], biases: list[Tensor], owner: str
) -> _CudnnRNN:
    """Our layer (CPU) holding canonical tensors read from a Keras file or layer: float16 and
    float64 kept, anything else float32."""
    dtype = weights[0].dtype
    return layer_from_canonical(
        spec,
        weights,
        biases,
        owner=owner,
        device=torch.device("cpu"),
        dtype=dtype if dtype in (torch.float16, torch.float64) else torch.float32,
    )


def _keras_blocks(layer: Any) -> dict[str, Tensor]:
    """One direction's stacked blocks, Keras gate order, oriented ``[G*H, ...]`` like ours."""
    cell = getattr(layer, "cell", layer)
    values = {v.path.rsplit("/", 1)[-1]: np.asarray(v.numpy()) for v in cell.weights}
    return keras_blocks(values["kernel"], values["recurrent_kernel"], values.get("bias"))


def to_keras(layer: _CudnnRNN) -> list[Any]:
    """Keras layers (one per layer; ``Bidirectional`` when bidirectional) with our weights set,
    computing our layer's variant where Keras has its settings (activations, ``reset_after``,
    ``go_backwards``, ``merge_mode``; a ValueError names what Keras has not).

    Each returns sequences; stack them (e.g. in ``keras.Sequential``) and feed batch-major input.
    Summed biases: LSTM, SimpleRNN and a reset-before GRU get ``bW + bR`` (same outputs); a
    reset-after GRU keeps both exactly.
    """
    keras = _keras()
    spec, weights, biases = layer_canonical(layer, "to_keras")
    if spec.num_proj is not None:
        raise ValueError(
            "to_keras: Keras layers have no LSTM projection (num_proj); a model with num_proj "
            "cannot be expressed in Keras."
        )
    settings = _keras_settings(spec, Dialect(str(keras.__version__), 3))
    blocks = stack_gates(spec, weights, biases, "keras")
    mode, h, variant = spec.mode, spec.num_units, spec.variant
    dtype = "float64" if layer.dtype == torch.float64 else "float32"
    cls = {CUDNN_LSTM: keras.layers.LSTM, CUDNN_GRU: keras.layers.GRU}.get(
        mode, keras.layers.SimpleRNN
    )
    out = []
    for index in range(spec.num_layers):
        made = []
        for d in range(spec.num_dirs):
            kernel, recurrent, b_in, b_rec = (
                blocks[(index, d, kind)].double().cpu().numpy()
                for kind in (INPUT, RECURRENT, INPUT_BIAS, RECURRENT_BIAS)
            )
            two = mode == CUDNN_GRU and variant.reset_after
            bias = np.stack([b_in, b_rec]) if two else b_in + b_rec
            backward = d == 1 or variant.time == "go_backwards"
            rnn = cls(h, return_sequences=True, dtype=dtype, go_backwards=backward, **settings)
            rnn.build((None, None, kernel.shape[1]))
            rnn.set_weights([a.astype(dtype) for a in (kernel.T, recurrent.T, bias)])
            made.append(rnn)
        if spec.num_dirs == 2:
            wrapper = keras.layers.Bidirectional(
                made[0], backward_layer=made[1], merge_mode=variant.merge
            )
            wrapper.build((None, None, spec.layer_input_size(index)))
            wrapper.forward_layer.set_weights(made[0].get_weights())
            wrapper.backward_layer.set_weights(made[1].get_weights())
            out.append(wrapper)
        else:
            out.append(made[0])
    return out


def _keras_settings(spec: RNNSpec, dialect: Dialect) -> dict[str, Any]:
    """The Keras settings of a spec's math (activations, ``reset_after``), or a ValueError
    naming what Keras's layers do not have."""
    variant = spec.variant
    kept = {"gate_activation", "cell_activation", "output_activation", "reset_after", "merge"}
    foreign = sorted(set(variant.changed()) - kept - {"time"})
    if variant.time == "reverse":
        foreign.append("time='reverse' (outputs aligned with the input)")
    if foreign:
        raise ValueError(
            f"to_keras: this layer computes a variant ({variant.describe()}) with "
            f"{', '.join(foreign)}, which Keras's LSTM, GRU and SimpleRNN layers do not have."
        )
    cell = variant.cell_activation or Activation("relu" if spec.mode == "rnn_relu" else "tanh")
    if spec.mode == CUDNN_LSTM and cell != variant.output_activation:
        raise ValueError(
            f"to_keras: Keras's LSTM applies one activation to its candidate and to its cell "
            f"state's output; this layer has {cell.describe()} and "
            f"{variant.output_activation.describe()}."
        )
    used = {"activation": cell}
    if spec.mode in (CUDNN_LSTM, CUDNN_GRU):
        used["recurrent_activation"] = variant.gate_activation
    settings: dict[str, Any] = {}
    for setting, activation in used.items():
        name = keras_names(dialect).get(activation)
        if name is None:
            raise ValueError(
                f"to_keras: Keras {dialect.major} has no activation {activation.describe()} "
                f"(for {setting})."
            )
        settings[setting] = name
    if spec.mode == CUDNN_GRU:
        settings["reset_after"] = variant.reset_after
    return settings
