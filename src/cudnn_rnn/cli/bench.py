"""Time a model of your own against ``torch.nn`` and the other runtimes installed.

``cudnn-rnn bench MODEL`` loads the one model of ``MODEL`` (any file ``cudnn-rnn convert`` reads)
and times our layer, called as users call it, on a seeded normal input ``[T, B, input_size]``
against the same weights in each peer that is installed:

* ``torch.nn.LSTM/GRU/RNN`` (:func:`cudnn_rnn.convert.to_torch`); variable lengths go through
  ``pack_padded_sequence`` / ``pad_packed_sequence``, as torch users write it;
* onnxruntime (default session options) running our :func:`~cudnn_rnn.convert.to_onnx` export
  and, for full-length inputs, ``torch.onnx.export`` of the ``torch.nn`` module;
* OpenVINO (``Core().compile_model(path, "CPU")``) running our export, with
  ``INFERENCE_PRECISION_HINT`` f32: on CPUs with bf16 instructions its default is bf16, which
  computes something else;
* Keras 3 (:func:`~cudnn_rnn.convert.to_keras`; backend ``$KERAS_BACKEND``, torch if unset),
  full-length inputs only.

onnxruntime, OpenVINO and Keras run float32 models on CPU. Each runtime session runs in a
process of its own (:class:`RemotePeer`), never in this one: a default onnxruntime session keeps
its threads spinning after a run, which starved whatever ran next in the same process (torch.nn
ran up to 10x slower). Those processes load only the runtime and NumPy
(:mod:`cudnn_rnn.cli.runtime_peer`; not torch, whose import would add about 2 s to each). They
are timed on command, block by block, in turn with the implementations of this
process, and each waits :data:`RUNTIME_SETTLE` seconds after its block before the next one
starts, so that its spinning threads have stopped. Each peer's output is
compared with ours over the valid steps (:func:`compare`); a note says where one differs by
more than :data:`OUTPUT_TOLERANCE`, and where a runtime leaves values that are not 0 past a
sequence's length (ours writes 0 there).

Method (:func:`time_alternating`): every implementation first warms up untimed (``warmup``
seconds and at least :data:`WARMUP_CALLS` calls); then they alternate block by block (one untimed
call, then enough timed calls to fill ``block`` seconds), ``repeats`` times, and the median time
per call is reported. Every peer, the runtimes in their processes included, alternates with
ours, so a machine whose speed drifts (a shared one) moves all of them alike and the ratios
hold where the times do not. Inference is a forward pass under ``torch.no_grad()``; a training
step is a forward pass, a backward pass of ``sum(out * g)`` and dropping the gradients, against
``torch.nn`` only (the only peer that trains).

:func:`measure` does all of it for one layer and a list of input batches; the project's
benchmark suite (``make bench``: ``benchmarks/suite.py`` in the repository, not in the package)
runs it on each of its shapes.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from cudnn_rnn import convert
from cudnn_rnn.cli import runtime_peer as _runtime_peer
from cudnn_rnn.cli.runtime_peer import compare, compare_all
from cudnn_rnn.cli.timing import WARMUP_CALLS, Timing, add_timing_arguments, check_timing_arguments
from cudnn_rnn.errors import CudnnRNNError
from cudnn_rnn.layers import _CudnnRNN

__all__ = [
    "KERAS",
    "OPENVINO",
    "ORT_OURS",
    "ORT_TORCH",
    "OURS",
    "OUTPUT_TOLERANCE",
    "PEERS",
    "RUNTIMES",
    "RUNTIME_SETTLE",
    "TORCH_NN",
    "WARMUP_CALLS",
    "Batch",
    "Measurement",
    "RemotePeer",
    "RemotePeerError",
    "Timing",
    "add_timing_arguments",
    "check_timing_arguments",
    "compare",
    "in_fresh_process",
    "inference_step",
    "installed",
    "layer_call",
    "measure",
    "ort_options",
    "random_batches",
    "report",
    "runtime_jobs",
    "runtime_threads",
    "sync",
    "time_alternating",
    "torch_call",
    "training_step",
]

OURS, TORCH_NN = "ours", "torch.nn"
ORT_OURS, ORT_TORCH = "onnxruntime (our export)", "onnxruntime (torch export)"
OPENVINO, KERAS = "openvino (our export)", "keras"
#: Every implementation ours is compared with, in the order tables list them.
PEERS = (TORCH_NN, ORT_OURS, ORT_TORCH, OPENVINO, KERAS)
#: The runtime (and its pip package) behind each peer that runs an ONNX file.
RUNTIMES = {ORT_OURS: "onnxruntime", ORT_TORCH: "onnxruntime", OPENVINO: "openvino"}
#: A peer whose output differs from ours by more than this gets a note.
OUTPUT_TOLERANCE = 1e-4
# WARMUP_CALLS (cudnn_rnn.cli.timing's, which the runtimes' processes use too): the first call
# makes the one-time allocations (oneDNN primitives, skip_input's identity, Keras's build), the
# second runs warm and measures the block size.


#: One input batch: ``x [T, B, input_size]`` (float32) and its int32 sequence lengths (None:
#: every sequence is full).
Batch = tuple[np.ndarray, np.ndarray | None]


def random_batches(
    batch: int,
    input_size: int,
    steps: Sequence[int],
    lengths: Sequence[Sequence[int] | None] | None = None,
    seed: int = 0,
) -> list[Batch]:
    """One seeded normal ``[steps[i], batch, input_size]`` float32 array per entry of ``steps``,
    each with ``lengths[i]`` as int32 (None: full), all drawn from one generator.

    >>> [(x.shape, n) for x, n in random_batches(2, 3, [4])]
    [((4, 2, 3), None)]
    """
    lengths = [None] * len(steps) if lengths is None else lengths
    if len(lengths) != len(steps):
        raise ValueError(
            f"random_batches: {len(steps)} batch lengths in steps but {len(lengths)} in lengths."
        )
    rng = np.random.default_rng(seed)
    out: list[Batch] = []
    for count, valid in zip(steps, lengths):
        x = rng.standard_normal((count, batch, input_size), dtype=np.float32)
        out.append((x, None if valid is None else np.asarray(valid, np.int32)))
    return out


# -- calling the implementations -------------------------------------------------------------------


def layer_call(layer: _CudnnRNN, x: Tensor, lengths: Tensor | None) -> Tensor:
    """Our layer's outputs on time-major ``x`` (with ``sequence_lengths``), as users call it."""
    out: Tensor = layer(x, sequence_lengths=lengths)[0]
    return out


