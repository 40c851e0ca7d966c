"""TF's default weight initialiser, once: what the layers and the compatible cells draw."""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["glorot_uniform"]


def glorot_uniform(
    shape: tuple[int, ...], dtype: torch.dtype, generator: torch.Generator | None = None
) -> Tensor:
    """TF's ``glorot_uniform_initializer`` for a matrix: U(±sqrt(6 / (rows + cols))).

    Drawn in float64 on the CPU (from ``generator``, else torch's global RNG, as torch.nn does)
    and then cast, so one seed gives the same matrix in every dtype and on every device.

    >>> w = glorot_uniform((3, 5), torch.float32, torch.Generator().manual_seed(0))
    >>> w.dtype, bool(w.abs().max() <= (6 / 8) ** 0.5)
    (torch.float32, True)
    >>> gen = torch.Generator().manual_seed(0)
    >>> torch.equal(w, glorot_uniform((3, 5), torch.float64, gen).float())
    True
    """
    rows, cols = shape  # only matrices are drawn this way
    limit = math.sqrt(6.0 / (rows + cols))
    u = torch.rand(shape, generator=generator, dtype=torch.float64)
    return ((2 * u - 1) * limit).to(dtype)
