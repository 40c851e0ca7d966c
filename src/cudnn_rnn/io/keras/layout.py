"""Keras's weight layout <-> canonical tensors: what the Keras file readers and the Keras
object converter share (data only: no Keras, no layers).

Keras stores, per layer and direction, ``kernel [in, G*H]``, ``recurrent_kernel [H, G*H]`` and a
bias (``[G*H]``; a GRU with ``reset_after=True`` ``[2, 3H]``: input biases, recurrent biases),
gates in its own order (LSTM i, f, c, o; GRU z(=u), r, h). :func:`keras_blocks` turns one
direction's arrays into stacked blocks oriented like ours, :func:`canonical_of_blocks` a stack of
them into canonical tensors.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from cudnn_rnn.core.gates import GATE_ORDERS
from cudnn_rnn.core.layout import INPUT, INPUT_BIAS, RECURRENT, RECURRENT_BIAS
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.core.variant import CUDNN, Variant
from cudnn_rnn.io.gate_blocks import BlockKey, unstack_gates

__all__ = ["canonical_of_blocks", "keras_blocks"]


def canonical_of_blocks(
    mode: str,
    blocks: dict[BlockKey, Tensor],
    num_layers: int,
    num_dirs: int,
    variant: Variant = CUDNN,
) -> tuple[RNNSpec, list[Tensor], list[Tensor]]:
    """``(spec, weights, biases)`` of stacked blocks in Keras gate order (canonical order, the
    blocks' dtype) computing ``variant``; ``num_units`` and ``input_size`` come from layer 0's
    input block."""
    first = blocks[(0, 0, INPUT)]
    spec = RNNSpec(
        mode,
        num_layers,
        int(first.shape[0]) // len(GATE_ORDERS["keras"][mode]),
        int(first.shape[1]),
        direction="bidirectional" if num_dirs == 2 else "unidirectional",
        variant=variant,
    )
    weights, biases = unstack_gates(spec, blocks, "keras")
    return spec, weights, biases


def keras_blocks(
    kernel: np.ndarray, recurrent_kernel: np.ndarray, bias: np.ndarray | None
) -> dict[str, Tensor]:
    """One direction's blocks from Keras arrays (``kernel [in, G*H]``, ``recurrent_kernel
    [H, G*H]``, bias ``[G*H]``, GRU ``reset_after=True`` ``[2, 3H]``, or None), oriented
    ``[G*H, ...]`` like ours. One bias per gate (LSTM, SimpleRNN, GRU ``reset_after=False``)
    is the input bias, the recurrent bias zero: the math adds both the same way (a reset-before
    GRU's candidate adds ``b_Rh`` after its product)."""
    if bias is None:
        b_in = b_rec = np.zeros(kernel.shape[1], kernel.dtype)
    elif bias.ndim == 2:  # GRU reset_after: [input biases; recurrent biases]
        b_in, b_rec = bias[0], bias[1]
    else:
        b_in, b_rec = bias, np.zeros_like(bias)
    arrays = {
        INPUT: kernel.T,
        RECURRENT: recurrent_kernel.T,
        INPUT_BIAS: b_in,
        RECURRENT_BIAS: b_rec,
    }
    return {kind: torch.from_numpy(np.ascontiguousarray(a)) for kind, a in arrays.items()}
