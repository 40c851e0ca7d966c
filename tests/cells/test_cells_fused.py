"""The drivers' fused path: equal to the step-by-step loop (gradients too) and to the oracle.

``dynamic_rnn`` and ``stack_bidirectional_dynamic_rnn`` hand stacks of the compatible cells to
the fused operator. Here the fused results are compared with the loop (``drivers._run_loop``, or
the drivers with fusion switched off), with the NumPy oracle, and each test also checks which path
ran: the loop is made to raise where the kernel must serve, the kernel where the loop must.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import torch

from cudnn_rnn.cells import (
    BasicRNNCell,
    BidirectionalStack,
    CudnnCompatibleGRUCell,
    CudnnCompatibleLSTMCell,
    LSTMStateTuple,
    MultiRNNCell,
    drivers,
    dynamic_rnn,
    stack_bidirectional_dynamic_rnn,
)
from cudnn_rnn.core.spec import RNNSpec
from tests.cells.test_cells import (
    F64,
    MODES,
    Cell,
    assert_padding_is_zero,
    cell_state,
    check_state,
    leaves,
    make_cell,
    oracle,
    random_problem,
    randomize,
)

STEPS, BATCH, DEPTH, UNITS = 5, 3, 2, 3
#: (mode, num_layers, bidirectional) of one operator call.
Call = tuple[str, int, bool]
#: Outputs and final-state leaves, gradients, and the state's structure.
Results = tuple[list[torch.Tensor], list[torch.Tensor], Any]


def _forbidden(name: str) -> Callable[..., Any]:
    def fail(*_: Any, **__: Any) -> Any:
        raise AssertionError(f"{name} must not run here")

    return fail


@contextlib.contextmanager
def kernel_calls(*, loop: bool) -> Iterator[list[Call]]:
    """Record every kernel call; with ``loop=False`` the step-by-step loop raises."""
    calls: list[Call] = []
    real = drivers.rnn

    def spy(spec: RNNSpec, *args: Any, **kwargs: Any) -> Any:
        calls.append((spec.mode, spec.num_layers, spec.bidirectional))
        return real(spec, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(drivers, "rnn", spy)
        if not loop:
            patch.setattr(drivers, "_run_loop", _forbidden("the step-by-step loop"))
        yield calls


@contextlib.contextmanager
def loop_only() -> Iterator[None]:
    """The drivers as they were before fusion: no cell class is fusable, the kernel raises."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(drivers, "_FUSABLE", ())
        patch.setattr(drivers, "rnn", _forbidden("the fused operator"))
        yield


def loop_dynamic_rnn(
    cell: Any, inputs: torch.Tensor, state: Any, lengths: Any, time_major: bool
) -> tuple[torch.Tensor, Any]:
    """``dynamic_rnn`` through the private loop itself."""
    x = inputs if time_major else inputs.transpose(0, 1)
    if state is None:
        state = cell.zero_state(int(x.shape[1]), x.dtype)
    lens = None if lengths is None else torch.as_tensor(lengths)
    out, final = drivers._run_loop(cell, x, state, lens)
    return (out if time_major else out.transpose(0, 1)), final


def structure(state: Any) -> Any:
    """Types and shapes of a (nested) state, to compare fused and loop results."""
    if isinstance(state, torch.Tensor):
        return tuple(state.shape)
    return type(state).__name__, [structure(s) for s in state]


def values_and_grads(
    run: Callable[[], tuple[torch.Tensor, Any]], wrt: list[torch.Tensor]
) -> Results:
    """Outputs and state leaves of ``run()``, and the gradients of a fixed random sum of them."""
    out, state = run()
    values = [out, *leaves(state)]
    gen = torch.Generator().manual_seed(0)
    weights = [torch.rand(v.shape, generator=gen, dtype=v.dtype).to(v.device) for v in values]
    loss = sum((v * w).sum() for v, w in zip(values, weights))
    grads = torch.autograd.grad(loss, wrt)
    return values, list(grads), structure(state)


def assert_same(got: Results, want: Results, atol: float = 1e-12) -> None:
    assert got[2] == want[2], "the state structures differ"
    assert len(got[0]) == len(want[0]) and len(got[1]) == len(want[1])
    for name, g, w in [("value", *p) for p in zip(got[0], want[0])] + [
        ("gradient", *p) for p in zip(got[1], want[1])
    ]:
        assert g.dtype == w.dtype, name
        torch.testing.assert_close(g, w, atol=atol, rtol=0, msg=lambda m, n=name: f"{n}: {m}")


