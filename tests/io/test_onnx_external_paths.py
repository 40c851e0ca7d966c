"""An ONNX model's external data location that names no readable file of the model's folder is an
OnnxFormatError (a files.FormatError), never a bare ValueError or OSError: a NUL in the name, an
absolute path, ``..``, a link out of the folder, a folder, a link loop, a name too long, a file
that is not there."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cudnn_rnn import convert
from cudnn_rnn.converters.onnx import OnnxFormatError, from_onnx
from cudnn_rnn.io import files
from tests.io.test_onnx_hostile import external_model, set_external

onnx = pytest.importorskip("onnx")

#: What each location does to the folder (made before the model is read) and how it is refused.
CASES: dict[str, tuple[str, Callable[[Path], None], str]] = {
    "nul": ("w\0.bin", lambda d: None, r"'w\\x00\.bin', which holds a NUL character"),
    "absolute": ("/etc/hostname", lambda d: None, r"which is not a file in the model's folder"),
    "dotdot": ("sub/../../w.bin", lambda d: None, r"which is not a file in the model's folder"),
    "link-out": (
        "out.bin",
        lambda d: os.symlink(d.parent, d / "out.bin"),
        r"'out\.bin', which is not a file in the model's folder",
    ),
    "directory": (
        "sub",
        lambda d: (d / "sub").mkdir(),
        r"'sub', which is not a regular file; only regular files are read \(it is a directory\)",
    ),
    "link-loop": (
        "loop",
        lambda d: os.symlink("loop", d / "loop"),
        r"'loop', which cannot be read: ",
    ),
    "too-long": ("n" * 5000, lambda d: None, r"'n{119}\.\.\., which cannot be read: "),
    "missing": ("gone.bin", lambda d: None, r"'gone\.bin', which cannot be read: "),
}


def _model(tmp_path: Path, location: str, prepare: Callable[[Path], None]) -> Path:
    path, model = external_model(tmp_path)
    prepare(tmp_path)
    set_external(model, "W_0", location=location)
    onnx.save_model(model, str(path))
    return path


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize(
    "read",
    [from_onnx, convert.find_rnns],
    ids=["from_onnx", "find_rnns"],
)
def test_a_location_that_names_no_file_of_the_folder_is_a_format_error(
    tmp_path: Path, case: str, read: Callable[[Path], Any]
) -> None:
    location, prepare, message = CASES[case]
    path = _model(tmp_path, location, prepare)
    with pytest.raises(
        OnnxFormatError, match=rf"tensor 'W_0' keeps its data in .*{message}"
    ) as info:
        read(path)
    assert isinstance(info.value, files.FormatError)
    assert str(info.value).isprintable()
