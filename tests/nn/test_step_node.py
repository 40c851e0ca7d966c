"""The cells' step node (issue 48: ``_native/step_node.cpp``, nn/_step_node.py): built where torch
and a compiler are, loaded only under the torch it was built for, bound to the engine cudnn_rnn
loaded, refusing operands it cannot run on with an error (never reading past an array), and
falling back to the Python path, with the same bits, wherever it is not there.

Its numbers (every mode, gradient, ISA and thread count against the operator's checked path,
double backward, in-place edits) are tests/nn/test_planned_step.py's, which runs on both paths.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch

import cudnn_rnn
import cudnn_rnn.nn as cnn
from cudnn_rnn.engines import native, native_library
from cudnn_rnn.nn import _step_node

pytestmark = pytest.mark.skipif(not native.level_names(), reason="the native engine is not built")
PACKAGE = Path(cudnn_rnn.__file__).resolve().parent


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The loader's state forgotten before and after the test (which may change what it finds)."""
    _step_node._reload()
    yield monkeypatch
    monkeypatch.undo()
    _step_node._reload()


@pytest.fixture
def op(fresh: pytest.MonkeyPatch) -> Any:
    fresh.setenv(_step_node.ENV, "1")
    found = _step_node.step_op()
    if found is None:
        pytest.skip(f"the step node is not loaded: {_step_node.describe()}")
    return found


def test_the_node_is_built_where_the_install_had_torch_and_a_compiler(fresh: Any) -> None:
    """``make install`` builds it (no build isolation): here it must load, unless the build
    left its note saying why not."""
    fresh.delenv(_step_node.ENV, raising=False)
    note = PACKAGE / _step_node.NOT_BUILT_FILE
    if (PACKAGE / _step_node.file_name()).is_file() or not note.is_file():
        assert _step_node.describe() == "C++ node"
    else:
        assert _step_node.describe().startswith("Python (not built (")


def test_a_node_built_for_another_torch_is_not_loaded(fresh: Any, tmp_path: Path) -> None:
    fresh.setattr(_step_node, "file_name", lambda: "_step_node-torch0.0.0.so")
    fresh.setenv(_step_node.ENV, "1")
    assert _step_node.step_op() is None
    reason = _step_node.describe()
    if (PACKAGE / f"_step_node-torch{torch.__version__}.so").is_file():
        assert "built for another torch" in reason and torch.__version__ in reason, reason
    else:
        assert reason.startswith("Python (not built"), reason
    # The cells take the Python path, and say nothing (the same results).
    cell = cnn.GRUCell(3, 4)
    h = cell(torch.randn(2, 3, requires_grad=True))
    assert type(h.grad_fn).__name__ == "_PlannedStepBackward"


def test_the_environment_turns_the_node_off(fresh: Any) -> None:
    fresh.setenv(_step_node.ENV, "0")
    assert _step_node.step_op() is None
    assert _step_node.describe() == f"Python (disabled by {_step_node.ENV}=0)"


def test_info_says_which_step_the_cells_run(fresh: Any, capsys: pytest.CaptureFixture) -> None:
    from cudnn_rnn.cli.__main__ import main

    fresh.setenv(_step_node.ENV, "0")
    main(["info"])
    assert f"cells' step: Python (disabled by {_step_node.ENV}=0)" in capsys.readouterr().out


def _operands(mode: int, batch: int = 2, inputs: int = 3, units: int = 4) -> dict[str, Any]:
    gates = {0: 1, 1: 1, 2: 4, 3: 3}[mode]
    g = torch.Generator().manual_seed(0)
    return {
        "x": torch.randn(batch, inputs, generator=g),
        "h0": torch.randn(batch, units, generator=g),
        "c0": torch.randn(batch, units, generator=g) if mode == 2 else None,
        "mode": mode,
        "params": [
            torch.randn(gates * units, inputs, generator=g),
            torch.randn(gates * units, units, generator=g),
            torch.randn(gates * units, generator=g),
            torch.randn(gates * units, generator=g),
        ],
    }


def _misfits() -> list[tuple[str, dict[str, Any]]]:
    """Operands the operator cannot run on, for which the cell has other paths: (what, the
    operands)."""
    cases = []
    ops = _operands(1)
    ops["x"] = torch.randn(2, 5)  # (W says 3 inputs)
    cases.append(("x of other features", ops))
    ops = _operands(1)
    ops["h0"] = torch.randn(3, 4)
    cases.append(("h0 of another batch", ops))
    ops = _operands(1)
    ops["x"] = torch.randn(3, 2).t()
    cases.append(("x not contiguous", ops))
    ops = _operands(1)
    ops["x"] = ops["x"].double()
    cases.append(("x of float64", ops))
    ops = _operands(2)
    ops["c0"] = torch.randn(2, 5)
    cases.append(("c0 of other units", ops))
    ops = _operands(3)
    ops["params"][1] = torch.randn(12, 5)
    cases.append(("R of the wrong size", ops))
    ops = _operands(3)
    ops["params"][1] = torch.randn(4, 12).t()
    cases.append(("R transposed", ops))
    ops = _operands(3)
    ops["params"][3] = torch.randn(11)
    cases.append(("a short bias", ops))
    ops = _operands(3)
    ops["params"][0] = ops["params"][0].double()
    cases.append(("W of float64", ops))
    ops = _operands(1)
    ops["x"] = torch.randn(0, 3)
    ops["h0"] = torch.randn(0, 4)
    cases.append(("an empty batch", ops))
    return cases


