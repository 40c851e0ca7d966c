"""What a file names reaches a terminal only quoted and escaped: escape sequences (a window title,
a cleared screen, colours), newlines that would forge lines of output, bidi controls that would
reorder them. files.escape/quote do it; the CLI, FoundRNN.describe() and the messages built from a
file's names go through them."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from cudnn_rnn import convert
from cudnn_rnn.cli import main
from cudnn_rnn.io import files
from cudnn_rnn.io.found import FoundRNN

#: Names a hostile file may hold: a window title, a screen clear, a forged line, a bidi override.
HOSTILE = ["\x1b]0;pwned\x07", "\x1b[2J", "a\nFORGED LINE", "\u202e"]
#: More characters that must never reach a terminal as they are.
NON_PRINTABLE = ["\r", "\x85", "\u2028", "\u2029", "\u200f", "\ufeff", "\x00", "\x7f"]


def _clean(text: str) -> bool:
    """Whether every line of ``text`` prints as it is: no control or format character in it."""
    return all(line.isprintable() for line in text.split("\n"))


# -- the helpers ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", HOSTILE + NON_PRINTABLE)
def test_escape_and_quote_leave_nothing_that_does_not_print(name: str) -> None:
    text = f"x{name}y"
    assert files.escape(text).isprintable() and files.quote(text).isprintable()
    assert files.escape(text) == repr(text)[1:-1]  # as Python writes it in a literal
    assert files.quote(text) == repr(text)
    assert files.escape(files.escape(text)) == files.escape(text)  # escaping twice: no change
    assert files.listed([text, text]).isprintable()
    assert files.first_line(ValueError(f"bad {text}")).isprintable()


def test_escape_keeps_what_prints() -> None:
    text = "name/with 'quotes', \\backslashes\\, ü, 中文 and emoji 🙂"
    assert files.escape(text) == text
    assert files.quote(text) == repr(text)


def test_quote_escapes_an_objects_repr_and_clips_unless_told() -> None:
    class Odd:
        def __repr__(self) -> str:
            return "odd\x1b[2J\n"

    assert files.quote(Odd()) == "odd\\x1b[2J\\n"
    long = "\x1b" * 100
    assert len(files.quote(long)) == 123 and files.quote(long).endswith("...")
    assert files.quote(long, None) == repr(long)


def test_describe_quotes_the_name_and_escapes_the_rest() -> None:
    for name in HOSTILE:
        line = FoundRNN(
            name, f"node {name}", "onnx", None, computable=False, reasons=(f"has {name}",)
        ).describe()
        assert line.isprintable(), line
        assert line.startswith(f"{name!r}: not a cuDNN mode at node {files.escape(name)}")
        assert line.endswith(f"we cannot compute it: has {files.escape(name)}")


# -- files with such names --------------------------------------------------------------------


def _state() -> dict[str, torch.Tensor]:
    """An LSTM per hostile prefix, and a stray tensor under each hostile name."""
    torch.manual_seed(0)
    state: dict[str, torch.Tensor] = {}
    for name in HOSTILE:
        for key, value in torch.nn.LSTM(2, 3).state_dict().items():
            state[f"{name}.{key}"] = value
        state[name] = torch.zeros(2)
    return state


def _torch_file(folder: Path) -> Path:
    path = folder / "hostile.pt"
    torch.save(_state(), path)
    return path


def _safetensors_file(folder: Path) -> Path:
    """The same tensors as a safetensors file, written by hand (no metadata: torch names)."""
    header: dict[str, object] = {}
    data = bytearray()
    for key, value in _state().items():
        raw = np.ascontiguousarray(value.numpy(), dtype="<f4").tobytes()
        header[key] = {
            "dtype": "F32",
            "shape": list(value.shape),
            "data_offsets": [len(data), len(data) + len(raw)],
        }
        data += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path = folder / "hostile.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + bytes(data))
    return path


@pytest.fixture(params=["torch", "safetensors"])
def hostile(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    return _torch_file(tmp_path) if request.param == "torch" else _safetensors_file(tmp_path)


def _entry_point() -> str:
    found = shutil.which("cudnn-rnn", path=os.path.dirname(sys.executable))
    if found is None:  # pragma: no cover - an environment without the console script
        pytest.skip("the cudnn-rnn console script is not installed beside this interpreter")
    return found


def _run(
    args: list[str], capsys: pytest.CaptureFixture[str], installed: bool = True
) -> list[tuple[int, str, str]]:
    """The exit code, stdout and stderr of ``cudnn-rnn ARGS``: through main, then (unless not
    ``installed``) through the installed command in a process of its own (the bytes it writes,
    decoded strictly; a process costs a second or two, so not every case starts one)."""
    code = main(args)
    captured = capsys.readouterr()
    if not installed:
        return [(code, captured.out, captured.err)]
    proc = subprocess.run([_entry_point(), *args], capture_output=True, timeout=120, check=False)
    out, err = proc.stdout.decode("utf-8"), proc.stderr.decode("utf-8")
    return [(code, captured.out, captured.err), (proc.returncode, out, err)]


def test_inspect_prints_every_name_quoted_and_escaped(
    hostile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = _state()
    rnns = convert.find_rnns(hostile)
    assert {r.name for r in rnns} == set(HOSTILE)  # a newline in a prefix included
    for code, out, err in _run(["inspect", str(hostile)], capsys):
        assert (code, err) == (0, "")
        assert _clean(out), out
        lines = out.splitlines()
        # The header, one line per tensor, the count, one line per RNN: no line more.
        assert len(lines) == 1 + len(state) + 1 + len(rnns), out
        for name in state:
            assert sum(line.startswith(f"  {name!r} ") for line in lines) == 1, name
        for rnn in rnns:
            assert f"  {rnn.describe()}" in lines


def test_convert_errors_and_output_are_one_escaped_line(
    hostile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Several RNNs and no --model: the one error line lists their names.
    for code, out, err in _run(["convert", str(hostile), str(tmp_path / "x.onnx")], capsys):
        assert code == 2 and out == "" and err.count("\n") == 1 and _clean(err), err
        assert "'\\x1b]0;pwned\\x07', '\\x1b[2J', 'a\\nFORGED LINE' and 1 more" in err
    # A name it does not hold, itself hostile: the line names it and what the file holds.
    args = ["convert", str(hostile), str(tmp_path / "x.onnx"), "--model", "b\nFORGED\x1b[2J"]
    for code, out, err in _run(args, capsys, installed=False):
        assert code == 2 and out == "" and err.count("\n") == 1 and _clean(err), err
        assert "'b\\nFORGED\\x1b[2J'" in err
    # One of them picked: the one line of output.
    args = ["convert", str(hostile), str(tmp_path / "y.safetensors"), "--model", "\u202e"]
    for code, out, err in _run(args, capsys, installed=False):
        assert (code, err) == (0, "") and out.count("\n") == 1 and _clean(out), out
    # An output name with such characters is refused in one escaped line, and nothing written
    # (through main: the first case above had the installed command write an error line).
    dst = tmp_path / "out\x1b[2J\n.h5"
    for code, out, err in _run(["convert", str(hostile), str(dst)], capsys, installed=False):
        assert code == 2 and out == "" and err.count("\n") == 1 and _clean(err), err
        assert repr(str(dst)) in err
    assert not dst.exists()
