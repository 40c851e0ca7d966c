"""The fused RNN as PyTorch custom operators: ``cudnn_rnn::rnn`` and ``cudnn_rnn::rnn_backward``.

Registered with ``torch.library`` (schema, fake implementation, autograd), so that
``torch.compile``, ``torch.export`` and ``torch.func`` see one node that takes the opaque buffer::

    cudnn_rnn::rnn(params, x, h0, c0?, lengths?, dropout_step?, <spec>, dropout, seed,
                   need_grad, traced) -> (y, h_n, c_n, masks, workspace, reserve[])
    cudnn_rnn::rnn_backward(params, x, h0, c0?, lengths?, masks, y, h_n, c_n, workspace,
                            reserve[], dy, dh_n, dc_n, <spec>, dropout, traced)
                            -> (dparams, dx, dh0, dc0)

``x`` is time-major ``[T, B, I]``; ``<spec>`` is ``rnn_mode, num_layers, num_units, input_size,
num_proj (0: none), skip_input, bidirectional``. ``c_n``/``dc0`` are empty for the modes without a
cell state. ``masks`` are the dropout masks ``[L-1, T, B, D*Hout]`` (empty without dropout, and
with an engine that draws its own), ``workspace`` (a buffer whose length follows from the shapes)
and ``reserve`` (a list of tensors, some of lengths only the kernel knows: oneDNN's workspaces,
cuDNN's reserve space) what the engine keeps for the backward pass (empty when ``need_grad`` is
false). The reserve is private to the call: cuDNN's backward also writes into it, which the
``cudnn`` engine handles itself (:mod:`cudnn_rnn.engines.cudnn`).

Which engine runs is decided by the rule table of :mod:`cudnn_rnn.engines` from what is fixed
before the call (spec, device, dtype, ``need_grad``, whether lengths are given, ``traced``: the
call is being compiled or exported), never by timing. The operator does what is the same for
every engine: it checks the lengths, draws the dropout masks for the engines that take them,
answers ``batch == 0`` and makes the fake outputs from what the engine says it keeps.

One way in: every layer, op, cell and ``cudnn_rnn.nn`` module calls :func:`rnn` (the layers'
zero-state calls go through :func:`planned_call`, which keeps the call between calls and then
runs the same implementation). :func:`route` is the one rule that picks how the call reaches
the operator's one implementation (:func:`_engine_forward`, where a forward meets its engine):
directly in plain eager execution, through the dispatcher wherever a compiler, tracer, mode or
transform watches, as ONNX nodes under ``torch.onnx.export`` (:class:`Route`). The lengths are
checked once: by :func:`rnn`'s caller (``validation.check_lengths``), or on entry by a call
that comes through the dispatcher (a graph does not check the values it was traced with);
never again in the backward.

Dropout masks come from ``seed`` and the counter ``dropout_step`` (a 0-d int64 tensor the caller
owns and advances after each call): call ``k`` draws them from
``torch.Generator().manual_seed((seed + k * 0x9E3779B97F4A7C15) mod 2**64)``, layer by layer, as
Bernoulli(1 - p) in float32 of shape ``[T, B, D*Hout]``, scaled by ``1 / (1 - p)``. So the same
seed gives the same masks eagerly and compiled, and the global RNG is never touched. The
``cudnn`` engine seeds cuDNN's own dropout with that same per-call seed instead (its masks differ
from these). Reading the counter is a host read of a 0-d tensor, on the device it lives on.

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

import contextlib
import enum
import functools
import inspect
from typing import Any, NamedTuple, cast

import torch
from torch import Tensor

from cudnn_rnn import engines, export
from cudnn_rnn.core.constants import (
    CUDNN_INPUT_LINEAR_MODE,
    CUDNN_INPUT_SKIP_MODE,
    CUDNN_LSTM,
    CUDNN_RNN_BIDIRECTION,
    CUDNN_RNN_UNIDIRECTION,
)
from cudnn_rnn.core.layout import Layout, layout_of
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.engines import loop
from cudnn_rnn.engines.base import Call, Engine, Grads, Inputs, Kept, Outputs, Saved

__all__ = ["GOLDEN", "EagerPlan", "Route", "planned_call", "rnn", "route"]

#: The odd constant that spaces the per-call dropout seeds (2**64 / golden ratio).
GOLDEN = 0x9E3779B97F4A7C15

#: ``(mode, num_layers, num_units, input_size, num_proj or 0, skip_input, bidirectional)``.
Static = tuple[str, int, int, int, int, bool, bool]


def static_of(spec: RNNSpec) -> Static:
    return (
        spec.mode,
        spec.num_layers,
        spec.num_units,
        spec.input_size,
        spec.num_proj or 0,
        spec.skip_input,
        spec.bidirectional,
    )


@functools.lru_cache(maxsize=256)
def _layout(static: Static) -> Layout:
    mode, layers, units, size, proj, skip, bidi = static
    return layout_of(
        RNNSpec(
            mode,
            layers,
            units,
            size,
            CUDNN_INPUT_SKIP_MODE if skip else CUDNN_INPUT_LINEAR_MODE,
            CUDNN_RNN_BIDIRECTION if bidi else CUDNN_RNN_UNIDIRECTION,
            proj or None,
        )
    )


def _cpu_lengths(lengths: Tensor | None) -> Tensor | None:
    """The lengths as the engines take them (a CPU int64 tensor), not checked again: they were
    when the forward call entered (:func:`_check_lengths`, or its caller's
    :func:`cudnn_rnn.validation.check_lengths`)."""
    return lengths.to("cpu", torch.int64) if lengths is not None else None


def _check_lengths(lengths: Tensor | None, steps: int) -> Tensor | None:
    """The lengths of a call that entered through the dispatcher (``torch.ops.cudnn_rnn.rnn``,
    a compiled or exported graph, a transform), whose caller may not have checked them
    (a graph checks nothing of the values it was traced with): in ``[1, steps]``."""
    t = _cpu_lengths(lengths)
    if t is None:
        return None
    if t.numel() and (int(t.min()) < 1 or int(t.max()) > steps):
        raise ValueError(
            f"cudnn_rnn::rnn: sequence_lengths must be in [1, {steps}] (the number of time "
            f"steps), got values from {int(t.min())} to {int(t.max())}."
        )
    return t


def _call_seed(seed: int, step: Tensor | None) -> int:
    """The dropout seed of call ``k`` of the counter ``step``."""
    k = int(step) if step is not None else 0
    return (seed + k * GOLDEN) % 2**64


def _masks(spec: RNNSpec, steps: int, batch: int, p: float, seed: int, like: Tensor) -> Tensor:
    gen = torch.Generator(device=like.device)
    gen.manual_seed(seed)
    scale = 0.0 if p >= 1.0 else 1.0 / (1.0 - p)
    shape = (steps, batch, spec.num_dirs * spec.output_units)
    masks = []
    for _ in range(spec.num_layers - 1):
        keep = torch.empty(shape, dtype=torch.float32, device=like.device)
        keep.bernoulli_(1.0 - p, generator=gen)
        masks.append(keep * scale)
    return torch.stack(masks).to(like.dtype)


def _call(
    static: Static,
    x: Tensor,
    need_grad: bool,
    lengths: Tensor | None,
    traced: bool,
    dropout: float,
    seed: int = 0,
) -> Call:
    """What the rule table sees of this call (sizes may be symbolic in the fake)."""
    layout = _layout(static)
    p = dropout if layout.spec.num_layers > 1 else 0.0  # dropout acts between layers only
    return Call(
        layout, x.device, x.dtype, x.shape[0], x.shape[1], need_grad, lengths is not None,
        traced, p, seed,
    )  # fmt: skip


def _no_autocast(device: torch.device) -> Any:
    """The engines compute in the op's dtype: autocast must not retype the operators inside."""
    if not torch.is_autocast_enabled(device.type):
        return contextlib.nullcontext()  # nothing to switch off (and no context to build)
    return torch.autocast(device.type, enabled=False)


