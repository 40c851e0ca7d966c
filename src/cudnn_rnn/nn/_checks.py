"""The checks torch.nn's RNNs and cells leave to their kernels, made before our operator.

torch.nn's Python code checks the input's and the states' dimensions and sizes (its own
methods, which :mod:`cudnn_rnn.nn.modules` borrows, and the cells' ``forward``); the rest is
found by aten's kernels, with messages about their internals (``get_mkldnn_dtype:
unsupported data type``, ``mat1 and mat2 must have the same dtype``, ``lstm expects two hidden
states``), or not at all: a ``PackedSequence`` whose ``batch_sizes`` do not describe its data
corrupts the heap in ``pad_packed_sequence``, and ``torch.nn.LSTM`` given a misshapen state
with a packed input crashes. Here each of those mistakes is found first and named, with the
exception type torch.nn raises for it, so that our engines see only arguments they can run and
their "a bug: please report it" means a bug of ours.

Where torch.nn raises one builtin or another for the same mistake depending on an incidental
shape (a state of the wrong kind: ``AttributeError`` where it calls ``.dim()`` on a tuple,
``IndexError`` where it indexes a one-element tuple, ``RuntimeError`` or ``TypeError`` from its
kernel; a cell's state batched for an unbatched input or the reverse), ours raises
:class:`RNNArgumentError`, which is each of them: an ``except`` written against torch.nn
catches it, and it is a ``TypeError`` as the package's wrong-type errors are. Where torch.nn's
Python code accepts a state by accident (a stacked tensor ``[2, ...]`` as an LSTM's
``(h_0, c_0)`` where it only indexes it, a third element it never reads), so do we; where only
its kernels would make something of a mistake (a ``c_0`` of another dtype type-promoted by its
unfused CPU kernels, an unbatched cell input's ``[H, H]`` state broadcast), ours refuses it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from cudnn_rnn.errors import CudnnRNNError
from cudnn_rnn.validation import or_convert_owner

__all__ = [
    "RNNArgumentError",
    "check_cell_state_dims",
    "check_packed",
    "check_packed_state_dims",
    "check_pair",
    "check_state_tensor",
    "check_tensors",
    "describe",
    "refuse_no_steps",
    "refuse_non_floating",
]


class RNNArgumentError(CudnnRNNError, TypeError, AttributeError, IndexError, RuntimeError):
    """A state (``hx``) or ``batch_sizes`` of the wrong kind or dimensions. A ``TypeError``,
    and each builtin torch.nn raises for the same mistake, so that code written against
    torch.nn catches it (and, as every error class of the package, a ``CudnnRNNError``)."""


def describe(value: object) -> str:
    """``value`` in a message: a tensor's shape and dtype, a tuple's length and kinds."""
    if isinstance(value, Tensor):
        return f"a tensor of shape {tuple(value.shape)} ({value.dtype})"
    if isinstance(value, (tuple, list)):
        kinds = ", ".join(type(v).__name__ for v in value[:4]) + (", ..." if len(value) > 4 else "")
        return f"a {type(value).__name__} of {len(value)} ({kinds})"
    if isinstance(value, type):
        return f"the class {value.__name__}"
    return f"{type(value).__name__} {value!r:.60}"


def check_pair(owner: str, hx: Any, *, exact: bool) -> None:
    """An LSTM's state: ``exact``, what its kernel takes (a tuple or list of exactly two
    tensors); otherwise what torch.nn's Python code reads of it: ``hx[0]`` and ``hx[1]``,
    tensors (so a longer tuple or a stacked tensor passes, as in torch.nn)."""
    if exact:
        ok = isinstance(hx, (tuple, list)) and len(hx) == 2
    else:
        try:
            ok = hx[1] is not None  # (a tensor: its rows; a dict: its keys 0 and 1)
        except (TypeError, IndexError, KeyError):
            ok = False
    ok = ok and isinstance(hx[0], Tensor) and isinstance(hx[1], Tensor)
    if not ok:
        raise RNNArgumentError(
            f"{owner}: hx must be a tuple (h_0, c_0) of two tensors (an LSTM's hidden and "
            f"cell states), got {describe(hx)}."
        )


def check_packed_state_dims(owner: str, states: Sequence[Tensor]) -> None:
    """The states given with a ``PackedSequence`` whose sequences were sorted: 3-D, before
    ``permute_hidden`` reorders their batch (dimension 1; torch.nn reorders whatever is
    there, and then reports the mangled shape, or an index out of bounds)."""
    if any(s.dim() != 3 for s in states):
        dims = ", ".join(f"{s.dim()}-D" for s in states)
        name = "hx and cx" if len(states) > 1 else "hx"
        raise RNNArgumentError(
            f"{owner}: for a PackedSequence input, {name} should be 3-D [num_layers * "
            f"num_directions, batch, hidden] but got ({dims}) tensors of shapes "
            f"{[tuple(s.shape) for s in states]}."
        )


def check_state_tensor(owner: str, hx: Any) -> None:
    """A GRU's or plain RNN's state: one tensor."""
    if not isinstance(hx, Tensor):
        lstm = isinstance(hx, (tuple, list)) and len(hx) == 2
        raise RNNArgumentError(
            f"{owner}: hx must be one tensor h_0, got {describe(hx)}"
            + ("; a tuple (h_0, c_0) is an LSTM's state" if lstm else "")
            + "."
        )


def refuse_non_floating(owner: str, input: Tensor, weight: Tensor) -> None:
    """torch.nn's ``check_input`` of an input that is not floating, whose advice would be to
    convert the model to the input's dtype: the same exception (ValueError), sound advice."""
    if not input.dtype.is_floating_point and input.dtype != weight.dtype:
        raise ValueError(
            f"{owner}: RNN input dtype ({input.dtype}) does not match weight dtype "
            f"({weight.dtype}). Convert input: input.to({weight.dtype})"
            + or_convert_owner(input.dtype, ", or convert model: model.to({})")
        )


