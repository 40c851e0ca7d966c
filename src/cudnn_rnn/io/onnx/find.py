"""Where the RNNs of an ONNX model are, and what each computes.

:func:`list_rnns` walks every graph of a model (the main graph, ``If``/``Loop``/``Scan``
subgraphs, model-local functions at each call; at most :data:`MAX_NESTING` deep, each step
charged to the operation's work budget), examines each RNN node (:func:`examine`: its mode,
direction and the variant of cuDNN's math its attributes describe
(:mod:`~cudnn_rnn.io.onnx.variants`; a note of its record says it), sizes, weights and every
reason it cannot be read), groups nodes that form one stack of layers, and names each RNN by
its path: the :class:`~cudnn_rnn.io.found.FoundRNN` records ``find_rnns`` returns and the
targets a name picks.

RNN nodes are the standard LSTM, GRU and RNN operators; the quantized operators of
:data:`QUANTIZED` (onnxruntime's ``com.microsoft`` ``DynamicQuantizeLSTM``, what its
``quantize_dynamic`` writes for an LSTM), read with their weights dequantized and a note that
says so; and any other operator, of any domain, whose type names an LSTM, a GRU or an RNN
(``AttnLSTM``, ``GRUUnit``, an ``LSTM`` of another domain): listed with what its attributes say
(``hidden_size``, ``direction``) and the reason it is not computed, never skipped.
"""

from __future__ import annotations

import importlib
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cudnn_rnn.core.constants import (
    CUDNN_GRU,
    CUDNN_LSTM,
    CUDNN_RNN_BIDIRECTION,
    CUDNN_RNN_UNIDIRECTION,
)
from cudnn_rnn.core.modes import MODES
from cudnn_rnn.core.variant import CUDNN, Variant
from cudnn_rnn.io.files.escaping import clip, escape
from cudnn_rnn.io.files.sniffing import ONNX
from cudnn_rnn.io.found import FoundRNN
from cudnn_rnn.io.onnx.eval import (
    LAYOUT_OPS,
    RUN_COST,
    STATE_OPS,
    STEP_COST,
    Evaluator,
    Scope,
    _Unevaluable,
    product,
)
from cudnn_rnn.io.onnx.file import GRAPH, GRAPHS, STANDARD_DOMAINS, Loaded, OnnxFormatError
from cudnn_rnn.io.onnx.graph import ONNX_OPS
from cudnn_rnn.io.onnx.variants import ATTRIBUTES, node_math

__all__ = [
    "MAX_NESTING",
    "MAX_WALK",
    "QUANTIZED",
    "RNN_OPS",
    "STATE_INPUTS",
    "Listing",
    "Node",
    "Seen",
    "Site",
    "Target",
    "examine",
    "list_rnns",
    "rnn_kind",
    "stack_record",
]

#: The RNN operators' types, and their gates per direction.
RNN_OPS = frozenset(op.op_type for op in ONNX_OPS.values())
_GATE_COUNT = {m.onnx_op: m.num_gates for m in MODES.values()}
#: Quantized RNN operators read with their weights dequantized: (domain, op_type) -> the
#: standard operator they compute. onnxruntime's contrib DynamicQuantizeLSTM takes the LSTM's
#: inputs and attributes (no ``layout``), its W [D, I, 4H] and R [D, H, 4H] (transposed from
#: the LSTM's) int8 or uint8, and their scales and zero points per direction ([D]) or per
#: output channel ([D, 4H]) as inputs 8 to 11.
QUANTIZED = {("com.microsoft", "DynamicQuantizeLSTM"): "LSTM"}
#: The type of an operator that is an RNN of some kind, whatever its domain.
_RNN_LIKE = re.compile("LSTM|GRU|RNN", re.IGNORECASE)
#: The attributes of an RNN node that :func:`examine` reads (those of its math: variants.py's).
_ATTRIBUTES = ("hidden_size", "layout", *ATTRIBUTES)
#: A node's op type -> the cuDNN mode a record names when its activations cannot be read.
_KIND = {"LSTM": CUDNN_LSTM, "GRU": CUDNN_GRU}
#: The RNN node inputs that carry states or lengths: (input index, name).
STATE_INPUTS = ((4, "sequence_lens"), (5, "initial_h"), (6, "initial_c"))
_FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
#: Nodes visited in all (graphs, subgraphs, each call of a function) before find_rnns refuses.
MAX_WALK = 500_000
#: Graphs and function calls nested in each other at most (onnx's checker refuses function
#: calls nested more than 100 deep, protobuf parses 100 levels of messages: 3 per subgraph).
MAX_NESTING = 100
#: Elements of the probe that checks the layout ops between two stacked RNN nodes.
_MAX_PROBE = 1 << 18


