"""Layer-level API of ``tf.contrib.cudnn_rnn``: ``nn.Module``s that own their opaque kernel.

Legend: ``T`` time steps, ``B`` batch, ``I`` input size, ``H`` num_units, ``P`` num_proj,
``Hout = P or H``, ``D`` num_dirs, ``L`` num_layers.

* ``inputs``: ``[T, B, I]`` (``[B, T, I]`` with ``time_major=False``)
* ``initial_state``: a tuple ``(h, c)`` (LSTM) or ``(h,)``; ``h`` is ``[L*D, B, Hout]``, ``c`` is
  ``[L*D, B, H]``; zeros when omitted
* ``outputs``: ``[T, B, D*Hout]`` (``[B, T, D*Hout]`` with ``time_major=False``)

The layer is built (its one parameter ``opaque_kernel`` sized and initialised) from the input
size: at construction when ``input_size`` is given, else on the first call, by
``build(input_shape)`` or by loading a ``state_dict``. Until then ``opaque_kernel`` is a
``torch.nn.parameter.UninitializedParameter``, as in torch's lazy modules (``nn.LazyLinear``):
``parameters()`` lists it, ``.to(dtype/device)`` moves it, and the build materialises that same
object in place, so an optimizer made before the first call trains it. Its ``state_dict`` holds
exactly ``{"opaque_kernel": 1-D tensor}`` (the uninitialised parameter before the build); the
canonical, portable form is what :attr:`saveable` and :mod:`cudnn_rnn.checkpoint` write.

Default initialisation follows the original: Glorot-uniform drawn separately for each canonical
weight matrix (limit ``sqrt(6 / (rows + cols))``), all biases (both ``bW`` and ``bR``) zero. With
a ``seed`` the draw is reproducible (a generator of its own, not torch's global RNG; without one
the global RNG is used, as torch.nn does). Unlike TF1,
equal shapes do not get identical values (TF1 re-ran the same seeded op per matrix, so its gate
matrices started equal).
"""

from __future__ import annotations

from typing import Any

import torch

from cudnn_rnn import ops
from cudnn_rnn.core.constants import (
    CUDNN_GRU,
    CUDNN_INPUT_LINEAR_MODE,
    CUDNN_LSTM,
    CUDNN_RNN_RELU,
    CUDNN_RNN_TANH,
    CUDNN_RNN_UNIDIRECTION,
)
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.core.variant import Variant

# (the base class re-exported: the converters and the command line name it from here)
from cudnn_rnn.layer_base import Initializer
from cudnn_rnn.layer_base import _CudnnRNN as _CudnnRNN

__all__ = ["LAYER_CLASSES", "CudnnGRU", "CudnnLSTM", "CudnnRNNRelu", "CudnnRNNTanh", "layer_of"]


class CudnnLSTM(_CudnnRNN):
    """Fused cuDNN LSTM layer (gates i, f, c, o; optional projection ``num_proj``).

    A multi-layer LSTM with cuDNN's math: every gate has an input bias ``bW`` and a recurrent
    bias ``bR``, and each layer computes at each step (``σ`` the logistic function, ``*`` the
    elementwise product, ``h'`` and ``c'`` the previous step's state)::

        i, f, o = σ(W_g x + bW_g + R_g h' + bR_g)        for g = i, f, o
        c~ = tanh(W_c x + bW_c + R_c h' + bR_c)
        c = f * c' + i * c~
        h = o * tanh(c)                                   (num_proj: h = W_proj (o * tanh(c)))

    The input ``x`` of layer ``k > 0`` is layer ``k - 1``'s ``h`` (with ``dropout`` in
    training).

    These differ from ``torch.nn.LSTM``'s nowhere (torch's gates ``i, f, g, o`` are cuDNN's
    ``i, f, c, o``).

    Inputs:
        ``inputs, initial_state=None, sequence_lengths=None, time_major=True, training=None``:

        * ``inputs``: ``(T, B, I)``, or ``(B, T, I)`` with ``time_major=False``; or a
          ``PackedSequence``. The first call builds an unbuilt layer from ``I``.
        * ``initial_state``: a tuple ``(h, c)``, zeros when None; ``h``: ``(L * D, B, Hout)``,
          index ``layer * D + direction``, whatever ``time_major`` is; ``c``: ``(L * D, B, H)``.
        * ``sequence_lengths``: ``(B,)`` ints in ``[1, T]``: outputs past a length are 0 and
          the final state is each sequence's last valid step's.
        * ``training``: dropout applies when True; None: ``self.training``.

        ``T`` time steps, ``B`` batch, ``I`` input size, ``L`` num_layers, ``D`` 2 if
        bidirectional else 1, ``Hout = num_proj or H``.

    Outputs:
        ``outputs, (h_n, c_n)``: ``outputs`` ``(T, B, D * Hout)`` (``(B, T, D * Hout)``
        with ``time_major=False``; a ``PackedSequence`` for one), the forward direction's
        half first; ``h_n`` ``(L * D, B, Hout)``, ``c_n`` ``(L * D, B, H)``.

    Attributes:
        opaque_kernel: the one ``nn.Parameter``, 1-D, all weights then all biases in canonical
            order (an ``UninitializedParameter`` until the build).
        saveable: the canonical-format saveable bound to ``opaque_kernel``.
        input_size: ``I``, known once built.

    Example:

    >>> import torch
    >>> layer = CudnnLSTM(num_layers=2, num_units=4, seed=0)
    >>> outputs, (h, c) = layer(torch.ones(5, 3, 2))
    >>> tuple(outputs.shape), tuple(h.shape), layer.input_size, layer.count_params()
    ((5, 3, 4), (2, 3, 4), 2, 288)
    """

    _rnn_mode = CUDNN_LSTM
    _op_cls = ops.CudnnLSTM
    _saveable_cls_name = "CudnnLSTMSaveable"


