"""Two builds of the native engine timed against each other in one process (issue 21).

``python tools/engine_ab.py --base f3cdf60 --shapes lstm:25:1:256 gru:100:32:1024:train``
builds the engine (``src/cudnn_rnn/_native``) of each side, loads both into this process and
times the same layer call with one build and then the other, block by block (``--pairs``
blocks of each, ``--block`` seconds each), then prints per shape each side's median time per
call and the median of the pairs' ratios (head / base) with their quartiles.

Why in one process: on a machine shared with other tenants the speed of a core moves from
minute to minute, so two processes run one after the other see different machines (pair
ratios of 0.7-2.4 for the same code, docs/design_notes.md); blocks a few tens of milliseconds
apart see the same one. Each side is a ``.so`` path, a git revision (its engine sources built
with setup.py's flags into ``build/engine_ab/``), or ``work`` (the working tree's sources).
Both builds must have the ABI of the package that loads them. Before timing, each shape's
outputs from the two builds are compared: ``same bits`` says whether they are equal bit for
bit, else the largest difference.

The layers run as users call them (``cudnn_rnn.layers``, zero initial state), without a
gradient unless the shape ends in ``:train`` (then a forward and a backward).
"""

from __future__ import annotations

import argparse
import os
import runpy
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script
    sys.path.insert(0, str(ROOT))

from cudnn_rnn.core.spec import RNNSpec  # noqa: E402
from cudnn_rnn.layers import LAYER_CLASSES, layer_of  # noqa: E402
from tools.sanitize import compiler  # noqa: E402  (the same compiler lookup)

NATIVE = Path("src") / "cudnn_rnn" / "_native"
OUT = ROOT / "build" / "engine_ab"
#: setup.py's compile and link flags (its own, read without building).
SETUP = runpy.run_path(str(ROOT / "setup.py"), run_name="engine_flags")
FLAGS = [*SETUP["COMPILE_FLAGS"], "-shared", "-fPIC"]
LINK = list(SETUP["LINK_FLAGS"])
MODES = tuple(LAYER_CLASSES)


@dataclass(frozen=True)
class Shape:
    """One layer call: ``mode:T:B:H`` (input size = H), ``:train`` for a training step."""

    mode: str
    steps: int
    batch: int
    units: int
    train: bool = False

    @classmethod
    def parse(cls, text: str) -> Shape:
        parts = text.split(":")
        train = parts[-1] == "train"
        if train:
            parts = parts[:-1]
        if len(parts) != 4 or parts[0] not in MODES:
            raise ValueError(f"shape {text!r}: expected mode:T:B:H[:train], mode one of {MODES}")
        try:
            steps, batch, units = (int(p) for p in parts[1:])
        except ValueError:
            raise ValueError(f"shape {text!r}: T, B and H must be integers") from None
        if min(steps, batch, units) < 1:
            raise ValueError(f"shape {text!r}: T, B and H must be at least 1")
        return cls(parts[0], steps, batch, units, train)

    def __str__(self) -> str:
        kind = "training" if self.train else "no-grad"
        return f"{self.mode} ({self.steps}, {self.batch}, {self.units}) {kind}"


def build(side: str, out: Path = OUT) -> Path:
    """The library of ``side``: itself if it is a file, else the engine sources of the git
    revision (or of the working tree for ``work``) compiled into ``out/<name>/``."""
    if Path(side).is_file():
        return Path(side)
    sources: dict[str, bytes] = {}
    if side != "work":
        # The engine's C sources at that revision (engine.c and what it includes: kernel.inc,
        # and step.h from ABI 20 on; not the step node's C++).
        listed = subprocess.run(
            ["git", "-C", str(ROOT), "ls-tree", "--name-only", side, f"{NATIVE.as_posix()}/"],
            capture_output=True,
            text=True,
            check=False,
        )
        files = [Path(n).name for n in listed.stdout.split()]
        if listed.returncode != 0 or "engine.c" not in files:
            raise ValueError(f"{side}: not a .so file nor a revision with the engine's sources")
        for file in (f for f in files if f.endswith((".c", ".inc", ".h"))):
            shown = subprocess.run(
                ["git", "-C", str(ROOT), "show", f"{side}:{(NATIVE / file).as_posix()}"],
                capture_output=True,
                check=True,
            )
            sources[file] = shown.stdout
    folder = out / side.replace("/", "_")
    folder.mkdir(parents=True, exist_ok=True)
    for file, text in sources.items():
        (folder / file).write_bytes(text)
    source = folder / "engine.c" if sources else ROOT / NATIVE / "engine.c"
    cc = compiler()
    if cc is None:
        raise OSError("no C compiler to build the engine with (set CC)")
    library = folder / "engine.so"
    subprocess.run([cc, *FLAGS, "-o", str(library), str(source), *LINK], check=True)
    return library