@dataclass
class Node:
    """One RNN node of a model read by from_onnx: what it computes and its weights (arrays
    that hold nothing of the model: the model need not be kept to convert them)."""

    name: str
    op_type: str
    mode: str
    hidden: int
    dirs: int
    layout: int
    w: np.ndarray
    r: np.ndarray
    b: np.ndarray | None
    variant: Variant = CUDNN
    p: np.ndarray | None = None  # LSTM peepholes [D, 3H] (ONNX's i, o, f), with variant's


@dataclass
class Seen:
    """What one RNN node computes, its weights, and every reason cuDNN's math does not.

    ``reasons`` refuse it whichever way it is read; ``shape_reasons`` (weights that do not fit
    each other) and ``state_reasons`` (constant states or lengths) are checked by a whole-graph
    read as a stack instead.
    """

    op_type: str
    mode: str | None  # our mode, where the attributes say what it computes (variants.py)
    hidden: int | None
    dirs: int
    direction: str | None
    layout: int
    w: np.ndarray | None
    r: np.ndarray | None
    b: np.ndarray | None
    reasons: list[str]
    shape_reasons: list[str]
    state_reasons: list[str]
    notes: list[str] = field(default_factory=list)  # what a user must know (dequantized)
    quantized: str | None = None  # the dtype of quantized weights (read dequantized)
    variant: Variant | None = None  # what it computes beyond the mode's cuDNN math
    p: np.ndarray | None = None  # LSTM peepholes [D, 3H] when not all zeros

    @property
    def all_reasons(self) -> list[str]:
        return [*self.reasons, *self.shape_reasons, *self.state_reasons]

    @property
    def dtype(self) -> str | None:
        return None if self.w is None else self.w.dtype.name

    @property
    def input_size(self) -> int | None:
        return None if self.w is None or self.w.ndim != 3 else int(self.w.shape[-1])

    def as_node(self, name: str) -> Node:
        if (
            self.mode is None
            or self.variant is None
            or self.hidden is None
            or self.w is None
            or self.r is None
        ):
            raise RuntimeError(f"{name!r}: read with reasons {self.all_reasons}.")  # a bug
        return Node(
            name,
            self.op_type,
            self.mode,
            self.hidden,
            self.dirs,
            self.layout,
            self.w,
            self.r,
            self.b,
            self.variant,
            self.p,
        )


def rnn_kind(node: Any) -> str | None:
    """What kind of RNN node ``node`` is: ``"standard"`` (ONNX's LSTM, GRU, RNN),
    ``"quantized"`` (:data:`QUANTIZED`), ``"other"`` (another operator whose type names an
    LSTM, a GRU or an RNN, of any domain), or None (no RNN)."""
    if node.domain in STANDARD_DOMAINS and node.op_type in RNN_OPS:
        return "standard"
    if (node.domain, node.op_type) in QUANTIZED:
        return "quantized"
    return "other" if _RNN_LIKE.search(_text(node.op_type)) else None


