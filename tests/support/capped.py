"""Python run in a fresh interpreter whose address space is capped a fixed headroom above what
its imports took: a reader that allocates what a hostile file claims fails there with
MemoryError instead of taking the test machine's memory (Linux: /proc and RLIMIT_AS)."""

from __future__ import annotations

import resource
import subprocess
import sys
import textwrap

from tests.support.paths import ROOT

GIB = 1 << 30


def cap_address_space(headroom: int = GIB) -> None:
    """Cap this process's address space at its current size plus ``headroom`` bytes."""
    with open("/proc/self/status") as f:
        size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (size + headroom, size + headroom))


def run_capped(
    imports: str, body: str, *, headroom: int = GIB, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``imports``, cap the address space ``headroom`` above what they took, then run
    ``body``, in a fresh interpreter started in the repository root; a run that does not end
    within ``timeout`` seconds fails the test instead of hanging it."""
    script = "\n".join(
        (
            textwrap.dedent(imports),
            "from tests.support.capped import cap_address_space",
            f"cap_address_space({headroom})",
            textwrap.dedent(body),
        )
    )
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=ROOT,
    )
