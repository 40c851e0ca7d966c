"""The values and the data flow of an ONNX model's graphs, seen from any of its scopes.

A :class:`Scope` is the names one graph sees (the main graph, a subgraph with the graphs around
it, a model-local function's body at one call); :meth:`Scope.locate` says what defines a name,
:meth:`Scope.data_sources` where a tensor's data comes from through ops that only lay it out.
The :class:`Evaluator` computes the values of constants (initializers, ``Constant`` nodes and
plumbing of them) with bounds checked before anything is allocated.

Bounds, by construction: every value evaluated, every node run and every step of a walk through
the graphs is charged, in bytes, to the one :class:`~cudnn_rnn.io.onnx.file.Work` budget of
the operation (``WORK_FACTOR`` = 8 times the model's bytes plus ``WORK_CONSTANT`` = 16 MiB, all
its listings and reads together) before it is done; what would exceed it is refused
(:class:`_Unevaluable`, a reason in a listing). An output costs its bytes (elements times its
dtype's itemsize, from its inputs' values and shapes and its attributes, an exact integer
product), twice for ``Expand`` (onnx.reference multiplies by an array of ones as large) and
``Constant`` (the node copied into the model that runs it), and :data:`INDEX_COST` per index of
``Gather``/``GatherND`` (onnx.reference makes Python objects per index); each node run costs
:data:`RUN_COST`, each step of a walk :data:`STEP_COST`. So what a read holds and the time it
spends here are at most proportional to its file. Strings are never evaluated (nothing an RNN's
weights, shapes or indices need is a string, and NumPy holds one in 128 bytes or a Python
object): a string initializer, a ``Cast`` to strings or a string constant is refused.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from cudnn_rnn.io.files.escaping import escape
from cudnn_rnn.io.onnx.file import STANDARD_DOMAINS, Loaded, OnnxFormatError, array_of

__all__ = [
    "INDEX_COST",
    "LAYOUT_OPS",
    "PLUMBING",
    "RUN_COST",
    "STATE_OPS",
    "STEP_COST",
    "Evaluator",
    "Ref",
    "Scope",
    "attributes",
    "product",
]

#: Ops that only move data; a model from_onnx reads has RNN nodes and these, nothing else.
PLUMBING = frozenset(
    (
        "Cast",
        "Concat",
        "Constant",
        "ConstantOfShape",
        "Expand",
        "Flatten",
        "Gather",
        "GatherND",
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

#: Ops that lay data out differently without changing it, by the index of their data inputs
#: (None: all of them); their other inputs (a shape, axes) only say how. Only these may stand
#: between the graph inputs, the RNN nodes and the graph outputs.
LAYOUT_OPS: dict[str, tuple[int, ...] | None] = {
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
STATE_OPS: dict[str, tuple[int, ...] | None] = {
    **LAYOUT_OPS,
    "Cast": (0,),
    "Expand": (0,),
    "Gather": (0,),
    "Slice": (0,),
}


#: A tensor: the scope that defines it, and its name there.
Ref = tuple["Scope", str]

#: Bytes of work charged for running one node (the one-node model and onnx.reference's
#: evaluator of it, besides its outputs).
RUN_COST = 4096
#: ... for each step of a walk through a graph (a node planned, followed or visited, an entry
#: of a scope, an attribute decoded), besides the text it makes.
STEP_COST = 64
#: ... for each index ``Gather``/``GatherND`` reads (onnx.reference's GatherND makes Python
#: objects per index).
INDEX_COST = 128
#: ONNX's code of a string tensor, which is never evaluated.
_STRING = 8
_NO_STRINGS = (
    "nothing an RNN's weights, shapes or indices need is a string, so string tensors are not "
    "evaluated"
)


class _Unevaluable(OnnxFormatError):
    """A constant that cannot be evaluated (``what`` says why, without the owner)."""

    def __init__(self, owner: str, what: str) -> None:
        self.what = what
        super().__init__(f"{owner}: {what}.")


class Scope:
    """The names one graph sees: the main graph; a subgraph (``If``/``Loop``/``Scan``), which
    also sees the names of the graphs around it; or the body of a model-local function at one
    call, whose inputs are the caller's tensors (``binding``) and whose attribute references
    are the call's attributes. Values come from the model's one :class:`Evaluator`."""

    def __init__(
        self,
        ev: Evaluator,
        nodes: Any,
        *,
        inits: Any = (),
        inputs: Any = (),
        declared: Any = (),
        parent: Scope | None = None,
        binding: dict[str, str] | None = None,
        attrs: dict[str, Any] | None = None,
        trail: tuple[str, ...] = (),
    ) -> None:
        self.ev = ev
        self.nodes = list(nodes)
        ev.charge(STEP_COST * len(self.nodes), "indexing a graph's nodes")
        self.inits = {t.name: t for t in inits}
        self.producer = {out: n for n in self.nodes for out in n.output if out}
        # A graph input with an initializer of the same name is a default: a constant as well.
        self.runtime = {i.name for i in inputs} - set(self.inits)
        self.declared = {v.name: v for v in declared}
        ev.charge(STEP_COST * (len(self.inits) + len(self.declared)), "indexing a graph's names")
        self.parent, self.binding, self.attrs, self.trail = parent, binding, attrs, trail
        self._positions: dict[int, int] | None = None

    @classmethod
    def main(cls, ev: Evaluator, model: Any) -> Scope:
        g = model.graph
        return cls(
            ev,
            g.node,
            inits=g.initializer,
            inputs=g.input,
            declared=[*g.input, *g.value_info, *g.output],
        )

    def subgraph(self, graph: Any, trail: str) -> Scope:
        return Scope(
            self.ev,
            graph.node,
            inits=graph.initializer,
            inputs=graph.input,
            declared=[*graph.input, *graph.value_info, *graph.output],
            parent=self,
            attrs=self.attrs,
            trail=(*self.trail, trail),
        )

    def call(self, fn: Any, node: Any, trail: str) -> Scope:
        """The body of model-local function ``fn`` called by ``node`` (attributes resolved)."""
        inputs = list(node.input)
        binding = {name: inputs[k] if k < len(inputs) else "" for k, name in enumerate(fn.input)}
        attrs = {a.name: a for a in fn.attribute_proto}  # defaults, then the call's
        attrs.update({a.name: a for a in node.attribute})
        return Scope(
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

    def locate(self, name: str) -> tuple[Scope, str, str]:
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
        self.ev.charge(STEP_COST + node.ByteSize(), "copying a node of a function for its call")
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

    def attributes(self, node: Any, names: tuple[str, ...]) -> dict[str, Any]:
        """The attributes ``names`` of ``node`` at this call (see :meth:`resolved`), decoded
        (:func:`attributes`), their bytes charged."""
        values = attributes(self.ev.onnx, self.resolved(node), names)
        items = [x for v in values.values() for x in (v if isinstance(v, list) else [v])]
        text = sum(len(x) for x in items if isinstance(x, str))
        self.ev.charge(STEP_COST * (1 + len(items)) + text, "decoding a node's attributes")
        return values

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

    def is_runtime_input(self, ref: Ref) -> bool:
        return ref[0].locate(ref[1])[2] == "input"

    def data_sources(
        self,
        name: str,
        ops: Mapping[str, tuple[int, ...] | None] = LAYOUT_OPS,
        chain: list[tuple[Scope, Any]] | None = None,
    ) -> list[Ref]:
        """The tensors whose data ``name`` is, through standard ``ops`` (their data inputs
        only; layout ops by default), in order; a tensor reached twice is listed twice (and
        not followed again). ``chain`` receives the nodes followed."""
        leaves: list[Ref] = []
        seen: set[tuple[int, str]] = set()
        stack: list[Ref] = [(self, name)]
        while stack:
            scope, current = stack.pop()
            self.ev.charge(STEP_COST, "following the data of a tensor")
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

    def is_zero(self, ref: Ref) -> bool:
        """Whether ``ref`` is a constant of zeros: ``ConstantOfShape`` of value 0 (its shape is
        not evaluated), or a constant whose every value is 0."""
        scope, name, kind = ref[0].locate(ref[1])
        if kind == "node":
            node = scope.producer[name]
            if node.op_type == "ConstantOfShape" and self.ev.is_standard(node):
                value = scope.attributes(node, ("value",)).get("value")
                if value is None:
                    return True
                if value.data_type == _STRING or product(value.dims) != 1:
                    raise _Unevaluable(
                        self.ev.owner,
                        f"ConstantOfShape node {node.name!r} has a value of dims "
                        f"{list(value.dims)} and dtype {value.data_type}; ONNX's is one number",
                    )
                return not np.asarray(self.ev.onnx.numpy_helper.to_array(value)).any()
        found = self.ev.constant(scope, name)
        return found is not None and not np.asarray(found).any()

    def describe(self, refs: list[Ref]) -> str:
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
                    f"output {index} ({name!r}) of {escape(node.op_type)} node {node.name!r}"
                )
        more = f" and {len(refs) - 4} more" if len(refs) > 4 else ""
        return (", ".join(parts) or "nothing") + more


class Evaluator:
    """The values of a model's constants, in any of its scopes.

    Weights computed from constants are evaluated one plumbing node at a time. Before a node
    runs, the bytes of its outputs are bounded from its inputs' values and shapes and its
    attributes (an exact integer product, e.g. the shape a ``ConstantOfShape`` or ``Expand``
    asks for, times the itemsize of the output's dtype) and charged with the node's other work
    to the operation's :class:`~cudnn_rnn.io.onnx.file.Work` (see the module docstring);
    a node that would exceed it is refused before it allocates anything, as is an initializer
    read. A plan that meets a run-time input marks the nodes it was planning, so that no
    chain is planned twice in vain.
    """

    def __init__(self, onnx: Any, loaded: Loaded, owner: str) -> None:
        self.onnx = onnx
        self.loaded = loaded
        self.model = model = loaded.model
        self.owner = owner
        self.work = loaded.work
        self.local = {(f.domain, f.name) for f in model.functions}
        self._values: dict[tuple[int, str], np.ndarray] = {}
        self._runtime: set[tuple[int, int]] = set()  # nodes computed from run-time inputs

    def charge(self, cost: int, what: str) -> None:
        """Take ``cost`` bytes of the operation's work for ``what``, or refuse it
        (:class:`_Unevaluable`) before it is done."""
        if not self.work.take(cost):
            raise _Unevaluable(
                self.owner,
                f"{what} would take {cost} bytes of work, more than the {self.work.says()}; "
                "refused before it is done",
            )

    def is_standard(self, node: Any) -> bool:
        """Whether ``node`` is a standard ONNX operator (not another domain's, not a call)."""
        return node.domain in STANDARD_DOMAINS and (node.domain, node.op_type) not in self.local

    def depends_on_runtime(self, ref: Ref) -> bool:
        """Whether ``ref`` is computed from a run-time input (or from a name nothing defines)."""
        return self._plan(*ref) is None

    def constant(self, scope: Scope, name: str) -> np.ndarray | None:
        """The value of ``name`` seen from ``scope``, or None when it depends on a run-time
        input."""
        plan = self._plan(scope, name)
        if plan is None:
            return None
        for where, node in plan:
            if any(o and (id(where), o) not in self._values for o in node.output):
                self._run(where, node)
        return self._value(scope, name)

    def _plan(self, scope: Scope, name: str) -> list[tuple[Scope, Any]] | None:
        """The nodes that compute ``name``, each after those it needs (a depth-first walk with
        its own stack: a chain of any length), or None when a run-time input is among the
        tensors it is computed from (the nodes being planned then are marked as such)."""
        scope, name, kind = scope.locate(name)
        if kind != "node":
            return [] if kind == "init" else None
        order: list[tuple[Scope, Any]] = []
        state: dict[tuple[int, int], int] = {}  # 1: its inputs are being planned; 2: planned
        stack: list[tuple[Scope, Any, bool]] = [(scope, scope.producer[name], False)]
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
                    f"{escape(node.op_type)} node {node.name!r} is computed from itself",
                )
            if all(not o or (id(where), o) in self._values for o in node.output):
                state[key] = 2
                continue
            self.charge(STEP_COST, "planning what computes a constant")
            state[key] = 1
            if key in self._runtime:
                self._from_runtime(state)
                return None
            stack.append((where, node, True))
            for i in node.input:
                if not i:
                    continue
                at, defined, how = where.locate(i)
                if how in ("input", "missing"):
                    self._from_runtime(state)
                    return None
                if how == "node" and (id(at), defined) not in self._values:
                    stack.append((at, at.producer[defined], False))
        return order

    def _from_runtime(self, state: dict[tuple[int, int], int]) -> None:
        """Mark the nodes being planned (the path to a run-time input) as computed from it."""
        self._runtime.update(key for key, s in state.items() if s == 1)

    def _value(self, scope: Scope, name: str) -> np.ndarray:
        scope, name, kind = scope.locate(name)
        key = (id(scope), name)
        if key not in self._values:
            if kind != "init":
                raise _Unevaluable(self.owner, f"tensor {name!r} is used before it is computed")
            tensor = scope.inits[name]
            try:
                if tensor.data_type == _STRING:
                    raise ValueError(f"it holds strings; {_NO_STRINGS}")
                dims = [int(d) for d in tensor.dims]
                if any(d < 0 for d in dims):
                    raise ValueError(f"negative dimensions {dims}")
                size = product(dims) * _itemsize(self.onnx, tensor.data_type)
            except (ValueError, KeyError, TypeError) as err:
                raise _Unevaluable(
                    self.owner, f"initializer {name!r} cannot be read: {escape(str(err))}"
                ) from err
            self.charge(size, f"reading initializer {name!r}")
            try:
                value = array_of(self.onnx, tensor, self.loaded)
            except Exception as err:  # data that does not match its dims or dtype
                raise _Unevaluable(
                    self.owner, f"initializer {name!r} cannot be read: {escape(str(err))}"
                ) from err
            self._values[key] = value
        return self._values[key]

    def _run(self, scope: Scope, node: Any) -> None:
        label = f"{escape(node.op_type)} node {node.name!r}"
        node = scope.resolved(node)
        if node.op_type not in PLUMBING or not self.is_standard(node):
            raise _Unevaluable(
                self.owner,
                f"it is computed by {label}; only standard ops that move data "
                f"({sorted(PLUMBING)}) are evaluated",
            )
        args = [self._value(scope, i) if i else None for i in node.input]
        try:
            elements, itemsize, extra = self._size(node, args)
        except (ValueError, TypeError, IndexError, KeyError) as err:
            raise _Unevaluable(
                self.owner, f"{label} has unusable inputs: {escape(str(err))}"
            ) from err
        twice = node.op_type in ("Expand", "Constant")  # the ones it multiplies; the node copied
        cost = elements * itemsize * (2 if twice else 1) + extra + RUN_COST
        if not self.work.take(cost):
            raise _Unevaluable(
                self.owner,
                f"{label} would make {elements} elements ({cost} bytes of work), more than the "
                f"{self.work.says()}; refused before allocating them",
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
                self.owner, f"{label} cannot be evaluated: {escape(str(err))}"
            ) from err
        made = sum(v.size for v in outputs)
        strings = [v.dtype for v in outputs if v.dtype.kind in "OSU"]
        if made > elements or strings:  # the bound above is wrong for this op: a bug
            raise RuntimeError(f"{self.owner}: {label} made {made} > {elements} elements.")
        for out, value in zip([o for o in node.output if o], outputs):
            self._values[(id(scope), out)] = value

    def _size(self, node: Any, args: list[np.ndarray | None]) -> tuple[int, int, int]:
        """An upper bound on the elements of ``node``'s outputs, from its inputs alone; the
        itemsize of their dtype; the bytes of work the node does besides (its indices)."""
        onnx = self.onnx
        if any(a is not None and a.dtype.kind in "OSU" for a in args):
            raise ValueError(_NO_STRINGS)
        op = node.op_type
        attrs = {a.name: a for a in node.attribute}
        if op == "Constant":
            if len(attrs) != 1:
                raise ValueError(f"{len(attrs)} attributes (a Constant has one)")
            (a,) = attrs.values()
            if a.name in ("value", "sparse_value"):
                tensor = a.t if a.name == "value" else a.sparse_tensor.values
                dims = a.t.dims if a.name == "value" else a.sparse_tensor.dims
                if any(v < 0 for v in dims):
                    raise ValueError(f"negative dimensions {list(dims)}")
                return product(dims), _itemsize(onnx, tensor.data_type), 0
            if a.name in ("value_string", "value_strings"):
                raise ValueError(_NO_STRINGS)
            floats = a.name.startswith("value_float")
            return max(len(a.floats), len(a.ints), 1), 4 if floats else 8, 0
        data = args[0] if args else None
        if op == "ConstantOfShape":
            value = attrs["value"].t if "value" in attrs else None
            itemsize = 4 if value is None else _itemsize(onnx, value.data_type)
            return product(_shape_input(data)), itemsize, 0
        if data is None:
            raise ValueError("no data input")
        itemsize = data.dtype.itemsize
        if op == "Expand":
            wanted = _shape_input(args[1] if len(args) > 1 else None)
            n = max(len(wanted), data.ndim)
            ours = [1] * (n - data.ndim) + list(data.shape)
            wanted = [1] * (n - len(wanted)) + wanted
            return product(max(a, b) for a, b in zip(ours, wanted)), itemsize, 0
        if op == "Cast":
            to = attrs["to"].i if "to" in attrs else 0
            if to == _STRING:
                raise ValueError(f"it casts to strings; {_NO_STRINGS}")
            return int(data.size), _itemsize(onnx, to), 0
        if op == "Concat":
            given = [a for a in args if a is not None]
            return sum(a.size for a in given), max(a.dtype.itemsize for a in given), 0
        if op == "Gather":
            indices = args[1] if len(args) > 1 else None
            axis = attrs["axis"].i if "axis" in attrs else 0
            if indices is None or not -data.ndim <= axis < data.ndim:
                raise ValueError(f"axis {axis} of data of shape {data.shape}")
            shape = [*data.shape[:axis], indices.size, *data.shape[axis:][1:]]
            return product(shape), itemsize, INDEX_COST * int(indices.size)
        if op == "GatherND":  # (the dynamo exporter's gate reordering of a weight block)
            indices = args[1] if len(args) > 1 else None
            batch = attrs["batch_dims"].i if "batch_dims" in attrs else 0
            if indices is None or indices.ndim < 1 or indices.dtype.kind not in "iu":
                raise ValueError("the indices are not an integer tensor")
            depth = int(indices.shape[-1])
            if not 0 <= batch < min(data.ndim, indices.ndim) + (batch == 0):
                raise ValueError(f"batch_dims {batch} for data of shape {data.shape}")
            if not 1 <= depth <= data.ndim - batch:
                raise ValueError(f"index depth {depth} for data of shape {data.shape}")
            count = product(indices.shape[:-1])
            return count * product(data.shape[batch + depth :]), itemsize, INDEX_COST * count
        if op == "Shape":
            return data.ndim, 8, 0
        # Flatten, Identity, Reshape, Slice, Split, Squeeze, Transpose, Unsqueeze: at most the
        # elements they are given, of their dtype.
        return int(data.size), itemsize, 0


def _shape_input(shape: np.ndarray | None) -> list[int]:
    """The dimensions a 1-D integer tensor asks for (``ConstantOfShape``, ``Expand``)."""
    if shape is None or shape.ndim != 1 or shape.dtype.kind not in "iu":
        raise ValueError("the shape is not a 1-D integer tensor")
    wanted = [int(v) for v in shape]
    if any(v < 0 for v in wanted):
        raise ValueError(f"negative dimensions {wanted}")
    return wanted


def _itemsize(onnx: Any, data_type: int) -> int:
    """The bytes of one element of ONNX dtype ``data_type`` as NumPy holds it (ValueError for
    strings, KeyError for no known dtype)."""
    if data_type == _STRING:
        raise ValueError(_NO_STRINGS)
    return int(onnx.helper.tensor_dtype_to_np_dtype(data_type).itemsize)


def product(values: Any) -> int:
    """The product of dimensions, as an exact Python int (never a NumPy overflow)."""
    total = 1
    for v in values:
        total *= int(v)
    return total


def attributes(onnx: Any, node: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """The attributes ``names`` of ``node`` that it has, decoded (bytes as text); the others are
    not decoded (:meth:`Scope.attributes` charges what this decodes)."""

    def text(v: Any) -> Any:
        return v.decode(errors="replace") if isinstance(v, bytes) else v

    values = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute if a.name in names}
    return {k: [text(x) for x in v] if isinstance(v, list) else text(v) for k, v in values.items()}
