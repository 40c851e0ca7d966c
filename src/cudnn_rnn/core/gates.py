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

from cudnn_rnn.core.modes import MODES

#: Gate order of cuDNN's canonical form (and of this library's canonical lists and opaque buffer).
CUDNN_GATES: dict[str, tuple[str, ...]] = {name: m.gates for name, m in MODES.items()}

#: Framework -> mode -> the order in which it stacks gate blocks, in canonical gate names
#: (:attr:`cudnn_rnn.core.modes.Mode.gate_orders`, turned around).
GATE_ORDERS: dict[str, dict[str, tuple[str, ...]]] = {
    framework: {name: m.gate_orders[framework] for name, m in MODES.items()}
    for framework in MODES["lstm"].gate_orders
}


A = TypeVar("A")


def permute_gates(
    array: A,
    src_order: tuple[str, ...],
    dst_order: tuple[str, ...],
    axis: int = 0,
    *,
    length: int | None = None,
) -> A:
    """Reorder the gate blocks of ``array`` along ``axis`` from ``src_order`` to ``dst_order``.

    ``array`` is a NumPy array or a torch tensor whose length along ``axis`` is
    ``len(src_order) * block``. Works by integer indexing, so autograd flows through it.
    ``length`` is that length where the caller knows it (the layout's): under
    ``torch.jit.trace`` a tensor's sizes are tensors, and reading one as an int would fix it
    in the trace (a ``TracerWarning``), though the weights' sizes are constants anyway.

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
    length = int(arr.shape[axis]) if length is None else length
    if length % len(src_order):
        raise ValueError(
            f"permute_gates: axis {axis} has length {length}, not a multiple of "
            f"{len(src_order)} gates."
        )
    block = length // len(src_order)
    index = [src_order.index(gate) * block + k for gate in dst_order for k in range(block)]
    key = (slice(None),) * (axis % arr.ndim) + (index,)
    return arr[key]  # type: ignore[no-any-return]
