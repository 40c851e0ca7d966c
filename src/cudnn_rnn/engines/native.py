"""The native CPU engine: our C time loops (``cudnn_rnn/_native``) under torch's GEMMs.

Per pseudo-layer the C library, on the tensors' data pointers, runs ``torch.get_num_threads()``
threads (torch's own OpenMP threads), each owning a slice of the hidden units with all gates'
rows of ``W`` and ``R`` for them: it makes its slice of the input projection (``x @ W^T``)
in passes of a few hundred rows that stay in its cache (:func:`projection_pass_rows`; without
lengths each pass just before the steps it serves), and runs the time loop with the gate math
fused after each step's product, one barrier per step (from a zero initial state, what served
models start from, the first step has no product to make: ``R h0`` is zero). Each matrix is
packed into the thread's scratch once per call, or read where it is with dot products when few
rows multiply it (R for a batch of one, W for a projection of at most 128 rows;
:func:`in_place_limits`), since packing costs several products of one row; at AVX-512 the
packed products' micro-kernel is 6 rows by 4 vectors, or from a batch of 7 on 8 rows by 3
(:func:`micro_kernel`; the same bits either way). A bidirectional
layer's two directions go to C in one call, which runs them at once on half the threads each
where :func:`directions_together` says so. The backward loop does the same in reverse, and the
products over all steps (the weight gradients, which reduce over the rows, the biases' sums and
the input gradient: :func:`~cudnn_rnn.engines.common.weight_grads`' two halves) are C's too
(``cr_gemm``, :func:`_gemm`), not a vendor's: MKL and oneDNN split a product's sums across
threads in ways that follow the thread count (MKL at AVX2 changed the weight gradients between
1 and 2 threads, and at AVX-512 a GRU's); a layer above the first makes its input gradient in
chunks that give the gates' pages back as it goes.

Scope: CPU, float32, no projection; all four modes, any layers, both directions,
``sequence_lengths``, ``skip_input``, dropout masks from the operator. Everything else runs on
the other engines (see :mod:`cudnn_rnn.engines`).

Workspace: the layout of :func:`~cudnn_rnn.engines.common.split_workspace` without ``hseq``, in
the *input's* time order for both directions (the reverse direction writes step ``s`` of row
``b`` at the time it read); plus one last element, 0 until a backward has used it. The state
each step started from is not kept: the backward reads it out of the layer's output (the
operator saves the last layer's; a layer below the last writes its output straight into its
slot, before dropout, as the next layer's input), or ``h0`` at a row's first step. With
lengths, an eager training call keeps only the valid steps' rows, in order (``[rows, 1, w]``
views; C finds them through a row map), a traced one every row (:func:`_compact`). The
backward writes the gates' gradients over the gates (and the GRU's ``dghn`` over ``ghn``), so
it needs no second buffer of that size, the LSTM's states for ``dR`` over its cell states
once C has read them, and gives the large parts of a layer above the first back to the OS
once it has finished with them (:func:`_release`); a second backward through the same call
(``retain_graph``, gradcheck) sees the last element set and runs the forward again first.

Bits: every element, in the loops and in the backward's products, is computed the same way
whichever thread owns it (one chain of multiply-adds in increasing k for a product), so a call
gives the same bits on any number of threads, and repeats exactly (the packed and the in-place
products of the forward sum in different orders, and the rule picks one from the call's sizes,
so a sequence run alone gets bits that differ in the last place from those it gets in a larger
batch). AVX-512 and AVX2 give the same bits (both contract to FMA); the x86-64 baseline may
differ in the last place. ``CUDNN_RNN_NATIVE_ISA=avx2`` (or ``base``) runs the engine at a lower
instruction set than the machine's best (tests/engines/test_same_bits.py runs a machine without
AVX-512 that way).

Loading: the library is built by ``pip install`` (``setup.py``, optional). If it is missing or
cannot load, or ``CUDNN_RNN_NATIVE=0`` is set, :func:`available` is false and the dispatch
rule falls back to torch's kernels; a missing library is reported once with a
:class:`NativeEngineWarning`. :func:`describe` says which engine runs and why.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.machinery
import os
import threading
import warnings
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import Tensor

from cudnn_rnn.core.constants import CUDNN_GRU, CUDNN_LSTM
from cudnn_rnn.core.layout import Layout
from cudnn_rnn.core.modes import MODES
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.engines.base import NOTHING, Call, Grads, Inputs, Kept, Outputs, Saved
from cudnn_rnn.engines.common import (
    Weights,
    WorkspaceEngine,
    input_grads,
    pseudo_layers,
    recurrent_grads,
    split_workspace,
    workspace_numel,
)

__all__ = [
    "ENGINE",
    "NAME",
    "NativeEngineWarning",
    "available",
    "backward",
    "built_level_names",
    "describe",
    "directions_together",
    "forward",
    "in_place_limits",
    "level_names",
    "micro_kernel",
    "projection_pass_rows",
    "supports",
    "use_level",
    "use_micro_kernel",
    "use_products",
    "use_projection_passes",
]

NAME = "native"
ENV = "CUDNN_RNN_NATIVE"
#: Runs the engine at this instruction set instead of the best the machine has (``avx512``,
#: ``avx2``, ``base``): how a test run on one machine takes the paths of another.
ISA_ENV = "CUDNN_RNN_NATIVE_ISA"
#: Loads the engine from this file instead of the package's (``make sanitize`` points it at the
#: AddressSanitizer/UBSan build).
LIBRARY_ENV = "CUDNN_RNN_NATIVE_LIBRARY"
ABI_VERSION = 17
#: The C library's mode codes: cuDNN's (the mode table's), checked against the library's own
#: gate counts when it loads.
MODE_CODES = {name: m.code for name, m in MODES.items()}


class NativeEngineWarning(RuntimeWarning):
    """The native engine is not built or cannot load: torch's kernels run instead."""


