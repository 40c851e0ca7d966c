"""The benchmark suite: our layers against torch.nn, onnxruntime, OpenVINO and Keras, same shapes.

Shapes (:data:`SHAPES`, in five groups; ``--quick`` runs tiny ones, ``--shapes NAME`` picks):

* **the issue's shapes**, inference: LSTM and GRU (T 25, B 1, 256 -> 256, 2 layers),
  LSTM (100, 16, 256), GRU (100, 16, 512), RNN-tanh (50, 16, 1024);
* **large shapes** (PyTorch's RNN benchmark default, DeepBench, MXNet's CPU numbers), and the
  linear_input twin of the skip_input row, which checks a target instead of meeting the peers;
* **serving shapes**: T 25, one layer, input = hidden, B in (1, 4, 16, 64) x H in (256, 512) x
  every mode; inference only, without Keras, and timed lighter (:func:`timing_for`):
  32 rows of short calls whose medians are steady at that;
* **a stream**: 40 GRU batches (B 16, H 256, 2 layers), each sequence's length drawn from a
  seeded RNG in [20, 100], each batch padded to its own longest sequence; one call is the whole
  stream (inference);
* **training** (forward + backward, against ``torch.nn``): GRU (100, 32, 1024), LSTM
  (100, 64, 512), RNN-tanh and RNN-relu (50, 16, 1760), the small LSTM and the other large shapes.

Method. Every shape is measured by :func:`cudnn_rnn.cli.bench.measure`, what ``cudnn-rnn bench``
runs on a user's model: the same weights run everywhere, on the same inputs (a seeded NumPy
normal array per batch, and int32 lengths where sequences are shorter than the batch). Each
implementation first warms up untimed (``warmup`` seconds and at least
:data:`cudnn_rnn.cli.bench.WARMUP_CALLS` calls); then they alternate block by block (one untimed
call, then enough timed calls to fill ``block`` seconds), several repeats; the median time per
call is reported. Inference is a forward pass under ``torch.no_grad()``; training is a forward
pass, a backward pass of ``sum(out * g)`` and dropping the gradients.

Peers (each skipped, with a note, when it is not installed):

* ``torch.nn.LSTM/GRU/RNN`` with our weights (``convert.to_torch``); variable lengths go
  through ``pack_padded_sequence``/``pad_packed_sequence`` as torch users write it;
* onnxruntime (default session options) running our ``to_onnx`` export and, for full-length
  shapes, ``torch.onnx.export`` of the ``torch.nn`` module;
* OpenVINO (``Core().compile_model(path, "CPU")``) running the same file as onnxruntime's
  first peer, with ``INFERENCE_PRECISION_HINT`` f32: on CPUs with bf16 instructions its default
  is bf16, which computes something else (differences of 1e-2 on tiny shapes).
  Each runtime runs in a process of its own (a default onnxruntime session keeps its threads
  spinning after a run, which starved whatever ran next in the same process: torch.nn ran up
  to 10x slower), timed on command block by block in turn with ours and the other peers, and
  pausing 0.1 s after each of its blocks so that its threads stop spinning before the next
  one (``cudnn_rnn.cli.bench.RemotePeer``): every ratio compares blocks run within the same
  second or so, which matters on a shared machine whose speed drifts by 1.5x over minutes.
  Variable lengths reach them as ``sequence_lens``. Each peer's output is compared with ours
  over the valid steps (``max_abs_diff`` in the JSON); where they differ by more than 1e-4 the
  notes say so, and also where a runtime leaves values that are not 0 past a sequence's length
  (OpenVINO does on some multi-layer models, the GRU stream's; ours and onnxruntime write 0
  there);
* Keras 3 (``convert.to_keras``; backend from ``$KERAS_BACKEND``, torch if unset), full-length
  shapes outside the serving group only.

``ours`` is our layer called as users call it, on whichever CPU engine the package runs
(the machine table says which). Ratios are ours over the fastest peer, or over ``torch.nn``
for training (the only peer that trains).

FLOPs count the multiply-adds of the matrix products (2 per multiply-add; ``skip_input``'s layer
0 has no input matrix, variable lengths count only valid steps); training counts 3x the forward.
The matmul peak is the best rate of float32 products on the same machine: 1024, 2048 and 3072
square, and the input projection of lstm 100x64x512 ((6400, 512) @ (512, 2048)), each by
torch's matmul and by onnxruntime's MatMul, each the best of at least 5 calls and half a second
of calls (a single 2048 x 2048 product gave a "peak" that the RNN kernels beat by up to 42%).

B = 1 rows also show a lower bound for their recurrent part: every step reads every recurrent
matrix (G x H x H float32 per layer and direction; G = 4, 3, 1 for LSTM, GRU, RNN) once, so
T x layers x directions x G x H x H x 4 bytes over the best read bandwidth measured on a
buffer of one such matrix, which stays in cache between steps (:func:`cache_bandwidth`). Ours
over that bound says how far the row is from streaming its weights at cache speed. The issue's
target is on the step: ours per step past the first (:func:`marginal_step`: the sequence and
its first step alone, timed in alternating blocks) over the bound's share of one step; what
the whole call adds to that is its fixed cost (Python, each thread packing its slices of the
weights, the input projection's setup).

Targets (the report's Targets table, each marked met or not from one run's ratios; issue 21's
replace the earlier ones where both speak of the same rows): inference, ours / fastest peer
<= 1.00 with B = 1 and each B = 1 row's step within 2x its weight-read bound, <= 0.90 on the serving
shapes with B = 4 to 16, <= 0.80 on the issue's shapes with B >= 8, <= 1.00 on the large
shapes, <= 0.85 on the stream; a no-grad call of a tiny model (T 1, B 1, H 8, each mode) no
slower than torch.nn's; beside a busy process (one core kept busy), ours / fastest peer within
1.2x of the same row's quiet figure; training, ours / torch.nn <= 0.55 for GRU and RNN, <= 0.90
for LSTM on the large rows; the large shapes at >= 70% of the matmul peak (>= 60% with more
than 8 threads); skip_input no slower than linear_input (+3% noise); dynamic_rnn over compatible
cells within 1.2x of the fused layer; a training step's peak memory within torch.nn's + 5%.

The busy row runs with one more process that spins on the CPU for the whole row (a Python
``while True`` loop, unpinned: the OS gives it about one core), as a shared machine has.

Peak memory of a training step (training rows only) is measured in a fresh process per
implementation (Linux: the growth of the peak resident set over one step, the second, from just
before it, with glibc told to map every block of 64 KiB or more on its own so that the resident
set follows the live tensors).

``python benchmarks/suite.py`` runs it and writes ``benchmarks.md``, ``benchmarks.json`` and
``benchmarks.png`` into ``--out`` (``make bench``: ``--out docs``). It lives beside the package,
not in it, and imports only ``cudnn_rnn``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

import cudnn_rnn
from cudnn_rnn import convert
from cudnn_rnn.cli.bench import (
    OURS,
    PEERS,
    TORCH_NN,
    Batch,
    Timing,
    add_timing_arguments,
    check_timing_arguments,
    in_fresh_process,
    inference_step,
    installed,
    layer_call,
    measure,
    ort_options,
    random_batches,
    sync,
    time_alternating,
    torch_call,
    training_step,
)
from cudnn_rnn.core.constants import CUDNN_GRU, CUDNN_LSTM, CUDNN_RNN_RELU, CUDNN_RNN_TANH
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.io import atomic
from cudnn_rnn.layers import _CudnnRNN, layer_of

__all__ = ["SHAPES", "Shape", "main", "run"]

#: The repository (the folder above this one), and this module's name from there: the memory
#: probes run it in a fresh interpreter.
ROOT = Path(__file__).resolve().parents[1]
MODULE = "benchmarks.suite"

#: The groups of :data:`SHAPES`, in the report's order, with their headings.
GROUPS = {
    "issue": "The issue's shapes",
    "large": "Large shapes",
    "serving": "Serving shapes (T 25, one layer, input = hidden)",
    "stream": "A stream of batches (one call = the whole stream)",
    "per-call": "Per-call cost: a tiny model (T 1, B 1, H 8), no gradient",
    "busy": "Beside a busy process (one core kept busy by another process)",
    "training": "Training only",
}


@dataclass(frozen=True)
class Shape:
    """One benchmark problem: (T, N, input, hidden, layers, direction), a mode, what runs on it."""

    name: str
    mode: str
    steps: int
    batch: int
    input_size: int
    units: int
    layers: int = 1
    bidirectional: bool = False
    skip_input: bool = False
    #: Variable lengths: evenly spread over ``[varlen, steps]`` (0: every sequence is full), or
    #: with ``stream``, drawn from a seeded RNG in that range.
    varlen: int = 0
    #: Extra rows that check a target rather than compare with the peers.
    extra: bool = False
    #: A stream of this many batches, each padded to its own longest sequence (0: one batch).
    stream: int = 0
    group: str = "issue"
    inference: bool = True
    training: bool = True
    #: Run beside one process that keeps a core busy (see the module docstring).
    busy: bool = False

    @property
    def label(self) -> str:
        steps = f"<={self.steps}" if self.stream else str(self.steps)
        parts = [
            self.mode.replace("rnn_", "rnn-"),
            f"({steps}, {self.batch}, {self.input_size}, {self.units}, {self.layers}, "
            f"{'bi' if self.bidirectional else 'uni'})",
        ]
        if self.skip_input:
            parts.append("skip_input")
        if self.stream:
            parts.append(f"stream of {self.stream} batches,")
        if self.varlen:
            parts.append(f"lengths {self.varlen}-{self.steps}")
        if self.busy:
            parts.append("beside a busy process")
        return " ".join(parts)

    def spec(self) -> RNNSpec:
        return RNNSpec(
            self.mode,
            self.layers,
            self.units,
            self.input_size,
            "skip_input" if self.skip_input else "linear_input",
            "bidirectional" if self.bidirectional else "unidirectional",
        )

    def batch_lengths(self) -> list[list[int] | None]:
        """Each batch's sequence lengths (None: every sequence of that batch is full)."""
        if self.stream:
            rng = np.random.default_rng(0)
            return [
                [int(v) for v in rng.integers(self.varlen, self.steps + 1, self.batch)]
                for _ in range(self.stream)
            ]
        if self.varlen:
            return [[int(v) for v in np.linspace(self.steps, self.varlen, self.batch).round()]]
        return [None]

    def lengths(self) -> list[int] | None:
        """The lengths of the (first) batch."""
        return self.batch_lengths()[0]

    def forward_flops(self) -> float:
        spec = self.spec()
        valid = sum(
            self.steps * self.batch if lengths is None else sum(lengths)
            for lengths in self.batch_lengths()
        )
        total = 0
        for layer in range(spec.num_layers):
            inputs = 0 if (layer == 0 and spec.skip_input) else spec.layer_input_size(layer)
            total += spec.num_dirs * spec.num_gates * spec.num_units * (inputs + spec.num_units)
        return 2.0 * total * valid

    def recurrent_matrix(self) -> tuple[int, int]:
        """The shape of one layer's recurrent matrix in one direction: (G x H, H)."""
        spec = self.spec()
        return spec.num_gates * spec.num_units, spec.num_units

    def recurrent_bytes(self) -> int:
        """Bytes of recurrent weights every step reads: all layers and directions, float32."""
        rows, cols = self.recurrent_matrix()
        return self.layers * (2 if self.bidirectional else 1) * rows * cols * 4


