"""An ONNX model file, read and checked: the one loader of ONNX files for every reader here.

:func:`load_checked` reads a path as a :class:`Loaded` model after refusing what is not a
regular file or larger than any protobuf. The tensors a model keeps in external data files
must be regular files in its folder (no absolute path, no ``..``, no link), each range in its
file, as long as the tensor's shape and dtype need and overlapping no other's; their bytes are
read only when a tensor's value is asked for (:func:`array_of`). ``onnx.checker`` checks the
model. :func:`load_model` is the same with every tensor's data read into the model.
:func:`tensor_shapes` lists the tensors a model stores from their headers.
:class:`OnnxFormatError` is every refusal of an ONNX file or graph.

A model whose only fault is the order of its nodes (onnx's checker wants every graph sorted
topologically; onnxruntime runs such a model) is read with each unsorted graph's nodes sorted
(:func:`sort_graphs`: stable, O(n log n), no recursion) and checked again; a graph with a cycle
stays refused.

Memory: a file is held at most twice at once. onnx's checker reads the file by its path (its
bytes and its parsed model) before the file is read here, then the bytes read here are parsed
and dropped; nothing serialises the model again (a model checked again after its nodes were
sorted is checked without its large initializers, which the first check passed). A file that
changes meanwhile is refused. Depth: protobuf parses at most 100 levels of nested messages
(python's upb ``upb_DecodeOptions_MaxDepth`` and onnx's C++ parser alike: an ``If`` nests 3, so
about 31 nested subgraphs), and onnx's checker refuses function calls nested more than 100 deep;
nothing here recurses. :class:`Work` is the budget of what one operation may do with a model's
values (:mod:`cudnn_rnn.io.onnx.eval`).

onnx is imported only when a function here runs (:func:`cudnn_rnn.io.onnx.graph.import_onnx`).
"""

from __future__ import annotations

import heapq
import itertools
import os
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cudnn_rnn.io.files.escaping import escape, quote
from cudnn_rnn.io.files.opening import (
    FileTooLarge,
    FormatError,
    NotRegularFile,
    open_regular,
    regular_size,
)
from cudnn_rnn.io.onnx.graph import import_onnx

__all__ = [
    "GRAPH",
    "GRAPHS",
    "STANDARD_DOMAINS",
    "WORK_CONSTANT",
    "WORK_FACTOR",
    "Loaded",
    "OnnxFormatError",
    "Work",
    "array_of",
    "load_checked",
    "load_model",
    "shape_refusal",
    "sort_graphs",
    "source_model",
    "tensor_shapes",
    "tensors_of",
]


class OnnxFormatError(FormatError):
    """An ONNX model that :func:`cudnn_rnn.converters.onnx.from_onnx` cannot read: bytes that are
    not a valid model, a file that is not a regular file, hostile sizes, or a graph that
    computes something else than a stack of our layers."""


#: The domains of the standard ONNX operators.
STANDARD_DOMAINS = ("", "ai.onnx")
#: AttributeProto's types of a graph and a list of graphs.
GRAPH, GRAPHS = 5, 10

#: The largest message protobuf serialises or parses (2 GiB - 1 bytes): a model file past it is
#: refused from its size before it is read, whatever its format.
_MAX_PROTOBUF = 2**31 - 1
#: External tensors up to this size are read in for shape inference (shapes, indices, axes).
_SMALL_EXTERNAL = 1 << 16
#: What onnx's checker says of a graph whose nodes are not sorted topologically.
_UNSORTED = "must be topologically sorted"

#: The work one operation (a listing, a read) may do with a model's values, in bytes: this many
#: times the model's bytes (its external data included) ...
WORK_FACTOR = 8
#: ... plus this many (a small model's shapes, constants and walks).
WORK_CONSTANT = 16 << 20


