"""benchmarks/variants.py (``make bench``'s rows of issue 47's variants beside their cuDNN modes):
its rows and their arithmetic, a ``--quick`` run's report, its options. Speed is never asserted
(tests/support/timing.py): the quick run checks that every row is there and its numbers are
consistent, not what they are."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from benchmarks import variants
from benchmarks.variants import MODE, VARIANT
from cudnn_rnn import engines
from cudnn_rnn.cli.bench import ORT_OURS, OUTPUT_TOLERANCE
from cudnn_rnn.core import CUDNN
from cudnn_rnn.engines import native

BY_NAME = {c.name: c for c in variants.cases()}
#: The rows whose variant ONNX's nodes hold (to_onnx writes them): onnxruntime runs these.
ONNX_ROWS = {
    "gru-reset-before",
    "gru-reset-before-b1",
    "lstm-hard-sigmoid",
    "lstm-hard-sigmoid-b1",
    "lstm-peepholes",
    "lstm-input-forget",
    "lstm-gate-clip",
    "tanh-leaky-relu",
    "gru-reverse",
}


def test_the_rows_are_the_issues() -> None:
    assert {
        c.name: (c.mode, c.spec(CUDNN).mode, c.variant.describe()) for c in BY_NAME.values()
    } == {
        "gru-reset-before": ("gru", "gru", "reset before the product"),
        "gru-reset-before-b1": ("gru", "gru", "reset before the product"),
        "lstm-hard-sigmoid": ("lstm", "lstm", "gates hard_sigmoid(0.2, 0.5)"),
        "lstm-hard-sigmoid-b1": ("lstm", "lstm", "gates hard_sigmoid(0.2, 0.5)"),
        "lstm-peepholes": ("lstm", "lstm", "peepholes"),
        "lstm-input-forget": ("lstm", "lstm", "forget gate 1 - input gate"),
        "lstm-gate-clip": ("lstm", "lstm", "gates clipped to 3"),
        "lstm-proj-cell-clips": (
            "lstm",
            "lstm",
            "cell state clipped to 3, projection clipped to 1",
        ),
        "tanh-leaky-relu": ("rnn_tanh", "rnn_relu", "candidate leaky_relu(0.01)"),
        "gru-reverse": ("gru", "gru", "reverse time"),
        "lstm-go-backwards": ("lstm", "lstm", "go_backwards"),
        "lstm-bi-sum": ("lstm", "lstm", "directions merged by sum"),
        "lstm-2bi-separate": ("lstm", "lstm", "separate forward and backward stacks"),
    }
    for case in BY_NAME.values():  # T 25, input 256, H 256, B 16 (B 1 for two rows)
        assert (case.steps, case.input_size, case.units) == (25, 256, 256)
        assert case.batch == (1 if case.name.endswith("-b1") else 16)
        assert case.layers == (2 if case.name == "lstm-2bi-separate" else 1)
        # The mode row is the same layer without the variant (the projection kept).
        assert case.spec(CUDNN).num_proj == case.spec().num_proj
        assert case.spec(CUDNN).direction == case.spec().direction
    assert BY_NAME["lstm-proj-cell-clips"].num_proj == 128
    # The quick run has the same rows, tiny.
    assert [c.name for c in variants.cases(variants.QUICK)] == list(BY_NAME)


def test_flops_count_the_variants_own_products() -> None:
    # 2 per multiply-add, every gate [H, input + H] per step and sequence.
    assert BY_NAME["gru-reset-before"].forward_flops() == 2 * 3 * 256 * 512 * 25 * 16
    # The projection: gates [H, input + P] and the projection [P, H].
    proj = BY_NAME["lstm-proj-cell-clips"]
    assert proj.forward_flops() == 2 * (4 * 256 * (256 + 128) + 128 * 256) * 25 * 16
    # Separate stacks: the second layer reads one direction's output (H), cuDNN's both (2H).
    separate = BY_NAME["lstm-2bi-separate"]
    per_dir = 4 * 256 * 512
    assert separate.forward_flops() == 2 * 2 * (per_dir + per_dir) * 25 * 16
    assert separate.forward_flops(CUDNN) == 2 * 2 * (per_dir + 4 * 256 * 768) * 25 * 16


def test_a_quick_run_writes_every_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("onnxruntime")
    argv = ["--quick", "--repeats", "1", "--block", "0.001", "--warmup", "0"]
    assert variants.main([*argv, "--out", str(tmp_path)]) == 0
    assert f"wrote {tmp_path / 'benchmarks-variants.md'}" in capsys.readouterr().out
    record = json.loads((tmp_path / "benchmarks-variants.json").read_text())
    md = (tmp_path / "benchmarks-variants.md").read_text()
    assert [r["name"] for r in record["rows"]] == list(BY_NAME)
    assert record["matmul_peak_flops"] > 0 and record["target"] == 1.15
    for row in record["rows"]:
        for kind in ("inference", "training"):
            times = row[kind]
            assert {VARIANT, MODE} <= set(times)
            assert all(math.isfinite(t) and t > 0 for t in times.values()), row
            assert row["ratio"][kind] == pytest.approx(times[VARIANT] / times[MODE])
        # the engine the rule table picks for the variant (native where its loops compute it)
        spec = BY_NAME[row["name"]].spec()
        want = engines.select(spec, torch.device("cpu"), torch.float32, False, False)
        assert row["engines"]["variant inference"] == want
        loops = native.available() and spec.num_proj is None
        assert want == ("native" if loops else "variant")
        assert row["engines"]["variant training"] == want
        assert "variant" not in (row["engines"]["mode inference"], row["engines"]["mode training"])
        # onnxruntime on exactly the rows ONNX holds, computing what we compute.
        assert (ORT_OURS in row["inference"]) == (row["name"] in ONNX_ROWS), row["notes"]
        if row["name"] in ONNX_ROWS:
            assert row["max_abs_diff"][ORT_OURS] <= OUTPUT_TOLERANCE
        else:
            assert any("no ONNX export" in note for note in row["notes"])
        # The report's line: the JSON's ratios, and the target marked from them.
        line = next(x for x in md.splitlines() if x.startswith(f"| {row['name']} |"))
        inf, train = row["inference"], row["training"]
        assert f"| **{row['ratio']['inference']:.2f}** |" in line
        assert f"| **{row['ratio']['training']:.2f}** |" in line
        if ORT_OURS in inf:
            assert f"| {inf[VARIANT] / inf[ORT_OURS]:.2f} |" in line
        met = max(row["ratio"].values()) <= 1.15
        assert row["met"] == met
        assert line.endswith("| met |" if met else "| **not met** |")
        rate = row["forward_flops"][VARIANT] / train[VARIANT] * 3
        assert f" / {rate / 1e9:.1f} (" in line
    assert not any(
        "differs from ours" in n or "failed" in n for r in record["rows"] for n in r["notes"]
    )
    met = sum(r["met"] for r in record["rows"])
    assert f"is met on **{met} of {len(BY_NAME)}** rows" in md
    assert ("## Why the target is not met" in md) == (met < len(BY_NAME))
    assert record["date"] in md and "| our CPU engine |" in md


def test_an_unknown_row_names_the_known_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert variants.main(["--rows", "nope", "--out", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("benchmarks/variants.py: error: unknown row(s) nope; choose ")
    assert all(name in captured.err for name in BY_NAME)
    assert captured.err.count("\n") == 1 and captured.out == ""
    assert not (tmp_path / "benchmarks-variants.md").exists()


def test_bad_timing_options_exit_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert variants.main(["--block", "0"]) == 2
    err = capsys.readouterr().err
    assert (
        err == "benchmarks/variants.py: error: --block must be a number of seconds > 0, got 0.0.\n"
    )
