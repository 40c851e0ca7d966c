"""The one way a tensor reaches the native engine's C library, and the calls made on tensors alone.

C reads every tensor as ``numel`` contiguous elements from a pointer: :func:`boundary` makes that
true of what comes in (or refuses), :func:`_checked` takes the address of what it returned and
:func:`_ptr` of what the engine made itself. On them stand the library's calls that need no
recurrent problem: the backward's products (:func:`_gemm`, whose bits do not depend on the
thread count) and the engine's own activations (:func:`activation`, for tests).
"""

from __future__ import annotations

import torch
from torch import Tensor

from cudnn_rnn.engines.native_library import _call, _GemmArgs, _library

__all__ = ["activation", "boundary"]


def boundary(
    t: Tensor,
    name: str,
    shape: tuple[int, ...],
    dtype: torch.dtype = torch.float32,
    *,
    output: bool = False,
) -> Tensor:
    """``t`` as the C library reads it: on the CPU, of ``dtype`` and ``shape``, C-contiguous.

    An input that is not contiguous (expanded, sliced, transposed, a view at an offset) is
    copied; an output must already be, since C writes where the pointer says (the engine
    allocates its outputs, so a strided one is a bug here, not the caller's). The C library
    reads every tensor as ``numel`` contiguous elements from the pointer: this is the only
    place that makes that true for what comes in, and its result's address is taken by
    :func:`_checked` (no second check); :func:`_ptr` checks and takes the address of what the
    engine makes itself.
    """
    if t.is_cpu and t.dtype == dtype and t.shape == shape and t.is_contiguous():
        return t  # the common case, checked in a third of the time of the path below
    problem = ""
    if t.device.type != "cpu":
        problem = f"is on {t.device}"
    elif t.dtype != dtype:
        problem = f"is {t.dtype}"
    elif tuple(t.shape) != tuple(shape):
        problem = f"has shape {tuple(t.shape)}"
    if problem:
        raise RuntimeError(
            f"cudnn_rnn native engine: {name} {problem}, expected a CPU {dtype} tensor of "
            f"shape {tuple(shape)} (a bug in the engine's caller: please report it)"
        )
    if t.is_contiguous():
        return t
    if output:
        raise RuntimeError(
            f"cudnn_rnn native engine: the output {name} is not contiguous (strides "
            f"{t.stride()}), which C cannot write through (a bug: please report it)"
        )
    return t.contiguous()


_TYPES = (torch.float32, torch.int64)


def _checked(t: Tensor | None) -> int | None:
    """The address of a tensor :func:`boundary` returned (None for None). Its checks (CPU,
    dtype, shape, contiguous) include :func:`_ptr`'s, so a call's inputs are checked once: a
    tiny model's call made 8 such second checks, 350 ns each, about 3 us of a 30 us call."""
    return None if t is None else t.data_ptr()


def _ptr(t: Tensor | None, offset: int = 0) -> int | None:
    """The address of element ``offset`` of a contiguous CPU tensor (None for None)."""
    if t is None:
        return None
    if t.dtype not in _TYPES or not t.is_cpu or not t.is_contiguous():
        raise RuntimeError(
            f"cudnn_rnn native engine: a {t.dtype} tensor on {t.device} with strides "
            f"{t.stride()} reached the C boundary unchecked (a bug: please report it)"
        )
    if not offset:
        return t.data_ptr()
    if not 0 <= offset < t.numel():
        raise RuntimeError(
            f"cudnn_rnn native engine: offset {offset} outside a tensor of {t.numel()} "
            "elements (a bug: please report it)"
        )
    return t.data_ptr() + offset * t.element_size()


def _rows(t: Tensor, name: str, shape: tuple[int, int], *, output: bool = False) -> Tensor:
    """A matrix as :func:`_gemm` hands it to C: CPU float32 of ``shape``, its columns adjacent
    (rows may be apart: a slice of columns); an input that is not is copied, an output must be
    (the engine makes them)."""
    if t.is_cpu and t.dtype == torch.float32 and tuple(t.shape) == shape:
        if t.stride(1) == 1 or shape[1] <= 1:
            if t.stride(0) >= shape[1] or shape[0] <= 1:
                return t
    if output:
        raise RuntimeError(
            f"cudnn_rnn native engine: the product's output {name} (a {t.dtype} {tuple(t.shape)} "
            f"tensor on {t.device}, strides {t.stride()}) is not a CPU float32 {shape} matrix "
            "with adjacent columns (a bug: please report it)"
        )
    return boundary(t, name, shape)


def _row_stride(t: Tensor) -> int:
    return max(int(t.stride(0)), int(t.shape[1])) if t.shape[0] > 1 else int(t.shape[1])


def _gemm(
    at: bool,
    a: Tensor,
    b: Tensor | None,
    c: Tensor | None,
    *,
    accumulate: bool = False,
    colsum: Tensor | None = None,
) -> None:
    """``c (+)= a @ b`` (``a [m, k]``), or with ``at`` ``c = a.T @ b`` and ``colsum = a.sum(0)``
    (``a [k, m]``): engine.c's ``cr_gemm``, whose every element is one chain of multiply-adds
    in increasing k, so its bits do not depend on the thread count (nor on the ISA between
    AVX2 and AVX-512)."""
    m = int(a.shape[1]) if at else int(a.shape[0])
    k = int(a.shape[0]) if at else int(a.shape[1])
    n = 0 if c is None else int(c.shape[1])
    a = _rows(a, "a", (k, m) if at else (m, k))
    b = None if b is None else _rows(b, "b", (k, n))
    c = None if c is None else _rows(c, "c", (m, n), output=True)
    colsum = None if colsum is None else _rows(colsum.view(1, m), "colsum", (1, m), output=True)
    args = _GemmArgs(
        at=int(at), m=m, n=n, k=k, a=a.data_ptr(), lda=_row_stride(a),
        b=None if b is None else b.data_ptr(), ldb=0 if b is None else _row_stride(b),
        c=None if c is None else c.data_ptr(), ldc=0 if c is None else _row_stride(c),
        accumulate=int(accumulate), colsum=None if colsum is None else colsum.data_ptr(),
        threads=torch.get_num_threads(),
    )  # fmt: skip
    _call("cr_gemm", args)


class _Products:
    """The backward's products on :func:`_gemm` (see :class:`~.common.Products`)."""

    def sum_rows(
        self, dst: Tensor | None, g: Tensor, x: Tensor | None, colsum: Tensor | None = None
    ) -> None:
        _gemm(True, g, x, dst, colsum=colsum)

    def times(self, a: Tensor, w: Tensor, out: Tensor | None, accumulate: bool = False) -> Tensor:
        if out is None:
            out = a.new_empty(int(a.shape[0]), int(w.shape[1]))
        _gemm(False, a, w, out, accumulate=accumulate)
        return out


_OURS = _Products()  # the backward's products


def activation(kind: str, x: Tensor) -> Tensor:
    """The engine's own ``sigmoid``, ``tanh`` or ``exp`` of a float32 CPU tensor (for tests)."""
    lib = _library().lib
    if lib is None:
        raise RuntimeError(f"the native engine is not loaded: {_library().reason}")
    kinds = {"sigmoid": 0, "tanh": 1, "exp": 2}
    src = boundary(x.detach().to(torch.float32), "x", tuple(x.shape))
    out = boundary(torch.empty_like(src), "out", tuple(x.shape), output=True)
    lib.cr_activation(kinds[kind], src.numel(), _ptr(src), _ptr(out))
    return out