def torch_call(module: torch.nn.Module, x: Tensor, lengths: Tensor | None) -> Tensor:
    """A ``torch.nn`` RNN's outputs on time-major ``x``; lengths through packed sequences."""
    if lengths is None:
        out: Tensor = module(x)[0]
        return out
    packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)
    packed_out = module(packed)[0]
    return torch.nn.utils.rnn.pad_packed_sequence(packed_out, total_length=x.shape[0])[0]


def inference_step(call: Callable[[], Any]) -> Callable[[], None]:
    """``call`` under ``torch.no_grad()``."""

    def run() -> None:
        with torch.no_grad():
            call()

    return run


def training_step(
    call: Callable[[], Tensor], params: Sequence[torch.nn.Parameter], grad_out: Tensor
) -> Callable[[], None]:
    """A forward pass, the backward pass of ``sum(out * grad_out)``, the gradients dropped."""

    def run() -> None:
        out = call()
        (out * grad_out).sum().backward()  # type: ignore[no-untyped-call]
        for p in params:
            p.grad = None

    return run


def _tensors(
    batches: Sequence[Batch], device: str, dtype: torch.dtype
) -> list[tuple[Tensor, Tensor | None]]:
    return [
        (
            torch.from_numpy(x).to(device=device, dtype=dtype),
            None if lengths is None else torch.from_numpy(lengths).long(),
        )
        for x, lengths in batches
    ]