@pytest.mark.parametrize("operands", [pytest.param(o, id=what) for what, o in _misfits()])
def test_the_operator_runs_only_on_operands_that_fit(op: Any, operands: dict[str, Any]) -> None:
    """An empty list, and nothing read: the cell then takes its other paths."""
    assert op(**operands) == []


def _wrong_calls() -> list[tuple[str, dict[str, Any], str]]:
    """Calls wrong in kind, which raise: (what, the operands, the message)."""
    cases = []
    ops = _operands(3)
    ops["params"] = ops["params"][:3]
    cases.append(("three parameters", ops, "the parameters are W, R"))
    ops = _operands(1)
    ops["c0"] = torch.randn(2, 4)
    cases.append(("a cell state for an RNN", ops, "c0 is the LSTM's"))
    ops = _operands(2)
    ops["c0"] = None
    cases.append(("an LSTM without its cell state", ops, "c0 is the LSTM's"))
    ops = _operands(1)
    ops["mode"] = 7
    cases.append(("an unknown mode", ops, "unknown mode code 7"))
    ops = _operands(1)
    ops["x"] = torch.randn(2)
    cases.append(("a 1-D x", ops, "must be 2-D"))
    return cases


@pytest.mark.parametrize(
    ("operands", "message"), [pytest.param(o, m, id=what) for what, o, m in _wrong_calls()]
)
def test_the_operator_refuses_calls_wrong_in_kind(
    op: Any, operands: dict[str, Any], message: str
) -> None:
    with pytest.raises(RuntimeError, match=message):
        op(**operands)


def test_a_cell_whose_parameter_the_node_cannot_read_takes_another_path(op: Any) -> None:
    """A parameter replaced by a transposed copy (not contiguous): the node declines it, and
    the cell's result is the checked path's, as torch.nn's."""
    torch.manual_seed(0)
    ours, theirs = cnn.GRUCell(3, 4), torch.nn.GRUCell(3, 4)
    theirs.load_state_dict(ours.state_dict())
    new = torch.randn(4, 12)
    ours.weight_hh.data, theirs.weight_hh.data = new.t(), new.t().clone()
    x = torch.randn(2, 3)
    torch.testing.assert_close(ours(x), theirs(x), atol=1e-6, rtol=1e-6)


def test_the_node_reads_a_parameter_replaced_by_another_tensor(op: Any) -> None:
    """``weight.data = t`` (not a view of the buffer any more): the node reads ``t``; the bits
    are those of the checked path, which flattens the parameters again."""
    torch.manual_seed(0)
    cell = cnn.LSTMCell(3, 4)
    cell.weight_ih.data = torch.randn(16, 3)
    x = torch.randn(2, 3, requires_grad=True)
    h, c = cell(x)
    assert type(h.grad_fn).__name__ == "CppFunction"
    checked = copy.deepcopy(cell)
    checked._eager_step = lambda input, hx: None
    want = checked(x)
    assert torch.equal(h, want[0]) and torch.equal(c, want[1])
    got = torch.autograd.grad(h.sum() + c.square().sum(), [x, cell.weight_ih])
    need = torch.autograd.grad(want[0].sum() + want[1].square().sum(), [x, checked.weight_ih])
    assert all(torch.equal(a, b) for a, b in zip(got, need, strict=True))


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_the_operator_called_directly_is_the_cells_step(op: Any, mode: int) -> None:
    """The operator on its own operands gives the bits of the cell whose parameters they are
    (through the Python path), forward and backward, with and without biases."""
    cls = {0: cnn.RNNCell, 1: cnn.RNNCell, 2: cnn.LSTMCell, 3: cnn.GRUCell}[mode]
    extra = {"nonlinearity": "relu"} if mode == 0 else {}
    for bias in (True, False):
        cell = cls(3, 4, bias=bias, **extra)
        ops = _operands(mode)
        ops["params"] = [p.detach().clone().requires_grad_() for p in cell.parameters()]
        x = ops["x"].requires_grad_()
        out = op(**ops)
        grads = torch.autograd.grad(out[0].square().sum(), [x, *ops["params"]])
        with pytest.MonkeyPatch.context() as m:
            m.setenv(_step_node.ENV, "0")
            _step_node._reload()
            state = (ops["h0"], ops["c0"]) if mode == 2 else ops["h0"]
            want = cell(x, state)
            want_h = want[0] if mode == 2 else want
            want_grads = torch.autograd.grad(want_h.square().sum(), [x, *cell.parameters()])
        _step_node._reload()
        assert torch.equal(out[0], want_h)
        if mode == 2:
            assert torch.equal(out[1], want[1])
        for a, b in zip(grads, want_grads, strict=True):
            assert torch.equal(a, b)


