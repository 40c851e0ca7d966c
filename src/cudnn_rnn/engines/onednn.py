"""The CPU LSTM training engine on oneDNN (the kernel torch.nn.LSTM trains with on CPU).

``aten::mkldnn_rnn_layer`` runs one direction of one layer and returns oneDNN's workspace;
``aten::mkldnn_rnn_layer_backward`` takes it back. We call them per pseudo-layer on views of the
opaque buffer, with our dropout masks between layers.

Nothing goes into the operator's workspace buffer: what the backward needs is kept by reference
in the reserve list (no copies: oneDNN's workspaces are large): per pseudo-layer oneDNN's
workspace, then the outputs ``[T, B, H]`` of the pseudo-layers below the last layer (the last
layer's are ``y``, which the backward gets). A layer's input is rebuilt from the outputs below it
and the dropout mask. The length of oneDNN's workspace is oneDNN's business, so the operator's
fake implementation gives those tensors data-dependent lengths.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from cudnn_rnn.core.constants import CUDNN_LSTM
from cudnn_rnn.core.layout import Layout
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.engines.base import Call, Grads, Inputs, Kept, Outputs, Reserve, Saved
from cudnn_rnn.engines.common import Weights, pseudo_layers
from cudnn_rnn.engines.torch_kernels import stacked_identity

NAME = "onednn"
_LSTM = 2  # cuDNN's (and oneDNN's in torch) code for the LSTM


def available() -> bool:
    """Whether this torch has oneDNN and its RNN layer operators."""
    mkldnn = torch.backends.mkldnn.is_available()  # type: ignore[no-untyped-call]
    return bool(mkldnn) and hasattr(torch.ops.aten, "mkldnn_rnn_layer")


def kept(spec: RNNSpec, steps: Any, batch: Any) -> Kept:
    """The reserve list: per pseudo-layer oneDNN's workspace (a length only oneDNN knows), then
    the outputs ``[T, B, H]`` of the pseudo-layers below the last layer; no workspace."""
    outputs = Reserve((steps, batch, spec.num_units))
    below = (spec.num_layers - 1) * spec.num_dirs
    return Kept(reserve=(Reserve(),) * spec.num_states + (outputs,) * below)


def _kernel_weights(wt: Weights, spec: RNNSpec) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    # skip_input: the identity, stacked per gate (1 * x + 0 * ... is exact)
    w = wt.w if wt.w is not None else stacked_identity(spec.num_gates, spec.num_units, wt.r)
    return w, wt.r, wt.bw, wt.br


def forward(
    layout: Layout,
    params: Tensor,
    x: Tensor,
    h0: Tensor,
    c0: Tensor,
    masks: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor, list[Tensor]]:
    """The stack; returns ``(y, h_n, c_n, reserve)`` (see :func:`kept`)."""
    spec = layout.spec
    weights = pseudo_layers(layout, params)
    hs, cs, workspaces, outs = [], [], [], []
    layer_input = x
    for layer in range(spec.num_layers):
        if layer > 0 and masks is not None:
            layer_input = layer_input * masks[layer - 1]
        for d in range(spec.num_dirs):
            p = layer * spec.num_dirs + d
            # oneDNN keeps its workspace only when grad mode is on (nothing here requires grad).
            with torch.enable_grad():
                out, h_n, c_n, workspace = torch.ops.aten.mkldnn_rnn_layer(
                    layer_input, *_kernel_weights(weights[p], spec), h0[p], c0[p],
                    d == 1, [], _LSTM, spec.num_units, 1, True, False, False, True,
                )  # fmt: skip
            outs.append(out)
            hs.append(h_n)
            cs.append(c_n)
            workspaces.append(workspace)
        first = layer * spec.num_dirs
        layer_input = (
            torch.cat(outs[first : first + spec.num_dirs], dim=-1)
            if spec.num_dirs > 1
            else outs[first]
        )
    # The last layer's outputs are y itself, which the backward gets anyway (no aliases).
    reserve = workspaces + outs[: len(outs) - spec.num_dirs]
    return layer_input, torch.stack(hs), torch.stack(cs), reserve


def _input_of(layer: int, outs: list[Tensor], masks: Tensor | None, dirs: int) -> Tensor:
    """The input of ``layer`` (> 0) as the forward pass made it."""
    below = outs[(layer - 1) * dirs : layer * dirs]
    x = torch.cat(below, dim=-1) if dirs > 1 else below[0]
    return x * masks[layer - 1] if masks is not None else x


def backward(
    layout: Layout,
    params: Tensor,
    x: Tensor,
    h0: Tensor,
    c0: Tensor,
    masks: Tensor | None,
    y: Tensor,
    hy: Tensor,
    cy: Tensor,
    reserve: list[Tensor],
    dy: Tensor,
    dhy: Tensor,
    dcy: Tensor,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Gradients ``(dparams, dx, dh0, dc0)``."""
    spec = layout.spec
    n, d_n, h = spec.num_states, spec.num_dirs, spec.num_units
    workspaces = reserve[:n]
    outs = list(reserve[n:]) + [y[..., d * h : (d + 1) * h].contiguous() for d in range(d_n)]
    weights = pseudo_layers(layout, params)
    dparams = torch.empty_like(params)  # every stored block is written below
    grads = pseudo_layers(layout, dparams)
    dh0, dc0 = torch.empty_like(h0), torch.empty_like(c0)
    d_out = dy
    for layer in reversed(range(spec.num_layers)):
        layer_input = x if layer == 0 else _input_of(layer, outs, masks, d_n)
        d_in = None
        for d in range(spec.num_dirs):
            p = layer * spec.num_dirs + d
            dx_p, dw_ih, dw_hh, db_ih, db_hh, dh0[p], dc0[p] = (
                torch.ops.aten.mkldnn_rnn_layer_backward(
                    layer_input, *_kernel_weights(weights[p], spec), h0[p], c0[p],
                    outs[p], hy[p], cy[p], d_out[..., d * h : (d + 1) * h].contiguous(),
                    dhy[p], dcy[p], d == 1, _LSTM, h, 1, True, True, False,
                    [], False, workspaces[p],
                )
            )  # fmt: skip
            g = grads[p]
            if g.w is not None:
                g.w.copy_(dw_ih)
            g.r.copy_(dw_hh)
            g.bw.copy_(db_ih)
            g.br.copy_(db_hh)
            d_in = dx_p if d_in is None else d_in + dx_p
        assert d_in is not None
        if layer > 0 and masks is not None:
            d_in = d_in * masks[layer - 1]
        d_out = d_in
    return dparams, d_out, dh0, dc0


