"""ONNX <-> our layers, with the standard ``LSTM``, ``GRU`` and ``RNN`` operators.

:func:`to_onnx` writes a layer as the graph that :mod:`cudnn_rnn.formats.onnx_graph` builds (one
node per layer, both directions in it; graph input ``X``, and on request ``sequence_lens``,
``initial_h``, ``initial_c``; outputs ``Y``, ``Y_h``, ``Y_c``; that module's docstring draws the
weights and shapes). The weights are written exactly, so the layer comes back bit for bit;
``skip_input`` is written as the identity ``W`` that the canonical form holds (exact math), and
recorded in the model's metadata so that :func:`from_onnx` restores the input mode. LSTM projection
has no ONNX counterpart and is refused. float16, float32 and float64 models are valid ONNX (bfloat16
from opset 22), but onnxruntime's CPU kernels of these operators run float32 only (1.31: LSTM and
GRU "do not support double yet", RNN has no double kernel).

:func:`from_onnx` reads models made by :func:`to_onnx` and by ``torch.onnx.export`` of
``torch.nn.LSTM/GRU/RNN``: the TorchScript exporter (``dynamo=False``), with or without
constant folding, and the LSTM and GRU nodes of the ``dynamo=True`` exporter (which unrolls
``nn.RNN`` into ``MatMul``/``Add``/``Tanh``: not readable). It takes the RNN nodes in graph
order as the layers; their ``W``, ``R`` and ``B`` may be initializers or computed from constants
(then evaluated with ``onnx.reference``). Initial states and sequence lengths are run-time
inputs, not parameters: they are not read, nor is dropout (ONNX models are for inference). A
model whose RNN nodes are batch-major (``layout=1``) gives the same layer; call it with
``time_major=False``.

onnx (and onnxruntime, to run the models) are optional dependencies, imported only when a
function here runs: ``pip install onnx onnxruntime``.
"""

from __future__ import annotations

import importlib
import itertools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from cudnn_rnn import atomic, files
from cudnn_rnn.core.constants import (
    CUDNN_INPUT_LINEAR_MODE,
    CUDNN_RNN_BIDIRECTION,
    CUDNN_RNN_UNIDIRECTION,
)
from cudnn_rnn.core.gates import CUDNN_GATES
from cudnn_rnn.core.layout import INPUT, INPUT_BIAS, RECURRENT, RECURRENT_BIAS
from cudnn_rnn.core.spec import RNNSpec, check_input_mode
from cudnn_rnn.formats.canonical import layer_canonical, layer_from_canonical
from cudnn_rnn.formats.gate_blocks import BlockKey, unstack_gates
from cudnn_rnn.formats.onnx_graph import (
    DEFAULT_OPSET,
    GATE_ORDER,
    MIN_OPSET,
    ONNX_OPS,
    import_onnx,
    model_proto,
)
from cudnn_rnn.layers import _CudnnRNN

__all__ = [
    "DEFAULT_OPSET",
    "MIN_OPSET",
    "ONNX_OPS",
    "OnnxFormatError",
    "from_onnx",
    "load_model",
    "model_proto",
    "tensor_shapes",
    "to_onnx",
]

#: Ops that only move data; a model from_onnx reads has RNN nodes and these, nothing else.
_PLUMBING = frozenset(
    (
        "Cast",
        "Concat",
        "Constant",
        "ConstantOfShape",
        "Expand",
        "Flatten",
        "Gather",
        "Identity",
        "Reshape",
        "Shape",
        "Slice",
        "Split",
        "Squeeze",
        "Transpose",
        "Unsqueeze",
    )
)
#: What ONNX assumes when a node has no ``activations`` attribute.
_DEFAULT_ACTIVATIONS = {
    "LSTM": ("Sigmoid", "Tanh", "Tanh"),
    "GRU": ("Sigmoid", "Tanh"),
    "RNN": ("Tanh",),
}
_META_INPUT_MODE = "cudnn_rnn.input_mode"


# -- writing -------------------------------------------------------------------------------------