_I64 = ctypes.c_int64
_PTR = ctypes.c_void_p
_SIZES = "mode steps batch units reverse threads"


def _fields(names: str) -> list[tuple[str, type[ctypes.c_int64] | type[ctypes.c_void_p]]]:
    """A structure's fields in order: ``name`` an int64, ``*name`` a pointer (8 bytes each)."""
    return [(n.lstrip("*"), _PTR if n.startswith("*") else _I64) for n in names.split()]


class _ForwardArgs(ctypes.Structure):
    """Mirror of ``cr_forward_args`` in engine.c."""

    _fields_ = _fields(
        f"{_SIZES} *gi gi_st gi_sb *bi *r *br *h0 *c0 *lengths *y y_st y_sb "
        "*hn *cn *ws_gates *ws_extra *x *w input_size *bi2 rows *rowmap ws_rows *wsmap"
    )


class _BackwardArgs(ctypes.Structure):
    """Mirror of ``cr_backward_args`` in engine.c."""

    _fields_ = _fields(
        f"{_SIZES} *r *lengths *gates *hout *extra *c0 *dy dy_st dy_sb "
        "*dhy *dcy *dgi *dghn *dh0 *dc0 ws_rows *wsmap hout_rs hout_compact *h0"
    )


class _GemmArgs(ctypes.Structure):
    """Mirror of ``cr_gemm_args`` in engine.c."""

    _fields_ = _fields("at m n k *a lda *b ldb *c ldc accumulate *colsum threads")


class _Library:
    """The loaded library, or why there is none."""

    def __init__(self) -> None:
        self.lib: ctypes.CDLL | None = None
        self.reason = ""
        self.disabled = os.environ.get(ENV, "1").strip().lower() in ("0", "false", "no", "off")
        if self.disabled:
            self.reason = f"disabled by {ENV}={os.environ[ENV]}"
            return
        try:
            self.lib = _load()
        except OSError as err:
            self.reason = str(err)


