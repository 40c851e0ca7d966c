"""The two operators as ``torch.library`` registers them: schemas, fake implementations, vmap.

::

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

Each schema is inferred from one Python signature: :func:`_rnn_op`'s, and for the backward
that of its implementation (:func:`~cudnn_rnn.operator.implementation._backward_impl`). The fake
implementations make the outputs' shapes from the inputs' (symbolic in a graph: ``torch.export``
keeps time dynamic) and from what the engine says it keeps. The autograd of ``cudnn_rnn::rnn``
is registered by :mod:`cudnn_rnn.operator.autograd`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from cudnn_rnn import engines
from cudnn_rnn.engines.base import Call, Kept
from cudnn_rnn.operator.implementation import (
    ForwardArgs,
    _backward_impl,
    _call,
    _empty,
    _forward_impl,
    _no_autocast,
)


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
            ForwardArgs(
                params, x, h0, c0, lengths, dropout_step,
                (rnn_mode, num_layers, num_units, input_size, num_proj, skip_input, bidirectional),
                dropout, seed, need_grad, traced,
            )
        )  # fmt: skip


@_rnn_op.register_fake
def _rnn_fake(*schema_args: Any) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, list[Tensor]]:
    """The outputs of a call of :func:`_rnn_op` (its arguments, in the schema's order)."""
    args = ForwardArgs.of_schema(schema_args)
    x, h0, c0 = args.x, args.h0, args.c0
    call = _call(args.static, x, args.need_grad, args.lengths, args.traced, args.dropout)
    spec = call.spec
    kept = engines.engine_for(call).kept(call)
    y = x.new_empty(call.steps, call.batch, spec.output_width)
    cy = c0.new_empty(c0.shape) if c0 is not None else _empty(x)
    # Lengths only the kernel knows (oneDNN's workspaces, cuDNN's reserve) are data-dependent.
    reserve = [
        r.make(x, torch.library.get_ctx().new_dynamic_size() if r.shape is None else 0)
        for r in kept.reserve
    ]
    size = kept.workspace
    workspace = x.new_empty(torch.library.get_ctx().new_dynamic_size() if size is None else size)
    return y, h0.new_empty(h0.shape), cy, _masks_like(call, kept, x), workspace, reserve


def _masks_like(call: Call, kept: Kept, x: Tensor) -> Tensor:
    """The masks output as the fake makes it: the drawn masks' shape, or empty."""
    if not (kept.masks and call.dropout > 0):
        return _empty(x)
    spec = call.spec
    width = spec.mask_width
    return x.new_empty(spec.num_layers - 1, call.steps, call.batch, width)


#: ``cudnn_rnn::rnn_backward``, whose kernel is the backward's implementation itself.
_rnn_backward_op = torch.library.custom_op("cudnn_rnn::rnn_backward", mutates_args=())(
    _backward_impl
)


@_rnn_backward_op.register_fake
def _rnn_backward_fake(
    params: Tensor, x: Tensor, h0: Tensor, c0: Tensor | None, *_: Any
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The gradients of the first four arguments, shaped as them (the rest shape nothing)."""
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
