"""The one bounded pickle reader: every pickle the package reads, or hands to ``torch.load``, is
walked opcode by opcode (:func:`check`) before a byte of it is unpickled.

An opcode allow-list alone does not bound what unpickling costs: pickle's C unpickler grows its
memo to the largest index a ``PUT``/``BINPUT``/``LONG_BINPUT`` names (``LONG_BINPUT 2**26`` after
two opcodes asks for 1 GiB, ``2**30`` for 16 GiB), and a length prefix may claim more bytes than
the stream has. :func:`check` reads each opcode's argument itself (never allocating from what it
claims) and refuses, in a :class:`PickleError` naming the byte:

* a memo index above the number of opcodes before it (every pickler numbers its memo from 0,
  one index a stored object), so that the memo stays within 16 bytes an opcode;
* more than :data:`MAX_PICKLE_OPCODES` opcodes (bounded work: a few seconds of walking);
* ``MARK`` nesting deeper than :data:`MAX_PICKLE_NESTING` (a tree of 200 modules, the deepest
  :mod:`cudnn_rnn.formats.torchscript` walks, needs about one a level);
* a length or frame beyond the bytes that remain, a line longer than 64 KiB, a protocol above 5,
  a byte that is no opcode, a ``STOP`` missing, an opcode that pops a ``MARK`` never pushed;
* an opcode outside the caller's allow-list (``allowed``).

:class:`Unpickler` is pickle's C unpickler on bytes :func:`check` walked first, with no global
and no persistent id unless a subclass says which; every pickle the package unpickles itself
goes through it (TorchScript's ``data.pkl``; torch.save files' and plain pickles, by
:mod:`cudnn_rnn.formats.torch_pickle`), and the pickles ``torch.load(weights_only=True)`` still
reads (:func:`cudnn_rnn.formats.torch_file.read_state`) are walked by :func:`check` first
(:func:`ends` says where each of several pickles in a row ends). Standard library only, on
:mod:`cudnn_rnn.files`.

>>> import pickle
>>> check(pickle.dumps({"w": [1, 2]}, protocol=2)) > 0
True
>>> memo_bomb = b"\\x80\\x02]r\\x00\\x00\\x00\\x04."  # PROTO, EMPTY_LIST, LONG_BINPUT 2**26, STOP
>>> check(memo_bomb)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
cudnn_rnn.pickles.PickleError: the pickle at byte 3: stores memo index 67108864 (LONG_BINPUT)...
"""

from __future__ import annotations

import io
import pickle
import pickletools
from typing import Any, Final, NamedTuple

from cudnn_rnn.files import FormatError

__all__ = [
    "MAX_PICKLE_BYTES",
    "MAX_PICKLE_NESTING",
    "MAX_PICKLE_OPCODES",
    "PickleError",
    "Unpickler",
    "check",
    "ends",
]

#: The largest pickle read into memory (a module tree's or a state_dict's is a few KiB a module).
MAX_PICKLE_BYTES: Final = 64 << 20
#: The most opcodes walked in one stream (a state_dict takes about 40 a tensor).
MAX_PICKLE_OPCODES: Final = 1 << 22
#: The deepest MARK nesting.
MAX_PICKLE_NESTING: Final = 1000
_MAX_LINE = 1 << 16
_HIGHEST_PROTOCOL = 5


class PickleError(FormatError):
    """A pickle refused before it is unpickled: ``problem`` at byte ``offset`` of ``what``;
    ``opcode`` names an opcode outside the allow-list, ``short`` says the bytes ran out."""

    def __init__(
        self, what: str, problem: str, offset: int, opcode: str | None = None, short: bool = False
    ) -> None:
        self.what, self.problem, self.offset = what, problem, offset
        self.opcode, self.short = opcode, short
        super().__init__(f"{what} at byte {offset}: {problem}.")

    def __reduce__(self) -> tuple[type[PickleError], tuple[str, str, int, str | None, bool]]:
        return type(self), (self.what, self.problem, self.offset, self.opcode, self.short)