def _load() -> ctypes.CDLL:
    package = Path(__file__).resolve().parent.parent
    # The build's one name first (setup.py: ``_engine.so`` for every Python); then the names a
    # build of an older version gave it (one per Python version).
    candidates = [package / "_engine.so"] + [
        package / f"_engine{suffix}"
        for suffix in importlib.machinery.EXTENSION_SUFFIXES
        if suffix != ".so"
    ]
    chosen = os.environ.get(LIBRARY_ENV)
    if chosen:  # a build of the engine other than the package's (the sanitizer run)
        candidates = [Path(chosen)]
    found = [p for p in candidates if p.is_file()]
    if not found:
        where = chosen if chosen else package / "_engine*.so"
        why = package / "_engine_not_built.txt"  # written by the build where it failed
        if not chosen and why.is_file():
            reason = why.read_text(encoding="utf-8", errors="replace").strip()
            raise OSError(
                f"the native engine was not compiled at install ({reason[:300]}); install a C "
                "compiler and reinstall cudnn-rnn"
            )
        raise OSError(f"the native engine is not built (no {where})")
    lib = ctypes.CDLL(str(found[0]))
    if lib.cr_abi_version() != ABI_VERSION:
        raise OSError(
            f"{found[0].name} is ABI {lib.cr_abi_version()}, this package needs {ABI_VERSION}: "
            "reinstall cudnn-rnn (pip install -e .)"
        )
    for mode in MODES.values():
        if lib.cr_mode_gates(mode.code) != mode.num_gates:
            raise OSError(
                f"{found[0].name} computes mode code {mode.code} with "
                f"{lib.cr_mode_gates(mode.code)} gates, but the mode table's {mode.name} has "
                f"{mode.num_gates}: the library and the package disagree; reinstall cudnn-rnn"
            )
    lib.cr_level_name.restype = ctypes.c_char_p
    forced = os.environ.get(ISA_ENV, "").strip()
    if forced:
        names = [lib.cr_level_name(k).decode() for k in range(lib.cr_supported_level(), -1, -1)]
        if forced not in names:
            raise OSError(
                f"{ISA_ENV}={forced!r} is not an instruction set the engine can run here; "
                f"choose one of {names} or unset it"
            )
        lib.cr_set_level(len(names) - 1 - names.index(forced))
    lib.cr_forward.argtypes = [ctypes.POINTER(_ForwardArgs)]
    lib.cr_backward.argtypes = [ctypes.POINTER(_BackwardArgs)]
    lib.cr_forward_many.argtypes = [ctypes.POINTER(ctypes.c_void_p), _I64]
    lib.cr_backward_many.argtypes = [ctypes.POINTER(ctypes.c_void_p), _I64]
    lib.cr_gemm.argtypes = [ctypes.POINTER(_GemmArgs)]
    lib.cr_activation.argtypes = [ctypes.c_int, _I64, _PTR, _PTR]
    lib.cr_activation.restype = None
    lib.cr_release.argtypes = [_PTR, _I64]
    lib.cr_advise_huge.argtypes = [_PTR, _I64]
    lib.cr_together.argtypes = [_I64, _I64, _I64, _I64]
    lib.cr_micro_kernel.argtypes = [_I64]
    lib.cr_pass_rows.argtypes = [_I64, _I64]
    lib.cr_pass_rows.restype = _I64
    lib.cr_set_pass_rows.argtypes = [_I64]
    lib.cr_use_openmp.argtypes = [ctypes.c_char_p]
    _share_torch_threads(lib)
    return lib


def _share_torch_threads(lib: ctypes.CDLL) -> None:
    """Run on torch's own OpenMP threads where torch has a GNU OpenMP runtime loaded.

    Two thread pools in one process fight for the cores: the one that just finished a GEMM
    keeps spinning while the other starts the time loop (measured in docs/design_notes.md).
    The library attaches only to a runtime already loaded; otherwise it keeps its own team.
    """
    lib_dir = Path(torch.__file__).resolve().parent / "lib"
    candidates = [str(p) for p in sorted(lib_dir.glob("libgomp*.so*"))] + ["libgomp.so.1"]
    for path in candidates:
        if lib.cr_use_openmp(path.encode()) == 0:
            return


_state: _Library | None = None
_state_lock = threading.Lock()
_warned = False


def _library() -> _Library:
    global _state
    if _state is None:
        with _state_lock:
            if _state is None:
                _state = _Library()
    return _state


def _reload() -> None:
    """Forget the loaded state (tests change ``CUDNN_RNN_NATIVE``)."""
    global _state, _warned
    _state, _warned = None, False


def available() -> bool:
    """Whether the native engine runs CPU float32 calls; says once why not when it cannot."""
    global _warned
    state = _library()
    if state.lib is None and not state.disabled and not _warned:
        _warned = True
        warnings.warn(
            f"cudnn_rnn: {state.reason}; running torch's CPU kernels instead",
            NativeEngineWarning,
            stacklevel=3,
        )
    return state.lib is not None


