"""TF1's canonical checkpoint names: the one module that builds and parses them.

``tf.contrib.cudnn_rnn``'s saveables store a model under the variable names of TF's step-by-step
cells, run by ``dynamic_rnn`` over a ``MultiRNNCell`` (unidirectional) or by
``stack_bidirectional_dynamic_rnn`` (bidirectional). docs/checkpoint_format.md is normative; per
layer ``l`` (0-based)::

    unidirectional: [<scope>/]rnn/multi_rnn_cell/cell_<l>/<cell>/<variable>
    bidirectional:  [<scope>/]stack_bidirectional_rnn/cell_<l>/bidirectional_rnn/<fw|bw>/
                    <cell>/<variable>

    <cell>      cudnn_compatible_lstm_cell (lstm), cudnn_compatible_gru_cell (gru),
                basic_rnn_cell (rnn_tanh and rnn_relu: the name does not say which)
    <variable>  lstm, rnn_*  kernel, bias; lstm with num_proj also projection/kernel
                gru          gates/kernel, gates/bias, candidate/input_projection/{kernel,bias},
                             candidate/hidden_projection/{kernel,bias}
                lstm with peepholes (a variant; our .safetensors only) also w_i_diag, w_f_diag,
                w_o_diag, as TF's LSTMCell names them

Everything here is data and string functions (no torch): the saveables, the compatible cells and
their stacks build their names with :func:`cell_scope` / :func:`variable_name` and the tables
below, and the command line reads names back with :func:`parse`, so what one writes the other
reads. ``str(parse(name)) == name`` for every name :func:`parse` accepts.

>>> variable_name(1, CELL_NAMES["gru"], GATES_KERNEL, direction=BW, scope="m")
'm/stack_bidirectional_rnn/cell_1/bidirectional_rnn/bw/cudnn_compatible_gru_cell/gates/kernel'
>>> parse("m/rnn/multi_rnn_cell/cell_0/basic_rnn_cell/kernel")
TFName(scope='m', layer=0, direction=None, cell='basic_rnn_cell', variable='kernel')
>>> parse("global_step") is None
True

Older names (docs/checkpoint_format.md, "Older releases"), read as aliases of these:

    TF 1.3 (RNNParamsSaveable), unidirectional LSTM and GRU only:
        [<scope>/]multi_rnn_cell/cell_<l>/<cell>/<variable>     (no rnn/)
        plus the exact biases bW, bR of the summed gates:
        lstm  .../cudnn_compatible_lstm_cell/bias_cudnn_0, bias_cudnn_1   [4H], gates i, c, f, o
        gru   .../cudnn_compatible_gru_cell/bias_cudnn 0, bias_cudnn 1    [2H], gates r, u
    TF 1.8-1.15 object-based (tf.train.Checkpoint) unidirectional CudnnLSTM:
        <path>/kernel/.ATTRIBUTES/VARIABLE_VALUE            (one layer)
        <path>/cell-<l>/kernel/.ATTRIBUTES/VARIABLE_VALUE   (any number of layers)

>>> str(legacy_name(parse("m/rnn/multi_rnn_cell/cell_1/cudnn_compatible_gru_cell/gates/bias")))
'm/multi_rnn_cell/cell_1/cudnn_compatible_gru_cell/gates/bias'
>>> object_key("model", 0, BIAS, num_layers=2)
'model/cell-0/bias/.ATTRIBUTES/VARIABLE_VALUE'
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from cudnn_rnn.core.constants import CUDNN_GRU, CUDNN_LSTM, CUDNN_RNN_RELU, CUDNN_RNN_TANH

__all__ = [
    "BASIC_RNN_CELL",
    "BIAS",
    "BIAS_NAMES",
    "BIDIRECTIONAL_STACK",
    "BW",
    "CANDIDATE_HIDDEN_BIAS",
    "CANDIDATE_HIDDEN_KERNEL",
    "CANDIDATE_INPUT_BIAS",
    "CANDIDATE_INPUT_KERNEL",
    "CELL_MODES",
    "CELL_NAMES",
    "DIRECTIONS",
    "EXACT_BIAS_NAMES",
    "FW",
    "GATES_BIAS",
    "GATES_KERNEL",
    "GRU_CELL",
    "KERNEL",
    "KERNEL_NAMES",
    "LEGACY_CELLS",
    "LSTM_CELL",
    "OBJECT_VALUE",
    "PEEPHOLE_NAMES",
    "PROJECTION_KERNEL",
    "UNIDIRECTIONAL_STACK",
    "LegacyName",
    "ObjectKey",
    "TFName",
    "cell_scope",
    "direction_name",
    "exact_bias_names",
    "is_kernel",
    "legacy_name",
    "object_key",
    "parse",
    "parse_legacy",
    "parse_object_key",
    "scope_prefix",
    "variable_name",
]

# -- cells ------------------------------------------------------------------------------------

LSTM_CELL = "cudnn_compatible_lstm_cell"
GRU_CELL = "cudnn_compatible_gru_cell"
BASIC_RNN_CELL = "basic_rnn_cell"

#: The cell scope of each cuDNN mode.
CELL_NAMES: Mapping[str, str] = MappingProxyType(
    {
        CUDNN_LSTM: LSTM_CELL,
        CUDNN_GRU: GRU_CELL,
        CUDNN_RNN_TANH: BASIC_RNN_CELL,
        CUDNN_RNN_RELU: BASIC_RNN_CELL,
    }
)
#: The modes a cell scope may stand for, the likelier first (``basic_rnn_cell``: TF's default
#: activation, tanh, then relu).
CELL_MODES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        LSTM_CELL: (CUDNN_LSTM,),
        GRU_CELL: (CUDNN_GRU,),
        BASIC_RNN_CELL: (CUDNN_RNN_TANH, CUDNN_RNN_RELU),
    }
)

# -- variables (relative to the cell scope) ---------------------------------------------------

KERNEL = "kernel"
BIAS = "bias"
#: LSTM with ``num_proj`` (an extension of r1.15's saveables, named as TF's ``LSTMCell``).
PROJECTION_KERNEL = "projection/kernel"
GATES_KERNEL = "gates/kernel"
GATES_BIAS = "gates/bias"
CANDIDATE_INPUT_KERNEL = "candidate/input_projection/kernel"
CANDIDATE_INPUT_BIAS = "candidate/input_projection/bias"
CANDIDATE_HIDDEN_KERNEL = "candidate/hidden_projection/kernel"
CANDIDATE_HIDDEN_BIAS = "candidate/hidden_projection/bias"

#: An LSTM's peephole weights ``[H]`` by the gate they feed (cuDNN's ``P_i, P_f, P_o``): the
#: names of TF's ``LSTMCell(use_peepholes=True)`` and of the block cells' ``use_peephole``. Our
#: checkpoints store a peephole variant's under the cell scope with these names.
PEEPHOLE_NAMES: Mapping[str, str] = MappingProxyType(
    {"i": "w_i_diag", "f": "w_f_diag", "o": "w_o_diag"}
)

_GRU_KERNELS = (GATES_KERNEL, CANDIDATE_INPUT_KERNEL, CANDIDATE_HIDDEN_KERNEL)
_GRU_BIASES = (GATES_BIAS, CANDIDATE_INPUT_BIAS, CANDIDATE_HIDDEN_BIAS)

#: One layer-direction's kernels per mode, in the order TF's saveables list them (the one that
#: holds the gates first, then the input and the hidden kernel of the GRU candidate).
#: ``PROJECTION_KERNEL`` is not listed: it exists only with ``num_proj``.
KERNEL_NAMES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        CUDNN_LSTM: (KERNEL,),
        CUDNN_GRU: _GRU_KERNELS,
        CUDNN_RNN_TANH: (KERNEL,),
        CUDNN_RNN_RELU: (KERNEL,),
    }
)
#: The biases per mode, in the order of their kernels.
BIAS_NAMES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        CUDNN_LSTM: (BIAS,),
        CUDNN_GRU: _GRU_BIASES,
        CUDNN_RNN_TANH: (BIAS,),
        CUDNN_RNN_RELU: (BIAS,),
    }
)


def is_kernel(variable: str) -> bool:
    """Whether a variable (relative to the cell scope) is a kernel; the others are biases.

    >>> is_kernel(CANDIDATE_HIDDEN_KERNEL), is_kernel(GATES_BIAS)
    (True, False)
    """
    return variable.rsplit("/", 1)[-1] == KERNEL


# -- stacks -----------------------------------------------------------------------------------

#: ``dynamic_rnn``'s scope ``rnn`` around a ``MultiRNNCell``'s scope.
UNIDIRECTIONAL_STACK = "rnn/multi_rnn_cell"
#: ``stack_bidirectional_dynamic_rnn``'s scope.
BIDIRECTIONAL_STACK = "stack_bidirectional_rnn"
FW = "fw"
BW = "bw"
#: Direction index (0 forward, 1 backward, as in the layout's pseudo-layers) -> its name.
DIRECTIONS = (FW, BW)


def direction_name(direction: int, bidirectional: bool) -> str | None:
    """The direction part of a name: None for a unidirectional model, else ``fw``/``bw``.

    >>> direction_name(0, False), direction_name(1, True)
    (None, 'bw')
    """
    return DIRECTIONS[direction] if bidirectional else None


def scope_prefix(scope: str | None) -> str:
    """``"<scope>/"``, or ``""`` for no scope (None or ``""``).

    >>> scope_prefix("main"), scope_prefix(None)
    ('main/', '')
    """
    return f"{scope}/" if scope else ""


def cell_scope(
    layer: int, cell: str, *, direction: str | None = None, scope: str | None = None
) -> str:
    """The full scope of one cell's variables (no trailing ``/``).

    ``direction`` None names a layer of a ``MultiRNNCell``; ``fw``/``bw`` one direction of a
    layer of ``stack_bidirectional_dynamic_rnn``.

    >>> cell_scope(0, LSTM_CELL)
    'rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell'
    >>> cell_scope(2, BASIC_RNN_CELL, direction=FW, scope="s")
    's/stack_bidirectional_rnn/cell_2/bidirectional_rnn/fw/basic_rnn_cell'
    """
    if type(layer) is not int or layer < 0:
        raise ValueError(f"tf_names: layer must be an int >= 0, got {layer!r}.")
    if cell not in CELL_MODES:
        raise ValueError(f"tf_names: cell must be one of {', '.join(CELL_MODES)}, got {cell!r}.")
    if direction is None:
        stack = f"{UNIDIRECTIONAL_STACK}/cell_{layer}"
    elif direction in DIRECTIONS:
        stack = f"{BIDIRECTIONAL_STACK}/cell_{layer}/bidirectional_rnn/{direction}"
    else:
        raise ValueError(f"tf_names: direction must be None, 'fw' or 'bw', got {direction!r}.")
    return f"{scope_prefix(scope)}{stack}/{cell}"


def variable_name(
    layer: int,
    cell: str,
    variable: str,
    *,
    direction: str | None = None,
    scope: str | None = None,
) -> str:
    """The full checkpoint name of one variable (see :func:`cell_scope`)."""
    return f"{cell_scope(layer, cell, direction=direction, scope=scope)}/{variable}"


# -- parsing ----------------------------------------------------------------------------------

#: A layer number as TF writes it (no leading zeros), of at most 18 digits: larger ones are no
#: model's and are not worth turning into an int.
_LAYER = r"0|[1-9][0-9]{0,17}"
_NAME = re.compile(
    r"(?:(?P<scope>.+)/)?"  # greedy: a scope may itself contain a stack's words
    rf"(?:{re.escape(UNIDIRECTIONAL_STACK)}/cell_(?P<layer>{_LAYER})"
    rf"|{re.escape(BIDIRECTIONAL_STACK)}/cell_(?P<bilayer>{_LAYER})"
    rf"/bidirectional_rnn/(?P<direction>{'|'.join(DIRECTIONS)}))"
    rf"/(?P<cell>{'|'.join(map(re.escape, CELL_MODES))})/(?P<variable>.+)"
)


@dataclass(frozen=True)
class TFName:
    """One canonical name, taken apart; ``str()`` builds it again.

    >>> name = TFName(None, 3, BW, GRU_CELL, CANDIDATE_INPUT_BIAS)
    >>> name.stack, name.bidirectional
    ('stack_bidirectional_rnn', True)
    >>> str(name).split("/")[2:5]
    ['bidirectional_rnn', 'bw', 'cudnn_compatible_gru_cell']
    """

    scope: str | None  # None: no scope
    layer: int
    direction: str | None  # None: unidirectional; else "fw" or "bw"
    cell: str  # a key of CELL_MODES
    variable: str  # relative to the cell scope, e.g. "kernel" or "gates/bias"

    @property
    def bidirectional(self) -> bool:
        return self.direction is not None

    @property
    def stack(self) -> str:
        """``UNIDIRECTIONAL_STACK`` or ``BIDIRECTIONAL_STACK``."""
        return BIDIRECTIONAL_STACK if self.bidirectional else UNIDIRECTIONAL_STACK

    @property
    def cell_scope(self) -> str:
        return cell_scope(self.layer, self.cell, direction=self.direction, scope=self.scope)

    def __str__(self) -> str:
        return f"{self.cell_scope}/{self.variable}"


def parse(name: str) -> TFName | None:
    """``name`` taken apart, or None when it is not a canonical name (e.g. ``global_step``).

    Only the layout of the name is checked, not whether ``variable`` belongs to the cell; no
    part may hold a line break. When the words of a stack occur more than once, the last
    occurrence is the stack and what comes before it the scope.

    >>> parse("a/rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/projection/kernel").variable
    'projection/kernel'
    >>> parse("rnn/multi_rnn_cell/cell_01/basic_rnn_cell/bias") is None  # TF writes cell_1
    True
    """
    m = _NAME.fullmatch(name)
    if m is None:
        return None
    layer = m["layer"] if m["layer"] is not None else m["bilayer"]
    return TFName(m["scope"], int(layer), m["direction"], m["cell"], m["variable"])


# -- older releases ---------------------------------------------------------------------------
#
# TF 1.0-1.2's RNNParamsSaveable saved every mode under the graph names of the tensors of a
# CudnnRNNParamsToCanonical op (``param.name``, e.g. ``CudnnRNNParamsToCanonical:0``), TF 1.3's
# saved bidirectional models and RNN tanh/relu the same way: names of an op in a graph, not of a
# model, so they are not read (docs/checkpoint_format.md says why). TF 1.3 named unidirectional
# LSTMs and GRUs as below; TF 1.4 on wrote the canonical names above.

#: The cells TF 1.3 saved under :class:`LegacyName`s (unidirectional LSTM and GRU).
LEGACY_CELLS = (LSTM_CELL, GRU_CELL)
#: TF 1.3's ``MultiRNNCell`` scope, without ``dynamic_rnn``'s ``rnn/``.
_LEGACY_STACK = "multi_rnn_cell"
#: The exact biases TF 1.3 saved beside the summed one, relative to the cell scope: ``bW`` and
#: ``bR`` of the summed gates (LSTM ``[4H]`` in TF's order i, c, f, o; GRU ``[2H]``, r then u).
#: The GRU's have a space, as TF 1.3 wrote them (``"bias_cudnn %d"``).
EXACT_BIAS_NAMES: Mapping[str, tuple[str, str]] = MappingProxyType(
    {LSTM_CELL: ("bias_cudnn_0", "bias_cudnn_1"), GRU_CELL: ("bias_cudnn 0", "bias_cudnn 1")}
)
#: The summed bias each pair of exact biases adds up to.
_SUMMED_BIAS = MappingProxyType({LSTM_CELL: BIAS, GRU_CELL: GATES_BIAS})

_LEGACY = re.compile(
    r"(?:(?P<scope>.+)/)?"
    rf"{_LEGACY_STACK}/cell_(?P<layer>{_LAYER})"
    rf"/(?P<cell>{'|'.join(map(re.escape, LEGACY_CELLS))})/(?P<variable>.+)"
)


@dataclass(frozen=True)
class LegacyName:
    """One TF 1.3 name of a unidirectional LSTM or GRU; ``str()`` builds it.

    >>> str(LegacyName("s", 0, LSTM_CELL, "bias_cudnn_1"))
    's/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/bias_cudnn_1'
    """

    scope: str | None
    layer: int
    cell: str  # one of LEGACY_CELLS
    variable: str

    def __str__(self) -> str:
        return (
            f"{scope_prefix(self.scope)}{_LEGACY_STACK}/cell_{self.layer}/{self.cell}/"
            f"{self.variable}"
        )


def legacy_name(name: TFName) -> LegacyName | None:
    """The TF 1.3 name of a canonical one, or None where TF 1.3 had none of this form
    (bidirectional models, RNN tanh/relu).

    >>> legacy_name(parse("rnn/multi_rnn_cell/cell_0/basic_rnn_cell/kernel")) is None
    True
    """
    if name.bidirectional or name.cell not in LEGACY_CELLS:
        return None
    return LegacyName(name.scope, name.layer, name.cell, name.variable)


def exact_bias_names(name: TFName) -> tuple[str, str] | None:
    """TF 1.3's names of the exact ``(bW, bR)`` behind the summed bias ``name``; None when
    ``name`` is not a summed bias TF 1.3 saved them for.

    >>> exact_bias_names(parse("rnn/multi_rnn_cell/cell_2/cudnn_compatible_lstm_cell/bias"))[0]
    'multi_rnn_cell/cell_2/cudnn_compatible_lstm_cell/bias_cudnn_0'
    """
    legacy = legacy_name(name)
    if legacy is None or _SUMMED_BIAS[legacy.cell] != name.variable:
        return None
    w, r = (LegacyName(name.scope, name.layer, name.cell, v) for v in EXACT_BIAS_NAMES[name.cell])
    return str(w), str(r)


def parse_legacy(name: str) -> LegacyName | None:
    """A TF 1.3 name taken apart, or None. A name :func:`parse` accepts is canonical, not
    legacy (``s/rnn/multi_rnn_cell/...`` is scope ``s``, not ``s/rnn``).

    >>> parse_legacy("enc/multi_rnn_cell/cell_0/cudnn_compatible_gru_cell/bias_cudnn 1").variable
    'bias_cudnn 1'
    >>> parse_legacy("rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/kernel") is None
    True
    """
    if parse(name) is not None:
        return None
    m = _LEGACY.fullmatch(name)
    if m is None:
        return None
    return LegacyName(m["scope"], int(m["layer"]), m["cell"], m["variable"])


# -- object-based checkpoints -----------------------------------------------------------------
#
# TF 1.8-1.15's CudnnLSTM (unidirectional only; the other layers raised NotImplementedError)
# tracked its canonical tensors as objects for tf.train.Checkpoint: ``kernel`` and ``bias`` of a
# one-layer model directly, and ``cell-<l>`` objects holding ``kernel`` and ``bias`` for every
# layer, as a MultiRNNCell of CudnnCompatibleLSTMCells is tracked. A tensor's key is its object's
# path from the checkpoint's root, ``/``-joined, then ``/.ATTRIBUTES/VARIABLE_VALUE``.

#: The attribute part of an object-based key of a variable.
OBJECT_VALUE = ".ATTRIBUTES/VARIABLE_VALUE"
_OBJECT_CELL = "cell-"
_OBJECT = re.compile(
    rf"(?P<path>.+?)(?:/{_OBJECT_CELL}(?P<layer>{_LAYER}))?"
    rf"/(?P<variable>{KERNEL}|{BIAS})/{re.escape(OBJECT_VALUE)}"
)


@dataclass(frozen=True)
class ObjectKey:
    """One object-based key of a CudnnLSTM's tensor; ``str()`` builds it.

    ``layer`` None is the one-layer model's direct ``kernel``/``bias``.

    >>> str(ObjectKey("net/lstm", None, KERNEL))
    'net/lstm/kernel/.ATTRIBUTES/VARIABLE_VALUE'
    """

    path: str
    layer: int | None
    variable: str  # KERNEL or BIAS

    def __str__(self) -> str:
        cell = "" if self.layer is None else f"{_OBJECT_CELL}{self.layer}/"
        return f"{self.path}/{cell}{self.variable}/{OBJECT_VALUE}"


def object_key(path: str, layer: int, variable: str, *, num_layers: int) -> str:
    """The key TF 1.x's ``tf.train.Checkpoint`` gave a unidirectional CudnnLSTM's ``variable``
    (``kernel`` or ``bias``) of ``layer`` when the layer sits at ``path``: a one-layer model's
    are its direct ``kernel``/``bias`` (the shortest path to them), the others' ``cell-<l>/``.

    >>> object_key("cell", 0, KERNEL, num_layers=1)
    'cell/kernel/.ATTRIBUTES/VARIABLE_VALUE'
    """
    if variable not in (KERNEL, BIAS):
        raise ValueError(f"tf_names: variable must be kernel or bias, got {variable!r}.")
    return str(ObjectKey(path, None if num_layers == 1 else layer, variable))


def parse_object_key(key: str) -> ObjectKey | None:
    """An object-based key of a ``kernel`` or ``bias`` taken apart, or None.

    >>> parse_object_key("model/cell-2/bias/.ATTRIBUTES/VARIABLE_VALUE")
    ObjectKey(path='model', layer=2, variable='bias')
    >>> parse_object_key("save_counter/.ATTRIBUTES/VARIABLE_VALUE") is None
    True
    """
    m = _OBJECT.fullmatch(key)
    if m is None:
        return None
    return ObjectKey(m["path"], None if m["layer"] is None else int(m["layer"]), m["variable"])


# -- TF's standard cells (tf.compat.v1.nn.rnn_cell; formats.tf1.cells reads them) -----------------

#: The two naming generations of TF's cells' variables: ``kernel``/``bias`` (TF >= 1.0's layers)
#: and ``weights``/``biases`` (before).
STANDARD_NEW, STANDARD_OLD = "kernel/bias", "weights/biases (TF 1.0)"
#: A standard cell's variable roles -> {generation: its name under the cell's scope}.
STANDARD_CELL_VARIABLES: Mapping[str, Mapping[str, str]] = MappingProxyType(
    {
        "kernel": {STANDARD_NEW: KERNEL, STANDARD_OLD: "weights"},
        "bias": {STANDARD_NEW: BIAS, STANDARD_OLD: "biases"},
        "projection": {STANDARD_NEW: PROJECTION_KERNEL, STANDARD_OLD: "projection/weights"},
        GATES_KERNEL: {STANDARD_NEW: GATES_KERNEL, STANDARD_OLD: "gates/weights"},
        GATES_BIAS: {STANDARD_NEW: GATES_BIAS, STANDARD_OLD: "gates/biases"},
        "candidate/kernel": {STANDARD_NEW: "candidate/kernel", STANDARD_OLD: "candidate/weights"},
        "candidate/bias": {STANDARD_NEW: "candidate/bias", STANDARD_OLD: "candidate/biases"},
    }
)
#: ``[PARENT/]multi_rnn_cell/cell_L``: a MultiRNNCell's layer ``L`` under its parent scope.
STANDARD_MULTI = re.compile(
    r"(?:(?P<parent>.+)/)?" + _LEGACY_STACK + r"/cell_(?P<layer>0|[1-9][0-9]{0,5})"
)
