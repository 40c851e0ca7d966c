"""Every public name's defaults against TF 1.x's, as tabled in docs/migration.md.

Two kinds of pins: the signatures (``inspect.signature``: names, order, default values), and the
behaviour those defaults give, checked on inputs where a wrong default would give wrong values of
the right shape (batch != time). TF's signatures are quoted from r1.15 (``tf.contrib.cudnn_rnn``,
``tf.nn.dynamic_rnn``, ``tf.contrib.rnn.stack_bidirectional_dynamic_rnn``, ``tf.nn.rnn_cell``);
where ours differs on purpose, the difference is pinned too, so that the table and the code cannot
drift apart.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

import cudnn_rnn
from cudnn_rnn import ops
from cudnn_rnn.cells import (
    BasicRNNCell,
    BidirectionalStack,
    CudnnCompatibleGRUCell,
    CudnnCompatibleLSTMCell,
    MultiRNNCell,
    dynamic_rnn,
    stack_bidirectional_dynamic_rnn,
)
from cudnn_rnn.layers import CudnnGRU, CudnnLSTM, CudnnRNNRelu, CudnnRNNTanh
from cudnn_rnn.saveable import (
    CudnnGRUSaveable,
    CudnnLSTMSaveable,
    CudnnOpaqueParamsSaveable,
    CudnnParamsFormatConverterGRU,
    CudnnParamsFormatConverterLSTM,
    CudnnParamsFormatConverterRelu,
    CudnnParamsFormatConverterTanh,
    CudnnRNNReluSaveable,
    CudnnRNNTanhSaveable,
)

F64 = torch.float64
LAYERS = [CudnnLSTM, CudnnGRU, CudnnRNNTanh, CudnnRNNRelu]
OPS = [ops.CudnnLSTM, ops.CudnnGRU, ops.CudnnRNNTanh, ops.CudnnRNNRelu]
SAVEABLES = [
    CudnnOpaqueParamsSaveable,
    CudnnLSTMSaveable,
    CudnnGRUSaveable,
    CudnnRNNTanhSaveable,
    CudnnRNNReluSaveable,
]
CONVERTERS = [
    CudnnParamsFormatConverterLSTM,
    CudnnParamsFormatConverterGRU,
    CudnnParamsFormatConverterTanh,
    CudnnParamsFormatConverterRelu,
]


def positional(obj: Callable[..., Any]) -> list[str]:
    """The names that can be passed by position, in order (``self`` left out)."""
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    params = inspect.signature(obj).parameters.values()
    return [p.name for p in params if p.kind in kinds and p.name != "self"]


def defaults(obj: Callable[..., Any]) -> dict[str, Any]:
    params = inspect.signature(obj).parameters.values()
    return {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}


# -- the signatures: TF 1.x's names, order and defaults ------------------------------------------

# (what, our callable, TF's positional names, TF's defaults for them)
TF_SIGNATURES: list[tuple[str, Callable[..., Any], list[str], dict[str, Any]]] = [
    *(
        (
            f"layer {cls.__name__}",
            cls.__init__,
            [
                "num_layers",
                "num_units",
                "input_mode",
                "direction",
                "dropout",
                "seed",
                "dtype",
                "kernel_initializer",
                "bias_initializer",
                "name",
            ],
            {
                "input_mode": "linear_input",
                "direction": "unidirectional",
                "dropout": 0.0,
                "seed": None,
                "dtype": torch.float32,
                "kernel_initializer": None,
                "bias_initializer": None,
                "name": None,
            },
        )
        for cls in LAYERS
    ),
    *(
        (
            f"ops.{cls.__name__}",
            cls.__init__,
            [
                "num_layers",
                "num_units",
                "input_size",
                "input_mode",
                "direction",
                "dtype",
                "dropout",
                "seed",
            ],
            {
                "input_mode": "linear_input",
                "direction": "unidirectional",
                "dtype": torch.float32,
                "dropout": 0.0,
                "seed": 0,
            },
        )
        for cls in OPS
    ),
    *(
        (
            cls.__name__,
            cls.__init__,
            [
                "opaque_params",
                "num_layers",
                "num_units",
                "input_size",
                "input_mode",
                "direction",
                "scope",
                "name",
            ],
            {
                "input_mode": "linear_input",
                "direction": "unidirectional",
                "scope": None,
                "name": "cudnn_rnn_saveable",
            },
        )
        for cls in SAVEABLES
    ),
    *(
        (
            cls.__name__,
            cls.__init__,
            ["num_layers", "num_units", "input_size", "num_proj", "input_mode", "direction"],
            {"num_proj": None, "input_mode": "linear_input", "direction": "unidirectional"},
        )
        for cls in CONVERTERS
    ),
    (
        "CudnnCompatibleLSTMCell",
        CudnnCompatibleLSTMCell.__init__,
        ["num_units", "reuse"],
        {"reuse": None},
    ),
    (
        "CudnnCompatibleGRUCell",
        CudnnCompatibleGRUCell.__init__,
        ["num_units", "reuse", "kernel_initializer"],
        {"reuse": None, "kernel_initializer": None},
    ),
    (
        "BasicRNNCell",
        BasicRNNCell.__init__,
        ["num_units", "activation", "reuse"],
        {"activation": None, "reuse": None},
    ),
    ("MultiRNNCell", MultiRNNCell.__init__, ["cells", "state_is_tuple"], {"state_is_tuple": True}),
]


@pytest.mark.parametrize(
    "obj,tf_names,tf_defaults",
    [pytest.param(obj, names, dflt, id=what) for what, obj, names, dflt in TF_SIGNATURES],
)
def test_signature_follows_tf(
    obj: Callable[..., Any], tf_names: list[str], tf_defaults: dict[str, Any]
) -> None:
    """TF's positional names come first and in TF's order; every default is TF's."""
    ours = positional(obj)
    assert ours[: len(tf_names)] == tf_names
    got = defaults(obj)
    assert {name: got.get(name, "<required>") for name in tf_defaults} == tf_defaults