# -- timing ----------------------------------------------------------------------------------------


def sync(device: str) -> None:
    """Wait for the device's queued work (CUDA); nothing to wait for on a CPU."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()


class _Local(_runtime_peer.Blocks):
    """An implementation in this process, as :func:`time_alternating` drives it."""

    def __init__(self, fn: Callable[[], None], device: str) -> None:
        super().__init__(fn, lambda: sync(device))


def time_alternating(
    fns: Mapping[str, Callable[[], None] | RemotePeer],
    *,
    repeats: int,
    block: float,
    device: str = "cpu",
    warmup: float = 1.0,
) -> dict[str, float]:
    """Median seconds per call of each implementation, measured in alternating blocks.

    An implementation is a function called in this process or a :class:`RemotePeer` (a runtime
    in a process of its own, timed on command), so the two kinds alternate block by block and
    a machine whose speed drifts drifts under all of them alike. Each first runs untimed for
    ``warmup`` seconds and at least :data:`WARMUP_CALLS` calls; the time of one more call sets
    how many calls fill a block. Then, ``repeats`` times, each makes one untimed call (whatever
    the previous one left running settles) and a timed block.
    """
    impls = {n: f if isinstance(f, RemotePeer) else _Local(f, device) for n, f in fns.items()}
    counts = {
        name: max(1, min(1000, int(block / max(impl.warm(warmup), 1e-6))))
        for name, impl in impls.items()
    }
    samples: dict[str, list[float]] = {name: [] for name in impls}
    for _ in range(repeats):
        for name, impl in impls.items():
            samples[name].append(impl.block(counts[name]))
    return {name: statistics.median(v) for name, v in samples.items()}


# -- comparing outputs -----------------------------------------------------------------------------


# -- one layer against its peers -------------------------------------------------------------------


@dataclass
class Measurement:
    """Median seconds per call of each implementation (missing: not run), how far each peer's
    output is from ours, and notes on what was left out and why."""

    inference: dict[str, float] = field(default_factory=dict)
    training: dict[str, float] = field(default_factory=dict)
    #: max |output - ours| of each peer, over the valid steps.
    max_abs_diff: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def check(self, peer: str, diff: float, padding: float, label: str) -> None:
        """Record ``peer``'s distance from ours; a note where it is off."""
        self.max_abs_diff[peer] = diff
        if not diff <= OUTPUT_TOLERANCE:  # NaN too
            self.notes.append(
                f"{peer} differs from ours on {label}: "
                f"max |output - ours| = {diff:.1e} over the valid steps"
            )
        if padding > 0:
            self.notes.append(
                f"{peer} leaves outputs that are not 0 past the sequence lengths (ours writes 0; "
                f"max {padding:.1e} on {label})"
            )


def _seconds(timing: Timing, count: int) -> int:
    """About how long timing ``count`` implementations takes (warm-up and blocks), rounded up."""
    return int(count * (timing.warmup + timing.repeats * timing.block)) + 1