def problem(
    rng: np.random.Generator, mode: str, blocks: int, varlen: bool, time_major: bool
) -> tuple[torch.Tensor, list[Any], np.ndarray | None, tuple[np.ndarray, Any, Any]]:
    """Inputs as given (requiring grad), one initial state per block (leaves requiring grad),
    lengths or None, and the NumPy (x, h0, c0) for the oracle."""
    x, h0, c0, lengths = random_problem(rng, mode, blocks, STEPS, BATCH, DEPTH, UNITS)
    x_in = np.ascontiguousarray(x if time_major else x.transpose(1, 0, 2))
    states = [cell_state(mode, h0[k], None if c0 is None else c0[k]) for k in range(blocks)]
    for leaf in leaves(states):
        leaf.requires_grad_()
    inputs = torch.from_numpy(x_in).requires_grad_()
    return inputs, states, (lengths if varlen else None), (x_in, h0, c0)


def assert_padding_has_no_gradient(grad: torch.Tensor, lengths: np.ndarray, tm: bool) -> None:
    grad = grad if tm else grad.transpose(0, 1)
    for b, n in enumerate(lengths):
        assert bool((grad[int(n) :, b] == 0).all())


def stacked_cells(mode: str, layers: int, dtype: torch.dtype = F64) -> list[Cell]:
    """The layers of a MultiRNNCell, built for DEPTH, variables random."""
    cells_ = [make_cell(mode, UNITS, dtype) for _ in range(layers)]
    MultiRNNCell(cells_).build(DEPTH)
    randomize(cells_, np.random.default_rng(layers))
    return cells_


def bidirectional_cells(
    mode: str, layers: int, dtype: torch.dtype = F64
) -> tuple[list[Cell], list[Cell], list[Cell]]:
    """fw, bw and both in the oracle's block order (layer-major, fw then bw), built, random."""
    fw = [make_cell(mode, UNITS, dtype) for _ in range(layers)]
    bw = [make_cell(mode, UNITS, dtype) for _ in range(layers)]
    BidirectionalStack(fw, bw).build(DEPTH)
    blocks = [c for pair in zip(fw, bw) for c in pair]
    randomize(blocks, np.random.default_rng(layers))
    return fw, bw, blocks


# -- fused == loop, values and gradients --------------------------------------------------------


@pytest.mark.parametrize("time_major", [True, False])
@pytest.mark.parametrize("varlen", [False, True])
@pytest.mark.parametrize("layers", [1, 2, 3])
@pytest.mark.parametrize("mode", MODES)
def test_multi_rnn_cell_fused_equals_loop(
    mode: str, layers: int, varlen: bool, time_major: bool
) -> None:
    rng = np.random.default_rng(10 * layers + varlen)
    layer_cells = [make_cell(mode, UNITS) for _ in range(layers)]
    stack = MultiRNNCell(layer_cells)
    stack.build(DEPTH)
    randomize(layer_cells, rng)
    x, states, lengths, _ = problem(rng, mode, layers, varlen, time_major)
    initial = tuple(states)
    wrt = [x, *leaves(initial), *stack.parameters()]

    with kernel_calls(loop=False) as calls:
        got = values_and_grads(lambda: dynamic_rnn(stack, x, initial, lengths, time_major), wrt)
    want = values_and_grads(lambda: loop_dynamic_rnn(stack, x, initial, lengths, time_major), wrt)

    assert calls == [(mode, layers, False)]  # the whole stack is one kernel call
    assert_same(got, want)
    if lengths is not None:
        assert_padding_is_zero(got[0][0], lengths, time_major)
        assert_padding_has_no_gradient(got[1][0], lengths, time_major)


@pytest.mark.parametrize("given_state", [True, False])
@pytest.mark.parametrize("time_major", [True, False])
@pytest.mark.parametrize("varlen", [False, True])
@pytest.mark.parametrize("mode", MODES)
def test_single_cell_fused_equals_loop(
    mode: str, varlen: bool, time_major: bool, given_state: bool
) -> None:
    rng = np.random.default_rng(20 + varlen)
    cell = make_cell(mode, UNITS)
    cell.build(DEPTH)
    randomize([cell], rng)
    x, states, lengths, _ = problem(rng, mode, 1, varlen, time_major)
    initial = states[0] if given_state else None
    wrt = [x, *(leaves(initial) if given_state else []), *cell.parameters()]

    with kernel_calls(loop=False) as calls:
        got = values_and_grads(lambda: dynamic_rnn(cell, x, initial, lengths, time_major), wrt)
    want = values_and_grads(lambda: loop_dynamic_rnn(cell, x, initial, lengths, time_major), wrt)

    assert calls == [(mode, 1, False)]
    assert_same(got, want)
    shape = (BATCH, UNITS)
    assert got[2] == (("LSTMStateTuple", [shape, shape]) if mode == "lstm" else shape)
    if lengths is not None:
        assert_padding_is_zero(got[0][0], lengths, time_major)


