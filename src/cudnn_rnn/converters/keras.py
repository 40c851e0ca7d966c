"""Keras 3 <-> our layers: ``LSTM``, ``GRU(reset_after=True)``, ``SimpleRNN``, ``Bidirectional``.

Keras stores, per layer and direction, ``kernel [in, G*H]``, ``recurrent_kernel [H, G*H]`` and a
bias, with gates in its own order (LSTM i, f, c, o; GRU z(=u), r, h). The math is cuDNN's when:

* LSTM and SimpleRNN: one bias ``[G*H]``. From Keras it becomes ``bW`` (``bR = 0``): lossless. To
  Keras we write ``bW + bR``: the split is lost but the outputs are the same (the sum is all the
  math sees), like TF's own canonical format.
* GRU with ``reset_after=True``: bias ``[2, 3H]`` = (input biases, recurrent biases), the reset
  gate applied after the recurrent matmul, exactly cuDNN's GRU: lossless both ways.
  ``reset_after=False`` computes different math (reset before the matmul) and is refused.

Keras layers run batch-major: call our layer with ``time_major=False`` to compare. Keras stays an
optional dependency: it is imported only when a function here runs.

A layer built with ``go_backwards=True`` (outside ``Bidirectional``) is cuDNN's math on the
input reversed in time: Keras's RNN loop flips the input (and its mask) along the time axis
before the first step, and stacks the outputs in the order it computed them, so a layer that
returns sequences returns them reversed too (its last output, and its final state, are those of
the input's first step). The file readers (:mod:`cudnn_rnn.io.keras`) read such a layer and say
so in :data:`cudnn_rnn.io.keras.layout.GO_BACKWARDS_NOTE`. Keras's weight layout (blocks of
gates, orientation, biases) is :mod:`cudnn_rnn.io.keras.layout`, shared with those readers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from cudnn_rnn.converters.canonical import layer_canonical, layer_from_canonical
from cudnn_rnn.core.constants import CUDNN_GRU, CUDNN_LSTM, CUDNN_RNN_RELU, CUDNN_RNN_TANH
from cudnn_rnn.core.layout import INPUT, INPUT_BIAS, RECURRENT, RECURRENT_BIAS
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.io.gate_blocks import BlockKey, stack_gates
from cudnn_rnn.io.keras.layout import canonical_of_blocks, keras_blocks
from cudnn_rnn.layers import _CudnnRNN

__all__ = ["from_keras", "layer_of_blocks", "layer_of_canonical", "to_keras"]


def _keras() -> Any:
    try:
        import keras
    except ImportError as err:  # pragma: no cover - exercised only without keras
        raise ImportError(
            "cudnn_rnn.convert: Keras conversion needs keras 3 (pip install keras)."
        ) from err
    return keras


def _mode_of(keras: Any, layer: Any, backward: bool) -> str:
    """Our mode for one Keras RNN layer, refusing what computes other math."""
    name = type(layer).__name__
    act = getattr(getattr(layer, "activation", None), "__name__", None)
    rec = getattr(getattr(layer, "recurrent_activation", None), "__name__", "sigmoid")
    if getattr(layer, "go_backwards", False) != backward:
        raise ValueError(
            f"from_keras: {layer.name}: go_backwards layers are not supported; use "
            "a Bidirectional wrapper."
        )
    if isinstance(layer, keras.layers.LSTM):
        mode = CUDNN_LSTM
    elif isinstance(layer, keras.layers.GRU):
        if not layer.reset_after:
            raise ValueError(
                f"from_keras: {layer.name}: GRU(reset_after=False) computes different math (the "
                "reset gate is applied before the recurrent matmul; cuDNN applies it after). Use "
                "GRU(reset_after=True), the Keras default."
            )
        mode = CUDNN_GRU
    elif isinstance(layer, keras.layers.SimpleRNN):
        if act not in ("tanh", "relu"):
            raise ValueError(
                f"from_keras: {layer.name}: SimpleRNN activation {act!r} has no "
                "cuDNN mode; expected 'tanh' or 'relu'."
            )
        return CUDNN_RNN_TANH if act == "tanh" else CUDNN_RNN_RELU
    else:
        raise TypeError(
            f"from_keras: expected Keras LSTM, GRU, SimpleRNN or Bidirectional layers, got {name}."
        )
    if act != "tanh" or rec != "sigmoid":
        raise ValueError(
            f"from_keras: {layer.name}: activations ({act!r}, {rec!r}) differ from "
            "cuDNN's ('tanh', 'sigmoid')."
        )
    return mode


def _directions(keras: Any, layer: Any) -> list[Any]:
    if isinstance(layer, keras.layers.Bidirectional):
        if layer.merge_mode != "concat":
            raise ValueError(
                f"from_keras: {layer.name}: merge_mode {layer.merge_mode!r} is not "
                "supported; cuDNN concatenates the directions ('concat')."
            )
        return [layer.forward_layer, layer.backward_layer]
    return [layer]


def from_keras(layers: Any) -> _CudnnRNN:
    """Our layer computing what a (stack of) built Keras RNN layer(s) computes.

    ``layers``: one Keras ``LSTM``/``GRU(reset_after=True)``/``SimpleRNN``, a ``Bidirectional``
    wrapper of one, or a list of them stacked (each feeding the next).
    """
    keras = _keras()
    stack = list(layers) if isinstance(layers, (list, tuple)) else [layers]
    if not stack:
        raise ValueError("from_keras: no layers given.")
    dirs = [_directions(keras, layer) for layer in stack]
    modes = {_mode_of(keras, d, i == 1) for per_layer in dirs for i, d in enumerate(per_layer)}
    if len(modes) != 1 or len({len(d) for d in dirs}) != 1:
        raise ValueError(
            "from_keras: stacked layers must share one type and one direction, got "
            f"{sorted(modes)} with {[len(d) for d in dirs]} direction(s)."
        )
    mode = modes.pop()
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
        for kind, value in _keras_blocks(direction, mode).items()
    }
    for index in range(1, len(stack)):
        width = int(blocks[(index, 0, INPUT)].shape[1])
        if width != num_dirs * h:
            raise ValueError(
                f"from_keras: layer {index} takes {width} inputs but layer {index - 1} gives "
                f"{num_dirs * h}."
            )
    return layer_of_blocks(mode, blocks, len(stack), num_dirs, "from_keras")


def layer_of_blocks(
    mode: str, blocks: dict[BlockKey, Tensor], num_layers: int, num_dirs: int, owner: str
) -> _CudnnRNN:
    """Our layer holding stacked blocks in Keras gate order (float16/float64 kept, else float32);
    ``num_units`` and ``input_size`` come from layer 0's input block."""
    spec, weights, biases = canonical_of_blocks(mode, blocks, num_layers, num_dirs)
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


