"""The native engine's workspace: its layout, the states it does not keep, its memory.

The layout is :func:`~cudnn_rnn.engines.common.split_workspace`'s without ``hseq``, in the
*input's* time order for both directions (the reverse direction writes step ``s`` of row ``b`` at
the time it read); plus one last element, 0 until a backward has used it. With lengths, an eager
training call keeps only the valid steps' rows, in order (``[rows, 1, w]`` views; C finds them
through a row map), a traced one every row (:func:`_compact`). The state each step started from
is not kept: the backward reads it out of the layer's output, or ``h0`` at a row's first step
(:func:`_state_before`). Its memory: a large fresh workspace asks for huge pages
(:func:`_advise_huge`), and the backward gives the parts it has finished with back to the OS as
it goes down the layers (:func:`_release`, :func:`_input_grad_releasing`).
"""

from __future__ import annotations

import ctypes
import functools
import os
from typing import Any

import torch
from torch import Tensor

from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.engines.base import Call
from cudnn_rnn.engines.common import Weights, split_workspace, workspace_numel
from cudnn_rnn.engines.native_boundary import _OURS, _ptr
from cudnn_rnn.engines.native_library import _library

__all__ = ["HUGE_BYTES", "INPUT_GRAD_CHUNK_BYTES", "RELEASE_BYTES"]


def _split(
    ws: Tensor, spec: RNNSpec, steps: int, batch: int, kept_rows: int
) -> tuple[list[list[Tensor]], list[Tensor]]:
    """The workspace's views: ``[T, B, w]`` each, or ``[rows, 1, w]`` when it keeps only the
    valid steps' rows (``kept_rows < T*B``)."""
    if kept_rows == steps * batch:
        return split_workspace(ws, spec, steps, batch, hseq=False)
    return split_workspace(ws, spec, kept_rows, 1, hseq=False)


def _compact(call: Call) -> bool:
    """The rule for the workspace with lengths: only the valid steps' rows, unless the call is
    traced (a compiled or exported graph needs a length that follows from the shapes)."""
    return call.need_grad and call.lengths and not call.traced


def _workspace_numel(spec: RNNSpec, steps: Any, batch: Any) -> Any:
    """The shared layout's length without ``hseq``, plus one element at the end: 0 until a
    backward has used the workspace (it writes the gates' gradients over the gates), then 1."""
    return workspace_numel(spec, steps, batch, hseq=False) + 1


def _state_before(
    out: Tensor,
    h0: Tensor,
    reverse: int,
    lengths: Tensor | None,
    rows: Tensor | None,
    rowmap: Tensor | None,
    into: Tensor | None = None,
) -> Tensor:
    """The state each step of one direction started from, read out of that direction's output
    ``out``: the output at the row's previous step, or ``h0`` at its first; in the workspace's
    row order, contiguous (the weight gradient's ``h_prev``).

    ``out`` is ``[T, B, H]`` (a view), or ``[rows, 1, H]`` holding only the valid steps' rows
    where ``rowmap`` (``[T*B]``, each row's place among them) is given. ``rows``: the indices
    ``t * B + b`` of the rows the workspace keeps (None: all of them, in order). ``lengths``:
    None where every sequence is full. ``into``: a contiguous buffer of the result's size to
    write it to (a part of the workspace nothing reads any more), else a new tensor.
    """
    units, batch = int(out.shape[-1]), int(h0.shape[0])
    if lengths is None:  # every row starts at t = 0 (forward) or T - 1 (reverse)
        prev = torch.empty(out.shape, dtype=out.dtype) if into is None else into.view(out.shape)
        if reverse:
            prev[:-1].copy_(out[1:])
            prev[-1].copy_(h0)
        else:
            prev[1:].copy_(out[:-1])
            prev[0].copy_(h0)
        return prev
    if rows is None:
        rows = torch.arange(int(out.shape[0]) * batch)
    t, b = rows // batch, rows % batch
    before = t + 1 if reverse else t - 1  # the previous step's time (valid where not first)
    first: Tensor = before >= lengths[b] if reverse else before < 0
    total = int(rowmap.numel()) if rowmap is not None else int(out.shape[0]) * batch
    source = (before * batch + b).clamp(0, total - 1)  # a first step's is replaced below
    if rowmap is not None:
        source = rowmap[source]
    flat = out.reshape(-1, units)
    if into is None:
        prev = flat.index_select(0, source.clamp(min=0))
    else:
        prev = torch.index_select(flat, 0, source.clamp(min=0), out=into.view(-1, units))
    starts = first.nonzero().squeeze(1)
    prev.index_copy_(0, starts, h0.index_select(0, b[starts]))
    return prev


