"""How the CPU engine scales with threads, against its peers (issue 21, item 7).

``python benchmarks/scaling.py --out docs`` (``make bench-scaling``) runs a subset of the suite's
shapes (:data:`SCALING_SHAPES`: large shapes, among them a 3-layer bidirectional LSTM whose
directions may run at once, and serving shapes with B >= 16; inference, and training where the
suite trains the shape, unless ``--no-training``) at
each thread count of ``--threads`` (default 1, 2, 4, 8, 16; counts above the machine's cores are
left out), each count in a fresh process started with ``OMP_NUM_THREADS`` and
``MKL_NUM_THREADS`` set to it and ``torch.set_num_threads`` called with it, so that ours,
torch.nn and the runtimes (``cudnn_rnn.cli.bench.runtime_threads``) all get the same cores. Every
count measures its own float32 matmul peak (the suite's :func:`~benchmarks.suite.matmul_peak`)
and times each shape as the suite does (:func:`~benchmarks.suite.bench_shape`: ours, torch.nn,
onnxruntime and OpenVINO where installed, alternating block by block; in training ours and
torch.nn, a forward and a backward).

It writes ``benchmarks-16-cores.md`` (named for the machine it was made for; the report says
how many cores ran), ``benchmarks-16-cores.json`` and ``benchmarks-16-cores.png`` (time per
call and the fraction of the matmul peak against threads, one panel per shape) into ``--out``.
The report is rewritten after every thread count, so a run cut short keeps what it measured.
``--budget`` seconds stops before starting a thread count that would not fit (the counts run
from the largest down: the machine's full width is what the targets speak of). ``--add`` finishes
such a run in a second process: the report already in ``--out`` (checked to be of the same
machine, shapes and timing) keeps its thread counts that this run does not measure.

Targets (issue 21), at the widest count: the large shapes at >= 60% of the matmul peak, ours /
fastest peer <= 1.00 on every row with B >= 16, and in training the suite's bounds on ours /
torch.nn (:func:`benchmarks.suite.training_target`).

Like the suite, this lives beside the package and imports only ``cudnn_rnn`` and the suite.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the suite is imported as benchmarks.suite
    sys.path.insert(0, str(ROOT))

from benchmarks import suite  # noqa: E402
from cudnn_rnn.cli.bench import OURS, TORCH_NN, Timing, add_timing_arguments, check_timing_arguments  # noqa: E402
from cudnn_rnn.io import atomic  # noqa: E402

__all__ = ["SCALING_SHAPES", "THREADS", "main", "report", "run"]

#: The shapes timed at every thread count (names of :data:`benchmarks.suite.SHAPES`).
SCALING_SHAPES = (
    "lstm-100x64x512",
    "gru-100x32x1024",
    "lstm-3bi-100x32x256",
    "lstm-100x16x256",
    "tanh-50x16x1024",
    "lstm-serve-25x16x512",
    "gru-serve-25x64x512",
)
#: ``--quick``: tiny shapes (and a tiny matmul peak), a check of the script.
QUICK_SCALING_SHAPES = ("lstm-quick", "tanh-quick-serve")
THREADS = (1, 2, 4, 8, 16)
#: The report's base name (``.md``, ``.json``, ``.png``).
NAME = "benchmarks-16-cores"
#: Issue 21's targets at the widest thread count.
PEAK_SHARE, PEER_RATIO = 0.60, 1.00
PROG = "benchmarks/scaling.py"


def worker(
    threads: int,
    names: Sequence[str],
    timing: Timing,
    peers: bool,
    quick: bool = False,
    training: bool = True,
) -> dict[str, Any]:
    """One thread count, in this process: its matmul peak and every shape's times (training too
    where the shape trains and ``training``)."""
    import torch

    torch.set_num_threads(threads)
    known = {s.name: s for s in (*suite.SHAPES, *suite.QUICK_SHAPES)}
    peak, engine = suite.matmul_peak("cpu", suite.QUICK_PEAK_SIZES if quick else suite.PEAK_SIZES)
    rows = []
    for name in names:
        shape = known[name] if training else dataclasses.replace(known[name], training=False)
        row = suite.bench_shape(shape, device="cpu", timing=timing, peers=peers)
        bound = suite.training_target(shape) if row.training else None
        rows.append(
            {
                "name": shape.name,
                "label": shape.label,
                "group": shape.group,
                "batch": shape.batch,
                "flops": shape.forward_flops(),
                "inference": row.inference,
                "training": row.training,
                "training_target": bound,
                "notes": row.notes,
            }
        )
    return {"threads": threads, "torch_threads": torch.get_num_threads(), "peak": peak,
            "peak_engine": engine, "rows": rows}  # fmt: skip


def _run_worker(threads: int, args: argparse.Namespace) -> dict[str, Any]:
    """:func:`worker` in a fresh interpreter with the thread count in its environment."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "worker.json"
        cmd = [
            sys.executable, str(Path(__file__).resolve()), "--worker", str(threads),
            "--worker-json", str(out), "--shapes", *args.shapes, "--repeats", str(args.repeats),
            "--block", str(args.block), "--warmup", str(args.warmup),
            *(["--no-peers"] if args.no_peers else []), *(["--quick"] if args.quick else []),
            *(["--no-training"] if args.no_training else []),
        ]  # fmt: skip
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not out.exists():
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
            raise RuntimeError(f"{threads} threads: the worker failed: " + " | ".join(tail))
        return json.loads(out.read_text())  # type: ignore[no-any-return]


