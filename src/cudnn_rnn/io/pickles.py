"""The one bounded pickle reader: every pickle the package reads, or hands to ``torch.load``, is
walked opcode by opcode (:func:`check`) before a byte of it is unpickled.

An opcode allow-list alone does not bound what unpickling costs: pickle's C unpickler grows its
memo to the largest index a ``PUT``/``BINPUT``/``LONG_BINPUT`` names (``LONG_BINPUT 2**26`` after
two opcodes asks for 1 GiB, ``2**30`` for 16 GiB), a length prefix may claim more bytes than
the stream has, and a few bytes an opcode build objects of any depth (``TUPLE1`` needs no
``MARK``: a dict key a million tuples deep is a 1 MB pickle, and CPython overflows its C stack
hashing it, tuple hashing having no recursion guard). :func:`check` reads each opcode's
argument itself (never allocating from what it claims), runs the unpickler's stack with the
depth of each object in place of the object (every object a new node, one level above the
deepest item it is made of; an object memoized and filled later, by ``APPEND``, ``SETITEMS``,
``ADDITEMS`` or ``BUILD``, followed by identity and raised to one level above its deepest
item), and refuses, in a :class:`PickleError` naming the byte:

* a memo index above the number of opcodes before it (every pickler numbers its memo from 0,
  one index a stored object), so that the memo stays within 16 bytes an opcode; a memo index
  read that was never stored, or a negative one;
* more than :data:`MAX_PICKLE_OPCODES` opcodes (bounded work: the walk is linear, about a
  microsecond an opcode, a few seconds at most);
* an object nested deeper than :data:`MAX_PICKLE_DEPTH` (containers of every kind: tuples,
  lists, dicts, sets, frozensets, objects made by ``REDUCE``, ``NEWOBJ``, ``INST``, ``OBJ``,
  given state by ``BUILD``, a call of a call, a persistent id), and ``MARK`` nesting as deep.
  Tuples and frozensets, which nothing fills later, so have their exact depth: hashing and
  comparing them recurses at most that deep. A list or dict filled after it was put into
  another does not deepen that one, so whatever walks unpickled data bounds its own depth or
  loops (the readers do, and show values by :func:`shown`). Python's own pickler recurses at
  least once a level, so what it writes under its default recursion limit is within the
  bound; a TorchScript module tree of 200 modules (the deepest
  :mod:`cudnn_rnn.io.torch.torchscript` walks) needs about 410;
* a length or frame beyond the bytes that remain, a line longer than 64 KiB, a protocol above 5,
  a byte that is no opcode, a ``STOP`` missing, an opcode that pops a ``MARK`` never pushed or
  more items than the stack holds;
* an opcode outside the caller's allow-list (``allowed``).

:class:`Unpickler` is pickle's C unpickler on bytes :func:`check` walked first, with no global
and no persistent id unless a subclass says which; every pickle the package unpickles itself
goes through it (TorchScript's ``data.pkl``; torch.save files' and plain pickles, by
:mod:`cudnn_rnn.io.torch.pickled`), and the pickles ``torch.load(weights_only=True)`` still
reads (:func:`cudnn_rnn.io.torch.file.read_state`) are walked by :func:`check` first
(:func:`ends` says where each of several pickles in a row ends). What a reader rebuilds of the
globals it honours is charged to one :class:`Budget` a read, a multiple of the pickles' bytes
plus a constant. Standard library only, on :mod:`cudnn_rnn.io.files`.

>>> import pickle
>>> check(pickle.dumps({"w": [1, 2]}, protocol=2)) > 0
True
>>> memo_bomb = b"\\x80\\x02]r\\x00\\x00\\x00\\x04."  # PROTO, EMPTY_LIST, LONG_BINPUT 2**26, STOP
>>> check(memo_bomb)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
cudnn_rnn.io.pickles.PickleError: the pickle at byte 3: stores memo index 67108864 (LONG_BINPUT)...
"""

from __future__ import annotations

import functools
import io
import pickle
import pickletools
import struct
from collections.abc import Callable, Sequence
from typing import Any, Final, NamedTuple

from cudnn_rnn.io.files.escaping import clip, escape
from cudnn_rnn.io.files.opening import FormatError

