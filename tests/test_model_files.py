"""cudnn_rnn.converters.loader: the reader is chosen by the file's content, not its name.

Issue 22: a torch zip without extension, a TorchScript archive or an ``.npz`` went to the
safetensors reader and failed with "the header length 578712552184433488 exceeds ...". Now each
format is read by its own reader whatever the name says, a kind the command cannot read yet is
refused naming it, and only content of no known format falls back to the name's extension (so
that a truncated file is still told what is wrong with it).
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from cudnn_rnn import checkpoint, convert
from cudnn_rnn.cli import main
from cudnn_rnn.converters import loader as model_files
from cudnn_rnn.converters.loader import UnsupportedFormat, load_layer, reader_of
from cudnn_rnn.io import files
from cudnn_rnn.io.tf1 import bundle as tf1_bundle
from cudnn_rnn.io.torch.state import TorchFileError
from cudnn_rnn.layers import CudnnGRU, CudnnLSTM
from tests.support.paths import FIXTURES

pytestmark = pytest.mark.filterwarnings(
    "ignore:You are using the legacy TorchScript-based ONNX export:DeprecationWarning"
)


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return torch.equal(a.opaque_kernel, b.opaque_kernel)  # type: ignore[arg-type]


def _source() -> CudnnLSTM:
    return CudnnLSTM(2, 3, input_size=2, direction="bidirectional", seed=4)


def _written(kind: str, layer: CudnnLSTM, path: Path) -> Path:
    """``layer`` written as ``kind``, at ``path`` (for TF1: the prefix)."""
    if kind == "safetensors":
        checkpoint.save(path, layer)
    elif kind == "tf":
        checkpoint.save(path, layer, format="tf")
    elif kind == "torch":
        torch.save(convert.to_torch(layer).state_dict(), path)
    elif kind == "torch legacy":
        state = convert.to_torch(layer).state_dict()
        torch.save(state, path, _use_new_zipfile_serialization=False)
    else:
        pytest.importorskip("onnx")
        convert.to_onnx(layer, path)
    return path


@pytest.mark.parametrize("kind", ["safetensors", "tf", "torch", "torch legacy", "onnx"])
@pytest.mark.parametrize("name", ["model", "model.safetensors", "model.pt", "model.onnx"])
def test_every_format_loads_whatever_its_name(kind: str, name: str, tmp_path: Path) -> None:
    layer = _source()
    path = _written(kind, layer, tmp_path / name)
    reader = "torch" if kind.startswith("torch") else "tf1" if kind == "tf" else kind
    assert reader_of(str(path)) == reader
    assert _same(load_layer(str(path)), layer)


def test_a_torch_zip_without_extension_converts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's finding: this failed with "the header length 578712552184433488 exceeds"."""
    layer = _source()
    src = _written("torch", layer, tmp_path / "weights")
    assert main(["convert", str(src), str(tmp_path / "out.safetensors")]) == 0
    restored = CudnnLSTM(2, 3, input_size=2, direction="bidirectional")
    checkpoint.restore(tmp_path / "out.safetensors", restored)
    assert _same(restored, layer)
    assert main(["inspect", str(src)]) == 0
    assert f"{src}: torch file, 16 tensor(s)" in capsys.readouterr().out


def _torchscript(path: Path) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit is deprecated: the producer, not the test
        torch.jit.save(torch.jit.script(torch.nn.Linear(2, 3)), str(path))
    return path


def _npz(path: Path) -> Path:
    with path.open("wb") as f:
        np.savez(f, kernel=np.zeros((3, 8), np.float32))
    return path


