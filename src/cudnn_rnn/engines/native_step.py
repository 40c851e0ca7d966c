"""One unidirectional layer on the native engine, planned once: the cells' steps and a layer's
repeated calls without gradient.

A cell stepped in a Python loop (an attention decoder, greedy search) is latency bound: at B 1
the engine's arithmetic is a few microseconds, and the general path (:func:`.native.forward`,
:func:`.native.backward`: a stack of layers over time, with lengths, dropout and a workspace of
any layout) spent several times that in Python on every call (issue 48). A :class:`StepPlan`
fills the C library's argument records once per buffer and batch (sizes, the weights' and biases'
addresses in the buffer) and each call sets only the addresses of its own tensors. A layer's call
without state, lengths, dropout or gradient (a tiny model's is mostly such overhead) takes the
same plan over its steps (:meth:`StepPlan.sequence`).

It makes the same calls on the same numbers as the general path, so the same bits (tested): the
loop of one step (``cr_forward``; the output ``y`` and ``h_n`` are one tensor, which for one step
hold the same values), its backward (``cr_backward``, with the step's gradient as ``dy`` and no
``dh_n``: C adds the two, and ``x + 0`` is ``x``) and the weight gradients' products
(``cr_gemm``: :func:`~cudnn_rnn.engines.common.recurrent_grads` and
:func:`~cudnn_rnn.engines.common.input_grads`' calls, on the same operands), the backward and
its products in one C call (``cr_chain``: each Python-to-C call costs more than a B 1 product).
What differs is where the workspace lives: the gates (and the LSTM's cell state or the GRU's
``ghn``) in tensors of their own, and their gradients in new ones, so a second backward through
a step reads what the forward left (no forward again).

The weights are read where they are, at every call: an edit in place is seen. A plan holds the
buffer it was made for (its addresses stay valid while the plan lives); the caller makes a new
plan when the buffer or the batch changes. Scope: what :func:`.native.supports` takes, for cuDNN's
four modes (no variant), one layer, one direction, no projection.
"""

from __future__ import annotations

from ctypes import addressof
from typing import NamedTuple

import torch
from torch import Tensor

from cudnn_rnn.core.constants import CUDNN_GRU, CUDNN_LSTM
from cudnn_rnn.core.layout import Layout
from cudnn_rnn.engines.native_library import (
    MODE_CODES,
    _BackwardArgs,
    _call,
    _ChainArgs,
    _ForwardArgs,
    _GemmArgs,
)

__all__ = ["StepGrads", "StepPlan", "StepSaved"]


class StepSaved(NamedTuple):
    """What a step with a gradient keeps for its backward, besides its inputs and ``h_1``: the
    gates (as the general workspace keeps them) and the LSTM's cell state or the GRU's ``ghn``
    (None for the RNN modes)."""

    gates: Tensor
    extra: Tensor | None


class StepGrads(NamedTuple):
    """A step's gradients; None where not asked for (and the biases' without biases)."""

    dx: Tensor | None
    dh0: Tensor
    dc0: Tensor | None
    dw_ih: Tensor | None
    dw_hh: Tensor | None
    db_ih: Tensor | None
    db_hh: Tensor | None


