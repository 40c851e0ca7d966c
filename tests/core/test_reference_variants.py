"""The NumPy oracle's variants (issue 47) against producers that compute them: ONNX's own
conformance cases for ``LSTM``, ``GRU`` and ``RNN`` (expected outputs from the onnx package's
helpers: the reset-before GRU, peepholes, reverse, bidirectional, batch-first) and onnxruntime
running single nodes with every attribute (activations with their parameters, ``clip``,
``input_forget``, ``linear_before_reset``, sequence lengths in both directions).

The mapping from an ONNX node to the oracle is tests/support/onnx_nodes.py, written from the
operator specification (not our reader). Keras's ``go_backwards`` and merge modes and TF's
cell and projection clips are checked against their producers' files in the reader tests.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest

from cudnn_rnn.core.reference import rnn_forward
from cudnn_rnn.core.variant import ACTIVATIONS, Activation, Variant
from tests.support import onnx_nodes

CASES = onnx_nodes.conformance_cases()


def test_onnx_ships_the_cases_we_check() -> None:
    assert len(CASES) == 18, [c.name for c in CASES]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_onnx_conformance_case(case: onnx_nodes.Case) -> None:
    got = onnx_nodes.oracle(case.node, case.inputs)
    assert len(got) == len(case.outputs)
    for ours, expected in zip(got, case.outputs, strict=True):
        np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-6)


def _node(op: str, hidden: int, **attrs: Any) -> onnx.NodeProto:
    outputs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    return onnx.helper.make_node(op, ["X"], outputs, hidden_size=hidden, **attrs)


GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
#: (op, attributes, with lengths, with peepholes): every attribute the operators have.
GRID: list[tuple[str, dict[str, Any], bool, bool]] = [
    ("LSTM", {}, False, False),
    ("LSTM", {}, False, True),
    ("LSTM", {"clip": 0.7}, True, False),
    ("LSTM", {"input_forget": 1}, False, True),
    ("LSTM", {"direction": "reverse"}, True, True),
    ("LSTM", {"direction": "bidirectional", "clip": 1.5}, True, True),
    ("LSTM", {"direction": "reverse"}, False, False),
    (
        "LSTM",
        {
            "activations": ["HardSigmoid", "Elu", "Softsign"],
            "activation_alpha": [0.3, 0.9],
            "activation_beta": [0.4],
        },
        False,
        False,
    ),
    (
        "LSTM",
        {
            "activations": ["Sigmoid", "ScaledTanh", "Softplus"],
            "activation_alpha": [0.8],
            "activation_beta": [1.5],
        },
        True,
        False,
    ),
    ("LSTM", {"activations": ["Sigmoid", "LeakyRelu", "Relu"]}, False, False),
    ("GRU", {}, True, False),
    ("GRU", {"linear_before_reset": 1}, True, False),
    ("GRU", {"direction": "reverse", "clip": 0.9}, True, False),
    ("GRU", {"direction": "bidirectional"}, True, False),
    (
        "GRU",
        {
            "activations": ["HardSigmoid", "Affine"],
            "activation_alpha": [0.25, 0.6],
            "activation_beta": [0.45, 0.1],
        },
        False,
        False,
    ),
    ("RNN", {"activations": ["Relu"]}, True, False),
    ("RNN", {"activations": ["Sigmoid"], "direction": "reverse"}, True, False),
    ("RNN", {"activations": ["ThresholdedRelu"], "activation_alpha": [0.4]}, False, False),
    ("RNN", {"direction": "bidirectional", "clip": 0.5}, False, False),
]


def _inputs(
    op: str, attrs: dict[str, Any], lengths: bool, peepholes: bool, seed: int
) -> list[np.ndarray | None]:
    rng = np.random.default_rng(seed)
    steps, batch, size, hidden = 5, 3, 4, 6
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    g = GATES[op]

    def f32(*shape: int, scale: float = 0.6) -> np.ndarray:
        return (scale * rng.standard_normal(shape)).astype(np.float32)

    x = f32(steps, batch, size, scale=1.5)
    h0, c0 = f32(dirs, batch, hidden), f32(dirs, batch, hidden)
    if attrs.get("layout"):
        x, h0, c0 = np.swapaxes(x, 0, 1), np.swapaxes(h0, 0, 1), np.swapaxes(c0, 0, 1)
    inputs = [
        x,
        f32(dirs, g * hidden, size),
        f32(dirs, g * hidden, hidden),
        f32(dirs, 2 * g * hidden),
        np.array([5, 2, 4], np.int32) if lengths else None,
        h0,
    ]
    if op == "LSTM":  # GRU and RNN have six inputs
        inputs += [c0, f32(dirs, 3 * hidden) if peepholes else None]
    return inputs


@pytest.mark.parametrize(
    ("op", "attrs", "lengths", "peepholes"),
    GRID,
    ids=[f"{op}-{sorted(a)}-{'len' if n else ''}{'-P' if p else ''}" for op, a, n, p in GRID],
)
def test_matches_onnxruntime(
    op: str, attrs: dict[str, Any], lengths: bool, peepholes: bool
) -> None:
    pytest.importorskip("onnxruntime")
    node = _node(op, 6, **attrs)
    inputs = _inputs(op, attrs, lengths, peepholes, seed=len(str(attrs)) + 7 * lengths)
    assert any(v is not None for v in inputs[4:]) or not (lengths or peepholes)
    expected = onnx_nodes.nodes_run_by_onnxruntime(node, inputs)
    got = onnx_nodes.oracle(node, inputs)
    for ours, theirs in zip(got, expected, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=2e-5, atol=2e-6)


def test_the_default_variant_is_the_four_modes() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 2, 3))
    weights = [rng.standard_normal((5, 3)) for _ in range(3)] + [
        rng.standard_normal((5, 5)) for _ in range(3)
    ]
    biases = [rng.standard_normal(5) for _ in range(6)]
    h0 = rng.standard_normal((1, 2, 5))
    plain = rnn_forward("gru", x, h0, None, weights, biases, num_layers=1)
    same = rnn_forward("gru", x, h0, None, weights, biases, num_layers=1, variant=Variant())
    before = rnn_forward(
        "gru", x, h0, None, weights, biases, num_layers=1, variant=Variant(reset_after=False)
    )
    for a, b in zip(plain[:2], same[:2], strict=True):
        np.testing.assert_array_equal(a, b)
    assert np.abs(plain[0] - before[0]).max() > 1e-3


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_every_activation_has_its_formula(name: str) -> None:
    """Each activation at points where its formula is easy to state by hand."""
    from cudnn_rnn.core.reference import activation

    act = Activation(name)
    fn = activation(act.as_dict())
    x = np.array([-2.0, -0.5, 0.0, 0.3, 2.0])
    a, b = act.alpha, act.beta
    expected = {
        "sigmoid": 1 / (1 + np.exp(-x)),
        "tanh": np.tanh(x),
        "relu": np.maximum(x, 0),
        "hard_sigmoid": np.clip(0.2 * x + 0.5, 0, 1),
        "affine": x,
        "leaky_relu": np.where(x >= 0, x, 0.01 * x),
        "thresholded_relu": np.where(x > 1.0, x, 0.0),
        "scaled_tanh": np.tanh(x),
        "elu": np.where(x >= 0, x, np.exp(x) - 1),
        "softsign": x / (1 + np.abs(x)),
        "softplus": np.log1p(np.exp(x)),
        "selu": 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * (np.exp(x) - 1)),
        "exponential": np.exp(x),
        "silu": x / (1 + np.exp(-x)),
    }[name]
    assert (a, b) == {
        "hard_sigmoid": (0.2, 0.5),
        "affine": (1.0, 0.0),
        "leaky_relu": (0.01, None),
        "thresholded_relu": (1.0, None),
        "scaled_tanh": (1.0, 1.0),
        "elu": (1.0, None),
    }.get(name, (None, None))
    np.testing.assert_allclose(fn(x), expected, rtol=1e-12, atol=1e-15)


def _stack_params(
    rng: np.random.Generator, mode: str, layers: int, dirs: int, size: int, hidden: int,
    upper: int,
) -> tuple[list[np.ndarray], list[np.ndarray]]:  # fmt: skip
    g = {"lstm": 4, "gru": 3}.get(mode, 1)
    weights: list[np.ndarray] = []
    biases: list[np.ndarray] = []
    for layer in range(layers):
        for _ in range(dirs):
            width = size if layer == 0 else upper
            weights += [rng.standard_normal((hidden, width)) * 0.5 for _ in range(g)]
            weights += [rng.standard_normal((hidden, hidden)) * 0.5 for _ in range(g)]
            biases += [rng.standard_normal(hidden) * 0.3 for _ in range(2 * g)]
    return weights, biases


@pytest.mark.parametrize("merge", ["sum", "mul", "ave"])
def test_merge_modes_combine_the_concatenated_halves(merge: str) -> None:
    """A one-layer bidirectional merge is the concatenated output's halves combined."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 2, 3))
    h0 = rng.standard_normal((2, 2, 4))
    w, b = _stack_params(rng, "gru", 1, 2, 3, 4, 8)
    lengths = np.array([6, 3])
    cat, h_cat, _ = rnn_forward(
        "gru", x, h0, None, w, b, num_layers=1, bidirectional=True, sequence_lengths=lengths
    )
    got, h_n, _ = rnn_forward(
        "gru", x, h0, None, w, b, num_layers=1, bidirectional=True, sequence_lengths=lengths,
        variant={"merge": merge},
    )  # fmt: skip
    fw, bw = cat[..., :4], cat[..., 4:]
    expected = {"sum": fw + bw, "mul": fw * bw, "ave": (fw + bw) / 2}[merge]
    np.testing.assert_allclose(got, expected, rtol=1e-14)
    np.testing.assert_array_equal(h_n, h_cat)


