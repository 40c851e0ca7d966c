"""The README's Python examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_docs import SHOWS_RESULT

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_examples_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "the README has no Python example"
    for block in blocks:
        # A block shows a result, and asserts it: one that only runs would pass however wrong
        # the result it shows.
        assert SHOWS_RESULT.search(block), block
        exec(compile(block, str(README), "exec"), {})


# -- the figures the README quotes, against the files they come from (issue 49) -------------------

DOCS = README.parent / "docs"


def _figure(pattern: str, text: str) -> re.Match[str]:
    match = re.search(pattern, " ".join(text.split()))  # lines joined: a figure may wrap
    assert match, f"the README no longer says {pattern!r}"
    return match


#: The cell rows the README quotes: the B 32 loops, forward and backward (issue 38's).
LSTM_CELLS = "LSTMCell B 32 H 256, forward + backward"
GRU_CELLS = "GRUCell B 32 H 256, forward + backward"


def test_the_drop_in_table_is_docs_benchmarks() -> None:
    """The README's torch.nn drop-in rows are docs/benchmarks.md's (ratio and target)."""
    readme, bench = README.read_text(), (DOCS / "benchmarks.md").read_text()
    measured = {
        row: re.search(rf"^\| {re.escape(row)} \| ([0-9.]+) \| ([0-9.]+) \| \*\*([0-9.]+)\*\* "
                       r"(?:\([0-9.]+-[0-9.]+\) )?\| <= ([0-9.]+) \|", bench, flags=re.M)
        for row in ("model training step", "model step peak memory (MiB)", LSTM_CELLS, GRU_CELLS)
    }  # fmt: skip
    assert all(measured.values()), measured
    ratio = {row: m[3] for row, m in measured.items() if m}
    target = {row: m[4] for row, m in measured.items() if m}
    step = _figure(r"\| a model's training step \([^|]*\) \| ([0-9.]+) \| ([0-9.]+) \|", readme)
    assert step.groups() == (ratio["model training step"], target["model training step"])
    memory = _figure(r"\| its peak memory \| ([0-9.]+) \| ([0-9.]+) \|", readme)
    want = (ratio["model step peak memory (MiB)"], target["model step peak memory (MiB)"])
    assert memory.groups() == want
    cells = _figure(r"\| `LSTMCell` / `GRUCell` [^|]* \| ([0-9.]+) / ([0-9.]+) \| ([0-9.]+) \|",
                    readme)  # fmt: skip
    assert cells.groups() == (ratio[LSTM_CELLS], ratio[GRU_CELLS], target[GRU_CELLS])
    # A step of the LSTMCell loop (50 steps in the table), ours and torch.nn's.
    loop = measured[LSTM_CELLS]
    assert loop
    per_step = _figure(r"a step of the `LSTMCell` loop takes ([0-9.]+) ms forward and backward, "
                       r"torch.nn's ([0-9.]+) ms", readme)  # fmt: skip
    assert per_step.groups() == (f"{float(loop[2]) / 50:.2f}", f"{float(loop[1]) / 50:.2f}")


def test_the_demo_figures_are_its_recorded_default_run() -> None:
    """What the README says the demo measures is what its default run printed
    (docs/demo-run.json, the run's summary), pair by pair."""
    import json

    readme = README.read_text()
    run = json.loads((DOCS / "demo-run.json").read_text())
    diffs = run["differences"]
    fused, cells, torch_nn = (
        "CudnnLSTM (trained, fused)",
        "MultiRNNCell (stepped in Python)",
        "torch.nn.LSTM (to_torch)",
    )
    said = _figure(
        r"measures ([0-9.]+e-[0-9]+) between the cells and the fused kernels, ([0-9.]+e-[0-9]+) "
        r"between the fused kernels and torch.nn.LSTM, with logits up to ([0-9.]+), against a "
        r"tolerance of ([0-9.]+e-[0-9]+)",
        readme,
    )
    recorded = (
        diffs[f"{fused} vs {cells}"],
        diffs[f"{fused} vs {torch_nn}"],
        run["logit_scale"],
        run["tolerance"],
    )
    # Each figure as the README rounds it: 2 significant digits (12.7: 3).
    assert [float(s) for s in said.groups()] == [float(f"{v:.2g}") for v in recorded[:2]] + [
        float(f"{recorded[2]:.3g}"),
        float(f"{recorded[3]:.2g}"),
    ]
    rtol = _figure(r"agrees to within ([0-9.e-]+) of the largest logit", readme)[1]
    assert float(rtol) == run["rtol"]
    assert run["agree"] and run["config"]["steps"] == run["steps_done"]


def test_the_gpu_record_is_docs_gpu() -> None:
    """The README's GPU record names the device docs/gpu.md's last run records."""
    readme, gpu = README.read_text(), (DOCS / "gpu.md").read_text()
    device = re.search(r"^\| device \| NVIDIA (\S+)", gpu, flags=re.M)
    assert device, "docs/gpu.md records no device"
    said = _figure(r"The GPU path has run on one GPU machine, an (\S+) \(its last record", readme)
    assert said[1] == device[1]
    assert "Status: all" in gpu and "passed" in gpu.split("\n", 6)[4]
