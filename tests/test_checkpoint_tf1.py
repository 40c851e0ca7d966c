"""TF1 checkpoints of ``tf.contrib.cudnn_rnn`` models restore into our layers and cells; ours
load in TF.

What each fixture is evidence of (the scripts beside the fixtures say how they were made):

* ``fixtures/tf1/cudnn_*.ckpt``: real TensorFlow (2.21, ``tf.compat.v1``'s ``Saver``) wrote the
  bytes and read them back into the ``.npz`` beside each, but TF 2 has no ``tf.contrib.cudnn_rnn``:
  the names and values were chosen by ``make_tf1_fixtures.py`` (the names transcribed from TF
  1.x's source, shared/reference/tf_cudnn_rnn.md). Restoring them proves we read TF's bundle
  format as TF does, not that TF 1.x would name or compute anything so.
* ``fixtures/tf115/``: TensorFlow 1.15.5's own ``tf.contrib.cudnn_rnn`` (on a CPU, so without its
  cuDNN kernels): its compatible cells restored those checkpoints (so their variables are named
  as the files are) and ran on fixed inputs, and its saveable's format converter turned the
  files' canonical tensors into cuDNN's (what a restore gives the layer) and cuDNN canonical
  tensors into the files' form (what a save writes). Those outputs are what our layers and cells
  are compared with here.
* ``fixtures/tf115/ours_*.ckpt``: written by our ``checkpoint.save(format="tf")``, then read by
  TF 1.15 and restored into its compatible cells, which ran them; today's save must still write
  those bytes. (``fixtures/tf1/ours.ckpt``, every dtype our writer writes as TF 2.21 read it, is
  checked the same way in formats/tf1/test_bundle.py.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import cudnn_rnn
from cudnn_rnn import checkpoint
from cudnn_rnn.cells import (
    BasicRNNCell,
    BidirectionalStack,
    CudnnCompatibleGRUCell,
    CudnnCompatibleLSTMCell,
    MultiRNNCell,
    dynamic_rnn,
)
from cudnn_rnn.core.layout import layout_of
from cudnn_rnn.io.tf1 import bundle as tf1_bundle
from cudnn_rnn.layers import CudnnGRU, CudnnLSTM, CudnnRNNRelu, CudnnRNNTanh

FIXTURES = Path(__file__).parent / "fixtures" / "tf1"
TF115 = Path(__file__).parent / "fixtures" / "tf115"

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


def _tf115(name: str) -> dict[str, np.ndarray]:
    return dict(np.load(TF115 / f"{name}.npz"))


def _restored(name: str, dtype: torch.dtype = F64) -> Any:
    layer = CASES[name][0]()
    if dtype != F64:
        layer = layer.to(dtype)
    prefix = FIXTURES / f"{name}.ckpt"
    assert checkpoint.is_tf_checkpoint(prefix)
    # These fixtures' opaque_kernel holds random values, not these weights: ignore it (a
    # consistent one is restored exactly, see formats/tf1/test_opaque.py); global_step, slots:
    # ignored.
    checkpoint.restore(prefix, layer, opaque_name=False)
    return layer


@pytest.mark.parametrize("name", list(CASES))
def test_restore_reads_the_tensors_tensorflow_reads(name: str) -> None:
    """Our reading of the file equals TensorFlow's (the npz), bit for bit.

    TensorFlow wrote these bytes, but make_tf1_fixtures.py chose the names and values: this is
    evidence about the bundle format, not about what TF 1.x's layers would have saved.
    """
    layer = _restored(name)
    expected = _expected(name)
    for key, value in layer.checkpoint_entries().items():
        np.testing.assert_array_equal(value.numpy(), expected[key], err_msg=key)  # exact


@pytest.mark.parametrize("name", list(CASES))
def test_restore_gives_what_tf115s_saveable_restore_gives(name: str) -> None:
    """The cuDNN canonical tensors a restore puts in our buffer are the ones TF 1.15's saveable
    computes from the same file (its format converter, the step before its GPU op packs them):
    the gate order, the transposes, and each summed bias split in halves, exactly."""
    layer = _restored(name)
    tf = _tf115(name)
    weights, biases = layout_of(layer.spec).unpack(layer.opaque_kernel.detach())
    assert len(weights) == len([k for k in tf if k.startswith("restored_w")])
    assert len(biases) == len([k for k in tf if k.startswith("restored_b")])
    for k, w in enumerate(weights):
        assert torch.equal(w, torch.from_numpy(tf[f"restored_w{k}"]).double()), k
    for k, b in enumerate(biases):
        assert torch.equal(b, torch.from_numpy(tf[f"restored_b{k}"]).double()), k


@pytest.mark.parametrize("name", list(CASES))
def test_save_writes_what_tf115s_saveable_saves(name: str) -> None:
    """Given the same cuDNN canonical tensors (every bias distinct), our layer's checkpoint
    entries are the tensors TF 1.15's saveable saves (its format converter, the step after its
    GPU op unpacks the buffer), in float32 as TF's, bit for bit (bias sums: one float32 add)."""
    layer = _restored(name, torch.float32)
    tf = _tf115(name)
    layout = layout_of(layer.spec)
    weights = [tf[f"saved/cu_w{k}"] for k in range(len(layout.weights))]
    biases = [tf[f"saved/cu_b{k}"] for k in range(len(layout.biases))]
    with torch.no_grad():
        layer.opaque_kernel.copy_(torch.from_numpy(layout.pack(weights, biases)))
    entries = layer.checkpoint_entries()
    assert sorted(entries) == sorted(
        k[len("saved/") :] for k in tf if "/cu_" not in k and k.startswith("saved/")
    )
    for key, value in entries.items():
        assert value.dtype == torch.float32
        np.testing.assert_array_equal(value.numpy(), tf[f"saved/{key}"], err_msg=key)