# What the walker does with an opcode's argument ...
_NONE, _FIXED, _PREFIXED, _LINE, _TWO_LINES = range(5)
# ... and what the opcode is to it.
_PLAIN, _PUT, _PROTO, _FRAME, _MARK, _POPS_MARK, _STOP = range(7)
_ROLES = {"PUT": _PUT, "BINPUT": _PUT, "LONG_BINPUT": _PUT, "PROTO": _PROTO, "FRAME": _FRAME}
_ROLES |= {"MARK": _MARK, "STOP": _STOP}
#: pickletools' length-prefixed argument kinds -> (bytes of the prefix, signed).
_PREFIXES = {
    pickletools.TAKEN_FROM_ARGUMENT1: (1, False),
    pickletools.TAKEN_FROM_ARGUMENT4: (4, True),
    pickletools.TAKEN_FROM_ARGUMENT4U: (4, False),
    pickletools.TAKEN_FROM_ARGUMENT8U: (8, False),
}


class _Op(NamedTuple):
    """An opcode as the walker sees it, from pickletools' table."""

    name: str
    arg: str  # its argument's name in pickletools ("" for none)
    kind: int  # _NONE, _FIXED, ...
    size: int  # a fixed argument's bytes, or a length prefix's
    signed: bool
    role: int  # _PLAIN, _PUT, ...


def _op(info: pickletools.OpcodeInfo) -> _Op:
    arg = info.arg
    kind, size, signed = _NONE, 0, False
    if arg is not None and arg.n >= 0:
        kind, size, signed = _FIXED, arg.n, arg.name == "int4"
    elif arg is not None and arg.n in _PREFIXES:
        kind, (size, signed) = _PREFIXED, _PREFIXES[arg.n]
    elif arg is not None:  # up to a newline
        kind = _TWO_LINES if arg.name == "stringnl_noescape_pair" else _LINE
    role = _ROLES.get(info.name, _PLAIN)
    if role == _PLAIN and pickletools.markobject in info.stack_before:
        role = _POPS_MARK
    return _Op(info.name, arg.name if arg else "", kind, size, signed, role)


#: Byte -> its opcode (None: no opcode).
_TABLE: list[_Op | None] = [None] * 256
for _info in pickletools.opcodes:
    _TABLE[ord(_info.code)] = _op(_info)


def check(
    data: bytes | bytearray,
    *,
    what: str = "the pickle",
    allowed: frozenset[str] | None = None,
    count: int = 1,
) -> int:
    """Walk the ``count`` pickles that ``data`` holds one after the other, refusing as the
    module says (:class:`PickleError`); where the last one's ``STOP`` ends. ``allowed``: the
    names of the opcodes that may occur (all when None)."""
    found = ends(data, what=what, allowed=allowed, count=count)
    return found[-1] if found else 0


def ends(
    data: bytes | bytearray,
    *,
    what: str = "the pickle",
    allowed: frozenset[str] | None = None,
    count: int = 1,
) -> list[int]:
    """Where each of the ``count`` pickles of ``data`` ends (after its ``STOP``), walked as
    :func:`check` walks them (a legacy torch.save file is five pickles in a row)."""
    pos, seen = 0, 0
    out: list[int] = []
    for _ in range(count):
        pos, seen = _walk(data, pos, seen, what, allowed)
        out.append(pos)
    return out


