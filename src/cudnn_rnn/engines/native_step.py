"""One step of one unidirectional layer on the native engine, planned once: the cells' calls.

A cell stepped in a Python loop (an attention decoder, greedy search) is latency bound: at B 1
the engine's arithmetic is a few microseconds, and the general path (:func:`.native.forward`,
:func:`.native.backward`: a stack of layers over time, with lengths, dropout and a workspace of
any layout) spent several times that in Python on every call (issue 48). A :class:`StepPlan`
fills the C library's argument records once per buffer and batch (sizes, the weights' and biases'
addresses in the buffer) and each call sets only the addresses of its own tensors.

It makes the same calls on the same numbers as the general path, so the same bits (tested): the
loop of one step (``cr_forward``; the output ``y`` and ``h_n`` are one tensor, which for one step
hold the same values), its backward (``cr_backward``, with the step's gradient as ``dy`` and no
``dh_n``: C adds the two, and ``x + 0`` is ``x``) and the weight gradients' products
(``cr_gemm``: :func:`~cudnn_rnn.engines.common.recurrent_grads` and
:func:`~cudnn_rnn.engines.common.input_grads`' calls, on the same operands). What differs is
where the workspace lives: the gates (and the LSTM's cell state or the GRU's ``ghn``) in tensors
of their own, and their gradients in new ones, so a second backward through a step reads what the
forward left (no forward again).

The weights are read where they are, at every call: an edit in place is seen. A plan holds the
buffer it was made for (its addresses stay valid while the plan lives); the caller makes a new
plan when the buffer or the batch changes. Scope: what :func:`.native.supports` takes, for cuDNN's
four modes (no variant), one layer, one direction, no projection.
"""

from __future__ import annotations

import ctypes
from typing import NamedTuple

import torch
from torch import Tensor

