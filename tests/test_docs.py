"""The documentation site builds strictly, its reference covers the public surface, and the
Python examples of its pages run as written.

The site is mkdocs.yml over docs/ (``make docs``). ``mkdocs build --strict`` fails on any broken
link, anchor, cross-reference, page left out of the navigation or docstring the reference cannot
render. Every ```` ```python ```` block of a page runs, the page's blocks in order in one
namespace, from the repository's root (examples may read tests/fixtures; what they write goes to
temporary folders), unless the page is in NOT_RUN with the reason.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

#: Pages whose Python blocks are not run, and why.
NOT_RUN = {
    "api.md": "signatures and fragments, not programs (the docstrings' examples run as doctests)",
    "migration.md": "the TF 1.x side needs TensorFlow; the runnable sections run in "
    "tests/test_migration_examples.py",
}

#: How a runnable block asserts what it shows.
SHOWS_RESULT = re.compile(r"^\s*(assert |torch\.testing\.assert_|np\.testing\.)", re.M)

#: The modules whose every public name (``__all__``) the reference must document.
PUBLIC = ("cudnn_rnn", "cudnn_rnn.nn", "cudnn_rnn.ops", "cudnn_rnn.convert",
          "cudnn_rnn.checkpoint", "cudnn_rnn.core")  # fmt: skip

#: Names of ``__all__`` that are not objects to document.
NOT_OBJECTS = {"__version__"}


def pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "_ext" not in p.parts)


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.S | re.M)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not all(importlib.util.find_spec(m) for m in ("mkdocs", "mkdocstrings", "material")):
        pytest.skip(
            "mkdocs-material and mkdocstrings are not installed: "
            "pip install --no-build-isolation -e '.[docs]'"
        )
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-f", "mkdocs.yml",
         "-d", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, f"mkdocs build --strict failed:\n{run.stdout}\n{run.stderr}"
    return out


def test_site_builds_strictly(site: Path) -> None:
    for page in ("index.html", "reference/cudnn_rnn.html", "howto/loading.html", "benchmarks.html"):
        assert (site / page).is_file(), page
    assert (site / "benchmarks.png").is_file()


def inventory(site: Path) -> set[str]:
    """The objects the reference documents: the names of its objects.inv (Sphinx's format)."""
    data = (site / "objects.inv").read_bytes()
    body = zlib.decompress(data.split(b"\n", 4)[4]).decode()
    return {line.split(" ", 1)[0] for line in body.splitlines() if " py:" in line}


@pytest.mark.parametrize("module", PUBLIC)
def test_reference_covers_every_public_name(site: Path, module: str) -> None:
    names = inventory(site)
    public = [n for n in importlib.import_module(module).__all__ if n not in NOT_OBJECTS]
    missing = [f"{module}.{n}" for n in public if f"{module}.{n}" not in names]
    assert not missing, f"the API reference lacks {missing}"


def test_every_page_with_examples_runs_them_or_says_why() -> None:
    assert set(NOT_RUN) <= {p.relative_to(DOCS).as_posix() for p in pages()}
    assert any(python_blocks(p) for p in pages() if p.name not in NOT_RUN)


# Keras' torch backend converts with np.array(tensor), which NumPy 2 flags for torch's __array__:
# a third-party deprecation, not ours (as in tests/converters/test_keras.py).
@pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning"
)
# torch.export's own deprecation in torch.onnx.export's exporter (as in tests/test_export.py).
@pytest.mark.filterwarnings(
    r"ignore:`isinstance\(treespec, LeafSpec\)` is deprecated:FutureWarning"
)
@pytest.mark.parametrize(
    "page",
    [p.relative_to(DOCS).as_posix() for p in pages() if python_blocks(p)],
)
def test_page_examples_run(page: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if page in NOT_RUN:
        pytest.skip(NOT_RUN[page])
    monkeypatch.chdir(ROOT)
    namespace = {"__name__": "__docs_example__"}
    for i, block in enumerate(python_blocks(DOCS / page)):
        # A block shows a result, and asserts it (one that only ran would pass however wrong).
        assert SHOWS_RESULT.search(block), f"docs/{page} block {i + 1} asserts nothing"
        exec(compile(block, f"docs/{page} (python block {i + 1})", "exec"), namespace)
