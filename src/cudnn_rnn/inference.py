"""Inference through onnxruntime: the faster CPU path for calls that need no gradient.

On CPU, onnxruntime's LSTM/GRU/RNN kernels often run a forward pass faster than torch's (less
work per time step; which one wins depends on mode, shape and CPU: docs/benchmarks.md). So when
a call needs no gradient, the ops and layers hand it to an onnxruntime session built from the
same weights (the graph of :func:`cudnn_rnn.formats.onnx.model_proto`: standard ONNX operators
that compute cuDNN's math). Results equal the torch path to float32 rounding (the tests check
both against the NumPy oracle).

The path is taken when all of these hold, otherwise the call runs on torch's kernels:

* the inference backend is ``"auto"`` (the default) or ``"onnxruntime"``, and ``onnx`` and
  ``onnxruntime`` are installed (``pip install cudnn-rnn[onnx]``);
* CPU, float32, no LSTM projection, no active dropout;
* no gradient is needed: grad mode is off (``torch.no_grad()``/``inference_mode``) or no input
  requires a gradient;
* not inside ``torch.compile`` or ``torch.jit.trace`` (which need torch operators);
* in ``"auto"`` mode, the same weights were already used once: the first call with new weights
  runs on torch, the second builds the session (tens of ms, once);
* in ``"auto"`` mode, onnxruntime is faster for this problem size: each size (steps, batch,
  lengths, initial states) is timed on both paths over its first calls and then stays on the
  faster one (torch's oneDNN LSTM beats onnxruntime on large batches on some CPUs, onnxruntime
  wins on GRU, plain RNNs, small batches and variable lengths on ours: docs/benchmarks.md).

Sessions are cached per op object and rebuilt when the weights change. A change is seen through
the parameter tensor's identity, data pointer and autograd version counter (every in-place
update such as ``optimizer.step()``, ``copy_`` or ``load_state_dict`` bumps it) and a sample of
64 of its values. Writes through ``tensor.data`` bypass the version counter: after such a write
to a few elements, call :func:`clear_sessions` (or use the ``"torch"`` backend).

Sessions use ``torch.get_num_threads()`` threads that spin while a call runs (the time steps
are short; waking sleeping threads at every step cost 2x on small problems) and stop spinning
when it returns (``session.force_spinning_stop``): threads left spinning starved the torch code
that ran next, 3x-10x in our measurements.

>>> get_inference_backend()
'auto'
>>> with inference_backend("torch"):
...     get_inference_backend()
'torch'
"""

from __future__ import annotations

import contextlib
import importlib
import os
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from cudnn_rnn.core.layout import Layout

__all__ = [
    "BACKENDS",
    "TRIALS",
    "TRIAL_BLOCK",
    "clear_sessions",
    "get_inference_backend",
    "inference_backend",
    "set_inference_backend",
]

#: ``"auto"``: onnxruntime where it applies (see the module docstring), torch otherwise;
#: ``"torch"``: always torch's kernels; ``"onnxruntime"``: onnxruntime wherever it applies,
#: from the first call, and an ImportError when it is not installed.
BACKENDS = ("auto", "torch", "onnxruntime")
#: Timed calls per path before ``"auto"`` settles a problem size on the faster one, taken in
#: blocks of :data:`TRIAL_BLOCK` that alternate between the paths (torch first).
TRIALS = 6
TRIAL_BLOCK = 3
_ENV = "CUDNN_RNN_INFERENCE"
_clock = time.perf_counter  # replaced by tests
Result = tuple[Tensor, Tensor, Tensor | None]
_SAMPLES = 64


def _check_backend(name: object, where: str) -> str:
    if name not in BACKENDS:
        raise ValueError(f"{where}: the inference backend must be one of {BACKENDS}, got {name!r}.")
    return str(name)


_state = {"backend": _check_backend(os.environ.get(_ENV, "auto"), f"${_ENV}")}


def get_inference_backend() -> str:
    """The current inference backend (initially ``$CUDNN_RNN_INFERENCE`` or ``"auto"``)."""
    return _state["backend"]


