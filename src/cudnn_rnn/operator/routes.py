"""The one way in: :func:`rnn`, the rule that picks how a call reaches the implementation
(:func:`route`), and the planned call that repeats a layer's zero-state call cheaply.

Every route runs the operator's one implementation (:mod:`cudnn_rnn.operator.implementation`)
on the same tensors, so the bits do not depend on the route: directly in plain eager execution
(the dispatcher's round trip is half the cost of a tiny call), through the dispatcher wherever a
compiler, tracer, mode or transform watches, as standard ONNX nodes under ``torch.onnx.export``.
The lengths are checked once: by :func:`rnn`'s caller (``validation.check_lengths``), or on entry
by a call that comes through the dispatcher (a graph does not check the values it was traced
with); never again in the backward.
"""

from __future__ import annotations

import enum
import functools
from typing import Any, NamedTuple

import torch
from torch import Tensor

from cudnn_rnn import export
from cudnn_rnn.core.constants import CUDNN_LSTM
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.engines import engine_for, native
from cudnn_rnn.engines.base import Call
from cudnn_rnn.engines.native_step import StepPlan
from cudnn_rnn.operator.autograd import _APPLY, _RNNFunction
from cudnn_rnn.operator.implementation import (
    ForwardArgs,
    Static,
    _direct,
    _engine_forward,
    _finished,
    _forward_impl,
    _layout,
    _no_autocast,
    _plain_eager,
    static_of,
)
from cudnn_rnn.operator.library import _rnn_op


class EagerPlan(NamedTuple):
    """What a layer keeps between its calls without state, lengths, dropout or gradient, to
    make the next such call with the same kind of input cheaper (see :func:`planned_call`):
    the call as the rule table sees it, zero initial states (read only, shared by calls) and,
    for one unidirectional cuDNN-mode layer on a CPU float32 buffer, the native engine's
    argument record for the call, filled once (used where the rule table picks that engine)."""

    call: Call
    shape: torch.Size  # of x as the caller passes it
    time_major: bool
    params_shape: tuple[int, ...]
    h0: Tensor
    c0: Tensor | None
    loop: StepPlan | None


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
    if plan.loop is not None and engine_for(plan.call) is native.ENGINE:
        if params.data_ptr() != plan.loop.base:  # a new buffer: its addresses
            plan = plan._replace(loop=_loop(plan.call, params))
        assert plan.loop is not None
        y, hy, cy = plan.loop.sequence(xt, plan.h0, plan.c0)
        return plan, ((y if time_major else y.transpose(0, 1)), hy, cy)
    args = ForwardArgs(
        params, xt, plan.h0, plan.c0, None, None, static_of(spec), 0.0, 0, False, False
    )
    *_, out = _engine_forward(args, True, plan.call)
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
    return EagerPlan(call, x.shape, time_major, params.shape, h0, c0, _loop(call, params))


def _loop(call: Call, params: Tensor) -> StepPlan | None:
    """The native engine's record for ``call`` on ``params`` where it can run it as one loop
    (one unidirectional cuDNN-mode layer with input weights: the same call
    :func:`.native.forward` makes, so the same bits), else None (``skip_input``, whose input
    goes into every gate, takes the engine's general path)."""
    spec = call.layout.spec
    if (
        spec.num_layers * spec.num_dirs != 1
        or call.layout.fused[0].w_ih is None
        or not spec.variant.is_cudnn
        or not native.supports(spec, params.device, params.dtype)
        or not params.is_contiguous()
    ):
        return None
    return StepPlan(call.layout, params, call.batch, call.steps)


@functools.lru_cache(maxsize=64)
def _step_call(static: Static, device: torch.device, dtype: torch.dtype, batch: int) -> Call:
    """The call of one step without gradient, lengths or dropout (a record of fixed sizes:
    the engine is still asked for it at every call)."""
    return Call(_layout(static), device, dtype, 1, batch, False, False, False)


def step(
    static: Static, params: Tensor, x: Tensor, h0: Tensor, c0: Tensor | None, need_grad: bool
) -> tuple[Tensor, Tensor | None]:
    """One time step of a one-layer unidirectional RNN (a cell's call): ``(h_1, c_1 or None)``,
    each ``[B, H]``, from ``x [B, I]`` and states ``[B, H]``, as :func:`rnn` gives them on a
    sequence of one step: the same implementation on the same engine, so the same bits, without
    what a sequence needs and a step does not (lengths, dropout, the choice of a route).

    For a call :func:`route` sends to ``Route.DIRECT`` (``need_grad`` false) or
    ``Route.DIRECT_GRAD`` (grad mode on and a tensor requires grad): nothing but plain eager
    execution sees it. The caller checked the arguments: the spec's sizes, one dtype and device,
    a batch that is not empty, autocast off.
    """
    x3, h3 = x.unsqueeze(0), h0.unsqueeze(0)
    c3 = c0.unsqueeze(0) if c0 is not None else None
    if need_grad:  # Route.DIRECT_GRAD
        out = _APPLY(params, x3, h3, c3, None, None, static, 0.0, 0, False)  # type: ignore[no-untyped-call]
        return out[1][0], (out[2][0] if c0 is not None else None)
    call = _step_call(static, x.device, x.dtype, int(x.shape[0]))  # Route.DIRECT
    args = ForwardArgs(params, x3, h3, c3, None, None, static, 0.0, 0, False, False)
    *_, done = _engine_forward(args, True, call)
    assert done is not None  # (a batch that is not empty)
    cy = done.cy[0].contiguous() if c0 is not None and done.cy is not None else None
    return done.hy[0].contiguous(), cy


class Route(enum.Enum):
    """How :func:`rnn` reaches the engine. Every route runs the operator's one implementation
    (:func:`~cudnn_rnn.operator.implementation._forward_impl`: the rule table's engine, then the
    backward's): through the dispatcher wherever anything but plain eager execution could see
    the call, called directly where nothing else can (the same engine, the same bits, without
    the dispatcher's round trip, which is half the cost of a tiny call)."""

    #: No gradient, plain eager: the implementation, called directly.
    DIRECT = "direct"
    #: Gradient, plain eager: torch's C ``apply`` of ``_RNNFunction``, whose forward and
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
        args = ForwardArgs(params, x, h0, c0, lengths, step, static, dropout, seed, False, False)
        with _no_autocast(x.device):
            *_, done = _engine_forward(args, True)
            out = _finished(done, lstm) if done is not None else _forward_impl(args, True)
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
