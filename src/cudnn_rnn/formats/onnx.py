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
``nn.RNN`` into ``MatMul``/``Add``/``Tanh``: not readable). Without ``node=`` it reads a model
that is one stack of RNN layers, the RNN nodes in graph order as the layers. Real models are
whole networks: :func:`find_rnns` lists every RNN a model holds at any depth (the main graph,
``If``/``Loop``/``Scan`` subgraphs, model-local functions) with its path, sizes and every reason
cuDNN's math does not compute it, and ``from_onnx(path, node=NAME)`` reads one of them whatever
else the graph computes. ``W``, ``R`` and ``B`` may be initializers, ``Constant`` nodes (of the
node's graph or of the graphs around it) or computed from them by plumbing ops (evaluated with
``onnx.reference``, sizes bounded before anything is allocated). Initial states and sequence
lengths are run-time inputs, not parameters: they are not read, nor is dropout (ONNX models are
for inference). A model whose RNN nodes are batch-major (``layout=1``) gives the same layer; call
it with ``time_major=False``.

onnx (and onnxruntime, to run the models) are optional dependencies, imported only when a
function here runs: ``pip install onnx onnxruntime``.
"""

from __future__ import annotations

import importlib
import itertools
import os
import re
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from cudnn_rnn import atomic, files
from cudnn_rnn.core.constants import (
    CUDNN_GRU,
    CUDNN_INPUT_LINEAR_MODE,
    CUDNN_LSTM,
    CUDNN_RNN_BIDIRECTION,
    CUDNN_RNN_UNIDIRECTION,
)
from cudnn_rnn.core.gates import CUDNN_GATES
from cudnn_rnn.core.layout import INPUT, INPUT_BIAS, RECURRENT, RECURRENT_BIAS
from cudnn_rnn.core.modes import MODES
from cudnn_rnn.core.spec import RNNSpec, check_input_mode
from cudnn_rnn.formats.canonical import layer_canonical, layer_from_canonical
from cudnn_rnn.formats.found import FoundRNN
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
    "find_rnns",
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
    return _load_model(path, "from_onnx")


def _load_model(path: str | os.PathLike[str], owner: str) -> Any:
    """:func:`load_model`, its messages naming ``owner``."""
    onnx = import_onnx()
    name = os.fspath(path)
    label = f"{owner}: {name!r}"
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
            f"{label} is not an ONNX model ({type(err).__name__}: {files.escape(str(err))})."
        ) from err
    _load_external_data(onnx, model, os.path.dirname(os.path.abspath(name)), label)
    _check_model(onnx, model, label)
    return model


def tensor_shapes(path: str | os.PathLike[str]) -> dict[str, tuple[tuple[int, ...], str]]:
    """Name -> (shape, dtype name) of every tensor the ONNX model at ``path`` stores: the
    initializers of its graph and of its subgraphs, and the values of its ``Constant`` nodes
    (subgraphs' and model-local functions' too; named by their output; a name met again is
    listed once). Read by :func:`load_model` (checked); shapes and dtypes come from the headers,
    no weight is decoded."""
    onnx = import_onnx()
    model = load_model(path)
    numpy_dtype = onnx.helper.tensor_dtype_to_np_dtype
    tp = onnx.TensorProto
    found: dict[str, tuple[tuple[int, ...], str]] = {}

    def add(name: str, dims: Any, data_type: int) -> None:
        if name in found:
            return
        try:
            found[name] = (tuple(int(d) for d in dims), numpy_dtype(data_type).name)
        except KeyError as err:
            raise OnnxFormatError(
                f"{path}: tensor {name!r} has no known dtype: {files.escape(str(err))}"
            ) from err

    graphs = deque([model.graph])
    nodes = deque(n for f in model.functions for n in f.node)
    while graphs or nodes:
        if graphs:
            graph = graphs.popleft()
            for t in graph.initializer:
                add(t.name, t.dims, t.data_type)
            nodes.extend(graph.node)
            continue
        node = nodes.popleft()
        for a in node.attribute:
            graphs.extend([a.g] if a.type == _GRAPH else a.graphs if a.type == _GRAPHS else [])
        if node.op_type != "Constant" or node.domain not in _STANDARD_DOMAINS or not node.output:
            continue
        for a in node.attribute:
            if a.name == "value":
                add(node.output[0], a.t.dims, a.t.data_type)
            elif a.name == "sparse_value":
                add(node.output[0], a.sparse_tensor.dims, a.sparse_tensor.values.data_type)
            elif a.name in ("value_float", "value_int"):
                add(node.output[0], (), tp.FLOAT if a.name == "value_float" else tp.INT64)
            elif a.name in ("value_floats", "value_ints"):
                floats = a.name == "value_floats"
                add(
                    node.output[0],
                    (len(a.floats if floats else a.ints),),
                    tp.FLOAT if floats else tp.INT64,
                )
    return found


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
        raise OnnxFormatError(
            f"{label}: the model is not valid ONNX: {files.escape(str(err))}"
        ) from err


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
        where = f"{label}: tensor {files.quote(tensor.name)} keeps its data in"
        try:
            info = helper.ExternalDataInfo(tensor)
        except ValueError as err:
            raise OnnxFormatError(
                f"{where} a file described wrongly: {files.escape(str(err))}"
            ) from err
        location = info.location
        target, size = _external_file(
            root, folder, location, f"{where} {files.quote(location)}, which"
        )
        offset = info.offset or 0
        length = size - offset if info.length is None else info.length
        if offset + length > size or length < 0:
            raise OnnxFormatError(
                f"{where} {files.quote(location)} at bytes [{offset}, {offset + length}), but "
                f"that file has {size} bytes."
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
                f"{label}: the external data of tensor {tensor.name!r} cannot be read: "
                f"{files.escape(str(err))}"
            ) from err


def _external_file(root: str, folder: str, location: str, which: str) -> tuple[str, int]:
    """The real path and size of the external data file ``location`` names: a regular file
    inside the model's ``folder`` (``root``: its real path). Anything else is an
    OnnxFormatError whose message starts with ``which`` ("... keeps its data in 'w.bin',
    which"): no name, a NUL in it, an absolute path, ``..``, a link out of the folder, a folder,
    a FIFO or a device, a link loop, a name too long, a file that cannot be looked at."""
    if not location or os.path.isabs(location) or ".." in location.replace("\\", "/").split("/"):
        raise OnnxFormatError(f"{which} is not a file in the model's folder {folder!r}.")
    if "\0" in location:  # the operating system takes no such name (Python: ValueError)
        raise OnnxFormatError(f"{which} holds a NUL character, so it names no file.")
    try:
        target = os.path.realpath(os.path.join(root, location))
        inside = os.path.commonpath([root, target]) == root
    except (OSError, ValueError) as err:  # a name the system refuses
        raise OnnxFormatError(f"{which} names no file ({files.escape(str(err))}).") from err
    if not inside:
        raise OnnxFormatError(f"{which} is not a file in the model's folder {folder!r}.")
    try:
        return target, files.regular_size(target)
    except files.NotRegularFile as err:
        raise _not_regular(err, which) from None
    except OSError as err:  # missing, a link loop (ELOOP), a name too long, no permission
        reason = err.strerror or files.escape(str(err))
        raise OnnxFormatError(f"{which} cannot be read: {reason}.") from err


def _source_model(onnx: Any, source: Any, owner: str) -> Any:
    """The checked ``ModelProto`` of a path (read by :func:`load_model`) or of a loaded model."""
    if isinstance(source, (str, os.PathLike)):
        return _load_model(source, owner)
    if isinstance(source, onnx.ModelProto):
        uses = onnx.external_data_helper.uses_external_data
        stored = [t.name for t in _tensors(source) if uses(t)]
        if stored:
            raise OnnxFormatError(
                f"{owner}: tensors {stored[:3]} of the model keep their data in external files, "
                "which a loaded ModelProto cannot locate; pass the model's path instead."
            )
        _check_model(onnx, source, owner)
        return source
    raise TypeError(f"{owner}: expected a path or an onnx.ModelProto, got {type(source).__name__}.")


def from_onnx(
    source: str | os.PathLike[str] | Any,
    *,
    node: str | None = None,
    input_mode: str | None = None,
) -> _CudnnRNN:
    """Our layer from an ONNX model (a path or a loaded ``onnx.ModelProto``): the RNN named
    ``node``, or, without ``node``, the model itself when it is a stack of standard LSTM, GRU or
    RNN layers (see the module docstring).

    ``node`` is a name :func:`find_rnns` lists (a node's path, ``"/If/then_branch//LSTM"``, or
    a stack's, ``"/lstm/LSTM+/lstm/LSTM_1"``), or the path of any one RNN node of a stack (that
    layer alone). That RNN is read whatever else the model computes, at any depth (``If``,
    ``Loop``, ``Scan`` subgraphs, model-local functions): the layer computes what the node(s)
    compute from the same ``X``, initial states and sequence lengths, which the rest of the
    graph computes at run time and the caller passes to the layer. It must be computable
    (:func:`find_rnns`' reasons say why one is not). ``input_mode`` defaults to
    ``"linear_input"``; a node with ``layout=1`` gives the same layer, called with
    ``time_major=False``.

    Without ``node``, the graph must compute what the layer computes: its first RNN node's
    ``X`` is a graph input, each next one's is the ``Y`` before it, and every graph output is
    the last node's ``Y`` or the nodes' ``Y_h`` (or ``Y_c``) in layer order, with only layout
    ops (Transpose, Reshape, Squeeze, Unsqueeze, Flatten, Identity, Concat) on the way. A model
    that computes more (a whole network, control flow) is refused even when it holds one RNN:
    the layer would compute part of it, so the part is named explicitly; the refusal lists the
    model's RNNs and their names. ``input_mode`` defaults to what :func:`to_onnx` recorded in
    the model, else ``"linear_input"``; ``"skip_input"`` needs identity ``W`` in the first node.

    The layer is float32/float64/float16 as the model's weights, on the CPU. Weights computed
    from constants (initializers, ``Constant`` nodes of the node's graph or of outer graphs,
    through Slice/Concat/Unsqueeze/Transpose/Reshape/...) are evaluated with bounds (see
    :class:`_Evaluator`).

    Raises OnnxFormatError (a ValueError) for a file or model it cannot read: not ONNX, not a
    regular file, hostile sizes, no RNN node, a ``node`` the model does not hold, or one cuDNN's
    math does not compute: ``clip``, non-default activations, GRU ``linear_before_reset=0``,
    LSTM ``input_forget`` or non-zero peepholes ``P``, ``direction="reverse"``, weights that are
    not constants, a non-zero constant initial state or constant sequence lengths. Without
    ``node`` also: nodes of other domains or other computing ops, nodes that are not one stack
    of the same kind, outputs not computed by them. TypeError for a ``node`` that is not a
    str, FileNotFoundError for a missing file.
    """
    owner = "from_onnx"
    onnx = import_onnx()
    model = _source_model(onnx, source, owner)
    if node is not None:
        if not isinstance(node, str):
            raise TypeError(
                f"{owner}: node must be a str, a name find_rnns lists, got {type(node).__name__}."
            )
        return _from_node(onnx, model, node, input_mode, owner)
    try:
        return _from_graph(onnx, model, input_mode, owner)
    except _NotOneStack as err:
        raise OnnxFormatError(f"{err} {_node_hint(onnx, model, owner)}".rstrip()) from None


def find_rnns(source: str | os.PathLike[str] | Any) -> list[FoundRNN]:
    """Every RNN of an ONNX model (a path or a loaded ``onnx.ModelProto``), in graph order, at
    any depth: the standard LSTM, GRU and RNN nodes of the main graph, of ``If``/``Loop``/
    ``Scan`` subgraphs (and any other graph attribute), and of model-local functions (once per
    call). Nodes that form one stack of layers (each next node's ``X`` is the ``Y`` before it,
    laid out as ``[T, B, D*H]`` by layout ops, same kind, both computable) are one record of
    ``num_layers`` layers.

    Each record's ``name`` is what ``from_onnx(source, node=name)`` takes: a node's path, its
    steps joined by ``/`` from the main graph: a node's name (as the file spells it, ``/``
    included: torch's ``/lstm/LSTM``), then after a node that holds subgraphs the graph
    attribute's name (``then_branch``, ``body``; ``name[k]`` for a list of graphs), after a call
    of a model-local function the name of the node in its body. A node whose name is empty,
    repeated in its graph, starts with ``#`` or holds ``+`` is ``#index`` (its position in its
    graph), and where two paths would read the same, both use positions for every step. A
    stack's name is its nodes' paths joined by ``+``; each node of it is loadable alone by its
    path (``details["nodes"]``). ``where`` says the same in words.

    ``computable`` is whether cuDNN's math computes the RNN from its ``X``, initial states and
    sequence lengths; ``reasons`` lists every reason it does not (see :func:`from_onnx`), each
    a clause that follows the node's label. ``details``: ``nodes`` (the names of its nodes),
    ``op_type``, ``layout`` (1: batch-major, call the layer with ``time_major=False``) and
    ``dtype`` (None when the weights cannot be read).

    Raises OnnxFormatError for a file that is not a readable ONNX model (as
    :func:`load_model`), for a model-local function that calls itself, and for graphs and
    function calls of more than 500,000 nodes in all; TypeError for another source.
    """
    owner = "find_rnns"
    onnx = import_onnx()
    return _listing(onnx, _source_model(onnx, source, owner), owner).records


# -- the whole graph as one stack of layers ------------------------------------------------------


class _NotOneStack(OnnxFormatError):
    """A graph that is more than one stack of RNN layers: from_onnx names its RNNs (node=)."""


def _from_graph(onnx: Any, model: Any, input_mode: str | None, owner: str) -> _CudnnRNN:
    """from_onnx without node=: the graph is one stack of RNN layers, read as one layer."""
    rnn_nodes = _rnn_nodes(model, owner)
    flow = _Scope.main(_Evaluator(onnx, model, owner), model)
    nodes = [_read_node(onnx, n, flow, owner) for n in rnn_nodes]
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
    if input_mode is None:
        meta = {p.key: p.value for p in model.metadata_props}
        try:
            recorded = meta.get(_META_INPUT_MODE, CUDNN_INPUT_LINEAR_MODE)
            input_mode = check_input_mode(owner, recorded)
        except (TypeError, ValueError) as err:  # TypeError: bytes that are not UTF-8
            raise OnnxFormatError(f"{err} (read from the model's metadata)") from err
    spec, weights, biases = _canonical(nodes, input_mode, owner)
    # Last, so that the refusals above, which say more, come first.
    _check_model(onnx, model, owner, shapes=True)
    return _build(spec, weights, biases, owner)


def _canonical(
    nodes: list[_Node], input_mode: str, owner: str
) -> tuple[RNNSpec, list[Tensor], list[Tensor]]:
    """The spec and canonical tensors of RNN nodes stacked as layers (checked shapes)."""
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
    return spec, weights, biases


def _build(spec: RNNSpec, weights: list[Tensor], biases: list[Tensor], owner: str) -> _CudnnRNN:
    try:
        return layer_from_canonical(
            spec, weights, biases, dtype=weights[0].dtype, device=torch.device("cpu"), owner=owner
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
            raise _NotOneStack(
                f"{owner}: node {n.name!r} is {n.op_type!r} of domain {n.domain!r}, not a "
                "standard ONNX operator; our layer computes the standard LSTM, GRU and RNN "
                "operators only."
            )
    rnn_nodes = [n for n in graph.node if n.op_type in _RNN_OPS]
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
    others = sorted({n.op_type for n in graph.node} - _RNN_OPS - _PLUMBING)
    if others:
        raise _NotOneStack(
            f"{owner}: the graph also computes with {others}; our layer is a stack of RNN layers "
            "only, so it would not compute what this model computes."
        )
    return rnn_nodes


def _holds_rnn_nodes(model: Any) -> bool:
    """Whether a subgraph or a model-local function of ``model`` has a standard RNN node."""
    graphs = [a.g for n in model.graph.node for a in n.attribute if a.type == _GRAPH]
    graphs += [g for n in model.graph.node for a in n.attribute for g in a.graphs]
    nodes = [n for f in model.functions for n in f.node]
    while graphs or nodes:
        if graphs:
            nodes.extend(graphs.pop().node)
            continue
        node = nodes.pop()
        if node.op_type in _RNN_OPS and node.domain in _STANDARD_DOMAINS:
            return True
        graphs += [a.g for a in node.attribute if a.type == _GRAPH]
        graphs += [g for a in node.attribute for g in a.graphs]
    return False


def _check_data_flow(flow: _Scope, rnn_nodes: list[Any], outputs: list[str], owner: str) -> None:
    """Refuse a graph whose data does not flow graph input -> RNN nodes -> graph outputs, with
    layout ops only on the way (:data:`_LAYOUT_OPS`): the layer would compute something else."""
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
            f"layout ops {sorted(_LAYOUT_OPS)} after them, so it would not compute what this "
            "model computes."
        )


def _check_states(flow: _Scope, rnn_nodes: list[Any], owner: str) -> None:
    """Refuse RNN nodes whose ``sequence_lens`` or initial states our layer would not see.

    Our layer starts from the states it is called with (zeros by default) over the lengths it
    is called with (full by default). A node's ``initial_h``/``initial_c`` must therefore come
    from graph inputs (the caller's states) or be zeros; its ``sequence_lens`` must come from a
    graph input. A non-zero constant state or constant lengths would be silently dropped.
    """
    for node in rnn_nodes:
        label = f"{node.op_type} node {node.name!r}"
        for index, what in _STATE_INPUTS:
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


def _read_node(onnx: Any, node: Any, scope: _Scope, owner: str) -> _Node:
    """One RNN node of a graph read whole: its first reason not to be read is refused."""
    label = f"{node.op_type} node {node.name!r}"
    seen = _examine(onnx, node, scope, states=False)
    if seen.reasons:
        raise OnnxFormatError(
            f"{owner}: {_about(label, seen.reasons[0])}; our layers compute cuDNN's math only."
        )
    return seen.as_node(node.name)


# -- one RNN of any graph ------------------------------------------------------------------------


def _from_node(onnx: Any, model: Any, name: str, input_mode: str | None, owner: str) -> _CudnnRNN:
    """from_onnx with node=: the RNN node (or stack) of that name, wherever it is."""
    listing = _listing(onnx, model, owner)
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
            f"{owner}: {name!r} ({target.where}) is not computed by cuDNN's math, so our layers "
            "cannot hold it: " + "; ".join(reasons) + "."
        )
    nodes = [seen.as_node(site.node.name) for site, seen in zip(target.sites, target.seen)]
    spec, weights, biases = _canonical(nodes, input_mode or CUDNN_INPUT_LINEAR_MODE, owner)
    return _build(spec, weights, biases, owner)


def _node_hint(onnx: Any, model: Any, owner: str) -> str:
    """What a refusal of a model that is more than a stack of RNN layers adds: its RNNs."""
    try:
        records = _listing(onnx, model, owner).records
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
        line = f"{files.quote(r.name)} ({what}, {sizes}: {r.where}"
        if not r.computable:
            line += "; not computable: " + files.clip("; ".join(r.reasons), 200)
        shown.append(line + ")")
    more = len(records) - _MAX_NAMED
    return (
        f"To read one RNN of this model, pass its name: from_onnx(path, node=NAME) "
        f"(find_rnns(path) lists them); it has {len(records)}: "
        + ", ".join(shown)
        + (f" and {more} more" if more > 0 else "")
        + "."
    )


def _about(label: str, reason: str) -> str:
    """A reason said of a node: each is a clause that follows its label ("has ...", "its W ...")."""
    return f"{label}{' ' if reason.startswith('has ') else ': '}{reason}"


#: The RNN operators' types, and their gates per direction.
_RNN_OPS = frozenset(op.op_type for op in ONNX_OPS.values())
_GATE_COUNT = {m.onnx_op: m.num_gates for m in MODES.values()}
#: A node's op type -> the cuDNN mode a record names when its activations are not cuDNN's.
_KIND = {"LSTM": CUDNN_LSTM, "GRU": CUDNN_GRU}
#: The RNN node inputs that carry states or lengths: (input index, name).
_STATE_INPUTS = ((4, "sequence_lens"), (5, "initial_h"), (6, "initial_c"))
_FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
#: Nodes visited in all (graphs, subgraphs, each call of a function) before find_rnns refuses.
_MAX_WALK = 500_000
#: Elements of the probe that checks the layout ops between two stacked RNN nodes.
_MAX_PROBE = 1 << 18


@dataclass
class _Seen:
    """What one RNN node computes, its weights, and every reason cuDNN's math does not.

    ``reasons`` refuse it whichever way it is read; ``shape_reasons`` (weights that do not fit
    each other) and ``state_reasons`` (constant states or lengths) are checked by a whole-graph
    read as a stack instead.
    """

    op_type: str
    mode: str | None  # our mode, where the activations are cuDNN's
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

    @property
    def all_reasons(self) -> list[str]:
        return [*self.reasons, *self.shape_reasons, *self.state_reasons]

    @property
    def dtype(self) -> str | None:
        return None if self.w is None else self.w.dtype.name

    @property
    def input_size(self) -> int | None:
        return None if self.w is None or self.w.ndim != 3 else int(self.w.shape[-1])

    def as_node(self, name: str) -> _Node:
        if self.mode is None or self.hidden is None or self.w is None or self.r is None:
            raise RuntimeError(f"{name!r}: read with reasons {self.all_reasons}.")  # a bug
        return _Node(name, self.mode, self.hidden, self.dirs, self.w, self.r, self.b)


def _examine(onnx: Any, node: Any, scope: _Scope, *, states: bool) -> _Seen:
    """Every fact about an RNN node and every reason cuDNN's math does not compute it; with
    ``states``, constant initial states and lengths are reasons too."""
    attrs = _attributes(onnx, scope.resolved(node))
    op = node.op_type
    reasons: list[str] = []
    direction = attrs.get("direction", "forward")
    if direction not in ("forward", "bidirectional"):
        reasons.append(
            f"has direction={direction!r}; our layers run 'forward' (unidirectional) or "
            "'bidirectional', not a reverse-only layer"
        )
    dirs = 2 if direction == "bidirectional" else 1
    if "clip" in attrs:
        reasons.append(f"has clip={attrs['clip']} (cell clipping), which cuDNN does not do")
    if attrs.get("input_forget", 0):
        reasons.append(f"has input_forget={attrs['input_forget']} (coupled input and forget gates)")
    if op == "GRU" and attrs.get("linear_before_reset", 0) == 0:
        reasons.append(
            "has linear_before_reset=0: it computes different math (the reset gate is applied "
            "before the recurrent matmul; cuDNN applies it after, which is linear_before_reset=1)"
        )
    mode = _mode_of(op, attrs.get("activations"), dirs)
    if mode is None:
        expected = " or ".join(
            str(list(o.activations)) for o in ONNX_OPS.values() if o.op_type == op
        )
        reasons.append(
            f"has activations={attrs['activations']}; the ones cuDNN computes are {expected} "
            "(one list per direction)"
        )
    layout = attrs.get("layout", 0)
    if layout not in (0, 1):
        reasons.append(f"has layout={layout!r}; ONNX defines 0 (time-major) and 1 (batch-major)")

    def weight(index: int, what: str) -> np.ndarray | None:
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
        if value.dtype.name not in _FLOAT_DTYPES:
            reasons.append(
                f"its {what} input {name!r} is {value.dtype.name}; RNN weights are float16, "
                "bfloat16, float32 or float64"
            )
            return None
        return value

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
    if op == "LSTM":
        p = weight(7, "P (peepholes)")
        if p is not None and np.any(p != 0):
            reasons.append("has non-zero peepholes P")
    hidden: int | None = None
    if "hidden_size" in attrs and isinstance(attrs["hidden_size"], int):
        hidden = int(attrs["hidden_size"])
    elif r is not None:
        hidden = int(r.shape[-1])
    named = {"forward": CUDNN_RNN_UNIDIRECTION, "bidirectional": CUDNN_RNN_BIDIRECTION}
    return _Seen(
        op,
        mode,
        hidden,
        dirs,
        named.get(direction) if isinstance(direction, str) else None,
        layout if layout in (0, 1) else 0,
        w,
        r,
        b,
        reasons,
        _shape_reasons(op, dirs, hidden, w, r, b),
        _state_reasons(node, scope) if states else [],
    )


def _shape_reasons(
    op: str,
    dirs: int,
    hidden: int | None,
    w: np.ndarray | None,
    r: np.ndarray | None,
    b: np.ndarray | None,
) -> list[str]:
    """Weights that do not fit each other and the node's attributes."""
    if w is None or r is None or hidden is None:
        return []
    g, h = _GATE_COUNT[op], hidden
    expect = {"W": (dirs, g * h, w.shape[-1]), "R": (dirs, g * h, h), "B": (dirs, 2 * g * h)}
    got = {"W": w.shape, "R": r.shape, "B": expect["B"] if b is None else b.shape}
    bad = [f"{k} {got[k]} (expected {v})" for k, v in expect.items() if got[k] != v]
    reasons = ["has misshapen weights: " + "; ".join(bad)] if bad else []
    if h < 1 or w.shape[-1] < 1:
        reasons.append(f"has hidden_size {h} and input size {w.shape[-1]}; both must be >= 1")
    dtypes = sorted({a.dtype.name for a in (w, r, b) if a is not None})
    if len(dtypes) > 1:
        reasons.append(f"has weights of mixed dtypes {dtypes}")
    return reasons


def _state_reasons(node: Any, scope: _Scope) -> list[str]:
    """Initial states and lengths our layer would not be called with: values the model holds
    (a non-zero constant state, constant lengths); run-time values are the caller's to pass."""
    reasons = []
    for index, what in _STATE_INPUTS:
        name = node.input[index] if len(node.input) > index else ""
        if not name:
            continue
        try:
            leaves = scope.data_sources(name, _STATE_OPS)
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


# -- where the RNNs are --------------------------------------------------------------------------


@dataclass
class _Site:
    """One RNN node of a model (once per call of a function that holds it): where it is."""

    node: Any
    scope: _Scope
    path: str  # steps by name where names allow (what find_rnns shows)
    index_path: str  # steps by position only (unique whatever the names)
    label: str  # "LSTM node '/LSTM'"
    where: str  # "LSTM node '/LSTM' in If '/If' > then_branch"


@dataclass
class _Target:
    """What a name from_onnx(node=) takes picks: RNN nodes of one graph, stacked."""

    sites: list[_Site]
    seen: list[_Seen]
    where: str


@dataclass
class _Listing:
    records: list[FoundRNN]
    targets: dict[str, _Target]


@dataclass
class _Frame:
    """A graph being walked: its scope, the paths of its nodes so far, the function calls."""

    scope: _Scope
    path: str
    index_path: str
    calls: tuple[tuple[str, str], ...]
    steps: list[str]
    next: int = 0


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _listing(onnx: Any, model: Any, owner: str) -> _Listing:
    """The records find_rnns returns and every name from_onnx(node=) takes."""
    ev = _Evaluator(onnx, model, owner)
    sites = _walk(model, ev, owner)
    seen = [_examine(onnx, s.node, s.scope, states=True) for s in sites]
    groups = _stacks(onnx, ev, sites, seen)
    entries = [tuple(g) for g in groups] + [(k,) for g in groups if len(g) > 1 for k in g]
    names = _names(entries, sites)
    records, targets = [], {}
    for entry in entries:
        first, site = seen[entry[0]], sites[entry[0]]
        if len(entry) == 1:
            where = site.where
        else:
            skip = len(f"{first.op_type} node ")
            labels = ", ".join(sites[k].label[skip:] for k in entry)
            where = f"{first.op_type} nodes {labels} {site.scope.where}"
        targets[names[entry]] = _Target([sites[k] for k in entry], [seen[k] for k in entry], where)
    for group in groups:
        entry = tuple(group)
        first = seen[group[0]]
        reasons = tuple(r for k in group for r in seen[k].all_reasons)
        records.append(
            FoundRNN(
                names[entry],
                targets[names[entry]].where,
                files.ONNX,
                first.mode or _KIND.get(first.op_type),
                num_layers=len(group),
                num_units=first.hidden,
                input_size=first.input_size,
                direction=first.direction,
                computable=not reasons,
                reasons=reasons,
                details={
                    "nodes": [names[(k,)] for k in group],
                    "op_type": first.op_type,
                    "layout": first.layout,
                    "dtype": first.dtype,
                },
            )
        )
    return _Listing(records, targets)


def _names(entries: list[tuple[int, ...]], sites: list[_Site]) -> dict[tuple[int, ...], str]:
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


def _walk(model: Any, ev: _Evaluator, owner: str) -> list[_Site]:
    """Every standard RNN node of the model in graph order, subgraphs and function bodies in
    the place of the node that holds or calls them (an explicit stack: no recursion limit)."""
    functions = {(f.domain, f.name): f for f in model.functions}
    main = _Scope.main(ev, model)
    frames = [_Frame(main, "", "", (), _steps(main.nodes))]
    sites: list[_Site] = []
    visits = 0
    while frames:
        frame = frames[-1]
        if frame.next == len(frame.scope.nodes):
            frames.pop()
            continue
        i = frame.next
        frame.next += 1
        visits += 1
        if visits > _MAX_WALK:
            raise OnnxFormatError(
                f"{owner}: the model's graphs, subgraphs and function calls hold more than "
                f"{_MAX_WALK} nodes in all (a function's nodes count once per call); refused "
                "rather than walked."
            )
        node = frame.scope.nodes[i]
        step = frame.steps[i]
        path, index_path = frame.path + step, frame.index_path + f"#{i}"
        named = step == _text(node.name)
        short = (
            f"{files.escape(node.op_type)} {node.name!r}"
            if named
            else f"{files.escape(node.op_type)} #{i}"
        )
        key = (node.domain, node.op_type)
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
        if node.domain in _STANDARD_DOMAINS and node.op_type in _RNN_OPS:
            label = f"{node.op_type} node " + (
                repr(node.name) if named else f"#{i}" + (f" ({node.name!r})" if node.name else "")
            )
            sites.append(
                _Site(node, frame.scope, path, index_path, label, f"{label} {frame.scope.where}")
            )
        children = []
        for k, attribute in enumerate(node.attribute):
            graphs = [attribute.g] if attribute.type == _GRAPH else []
            if attribute.type == _GRAPHS:
                graphs = list(attribute.graphs)
            name = _text(attribute.name)
            name = name if _IDENTIFIER.fullmatch(name) else f"@{k}"
            for j, graph in enumerate(graphs):
                step_name = name if attribute.type == _GRAPH else f"{name}[{j}]"
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


#: AttributeProto's types of a graph and a list of graphs.
_GRAPH, _GRAPHS = 5, 10


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


def _stacks(onnx: Any, ev: _Evaluator, sites: list[_Site], seen: list[_Seen]) -> list[list[int]]:
    """The sites grouped into stacks of layers, in order of their first node: a node follows
    another when its X is that node's Y laid out as [T, B, D*H] (or [B, T, D*H]) by layout ops
    of the same graph, both computable and alike, and nothing else continues that node."""
    at = {(id(s.scope), id(s.node)): k for k, s in enumerate(sites)}
    follows: dict[int, list[int]] = {}
    for j, (site, now) in enumerate(zip(sites, seen)):
        if now.all_reasons or not site.node.input or now.w is None or now.hidden is None:
            continue
        chain: list[tuple[_Scope, Any]] = []
        leaves = site.scope.data_sources(site.node.input[0], _LAYOUT_OPS, chain)
        if len(leaves) != 1:
            continue
        scope, name, kind = leaves[0][0].locate(leaves[0][1])
        if kind != "node" or scope is not site.scope:
            continue
        k = at.get((id(scope), id(scope.producer[name])))
        if k is None or list(sites[k].node.output[:1]) != [name]:
            continue
        before = seen[k]
        alike = ("op_type", "mode", "hidden", "dirs", "layout", "dtype")
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
    onnx: Any, ev: _Evaluator, scope: _Scope, chain: list[Any], y: str, x: str, seen: _Seen
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
    probe = np.arange(_product(shape), dtype=np.float64).reshape(shape)
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


# -- names, values and data flow of a model's graphs ---------------------------------------------

#: A tensor: the scope that defines it, and its name there.
_Ref = tuple["_Scope", str]


class _Unevaluable(OnnxFormatError):
    """A constant that cannot be evaluated (``what`` says why, without the owner)."""

    def __init__(self, owner: str, what: str) -> None:
        self.what = what
        super().__init__(f"{owner}: {what}.")


class _Scope:
    """The names one graph sees: the main graph; a subgraph (``If``/``Loop``/``Scan``), which
    also sees the names of the graphs around it; or the body of a model-local function at one
    call, whose inputs are the caller's tensors (``binding``) and whose attribute references
    are the call's attributes. Values come from the model's one :class:`_Evaluator`."""

    def __init__(
        self,
        ev: _Evaluator,
        nodes: Any,
        *,
        inits: Any = (),
        inputs: Any = (),
        declared: Any = (),
        parent: _Scope | None = None,
        binding: dict[str, str] | None = None,
        attrs: dict[str, Any] | None = None,
        trail: tuple[str, ...] = (),
    ) -> None:
        self.ev = ev
        self.nodes = list(nodes)
        self.inits = {t.name: t for t in inits}
        self.producer = {out: n for n in self.nodes for out in n.output if out}
        # A graph input with an initializer of the same name is a default: a constant as well.
        self.runtime = {i.name for i in inputs} - set(self.inits)
        self.declared = {v.name: v for v in declared}
        self.parent, self.binding, self.attrs, self.trail = parent, binding, attrs, trail
        self._positions: dict[int, int] | None = None

    @classmethod
    def main(cls, ev: _Evaluator, model: Any) -> _Scope:
        g = model.graph
        return cls(
            ev,
            g.node,
            inits=g.initializer,
            inputs=g.input,
            declared=[*g.input, *g.value_info, *g.output],
        )

    def subgraph(self, graph: Any, trail: str) -> _Scope:
        return _Scope(
            self.ev,
            graph.node,
            inits=graph.initializer,
            inputs=graph.input,
            declared=[*graph.input, *graph.value_info, *graph.output],
            parent=self,
            attrs=self.attrs,
            trail=(*self.trail, trail),
        )

    def call(self, fn: Any, node: Any, trail: str) -> _Scope:
        """The body of model-local function ``fn`` called by ``node`` (attributes resolved)."""
        inputs = list(node.input)
        binding = {name: inputs[k] if k < len(inputs) else "" for k, name in enumerate(fn.input)}
        attrs = {a.name: a for a in fn.attribute_proto}  # defaults, then the call's
        attrs.update({a.name: a for a in node.attribute})
        return _Scope(
            self.ev,
            fn.node,
            declared=getattr(fn, "value_info", ()),  # onnx 1.16 and later
            parent=self,
            binding=binding,
            attrs=attrs,
            trail=(*self.trail, trail),
        )

    @property
    def where(self) -> str:
        return "in " + " > ".join(self.trail) if self.trail else "of the main graph"

    def positions(self) -> dict[int, int]:
        if self._positions is None:
            self._positions = {id(n): i for i, n in enumerate(self.nodes)}
        return self._positions

    def locate(self, name: str) -> tuple[_Scope, str, str]:
        """The scope that defines ``name`` as it is seen from here, the name there, and how
        it is defined: ``init`` (an initializer), ``node`` (a node's output), ``input`` (a
        run-time input of the graph) or ``missing`` (nothing defines it; an optional input
        a function call leaves out)."""
        scope = self
        while True:
            if name in scope.inits:
                return scope, name, "init"
            if name in scope.producer:
                return scope, name, "node"
            if scope.binding is not None:  # a function body sees its inputs only
                bound = scope.binding.get(name, "")
                if not bound or scope.parent is None:
                    return scope, name, "missing"
                scope, name = scope.parent, bound
                continue
            if name in scope.runtime:
                return scope, name, "input"
            if scope.parent is None:
                return scope, name, "missing"
            scope = scope.parent

    def resolved(self, node: Any) -> Any:
        """``node`` with its references to the function's attributes replaced by their values
        at this call (a reference to an attribute the call does not give is left out)."""
        if not any(a.ref_attr_name for a in node.attribute):
            return node
        copy = type(node)()
        copy.CopyFrom(node)
        del copy.attribute[:]
        for a in node.attribute:
            if not a.ref_attr_name:
                copy.attribute.append(a)
                continue
            given = (self.attrs or {}).get(a.ref_attr_name)
            if given is not None:
                value = copy.attribute.add()
                value.CopyFrom(given)
                value.name = a.name
        return copy

    def declared_shape(self, name: str) -> tuple[int, ...] | None:
        """The static shape the graph declares for ``name`` (None: none, or symbolic)."""
        info = self.declared.get(name)
        if info is None or not info.type.HasField("tensor_type"):
            return None
        shape = info.type.tensor_type.shape
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in shape.dim]
        if not shape.dim or any(v < 1 for v in dims):
            return None
        return tuple(dims)

    def constant(self, name: str) -> np.ndarray | None:
        """The value of ``name``, or None when it depends on a run-time input."""
        return self.ev.constant(self, name)

    def is_runtime_input(self, ref: _Ref) -> bool:
        return ref[0].locate(ref[1])[2] == "input"

    def data_sources(
        self,
        name: str,
        ops: Mapping[str, tuple[int, ...] | None] = _LAYOUT_OPS,
        chain: list[tuple[_Scope, Any]] | None = None,
    ) -> list[_Ref]:
        """The tensors whose data ``name`` is, through standard ``ops`` (their data inputs
        only; layout ops by default), in order; a tensor reached twice is listed twice (and
        not followed again). ``chain`` receives the nodes followed."""
        leaves: list[_Ref] = []
        seen: set[tuple[int, str]] = set()
        stack: list[_Ref] = [(self, name)]
        while stack:
            scope, current = stack.pop()
            scope, current, kind = scope.locate(current)
            key = (id(scope), current)
            if key in seen or kind != "node":
                leaves.append((scope, current))
                continue
            seen.add(key)
            node = scope.producer[current]
            data = ops.get(node.op_type, ()) if self.ev.is_standard(node) else ()
            if data == ():
                leaves.append((scope, current))
                continue
            if chain is not None:
                chain.append((scope, node))
            inputs = list(node.input)
            picked = inputs if data is None else [inputs[i] for i in data if i < len(inputs)]
            stack.extend((scope, p) for p in reversed(picked))
        return leaves

    def is_zero(self, ref: _Ref) -> bool:
        """Whether ``ref`` is a constant of zeros: ``ConstantOfShape`` of value 0 (its shape is
        not evaluated), or a constant whose every value is 0."""
        scope, name, kind = ref[0].locate(ref[1])
        if kind == "node":
            node = scope.producer[name]
            if node.op_type == "ConstantOfShape" and self.ev.is_standard(node):
                value = _attributes(self.ev.onnx, scope.resolved(node)).get("value")
                if value is None:
                    return True
                return not np.asarray(self.ev.onnx.numpy_helper.to_array(value)).any()
        found = self.ev.constant(scope, name)
        return found is not None and not np.asarray(found).any()

    def describe(self, refs: list[_Ref]) -> str:
        """Where each of ``refs`` comes from, in words."""
        parts = []
        for ref in refs[:4]:
            scope, name, kind = ref[0].locate(ref[1])
            if kind == "init":
                parts.append(f"the initializer {name!r}")
            elif kind == "input":
                graph = "graph" if scope.parent is None else "subgraph"
                parts.append(f"the {graph} input {name!r}")
            elif kind == "missing":
                parts.append(f"{name!r}, which nothing computes")
            else:
                node = scope.producer[name]
                index = list(node.output).index(name)
                parts.append(
                    f"output {index} ({name!r}) of {files.escape(node.op_type)} node {node.name!r}"
                )
        more = f" and {len(refs) - 4} more" if len(refs) > 4 else ""
        return (", ".join(parts) or "nothing") + more


class _Evaluator:
    """The values of a model's constants, in any of its scopes.

    Weights computed from constants are evaluated one plumbing node at a time, and before a node
    runs the elements of its outputs are bounded from its inputs' values and shapes (an exact
    integer product, e.g. the shape a ``ConstantOfShape`` or ``Expand`` asks for). Plumbing only
    moves data the model holds, so no output may have more elements than twice the model's
    bytes (every value stored takes at least half a byte), and all the values evaluated for one
    model together no more than eight times; a node that would exceed this is refused before it
    allocates anything.
    """

    def __init__(self, onnx: Any, model: Any, owner: str) -> None:
        self.onnx = onnx
        self.model = model
        self.owner = owner
        self.local = {(f.domain, f.name) for f in model.functions}
        size = max(model.ByteSize(), 1)
        self._limit, self._budget = 2 * size, 8 * size
        self._values: dict[tuple[int, str], np.ndarray] = {}

    def is_standard(self, node: Any) -> bool:
        """Whether ``node`` is a standard ONNX operator (not another domain's, not a call)."""
        return node.domain in _STANDARD_DOMAINS and (node.domain, node.op_type) not in self.local

    def depends_on_runtime(self, ref: _Ref) -> bool:
        """Whether ``ref`` is computed from a run-time input (or from a name nothing defines)."""
        return self._plan(*ref) is None

    def constant(self, scope: _Scope, name: str) -> np.ndarray | None:
        """The value of ``name`` seen from ``scope``, or None when it depends on a run-time
        input."""
        plan = self._plan(scope, name)
        if plan is None:
            return None
        for where, node in plan:
            if any(o and (id(where), o) not in self._values for o in node.output):
                self._run(where, node)
        return self._value(scope, name)

    def _plan(self, scope: _Scope, name: str) -> list[tuple[_Scope, Any]] | None:
        """The nodes that compute ``name``, each after those it needs (a depth-first walk with
        its own stack: a chain of any length), or None when a run-time input is among the
        tensors it is computed from."""
        scope, name, kind = scope.locate(name)
        if kind != "node":
            return [] if kind == "init" else None
        order: list[tuple[_Scope, Any]] = []
        state: dict[tuple[int, int], int] = {}  # 1: its inputs are being planned; 2: planned
        stack: list[tuple[_Scope, Any, bool]] = [(scope, scope.producer[name], False)]
        while stack:
            where, node, inputs_done = stack.pop()
            key = (id(where), id(node))
            if inputs_done:
                state[key] = 2
                order.append((where, node))
                continue
            if state.get(key) == 2:
                continue
            if state.get(key) == 1:  # reached again from its own inputs
                raise _Unevaluable(
                    self.owner,
                    f"{files.escape(node.op_type)} node {node.name!r} is computed from itself",
                )
            if all(not o or (id(where), o) in self._values for o in node.output):
                state[key] = 2
                continue
            state[key] = 1
            stack.append((where, node, True))
            for i in node.input:
                if not i:
                    continue
                at, defined, how = where.locate(i)
                if how in ("input", "missing"):
                    return None
                if how == "node" and (id(at), defined) not in self._values:
                    stack.append((at, at.producer[defined], False))
        return order

    def _value(self, scope: _Scope, name: str) -> np.ndarray:
        scope, name, kind = scope.locate(name)
        key = (id(scope), name)
        if key not in self._values:
            if kind != "init":
                raise _Unevaluable(self.owner, f"tensor {name!r} is used before it is computed")
            try:
                value = np.asarray(self.onnx.numpy_helper.to_array(scope.inits[name]))
            except Exception as err:  # data that does not match its dims or dtype
                raise _Unevaluable(
                    self.owner, f"initializer {name!r} cannot be read: {files.escape(str(err))}"
                ) from err
            self._values[key] = value
        return self._values[key]

    def _run(self, scope: _Scope, node: Any) -> None:
        label = f"{files.escape(node.op_type)} node {node.name!r}"
        node = scope.resolved(node)
        if node.op_type not in _PLUMBING or not self.is_standard(node):
            raise _Unevaluable(
                self.owner,
                f"it is computed by {label}; only standard ops that move data "
                f"({sorted(_PLUMBING)}) are evaluated",
            )
        args = [self._value(scope, i) if i else None for i in node.input]
        try:
            elements = self._elements(node, args)
        except (ValueError, TypeError, IndexError) as err:
            raise _Unevaluable(
                self.owner, f"{label} has unusable inputs: {files.escape(str(err))}"
            ) from err
        if elements > self._limit or elements > self._budget:
            raise _Unevaluable(
                self.owner,
                f"{label} would make {elements} elements, more than the model's data could "
                f"hold ({min(self._limit, self._budget)}); refused before allocating them",
            )
        helper = self.onnx.helper
        feeds = {i: a for i, a in zip(node.input, args) if a is not None}
        try:  # names that are not UTF-8 (a protobuf hands them over as bytes) fail here
            sub = helper.make_model(
                helper.make_graph(
                    [node],
                    "plumbing",
                    [helper.make_empty_tensor_value_info(i) for i in feeds],
                    [helper.make_empty_tensor_value_info(o) for o in node.output if o],
                ),
                opset_imports=list(self.model.opset_import),
            )
            evaluator = importlib.import_module("onnx.reference").ReferenceEvaluator(sub)
            outputs = [np.asarray(v) for v in evaluator.run(None, feeds)]
        except Exception as err:  # the reference implementation refusing its inputs
            raise _Unevaluable(
                self.owner, f"{label} cannot be evaluated: {files.escape(str(err))}"
            ) from err
        made = sum(v.size for v in outputs)
        if made > elements:  # the bound above is wrong for this op: a bug, not the file's fault
            raise RuntimeError(f"{self.owner}: {label} made {made} > {elements} elements.")
        self._budget -= made
        for out, value in zip([o for o in node.output if o], outputs):
            self._values[(id(scope), out)] = value

    @staticmethod
    def _elements(node: Any, args: list[np.ndarray | None]) -> int:
        """An upper bound on the elements of ``node``'s outputs, from its inputs alone."""
        op = node.op_type
        attrs = {a.name: a for a in node.attribute}
        if op == "Constant":
            if len(attrs) != 1:
                raise ValueError(f"{len(attrs)} attributes (a Constant has one)")
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


def _attributes(onnx: Any, node: Any) -> dict[str, Any]:
    def text(v: Any) -> Any:
        return v.decode(errors="replace") if isinstance(v, bytes) else v

    values = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    return {k: [text(x) for x in v] if isinstance(v, list) else text(v) for k, v in values.items()}


def _mode_of(op_type: str, activations: list[str] | None, dirs: int) -> str | None:
    """Our mode for an RNN node's activations (None: they compute something else)."""
    given = [str(a).lower() for a in activations or _DEFAULT_ACTIVATIONS[op_type]]
    for mode, op in ONNX_OPS.items():
        expected = [a.lower() for a in op.activations]
        if op.op_type == op_type and given in (expected, expected * dirs):
            return mode
    return None