class Work:
    """The bytes of work one operation may still do with a model's values: every value it
    evaluates or converts (initializers read, outputs of the nodes evaluated, weights
    dequantized), each step of a walk through its graphs, each node evaluated, charged before it
    is done, never given back. At most ``WORK_FACTOR`` times the model's bytes plus
    ``WORK_CONSTANT`` in all, so that what one operation holds and the time it takes are at most
    proportional to its file, whatever the file asks for."""

    def __init__(self, data_bytes: int) -> None:
        self.data_bytes = data_bytes
        self.limit = WORK_FACTOR * max(data_bytes, 0) + WORK_CONSTANT
        self.left = self.limit

    def take(self, cost: int) -> bool:
        """Whether ``cost`` bytes of work are left; if so they are taken."""
        if cost < 0 or cost > self.left:
            return False
        self.left -= cost
        return True

    def says(self) -> str:
        """What is left, in words (for a refusal)."""
        return (
            f"{self.left} bytes left of the {self.limit} one operation may do with this model "
            f"({WORK_FACTOR} times its {self.data_bytes} bytes plus {WORK_CONSTANT})"
        )


@dataclass(frozen=True)
class Loaded:
    """A checked model and what reading its values needs: the model, where its external data
    is, its bytes, and the one budget (:class:`Work`) of the operation that loaded it."""

    model: Any  # onnx.ModelProto; initializers kept in external data are not read into it
    folder: str | None  # the folder of its external data files (None: a loaded ModelProto)
    data_bytes: int  # its bytes (a file's size) and those of its initializers' external data
    shape_error: str | None  # what strict shape inference refused (None: nothing or not run)
    work: Work = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "work", Work(self.data_bytes))


def load_model(path: str | os.PathLike[str]) -> Any:
    """The ``onnx.ModelProto`` in the file ``path``, checked, its external data read into it
    (the readers here check a file the same way, and read external data when it is needed).

    ``path`` must be a regular file: a FIFO, a device or a folder is refused before it is opened,
    a file over 2 GiB (no protobuf is larger) before it is read.
    External data must be regular files in the model's folder (no absolute path, no ``..``, no
    link), and each tensor's range must exist in its file, hold the bytes its shape and dtype
    need, and not overlap another's (no byte is read twice). ``onnx.checker`` checks the model.

    Raises OnnxFormatError for all of these and for bytes that are not an ONNX model,
    FileNotFoundError for a missing file.
    """
    onnx = import_onnx()
    loaded = load_checked(path, "from_onnx")
    model, folder = loaded.model, os.path.dirname(os.path.abspath(path))
    label = f"from_onnx: {os.fspath(path)!r}"
    for tensor in tensors_of(model):
        if _is_external(tensor):
            _read_in(tensor, _external_bytes(onnx, tensor, folder, label))
    return model