def to_onnx(
    layer: _CudnnRNN,
    path: str | os.PathLike[str],
    *,
    opset: int = DEFAULT_OPSET,
    sequence_lens: bool = False,
    initial_state: bool = False,
) -> None:
    """Write ``layer`` to ``path`` as an ONNX model: one standard LSTM/GRU/RNN node per layer.

    ``opset`` is the ONNX opset (``MIN_OPSET`` or later, up to what the installed onnx knows).
    By default the model's only input is ``X``: it runs with the input alone, every sequence full
    length from zero states (onnxruntime refuses a feed that leaves out a declared input, so the
    optional ones are declared only on request). ``sequence_lens=True`` adds the
    ``sequence_lens`` input (variable lengths), ``initial_state=True`` the
    ``initial_h``/``initial_c`` inputs; a model with them must be fed them. The file is written
    atomically. Graph inputs and outputs are described in
    :mod:`cudnn_rnn.formats.onnx_graph`.

    Raises TypeError for anything but our layer, RuntimeError for an unbuilt one, ValueError for
    LSTM projection (no ONNX operator has it), an opset out of range, or a dtype the operators of
    that opset do not take (bfloat16 needs opset 22).
    """
    owner = "to_onnx"
    spec, weights, biases = layer_canonical(layer, owner)
    onnx = import_onnx()
    model = model_proto(
        spec,
        weights,
        biases,
        layer.opaque_kernel.dtype,
        opset=opset,
        sequence_lens=sequence_lens,
        initial_state=initial_state,
        owner=owner,
        name=type(layer).__name__,
        doc=(
            f"{type(layer).__name__}: {spec.num_layers} layer(s), num_units={spec.num_units}, "
            f"input_size={spec.input_size}, {spec.direction}, input_mode={layer.input_mode}"
        ),
    )
    onnx.helper.set_model_props(model, {_META_INPUT_MODE: layer.input_mode})
    _save_atomically(onnx, model, os.fspath(path))


def _save_atomically(onnx: Any, model: Any, path: str) -> None:
    # Weights are stored inside the model (no external data: a layer is far below protobuf's 2 GB).
    atomic.write_file(path, model.SerializeToString())


# -- reading -------------------------------------------------------------------------------------


class OnnxFormatError(files.FormatError):
    """An ONNX model that :func:`from_onnx` cannot read: bytes that are not a valid model, a file
    that is not a regular file, hostile sizes, or a graph that computes something else than a
    stack of our layers."""


#: Ops that lay data out differently without changing it, by the index of their data inputs
#: (None: all of them); their other inputs (a shape, axes) only say how. Only these may stand
#: between the graph inputs, the RNN nodes and the graph outputs.
_LAYOUT_OPS: dict[str, tuple[int, ...] | None] = {
    "Concat": None,
    "Flatten": (0,),
    "Identity": (0,),
    "Reshape": (0,),
    "Squeeze": (0,),
    "Transpose": (0,),
    "Unsqueeze": (0,),
}
#: What carries an RNN node's initial state or sequence lengths to it without changing a value:
#: the layout ops, and picking or repeating values (data input 0 only).
_STATE_OPS: dict[str, tuple[int, ...] | None] = {
    **_LAYOUT_OPS,
    "Cast": (0,),
    "Expand": (0,),
    "Gather": (0,),
    "Slice": (0,),
}
_STANDARD_DOMAINS = ("", "ai.onnx")


@dataclass
class _Node:
    """One RNN node of a model read by from_onnx: what it computes and its weights."""

    name: str
    mode: str
    hidden: int
    dirs: int
    w: np.ndarray
    r: np.ndarray
    b: np.ndarray | None


#: The largest message protobuf serialises or parses (2 GiB - 1 bytes): a model file past it is
#: refused from its size before it is read, whatever its format (onnx.checker serialises the
#: model, so one that does not fit is refused later anyway).
_MAX_PROTOBUF = 2**31 - 1


def load_model(path: str | os.PathLike[str]) -> Any:
    """The ``onnx.ModelProto`` in the file ``path``, checked; :func:`from_onnx` and the
    ``cudnn-rnn`` command read ONNX files with it.

    ``path`` must be a regular file: a FIFO, a device or a folder is refused before it is opened,
    a file over 2 GiB (no protobuf is larger) before it is read.
    External data must be regular files in the model's folder (no absolute path, no ``..``, no
    link out of it), and each tensor's range must exist in its file without overlapping
    another's (no byte is read twice). Then ``onnx.checker`` checks the model.

    Raises OnnxFormatError for all of these and for bytes that are not an ONNX model,
    FileNotFoundError for a missing file.
    """
    onnx = import_onnx()
    name = os.fspath(path)
    label = f"from_onnx: {name!r}"
    try:  # refused from its size: reading it would be wasted
        file = files.open_regular(name, max_size=_MAX_PROTOBUF)
    except files.NotRegularFile as err:
        raise _not_regular(err, label) from None
    except files.FileTooLarge as err:
        raise OnnxFormatError(
            f"{label} is {err.size} bytes, more than the {_MAX_PROTOBUF} a protobuf can "
            "hold, so it is no ONNX model; a model this large keeps its weights in external "
            "data files (onnx.save_model(..., save_as_external_data=True))."
        ) from None
    with file:
        data = file.read()
    registry = onnx.serialization.registry
    fmt = registry.get_format_from_file_extension(os.path.splitext(name)[1]) or "protobuf"
    try:
        model = onnx.load_model_from_string(data, format=fmt)
    except Exception as err:  # whatever the parser raises, these bytes are not a model
        raise OnnxFormatError(
            f"{label} is not an ONNX model ({type(err).__name__}: {err})."
        ) from err
    _load_external_data(onnx, model, os.path.dirname(os.path.abspath(name)), label)
    _check_model(onnx, model, label)
    return model


