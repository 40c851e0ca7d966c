"""The ONNX reader's variants (issue 47): LSTM, GRU and RNN nodes with every attribute ONNX
gives them (activations with their alpha and beta, ``clip``, ``input_forget``,
``linear_before_reset``, ``direction="reverse"``, the peepholes ``P``) read as an RNNSpec
with its :class:`~cudnn_rnn.core.variant.Variant`, at the data level (``io.onnx.read``, what
``cudnn_rnn.load`` reads a file with; no layer is built here).

Each node is saved as a model file (W, R, B, P initializers; X, sequence_lens and the initial
states graph inputs) and read back; the spec must be what the node says (an explicit
expectation per node), and the NumPy oracle (:func:`cudnn_rnn.core.reference.rnn_forward`)
on the read canonical tensors must give the outputs of ONNX's 18 conformance cases and of
onnxruntime. What a node's attributes say that no variant computes is refused, each with its
reason pinned.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cudnn_rnn.core.constants import CUDNN_RNN_BIDIRECTION as BI
from cudnn_rnn.core.constants import CUDNN_RNN_UNIDIRECTION as UNI
from cudnn_rnn.core.reference import rnn_forward
from cudnn_rnn.core.variant import Activation, Variant
from cudnn_rnn.io.found import ReadRNN
from cudnn_rnn.io.onnx.file import OnnxFormatError
from cudnn_rnn.io.onnx.read import find_rnns, read
from cudnn_rnn.io.onnx.variants import node_math

onnx = pytest.importorskip("onnx")
from tests.support import onnx_nodes  # noqa: E402  (imports onnx)

helper = onnx.helper
NAMES = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")
PARAMETERS = {"W", "R", "B", "P"}  # initializers; the others are graph inputs
RTOL, ATOL = 2e-5, 2e-6


def symbolic(name: str, rank: int) -> Any:
    """A float graph output of ``rank`` symbolic dimensions (the checker wants a shape)."""
    return helper.make_tensor_value_info(
        name, onnx.TensorProto.FLOAT, [f"{name}_{k}" for k in range(rank)]
    )


def save_node(node: Any, inputs: Sequence[np.ndarray | None], path: Path) -> Path:
    """``node`` (its attributes) as the one node of a model file, named ``rnn``."""
    given = {n: v for n, v in zip(NAMES, inputs, strict=False) if v is not None}
    rnn = helper.make_node(
        node.op_type,
        [n if n in given else "" for n in NAMES[: len(inputs)]],
        list(node.output),
        "rnn",
        **onnx_nodes.attributes(node),
    )
    dtype = helper.np_dtype_to_tensor_dtype

    def value(name: str, array: np.ndarray) -> Any:
        return helper.make_tensor_value_info(name, dtype(array.dtype), array.shape)

    graph = helper.make_graph(
        [rnn],
        "variant",
        [value(n, v) for n, v in given.items() if n not in PARAMETERS],
        [symbolic(n, 4 if k == 0 else 3) for k, n in enumerate(node.output) if n],
        [onnx.numpy_helper.from_array(v, n) for n, v in given.items() if n in PARAMETERS],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), str(path))
    return path


def oracle_of(data: ReadRNN, node: Any, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """The node's named outputs (ONNX's shapes) by the oracle on what was read: its spec,
    variant and canonical tensors, and the node's X, lengths and initial states."""
    x, _, _, _, lengths, h0, c0, _ = list(inputs) + [None] * (8 - len(inputs))
    assert x is not None
    spec = data.spec
    batch_major = onnx_nodes.attributes(node).get("layout", 0) == 1
    if batch_major:
        x = np.swapaxes(x, 0, 1)
        h0 = None if h0 is None else np.swapaxes(h0, 0, 1)
        c0 = None if c0 is None else np.swapaxes(c0, 0, 1)
    steps, batch = x.shape[:2]
    states = (spec.num_dirs, batch, spec.num_units)
    h0 = np.zeros(states) if h0 is None else h0
    if spec.mode == "lstm":
        c0 = np.zeros(states) if c0 is None else c0
    y, h_n, c_n = rnn_forward(
        spec.mode, x, h0, c0,
        [w.double().numpy() for w in data.weights], [b.double().numpy() for b in data.biases],
        num_layers=spec.num_layers, bidirectional=spec.bidirectional,
        skip_input=spec.skip_input, sequence_lengths=lengths, variant=spec.variant.as_dict(),
    )  # fmt: skip
    y = y.reshape(steps, batch, spec.num_dirs, spec.num_units).transpose(0, 2, 1, 3)
    outs = [y, h_n] + ([c_n] if c_n is not None else [])
    if batch_major:
        outs = [y.transpose(2, 0, 1, 3), *(np.swapaxes(s, 0, 1) for s in outs[1:])]
    return [o for o, name in zip(outs, node.output, strict=False) if name]