def report(runs: Sequence[dict[str, Any]], machine: dict[str, str], skipped: Sequence[str]) -> str:
    """The markdown of the report from the runs made so far (any order)."""
    runs = sorted(runs, key=lambda r: r["threads"])
    fewest = runs[0]["threads"] if runs else 1
    lines = [
        "# CPU engine: scaling with threads",
        "",
        f"<!-- Written by {PROG} (make bench-scaling). -->",
        "",
        "Each thread count ran in a fresh process (`OMP_NUM_THREADS`, `MKL_NUM_THREADS` and "
        "`torch.set_num_threads` set to it; onnxruntime and OpenVINO got the same count), "
        "timed as `make bench` times (ours and the peers alternating block by block, median "
        "per call); training (a forward and a backward) against torch.nn alone, on the shapes "
        "the suite trains. The shapes are a subset of docs/benchmarks.md's. "
        "Ratio: ours / fastest peer (below 1: we are faster). GFLOP/s counts the matrix "
        "products' multiply-adds; % is of that thread count's float32 matmul peak.",
        "",
        "| | |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in machine.items()),
        "",
        "Matmul peak per thread count:",
        "",
        "| threads | peak GFLOP/s | best product |",
        "|---|---|---|",
        *(f"| {r['threads']} | {r['peak'] / 1e9:.0f} | {r['peak_engine']} |" for r in runs),
        "",
    ]
    names = [row["name"] for row in runs[0]["rows"]] if runs else []
    for name in names:
        label = next(row["label"] for row in runs[0]["rows"] if row["name"] == name)
        lines += [f"## {label}", ""]
        peers = sorted({k for r in runs for row in r["rows"] if row["name"] == name
                        for k in row["inference"] if k != OURS})  # fmt: skip
        header = ["threads", "ours (ms)", *(f"{p} (ms)" for p in peers), "ratio",
                  "ours GFLOP/s (% of peak)", f"ours speed-up over {fewest} threads"]  # fmt: skip
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        base = None
        for r in runs:
            row = next(x for x in r["rows"] if x["name"] == name)
            t = row["inference"]
            ours = t[OURS]
            base = ours if base is None else base  # the fewest threads
            best = suite._fastest_peer(t)
            cells = [
                str(r["threads"]), f"{ours * 1e3:.2f}",
                *(f"{t[p] * 1e3:.2f}" if p in t else "-" for p in peers),
                f"{ours / best[1]:.2f}" if best else "-",
                f"{row['flops'] / ours / 1e9:.0f} ({100 * row['flops'] / ours / r['peak']:.0f}%)",
                f"{base / ours:.2f}",
            ]  # fmt: skip
            lines.append("| " + " | ".join(cells) + " |")
        lines += _training_table(runs, name)
        notes = sorted({n for r in runs for row in r["rows"] if row["name"] == name
                        for n in row["notes"]})  # fmt: skip
        lines += ["", *(f"- {n}" for n in notes), ""] if notes else [""]
    lines += _targets(runs)
    if skipped:
        lines += ["", "Not run: " + "; ".join(skipped) + "."]
    return "\n".join(lines).rstrip() + "\n"


def _training_table(runs: Sequence[dict[str, Any]], name: str) -> list[str]:
    """Shape ``name``'s training times per thread count (none where no run trained it)."""
    per = [(r["threads"], row.get("training") or {}) for r in runs
           for row in r["rows"] if row["name"] == name]  # fmt: skip
    per = [(threads, t) for threads, t in per if OURS in t and TORCH_NN in t]
    if not per:
        return []
    lines = ["", "Training (a forward and a backward):", "",
             "| threads | ours (ms) | torch.nn (ms) | ours / torch.nn "
             f"| ours speed-up over {per[0][0]} threads |",
             "|---|---|---|---|---|"]  # fmt: skip
    base = per[0][1][OURS]
    for threads, t in per:
        lines.append(
            f"| {threads} | {t[OURS] * 1e3:.2f} | {t[TORCH_NN] * 1e3:.2f} "
            f"| {t[OURS] / t[TORCH_NN]:.2f} | {base / t[OURS]:.2f} |"
        )
    return lines


