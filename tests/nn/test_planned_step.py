"""The cells' planned native step (issue 48: engines/native_step.py, operator/planned_step.py).

The planned step must be the path a float32 CPU cell takes, and it must give the bits of the
checked path (the operator on a sequence of one step), values and every gradient, over a loop of
steps, at sizes where the engine's products split over threads and where they do not, on any
thread count and at every instruction set (forced). Around it: a second backward through a step
(retain_graph), a double backward, a weight edited before the backward (torch's error, as
torch.nn's cells raise), the plan made again when the batch, the buffer or the nonlinearity
changes, and copies and pickles of a cell that has stepped.

Every test runs on both of the step's paths: the operator with its autograd node in C++
(``cudnn_rnn_step::step``, nn/_step_node.py) where it is built, and the Python
``torch.autograd.Function`` (``CUDNN_RNN_STEP_NODE=0``).
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest
import torch
from torch import nn as tnn

import cudnn_rnn.nn as cnn
from cudnn_rnn.engines import native
from cudnn_rnn.engines.native_step import StepPlan
from cudnn_rnn.nn import _step_node
from tests.support.isa import isa_params, threads_kept

needs_engine = pytest.mark.skipif(not native.level_names(), reason="the native engine is not built")
pytestmark = needs_engine

#: The name of the autograd node each path's step makes.
NODES = {"node": "CppFunction", "python": "_PlannedStepBackward"}


@pytest.fixture(autouse=True, params=list(NODES))
def step_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The step's path for the test: the C++ node (skipped, with why, where it is not built:
    tests/nn/test_step_node.py fails where it should have been) or the Python Function."""
    monkeypatch.setenv(_step_node.ENV, "1" if request.param == "node" else "0")
    _step_node._reload()
    if request.param == "node" and _step_node.step_op() is None:
        pytest.skip(f"the step node is not loaded: {_step_node.describe()}")
    yield request.param
    _step_node._reload()


def test_the_step_takes_the_path_under_test(step_path: str) -> None:
    for kind in CELLS:
        cell, _ = _cells(kind, 6, 8)
        xs, state = _inputs(kind, 2, 6, 8)
        out = cell(xs[0], state)
        assert type((out[0] if kind == "lstm" else out).grad_fn).__name__ == NODES[step_path]


CELLS = {
    "lstm": (cnn.LSTMCell, tnn.LSTMCell, {}),
    "gru": (cnn.GRUCell, tnn.GRUCell, {}),
    "rnn-tanh": (cnn.RNNCell, tnn.RNNCell, {}),
    "rnn-relu": (cnn.RNNCell, tnn.RNNCell, {"nonlinearity": "relu"}),
}
#: (batch, input, hidden): one thread's product and a step large enough for the team; the last
#: one's LSTM weight gradients (640 rows, a sum over 136) are packed products (engine.c's
#: gemm_direct rule), the others' are read where they are
SIZES = [(1, 7, 5), (3, 20, 33), (1, 128, 128), (4, 96, 160), (136, 24, 160)]


def _cells(kind: str, inputs: int, units: int, bias: bool = True) -> tuple[Any, Any]:
    ours, _, extra = CELLS[kind]
    torch.manual_seed(0)
    cell = ours(inputs, units, bias=bias, **extra)
    checked = copy.deepcopy(cell)
    checked._eager_step = lambda input, hx: None  # every call takes the operator's route
    return cell, checked


def _loop(cell: Any, xs: torch.Tensor, state: Any, lstm: bool) -> list[torch.Tensor]:
    """Outputs and every gradient (inputs, initial state, parameters) of a loop of steps."""
    outs = []
    loss = torch.zeros(())
    for x in xs:
        state = cell(x, state)
        h = state[0] if lstm else state
        outs.append(h)
        loss = loss + (h * torch.linspace(-1, 1, h.shape[-1])).sum()
    if lstm:
        loss = loss + state[1].square().sum()
    grads = torch.autograd.grad(loss, [xs, *list(cell.parameters())])
    return [o.detach() for o in outs] + list(grads)