def tensor_shapes(path: str | os.PathLike[str]) -> dict[str, tuple[tuple[int, ...], str]]:
    """Name -> (shape, dtype name) of every initializer of the ONNX model at ``path``, read by
    :func:`load_model` (checked); shapes and dtypes come from the headers, no weight is decoded."""
    model = load_model(path)
    numpy_dtype = import_onnx().helper.tensor_dtype_to_np_dtype
    try:
        return {
            i.name: (tuple(int(d) for d in i.dims), numpy_dtype(i.data_type).name)
            for i in model.graph.initializer
        }
    except KeyError as err:
        raise OnnxFormatError(f"{path}: an initializer has no known dtype: {err}") from err


def _not_regular(err: files.NotRegularFile, label: str) -> OnnxFormatError:
    return OnnxFormatError(
        f"{label} is not a regular file; only regular files are read (it is {err.kind})."
    )


def _check_model(onnx: Any, model: Any, label: str, *, shapes: bool = False) -> None:
    """onnx.checker; with ``shapes``, strict shape inference too (an axis or a permutation out
    of range in the ops around the RNN nodes makes a model that cannot run at all)."""
    try:
        onnx.checker.check_model(model)
        if shapes:
            onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    except Exception as err:  # ValidationError, InferenceError, or protobuf's size limits
        raise OnnxFormatError(f"{label}: the model is not valid ONNX: {err}") from err


def _tensors(model: Any) -> list[Any]:
    """Every TensorProto of ``model``: initializers, sparse ones, attributes, subgraphs."""
    found: list[Any] = []
    graphs = [model.graph]
    nodes = [n for f in model.functions for n in f.node]
    while graphs or nodes:
        if graphs:
            graph = graphs.pop()
            found.extend(graph.initializer)
            for sparse in graph.sparse_initializer:
                found += [sparse.values, sparse.indices]
            nodes.extend(graph.node)
            continue
        for attribute in nodes.pop().attribute:
            found += [attribute.t, *attribute.tensors]
            for sparse in [attribute.sparse_tensor, *attribute.sparse_tensors]:
                found += [sparse.values, sparse.indices]
            graphs += [attribute.g, *attribute.graphs]
    return found


def _load_external_data(onnx: Any, model: Any, folder: str, label: str) -> None:
    """Read the tensors ``model`` keeps in other files of ``folder``, after checking that each
    is a regular file inside it and each range exists and overlaps no other."""
    helper = onnx.external_data_helper
    external = [t for t in _tensors(model) if helper.uses_external_data(t)]
    ranges: dict[str, list[tuple[int, int, str]]] = {}
    root = os.path.realpath(folder)
    for tensor in external:
        where = f"{label}: tensor {tensor.name!r} keeps its data in"
        try:
            info = helper.ExternalDataInfo(tensor)
        except ValueError as err:
            raise OnnxFormatError(f"{where} a file described wrongly: {err}") from err
        location = info.location
        target = os.path.realpath(os.path.join(root, location))
        if (
            not location
            or os.path.isabs(location)
            or ".." in location.replace("\\", "/").split("/")
            or os.path.commonpath([root, target]) != root
        ):
            raise OnnxFormatError(
                f"{where} {location!r}, which is not a file in the model's folder {folder!r}."
            )
        try:
            size = files.regular_size(target)
        except files.NotRegularFile as err:
            raise _not_regular(err, f"{where} {location!r}, which") from None
        except OSError as err:
            raise OnnxFormatError(f"{where} {location!r}, which cannot be read: {err}") from err
        offset = info.offset or 0
        length = size - offset if info.length is None else info.length
        if offset + length > size or length < 0:
            raise OnnxFormatError(
                f"{where} {location!r} at bytes [{offset}, {offset + length}), but that file "
                f"has {size} bytes."
            )
        ranges.setdefault(target, []).append((offset, offset + length, tensor.name))
    for target, spans in ranges.items():
        spans.sort()
        for (_, end, first), (start, _, second) in itertools.pairwise(spans):
            if start < end:
                raise OnnxFormatError(
                    f"{label}: tensors {first!r} and {second!r} claim overlapping bytes of "
                    f"{os.path.relpath(target, root)!r}; every byte of external data belongs to "
                    "one tensor."
                )
    for tensor in external:
        try:
            helper.load_external_data_for_tensor(tensor, folder)
        except Exception as err:  # onnx's own checks of the location
            raise OnnxFormatError(
                f"{label}: the external data of tensor {tensor.name!r} cannot be read: {err}"
            ) from err