def check_read(
    path: Path,
    node: Any,
    inputs: Sequence[np.ndarray | None],
    expected: list[np.ndarray],
    spec: tuple[str, str, Variant],
) -> None:
    """The file's RNN: its spec is ``spec`` (mode, direction, variant), its record says the
    variant, and the oracle on its data gives ``expected``."""
    data = read(path)
    assert (data.spec.mode, data.spec.direction, data.spec.variant) == spec
    (found,) = find_rnns(path)
    assert found.computable and found == data.found
    variant = spec[2]
    if variant.is_cudnn:
        assert not found.notes and "variant" not in found.details
    else:
        note = f"it computes {spec[0]} with a variant: {variant.describe()}"
        assert found.notes == data.notes == (note,)
        assert f"; note: {note}" in found.describe()
        assert found.details["variant"] == variant.as_dict()
    got = oracle_of(data, node, inputs)
    assert len(got) == len(expected)
    for ours, theirs in zip(got, expected, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=RTOL, atol=ATOL)


# -- ONNX's conformance cases ---------------------------------------------------------------------

CASES = onnx_nodes.conformance_cases()
MODES = {"LSTM": "lstm", "GRU": "gru", "RNN": "rnn_tanh"}


def conformance_spec(case: onnx_nodes.Case) -> tuple[str, str, Variant]:
    """What a conformance node says: only direction, linear_before_reset (a GRU's default 0:
    the reset gate before the product) and P vary in these cases."""
    attrs = onnx_nodes.attributes(case.node)
    assert set(attrs) <= {"hidden_size", "direction", "layout", "linear_before_reset"}
    direction = attrs.get("direction", b"forward").decode()
    peepholes = len(case.inputs) > 7 and bool(np.any(case.inputs[7] != 0))
    variant = Variant(
        reset_after=case.node.op_type != "GRU" or attrs.get("linear_before_reset", 0) == 1,
        peepholes=peepholes,
        time="reverse" if direction == "reverse" else "forward",
    )
    return MODES[case.node.op_type], BI if direction == "bidirectional" else UNI, variant


def test_the_conformance_cases_hold_the_variants() -> None:
    said = [conformance_spec(c)[2] for c in CASES]
    assert len(CASES) == 18
    assert sum(v.peepholes for v in said) == 1
    assert sum(v.time == "reverse" for v in said) == 3
    assert sum(not v.reset_after for v in said) == 6  # every GRU case: ONNX's default


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_conformance_case_read(case: onnx_nodes.Case, tmp_path: Path) -> None:
    path = save_node(case.node, case.inputs, tmp_path / "case.onnx")
    check_read(path, case.node, case.inputs, case.outputs, conformance_spec(case))


# -- every attribute, against onnxruntime ---------------------------------------------------------

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


