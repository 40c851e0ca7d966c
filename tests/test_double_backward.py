"""Double backward: the gradient of the fused RNN is itself differentiable (issue 37, item 3).

``torch.autograd.gradgradcheck`` in float64 over every mode, lengths, directions, layers,
skip_input, projection and dropout, through the op classes and the registered operator;
torch.nn (a real peer) for a gradient-penalty step through the layer classes; the engines'
first-order values kept; ``torch.func``'s nested transforms; and the paths where a double
backward cannot be made, which raise rather than give a silent zero.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from cudnn_rnn import convert, engines
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.engines import cudnn
from tests.support.cudnn_standin import StandIn
from tests.support.helpers import Case, make_case, make_op

F64 = torch.float64

# mode, layers, direction, input_mode, num_proj, varlen, time_major, dropout
CASES = [
    ("lstm", 2, "bidirectional", "linear_input", None, True, True, 0.5),
    ("lstm", 2, "unidirectional", "linear_input", 1, False, False, 0.0),
    ("lstm", 1, "bidirectional", "skip_input", 1, True, True, 0.0),
    ("gru", 2, "bidirectional", "skip_input", None, True, False, 0.0),
    ("gru", 3, "unidirectional", "linear_input", None, False, True, 0.5),
    ("rnn_tanh", 2, "bidirectional", "auto_select", None, True, True, 0.3),
    ("rnn_relu", 2, "unidirectional", "linear_input", None, True, True, 0.3),
    ("rnn_relu", 1, "bidirectional", "skip_input", None, False, False, 0.0),
]


def _spec(
    mode: str, layers: int, direction: str, input_mode: str, proj: int | None, dropout: float
) -> RNNSpec:
    size = 2 if input_mode != "linear_input" else 1  # skip_input needs input_size == num_units
    return RNNSpec(mode, layers, 2, size, input_mode, direction, proj, dropout)


def _leaves(case: Case, dtype: torch.dtype = F64) -> list[torch.Tensor]:
    """The canonical params buffer, x, h0 (and c0) of ``case``, each requiring grad."""
    params = make_op(case.spec, dtype).canonical_to_params(case.weights, case.biases)
    given = (case.x, case.h0, case.c0)
    tensors = [torch.as_tensor(a, dtype=dtype) for a in given if a is not None]
    return [t.detach().requires_grad_() for t in (params, *tensors)]


def _ops_call(case: Case, dtype: torch.dtype = F64) -> Callable[..., tuple[torch.Tensor, ...]]:
    """The op class run on ``(params, x, h0[, c0])`` in training, with the same dropout masks
    on every call (a fresh op of the same seed each time: its step counter starts at 0)."""

    def run(params: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        op = make_op(case.spec, dtype, seed=1)
        lengths, time_major = case.lengths, case.time_major
        out = op(
            *tensors, params, is_training=True, sequence_lengths=lengths, time_major=time_major
        )
        return tuple(out)

    return run


@pytest.mark.parametrize("config", CASES, ids=lambda c: "-".join(map(str, c)))
def test_gradgradcheck(config: tuple[Any, ...]) -> None:
    mode, layers, direction, input_mode, proj, varlen, time_major, dropout = config
    spec = _spec(mode, layers, direction, input_mode, proj, dropout)
    case = make_case(spec, 3, 2, seed=5, varlen=varlen, time_major=time_major)
    fn = _ops_call(case)
    assert torch.autograd.gradgradcheck(fn, tuple(_leaves(case)), atol=1e-6, fast_mode=True)


def test_gradgradcheck_full_jacobian() -> None:
    """One case entry by entry (the grid above checks random projections of the Jacobians)."""
    spec = _spec("lstm", 2, "unidirectional", "linear_input", 1, 0.5)
    case = make_case(spec, 2, 2, seed=3, varlen=True)
    assert torch.autograd.gradgradcheck(_ops_call(case), tuple(_leaves(case)), atol=1e-6)


def test_gradgradcheck_of_the_registered_operator() -> None:
    """``torch.ops.cudnn_rnn.rnn`` called directly: its torch.library autograd registration."""
    spec = _spec("gru", 2, "bidirectional", "linear_input", None, 0.5)
    case = make_case(spec, 3, 2, seed=7, varlen=True)
    lengths = torch.as_tensor(case.lengths)

    def fn(params: torch.Tensor, x: torch.Tensor, h0: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = torch.ops.cudnn_rnn.rnn(
            params, x, h0, None, lengths, None, "gru", 2, 2, 1, 0, False, True, 0.5, 11,
            True, False,
        )  # fmt: skip
        return out[0], out[1]

    assert torch.autograd.gradgradcheck(fn, tuple(_leaves(case)), atol=1e-6, fast_mode=True)


# -- torch.nn as the peer of a gradient-penalty step ---------------------------------------------

PEERS = [
    (nn.LSTM, {"num_layers": 2, "bidirectional": True}),
    (nn.LSTM, {"num_layers": 2, "proj_size": 2}),
    (nn.GRU, {"num_layers": 2, "bidirectional": True}),
    (nn.RNN, {"num_layers": 2, "nonlinearity": "tanh"}),
    (nn.RNN, {"num_layers": 1, "nonlinearity": "relu", "bidirectional": True}),
]


def _penalty_step(
    run: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, params: list[torch.Tensor]
) -> tuple[torch.Tensor, ...]:
    """d(loss + |d loss / d x|^2) / d params: a gradient-penalty training step."""
    xr = x.detach().requires_grad_()
    out = run(xr)
    loss = (out * torch.linspace(-1, 2, out.numel(), dtype=out.dtype).view(out.shape)).sum()
    loss = loss + (out * out).sum()
    (gx,) = torch.autograd.grad(loss, xr, create_graph=True)
    return torch.autograd.grad(loss + (gx * gx).sum(), params)


@pytest.mark.parametrize("varlen", [False, True], ids=["full", "varlen"])
@pytest.mark.parametrize("cls,kwargs", PEERS, ids=lambda p: getattr(p, "__name__", str(p)))
def test_gradient_penalty_step_matches_torch_nn(
    cls: type[nn.RNNBase], kwargs: dict[str, Any], varlen: bool
) -> None:
    torch.manual_seed(0)
    peer = cls(2, 3, dtype=F64, **kwargs)
    ours = convert.from_torch(peer)  # our layer class, the same weights
    steps, batch = 4, 3
    x = torch.randn(steps, batch, 2, dtype=F64)
    lengths = torch.tensor([4, 2, 3]) if varlen else None

    def run_peer(xr: torch.Tensor) -> torch.Tensor:
        if lengths is None:
            return peer(xr)[0]  # type: ignore[no-any-return]
        packed = pack_padded_sequence(xr, lengths, enforce_sorted=False)
        return pad_packed_sequence(peer(packed)[0], total_length=steps)[0]

    want = _penalty_step(run_peer, x, list(peer.parameters()))
    run_ours = lambda xr: ours(xr, sequence_lengths=lengths)[0]  # noqa: E731
    (got,) = _penalty_step(run_ours, x, [ours.opaque_kernel])
    # Our buffer's gradient in torch's names, by the converter: a layer holding it as weights.
    holder = copy.deepcopy(ours)
    with torch.no_grad():
        holder.opaque_kernel.copy_(got)
    mapped = dict(convert.to_torch(holder).named_parameters())
    for (name, _), w in zip(peer.named_parameters(), want):
        torch.testing.assert_close(mapped[name], w, atol=1e-12, rtol=1e-10, msg=name)


# -- the engines' first-order values, dropout masks, torch.func ----------------------------------


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_relu"])
def test_first_order_values_and_dropout_masks_are_the_engines(mode: str) -> None:
    """float32 runs the CPU's fast engines forward; the gradient taken with create_graph=True
    equals theirs (the same dropout masks), and its own gradient the float64 one."""
    spec = _spec(mode, 2, "bidirectional", "linear_input", None, 0.5)
    case = make_case(spec, 5, 3, seed=9, varlen=True)

    def grads(dtype: torch.dtype, create_graph: bool) -> tuple[list[Any], list[Any]]:
        leaves = _leaves(case, dtype)
        out = _ops_call(case, dtype)(*leaves)
        loss = sum((o * o).sum() for o in out)
        first = torch.autograd.grad(loss, leaves, create_graph=create_graph)
        if not create_graph:
            return [g.double() for g in first], []
        second = torch.autograd.grad(sum((g * g).sum() for g in first), leaves)
        return [g.detach().double() for g in first], [g.double() for g in second]

    fast, _ = grads(torch.float32, False)
    first, second = grads(torch.float32, True)
    _, want = grads(F64, True)
    for f, g in zip(fast, first):
        torch.testing.assert_close(g, f, atol=1e-5, rtol=1e-5)
    for g, w in zip(second, want):
        assert bool(w.abs().max() > 0)
        torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)


def _func_case() -> tuple[Any, dict[str, torch.Tensor], Callable[..., torch.Tensor]]:
    layer = convert.from_torch(nn.GRU(2, 3, num_layers=2, bidirectional=True, dtype=F64))
    params = {k: v.detach() for k, v in layer.named_parameters()}

    def loss(p: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        out, _ = torch.func.functional_call(layer, p, (x,))
        return (out * out).sum()

    return layer, params, loss


def test_torch_func_nested_grad_equals_autograd() -> None:
    layer, params, loss = _func_case()
    xs = torch.randn(2, 4, 1, 2, dtype=F64)

    def penalty(p: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        return (torch.func.grad(loss, argnums=1)(p, x) ** 2).sum()

    got = torch.func.vmap(torch.func.grad(penalty), in_dims=(None, 0))(params, xs)
    for i in range(2):
        xr = xs[i].clone().requires_grad_()
        out, _ = layer(xr)
        (gx,) = torch.autograd.grad((out * out).sum(), xr, create_graph=True)
        (want,) = torch.autograd.grad((gx * gx).sum(), layer.opaque_kernel)
        torch.testing.assert_close(got["opaque_kernel"][i], want, atol=1e-12, rtol=1e-10)


def test_plain_torch_func_grad_keeps_the_engine_backward() -> None:
    """torch.func.grad runs every backward in grad mode; with nothing around it to take a
    higher derivative, the engine's backward runs: the bits of a plain backward."""
    layer = convert.from_torch(nn.LSTM(3, 4, num_layers=2))
    params = {k: v.detach() for k, v in layer.named_parameters()}
    x = torch.randn(5, 2, 3)

    def loss(p: dict[str, torch.Tensor]) -> torch.Tensor:
        out, _ = torch.func.functional_call(layer, p, (x,))
        return (out * out).sum()

    got = torch.func.grad(loss)(params)["opaque_kernel"]
    out, _ = layer(x)
    (want,) = torch.autograd.grad((out * out).sum(), layer.opaque_kernel)
    assert torch.equal(got, want)


