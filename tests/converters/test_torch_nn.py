"""Our layers <-> torch.nn.LSTM/GRU/RNN: equal outputs and states, lossless round trips."""

from __future__ import annotations

import itertools
import warnings
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from cudnn_rnn.converters.torch_nn import LAYER_CLASSES, from_torch, to_torch
from cudnn_rnn.core.layout import layout_of

MODES = ("lstm", "gru", "rnn_tanh", "rnn_relu")
DIRECTIONS = ("unidirectional", "bidirectional")
TORCH_CLASSES = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn_tanh": nn.RNN, "rnn_relu": nn.RNN}


def random_layer(
    mode: str,
    layers: int,
    direction: str,
    *,
    input_size: int = 3,
    units: int = 4,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
    **kwargs: Any,
) -> Any:
    """A built layer whose opaque kernel (weights and biases) is uniform in [-0.5, 0.5)."""
    layer = LAYER_CLASSES[mode](
        layers, units, direction=direction, dtype=dtype, input_size=input_size, **kwargs
    )
    gen = torch.Generator().manual_seed(seed)
    values = torch.rand(layer.opaque_kernel.shape, generator=gen, dtype=torch.float64) - 0.5
    with torch.no_grad():
        layer.opaque_kernel.copy_(values)
    return layer


def inputs_for(layer: Any, steps: int = 5, batch: int = 3, seed: int = 1) -> tuple[Any, ...]:
    """Random time-major inputs and initial states for ``layer``."""
    gen = torch.Generator().manual_seed(seed)
    dtype = layer.opaque_kernel.dtype
    x = torch.rand((steps, batch, layer.input_size), generator=gen, dtype=dtype) * 2 - 1
    states = tuple(
        torch.rand(tuple(shape), generator=gen, dtype=dtype) * 2 - 1
        for shape in layer.state_shape(batch)
    )
    return x, states


def run_torch(
    module: nn.RNNBase, x: torch.Tensor, states: tuple[torch.Tensor, ...], lengths: Any = None
) -> tuple[torch.Tensor, ...]:
    hx = states if len(states) == 2 else states[0]
    if lengths is None:
        y, out_states = module(x, hx)
    else:
        packed = pack_padded_sequence(x, torch.as_tensor(lengths), enforce_sorted=False)
        y, out_states = module(packed, hx)
        y = pad_packed_sequence(y, total_length=x.shape[0])[0]
    return (y, *out_states) if isinstance(out_states, tuple) else (y, out_states)


def assert_same_outputs(
    layer: Any, module: nn.RNNBase, lengths: Any = None, atol: float = 1e-12
) -> None:
    x, states = inputs_for(layer)
    ours_y, ours_states = layer(x, states, sequence_lengths=lengths)
    theirs = run_torch(module, x, states, lengths)
    for name, a, b in zip(("output", "h", "c"), (ours_y, *ours_states), theirs):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        np.testing.assert_allclose(
            a.detach().double().numpy(), b.detach().double().numpy(), atol=atol, err_msg=name
        )


CONFIGS = [
    pytest.param(mode, layers, direction, kwargs, id=f"{mode}-{layers}-{direction}-{tag}")
    for mode, layers, direction in itertools.product(MODES, (1, 2, 3), DIRECTIONS)
    for tag, kwargs in (
        ("linear", {}),
        ("skip", {"input_mode": "skip_input", "input_size": 4}),
        *((("proj", {"num_proj": 2}),) if mode == "lstm" else ()),
    )
]


@pytest.mark.parametrize("mode,layers,direction,kwargs", CONFIGS)
def test_to_torch_same_outputs_and_round_trip(
    mode: str, layers: int, direction: str, kwargs: dict[str, Any]
) -> None:
    layer = random_layer(mode, layers, direction, **kwargs)
    module = to_torch(layer)
    assert type(module) is TORCH_CLASSES[mode]
    assert (module.num_layers, module.hidden_size, module.input_size) == (
        layers,
        4,
        layer.input_size,
    )
    assert module.bidirectional == (direction == "bidirectional")
    assert module.proj_size == kwargs.get("num_proj", 0)
    assert not module.batch_first and module.weight_hh_l0.dtype == torch.float64
    assert_same_outputs(layer, module)
    assert_same_outputs(layer, module, lengths=[5, 2, 1])

    back = from_torch(module, input_mode=layer.input_mode)
    assert type(back) is type(layer) and back.spec == layer.spec
    assert back.dtype == layer.dtype
    assert torch.equal(back.opaque_kernel, layer.opaque_kernel)


def test_skip_input_becomes_identity_weight_ih_l0() -> None:
    layer = random_layer("gru", 2, "bidirectional", input_mode="skip_input", input_size=4)
    module = to_torch(layer)
    eye = torch.eye(4, dtype=torch.float64)
    for name in ("weight_ih_l0", "weight_ih_l0_reverse"):
        assert torch.equal(getattr(module, name), torch.cat([eye, eye, eye]))
        assert getattr(module, name).requires_grad  # a trainable parameter in torch
    # From torch the default is linear_input: the same math, identity matrices stored.
    linear = from_torch(module)
    assert linear.input_mode == "linear_input"
    assert linear.opaque_kernel.numel() > layer.opaque_kernel.numel()
    x, states = inputs_for(layer)
    assert torch.equal(linear(x, states)[0], layer(x, states)[0])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bidirectional", (False, True))