def _targets(runs: Sequence[dict[str, Any]]) -> list[str]:
    if not runs:
        return []
    widest = max(runs, key=lambda r: r["threads"])
    n = widest["threads"]
    rows = []
    for row in widest["rows"]:
        ours = row["inference"][OURS]
        if row["group"] == "large":
            share = row["flops"] / ours / widest["peak"]
            met = "met" if share >= PEAK_SHARE else "**missed**"
            rows.append([row["label"], f">= {PEAK_SHARE:.0%} of the matmul peak",
                         f"{share:.0%}", met])  # fmt: skip
        best = suite._fastest_peer(row["inference"])
        if row["batch"] >= 16 and best is not None:
            ratio = ours / best[1]
            met = "met" if ratio <= PEER_RATIO else "**missed**"
            rows.append([row["label"], f"ours / fastest peer ({best[0]}) <= {PEER_RATIO:.2f}",
                         f"{ratio:.2f}", met])  # fmt: skip
        train, bound = row.get("training") or {}, row.get("training_target")
        if bound is not None and OURS in train and TORCH_NN in train:
            ratio = train[OURS] / train[TORCH_NN]
            met = "met" if ratio <= bound else "**missed**"
            rows.append([row["label"], f"training: ours / torch.nn <= {bound:.2f}",
                         f"{ratio:.2f}", met])  # fmt: skip
    if not rows:
        return [f"## Targets at {n} threads (issue 21)", "", "None applies to these shapes."]
    count = sum(r[-1] == "met" for r in rows)
    return [
        f"## Targets at {n} threads (issue 21): {count} of {len(rows)} met",
        "",
        "| shape | target | measured | verdict |",
        "|---|---|---|---|",
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


def chart(runs: Sequence[dict[str, Any]], path: Path) -> bool:
    """Per shape: time per call against threads (ours and each peer, log-log, with ideal
    scaling from ours at 1 thread); False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    runs = sorted(runs, key=lambda r: r["threads"])
    if not runs:
        return False
    names = [row["name"] for row in runs[0]["rows"]]
    cols = 3
    rows_n = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(5 * cols, 4 * rows_n), squeeze=False)
    threads = [r["threads"] for r in runs]
    for ax, name in zip(axes.flat, names):
        per = [next(x for x in r["rows"] if x["name"] == name) for r in runs]
        impls = sorted({k for p in per for k in p["inference"]}, key=lambda k: (k != OURS, k))
        for impl in impls:
            ys = [p["inference"].get(impl, math.nan) * 1e3 for p in per]
            ax.plot(threads, ys, marker="o", linewidth=2.5 if impl == OURS else 1.2, label=impl)
        first = per[0]["inference"][OURS] * 1e3
        ax.plot(threads, [first * threads[0] / t for t in threads], "k:", label="ideal (ours)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(threads)
        ax.set_xticklabels([str(t) for t in threads])
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("threads")
        ax.set_ylabel("ms per call (lower is better)")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(names) :]:
        ax.set_visible(False)
    fig.tight_layout()
    atomic.write_file(path, lambda f: fig.savefig(f, dpi=100, format="png"))
    plt.close(fig)
    return True


def _earlier(
    out: Path, args: argparse.Namespace, machine: dict[str, str], timed: dict[str, Any]
) -> dict[str, Any]:
    """``--add``: the report already in ``out``, checked to be of this machine, these shapes and
    this timing (``timed``: its record's form); its thread counts are kept where this run does
    not measure them."""
    path = out / f"{NAME}.json"
    try:
        record: dict[str, Any] = json.loads(path.read_text())
        runs, timing, then = record["runs"], record["timing"], record["machine"]
    except FileNotFoundError:
        raise ValueError(f"--add: there is no {path} to add to") from None
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise ValueError(f"--add: {path} is not a report of this script ({err})") from None
    differ = [k for k in machine if k != "timing" and then.get(k) != machine[k]]
    if differ:
        raise ValueError(f"--add: {path} was made with another {', '.join(differ)}")
    if timing != timed:
        raise ValueError(f"--add: {path} was timed with {timing}, not this run's timing")
    shapes = [[row["name"] for row in run["rows"]] for run in runs]
    if any(names != list(args.shapes) for names in shapes):
        raise ValueError(f"--add: {path} holds other shapes than {' '.join(args.shapes)}")
    return record


def _write(out: Path, record: dict[str, Any]) -> None:
    """The report's three files from ``record`` (machine, timing, skipped, runs)."""
    record["runs"] = sorted(record["runs"], key=lambda r: r["threads"])
    text = report(record["runs"], record["machine"], record["skipped"])
    atomic.write_file(out / f"{NAME}.md", text.encode())
    atomic.write_file(out / f"{NAME}.json", (json.dumps(record, indent=1) + "\n").encode())
    chart(record["runs"], out / f"{NAME}.png")


def run(args: argparse.Namespace, log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Every thread count that fits (widest first); the report after each. With ``args.add``,
    the thread counts of the report already in ``args.out`` that this run does not measure are
    kept (a run cut by ``--budget`` finished in a second process)."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cores = os.cpu_count() or 1
    counts = sorted({t for t in args.threads if t <= cores}, reverse=True)
    skipped = [f"{t} threads (the machine has {cores} cores)" for t in args.threads if t > cores]
    machine = suite.machine()
    machine["timing"] = f"--repeats {args.repeats} --block {args.block} --warmup {args.warmup}"
    timed = dataclasses.asdict(Timing(args.repeats, args.block, args.warmup))
    kept: list[dict[str, Any]] = []
    if args.add:
        earlier = _earlier(out, args, machine, timed)
        kept = [r for r in earlier["runs"] if r["threads"] not in counts]
        if kept:
            held = ", ".join(str(r["threads"]) for r in sorted(kept, key=lambda r: -r["threads"]))
            machine["timing"] = (
                f"{earlier['machine']['timing'].split(';')[0]}; {held} threads in an earlier "
                f"run on the same machine, {', '.join(map(str, counts))} in this one"
            )
    record = {
        "machine": machine,
        "timing": timed,
        "skipped": skipped,
        "runs": list(kept),
    }
    start = time.monotonic()
    runs: list[dict[str, Any]] = []
    for k, threads in enumerate(counts):
        spent = time.monotonic() - start
        if runs and args.budget and spent / len(runs) + spent > args.budget:
            skipped += [f"{t} threads (--budget {args.budget:.0f} s)" for t in counts[k:]]
            break
        log(f"{threads} threads ...")
        try:
            runs.append(_run_worker(threads, args))
        except RuntimeError as err:
            skipped.append(str(err))
            log(str(err))
            continue
        record["runs"] = [*kept, *runs]
        _write(out, record)
        log(f"    done in {time.monotonic() - start:.0f} s")
    if not runs:
        raise RuntimeError("no thread count ran: " + "; ".join(skipped))
    _write(out, record)  # the counts left out by --budget, in the report and its record
    return runs


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", default="bench-out", help=f"folder for {NAME}.{{md,json,png}}")
    add_timing_arguments(parser)
    parser.add_argument("--threads", type=int, nargs="+", default=list(THREADS))
    parser.add_argument("--shapes", nargs="+", default=None, metavar="NAME")
    parser.add_argument("--quick", action="store_true", help="tiny shapes: a check of the script")
    parser.add_argument("--budget", type=float, default=0.0, help="seconds (0: no limit)")
    parser.add_argument("--no-peers", action="store_true", help="only ours and torch.nn")
    parser.add_argument("--no-training", action="store_true", help="inference only")
    parser.add_argument(
        "--add", action="store_true",
        help="keep the thread counts of the report in --out that this run does not measure",
    )  # fmt: skip
    parser.add_argument("--worker", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--worker-json", default="", help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        check_timing_arguments(args)
        if args.shapes is None:
            args.shapes = list(QUICK_SCALING_SHAPES if args.quick else SCALING_SHAPES)
        known = {s.name for s in (*suite.SHAPES, *suite.QUICK_SHAPES)}
        unknown = [n for n in args.shapes if n not in known]
        if unknown:
            raise ValueError(f"unknown shape(s) {', '.join(unknown)}")
        if any(t < 1 for t in args.threads):
            raise ValueError("--threads must be positive")
        timing = Timing(args.repeats, args.block, args.warmup)
        if args.worker:
            result = worker(
                args.worker, args.shapes, timing, not args.no_peers, args.quick,
                not args.no_training,
            )  # fmt: skip
            Path(args.worker_json).write_text(json.dumps(result))
            return 0
        run(args)
    except (ValueError, OSError, RuntimeError) as err:
        print(f"{PROG}: error: {err}".splitlines()[0], file=sys.stderr)
        return 2
    print(f"wrote {Path(args.out) / (NAME + '.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
