"""``make gpu-check`` (tools/gpu_check.py) without a GPU: the clean no-CUDA exit, the report
writer, the pytest parsing, and each check's code run on the CPU (so the one run on a lent GPU
meets no typo)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from cudnn_rnn import operator
from tools import gpu_check
from tools.gpu_check import FAILED, PASSED, SKIPPED, PytestRun, Section

ROOT = Path(__file__).resolve().parents[1]
DOCS_GPU = ROOT / "docs" / "gpu.md"


def test_without_cuda_exits_0_and_leaves_docs_gpu_md_alone() -> None:
    before = DOCS_GPU.read_bytes()
    mtime = DOCS_GPU.stat().st_mtime_ns
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no CUDA, even on a machine with a GPU
    proc = subprocess.run(
        [sys.executable, "tools/gpu_check.py", "--out", "docs"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and gpu_check.NO_CUDA in lines[0], proc.stdout
    assert DOCS_GPU.read_bytes() == before
    assert DOCS_GPU.stat().st_mtime_ns == mtime


def test_main_without_cuda_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(gpu_check.torch.cuda, "is_available", lambda: False)
    assert gpu_check.main(["--out", str(tmp_path / "out")]) == 0
    assert gpu_check.NO_CUDA in capsys.readouterr().out
    assert not (tmp_path / "out").exists()


def test_docs_gpu_md_ends_with_the_notes() -> None:
    """The notes are written by the script: docs/gpu.md and NOTES must not drift apart, and its
    header names the script that writes it."""
    text = DOCS_GPU.read_text(encoding="utf-8")
    assert text.endswith(gpu_check.NOTES)
    assert gpu_check.HEADER in text.splitlines()[:3]
    assert "tools/gpu_check.py" in gpu_check.HEADER


def _fake_sections() -> list[Section]:
    ok = Section("opcheck", PASSED, "9 of 9 passed", gpu_check.table(["a", "b"], [["1", "x|y"]]))
    ok.seconds = 1.25
    bad = Section("torch.compile", summary="1 of 4 passed")
    bad.fail("CudnnGRU, inductor: RuntimeError: boom `x` (at foo.py:3)")
    skipped = Section("CUDA tests", SKIPPED, "no tests folder at `tests`")
    return [ok, bad, skipped]


def test_render_reports_status_environment_sections_and_notes(tmp_path: Path) -> None:
    env = {"device": "NVIDIA H100 80GB HBM3", "torch": "2.13.0+cu128", "cuDNN": "9.10.2 (91002)"}
    sections = _fake_sections()
    path = gpu_check.write_report(tmp_path / "docs", env, sections)
    assert path == tmp_path / "docs" / "gpu.md"
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# GPU status\n")
    status = next(line for line in text.splitlines() if line.startswith("**Status"))
    assert "FAILED" in status and "torch.compile (1 of 4 passed)" in status
    assert "Skipped: CUDA tests" in status
    assert "| device | NVIDIA H100 80GB HBM3 |" in text
    assert "## 1. opcheck: passed (1.2 s)" in text or "## 1. opcheck: passed (1.3 s)" in text
    assert "## 2. torch.compile: failed" in text
    assert "## 3. CUDA tests: skipped" in text
    assert "| 1 | x\\|y |" in text  # a | in a cell is escaped
    assert "- `CudnnGRU, inductor: RuntimeError: boom 'x' (at foo.py:3)`" in text
    assert text.endswith(gpu_check.NOTES.rstrip("\n") + "\n")
    assert text.index("## 1. opcheck") < text.index("## How the operator runs on CUDA")
    assert gpu_check.exit_code(sections) == 1
    assert gpu_check.exit_code([sections[0], sections[2]]) == 0
    assert gpu_check.status_line([sections[0]]) == "**Status: all 1 sections passed.**"


def test_run_section_reports_an_exception_and_goes_on() -> None:
    def boom(section: Section) -> None:
        section.body.append("partial")
        raise ValueError("shapes differ\nsecond line")

    failed = gpu_check.run_section("boom", boom)
    assert failed.status == FAILED and failed.body == ["partial"]
    assert failed.errors[0].startswith("ValueError: shapes differ (at test_gpu_check.py:")
    assert gpu_check.run_section("fine", lambda s: None).status == PASSED


JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="1" tests="4">
<testcase classname="tests.test_cuda" name="test_offsets_equal_cudnn_flat_buffer[gru-u-None]"/>
<testcase classname="tests.test_cuda" name="test_cuda_forward_matches_oracle_without_copy[gru]">
<failure message="UserWarning: RNN module weights are not part of single contiguous chunk&#10;x">
trace</failure></testcase>
<testcase classname="tests.converters.test_torch_nn" name="test_cuda_device_is_kept">
<skipped message="needs a CUDA device"/></testcase>
<testcase classname="tests.cells.test_cells_fused.TestX" name="test_y"/>
<testcase classname="" name="tests.test_keras"><skipped message="could not import 'keras'"/>
</testcase>
</testsuite></testsuites>
"""


