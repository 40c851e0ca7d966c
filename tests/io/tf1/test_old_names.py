"""TF1 checkpoints under older releases' names: TF 1.3's saveable and TF 1.8-1.15's object graph.

Real TensorFlow (2.21) wrote the files, but tests/fixtures/tf1_old_names/make_old_name_fixtures.py
chose their names (transcribed from each release's source, as it says) and computed their values
with its own NumPy code; the npz beside each holds the exact parameters in our layout, as that
script packed them. Two checks hold the files to the releases themselves: the TF 1.3 files'
names, in order, and tensors are what TensorFlow 1.3.0's own ``RNNParamsSaveable`` makes of the
same parameters (``fixtures/tf13``, make_tf13_fixtures.py; ``test_r13_files_are_tf13s``), and
the object-graph keys are what TensorFlow 1.15.5's own ``tf.train.Checkpoint`` gives a CudnnLSTM
(``fixtures/tf115/names.json``, ``object_keys``; ``test_object_keys_are_tf115s``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from cudnn_rnn import checkpoint
from cudnn_rnn.cells import CudnnCompatibleLSTMCell, MultiRNNCell, dynamic_rnn
from cudnn_rnn.core import tf_names
from cudnn_rnn.io.tf1 import bundle as tf1_bundle
from cudnn_rnn.layers import CudnnGRU, CudnnLSTM
from tests.support.paths import FIXTURES

FIXTURES_ROOT = FIXTURES
HERE = FIXTURES / "tf1_old_names"
LAYERS = {"lstm": CudnnLSTM, "gru": CudnnGRU}
#: fixture -> (scope of the layer, exact biases in the file)
FIXTURES = {
    "lstm_r13": ("model", True),
    "gru_r13": (None, True),
    "lstm_object_1layer": (None, False),
    "lstm_object_2layer": (None, False),
}


def _layer(name: str, **kw: object) -> torch.nn.Module:
    mode, layers, units, inp = np.load(HERE / f"{name}.npz")["config"].tolist()
    return LAYERS[mode](int(layers), int(units), input_size=int(inp), **kw)


def _ckpt(name: str) -> str:
    return str(HERE / f"{name}.ckpt")


def _file(name: str) -> dict[str, np.ndarray]:
    prefix = _ckpt(name)
    index = tf1_bundle.read_bundle_index(prefix)
    floats = [n for n, e in index.items() if e.dtype.startswith("float")]
    return dict(tf1_bundle.read_bundle(prefix, names=floats))


def _run(layer: torch.nn.Module) -> torch.Tensor:
    x = torch.linspace(-1, 1, 4 * 2 * layer.input_size).reshape(4, 2, layer.input_size)
    return layer(x)[0]


@pytest.mark.parametrize("name", ["lstm_r13", "gru_r13"])
def test_r13_files_are_tf13s(name: str) -> None:
    """Every tensor of the TF 1.3 files, under its name, is what TF 1.3.0's own saveable saves
    for the same cuDNN canonical parameters (its transform run on the npz's ``ours``), bit for
    bit; the saveable's names are exactly the file's canonical names."""
    with np.load(FIXTURES_ROOT / "tf13" / f"{name}.npz") as npz:
        tf13 = {k: npz[k] for k in npz.files}
    names = tf13.pop("names").tolist()
    arrays = _file(name)
    assert sorted(n for n in arrays if "cudnn_compatible_" in n) == sorted(names)
    for key in names:
        got, want = arrays[key], tf13[f"saved/{key}"]
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), key


@pytest.mark.parametrize("name", ["lstm_object_1layer", "lstm_object_2layer"])
def test_object_keys_are_tf115s(name: str) -> None:
    """The canonical tensors' keys in the object-graph files are the ones TF 1.15.5's
    ``tf.train.Checkpoint`` gives its own CudnnLSTM in the same object graph."""
    tf115 = json.loads((FIXTURES_ROOT / "tf115" / "names.json").read_text())["object_keys"]
    index = tf1_bundle.read_bundle_index(_ckpt(name))
    mine = {n for n in index if tf_names.parse_object_key(n) is not None}
    assert sorted(mine) == tf115[name]
    assert set(index) - mine == {
        "_CHECKPOINTABLE_OBJECT_GRAPH",
        "save_counter/.ATTRIBUTES/VARIABLE_VALUE",
    }


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_old_names_restore_exactly(name: str) -> None:
    scope, exact = FIXTURES[name]
    layer = _layer(name, scope=scope)
    checkpoint.restore(_ckpt(name), layer)
    want = np.load(HERE / f"{name}.npz")["ours" if exact else "summed"]
    # every weight exactly; both biases of every gate exactly where the file has them
    np.testing.assert_array_equal(layer.opaque_kernel.detach().numpy(), want)


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_old_names_compute_what_canonical_names_compute(name: str, tmp_path: Path) -> None:
    scope, exact = FIXTURES[name]
    old = _layer(name, scope=scope)
    checkpoint.restore(_ckpt(name), old)
    # the same tensors under today's names (summed biases), through TF's own file format
    checkpoint.save(tmp_path / "canonical", old, format="tf")
    new = _layer(name, scope=scope)
    checkpoint.restore(tmp_path / "canonical", new)
    if exact:  # bW, bR against halves of their sum: one rounding apart
        torch.testing.assert_close(_run(old), _run(new), rtol=1e-6, atol=1e-6)
    else:
        assert torch.equal(old.opaque_kernel, new.opaque_kernel)
        assert torch.equal(_run(old), _run(new))


def test_r13_names_restore_into_compatible_cells() -> None:
    cells = MultiRNNCell([CudnnCompatibleLSTMCell(3) for _ in range(2)], scope="model")
    checkpoint.restore(_ckpt("lstm_r13"), cells)
    layer = _layer("lstm_r13", scope="model")
    checkpoint.restore(_ckpt("lstm_r13"), layer)
    x = torch.linspace(-1, 1, 4 * 2 * 2).reshape(4, 2, 2)
    got = dynamic_rnn(cells, x, time_major=True)[0]
    torch.testing.assert_close(got, layer(x)[0], rtol=1e-5, atol=1e-6)


def test_r13_strict_counts_aliases_as_expected() -> None:
    layer = _layer("lstm_r13", scope="model")
    with pytest.raises(checkpoint.CheckpointError) as err:
        checkpoint.restore(_ckpt("lstm_r13"), layer, strict=True)
    # the aliases and the exact biases are expected; only the user's own buffer is not
    assert err.value.problems == ["unexpected tensor 'model/cudnn_params' (shape [180])"]


def test_r13_without_exact_biases_halves_the_sums(tmp_path: Path) -> None:
    tensors = {n: a for n, a in _file("lstm_r13").items() if "bias_cudnn" not in n}
    tf1_bundle.write_bundle(tmp_path / "ckpt", tensors)
    layer = _layer("lstm_r13", scope="model")
    checkpoint.restore(tmp_path / "ckpt", layer)
    want = np.load(HERE / "lstm_r13.npz")["summed"]
    np.testing.assert_array_equal(layer.opaque_kernel.detach().numpy(), want)


def test_r13_inconsistent_exact_biases_are_refused(tmp_path: Path) -> None:
    tensors = _file("gru_r13")
    bad = "multi_rnn_cell/cell_1/cudnn_compatible_gru_cell/bias_cudnn 0"
    tensors[bad] = tensors[bad] + np.float32(0.5)
    tf1_bundle.write_bundle(tmp_path / "ckpt", tensors)
    layer = _layer("gru_r13")
    before = layer.opaque_kernel.detach().clone()
    with pytest.raises(checkpoint.CheckpointError, match="is not the summed bias"):
        checkpoint.restore(tmp_path / "ckpt", layer)
    assert torch.equal(layer.opaque_kernel, before)  # nothing was restored


def test_r13_misshapen_alias_is_reported_under_its_file_name(tmp_path: Path) -> None:
    layer = CudnnLSTM(2, 4, input_size=2, scope="model")  # 4 units; the file has 3
    with pytest.raises(checkpoint.CheckpointError, match=r"multi_rnn_cell/cell_0/.* has shape"):
        checkpoint.restore(_ckpt("lstm_r13"), layer)


def test_object_path_picks_among_several(tmp_path: Path) -> None:
    tensors = _file("lstm_object_2layer")
    twin = {n.replace("model/lstm/", "model/other/"): a + 1 for n, a in tensors.items()}
    tf1_bundle.write_bundle(tmp_path / "ckpt", {**tensors, **twin})
    layer = _layer("lstm_object_2layer")
    with pytest.raises(
        checkpoint.CheckpointError, match=r"several object-based LSTMs.*object_path"
    ):
        checkpoint.restore(tmp_path / "ckpt", layer)
    checkpoint.restore(tmp_path / "ckpt", layer, object_path="model/lstm")
    want = np.load(HERE / "lstm_object_2layer.npz")["summed"]
    np.testing.assert_array_equal(layer.opaque_kernel.detach().numpy(), want)


def test_object_path_errors(tmp_path: Path) -> None:
    layer = _layer("lstm_object_2layer")
    with pytest.raises(checkpoint.CheckpointError, match="object_path='model/nothing'"):
        checkpoint.restore(_ckpt("lstm_object_2layer"), layer, object_path="model/nothing")
    with pytest.raises(TypeError, match="object_path must be a non-empty str"):
        checkpoint.restore(_ckpt("lstm_object_2layer"), layer, object_path="")
    checkpoint.save(tmp_path / "m.safetensors", layer)
    with pytest.raises(checkpoint.CheckpointError, match="object_path= reads a TF1"):
        checkpoint.restore(tmp_path / "m.safetensors", layer, object_path="model/lstm")
    # a model of another depth or mode is not matched to the object-based keys
    with pytest.raises(checkpoint.CheckpointError, match="missing tensor"):
        checkpoint.restore(_ckpt("lstm_object_2layer"), CudnnLSTM(1, 2, input_size=3))
    with pytest.raises(checkpoint.CheckpointError, match="missing tensor"):
        checkpoint.restore(_ckpt("lstm_object_2layer"), CudnnGRU(2, 2, input_size=3))


# -- the names ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_file_names_parse_and_round_trip(name: str) -> None:
    names = [n for n in _file(name) if not n.endswith("cudnn_params")]  # floats only
    assert names
    for n in names:
        if "object" in name:
            key = tf_names.parse_object_key(n)
            assert key is not None and str(key) == n
            continue
        legacy = tf_names.parse_legacy(n)
        assert legacy is not None and str(legacy) == n and tf_names.parse(n) is None
        if legacy.variable not in tf_names.EXACT_BIAS_NAMES[legacy.cell]:
            canonical = tf_names.TFName(
                legacy.scope, legacy.layer, None, legacy.cell, legacy.variable
            )
            assert tf_names.legacy_name(canonical) == legacy


def test_legacy_names_of_what_tf13_did_not_name() -> None:
    bidi = tf_names.TFName(None, 0, tf_names.FW, tf_names.LSTM_CELL, tf_names.KERNEL)
    basic = tf_names.TFName(None, 0, None, tf_names.BASIC_RNN_CELL, tf_names.BIAS)
    assert tf_names.legacy_name(bidi) is None and tf_names.legacy_name(basic) is None
    gru = tf_names.TFName("s", 1, None, tf_names.GRU_CELL, tf_names.CANDIDATE_INPUT_BIAS)
    assert tf_names.exact_bias_names(gru) is None  # exact already
    gates = tf_names.TFName("s", 1, None, tf_names.GRU_CELL, tf_names.GATES_BIAS)
    assert tf_names.exact_bias_names(gates) == (
        "s/multi_rnn_cell/cell_1/cudnn_compatible_gru_cell/bias_cudnn 0",
        "s/multi_rnn_cell/cell_1/cudnn_compatible_gru_cell/bias_cudnn 1",
    )
    assert tf_names.object_key("a/b", 3, tf_names.BIAS, num_layers=4) == (
        "a/b/cell-3/bias/.ATTRIBUTES/VARIABLE_VALUE"
    )
    with pytest.raises(ValueError, match="kernel or bias"):
        tf_names.object_key("a", 0, tf_names.GATES_BIAS, num_layers=1)
    assert tf_names.parse_legacy("multi_rnn_cell/cell_0/basic_rnn_cell/kernel") is None