def from_onnx(source: str | os.PathLike[str] | Any, *, input_mode: str | None = None) -> _CudnnRNN:
    """Our layer from an ONNX model (a path or a loaded ``onnx.ModelProto``) whose RNN nodes are
    a stack of standard LSTM, GRU or RNN layers (see the module docstring).

    ``input_mode`` defaults to what :func:`to_onnx` recorded in the model, else
    ``"linear_input"``; ``"skip_input"`` needs identity ``W`` in the first node. The layer is
    float32/float64/float16 as the model's weights, on the CPU.

    A path is read with :func:`load_model`. The graph must compute what the layer computes: its
    first RNN node's ``X`` is a graph input, each next one's is the ``Y`` before it, and every
    graph output is the last node's ``Y`` or the nodes' ``Y_h`` (or ``Y_c``) in layer order,
    with only layout ops (Transpose, Reshape, Squeeze, Unsqueeze, Flatten, Identity, Concat) on
    the way. Weights computed from constants are evaluated with bounds (see :class:`_Graph`).

    Raises OnnxFormatError (a ValueError) for a file or model it cannot read: not ONNX, not a
    regular file, hostile sizes, no RNN node, nodes of other domains or other computing ops,
    nodes that are not one stack of the same kind, outputs not computed by them, weights that
    are not constants, or attributes that compute other math: ``clip``, non-default
    activations, GRU ``linear_before_reset=0``, LSTM ``input_forget`` or non-zero peepholes
    ``P``, ``direction="reverse"``. FileNotFoundError for a missing file.
    """
    owner = "from_onnx"
    onnx = import_onnx()
    if isinstance(source, (str, os.PathLike)):
        model = load_model(source)
    elif isinstance(source, onnx.ModelProto):
        model = source
        uses = onnx.external_data_helper.uses_external_data
        stored = [t.name for t in _tensors(model) if uses(t)]
        if stored:
            raise OnnxFormatError(
                f"{owner}: tensors {stored[:3]} of the model keep their data in external files, "
                "which a loaded ModelProto cannot locate; pass the model's path instead."
            )
        _check_model(onnx, model, owner)
    else:
        raise TypeError(
            f"{owner}: expected a path or an onnx.ModelProto, got {type(source).__name__}."
        )
    rnn_nodes = _rnn_nodes(model, owner)
    flow = _Graph(onnx, model, owner)
    nodes = [_read_node(onnx, n, flow, owner) for n in rnn_nodes]
    _check_data_flow(flow, rnn_nodes, owner)
    _check_states(flow, rnn_nodes, owner)
    first = nodes[0]
    for n in nodes[1:]:
        if (n.mode, n.hidden, n.dirs) != (first.mode, first.hidden, first.dirs):
            raise OnnxFormatError(
                f"{owner}: RNN node {n.name!r} is a {n.mode} of hidden_size {n.hidden} with "
                f"{n.dirs} direction(s), but node {first.name!r} is a {first.mode} of hidden_size "
                f"{first.hidden} with {first.dirs}; our layer stacks layers of one kind only."
            )
    if input_mode is None:
        meta = {p.key: p.value for p in model.metadata_props}
        try:
            recorded = meta.get(_META_INPUT_MODE, CUDNN_INPUT_LINEAR_MODE)
            input_mode = check_input_mode(owner, recorded)
        except (TypeError, ValueError) as err:  # TypeError: bytes that are not UTF-8
            raise OnnxFormatError(f"{err} (read from the model's metadata)") from err
    input_mode = check_input_mode(owner, input_mode)
    d, h = first.dirs, first.hidden
    try:
        spec = RNNSpec(
            first.mode,
            len(nodes),
            h,
            int(first.w.shape[-1]),
            input_mode,
            CUDNN_RNN_BIDIRECTION if d == 2 else CUDNN_RNN_UNIDIRECTION,
            owner=owner,
        )
    except ValueError as err:
        raise OnnxFormatError(str(err)) from err
    g = len(CUDNN_GATES[spec.mode])
    dtypes = {a.dtype for n in nodes for a in (n.w, n.r, n.b) if a is not None}
    if len(dtypes) != 1:
        raise OnnxFormatError(f"{owner}: the RNN weights mix dtypes {sorted(map(str, dtypes))}.")
    blocks: dict[BlockKey, Tensor] = {}
    for index, n in enumerate(nodes):
        expect = {
            "W": (d, g * h, spec.layer_input_size(index)),
            "R": (d, g * h, h),
            "B": (d, 2 * g * h),
        }
        # The shapes are compared before a missing B is made: h comes from an attribute.
        got = {"W": n.w.shape, "R": n.r.shape, "B": expect["B"] if n.b is None else n.b.shape}
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
    weights, biases = unstack_gates(spec, blocks, GATE_ORDER)
    dtype = weights[0].dtype
    # Last, so that the refusals above, which say more, come first.
    _check_model(onnx, model, owner, shapes=True)
    try:
        return layer_from_canonical(
            spec, weights, biases, dtype=dtype, device=torch.device("cpu"), owner=owner
        )
    except ValueError as err:  # skip_input without identity W
        raise OnnxFormatError(str(err)) from err


