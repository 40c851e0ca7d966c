"""cudnn_rnn: TensorFlow 1.x ``tf.contrib.cudnn_rnn`` re-created on PyTorch.

Fused multi-layer, uni- and bidirectional LSTM / GRU / RNN-tanh / RNN-relu with cuDNN's exact math
and an opaque parameter buffer, on CPU and GPU. ``cudnn_rnn.ops`` holds the op-level classes.

The torch-based modules are imported on first use, so that ``cudnn_rnn.core`` (pure Python and
NumPy) can be used where torch is not installed. The package's layers, bottom to top: ``core``,
``io`` (bytes <-> data), the operator and its ``engines``, the modules (``ops``, ``layers``,
``cells``, ``nn``, the saveables), ``converters`` (data <-> modules; fronts ``convert`` and
``checkpoint``), ``cli`` (docs/internals/architecture.md).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from cudnn_rnn import _moved
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
from cudnn_rnn.errors import CudnnRNNError

# Modules that moved (cudnn_rnn.formats.*, cudnn_rnn.files, ...) stay importable by their old
# paths: one table, cudnn_rnn._moved.
_moved.install()

if TYPE_CHECKING:
    from cudnn_rnn import checkpoint, convert, nn, ops
    from cudnn_rnn.cells import (
        BasicRNNCell,
        BidirectionalStack,
        CudnnCompatibleGRUCell,
        CudnnCompatibleLSTMCell,
        LSTMStateTuple,
        MultiRNNCell,
        dynamic_rnn,
        stack_bidirectional_dynamic_rnn,
    )
    from cudnn_rnn.converters.loader import find_rnns, load
    from cudnn_rnn.layers import CudnnGRU, CudnnLSTM, CudnnRNNRelu, CudnnRNNTanh
    from cudnn_rnn.saveable.format_converters import (
        CudnnParamsFormatConverterGRU,
        CudnnParamsFormatConverterLSTM,
        CudnnParamsFormatConverterRelu,
        CudnnParamsFormatConverterTanh,
    )
    from cudnn_rnn.saveable.saveables import (
        CudnnGRUSaveable,
        CudnnLSTMSaveable,
        CudnnOpaqueParamsSaveable,
        CudnnRNNReluSaveable,
        CudnnRNNTanhSaveable,
    )

__version__ = "0.1.0"

# Public name -> module that defines it (None: the name is the module itself).
_LAZY: dict[str, str | None] = {
    "ops": None,
    "checkpoint": None,
    "convert": None,
    "nn": None,
    "load": "converters.loader",
    "find_rnns": "converters.loader",
    **dict.fromkeys(("CudnnLSTM", "CudnnGRU", "CudnnRNNTanh", "CudnnRNNRelu"), "layers"),
    **dict.fromkeys(
        (
            "BasicRNNCell",
            "BidirectionalStack",
            "CudnnCompatibleGRUCell",
            "CudnnCompatibleLSTMCell",
            "LSTMStateTuple",
            "MultiRNNCell",
            "dynamic_rnn",
            "stack_bidirectional_dynamic_rnn",
        ),
        "cells",
    ),
    **dict.fromkeys(
        (
            "CudnnOpaqueParamsSaveable",
            "CudnnLSTMSaveable",
            "CudnnGRUSaveable",
            "CudnnRNNTanhSaveable",
            "CudnnRNNReluSaveable",
        ),
        "saveable.saveables",
    ),
    **dict.fromkeys(
        (
            "CudnnParamsFormatConverterLSTM",
            "CudnnParamsFormatConverterGRU",
            "CudnnParamsFormatConverterTanh",
            "CudnnParamsFormatConverterRelu",
        ),
        "saveable.format_converters",
    ),
}


def cpu_engine() -> str:
    """Which engine runs CPU float32 calls (without projection), and why if not ours.

    ``"native (avx512, 2 threads)"``: our C engine at that instruction set with
    ``torch.get_num_threads()`` threads; ``"torch (<reason>)"``: torch's kernels, because the
    engine was not built, cannot load, or ``CUDNN_RNN_NATIVE=0`` is set. Other dtypes, projection
    and CUDA always run torch's kernels (see :mod:`cudnn_rnn.engines`).

    >>> import cudnn_rnn
    >>> cudnn_rnn.cpu_engine().split()[0] in ("native", "torch")
    True
    """
    from cudnn_rnn.engines import native

    return native.describe()


def __dir__() -> list[str]:
    """The public surface (``__all__``, the lazily loaded names included), nothing else."""
    return sorted(__all__)


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
    "BasicRNNCell",
    "BidirectionalStack",
    "CudnnCompatibleGRUCell",
    "CudnnCompatibleLSTMCell",
    "CudnnGRU",
    "CudnnGRUSaveable",
    "CudnnLSTM",
    "CudnnLSTMSaveable",
    "CudnnOpaqueParamsSaveable",
    "CudnnParamsFormatConverterGRU",
    "CudnnParamsFormatConverterLSTM",
    "CudnnParamsFormatConverterRelu",
    "CudnnParamsFormatConverterTanh",
    "CudnnRNNError",
    "CudnnRNNRelu",
    "CudnnRNNReluSaveable",
    "CudnnRNNTanh",
    "CudnnRNNTanhSaveable",
    "LSTMStateTuple",
    "MultiRNNCell",
    "RNNSpec",
    "__version__",
    "checkpoint",
    "convert",
    "cpu_engine",
    "dynamic_rnn",
    "find_rnns",
    "load",
    "nn",
    "ops",
    "stack_bidirectional_dynamic_rnn",
]
