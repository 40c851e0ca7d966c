"""Which engine ran a call, seen on the engine objects the operator really calls, and forcing one.

The operator asks the rule table (:func:`cudnn_rnn.engines.engine_for`) for an engine on every
forward, backward and fake, then calls that object's ``forward`` or ``backward``. A spy on a
name nothing calls proves nothing (a patch of ``engines.select``, which the operator never
calls, once made three "different" engines the same one), so :func:`watch_engines` wraps the
``forward`` and ``backward`` of every engine object in the rule table, and :func:`force_engine`
replaces ``engines.engine_for`` itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from cudnn_rnn import engines
from cudnn_rnn.engines.base import Call, Engine

#: One engine entry point run: (engine name, "forward" or "backward").
Run = tuple[str, str]


def watch_engines(monkeypatch: pytest.MonkeyPatch) -> list[Run]:
    """A list that gets ``(engine, "forward" | "backward")`` for every engine entry point the
    operator runs from now on (the patch ends with the test)."""
    runs: list[Run] = []
    for engine in engines.RULES:
        for entry in ("forward", "backward"):
            monkeypatch.setattr(engine, entry, _recording(engine, entry, runs))
    return runs


def _recording(engine: Engine, entry: str, runs: list[Run]) -> Callable[..., Any]:
    real = getattr(engine, entry)

    def run(*args: Any, **kwargs: Any) -> Any:
        runs.append((engine.name, entry))
        return real(*args, **kwargs)

    return run


def force_engine(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Calls that need a gradient run on engine ``name`` from now on (calls without one keep the
    rule table's choice); the engine must support each such call, so a force cannot quietly
    fall back to another engine."""
    (engine,) = [e for e in engines.RULES if e.name == name]
    rule = engines.engine_for

    def chosen(call: Call) -> Engine:
        if not call.need_grad:
            return rule(call)
        if not engine.supports(call):
            raise AssertionError(f"engine {name!r} does not support {call}")
        return engine

    monkeypatch.setattr(engines, "engine_for", chosen)


def ran(runs: list[Run], entry: str | None = None) -> list[str]:
    """The engines in ``runs`` (of one entry point only, if given)."""
    return [name for name, e in runs if entry is None or e == entry]
