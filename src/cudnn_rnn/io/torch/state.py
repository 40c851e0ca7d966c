"""torch.nn's parameter names, and the RNNs a state_dict holds at any prefix, from names and shapes.

A ``torch.nn.LSTM``/``GRU``/``RNN`` at prefix ``P`` of a state_dict holds, per layer ``l`` and
direction (``_reverse`` for the backward one), ``P.weight_ih_l{l}``, ``P.weight_hh_l{l}``,
``P.bias_ih_l{l}``, ``P.bias_hh_l{l}`` (absent with ``bias=False``) and, with ``proj_size``,
``P.weight_hr_l{l}``; a ``torch.nn.LSTMCell``/``GRUCell``/``RNNCell`` holds ``P.weight_ih``,
``P.weight_hh``, ``P.bias_ih`` and ``P.bias_hh`` (a cell is exactly one unidirectional layer).
:func:`find_groups` finds every such group in a mapping of names to ``(shape, dtype name)``, at
the top level (prefix ``""``) or under any prefix (``encoder.rnn``), reading no tensor, and says
for each what it is (its mode from the gate count: 4 LSTM, 3 GRU, 1 plain RNN) and every problem
that keeps it from being the state of one such module. Groups are never guessed: a ``_l{l}`` name
always makes a group (listed with its problems when it is malformed), while the cells' plain
``weight_ih``/``weight_hh`` names make one only where their shapes are those of a cell.

A plain ``nn.RNN``'s state_dict does not say tanh or relu; :func:`plain_mode` takes what a file
records (a TorchScript archive does) or what the caller says, in that order, and refuses a
contradiction.

:class:`TorchFileError` is the error of every reader of torch-style tensors (torch.save files,
TorchScript archives, the torch names of a safetensors or ``.npz`` file). Pure Python on the
package's core: no torch, no file.

>>> groups = find_groups({
...     "encoder.rnn.weight_ih_l0": ((16, 3), "float32"),
...     "encoder.rnn.weight_hh_l0": ((16, 4), "float32"),
...     "head.weight": ((2, 4), "float32"),
...     "cell.weight_ih": ((12, 4), "float32"),
...     "cell.weight_hh": ((12, 4), "float32"),
... })
>>> [(g.prefix, g.torch_class, g.num_units, g.bias, g.problems) for g in groups]
[('encoder.rnn', 'LSTM', 4, False, ()), ('cell', 'GRUCell', 4, False, ())]
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from cudnn_rnn.core.constants import (
    CUDNN_GRU,
    CUDNN_LSTM,
    CUDNN_RNN_BIDIRECTION,
    CUDNN_RNN_RELU,
    CUDNN_RNN_TANH,
    CUDNN_RNN_UNIDIRECTION,
)
from cudnn_rnn.core.layout import (
    INPUT,
    INPUT_BIAS,
    PROJECTION,
    RECURRENT,
    RECURRENT_BIAS,
    layout_of,
)
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.io.files.escaping import clip, first_line, listed, quote
from cudnn_rnn.io.files.opening import FormatError
from cudnn_rnn.io.found import FoundRNN

__all__ = [
    "FLOATING",
    "TOP",
    "TORCH_NAMES",
    "StateGroup",
    "TorchFileError",
    "find_groups",
    "found_rnn",
    "plain_mode",
    "select",
    "torch_name",
    "torch_state_shapes",
]


#: The name of an RNN at the top level of a state_dict or module (prefix ``""``), which
#: ``find_rnns`` lists and ``load(name=)``, ``--model`` and ``from_torch(prefix=)`` take (so do
#: they ``""``): one that can be typed, and no torch module's name (those hold no dot).
TOP = "."


def name_of(prefix: str) -> str:
    """What a group at ``prefix`` is called (:data:`TOP` at the top level)."""
    return prefix or TOP


def prefix_of(name: str) -> str:
    """The prefix a name given by a user picks (:data:`TOP`: the top level)."""
    return "" if name == TOP else name


class TorchFileError(FormatError):
    """A file that cannot be read as torch-style tensors (a torch.save file, a TorchScript
    archive, a safetensors or ``.npz`` file of torch names), or whose tensors are not the state
    of the ``torch.nn`` RNN module asked for."""


#: Layout kind -> the torch.nn parameter name stem.
TORCH_NAMES: dict[str, str] = {
    INPUT: "weight_ih",
    RECURRENT: "weight_hh",
    PROJECTION: "weight_hr",
    INPUT_BIAS: "bias_ih",
    RECURRENT_BIAS: "bias_hh",
}
#: The dtype names a model's tensors may have (what every converter casts from).
FLOATING = ("float16", "bfloat16", "float32", "float64")

_KEY = re.compile(
    r"^(?:(?P<prefix>.+)\.)?(?P<stem>weight_ih|weight_hh|bias_ih|bias_hh|weight_hr)"
    r"(?:_l(?P<layer>\d+)(?P<reverse>_reverse)?)?\Z",
    re.DOTALL,  # a prefix is any text, a newline too (printed escaped)
)
_MAX_LAYER_DIGITS = 9
_MODE_OF_GATES = {4: CUDNN_LSTM, 3: CUDNN_GRU, 1: None}  # None: tanh or relu, not recorded
_CLASS_OF_GATES = {4: "LSTM", 3: "GRU", 1: "RNN"}
_ACTIVATIONS = ("tanh", "relu")

#: name -> (shape, dtype name), as a header, an archive's pickle or a loaded state_dict says.
Shapes = Mapping[str, tuple[tuple[int, ...], str]]


def torch_name(layer: int, direction: int, kind: str, *, cell: bool = False) -> str:
    """The torch.nn parameter name of one stacked block: ``weight_ih_l0_reverse``, or a cell's
    ``weight_ih`` (``cell=True``, layer 0 forward only)."""
    if cell:
        return TORCH_NAMES[kind]
    return f"{TORCH_NAMES[kind]}_l{layer}{'_reverse' if direction else ''}"


def torch_state_shapes(spec: RNNSpec, *, bias: bool = True) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every parameter of the ``torch.nn`` module computing ``spec`` (without
    ``bias_*`` for ``bias=False``), from the layout table's stacked blocks; nothing is built.

    >>> spec = RNNSpec("lstm", 1, 4, 3, num_proj=2)
    >>> torch_state_shapes(spec)  # doctest: +NORMALIZE_WHITESPACE
    {'weight_ih_l0': (16, 3), 'weight_hh_l0': (16, 2), 'bias_ih_l0': (16,), 'bias_hh_l0': (16,),
     'weight_hr_l0': (2, 4)}
    """
    shapes: dict[str, tuple[int, ...]] = {}
    for p, fused in enumerate(layout_of(spec).fused):
        layer, direction = divmod(p, spec.num_dirs)
        blocks = [(INPUT, fused.w_ih), (RECURRENT, fused.w_hh)]
        blocks += [(INPUT_BIAS, fused.b_ih), (RECURRENT_BIAS, fused.b_hh)] if bias else []
        blocks += [(PROJECTION, fused.w_hr)]
        for kind, block in blocks:
            if block is not None:
                shapes[torch_name(layer, direction, kind)] = block.shape
    return shapes


