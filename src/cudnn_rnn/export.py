"""Export: the fused RNN as standard ONNX nodes for ``torch.onnx.export``, and ONNX's layout.

A model that holds our layers exports like any torch model, with nothing extra to pass:

* ``torch.onnx.export(model, args, path)`` (the default, ``dynamo=True``, and the TorchScript
  exporter, ``dynamo=False``) writes one standard ONNX ``LSTM``/``GRU``/``RNN`` node per layer,
  both directions in it, instead of the ``cudnn_rnn::rnn`` operator (which no ONNX runtime
  knows). onnxruntime runs the file with our numbers (to float rounding).
* ``torch.export.export`` keeps the one ``cudnn_rnn::rnn`` node (:mod:`cudnn_rnn.operator`).
* ``torch.jit.trace`` records the ``cudnn_rnn::rnn`` operator too, so the traced module can be
  saved with ``torch.jit.save``; ``torch.jit.load`` then needs the operator registered: ``import
  cudnn_rnn`` in the loading process first (without it torch says ``Unknown builtin op:
  cudnn_rnn::rnn``).

What the ONNX graph computes is the operator's inference: no dropout (as ``torch.onnx.export``
exports in eval mode by default). Per layer ``l`` of a stack with ``D`` directions, ``G`` gates
and ``H`` units, as :func:`onnx_rnn` builds it in torch operators (which the exporters turn into
ONNX operators)::

    x_0 = X [T, B, I]          time-major (batch-major input: the caller's Transpose)
    Y, Y_h, Y_c = LSTM|GRU|RNN(x_l, W_l, R_l, B_l, sequence_lens, h0[l*D:(l+1)*D], c0[...])
    x_{l+1} = Transpose(Y, [0, 2, 1, 3]) -> Reshape [T, B, D*H]     (forward half first)
    y = x_L;  h_n = Concat(Y_h of every layer);  c_n = Concat(Y_c ...)

    W_l  [D, G*H, in]    input matrices, ONNX's gate order (LSTM i o f c, GRU z r h)
    R_l  [D, G*H, H]     recurrent matrices
    B_l  [D, 2*G*H]      input biases (Wb), then recurrent biases (Rb): cuDNN's two biases

ONNX's operators compute cuDNN's math when ``GRU`` has ``linear_before_reset=1`` (cuDNN applies
the reset gate after the recurrent matmul and its bias) and the activations are the defaults
(``RNN``: ``Tanh`` or ``Relu``), which :data:`ONNX_OPS` holds. ``skip_input`` is the identity
``W`` (exact math). ``sequence_lens`` is ONNX's own: outputs past a sequence's length are 0 and
``Y_h`` is the state after its last valid step, the backward direction starting there, as ours.
LSTM projection (``num_proj``) has no ONNX operator: it is refused, naming what works instead.

ONNX's layout (:data:`ONNX_OPS`, :func:`onnx_weights`: the one mapping of an opaque buffer to
ONNX's ``W, R, B``, through the layout table's stacked blocks and ``permute_gates``) is
:mod:`cudnn_rnn.io.onnx.layout`, which the ONNX file writer (:mod:`cudnn_rnn.io.onnx.graph`,
``to_onnx``) shares; it is re-exported here.

How: :func:`cudnn_rnn.operator.rnn` hands a call that ``torch.onnx.export`` traces to
:func:`onnx_rnn`. Each node comes from one emission point, :func:`_emit`: for the dynamo
exporter ``torch.onnx.ops.symbolic_multi_out`` (an operator the exporter writes as the ONNX
node); for the TorchScript exporter a small ``autograd.Function`` whose ``symbolic`` writes the
node and whose ``forward`` gives the layer's real values by running the operator on that
layer's weights, so that the traced model computes what it does eagerly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from cudnn_rnn.constant_result import constant_result
from cudnn_rnn.core.constants import (
    CUDNN_INPUT_LINEAR_MODE,
    CUDNN_INPUT_SKIP_MODE,
    CUDNN_LSTM,
)
from cudnn_rnn.core.layout import layout_of
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.core.variant import mode_string
from cudnn_rnn.io.onnx.layout import (
    GATE_ORDER,
    ONNX_OPS,
    OnnxOp,
    block_view,
    node_attributes,
    onnx_peepholes,
    onnx_weights,
    unwritable,
)

__all__ = [
    "GATE_ORDER",
    "ONNX_OPS",
    "OnnxOp",
    "node_attributes",
    "onnx_exporting",
    "onnx_rnn",
    "onnx_weights",
]


_OWNER = "torch.onnx.export"


def onnx_exporting(traced: bool) -> bool:
    """Whether ``torch.onnx.export`` is tracing this call: the dynamo exporter (``traced``: the
    call is compiled or exported, and it is an export) or the TorchScript one (the JIT tracer).
    Costs nothing more than these two flags where neither is set (torch.onnx is not imported)."""
    if traced:
        return torch.compiler.is_exporting() and _in_onnx_export()
    return torch._C._get_tracing_state() is not None and _in_onnx_export()


@constant_result
def _in_onnx_export() -> bool:
    # Evaluated, not traced: dynamo takes torch.onnx.is_in_onnx_export() for False, so the
    # exporter's fallback that traces with dynamo (strict) would record the operator and fail
    # to translate it, hiding why the first capture failed (a refusal below, say).
    return bool(torch.onnx.is_in_onnx_export())


def onnx_rnn(
    spec: RNNSpec,
    params: Tensor,
    x: Tensor,
    h0: Tensor,
    c0: Tensor | None,
    lengths: Tensor | None,
    traced: bool,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """The stack over time-major ``x`` as ONNX nodes, for ``torch.onnx.export``: ``(y, h_n,
    c_n or None)`` as :func:`cudnn_rnn.operator.rnn` returns them (module docstring).
    ``traced``: the dynamo exporter traces the call (else the TorchScript one).

    Raises ValueError for LSTM projection, which no ONNX operator computes.
    """
    if spec.num_proj is not None:
        raise ValueError(
            f"{_OWNER}: a cudnn_rnn LSTM with num_proj={spec.num_proj} (projection) cannot be "
            "exported to ONNX: ONNX's LSTM operator has no projection and no standard operator "
            "computes it. Expected a layer without num_proj; to export this one, use "
            "torch.export.export (it keeps the cudnn_rnn::rnn operator) or torch.jit.trace."
        )
    why = unwritable(spec)
    if why is not None:
        raise ValueError(
            f"{_OWNER}: a cudnn_rnn {spec.mode} computing a variant ONNX's "
            f"{ONNX_OPS[spec.mode].op_type} node cannot hold ({why}) cannot be exported to "
            "ONNX; torch.export.export keeps the cudnn_rnn::rnn operator."
        )
    d = spec.num_dirs
    # ONNX's sequence_lens is int32; ours are checked int64 (in [1, T]).
    lens = lengths.to(torch.int32) if lengths is not None else None
    finals: list[list[Tensor]] = [[], []]
    peepholes = onnx_peepholes(spec, params)
    for layer, (w, r, b) in enumerate(onnx_weights(spec, params)):
        states = [s[layer * d : (layer + 1) * d] for s in (h0, c0) if s is not None]
        p = peepholes[layer]
        if p is not None:  # the LSTM's eighth input, after initial_c
            states.append(p)
        y, *last = _emit(_Node(spec, layer), traced, params, x, w, r, b, lens, states)
        # Y [T, D, B, H] -> [T, B, D, H] -> [T, B, D*H]: the next layer's input, forward first.
        x = y.permute(0, 2, 1, 3).flatten(2)
        for k, state in enumerate(last):
            finals[k].append(state)
    hy, *cy = (torch.cat(parts) if len(parts) > 1 else parts[0] for parts in finals if parts)
    return x, hy, (cy[0] if cy else None)


@dataclass(frozen=True)
class _Node:
    """One layer's ONNX node."""

    spec: RNNSpec  # of the whole stack
    layer: int

    @property
    def op_type(self) -> str:
        return ONNX_OPS[self.spec.mode].op_type

    @property
    def num_outputs(self) -> int:
        """Y, Y_h, and Y_c for LSTM."""
        return 3 if self.spec.mode == CUDNN_LSTM else 2

    def values(
        self, params: Tensor, x: Tensor, lens: Tensor | None, states: Sequence[Tensor]
    ) -> tuple[Tensor, ...]:
        """The node's outputs (Y, Y_h[, Y_c]) as the operator computes them: the operator on
        this layer alone, a one-layer stack with this layer's weights."""
        spec, layer = self.spec, self.layer
        one = RNNSpec(
            spec.mode,
            1,
            spec.num_units,
            spec.layer_input_size(layer),
            CUDNN_INPUT_SKIP_MODE if layer == 0 and spec.skip_input else CUDNN_INPUT_LINEAR_MODE,
            spec.direction,
            variant=spec.variant,
        )
        y, hy, cy, *_ = torch.ops.cudnn_rnn.rnn(
            _layer_buffer(spec, layer, params, one),
            x,
            states[0],
            states[1] if len(states) > 1 else None,
            lens,
            None,
            rnn_mode=mode_string(one.mode, one.variant),
            num_layers=1,
            num_units=one.num_units,
            input_size=one.input_size,
            num_proj=0,
            skip_input=one.skip_input,
            bidirectional=one.bidirectional,
            dropout=0.0,
            seed=0,
            need_grad=False,
            traced=False,
        )
        # [T, B, D*H] -> ONNX's Y [T, D, B, H]
        out = (y.unflatten(2, (spec.num_dirs, spec.num_units)).permute(0, 2, 1, 3), hy, cy)
        return out[: self.num_outputs]


