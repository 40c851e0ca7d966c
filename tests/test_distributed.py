"""Data-parallel training under torchrun: two gloo processes on loopback take the steps one
process takes, with the demo's own loop and helpers (examples/demo.py).

Run under torchrun (``python -m torch.distributed.run --standalone --nproc-per-node 2 -m
tests.test_distributed OUT``, from the repository's root) this file is the worker: it trains the
small model below on its shard of each global batch and saves its parameters to
``OUT/rank<r>.pt``.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch

from examples import demo

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "demo.py"
STEPS = 4
GLOBAL_BATCH = 6  # 3 rows per rank
VOCAB = 7
LAUNCH_TIMEOUT = 120.0  # seconds; a hung group fails the test instead of blocking it
ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # two processes on small CPUs: no oversubscription


def _train(env: demo.DistEnv | None) -> tuple[dict[str, torch.Tensor], list[float]]:
    """The demo's model and loop in float64, on this rank's share of fixed global batches."""
    ids = torch.randint(0, VOCAB, (300,), generator=torch.Generator().manual_seed(1))
    model = demo.CharModel(VOCAB, 3, 5, 2, seed=0, dtype=torch.float64)
    wrapped = demo.wrap(model, env, torch.device("cpu"))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    result = demo.train(
        wrapped,
        demo.make_batches(ids, GLOBAL_BATCH, 8, seed=0, env=env),
        STEPS,
        optimizer,
        lr_at=demo.cosine_lr(0.05, STEPS),
        env=env,
    )
    state = {name: value.detach().clone() for name, value in model.state_dict().items()}
    return state, result.losses


def _worker(out: Path) -> None:
    env = demo.env_from_environ()
    assert env is not None and env.world_size == 2
    demo.init_process_group(env, torch.device("cpu"), timeout=timedelta(seconds=60))
    try:
        state, losses = _train(env)
    finally:
        demo.shutdown()
    torch.save({"state": state, "losses": losses}, out / f"rank{env.rank}.pt")


def test_two_processes_match_one_process_on_the_global_batch(tmp_path: Path) -> None:
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    result = subprocess.run(
        [*torchrun, "-m", "tests.test_distributed", str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, **ONE_THREAD},
        capture_output=True,
        text=True,
        timeout=LAUNCH_TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    alone, alone_losses = _train(None)
    initial = demo.CharModel(VOCAB, 3, 5, 2, seed=0, dtype=torch.float64).state_dict()
    assert (
        set(ranks[0]["state"])
        == set(alone)
        == {
            "embedding.weight",
            "lstm.opaque_kernel",
            "softmax.weight",
            "softmax.bias",
        }
    )
    for name, value in alone.items():
        # (a) the ranks hold the same parameters, bit for bit
        assert torch.equal(ranks[0]["state"][name], ranks[1]["state"][name]), name
        # (b) and the ones a single process gets from the whole global batch
        torch.testing.assert_close(ranks[0]["state"][name], value, rtol=0, atol=1e-9)
        assert not torch.equal(value, initial[name]), f"{name} did not train"
    # The reported loss is the mean over the ranks: the loss of the global batch.
    assert ranks[0]["losses"] == ranks[1]["losses"]
    assert ranks[0]["losses"] == pytest.approx(alone_losses, rel=0, abs=1e-12)
    assert len(alone_losses) == STEPS


def test_demo_with_two_processes_reports_once(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["--steps", "2", "--num-units", "8", "--embedding-size", "4", "--batch-size", "4"]
    args += ["--seq-len", "16", "--sample-length", "10", "--nproc", "2", "--out", str(out)]
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=LAUNCH_TIMEOUT,
        env={**os.environ, **ONE_THREAD},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "starting 2 processes (gloo) under torchrun" in result.stderr
    assert "-m torch.distributed.run --standalone --nproc-per-node=2 " in result.stderr
    assert result.stdout.count("verification:") == 1  # rank 0 alone reports
    assert (
        "(2 processes)" in result.stdout and "OK: the three implementations agree" in result.stdout
    )
    assert result.stderr.count("step 2/2 [") == 1
    assert (out / "lstm.safetensors").is_file()


def test_ctrl_c_stops_every_process_at_the_same_step(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["--steps", "100000", "--num-units", "8", "--embedding-size", "4", "--batch-size", "4"]
    args += ["--seq-len", "16", "--nproc", "2", "--out", str(out)]
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **ONE_THREAD},
    )
    lines: queue.Queue[str] = queue.Queue()
    stderr: list[str] = []

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.put(line)
            stderr.append(line)

    # The thread is stderr's only reader: communicate() would read it too and close it under
    # the thread (an unhandled "I/O operation on closed file" in the thread, seen in CI).
    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        while not (line := lines.get(timeout=LAUNCH_TIMEOUT)).startswith("step 1/"):
            assert "error" not in line, line
        proc.send_signal(signal.SIGINT)  # to the demo only; it passes it on to torchrun
        proc.wait(timeout=LAUNCH_TIMEOUT)
        assert proc.stdout is not None
        stdout = proc.stdout.read()  # a few lines: the pipe cannot have filled
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(timeout=LAUNCH_TIMEOUT)  # stderr ends with the process
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    assert proc.returncode == 130, stdout + "".join(stderr)
    assert stdout.count("interrupted after step") == 1
    assert (out / "lstm.safetensors").is_file() and (out / "head.safetensors").is_file()


def test_torchrun_runs_the_script_with_the_same_options(tmp_path: Path) -> None:
    config = demo.DemoConfig(steps=7, out=tmp_path, nproc=3)
    command = demo.torchrun_command(config)
    assert command[:5] == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=3",
    ]
    assert command[5] == str(SCRIPT) and command[6:] == config.to_argv()
    assert "--nproc" not in " ".join(command[6:])  # the workers run one process each


def _launch_fake_torchrun(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, code: str
) -> demo.DemoConfig:
    """``launch`` running ``code`` (a Python program) in torchrun's place."""
    monkeypatch.setattr(demo, "torchrun_command", lambda config: [sys.executable, "-c", code])
    return demo.DemoConfig(nproc=2, device="cpu", out=tmp_path)


