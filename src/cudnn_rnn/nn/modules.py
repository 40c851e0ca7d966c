"""``cudnn_rnn.nn.LSTM``, ``GRU`` and ``RNN``: torch.nn's classes on our operator and engines.

Each keeps torch.nn's contract for its class: the constructor (its arguments, checks and
messages: a torch.nn module is built on the ``meta`` device to check them), the parameters and
their names and order (``state_dict`` loads in both directions with torch.nn checkpoints),
torch's default initialisation (the same values after the same ``torch.manual_seed``),
``all_weights``, ``flatten_parameters()``, ``repr``, pickling, deepcopy, ``.to()``,
``.half()``, ``.double()``; the checks of ``forward`` are torch.nn's own methods, and what
torch.nn leaves to its kernels is checked before our engines run (:mod:`cudnn_rnn.nn._checks`),
with torch.nn's exceptions and messages that say how to fix it. They do not subclass
torch.nn's classes: ``torch.compile`` refuses to trace any subclass of
``torch.nn.LSTM``/``GRU``/``RNN`` (dynamo's ``allow_rnn``), which is the point of these, so
``isinstance(m, torch.nn.LSTM)`` is false (:func:`cudnn_rnn.nn.is_rnn` answers for both).
What changes is underneath:

* the parameters are views into one opaque buffer (:mod:`cudnn_rnn.nn._flat`), the buffer the
  operator takes, so a call copies no weight; ``flatten_parameters()`` makes the buffer again
  (after ``.to()``, ``.half()``, unpickling, a parameter replaced; with torch.nn's warning
  where a parameter's ``.data`` was reassigned behind its back);
* ``forward`` takes torch.nn's arguments and returns what torch.nn returns (batched and
  unbatched input, ``hx`` omitted or given, ``PackedSequence`` in and out) and runs the one
  operator ``cudnn_rnn::rnn``: the native CPU engine for float32, cuDNN on CUDA, by the same
  rule as every other call of the package (:mod:`cudnn_rnn.engines`); so it compiles with
  ``torch.compile(fullgraph=True)``, runs under ``vmap`` and exports to ONNX;
* dropout (training, ``num_layers > 1``) draws each call's masks from a seed taken from torch's
  global generator, so ``torch.manual_seed`` reproduces a run (the masks are not torch.nn's).

Under ``torch.autocast`` the call computes in the parameters' dtype (inputs are cast to it),
where torch.nn would compute in the lower precision.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch import nn as tnn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from cudnn_rnn.core.constants import CUDNN_GRU, CUDNN_LSTM, CUDNN_RNN_RELU, CUDNN_RNN_TANH
from cudnn_rnn.core.layout import layout_of
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.nn import _checks, _flat
from cudnn_rnn.operator import rnn
from cudnn_rnn.validation import check_lengths

__all__ = ["GRU", "LSTM", "RNN"]

#: torch.nn's mode names and ours.
MODES = {
    "LSTM": CUDNN_LSTM,
    "GRU": CUDNN_GRU,
    "RNN_TANH": CUDNN_RNN_TANH,
    "RNN_RELU": CUDNN_RNN_RELU,
}
#: What torch.nn's forward says of an input that is neither 2-D nor 3-D, per class.
_NOT_2D_3D = {
    "LSTM": "LSTM: Expected input to be 2D or 3D, got {}D instead",
    "GRU": "GRU: Expected input to be 2D or 3D, got {}D instead",
    "RNN_TANH": "RNN: Expected input to be 2D or 3D, got {}D tensor instead",
    "RNN_RELU": "RNN: Expected input to be 2D or 3D, got {}D tensor instead",
}
#: The attributes a torch.nn RNN's constructor sets that ours copies from it.
_CONFIG = (
    "mode", "input_size", "hidden_size", "num_layers", "bias", "batch_first", "dropout",
    "bidirectional", "proj_size", "nonlinearity", "_flat_weights_names", "_all_weights",
)  # fmt: skip


def spec_of(module: Any) -> RNNSpec:
    """The configuration of a torch.nn RNN (ours or torch's) as our spec."""
    return RNNSpec(
        MODES[module.mode],
        module.num_layers,
        module.hidden_size,
        module.input_size,
        direction="bidirectional" if module.bidirectional else "unidirectional",
        num_proj=module.proj_size or None,
        dropout=module.dropout,
        owner=type(module).__name__,
    )


def checked(torch_class: type[tnn.Module], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """torch.nn's module of these arguments on the ``meta`` device (no memory, no random
    numbers drawn): torch.nn's own checks, exceptions and warnings, and its configuration."""
    meta = {**kwargs, "device": "meta"} if "device" in kwargs else kwargs
    with torch.device("meta"):
        return torch_class(*args, **meta)


def placed(reference: tnn.Module, kwargs: dict[str, Any]) -> tuple[torch.device, torch.dtype]:
    """The device and dtype the caller asked for (torch's default device where none was)."""
    first = next(reference.parameters())
    asked = kwargs.get("device")
    if asked is not None:
        return torch.device(asked), first.dtype
    device = first.device  # meta, unless given by position
    return (torch.get_default_device() if device.type == "meta" else device), first.dtype


def own_parameters(
    module: tnn.Module, names: list[str], shapes: list[tuple[int, ...]], flat: Tensor, blocks: Any
) -> None:
    """Register each named parameter as a view of its block of ``flat``."""
    for name, shape, block in zip(names, shapes, blocks):
        assert tuple(block.shape) == tuple(shape), (name, block, shape)
        tnn.Module.__setattr__(module, name, tnn.Parameter(_flat.view(flat, block)))


class _Fused(tnn.Module):
    """What the three classes share: torch.nn's configuration, the buffer, the forward (the
    mode is data). torch.nn's methods that need no ``super()`` are torch.nn's own."""

    _torch_class: type[tnn.RNNBase] = tnn.RNNBase
    mode: str
    input_size: int
    hidden_size: int
    num_layers: int
    bias: bool
    batch_first: bool
    dropout: float
    bidirectional: bool
    proj_size: int
    _flat: Tensor | None
    _flat_weights: list[Tensor | None]
    _flat_weights_names: list[str]

    check_input: Any = tnn.RNNBase.check_input
    get_expected_hidden_size: Any = tnn.RNNBase.get_expected_hidden_size
    check_hidden_size: Any = tnn.RNNBase.check_hidden_size
    check_forward_args: Any = tnn.RNNBase.check_forward_args
    permute_hidden: Any = tnn.RNNBase.permute_hidden
    extra_repr: Any = tnn.RNNBase.extra_repr
    reset_parameters: Any = tnn.RNNBase.reset_parameters
    _weights_have_changed: Any = tnn.RNNBase._weights_have_changed
    _update_flat_weights: Any = tnn.RNNBase._update_flat_weights
    _init_flat_weights: Any = tnn.RNNBase._init_flat_weights
    all_weights: Any = tnn.RNNBase.all_weights

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """torch.nn's constructor: the signature is torch.nn's class's (the arguments go to
        ``torch.nn.LSTM``, ``GRU`` or ``RNN``, built on the ``meta`` device, whose checks,
        messages and warnings they get)::

            LSTM(input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, proj_size=0, device=None, dtype=None)
            GRU(input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                dropout=0.0, bidirectional=False, device=None, dtype=None)
            RNN(input_size, hidden_size, num_layers=1, nonlinearity='tanh', bias=True,
                batch_first=False, dropout=0.0, bidirectional=False, device=None, dtype=None)

        Args:
            input_size: the number of features of the input ``x``: an int >= 1.
            hidden_size: the number of features of the hidden state ``h``: an int >= 1.
            num_layers: the number of stacked layers. Default 1.
            bias: False leaves out the biases ``b_ih`` and ``b_hh``. Default True.
            batch_first: True takes and returns ``(batch, seq, feature)`` instead of
                ``(seq, batch, feature)`` (not the states). Default False.
            dropout: the probability in ``[0, 1]`` of zeroing each output of a layer but the
                last, in training (torch warns when it is nonzero with one layer). Default 0.
            bidirectional: True makes each layer bidirectional. Default False.
            proj_size: (``LSTM`` only) the size of the recurrent projection, an int in
                ``[0, hidden_size)``. Default 0: no projection.
            nonlinearity: (``RNN`` only) ``'tanh'`` (the default) or ``'relu'``.
            device: where the parameters are made. Default None: torch's default device.
            dtype: the parameters' dtype. Default None: torch's default dtype.

        Raises:
            TypeError: ``input_size`` or ``hidden_size`` that is not an int, ``bias`` or
                ``batch_first`` that is not a bool (torch.nn's messages).
            ValueError: a size or ``num_layers`` below 1, ``dropout`` outside ``[0, 1]``,
                ``proj_size`` below 0 or not below ``hidden_size``, an unknown
                ``nonlinearity`` (torch.nn's messages).
        """
        reference = checked(self._torch_class, args, kwargs)
        super().__init__()
        for name in _CONFIG:
            if name in reference.__dict__:
                setattr(self, name, reference.__dict__[name])
        device, dtype = placed(reference, kwargs)
        self._spec = spec_of(self)
        self._layout = layout = layout_of(self._spec)
        self._blocks = _flat.blocks(layout, self.bias)
        self._flat = torch.zeros(layout.size, dtype=dtype, device=device)
        shapes = [tuple(getattr(reference, n).shape) for n in self._flat_weights_names]
        own_parameters(self, self._flat_weights_names, shapes, self._flat, self._blocks)
        self._flat_weight_refs: list[Any] = []
        self._init_flat_weights()
        self.reset_parameters()

    def __setattr__(self, name: str, value: Any) -> None:
        names = self.__dict__.get("_flat_weights_names")
        if names is not None and name in names and "_flat_weights" in self.__dict__:
            self._flat_weights[names.index(name)] = value  # as torch.nn keeps its list
        super().__setattr__(name, value)

    # -- the buffer ----------------------------------------------------------------------------
    def flatten_parameters(self) -> None:
        """Make the opaque buffer from the parameters' current values and point them at it
        (a no-op where they already are its views)."""
        params = self._flat_weights
        if len(params) != len(self._flat_weights_names) or not _flat.owned(params):
            return  # (torch.func.functional_call's tensors are this call's only)
        if not _flat.aliases(self._flat, params, self._blocks):  # type: ignore[arg-type]
            self._flat = _flat.flatten(params, self._layout, self._blocks)  # type: ignore[arg-type]

    def _buffer(self) -> Tensor:
        """The operator's ``params`` for this call (:func:`cudnn_rnn.nn._flat.for_call`)."""
        if torch.compiler.is_compiling() or _flat.traced():
            # The parameters as the graph has them, leaving the module's list alone (an
            # export takes a tensor attribute assigned while tracing for a lost buffer; a
            # trace must read them in the same order on every call).
            weights = [getattr(self, name) for name in self._flat_weights_names]
        else:
            self._update_flat_weights()
            weights = self._flat_weights
        params, self._flat = _flat.for_call(
            self._flat, weights, self._layout, self._blocks, warn=True
        )
        return params

    def _apply(self, fn: Any, recurse: bool = True) -> Any:
        self._flat_weight_refs = []
        ret = super()._apply(fn, recurse)  # type: ignore[no-untyped-call]
        self._flat = None  # the converted parameters are the values: a buffer of their kind
        self._init_flat_weights()
        return ret

    def __getstate__(self) -> dict[str, Any]:
        self._update_flat_weights()
        state = self.__dict__.copy()
        state.pop("_flat_weight_refs", None)
        state.pop("_flat", None)  # the parameters hold the values; the buffer is made again
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)  # type: ignore[no-untyped-call]
        self._flat = None
        self._flat_weight_refs = []
        self._init_flat_weights()

    def _replicate_for_data_parallel(self) -> Any:
        replica = super()._replicate_for_data_parallel()  # type: ignore[no-untyped-call]
        replica._flat_weights = replica._flat_weights[:]  # (nn.DataParallel: as torch.nn)
        replica._flat_weights_names = replica._flat_weights_names[:]
        return replica

    # -- forward ---------------------------------------------------------------------------------
    def forward(self, input: Any, hx: Any = None, sequence_lengths: Any = None) -> tuple[Any, Any]:
        """torch.nn's forward; ``sequence_lengths`` (ours, keyword): the length of each
        sequence of a padded batch (``[B]`` ints in ``[1, T]``; ``[1]`` or an int for an
        unbatched input): outputs past a length are 0, and the final states are each
        sequence's last valid step's, as with a ``PackedSequence`` but without packing.

        The arguments are checked as torch.nn checks them, in its order and with its
        exceptions: its own methods (``check_forward_args``: dimensions, input size, the
        states' sizes, the input's dtype), then what its kernels find
        (:mod:`cudnn_rnn.nn._checks`: the kind of ``hx``, a ``PackedSequence``'s
        ``batch_sizes``, no time steps, the states' dtype and device)."""
        owner = type(self).__name__
        lstm = self.mode == "LSTM"
        num_directions = 2 if self.bidirectional else 1
        hidden = self.proj_size if self.proj_size > 0 else self.hidden_size
        packed = isinstance(input, PackedSequence)
        batch_sizes = sorted_indices = unsorted_indices = None
        is_batched, shape_as_given, no_steps = True, (), False
        if packed and sequence_lengths is not None:
            raise ValueError(
                f"{owner}: a PackedSequence carries its own lengths; pass sequence_lengths=None."
            )
        if hx is not None:  # what torch.nn's Python code reads of it
            if lstm:
                _checks.check_pair(owner, hx, exact=False)
            else:
                _checks.check_state_tensor(owner, hx)
        if packed:
            input, batch_sizes, sorted_indices, unsorted_indices = input
            batch = _checks.check_packed(owner, input, batch_sizes)
        else:
            if input.dim() not in (2, 3):
                raise ValueError(_NOT_2D_3D[self.mode].format(input.dim()))
            is_batched = input.dim() == 3
            # (no time steps: torch.nn's kernel says so, after its Python checks; so do we.
            # Not while torch.jit.trace records: its sizes are tensors, and testing one would fix
            # the length in the trace, a TracerWarning; no trace of no steps is made anyway.)
            steps_at = 1 if self.batch_first and is_batched else 0
            no_steps = not _flat.traced() and input.size(steps_at) == 0
            shape_as_given = tuple(input.shape)
            if hx is not None:
                _check_hx_dims(hx, lstm, is_batched)
            if not is_batched:
                input = input.unsqueeze(0 if self.batch_first else 1)
                if hx is not None:
                    hx = (hx[0].unsqueeze(1), hx[1].unsqueeze(1)) if lstm else hx.unsqueeze(1)
            batch = input.size(0) if self.batch_first else input.size(1)
        if hx is None:
            shape = (self.num_layers * num_directions, batch)
            h = torch.zeros(*shape, hidden, dtype=input.dtype, device=input.device)
            if lstm:
                c = torch.zeros(*shape, self.hidden_size, dtype=input.dtype, device=input.device)
                hx = (h, c)
            else:
                hx = h
        else:
            if sorted_indices is not None:
                _checks.check_packed_state_dims(owner, [hx[0], hx[1]] if lstm else [hx])
            hx = self.permute_hidden(hx, sorted_indices)
        weight = getattr(self, self._flat_weights_names[0])
        _checks.refuse_non_floating(owner, input, weight)
        self.check_forward_args(input, hx, batch_sizes)
        if lstm:  # what its kernel takes
            _checks.check_pair(owner, hx, exact=True)
        if no_steps:
            _checks.refuse_no_steps(owner, shape_as_given, self.batch_first)
        states = [("hx[0]", hx[0]), ("hx[1]", hx[1])] if lstm else [("hx", hx)]
        _checks.check_tensors(owner, "module", input, states, weight)
        lengths = None
        if sequence_lengths is not None:
            if not is_batched and isinstance(sequence_lengths, int):
                sequence_lengths = [sequence_lengths]
            steps = input.size(1 if self.batch_first else 0)
            lengths = check_lengths(owner, "sequence_lengths", sequence_lengths, steps, batch)
        output, state = self._run(input, batch_sizes, hx, lengths)
        if packed:
            return (
                PackedSequence(output, batch_sizes, sorted_indices, unsorted_indices),
                self.permute_hidden(state, unsorted_indices),
            )
        if not is_batched:
            output = output.squeeze(0 if self.batch_first else 1)
            state = (state[0].squeeze(1), state[1].squeeze(1)) if lstm else state.squeeze(1)
        return output, state

    def _run(
        self, input: Tensor, batch_sizes: Tensor | None, hx: Any, lengths: Tensor | None = None
    ) -> tuple[Tensor, Any]:
        """The operator on checked arguments: padded (time-major, sorted by length) for a
        packed input, else with the checked ``lengths``; ``(output, h_n)`` or ``(output,
        (h_n, c_n))``."""
        lstm = self.mode == "LSTM"
        h0, c0 = (hx[0], hx[1]) if lstm else (hx, None)
        params = self._buffer()
        if torch.is_autocast_enabled(input.device.type):  # each in the parameters' dtype
            input, h0 = input.to(params.dtype), h0.to(params.dtype)
            c0 = c0.to(params.dtype) if c0 is not None else None
        if batch_sizes is not None:
            x, lengths = pad_packed_sequence(PackedSequence(input, batch_sizes))
        else:
            x = input.transpose(0, 1) if self.batch_first else input
        dropout = self.training and self.dropout > 0 and self.num_layers > 1
        # A seed from torch's global generator per call (a tensor: compiled graphs draw it too).
        step = torch.randint(2**62, (), dtype=torch.int64) if dropout else None
        y, h_n, c_n = rnn(
            self._spec, params, x, h0, c0, lengths,
            training=self.training, seed=0, dropout_step=step,
        )  # fmt: skip
        if batch_sizes is not None:
            assert lengths is not None
            # (a PackedSequence of no sequences, batch_sizes all 0, as torch.nn runs it:
            # pack_padded_sequence refuses to pack nothing)
            y = pack_padded_sequence(y, lengths).data if input.size(0) else y.reshape(0, y.size(-1))
        elif self.batch_first:
            y = y.transpose(0, 1)
        return y, ((h_n, c_n) if lstm else h_n)


def _check_hx_dims(hx: Any, lstm: bool, is_batched: bool) -> None:
    """torch.nn's checks of the states' dimensions against the input's, with its messages
    (written in its forward, not a method to borrow)."""
    want = 3 if is_batched else 2
    kind = "batched 3-D" if is_batched else "unbatched 2-D"
    if lstm:
        if hx[0].dim() != want or hx[1].dim() != want:
            hint = ""
            if isinstance(hx, Tensor):  # (torch.nn reads its rows as h_0 and c_0)
                hint = f" (hx is one tensor of shape {tuple(hx.shape)}: an LSTM's state is a "
                hint += "tuple (h_0, c_0))"
            raise RuntimeError(
                f"For {kind} input, hx and cx should also be {want}-D but got "
                f"({hx[0].dim()}-D, {hx[1].dim()}-D) tensors{hint}"
            )
    elif hx.dim() != want:
        raise RuntimeError(
            f"For {kind} input, hx should also be {want}-D but got {hx.dim()}-D tensor"
        )


class LSTM(_Fused):
    """``torch.nn.LSTM`` on our operator: its arguments, parameters, ``state_dict`` and results.

    A multi-layer LSTM over an input sequence. Each layer computes, at each step ``t`` (cuDNN's
    equations, which are torch.nn's: they differ from ``torch.nn.LSTM`` nowhere)::

        i_t = sigmoid(W_ii x_t + b_ii + W_hi h_(t-1) + b_hi)
        f_t = sigmoid(W_if x_t + b_if + W_hf h_(t-1) + b_hf)
        g_t = tanh(W_ig x_t + b_ig + W_hg h_(t-1) + b_hg)
        o_t = sigmoid(W_io x_t + b_io + W_ho h_(t-1) + b_ho)
        c_t = f_t * c_(t-1) + i_t * g_t
        h_t = o_t * tanh(c_t)                  (proj_size > 0: h_t = W_hr (o_t * tanh(c_t)))

    ``*`` is the elementwise product; the input ``x_t`` of layer ``k > 0`` is the output ``h_t``
    of layer ``k - 1`` (with dropout in training, when ``dropout > 0``). See the module for
    what runs underneath.

    Inputs:
        ``input, (h_0, c_0)``, and our keyword ``sequence_lengths``:

        * ``input``: ``(L, N, H_in)``, ``(N, L, H_in)`` with ``batch_first=True``, or
          ``(L, H_in)`` unbatched; or a ``PackedSequence``.
        * ``h_0``: ``(D * num_layers, N, H_out)`` (``(D * num_layers, H_out)`` unbatched).
          Default: zeros.
        * ``c_0``: ``(D * num_layers, N, H_cell)`` (``(D * num_layers, H_cell)`` unbatched).
          Default: zeros.
        * ``sequence_lengths``: ``(N,)`` ints in ``[1, L]``, each padded sequence's length
          (ours; torch.nn has a ``PackedSequence`` for it). Default None: all of length ``L``.

        ``N`` is the batch size, ``L`` the sequence length, ``D`` 2 if ``bidirectional`` else
        1, ``H_in = input_size``, ``H_cell = hidden_size``, ``H_out = proj_size`` if
        ``proj_size > 0`` else ``hidden_size``.

    Outputs:
        ``output, (h_n, c_n)``:

        * ``output``: ``(L, N, D * H_out)`` (``(N, L, D * H_out)`` with ``batch_first=True``,
          ``(L, D * H_out)`` unbatched): ``h_t`` of the last layer at each step, the forward
          direction's then the reverse's; a ``PackedSequence`` if the input was one.
        * ``h_n``: ``(D * num_layers, N, H_out)``, the final hidden state of each layer and
          direction (index ``layer * D + direction``).
        * ``c_n``: ``(D * num_layers, N, H_cell)``, the final cell state.

    Attributes:
        weight_ih_l0: layer 0's input-hidden weights ``W_ii|W_if|W_ig|W_io``,
            ``(4 * hidden_size, input_size)``; ``weight_ih_l{k}``, of layer ``k > 0``, is
            ``(4 * hidden_size, D * H_out)``.
        weight_hh_l0: the hidden-hidden weights ``W_hi|W_hf|W_hg|W_ho``,
            ``(4 * hidden_size, H_out)`` (``weight_hh_l{k}`` for layer ``k``).
        bias_ih_l0: the input-hidden bias ``b_ii|b_if|b_ig|b_io``, ``(4 * hidden_size,)``
            (``bias_ih_l{k}``; absent with ``bias=False``).
        bias_hh_l0: the hidden-hidden bias ``b_hi|b_hf|b_hg|b_ho``, ``(4 * hidden_size,)``.
        weight_hr_l0: the projection ``W_hr``, ``(proj_size, hidden_size)``; only with
            ``proj_size > 0``. Each name with ``_reverse`` is the reverse direction's
            (``bidirectional=True``). All are views into one buffer, initialised from
            ``U(-sqrt(1 / hidden_size), sqrt(1 / hidden_size))`` as torch.nn's.
        all_weights: the parameters, per layer and direction, as torch.nn lists them.

    Example:

    >>> import torch, cudnn_rnn.nn
    >>> lstm = cudnn_rnn.nn.LSTM(10, 20, num_layers=2)
    >>> out, (h, c) = lstm(torch.randn(5, 3, 10))
    >>> out.shape, h.shape, list(lstm.state_dict())[:2]
    (torch.Size([5, 3, 20]), torch.Size([2, 3, 20]), ['weight_ih_l0', 'weight_hh_l0'])
    """

    _torch_class = tnn.LSTM
    get_expected_cell_size: Any = tnn.LSTM.get_expected_cell_size
    check_forward_args: Any = tnn.LSTM.check_forward_args
    permute_hidden: Any = tnn.LSTM.permute_hidden


class GRU(_Fused):
    """``torch.nn.GRU`` on our operator: its arguments, parameters, ``state_dict`` and results.

    A multi-layer GRU over an input sequence. Each layer computes, at each step ``t`` (cuDNN's
    equations, which are torch.nn's: the reset gate ``r_t`` is applied after the recurrent
    product, so they differ from ``torch.nn.GRU`` nowhere; TF's ``GRUCell`` applies it
    before)::

        r_t = sigmoid(W_ir x_t + b_ir + W_hr h_(t-1) + b_hr)
        z_t = sigmoid(W_iz x_t + b_iz + W_hz h_(t-1) + b_hz)
        n_t = tanh(W_in x_t + b_in + r_t * (W_hn h_(t-1) + b_hn))
        h_t = (1 - z_t) * n_t + z_t * h_(t-1)

    ``*`` is the elementwise product; the input ``x_t`` of layer ``k > 0`` is the output ``h_t``
    of layer ``k - 1`` (with dropout in training, when ``dropout > 0``).

    Inputs:
        ``input, h_0``, and our keyword ``sequence_lengths``:

        * ``input``: ``(L, N, H_in)``, ``(N, L, H_in)`` with ``batch_first=True``, or
          ``(L, H_in)`` unbatched; or a ``PackedSequence``.
        * ``h_0``: ``(D * num_layers, N, H_out)`` (``(D * num_layers, H_out)`` unbatched).
          Default: zeros.
        * ``sequence_lengths``: ``(N,)`` ints in ``[1, L]``, each padded sequence's length
          (ours). Default None: all of length ``L``.

        ``N`` is the batch size, ``L`` the sequence length, ``D`` 2 if ``bidirectional`` else
        1, ``H_in = input_size``, ``H_out = hidden_size``.

    Outputs:
        ``output, h_n``:

        * ``output``: ``(L, N, D * H_out)`` (``(N, L, D * H_out)`` with ``batch_first=True``,
          ``(L, D * H_out)`` unbatched): ``h_t`` of the last layer at each step; a
          ``PackedSequence`` if the input was one.
        * ``h_n``: ``(D * num_layers, N, H_out)``, the final hidden state of each layer and
          direction (index ``layer * D + direction``).

    Attributes:
        weight_ih_l0: layer 0's input-hidden weights ``W_ir|W_iz|W_in``,
            ``(3 * hidden_size, input_size)``; ``weight_ih_l{k}``, of layer ``k > 0``, is
            ``(3 * hidden_size, D * hidden_size)``.
        weight_hh_l0: the hidden-hidden weights ``W_hr|W_hz|W_hn``,
            ``(3 * hidden_size, hidden_size)``.
        bias_ih_l0: the input-hidden bias ``b_ir|b_iz|b_in``, ``(3 * hidden_size,)``.
        bias_hh_l0: the hidden-hidden bias ``b_hr|b_hz|b_hn``, ``(3 * hidden_size,)``. Each
            name with ``_reverse`` is the reverse direction's; all are views into one buffer,
            initialised as torch.nn's.
        all_weights: the parameters, per layer and direction, as torch.nn lists them.

    Example:

    >>> import torch, cudnn_rnn.nn
    >>> out, h = cudnn_rnn.nn.GRU(10, 20, batch_first=True)(torch.randn(3, 5, 10))
    >>> out.shape, h.shape
    (torch.Size([3, 5, 20]), torch.Size([1, 3, 20]))
    """

    _torch_class = tnn.GRU


class RNN(_Fused):
    """``torch.nn.RNN`` on our operator: its arguments, parameters, ``state_dict`` and results.

    A multi-layer Elman RNN over an input sequence. Each layer computes, at each step ``t``
    (cuDNN's ``rnn_tanh`` and ``rnn_relu``, which are torch.nn's: they differ from
    ``torch.nn.RNN`` nowhere)::

        h_t = tanh(W_ih x_t + b_ih + W_hh h_(t-1) + b_hh)     (nonlinearity="relu": relu)

    The input ``x_t`` of layer ``k > 0`` is the output ``h_t`` of layer ``k - 1`` (with dropout
    in training, when ``dropout > 0``).

    Inputs:
        ``input, h_0``, and our keyword ``sequence_lengths``:

        * ``input``: ``(L, N, H_in)``, ``(N, L, H_in)`` with ``batch_first=True``, or
          ``(L, H_in)`` unbatched; or a ``PackedSequence``.
        * ``h_0``: ``(D * num_layers, N, H_out)`` (``(D * num_layers, H_out)`` unbatched).
          Default: zeros.
        * ``sequence_lengths``: ``(N,)`` ints in ``[1, L]``, each padded sequence's length
          (ours). Default None: all of length ``L``.

        ``N`` is the batch size, ``L`` the sequence length, ``D`` 2 if ``bidirectional`` else
        1, ``H_in = input_size``, ``H_out = hidden_size``.

    Outputs:
        ``output, h_n``:

        * ``output``: ``(L, N, D * H_out)`` (``(N, L, D * H_out)`` with ``batch_first=True``,
          ``(L, D * H_out)`` unbatched): ``h_t`` of the last layer at each step; a
          ``PackedSequence`` if the input was one.
        * ``h_n``: ``(D * num_layers, N, H_out)``, the final hidden state of each layer and
          direction (index ``layer * D + direction``).

    Attributes:
        weight_ih_l0: layer 0's input-hidden weights, ``(hidden_size, input_size)``;
            ``weight_ih_l{k}``, of layer ``k > 0``, is ``(hidden_size, D * hidden_size)``.
        weight_hh_l0: the hidden-hidden weights, ``(hidden_size, hidden_size)``.
        bias_ih_l0: the input-hidden bias, ``(hidden_size,)``.
        bias_hh_l0: the hidden-hidden bias, ``(hidden_size,)``. Each name with ``_reverse``
            is the reverse direction's; all are views into one buffer, initialised as
            torch.nn's.
        all_weights: the parameters, per layer and direction, as torch.nn lists them.

    Example:

    >>> import torch, cudnn_rnn.nn
    >>> out, h = cudnn_rnn.nn.RNN(4, 6, nonlinearity="relu")(torch.randn(7, 4))  # unbatched
    >>> out.shape, h.shape
    (torch.Size([7, 6]), torch.Size([1, 6]))
    """

    _torch_class = tnn.RNN