def _layer_buffer(spec: RNNSpec, layer: int, params: Tensor, one: RNNSpec) -> Tensor:
    """The opaque buffer of the one-layer stack ``one`` that is ``layer`` of ``spec``: the
    layer's stacked blocks placed where ``one``'s layout table puts them."""
    d = spec.num_dirs
    pieces = []
    for ours, theirs in zip(
        layout_of(spec).fused[layer * d : (layer + 1) * d], layout_of(one).fused
    ):
        for name in ("w_ih", "w_hh", "b_ih", "b_hh", "peephole"):
            src, dst = getattr(ours, name), getattr(theirs, name)
            if dst is not None:
                pieces.append((dst.offset, block_view(params, src).reshape(-1)))
    return torch.cat([t for _, t in sorted(pieces, key=lambda piece: piece[0])])


def _emit(
    node: _Node,
    traced: bool,
    params: Tensor,
    x: Tensor,
    w: Tensor,
    r: Tensor,
    b: Tensor,
    lens: Tensor | None,
    states: Sequence[Tensor],
) -> tuple[Tensor, ...]:
    """The one place a node is written: ``(Y, Y_h[, Y_c])`` of ``node`` on these inputs, for
    the dynamo exporter (``traced``) or the TorchScript one."""
    if not traced:
        return _TorchScriptNode.apply(  # type: ignore[no-untyped-call,no-any-return]
            node, params, x, w, r, b, lens, *states
        )
    # The dynamo exporter: an operator that it writes as the ONNX node (fake values).
    steps, batch = x.shape[0], x.shape[1]
    d, h = node.spec.num_dirs, node.spec.num_units
    shapes = [[steps, d, batch, h]] + [[d, batch, h]] * (node.num_outputs - 1)
    outs = torch.onnx.ops.symbolic_multi_out(
        node.op_type,
        [x, w, r, b, lens, *states],
        node_attributes(node.spec),
        dtypes=[x.dtype] * node.num_outputs,
        shapes=shapes,
    )
    # It makes its outputs on the CPU: the graph goes on where the input is.
    return tuple(t if t.device == x.device else t.to(x.device) for t in outs)


