"""How TF's cells make RNNs: a cell, a ``MultiRNNCell``'s layers, fw/bw pairs, stacked pairs.

The cells :func:`~cudnn_rnn.io.tf1.cell_kinds.cells_of` finds are grouped by where their scopes
sit (the table in :mod:`cudnn_rnn.io.tf1.cells`): one direction's cells (one cell, or a
``MultiRNNCell``'s by layer), then the fw/bw pairs of ``bidirectional_dynamic_rnn`` and the
layers of ``stack_bidirectional_*_rnn``. :func:`records_of` makes each RNN one :class:`Record`
(its cells by layer and direction, whether its directions are separate stacks, and what is wrong
with the grouping: a missing layer, two cells at one layer, fw and bw of different depths), named
uniquely.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cudnn_rnn.core import tf_names
from cudnn_rnn.io import files
from cudnn_rnn.io.tf1.cell_kinds import Cell, Shape, cells_of

__all__ = ["Record", "class_names", "records_of"]

_MULTI = tf_names.STANDARD_MULTI
_DIRECTION = re.compile(r"(?:(?P<parent>.+)/)?(?P<direction>fw|bw)")
_STACK_LAYER = re.compile(
    r"(?:(?P<parent>.+)/)?cell_(?P<layer>0|[1-9][0-9]{0,5})(?:/bidirectional_rnn)?"
)


@dataclass
class _Unit:
    """One direction's cells: one cell, or a MultiRNNCell's (``multi``), by layer."""

    path: str  # the scope it sits at: S of S/<cell>, P of P/multi_rnn_cell
    multi: bool
    layers: dict[int, list[Cell]] = field(default_factory=dict)

    @property
    def long_name(self) -> str:
        if self.multi:
            return _join(self.path, "multi_rnn_cell")
        return _join(self.path, self.layers[0][0].kind)


@dataclass(frozen=True)
class Record:
    """One RNN: its cells by layer (each layer ``(fw,)`` or ``(fw, bw)``), and what is wrong."""

    name: str
    long_name: str
    where: str
    layers: tuple[tuple[Cell, ...], ...]
    problems: tuple[str, ...]
    bidirectional: bool
    #: A bidirectional pair of MultiRNNCells of > 1 layer: each direction runs its own stack
    #: (layer l + 1 of a direction reads that direction's layer l only), merged at the top.
    separate_stacks: bool = False


def _join(parent: str, child: str) -> str:
    return f"{parent}/{child}" if parent else child


def _units(cells: list[Cell]) -> list[_Unit]:
    units: dict[tuple[str, bool, str], _Unit] = {}
    for cell in cells:
        parent = cell.scope.rsplit("/", 1)[0] if "/" in cell.scope else ""
        m = _MULTI.fullmatch(parent)
        if m is not None:
            key = (m["parent"] or "", True, "")
            layer = int(m["layer"])
        else:
            key, layer = (parent, False, cell.kind), 0
        unit = units.setdefault(key, _Unit(key[0], key[1]))
        unit.layers.setdefault(layer, []).append(cell)
    # Two single cells at one scope (rnn/lstm_cell and rnn/gru_cell) are two units, which the
    # key's cell kind already keeps apart.
    return list(units.values())


def _unit_problems(unit: _Unit) -> list[str]:
    problems = []
    count = max(unit.layers) + 1
    missing = [str(k) for k in range(count) if k not in unit.layers]
    if missing:
        problems.append(f"MultiRNNCell {unit.long_name} lacks cell_{', cell_'.join(missing)}")
    for k, cells in sorted(unit.layers.items()):
        if len(cells) > 1:
            problems.append(
                f"{unit.long_name} has {len(cells)} cells at cell_{k} "
                f"({', '.join(c.kind for c in cells)})"
            )
    return problems


def _unit_layers(unit: _Unit) -> list[Cell]:
    return [cells[0] for _, cells in sorted(unit.layers.items())]


def records_of(shapes: Mapping[str, Shape]) -> list[Record]:
    """Every RNN of TF cells in ``shapes``, named uniquely."""
    units = _units(cells_of(shapes))
    pairs: dict[str, dict[str, _Unit]] = {}
    for unit in units:
        m = _DIRECTION.fullmatch(unit.path)
        if m is not None:
            pairs.setdefault(m["parent"] or "", {})[m["direction"]] = unit
    records: list[Record] = []
    stacked: dict[str, dict[int, tuple[_Unit, _Unit]]] = {}
    paired: set[int] = set()
    for parent, both in pairs.items():
        if len(both) != 2:
            continue
        fw, bw = both["fw"], both["bw"]
        paired.update((id(fw), id(bw)))
        m = _STACK_LAYER.fullmatch(parent)
        single = not fw.multi and not bw.multi
        if m is not None and single and not (m["parent"] or "").endswith("multi_rnn_cell"):
            stacked.setdefault(m["parent"] or "", {})[int(m["layer"])] = (fw, bw)
        else:
            records.append(_pair(parent, fw, bw))
    for parent, layers in stacked.items():
        records.append(_stack(parent, layers))
    for unit in units:
        if id(unit) not in paired:
            records.append(_single(unit))
    return _unique(records)


def _single(unit: _Unit) -> Record:
    cells = _unit_layers(unit)
    classes = class_names(cells)
    if unit.multi:
        name = unit.path or unit.long_name
        where = f"MultiRNNCell {files.quote(unit.long_name)} ({len(unit.layers)} x {classes})"
    else:
        name = unit.path or unit.long_name
        where = f"cell {files.quote(unit.long_name)} ({classes})"
    return Record(
        name, unit.long_name, where, tuple((c,) for c in cells), tuple(_unit_problems(unit)), False
    )


def _pair(parent: str, fw: _Unit, bw: _Unit) -> Record:
    problems = _unit_problems(fw) + _unit_problems(bw)
    fws, bws = _unit_layers(fw), _unit_layers(bw)
    separate = max(len(fws), len(bws)) > 1
    if len(fws) != len(bws):
        problems.append(f"fw has {len(fws)} layers, bw {len(bws)}")
    where = (
        f"bidirectional_dynamic_rnn {files.quote(parent)} ("
        + ("separate " if separate else "")
        + "fw and bw"
        + (" stacks" if separate else "")
        + ": "
        + (f"MultiRNNCell of {len(fws)} x " if fw.multi else "")
        + f"{class_names(fws + bws)})"
    )
    layers = tuple(zip(fws, bws))
    return Record(parent, parent, where, layers, tuple(problems), True, separate)


def _stack(parent: str, layers: dict[int, tuple[_Unit, _Unit]]) -> Record:
    count = max(layers) + 1
    problems = [
        f"stack_bidirectional_dynamic_rnn {parent} lacks cell_{k}"
        for k in range(count)
        if k not in layers
    ]
    pairs = tuple((layers[k][0].layers[0][0], layers[k][1].layers[0][0]) for k in sorted(layers))
    for fw, bw in (layers[k] for k in sorted(layers)):
        problems += _unit_problems(fw) + _unit_problems(bw)
    classes = class_names([c for pair in pairs for c in pair])
    where = (
        f"stack_bidirectional_dynamic_rnn {files.quote(parent)} ({len(layers)} x fw and bw: "
        f"{classes})"
    )
    return Record(parent, parent, where, pairs, tuple(problems), True)


def class_names(cells: Sequence[Cell]) -> str:
    """The TF classes of ``cells``, each once: ``"BasicLSTMCell and LSTMCell or LSTMBlockCell"``."""
    return " and ".join(sorted({c.classes for c in cells}))


def _unique(records: list[Record]) -> list[Record]:
    """Records named by their short names; where two would read the same, by their full
    structural paths, then by a position."""
    count: dict[str, int] = {}
    for r in records:
        count[r.name] = count.get(r.name, 0) + 1
    renamed = [r if count[r.name] == 1 else _rename(r, r.long_name) for r in records]
    seen: dict[str, int] = {}
    out = []
    for r in renamed:
        n = seen[r.name] = seen.get(r.name, 0) + 1
        out.append(r if n == 1 else _rename(r, f"{r.name}#{n}"))
    return sorted(out, key=lambda r: r.name)


def _rename(record: Record, name: str) -> Record:
    return Record(
        name,
        record.long_name,
        record.where,
        record.layers,
        record.problems,
        record.bidirectional,
        record.separate_stacks,
    )
