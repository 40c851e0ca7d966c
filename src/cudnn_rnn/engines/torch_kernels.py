"""The ``torch`` engine: a cuDNN RNN's forward pass on torch's fused kernels (inference only).

The kernels are the ones ``torch.nn.LSTM/GRU/RNN`` run (native or oneDNN on CPU, cuDNN on CUDA).
They take per pseudo-layer ``[w_ih, w_hh, b_ih, b_hh(, w_hr)]`` with the gates stacked in cuDNN's
order, and their GRU puts ``b_hn`` inside the reset product like cuDNN, so the math is cuDNN's.
We hand them views into the opaque buffer (see :mod:`cudnn_rnn.core.layout`): no copy of the
parameters on the hot path.

What torch's kernels do not do, this module adds around them:

* ``skip_input``: layer 0 gets a stacked identity as its input matrix. ``1 * x + 0 * ...`` is
  exact in floating point, so this is the "input added to every gate as is" of cuDNN.
* dropout: torch's kernels draw masks from the global RNG; we run layer by layer instead and
  multiply by the masks the operator drew from the op's seed (:mod:`cudnn_rnn.operator`).
* ``num_proj == num_units``: torch recognises a projection only when h is narrower than c, so the
  cell gets one extra unit whose weights are all zero (its c stays exactly 0 and its projection
  column is 0), which leaves the math unchanged. This one case copies the weights.
* variable lengths: packed sequences, whose semantics are cuDNN's padded mode (outputs past a
  length are 0, final states are the last valid step's, the backward direction starts there).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import _VF, Tensor
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from cudnn_rnn.core.constants import CUDNN_GRU, CUDNN_LSTM, CUDNN_RNN_RELU, CUDNN_RNN_TANH
from cudnn_rnn.core.layout import Layout
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.engines.base import NOTHING, Call, Grads, Inputs, Kept, Outputs, Saved, no_backward

_KERNELS: dict[str, Callable[..., Any]] = {
    CUDNN_LSTM: _VF.lstm,
    CUDNN_GRU: _VF.gru,
    CUDNN_RNN_TANH: _VF.rnn_tanh,
    CUDNN_RNN_RELU: _VF.rnn_relu,
}


def _indices(t: Tensor | None) -> Tensor:
    if t is None:  # pack_padded_sequence(enforce_sorted=False) always sets both permutations
        raise AssertionError("packed sequence without its permutation")
    return t


@dataclass(frozen=True)
class _Plan:
    """What :func:`kernel_weights` needs of a layout, precomputed once per spec."""

    sizes: tuple[int, ...]  # of the blocks in buffer order (they tile it)
    shapes: tuple[tuple[int, ...], ...]
    #: The kernel's weight list as indices into the blocks; -1 for skip_input's identity.
    order: tuple[int, ...]


_PLANS: dict[int, tuple[Layout, _Plan]] = {}


def _plan(layout: Layout) -> _Plan:
    # Keyed by identity (hashing a Layout walks its whole table); the entry keeps it alive.
    hit = _PLANS.get(id(layout))
    if hit is not None and hit[0] is layout:
        return hit[1]
    plan = _make_plan(layout)
    _PLANS[id(layout)] = (layout, plan)
    return plan


def _make_plan(layout: Layout) -> _Plan:
    index = {b: i for i, b in enumerate(layout.blocks)}
    return _Plan(
        tuple(math.prod(b.shape) for b in layout.blocks),
        tuple(b.shape for b in layout.blocks),
        tuple(index[b] if b is not None else -1 for b in layout.kernel_blocks),
    )


def kernel_weights(layout: Layout, params: Tensor) -> list[Tensor]:
    """Per pseudo-layer ``[w_ih, w_hh, b_ih, b_hh(, w_hr)]`` as views into ``params``."""
    plan = _plan(layout)
    split = tuple(t.view(s) for t, s in zip(params.split_with_sizes(plan.sizes), plan.shapes))
    if -1 not in plan.order:
        return [split[i] for i in plan.order]
    spec = layout.spec
    eye = stacked_identity(spec.num_gates, spec.num_units, params)
    return [split[i] if i >= 0 else eye for i in plan.order]


_IDENTITY_CACHE: dict[tuple[int, int, torch.dtype, torch.device], Tensor] = {}


def stacked_identity(gates: int, units: int, like: Tensor) -> Tensor:
    """skip_input's layer-0 input matrix: ``gates`` identities stacked, ``[G*H, H]`` (cached)."""
    key = (gates, units, like.dtype, like.device)
    eye = _IDENTITY_CACHE.get(key)
    if eye is None:
        # A normal tensor even when first made under inference_mode, so training can use it.
        with torch.inference_mode(False):
            eye = torch.eye(units, dtype=like.dtype, device=like.device).repeat(gates, 1)
        _IDENTITY_CACHE[key] = eye
    return eye


