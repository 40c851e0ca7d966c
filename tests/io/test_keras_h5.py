"""Keras 2 ``.h5`` files -> our layers, checked against the outputs Keras 2 itself computed.

The fixtures in ``tests/fixtures/keras2/`` were written by tf-keras 2.21 (see
``make_keras2_fixtures.py`` there); each ``NAME_model.npz`` holds every RNN layer's input and
output as Keras 2 computed them (for CuDNN layers: a twin of plain layers into which Keras 2
loaded the CuDNN file, its own weight conversion). Hostile and broken files are made here with
h5py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from cudnn_rnn import convert
from cudnn_rnn.cli import main
from cudnn_rnn.converters.canonical import layer_canonical
from cudnn_rnn.core.variant import Activation, Variant
from cudnn_rnn.layers import CudnnGRU, CudnnLSTM, CudnnRNNRelu, CudnnRNNTanh, _CudnnRNN
from tests.support import h5_hostile
from tests.support.keras_edits import edited_config
from tests.support.paths import FIXTURES, ROOT

h5py = pytest.importorskip("h5py")

from cudnn_rnn.converters.keras_files import from_keras_h5  # noqa: E402
from cudnn_rnn.io.keras import h5 as keras_h5  # noqa: E402
from cudnn_rnn.io.keras import h5_file  # noqa: E402
from cudnn_rnn.io.keras.h5 import KerasH5Error, describe_keras_h5, keras_h5_weights  # noqa: E402
from cudnn_rnn.io.keras.variants import Dialect  # noqa: E402

FIXTURES = FIXTURES / "keras2"
PLAIN_WEIGHTS = {
    "assume_cudnn_activations": True,
    "simple_rnn_activation": {"simple_rnn_1": "relu"},
}

Expected = dict[str, tuple[type[_CudnnRNN], str]]
UNI, BI = "unidirectional", "bidirectional"
#: {layer name: (our class, direction)} of the fixture models.
CUDNN: Expected = {"cu_dnnlstm": (CudnnLSTM, UNI), "cu_dnngru": (CudnnGRU, UNI)}
CUDNN_BIDI: Expected = {"bidirectional": (CudnnLSTM, BI), "bidirectional_1": (CudnnGRU, BI)}
PLAIN: Expected = {
    "lstm": (CudnnLSTM, UNI),
    "gru": (CudnnGRU, UNI),
    "simple_rnn": (CudnnRNNTanh, UNI),
    "simple_rnn_1": (CudnnRNNRelu, UNI),
    "bidirectional": (CudnnLSTM, BI),
    "bidirectional_1": (CudnnGRU, BI),
}
NOBIAS: Expected = {
    "lstm": (CudnnLSTM, UNI),
    "gru": (CudnnGRU, UNI),
    "simple_rnn": (CudnnRNNTanh, UNI),
}
#: file, options, the npz of Keras 2's outputs, what it holds.
CASES: list[tuple[str, dict[str, Any], str, Expected]] = [
    ("cudnn_model.h5", {}, "cudnn_model.npz", CUDNN),
    ("cudnn_weights.h5", {}, "cudnn_model.npz", CUDNN),
    ("cudnn_bidi_model.h5", {}, "cudnn_bidi_model.npz", CUDNN_BIDI),
    ("plain_model.h5", {}, "plain_model.npz", PLAIN),
    ("plain_weights.h5", PLAIN_WEIGHTS, "plain_model.npz", PLAIN),
    ("nobias_model.h5", {}, "nobias_model.npz", NOBIAS),
]


def _run(layer: _CudnnRNN, x: np.ndarray) -> tuple[np.ndarray, tuple[torch.Tensor, ...]]:
    with torch.no_grad():
        out, state = layer(torch.from_numpy(x), time_major=False)
    return out.numpy(), state


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_outputs_equal_keras2(case: tuple[str, dict[str, Any], str, Expected]) -> None:
    filename, options, npz_name, expected = case
    layers = from_keras_h5(FIXTURES / filename, **options)
    assert list(layers) == list(expected)  # the model's order; Dense layers skipped
    keras = np.load(FIXTURES / npz_name)
    for name, layer in layers.items():
        cls, direction = expected[name]
        assert type(layer) is cls and layer.direction == direction and layer.num_layers == 1
        x = keras[f"{name}/input"]
        assert layer.input_size == x.shape[-1]
        out, state = _run(layer, x)
        want = keras[f"{name}/output"]
        np.testing.assert_allclose(out, want, rtol=0, atol=2e-6, err_msg=name)
        if direction == "unidirectional":  # the final h is the last output
            np.testing.assert_allclose(state[0][0].numpy(), want[:, -1], rtol=0, atol=2e-6)
        else:  # forward half ends at the last step, backward half at the first
            h = layer.num_units
            np.testing.assert_allclose(state[0][0].numpy(), want[:, -1, :h], rtol=0, atol=2e-6)
            np.testing.assert_allclose(state[0][1].numpy(), want[:, 0, h:], rtol=0, atol=2e-6)


@pytest.mark.parametrize(
    ("model", "weights", "options"),
    [
        ("cudnn_model.h5", "cudnn_weights.h5", {}),
        ("plain_model.h5", "plain_weights.h5", PLAIN_WEIGHTS),
    ],
)
def test_weights_only_file_reads_the_same_parameters(
    model: str, weights: str, options: dict[str, Any]
) -> None:
    whole = from_keras_h5(FIXTURES / model)
    alone = from_keras_h5(FIXTURES / weights, **options)
    assert list(whole) == list(alone)
    for name in whole:
        assert type(whole[name]) is type(alone[name])
        torch.testing.assert_close(
            whole[name].opaque_kernel, alone[name].opaque_kernel, rtol=0, atol=0
        )


def test_cudnn_lstm_biases_stay_apart() -> None:
    """CuDNNLSTM's 8H bias is (bW, bR): kept as cuDNN's two biases, not summed."""
    layer = from_keras_h5(FIXTURES / "cudnn_model.h5")["cu_dnnlstm"]
    with h5py.File(FIXTURES / "cudnn_model.h5", "r") as f:
        bias = f["model_weights/cu_dnnlstm/cu_dnnlstm/bias:0"][()]
    _, _, biases = layer_canonical(layer, "test")
    np.testing.assert_array_equal(torch.cat(biases).numpy(), bias)  # i, f, c, o both halves


def test_use_bias_false_gives_zero_biases() -> None:
    for layer in from_keras_h5(FIXTURES / "nobias_model.h5").values():
        _, _, biases = layer_canonical(layer, "test")
        assert all(bool((b == 0).all()) for b in biases)


def test_registered_converter() -> None:
    assert convert.converter("keras_h5", "from").function == "from_keras_h5"
    layers = convert.from_keras_h5(FIXTURES / "cudnn_model.h5")
    assert list(layers) == ["cu_dnnlstm", "cu_dnngru"]


def test_layers_picks_some() -> None:
    layers = from_keras_h5(FIXTURES / "plain_weights.h5", layers=["gru"], **PLAIN_WEIGHTS)
    assert list(layers) == ["gru"]
    with pytest.raises(ValueError, match=r"has no RNN layer 'dense'; its RNN layers: \['lstm'"):
        from_keras_h5(FIXTURES / "plain_weights.h5", layers=["dense"], **PLAIN_WEIGHTS)


def test_describe() -> None:
    described = describe_keras_h5(FIXTURES / "cudnn_bidi_model.h5")
    assert described[0] == {
        "layer": "bidirectional",
        "keras_class": "Bidirectional(CuDNNLSTM)",
        "rnn_mode": "lstm",
        "num_units": 3,
        "input_size": 3,
        "direction": "bidirectional",
    }
    (variant,) = describe_keras_h5(FIXTURES / "hard_sigmoid_model.h5")
    assert variant["variant"] == {
        "gate_activation": {"name": "hard_sigmoid", "alpha": 0.2, "beta": 0.5}
    }
    refused = describe_keras_h5(FIXTURES / "reset_before_weights.h5")
    assert (
        refused
        == [{"layer": "gru", "refused": refused[0]["refused"], "reasons": refused[0]["reasons"]}]
        and "activations of plain GRU layers" in refused[0]["refused"]
        and refused[0]["reasons"] == (refused[0]["refused"],)
    )
    weights = keras_h5_weights(FIXTURES / "cudnn_model.h5")
    assert weights["cu_dnnlstm/bias:0"] == ((32,), "float32")
    assert weights["dense/kernel:0"] == ((3, 2), "float32")


# -- what we do not compute is refused, naming the layer and the setting ---------------------
#
# (What these readers refused before, hard_sigmoid gates, GRU(reset_after=False), other
# activations, other merge modes, go_backwards, is read as a variant: test_keras_variants.py.)


@pytest.mark.parametrize(
    ("filename", "match"),
    [
        (
            "reset_before_weights.h5",
            r"layer 'gru': a weights-only file does not record the activations of plain GRU",
        ),
        (
            "plain_weights.h5",
            r"\(1\) layers 'lstm', 'bidirectional': a weights-only file does not record the "
            r"activations of plain LSTM layers; .*assume_cudnn_activations=True.* \(2\) layers "
            r"'gru', 'bidirectional_1': .* plain GRU layers; .* \(3\) layers 'simple_rnn', "
            r"'simple_rnn_1': .* plain SimpleRNN layers",
        ),
    ],
)
def test_refusals(filename: str, match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        from_keras_h5(FIXTURES / filename)
    assert not isinstance(info.value, KerasH5Error)  # a setting, not a broken file


def _edited_config(tmp_path: Path, src: str, edit: Any) -> Path:
    return edited_config(FIXTURES / src, tmp_path, edit)


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("activation", "gelu", r"layer 'lstm' \(LSTM\): activation 'gelu' is no function we"),
        ("recurrent_activation", "relu6", r"recurrent_activation 'relu6' is no function we"),
    ],
)
def test_config_settings_refused(tmp_path: Path, key: str, value: Any, match: str) -> None:
    def edit(layers: list[dict[str, Any]]) -> None:
        layers[1]["config"][key] = value  # layers[0] is the InputLayer

    with pytest.raises(ValueError, match=match):
        from_keras_h5(_edited_config(tmp_path, "plain_model.h5", edit))


def test_simple_rnn_activation_refused(tmp_path: Path) -> None:
    def edit(layers: list[dict[str, Any]]) -> None:
        layers[3]["config"]["activation"] = "softmax"

    with pytest.raises(ValueError, match=r"layer 'simple_rnn' \(SimpleRNN\): activation 'softmax'"):
        from_keras_h5(_edited_config(tmp_path, "plain_model.h5", edit))


def test_accepted_settings(tmp_path: Path) -> None:
    """stateful, unit_forget_bias, dropout, unroll change no weight and no inference math."""

    def edit(layers: list[dict[str, Any]]) -> None:
        layers[1]["config"].update(stateful=True, unit_forget_bias=False, dropout=0.5, unroll=True)

    layers = from_keras_h5(_edited_config(tmp_path, "plain_model.h5", edit))
    keras = np.load(FIXTURES / "plain_model.npz")
    out, _ = _run(layers["lstm"], keras["lstm/input"])
    np.testing.assert_allclose(out, keras["lstm/output"], rtol=0, atol=2e-6)


def test_unsupported_rnn_class_refused(tmp_path: Path) -> None:
    def edit(layers: list[dict[str, Any]]) -> None:
        layers[1]["class_name"] = "ConvLSTM1D"

    with pytest.raises(ValueError, match=r"layer 'lstm' \(ConvLSTM1D\): ConvLSTM1D layers are not"):
        from_keras_h5(_edited_config(tmp_path, "plain_model.h5", edit))


def test_bad_options() -> None:
    with pytest.raises(ValueError, match=r"simple_rnn_activation must be 'tanh' or 'relu'.*'gelu'"):
        from_keras_h5(FIXTURES / "plain_weights.h5", simple_rnn_activation="gelu")


# -- broken and hostile files: KerasH5Error, never a crash or a hang --------------------------


def _weights_file(
    path: Path, layers: dict[str, dict[str, Any]], version: str | None = "2.21.0", **dataset: Any
) -> Path:
    """A weights-only file in Keras 2's layout: ``{layer: {weight base name: array}}``, with the
    ``keras_version`` attribute tf-keras 2.21 writes (None: none)."""
    with h5py.File(path, "w") as f:
        f.attrs["layer_names"] = np.array([n.encode() for n in layers])
        if version is not None:
            f.attrs["keras_version"] = version
        for layer, weights in layers.items():
            group = f.create_group(layer)
            names = [f"{layer}/{w}:0" for w in weights]
            group.attrs["weight_names"] = np.array([n.encode() for n in names])
            for name, value in zip(names, weights.values()):
                if isinstance(value, tuple):  # a shape: a dataset whose data was never written
                    group.create_dataset(name, shape=value, dtype="float32", **dataset)
                else:
                    group.create_dataset(name, data=value, **dataset)
    return path


def _lstm(i: int = 2, h: int = 3, bias: int = 4) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    return {
        "kernel": rng.standard_normal((i, 4 * h)).astype(np.float32),
        "recurrent_kernel": rng.standard_normal((h, 4 * h)).astype(np.float32),
        "bias": rng.standard_normal(bias * h).astype(np.float32),
    }


def test_handmade_weights_file_reads(tmp_path: Path) -> None:
    path = _weights_file(tmp_path / "w.h5", {"my_lstm": _lstm(bias=8)})
    layer = from_keras_h5(path)["my_lstm"]  # an 8H bias: a CuDNNLSTM, no flag needed
    assert isinstance(layer, CudnnLSTM) and layer.input_size == 2 and layer.num_units == 3


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda p: p.write_bytes(b"not an hdf5 file at all"), r"is not a readable HDF5 file"),
        (
            lambda p: p.write_bytes((FIXTURES / "cudnn_model.h5").read_bytes()[:3000]),
            r"is not a readable HDF5 file",
        ),
        (lambda p: h5py.File(p, "w").close(), r"no 'layer_names'"),
        (
            lambda p: _weights_file(p, {"lstm": {**_lstm(), "bias": np.zeros(5, np.float32)}}),
            r"layer 'lstm': bias \[5\] fits no Keras RNN of 4 gate\(s\) and 3 units",
        ),
        (
            lambda p: _weights_file(
                p, {"lstm": {**_lstm(), "kernel": np.zeros((2, 12), np.int32)}}
            ),
            r"'lstm/kernel:0' of layer 'lstm' has dtype int32",
        ),
        (
            lambda p: _weights_file(p, {"lstm": {"recurrent_kernel": np.zeros((3, 12))}}),
            r"weight 'lstm/recurrent_kernel:0' comes before any kernel",
        ),
        (
            lambda p: _weights_file(
                p, {"lstm": {**_lstm(), "recurrent_kernel": np.zeros((3, 10), np.float32)}}
            ),
            r"are not \[in, G\*H\] and \[H, G\*H\]",
        ),
        (
            # Shapes that claim 4 GB in a file of a few KB: refused before any read.
            lambda p: _weights_file(
                p,
                {"lstm": {"kernel": (2, 4 * 32768), "recurrent_kernel": (32768, 4 * 32768)}},
            ),
            r"its RNN weights claim \d+ bytes but the file has \d+",
        ),
    ],
    ids=["garbage", "truncated", "no-layer-names", "bias", "dtype", "order", "shape", "claims"],
)
def test_broken_files(tmp_path: Path, make: Any, match: str) -> None:
    path = tmp_path / "broken.h5"
    make(path)
    options = {"assume_cudnn_activations": True}
    with pytest.raises(KerasH5Error, match=match):
        from_keras_h5(path, **options)


def test_external_dataset_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.bin"
    outside.write_bytes(np.zeros(12, np.float32).tobytes())
    path = tmp_path / "external.h5"
    weights = _lstm(i=1, h=1, bias=8)
    _weights_file(path, {"lstm": weights})
    with h5py.File(path, "r+") as f:
        del f["lstm/lstm/kernel:0"]
        f["lstm"].create_dataset(
            "lstm/kernel:0", shape=(1, 4), dtype="float32", external=[(str(outside), 0, 16)]
        )
    with pytest.raises(KerasH5Error, match=r"stores its data outside the file"):
        from_keras_h5(path)


@pytest.mark.parametrize("kind", ["soft", "external"])
def test_links_refused(tmp_path: Path, kind: str) -> None:
    path = _weights_file(tmp_path / "links.h5", {"lstm": _lstm(bias=8)})
    with h5py.File(path, "r+") as f:
        del f["lstm/lstm/kernel:0"]
        f["lstm/lstm/kernel:0"] = (
            h5py.SoftLink("/lstm/lstm/bias:0")
            if kind == "soft"
            else h5py.ExternalLink(str(tmp_path / "elsewhere.h5"), "/kernel")
        )
    link = "SoftLink" if kind == "soft" else "ExternalLink"
    with pytest.raises(KerasH5Error, match=rf"'lstm/kernel:0' is a {link}; only objects stored"):
        from_keras_h5(path)


def test_config_disagreeing_with_weights(tmp_path: Path) -> None:
    def edit(layers: list[dict[str, Any]]) -> None:
        layers[1]["class_name"] = "CuDNNLSTM"

    with pytest.raises(KerasH5Error, match=r"layer 'lstm': its config says CuDNNLSTM but its"):
        from_keras_h5(_edited_config(tmp_path, "plain_model.h5", edit))


def test_config_not_json(tmp_path: Path) -> None:
    path = tmp_path / "m.h5"
    shutil.copy(FIXTURES / "cudnn_model.h5", path)
    with h5py.File(path, "r+") as f:
        f.attrs["model_config"] = "{not json"
    with pytest.raises(KerasH5Error, match=r"model_config is not JSON"):
        from_keras_h5(path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_refused_before_open(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.h5"
    os.mkfifo(fifo)
    with pytest.raises(KerasH5Error, match=r"FIFO"):
        from_keras_h5(fifo)  # would block forever if it were opened


def test_missing_file() -> None:
    with pytest.raises(FileNotFoundError):
        from_keras_h5(FIXTURES / "no_such_file.h5")


# -- files that make HDF5 loop, crash or raise: read in a separate process -------------------
#
# Made from the fixtures written by Keras by the corruptions of tests/support/h5_hostile.py and a
# few more found by experiment; through the old in-process reader each one hung, killed or raised
# bare.


def _corrupted(edit: Any, tmp_path: Path, name: str = "cudnn_weights.h5") -> Path:
    data = bytearray((FIXTURES / name).read_bytes())
    edit(data)
    path = tmp_path / f"corrupt_{name}"
    path.write_bytes(bytes(data))
    return path


#: Runs in a fresh interpreter: the calling process must survive, whatever HDF5 does. Its
#: arguments: a time limit and a file, for each file.
_SURVIVOR = """
import contextlib, io, json, sys
from cudnn_rnn import cli
from cudnn_rnn.io.keras import h5 as keras_h5
report = {}
for limit, path in zip(sys.argv[1::2], sys.argv[2::2]):
    keras_h5.TIME_LIMIT_BASE = float(limit)  # the CLI's limit (the file adds a few ms)
    try:
        keras_h5.read_layers(path, time_limit=float(limit))
        report[path] = {"api": ["no error", ""]}
    except Exception as err:
        report[path] = {"api": [type(err).__name__, str(err)]}
    for command in (["inspect", path], ["convert", path, path + ".pt", "--layer", "cu_dnngru"]):
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            code = cli.main(command)
        report[path][command[0]] = [code, stderr.getvalue()]