def _serving_shapes() -> tuple[Shape, ...]:
    short = {CUDNN_LSTM: "lstm", CUDNN_GRU: "gru", CUDNN_RNN_TANH: "tanh", CUDNN_RNN_RELU: "relu"}
    return tuple(
        Shape(f"{short[mode]}-serve-25x{b}x{h}", mode, 25, b, h, h, group="serving", training=False)
        for h in (256, 512)
        for b in (1, 4, 16, 64)
        for mode in short
    )


#: The issue's shapes (PyTorch's RNN benchmark default, DeepBench, MXNet's CPU numbers, serving),
#: grouped as :data:`GROUPS` says.
SHAPES: tuple[Shape, ...] = (
    Shape("lstm-2-25x1x256", CUDNN_LSTM, 25, 1, 256, 256, 2),
    Shape("gru-2-25x1x256", CUDNN_GRU, 25, 1, 256, 256, 2, training=False),
    Shape("lstm-100x16x256", CUDNN_LSTM, 100, 16, 256, 256, training=False),
    Shape("gru-100x16x512", CUDNN_GRU, 100, 16, 512, 512, training=False),
    Shape("tanh-50x16x1024", CUDNN_RNN_TANH, 50, 16, 1024, 1024, training=False),
    Shape("lstm-100x64x512", CUDNN_LSTM, 100, 64, 512, 512, group="large"),
    Shape("lstm-50x64x500", CUDNN_LSTM, 50, 64, 500, 500, group="large"),
    Shape("gru-100x32x1024", CUDNN_GRU, 100, 32, 1024, 1024, group="large"),
    Shape("lstm-3bi-100x32x256", CUDNN_LSTM, 100, 32, 256, 256, 3, True, group="large"),
    Shape(
        "tanh-skip-50x16x1760", CUDNN_RNN_TANH, 50, 16, 1760, 1760, skip_input=True, group="large"
    ),
    Shape("tanh-linear-50x16x1760", CUDNN_RNN_TANH, 50, 16, 1760, 1760, extra=True, group="large"),
    Shape(
        "lstm-2bi-varlen-100x32x256",
        CUDNN_LSTM,
        100,
        32,
        256,
        256,
        2,
        True,
        varlen=50,
        group="large",
    ),
    *_serving_shapes(),
    Shape(
        "gru-2-stream-16x256",
        CUDNN_GRU,
        100,
        16,
        256,
        256,
        2,
        varlen=20,
        stream=40,
        group="stream",
        training=False,
    ),
    Shape("relu-50x16x1760", CUDNN_RNN_RELU, 50, 16, 1760, 1760, group="training", inference=False),
    *(
        Shape(f"{short}-tiny-1x1x8", mode, 1, 1, 8, 8, group="per-call", training=False)
        for short, mode in (
            ("lstm", CUDNN_LSTM),
            ("gru", CUDNN_GRU),
            ("tanh", CUDNN_RNN_TANH),
            ("relu", CUDNN_RNN_RELU),
        )
    ),
    Shape(
        "lstm-100x64x512-busy",
        CUDNN_LSTM,
        100,
        64,
        512,
        512,
        group="busy",
        training=False,
        busy=True,
    ),
)
#: Small shapes for a quick check of the suite itself (``--quick``): one of each group.
QUICK_SHAPES: tuple[Shape, ...] = (
    Shape("lstm-quick", CUDNN_LSTM, 10, 4, 16, 16, 2),
    Shape("gru-quick-varlen", CUDNN_GRU, 10, 4, 16, 16, 1, True, varlen=3, group="large"),
    Shape("relu-quick-skip", CUDNN_RNN_RELU, 10, 4, 16, 16, skip_input=True, group="large"),
    Shape("tanh-quick-serve", CUDNN_RNN_TANH, 5, 1, 16, 16, group="serving", training=False),
    Shape(
        "gru-quick-stream",
        CUDNN_GRU,
        10,
        4,
        16,
        16,
        2,
        varlen=3,
        stream=3,
        group="stream",
        training=False,
    ),
    Shape("gru-quick-tiny", CUDNN_GRU, 1, 1, 8, 8, group="per-call", training=False),
    Shape(
        "tanh-quick-busy",
        CUDNN_RNN_TANH,
        5,
        1,
        16,
        16,
        group="busy",
        training=False,
        busy=True,
    ),
)
#: dynamic_rnn over compatible cells is compared with the fused layer on this shape.
DYNAMIC_RNN_SHAPE = next(s for s in SHAPES if s.name == "lstm-100x64x512")


