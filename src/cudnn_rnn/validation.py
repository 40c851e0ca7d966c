"""Argument checks shared by the op level, the layers, the cells and the saveables (below all
of them).

Each raises ``TypeError`` for a wrong type and ``ValueError`` for a bad value; the message
names the owner (``ops.CudnnLSTM``, ``CudnnGRU``, ``dynamic_rnn`` ...), the argument, what was
expected and what was got.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "DTYPES",
    "NUMPY_TO_TORCH",
    "check_dtype",
    "check_lengths",
    "check_one_device",
    "or_convert_owner",
]

DTYPES: tuple[torch.dtype, ...] = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
NUMPY_TO_TORCH = {
    np.dtype(np.float16): torch.float16,
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float64): torch.float64,
}


def check_dtype(owner: str, dtype: object) -> torch.dtype:
    """A supported floating dtype (``torch.float32`` or its name ``"float32"``)."""
    value = getattr(torch, dtype, None) if isinstance(dtype, str) else dtype
    if isinstance(value, torch.dtype) and value in DTYPES:
        return value
    if not isinstance(dtype, (str, torch.dtype)):
        raise TypeError(
            f"{owner}: dtype must be a torch.dtype, got {type(dtype).__name__} {dtype!r}."
        )
    raise ValueError(
        f"{owner}: only float16, bfloat16, float32 and float64 are supported, provided {dtype!r}."
    )


def or_convert_owner(got: torch.dtype, clause: str) -> str:
    """The second half of the advice for a tensor of dtype ``got`` that does not match its
    owner's: ``clause`` (such as ``" or the cell with .to({})"``) filled with ``got`` where
    ``got`` is a dtype the package computes in, so that no message suggests converting a
    model to an integer, bool or complex dtype; otherwise a note saying which dtypes are.

    >>> or_convert_owner(torch.float64, " or the cell with .to({})")
    ' or the cell with .to(torch.float64)'
    >>> or_convert_owner(torch.int32, " or the cell with .to({})")
    ' (RNNs compute in float16, bfloat16, float32 or float64, not torch.int32)'
    """
    if got in DTYPES:
        return clause.format(got)
    return f" (RNNs compute in float16, bfloat16, float32 or float64, not {got})"


def check_one_device(owner: str, what: str, tensors: Iterable[Tensor]) -> torch.device | None:
    """The one device ``tensors`` are on (None when there are none); ValueError naming every
    device when they are on several, rather than gathering them silently on one."""
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        raise ValueError(f"{owner}: {what} must be on one device, got {sorted(map(str, devices))}.")
    return next(iter(devices), None)


def check_lengths(owner: str, name: str, lengths: Any, steps: int, batch: int) -> Tensor:
    """Sequence lengths as a CPU int64 tensor ``[batch]`` with values in ``[1, steps]``.

    Accepts an integer tensor (any device), array or list; TypeError for non-integers,
    ValueError for a wrong shape or a value out of range.
    """
    if isinstance(lengths, Tensor):
        if (
            lengths.dtype.is_floating_point
            or lengths.dtype.is_complex
            or lengths.dtype == torch.bool
        ):
            raise TypeError(f"{owner}: {name} must hold integers, got dtype {lengths.dtype}.")
        t = lengths.detach().to("cpu", torch.int64)
    else:
        arr = np.asarray(lengths)
        if arr.dtype.kind not in "iu":
            raise TypeError(
                f"{owner}: {name} must be integers (a tensor, array or list), got "
                f"{type(lengths).__name__} of dtype {arr.dtype}."
            )
        t = torch.as_tensor(arr, dtype=torch.int64)
    if tuple(t.shape) != (batch,):
        raise ValueError(
            f"{owner}: {name} must have shape [batch] = ({batch},), got {tuple(t.shape)}."
        )
    if torch.compiler.is_compiling() or batch == 0:
        return t  # the values are checked by the operator when it runs (no data-dependent guard)
    low, high = int(t.min()), int(t.max())
    if low < 1 or high > steps:
        raise ValueError(
            f"{owner}: {name} must be in [1, {steps}] (the number of time steps), got values "
            f"from {low} to {high}."
        )
    return t
