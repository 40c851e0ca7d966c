"""``except cudnn_rnn.CudnnRNNError`` catches every error class the package documents (docs/api.md),
each raised for real by the code that raises it; each also stays the builtin it was."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

import cudnn_rnn
import cudnn_rnn.nn
from cudnn_rnn import checkpoint, cli, convert
from cudnn_rnn.cli import bench
from cudnn_rnn.converters import loader as model_files
from cudnn_rnn.converters import onnx
from cudnn_rnn.converters import tf1_opaque as tf1_opaque
from cudnn_rnn.core.layout import layout_of
from cudnn_rnn.io import atomic, cudnn_layout, files, pickles
from cudnn_rnn.io.keras import h5 as keras_h5
from cudnn_rnn.io.keras import keras3
from cudnn_rnn.io.tf1 import bundle as tf1_bundle
from cudnn_rnn.io.tf1 import cells as tf1_cells
from cudnn_rnn.io.tf1 import protobuf_wire
from cudnn_rnn.io.tf1 import state as tf1_state
from cudnn_rnn.io.torch import file as torch_file
from cudnn_rnn.nn._checks import RNNArgumentError
from tests.support.paths import FIXTURES


def _junk(tmp_path: Path, name: str) -> str:
    path = tmp_path / name
    path.write_bytes(b"\x00not a model\xff" * 16)
    return str(path)


def _discovery_failure() -> None:
    spec = cudnn_rnn.RNNSpec("gru", 1, 3, 2)
    layout = layout_of(spec)
    rng = np.random.default_rng(0)
    weights = [rng.standard_normal(p.shape) for p in layout.weights]
    biases = [rng.standard_normal(p.shape) for p in layout.biases]
    cudnn_layout.discover(spec, np.zeros(layout.size), weights, biases, {})  # matrices absent


def _two_models(tmp_path: Path) -> str:
    path = str(tmp_path / "two.safetensors")
    checkpoint.save(
        path,
        [cudnn_rnn.CudnnGRU(1, 2, input_size=2, scope="a"), cudnn_rnn.CudnnGRU(1, 2, input_size=2)],
    )
    return path


def _runtime_refusal(tmp_path: Path) -> None:
    """onnxruntime (its process, as the benchmarks run it) refusing a file that is not a model."""
    pytest.importorskip("onnxruntime")
    np.savez(tmp_path / "in.npz", x0=np.zeros((2, 1, 3), np.float32))
    np.savez(tmp_path / "want.npz", np.zeros((2, 1, 4), np.float32))
    peer = bench.RemotePeer(
        bench.ORT_OURS, _junk(tmp_path, "x.onnx"), "X", str(tmp_path / "in.npz"),
        str(tmp_path / "want.npz"),
    )  # fmt: skip
    try:
        peer.ready()
    finally:
        peer.close()


def _claiming_zip(tmp_path: Path) -> str:
    """An empty zip archive whose end record claims one entry."""
    path = tmp_path / "claims.zip"
    path.write_bytes(b"PK\x05\x06" + bytes(4) + b"\x01\x00\x01\x00" + bytes(10))
    return str(path)


def _opaque_refusal() -> None:
    layer = cudnn_rnn.CudnnLSTM(1, 3, input_size=2)
    optimizer = torch.optim.Adam(layer.parameters())
    tf1_opaque.plan({}, lambda names: {}, [layer], {}, opaque_name=False, optimizer=optimizer)


def _config_only(folder: Path) -> Path:
    """A zip holding a Keras 3 config.json and no weights file."""
    import zipfile

    path = folder / "config_only.keras"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("config.json", "{}")
    return path


CASES: dict[str, tuple[type[Exception], type[Exception], Callable[[Path], object]]] = {
    "CheckpointError": (
        checkpoint.CheckpointError,
        ValueError,
        lambda t: checkpoint.restore(
            _junk(t, "x.safetensors"), cudnn_rnn.CudnnGRU(1, 2, input_size=2)
        ),
    ),
    "TF1BundleError": (
        tf1_bundle.TF1BundleError,
        ValueError,
        lambda t: tf1_bundle.read_bundle_index(_junk(t, "ckpt.index")[: -len(".index")]),
    ),
    "OnnxFormatError": (
        onnx.OnnxFormatError,
        ValueError,
        lambda t: convert.from_onnx(_junk(t, "x.onnx")),
    ),
    "KerasH5Error": (
        keras_h5.KerasH5Error,
        ValueError,
        lambda t: convert.from_keras_h5(_junk(t, "x.h5")),
    ),
    "Keras3Error": (keras3.Keras3Error, ValueError, lambda t: keras3.find_rnns(_config_only(t))),
    "CheckpointStateError": (
        tf1_state.CheckpointStateError,
        ValueError,
        lambda t: cudnn_rnn.find_rnns(t),  # a directory without a TF1 `checkpoint` file
    ),
    "TF1CellsError": (
        tf1_cells.TF1CellsError,
        ValueError,
        lambda t: tf1_cells.read_cells(FIXTURES / "tf1_cells" / "lstm.ckpt", "no such rnn"),
    ),
    "LayoutNotFound": (cudnn_layout.LayoutNotFound, ValueError, lambda t: _discovery_failure()),
    "OpaqueRestoreError": (tf1_opaque.OpaqueRestoreError, ValueError, lambda t: _opaque_refusal()),
    "Malformed": (
        protobuf_wire.Malformed,
        Exception,
        lambda t: protobuf_wire.parse_message(b"\x0a\xff\xff\xff\x0f", "a probe"),
    ),
    "UsageError": (
        cli.UsageError,
        Exception,
        lambda t: model_files.load_layer(_two_models(t)),
    ),
    "RemotePeerError": (bench.RemotePeerError, RuntimeError, _runtime_refusal),
    "FormatError": (files.FormatError, ValueError, lambda t: files.open_regular(t)),
    "NotRegularFile": (files.NotRegularFile, ValueError, lambda t: files.sniff(t)),
    "FileTooLarge": (
        files.FileTooLarge,
        ValueError,
        lambda t: files.open_regular(_junk(t, "x.bin"), max_size=10),
    ),
    "FileAccessError": (
        files.FileAccessError,
        OSError,
        lambda t: files.open_regular(t / "missing.pt"),
    ),
    "ZipError": (files.ZipError, ValueError, lambda t: files.sniff(_claiming_zip(t))),
    "PickleError": (
        pickles.PickleError,
        ValueError,
        lambda t: pickles.check(b"\x80\x02]r\x00\x00\x00\x04."),  # a memo of 2**26
    ),
    "TorchFileError": (
        torch_file.TorchFileError,
        ValueError,
        lambda t: torch_file.read_state(_junk(t, "x.pt")),
    ),
    "UnsupportedFormat": (
        model_files.UnsupportedFormat,
        ValueError,
        lambda t: model_files.load_layer(_junk(t, "x.bin")),
    ),
    "OptionError": (
        model_files.OptionError,
        TypeError,
        lambda t: cudnn_rnn.load(FIXTURES / "tf1_cells" / "lstm.ckpt", merge_layers=True),
    ),
    "RNNArgumentError": (
        RNNArgumentError,
        TypeError,
        lambda t: cudnn_rnn.nn.LSTM(2, 3)(torch.zeros(4, 1, 2), torch.zeros(1, 1, 3)),
    ),
    "NotRegularTarget": (
        atomic.NotRegularTarget,
        OSError,
        lambda t: atomic.write_file(t, b"a directory is no file to replace"),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_base_catches_every_error_class(name: str, tmp_path: Path) -> None:
    cls, builtin, raise_it = CASES[name]
    with pytest.raises(cudnn_rnn.CudnnRNNError) as info:
        raise_it(tmp_path)
    assert type(info.value) is cls or isinstance(info.value, cls), type(info.value)
    assert isinstance(info.value, builtin)  # what callers caught before still catches it


def test_every_error_class_of_the_package_is_listed() -> None:
    """A new error class must derive from the base and join CASES (and docs/api.md)."""
    import importlib
    import inspect
    import pkgutil

    found = set()
    for info in pkgutil.walk_packages(cudnn_rnn.__path__, "cudnn_rnn."):
        if info.name.endswith((".h5_child", "._engine", ".__main__")):
            continue  # the reader process's and the command's entry points; the C library
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if (
                issubclass(obj, Exception)
                and not issubclass(obj, Warning)  # NativeEngineWarning: a warning, not raised
                and obj.__module__ == module.__name__
                and not obj.__name__.startswith("_")
            ):
                found.add(obj)
    assert all(issubclass(c, cudnn_rnn.CudnnRNNError) for c in found), found
    names = {c.__name__ for c in found} - {"CudnnRNNError"}
    assert names == set(CASES), names ^ set(CASES)
    api = (Path(__file__).resolve().parents[1] / "docs" / "api.md").read_text()
    assert all(f"`{n}`" in api or f".{n}`" in api for n in names)
