"""Canonical tensors <-> stacked per-gate blocks: the one mapping every converter uses.

A framework stores, per layer and direction, one tensor per kind (input weights, recurrent
weights, input biases, recurrent biases, projection) with the gate blocks stacked in its own
order. :func:`stack_gates` builds those stacks from our canonical tensors (via the layout table's
tags, never offsets) and :func:`unstack_gates` goes back; gate orders come from ``GATE_ORDERS``.

This module knows specs and tensors only, never layers: graph builders such as
:mod:`cudnn_rnn.io.onnx.graph` use it without importing the layer stack.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from cudnn_rnn.core.gates import CUDNN_GATES, GATE_ORDERS, permute_gates
from cudnn_rnn.core.layout import PROJECTION, layout_of
from cudnn_rnn.core.spec import RNNSpec

__all__ = ["BlockKey", "stack_gates", "unstack_gates"]

#: (layer, direction, kind): one stacked block of a pseudo-layer, as the layout table tags it.
BlockKey = tuple[int, int, str]


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