class _CudnnRNNNoInputC(_CudnnRNN):
    def __init__(
        self,
        num_layers: int,
        num_units: int,
        input_mode: str = CUDNN_INPUT_LINEAR_MODE,
        direction: str = CUDNN_RNN_UNIDIRECTION,
        dropout: float = 0.0,
        seed: int | None = None,
        dtype: torch.dtype | str = torch.float32,
        kernel_initializer: Initializer | None = None,
        bias_initializer: Initializer | None = None,
        name: str | None = None,
        *,
        input_size: int | None = None,
        scope: str | None = None,
        device: torch.device | str | None = None,
        variant: Variant | None = None,
    ) -> None:
        super().__init__(
            num_layers,
            num_units,
            input_mode,
            direction,
            dropout,
            seed,
            dtype,
            kernel_initializer,
            bias_initializer,
            name,
            input_size=input_size,
            scope=scope,
            device=device,
            variant=variant,
        )


class CudnnGRU(_CudnnRNNNoInputC):
    """Fused cuDNN GRU layer (gates r, u, h; recurrent new-memory bias inside the reset product).

    A multi-layer GRU with cuDNN's math, which is ``torch.nn.GRU``'s. Each layer computes at
    each step (``σ`` the logistic function, ``*`` the elementwise product, ``h'`` the previous
    step's state)::

        r, u = σ(W_g x + bW_g + R_g h' + bR_g)           for g = r, u
        h~ = tanh(W_h x + bW_h + r * (R_h h' + bR_h))
        h = (1 - u) * h~ + u * h'

    The input ``x`` of layer ``k > 0`` is layer ``k - 1``'s ``h`` (with ``dropout`` in
    training).

    The reset gate ``r`` multiplies the recurrent product ``R_h h' + bR_h``: that is
    where cuDNN (and ``torch.nn.GRU``) differs from TF's ``GRUCell``, which computes
    ``R_h (r * h')``; :class:`CudnnCompatibleGRUCell` is the step cell with this math.

    Inputs:
        ``inputs, initial_state=None, sequence_lengths=None, time_major=True, training=None``:

        * ``inputs``: ``(T, B, I)``, or ``(B, T, I)`` with ``time_major=False``; or a
          ``PackedSequence``. The first call builds an unbuilt layer from ``I``.
        * ``initial_state``: a tuple ``(h,)``, zeros when None; ``h``: ``(L * D, B, H)``,
          index ``layer * D + direction``, whatever ``time_major`` is.
        * ``sequence_lengths``: ``(B,)`` ints in ``[1, T]``: outputs past a length are 0 and
          the final state is each sequence's last valid step's.
        * ``training``: dropout applies when True; None: ``self.training``.

        ``T`` time steps, ``B`` batch, ``I`` input size, ``L`` num_layers, ``D`` 2 if
        bidirectional else 1, ``H = num_units``.

    Outputs:
        ``outputs, (h_n,)``: ``outputs`` ``(T, B, D * H)`` (``(B, T, D * H)``
        with ``time_major=False``; a ``PackedSequence`` for one), the forward direction's
        half first; ``h_n`` ``(L * D, B, H)``.

    Attributes:
        opaque_kernel: the one ``nn.Parameter``, 1-D, all weights then all biases in canonical
            order (an ``UninitializedParameter`` until the build).
        saveable: the canonical-format saveable bound to ``opaque_kernel``.
        input_size: ``I``, known once built.

    Example:

    >>> import torch
    >>> outputs, (h,) = CudnnGRU(1, 3, direction="bidirectional")(torch.ones(4, 2, 5))
    >>> tuple(outputs.shape), tuple(h.shape)
    ((4, 2, 6), (2, 2, 3))
    """

    _rnn_mode = CUDNN_GRU
    _op_cls = ops.CudnnGRU
    _saveable_cls_name = "CudnnGRUSaveable"


