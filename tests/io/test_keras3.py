"""Keras 3 ``.keras`` files -> RNNs as data and our layers, checked against what Keras 3 computed.

The fixtures in ``tests/fixtures/keras3/`` were written by Keras 3.15.1 (see
``make_keras3_fixtures.py`` there); each ``NAME.npz`` holds every RNN layer's input and output
as Keras computed them (``masked.npz``: on input padded after ``lengths``, masked by a Masking
layer). The reader never imports Keras; broken archives are made here with ``zipfile`` and
h5py from the fixtures' own members.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from cudnn_rnn.core.variant import Activation, Variant
from cudnn_rnn.io import files
from cudnn_rnn.io.keras.h5 import KerasH5Error
from cudnn_rnn.layers import CudnnGRU, CudnnLSTM, CudnnRNNRelu, CudnnRNNTanh, _CudnnRNN
from tests.support.paths import FIXTURES, ROOT

h5py = pytest.importorskip("h5py")

from cudnn_rnn.converters.keras_files import from_keras3  # noqa: E402
from cudnn_rnn.io.keras import keras3  # noqa: E402
from cudnn_rnn.io.keras.keras3 import Keras3Error, find_rnns, read  # noqa: E402

FIXTURES = FIXTURES / "keras3"
UNI, BI = "unidirectional", "bidirectional"
#: file -> {layer path: (our class, direction, num_units, input_size)} in the model's order.
EXPECTED: dict[str, dict[str, tuple[type[_CudnnRNN], str, int, int]]] = {
    "lstm": {"lstm": (CudnnLSTM, UNI, 4, 3)},
    "gru": {"gru": (CudnnGRU, UNI, 3, 3)},
    "bidi": {"bidirectional": (CudnnLSTM, BI, 3, 3)},
    "stack": {"lstm": (CudnnLSTM, UNI, 4, 3), "lstm_1": (CudnnLSTM, UNI, 4, 4)},
    "simple_rnn": {
        "simple_rnn": (CudnnRNNTanh, UNI, 4, 3),
        "simple_rnn_1": (CudnnRNNRelu, UNI, 3, 4),
    },
    "go_backwards": {"lstm": (CudnnLSTM, UNI, 4, 3)},
    "nested": {
        "encoder/first": (CudnnLSTM, UNI, 4, 3),
        "encoder/lstm": (CudnnLSTM, UNI, 4, 4),
        "encoder/core/gru": (CudnnGRU, UNI, 4, 4),
        "bidirectional": (CudnnGRU, BI, 3, 4),
        "head/simple_rnn": (CudnnRNNRelu, UNI, 3, 6),
    },
    "masked": {
        "lstm": (CudnnLSTM, UNI, 4, 3),
        "bidirectional": (CudnnGRU, BI, 3, 4),
        "lstm_1": (CudnnLSTM, UNI, 3, 6),
        "gru_1": (CudnnGRU, UNI, 3, 3),
    },
}
#: The go_backwards layers of the fixtures.
BACKWARDS = {("go_backwards", "lstm"), ("masked", "lstm_1")}
ATOL = 1e-6


def _run(
    layer: _CudnnRNN, x: np.ndarray, lengths: np.ndarray | None = None
) -> tuple[np.ndarray, tuple[torch.Tensor, ...]]:
    with torch.no_grad():
        lens = None if lengths is None else torch.from_numpy(lengths)
        out, state = layer(torch.from_numpy(x), time_major=False, sequence_lengths=lens)
    return out.numpy(), state


# -- listing ----------------------------------------------------------------------------------


@pytest.mark.parametrize("stem", sorted(EXPECTED))
def test_find_rnns_lists_every_rnn_with_its_sizes(stem: str) -> None:
    found = find_rnns(FIXTURES / f"{stem}.keras")
    assert [f.name for f in found] == list(EXPECTED[stem])
    for record in found:
        cls, direction, units, width = EXPECTED[stem][record.name]
        assert record.computable and record.reasons == ()
        assert record.format == keras3.KIND == "keras3"
        assert (record.mode, record.direction) == (cls._rnn_mode, direction)
        assert (record.num_layers, record.num_units, record.input_size) == (1, units, width)
        backward = (stem, record.name) in BACKWARDS
        assert record.details.get("variant") == ({"time": "go_backwards"} if backward else None)
        assert record.notes == (
            ("it computes lstm with a variant: go_backwards",) if backward else ()
        )


#: refused.keras (named when this reader refused them): what each of its layers computes.
FORMERLY_REFUSED = {
    "lstm": Variant(cell_activation=Activation("relu"), output_activation=Activation("relu")),
    "gru": Variant(reset_after=False),
    "bidirectional": Variant(merge="sum"),
}


@pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning"
)
def test_formerly_refused_layers_are_read_with_their_variants() -> None:
    """refused.keras's layers (LSTM(activation='relu'), GRU(reset_after=False),
    Bidirectional(merge_mode='sum')) compute what Keras 3 computes running the same file (where
    Keras is installed: the file has no npz of outputs)."""
    path = FIXTURES / "refused.keras"
    found = {f.name: f for f in find_rnns(path)}
    assert list(found) == list(FORMERLY_REFUSED) and all(f.computable for f in found.values())
    layers = {name: from_keras3(path, name) for name in found}
    assert {name: layer.variant for name, layer in layers.items()} == FORMERLY_REFUSED
    keras = pytest.importorskip("keras")
    model = keras.saving.load_model(path, compile=False)
    x = np.random.default_rng(0).uniform(-1, 1, (2, 5, 3)).astype("float32")
    for keras_layer in model.layers:
        want = np.asarray(keras.ops.convert_to_numpy(keras_layer(x)))
        out, _ = _run(layers[keras_layer.name], x)
        np.testing.assert_allclose(out, want, rtol=0, atol=ATOL, err_msg=keras_layer.name)
        x = want


def test_what_we_do_not_compute_is_listed_with_every_reason(tmp_path: Path) -> None:
    def edit(config: dict[str, Any]) -> None:
        layers = config["config"]["layers"]
        layers[2]["config"]["activation"] = "gelu"  # gru, after the InputLayer and the lstm
        layers[3]["config"]["merge_mode"] = None  # bidirectional

    path = _edited_config(tmp_path, "refused", edit)
    found = {f.name: f for f in find_rnns(path)}
    assert [f.computable for f in found.values()] == [True, False, False]
    assert "activation 'gelu' is no function we compute" in found["gru"].reasons[0]
    assert "merge_mode=None returns the two directions'" in found["bidirectional"].reasons[0]
    with pytest.raises(ValueError, match=r"layer 'gru' \(GRU\): activation 'gelu'") as info:
        read(path, "gru")
    assert not isinstance(info.value, files.FormatError)  # a setting, not a broken file
    assert from_keras3(path).variant == FORMERLY_REFUSED["lstm"]  # the one we compute


def test_is_keras3_by_content(tmp_path: Path) -> None:
    assert all(keras3.is_keras3(p) for p in FIXTURES.glob("*.keras"))
    renamed = tmp_path / "model.zip"
    renamed.write_bytes((FIXTURES / "lstm.keras").read_bytes())
    assert keras3.is_keras3(renamed)
    assert not keras3.is_keras3(FIXTURES / "lstm.npz")
    assert not keras3.is_keras3(FIXTURES.parent / "keras2" / "plain_model.h5")
    other = tmp_path / "other.keras"
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("config.json", "{}")
    assert not keras3.is_keras3(other)


# -- outputs: what Keras computed ---------------------------------------------------------------


CASES = [(stem, name) for stem in sorted(EXPECTED) if stem != "masked" for name in EXPECTED[stem]]


@pytest.mark.parametrize(("stem", "name"), CASES, ids=[f"{s}:{n}" for s, n in CASES])
def test_outputs_equal_keras3(stem: str, name: str) -> None:
    layer = from_keras3(FIXTURES / f"{stem}.keras", name)
    cls, direction, units, width = EXPECTED[stem][name]
    assert type(layer) is cls and layer.direction == direction
    assert (layer.num_layers, layer.num_units, layer.input_size) == (1, units, width)
    keras = np.load(FIXTURES / f"{stem}.npz")
    x, want = keras[f"{name}/input"], keras[f"{name}/output"]
    assert layer.variant.time == ("go_backwards" if (stem, name) in BACKWARDS else "forward")
    out, state = _run(layer, x)
    # A go_backwards layer's outputs come in the order Keras computed them, as ours do.
    np.testing.assert_allclose(out, want, rtol=0, atol=ATOL, err_msg=name)
    if direction == UNI:  # the final h is the last output
        np.testing.assert_allclose(state[0][0].numpy(), want[:, -1], rtol=0, atol=ATOL)
    else:  # forward half ends at the last step, backward half at the first
        np.testing.assert_allclose(state[0][0].numpy(), want[:, -1, :units], rtol=0, atol=ATOL)
        np.testing.assert_allclose(state[0][1].numpy(), want[:, 0, units:], rtol=0, atol=ATOL)


@pytest.mark.parametrize("name", list(EXPECTED["masked"]))
def test_masked_outputs_equal_keras3_with_sequence_lengths(name: str) -> None:
    """A Masking layer's padded steps are our sequence_lengths; a go_backwards layer's outputs
    come in processing order, its padded steps first (zeros), on both sides."""
    keras = np.load(FIXTURES / "masked.npz")
    lengths = keras["lengths"]
    x, want = keras[f"{name}/input"], keras[f"{name}/output"]
    layer = from_keras3(FIXTURES / "masked.keras", name)
    if ("masked", name) in BACKWARDS:
        out, state = _run(layer, x, lengths)
        np.testing.assert_allclose(out, want, rtol=0, atol=ATOL)
        for b, n in enumerate(lengths):  # Keras ran the padded steps first (masked: zeros)
            np.testing.assert_array_equal(want[b, :-n], 0.0)
        np.testing.assert_allclose(state[0][0].numpy(), want[:, -1], rtol=0, atol=ATOL)
        return
    out, state = _run(layer, x, lengths)
    for b, n in enumerate(lengths):  # Keras's padded steps repeat or zero the last output
        np.testing.assert_allclose(out[b, :n], want[b, :n], rtol=0, atol=ATOL, err_msg=name)
    if layer.direction == UNI:
        last = want[np.arange(len(lengths)), lengths - 1]
        np.testing.assert_allclose(state[0][0].numpy(), last, rtol=0, atol=ATOL)


def test_read_is_data_with_the_notes() -> None:
    data = read(FIXTURES / "go_backwards.keras", "lstm")
    assert data.notes == ("it computes lstm with a variant: go_backwards",)
    assert data.spec.variant == Variant(time="go_backwards")
    assert data.found.name == "lstm" and data.found.details["variant"] == {"time": "go_backwards"}
    assert (data.spec.mode, data.spec.num_units, data.spec.input_size) == ("lstm", 4, 3)
    assert all(t.dtype == torch.float32 for t in (*data.weights, *data.biases))
    assert read(FIXTURES / "lstm.keras", "lstm").notes == ()
    with pytest.raises(ValueError, match=r"has no RNN layer 'dense'; its RNN layers: \['lstm', "):
        read(FIXTURES / "stack.keras", "dense")


def test_canonical_tensors_are_the_file_s_in_cudnn_order() -> None:
    """Keras's GRU stacks z, r, h with bias [2, 3H] (input, recurrent); ours is r, u(=z), h."""
    with zipfile.ZipFile(FIXTURES / "gru.keras") as z:
        with h5py.File(io.BytesIO(z.read("model.weights.h5")), "r") as f:
            kernel, recurrent, bias = (f[f"layers/gru/cell/vars/{i}"][()] for i in range(3))
    data = read(FIXTURES / "gru.keras", "gru")
    z, r, h = np.split(kernel, 3, axis=1)
    np.testing.assert_array_equal(data.weights[0].numpy(), r.T)
    np.testing.assert_array_equal(data.weights[1].numpy(), z.T)
    np.testing.assert_array_equal(data.weights[2].numpy(), h.T)
    np.testing.assert_array_equal(data.weights[4].numpy(), np.split(recurrent, 3, axis=1)[0].T)
    bz, br, bh = np.split(bias[1], 3)
    np.testing.assert_array_equal(torch.cat(data.biases[3:]).numpy(), np.concatenate([br, bz, bh]))