def _walk(
    data: bytes | bytearray, pos: int, seen: int, what: str, allowed: frozenset[str] | None
) -> tuple[int, int]:
    """One pickle from ``pos`` (``seen`` opcodes before it): (where it ends, opcodes seen).
    The loop is the hot path of every read: the common opcodes take a few comparisons."""
    end = len(data)
    marks = 0  # MARKs open
    while pos < end:
        at = pos
        op = _TABLE[data[pos]]
        if op is None:
            raise PickleError(what, f"has byte 0x{data[pos]:02x}, which is no pickle opcode", at)
        seen += 1
        if seen > MAX_PICKLE_OPCODES:
            raise PickleError(what, f"holds more than {MAX_PICKLE_OPCODES} opcodes", at)
        name, arg, kind, size, signed, role = op
        pos += 1
        value = 0
        if kind == _FIXED or kind == _PREFIXED:
            if pos + size > end:
                raise PickleError(what, f"ends inside a {name} argument", at, short=True)
            value = int.from_bytes(data[pos : pos + size], "little", signed=signed)
            pos += size
            if kind == _PREFIXED:
                if not 0 <= value <= end - pos:
                    raise _length(what, value, arg, end - pos, at)
                pos += value
        elif kind:
            value, pos = _lines(data, pos, op, what, at)
        if allowed is not None and name not in allowed:
            raise PickleError(what, f"uses the opcode {name}", at, opcode=name)
        if role == _PLAIN:
            continue
        if role == _MARK:
            marks += 1
            if marks > MAX_PICKLE_NESTING:
                raise PickleError(what, f"nests MARKs more than {MAX_PICKLE_NESTING} deep", at)
        elif role == _POPS_MARK:
            if not marks:
                raise PickleError(what, f"has a {name} with no MARK before it", at)
            marks -= 1
        elif role == _PUT and value >= seen:
            raise PickleError(
                what,
                f"stores memo index {value} ({name}) after only {seen - 1} opcode"
                f"{'' if seen == 2 else 's'}; an unpickler would allocate a memo of that many "
                "entries",
                at,
            )
        elif role == _PROTO and value > _HIGHEST_PROTOCOL:
            raise PickleError(what, f"is of protocol {value}; at most 5 is read", at)
        elif role == _FRAME and value > end - pos:
            raise PickleError(
                what, f"frames {value} bytes; only {end - pos} remain", at, short=True
            )
        elif role == _STOP:
            return pos, seen
    raise PickleError(what, "ends before its STOP opcode", pos, short=True)


def _length(what: str, value: int, arg: str, left: int, at: int) -> PickleError:
    if value < 0:
        return PickleError(what, f"has a negative length {value} in a {arg}", at)
    return PickleError(
        what, f"expected {value} bytes in a {arg}, but only {left} remain", at, short=True
    )


def _lines(data: bytes | bytearray, pos: int, op: _Op, what: str, at: int) -> tuple[int, int]:
    """(a PUT's index, else 0; where the next opcode starts) after a text argument: one line,
    or two (GLOBAL, INST), each at most 64 KiB."""
    end = len(data)
    line = b""
    for _ in range(2 if op.kind == _TWO_LINES else 1):
        newline = data.find(b"\n", pos, min(end, pos + _MAX_LINE + 1))
        if newline < 0:
            short = end - pos <= _MAX_LINE
            why = "ends inside a line" if short else f"has a line over {_MAX_LINE} bytes"
            raise PickleError(what, f"{why} (a {op.name} argument)", at, short=short)
        line, pos = bytes(data[pos:newline]), newline + 1
    if op.role != _PUT:
        return 0, pos
    try:
        return int(line), pos
    except ValueError:
        raise PickleError(what, f"has a {op.name} of {line[:20]!r}, not a number", at) from None


class Unpickler(pickle.Unpickler):
    """pickle's (C) unpickler on ``data``, walked by :func:`check` first (with ``allowed``,
    named ``what`` in messages): no global, no persistent id (a subclass overrides
    :meth:`find_class` and :meth:`persistent_load` to give the few it allows)."""

    def __init__(
        self, data: bytes | bytearray, *, what: str, allowed: frozenset[str] | None = None
    ) -> None:
        check(data, what=what, allowed=allowed)
        super().__init__(io.BytesIO(data))
        self.what = what

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{self.what}: the global {module}.{name} is not read")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError(f"{self.what}: persistent ids are not read")