def test_the_node_follows_the_engine_loaded_again(op: Any) -> None:
    """A test (or the sanitizer run) loads the engine again: the node is bound to the new one."""
    cell = cnn.LSTMCell(3, 4)
    x = torch.randn(2, 3)
    want = cell(x)
    native_library._reload()
    try:
        got = cell(x)
        assert _step_node._loaded().engine is native_library._library()
    finally:
        native_library._reload()
    assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))


def test_a_double_backward_after_the_loader_was_reset(op: Any) -> None:
    """The double backward's Python implementation is registered once per process: a reset of
    the loader (tests, ``CUDNN_RNN_STEP_NODE`` changed) neither drops nor repeats it."""
    for _ in range(2):
        _step_node._reload()
        assert _step_node.step_op() is not None
    cell = cnn.RNNCell(3, 4)
    x = torch.randn(2, 3, requires_grad=True)
    h = cell(x)
    assert type(h.grad_fn).__name__ == "CppFunction"
    (gx,) = torch.autograd.grad(h.tanh().sum(), x, create_graph=True)
    (ggx,) = torch.autograd.grad(gx.square().sum(), x)
    checked = copy.deepcopy(cell)
    checked._eager_step = lambda input, hx: None
    (want,) = torch.autograd.grad(checked(x).tanh().sum(), x, create_graph=True)
    torch.testing.assert_close(gx, want, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(ggx, torch.autograd.grad(want.square().sum(), x)[0])


def test_a_node_of_another_engine_abi_is_not_loaded(fresh: Any) -> None:
    """A node left from a build of other sources (step.h's record may differ) is refused."""
    fresh.setenv(_step_node.ENV, "1")
    if _step_node.step_op() is None:
        pytest.skip(f"the step node is not loaded: {_step_node.describe()}")
    _step_node._reload()
    fresh.setattr(native_library, "ABI_VERSION", native_library.ABI_VERSION + 1)
    assert _step_node.step_op() is None
    reason = _step_node.describe()
    assert f"built for engine ABI {native_library.ABI_VERSION - 1}" in reason, reason


class _Seen(torch.utils._python_dispatch.TorchDispatchMode):
    """The operators a call reaches, as a dispatch mode (FlopCounterMode, fake tensors) sees."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


CELL_CLASSES = (cnn.RNNCell, cnn.LSTMCell, cnn.GRUCell)


@pytest.mark.parametrize("cls", CELL_CLASSES, ids=lambda c: c.__name__)
def test_a_watched_step_is_the_operator_not_the_node(op: Any, cls: Any) -> None:
    """The node checks its operands, not who watches: under a dispatch mode or the profiler a
    cell's step is cudnn_rnn's operator (what every observer is shown), with the node's bits."""
    torch.manual_seed(0)
    cell = cls(8, 6)
    x = torch.randn(3, 8)
    with torch.no_grad():
        expected = cell(x)
        with _Seen() as seen:
            got = cell(x)
        assert "cudnn_rnn.rnn.default" in seen.ops
        assert not any("cudnn_rnn_step" in name for name in seen.ops)
        with torch.profiler.profile() as prof:
            profiled = cell(x)
    names = {event.name for event in prof.events()}
    assert "cudnn_rnn::rnn" in names and "cudnn_rnn_step::step" not in names
    for out in (got, profiled):
        for a, b in zip(
            out if isinstance(out, tuple) else (out,),
            expected if isinstance(expected, tuple) else (expected,),
            strict=True,
        ):
            assert torch.equal(a, b)


@pytest.mark.parametrize("cls", CELL_CLASSES, ids=lambda c: c.__name__)
def test_what_the_node_declines_takes_the_checked_path(op: Any, cls: Any) -> None:
    """On the node's path Python checks only the kinds of the arguments; the node declines an
    operand of another size, dtype or layout, and the checked path then raises torch.nn's
    error or computes (another dtype) as it did before the node."""
    torch.manual_seed(0)
    cell = cls(8, 6)
    lstm = cls is cnn.LSTMCell

    def state(*size: int) -> Any:
        h = torch.randn(*size)
        return (h, torch.randn(*size)) if lstm else h

    with pytest.raises(RuntimeError, match="input has inconsistent input_size"):
        cell(torch.randn(3, 7))
    with pytest.raises(RuntimeError, match="doesn't match hidden0 batch size"):
        cell(torch.randn(3, 8), state(4, 6))
    with pytest.raises(RuntimeError, match="has inconsistent hidden_size"):
        cell(torch.randn(3, 8), state(3, 5))
    with pytest.raises(ValueError, match=r"Expected (hx|hidden)"):
        cell(torch.randn(3, 8), state(3, 6, 1))
    # Another dtype is the checked path's business: its numbers, not the node's refusal.
    double = copy.deepcopy(cell).double()
    x = torch.randn(3, 8, dtype=torch.float64)
    assert (double(x)[0] if lstm else double(x)).dtype == torch.float64
    # A batch of zero rows.
    empty = cell(torch.randn(0, 8))
    assert (empty[0] if lstm else empty).shape == (0, 6)
