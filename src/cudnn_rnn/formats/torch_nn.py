"""``torch.nn.LSTM`` / ``GRU`` / ``RNN`` <-> our layers, lossless both ways.

torch.nn computes cuDNN's math (it hands its weights to cuDNN on a GPU): the same gate order
(LSTM i, f, g(=c), o; GRU r, z(=u), n(=h)), two biases per gate (``bias_ih`` = cuDNN's ``bW``,
``bias_hh`` = ``bR``), the GRU's reset gate applied after the recurrent matmul, and LSTM projection
as ``weight_hr``. Per layer ``l`` and direction (``_reverse`` for the backward one) a module holds::

    weight_ih_l{l}  [G*H, in_l]    the G input matrices stacked, in torch's gate order
    weight_hh_l{l}  [G*H, Hout]    the G recurrent matrices
    bias_ih_l{l}    [G*H]          input biases       (absent with bias=False: zeros here)
    bias_hh_l{l}    [G*H]          recurrent biases   (absent with bias=False: zeros here)
    weight_hr_l{l}  [P, H]         LSTM projection    (proj_size > 0)

so a conversion only regroups the canonical tensors by the layout table's (layer, direction, kind)
tags and stacks gate blocks with :func:`~cudnn_rnn.core.gates.permute_gates`. Two things have no
exact counterpart:

* ``skip_input``: torch always multiplies the input by ``weight_ih_l0``. :func:`to_torch` writes
  the identity matrices that the canonical form already holds there, so the outputs are exactly
  equal (``x * 1 + 0``); the torch module then has a trainable ``weight_ih_l0`` that starts as the
  identity: lossless for inference, a different model if trained further.
  ``from_torch(module, input_mode="skip_input")`` takes such a module back (it checks the identity).
* ``num_proj == num_units``: torch requires ``proj_size < hidden_size``, so :func:`to_torch`
  refuses it.

Weights do not depend on ``batch_first``: a ``batch_first=True`` module converts like any other,
and the caller runs our layer with ``time_major=False``.

>>> import torch
>>> from cudnn_rnn import CudnnGRU
>>> layer = CudnnGRU(2, 4, input_size=3, direction="bidirectional", dtype=torch.float64)
>>> module = to_torch(layer)
>>> module
GRU(3, 4, num_layers=2, bidirectional=True)
>>> x = torch.randn(5, 2, 3, dtype=torch.float64)
>>> torch.allclose(module(x)[0], layer(x)[0], rtol=0, atol=1e-12)
True
>>> back = from_torch(module)
>>> torch.equal(back.opaque_kernel, layer.opaque_kernel)
True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from cudnn_rnn.core.constants import (
    CUDNN_GRU,
    CUDNN_INPUT_LINEAR_MODE,
    CUDNN_LSTM,
    CUDNN_RNN_BIDIRECTION,
    CUDNN_RNN_RELU,
    CUDNN_RNN_TANH,
    CUDNN_RNN_UNIDIRECTION,
)
from cudnn_rnn.core.layout import (
    INPUT,
    INPUT_BIAS,
    PROJECTION,
    RECURRENT,
    RECURRENT_BIAS,
    layout_of,
)
from cudnn_rnn.core.spec import RNNSpec, check_input_mode
from cudnn_rnn.formats.canonical import layer_canonical, layer_from_canonical
from cudnn_rnn.formats.gate_blocks import BlockKey, stack_gates, unstack_gates
from cudnn_rnn.layers import LAYER_CLASSES, _CudnnRNN

__all__ = [
    "LAYER_CLASSES",
    "TORCH_MODES",
    "TORCH_NAMES",
    "BlockKey",
    "from_torch",
    "layer_canonical",
    "layer_from_canonical",
    "stack_gates",
    "to_torch",
    "torch_state_shapes",
    "unstack_gates",
]


@dataclass(frozen=True)
class TorchMode:
    """How one of our modes is spelled in torch.nn."""

    cls: Callable[..., nn.RNNBase]
    torch_mode: str  # RNNBase.mode
    kwargs: Mapping[str, Any] = field(default_factory=dict)


#: Our mode -> the torch.nn class (and constructor arguments) that computes the same math.
TORCH_MODES: dict[str, TorchMode] = {
    CUDNN_LSTM: TorchMode(nn.LSTM, "LSTM"),
    CUDNN_GRU: TorchMode(nn.GRU, "GRU"),
    CUDNN_RNN_TANH: TorchMode(nn.RNN, "RNN_TANH", {"nonlinearity": "tanh"}),
    CUDNN_RNN_RELU: TorchMode(nn.RNN, "RNN_RELU", {"nonlinearity": "relu"}),
}
_MODE_OF_TORCH = {m.torch_mode: mode for mode, m in TORCH_MODES.items()}

#: Layout kind -> the torch.nn parameter name stem.
TORCH_NAMES: dict[str, str] = {
    INPUT: "weight_ih",
    RECURRENT: "weight_hh",
    PROJECTION: "weight_hr",
    INPUT_BIAS: "bias_ih",
    RECURRENT_BIAS: "bias_hh",
}


def _torch_name(key: BlockKey) -> str:
    layer, direction, kind = key
    return f"{TORCH_NAMES[kind]}_l{layer}{'_reverse' if direction else ''}"


def torch_state_shapes(spec: RNNSpec, *, bias: bool = True) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every parameter of the ``torch.nn`` module computing ``spec`` (without
    ``bias_*`` for ``bias=False``), from the layout table's stacked blocks; nothing is built.

    >>> spec = RNNSpec("lstm", 1, 4, 3, num_proj=2)
    >>> torch_state_shapes(spec)  # doctest: +NORMALIZE_WHITESPACE
    {'weight_ih_l0': (16, 3), 'weight_hh_l0': (16, 2), 'bias_ih_l0': (16,), 'bias_hh_l0': (16,),
     'weight_hr_l0': (2, 4)}
    """
    shapes: dict[str, tuple[int, ...]] = {}
    for p, fused in enumerate(layout_of(spec).fused):
        layer, direction = divmod(p, spec.num_dirs)
        blocks = [(INPUT, fused.w_ih), (RECURRENT, fused.w_hh)]
        blocks += [(INPUT_BIAS, fused.b_ih), (RECURRENT_BIAS, fused.b_hh)] if bias else []
        blocks += [(PROJECTION, fused.w_hr)]
        for kind, block in blocks:
            if block is not None:
                shapes[_torch_name((layer, direction, kind))] = block.shape
    return shapes


