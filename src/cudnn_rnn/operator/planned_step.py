"""A cell's step in plain eager execution on the native engine, planned once per buffer and
batch (issue 48): :func:`step_plan` and :func:`planned_step`. Where the package was built
against the running torch, the cells take the step's C++ autograd node instead
(:mod:`cudnn_rnn.nn._step_node`, the same engine calls); this is their path wherever it is not.

A step of ``cudnn_rnn.nn.LSTMCell`` (``GRUCell``, ``RNNCell``) in a Python loop is latency
bound: the checked path (the operator's route, its call record, the general engine's stack over
time) cost several times the engine's arithmetic at B 1. Where the rule table's engine for the
step is the native one, the cell keeps a :class:`~cudnn_rnn.engines.native_step.StepPlan` (the C
library's argument records, filled once) and each step makes the same engine calls on the same
numbers as :func:`~cudnn_rnn.operator.routes.rnn` on a sequence of one step, so the same bits
(tested). The rule is asked at every call, as on every route.

With a gradient the step is :class:`_PlannedStep`, a ``torch.autograd.Function`` over the cell's
own parameters (no gather into the buffer and back): its backward is the engine's, the same bits
as the operator's, and its gradients go to ``weight_ih``, ``weight_hh``, ``bias_ih`` and
``bias_hh`` directly. A backward in grad mode (``create_graph=True``: double backward) runs the
step again through :func:`~cudnn_rnn.operator.routes.rnn` and differentiates that, whose own
double backward is the operator's (:mod:`cudnn_rnn.operator.autograd`). What the step read is
saved as torch saves it for torch.nn's cells: a parameter, input or state edited in place before
the backward makes the backward raise torch's error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from cudnn_rnn.core.layout import Layout
from cudnn_rnn.engines import engine_for, native
from cudnn_rnn.engines.native_step import StepPlan, StepSaved
from cudnn_rnn.operator.implementation import Static, _layout
from cudnn_rnn.operator.routes import _step_call, rnn

__all__ = ["differentiable_grads", "planned_step", "step_plan"]


def step_plan(static: Static, flat: Tensor, batch: int) -> StepPlan | None:
    """A plan for steps of ``batch`` rows on ``flat`` (the buffer of a one-layer unidirectional
    spec: a cell's), or None where the rule table's engine for such a step is not the native
    one (then the caller takes :func:`~cudnn_rnn.operator.routes.step`)."""
    if not _native_runs(static, flat, batch) or not flat.is_contiguous():
        return None
    layout = _layout(static)
    if not layout.spec.variant.is_cudnn or flat.shape != (layout.size,):
        return None
    return StepPlan(layout, flat, batch)


def _native_runs(static: Static, flat: Tensor, batch: int) -> bool:
    return engine_for(_step_call(static, flat.device, flat.dtype, batch)) is native.ENGINE


def planned_step(
    plan: StepPlan,
    static: Static,
    x: Tensor,
    h0: Tensor,
    c0: Tensor | None,
    params: Sequence[Tensor],
    assemble: Callable[[Sequence[Tensor]], Tensor],
    need_grad: bool,
) -> tuple[Tensor, Tensor | None] | None:
    """One step ``(h_1, c_1 or None)`` on the plan, or None where the rule table no longer
    picks the native engine for it (the caller takes the checked path). The caller checked
    that nothing but plain eager execution sees the call, that ``x [B, I]`` and the states
    ``[B, H]`` have the plan's sizes, dtype and device, and that ``params`` (the cell's) are
    views of the plan's buffer. ``assemble``: a buffer made from ``params``, differentiable for
    them (for a double backward)."""
    # The rule again: a plan's spec, device and dtype are those the native engine took when
    # it was made, and the native engine is the table's first row, so what can change its
    # answer is only whether the engine is still loaded (a test reloads it without).
    if not native.available():
        return None
    x, h0 = x.contiguous(), h0.contiguous()
    c0 = None if c0 is None else c0.contiguous()
    if not need_grad:
        h1, c1, _ = plan.forward(x, h0, c0, False)
        return h1, c1
    out = _apply(plan, static, assemble, x, h0, c0, *params)
    return out[0], out[1]


class _PlannedStep(torch.autograd.Function):
    """One step with a gradient for ``x``, the states and the parameters (see the module)."""

    @staticmethod
    def forward(
        ctx: Any,
        plan: StepPlan,
        static: Static,
        assemble: Callable[[Sequence[Tensor]], Tensor],
        x: Tensor,
        h0: Tensor,
        c0: Tensor | None,
        *params: Tensor,
    ) -> tuple[Tensor, Tensor | None]:
        h1, c1, saved = plan.forward(x, h0, c0, True)
        assert saved is not None
        ctx.plan, ctx.static, ctx.assemble = plan, static, assemble
        ctx.save_for_backward(x, h0, c0, h1, saved.gates, saved.extra, *params)
        ctx.set_materialize_grads(False)
        return h1, c1

    @staticmethod
    def backward(ctx: Any, dh1: Tensor | None, dc1: Tensor | None) -> tuple[Tensor | None, ...]:
        x, h0, c0, h1, gates, extra, *params = ctx.saved_tensors
        plan: StepPlan = ctx.plan
        nones: tuple[None, ...] = (None,) * 3
        if dh1 is None and dc1 is None:
            return nones + (None,) * (3 + len(params))
        if dh1 is None:
            dh1 = torch.zeros_like(h1)
        if torch.is_grad_enabled():  # create_graph: a gradient that is differentiable itself
            given = (x, h0, c0, *params)
            wanted = ctx.needs_input_grad[3:]
            found = differentiable_grads(_layout(ctx.static), ctx.assemble, given, wanted, dh1, dc1)
            return nones + tuple(found)
        need = ctx.needs_input_grad
        weights = any(need[6:8])
        biases = len(params) > 2 and any(need[8:])
        # (grad mode is off here: a backward without create_graph)
        g = plan.backward(
            x, h0, c0, h1, StepSaved(gates, extra), dh1.contiguous(),
            None if dc1 is None else dc1.contiguous(), (need[3], weights, biases),
        )  # fmt: skip
        grads = (g.dx, g.dh0, g.dc0 if c0 is not None else None, g.dw_ih, g.dw_hh)
        return nones + grads + ((g.db_ih, g.db_hh) if len(params) > 2 else ())


def differentiable_grads(
    layout: Layout,
    assemble: Callable[[Sequence[Tensor]], Tensor],
    given: Sequence[Tensor | None],
    wanted: Sequence[bool],
    dh1: Tensor,
    dc1: Tensor | None,
) -> list[Tensor | None]:
    """The gradients of ``given`` (``x, h0, c0 or None, *params`` of a step of ``layout``'s
    layer) where ``wanted``, as a differentiable function of them and of the incoming
    gradients: the step again through the operator on ``assemble(params)``, differentiated by
    autograd with ``create_graph=True``; None elsewhere (and where a gradient is unused). The
    double backward of both of the step's paths (the C++ node's too: nn/_step_node.py)."""
    x, h0, c0, *params = given
    with torch.enable_grad():
        flat = assemble(params)  # type: ignore[arg-type]  # (the parameters are all there)
        assert x is not None and h0 is not None
        c3 = None if c0 is None else c0.unsqueeze(0)
        _, h_n, c_n = rnn(
            layout.spec, flat, x.unsqueeze(0), h0.unsqueeze(0), c3, None,
            training=False, seed=0, dropout_step=None,
        )  # fmt: skip
        outs, grads = [h_n[0]], [dh1]
        if c_n is not None and dc1 is not None:
            outs.append(c_n[0])
            grads.append(dc1)
        wrt = [(i, t) for i, t in enumerate(given) if t is not None and wanted[i]]
        found = torch.autograd.grad(
            outs, [t for _, t in wrt], grads, create_graph=True, allow_unused=True
        )
    result: list[Tensor | None] = [None] * len(given)
    for (i, _), g in zip(wrt, found):
        result[i] = g
    return result


def _function_apply(cls: type[torch.autograd.Function]) -> Callable[..., Any]:
    """``cls.apply`` less its Python wrapper, which binds default arguments for a
    ``setup_context`` (``cls`` has none) and unwraps the dead wrappers of finished torch.func
    transforms (the caller saw none: plain eager, no transform active), then calls this C entry
    (about a third of a B 1 step's autograd cost, issue 48); ``cls.apply`` where torch has
    no such entry."""
    entry = getattr(torch._C, "_FunctionBase", object).__dict__.get("apply")
    return entry.__get__(None, cls) if entry is not None else cls.apply


_apply = _function_apply(_PlannedStep)
