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
from cudnn_rnn.core.variant import Activation, Variant  # noqa: E402
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


#: Keras layers computing variants of cuDNN's math: Keras itself is the oracle of each mapping.
VARIANTS = {
    "lstm-hard-sigmoid-relu": lambda: keras.layers.LSTM(
        3, return_sequences=True, recurrent_activation="hard_sigmoid", activation="relu"
    ),
    "lstm-selu": lambda: keras.layers.LSTM(3, return_sequences=True, activation="selu"),
    "gru-reset-before": lambda: keras.layers.GRU(
        3, return_sequences=True, reset_after=False, recurrent_activation="hard_sigmoid"
    ),
    "gru-softsign": lambda: keras.layers.GRU(3, return_sequences=True, activation="softsign"),
    **{
        f"rnn-{act}": lambda act=act: keras.layers.SimpleRNN(
            3, return_sequences=True, activation=act
        )
        for act in ("elu", "linear", "leaky_relu", "celu", "swish", "softplus", "exponential")
    },
    "lstm-go-backwards": lambda: keras.layers.LSTM(3, return_sequences=True, go_backwards=True),
    **{
        f"bidi-{merge}": lambda merge=merge: keras.layers.Bidirectional(
            keras.layers.GRU(3, return_sequences=True, reset_after=False), merge_mode=merge
        )
        for merge in ("sum", "mul", "ave")
    },
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variants_from_keras_and_back(name: str) -> None:
    """A Keras layer computing a variant: ours computes what it computes, and to_keras gives a
    Keras layer computing ours (a stack of two where the variant stacks)."""
    rng = np.random.default_rng(7)
    x = rng.uniform(-1, 1, (2, 5, 4)).astype("float32")
    stack = [VARIANTS[name]() for _ in range(1 if "backwards" in name else 2)]
    run_keras(stack, x)  # build
    randomise(stack, rng)
    want = run_keras(stack, x)
    ours = from_keras(stack if len(stack) > 1 else stack[0])
    assert not ours.variant.is_cudnn and ours.num_layers == len(stack)
    got = ours(torch.as_tensor(x), time_major=False)[0].detach().numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)
    back = to_keras(ours)
    np.testing.assert_allclose(run_keras(back, x), got, atol=1e-5)
    assert from_keras(back if len(back) > 1 else back[0]).variant == ours.variant


def test_errors() -> None:
    gelu = keras.layers.GRU(2, activation="gelu")
    gelu(np.zeros((1, 2, 3), "float32"))
    with pytest.raises(ValueError, match=r"activation 'gelu' is no function we compute"):
        from_keras(gelu)
    with pytest.raises(ValueError, match=r"build the Keras layers first"):
        from_keras(keras.layers.LSTM(2))
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
    gates = [
        keras.layers.LSTM(2, return_sequences=True, recurrent_activation=act)
        for act in ("sigmoid", "hard_sigmoid")
    ]
    run_keras(gates, np.zeros((1, 2, 3), "float32"))
    with pytest.raises(ValueError, match=r"stacked layers must share one type, variant and"):
        from_keras(gates)
    listed = keras.layers.Bidirectional(
        keras.layers.LSTM(2, return_sequences=True), merge_mode=None
    )
    listed(np.zeros((1, 2, 3), "float32"))
    with pytest.raises(ValueError, match=r"merge_mode=None returns the two directions' outputs"):
        from_keras(listed)
    backwards = [keras.layers.LSTM(2, go_backwards=True, return_sequences=True) for _ in "ab"]
    run_keras(backwards, np.zeros((1, 2, 3), "float32"))
    with pytest.raises(ValueError, match=r"go_backwards layers return their outputs in"):
        from_keras(backwards)
    with pytest.raises(ValueError, match=r"Keras layers have no LSTM projection"):
        to_keras(CudnnLSTM(1, 3, input_size=2, num_proj=2))
    peepholes = CudnnLSTM(1, 3, input_size=2, variant=Variant(peepholes=True))
    with pytest.raises(ValueError, match=r"with peepholes, which Keras's LSTM, GRU and"):
        to_keras(peepholes)
    split = Variant(output_activation=Activation("relu"))
    with pytest.raises(ValueError, match=r"one activation to its candidate and to its cell"):
        to_keras(CudnnLSTM(1, 3, input_size=2, variant=split))
    leaky = Variant(cell_activation=Activation("leaky_relu", 0.01))
    with pytest.raises(ValueError, match=r"Keras 3 has no activation leaky_relu\(0\.01\)"):
        to_keras(CudnnRNNTanh(1, 3, input_size=2, variant=leaky))


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


def test_missing_keras_says_what_is_missing() -> None:
    """Without keras: install it; keras without its backend's module: that module, or the torch
    backend (issue 49: "needs keras 3" was said while keras 3 was installed)."""
    from cudnn_rnn.converters.keras import _why_no_keras

    gone = ModuleNotFoundError("No module named 'keras'", name="keras")
    assert _why_no_keras(gone) == (
        "cudnn_rnn.convert: Keras conversion needs keras 3 (pip install keras, or "
        "pip install '.[keras]' in a clone of cudnn-rnn)."
    )


def test_keras_without_its_backend_names_the_backend(tmp_path: Any) -> None:
    """keras 3 installed, asked to run on a backend that is not installed: the message names
    that backend and the way to the torch one, in a fresh process (keras reads
    ``KERAS_BACKEND`` when first imported)."""
    import importlib.util
    import os
    import subprocess
    import sys

    absent = [b for b in ("tensorflow", "jax") if importlib.util.find_spec(b) is None]
    if not absent:
        pytest.skip("every keras backend is installed here")
    code = (
        "import cudnn_rnn\n"
        "from cudnn_rnn import convert\n"
        "try:\n"
        "    convert.to_keras(cudnn_rnn.CudnnLSTM(1, 2, input_size=3))\n"
        "except ImportError as err:\n"
        "    print(err)\n"
    )
    env = {**os.environ, "KERAS_BACKEND": absent[0], "HOME": str(tmp_path)}
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.stdout.startswith(
        f"cudnn_rnn.convert: keras is installed, but cannot be imported: it runs on "
        f"KERAS_BACKEND={absent[0]}, and {absent[0]} is not installed ("
    ), run.stdout + run.stderr
    assert "set KERAS_BACKEND=torch before keras is first imported" in run.stdout
    assert "needs keras 3" not in run.stdout