# -- the converters ------------------------------------------------------------------------------


def to_torch(layer: _CudnnRNN) -> nn.RNNBase:
    """A ``torch.nn.LSTM``/``GRU``/``RNN`` computing exactly what ``layer`` computes.

    Same dtype, device, sizes, layers, direction, projection (``proj_size``), dropout and
    train/eval mode; ``batch_first=False`` (time-major, as our default). Under ``skip_input``
    ``weight_ih_l0`` holds identity matrices (see the module docstring).

    Raises TypeError for anything but our layer, RuntimeError for an unbuilt one, ValueError for
    ``num_proj == num_units`` (torch needs ``proj_size < hidden_size``).
    """
    spec, weights, biases = layer_canonical(layer, "to_torch")
    if spec.num_proj is not None and spec.num_proj >= spec.num_units:
        raise ValueError(
            f"to_torch: {type(layer).__name__} has num_proj={spec.num_proj} == num_units="
            f"{spec.num_units}, but torch.nn.LSTM requires proj_size < hidden_size; there is no "
            "torch.nn module with this projection."
        )
    kind = TORCH_MODES[spec.mode]
    kwargs: dict[str, Any] = {"proj_size": spec.num_proj or 0} if spec.mode == CUDNN_LSTM else {}
    # torch warns about dropout with one layer, where (as here) it has no effect.
    dropout = spec.dropout if spec.num_layers > 1 else 0.0
    # Built on the meta device, so torch's own random init neither runs nor touches the global
    # RNG; every parameter is written below.
    module = kind.cls(
        spec.input_size,
        spec.num_units,
        num_layers=spec.num_layers,
        bias=True,
        batch_first=False,
        dropout=dropout,
        bidirectional=spec.bidirectional,
        device="meta",
        dtype=layer.opaque_kernel.dtype,
        **kind.kwargs,
        **kwargs,
    ).to_empty(device=layer.opaque_kernel.device)
    blocks = {_torch_name(k): v for k, v in stack_gates(spec, weights, biases, "torch").items()}
    names = {name for name, _ in module.named_parameters()}
    if names != set(blocks):  # pragma: no cover - the layout and torch agree by construction
        raise AssertionError(f"to_torch: parameters {sorted(names ^ set(blocks))} do not match")
    with torch.no_grad():
        for name, value in blocks.items():
            getattr(module, name).copy_(value)
    module.train(layer.training)
    return module


def from_torch(module: nn.RNNBase, *, input_mode: str = CUDNN_INPUT_LINEAR_MODE) -> _CudnnRNN:
    """Our layer (``CudnnLSTM``/``CudnnGRU``/``CudnnRNNTanh``/``CudnnRNNRelu``) computing exactly
    what a ``torch.nn.LSTM``/``GRU``/``RNN`` computes.

    Input size, hidden size, layers, direction, ``proj_size`` (as ``num_proj``), dropout, dtype,
    device and train/eval mode are carried over; both biases are kept as they are (``bias=False``
    gives zero biases). For a ``batch_first=True`` module call the layer with
    ``time_major=False``. ``input_mode="skip_input"`` (or ``"auto_select"``) takes back a module
    whose ``weight_ih_l0`` is identity matrices, as :func:`to_torch` writes for skip_input layers;
    a ValueError says so if it is not.
    """
    owner = "from_torch"
    if not isinstance(module, nn.RNNBase) or module.mode not in _MODE_OF_TORCH:
        raise TypeError(
            f"{owner}: expected a torch.nn.LSTM, GRU or RNN module, got {type(module).__name__}."
        )
    input_mode = check_input_mode(owner, input_mode)
    mode = _MODE_OF_TORCH[module.mode]
    spec = RNNSpec(
        mode,
        module.num_layers,
        module.hidden_size,
        module.input_size,
        input_mode,
        CUDNN_RNN_BIDIRECTION if module.bidirectional else CUDNN_RNN_UNIDIRECTION,
        module.proj_size or None,
        float(module.dropout),
        owner=owner,
    )
    ref = module.get_parameter("weight_hh_l0")
    keys = {
        (p.layer, p.direction, p.kind) for p in layout_of(spec).weights + layout_of(spec).biases
    }
    blocks: dict[BlockKey, Tensor] = {}
    for key in keys:
        value = getattr(module, _torch_name(key), None)
        # bias=False: torch adds no bias at all, which is a zero bias here.
        blocks[key] = (
            value.detach()
            if value is not None
            else torch.zeros(ref.shape[0], dtype=ref.dtype, device=ref.device)
        )
    weights, biases = unstack_gates(spec, blocks, "torch")
    layer = layer_from_canonical(
        spec, weights, biases, dtype=ref.dtype, device=ref.device, owner=owner
    )
    layer.train(module.training)
    return layer
