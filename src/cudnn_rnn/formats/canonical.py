"""Canonical tensors <-> stacked per-gate blocks: the one mapping every converter uses.

A framework stores, per layer and direction, one tensor per kind (input weights, recurrent
weights, input biases, recurrent biases, projection) with the gate blocks stacked in its own
order. :func:`stack_gates` builds those stacks from our canonical tensors (via the layout table's
tags, never offsets) and :func:`unstack_gates` goes back; gate orders come from ``GATE_ORDERS``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from cudnn_rnn.core.gates import CUDNN_GATES, GATE_ORDERS, permute_gates
from cudnn_rnn.core.layout import PROJECTION, layout_of
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.layers import _CudnnRNN, layer_of

__all__ = ["BlockKey", "layer_canonical", "layer_from_canonical", "stack_gates", "unstack_gates"]

#: (layer, direction, kind): one stacked block of a pseudo-layer, as the layout table tags it.
BlockKey = tuple[int, int, str]


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


def stack_gates(
    spec: RNNSpec, weights: Sequence[Tensor], biases: Sequence[Tensor], order: str
) -> dict[BlockKey, Tensor]:
    """Canonical tensors grouped by (layer, direction, kind), gate blocks stacked along dim 0
    in framework ``order`` (a key of ``GATE_ORDERS``); the projection is a single block."""
    gates = CUDNN_GATES[spec.mode]
    groups: dict[BlockKey, list[tuple[int, Tensor]]] = {}
    layout = layout_of(spec)
    for p, t in zip(layout.weights + layout.biases, [*weights, *biases]):
        rank = 0 if p.gate is None else gates.index(p.gate)
        groups.setdefault((p.layer, p.direction, p.kind), []).append((rank, t))
    out = {}
    for key, parts in groups.items():
        stacked = torch.cat([t for _, t in sorted(parts, key=lambda part: part[0])])
        out[key] = (
            stacked
            if key[2] == PROJECTION
            else permute_gates(stacked, gates, GATE_ORDERS[order][spec.mode])
        )
    return out


def unstack_gates(
    spec: RNNSpec, blocks: Mapping[BlockKey, Tensor], order: str
) -> tuple[list[Tensor], list[Tensor]]:
    """The inverse of :func:`stack_gates`: canonical ``(weights, biases)`` of stacked blocks."""
    gates = CUDNN_GATES[spec.mode]
    layout = layout_of(spec)

    def canonical(key: BlockKey, gate: str | None) -> Tensor:
        stacked = blocks[key]
        if gate is None:
            return stacked
        ours = permute_gates(stacked, GATE_ORDERS[order][spec.mode], gates)
        return ours.chunk(len(gates))[gates.index(gate)]

    def of(params: Sequence[Any]) -> list[Tensor]:
        return [canonical((p.layer, p.direction, p.kind), p.gate) for p in params]

    return of(layout.weights), of(layout.biases)


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
