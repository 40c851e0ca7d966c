"""What the ``cudnn-rnn`` command prints, and its own errors: shared by the parser's front
(:mod:`cudnn_rnn.cli`) and the commands (:mod:`cudnn_rnn.cli.commands`). Standard library only."""

from __future__ import annotations

import sys

from cudnn_rnn.errors import UsageError
from cudnn_rnn.io.files.escaping import escape

__all__ = ["_OptionError", "_OutputError", "end_progress", "progress", "say"]


class _OutputError(UsageError):
    """The output cannot be written: its line names the output, not the source."""


class _OptionError(UsageError):
    """An option's value is wrong: its line names the option, not the source."""


def say(line: str) -> None:
    """Print one line of output, escaped: nothing in it can drive the terminal or break it."""
    print(escape(line))


def progress(line: str) -> None:
    """Say on stderr what a long command is doing now, escaped; on a terminal each line
    replaces the last (a status line), elsewhere each is a line of its own, so a log shows them."""
    stream = sys.stderr
    if stream.isatty():
        stream.write("\r\033[K" + escape(f"cudnn-rnn: {line}"))
    else:
        stream.write(escape(f"cudnn-rnn: {line}") + "\n")
    stream.flush()


def end_progress() -> None:
    """Clear a status line left on the terminal (nothing elsewhere)."""
    if sys.stderr.isatty():
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()
