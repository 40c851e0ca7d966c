"""The operator's one implementation: from a call's arguments to its engine and back.

Every route runs these functions: through the dispatcher as the kernels of the registered
operators (:mod:`cudnn_rnn.operator.library`), or called directly where nothing but plain eager
execution can see the call (:func:`_plain_eager`, :func:`_direct`), so the bits never depend on
the route. They do what is the same for every engine: check the lengths, draw the dropout masks
for the engines that take them, answer ``batch == 0``, and ask the rule table of
:mod:`cudnn_rnn.engines` for the engine, from what is fixed before the call (spec, device, dtype,
``need_grad``, whether lengths are given, ``traced``: the call is being compiled or exported),
never by timing. Then they call that engine without knowing which it is.

Dropout masks come from ``seed`` and the counter ``dropout_step`` (a 0-d int64 tensor the caller
owns and advances after each call): call ``k`` draws them from
``torch.Generator().manual_seed((seed + k * 0x9E3779B97F4A7C15) mod 2**64)``, layer by layer, as
Bernoulli(1 - p) in float32 of shape ``[T, B, D*Hout]``, scaled by ``1 / (1 - p)``. So the same
seed gives the same masks eagerly and compiled, and the global RNG is never touched. The
``cudnn`` engine seeds cuDNN's own dropout with that same per-call seed instead (its masks differ
from these). Reading the counter is a host read of a 0-d tensor, on the device it lives on.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor

from cudnn_rnn import engines
from cudnn_rnn.core.constants import (
    CUDNN_INPUT_LINEAR_MODE,
    CUDNN_INPUT_SKIP_MODE,
    CUDNN_RNN_BIDIRECTION,
    CUDNN_RNN_UNIDIRECTION,
)
from cudnn_rnn.core.layout import Layout, layout_of
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.core.variant import mode_string, parse_mode_string
from cudnn_rnn.engines.base import Call, Engine, Grads, Inputs, Kept, Outputs, Saved

#: The odd constant that spaces the per-call dropout seeds (2**64 / golden ratio).
GOLDEN = 0x9E3779B97F4A7C15

#: ``(mode, num_layers, num_units, input_size, num_proj or 0, skip_input, bidirectional)``;
#: ``mode`` with its variant where it has one (:func:`cudnn_rnn.core.variant.mode_string`).
Static = tuple[str, int, int, int, int, bool, bool]

#: The ``<spec>`` arguments (a :data:`Static`), in both schemas right after the tensors.
STATIC_ARGS = 7


def static_of(spec: RNNSpec) -> Static:
    return (
        mode_string(spec.mode, spec.variant),
        spec.num_layers,
        spec.num_units,
        spec.input_size,
        spec.num_proj or 0,
        spec.skip_input,
        spec.bidirectional,
    )


@functools.lru_cache(maxsize=256)
def _layout(static: Static) -> Layout:
    text, layers, units, size, proj, skip, bidi = static
    mode, variant = parse_mode_string(text)
    return layout_of(
        RNNSpec(
            mode,
            layers,
            units,
            size,
            CUDNN_INPUT_SKIP_MODE if skip else CUDNN_INPUT_LINEAR_MODE,
            CUDNN_RNN_BIDIRECTION if bidi else CUDNN_RNN_UNIDIRECTION,
            proj or None,
            variant=variant,
        )
    )


class ForwardArgs(NamedTuple):
    """A forward call's arguments as the implementation takes them: ``cudnn_rnn::rnn``'s, in the
    schema's order, with the ``<spec>`` arguments as one :data:`Static`. One record, so that the
    operator, its fake, its autograd and the direct routes pass one thing, not seventeen."""

    params: Tensor
    x: Tensor
    h0: Tensor
    c0: Tensor | None
    lengths: Tensor | None
    dropout_step: Tensor | None
    static: Static
    dropout: float
    seed: int
    need_grad: bool
    traced: bool

    @classmethod
    def of_schema(cls, args: Sequence[Any]) -> ForwardArgs:
        """The record of the operator's flat arguments, as the dispatcher passes them."""
        end = 6 + STATIC_ARGS
        return cls._make((*args[:6], tuple(args[6:end]), *args[end:]))

    def schema(self) -> tuple[Any, ...]:
        """The operator's flat arguments (the ``<spec>`` spread out)."""
        return (*self[:6], *self.static, *self[7:])


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
    shape = (steps, batch, spec.mask_width)
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


# -- the forward -----------------------------------------------------------------------------------