def _empty(like: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    return like.new_empty(0, dtype=dtype)


def _masks_like(call: Call, kept: Kept, x: Tensor) -> Tensor:
    """The masks output as the fake makes it: the drawn masks' shape, or empty."""
    if not (kept.masks and call.dropout > 0):
        return _empty(x)
    spec = call.spec
    width = spec.num_dirs * spec.output_units
    return x.new_empty(spec.num_layers - 1, call.steps, call.batch, width)


@torch.library.custom_op("cudnn_rnn::rnn", mutates_args=())
def _rnn_op(
    params: Tensor,
    x: Tensor,
    h0: Tensor,
    c0: Tensor | None,
    lengths: Tensor | None,
    dropout_step: Tensor | None,
    rnn_mode: str,
    num_layers: int,
    num_units: int,
    input_size: int,
    num_proj: int,
    skip_input: bool,
    bidirectional: bool,
    dropout: float,
    seed: int,
    need_grad: bool,
    traced: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, list[Tensor]]:
    with _no_autocast(x.device):
        return _forward_impl(
            params, x, h0, c0, lengths, dropout_step,
            (rnn_mode, num_layers, num_units, input_size, num_proj, skip_input, bidirectional),
            dropout, seed, need_grad, traced,
        )  # fmt: skip


def _setup(
    params: Tensor,
    x: Tensor,
    lengths: Tensor | None,
    dropout_step: Tensor | None,
    static: Static,
    dropout: float,
    seed: int,
    need_grad: bool,
    traced: bool,
    planned: Call | None = None,
) -> tuple[Call, Engine, Kept, Tensor | None]:
    """The call, the engine the rule table picks for it, what it keeps, and the dropout masks
    drawn for the engines that take them (None otherwise). ``planned``: the call as an
    :class:`EagerPlan` keeps it (without dropout), which this call is."""
    call = planned or _call(static, x, need_grad, lengths, traced, dropout)
    if call.dropout > 0:
        call = call._replace(seed=_call_seed(seed, dropout_step))
    engine = engines.engine_for(call)
    kept = engine.kept(call)
    masks = None
    if kept.masks and call.dropout > 0:
        masks = _masks(call.spec, int(x.shape[0]), int(x.shape[1]), call.dropout, call.seed, x)
    return call, engine, kept, masks


def _inputs(
    params: Tensor,
    x: Tensor,
    h0: Tensor,
    c0: Tensor | None,
    lengths: Tensor | None,
    masks: Tensor | None,
) -> Inputs:
    """Every engine sees C-contiguous tensors (a copy where the caller's are not), so the
    layout of what the caller passes can change neither the path nor the bits."""
    c0 = c0.contiguous() if c0 is not None else None
    return Inputs(params.contiguous(), x.contiguous(), h0.contiguous(), c0, lengths, masks)


def _engine_forward(
    params: Tensor,
    x: Tensor,
    h0: Tensor,
    c0: Tensor | None,
    lengths: Tensor | None,
    dropout_step: Tensor | None,
    static: Static,
    dropout: float,
    seed: int,
    need_grad: bool,
    traced: bool,
    checked: bool,
    planned: Call | None = None,
) -> tuple[Call, Kept, Tensor | None, Outputs | None]:
    """The one place a forward reaches an engine: the call, what its engine keeps, the masks
    drawn for it, and the engine's outputs on contiguous inputs (None for an empty batch,
    which no engine sees). ``checked``: the lengths are a CPU int64 tensor its caller checked
    (:func:`rnn`'s direct routes); otherwise they are checked here."""
    cpu_lengths = lengths if checked else _check_lengths(lengths, int(x.shape[0]))
    call, engine, kept, masks = _setup(
        params, x, lengths, dropout_step, static, dropout, seed, need_grad, traced, planned
    )
    if int(x.shape[1]) == 0:
        return call, kept, masks, None
    return call, kept, masks, engine.forward(call, _inputs(params, x, h0, c0, cpu_lengths, masks))


def _forward_impl(
    params: Tensor,
    x: Tensor,
    h0: Tensor,
    c0: Tensor | None,
    lengths: Tensor | None,
    dropout_step: Tensor | None,
    static: Static,
    dropout: float,
    seed: int,
    need_grad: bool,
    traced: bool,
    checked: bool = False,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, list[Tensor]]:
    """The operator's forward: :func:`_engine_forward` with the outputs of the schema."""
    call, kept, masks, out = _engine_forward(
        params, x, h0, c0, lengths, dropout_step, static, dropout, seed, need_grad, traced,
        checked,
    )  # fmt: skip
    masks_out = masks if masks is not None else _empty(x)
    if out is None:  # as torch.nn: empty outputs and states; what the fake says, with no batch
        spec = call.spec
        y = x.new_empty(int(x.shape[0]), 0, spec.num_dirs * spec.output_units)
        cy = c0.new_empty(c0.shape) if c0 is not None else _empty(x)
        reserve = [r.make(x, 0) for r in kept.reserve]
        workspace = x.new_empty(kept.workspace if kept.workspace is not None else 0)
        return y, h0.new_empty(h0.shape), cy, masks_out, workspace, reserve
    cy = out.cy.contiguous() if out.cy is not None else _empty(x)
    workspace = out.workspace if out.workspace is not None else _empty(x)
    return (
        out.y.contiguous(), out.hy.contiguous(), cy, masks_out, workspace, list(out.reserve)
    )  # fmt: skip


def _finished(out: Outputs, has_c: bool) -> tuple[Tensor, Tensor, Tensor | None]:
    """What an eager caller without gradient gets of an engine's outputs: ``(y, h_n, c_n)``,
    contiguous; ``c_n`` None where the call has no cell state (``has_c``)."""
    cy = out.cy.contiguous() if out.cy is not None and has_c else None
    return out.y.contiguous(), out.hy.contiguous(), cy


@_rnn_op.register_fake
def _rnn_fake(
    params: Tensor,
    x: Tensor,
    h0: Tensor,
    c0: Tensor | None,
    lengths: Tensor | None,
    dropout_step: Tensor | None,
    rnn_mode: str,
    num_layers: int,
    num_units: int,
    input_size: int,
    num_proj: int,
    skip_input: bool,
    bidirectional: bool,
    dropout: float,
    seed: int,
    need_grad: bool,
    traced: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, list[Tensor]]:
    static = (rnn_mode, num_layers, num_units, input_size, num_proj, skip_input, bidirectional)
    call = _call(static, x, need_grad, lengths, traced, dropout)
    spec = call.spec
    kept = engines.engine_for(call).kept(call)
    y = x.new_empty(call.steps, call.batch, spec.num_dirs * spec.output_units)
    cy = c0.new_empty(c0.shape) if c0 is not None else _empty(x)
    # Lengths only the kernel knows (oneDNN's workspaces, cuDNN's reserve) are data-dependent.
    reserve = [
        r.make(x, torch.library.get_ctx().new_dynamic_size() if r.shape is None else 0)
        for r in kept.reserve
    ]
    size = kept.workspace
    workspace = x.new_empty(torch.library.get_ctx().new_dynamic_size() if size is None else size)
    return y, h0.new_empty(h0.shape), cy, _masks_like(call, kept, x), workspace, reserve


@torch.library.custom_op("cudnn_rnn::rnn_backward", mutates_args=())
def _rnn_backward_op(
    params: Tensor,
    x: Tensor,
    h0: Tensor,
    c0: Tensor | None,
    lengths: Tensor | None,
    masks: Tensor,
    y: Tensor,
    hy: Tensor,
    cy: Tensor,
    workspace: Tensor,
    reserve: list[Tensor],
    dy: Tensor,
    dhy: Tensor,
    dcy: Tensor,
    rnn_mode: str,
    num_layers: int,
    num_units: int,
    input_size: int,
    num_proj: int,
    skip_input: bool,
    bidirectional: bool,
    dropout: float,
    traced: bool,
    again: bool = False,
    need_dx: bool = True,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    with _no_autocast(x.device):
        return _backward_impl(
            params, x, h0, c0, lengths, masks, y, hy, cy, workspace, reserve, dy, dhy, dcy,
            (rnn_mode, num_layers, num_units, input_size, num_proj, skip_input, bidirectional),
            dropout, traced, again, need_dx,
        )  # fmt: skip


def _backward_impl(
    params: Tensor,
    x: Tensor,
    h0: Tensor,
    c0: Tensor | None,
    lengths: Tensor | None,
    masks: Tensor,
    y: Tensor,
    hy: Tensor,
    cy: Tensor,
    workspace: Tensor,
    reserve: list[Tensor],
    dy: Tensor,
    dhy: Tensor,
    dcy: Tensor,
    static: Static,
    dropout: float,
    traced: bool,
    again: bool = False,
    need_dx: bool = True,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    call = _call(static, x, True, lengths, traced, dropout)
    if int(x.shape[1]) == 0:
        return (
            torch.zeros_like(params),
            torch.zeros_like(x),
            torch.zeros_like(h0),
            torch.zeros_like(c0) if c0 is not None else _empty(x),
        )
    has_c = c0 is not None
    saved = Saved(
        params.contiguous(), x.contiguous(), h0.contiguous(),
        c0.contiguous() if c0 is not None else None, _cpu_lengths(lengths),
        masks if masks.dim() == 4 else None,  # an empty 1-D tensor: no dropout masks
        y, hy, cy if has_c else None, workspace, list(reserve), again, need_dx,
    )  # fmt: skip
    engine = engines.engine_for(call)
    dy = dy if engine.strided_dy else dy.contiguous()  # see engines.base
    grads = Grads(dy, dhy.contiguous(), dcy.contiguous() if has_c else None)
    dparams, dx, dh0, dc0 = engine.backward(call, saved, grads)
    return dparams, dx, dh0, (dc0 if dc0 is not None else _empty(x))


@_rnn_backward_op.register_fake
def _rnn_backward_fake(
    params: Tensor,
    x: Tensor,
    h0: Tensor,
    c0: Tensor | None,
    lengths: Tensor | None,
    masks: Tensor,
    y: Tensor,
    hy: Tensor,
    cy: Tensor,
    workspace: Tensor,
    reserve: list[Tensor],
    dy: Tensor,
    dhy: Tensor,
    dcy: Tensor,
    rnn_mode: str,
    num_layers: int,
    num_units: int,
    input_size: int,
    num_proj: int,
    skip_input: bool,
    bidirectional: bool,
    dropout: float,
    traced: bool,
    again: bool = False,
    need_dx: bool = True,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    dc0 = c0.new_empty(c0.shape) if c0 is not None else _empty(x)
    return params.new_empty(params.shape), x.new_empty(x.shape), h0.new_empty(h0.shape), dc0


# -- vmap: one call per item of the mapped dimension ----------------------------------------------


def _vmap_loop(info: Any, in_dims: tuple[Any, ...], args: tuple[Any, ...], call: Any) -> Any:
    """Run ``call`` once per item of the vmapped dimension and stack the results on dim 0.

    An RNN over a batch of problems has no cheaper batched form than its own batch axis; this
    makes ``torch.vmap`` work (per-sample gradients, ensembles) at the cost of a loop.
    """

    def pick(a: Any, d: Any, i: int) -> Any:
        if isinstance(a, (list, tuple)):  # the reserve list, with a list of dims
            dims = d if isinstance(d, (list, tuple)) else [d] * len(a)
            return [pick(t, e, i) for t, e in zip(a, dims)]
        return a.select(d, i) if d is not None and isinstance(a, Tensor) else a

    outs = [call(*(pick(a, d, i) for a, d in zip(args, in_dims))) for i in range(info.batch_size)]
    stacked: list[Any] = []
    dims: list[Any] = []
    for k, first in enumerate(outs[0]):
        if isinstance(first, (list, tuple)):  # the reserve list
            stacked.append([torch.stack([o[k][j] for o in outs]) for j in range(len(first))])
            dims.append([0] * len(first))
        else:
            stacked.append(torch.stack([o[k] for o in outs]))
            dims.append(0)
    return tuple(stacked), tuple(dims)


@torch.library.register_vmap("cudnn_rnn::rnn")  # type: ignore[untyped-decorator]
def _rnn_vmap(info: Any, in_dims: tuple[Any, ...], *args: Any) -> Any:
    return _vmap_loop(info, in_dims, args, _rnn_op)


@torch.library.register_vmap("cudnn_rnn::rnn_backward")  # type: ignore[untyped-decorator]
def _rnn_backward_vmap(info: Any, in_dims: tuple[Any, ...], *args: Any) -> Any:
    return _vmap_loop(info, in_dims, args, _rnn_backward_op)


# -- autograd -------------------------------------------------------------------------------------

_STATIC_ARGS = 7  # the <spec> arguments, in both schemas right after the tensors


def _save(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
    """Keep what the backward operator needs; ``output[5:]`` is the reserve, as a list or flat."""
    params, x, h0, c0, lengths, _step = inputs[:6]
    y, hy, cy, masks, workspace = output[:5]
    rest = output[5:]
    reserve = list(rest[0]) if rest and isinstance(rest[0], (list, tuple)) else list(rest)
    ctx.static = tuple(inputs[6 : 6 + _STATIC_ARGS])
    ctx.dropout = inputs[6 + _STATIC_ARGS]
    ctx.traced = inputs[-1]
    ctx.has_c = c0 is not None
    ctx.save_for_backward(params, x, h0, c0, lengths, masks, y, hy, cy, workspace, *reserve)
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
    with torch.no_grad():
        if _direct(params, x, h0, c0, y, dy, dhy, dcy, *reserve):
            with _no_autocast(x.device):
                dparams, dx, dh0, dc0 = _backward_impl(
                    params, x, h0, c0, lengths, masks, y, hy, cy, workspace, reserve,
                    dy, dhy, dcy, tuple(ctx.static), ctx.dropout, ctx.traced, again, need_dx,
                )  # fmt: skip
        else:
            dparams, dx, dh0, dc0 = _rnn_backward_op(
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
        y, hy, cy, _ = loop.forward(
            layout, *_inputs(params, x, h0, c0, cpu_lengths, drawn), keep=False
        )
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


def _op_backward(ctx: Any, dy: Any, dhy: Any, dcy: Any, *_: Any) -> tuple[Any, ...]:
    grads = _grads(ctx, dy, dhy, dcy)
    return (*grads, None, None) + (None,) * (_STATIC_ARGS + 4)


_rnn_op.register_autograd(_op_backward, setup_context=_save)


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
        if not traced and _direct(params, x, h0, c0, lengths, step):
            # What the operator would run, without its dispatch (see _direct).
            with _no_autocast(x.device):
                *fixed, reserve = _forward_impl(
                    params, x, h0, c0, lengths, step, static, dropout, seed, True, traced, True
                )
        else:
            *fixed, reserve = _rnn_op(
                params, x, h0, c0, lengths, step, *static, dropout, seed, True, traced
            )
        return (*fixed, *reserve)  # a Function returns tensors, not lists

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, ...]) -> None:
        params, x, h0, c0, lengths, step, static, dropout, seed, traced = inputs
        _save(ctx, (params, x, h0, c0, lengths, step, *static, dropout, seed, True, traced), output)

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
#: arguments to ``forward``'s signature (a no-op when every argument is passed, as :func:`rnn`
#: passes them) and unwrapped functorch's dead wrappers (none in a :func:`_direct` call, the
#: only one :func:`rnn` makes through this): torch's C ``apply``, without the binding's cost (a
#: tenth of a small training step's Python).
_APPLY = super(torch.autograd.Function, _RNNFunction).apply

_PLAIN = (Tensor, torch.nn.Parameter)


def _plain_eager(*tensors: Tensor | None) -> bool:
    """Whether nothing but plain eager execution can see a call without gradient: no compiler,
    JIT tracer, torch function or dispatch mode (fake tensors, FlopCounterMode, ...), profiler,
    tensor subclass or torch.func transform (vmap, grad). Then the operator's implementation
    runs directly: the same engine by the same rule, the same bits, without the dispatcher's
    round trip; otherwise every observer sees the one ``cudnn_rnn::rnn`` node."""
    if (
        torch._C._len_torch_dispatch_stack()
        or torch._C._is_torch_function_mode_enabled()
        or torch._C._get_tracing_state() is not None
        or torch.autograd.profiler._is_profiler_enabled
    ):
        return False
    wrapped = torch._C._functorch.is_functorch_wrapped_tensor
    return all(t is None or (type(t) in _PLAIN and not wrapped(t)) for t in tensors)


def _direct(*tensors: Tensor | None) -> bool:
    """Whether a differentiable call may run the operators' implementations directly, inside
    :class:`_RNNFunction`'s forward and backward, rather than through the dispatcher: in plain
    eager execution (:func:`_plain_eager`) with no ``torch.func`` transform active. It is the
    same engine by the same rule on the same tensors, so the same bits (tested), at a fraction
    of the dispatch cost of a small call; a compiler, a mode or a transform sees the operators."""
    return (
        not torch.compiler.is_compiling()  # first: what dynamo traces must see no more
        and not torch._C._are_functorch_transforms_active()
        and _plain_eager(*tensors)
    )


class EagerPlan(NamedTuple):
    """What a layer keeps between its calls without state, lengths, dropout or gradient, to
    make the next such call with the same kind of input cheaper (see :func:`planned_call`):
    the call as the rule table sees it and zero initial states (read only, shared by calls)."""

    call: Call
    shape: torch.Size  # of x as the caller passes it
    time_major: bool
    params_shape: tuple[int, ...]
    h0: Tensor
    c0: Tensor | None


def planned_call(
    plan: EagerPlan | None, spec: RNNSpec, params: Tensor, x: Any, time_major: bool
) -> tuple[EagerPlan, tuple[Tensor, Tensor, Tensor | None]] | None:
    """``(plan, (y, h_n, c_n or None))`` for a call with zero initial states, no lengths and
    no dropout that only plain eager execution can see and that needs no gradient; None for
    any other call (the caller then takes the checked path, which also raises every error).

    ``plan`` (the one this returned last time, or None) is used when ``x`` has its shape,
    dtype, device and ``time_major``, else a new one is made. It saves the caller's checks,
    the operator's dispatch and the zero states; the engine is still the rule table's for
    this call, asked on every call, and it computes the same bits as the checked path
    (tested): the same engine function on the same inputs. Nothing derived from the weights
    is kept, so every write to them (in place, through ``.data`` or a NumPy view) is seen.
    """
    if not (
        type(x) is Tensor
        and x.is_contiguous()
        and params.is_contiguous()
        and not (torch.is_grad_enabled() and (x.requires_grad or params.requires_grad))
        and not torch.is_autocast_enabled(x.device.type)
        and route(False, torch.compiler.is_compiling(), params, x) is Route.DIRECT
    ):
        return None
    if (
        plan is None
        or x.shape != plan.shape
        or time_major is not plan.time_major
        or x.dtype != plan.call.dtype
        or x.device != plan.call.device
        or params.shape != plan.params_shape
        or params.dtype != x.dtype
        or params.device != x.device
    ):
        plan = _new_plan(spec, params, x, time_major)
        if plan is None:
            return None
    xt = x if time_major else x.transpose(0, 1).contiguous()
    *_, out = _engine_forward(
        params,
        xt,
        plan.h0,
        plan.c0,
        None,
        None,
        static_of(spec),
        0.0,
        0,
        False,
        False,
        True,
        plan.call,
    )
    assert out is not None  # (a plan is made for a non-empty batch only)
    y, hy, cy = _finished(out, plan.c0 is not None)
    return plan, ((y if time_major else y.transpose(0, 1)), hy, cy)


def _new_plan(spec: RNNSpec, params: Tensor, x: Tensor, time_major: bool) -> EagerPlan | None:
    """A plan for calls like this one, or None where the checked path must see it (shapes,
    dtypes or devices it would refuse, or an empty batch)."""
    if x.dim() != 3 or x.shape[-1] != spec.input_size or x.dtype != params.dtype:
        return None
    steps, batch = (int(x.shape[0]), int(x.shape[1]))
    if not time_major:
        steps, batch = batch, steps
    layout = _layout(static_of(spec))
    if steps == 0 or batch == 0 or params.shape != (layout.size,) or params.device != x.device:
        return None
    call = Call(layout, x.device, x.dtype, steps, batch, False, False, False)
    h0 = x.new_zeros(spec.num_states, batch, spec.output_units)
    c0 = x.new_zeros(spec.num_states, batch, spec.num_units) if spec.mode == CUDNN_LSTM else None
    return EagerPlan(call, x.shape, time_major, params.shape, h0, c0)


class Route(enum.Enum):
    """How :func:`rnn` reaches the engine. Every route runs the operator's one implementation
    (:func:`_forward_impl`: the rule table's engine, then the backward's): through the
    dispatcher wherever anything but plain eager execution could see the call, called directly
    where nothing else can (the same engine, the same bits, without the dispatcher's round
    trip, which is half the cost of a tiny call)."""

    #: No gradient, plain eager: the implementation, called directly.
    DIRECT = "direct"
    #: Gradient, plain eager: torch's C ``apply`` of :class:`_RNNFunction`, whose forward and
    #: backward call the implementations directly (no argument binding, no dispatch).
    DIRECT_GRAD = "direct_grad"
    #: ``torch.onnx.export`` (either exporter): standard ONNX nodes (:mod:`cudnn_rnn.export`).
    ONNX = "onnx"
    #: ``torch.jit.trace``: the operator, so that the trace records (and saves) it.
    TRACE = "trace"
    #: Gradient under a ``torch.func`` transform, a mode or a tensor subclass: the Function.
    FUNCTION = "function"
    #: Everything else (compiled, exported, no gradient under a mode): the operator.
    OP = "op"


def route(need_grad: bool, traced: bool, *tensors: Tensor | None) -> Route:
    """The one rule that picks a call's :class:`Route` from what the call needs and what
    watches it (``traced``: ``torch.compile`` or ``torch.export``; ``tensors``: the call's),
    never from timing. The lengths were checked once by :func:`rnn`'s caller; a call through
    the dispatcher checks them on entry (a graph does not check the values it was traced
    with), and no backward checks them again."""
    if not traced and (_direct(*tensors) if need_grad else _plain_eager(*tensors)):
        return Route.DIRECT_GRAD if need_grad else Route.DIRECT
    if export.onnx_exporting(traced):
        return Route.ONNX
    if not traced and torch._C._get_tracing_state() is not None:
        return Route.TRACE
    return Route.FUNCTION if need_grad else Route.OP


def rnn(
    spec: RNNSpec,
    params: Tensor,
    x: Tensor,
    h0: Tensor,
    c0: Tensor | None,
    lengths: Tensor | None,
    *,
    training: bool,
    seed: int,
    dropout_step: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """The stack over time-major ``x`` through the operator; ``(y, h_n, c_n or None)``.

    Arguments are checked by the caller (``lengths``: an int64 tensor ``[B]``). With dropout
    active (``training``, ``p > 0``, more than one layer) the masks come from ``seed`` and
    ``dropout_step``, which is then advanced by one. Traced by ``torch.onnx.export``, the call
    is standard ONNX nodes instead, without dropout (:mod:`cudnn_rnn.export`); traced by
    ``torch.jit.trace``, it is the operator (not a Python function), so the trace can be saved.
    """
    dropout = spec.dropout if training and spec.num_layers > 1 else 0.0
    # The counter (a CPU tensor) reaches the operator only where a call draws masks: a graph
    # with a CPU input is not captured in a CUDA graph (torch.compile's "reduce-overhead").
    step = dropout_step if dropout else None
    static = static_of(spec)
    need_grad = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (params, x, h0, c0)
    )
    traced = torch.compiler.is_compiling()
    lstm = spec.mode == CUDNN_LSTM
    way = route(need_grad, traced, params, x, h0, c0, lengths, step)
    out: Any
    if way is Route.ONNX:
        return export.onnx_rnn(spec, params, x, h0, c0, lengths, traced)
    if way is Route.DIRECT:
        with _no_autocast(x.device):
            *_, done = _engine_forward(
                params, x, h0, c0, lengths, step, static, dropout, seed, False, False, True
            )
            out = (
                _finished(done, lstm)
                if done is not None
                else _forward_impl(
                    params, x, h0, c0, lengths, step, static, dropout, seed, False, False, True
                )
            )
    elif way is Route.DIRECT_GRAD:
        out = _APPLY(  # type: ignore[no-untyped-call]
            params, x, h0, c0, lengths, step, static, dropout, seed, traced
        )
    elif way is Route.FUNCTION:
        out = _RNNFunction.apply(  # type: ignore[no-untyped-call]
            params, x, h0, c0, lengths, step, static, dropout, seed, traced
        )
    else:
        # Route.OP or Route.TRACE. A trace is one graph for grad mode and no_grad
        # (torch.jit.trace checks it under no_grad): it keeps what the backward needs where
        # an input requires grad, whatever the grad mode.
        keep = need_grad or (
            way is Route.TRACE
            and any(t is not None and t.requires_grad for t in (params, x, h0, c0))
        )
        out = _rnn_op(params, x, h0, c0, lengths, step, *static, dropout, seed, keep, traced)
    y, hy, cy = out[0], out[1], (out[2] if lstm else None)
    if dropout and dropout_step is not None:
        with torch.no_grad():
            dropout_step.add_(1)
    return y, hy, cy
