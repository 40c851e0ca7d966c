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
    from cudnn_rnn.layers import CudnnGRU, CudnnLSTM, CudnnRNNRelu, CudnnRNNTanh

__version__ = "0.1.0"

# Public name -> module that defines it (None: the name is the module itself).
_LAZY: dict[str, str | None] = {
    "ops": None,
    "CudnnLSTM": "layers",
    "CudnnGRU": "layers",
    "CudnnRNNTanh": "layers",
    "CudnnRNNRelu": "layers",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'cudnn_rnn' has no attribute {name!r}")
    module = importlib.import_module(f"cudnn_rnn.{_LAZY[name] or name}")
    return module if _LAZY[name] is None else getattr(module, name)


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
    "CudnnGRU",
    "CudnnLSTM",
    "CudnnRNNRelu",
    "CudnnRNNTanh",
    "RNNSpec",
    "__version__",
    "ops",
]
