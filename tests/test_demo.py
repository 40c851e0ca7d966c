"""examples/demo.py (``make demo``): trains, saves, restores three ways, samples, verifies;
errors, Ctrl-C."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import cudnn_rnn
from cudnn_rnn import checkpoint, convert
from cudnn_rnn.cells import CudnnCompatibleLSTMCell, LSTMStateTuple, MultiRNNCell, dynamic_rnn
from examples import demo

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "demo.py"
main = demo.main

# A model small enough that a run takes a few seconds.
TINY = [
    "--steps",
    "3",
    "--num-units",
    "16",
    "--embedding-size",
    "8",
    "--batch-size",
    "4",
    "--seq-len",
    "24",
    "--sample-length",
    "40",
]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FUSED = "CudnnLSTM (trained, fused)"
STEPPED = "MultiRNNCell (stepped in Python)"
TORCH_NN = "torch.nn.LSTM (to_torch)"


def _difference(text: str, pair: str) -> float:
    match = re.search(re.escape(pair) + r"\s+([0-9.]+e[+-][0-9]+)", text)
    assert match, f"no {pair!r} line in:\n{text}"
    return float(match.group(1))


@pytest.fixture
def cell_steps(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Counts calls of ``CudnnCompatibleLSTMCell.forward`` (one per layer and time step)."""
    calls: list[int] = []
    forward = CudnnCompatibleLSTMCell.forward

    def counted(self: CudnnCompatibleLSTMCell, inputs: torch.Tensor, state: Any) -> Any:
        calls.append(int(inputs.shape[0]))
        return forward(self, inputs, state)

    monkeypatch.setattr(CudnnCompatibleLSTMCell, "forward", counted)
    yield calls


