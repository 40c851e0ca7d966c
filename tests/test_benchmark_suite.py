"""The benchmark suite (benchmarks/suite.py, ``make bench``): its shapes' arithmetic, its report
and targets, its command line (timings themselves are never asserted)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import cudnn_rnn
from benchmarks import suite
from benchmarks.suite import Row, Shape
from cudnn_rnn.cli import bench
from tests.support.timing import HANG, FakeClock

ROOT = Path(__file__).resolve().parents[1]
BY_NAME = {s.name: s for s in suite.SHAPES}


def test_flops_match_the_hand_count() -> None:
    # 2 FLOPs per multiply-add; LSTM has 4 gates, each [H, in + H] per step and sequence.
    assert BY_NAME["lstm-100x64x512"].forward_flops() == 2 * 4 * 512 * 1024 * 100 * 64
    # skip_input: no input matrix, only the recurrent one.
    assert BY_NAME["tanh-skip-50x16x1760"].forward_flops() == 2 * 1760 * 1760 * 50 * 16
    assert BY_NAME["tanh-linear-50x16x1760"].forward_flops() == 2 * 1760 * 3520 * 50 * 16
    # 3 bidirectional layers: layer 0 reads 256 inputs, the others 2 * 256.
    per_step = 2 * 4 * 256 * ((256 + 256) + 2 * (512 + 256))
    assert BY_NAME["lstm-3bi-100x32x256"].forward_flops() == 2 * per_step * 100 * 32
    varlen = BY_NAME["lstm-2bi-varlen-100x32x256"]
    lengths = varlen.lengths()
    assert lengths is not None and len(lengths) == 32
    assert max(lengths) == 100 and min(lengths) == 50
    per_step = 2 * 4 * 256 * ((256 + 256) + (512 + 256))
    assert varlen.forward_flops() == 2 * per_step * sum(lengths)


def test_a_stream_counts_the_valid_steps_of_every_batch() -> None:
    stream = BY_NAME["gru-2-stream-16x256"]
    lengths = stream.batch_lengths()
    assert len(lengths) == 40 and lengths == stream.batch_lengths()  # seeded
    flat = [n for batch in lengths if batch is not None for n in batch]
    assert len(flat) == 40 * 16 and min(flat) >= 20 and max(flat) <= 100
    assert len(set(flat)) > 20  # drawn, not one length
    per_step = 2 * 3 * 256 * ((256 + 256) + (256 + 256))
    assert stream.forward_flops() == per_step * sum(flat)
    # Each batch is padded to its own longest sequence.
    batches = suite._batches(stream)
    assert [x.shape[0] for x, _ in batches] == [max(b or []) for b in lengths]
    assert all(n is not None and n.dtype == np.int32 for _, n in batches)


def test_the_recurrent_weights_of_a_step() -> None:
    shape = BY_NAME["lstm-2-25x1x256"]
    assert shape.recurrent_matrix() == (4 * 256, 256)
    assert shape.recurrent_bytes() == 2 * 4 * 256 * 256 * 4
    assert BY_NAME["gru-serve-25x1x512"].recurrent_bytes() == 3 * 512 * 512 * 4


def test_the_issue_shapes_are_all_there() -> None:
    def labels(group: str) -> list[str]:
        return [s.label for s in suite.SHAPES if s.group == group and s.inference]

    assert labels("issue") == [
        "lstm (25, 1, 256, 256, 2, uni)",
        "gru (25, 1, 256, 256, 2, uni)",
        "lstm (100, 16, 256, 256, 1, uni)",
        "gru (100, 16, 512, 512, 1, uni)",
        "rnn-tanh (50, 16, 1024, 1024, 1, uni)",
    ]
    assert labels("large") == [
        "lstm (100, 64, 512, 512, 1, uni)",
        "lstm (50, 64, 500, 500, 1, uni)",
        "gru (100, 32, 1024, 1024, 1, uni)",
        "lstm (100, 32, 256, 256, 3, bi)",
        "rnn-tanh (50, 16, 1760, 1760, 1, uni) skip_input",
        "rnn-tanh (50, 16, 1760, 1760, 1, uni)",
        "lstm (100, 32, 256, 256, 2, bi) lengths 50-100",
    ]
    serving = [s for s in suite.SHAPES if s.group == "serving"]
    assert {(s.mode, s.batch, s.units) for s in serving} == {
        (mode, b, h)
        for mode in ("lstm", "gru", "rnn_tanh", "rnn_relu")
        for b in (1, 4, 16, 64)
        for h in (256, 512)
    }
    assert all(
        (s.steps, s.layers, s.input_size, s.training) == (25, 1, s.units, False) for s in serving
    )
    assert labels("stream") == [
        "gru (<=100, 16, 256, 256, 2, uni) stream of 40 batches, lengths 20-100"
    ]
    training = {s.label for s in suite.SHAPES if s.training}
    assert training >= {
        "gru (100, 32, 1024, 1024, 1, uni)",
        "lstm (100, 64, 512, 512, 1, uni)",
        "rnn-tanh (50, 16, 1760, 1760, 1, uni)",
        "rnn-relu (50, 16, 1760, 1760, 1, uni)",
        "lstm (25, 1, 256, 256, 2, uni)",
    }
    assert len({s.name for s in suite.SHAPES}) == len(suite.SHAPES)


def test_serving_rows_are_timed_lighter() -> None:
    timing = bench.Timing(5, 0.2, 1.0)
    assert suite.timing_for(BY_NAME["lstm-serve-25x1x256"], timing) == bench.Timing(3, 0.1, 0.5)
    assert suite.timing_for(BY_NAME["lstm-100x64x512"], timing) == timing


def test_best_time_is_the_shortest_call(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()  # each call takes exactly its pause, however busy the machine
    monkeypatch.setattr(suite, "time", clock)
    pauses = iter([0.0005, 0.001, 0.005, 0.0015, 0.003, 0.004] + [0.002] * 100)
    best = suite.best_time(lambda: clock.sleep(next(pauses)), seconds=0.0, calls=5)
    assert best == pytest.approx(0.001)  # the first (0.0005) is untimed
    pauses = iter([0.004, 0.003] + [0.002] * 100)
    assert suite.best_time(lambda: clock.sleep(next(pauses)), seconds=0.05, calls=1) == (
        pytest.approx(0.002)  # calls for 0.05 s, not the one asked
    )


def test_the_matmul_peak_is_the_best_over_sizes_and_engines() -> None:
    peak, engine = suite.matmul_peak(sizes=((64, 32, 16), (96, 96, 96)))
    assert peak > 0
    products = ("(64, 32) @ (32, 16)", "(96, 96) @ (96, 96)")
    engines = ("torch.matmul", "onnxruntime MatMul")
    assert engine in {f"{e} {p}" for e in engines for p in products}


def test_cache_bandwidth_is_a_rate() -> None:
    assert suite.cache_bandwidth(64, 16) > 1e6  # bytes/s; any machine reads 4 KiB faster


def test_quick_run_writes_a_consistent_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("onnxruntime")
    # The probes' fresh processes (about 5 s each) run in the script test below and in the
    # memory tests at the end; here a stand-in records which rows ask for them.
    probed: list[tuple[str, str, str]] = []
    mib = {bench.OURS: 3 * 2**20, bench.TORCH_NN: 4 * 2**20}

    def probe(shape: Shape, impl: str, device: str) -> int:
        probed.append((shape.name, impl, device))
        return mib[impl]

    monkeypatch.setattr(suite, "measure_memory", probe)
    shape = Shape("lstm-test", "lstm", 6, 2, 5, 4, 2)
    varlen = Shape("gru-test", "gru", 6, 3, 4, 4, 1, True, varlen=2, training=False)
    single = Shape("tanh-test", "rnn_tanh", 4, 1, 4, 4, group="serving", training=False)
    stream = Shape(
        "gru-test-stream", "gru", 6, 3, 4, 4, 2, varlen=2, stream=3, group="stream", training=False
    )
    tiny = Shape("gru-test-tiny", "gru", 1, 1, 8, 8, group="per-call", training=False)
    busy = Shape("tanh-test-busy", "rnn_tanh", 4, 1, 4, 4, group="busy", training=False, busy=True)
    rows, dyn = suite.run(
        [shape, varlen, single, stream, tiny, busy],
        out=tmp_path,
        repeats=1,
        block=0.001,
        memory=True,
        dynamic=shape,
        warmup=0.01,
        peak_sizes=((64, 64, 64),),
        log=lambda _: None,
    )
    record = json.loads((tmp_path / "benchmarks.json").read_text())
    md = (tmp_path / "benchmarks.md").read_text()
    assert (tmp_path / "benchmarks.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    first = record["rows"][0]
    assert set(first["inference"]) >= {bench.OURS, bench.TORCH_NN, bench.ORT_OURS, bench.ORT_TORCH}
    assert set(first["training"]) == {bench.OURS, bench.TORCH_NN}
    # OpenVINO ran on our export, or the notes say it is not installed.
    openvino = bench.installed("openvino")
    for row in record["rows"]:
        assert (bench.OPENVINO in row["inference"]) == openvino
    assert openvino or "openvino not installed (pip install openvino)" in md
    # The runtimes compute what we compute (over the valid steps).
    for row in record["rows"]:
        assert row["max_abs_diff"] and max(row["max_abs_diff"].values()) < 1e-4
        assert "differs from ours" not in md
    # The report's ratios and rates are the JSON's times divided.
    inf = first["inference"]
    peers = {k: v for k, v in inf.items() if k in bench.PEERS}
    fastest = min(peers, key=peers.__getitem__)
    assert f"**{inf[bench.OURS] / peers[fastest]:.2f}** ({fastest})" in md
    train = first["training"]
    assert f"**{train[bench.OURS] / train[bench.TORCH_NN]:.2f}**" in md
    peak = record["matmul_peak_flops"]
    rate = shape.forward_flops() / inf[bench.OURS]
    assert f"| {rate / 1e9:.1f} ({100 * rate / peak:.0f}%) |" in md
    # Varlen rows and the stream leave out the peers that cannot take lengths, and say so.
    for row in record["rows"][1], record["rows"][3]:
        assert bench.ORT_TORCH not in row["inference"] and bench.KERAS not in row["inference"]
        assert bench.ORT_OURS in row["inference"]
    assert "full-length sequences only" in md
    assert "Keras: not run on the serving shapes" in md
    # B = 1 rows have the weight-read bound: T x the recurrent bytes over the bandwidth.
    b1 = record["rows"][2]
    assert b1["bound"] == pytest.approx(4 * 4 * 4 * 4 / b1["cache_bandwidth"])
    bandwidth = f"{b1['cache_bandwidth'] / 1e9:.0f} GB/s"
    ratio = b1["inference"][bench.OURS] / b1["bound"]
    # ... and, past the first step, ours per step over the bound's share of one step.
    step = b1["step"] / (b1["bound"] / 4)
    assert f"| {b1['bound'] * 1e3:.3g} at {bandwidth} ({ratio:.1f}x); a step {step:.1f}x |" in md
    assert record["rows"][4]["step"] is None  # the tiny row: one step, nothing past it
    assert all(r["bound"] is None for i, r in enumerate(record["rows"]) if i not in (2, 4, 5))
    # Every group has its heading; memory probes ran for the training row only.
    for title in ("The issue's shapes", "Serving shapes", "A stream of batches"):
        assert f"| **{title}" in md
    assert probed == [("lstm-test", bench.OURS, "cpu"), ("lstm-test", bench.TORCH_NN, "cpu")]
    assert first["memory"] == mib and "| 3.0 / 4.0 (0.75x) |" in md
    assert all(not r["memory"] for r in record["rows"][1:])
    assert record["dynamic_rnn"]["notes"][0].startswith("max |dynamic_rnn - layer|")
    diff = float(re.search(r"= ([0-9.e+-]+)", record["dynamic_rnn"]["notes"][0])[1])  # type: ignore[index]
    assert diff < 1e-5
    assert "## Targets" in md and "Inference, the stream: ours / fastest peer <= 0.85" in md
    # The busy row is the serving row's problem run beside a busy process: its target is the
    # ratio of the two rows' ratios; the tiny row's is ours / torch.nn.
    for title in ("Per-call cost: a tiny model", "Beside a busy process"):
        assert f"| **{title}" in md
    quiet, loud = record["rows"][2]["inference"], record["rows"][5]["inference"]

    def ratio(inf: dict[str, float]) -> float:
        return inf[bench.OURS] / min(v for k, v in inf.items() if k in bench.PEERS)

    busy_line = next(line for line in md.splitlines() if "Beside a busy process: ours" in line)
    assert f"| {ratio(loud) / ratio(quiet):.2f} (tanh-test-busy) |" in busy_line
    tiny_inf = record["rows"][4]["inference"]
    tiny_line = next(line for line in md.splitlines() if "Per-call cost, a tiny" in line)
    assert f"{tiny_inf[bench.OURS] / tiny_inf[bench.TORCH_NN]:.2f} (gru-test-tiny)" in tiny_line
    assert rows[0].shape == shape and dyn is not None


def _row(shape: Shape, inference: dict[str, float], training: dict[str, float]) -> Row:
    return Row(shape, inference=inference, training=training)


def test_targets_mark_each_target_met_or_not(monkeypatch: pytest.MonkeyPatch) -> None:
    ours, nn, ort = bench.OURS, bench.TORCH_NN, bench.ORT_OURS
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    big = BY_NAME["lstm-100x64x512"]
    peak = big.forward_flops() / 1.0  # ours at 1 s is 100% of this peak
    b1 = _row(BY_NAME["lstm-serve-25x1x256"], {ours: 1.0, nn: 1.0}, {})  # 1.00: met
    b1.bound = 0.4  # ours / bound 2.5, and a step past the first:
    b1.step = 2.5 * 0.4 / 25  # 2.5x the bound's step: not met
    rows = [
        _row(BY_NAME["lstm-100x16x256"], {ours: 0.7, nn: 1.0, ort: 1.0}, {}),  # 0.70: met
        _row(BY_NAME["gru-serve-25x64x256"], {ours: 5.0, nn: 1.0}, {}),  # B = 64: no target
        _row(BY_NAME["gru-serve-25x4x256"], {ours: 0.95, nn: 1.0}, {}),  # 0.95: not met
        _row(BY_NAME["tanh-serve-25x16x256"], {ours: 0.85, nn: 1.0}, {}),  # 0.85: met
        b1,
        _row(big, {ours: 1.0, nn: 2.0}, {ours: 1.0, nn: 1.1}),  # quiet: 0.50
        _row(BY_NAME["lstm-100x64x512-busy"], {ours: 1.3, nn: 2.0}, {}),  # 0.65 / 0.50 = 1.30
        _row(BY_NAME["gru-2-stream-16x256"], {ours: 0.9, ort: 1.0}, {}),  # 0.90: not met
        _row(BY_NAME["relu-50x16x1760"], {}, {ours: 0.5, nn: 1.0}),  # 0.50: met
        _row(BY_NAME["gru-tiny-1x1x8"], {ours: 1.2, nn: 1.0}, {}),  # 1.20: not met
        _row(BY_NAME["tanh-tiny-1x1x8"], {ours: 0.8, nn: 1.0}, {}),
    ]
    lines = suite._targets(rows, None, peak)
    by_text = {line.split(" | ")[0].lstrip("| "): line for line in lines}
    why = "**not met** ([why](design_notes.md#targets-not-met-and-why))"
    serving = by_text["Inference, serving shapes with B = 4 to 16: ours / fastest peer <= 0.90"]
    assert why in serving and "0.95 (gru-serve-25x4x256)" in serving
    assert "gru-serve-25x64x256" not in serving
    b8 = by_text["Inference, the issue's shapes with B >= 8: ours / fastest peer <= 0.80"]
    assert "**met**" in b8 and "0.70 (lstm-100x16x256)" in b8
    b1_line = by_text["Inference, B = 1 (issue and serving shapes): ours / fastest peer <= 1.00"]
    assert "**met**" in b1_line and "tiny" not in b1_line
    bound = by_text[
        "Inference, B = 1: a step (past the first) / the weight-read bound's step <= 2.0"
    ]
    assert why in bound and "2.50 (lstm-serve-25x1x256)" in bound
    assert "**met**" in by_text["Inference, large shapes: ours / fastest peer <= 1.00"]
    assert why in by_text["Inference, the stream: ours / fastest peer <= 0.85"]
    tiny = by_text["Per-call cost, a tiny model (T 1, B 1, H 8): ours / torch.nn <= 1.00"]
    assert why in tiny and "1.20 (gru-tiny-1x1x8)" in tiny and "tanh-tiny-1x1x8 0.80" not in tiny
    busy = by_text["Beside a busy process: ours / fastest peer over the quiet row's <= 1.20"]
    assert why in busy and "1.30 (lstm-100x64x512-busy)" in busy
    assert "**met**" in by_text["Training, GRU and RNN: ours / torch.nn <= 0.55"]
    lstm = by_text["Training, LSTM, large shapes: ours / torch.nn <= 0.90"]
    assert "0.91 (lstm-100x64x512)" in lstm and why in lstm
    peak_line = by_text["Inference, large shapes: ours >= 70% of the matmul peak (2 threads)"]
    assert "100% (lstm-100x64x512) | **met**" in peak_line
    memory = by_text["Peak memory of a training step <= torch.nn's + 5%"]
    assert "no such row in this run" in memory
    monkeypatch.setattr(torch, "get_num_threads", lambda: 16)
    lines = suite._targets(rows, None, peak)
    assert any("ours >= 60% of the matmul peak (16 threads)" in line for line in lines)


def test_the_busy_row_runs_beside_a_process_that_keeps_a_core_busy() -> None:
    """The busy process burns CPU time while the block runs and is gone after it."""

    def user_ticks(pid: int) -> int:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[11])  # utime, stat's 14th field

    # It must come to 0.3 s of CPU time: in 0.3 s on a quiet machine, later on a busy one
    # (the scheduler's share); one that sleeps or waits never does, and fails at the deadline.
    want, deadline = 0.3 * os.sysconf("SC_CLK_TCK"), time.monotonic() + HANG
    with suite.busy_process() as proc:
        while (ticks := user_ticks(proc.pid)) < want and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None
    assert proc.poll() is not None
    assert ticks >= want, ticks


def test_the_machine_table_names_our_cpu_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(cudnn_rnn, "cpu_engine", raising=False)
    assert suite.machine()["our CPU engine"] == "torch"
    monkeypatch.setattr(
        cudnn_rnn, "cpu_engine", lambda: "native (avx512f, 2 threads)", raising=False
    )
    info = suite.machine()
    assert info["our CPU engine"] == "native (avx512f, 2 threads)"
    assert set(info) >= {"onnxruntime", "openvino", "keras"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--shapes", "nope"], "unknown shape(s) nope; choose from lstm-2-25x1x256, "),
        # The timing options are checked by cudnn_rnn.cli.bench (tests/test_bench.py has them all).
        (["--repeats", "0"], "--repeats must be an integer >= 1, got 0."),
        (["--device", "meta"], "--device must be cpu, cuda or cuda:N, got 'meta'."),
    ],
)
def test_bad_options_exit_2_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert suite.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("benchmarks/suite.py: error: " + message)
    assert captured.err.count("\n") == 1 and captured.out == ""


def test_an_unknown_shape_names_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert suite.main(["--shapes", "lstm-quick", "nope"]) == 2
    err = capsys.readouterr().err
    assert all(shape.name in err for shape in (*suite.SHAPES, *suite.QUICK_SHAPES))


def test_a_quick_run_writes_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench"
    argv = ["--quick", "--no-memory", "--no-peers", "--repeats", "1", "--block", "0.001"]
    assert suite.main([*argv, "--warmup", "0", "--out", str(out)]) == 0
    report = (out / "benchmarks.md").read_text()
    assert "## Inference" in report and "## Training" in report and "lstm (10, 4" in report
    assert "(`python benchmarks/suite.py --out docs`, the suite in `benchmarks/suite.py`)" in report
    assert (out / "benchmarks.json").is_file()
    assert f"wrote {out / 'benchmarks.md'}" in capsys.readouterr().out


def test_an_unwritable_out_exits_2_before_measuring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert suite.main(["--quick", "--out", str(blocker / "bench")]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("benchmarks/suite.py: error: ") and str(blocker) in captured.err
    assert captured.err.count("\n") == 1 and "matmul peak" not in captured.out


def test_the_suite_runs_as_a_script_from_anywhere(tmp_path: Path) -> None:
    """``make bench`` runs the file; its memory probes import it again, by name from the
    repository's root, in fresh interpreters, whatever the working folder."""
    out = tmp_path / "out"
    argv = ["--quick", "--shapes", "lstm-quick", "--no-peers", "--repeats", "1"]
    argv += ["--block", "0.001", "--warmup", "0", "--out", str(out)]
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "suite.py"), *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    record = json.loads((out / "benchmarks.json").read_text())
    assert [row["shape"]["name"] for row in record["rows"]] == ["lstm-quick"]
    if Path("/proc/self/clear_refs").exists():  # the probes measure on Linux
        memory = record["rows"][0]["memory"]
        assert set(memory) == {bench.OURS, bench.TORCH_NN} and min(memory.values()) >= 0
    assert not any("memory probe" in note for note in record["rows"][0]["notes"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_failing_memory_probe_says_why() -> None:
    shape = Shape("lstm-test", "lstm", 3, 2, 4, 4, 1)
    with pytest.raises(RuntimeError, match=r"memory probe of torch\.nn on lstm-test failed: \w"):
        suite.measure_memory(shape, bench.TORCH_NN, "cuda")  # the probe cannot build on CUDA


def test_the_inference_table_has_one_column_per_implementation(tmp_path: Path) -> None:
    shape = Shape("lstm-test", "lstm", 4, 2, 3, 3, 1)
    rows, _ = suite.run(
        [shape],
        out=tmp_path,
        repeats=1,
        block=0.001,
        peers=False,
        memory=False,
        dynamic=None,
        warmup=0.0,
        peak_sizes=((64, 64, 64),),
        log=lambda _: None,
    )
    md = (tmp_path / "benchmarks.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| shape | ours |"))
    assert header.split(" | ")[1:-3] == [bench.OURS, *bench.PEERS]
    assert header.endswith(
        "| ours / fastest peer | ours GFLOP/s (% of peak) "
        "| B = 1: weight-read bound ms at cache bandwidth "
        "(ours / bound; a step past the first / the bound's step) |"
    )
    row = next(line for line in md.splitlines() if line.startswith(f"| {shape.label} |"))
    assert row.count("|") == header.count("|")
    assert set(rows[0].inference) == {bench.OURS, bench.TORCH_NN}


@pytest.mark.skipif(
    not Path("/proc/self/clear_refs").exists() or not cudnn_rnn.cpu_engine().startswith("native"),
    reason="needs Linux's peak resident set and the native engine",
)
def test_gru_training_peak_memory_within_torch_nn() -> None:
    """Issue 21's memory target on the training row that missed it (1.18x torch.nn's before
    the backward wrote the gates' gradients over the gates): measured as ``make bench`` does,
    the growth of the peak resident set over the second training step, each in a fresh
    process, against torch.nn on the same weights."""
    # Measured: ours 111.7-111.8 MiB over fresh processes, torch.nn 148.0-148.1; before the
    # fix 1.18x torch.nn's. The bound sits halfway between: 1.0x torch.nn, a third above ours,
    # far outside either figure's spread (0.1%), and still fails the regression it guards.
    shape = BY_NAME["gru-100x32x1024"]
    ours = suite.measure_memory(shape, bench.OURS, "cpu")
    theirs = suite.measure_memory(shape, bench.TORCH_NN, "cpu")
    assert ours is not None and theirs is not None
    assert ours <= 1.0 * theirs, (ours / 2**20, theirs / 2**20)


@pytest.mark.skipif(
    not Path("/proc/self/clear_refs").exists() or not cudnn_rnn.cpu_engine().startswith("native"),
    reason="needs Linux's peak resident set and the native engine",
)
def test_lstm_with_lengths_training_peak_memory_near_torch_nn() -> None:
    """The row with lengths (1.36x torch.nn's before the workspace stopped keeping each step's
    starting state and the backward gave finished parts back): torch.nn's own figure moves
    between two modes over fresh processes (64 and 71 MiB here; ours stays at 70.6), so this
    holds the gain against the lower one with room for that spread."""
    # Measured: ours 67.5-67.6 MiB, torch.nn 64-71 (its two modes); the regression was 1.36x.
    # The bound, 1.25x torch.nn's lower mode (80 MiB), is 18% above ours, so neither mode of
    # torch.nn nor our spread can trip it, and a step keeping 1.36x (87 MiB and up) fails it.
    shape = BY_NAME["lstm-2bi-varlen-100x32x256"]
    ours = suite.measure_memory(shape, bench.OURS, "cpu")
    theirs = suite.measure_memory(shape, bench.TORCH_NN, "cpu")
    assert ours is not None and theirs is not None
    assert ours <= 1.25 * theirs, (ours / 2**20, theirs / 2**20)