def examine(onnx: Any, node: Any, scope: Scope, *, states: bool) -> Seen:
    """Every fact about an RNN node (:func:`rnn_kind`): its mode, direction and variant
    (:func:`~cudnn_rnn.io.onnx.variants.node_math`), its weights, and every reason it cannot be
    read; with ``states``, constant initial states and lengths are reasons too."""
    kind = rnn_kind(node)
    if kind == "other":
        return _other(node, scope)
    attrs = scope.attributes(node, _ATTRIBUTES)
    op = QUANTIZED[(node.domain, node.op_type)] if kind == "quantized" else node.op_type
    reasons: list[str] = []  # the weights'; the attributes' go first (below)

    def weight(index: int, what: str, dtypes: tuple[str, ...] = _FLOAT_DTYPES) -> Any:
        name = node.input[index] if len(node.input) > index else ""
        if name == "":
            return None
        try:
            value = scope.constant(name)
        except _Unevaluable as err:
            reasons.append(f"its {what} input {name!r} cannot be evaluated: {err.what}")
            return None
        if value is None:
            reasons.append(
                f"its {what} input {name!r} is computed from the graph's run-time inputs, not "
                "from constants; only constant weights can be read"
            )
            return None
        if value.dtype.name not in dtypes:
            kinds = ", ".join(dtypes[:-1]) + " or " * (len(dtypes) > 1) + dtypes[-1]
            whose = "RNN weights are" if dtypes == _FLOAT_DTYPES else "it must be"
            reasons.append(f"its {what} input {name!r} is {value.dtype.name}; {whose} {kinds}")
            return None
        return value

    notes: list[str] = []
    quantized = None
    if kind == "quantized":
        w, r, quantized = _dequantized(node, scope, weight, reasons, notes)
    else:
        w, r = weight(1, "W"), weight(2, "R")
    if len(node.input) < 3 or not node.input[1] or not node.input[2]:
        reasons.append("has no W or R input")
    b = weight(3, "B")
    arrays = {"W": w, "R": r, "B": b}
    for what, ndim in (("W", 3), ("R", 3), ("B", 2)):
        value = arrays[what]
        if value is not None and value.ndim != ndim:
            reasons.append(f"its {what} has shape {value.shape}; expected {ndim} dimensions")
            arrays[what] = None
    w, r, b = arrays["W"], arrays["R"], arrays["B"]
    p = weight(7, "P (peepholes)") if op == "LSTM" else None
    if p is not None and p.ndim != 2:
        reasons.append(f"its P has shape {p.shape}; expected 2 dimensions")
        p = None
    if p is not None and not np.any(p != 0):
        p = None  # zero peepholes: the math without them
    math = node_math(op, attrs, peepholes=p is not None)
    layout = attrs.get("layout", 0)
    if layout not in (0, 1):
        reasons.insert(0, f"has layout={layout!r}; ONNX defines 0 (time-major) and 1 (batch-major)")
    reasons[:0] = math.reasons
    if math.variant is not None and not math.variant.is_cudnn:
        notes.insert(0, f"it computes {math.mode} with a variant: {math.variant.describe()}")
    hidden: int | None = None
    if "hidden_size" in attrs and isinstance(attrs["hidden_size"], int):
        hidden = int(attrs["hidden_size"])
    elif r is not None:
        hidden = int(r.shape[-1])
    return Seen(
        node.op_type,
        math.mode,
        hidden,
        math.dirs,
        math.direction,
        layout if layout in (0, 1) else 0,
        w,
        r,
        b,
        reasons,
        _shape_reasons(op, math.dirs, hidden, w, r, b, p),
        _state_reasons(node, scope) if states else [],
        notes,
        quantized,
        math.variant,
        p,
    )


_DIRECTIONS = {"forward": CUDNN_RNN_UNIDIRECTION, "bidirectional": CUDNN_RNN_BIDIRECTION}
#: The dtypes of quantized weights and of their scales.
_QUANTIZED_DTYPES = ("int8", "uint8")
_SCALE_DTYPES = ("float32",)


