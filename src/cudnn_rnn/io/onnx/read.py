"""One RNN of an ONNX model read as data: the reader behind ``from_onnx``.

:func:`find_rnns` lists a model's RNNs (:mod:`cudnn_rnn.io.onnx.find`); :func:`read`
returns one of them, or the whole model when it is one stack of RNN layers, as a
:class:`~cudnn_rnn.io.found.ReadRNN`: its spec and canonical tensors in cuDNN's gate order.
No layer is built here (:func:`cudnn_rnn.converters.onnx.from_onnx` builds one from this data).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import Tensor

from cudnn_rnn.core.constants import (
    CUDNN_INPUT_LINEAR_MODE,
    CUDNN_RNN_BIDIRECTION,
    CUDNN_RNN_UNIDIRECTION,
)
from cudnn_rnn.core.gates import CUDNN_GATES, permute_gates
from cudnn_rnn.core.layout import (
    INPUT,
    INPUT_BIAS,
    PEEPHOLE,
    PEEPHOLE_GATES,
    RECURRENT,
    RECURRENT_BIAS,
    Param,
    layout_of,
)
from cudnn_rnn.core.spec import RNNSpec, check_input_mode
from cudnn_rnn.io.files.escaping import clip, quote
from cudnn_rnn.io.found import FoundRNN, ReadRNN
from cudnn_rnn.io.gate_blocks import BlockKey, unstack_gates
from cudnn_rnn.io.onnx.eval import LAYOUT_OPS, PLUMBING, STATE_OPS, Evaluator, Scope
from cudnn_rnn.io.onnx.file import GRAPH, STANDARD_DOMAINS, Loaded, OnnxFormatError, source_model
from cudnn_rnn.io.onnx.find import (
    RNN_OPS,
    STATE_INPUTS,
    Node,
    Seen,
    examine,
    list_rnns,
    stack_record,
)
from cudnn_rnn.io.onnx.graph import GATE_ORDER, META_INPUT_MODE, import_onnx
from cudnn_rnn.io.onnx.layout import PEEPHOLE_ORDER

__all__ = ["find_rnns", "read", "read_rnn"]


def find_rnns(source: str | os.PathLike[str] | Any) -> list[FoundRNN]:
    """Every RNN of an ONNX model (a path or a loaded ``onnx.ModelProto``), in graph order, at
    any depth: the standard LSTM, GRU and RNN nodes of the main graph, of ``If``/``Loop``/
    ``Scan`` subgraphs (and any other graph attribute), and of model-local functions (once per
    call). Nodes that form one stack of layers (each next node's ``X`` is the ``Y`` before it,
    laid out as ``[T, B, D*H]`` by layout ops, same kind, both computable) are one record of
    ``num_layers`` layers. onnxruntime's int8 ``com.microsoft`` ``DynamicQuantizeLSTM`` (what
    ``quantize_dynamic`` makes of an LSTM) is an LSTM read with its weights dequantized, which
    its record's ``notes`` say; any other operator whose type names an LSTM, a GRU or an RNN,
    of any domain, is listed not computable, with the sizes its attributes give and the reason.
    A model whose nodes are out of topological order is read in order.

    Each record's ``name`` is what ``from_onnx(source, node=name)`` takes: a node's path, its
    steps joined by ``/`` from the main graph: a node's name (as the file spells it, ``/``
    included: torch's ``/lstm/LSTM``), then after a node that holds subgraphs the graph
    attribute's name (``then_branch``, ``body``; ``name[k]`` for a list of graphs), after a call
    of a model-local function the name of the node in its body. A node whose name is empty,
    repeated in its graph, starts with ``#`` or holds ``+`` is ``#index`` (its position in its
    graph), and where two paths would read the same, both use positions for every step. A
    stack's name is its nodes' paths joined by ``+``; each node of it is loadable alone by its
    path (``details["nodes"]``). ``where`` says the same in words.

    ``computable`` is whether cuDNN's math, or a variant of it
    (:class:`~cudnn_rnn.core.variant.Variant`: the reset gate before the product, other
    activations, ``clip``, ``input_forget``, peepholes, ``direction="reverse"``; see
    :mod:`~cudnn_rnn.io.onnx.variants`), computes the RNN from its ``X``, initial states and
    sequence lengths; ``reasons`` lists every reason it does not (see
    :func:`cudnn_rnn.converters.onnx.from_onnx`), each a clause that follows the node's label.
    A variant is said by a note ("it computes gru with a variant: reset before the product")
    and ``details["variant"]`` (:meth:`Variant.as_dict`), and is the read spec's ``variant``.
    ``details``: ``nodes`` (the names of its nodes), ``op_type``, ``layout`` (1: batch-major,
    call the layer with ``time_major=False``), ``dtype`` (None when the weights cannot be
    read; float32 for dequantized weights), for a quantized RNN ``quantized`` (the dtype
    its weights are stored in), and for a variant ``variant``.

    Bounds: everything one call evaluates, dequantizes and walks is charged to one budget of 8
    times the file's bytes (its external data included) plus 16 MiB, before it is done
    (:class:`~cudnn_rnn.io.onnx.file.Work`): a weight that would exceed it is a reason,
    a walk that would, a refusal; graphs and function calls are walked at most 100 deep.

    Raises OnnxFormatError for a file that is not a readable ONNX model (as
    :func:`~cudnn_rnn.io.onnx.file.load_model`), for a model-local function that calls
    itself, for graphs and function calls of more than 500,000 nodes in all or nested more than
    100 deep, and for a model whose graphs ask for more work than that budget; TypeError for
    another source.
    """
    owner = "find_rnns"
    onnx = import_onnx()
    return list_rnns(onnx, source_model(onnx, source, owner), owner).records


def read(
    source: str | os.PathLike[str] | Any,
    name: str | None = None,
    *,
    input_mode: str | None = None,
) -> ReadRNN:
    """The RNN ``name`` of an ONNX model (a path or a loaded ``onnx.ModelProto``) as data: its
    spec (its ``variant`` what the node's attributes and peepholes say), its canonical weights
    and biases (CPU tensors of the model's dtype, in canonical order and cuDNN's gate order;
    an LSTM's non-zero peepholes ``P`` after each layer and direction's biases, as
    ``P_i, P_f, P_o``) and the record :func:`find_rnns` lists for it.

    ``name`` is a name :func:`find_rnns` lists, or the path of one node of a stack (that layer
    alone); without it the model itself is read when it is one stack of RNN layers and nothing
    else (what :func:`cudnn_rnn.converters.onnx.from_onnx` says of ``node`` holds here).
    ``input_mode`` defaults to ``"linear_input"`` for a named RNN, and for a model read whole to
    what :func:`~cudnn_rnn.converters.onnx.to_onnx` recorded in it; with ``"skip_input"`` the first
    layer's input matrices must be the identity. A model whose nodes are batch-major
    (``layout=1``, ``found.details``) is computed from batch-major input.

    Raises what ``from_onnx`` raises for a file or a model it cannot read.
    """
    return read_rnn(source, name, input_mode, "onnx.read", argument="name")


def read_rnn(
    source: Any, name: str | None, input_mode: str | None, owner: str, *, argument: str
) -> ReadRNN:
    """:func:`read`, its messages naming ``owner`` and the name's ``argument``.

    A model read from a path is dropped once its RNN nodes' weights are read, before they are
    converted: at most the model and its weights, or its weights and their canonical tensors,
    are held at once (:mod:`cudnn_rnn.io.onnx.file` holds the file at most twice)."""
    picked = _pick(source, name, input_mode, owner, argument)
    return _as_read(picked, owner)


@dataclass
class _Picked:
    """What a read picked, holding nothing of the model: its nodes' weights, the input mode,
    the record, and what strict shape inference refused (raised after the weights' checks)."""

    nodes: list[Node]
    input_mode: str
    found: FoundRNN
    shape_error: str | None = None


def _pick(
    source: Any, name: str | None, input_mode: str | None, owner: str, argument: str
) -> _Picked:
    onnx = import_onnx()
    loaded = source_model(onnx, source, owner, shapes=name is None)
    if name is not None:
        if not isinstance(name, str):
            raise TypeError(
                f"{owner}: {argument} must be a str, a name find_rnns lists, got "
                f"{type(name).__name__}."
            )
        return _from_node(onnx, loaded, name, input_mode, owner)
    try:
        return _from_graph(onnx, loaded, input_mode, owner)
    except _NotOneStack as err:
        raise OnnxFormatError(f"{err} {_node_hint(onnx, loaded, owner)}".rstrip()) from None


def _as_read(picked: _Picked, owner: str) -> ReadRNN:
    """The canonical data of what was picked: its weights checked and converted, then what
    strict shape inference refused, last, so that the refusals before it, which say more,
    come first."""
    spec, weights, biases = _canonical(picked.nodes, picked.input_mode, owner)
    picked.nodes.clear()  # the file's arrays: the canonical tensors are copies
    if picked.shape_error is not None:
        raise OnnxFormatError(f"{owner}: the model is not valid ONNX: {picked.shape_error}")
    layout = layout_of(spec)
    if any(p.offset is None for p in layout.weights):  # skip_input: identity input matrices
        try:
            layout.pack(weights, biases, owner=owner)
        except ValueError as err:
            raise OnnxFormatError(str(err)) from err
    return ReadRNN(picked.found, spec, weights, biases, notes=picked.found.notes)


class _NotOneStack(OnnxFormatError):
    """A graph that is more than one stack of RNN layers: from_onnx names its RNNs (node=)."""


def _from_graph(onnx: Any, loaded: Loaded, input_mode: str | None, owner: str) -> _Picked:
    """A read without a name: the graph is one stack of RNN layers, read as one layer."""
    model = loaded.model
    rnn_nodes = _rnn_nodes(model, owner)
    ev = Evaluator(onnx, loaded, owner)
    flow = Scope.main(ev, model)
    seen = [_read_node(onnx, n, flow, owner) for n in rnn_nodes]
    nodes = [s.as_node(n.name) for s, n in zip(seen, rnn_nodes)]
    _check_data_flow(flow, rnn_nodes, [o.name for o in model.graph.output], owner)
    _check_states(flow, rnn_nodes, owner)
    first = nodes[0]
    for n in nodes[1:]:
        if (n.mode, n.hidden, n.dirs) != (first.mode, first.hidden, first.dirs):
            raise _NotOneStack(
                f"{owner}: RNN node {n.name!r} is a {n.mode} of hidden_size {n.hidden} with "
                f"{n.dirs} direction(s), but node {first.name!r} is a {first.mode} of hidden_size "
                f"{first.hidden} with {first.dirs}; our layer stacks layers of one kind only."
            )
        if n.variant != first.variant:
            raise _NotOneStack(
                f"{owner}: RNN node {n.name!r} computes {_variant_words(n)}, but node "
                f"{first.name!r} computes {_variant_words(first)}; our layer stacks layers of "
                "one kind only."
            )
    if input_mode is None:
        meta = {p.key: p.value for p in model.metadata_props}
        try:
            recorded = meta.get(META_INPUT_MODE, CUDNN_INPUT_LINEAR_MODE)
            input_mode = check_input_mode(owner, recorded)
        except (TypeError, ValueError) as err:  # TypeError: bytes that are not UTF-8
            raise OnnxFormatError(f"{err} (read from the model's metadata)") from err
    found = stack_record(ev, seen, owner)
    return _Picked(nodes, input_mode, found, loaded.shape_error)


def _canonical(
    nodes: list[Node], input_mode: str, owner: str
) -> tuple[RNNSpec, list[Tensor], list[Tensor]]:
    """The spec and canonical tensors of RNN nodes stacked as layers (checked shapes): their
    variant is the first node's (a stack's nodes have one)."""
    input_mode = check_input_mode(owner, input_mode)
    first = nodes[0]
    d, h = first.dirs, first.hidden
    try:
        spec = RNNSpec(
            first.mode,
            len(nodes),
            h,
            int(first.w.shape[-1]),
            input_mode,
            CUDNN_RNN_BIDIRECTION if d == 2 else CUDNN_RNN_UNIDIRECTION,
            variant=first.variant,
            owner=owner,
        )
    except ValueError as err:
        raise OnnxFormatError(str(err)) from err
    g = len(CUDNN_GATES[spec.mode])
    dtypes = {a.dtype for n in nodes for a in (n.w, n.r, n.b, n.p) if a is not None}
    if len(dtypes) != 1:
        raise OnnxFormatError(f"{owner}: the RNN weights mix dtypes {sorted(map(str, dtypes))}.")
    blocks: dict[BlockKey, Tensor] = {}
    for index, n in enumerate(nodes):
        expect = {
            "W": (d, g * h, spec.layer_input_size(index)),
            "R": (d, g * h, h),
            "B": (d, 2 * g * h),
            **({"P": (d, len(PEEPHOLE_GATES) * h)} if spec.variant.peepholes else {}),
        }
        # The shapes are compared before a missing B is made: h comes from an attribute.
        got: dict[str, object] = {
            "W": n.w.shape,
            "R": n.r.shape,
            "B": expect["B"] if n.b is None else n.b.shape,
        }
        if spec.variant.peepholes:
            got["P"] = None if n.p is None else n.p.shape
        bad = [f"{k} {got[k]} (expected {v})" for k, v in expect.items() if got[k] != v]
        if bad:
            raise OnnxFormatError(
                f"{owner}: RNN node {n.name!r} (layer {index}) has misshapen weights: "
                + "; ".join(bad)
                + "."
            )
        bias = n.b if n.b is not None else np.zeros(expect["B"], n.w.dtype)
        for k in range(d):
            blocks[(index, k, INPUT)] = _as_tensor(n.w[k])
            blocks[(index, k, RECURRENT)] = _as_tensor(n.r[k])
            blocks[(index, k, INPUT_BIAS)] = _as_tensor(bias[k, : g * h])
            blocks[(index, k, RECURRENT_BIAS)] = _as_tensor(bias[k, g * h :])
            if n.p is not None:
                blocks[(index, k, PEEPHOLE)] = _as_tensor(n.p[k])
    return spec, *_unstacked(spec, blocks)


def _unstacked(spec: RNNSpec, blocks: dict[BlockKey, Tensor]) -> tuple[list[Tensor], list[Tensor]]:
    """Canonical ``(weights, biases)`` of the file's stacked blocks, each one copy of its gate's
    rows. The gate mapping is the one helper's (:func:`unstack_gates`), worked out on each
    block's gate positions (one element per gate): on the data it would copy every block once
    per gate, and the copies of the file's weights are what bounds a read's memory. The
    peepholes, which that helper's gate orders do not describe, are ONNX's ``P`` reordered
    from its ``i, o, f`` to the layout's ``P_i, P_f, P_o``."""
    g = len(CUDNN_GATES[spec.mode])
    # The canonical tensors but the peepholes are those of the spec without them, in order.
    plain = replace(spec, variant=replace(spec.variant, peepholes=False))
    stacked = {key: torch.arange(g) for key in blocks if key[2] != PEEPHOLE}
    weights_at, biases_at = unstack_gates(plain, stacked, GATE_ORDER)
    layout = layout_of(spec)
    at = iter(biases_at)
    return (
        [_rows(blocks, p, k, g) for p, k in zip(layout.weights, weights_at)],
        [_peephole(blocks, p) if p.kind == PEEPHOLE else _rows(blocks, p, next(at), g)
         for p in layout.biases],
    )  # fmt: skip


def _peephole(blocks: dict[BlockKey, Tensor], p: Param) -> Tensor:
    """The canonical peephole ``p`` (``P_i``, ``P_f`` or ``P_o``) of ONNX's ``P`` block, copied."""
    block = permute_gates(blocks[(p.layer, p.direction, p.kind)], PEEPHOLE_ORDER, PEEPHOLE_GATES)
    return block.chunk(len(PEEPHOLE_GATES))[PEEPHOLE_GATES.index(str(p.gate))].clone()


def _rows(blocks: dict[BlockKey, Tensor], p: Param, at: Tensor, gates: int) -> Tensor:
    """The canonical tensor ``p``: gate ``at`` of its stacked block, copied (the block may be
    a read-only view of the file's bytes)."""
    block = blocks[(p.layer, p.direction, p.kind)]
    if p.gate is None:  # a projection: the block itself (ONNX has none)
        return block.clone(memory_format=torch.contiguous_format)
    return block.chunk(gates)[int(at)].clone(memory_format=torch.contiguous_format)


def _rnn_nodes(model: Any, owner: str) -> list[Any]:
    """The standard RNN nodes of ``model``'s graph, in graph order, after refusing nodes of
    other domains (and model-local functions) and ops that compute."""
    graph = model.graph
    local = {(f.domain, f.name) for f in model.functions}
    for n in graph.node:
        if n.domain not in STANDARD_DOMAINS or (n.domain, n.op_type) in local:
            raise _NotOneStack(
                f"{owner}: node {n.name!r} is {n.op_type!r} of domain {n.domain!r}, not a "
                "standard ONNX operator; a model read whole is a stack of the standard LSTM, "
                "GRU and RNN operators only (a quantized LSTM is read by its name)."
            )
    rnn_nodes = [n for n in graph.node if n.op_type in RNN_OPS]
    if not rnn_nodes and _holds_rnn_nodes(model):
        raise _NotOneStack(
            f"{owner}: the main graph has no LSTM, GRU or RNN node (it has "
            f"{sorted({n.op_type for n in graph.node})}); the ones in its subgraphs or "
            "functions are read one at a time, by name."
        )
    if not rnn_nodes:
        found = sorted({n.op_type for n in graph.node})
        raise _NotOneStack(
            f"{owner}: not an RNN model: the graph has no LSTM, GRU or RNN node (it has "
            f"{found or 'no nodes'}). Note that torch.onnx.export(..., dynamo=True) unrolls "
            "torch.nn.RNN into MatMul/Add/Tanh ops: export it with dynamo=False."
        )
    others = sorted({n.op_type for n in graph.node} - RNN_OPS - PLUMBING)
    if others:
        raise _NotOneStack(
            f"{owner}: the graph also computes with {others}; our layer is a stack of RNN layers "
            "only, so it would not compute what this model computes."
        )
    return rnn_nodes


def _holds_rnn_nodes(model: Any) -> bool:
    """Whether a subgraph or a model-local function of ``model`` has a standard RNN node."""
    graphs = [a.g for n in model.graph.node for a in n.attribute if a.type == GRAPH]
    graphs += [g for n in model.graph.node for a in n.attribute for g in a.graphs]
    nodes = [n for f in model.functions for n in f.node]
    while graphs or nodes:
        if graphs:
            nodes.extend(graphs.pop().node)
            continue
        node = nodes.pop()
        if node.op_type in RNN_OPS and node.domain in STANDARD_DOMAINS:
            return True
        graphs += [a.g for a in node.attribute if a.type == GRAPH]
        graphs += [g for a in node.attribute for g in a.graphs]
    return False


def _check_data_flow(flow: Scope, rnn_nodes: list[Any], outputs: list[str], owner: str) -> None:
    """Refuse a graph whose data does not flow graph input -> RNN nodes -> graph outputs, with
    layout ops only on the way (:data:`LAYOUT_OPS`): the layer would compute something else."""
    for before, node in zip([None, *rnn_nodes], rnn_nodes):
        label = f"{node.op_type} node {node.name!r}"
        leaves = flow.data_sources(node.input[0] if node.input else "")
        if before is None:
            if len(leaves) != 1 or not flow.is_runtime_input(leaves[0]):
                raise _NotOneStack(
                    f"{owner}: the input X of {label} comes from {flow.describe(leaves)}, not "
                    "from one graph input through layout ops; our layer takes the input as is."
                )
        elif [n for _, n in leaves] != [before.output[0]]:
            raise _NotOneStack(
                f"{owner}: the input of {label} does not come from the output Y of "
                f"{before.op_type} node {before.name!r} (it comes from {flow.describe(leaves)}); "
                "the RNN nodes are not one stack of layers."
            )
    last_y = rnn_nodes[-1].output[0] if rnn_nodes[-1].output else ""
    state = {
        out: (kind, layer)
        for layer, n in enumerate(rnn_nodes)
        for kind, out in enumerate(n.output)
        if kind > 0 and out
    }
    for output in outputs:
        leaves = flow.data_sources(output)
        names = [n for _, n in leaves]
        if names == [last_y]:
            continue
        found = [state.get(leaf) for leaf in names]
        kinds = {f[0] for f in found if f is not None}
        layers = [f[1] for f in found if f is not None]
        if None not in found and len(kinds) == 1 and layers == sorted(set(layers)):
            continue
        raise _NotOneStack(
            f"{owner}: graph output {output!r} comes from {flow.describe(leaves)}; our layer "
            "computes the last RNN node's Y and the nodes' Y_h/Y_c in layer order, with only "
            f"layout ops {sorted(LAYOUT_OPS)} after them, so it would not compute what this "
            "model computes."
        )


def _check_states(flow: Scope, rnn_nodes: list[Any], owner: str) -> None:
    """Refuse RNN nodes whose ``sequence_lens`` or initial states our layer would not see.

    Our layer starts from the states it is called with (zeros by default) over the lengths it
    is called with (full by default). A node's ``initial_h``/``initial_c`` must therefore come
    from graph inputs (the caller's states) or be zeros; its ``sequence_lens`` must come from a
    graph input. A non-zero constant state or constant lengths would be silently dropped.
    """
    for node in rnn_nodes:
        label = f"{node.op_type} node {node.name!r}"
        for index, what in STATE_INPUTS:
            name = node.input[index] if len(node.input) > index else ""
            if not name:
                continue
            leaves = flow.data_sources(name, STATE_OPS)
            if all(flow.is_runtime_input(leaf) for leaf in leaves):
                continue
            if what != "sequence_lens" and all(flow.is_zero(leaf) for leaf in leaves):
                continue
            wanted = "a graph input" if what == "sequence_lens" else "graph inputs or zeros"
            raise OnnxFormatError(
                f"{owner}: the {what} of {label} comes from {flow.describe(leaves)}, not from "
                f"{wanted}; our layer computes from the {what.split('_')[-1]} it is called with, "
                "so it would not compute what this model computes."
            )


def _read_node(onnx: Any, node: Any, scope: Scope, owner: str) -> Seen:
    """One RNN node of a graph read whole: its first reason not to be read is refused."""
    label = f"{node.op_type} node {node.name!r}"
    seen = examine(onnx, node, scope, states=False)
    if seen.reasons:
        raise OnnxFormatError(
            f"{owner}: {_about(label, seen.reasons[0])}; our layers compute cuDNN's math and "
            "its variants (cudnn_rnn.core.variant) only."
        )
    return seen


def _from_node(onnx: Any, loaded: Loaded, name: str, input_mode: str | None, owner: str) -> _Picked:
    """A read by name: the RNN node (or stack) of that name, wherever it is."""
    listing = list_rnns(onnx, loaded, owner)
    target = listing.targets.get(name)
    if target is None:
        what = _choices(listing.records) or "It has no LSTM, GRU or RNN node at any depth."
        raise OnnxFormatError(f"{owner}: the model has no RNN named {name!r}. {what}")
    reasons = [
        _about(site.label, r)
        for site, seen in zip(target.sites, target.seen)
        for r in seen.all_reasons
    ]
    if reasons:
        raise OnnxFormatError(
            f"{owner}: {name!r} ({target.where}) is not computed by cuDNN's math or a variant "
            "of it (cudnn_rnn.core.variant), so our layers cannot hold it: "
            + "; ".join(reasons)
            + "."
        )
    nodes = [seen.as_node(site.node.name) for site, seen in zip(target.sites, target.seen)]
    return _Picked(nodes, input_mode or CUDNN_INPUT_LINEAR_MODE, target.record(name))


def _node_hint(onnx: Any, loaded: Loaded, owner: str) -> str:
    """What a refusal of a model that is more than a stack of RNN layers adds: its RNNs."""
    try:
        records = list_rnns(onnx, loaded, owner).records
    except OnnxFormatError:  # the same model is refused for another reason just after
        return ""
    return _choices(records)


#: At most this many RNNs are named in a message (find_rnns lists them all).
_MAX_NAMED = 8


def _choices(records: list[FoundRNN]) -> str:
    """The RNNs a model holds, for a message: what node= takes."""
    if not records:
        return ""
    shown = []
    for r in records[:_MAX_NAMED]:
        what = f"{r.mode or 'no cuDNN mode'} {r.direction or ''}".strip()
        sizes = f"{r.num_layers} layer(s), num_units={r.num_units}, input_size={r.input_size}"
        line = f"{quote(r.name)} ({what}, {sizes}: {r.where}"
        if not r.computable:
            line += "; not computable: " + clip("; ".join(r.reasons), 200)
        shown.append(line + ")")
    more = len(records) - _MAX_NAMED
    return (
        f"To read one RNN of this model, pass its name: from_onnx(path, node=NAME) "
        f"(find_rnns(path) lists them); it has {len(records)}: "
        + ", ".join(shown)
        + (f" and {more} more" if more > 0 else "")
        + "."
    )


def _variant_words(node: Node) -> str:
    """What a node computes beyond its mode's cuDNN math, in words."""
    return node.variant.describe() or "cuDNN's math"


def _about(label: str, reason: str) -> str:
    """A reason said of a node: each is a clause that follows its label ("has ...", "its W ...")."""
    return f"{label}{' ' if reason.startswith('has ') else ': '}{reason}"


def _as_tensor(a: np.ndarray) -> Tensor:
    """``a`` as a tensor without a copy where it can be: a view of the bytes read from the file,
    which NumPy marks read-only and nothing here writes (:func:`_canonical` copies every
    canonical tensor out of it), so torch's warning about such arrays does not apply."""
    if a.dtype.name == "bfloat16":  # ml_dtypes' bfloat16, which torch.from_numpy cannot take
        return _as_tensor(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)
    if any(s < 0 for s in a.strides):  # torch takes no negative strides
        a = np.ascontiguousarray(a)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "The given NumPy array is not writable", UserWarning)
        return torch.from_numpy(a)