print(json.dumps(report))
"""


#: The reader process's time limit for each file. A loop is stopped at any limit, so a short
#: one keeps its three reads cheap; a crash comes as soon as the reader process gets there, so
#: the limit only has to be more than a busy machine takes to start it (over 0.5 s was seen),
#: and less than a third of the run's timeout, so that a crash turned into a loop fails the
#: test by its message.
_LIMITS = {"heap-loop": 0.5, "weight-names-segv": 30.0}


@pytest.fixture(scope="module")
def survived(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """What from_keras_h5 and the CLI did with each file, run in one child interpreter."""
    folder = tmp_path_factory.mktemp("hdf5_killers")
    paths = {
        "heap-loop": _corrupted(h5_hostile.heap_loop, folder),
        "weight-names-segv": _corrupted(h5_hostile.weight_names_segv, folder, "cudnn_model.h5"),
    }
    root = ROOT
    limits = [str(arg) for case, p in paths.items() for arg in (_LIMITS[case], p)]
    cmd = [sys.executable, "-c", _SURVIVOR, *limits]
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, f"the calling process died ({proc.returncode}):\n{proc.stderr}"
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    return {case: {"path": str(p), **report[str(p)]} for case, p in paths.items()}


@pytest.mark.parametrize(
    ("case", "match"),
    [
        (
            "heap-loop",
            r"took longer than 0\.5 s, so the reader process was stopped \(a corrupt HDF5 file "
            r"can make HDF5 loop forever\); if the file is sound .* pass a larger time_limit",
        ),
        (
            "weight-names-segv",
            r"HDF5 crashed reading it \(SIGSEGV in the reader process, which runs apart from "
            r"yours\); the file is corrupt: re-save the model with Keras",
        ),
    ],
)
def test_hdf5_loop_or_crash_stays_in_the_reader_process(
    survived: dict[str, dict[str, Any]], case: str, match: str
) -> None:
    outcome = survived[case]
    path = outcome["path"]
    kind, message = outcome["api"]
    assert kind == "KerasH5Error" and message.startswith(f"from_keras_h5: {path!r}: "), message
    assert re.search(match, message), message
    for command in ("inspect", "convert"):
        code, stderr = outcome[command]
        assert code == 2 and stderr.count("\n") == 1, (command, code, stderr)
        assert stderr.startswith("cudnn-rnn: error: from_keras_h5: ") and path in stderr
        assert re.search(match, stderr), stderr


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (
            h5_hostile.weight_names_encoding,
            r"is corrupt \(HDF5 failed on attribute 'weight_names' of '/cu_dnngru': TypeError: "
            r"Unknown string encoding \(value 2\)\); re-save the model with Keras, or use an "
            r"intact copy\.",
        ),
        (
            lambda d: d.__setitem__(d.index(b"GCOL"), ord("X")),
            r"is corrupt \(HDF5 failed on attribute 'layer_names' of '/': OSError: .*bad global "
            r"heap collection signature",
        ),
        (
            lambda d: d.__setitem__(d.index(b"SNOD") + 1, 0),
            r"is corrupt \(HDF5 failed on object '/\w+': RuntimeError: .*bad symbol table node "
            r"signature",
        ),
        (
            # The class byte of a dataset's layout message, before its data's address.
            lambda d: d.__setitem__(d.index(struct.pack("<Q", _data_offset())) - 1, 52),
            r"is corrupt \(HDF5 failed on object '/cu_dnngru/cu_dnngru/bias:0': KeyError: "
            r".*Invalid layout class",
        ),
        (
            # h5py gives bytes that are not UTF-8 as surrogates, which no name lookup takes.
            lambda d: d.__setitem__(d.index(b"cu_dnnlstm/kernel:0"), 0xFF),
            r"layer 'cu_dnnlstm''s 'weight_names' is not UTF-8 text\.",
        ),
    ],
    ids=["TypeError-encoding", "OSError", "RuntimeError", "KeyError", "UnicodeEncodeError"],
)
def test_hdf5_errors_become_keras_h5_errors(tmp_path: Path, edit: Any, match: str) -> None:
    path = _corrupted(edit, tmp_path)
    with pytest.raises(
        KerasH5Error, match=rf"^from_keras_h5: {re.escape(repr(str(path)))}.*{match}"
    ):
        from_keras_h5(path)
    with pytest.raises(KerasH5Error, match=match):
        describe_keras_h5(path)


def _data_offset() -> int:
    """Where the values of cu_dnngru's bias start in the (intact, trusted) fixture."""
    with h5py.File(FIXTURES / "cudnn_weights.h5", "r") as f:
        return int(f["cu_dnngru/cu_dnngru/bias:0"].id.get_offset())