def test_ops_lstm_takes_num_proj_as_tf() -> None:
    assert positional(ops.CudnnLSTM.__init__)[8] == "num_proj"
    assert defaults(ops.CudnnLSTM.__init__)["num_proj"] is None


@pytest.mark.parametrize("cls", OPS)
def test_ops_call_defaults(cls: type[Any]) -> None:
    got = defaults(cls.__call__)
    assert (got["is_training"], got["sequence_lengths"], got["time_major"]) == (True, None, True)


@pytest.mark.parametrize("cls", LAYERS)
def test_layer_call_defaults(cls: type[Any]) -> None:
    """TF: ``call(inputs, initial_state=None, sequence_lengths=None, time_major=True,
    training=True)``; ours differs only in ``training=None`` (see the behaviour test below)."""
    assert positional(cls.forward)[:5] == [
        "inputs",
        "initial_state",
        "sequence_lengths",
        "time_major",
        "training",
    ]
    got = defaults(cls.forward)
    assert (got["initial_state"], got["sequence_lengths"], got["time_major"]) == (None, None, True)
    assert got["training"] is None  # a documented difference: follows train()/eval()


def test_driver_defaults_are_tfs() -> None:
    """TF: ``dynamic_rnn(..., time_major=False)``, ``stack_bidirectional_dynamic_rnn(...,
    time_major=False)``; ``BidirectionalStack.forward`` is the latter as a module."""
    for fn in (dynamic_rnn, stack_bidirectional_dynamic_rnn, BidirectionalStack.forward):
        got = defaults(fn)
        assert got["time_major"] is False, fn.__qualname__
        assert got["sequence_length"] is None, fn.__qualname__
    assert defaults(dynamic_rnn)["initial_state"] is None
    sbd = defaults(stack_bidirectional_dynamic_rnn)
    assert sbd["initial_states_fw"] is None and sbd["initial_states_bw"] is None


def test_constants_are_tfs_strings() -> None:
    assert (
        cudnn_rnn.CUDNN_LSTM,
        cudnn_rnn.CUDNN_GRU,
        cudnn_rnn.CUDNN_RNN_TANH,
        cudnn_rnn.CUDNN_RNN_RELU,
    ) == ("lstm", "gru", "rnn_tanh", "rnn_relu")
    assert (cudnn_rnn.CUDNN_RNN_UNIDIRECTION, cudnn_rnn.CUDNN_RNN_BIDIRECTION) == (
        "unidirectional",
        "bidirectional",
    )
    assert (
        cudnn_rnn.CUDNN_INPUT_LINEAR_MODE,
        cudnn_rnn.CUDNN_INPUT_SKIP_MODE,
        cudnn_rnn.CUDNN_INPUT_AUTO_MODE,
    ) == ("linear_input", "skip_input", "auto_select")


