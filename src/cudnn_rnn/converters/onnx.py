"""ONNX <-> our layers, with the standard ``LSTM``, ``GRU`` and ``RNN`` operators.

:func:`to_onnx` writes a layer as the graph that :mod:`cudnn_rnn.io.onnx.graph` builds (one
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
we cannot compute it, and ``from_onnx(path, node=NAME)`` reads one of them whatever
else the graph computes. ``W``, ``R`` and ``B`` may be initializers, ``Constant`` nodes (of the
node's graph or of the graphs around it) or computed from them by plumbing ops (evaluated with
``onnx.reference``, sizes bounded before anything is allocated). Initial states and sequence
lengths are run-time inputs, not parameters: they are not read, nor is dropout (ONNX models are
for inference). A model whose RNN nodes are batch-major (``layout=1``) gives the same layer; call
it with ``time_major=False``.

onnxruntime's int8 LSTMs (``quantize_dynamic`` writes each LSTM node as a ``com.microsoft``
``DynamicQuantizeLSTM``: W and R int8 with a scale and a zero point per direction or per output
channel) are read as LSTMs with their weights dequantized, ``(q - zero_point) * scale`` in
float32, exactly; a note says so, and that onnxruntime computes such a node in 8-bit integers
with its inputs quantized as it runs, so its outputs differ from the layer's by that error
(measured on a real 3-layer bidirectional model of hidden size 384: the layer is within 2e-5 of
onnxruntime's float LSTM of the same weights, onnxruntime's int8 run within 0.0045 on average
and 0.45 at most of both). Other operators whose type names an LSTM, a GRU or an RNN, of any
domain, are listed with the reason they are not read. A model whose nodes are not sorted
topologically (onnx's checker refuses it, onnxruntime runs it) is read in order.

:func:`read` returns one RNN as data (:class:`~cudnn_rnn.io.found.ReadRNN`: its spec and
canonical tensors), which ``from_onnx`` builds our layer from. Reading holds a file at most twice
in memory at once, plus a constant (see :mod:`cudnn_rnn.io.onnx.file`), and evaluating its
weights at most 8 times its bytes plus 16 MiB (see :mod:`cudnn_rnn.io.onnx.eval`).

This module is the front: the functions that take or give our layers, and the names of the
modules behind it, each of one idea, importing one way (file <- eval <- find <- read):
:mod:`~cudnn_rnn.io.onnx.graph` builds the graph :func:`to_onnx` writes;
:mod:`~cudnn_rnn.io.onnx.file` loads and checks a model file (external data included);
:mod:`~cudnn_rnn.io.onnx.eval` evaluates the values and follows the data flow of its graphs;
:mod:`~cudnn_rnn.io.onnx.find` finds where its RNNs are and what each computes;
:mod:`~cudnn_rnn.io.onnx.read` reads one of them as data. None of them imports the layers.

onnx (and onnxruntime, to run the models) are optional dependencies, imported only when a
function here runs: ``pip install onnx onnxruntime``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import torch

from cudnn_rnn.io import atomic
from cudnn_rnn.io.onnx.file import OnnxFormatError, load_model, tensor_shapes
from cudnn_rnn.io.onnx.graph import (
    DEFAULT_OPSET,
    META_INPUT_MODE,
    MIN_OPSET,
    ONNX_OPS,
    import_onnx,
    model_proto,
)
from cudnn_rnn.io.onnx.read import find_rnns, read, read_rnn

if TYPE_CHECKING:
    from cudnn_rnn.layers import _CudnnRNN

__all__ = [
    "DEFAULT_OPSET",
    "MIN_OPSET",
    "ONNX_OPS",
    "OnnxFormatError",
    "find_rnns",
    "from_onnx",
    "import_onnx",
    "load_model",
    "model_proto",
    "read",
    "tensor_shapes",
    "to_onnx",
]


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
    :mod:`cudnn_rnn.io.onnx.graph`.

    Raises TypeError for anything but our layer, RuntimeError for an unbuilt one, ValueError for
    LSTM projection (no ONNX operator has it), an opset out of range, or a dtype the operators of
    that opset do not take (bfloat16 needs opset 22).
    """
    from cudnn_rnn.converters.canonical import layer_canonical

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
    onnx.helper.set_model_props(model, {META_INPUT_MODE: layer.input_mode})
    _save_atomically(onnx, model, os.fspath(path))


def _save_atomically(onnx: Any, model: Any, path: str) -> None:
    # Weights are stored inside the model (no external data: a layer is far below protobuf's 2 GB).
    atomic.write_file(path, model.SerializeToString())


# -- reading -------------------------------------------------------------------------------------


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
    :class:`~cudnn_rnn.io.onnx.eval.Evaluator`). A ``DynamicQuantizeLSTM`` node (by
    ``node``) gives an LSTM holding its weights dequantized (see the module docstring).

    Raises OnnxFormatError (a ValueError) for a file or model it cannot read: not ONNX, not a
    regular file, hostile sizes, no RNN node, a ``node`` the model does not hold, or one that
    neither cuDNN's math nor a variant of it computes (:mod:`cudnn_rnn.core.variant` holds
    ``clip``, every ONNX activation with its parameters, GRU ``linear_before_reset=0``, LSTM
    ``input_forget`` and peepholes ``P``, ``direction="reverse"``): an unknown activation,
    Affine/ScaledTanh/ThresholdedRelu without their parameters, different activations per
    direction, weights that are not constants, a non-zero constant initial state or constant
    sequence lengths. Without
    ``node`` also: nodes of other domains or other computing ops, nodes that are not one stack
    of the same kind, outputs not computed by them. TypeError for a ``node`` that is not a
    str, FileNotFoundError for a missing file.
    """
    from cudnn_rnn.converters.canonical import layer_from_canonical

    data = read_rnn(source, node, input_mode, "from_onnx", argument="node")
    return layer_from_canonical(
        data.spec,
        data.weights,
        data.biases,
        dtype=data.weights[0].dtype,
        device=torch.device("cpu"),
        owner="from_onnx",
    )