def load_checked(path: str | os.PathLike[str], owner: str, *, shapes: bool = False) -> Loaded:
    """The model in the file ``path``, checked as :func:`load_model` says, its messages naming
    ``owner``; the data of initializers kept in external files is not read (:func:`array_of`
    reads it). With ``shapes``, strict shape inference runs too, and what it refuses is
    ``shape_error`` (a reader that needs it raises it after its own refusals, which say more).
    """
    onnx = import_onnx()
    name = os.fspath(path)
    label = f"{owner}: {name!r}"
    try:  # refused from its size: reading it would be wasted
        file = open_regular(name, max_size=_MAX_PROTOBUF)
    except NotRegularFile as err:
        raise _not_regular(err, label) from None
    except FileTooLarge as err:
        raise OnnxFormatError(
            f"{label} is {err.size} bytes, more than the {_MAX_PROTOBUF} a protobuf can "
            "hold, so it is no ONNX model; a model this large keeps its weights in external "
            "data files (onnx.save_model(..., save_as_external_data=True))."
        ) from None
    registry = onnx.serialization.registry
    fmt = registry.get_format_from_file_extension(os.path.splitext(name)[1]) or "protobuf"
    # onnx's checker reads a protobuf file by its path before it is read here, so that the file
    # is held at most twice at once (the checker's bytes and model, then ours); text formats,
    # and paths onnx cannot take, are checked once parsed.
    by_path = fmt == "protobuf" and _encodable(name)
    with file:
        before = os.fstat(file.fileno())
        invalid, shape_error = _check_path(onnx, name, shapes) if by_path else (None, None)
        data = file.read()
    try:
        model = onnx.load_model_from_string(data, format=fmt)
    except Exception as err:  # whatever the parser raises, these bytes are not a model
        raise OnnxFormatError(
            f"{label} is not an ONNX model ({type(err).__name__}: {escape(str(err))})."
        ) from err
    del data
    if by_path and not _same_file(name, before):
        raise OnnxFormatError(
            f"{label} changed while it was read; read it when nothing is writing it."
        )
    folder = os.path.dirname(os.path.abspath(name))
    external = _check_external_data(onnx, model, folder, label)
    if by_path and shapes and external:
        # Shape inference takes some tensors' values (a Reshape's shape, a Slice's starts),
        # which it cannot read from external files: the small ones are read in, and the model
        # (whose large tensors stay in their files) inferred as parsed.
        for tensor, length in external:
            if length <= _SMALL_EXTERNAL:
                _read_in(tensor, _external_bytes(onnx, tensor, folder, label))
        if not _only_unsorted(invalid):
            shape_error = shape_refusal(onnx, model)
    if not by_path:
        invalid = _refusal(lambda: onnx.checker.check_model(model))
        if not _only_unsorted(invalid):
            shape_error = shape_refusal(onnx, model) if shapes and invalid is None else None
    if invalid is not None and _only_unsorted(invalid):
        invalid, shape_error = _check_sorted(onnx, model, shapes, invalid)
    if invalid is not None:
        raise OnnxFormatError(f"{label}: the model is not valid ONNX: {invalid}")
    size = before.st_size + sum(length for _, length in external)
    return Loaded(model, folder, size, shape_error)


def tensor_shapes(path: str | os.PathLike[str]) -> dict[str, tuple[tuple[int, ...], str]]:
    """Name -> (shape, dtype name) of every tensor the ONNX model at ``path`` stores: the
    initializers of its graph and of its subgraphs, and the values of its ``Constant`` nodes
    (subgraphs' and model-local functions' too; named by their output; a name met again is
    listed once). Read by :func:`load_checked` (checked); shapes and dtypes come from the
    headers, no weight is decoded, no external data read."""
    onnx = import_onnx()
    model = load_checked(path, "from_onnx").model
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
                f"{path}: tensor {name!r} has no known dtype: {escape(str(err))}"
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
            graphs.extend([a.g] if a.type == GRAPH else a.graphs if a.type == GRAPHS else [])
        if node.op_type != "Constant" or node.domain not in STANDARD_DOMAINS or not node.output:
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


def _not_regular(err: NotRegularFile, label: str) -> OnnxFormatError:
    return OnnxFormatError(
        f"{label} is not a regular file; only regular files are read (it is {err.kind})."
    )


def _only_unsorted(invalid: str | None) -> bool:
    """Whether the checker's refusal ``invalid`` is of nodes out of topological order."""
    return invalid is not None and _UNSORTED in invalid


def _check_sorted(
    onnx: Any, model: Any, shapes: bool, invalid: str
) -> tuple[str | None, str | None]:
    """What onnx's checker (and with ``shapes`` strict shape inference) refuses in ``model``
    once its unsorted graphs are sorted in place; ``invalid`` (the first refusal) when a graph
    has a cycle, which no order mends. The model is checked without its main graph's large
    initializers (graph inputs of their type instead), which the first check passed before it
    came to the nodes: so it is not serialised whole again."""
    try:
        if not sort_graphs(model):
            return invalid, None
        skeleton = _skeleton(onnx, model)
    except UnicodeDecodeError as err:  # a name or text field that protobuf's Python cannot read
        return f"{invalid}; and its text is not UTF-8 ({escape(err.reason)})", None
    again = _refusal(lambda: onnx.checker.check_model(skeleton))
    shape_error = shape_refusal(onnx, skeleton) if shapes and again is None else None
    return again, shape_error


