"""One operation reads each file once: a memo of what was computed from a file, for as long as
an operation runs (``cudnn_rnn.load``, ``find_rnns``, one command of ``cudnn-rnn``).

The steps of an operation ask for the same facts (the file's kind, a checkpoint's checked index,
its RNNs) without passing them down every call; :func:`once` answers each from the memo after
the first time. Outside :func:`one_operation` it computes every time, as before. Standard
library only: the bottom of the package.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import stat
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["once", "one_operation"]


#: The results already computed in this operation (see :func:`one_operation`), or None.
_MEMO: contextvars.ContextVar[dict[tuple[str, str, tuple[int, ...]], Any] | None] = (
    contextvars.ContextVar("cudnn_rnn_once", default=None)
)


@contextlib.contextmanager
def one_operation() -> Iterator[None]:
    """Within it, each file is sniffed, and its header or index parsed and its RNNs listed,
    once, however many steps ask (an operation: ``cudnn_rnn.load``, ``find_rnns``, one command
    of ``cudnn-rnn``). A result is kept for a file as it was (its size, modification time and
    inode): one changed meanwhile is read again. Nested operations share the outer one's."""
    token = _MEMO.set({}) if _MEMO.get() is None else None
    try:
        yield
    finally:
        if token is not None:
            _MEMO.reset(token)


def once(what: str, path: str, compute: Callable[[], Any]) -> Any:
    """``compute()``, or what it gave for ``path`` before in this operation."""
    memo = _MEMO.get()
    if memo is None:
        return compute()
    key = (what, path, _stamp(path))
    if key not in memo:
        memo[key] = compute()
    return memo[key]


def _stamp(path: str) -> tuple[int, ...]:
    """What tells a file's versions apart (a TF1 checkpoint's by its index); () if unreadable."""
    for candidate in (path, path + ".index"):
        try:
            st = os.stat(candidate)
        except (OSError, ValueError):
            continue
        if stat.S_ISREG(st.st_mode):
            return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)
    return ()