def measure(
    layer: _CudnnRNN,
    batches: Sequence[Batch],
    *,
    device: str = "cpu",
    timing: Timing | None = None,
    inference: bool = True,
    training: bool = False,
    keras: bool = True,
    runtimes: bool = True,
    label: str = "the model",
    progress: Callable[[str], None] | None = None,
) -> Measurement:
    """Time ``layer`` against its peers on ``batches`` (one call runs all of them).

    Inference: ours, ``torch.nn`` and, with ``keras``, Keras, alternating in this process; then,
    with ``runtimes``, onnxruntime and OpenVINO in a fresh one. Training (on the first batch):
    ours and ``torch.nn``. ``timing`` defaults to :class:`Timing`'s defaults; ``label`` names
    the model in the notes. ``progress`` is told each phase as it starts, in a few words
    ("timing inference: 4 implementations, about 12 s").
    """
    timing = Timing() if timing is None else timing
    say = progress or (lambda _: None)
    say("checking the peers' outputs against ours")
    result = Measurement()
    tensors = _tensors(batches, device, layer.dtype)
    module = _torch_peer(layer, device, result.notes)
    with torch.no_grad():
        ours = [layer_call(layer, x, n) for x, n in tensors]
        expected = [o.detach().to("cpu", torch.float32).numpy() for o in ours]
    if inference:
        fns = {OURS: inference_step(lambda: [layer_call(layer, x, n) for x, n in tensors])}
        if module is not None:
            fns[TORCH_NN] = inference_step(lambda: [torch_call(module, x, n) for x, n in tensors])
            with torch.no_grad():
                got = [
                    torch_call(module, x, n).to("cpu", torch.float32).numpy() for x, n in tensors
                ]
            result.check(TORCH_NN, *compare_all(got, expected, batches), label)
        on_cpu = torch.device(device).type == "cpu"
        float32 = layer.dtype == torch.float32
        if keras and on_cpu and float32:
            keras_call = _keras_peer(layer, tensors, expected, batches, result, label)
            if keras_call is not None:
                fns[KERAS] = inference_step(keras_call)
        if (keras or runtimes) and not on_cpu:
            result.notes.append("onnxruntime, OpenVINO and Keras: compared on CPU only")
        elif (keras or runtimes) and not float32:
            result.notes.append("onnxruntime, OpenVINO and Keras: compared on float32 models only")
        with tempfile.TemporaryDirectory() as tmp:
            remotes: dict[str, RemotePeer] = {}
            if runtimes and on_cpu and float32:
                say("exporting to ONNX and starting onnxruntime and OpenVINO")
                remotes = _runtime_peers(
                    layer, batches, tensors[0][0], expected, tmp, result, label
                )
            count = len(fns) + len(remotes)
            say(f"timing inference: {count} implementations, about {_seconds(timing, count)} s")
            try:
                result.inference = _time_with_runtimes(fns, remotes, device, timing, result, label)
            finally:
                for remote in remotes.values():
                    remote.close()
    if training:
        say(f"timing a training step: ours and torch.nn, about {_seconds(timing, 2)} s")
        x, lengths = tensors[0]
        grad_out = torch.randn(
            ours[0].shape, generator=torch.Generator().manual_seed(1), dtype=torch.float32
        ).to(device=device, dtype=ours[0].dtype)
        if lengths is not None:  # the padded outputs are 0 on every side: the same loss
            mask = torch.arange(x.shape[0])[:, None] < lengths[None, :]
            grad_out = grad_out * mask.to(device).unsqueeze(-1)
        train = {
            OURS: training_step(
                lambda: layer_call(layer, x, lengths), [*layer.parameters()], grad_out
            )
        }
        if module is not None:
            train[TORCH_NN] = training_step(
                lambda: torch_call(module, x, lengths), [*module.parameters()], grad_out
            )
        result.training = time_alternating(train, device=device, **_timed(timing))
    return result


def _timed(timing: Timing) -> dict[str, Any]:
    return {"repeats": timing.repeats, "block": timing.block, "warmup": timing.warmup}


def _time_with_runtimes(
    fns: dict[str, Callable[[], None]],
    remotes: dict[str, RemotePeer],
    device: str,
    timing: Timing,
    result: Measurement,
    label: str,
) -> dict[str, float]:
    """:func:`time_alternating` over this process's functions and the runtimes' processes; a
    runtime whose process fails mid-way gets a note and the rest are timed again without it."""
    while True:
        try:
            return time_alternating({**fns, **remotes}, device=device, **_timed(timing))
        except RemotePeerError as err:
            result.notes.append(f"{err.peer} failed on {label}: {err.reason}")
            remotes.pop(err.peer).close()


