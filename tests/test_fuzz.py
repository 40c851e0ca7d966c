"""Seeded, bounded fuzz of every reader: corrupt and hostile files give values or typed errors.

Each format runs in its own process (``tests/support/fuzz_worker.py``) under an address-space
limit, so a reader that allocates from a file's claim fails the test instead of the machine. A
case passes when the read gives the original values exactly or raises the reader's own error
type with the target unchanged; the CLI must exit 0 or 2 with one stderr line naming the file.
The seeds are fixed: a failure reproduces with
``python -m tests.support.fuzz_worker FORMAT DIR SEED CASES``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: format -> (seed, random cases): about 15 s in all on two cores, the hostile files included.
PLAN = {"safetensors": (13, 1000), "tf1": (13, 1000), "onnx": (13, 600), "pt": (13, 300)}
#: No file: the opaque layout discovery on random buffers, against a naive reference (~2 s).
PLAN["discovery"] = (13, 300)
#: Keras 2 .h5: every read starts a reader process (~0.1 s), so few cases (~7 s in all).
PLAN["h5"] = (13, 24)


@pytest.mark.parametrize("fmt", sorted(PLAN))
def test_fuzz(fmt: str, tmp_path: Path) -> None:
    seed, cases = PLAN[fmt]
    cmd = [
        sys.executable,
        "-m",
        "tests.support.fuzz_worker",
        fmt,
        str(tmp_path),
        str(seed),
        str(cases),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, f"worker died ({proc.returncode}):\n{proc.stderr[-3000:]}"
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["cases"] >= 0.9 * cases  # truncation points that coincide count once
    bad = report["bad"]
    assert not bad, f"{len(bad)} of {report['cases']} cases failed:\n" + "\n".join(bad[:30])
    # Both kinds of outcome occur, so the mutations reach the readers' checks and past them.
    outcomes = report["outcomes"]
    assert sum(n for k, n in outcomes.items() if k not in ("ok", "exit 0")) > 0, outcomes
