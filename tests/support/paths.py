"""Where the tests find the repository and the fixtures written by real TensorFlow and Keras."""

from __future__ import annotations

from pathlib import Path

#: The repository's root (the folder of Makefile and src/).
ROOT = Path(__file__).resolve().parents[2]
#: tests/fixtures: files written by real TensorFlow, Keras and cuDNN, with the scripts that wrote
#: them.
FIXTURES = ROOT / "tests" / "fixtures"
