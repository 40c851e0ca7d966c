"""The native engine under AddressSanitizer and UBSan (tools/sanitize.py; ``make sanitize``).

CI runs the quick subset here (the oracle grid at the vector instruction sets, strided tensors,
lengths at their limits, threads, NaN); ``make sanitize`` runs every native test. First a check
that the sanitizers are live: an undersized output buffer handed to C past the boundary must be
reported by AddressSanitizer, from inside the engine. What the report calls it differs between
machines (a heap-buffer-overflow on one, an unknown-crash on an AMD one), so the test reads the
sanitizer's own exit status and the stack's frames, not its words.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.paths import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import sanitize

CC = sanitize.compiler()


def _runtime_or_skip() -> str:
    if CC is None:
        pytest.skip("no C compiler")
    try:
        return sanitize.runtime(CC, "libasan.so")
    except (FileNotFoundError, subprocess.CalledProcessError) as err:
        pytest.skip(str(err))


def test_the_sanitizers_catch_an_overflow() -> None:
    _runtime_or_skip()
    assert CC is not None
    library = sanitize.build(CC)  # the build the next test's run uses too
    code = textwrap.dedent(
        """
        import torch
        import os
        from cudnn_rnn.engines import native_library
        assert native_library.library_path() == os.environ[native_library.LIBRARY_ENV]
        units = 8
        gi, r = torch.zeros(units), torch.zeros(units, units)
        y = torch.zeros(units - 1)   # one element short: C writes past it
        args = native_library._ForwardArgs(
            mode=1, steps=1, batch=1, units=units, threads=1, gi=gi.data_ptr(), gi_st=units,
            gi_sb=units, bi=gi.data_ptr(), r=r.data_ptr(), h0=gi.data_ptr(), y=y.data_ptr(),
            y_st=units, y_sb=units, hn=torch.zeros(units).data_ptr(),
        )
        native_library._call("cr_forward", args)
        print("not caught")
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=sanitize.environment(CC, library),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "not caught" not in proc.stdout, proc.stdout
    # The sanitizer stopped it (not a Python error, not a plain crash), and its report's stack
    # names the engine: its sources where the report is symbolised, its library where it is not.
    assert proc.returncode == sanitize.EXIT_CODE, (proc.returncode, proc.stderr[-3000:])
    engine = re.compile("|".join(map(re.escape, ["engine.c", "kernel.inc", library.name])))
    assert engine.search(proc.stderr), proc.stderr[-3000:]


def test_the_native_tests_pass_under_the_sanitizers() -> None:
    _runtime_or_skip()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "sanitize.py"), "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert " passed" in proc.stdout and "error" not in proc.stdout.splitlines()[-1]


def test_a_build_is_reused_until_a_source_or_the_command_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if CC is None:
        pytest.skip("no C compiler")
    native = tmp_path / "native"
    shutil.copytree(sanitize.SOURCE.parent, native)
    monkeypatch.setattr(sanitize, "SOURCE", native / sanitize.SOURCE.name)
    monkeypatch.setattr(sanitize, "FLAGS", ["-std=gnu11", "-O0", "-fPIC", "-shared", "-pthread"])
    out = tmp_path / "out"

    def built() -> int:
        return sanitize.build(CC, out).stat().st_mtime_ns

    first = built()
    assert built() == first  # nothing changed: the same file
    later = first + 10**9
    os.utime(native / "kernel.inc", ns=(later, later))  # any source of the engine
    second = built()
    assert second != first
    monkeypatch.setattr(sanitize, "FLAGS", [*sanitize.FLAGS, "-DCHANGED"])
    assert built() != second
    assert sorted(p.name for p in out.iterdir()) == [
        "_engine_sanitized.cmd",
        "_engine_sanitized.so",
    ]
