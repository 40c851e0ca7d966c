"""The variants (issue 47) beside their nearest cuDNN mode, and onnxruntime where ONNX has them.

Issue 47's speed target: each variant within 1.15x of the nearest cuDNN mode at the same shapes.
One row per variant (:func:`cases`), at T 25, B 16, one layer, input 256, H 256 (two rows again
at B 1); each row times, in alternating blocks (:func:`cudnn_rnn.cli.bench.time_alternating`,
the method of the suite and of ``cudnn-rnn bench``: untimed warm-up, then block by block in turn,
the median seconds per call):

* inference (a forward under ``torch.no_grad()``): our layer with the variant (``variant=``),
  the same layer without it, in the nearest mode (``mode``: the variant left out, and for a
  plain RNN's other activation the plain mode beside it), and, where ``to_onnx`` writes the
  variant (reset before the product, ONNX's activations, peepholes, coupled gates, ``clip``,
  reverse time), onnxruntime running that export in a process of its own
  (:class:`cudnn_rnn.cli.bench.RemotePeer`, as in the suite), its output compared with ours;
* training (a forward, a backward of ``sum(out * g)``, the gradients dropped): the two layers.

Every parameter of both layers is drawn from U(-1/sqrt(H), 1/sqrt(H)) (torch.nn's
initialisation), so that biases and peepholes are not 0 and the comparison with onnxruntime
covers them. The ratios are of times: variant / mode (the target), ours (the variant) /
onnxruntime. GFLOP/s count the matrix products' multiply-adds of the variant's own layout (2 per
multiply-add, training 3x the forward, as the suite counts; separate stacks read one direction's
output above the first layer, so they make fewer), as a share of the suite's matmul peak
(:func:`benchmarks.suite.matmul_peak`) measured in the same run. The engine each layer runs on
is :func:`cudnn_rnn.engines.select`'s.

``python benchmarks/variants.py --out docs`` (``make bench``, after the suite) writes
``benchmarks-variants.md`` and ``benchmarks-variants.json``; ``--quick`` runs every row on tiny
shapes with short blocks, a check of the script rather than a measurement. Like the suite, it
lives beside the package and imports only ``cudnn_rnn`` and the suite.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the suite is imported as benchmarks.suite
    sys.path.insert(0, str(ROOT))

from benchmarks import suite  # noqa: E402
from cudnn_rnn import convert  # noqa: E402
from cudnn_rnn.cli.bench import (  # noqa: E402
    ORT_OURS,
    OUTPUT_TOLERANCE,
    Batch,
    Measurement,
    RemotePeer,
    RemotePeerError,
    Timing,
    add_timing_arguments,
    check_timing_arguments,
    inference_step,
    installed,
    layer_call,
    random_batches,
    time_alternating,
    training_step,
)
from cudnn_rnn.core.constants import (  # noqa: E402
    CUDNN_GRU,
    CUDNN_LSTM,
    CUDNN_RNN_BIDIRECTION,
    CUDNN_RNN_RELU,
    CUDNN_RNN_TANH,
    CUDNN_RNN_UNIDIRECTION,
)
from cudnn_rnn.core.layout import INPUT, PROJECTION, RECURRENT, layout_of  # noqa: E402
from cudnn_rnn.core.spec import RNNSpec  # noqa: E402
from cudnn_rnn.core.variant import CUDNN, Activation, Variant  # noqa: E402
from cudnn_rnn.engines import select  # noqa: E402
from cudnn_rnn.io import atomic  # noqa: E402
from cudnn_rnn.layers import _CudnnRNN, layer_of  # noqa: E402

__all__ = ["FULL", "QUICK", "Case", "Row", "Size", "cases", "main", "report", "run"]

#: The two layers of ours in a row: with the variant, and in the nearest cuDNN mode.
VARIANT, MODE = "variant", "mode"
#: Issue 47: a variant's time within this factor of its mode's, inference and training.
TARGET = 1.15
#: The files written into ``--out``: ``NAME.md`` and ``NAME.json``.
NAME = "benchmarks-variants"
PROG = "benchmarks/variants.py"


@dataclass(frozen=True)
class Size:
    """The sizes every row shares (``batch``: all but the B = 1 rows)."""

    steps: int = 25
    batch: int = 16
    input_size: int = 256
    units: int = 256
    #: The projection of the row with cell and projection clips.
    num_proj: int = 128


FULL = Size()
QUICK = Size(steps=4, batch=2, input_size=6, units=8, num_proj=4)


@dataclass(frozen=True)
class Case:
    """One row: a variant of ``mode`` at one shape, against ``base_mode`` without the variant."""

    name: str
    mode: str
    variant: Variant
    steps: int
    batch: int
    input_size: int
    units: int
    layers: int = 1
    bidirectional: bool = False
    num_proj: int | None = None
    #: The nearest cuDNN mode where it is not ``mode`` (a plain RNN's other activation).
    base_mode: str | None = None

    def spec(self, variant: Variant | None = None) -> RNNSpec:
        """The row's spec with ``variant`` (None: the row's), in the mode the variant is of
        (the base mode for :data:`CUDNN`)."""
        variant = self.variant if variant is None else variant
        mode = self.base_mode if variant.is_cudnn and self.base_mode else self.mode
        return RNNSpec(
            mode,
            self.layers,
            self.units,
            self.input_size,
            direction=CUDNN_RNN_BIDIRECTION if self.bidirectional else CUDNN_RNN_UNIDIRECTION,
            num_proj=self.num_proj,
            variant=variant,
        )

    @property
    def label(self) -> str:
        """The mode, the shape ``(T, B, input, H, layers, uni|bi)`` and the projection."""
        proj = f", P {self.num_proj}" if self.num_proj is not None else ""
        return (
            f"{_mode_name(self.mode)} ({self.steps}, {self.batch}, {self.input_size}, "
            f"{self.units}, {self.layers}, {'bi' if self.bidirectional else 'uni'}{proj})"
        )

    def forward_flops(self, variant: Variant | None = None) -> float:
        """2 x the multiply-adds of the matrix products of a forward, from the layout of
        :meth:`spec` (input, recurrent and projection matrices; every step is valid)."""
        layout = layout_of(self.spec(variant))
        kinds = (INPUT, RECURRENT, PROJECTION)
        size = sum(p.size for p in layout.weights if p.kind in kinds and p.offset is not None)
        return 2.0 * size * self.steps * self.batch


def _mode_name(mode: str) -> str:
    return mode.replace("rnn_", "rnn-")


def cases(size: Size = FULL) -> tuple[Case, ...]:
    """The rows of issue 47's table: each variant at ``size``, two of them at B = 1 too."""

    def case(name: str, mode: str, variant: Variant, batch: int = size.batch, **kw: Any) -> Case:
        return Case(name, mode, variant, size.steps, batch, size.input_size, size.units, **kw)

    reset_before = Variant(reset_after=False)
    keras2_gates = Variant(gate_activation=Activation("hard_sigmoid", 0.2, 0.5))
    return (
        case("gru-reset-before", CUDNN_GRU, reset_before),
        case("gru-reset-before-b1", CUDNN_GRU, reset_before, batch=1),
        case("lstm-hard-sigmoid", CUDNN_LSTM, keras2_gates),
        case("lstm-hard-sigmoid-b1", CUDNN_LSTM, keras2_gates, batch=1),
        case("lstm-peepholes", CUDNN_LSTM, Variant(peepholes=True)),
        case("lstm-input-forget", CUDNN_LSTM, Variant(input_forget=True)),
        case("lstm-gate-clip", CUDNN_LSTM, Variant(gate_clip=3.0)),
        case(
            "lstm-proj-cell-clips",
            CUDNN_LSTM,
            Variant(cell_clip=3.0, proj_clip=1.0),
            num_proj=size.num_proj,
        ),
        case(
            "tanh-leaky-relu",
            CUDNN_RNN_TANH,
            Variant(cell_activation=Activation("leaky_relu")),
            base_mode=CUDNN_RNN_RELU,
        ),
        case("gru-reverse", CUDNN_GRU, Variant(time="reverse")),
        case("lstm-go-backwards", CUDNN_LSTM, Variant(time="go_backwards")),
        case("lstm-bi-sum", CUDNN_LSTM, Variant(merge="sum"), bidirectional=True),
        case(
            "lstm-2bi-separate",
            CUDNN_LSTM,
            Variant(stacks="separate"),
            layers=2,
            bidirectional=True,
        ),
    )


