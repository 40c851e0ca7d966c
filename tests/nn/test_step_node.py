"""The cells' step node (issue 48: ``_native/step_node.cpp``, nn/_step_node.py): built where torch
and a compiler are, loaded only under the torch it was built for, bound to the engine cudnn_rnn
loaded, refusing operands it cannot run on with an error (never reading past an array), and
falling back to the Python path, with the same bits, wherever it is not there.

Its numbers (every mode, gradient, ISA and thread count against the operator's checked path,
double backward, in-place edits) are tests/nn/test_planned_step.py's, which runs on both paths.
"""

from __future__ import annotations

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


def _bad_operands() -> list[tuple[str, dict[str, Any], str]]:
    """Calls the operator must refuse: (what, the operands, its message)."""
    cases = []
    ops = _operands(1)
    ops["x"] = torch.randn(2, 5)  # (W says 3 inputs)
    cases.append(("x of other features", ops, "weight_ih must be"))
    ops = _operands(1)
    ops["h0"] = torch.randn(3, 4)
    cases.append(("h0 of another batch", ops, "h0 must be"))
    ops = _operands(1)
    ops["x"] = torch.randn(3, 2).t()
    cases.append(("x not contiguous", ops, "x must be a contiguous"))
    ops = _operands(1)
    ops["x"] = ops["x"].double()
    cases.append(("x of float64", ops, "x must be a contiguous CPU float32"))
    ops = _operands(3)
    ops["params"][1] = torch.randn(12, 5)
    cases.append(("R of the wrong size", ops, "weight_hh must be"))
    ops = _operands(3)
    ops["params"] = ops["params"][:3]
    cases.append(("three parameters", ops, "the parameters are W, R"))
    ops = _operands(3)
    ops["params"][3] = torch.randn(11)
    cases.append(("a short bias", ops, "bias_hh must be"))
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
    ("operands", "message"), [pytest.param(o, m, id=what) for what, o, m in _bad_operands()]
)
def test_the_operator_refuses_what_it_cannot_run_on(
    op: Any, operands: dict[str, Any], message: str
) -> None:
    with pytest.raises(RuntimeError, match=message):
        op(**operands)


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