def _setup(
    args: ForwardArgs, planned: Call | None = None
) -> tuple[Call, Engine, Kept, Tensor | None]:
    """The call, the engine the rule table picks for it, what it keeps, and the dropout masks
    drawn for the engines that take them (None otherwise). ``planned``: the call as an
    :class:`~cudnn_rnn.operator.routes.EagerPlan` keeps it (without dropout), which this call
    is."""
    x = args.x
    call = planned or _call(args.static, x, args.need_grad, args.lengths, args.traced, args.dropout)
    if call.dropout > 0:
        call = call._replace(seed=_call_seed(args.seed, args.dropout_step))
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
    args: ForwardArgs, checked: bool, planned: Call | None = None
) -> tuple[Call, Kept, Tensor | None, Outputs | None]:
    """The one place a forward reaches an engine: the call, what its engine keeps, the masks
    drawn for it, and the engine's outputs on contiguous inputs (None for an empty batch,
    which no engine sees). ``checked``: the lengths are a CPU int64 tensor its caller checked
    (:func:`~cudnn_rnn.operator.routes.rnn`'s direct routes); otherwise they are checked here."""
    x = args.x
    cpu_lengths = args.lengths if checked else _check_lengths(args.lengths, int(x.shape[0]))
    call, engine, kept, masks = _setup(args, planned)
    if int(x.shape[1]) == 0:
        return call, kept, masks, None
    inputs = _inputs(args.params, x, args.h0, args.c0, cpu_lengths, masks)
    return call, kept, masks, engine.forward(call, inputs)


def _forward_impl(
    args: ForwardArgs, checked: bool = False
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, list[Tensor]]:
    """The operator's forward: :func:`_engine_forward` with the outputs of the schema."""
    call, kept, masks, out = _engine_forward(args, checked)
    x, h0, c0 = args.x, args.h0, args.c0
    masks_out = masks if masks is not None else _empty(x)
    if out is None:  # as torch.nn: empty outputs and states; what the fake says, with no batch
        spec = call.spec
        y = x.new_empty(int(x.shape[0]), 0, spec.output_width)
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


# -- the backward ----------------------------------------------------------------------------------


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
    """The operator's backward. Its signature is the schema of ``cudnn_rnn::rnn_backward``
    (:mod:`cudnn_rnn.operator.library` registers this function as that operator), and the
    autograd calls it directly where nothing watches: one function, whichever way it is
    reached."""
    static = (rnn_mode, num_layers, num_units, input_size, num_proj, skip_input, bidirectional)
    with _no_autocast(x.device):
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


# -- where the implementation may be called directly -----------------------------------------------

#: The tensor types plain eager execution hands the engine as they are.
PLAIN = (Tensor, torch.nn.Parameter)


def watched() -> bool:
    """Whether something besides plain eager execution sees the calls made now, whatever their
    tensors: a torch function or dispatch mode (fake tensors, FlopCounterMode, ...), the JIT
    tracer or the profiler."""
    return bool(
        torch._C._len_torch_dispatch_stack()
        or torch._C._is_torch_function_mode_enabled()
        or torch._C._get_tracing_state() is not None
        or torch.autograd.profiler._is_profiler_enabled
    )


def _plain_eager(*tensors: Tensor | None) -> bool:
    """Whether nothing but plain eager execution can see a call without gradient: no compiler,
    JIT tracer, torch function or dispatch mode (fake tensors, FlopCounterMode, ...), profiler,
    tensor subclass or torch.func transform (vmap, grad). Then the operator's implementation
    runs directly: the same engine by the same rule, the same bits, without the dispatcher's
    round trip; otherwise every observer sees the one ``cudnn_rnn::rnn`` node."""
    if watched():
        return False
    wrapped = torch._C._functorch.is_functorch_wrapped_tensor
    return all(t is None or (type(t) in PLAIN and not wrapped(t)) for t in tensors)


def _direct(*tensors: Tensor | None) -> bool:
    """Whether a differentiable call may run the operators' implementations directly, inside
    :class:`~cudnn_rnn.operator.autograd._RNNFunction`'s forward and backward, rather than
    through the dispatcher: in plain eager execution (:func:`_plain_eager`) with no
    ``torch.func`` transform active. It is the same engine by the same rule on the same
    tensors, so the same bits (tested), at a fraction of the dispatch cost of a small call; a
    compiler, a mode or a transform sees the operators."""
    return (
        not torch.compiler.is_compiling()  # first: what dynamo traces must see no more
        and not torch._C._are_functorch_transforms_active()
        and _plain_eager(*tensors)
    )
