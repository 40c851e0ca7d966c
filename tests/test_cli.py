"""The cudnn-rnn command: inspect and convert across safetensors, TF1, ONNX, torch state_dicts."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from cudnn_rnn import checkpoint
from cudnn_rnn.cli import main
from cudnn_rnn.converters.loader import load_layer
from cudnn_rnn.io.detect import detect_models
from cudnn_rnn.layers import CudnnGRU, CudnnLSTM

FIXTURES = Path(__file__).parent / "fixtures" / "tf1"
pytestmark = [
    pytest.mark.filterwarnings(
        "ignore:You are using the legacy TorchScript-based ONNX export:DeprecationWarning"
    ),
    # Keras' torch backend converts with np.array(tensor), which NumPy 2 flags for torch's
    # __array__ (bench's Keras peer; as in tests/converters/test_keras.py).
    pytest.mark.filterwarnings(
        "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning"
    ),
]


def test_inspect_tf1_fixture(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(FIXTURES / "cudnn_lstm.ckpt")]) == 0
    out = capsys.readouterr().out
    assert "tf1 file, 12 tensor(s)" in out  # the format's one name, as --format tf1 says it
    assert "model/rnn/multi_rnn_cell/cell_1/cudnn_compatible_lstm_cell/kernel" in out
    assert "found 1 RNN(s), 1 computable (--model NAME):" in out
    assert (
        "  'model': lstm unidirectional (num_layers=2, num_units=3, input_size=2) "
        "at model 0 of the checkpoint (scope 'model')"
    ) in out


def test_convert_chain_keeps_the_function(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = CudnnGRU(2, 4, direction="bidirectional", input_size=3, seed=0)
    x = torch.randn(5, 2, 3)
    want = source(x)[0].detach().numpy()
    first = tmp_path / "a.safetensors"
    checkpoint.save(first, source)
    chain = [
        first,
        tmp_path / "b",
        tmp_path / "c.onnx",
        tmp_path / "d.pt",
        tmp_path / "e.safetensors",
    ]
    for src, dst in itertools.pairwise(chain):
        assert main(["convert", str(src), str(dst)]) == 0
        layer = load_layer(str(dst))
        np.testing.assert_allclose(layer(x)[0].detach().numpy(), want, atol=1e-6, err_msg=str(dst))
    assert "(TF1 checkpoint)" in capsys.readouterr().out
    assert main(["inspect", str(chain[2])]) == 0
    out = capsys.readouterr().out
    assert "found 1 RNN(s), 1 computable" in out
    assert ": gru bidirectional (num_layers=2, num_units=4, input_size=3) at GRU nodes" in out


def test_plain_rnn_needs_the_activation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prefix = str(FIXTURES / "cudnn_rnn_relu_bidi.ckpt")
    assert main(["convert", prefix, str(tmp_path / "r.pt")]) == 2
    assert "pass --activation tanh or --activation relu" in capsys.readouterr().err
    assert main(["convert", prefix, str(tmp_path / "r.pt"), "--activation", "relu"]) == 0
    assert load_layer(str(tmp_path / "r.pt"), "relu").rnn_mode == "rnn_relu"


def test_errors_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(tmp_path / "missing.safetensors")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cudnn-rnn: error: ") and "no such file" in err and err.count("\n") == 1
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x00" * 4)
    assert main(["inspect", str(junk)]) == 2
    assert "not a readable safetensors file" in capsys.readouterr().err
    two = tmp_path / "two.safetensors"
    checkpoint.save(
        two, [CudnnLSTM(1, 2, input_size=2, scope="a"), CudnnLSTM(1, 2, input_size=2, scope="b")]
    )
    assert main(["convert", str(two), str(tmp_path / "x.onnx")]) == 2
    err = capsys.readouterr().err
    assert (
        "holds 2 RNNs that we compute ('a', 'b'); pick one with --model NAME "
        "(cudnn-rnn inspect lists them)."
    ) in err
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == 2


def test_detect_models_from_names() -> None:
    shapes = {
        "s/stack_bidirectional_rnn/cell_0/bidirectional_rnn/fw/cudnn_compatible_lstm_cell/kernel": (
            7,
            16,
        ),
        "s/stack_bidirectional_rnn/cell_0/bidirectional_rnn/fw/cudnn_compatible_lstm_cell/"
        "projection/kernel": (4, 2),
        "s/stack_bidirectional_rnn/cell_0/bidirectional_rnn/fw/cudnn_compatible_lstm_cell/bias": (
            16,
        ),
        "s/stack_bidirectional_rnn/cell_1/bidirectional_rnn/bw/cudnn_compatible_lstm_cell/bias": (
            16,
        ),
        "global_step": (),
    }
    assert detect_models(shapes) == [
        {
            "rnn_mode": "lstm",
            "scope": "s",
            "num_layers": 2,
            "num_units": 4,
            "input_size": 5,
            "num_proj": 2,
            "direction": "bidirectional",
        }
    ]


def test_console_script_help() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cudnn_rnn.cli", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0 and "inspect" in result.stdout and "convert" in result.stdout


def test_help_lists_every_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cudnn_rnn.cli", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0
    assert "tf.contrib.cudnn_rnn re-created on PyTorch" in result.stdout
    for command in ("inspect", "convert", "bench"):
        assert f"\n    {command} " in result.stdout, command
    assert "demo" not in result.stdout  # examples/demo.py, in the repository only


QUICK = ["--steps", "6", "--batch", "3", "--repeats", "1", "--block", "0.001", "--warmup", "0"]


def _rows(out: str, title: str) -> dict[str, list[str]]:
    """The rows of one of bench's tables: implementation -> its columns."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("  ") or line.startswith("  - "):
            break
        name, *columns = line.strip().rsplit(None, 3 if "max |output" in lines[start + 1] else 2)
        rows[name] = columns
    return rows