def test_separate_stacks_are_two_unidirectional_stacks() -> None:
    """``stacks="separate"``: the forward stack is a unidirectional stack on ``x``, the backward
    one a unidirectional stack on ``x`` reversed within each length, its output reversed
    back; the top layers' outputs are concatenated."""
    rng = np.random.default_rng(9)
    steps, batch, size, hidden, layers = 5, 3, 3, 4, 2
    x = rng.standard_normal((steps, batch, size))
    lengths = np.array([5, 2, 4])
    h0 = rng.standard_normal((layers * 2, batch, hidden))
    c0 = rng.standard_normal((layers * 2, batch, hidden))
    w, b = _stack_params(rng, "lstm", layers, 2, size, hidden, hidden)
    y, h_n, c_n = rnn_forward(
        "lstm", x, h0, c0, w, b, num_layers=layers, bidirectional=True,
        sequence_lengths=lengths, variant={"stacks": "separate"},
    )  # fmt: skip

    def of_direction(seq: list[np.ndarray], d: int) -> list[np.ndarray]:
        per = len(seq) // (2 * layers)
        return [t for p in range(2 * layers) if p % 2 == d for t in seq[p * per : (p + 1) * per]]

    def reverse_within(a: np.ndarray) -> np.ndarray:
        out = np.zeros_like(a)
        for k, n in enumerate(lengths):
            out[:n, k] = a[:n, k][::-1]
        return out

    fw = rnn_forward(
        "lstm", x, h0[0::2], c0[0::2], of_direction(w, 0), of_direction(b, 0),
        num_layers=layers, sequence_lengths=lengths,
    )  # fmt: skip
    bw = rnn_forward(
        "lstm", reverse_within(x), h0[1::2], c0[1::2], of_direction(w, 1), of_direction(b, 1),
        num_layers=layers, sequence_lengths=lengths,
    )  # fmt: skip
    np.testing.assert_allclose(y, np.concatenate([fw[0], reverse_within(bw[0])], -1), rtol=1e-13)
    np.testing.assert_allclose(h_n[0::2], fw[1], rtol=1e-13)
    np.testing.assert_allclose(h_n[1::2], bw[1], rtol=1e-13)
    assert c_n is not None and fw[2] is not None
    np.testing.assert_allclose(c_n[0::2], fw[2], rtol=1e-13)