def test_demo_end_to_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cell_steps: list[int]
) -> None:
    out = tmp_path / "out"
    assert main([*TINY, "--out", str(out)]) == 0
    # The compatible cells ran one call per layer and character: the prime (6) and the 40 drawn
    # characters of the sample (batch 1), then the 24 steps of the verification batch (batch 8).
    # Run by the fused kernel (dynamic_rnn's way) they would not be called at all.
    assert cell_steps == [1] * 2 * (6 + 40) + [demo.VERIFY_ROWS] * 2 * 24
    captured = capsys.readouterr()
    stdout = captured.out
    # Progress went to stderr (plain lines: pytest's stream is not a terminal).
    assert "step 1/3 [" in captured.err and "step 3/3 [" in captured.err
    assert "chars/s" in captured.err and "ETA" in captured.err
    for name in ("lstm.safetensors", "head.safetensors", "loss.png", "summary.json"):
        assert (out / name).is_file(), name
    assert (out / "loss.png").read_bytes()[:8] == PNG_MAGIC
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps_done"] == 3 and len(summary["losses"]) == 3 and summary["agree"]

    # Three samples, one per implementation, drawn with the same seed: the same text.
    samples = re.findall(r"^--- (.+):\n(.*(?:\n(?!---|\nverification).*)*)", stdout, re.M)
    assert [name for name, _ in samples] == list(summary["samples"])
    assert len(samples) == 3
    texts = list(summary["samples"].values())
    assert all(t.startswith("Alice ") and len(t) == len("Alice ") + 40 for t in texts)
    assert texts[0] == texts[1] == texts[2]

    # The printed verification is the one in the summary, and within the tolerance: 1e-5 of the
    # logits' scale, which the summary records with the engine our layer ran.
    assert "verification: max |logit difference|" in stdout
    assert "OK: the three implementations agree" in stdout
    assert summary["engine"] == demo.layer_engine(torch.device("cpu"))
    assert f"CudnnLSTM engine: {summary['engine']}; tolerance " in stdout
    assert summary["rtol"] == demo.RTOL[torch.float32] == 1e-5
    assert summary["tolerance"] == pytest.approx(1e-5 * summary["logit_scale"], rel=1e-12)
    assert list(summary["differences"]) == [
        f"{FUSED} vs {STEPPED}",
        f"{FUSED} vs {TORCH_NN}",
        f"{STEPPED} vs {TORCH_NN}",
    ]
    for pair, diff in summary["differences"].items():
        assert _difference(stdout, pair) == pytest.approx(diff, rel=0.01, abs=1e-12)
        assert diff <= summary["tolerance"]
        line = next(line for line in stdout.splitlines() if line.strip().startswith(pair))
        assert line.endswith("(bitwise equal)") == (diff == 0), line
    # The stepped cells are a different kernel from both others (they sum the two biases and
    # multiply [x, h] by one matrix): they agree to rounding, not bits. Most of the 13,824 logits
    # differ, so this cannot pass by chance. (Fused vs torch.nn may be bitwise equal: with the
    # "torch" engine our layer runs the kernel torch.nn.LSTM runs.)
    assert summary["differences"][f"{FUSED} vs {STEPPED}"] > 0
    assert summary["differences"][f"{STEPPED} vs {TORCH_NN}"] > 0

    # Re-check on our own: restore the files and compare the logits of the three on the same
    # held-out batch the demo used, stepping the cells with a loop of our own.
    model, vocab = demo.load_model(out)
    model.eval()
    ids = torch.tensor([vocab.index(ch) for ch in demo.load_text()])
    _, rows = demo.split_text(ids, 24 + 1)
    batch = rows[: demo.VERIFY_ROWS, :-1]
    cells = MultiRNNCell([CudnnCompatibleLSTMCell(16), CudnnCompatibleLSTMCell(16)])
    checkpoint.restore(out / "lstm.safetensors", cells)
    torch_lstm = convert.to_torch(model.lstm)
    assert isinstance(torch_lstm, torch.nn.LSTM)
    with torch.no_grad():
        x = model.embedding(batch)
        fused = model(batch)[0]
        state: Any = cells.zero_state(demo.VERIFY_ROWS)
        steps = []
        for t in range(24):
            h, state = cells(x[:, t], state)
            steps.append(h)
        by_cells = model.softmax(torch.stack(steps, 1))
        by_torch = model.softmax(torch_lstm(x.transpose(0, 1))[0].transpose(0, 1))
    tolerance = summary["tolerance"]
    assert float((fused - by_torch).abs().max()) <= tolerance
    assert float((fused - by_cells).abs().max()) <= tolerance
    # Both restored from the file alone: the demo's number for this pair is reproduced exactly.
    ours = float((by_cells.double() - by_torch.double()).abs().max())
    assert ours == summary["differences"][f"{STEPPED} vs {TORCH_NN}"]
    # The model was trained: the first loss is about log(vocabulary size), and it fell.
    assert summary["losses"][0] == pytest.approx(torch.log(torch.tensor(len(vocab))).item(), 0.1)
    assert summary["losses"][-1] < summary["losses"][0]


def test_demo_without_matplotlib_still_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)  # importing it raises ImportError
    out = tmp_path / "out"
    assert main([*TINY, "--steps", "1", "--sample-length", "5", "--out", str(out)]) == 0
    assert "matplotlib is not installed" in capsys.readouterr().out
    assert (out / "lstm.safetensors").is_file() and not (out / "loss.png").exists()


