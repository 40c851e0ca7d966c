"""Test configuration: tests marked `cuda` skip where no CUDA device is present."""

from __future__ import annotations

import os

# Keras 3 runs on its torch backend in our tests (no TensorFlow in the test run).
os.environ.setdefault("KERAS_BACKEND", "torch")

import pytest
import torch

# The scripts that wrote the fixtures run with real TensorFlow / tf-keras in a separate
# environment (see their docstrings); they are not tests and import what the test run lacks.
collect_ignore_glob = ["fixtures/*"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