def supports(spec: RNNSpec, device: torch.device, dtype: torch.dtype) -> bool:
    """What the native engine computes: CPU, float32, no projection (and it is loaded)."""
    return device.type == "cpu" and dtype == torch.float32 and spec.num_proj is None and available()


#: The engine's best level (engine.c's ``isa_of``: 2 AVX-512, 1 AVX2, 0 the portable code).
_TOP_LEVEL = 2


def level_names() -> list[str]:
    """The instruction sets this machine can run the engine at, best first (empty if none)."""
    lib = _library().lib
    if lib is None:
        return []
    return [lib.cr_level_name(k).decode() for k in range(lib.cr_supported_level(), -1, -1)]


def built_level_names() -> list[str]:
    """Every instruction set the engine was built with, best first, whether or not this machine
    can run it (empty if the engine is not loaded): what a test of every ISA covers."""
    lib = _library().lib
    if lib is None:
        return []
    return list(dict.fromkeys(lib.cr_level_name(k).decode() for k in range(_TOP_LEVEL, -1, -1)))


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
    """The forward's rule: R is read in place up to this batch, W up to this many rows.

    Above them each thread packs the matrix into its scratch first (docs/design_notes.md,
    "Packed or in place"); ``(0, 0)`` when the engine is not loaded.
    """
    lib = _library().lib
    if lib is None:
        return (0, 0)
    return (int(lib.cr_in_place_batch()), int(lib.cr_in_place_rows()))


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
PRODUCTS = {"rule": -1, "packed": 0, "in_place": 1}


class use_products(_EngineSetting):
    """Context manager: the forward's products on R and on W one way for every call (tests, A/B).

    ``"rule"`` (the default) keeps :func:`in_place_limits`' rule; ``"packed"`` packs the matrix
    into each thread's scratch first; ``"in_place"`` reads it where it is with dot products. The
    two sum in different orders, so they agree to rounding, not bitwise. The choice is the
    process's (the engine's), not the calling thread's: every call made inside the block, from
    any thread, runs that way.
    """

    setter, defaults = "cr_set_products", (-1, -1)

    def __init__(self, r: str = "rule", w: str = "rule") -> None:
        for name, choice in (("r", r), ("w", w)):
            if choice not in PRODUCTS:
                raise ValueError(
                    f"use_products: {name} must be one of {sorted(PRODUCTS)}, got {choice!r}"
                )
        super().__init__(PRODUCTS[r], PRODUCTS[w])


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


def library_path() -> str | None:
    """The file the engine was loaded from (None when it is not loaded)."""
    lib = _library().lib
    return None if lib is None else str(lib._name)


def describe() -> str:
    """Which engine CPU calls run, e.g. ``native (avx512, 2 threads)`` or ``torch (...why)``."""
    state = _library()
    if state.lib is None:
        return f"torch ({state.reason})"
    level = state.lib.cr_level_name(state.lib.cr_level()).decode()
    pool = "torch's OpenMP pool" if state.lib.cr_threading() else "own thread team"
    return f"native ({level}, {torch.get_num_threads()} threads, {pool})"


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


# ---- the one way into C ------------------------------------------------------------------------


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


#: What the C library's return codes mean (0: done).
_CODES = {
    1: "ran out of memory",
    2: "refused its sizes or a missing pointer",
    3: "refused sequence lengths outside [0, steps]",
}


def _call(fn_name: str, *args: ctypes.Structure) -> None:
    """``fn_name`` on one argument structure, or ``fn_name_many`` on several: independent loops
    (a bidirectional layer's directions) that C runs at once, the threads shared out."""
    lib = _library().lib
    assert lib is not None
    if len(args) == 1:
        rc = getattr(lib, fn_name)(ctypes.byref(args[0]))
    else:
        pointers = (ctypes.c_void_p * len(args))(*(ctypes.addressof(a) for a in args))
        rc = getattr(lib, f"{fn_name}_many")(pointers, len(args))
        fn_name = f"{fn_name}_many"
    if rc == 1:
        raise MemoryError(f"cudnn_rnn native engine: {fn_name} ran out of memory")
    if rc != 0:
        what = _CODES.get(rc, f"returned {rc}")
        raise RuntimeError(f"cudnn_rnn native engine: {fn_name} {what} (a bug: please report it)")


