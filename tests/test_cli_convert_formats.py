"""cudnn-rnn convert writes what it is asked for: the format DST's extension (or --format) picks,
from the one table convert.WRITERS; any other extension is refused before anything is read or
written (exit 2, one line naming what is written and --format)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cudnn_rnn import checkpoint, convert
from cudnn_rnn.cli import build_parser, main
from cudnn_rnn.io import files
from cudnn_rnn.layers import CudnnLSTM

pytestmark = pytest.mark.filterwarnings(
    "ignore:You are using the legacy TorchScript-based ONNX export:DeprecationWarning"
)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "src" / "model.safetensors"
    path.parent.mkdir()
    checkpoint.save(path, CudnnLSTM(1, 2, input_size=3, seed=0))
    return path


def _refusal_parts(extension: str) -> list[str]:
    """What the one line of a refused name says: every format written, and how to choose one."""
    return [
        f"ends in {extension!r}, which names no format written",
        *(f"{w.shown()}: {w.what}" for w in convert.WRITERS.values()),
        f"choose the format with --format NAME ({', '.join(convert.WRITERS)})",
    ]


@pytest.mark.parametrize("name", ["out.h5", "out.keras", "out.npz", "out.txt", "m.index", "o.H5"])
def test_an_extension_convert_does_not_write_is_refused_and_nothing_is_written(
    tmp_path: Path, source: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    assert main(["convert", str(source), str(out / name)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured
    assert captured.err.startswith(f"cudnn-rnn: error: convert: {str(out / name)!r} ends in ")
    for part in _refusal_parts(Path(name).suffix):
        assert part in captured.err, (part, captured.err)
    assert os.listdir(out) == []


def test_the_output_is_refused_before_the_source_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\0" * 4)  # read, it would be refused as a corrupt safetensors file
    assert main(["convert", str(junk), str(tmp_path / "out.h5")]) == 2
    err = capsys.readouterr().err
    assert "ends in '.h5', which names no format written" in err and "junk" not in err


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("model", files.TF1),  # no extension: a TF1 prefix
        ("model.ckpt", files.TF1),
        ("model.ckpt-1000", files.TF1),  # what TF's saver writes
        ("M.SAFETENSORS", files.SAFETENSORS),  # the extension in any case
        ("m.onnx", files.ONNX),
        ("m.Pt", files.TORCH_ZIP),
        ("m.pth", files.TORCH_ZIP),
    ],
)
def test_names_that_pick_a_format(
    tmp_path: Path, source: Path, name: str, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    dst = tmp_path / name
    assert main(["convert", str(source), str(dst)]) == 0
    writer = convert.writer_for(dst)
    assert f" ({writer.what}): CudnnLSTM 1 layer(s)" in capsys.readouterr().out
    assert files.sniff(dst) == kind
    if kind == files.TF1:
        assert sorted(os.listdir(tmp_path)) == sorted(
            [f"{name}.index", f"{name}.data-00000-of-00001", "src"]
        )


@pytest.mark.parametrize(("fmt", "kind"), [("safetensors", files.SAFETENSORS), ("tf1", files.TF1)])
def test_format_writes_that_format_whatever_the_extension(
    tmp_path: Path, source: Path, fmt: str, kind: str
) -> None:
    dst = tmp_path / "weights.h5"
    assert main(["convert", str(source), str(dst), "--format", fmt]) == 0
    assert files.sniff(dst) == kind


def test_format_against_the_extension_of_another_format_is_refused(
    tmp_path: Path, source: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dst = tmp_path / "m.onnx"
    assert main(["convert", str(source), str(dst), "--format", "tf1"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"cudnn-rnn: error: convert: {str(dst)!r} ends in '.onnx', the extension of onnx files, "
        "but --format tf1 was asked for; rename it.\n"
    )
    assert sorted(os.listdir(tmp_path)) == ["src"]
    with pytest.raises(SystemExit):
        main(["convert", str(source), str(dst), "--format", "h5"])
    assert "invalid choice: 'h5'" in capsys.readouterr().err


def test_help_and_choices_come_from_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["convert", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for writer in convert.WRITERS.values():
        assert f"{writer.name} ({writer.shown()})" in text, (writer, text)
    assert "--format {" + ",".join(convert.WRITERS) + "}" in text


def test_to_file_refuses_before_writing(tmp_path: Path) -> None:
    layer = CudnnLSTM(1, 2, input_size=3, seed=0)
    with pytest.raises(ValueError, match=r"^convert: '.*x\.npz' ends in '\.npz', which names no "):
        convert.to_file(layer, tmp_path / "x.npz")
    with pytest.raises(
        ValueError, match=r"format=NAME takes safetensors, onnx, torch, tf1, got 'h5'"
    ):
        convert.to_file(layer, tmp_path / "x", format="h5")
    assert os.listdir(tmp_path) == []
    assert convert.to_file(layer, tmp_path / "x.npz", format="safetensors").name == "safetensors"
    assert files.sniff(tmp_path / "x.npz") == files.SAFETENSORS


def _entry_point() -> list[str]:
    """The installed ``cudnn-rnn`` script beside this interpreter."""
    found = shutil.which("cudnn-rnn", path=os.path.dirname(sys.executable))
    if found is None:  # pragma: no cover - an environment without the console script
        pytest.skip("the cudnn-rnn console script is not installed beside this interpreter")
    return [found]


def test_the_installed_command_refuses_and_writes_nothing(tmp_path: Path, source: Path) -> None:
    dst = tmp_path / "out" / "model.h5"
    dst.parent.mkdir()
    result = subprocess.run(
        [*_entry_point(), "convert", str(source), str(dst)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2 and result.stdout == "", result
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"cudnn-rnn: error: convert: {str(dst)!r} ends in '.h5'")
    for part in _refusal_parts(".h5"):
        assert part in result.stderr, (part, result.stderr)
    assert os.listdir(dst.parent) == []
