"""Gate orders as data and permute_gates."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cudnn_rnn.core.gates import CUDNN_GATES, GATE_ORDERS, permute_gates


def test_orders_name_the_same_gates() -> None:
    for framework, orders in GATE_ORDERS.items():
        for mode, order in orders.items():
            assert set(order) <= set(CUDNN_GATES[mode]), (framework, mode)
            assert len(set(order)) == len(order)


def test_permute_blocks_numpy_and_torch() -> None:
    a = np.repeat(np.arange(4), 2)[:, None] * np.ones((1, 3))  # blocks i=0 f=1 c=2 o=3, 2 rows each
    got = permute_gates(a, CUDNN_GATES["lstm"], GATE_ORDERS["onnx"]["lstm"])
    assert got[::2, 0].tolist() == [0, 3, 1, 2]  # i, o, f, c
    t = torch.tensor(a, requires_grad=True)
    tg = permute_gates(t, CUDNN_GATES["lstm"], GATE_ORDERS["tf"]["lstm"])
    assert tg[::2, 0].tolist() == [0, 2, 1, 3]
    tg.sum().backward()  # differentiable
    back = permute_gates(got, GATE_ORDERS["onnx"]["lstm"], CUDNN_GATES["lstm"])
    np.testing.assert_array_equal(back, a)


def test_permute_along_last_axis() -> None:
    a = np.arange(6).reshape(1, 6)
    got = permute_gates(a, ("r", "u", "h"), ("u", "r", "h"), axis=-1)
    assert got.tolist() == [[2, 3, 0, 1, 4, 5]]


def test_permute_errors() -> None:
    with pytest.raises(ValueError, match="must name the same gates once each"):
        permute_gates(np.zeros(4), ("i", "f"), ("i", "o"))
    with pytest.raises(ValueError, match="length 5, not a multiple of 2 gates"):
        permute_gates(np.zeros(5), ("r", "u"), ("u", "r"))
