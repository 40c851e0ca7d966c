"""Test configuration: tests marked `cuda` skip where no CUDA device is present."""

from __future__ import annotations

import os
from collections import Counter

# Keras 3 runs on its torch backend in our tests (no TensorFlow in the test run).
os.environ.setdefault("KERAS_BACKEND", "torch")

import pytest
import torch

# The scripts that wrote the fixtures run with real TensorFlow / tf-keras in a separate
# environment (see their docstrings); they are not tests and import what the test run lacks.
collect_ignore_glob = ["fixtures/*"]


#: The files with the longest tests (a sanitizer build and its run, fresh processes, mypy), run
#: first: `make test` hands whole files to its two workers (xdist's loadfile, with
#: --no-loadscope-reorder), and one of these left for last kept one worker busy a minute or more
#: after the other had finished. Order only: every test runs either way.
FIRST = (
    "tests/engines/test_sanitize.py",
    "tests/test_benchmark_suite.py",
    "tests/test_discoverability.py",
    "tests/test_fuzz.py",
    "tests/test_distributed.py",
    "tests/test_engine_ab.py",
    "tests/test_export.py",
)


def _file_order(items: list[pytest.Item]) -> None:
    """``items`` in place: the files of :data:`FIRST` first, then the others by their number
    of tests, most first (as xdist orders them by default), each file's tests in their order."""
    paths = [item.nodeid.split("::")[0] for item in items]
    rank = {
        path: (FIRST.index(path), 0) if path in FIRST else (len(FIRST), -count)
        for path, count in Counter(paths).items()
    }
    ranked = sorted(zip(paths, items), key=lambda pair: rank[pair[0]])  # (stable)
    items[:] = [item for _, item in ranked]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _file_order(items)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