#: (op, attributes, with lengths, P ("": none, "P": random, "zeros"), what the node says:
#: mode, direction, variant).
GRID: list[tuple[str, dict[str, Any], bool, str, tuple[str, str, Variant]]] = [
    ("LSTM", {}, False, "", ("lstm", UNI, Variant())),
    ("LSTM", {}, False, "P", ("lstm", UNI, Variant(peepholes=True))),
    ("LSTM", {}, True, "zeros", ("lstm", UNI, Variant())),
    ("LSTM", {"clip": 0.7}, True, "", ("lstm", UNI, Variant(gate_clip=0.7))),
    ("LSTM", {"input_forget": 1}, False, "P",
     ("lstm", UNI, Variant(input_forget=True, peepholes=True))),
    ("LSTM", {"direction": "reverse"}, True, "P",
     ("lstm", UNI, Variant(time="reverse", peepholes=True))),
    ("LSTM", {"direction": "bidirectional", "clip": 1.5}, True, "P",
     ("lstm", BI, Variant(gate_clip=1.5, peepholes=True))),
    ("LSTM", {"activations": ["HardSigmoid", "Elu", "Softsign"], "activation_alpha": [0.3, 0.9],
              "activation_beta": [0.4]}, False, "",
     ("lstm", UNI, Variant(gate_activation=Activation("hard_sigmoid", 0.3, 0.4),
                           cell_activation=Activation("elu", 0.9),
                           output_activation=Activation("softsign")))),
    ("LSTM", {"activations": ["Sigmoid", "ScaledTanh", "Softplus"], "activation_alpha": [0.8],
              "activation_beta": [1.5]}, True, "",
     ("lstm", UNI, Variant(cell_activation=Activation("scaled_tanh", 0.8, 1.5),
                           output_activation=Activation("softplus")))),
    ("LSTM", {"activations": ["Sigmoid", "LeakyRelu", "Relu"]}, False, "",
     ("lstm", UNI, Variant(cell_activation=Activation("leaky_relu", 0.01),
                           output_activation=Activation("relu")))),
    ("LSTM", {"activations": ["hardsigmoid", "TANH", "tanh"]}, False, "",  # names in any case
     ("lstm", UNI, Variant(gate_activation=Activation("hard_sigmoid", 0.2, 0.5)))),
    ("LSTM", {"direction": "bidirectional", "activations": ["HardSigmoid", "Tanh", "Tanh"] * 2,
              "activation_alpha": [0.3, 0.3], "activation_beta": [0.6, 0.6]}, True, "",
     ("lstm", BI, Variant(gate_activation=Activation("hard_sigmoid", 0.3, 0.6)))),
    ("GRU", {}, True, "", ("gru", UNI, Variant(reset_after=False))),
    ("GRU", {"linear_before_reset": 1}, True, "", ("gru", UNI, Variant())),
    ("GRU", {"direction": "reverse", "clip": 0.9}, True, "",
     ("gru", UNI, Variant(reset_after=False, time="reverse", gate_clip=0.9))),
    ("GRU", {"direction": "bidirectional"}, True, "", ("gru", BI, Variant(reset_after=False))),
    ("GRU", {"direction": "bidirectional", "linear_before_reset": 1, "clip": 2.0}, False, "",
     ("gru", BI, Variant(gate_clip=2.0))),
    ("GRU", {"activations": ["HardSigmoid", "Affine"], "activation_alpha": [0.25, 0.6],
             "activation_beta": [0.45, 0.1]}, False, "",
     ("gru", UNI, Variant(reset_after=False, gate_activation=Activation("hard_sigmoid", 0.25, 0.45),
                          cell_activation=Activation("affine", 0.6, 0.1)))),
    ("GRU", {"activations": ["Sigmoid", "Affine"], "activation_alpha": [0.6],
             "linear_before_reset": 1}, False, "",  # Affine's beta: 0 for ONNX and onnxruntime
     ("gru", UNI, Variant(cell_activation=Activation("affine", 0.6, 0.0)))),
    ("RNN", {"activations": ["Relu"]}, True, "", ("rnn_relu", UNI, Variant())),
    ("RNN", {"activations": ["Tanh"], "direction": "reverse"}, True, "",
     ("rnn_tanh", UNI, Variant(time="reverse"))),
    ("RNN", {"activations": ["Sigmoid"], "direction": "reverse"}, True, "",
     ("rnn_tanh", UNI, Variant(cell_activation=Activation("sigmoid"), time="reverse"))),
    ("RNN", {"activations": ["ThresholdedRelu"], "activation_alpha": [0.4]}, False, "",
     ("rnn_tanh", UNI, Variant(cell_activation=Activation("thresholded_relu", 0.4)))),
    ("RNN", {"activations": ["HardSigmoid"]}, False, "",
     ("rnn_tanh", UNI, Variant(cell_activation=Activation("hard_sigmoid", 0.2, 0.5)))),
    ("RNN", {"direction": "bidirectional", "clip": 0.5}, False, "",
     ("rnn_tanh", BI, Variant(gate_clip=0.5))),
    ("RNN", {"direction": "bidirectional", "activations": ["Relu", "Relu"]}, True, "",
     ("rnn_relu", BI, Variant())),
]  # fmt: skip


