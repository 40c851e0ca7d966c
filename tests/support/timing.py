"""Time in tests, without depending on the machine's speed.

CI runs on busy 2-core machines, Intel or AMD, so no test asserts that something is fast. Some
guard that a hostile input cannot make a reader hang or blow up (work quadratic in what a file
claims, a loop): such a regression costs minutes, never ends, or grows faster than its input,
while the sound work takes a second or two. They measure so that a busy machine cannot pass for
a regression:

* in CPU time (:func:`cpu_seconds`): this process's own, which the load of other processes does
  not inflate as it does wall-clock time (2-3x seen at a load of 7 on two cores);
* against :data:`HANG`, far above the slowest sound run seen on a loaded machine and far below
  what the guarded regression costs; or as a ratio to the same work on a smaller or benign
  input, measured in the same process, where the regression is milder (the speed cancels).

Code whose own logic reads a clock is tested with :class:`FakeClock` instead.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: Seconds that one sound operation of these tests never comes near (at most 2.6 s of wall-clock
#: time seen, on a loaded 2-core machine), and a hang or a blow-up in a hostile file's claims
#: exceeds (minutes or forever).
HANG = 60.0


def cpu_seconds(run: Callable[[], T], repeats: int = 1) -> tuple[float, T]:
    """The least CPU time of this process (user and system, every thread) over ``repeats``
    calls of ``run``, and what the last call returned."""
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.process_time()
        result = run()
        best = min(best, time.process_time() - start)
    return best, result  # type: ignore[return-value]


def child_cpu_seconds(run: Callable[[], T]) -> tuple[float, T]:
    """The CPU time (user and system) of the child processes ``run`` starts and waits for, and
    what it returned: a subprocess's own work, which neither the machine's load nor the time
    it waits to be scheduled inflates."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = run()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    spent = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return spent, result


class FakeClock:
    """A clock that moves only when told: stands in for the ``time`` module of the code under
    test (``monkeypatch.setattr(module, "time", clock)``), and the functions it times call
    :meth:`sleep` to take exactly that long."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