def _skeleton(onnx: Any, model: Any) -> Any:
    """A copy of ``model`` without its main graph's large or external initializers: each is a
    graph input of its dtype and shape instead (small ones, which shape inference may need the
    values of, are kept)."""
    skeleton = onnx.ModelProto()
    _copy_fields(model, skeleton, skip="graph")
    graph = model.graph
    _copy_fields(graph, skeleton.graph, skip="initializer")
    inputs = {i.name for i in graph.input}
    for tensor in graph.initializer:
        bits = _element_bits(onnx, tensor.data_type)
        small = (
            len(tensor.string_data) <= 1024
            if bits is None
            else _count(tensor.dims) * bits <= 8 * _SMALL_EXTERNAL
        )
        if small and not _is_external(tensor):
            skeleton.graph.initializer.add().CopyFrom(tensor)
        elif tensor.name not in inputs:
            inputs.add(tensor.name)
            skeleton.graph.input.append(
                onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, tensor.dims)
            )
    return skeleton


def _copy_fields(source: Any, target: Any, skip: str) -> None:
    """Copy every field of the message ``source`` into ``target`` but the one named ``skip``."""
    for descriptor, value in source.ListFields():
        if descriptor.name == skip:
            continue
        if descriptor.is_repeated:
            getattr(target, descriptor.name).extend(value)
        elif descriptor.type == descriptor.TYPE_MESSAGE:
            getattr(target, descriptor.name).CopyFrom(value)
        else:
            setattr(target, descriptor.name, value)


def sort_graphs(model: Any) -> bool:
    """Sort the nodes of every graph of ``model`` (the main graph, subgraphs, model-local
    functions' bodies) that are not in topological order, in place. A node comes after the
    nodes of its graph that compute its inputs or a name its subgraphs use; of the nodes that
    may come next, the first in the file comes next, so a sorted graph keeps its order. Returns
    False when a graph has a cycle (that graph left as it was). Explicit stacks, no recursion:
    O(n log n) a graph; a subgraph's names are collected once for each graph around it
    (protobuf bounds that nesting)."""
    bodies: list[Any] = [model.graph, *model.functions]
    sorted_all = True
    while bodies:
        body = bodies.pop()
        nodes = list(body.node)
        for node in nodes:
            for attribute in node.attribute:
                bodies += [attribute.g] if attribute.type == GRAPH else list(attribute.graphs)
        order = _topological(nodes)
        if order is None:
            sorted_all = False
        elif order != list(range(len(nodes))):
            rank = {id(nodes[k]): position for position, k in enumerate(order)}
            body.node.sort(key=lambda n: rank[id(n)])  # moves the messages: no copy
    return sorted_all


def _topological(nodes: list[Any]) -> list[int] | None:
    """A topological order of ``nodes`` (indices), the file's where it is one, None for a
    cycle."""
    produced = {out: k for k, node in enumerate(nodes) for out in node.output if out}
    after: list[list[int]] = [[] for _ in nodes]
    waiting = [0] * len(nodes)
    for k, node in enumerate(nodes):
        before = {produced[n] for n in _names_used(node) if n in produced} - {k}
        for j in before:
            after[j].append(k)
        waiting[k] = len(before)
    ready = [k for k, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        k = heapq.heappop(ready)
        order.append(k)
        for j in after[k]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, j)
    return order if len(order) == len(nodes) else None


def _names_used(node: Any) -> set[str]:
    """The names ``node`` reads: its inputs, and every name the nodes and outputs of its
    subgraphs (at any depth) use."""
    names = {n for n in node.input if n}
    graphs: list[Any] = []
    for a in node.attribute:
        graphs += [a.g] if a.type == GRAPH else list(a.graphs)
    while graphs:
        graph = graphs.pop()
        names.update(o.name for o in graph.output)
        for inner in graph.node:
            names.update(n for n in inner.input if n)
            for a in inner.attribute:
                graphs += [a.g] if a.type == GRAPH else list(a.graphs)
    return names


