"""TF1 checkpoints written by real TensorFlow restore into layers and cells; ours load in TF."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from cudnn_rnn import checkpoint
from cudnn_rnn.cells import (
    BasicRNNCell,
    BidirectionalStack,
    CudnnCompatibleGRUCell,
    CudnnCompatibleLSTMCell,
    MultiRNNCell,
    dynamic_rnn,
)
from cudnn_rnn.formats.tf1 import bundle as tf1_bundle
from cudnn_rnn.layers import CudnnGRU, CudnnLSTM, CudnnRNNRelu, CudnnRNNTanh

FIXTURES = Path(__file__).parent / "fixtures" / "tf1"

# (fixture, layer factory, cells factory): the configurations make_tf1_fixtures.py wrote, all
# with 3 units and input size 2.
F64 = torch.float64
CASES: dict[str, tuple[Any, Any]] = {
    "cudnn_lstm": (
        lambda: CudnnLSTM(2, 3, input_size=2, scope="model", dtype=F64),
        lambda: MultiRNNCell(
            [CudnnCompatibleLSTMCell(3, dtype=F64) for _ in range(2)], scope="model"
        ),
    ),
    "cudnn_gru_bidi": (
        lambda: CudnnGRU(1, 3, direction="bidirectional", input_size=2, dtype=F64),
        lambda: BidirectionalStack(
            [CudnnCompatibleGRUCell(3, dtype=F64)], [CudnnCompatibleGRUCell(3, dtype=F64)]
        ),
    ),
    "cudnn_rnn_tanh": (
        lambda: CudnnRNNTanh(1, 3, input_size=2, scope="model", dtype=F64),
        lambda: MultiRNNCell([BasicRNNCell(3, dtype=F64)], scope="model"),
    ),
    "cudnn_rnn_relu_bidi": (
        lambda: CudnnRNNRelu(
            2, 3, direction="bidirectional", input_size=2, scope="relu", dtype=F64
        ),
        lambda: BidirectionalStack(
            [BasicRNNCell(3, "relu", dtype=F64) for _ in range(2)],
            [BasicRNNCell(3, "relu", dtype=F64) for _ in range(2)],
            scope="relu",
        ),
    ),
}


def _expected(name: str) -> dict[str, np.ndarray]:
    return dict(np.load(FIXTURES / f"{name}.npz"))


@pytest.mark.parametrize("name", list(CASES))
def test_tf_written_checkpoint_restores_into_layer_and_cells(name: str) -> None:
    make_layer, make_cells = CASES[name]
    layer = make_layer()
    prefix = FIXTURES / f"{name}.ckpt"
    assert checkpoint.is_tf_checkpoint(prefix)
    # These fixtures' opaque_kernel holds random values, not these weights: ignore it (a
    # consistent one is restored exactly, see test_tf1_opaque.py); global_step, slots: ignored.
    checkpoint.restore(prefix, layer, opaque_name=False)
    expected = _expected(name)
    for key, value in layer.checkpoint_entries().items():
        np.testing.assert_array_equal(value.numpy(), expected[key], err_msg=key)  # exact

    cells = make_cells()
    checkpoint.restore(prefix, cells)
    x = torch.randn(5, 2, layer.input_size, dtype=torch.float64)
    want = layer(x, sequence_lengths=[5, 3])[0]
    if isinstance(cells, BidirectionalStack):
        got = cells(x, sequence_length=torch.tensor([5, 3]), time_major=True)[0]
    else:
        got = dynamic_rnn(cells, x, sequence_length=torch.tensor([5, 3]), time_major=True)[0]
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), atol=1e-12)


def test_strict_tf_restore_names_the_unrelated_tensors() -> None:
    layer = CASES["cudnn_lstm"][0]()
    with pytest.raises(checkpoint.CheckpointError, match=r"unexpected tensor 'global_step'"):
        checkpoint.restore(FIXTURES / "cudnn_lstm.ckpt", layer, strict=True)


def test_tf_restore_reports_missing_and_misshapen(tmp_path: Path) -> None:
    wrong = CudnnLSTM(3, 3, input_size=4, scope="model", dtype=torch.float64)
    before = wrong.opaque_kernel.detach().clone()
    with pytest.raises(checkpoint.CheckpointError) as info:
        checkpoint.restore(FIXTURES / "cudnn_lstm.ckpt", wrong)
    assert len(info.value.problems) == 3  # cell_0 kernel shape, cell_2 kernel and bias missing
    assert any("has shape [5, 12], expected [7, 12]" in p for p in info.value.problems)
    assert torch.equal(wrong.opaque_kernel, before)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_save_tf_format_roundtrip(tmp_path: Path, dtype: torch.dtype) -> None:
    layer = CudnnGRU(2, 3, direction="bidirectional", input_size=2, seed=0, scope="m", dtype=dtype)
    prefix = tmp_path / "ckpt"
    checkpoint.save(prefix, layer, format="tf")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.data-00000-of-00001", "ckpt.index"]
    index = tf1_bundle.read_bundle_index(prefix)
    assert set(index) == set(layer.checkpoint_entries())
    assert {e.dtype for e in index.values()} == {str(dtype).replace("torch.", "")}
    again = CudnnGRU(2, 3, direction="bidirectional", input_size=2, seed=1, scope="m", dtype=dtype)
    checkpoint.restore(prefix, again, strict=True)
    x = torch.randn(4, 2, 2).to(dtype)
    assert torch.equal(again(x)[0], layer(x)[0])


def test_our_writer_is_read_by_real_tensorflow() -> None:
    """ours.ckpt was written by write_bundle; TensorFlow's reading of it is in the JSON."""
    read_by_tf = json.loads((FIXTURES / "ours_read_by_tf.json").read_text())["tensors"]
    ours = tf1_bundle.read_bundle(FIXTURES / "ours.ckpt", bfloat16="float32")
    assert set(read_by_tf) == set(ours)
    for name, seen in read_by_tf.items():
        assert list(ours[name].shape) == seen["shape"], name
        values = np.asarray(seen["values"])
        if ours[name].dtype.kind == "c":  # JSON holds [re, im] pairs
            values = values[..., 0] + 1j * values[..., 1]
        np.testing.assert_array_equal(ours[name], values.reshape(ours[name].shape), err_msg=name)


def test_save_format_error(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError,
        match=r"checkpoint: format must be 'safetensors' or 'tf', "
        r"got 'h5'\.",
    ):
        checkpoint.save(tmp_path / "x", CudnnLSTM(1, 2, input_size=2), format="h5")
