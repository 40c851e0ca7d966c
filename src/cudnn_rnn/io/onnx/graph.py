"""The ONNX graph of an RNN stack, from a spec and canonical tensors (no layer needed).

ONNX's RNN operators compute cuDNN's math when ``GRU`` has ``linear_before_reset=1`` (the reset
gate applied after the recurrent matmul, ``Rbh`` inside the product) and the activations are the
defaults (``RNN``: ``Tanh`` or ``Relu``). One node is one layer, both directions in it; per node,
with ``D`` directions (0 forward, 1 backward) and gates in ONNX's order (LSTM i, o, f, c; GRU
z(=u), r, h)::

    W  [D, G*H, in]      input matrices stacked       (in = I for layer 0, D*H after)
    R  [D, G*H, H]       recurrent matrices
    B  [D, 2*G*H]        input biases (Wb), then recurrent biases (Rb)
    Y  [T, D, B, H]      outputs;   Y_h [D, B, H];   Y_c [D, B, H] (LSTM)

:func:`model_proto` builds a model with these graph inputs and outputs (time-major; ``T`` and
``B`` are symbolic)::

    X               [T, B, I]          the given dtype
    sequence_lens   [B]                int32, in [1, T]     (only with sequence_lens=True)
    initial_h       [L*D, B, H]        index layer*D + dir  (only with initial_state=True)
    initial_c       [L*D, B, H]        LSTM only            (only with initial_state=True)
    Y               [T, B, D*H]        forward half first; exactly 0 past a sequence's length
    Y_h, Y_c        [L*D, B, H]        final states (after each sequence's last valid step)

Between layers each ``Y`` goes through ``Transpose`` and ``Reshape`` to ``[T, B, D*H]``; each
layer's initial states are a ``Slice`` of the inputs, and the final states a ``Concat``. The
weights are written exactly; ``skip_input`` is written as the identity ``W`` that the canonical
form holds (exact math). LSTM projection has no ONNX counterpart and is refused.

The operators, their attributes and the weights' mapping are :mod:`cudnn_rnn.export`'s (one
mapping for this writer and for ``torch.onnx.export`` of a model that holds our layers).

This module knows specs, canonical tensors and the layout only, never layers, so that anything
that has canonical tensors can build the graph without importing the layer stack;
:mod:`cudnn_rnn.converters.onnx` (files <-> layers) is built on it. onnx is imported only when
:func:`model_proto` or :func:`import_onnx` runs.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from cudnn_rnn.core.constants import CUDNN_LSTM
from cudnn_rnn.core.layout import layout_of
from cudnn_rnn.core.spec import RNNSpec, check_int
from cudnn_rnn.io.onnx.layout import (
    GATE_ORDER,
    ONNX_OPS,
    OnnxOp,
    node_attributes,
    onnx_peepholes,
    onnx_weights,
    unwritable,
)

__all__ = [
    "DEFAULT_OPSET",
    "GATE_ORDER",
    "META_INPUT_MODE",
    "MIN_OPSET",
    "ONNX_OPS",
    "OnnxOp",
    "import_onnx",
    "model_proto",
]

DEFAULT_OPSET = 17
#: Slice/Squeeze/Unsqueeze take their axes as inputs from opset 13 on.
MIN_OPSET = 13
#: The metadata key of a written layer's input mode (skip_input is written as the identity W,
#: which any input mode computes; the key tells a reader which mode the layer had).
META_INPUT_MODE = "cudnn_rnn.input_mode"


def import_onnx() -> Any:
    """The onnx module; ImportError saying how to install it when it is missing."""
    try:
        onnx = importlib.import_module("onnx")
    except ImportError as err:
        raise ImportError(
            "cudnn_rnn ONNX conversion needs the onnx package (and onnxruntime to run the "
            "models): pip install onnx onnxruntime"
        ) from err
    return onnx


#: Our dtypes -> (TensorProto's name, ONNX's type string).
_ONNX_DTYPES: dict[torch.dtype, tuple[str, str]] = {
    torch.float16: ("FLOAT16", "tensor(float16)"),
    torch.bfloat16: ("BFLOAT16", "tensor(bfloat16)"),
    torch.float32: ("FLOAT", "tensor(float)"),
    torch.float64: ("DOUBLE", "tensor(double)"),
}


def model_proto(
    spec: RNNSpec,
    weights: Sequence[Tensor],
    biases: Sequence[Tensor],
    dtype: torch.dtype,
    *,
    opset: int = DEFAULT_OPSET,
    sequence_lens: bool = False,
    initial_state: bool = False,
    owner: str = "model_proto",
    name: str = "the layer",
    doc: str = "",
) -> Any:
    """The in-memory ONNX ``ModelProto`` (the graph of the module docstring) of ``spec`` with
    canonical ``(weights, biases)``, written as ``dtype``; ``name`` and ``doc`` describe the model
    in messages and the graph's doc string. :func:`cudnn_rnn.converters.onnx.to_onnx` saves it.

    Raises ValueError for LSTM projection, an opset out of range or a dtype the operator of that
    opset does not take (messages name ``owner``).
    """
    onnx = import_onnx()
    helper = onnx.helper
    latest = onnx.defs.onnx_opset_version()
    opset = check_int(owner, "opset", opset, MIN_OPSET)
    if opset > latest:
        raise ValueError(
            f"{owner}: opset must be in [{MIN_OPSET}, {latest}] (the latest the installed onnx "
            f"knows), got {opset}."
        )
    if spec.num_proj is not None:
        raise ValueError(
            f"{owner}: {name} has num_proj={spec.num_proj}, but ONNX's LSTM "
            "operator has no projection and no standard operator computes it; export a layer "
            "without num_proj, or use to_torch (torch.nn.LSTM has proj_size)."
        )
    why = unwritable(spec)
    if why is not None:
        raise ValueError(
            f"{owner}: {name} computes a variant ONNX's {ONNX_OPS[spec.mode].op_type} node "
            f"cannot hold: {why}; save it as .safetensors or .pt instead."
        )
    op = ONNX_OPS[spec.mode]
    elem_name, type_str = _ONNX_DTYPES[dtype]
    schema = onnx.defs.get_schema(op.op_type, opset)
    allowed = next(c.allowed_type_strs for c in schema.type_constraints if c.type_param_str == "T")
    if type_str not in allowed:
        raise ValueError(
            f"{owner}: the ONNX {op.op_type} operator of opset {opset} takes {sorted(allowed)}, "
            f"not the layer's {dtype}; pass a later opset or convert the layer with .to(dtype)."
        )
    flat = layout_of(spec).pack(weights, biases, owner)
    graph = _graph(
        onnx,
        spec,
        [(*wrb, p) for wrb, p in zip(onnx_weights(spec, flat), onnx_peepholes(spec, flat))],
        getattr(onnx.TensorProto, elem_name),
        sequence_lens=sequence_lens,
        initial_state=initial_state,
    )
    graph.doc_string = doc
    opsets = [helper.make_opsetid("", opset)]
    return helper.make_model(
        graph,
        opset_imports=opsets,
        producer_name="cudnn_rnn",
        ir_version=helper.find_min_ir_version_for(opsets),
    )


def _graph(
    onnx: Any,
    spec: RNNSpec,
    layers: Sequence[tuple[Tensor, Tensor, Tensor, Tensor | None]],
    elem: int,
    *,
    sequence_lens: bool,
    initial_state: bool,
) -> Any:
    """The graph of :func:`to_onnx`: per layer Slice the states, one RNN node, Transpose and
    Reshape its Y for the next; Concat the final states."""
    helper = onnx.helper
    op = ONNX_OPS[spec.mode]
    d, h, num_layers = spec.num_dirs, spec.num_units, spec.num_layers
    states = ["initial_h", "initial_c"] if spec.mode == CUDNN_LSTM else ["initial_h"]
    finals = ["Y_h", "Y_c"][: len(states)]
    inits: list[Any] = []
    nodes: list[Any] = []

    def const(name: str, value: Tensor) -> str:
        inits.append(_tensor_proto(onnx, name, value.detach().cpu().contiguous(), elem))
        return name

    def ints(name: str, values: Sequence[int]) -> str:
        inits.append(helper.make_tensor(name, onnx.TensorProto.INT64, [len(values)], values))
        return name

    graph_inputs = [helper.make_tensor_value_info("X", elem, ["T", "B", spec.input_size])]
    if sequence_lens:
        graph_inputs.append(
            helper.make_tensor_value_info("sequence_lens", onnx.TensorProto.INT32, ["B"])
        )
    if initial_state:
        graph_inputs += [
            helper.make_tensor_value_info(s, elem, [spec.num_states, "B", h]) for s in states
        ]
    axis0 = ints("axes_0", [0]) if initial_state else ""
    to_3d = ints("shape_T_B_minus1", [0, 0, -1])
    x = "X"
    layer_states: list[list[str]] = [[] for _ in states]
    for index, weights in enumerate(layers):
        w, r, b = (const(f"{k}_{index}", v) for k, v in zip("WRB", weights[:3]))
        peep = "" if weights[3] is None else const(f"P_{index}", weights[3])
        state_in = [""] * len(states)
        if initial_state:
            start = ints(f"state_start_{index}", [index * d])
            end = ints(f"state_end_{index}", [(index + 1) * d])
            for k, s in enumerate(states):
                state_in[k] = f"{s}_{index}"
                nodes.append(helper.make_node("Slice", [s, start, end, axis0], [state_in[k]]))
        inputs = [x, w, r, b, "sequence_lens" if sequence_lens else "", *state_in]
        if peep:  # the LSTM's eighth input, after initial_c
            inputs += [""] * (7 - len(inputs)) + [peep]
        while inputs[-1] == "":  # trailing optional inputs are left out
            inputs.pop()
        outs = [f"Y_{index}"] + [f"{name}_{index}" for name in finals]
        nodes.append(
            helper.make_node(
                op.op_type,
                inputs,
                outs,
                f"{op.op_type}_{index}",
                **node_attributes(spec),
            )
        )
        for k, out in enumerate(outs[1:]):
            layer_states[k].append(out)
        # Y [T, D, B, H] -> [T, B, D, H] -> [T, B, D*H]: the next layer's input (forward first).
        nodes.append(
            helper.make_node("Transpose", [outs[0]], [f"Y_tbdh_{index}"], perm=[0, 2, 1, 3])
        )
        x = "Y" if index == num_layers - 1 else f"X_{index + 1}"
        nodes.append(helper.make_node("Reshape", [f"Y_tbdh_{index}", to_3d], [x]))
    for name, parts in zip(finals, layer_states):
        nodes.append(
            helper.make_node("Concat", parts, [name], axis=0)
            if len(parts) > 1
            else helper.make_node("Identity", parts, [name])
        )
    graph_outputs = [helper.make_tensor_value_info("Y", elem, ["T", "B", d * h])] + [
        helper.make_tensor_value_info(name, elem, [spec.num_states, "B", h]) for name in finals
    ]
    return helper.make_graph(
        nodes, f"cudnn_rnn_{spec.mode}", graph_inputs, graph_outputs, initializer=inits
    )


def _tensor_proto(onnx: Any, name: str, value: Tensor, elem: int) -> Any:
    # Raw little-endian bytes, as ONNX stores them; works for bfloat16, which NumPy lacks.
    raw = value.reshape(-1).view(torch.uint8).numpy().tobytes()
    return onnx.helper.make_tensor(name, elem, list(value.shape), raw, raw=True)
