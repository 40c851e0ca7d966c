"""``cudnn_rnn.nn.LSTMCell``, ``GRUCell`` and ``RNNCell``: torch.nn's cells on our operator.

A cell is the fused RNN of one layer over one step: its parameters (``weight_ih``,
``weight_hh``, ``bias_ih``, ``bias_hh``, torch.nn's names, shapes and initialisation) are views
into the one opaque buffer of that RNN, and a call runs ``cudnn_rnn::rnn`` on a sequence of one
step, by the engines' rule (the native CPU engine for float32, cuDNN on CUDA). cuDNN's GRU
(the reset gate applied after the recurrent product) is torch's ``GRUCell``. Arguments, results
and errors are torch.nn's: the exception types, and the messages of its shape checks (aten's,
which torch.nn's cells raise from their kernels); where aten's message is about its internals
(a state's dtype, device or kind, a state batched unlike the input), ours names the mistake
and its fix (:mod:`cudnn_rnn.nn._checks`). Like :mod:`cudnn_rnn.nn.modules`, they do not
subclass torch.nn's cells.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor
from torch import nn as tnn

from cudnn_rnn.core.constants import CUDNN_GRU, CUDNN_LSTM, CUDNN_RNN_RELU, CUDNN_RNN_TANH
from cudnn_rnn.core.layout import Layout, layout_of
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.nn import _checks, _flat, _step_node
from cudnn_rnn.nn.modules import checked, own_parameters, placed
from cudnn_rnn.operator import Route, rnn, route, static_of, step
from cudnn_rnn.operator.implementation import PLAIN, watched
from cudnn_rnn.operator.planned_step import planned_step, step_plan

__all__ = ["GRUCell", "LSTMCell", "RNNCell"]

_NAMES = ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]
_NONLINEARITY = {"tanh": CUDNN_RNN_TANH, "relu": CUDNN_RNN_RELU}


class _Cell(tnn.Module):
    """What the three cells share (the mode is data)."""

    _torch_class: type[tnn.RNNCellBase] = tnn.RNNCellBase
    _mode = ""
    input_size: int
    hidden_size: int
    bias: bool
    nonlinearity: str
    _flat: Tensor | None

    extra_repr: Any = tnn.RNNCellBase.extra_repr
    reset_parameters: Any = tnn.RNNCellBase.reset_parameters

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """torch.nn's constructor: the signature is torch.nn's class's (the arguments go to
        ``torch.nn.LSTMCell``, ``GRUCell`` or ``RNNCell``, built on the ``meta`` device)::

            LSTMCell(input_size, hidden_size, bias=True, device=None, dtype=None)
            GRUCell(input_size, hidden_size, bias=True, device=None, dtype=None)
            RNNCell(input_size, hidden_size, bias=True, nonlinearity='tanh', device=None,
                    dtype=None)

        Args:
            input_size: the number of features of the input ``x``: an int >= 1.
            hidden_size: the number of features of the hidden state ``h``: an int >= 1.
            bias: False leaves out the biases ``bias_ih`` and ``bias_hh``. Default True.
            nonlinearity: (``RNNCell`` only) ``'tanh'`` (the default) or ``'relu'``; as
                torch.nn, another value raises RuntimeError at the call.
            device: where the parameters are made. Default None: torch's default device.
            dtype: the parameters' dtype. Default None: torch's default dtype.

        Raises:
            TypeError: a size that is not an int (torch's message).
            RuntimeError: a negative size (torch's message).
            ValueError: a size of 0, which torch.nn's cells accept: the fused operator needs
                at least one unit and one input feature.
        """
        reference = checked(self._torch_class, args, kwargs)
        super().__init__()
        self.input_size = reference.input_size
        self.hidden_size = reference.hidden_size
        self.bias = reference.bias
        if "nonlinearity" in reference.__dict__:
            self.nonlinearity = reference.nonlinearity
        device, dtype = placed(reference, kwargs)
        self._names = _NAMES if self.bias else _NAMES[:2]
        self._layout = self._layout_of(self._mode or CUDNN_RNN_TANH)
        # Each mode's spec, made once (a call only looks it up: torch.compile traces no
        # construction, and a step pays for no validation).
        self._specs = {
            m: RNNSpec(m, 1, self.hidden_size, self.input_size)
            for m in ((self._mode,) if self._mode else (CUDNN_RNN_TANH, CUDNN_RNN_RELU))
        }
        self._statics = {m: static_of(spec) for m, spec in self._specs.items()}
        self._blocks = _flat.blocks(self._layout, self.bias)
        self._flat = torch.zeros(self._layout.size, dtype=dtype, device=device)
        # The native engine's planned step for the buffer, batch and mode of the last call:
        # (flat, batch, mode, plan or None), remade when one changes; never pickled.
        self._plan: tuple[Any, ...] | None = None
        shapes = [tuple(getattr(reference, n).shape) for n in self._names]
        own_parameters(self, self._names, shapes, self._flat, self._blocks)
        if not self.bias:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def _layout_of(self, mode: str) -> Layout:
        return layout_of(RNNSpec(mode, 1, self.hidden_size, self.input_size))

    def _concatenated(self, params: Sequence[Tensor]) -> Tensor:
        """A buffer made from ``params`` (the cell's), differentiable for them."""
        return _flat.concatenated(params, self._layout, self._blocks)

    def _weights(self) -> list[Tensor]:
        return [getattr(self, n) for n in self._names]

    def flatten_parameters(self) -> None:
        """Make the opaque buffer from the parameters' current values and point them at it
        (a no-op where they already are its views)."""
        params = self._weights()
        if _flat.owned(params) and not _flat.aliases(self._flat, params, self._blocks):
            self._flat = _flat.flatten(params, self._layout, self._blocks)

    def _buffer(self) -> Tensor:
        """As :meth:`cudnn_rnn.nn.modules._Fused._buffer`; torch.nn's cells keep no flat
        buffer, so they say nothing when it is made again."""
        params, self._flat = _flat.for_call(
            self._flat, self._weights(), self._layout, self._blocks, warn=False
        )
        return params

    def _apply(self, fn: Any, recurse: bool = True) -> Any:
        ret = super()._apply(fn, recurse)  # type: ignore[no-untyped-call]
        self._flat, self._plan = None, None
        self.flatten_parameters()
        return ret

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_flat", None)
        state.pop("_plan", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)  # type: ignore[no-untyped-call]
        if "_statics" not in state:  # (pickled before the cells kept them)
            self._statics = {m: static_of(spec) for m, spec in self._specs.items()}
        self._flat, self._plan = None, None
        self.flatten_parameters()

    # -- forward ---------------------------------------------------------------------------------
    def forward(self, input: Tensor, hx: Any = None) -> Any:
        """torch.nn's forward, checked as torch.nn's cell and its kernel check (in that order,
        with their exceptions): dimensions, then (:mod:`cudnn_rnn.nn._checks`) the kind of
        ``hx``, sizes, devices and dtypes."""
        done = self._eager_step(input, hx)
        if done is not None:
            return done
        cls = type(self).__name__
        lstm = self._mode == CUDNN_LSTM
        if input.dim() not in (1, 2):
            raise ValueError(f"{cls}: Expected input to be 1D or 2D, got {input.dim()}D instead")
        if hx is not None:
            if not lstm:
                _checks.check_state_tensor(cls, hx)
            elif not isinstance(hx, Tensor):  # (torch.nn iterates a tensor's rows)
                _checks.check_pair(cls, hx, exact=False)
            for i, value in enumerate(hx if lstm else (hx,)):
                if value.dim() not in (1, 2):
                    what = f"hx[{i}]" if lstm else "hidden"
                    raise ValueError(
                        f"{cls}: Expected {what} to be 1D or 2D, got {value.dim()}D instead"
                    )
        is_batched = input.dim() == 2
        if not is_batched:
            input = input.unsqueeze(0)
            if hx is not None and lstm:
                _checks.check_pair(cls, hx, exact=False)
                hx = (hx[0].unsqueeze(0), hx[1].unsqueeze(0))
            elif hx is not None:
                hx = hx.unsqueeze(0)
        if hx is None:
            zeros = torch.zeros(
                input.size(0), self.hidden_size, dtype=input.dtype, device=input.device
            )
            hx = (zeros, zeros) if lstm else zeros
        elif lstm:  # what the kernel takes
            _checks.check_pair(cls, hx, exact=True)
        out = self._step(input, tuple(hx) if lstm else (hx,), is_batched)
        if not is_batched:
            out = tuple(o.squeeze(0) for o in out)
        return out if lstm else out[0]

    def _eager_step(self, input: Any, hx: Any) -> Any:
        """The result of a call that plain eager execution runs with nothing to check, convert
        or flatten: a batched input and states (or none) of the cell's sizes, dtype and device,
        no autocast, the parameters the buffer's views (the C++ step node, where it is loaded,
        reads the parameters themselves); None for any other call, which takes the checked
        path (and raises its errors there). A step in a Python loop is latency bound: this is
        what it pays instead of the checks and the operator's routing (issue 48), for the same
        engine call (:func:`cudnn_rnn.operator.step`), so the same bits. The node checks every
        operand's size, dtype, device and layout itself and declines what does not fit, so on
        its path Python checks only what the node cannot see: the kinds of the arguments and
        whether anything but plain eager execution watches the call."""
        flat = self._flat
        if (
            flat is None
            or torch.compiler.is_compiling()  # (first: dynamo traces the checked path)
            or _flat.traced()
            or torch._C._are_functorch_transforms_active()  # (wrapped tensors have no storage)
            or type(input) is not Tensor
            or input.dim() != 2
        ):
            return None
        mode = self._mode or _NONLINEARITY.get(getattr(self, "nonlinearity", ""), "")
        lstm = self._mode == CUDNN_LSTM
        states: tuple[Any, ...] = ()
        if hx is not None:
            if lstm and type(hx) not in (tuple, list):  # (an LSTM's state is a pair)
                return None
            states = tuple(hx) if lstm else (hx,)
            if len(states) != (2 if lstm else 1):
                return None
            for s in states:  # (a loop, not all(...): this path is paid at every step)
                if type(s) is not Tensor or s.dim() != 2:
                    return None
        own = self._parameters  # (what Module.__getattr__ reads, without its lookups)
        weights: list[Tensor] = []
        for n in self._names:
            p = own.get(n)
            if p is None or type(p) not in PLAIN:
                return None
            weights.append(p)
        # Nothing but plain eager execution sees it (a mode or a profiler sees the operator),
        # and no autocast: the rest is the sizes, dtype and device of the operands.
        if not mode or watched() or torch._C._is_any_autocast_enabled():
            return None
        batch = input.shape[0]
        if not states:
            zeros = input.new_zeros((batch, self.hidden_size))
            states = (zeros, zeros) if lstm else (zeros,)
        static, c0 = self._statics[mode], states[1] if lstm else None
        plan = self._plan
        if plan is None or plan[0] is not flat or plan[1] != batch or plan[2] != mode:
            plan = self._plan = (flat, batch, mode, step_plan(static, flat, batch))
        if plan[3] is not None:  # the rule table picks the native engine for the step
            node = _step_node.step_op()
            if node is not None:  # the C++ node, on the parameters themselves
                out = node(input, states[0], c0, plan[3].code, weights)
                if out:  # (empty where an operand does not fit it: the paths below)
                    return (out[0], out[1]) if len(out) > 1 else out[0]
        # The paths below read the weights in the buffer: they must still be its views, and
        # the operands of its sizes, dtype and device.
        size, dtype, device = (batch, self.hidden_size), flat.dtype, flat.device
        if (
            batch == 0
            or input.shape[1] != self.input_size
            or input.dtype != dtype
            or input.device != device
            or not _flat.aliases(flat, weights, self._blocks)
        ):
            return None
        for s in states:
            if s.shape != size or s.dtype != dtype or s.device != device:
                return None
        # The route without gradient, whose rule is the one with it less the compiler and the
        # transforms, which are off here (above).
        if route(False, False, flat, input, *states) is not Route.DIRECT:
            return None
        need_grad = torch.is_grad_enabled() and (
            input.requires_grad
            or any(s.requires_grad for s in states)
            or any(p.requires_grad for p in weights)
        )
        if plan[3] is not None:
            done = planned_step(
                plan[3], static, input, states[0], c0, weights, self._concatenated, need_grad
            )  # fmt: skip
            if done is not None:
                return done if done[1] is not None else done[0]
        buffer = _flat.gathered(flat, weights, self._blocks) if need_grad else flat
        h, c = step(static, buffer, input, states[0], c0, need_grad)
        return (h, c) if c is not None else h

    def _step(self, x: Tensor, states: tuple[Tensor, ...], batched: bool) -> tuple[Tensor, ...]:
        """One step of the operator on ``x [B, I]`` and ``states`` (each ``[B, H]``; ``x``
        was 1-D where not ``batched``), checked as aten checks torch.nn's cells."""
        mode = self._mode or _NONLINEARITY.get(getattr(self, "nonlinearity", ""), "")
        if not mode:
            raise RuntimeError(f"Unknown nonlinearity: {self.nonlinearity}")
        # Sizes are not compared while torch.jit.trace records: they are tensors then, and a
        # comparison would fix them in the trace (a TracerWarning); the trace's own run checks them.
        checked = not _flat.traced()
        if checked and x.size(1) != self.input_size:
            raise RuntimeError(
                f"input has inconsistent input_size: got {x.size(1)} expected {self.input_size}"
            )
        _checks.check_cell_state_dims(type(self).__name__, states, batched)
        for i, s in enumerate(states):
            if checked and s.size(0) != x.size(0):
                raise RuntimeError(
                    f"Input batch size {x.size(0)} doesn't match hidden{i} batch size {s.size(0)}"
                )
            if checked and s.size(1) != self.hidden_size:
                raise RuntimeError(
                    f"hidden{i} has inconsistent hidden_size: got {s.size(1)}, expected "
                    f"{self.hidden_size}"
                )
        names = ["hx[0]", "hx[1]"] if len(states) > 1 else ["hx"]
        weight = self._weights()[0]  # (weight_ih: the dtype and device of them all)
        _checks.check_tensors(type(self).__name__, "cell", x, list(zip(names, states)), weight)
        params = self._buffer()
        x, states = x.to(params.dtype), tuple(s.to(params.dtype) for s in states)
        spec = self._specs[mode]
        c0 = states[1].unsqueeze(0) if len(states) > 1 else None
        _, h_n, c_n = rnn(
            spec, params, x.unsqueeze(0), states[0].unsqueeze(0), c0, None,
            training=self.training, seed=0, dropout_step=None,
        )  # fmt: skip
        return (h_n[0], c_n[0]) if c_n is not None else (h_n[0],)


class LSTMCell(_Cell):
    """``torch.nn.LSTMCell`` on our operator: its arguments, parameters and results.

    One LSTM step (cuDNN's equations, which are torch.nn's: they differ from
    ``torch.nn.LSTMCell`` nowhere; ``*`` the elementwise product)::

        i = sigmoid(W_ii x + b_ii + W_hi h + b_hi)
        f = sigmoid(W_if x + b_if + W_hf h + b_hf)
        g = tanh(W_ig x + b_ig + W_hg h + b_hg)
        o = sigmoid(W_io x + b_io + W_ho h + b_ho)
        c' = f * c + i * g
        h' = o * tanh(c')

    Inputs:
        ``input, (h_0, c_0)``: ``input`` ``(N, H_in)`` or ``(H_in)``; ``h_0`` and ``c_0``
        ``(N, H_out)`` or ``(H_out)``, zeros when the tuple is omitted. ``N`` is the batch
        size, ``H_in = input_size``, ``H_out = hidden_size``.

    Outputs:
        ``(h_1, c_1)``: the next hidden and cell state, each ``(N, H_out)`` or ``(H_out)``.

    Attributes:
        weight_ih: the input-hidden weights ``W_ii|W_if|W_ig|W_io``,
            ``(4 * hidden_size, input_size)``.
        weight_hh: the hidden-hidden weights, ``(4 * hidden_size, hidden_size)``.
        bias_ih: the input-hidden bias, ``(4 * hidden_size,)``.
        bias_hh: the hidden-hidden bias, ``(4 * hidden_size,)``. All four are views into one
            buffer, initialised from ``U(-sqrt(1 / hidden_size), sqrt(1 / hidden_size))``.

    Example:

    >>> import torch, cudnn_rnn.nn
    >>> h, c = cudnn_rnn.nn.LSTMCell(10, 20)(torch.randn(3, 10))
    >>> h.shape, c.shape
    (torch.Size([3, 20]), torch.Size([3, 20]))
    """

    _torch_class = tnn.LSTMCell
    _mode = CUDNN_LSTM


class GRUCell(_Cell):
    """``torch.nn.GRUCell`` on our operator: its arguments, parameters and results.

    One GRU step (cuDNN's equations, which are torch.nn's: the reset gate ``r`` is applied after
    the recurrent product, so they differ from ``torch.nn.GRUCell`` nowhere; TF's ``GRUCell``
    applies it before)::

        r = sigmoid(W_ir x + b_ir + W_hr h + b_hr)
        z = sigmoid(W_iz x + b_iz + W_hz h + b_hz)
        n = tanh(W_in x + b_in + r * (W_hn h + b_hn))
        h' = (1 - z) * n + z * h

    Inputs:
        ``input, hidden``: ``input`` ``(N, H_in)`` or ``(H_in)``; ``hidden`` ``(N, H_out)`` or
        ``(H_out)``, zeros when omitted. ``N`` is the batch size, ``H_in = input_size``,
        ``H_out = hidden_size``.

    Outputs:
        ``h'``: the next hidden state, ``(N, H_out)`` or ``(H_out)``.

    Attributes:
        weight_ih: the input-hidden weights ``W_ir|W_iz|W_in``, ``(3 * hidden_size,
            input_size)``.
        weight_hh: the hidden-hidden weights, ``(3 * hidden_size, hidden_size)``.
        bias_ih: the input-hidden bias, ``(3 * hidden_size,)``.
        bias_hh: the hidden-hidden bias, ``(3 * hidden_size,)``. All four are views into one
            buffer, initialised as torch.nn's.

    Example:

    >>> import torch, cudnn_rnn.nn
    >>> cudnn_rnn.nn.GRUCell(10, 20)(torch.randn(10)).shape  # unbatched
    torch.Size([20])
    """

    _torch_class = tnn.GRUCell
    _mode = CUDNN_GRU


class RNNCell(_Cell):
    """``torch.nn.RNNCell`` (``nonlinearity="tanh"`` or ``"relu"``) on our operator.

    One Elman RNN step (cuDNN's equations, which are torch.nn's: they differ from
    ``torch.nn.RNNCell`` nowhere)::

        h' = tanh(W_ih x + b_ih + W_hh h + b_hh)     (nonlinearity="relu": relu)

    Inputs:
        ``input, hidden``: ``input`` ``(N, H_in)`` or ``(H_in)``; ``hidden`` ``(N, H_out)`` or
        ``(H_out)``, zeros when omitted. ``N`` is the batch size, ``H_in = input_size``,
        ``H_out = hidden_size``.

    Outputs:
        ``h'``: the next hidden state, ``(N, H_out)`` or ``(H_out)``.

    Attributes:
        weight_ih: the input-hidden weights, ``(hidden_size, input_size)``.
        weight_hh: the hidden-hidden weights, ``(hidden_size, hidden_size)``.
        bias_ih: the input-hidden bias, ``(hidden_size,)``.
        bias_hh: the hidden-hidden bias, ``(hidden_size,)``. All four are views into one
            buffer, initialised as torch.nn's.

    Example:

    >>> import torch, cudnn_rnn.nn
    >>> cudnn_rnn.nn.RNNCell(10, 20, nonlinearity="relu")(torch.randn(3, 10)).shape
    torch.Size([3, 20])
    """

    _torch_class = tnn.RNNCell
