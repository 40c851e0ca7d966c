"""ONNX's layout of our RNNs: the operator and attributes that compute each mode's math, and the
one mapping of an opaque buffer to ONNX's ``W, R, B`` (:func:`onnx_weights`). What the
exporter (:mod:`cudnn_rnn.export`) and the ONNX file writer (:mod:`cudnn_rnn.io.onnx.graph`)
share; the layout itself is the layout table's (:mod:`cudnn_rnn.core.layout`)::

    W_l  [D, G*H, in]    input matrices, ONNX's gate order (LSTM i o f c, GRU z r h)
    R_l  [D, G*H, H]     recurrent matrices
    B_l  [D, 2*G*H]      input biases (Wb), then recurrent biases (Rb): cuDNN's two biases
    P_l  [D, 3*H]        LSTM peepholes (a variant), ONNX's order i o f (PEEPHOLE_ORDER)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from cudnn_rnn.core.constants import CUDNN_GRU
from cudnn_rnn.core.gates import CUDNN_GATES, GATE_ORDERS, permute_gates
from cudnn_rnn.core.layout import Block, layout_of
from cudnn_rnn.core.modes import MODES
from cudnn_rnn.core.spec import RNNSpec

__all__ = [
    "GATE_ORDER",
    "ONNX_OPS",
    "PEEPHOLE_ORDER",
    "OnnxOp",
    "block_view",
    "node_attributes",
    "onnx_weights",
]


@dataclass(frozen=True)
class OnnxOp:
    """How one of our modes is spelled as an ONNX operator."""

    op_type: str
    #: The activations of one direction (f, g, h as ONNX names them) that compute our math.
    activations: tuple[str, ...]
    #: Other attributes our math needs.
    attributes: Mapping[str, Any] = field(default_factory=dict)


#: Our mode -> the ONNX operator and attributes that compute the same math (the operator and
#: the activation from the mode table): the gates' sigmoid, then the candidate's activation
#: (and the LSTM's output's: the same).
ONNX_OPS: dict[str, OnnxOp] = {
    name: OnnxOp(
        m.onnx_op,
        ("Sigmoid",) * (m.num_gates > 1) + (m.activation.capitalize(),) * (2 if m.has_cell else 1),
        # cuDNN applies the reset gate after the recurrent matmul (and its bias): ONNX's lbr=1.
        {"linear_before_reset": 1} if name == CUDNN_GRU else {},
    )
    for name, m in MODES.items()
}
#: Number of directions -> ONNX's ``direction`` attribute.
_DIRECTIONS = {1: "forward", 2: "bidirectional"}
#: The key of ``GATE_ORDERS`` that gives ONNX's gate order.
GATE_ORDER = "onnx"
#: The gates of ONNX's ``P`` (the LSTM's peepholes), in its order (the layout's is
#: :data:`cudnn_rnn.core.layout.PEEPHOLE_GATES`).
PEEPHOLE_ORDER = ("i", "o", "f")


def node_attributes(spec: RNNSpec) -> dict[str, Any]:
    """The attributes of each ONNX node of ``spec`` (one layer, both directions)."""
    op = ONNX_OPS[spec.mode]
    return {
        "hidden_size": spec.num_units,
        "direction": _DIRECTIONS[spec.num_dirs],
        "activations": list(op.activations) * spec.num_dirs,  # one list per direction
        **op.attributes,
    }


def onnx_weights(spec: RNNSpec, params: Tensor) -> list[tuple[Tensor, Tensor, Tensor]]:
    """``(W, R, B)`` of every layer in ONNX's layout (module docstring) from the opaque buffer
    ``params``: views of the layout table's stacked blocks with the gates reordered, so
    autograd and the exporters see slices, reshapes and one gather per block. Under
    ``skip_input`` layer 0's ``W`` is the identity per gate. No projection (refused above)."""
    layout = layout_of(spec)
    ours, onnx_order = CUDNN_GATES[spec.mode], GATE_ORDERS[GATE_ORDER][spec.mode]
    d = spec.num_dirs

    def gates(block: Block) -> Tensor:
        return permute_gates(block_view(params, block), ours, onnx_order)

    out = []
    for layer in range(spec.num_layers):
        fused = layout.fused[layer * d : (layer + 1) * d]
        w = [
            gates(f.w_ih)
            if f.w_ih is not None
            # skip_input: the input is added to each gate as is (the same block for every gate)
            else torch.eye(spec.num_units, dtype=params.dtype, device=params.device).repeat(
                spec.num_gates, 1
            )
            for f in fused
        ]
        r = [gates(f.w_hh) for f in fused]
        b = [torch.cat([gates(f.b_ih), gates(f.b_hh)]) for f in fused]
        out.append((torch.stack(w), torch.stack(r), torch.stack(b)))
    return out


def block_view(params: Tensor, block: Block) -> Tensor:
    """The view of the opaque buffer ``params`` that the layout table's ``block`` is."""
    size = 1
    for n in block.shape:
        size *= n
    return params.narrow(0, block.offset, size).view(block.shape)