def timing_for(shape: Shape, timing: Timing) -> Timing:
    """The serving rows are timed lighter (:meth:`cudnn_rnn.cli.bench.Timing.lighter`)."""
    return timing.lighter() if shape.group == "serving" else timing


@dataclass
class Row:
    """Median seconds per call of each implementation on one shape (None: not run)."""

    shape: Shape
    inference: dict[str, float] = field(default_factory=dict)
    training: dict[str, float] = field(default_factory=dict)
    memory: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: max |output - ours| of each peer, over the valid steps.
    max_abs_diff: dict[str, float] = field(default_factory=dict)
    #: B = 1: the recurrent weights' read time at the measured cache bandwidth (seconds).
    bound: float | None = None
    #: The bandwidth that bound used (bytes/s).
    cache_bandwidth: float | None = None
    #: B = 1, T > 1: ours per step past the first, ``(t(T) - t(1)) / (T - 1)`` (seconds): the
    #: step without the call's fixed cost (Python, packing the weights, the projection's setup).
    step: float | None = None


# -- building the implementations ------------------------------------------------------------------


def _make(shape: Shape, device: str, seed: int = 0) -> tuple[_CudnnRNN, Tensor, Tensor | None]:
    torch.manual_seed(seed)
    layer = layer_of(shape.spec(), device=device)
    x = torch.randn(shape.steps, shape.batch, shape.input_size, device=device)
    lengths = shape.lengths()
    return layer, x, (torch.tensor(lengths) if lengths is not None else None)


def _batches(shape: Shape) -> list[Batch]:
    """The inputs every implementation runs on: a seeded normal array [T, B, input] per batch
    (a stream's batch as long as its longest sequence) and its int32 lengths (None: full)."""
    lengths = shape.batch_lengths()
    steps = [max(n) if (shape.stream and n is not None) else shape.steps for n in lengths]
    return random_batches(shape.batch, shape.input_size, steps, lengths)


def best_time(
    fn: Callable[[], Any], device: str = "cpu", *, seconds: float = 0.5, calls: int = 5
) -> float:
    """The shortest of at least ``calls`` calls and ``seconds`` of calls, after one untimed."""
    fn()
    best, made, start = math.inf, 0, time.perf_counter()
    while made < calls or time.perf_counter() - start < seconds:
        sync(device)
        begin = time.perf_counter()
        fn()
        sync(device)
        best = min(best, time.perf_counter() - begin)
        made += 1
    return best


#: The float32 products ``(M, K, N)`` whose best rate is the matmul peak: three square sizes
#: and the input projection of lstm 100x64x512, the kind of product an RNN's input side makes.
PEAK_SIZES: tuple[tuple[int, int, int], ...] = (
    (1024, 1024, 1024),
    (2048, 2048, 2048),
    (3072, 3072, 3072),
    (6400, 512, 2048),
)
QUICK_PEAK_SIZES: tuple[tuple[int, int, int], ...] = ((256, 256, 256),)


def matmul_peak(
    device: str = "cpu", sizes: Sequence[tuple[int, int, int]] = PEAK_SIZES
) -> tuple[float, str]:
    """Best FLOP/s of float32 ``(M, K) @ (K, N)`` over ``sizes``, and what reached it.

    On CPU both torch's matmul (MKL) and onnxruntime's (MLAS) are tried: MKL is slow on some
    CPUs (AMD) where the RNN kernels are not, which would put them above the "peak".
    """
    rates: dict[str, float] = {}
    for m, k, n in sizes:
        a = torch.randn(m, k, device=device)
        b = torch.randn(k, n, device=device)
        rates.update(_matmul_rates(a, b, device))
    engine = max(rates, key=rates.__getitem__)
    return rates[engine], engine