@pytest.mark.parametrize(("bias", "dtype"), [(8, ">f4"), (4, ">f8")], ids=["CuDNNLSTM", "LSTM"])
def test_big_endian_weights_read_as_keras_reads_them(tmp_path: Path, bias: int, dtype: str) -> None:
    """HDF5 stores a dataset in either byte order; Keras's loader gets the values."""
    weights = {k: v.astype(dtype[1:]) for k, v in _lstm(bias=bias).items()}
    little = _weights_file(tmp_path / "little.h5", {"lstm": weights})
    big = _weights_file(
        tmp_path / "big.h5", {"lstm": {k: v.astype(dtype) for k, v in weights.items()}}
    )
    with h5py.File(big, "r") as f:
        assert f["lstm/lstm/kernel:0"].dtype == np.dtype(dtype)  # really big-endian on disk
    want = from_keras_h5(little, assume_cudnn_activations=True)["lstm"]
    got = from_keras_h5(big, assume_cudnn_activations=True)["lstm"]
    assert got.opaque_kernel.dtype == want.opaque_kernel.dtype
    torch.testing.assert_close(got.opaque_kernel, want.opaque_kernel, rtol=0, atol=0)
    x = torch.linspace(-1, 1, 5 * 2 * 2, dtype=want.opaque_kernel.dtype).reshape(5, 2, 2)
    with torch.no_grad():
        torch.testing.assert_close(got(x)[0], want(x)[0], rtol=0, atol=0)
    native = np.dtype(dtype[1:]).name
    assert keras_h5_weights(big)["lstm/kernel:0"] == ((2, 12), native)


