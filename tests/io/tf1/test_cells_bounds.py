"""TF1 checkpoints of TF's standard cells: a load costs time linear in the number of cells, and
cells whose tensors are no floats are listed as not computable, for the reason load refuses them.

Checkpoints are written without TensorFlow, by our own TF1 bundle writer (the names and shapes
TF's ``MultiRNNCell`` of ``LSTMCell`` writes, as tests/fixtures/make_tf1_cell_fixtures.py
records them).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cudnn_rnn
from cudnn_rnn.cli import main
from cudnn_rnn.converters.canonical import layer_canonical
from cudnn_rnn.io.tf1 import bundle as tf1_bundle
from cudnn_rnn.io.tf1 import writer as tf1_writer
from cudnn_rnn.io.tf1.cells import TF1CellsError, find_cells, read_cells


def _multi_lstm(prefix: Path, layers: int, *, units: int = 2, inputs: int = 2) -> str:
    """A ``MultiRNNCell`` of ``layers`` ``LSTMCell(units)`` under ``rnn``, weights seeded."""
    rng = np.random.default_rng(layers)
    tensors = {}
    for k in range(layers):
        width = (inputs if k == 0 else units) + units
        scope = f"rnn/multi_rnn_cell/cell_{k}/lstm_cell"
        tensors[f"{scope}/kernel"] = rng.uniform(-0.5, 0.5, (width, 4 * units)).astype(np.float32)
        tensors[f"{scope}/bias"] = rng.uniform(-0.5, 0.5, 4 * units).astype(np.float32)
    tf1_bundle.write_bundle(prefix, tensors)
    return str(prefix)


def _cpu_seconds(prefix: str) -> float:
    start = time.process_time()
    layer = cudnn_rnn.load(prefix)
    spent = time.process_time() - start
    assert layer.num_layers > 1
    return spent


def test_loading_a_multi_rnn_cell_is_linear_in_its_layers(tmp_path: Path) -> None:
    """A MultiRNNCell of 5,000 layers loaded in 56 s (2,500: 20 s): the layout table scanned all
    its tensors once per layer. 4x the layers must cost well under 16x (quadratic) the CPU time;
    linear is about 4x. Each size is loaded twice, alternating, and its least time kept: a busy
    machine slows a run, never speeds one up. (Each file has its own input width, so that no
    load reuses a layout table another computed.)"""
    small, large = 300, 1200
    _cpu_seconds(_multi_lstm(tmp_path / "warm", 3))  # imports, first calls
    times: dict[int, list[float]] = {small: [], large: []}
    for inputs in (2, 3):
        for layers in (small, large):
            prefix = _multi_lstm(tmp_path / f"m{layers}_{inputs}", layers, inputs=inputs)
            times[layers].append(_cpu_seconds(prefix))
    ratio = min(times[large]) / min(times[small])
    assert ratio < 8, times


def test_a_loaded_deep_stack_holds_the_file_s_weights(tmp_path: Path) -> None:
    """The grouping that made the layout linear keeps every block where it belongs."""
    prefix = _multi_lstm(tmp_path / "deep", 40, units=3, inputs=2)
    layer = cudnn_rnn.load(prefix)
    _, weights, _ = layer_canonical(layer, "test")
    kernel = tf1_bundle.read_bundle(prefix)["rnn/multi_rnn_cell/cell_39/lstm_cell/kernel"]
    # Layer 39's recurrent matrix of the input gate: TF's rows after the input's, column block 0
    # (TF's order i, j, f, o; cuDNN's i, f, c, o: the input gate is first in both), transposed.
    recurrent_i = weights[39 * 8 + 4].numpy()
    np.testing.assert_array_equal(recurrent_i, kernel[3:, 0:3].T)


# -- cells whose tensors are no floats ----------------------------------------------------------

_CELL = "rnn/lstm_cell"


def _lstm_tensors(kernel_dtype: Any = np.float32) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        f"{_CELL}/kernel": rng.uniform(-2, 2, (7, 16)).astype(kernel_dtype),
        f"{_CELL}/bias": rng.uniform(-2, 2, 16).astype(np.float32),
    }


def _string_kernel(prefix: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A checkpoint whose kernel's index entry says DT_STRING (TF's enum 7), as a checkpoint of
    a string variable named like a kernel would: our writer writes no strings, so its dtype is
    swapped as it writes."""
    stored_form = tf1_writer._stored_form

    def as_string(name: str, value: object, bf16: bool) -> tuple[int, Any]:
        enum, stored = stored_form(name, value, bf16)
        return (7 if name.endswith("/kernel") else enum), stored

    with monkeypatch.context() as patch:
        patch.setattr(tf1_writer, "_stored_form", as_string)
        tf1_bundle.write_bundle(prefix, _lstm_tensors())
    return str(prefix)


def _int_kernel(prefix: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    tf1_bundle.write_bundle(prefix, _lstm_tensors(np.int32))
    return str(prefix)


_DTYPE_CASES = {
    "int32": (_int_kernel, "float32, int32"),
    "string": (_string_kernel, "float32, string"),
}
_REASON = (
    "the RNN's tensors are {}; expected one of float16, bfloat16, float32, float64, the same "
    "for all"
)


@pytest.mark.parametrize("case", sorted(_DTYPE_CASES))
def test_cells_of_tensors_that_are_no_floats_are_listed_as_not_computable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    make, dtypes = _DTYPE_CASES[case]
    prefix = make(tmp_path / "m.ckpt", monkeypatch)
    reason = _REASON.format(dtypes)
    (found,) = cudnn_rnn.find_rnns(prefix)
    assert (found.name, found.mode, found.num_units, found.input_size) == ("rnn", "lstm", 4, 3)
    assert found.computable is False and found.reasons == (reason,)
    with pytest.raises(TF1CellsError, match=r"we cannot compute it: " + reason):
        cudnn_rnn.load(prefix)
    with pytest.raises(TF1CellsError, match=reason):
        read_cells(prefix, "rnn")


def test_the_reason_needs_the_dtypes_and_mixed_floats_are_one(tmp_path: Path) -> None:
    shapes = {f"{_CELL}/kernel": (7, 16), f"{_CELL}/bias": (16,)}
    (unknown,) = find_cells(shapes, "tf1")  # no dtypes given: judged by names and shapes
    assert unknown.computable
    mixed = {f"{_CELL}/kernel": "float64", f"{_CELL}/bias": "float32"}
    (found,) = find_cells(shapes, "tf1", mixed)
    assert found.reasons == (_REASON.format("float32, float64"),)
    (same,) = find_cells(shapes, "tf1", dict.fromkeys(shapes, "bfloat16"))
    assert same.computable


def test_inspect_says_why_and_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = _int_kernel(tmp_path / "m.ckpt", monkeypatch)
    assert main(["inspect", prefix]) == 2
    captured = capsys.readouterr()
    assert _REASON.format("float32, int32") in captured.out
    assert "holds no RNN that we compute" in captured.err
    assert captured.err.count("\n") == 1
