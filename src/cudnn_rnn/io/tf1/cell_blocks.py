"""One TF cell's variables as cuDNN's canonical tensors (:func:`cell_blocks`).

A TF kernel stacks the input matrix (its upper rows) over the recurrent one, transposed (``[x, h]
@ kernel``), with the gates side by side in TF's order (LSTM ``i, j, f, o``, ``j`` being cuDNN's
candidate ``c``; a GRU's ``gates`` kernel ``r, u`` and its ``candidate`` kernel, cuDNN's ``h``, a
tensor of its own). Each gate has one bias: it becomes cuDNN's input bias, and the recurrent bias
is zero; the GRU's candidate bias is added outside the reset gate (TF's
``tanh([x, r * h] @ W_c + b_c)``), which the variant ``reset_after=False`` computes with
``b_Rh = 0``. TF's LSTMs add ``forget_bias`` to the forget gate at run time: here it is added to
that gate's input bias. The peepholes ``w_i_diag, w_f_diag, w_o_diag`` are cuDNN's ``P_i, P_f,
P_o`` as they are (TF's ``i`` and ``f`` see ``c_{t-1}``, ``o`` sees ``c_t``, as
:mod:`cudnn_rnn.core.reference`'s peepholes do).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from cudnn_rnn.core.constants import CUDNN_GRU, CUDNN_LSTM
from cudnn_rnn.core.gates import CUDNN_GATES, GATE_ORDERS, permute_gates
from cudnn_rnn.core.layout import (
    INPUT,
    INPUT_BIAS,
    PEEPHOLE,
    PROJECTION,
    RECURRENT,
    RECURRENT_BIAS,
)
from cudnn_rnn.io.tf1.cell_kinds import BIAS, KERNEL, PEEPHOLES, PROJ, Cell, gru_roles

__all__ = ["Blocks", "cell_blocks"]

Array = np.ndarray[Any, Any]
#: One cell's canonical tensors by (layout kind, cuDNN gate; None for the projection).
Blocks = dict[tuple[str, str | None], Array]


def cell_blocks(
    cell: Cell, arrays: Mapping[str, Array], *, forget_bias: float, peepholes: bool
) -> Blocks:
    """One cell's canonical tensors in float64 (see the module): the input and recurrent
    matrices of each gate, the input biases (an LSTM's forget gate's plus ``forget_bias``), zero
    recurrent biases, an LSTMCell's projection ``[P, H]``; with ``peepholes`` (the RNN's
    variant) ``P_i, P_f, P_o``, zero for a cell of the RNN that has none."""
    gates = CUDNN_GATES[cell.mode]
    kernel, bias, tf_order = _kernel_and_bias(cell, arrays)
    inputs = cell.input_size or 0
    parts = {
        INPUT: permute_gates(kernel[:inputs].T, tf_order, gates),
        RECURRENT: permute_gates(kernel[inputs:].T, tf_order, gates),
        INPUT_BIAS: permute_gates(bias, tf_order, gates),
        RECURRENT_BIAS: np.zeros_like(bias),
    }
    out: Blocks = {
        (what, gate): block
        for what, stacked in parts.items()
        for gate, block in zip(gates, np.split(stacked, len(gates)))
    }
    if cell.mode == CUDNN_LSTM:  # TF adds forget_bias to the forget gate's sum
        out[INPUT_BIAS, "f"] = out[INPUT_BIAS, "f"] + forget_bias
    if PROJ in cell.names:
        out[PROJECTION, None] = arrays[cell.names[PROJ]].astype(np.float64).T
    if peepholes:
        units = bias.shape[0] // len(gates)
        for gate, role in PEEPHOLES.items():
            held = cell.peepholes and role in cell.names
            out[PEEPHOLE, gate] = (
                arrays[cell.names[role]].astype(np.float64) if held else np.zeros(units)
            )
    return out


def _kernel_and_bias(
    cell: Cell, arrays: Mapping[str, Array]
) -> tuple[Array, Array, tuple[str, ...]]:
    """The cell's kernel ``[K, G*H]`` and bias ``[G*H]`` in float64, with their gates' order: a
    GRU's gates and candidate side by side (TF's ``r, u``, then ``h``)."""
    if cell.mode != CUDNN_GRU:
        kernel = arrays[cell.names[KERNEL]].astype(np.float64)
        return kernel, arrays[cell.names[BIAS]].astype(np.float64), GATE_ORDERS["tf"][cell.mode]
    gate_kernel, gate_bias, cand_kernel, cand_bias = (
        arrays[cell.names[role]].astype(np.float64) for role in gru_roles(cell)
    )
    gated = GATE_ORDERS["tf"][CUDNN_GRU]
    order = gated + tuple(g for g in CUDNN_GATES[CUDNN_GRU] if g not in gated)
    return (
        np.concatenate([gate_kernel, cand_kernel], axis=1),
        np.concatenate([gate_bias, cand_bias]),
        order,
    )
