"""Data-parallel training: two gloo processes on loopback take the steps one process takes.

Run as a script (``python tests/test_distributed.py OUT``) this file is the worker that
:func:`cudnn_rnn.distributed.launch` starts: it trains the small model below on its shard of
each global batch with the demo's own loop and saves its parameters to ``OUT/rank<r>.pt``.
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

from cudnn_rnn import demo, distributed

STEPS = 4
GLOBAL_BATCH = 6  # 3 rows per rank
VOCAB = 7
LAUNCH_TIMEOUT = 120.0  # seconds; a hung group fails the test instead of blocking it
ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # two processes on small CPUs: no oversubscription


def _train(env: distributed.DistEnv | None) -> tuple[dict[str, torch.Tensor], list[float]]:
    """The demo's model and loop in float64, on this rank's share of fixed global batches."""
    ids = torch.randint(0, VOCAB, (300,), generator=torch.Generator().manual_seed(1))
    model = demo.CharModel(VOCAB, 3, 5, 2, seed=0, dtype=torch.float64)
    wrapped = distributed.wrap(model, env, torch.device("cpu"))
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
    env = distributed.env_from_environ()
    assert env is not None and env.world_size == 2
    distributed.init_process_group(env, torch.device("cpu"), timeout=timedelta(seconds=60))
    try:
        state, losses = _train(env)
    finally:
        distributed.shutdown()
    torch.save({"state": state, "losses": losses}, out / f"rank{env.rank}.pt")


def test_two_processes_match_one_process_on_the_global_batch(tmp_path: Path) -> None:
    code = distributed.launch(
        [sys.executable, __file__, str(tmp_path)],
        2,
        timeout=LAUNCH_TIMEOUT,
        extra_env=ONE_THREAD,
    )
    assert code == 0
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
        [sys.executable, "-m", "cudnn_rnn.cli", "demo", *args],
        capture_output=True,
        text=True,
        timeout=LAUNCH_TIMEOUT,
        env={**os.environ, **ONE_THREAD},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "starting 2 processes (gloo on 127.0.0.1)" in result.stderr
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
        [sys.executable, "-m", "cudnn_rnn.cli", "demo", *args],
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

    try:
        threading.Thread(target=read_stderr, daemon=True).start()
        while not (line := lines.get(timeout=LAUNCH_TIMEOUT)).startswith("step 1/"):
            assert "error" not in line, line
        proc.send_signal(signal.SIGINT)  # to the launcher only; it passes it on
        stdout, _ = proc.communicate(timeout=LAUNCH_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stdout + "".join(stderr)
    assert stdout.count("interrupted after step") == 1
    assert (out / "lstm.safetensors").is_file() and (out / "head.safetensors").is_file()


def test_a_failing_process_stops_the_group() -> None:
    script = "import os, sys, time; sys.exit(3) if os.environ['RANK'] == '1' else time.sleep(60)"
    started = time.monotonic()
    assert distributed.launch([sys.executable, "-c", script], 2, grace=0.5, timeout=30) == 3
    assert time.monotonic() - started < 20


def test_a_hung_group_times_out_and_is_killed() -> None:
    with pytest.raises(TimeoutError, match=r"still running after 1\.0 s; they were killed"):
        distributed.launch([sys.executable, "-c", "import time; time.sleep(60)"], 2, timeout=1.0)


def test_sigterm_terminates_the_group() -> None:
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        code = distributed.launch(
            [sys.executable, "-c", "import time; time.sleep(60)"], 2, timeout=30
        )
    finally:
        timer.cancel()
    assert code == 128 + signal.SIGTERM


def test_launch_sets_torchrun_variables(tmp_path: Path) -> None:
    script = (
        "import os, sys; names = ('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'LOCAL_WORLD_SIZE', "
        "'MASTER_ADDR'); open(os.path.join(sys.argv[1], os.environ['RANK']), 'w').write("
        "' '.join(os.environ[n] for n in names) + ' ' + str(int(os.environ['MASTER_PORT']) > 0))"
    )
    assert distributed.launch([sys.executable, "-c", script, str(tmp_path)], 3, timeout=30) == 0
    seen = sorted((tmp_path / str(r)).read_text() for r in range(3))
    assert seen == [f"{r} {r} 3 3 127.0.0.1 True" for r in range(3)]


def test_environment_parsing() -> None:
    assert distributed.env_from_environ({}) is None
    assert distributed.env_from_environ({"RANK": "0"}) is None
    env = distributed.env_from_environ(
        {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    )
    assert env == distributed.DistEnv(3, 4, 1, 2) and not env.is_main
    with pytest.raises(ValueError, match=r"RANK='x' is not an integer"):
        distributed.env_from_environ({"RANK": "x", "WORLD_SIZE": "2"})
    with pytest.raises(ValueError, match="expected 0 <= RANK < WORLD_SIZE"):
        distributed.env_from_environ({"RANK": "2", "WORLD_SIZE": "2"})
    assert distributed.device_for(env, torch.device("cuda")) == torch.device("cuda", 1)
    assert distributed.device_for(env, torch.device("cpu")) == torch.device("cpu")


def test_shards_must_be_equal() -> None:
    env = distributed.DistEnv(0, 4, 0, 4)
    with pytest.raises(ValueError, match="6 rows does not split into 4 equal shards"):
        distributed.shard(torch.zeros(6, 2), env)
    rows = torch.arange(8)
    shards = [distributed.shard(rows, distributed.DistEnv(r, 4, r, 4)) for r in range(4)]
    assert torch.equal(torch.cat(shards), rows)


if __name__ == "__main__":
    _worker(Path(sys.argv[1]))
