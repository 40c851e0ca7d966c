"""Quantized and other RNN-like ONNX operators: listed, never skipped; int8 LSTMs read dequantized.

The fixtures (``tests/fixtures/onnx_quantized``, written by their script) are ``torch.nn.LSTM``
exported by ``torch.onnx.export`` and quantized by onnxruntime's ``quantize_dynamic``: each LSTM
node became a ``com.microsoft`` ``DynamicQuantizeLSTM`` with int8 weights. Oracles: NumPy's
dequantization of the file's int8 weights ((q - zero_point) * scale), ``torch.nn.LSTM`` holding
those weights, and onnxruntime running the quantized model.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import cudnn_rnn
from cudnn_rnn.cli import main
from cudnn_rnn.converters import onnx as onnx_format
from cudnn_rnn.converters.onnx import OnnxFormatError, find_rnns, from_onnx
from cudnn_rnn.io.onnx.eval import Evaluator
from tests.support.paths import FIXTURES

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
helper, numpy_helper = onnx.helper, onnx.numpy_helper

HERE = FIXTURES / "onnx_quantized"
#: fixture -> (layers, bidirectional, per output channel); input 5, hidden 4.
CASES = {"lstm_int8": (1, False, False), "bilstm2_int8": (2, True, True)}
INPUT_SIZE, HIDDEN = 5, 4
#: ONNX's LSTM gates are i, o, f, c; cuDNN's canonical order i, f, c, o and torch's i, f, g, o
#: (g is c) are the same: the ONNX gate each of them takes, in order.
FROM_ONNX_GATES = [0, 2, 3, 1]
#: How far onnxruntime's int8 run of a fixture may be from our layer (max and mean absolute
#: difference over an output). It is onnxruntime that is off: DynamicQuantizeLSTM quantizes X,
#: and h at every step, to 8 bits as it runs (the matmuls are int8 x int8), and the error
#: carries through the steps and layers. Measured over 20 inputs: at most 0.33 (the cell state
#: of bilstm2_int8; the outputs 0.12), mean differences at most 0.034; our layer is within
#: 0.004 of the float torch.nn.LSTM the fixtures were quantized from, onnxruntime's int8 run up
#: to 0.30 from it, and onnxruntime's run of the same weights stored as uint8 (q + 128, zero
#: point 128) 0.11 from its int8 run. So this comparison is coarse: it catches weights read
#: wrongly on the whole (a forget and an output gate swapped: mean 0.05 to 0.06), and the exact
#: check is onnxruntime's float LSTM of the dequantized weights (1e-5, below).
ORT_MAX, ORT_MEAN = 0.5, 0.05


def quantized_nodes(model: Any) -> list[Any]:
    return [n for n in model.graph.node if n.op_type == "DynamicQuantizeLSTM"]


def dequantized(model: Any) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per DynamicQuantizeLSTM node of ``model``, in graph order: W [D, 4H, I] and R [D, 4H, H]
    dequantized in float64 from the file's int8, rounded once to float32, and B, in ONNX's gate
    order (the independent oracle of what load() must hold)."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    layers = []
    for node in quantized_nodes(model):
        ins = list(node.input)

        def weight(q: str, scale: str, zero: str) -> np.ndarray:
            s, z = inits[scale].astype(np.float64), inits[zero].astype(np.float64)
            at = (slice(None), None, slice(None)) if s.ndim == 2 else (slice(None), None, None)
            value = (inits[q].astype(np.float64) - z[at]) * s[at]  # [D, I, 4H]
            return value.transpose(0, 2, 1).astype(np.float32)

        layers.append(
            (weight(ins[1], ins[8], ins[9]), weight(ins[2], ins[10], ins[11]), inits[ins[3]])
        )
    return layers


def reordered(block: np.ndarray) -> np.ndarray:
    """Rows of an ONNX gate block (i, o, f, c) in torch's (and cuDNN's) gate order."""
    return np.concatenate([np.split(block, 4)[k] for k in FROM_ONNX_GATES])


def torch_lstm(name: str) -> nn.LSTM:
    """torch.nn.LSTM holding the fixture's dequantized weights."""
    layers, bidirectional, _ = CASES[name]
    lstm = nn.LSTM(INPUT_SIZE, HIDDEN, num_layers=layers, bidirectional=bidirectional)
    for layer, (w, r, b) in enumerate(dequantized(onnx.load(str(HERE / f"{name}.onnx")))):
        for d in range(w.shape[0]):
            suffix = f"l{layer}" + ("_reverse" if d else "")
            with torch.no_grad():
                getattr(lstm, f"weight_ih_{suffix}").copy_(torch.from_numpy(reordered(w[d])))
                getattr(lstm, f"weight_hh_{suffix}").copy_(torch.from_numpy(reordered(r[d])))
                getattr(lstm, f"bias_ih_{suffix}").copy_(torch.from_numpy(reordered(b[d, :16])))
                getattr(lstm, f"bias_hh_{suffix}").copy_(torch.from_numpy(reordered(b[d, 16:])))
    return lstm