def test_time_limit_checked() -> None:
    path = FIXTURES / "cudnn_model.h5"
    with pytest.raises(TypeError, match=r"time_limit must be a number of seconds or None, got str"):
        from_keras_h5(path, time_limit="10")  # type: ignore[arg-type]
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"time_limit must be a positive, finite number"):
            describe_keras_h5(path, time_limit=bad)
    assert list(from_keras_h5(path, time_limit=60)) == ["cu_dnnlstm", "cu_dnngru"]


def test_reader_process_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader process that exits with an error (here: its module is missing) is reported."""
    monkeypatch.setattr(h5_file, "_CHILD", "cudnn_rnn.io.no_such_reader")
    with pytest.raises(
        KerasH5Error,
        match=r"cudnn_model.h5': the reader process failed \(exit status 1: ImportError: No "
        r"module named cudnn_rnn.io.no_such_reader\)",
    ):
        keras_h5_weights(FIXTURES / "cudnn_model.h5")


@pytest.mark.parametrize(
    ("blob", "match"),
    [
        (b"\x05\0\0\0\0\0\0\0{bad}", r"malformed result \(JSONDecodeError: "),
        (b"\xff\0\0\0\0\0\0\0{}", r"malformed result \(ValueError: 10 bytes, a document of 255\)"),
        (b"\x02\0\0\0\0\0\0\0{}", r"malformed result \(KeyError: 'nodes'\)"),
    ],
)
def test_malformed_reader_output_refused(blob: bytes, match: str) -> None:
    with pytest.raises(
        KerasH5Error, match=rf"^from_keras_h5: 'x.h5': the reader process sent a {match}"
    ):
        h5_file._parse(bytearray(blob), "from_keras_h5: 'x.h5'")


# -- the command ------------------------------------------------------------------------------


def test_cli_inspect(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(FIXTURES / "cudnn_bidi_model.h5")]) == 0
    out = capsys.readouterr().out
    assert "keras_h5 file, 12 tensor(s)" in out
    assert "bidirectional/forward_cu_dnnlstm/bias:0" in out
    assert (
        "  'bidirectional_1': gru bidirectional (num_layers=1, num_units=2, input_size=6) at Keras "
        "layer 'bidirectional_1' (Bidirectional(CuDNNGRU))"
    ) in out


def test_cli_convert_one_layer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = str(FIXTURES / "cudnn_model.h5")
    assert main(["convert", src, str(tmp_path / "x.pt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and src in err
    assert re.search(r"holds 2 RNN.*\('cu_dnnlstm', 'cu_dnngru'\); pick one with --model NAME", err)
    assert main(["convert", src, str(tmp_path / "gru.pt"), "--layer", "cu_dnngru"]) == 0
    gru = torch.nn.GRU(4, 3, batch_first=True)
    gru.load_state_dict(torch.load(tmp_path / "gru.pt", weights_only=True))
    keras = np.load(FIXTURES / "cudnn_model.npz")
    with torch.no_grad():
        out, _ = gru(torch.from_numpy(keras["cu_dnngru/input"]))
    np.testing.assert_allclose(out.numpy(), keras["cu_dnngru/output"], rtol=0, atol=2e-6)


def test_cli_weights_only_needs_the_activation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = str(FIXTURES / "plain_weights.h5")
    dst = str(tmp_path / "r.safetensors")
    assert main(["convert", src, dst, "--layer", "simple_rnn_1"]) == 2
    assert "assume_cudnn_activations=True (cudnn-rnn: --activation" in capsys.readouterr().err
    assert main(["convert", src, dst, "--layer", "simple_rnn_1", "--activation", "relu"]) == 0
    assert "CudnnRNNRelu" in capsys.readouterr().out


@pytest.mark.parametrize("cut", [0, 100, 5000])
def test_cli_truncated_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], cut: int) -> None:
    path = tmp_path / "cut.h5"
    path.write_bytes((FIXTURES / "cudnn_model.h5").read_bytes()[:cut])
    for args in (["inspect", str(path)], ["convert", str(path), str(tmp_path / "o.pt")]):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert err.startswith("cudnn-rnn: error: ") and err.count("\n") == 1 and str(path) in err


# -- nested models: a model inside a model ---------------------------------------------------

#: nested_model.h5's RNN layers: {name: (our class, direction)}; in the weights-only file a
#: layer is named by its top-level group and its own name (the file records no level between).
NESTED: Expected = {
    "encoder/lstm": (CudnnLSTM, UNI),
    "encoder/lstm_1": (CudnnLSTM, UNI),
    "encoder/core/gru": (CudnnGRU, UNI),
    "bidirectional": (CudnnLSTM, BI),
    "head/simple_rnn": (CudnnRNNRelu, UNI),
}
NESTED_WEIGHTS_NAMES = {"encoder/gru": "encoder/core/gru"}


def _check_against_keras(layers: dict[str, _CudnnRNN], keras: Any, name: str) -> None:
    """A layer's output and final state against Keras 2's output for the same input."""
    layer = layers[name]
    out, state = _run(layer, keras[f"{name}/input"])
    want = keras[f"{name}/output"]
    np.testing.assert_allclose(out, want, rtol=0, atol=2e-6, err_msg=name)
    h = layer.num_units
    np.testing.assert_allclose(state[0][-layer.num_dirs].numpy(), want[:, -1, :h], atol=2e-6)


@pytest.mark.parametrize(
    ("filename", "options", "names"),
    [
        ("nested_model.h5", {}, {}),
        (
            "nested_weights.h5",
            {
                "assume_cudnn_activations": True,
                "simple_rnn_activation": {"head/simple_rnn": "relu"},
            },
            NESTED_WEIGHTS_NAMES,
        ),
    ],
)
def test_nested_models_equal_keras2(
    filename: str, options: dict[str, Any], names: dict[str, str]
) -> None:
    """Layers of models inside a model are found, named by their path, and compute what Keras
    computed for them inside the whole model."""
    layers = from_keras_h5(FIXTURES / filename, **options)
    layers = {names.get(name, name): layer for name, layer in layers.items()}
    assert list(layers) == list(NESTED)
    keras = np.load(FIXTURES / "nested_model.npz")
    for name, (cls, direction) in NESTED.items():
        assert type(layers[name]) is cls and layers[name].direction == direction
        _check_against_keras(layers, keras, name)


def test_nested_describe_and_pick() -> None:
    described = describe_keras_h5(FIXTURES / "nested_model.h5")
    assert [d["layer"] for d in described] == list(NESTED)
    assert described[2] == {
        "layer": "encoder/core/gru",
        "keras_class": "GRU",
        "rnn_mode": "gru",
        "num_units": 4,
        "input_size": 4,
        "direction": "unidirectional",
    }
    picked = from_keras_h5(FIXTURES / "nested_model.h5", layers=["encoder/core/gru"])
    assert list(picked) == ["encoder/core/gru"]
    with pytest.raises(ValueError, match=r"has no RNN layer 'gru'; its RNN layers: \['encoder/"):
        from_keras_h5(FIXTURES / "nested_model.h5", layers=["gru"])


def test_cli_nested(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = str(FIXTURES / "nested_model.h5")
    assert main(["inspect", src]) == 0
    out = capsys.readouterr().out
    assert "encoder/lstm_1/lstm_cell/kernel:0" in out  # the weights, under the outer group
    assert "found 5 RNN(s), 5 computable" in out
    assert (
        "  'encoder/core/gru': gru unidirectional (num_layers=1, num_units=4, input_size=4) at "
        "Keras layer 'encoder/core/gru' (GRU)"
    ) in out
    assert (
        "  'head/simple_rnn': rnn_relu unidirectional (num_layers=1, num_units=2, input_size=4) at "
        "Keras layer 'head/simple_rnn' (SimpleRNN)"
    ) in out
    dst = tmp_path / "gru.pt"
    assert main(["convert", src, str(dst), "--layer", "encoder/core/gru"]) == 0
    gru = torch.nn.GRU(4, 4, batch_first=True)
    gru.load_state_dict(torch.load(dst, weights_only=True))
    keras = np.load(FIXTURES / "nested_model.npz")
    with torch.no_grad():
        out_gru, _ = gru(torch.from_numpy(keras["encoder/core/gru/input"]))
    np.testing.assert_allclose(out_gru.numpy(), keras["encoder/core/gru/output"], atol=2e-6)


def test_nested_config_settings_refused(tmp_path: Path) -> None:
    """A nested layer is judged by its config like any other, and named by its path."""

    def edit(layers: list[dict[str, Any]]) -> None:
        encoder = layers[1]["config"]["layers"]
        core = encoder[3]["config"]["layers"]  # InputLayer, lstm, lstm_1, core, dense
        core[1]["config"]["activation"] = "gelu"

    with pytest.raises(ValueError, match=r"layer 'encoder/core/gru' \(GRU\): activation 'gelu'"):
        from_keras_h5(_edited_config(tmp_path, "nested_model.h5", edit))


def test_nested_layers_with_one_name_refused(tmp_path: Path) -> None:
    """Two layers of one nested group with one name: their weights cannot be told apart."""

    def edit(layers: list[dict[str, Any]]) -> None:
        layers[1]["config"]["layers"][3]["config"]["layers"][1]["config"]["name"] = "lstm"

    with pytest.raises(
        KerasH5Error,
        match=r"layer 'encoder/lstm' \(LSTM\): another layer inside 'encoder' is also named "
        r"'lstm'.* rename one in Keras",
    ):
        from_keras_h5(_edited_config(tmp_path, "nested_model.h5", edit))


def _named_weights_file(path: Path, groups: dict[str, dict[str, np.ndarray]]) -> Path:
    """A weights-only file whose weight names are given whole: ``{group: {name: array}}``."""
    with h5py.File(path, "w") as f:
        f.attrs["layer_names"] = np.array([n.encode() for n in groups])
        f.attrs["keras_version"] = "2.21.0"
        for layer, weights in groups.items():
            group = f.create_group(layer)
            group.attrs["weight_names"] = np.array([f"{n}:0".encode() for n in weights])
            for name, value in weights.items():
                group.create_dataset(f"{name}:0", data=value)
    return path


def _lstm_weights(prefix: str, seed: int, i: int = 4, h: int = 4) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = {"kernel": (i, 4 * h), "recurrent_kernel": (h, 4 * h), "bias": (4 * h,)}
    return {f"{prefix}/{k}": rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}


@pytest.mark.parametrize(
    ("scopes", "want"),
    [
        # tf-keras 2: each nested layer's weights start with its own name.
        (("lstm/lstm_cell", "lstm_1/lstm_cell"), ["encoder/lstm", "encoder/lstm_1"]),
        # graph-mode Keras scoped them under the nested model's name first.
        (("encoder/lstm_1", "encoder/lstm_2"), ["encoder/lstm_1", "encoder/lstm_2"]),
    ],
)
def test_weights_only_nested_model_is_not_a_bidirectional(
    tmp_path: Path, scopes: tuple[str, str], want: list[str]
) -> None:
    """Two LSTMs of a nested model (4 -> 4 -> 4: equal shapes) under one group are two layers,
    not one Bidirectional's two directions."""
    weights = {**_lstm_weights(scopes[0], 1), **_lstm_weights(scopes[1], 2)}
    path = _named_weights_file(tmp_path / "nested.h5", {"encoder": weights})
    layers = from_keras_h5(path, assume_cudnn_activations=True)
    assert list(layers) == want
    assert all(layer.direction == UNI for layer in layers.values())
    _, matrices, biases = layer_canonical(layers[want[1]], "test")  # the second one's own
    np.testing.assert_array_equal(matrices[0].numpy(), weights[f"{scopes[1]}/kernel"][:, :4].T)
    np.testing.assert_array_equal(torch.cat(biases[:4]).numpy(), weights[f"{scopes[1]}/bias"])


