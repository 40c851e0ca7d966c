"""How the file wing shows, in its messages, a name or value that a file gave.

A file may name its tensors anything: an escape sequence that clears the terminal, a newline
that forges a line of its own, a bidi override that reorders what follows. Every message and
listing of the package shows such text through these helpers: :func:`escape` (what does not
print, written as Python writes it in a string literal), :func:`quote` (a value's ``repr``,
escaped and clipped), :func:`clip`, :func:`listed` and :func:`names` (a few of many, and how
many more), :func:`first_line` (an error's message, as one escaped line). Standard library only.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["clip", "escape", "first_line", "listed", "names", "quote"]

_MAX_QUOTED = 120  # characters of a name or value quoted in an error message


def clip(text: str, limit: int = 160) -> str:
    """``text`` cut to at most ``limit`` characters, ``...`` marking the cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def escape(text: str) -> str:
    """``text`` with every character that does not print written as an escape, as Python writes
    it in a string literal: control characters (``\\x1b``, ``\\n``, ``\\r``), Unicode format
    characters (the bidi overrides: ``\\u202e``), line and paragraph separators, and the rest
    ``str.isprintable`` refuses. What a file names can then neither drive the terminal (a
    title, a cleared screen, colours), nor start a line of its own, nor reorder what follows.
    Backslashes are left as they are, so escaping twice changes nothing.

    >>> escape("a\\nb\\x1b[2J\\u202e")
    'a\\\\nb\\\\x1b[2J\\\\u202e'
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def quote(value: object, limit: int | None = _MAX_QUOTED) -> str:
    """How every message and listing shows a name or value a file gave: ``repr(value)``
    (quoted, backslashes and quotes escaped), what does not print escaped (:func:`escape`: a
    string's ``repr`` already does it; an object's ``repr`` may not), cut after ``limit``
    characters (None: whole)."""
    text = escape(repr(value))
    return text if limit is None else clip(text, limit + 3)


def listed(items: Sequence[str], limit: int = 3) -> str:
    """The first ``limit`` of ``items`` (each escaped and clipped), and how many more there are."""
    more = len(items) - limit
    shown = ", ".join(clip(escape(i)) for i in items[:limit])
    return shown + (f" and {more} more" if more > 0 else "")


def names(items: Sequence[object], limit: int = 3) -> str:
    """:func:`listed` for names read from a file: each quoted (:func:`quote`), so that an empty
    name, a comma or a space in one cannot blur where it ends."""
    return listed([quote(i) for i in items], limit)


def first_line(err: BaseException) -> str:
    """The first line of an error's message, escaped (its class name if it has none)."""
    lines = str(err).strip().splitlines()
    return escape(lines[0].strip()) if lines else type(err).__name__