def _dequantized(
    node: Any, scope: Scope, weight: Any, reasons: list[str], notes: list[str]
) -> tuple[np.ndarray | None, np.ndarray | None, str | None]:
    """W and R of a DynamicQuantizeLSTM node dequantized, ``(q - zero_point) * scale`` in the
    scales' dtype, transposed to the LSTM's [D, 4H, I] and [D, 4H, H]; a note that says so, or
    reasons. The dequantized arrays are charged to the operation's work before they are made."""
    out: list[np.ndarray | None] = []
    dtypes = set()
    per_channel = set()
    for index, what in ((1, "W"), (2, "R")):
        at_scale = 8 if what == "W" else 10  # then the zero point
        q = weight(index, what, _QUANTIZED_DTYPES)
        scale = weight(at_scale, f"{what}_scale", _SCALE_DTYPES)
        zero = weight(at_scale + 1, f"{what}_zero_point", _QUANTIZED_DTYPES)
        if q is None or scale is None or zero is None:
            out.append(None)
            continue
        if q.ndim != 3:
            reasons.append(f"its quantized {what} has shape {q.shape}; expected 3 dimensions")
            out.append(None)
            continue
        d, _, g = q.shape
        if scale.shape not in ((d,), (d, g)) or zero.shape != scale.shape or zero.dtype != q.dtype:
            reasons.append(
                f"its {what}_scale {scale.shape} and {what}_zero_point {zero.shape} "
                f"({zero.dtype}) do not fit its quantized {what} {q.shape} ({q.dtype}): expected "
                f"[{d}] (per direction) or [{d}, {g}] (per output channel), of {q.dtype}"
            )
            out.append(None)
            continue
        try:
            scope.ev.charge(q.size * scale.dtype.itemsize, f"dequantizing {what}")
        except _Unevaluable as err:
            reasons.append(f"its quantized {what} cannot be dequantized: {err.what}")
            out.append(None)
            continue
        value = np.empty((d, g, q.shape[1]), scale.dtype)
        value[...] = np.swapaxes(q, 1, 2)  # exact: 8-bit integers
        at = (slice(None), slice(None), None) if scale.ndim == 2 else (slice(None), None, None)
        value -= zero.astype(scale.dtype)[at]  # exact, then one rounding:
        value *= scale[at]
        out.append(value)
        dtypes.add(q.dtype.name)
        per_channel.add(scale.ndim == 2)
    if all(v is not None for v in out):
        per = " and ".join(
            "per output channel" if p else "per direction" for p in sorted(per_channel)
        )
        kind = " and ".join(sorted(dtypes))
        notes.append(
            f"its weights W and R are {kind} with a scale and a zero point {per}, read "
            "dequantized ((weight - zero_point) * scale, in float32); onnxruntime computes "
            f"{escape(node.op_type)}'s matmuls in 8-bit integers with each input "
            "quantized as it runs, so its outputs differ from this layer's by that "
            "quantization error"
        )
        return out[0], out[1], kind
    return out[0], out[1], None


def _other(node: Any, scope: Scope) -> Seen:
    """What a listing says of an RNN-like operator no reader here computes: its attributes'
    ``hidden_size`` and ``direction``, a mode its type names, and why it is not computed."""
    attrs = scope.attributes(node, ("direction", "hidden_size"))
    hidden = attrs.get("hidden_size")
    direction = attrs.get("direction", "forward")
    op_type, domain = _text(node.op_type), _text(node.domain)
    mode = (
        CUDNN_LSTM if "LSTM" in op_type.upper() else CUDNN_GRU if "GRU" in op_type.upper() else None
    )
    reason = (
        f"has op type {escape(op_type)!r} of domain {escape(domain)!r}, "
        "which our layers do not compute (they compute ONNX's LSTM, GRU and RNN, and "
        "com.microsoft's DynamicQuantizeLSTM with its weights dequantized)"
    )
    return Seen(
        op_type,
        mode,
        hidden if isinstance(hidden, int) and hidden > 0 else None,
        2 if direction == "bidirectional" else 1,
        _DIRECTIONS.get(direction) if isinstance(direction, str) else None,
        0,
        None,
        None,
        None,
        [reason],
        [],
        [],
    )