def test_autograd_grad_inside_torch_func_raises_when_differentiated_again() -> None:
    _layer, params, loss = _func_case()
    x = torch.randn(4, 1, 2, dtype=F64)

    def penalty(p: dict[str, torch.Tensor]) -> torch.Tensor:
        (g,) = torch.autograd.grad(loss(p, x), p["opaque_kernel"], create_graph=True)
        return (g * g).sum()

    with pytest.raises(RuntimeError, match=r"inside a torch\.func transform .* torch\.func\.grad"):
        torch.func.grad(penalty)(params)


def test_an_empty_batch_has_a_zero_gradient_with_create_graph() -> None:
    spec = _spec("gru", 2, "bidirectional", "linear_input", None, 0.5)
    case = make_case(spec, 3, 1, seed=2)
    params, x, h0 = _leaves(case)
    x0, h00 = (t[:, :0].detach().requires_grad_() for t in (x, h0))
    out = _ops_call(case)(params, x0, h00)
    grads = torch.autograd.grad(out[0].sum() + out[1].sum(), [params, x0, h00], create_graph=True)
    assert [tuple(g.shape) for g in grads] == [tuple(params.shape), (3, 0, 1), (4, 0, 2)]
    assert not bool(grads[0].any())


# -- the cudnn engine, through the CPU stand-in of aten's cuDNN entry points ---------------------


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> StandIn:
    """The rule table's cudnn engine on the CPU (as in tests/engines/test_cudnn_engine.py)."""
    monkeypatch.setattr(cudnn, "_PLANS", {})
    monkeypatch.setattr(cudnn, "ATEN", StandIn())
    return cudnn.ATEN  # type: ignore[return-value]


