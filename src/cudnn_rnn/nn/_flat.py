"""The one opaque buffer behind a module's torch.nn parameters.

torch.nn's parameters of one RNN (``weight_ih_l0``, ``weight_hh_l0``, ``bias_ih_l0``, ...) are,
in cuDNN's gate order, exactly the stacked blocks of our opaque buffer (``Layout.fused``): each
is a contiguous run of it. :func:`flatten` allocates the buffer, copies each parameter's values
into its block and points the parameter at it (``param.data = block``: the same Parameter
object, so an optimizer that holds it keeps working), as torch.nn's cuDNN path keeps its weights
in one flat buffer. The buffer is a plain tensor of the module (not a parameter, not a buffer:
``state_dict`` and DistributedDataParallel see torch.nn's parameters only). A call hands the
buffer to the operator without a copy; :class:`_Gather` routes its gradient back into views, one
per parameter. Blocks no parameter owns (the biases of ``bias=False``) stay zero.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from cudnn_rnn.core.layout import Block, Layout

#: torch.nn's words when its weights are not in one flat buffer (the warning users know).
NOT_FLAT = (
    "RNN module weights are not part of single contiguous chunk of memory. This means they need "
    "to be compacted at every call, possibly greatly increasing memory usage. To compact weights "
    "again call flatten_parameters()."
)


def blocks(layout: Layout, bias: bool) -> list[Block]:
    """The blocks of torch.nn's parameters, in its order (``_flat_weights_names``): per
    pseudo-layer ``w_ih, w_hh[, b_ih, b_hh][, w_hr]``."""
    out: list[Block] = []
    for f in layout.fused:
        assert f.w_ih is not None  # (torch.nn has no skip_input)
        out += [f.w_ih, f.w_hh]
        if bias:
            out += [f.b_ih, f.b_hh]
        if f.w_hr is not None:
            out.append(f.w_hr)
    return out


def view(flat: Tensor, block: Block) -> Tensor:
    n = 1
    for d in block.shape:
        n *= d
    return flat[block.offset : block.offset + n].view(block.shape)


def aliases(flat: Tensor | None, params: Sequence[Tensor], where: Sequence[Block]) -> bool:
    """Whether every parameter is still the view of ``flat`` that :func:`flatten` made."""
    if flat is None:
        return False
    base, size = flat.data_ptr(), flat.element_size()
    dtype, device = flat.dtype, flat.device
    # (The address, shape and contiguity place each parameter's elements inside the buffer,
    # which is alive; whether its storage object is the buffer's own is not asked: it cost
    # more than the rest of a cell's check, about 1 us per parameter.)
    for p, b in zip(params, where):
        if (
            p.data_ptr() != base + b.offset * size
            or p.shape != b.shape
            or p.dtype != dtype
            or p.device != device
            or not p.is_contiguous()
        ):
            return False
    return True


def owned(params: Sequence[object]) -> bool:
    """Whether ``params`` are parameters a module owns (leaf ``nn.Parameter``s), which
    :func:`flatten` may point at its buffer; not a call's own tensors
    (``torch.func.functional_call``, a transform's wrapped tensors, the fake tensors that
    ``torch.compile`` and ``torch.export`` trace with), which it must not touch."""
    if torch.compiler.is_compiling() or torch._C._are_functorch_transforms_active():
        return False
    return all(isinstance(p, torch.nn.Parameter) and p.is_leaf for p in params)


def flatten(params: Sequence[Tensor], layout: Layout, where: Sequence[Block]) -> Tensor:
    """A new buffer holding ``params``' values at their blocks, each parameter pointed at its
    block; the other blocks zero."""
    first = params[0]
    flat = torch.zeros(layout.size, dtype=first.dtype, device=first.device)
    with torch.no_grad():
        for p, b in zip(params, where):
            block = view(flat, b)
            block.copy_(p)
            p.data = block
    return flat


def warn_not_flat() -> None:
    warnings.warn(NOT_FLAT, UserWarning, stacklevel=5)


class _Gather(torch.autograd.Function):
    """``flat`` (whose blocks the parameters are) as the operator's input, with each
    parameter's gradient a view of the buffer's gradient: no copy either way."""

    @staticmethod
    def forward(ctx: Any, flat: Tensor, where: Sequence[Block], *params: Tensor) -> Tensor:
        ctx.where = where
        return flat.view_as(flat)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        return (None, None, *(view(grad, b) for b in ctx.where))


def gathered(flat: Tensor, params: Sequence[Tensor], where: Sequence[Block]) -> Tensor:
    """The buffer as the operator's ``params``, differentiable for ``params``."""
    if not torch.is_grad_enabled() or not any(p.requires_grad for p in params):
        return flat
    return _Gather.apply(flat, tuple(where), *params)  # type: ignore[no-any-return,no-untyped-call]


def traced() -> bool:
    """Whether ``torch.jit.trace`` is recording this call."""
    return torch._C._get_tracing_state() is not None


def for_call(
    flat: Tensor | None,
    params: Sequence[Tensor],
    layout: Layout,
    where: Sequence[Block],
    *,
    warn: bool,
) -> tuple[Tensor, Tensor | None]:
    """The operator's ``params`` for one call of a module whose buffer is ``flat``, and the
    module's buffer after it. The buffer itself, differentiable for ``params`` (no copy), where
    they are its views; made again (once, saying so where ``warn``: torch.nn's warning) where a
    parameter's ``.data`` was reassigned; or one made from ``params`` for this call only where
    they are not the module's to point at it, or where the call is traced (``torch.compile``,
    ``torch.export``, ``torch.jit.trace``: the graph then reads the parameters, not a constant
    copy of them) or under a ``torch.func`` transform."""
    if traced():
        # One graph for grad mode and no_grad (torch.jit.trace checks its trace under no_grad):
        # the buffer requires grad where a parameter does, so the traced operator keeps what a
        # backward needs either way.
        with torch.enable_grad():
            return concatenated(params, layout, where), flat
    if (
        torch.compiler.is_compiling()
        or torch._C._are_functorch_transforms_active()
        or (not aliases(flat, params, where) and not owned(params))
    ):
        return concatenated(params, layout, where), flat
    if not aliases(flat, params, where):
        if warn:
            warn_not_flat()
        flat = flatten(params, layout, where)
    assert flat is not None  # (aliases: a buffer)
    return gathered(flat, params, where), flat


def concatenated(params: Sequence[Tensor], layout: Layout, where: Sequence[Block]) -> Tensor:
    """A buffer made from ``params`` for this call only (they are not the module's flat views:
    ``torch.func.functional_call``, a parameter replaced by a tensor); differentiable."""
    pieces: list[Tensor] = []
    at = 0
    first = params[0]
    for p, b in sorted(zip(params, where), key=lambda pb: pb[1].offset):
        if b.offset > at:
            pieces.append(first.new_zeros(b.offset - at))
        pieces.append(p.reshape(-1))
        # The block's size from the layout: under torch.jit.trace p.numel() is a tensor, and
        # comparing it would fix the sizes in the trace (a TracerWarning); they are constants.
        at = b.offset + math.prod(b.shape)
    if at < layout.size:
        pieces.append(first.new_zeros(layout.size - at))
    return torch.cat(pieces)
