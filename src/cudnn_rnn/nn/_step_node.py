"""The cells' step as a torch operator with its autograd node in C++ (issue 48): loading it,
binding it to the native engine, and its double backward.

A cell stepped in a Python loop is latency bound, and a ``torch.autograd.Function`` in Python
(:mod:`cudnn_rnn.operator.planned_step`) cost more per step than torch.nn's whole step. The
operator ``cudnn_rnn_step::step`` (``_native/step_node.cpp``) runs the same engine functions
(``cr_step_forward``, ``cr_step_backward``) from a C++ node, so the same bits as the Python path.

It is a torch extension: ``setup.py`` builds it where torch is importable at build time (``pip
install --no-build-isolation``, which ``make install`` runs), as ``_step_node-torch<version>.so``,
and only a torch of that version loads it (a C++ extension is bound to the torch it was compiled
against), and only where it was compiled with this package's engine ABI (a node left from a
build of other sources is refused). Where it is not built, was built for another torch or ABI,
cannot load, or ``CUDNN_RNN_STEP_NODE=0`` is set, :func:`step_op` is None and the cells take the
Python path: the same results, a few tens of microseconds more per step. :func:`describe` says
which.

A backward in grad mode (``create_graph=True``) calls ``cudnn_rnn_step::step_grads``, which is
implemented here: the step again through cudnn_rnn's operator, differentiated by autograd with
``create_graph=True``, whose own double backward is the operator's.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from cudnn_rnn.core.layout import layout_of
from cudnn_rnn.core.modes import mode_of_code
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.engines import native_library
from cudnn_rnn.nn import _flat
from cudnn_rnn.operator.planned_step import differentiable_grads

__all__ = ["ENV", "describe", "file_name", "step_op"]

#: ``CUDNN_RNN_STEP_NODE=0`` keeps the cells on the Python path (a test compares the two).
ENV = "CUDNN_RNN_STEP_NODE"
#: setup.py's note beside the package's modules where the node was not built: why.
NOT_BUILT_FILE = "_step_node_not_built.txt"


def file_name() -> str:
    """The library's file name for the running torch: ``_step_node-torch<version>.so``."""
    return f"_step_node-torch{torch.__version__}.so"


class _State:
    """The loaded operator, or why there is none; and the engine it is bound to."""

    def __init__(self) -> None:
        self.op: Callable[..., Any] | None = None
        self.reason = ""
        self.engine: object = None  # the native library state the operator's addresses are of
        if os.environ.get(ENV, "1").strip().lower() in ("0", "false", "no", "off"):
            self.reason = f"disabled by {ENV}={os.environ[ENV]}"
            return
        path = Path(__file__).resolve().parent.parent / file_name()
        if not path.is_file():
            built = sorted(p.name for p in path.parent.glob("_step_node-torch*.so"))
            note = path.parent / NOT_BUILT_FILE  # (setup.py's, where the build failed)
            if built:
                self.reason = (
                    f"built for another torch ({', '.join(built)}; this is {torch.__version__}): "
                    "reinstall cudnn-rnn"
                )
            elif note.is_file():
                why = note.read_text(encoding="utf-8", errors="replace").strip()
                self.reason = f"not built ({why[:300]})"
            else:
                self.reason = "not built"
            return
        try:
            torch.ops.load_library(str(path))  # type: ignore[no-untyped-call]
        except (OSError, RuntimeError) as err:
            self.reason = f"{path.name} cannot load ({err})"
            return
        built = torch.ops.cudnn_rnn_step.abi()
        if built != native_library.ABI_VERSION:  # (a node left from a build of older sources)
            self.reason = (
                f"{path.name} was built for engine ABI {built}, this package is ABI "
                f"{native_library.ABI_VERSION}: reinstall cudnn-rnn"
            )
            return
        _implement_step_grads()
        self.op = torch.ops.cudnn_rnn_step.step.default


_state: _State | None = None
_lock = threading.Lock()
#: The Python implementation of ``cudnn_rnn_step::step_grads``, registered once per process
#: (the library, once loaded, stays loaded; a second registration would be refused).
_registry: torch.library.Library | None = None


def _implement_step_grads() -> None:
    global _registry
    if _registry is None:
        _registry = torch.library.Library("cudnn_rnn_step", "IMPL")  # type: ignore[no-untyped-call]
        _registry.impl("step_grads", _step_grads, "CompositeImplicitAutograd")  # type: ignore[no-untyped-call]


def _loaded() -> _State:
    global _state
    if _state is None:
        with _lock:
            if _state is None:
                _state = _State()
    return _state


def _reload() -> None:
    """Forget the state (tests change ``CUDNN_RNN_STEP_NODE``); a library once loaded stays in
    the process, and is found again."""
    global _state
    _state = None


def step_op() -> Callable[..., Any] | None:
    """``cudnn_rnn_step::step`` bound to the native engine loaded now, or None (the Python
    path; :func:`describe` says why). The caller checked that the native engine runs the step."""
    state = _loaded()
    if state.op is None:
        return None
    engine = native_library._library()
    if state.engine is not engine:  # (the first call, or a test reloaded the engine)
        lib = engine.lib
        if lib is None:
            return None
        forward, backward = (
            ctypes.cast(f, ctypes.c_void_p).value
            for f in (lib.cr_step_forward, lib.cr_step_backward)
        )
        torch.ops.cudnn_rnn_step.bind(forward, backward)
        state.engine = engine
    return state.op


def describe() -> str:
    """Which step the cells run: ``C++ node`` or ``Python (...why)``."""
    state = _loaded()
    return "C++ node" if state.op is not None else f"Python ({state.reason})"


def _step_grads(
    x: Tensor,
    h0: Tensor,
    c0: Tensor | None,
    mode: int,
    params: Sequence[Tensor],
    dh1: Tensor,
    dc1: Tensor | None,
) -> list[Tensor]:
    """``[dx, dh0, (dc0,) *dparams]`` as a differentiable function of the step's inputs and of
    ``dh1`` and ``dc1``: the step again through cudnn_rnn's operator on a buffer made from
    ``params`` (of the layer of mode code ``mode`` and ``x``'s and ``h0``'s sizes),
    differentiated with ``create_graph=True``; zeros for an input that needs no gradient."""
    layout = layout_of(RNNSpec(mode_of_code(mode).name, 1, h0.shape[1], x.shape[1]))
    blocks = _flat.blocks(layout, len(params) > 2)
    given = [x, h0, c0, *params]
    wanted = [t is not None and t.requires_grad for t in given]
    found = differentiable_grads(
        layout, lambda ps: _flat.concatenated(ps, layout, blocks), given, wanted, dh1, dc1
    )
    return [
        torch.zeros_like(t) if g is None else g
        for t, g in zip(given, found, strict=True)
        if t is not None
    ]
