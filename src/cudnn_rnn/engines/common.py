"""What every engine shares: the problem of one call, weight views, lengths and reversal.

An engine computes the whole stack of a spec over a time-major, padded input ``x [T, B, I]``
with optional ``lengths [B]`` (CPU int64, values in ``[1, T]``, cuDNN's padded semantics:
outputs past a length are 0, final states are the last valid step's, the backward direction
starts at the last valid step) and the dropout masks the operator drew
(``[L-1, T, B, D*Hout]``, applied to the input of every layer but the first).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import torch
from torch import Tensor

from cudnn_rnn.core.constants import CUDNN_GRU, CUDNN_LSTM
from cudnn_rnn.core.layout import Block, Layout
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.engines.base import NOTHING, Call, Grads, Kept, Saved


class Weights(NamedTuple):
    """One pseudo-layer's stacked tensors (cuDNN's gate order) as views into the buffer."""

    w: Tensor | None  # [G*H, in]; None under skip_input (layer 0 adds its input to each gate)
    r: Tensor  # [G*H, Hout]
    bw: Tensor  # [G*H]
    br: Tensor  # [G*H]
    proj: Tensor | None  # [P, H] with num_proj


def _view(flat: Tensor, block: Block | None) -> Tensor | None:
    if block is None:
        return None
    n = 1
    for d in block.shape:
        n *= d
    return flat[block.offset : block.offset + n].view(block.shape)


def pseudo_layers(layout: Layout, flat: Tensor) -> list[Weights]:
    """Per pseudo-layer (``layer * D + dir``) views into ``flat`` (the buffer or its gradient)."""
    out = []
    for f in layout.fused:
        r, bw, br = _view(flat, f.w_hh), _view(flat, f.b_ih), _view(flat, f.b_hh)
        assert r is not None and bw is not None and br is not None
        out.append(Weights(_view(flat, f.w_ih), r, bw, br, _view(flat, f.w_hr)))
    return out


@dataclass(frozen=True)
class Problem:
    """The sizes of one call."""

    spec: RNNSpec
    steps: int
    batch: int

    @property
    def features(self) -> int:
        """Width of a layer's output: ``D * Hout``."""
        return self.spec.num_dirs * self.spec.output_units


def active_steps(lengths: Tensor | None, steps: int, device: torch.device) -> Tensor | None:
    """``[T, B, 1]`` bool, True where step ``t`` is inside sequence ``b``; None without lengths."""
    if lengths is None:
        return None
    t = torch.arange(steps, device=device)[:, None]
    return (t < lengths.to(device)[None, :]).unsqueeze(-1)


def reverse_within(x: Tensor, lengths: Tensor | None) -> Tensor:
    """Reverse each time-major sequence within its length; padded steps stay where they are."""
    if lengths is None:
        return x.flip(0)
    steps, batch = int(x.shape[0]), int(x.shape[1])
    t = torch.arange(steps, device=x.device)[:, None]
    n = lengths.to(x.device)[None, :]
    index = torch.where(t < n, n - 1 - t, t)  # [T, B]
    return x[index, torch.arange(batch, device=x.device)[None, :]]


# ---- the workspace of the training engines (``loop`` and ``native``) --------------------------
#
# One buffer of the parameters' dtype, in order: per pseudo-layer ``gates [T, B, G*H]`` (after
# their activations; the plain RNN keeps its new ``h``), ``hseq [T, B, Hout]`` (where the engine
# keeps it: ``hseq=False`` leaves it out), then ``extra [T, B, H]`` (LSTM: the cell state after
# each step; GRU: ``R_h h' + bR_h``, which the reset gate scales); then per layer after the first
# its input ``[T, B, D*Hout]``. Each engine's docstring says in which time order it fills them,
# which state ``hseq`` holds and whether the layer inputs are after dropout.


def _extra(spec: RNNSpec) -> int:
    """Width of the per-step tensor kept besides gates and h (cseq or ghn)."""
    return spec.num_units if spec.mode in (CUDNN_LSTM, CUDNN_GRU) else 0


def _kept_widths(spec: RNNSpec, hseq: bool) -> list[int]:
    """Widths of what one pseudo-layer keeps per step: gates, (hseq), (extra)."""
    widths = [spec.num_gates * spec.num_units] + ([spec.output_units] if hseq else [])
    return widths + ([_extra(spec)] if _extra(spec) else [])