def _shape_reasons(
    op: str,
    dirs: int,
    hidden: int | None,
    w: np.ndarray | None,
    r: np.ndarray | None,
    b: np.ndarray | None,
    p: np.ndarray | None = None,
) -> list[str]:
    """Weights that do not fit each other and the node's attributes."""
    if w is None or r is None or hidden is None:
        return []
    g, h = _GATE_COUNT[op], hidden
    expect = {
        "W": (dirs, g * h, w.shape[-1]),
        "R": (dirs, g * h, h),
        "B": (dirs, 2 * g * h),
        "P": (dirs, 3 * h),
    }
    got = {
        "W": w.shape,
        "R": r.shape,
        "B": expect["B"] if b is None else b.shape,
        "P": expect["P"] if p is None else p.shape,
    }
    bad = [f"{k} {got[k]} (expected {v})" for k, v in expect.items() if got[k] != v]
    reasons = ["has misshapen weights: " + "; ".join(bad)] if bad else []
    if h < 1 or w.shape[-1] < 1:
        reasons.append(f"has hidden_size {h} and input size {w.shape[-1]}; both must be >= 1")
    dtypes = sorted({a.dtype.name for a in (w, r, b, p) if a is not None})
    if len(dtypes) > 1:
        reasons.append(f"has weights of mixed dtypes {dtypes}")
    return reasons


def _state_reasons(node: Any, scope: Scope) -> list[str]:
    """Initial states and lengths our layer would not be called with: values the model holds
    (a non-zero constant state, constant lengths); run-time values are the caller's to pass."""
    reasons = []
    for index, what in STATE_INPUTS:
        name = node.input[index] if len(node.input) > index else ""
        if not name:
            continue
        try:
            leaves = scope.data_sources(name, STATE_OPS)
            fixed = [leaf for leaf in leaves if not scope.ev.depends_on_runtime(leaf)]
            if what != "sequence_lens":
                fixed = [leaf for leaf in fixed if not scope.is_zero(leaf)]
        except _Unevaluable as err:
            reasons.append(f"its {what} {name!r} cannot be evaluated: {err.what}")
            continue
        if not fixed:
            continue
        if what == "sequence_lens":
            reasons.append(
                f"its sequence_lens comes from {scope.describe(fixed)}, a constant: lengths the "
                "model holds, which our layer does not (it takes sequence_lengths when called)"
            )
        else:
            reasons.append(
                f"its {what} comes from {scope.describe(fixed)}, a non-zero constant (a learned "
                "initial state), which our layer does not hold (it takes initial_state when "
                "called)"
            )
    return reasons


@dataclass
class Site:
    """One RNN node of a model (once per call of a function that holds it): where it is."""

    node: Any
    scope: Scope
    path: str  # steps by name where names allow (what find_rnns shows)
    index_path: str  # steps by position only (unique whatever the names)
    label: str  # "LSTM node '/LSTM'"
    where: str  # "LSTM node '/LSTM' in If '/If' > then_branch"


@dataclass
class Target:
    """What a name from_onnx(node=) takes picks: RNN nodes of one graph, stacked."""

    sites: list[Site]
    seen: list[Seen]
    where: str
    nodes: list[str]  # the name of each of its nodes

    def record(self, name: str) -> FoundRNN:
        """The record of this RNN, named ``name``: its facts and every reason."""
        first = self.seen[0]
        reasons = tuple(r for s in self.seen for r in s.all_reasons)
        notes = tuple(dict.fromkeys(n for s in self.seen for n in s.notes))
        return FoundRNN(
            name,
            self.where,
            ONNX,
            first.mode or _KIND.get(first.op_type),
            num_layers=len(self.seen),
            num_units=first.hidden,
            input_size=first.input_size,
            direction=first.direction,
            computable=not reasons,
            reasons=reasons,
            details={
                "nodes": self.nodes,
                "op_type": first.op_type,
                "layout": first.layout,
                "dtype": first.dtype,
                **({"quantized": first.quantized} if first.quantized else {}),
                **(
                    {"variant": first.variant.as_dict()}
                    if first.variant is not None and not first.variant.is_cudnn
                    else {}
                ),
            },
            notes=notes,
        )


@dataclass
class Listing:
    records: list[FoundRNN]
    targets: dict[str, Target]


