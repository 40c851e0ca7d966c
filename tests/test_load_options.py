"""``cudnn_rnn.load`` and ``cudnn_rnn.find_rnns`` refuse an option that the file's reader does
not take, naming the ones it does, in the caller's words (keyword arguments from Python, the
command's options from ``cudnn-rnn``): ``load(path, forgetbias=0.0)``, ``cell_clip=`` on a TF1
checkpoint (before TF1 checkpoints took it) and ``merge_layers=`` on an ONNX model were silently
ignored, and a layer came back.

What each format takes is one table (``converters.options._OPTIONS``, beside the finders'
``_FINDERS`` and the loaders' ``_LOADERS``); every message below is derived from it and pinned
here, for each format.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import cudnn_rnn
from cudnn_rnn import checkpoint
from cudnn_rnn.cli import main
from cudnn_rnn.converters import loader as model_files
from cudnn_rnn.converters.finder import _FINDERS
from cudnn_rnn.converters.loader import OptionError
from cudnn_rnn.converters.options import _FLAGS, _OPTIONS
from cudnn_rnn.errors import CudnnRNNError, UsageError
from cudnn_rnn.io import registry
from cudnn_rnn.layers import CudnnLSTM
from tests.support.paths import FIXTURES


def _safetensors(d: Path) -> str:
    path = d / "m.safetensors"
    checkpoint.save(path, CudnnLSTM(1, 3, input_size=2))
    return str(path)


def _onnx(d: Path) -> str:
    pytest.importorskip("onnx")
    from cudnn_rnn.converters.onnx import to_onnx

    path = d / "m.onnx"
    to_onnx(CudnnLSTM(1, 3, input_size=2), path)
    return str(path)


def _torch(d: Path) -> str:
    path = d / "m.pt"
    torch.save(torch.nn.GRU(2, 3).state_dict(), path)
    return str(path)


def _keras_h5(d: Path) -> str:
    pytest.importorskip("h5py")
    return str(FIXTURES / "keras2" / "cudnn_model.h5")


def _keras3(d: Path) -> str:
    pytest.importorskip("h5py")
    return str(FIXTURES / "keras3" / "lstm.keras")


#: format -> (a file of it, what the message says its reader takes)
_FORMATS: dict[str, tuple[Callable[[Path], str], str]] = {
    "safetensors": (_safetensors, "our .safetensors checkpoints takes activation"),
    "tf1": (
        lambda d: str(FIXTURES / "tf1_cells" / "basic_lstm.ckpt"),
        "TF1 checkpoints takes activation, forget_bias, cell_clip, proj_clip",
    ),
    "onnx": (_onnx, "ONNX models takes no options"),
    "torch": (_torch, "torch files takes activation"),
    "keras_h5": (
        _keras_h5,
        "Keras 2 .h5 files takes activation, confirm_keras_version, merge_layers, time_limit, "
        "assume_cudnn_activations, simple_rnn_activation",
    ),
    "keras3": (_keras3, "Keras 3 .keras files takes time_limit"),
}


def test_the_table_covers_every_format_and_the_command_s_options() -> None:
    names = {f.name for f in registry.FORMATS}
    assert set(_OPTIONS) == set(_FINDERS) == names
    every = {o for takes in _OPTIONS.values() for o in takes}
    assert set(_FLAGS) <= every


@pytest.mark.parametrize("fmt", sorted(_FORMATS))
@pytest.mark.parametrize("call", ["load", "find_rnns"])
def test_an_option_no_reader_takes_is_refused_naming_those_it_takes(
    tmp_path: Path, fmt: str, call: str
) -> None:
    make, takes = _FORMATS[fmt]
    path = make(tmp_path)
    assert model_files.reader_of(path) == fmt
    function: Callable[..., Any] = getattr(cudnn_rnn, call)
    with pytest.raises(OptionError) as info:
        function(path, bogus_option=1)
    assert str(info.value) == (
        f"cudnn_rnn.{call}() got an unexpected keyword argument 'bogus_option' for {path}: the "
        f"reader of {takes}."
    )
    # A TypeError, as Python's own for an unexpected keyword, and the package's usage error.
    assert isinstance(info.value, TypeError)
    assert isinstance(info.value, UsageError) and isinstance(info.value, CudnnRNNError)
    # A typo is told what it may have meant.
    with pytest.raises(
        TypeError, match=r"argument 'forgetbias' .* \(did you mean 'forget_bias'\?\)"
    ):
        function(path, forgetbias=0.0)


@pytest.mark.parametrize(
    ("fmt", "options", "says"),
    [
        (
            "tf1",
            {"merge_layers": True},
            r"argument 'merge_layers' .*takes activation, forget_bias, cell_clip, proj_clip \("
            r"'merge_layers' is for Keras 2 \.h5 files\)\.$",
        ),
        (
            "torch",
            {"cell_clip": 3.0},
            r"argument 'cell_clip' .*takes activation \('cell_clip' is for TF1 checkpoints\)\.$",
        ),
        (
            "onnx",
            {"merge_layers": True},
            r"argument 'merge_layers' .*: the reader of ONNX models takes no options \("
            r"'merge_layers' is for Keras 2 \.h5 files\)\.$",
        ),
        (
            "onnx",
            {"activation": "relu"},
            r"argument 'activation' .*takes no options \('activation' is for our \.safetensors "
            r"checkpoints and TF1 checkpoints and torch files and Keras 2 \.h5 files\)\.$",
        ),
        (
            "torch",
            {"forget_bias": 0.5},
            r"argument 'forget_bias' .*takes activation \('forget_bias' is for TF1 checkpoints\)",
        ),
        (
            "safetensors",
            {"merge_layers": True, "time_limit": 3},
            r"arguments 'merge_layers', 'time_limit' .*takes activation \('merge_layers' is for "
            r"Keras 2 \.h5 files; 'time_limit' is for Keras 2 \.h5 files and Keras 3 \.keras "
            r"files\)\.$",
        ),
        ("keras3", {"activation": "tanh"}, r"argument 'activation' .*takes time_limit \("),
    ],
)
def test_an_option_of_another_format_says_whose_it_is(
    tmp_path: Path, fmt: str, options: dict[str, Any], says: str
) -> None:
    path = _FORMATS[fmt][0](tmp_path)
    for call in (cudnn_rnn.load, cudnn_rnn.find_rnns):
        with pytest.raises(OptionError, match=says):
            call(path, **options)


def test_an_option_at_its_default_gives_nothing(tmp_path: Path) -> None:
    """None (False for the switches) asks for nothing: a caller that forwards its own defaults
    to any file is not refused; a name no reader takes is, whatever its value."""
    path = _onnx(tmp_path)
    defaults: dict[str, Any] = {
        "activation": None,
        "forget_bias": None,
        "merge_layers": False,
        "confirm_keras_version": None,
        "time_limit": None,
    }
    assert cudnn_rnn.load(path, **defaults).num_units == 3
    assert len(cudnn_rnn.find_rnns(path, **defaults)) == 1
    with pytest.raises(OptionError, match=r"argument 'merge_layers' "):
        cudnn_rnn.load(path, merge_layers=0)  # not False: given
    with pytest.raises(OptionError, match=r"argument 'bogus' "):
        cudnn_rnn.load(path, bogus=None)


def test_the_options_a_reader_takes_still_work(tmp_path: Path) -> None:
    cells = str(FIXTURES / "tf1_cells" / "basic_lstm.ckpt")
    expected = np.load(FIXTURES / "tf1_cells" / "basic_lstm.npz")
    one = cudnn_rnn.load(cells, forget_bias=1.0)
    half = cudnn_rnn.load(cells, forget_bias=float(expected["forget_bias"]))
    with torch.no_grad():
        x = torch.from_numpy(expected["inputs"])
        lengths = expected["lengths"].tolist()
        major = bool(expected["time_major"])
        y_half = half(x, sequence_lengths=lengths, time_major=major)[0]
        y_one = one(x, sequence_lengths=lengths, time_major=major)[0]
    np.testing.assert_allclose(y_half.numpy(), expected["outputs"], rtol=0, atol=1e-5)
    assert not torch.allclose(y_one, y_half)
    assert cudnn_rnn.find_rnns(cells, forget_bias=0.5)[0].computable  # listing ignores it


def test_keras3_s_time_limit_reaches_its_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It was taken and dropped: now the table says the reader takes it, and it gets it."""
    from cudnn_rnn.io.keras import keras3

    path = _keras3(tmp_path)
    seen: list[object] = []
    find, read = keras3.find_rnns, keras3.read

    def spy_find(p: Any, *, time_limit: Any = None) -> Any:
        seen.append(("find", time_limit))
        return find(p, time_limit=time_limit)

    def spy_read(p: Any, name: Any, *, time_limit: Any = None) -> Any:
        seen.append(("read", time_limit))
        return read(p, name, time_limit=time_limit)

    monkeypatch.setattr(keras3, "find_rnns", spy_find)
    monkeypatch.setattr(keras3, "read", spy_read)
    assert cudnn_rnn.load(path, time_limit=60.0).num_units > 0
    assert seen == [("find", 60.0), ("read", 60.0)]


