"""benchmarks/scaling.py: the report, its targets and its options (the timing itself runs in
``make bench-scaling``; tests/test_benchmark_suite.py covers the suite it reuses)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from benchmarks import scaling
from cudnn_rnn.bench import ORT_OURS, OURS, TORCH_NN, Timing


def _run(threads: int, ours: float, peer: float, peak: float, training: dict | None = None) -> dict:
    rows = [
        {"name": "lstm-100x64x512", "label": "lstm large", "group": "large", "batch": 64,
         "flops": 1e9, "inference": {OURS: ours, TORCH_NN: peer, ORT_OURS: 2 * peer},
         "notes": ["openvino not installed"]},
        {"name": "lstm-2-25x1x256", "label": "lstm serve", "group": "issue", "batch": 1,
         "flops": 1e6, "inference": {OURS: ours, TORCH_NN: peer}, "notes": []},
    ]  # fmt: skip
    if training is not None:  # as a worker records it (older records have neither key)
        rows[0]["training"], rows[0]["training_target"] = training, 0.90
    return {"threads": threads, "peak": peak, "peak_engine": "torch.matmul", "rows": rows}


def test_the_report_gives_ratios_rates_speed_ups_and_the_targets_of_the_widest_count() -> None:
    runs = [_run(16, 0.001, 0.002, 2e12), _run(4, 0.004, 0.003, 5e11)]  # any order
    text = scaling.report(runs, {"cpu": "test"}, ["1 threads (--budget 10 s)"])
    lines = text.splitlines()
    assert "| 4 | 4.00 | 6.00 | 3.00 | 1.33 | 250 (50%) | 1.00 |" in lines
    assert "| 16 | 1.00 | 4.00 | 2.00 | 0.50 | 1000 (50%) | 4.00 |" in lines
    assert "## Targets at 16 threads (issue 21): 1 of 2 met" in lines
    # B = 1 is outside the B >= 16 target; the large row misses the 60% of the peak.
    assert "| lstm large | >= 60% of the matmul peak | 50% | **missed** |" in lines
    assert "| lstm large | ours / fastest peer (torch.nn) <= 1.00 | 0.50 | met |" in lines
    assert not any(line.startswith("| lstm serve | ours / fastest") for line in lines)
    assert "- openvino not installed" in lines
    assert lines[-1] == "Not run: 1 threads (--budget 10 s)."


def test_training_gets_its_table_and_its_target_at_the_widest_count() -> None:
    runs = [
        _run(16, 0.001, 0.002, 2e12, {OURS: 0.010, TORCH_NN: 0.010}),
        _run(4, 0.004, 0.003, 5e11, {OURS: 0.030, TORCH_NN: 0.040}),
        _run(2, 0.008, 0.006, 3e11),  # a run without training (an older record) is left out
    ]
    lines = scaling.report(runs, {"cpu": "test"}, []).splitlines()
    table = lines.index("Training (a forward and a backward):")
    assert lines[table + 2 : table + 6] == [
        "| threads | ours (ms) | torch.nn (ms) | ours / torch.nn | ours speed-up over 4 threads |",
        "|---|---|---|---|---|",
        "| 4 | 30.00 | 40.00 | 0.75 | 1.00 |",
        "| 16 | 10.00 | 10.00 | 1.00 | 3.00 |",
    ]
    assert lines.count("Training (a forward and a backward):") == 1  # only the shape that trained
    assert "## Targets at 16 threads (issue 21): 1 of 3 met" in lines
    assert "| lstm large | training: ours / torch.nn <= 0.90 | 1.00 | **missed** |" in lines


def test_shapes_without_a_target_say_so() -> None:
    run = _run(2, 0.001, 0.002, 2e12)
    run["rows"] = run["rows"][1:]  # B = 1, not large: no target applies
    lines = scaling.report([run], {"cpu": "test"}, []).splitlines()
    assert lines[-3:] == ["## Targets at 2 threads (issue 21)", "", "None applies to these shapes."]


def test_the_training_targets_are_the_suites() -> None:
    from benchmarks import suite

    by_name = {s.name: s for s in suite.SHAPES}
    assert suite.training_target(by_name["lstm-100x64x512"]) == suite.TRAINING_TARGET_LSTM == 0.90
    assert suite.training_target(by_name["gru-100x32x1024"]) == suite.TRAINING_TARGET_OTHERS
    assert suite.TRAINING_TARGET_OTHERS == 0.55
    assert suite.training_target(by_name["lstm-2-25x1x256"]) is None  # not a large LSTM
    assert set(scaling.SCALING_SHAPES) <= set(by_name)
    assert any(by_name[n].bidirectional and by_name[n].layers > 1 for n in scaling.SCALING_SHAPES)


def test_the_chart_has_a_panel_per_shape(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "scaling.png"
    assert scaling.chart([_run(1, 0.004, 0.003, 1e11), _run(2, 0.002, 0.002, 2e11)], path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--shapes", "nope"], "unknown shape(s) nope"),
        (["--threads", "0"], "--threads must be positive"),
        (["--repeats", "0"], "repeats"),
    ],
)
def test_bad_options_say_what_is_wrong(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert scaling.main([*argv, "--out", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("training", [True, False])
def test_a_worker_times_training_unless_told_not_to(training: bool) -> None:
    timing = Timing(1, 0.001, 0.001)
    threads = torch.get_num_threads()
    try:  # the worker sets the process's thread count (its own process, in a run)
        result = scaling.worker(1, ["lstm-quick"], timing, False, True, training)
    finally:
        torch.set_num_threads(threads)
    (row,) = result["rows"]
    assert set(row["inference"]) == {OURS, TORCH_NN}
    if training:
        assert set(row["training"]) == {OURS, TORCH_NN}
        assert all(t > 0 for t in row["training"].values())
    else:
        assert row["training"] == {} and row["training_target"] is None
