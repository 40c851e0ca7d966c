"""TF canonical ("platform-independent") checkpoints of an opaque cuDNN parameter buffer.

Two parts, as in ``tf.contrib.cudnn_rnn`` r1.15, one module each:

- :mod:`~cudnn_rnn.saveable.format_converters`: ``CudnnParamsFormatConverter{LSTM,GRU,Tanh,Relu}``
  turn an opaque buffer into the tensors of TF's step-by-step cells (``CudnnCompatibleLSTMCell``,
  ``CudnnCompatibleGRUCell``, ``BasicRNNCell``) and back; the module draws each mode's transform;
- :mod:`~cudnn_rnn.saveable.saveables`: ``Cudnn{LSTM,GRU,RNNTanh,RNNRelu}Saveable`` name those
  tensors as TF does and restore a checkpoint *into* the opaque ``nn.Parameter`` in place.

The saveables use the converters, never the other way round. Neither builds an op object: the
opaque <-> canonical step is the layout table's (:mod:`cudnn_rnn.core.layout`).

>>> import torch
>>> from cudnn_rnn.saveable import CudnnLSTMSaveable
>>> saveable = CudnnLSTMSaveable(torch.nn.Parameter(torch.zeros(56)), 1, 2, 3)
>>> [tuple(s.tensor.shape) for s in saveable.specs]
[(5, 8), (8,)]
"""

from cudnn_rnn.saveable.format_converters import (
    CudnnParamsFormatConverter,
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
    SaveSpec,
)

__all__ = [
    "CudnnGRUSaveable",
    "CudnnLSTMSaveable",
    "CudnnOpaqueParamsSaveable",
    "CudnnParamsFormatConverter",
    "CudnnParamsFormatConverterGRU",
    "CudnnParamsFormatConverterLSTM",
    "CudnnParamsFormatConverterRelu",
    "CudnnParamsFormatConverterTanh",
    "CudnnRNNReluSaveable",
    "CudnnRNNTanhSaveable",
    "SaveSpec",
]