def test_weights_only_bidirectional_stays_one_layer(tmp_path: Path) -> None:
    weights = {
        **_lstm_weights("bi/forward_lstm/lstm_cell", 1),
        **_lstm_weights("bi/backward_lstm/lstm_cell", 2),
    }
    path = _named_weights_file(tmp_path / "bi.h5", {"bi": weights})
    layers = from_keras_h5(path, assume_cudnn_activations=True)
    assert list(layers) == ["bi"] and layers["bi"].direction == BI


# -- weights-only files of Keras before 2.3: hard_sigmoid was the default ---------------------

OLD = {"assume_cudnn_activations": True, "confirm_keras_version": "2.2.4"}
HARD2 = Variant(gate_activation=Activation("hard_sigmoid", 0.2, 0.5))


def _default_note(version: str) -> str:
    return (
        rf"^recurrent_activation hard_sigmoid\(0\.2, 0\.5\), Keras's default before 2\.3: "
        rf"this weights-only file's keras_version is {re.escape(repr(version))}, and the file "
        r"does not record the activation; if the layers were built with "
        rf"recurrent_activation='sigmoid', pass confirm_keras_version={re.escape(repr(version))}\.$"
    )


def test_old_keras_version_computes_its_default_hard_sigmoid() -> None:
    """Keras 2.2 wrote keras_version '2.2.4' and its LSTM and GRU defaulted to hard_sigmoid, as
    the layers of old_keras_hard_sigmoid_weights.h5 computed: read with Keras's defaults
    (assume_cudnn_activations), they compute it, and their records say so."""
    path = FIXTURES / "old_keras_hard_sigmoid_weights.h5"
    layers = from_keras_h5(path, assume_cudnn_activations=True)
    keras = np.load(FIXTURES / "old_keras_hard_sigmoid_weights.npz")
    for name in layers:
        assert layers[name].variant == HARD2
        _check_against_keras(layers, keras, name)
    for found in keras_h5.find_rnns(path, assume_cudnn_activations=True):
        assert re.match(_default_note("2.2.4"), found.notes[1]), found.notes