def test_cudnn_engine_double_backward_without_dropout(standin: StandIn) -> None:
    spec = _spec("lstm", 2, "bidirectional", "linear_input", None, 0.0)
    case = make_case(spec, 3, 2, seed=4, varlen=True)
    assert torch.autograd.gradgradcheck(_ops_call(case), tuple(_leaves(case)), fast_mode=True)
    assert any(name == "rnn" and info["train"] for name, info in standin.calls)


def test_cudnn_dropout_masks_refuse_a_double_backward(standin: StandIn) -> None:
    """cuDNN draws its own masks: the first-order gradient still comes (with create_graph=True
    as without), differentiating it raises and says how to fix it."""
    spec = _spec("gru", 2, "unidirectional", "linear_input", None, 0.5)
    case = make_case(spec, 3, 2, seed=4)
    grads = []
    for create_graph in (False, True):
        leaves = _leaves(case)
        y, _hy = _ops_call(case)(*leaves)
        grads.append(torch.autograd.grad((y * y).sum(), leaves, create_graph=create_graph))
    assert any(name == "dropout_state" and info["p"] > 0 for name, info in standin.calls)
    for plain, graphed in zip(*grads):
        assert torch.equal(plain, graphed.detach())
    penalty = sum((g * g).sum() for g in grads[1])
    with pytest.raises(RuntimeError, match=r"cuDNN draws its own dropout masks.*dropout=0"):
        torch.autograd.grad(penalty, leaves)


