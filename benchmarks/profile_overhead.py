"""Where the time of one call goes: our layer vs torch.nn on torch's kernels, op by op.

    .venv/bin/python -m benchmarks.profile_overhead [--shape lstm-2-25x1x256] [--calls 200]

Runs the shape's training step (forward + backward) and inference call under torch.profiler,
for our layer (on torch's kernels, as every call of it runs) and for torch.nn with the same
weights, and prints per call: the wall time, the time inside the RNN kernels, and the other
ATen ops ours runs that torch.nn does not (what our overhead is made of). This is how the
overhead work of issue 5 was found; docs/benchmarks.md has the numbers of the suite
(``benchmarks/suite.py``, whose shapes this takes). Run it from the repository's root.
"""

from __future__ import annotations

import argparse
import collections
import time
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks import suite
from cudnn_rnn import convert
from cudnn_rnn.cli.bench import inference_step, layer_call, torch_call, training_step

KERNELS = ("aten::mkldnn_rnn_layer", "aten::mkldnn_rnn_layer_backward", "aten::_thnn", "aten::lstm")


def self_times(fn: Callable[[], None], calls: int) -> tuple[float, dict[str, float]]:
    """Wall seconds per call and self CPU seconds per call of each op."""
    for _ in range(10):
        fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    wall = (time.perf_counter() - start) / calls
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            fn()
    ops: dict[str, float] = collections.defaultdict(float)
    for event in prof.key_averages():
        ops[event.key] += event.self_cpu_time_total / 1e6 / calls
    return wall, ops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shape", default="lstm-2-25x1x256")
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    shape = {s.name: s for s in suite.SHAPES}[args.shape]
    layer, x, lengths = suite._make(shape, "cpu")
    module = convert.to_torch(layer)
    grad = torch.randn(shape.steps, shape.batch, shape.units * (2 if shape.bidirectional else 1))
    cases = {
        "training": (
            training_step(lambda: layer_call(layer, x, lengths), [layer.opaque_kernel], grad),
            training_step(lambda: torch_call(module, x, lengths), list(module.parameters()), grad),
        ),
        "inference": (
            inference_step(lambda: layer_call(layer, x, lengths)),
            inference_step(lambda: torch_call(module, x, lengths)),
        ),
    }
    print(f"{shape.label}, {args.calls} calls each, microseconds per call")
    for kind, (ours, peer) in cases.items():
        wall_o, ops_o = self_times(ours, args.calls)
        wall_p, ops_p = self_times(peer, args.calls)
        kern_o = sum(v for k, v in ops_o.items() if k.startswith(KERNELS))
        kern_p = sum(v for k, v in ops_p.items() if k.startswith(KERNELS))
        print(
            f"\n{kind}: wall ours {wall_o * 1e6:.0f}, torch.nn {wall_p * 1e6:.0f} "
            f"({wall_o / wall_p:.3f}x); in the RNN kernels ours {kern_o * 1e6:.0f}, "
            f"torch.nn {kern_p * 1e6:.0f}"
        )
        extra = sorted(
            ((v - ops_p.get(k, 0.0), k) for k, v in ops_o.items() if not k.startswith(KERNELS)),
            reverse=True,
        )
        for delta, name in extra[:8]:
            if delta > 1e-6:
                print(f"    +{delta * 1e6:6.1f}  {name}")


if __name__ == "__main__":
    main()