def forward(
    layout: Layout,
    params: Tensor,
    x: Tensor,
    h0: Tensor,
    c0: Tensor | None,
    lengths: Tensor | None,
    masks: Tensor | None,
    need_grad: bool,
    compact: bool = False,
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
    """The stack over time-major ``x``; returns ``(y, h_n, c_n, workspace)`` (None w/o grad).

    ``compact``: with lengths below ``steps``, the workspace keeps only the valid steps' rows
    (:func:`_ws_rows` says how many; the backward tells the two layouts apart by length).
    """
    spec = layout.spec
    steps, batch, units = int(x.shape[0]), int(x.shape[1]), spec.num_units
    dirs, gates = spec.num_dirs, spec.num_gates
    states = (spec.num_states, batch, units)
    params = boundary(params, "params", (layout.size,))
    x = boundary(x, "x", (steps, batch, spec.input_size))
    h0 = boundary(h0, "h0", states)
    c0 = boundary(c0, "c0", states) if c0 is not None else None
    lengths = boundary(lengths, "lengths", (batch,), torch.int64) if lengths is not None else None
    valid = _valid_rows(lengths, steps, batch)  # the projection skips padded steps' rows
    kept_rows = int(valid[0].numel()) if compact and valid is not None else steps * batch
    ws = x.new_empty(_workspace_numel(spec, kept_rows, 1)) if need_grad else None
    saved: list[list[Tensor]] = []
    inputs: list[Tensor] = []
    if ws is not None:
        _advise_huge(ws)
        ws[-1] = 0.0  # not used by a backward yet
        saved, inputs = _split(ws, spec, steps, batch, kept_rows)
    hn = torch.empty_like(h0)
    cn = torch.empty_like(c0) if c0 is not None else None
    common = _ForwardArgs(
        mode=MODE_CODES[spec.mode], steps=steps, batch=batch, units=units,
        threads=torch.get_num_threads(), gi_st=batch * gates * units, gi_sb=gates * units,
        lengths=_checked(lengths), y_st=batch * dirs * units, y_sb=dirs * units,
    )  # fmt: skip
    gru = spec.mode == CUDNN_GRU
    rowmap = None if valid is None else _checked(valid[1])
    common.rows = 0 if valid is None else int(valid[0].numel())
    compacted = need_grad and kept_rows < steps * batch
    if compacted:
        common.ws_rows, common.wsmap = kept_rows, rowmap
    # Addresses: each tensor's once, its blocks by their offsets (no views are made).
    base, h0_at, hn_at = _checked(params), _checked(h0), _ptr(hn)
    c0_at, cn_at = _checked(c0), _ptr(cn)
    assert base is not None and h0_at is not None and hn_at is not None
    layer_input = x
    for layer in range(spec.num_layers):
        width = spec.input_size if layer == 0 else dirs * units
        # A compact workspace holds a layer's input as its valid rows, [rows, 1, width].
        shape = (kept_rows, 1, width) if compacted and layer > 0 else (steps, batch, width)
        if layer > 0 and masks is not None:  # the workspace keeps the output before dropout
            layer_input = layer_input * _layer_mask(masks, layer, valid if compacted else None)
        if layer > 0:  # (the first layer's is x, checked above with this shape)
            layer_input = boundary(layer_input, "the layer input", shape)
        # With a gradient, a layer below the last writes its output straight into the
        # workspace, where the backward finds it as the next layer's input (no second copy);
        # a compact workspace keeps its valid rows, gathered after the layer.
        last = layer == spec.num_layers - 1
        direct = need_grad and not last and not compacted
        if direct:  # a view into the workspace: checked like any tensor C writes
            y = boundary(inputs[layer], "y", (steps, batch, dirs * units), output=True)
            y_at = _checked(y)
        else:  # made here
            y = x.new_empty(steps, batch, dirs * units)
            y_at = _ptr(y)
        assert y_at is not None
        # What both directions read: the input itself in every gate (skip_input), or the
        # rows the projection runs over (with lengths: the valid ones).
        if layout.fused[layer * dirs].w_ih is None:
            source = layer_input.repeat(1, 1, gates)
            source_at = _ptr(source)
        else:  # the layer input, or (_gather_rows) its valid rows: both from boundary
            if valid is not None and not (compacted and layer > 0):
                source = _gather_rows(layer_input, valid[0])  # else already the valid rows
            else:
                source = layer_input
            source_at = _checked(source)
        loops = []  # one per direction: C runs them at once
        for d in range(dirs):
            p = layer * dirs + d
            f = layout.fused[p]
            # (a single loop fills in `common` itself: every field set below is set again by
            # any later loop, but two loops at once need structures of their own)
            args = common if spec.num_layers * dirs == 1 else _ForwardArgs.from_buffer_copy(common)
            # LSTM and RNN add both biases to the input term (C sums them once per call, as
            # torch's add would); the GRU's bR_h sits inside r * (...), so it goes apart. The
            # loop makes the input projection itself, each thread for its own units (torch's
            # matmul ran it at 95-130 GFLOP/s on our AMD machine, our micro-kernel at the
            # loop's rate).
            args.bi = base + 4 * f.b_ih.offset
            args.bi2 = None if gru else base + 4 * f.b_hh.offset
            if f.w_ih is None:  # skip_input: the input itself goes into every gate
                args.gi, args.x, args.w, args.rowmap = source_at, None, None, None
            else:
                args.gi, args.x, args.w = None, source_at, base + 4 * f.w_ih.offset
                args.input_size, args.rowmap = width, rowmap
            args.reverse = d
            args.r = base + 4 * f.w_hh.offset
            args.br = base + 4 * f.b_hh.offset if gru else None
            state = 4 * p * batch * units  # where pseudo-layer p's [B, H] state starts
            args.h0, args.hn = h0_at + state, hn_at + state
            args.c0 = None if c0_at is None else c0_at + state
            args.cn = None if cn_at is None else cn_at + state
            args.y = y_at + 4 * d * units
            if need_grad:  # no hseq: the backward reads each step's state out of the output
                kept = saved[p]
                args.ws_gates = _ptr(kept[0])
                args.ws_extra = _ptr(kept[1]) if len(kept) > 1 else None
            loops.append(args)
        _call("cr_forward", *loops)
        layer_input = y
        if compacted and not last and valid is not None:  # the next layer's input: valid rows
            slot = inputs[layer].view(kept_rows, dirs * units)
            torch.index_select(y.view(steps * batch, -1), 0, valid[0], out=slot)
            layer_input = inputs[layer]
    return layer_input, hn, cn, ws


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


def _valid_rows(lengths: Tensor | None, steps: int, batch: int) -> tuple[Tensor, Tensor] | None:
    """With lengths below ``steps``: the rows ``t * B + b`` of valid steps, in order, and the
    row map C reads (``[T*B]`` int64, each row's place among them or -1); else None."""
    if lengths is None or int(lengths.min()) >= steps:
        return None
    valid = (torch.arange(steps)[:, None] < lengths[None, :]).reshape(-1)
    index = valid.nonzero().squeeze(1)
    rowmap = torch.full((steps * batch,), -1, dtype=torch.int64)
    rowmap[index] = torch.arange(index.numel())
    return index, boundary(rowmap, "rowmap", (steps * batch,), torch.int64)


def _gather_rows(layer_input: Tensor, index: Tensor) -> Tensor:
    """The valid steps' rows of a layer's input ``[T, B, I]``, as ``[rows, I]``."""
    width = int(layer_input.shape[-1])
    rows = layer_input.reshape(-1, width).index_select(0, index)
    return boundary(rows, "the valid rows", (int(index.numel()), width))


def _layer_mask(masks: Tensor, layer: int, valid: tuple[Tensor, Tensor] | None) -> Tensor:
    """Dropout's mask on layer ``layer``'s input ``[T, B, w]``, or its valid rows ``[rows, 1,
    w]`` where the workspace keeps only those (``valid``)."""
    mask = masks[layer - 1]
    if valid is None:
        return mask
    width = int(mask.shape[-1])
    return mask.reshape(-1, width).index_select(0, valid[0]).view(-1, 1, width)


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


def backward(
    layout: Layout,
    params: Tensor,
    x: Tensor,
    h0: Tensor,
    c0: Tensor | None,
    lengths: Tensor | None,
    masks: Tensor | None,
    ws: Tensor,
    y: Tensor,
    dy: Tensor,
    dhy: Tensor,
    dcy: Tensor | None,
    need_dx: bool = True,
) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """Gradients ``(dparams, dx, dh0, dc0)`` from the workspace of :func:`forward` and its
    output ``y`` (``dx`` zeros without ``need_dx``: its product is not made)."""
    spec = layout.spec
    steps, batch, units = int(x.shape[0]), int(x.shape[1]), spec.num_units
    dirs = spec.num_dirs
    states = (spec.num_states, batch, units)
    params = boundary(params, "params", (layout.size,))
    h0 = boundary(h0, "h0", states)
    c0 = boundary(c0, "c0", states) if c0 is not None else None
    lengths = boundary(lengths, "lengths", (batch,), torch.int64) if lengths is not None else None
    y = boundary(y, "y", (steps, batch, dirs * units))
    valid = _valid_rows(lengths, steps, batch)
    kept_rows = steps * batch  # the forward kept every row, or (compact) the valid ones
    if valid is not None and ws.numel() == _workspace_numel(spec, int(valid[0].numel()), 1):
        kept_rows = int(valid[0].numel())
    compacted = kept_rows < steps * batch
    ws = boundary(ws, "workspace", (_workspace_numel(spec, kept_rows, 1),))
    if bool(ws[-1] != 0):
        # A second backward through one call (retain_graph, gradcheck, jacobians): the first
        # wrote the gates' gradients over the gates (and the LSTM's states over its cell
        # states), so the forward runs again (the same inputs and masks: the same workspace,
        # bit for bit).
        fresh = forward(layout, params, x, h0, c0, lengths, masks, True, compacted)[3]
        assert fresh is not None
        ws = fresh
    ws.data[-1] = 1.0  # used from here on (.data: no version bump, which a retained graph's
    # saved workspace would then refuse)
    dhy = boundary(dhy, "dh_n", states)
    dcy = boundary(dcy, "dc_n", states) if dcy is not None else None
    # Views of .data: what the backward writes over (the gates' gradients, the LSTM's states)
    # must not move the saved workspace's version, as C's writes do not.
    saved, inputs = _split(ws.data, spec, steps, batch, kept_rows)
    weights = pseudo_layers(layout, params)
    dparams = torch.empty_like(params)  # every stored block is written below
    grads = pseudo_layers(layout, dparams)
    dh0 = torch.empty_like(dhy)
    dc0 = torch.empty_like(dcy) if dcy is not None else None
    gru = spec.mode == CUDNN_GRU
    common = _BackwardArgs(
        mode=MODE_CODES[spec.mode], steps=steps, batch=batch, units=units,
        threads=torch.get_num_threads(), lengths=_checked(lengths),
        dy_st=batch * dirs * units, dy_sb=dirs * units, hout_rs=dirs * units,
    )  # fmt: skip
    if compacted and valid is not None:
        common.ws_rows, common.wsmap = kept_rows, _checked(valid[1])
    kept_index = valid[0] if compacted and valid is not None else None
    full_lengths = None if valid is None else lengths  # None: every sequence has T steps
    d_out = boundary(dy, "dy", (steps, batch, dirs * units))
    for layer in reversed(range(spec.num_layers)):
        u = x if layer == 0 else inputs[layer - 1]
        if compacted and layer == 0 and valid is not None:  # the rows the kept ones pair with
            u = x.reshape(steps * batch, -1).index_select(0, valid[0]).view(kept_rows, 1, -1)
        if layer > 0 and masks is not None:  # the input after dropout, as the forward used it
            u = u * _layer_mask(masks, layer, valid if compacted else None)
        # This layer's output: the states each step started from are read out of it.
        out = y if layer == spec.num_layers - 1 else inputs[layer]
        out_compact = out is not y and compacted
        out_map = valid[1] if out_compact and valid is not None else None
        loops = []  # one per direction: C runs them at once
        for d in range(dirs):
            p = layer * dirs + d
            kept = saved[p]
            # The gates' gradients overwrite the gates, and the GRU's dghn its ghn, in place
            # (C reads each row before it writes it; see the check of ws[-1] above).
            dgi = kept[0]
            dghn = kept[1] if gru else None
            args = _BackwardArgs.from_buffer_copy(common)
            args.reverse = d
            args.r = _ptr(weights[p].r)
            args.gates = _ptr(kept[0])
            args.extra = _ptr(kept[1]) if len(kept) > 1 else None
            args.hout, args.hout_compact = _ptr(out, d * units), int(out_compact)
            args.h0 = _ptr(h0, p * batch * units)
            args.c0 = None if c0 is None else _ptr(c0[p])
            args.dy = _ptr(d_out, d * units)
            args.dhy, args.dh0 = _ptr(dhy[p]), _ptr(dh0[p])
            args.dcy = None if dcy is None else _ptr(dcy[p])
            args.dc0 = None if dc0 is None else _ptr(dc0[p])
            args.dgi, args.dghn = _ptr(dgi), _ptr(dghn)
            loops.append(args)
        _call("cr_backward", *loops)
        d_in: Tensor | None = None
        for d in range(dirs):
            p = layer * dirs + d
            kept = saved[p]
            dgi = kept[0]
            dghn = kept[1] if gru else None
            # The states each step started from, for dR: the LSTM's cell states were read by
            # C alone, so they go there (no buffer at the peak); else a transient, freed
            # before the input's gradient is made.
            own = out[..., d * units : (d + 1) * units]
            into = kept[1] if spec.mode == CUDNN_LSTM else None
            h_prev = _state_before(own, h0[p], d, full_lengths, kept_index, out_map, into)
            recurrent_grads(spec, grads[p], h_prev, dgi, dghn, _OURS)
            del h_prev
            if layer > 0 and len(kept) > 1:  # finished with: the states, or the GRU's dghn
                _release(kept[1])
            if layer > 0:  # the input's gradient as the gates' gradients are given back
                input_grads(spec, weights[p], grads[p], u, dgi, None, False, _OURS)  # dW
                d_in = _input_grad_releasing(weights[p], dgi, d_in)
            else:
                d_in = input_grads(spec, weights[p], grads[p], u, dgi, d_in, need_dx, _OURS)
        if 0 < layer < spec.num_layers - 1:  # this layer's output, read for its states
            _release(inputs[layer])
        if d_in is None:  # layer 0 and nothing wants the input's gradient
            return dparams, torch.zeros_like(x), dh0, dc0
        if compacted and valid is not None:  # back to [T, B, width]: padded steps' rows are 0
            width = int(d_in.shape[-1])
            full = d_in.new_zeros(steps, batch, width)
            full.view(steps * batch, width).index_copy_(0, valid[0], d_in.view(kept_rows, width))
            d_in = full
        if layer > 0 and masks is not None:
            d_in = d_in * masks[layer - 1]
        if layer > 0:  # the next C call reads it as the gradient of layer - 1's output
            d_in = boundary(d_in, "the layer output's gradient", (steps, batch, dirs * units))
        d_out = d_in
    return dparams, d_out, dh0, dc0


class Native(WorkspaceEngine):
    """The engine object of the rule table (see :mod:`cudnn_rnn.engines.base`)."""

    name = NAME

    def supports(self, call: Call) -> bool:
        return supports(call.spec, call.device, call.dtype)

    def forward(self, call: Call, inputs: Inputs) -> Outputs:
        p, x, h0, c0, lengths, masks = inputs
        compact = _compact(call)
        y, hy, cy, ws = forward(call.layout, p, x, h0, c0, lengths, masks, call.need_grad, compact)
        return Outputs(y, hy, cy, ws)

    def kept(self, call: Call) -> Kept:
        if not call.need_grad:
            return NOTHING
        if _compact(call):  # the valid steps' rows: a length the lengths' values decide
            return Kept(workspace=None)
        return Kept(workspace=_workspace_numel(call.spec, call.steps * call.batch, 1))

    def backward(
        self, call: Call, saved: Saved, grads: Grads
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        s = saved
        # The module's function, looked up at each call (a test's spy there sees it).
        return backward(
            call.layout, s.params, s.x, s.h0, s.c0, s.lengths, s.masks, s.workspace, s.y,
            *grads, need_dx=s.need_dx,
        )  # fmt: skip


ENGINE = Native()
