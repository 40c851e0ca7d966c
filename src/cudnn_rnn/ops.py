"""Op-level API of ``tf.contrib.cudnn_rnn``: explicit ``input_size`` and an opaque ``params``.

Legend used in every docstring: ``T`` time steps, ``B`` batch, ``I`` input_size, ``H`` num_units,
``P`` num_proj, ``Hout = P or H``, ``D`` num_dirs (1 or 2), ``L`` num_layers.

* ``input_data``: ``[T, B, I]`` (``[B, T, I]`` with ``time_major=False``)
* ``input_h``: ``[L*D, B, Hout]``, index ``layer * D + dir``, whatever ``time_major`` is
* ``input_c`` (LSTM): ``[L*D, B, H]``
* ``params``: 1-D, ``params_size()`` elements, the op's dtype
* ``sequence_lengths``: ``[B]`` integers in ``[1, T]``
* ``output``: ``[T, B, D*Hout]`` (``[B, T, D*Hout]`` with ``time_major=False``), forward half first

Equations (cuDNN; ``σ`` the logistic function, every gate has an input bias ``bW`` and a
recurrent bias ``bR``)::

    rnn_tanh/relu  h = act(W x + bW + R h' + bR)
    lstm           i, f, o = σ(W_g x + bW_g + R_g h' + bR_g)
                   c~ = tanh(W_c x + bW_c + R_c h' + bR_c)
                   c = f * c' + i * c~;  h = o * tanh(c)   (h = W_proj h with num_proj)
    gru            r, u = σ(W_g x + bW_g + R_g h' + bR_g)
                   h~ = tanh(W_h x + bW_h + r * (R_h h' + bR_h));  h = (1 - u) * h~ + u * h'
"""

from __future__ import annotations

import copy
import secrets
from collections.abc import Sequence
from typing import Any, ClassVar, TypeVar, overload

import numpy as np
import torch
from torch import Tensor
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence
from typing_extensions import Self

from cudnn_rnn.core.constants import (
    CUDNN_GRU,
    CUDNN_INPUT_LINEAR_MODE,
    CUDNN_LSTM,
    CUDNN_RNN_RELU,
    CUDNN_RNN_TANH,
    CUDNN_RNN_UNIDIRECTION,
)
from cudnn_rnn.core.layout import Layout, layout_of
from cudnn_rnn.core.spec import RNNSpec, SpecProperties, check_variant_mode
from cudnn_rnn.core.variant import CUDNN, Variant
from cudnn_rnn.operator import EagerPlan, planned_call, rnn
from cudnn_rnn.validation import NUMPY_TO_TORCH, check_dtype, check_lengths

__all__ = ["CudnnGRU", "CudnnLSTM", "CudnnRNNRelu", "CudnnRNNTanh"]

#: The kind of a call's inputs, which its output has too: a padded ``Tensor`` gives a ``Tensor``,
#: a ``PackedSequence`` a ``PackedSequence`` (and, to a type checker, either gives either).
PaddedOrPacked = TypeVar("PaddedOrPacked", Tensor, PackedSequence, Tensor | PackedSequence)