def grid_inputs(
    op: str, attrs: dict[str, Any], lengths: bool, peepholes: str, seed: int
) -> list[np.ndarray | None]:
    rng = np.random.default_rng(seed)
    steps, batch, size, hidden = 5, 3, 4, 6
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    g = GATES[op]

    def draw(*shape: int, scale: float = 0.6) -> np.ndarray:
        return (scale * rng.standard_normal(shape)).astype(np.float32)

    inputs: list[np.ndarray | None] = [
        draw(steps, batch, size, scale=1.5),
        draw(dirs, g * hidden, size),
        draw(dirs, g * hidden, hidden),
        draw(dirs, 2 * g * hidden),
        np.array([5, 2, 4], np.int32) if lengths else None,
        draw(dirs, batch, hidden),
    ]
    if op == "LSTM":
        p = {
            "": None,
            "P": draw(dirs, 3 * hidden),
            "zeros": np.zeros((dirs, 3 * hidden), np.float32),
        }
        inputs += [draw(dirs, batch, hidden), p[peepholes]]
    return inputs


def grid_id(op: str, attrs: dict[str, Any], lengths: bool, peepholes: str) -> str:
    said = "-".join(
        f"{k}={'/'.join(map(str, v)) if isinstance(v, list) else v}" for k, v in attrs.items()
    )
    return "-".join(p for p in (op, said, "len" if lengths else "", peepholes) if p)


@pytest.mark.parametrize(
    ("op", "attrs", "lengths", "peepholes", "spec"),
    GRID,
    ids=[grid_id(*row[:4]) for row in GRID],
)
def test_node_read_as_onnxruntime_runs_it(
    op: str,
    attrs: dict[str, Any],
    lengths: bool,
    peepholes: str,
    spec: tuple[str, str, Variant],
    tmp_path: Path,
) -> None:
    pytest.importorskip("onnxruntime")
    outputs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, ["X"], outputs, hidden_size=6, **attrs)
    inputs = grid_inputs(op, attrs, lengths, peepholes, seed=len(GRID) + len(str(attrs)))
    expected = onnx_nodes.nodes_run_by_onnxruntime(node, inputs)
    check_read(save_node(node, inputs, tmp_path / "node.onnx"), node, inputs, expected, spec)


def test_the_peepholes_are_reordered_from_onnx(tmp_path: Path) -> None:
    """ONNX's P is ``i, o, f`` per direction; the canonical biases end with ``P_i, P_f, P_o``
    after each direction's biases."""
    inputs = grid_inputs("LSTM", {"direction": "bidirectional"}, False, "P", seed=3)
    p = inputs[7]
    assert p is not None
    node = helper.make_node("LSTM", ["X"], ["Y"], hidden_size=6, direction="bidirectional")
    data = read(save_node(node, inputs, tmp_path / "p.onnx"))
    assert len(data.biases) == 2 * (8 + 3)
    for d in range(2):
        p_i, p_o, p_f = p[d].reshape(3, 6)
        ours = data.biases[d * 11 + 8 : d * 11 + 11]
        for got, want in zip(ours, (p_i, p_f, p_o), strict=True):
            np.testing.assert_array_equal(got.numpy(), want)