def _matmul_rates(a: Tensor, b: Tensor, device: str) -> dict[str, float]:
    (m, k), n = a.shape, b.shape[1]
    flops, size = 2.0 * m * k * n, f"({m}, {k}) @ ({k}, {n})"
    rates = {f"torch.matmul {size}": flops / best_time(lambda: a @ b, device)}
    if device == "cpu" and installed("onnxruntime") and installed("onnx"):
        rates[f"onnxruntime MatMul {size}"] = flops / _ort_matmul_time(a.numpy(), b.numpy())
    return rates


def _ort_matmul_time(a: np.ndarray, b: np.ndarray) -> float:
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    (m, k), n = a.shape, b.shape[1]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["A", "B"], ["C"])],
        "matmul",
        [
            helper.make_tensor_value_info("A", TensorProto.FLOAT, [m, k]),
            helper.make_tensor_value_info("B", TensorProto.FLOAT, [k, n]),
        ],
        [helper.make_tensor_value_info("C", TensorProto.FLOAT, [m, n])],
    )
    opsets = [helper.make_opsetid("", 17)]
    model = helper.make_model(
        graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets)
    )
    onnx.checker.check_model(model)
    options = ort_options()
    options.add_session_config_entry("session.force_spinning_stop", "1")
    session = ort.InferenceSession(model.SerializeToString(), options, ["CPUExecutionProvider"])
    return best_time(lambda: session.run(None, {"A": a, "B": b}))


