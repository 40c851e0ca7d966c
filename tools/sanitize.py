"""Build the native engine with AddressSanitizer and UBSan and run its tests under them.

``make sanitize`` (or ``python tools/sanitize.py``) compiles ``src/cudnn_rnn/_native/engine.c``
with ``-fsanitize=address,undefined -fno-sanitize-recover=all`` into ``build/sanitize/``, then
runs pytest on the native engine's tests in a child process that preloads the ASan runtime
(Python itself is not instrumented) and loads that build instead of the package's
(``CUDNN_RNN_NATIVE_LIBRARY``). Any report (an out-of-bounds access, a use after free, undefined
behaviour such as a signed overflow or a misaligned load) ends the run with the sanitizer's
message and the exit status :data:`EXIT_CODE`; any other status is pytest's.

The full run then runs the readers' hostile-input tests (:data:`HOSTILE`) under the same
sanitizers, all but those measuring a memory bound (ASan's shadow memory would count).

``--quick`` runs the subset that CI runs on every ``make test``
(tests/engines/test_sanitize.py): the oracle grid at the vector instruction sets, strided
tensors, lengths at their limits, threads, NaN.
Leak checking is off: CPython and torch keep memory until exit by design.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src" / "cudnn_rnn" / "_native" / "engine.c"
OUT = ROOT / "build" / "sanitize"
#: -O0: the instrumented build of the engine's four instruction sets compiles in about 10 s
#: (-O1: about 45 s, the longest single step of CI's test run), and the quick run under it takes
#: as long as under -O1 (measured: 42 s either way); nothing is optimised away before ASan sees it.
FLAGS = [
    "-std=gnu11", "-O0", "-g", "-fPIC", "-shared", "-pthread", "-fno-omit-frame-pointer",
    "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
]  # fmt: skip

#: The exit status of a process a sanitizer stopped: what says "a sanitizer reported", whatever
#: its report's wording (which differs between versions and machines).
EXIT_CODE = 86

#: Every test of the native engine (``make sanitize``).
FULL = [
    "tests/engines/test_native.py",
    "tests/engines/test_native_boundary.py",
    "tests/engines/test_same_bits.py",
    "tests/engines/test_native_variants.py",
    "tests/nn/test_planned_step.py",
    "tests/test_layouts.py",
    "tests/test_ops_oracle.py",
]
#: The readers' hostile-input generators and attacks (``make sanitize`` runs them too: a reader
#: that hands the engine or a C library what a file claims would show here). Their memory
#: bounds are measured in child processes, where ASan's shadow memory would count: left out.
HOSTILE = [
    "tests/io/test_pickle_hostile.py",
    "tests/test_pickle_bounds.py",
    "tests/io/test_onnx_hostile.py",
    "tests/io/test_onnx_find_hostile.py",
    "tests/io/test_onnx_eval_bounds.py",
    "tests/io/tf1/test_hostile.py",
    "tests/test_checkpoint_hostile.py",
    "tests/test_json_bounds.py",
    "tests/test_fuzz.py",
]
HOSTILE_SKIPPED = "not memory and not amplification and not leave_memory and not holds_at_most"
HOSTILE_SKIPPED += " and not k_times and not linear"

#: What CI runs (about a minute on two cores).
QUICK = [
    "tests/engines/test_native_boundary.py",
    "tests/engines/test_native.py::test_every_isa_matches_oracle",
    "tests/engines/test_native.py::test_same_bits_every_call_every_thread_count_avx2_and_avx512",
    "tests/test_layouts.py::test_op_level",
    "tests/engines/test_native_variants.py::test_same_bits_on_every_thread_count",
    "tests/nn/test_planned_step.py::test_the_planned_step_gives_the_operators_bits",
    "tests/nn/test_planned_step.py::test_the_gradients_asked_for_are_the_operators_bits",
    "tests/engines/test_same_bits.py::test_the_backward_products_give_the_same_bits_packed_and_direct",
    "tests/engines/test_same_bits.py::test_the_backward_reads_r_in_place_with_the_packed_bits",
    "tests/test_operator.py::test_a_planned_call_of_one_layer_runs_the_native_record_with_the_checked_bits",
    "-k",
    "not base",
]


def compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")


def runtime(cc: str, name: str) -> str:
    """The path of the compiler's sanitizer runtime ``name`` (``libasan.so``)."""
    found = subprocess.run(
        [cc, f"-print-file-name={name}"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if not os.path.isabs(found) or not os.path.exists(found):
        raise FileNotFoundError(f"{cc} has no {name} (install the compiler's sanitizer runtime)")
    return found


def build(cc: str, out: Path = OUT) -> Path:
    """The sanitized engine in ``out``, compiled unless the one there was made by the same
    command from sources no newer than it (tests/engines/test_sanitize.py's two tests share one
    build: each takes about 10 s). It is compiled under another name and then renamed, so a
    run beside another never loads half a file."""
    out.mkdir(parents=True, exist_ok=True)
    target, stamp = out / "_engine_sanitized.so", out / "_engine_sanitized.cmd"

    def compile_to(path: Path) -> list[str]:
        return [cc, *FLAGS, "-o", str(path), str(SOURCE), "-ldl"]

    command = compile_to(target)
    sources = [p for p in SOURCE.parent.iterdir() if p.is_file()] + [Path(__file__)]
    newest = max(p.stat().st_mtime_ns for p in sources)
    if (
        target.exists()
        and stamp.exists()
        and stamp.read_text() == "\n".join(command)
        and target.stat().st_mtime_ns >= newest
    ):
        return target
    partial = out / f"_engine_sanitized.{os.getpid()}.so"
    try:
        subprocess.run(compile_to(partial), check=True)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    stamp.write_text("\n".join(command))
    return target


def environment(cc: str, library: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["LD_PRELOAD"] = runtime(cc, "libasan.so")
    # C++ libraries loaded later (onnx's checker) throw exceptions through ASan's __cxa_throw
    # interceptor, which finds no real __cxa_throw unless libstdc++ is loaded from the start: it
    # then stops the process with a CHECK failure of its own (seen with onnx 1.2x's checker).
    try:
        env["LD_PRELOAD"] += ":" + runtime(cc, "libstdc++.so.6")
    except FileNotFoundError:  # a compiler without it: C++ readers may trip ASan then
        pass
    # Python and torch keep memory to the end; torch mixes allocators: neither is our bug.
    env["ASAN_OPTIONS"] = (
        f"detect_leaks=0:halt_on_error=1:exitcode={EXIT_CODE}:alloc_dealloc_mismatch=0"
    )
    env["UBSAN_OPTIONS"] = f"halt_on_error=1:print_stacktrace=1:exitcode={EXIT_CODE}"
    env["CUDNN_RNN_NATIVE_LIBRARY"] = str(library)
    env.pop("CUDNN_RNN_NATIVE", None)
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the CI subset")
    parser.add_argument("pytest_args", nargs="*", help="more arguments for pytest")
    args = parser.parse_args(argv)
    cc = compiler()
    if cc is None:
        print("sanitize: no C compiler (gcc or cc): nothing to build", file=sys.stderr)
        return 2
    library = build(cc)
    runs = [QUICK] if args.quick else [FULL, [*HOSTILE, "-k", HOSTILE_SKIPPED]]
    for tests in runs:
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests]
        cmd += ["-p", "tests.support.sanitized", *args.pytest_args]
        print(f"sanitize: {library.relative_to(ROOT)} under ASan + UBSan: {' '.join(cmd[3:])}")
        code = subprocess.run(cmd, cwd=ROOT, env=environment(cc, library), check=False).returncode
        if code == EXIT_CODE:
            print(f"sanitize: a sanitizer reported an error (exit status {code})", file=sys.stderr)
        if code:
            return code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
