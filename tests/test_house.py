"""The house keeps its shape (issue 46, docs/internals/architecture.md): one idea a file (no
module over :data:`MAX_LINES` lines), no folder holding more than :data:`MAX_MODULES` modules
directly, and every import path the README and the docs use importable (an old path through
``cudnn_rnn._moved``, a new one as itself). The levels and their import rules are
tests/test_import_graph.py."""

from __future__ import annotations

import importlib
import re

import pytest

import cudnn_rnn
from cudnn_rnn import _moved
from tests.support.paths import ROOT

PACKAGE = ROOT / "src" / "cudnn_rnn"
MAX_LINES = 800
MAX_MODULES = 15
#: Dotted names in the docs that are not import paths of this package: TF's own module
#: (``tensorflow.contrib.cudnn_rnn.python.ops``), the operator's namespace in ``torch.ops``
#: (``torch.ops.cudnn_rnn.rnn``), file names, our checkpoints' format string
#: (``"cudnn_rnn.canonical"``) and a module the design notes say was removed.
NOT_PATHS = re.compile(
    r"(contrib|ops|\w)\.cudnn_rnn|cudnn_rnn\.(md|py|rnn|canonical|distributed)\b"
)
DOTTED = re.compile(r"(?<![\w/])cudnn_rnn(?:\.[A-Za-z_]\w*)+")


def test_no_module_is_over_800_lines() -> None:
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines (split them along their ideas): {long}"


def test_no_folder_holds_more_than_15_modules() -> None:
    crowded = {}
    for folder in [PACKAGE, *[p for p in PACKAGE.rglob("*") if p.is_dir()]]:
        modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
        if len(modules) > MAX_MODULES:
            crowded[str(folder.relative_to(PACKAGE.parent))] = len(modules)
    assert not crowded, f"folders with more than {MAX_MODULES} modules: {crowded}"


def _documented() -> list[str]:
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found: set[str] = set()
    for path in texts:
        text = path.read_text(encoding="utf-8")
        for m in DOTTED.finditer(text):
            before = text[max(0, m.start() - 20) : m.end()]
            if not NOT_PATHS.search(before[-(m.end() - m.start()) - 9 :]):
                found.add(m.group(0).rstrip("."))
    return sorted(found)


def _resolve(dotted: str) -> object:
    """The object ``dotted`` names: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:k]))
        except ModuleNotFoundError:
            continue
        for name in parts[k:]:
            obj = getattr(obj, name)
        return obj
    raise ModuleNotFoundError(dotted)


@pytest.mark.parametrize("dotted", _documented())
def test_every_documented_path_is_importable(dotted: str) -> None:
    _resolve(dotted)


def test_old_paths_are_the_moved_modules() -> None:
    """Every moved path gives the very module it moved to (a patch of either patches both)."""
    assert cudnn_rnn.__name__ == "cudnn_rnn"
    for old, new in _moved.MOVED.items():
        assert importlib.import_module(f"cudnn_rnn.{old}") is importlib.import_module(
            f"cudnn_rnn.{new}"
        ), old
    from cudnn_rnn.formats.tf1 import bundle

    from cudnn_rnn import files  # the old top-level names too
    from cudnn_rnn.io import files as new_files
    from cudnn_rnn.io.tf1 import bundle as new_bundle

    assert files is new_files and bundle is new_bundle


def test_nothing_in_the_package_uses_an_old_path() -> None:
    old = "|".join(re.escape(f"cudnn_rnn.{o}") for o in sorted(_moved.MOVED, key=len)[::-1])
    imports = re.compile(rf"^\s*(from ({old})\b|import ({old})\b)", re.M)
    users = [
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if p.name != "_moved.py" and imports.search(p.read_text(encoding="utf-8"))
    ]
    assert not users, f"modules importing an old path: {users}"
