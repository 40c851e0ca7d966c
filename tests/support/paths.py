"""Where the tests find the repository and the fixtures made with real TensorFlow and Keras."""

from __future__ import annotations

from pathlib import Path

#: The repository's root (the folder of Makefile and src/).
ROOT = Path(__file__).resolve().parents[2]
#: tests/fixtures: files made with real TensorFlow, Keras and cuDNN, with the scripts that made
#: them (each says what the producer computed and what the script chose itself).
FIXTURES = ROOT / "tests" / "fixtures"