def _leaves(state: Any, lstm: bool) -> list[torch.Tensor]:
    return list(state) if lstm else [state]


def _inputs(kind: str, batch: int, inputs: int, units: int, seed: int = 1) -> tuple[Any, Any]:
    g = torch.Generator().manual_seed(seed)
    xs = torch.randn(4, batch, inputs, generator=g).requires_grad_()
    h = torch.randn(batch, units, generator=g)
    state = (h, torch.randn(batch, units, generator=g)) if kind == "lstm" else h
    return xs, state


@pytest.mark.parametrize("kind", CELLS)
@pytest.mark.parametrize("size", SIZES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("bias", [True, False])
def test_the_planned_step_gives_the_operators_bits(kind: str, size: tuple, bias: bool) -> None:
    batch, inputs, units = size
    cell, checked = _cells(kind, inputs, units, bias)
    xs, state = _inputs(kind, batch, inputs, units)
    lstm = kind == "lstm"
    got = _loop(cell, xs, state, lstm)
    assert isinstance(cell._plan[3], StepPlan)  # the planned path ran
    want = _loop(checked, xs, state, lstm)
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        assert torch.equal(a, b), (kind, size, k, (a - b).abs().max())
    with torch.no_grad():
        for a, b in zip(_leaves(cell(xs[0], state), lstm), _leaves(checked(xs[0], state), lstm)):
            assert torch.equal(a, b)


@pytest.mark.parametrize("level", isa_params())
def test_the_planned_step_has_the_same_bits_on_every_thread_count(level: str) -> None:
    with threads_kept():
        with native.use_level(level):
            for kind in CELLS:
                for batch, inputs, units in SIZES[1:]:
                    cell, _ = _cells(kind, inputs, units)
                    xs, state = _inputs(kind, batch, inputs, units)
                    torch.set_num_threads(1)
                    want = _loop(cell, xs, state, kind == "lstm")
                    for n in (2, 3):
                        torch.set_num_threads(n)
                        got = _loop(cell, xs, state, kind == "lstm")
                        for k, (a, b) in enumerate(zip(want, got, strict=True)):
                            assert torch.equal(a, b), (level, kind, units, n, k)


@pytest.mark.skipif(
    not {"avx512", "avx2"} <= set(native.level_names()), reason="needs AVX-512 and AVX2"
)
def test_the_planned_step_gives_avx2s_bits_at_avx512() -> None:
    for kind in CELLS:
        cell, _ = _cells(kind, 96, 160)
        xs, state = _inputs(kind, 4, 96, 160)
        with native.use_level("avx2"):
            want = _loop(cell, xs, state, kind == "lstm")
        with native.use_level("avx512"):
            got = _loop(cell, xs, state, kind == "lstm")
        assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True)), kind


#: Parameters frozen (requires_grad False), and whether the input asks for its gradient: the
#: backward's products are then a subset (the biases' sums alone, the weights' alone, no dx).
FROZEN = [
    (("weight_ih", "weight_hh"), True),
    (("bias_ih", "bias_hh"), True),
    (("weight_hh", "bias_ih"), False),
    ((), False),
]


@pytest.mark.parametrize("kind", CELLS)
@pytest.mark.parametrize(("frozen", "input_grad"), FROZEN, ids=str)
def test_the_gradients_asked_for_are_the_operators_bits(
    kind: str, frozen: tuple, input_grad: bool
) -> None:
    lstm, results = kind == "lstm", []
    cells = _cells(kind, 20, 33)
    for cell in cells:
        for name in frozen:
            getattr(cell, name).requires_grad_(False)
        xs, state = _inputs(kind, 3, 20, 33)
        xs.requires_grad_(input_grad)
        loss = torch.zeros(())
        for x in xs:
            state = cell(x, state)
            loss = loss + (state[0] if lstm else state).square().sum()
        wrt = ([xs] if input_grad else []) + [p for p in cell.parameters() if p.requires_grad]
        results.append(torch.autograd.grad(loss, wrt))
    assert isinstance(cells[0]._plan[3], StepPlan)  # the planned path ran
    for k, (a, b) in enumerate(zip(*results, strict=True)):
        assert torch.equal(a, b), (kind, frozen, k, (a - b).abs().max())


