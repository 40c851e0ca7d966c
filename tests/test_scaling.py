"""benchmarks/scaling.py: the report, its targets and its options (the timing itself runs in
``make bench-scaling``; tests/test_benchmark_suite.py covers the suite it reuses)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from benchmarks import scaling
from cudnn_rnn.cli.bench import ORT_OURS, OURS, TORCH_NN, Timing


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


def _fake_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, argv: list[str], cpu: str = "test cpu"
) -> list[int]:
    """:func:`scaling.main` with the worker replaced by :func:`_run` (its shapes renamed to
    quick ones) on a 16-core machine named ``cpu`` whose clock moves 100 s per worker; the
    thread counts the workers ran."""
    ran: list[int] = []
    clock = [0.0]

    def worker(threads: int, args: object) -> dict:
        ran.append(threads)
        clock[0] += 100
        run = _run(threads, 0.001 * 16 / threads, 0.002, 1e11 * threads)
        for row, name in zip(run["rows"], ("lstm-quick", "tanh-quick-serve"), strict=True):
            row["name"] = name
        return run

    monkeypatch.setattr(scaling, "_run_worker", worker)
    monkeypatch.setattr(scaling.suite, "machine", lambda: {"cpu": cpu})
    monkeypatch.setattr(scaling.os, "cpu_count", lambda: 16)
    monkeypatch.setattr(scaling.time, "monotonic", lambda: clock[0])
    args = ["--quick", "--repeats", "1", "--block", "0.01", "--warmup", "0", "--out", str(tmp_path)]
    assert scaling.main([*argv, *args]) == 0
    return ran


def test_add_finishes_a_run_cut_short_with_the_counts_it_left_out(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import json

    # Every count takes 100 s: after two, a third would end past the budget of 250 s.
    assert _fake_run(monkeypatch, tmp_path, ["--threads", "16", "8", "4", "--budget", "250"]) == [
        16, 8,
    ]  # fmt: skip
    record = json.loads((tmp_path / f"{scaling.NAME}.json").read_text())
    assert [r["threads"] for r in record["runs"]] == [8, 16]
    assert record["skipped"] == ["4 threads (--budget 250 s)"]  # the record says so, too
    assert "Not run: 4 threads (--budget 250 s)." in (tmp_path / f"{scaling.NAME}.md").read_text()

    # The second process measures 4 and 8 threads; 16 is kept, 8 is the new measurement.
    assert _fake_run(monkeypatch, tmp_path, ["--threads", "8", "4", "--add"]) == [8, 4]
    record = json.loads((tmp_path / f"{scaling.NAME}.json").read_text())
    assert [r["threads"] for r in record["runs"]] == [4, 8, 16]
    assert record["skipped"] == []
    assert record["machine"]["timing"] == (
        "--repeats 1 --block 0.01 --warmup 0.0; 16 threads in an earlier run on the same "
        "machine, 8, 4 in this one"
    )
    text = (tmp_path / f"{scaling.NAME}.md").read_text()
    assert "| 4 | 4.00 | 4.00 | 2.00 | 2.00 | 250 (62%) | 1.00 |" in text.splitlines()
    assert "| 16 | 1.00 | 4.00 | 2.00 | 0.50 | 1000 (62%) | 4.00 |" in text.splitlines()
    assert "Not run" not in text


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("none", "there is no"),
        ("corrupt", "is not a report of this script"),
        ("machine", "was made with another cpu"),
        ("timing", "not this run's timing"),
        ("shapes", "holds other shapes"),
    ],
)
def test_add_refuses_a_report_it_cannot_extend(
    change: str,
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import json

    _fake_run(monkeypatch, tmp_path, ["--threads", "16"])
    path = tmp_path / f"{scaling.NAME}.json"
    record = json.loads(path.read_text())
    if change == "none":
        path.unlink()
    elif change == "corrupt":
        path.write_text('{"runs": [')
    elif change == "timing":
        record["timing"]["repeats"] = 5
        path.write_text(json.dumps(record))
    elif change == "shapes":
        record["runs"][0]["rows"].pop()
        path.write_text(json.dumps(record))
    before = path.read_bytes() if path.exists() else None
    cpu = "another cpu" if change == "machine" else "test cpu"
    monkeypatch.setattr(scaling.suite, "machine", lambda: {"cpu": cpu})
    monkeypatch.setattr(scaling, "_run_worker", lambda *a: pytest.fail("ran before checking"))
    argv = ["--quick", "--repeats", "1", "--block", "0.01", "--warmup", "0", "--threads", "8"]
    assert scaling.main([*argv, "--add", "--out", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err
    assert (path.read_bytes() if path.exists() else None) == before  # nothing lost
