"""tools/engine_ab.py: two builds of the native engine timed in one process."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from cudnn_rnn.engines import native, native_library
from tests.support.paths import ROOT
from tools import engine_ab
from tools.sanitize import compiler

needs_engine = pytest.mark.skipif(not native.available(), reason="the native engine is not built")


def _package_library() -> Path:
    found = sorted((ROOT / "src" / "cudnn_rnn").glob("_engine*.so"))
    if not found:
        pytest.skip("the package's engine is not built in the source tree")
    return found[0]


@pytest.mark.parametrize(
    ("text", "shape"),
    [
        ("lstm:25:1:256", engine_ab.Shape("lstm", 25, 1, 256)),
        ("rnn_relu:3:4:5:train", engine_ab.Shape("rnn_relu", 3, 4, 5, True)),
    ],
)
def test_shapes_parse(text: str, shape: engine_ab.Shape) -> None:
    assert engine_ab.Shape.parse(text) == shape


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("lstm:25:1", "expected mode:T:B:H"),
        ("conv:1:1:1", "expected mode:T:B:H"),
        ("gru:a:1:1", "must be integers"),
        ("gru:0:1:1", "at least 1"),
    ],
)
def test_bad_shapes_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        engine_ab.Shape.parse(text)


@needs_engine
def test_a_build_against_itself_gives_the_same_bits_and_a_ratio_near_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    library = str(_package_library())
    argv = ["--base", library, "--head", library, "--pairs", "3", "--block", "0.01"]
    assert engine_ab.main([*argv, "--shapes", "gru:3:2:8", "lstm:2:3:5:train"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("gru (3, 2, 8) no-grad: base ")
    assert out[2].startswith("lstm (2, 3, 5) training: base ")
    for line in out[1:]:
        assert line.endswith("; same bits")
        # A ratio is printed (its value is the machine's noise between two runs of one
        # library: no bound on it could both hold on a busy machine and mean something).
        ratio = float(line.split("head / base ")[1].split()[0])
        assert ratio > 0 and np.isfinite(ratio)
    assert native_library._library().lib is not None  # the package's own library is back


@needs_engine
def test_a_revision_is_built_from_its_sources(tmp_path: Path) -> None:
    git = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True)
    if git.returncode:
        pytest.skip("not a git checkout")
    if compiler() is None:
        pytest.skip("no C compiler")
    library = engine_ab.build("HEAD", tmp_path)
    assert library == tmp_path / "HEAD" / "engine.so" and library.stat().st_size > 0
    assert (tmp_path / "HEAD" / "kernel.inc").read_bytes() == subprocess.run(
        ["git", "-C", str(ROOT), "show", "HEAD:src/cudnn_rnn/_native/kernel.inc"],
        capture_output=True,
        check=True,
    ).stdout
    shape = engine_ab.Shape("gru", 2, 1, 4)
    results = engine_ab.compare(library, _package_library(), [shape], 1, 0.01)
    assert len(results) == 1 and results[0].base > 0 and results[0].head > 0


def test_a_side_that_is_neither_a_file_nor_a_revision_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--base", "no-such-revision-xyz", "--shapes", "gru:1:1:1"]
    assert engine_ab.main(argv) == 2
    assert "no-such-revision-xyz: not a .so file nor a revision" in capsys.readouterr().err
