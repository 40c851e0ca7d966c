"""The runnable examples of docs/migration.md run as written (one per artifact section).

The side-by-side TF 1.x code at the top needs TensorFlow and a GPU and is not run; every Python
block of the sections below is, from the repository's root (examples may name fixture files).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.test_docs import SHOWS_RESULT

ROOT = Path(__file__).resolve().parents[1]
MIGRATION = ROOT / "docs" / "migration.md"

#: Sections whose Python blocks run as written (heading text, as in the file).
RUNNABLE = (
    "ONNX models that run with X alone",
    "torch state_dicts, TorchScript archives and NumPy arrays",
    "Keras 2 .h5 files",
    "TF1 training checkpoints with optimizer state",
)


def section_blocks(heading: str) -> list[str]:
    text = MIGRATION.read_text()
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, flags=re.S | re.M)
    assert match, f"docs/migration.md has no section {heading!r}"
    return re.findall(r"```python\n(.*?)```", match.group(1), flags=re.S)


@pytest.mark.parametrize("heading", RUNNABLE)
def test_section_examples_run(heading: str, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = section_blocks(heading)
    assert blocks, f"section {heading!r} has no Python example"
    monkeypatch.chdir(ROOT)
    for block in blocks:
        assert SHOWS_RESULT.search(block), f"{heading}: a block asserts nothing"
        exec(compile(block, f"{MIGRATION}:{heading}", "exec"), {"__name__": "__example__"})
    assert os.getcwd() == str(ROOT)
