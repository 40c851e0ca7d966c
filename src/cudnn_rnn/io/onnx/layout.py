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
from cudnn_rnn.core.layout import PEEPHOLE_GATES, Block, layout_of
from cudnn_rnn.core.modes import MODES
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.core.variant import Activation
from cudnn_rnn.io.onnx.variants import ACTIVATIONS

__all__ = [
    "GATE_ORDER",
    "ONNX_OPS",
    "PEEPHOLE_ORDER",
    "OnnxOp",
    "block_view",
    "node_attributes",
    "onnx_peepholes",
    "onnx_weights",
    "unwritable",
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


#: Our activation names -> ONNX's, for the ones ONNX's RNN operators have (the reader's table,
#: turned around).
ONNX_ACTIVATIONS = {ours: theirs for theirs, ours in ACTIVATIONS.items()}


def unwritable(spec: RNNSpec) -> str | None:
    """Why ONNX's ``LSTM``/``GRU``/``RNN`` nodes cannot hold ``spec``'s variant (None: they
    can), in words for a one-line refusal."""
    v = spec.variant
    why = []
    acts = [v.gate_activation, v.cell_activation, v.output_activation]
    missing = sorted({a.name for a in acts if a is not None and a.name not in ONNX_ACTIVATIONS})
    if missing:
        why.append(f"the activation(s) {', '.join(missing)} (ONNX's RNN operators have none)")
    for name, words in (
        ("cell_clip", "a cell clip"), ("proj_clip", "a projection clip"),
        ("merge", f"directions merged by {v.merge}"),
        ("stacks", "separate forward and backward stacks"),
    ):  # fmt: skip
        if name in v.changed():
            why.append(words)
    if v.time == "go_backwards":
        why.append("go_backwards (outputs in processing order)")
    return "; ".join(why) or None


def node_attributes(spec: RNNSpec) -> dict[str, Any]:
    """The attributes of each ONNX node of ``spec`` (one layer, both directions): the mode's,
    and its variant's (activations with their parameters, ``clip``, ``input_forget``,
    ``linear_before_reset``, ``direction="reverse"``); :func:`unwritable` says what they
    cannot hold."""
    op = ONNX_OPS[spec.mode]
    v = spec.variant
    out: dict[str, Any] = {
        "hidden_size": spec.num_units,
        "direction": "reverse" if v.time == "reverse" else _DIRECTIONS[spec.num_dirs],
        **op.attributes,
    }
    if v.is_cudnn:
        out["activations"] = list(op.activations) * spec.num_dirs  # one list per direction
        return out
    own = {"rnn_relu": "relu"}.get(spec.mode, "tanh")
    cell = v.cell_activation or Activation(own)
    acts = {
        "lstm": [v.gate_activation, cell, v.output_activation],
        "gru": [v.gate_activation, cell],
    }
    chosen = acts.get(spec.mode, [cell])
    names = [ONNX_ACTIVATIONS[a.name] for a in chosen] * spec.num_dirs
    alphas = [a.alpha for a in chosen if a.alpha is not None] * spec.num_dirs
    betas = [a.beta for a in chosen if a.beta is not None] * spec.num_dirs
    out["activations"] = names
    if alphas:
        out["activation_alpha"] = alphas
    if betas:
        out["activation_beta"] = betas
    if v.gate_clip is not None:
        out["clip"] = v.gate_clip
    if v.input_forget:
        out["input_forget"] = 1
    if spec.mode == CUDNN_GRU and not v.reset_after:
        out["linear_before_reset"] = 0
    return out


def onnx_peepholes(spec: RNNSpec, params: Tensor) -> list[Tensor | None]:
    """Every layer's ``P`` ``[D, 3*H]`` (ONNX's order ``i o f``) from the opaque buffer; None
    for each layer where the spec has no peepholes."""
    layout = layout_of(spec)
    d = spec.num_dirs
    out: list[Tensor | None] = []
    for layer in range(spec.num_layers):
        blocks = [f.peephole for f in layout.fused[layer * d : (layer + 1) * d]]
        if any(b is None for b in blocks):
            out.append(None)
            continue
        out.append(
            torch.stack(
                [
                    permute_gates(block_view(params, b), PEEPHOLE_GATES, PEEPHOLE_ORDER)
                    for b in blocks
                    if b is not None
                ]
            )
        )
    return out


def onnx_weights(spec: RNNSpec, params: Tensor) -> list[tuple[Tensor, Tensor, Tensor]]:
    """``(W, R, B)`` of every layer in ONNX's layout (module docstring) from the opaque buffer
    ``params``: views of the layout table's stacked blocks with the gates reordered, so
    autograd and the exporters see slices, reshapes and one gather per block. Under
    ``skip_input`` layer 0's ``W`` is the identity per gate. No projection (refused above)."""
    layout = layout_of(spec)
    ours, onnx_order = CUDNN_GATES[spec.mode], GATE_ORDERS[GATE_ORDER][spec.mode]
    d = spec.num_dirs

    def gates(block: Block) -> Tensor:
        # The block's length from the layout, not the (traced) tensor's: see permute_gates.
        return permute_gates(block_view(params, block), ours, onnx_order, length=block.shape[0])

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