# -- the command: the same refusal, in its options -------------------------------------------

_NONE_OF = (
    "none of --activation, --forget-bias, --cell-clip, --proj-clip, --keras-version, --merge-layers"
)


@pytest.mark.parametrize(
    ("fmt", "argv", "says"),
    [
        (
            "onnx",
            ["--merge-layers"],
            f"--merge-layers does not apply: the reader of ONNX models takes {_NONE_OF} "
            "(--merge-layers is for Keras 2 .h5 files).",
        ),
        (
            "torch",
            ["--keras-version", "2.2.4"],
            "--keras-version does not apply: the reader of torch files takes --activation "
            "(--keras-version is for Keras 2 .h5 files).",
        ),
        (
            "keras3",
            ["--activation", "tanh", "--merge-layers"],
            f"--activation, --merge-layers do not apply: the reader of Keras 3 .keras files "
            f"takes {_NONE_OF} (--activation is for our .safetensors checkpoints and TF1 "
            "checkpoints and torch files and Keras 2 .h5 files; --merge-layers is for Keras 2 "
            ".h5 files).",
        ),
    ],
)
def test_inspect_refuses_an_option_in_the_command_s_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, argv: list[str], says: str
) -> None:
    path = _FORMATS[fmt][0](tmp_path)
    assert main(["inspect", path, *argv]) == 2
    err = capsys.readouterr().err
    assert err == f"cudnn-rnn: error: {path}: {says}\n"


@pytest.mark.parametrize("command", ["convert", "bench"])
def test_convert_and_bench_refuse_forget_bias_for_a_torch_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    path = _torch(tmp_path)
    args = [str(tmp_path / "out.safetensors")] if command == "convert" else ["--no-peers"]
    assert main([command, path, *args, "--forget-bias", "0.5"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"cudnn-rnn: error: {path}: --forget-bias does not apply: the reader of torch files "
        "takes --activation (--forget-bias is for TF1 checkpoints).\n"
    )
    assert not (tmp_path / "out.safetensors").exists()


def test_the_message_names_the_path_once(tmp_path: Path) -> None:
    path = _torch(tmp_path)
    with pytest.raises(OptionError) as info:
        cudnn_rnn.load(path, cell_clip=1.0)
    assert len(re.findall(re.escape(path), str(info.value))) == 1