__all__ = [
    "MAX_PICKLE_BYTES",
    "MAX_PICKLE_DEPTH",
    "MAX_PICKLE_NESTING",
    "MAX_PICKLE_OPCODES",
    "REBUILT_GRACE",
    "REBUILT_PER_BYTE",
    "Budget",
    "PickleError",
    "Unpickler",
    "check",
    "ends",
    "shown",
]

#: The largest pickle read into memory (a module tree's or a state_dict's is a few KiB a module).
MAX_PICKLE_BYTES: Final = 64 << 20
#: The most opcodes walked in one stream (a state_dict takes about 40 a tensor).
MAX_PICKLE_OPCODES: Final = 1 << 22
#: The deepest nesting of the objects a pickle builds (a container holding a container ... ,
#: of any kind: tuples, lists, dicts, sets, objects made by REDUCE, NEWOBJ, INST or OBJ and
#: given state by BUILD), and of its MARKs. Python's own pickler recurses once a level at
#: least, so what it writes under its default recursion limit (1000) is within it.
MAX_PICKLE_DEPTH: Final = 1000
#: The former name of :data:`MAX_PICKLE_DEPTH` (it bounded MARK nesting alone).
MAX_PICKLE_NESTING: Final = MAX_PICKLE_DEPTH
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


# What the walker does with an opcode's argument: none; a fixed number of bytes (skipped, or
# read as a number); a length and that many bytes; one line, or two (GLOBAL, INST).
_NONE, _SKIP, _FIXED, _PREFIXED, _LINE, _TWO_LINES = range(6)
# What it does to the stack (see _walk): push a scalar; store or fetch a memo entry; open a
# MARK; make a new object of the items it pops, one level above them (_NEW) or at their level
# (_NEW_FLAT: a global), or of the items above the MARK (_NEW_MARK); add the items it pops, or
# those above the MARK, to the object below them (_ADD, _ADD_MARK); ...; or refuse it (_FORBIDDEN:
# outside the caller's allow-list).
(_SCALAR, _PUT, _GET, _MARK, _NEW, _NEW_FLAT, _NEW_MARK, _ADD, _ADD_MARK, _POP, _POP_MARK,
 _DUP, _MEMOIZE, _SAME, _PROTO, _FRAME, _STOP, _FORBIDDEN) = range(18)  # fmt: skip
#: Opcode -> (what it does to the stack, how many items it pops besides those above a MARK);
#: every other pushes a scalar (a number, a string, bytes, None, a bool).
_ACTIONS: dict[str, tuple[int, int]] = {
    "PUT": (_PUT, 0), "BINPUT": (_PUT, 0), "LONG_BINPUT": (_PUT, 0), "MEMOIZE": (_MEMOIZE, 0),
    "GET": (_GET, 0), "BINGET": (_GET, 0), "LONG_BINGET": (_GET, 0), "MARK": (_MARK, 0),
    "EMPTY_LIST": (_NEW, 0), "EMPTY_TUPLE": (_NEW, 0), "EMPTY_DICT": (_NEW, 0),
    "EMPTY_SET": (_NEW, 0), "PERSID": (_NEW, 0), "BINPERSID": (_NEW, 1), "TUPLE1": (_NEW, 1),
    "TUPLE2": (_NEW, 2), "TUPLE3": (_NEW, 3), "REDUCE": (_NEW, 2), "NEWOBJ": (_NEW, 2),
    "NEWOBJ_EX": (_NEW, 3), "GLOBAL": (_NEW_FLAT, 0), "STACK_GLOBAL": (_NEW_FLAT, 2),
    "EXT1": (_NEW_FLAT, 0), "EXT2": (_NEW_FLAT, 0), "EXT4": (_NEW_FLAT, 0),
    "LIST": (_NEW_MARK, 0), "TUPLE": (_NEW_MARK, 0), "DICT": (_NEW_MARK, 0),
    "FROZENSET": (_NEW_MARK, 0), "INST": (_NEW_MARK, 0), "OBJ": (_NEW_MARK, 0),
    "APPEND": (_ADD, 1), "SETITEM": (_ADD, 2), "BUILD": (_ADD, 1), "APPENDS": (_ADD_MARK, 0),
    "SETITEMS": (_ADD_MARK, 0), "ADDITEMS": (_ADD_MARK, 0), "POP": (_POP, 0),
    "POP_MARK": (_POP_MARK, 0), "DUP": (_DUP, 0), "READONLY_BUFFER": (_SAME, 1),
    "PROTO": (_PROTO, 0), "FRAME": (_FRAME, 0), "STOP": (_STOP, 1),
}  # fmt: skip
_MARKED = (_NEW_MARK, _ADD_MARK, _POP_MARK)
#: pickletools' length-prefixed argument kinds -> the length's format.
_PREFIXES = {
    pickletools.TAKEN_FROM_ARGUMENT1: "<B",
    pickletools.TAKEN_FROM_ARGUMENT4: "<i",
    pickletools.TAKEN_FROM_ARGUMENT4U: "<I",
    pickletools.TAKEN_FROM_ARGUMENT8U: "<Q",
}
#: Fixed arguments whose value the walker needs (memo indices, protocol, frame length).
_READ = {"uint1": "<B", "uint4": "<I", "uint8": "<Q"}
_Unpack = Callable[[bytes | bytearray, int], tuple[int]]


