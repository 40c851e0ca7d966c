"""How long a benchmark runs each implementation, and the command line's options for it.

Standard library only (torch is imported by :func:`check_timing_arguments` alone, and only to
check ``--device``), so that the ``cudnn-rnn`` command builds its parser, and answers
``--help``, without importing torch. :mod:`cudnn_rnn.cli.bench` re-exports these.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

__all__ = ["WARMUP_CALLS", "Timing", "add_timing_arguments", "check_timing_arguments"]

#: Untimed calls each implementation makes at least, whatever the warm-up's seconds (the
#: runtimes' processes, :mod:`cudnn_rnn.cli.runtime_peer`, make as many).
WARMUP_CALLS = 2


@dataclass(frozen=True)
class Timing:
    """How long each implementation runs: see :func:`cudnn_rnn.cli.bench.time_alternating`."""

    repeats: int = 5
    block: float = 0.2
    warmup: float = 1.0

    def lighter(self) -> Timing:
        """At most 3 repeats of half blocks after half the warm-up (short calls)."""
        return Timing(min(self.repeats, 3), self.block / 2, self.warmup / 2)


def add_timing_arguments(parser: argparse.ArgumentParser) -> None:
    """``--device``, ``--repeats``, ``--block`` and ``--warmup`` (:class:`Timing`'s defaults);
    :func:`check_timing_arguments` checks their values."""
    defaults = Timing()
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: cpu)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=defaults.repeats,
        help=f"timed blocks per implementation (default: {defaults.repeats})",
    )
    parser.add_argument(
        "--block",
        type=float,
        default=defaults.block,
        help=f"seconds per timed block (default: {defaults.block})",
    )
    parser.add_argument(
        "--warmup",
        type=float,
        default=defaults.warmup,
        help=f"seconds of untimed calls per implementation, at least {WARMUP_CALLS} calls "
        f"(default: {defaults.warmup})",
    )


def check_timing_arguments(args: argparse.Namespace) -> None:
    """The checks argparse's types do not make; ValueError with one line saying what to do."""
    import torch

    if args.repeats < 1:
        raise ValueError(f"--repeats must be an integer >= 1, got {args.repeats}.")
    if not args.block > 0:  # also refuses nan
        raise ValueError(f"--block must be a number of seconds > 0, got {args.block}.")
    if not args.warmup >= 0:
        raise ValueError(f"--warmup must be a number of seconds >= 0, got {args.warmup}.")
    try:
        device = torch.device(args.device)
    except RuntimeError as err:
        raise ValueError(
            f"--device {args.device!r} is not a device; use cpu, cuda or cuda:N."
        ) from err
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"--device must be cpu, cuda or cuda:N, got {args.device!r}.")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {args.device}: CUDA is not available here; use --device cpu.")