#: The smallest part of the workspace the backward gives back to the OS (see :func:`_release`).
RELEASE_BYTES = 1 << 20
#: The gates' gradients a chunk of a layer's input gradient reads (see
#: :func:`_input_grad_releasing`).
INPUT_GRAD_CHUNK_BYTES = 4 << 20


def _release(part: Tensor) -> None:
    """Gives the whole pages of ``part`` (a contiguous part of the workspace the backward has
    finished with) back to the OS, where that lowers the step's peak for what is still to
    come. The workspace tensor lives until the backward returns (the autograd node holds it),
    so this is the only way to free it as the backward goes down the layers. It is not free:
    a syscall, and the pages fault in again wherever the allocator hands the memory out next;
    so only parts of at least :data:`RELEASE_BYTES`, and only while a lower layer is still to
    come (a single layer's backward ends with its own products)."""
    if part.numel() * part.element_size() < RELEASE_BYTES:
        return
    start = _ptr(part)
    assert start is not None
    _release_bytes(start, start + part.numel() * part.element_size())


def _release_bytes(start: int, end: int) -> None:
    """Gives back the whole pages between two addresses of one part the backward has finished
    with (``cr_release``: pages that straddle either end are kept)."""
    lib = _library().lib
    assert lib is not None
    if end > start:
        lib.cr_release(ctypes.c_void_p(start), ctypes.c_int64(end - start))


#: The smallest workspace that asks for huge pages (see :func:`_advise_huge`).
HUGE_BYTES = 8 << 20


def _advise_huge(ws: Tensor) -> None:
    """Asks the OS for transparent huge pages under a fresh workspace of at least
    :data:`HUGE_BYTES`, before the forward writes it (``cr_advise_huge``: whole 2 MiB blocks
    inside it). With 4 KiB pages a training forward spent about 30% of its time in page faults
    (3-layer bidirectional LSTM (100, 32, 256): 98 MB of workspace, 160 ms no-grad against 226
    ms with it); where the kernel keeps huge pages off, nothing changes."""
    if ws.numel() * ws.element_size() < HUGE_BYTES:
        return
    lib = _library().lib
    assert lib is not None
    lib.cr_advise_huge(_ptr(ws), ws.numel() * ws.element_size())


@functools.cache
def _page_bytes() -> int:
    """The OS's page size (4096 where it cannot be asked)."""
    try:
        return int(os.sysconf("SC_PAGESIZE"))
    except (AttributeError, ValueError, OSError):
        return 4096


def _input_grad_releasing(wt: Weights, dgi: Tensor, into: Tensor | None) -> Tensor:
    """A layer's input gradient ``dgi @ W`` (added to ``into``, the other direction's, where
    given) made in chunks of rows; after each chunk the whole pages of the gates' gradients
    it read go back to the OS (``dgi`` is a finished part of the workspace). So the input
    gradient's pages come in as the gates' go out, and the product adds nothing to the step's
    peak: the LSTM 2-layer bidirectional with lengths had its peak here (the gradient, 4.9 MB,
    made while both directions' gates were held). A chunk holds at least
    :data:`INPUT_GRAD_CHUNK_BYTES` of gates, so the products stay large and the syscalls few:
    each chunk's product packs ``W`` again (1 MiB chunks made a 2-layer bidirectional LSTM's
    products at 256 rows each, 25% slower than in 1024-row chunks)."""
    assert wt.w is not None  # a layer above the first always has its input matrix
    steps, batch, gates = int(dgi.shape[0]), int(dgi.shape[1]), int(dgi.shape[2])
    rows, width = steps * batch, int(wt.w.shape[1])
    flat = dgi.reshape(rows, gates)
    out = into.view(rows, width) if into is not None else flat.new_empty(rows, width)
    chunk = max(1, -(-INPUT_GRAD_CHUNK_BYTES // (gates * flat.element_size())))
    page = _page_bytes()
    done = 0  # the bytes of ``flat`` up to which whole pages were given back
    for r0 in range(0, rows, chunk):
        r1 = min(rows, r0 + chunk)
        _OURS.times(flat[r0:r1], wt.w, out[r0:r1], accumulate=into is not None)
        # From the page holding the last chunk's end (read by then), to this chunk's end.
        start = (flat.data_ptr() + done) // page * page
        end = flat.data_ptr() + r1 * gates * flat.element_size()
        _release_bytes(max(start, flat.data_ptr()), end)
        done = end - flat.data_ptr()
    return out.view(steps, batch, width)