#: Against TF 1.15's float32 run: float32 rounding in TF's cells over 5 steps (measured at most
#: 1.5e-6 absolute, 2.7e-7 relative, on outputs up to 5.8); a wrong gate order is off by 1e-2
#: or more (a wrong bias split changes no output: the restore test above catches it).
F32_TOL = {"rtol": 1e-5, "atol": 2e-6}
#: Against TF 1.15's float64 run (measured at most 4.5e-16).
F64_TOL = {"rtol": 0.0, "atol": 1e-12}


@pytest.mark.parametrize("name", list(CASES))
def test_layer_and_cells_give_tf115s_outputs(name: str) -> None:
    """Restored from the file, our layer and our cells (float64) give the outputs and final
    states of TF 1.15's own compatible cells restored from the same file and run on the same
    input (``fixtures/tf115``): to float64 rounding where TF's cells run in float64 (GRU, tanh,
    relu; TF's LSTMBlockCell has no float64 kernel), to float32 rounding against TF's float32
    run."""
    layer = _restored(name)
    tf = _tf115(name)
    x = torch.from_numpy(tf["inputs"])
    lengths = [int(n) for n in tf["lengths"]]
    out, state = layer(x, sequence_lengths=lengths)
    cells = CASES[name][1]()
    checkpoint.restore(FIXTURES / f"{name}.ckpt", cells)
    if isinstance(cells, BidirectionalStack):
        got = cells(x, sequence_length=torch.tensor(lengths), time_major=True)[0]
    else:
        got = dynamic_rnn(cells, x, sequence_length=torch.tensor(lengths), time_major=True)[0]
    ours = {"outputs": out, "h": state[0], "c": state[1] if len(state) > 1 else None}
    assert ("float64/outputs" in tf) == (name != "cudnn_lstm")
    for dtype, tol in (("float64", F64_TOL), ("float32", F32_TOL)):
        if f"{dtype}/outputs" not in tf:
            continue
        for key, value in ours.items():
            if value is not None:
                want = tf[f"{dtype}/{key}"]
                np.testing.assert_allclose(value.detach().numpy(), want, **tol, err_msg=key)
        np.testing.assert_allclose(got.detach().numpy(), tf[f"{dtype}/outputs"], **tol)
    # Our two paths also agree with each other to float64 rounding (the LSTM's tight check).
    np.testing.assert_allclose(got.detach().numpy(), out.detach().numpy(), atol=1e-12)


def test_a_tf1_layer_built_by_its_call_restores_under_its_own_scope(tmp_path: Path) -> None:
    """TF 1.15's layer built by its first call inside ``variable_scope("model")`` names its
    canonical tensors ``model/cudnn_lstm/rnn/...`` (fixtures/tf115/names.json, "called"): the
    loader finds that scope, and a layer given ``scope="model/cudnn_lstm"`` restores the file,
    both biases of every gate from its opaque kernel (found by size); ``scope="model"`` names
    the tensors it misses."""
    names = json.loads((TF115 / "names.json").read_text())["names"]
    built, called = names["built"]["cudnn_lstm"], names["called"]["cudnn_lstm"]
    source = _ours("cudnn_lstm")  # every bias distinct: bW != bR
    entries = source.checkpoint_entries()
    tensors = {new: entries[old].numpy() for old, new in zip(built["specs"], called["specs"])}
    (opaque,) = called["variables"]
    want = source.opaque_kernel.detach()
    tensors[opaque] = want.numpy()
    prefix = tmp_path / "called.ckpt"
    tf1_bundle.write_bundle(prefix, tensors)
    (found,) = cudnn_rnn.find_rnns(prefix)
    assert (found.name, found.mode, found.num_layers) == ("model/cudnn_lstm", "lstm", 2)
    layer = CudnnLSTM(2, 3, input_size=2, scope="model/cudnn_lstm")
    checkpoint.restore(prefix, layer)
    assert torch.equal(layer.opaque_kernel.detach(), want)
    with pytest.raises(checkpoint.CheckpointError, match=r"missing tensor 'model/rnn/multi_rnn"):
        checkpoint.restore(prefix, CudnnLSTM(2, 3, input_size=2, scope="model"))
    # ... and says where they are and what to pass.
    hint = r"under the scope 'model/cudnn_lstm' .*: build the layer with scope='model/cudnn_lstm'"
    with pytest.raises(checkpoint.CheckpointError, match=hint):
        checkpoint.restore(prefix, CudnnLSTM(2, 3, input_size=2, scope="model"))
    with pytest.raises(checkpoint.CheckpointError) as info:  # no hint where no scope holds all
        checkpoint.restore(prefix, CudnnLSTM(3, 3, input_size=2, scope="model"))
    assert not any("under the scope" in p for p in info.value.problems)


