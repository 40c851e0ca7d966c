"""dynamo's ``assume_constant_result`` mark, set without importing dynamo.

A few functions are run by dynamo while it traces, their result folded into the graph (whether
``torch.onnx.export`` is running: :mod:`cudnn_rnn.export`; the advice for a layer compiled
before it is built: :mod:`cudnn_rnn.unbuilt`). ``torch.compiler.assume_constant_result`` marks
them, but it imports ``torch._dynamo`` to do it: about 2 s of the 4 s a fresh process took to
import our layers, paid by every command-line run and every reader process, most of which never
compile anything. The mark is one attribute on the function, read by dynamo when it traces a
call to it (by then dynamo is loaded); :func:`constant_result` sets that attribute alone.
tests/test_constant_result.py checks that it is exactly what torch's decorator sets, so a torch
that marks functions another way fails that test rather than tracing through them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

__all__ = ["MARK", "constant_result"]

#: The attribute ``torch._dynamo.assume_constant_result`` sets (to True) on the function.
MARK = "_dynamo_marked_constant"

F = TypeVar("F", bound=Callable[..., object])


def constant_result(fn: F) -> F:
    """``torch.compiler.assume_constant_result(fn)`` without importing dynamo."""
    setattr(fn, MARK, True)
    return fn