def _rnn_nodes(model: Any, owner: str) -> list[Any]:
    """The standard RNN nodes of ``model``'s graph, in graph order, after refusing nodes of
    other domains (and model-local functions) and ops that compute."""
    graph = model.graph
    local = {(f.domain, f.name) for f in model.functions}
    for n in graph.node:
        if n.domain not in _STANDARD_DOMAINS or (n.domain, n.op_type) in local:
            raise OnnxFormatError(
                f"{owner}: node {n.name!r} is {n.op_type!r} of domain {n.domain!r}, not a "
                "standard ONNX operator; our layer computes the standard LSTM, GRU and RNN "
                "operators only."
            )
    ops = {op.op_type for op in ONNX_OPS.values()}
    rnn_nodes = [n for n in graph.node if n.op_type in ops]
    if not rnn_nodes:
        found = sorted({n.op_type for n in graph.node})
        raise OnnxFormatError(
            f"{owner}: not an RNN model: the graph has no LSTM, GRU or RNN node (it has "
            f"{found or 'no nodes'}). Note that torch.onnx.export(..., dynamo=True) unrolls "
            "torch.nn.RNN into MatMul/Add/Tanh ops: export it with dynamo=False."
        )
    others = sorted({n.op_type for n in graph.node} - ops - _PLUMBING)
    if others:
        raise OnnxFormatError(
            f"{owner}: the graph also computes with {others}; our layer is a stack of RNN layers "
            "only, so it would not compute what this model computes."
        )
    return rnn_nodes


