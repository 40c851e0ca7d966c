"""Our layers <-> canonical tensors: where every layer converter starts and ends.

:func:`layer_canonical` reads a built layer's canonical ``(spec, weights, biases)`` and
:func:`layer_from_canonical` builds a layer holding given ones; both ask the layout table, never
offsets. Stacking the gate blocks in a framework's order is :mod:`cudnn_rnn.io.gate_blocks`,
which knows no layers.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from cudnn_rnn.core.layout import layout_of
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.layers import _CudnnRNN, layer_of

__all__ = ["layer_canonical", "layer_from_canonical"]


def layer_canonical(layer: _CudnnRNN, owner: str) -> tuple[RNNSpec, list[Tensor], list[Tensor]]:
    """``(spec, weights, biases)`` of a built layer: canonical views, detached (identity where
    skip_input stores none)."""
    if not isinstance(layer, _CudnnRNN):
        raise TypeError(
            f"{owner}: expected a CudnnLSTM, CudnnGRU, CudnnRNNTanh or CudnnRNNRelu layer, got "
            f"{type(layer).__name__}."
        )
    if not layer.built:
        raise RuntimeError(
            f"{owner}: {type(layer).__name__} is not built yet, so its input size is unknown; "
            "call it once, call build(input_shape) or pass input_size."
        )
    spec = layer.spec
    weights, biases = layout_of(spec).unpack(layer.opaque_kernel.detach())
    return spec, weights, biases


def layer_from_canonical(
    spec: RNNSpec,
    weights: Sequence[Tensor],
    biases: Sequence[Tensor],
    *,
    dtype: torch.dtype,
    device: torch.device,
    owner: str,
) -> _CudnnRNN:
    """A built layer of ``spec`` (dropout included) holding the canonical ``(weights, biases)``."""
    layer = layer_of(
        spec,
        dtype=dtype,
        # Zeros, not a random draw: every value is overwritten below, and the global RNG is
        # left alone.
        kernel_initializer=lambda shape: torch.zeros(shape, dtype=dtype),
        device=device,
    )
    flat = layout_of(layer.spec).pack(
        [w.to(device, dtype) for w in weights], [b.to(device, dtype) for b in biases], owner=owner
    )
    with torch.no_grad():
        layer.opaque_kernel.copy_(flat)
    return layer