from cudnn_rnn.core.constants import CUDNN_GRU, CUDNN_LSTM
from cudnn_rnn.core.layout import Layout
from cudnn_rnn.engines.native_library import (
    _CODES,
    MODE_CODES,
    _BackwardArgs,
    _ForwardArgs,
    _GemmArgs,
    _library,
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


def _run(fn_name: str, args: ctypes.Structure) -> None:
    lib = _library().lib
    assert lib is not None  # (a plan is made only where the engine is loaded)
    rc = getattr(lib, fn_name)(ctypes.byref(args))
    if rc == 1:
        raise MemoryError(f"cudnn_rnn native engine: {fn_name} ran out of memory")
    if rc != 0:
        what = _CODES.get(rc, f"returned {rc}")
        raise RuntimeError(f"cudnn_rnn native engine: {fn_name} {what} (a bug: please report it)")


class StepPlan:
    """The native engine's one-step calls for one buffer (``flat``, of ``layout``: one layer,
    one direction, a cuDNN mode) and one batch size.

    The caller hands CPU float32 tensors of the plan's sizes, C-contiguous: ``x [B, I]``, states
    ``[B, H]``; it checked them (the cells' path does). The plan's own checks are the C
    library's (sizes and pointers).
    """

    __slots__ = (
        "_b",
        "_bw",
        "_fw",
        "_w_hh",
        "_w_ih",
        "batch",
        "flat",
        "gates",
        "input_size",
        "mode",
        "units",
    )  # fmt: skip

    def __init__(self, layout: Layout, flat: Tensor, batch: int) -> None:
        spec = layout.spec
        assert spec.num_layers == 1 and spec.num_dirs == 1 and spec.num_proj is None
        assert spec.variant.is_cudnn and flat.is_contiguous() and flat.dtype == torch.float32
        self.flat, self.batch, self.mode = flat, batch, spec.mode
        self.units, self.input_size = spec.num_units, spec.input_size
        self.gates = spec.num_gates
        f = layout.fused[0]
        assert f.w_ih is not None  # (the cells have input weights)
        base = flat.data_ptr()
        gru = spec.mode == CUDNN_GRU
        h, gh = self.units, self.gates * self.units
        self._w_ih = base + 4 * f.w_ih.offset
        self._w_hh = base + 4 * f.w_hh.offset
        self._b = (base + 4 * f.b_ih.offset, base + 4 * f.b_hh.offset)
        fw = _ForwardArgs(
            mode=MODE_CODES[spec.mode], steps=1, batch=batch, units=h, gi_st=batch * gh,
            gi_sb=gh, y_st=batch * h, y_sb=h, input_size=self.input_size,
        )  # fmt: skip
        # As native.forward: LSTM and RNN add both biases to the input term, the GRU's bR
        # sits inside r * (...).
        fw.bi, fw.bi2 = self._b[0], (None if gru else self._b[1])
        fw.w, fw.r, fw.br = self._w_ih, self._w_hh, (self._b[1] if gru else None)
        self._fw = fw
        bw = _BackwardArgs(
            mode=MODE_CODES[spec.mode], steps=1, batch=batch, units=h, dy_st=batch * h,
            dy_sb=h, hout_rs=h,
        )  # fmt: skip
        bw.r = self._w_hh
        self._bw = bw

    def forward(
        self, x: Tensor, h0: Tensor, c0: Tensor | None, keep: bool
    ) -> tuple[Tensor, Tensor | None, StepSaved | None]:
        """``(h_1, c_1 or None, what the backward needs or None)``; ``keep``: for a backward."""
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
        _run("cr_forward", a)
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
        _run("cr_backward", b)
        dw_ih = dw_hh = db_ih = db_hh = dx = None
        g = dgi.data_ptr()
        if need_w or need_b:
            dw_hh = x.new_empty(gh, h) if need_w else None
            db_ih = x.new_empty(gh) if need_b else None
            db_hh = x.new_empty(gh) if need_b else None
            # recurrent_grads: dR = dgi^T h0 with the biases' column sums; the GRU's
            # candidate third from dghn, and bW's sums over all of dgi.
            if gru:
                self._gemm(1, 2 * h, h, g, gh, h0, dw_hh, 0, db_hh, 0, threads)
                assert dghn is not None
                self._gemm(1, h, h, dghn.data_ptr(), h, h0, dw_hh, 2 * h * h, db_hh, 2 * h, threads)
                self._gemm(1, gh, 0, g, gh, None, None, 0, db_ih, 0, threads)
            else:
                self._gemm(1, gh, h, g, gh, h0, dw_hh, 0, db_ih, 0, threads)
                if db_hh is not None and db_ih is not None:
                    db_hh.copy_(db_ih)
        if need_w:  # input_grads: dW = dgi^T x
            dw_ih = x.new_empty(gh, self.input_size)
            self._gemm(1, gh, self.input_size, g, gh, x, dw_ih, 0, None, 0, threads)
        if need_dx:  # dx = dgi W
            dx = x.new_empty(batch, self.input_size)
            a = _GemmArgs(
                at=0, m=batch, n=self.input_size, k=gh, a=g, lda=gh, b=self._w_ih,
                ldb=self.input_size, c=dx.data_ptr(), ldc=self.input_size, threads=threads,
            )  # fmt: skip
            _run("cr_gemm", a)
        if not need_w:
            dw_hh = None
        return StepGrads(dx, dh0, dc0, dw_ih, dw_hh, db_ih, db_hh)

    def _gemm(
        self,
        at: int,
        m: int,
        n: int,
        a: int,
        lda: int,
        b: Tensor | None,
        c: Tensor | None,
        c_at: int,
        colsum: Tensor | None,
        colsum_at: int,
        threads: int,
    ) -> None:
        """``c[c_at:] = A^T @ b`` (``A``: the batch's rows of ``m`` columns at address ``a``,
        row stride ``lda``) and ``colsum[colsum_at:]`` its column sums, as
        :func:`~cudnn_rnn.engines.native_boundary._gemm` calls ``cr_gemm``; None: not made."""
        if c is None and colsum is None:
            return
        args = _GemmArgs(
            at=at, m=m, n=n if c is not None else 0, k=self.batch, a=a, lda=lda,
            b=None if b is None or c is None else b.data_ptr(),
            ldb=0 if b is None or c is None else int(b.shape[1]),
            c=None if c is None else c.data_ptr() + 4 * c_at, ldc=n if c is not None else 0,
            colsum=None if colsum is None else colsum.data_ptr() + 4 * colsum_at,
            threads=threads,
        )  # fmt: skip
        _run("cr_gemm", args)