# -- stacks ---------------------------------------------------------------------------------------


def gru_stack(tmp_path: Path, lbr: tuple[int, int]) -> tuple[Path, list[np.ndarray]]:
    """Two GRU nodes, the second reading the first's Y through Transpose and Reshape (our
    stack's layout), with ``linear_before_reset`` each; and X."""
    rng = np.random.default_rng(4)
    hidden, size = 3, 2

    def weights(k: int, width: int) -> list[Any]:
        arrays = {
            "W": rng.standard_normal((1, 3 * hidden, width)),
            "R": rng.standard_normal((1, 3 * hidden, hidden)),
            "B": rng.standard_normal((1, 6 * hidden)),
        }
        return [
            onnx.numpy_helper.from_array(a.astype(np.float32), f"{n}{k}") for n, a in arrays.items()
        ]

    shape = onnx.numpy_helper.from_array(np.array([0, 0, -1], np.int64), "shape")
    nodes = [
        helper.make_node("GRU", ["X", "W0", "R0", "B0"], ["Y0"], "gru0", hidden_size=hidden,
                         linear_before_reset=lbr[0]),
        helper.make_node("Transpose", ["Y0"], ["T0"], "t0", perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["T0", "shape"], ["X1"], "r0"),
        helper.make_node("GRU", ["X1", "W1", "R1", "B1"], ["Y1"], "gru1", hidden_size=hidden,
                         linear_before_reset=lbr[1]),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "stack",
        [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, ["T", "B", size])],
        [symbolic("Y1", 4)],
        [*weights(0, size), *weights(1, hidden), shape],
    )
    path = tmp_path / "stack.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), str(path))
    return path, [rng.standard_normal((4, 2, size)).astype(np.float32)]


def test_a_stack_of_variant_nodes_is_one_rnn(tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    path, (x,) = gru_stack(tmp_path, (0, 0))
    (found,) = find_rnns(path)
    assert (found.name, found.num_layers, found.notes) == (
        "gru0+gru1",
        2,
        ("it computes gru with a variant: reset before the product",),
    )
    data = read(path)
    assert (data.spec.num_layers, data.spec.variant) == (2, Variant(reset_after=False))
    (y,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"X": x})
    h0 = np.zeros((2, 2, 3))
    ours, _, _ = rnn_forward(
        "gru", x, h0, None, [w.double().numpy() for w in data.weights],
        [b.double().numpy() for b in data.biases], num_layers=2,
        variant=data.spec.variant.as_dict(),
    )  # fmt: skip
    np.testing.assert_allclose(ours, y[:, 0], rtol=RTOL, atol=ATOL)


def test_nodes_of_two_variants_are_no_stack(tmp_path: Path) -> None:
    path, _ = gru_stack(tmp_path, (0, 1))
    found = find_rnns(path)
    assert [(r.name, r.num_layers, r.notes) for r in found] == [
        ("gru0", 1, ("it computes gru with a variant: reset before the product",)),
        ("gru1", 1, ()),
    ]
    with pytest.raises(
        OnnxFormatError,
        match=r"onnx.read: RNN node 'gru1' computes cuDNN's math, but node 'gru0' computes reset "
        r"before the product; our layer stacks layers of one kind only\.",
    ):
        read(path)
    assert read(path, "gru1").spec.variant == Variant()


# -- what no variant computes: refused, every reason pinned ---------------------------------------

