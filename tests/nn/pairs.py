"""Ours and torch.nn's module of one configuration, made from the same seed (the same
initial values): the oracle pairs of tests/nn."""

from __future__ import annotations

from typing import Any

import torch

IN, H = 5, 4


def pair(kinds: dict[str, tuple[Any, Any, dict[str, Any]]], kind: str, seed: int = 0,
         **options: Any) -> tuple[Any, Any]:  # fmt: skip
    """``(ours, torch.nn's)`` of ``kinds[kind]`` (classes and extra arguments), ``IN`` to ``H``."""
    ours, theirs, extra = kinds[kind]
    torch.manual_seed(seed)
    a = ours(IN, H, **extra, **options)
    torch.manual_seed(seed)
    b = theirs(IN, H, **extra, **options)
    return a, b