class CudnnRNNTanh(_CudnnRNNNoInputC):
    """Fused RNN layer with tanh: ``h = tanh(W x + bW + R h' + bR)``.

    A multi-layer RNN with cuDNN's math (two biases), which is ``torch.nn.RNN``'s. Each layer
    computes at each step (``h'`` the previous step's state)::

        h = tanh(W x + bW + R h' + bR)

    The input ``x`` of layer ``k > 0`` is layer ``k - 1``'s ``h`` (with ``dropout`` in
    training).

    Inputs:
        ``inputs, initial_state=None, sequence_lengths=None, time_major=True, training=None``:

        * ``inputs``: ``(T, B, I)``, or ``(B, T, I)`` with ``time_major=False``; or a
          ``PackedSequence``. The first call builds an unbuilt layer from ``I``.
        * ``initial_state``: a tuple ``(h,)``, zeros when None; ``h``: ``(L * D, B, H)``,
          index ``layer * D + direction``, whatever ``time_major`` is.
        * ``sequence_lengths``: ``(B,)`` ints in ``[1, T]``: outputs past a length are 0 and
          the final state is each sequence's last valid step's.
        * ``training``: dropout applies when True; None: ``self.training``.

        ``T`` time steps, ``B`` batch, ``I`` input size, ``L`` num_layers, ``D`` 2 if
        bidirectional else 1, ``H = num_units``.

    Outputs:
        ``outputs, (h_n,)``: ``outputs`` ``(T, B, D * H)`` (``(B, T, D * H)``
        with ``time_major=False``; a ``PackedSequence`` for one), the forward direction's
        half first; ``h_n`` ``(L * D, B, H)``.

    Attributes:
        opaque_kernel: the one ``nn.Parameter``, 1-D, all weights then all biases in canonical
            order (an ``UninitializedParameter`` until the build).
        saveable: the canonical-format saveable bound to ``opaque_kernel``.
        input_size: ``I``, known once built.

    Example:

    >>> CudnnRNNTanh(2, 7, input_size=3).count_params()
    196
    """

    _rnn_mode = CUDNN_RNN_TANH
    _op_cls = ops.CudnnRNNTanh
    _saveable_cls_name = "CudnnRNNTanhSaveable"


class CudnnRNNRelu(_CudnnRNNNoInputC):
    """Fused RNN layer with ReLU: ``h = max(0, W x + bW + R h' + bR)``.

    A multi-layer RNN with cuDNN's math (two biases), which is ``torch.nn.RNN``'s with
    ``nonlinearity="relu"``. Each layer computes at each step (``h'`` the previous step's
    state)::

        h = max(0, W x + bW + R h' + bR)

    The input ``x`` of layer ``k > 0`` is layer ``k - 1``'s ``h`` (with ``dropout`` in
    training).

    Inputs:
        ``inputs, initial_state=None, sequence_lengths=None, time_major=True, training=None``:

        * ``inputs``: ``(T, B, I)``, or ``(B, T, I)`` with ``time_major=False``; or a
          ``PackedSequence``. The first call builds an unbuilt layer from ``I``.
        * ``initial_state``: a tuple ``(h,)``, zeros when None; ``h``: ``(L * D, B, H)``,
          index ``layer * D + direction``, whatever ``time_major`` is.
        * ``sequence_lengths``: ``(B,)`` ints in ``[1, T]``: outputs past a length are 0 and
          the final state is each sequence's last valid step's.
        * ``training``: dropout applies when True; None: ``self.training``.

        ``T`` time steps, ``B`` batch, ``I`` input size, ``L`` num_layers, ``D`` 2 if
        bidirectional else 1, ``H = num_units``.

    Outputs:
        ``outputs, (h_n,)``: ``outputs`` ``(T, B, D * H)`` (``(B, T, D * H)``
        with ``time_major=False``; a ``PackedSequence`` for one), the forward direction's
        half first; ``h_n`` ``(L * D, B, H)``.

    Attributes:
        opaque_kernel: the one ``nn.Parameter``, 1-D, all weights then all biases in canonical
            order (an ``UninitializedParameter`` until the build).
        saveable: the canonical-format saveable bound to ``opaque_kernel``.
        input_size: ``I``, known once built.

    Example:

    >>> CudnnRNNRelu(1, 4, input_mode="auto_select", input_size=4).count_params()
    24
    """

    _rnn_mode = CUDNN_RNN_RELU
    _op_cls = ops.CudnnRNNRelu
    _saveable_cls_name = "CudnnRNNReluSaveable"


#: Our mode -> our layer class.
LAYER_CLASSES: dict[str, type[_CudnnRNN]] = {
    CUDNN_LSTM: CudnnLSTM,
    CUDNN_GRU: CudnnGRU,
    CUDNN_RNN_TANH: CudnnRNNTanh,
    CUDNN_RNN_RELU: CudnnRNNRelu,
}


def layer_of(spec: RNNSpec, **kwargs: Any) -> _CudnnRNN:
    """A layer of ``spec``'s configuration (built when ``spec.input_size`` is set).

    ``kwargs`` go to the constructor (``dtype``, ``device``, ``seed``, ``kernel_initializer``...).
    """
    extra: dict[str, Any] = {"num_proj": spec.num_proj} if spec.num_proj is not None else {}
    if not spec.variant.is_cudnn:
        extra["variant"] = spec.variant
    return LAYER_CLASSES[spec.mode](
        spec.num_layers,
        spec.num_units,
        input_mode=spec.input_mode,
        direction=spec.direction,
        dropout=spec.dropout,
        input_size=spec.input_size,
        **extra,
        **kwargs,
    )