def test_old_keras_version_confirmed_equals_keras2() -> None:
    """old_keras_weights.h5's layers were built with recurrent_activation='sigmoid' in Keras
    2.2: confirm_keras_version says so (and the default is no longer assumed)."""
    layers = from_keras_h5(FIXTURES / "old_keras_weights.h5", **OLD)
    keras = np.load(FIXTURES / "old_keras_weights.npz")
    assert list(layers) == ["lstm", "gru", "bidirectional", "simple_rnn"]
    for name in layers:
        assert layers[name].variant.is_cudnn
        _check_against_keras(layers, keras, name)
    found = keras_h5.find_rnns(FIXTURES / "old_keras_weights.h5", **OLD)
    assert all(f.notes == () for f in found)


def test_old_keras_default_is_noted_where_it_is_wrong() -> None:
    """Without the confirmation, the same file's LSTM and GRU layers take Keras 2.2's default:
    far from what Keras computed (they were built with sigmoid), and each record's note is the
    one thing that says how to tell; a SimpleRNN has no recurrent activation."""
    path = FIXTURES / "old_keras_weights.h5"
    layers = from_keras_h5(path, assume_cudnn_activations=True)
    keras = np.load(FIXTURES / "old_keras_weights.npz")
    for name in ("lstm", "gru", "bidirectional"):  # 500 times the tolerance of a right read
        assert layers[name].variant == HARD2
        out, _ = _run(layers[name], keras[f"{name}/input"])
        assert np.abs(out - keras[f"{name}/output"]).max() > 1e-3, name
    found = {f.name: f for f in keras_h5.find_rnns(path, assume_cudnn_activations=True)}
    assert [bool(f.notes) for f in found.values()] == [True, True, True, False]
    assert re.match(_default_note("2.2.4"), found["gru"].notes[1])


def test_old_keras_version_not_assumed_lists_every_layer() -> None:
    with pytest.raises(
        ValueError,
        match=r"3 problems in 4 RNN layers: \(1\) layers 'lstm', 'bidirectional': a weights-only "
        r"file does not record the activations of plain LSTM layers; if they used Keras's "
        r"defaults \(activation='tanh' and recurrent_activation='sigmoid' \('hard_sigmoid' before "
        r"Keras 2\.3, as the file's keras_version says\)\).* \(2\) layer 'gru': .*plain "
        r"GRU layers.* \(3\) layer 'simple_rnn': .*plain SimpleRNN layers",
    ):
        from_keras_h5(FIXTURES / "old_keras_weights.h5")


def _with_version(tmp_path: Path, src: str, version: Any) -> Path:
    path = tmp_path / src
    shutil.copy(FIXTURES / src, path)
    with h5py.File(path, "r+") as f:
        for group in (f, f.get("model_weights")):
            if group is not None:
                if version is None:
                    group.attrs.pop("keras_version", None)
                else:
                    group.attrs["keras_version"] = version
    return path


@pytest.mark.parametrize(
    ("version", "old"),
    [
        ("2.2.4", True),
        ("2.2.5", True),
        ("2.2.4-tf", True),  # TF 1.13-1.15 (hard_sigmoid), also TF 2.0/2.1 (sigmoid): unknowable
        ("2.1.6-tf", True),
        ("2.0.8", True),
        ("1.2.2", True),
        ("unknown", True),
        ("2", True),
        ("x.y", True),
        ("2.3.0", False),
        ("2.3.0-tf", False),
        ("2.4.0", False),
        ("2.21.0", False),
        ("3.8.0", False),
    ],
)
def test_which_versions_are_old(version: str, old: bool) -> None:
    assert Dialect(version).predates_sigmoid is old


def test_old_version_as_str_attribute(tmp_path: Path) -> None:
    """tf.keras wrote keras_version as str ('2.2.4-tf'), Keras 2.2 as bytes: both are read."""
    path = _with_version(tmp_path, "plain_weights.h5", "2.2.4-tf")
    found = {f.name: f for f in keras_h5.find_rnns(path, **PLAIN_WEIGHTS)}
    assert re.match(_default_note("2.2.4-tf"), found["lstm"].notes[1])
    assert from_keras_h5(path, **PLAIN_WEIGHTS)["lstm"].variant == HARD2
    confirmed = {**PLAIN_WEIGHTS, "confirm_keras_version": "2.2.4-tf"}
    assert list(from_keras_h5(path, **confirmed)) == list(PLAIN)
    assert from_keras_h5(path, **confirmed)["lstm"].variant.is_cudnn
    path = _with_version(tmp_path, "plain_weights.h5", "2.3.0-tf")  # TF 2.2: sigmoid
    assert all(layer.variant.is_cudnn for layer in from_keras_h5(path, **PLAIN_WEIGHTS).values())


def test_no_keras_version_is_unknown(tmp_path: Path) -> None:
    path = _with_version(tmp_path, "plain_weights.h5", None)
    (found, *_) = keras_h5.find_rnns(path, **PLAIN_WEIGHTS)
    assert re.search(
        r"this weights-only file has no keras_version attribute \(Keras's own loader then "
        r"takes it for a Keras 1 file\).* confirm_keras_version='unknown'",
        found.notes[1],
    )
    confirmed = {**PLAIN_WEIGHTS, "confirm_keras_version": "unknown"}
    assert list(from_keras_h5(path, **confirmed)) == list(PLAIN)