def test_parse_junit_and_the_two_test_sections() -> None:
    cases = gpu_check.parse_junit(JUNIT)
    assert [(c.nodeid, c.outcome) for c in cases] == [
        ("tests/test_cuda.py::test_offsets_equal_cudnn_flat_buffer[gru-u-None]", PASSED),
        ("tests/test_cuda.py::test_cuda_forward_matches_oracle_without_copy[gru]", FAILED),
        ("tests/converters/test_torch_nn.py::test_cuda_device_is_kept", SKIPPED),
        ("tests/cells/test_cells_fused.py::TestX::test_y", PASSED),
        ("tests/test_keras.py", SKIPPED),
    ]
    assert (
        cases[1].message
        == "UserWarning: RNN module weights are not part of single contiguous chunk"
    )
    run = PytestRun(1, "1 failed, 2 passed, 2 skipped in 3.1s", cases, "tail")
    tests = Section("tests")
    gpu_check.check_tests(tests, run)
    assert tests.status == FAILED and "1 failed" in tests.errors[0]
    text = "\n".join(tests.body)
    assert "| `tests/test_cuda.py` | 1 | 1 | 0 | 0 |" in text
    assert "test_cuda_forward_matches_oracle_without_copy[gru]" in text
    assert "| `tests/test_keras.py` | could not import 'keras' |" in text
    layout = Section("layout")
    gpu_check.check_layout(layout, run)
    assert layout.status == FAILED and layout.summary == "1 of 2 passed"
    text = "\n".join(layout.body)
    assert "| our opaque layout's offsets = cuDNN's flat buffer | `gru-u-None` | passed |" in text
    good = PytestRun(0, "1 passed", [cases[0]], "")
    for check in (gpu_check.check_tests, gpu_check.check_layout):
        section = Section("x")
        check(section, good)
        assert section.status == PASSED, section.errors
    all_skipped = Section("x")
    gpu_check.check_tests(all_skipped, PytestRun(0, "1 skipped", [cases[2]], ""))
    assert all_skipped.status == FAILED


def test_run_pytest_collects_only_cuda_marked_tests(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    cuda: needs CUDA\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_fake.py").write_text(
        textwrap.dedent(
            """
            import pytest

            @pytest.mark.cuda
            def test_good():
                pass

            @pytest.mark.cuda
            def test_bad():
                assert 1 == 2, "one is not two"

            def test_unmarked():
                pass
            """
        )
    )
    run = gpu_check.run_pytest(tmp_path / "tests", timeout=120)
    assert run.returncode == 1
    assert "1 failed, 1 passed, 1 deselected" in run.summary
    assert {c.nodeid: c.outcome for c in run.cases} == {
        "tests/test_fake.py::test_good": PASSED,
        "tests/test_fake.py::test_bad": FAILED,
    }
    bad = next(c for c in run.cases if c.outcome == FAILED)
    assert "one is not two" in bad.message


