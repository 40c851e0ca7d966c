"""The native engine's rules, as the C library applies them, and the switches that override them.

The library picks how a call runs from the machine and the call's sizes alone: the instruction set
(the best the machine runs, or ``CUDNN_RNN_NATIVE_ISA``'s), the forward's products packed or read in
place (:func:`in_place_limits`), the packed products' micro-kernel (:func:`micro_kernel`), the input
projection's passes (:func:`projection_pass_rows`), a bidirectional layer's directions at once or in
turn (:func:`directions_together`). Each rule can be asked here, and overridden process-wide for a
``with`` block (``use_*``: tests and A/B runs take every path on one machine). None changes a result
beyond rounding: the products packed or in place, and the x86-64 baseline, may move the last place;
the others keep the bits.
"""

from __future__ import annotations

from typing import TypeVar

import torch

from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.engines.native_library import _library, level_names

__all__ = [
    "BACKWARD_PRODUCTS",
    "MICRO_KERNELS",
    "PRODUCTS",
    "directions_together",
    "in_place_limits",
    "in_place_rows_form",
    "micro_kernel",
    "projection_pass_rows",
    "use_backward_products",
    "use_level",
    "use_micro_kernel",
    "use_products",
    "use_projection_passes",
]

_Setting = TypeVar("_Setting", bound="_EngineSetting")


class _EngineSetting:
    """A process-wide setting of the C library for the length of a ``with`` block: ``setter``
    (a ``cr_set_*`` function) called with ``values`` on entry and ``defaults`` on exit."""

    setter = ""
    defaults: tuple[int, ...] = ()

    def __init__(self, *values: int) -> None:
        self.values = values

    def __enter__(self: _Setting) -> _Setting:
        lib = _library().lib
        assert lib is not None
        getattr(lib, self.setter)(*self.values)
        return self

    def __exit__(self, *exc: object) -> None:
        lib = _library().lib
        assert lib is not None
        getattr(lib, self.setter)(*self.defaults)


class use_level(_EngineSetting):
    """Context manager: run the engine at an instruction set below the best (tests); on exit
    the level in force before (the best, or what ``CUDNN_RNN_NATIVE_ISA`` chose)."""

    setter = "cr_set_level"

    def __init__(self, name: str) -> None:
        names = level_names()
        if name not in names:
            raise ValueError(f"instruction set {name!r} is not available here; have {names}")
        super().__init__(len(names) - 1 - names.index(name))

    def __enter__(self) -> use_level:
        lib = _library().lib
        assert lib is not None
        self.defaults = (int(lib.cr_level()),)
        return super().__enter__()


def in_place_limits() -> tuple[int, int]:
    """The forward's rule: R is read in place up to this batch (and in a call of one step, a
    cell's, up to the second limit), W up to this many rows. At a batch of one with at most 128
    units, R is packed all the same for a sequence of at least ``units // 16 + 4`` steps.

    Above them each thread packs the matrix into its scratch first (docs/design_notes.md,
    "Packed or in place"); ``(0, 0)`` when the engine is not loaded.
    """
    lib = _library().lib
    if lib is None:
        return (0, 0)
    return (int(lib.cr_in_place_batch()), int(lib.cr_in_place_rows()))


def in_place_rows_form() -> int:
    """From this many rows (the batch for R, the projection's rows for W), a product that the
    rule reads in place runs through the packed product's micro-kernels over the matrix's rows,
    with the other operand transposed, instead of dot products: the packed product's bits
    without its copy of the matrix. ``0`` when the engine is not loaded."""
    lib = _library().lib
    return 0 if lib is None else int(lib.cr_rows_form())


def directions_together(spec: RNNSpec, threads: int | None = None) -> bool:
    """Whether a bidirectional layer of ``spec`` runs its two directions' loops at the same time,
    each on half the threads (``threads``: torch's count by default), or one after the other.

    The rule (engine.c's ``together_by_rule``): each direction keeps at least two threads and a
    thread's slice of R stays within a quarter of the L2. The bits are the same either way.
    """
    lib = _library().lib
    if lib is None or spec.num_dirs < 2:
        return False
    count = torch.get_num_threads() if threads is None else threads
    return bool(lib.cr_together(2, count, spec.num_gates, spec.num_units))


#: :class:`use_products` choices and the C library's codes for them.
PRODUCTS = {"rule": -1, "packed": 0, "in_place": 1, "in_place_rows": 2}