def test_from_torch_same_outputs(mode: str, bidirectional: bool) -> None:
    torch.manual_seed(0)
    extra = {"nonlinearity": mode[4:]} if mode.startswith("rnn") else {}
    module = TORCH_CLASSES[mode](
        3, 4, num_layers=2, bidirectional=bidirectional, dtype=torch.float64, **extra
    )
    layer = from_torch(module)
    assert type(layer) is LAYER_CLASSES[mode]
    assert layer.num_layers == 2 and layer.num_units == 4 and layer.input_size == 3
    assert layer.direction == ("bidirectional" if bidirectional else "unidirectional")
    assert_same_outputs(layer, module)
    assert_same_outputs(layer, module, lengths=[3, 5, 1])
    again = to_torch(layer)
    for name, value in module.named_parameters():
        assert torch.equal(getattr(again, name), value), name


def test_from_torch_lstm_projection_float32() -> None:
    torch.manual_seed(1)
    module = nn.LSTM(3, 5, num_layers=3, proj_size=2, bidirectional=True)
    layer = from_torch(module)
    assert layer.num_proj == 2 and layer.dtype == torch.float32
    with warnings.catch_warnings():
        # torch.nn says once per process that oneDNN has no projection (ours never asks oneDNN).
        warnings.filterwarnings("ignore", message="LSTM with projections is not supported")
        assert_same_outputs(layer, module, atol=1e-6)


def test_from_torch_bias_false_gives_zero_biases() -> None:
    torch.manual_seed(2)
    module = nn.GRU(3, 4, num_layers=2, bias=False, dtype=torch.float64)
    layer = from_torch(module)
    _, biases = layout_of(layer.spec).unpack(layer.opaque_kernel.detach())
    assert all(bool((b == 0).all()) for b in biases)
    assert_same_outputs(layer, module)


def test_from_torch_batch_first_dropout_and_training_mode() -> None:
    torch.manual_seed(3)
    module = nn.LSTM(3, 4, num_layers=2, batch_first=True, dropout=0.25, dtype=torch.float64)
    module.eval()
    layer = from_torch(module)
    assert layer.dropout == 0.25 and not layer.training
    x = torch.randn(2, 5, 3, dtype=torch.float64)  # batch-major: time_major=False
    ours, (h, c) = layer(x, time_major=False)
    theirs, (h2, c2) = module(x)
    for a, b in ((ours, theirs), (h, h2), (c, c2)):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), atol=1e-12)
    back = to_torch(layer)
    assert back.dropout == 0.25 and not back.training and not back.batch_first


def test_to_torch_float32_and_leaves_global_rng_alone() -> None:
    layer = random_layer("lstm", 2, "bidirectional", dtype=torch.float32)
    state = torch.get_rng_state()
    module = to_torch(layer)
    back = from_torch(module)
    assert torch.equal(torch.get_rng_state(), state)
    assert module.weight_ih_l0.dtype == torch.float32
    assert torch.equal(back.opaque_kernel, layer.opaque_kernel)
    assert_same_outputs(layer, module, atol=1e-6)


def test_one_layer_dropout_is_not_passed_to_torch() -> None:
    # torch warns about dropout with one layer (it has no effect there, nor here).
    layer = random_layer("gru", 1, "unidirectional", dropout=0.5)
    assert to_torch(layer).dropout == 0.0


# -- errors ------------------------------------------------------------------------------------


def test_to_torch_projection_equal_to_units_is_refused() -> None:
    layer = random_layer("lstm", 1, "unidirectional", num_proj=4)
    with pytest.raises(ValueError, match=r"num_proj=4 == num_units=4.*proj_size < hidden_size"):
        to_torch(layer)


def test_to_torch_needs_a_built_layer() -> None:
    with pytest.raises(RuntimeError, match=r"to_torch: CudnnLSTM is not built yet"):
        to_torch(LAYER_CLASSES["lstm"](1, 4))
    with pytest.raises(TypeError, match=r"to_torch: expected a CudnnLSTM.*got LSTM"):
        to_torch(nn.LSTM(3, 4))  # type: ignore[arg-type]


def test_from_torch_refuses_other_modules() -> None:
    # A cell is one unidirectional layer now (tests/io/test_torch_files.py); a module
    # holding no RNN, or another kind of object, is still refused.
    with pytest.raises(ValueError, match=r"from_torch: Linear holds no torch.nn LSTM, GRU, RNN"):
        from_torch(nn.Linear(3, 4))
    with pytest.raises(
        TypeError, match=r"from_torch: expected a torch.nn.LSTM, .*RNNCell.*got int"
    ):
        from_torch(3)  # type: ignore[arg-type]

    class Odd(nn.RNNCellBase):
        pass

    odd = Odd(3, 4, bias=True, num_chunks=2)
    with pytest.raises(
        TypeError, match=r"expected a torch.nn.LSTMCell, GRUCell or RNNCell, got Odd"
    ):
        from_torch(odd)


def test_from_torch_skip_input_needs_identity() -> None:
    module = nn.GRU(4, 4, dtype=torch.float64)
    with pytest.raises(
        ValueError, match=r"from_torch: canonical weight #0 .* must be the identity"
    ):
        from_torch(module, input_mode="skip_input")
    with pytest.raises(
        ValueError, match=r"from_torch: input_mode 'skip_input' .* input_size == num"
    ):
        from_torch(nn.GRU(3, 4), input_mode="skip_input")
    with pytest.raises(ValueError, match=r"from_torch: invalid input_mode 'skip'"):
        from_torch(module, input_mode="skip")


@pytest.mark.cuda
def test_cuda_device_is_kept() -> None:
    layer = random_layer("lstm", 2, "bidirectional", dtype=torch.float32).cuda()
    module = to_torch(layer)
    assert module.weight_ih_l0.is_cuda
    back = from_torch(module)
    assert back.opaque_kernel.is_cuda
    assert torch.equal(back.opaque_kernel, layer.opaque_kernel)