@pytest.mark.parametrize("api", ["function", "module"])
@pytest.mark.parametrize("time_major", [True, False])
@pytest.mark.parametrize("varlen", [False, True])
@pytest.mark.parametrize("layers", [1, 2, 3])
@pytest.mark.parametrize("mode", MODES)
def test_stack_bidirectional_fused_equals_loop(
    mode: str, layers: int, varlen: bool, time_major: bool, api: str
) -> None:
    """One bidirectional multi-layer kernel call == the loop with its per-layer ``_reverse``."""
    fw, bw, _ = bidirectional_cells(mode, layers)
    stack = BidirectionalStack(fw, bw)
    rng = np.random.default_rng(30 + varlen)
    x, states, lengths, _ = problem(rng, mode, 2 * layers, varlen, time_major)
    args = (x, states[0::2], states[1::2], lengths, time_major)

    def run() -> tuple[torch.Tensor, Any]:
        if api == "module":
            out, s_fw, s_bw = stack(*args)
        else:
            out, s_fw, s_bw = stack_bidirectional_dynamic_rnn(fw, bw, *args)
        return out, (s_fw, s_bw)

    wrt = [x, *leaves(states), *stack.parameters()]
    with kernel_calls(loop=False) as calls:
        got = values_and_grads(run, wrt)
    with loop_only():
        want = values_and_grads(run, wrt)

    assert calls == [(mode, layers, True)]
    assert_same(got, want)
    if lengths is not None:
        assert_padding_is_zero(got[0][0], lengths, time_major)
        assert_padding_has_no_gradient(got[1][0], lengths, time_major)


# -- fused == the NumPy oracle ------------------------------------------------------------------


@pytest.mark.parametrize("varlen", [False, True])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("mode", MODES)
def test_fused_matches_oracle(mode: str, layers: int, bidirectional: bool, varlen: bool) -> None:
    rng = np.random.default_rng(40 + varlen)
    if bidirectional:
        fw, bw, blocks = bidirectional_cells(mode, layers)
    else:
        blocks = stacked_cells(mode, layers)
    x, states, lengths, (x_np, h0, c0) = problem(rng, mode, len(blocks), varlen, False)

    with kernel_calls(loop=False) as calls, torch.no_grad():
        if bidirectional:
            out, s_fw, s_bw = stack_bidirectional_dynamic_rnn(
                fw, bw, x, states[0::2], states[1::2], lengths, time_major=False
            )
            finals = [s for pair in zip(s_fw, s_bw) for s in pair]
        else:
            out, final = dynamic_rnn(MultiRNNCell(blocks), x, tuple(states), lengths, False)
            finals = list(final)
    want, h_n, c_n = oracle(
        mode, blocks, x_np, h0, c0, bidirectional=bidirectional, lengths=lengths, time_major=False
    )

    assert calls == [(mode, layers, bidirectional)]
    np.testing.assert_allclose(out.numpy(), want, atol=1e-10, rtol=0)
    for k, state in enumerate(finals):
        check_state(mode, state, h_n[k], None if c_n is None else c_n[k])


# -- which path runs ----------------------------------------------------------------------------


def test_mixed_stack_runs_layer_groups_fused() -> None:
    """Consecutive layers of one mode and width share a call; every layer is still fused."""
    torch.manual_seed(0)
    layer_cells: list[Cell] = [
        CudnnCompatibleLSTMCell(3, dtype=F64),
        CudnnCompatibleLSTMCell(3, dtype=F64),
        CudnnCompatibleGRUCell(3, dtype=F64),
        CudnnCompatibleGRUCell(4, dtype=F64),
        BasicRNNCell(4, activation="tanh", dtype=F64),
        BasicRNNCell(4, activation="relu", dtype=F64),
        BasicRNNCell(4, activation="relu", dtype=F64),
    ]
    stack = MultiRNNCell(layer_cells)
    stack.build(2)
    randomize(layer_cells, np.random.default_rng(5))
    x = torch.rand(6, 3, 2, dtype=F64, requires_grad=True)
    lengths = [6, 2, 4]
    wrt = [x, *stack.parameters()]

    with kernel_calls(loop=False) as calls:
        got = values_and_grads(
            lambda: dynamic_rnn(stack, x, sequence_length=lengths, time_major=True), wrt
        )
    want = values_and_grads(lambda: loop_dynamic_rnn(stack, x, None, lengths, True), wrt)

    assert calls == [
        ("lstm", 2, False),
        ("gru", 1, False),
        ("gru", 1, False),
        ("rnn_tanh", 1, False),
        ("rnn_relu", 2, False),
    ]
    assert_same(got, want)