@pytest.mark.parametrize(
    ("make", "listed"),
    [(_torchscript, ("weight", [3, 2], "float32")), (_npz, ("kernel", [3, 8], "float32"))],
)
@pytest.mark.parametrize("name", ["model", "model.pt", "model.safetensors", "model.npz"])
def test_torchscript_and_npz_without_an_rnn_are_listed_and_refused(
    make: object,
    listed: tuple[str, list[int], str],
    name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Both kinds are read by content whatever the name: inspect lists their tensors from the
    members' headers; loading one that holds no RNN says so in one line."""
    path = make(tmp_path / name)  # type: ignore[operator]
    says = "holds no torch.nn LSTM, GRU, RNN or RNN cell state"
    with pytest.raises(TorchFileError, match=says):
        load_layer(str(path))
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    tensor, shape, dtype = listed
    assert f"{path}: torch file," in out and "found 0 RNN(s)" in out
    assert any(
        line.split() == [repr(tensor), *str(shape).split(), dtype] for line in out.splitlines()
    ), out
    assert main(["convert", str(path), str(tmp_path / "o.onnx")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cudnn-rnn: error: ") and err.count("\n") == 1, err
    assert says in err and str(path) in err
    assert not (tmp_path / "o.onnx").exists()


def test_another_zip_archive_is_named(tmp_path: Path) -> None:
    import zipfile

    path = tmp_path / "model.keras"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("config.json", "{}")
    with pytest.raises(
        UnsupportedFormat, match=r"model\.keras: a zip archive that is no torch, TorchScript"
    ):
        reader_of(str(path))


def test_unknown_content_falls_back_to_the_name(tmp_path: Path) -> None:
    """Content of no known format (truncated, corrupt) goes to the reader its name asks for,
    whose error says what is wrong; with no name to go by, the refusal says so."""
    junk = b"\x00not a model\xff" * 16
    expected = {
        "x.safetensors": (checkpoint.CheckpointError, "not a readable safetensors file"),
        "x.pt": (ValueError, r"x\.pt: torch\.load\(weights_only=True\) refuses it"),
        "x.pth": (ValueError, r"x\.pth: torch\.load\(weights_only=True\) refuses it"),
        "x": (UnsupportedFormat, "its content is of no format cudnn-rnn reads"),
        "x.bin": (UnsupportedFormat, "nor does its name say one"),
    }
    for name, (error, says) in expected.items():
        (tmp_path / name).write_bytes(junk)
        with pytest.raises(error, match=says):
            load_layer(str(tmp_path / name))
    pytest.importorskip("onnx")
    (tmp_path / "x.onnx").write_bytes(junk)
    with pytest.raises(ValueError, match=r"is not an ONNX model"):
        load_layer(str(tmp_path / "x.onnx"))


def test_a_truncated_torch_zip_with_its_extension_is_told_so(tmp_path: Path) -> None:
    data = _written("torch", _source(), tmp_path / "full.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    assert files.sniff(tmp_path / "cut.pt") == files.UNKNOWN
    with pytest.raises(ValueError, match=r"not a readable torch file"):
        load_layer(str(tmp_path / "cut.pt"))


def test_a_tf1_index_renamed_is_refused_with_its_name(tmp_path: Path) -> None:
    prefix = _written("tf", _source(), tmp_path / "ckpt")
    shutil.copyfile(f"{prefix}.index", tmp_path / "renamed")
    assert files.sniff(tmp_path / "renamed") == files.TF1
    with pytest.raises(UnsupportedFormat, match=r"not named PREFIX\.index"):
        reader_of(str(tmp_path / "renamed"))
    assert reader_of(f"{prefix}.index") == "tf1" and reader_of(str(prefix)) == "tf1"


def test_a_tf1_prefix_with_a_corrupt_index_is_read_as_tf1(tmp_path: Path) -> None:
    prefix = _written("tf", _source(), tmp_path / "ckpt")
    Path(f"{prefix}.index").write_bytes(b"\x00" * 100)
    assert files.sniff(prefix) == files.UNKNOWN
    assert reader_of(str(prefix)) == "tf1"  # its TF1 reader says what is wrong
    with pytest.raises(checkpoint.CheckpointError, match=r"bad magic number"):
        load_layer(str(prefix))


def test_contents_lists_tensors_and_models(tmp_path: Path) -> None:
    layer = CudnnGRU(1, 2, input_size=3)
    path = tmp_path / "g"
    checkpoint.save(path, layer)
    found = model_files.contents(str(path))
    assert found.reader == "safetensors" and len(found.shapes) == 6
    assert found.models == [layer.checkpoint_spec()] and found.skipped == []


def test_an_opaque_kernel_that_does_not_fit_is_noted(tmp_path: Path) -> None:
    fixture = FIXTURES / "tf1_opaque" / "lstm_aligned.ckpt"
    arrays = tf1_bundle.read_bundle(str(fixture))
    kernel = "model/cudnn_lstm/opaque_kernel"
    arrays[kernel] = np.full_like(arrays[kernel], 0.125)  # no matrix of the model is in it
    prefix = tmp_path / "training.ckpt"
    tf1_bundle.write_bundle(str(prefix), arrays)
    notes: list[str] = []
    layer = load_layer(str(prefix), note=notes.append)
    (note,) = notes
    assert note.startswith(f"{prefix}: its opaque kernel is not used (") and "split in half" in note
    want = CudnnLSTM(2, 3, input_size=2, scope="model")
    checkpoint.restore(prefix, want, opaque_name=False)  # the canonical tensors, halves
    assert _same(layer, want)
