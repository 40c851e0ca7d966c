"""The torch.nn drop-ins (``cudnn_rnn.nn``) against torch.nn, in ``make bench`` (issue 38).

* **A model before and after** :func:`cudnn_rnn.nn.replace_rnns`: ``Embedding(1000, 128) ->
  LSTM(128, 256, num_layers=2, bidirectional=True) -> GRU(512, 256) -> Linear(256, 10)``,
  batch-first, B 32, T 60, a training step (forward, cross-entropy, backward, SGD step); the
  two models hold the same weights, timed in alternating blocks in one process
  (:func:`cudnn_rnn.cli.bench.time_alternating`); and the growth of the peak resident set over the
  second training step, each in a fresh process (as the suite's memory probes).
* **Cells stepped in a Python loop** (issue 48): ``LSTMCell``, ``GRUCell`` and ``RNNCell`` over
  50 steps (the states carried), at B 32 with 256 units (input = hidden) and at B 1 with 128
  (greedy decoding), each forward (``torch.no_grad()``) and forward + backward (a loss on each
  step's output). Each row is timed in alternating blocks, ours and torch.nn's, in one process
  (:func:`cudnn_rnn.cli.bench.time_alternating`), ``runs`` times (3 unless told): the row's
  ratio is the median of the runs' ratios, and the lowest and highest say the noise.

Targets: the model's step at most 0.80 of torch.nn's with peak memory at most torch.nn's (issue
38); each cell's forward at most 0.80 of torch.nn's and forward + backward at most 0.90 (issue
48; issue 38's 0.90 for the loops at B 32 is the second).
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn as tnn

import cudnn_rnn.nn as cnn
from cudnn_rnn.cli.bench import Timing, in_fresh_process, time_alternating

OURS, TORCH_NN = "ours", "torch.nn"
MODULE = "benchmarks.dropin"


@dataclass(frozen=True)
class Sizes:
    """The model's and the cells' sizes (the issue's; ``--quick`` makes them tiny)."""

    vocab: int = 1000
    embed: int = 128
    units: int = 256
    batch: int = 32
    steps: int = 60
    cell_units: int = 256
    cell_steps: int = 50
    #: the latency-bound rows: B 1 at this many units
    small_cell_units: int = 128


QUICK = Sizes(
    vocab=20, embed=4, units=6, batch=2, steps=5, cell_units=6, cell_steps=4, small_cell_units=4
)

#: The cells' rows: name, ours, torch.nn's.
CELLS = (
    ("LSTMCell", cnn.LSTMCell, tnn.LSTMCell),
    ("GRUCell", cnn.GRUCell, tnn.GRUCell),
    ("RNNCell", cnn.RNNCell, tnn.RNNCell),
)
#: Each cell row's target, ours / torch.nn (issue 48).
CELL_TARGETS = {"forward": 0.80, "forward + backward": 0.90}


class Model(tnn.Module):
    """The issue's model: Embedding -> 2-layer bidirectional LSTM -> GRU -> Linear."""

    def __init__(self, s: Sizes) -> None:
        super().__init__()
        self.embed = tnn.Embedding(s.vocab, s.embed)
        self.lstm = tnn.LSTM(s.embed, s.units, num_layers=2, bidirectional=True, batch_first=True)
        self.gru = tnn.GRU(2 * s.units, s.units, batch_first=True)
        self.head = tnn.Linear(s.units, 10)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.gru(self.lstm(self.embed(tokens))[0])[0])  # type: ignore[no-any-return]


def models(s: Sizes) -> dict[str, tnn.Module]:
    """torch.nn's model and the same weights after ``replace_rnns``."""
    torch.manual_seed(0)
    theirs = Model(s)
    ours = cnn.replace_rnns(Model(s))
    ours.load_state_dict(theirs.state_dict())
    return {OURS: ours, TORCH_NN: theirs}