def inputs(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((6, 3, INPUT_SIZE)).astype(np.float32)


def onnxruntime_run(path: Path, x: np.ndarray) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return list(session.run(None, {"X": x}))


@pytest.mark.parametrize("name", list(CASES))
def test_find_rnns_lists_the_quantized_lstm_with_its_sizes_and_a_note(name: str) -> None:
    layers, bidirectional, per_channel = CASES[name]
    (found,) = find_rnns(HERE / f"{name}.onnx")
    assert found.computable and found.reasons == ()
    assert (found.mode, found.num_layers, found.num_units, found.input_size) == (
        "lstm",
        layers,
        HIDDEN,
        INPUT_SIZE,
    )
    assert found.direction == ("bidirectional" if bidirectional else "unidirectional")
    assert found.details["op_type"] == "DynamicQuantizeLSTM"
    assert (found.details["quantized"], found.details["dtype"]) == ("int8", "float32")
    (note,) = found.notes
    per = "per output channel" if per_channel else "per direction"
    assert note.startswith(f"its weights W and R are int8 with a scale and a zero point {per}, ")
    assert "read dequantized ((weight - zero_point) * scale, in float32)" in note
    assert "differ from this layer's by that quantization error" in note
    assert "note: its weights W and R are int8" in found.describe()


@pytest.mark.parametrize("name", list(CASES))
def test_load_holds_the_dequantized_weights_exactly(name: str) -> None:
    path = HERE / f"{name}.onnx"
    (found,) = find_rnns(path)
    data = onnx_format.read(path, found.name)
    assert data.notes == found.notes
    expected = dequantized(onnx.load(str(path)))
    dirs = expected[0][0].shape[0]
    weights = iter(data.weights)
    biases = iter(data.biases)
    for w, r, b in expected:  # canonical order: per layer and direction, 4 input, 4 recurrent
        for d in range(dirs):
            for block in (w[d], r[d]):
                for k in FROM_ONNX_GATES:
                    assert np.array_equal(next(weights).numpy(), np.split(block, 4)[k])
            for block in (b[d, :16], b[d, 16:]):
                for k in FROM_ONNX_GATES:
                    assert np.array_equal(next(biases).numpy(), np.split(block, 4)[k])
    assert next(weights, None) is None and next(biases, None) is None


@pytest.mark.parametrize("name", list(CASES))
def test_load_computes_torch_lstm_with_the_dequantized_weights(name: str) -> None:
    notes: list[str] = []
    layer = cudnn_rnn.load(HERE / f"{name}.onnx", note=notes.append)
    (note,) = notes
    assert "read dequantized" in note
    reference = torch_lstm(name)
    x = torch.from_numpy(inputs(0))
    with torch.no_grad():
        ours, (h, c) = layer(x)
        theirs, (h_ref, c_ref) = reference(x)
    for a, b in ((ours, theirs), (h, h_ref), (c, c_ref)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6, rtol=0)


def dequantized_model(path: Path) -> Any:
    """The fixture with each DynamicQuantizeLSTM node made ONNX's LSTM holding the NumPy
    dequantized weights (:func:`dequantized`): what onnxruntime's float32 kernel computes of the
    weights the file stores."""
    model = onnx.load(str(path))
    for node, (w, r, _) in zip(quantized_nodes(model), dequantized(model)):
        model.graph.initializer.extend(
            [
                numpy_helper.from_array(w, node.name + "/W"),
                numpy_helper.from_array(r, node.name + "/R"),
            ]
        )
        node.input[1], node.input[2] = node.name + "/W", node.name + "/R"
        del node.input[8:]
        node.op_type, node.domain = "LSTM", ""
    return model


@pytest.mark.parametrize("name", list(CASES))
def test_load_is_onnxruntimes_float_lstm_of_the_dequantized_weights(name: str) -> None:
    path = HERE / f"{name}.onnx"
    layer = cudnn_rnn.load(path)
    model = dequantized_model(path)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    x = inputs(1)
    y, y_h, y_c = session.run(None, {"X": x})
    with torch.no_grad():
        ours, (h, c) = layer(torch.from_numpy(x))
    for a, b in ((ours, y), (h, y_h), (c, y_c)):
        np.testing.assert_allclose(a.numpy(), b, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", list(CASES))
def test_load_is_close_to_onnxruntime_running_the_int8_model(name: str) -> None:
    path = HERE / f"{name}.onnx"
    layer = cudnn_rnn.load(path)
    for seed in range(3):
        x = inputs(seed)
        y, y_h, y_c = onnxruntime_run(path, x)
        with torch.no_grad():
            ours, (h, c) = layer(torch.from_numpy(x))
        for a, b in ((ours, y), (h, y_h), (c, y_c)):
            assert a.shape == b.shape
            gap = np.abs(a.numpy() - b)
            assert gap.max() < ORT_MAX and gap.mean() < ORT_MEAN, (name, seed, gap.max())


def edited(name: str, tmp_path: Path, edit: Any) -> Path:
    """The fixture ``name`` with ``edit(model, node, initializers)`` done to each of its
    DynamicQuantizeLSTM nodes, saved in ``tmp_path``."""
    model = onnx.load(str(HERE / f"{name}.onnx"))
    inits = {t.name: t for t in model.graph.initializer}
    for node in quantized_nodes(model):
        edit(model, node, inits)
    path = tmp_path / f"{name}_edited.onnx"
    onnx.save_model(model, str(path))
    return path


def as_uint8(model: Any, node: Any, inits: dict[str, Any]) -> None:
    """W and R stored as uint8 (q + 128) with zero points 128: the same weights."""
    for q, zero in ((node.input[1], node.input[9]), (node.input[2], node.input[11])):
        for name in (q, zero):
            value = numpy_helper.to_array(inits[name]).astype(np.int16) + 128
            inits[name].CopyFrom(numpy_helper.from_array(value.astype(np.uint8), name))


def test_uint8_weights_and_their_zero_points(tmp_path: Path) -> None:
    """The same weights as uint8 with zero point 128 (a stored value of 128 is 0): read as the
    same layer, exactly; onnxruntime runs that file too."""
    path = edited("bilstm2_int8", tmp_path, as_uint8)
    (found,) = find_rnns(path)
    assert found.computable and found.details["quantized"] == "uint8"
    original = onnx_format.read(HERE / "bilstm2_int8.onnx", found.name)
    data = onnx_format.read(path, found.name)
    for a, b in zip([*data.weights, *data.biases], [*original.weights, *original.biases]):
        assert torch.equal(a, b)
    assert [w.shape for w, _, _ in dequantized(onnx.load(str(path)))] == [(2, 16, 5), (2, 16, 8)]
    onnxruntime_run(path, inputs(0))  # a valid model: onnxruntime runs it


def wrong_scale(model: Any, node: Any, inits: dict[str, Any]) -> None:
    inits[node.input[8]].CopyFrom(numpy_helper.from_array(np.ones((3,), np.float32), node.input[8]))


def float_w(model: Any, node: Any, inits: dict[str, Any]) -> None:
    q = numpy_helper.to_array(inits[node.input[1]])
    inits[node.input[1]].CopyFrom(numpy_helper.from_array(q.astype(np.float32), node.input[1]))


def runtime_r(model: Any, node: Any, inits: dict[str, Any]) -> None:
    r_in = helper.make_tensor_value_info("R_in", onnx.TensorProto.INT8, [1, 4, 16])
    model.graph.input.append(r_in)
    node.input[2] = "R_in"


@pytest.mark.parametrize(
    "edit,reason",
    [
        (
            wrong_scale,
            r"its W_scale \(3,\) and W_zero_point \(1,\) \(int8\) do not fit its quantized W "
            r"\(1, 5, 16\) \(int8\): expected \[1\] \(per direction\) or \[1, 16\] \(per output "
            r"channel\), of int8",
        ),
        (float_w, r"its W input 'onnx::LSTM_\d+_quantized' is float32; it must be int8 or uint8"),
        (
            runtime_r,
            r"its R input 'R_in' is computed from the graph's run-time inputs, not from "
            r"constants; only constant weights can be read",
        ),
    ],
)
def test_quantized_weights_it_cannot_read_are_reasons(
    edit: Any, reason: str, tmp_path: Path
) -> None:
    path = edited("lstm_int8", tmp_path, edit)
    (found,) = find_rnns(path)
    assert not found.computable and found.notes == ()
    (got,) = found.reasons
    assert re_full(reason, got)
    with pytest.raises(OnnxFormatError, match=r"DynamicQuantizeLSTM node '/LSTM_quant': " + reason):
        from_onnx(path, node=found.name)


def re_full(pattern: str, text: str) -> bool:
    return re.fullmatch(pattern, text) is not None


def test_dequantizing_is_charged_to_the_reads_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dequantized weights take 4 bytes an int8 weight, charged to the read's budget of work
    before they are made: with less left than that, the RNN is listed with the reason."""
    real = Evaluator.charge

    def charge(self: Evaluator, cost: int, what: str) -> None:
        if what == "dequantizing W":
            self.work.left = cost - 1
        real(self, cost, what)

    monkeypatch.setattr(Evaluator, "charge", charge)
    (found,) = find_rnns(HERE / "lstm_int8.onnx")
    assert not found.computable
    reason = found.reasons[0]  # W is [1, 5, 16] int8: 80 float32 (what is left then fails too)
    assert re_full(
        r"its quantized W cannot be dequantized: dequantizing W would take 320 bytes of work, "
        r"more than the 319 bytes left of the \d+ one operation may do with this model "
        r"\(8 times its 2312 bytes plus 16777216\); refused before it is done",
        reason,
    ), reason


# -- other RNN-like operators ----------------------------------------------------------------------


def other_ops_model() -> Any:
    """An RNN of every kind no reader here computes: onnxruntime's AttnLSTM, an LSTM of
    another domain, a custom GRU; beside a standard LSTM that is read."""
    rng = np.random.default_rng(0)

    def tensor(name: str, *shape: int) -> Any:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    inits = [tensor("W", 1, 12, 2), tensor("R", 1, 12, 3), tensor("W2", 2, 12, 2)]
    nodes = [
        helper.make_node(
            "AttnLSTM", ["X", "W2", "R"], ["a"], "attention", domain="com.microsoft",
            hidden_size=3, direction="bidirectional",
        ),
        helper.make_node(
            "LSTM", ["X", "W", "R"], ["b"], "elsewhere", domain="com.example", hidden_size=3
        ),
        helper.make_node("MyGruCell", ["X"], ["c"], "custom", domain="com.example"),
        helper.make_node("LSTM", ["X", "W", "R"], ["d"], "standard", hidden_size=3),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "others",
        [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, ["T", "B", 2])],
        [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, ["N"]) for o in "abcd"],
        initializer=inits,
    )
    opsets = [
        helper.make_opsetid(d, v) for d, v in (("", 17), ("com.microsoft", 1), ("com.example", 1))
    ]
    return helper.make_model(graph, opset_imports=opsets)


def test_other_rnn_operators_are_listed_with_the_reason() -> None:
    found = {f.name: f for f in find_rnns(other_ops_model())}
    assert list(found) == ["attention", "elsewhere", "custom", "standard"]
    assert found["standard"].computable
    expected = {
        "attention": ("AttnLSTM", "com.microsoft", "lstm", 3, "bidirectional"),
        "elsewhere": ("LSTM", "com.example", "lstm", 3, "unidirectional"),
        "custom": ("MyGruCell", "com.example", "gru", None, "unidirectional"),
    }
    for name, (op, domain, mode, units, direction) in expected.items():
        record = found[name]
        assert not record.computable
        assert (record.mode, record.num_units, record.direction) == (mode, units, direction)
        assert (record.num_layers, record.input_size) == (1, None)
        assert record.reasons == (
            f"has op type '{op}' of domain '{domain}', which our layers do not compute (they "
            "compute ONNX's LSTM, GRU and RNN, and com.microsoft's DynamicQuantizeLSTM with its "
            "weights dequantized)",
        )
        assert record.details["op_type"] == op
    with pytest.raises(
        OnnxFormatError, match=r"AttnLSTM node 'attention' has op type 'AttnLSTM' of domain"
    ):
        from_onnx(other_ops_model(), node="attention")


def test_inspect_shows_quantized_and_other_rnns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", str(HERE / "bilstm2_int8.onnx")]) == 0
    out = capsys.readouterr().out
    assert "found 1 RNN(s), 1 computable" in out
    assert "lstm bidirectional (num_layers=2, num_units=4, input_size=5)" in out
    assert "note: its weights W and R are int8" in out
    path = tmp_path / "others.onnx"
    onnx.save_model(other_ops_model(), str(path))
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "found 4 RNN(s), 1 computable" in out
    assert "'attention': lstm bidirectional (num_layers=1, num_units=3) at AttnLSTM node" in out