def set_inference_backend(name: str) -> str:
    """Choose the inference backend (one of :data:`BACKENDS`); returns the previous one."""
    previous = _state["backend"]
    _state["backend"] = _check_backend(name, "set_inference_backend")
    return previous


@contextlib.contextmanager
def inference_backend(name: str) -> Iterator[None]:
    """Use backend ``name`` inside a ``with`` block (restored after it, also on errors)."""
    previous = set_inference_backend(name)
    try:
        yield
    finally:
        _state["backend"] = previous


_ort_module: list[Any] = []  # [module] once imported, [None] when unavailable


def _ort() -> Any:
    if not _ort_module:
        try:
            importlib.import_module("onnx")
            _ort_module.append(importlib.import_module("onnxruntime"))
        except ImportError:
            _ort_module.append(None)
    return _ort_module[0]


_CACHES: weakref.WeakSet[SessionCache] = weakref.WeakSet()


def clear_sessions() -> None:
    """Drop every cached session (they are rebuilt from the current weights when next used)."""
    for cache in list(_CACHES):
        cache.clear()


@dataclass
class _Entry:
    params: weakref.ref[Tensor]
    fingerprint: tuple[int, int, Tensor]
    uses: int = 0
    #: By (sequence lengths fed, initial states fed).
    sessions: dict[tuple[bool, bool], Any] = field(default_factory=dict)


@dataclass
class _Trial:
    """Seconds per call measured on each path for one problem size."""

    warm: int = 0
    torch: list[float] = field(default_factory=list)
    ort: list[float] = field(default_factory=list)