class _CudnnRNN(SpecProperties):
    """Base of the op-level classes; the mode is data (``_rnn_mode``), the code is shared."""

    _rnn_mode: ClassVar[str]

    def __init__(
        self,
        num_layers: int,
        num_units: int,
        input_size: int,
        input_mode: str = CUDNN_INPUT_LINEAR_MODE,
        direction: str = CUDNN_RNN_UNIDIRECTION,
        dtype: torch.dtype | str = torch.float32,
        dropout: float = 0.0,
        seed: int | None = 0,
        num_proj: int | None = None,
        *,
        variant: Variant | None = None,
    ) -> None:
        """Configure the op; the four op classes share this constructor (``num_proj`` is
        ``CudnnLSTM``'s; the others take only None). The op holds no parameters: each call
        takes the ``params`` buffer of :meth:`params_size` elements.

        Args:
            num_layers: ``L``, the number of stacked layers: an int >= 1.
            num_units: ``H``, the hidden size of every layer and direction: an int >= 1.
            input_size: ``I``, the inputs' last dimension: an int >= 1.
            input_mode: how layer 0 takes its input: ``"linear_input"``
                (``CUDNN_INPUT_LINEAR_MODE``, the default: input matrices ``W x``),
                ``"skip_input"`` (``CUDNN_INPUT_SKIP_MODE``: the input is added to every gate
                as is, without input matrices; needs ``input_size == num_units``) or
                ``"auto_select"`` (``CUDNN_INPUT_AUTO_MODE``: skip when ``input_size ==
                num_units``, else linear).
            direction: ``"unidirectional"`` (``CUDNN_RNN_UNIDIRECTION``, the default) or
                ``"bidirectional"`` (``CUDNN_RNN_BIDIRECTION``: ``D = 2``).
            dtype: the dtype of ``params``, inputs and states: ``torch.float16``,
                ``torch.bfloat16``, ``torch.float32`` (the default) or ``torch.float64``, or
                its name (``"float32"``).
            dropout: the probability in ``[0, 1]`` of zeroing each output of a layer before the
                next layer takes it, in calls with ``is_training=True`` only; default 0.
            seed: the seed of the dropout masks (the ``k``-th call with dropout draws masks of
                a seed derived from it and ``k``); default 0, as TF. None draws one from the OS
                (never from torch's global RNG).
            num_proj: (``CudnnLSTM`` only) ``P``, the size of the recurrent projection ``h =
                W_proj (o * tanh(c))``, an int in ``[1, num_units]``. Default None: no
                projection.
            variant: (keyword) what the op computes beyond its mode's cuDNN math
                (:class:`~cudnn_rnn.core.variant.Variant`). Default None: cuDNN's own.

        Raises:
            TypeError: an argument of the wrong type: a size that is not an int (``True`` and
                ``2.0`` included), a mode or direction that is not a str, a dtype that is not a
                ``torch.dtype``, a seed that is not an int or None.
            ValueError: a value out of range: a size below 1, ``num_proj > num_units`` or
                ``num_proj`` for another mode than LSTM, an ``input_mode`` or ``direction`` not
                among the constants, ``dropout`` outside ``[0, 1]``, a dtype other than the
                four, ``"skip_input"`` with ``input_size != num_units``.
        """
        owner = self._owner = f"ops.{type(self).__name__}"
        self._spec = RNNSpec(
            self._rnn_mode,
            num_layers,
            num_units,
            input_size,
            input_mode,
            direction,
            num_proj,
            dropout,
            CUDNN if variant is None else variant,
            owner=owner,
        )
        check_variant_mode(owner, self._rnn_mode, self._spec)
        self._layout: Layout = layout_of(self._spec)
        self._dtype = check_dtype(owner, dtype)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise TypeError(
                f"{owner}: seed must be an int or None, got {type(seed).__name__} {seed!r}."
            )
        # None draws a fresh seed from the OS, never from (or into) torch's global RNG.
        self._seed = secrets.randbits(63) if seed is None else seed
        # Counts the calls with dropout: call k draws the masks of seed k (cudnn_rnn.operator).
        self._dropout_step = torch.zeros((), dtype=torch.int64)
        self._plan: EagerPlan | None = None  # see _forward_zero_state

    def _retyped(self, dtype: torch.dtype, owner: str) -> Self:
        """A copy computing in ``dtype`` that names ``owner`` in errors and shares the dropout
        generators (the layers keep one mask stream across ``.to(dtype)``)."""
        other = copy.copy(self)
        other._dtype, other._owner = dtype, owner
        return other

    # -- properties of the original ------------------------------------------------------------
    def _described_spec(self) -> RNNSpec:
        return self._spec

    @property
    def spec(self) -> RNNSpec:
        """The validated configuration."""
        return self._spec

    @property
    def seed(self) -> int:
        return self._seed

    @property
    def dtype(self) -> torch.dtype:
        return self._dtype

    def params_size(self) -> int:
        """Number of elements of the opaque ``params`` buffer."""
        return self._layout.size

    # -- canonical conversions ------------------------------------------------------------------
    @overload
    def params_to_canonical(self, params: Tensor) -> tuple[list[Tensor], list[Tensor]]: ...
    @overload
    def params_to_canonical(
        self, params: np.ndarray
    ) -> tuple[list[np.ndarray], list[np.ndarray]]: ...
    def params_to_canonical(
        self, params: Tensor | np.ndarray
    ) -> tuple[list[Tensor], list[Tensor]] | tuple[list[np.ndarray], list[np.ndarray]]:
        """Split ``params`` into canonical ``(weights, biases)``, as views (gradients reach it).

        Order: all weights, then all biases; layer 0 fw, layer 0 bw, layer 1 fw, ...; per
        pseudo-layer ``G`` input matrices ``[H, in]``, ``G`` recurrent ``[H, Hout]`` (and
        ``[P, H]`` projection), biases ``G`` input then ``G`` recurrent ``[H]``. Under
        skip_input the layer-0 input matrices are identity matrices (not views: they are not
        stored).
        """
        if isinstance(params, np.ndarray):
            self._check_dtype_of("params", NUMPY_TO_TORCH.get(params.dtype), params.dtype)
            self._check_params_shape(params.shape)
        else:
            self._check_params(params, None)
        return self._layout.unpack(params)

    def canonical_to_params(
        self, weights: Sequence[Tensor | np.ndarray], biases: Sequence[Tensor | np.ndarray]
    ) -> Tensor:
        """Pack canonical ``(weights, biases)`` (torch tensors or NumPy arrays) into ``params``.

        Torch tensors must have the op's dtype and one device (the result's); NumPy arrays of any
        floating dtype are converted to that dtype and device (CPU when all are arrays). The
        result is differentiable with respect to tensor inputs.
        """
        owner = self._owner
        tensors = []
        devices: set[torch.device] = set()  # of the torch tensors given; arrays follow them
        for name, group in (("weights", weights), ("biases", biases)):
            if isinstance(group, (Tensor, np.ndarray)) or not isinstance(group, Sequence):
                raise TypeError(
                    f"{owner}: {name} must be a list of tensors or arrays, got "
                    f"{type(group).__name__}."
                )
            converted = []
            for i, t in enumerate(group):
                if isinstance(t, np.ndarray):
                    if t.dtype.kind != "f":
                        raise TypeError(
                            f"{owner}: {name}[{i}] must be a floating array, got dtype {t.dtype}."
                        )
                    t = torch.as_tensor(t, dtype=self._dtype)
                elif isinstance(t, Tensor):
                    self._check_dtype_of(f"{name}[{i}]", t.dtype, t.dtype)
                    devices.add(t.device)
                else:
                    raise TypeError(
                        f"{owner}: {name}[{i}] must be a torch.Tensor or numpy.ndarray, got "
                        f"{type(t).__name__}."
                    )
                converted.append(t)
            tensors.append(converted)
        if len(devices) > 1:
            raise ValueError(
                f"{owner}: canonical tensors must be on one device, got "
                f"{sorted(map(str, devices))}."
            )
        if devices:
            device = devices.pop()
            tensors = [[t.to(device) for t in group] for group in tensors]
        return self._layout.pack(tensors[0], tensors[1], owner=owner)  # type: ignore[no-any-return]

    # -- forward --------------------------------------------------------------------------------
    def _forward(
        self,
        input_data: PaddedOrPacked,
        input_h: Tensor,
        input_c: Tensor | None,
        params: Tensor,
        is_training: bool,
        sequence_lengths: Any,
        time_major: bool,
        dropout_step: Tensor | None = None,
    ) -> tuple[PaddedOrPacked, Tensor, Tensor | None]:
        """The checked forward pass through the operator (:mod:`cudnn_rnn.operator`).

        ``input_data`` may be a ``PackedSequence`` (then ``sequence_lengths`` must be None, the
        states are in the original batch order and the output is packed like the input).
        ``dropout_step`` is the dropout counter to use (a layer passes its buffer); the op's
        own by default.
        """
        spec, owner = self._spec, self._owner
        is_training, time_major = (
            _traced_flag(flag, name, owner)
            for name, flag in (("is_training", is_training), ("time_major", time_major))
        )
        packed = input_data if isinstance(input_data, PackedSequence) else None
        if packed is not None:
            if sequence_lengths is not None:
                raise ValueError(
                    f"{owner}: a PackedSequence carries its own lengths; pass "
                    "sequence_lengths=None."
                )
            # Padded, time-major, in the caller's batch order (as the states are).
            x, sequence_lengths = pad_packed_sequence(packed)
            time_major = True
        else:
            x = input_data  # type: ignore[assignment]
        x, input_h, input_c = self._autocast(x, input_h, input_c, params)
        x = self._check_tensor("input_data", x, None)
        layout = "[time, batch, input_size]" if time_major else "[batch, time, input_size]"
        if x.dim() != 3 or x.shape[-1] != spec.input_size:
            raise ValueError(
                f"{owner}: input_data must be a 3-D tensor {layout} with input_size="
                f"{spec.input_size} (time_major={time_major}), got shape {tuple(x.shape)}."
            )
        steps, batch = (x.shape[0], x.shape[1]) if time_major else (x.shape[1], x.shape[0])
        if steps == 0:
            raise ValueError(
                f"{owner}: input_data must have at least one step (as torch.nn's RNNs, an "
                f"empty sequence is refused; time_major={time_major}), got shape "
                f"{tuple(x.shape)}."
            )
        device = x.device
        h_shape = (spec.num_states, batch, spec.output_units)
        h = self._check_tensor("input_h", input_h, device)
        self._check_state_shape("input_h", h, h_shape)
        c = None
        if spec.mode == CUDNN_LSTM:
            c = self._check_tensor("input_c", input_c, device)
            self._check_state_shape("input_c", c, (spec.num_states, batch, spec.num_units))
        self._check_params(params, device)
        lengths = self._check_lengths(sequence_lengths, steps, batch)
        xt = x if time_major else x.transpose(0, 1)
        y, h_n, c_n = rnn(
            spec,
            params,
            xt,
            h,
            c,
            lengths,
            training=is_training,
            seed=self._seed,
            dropout_step=self._dropout_step if dropout_step is None else dropout_step,
        )
        if packed is not None:
            order = packed.sorted_indices
            assert lengths is not None  # a PackedSequence always gives them
            y_sorted, sorted_lengths = y, lengths
            if order is not None:
                y_sorted = y.index_select(1, order)
                sorted_lengths = (
                    lengths.index_select(0, order.cpu()) if lengths is not None else None
                )
            data = pack_padded_sequence(y_sorted, sorted_lengths, enforce_sorted=True).data
            return (
                PackedSequence(data, packed.batch_sizes, packed.sorted_indices,
                               packed.unsorted_indices),
                h_n,
                c_n,
            )  # fmt: skip
        return (y if time_major else y.transpose(0, 1)), h_n, c_n

    def _forward_zero_state(
        self, x: PaddedOrPacked, params: Tensor, is_training: Any, time_major: Any
    ) -> tuple[PaddedOrPacked, Tensor, Tensor | None] | None:
        """A layer's call without initial state or lengths, as :meth:`_forward` would make it
        with zero states, through the operator's plan for such calls
        (:func:`~cudnn_rnn.operator.planned_call`: the same engine, the same bits); None
        where the plan does not apply (dropout in force, anything :meth:`_forward` would
        refuse, gradients, compile, autocast, ...), and the caller takes :meth:`_forward`."""
        if type(is_training) is not bool or type(time_major) is not bool:
            return None
        spec = self._spec
        if (is_training and spec.dropout > 0 and spec.num_layers > 1) or (
            params.dtype != self._dtype
        ):
            return None
        done = planned_call(self._plan, spec, params, x, time_major)
        if done is None:
            return None
        self._plan, outputs = done
        return outputs  # type: ignore[return-value]  # (x is a Tensor: planned_call took it)

    def _autocast(self, x: Any, h: Any, c: Any, params: Any) -> tuple[Any, Any, Any]:
        """Under ``torch.autocast`` the op computes in its own dtype: inputs are cast to it."""
        if not isinstance(x, Tensor) or not isinstance(params, Tensor):
            return x, h, c
        try:
            active = torch.is_autocast_enabled(x.device.type)
        except TypeError:  # torch < 2.4: one switch per device kind
            active = (
                torch.is_autocast_cpu_enabled()
                if x.device.type == "cpu"
                else torch.is_autocast_enabled()
            )
        if not active:
            return x, h, c

        def cast(t: Any) -> Any:
            is_float = isinstance(t, Tensor) and t.dtype.is_floating_point
            return t.to(self._dtype) if is_float and t.dtype != self._dtype else t

        return cast(x), cast(h), cast(c)

    # -- validation -------------------------------------------------------------------------------
    def _check_dtype_of(self, name: str, dtype: torch.dtype | None, shown: object) -> None:
        if dtype != self._dtype:
            raise TypeError(
                f"{self._owner}: {name} must have dtype {self._dtype} like the op, got {shown}; "
                f"convert it with .to({self._dtype})."
            )

    def _check_tensor(self, name: str, value: object, device: torch.device | None) -> Tensor:
        if not isinstance(value, Tensor):
            raise TypeError(
                f"{self._owner}: {name} must be a torch.Tensor, got {type(value).__name__}"
                f"{'; wrap it with torch.as_tensor' if isinstance(value, np.ndarray) else ''}."
            )
        self._check_dtype_of(name, value.dtype, value.dtype)
        if device is None or (value.is_cpu and device.type == "cpu"):
            return value  # (the common case without making a device object)
        if value.device != device:
            raise ValueError(
                f"{self._owner}: {name} is on {value.device} but input_data is on {device}; "
                "move them to one device."
            )
        return value

    def _check_state_shape(self, name: str, t: Tensor, expected: tuple[int, ...]) -> None:
        if t.shape != expected:
            raise ValueError(
                f"{self._owner}: {name} must have shape [num_layers * num_dirs, batch, "
                f"{'num_proj' if name == 'input_h' and self._spec.num_proj else 'num_units'}]"
                f" = {expected}, got {tuple(t.shape)}."
            )

    def _check_params_shape(self, shape: Sequence[int]) -> None:
        """``shape`` (a tuple or a ``torch.Size``, compared without converting it: a call's
        hot path) must be ``[params_size()]``."""
        if shape != (self._layout.size,):
            raise ValueError(
                f"{self._owner}: params must be a 1-D buffer of params_size() = "
                f"{self._layout.size} elements, got shape {tuple(shape)}."
            )

    def _check_params(self, params: object, device: torch.device | None) -> None:
        t = self._check_tensor("params", params, device)
        self._check_params_shape(t.shape)

    def _check_lengths(self, lengths: Any, steps: int, batch: int) -> Tensor | None:
        if lengths is None:
            return None
        return check_lengths(self._owner, "sequence_lengths", lengths, steps, batch)