def training_step(model: tnn.Module, s: Sizes) -> Callable[[], None]:
    """One SGD step of the model on a fixed batch."""
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, s.vocab, (s.batch, s.steps), generator=g)
    target = torch.randint(0, 10, (s.batch * s.steps,), generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss = tnn.functional.cross_entropy(model(tokens).reshape(-1, 10), target)
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()

    return step


def cell_loop(
    cell: tnn.Module, steps: int, batch: int, units: int, lstm: bool, train: bool = True
) -> Callable[[], None]:
    """The cell over ``steps`` steps in Python (input and hidden of ``units``); with ``train``
    a loss on each step's output and the backward pass, else under ``torch.no_grad()``."""
    g = torch.Generator().manual_seed(2)
    xs = torch.randn(steps, batch, units, generator=g)
    zeros = torch.zeros(batch, units)

    def run() -> None:
        state: Any = (zeros, zeros) if lstm else zeros
        if not train:
            with torch.no_grad():
                for x in xs:
                    state = cell(x, state)
            return
        loss = torch.zeros(())
        for x in xs:
            state = cell(x, state)
            loss = loss + (state[0] if lstm else state).square().mean()
        loss.backward()  # type: ignore[no-untyped-call]
        for p in cell.parameters():
            p.grad = None

    return run


def cell_rows(s: Sizes) -> list[tuple[str, str, int, int, bool]]:
    """The cells' rows: ``(label, cell name, batch, units, train)``."""
    rows = []
    for name, _, _ in CELLS:
        for batch, units in ((s.batch, s.cell_units), (1, s.small_cell_units)):
            for train in (False, True):
                kind = "forward + backward" if train else "forward"
                rows.append((f"{name} B {batch} H {units}, {kind}", name, batch, units, train))
    return rows


@dataclass
class Result:
    """The section's figures: seconds per call per implementation, peak-memory growth in bytes
    (None where the OS cannot tell), and the notes."""

    sizes: dict[str, int]
    model: dict[str, float] = field(default_factory=dict)
    memory: dict[str, int] = field(default_factory=dict)
    #: per cell row: the median seconds per call of each implementation over the runs, and
    #: ``ratios``' median, lowest and highest (``ratio``, ``low``, ``high``)
    cells: dict[str, dict[str, float]] = field(default_factory=dict)
    #: per cell row: each run's ratio, ours / torch.nn
    cell_ratios: dict[str, list[float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _memory_probe(fields: dict[str, int], impl: str) -> int:
    """Bytes the peak resident set grows by over the second training step (fresh process)."""
    s = Sizes(**fields)
    step = training_step(models(s)[impl], s)
    step()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak back to the current resident set
    before = _peak_kib()
    step()
    return (_peak_kib() - before) * 1024


def _peak_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise OSError("no VmHWM in /proc/self/status")


def run(
    sizes: Sizes,
    timing: Timing,
    *,
    memory: bool = True,
    runs: int = 3,
    log: Callable[[str], None] = print,
) -> Result:
    """Measure the section (see the module docstring); ``runs``: of each cell row."""
    result = Result(asdict(sizes))
    pair = models(sizes)
    steps = {name: training_step(m, sizes) for name, m in pair.items()}
    result.model = time_alternating(
        steps, repeats=timing.repeats, block=timing.block, warmup=timing.warmup
    )
    log(f"    drop-in model step ours/torch.nn {result.model[OURS] / result.model[TORCH_NN]:.2f}")
    if memory and os.path.exists("/proc/self/clear_refs"):
        env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="0")
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        for impl in (OURS, TORCH_NN):
            out = in_fresh_process(
                MODULE, "_memory_probe", [asdict(sizes), impl], timeout=600, env=env, path=[root]
            )
            result.memory[impl] = int(out)
    classes = {name: (ours_cls, theirs_cls) for name, ours_cls, theirs_cls in CELLS}
    for label, name, batch, units, train in cell_rows(sizes):
        ours_cls, theirs_cls = classes[name]
        torch.manual_seed(0)
        theirs = theirs_cls(units, units)
        ours = ours_cls(units, units)
        ours.load_state_dict(theirs.state_dict())
        lstm = name == "LSTMCell"
        loops = {
            OURS: cell_loop(ours, sizes.cell_steps, batch, units, lstm, train),
            TORCH_NN: cell_loop(theirs, sizes.cell_steps, batch, units, lstm, train),
        }
        times = [
            time_alternating(loops, repeats=timing.repeats, block=timing.block,
                             warmup=timing.warmup if i == 0 else 0.0)
            for i in range(max(1, runs))
        ]  # fmt: skip
        ratios = [t[OURS] / t[TORCH_NN] for t in times]
        result.cell_ratios[label] = ratios
        result.cells[label] = {
            OURS: statistics.median(t[OURS] for t in times),
            TORCH_NN: statistics.median(t[TORCH_NN] for t in times),
            "ratio": statistics.median(ratios), "low": min(ratios), "high": max(ratios),
        }  # fmt: skip
        log(f"    drop-in {label} ours/torch.nn {statistics.median(ratios):.2f}")
    return result


def _met(value: float, target: float) -> str:
    return "yes" if value <= target else "**no**"


def report(result: Result) -> list[str]:
    """The section of docs/benchmarks.md."""
    s = Sizes(**result.sizes)
    model, cells = result.model, result.cells
    ratio = model[OURS] / model[TORCH_NN]
    lines = [
        "## torch.nn drop-ins (`cudnn_rnn.nn`)",
        "",
        f"A torch.nn model before and after `cudnn_rnn.nn.replace_rnns`: Embedding({s.vocab}, "
        f"{s.embed}) -> LSTM({s.embed}, {s.units}, num_layers=2, bidirectional=True) -> "
        f"GRU({2 * s.units}, {s.units}) -> Linear({s.units}, 10), batch-first, B {s.batch}, "
        f"T {s.steps}, one SGD training step (benchmarks/dropin.py). Cells: `LSTMCell`, "
        f"`GRUCell` and `RNNCell` (input = hidden) stepped {s.cell_steps} times in a Python "
        "loop, forward under `no_grad` or forward and backward; each cell row's ratio is the "
        "median of its runs' (alternating blocks in one process), with the lowest and highest "
        "run in brackets (the noise).",
        "",
        "| | torch.nn ms | ours ms | ours / torch.nn | target | met |",
        "|---|---|---|---|---|---|",
        f"| model training step | {model[TORCH_NN] * 1e3:.1f} | {model[OURS] * 1e3:.1f} | "
        f"**{ratio:.2f}** | <= 0.80 | {_met(ratio, 0.80)} |",
    ]
    if result.memory:
        mem = result.memory[OURS] / max(result.memory[TORCH_NN], 1)
        lines.append(
            f"| model step peak memory (MiB) | {result.memory[TORCH_NN] / 2**20:.1f} | "
            f"{result.memory[OURS] / 2**20:.1f} | **{mem:.2f}** | <= 1.00 | {_met(mem, 1.0)} |"
        )
    for label, t in cells.items():
        target = CELL_TARGETS[label.rsplit(", ", 1)[1]]
        lines.append(
            f"| {label} | {t[TORCH_NN] * 1e3:.2f} | {t[OURS] * 1e3:.2f} | **{t['ratio']:.2f}** "
            f"({t['low']:.2f}-{t['high']:.2f}) | <= {target:.2f} | {_met(t['ratio'], target)} |"
        )
    return lines + [f"- {n}" for n in result.notes]