def shape_refusal(onnx: Any, model: Any) -> str | None:
    """What strict shape inference refuses in a loaded model (an axis or a permutation out of
    range in the ops around the RNN nodes makes a model that cannot run at all), or None."""
    return _refusal(
        lambda: onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    )


def _refusal(check: Callable[[], object]) -> str | None:
    """What ``check`` raised, as a message (None: nothing)."""
    try:
        check()
    except Exception as err:  # ValidationError, InferenceError, or protobuf's size limits
        return escape(str(err))
    return None


def _check_path(onnx: Any, name: str, shapes: bool) -> tuple[str | None, str | None]:
    """What onnx's checker refuses in the protobuf file ``name``, and with ``shapes`` what strict
    shape inference refuses (the checker's ``full_check``: the same inference, in place), read
    by the checker from the path: it holds the model once besides its bytes, and never
    serialises it again."""
    checker = onnx.checker.check_model
    invalid = _refusal(lambda: checker(name, full_check=shapes))
    if invalid is None or not shapes:
        return invalid, None
    basic = _refusal(lambda: checker(name))  # which of the two refused
    return (basic, None) if basic is not None else (None, invalid)


def _encodable(name: str) -> bool:
    """Whether onnx takes the path ``name`` (its C++ side needs UTF-8)."""
    try:
        name.encode()
    except UnicodeEncodeError:  # undecodable bytes of the file system (surrogates)
        return False
    return True


def _same_file(name: str, before: os.stat_result) -> bool:
    """Whether ``name`` is still the file it was (the checker read it by its path)."""
    try:
        now = os.stat(name)
    except OSError:
        return False
    fields = ("st_dev", "st_ino", "st_size", "st_mtime_ns")
    return all(getattr(now, f) == getattr(before, f) for f in fields)


def tensors_of(model: Any) -> list[Any]:
    """Every TensorProto of ``model``: initializers, sparse ones, attributes, subgraphs."""
    return [t for t, _ in _tensors_where(model)]


def _tensors_where(model: Any) -> list[tuple[Any, bool]]:
    """Every TensorProto of ``model``, each with whether it is an initializer (of a graph)."""
    found: list[tuple[Any, bool]] = []
    graphs = [model.graph]
    nodes = [n for f in model.functions for n in f.node]
    while graphs or nodes:
        if graphs:
            graph = graphs.pop()
            found += [(t, True) for t in graph.initializer]
            for sparse in graph.sparse_initializer:
                found += [(sparse.values, True), (sparse.indices, True)]
            nodes.extend(graph.node)
            continue
        for attribute in nodes.pop().attribute:
            found += [(t, False) for t in [attribute.t, *attribute.tensors]]
            for sparse in [attribute.sparse_tensor, *attribute.sparse_tensors]:
                found += [(sparse.values, False), (sparse.indices, False)]
            graphs += [attribute.g, *attribute.graphs]
    return found


def _is_external(tensor: Any) -> bool:
    return bool(tensor.data_location == tensor.EXTERNAL)


def _check_external_data(onnx: Any, model: Any, folder: str, label: str) -> list[tuple[Any, int]]:
    """Check the tensors ``model`` keeps in other files of ``folder``: each a regular file
    inside it, each range in its file, long enough for the tensor and overlapping no other.
    The data of attributes (``Constant`` values) is read into the model; initializers' is read
    when asked for (:func:`array_of`). Returns the initializers kept there, each with the
    bytes it keeps."""
    root = os.path.realpath(folder)
    external = [
        (t, init, *_external_range(onnx, t, root, folder, label))
        for t, init in _tensors_where(model)
        if _is_external(t)
    ]
    ranges: dict[str, list[tuple[int, int, str]]] = {}
    for tensor, _, target, offset, length in external:
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
    initializers = []
    for tensor, initializer, _, _, length in external:
        _check_length(onnx, tensor, length, label)
        if initializer:
            initializers.append((tensor, length))
        else:
            _read_in(tensor, _external_bytes(onnx, tensor, folder, label))
    return initializers


