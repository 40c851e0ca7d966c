"""The advice for a layer called under ``torch.compile`` before it is built, as dynamo shows it.

A layer built from its first input (no ``input_size=``) cannot create its parameter while dynamo
traces. A ``RuntimeError`` raised where dynamo traces ends up below dynamo's own explanation,
in its "Developer debug context". Dynamo runs a function marked ``assume_constant_result``
while it traces (to fold its result in) and passes on a ``UserError`` it raises as it is,
whether ``fullgraph`` is set or not: the advice is then the error's whole message. (A
``UserError`` is a ``RuntimeError``.)
"""

from __future__ import annotations

from cudnn_rnn.constant_result import constant_result

__all__ = ["advice", "refuse_under_compile"]


def advice(cls: str) -> str:
    """What to do, for a layer of class ``cls``."""
    return (
        f"{cls}: the layer is not built yet, and torch.compile cannot create its parameter "
        "while tracing; call it once before compiling, call build(input_shape) or pass "
        "input_size= to the constructor."
    )


@constant_result
def refuse_under_compile(cls: str) -> None:
    """Raise :func:`advice` as the error's first line (see the module). Run while dynamo
    traces, so dynamo is loaded: its error is imported here, not with the package."""
    try:  # dynamo's error for a mistake in the user's program; a RuntimeError
        from torch._dynamo.exc import UserError, UserErrorType
    except ImportError:  # pragma: no cover - a torch without it
        raise RuntimeError(advice(cls)) from None
    raise UserError(UserErrorType.INVALID_INPUT, advice(cls))