@dataclass
class Row:
    """One row's medians (seconds per call: :data:`VARIANT`, :data:`MODE` and onnxruntime),
    onnxruntime's distance from ours and the notes, and the engine of each layer and pass."""

    case: Case
    measured: Measurement = field(default_factory=Measurement)
    #: ``"variant inference"`` etc. -> the engine's name.
    engines: dict[str, str] = field(default_factory=dict)

    def ratio(self, kind: str) -> float:
        """Variant / mode on ``kind`` (``"inference"`` or ``"training"``)."""
        times: dict[str, float] = getattr(self.measured, kind)
        return times[VARIANT] / times[MODE]

    @property
    def met(self) -> bool:
        return all(self.ratio(kind) <= TARGET for kind in ("inference", "training"))


# -- one row ---------------------------------------------------------------------------------------


def make_layer(spec: RNNSpec, device: str, seed: int = 0) -> _CudnnRNN:
    """A layer of ``spec`` whose every parameter is drawn from U(-1/sqrt(H), 1/sqrt(H))."""
    layer = layer_of(spec, device=device)
    bound = spec.num_units**-0.5
    drawn = torch.empty(layer.opaque_kernel.shape, dtype=layer.dtype)
    drawn.uniform_(-bound, bound, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        layer.opaque_kernel.copy_(drawn)
    return layer


def _call(layer: _CudnnRNN, x: Tensor) -> Callable[[], Tensor]:
    return lambda: layer_call(layer, x, None)


def bench_case(case: Case, *, device: str, timing: Timing, runtimes: bool) -> Row:
    """Time one row: both layers in inference (with onnxruntime where it applies) and in
    training, each set alternating block by block."""
    row = Row(case)
    layers = {VARIANT: make_layer(case.spec(), device), MODE: make_layer(case.spec(CUDNN), device)}
    batches = random_batches(case.batch, case.input_size, [case.steps])
    x = torch.from_numpy(batches[0][0]).to(device)
    for name, layer in layers.items():
        for kind in ("inference", "training"):
            row.engines[f"{name} {kind}"] = select(
                layer.spec, x.device, layer.dtype, need_grad=kind == "training", lengths=False
            )
    with torch.no_grad():
        outputs = {name: _call(layer, x)() for name, layer in layers.items()}
    fns = {name: inference_step(_call(layer, x)) for name, layer in layers.items()}
    with tempfile.TemporaryDirectory() as tmp:
        remotes: dict[str, RemotePeer] = {}
        if runtimes and x.device.type == "cpu":
            expected = outputs[VARIANT].numpy()
            peer = _onnxruntime(layers[VARIANT], batches, expected, tmp, row.measured, case.name)
            remotes = {} if peer is None else {ORT_OURS: peer}
        try:
            row.measured.inference = _alternating(fns, remotes, device, timing, row.measured)
        finally:
            for remote in remotes.values():
                remote.close()
    train = {}
    for name, layer in layers.items():
        grad_out = torch.randn(
            outputs[name].shape, generator=torch.Generator().manual_seed(1), dtype=layer.dtype
        ).to(device)
        train[name] = training_step(_call(layer, x), [*layer.parameters()], grad_out)
    row.measured.training = time_alternating(
        train, device=device, repeats=timing.repeats, block=timing.block, warmup=timing.warmup
    )
    return row


def _onnxruntime(
    layer: _CudnnRNN,
    batches: Sequence[Batch],
    expected: np.ndarray,
    tmp: str,
    measured: Measurement,
    label: str,
) -> RemotePeer | None:
    """onnxruntime on ``to_onnx`` of ``layer``, in a process of its own, its output already
    compared with ``expected``; None, with a note, where it cannot run."""
    if not installed("onnxruntime") or not installed("onnx"):
        measured.notes.append("onnxruntime not installed (pip install onnx onnxruntime)")
        return None
    path = os.path.join(tmp, "variant.onnx")
    try:
        convert.to_onnx(layer, path)
    except ValueError as err:  # what ONNX's nodes cannot hold, in one line
        reason = str(err).strip().splitlines()[0]
        measured.notes.append(f"{label}: no ONNX export, so no onnxruntime ({reason})")
        return None
    inputs, want = os.path.join(tmp, "inputs.npz"), os.path.join(tmp, "expected.npz")
    np.savez(inputs, **{f"x{i}": x for i, (x, _) in enumerate(batches)})  # type: ignore[arg-type]
    np.savez(want, expected)
    peer = RemotePeer(ORT_OURS, path, "X", inputs, want)
    try:
        peer.ready()
    except RemotePeerError as err:
        measured.notes.append(f"{err.peer} failed on {label}: {err.reason}")
        peer.close()
        return None
    measured.check(ORT_OURS, peer.max_abs_diff, peer.max_abs_padding, label)
    return peer


def _alternating(
    fns: Mapping[str, Callable[[], None]],
    remotes: dict[str, RemotePeer],
    device: str,
    timing: Timing,
    measured: Measurement,
) -> dict[str, float]:
    """:func:`time_alternating` over ours and the runtime; a runtime whose process fails
    mid-way gets a note, and the rest are timed again without it."""
    while True:
        try:
            return time_alternating(
                {**fns, **remotes},
                device=device,
                repeats=timing.repeats,
                block=timing.block,
                warmup=timing.warmup,
            )
        except RemotePeerError as err:
            measured.notes.append(f"{err.peer} failed mid-way: {err.reason}")
            remotes.pop(err.peer).close()


# -- the report ------------------------------------------------------------------------------------


def _ms(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds * 1e3:.3g}"


def _share(flops: float, seconds: float, peak: float) -> str:
    return f"{flops / seconds / 1e9:.1f} ({100 * flops / seconds / peak:.1f}%)"


def _row_line(row: Row, peak: float) -> str:
    c, inf, train = row.case, row.measured.inference, row.measured.training
    ort = inf.get(ORT_OURS)
    flops = c.forward_flops()
    cells = [
        c.name,
        c.variant.describe(),
        c.label,
        _mode_name(c.spec(CUDNN).mode)
        + (" (same projection)" if c.num_proj is not None else "")
        + (", concat" if c.variant.merge != "concat" else "")
        + (", cuDNN's stacks" if c.variant.stacks != "layers" else ""),
        _ms(inf[VARIANT]),
        _ms(inf[MODE]),
        f"**{row.ratio('inference'):.2f}**",
        _ms(ort),
        "–" if ort is None else f"{inf[VARIANT] / ort:.2f}",
        _ms(train[VARIANT]),
        _ms(train[MODE]),
        f"**{row.ratio('training'):.2f}**",
        f"{_share(flops, inf[VARIANT], peak)} / {_share(3 * flops, train[VARIANT], peak)}",
        f"{row.engines[f'{MODE} inference']}, {row.engines[f'{MODE} training']}",
        "met" if row.met else "**not met**",
    ]
    return "| " + " | ".join(cells) + " |"


HEADER = (
    "row",
    "variant",
    "shape (T, B, input, H, layers, dirs)",
    "nearest mode",
    "inference: variant ms",
    "mode ms",
    "variant / mode",
    "onnxruntime ms",
    "ours / onnxruntime",
    "training: variant ms",
    "mode ms",
    "variant / mode",
    "variant GFLOP/s (% of peak): inference / training",
    "mode's engine: inference, training",
    f"variant / mode <= {TARGET:.2f}",
)


def report(
    rows: Sequence[Row], peak: float, info: Mapping[str, str], device: str, when: str
) -> str:
    """The Markdown report."""
    met = sum(row.met for row in rows)
    ort = [r for r in rows if ORT_OURS in r.measured.inference]
    engines = sorted({r.engines[f"{VARIANT} {k}"] for r in rows for k in ("inference", "training")})
    lines = [
        "# Variants beside their cuDNN mode",
        "",
        f"Written by `make bench` (`python {PROG} --out docs`, after the suite) on {when}; the "
        "method is in that script's docstring. Times are milliseconds per call, medians of "
        "alternating blocks: our layer with the variant and the same layer in the nearest cuDNN "
        "mode (inference under `torch.no_grad()`, then training: a forward and a backward), "
        "with onnxruntime running our `to_onnx` export of the variant, in a process of its own, "
        "on the rows ONNX can hold. Ratios below 1 mean the variant (ours) is faster.",
        "",
        f"Device: **{device}**. Matmul peak (the suite's): **{peak / 1e9:.1f} GFLOP/s** "
        f"({info.get('matmul peak engine', '?')}).",
        "",
        "| | |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in info.items()),
        "",
        f"## Each variant against its mode (issue 47's target: variant / mode <= {TARGET:.2f})",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|---" * len(HEADER) + "|",
        *(_row_line(row, peak) for row in rows),
        "",
        f"The target (variant / mode <= {TARGET:.2f} in inference and in training) is met on "
        f"**{met} of {len(rows)}** rows. onnxruntime ran on {len(ort)} of them; "
        + _ort_agreement(ort)
        + " The variants ran on "
        + ", ".join(f"the `{e}` engine" for e in engines)
        + ".",
    ]
    if met < len(rows):
        lines += ["", "## Why the target is not met", "", *_why(rows)]
    notes = sorted({n for row in rows for n in row.measured.notes})
    if notes:
        lines += ["", "## Notes", "", *(f"- {n}" for n in notes)]
    return "\n".join(lines) + "\n"


def _widest(rows: Sequence[Row], kind: str) -> Row:
    return max(rows, key=lambda r: r.ratio(kind))


def _why(rows: Sequence[Row]) -> list[str]:
    """What keeps each row that misses the target from it, by the engine its variant ran on."""
    kinds = ("inference", "training")
    out = []
    for row in rows:
        missed = [k for k in kinds if not row.ratio(k) <= TARGET]
        if not missed:
            continue
        ran = {row.engines[f"{VARIANT} {k}"] for k in missed}
        ratios = ", ".join(f"{k} {row.ratio(k):.2f}x" for k in missed)
        if ran == {"native"}:
            why = (
                "the native engine runs it in its fused loops, so the gap is what the variant "
                "adds per step: a GRU with the reset gate before the product makes two "
                "products a step with a barrier between them (the mode one), which a batch "
                "of one, a few microseconds a step, feels most"
                if row.case.mode == "gru" and not row.case.variant.reset_after
                else "the native engine runs it in its fused loops; the gap is the variant's "
                "extra element-wise work per step"
            )
        else:
            why = (
                "it runs on the `variant` engine (torch operators, one Python loop per layer "
                "and direction, a backward that runs the forward again under autograd): the "
                "native engine has no projection, so neither the variant nor its mode runs "
                "there (the engine column says which ran)"
            )
        out.append(f"- {row.case.name} ({ratios}): {why}.")
    return out


def _ort_agreement(rows: Sequence[Row]) -> str:
    """How far onnxruntime's outputs were from ours, in a sentence."""
    diffs = [r.measured.max_abs_diff[ORT_OURS] for r in rows if ORT_OURS in r.measured.max_abs_diff]
    if not diffs:
        return "no output was compared."
    off = sum(not d <= OUTPUT_TOLERANCE for d in diffs)  # NaN too
    if off:
        return f"its output differs from ours by more than {OUTPUT_TOLERANCE:g} on {off} (notes)."
    return (
        f"its output is within {OUTPUT_TOLERANCE:g} of ours on each (at most {max(diffs):.1e} "
        "over the steps)."
    )


def _record(
    rows: Sequence[Row],
    peak: float,
    info: Mapping[str, str],
    device: str,
    when: str,
    timing: Timing,
    seconds: float,
) -> dict[str, Any]:
    """The JSON record: every time, ratio, distance, note and engine of the report."""
    return {
        "date": when,
        "device": device,
        "machine": dict(info),
        "matmul_peak_flops": peak,
        "target": TARGET,
        "timing": asdict(timing),
        "seconds": seconds,
        "rows": [
            {
                "name": r.case.name,
                "label": r.case.label,
                "mode": r.case.mode,
                "base_mode": r.case.spec(CUDNN).mode,
                "variant": r.case.variant.as_dict(),
                "variant_described": r.case.variant.describe(),
                "steps": r.case.steps,
                "batch": r.case.batch,
                "input_size": r.case.input_size,
                "units": r.case.units,
                "layers": r.case.layers,
                "bidirectional": r.case.bidirectional,
                "num_proj": r.case.num_proj,
                "forward_flops": {
                    VARIANT: r.case.forward_flops(),
                    MODE: r.case.forward_flops(CUDNN),
                },
                "inference": r.measured.inference,
                "training": r.measured.training,
                "ratio": {kind: r.ratio(kind) for kind in ("inference", "training")},
                "met": r.met,
                "max_abs_diff": r.measured.max_abs_diff,
                "engines": r.engines,
                "notes": r.measured.notes,
            }
            for r in rows
        ],
    }


# -- driver ----------------------------------------------------------------------------------------


def run(
    rows: Sequence[Case],
    *,
    out: Path,
    device: str = "cpu",
    timing: Timing | None = None,
    runtimes: bool = True,
    peak_sizes: Sequence[tuple[int, int, int]] = suite.PEAK_SIZES,
    log: Callable[[str], None] = print,
) -> list[Row]:
    """Time every row and write ``NAME.md`` and ``NAME.json`` into ``out``."""
    started = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    timing = Timing() if timing is None else timing
    peak, engine = suite.matmul_peak(device, peak_sizes)
    log(f"matmul peak {peak / 1e9:.1f} GFLOP/s on {device} ({engine})")
    measured = []
    for k, case in enumerate(rows, 1):
        log(f"[{k}/{len(rows)}] {case.name}: {case.label} {case.variant.describe()} ...")
        row = bench_case(case, device=device, timing=timing, runtimes=runtimes)
        measured.append(row)
        log(
            f"    variant / mode: inference {row.ratio('inference'):.2f}, "
            f"training {row.ratio('training'):.2f}"
        )
    info = suite.machine()
    info["matmul peak engine"] = engine
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = report(measured, peak, info, device, when)
    atomic.write_file(out / f"{NAME}.md", text.encode())
    record = _record(measured, peak, info, device, when, timing, time.monotonic() - started)
    atomic.write_file(out / f"{NAME}.json", (json.dumps(record, indent=1) + "\n").encode())
    return measured


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(__doc__ or "").split("\n\n")[0],
        epilog=f"Writes {NAME}.md and {NAME}.json into --out (make bench: docs/). --quick runs "
        "every row on tiny shapes, at most 2 repeats of 0.01 s blocks after at most 0.05 s of "
        "warm-up: a check of the script, not a measurement.",
    )
    parser.add_argument("--out", default="bench-out", help=f"folder for {NAME}.{{md,json}}")
    add_timing_arguments(parser)
    parser.add_argument("--quick", action="store_true", help="tiny shapes: a check of the script")
    parser.add_argument("--rows", nargs="+", metavar="NAME", help="only these rows")
    parser.add_argument("--no-peers", action="store_true", help="only ours, no onnxruntime")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run as the options say; bad options or an unwritable --out: one line, exit code 2."""
    args = build_parser().parse_args(argv)
    try:
        check_timing_arguments(args)
        chosen = cases(QUICK if args.quick else FULL)
        if args.rows:
            known = {c.name: c for c in chosen}
            unknown = [n for n in args.rows if n not in known]
            if unknown:
                raise ValueError(
                    f"unknown row(s) {', '.join(unknown)}; choose from {', '.join(known)}"
                )
            chosen = tuple(known[n] for n in args.rows)
        timing = Timing(args.repeats, args.block, args.warmup)
        if args.quick:
            timing = Timing(
                min(timing.repeats, 2), min(timing.block, 0.01), min(timing.warmup, 0.05)
            )
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        run(
            chosen,
            out=out,
            device=args.device,
            timing=timing,
            runtimes=not args.no_peers,
            peak_sizes=suite.QUICK_PEAK_SIZES if args.quick else suite.PEAK_SIZES,
        )
    except (ValueError, OSError) as err:
        print(f"{PROG}: error: {err}".splitlines()[0], file=sys.stderr)
        return 2
    print(f"wrote {out / (NAME + '.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
