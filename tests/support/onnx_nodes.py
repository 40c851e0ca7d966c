"""ONNX's RNN operators (``LSTM``, ``GRU``, ``RNN``) mapped onto the NumPy oracle, written from
the operator specification alone (independent of our ONNX reader), and ONNX's own conformance
cases for them (``onnx.backend.test.case.node``: each case's expected outputs were computed by
the onnx package's own NumPy helpers).

:func:`oracle` runs one node on :func:`cudnn_rnn.core.reference.rnn_forward`: the gate blocks
reordered from ONNX's order (LSTM ``i o f c``, GRU ``z r h``) to the canonical one, the
attributes (activations with their alpha and beta consumed only by the functions that take
them, ``clip``, ``input_forget``, ``linear_before_reset``, ``direction``, ``layout``) turned into
a variant, the peepholes ``P`` (``i o f``) into the canonical ``P_i, P_f, P_o``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from cudnn_rnn.core.gates import permute_gates
from cudnn_rnn.core.reference import rnn_forward

#: ONNX's activation names -> ours, and which of alpha, beta each takes.
ACTIVATIONS = {
    "Sigmoid": ("sigmoid", 0),
    "Tanh": ("tanh", 0),
    "Relu": ("relu", 0),
    "HardSigmoid": ("hard_sigmoid", 2),
    "Affine": ("affine", 2),
    "LeakyRelu": ("leaky_relu", 1),
    "ThresholdedRelu": ("thresholded_relu", 1),
    "ScaledTanh": ("scaled_tanh", 2),
    "Elu": ("elu", 1),
    "Softsign": ("softsign", 0),
    "Softplus": ("softplus", 0),
}
ORDERS = {"LSTM": ("i", "o", "f", "c"), "GRU": ("u", "r", "h"), "RNN": ("h",)}
CANONICAL = {"LSTM": ("i", "f", "c", "o"), "GRU": ("r", "u", "h"), "RNN": ("h",)}
DEFAULTS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"), "RNN": ("Tanh",)}


@dataclass(frozen=True)
class Case:
    name: str
    node: onnx.NodeProto
    inputs: list[np.ndarray]
    outputs: list[np.ndarray]


def conformance_cases() -> list[Case]:
    """Every conformance case the onnx package ships for LSTM, GRU and RNN (18 in onnx 1.23)."""
    cases: list[Case] = []
    for op in ("lstm", "gru", "rnn"):
        module = importlib.import_module(f"onnx.backend.test.case.node.{op}")
        np.random.seed(0)  # the cases draw their weights from NumPy's global generator

        def record(node: Any, inputs: Any, outputs: Any, name: str, **_: Any) -> None:
            cases.append(Case(name, node, list(inputs), list(outputs)))

        saved: Callable[..., Any] = module.expect
        module.expect = record
        try:
            for cls in vars(module).values():
                if (
                    isinstance(cls, type)
                    and issubclass(cls, module.Base)
                    and cls is not module.Base
                ):
                    for attr in sorted(vars(cls)):
                        if attr.startswith("export"):
                            getattr(cls, attr)()
        finally:
            module.expect = saved
    return cases


def attributes(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _activations(op: str, attrs: dict[str, Any], num_dirs: int) -> list[dict[str, Any]]:
    names = [n.decode() if isinstance(n, bytes) else n for n in attrs.get("activations", [])]
    per_dir = len(DEFAULTS[op])
    names = names or list(DEFAULTS[op]) * num_dirs
    alphas = iter(attrs.get("activation_alpha", []))
    betas = iter(attrs.get("activation_beta", []))
    out = []
    for name in names[:per_dir]:  # the tests use one set of activations for both directions
        ours, takes = ACTIVATIONS[name]
        spec: dict[str, Any] = {"name": ours}
        if takes >= 1:
            spec["alpha"] = next(alphas, None)
        if takes >= 2:
            spec["beta"] = next(betas, None)
        out.append(spec)
    assert names[per_dir:] in ([], names[:per_dir]), "directions with different activations"
    return out


def oracle(node: onnx.NodeProto, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
    """``Y, Y_h[, Y_c]`` of ``node`` on ``inputs`` (ONNX's order, None or missing for absent)
    by the NumPy oracle, in ONNX's shapes (``Y`` ``[T, D, B, H]``, or batch-first with
    ``layout=1``)."""
    op, attrs = node.op_type, attributes(node)
    padded = list(inputs) + [None] * (8 - len(inputs))
    x, w, r, b, lengths, h0, c0, peep = padded
    assert x is not None and w is not None and r is not None
    layout = attrs.get("layout", 0)
    if layout:
        x = np.swapaxes(x, 0, 1)
        h0 = None if h0 is None else np.swapaxes(h0, 0, 1)
        c0 = None if c0 is None else np.swapaxes(c0, 0, 1)
    num_dirs, gh, _ = w.shape
    hidden = r.shape[-1]
    gates = gh // hidden
    batch = x.shape[1]
    direction = attrs.get("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    b = np.zeros((num_dirs, 2 * gh)) if b is None else b
    h0 = np.zeros((num_dirs, batch, hidden)) if h0 is None else h0
    if op == "LSTM":
        c0 = np.zeros((num_dirs, batch, hidden)) if c0 is None else c0
    src, dst = ORDERS[op], CANONICAL[op]
    weights, biases = [], []
    for d in range(num_dirs):
        f64 = np.float64
        weights += list(permute_gates(w[d].astype(f64), src, dst).reshape(gates, hidden, -1))
        weights += list(permute_gates(r[d].astype(f64), src, dst).reshape(gates, hidden, hidden))
        biases += list(permute_gates(b[d, :gh].astype(f64), src, dst).reshape(gates, hidden))
        biases += list(permute_gates(b[d, gh:].astype(f64), src, dst).reshape(gates, hidden))
        if peep is not None:
            p_i, p_o, p_f = peep[d].astype(f64).reshape(3, hidden)
            biases += [p_i, p_f, p_o]
    variant: dict[str, Any] = {}
    acts = _activations(op, attrs, num_dirs)
    if op == "RNN":
        variant["cell_activation"] = acts[0]
    else:
        variant["gate_activation"], variant["cell_activation"] = acts[0], acts[1]
        if op == "LSTM":
            variant["output_activation"] = acts[2]
    if "clip" in attrs:
        variant["gate_clip"] = attrs["clip"]
    if attrs.get("input_forget", 0):
        variant["input_forget"] = True
    if op == "GRU" and not attrs.get("linear_before_reset", 0):
        variant["reset_after"] = False
    if peep is not None:
        variant["peepholes"] = True
    if direction == "reverse":
        variant["time"] = "reverse"
    mode = {"LSTM": "lstm", "GRU": "gru", "RNN": "rnn_tanh"}[op]
    y, h_n, c_n = rnn_forward(
        mode, x, h0, c0, weights, biases, num_layers=1,
        bidirectional=direction == "bidirectional", sequence_lengths=lengths,
        variant=variant,
    )  # fmt: skip
    y = y.reshape(y.shape[0], batch, num_dirs, hidden).transpose(0, 2, 1, 3)  # [T, D, B, H]
    outs = [y, h_n] + ([c_n] if op == "LSTM" else [])
    if layout:
        outs = [np.transpose(y, (2, 0, 1, 3)), *(np.swapaxes(s, 0, 1) for s in outs[1:])]
    return [o for o, name in zip(outs, node.output, strict=False) if name]


def nodes_run_by_onnxruntime(
    node: onnx.NodeProto, inputs: list[np.ndarray | None]
) -> list[np.ndarray]:
    """The node's named outputs as onnxruntime computes them."""
    import onnxruntime as ort

    names = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]
    given = {n: v for n, v in zip(names, inputs, strict=False) if v is not None}
    node = onnx.helper.make_node(
        node.op_type,
        [n if n in given else "" for n in names[: len(inputs)]],
        list(node.output),
        **attributes(node),
    )
    value = onnx.helper.make_tensor_value_info
    proto = {np.dtype(np.int32): onnx.TensorProto.INT32}
    graph = onnx.helper.make_graph(
        [node],
        "node",
        [value(n, proto.get(v.dtype, onnx.TensorProto.FLOAT), None) for n, v in given.items()],
        [value(n, onnx.TensorProto.FLOAT, None) for n in node.output if n],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 14)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return list(session.run(None, given))


def iter_named(outputs: list[np.ndarray], node: onnx.NodeProto) -> Iterator[tuple[str, Any]]:
    yield from zip([n for n in node.output if n], outputs, strict=True)
