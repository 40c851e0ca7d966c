"""dynamo's constant-result mark without importing dynamo (cudnn_rnn.constant_result).

The mark must be the one torch's own decorator sets (else dynamo would trace through the
functions it must run: the ONNX export's check and the unbuilt layer's advice, whose behaviour
tests/test_export.py and tests/test_lazy_build.py check under compile and export), and
importing the package must not load dynamo (what the mark saves every fresh process).
"""

from __future__ import annotations

import subprocess
import sys

import torch

from cudnn_rnn import export, unbuilt
from cudnn_rnn.constant_result import MARK, constant_result


def test_the_mark_is_what_torchs_decorator_sets() -> None:
    def theirs() -> int:
        return 1

    def ours() -> int:
        return 1

    marked = torch.compiler.assume_constant_result(theirs)
    assert marked is theirs
    assert constant_result(ours) is ours
    assert vars(theirs) == vars(ours) == {MARK: True}


def test_the_functions_dynamo_runs_are_marked() -> None:
    for fn in (export._in_onnx_export, unbuilt.refuse_under_compile):
        assert getattr(fn, MARK) is True, fn.__name__


def test_importing_the_package_does_not_load_dynamo() -> None:
    code = (
        "import sys, cudnn_rnn, cudnn_rnn.layers, cudnn_rnn.nn, cudnn_rnn.cli.commands; "
        "loaded = sorted(m for m in sys.modules if m.startswith('torch._dynamo')); "
        "print(loaded[:3]); sys.exit(1 if loaded else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
