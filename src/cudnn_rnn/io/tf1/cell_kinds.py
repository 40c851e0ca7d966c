"""TF's standard cells one scope at a time: the kinds, finding their scopes, reading their sizes.

Each cell scope name (``lstm_cell``, ``basic_lstm_cell``, ``gru_cell``, ...) is a kind: the TF
classes that write it, their mode, and the variables they write (in both naming generations), held
here as data. :func:`cells_of` finds every cell scope of a checkpoint from its names alone,
leaving out what is not a TF cell's (an optimizer's slots, a scope holding a variable no TF cell
has, the names :mod:`cudnn_rnn.io.detect` interprets), and interprets each by its kind: its sizes
and whether it has peepholes where the shapes agree, and every reason it cannot be read where they
do not (shapes that describe no such cell, names of two kinds in one scope). How cells stack and
pair into RNNs is
:mod:`cudnn_rnn.io.tf1.cell_stacks`; the module docstring of :mod:`cudnn_rnn.io.tf1.cells` has
the whole table of cells and variables.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cudnn_rnn.core import tf_names
from cudnn_rnn.core.constants import CUDNN_GRU, CUDNN_LSTM, CUDNN_RNN_BIDIRECTION, CUDNN_RNN_TANH
from cudnn_rnn.core.gates import CUDNN_GATES
from cudnn_rnn.io.detect import detect_models

__all__ = ["BIAS", "KERNEL", "PEEPHOLES", "PROJ", "Cell", "Shape", "cells_of", "gru_roles"]

Shape = tuple[int, ...]

# -- the cells, as data -----------------------------------------------------------------------

#: Variable roles, each with its names in the later (kernel/bias) and TF 1.0 generation.
KERNEL, BIAS, PROJ = "kernel", "bias", "projection"
#: An LSTM's peephole weights by the gate they feed (LSTMCell's ``use_peepholes``, the block
#: cells' ``use_peephole``: the same names, cudnn_rnn.core.tf_names').
PEEPHOLES: Mapping[str, str] = tf_names.PEEPHOLE_NAMES
_PEEPHOLES = tuple(PEEPHOLES.values())
_GATES_KERNEL, _GATES_BIAS = tf_names.GATES_KERNEL, tf_names.GATES_BIAS
_CAND_KERNEL, _CAND_BIAS = "candidate/kernel", "candidate/bias"
_BLOCK_GRU = ("w_ru", "b_ru", "w_c", "b_c")
_NEW, _OLD = tf_names.STANDARD_NEW, tf_names.STANDARD_OLD
#: role -> {generation: the variable's name relative to the cell scope} (TF's names are
#: cudnn_rnn.core.tf_names').
_NAMES: Mapping[str, Mapping[str, str]] = {
    **tf_names.STANDARD_CELL_VARIABLES,
    **{p: {_NEW: p, _OLD: p} for p in _PEEPHOLES + _BLOCK_GRU},
}


@dataclass(frozen=True)
class _Kind:
    """One cell scope name: the TF classes that write it, their mode, their variables' roles."""

    classes: str
    mode: str
    roles: tuple[str, ...]


_LSTM_ROLES = (KERNEL, BIAS, PROJ, *_PEEPHOLES)
_KINDS: Mapping[str, _Kind] = {
    "lstm_cell": _Kind("LSTMCell or LSTMBlockCell", CUDNN_LSTM, _LSTM_ROLES),
    "basic_lstm_cell": _Kind("BasicLSTMCell", CUDNN_LSTM, (KERNEL, BIAS)),
    "lstm_fused_cell": _Kind("LSTMBlockFusedCell", CUDNN_LSTM, (KERNEL, BIAS, *_PEEPHOLES)),
    "lstm_block_wrapper": _Kind("LSTMBlockFusedCell", CUDNN_LSTM, (KERNEL, BIAS, *_PEEPHOLES)),
    tf_names.BASIC_RNN_CELL: _Kind("BasicRNNCell", CUDNN_RNN_TANH, (KERNEL, BIAS)),
    "gru_cell": _Kind(
        "GRUCell or GRUBlockCell",
        CUDNN_GRU,
        (_GATES_KERNEL, _GATES_BIAS, _CAND_KERNEL, _CAND_BIAS, *_BLOCK_GRU),
    ),
}
#: Cell scope -> (variable name relative to it -> (role, generation)).
_VARIABLES: Mapping[str, Mapping[str, tuple[str, str]]] = {
    cell: {_NAMES[role][gen]: (role, gen) for role in kind.roles for gen in (_NEW, _OLD)}
    for cell, kind in _KINDS.items()
}