def test_mixed_bidirectional_stack_falls_back_per_layer() -> None:
    """Matching layers are bidirectional kernel layers; others run each direction on its own."""
    torch.manual_seed(1)
    fw: list[Any] = [
        CudnnCompatibleLSTMCell(3, dtype=F64),
        CudnnCompatibleGRUCell(2, dtype=F64),  # widths differ from bw: per direction
        CudnnCompatibleLSTMCell(2, dtype=F64),
        CudnnCompatibleLSTMCell(2, dtype=F64),
        MultiRNNCell([BasicRNNCell(2, dtype=F64), BasicRNNCell(2, dtype=F64)]),
    ]
    bw: list[Any] = [
        CudnnCompatibleLSTMCell(3, dtype=F64),
        CudnnCompatibleGRUCell(3, dtype=F64),
        CudnnCompatibleLSTMCell(2, dtype=F64),
        CudnnCompatibleLSTMCell(2, dtype=F64),
        BasicRNNCell(2, activation="relu", dtype=F64),
    ]
    x = torch.rand(2, 5, 4, dtype=F64, requires_grad=True)
    lengths = [5, 3]

    def run() -> tuple[torch.Tensor, Any]:
        out, s_fw, s_bw = stack_bidirectional_dynamic_rnn(
            fw, bw, x, sequence_length=lengths, time_major=False
        )
        return out, (s_fw, s_bw)

    run()  # builds the cells
    wrt = [x, *(p for c in fw + bw for p in c.parameters())]
    with kernel_calls(loop=False) as calls:
        got = values_and_grads(run, wrt)
    with loop_only():
        want = values_and_grads(run, wrt)

    assert calls == [
        ("lstm", 1, True),
        ("gru", 1, False),
        ("gru", 1, False),
        ("lstm", 2, True),
        ("rnn_tanh", 2, False),
        ("rnn_relu", 1, False),
    ]
    assert_same(got, want)


class HalvedLSTMCell(CudnnCompatibleLSTMCell):
    """A user's subclass with its own ``forward``, which the kernel knows nothing of."""

    def forward(self, inputs: torch.Tensor, state: Any) -> tuple[torch.Tensor, LSTMStateTuple]:
        h, (c, _) = super().forward(inputs, state)
        return 0.5 * h, LSTMStateTuple(c, 0.5 * h)


def test_subclass_takes_the_loop() -> None:
    torch.manual_seed(2)
    sub = [HalvedLSTMCell(3, dtype=F64), CudnnCompatibleLSTMCell(3, dtype=F64)]
    plain = [CudnnCompatibleLSTMCell(3, dtype=F64), CudnnCompatibleLSTMCell(3, dtype=F64)]
    stack, twin = MultiRNNCell(sub), MultiRNNCell(plain)
    stack.build(2)
    twin.build(2)
    twin.load_state_dict(stack.state_dict())
    x = torch.rand(4, 2, 2, dtype=F64)

    with kernel_calls(loop=True) as calls:
        out, final = dynamic_rnn(stack, x, sequence_length=[4, 2], time_major=True)
        single, _ = dynamic_rnn(sub[0], x, time_major=True)
    want, want_final = loop_dynamic_rnn(stack, x, None, [4, 2], True)

    assert calls == []
    assert torch.equal(out, want)
    assert all(torch.equal(a, b) for a, b in zip(leaves(final), leaves(want_final)))
    assert torch.equal(single, loop_dynamic_rnn(sub[0], x, None, None, True)[0])
    # The override matters: the plain twin with the same variables (fused) differs.
    assert not torch.allclose(out, dynamic_rnn(twin, x, sequence_length=[4, 2], time_major=True)[0])

    # In a bidirectional stack only the subclass's direction takes the loop.
    fw, bw = [HalvedLSTMCell(3, dtype=F64)], [CudnnCompatibleLSTMCell(3, dtype=F64)]
    with kernel_calls(loop=True) as calls:
        got = stack_bidirectional_dynamic_rnn(fw, bw, x, sequence_length=[4, 2], time_major=True)
    with loop_only():
        expected = stack_bidirectional_dynamic_rnn(
            fw, bw, x, sequence_length=[4, 2], time_major=True
        )
    assert calls == [("lstm", 1, False)]
    torch.testing.assert_close(got[0], expected[0], atol=1e-12, rtol=0)