def rnn_forward(
    layout: Layout,
    params: Tensor,
    x: Tensor,
    h0: Tensor,
    c0: Tensor | None,
    lengths: Tensor | None,
    masks: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Run the whole stack over time-major ``x`` (the operator's inference path).

    ``lengths`` is a CPU int64 tensor ``[B]`` in ``[1, T]`` or None; ``masks`` the dropout
    masks ``[L-1, T, B, D*Hout]`` for the inputs of layers 1.. or None. Returns ``(outputs,
    h_n, c_n)``, ``c_n`` None for the modes without a cell state.
    """
    spec = layout.spec
    weights = kernel_weights(layout, params)
    padded_cell = spec.num_proj is not None and spec.num_proj == spec.num_units
    if padded_cell:
        assert c0 is not None
        weights, c0 = _add_dead_unit(weights, c0, spec.num_gates, spec.num_units)

    def body(
        data: Tensor, batch_sizes: Tensor | None, h: Tensor, c: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        return _stack(spec, weights, data, batch_sizes, h, c, masks, lengths)

    with _quiet_known_warnings(
        spec, x.device, copies=padded_cell or spec.skip_input or masks is not None
    ):
        y, h_n, c_n = run_packed(x, h0, c0, lengths, body)
    if padded_cell and c_n is not None:
        c_n = c_n[..., : spec.num_units]
    return y, h_n, c_n


#: ``body(data, batch_sizes, h0, c0) -> (outputs, h_n, c_n)`` for :func:`run_packed`.
Body = Callable[
    [Tensor, Tensor | None, Tensor, Tensor | None], tuple[Tensor, Tensor, Tensor | None]
]


def run_packed(
    x: Tensor, h0: Tensor, c0: Tensor | None, lengths: Tensor | None, body: Body
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Run ``body(data, batch_sizes, h0, c0)`` on time-major ``x``, packed when a length < T.

    With packing, ``body`` sees the packed data, its batch sizes and the states in the packed
    (sorted) batch order; its outputs are padded back (exact zeros past each length) and the
    final states returned in the caller's batch order.
    """
    steps = x.shape[0]
    if lengths is None or int(lengths.min()) >= steps:
        return body(x, None, h0, c0)
    packed = pack_padded_sequence(x, lengths, enforce_sorted=False)
    order = (_indices(packed.sorted_indices), _indices(packed.unsorted_indices))
    y, h_n, c_n = body(
        packed.data,
        packed.batch_sizes,
        h0.index_select(1, order[0]),
        c0.index_select(1, order[0]) if c0 is not None else None,
    )
    y = pad_packed_sequence(PackedSequence(y, packed.batch_sizes, *order), total_length=steps)[0]
    return (
        y,
        h_n.index_select(1, order[1]),
        (c_n.index_select(1, order[1]) if c_n is not None else None),
    )


def _stack(
    spec: RNNSpec,
    weights: list[Tensor],
    data: Tensor,
    batch_sizes: Tensor | None,
    h0: Tensor,
    c0: Tensor | None,
    masks: Tensor | None,
    lengths: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """All layers in one kernel call, or layer by layer with the dropout masks in between."""
    if masks is None:
        return _run(
            spec.mode, data, batch_sizes, h0, c0, weights, spec.num_layers, spec.bidirectional
        )
    per_layer = len(weights) // spec.num_layers
    d = spec.num_dirs
    hs, cs = [], []
    for layer in range(spec.num_layers):
        if layer > 0:
            mask = masks[layer - 1]  # drawn in the padded [T, B, F] shape whatever the packing
            if batch_sizes is not None and lengths is not None:
                mask = pack_padded_sequence(mask, lengths, enforce_sorted=False).data
            data = data * mask
        data, h_l, c_l = _run(
            spec.mode,
            data,
            batch_sizes,
            h0[layer * d : (layer + 1) * d],
            c0[layer * d : (layer + 1) * d] if c0 is not None else None,
            weights[layer * per_layer : (layer + 1) * per_layer],
            1,
            spec.bidirectional,
        )
        hs.append(h_l)
        if c_l is not None:
            cs.append(c_l)
    return data, torch.cat(hs), (torch.cat(cs) if cs else None)


def _run(
    mode: str,
    data: Tensor,
    batch_sizes: Tensor | None,
    h0: Tensor,
    c0: Tensor | None,
    weights: Sequence[Tensor],
    num_layers: int,
    bidirectional: bool,
) -> tuple[Tensor, Tensor, Tensor | None]:
    kernel = _KERNELS[mode]
    hx: Any = (h0, c0) if mode == CUDNN_LSTM else h0
    # The kernel's own dropout stays 0 (it would use the global RNG). `train` only tells the
    # kernel to keep what its backward needs, so it follows grad mode -- except while compiling:
    # AOT autograd traces the forward with grad off and still needs those buffers.
    train = torch.is_grad_enabled() or torch.compiler.is_compiling()
    lead = (data,) if batch_sizes is None else (data, batch_sizes)
    tail = (True, num_layers, 0.0, train, bidirectional) + ((False,) if batch_sizes is None else ())
    result = kernel(*lead, hx, list(weights), *tail)
    return result[0], result[1], (result[2] if mode == CUDNN_LSTM else None)


@contextlib.contextmanager
def _quiet_known_warnings(spec: RNNSpec, device: torch.device, copies: bool) -> Iterator[None]:
    """Silence torch's warnings about cases we know of and document (docs/gpu.md).

    On CPU torch warns that oneDNN has no LSTM projection and then uses its own kernel. On CUDA
    it warns when the weights are not the one chunk cuDNN expects, and copies them: that happens
    where this module must build weights (skip_input's identity, num_proj == num_units) or runs
    layer by layer (dropout in training).
    """
    messages = []
    if spec.num_proj is not None and device.type == "cpu":
        messages.append("LSTM with projections is not supported")
    if copies and device.type == "cuda":
        messages.append("RNN module weights are not part of single contiguous chunk")
    if not messages:
        yield
        return
    with warnings.catch_warnings():
        for message in messages:
            warnings.filterwarnings("ignore", message=message)
        yield


def _add_dead_unit(
    weights: list[Tensor], c0: Tensor, gates: int, units: int
) -> tuple[list[Tensor], Tensor]:
    out = []
    for i, w in enumerate(weights):
        if i % 5 == 4:  # w_hr [P, H]: a zero column for the extra unit
            out.append(F.pad(w, (0, 1)))
        else:  # stacked [G*H, ...]: a zero row at the end of every gate block
            blocks = w.reshape(gates, units, -1)
            out.append(F.pad(blocks, (0, 0, 0, 1)).reshape(gates * (units + 1), *w.shape[1:]))
    return out, F.pad(c0, (0, 1))


class TorchKernels:
    """Calls without gradient on torch's kernels: nothing is kept."""

    name = "torch"
    strided_dy = False

    def supports(self, call: Call) -> bool:
        return not call.need_grad

    def kept(self, call: Call) -> Kept:
        return NOTHING

    def forward(self, call: Call, inputs: Inputs) -> Outputs:
        y, hy, cy = rnn_forward(call.layout, *inputs)
        return Outputs(y, hy, cy)

    def backward(
        self, call: Call, saved: Saved, grads: Grads
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        raise no_backward(self.name)


ENGINE = TorchKernels()