# -- documented differences, pinned so that docs/migration.md stays true -------------------------


def test_documented_positional_differences() -> None:
    """TF: ``dynamic_rnn(cell, inputs, sequence_length, initial_state, dtype, ...)`` and
    ``stack_bidirectional_dynamic_rnn(cells_fw, cells_bw, inputs, initial_states_fw,
    initial_states_bw, dtype, sequence_length, ...)``; ours take no ``dtype`` and order these
    as below, so a TF positional call fails loudly instead of mixing them up."""
    assert positional(dynamic_rnn) == [
        "cell",
        "inputs",
        "initial_state",
        "sequence_length",
        "time_major",
    ]
    assert positional(stack_bidirectional_dynamic_rnn) == [
        "cells_fw",
        "cells_bw",
        "inputs",
        "initial_states_fw",
        "initial_states_bw",
        "sequence_length",
        "time_major",
    ]
    cell, x = BasicRNNCell(2, dtype=F64), torch.zeros(2, 3, 1, dtype=F64)
    with pytest.raises(TypeError, match="dtype"):
        dynamic_rnn(cell, x, dtype=F64)  # type: ignore[call-arg]
    with pytest.raises((TypeError, ValueError)):
        dynamic_rnn(cell, x, [3, 1])  # type: ignore[arg-type]  # TF's sequence_length slot


def test_cells_fix_their_dtype_at_construction() -> None:
    """TF's cells take the first inputs' dtype; ours are float32 unless told, and say so."""
    for cls in (CudnnCompatibleLSTMCell, CudnnCompatibleGRUCell, BasicRNNCell):
        param = inspect.signature(cls.__init__).parameters["dtype"]
        assert param.kind is inspect.Parameter.KEYWORD_ONLY and param.default is torch.float32
    cell = CudnnCompatibleGRUCell(2)
    with pytest.raises(TypeError, match=r"make the cell with dtype=torch\.float64"):
        cell(torch.zeros(1, 3, dtype=F64), torch.zeros(1, 2, dtype=F64))


# -- behaviour: batch-major drivers -------------------------------------------------------------


def _gru(seed: int, units: int = 3, depth: int = 4) -> CudnnCompatibleGRUCell:
    torch.manual_seed(seed)
    cell = CudnnCompatibleGRUCell(units, dtype=F64)
    cell.build(depth)
    with torch.no_grad():  # biases away from their defaults, so that every term shows
        for p in cell.parameters():
            p.uniform_(-0.5, 0.5)
    return cell


# batch 2, time 3: read with the wrong axis, the same tensor is a batch of 3 sequences of 2 steps
# and gives outputs of exactly the same shape.
BATCH, STEPS, DEPTH = 2, 3, 4


def _batch_major_inputs() -> torch.Tensor:
    return torch.rand(BATCH, STEPS, DEPTH, dtype=F64, generator=torch.Generator().manual_seed(9))


def test_dynamic_rnn_default_is_batch_major() -> None:
    cell, x = _gru(0), _batch_major_inputs()
    out, h = dynamic_rnn(cell, x)

    # What batch-major means, step by step with the cell itself: x[:, t] is step t.
    state = cell.zero_state(BATCH, F64)
    steps = []
    for t in range(STEPS):
        step_out, state = cell(x[:, t], state)
        steps.append(step_out)
    torch.testing.assert_close(out, torch.stack(steps, dim=1), atol=1e-12, rtol=0)
    torch.testing.assert_close(h, state, atol=1e-12, rtol=0)

    assert torch.equal(out, dynamic_rnn(cell, x, time_major=False)[0])
    wrong, _ = dynamic_rnn(cell, x, time_major=True)  # the old default: scans the batch axis
    assert wrong.shape == out.shape and not torch.allclose(wrong, out)
    same, _ = dynamic_rnn(cell, x.transpose(0, 1), time_major=True)
    torch.testing.assert_close(same.transpose(0, 1), out, atol=1e-12, rtol=0)


