"""The README's Python examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_docs import SHOWS_RESULT

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_examples_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "the README has no Python example"
    for block in blocks:
        # A block shows a result, and asserts it: one that only runs would pass however wrong
        # the result it shows.
        assert SHOWS_RESULT.search(block), block
        exec(compile(block, str(README), "exec"), {})
