"""``cudnn-rnn inspect`` of a file that holds no RNN says what it looked at (the format, how many
nodes, tensors or weights, of which kinds) so that a user can tell it looked in the right place;
the exit status stays 0 and ``--json`` gives the same as a ``looked_at`` object (null where RNNs
were found)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from cudnn_rnn import checkpoint
from cudnn_rnn.cli import main
from cudnn_rnn.converters import loader as model_files
from cudnn_rnn.io.tf1 import bundle as tf1_bundle
from cudnn_rnn.layers import CudnnGRU


def _inspect(path: Path, capsys: pytest.CaptureFixture[str], *json_flag: str) -> str:
    assert main(["inspect", *json_flag, str(path)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    return captured.out


def _onnx_without_rnn(path: Path) -> Path:
    """Conv, Relu, MatMul in the graph, and an If whose branches compute Add and Sub."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    def branch(op: str) -> object:
        return helper.make_graph(
            [helper.make_node(op, ["m", "m"], ["b"])],
            f"{op.lower()}_branch",
            [],
            [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 2])],
        )

    nodes = [
        helper.make_node("Conv", ["x", "k"], ["c"]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"]),
        helper.make_node("MatMul", ["f", "w"], ["m"]),
        helper.make_node("Relu", ["m"], ["n"]),
        helper.make_node(
            "If", ["cond"], ["y"], then_branch=branch("Add"), else_branch=branch("Sub")
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "no_rnn",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 3, 3]),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
        [
            numpy_helper.from_array(np.ones((1, 1, 2, 2), np.float32), "k"),
            numpy_helper.from_array(np.ones((4, 2), np.float32), "w"),
        ],
    )
    onnx.save(helper.make_model(graph), str(path))
    return path


def test_an_onnx_graph_without_rnn_says_its_operators(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _onnx_without_rnn(tmp_path / "cnn.onnx")
    out = _inspect(path, capsys)
    assert (
        "  read an ONNX graph (subgraphs and functions included): 8 nodes (2 Relu, 1 Conv, "
        "1 Flatten, 1 MatMul, 1 If, 1 Sub and 1 more kind); no LSTM, GRU or RNN operator\n"
    ) in out
    doc = json.loads(_inspect(path, capsys, "--json"))
    assert doc["rnns"] == [] and doc["format"] == "onnx"
    assert doc["looked_at"] == {
        "read_as": "an ONNX graph (subgraphs and functions included)",
        "count": 8,
        "unit": "nodes",
        "kinds": {"Relu": 2, "Conv": 1, "Flatten": 1, "MatMul": 1, "If": 1, "Add": 1, "Sub": 1},
        "missing": "no LSTM, GRU or RNN operator",
    }


def _torch_without_rnn(path: Path) -> Path:
    model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
    torch.save({"encoder": model.state_dict(), "head.weight": torch.zeros(1)}, path)
    return path


def _tf1_without_rnn(path: Path) -> Path:
    tf1_bundle.write_bundle(
        path,
        {
            "dense/kernel": np.zeros((2, 3), np.float32),
            "dense/bias": np.zeros(3, np.float32),
            "dense_1/kernel": np.zeros((3, 1), np.float32),
            "global_step": np.zeros((), np.int64),
        },
    )
    return path


def _safetensors_without_rnn(path: Path) -> Path:
    from safetensors.torch import save_file

    save_file({"conv.weight": torch.zeros(2, 1, 3), "conv.bias": torch.zeros(2)}, str(path))
    return path


def _keras_h5_without_rnn(path: Path) -> Path:
    """A weights-only Keras 2 file of two Dense layers (its layout, written by h5py)."""
    h5py = pytest.importorskip("h5py")
    with h5py.File(path, "w") as f:
        f.attrs["layer_names"] = np.array([b"dense", b"dense_1"])
        f.attrs["keras_version"] = "2.21.0"
        for layer in ("dense", "dense_1"):
            group = f.create_group(layer)
            names = [f"{layer}/kernel:0", f"{layer}/bias:0"]
            group.attrs["weight_names"] = np.array([n.encode() for n in names])
            group.create_dataset(names[0], data=np.zeros((2, 2), np.float32))
            group.create_dataset(names[1], data=np.zeros(2, np.float32))
    return path


_WITHOUT_RNN = {
    "torch": (
        _torch_without_rnn,
        "m.pt",
        "read a torch file: 5 tensors (4 under 'encoder', 1 under 'head'); no tensors named as "
        "a torch.nn LSTM, GRU, RNN or RNN cell names its own (weight_ih_l0, weight_hh_l0...)",
    ),
    "tf1": (
        _tf1_without_rnn,
        "m.ckpt",
        "read a TF1 checkpoint: 4 tensors (2 under 'dense', 1 under 'dense_1', 1 under "
        "'global_step'); no tensors named as tf.contrib.cudnn_rnn's saveables or TF's standard "
        "RNN cells name theirs (.../cudnn_compatible_lstm_cell/kernel, .../lstm_cell/kernel...)",
    ),
    "safetensors": (
        _safetensors_without_rnn,
        "m.safetensors",
        "read a safetensors file: 2 tensors (2 under 'conv'); no tensors named as our "
        "checkpoints name a model, nor as a torch.nn LSTM, GRU or RNN names its own "
        "(weight_ih_l0, weight_hh_l0...)",
    ),
    "keras_h5": (
        _keras_h5_without_rnn,
        "m.h5",
        "read a Keras .h5 file: 4 weights (4 under 'dense'); no weights of an LSTM, GRU, "
        "SimpleRNN, CuDNNLSTM or CuDNNGRU layer (nor one inside a Bidirectional or a nested "
        "model)",
    ),
}


@pytest.mark.parametrize("fmt", sorted(_WITHOUT_RNN))
def test_a_file_without_rnn_says_what_its_tensors_are_named_under(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    make, name, says = _WITHOUT_RNN[fmt]
    path = make(tmp_path / name)
    assert model_files.reader_of(str(path)) == fmt
    out = _inspect(path, capsys)
    assert "found 0 RNN(s), 0 computable (--model NAME):\n" in out
    assert f"\n  {says}\n" in out, out
    doc = json.loads(_inspect(path, capsys, "--json"))
    assert doc["rnns"] == [] and doc["looked_at"]["count"] == len(doc["tensors"])


def test_a_file_with_rnns_has_no_looked_at(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gru.safetensors"
    checkpoint.save(path, CudnnGRU(1, 3, input_size=2))
    out = _inspect(path, capsys)
    assert "found 1 RNN(s)" in out and "read a " not in out
    doc = json.loads(_inspect(path, capsys, "--json"))
    assert len(doc["rnns"]) == 1 and doc["looked_at"] is None


def test_many_kinds_are_counted_not_listed(tmp_path: Path) -> None:
    path = tmp_path / "many.pt"
    torch.save({f"block{i}.weight": torch.zeros(1) for i in range(40)}, path)
    looked = model_files.looked_at(str(path))
    assert looked.count == 40 and len(looked.kinds) == 40
    assert looked.line().startswith(
        "read a torch file: 40 tensors (1 under 'block0', 1 under 'block1', 1 under 'block2', "
        "1 under 'block3', 1 under 'block4', 1 under 'block5' and 34 more kinds); "
    )


def test_names_from_the_file_cannot_drive_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "evil.pt"
    torch.save({"\x1b[2J\u202eevil.weight": torch.zeros(1)}, path)
    out = _inspect(path, capsys)
    assert "1 under '\\x1b[2J\\u202eevil'" in out and "\x1b" not in out and "\u202e" not in out
