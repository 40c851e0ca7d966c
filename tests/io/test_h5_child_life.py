"""The Keras .h5 reader process bounds its own life: it dies with its caller, however the caller
dies (SIGKILL runs no cleanup), and its CPU time is limited, so that a file that makes HDF5 loop
cannot leave a process spinning forever."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import h5_hostile
from tests.support.paths import FIXTURES, ROOT
from tests.support.timing import HANG

pytest.importorskip("h5py")

from cudnn_rnn.io.keras import h5 as keras_h5
from cudnn_rnn.io.keras import h5_child as _keras_h5_child
from cudnn_rnn.io.keras import h5_file
from cudnn_rnn.io.keras.h5 import KerasH5Error

linux = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc; PR_SET_PDEATHSIG is Linux's"
)

#: A caller that reads a file which makes HDF5 loop, with a time limit far beyond the test's.
_CALLER = """
import sys
from cudnn_rnn.io.keras import h5 as keras_h5
keras_h5.read_layers(sys.argv[1], time_limit=float(sys.argv[2]))
"""
_CALLER_LIMIT = 300.0


def _heap_loop(tmp_path: Path) -> Path:
    data = bytearray((FIXTURES / "keras2" / "cudnn_weights.h5").read_bytes())
    h5_hostile.heap_loop(data)
    path = tmp_path / "loop.h5"
    path.write_bytes(bytes(data))
    return path


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (state first), None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text[text.rindex(")") + 2 :].split()


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, left to a PID 1 that does not reap, is dead)."""
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def _children(parent: int) -> Iterator[int]:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields is not None and int(fields[1]) == parent:
                yield int(entry)


def _cpu_limits(pid: int) -> tuple[str, str] | None:
    """(soft, hard) of ``Max cpu time`` in /proc/PID/limits."""
    try:
        lines = Path(f"/proc/{pid}/limits").read_text().splitlines()
    except (FileNotFoundError, ProcessLookupError):
        return None
    soft, hard = next(line for line in lines if line.startswith("Max cpu time")).split()[3:5]
    return soft, hard


def _reader_of(caller: subprocess.Popen[bytes], timeout: float, log: Path) -> int:
    """The pid of ``caller``'s reader process, once it has set its CPU limit."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert caller.poll() is None, log.read_text()
        for pid in _children(caller.pid):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except (FileNotFoundError, ProcessLookupError):
                continue
            limits = _cpu_limits(pid)
            if _keras_h5_child.__name__.encode() in cmdline and limits and limits[0] != "unlimited":
                return pid
        time.sleep(0.02)
    raise AssertionError(f"no reader process with a CPU limit under {caller.pid} in {timeout} s")


@linux
def test_the_reader_process_dies_with_a_killed_caller(tmp_path: Path) -> None:
    log = tmp_path / "caller.log"
    with log.open("wb") as stderr:
        caller = subprocess.Popen(
            [sys.executable, "-c", _CALLER, str(_heap_loop(tmp_path)), str(_CALLER_LIMIT)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    reader = None
    try:
        reader = _reader_of(caller, timeout=60, log=log)
        # RLIMIT_CPU, soft and hard, derived from the caller's time limit with a margin.
        soft = h5_file._cpu_limit(_CALLER_LIMIT)
        assert soft >= 2 * _CALLER_LIMIT
        assert _cpu_limits(reader) == (str(soft), str(soft + 5))
        time.sleep(0.3)  # HDF5 is looping now (or soon): the reader stays busy in C
        assert _alive(reader)
        caller.send_signal(signal.SIGKILL)  # no cleanup runs in the caller
        caller.wait(timeout=10)
        deadline = time.monotonic() + HANG  # it dies at once; a busy machine may lag
        while _alive(reader) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(reader), f"reader {reader} outlived its killed caller: {_stat(reader)}"
    finally:
        if caller.poll() is None:
            caller.kill()
            caller.wait()
        if reader is not None and _alive(reader):  # the failure above: leave nothing spinning
            os.kill(reader, signal.SIGKILL)


def _request(**changes: object) -> str:
    request = {
        "path": str(FIXTURES / "keras2" / "cudnn_weights.h5"),
        "data": False,
        "output_limit": 1 << 26,
        "memory_headroom": 1 << 30,
        "cpu_limit": 60,
        "parent": os.getpid(),
    }
    return json.dumps({**request, **changes})


def test_a_reader_process_whose_parent_is_gone_exits_at_once() -> None:
    """Its parent may die before the reader asks the kernel to kill it with its parent: the
    reader then has another parent, and exits before reading anything."""
    command = [sys.executable, "-m", _keras_h5_child.__name__]
    orphan = subprocess.run(
        [*command, _request(parent=os.getpid() + 1_000_000)], capture_output=True, cwd=ROOT
    )
    assert (orphan.returncode, orphan.stdout) == (_keras_h5_child.ORPHANED, b"")
    child = subprocess.run([*command, _request()], capture_output=True, cwd=ROOT, check=True)
    length = int.from_bytes(child.stdout[:8], "little")
    assert "nodes" in json.loads(child.stdout[8 : 8 + length])


@pytest.mark.skipif(not hasattr(signal, "SIGXCPU"), reason="RLIMIT_CPU is POSIX")
def test_a_reader_process_out_of_cpu_time_is_a_keras_h5_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(h5_file, "_cpu_limit", lambda limit: 1)
    with pytest.raises(
        KerasH5Error,
        match=r"reading it used more than 1 s of CPU time, so the reader process was stopped "
        r"\(a corrupt HDF5 file can make HDF5 loop forever\); if the file is sound but slow to "
        r"read, pass a larger time_limit\.",
    ):
        keras_h5.read_layers(_heap_loop(tmp_path), time_limit=60)