# -- CUDA ----------------------------------------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_cuda_gradient_penalty_equals_the_cpu(mode: str) -> None:
    spec = _spec(mode, 2, "bidirectional", "linear_input", None, 0.0)
    case = make_case(spec, 4, 3, seed=6, varlen=True)
    results = []
    for device in ("cpu", "cuda"):
        leaves = [t.detach().to(device).requires_grad_() for t in _leaves(case)]
        out = _ops_call(case)(*leaves)
        first = torch.autograd.grad(sum((o * o).sum() for o in out), leaves, create_graph=True)
        second = torch.autograd.grad(sum((g * g).sum() for g in first), leaves)
        results.append([np.asarray(g.detach().cpu()) for g in (*first, *second)])
    for cpu, gpu in zip(*results):
        np.testing.assert_allclose(gpu, cpu, atol=1e-9, rtol=1e-9)


@pytest.mark.cuda
def test_cuda_dropout_refuses_a_double_backward() -> None:
    spec = _spec("lstm", 2, "unidirectional", "linear_input", None, 0.5)
    cuda = torch.device("cuda")
    if engines.select(spec, cuda, F64, True, False, dropout=0.5) != engines.CUDNN:
        pytest.skip("cuDNN does not run this call here")
    case = make_case(spec, 3, 2, seed=4)
    leaves = [t.detach().to(cuda).requires_grad_() for t in _leaves(case)]
    out = _ops_call(case)(*leaves)
    first = torch.autograd.grad((out[0] * out[0]).sum(), leaves, create_graph=True)
    with pytest.raises(RuntimeError, match=r"cuDNN draws its own dropout masks"):
        torch.autograd.grad(sum((g * g).sum() for g in first), leaves)