_KNOWN = (
    "Sigmoid, Tanh, Relu, HardSigmoid, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, Elu, "
    "Softsign, Softplus"
)
_NOT_GUESSED = "ONNX documents 1.0, onnxruntime computes with 0, so it is not guessed"
#: name -> (op, attributes, the reasons find_rnns lists).
REFUSED: dict[str, tuple[str, dict[str, Any], tuple[str, ...]]] = {
    "unknown": ("RNN", {"activations": ["Swish"]},
                (f"has activations=['Swish']; 'Swish' is not one of ONNX's RNN activations "
                 f"({_KNOWN})",)),
    "affine": ("GRU", {"activations": ["Sigmoid", "Affine"]},
               (f"has activations with Affine, to which activation_alpha gives no alpha: "
                f"{_NOT_GUESSED}",)),
    "scaled_tanh": ("LSTM", {"activations": ["Sigmoid", "ScaledTanh", "Tanh"],
                             "activation_alpha": [2.0]},
                    (f"has activations with ScaledTanh, to which activation_beta gives no beta: "
                     f"{_NOT_GUESSED}",)),
    "thresholded": ("RNN", {"activations": ["ThresholdedRelu"]},
                    (f"has activations with ThresholdedRelu, to which activation_alpha gives no "
                     f"alpha: {_NOT_GUESSED}",)),
    "both_affine": ("GRU", {"direction": "bidirectional", "activations": ["Sigmoid", "Affine"] * 2},
                    (f"has activations with Affine, to which activation_alpha gives no alpha: "
                     f"{_NOT_GUESSED}",)),
    "directions": ("RNN", {"direction": "bidirectional", "activations": ["Tanh", "Sigmoid"]},
                   ("has activations that differ between its directions (forward tanh, backward "
                    "sigmoid); our variants give both directions one set",)),
    "parameters": ("LSTM", {"direction": "bidirectional",
                            "activations": ["HardSigmoid", "Tanh", "Tanh"] * 2,
                            "activation_alpha": [0.3]},
                   ("has activations that differ between its directions (forward "
                    "hard_sigmoid(0.3, 0.5), tanh, tanh, backward hard_sigmoid(0.2, 0.5), tanh, "
                    "tanh); our variants give both directions one set",)),
    "left_over": ("RNN", {"activations": ["Tanh"], "activation_alpha": [0.5]},
                  ("has activation_alpha=[0.5], 1 value(s) more than its activations take (only "
                   "HardSigmoid, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, Elu take one, "
                   "in order)",)),
    "count": ("LSTM", {"activations": ["Sigmoid", "Tanh"]},
              ("has activations=['Sigmoid', 'Tanh']; LSTM takes 3 per direction (f, g, h), one "
               "list per direction",)),
    "clip": ("LSTM", {"clip": -1.0, "input_forget": 1},
             ("has clip=-1.0; a clip is a finite float > 0",)),
    "direction": ("RNN", {"direction": "sideways"},
                  ("has direction='sideways'; ONNX defines 'forward', 'reverse' and "
                   "'bidirectional'",)),
}  # fmt: skip


def refused_model(tmp_path: Path) -> Path:
    """Every node of :data:`REFUSED` side by side on X (hidden size 2, input size 3)."""
    rng = np.random.default_rng(6)
    nodes, tensors = [], []
    for name, (op, attrs, _) in REFUSED.items():
        dirs = 2 if attrs.get("direction") == "bidirectional" else 1
        shapes = {"W": (dirs, 2 * GATES[op], 3), "R": (dirs, 2 * GATES[op], 2)}
        for kind, shape in shapes.items():
            array = rng.standard_normal(shape).astype(np.float32)
            tensors.append(onnx.numpy_helper.from_array(array, f"{kind}_{name}"))
        inputs = ["X", f"W_{name}", f"R_{name}"]
        nodes.append(helper.make_node(op, inputs, [f"y_{name}"], name, hidden_size=2, **attrs))
    graph = helper.make_graph(
        nodes,
        "refused",
        [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, ["T", "B", 3])],
        [symbolic(f"y_{n}", 4) for n in REFUSED],
        tensors,
    )
    path = tmp_path / "refused.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), str(path))
    return path