def _torch_peer(layer: _CudnnRNN, device: str, notes: list[str]) -> torch.nn.Module | None:
    try:
        module: torch.nn.Module = convert.to_torch(layer)
    except (ValueError, TypeError) as err:  # e.g. a projection torch.nn cannot hold
        notes.append(f"torch.nn: not compared ({_first_line(err)})")
        return None
    return module.to(device)


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


def _keras_peer(
    layer: _CudnnRNN,
    tensors: Sequence[tuple[Tensor, Tensor | None]],
    expected: Sequence[np.ndarray],
    batches: Sequence[Batch],
    result: Measurement,
    label: str,
) -> Callable[[], None] | None:
    """Keras's forward over the batches (batch-major, as Keras takes them), its distance from
    ours recorded; None (with a note) where it cannot run."""
    if any(n is not None for _, n in tensors):
        result.notes.append("Keras: full-length sequences only here, not compared")
        return None
    os.environ.setdefault("KERAS_BACKEND", "torch")
    try:
        import keras
    except ImportError:
        result.notes.append("Keras not installed")
        return None
    backend = f"Keras {keras.__version__} on the {keras.backend.backend()} backend"
    if backend not in result.notes:
        result.notes.append(backend)
    try:
        made: list[Any] = convert.to_keras(layer)
    except (ValueError, TypeError, ImportError) as err:  # e.g. a projection Keras has not
        result.notes.append(f"Keras: not compared ({_first_line(err)})")
        return None
    inputs = [x.transpose(0, 1).contiguous() for x, _ in tensors]

    def run(xb: Tensor) -> Any:
        y: Any = xb
        for k in made:
            y = k(y)
        return y

    with torch.no_grad():
        got = [np.swapaxes(_numpy(run(xb)), 0, 1) for xb in inputs]
    result.check(KERAS, *compare_all(got, expected, batches), label)

    def keras_call() -> None:
        for xb in inputs:
            run(xb)

    return keras_call


def _numpy(value: Any) -> np.ndarray:
    """A backend's tensor as a NumPy array (torch's directly: NumPy 2 warns on its __array__)."""
    if isinstance(value, Tensor):
        return value.detach().to("cpu", torch.float32).numpy()
    return np.asarray(value, dtype=np.float32)


# -- the runtimes that run an ONNX file, in a fresh process ----------------------------------------


def installed(package: str) -> bool:
    """Whether ``package`` can be imported (without importing it)."""
    return importlib.util.find_spec(package) is not None


def runtime_jobs(
    layer: _CudnnRNN, x: Tensor, tmp: str, notes: list[str], *, varlen: bool
) -> list[list[str]]:
    """Export the models the installed runtimes run into ``tmp``: ``[peer, path, input name]``
    each. ``x`` traces ``torch.onnx.export``, which takes full-length sequences only."""
    runtimes = {name: installed(name) for name in sorted(set(RUNTIMES.values()))}
    notes += [
        f"{name} not installed (pip install {name})" for name, ok in runtimes.items() if not ok
    ]
    if not any(runtimes.values()):
        return []
    path = os.path.join(tmp, "ours.onnx")
    try:
        convert.to_onnx(layer, path, sequence_lens=varlen, initial_state=False)
    except (ImportError, ValueError, TypeError) as err:
        notes.append(f"no ONNX export ({_first_line(err)}): onnxruntime and OpenVINO not compared")
        return []
    jobs = [[peer, path, "X"] for peer in (ORT_OURS, OPENVINO) if runtimes[RUNTIMES[peer]]]
    if varlen:
        notes.append("torch.onnx.export: full-length sequences only (no packed sequences)")
    elif runtimes["onnxruntime"]:
        try:
            module = convert.to_torch(layer).eval()  # a copy: export leaves a module slower
        except (ValueError, TypeError) as err:  # a variant or projection torch.nn cannot hold
            notes.append(f"torch.onnx.export of torch.nn: not compared ({_first_line(err)})")
            return jobs
        exported = os.path.join(tmp, "torch.onnx")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, (x,), exported, dynamo=False, input_names=["x"])
        jobs.insert(1, [ORT_TORCH, exported, "x"])
    return jobs