class _Op(NamedTuple):
    """An opcode as the walker sees it, from pickletools' table."""

    name: str
    kind: int  # _NONE, _SKIP, ...
    size: int  # a fixed argument's bytes, or a length prefix's
    unpack: _Unpack | None  # reads a fixed argument's value or a length prefix
    action: int  # _SCALAR, _PUT, ...
    pops: int  # the items it pops (besides those above a MARK)
    arg: str  # its argument's name in pickletools ("" for none)


def _op(info: pickletools.OpcodeInfo) -> _Op:
    arg = info.arg
    action, pops = _ACTIONS.get(info.name, (_SCALAR, 0))
    kind, size, unpack = _NONE, 0, None
    if arg is not None and arg.n >= 0:
        kind, size = _SKIP, arg.n
        if action in (_PUT, _GET, _PROTO, _FRAME):
            kind, unpack = _FIXED, struct.Struct(_READ[arg.name]).unpack_from
    elif arg is not None and arg.n in _PREFIXES:
        prefix = struct.Struct(_PREFIXES[arg.n])
        kind, size, unpack = _PREFIXED, prefix.size, prefix.unpack_from
    elif arg is not None:  # up to a newline
        kind = _TWO_LINES if arg.name == "stringnl_noescape_pair" else _LINE
    return _Op(info.name, kind, size, unpack, action, pops, arg.name if arg else "")


#: Byte -> its opcode (None: no opcode).
_TABLE: list[_Op | None] = [None] * 256
for _info in pickletools.opcodes:
    _TABLE[ord(_info.code)] = _op(_info)


@functools.lru_cache(maxsize=16)
def _table(allowed: frozenset[str] | None) -> list[_Op | None]:
    """:data:`_TABLE` with the opcodes outside ``allowed`` marked _FORBIDDEN."""
    if allowed is None:
        return _TABLE
    return [
        op if op is None or op.name in allowed else op._replace(action=_FORBIDDEN) for op in _TABLE
    ]


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
    table = _table(allowed)
    for _ in range(count):
        pos, seen = _walk(data, pos, seen, what, table)
        out.append(pos)
    return out