def test_demo_fails_when_an_implementation_disagrees(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A compatible cell whose output is off by 1e-3: the two pairs with the stepped cells fail,
    # the run exits 1 and says which pairs and by how much.
    forward = CudnnCompatibleLSTMCell.forward

    def off(self: CudnnCompatibleLSTMCell, inputs: torch.Tensor, state: Any) -> Any:
        h, (c, _) = forward(self, inputs, state)
        return h + 1e-3, LSTMStateTuple(c, h + 1e-3)

    monkeypatch.setattr(CudnnCompatibleLSTMCell, "forward", off)
    out = tmp_path / "out"
    args = [*TINY, "--steps", "1", "--sample-length", "5", "--out", str(out)]
    assert main(args) == demo.EXIT_MISMATCH
    captured = capsys.readouterr()
    assert "FAILED: 2 of 3 pairs disagree beyond the tolerance" in captured.out
    assert f"{FUSED} vs {TORCH_NN}" in captured.out
    failed = [line for line in captured.out.splitlines() if "FAILED: beyond" in line]
    assert len(failed) == 2 and all(STEPPED in line for line in failed)
    err = captured.err.splitlines()[-1]
    assert err.startswith("examples/demo.py: verification FAILED: ")
    assert (
        f"{FUSED} vs {STEPPED} differ by " in err and f"{STEPPED} vs {TORCH_NN} differ by " in err
    )
    assert f"{FUSED} vs {TORCH_NN}" not in err and str(out / "summary.json") in err
    summary = json.loads((out / "summary.json").read_text())
    assert not summary["agree"]
    assert summary["differences"][f"{FUSED} vs {STEPPED}"] > summary["tolerance"]


def test_step_by_step_calls_each_cell_once_per_step(cell_steps: list[int]) -> None:
    torch.manual_seed(0)
    cells = MultiRNNCell([CudnnCompatibleLSTMCell(5), CudnnCompatibleLSTMCell(5)], scope="m")
    x = torch.randn(3, 7, 4, dtype=torch.float64)
    cells.build(4)
    cells.to(torch.float64)
    with torch.no_grad():
        for p in cells.parameters():
            p.uniform_(-0.5, 0.5)
        state = tuple(
            LSTMStateTuple(torch.randn(3, 5, dtype=torch.float64), torch.rand(3, 5).double())
            for _ in range(2)
        )
        outputs, final = demo.step_by_step(cells, x, state)
        assert cell_steps == [3] * 2 * 7
        fused, fused_final = dynamic_rnn(cells, x, initial_state=state, time_major=False)
    assert cell_steps == [3] * 2 * 7  # dynamic_rnn took the fused kernel: no cell calls
    torch.testing.assert_close(outputs, fused, rtol=0, atol=1e-12)
    torch.testing.assert_close(final, fused_final, rtol=0, atol=1e-12)
    # Without a state it starts from zeros, in the inputs' dtype and on their device.
    zeros = cells.zero_state(3, torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(demo.step_by_step(cells, x), demo.step_by_step(cells, x, zeros))


def test_layer_engine_names_the_cpu_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cudnn_rnn, "cpu_engine", lambda: "native (test, 2 threads)", raising=False)
    assert demo.layer_engine(torch.device("cpu")) == "native (test, 2 threads)"
    assert demo.layer_engine(torch.device("cuda", 0)) == "torch"  # a CPU engine: not on CUDA
    monkeypatch.delattr(cudnn_rnn, "cpu_engine")

    def missing(name: str) -> Any:
        raise AttributeError(name)

    monkeypatch.setattr(cudnn_rnn, "__getattr__", missing)  # no lazy cpu_engine either
    assert demo.layer_engine(torch.device("cpu")) == "torch"


def test_ctrl_c_saves_and_exits_130(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = [*TINY, "--steps", "100000", "--out", str(out)]
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    lines: queue.Queue[str] = queue.Queue()

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.put(line)

    try:
        threading.Thread(target=read_stderr, daemon=True).start()
        first = lines.get(timeout=60)
        assert first.startswith("step 1/100000 ["), first
        proc.send_signal(signal.SIGINT)
        stdout, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stdout
    assert "interrupted after step" in stdout and str(out / "lstm.safetensors") in stdout
    # What was saved restores: the LSTM into compatible cells, the whole model into CharModel.
    cells = MultiRNNCell([CudnnCompatibleLSTMCell(16), CudnnCompatibleLSTMCell(16)])
    checkpoint.restore(out / "lstm.safetensors", cells)
    model, _ = demo.load_model(out)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] and 1 <= summary["steps_done"] < 100000
    assert model.lstm.num_units == 16


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--steps", "0"], "--steps must be a whole number > 0, got '0'; e.g. --steps 600."),
        (["--steps", "many"], "--steps must be a whole number > 0, got 'many'"),
        (["--learning-rate", "-1"], "--learning-rate must be a number > 0"),
        (["--temperature", "nan"], "--temperature must be a number > 0"),
        (["--device", "tpu"], "--device must be auto, cpu, cuda or cuda:N, got 'tpu'."),
        (["--batch-size", "5", "--nproc", "2"], "make it a multiple of the number of processes"),
        (["--seq-len", "100000"], "too few for --seq-len 100000"),
        (["--prime", "Zoë"], "--prime must be made of characters of the text; 'ë' do not occur"),
        (["--text", "{tmp}/no-such.txt"], "no such file; name a UTF-8 text file."),
        (["--out", "{tmp}/missing/out"], "does not exist; create it or choose another --out."),
        (["--out", "{tmp}/a-file"], "is a file; name a directory (created if missing)."),
    ],
)
def test_bad_arguments_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    (tmp_path / "a-file").write_text("x")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    out = ["--out", str(tmp_path / "out")] if "--out" not in args else []
    assert main([*out, *args]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("examples/demo.py: error: ") and captured.err.count("\n") == 1
    assert message in captured.err
    assert captured.out == "" and not (tmp_path / "out").exists()


def test_cuda_device_without_cuda_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert main(["--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert "CUDA is not available here; use --device cpu (or auto)." in err
    assert err.count("\n") == 1


def test_nproc_under_torchrun_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["--nproc", "2"]) == 2
    assert "--nproc cannot be used under torchrun" in capsys.readouterr().err


def test_config_round_trips_through_the_command_line(tmp_path: Path) -> None:
    config = demo.DemoConfig(steps=7, learning_rate=0.01, out=tmp_path, prime="-The ", nproc=2)
    args = demo.build_parser().parse_args(config.to_argv())
    assert demo.config_from_args(args) == dataclasses.replace(config, nproc=1)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_redraws_on_a_terminal_and_writes_lines_elsewhere() -> None:
    tty = _Terminal()
    bar = demo.Progress(3, chars_per_step=10, stream=tty)
    for step in (1, 2, 3):
        bar.update(step, 1.5)
    bar.close()
    text = tty.getvalue()
    assert text.startswith("\rstep 1/3 [") and "\rstep 3/3 [" in text and text.endswith("\n")
    assert text.count("\n") == 1  # one line, redrawn in place
    log = io.StringIO()
    bar = demo.Progress(100, chars_per_step=10, stream=log, every=50)
    for step in range(1, 101):
        bar.update(step, 1.5)
    bar.close()
    assert [line.split(" [")[0] for line in log.getvalue().splitlines()] == [
        "step 1/100",
        "step 50/100",
        "step 100/100",
    ]


def test_samples_depend_only_on_the_logits() -> None:
    # Two runners with logits equal to rounding draw the same text from the same seed.
    vocab = "ab"
    logits = torch.tensor([[[0.3, -0.2]]])

    def run(ids: torch.Tensor, state: object) -> tuple[torch.Tensor, object]:
        return logits.expand(1, ids.shape[1], 2), state

    def nudged(ids: torch.Tensor, state: object) -> tuple[torch.Tensor, object]:
        return logits.expand(1, ids.shape[1], 2) + 1e-7, state

    one = demo.sample(run, vocab, "a", 50, seed=3)
    assert one == demo.sample(nudged, vocab, "a", 50, seed=3)
    assert one != demo.sample(run, vocab, "a", 50, seed=4)
    assert set(one) == {"a", "b"}


def test_the_script_runs_from_anywhere_and_is_not_a_command(tmp_path: Path) -> None:
    """Run as a file from another folder, the script finds its text beside it; the package's
    command has no demo (the demo lives in the repository, not in the wheel)."""
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: examples/demo.py ") and "--nproc N" in result.stdout
    assert demo.TEXT_FILE == SCRIPT.parent / "data" / "alice.txt" and demo.TEXT_FILE.is_file()
    assert demo.load_text().lstrip().startswith("ALICE'S ADVENTURES IN WONDERLAND")
    from cudnn_rnn.cli import main as cli_main

    with pytest.raises(SystemExit) as info:
        cli_main(["demo"])
    assert info.value.code == 2
