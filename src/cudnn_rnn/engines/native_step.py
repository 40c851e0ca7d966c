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

A step is one C call each way (``cr_step_forward``, ``cr_step_backward``: step.h; each
Python-to-C call costs more than a B 1 product), and engine.c makes in it the calls the general
path makes, on the same numbers, so the same bits (tested): the loop of one step (``cr_forward``;
the output ``y`` and ``h_n`` are one tensor, which for one step hold the same values), its
backward (``cr_backward``, with the step's gradient as ``dy`` and no ``dh_n``: C adds the two,
and ``x + 0`` is ``x``) and the weight gradients' products (``cr_gemm``:
:func:`~cudnn_rnn.engines.common.recurrent_grads` and
:func:`~cudnn_rnn.engines.common.input_grads`' calls, on the same operands). The step's autograd
node in C++ (:mod:`cudnn_rnn.nn._step_node`) calls the same two functions. What differs from
the general path is where the workspace lives: the gates (and the LSTM's cell state or the GRU's
``ghn``) in tensors of their own, so a second backward through a step reads what the forward
left (no forward again).

The weights are read where they are, at every call: an edit in place is seen. A plan holds the
buffer it was made for (its addresses stay valid while the plan lives); the caller makes a new
plan when the buffer or the batch changes. Scope: what :func:`.native.supports` takes, for cuDNN's
four modes (no variant), one layer, one direction, no projection.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from cudnn_rnn.core.constants import CUDNN_GRU, CUDNN_LSTM
from cudnn_rnn.core.layout import Layout
from cudnn_rnn.engines.native_library import MODE_CODES, _call, _ForwardArgs, _StepArgs

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
        "_fw",
        "_step",
        "base",
        "batch",
        "code",
        "flat",
        "gates",
        "input_size",
        "mode",
        "steps",
        "units",
    )

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
        w_ih, w_hh, b_ih, b_hh = (base + 4 * b.offset for b in (f.w_ih, f.w_hh, f.b_ih, f.b_hh))
        self.code = MODE_CODES[spec.mode]  # (the C library's, and the step node's)
        # A step's record (step.h: engine.c makes the sequence's calls from it).
        self._step = _StepArgs(
            mode=self.code, batch=batch, units=h, input_size=self.input_size, w_ih=w_ih,
            w_hh=w_hh, b_ih=b_ih, b_hh=b_hh,
        )  # fmt: skip
        fw = _ForwardArgs(
            mode=MODE_CODES[spec.mode], steps=steps, batch=batch, units=h, gi_st=batch * gh,
            gi_sb=gh, y_st=batch * h, y_sb=h, input_size=self.input_size,
        )  # fmt: skip
        # As native.forward: LSTM and RNN add both biases to the input term, the GRU's bR
        # sits inside r * (...).
        fw.bi, fw.bi2 = b_ih, (None if gru else b_hh)
        fw.w, fw.r, fw.br = w_ih, w_hh, (b_hh if gru else None)
        self._fw = fw

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
        a = _StepArgs.from_buffer_copy(self._step)  # (a call's own: C runs without the GIL)
        a.threads = torch.get_num_threads()
        h1 = x.new_empty(self.batch, self.units)
        a.x, a.h0, a.h1 = x.data_ptr(), h0.data_ptr(), h1.data_ptr()
        c1 = None
        if c0 is not None:
            c1 = x.new_empty(self.batch, self.units)
            a.c0, a.c1 = c0.data_ptr(), c1.data_ptr()
        saved = None
        if keep:
            gates = x.new_empty(self.batch, self.gates * self.units)
            extra = x.new_empty(self.batch, self.units) if self.gates > 1 else None
            a.gates = gates.data_ptr()
            a.extra = None if extra is None else extra.data_ptr()
            saved = StepSaved(gates, extra)
        _call("cr_step_forward", a)
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
        a = _StepArgs.from_buffer_copy(self._step)
        a.threads = torch.get_num_threads()
        batch, h, gh = self.batch, self.units, self.gates * self.units
        a.x, a.h0, a.h1 = x.data_ptr(), h0.data_ptr(), h1.data_ptr()
        a.c0 = None if c0 is None else c0.data_ptr()
        a.gates = saved.gates.data_ptr()
        a.extra = None if saved.extra is None else saved.extra.data_ptr()
        a.dh1, a.dc1 = dh1.data_ptr(), (None if dc1 is None else dc1.data_ptr())
        dh0 = x.new_empty(batch, h)
        dc0 = x.new_empty(batch, h) if self.mode == CUDNN_LSTM else None
        a.dh0, a.dc0 = dh0.data_ptr(), (None if dc0 is None else dc0.data_ptr())
        dx = dw_ih = dw_hh = db_ih = db_hh = None
        if need_dx:
            dx = x.new_empty(batch, self.input_size)
            a.dx = dx.data_ptr()
        if need_w:
            dw_ih, dw_hh = x.new_empty(gh, self.input_size), x.new_empty(gh, h)
            a.dw_ih, a.dw_hh = dw_ih.data_ptr(), dw_hh.data_ptr()
        if need_b:
            db_ih, db_hh = x.new_empty(gh), x.new_empty(gh)
            a.db_ih, a.db_hh = db_ih.data_ptr(), db_hh.data_ptr()
        _call("cr_step_backward", a)
        return StepGrads(dx, dh0, dc0, dw_ih, dw_hh, db_ih, db_hh)
