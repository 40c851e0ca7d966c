"""The wheel holds the library and the command, nothing of what stands beside it.

DESIGN.md: the benchmark suite (benchmarks/), the GPU check (tools/) and the demo with its text
(examples/) are run by make from the repository, never shipped. The wheel is built as
``pip wheel . --no-deps --no-build-isolation`` builds it, from a copy of what a fresh clone has
(so nothing left in the checkout's build/ folder can leak in), without compiling the native
engine or the cells' step node (optional extensions: their absence changes no file list but
the libraries').
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: What the build reads: the project files and the package's sources.
BUILD_INPUTS = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE")
#: Build products and caches a fresh clone does not have.
NOT_IN_A_CLONE = shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info", "*.pyc")
#: A module an earlier build left in build/lib*, gone from the sources since.
STALE = "removed_since.py"


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    tree = tmp_path_factory.mktemp("clone")
    for name in BUILD_INPUTS:
        shutil.copy2(ROOT / name, tree / name)
    shutil.copytree(ROOT / "src", tree / "src", ignore=NOT_IN_A_CLONE)
    # What an earlier build of another revision left (a module since removed): setup.py builds
    # from nothing, so it does not reach the wheel.
    stale_lib = tree / "build" / f"lib.{sysconfig.get_platform()}-{sys.implementation.cache_tag}"
    for lib in (stale_lib, tree / "build" / "lib"):
        (lib / "cudnn_rnn").mkdir(parents=True)
        (lib / "cudnn_rnn" / STALE).write_text("raise ImportError('stale')\n")
    out = tree / "dist"
    env = {**os.environ, "CC": "false", "CXX": "false", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    command = [sys.executable, "-m", "pip", "wheel", str(tree), "-w", str(out)]
    done = subprocess.run(
        [*command, "--no-deps", "--no-build-isolation", "--no-cache-dir", "-v"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # No compiler (CC=false): the build says so (on its stderr, which pip shows with -v, and
    # on the terminal where there is one), and still succeeds.
    assert "the native CPU engine could not be compiled" in done.stdout + done.stderr
    (wheel,) = out.glob("cudnn_rnn-*.whl")
    # One wheel for every Python version: the engine is a C library loaded with ctypes.
    assert wheel.name.split("-")[2:4] == ["py3", "none"], wheel.name
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        reason = archive.read("cudnn_rnn/_engine_not_built.txt").decode()
        node_reason = archive.read("cudnn_rnn/_step_node_not_built.txt").decode()
    assert "CompileError" in reason or "false" in reason, reason
    # torch is importable here (no build isolation), so the node was tried, and failed alike.
    assert "CompileError" in node_reason or "false" in node_reason, node_reason
    assert not [n for n in names if n.startswith("cudnn_rnn/_step_node-torch")]
    assert f"cudnn_rnn/{STALE}" not in names, "a stale build/ folder reached the wheel"
    return names


def test_the_wheel_holds_the_library_and_the_command(wheel_files: list[str]) -> None:
    tops = {name.split("/")[0] for name in wheel_files}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"cudnn_rnn"}
    sources = {
        path.relative_to(ROOT / "src").as_posix()
        for path in (ROOT / "src" / "cudnn_rnn").rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert sources <= set(wheel_files), sorted(sources - set(wheel_files))
    for name in ("cudnn_rnn/cli/__init__.py", "cudnn_rnn/cli/bench.py", "cudnn_rnn/py.typed"):
        assert name in wheel_files, name
    info = next(t for t in tops if t.endswith(".dist-info"))
    entry_points = f"{info}/entry_points.txt"
    assert entry_points in wheel_files


def test_the_wheel_holds_no_suite_gpu_check_demo_or_text(wheel_files: list[str]) -> None:
    absent = [
        "cudnn_rnn/demo.py",
        "cudnn_rnn/gpu_check.py",
        "cudnn_rnn/distributed.py",
        "cudnn_rnn/data/alice.txt",
        "cudnn_rnn/data/SOURCE.md",
    ]
    assert not set(absent) & set(wheel_files)
    beside = ("benchmarks/", "tools/", "examples/", "tests/")
    leaked = [
        name
        for name in wheel_files
        if name.startswith(beside)
        or "/data/" in name
        or (
            name.endswith((".txt", "suite.py", "gpu_check.py", "demo.py", "sanitize.py"))
            and not name.endswith(
                ("entry_points.txt", "top_level.txt", "_engine_not_built.txt", "_not_built.txt")
            )
        )
    ]
    assert not leaked, leaked
    # No C or C++ sources, no tests: the library, its typing marker and the build's notes only.
    assert not [n for n in wheel_files if n.endswith((".c", ".cpp", ".inc", ".h"))]


def test_the_wheel_carries_the_license(wheel_files: list[str]) -> None:
    info = next(n.split("/")[0] for n in wheel_files if n.split("/")[0].endswith(".dist-info"))
    assert any(n.startswith(f"{info}/") and n.endswith("LICENSE") for n in wheel_files)
    metadata = [n for n in wheel_files if n == f"{info}/METADATA"]
    assert metadata
    # The package's bench is the small timer of a user's model, not the suite.
    assert not any(name.endswith("profile_overhead.py") for name in wheel_files)