def test_bench_times_a_model_file_against_its_peers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    layer = CudnnGRU(2, 4, direction="bidirectional", input_size=3, seed=0)
    path = tmp_path / "gru.safetensors"
    checkpoint.save(path, layer)
    assert main(["bench", str(path), *QUICK, "--training"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        f"{path}: CudnnGRU, 2 layer(s), 4 units, bidirectional, input size 3, float32\n"
        "input: T 6, B 3 (seeded normal, time-major) on cpu; our engine: "
    )
    inference = _rows(out, "inference (forward under torch.no_grad())")
    assert list(inference)[:2] == ["ours", "torch.nn"]
    assert inference["ours"][1:] == ["1.00", "-"]
    for name, (_, _, diff) in inference.items():
        assert name == "ours" or float(diff) < 1e-5, name  # the same weights everywhere
    training = _rows(out, "training step (forward + backward)")
    assert list(training) == ["ours", "torch.nn"] and training["ours"][1] == "1.00"
    for runtime in ("onnxruntime", "openvino"):
        ran = any(name.startswith(runtime) for name in inference)
        assert ran or f"{runtime} not installed (pip install {runtime})" in out


def test_bench_without_peers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "lstm.pt"
    torch.save(torch.nn.LSTM(3, 5, proj_size=2).state_dict(), path)
    assert main(["bench", str(path), *QUICK, "--no-peers"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: CudnnLSTM, 1 layer(s), 5 units, projection 2, unidirectional")
    assert list(_rows(out, "inference")) == ["ours", "torch.nn"]
    assert "training step" not in out and "notes:" not in out


def test_bench_of_a_plain_rnn_needs_its_activation(capsys: pytest.CaptureFixture[str]) -> None:
    prefix = str(FIXTURES / "cudnn_rnn_relu_bidi.ckpt")
    assert main(["bench", prefix, *QUICK, "--no-peers"]) == 2
    err = capsys.readouterr().err
    assert "pass --activation tanh or --activation relu" in err and err.count("\n") == 1
    assert main(["bench", prefix, *QUICK, "--no-peers", "--activation", "relu"]) == 0
    assert "CudnnRNNRelu, " in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # The timing options are checked by cudnn_rnn.cli.bench (tests/test_bench.py has them all).
        (["--block", "nan"], "--block must be a number of seconds > 0, got nan."),
        (["--steps", "0"], "--steps must be an integer >= 1, got 0."),
        (["--batch", "-2"], "--batch must be an integer >= 1, got -2."),
    ],
)
def test_bench_bad_options_exit_2_with_one_line(
    tmp_path: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "m.safetensors"
    checkpoint.save(path, CudnnLSTM(1, 2, input_size=2))
    assert main(["bench", str(path), *argv]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"cudnn-rnn: error: {message}\n" and captured.out == ""


def test_bench_of_a_missing_or_corrupt_file_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", str(tmp_path / "missing.onnx")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cudnn-rnn: error: ") and "no such file" in err and err.count("\n") == 1
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"PK\x03\x04 truncated")
    assert main(["bench", str(junk)]) == 2
    captured = capsys.readouterr()
    assert "not a readable torch file" in captured.err and captured.err.count("\n") == 1
    assert captured.out == ""


def test_convert_of_a_tf1_training_checkpoint_keeps_both_biases(tmp_path: Path) -> None:
    """A TF1 checkpoint with the layer's opaque kernel converts with both biases of every gate
    exactly (torch.nn keeps b_ih and b_hh apart), as checkpoint.restore reads them."""
    from cudnn_rnn import convert

    prefix = Path(__file__).parent / "fixtures" / "tf1_opaque" / "lstm_aligned.ckpt"
    want = CudnnLSTM(2, 3, input_size=2, scope="model")
    checkpoint.restore(prefix, want)
    out = tmp_path / "m.pt"
    assert main(["convert", str(prefix), str(out)]) == 0
    state = torch.load(out, weights_only=True)
    reference = convert.to_torch(want).state_dict()
    assert state.keys() == reference.keys()
    for name, value in reference.items():
        assert torch.equal(state[name], value), name


def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """``cudnn-rnn inspect FILE | head``: when the reader has closed the pipe, we stop without a
    word on stderr, with the status of a process that SIGPIPE ended (141)."""
    layer = CudnnLSTM(3, 4, input_size=3, direction="bidirectional")
    path = tmp_path / "m.safetensors"
    checkpoint.save(str(path), layer)
    code = "import sys; from cudnn_rnn.cli import main; sys.exit(main(['inspect', sys.argv[1]]))"
    producer = subprocess.Popen(
        [sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert producer.stdout is not None and producer.stderr is not None
    producer.stdout.close()  # closed before the first line is written (imports take a second)
    with producer.stderr:
        err = producer.stderr.read().decode()
    assert producer.wait(timeout=120) == 141, err
    assert err == ""
    script = Path(sys.executable).with_name("cudnn-rnn")
    if script.exists():  # and the installed command through a real `head` that reads nothing
        result = subprocess.run(
            f"'{script}' inspect '{path}' | head -n 0; echo \"${{PIPESTATUS[0]}}\"",
            shell=True, executable="/bin/bash", capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert result.stderr == "" and result.stdout.splitlines()[-1] == "141", result


def test_inspect_says_where_an_rnn_it_cannot_read_may_be(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An ONNX graph that computes an LSTMCell with primitive operators (as some packaged models
    do) has no RNN node, but its initializers carry torch's names; an .npz of other names has
    a documented path through canonical weights. inspect says so instead of an empty list."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    g = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(g.standard_normal(shape).astype(np.float32), name)
        for name, shape in (
            ("enc.rnn.weight_ih", (8, 4)),
            ("enc.rnn.weight_hh", (8, 2)),
            ("enc.rnn.bias_ih", (8,)),
            ("enc.rnn.bias_hh", (8,)),
        )
    ]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "cell",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        [*inits, numpy_helper.from_array(np.ones((4, 8), np.float32), "w")],
    )
    path = tmp_path / "cell.onnx"
    onnx.save(helper.make_model(graph), str(path))
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "found 0 RNN(s), 0 computable" in out
    assert "initializers are named like torch.nn.LSTMCell 'enc.rnn'" in out
    assert "convert.from_torch(path, prefix=...)" in out
    npz = tmp_path / "g2p.npz"
    np.savez(npz, enc_w_ih=np.zeros((6, 2), np.float32), enc_w_hh=np.zeros((6, 2), np.float32))
    assert main(["inspect", str(npz)]) == 0
    out = capsys.readouterr().out
    assert "found 0 RNN(s)" in out and "convert.from_numpy_canonical" in out
