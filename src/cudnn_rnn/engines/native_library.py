"""The native engine's C library: finding and loading it, what it must agree on, calling it.

The library (``_engine.so``, built by ``pip install``: ``setup.py``, optional) is loaded once per
process, from the package or from ``CUDNN_RNN_NATIVE_LIBRARY``, and refused unless its ABI
version and its gate count per mode code agree with this package; its functions get their ctypes
signatures here, and their argument structures mirror engine.c's field by field. If it is missing
or cannot load, or ``CUDNN_RNN_NATIVE=0`` is set, :func:`available` is false and the dispatch rule
falls back to torch's kernels; a missing library is reported once with a
:class:`NativeEngineWarning`. :func:`describe` says which engine runs and why, at which
instruction set (the machine's best, or ``CUDNN_RNN_NATIVE_ISA``'s). :func:`_call` is the one
way a loop or a product is run, and says what a return code means.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import os
import threading
import warnings
from pathlib import Path
from typing import Any

import torch

from cudnn_rnn.core.modes import MODES
from cudnn_rnn.core.variant import ACTIVATIONS

__all__ = [
    "ABI_VERSION",
    "ENV",
    "ISA_ENV",
    "LIBRARY_ENV",
    "MODE_CODES",
    "NativeEngineWarning",
    "available",
    "built_level_names",
    "describe",
    "level_names",
    "library_path",
]

ENV = "CUDNN_RNN_NATIVE"
#: Runs the engine at this instruction set instead of the best the machine has (``avx512``,
#: ``avx2``, ``base``): how a test run on one machine takes the paths of another.
ISA_ENV = "CUDNN_RNN_NATIVE_ISA"
#: Loads the engine from this file instead of the package's (``make sanitize`` points it at the
#: AddressSanitizer/UBSan build).
LIBRARY_ENV = "CUDNN_RNN_NATIVE_LIBRARY"
ABI_VERSION = 20
#: The C library's mode codes: cuDNN's (the mode table's), checked against the library's own
#: gate counts when it loads.
MODE_CODES = {name: m.code for name, m in MODES.items()}


class NativeEngineWarning(RuntimeWarning):
    """The native engine is not built or cannot load: torch's kernels run instead."""


_I64 = ctypes.c_int64
_PTR = ctypes.c_void_p
_SIZES = "mode steps batch units reverse threads"


def _fields(names: str) -> list[tuple[str, type[ctypes._SimpleCData[Any]]]]:
    """A structure's fields in order: ``name`` an int64, ``*name`` a pointer, ``.name`` a
    double (8 bytes each)."""
    kinds: dict[str, type[ctypes._SimpleCData[Any]]] = {"*": _PTR, ".": ctypes.c_double}
    return [(n.lstrip("*."), kinds.get(n[0], _I64)) for n in names.split()]


class _ForwardArgs(ctypes.Structure):
    """Mirror of ``cr_forward_args`` in engine.c."""

    _fields_ = _fields(
        f"{_SIZES} *gi gi_st gi_sb *bi *r *br *h0 *c0 *lengths *y y_st y_sb "
        "*hn *cn *ws_gates *ws_extra *x *w input_size *bi2 rows *rowmap ws_rows *wsmap "
        "*variant *peep"
    )


class _BackwardArgs(ctypes.Structure):
    """Mirror of ``cr_backward_args`` in engine.c."""

    _fields_ = _fields(
        f"{_SIZES} *r *lengths *gates *hout *extra *c0 *dy dy_st dy_sb "
        "*dhy *dcy *dgi *dghn *dh0 *dc0 ws_rows *wsmap hout_rs hout_compact *h0 "
        "*variant *peep *dpeep"
    )


class _VariantArgs(ctypes.Structure):
    """Mirror of ``cr_variant`` in engine.c: a variant's math (see native_variant.py)."""

    _fields_ = _fields(
        "gate_act cell_act out_act .gate_alpha .cell_alpha .out_alpha .gate_beta .cell_beta "
        ".out_beta .gate_clip .cell_clip input_forget reset_before"
    )


class _GemmArgs(ctypes.Structure):
    """Mirror of ``cr_gemm_args`` in engine.c."""

    _fields_ = _fields("at m n k *a lda *b ldb *c ldc accumulate *colsum threads")


class _StepArgs(ctypes.Structure):
    """Mirror of ``cr_step_args`` in step.h: one step of a cell, forward or backward."""

    _fields_ = _fields(
        "mode batch units input_size threads *w_ih *w_hh *b_ih *b_hh *x *h0 *c0 *h1 *c1 "
        "*gates *extra *dh1 *dc1 *dx *dh0 *dc0 *dw_ih *dw_hh *db_ih *db_hh"
    )


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
    if lib.cr_activations() != len(ACTIVATIONS):
        raise OSError(
            f"{found[0].name} knows {lib.cr_activations()} activations, the package "
            f"{len(ACTIVATIONS)}: reinstall cudnn-rnn (pip install -e .)"
        )
    lib.cr_level_name.restype = ctypes.c_char_p
    forced = os.environ.get(ISA_ENV, "").strip()
    if forced:
        names = _runnable(lib)
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
    lib.cr_step_forward.argtypes = [ctypes.POINTER(_StepArgs)]
    lib.cr_step_backward.argtypes = [ctypes.POINTER(_StepArgs)]
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


#: The engine's best level (engine.c's ``isa_of``: 2 AVX-512, 1 AVX2, 0 the portable code).
_TOP_LEVEL = 2


def level_names() -> list[str]:
    """The instruction sets this machine can run the engine at, best first (empty if none)."""
    lib = _library().lib
    return [] if lib is None else _runnable(lib)


def _runnable(lib: ctypes.CDLL) -> list[str]:
    """The instruction sets ``lib`` can run at on this machine, best first."""
    return [lib.cr_level_name(k).decode() for k in range(lib.cr_supported_level(), -1, -1)]


def built_level_names() -> list[str]:
    """Every instruction set the engine was built with, best first, whether or not this machine
    can run it (empty if the engine is not loaded): what a test of every ISA covers."""
    lib = _library().lib
    if lib is None:
        return []
    return list(dict.fromkeys(lib.cr_level_name(k).decode() for k in range(_TOP_LEVEL, -1, -1)))


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