def test_launch_returns_torchruns_exit_code(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = _launch_fake_torchrun(monkeypatch, tmp_path, "import sys; sys.exit(3)")
    assert demo.launch(config) == 3
    killed = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    config = _launch_fake_torchrun(monkeypatch, tmp_path, killed)
    assert demo.launch(config) == 128 + signal.SIGKILL


def test_launch_passes_one_ctrl_c_on_and_exits_130(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A SIGINT to the launching process reaches torchrun once (torchrun hands it to the
    workers, which stop together); the run then ends with 130 whatever torchrun returns."""
    ready, seen = tmp_path / "ready", tmp_path / "seen"
    code = (
        "import pathlib, signal, sys, time\n"
        f"seen = pathlib.Path({str(seen)!r})\n"
        "def on_int(signum, frame):\n"
        "    seen.write_text(seen.read_text() + 'x' if seen.exists() else 'x')\n"
        "signal.signal(signal.SIGINT, on_int)\n"
        f"pathlib.Path({str(ready)!r}).write_text('')\n"
        "deadline = time.monotonic() + 60\n"
        "while not seen.exists() and time.monotonic() < deadline:\n"
        "    time.sleep(0.01)\n"
        "time.sleep(0.5)\n"  # a second SIGINT would arrive in this time
        "sys.exit(1)\n"
    )
    config = _launch_fake_torchrun(monkeypatch, tmp_path, code)

    def interrupt() -> None:
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)

    before = signal.getsignal(signal.SIGINT)
    thread = threading.Thread(target=interrupt, daemon=True)
    thread.start()
    assert demo.launch(config) == demo.EXIT_INTERRUPTED
    thread.join(timeout=10)
    assert seen.read_text() == "x"
    assert signal.getsignal(signal.SIGINT) is before  # put back


def test_environment_parsing() -> None:
    assert demo.env_from_environ({}) is None
    assert demo.env_from_environ({"RANK": "0"}) is None
    env = demo.env_from_environ(
        {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    )
    assert env == demo.DistEnv(3, 4, 1, 2) and not env.is_main
    with pytest.raises(ValueError, match=r"RANK='x' is not an integer"):
        demo.env_from_environ({"RANK": "x", "WORLD_SIZE": "2"})
    with pytest.raises(ValueError, match="expected 0 <= RANK < WORLD_SIZE"):
        demo.env_from_environ({"RANK": "2", "WORLD_SIZE": "2"})
    assert demo.device_for(env, torch.device("cuda")) == torch.device("cuda", 1)
    assert demo.device_for(env, torch.device("cpu")) == torch.device("cpu")


def test_shards_must_be_equal() -> None:
    env = demo.DistEnv(0, 4, 0, 4)
    with pytest.raises(ValueError, match="6 rows does not split into 4 equal shards"):
        demo.shard(torch.zeros(6, 2), env)
    rows = torch.arange(8)
    shards = [demo.shard(rows, demo.DistEnv(r, 4, r, 4)) for r in range(4)]
    assert torch.equal(torch.cat(shards), rows)


if __name__ == "__main__":
    _worker(Path(sys.argv[1]))