def check_cell_state_dims(owner: str, states: Sequence[Tensor], batched: bool) -> None:
    """A cell's states as batched as its input (``states`` as the kernel takes them: a 1-D
    input's were unsqueezed with it); torch.nn's kernel reads their sizes as if they were."""
    for i, s in enumerate(states):
        if s.dim() != 2:
            given = tuple(s.shape) if batched else tuple(s.shape[1:])
            name = f"hx[{i}]" if len(states) > 1 else "hx"
            want = "2-D [batch, hidden_size]" if batched else "1-D [hidden_size]"
            raise RNNArgumentError(
                f"{owner}: for a {'2-D (batched)' if batched else '1-D (unbatched)'} input, "
                f"{name} must be {want} too, got a tensor of shape {given}."
            )


def refuse_no_steps(owner: str, shape: tuple[int, ...], batch_first: bool) -> None:
    """An input of ``shape`` without time steps (aten: ``Expected sequence length to be larger
    than 0 in RNN``); a batch of no sequences is fine (torch.nn returns empty results)."""
    where = "[batch, time, features] (batch_first)" if batch_first else "[time, batch, features]"
    if len(shape) == 2:
        where = "[time, features] (unbatched)"
    raise RuntimeError(
        f"{owner}: Expected sequence length to be larger than 0 in RNN: the input of shape "
        f"{shape} ({where}) has no time steps; an RNN needs at least one step to have a final "
        "state."
    )


def check_tensors(
    owner: str, kind: str, input: Tensor, states: Sequence[tuple[str, Tensor]], weight: Tensor
) -> None:
    """The input, the states and the weights on one device and, outside autocast, of one
    dtype (aten's ``check_attributes`` and its kernels'; RuntimeError as theirs). ``kind``
    names the owner in the advice (``"cell"``, ``"module"``)."""
    if input.device != weight.device:
        raise RuntimeError(
            f"{owner}: Input and parameter tensors are not at the same device, found input "
            f"tensor at {input.device} and parameter tensor at {weight.device}; move the input "
            f"with .to('{weight.device}') or the {kind} with .to('{input.device}')."
        )
    for name, t in states:
        if t.device != input.device:
            raise RuntimeError(
                f"{owner}: Input and hidden tensors are not at the same device, found input "
                f"tensor at {input.device} and hidden tensor {name} at {t.device}; move it "
                f"with .to('{input.device}')."
            )
    if torch.is_autocast_enabled(input.device.type):
        return  # (the call casts them all to the weights' dtype)
    if input.dtype != weight.dtype:
        raise RuntimeError(
            f"{owner}: input is {input.dtype} but the weights are {weight.dtype}; convert it "
            f"with .to({weight.dtype})"
            + or_convert_owner(input.dtype, f" or the {kind} with .to({{}})")
            + "."
        )
    for name, t in states:
        if t.dtype != weight.dtype:
            raise RuntimeError(
                f"{owner}: {name} is {t.dtype} but the input and the weights are "
                f"{weight.dtype}; convert it with .to({weight.dtype})."
            )


def check_packed(owner: str, data: Tensor, batch_sizes: Any) -> int:
    """The batch of a ``PackedSequence`` (``batch_sizes[0]``) whose ``batch_sizes`` describe
    its data as ``pack_padded_sequence`` makes them: a 1-D CPU int64 tensor, not empty,
    non-increasing, not negative, adding up to the data's rows. torch.nn's kernels take other
    values and read outside the data (or corrupt the heap)."""
    how = "make it with torch.nn.utils.rnn.pack_padded_sequence or pack_sequence"
    if (
        not isinstance(batch_sizes, Tensor)
        or batch_sizes.dim() != 1
        or batch_sizes.dtype != torch.int64
        or batch_sizes.device.type != "cpu"
    ):
        where = f" on {batch_sizes.device}" if isinstance(batch_sizes, Tensor) else ""
        raise RNNArgumentError(
            f"{owner}: a PackedSequence's batch_sizes must be a 1-D CPU int64 tensor, got "
            f"{describe(batch_sizes)}{where}; {how}."
        )
    if batch_sizes.numel() == 0:
        raise IndexError(f"{owner}: the PackedSequence has no time steps (empty batch_sizes).")
    if torch.compiler.is_compiling():
        return int(batch_sizes[0])  # (no data-dependent guards: torch.nn's own reading)
    sizes = batch_sizes.tolist()
    rows = data.size(0) if data.dim() >= 1 else None
    if (
        sizes[-1] < 0
        or any(a < b for a, b in itertools.pairwise(sizes))
        or (rows is not None and sum(sizes) != rows)
    ):
        shown = str(sizes) if len(sizes) <= 8 else str(sizes[:8])[:-1] + ", ...]"
        raise RuntimeError(
            f"{owner}: a PackedSequence's batch_sizes must be non-increasing, not negative, "
            f"and add up to its data's rows ({rows}), got {shown} (sum {sum(sizes)}); {how}."
        )
    return int(sizes[0])
