"""cudnn_rnn.nn's cells against torch.nn's, the oracle: values and every gradient (float64,
1e-10), batched and unbatched, hx omitted or given, bias or not, initialisation, names, errors,
the one buffer, float32 on the engines."""

from __future__ import annotations

import copy
import pickle
import re
from typing import Any

import pytest
import torch
from torch import nn as tnn

import cudnn_rnn.nn as cnn
from cudnn_rnn.nn import _flat
from tests.nn.pairs import IN, H, pair

KINDS = {
    "lstm": (cnn.LSTMCell, tnn.LSTMCell, {}),
    "gru": (cnn.GRUCell, tnn.GRUCell, {}),
    "rnn-tanh": (cnn.RNNCell, tnn.RNNCell, {}),
    "rnn-relu": (cnn.RNNCell, tnn.RNNCell, {"nonlinearity": "relu"}),
}


def _pair(kind: str, seed: int = 0, **options: Any) -> tuple[Any, Any]:
    return pair(KINDS, kind, seed, **options)


def _as_list(out: Any) -> list[torch.Tensor]:
    return list(out) if isinstance(out, tuple) else [out]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_values_and_gradients_equal_torch_nn(kind: str, bias: bool, dtype: torch.dtype) -> None:
    a, b = _pair(kind, bias=bias, dtype=dtype, device="cpu")  # (device given: no draw twice)
    tol = 1e-10 if dtype == torch.float64 else 2e-6
    assert [n for n, _ in a.named_parameters()] == [n for n, _ in b.named_parameters()]
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert repr(a) == repr(b) and list(a.state_dict()) == list(b.state_dict())
    assert (a.bias_ih is None) == (not bias)
    lstm = kind == "lstm"
    for batched, given in ((True, False), (True, True), (False, True), (False, False)):
        shape = (3, IN) if batched else (IN,)
        x = torch.randn(shape, dtype=dtype, requires_grad=True)
        hshape = (3, H) if batched else (H,)
        states = [
            torch.randn(hshape, dtype=dtype, requires_grad=True) for _ in range(2 if lstm else 1)
        ]
        hx = (tuple(states) if lstm else states[0]) if given else None
        ra, rb = _as_list(a(x, hx)), _as_list(b(x, hx))
        for u, v in zip(ra, rb):
            torch.testing.assert_close(u, v, atol=tol, rtol=tol)
        w = [torch.randn(t.shape, dtype=dtype) for t in ra]
        leaves = [x, *(states if given else []), *a.parameters()]
        leaves_b = [x, *(states if given else []), *b.parameters()]
        ga = torch.autograd.grad(sum((t * u).sum() for t, u in zip(ra, w)), leaves)
        gb = torch.autograd.grad(sum((t * u).sum() for t, u in zip(rb, w)), leaves_b)
        for g, h in zip(ga, gb):
            torch.testing.assert_close(g, h, atol=tol, rtol=tol)


def test_a_stepped_loop_trains_like_torch_nn() -> None:
    """An LSTMCell stepped over a sequence in Python, trained a few steps with SGD: the same
    parameters as torch.nn's after each step (float64)."""
    a, b = _pair("lstm", dtype=torch.float64)
    oa, ob = torch.optim.SGD(a.parameters(), lr=0.1), torch.optim.SGD(b.parameters(), lr=0.1)
    xs = torch.randn(7, 3, IN, dtype=torch.float64)
    for _ in range(3):
        for cell, opt in ((a, oa), (b, ob)):
            opt.zero_grad()
            h = c = torch.zeros(3, H, dtype=torch.float64)
            loss = torch.zeros((), dtype=torch.float64)
            for x in xs:
                h, c = cell(x, (h, c))
                loss = loss + h.pow(2).sum()
            loss.backward()
            opt.step()
        for p, q in zip(a.parameters(), b.parameters()):
            torch.testing.assert_close(p, q, atol=1e-10, rtol=1e-10)
    assert _flat.aliases(a._flat, list(a.parameters()), a._blocks)


def test_copies_and_conversions_keep_one_buffer() -> None:
    a, _ = _pair("gru")
    x = torch.randn(2, IN)
    for other in (copy.deepcopy(a), pickle.loads(pickle.dumps(a)), copy.deepcopy(a).double()):
        assert _flat.aliases(other._flat, list(other.parameters()), other._blocks)
        torch.testing.assert_close(other(x.to(other.weight_ih.dtype)).float(), a(x))


def test_errors_are_torch_nns() -> None:
    for kind in KINDS:
        a, b = _pair(kind)
        lstm = kind == "lstm"
        calls: list[tuple[Any, Any]] = [
            (torch.zeros(2, 3, IN), None),
            (torch.zeros(2, IN + 1), None),
            (
                torch.zeros(2, IN),
                (torch.zeros(3, H), torch.zeros(2, H)) if lstm else torch.zeros(3, H),
            ),
            (
                torch.zeros(2, IN),
                (torch.zeros(2, H), torch.zeros(2, H + 1)) if lstm else torch.zeros(2, H + 1),
            ),
            (
                torch.zeros(2, IN),
                (torch.zeros(2, 3, H), torch.zeros(2, H)) if lstm else torch.zeros(2, 3, H),
            ),
        ]
        for x, hx in calls:
            with pytest.raises(Exception) as theirs:
                b(x, hx)
            with pytest.raises(type(theirs.value), match="^" + re.escape(str(theirs.value)) + "$"):
                a(x, hx)
    a, b = _pair("rnn-tanh")
    a.nonlinearity = b.nonlinearity = "gelu"
    with pytest.raises(RuntimeError, match="Unknown nonlinearity: gelu"):
        b(torch.zeros(2, IN))
    with pytest.raises(RuntimeError, match="Unknown nonlinearity: gelu"):
        a(torch.zeros(2, IN))
    with pytest.raises(RuntimeError, match=r"LSTMCell: input is torch.float64 but the weights"):
        cnn.LSTMCell(IN, H)(torch.zeros(2, IN, dtype=torch.float64))


def test_vmap_over_inputs() -> None:
    a, b = _pair("gru", dtype=torch.float64)
    xs = torch.randn(4, 3, IN, dtype=torch.float64)
    torch.testing.assert_close(torch.func.vmap(a)(xs), torch.stack([b(x) for x in xs]))
