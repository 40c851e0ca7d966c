"""The instruction sets a bit-equality test runs at: every one the engine was built with, each
forced in turn; one this machine cannot execute is a reported skip (``pytest -ra`` lists it),
never a case that silently is not there. And :func:`threads_kept`, for a test that sets torch's
thread count."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch

from cudnn_rnn.engines import native


def isa_params() -> list[Any]:
    """``pytest.param`` per built instruction set, best first, skipped where this machine
    cannot run it (an AVX2 machine reports its AVX-512 cases as skipped)."""
    runnable = native.level_names()
    return [
        pytest.param(
            name,
            id=name,
            marks=pytest.mark.skipif(
                name not in runnable,
                reason=f"this machine cannot run {name}: its bits are untested here",
            ),
        )
        for name in native.built_level_names()
    ]


@contextmanager
def threads_kept() -> Iterator[None]:
    """torch's thread count back as it was after the block, which may set it."""
    threads = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(threads)