class CudnnLSTM(_CudnnRNN):
    """The cuDNN LSTM op (gates i, f, c, o), optionally with a recurrent projection ``num_proj``.

    Each layer computes at each step (``σ`` the logistic function, ``*`` the elementwise
    product, ``h'`` and ``c'`` the previous step's state; two biases per gate)::

        i, f, o = σ(W_g x + bW_g + R_g h' + bR_g)        for g = i, f, o
        c~ = tanh(W_c x + bW_c + R_c h' + bR_c)
        c = f * c' + i * c~
        h = o * tanh(c)                                   (num_proj: h = W_proj (o * tanh(c)))

    These differ from ``torch.nn.LSTM``'s nowhere.

    Inputs:
        ``input_data, input_h, input_c, params``, then ``is_training=True, sequence_lengths=None,
        time_major=True``:

        * ``input_data``: ``(T, B, I)``, ``(B, T, I)`` with ``time_major=False``, or a
          ``PackedSequence``.
        * ``input_h``: ``(L * D, B, Hout)``, index ``layer * D + direction``.
        * ``input_c``: ``(L * D, B, H)``.
        * ``params``: the opaque buffer, 1-D, :meth:`params_size` elements of the op's dtype.
        * ``sequence_lengths``: ``(B,)`` ints in ``[1, T]``.

        ``T`` time steps, ``B`` batch, ``I`` input_size, ``L`` num_layers, ``D`` 2 if
        bidirectional else 1, ``Hout = num_proj or H``.

    Outputs:
        ``output, output_h, output_c``: ``output`` ``(T, B, D * Hout)`` (``(B, T, D * Hout)`` with
        ``time_major=False``; a ``PackedSequence`` for one), the forward direction's half
        first; ``output_h`` ``(L * D, B, Hout)``, ``output_c`` ``(L * D, B, H)``.

    Attributes:
        spec: the validated configuration (an :class:`~cudnn_rnn.core.spec.RNNSpec`).
        dtype: the dtype of ``params``.

    Example:

    >>> import torch
    >>> lstm = CudnnLSTM(num_layers=2, num_units=4, input_size=3)
    >>> params = torch.zeros(lstm.params_size())
    >>> x, h, c = torch.ones(5, 2, 3), torch.zeros(2, 2, 4), torch.zeros(2, 2, 4)
    >>> out, h_n, c_n = lstm(x, h, c, params)
    >>> tuple(out.shape), tuple(h_n.shape), float(out.abs().max())
    ((5, 2, 4), (2, 2, 4), 0.0)
    """

    _rnn_mode = CUDNN_LSTM

    def __call__(
        self,
        input_data: PaddedOrPacked,
        input_h: Tensor,
        input_c: Tensor,
        params: Tensor,
        is_training: bool = True,
        sequence_lengths: Any = None,
        time_major: bool = True,
    ) -> tuple[PaddedOrPacked, Tensor, Tensor]:
        """Run the LSTM; returns ``(output, output_h, output_c)`` (shapes in the module legend)."""
        out, h, c = self._forward(
            input_data, input_h, input_c, params, is_training, sequence_lengths, time_major
        )
        assert c is not None
        return out, h, c