def test_dynamic_rnn_default_takes_batch_major_lengths() -> None:
    """A TF call ``dynamic_rnn(cell, x, sequence_length=lengths)`` with ``x [B, T, I]``."""
    stack = MultiRNNCell([_gru(1), _gru(2, depth=3)])
    x = _batch_major_inputs()
    out, (_, h) = dynamic_rnn(stack, x, sequence_length=[3, 1])
    assert tuple(out.shape) == (BATCH, STEPS, 3)
    assert bool((out[1, 1:] == 0).all()) and bool((out[0] != 0).all())
    assert torch.equal(h[1], out[1, 0]) and torch.equal(h[0], out[0, 2])


@pytest.mark.parametrize("api", ["function", "module"])
def test_stack_bidirectional_default_is_batch_major(api: str) -> None:
    fw, bw = [_gru(3), _gru(4, depth=6)], [_gru(5), _gru(6, depth=6)]
    stack = BidirectionalStack(fw, bw)
    x = _batch_major_inputs()

    def run(inputs: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        if api == "module":
            return stack(inputs, **kwargs)[0]
        return stack_bidirectional_dynamic_rnn(fw, bw, inputs, **kwargs)[0]

    out = run(x)
    assert tuple(out.shape) == (BATCH, STEPS, 6)
    assert torch.equal(out, run(x, time_major=False))
    wrong = run(x, time_major=True)
    assert wrong.shape == out.shape and not torch.allclose(wrong, out)
    same = run(x.transpose(0, 1), time_major=True).transpose(0, 1)
    torch.testing.assert_close(same, out, atol=1e-12, rtol=0)
    # Batch-major lengths: one per row of x.
    padded = run(x, sequence_length=[1, 3])
    assert bool((padded[0, 1:] == 0).all()) and bool((padded[1] != 0).all())


# -- behaviour: the layers and ops keep TF's time-major default --------------------------------


def test_layer_default_is_time_major() -> None:
    layer = CudnnGRU(1, 3, input_size=DEPTH, seed=0, dtype=F64)
    x = _batch_major_inputs().transpose(0, 1).contiguous()  # [T, B, I]
    out, (h,) = layer(x)
    assert torch.equal(out, layer(x, time_major=True)[0])
    wrong = layer(x, time_major=False)[0]
    assert wrong.shape == out.shape and not torch.allclose(wrong, out)
    batch_major, _ = layer(x.transpose(0, 1), time_major=False)
    torch.testing.assert_close(batch_major.transpose(0, 1), out, atol=1e-12, rtol=0)
    assert torch.equal(h[0], out[-1])


def _dropout_problem() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(2)
    x = torch.rand(STEPS, BATCH, 3, dtype=F64, generator=gen)
    h = torch.rand(2, BATCH, 4, dtype=F64, generator=gen)
    c = torch.rand(2, BATCH, 4, dtype=F64, generator=gen)
    return x, h, c


def test_layer_training_none_follows_the_module_mode() -> None:
    """TF's ``training=True`` default: a fresh module is in train mode, so dropout is on by
    default as in TF; ``eval()`` turns it off without a ``training=`` argument."""
    torch.manual_seed(3)
    layer = CudnnLSTM(2, 4, dropout=0.5, seed=1, input_size=3, dtype=F64)
    x, h, c = _dropout_problem()
    assert layer.training
    inference = layer(x, (h, c), training=False)[0]
    assert not torch.allclose(layer(x, (h, c))[0], inference)  # dropout active by default
    layer.eval()
    assert torch.equal(layer(x, (h, c))[0], inference)
    assert not torch.allclose(layer(x, (h, c), training=True)[0], inference)


def test_op_defaults_train_with_a_fixed_seed() -> None:
    """TF's op: ``is_training=True`` and ``seed=0`` by default, so dropout is on and the masks
    are the same for two ops made alike."""
    first, second = (ops.CudnnLSTM(2, 4, 3, dropout=0.5, dtype=F64) for _ in range(2))
    params = torch.rand(first.params_size(), dtype=F64, generator=torch.Generator().manual_seed(4))
    x, h, c = _dropout_problem()
    out = first(x, h, c, params)[0]
    assert torch.equal(out, second(x, h, c, params)[0])
    assert not torch.allclose(out, first(x, h, c, params, is_training=False)[0])


# -- behaviour: initial values --------------------------------------------------------------------


@pytest.mark.parametrize("cls", LAYERS)
def test_layer_initializers_are_tfs(cls: type[Any]) -> None:
    """TF: Glorot-uniform per canonical weight matrix, every bias (b_W and b_R) 0.0."""
    torch.manual_seed(5)
    layer = cls(2, 16, direction="bidirectional", input_size=3)
    op = ops.__dict__[cls.__name__](2, 16, 3, direction="bidirectional")
    weights, biases = op.params_to_canonical(layer.opaque_kernel.detach())
    assert all(bool((b == 0).all()) for b in biases)
    assert_glorot_uniform(weights)


def test_compatible_cells_initial_values_are_tfs() -> None:
    """TF: kernels Glorot-uniform, LSTM and basic biases 0, GRU ``gates/bias`` 1.0."""
    torch.manual_seed(6)
    expected_bias = {
        CudnnCompatibleLSTMCell: {"bias": 0.0},
        CudnnCompatibleGRUCell: {
            "gates/bias": 1.0,
            "candidate/input_projection/bias": 0.0,
            "candidate/hidden_projection/bias": 0.0,
        },
        BasicRNNCell: {"bias": 0.0},
    }
    kernels = []
    for cls, biases in expected_bias.items():
        for _ in range(20):  # enough draws for the distribution's test below
            cell = cls(4)
            cell.build(3)
            for name, value in cell.tf_variables().items():
                if name in biases:
                    assert bool((value == biases[name]).all()), (cls.__name__, name)
                else:
                    kernels.append(value.detach())
    assert_glorot_uniform(kernels)


def assert_glorot_uniform(matrices: list[torch.Tensor]) -> None:
    """Each matrix drawn from U(-l, l), l = sqrt(6 / (fan_in + fan_out)) of its own shape: every
    value within its limit, and the values scaled by their limits indistinguishable from
    U(-1, 1) (Kolmogorov-Smirnov at the 0.1% level): a limit too large, too small (a fused
    matrix's fans) or another distribution (normal, zeros) fails."""
    scaled = []
    for w in matrices:
        limit = math.sqrt(6.0 / (w.shape[0] + w.shape[1]))
        assert float(w.abs().max()) <= limit, (tuple(w.shape), float(w.abs().max()), limit)
        scaled.append(w.double().flatten() / limit)
    u = np.sort(torch.cat(scaled).numpy())
    n = u.size
    cdf = (u + 1) / 2
    ks = max(float(np.max(np.arange(1, n + 1) / n - cdf)), float(np.max(cdf - np.arange(n) / n)))
    assert n >= 300 and ks < 1.95 / math.sqrt(n), (n, ks)


def test_basic_rnn_cell_default_activation_is_tanh() -> None:
    """TF: ``BasicRNNCell(num_units, activation=None)`` means tanh; ``reuse`` is accepted."""
    cell = BasicRNNCell(3, dtype=F64)
    assert cell.rnn_mode == "rnn_tanh" and cell.activation == "tanh"
    assert BasicRNNCell(3, None, None).rnn_mode == "rnn_tanh"
    assert BasicRNNCell(3, "relu", True).rnn_mode == "rnn_relu"
    x = torch.from_numpy(np.linspace(-2, 2, 8).reshape(2, 4))
    h, _ = cell(x, cell.zero_state(2))
    kernel, bias = cell.tf_variables().values()
    want = torch.tanh(torch.cat([x, torch.zeros(2, 3, dtype=F64)], 1) @ kernel + bias)
    torch.testing.assert_close(h, want, atol=1e-12, rtol=0)
    assert bool((h < 0).any())  # not relu


def test_multi_rnn_cell_state_is_a_tuple_by_default() -> None:
    stack = MultiRNNCell([CudnnCompatibleLSTMCell(2), BasicRNNCell(3)])
    state = stack.zero_state(1)
    assert isinstance(state, tuple) and len(state) == 2