def test_what_no_variant_computes_is_listed_with_its_reason(tmp_path: Path) -> None:
    found = {r.name: r for r in find_rnns(refused_model(tmp_path))}
    assert list(found) == list(REFUSED)
    for name, (op, _, reasons) in REFUSED.items():
        assert found[name].reasons == reasons, name
        assert not found[name].computable and not found[name].notes
        assert found[name].mode == {"LSTM": "lstm", "GRU": "gru", "RNN": None}[op]
    assert found["direction"].direction is None and found["directions"].direction == BI


@pytest.mark.parametrize("name", ["unknown", "affine", "directions", "left_over"])
def test_reading_what_no_variant_computes_is_refused(name: str, tmp_path: Path) -> None:
    (reason,) = REFUSED[name][2]
    op = REFUSED[name][0]
    with pytest.raises(OnnxFormatError) as err:
        read(refused_model(tmp_path), name)
    assert str(err.value) == (
        f"onnx.read: {name!r} ({op} node {name!r} of the main graph) is not computed by cuDNN's "
        f"math or a variant of it (cudnn_rnn.core.variant), so our layers cannot hold it: {op} "
        f"node {name!r} {reason}."
    )


def test_a_parameter_that_is_not_finite_is_refused(tmp_path: Path) -> None:
    inputs = grid_inputs("RNN", {}, False, "", seed=1)
    node = helper.make_node(
        "RNN", ["X"], ["Y"], hidden_size=6, activations=["LeakyRelu"],
        activation_alpha=[float("inf")],
    )  # fmt: skip
    (found,) = find_rnns(save_node(node, inputs, tmp_path / "inf.onnx"))
    assert found.reasons == (
        "has a LeakyRelu activation whose parameters {'alpha': inf} are refused: alpha must be "
        "finite, got inf",
    )


def test_input_forget_is_an_lstms() -> None:
    """onnx's checker refuses a GRU's input_forget before a file is read; the mapping says so
    too, of a node it is handed."""
    math = node_math("GRU", {"input_forget": 1}, peepholes=False)
    assert (math.mode, math.variant) == (None, None)
    assert math.reasons == ("has input_forget=1, which only an LSTM has",)
    assert node_math("GRU", {"input_forget": 0}, peepholes=False).variant == Variant(
        reset_after=False
    )


@pytest.mark.parametrize(
    ("op", "attrs", "reason"),
    [
        ("LSTM", {"activations": "Tanh"}, "has activations='Tanh'; ONNX's activations are a list"),
        ("GRU", {"activations": [1, 2]}, "has activations=[1, 2]; ONNX's activations are a list"),
        ("RNN", {"activation_alpha": 0.5}, "has activation_alpha=0.5; ONNX's activation_alpha is"),
        ("RNN", {"activation_beta": ["a"]}, "has activation_beta=['a']; ONNX's activation_beta is"),
        ("LSTM", {"clip": "x"}, "has clip='x'; a clip is a finite float > 0"),
        ("LSTM", {"clip": float("nan")}, "has clip=nan; a clip is a finite float > 0"),
        ("GRU", {"clip": float("inf")}, "has clip=inf; a clip is a finite float > 0"),
        ("LSTM", {"input_forget": 1.5}, "has input_forget=1.5; ONNX's input_forget is an int"),
        ("GRU", {"linear_before_reset": "1"}, "has linear_before_reset='1'; ONNX's"),
        ("RNN", {"direction": 7}, "has direction=7; ONNX defines 'forward', 'reverse' and"),
    ],
)
def test_attributes_of_the_wrong_kind_are_reasons(
    op: str, attrs: dict[str, Any], reason: str
) -> None:
    """What a damaged or hostile file gives (values of another type, not finite) is a reason,
    never an error of the mapping."""
    math = node_math(op, attrs, peepholes=False)
    assert (math.mode, math.variant) == (None, None)
    assert len(math.reasons) == 1 and math.reasons[0].startswith(reason), math.reasons