@dataclass(frozen=True)
class StateGroup:
    """The tensors of one torch.nn RNN or RNN cell in a state_dict, and what they describe.

    ``members`` maps the module's own parameter names (``weight_ih_l0``, or a cell's
    ``weight_ih``) to the keys of the state_dict. Sizes are None where the tensors do not say
    them; ``problems`` lists every reason the tensors are not the state of one such module
    (empty when they are).
    """

    prefix: str  # "" at the top level
    cell: bool  # LSTMCell/GRUCell/RNNCell names (no _l{k})
    members: dict[str, str]
    torch_class: str | None = None  # "LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell"
    num_layers: int | None = None
    num_units: int | None = None
    input_size: int | None = None
    num_proj: int | None = None
    bidirectional: bool = False
    bias: bool = True
    dtype: str | None = None
    problems: tuple[str, ...] = field(default=())

    @property
    def gates(self) -> int | None:
        """G: 4 (LSTM), 3 (GRU), 1 (plain RNN); None where the shapes do not say."""
        base = (self.torch_class or "").removesuffix("Cell")
        return next((g for g, c in _CLASS_OF_GATES.items() if c == base), None)

    @property
    def mode(self) -> str | None:
        """``"lstm"`` or ``"gru"``; None for a plain RNN (tanh or relu) and for no RNN at all."""
        return None if self.gates is None else _MODE_OF_GATES[self.gates]

    def describe(self) -> str:
        """``torch.nn.LSTM 'encoder.rnn'``, ``torch.nn.GRUCell at the top level``, ..."""
        what = f"torch.nn.{self.torch_class}" if self.torch_class else "torch.nn RNN names"
        return f"{what} {quote(self.prefix)}" if self.prefix else f"{what} at the top level"

    def spec(self, mode: str, input_mode: str, owner: str) -> RNNSpec:
        """The spec of this group computed in ``mode`` (a plain RNN's tanh or relu chosen)."""
        layers, units, width = self.num_layers, self.num_units, self.input_size
        if self.problems or layers is None or units is None or width is None:
            raise ValueError(f"{owner}: {self.describe()}: {listed(list(self.problems))}.")
        return RNNSpec(
            mode,
            layers,
            units,
            width,
            input_mode,
            CUDNN_RNN_BIDIRECTION if self.bidirectional else CUDNN_RNN_UNIDIRECTION,
            self.num_proj,
            owner=owner,
        )


