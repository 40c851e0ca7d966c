"""The engine of the variants (:mod:`cudnn_rnn.core.variant`): any RNN beyond cuDNN's four modes,
on any device, with training, in torch operators differentiated by autograd.

cuDNN and torch's kernels compute the four modes only, and our native loops every variant on
the CPU in float32 without a projection; any other call whose spec has a variant (CUDA, other
dtypes, a projection) comes here by the rule table (:mod:`cudnn_rnn.engines`), and every double
backward of a variant runs this forward (the operator's autograd). The forward is
one time loop per layer and direction on torch operators (the input projection of all steps one
product, then per step one product with the recurrent matrices and the variant's gate math), so
it runs wherever torch runs: CPU and CUDA, every float dtype. It keeps nothing for the backward:
the backward runs the forward again under autograd on the inputs the operator saved and takes
the vector-Jacobian product, which is also differentiable as often as asked (double backward,
``torch.func``). The equations are :mod:`cudnn_rnn.core.reference`'s, which the tests compare
with in float64.

Each activation is one entry of :data:`ACTIVATIONS`; a new variant is a field of
:class:`~cudnn_rnn.core.variant.Variant`, its equations in the reference and its lines in
:func:`_step` here (docs/internals/extending.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from cudnn_rnn.core.constants import CUDNN_GRU, CUDNN_LSTM, CUDNN_RNN_RELU
from cudnn_rnn.core.layout import Layout
from cudnn_rnn.core.variant import Activation, Variant
from cudnn_rnn.engines.base import NOTHING, Call, Grads, Inputs, Kept, Outputs, Saved
from cudnn_rnn.engines.common import Weights, _view, active_steps, pseudo_layers, reverse_within

NAME = "variant"

#: SELU's constants (Klambauer et al., as Keras and torch use them).
_SELU = (1.6732632423543772848170429916717, 1.0507009873554804934193349852946)

#: Activation name -> its torch function of ``(x, alpha, beta)``.
ACTIVATIONS: dict[str, Callable[[Tensor, float, float], Tensor]] = {
    "sigmoid": lambda x, a, b: torch.sigmoid(x),
    "tanh": lambda x, a, b: torch.tanh(x),
    "relu": lambda x, a, b: torch.relu(x),
    "hard_sigmoid": lambda x, a, b: torch.clamp(x * a + b, 0.0, 1.0),
    "affine": lambda x, a, b: x * a + b,
    "leaky_relu": lambda x, a, b: torch.where(x >= 0, x, x * a),
    "thresholded_relu": lambda x, a, b: torch.where(x > a, x, torch.zeros_like(x)),
    "scaled_tanh": lambda x, a, b: torch.tanh(x * b) * a,
    "elu": lambda x, a, b: torch.where(x >= 0, x, torch.expm1(torch.clamp(x, max=0.0)) * a),
    "softsign": lambda x, a, b: x / (1 + x.abs()),
    "softplus": lambda x, a, b: torch.logaddexp(x, torch.zeros_like(x)),
    "selu": lambda x, a, b: F.elu(x, _SELU[0]) * _SELU[1],
    "exponential": lambda x, a, b: torch.exp(x),
    "silu": lambda x, a, b: F.silu(x),
}


def _function(act: Activation) -> Callable[[Tensor], Tensor]:
    fn = ACTIVATIONS[act.name]
    alpha = 0.0 if act.alpha is None else act.alpha
    beta = 0.0 if act.beta is None else act.beta
    return lambda x: fn(x, alpha, beta)


class _Math(NamedTuple):
    """A variant's math for one call: the three activations and the gate clip."""

    f: Callable[[Tensor], Tensor]
    g: Callable[[Tensor], Tensor]
    h: Callable[[Tensor], Tensor]
    clip: Callable[[Tensor], Tensor]