def test_run_pytest_without_a_tests_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no tests folder"):
        gpu_check.run_pytest(tmp_path / "missing")


def test_environment_names_the_engines() -> None:
    env = gpu_check.environment("cpu")
    assert env["device"] == "cpu" and env["torch"]
    # On a CPU the native engine runs float32 calls (CUDA keeps torch's kernels and the loop).
    assert env["engines on this device"] == "no gradient: `native`; gradient: `native`"


def _fake_tests(root: Path) -> Path:
    """A repository with a pytest config and two cuda-marked tests (one in test_cuda.py)."""
    root.mkdir()
    (root / "pytest.ini").write_text("[pytest]\nmarkers =\n    cuda: needs CUDA\n")
    (root / "tests").mkdir()
    body = "import pytest\n\n\n@pytest.mark.cuda\n@pytest.mark.parametrize('n', [1, 2])\n"
    (root / "tests" / "test_cuda.py").write_text(body + "def test_offsets(n):\n    pass\n")
    return root / "tests"


def test_main_runs_every_section_on_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The whole run, on the CPU with tiny sizes (``--device cpu``): every section's code runs
    and passes, the report is written after each section and complete at the end."""
    monkeypatch.setattr(gpu_check, "COMPILE_BACKENDS", ("aot_eager",))
    tiny = (
        gpu_check.BenchShape("LSTM", "lstm", 4, 2, 6),
        gpu_check.BenchShape("GRU bi", "gru", 4, 2, 6, 2, True),
    )
    monkeypatch.setattr(gpu_check, "BENCH_SHAPES", tiny)
    monkeypatch.setattr(gpu_check, "DROPIN_SIZES", (2, 3, 4))
    gru_only = [case for case in gpu_check.opcheck_cases() if case[0] == "gru with lengths"]
    monkeypatch.setattr(gpu_check, "opcheck_cases", lambda: gru_only)
    written: list[list[str]] = []
    real_write = gpu_check.write_report

    def spy(out: Path, env: Any, sections: Any, pending: Any = ()) -> Path:
        written.append(list(pending))
        return real_write(out, env, sections, pending)

    monkeypatch.setattr(gpu_check, "write_report", spy)
    tests = _fake_tests(tmp_path / "repo")
    out = tmp_path / "out"
    code = gpu_check.main(["--device", "cpu", "--out", str(out), "--tests", str(tests)])
    text = (out / "gpu.md").read_text(encoding="utf-8")
    assert code == 0, text
    assert "**Status: all 6 sections passed.**" in text
    assert [len(p) for p in written] == [5, 4, 3, 2, 1, 0]
    assert "Result: 2 of 2 passed." in text  # the layout section: test_cuda.py's two cases
    assert "Result: 3 of 3 passed." in text  # opcheck: forward twice, backward once
    assert "| GRU bi | 4, 2, 6 | `native` / `native` |" in text
    assert "| CudnnGRU(2, 32, bidirectional), input 16 | aot_eager |" in text
    assert "training step" in text and "Largest output difference from torch.nn" in text
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("gpu-check: wrote ")


def test_an_interim_report_says_what_had_not_run() -> None:
    line = gpu_check.status_line([Section("a")], pending=["b", "c"])
    assert line.startswith("**Status: INCOMPLETE**") and "before: b, c" in line


def test_schema_args_names_a_missing_argument() -> None:
    assert operator.static_of  # the import registers the operators
    with pytest.raises(KeyError, match="no value for argument 'params'"):
        gpu_check.schema_args(torch.ops.cudnn_rnn.rnn.default, {})


def test_a_failing_case_fails_its_section_only(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("no kernel")

    monkeypatch.setattr(gpu_check, "bench_shape", broken)
    section = Section("bench")
    gpu_check.check_bench(section, device="cpu", shapes=gpu_check.BENCH_SHAPES[:1])
    assert section.status == FAILED
    assert section.errors[0].startswith("LSTM: RuntimeError: no kernel")
    assert "FAILED: RuntimeError: no kernel" in "\n".join(section.body)