# -- finding the groups ---------------------------------------------------------------------------


def find_groups(shapes: Shapes) -> list[StateGroup]:
    """Every torch.nn RNN and RNN cell group of ``shapes`` (name -> (shape, dtype name)), in the
    order of their first names; see the module for what makes a group."""
    stacks: dict[str, dict[str, str]] = {}
    cells: dict[str, dict[str, str]] = {}
    order: dict[tuple[str, bool], None] = {}
    for key in shapes:
        m = _KEY.match(key)
        if m is None:
            continue
        prefix = m["prefix"] or ""
        is_cell = m["layer"] is None
        own = key[len(prefix) + 1 :] if prefix else key
        (cells if is_cell else stacks).setdefault(prefix, {})[own] = key
        order.setdefault((prefix, is_cell), None)
    found = [
        _cell_group(prefix, cells[prefix], shapes)
        if is_cell
        else _stack_group(prefix, stacks[prefix], shapes)
        for prefix, is_cell in order
    ]
    groups = [g for g in found if g is not None]
    seen: dict[str, int] = {}
    for g in groups:
        seen[g.prefix] = seen.get(g.prefix, 0) + 1
    clash = (
        "it holds both torch.nn.LSTM/GRU/RNN names (weight_ih_l0) and cell names (weight_ih) "
        "under one prefix; load the module and convert each submodule instead"
    )
    return [replace(g, problems=(*g.problems, clash)) if seen[g.prefix] > 1 else g for g in groups]


def _matrix(shapes: Shapes, key: str | None) -> tuple[int, int] | None:
    if key is None:
        return None
    shape = shapes[key][0]
    return (shape[0], shape[1]) if len(shape) == 2 else None


def _dtype_problems(members: Mapping[str, str], shapes: Shapes) -> tuple[str | None, list[str]]:
    """The group's one dtype name, and what is wrong with its dtypes."""
    dtypes = {shapes[k][1] for k in members.values()}
    odd = sorted(
        f"{own} ({shapes[k][1]})" for own, k in members.items() if shapes[k][1] not in FLOATING
    )
    if odd:
        return None, [f"tensors must be float16, bfloat16, float32 or float64, got {listed(odd)}"]
    if len(dtypes) > 1:
        return None, [f"tensors of one module must share a dtype, got {', '.join(sorted(dtypes))}"]
    return next(iter(dtypes)), []


def _cell_group(prefix: str, members: dict[str, str], shapes: Shapes) -> StateGroup | None:
    """An RNN cell's group, or None where ``weight_ih``/``weight_hh`` are not a cell's."""
    w_ih = _matrix(shapes, members.get("weight_ih"))
    w_hh = _matrix(shapes, members.get("weight_hh"))
    if w_ih is None or w_hh is None or w_hh[1] < 1:
        return None
    rows, units = w_hh
    gates = rows // units
    if gates not in _MODE_OF_GATES or rows != gates * units or w_ih[0] != rows:
        return None
    problems: list[str] = []
    if "weight_hr" in members:
        problems.append("unexpected weight_hr (torch.nn cells have no projection)")
    bias = "bias_ih" in members or "bias_hh" in members
    for name in ("bias_ih", "bias_hh") if bias else ():
        shape = shapes[members[name]][0] if name in members else None
        if shape is None:
            problems.append(f"missing {name}")
        elif shape != (rows,):
            problems.append(f"{name} has shape {list(shape)}, expected [{rows}]")
    dtype, odd = _dtype_problems(members, shapes)
    problems += odd
    if w_ih[1] < 1:
        problems.append(f"weight_ih has shape {list(w_ih)}: an input size of 0")
    return StateGroup(
        prefix,
        True,
        dict(members),
        _CLASS_OF_GATES[gates] + "Cell",
        1,
        units,
        w_ih[1],
        None,
        False,
        bias,
        dtype,
        tuple(problems),
    )


