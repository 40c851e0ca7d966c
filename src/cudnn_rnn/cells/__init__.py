"""The step-by-step cells that read ``tf.contrib.cudnn_rnn``'s canonical checkpoints.

TF1 documents how to run a ``CudnnLSTM`` model without cuDNN: save it, then restore the
checkpoint into ``MultiRNNCell([CudnnCompatibleLSTMCell(H) ...])`` run by ``dynamic_rnn`` (or
``stack_bidirectional_dynamic_rnn`` for a bidirectional model). This package re-creates those
cells, the stacks and the two drivers, with TF's variable names, shapes, layouts and initial
values, so a checkpoint written by either side restores into the other. One concern a module:

- :mod:`~cudnn_rnn.cells.compatible`: the cells themselves (``CudnnCompatibleLSTMCell``,
  ``CudnnCompatibleGRUCell``, ``BasicRNNCell``), their equations, variables and state;
- :mod:`~cudnn_rnn.cells.stacks`: ``MultiRNNCell`` and ``BidirectionalStack``, which own cells
  and give them their full checkpoint names (built by :mod:`cudnn_rnn.core.tf_names`);
- :mod:`~cudnn_rnn.cells.drivers`: ``dynamic_rnn`` and ``stack_bidirectional_dynamic_rnn``,
  which run the cells step by step or, where the math allows, on torch's fused kernel.

Imports point one way: ``compatible`` <- ``drivers`` <- ``stacks`` (the drivers take any cell,
a ``MultiRNNCell`` included, through the base class they share, so they need no stack).

>>> import torch
>>> from cudnn_rnn.cells import CudnnCompatibleLSTMCell, MultiRNNCell, dynamic_rnn
>>> stack = MultiRNNCell([CudnnCompatibleLSTMCell(4)], scope="m")
>>> out, (state,) = dynamic_rnn(stack, torch.ones(2, 5, 3))  # [B, T, I]
>>> tuple(out.shape), next(iter(stack.checkpoint_shapes()))
((2, 5, 4), 'm/rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/kernel')
"""

from cudnn_rnn.cells.compatible import (
    BasicRNNCell,
    CudnnCompatibleGRUCell,
    CudnnCompatibleLSTMCell,
    LSTMStateTuple,
)
from cudnn_rnn.cells.drivers import dynamic_rnn, stack_bidirectional_dynamic_rnn
from cudnn_rnn.cells.stacks import BidirectionalStack, MultiRNNCell

__all__ = [
    "BasicRNNCell",
    "BidirectionalStack",
    "CudnnCompatibleGRUCell",
    "CudnnCompatibleLSTMCell",
    "LSTMStateTuple",
    "MultiRNNCell",
    "dynamic_rnn",
    "stack_bidirectional_dynamic_rnn",
]