class StepPlan:
    """The native engine's calls for one buffer (``flat``, of ``layout``: one layer, one
    direction, a cuDNN mode), one batch size and one number of steps: a step with or without
    its backward (one step: a cell's), or a sequence without gradient (a layer's call).

    The caller hands CPU float32 tensors of the plan's sizes, C-contiguous: ``x [B, I]`` (a
    sequence's ``[T, B, I]``), states ``[B, H]``; it checked them (the cells' path and the
    planned call do). The plan's own checks are the C
    library's (sizes and pointers).
    """

    __slots__ = (
        "_bw", "_fw", "_w_ih", "base", "batch", "flat", "gates", "input_size", "mode", "steps",
        "units",
    )  # fmt: skip

    def __init__(self, layout: Layout, flat: Tensor, batch: int, steps: int = 1) -> None:
        spec = layout.spec
        assert spec.num_layers == 1 and spec.num_dirs == 1 and spec.num_proj is None
        assert spec.variant.is_cudnn and flat.is_contiguous() and flat.dtype == torch.float32
        self.flat, self.batch, self.mode, self.steps = flat, batch, spec.mode, steps
        self.units, self.input_size = spec.num_units, spec.input_size
        self.gates = spec.num_gates
        f = layout.fused[0]
        assert f.w_ih is not None  # (the cells have input weights)
        base = self.base = flat.data_ptr()
        gru = spec.mode == CUDNN_GRU
        h, gh = self.units, self.gates * self.units
        self._w_ih = base + 4 * f.w_ih.offset
        w_hh, b_ih, b_hh = (base + 4 * b.offset for b in (f.w_hh, f.b_ih, f.b_hh))
        fw = _ForwardArgs(
            mode=MODE_CODES[spec.mode], steps=steps, batch=batch, units=h, gi_st=batch * gh,
            gi_sb=gh, y_st=batch * h, y_sb=h, input_size=self.input_size,
        )  # fmt: skip
        # As native.forward: LSTM and RNN add both biases to the input term, the GRU's bR
        # sits inside r * (...).
        fw.bi, fw.bi2 = b_ih, (None if gru else b_hh)
        fw.w, fw.r, fw.br = self._w_ih, w_hh, (b_hh if gru else None)
        self._fw = fw
        bw = _BackwardArgs(
            mode=MODE_CODES[spec.mode], steps=1, batch=batch, units=h, dy_st=batch * h,
            dy_sb=h, hout_rs=h,
        )  # fmt: skip
        bw.r = w_hh
        self._bw = bw

    def sequence(
        self, x: Tensor, h0: Tensor, c0: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """No gradient, the plan's steps: ``(y [T, B, H], h_n [1, B, H], c_n or None)`` from
        ``x [T, B, I]`` and states ``[B, H]`` (a layer's call with zero states, lengths and
        dropout: :func:`~cudnn_rnn.operator.routes.planned_call`'s)."""
        a = _ForwardArgs.from_buffer_copy(self._fw)
        a.threads = torch.get_num_threads()
        y = x.new_empty(self.steps, self.batch, self.units)
        hn = x.new_empty(1, self.batch, self.units)
        a.x, a.h0, a.y, a.hn = x.data_ptr(), h0.data_ptr(), y.data_ptr(), hn.data_ptr()
        cn = None
        if c0 is not None:
            cn = x.new_empty(1, self.batch, self.units)
            a.c0, a.cn = c0.data_ptr(), cn.data_ptr()
        _call("cr_forward", a)
        return y, hn, cn

    def forward(
        self, x: Tensor, h0: Tensor, c0: Tensor | None, keep: bool
    ) -> tuple[Tensor, Tensor | None, StepSaved | None]:
        """One step (a plan of one): ``(h_1, c_1 or None, what the backward needs or None)``;
        ``keep``: for a backward."""
        a = _ForwardArgs.from_buffer_copy(self._fw)  # (a call's own: C runs without the GIL)
        a.threads = torch.get_num_threads()
        h1 = x.new_empty(self.batch, self.units)
        a.x, a.h0 = x.data_ptr(), h0.data_ptr()
        a.y = a.hn = h1.data_ptr()
        c1 = None
        if c0 is not None:
            c1 = x.new_empty(self.batch, self.units)
            a.c0, a.cn = c0.data_ptr(), c1.data_ptr()
        saved = None
        if keep:
            gates = x.new_empty(self.batch, self.gates * self.units)
            extra = x.new_empty(self.batch, self.units) if self.gates > 1 else None
            a.ws_gates = gates.data_ptr()
            a.ws_extra = None if extra is None else extra.data_ptr()
            saved = StepSaved(gates, extra)
        _call("cr_forward", a)
        return h1, c1, saved

    def backward(
        self,
        x: Tensor,
        h0: Tensor,
        c0: Tensor | None,
        h1: Tensor,
        saved: StepSaved,
        dh1: Tensor,
        dc1: Tensor | None,
        need: tuple[bool, bool, bool],
    ) -> StepGrads:
        """The gradients from ``dh1`` (and the LSTM's ``dc1``, None: zero), contiguous;
        ``need``: ``(dx, the weights', the biases')``."""
        need_dx, need_w, need_b = need
        threads = torch.get_num_threads()
        b = _BackwardArgs.from_buffer_copy(self._bw)
        b.threads = threads
        batch, h, gh = self.batch, self.units, self.gates * self.units
        gru, lstm = self.mode == CUDNN_GRU, self.mode == CUDNN_LSTM
        dgi = x.new_empty(batch, gh)
        dghn = x.new_empty(batch, h) if gru else None
        dh0 = x.new_empty(batch, h)
        dc0 = x.new_empty(batch, h) if lstm else None
        b.gates = saved.gates.data_ptr()
        b.extra = None if saved.extra is None else saved.extra.data_ptr()
        b.hout, b.h0 = h1.data_ptr(), h0.data_ptr()
        b.c0 = None if c0 is None else c0.data_ptr()
        b.dy, b.dcy = dh1.data_ptr(), (None if dc1 is None else dc1.data_ptr())
        b.dgi, b.dghn = dgi.data_ptr(), (None if dghn is None else dghn.data_ptr())
        b.dh0, b.dc0 = dh0.data_ptr(), (None if dc0 is None else dc0.data_ptr())
        g, i, hp = dgi.data_ptr(), self.input_size, h0.data_ptr()
        # The products after the backward, in cr_chain's one call: the records that
        # engines/common.py's recurrent_grads and input_grads make, on the same operands.
        products: list[_GemmArgs] = []
        dw_ih = dw_hh = db_ih = db_hh = dx = None
        if need_w or need_b:
            dw_hh = x.new_empty(gh, h) if need_w else None
            db_ih = x.new_empty(gh) if need_b else None
            db_hh = x.new_empty(gh) if need_b else None
            n, w = (h, dw_hh.data_ptr()) if dw_hh is not None else (0, 0)
            bi = 0 if db_ih is None else db_ih.data_ptr()
            bh = 0 if db_hh is None else db_hh.data_ptr()
            # dR = dgi^T h0 with the biases' column sums; the GRU's candidate third from
            # dghn (its rows of dR and bR at an offset), and bW's sums over all of dgi.
            if gru:
                assert dghn is not None
                products.append(_sums(threads, batch, 2 * h, g, gh, hp, n, w, bh))
                products.append(_sums(
                    threads, batch, h, dghn.data_ptr(), h, hp, n, w and w + 4 * 2 * h * h,
                    bh and bh + 4 * 2 * h,
                ))  # fmt: skip
                if bi:
                    products.append(_sums(threads, batch, gh, g, gh, 0, 0, 0, bi))
            else:  # bR's gradient is bW's: the same sums again, so the same bits
                products.append(_sums(threads, batch, gh, g, gh, hp, n, w, bi))
                if bh:
                    products.append(_sums(threads, batch, gh, g, gh, 0, 0, 0, bh))
        if need_w:  # dW = dgi^T x
            dw_ih = x.new_empty(gh, i)
            products.append(_sums(threads, batch, gh, g, gh, x.data_ptr(), i, dw_ih.data_ptr(), 0))
        if need_dx:  # dx = dgi W (W where it is in the buffer)
            dx = x.new_empty(batch, i)
            products.append(
                _GemmArgs(0, batch, i, gh, g, gh, self._w_ih, i, dx.data_ptr(), i, 0, None, threads)
            )
        records = (_GemmArgs * len(products))(*products)
        _call("cr_chain", _ChainArgs(addressof(b), addressof(records), len(products)))
        return StepGrads(dx, dh0, dc0, dw_ih, dw_hh, db_ih, db_hh)


def _sums(
    threads: int, k: int, m: int, a: int, lda: int, b: int, n: int, c: int, colsum: int
) -> _GemmArgs:
    """The ``cr_gemm`` record of ``c = A^T @ b`` (``n`` columns; 0: none) and ``colsum``
    ``A``'s column sums (0: none): sums over ``k`` rows, ``A``'s ``m`` columns at address ``a``
    with row stride ``lda``, ``b [k, n]``, ``c [m, n]`` (addresses)."""
    return _GemmArgs(
        1, m, n, k, a, lda, b if n else None, n, c if n else None, n, 0, colsum or None, threads
    )  # fmt: skip
