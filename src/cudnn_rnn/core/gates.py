"""Gate orders of every framework, as data, and the one function that reorders them.

The canonical (cuDNN) gate names are::

    lstm      i f c o     input, forget, new memory (cell candidate), output
    gru       r u h       reset, update, new memory
    rnn_*     h           the single gate

Each framework stacks the per-gate blocks of a weight or bias along one axis in its own order.
Every framework's order is written here with the canonical names, so that converting between any
two of them is ``permute_gates(array, GATE_ORDERS[src][mode], GATE_ORDERS[dst][mode])`` and no
file writes its own index swaps.
"""

from __future__ import annotations

from typing import Any, TypeVar

from cudnn_rnn.core.constants import CUDNN_GRU, CUDNN_LSTM, CUDNN_RNN_RELU, CUDNN_RNN_TANH

#: Gate order of cuDNN's canonical form (and of this library's canonical lists and opaque buffer).
CUDNN_GATES: dict[str, tuple[str, ...]] = {
    CUDNN_LSTM: ("i", "f", "c", "o"),
    CUDNN_GRU: ("r", "u", "h"),
    CUDNN_RNN_TANH: ("h",),
    CUDNN_RNN_RELU: ("h",),
}

#: The order in which each framework stacks gate blocks, in canonical gate names.
#: torch.nn: LSTM i,f,g,o (g = c) and GRU r,z,n (z = u, n = h) -- identical to cuDNN.
#: TF1 canonical (CudnnCompatibleLSTMCell kernel): i, c(j), f, o; the GRU "gates" kernel: r, u.
#: Keras 3: LSTM i,f,c,o; GRU z,r,h. ONNX: LSTM i,o,f,c; GRU z,r,h.
GATE_ORDERS: dict[str, dict[str, tuple[str, ...]]] = {
    "cudnn": CUDNN_GATES,
    "torch": CUDNN_GATES,
    "tf": {
        CUDNN_LSTM: ("i", "c", "f", "o"),
        CUDNN_GRU: ("r", "u"),
        CUDNN_RNN_TANH: ("h",),
        CUDNN_RNN_RELU: ("h",),
    },
    "keras": {
        CUDNN_LSTM: ("i", "f", "c", "o"),
        CUDNN_GRU: ("u", "r", "h"),
        CUDNN_RNN_TANH: ("h",),
        CUDNN_RNN_RELU: ("h",),
    },
    "onnx": {
        CUDNN_LSTM: ("i", "o", "f", "c"),
        CUDNN_GRU: ("u", "r", "h"),
        CUDNN_RNN_TANH: ("h",),
        CUDNN_RNN_RELU: ("h",),
    },
}


A = TypeVar("A")


def permute_gates(
    array: A, src_order: tuple[str, ...], dst_order: tuple[str, ...], axis: int = 0
) -> A:
    """Reorder the gate blocks of ``array`` along ``axis`` from ``src_order`` to ``dst_order``.

    ``array`` is a NumPy array or a torch tensor whose length along ``axis`` is
    ``len(src_order) * block``. Works by integer indexing, so autograd flows through it.

    >>> import numpy as np
    >>> permute_gates(np.arange(4), ("i", "f", "c", "o"), ("i", "c", "f", "o")).tolist()
    [0, 2, 1, 3]
    """
    if sorted(src_order) != sorted(dst_order) or len(set(src_order)) != len(src_order):
        raise ValueError(
            f"permute_gates: gate orders {src_order} and {dst_order} must name the same gates "
            "once each."
        )
    arr: Any = array
    length = int(arr.shape[axis])
    if length % len(src_order):
        raise ValueError(
            f"permute_gates: axis {axis} has length {length}, not a multiple of "
            f"{len(src_order)} gates."
        )
    block = length // len(src_order)
    index = [src_order.index(gate) * block + k for gate in dst_order for k in range(block)]
    key = (slice(None),) * (axis % arr.ndim) + (index,)
    return arr[key]  # type: ignore[no-any-return]