@dataclass
class _Frame:
    """A graph being walked: its scope, the paths of its nodes so far, the function calls."""

    scope: Scope
    path: str
    index_path: str
    calls: tuple[tuple[str, str], ...]
    steps: list[str]
    next: int = 0


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def list_rnns(onnx: Any, loaded: Loaded, owner: str) -> Listing:
    """The records find_rnns returns and every name from_onnx(node=) takes."""
    ev = Evaluator(onnx, loaded, owner)
    sites = _walk(loaded.model, ev, owner)
    seen = [examine(onnx, s.node, s.scope, states=True) for s in sites]
    groups = _stacks(onnx, ev, sites, seen)
    entries = [tuple(g) for g in groups] + [(k,) for g in groups if len(g) > 1 for k in g]
    names = _names(entries, sites)
    targets = {names[e]: _target(e, sites, seen, names) for e in entries}
    records = [targets[names[tuple(g)]].record(names[tuple(g)]) for g in groups]
    return Listing(records, targets)


def stack_record(ev: Evaluator, seen: list[Seen], owner: str) -> FoundRNN:
    """The record of a model read whole as one stack: ``seen`` are its RNN nodes, every one
    of them in its main graph, in order (named as :func:`list_rnns` names them)."""
    sites = _walk(ev.model, ev, owner)
    if len(sites) != len(seen):  # a graph read whole holds its RNN nodes only: a bug
        raise RuntimeError(f"{owner}: {len(sites)} RNN nodes walked, {len(seen)} read.")
    entry = tuple(range(len(sites)))
    entries = [entry, *([(k,) for k in entry] if len(entry) > 1 else [])]
    names = _names(entries, sites)
    return _target(entry, sites, seen, names).record(names[entry])


def _target(
    entry: tuple[int, ...], sites: list[Site], seen: list[Seen], names: dict[tuple[int, ...], str]
) -> Target:
    """The target of an entry (a node, or a stack of nodes): its sites, and where in words."""
    first, site = seen[entry[0]], sites[entry[0]]
    if len(entry) == 1:
        where = site.where
    else:
        skip = len(f"{first.op_type} node ")
        labels = ", ".join(sites[k].label[skip:] for k in entry)
        where = f"{first.op_type} nodes {labels} {site.scope.where}"
    nodes = [names[(k,)] for k in entry] if len(entry) > 1 else [names[entry]]
    return Target([sites[k] for k in entry], [seen[k] for k in entry], where, nodes)


def _names(entries: list[tuple[int, ...]], sites: list[Site]) -> dict[tuple[int, ...], str]:
    """A unique name per entry (a node, or a stack of nodes): paths by name, joined by ``+``;
    entries whose names would read the same use positions instead, which never do (a position
    step is ``#i``, which no name step is, and a graph step is an identifier)."""

    def text(entry: tuple[int, ...], by_position: bool) -> str:
        return "+".join(sites[k].index_path if by_position else sites[k].path for k in entry)

    chosen = {e: text(e, False) for e in entries}
    while True:
        counts = Counter(chosen.values())
        clashing = [e for e in entries if counts[chosen[e]] > 1 and chosen[e] != text(e, True)]
        if not clashing:
            break
        for e in clashing:  # each round turns at least one name into positions: it ends
            chosen[e] = text(e, True)
    if len(set(chosen.values())) != len(entries):  # positions are unique: a bug
        raise RuntimeError(f"RNN node names clash: {sorted(chosen.values())}")
    return chosen