def _walk(
    data: bytes | bytearray, pos: int, seen: int, what: str, table: list[_Op | None]
) -> tuple[int, int]:
    """One pickle from ``pos`` (``seen`` opcodes before it): (where it ends, opcodes seen).

    The unpickler's stack is simulated with nodes instead of objects, each with the depth of
    its object: every scalar is node 0 (depth 0); every object an opcode makes is a new node,
    one level deeper than the deepest item it is made of; an opcode that adds items to an
    object (APPEND, SETITEMS, ADDITEMS, BUILD) raises that object's node to one level above
    the deepest of them (not one level a call), so that an object memoized and filled later is
    followed by identity. Tuples and frozensets, which nothing fills later, so get their exact
    depth (what hashing them recurses through); a list filled after it was put into another
    object does not deepen that one (whatever walks unpickled data bounds its own depth).

    The loop is the hot path of every read: the common opcodes take a few comparisons and an
    append; an underflow is caught once (IndexError) instead of tested at every pop."""
    end = len(data)
    most, deepest = MAX_PICKLE_OPCODES, MAX_PICKLE_DEPTH
    stack: list[int] = []  # the node of each item above the innermost open MARK
    below: list[list[int]] = []  # the stack under each open MARK
    memo: list[int] = []  # memo index -> node (-1: nothing stored)
    stored = 0  # memo indices stored (where MEMOIZE stores)
    depths = [0]  # node -> the depth of its object
    items: Sequence[int]  # what an opcode pops
    name, action, at = "", _SCALAR, pos
    try:
        while pos < end:
            at = pos
            op = table[data[pos]]
            if op is None:
                raise PickleError(
                    what, f"has byte 0x{data[pos]:02x}, which is no pickle opcode", at
                )
            seen += 1
            if seen > most:
                raise PickleError(what, f"holds more than {most} opcodes", at)
            name, kind, size, unpack, action, pops, _ = op
            pos += 1
            value = 0
            if kind:
                if kind <= _PREFIXED:
                    if pos + size > end:
                        raise PickleError(what, f"ends inside a {name} argument", at, short=True)
                    if unpack is not None:
                        value = unpack(data, pos)[0]
                    pos += size
                    if kind == _PREFIXED:
                        if not 0 <= value <= end - pos:
                            raise _length(what, value, op.arg, end - pos, at)
                        pos += value
                else:
                    value, pos = _lines(data, pos, op, what, at)
            if action == _SCALAR:
                stack.append(0)
            elif action == _PUT:
                if value >= seen:
                    raise PickleError(
                        what,
                        f"stores memo index {value} ({name}) after only {seen - 1} opcode"
                        f"{'' if seen == 2 else 's'}; an unpickler would allocate a memo of that "
                        "many entries",
                        at,
                    )
                if value == len(memo):
                    memo.append(stack[-1])
                    stored += 1
                else:
                    stored = _store(memo, value, stack[-1], stored)
            elif action == _GET:
                node = memo[value] if value < len(memo) else -1
                if node < 0:
                    raise PickleError(what, f"reads memo index {value} ({name}), never stored", at)
                stack.append(node)
            elif action == _MARK:
                if len(below) >= deepest:
                    raise PickleError(what, f"nests MARKs more than {deepest} deep", at)
                below.append(stack)
                stack = []
            elif action <= _NEW_MARK:  # _NEW, _NEW_FLAT, _NEW_MARK
                depth = 0
                if action == _NEW_MARK:
                    items, stack = stack, below.pop()
                    for node in items:
                        if depths[node] > depth:
                            depth = depths[node]
                else:
                    for _ in range(pops):
                        node = stack.pop()
                        if depths[node] > depth:
                            depth = depths[node]
                if action != _NEW_FLAT:
                    depth += 1
                    if depth > deepest:
                        raise _too_deep(what, name, deepest, at)
                stack.append(len(depths))
                depths.append(depth)
            elif action <= _ADD_MARK:  # _ADD, _ADD_MARK
                if action == _ADD_MARK:
                    items, stack = stack, below.pop()
                    if not stack:
                        raise _underflow(what, name, at)
                else:
                    items = (stack.pop(),) if pops == 1 else (stack.pop(), stack.pop())
                depth = 0
                for node in items:
                    if depths[node] > depth:
                        depth = depths[node]
                target = stack[-1]
                if items and target and depths[target] <= depth:  # node 0: the unpickler refuses
                    if depth >= deepest:
                        raise _too_deep(what, name, deepest, at)
                    depths[target] = depth + 1
            elif action == _POP:
                if stack:
                    stack.pop()
                else:  # POP with nothing above a MARK pops the MARK
                    stack = below.pop()
            elif action == _POP_MARK:
                stack = below.pop()
            elif action == _DUP:
                stack.append(stack[-1])
            elif action == _MEMOIZE:
                stored = _store(memo, stored, stack[-1], stored)
            elif action == _SAME:
                if not stack:
                    raise _underflow(what, name, at)
            elif action == _PROTO:
                if value > _HIGHEST_PROTOCOL:
                    raise PickleError(what, f"is of protocol {value}; at most 5 is read", at)
            elif action == _FRAME:
                if value > end - pos:
                    raise PickleError(
                        what, f"frames {value} bytes; only {end - pos} remain", at, short=True
                    )
            elif action == _STOP:
                if not stack:
                    raise _underflow(what, name, at)
                return pos, seen
            else:  # _FORBIDDEN
                raise PickleError(what, f"uses the opcode {name}", at, opcode=name)
    except IndexError:  # a pop from an empty stack, or of a MARK never pushed
        if action in _MARKED and not below:
            raise PickleError(what, f"has a {name} with no MARK before it", at) from None
        raise _underflow(what, name, at) from None
    raise PickleError(what, "ends before its STOP opcode", pos, short=True)


