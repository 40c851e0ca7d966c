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
from cudnn_rnn.nn import _flat, _step_node
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


def _checked_path(cell: Any) -> Any:
    """``cell`` with its plain eager step switched off: every call takes the checked path
    (the operator through :func:`cudnn_rnn.operator.rnn`)."""
    checked = copy.deepcopy(cell)
    checked._eager_step = lambda input, hx: None
    return checked


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_eager_step_gives_the_checked_paths_bits(kind: str, dtype: torch.dtype) -> None:
    """A plain eager step (issue 48) runs the same engine call as the operator's route: the same
    bits, values and every gradient, with and without a state, in grad mode and not."""
    cell, _ = _pair(kind, dtype=dtype)
    checked = _checked_path(cell)
    lstm = kind == "lstm"
    x = torch.randn(3, IN, dtype=dtype, requires_grad=True)
    states = [torch.randn(3, H, dtype=dtype, requires_grad=True) for _ in range(2 if lstm else 1)]
    for hx in (None, tuple(states) if lstm else states[0]):
        with torch.no_grad():
            for u, v in zip(_as_list(cell(x, hx)), _as_list(checked(x, hx))):
                assert torch.equal(u, v)
        ra, rb = _as_list(cell(x, hx)), _as_list(checked(x, hx))
        w = [torch.randn(t.shape, dtype=dtype) for t in ra]
        leaves = [x, *(states if hx is not None else [])]
        loss_a = torch.stack([(t * u).sum() for t, u in zip(ra, w)]).sum()
        loss_b = torch.stack([(t * u).sum() for t, u in zip(rb, w)]).sum()
        ga = torch.autograd.grad(loss_a, leaves + list(cell.parameters()))
        gb = torch.autograd.grad(loss_b, leaves + list(checked.parameters()))
        assert all(torch.equal(u, v) for u, v in zip(ra + list(ga), rb + list(gb)))


def test_the_eager_step_sees_every_write_to_the_weights() -> None:
    """Nothing derived from the weights is kept between steps: a write in place, through
    ``.data`` or a NumPy view, a ``.data`` reassigned and a parameter replaced are all seen."""
    a, b = _pair("lstm")
    x, hx = torch.randn(2, IN), (torch.randn(2, H), torch.randn(2, H))

    def same() -> None:
        with torch.no_grad():
            for u, v in zip(a(x, hx), b(x, hx)):
                torch.testing.assert_close(u, v, atol=2e-6, rtol=2e-6)

    same()
    with torch.no_grad():
        a.weight_hh.mul_(2), b.weight_hh.mul_(2)
    same()
    a.weight_ih.data.add_(1), b.weight_ih.data.add_(1)
    same()
    a.bias_hh.detach().numpy()[:] = 0.5
    b.bias_hh.detach().numpy()[:] = 0.5
    same()
    new = torch.randn(4 * H, H)
    a.weight_hh.data, b.weight_hh.data = new.clone(), new.clone()
    same()
    # The Python step reads the buffer, so the checked path flattened it again; the C++ step
    # node reads the parameters themselves, so the buffer waits for a path that reads it.
    flattened = _flat.aliases(a._flat, list(a.parameters()), a._blocks)
    assert flattened is (_step_node.step_op() is None)
    a.bias_ih, b.bias_ih = tnn.Parameter(torch.randn(4 * H)), None
    b.bias_ih = tnn.Parameter(a.bias_ih.detach().clone())
    same()


@pytest.mark.parametrize("kind", KINDS)
def test_torch_func_grad_takes_the_operator(kind: str) -> None:
    """Under a torch.func transform a call is not plain eager: it takes the checked path (the
    operator), gradients for the input and, through functional_call, for the weights."""
    a, b = _pair(kind, dtype=torch.float64)
    x = torch.randn(3, IN, dtype=torch.float64)

    def first(out: Any) -> Any:
        return out[0] if isinstance(out, tuple) else out

    got = torch.func.grad(lambda v: first(a(v)).sum())(x)
    torch.testing.assert_close(got, torch.func.grad(lambda v: first(b(v)).sum())(x))
    params = {n: p.detach() for n, p in a.named_parameters()}
    got = torch.func.grad(lambda p: first(torch.func.functional_call(a, p, (x,))).sum())(params)
    want = torch.func.grad(lambda p: first(torch.func.functional_call(b, p, (x,))).sum())(params)
    for n in params:
        torch.testing.assert_close(got[n], want[n], atol=1e-10, rtol=1e-10)