class _CudnnRNNNoInputC(_CudnnRNN):
    """The modes without a cell state: GRU, RNN-tanh, RNN-relu."""

    def __init__(
        self,
        num_layers: int,
        num_units: int,
        input_size: int,
        input_mode: str = CUDNN_INPUT_LINEAR_MODE,
        direction: str = CUDNN_RNN_UNIDIRECTION,
        dtype: torch.dtype | str = torch.float32,
        dropout: float = 0.0,
        seed: int | None = 0,
        num_proj: None = None,
        *,
        variant: Variant | None = None,
    ) -> None:
        # num_proj is accepted only to reject it with a clear message (projection is LSTM-only).
        super().__init__(
            num_layers, num_units, input_size, input_mode, direction, dtype, dropout, seed,
            num_proj, variant=variant,
        )  # fmt: skip

    def __call__(
        self,
        input_data: PaddedOrPacked,
        input_h: Tensor,
        params: Tensor,
        is_training: bool = True,
        sequence_lengths: Any = None,
        time_major: bool = True,
    ) -> tuple[PaddedOrPacked, Tensor]:
        """Run the RNN; returns ``(output, output_h)`` (shapes in the module legend)."""
        out, h, _ = self._forward(
            input_data, input_h, None, params, is_training, sequence_lengths, time_major
        )
        return out, h