def _store(memo: list[int], index: int, node: int, stored: int) -> int:
    """``memo[index] = node`` (the memo grown to it); the memo indices stored after."""
    if index >= len(memo):
        memo.extend([-1] * (index + 1 - len(memo)))
    stored += memo[index] < 0
    memo[index] = node
    return stored


def _underflow(what: str, name: str, at: int) -> PickleError:
    return PickleError(what, f"has a {name} with too few items on the stack", at)


def _too_deep(what: str, name: str, deepest: int, at: int) -> PickleError:
    return PickleError(
        what,
        f"nests containers more than {deepest} deep (a {name}); an unpickled object that deep "
        "exhausts whatever walks it",
        at,
    )


def _length(what: str, value: int, arg: str, left: int, at: int) -> PickleError:
    if value < 0:
        return PickleError(what, f"has a negative length {value} in a {arg}", at)
    return PickleError(
        what, f"expected {value} bytes in a {arg}, but only {left} remain", at, short=True
    )


def _lines(data: bytes | bytearray, pos: int, op: _Op, what: str, at: int) -> tuple[int, int]:
    """(a PUT's or GET's index, else 0; where the next opcode starts) after a text argument:
    one line, or two (GLOBAL, INST), each at most 64 KiB."""
    end = len(data)
    line = b""
    for _ in range(2 if op.kind == _TWO_LINES else 1):
        newline = data.find(b"\n", pos, min(end, pos + _MAX_LINE + 1))
        if newline < 0:
            short = end - pos <= _MAX_LINE
            why = "ends inside a line" if short else f"has a line over {_MAX_LINE} bytes"
            raise PickleError(what, f"{why} (a {op.name} argument)", at, short=short)
        line, pos = bytes(data[pos:newline]), newline + 1
    if op.action != _PUT and op.action != _GET:
        return 0, pos
    try:
        index = int(line)
    except ValueError:
        raise PickleError(what, f"has a {op.name} of {line[:20]!r}, not a number", at) from None
    if index < 0:
        raise PickleError(what, f"has a {op.name} of the negative memo index {index}", at)
    return index, pos


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


# -- what a read rebuilds ---------------------------------------------------------------------

#: The objects a read rebuilds from its pickles may take this many bytes a byte of pickle ...
REBUILT_PER_BYTE: Final = 32
#: ... plus this many (see :class:`Budget`).
REBUILT_GRACE: Final = 64 << 20


class _BudgetExceeded(FormatError):
    """The objects rebuilt from a file's pickles would take more than its :class:`Budget`
    (``limit`` bytes, for ``pickled`` bytes of pickle): ``Budget.Exceeded``. Never seen by a
    user: each reader raises its own error naming the file instead."""

    def __init__(self, limit: int, pickled: int) -> None:
        self.limit, self.pickled = limit, pickled
        super().__init__(
            f"the objects rebuilt from its {pickled} bytes of pickle would take more than "
            f"{limit} bytes ({REBUILT_PER_BYTE} a byte of pickle plus {REBUILT_GRACE >> 20} MiB)"
        )

    def __reduce__(self) -> tuple[type[_BudgetExceeded], tuple[int, int]]:
        return type(self), (self.limit, self.pickled)


