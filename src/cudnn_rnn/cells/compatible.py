"""The compatible cells: TF's step-by-step cells with cuDNN's math and TF's variables.

``CudnnCompatibleLSTMCell``, ``CudnnCompatibleGRUCell`` and ``BasicRNNCell`` have TF's variable
names (relative to their ``scope_name``, both from :mod:`cudnn_rnn.core.tf_names`), shapes,
layouts and initial values, so a checkpoint of a fused cuDNN model restores into them (through
the stacks of :mod:`cudnn_rnn.cells.stacks`) and back.

Legend: ``B`` batch, ``T`` time steps, ``I`` input depth (the last dimension of the inputs, known
on the first call), ``H`` num_units, ``σ`` the logistic function, ``[x, h]`` the concatenation on
the feature axis, ``h'``/``c'`` the previous state. Every matrix acts on the right (``x @ K``)::

    CudnnCompatibleLSTMCell   kernel [I+H, 4H] (column blocks i, j, f, o), bias [4H]
        i, j, f, o = split([x, h'] @ kernel + bias, 4)
        c = σ(f) * c' + σ(i) * tanh(j);   h = σ(o) * tanh(c)       state (c, h), output h

    CudnnCompatibleGRUCell    gates/kernel [I+H, 2H] (blocks r, u), gates/bias [2H],
                              candidate/input_projection/kernel K_in [I, H], /bias b_in [H],
                              candidate/hidden_projection/kernel K_hid [H, H], /bias b_hid [H]
        r, u = split(σ([x, h'] @ gates/kernel + gates/bias), 2)
        h~ = tanh(x @ K_in + b_in + r * (h' @ K_hid + b_hid))
        h = (1 - u) * h~ + u * h'                                   state h, output h

    BasicRNNCell              kernel [I+H, H], bias [H]
        h = act([x, h'] @ kernel + bias),  act = tanh or relu       state h, output h

These are cuDNN's equations with one bias per gate where cuDNN has two (``bias = b_W + b_R``); the
GRU keeps both candidate biases because ``b_hid`` sits inside the reset product. So a cuDNN model
and these cells compute the same function (the tests check it against the NumPy oracle).

Variables are created on the first call (or by ``build(input_depth)``), because only then is the
input depth known; make an optimizer after that.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, TypeAlias

import torch
from torch import Tensor, nn

from cudnn_rnn.checkpointable import Shape
from cudnn_rnn.core import tf_names
from cudnn_rnn.core.constants import CUDNN_GRU, CUDNN_LSTM, CUDNN_RNN_RELU, CUDNN_RNN_TANH
from cudnn_rnn.core.gates import GATE_ORDERS
from cudnn_rnn.core.spec import check_int
from cudnn_rnn.initializers import glorot_uniform
from cudnn_rnn.validation import check_dtype, or_convert_owner

__all__ = [
    "BasicRNNCell",
    "CudnnCompatibleGRUCell",
    "CudnnCompatibleLSTMCell",
    "LSTMStateTuple",
]

#: (one per layer of a ``MultiRNNCell``).
State: TypeAlias = Tensor | tuple["State", ...]
#: The structure of a state with ints in place of tensors (``state_size``).
StateSize: TypeAlias = int | tuple["StateSize", ...]
#: ``kernel_initializer(shape, dtype) -> Tensor``.
Initializer: TypeAlias = Callable[[tuple[int, ...], torch.dtype], Tensor]


class LSTMStateTuple(NamedTuple):
    """The state of an LSTM cell, ``c`` first as in TF: tensors ``[B, H]`` (ints in ``state_size``).

    Args:
        c: the cell state ``c [B, H]`` (its size ``H`` in ``state_size``).
        h: the hidden state ``h [B, H]``, which is also the cell's output.

    >>> LSTMStateTuple(c=3, h=3)
    LSTMStateTuple(c=3, h=3)
    """

    # Any, not Tensor: TF uses the same tuple for sizes, and a generic NamedTuple needs Python 3.11.
    c: Any
    h: Any


# -- the variable tables ------------------------------------------------------------------------


def _attr(name: str) -> str:
    """The torch attribute (and state_dict key) of a TF variable name: "/" is not allowed."""
    return name.replace("/", "_")


#: One dimension of a variable: ``(a, b)`` means ``a * input_depth + b * num_units``.
_Dim = tuple[int, int]


@dataclass(frozen=True)
class _Var:
    """One TF variable of a cell: name (relative to the cell scope), shape rule, initial value."""

    name: str
    dims: tuple[_Dim, ...]
    init: str  # "glorot", "zeros" or "ones"

    @property
    def attr(self) -> str:
        return _attr(self.name)

    @property
    def is_kernel(self) -> bool:
        return tf_names.is_kernel(self.name)

    def shape(self, input_depth: int | None, num_units: int) -> Shape:
        return tuple(
            None if a and input_depth is None else a * (input_depth or 0) + b * num_units
            for a, b in self.dims
        )

    def input_depth_of(self, shape: tuple[int, ...], num_units: int) -> int | None:
        """The input depth a stored tensor of this variable implies (None if it implies none)."""
        for (a, b), size in zip(self.dims, shape):
            if a:
                return (size - b * num_units) // a
        return None


_LSTM_GATES = len(GATE_ORDERS["tf"][CUDNN_LSTM])  # 4 column blocks in the kernel: i, j(c), f, o
_GRU_GATES = len(GATE_ORDERS["tf"][CUDNN_GRU])  # 2 column blocks in gates/kernel: r, u


def _describe(value: object) -> str:
    if isinstance(value, Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of length {len(value)}"
    return f"{type(value).__name__} {value!r}"


# -- the cells ----------------------------------------------------------------------------------


class _RNNCell(nn.Module):
    """What the drivers run, as TF's ``RNNCell``: one cell, or a ``MultiRNNCell`` of cells.

    The drivers step it as a whole (``forward(inputs, state) -> (output, new_state)``) or hand
    its layers to the fused kernel (``_depth_layers``, ``_final_state``).
    """

    @property
    def output_size(self) -> int:
        raise NotImplementedError

    def zero_state(
        self,
        batch_size: int,
        dtype: torch.dtype | None = None,
        *,
        device: torch.device | str | None = None,
    ) -> State:
        raise NotImplementedError

    def _depth_layers(self, state: State) -> tuple[Sequence[_Cell], Sequence[State]]:
        """The cells in depth order with their states (``state`` checked as ``forward`` does)."""
        raise NotImplementedError

    def _final_state(self, finals: Sequence[State]) -> State:
        """This cell's final state made of its layers' final states (depth order)."""
        raise NotImplementedError


class _Cell(_RNNCell):
    """What the three cells share: arguments, lazy variables, input checks, names, zero state.

    The per-class differences are data (``_variables``, ``scope_name``) plus ``forward``.
    """

    scope_name: ClassVar[str]
    _variables: ClassVar[tuple[_Var, ...]]
    rnn_mode: str

    def __init__(
        self,
        num_units: int,
        *,
        dtype: torch.dtype | str = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        """Configure the cell; its variables are made on the first call (or by :meth:`build`),
        when the input depth is known. The arguments every cell takes (a class's own, such as
        ``CudnnCompatibleGRUCell``'s ``kernel_initializer`` or ``BasicRNNCell``'s
        ``activation``, are in its docstring):

        Args:
            num_units: ``H``, the cell's hidden size (and output size): an int >= 1.
            reuse: accepted for TF's signature and ignored: TF used it to share variables
                between graph-building calls; here the cell object owns its variables, so
                reusing the object shares them. Default None.
            dtype: (keyword) the variables' dtype: ``torch.float16``, ``torch.bfloat16``,
                ``torch.float32`` (the default) or ``torch.float64``, or its name
                (``"float32"``); they follow ``.to()`` once made.
            device: (keyword) where the variables are made. Default None: the device of the
                first call's inputs (the CPU for :meth:`build`).

        Raises:
            TypeError: ``num_units`` that is not an int (``True`` and ``2.0`` included), a
                dtype that is not a ``torch.dtype``.
            ValueError: ``num_units`` below 1, a dtype other than the four.
        """
        super().__init__()
        owner = type(self).__name__
        self._num_units = check_int(owner, "num_units", num_units, 1)
        self._dtype = check_dtype(owner, dtype)
        self._device = None if device is None else torch.device(device)
        self._input_depth: int | None = None

    @property
    def _owner(self) -> str:
        return type(self).__name__

    # -- sizes and state ------------------------------------------------------------------------
    @property
    def num_units(self) -> int:
        return self._num_units

    @property
    def state_size(self) -> StateSize:
        return self._num_units

    @property
    def output_size(self) -> int:
        return self._num_units

    @property
    def input_depth(self) -> int | None:
        """The input depth the variables were built for; None before the first call."""
        return self._input_depth

    @property
    def built(self) -> bool:
        return self._input_depth is not None

    @property
    def dtype(self) -> torch.dtype:
        """The variables' dtype (they follow ``.to()`` once built)."""
        return self._param(self._variables[0].name).dtype if self.built else self._dtype

    @property
    def device(self) -> torch.device:
        if self.built:
            return self._param(self._variables[0].name).device
        return self._device if self._device is not None else torch.device("cpu")

    def zero_state(
        self,
        batch_size: int,
        dtype: torch.dtype | None = None,
        *,
        device: torch.device | str | None = None,
    ) -> State:
        """Zeros shaped like ``state_size`` with ``batch_size`` rows (the cell's dtype/device)."""
        batch = check_int(f"{self._owner}.zero_state", "batch_size", batch_size, 1)
        return _zeros(
            self.state_size,
            batch,
            self.dtype if dtype is None else dtype,
            self.device if device is None else torch.device(device),
        )

    # -- variables ------------------------------------------------------------------------------
    def build(self, input_depth: int) -> None:
        """Create the variables for inputs ``[B, input_depth]`` (the first call does this too)."""
        depth = check_int(f"{self._owner}.build", "input_depth", input_depth, 1)
        self._build(depth, self.device)

    def _build(self, depth: int, device: torch.device) -> None:
        if self._input_depth is not None:
            if depth != self._input_depth:
                raise ValueError(
                    f"{self._owner}: the variables were built for input depth "
                    f"{self._input_depth}, got input depth {depth}; a cell serves one input "
                    "depth, so make another cell for these inputs."
                )
            return
        # Normal tensors even when the first call runs under inference_mode, so that the cell
        # can be trained afterwards.
        with torch.inference_mode(False), torch.no_grad():
            for var in self._variables:
                shape = tuple(a * depth + b * self._num_units for a, b in var.dims)
                value = self._initial_value(var, shape).to(device)
                self.register_parameter(var.attr, nn.Parameter(value))
        self._input_depth = depth

    def _initial_value(self, var: _Var, shape: tuple[int, ...]) -> Tensor:
        # Drawn on the CPU from torch's default RNG, so a seed gives the same cell on any device.
        if var.init == "zeros":
            return torch.zeros(shape, dtype=self._dtype)
        if var.init == "ones":
            return torch.ones(shape, dtype=self._dtype)
        return glorot_uniform(shape, self._dtype)

    def _param(self, name: str) -> Tensor:
        param = self._parameters.get(_attr(name))
        if param is None:
            raise RuntimeError(
                f"{self._owner}: variable {name!r} does not exist yet; call the cell once or "
                "call build(input_depth) first."
            )
        return param

    def tf_variables(self) -> dict[str, nn.Parameter]:
        """TF variable name (relative to ``scope_name``) -> parameter, in TF's creation order."""
        if not self.built:
            raise RuntimeError(
                f"{self._owner}: the variables do not exist yet (their input depth is known only "
                "on the first call); call the cell once or call build(input_depth) first."
            )
        out: dict[str, nn.Parameter] = {}
        for var in self._variables:
            param = self._parameters[var.attr]
            assert param is not None  # registered together by _build
            out[var.name] = param
        return out

    def tf_variable_shapes(self, input_depth: int | None = None) -> dict[str, Shape]:
        """TF variable name -> shape; ``None`` for the input depth part while it is unknown.

        A built cell uses its own input depth; an unbuilt one ``input_depth`` (may be None).
        """
        depth = self._input_depth if self.built else input_depth
        return {var.name: var.shape(depth, self._num_units) for var in self._variables}

    def _input_depth_from(
        self, owner: str, prefix: str, shapes: Mapping[str, tuple[int, ...]]
    ) -> int:
        """The one input depth that stored tensors of these shapes imply, or a ValueError."""
        depths = {
            var.name: var.input_depth_of(shapes[var.name], self._num_units)
            for var in self._variables
        }
        found = {d for d in depths.values() if d is not None}
        if len(found) != 1 or min(found) < 1:
            shown = ", ".join(f"{prefix}/{n} {tuple(shapes[n])}" for n in depths)
            raise ValueError(
                f"{owner}: the tensors of {prefix} imply no single input depth >= 1 for a cell "
                f"with num_units={self.num_units}: {shown}."
            )
        return found.pop()

    def _spec(self) -> dict[str, Any]:
        return {
            "cell": self.scope_name,
            "mode": self.rnn_mode,
            "num_units": self._num_units,
            "input_depth": self._input_depth,
            "dtype": str(self.dtype).removeprefix("torch."),
        }

    # -- checks used by forward -----------------------------------------------------------------
    def _check_inputs_and_build(self, inputs: object) -> Tensor:
        owner = self._owner
        if not isinstance(inputs, Tensor):
            raise TypeError(f"{owner}: inputs must be a torch.Tensor, got {_describe(inputs)}.")
        if inputs.dim() != 2 or inputs.shape[1] == 0:
            raise ValueError(
                f"{owner}: inputs must be a 2-D tensor [batch, input_depth] with input_depth "
                f">= 1, got shape {tuple(inputs.shape)}."
            )
        if inputs.dtype != self.dtype:
            raise TypeError(
                f"{owner}: inputs have dtype {inputs.dtype} but the cell's variables are "
                f"{self.dtype}; convert the inputs with .to({self.dtype})"
                + or_convert_owner(inputs.dtype, " or make the cell with dtype={}")
                + "."
            )
        # An explicit device wins; otherwise the variables go where the first inputs are.
        self._build(int(inputs.shape[1]), self._device or inputs.device)
        # A step's products are torch's, whose rounding can follow the memory layout: a
        # contiguous copy makes the bits the same whatever layout the caller's tensor has.
        return inputs.contiguous()

    def _check_call(self, inputs: object, state: object) -> tuple[Tensor, tuple[Tensor, ...]]:
        """What ``forward`` checks (building the cell if needed): inputs and the state tensors.

        The state tensors are ``(c, h)`` for an LSTM cell and ``(h,)`` otherwise. The fused
        drivers call this too, so that both paths raise the same errors in the same order.
        """
        raise NotImplementedError

    def _check_state_tensor(self, name: str, value: object, batch: int) -> Tensor:
        if not isinstance(value, Tensor):
            raise TypeError(
                f"{self._owner}: {name} must be a tensor [batch, num_units], got "
                f"{_describe(value)}."
            )
        if tuple(value.shape) != (batch, self._num_units):
            raise ValueError(
                f"{self._owner}: {name} must have shape [batch, num_units] = "
                f"({batch}, {self._num_units}), got {tuple(value.shape)}."
            )
        return value.contiguous()  # as the inputs (see _check_inputs_and_build)

    def extra_repr(self) -> str:
        return f"num_units={self._num_units}, input_depth={self._input_depth}"

    # -- what the drivers ask -------------------------------------------------------------------
    def _depth_layers(self, state: State) -> tuple[Sequence[_Cell], Sequence[State]]:
        return (self,), (state,)

    def _final_state(self, finals: Sequence[State]) -> State:
        (final,) = finals
        return final