def test_strict_tf_restore_names_the_unrelated_tensors() -> None:
    layer = CASES["cudnn_lstm"][0]()
    # (This fixture's opaque kernel holds random values: see _restored.)
    with pytest.raises(checkpoint.CheckpointError, match=r"unexpected tensor 'global_step'"):
        checkpoint.restore(FIXTURES / "cudnn_lstm.ckpt", layer, strict=True, opaque_name=False)


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


def _ours(name: str) -> Any:
    """Our float32 layer configured as fixture ``name``, its buffer uniform in [-1, 1) from the
    seed make_tf115_fixtures.py used when it wrote ``fixtures/tf115/ours_<name>.ckpt``."""
    layer = CASES[name][0]().to(torch.float32)
    rng = np.random.default_rng(sum(map(ord, "ours_" + name)))
    values = rng.uniform(-1, 1, layer.opaque_kernel.numel()).astype(np.float32)
    with torch.no_grad():
        layer.opaque_kernel.copy_(torch.from_numpy(values))
    return layer


@pytest.mark.parametrize("name", list(CASES))
def test_todays_save_writes_what_tf115_read_and_ran(name: str, tmp_path: Path) -> None:
    """``checkpoint.save(format="tf")`` wrote ``fixtures/tf115/ours_<name>.ckpt`` when the
    fixture was made, and TensorFlow 1.15 read it (``read/*``) and restored its own compatible
    cells from it (a name or shape they do not find fails that restore) and ran them. Today's
    save of the same layer writes those very bytes, so TF's reading carries over to what we write
    now; our reader reads what TF read; and TF's cells computed our layer's outputs."""
    layer = _ours(name)
    prefix = tmp_path / "ours.ckpt"
    checkpoint.save(prefix, layer, format="tf")
    for suffix in (".index", ".data-00000-of-00001"):
        today = (tmp_path / f"ours.ckpt{suffix}").read_bytes()
        read_by_tf = (TF115 / f"ours_{name}.ckpt{suffix}").read_bytes()
        assert today == read_by_tf, f"{suffix}: today's save no longer writes what TF 1.15 read"
    tf = dict(np.load(TF115 / f"ours_{name}.npz"))
    read = {k.removeprefix("read/"): v for k, v in tf.items() if k.startswith("read/")}
    ours = tf1_bundle.read_bundle(prefix)
    assert sorted(ours) == sorted(read)
    for key, value in read.items():
        assert ours[key].dtype == value.dtype and ours[key].tobytes() == value.tobytes(), key
    x = torch.from_numpy(_tf115(name)["inputs"])
    lengths = [int(n) for n in _tf115(name)["lengths"]]
    out, state = layer(x.float(), sequence_lengths=lengths)
    np.testing.assert_allclose(out.detach().numpy(), tf["float32/outputs"], **F32_TOL)
    np.testing.assert_allclose(state[0].detach().numpy(), tf["float32/h"], **F32_TOL)
    if "float64/outputs" in tf:  # TF's cells in float64 on the float32 tensors of the file
        wide = CASES[name][0]()  # float64; the file's summed biases, as TF's cells have them
        checkpoint.restore(prefix, wide)
        out64 = wide(x, sequence_lengths=lengths)[0]
        np.testing.assert_allclose(out64.detach().numpy(), tf["float64/outputs"], **F64_TOL)


def test_save_format_error(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError,
        match=r"checkpoint.save: format must be 'safetensors' or 'tf1' \('tf' is its older "
        r"name\), got 'h5'\.",
    ):
        checkpoint.save(tmp_path / "x", CudnnLSTM(1, 2, input_size=2), format="h5")


def test_save_format_tf_is_tf1(tmp_path: Path) -> None:
    """One name per format: ``tf1`` (as ``--format tf1``, ``FoundRNN.format``, ``inspect``);
    ``format="tf"``, its older name, writes the same bytes."""
    layer = CudnnLSTM(1, 2, input_size=2, seed=0)
    checkpoint.save(tmp_path / "a", layer, format="tf1")
    checkpoint.save(tmp_path / "b", layer, format="tf")
    for suffix in (".index", ".data-00000-of-00001"):
        assert (tmp_path / f"a{suffix}").read_bytes() == (tmp_path / f"b{suffix}").read_bytes()
    assert [f.format for f in cudnn_rnn.find_rnns(tmp_path / "a")] == ["tf1"]