def test_go_backwards_is_reverse_in_processing_order() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 2, 3))
    h0 = rng.standard_normal((1, 2, 4))
    w, b = _stack_params(rng, "rnn_tanh", 1, 1, 3, 4, 4)
    lengths = np.array([5, 3])
    rev = rnn_forward("rnn_tanh", x, h0, None, w, b, num_layers=1, sequence_lengths=lengths,
                      variant={"time": "reverse"})  # fmt: skip
    back = rnn_forward("rnn_tanh", x, h0, None, w, b, num_layers=1, sequence_lengths=lengths,
                       variant={"time": "go_backwards"})  # fmt: skip
    np.testing.assert_array_equal(back[0], rev[0][::-1])
    np.testing.assert_array_equal(back[1], rev[1])
    # Keras's order: the first output is the last step's (x[n-1]) for a full sequence, and
    # a padded sequence's outputs start with its padding (zeros).
    assert np.abs(back[0][0, 0]).max() > 0 and np.all(back[0][:2, 1] == 0)


def test_cell_and_projection_clips_bound_the_states() -> None:
    rng = np.random.default_rng(4)
    x = 3 * rng.standard_normal((6, 2, 3))
    h0 = np.zeros((1, 2, 2))
    c0 = np.zeros((1, 2, 4))
    w = [rng.standard_normal((4, 3)) * 2 for _ in range(4)]
    w += [rng.standard_normal((4, 2)) * 2 for _ in range(4)]
    w += [rng.standard_normal((2, 4)) * 3]
    b = [rng.standard_normal(4) + 1.5 for _ in range(8)]
    free = rnn_forward("lstm", x, h0, c0, w, b, num_layers=1, num_proj=2)
    clipped = rnn_forward(
        "lstm", x, h0, c0, w, b, num_layers=1, num_proj=2,
        variant={"cell_clip": 0.5, "proj_clip": 0.3},
    )  # fmt: skip
    assert np.abs(free[2]).max() > 0.5 and np.abs(free[0]).max() > 0.3
    assert np.abs(clipped[2]).max() == 0.5 and np.abs(clipped[0]).max() == 0.3
