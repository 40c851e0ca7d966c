"""Permission checks that bite for root too.

Root passes every permission check (``CAP_DAC_OVERRIDE``, ``CAP_DAC_READ_SEARCH``), and
containers (CI's included) run tests as root, so a test of "no permission" skipped for root
would never run there. :data:`DROP_DAC` is Python source that a child process runs first: as
root it drops those two capabilities from its effective set (Linux), so 0o000 and 0o555 bite as
they do for everyone else; as another user it does nothing.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

DROP_DAC = """
import ctypes, os, sys
if os.geteuid() == 0:
    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
    class Data(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint32) for n in ("effective", "permitted", "inheritable")]
    libc = ctypes.CDLL(None, use_errno=True)
    header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3
    if libc.capget(ctypes.byref(header), data) != 0:
        sys.exit(f"capget: {os.strerror(ctypes.get_errno())}")
    data[0].effective &= ~((1 << 1) | (1 << 2))  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
    if libc.capset(ctypes.byref(header), data) != 0:
        sys.exit(f"capset: {os.strerror(ctypes.get_errno())}")
"""


def run_without_dac(script: str, *args: str, timeout: float = 300) -> str:
    """Runs ``script`` (dedented) in a fresh interpreter after :data:`DROP_DAC`; returns its
    standard output, failing the test with its error output if it exits non-zero."""
    run = subprocess.run(
        [sys.executable, "-c", DROP_DAC + textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout
