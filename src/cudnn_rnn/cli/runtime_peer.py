"""The process behind :class:`cudnn_rnn.cli.bench.RemotePeer`: onnxruntime or OpenVINO on an ONNX
file, timed on command.

It does not import torch (nor anything of this package but its torch-free ``__init__``), so a
runtime's process starts in about 0.2 s (onnxruntime) or 0.5 s (OpenVINO) instead of the 2 s that
importing torch costs, and a benchmark starts one such process per runtime and shape.
:mod:`cudnn_rnn.cli.bench` takes its output comparison and its timing from here, so the runtimes'
processes and the implementations in the benchmark's own process are measured by the same code.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

# Untimed calls an implementation makes at least before it is timed (standard library only).
from cudnn_rnn.cli.timing import WARMUP_CALLS

#: What starts each line a runtime's process answers with (a runtime may print lines of its own).
REPLY = "@cudnn_rnn.cli.bench "
#: ``python -c LAUNCH ARGS``: :func:`serve` with the JSON list ARGS.
LAUNCH = (
    "import json, sys; from cudnn_rnn.cli import runtime_peer; "
    "runtime_peer.serve(*json.loads(sys.argv[1]))"
)


def compare(got: np.ndarray, want: np.ndarray, lengths: np.ndarray | None) -> tuple[float, float]:
    """max |got - want| over the valid steps of time-major outputs, and max |got| past each
    sequence's length (ours writes 0 there; OpenVINO leaves other values on some multi-layer
    models).

    >>> compare(np.ones((2, 1, 1)), np.zeros((2, 1, 1)), np.array([1]))
    (1.0, 1.0)
    """
    if lengths is None:
        lengths = np.full(got.shape[1], got.shape[0])
    valid = np.arange(got.shape[0])[:, None] < lengths[None, :]
    diff = np.abs(got - want)[valid]
    padding = np.abs(got)[~valid]
    return float(diff.max(initial=0.0)), float(padding.max(initial=0.0))


def compare_all(
    outputs: Sequence[np.ndarray],
    expected: Sequence[np.ndarray],
    batches: Sequence[tuple[Any, np.ndarray | None]],
) -> tuple[float, float]:
    """:func:`compare` over every batch ``(x, lengths)``: the largest of each of its two."""
    pairs = [compare(o, e, n) for o, e, (_, n) in zip(outputs, expected, batches)]
    return max(p[0] for p in pairs), max(p[1] for p in pairs)


class Blocks:
    """An implementation as :func:`cudnn_rnn.cli.bench.time_alternating` drives it: ``fn`` makes one
    call, ``sync`` waits for the work it queued (a GPU's; nothing on a CPU)."""

    def __init__(self, fn: Callable[[], object], sync: Callable[[], None] = lambda: None) -> None:
        self.fn, self.sync = fn, sync

    def warm(self, seconds: float) -> float:
        """Untimed calls for ``seconds`` (at least :data:`WARMUP_CALLS`), then one timed call."""
        calls, start = 0, time.perf_counter()
        while calls < WARMUP_CALLS or time.perf_counter() - start < seconds:
            self.fn()
            self.sync()
            calls += 1
        start = time.perf_counter()
        self.fn()
        self.sync()
        return time.perf_counter() - start

    def block(self, count: int) -> float:
        """One untimed call, then ``count`` timed calls: seconds per call."""
        self.fn()
        self.sync()
        start = time.perf_counter()
        for _ in range(count):
            self.fn()
        self.sync()
        return (time.perf_counter() - start) / count


def ort_options(threads: int) -> Any:
    """onnxruntime's session options as every session of the benchmarks makes them."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    return options


def session(runtime: str, path: str, threads: int) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
    """A function of the feeds that returns the model's first output, as ``runtime``
    (``"onnxruntime"`` or ``"openvino"``) runs the model at ``path`` on ``threads`` threads."""
    if runtime == "onnxruntime":
        import onnxruntime as ort

        made = ort.InferenceSession(path, ort_options(threads), providers=["CPUExecutionProvider"])
        return lambda feeds: made.run(None, feeds)[0]
    import openvino

    # f32: OpenVINO's default on CPUs with bf16 instructions is bf16 inference.
    config = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": threads}
    compiled = openvino.Core().compile_model(path, "CPU", config)
    return lambda feeds: compiled(feeds)[0]


def serve(
    runtime: str,
    path: str,
    input_name: str,
    inputs: str,
    expected: str,
    settle: float,
    threads: int,
) -> None:
    """The runtime ``runtime`` on the model at ``path``, on ``threads`` threads.

    Runs it on the batches in ``inputs`` (an ``.npz`` of ``x<i>`` and ``lengths<i>``), answers
    how far its outputs are from ``expected`` (an ``.npz`` of one array per batch), then one
    answer per command read from stdin: ``warm SECONDS`` (untimed calls, then the seconds of
    one), ``block N`` (one untimed call, then seconds per call of N), ``quit``. Each answer is
    one JSON line after :data:`REPLY`, sent ``settle`` seconds after a warm-up or a block (the
    time a runtime's spinning threads take to stop).
    """

    def answer(reply: dict[str, Any]) -> None:
        print(REPLY + json.dumps(reply), flush=True)

    with np.load(inputs) as saved:
        count = sum(name.startswith("x") for name in saved.files)
        batches = [
            (saved[f"x{i}"], saved[f"lengths{i}"] if f"lengths{i}" in saved.files else None)
            for i in range(count)
        ]
    with np.load(expected) as saved:
        want = [saved[f"arr_{i}"] for i in range(len(saved.files))]
    feeds = [{input_name: x, **({} if n is None else {"sequence_lens": n})} for x, n in batches]
    try:
        run = session(runtime, path, threads)
        diff, padding = compare_all([run(f) for f in feeds], want, batches)
    except Exception as err:  # a model the runtime refuses: the others still run
        answer({"error": f"{type(err).__name__}: {err}".splitlines()[0]})
        return
    answer({"max_abs_diff": diff, "max_abs_padding": padding})

    def call() -> None:
        for f in feeds:
            run(f)

    blocks = Blocks(call)
    for line in sys.stdin:
        command, *arg = line.split()
        if command == "warm":
            once = blocks.warm(float(arg[0]))
            time.sleep(settle)
            answer({"once": once})
        elif command == "block":
            seconds = blocks.block(int(arg[0]))
            time.sleep(settle)
            answer({"seconds": seconds})
        else:
            return