class use_products(_EngineSetting):
    """Context manager: the forward's products on R and on W one way for every call (tests, A/B).

    ``"rule"`` (the default) keeps :func:`in_place_limits`' rule; ``"packed"`` packs the matrix
    into each thread's scratch first; ``"in_place"`` reads it where it is with dot products;
    ``"in_place_rows"`` reads it where it is through the packed product's micro-kernels (the
    other operand transposed instead, :func:`in_place_rows_form`). Dot products sum in another
    order than the other two, so they agree with them to rounding, not bitwise; the packed
    product and the form by rows give the same bits. ``r`` also sets the
    backward's product on R (by rule in place for a call of one step, packed for more), where
    the two ways give the same bits. The choice is the process's (the engine's), not the calling
    thread's: every call made inside the block, from any thread, runs that way.
    """

    setter, defaults = "cr_set_products", (-1, -1)

    def __init__(self, r: str = "rule", w: str = "rule") -> None:
        for name, choice in (("r", r), ("w", w)):
            if choice not in PRODUCTS:
                raise ValueError(
                    f"use_products: {name} must be one of {sorted(PRODUCTS)}, got {choice!r}"
                )
        super().__init__(PRODUCTS[r], PRODUCTS[w])


#: :class:`use_backward_products` choices and the C library's codes for them.
BACKWARD_PRODUCTS = {"rule": -1, "packed": 0, "direct": 1}


class use_backward_products(_EngineSetting):
    """Context manager: the backward's products (``cr_gemm``: the weight and input gradients)
    one way for every call (tests, A/B). ``"rule"`` (the default) reads the operands where they
    are when the product has at most 512 rows or sums over at most 128, and packs B otherwise;
    ``"packed"`` and ``"direct"`` force one. Every element is the same chain of multiply-adds
    either way, so the bits do not change (the tests hold them equal). The process's choice,
    like :class:`use_products`."""

    setter, defaults = "cr_set_gemm", (-1,)

    def __init__(self, way: str) -> None:
        if way not in BACKWARD_PRODUCTS:
            raise ValueError(
                "use_backward_products: way must be one of "
                f"{sorted(BACKWARD_PRODUCTS)}, got {way!r}"
            )
        super().__init__(BACKWARD_PRODUCTS[way])


def micro_kernel(batch: int) -> tuple[int, int]:
    """The packed products' micro-kernel that a loop of ``batch`` rows runs, as ``(rows,
    vectors of columns)``, by rule at the engine's instruction set (or as
    :class:`use_micro_kernel` forces); ``(0, 0)`` when the engine is not loaded.

    At AVX-512 the loops come in two builds: ``(6, 4)`` and, from a batch of 7 on, ``(8, 3)``,
    whose blocks of 8 rows read a step's packed weights fewer times. The two give the same bits
    (docs/design_notes.md, "Two micro-kernels"); the other instruction sets have one.
    """
    lib = _library().lib
    if lib is None:
        return (0, 0)
    code = int(lib.cr_micro_kernel(batch))
    return (code // 100, code % 100)


#: :class:`use_micro_kernel` choices and the C library's codes for them.
MICRO_KERNELS = {"rule": -1, "6x4": 0, "8x3": 1}


class use_micro_kernel(_EngineSetting):
    """Context manager: the AVX-512 packed products' micro-kernel one shape for every call
    (tests: the two must give the same bits). ``"rule"`` (the default) is :func:`micro_kernel`'s
    rule; other instruction sets have one shape. The process's choice, like
    :class:`use_products`."""

    setter, defaults = "cr_set_tall", (-1,)

    def __init__(self, shape: str) -> None:
        if shape not in MICRO_KERNELS:
            raise ValueError(
                f"use_micro_kernel: shape must be one of {sorted(MICRO_KERNELS)}, got {shape!r}"
            )
        super().__init__(MICRO_KERNELS[shape])


def projection_pass_rows(input_size: int, columns: int) -> int | None:
    """Rows per pass of the packed input projection for a thread's ``columns`` (engine.c's
    ``pass_rows``: its input and its projections each within 1 MiB, if that holds at least
    256 rows), None for one pass of all rows, or the count :class:`use_projection_passes`
    forces; None also when the engine is not loaded.

    Without lengths a pass covers ``max(1, rows // batch)`` steps and is made just before them
    in the time loop; with lengths the passes run before it. The bits do not depend on it.
    """
    lib = _library().lib
    rows = 0 if lib is None else int(lib.cr_pass_rows(input_size, columns))
    return rows or None


class use_projection_passes(_EngineSetting):
    """Context manager: every call's packed input projection in passes of ``rows`` rows (tests:
    the bits must not depend on them). Like :class:`use_products`, the process's choice."""

    setter, defaults = "cr_set_pass_rows", (0,)

    def __init__(self, rows: int) -> None:
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
            raise ValueError(f"use_projection_passes: rows must be a positive int, got {rows!r}")
        super().__init__(rows)
