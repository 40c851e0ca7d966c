"""cudnn_rnn: TensorFlow 1.x ``tf.contrib.cudnn_rnn`` re-created on PyTorch.

Fused multi-layer, uni- and bidirectional LSTM / GRU / RNN-tanh / RNN-relu with cuDNN's exact math
and an opaque parameter buffer, on CPU and GPU. ``cudnn_rnn.ops`` holds the op-level classes.

The torch-based modules are imported on first use, so that ``cudnn_rnn.core`` (pure Python and
NumPy) can be used where torch is not installed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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
from cudnn_rnn.core.spec import RNNSpec

if TYPE_CHECKING:
    from cudnn_rnn import ops

__version__ = "0.1.0"

_LAZY_MODULES = ("ops",)


def __getattr__(name: str) -> Any:
    if name in _LAZY_MODULES:
        return importlib.import_module(f"cudnn_rnn.{name}")
    raise AttributeError(f"module 'cudnn_rnn' has no attribute {name!r}")


__all__ = [
    "CUDNN_GRU",
    "CUDNN_INPUT_AUTO_MODE",
    "CUDNN_INPUT_LINEAR_MODE",
    "CUDNN_INPUT_SKIP_MODE",
    "CUDNN_LSTM",
    "CUDNN_RNN_BIDIRECTION",
    "CUDNN_RNN_RELU",
    "CUDNN_RNN_TANH",
    "CUDNN_RNN_UNIDIRECTION",
    "RNNSpec",
    "__version__",
    "ops",
]
