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
from cudnn_rnn.formats.canonical import layer_canonical
from cudnn_rnn.layers import CudnnGRU, CudnnLSTM, CudnnRNNRelu, CudnnRNNTanh, _CudnnRNN
from tests.support import h5_hostile
from tests.support.paths import FIXTURES, ROOT

h5py = pytest.importorskip("h5py")

from cudnn_rnn.formats import keras_h5  # noqa: E402
from cudnn_rnn.formats.keras_h5 import (  # noqa: E402
    KerasH5Error,
    describe_keras_h5,
    from_keras_h5,
    keras_h5_weights,
)

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
    refused = describe_keras_h5(FIXTURES / "hard_sigmoid_model.h5")
    assert (
        refused == [{"layer": "lstm", "refused": refused[0]["refused"]}]
        and "hard_sigmoid" in refused[0]["refused"]
    )
    weights = keras_h5_weights(FIXTURES / "cudnn_model.h5")
    assert weights["cu_dnnlstm/bias:0"] == ((32,), "float32")
    assert weights["dense/kernel:0"] == ((3, 2), "float32")


# -- what cuDNN cannot compute is refused, naming the layer and the setting -------------------


@pytest.mark.parametrize(
    ("filename", "match"),
    [
        ("hard_sigmoid_model.h5", r"layer 'lstm' \(LSTM\): recurrent_activation 'hard_sigmoid'"),
        ("reset_before_model.h5", r"layer 'gru' \(GRU\): reset_after=False"),
        ("reset_before_weights.h5", r"layer 'gru': a GRU bias of shape \[3H\] .*reset_after=False"),
        ("merge_sum_model.h5", r"layer 'bidirectional' \(Bidirectional\): merge_mode 'sum'"),
        ("go_backwards_model.h5", r"layer 'lstm\w*' \(LSTM\): go_backwards=True"),
        (
            "plain_weights.h5",
            r"layer 'lstm': a weights-only file does not record the activations of this plain "
            r"LSTM; .*assume_cudnn_activations=True",
        ),
    ],
)
def test_refusals(filename: str, match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        from_keras_h5(FIXTURES / filename)
    assert not isinstance(info.value, KerasH5Error)  # a setting, not a broken file


def _edited_config(tmp_path: Path, src: str, edit: Any) -> Path:
    path = tmp_path / src
    shutil.copy(FIXTURES / src, path)
    with h5py.File(path, "r+") as f:
        config = json.loads(f.attrs["model_config"])
        edit(config["config"]["layers"])
        f.attrs["model_config"] = json.dumps(config)
    return path


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("activation", "relu", r"layer 'lstm' \(LSTM\): activation 'relu' is not cuDNN's 'tanh'"),
        ("recurrent_activation", "hard_sigmoid", r"recurrent_activation 'hard_sigmoid'"),
        ("go_backwards", True, r"layer 'lstm' \(LSTM\): go_backwards=True"),
    ],
)
def test_config_settings_refused(tmp_path: Path, key: str, value: Any, match: str) -> None:
    def edit(layers: list[dict[str, Any]]) -> None:
        layers[1]["config"][key] = value  # layers[0] is the InputLayer

    with pytest.raises(ValueError, match=match):
        from_keras_h5(_edited_config(tmp_path, "plain_model.h5", edit))


def test_simple_rnn_activation_refused(tmp_path: Path) -> None:
    def edit(layers: list[dict[str, Any]]) -> None:
        layers[3]["config"]["activation"] = "sigmoid"

    with pytest.raises(ValueError, match=r"layer 'simple_rnn' \(SimpleRNN\): activation 'sigmoid'"):
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


def _weights_file(path: Path, layers: dict[str, dict[str, Any]], **dataset: Any) -> Path:
    """A weights-only file in Keras 2's layout: ``{layer: {weight base name: array}}``."""
    with h5py.File(path, "w") as f:
        f.attrs["layer_names"] = np.array([n.encode() for n in layers])
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


#: Runs in a fresh interpreter: the calling process must survive, whatever HDF5 does.
_SURVIVOR = """
import contextlib, io, json, sys
from cudnn_rnn import cli
from cudnn_rnn.formats import keras_h5
keras_h5.TIME_LIMIT_BASE = 0.5  # the CLI's limit, shortened so that a loop costs little
report = {}
for path in sys.argv[1:]:
    try:
        keras_h5.from_keras_h5(path, time_limit=0.5)
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


@pytest.fixture(scope="module")
def survived(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """What from_keras_h5 and the CLI did with each file, run in one child interpreter."""
    folder = tmp_path_factory.mktemp("hdf5_killers")
    paths = {
        "heap-loop": _corrupted(h5_hostile.heap_loop, folder),
        "weight-names-segv": _corrupted(h5_hostile.weight_names_segv, folder, "cudnn_model.h5"),
    }
    root = ROOT
    cmd = [sys.executable, "-c", _SURVIVOR, *map(str, paths.values())]
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
    monkeypatch.setattr(keras_h5, "_CHILD", "cudnn_rnn.formats.no_such_reader")
    with pytest.raises(
        KerasH5Error,
        match=r"cudnn_model.h5': the reader process failed \(exit status 1: ImportError: No "
        r"module named cudnn_rnn.formats.no_such_reader\)",
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
        keras_h5._parse(bytearray(blob), "'x.h5'")


# -- the command ------------------------------------------------------------------------------


def test_cli_inspect(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(FIXTURES / "cudnn_bidi_model.h5")]) == 0
    out = capsys.readouterr().out
    assert "keras_h5 file, 12 tensor(s)" in out
    assert "bidirectional/forward_cu_dnnlstm/bias:0" in out
    assert "layer=bidirectional_1, keras_class=Bidirectional(CuDNNGRU), rnn_mode=gru" in out


def test_cli_convert_one_layer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = str(FIXTURES / "cudnn_model.h5")
    assert main(["convert", src, str(tmp_path / "x.pt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and src in err
    assert "holds 2 RNN layers (cu_dnnlstm, cu_dnngru); pick one with --layer NAME" in err
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