def _check_data_flow(flow: _Graph, rnn_nodes: list[Any], owner: str) -> None:
    """Refuse a graph whose data does not flow graph input -> RNN nodes -> graph outputs, with
    layout ops only on the way (:data:`_LAYOUT_OPS`): the layer would compute something else."""
    for before, node in zip([None, *rnn_nodes], rnn_nodes):
        label = f"{node.op_type} node {node.name!r}"
        leaves = flow.data_sources(node.input[0] if node.input else "")
        if before is None:
            if len(leaves) != 1 or not flow.is_runtime_input(leaves[0]):
                raise OnnxFormatError(
                    f"{owner}: the input X of {label} comes from {flow.describe(leaves)}, not "
                    "from one graph input through layout ops; our layer takes the input as is."
                )
        elif leaves != [before.output[0]]:
            raise OnnxFormatError(
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
    for output in flow.outputs:
        leaves = flow.data_sources(output)
        if leaves == [last_y]:
            continue
        found = [state.get(leaf) for leaf in leaves]
        kinds = {f[0] for f in found if f is not None}
        layers = [f[1] for f in found if f is not None]
        if None not in found and len(kinds) == 1 and layers == sorted(set(layers)):
            continue
        raise OnnxFormatError(
            f"{owner}: graph output {output!r} comes from {flow.describe(leaves)}; our layer "
            "computes the last RNN node's Y and the nodes' Y_h/Y_c in layer order, with only "
            f"layout ops {sorted(_LAYOUT_OPS)} after them, so it would not compute what this "
            "model computes."
        )


def _check_states(flow: _Graph, rnn_nodes: list[Any], owner: str) -> None:
    """Refuse RNN nodes whose ``sequence_lens`` or initial states our layer would not see.

    Our layer starts from the states it is called with (zeros by default) over the lengths it
    is called with (full by default). A node's ``initial_h``/``initial_c`` must therefore come
    from graph inputs (the caller's states) or be zeros; its ``sequence_lens`` must come from a
    graph input. A non-zero constant state or constant lengths would be silently dropped.
    """
    for node in rnn_nodes:
        label = f"{node.op_type} node {node.name!r}"
        for index, what in ((4, "sequence_lens"), (5, "initial_h"), (6, "initial_c")):
            name = node.input[index] if len(node.input) > index else ""
            if not name:
                continue
            leaves = flow.data_sources(name, _STATE_OPS)
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


def _as_tensor(a: np.ndarray) -> Tensor:
    if a.dtype.name == "bfloat16":  # ml_dtypes' bfloat16, which torch.from_numpy cannot take
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(np.array(a))


def _product(values: Any) -> int:
    """The product of dimensions, as an exact Python int (never a NumPy overflow)."""
    total = 1
    for v in values:
        total *= int(v)
    return total


class _Graph:
    """Data flow of a model's graph: who produces each tensor, and the values of constants.

    Weights computed from constants are evaluated one plumbing node at a time, and before a node
    runs the elements of its outputs are bounded from its inputs' values and shapes (an exact
    integer product, e.g. the shape a ``ConstantOfShape`` or ``Expand`` asks for). Plumbing only
    moves data the model holds, so no output may have more elements than twice the model's
    bytes (every value stored takes at least half a byte), and all the values evaluated for one
    model together no more than eight times; a node that would exceed this is refused before it
    allocates anything.
    """

    def __init__(self, onnx: Any, model: Any, owner: str) -> None:
        self._onnx = onnx
        self._model = model
        self._owner = owner
        graph = model.graph
        self._inits = {t.name: t for t in graph.initializer}
        self._producer = {out: n for n in graph.node for out in n.output if out}
        # A graph input with an initializer of the same name is a default: a constant as well.
        self._runtime = {i.name for i in graph.input} - set(self._inits)
        self.outputs = [o.name for o in graph.output]
        size = max(model.ByteSize(), 1)
        self._limit, self._budget = 2 * size, 8 * size
        self._values: dict[str, np.ndarray] = {}

    def is_runtime_input(self, name: str) -> bool:
        return name in self._runtime

    def ancestors(self, name: str) -> tuple[set[str], list[Any]]:
        """The tensors ``name`` is computed from (itself included) and the nodes that do it."""
        names: set[str] = set()
        nodes: dict[int, Any] = {}
        stack = [name]
        while stack:
            current = stack.pop()
            if current == "" or current in names:
                continue
            names.add(current)
            node = self._producer.get(current)
            if node is not None and current not in self._inits:
                nodes[id(node)] = node
                stack.extend(node.input)
        return names, [n for n in self._model.graph.node if id(n) in nodes]  # graph order

    def data_sources(
        self, name: str, ops: Mapping[str, tuple[int, ...] | None] = _LAYOUT_OPS
    ) -> list[str]:
        """The tensors whose data ``name`` is, through ``ops`` (their data inputs only; layout
        ops by default), in order; a tensor reached twice is listed twice (and not followed
        again)."""
        leaves: list[str] = []
        seen: set[str] = set()
        stack = [name]
        while stack:
            current = stack.pop()
            node = self._producer.get(current)
            if current in seen or node is None or current in self._inits:
                leaves.append(current)
                continue
            seen.add(current)
            data = ops.get(node.op_type, ())
            if data == ():
                leaves.append(current)
                continue
            inputs = list(node.input)
            picked = inputs if data is None else [inputs[i] for i in data if i < len(inputs)]
            stack.extend(reversed(picked))
        return leaves

    def is_zero(self, name: str) -> bool:
        """Whether ``name`` is a constant of zeros: ``ConstantOfShape`` of value 0 (its shape is
        not evaluated), or a constant whose every value is 0."""
        node = self._producer.get(name)
        if node is not None and node.op_type == "ConstantOfShape" and name not in self._inits:
            value = _attributes(self._onnx, node).get("value")
            return value is None or not np.asarray(self._onnx.numpy_helper.to_array(value)).any()
        value = self.constant(name)
        return value is not None and not np.asarray(value).any()

    def describe(self, names: list[str]) -> str:
        """Where each of ``names`` comes from, in words."""
        parts = []
        for name in names[:4]:
            node = self._producer.get(name)
            if name in self._inits:
                parts.append(f"the initializer {name!r}")
            elif name in self._runtime:
                parts.append(f"the graph input {name!r}")
            elif node is None:
                parts.append(f"{name!r}, which nothing computes")
            else:
                index = list(node.output).index(name)
                parts.append(f"output {index} ({name!r}) of {node.op_type} node {node.name!r}")
        more = f" and {len(names) - 4} more" if len(names) > 4 else ""
        return (", ".join(parts) or "nothing") + more

    def constant(self, name: str) -> np.ndarray | None:
        """The value of ``name``, or None when it depends on a run-time input."""
        names, nodes = self.ancestors(name)
        if name not in self._inits:
            sources = names - set(self._producer) - set(self._inits)
            if sources or names & self._runtime:  # a graph input (or a dangling name)
                return None
        for node in nodes:
            if any(out and out not in self._values for out in node.output):
                self._run(node)
        return self._value(name)

    def _value(self, name: str) -> np.ndarray:
        if name not in self._values:
            if name not in self._inits:
                raise self._refuse(f"tensor {name!r} is used before it is computed")
            try:
                value = np.asarray(self._onnx.numpy_helper.to_array(self._inits[name]))
            except Exception as err:  # data that does not match its dims or dtype
                raise self._refuse(f"initializer {name!r} cannot be read: {err}") from err
            self._values[name] = value
        return self._values[name]

    def _refuse(self, what: str) -> OnnxFormatError:
        return OnnxFormatError(f"{self._owner}: {what}.")

    def _run(self, node: Any) -> None:
        label = f"{node.op_type} node {node.name!r}"
        if node.op_type not in _PLUMBING:
            raise self._refuse(
                f"the weights are computed by {label}; only ops that move data "
                f"({sorted(_PLUMBING)}) may compute weights"
            )
        args = [self._value(i) if i else None for i in node.input]
        try:
            elements = self._elements(node, args)
        except (ValueError, TypeError, IndexError) as err:
            raise self._refuse(f"{label} has unusable inputs: {err}") from err
        if elements > self._limit or elements > self._budget:
            raise self._refuse(
                f"{label} would make {elements} elements, more than the model's data could "
                f"hold ({min(self._limit, self._budget)}); refused before allocating them"
            )
        helper = self._onnx.helper
        feeds = {i: a for i, a in zip(node.input, args) if a is not None}
        sub = helper.make_model(
            helper.make_graph(
                [node],
                "plumbing",
                [helper.make_empty_tensor_value_info(i) for i in feeds],
                [helper.make_empty_tensor_value_info(o) for o in node.output if o],
            ),
            opset_imports=list(self._model.opset_import),
        )
        try:
            evaluator = importlib.import_module("onnx.reference").ReferenceEvaluator(sub)
            outputs = [np.asarray(v) for v in evaluator.run(None, feeds)]
        except Exception as err:  # the reference implementation refusing its inputs
            raise self._refuse(f"{label} cannot be evaluated: {err}") from err
        made = sum(v.size for v in outputs)
        if made > elements:  # the bound above is wrong for this op: a bug, not the file's fault
            raise RuntimeError(f"{self._owner}: {label} made {made} > {elements} elements.")
        self._budget -= made
        self._values.update(zip([o for o in node.output if o], outputs))

    @staticmethod
    def _elements(node: Any, args: list[np.ndarray | None]) -> int:
        """An upper bound on the elements of ``node``'s outputs, from its inputs alone."""
        op = node.op_type
        attrs = {a.name: a for a in node.attribute}
        if op == "Constant":
            (a,) = attrs.values()
            if a.name in ("value", "sparse_value"):
                dims = a.t.dims if a.name == "value" else a.sparse_tensor.dims
                if any(v < 0 for v in dims):
                    raise ValueError(f"negative dimensions {list(dims)}")
                return _product(dims)
            return max(len(a.floats), len(a.ints), len(a.strings), 1)
        data = args[0] if args else None
        if data is None:
            raise ValueError("no data input")
        if op in ("ConstantOfShape", "Expand"):
            shape = args[0] if op == "ConstantOfShape" else args[1]
            if shape is None or shape.ndim != 1 or shape.dtype.kind not in "iu":
                raise ValueError("the shape is not a 1-D integer tensor")
            wanted = [int(v) for v in shape]
            if any(v < 0 for v in wanted):
                raise ValueError(f"negative dimensions {wanted}")
            if op == "ConstantOfShape":
                return _product(wanted)
            n = max(len(wanted), data.ndim)
            ours = [1] * (n - data.ndim) + list(data.shape)
            wanted = [1] * (n - len(wanted)) + wanted
            return _product(max(a, b) for a, b in zip(ours, wanted))
        if op == "Concat":
            return sum(a.size for a in args if a is not None)
        if op == "Gather":
            indices = args[1] if len(args) > 1 else None
            axis = attrs["axis"].i if "axis" in attrs else 0
            if indices is None or not -data.ndim <= axis < data.ndim:
                raise ValueError(f"axis {axis} of data of shape {data.shape}")
            return _product([*data.shape[:axis], indices.size, *data.shape[axis:][1:]])
        if op == "Shape":
            return data.ndim
        # Cast, Flatten, Identity, Reshape, Slice, Split, Squeeze, Transpose, Unsqueeze: at most
        # the elements they are given.
        return int(data.size)


def _attributes(onnx: Any, node: Any) -> dict[str, Any]:
    def text(v: Any) -> Any:
        return v.decode(errors="replace") if isinstance(v, bytes) else v

    values = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    return {k: [text(x) for x in v] if isinstance(v, list) else text(v) for k, v in values.items()}


def _read_node(onnx: Any, node: Any, graph: _Graph, owner: str) -> _Node:
    attrs = _attributes(onnx, node)
    label = f"{node.op_type} node {node.name!r}"

    def refuse(what: str) -> OnnxFormatError:
        return OnnxFormatError(f"{owner}: {label} {what}; our layers compute cuDNN's math only.")

    direction = attrs.get("direction", "forward")
    if direction not in ("forward", "bidirectional"):
        raise OnnxFormatError(
            f"{owner}: {label} has direction={direction!r}; our layers run 'forward' "
            "(unidirectional) or 'bidirectional', not a reverse-only layer."
        )
    dirs = 2 if direction == "bidirectional" else 1
    if "clip" in attrs:
        raise refuse(f"has clip={attrs['clip']} (cell clipping), which cuDNN does not do")
    if attrs.get("input_forget", 0):
        raise refuse("has input_forget=1 (coupled input and forget gates)")
    if node.op_type == "GRU" and attrs.get("linear_before_reset", 0) == 0:
        raise refuse(
            "has linear_before_reset=0: it computes different math (the reset gate is applied "
            "before the recurrent matmul; cuDNN applies it after, which is linear_before_reset=1)"
        )
    mode = _mode_of(node.op_type, attrs.get("activations"), dirs)
    if mode is None:
        expected = " or ".join(
            str(list(op.activations)) for op in ONNX_OPS.values() if op.op_type == node.op_type
        )
        raise refuse(
            f"has activations={attrs['activations']}; the ones cuDNN computes are {expected} "
            "(one list per direction)"
        )

    def weight(index: int, what: str) -> np.ndarray | None:
        name = node.input[index] if len(node.input) > index else ""
        if name == "":
            return None
        value = graph.constant(name)
        if value is None:
            raise OnnxFormatError(
                f"{owner}: {label}: its {what} input {name!r} is computed from the graph's "
                "run-time inputs, not from constants; only models with constant weights can be "
                "read."
            )
        if value.dtype.name not in ("float16", "bfloat16", "float32", "float64"):
            raise OnnxFormatError(
                f"{owner}: {label}: its {what} input {name!r} is {value.dtype.name}; RNN weights "
                "are float16, bfloat16, float32 or float64."
            )
        return value

    w, r = weight(1, "W"), weight(2, "R")
    if w is None or r is None:
        raise OnnxFormatError(f"{owner}: {label} has no W or R input.")
    b = weight(3, "B")
    for what, value, ndim in (("W", w, 3), ("R", r, 3), ("B", b, 2)):
        if value is not None and value.ndim != ndim:
            raise OnnxFormatError(
                f"{owner}: {label}: {what} has shape {value.shape}; expected {ndim} dimensions."
            )
    if node.op_type == "LSTM":
        p = weight(7, "P (peepholes)")
        if p is not None and np.any(p != 0):
            raise refuse("has non-zero peepholes P")
    hidden = int(attrs["hidden_size"]) if "hidden_size" in attrs else int(r.shape[-1])
    return _Node(node.name, mode, hidden, dirs, w, r, b)


def _mode_of(op_type: str, activations: list[str] | None, dirs: int) -> str | None:
    """Our mode for an RNN node's activations (None: they compute something else)."""
    given = [str(a).lower() for a in activations or _DEFAULT_ACTIVATIONS[op_type]]
    for mode, op in ONNX_OPS.items():
        expected = [a.lower() for a in op.activations]
        if op.op_type == op_type and given in (expected, expected * dirs):
            return mode
    return None