def _math(mode: str, v: Variant) -> _Math:
    own = Activation("relu" if mode == CUDNN_RNN_RELU else "tanh")
    c = v.gate_clip
    return _Math(
        _function(v.gate_activation),
        _function(v.cell_activation or own),
        _function(v.output_activation),
        (lambda z: z) if c is None else (lambda z: torch.clamp(z, -c, c)),
    )


def forward(
    layout: Layout,
    params: Tensor,
    x: Tensor,
    h0: Tensor,
    c0: Tensor | None,
    lengths: Tensor | None,
    masks: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """``(y, h_n, c_n)`` of the stack over time-major ``x``, every value a torch operator's
    result (autograd differentiates it as often as asked)."""
    spec = layout.spec
    v = spec.variant
    math = _math(spec.mode, v)
    steps = int(x.shape[0])
    weights = pseudo_layers(layout, params)
    peepholes = [_view(params, f.peephole) for f in layout.fused]
    active = active_steps(lengths, steps, x.device)
    separate = v.stacks == "separate"
    reads = [x] * spec.num_dirs
    hs: list[Tensor] = []
    cs: list[Tensor] = []
    outs: list[Tensor] = []
    for layer in range(spec.num_layers):
        outs = []
        for d in range(spec.num_dirs):
            p = layer * spec.num_dirs + d
            backward = d == 1 or v.time != "forward"
            u = reverse_within(reads[d], lengths) if backward else reads[d]
            out, h_n, c_n = _direction(
                spec.mode, v, math, weights[p], peepholes[p], u, h0[p],
                None if c0 is None else c0[p], active,
                layer == 0 and spec.skip_input, spec.num_gates,
            )  # fmt: skip
            if backward:
                out = reverse_within(out, lengths)
            if v.time == "go_backwards":
                out = out.flip(0)  # processing order: y[k] is the step at t = T-1-k
            outs.append(out)
            hs.append(h_n)
            if c_n is not None:
                cs.append(c_n)
        if layer == spec.num_layers - 1:
            break
        read = torch.cat(outs, -1) if separate else merged(outs, v.merge)
        if masks is not None:
            read = read * masks[layer]
        reads = list(read.chunk(spec.num_dirs, -1)) if separate else [read] * spec.num_dirs
    return merged(outs, v.merge), torch.stack(hs), (torch.stack(cs) if cs else None)


def merged(outs: list[Tensor], merge: str) -> Tensor:
    """A layer's output from its directions' (forward first)."""
    if len(outs) == 1:
        return outs[0]
    if merge == "concat":
        return torch.cat(outs, -1)
    if merge == "sum":
        return outs[0] + outs[1]
    if merge == "mul":
        return outs[0] * outs[1]
    return (outs[0] + outs[1]) / 2


def _direction(
    mode: str,
    v: Variant,
    m: _Math,
    wt: Weights,
    peep: Tensor | None,
    u: Tensor,
    h: Tensor,
    c: Tensor | None,
    active: Tensor | None,
    skip: bool,
    gates: int,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """One direction of one layer over ``u`` in its own time order."""
    steps, batch = int(u.shape[0]), int(u.shape[1])
    if skip or wt.w is None:
        gi = u.repeat(1, 1, gates) + wt.bw
    else:
        gi = torch.addmm(wt.bw, u.reshape(steps * batch, -1), wt.w.t()).view(steps, batch, -1)
    p_i, p_f, p_o = peep.chunk(3) if peep is not None else (None, None, None)
    out = []
    for t in range(steps):
        gh = torch.addmm(wt.br, h, wt.r.t())
        if mode == CUDNN_LSTM:
            assert c is not None
            h_new, c_new = _lstm_step(v, m, wt, gi[t] + gh, c, (p_i, p_f, p_o))
            if active is not None:
                c_new = torch.where(active[t], c_new, c)
            c = c_new
        elif mode == CUDNN_GRU:
            h_new = _gru_step(v, m, wt, gi[t], gh, h)
        else:
            h_new = m.g(m.clip(gi[t] + gh))
        if active is None:
            h = h_new
            out.append(h_new)
        else:
            h = torch.where(active[t], h_new, h)
            out.append(torch.where(active[t], h_new, torch.zeros_like(h_new)))
    return torch.stack(out), h, c


def _lstm_step(
    v: Variant,
    m: _Math,
    wt: Weights,
    a: Tensor,
    c: Tensor,
    peep: tuple[Tensor | None, Tensor | None, Tensor | None],
) -> tuple[Tensor, Tensor]:
    """``(h, c)`` after one step from the gates' pre-activations ``a`` (``i f c o``)."""
    ai, af, ag, ao = a.chunk(4, dim=1)
    p_i, p_f, p_o = peep
    i = m.f(m.clip(ai if p_i is None else ai + p_i * c))
    f = 1 - i if v.input_forget else m.f(m.clip(af if p_f is None else af + p_f * c))
    c_new = f * c + i * m.g(m.clip(ag))
    if v.cell_clip is not None:
        c_new = torch.clamp(c_new, -v.cell_clip, v.cell_clip)
    o = m.f(m.clip(ao if p_o is None else ao + p_o * c_new))
    h_new = o * m.h(c_new)
    if wt.proj is not None:
        h_new = h_new @ wt.proj.t()
        if v.proj_clip is not None:
            h_new = torch.clamp(h_new, -v.proj_clip, v.proj_clip)
    return h_new, c_new


def _gru_step(v: Variant, m: _Math, wt: Weights, gi: Tensor, gh: Tensor, h: Tensor) -> Tensor:
    """``h`` after one step: ``gi`` the input projection (``r u h``), ``gh`` ``R h + b_R``."""
    ri, ui, ni = gi.chunk(3, dim=1)
    rh, uh, nh = gh.chunk(3, dim=1)
    r = m.f(m.clip(ri + rh))
    z = m.f(m.clip(ui + uh))
    if v.reset_after:
        n = m.g(m.clip(ni + r * nh))
    else:  # the reset gate before the product: R_h (r * h) + b_Rh
        units = int(h.shape[-1])
        r_h, b_rh = wt.r[2 * units :], wt.br[2 * units :]
        n = m.g(m.clip(ni + torch.addmm(b_rh, r * h, r_h.t())))
    return torch.lerp(n, h, z)  # (1 - z) * n + z * h


class VariantEngine:
    """The first rule: every call whose spec has a variant (the module docstring)."""

    name = NAME
    strided_dy = False

    def supports(self, call: Call) -> bool:
        return not call.layout.spec.variant.is_cudnn

    def kept(self, call: Call) -> Kept:
        return NOTHING

    def forward(self, call: Call, inputs: Inputs) -> Outputs:
        y, hy, cy = forward(call.layout, *inputs)
        return Outputs(y, hy, cy)

    def backward(
        self, call: Call, saved: Saved, grads: Grads
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        s = saved
        given = [s.params, s.x, s.h0, s.c0]
        with torch.enable_grad():
            leaves = [None if t is None else t.detach().requires_grad_() for t in given]
            params, x, h0, c0 = leaves
            assert params is not None and x is not None and h0 is not None
            y, hy, cy = forward(call.layout, params, x, h0, c0, s.lengths, s.masks)
            outs = [y, hy] + ([cy] if cy is not None else [])
            wanted = [grads.dy, grads.dhy] + ([grads.dcy] if cy is not None else [])
            wrt = [t for t in leaves if t is not None]
            got = torch.autograd.grad(outs, wrt, wanted, allow_unused=True)
        result = [torch.zeros_like(t) if g is None else g for t, g in zip(wrt, got, strict=True)]
        dparams, dx, dh0 = result[:3]
        return dparams, dx, dh0, (result[3] if c0 is not None else None)


ENGINE = VariantEngine()
