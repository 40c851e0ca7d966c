"""The training engine on torch operators: our own time loop and back-propagation through time.

Per pseudo-layer the input projection of all steps is one GEMM (``x @ W^T + bW`` over ``T*B``
rows); the time loop does one ``[B, Hout] x [Hout, G*H]`` product and the gate arithmetic per
step and keeps what the backward pass needs; the backward loop runs the steps in reverse and
the weight gradients are again GEMMs over all steps at once (``K = T*B``, where a per-step
autograd graph accumulates ``T`` products with ``K = B``). This is the structure of the native
engine to come: only the two time loops would move to native code.

Workspace: the layout of :func:`cudnn_rnn.engines.common.split_workspace`, filled in each
direction's own time order, ``hseq`` holding the state after each step.

Variable lengths: each direction runs over its sequence in its own time order (the backward
direction over the input reversed within each length); past a length the state is kept and
the output is 0, so gradients pass through those steps unchanged.

Without a workspace (``keep=False``) the forward writes into no buffer: every value is a torch
operator's result, so autograd differentiates it as often as asked. The operator runs it so for a
double backward (:mod:`cudnn_rnn.operator`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from cudnn_rnn.core.constants import CUDNN_GRU, CUDNN_LSTM, CUDNN_RNN_RELU
from cudnn_rnn.core.layout import Layout
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.engines.base import Call, Inputs, Outputs
from cudnn_rnn.engines.common import (
    Weights,
    WorkspaceEngine,
    active_steps,
    pseudo_layers,
    reverse_within,
    split_workspace,
    weight_grads,
    workspace_numel,
)

NAME = "loop"


def forward(
    layout: Layout,
    params: Tensor,
    x: Tensor,
    h0: Tensor,
    c0: Tensor | None,
    lengths: Tensor | None,
    masks: Tensor | None,
    keep: bool = True,
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
    """The stack over time-major ``x``; returns ``(y, h_n, c_n, workspace)``, the workspace
    None without ``keep`` (then nothing is written into a buffer: see the module docstring)."""
    spec = layout.spec
    steps, batch = int(x.shape[0]), int(x.shape[1])
    ws = x.new_empty(workspace_numel(spec, steps, batch)) if keep else None
    saved, inputs = split_workspace(ws, spec, steps, batch) if ws is not None else (None, None)
    weights = pseudo_layers(layout, params)
    active = active_steps(lengths, steps, x.device)
    hs, cs = [], []
    layer_input = x
    for layer in range(spec.num_layers):
        if layer > 0:
            if masks is not None:
                layer_input = layer_input * masks[layer - 1]
            if inputs is not None:
                inputs[layer - 1].copy_(layer_input)
        outs = []
        for d in range(spec.num_dirs):
            p = layer * spec.num_dirs + d
            u = layer_input if d == 0 else reverse_within(layer_input, lengths)
            out, h_n, c_n = _direction(
                spec, weights[p], u, h0[p], None if c0 is None else c0[p], active,
                None if saved is None else saved[p],
            )  # fmt: skip
            outs.append(out if d == 0 else reverse_within(out, lengths))
            hs.append(h_n)
            if c_n is not None:
                cs.append(c_n)
        layer_input = torch.cat(outs, dim=-1) if len(outs) > 1 else outs[0]
    return layer_input, torch.stack(hs), (torch.stack(cs) if cs else None), ws


def _direction(
    spec: RNNSpec,
    wt: Weights,
    u: Tensor,
    h: Tensor,
    c: Tensor | None,
    active: Tensor | None,
    saved: list[Tensor] | None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """One direction of one layer in its own time order; fills ``saved`` where given."""
    mode, units = spec.mode, spec.num_units
    steps = int(u.shape[0])
    gi = _input_projection(spec, wt, u)
    if mode != CUDNN_GRU:
        gi = gi + wt.br  # LSTM and RNN sum the two biases; the GRU's bR_h sits inside r * (...)
    rt = wt.r.t()
    out = []
    for t in range(steps):
        if mode == CUDNN_GRU:
            gh = torch.addmm(wt.br, h, rt)
            ri, ui, ni = gi[t].chunk(3, dim=1)
            rh, uh, nh = gh.chunk(3, dim=1)
            r = torch.sigmoid(ri + rh)
            z = torch.sigmoid(ui + uh)
            n = torch.tanh(torch.addcmul(ni, r, nh))
            h_new = torch.lerp(n, h, z)  # (1 - z) * n + z * h
            if saved is not None:
                saved[0][t, :, :units] = r
                saved[0][t, :, units : 2 * units] = z
                saved[0][t, :, 2 * units :] = n
                saved[2][t] = nh
        elif mode == CUDNN_LSTM:
            assert c is not None
            a = torch.addmm(gi[t], h, rt)
            s = torch.sigmoid(a)
            g = torch.tanh(a[:, 2 * units : 3 * units])
            i, f, o = s[:, :units], s[:, units : 2 * units], s[:, 3 * units :]
            c_new = torch.addcmul(f * c, i, g)
            h_new = o * torch.tanh(c_new)
            if wt.proj is not None:
                h_new = h_new @ wt.proj.t()
            if active is not None:
                c_new = torch.where(active[t], c_new, c)
            if saved is not None:
                saved[0][t] = s
                saved[0][t, :, 2 * units : 3 * units] = g
                saved[2][t] = c_new
            c = c_new
        else:
            a = torch.addmm(gi[t], h, rt)
            h_new = torch.relu(a) if mode == CUDNN_RNN_RELU else torch.tanh(a)
            if saved is not None:
                saved[0][t] = h_new
        if active is None:
            h = h_new
            out.append(h_new)
        else:
            h = torch.where(active[t], h_new, h)
            out.append(torch.where(active[t], h_new, 0.0))
        if saved is not None:
            saved[1][t] = h
    y = torch.stack(out) if out else u.new_empty(0, int(u.shape[1]), spec.output_units)
    return y, h, c


def _input_projection(spec: RNNSpec, wt: Weights, u: Tensor) -> Tensor:
    """``u @ W^T + bW`` for all steps; under skip_input ``u`` itself is added to every gate."""
    if wt.w is None:
        return u.repeat(1, 1, spec.num_gates) + wt.bw
    steps, batch = int(u.shape[0]), int(u.shape[1])
    return torch.addmm(wt.bw, u.reshape(steps * batch, -1), wt.w.t()).view(steps, batch, -1)


def backward(
    layout: Layout,
    params: Tensor,
    x: Tensor,
    h0: Tensor,
    c0: Tensor | None,
    lengths: Tensor | None,
    masks: Tensor | None,
    ws: Tensor,
    y: Tensor,
    dy: Tensor,
    dhy: Tensor,
    dcy: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """Gradients ``(dparams, dx, dh0, dc0)`` from the workspace of :func:`forward` (which keeps
    every state it needs: the output ``y`` is not read)."""
    spec = layout.spec
    steps, batch = int(x.shape[0]), int(x.shape[1])
    saved, inputs = split_workspace(ws, spec, steps, batch)
    weights = pseudo_layers(layout, params)
    dparams = torch.empty_like(params)  # every stored block is written below
    grads = pseudo_layers(layout, dparams)
    active = active_steps(lengths, steps, x.device)
    dh0 = torch.empty_like(h0)
    dc0 = torch.empty_like(c0) if c0 is not None else None
    hout = spec.output_units
    d_out = dy  # gradient of the current layer's output [T, B, D*Hout]
    for layer in reversed(range(spec.num_layers)):
        layer_input = x if layer == 0 else inputs[layer - 1]
        d_in = None
        for d in range(spec.num_dirs):
            p = layer * spec.num_dirs + d
            dout = d_out[..., d * hout : (d + 1) * hout]
            u = layer_input
            if d == 1:
                dout = reverse_within(dout, lengths)
                u = reverse_within(layer_input, lengths)
            du, dh0[p], dc = _direction_backward(
                spec,
                weights[p],
                grads[p],
                u,
                h0[p],
                None if c0 is None else c0[p],
                active,
                saved[p],
                dout,
                dhy[p],
                None if dcy is None else dcy[p],
            )
            if dc0 is not None and dc is not None:
                dc0[p] = dc
            if d == 1:
                du = reverse_within(du, lengths)
            d_in = du if d_in is None else d_in + du
        assert d_in is not None
        if layer > 0 and masks is not None:
            d_in = d_in * masks[layer - 1]
        d_out = d_in
    return dparams, d_out, dh0, dc0


def _direction_backward(
    spec: RNNSpec,
    wt: Weights,
    gw: Weights,
    u: Tensor,
    h0: Tensor,
    c0: Tensor | None,
    active: Tensor | None,
    saved: list[Tensor],
    dout: Tensor,
    dh: Tensor,
    dc: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """BPTT of one direction: weight gradients into ``gw``; returns ``(du, dh0, dc0)``."""
    mode, units = spec.mode, spec.num_units
    steps, batch = int(u.shape[0]), int(u.shape[1])
    gates, hseq = saved[0], saved[1]
    g_all = spec.num_gates * units
    dgi = u.new_empty(steps, batch, g_all)  # gradient of the input projection
    # ... and of R h' + bR: the same for LSTM and RNN; for the GRU it differs from dgi only in
    # the candidate's third (scaled by r), which is all that is kept of it over the steps.
    gru = mode == CUDNN_GRU
    dghn = u.new_empty(steps, batch, units) if gru else None
    step_gh = u.new_empty(batch, g_all) if gru else None
    dproj_h = u.new_empty(steps, batch, spec.output_units) if wt.proj is not None else None
    for t in reversed(range(steps)):
        m = None if active is None else active[t]
        dh_new = dh + dout[t] if m is None else torch.where(m, dh + dout[t], 0.0)
        h_prev = hseq[t - 1] if t > 0 else h0
        if mode == CUDNN_LSTM:
            assert dc is not None and c0 is not None
            cseq = saved[2]
            c_t = cseq[t]
            c_prev = cseq[t - 1] if t > 0 else c0
            s = gates[t]
            i, f, g, o = s.chunk(4, dim=1)
            if dproj_h is not None:
                assert wt.proj is not None
                dproj_h[t] = dh_new
                dhr = dh_new @ wt.proj
            else:
                dhr = dh_new
            tc = torch.tanh(c_t)
            dc_new = dc if m is None else torch.where(m, dc, 0.0)
            dc_new = dc_new + dhr * o * (1 - tc * tc)
            da = dgi[t]
            da[:, :units] = dc_new * g * i * (1 - i)
            da[:, units : 2 * units] = dc_new * c_prev * f * (1 - f)
            da[:, 2 * units : 3 * units] = dc_new * i * (1 - g * g)
            da[:, 3 * units :] = dhr * tc * o * (1 - o)
            dc_prev = dc_new * f
            dc = dc_prev if m is None else torch.where(m, dc_prev, dc)
        elif mode == CUDNN_GRU:
            r, z, n = gates[t].chunk(3, dim=1)
            dn = dh_new * (1 - z)
            dan = dn * (1 - n * n)
            dgi[t, :, :units] = dar = dan * saved[2][t] * r * (1 - r)
            dgi[t, :, units : 2 * units] = daz = dh_new * (h_prev - n) * z * (1 - z)
            dgi[t, :, 2 * units :] = dan
            assert dghn is not None and step_gh is not None
            dghn[t] = dan * r
            step_gh[:, :units] = dar
            step_gh[:, units : 2 * units] = daz
            step_gh[:, 2 * units :] = dghn[t]
        else:
            h_t = gates[t]
            deriv = (h_t > 0).to(h_t.dtype) if mode == CUDNN_RNN_RELU else 1 - h_t * h_t
            dgi[t] = dh_new * deriv
        if step_gh is not None:  # GRU
            dh_prev = torch.addcmul(step_gh @ wt.r, dh_new, gates[t, :, units : 2 * units])
        else:
            dh_prev = dgi[t] @ wt.r
        dh = dh_prev if m is None else torch.where(m, dh_prev, dh)
    h_prevs = torch.cat([h0.unsqueeze(0), hseq[:-1]]) if steps > 1 else h0.unsqueeze(0)
    du = weight_grads(spec, wt, gw, u, h_prevs, dgi, dghn)
    assert du is not None  # (need_du defaults to True)
    if dproj_h is not None:
        assert gw.proj is not None and c0 is not None
        _i, _f, _g, o = gates.chunk(4, dim=2)
        hr = o * torch.tanh(saved[2])
        gw.proj.copy_(dproj_h.reshape(steps * batch, -1).t() @ hr.reshape(steps * batch, -1))
    return du, dh, dc


class Loop(WorkspaceEngine):
    """The last rule: any call that needs a gradient (see :mod:`cudnn_rnn.engines.base`)."""

    name = NAME

    def supports(self, call: Call) -> bool:
        return True

    def forward(self, call: Call, inputs: Inputs) -> Outputs:
        y, hy, cy, ws = forward(call.layout, *inputs)
        return Outputs(y, hy, cy, ws if call.need_grad else None)

    _backward = staticmethod(backward)


ENGINE = Loop()