class OneDNN:
    """The engine object of the rule table (see :mod:`cudnn_rnn.engines.base`)."""

    name = NAME
    strided_dy = False

    def supports(self, call: Call) -> bool:
        # Traced calls keep the loop's workspace, whose length follows from the shapes: a
        # reserve of a length only oneDNN knows would break a graph compiled without fullgraph.
        spec = call.spec
        return (
            call.need_grad
            and not call.traced
            and call.device.type == "cpu"
            and spec.mode == CUDNN_LSTM
            and call.dtype == torch.float32
            and spec.num_proj is None
            and not call.lengths
            and available()
        )

    def kept(self, call: Call) -> Kept:
        return kept(call.spec, call.steps, call.batch)

    def forward(self, call: Call, inputs: Inputs) -> Outputs:
        params, x, h0, c0, _lengths, masks = inputs
        assert c0 is not None  # an LSTM
        y, hy, cy, reserve = forward(
            call.layout, params, x.contiguous(), h0.contiguous(), c0.contiguous(), masks
        )
        return Outputs(y, hy, cy, None, reserve)

    def backward(
        self, call: Call, saved: Saved, grads: Grads
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        s = saved
        assert s.c0 is not None and s.cy is not None and grads.dcy is not None
        return backward(
            call.layout, s.params, s.x.contiguous(), s.h0.contiguous(), s.c0.contiguous(),
            s.masks, s.y, s.hy, s.cy, s.reserve, grads.dy.contiguous(), grads.dhy.contiguous(),
            grads.dcy.contiguous(),
        )  # fmt: skip


ENGINE = OneDNN()