def _keras_blocks(layer: Any, mode: str) -> dict[str, Tensor]:
    """One direction's stacked blocks, Keras gate order, oriented ``[G*H, ...]`` like ours."""
    cell = getattr(layer, "cell", layer)
    values = {v.path.rsplit("/", 1)[-1]: np.asarray(v.numpy()) for v in cell.weights}
    return keras_blocks(values["kernel"], values["recurrent_kernel"], values.get("bias"), mode)


def to_keras(layer: _CudnnRNN) -> list[Any]:
    """Keras layers (one per layer; ``Bidirectional`` when bidirectional) with our weights set.

    Each returns sequences; stack them (e.g. in ``keras.Sequential``) and feed batch-major input.
    Summed biases: LSTM and SimpleRNN get ``bW + bR`` (same outputs); GRU keeps both exactly.
    """
    keras = _keras()
    spec, weights, biases = layer_canonical(layer, "to_keras")
    if spec.num_proj is not None:
        raise ValueError(
            "to_keras: Keras layers have no LSTM projection (num_proj); a model with num_proj "
            "cannot be expressed in Keras."
        )
    blocks = stack_gates(spec, weights, biases, "keras")
    mode, h = spec.mode, spec.num_units
    dtype = "float64" if layer.dtype == torch.float64 else "float32"
    out = []
    for index in range(spec.num_layers):
        made = []
        for d in range(spec.num_dirs):
            kernel, recurrent, b_in, b_rec = (
                blocks[(index, d, kind)].double().cpu().numpy()
                for kind in (INPUT, RECURRENT, INPUT_BIAS, RECURRENT_BIAS)
            )
            bias = np.stack([b_in, b_rec]) if mode == CUDNN_GRU else b_in + b_rec
            kwargs: dict[str, Any] = dict(return_sequences=True, dtype=dtype, go_backwards=d == 1)
            if mode == CUDNN_LSTM:
                cls = keras.layers.LSTM
            elif mode == CUDNN_GRU:
                cls, kwargs["reset_after"] = keras.layers.GRU, True
            else:
                cls = keras.layers.SimpleRNN
                kwargs["activation"] = "tanh" if mode == CUDNN_RNN_TANH else "relu"
            rnn = cls(h, **kwargs)
            rnn.build((None, None, kernel.shape[1]))
            rnn.set_weights([a.astype(dtype) for a in (kernel.T, recurrent.T, bias)])
            made.append(rnn)
        if spec.num_dirs == 2:
            wrapper = keras.layers.Bidirectional(made[0], backward_layer=made[1])
            wrapper.build((None, None, spec.layer_input_size(index)))
            wrapper.forward_layer.set_weights(made[0].get_weights())
            wrapper.backward_layer.set_weights(made[1].get_weights())
            out.append(wrapper)
        else:
            out.append(made[0])
    return out
