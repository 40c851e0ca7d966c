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
from cudnn_rnn.cli import detect_models, load_layer, main
from cudnn_rnn.layers import CudnnGRU, CudnnLSTM

FIXTURES = Path(__file__).parent / "fixtures" / "tf1"
pytestmark = pytest.mark.filterwarnings(
    "ignore:You are using the legacy TorchScript-based ONNX export:DeprecationWarning"
)


def test_inspect_tf1_fixture(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(FIXTURES / "cudnn_lstm.ckpt")]) == 0
    out = capsys.readouterr().out
    assert "tf file, 12 tensor(s)" in out
    assert "model/rnn/multi_rnn_cell/cell_1/cudnn_compatible_lstm_cell/kernel" in out
    assert (
        "rnn_mode=lstm, scope=model, num_layers=2, num_units=3, input_size=2, num_proj=None, "
        "direction=unidirectional"
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
    assert "rnn_mode=gru" in capsys.readouterr().out


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
    assert "holds 2 models; convert needs exactly one" in capsys.readouterr().err
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
    for command in ("demo", "inspect", "convert", "bench"):
        assert f"\n    {command} " in result.stdout, command


def test_bench_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["bench", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "--quick" in out and "--out" in out and "benchmarks.md" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--shapes", "nope"], "unknown shape(s) nope; choose from lstm-2-25x1x256, "),
        (["--repeats", "0"], "--repeats must be an integer >= 1, got 0."),
        (["--repeats", "-3"], "--repeats must be an integer >= 1, got -3."),
        (["--block", "0"], "--block must be a number of seconds > 0, got 0.0."),
        (["--block", "nan"], "--block must be a number of seconds > 0, got nan."),
        (["--warmup", "-1"], "--warmup must be a number of seconds >= 0, got -1.0."),
        (["--device", "gpu"], "--device 'gpu' is not a device; use cpu, cuda or cuda:N."),
        (["--device", "meta"], "--device must be cpu, cuda or cuda:N, got 'meta'."),
    ],
)
def test_bench_bad_options_exit_2_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("cudnn-rnn: error: " + message)
    assert captured.err.count("\n") == 1 and captured.out == ""


def test_bench_unknown_shape_names_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    from cudnn_rnn.bench import QUICK_SHAPES, SHAPES

    assert main(["bench", "--shapes", "lstm-quick", "nope"]) == 2
    err = capsys.readouterr().err
    assert all(shape.name in err for shape in (*SHAPES, *QUICK_SHAPES))


def test_bench_quick_run_writes_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench"
    argv = ["--quick", "--no-memory", "--no-peers", "--repeats", "1", "--block", "0.001"]
    assert main(["bench", *argv, "--warmup", "0", "--out", str(out)]) == 0
    report = (out / "benchmarks.md").read_text()
    assert "## Inference" in report and "## Training" in report and "lstm (10, 4" in report
    assert (out / "benchmarks.json").is_file()
    assert f"wrote {out / 'benchmarks.md'}" in capsys.readouterr().out


def test_bench_unwritable_out_exits_2_before_measuring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["bench", "--quick", "--out", str(blocker / "bench")]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("cudnn-rnn: error: ") and str(blocker) in captured.err
    assert captured.err.count("\n") == 1 and "matmul peak" not in captured.out


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
