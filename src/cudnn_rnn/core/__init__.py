"""Pure core of cudnn_rnn (Python + NumPy only; never imports torch).

``spec`` validates a configuration (``variant``: what it computes beyond cuDNN's four modes),
``layout`` is the one place that knows where each canonical tensor lives, ``gates`` holds every
framework's gate order as data, and ``reference`` is a plain NumPy forward of the equations that
the tests use as their oracle.
"""

from cudnn_rnn.core.constants import (
    CUDNN_GRU,
    CUDNN_INPUT_AUTO_MODE,
    CUDNN_INPUT_LINEAR_MODE,
    CUDNN_INPUT_SKIP_MODE,
    CUDNN_LSTM,
    CUDNN_RNN_BIDIRECTION,
    CUDNN_RNN_RELU,
    CUDNN_RNN_TANH,
    CUDNN_RNN_UNIDIRECTION,
)
from cudnn_rnn.core.gates import CUDNN_GATES, GATE_ORDERS, permute_gates
from cudnn_rnn.core.layout import Layout, Param, layout_of, params_size
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.core.variant import CUDNN, Activation, Variant

__all__ = [
    "CUDNN",
    "CUDNN_GATES",
    "CUDNN_GRU",
    "CUDNN_INPUT_AUTO_MODE",
    "CUDNN_INPUT_LINEAR_MODE",
    "CUDNN_INPUT_SKIP_MODE",
    "CUDNN_LSTM",
    "CUDNN_RNN_BIDIRECTION",
    "CUDNN_RNN_RELU",
    "CUDNN_RNN_TANH",
    "CUDNN_RNN_UNIDIRECTION",
    "GATE_ORDERS",
    "Activation",
    "Layout",
    "Param",
    "RNNSpec",
    "Variant",
    "layout_of",
    "params_size",
    "permute_gates",
]