def _stack_group(prefix: str, members: dict[str, str], shapes: Shapes) -> StateGroup:
    """An RNN's group: interpreted from its layer-0 tensors, then every name and shape checked
    against the module those imply."""

    def bad(problem: str, torch_class: str | None = None) -> StateGroup:
        return StateGroup(prefix, False, dict(members), torch_class, problems=(problem,))

    w_ih = _matrix(shapes, members.get("weight_ih_l0"))
    w_hh = _matrix(shapes, members.get("weight_hh_l0"))
    has_hr = "weight_hr_l0" in members
    w_hr = _matrix(shapes, members.get("weight_hr_l0"))
    if w_ih is None or w_hh is None or (has_hr and w_hr is None):
        got = ", ".join(
            f"{n} {list(shapes[members[n]][0])}"
            for n in ("weight_ih_l0", "weight_hh_l0", "weight_hr_l0")
            if n in members
        )
        return bad(
            "weight_ih_l0, weight_hh_l0 (and weight_hr_l0) must be matrices, got "
            + (got or "none of them")
        )
    proj = w_hr[0] if w_hr is not None else None
    units = w_hr[1] if w_hr is not None else w_hh[1]
    gates = w_ih[0] // units if units else 0
    if gates not in _MODE_OF_GATES or w_ih[0] != gates * units or (proj and gates != 4):
        return bad(
            f"weight_ih_l0 {list(w_ih)} is not 4, 3 or 1 gates of {units} units"
            + (" (weight_hr_l0: projection is LSTM only)" if proj and gates != 4 else "")
        )
    torch_class = _CLASS_OF_GATES[gates]
    layers_of = [m["layer"] for m in map(_KEY.match, members.values()) if m and m["layer"]]
    if any(len(layer) > _MAX_LAYER_DIGITS for layer in layers_of):
        return bad(f"a name has a layer index of more than {_MAX_LAYER_DIGITS} digits", torch_class)
    layers = 1 + max(int(layer) for layer in layers_of)
    bidirectional = "weight_ih_l0_reverse" in members
    # Each layer-direction has at least two tensors: refuse a claim of more layers than the
    # names can hold before the expected names (one per layer) are listed.
    if layers * (2 if bidirectional else 1) * 2 > len(members):
        return bad(
            f"a name names layer {layers - 1}, but the group holds only {len(members)} tensors",
            torch_class,
        )
    dtype, problems = _dtype_problems(members, shapes)
    bias = "bias_ih_l0" in members or "bias_hh_l0" in members
    try:
        spec = RNNSpec(
            _MODE_OF_GATES[gates] or CUDNN_RNN_TANH,
            layers,
            units,
            w_ih[1],
            direction=CUDNN_RNN_BIDIRECTION if bidirectional else CUDNN_RNN_UNIDIRECTION,
            num_proj=proj,
            owner="torch.nn",
        )
    except (TypeError, ValueError) as err:
        return bad(clip(first_line(err)).removeprefix("torch.nn: "), torch_class)
    expected = torch_state_shapes(spec, bias=bias)
    problems += [f"missing {k}" for k in expected if k not in members]
    problems += [f"unexpected {k}" for k in members if k not in expected]
    problems += [
        f"{k} has shape {list(shapes[members[k]][0])}, expected {list(shape)}"
        for k, shape in expected.items()
        if k in members and tuple(shapes[members[k]][0]) != shape
    ]
    return StateGroup(
        prefix,
        False,
        dict(members),
        torch_class,
        layers,
        units,
        w_ih[1],
        proj,
        bidirectional,
        bias,
        dtype,
        tuple(problems),
    )