@dataclass
class Result:
    shape: Shape
    base: float  # median seconds per call
    head: float
    ratio: float  # median of the pairs' head / base
    low: float  # quartiles of the pairs' ratios
    high: float
    same_bits: bool
    max_diff: float

    def line(self) -> str:
        bits = "same bits" if self.same_bits else f"max |head - base| {self.max_diff:.1e}"
        return (
            f"{self.shape}: base {self.base * 1e3:.3f} ms, head {self.head * 1e3:.3f} ms, "
            f"head / base {self.ratio:.3f} ({self.low:.3f}-{self.high:.3f}); {bits}"
        )


def _call(shape: Shape) -> tuple[Callable[[], object], Callable[[], object]]:
    """The timed call of ``shape``, and one that returns its outputs (and with ``train`` the
    parameters' gradients) as one flat tensor, to compare the builds."""
    import torch

    torch.manual_seed(0)
    layer = layer_of(RNNSpec(shape.mode, 1, shape.units, shape.units))
    x = torch.randn(shape.steps, shape.batch, shape.units)
    grad = torch.randn(shape.steps, shape.batch, shape.units)

    def call() -> list[torch.Tensor]:
        if not shape.train:
            with torch.no_grad():
                return [layer(x)[0]]
        out = layer(x)[0]
        (out * grad).sum().backward()  # type: ignore[no-untyped-call]
        made = [out.detach(), *(p.grad for p in layer.parameters() if p.grad is not None)]
        for p in layer.parameters():
            p.grad = None
        return made

    return call, lambda: torch.cat([t.reshape(-1) for t in call()])


def quartiles(values: Sequence[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return ordered[len(ordered) // 4], ordered[(3 * len(ordered)) // 4]


def compare(
    base: Path, head: Path, shapes: Sequence[Shape], pairs: int, block: float
) -> list[Result]:
    """Each shape timed with the two libraries swapped block by block in this process."""
    import torch

    from cudnn_rnn.engines import native_library

    loaded = {}
    saved = os.environ.get(native_library.LIBRARY_ENV)
    try:
        for name, path in (("base", base), ("head", head)):
            os.environ[native_library.LIBRARY_ENV] = str(path)
            loaded[name] = native_library._load()
    finally:
        if saved is None:
            os.environ.pop(native_library.LIBRARY_ENV, None)
        else:
            os.environ[native_library.LIBRARY_ENV] = saved
    state = native_library._library()
    if state.lib is None:
        raise OSError(f"the native engine does not run here: {state.reason}")
    own = state.lib
    results = []
    try:
        for shape in shapes:
            timed, checked = _call(shape)
            made = {}
            for name in ("base", "head"):
                state.lib = loaded[name]
                made[name] = checked()
            a, b = made["base"], made["head"]
            assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
            same = bool(torch.equal(a.view(torch.int32), b.view(torch.int32)))
            diff = float((a - b).abs().max()) if not same else 0.0
            start = time.perf_counter()
            timed()
            calls = max(1, int(block / max(time.perf_counter() - start, 1e-6)))
            times: dict[str, list[float]] = {"base": [], "head": []}
            for _ in range(pairs):
                for name in ("base", "head"):
                    state.lib = loaded[name]
                    timed()  # whatever the other build left in the caches settles
                    start = time.perf_counter()
                    for _ in range(calls):
                        timed()
                    times[name].append((time.perf_counter() - start) / calls)
            ratios = [h / b for b, h in zip(times["base"], times["head"])]
            low, high = quartiles(ratios)
            results.append(
                Result(shape, statistics.median(times["base"]), statistics.median(times["head"]),
                       statistics.median(ratios), low, high, same, diff)
            )  # fmt: skip
    finally:
        state.lib = own
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--base", required=True, help=".so path, git revision or 'work'")
    parser.add_argument("--head", default="work", help=".so path, git revision or 'work'")
    parser.add_argument("--shapes", nargs="+", required=True, metavar="MODE:T:B:H[:train]")
    parser.add_argument("--pairs", type=int, default=15, help="blocks of each build")
    parser.add_argument("--block", type=float, default=0.05, help="seconds per block")
    parser.add_argument("--threads", type=int, default=0, help="torch's threads (0: its own)")
    args = parser.parse_args(argv)
    try:
        if args.pairs < 1 or args.block <= 0 or args.threads < 0:
            raise ValueError("--pairs must be at least 1, --block above 0, --threads 0 or more")
        shapes = [Shape.parse(s) for s in args.shapes]
        base, head = build(args.base), build(args.head)
        import torch

        if args.threads:
            torch.set_num_threads(args.threads)
        threads = torch.get_num_threads()
        print(f"base {args.base} ({base}), head {args.head} ({head}), {threads} threads, "
              f"{args.pairs} pairs of {args.block} s blocks")  # fmt: skip
        for result in compare(base, head, shapes, args.pairs, args.block):
            print(result.line(), flush=True)
    except (ValueError, OSError, subprocess.CalledProcessError) as err:
        print(f"engine_ab: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