def test_states_of_another_dtype_take_the_loop() -> None:
    """float32 states into float64 cells: the loop type-promotes, so it keeps them."""
    torch.manual_seed(3)
    stack = MultiRNNCell([CudnnCompatibleLSTMCell(3, dtype=F64) for _ in range(2)])
    x = torch.rand(4, 2, 2, dtype=F64)
    initial = stack.zero_state(2, torch.float32)
    with kernel_calls(loop=True) as calls:
        out, final = dynamic_rnn(stack, x, initial, time_major=True)
    want, want_final = loop_dynamic_rnn(stack, x, initial, None, True)
    assert calls == []
    assert out.dtype == F64 and torch.equal(out, want)
    assert all(torch.equal(a, b) for a, b in zip(leaves(final), leaves(want_final)))


class Float32OutputRNNCell(BasicRNNCell):
    """A subclass whose outputs are float32 whatever its own dtype."""

    def forward(self, inputs: torch.Tensor, state: Any) -> tuple[torch.Tensor, torch.Tensor]:
        h, new_state = super().forward(inputs, state)
        return h.float(), new_state


def test_layer_after_a_loop_layer_is_checked_against_its_real_input() -> None:
    """The next layer's checks see the dtype that the loop's layer really returned."""
    torch.manual_seed(4)
    fw = [Float32OutputRNNCell(2, dtype=F64), BasicRNNCell(3, dtype=torch.float32)]
    bw = [Float32OutputRNNCell(2, dtype=F64), BasicRNNCell(3, dtype=torch.float32)]
    x = torch.rand(4, 2, 3, dtype=F64)
    init = [None, torch.zeros(2, 3)]  # layer 1 runs in float32 (zero states follow x: float64)
    with kernel_calls(loop=True) as calls:
        out, _, _ = stack_bidirectional_dynamic_rnn(fw, bw, x, init, init, [4, 1], True)
    with loop_only():
        want, _, _ = stack_bidirectional_dynamic_rnn(fw, bw, x, init, init, [4, 1], True)
    assert calls == [("rnn_tanh", 1, True)]
    assert out.dtype == want.dtype == torch.float32
    torch.testing.assert_close(out, want, atol=1e-6, rtol=0)


def test_autocast_takes_the_loop() -> None:
    """Autocast would run the whole kernel in bfloat16; the loop mixes precisions, so it stays."""
    torch.manual_seed(5)
    stack = MultiRNNCell([CudnnCompatibleLSTMCell(4), CudnnCompatibleLSTMCell(4)])
    x = torch.rand(3, 2, 4)
    stack.build(4)
    with kernel_calls(loop=True) as calls, torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = dynamic_rnn(stack, x, time_major=True)
        want, _ = loop_dynamic_rnn(stack, x, None, None, True)
    assert calls == []
    assert out.dtype == want.dtype and torch.equal(out, want)


# -- errors: the loop's, raised before anything runs --------------------------------------------


def _lstm_stack(dtypes: tuple[torch.dtype, ...] = (F64, F64)) -> MultiRNNCell:
    return MultiRNNCell([CudnnCompatibleLSTMCell(3, dtype=d) for d in dtypes])