def test_use_bias_false_gives_zero_biases() -> None:
    data = read(FIXTURES / "stack.keras", "lstm_1")
    assert all(bool((b == 0).all()) for b in data.biases)


def test_one_computable_rnn_needs_no_name() -> None:
    assert isinstance(from_keras3(FIXTURES / "gru.keras"), CudnnGRU)
    with pytest.raises(ValueError, match=r"holds 2 RNN layers .*'lstm', 'lstm_1'.*name="):
        from_keras3(FIXTURES / "stack.keras")


def test_keras_is_never_imported() -> None:
    """The reader works where Keras is not installed: importing it here fails."""
    script = (
        "import sys; sys.modules['keras'] = None; sys.modules['tensorflow'] = None\n"
        "from cudnn_rnn.converters import keras_files\n"
        f"layer = keras_files.from_keras3({str(FIXTURES / 'nested.keras')!r}, 'encoder/core/gru')\n"
        "assert layer.num_units == 4\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_snake_case_is_keras_s_naming() -> None:
    cases = {
        "LSTM": "lstm",
        "GRU": "gru",
        "SimpleRNN": "simple_rnn",
        "Bidirectional": "bidirectional",
        "InputLayer": "input_layer",
        "ConvLSTM2D": "conv_lstm2d",
        "TimeDistributed": "time_distributed",
        "MyLSTMLayer": "my_lstm_layer",
        "My_Layer": "my__layer",
    }
    assert {k: keras3.snake_case(k) for k in cases} == cases


# -- broken and hostile archives ----------------------------------------------------------------


def _members(stem: str) -> dict[str, bytes]:
    with zipfile.ZipFile(FIXTURES / f"{stem}.keras") as z:
        return {n: z.read(n) for n in z.namelist()}


def _archive(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def _edited_weights(tmp_path: Path, stem: str, edit: Any) -> Path:
    members = _members(stem)
    buffer = io.BytesIO(members["model.weights.h5"])
    with h5py.File(buffer, "r+") as f:
        edit(f)
    members["model.weights.h5"] = buffer.getvalue()
    return _archive(tmp_path / f"{stem}.keras", members)


def _edited_config(tmp_path: Path, stem: str, edit: Any) -> Path:
    members = _members(stem)
    config = json.loads(members["config.json"])
    edit(config)
    members["config.json"] = json.dumps(config).encode()
    return _archive(tmp_path / f"{stem}.keras", members)


def test_an_archive_without_its_members_is_refused(tmp_path: Path) -> None:
    members = _members("lstm")
    del members["model.weights.h5"]
    path = _archive(tmp_path / "m.keras", members)
    with pytest.raises(Keras3Error, match=r"is not a Keras 3 \.keras file: it holds .*config"):
        find_rnns(path)
    members["model.weights.npz"] = b"PK"
    with pytest.raises(Keras3Error, match=r"model\.weights\.npz, a pickle, are not read"):
        find_rnns(_archive(tmp_path / "n.keras", members))


def test_a_config_that_is_no_model_is_refused(tmp_path: Path) -> None:
    members = _members("lstm")
    members["config.json"] = b"{not json"
    with pytest.raises(Keras3Error, match=r"its config\.json is not JSON"):
        find_rnns(_archive(tmp_path / "a.keras", members))
    members["config.json"] = json.dumps({"class_name": "MyModel", "config": {}}).encode()
    with pytest.raises(Keras3Error, match=r"no Sequential or Functional model \(class 'MyModel'\)"):
        find_rnns(_archive(tmp_path / "b.keras", members))


def test_weights_named_for_another_layer_are_refused(tmp_path: Path) -> None:
    def edit(f: Any) -> None:
        f["layers/lstm/vars"].attrs["name"] = "other"

    with pytest.raises(Keras3Error, match=r"holds layer 'other' at 'layers/lstm'"):
        find_rnns(_edited_weights(tmp_path, "lstm", edit))


def test_missing_and_misshapen_weights_are_refused(tmp_path: Path) -> None:
    def drop_bias(f: Any) -> None:
        del f["layers/lstm/cell/vars/2"]

    with pytest.raises(
        Keras3Error, match=r"holds the variables \['0', '1'\], not \['0', '1', '2'\]"
    ):
        find_rnns(_edited_weights(tmp_path, "lstm", drop_bias))

    def wider(config: dict[str, Any]) -> None:
        config["config"]["layers"][1]["config"]["units"] = 5

    with pytest.raises(Keras3Error, match=r"config units \['5'\] differ from the weights' 4"):
        find_rnns(_edited_config(tmp_path, "lstm", wider))


def test_a_config_refusal_needs_no_weights(tmp_path: Path) -> None:
    def edit(f: Any) -> None:
        del f["layers/lstm/cell"]

    path = _edited_weights(tmp_path, "lstm", edit)
    with pytest.raises(Keras3Error, match=r"no variables at layers/lstm/cell/vars"):
        find_rnns(path)

    def gelu(config: dict[str, Any]) -> None:
        config["config"]["layers"][1]["config"]["activation"] = "gelu"

    members = _members("lstm")
    members["model.weights.h5"] = (tmp_path / "lstm.keras").read_bytes()  # any bytes: not HDF5
    path = _archive(tmp_path / "gelu.keras", members)
    with pytest.raises(Keras3Error, match=r"is not a readable HDF5 file"):
        find_rnns(path)
    (record,) = find_rnns(_edited_config(tmp_path, "lstm", gelu))
    assert not record.computable and "activation 'gelu'" in record.reasons[0]


def test_a_corrupt_weights_file_is_a_keras3_error(tmp_path: Path) -> None:
    members = _members("bidi")
    blob = bytearray(members["model.weights.h5"])
    blob[len(blob) // 2 :] = bytes(len(blob) - len(blob) // 2)  # the second half zeroed
    members["model.weights.h5"] = bytes(blob)
    with pytest.raises(Keras3Error) as info:
        read(_archive(tmp_path / "m.keras", members), "bidirectional")
    assert str(info.value).startswith("keras3: ")  # the format, not a private function
    assert isinstance(info.value.__cause__, KerasH5Error)


def test_a_cut_archive_is_refused_by_the_zip_reader(tmp_path: Path) -> None:
    data = (FIXTURES / "lstm.keras").read_bytes()
    path = tmp_path / "cut.keras"
    path.write_bytes(data[: len(data) - 100])
    assert not keras3.is_keras3(path)
    with pytest.raises(files.ZipError, match=r"not a readable Keras 3 \.keras file"):
        find_rnns(path)


def test_a_model_of_many_layers_is_read(tmp_path: Path) -> None:
    """Hundreds of RNN layers: their places reach the reader process whatever their number (a
    command line could not hold them), each numbered as Keras numbers them."""
    count = 800
    entry = {"units": 1, "activation": "tanh", "recurrent_activation": "sigmoid"}
    layers = [{"class_name": "LSTM", "config": {"name": f"l{i}", **entry}} for i in range(count)]
    config = {"class_name": "Sequential", "config": {"name": "many", "layers": layers}}
    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as f:
        for i in range(count):
            group = f.create_group(f"layers/lstm{f'_{i}' if i else ''}/cell/vars")
            group["0"], group["1"] = np.full((1, 4), i, "f4"), np.zeros((1, 4), "f4")
            group["2"] = np.zeros(4, "f4")
    members = {"config.json": json.dumps(config).encode(), "model.weights.h5": buffer.getvalue()}
    path = _archive(tmp_path / "many.keras", members)
    assert [f.name for f in find_rnns(path)] == [f"l{i}" for i in range(count)]
    data = read(path, f"l{count - 1}")
    assert all(bool((w == count - 1).all()) for w in data.weights[:4])  # its own place's