class _TensorStateCell(_Cell):
    """A cell whose state is one tensor ``[B, H]`` (GRU, basic RNN)."""

    def _check_call(self, inputs: object, state: object) -> tuple[Tensor, tuple[Tensor, ...]]:
        x = self._check_inputs_and_build(inputs)
        return x, (self._check_state_tensor("state", state, int(x.shape[0])),)

    def zero_state(
        self,
        batch_size: int,
        dtype: torch.dtype | None = None,
        *,
        device: torch.device | str | None = None,
    ) -> Tensor:
        state = super().zero_state(batch_size, dtype, device=device)
        assert isinstance(state, Tensor)  # built from state_size
        return state


class CudnnCompatibleLSTMCell(_Cell):
    """TF's ``CudnnCompatibleLSTMCell``: an LSTM step with cuDNN's math and one bias per gate.

    One step of cuDNN's LSTM, the cell that reads a ``CudnnLSTM``'s canonical checkpoint
    (``forget_bias`` is 0; no peepholes, no cell clipping)::

        i, j, f, o = split([x, h'] @ kernel + bias, 4)
        c = sigmoid(f) * c' + sigmoid(i) * tanh(j)
        h = sigmoid(o) * tanh(c)

    ``kernel`` stacks the input and recurrent matrices, and ``bias`` is cuDNN's two biases
    ``bW + bR`` summed: the same outputs as cuDNN's, and as ``torch.nn.LSTMCell``'s.

    Inputs:
        ``inputs, state``:

        * ``inputs``: ``(B, I)``, one step of a batch of ``B`` (``I``: the input depth, fixed
          by the first call).
        * ``state``: ``LSTMStateTuple(c, h)``, each ``(B, H)`` (``H = num_units``); zeros:
          :meth:`zero_state`.

    Outputs:
        ``h, LSTMStateTuple(c, h)``: ``h`` and ``c`` each ``(B, H)``.

    Example:

    >>> import torch
    >>> cell = CudnnCompatibleLSTMCell(4)
    >>> h, state = cell(torch.ones(2, 3), cell.zero_state(2))
    >>> tuple(h.shape), cell.state_size, bool((state.h == h).all())
    ((2, 4), LSTMStateTuple(c=4, h=4), True)
    >>> {name: tuple(v.shape) for name, v in cell.tf_variables().items()}
    {'kernel': (7, 16), 'bias': (16,)}
    """

    scope_name: ClassVar[str] = tf_names.LSTM_CELL
    rnn_mode = CUDNN_LSTM
    _variables: ClassVar[tuple[_Var, ...]] = (
        _Var(tf_names.KERNEL, ((1, 1), (0, _LSTM_GATES)), "glorot"),
        _Var(tf_names.BIAS, ((0, _LSTM_GATES),), "zeros"),
    )

    def __init__(
        self,
        num_units: int,
        reuse: object = None,
        *,
        dtype: torch.dtype | str = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(num_units, dtype=dtype, device=device)

    @property
    def state_size(self) -> LSTMStateTuple:
        return LSTMStateTuple(self._num_units, self._num_units)

    def zero_state(
        self,
        batch_size: int,
        dtype: torch.dtype | None = None,
        *,
        device: torch.device | str | None = None,
    ) -> LSTMStateTuple:
        state = super().zero_state(batch_size, dtype, device=device)
        assert isinstance(state, LSTMStateTuple)  # built from state_size
        return state

    def _check_call(self, inputs: object, state: object) -> tuple[Tensor, tuple[Tensor, ...]]:
        x = self._check_inputs_and_build(inputs)
        if not isinstance(state, (tuple, list)) or len(state) != 2:
            raise ValueError(
                f"{self._owner}: Expecting state to be a tuple with length 2 (c, h), got "
                f"{_describe(state)}; use LSTMStateTuple(c, h) or cell.zero_state(batch_size)."
            )
        batch = int(x.shape[0])
        c_prev = self._check_state_tensor("state.c", state[0], batch)
        h_prev = self._check_state_tensor("state.h", state[1], batch)
        return x, (c_prev, h_prev)

    def forward(self, inputs: Tensor, state: State) -> tuple[Tensor, LSTMStateTuple]:
        x, (c_prev, h_prev) = self._check_call(inputs, state)
        kernel, bias = self._param(tf_names.KERNEL), self._param(tf_names.BIAS)
        gates = torch.addmm(bias, torch.cat([x, h_prev], 1), kernel)
        g = dict(zip(GATE_ORDERS["tf"][CUDNN_LSTM], gates.chunk(_LSTM_GATES, dim=1)))
        c = torch.sigmoid(g["f"]) * c_prev + torch.sigmoid(g["i"]) * torch.tanh(g["c"])
        h = torch.sigmoid(g["o"]) * torch.tanh(c)
        return h, LSTMStateTuple(c, h)

    if TYPE_CHECKING:  # torch types Module.__call__ as returning Any; calling it is forward
        __call__ = forward


class CudnnCompatibleGRUCell(_TensorStateCell):
    """TF's ``CudnnCompatibleGRUCell``: a GRU step with cuDNN's variant of the candidate.

    One step of cuDNN's GRU, the cell that reads a ``CudnnGRU``'s canonical checkpoint::

        r, u = split(sigmoid([x, h'] @ gates_kernel + gates_bias), 2)
        h~ = tanh(x @ K_in + b_in + r * (h' @ K_hid + b_hid))
        h = (1 - u) * h~ + u * h'

    This is where cuDNN (and ``torch.nn.GRU``, and ``CudnnGRU``) differs from TF's
    ``tf.nn.rnn_cell.GRUCell``: cuDNN applies the reset gate after the recurrent product,
    ``r * (h' @ K_hid + b_hid)``, where ``GRUCell`` computes ``(r * h') @ K``; hence the
    separate candidate kernels. ``gates/bias`` starts at 1.0 and the candidate biases at 0,
    as in TF.

    Args:
        kernel_initializer: ``f(shape, dtype) -> Tensor``, called for each of the three kernels
            when the variables are made (default None: Glorot-uniform per matrix). TypeError
            when it is not callable (at construction) or returns no tensor, ValueError when
            the tensor has another shape.

    Inputs:
        ``inputs, state``: ``inputs`` ``(B, I)``, one step of a batch of ``B``; ``state``
        ``(B, H)`` (``H = num_units``; zeros: :meth:`zero_state`).

    Outputs:
        ``h, h``: the new state ``(B, H)``, twice (the output and the next state).

    Example:

    >>> import torch
    >>> cell = CudnnCompatibleGRUCell(2)
    >>> h, state = cell(torch.ones(5, 3), cell.zero_state(5))
    >>> tuple(h.shape), state is h, cell.tf_variables()["gates/bias"].tolist()
    ((5, 2), True, [1.0, 1.0, 1.0, 1.0])
    """

    scope_name: ClassVar[str] = tf_names.GRU_CELL
    rnn_mode = CUDNN_GRU
    # TF's creation order: the gates, then the candidate's two kernels, then their two biases.
    _variables: ClassVar[tuple[_Var, ...]] = (
        _Var(tf_names.GATES_KERNEL, ((1, 1), (0, _GRU_GATES)), "glorot"),
        _Var(tf_names.GATES_BIAS, ((0, _GRU_GATES),), "ones"),
        _Var(tf_names.CANDIDATE_INPUT_KERNEL, ((1, 0), (0, 1)), "glorot"),
        _Var(tf_names.CANDIDATE_HIDDEN_KERNEL, ((0, 1), (0, 1)), "glorot"),
        _Var(tf_names.CANDIDATE_INPUT_BIAS, ((0, 1),), "zeros"),
        _Var(tf_names.CANDIDATE_HIDDEN_BIAS, ((0, 1),), "zeros"),
    )

    def __init__(
        self,
        num_units: int,
        reuse: object = None,
        kernel_initializer: Initializer | None = None,
        *,
        dtype: torch.dtype | str = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(num_units, dtype=dtype, device=device)
        if kernel_initializer is not None and not callable(kernel_initializer):
            raise TypeError(
                f"{self._owner}: kernel_initializer must be None or a callable "
                f"(shape, dtype) -> Tensor, got {_describe(kernel_initializer)}."
            )
        self._kernel_initializer = kernel_initializer

    def _initial_value(self, var: _Var, shape: tuple[int, ...]) -> Tensor:
        if not var.is_kernel or self._kernel_initializer is None:
            return super()._initial_value(var, shape)
        value = self._kernel_initializer(shape, self._dtype)
        if not isinstance(value, Tensor):
            raise TypeError(
                f"{self._owner}: kernel_initializer must return a torch.Tensor, got "
                f"{_describe(value)} for {var.name!r}."
            )
        if tuple(value.shape) != shape:
            raise ValueError(
                f"{self._owner}: kernel_initializer returned shape {tuple(value.shape)} for "
                f"{var.name!r}, expected {shape}."
            )
        # A fresh tensor: the variable must not alias what the initializer returned.
        return torch.empty(shape, dtype=self._dtype).copy_(value.detach())

    def forward(self, inputs: Tensor, state: State) -> tuple[Tensor, Tensor]:
        x, (h,) = self._check_call(inputs, state)
        p, n = self._param, tf_names
        gates = torch.sigmoid(torch.addmm(p(n.GATES_BIAS), torch.cat([x, h], 1), p(n.GATES_KERNEL)))
        g = dict(zip(GATE_ORDERS["tf"][CUDNN_GRU], gates.chunk(_GRU_GATES, dim=1)))
        hidden = torch.addmm(p(n.CANDIDATE_HIDDEN_BIAS), h, p(n.CANDIDATE_HIDDEN_KERNEL))
        candidate = torch.tanh(
            torch.addmm(p(n.CANDIDATE_INPUT_BIAS), x, p(n.CANDIDATE_INPUT_KERNEL)) + g["r"] * hidden
        )
        new_h = (1 - g["u"]) * candidate + g["u"] * h
        return new_h, new_h

    if TYPE_CHECKING:  # torch types Module.__call__ as returning Any; calling it is forward
        __call__ = forward


_ACTIVATIONS: dict[object, str] = {
    None: "tanh",  # TF's default
    "tanh": "tanh",
    "relu": "relu",
    torch.tanh: "tanh",
    torch.relu: "relu",
    torch.nn.functional.tanh: "tanh",
    torch.nn.functional.relu: "relu",
}


class BasicRNNCell(_TensorStateCell):
    """TF's ``BasicRNNCell``, the cell for cuDNN's ``rnn_tanh`` and ``rnn_relu`` checkpoints.

    One step of cuDNN's ``rnn_tanh`` (``rnn_relu`` with ``activation="relu"``)::

        h = tanh([x, h'] @ kernel + bias)

    ``bias`` is cuDNN's two biases ``bW + bR`` summed: the same outputs as cuDNN's.

    Args:
        activation: ``"tanh"`` or ``"relu"`` (or ``torch.tanh`` / ``torch.relu``, and their
            ``torch.nn.functional`` forms), the two that cuDNN has; None (the default, as TF)
            means tanh. ``rnn_mode`` follows it (``"rnn_tanh"`` or ``"rnn_relu"``). ValueError
            for anything else.

    Inputs:
        ``inputs, state``: ``inputs`` ``(B, I)``, one step of a batch of ``B``; ``state``
        ``(B, H)`` (``H = num_units``; zeros: :meth:`zero_state`).

    Outputs:
        ``h, h``: the new state ``(B, H)``, twice (the output and the next state).

    Example:

    >>> import torch
    >>> cell = BasicRNNCell(3, activation="relu")
    >>> h, _ = cell(torch.ones(2, 4), cell.zero_state(2))
    >>> tuple(h.shape), cell.rnn_mode, bool((h >= 0).all())
    ((2, 3), 'rnn_relu', True)
    """

    scope_name: ClassVar[str] = tf_names.BASIC_RNN_CELL
    _variables: ClassVar[tuple[_Var, ...]] = (
        _Var(tf_names.KERNEL, ((1, 1), (0, 1)), "glorot"),
        _Var(tf_names.BIAS, ((0, 1),), "zeros"),
    )

    def __init__(
        self,
        num_units: int,
        activation: str | Callable[[Tensor], Tensor] | None = None,
        reuse: object = None,
        *,
        dtype: torch.dtype | str = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(num_units, dtype=dtype, device=device)
        try:
            name = _ACTIVATIONS.get(activation)
        except TypeError:  # an unhashable value
            name = None
        if name is None:
            raise ValueError(
                f"{self._owner}: activation must be 'tanh' or 'relu' (or torch.tanh / "
                f"torch.relu; None means tanh), the two that cuDNN has, got {activation!r}."
            )
        self.activation = name
        self.rnn_mode = CUDNN_RNN_TANH if name == "tanh" else CUDNN_RNN_RELU
        self._act: Callable[[Tensor], Tensor] = torch.tanh if name == "tanh" else torch.relu

    def forward(self, inputs: Tensor, state: State) -> tuple[Tensor, Tensor]:
        x, (h,) = self._check_call(inputs, state)
        kernel, bias = self._param(tf_names.KERNEL), self._param(tf_names.BIAS)
        new_h = self._act(torch.addmm(bias, torch.cat([x, h], 1), kernel))
        return new_h, new_h

    if TYPE_CHECKING:  # torch types Module.__call__ as returning Any; calling it is forward
        __call__ = forward

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, activation={self.activation!r}"


# -- state helpers ------------------------------------------------------------------------------


def _zeros(size: StateSize, batch: int, dtype: torch.dtype, device: torch.device) -> State:
    if isinstance(size, int):
        return torch.zeros(batch, size, dtype=dtype, device=device)
    parts = [_zeros(s, batch, dtype, device) for s in size]
    return LSTMStateTuple(*parts) if isinstance(size, LSTMStateTuple) else tuple(parts)
