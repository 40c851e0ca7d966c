"""The variants (:mod:`cudnn_rnn.core.variant`) in the native engine: which it computes, and the
record its loops read (``cr_variant`` in engine.c).

The loops compute every activation of :data:`~cudnn_rnn.core.variant.ACTIVATIONS` for the
gates, the candidate and the LSTM's output, the gate clip (ONNX), the cell clip (TF), peepholes,
coupled input and forget gates, the GRU's reset gate before the recurrent product (two products
a step, a barrier between) and the reverse time direction (the backward direction's loop);
Keras's ``go_backwards`` is that loop with its output flipped (a spec of one layer: see
:class:`~cudnn_rnn.core.spec.RNNSpec`). A bidirectional pair's merge (a sum, product or mean)
and separate stacks are torch operations between the layers' loops (:mod:`.native`), their
gradients written out there; the workspace then keeps the last layer's output too
(:func:`~cudnn_rnn.engines.common.kept_outputs`). Only the projection clip runs on the variant
engine, since the native engine has no projection. With a variant the workspace keeps the gates'
pre-activations (before the gate clip, the peepholes' terms included) in place of the gates'
values, and each backward step takes them through the activations again; a GRU with the reset
gate before the product keeps ``r * h_prev`` in place of ``ghn``, which the gradient of ``R_n``
reads (:func:`candidate_input`).
"""

from __future__ import annotations

from cudnn_rnn.core.constants import CUDNN_GRU, CUDNN_RNN_RELU
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.core.variant import ACTIVATIONS, Activation, Variant
from cudnn_rnn.engines.native_library import _VariantArgs

#: Each activation's code in the C library: its place in the table.
ACTIVATION_CODES = {name: code for code, name in enumerate(ACTIVATIONS)}


def go_backwards(spec: RNNSpec) -> bool:
    """Whether the output is Keras's ``go_backwards`` order: the loop's, flipped in time."""
    return spec.variant.time == "go_backwards"


def reverses(spec: RNNSpec, direction: int) -> int:
    """Whether a direction's loop runs backwards in time: the second of a pair, or the one
    direction of a reversed layer."""
    return int(direction == 1 or spec.variant.time != "forward")


def candidate_input(spec: RNNSpec) -> bool:
    """Whether the workspace's second part holds ``r * h_prev`` (a GRU with the reset gate
    before the product) rather than ``ghn``."""
    return spec.mode == CUDNN_GRU and not spec.variant.reset_after


def variant_args(spec: RNNSpec) -> _VariantArgs | None:
    """The ``cr_variant`` record of ``spec`` (None for cuDNN's math)."""
    v: Variant = spec.variant
    if v.is_cudnn:
        return None
    own = Activation("relu" if spec.mode == CUDNN_RNN_RELU else "tanh")
    acts = (v.gate_activation, v.cell_activation or own, v.output_activation)
    args = _VariantArgs()
    for name, act in zip(("gate", "cell", "out"), acts, strict=True):
        setattr(args, f"{name}_act", ACTIVATION_CODES[act.name])
        setattr(args, f"{name}_alpha", 0.0 if act.alpha is None else act.alpha)
        setattr(args, f"{name}_beta", 0.0 if act.beta is None else act.beta)
    args.gate_clip = v.gate_clip or 0.0
    args.cell_clip = v.cell_clip or 0.0
    args.input_forget = int(v.input_forget)
    args.reset_before = int(spec.mode == CUDNN_GRU and not v.reset_after)
    return args