def _read_in(tensor: Any, data: bytes) -> None:
    """``tensor`` holding ``data``, its external data read."""
    del tensor.external_data[:]
    tensor.data_location = tensor.DEFAULT
    tensor.raw_data = data


#: Bits per element of the dtypes whose elements are not whole bytes (TensorProto's names).
_PACKED_BITS = {
    "INT4": 4,
    "UINT4": 4,
    "FLOAT4E2M1": 4,
    "INT2": 2,
    "UINT2": 2,
    "FLOAT6E2M3": 6,
    "FLOAT6E3M2": 6,
}


def _element_bits(onnx: Any, data_type: int) -> int | None:
    """Bits per element of an ONNX dtype (None: not fixed, a string, or no known dtype)."""
    tp = onnx.TensorProto
    for name, bits in _PACKED_BITS.items():
        if getattr(tp, name, None) == data_type:
            return bits
    if data_type in (tp.UNDEFINED, tp.STRING):
        return None
    try:
        return 8 * int(onnx.helper.tensor_dtype_to_np_dtype(data_type).itemsize)
    except (KeyError, ValueError, TypeError):
        return None


def _external_range(
    onnx: Any, tensor: Any, root: str, folder: str, label: str
) -> tuple[str, int, int]:
    """The real path of the file ``tensor`` keeps its data in, and its range there (offset,
    length), checked: see :func:`_check_external_data`."""
    where = f"{label}: tensor {quote(tensor.name)} keeps its data in"
    try:
        info = onnx.external_data_helper.ExternalDataInfo(tensor)
    except ValueError as err:
        raise OnnxFormatError(f"{where} a file described wrongly: {escape(str(err))}") from err
    location = info.location
    target, size = _external_file(root, folder, location, f"{where} {quote(location)}, which")
    offset = info.offset or 0
    length = size - offset if info.length is None else info.length
    if offset + length > size or length < 0:
        raise OnnxFormatError(
            f"{where} {quote(location)} at bytes [{offset}, {offset + length}), but "
            f"that file has {size} bytes."
        )
    return target, offset, length


