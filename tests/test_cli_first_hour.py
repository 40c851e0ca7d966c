"""The command's first hour (issue 40 item 4): --version, a fast --help that imports no torch,
info, inspect --json, shell completion, progress on bench, Ctrl-C and the exit statuses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import cudnn_rnn
from cudnn_rnn import cli
from cudnn_rnn.cli import commands as _commands
from cudnn_rnn.cli import main


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "import sys; from cudnn_rnn.cli import main; sys.exit(main())",
         *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_help_and_version_import_no_torch() -> None:
    """What --help costs is the parser's: torch (seconds to import) is not imported."""
    probe = (
        "import sys\nfrom cudnn_rnn.cli import main\n"
        "for argv in (['--help'], ['convert', '--help'], ['--version']):\n"
        "    try:\n        main(argv)\n    except SystemExit as e:\n        assert e.code == 0\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "False"
    assert f"cudnn-rnn {cudnn_rnn.__version__}" in done.stdout


def test_info_says_which_engine_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["cpu_engine"] == cudnn_rnn.cpu_engine()
    assert info["threads"] == torch.get_num_threads()
    assert info["versions"]["torch"] == torch.__version__
    assert main(["info"]) == 0
    assert "CPU engine: " + cudnn_rnn.cpu_engine() in capsys.readouterr().out


def test_inspect_json_has_one_object_per_rnn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = {
        **{f"enc.{k}": v for k, v in torch.nn.LSTM(3, 4, bidirectional=True).state_dict().items()},
        **{f"dec.{k}": v for k, v in torch.nn.GRU(8, 5).state_dict().items()},
    }
    torch.save(state, tmp_path / "m.pt")
    assert main(["inspect", "--json", str(tmp_path / "m.pt")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["format"] == "torch" and len(doc["tensors"]) == len(state)
    found = cudnn_rnn.find_rnns(tmp_path / "m.pt")
    assert [r["name"] for r in doc["rnns"]] == [f.name for f in found] == ["enc", "dec"]
    first = doc["rnns"][0]
    assert (first["mode"], first["num_units"], first["input_size"], first["direction"]) == (
        "lstm", 4, 3, "bidirectional",
    )  # fmt: skip
    assert first["computable"] is True and first["reasons"] == []


def test_completion_scripts_name_the_commands() -> None:
    pytest.importorskip("shtab")
    for shell in ("bash", "zsh"):
        done = _run("completion", shell)
        assert done.returncode == 0, done.stderr
        for command in ("inspect", "convert", "bench", "info"):
            assert command in done.stdout


def test_ctrl_c_exits_130_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(args: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setitem(_commands.COMMANDS, "info", interrupted)
    assert main(["info"]) == 130
    assert capsys.readouterr().err == "cudnn-rnn: interrupted\n"


def test_an_internal_error_exits_1_with_a_short_report(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(args: Any) -> None:
        raise KeyError("a bug")

    monkeypatch.setitem(_commands.COMMANDS, "info", broken)
    assert main(["info"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("cudnn-rnn: internal error: KeyError: ")
    assert "please report it" in err and "Traceback" not in err
    monkeypatch.setenv(cli.TRACEBACK_ENV, "1")
    assert main(["info"]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "junk.bin").write_bytes(b"\x00" * 64)
    assert main(["inspect", str(tmp_path / "junk.bin")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_bench_says_what_it_is_doing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch.save(torch.nn.GRU(3, 4).state_dict(), tmp_path / "g.pt")
    argv = ["bench", str(tmp_path / "g.pt"), "--steps", "3", "--batch", "2", "--no-peers",
            "--repeats", "1", "--block", "0.01", "--warmup", "0"]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "cudnn-rnn: timing inference: 2 implementations, about" in err