def _walk(model: Any, ev: Evaluator, owner: str) -> list[Site]:
    """Every RNN node of the model (:func:`rnn_kind`) in graph order, subgraphs and function
    bodies in the place of the node that holds or calls them (an explicit stack, at most
    :data:`MAX_NESTING` deep; each node visited charged to the operation's work with the text
    of its path)."""
    functions = {(f.domain, f.name): f for f in model.functions}
    main = Scope.main(ev, model)
    frames = [_Frame(main, "", "", (), _steps(main.nodes))]
    sites: list[Site] = []
    visits = 0
    while frames:
        frame = frames[-1]
        if frame.next == len(frame.scope.nodes):
            frames.pop()
            continue
        i = frame.next
        frame.next += 1
        visits += 1
        if visits > MAX_WALK:
            raise OnnxFormatError(
                f"{owner}: the model's graphs, subgraphs and function calls hold more than "
                f"{MAX_WALK} nodes in all (a function's nodes count once per call); refused "
                "rather than walked."
            )
        node = frame.scope.nodes[i]
        step = frame.steps[i]
        path, index_path = frame.path + step, frame.index_path + f"#{i}"
        ev.charge(STEP_COST + len(path) + len(index_path), "walking the graphs")
        named = step == _text(node.name)
        short = f"{escape(node.op_type)} {node.name!r}" if named else f"{escape(node.op_type)} #{i}"
        key = (node.domain, node.op_type)
        holds = key in functions or any(a.type in (GRAPH, GRAPHS) for a in node.attribute)
        if holds and len(frame.scope.trail) >= MAX_NESTING:
            raise OnnxFormatError(
                f"{owner}: {escape(node.op_type)} node {node.name!r} "
                f"{clip(frame.scope.where, 200)} is nested in {len(frame.scope.trail)} "
                f"graphs and function calls, and holds or calls more; at most {MAX_NESTING} "
                "are walked."
            )
        if key in functions:
            if key in frame.calls:
                raise OnnxFormatError(
                    f"{owner}: model-local function {node.op_type!r} of domain {node.domain!r} "
                    "calls itself; ONNX functions cannot recurse, so the model cannot run."
                )
            fn = functions[key]
            trail = f"{short} (function {fn.name!r} of domain {fn.domain!r})"
            scope = frame.scope.call(fn, frame.scope.resolved(node), trail)
            frames.append(
                _Frame(
                    scope, path + "/", index_path + "/", (*frame.calls, key), _steps(scope.nodes)
                )
            )
            continue
        if rnn_kind(node) is not None:
            label = f"{escape(_text(node.op_type))} node " + (
                repr(node.name) if named else f"#{i}" + (f" ({node.name!r})" if node.name else "")
            )
            sites.append(
                Site(node, frame.scope, path, index_path, label, f"{label} {frame.scope.where}")
            )
        children = []
        for k, attribute in enumerate(node.attribute):
            graphs = [attribute.g] if attribute.type == GRAPH else []
            if attribute.type == GRAPHS:
                graphs = list(attribute.graphs)
            name = _text(attribute.name)
            name = name if _IDENTIFIER.fullmatch(name) else f"@{k}"
            for j, graph in enumerate(graphs):
                step_name = name if attribute.type == GRAPH else f"{name}[{j}]"
                scope = frame.scope.subgraph(graph, f"{short} > {step_name}")
                children.append(
                    _Frame(
                        scope,
                        f"{path}/{step_name}/",
                        f"{index_path}/{step_name}/",
                        frame.calls,
                        _steps(scope.nodes),
                    )
                )
        frames.extend(reversed(children))
    return sites


def _steps(nodes: list[Any]) -> list[str]:
    """Each node's step in a path: its name where that is unique in its graph and cannot be
    taken for a position (``#``) or a stack (``+``); else ``#`` and its position."""
    names = [_text(n.name) for n in nodes]
    counts = Counter(names)
    return [
        name
        if name and counts[name] == 1 and not name.startswith("#") and "+" not in name
        else f"#{i}"
        for i, name in enumerate(names)
    ]


def _text(name: str | bytes) -> str:
    """A name as text: protobuf hands a string field that is not UTF-8 over as bytes."""
    return name.decode(errors="replace") if isinstance(name, bytes) else name