@pytest.mark.parametrize("kind", CELLS)
def test_a_second_backward_through_a_step_gives_the_same_gradients(kind: str) -> None:
    cell, _ = _cells(kind, 6, 8)
    xs, state = _inputs(kind, 2, 6, 8)
    out = cell(xs[0], state)
    h = out[0] if kind == "lstm" else out
    loss = h.square().sum()
    first = torch.autograd.grad(loss, [xs, *cell.parameters()], retain_graph=True)
    second = torch.autograd.grad(loss, [xs, *cell.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))


@pytest.mark.parametrize("kind", CELLS)
def test_a_double_backward_through_a_step_is_the_operators(kind: str) -> None:
    """create_graph=True: the gradient is differentiable (a gradient penalty's second
    derivative), equal to the checked path's to rounding."""
    results = []
    for which in range(2):
        cell = _cells(kind, 6, 8)[which]
        xs, state = _inputs(kind, 2, 6, 8)
        out = cell(xs[0], state)
        h = out[0] if kind == "lstm" else out
        (gx,) = torch.autograd.grad(h.tanh().sum(), xs, create_graph=True)
        penalty = gx.square().sum()
        results.append([gx, *torch.autograd.grad(penalty, [xs, *cell.parameters()])])
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_a_weight_edited_before_the_backward_is_torchs_error(kind: str) -> None:
    """As torch.nn's cells: a parameter the backward reads (here for the input's gradient),
    changed in place before the backward, makes the backward raise torch's error (no gradient
    of weights that were not used). (Where torch.nn's backward would not read it, ours still
    refuses: the step saves every parameter, as the operator does.)"""
    for cls in (CELLS[kind][0], CELLS[kind][1]):
        cell = cls(6, 8)
        out = cell(torch.randn(2, 6, requires_grad=True), None)
        h = out[0] if kind == "lstm" else out
        with torch.no_grad():
            cell.weight_ih.add_(1.0)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            h.sum().backward()


def test_the_plan_follows_the_batch_the_buffer_and_the_nonlinearity() -> None:
    torch.manual_seed(3)
    ours, theirs = cnn.RNNCell(6, 8), tnn.RNNCell(6, 8)
    theirs.load_state_dict(ours.state_dict())
    for batch in (2, 5, 2):
        x = torch.randn(batch, 6)
        torch.testing.assert_close(ours(x), theirs(x), atol=1e-6, rtol=1e-6)
        assert ours._plan[1] == batch
    plan = ours._plan[3]
    ours.nonlinearity = theirs.nonlinearity = "relu"
    torch.testing.assert_close(ours(x), theirs(x), atol=1e-6, rtol=1e-6)
    assert ours._plan[3] is not plan  # the mode is the plan's
    new = torch.randn(8, 8)
    ours.weight_hh.data, theirs.weight_hh.data = new.clone(), new.clone()
    for _ in range(2):  # (the first flattens a new buffer on the checked path)
        torch.testing.assert_close(ours(x), theirs(x), atol=1e-6, rtol=1e-6)
    assert ours._plan[0] is ours._flat


def test_a_cell_that_has_stepped_copies_and_pickles() -> None:
    cell = cnn.LSTMCell(6, 8)
    x = torch.randn(3, 6)
    want = cell(x)
    assert cell._plan is not None
    for other in (copy.deepcopy(cell), pickle.loads(pickle.dumps(cell))):
        for a, b in zip(other(x), want):
            assert torch.equal(a, b)
        assert other._plan[0] is other._flat  # its own plan, on its own buffer