class CudnnGRU(_CudnnRNNNoInputC):
    """The cuDNN GRU op (gates r, u, h; the recurrent bias ``bR_h`` inside the reset product).

    Each layer computes at each step (``σ`` the logistic function, ``*`` the elementwise
    product, ``h'`` and ``c'`` the previous step's state; two biases per gate)::

        r, u = σ(W_g x + bW_g + R_g h' + bR_g)           for g = r, u
        h~ = tanh(W_h x + bW_h + r * (R_h h' + bR_h))
        h = (1 - u) * h~ + u * h'

    The reset gate multiplies the recurrent product: cuDNN's and ``torch.nn.GRU``'s GRU,
    not TF's ``GRUCell`` (``R_h (r * h')``).

    Inputs:
        ``input_data, input_h, params``, then ``is_training=True, sequence_lengths=None,
        time_major=True``:

        * ``input_data``: ``(T, B, I)``, ``(B, T, I)`` with ``time_major=False``, or a
          ``PackedSequence``.
        * ``input_h``: ``(L * D, B, H)``, index ``layer * D + direction``.
        * ``params``: the opaque buffer, 1-D, :meth:`params_size` elements of the op's dtype.
        * ``sequence_lengths``: ``(B,)`` ints in ``[1, T]``.

        ``T`` time steps, ``B`` batch, ``I`` input_size, ``L`` num_layers, ``D`` 2 if
        bidirectional else 1, ``H = num_units``.

    Outputs:
        ``output, output_h``: ``output`` ``(T, B, D * H)`` (``(B, T, D * H)`` with
        ``time_major=False``; a ``PackedSequence`` for one), the forward direction's half
        first; ``output_h`` ``(L * D, B, H)``.

    Attributes:
        spec: the validated configuration (an :class:`~cudnn_rnn.core.spec.RNNSpec`).
        dtype: the dtype of ``params``.

    Example:

    >>> import torch
    >>> gru = CudnnGRU(num_layers=1, num_units=2, input_size=2, direction="bidirectional")
    >>> out, h_n = gru(torch.ones(3, 1, 2), torch.zeros(2, 1, 2), torch.zeros(gru.params_size()))
    >>> tuple(out.shape), gru.params_size()
    ((3, 1, 4), 72)
    """

    _rnn_mode = CUDNN_GRU