def cache_bandwidth(rows: int, cols: int, device: str = "cpu") -> float:
    """Best bytes/s of reading a float32 ``[rows, cols]`` buffer that stays in cache.

    The best of three reads, each timed by :func:`best_time`: ``torch.mv`` (what a B = 1
    recurrent step does), a sum, and a sum over the buffer expanded to read it k times in one
    call (64 MiB in all), which leaves out the per-call overhead that dominates a small buffer.
    """
    buffer = torch.randn(rows, cols, device=device)
    vector = torch.randn(cols, device=device)
    repeat = max(1, (64 << 20) // buffer.nbytes)
    expanded = buffer.expand(repeat, rows, cols)
    reads = (
        (buffer.nbytes, lambda: torch.mv(buffer, vector)),
        (buffer.nbytes, lambda: buffer.sum()),
        (repeat * buffer.nbytes, lambda: expanded.sum()),
    )
    return max(nbytes / best_time(read, device, seconds=0.1) for nbytes, read in reads)


# -- one shape -------------------------------------------------------------------------------------


def bench_shape(shape: Shape, *, device: str, timing: Timing, peers: bool) -> Row:
    """Time ``shape``: inference and training as the shape asks, peers where they apply."""
    layer, _, _ = _make(shape, device)
    use_peers = peers and not shape.extra
    # Keras: only on the issue's, the large and the training shapes (to keep the suite short).
    keras = use_peers and shape.group in ("issue", "large", "training") and not shape.stream
    with busy_process() if shape.busy else contextlib.nullcontext():
        measured = measure(
            layer,
            _batches(shape),
            device=device,
            timing=timing,
            inference=shape.inference,
            training=shape.training,
            keras=keras,
            runtimes=use_peers,
            label=shape.name,
        )
    notes = measured.notes
    if use_peers and shape.inference and shape.group == "serving":
        notes = ["Keras: not run on the serving shapes (to keep the suite short)", *notes]
    return Row(
        shape,
        inference=measured.inference,
        training=measured.training,
        notes=notes,
        max_abs_diff=measured.max_abs_diff,
    )


@contextlib.contextmanager
def busy_process() -> Iterator[subprocess.Popen[bytes]]:
    """A process that keeps one core busy (a spinning Python loop) while the block runs."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def bench_dynamic_rnn(
    shape: Shape, *, device: str, repeats: int, block: float, warmup: float = 1.0
) -> Row:
    """``dynamic_rnn`` over a MultiRNNCell of compatible cells vs the fused layer (same weights)."""
    from cudnn_rnn import checkpoint
    from cudnn_rnn.cells import CudnnCompatibleGRUCell, CudnnCompatibleLSTMCell, MultiRNNCell

    row = Row(shape)
    layer, x, lengths = _make(shape, device)
    cell_cls = CudnnCompatibleLSTMCell if shape.mode == CUDNN_LSTM else CudnnCompatibleGRUCell
    cells = MultiRNNCell([cell_cls(shape.units, device=device) for _ in range(shape.layers)])
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "dynamic_rnn.safetensors")
        checkpoint.save(path, layer)
        checkpoint.restore(path, cells)
    grad_out = torch.randn(shape.steps, shape.batch, shape.units, device=device)

    def fused() -> Tensor:
        return layer_call(layer, x, lengths)

    def stepwise() -> Tensor:
        return cudnn_rnn.dynamic_rnn(cells, x, sequence_length=lengths, time_major=True)[0]

    with torch.no_grad():
        diff = float((fused() - stepwise()).abs().max())
    row.notes.append(f"max |dynamic_rnn - layer| = {diff:.1e}")
    row.inference = time_alternating(
        {OURS: inference_step(fused), "dynamic_rnn": inference_step(stepwise)},
        repeats=repeats,
        block=block,
        device=device,
        warmup=warmup,
    )
    row.training = time_alternating(
        {
            OURS: training_step(fused, list(layer.parameters()), grad_out),
            "dynamic_rnn": training_step(stepwise, list(cells.parameters()), grad_out),
        },
        repeats=repeats,
        block=block,
        device=device,
        warmup=warmup,
    )
    return row


# -- peak memory of a training step, one fresh process per measurement -----------------------------


def _peak_rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise OSError("no VmHWM in /proc/self/status")


def _memory_probe(fields: dict[str, Any], impl: str, device: str) -> int:
    """Bytes the peak resident set grows by over a training step (the second one) of the
    shape with these ``fields``; run in a fresh process by :func:`measure_memory`."""
    shape = Shape(**fields)
    layer, x, lengths = _make(shape, device)
    grad_out = torch.ones(
        shape.steps, shape.batch, shape.units * (2 if shape.bidirectional else 1), device=device
    )
    module = convert.to_torch(layer).to(device)  # both models exist in both cases
    if impl == TORCH_NN:
        step = training_step(
            lambda: torch_call(module, x, lengths), list(module.parameters()), grad_out
        )
    else:
        step = training_step(
            lambda: layer_call(layer, x, lengths), list(layer.parameters()), grad_out
        )
    if device.startswith("cuda"):
        step()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        step()
        return int(torch.cuda.max_memory_allocated() - before)
    step()  # one-time allocations (skip_input's identity, oneDNN primitives) are not per step
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak to the current resident set
    before = _peak_rss_kib()
    step()
    # (A peak cannot fall, but the kernel keeps the resident set in per-CPU counters and may
    # reset the peak to a sum that is a page or so off the one /proc shows next: a step that
    # holds nothing more than the state before it then read -4096 once. That is 0.)
    return max(0, _peak_rss_kib() - before) * 1024


def measure_memory(shape: Shape, impl: str, device: str) -> int | None:
    """Run :func:`_memory_probe` in a fresh interpreter; None where the OS cannot measure it.

    A probe that fails raises RuntimeError with the last line of its error output.
    """
    if not device.startswith("cuda") and not os.path.exists("/proc/self/clear_refs"):
        return None
    # glibc: every block of 64 KiB or more is its own mapping, returned when freed, so the
    # resident set follows the live tensors (no reuse of freed heap hiding an allocation).
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="0")
    try:
        probe = [asdict(shape), impl, device]
        out = in_fresh_process(
            MODULE, "_memory_probe", probe, timeout=600, env=env, path=[str(ROOT)]
        )
        return int(out)
    except RuntimeError as err:
        raise RuntimeError(f"memory probe of {impl} on {shape.name} failed: {err}") from err


# -- the report ------------------------------------------------------------------------------------


def _fastest_peer(times: dict[str, float]) -> tuple[str, float] | None:
    peers = [(name, times[name]) for name in PEERS if name in times]
    return min(peers, key=lambda p: p[1]) if peers else None


def _ms(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds * 1e3:.3g}"


def machine() -> dict[str, str]:
    engine = getattr(cudnn_rnn, "cpu_engine", None)
    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cudnn_rnn": cudnn_rnn.__version__,
        "our CPU engine": str(engine()) if callable(engine) else "torch",
        "platform": platform.platform(),
        "cpu": _cpu_name(),
        "cores (torch threads)": f"{os.cpu_count()} ({torch.get_num_threads()})",
    }
    for name in ("onnxruntime", "openvino", "keras"):
        try:
            info[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            info[name] = "not installed"
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
        info["cudnn"] = str(torch.backends.cudnn.version())  # type: ignore[no-untyped-call]
    return info


def _cpu_name() -> str:
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _rate(flops: float, seconds: float, peak: float) -> str:
    return f"{flops / seconds / 1e9:.1f} ({100 * flops / seconds / peak:.0f}%)"


def _bound(row: Row) -> str:
    if row.bound is None or row.cache_bandwidth is None:
        return "–"
    ratio = row.inference[OURS] / row.bound
    text = f"{_ms(row.bound)} at {row.cache_bandwidth / 1e9:.0f} GB/s ({ratio:.1f}x)"
    step = _step_ratio(row)
    return text if step is None else f"{text}; a step {step:.1f}x"


def _step_ratio(row: Row) -> float | None:
    """Ours per step past the first over the bound's share of one step (B = 1 rows)."""
    if row.step is None or row.bound is None:
        return None
    return row.step / (row.bound / row.shape.steps)


def marginal_step(shape: Shape, *, device: str, timing: Timing) -> float:
    """Ours on ``shape`` (B = 1, no lengths): seconds per step past the first, from the whole
    sequence and its first step alone, timed in alternating blocks."""
    layer, x, _ = _make(shape, device)
    first = x[:1].contiguous()
    times = time_alternating(
        {
            "all": inference_step(lambda: layer_call(layer, x, None)),
            "first": inference_step(lambda: layer_call(layer, first, None)),
        },
        repeats=timing.repeats,
        block=timing.block,
        device=device,
        warmup=timing.warmup,
    )
    return (times["all"] - times["first"]) / (shape.steps - 1)


def _inference_lines(rows: Sequence[Row], peak: float) -> list[str]:
    lines = [
        f"| shape | {' | '.join((OURS, *PEERS))} | ours / fastest peer "
        "| ours GFLOP/s (% of peak) | B = 1: weight-read bound ms at cache bandwidth "
        "(ours / bound; a step past the first / the bound's step) |",
        "|---" * (len(PEERS) + 5) + "|",
    ]
    for group, title in GROUPS.items():
        members = [r for r in rows if r.shape.group == group and r.inference]
        if not members:
            continue
        lines.append(f"| **{title}** |" + " |" * (len(PEERS) + 4))
        for row in members:
            t = row.inference
            best = _fastest_peer(t)
            ratio = f"**{t[OURS] / best[1]:.2f}** ({best[0]})" if best else "–"
            lines.append(
                f"| {row.shape.label} | "
                + " | ".join(_ms(t.get(k)) for k in (OURS, *PEERS))
                + f" | {ratio} | {_rate(row.shape.forward_flops(), t[OURS], peak)} "
                f"| {_bound(row)} |"
            )
    return lines


def _training_lines(rows: Sequence[Row], peak: float) -> list[str]:
    lines = [
        "| shape | ours | torch.nn | ours / torch.nn | ours GFLOP/s (% of peak) "
        "| peak memory ours / torch.nn (MiB) |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        t, mem = row.training, row.memory
        if not t:
            continue
        memory = (
            f"{mem[OURS] / 2**20:.1f} / {mem[TORCH_NN] / 2**20:.1f} ({_memory_ratio(mem):.2f}x)"
            if OURS in mem and TORCH_NN in mem
            else "–"
        )
        lines.append(
            f"| {row.shape.label} | {_ms(t[OURS])} | {_ms(t[TORCH_NN])} | "
            f"**{t[OURS] / t[TORCH_NN]:.2f}** "
            f"| {_rate(3 * row.shape.forward_flops(), t[OURS], peak)} | {memory} |"
        )
    return lines


def report(
    rows: Sequence[Row],
    dynamic: Row | None,
    peak: float,
    info: dict[str, str],
    device: str,
) -> str:
    """The Markdown report."""
    lines = [
        "# Benchmarks",
        "",
        "Written by `make bench` (`python benchmarks/suite.py --out docs`, the suite in "
        "`benchmarks/suite.py`); "
        "the method is in that module's docstring. Times are milliseconds per call, medians "
        "of alternating blocks (onnxruntime and OpenVINO each in a process of its own, its "
        "blocks in turn with ours). Ratios below 1 mean we are faster.",
        "",
        VARIANTS_LINK,
        "",
        f"Device: **{device}**. Matmul peak (the best float32 rate over the products the "
        "module docstring lists, torch's and onnxruntime's): "
        f"**{peak / 1e9:.1f} GFLOP/s** ({info.get('matmul peak engine', '?')}).",
        "",
        "| | |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in info.items()),
        "",
        "## Inference (forward, no gradient)",
        "",
        "The weight-read bound of a B = 1 row: every step reads each recurrent matrix "
        "(G x H x H float32 per layer and direction) once, T x that many bytes over the best "
        "read bandwidth measured on a buffer of one matrix (it stays in cache); ours / bound "
        "says how far the row is from reading its weights at cache speed. A step: ours per "
        "step past the first, (t(T) - t(1)) / (T - 1) from the sequence and its first step "
        "timed in alternating blocks, over the bound / T; the call's fixed cost (Python, each "
        "thread packing its slices of the weights, the projection) is what the two differ by.",
        "",
        *_inference_lines(rows, peak),
        "",
        "## Training (forward + backward)",
        "",
        *_training_lines(rows, peak),
        "",
        "## Targets",
        "",
        "Every target of the issue, from this run's ratios (the module docstring says which "
        "rows each covers; the serving rows with B = 4 have none).",
        "",
        "| target | worst | met | rows off target |",
        "|---|---|---|---|",
        *_targets(rows, dynamic, peak),
    ]
    if dynamic is not None:
        lines += [
            "",
            "## dynamic_rnn over compatible cells vs the fused layer",
            "",
            f"`dynamic_rnn(MultiRNNCell([CudnnCompatible...Cell] * {dynamic.shape.layers}))` "
            f"on {dynamic.shape.label}, weights restored from the layer's checkpoint "
            f"({'; '.join(dynamic.notes)}).",
            "",
            "| | ours (layer) | dynamic_rnn | dynamic_rnn / layer |",
            "|---|---|---|---|",
        ]
        for kind, t in (("inference", dynamic.inference), ("training", dynamic.training)):
            lines.append(
                f"| {kind} | {_ms(t[OURS])} | {_ms(t['dynamic_rnn'])} | "
                f"**{t['dynamic_rnn'] / t[OURS]:.2f}** |"
            )
    notes = sorted({n for row in rows for n in row.notes})
    if notes:
        lines += ["", "## Notes", "", *(f"- {n}" for n in notes)]
    return "\n".join(lines) + "\n"


#: The sentence under the report's first paragraph that links the variants' page (written by
#: ``benchmarks/variants.py``, which ``make bench`` runs after the suite).
VARIANTS_LINK = (
    "The variants beyond cuDNN's four modes (issue 47) are timed beside their modes, and "
    "against onnxruntime where ONNX holds them, in [the variants' page](benchmarks-variants.md)."
)

#: Where a target that is not met is explained (relative to the report in ``docs/``).
TARGETS_LINK = "design_notes.md#targets-not-met-and-why"


def _memory_ratio(mem: dict[str, int]) -> float:
    """Ours / torch.nn peak memory; a tiny shape can leave torch.nn's measured growth at 0 bytes."""
    return mem[OURS] / max(mem[TORCH_NN], 1)


def _target(
    text: str,
    values: Sequence[tuple[str, float]],
    limit: float,
    *,
    at_least: bool = False,
    percent: bool = False,
) -> str:
    """One row of the targets table: ``values`` (row name, value) against ``limit``."""
    if not values:
        return f"| {text} | – | no such row in this run | |"

    def shown(v: float) -> str:
        return f"{100 * v:.0f}%" if percent else f"{v:.2f}"

    off = [(name, v) for name, v in values if (v < limit if at_least else v > limit)]
    name, worst = (min if at_least else max)(values, key=lambda p: p[1])
    met = "**met**" if not off else f"**not met** ([why]({TARGETS_LINK}))"
    return (
        f"| {text} | {shown(worst)} ({name}) | {met} | "
        + ", ".join(f"{n} {shown(v)}" for n, v in off)
        + " |"
    )


#: Issue 21's training targets, ours / torch.nn per step: the LSTM on the large shapes, and the
#: GRU and the plain RNNs on every shape that trains.
TRAINING_TARGET_LSTM, TRAINING_TARGET_OTHERS = 0.90, 0.55


def training_target(shape: Shape) -> float | None:
    """The bound on ours / torch.nn in training that issue 21 sets for ``shape`` (None: none)."""
    if shape.mode != CUDNN_LSTM:
        return TRAINING_TARGET_OTHERS
    return TRAINING_TARGET_LSTM if shape.group == "large" else None


def _targets(rows: Sequence[Row], dynamic: Row | None, peak: float) -> list[str]:
    def vs_fastest(keep: Callable[[Shape], bool]) -> list[tuple[str, float]]:
        return [
            (r.shape.name, r.inference[OURS] / best[1])
            for r in rows
            if r.inference and not r.shape.extra and keep(r.shape)
            if (best := _fastest_peer(r.inference))
        ]

    def vs_torch(keep: Callable[[Shape], bool]) -> list[tuple[str, float]]:
        return [
            (r.shape.name, r.training[OURS] / r.training[TORCH_NN])
            for r in rows
            if r.training and keep(r.shape)
        ]

    def ratio(r: Row) -> float | None:
        best = _fastest_peer(r.inference)
        return None if best is None else r.inference[OURS] / best[1]

    def vs_quiet() -> list[tuple[str, float]]:
        """Each busy row's ratio over the ratio of the same problem run quietly."""
        quiet = {_problem(r.shape): ratio(r) for r in rows if r.inference and not r.shape.busy}
        out = []
        for r in rows:
            if r.inference and r.shape.busy:
                busy, calm = ratio(r), quiet.get(_problem(r.shape))
                if busy is not None and calm is not None:
                    out.append((r.shape.name, busy / calm))
        return out

    threads = torch.get_num_threads()
    share = 0.60 if threads > 8 else 0.70
    out = [
        _target(
            "Inference, B = 1 (issue and serving shapes): ours / fastest peer <= 1.00",
            vs_fastest(lambda s: s.group in ("issue", "serving") and s.batch == 1),
            1.00,
        ),
        _target(
            "Inference, B = 1: a step (past the first) / the weight-read bound's step <= 2.0",
            [
                (r.shape.name, step)
                for r in rows
                if r.shape.group in ("issue", "serving") and (step := _step_ratio(r)) is not None
            ],
            2.0,
        ),
        _target(
            "Inference, serving shapes with B = 4 to 16: ours / fastest peer <= 0.90",
            vs_fastest(lambda s: s.group == "serving" and 4 <= s.batch <= 16),
            0.90,
        ),
        _target(
            "Inference, the issue's shapes with B >= 8: ours / fastest peer <= 0.80",
            vs_fastest(lambda s: s.group == "issue" and s.batch >= 8),
            0.80,
        ),
        _target(
            "Inference, large shapes: ours / fastest peer <= 1.00",
            vs_fastest(lambda s: s.group == "large"),
            1.00,
        ),
        _target(
            "Inference, the stream: ours / fastest peer <= 0.85",
            vs_fastest(lambda s: s.group == "stream"),
            0.85,
        ),
        _target(
            "Per-call cost, a tiny model (T 1, B 1, H 8): ours / torch.nn <= 1.00",
            [
                (r.shape.name, r.inference[OURS] / r.inference[TORCH_NN])
                for r in rows
                if r.shape.group == "per-call" and TORCH_NN in r.inference
            ],
            1.00,
        ),
        _target(
            "Beside a busy process: ours / fastest peer over the quiet row's <= 1.20",
            vs_quiet(),
            1.20,
        ),
        _target(
            f"Training, GRU and RNN: ours / torch.nn <= {TRAINING_TARGET_OTHERS:.2f}",
            vs_torch(lambda s: s.mode != CUDNN_LSTM),
            TRAINING_TARGET_OTHERS,
        ),
        _target(
            f"Training, LSTM, large shapes: ours / torch.nn <= {TRAINING_TARGET_LSTM:.2f}",
            vs_torch(lambda s: s.mode == CUDNN_LSTM and training_target(s) is not None),
            TRAINING_TARGET_LSTM,
        ),
        _target(
            f"Inference, large shapes: ours >= {100 * share:.0f}% of the matmul peak "
            f"({threads} threads)",
            [
                (r.shape.name, r.shape.forward_flops() / r.inference[OURS] / peak)
                for r in rows
                if r.inference and r.shape.group == "large" and not r.shape.extra
            ],
            share,
            at_least=True,
            percent=True,
        ),
    ]
    skip = next((r for r in rows if r.shape.skip_input and r.inference and r.training), None)
    twin = next(
        (
            r
            for r in rows
            if skip is not None
            and not r.shape.skip_input
            and _problem(r.shape) == _problem(skip.shape)
            and r.inference
            and r.training
        ),
        None,
    )
    if skip is not None and twin is not None:
        out.append(
            _target(
                "skip_input / linear_input on the same shape <= 1.00 (+3% noise)",
                [
                    ("inference", skip.inference[OURS] / twin.inference[OURS]),
                    ("training", skip.training[OURS] / twin.training[OURS]),
                ],
                1.03,
            )
        )
    if dynamic is not None:
        out.append(
            _target(
                f"dynamic_rnn over compatible cells / fused layer <= 1.2 (T = "
                f"{dynamic.shape.steps})",
                [
                    (kind, getattr(dynamic, kind)["dynamic_rnn"] / getattr(dynamic, kind)[OURS])
                    for kind in ("inference", "training")
                ],
                1.2,
            )
        )
    out.append(
        _target(
            "Peak memory of a training step <= torch.nn's + 5%",
            [(r.shape.name, _memory_ratio(r.memory)) for r in rows if len(r.memory) == 2],
            1.05,
        )
    )
    return out


def _problem(shape: Shape) -> tuple[object, ...]:
    """What a shape computes, but for skip_input and how it is reported."""
    return (
        shape.mode,
        shape.steps,
        shape.batch,
        shape.input_size,
        shape.units,
        shape.layers,
        shape.bidirectional,
        shape.varlen,
        shape.stream,
    )


def chart(rows: Sequence[Row], path: Path, device: str) -> bool:
    """Bar charts of our time over the peers'; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    inf_rows = [r for r in rows if r.inference and not r.shape.extra]
    train_rows = [r for r in rows if r.training]
    panels = [
        (
            "inference",
            inf_rows,
            [
                (
                    "vs fastest peer",
                    [
                        r.inference[OURS] / b[1] if (b := _fastest_peer(r.inference)) else math.nan
                        for r in inf_rows
                    ],
                ),
                ("vs torch.nn", [r.inference[OURS] / r.inference[TORCH_NN] for r in inf_rows]),
            ],
        ),
        (
            "training",
            train_rows,
            [("vs torch.nn", [r.training[OURS] / r.training[TORCH_NN] for r in train_rows])],
        ),
    ]
    panels = [p for p in panels if p[1]]
    if not panels:
        return False
    width_in = max(11.0, 0.3 * max(len(p[1]) for p in panels))
    fig, axes = plt.subplots(len(panels), 1, figsize=(width_in, 4.5 * len(panels)), squeeze=False)
    for ax, (kind, members, series) in zip(axes[:, 0], panels):
        width = 0.8 / len(series)
        for i, (label, values) in enumerate(series):
            xs = [k + (i - (len(series) - 1) / 2) * width for k in range(len(members))]
            ax.bar(xs, values, width, label=f"{kind} {label}")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_yscale("log")  # 0.5 and 2 equally far from 1
        ax.set_xticks(range(len(members)))
        ax.set_xticklabels([r.shape.name for r in members], fontsize=7, rotation=90)
        ax.set_ylabel("our time / peer's (lower is better)")
        ax.legend()
    axes[0, 0].set_title(f"cudnn_rnn vs peers on {device}")
    fig.tight_layout()
    atomic.write_file(path, lambda f: fig.savefig(f, dpi=110, format="png"))
    plt.close(fig)
    return True


# -- driver ----------------------------------------------------------------------------------------


def run(
    shapes: Sequence[Shape],
    *,
    out: Path,
    device: str = "cpu",
    repeats: int = 5,
    block: float = 0.2,
    peers: bool = True,
    memory: bool = True,
    dynamic: Shape | None = DYNAMIC_RNN_SHAPE,
    warmup: float = 1.0,
    peak_sizes: Sequence[tuple[int, int, int]] = PEAK_SIZES,
    log: Callable[[str], None] = print,
    dropin: Any = None,
) -> tuple[list[Row], Row | None]:
    """Run the suite and write ``benchmarks.{md,json,png}`` into ``out``; ``dropin``: the
    sizes of the torch.nn drop-ins' section (``benchmarks/dropin.py``), None for none."""
    out.mkdir(parents=True, exist_ok=True)
    timing = Timing(repeats, block, warmup)
    rows: list[Row] = []
    peak, engine = matmul_peak(device, peak_sizes)
    log(f"matmul peak {peak / 1e9:.1f} GFLOP/s on {device} ({engine})")
    bandwidths: dict[tuple[int, int], float] = {}
    for k, shape in enumerate(shapes, 1):
        log(f"[{k}/{len(shapes)}] {shape.label} ...")
        row = bench_shape(shape, device=device, timing=timing_for(shape, timing), peers=peers)
        if shape.batch == 1 and shape.inference:
            matrix = shape.recurrent_matrix()
            if matrix not in bandwidths:
                bandwidths[matrix] = cache_bandwidth(*matrix, device=device)
            row.cache_bandwidth = bandwidths[matrix]
            row.bound = shape.steps * shape.recurrent_bytes() / row.cache_bandwidth
            if shape.steps > 1 and shape.varlen == 0:
                row.step = marginal_step(shape, device=device, timing=timing_for(shape, timing))
        if memory and shape.training:
            _measure_row_memory(row, device, log)
        rows.append(row)
        log("    " + _summary(row))
    dyn = None
    if dynamic is not None:
        log(f"dynamic_rnn vs layer on {dynamic.label} ...")
        dyn = bench_dynamic_rnn(dynamic, device=device, repeats=repeats, block=block, warmup=warmup)
    drop = None
    if dropin is not None:
        if str(ROOT) not in sys.path:  # run as a script: benchmarks/ is on the path, not ROOT
            sys.path.insert(0, str(ROOT))
        from benchmarks import dropin as dropin_section

        log("torch.nn drop-ins (cudnn_rnn.nn) ...")
        drop = dropin_section.run(dropin, timing, memory=memory, log=log)
    info = machine()
    info["matmul peak engine"] = engine
    text = report(rows, dyn, peak, info, device)
    if drop is not None:
        text += "\n" + "\n".join(dropin_section.report(drop)) + "\n"
    atomic.write_file(out / "benchmarks.md", text.encode())
    record = {
        "device": device,
        "matmul_peak_flops": peak,
        "machine": info,
        "rows": [asdict(r) for r in rows],
        "dynamic_rnn": None
        if dyn is None
        else {
            "shape": asdict(dyn.shape),
            "inference": dyn.inference,
            "training": dyn.training,
            "notes": dyn.notes,
        },
        "dropin": None if drop is None else asdict(drop),
    }
    atomic.write_file(out / "benchmarks.json", (json.dumps(record, indent=1) + "\n").encode())
    if not chart(rows, out / "benchmarks.png", device):
        log("matplotlib is not installed: no chart (pip install matplotlib)")
    return rows, dyn


def _measure_row_memory(row: Row, device: str, log: Callable[[str], None]) -> None:
    for impl in (OURS, TORCH_NN):
        try:
            value = measure_memory(row.shape, impl, device)
        except RuntimeError as err:
            log(f"    {err}")
            row.notes.append(str(err))
            continue
        if value is not None:
            row.memory[impl] = value


def _summary(row: Row) -> str:
    """One log line about a measured row."""
    parts = []
    if row.inference:
        best = _fastest_peer(row.inference)
        parts.append(
            f"inference ours {_ms(row.inference[OURS])} ms"
            + (f", fastest peer {best[0]} {_ms(best[1])} ms" if best else "")
        )
    if row.training:
        parts.append(f"training ours/torch.nn {row.training[OURS] / row.training[TORCH_NN]:.2f}")
    return "; ".join(parts)


#: The suite's name in its messages: how it is run (``make bench`` runs it with ``--out docs``).
PROG = "benchmarks/suite.py"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(__doc__ or "").split("\n\n")[0].replace("``", ""),
        epilog="Writes benchmarks.md, benchmarks.json and benchmarks.png into --out (make bench: "
        "docs/); the serving rows run at most 3 repeats of half blocks after half the warm-up. "
        "--quick runs tiny shapes: a check of the suite, not a measurement.",
    )
    parser.add_argument("--out", default="bench-out", help="folder for benchmarks.{md,json,png}")
    add_timing_arguments(parser)
    parser.add_argument("--quick", action="store_true", help="tiny shapes: a check of the suite")
    parser.add_argument(
        "--shapes",
        nargs="+",
        metavar="NAME",
        help=f"only these shapes (dynamic_rnn only with {DYNAMIC_RNN_SHAPE.name})",
    )
    parser.add_argument("--no-peers", action="store_true", help="only ours and torch.nn")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory probes")
    parser.add_argument(
        "--no-dropin", action="store_true", help="skip the torch.nn drop-ins' section"
    )
    return parser


def _dropin_sizes(quick: bool) -> Any:
    """The drop-ins' sizes (``benchmarks/dropin.py``): the issue's, or tiny ones."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks import dropin

    return dropin.QUICK if quick else dropin.Sizes()


def main(argv: Sequence[str] | None = None) -> int:
    return run_checked(build_parser().parse_args(argv))


def run_checked(args: argparse.Namespace) -> int:
    """:func:`run_args`; bad options or an unwritable --out: one line on stderr, exit code 2."""
    try:
        return run_args(args)
    except (ValueError, OSError) as err:  # e.g. --repeats 0, --shapes nope
        print(f"{PROG}: error: {err}".splitlines()[0], file=sys.stderr)
        return 2


def run_args(args: argparse.Namespace) -> int:
    """Run the suite as the parsed options say; ValueError (one line) on bad options."""
    check_timing_arguments(args)
    shapes = QUICK_SHAPES if args.quick else SHAPES
    if args.shapes:
        known = {s.name: s for s in (*SHAPES, *QUICK_SHAPES)}
        unknown = [n for n in args.shapes if n not in known]
        if unknown:
            raise ValueError(
                f"unknown shape(s) {', '.join(unknown)}; choose from {', '.join(known)}"
            )
        shapes = tuple(known[n] for n in args.shapes)
    dynamic = QUICK_SHAPES[0] if args.quick else DYNAMIC_RNN_SHAPE
    run(
        shapes,
        out=Path(args.out),
        device=args.device,
        repeats=args.repeats,
        block=args.block,
        peers=not args.no_peers,
        memory=not args.no_memory,
        dynamic=dynamic if dynamic in shapes else None,
        peak_sizes=QUICK_PEAK_SIZES if args.quick else PEAK_SIZES,
        warmup=args.warmup,
        dropin=None if args.no_dropin else _dropin_sizes(args.quick),
    )
    print(f"wrote {Path(args.out) / 'benchmarks.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