class _TorchScriptNode(torch.autograd.Function):
    """A node for the TorchScript exporter: ``symbolic`` writes it, ``forward`` gives its real
    values (the tracer records nothing of ``forward``'s inside once it has a ``symbolic``)."""

    @staticmethod
    def forward(ctx: Any, node: _Node, params: Tensor, x: Tensor, *rest: Any) -> Any:
        _w, _r, _b, lens, *states = rest
        return node.values(params, x, lens, states)

    @staticmethod
    def symbolic(g: Any, node: _Node, params: Any, *inputs: Any) -> Any:
        x, w, r, b, lens, *states = inputs
        if lens is None:  # an optional input left out before the given states: an empty name
            lens = g.op("prim::Constant")
            lens.setType(torch._C.OptionalType.ofTensor())
        attributes = {
            f"{key}_{_attribute_kind(value)}": value
            for key, value in node_attributes(node.spec).items()
        }
        return g.op(node.op_type, x, w, r, b, lens, *states, outputs=node.num_outputs, **attributes)


#: TorchScript's ``g.op`` names an attribute's type by a suffix (of the items, for a list).
_ATTRIBUTE_KINDS = {int: "i", float: "f", str: "s"}


def _attribute_kind(value: Any) -> str:
    return _ATTRIBUTE_KINDS[type(value[0]) if isinstance(value, list) else type(value)]
