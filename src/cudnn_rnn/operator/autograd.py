"""The operator's gradients: its backward, the double backward, and the differentiable call.

``cudnn_rnn::rnn``'s autograd is registered here on the operator (for graphs and
``torch.ops``), and :class:`_RNNFunction` is the same backward around the same two operators in
the ``setup_context`` style, which ``torch.func`` needs (it refuses the autograd wrapper
``torch.library`` generates). The backward runs under ``no_grad`` and once differentiable, as
cuDNN's RNN: the engine's backward (:func:`_grads`).

Double backward: a backward that runs in grad mode (``torch.autograd.grad(...,
create_graph=True)``, ``backward(create_graph=True)``, ``torch.func.grad`` inside another
gradient transform) must give a differentiable gradient, which no engine's backward does. It then
runs the forward again in torch operators, on any device: the ``loop`` engine's time loop
without its workspace (:mod:`cudnn_rnn.engines.loop`), on the saved inputs and the saved dropout
masks, and takes its vector-Jacobian product with autograd (``create_graph=True``); the gradient
of that gradient is autograd's through those operators (gradient penalties, Hessian-vector
products, ``gradgradcheck``). Its cost: a second forward plus autograd through ``T`` steps of
small operators, about 3 to 5 times the engine's backward on the CPU, and the graph it keeps for
the next derivative (every step's gates, per layer and direction). Its first-order values
equal the engine's to rounding. A backward without grad mode is unchanged: the engine's, the same
bits. ``torch.func.grad`` runs every backward in grad mode; where nothing around it can take a
higher derivative (no enclosing gradient transform, no autograd outside it), the engine's
backward runs, as without grad mode. Where a differentiable gradient cannot be made, the
gradient's values still come, behind a node that raises a RuntimeError saying why and how to fix
it if they are differentiated (never a silent zero): cuDNN's dropout (its masks are its own), and
``torch.autograd.grad(create_graph=True)`` inside a ``torch.func`` transform differentiated by
that same transform. Compiled code (``torch.compile``'s AOTAutograd) has no double backward:
torch raises its own error there.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, cast

import torch
from torch import Tensor

from cudnn_rnn.engines import loop, variant
from cudnn_rnn.operator.implementation import (
    STATIC_ARGS,
    ForwardArgs,
    Static,
    _backward_impl,
    _cpu_lengths,
    _direct,
    _forward_impl,
    _inputs,
    _layout,
    _no_autocast,
)
from cudnn_rnn.operator.library import _rnn_backward_op, _rnn_op, _vmap_loop


def _save(ctx: Any, args: ForwardArgs, output: tuple[Any, ...]) -> None:
    """Keep what the backward operator needs; ``output[5:]`` is the reserve, as a list or flat."""
    y, hy, cy, masks, workspace = output[:5]
    rest = output[5:]
    reserve = list(rest[0]) if rest and isinstance(rest[0], (list, tuple)) else list(rest)
    ctx.static = tuple(args.static)
    ctx.dropout = args.dropout
    ctx.traced = args.traced
    ctx.has_c = args.c0 is not None
    ctx.save_for_backward(
        args.params, args.x, args.h0, args.c0, args.lengths, masks, y, hy, cy, workspace, *reserve
    )
    # One call: each replaces what the last one marked.
    ctx.mark_non_differentiable(masks, workspace, *reserve, *(() if ctx.has_c else (cy,)))
    # No zero gradients for what the caller did not use: the workspace and reserve are large.
    ctx.set_materialize_grads(False)


def _grads(
    ctx: Any, dy: Tensor | None, dhy: Tensor | None, dcy: Tensor | None
) -> tuple[Tensor | None, ...]:
    params, x, h0, c0, lengths, masks, y, hy, cy, workspace, *reserve = ctx.saved_tensors
    if dy is None:
        dy = torch.zeros_like(y)
    if dhy is None:
        dhy = torch.zeros_like(hy)
    if dcy is None or not ctx.has_c:
        dcy = torch.zeros_like(cy)
    # In grad mode (create_graph=True, torch.func) the gradient must be differentiable itself
    # (an empty batch's is zero, a constant: the engines' answer is exact).
    read = (params, x, h0, c0, dy, dhy, dcy)
    anchor = _tracked(read) if torch.is_grad_enabled() and int(x.shape[1]) > 0 else None
    refusal = None
    if anchor is not None:
        refusal = _refusal(ctx, masks, read)
        if refusal is None:
            return _differentiable_grads(ctx, (params, x, h0, c0), lengths, masks, (dy, dhy, dcy))
    # A second backward through this node (retain_graph, gradcheck): engines whose backward
    # writes into what they kept make it again. The node knows; the saved tensors do not (each
    # backward unpacks them as new tensor objects).
    again = getattr(ctx, "backward_done", False)
    ctx.backward_done = True
    # The input's gradient is a product as large as a weight gradient's: made only when asked
    # for (dx is then zeros, which autograd drops).
    need_dx = bool(ctx.needs_input_grad[1])
    # Where nothing watches, the operator's implementation without its dispatch (_direct).
    direct = _direct(params, x, h0, c0, y, dy, dhy, dcy, *reserve)
    backward: Callable[..., Any] = _backward_impl if direct else _rnn_backward_op
    with torch.no_grad():
        dparams, dx, dh0, dc0 = backward(
            params, x, h0, c0, lengths, masks, y, hy, cy, workspace, reserve,
            dy, dhy, dcy, *ctx.static, ctx.dropout, ctx.traced, again, need_dx,
        )  # fmt: skip
    grads = dparams, dx, dh0, (dc0 if ctx.has_c else None)
    if anchor is None or refusal is None:
        return grads
    return _undifferentiable(grads, anchor, refusal)


# -- double backward ------------------------------------------------------------------------------


def _tracked(tensors: tuple[Tensor | None, ...]) -> Tensor | None:
    """A tensor of ``tensors`` that carries a gradient (None if none does)."""
    return next((t for t in tensors if t is not None and t.requires_grad), None)


def _beyond_this_transform(t: Tensor) -> bool:
    """Whether ``t`` carries a gradient for a ``torch.func`` transform enclosing the current
    one, or for autograd outside them all: whether a higher derivative can be taken of what a
    backward inside the current transform makes of it."""
    func = torch._C._functorch
    level = func.maybe_current_level()
    while func.is_functorch_wrapped_tensor(t):
        if func.is_gradtrackingtensor(t) and func.maybe_get_level(t) != level and t.requires_grad:
            return True
        t = func.get_unwrapped(t)
    return bool(t.requires_grad)


def _refusal(ctx: Any, masks: Tensor, read: tuple[Tensor | None, ...]) -> str | None:
    """Why the gradient of a backward in grad mode is not made differentiable (None: it is).

    ``torch.func``'s gradient transforms run every backward in grad mode; the gradient is made
    differentiable only where an enclosing transform (or autograd outside them) can
    differentiate it, so that a plain ``torch.func.grad`` keeps the fast backward. The engines
    that draw their own dropout masks (cuDNN's) keep none that torch operators can apply.
    """
    if torch._C._are_functorch_transforms_active() and not any(
        t is not None and _beyond_this_transform(t) for t in read
    ):
        return (
            "cudnn_rnn::rnn: a gradient taken with torch.autograd.grad(create_graph=True) "
            "inside a torch.func transform cannot be differentiated again by that same "
            "transform: the operator makes its gradient differentiable only for an enclosing "
            "torch.func transform or for autograd outside them. Expected the inner gradient "
            "from torch.func (grad, vjp); to fix it, take it with torch.func.grad or "
            "torch.func.vjp instead of torch.autograd.grad."
        )
    if ctx.dropout > 0 and int(ctx.static[1]) > 1 and masks.dim() != 4:
        return (
            "cudnn_rnn::rnn: the gradient of a training call with dropout on the CUDA engine "
            "(cuDNN) cannot be differentiated again (double backward: gradient penalties, "
            "higher derivatives): cuDNN draws its own dropout masks, which no other computation "
            f"reproduces. Expected dropout 0 for a double backward, got {ctx.dropout}. To fix "
            "it, train with dropout=0 or in eval mode, run the call with cuDNN disabled "
            "(torch.backends.cudnn.flags(enabled=False)) or on the CPU: the operator then draws "
            "the masks itself and keeps them for the double backward."
        )
    return None


def _undifferentiable(
    grads: tuple[Tensor | None, ...], anchor: Tensor, message: str
) -> tuple[Tensor | None, ...]:
    """``grads`` as they are, behind a node that raises ``message`` when they are differentiated
    (torch's ``once_differentiable`` node; ``anchor``, a tensor that carries a gradient, makes
    it exist): a first-order gradient taken in grad mode works, a second one never silently
    becomes zero."""
    err: Any = torch._C._functions.DelayedError(message.encode(), len(grads) + 1)
    return tuple(err(*grads, anchor)[:-1])


def _differentiable_grads(
    ctx: Any,
    given: tuple[Tensor, Tensor, Tensor, Tensor | None],
    lengths: Tensor | None,
    masks: Tensor,
    grads: tuple[Tensor, Tensor, Tensor],
) -> tuple[Tensor | None, ...]:
    """The vector-Jacobian product of the call with ``grads`` (of ``y, h_n, c_n``) for its
    inputs ``given`` (``params, x, h0, c0``), itself differentiable: the forward again in torch
    operators (the ``loop`` engine's time loop without its workspace) on the saved inputs and
    dropout masks, differentiated by autograd with ``create_graph=True``."""
    params, x, h0, c0 = given
    wrt = {
        i: t for i, t in enumerate(given)
        if t is not None and t.requires_grad and ctx.needs_input_grad[i]
    }  # fmt: skip
    layout = _layout(tuple(ctx.static))
    # Constants of the call (an empty 1-D tensor: no dropout masks).
    drawn = masks.detach() if masks.dim() == 4 else None
    cpu_lengths = _cpu_lengths(lengths)
    with torch.enable_grad(), _no_autocast(x.device):
        inputs = _inputs(params, x, h0, c0, cpu_lengths, drawn)
        if layout.spec.variant.is_cudnn:
            y, hy, cy, _ = loop.forward(layout, *inputs, keep=False)
        else:
            y, hy, cy = variant.forward(layout, *inputs)
    # The outputs that depend on what is differentiated, with their gradients (no c_n: none).
    pairs = [(o, g) for o, g in zip((y, hy, cy), grads) if o is not None and o.requires_grad]
    got: tuple[Tensor | None, ...] = (None,) * len(wrt)
    if wrt and pairs:
        outs, outs_grads = zip(*pairs)
        got = torch.autograd.grad(
            outs, list(wrt.values()), outs_grads, create_graph=True, allow_unused=True
        )
    result: list[Tensor | None] = [None] * 4
    for i, g in zip(wrt, got):
        result[i] = g
    return tuple(result)


# -- the operator's autograd, and the differentiable call ------------------------------------------


def _op_setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
    _save(ctx, ForwardArgs.of_schema(inputs), output)


def _op_backward(ctx: Any, dy: Any, dhy: Any, dcy: Any, *_: Any) -> tuple[Any, ...]:
    grads = _grads(ctx, dy, dhy, dcy)
    return (*grads, None, None) + (None,) * (STATIC_ARGS + 4)


_rnn_op.register_autograd(_op_backward, setup_context=_op_setup_context)


class _RNNFunction(torch.autograd.Function):
    """The differentiable call (``setup_context`` style, which ``torch.func`` needs)."""

    @staticmethod
    def forward(
        params: Tensor,
        x: Tensor,
        h0: Tensor,
        c0: Tensor | None,
        lengths: Tensor | None,
        step: Tensor | None,
        static: Static,
        dropout: float,
        seed: int,
        traced: bool,
    ) -> tuple[Tensor, ...]:
        static = cast(Static, tuple(static))  # torch.func's vmap passes a list
        args = ForwardArgs(params, x, h0, c0, lengths, step, static, dropout, seed, True, traced)
        if not traced and _direct(params, x, h0, c0, lengths, step):
            # What the operator would run, without its dispatch (see _direct).
            with _no_autocast(x.device):
                *fixed, reserve = _forward_impl(args, True)
        else:
            *fixed, reserve = _rnn_op(*args.schema())
        return (*fixed, *reserve)  # a Function returns tensors, not lists

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, ...]) -> None:
        params, x, h0, c0, lengths, step, static, dropout, seed, traced = inputs
        args = ForwardArgs(params, x, h0, c0, lengths, step, static, dropout, seed, True, traced)
        _save(ctx, args, output)

    @staticmethod
    def backward(ctx: Any, dy: Any, dhy: Any, dcy: Any, *_: Any) -> tuple[Any, ...]:
        return (*_grads(ctx, dy, dhy, dcy), None, None, None, None, None, None)

    @staticmethod
    def vmap(info: Any, in_dims: tuple[Any, ...], *args: Any) -> Any:
        return _vmap_loop(info, in_dims, args, _RNNFunction.apply)


# torch.autograd.Function.apply binds the arguments to ``forward``'s signature on every call
# (it has a setup_context); inspect.signature reads ``__signature__`` first instead of building
# it anew, which cost more than the rest of a small call's Python.
_RNNFunction.forward.__signature__ = inspect.signature(_RNNFunction.forward)  # type: ignore[attr-defined]

#: What ``_RNNFunction.apply`` runs outside torch.func transforms once it has bound the
#: arguments to ``forward``'s signature (a no-op when every argument is passed, as
#: :func:`~cudnn_rnn.operator.routes.rnn` passes them) and unwrapped functorch's dead wrappers
#: (none in a :func:`~cudnn_rnn.operator.implementation._direct` call, the only one ``rnn``
#: makes through this): torch's C ``apply``, without the binding's cost (a tenth of a small
#: training step's Python).
_APPLY = super(torch.autograd.Function, _RNNFunction).apply
