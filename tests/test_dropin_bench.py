"""benchmarks/dropin.py (the torch.nn drop-ins' section of make bench): it runs, its two models
hold the same weights and compute the same loss, and its report says what it measured."""

from __future__ import annotations

import pytest
import torch

from benchmarks import dropin
from cudnn_rnn.cli.bench import Timing


def test_the_two_models_are_the_same_model() -> None:
    pair = dropin.models(dropin.QUICK)
    tokens = torch.randint(0, dropin.QUICK.vocab, (2, 5))
    ours, theirs = pair[dropin.OURS], pair[dropin.TORCH_NN]
    assert type(ours.lstm).__module__ == "cudnn_rnn.nn.modules"
    assert type(theirs.lstm) is torch.nn.LSTM
    torch.testing.assert_close(ours(tokens), theirs(tokens), atol=1e-5, rtol=1e-5)


def test_a_quick_run_reports_every_row() -> None:
    result = dropin.run(
        dropin.QUICK, Timing(1, 0.001, 0.0), memory=False, runs=2, log=lambda _: None
    )
    assert set(result.model) == {dropin.OURS, dropin.TORCH_NN}
    labels = [row[0] for row in dropin.cell_rows(dropin.QUICK)]
    assert list(result.cells) == labels and len(labels) == 12  # 3 cells x 2 sizes x 2 kinds
    assert labels[:4] == [
        "LSTMCell B 2 H 6, forward",
        "LSTMCell B 2 H 6, forward + backward",
        "LSTMCell B 1 H 4, forward",
        "LSTMCell B 1 H 4, forward + backward",
    ]
    lines = dropin.report(result)
    assert lines[0] == "## torch.nn drop-ins (`cudnn_rnn.nn`)"
    rows = [line for line in lines if line.startswith("| ") and "---" not in line][1:]
    assert [r.split(" | ")[0] for r in rows] == ["| model training step"] + [
        f"| {label}" for label in labels
    ]
    ratio = result.model[dropin.OURS] / result.model[dropin.TORCH_NN]
    assert float(rows[0].split("**")[1]) == pytest.approx(ratio, abs=0.005)
    for label, row in zip(labels, rows[1:]):
        ratios = result.cell_ratios[label]
        assert len(ratios) == 2  # the runs
        assert float(row.split("**")[1]) == pytest.approx(result.cells[label]["ratio"], abs=0.005)
        assert result.cells[label]["low"] == min(ratios)
        assert row.split(" | ")[4] == ("<= 0.90" if label.endswith("backward") else "<= 0.80")