def _stacks(onnx: Any, ev: Evaluator, sites: list[Site], seen: list[Seen]) -> list[list[int]]:
    """The sites grouped into stacks of layers, in order of their first node: a node follows
    another when its X is that node's Y laid out as [T, B, D*H] (or [B, T, D*H]) by layout ops
    of the same graph, both computable and alike, and nothing else continues that node."""
    at = {(id(s.scope), id(s.node)): k for k, s in enumerate(sites)}
    follows: dict[int, list[int]] = {}
    for j, (site, now) in enumerate(zip(sites, seen)):
        if now.all_reasons or not site.node.input or now.w is None or now.hidden is None:
            continue
        chain: list[tuple[Scope, Any]] = []
        leaves = site.scope.data_sources(site.node.input[0], LAYOUT_OPS, chain)
        if len(leaves) != 1:
            continue
        scope, name, kind = leaves[0][0].locate(leaves[0][1])
        if kind != "node" or scope is not site.scope:
            continue
        k = at.get((id(scope), id(scope.producer[name])))
        if k is None or list(sites[k].node.output[:1]) != [name]:
            continue
        before = seen[k]
        alike = ("op_type", "mode", "variant", "hidden", "dirs", "layout", "dtype")
        if before.all_reasons or any(getattr(before, a) != getattr(now, a) for a in alike):
            continue
        if now.w.shape[-1] != now.dirs * now.hidden or any(s is not scope for s, _ in chain):
            continue
        if _lays_out(onnx, ev, scope, [n for _, n in chain], name, site.node.input[0], now):
            follows.setdefault(k, []).append(j)
    after = {k: js[0] for k, js in follows.items() if len(js) == 1}
    continuing = set(after.values())
    grouped: set[int] = set()
    groups = []
    for k in range(len(sites)):
        if k in grouped or k in continuing:
            continue
        group = [k]
        while group[-1] in after and after[group[-1]] not in group:
            group.append(after[group[-1]])
        grouped.update(group)
        groups.append(group)
    leftover = [[k] for k in range(len(sites)) if k not in grouped]  # only a cycle leaves any
    return sorted(groups + leftover)


def _lays_out(
    onnx: Any, ev: Evaluator, scope: Scope, chain: list[Any], y: str, x: str, seen: Seen
) -> bool:
    """Whether the layout ops ``chain`` make the next layer's input ``x`` from ``y`` as our
    stack does: checked on a probe of distinct values, at the sizes the model declares for
    ``y`` when it does (a Reshape may hold them), else at T=2, B=3."""
    if not chain or seen.hidden is None:
        return False
    d, h = seen.dirs, seen.hidden
    sizes = (2, 3)
    declared = scope.declared_shape(y)
    if declared is not None and len(declared) == 4:
        t, b = (declared[0], declared[2]) if seen.layout == 0 else (declared[1], declared[0])
        if 0 < t * b * d * h <= _MAX_PROBE:
            sizes = (t, b)
    t, b = sizes
    produced = {o for n in chain for o in n.output}
    feeds: dict[str, np.ndarray] = {}
    for n in chain:
        for name in n.input:
            if name and name != y and name not in produced and name not in feeds:
                try:
                    value = scope.constant(name)
                except _Unevaluable:
                    return False
                if value is None:
                    return False
                feeds[name] = value
    shape = (t, d, b, h) if seen.layout == 0 else (b, t, d, h)
    # The probe, its copies through the chain, and the chain's one-node models: charged.
    ev.charge(
        8 * product(shape) * (len(chain) + 2) + RUN_COST * len(chain),
        "checking the layout between two RNN nodes",
    )
    probe = np.arange(product(shape), dtype=np.float64).reshape(shape)
    want = probe.transpose(0, 2, 1, 3) if seen.layout == 0 else probe
    want = want.reshape(*want.shape[:2], d * h)
    order = scope.positions()
    helper = onnx.helper
    try:  # names that are not UTF-8 (a protobuf hands them over as bytes) fail here
        sub = helper.make_model(
            helper.make_graph(
                [scope.resolved(n) for n in sorted(chain, key=lambda n: order[id(n)])],
                "layout",
                [helper.make_empty_tensor_value_info(i) for i in (y, *feeds)],
                [helper.make_empty_tensor_value_info(x)],
            ),
            opset_imports=list(ev.model.opset_import),
        )
        evaluator = importlib.import_module("onnx.reference").ReferenceEvaluator(sub)
        (got,) = evaluator.run(None, {y: probe, **feeds})
    except Exception:  # ops that do not take these sizes: not our stack's layout
        return False
    return bool(np.shape(got) == want.shape and np.array_equal(got, want))
