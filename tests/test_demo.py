"""`cudnn-rnn demo`: trains, saves, restores three ways, samples, verifies; errors, Ctrl-C."""

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
from pathlib import Path

import pytest
import torch

from cudnn_rnn import checkpoint, convert, demo
from cudnn_rnn.cells import CudnnCompatibleLSTMCell, MultiRNNCell, dynamic_rnn
from cudnn_rnn.cli import main

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


def _difference(text: str, pair: str) -> float:
    match = re.search(re.escape(pair) + r"\s+([0-9.]+e[+-][0-9]+)", text)
    assert match, f"no {pair!r} line in:\n{text}"
    return float(match.group(1))


def test_demo_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["demo", *TINY, "--out", str(out)]) == 0
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

    # The printed verification is the one in the summary, and within the tolerance.
    assert "verification: max |logit difference|" in stdout
    assert "OK: the three implementations agree" in stdout
    for pair, diff in summary["differences"].items():
        assert _difference(stdout, pair) == pytest.approx(diff, rel=0.01, abs=1e-12)
        assert diff <= summary["tolerance"] <= 1e-4

    # Re-check on our own: restore the files and compare the logits of the three on the same
    # held-out batch the demo used.
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
        by_cells = model.softmax(dynamic_rnn(cells, x, time_major=False)[0])
        by_torch = model.softmax(torch_lstm(x.transpose(0, 1))[0].transpose(0, 1))
    assert float((fused - by_torch).abs().max()) <= 1e-5
    assert float((fused - by_cells).abs().max()) <= 1e-5
    # Both restored from the file alone: the demo's number for this pair is reproduced exactly.
    ours = float((by_cells.double() - by_torch.double()).abs().max())
    printed = summary["differences"]["MultiRNNCell + dynamic_rnn vs torch.nn.LSTM (to_torch)"]
    assert ours == pytest.approx(printed, rel=1e-9, abs=1e-12)
    # The model was trained: the first loss is about log(vocabulary size), and it fell.
    assert summary["losses"][0] == pytest.approx(torch.log(torch.tensor(len(vocab))).item(), 0.1)
    assert summary["losses"][-1] < summary["losses"][0]


def test_demo_without_matplotlib_still_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)  # importing it raises ImportError
    out = tmp_path / "out"
    assert main(["demo", *TINY, "--steps", "1", "--sample-length", "5", "--out", str(out)]) == 0
    assert "matplotlib is not installed" in capsys.readouterr().out
    assert (out / "lstm.safetensors").is_file() and not (out / "loss.png").exists()


def test_ctrl_c_saves_and_exits_130(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = [*TINY, "--steps", "100000", "--out", str(out)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "cudnn_rnn.cli", "demo", *args],
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
    assert main(["demo", *out, *args]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("cudnn-rnn: error: ") and captured.err.count("\n") == 1
    assert message in captured.err
    assert captured.out == "" and not (tmp_path / "out").exists()


def test_cuda_device_without_cuda_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert main(["demo", "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert "CUDA is not available here; use --device cpu (or auto)." in err
    assert err.count("\n") == 1


def test_nproc_under_torchrun_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["demo", "--nproc", "2"]) == 2
    assert "--nproc cannot be used under torchrun" in capsys.readouterr().err


def test_config_round_trips_through_the_command_line(tmp_path: Path) -> None:
    from cudnn_rnn.cli import build_parser

    config = demo.DemoConfig(steps=7, learning_rate=0.01, out=tmp_path, prime="-The ", nproc=2)
    args = build_parser().parse_args(["demo", *config.to_argv()])
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
