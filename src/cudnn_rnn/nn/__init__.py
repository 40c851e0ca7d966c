"""The torch.nn face: drop-in ``LSTM``, ``GRU``, ``RNN`` and cells on our operator and engines.

``import cudnn_rnn.nn as nn`` where ``torch.nn``'s RNNs were, or :func:`replace_rnns` on a
model that has them: the same constructor, parameters, ``state_dict`` and results as torch.nn
(not subclasses of torch.nn's classes: dynamo refuses to trace those; :func:`is_rnn` tells
torch.nn's and ours), run by the one operator ``cudnn_rnn::rnn`` (the native CPU
engine, cuDNN on CUDA), which compiles, runs under ``vmap`` and exports to ONNX.
"""

from cudnn_rnn.nn.cells import GRUCell, LSTMCell, RNNCell
from cudnn_rnn.nn.modules import GRU, LSTM, RNN
from cudnn_rnn.nn.surgery import is_rnn, replace_rnns, restore_rnns

__all__ = [
    "GRU",
    "LSTM",
    "RNN",
    "GRUCell",
    "LSTMCell",
    "RNNCell",
    "is_rnn",
    "replace_rnns",
    "restore_rnns",
]