def _bad_call(name: str) -> Callable[[], Any]:
    """A fresh call (new cells each time: the checks build them) that the checks reject."""
    x = torch.zeros(4, 2, 2, dtype=F64)
    s = LSTMStateTuple(torch.zeros(2, 3, dtype=F64), torch.zeros(2, 3, dtype=F64))
    bad_h = LSTMStateTuple(s.c, torch.zeros(2, 4, dtype=F64))
    built = _lstm_stack()
    built.build(4)
    calls: dict[str, Callable[[], Any]] = {
        "state length": lambda: dynamic_rnn(_lstm_stack(), x, (s,), time_major=True),
        "layer 1 state.h": lambda: dynamic_rnn(_lstm_stack(), x, (s, bad_h), time_major=True),
        "layer 1 state type": lambda: dynamic_rnn(_lstm_stack(), x, (s, s.c), time_major=True),
        "input dtype": lambda: dynamic_rnn(_lstm_stack(), x.float(), time_major=True),
        "layer 1 dtype": lambda: dynamic_rnn(_lstm_stack((F64, torch.float32)), x, time_major=True),
        "input depth": lambda: dynamic_rnn(built, x, time_major=True),
        "gru state": lambda: dynamic_rnn(
            CudnnCompatibleGRUCell(3, dtype=F64), x, (s.c,), time_major=True
        ),
        "bw state": lambda: stack_bidirectional_dynamic_rnn(
            [CudnnCompatibleLSTMCell(3, dtype=F64)],
            [CudnnCompatibleLSTMCell(3, dtype=F64)],
            x,
            [s],
            [bad_h],
            time_major=True,
        ),
    }
    return calls[name]


BAD_CALLS = [
    "state length",
    "layer 1 state.h",
    "layer 1 state type",
    "input dtype",
    "layer 1 dtype",
    "input depth",
    "gru state",
    "bw state",
]


@pytest.mark.parametrize("name", BAD_CALLS)
def test_errors_equal_the_loops(name: str) -> None:
    def error(run: Callable[[], Any]) -> tuple[type[BaseException], str]:
        with pytest.raises((TypeError, ValueError)) as info:
            run()
        return info.type, str(info.value)

    with kernel_calls(loop=True) as calls:
        fused = error(_bad_call(name))
    with loop_only():
        loop = error(_bad_call(name))
    assert calls == [] and fused == loop
    assert fused[1].startswith(
        ("MultiRNNCell:", "CudnnCompatibleLSTMCell:", "CudnnCompatibleGRUCell:")
    )


# -- precision and devices ----------------------------------------------------------------------


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("mode", MODES)
def test_float32_follows_float64(mode: str, bidirectional: bool) -> None:
    if bidirectional:
        fw, bw, blocks = bidirectional_cells(mode, 2)
        twins = bidirectional_cells(mode, 2, torch.float32)[2]
    else:
        blocks, twins = stacked_cells(mode, 2), stacked_cells(mode, 2, torch.float32)
    with torch.no_grad():
        for cell, twin in zip(blocks, twins):
            for name, p in twin.tf_variables().items():
                p.copy_(cell.tf_variables()[name])
    x = torch.rand(STEPS, BATCH, DEPTH, dtype=F64, generator=torch.Generator().manual_seed(6))
    lengths = [5, 1, 3]
    with kernel_calls(loop=False), torch.no_grad():
        if bidirectional:
            want = stack_bidirectional_dynamic_rnn(
                fw, bw, x, sequence_length=lengths, time_major=True
            )[0]
            got = stack_bidirectional_dynamic_rnn(
                twins[0::2], twins[1::2], x.float(), sequence_length=lengths, time_major=True
            )[0]
        else:
            want = dynamic_rnn(MultiRNNCell(blocks), x, sequence_length=lengths, time_major=True)[0]
            got = dynamic_rnn(
                MultiRNNCell(twins), x.float(), sequence_length=lengths, time_major=True
            )[0]
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=0)


@pytest.mark.cuda
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("mode", MODES)
def test_cuda_fused_equals_loop(mode: str, bidirectional: bool) -> None:
    """cuDNN's kernel, weights made on every call (its copy warning is expected and silenced)."""
    if bidirectional:
        fw, bw, blocks = bidirectional_cells(mode, 2)
    else:
        blocks = stacked_cells(mode, 4)
    for cell in blocks:
        cell.cuda()
    x = torch.rand(BATCH, STEPS, DEPTH, dtype=F64, device="cuda", requires_grad=True)
    lengths = torch.tensor([5, 1, 3], device="cuda")

    def run() -> tuple[torch.Tensor, Any]:
        if bidirectional:
            out, s_fw, s_bw = stack_bidirectional_dynamic_rnn(
                fw, bw, x, sequence_length=lengths, time_major=False
            )
            return out, (s_fw, s_bw)
        return dynamic_rnn(MultiRNNCell(blocks), x, sequence_length=lengths, time_major=False)

    wrt = [x, *(p for c in blocks for p in c.parameters())]
    with kernel_calls(loop=False) as calls:
        got = values_and_grads(run, wrt)
    with loop_only():
        want = values_and_grads(run, wrt)
    assert calls == [(mode, 2, True) if bidirectional else (mode, 4, False)]
    assert_same(got, want, atol=1e-10)