class CudnnRNNTanh(_CudnnRNNNoInputC):
    """The cuDNN RNN op with tanh: ``h = tanh(W x + bW + R h' + bR)``.

    Each layer computes at each step (``σ`` the logistic function, ``*`` the elementwise
    product, ``h'`` and ``c'`` the previous step's state; two biases per gate)::

        h = tanh(W x + bW + R h' + bR)

    Inputs:
        ``input_data, input_h, params``, then ``is_training=True, sequence_lengths=None,
        time_major=True``:

        * ``input_data``: ``(T, B, I)``, ``(B, T, I)`` with ``time_major=False``, or a
          ``PackedSequence``.
        * ``input_h``: ``(L * D, B, H)``, index ``layer * D + direction``.
        * ``params``: the opaque buffer, 1-D, :meth:`params_size` elements of the op's dtype.
        * ``sequence_lengths``: ``(B,)`` ints in ``[1, T]``.

        ``T`` time steps, ``B`` batch, ``I`` input_size, ``L`` num_layers, ``D`` 2 if
        bidirectional else 1, ``H = num_units``.

    Outputs:
        ``output, output_h``: ``output`` ``(T, B, D * H)`` (``(B, T, D * H)`` with
        ``time_major=False``; a ``PackedSequence`` for one), the forward direction's half
        first; ``output_h`` ``(L * D, B, H)``.

    Attributes:
        spec: the validated configuration (an :class:`~cudnn_rnn.core.spec.RNNSpec`).
        dtype: the dtype of ``params``.

    Example:

    >>> CudnnRNNTanh(num_layers=2, num_units=7, input_size=3).params_size()
    196
    """

    _rnn_mode = CUDNN_RNN_TANH