def kept_outputs(spec: RNNSpec) -> int:
    """How many layers' outputs (both directions side by side) the workspace keeps: every layer
    below the last (the next one's input); the last one's too where the directions are merged
    by a sum, product or mean (a variant), which the operator's output no longer shows."""
    return spec.num_layers - 1 + int(spec.merges_directions)


def workspace_numel(spec: RNNSpec, steps: Any, batch: Any, *, hseq: bool = True) -> Any:
    """Length of the workspace (works on symbolic sizes too)."""
    inputs = kept_outputs(spec) * spec.num_dirs * spec.output_units
    return steps * batch * (spec.num_states * sum(_kept_widths(spec, hseq)) + inputs)


class WorkspaceEngine:
    """What the ``loop`` and ``native`` engines share: they keep this workspace when a gradient
    is needed, and their backward functions take the same arguments."""

    name: str
    strided_dy = False

    #: ``(layout, params, x, h0, c0, lengths, masks, ws, y, dy, dhy, dcy) -> (dparams, dx, dh0,
    #: dc0)``: the engine module's backward function.
    _backward: Callable[..., tuple[Tensor, Tensor, Tensor, Tensor | None]]

    def kept(self, call: Call) -> Kept:
        if not call.need_grad:
            return NOTHING
        return Kept(workspace=workspace_numel(call.spec, call.steps, call.batch))

    def backward(
        self, call: Call, saved: Saved, grads: Grads
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        s = saved
        return self._backward(
            call.layout, s.params, s.x, s.h0, s.c0, s.lengths, s.masks, s.workspace, s.y, *grads
        )


def split_workspace(
    ws: Tensor, spec: RNNSpec, steps: int, batch: int, *, hseq: bool = True
) -> tuple[list[list[Tensor]], list[Tensor]]:
    """Views of the workspace: per pseudo-layer [gates, (hseq), (extra)], per kept output
    (:func:`kept_outputs`) one ``[T, B, D * Hout]``."""
    hout, widths = spec.output_units, _kept_widths(spec, hseq)
    n = steps * batch
    per_layer: list[list[Tensor]] = []
    offset = 0
    for _ in range(spec.num_states):
        views = []
        for w in widths:
            views.append(ws[offset : offset + n * w].view(steps, batch, w))
            offset += n * w
        per_layer.append(views)
    inputs = []
    width = spec.num_dirs * hout
    for _ in range(kept_outputs(spec)):
        inputs.append(ws[offset : offset + n * width].view(steps, batch, width))
        offset += n * width
    return per_layer, inputs


def cpu_vendor() -> str:
    """The CPU's vendor string as the kernel reports it (``GenuineIntel``, ``AuthenticAMD``), or
    ``""`` where it cannot be read (not Linux)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return ""


def _mkl_native() -> bool:
    """Whether ``torch.mm`` is MKL on an Intel CPU, where MKL takes its AVX-512 path."""
    mkl = bool(torch.backends.mkl.is_available())  # type: ignore[no-untyped-call]
    return mkl and cpu_vendor() == "GenuineIntel"


#: oneDNN's float32 product on the CPU (``torch.ops.mkldnn._linear_pointwise``: ``a @ w.T``), or
#: None where torch's matmul is the better product or torch is built without oneDNN. MKL, which
#: ``torch.mm`` runs, takes its AVX2 path on AMD CPUs: on a 2-core AMD EPYC with AVX-512 it made
#: the backward's three products at about 200 GFLOP/s against 370-450 for oneDNN. On Intel CPUs
#: it takes its AVX-512 path: on a 2-core Xeon (Emerald Rapids) ``torch.mm`` made them at
#: 186-239 GFLOP/s against 76-213 for oneDNN, whose product of transposed operands reorders
#: them first (docs/design_notes.md). A rule on the machine, fixed at import: every call on one
#: machine takes the same product and repeats its bits at one thread count (not across counts:
#: both split a product's sums by the threads; the native engine has products of its own). Only
#: the loop engine's backward uses it (:data:`TORCH_PRODUCTS`).
_ONEDNN_LINEAR: Any = (
    getattr(torch.ops.mkldnn, "_linear_pointwise", None)
    if torch.backends.mkldnn.is_available() and not _mkl_native()  # type: ignore[no-untyped-call]
    else None
)


def _dense(t: Tensor) -> bool:
    """A matrix or the transpose of one with no gap between rows (oneDNN took 80 s for a
    product whose operand was a slice of a matrix's columns, 0.07 s for the whole matrix)."""
    return t.is_contiguous() or t.t().is_contiguous()


def _onednn(a: Tensor, b: Tensor) -> bool:
    """The rule for :func:`product_t`: oneDNN for CPU float32 operands without gaps."""
    return (
        _ONEDNN_LINEAR is not None
        and a.dtype == torch.float32
        and a.device.type == "cpu"
        and _dense(a)
        and _dense(b)
    )


def product_t(a: Tensor, b: Tensor, add: Tensor | None = None) -> Tensor:
    """``a @ b.T`` (plus ``add``, a contiguous tensor of the result's shape, where given), by
    rule: oneDNN's product where :func:`_onednn` says so, else torch's matmul, which makes the
    sum in ``add`` and returns it (oneDNN returns a new tensor). Either gives the same bits on
    every call."""
    if _onednn(a, b):
        if add is None:
            return _ONEDNN_LINEAR(a, b, None, "none", [], "")  # type: ignore[no-any-return]
        return _ONEDNN_LINEAR.binary(a, add, b, None, "add")  # type: ignore[no-any-return]
    return a @ b.t() if add is None else add.addmm_(a, b.t())


def product_t_into(a: Tensor, b: Tensor, out: Tensor, accumulate: bool = False) -> None:
    """``out = a @ b.T`` (``out += a @ b.T`` with ``accumulate``), ``out`` contiguous, by the
    rule of :func:`product_t`; what oneDNN makes apart is copied in."""
    if not accumulate and not _onednn(a, b):
        torch.mm(a, b.t(), out=out)
        return
    made = product_t(a, b, out if accumulate else None)
    if made.data_ptr() != out.data_ptr():
        out.copy_(made)


def reduce_rows(dst: Tensor, g: Tensor, x: Tensor) -> None:
    """``dst [m, n] = g.T @ x``, a sum over the rows of ``g [rows, m]`` and ``x [rows, n]``.

    oneDNN makes it as ``(x.T @ g).T`` (its fast orientation) into a temporary of ``dst``'s
    size, so it runs only where that temporary is no larger than either operand (``m, n <=
    rows``); otherwise torch's matmul writes ``dst`` in place (a wide RNN over few rows would
    else gain a weight-sized buffer at the peak).
    """
    rows = int(g.shape[0])
    gt, xt = g.t(), x.t()
    if _onednn(xt, gt) and max(int(g.shape[1]), int(x.shape[1])) <= rows:
        dst.copy_(_ONEDNN_LINEAR(xt, gt, None, "none", [], "").t())  # the rule is checked
    else:
        torch.mm(gt, x, out=dst)


class Products(Protocol):
    """The backward's products over all steps: torch's matmul and oneDNN's by rule
    (:data:`TORCH_PRODUCTS`; the loop engine), or the native engine's own, whose bits do not
    depend on the thread count (:mod:`cudnn_rnn.engines.native`)."""

    def sum_rows(
        self, dst: Tensor | None, g: Tensor, x: Tensor | None, colsum: Tensor | None = None
    ) -> None:
        """``dst [m, n] = g.T @ x`` and ``colsum [m] = g.sum(0)``, each where given: sums over
        the rows of ``g [rows, m]`` and ``x [rows, n]``."""

    def times(self, a: Tensor, w: Tensor, out: Tensor | None, accumulate: bool = False) -> Tensor:
        """``a [rows, k] @ w [k, n]``, into ``out`` (contiguous) where given, added to it with
        ``accumulate``; returns the product (``out`` where given)."""
        ...


class _TorchProducts:
    """torch's matmul, or oneDNN's where :func:`_onednn` says so (:func:`reduce_rows`,
    :func:`product_t`); each repeats its bits, but MKL and oneDNN split a product's sums
    across threads differently for different thread counts."""

    def sum_rows(
        self, dst: Tensor | None, g: Tensor, x: Tensor | None, colsum: Tensor | None = None
    ) -> None:
        if dst is not None:
            assert x is not None
            reduce_rows(dst, g, x)
        if colsum is not None:
            torch.sum(g, dim=0, out=colsum)

    def times(self, a: Tensor, w: Tensor, out: Tensor | None, accumulate: bool = False) -> Tensor:
        if out is None:
            return product_t(a, w.t())
        product_t_into(a, w.t(), out, accumulate)
        return out


TORCH_PRODUCTS: Products = _TorchProducts()


def weight_grads(
    spec: RNNSpec,
    wt: Weights,
    gw: Weights,
    u: Tensor,
    h_prev: Tensor,
    dgi: Tensor,
    dghn: Tensor | None,
    into: Tensor | None = None,
    need_du: bool = True,
    products: Products = TORCH_PRODUCTS,
) -> Tensor | None:
    """One direction's weight gradients into ``gw`` as GEMMs over all steps; returns ``du``
    (added to ``into``, a contiguous ``[T, B, in]``, where given: the other direction's, which
    then needs no second buffer); None without ``need_du`` (nothing wants the input's
    gradient: its product is not made).

    ``dgi [T, B, G*H]`` is the gradient of the gates' pre-activations, ``h_prev [T, B, Hout]``
    the state each step started from and ``u [T, B, in]`` the direction's input, all three in
    the same order of rows. The two halves, :func:`recurrent_grads` and :func:`input_grads`,
    can also be called apart (the native engine frees ``h_prev`` between them).
    """
    recurrent_grads(spec, gw, h_prev, dgi, dghn, products)
    return input_grads(spec, wt, gw, u, dgi, into, need_du, products)


def recurrent_grads(
    spec: RNNSpec,
    gw: Weights,
    h_prev: Tensor,
    dgi: Tensor,
    dghn: Tensor | None,
    products: Products = TORCH_PRODUCTS,
    candidate_h: Tensor | None = None,
) -> None:
    """The gradients of ``R`` and both biases (see :func:`weight_grads`). ``R h' + bR`` has the
    same gradient as ``dgi`` except in the GRU's candidate third, which the reset gate scales:
    that third comes from ``dghn [T, B, H]``. ``candidate_h``: what the candidate's rows of
    ``R`` multiply where it is not ``h_prev`` (``r * h_prev``, the reset gate before the
    product)."""
    units, g_all = spec.num_units, spec.num_gates * spec.num_units
    rows = int(dgi.shape[0]) * int(dgi.shape[1])
    flat_h = h_prev.reshape(rows, -1)
    flat_gi = dgi.reshape(rows, g_all)
    if dghn is not None:  # GRU: r and u rows from dgi, the candidate's from dghn
        flat_n = dghn.reshape(rows, units)
        flat_c = flat_h if candidate_h is None else candidate_h.reshape(rows, -1)
        ru = slice(None, 2 * units)
        products.sum_rows(gw.r[ru], flat_gi[:, ru], flat_h, gw.br[ru])
        products.sum_rows(gw.r[2 * units :], flat_n, flat_c, gw.br[2 * units :])
        products.sum_rows(None, flat_gi, None, gw.bw)
    else:  # both biases sit in every gate's sum: the same gradient
        products.sum_rows(gw.r, flat_gi, flat_h, gw.bw)
        gw.br.copy_(gw.bw)


def input_grads(
    spec: RNNSpec,
    wt: Weights,
    gw: Weights,
    u: Tensor,
    dgi: Tensor,
    into: Tensor | None = None,
    need_du: bool = True,
    products: Products = TORCH_PRODUCTS,
) -> Tensor | None:
    """The gradient of ``W`` into ``gw`` and the returned ``du`` (see :func:`weight_grads`)."""
    units, g_all = spec.num_units, spec.num_gates * spec.num_units
    rows = int(dgi.shape[0]) * int(dgi.shape[1])
    flat_gi = dgi.reshape(rows, g_all)
    if gw.w is None:  # skip_input: the input was added to every gate
        if not need_du:
            return None
        du = dgi.view(dgi.shape[0], dgi.shape[1], spec.num_gates, units).sum(2)
        return du if into is None else into.add_(du)
    assert wt.w is not None
    products.sum_rows(gw.w, flat_gi, u.reshape(rows, -1))
    if not need_du:
        return None
    add = None if into is None else into.view(rows, -1)
    du = products.times(flat_gi, wt.w, add, accumulate=add is not None)
    return du.view(dgi.shape[0], dgi.shape[1], -1)