# -- choosing one, and what to call it ------------------------------------------------------------


def select(
    groups: list[StateGroup],
    prefix: str | None,
    where: str,
    owner: str,
    error: type[ValueError] = ValueError,
    *,
    holds: str | None = None,
) -> StateGroup:
    """The group at ``prefix`` (the only one when None), or ``error`` (a ValueError) that lists
    the groups there are; ``where`` names the source (``"the state_dict"``, a file), ``holds``
    what it holds instead, in words (a refusal of a source with no RNN says it)."""
    names = [quote(name_of(g.prefix)) for g in groups]
    if prefix is None:
        if len(groups) == 1:
            return groups[0]
        if not groups:
            instead = f"; it holds {holds}" if holds else ""
            raise error(
                f"{owner}: {where} holds no torch.nn LSTM, GRU, RNN or RNN cell state (names "
                f"such as weight_ih_l0 or weight_ih, under any prefix){instead}."
            )
        raise error(
            f"{owner}: {where} holds {len(groups)} RNNs ({listed(names, 8)}); pick one with "
            "prefix=NAME."
        )
    if not isinstance(prefix, str):
        raise TypeError(f"{owner}: prefix must be a str or None, got {type(prefix).__name__}.")
    chosen = [g for g in groups if g.prefix == prefix] or [
        g for g in groups if g.prefix == prefix_of(prefix)
    ]
    if not chosen:
        there = f"it holds {listed(names, 8)}" if groups else f"it holds none ({holds})"
        there = there if groups or holds else "it holds none"
        raise error(f"{owner}: {where} holds no RNN at prefix {quote(prefix)}; {there}.")
    return chosen[0]


def plain_mode(
    recorded: str | None, activation: str | None, what: str, owner: str
) -> tuple[str, bool]:
    """``(mode, known)`` of a plain RNN: ``rnn_tanh``/``rnn_relu`` from the nonlinearity a file
    ``recorded``, else the caller's ``activation``; ``("rnn_tanh", False)`` when neither says.
    A contradiction, or an activation other than tanh and relu, is a ValueError."""
    if activation is not None and activation not in _ACTIVATIONS:
        raise ValueError(f"{owner}: activation must be 'tanh' or 'relu', got {quote(activation)}.")
    if recorded is not None and activation is not None and recorded != activation:
        raise ValueError(
            f"{owner}: {what} records nonlinearity {recorded!r}, but activation="
            f"{activation!r} was given; leave activation out."
        )
    chosen = recorded or activation
    if chosen is None:
        return CUDNN_RNN_TANH, False
    return (CUDNN_RNN_TANH if chosen == "tanh" else CUDNN_RNN_RELU), True


def found_rnn(
    group: StateGroup,
    fmt: str,
    where: str,
    *,
    recorded: str | None = None,
    activation: str | None = None,
) -> FoundRNN:
    """The :class:`~cudnn_rnn.io.found.FoundRNN` of ``group`` in a file of kind ``fmt``
    (``where``: the group's place in words). A plain RNN whose nonlinearity neither the file
    (``recorded``) nor ``activation`` says is listed as ``rnn_tanh`` with
    ``details["activation_known"] = False``: loading it needs ``activation=``."""
    details: dict[str, object] = {
        "torch_class": group.torch_class,
        "bias": group.bias,
        "dtype": group.dtype,
        "tensors": len(group.members),
    }
    mode = group.mode
    if group.gates == 1:
        # What the file records wins over the caller's word in a listing (a load refuses the
        # contradiction).
        mode, known = plain_mode(
            recorded, None if recorded else activation, group.describe(), "find_rnns"
        )
        details["activation_known"] = known
        if not known:
            where += " (tanh or relu is not recorded: tanh shown, pass activation='relu' if so)"
    problems = group.problems
    return FoundRNN(
        name=name_of(group.prefix),
        where=where,
        format=fmt,
        mode=mode,
        num_layers=group.num_layers,
        num_units=group.num_units,
        input_size=group.input_size,
        direction=None
        if group.num_layers is None
        else (CUDNN_RNN_BIDIRECTION if group.bidirectional else CUDNN_RNN_UNIDIRECTION),
        num_proj=group.num_proj,
        computable=not problems,
        reasons=tuple(f"not the state of one {group.describe()}: {p}" for p in problems),
        details=details,
    )