class CudnnRNNRelu(_CudnnRNNNoInputC):
    """The cuDNN RNN op with ReLU: ``h = max(0, W x + bW + R h' + bR)``.

    Each layer computes at each step (``σ`` the logistic function, ``*`` the elementwise
    product, ``h'`` and ``c'`` the previous step's state; two biases per gate)::

        h = max(0, W x + bW + R h' + bR)

    Inputs:
        ``input_data, input_h, params``, then ``is_training=True, sequence_lengths=None,
        time_major=True``:

        * ``input_data``: ``(T, B, I)``, ``(B, T, I)`` with ``time_major=False``, or a
          ``PackedSequence``.
        * ``input_h``: ``(L * D, B, H)``, index ``layer * D + direction``.
        * ``params``: the opaque buffer, 1-D, :meth:`params_size` elements of the op's dtype.
        * ``sequence_lengths``: ``(B,)`` ints in ``[1, T]``.

        ``T`` time steps, ``B`` batch, ``I`` input_size, ``L`` num_layers, ``D`` 2 if
        bidirectional else 1, ``H = num_units``.

    Outputs:
        ``output, output_h``: ``output`` ``(T, B, D * H)`` (``(B, T, D * H)`` with
        ``time_major=False``; a ``PackedSequence`` for one), the forward direction's half
        first; ``output_h`` ``(L * D, B, H)``.

    Attributes:
        spec: the validated configuration (an :class:`~cudnn_rnn.core.spec.RNNSpec`).
        dtype: the dtype of ``params``.

    Example:

    >>> CudnnRNNRelu(num_layers=1, num_units=4, input_size=4, input_mode="skip_input").params_size()
    24
    """

    _rnn_mode = CUDNN_RNN_RELU


def _traced_flag(flag: object, name: str, owner: str) -> bool:
    """``flag`` as the bool it must be. The TorchScript tracer (``torch.onnx.export(...,
    dynamo=False)`` of a layer itself) passes ``forward``'s default arguments as 0-d tensors:
    such a bool tensor is read as its value (it is a constant of the trace)."""
    if (
        isinstance(flag, Tensor)
        and flag.dim() == 0
        and flag.dtype == torch.bool
        and torch._C._get_tracing_state() is not None
    ):
        return bool(flag)
    if not isinstance(flag, bool):
        raise TypeError(f"{owner}: {name} must be a bool, got {type(flag).__name__} {flag!r}.")
    return flag