def _check_length(onnx: Any, tensor: Any, length: int, label: str) -> None:
    """Refuse an external range shorter than ``tensor``'s shape and dtype need."""
    bits = _element_bits(onnx, tensor.data_type)
    need = None if bits is None else -(-_count(tensor.dims) * bits // 8)
    if need is not None and length < need:
        location = onnx.external_data_helper.ExternalDataInfo(tensor).location
        raise OnnxFormatError(
            f"{label}: tensor {quote(tensor.name)} keeps its data in "
            f"{quote(location)}: {length} bytes, but its shape {list(tensor.dims)} "
            f"needs {need}."
        )


def _count(dims: Any) -> int:
    total = 1
    for d in dims:
        total *= int(d)
    return total


def _external_bytes(onnx: Any, tensor: Any, folder: str, label: str) -> bytes:
    """The bytes ``tensor`` keeps in an external file of ``folder``, its range checked again
    (the file may have changed since the model was loaded)."""
    root = os.path.realpath(folder)
    target, offset, length = _external_range(onnx, tensor, root, folder, label)
    _check_length(onnx, tensor, length, label)
    try:
        with open_regular(target) as f:
            f.seek(offset)
            data = f.read(length)
    except (OSError, FormatError) as err:
        raise OnnxFormatError(
            f"{label}: the external data of tensor {quote(tensor.name)} cannot be read: "
            f"{escape(str(err))}"
        ) from err
    if len(data) != length:
        raise OnnxFormatError(
            f"{label}: the external data of tensor {quote(tensor.name)} cannot be read: "
            f"{len(data)} of {length} bytes were there."
        )
    return data


def _external_file(root: str, folder: str, location: str, which: str) -> tuple[str, int]:
    """The real path and size of the external data file ``location`` names: a regular file
    inside the model's ``folder`` (``root``: its real path). Anything else is an
    OnnxFormatError whose message starts with ``which`` ("... keeps its data in 'w.bin',
    which"): no name, a NUL in it, an absolute path, ``..``, a link out of the folder, a folder,
    a FIFO or a device, a link loop, a name too long, a file that cannot be looked at, a link
    (onnx reads no external data through one)."""
    if not location or os.path.isabs(location) or ".." in location.replace("\\", "/").split("/"):
        raise OnnxFormatError(f"{which} is not a file in the model's folder {folder!r}.")
    if "\0" in location:  # the operating system takes no such name (Python: ValueError)
        raise OnnxFormatError(f"{which} holds a NUL character, so it names no file.")
    try:
        target = os.path.realpath(os.path.join(root, location))
        inside = os.path.commonpath([root, target]) == root
    except (OSError, ValueError) as err:  # a name the system refuses
        raise OnnxFormatError(f"{which} names no file ({escape(str(err))}).") from err
    if not inside:
        raise OnnxFormatError(f"{which} is not a file in the model's folder {folder!r}.")
    try:
        size = regular_size(target)
    except NotRegularFile as err:
        raise _not_regular(err, which) from None
    except OSError as err:  # missing, a link loop (ELOOP), a name too long, no permission
        reason = err.strerror or escape(str(err))
        raise OnnxFormatError(f"{which} cannot be read: {reason}.") from err
    if os.path.islink(os.path.join(root, location)):
        raise OnnxFormatError(
            f"{which} is a symbolic link; external data is read from regular files only."
        )
    return target, size


def array_of(onnx: Any, tensor: Any, loaded: Loaded) -> np.ndarray:
    """The value of ``tensor``, an initializer of ``loaded``'s model; data it keeps in an
    external file is read now (its range checked again). Data read from raw bytes is a
    read-only view of them (no copy)."""
    if loaded.folder is None or not _is_external(tensor):
        return np.asarray(onnx.numpy_helper.to_array(tensor))
    data = _external_bytes(onnx, tensor, loaded.folder, "its external data changed")
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
    if sys.byteorder == "little" and _element_bits(onnx, tensor.data_type) == 8 * dtype.itemsize:
        return np.frombuffer(data, dtype).reshape(tuple(tensor.dims))
    # Packed elements or a big-endian machine: onnx's conversion, on a copy of the header.
    header = onnx.TensorProto()
    header.data_type = tensor.data_type
    header.dims.extend(tensor.dims)
    header.raw_data = data
    return np.asarray(onnx.numpy_helper.to_array(header))


def source_model(onnx: Any, source: Any, owner: str, *, shapes: bool = False) -> Loaded:
    """The checked model of a path (read by :func:`load_checked`) or of a loaded model; with
    ``shapes``, what strict shape inference refuses in it is its ``shape_error``."""
    if isinstance(source, (str, os.PathLike)):
        return load_checked(source, owner, shapes=shapes)
    if isinstance(source, onnx.ModelProto):
        stored = [t.name for t in tensors_of(source) if _is_external(t)]
        if stored:
            raise OnnxFormatError(
                f"{owner}: tensors {stored[:3]} of the model keep their data in external files, "
                "which a loaded ModelProto cannot locate; pass the model's path instead."
            )
        invalid = _refusal(lambda: onnx.checker.check_model(source))
        shape_error = None
        if _only_unsorted(invalid):  # the caller's model is left as it is: a copy is sorted
            copy = onnx.ModelProto()
            copy.CopyFrom(source)
            source = copy
            invalid, shape_error = _check_sorted(onnx, source, shapes, str(invalid))
        elif shapes and invalid is None:
            shape_error = shape_refusal(onnx, source)
        if invalid is not None:
            raise OnnxFormatError(f"{owner}: the model is not valid ONNX: {invalid}")
        return Loaded(source, None, int(source.ByteSize()), shape_error)
    raise TypeError(f"{owner}: expected a path or an onnx.ModelProto, got {type(source).__name__}.")