@pytest.mark.parametrize(("src", "options"), [("plain_model.h5", {}), ("cudnn_weights.h5", {})])
def test_old_version_with_config_or_cudnn_layers_accepted(
    tmp_path: Path, src: str, options: dict[str, Any]
) -> None:
    """A whole-model file is judged by its config; a CuDNN layer has no activation to choose."""
    path = _with_version(tmp_path, src, np.bytes_(b"2.2.4"))
    layers = from_keras_h5(path, **options)
    keras = np.load(FIXTURES / src.replace("_weights", "_model").replace(".h5", ".npz"))
    for name in layers:
        _check_against_keras(layers, keras, name)


def test_confirm_keras_version_checked(tmp_path: Path) -> None:
    path = FIXTURES / "old_keras_weights.h5"
    with pytest.raises(
        ValueError,
        match=r"confirm_keras_version='2\.2\.5', but the file's keras_version is '2\.2\.4': "
        r"confirm the version the file records",
    ):
        from_keras_h5(path, assume_cudnn_activations=True, confirm_keras_version="2.2.5")
    with pytest.raises(
        ValueError,
        match=r"confirm_keras_version='2\.2\.4' confirms assume_cudnn_activations=True .*pass both",
    ):
        describe_keras_h5(path, confirm_keras_version="2.2.4")
    with pytest.raises(TypeError, match=r"confirm_keras_version must be the file's keras_version"):
        from_keras_h5(path, assume_cudnn_activations=True, confirm_keras_version=2.2)  # type: ignore[arg-type]


# -- every problem of every layer in one error ------------------------------------------------


def test_every_setting_of_a_layer_listed(tmp_path: Path) -> None:
    def edit(layers: list[dict[str, Any]]) -> None:
        layers[1]["config"].update(
            activation="gelu", recurrent_activation="hard_silu", go_backwards=True
        )

    with pytest.raises(
        ValueError,
        match=r"2 problems in 1 RNN layer: \(1\) layer 'lstm' \(LSTM\): activation 'gelu' is no "
        r"function we compute.* \(2\) layer 'lstm' \(LSTM\): recurrent_activation 'hard_silu' "
        r"is no function we compute .*; retrain with one of them\.$",
    ) as info:
        from_keras_h5(_edited_config(tmp_path, "plain_model.h5", edit))
    assert "go_backwards" not in str(info.value)  # a variant we compute: not a problem


def test_every_refused_layer_listed(tmp_path: Path) -> None:
    def edit(layers: list[dict[str, Any]]) -> None:
        layers[2]["config"]["activation"] = "gelu"  # gru
        bidi = layers[5]["config"]  # Bidirectional(LSTM)
        bidi["merge_mode"] = None
        bidi["layer"]["config"]["recurrent_activation"] = "softmax"

    path = _edited_config(tmp_path, "plain_model.h5", edit)
    with pytest.raises(
        ValueError,
        match=r"3 problems in 2 RNN layers: \(1\) layer 'gru' \(GRU\): activation 'gelu' .* "
        r"\(2\) layer 'bidirectional' \(Bidirectional\(LSTM\)\): recurrent_activation "
        r"'softmax' .* \(3\) layer 'bidirectional' \(Bidirectional\(LSTM\)\): merge_mode=None",
    ):
        from_keras_h5(path)
    described = {d["layer"]: d for d in describe_keras_h5(path)}
    assert "merge_mode=None" in described["bidirectional"]["refused"]
    assert "recurrent_activation 'softmax'" in described["bidirectional"]["refused"]
    assert list(from_keras_h5(path, layers=["lstm", "simple_rnn"])) == ["lstm", "simple_rnn"]


def test_backward_layer_settings_named(tmp_path: Path) -> None:
    def edit(layers: list[dict[str, Any]]) -> None:
        bidi = layers[5]["config"]
        backward = json.loads(json.dumps(bidi["layer"]))
        backward["config"].update(go_backwards=False, activation="relu")
        bidi["backward_layer"] = backward

    with pytest.raises(
        ValueError,
        match=r"\(1\) layer 'bidirectional' \(Bidirectional\(LSTM\)\): backward layer: "
        r"go_backwards=False in the backward layer .* \(2\) layer 'bidirectional' "
        r"\(Bidirectional\(LSTM\)\): its two directions compute different math \(lstm; lstm "
        r"with candidate relu, output relu\); a bidirectional RNN of ours runs one mode and "
        r"variant both ways\.$",
    ):
        from_keras_h5(_edited_config(tmp_path, "plain_model.h5", edit))


# -- go_backwards=True outside Bidirectional: time="go_backwards" -----------------------------


def test_go_backwards_layer_is_listed_with_its_sizes_and_variant() -> None:
    (found,) = keras_h5.find_rnns(FIXTURES / "go_backwards_model.h5")
    assert (found.name, found.mode, found.direction, found.computable) == (
        "lstm_2", "lstm", "unidirectional", True,
    )  # fmt: skip
    assert (found.num_layers, found.num_units, found.input_size) == (1, 3, 3)
    assert found.details["variant"] == {"time": "go_backwards"}
    assert found.notes == ("it computes lstm with a variant: go_backwards",)
    data = keras_h5.read(FIXTURES / "go_backwards_model.h5", "lstm_2")
    assert data.notes == found.notes and data.found == found
    assert (data.spec.mode, data.spec.num_units, data.spec.input_size) == ("lstm", 3, 3)
    assert data.spec.variant == Variant(time="go_backwards")


def test_go_backwards_layer_computes_what_keras_computed() -> None:
    """Keras reverses the input in time and returns the outputs in the order it computed them;
    so does our layer, called on the input as it is (go_backwards_model.npz: Keras 3 running
    the file's weights, see make_keras3_fixtures.py)."""
    (layer,) = from_keras_h5(FIXTURES / "go_backwards_model.h5", layers=["lstm_2"]).values()
    keras = np.load(FIXTURES / "go_backwards_model.npz")
    x, want = keras["input"], keras["lstm_2/output"]
    out, (h, _) = _run(layer, x)
    np.testing.assert_allclose(out, want, rtol=0, atol=1e-5)
    np.testing.assert_allclose(h[0].numpy(), want[:, -1], rtol=0, atol=1e-5)
    # With padding: sequence_lengths; Keras's padded steps came first (zeros), as ours do.
    x, lengths, want = (keras[f"masked/{k}"] for k in ("input", "lengths", "lstm_2/output"))
    with torch.no_grad():
        y, (h, _) = layer(
            torch.from_numpy(x), time_major=False, sequence_lengths=torch.from_numpy(lengths)
        )
    np.testing.assert_allclose(y.numpy(), want, rtol=0, atol=1e-5)
    for b, n in enumerate(lengths):
        np.testing.assert_array_equal(want[b, :-n], 0.0)
    np.testing.assert_allclose(h[0].numpy(), want[:, -1], rtol=0, atol=1e-5)


def test_go_backwards_layer_loads_by_the_one_loader_and_the_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import cudnn_rnn
    from cudnn_rnn.converters.loader import load_layer

    path = FIXTURES / "go_backwards_model.h5"
    direct = from_keras_h5(path)["lstm_2"]
    for layer in (cudnn_rnn.load(path), load_layer(str(path), model="lstm_2")):
        assert isinstance(layer, CudnnLSTM) and layer.variant == Variant(time="go_backwards")
        torch.testing.assert_close(layer.opaque_kernel, direct.opaque_kernel, rtol=0, atol=0)
    assert main(["inspect", str(path)]) == 0
    assert (
        "'lstm_2': lstm unidirectional (num_layers=1, num_units=3, input_size=3) at Keras layer "
        "'lstm_2' (LSTM); note: it computes lstm with a variant: go_backwards"
    ) in capsys.readouterr().out