#: Seconds a runtime's process waits after each block before it answers: a default onnxruntime
#: session keeps a thread spinning for about 40-50 ms after a run (measured), which would slow
#: whatever the next block runs.
RUNTIME_SETTLE = 0.1


class RemotePeerError(CudnnRNNError, RuntimeError):
    """A runtime's process failed or refused the model; ``peer`` names it, ``reason`` says why.

    :func:`measure` turns it into a note and goes on without that peer."""

    def __init__(self, peer: str, message: str) -> None:
        super().__init__(f"{peer}: {message}")
        self.peer, self.reason = peer, message


class RemotePeer:
    """A runtime peer (onnxruntime or OpenVINO on an ONNX file) in a process of its own.

    The process (:func:`cudnn_rnn.cli.runtime_peer.serve`, which does not import torch) makes the
    session, runs it once on every batch and compares the outputs with ``expected``; then it
    times calls on command, so that :func:`time_alternating` alternates it with the
    implementations of this process. Raises :class:`RemotePeerError` when the process fails or
    the runtime refuses the model.
    """

    def __init__(self, peer: str, path: str, input_name: str, inputs: str, expected: str) -> None:
        self.peer = peer
        self._stderr = tempfile.TemporaryFile("w+")
        args = [RUNTIMES[peer], path, input_name, inputs, expected, RUNTIME_SETTLE]
        args.append(runtime_threads())
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _runtime_peer.LAUNCH, json.dumps(args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self.max_abs_diff = self.max_abs_padding = 0.0

    def ready(self) -> None:
        """Waits for the session and the comparison of its outputs."""
        reply = self._read()
        self.max_abs_diff, self.max_abs_padding = reply["max_abs_diff"], reply["max_abs_padding"]

    def warm(self, seconds: float) -> float:
        reply: float = self._ask(f"warm {seconds!r}")["once"]
        return reply

    def block(self, count: int) -> float:
        reply: float = self._ask(f"block {count}")["seconds"]
        return reply

    def close(self) -> None:
        """Ends the process (it exits on ``quit``; killed if it does not within 10 s)."""
        if self._proc.poll() is None:
            try:
                assert self._proc.stdin is not None
                self._proc.stdin.write("quit\n")
                self._proc.stdin.close()
                self._proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()
        for stream in (self._proc.stdin, self._proc.stdout, self._stderr):
            if stream is not None:
                with contextlib.suppress(OSError):  # a pipe to a process that died
                    stream.close()

    def _ask(self, command: str) -> dict[str, Any]:
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(command + "\n")
            self._proc.stdin.flush()
        except OSError:
            pass  # the process is gone: _read says why
        return self._read()

    def _read(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            if line.startswith(_runtime_peer.REPLY):
                reply: dict[str, Any] = json.loads(line[len(_runtime_peer.REPLY) :])
                if "error" in reply:
                    raise RemotePeerError(self.peer, reply["error"])
                return reply
        self._proc.wait()
        self._stderr.seek(0)
        last = self._stderr.read().strip().splitlines() or [f"exit code {self._proc.returncode}"]
        raise RemotePeerError(self.peer, f"its process ended: {last[-1]}")


def _runtime_peers(
    layer: _CudnnRNN,
    batches: Sequence[Batch],
    x: Tensor,
    expected: Sequence[np.ndarray],
    tmp: str,
    result: Measurement,
    label: str,
) -> dict[str, RemotePeer]:
    """onnxruntime and OpenVINO, each in a process of its own, ready to be timed; each output
    already compared with ours. A runtime that refuses its model gets a note instead."""
    varlen = any(n is not None for _, n in batches)
    jobs = runtime_jobs(layer, x, tmp, result.notes, varlen=varlen)
    if not jobs:
        return {}
    inputs, want = os.path.join(tmp, "inputs.npz"), os.path.join(tmp, "expected.npz")
    arrays = {f"x{i}": x for i, (x, _) in enumerate(batches)}
    arrays |= {f"lengths{i}": n for i, (_, n) in enumerate(batches) if n is not None}
    np.savez(inputs, **arrays)  # type: ignore[arg-type]
    np.savez(want, *expected)
    started: list[RemotePeer] = []
    peers: dict[str, RemotePeer] = {}
    try:
        started += [RemotePeer(peer, path, name, inputs, want) for peer, path, name in jobs]
        for remote in started:  # started together, so their imports overlap
            try:
                remote.ready()
            except RemotePeerError as err:
                result.notes.append(f"{err.peer} failed on {label}: {err.reason}")
                remote.close()
                continue
            result.check(remote.peer, remote.max_abs_diff, remote.max_abs_padding, label)
            peers[remote.peer] = remote
    except BaseException:
        for remote in started:
            remote.close()
        raise
    return peers


def runtime_threads() -> int:
    """The threads each runtime may use: torch's (``torch.get_num_threads()``, which
    ``OMP_NUM_THREADS`` sets), so that every implementation gets the same cores. Their own
    defaults are every physical core, which is torch's default too."""
    return torch.get_num_threads()


def ort_options() -> Any:
    """onnxruntime's session options as every session of the benchmarks makes them."""
    return _runtime_peer.ort_options(runtime_threads())


def in_fresh_process(
    module: str,
    function: str,
    args: Sequence[Any],
    *,
    timeout: float,
    env: dict[str, str] | None = None,
    path: Sequence[str] = (),
) -> str:
    """The last line ``module.function(*args)`` prints, run in a fresh interpreter.

    ``args`` travel as JSON; ``path`` goes in front of the child's ``sys.path``. RuntimeError
    with the last line of the child's error output if it fails.
    """
    code = (
        "import importlib, json, sys; sys.path[:0] = json.loads(sys.argv[1]); "
        "m = importlib.import_module(sys.argv[2]); "
        "print(getattr(m, sys.argv[3])(*json.loads(sys.argv[4])))"
    )
    argv = [json.dumps(list(path)), module, function, json.dumps(list(args))]
    done = subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        raise RuntimeError(last)
    return done.stdout.strip().splitlines()[-1]


# -- the table -------------------------------------------------------------------------------------


def report(result: Measurement) -> list[str]:
    """``cudnn-rnn bench``'s tables: milliseconds per call, ours over each, the output distance.

    >>> print("\\n".join(report(Measurement({OURS: 0.002, TORCH_NN: 0.004}, {}, {TORCH_NN: 0.0}))))
    inference (forward under torch.no_grad()), median ms per call:
      implementation      ms  ours / it  max |output - ours|
      ours                 2       1.00                    -
      torch.nn             4       0.50              0.0e+00
    """
    lines: list[str] = []
    for title, times, diffs in (
        ("inference (forward under torch.no_grad())", result.inference, result.max_abs_diff),
        ("training step (forward + backward)", result.training, {}),
    ):
        if not times:
            continue
        names = [n for n in (OURS, *PEERS) if n in times]
        width = max(len("implementation"), *(len(n) for n in names))
        lines += [
            f"{title}, median ms per call:",
            f"  {'implementation':<{width}}  {'ms':>6}  ours / it"
            + ("  max |output - ours|" if diffs else ""),
        ]
        for name in names:
            ratio = times[OURS] / times[name]
            diff = f"{diffs[name]:.1e}" if name in diffs else "-"
            lines.append(
                f"  {name:<{width}}  {times[name] * 1e3:>6.3g}  {ratio:>9.2f}"
                + (f"  {diff:>19}" if diffs else "")
            )
    if result.notes:
        lines += ["notes:", *(f"  - {note}" for note in dict.fromkeys(result.notes))]
    return lines