class SessionCache:
    """The onnxruntime sessions of one op object (one per use of sequence lengths)."""

    def __init__(self, layout: Layout) -> None:
        self._layout = layout
        self._entry: _Entry | None = None
        self._failed = False
        #: The faster path per problem size, once measured; sizes being measured.
        self._choices: dict[tuple[int, int, bool, bool], str] = {}
        self._trials: dict[tuple[int, int, bool, bool], _Trial] = {}
        _CACHES.add(self)

    def clear(self) -> None:
        """Drop the session (the measured choices of path stay)."""
        self._entry = None

    # Copies and pickles (copy.deepcopy(layer), torch.save(layer)) start with no sessions.
    def __getstate__(self) -> dict[str, Any]:
        return {"layout": self._layout}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["layout"])  # type: ignore[misc]

    def applies(
        self, params: Tensor, x: Tensor, *, dropout: bool, states: tuple[Tensor, ...]
    ) -> bool:
        """Whether this call may run on onnxruntime (the conditions of the module docstring)."""
        backend = _state["backend"]
        if backend == "torch" or self._failed:
            return False
        spec = self._layout.spec
        if (
            dropout
            or spec.num_proj is not None
            or x.device.type != "cpu"
            or x.dtype != torch.float32
            or type(x) is not Tensor
            or type(params) not in (Tensor, torch.nn.Parameter)
        ):
            return False
        if torch.is_grad_enabled() and (
            params.requires_grad or x.requires_grad or any(s.requires_grad for s in states)
        ):
            return False
        if torch.compiler.is_compiling() or torch._C._get_tracing_state() is not None:
            return False
        if _ort() is None:
            if backend == "onnxruntime":
                raise ImportError(
                    "cudnn_rnn: the onnxruntime inference backend needs onnx and onnxruntime: "
                    "pip install onnx onnxruntime (or set_inference_backend('auto'))"
                )
            return False
        return True

    def run(
        self,
        params: Tensor,
        x: Tensor,
        h0: Tensor,
        c0: Tensor | None,
        lengths: Tensor | None,
        time_major: bool,
        zero_states: bool,
        on_torch: Callable[[], Result],
    ) -> Result:
        """The forward pass of a call that :meth:`applies`, on onnxruntime or ``on_torch()``.

        In ``"auto"`` mode each problem size (steps, batch, lengths fed, states fed) is tried on
        both paths: two untimed onnxruntime calls warm the session up, then :data:`TRIALS` timed
        calls on each path, in alternating blocks of :data:`TRIAL_BLOCK`; from then on that size
        runs on the faster one (the lower best time). Every call returns its own result,
        whichever path ran it.
        """
        steps, batch = (x.shape[0], x.shape[1]) if time_major else (x.shape[1], x.shape[0])
        use_lengths = lengths is not None and int(lengths.min()) < steps
        size = (int(steps), int(batch), use_lengths, not zero_states)
        auto = _state["backend"] == "auto"
        choice = self._choices.get(size) if auto else "onnxruntime"
        if choice == "torch":
            return on_torch()
        session = self._session(params, size[2:])
        if session is None:
            return on_torch()

        def on_ort() -> Result:
            return _run_session(session, x, h0, c0, lengths, time_major, zero_states, use_lengths)

        if choice == "onnxruntime":
            return on_ort()
        trial = self._trials.setdefault(size, _Trial())
        if trial.warm < 2:
            trial.warm += 1
            return on_ort()
        # Blocks, not call-by-call alternation: a path's first call after the other's pays for
        # waking its threads and caches, which a steady run of one size does not. More than one
        # block per path: a burst of load from elsewhere that covers one block cannot decide.
        done = len(trial.torch) + len(trial.ort)
        side, path = ("torch", on_torch) if done // TRIAL_BLOCK % 2 == 0 else ("ort", on_ort)
        start = _clock()
        out = path()
        getattr(trial, side).append(_clock() - start)
        if min(len(trial.torch), len(trial.ort)) >= TRIALS:
            self._choices[size] = "onnxruntime" if min(trial.ort) <= min(trial.torch) else "torch"
            del self._trials[size]
        return out

    def _session(self, params: Tensor, key: tuple[bool, bool]) -> Any:
        fingerprint = _fingerprint(params)
        entry = self._entry
        if (
            entry is None
            or entry.params() is not params
            or entry.fingerprint[:2] != fingerprint[:2]
            or not torch.equal(entry.fingerprint[2], fingerprint[2])
        ):
            entry = self._entry = _Entry(weakref.ref(params), fingerprint)
        entry.uses += 1
        session = entry.sessions.get(key)
        if session is None:
            if _state["backend"] == "auto" and entry.uses < 2:
                return None  # weights seen once: not worth a session yet
            try:
                session = self._build(params, *key)
            except Exception:
                if _state["backend"] == "onnxruntime":
                    raise
                self._failed = True  # never again for this op: torch it is
                return None
            entry.sessions[key] = session
        return session

    def _build(self, params: Tensor, use_lengths: bool, states: bool) -> Any:
        from cudnn_rnn.formats.onnx import model_proto

        ort = _ort()
        spec = self._layout.spec
        weights, biases = self._layout.unpack(params.detach())
        model = model_proto(
            spec,
            weights,
            biases,
            torch.float32,
            sequence_lens=use_lengths,
            initial_state=states,
            owner="inference",
        )
        options = ort.SessionOptions()
        options.log_severity_level = 3  # no notes about unused initializers
        options.add_session_config_entry("session.force_spinning_stop", "1")
        options.intra_op_num_threads = torch.get_num_threads()
        return ort.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )


def _run_session(
    session: Any,
    x: Tensor,
    h0: Tensor,
    c0: Tensor | None,
    lengths: Tensor | None,
    time_major: bool,
    zero_states: bool,
    use_lengths: bool,
) -> Result:
    xt = x if time_major else x.transpose(0, 1)
    feeds = {"X": _array(xt)}
    if not zero_states:
        feeds["initial_h"] = _array(h0)
        if c0 is not None:
            feeds["initial_c"] = _array(c0)
    if use_lengths:
        assert lengths is not None
        feeds["sequence_lens"] = lengths.numpy().astype(np.int32)
    outputs = [torch.from_numpy(a) for a in session.run(None, feeds)]
    y = outputs[0] if time_major else outputs[0].transpose(0, 1)
    return y, outputs[1], (outputs[2] if len(outputs) > 2 else None)


def _fingerprint(params: Tensor) -> tuple[int, int, Tensor]:
    n = params.numel()
    step = max(1, n // _SAMPLES)
    sample = params.detach()[::step][:_SAMPLES].clone()
    return params.data_ptr(), params._version, sample


def _array(t: Tensor) -> np.ndarray:
    return t.detach().contiguous().numpy()