class Budget:
    """The bytes that the objects one read rebuilds may take (one budget a read, across all
    its pickles and calls): every function a reader honours for a global (a *rebuilder*:
    ``set``, ``bytearray``, ``OrderedDict``, a tensor reference, ...), every record it makes of
    a call and every nested pickle charge what they make (:meth:`charge`), so that a pickle
    calling one on a memoized object again and again (six bytes a call) cannot make more than
    :data:`REBUILT_PER_BYTE` times the bytes of the pickles read (:meth:`allow`) plus
    :data:`REBUILT_GRACE`; past it, :attr:`Exceeded`. What the unpickler makes of the
    opcodes themselves is bounded by :func:`check` (a few hundred bytes an opcode at most).

    What a reader charges (bytes, as CPython 3.11 on 64 bits takes them, rounded up; real
    torch.save files, Lightning checkpoints and pickles of arrays come to 2 to 9 a byte of
    pickle): :attr:`CALL` a call of an honoured global (the small object it makes: a tensor
    reference, an array view, an empty dict), :attr:`GLOBAL` a global looked up,
    :attr:`RECORD` a record of a call (with its empty lists), :attr:`POINTER` an item it keeps
    in a list or tuple, :attr:`PAIR` a key-value pair it keeps, :meth:`tuple_bytes` a tuple it
    makes, :attr:`NAME` plus its length a name it makes of a path, and the bytes of every copy
    it keeps. A copy made and dropped within one call is not charged: calls cannot pile it
    up."""

    Exceeded = _BudgetExceeded
    CALL: Final = 144
    GLOBAL: Final = 96
    RECORD: Final = 320
    POINTER: Final = 8
    PAIR: Final = 80
    NAME: Final = 64

    __slots__ = ("limit", "pickled", "spent")

    @staticmethod
    def tuple_bytes(length: int) -> int:
        """The bytes of a tuple of ``length`` items."""
        return 64 + Budget.POINTER * length

    def __init__(self) -> None:
        self.limit, self.pickled, self.spent = REBUILT_GRACE, 0, 0

    def allow(self, pickled: int) -> None:
        """Count ``pickled`` more bytes of pickle read (a nested pickle's are counted by the
        pickle that holds them, not again)."""
        self.pickled += pickled
        self.limit += REBUILT_PER_BYTE * pickled

    def charge(self, made: int) -> None:
        """Count ``made`` bytes rebuilt; :attr:`Exceeded` past the limit."""
        self.spent += made
        if self.spent > self.limit:
            raise _BudgetExceeded(self.limit, self.pickled)


# -- showing unpickled values -----------------------------------------------------------------

_SHOWN_LEVELS = 3
_SHOWN_ITEMS = 6
_SHOWN_INT_BITS = 256
_BRACKETS: dict[type, tuple[str, str]] = {
    tuple: ("(", ")"),
    list: ("[", "]"),
    dict: ("{", "}"),
    set: ("{", "}"),
    frozenset: ("frozenset({", "})"),
}


def shown(value: object, limit: int = 80) -> str:
    """How a message shows a value unpickled from a file: as :func:`cudnn_rnn.io.files.quote`
    shows a name (its repr, what does not print escaped, cut after ``limit`` characters), but
    safe on anything a pickle builds: containers (tuples, lists, dicts, sets, frozensets and
    their subclasses) are shown 3 levels deep and 6 items each (``...`` for the rest), an
    integer of more than 256 bits by its size, a string cut before it is quoted, any other
    object by its own repr (the readers' inert records name their class). No depth, size or
    content of the file's makes it recurse without bound, allocate or fail.

    >>> deep: object = ()
    >>> for _ in range(100_000):
    ...     deep = (deep,)
    >>> shown({"key": [deep, 2**10_000, "x" * 500]}, 60)
    "{'key': [((...),), <int of 10001 bits>, 'xxxxxxxxxxxxxxxxxxx..."
    """
    return clip(escape(_shown(value, _SHOWN_LEVELS, limit)), limit + 3)


def _shown(value: object, levels: int, limit: int) -> str:
    if value is None or type(value) in (bool, float, complex):
        return repr(value)
    if isinstance(value, int):
        bits = int(value).bit_length()
        return repr(int(value)) if bits <= _SHOWN_INT_BITS else f"<int of {bits} bits>"
    if isinstance(value, (str, bytes, bytearray)):
        return repr(value[: limit + 1])
    kind = next((k for k in _BRACKETS if isinstance(value, k)), None)
    if kind is None:
        return repr(value)
    opening, closing = _BRACKETS[kind]
    sized: Any = value
    if kind is set and not sized:
        return "set()"
    if not levels:
        return f"{opening}...{closing}"
    items = iter(sized.items() if kind is dict else sized)
    parts: list[str] = []
    for item in items:
        if len(parts) == _SHOWN_ITEMS:
            parts.append("...")
            break
        if kind is dict:
            key, entry = item
            parts.append(f"{_shown(key, levels - 1, limit)}: {_shown(entry, levels - 1, limit)}")
        else:
            parts.append(_shown(item, levels - 1, limit))
    inner = ", ".join(parts)
    return f"{opening}{inner}{',' if kind is tuple and len(parts) == 1 else ''}{closing}"
