"""Keras 3 (torch backend) <-> our layers: equal outputs, errors for what differs."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
import torch

keras = pytest.importorskip("keras")

# Keras' torch backend converts with np.array(tensor), which NumPy 2 flags for torch's __array__:
# a third-party deprecation, not ours.
pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning"
)

from cudnn_rnn.converters.keras import from_keras, to_keras  # noqa: E402
from cudnn_rnn.layers import CudnnGRU, CudnnLSTM, CudnnRNNRelu, CudnnRNNTanh  # noqa: E402

MAKERS = {
    "lstm": lambda: keras.layers.LSTM(3, return_sequences=True),
    "gru": lambda: keras.layers.GRU(3, return_sequences=True),
    "rnn_tanh": lambda: keras.layers.SimpleRNN(3, return_sequences=True),
    "rnn_relu": lambda: keras.layers.SimpleRNN(3, return_sequences=True, activation="relu"),
}


def run_keras(layers: list[Any], x: np.ndarray) -> np.ndarray:
    y = x
    for layer in layers:
        y = layer(y)
    return np.asarray(keras.ops.convert_to_numpy(y))


def randomise(layers: list[Any], rng: np.random.Generator) -> None:
    for layer in layers:
        for w in layer.weights:
            w.assign(rng.uniform(-0.6, 0.6, w.shape).astype("float32"))


@pytest.mark.parametrize(
    "mode,layers,bidi", list(itertools.product(MAKERS, (1, 2, 3), (False, True)))
)
def test_from_keras_and_back(mode: str, layers: int, bidi: bool) -> None:
    rng = np.random.default_rng(layers)
    x = rng.standard_normal((2, 5, 4)).astype("float32")
    stack = [
        keras.layers.Bidirectional(MAKERS[mode]()) if bidi else MAKERS[mode]()
        for _ in range(layers)
    ]
    run_keras(stack, x)  # build
    randomise(stack, rng)
    want = run_keras(stack, x)
    ours = from_keras(stack if layers > 1 else stack[0])
    assert ours.rnn_mode == mode and ours.num_layers == layers and ours.num_dirs == 1 + bidi
    got = ours(torch.as_tensor(x), time_major=False)[0].detach().numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)
    back = to_keras(ours)
    np.testing.assert_allclose(run_keras(back, x), got, atol=1e-5)


@pytest.mark.parametrize("cls", [CudnnLSTM, CudnnGRU, CudnnRNNTanh, CudnnRNNRelu])
def test_to_keras_from_our_layer(cls: Any) -> None:
    layer = cls(
        2,
        4,
        direction="bidirectional",
        input_size=3,
        seed=0,
        bias_initializer=lambda s: torch.rand(s),
    )
    x = torch.randn(2, 6, 3)
    want = layer(x, time_major=False)[0].detach().numpy()
    np.testing.assert_allclose(run_keras(to_keras(layer), x.numpy()), want, atol=1e-5)
    again = from_keras(to_keras(layer))
    np.testing.assert_allclose(again(x, time_major=False)[0].detach().numpy(), want, atol=1e-5)


def test_gru_biases_are_exact_both_ways() -> None:
    layer = CudnnGRU(1, 3, input_size=2, seed=1, bias_initializer=lambda s: torch.rand(s))
    back = from_keras(to_keras(layer))
    assert torch.equal(back.opaque_kernel, layer.opaque_kernel)


def test_skip_input_becomes_identity_kernel() -> None:
    layer = CudnnRNNTanh(1, 3, input_mode="skip_input", input_size=3, seed=0)
    (k,) = to_keras(layer)
    np.testing.assert_array_equal(k.get_weights()[0], np.eye(3, dtype="float32"))


def test_errors() -> None:
    gru = keras.layers.GRU(2, reset_after=False)
    gru(np.zeros((1, 2, 3), "float32"))
    with pytest.raises(ValueError, match=r"GRU\(reset_after=False\) computes different math"):
        from_keras(gru)
    with pytest.raises(ValueError, match=r"build the Keras layers first"):
        from_keras(keras.layers.LSTM(2))
    elu = keras.layers.SimpleRNN(2, activation="elu")
    elu(np.zeros((1, 2, 3), "float32"))
    with pytest.raises(ValueError, match=r"SimpleRNN activation 'elu' has no cuDNN mode"):
        from_keras(elu)
    with pytest.raises(
        TypeError,
        match=r"expected Keras LSTM, GRU, SimpleRNN or Bidirectional "
        r"layers, got Dense",
    ):
        from_keras(keras.layers.Dense(2))
    mixed = [keras.layers.LSTM(2, return_sequences=True), keras.layers.GRU(2)]
    run_keras(mixed, np.zeros((1, 2, 3), "float32"))
    with pytest.raises(ValueError, match=r"stacked layers must share one type"):
        from_keras(mixed)
    summed = keras.layers.Bidirectional(
        keras.layers.LSTM(2, return_sequences=True), merge_mode="sum"
    )
    summed(np.zeros((1, 2, 3), "float32"))
    with pytest.raises(ValueError, match=r"merge_mode 'sum' is not supported"):
        from_keras(summed)
    backwards = keras.layers.LSTM(2, go_backwards=True)
    backwards(np.zeros((1, 2, 3), "float32"))
    with pytest.raises(ValueError, match=r"go_backwards layers are not supported"):
        from_keras(backwards)
    with pytest.raises(ValueError, match=r"Keras layers have no LSTM projection"):
        to_keras(CudnnLSTM(1, 3, input_size=2, num_proj=2))


def test_registry_lists_what_exists() -> None:
    from cudnn_rnn import convert

    layer = CudnnGRU(1, 2, input_size=2, seed=0)
    assert convert.from_keras(convert.to_keras(layer)).count_params() == layer.count_params()
    with pytest.raises(
        ValueError,
        match=r"convert: no converter 'to' 'jax'; available: "
        r"keras/from, keras/to, keras_h5/from, numpy/from, onnx/from, onnx/to, "
        r"torch/from, torch/to\.",
    ):
        convert.converter("jax", "to")