def test_go_backwards_in_a_config_is_read_and_never_merged(tmp_path: Path) -> None:
    def edit(layers: list[dict[str, Any]]) -> None:
        layers[2]["config"]["go_backwards"] = True  # lstm_1, between lstm and lstm_2

    path = _edited_config(tmp_path, "stack_model.h5", edit)
    assert list(from_keras_h5(path, merge_layers=True))[:3] == ["lstm", "lstm_1", "lstm_2"]
    described = {d["layer"]: d for d in describe_keras_h5(path)}
    assert described["lstm_1"]["variant"] == {"time": "go_backwards"}
    assert "variant" not in described["lstm"]


def test_go_backwards_forward_side_of_bidirectional_refused(tmp_path: Path) -> None:
    def edit(layers: list[dict[str, Any]]) -> None:
        layers[5]["config"]["layer"]["config"]["go_backwards"] = True  # Bidirectional(LSTM)

    with pytest.raises(
        ValueError,
        match=r"layer 'bidirectional' \(Bidirectional\(LSTM\)\): go_backwards=True in the forward "
        r"layer of a Bidirectional wrapper reads the sequence backward",
    ):
        from_keras_h5(_edited_config(tmp_path, "plain_model.h5", edit))


def test_read_returns_one_layer_as_data() -> None:
    data = keras_h5.read(FIXTURES / "stack_model.h5", "lstm+lstm_1+lstm_2", merge_layers=True)
    assert (data.spec.num_layers, data.spec.num_units, data.notes) == (3, 3, ())
    merged = from_keras_h5(FIXTURES / "stack_model.h5", merge_layers=True)["lstm+lstm_1+lstm_2"]
    _, weights, biases = layer_canonical(merged, "test")
    for ours, theirs in zip([*weights, *biases], [*data.weights, *data.biases]):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    hard = keras_h5.read(FIXTURES / "hard_sigmoid_model.h5", "lstm")
    assert hard.spec.variant == Variant(gate_activation=Activation("hard_sigmoid", 0.2, 0.5))
    with pytest.raises(ValueError, match=r"has no RNN layer 'dense'; its RNN layers: \['lstm', "):
        keras_h5.read(FIXTURES / "plain_model.h5", "dense")


# -- merge_layers: consecutive compatible layers as one multi-layer layer ---------------------


def _check_stack(layer: _CudnnRNN, keras: Any, names: list[str]) -> None:
    """A merged layer against Keras 2's whole stack: the last layer's output from the first
    layer's input, and each layer's final state from its own output."""
    assert layer.num_layers == len(names)
    out, state = _run(layer, keras[f"{names[0]}/input"])
    np.testing.assert_allclose(out, keras[f"{names[-1]}/output"], rtol=0, atol=2e-6)
    h, dirs = layer.num_units, layer.num_dirs
    for index, name in enumerate(names):
        want = keras[f"{name}/output"]
        h_n = state[0][index * dirs].numpy()
        np.testing.assert_allclose(h_n, want[:, -1, :h], rtol=0, atol=2e-6, err_msg=name)
        if dirs == 2:
            h_b = state[0][index * dirs + 1].numpy()
            np.testing.assert_allclose(h_b, want[:, 0, h:], rtol=0, atol=2e-6, err_msg=name)


@pytest.mark.parametrize(
    ("filename", "npz", "runs"),
    [
        (
            "stack_model.h5",
            "stack_model.npz",
            [
                ["lstm", "lstm_1", "lstm_2"],  # then a Dense
                ["bidirectional", "bidirectional_1"],  # then a Dropout
                ["bidirectional_2"],
                ["gru_3"],  # unidirectional after bidirectional
                ["simple_rnn"],
                ["simple_rnn_1"],  # relu after tanh
            ],
        ),
        (
            "stack_functional_model.h5",
            "stack_functional_model.npz",
            [
                ["lstm", "lstm_1"],  # lstm_1 also feeds a Concatenate
                ["lstm_2", "lstm_3"],
                ["lstm_4"],  # its states are lstm_5's initial_state
                ["lstm_5"],
                ["gru"],
            ],
        ),
        (
            "nested_model.h5",
            "nested_model.npz",
            [
                ["encoder/lstm", "encoder/lstm_1"],  # inside the nested Sequential
                ["encoder/core/gru"],
                ["bidirectional"],
                ["head/simple_rnn"],
            ],
        ),
    ],
)
def test_merge_layers_equals_keras2_stack(filename: str, npz: str, runs: list[list[str]]) -> None:
    layers = from_keras_h5(FIXTURES / filename, merge_layers=True)
    assert list(layers) == ["+".join(run) for run in runs]
    keras = np.load(FIXTURES / npz)
    for run in runs:
        if f"{run[0]}/input" in keras:  # lstm_5 takes three tensors: Keras's npz leaves it out
            _check_stack(layers["+".join(run)], keras, run)


def test_merge_layers_describe_and_pick() -> None:
    path = FIXTURES / "stack_model.h5"
    described = describe_keras_h5(path, merge_layers=True)
    assert described[1] == {
        "layer": "bidirectional+bidirectional_1",
        "keras_layers": ["bidirectional", "bidirectional_1"],
        "keras_class": "Bidirectional(GRU)",
        "rnn_mode": "gru",
        "num_layers": 2,
        "num_units": 2,
        "input_size": 4,
        "direction": "bidirectional",
    }
    assert described[2]["layer"] == "bidirectional_2" and "num_layers" not in described[2]
    picked = from_keras_h5(path, layers=["lstm_1", "lstm_2", "gru_3"], merge_layers=True)
    assert list(picked) == ["lstm_1+lstm_2", "gru_3"]
    picked = from_keras_h5(path, layers=["lstm", "lstm_2"], merge_layers=True)
    assert list(picked) == ["lstm", "lstm_2"]  # lstm_1 between them was not picked


def test_merge_layers_needs_a_config() -> None:
    with pytest.raises(
        ValueError,
        match=r"merge_layers=True needs to know which layer feeds which, and a weights-only file "
        r"\(model.save_weights\) does not record it: read the whole-model file",
    ):
        from_keras_h5(FIXTURES / "cudnn_weights.h5", merge_layers=True)
    with pytest.raises(TypeError, match=r"merge_layers must be True or False, got str"):
        describe_keras_h5(FIXTURES / "stack_model.h5", merge_layers="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("key", "value"), [("return_sequences", False), ("time_major", True)], ids=["last", "time"]
)
def test_merge_layers_needs_sequences_and_one_layout(tmp_path: Path, key: str, value: Any) -> None:
    def edit(layers: list[dict[str, Any]]) -> None:
        layers[1]["config"][key] = value  # lstm, feeding lstm_1

    path = _edited_config(tmp_path, "stack_model.h5", edit)
    assert list(from_keras_h5(path, merge_layers=True))[:2] == ["lstm", "lstm_1+lstm_2"]


def test_merge_layers_keeps_a_model_output_apart(tmp_path: Path) -> None:
    """A layer whose output is also the model's is not merged: merging would hide it."""
    path = tmp_path / "outputs.h5"
    shutil.copy(FIXTURES / "stack_functional_model.h5", path)
    with h5py.File(path, "r+") as f:
        config = json.loads(f.attrs["model_config"])
        config["config"]["output_layers"].append(["lstm", 0, 0])
        f.attrs["model_config"] = json.dumps(config)
    assert list(from_keras_h5(path, merge_layers=True))[:3] == ["lstm", "lstm_1", "lstm_2+lstm_3"]