#: A GRU's roles (gates kernel, gates bias, candidate kernel, candidate bias) by the classes
#: that write them: ``GRUCell``'s names (``GRUBlockCellV2`` writes them too) or
#: ``GRUBlockCell``'s.
_GRU_NAMES: Mapping[str, tuple[str, str, str, str]] = {
    "GRUCell or GRUBlockCellV2": (_GATES_KERNEL, _GATES_BIAS, _CAND_KERNEL, _CAND_BIAS),
    "GRUBlockCell": _BLOCK_GRU,
}


# -- one cell ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One cell scope's variables, interpreted: sizes and peepholes where they are consistent,
    and every reason the cell cannot be read."""

    scope: str  # the full scope of its variables, e.g. "rnn/lstm_cell"
    kind: str  # the cell scope name, a key of _KINDS
    classes: str  # the TF classes that write these names
    mode: str
    generation: str | None
    names: Mapping[str, str]  # role -> full tensor name
    num_units: int | None = None
    input_size: int | None = None
    num_proj: int | None = None
    problems: tuple[str, ...] = ()
    peepholes: bool = False  # an LSTM's w_i_diag, w_f_diag, w_o_diag

    @property
    def output_size(self) -> int | None:
        return self.num_proj or self.num_units


def cells_of(shapes: Mapping[str, Shape]) -> list[Cell]:
    """Every TF cell scope of ``shapes`` (names left to :mod:`~cudnn_rnn.io.detect` and
    names under no cell scope left out), interpreted."""
    skip = _detected(shapes)
    members: dict[str, dict[str, str]] = {}  # cell scope -> {relative name: full name}
    foreign: set[str] = set()
    for name in shapes:
        if name in skip:
            continue
        parts = name.split("/")
        at = next((i for i in range(len(parts) - 2, -1, -1) if parts[i] in _KINDS), None)
        if at is None:
            continue
        scope, rest = "/".join(parts[: at + 1]), "/".join(parts[at + 1 :])
        known = _VARIABLES[parts[at]]
        if rest in known:
            members.setdefault(scope, {})[rest] = name
        elif not any(rest.startswith(v + "/") for v in known):  # else a slot: not ours
            foreign.add(scope)
    return [
        _interpret(scope, found, shapes) for scope, found in members.items() if scope not in foreign
    ]


def _detected(shapes: Mapping[str, Shape]) -> set[str]:
    """The names of every group that :func:`~cudnn_rnn.io.detect.detect_models` reads as
    a model (the canonical names of ``tf.contrib.cudnn_rnn``'s saveables)."""
    groups = {
        (
            m["scope"] or "",
            tf_names.BIDIRECTIONAL_STACK
            if m["direction"] == CUDNN_RNN_BIDIRECTION
            else tf_names.UNIDIRECTIONAL_STACK,
            tf_names.CELL_NAMES[m["rnn_mode"]],
        )
        for m in detect_models(dict(shapes))
    }
    out = set()
    for name in shapes:
        parsed = tf_names.parse(name)
        if parsed is not None and (parsed.scope or "", parsed.stack, parsed.cell) in groups:
            out.add(name)
    return out


def _interpret(scope: str, members: Mapping[str, str], shapes: Mapping[str, Shape]) -> Cell:
    cell = scope.rsplit("/", 1)[-1]
    kind = _KINDS[cell]
    roles: dict[str, str] = {}
    generations: set[str] = set()
    for rest, full in members.items():
        role, gen = _VARIABLES[cell][rest]
        roles[role] = full
        if _NAMES[role][_NEW] != _NAMES[role][_OLD]:
            generations.add(gen)
    # GRUBlockCell's names were never renamed: they say no generation (None).
    base = Cell(scope, cell, kind.classes, kind.mode, None, roles)
    if len(generations) > 1:
        return _with(
            base,
            problems=("holds both TF 1.0's weights/biases names and the later kernel/bias names",),
            generation=None,
        )
    if generations:
        base = _with(base, generation=generations.pop())
    if kind.mode == CUDNN_GRU:
        return _gru(base, shapes)
    return _gated(base, shapes)


def _with(cell: Cell, **changes: Any) -> Cell:
    values = {f: getattr(cell, f) for f in Cell.__dataclass_fields__}
    return Cell(**{**values, **changes})


def _shape_of(cell: Cell, role: str, shapes: Mapping[str, Shape], rank: int) -> Shape:
    """The shape of ``role``'s tensor, checked to have ``rank`` dimensions, none 0."""
    name = cell.names.get(role)
    if name is None:
        gen = cell.generation or _NEW
        raise _Bad(f"{cell.scope} has no {_NAMES[role][gen]}")
    shape = tuple(shapes[name])
    if len(shape) != rank or not all(d >= 1 for d in shape):
        raise _Bad(f"{name} has shape {list(shape)}, expected {rank} dimension(s) of size >= 1")
    return shape


class _Bad(Exception):
    """Shapes that describe no cell of the kind their names say."""


def _gated(cell: Cell, shapes: Mapping[str, Shape]) -> Cell:
    """An LSTM or a BasicRNNCell: kernel [input + Hout, G*H], bias [G*H] (LSTMCell: projection
    [H, P]; the LSTMs with peepholes: w_i_diag, w_f_diag, w_o_diag [H])."""
    gates = len(CUDNN_GATES[cell.mode])
    problems: list[str] = []
    try:
        rows, cols = _shape_of(cell, KERNEL, shapes, 2)
        (width,) = _shape_of(cell, BIAS, shapes, 1)
        if cols != width or cols % gates:
            raise _Bad(
                f"{cell.names[KERNEL]} has {cols} columns and {cell.names[BIAS]} {width} "
                f"entries; {cell.classes} has {gates} x num_units of each"
            )
        units, proj = cols // gates, None
        if PROJ in cell.names:
            proj_rows, proj = _shape_of(cell, PROJ, shapes, 2)
            if proj_rows != units:
                raise _Bad(f"{cell.names[PROJ]} has {proj_rows} rows, expected num_units = {units}")
            if proj > units:
                problems.append(
                    f"num_proj {proj} > num_units {units}: cuDNN projects to at most num_units"
                )
        input_size = rows - (proj or units)
        if input_size < 1:
            raise _Bad(
                f"{cell.names[KERNEL]} has {rows} rows: no room for an input beside the "
                f"{proj or units} recurrent ones"
            )
        peepholes = _peepholes(cell, shapes, units)
    except _Bad as bad:
        return _with(cell, problems=(*problems, str(bad)))
    return _with(
        cell,
        num_units=units,
        input_size=input_size,
        num_proj=proj,
        problems=tuple(problems),
        peepholes=peepholes,
    )


def _peepholes(cell: Cell, shapes: Mapping[str, Shape], units: int) -> bool:
    """Whether the cell has peepholes: all three vectors of ``[units]``, or none."""
    held = [p for p in _PEEPHOLES if p in cell.names]
    if not held:
        return False
    if len(held) < len(_PEEPHOLES):
        lacking = ", ".join(p for p in _PEEPHOLES if p not in held)
        raise _Bad(f"{cell.scope} has {', '.join(held)} but not {lacking}")
    for role in _PEEPHOLES:
        (size,) = _shape_of(cell, role, shapes, 1)
        if size != units:
            raise _Bad(f"{cell.names[role]} has {size} entries, expected num_units = {units}")
    return True


def gru_roles(cell: Cell) -> tuple[str, str, str, str]:
    """A GRU cell's roles: its gates kernel ``[K, 2H]`` (TF's ``r, u``), gates bias ``[2H]``,
    candidate kernel ``[K, H]`` and candidate bias ``[H]``, named as its class names them."""
    return _GRU_NAMES[cell.classes]


def _gru(cell: Cell, shapes: Mapping[str, Shape]) -> Cell:
    """GRUCell or GRUBlockCellV2 (gates/*, candidate/*) or GRUBlockCell (w_ru, b_ru, w_c, b_c):
    their sizes. All three compute TF's GRU, the reset gate applied before the recurrent
    product (a variant: ``reset_after=False``)."""
    block = any(r in cell.names for r in _BLOCK_GRU)
    plain = any(r in cell.names for r in _GRU_NAMES["GRUCell or GRUBlockCellV2"])
    cls = "GRUBlockCell" if block and not plain else "GRUCell or GRUBlockCellV2"
    cell = _with(cell, classes=cls)
    if block and plain:
        return _with(cell, problems=("holds both GRUCell's and GRUBlockCell's names",))
    roles = gru_roles(cell)
    try:
        gate_rows, gate_cols = _shape_of(cell, roles[0], shapes, 2)
        (gate_width,) = _shape_of(cell, roles[1], shapes, 1)
        cand_rows, units = _shape_of(cell, roles[2], shapes, 2)
        (cand_width,) = _shape_of(cell, roles[3], shapes, 1)
        if (gate_cols, gate_width, cand_width, cand_rows) != (
            2 * units,
            2 * units,
            units,
            gate_rows,
        ):
            raise _Bad(
                f"{cell.scope}'s shapes disagree: {', '.join(cell.names[r] for r in roles)} "
                f"are {[gate_rows, gate_cols]}, [{gate_width}], {[cand_rows, units]}, "
                f"[{cand_width}]"
            )
        if gate_rows <= units:
            raise _Bad(f"{cell.names[roles[0]]} has {gate_rows} rows: no room for an input")
    except _Bad as bad:
        return _with(cell, problems=(str(bad),))
    return _with(cell, num_units=units, input_size=gate_rows - units)
