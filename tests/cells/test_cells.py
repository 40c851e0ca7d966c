"""The compatible cells, dynamic_rnn and the stacks: oracle math, names, checkpoints, errors.

The oracle is ``core.reference.rnn_forward`` (cuDNN canonical form). The cells' TF variables are
turned into that form here, by hand, following tf_cudnn_rnn.md §7.1, so this file does not trust
the library's own gate tables.
"""

from __future__ import annotations

import json
import math
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
    dynamic_rnn,
    stack_bidirectional_dynamic_rnn,
)
from cudnn_rnn.checkpointable import Checkpointable
from cudnn_rnn.core.reference import rnn_forward as oracle_forward

MODES = ["lstm", "gru", "rnn_tanh", "rnn_relu"]
F64 = torch.float64
Cell = CudnnCompatibleLSTMCell | CudnnCompatibleGRUCell | BasicRNNCell


def make_cell(mode: str, units: int, dtype: torch.dtype = F64) -> Cell:
    if mode == "lstm":
        return CudnnCompatibleLSTMCell(units, dtype=dtype)
    if mode == "gru":
        return CudnnCompatibleGRUCell(units, dtype=dtype)
    return BasicRNNCell(units, activation=mode[4:], dtype=dtype)


def randomize(cells: list[Cell], rng: np.random.Generator) -> None:
    """Every variable in U(-0.5, 0.5), so that a misplaced bias or gate block shows."""
    with torch.no_grad():
        for cell in cells:
            for p in cell.tf_variables().values():
                p.copy_(torch.from_numpy(rng.uniform(-0.5, 0.5, tuple(p.shape))))


def to_cudnn(cell: Cell) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """One cell's TF variables as cuDNN canonical (weights, biases), by hand per §7.1.

    cuDNN keeps two biases per gate; the TF bias goes to b_W and b_R is 0, except the GRU's
    candidate hidden bias, which is b_Rh itself.
    """
    v = {name: p.detach().numpy() for name, p in cell.tf_variables().items()}
    depth, units = cell.input_depth, cell.num_units
    assert depth is not None
    zeros = np.zeros(units)

    def rows(m: np.ndarray, k: int) -> np.ndarray:
        return m[k * units : (k + 1) * units]

    if isinstance(cell, CudnnCompatibleLSTMCell):
        w = v["kernel"].T  # [4H, I+H], row blocks i, c, f, o
        blocks = [rows(w, k) for k in (0, 2, 1, 3)]  # -> cuDNN i, f, c, o
        biases = [rows(v["bias"], k) for k in (0, 2, 1, 3)]
        return (
            [b[:, :depth] for b in blocks] + [b[:, depth:] for b in blocks],
            biases + [zeros] * 4,
        )
    if isinstance(cell, CudnnCompatibleGRUCell):
        g = v["gates/kernel"].T  # [2H, I+H], row blocks r, u
        r, u = rows(g, 0), rows(g, 1)
        kin = v["candidate/input_projection/kernel"].T
        khid = v["candidate/hidden_projection/kernel"].T
        gb = v["gates/bias"]
        return (
            [r[:, :depth], u[:, :depth], kin, r[:, depth:], u[:, depth:], khid],
            [
                rows(gb, 0),
                rows(gb, 1),
                v["candidate/input_projection/bias"],
                zeros,
                zeros,
                v["candidate/hidden_projection/bias"],
            ],
        )
    w = v["kernel"].T
    return [w[:, :depth], w[:, depth:]], [v["bias"], zeros]


def oracle(
    mode: str,
    cells: list[Cell],
    x: np.ndarray,
    h0: np.ndarray,
    c0: np.ndarray | None,
    *,
    bidirectional: bool,
    lengths: np.ndarray | None,
    time_major: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``cells`` in block order (layer 0 [fw, bw], layer 1 ...)."""
    weights: list[np.ndarray] = []
    biases: list[np.ndarray] = []
    for cell in cells:
        w, b = to_cudnn(cell)
        weights += w
        biases += b
    return oracle_forward(
        mode,
        x,
        h0,
        c0,
        weights,
        biases,
        num_layers=len(cells) // (2 if bidirectional else 1),
        bidirectional=bidirectional,
        sequence_lengths=lengths,
        time_major=time_major,
    )


def cell_state(mode: str, h: np.ndarray, c: np.ndarray | None) -> Any:
    if mode == "lstm":
        assert c is not None
        return LSTMStateTuple(torch.from_numpy(c), torch.from_numpy(h))
    return torch.from_numpy(h)


def check_state(mode: str, got: Any, h: np.ndarray, c: np.ndarray | None) -> None:
    if mode == "lstm":
        assert isinstance(got, LSTMStateTuple) and c is not None
        np.testing.assert_allclose(got.c.detach().numpy(), c, atol=1e-10, rtol=0)
        got = got.h
    np.testing.assert_allclose(got.detach().numpy(), h, atol=1e-10, rtol=0)


def random_problem(
    rng: np.random.Generator, mode: str, blocks: int, steps: int, batch: int, depth: int, units: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
    """Time-major x, states [blocks, B, H], lengths in [1, T] with both ends present."""
    x = rng.uniform(-1, 1, (steps, batch, depth))
    h0 = rng.uniform(-1, 1, (blocks, batch, units))
    c0 = rng.uniform(-1, 1, (blocks, batch, units)) if mode == "lstm" else None
    lengths = rng.integers(1, steps + 1, batch)
    lengths[0] = steps
    lengths[-1] = 1 if batch > 1 else steps
    return x, h0, c0, lengths


def leaves(state: Any) -> list[torch.Tensor]:
    if isinstance(state, torch.Tensor):
        return [state]
    return [t for s in state for t in leaves(s)]


def assert_padding_is_zero(out: torch.Tensor, lengths: np.ndarray, time_major: bool) -> None:
    out = out if time_major else out.transpose(0, 1)
    for b, n in enumerate(lengths):
        assert bool((out[int(n) :, b] == 0).all())


# -- the math against the oracle ----------------------------------------------------------------


@pytest.mark.parametrize("time_major", [True, False])
@pytest.mark.parametrize("varlen", [False, True])
@pytest.mark.parametrize("layers", [1, 2, 3])
@pytest.mark.parametrize("mode", MODES)
def test_dynamic_rnn_multi_cell_matches_oracle(
    mode: str, layers: int, varlen: bool, time_major: bool
) -> None:
    rng = np.random.default_rng(layers * 10 + varlen)
    steps, batch, depth, units = 5, 3, 2, 3
    cells = [make_cell(mode, units) for _ in range(layers)]
    stack = MultiRNNCell(cells)
    stack.build(depth)
    randomize(cells, rng)
    x, h0, c0, lengths = random_problem(rng, mode, layers, steps, batch, depth, units)
    x_in = x if time_major else x.transpose(1, 0, 2)
    initial = tuple(
        cell_state(mode, h0[layer], None if c0 is None else c0[layer]) for layer in range(layers)
    )
    lens = lengths if varlen else None

    out, final = dynamic_rnn(stack, torch.from_numpy(x_in), initial, lens, time_major)
    want_out, h_n, c_n = oracle(
        mode, cells, x_in, h0, c0, bidirectional=False, lengths=lens, time_major=time_major
    )

    np.testing.assert_allclose(out.detach().numpy(), want_out, atol=1e-10, rtol=0)
    assert isinstance(final, tuple) and len(final) == layers
    for layer in range(layers):
        check_state(mode, final[layer], h_n[layer], None if c_n is None else c_n[layer])
    if varlen:
        assert_padding_is_zero(out, lengths, time_major)


@pytest.mark.parametrize("api", ["function", "module"])
@pytest.mark.parametrize("time_major", [True, False])
@pytest.mark.parametrize("varlen", [False, True])
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("mode", MODES)
def test_stack_bidirectional_matches_oracle(
    mode: str, layers: int, varlen: bool, time_major: bool, api: str
) -> None:
    rng = np.random.default_rng(100 + layers * 10 + varlen)
    steps, batch, depth, units = 5, 3, 2, 3
    fw = [make_cell(mode, units) for _ in range(layers)]
    bw = [make_cell(mode, units) for _ in range(layers)]
    stack = BidirectionalStack(fw, bw)
    stack.build(depth)
    blocks = [c for pair in zip(fw, bw) for c in pair]  # the oracle's order: l*2 + dir
    randomize(blocks, rng)
    x, h0, c0, lengths = random_problem(rng, mode, 2 * layers, steps, batch, depth, units)
    x_in = x if time_major else x.transpose(1, 0, 2)
    init = [cell_state(mode, h0[k], None if c0 is None else c0[k]) for k in range(2 * layers)]
    lens = lengths if varlen else None
    args = (torch.from_numpy(x_in), init[0::2], init[1::2], lens, time_major)

    if api == "module":
        out, states_fw, states_bw = stack(*args)
    else:
        out, states_fw, states_bw = stack_bidirectional_dynamic_rnn(fw, bw, *args)
    want_out, h_n, c_n = oracle(
        mode, blocks, x_in, h0, c0, bidirectional=True, lengths=lens, time_major=time_major
    )

    np.testing.assert_allclose(out.detach().numpy(), want_out, atol=1e-10, rtol=0)
    assert len(states_fw) == len(states_bw) == layers
    for layer in range(layers):
        for d, states in enumerate((states_fw, states_bw)):
            k = layer * 2 + d
            check_state(mode, states[layer], h_n[k], None if c_n is None else c_n[k])
    if varlen:
        assert_padding_is_zero(out, lengths, time_major)


@pytest.mark.parametrize("mode", MODES)
def test_single_cell_default_state_and_size_one(mode: str) -> None:
    """A bare cell (no MultiRNNCell), zero initial state, and every size 1."""
    rng = np.random.default_rng(7)
    for steps, batch, depth, units in [(1, 1, 1, 1), (4, 2, 3, 1), (3, 1, 1, 2)]:
        cell = make_cell(mode, units)
        cell.build(depth)
        randomize([cell], rng)
        x = rng.uniform(-1, 1, (steps, batch, depth))
        zeros = np.zeros((1, batch, units))
        out, final = dynamic_rnn(cell, torch.from_numpy(x), time_major=True)
        want, h_n, c_n = oracle(
            mode,
            [cell],
            x,
            zeros,
            zeros if mode == "lstm" else None,
            bidirectional=False,
            lengths=None,
            time_major=True,
        )
        np.testing.assert_allclose(out.detach().numpy(), want, atol=1e-10, rtol=0)
        check_state(mode, final, h_n[0], None if c_n is None else c_n[0])


def test_bidirectional_with_different_cells_per_direction() -> None:
    """Layer widths follow H_fw + H_bw; zero states by default."""
    fw = [CudnnCompatibleLSTMCell(2, dtype=F64), BasicRNNCell(3, dtype=F64)]
    bw = [CudnnCompatibleGRUCell(4, dtype=F64), BasicRNNCell(1, dtype=F64)]
    out, states_fw, states_bw = stack_bidirectional_dynamic_rnn(
        fw, bw, torch.ones(2, 6, 3, dtype=F64), sequence_length=[6, 1], time_major=False
    )
    assert tuple(out.shape) == (2, 6, 4)
    assert (fw[1].input_depth, bw[1].input_depth) == (6, 6)
    assert isinstance(states_fw[0], LSTMStateTuple) and isinstance(states_bw[0], torch.Tensor)
    assert tuple(states_bw[0].shape) == (2, 4)
    assert bool((out[1, 1:] == 0).all())


# -- gradients ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_gradients_reach_every_parameter_and_not_padding(mode: str) -> None:
    torch.manual_seed(0)
    rng = np.random.default_rng(3)
    uni = MultiRNNCell([make_cell(mode, 3), make_cell(mode, 3)])
    bi = BidirectionalStack(
        [make_cell(mode, 2) for _ in range(2)], [make_cell(mode, 2) for _ in range(2)]
    )
    lengths = np.array([4, 2, 1])
    for model in (uni, bi):
        x = torch.from_numpy(rng.uniform(-1, 1, (4, 3, 2))).requires_grad_()
        if isinstance(model, MultiRNNCell):
            out, state = dynamic_rnn(model, x, sequence_length=lengths, time_major=True)
            states: Any = state
        else:
            out, s_fw, s_bw = model(x, sequence_length=lengths, time_major=True)
            states = (s_fw, s_bw)
        loss = out.sum() + sum(t.sum() for t in leaves(states))
        loss.backward()
        params = dict(model.named_parameters())
        assert params, "the model was built by its first call"
        for name, p in params.items():
            assert p.grad is not None and bool(p.grad.isfinite().all()), name
            assert float(p.grad.abs().sum()) > 0, name
        assert x.grad is not None
        for b, n in enumerate(lengths):
            assert bool((x.grad[n:, b] == 0).all())
        assert bool((x.grad != 0).any())


@pytest.mark.parametrize("mode", MODES)
def test_gradcheck_bidirectional_varlen(mode: str) -> None:
    torch.manual_seed(1)
    fw, bw = [make_cell(mode, 2)], [make_cell(mode, 2)]
    stack = BidirectionalStack(fw, bw)
    stack.build(2)
    params = list(stack.parameters())
    x = torch.rand(3, 2, 2, dtype=F64, requires_grad=True)

    def run(inputs: torch.Tensor, *_: torch.Tensor) -> torch.Tensor:
        return stack(inputs, sequence_length=[3, 2], time_major=True)[0]

    assert torch.autograd.gradcheck(run, (x, *params))


def test_optimizer_step_changes_the_parameters() -> None:
    torch.manual_seed(2)
    stack = MultiRNNCell([CudnnCompatibleGRUCell(3), CudnnCompatibleLSTMCell(2)])
    stack.build(4)
    before = {k: v.clone() for k, v in stack.state_dict().items()}
    opt = torch.optim.SGD(stack.parameters(), lr=0.1)
    out, _ = dynamic_rnn(stack, torch.rand(3, 2, 4), time_major=True)
    out.square().sum().backward()
    opt.step()
    after = stack.state_dict()
    assert list(after) == [
        "cells.0.gates_kernel",
        "cells.0.gates_bias",
        "cells.0.candidate_input_projection_kernel",
        "cells.0.candidate_hidden_projection_kernel",
        "cells.0.candidate_input_projection_bias",
        "cells.0.candidate_hidden_projection_bias",
        "cells.1.kernel",
        "cells.1.bias",
    ]
    assert all(not torch.equal(before[k], after[k]) for k in after)


# -- sizes, states, variables -------------------------------------------------------------------


def test_state_and_output_sizes() -> None:
    lstm = CudnnCompatibleLSTMCell(3)
    assert lstm.state_size == LSTMStateTuple(c=3, h=3) and lstm.output_size == 3
    zero = lstm.zero_state(2)
    assert isinstance(zero, LSTMStateTuple)
    assert tuple(zero.c.shape) == tuple(zero.h.shape) == (2, 3)
    assert zero.c.dtype == torch.float32 and not bool(zero.c.any())
    assert lstm.zero_state(1, torch.float64).h.dtype == torch.float64
    for cell in (CudnnCompatibleGRUCell(4), BasicRNNCell(4)):
        assert cell.state_size == cell.output_size == 4
        z = cell.zero_state(5)
        assert isinstance(z, torch.Tensor) and tuple(z.shape) == (5, 4) and not bool(z.any())
    stack = MultiRNNCell([CudnnCompatibleLSTMCell(3), CudnnCompatibleGRUCell(2)])
    assert stack.state_size == (LSTMStateTuple(3, 3), 2) and stack.output_size == 2
    z0, z1 = stack.zero_state(2)
    assert isinstance(z0, LSTMStateTuple) and tuple(z1.shape) == (2, 2)  # type: ignore[union-attr]


def test_modes_and_scope_names() -> None:
    assert CudnnCompatibleLSTMCell.scope_name == "cudnn_compatible_lstm_cell"
    assert CudnnCompatibleGRUCell.scope_name == "cudnn_compatible_gru_cell"
    assert BasicRNNCell.scope_name == "basic_rnn_cell"
    assert CudnnCompatibleLSTMCell(1).rnn_mode == "lstm"
    assert CudnnCompatibleGRUCell(1).rnn_mode == "gru"
    for act, mode in [
        (None, "rnn_tanh"),  # TF's default
        ("tanh", "rnn_tanh"),
        (torch.tanh, "rnn_tanh"),
        ("relu", "rnn_relu"),
        (torch.relu, "rnn_relu"),
        (torch.nn.functional.relu, "rnn_relu"),
    ]:
        assert BasicRNNCell(2, activation=act).rnn_mode == mode


def test_variables_are_created_on_the_first_call() -> None:
    cell = CudnnCompatibleLSTMCell(2, reuse=True)  # reuse is accepted and ignored
    assert not cell.built and cell.input_depth is None
    assert list(cell.parameters()) == []
    assert cell.tf_variable_shapes() == {"kernel": (None, 8), "bias": (8,)}
    cell(torch.zeros(1, 3), cell.zero_state(1))
    assert cell.built and cell.input_depth == 3
    assert cell.tf_variable_shapes() == {"kernel": (5, 8), "bias": (8,)}
    cell.build(3)  # the same depth again: nothing changes
    assert len(list(cell.parameters())) == 2


@pytest.mark.parametrize(
    "cell,shapes",
    [
        (CudnnCompatibleLSTMCell(4), {"kernel": (7, 16), "bias": (16,)}),
        (
            CudnnCompatibleGRUCell(4),
            {
                "gates/kernel": (7, 8),
                "gates/bias": (8,),
                "candidate/input_projection/kernel": (3, 4),
                "candidate/hidden_projection/kernel": (4, 4),
                "candidate/input_projection/bias": (4,),
                "candidate/hidden_projection/bias": (4,),
            },
        ),
        (BasicRNNCell(4), {"kernel": (7, 4), "bias": (4,)}),
    ],
)
def test_variable_names_shapes_and_attributes(
    cell: Cell, shapes: dict[str, tuple[int, ...]]
) -> None:
    cell.build(3)
    variables = cell.tf_variables()
    assert {n: tuple(p.shape) for n, p in variables.items()} == shapes
    assert list(variables) == list(shapes)  # TF's creation order
    assert list(dict(cell.named_parameters())) == [n.replace("/", "_") for n in shapes]
    for name, p in variables.items():
        assert isinstance(p, torch.nn.Parameter) and p.dtype == torch.float32
        assert p is getattr(cell, name.replace("/", "_"))


def test_initial_values() -> None:
    torch.manual_seed(0)
    depth, units = 5, 8
    lstm, gru, rnn = (
        CudnnCompatibleLSTMCell(units),
        CudnnCompatibleGRUCell(units),
        BasicRNNCell(units),
    )
    for cell in (lstm, gru, rnn):
        cell.build(depth)

    def glorot_ok(p: torch.Tensor) -> None:
        p = p.detach()
        limit = math.sqrt(6 / (p.shape[0] + p.shape[1]))
        top = float(p.abs().max())
        assert 0.9 * limit < top <= limit  # hundreds of draws come close to the bound
        assert abs(float(p.mean())) < 0.2 * limit

    lv, gv, rv = lstm.tf_variables(), gru.tf_variables(), rnn.tf_variables()
    glorot_ok(lv["kernel"])  # one matrix [I+H, 4H]: limit sqrt(6 / (I + H + 4H))
    assert math.sqrt(6 / (depth + 5 * units)) >= float(lv["kernel"].detach().abs().max())
    glorot_ok(rv["kernel"])
    for name in ("gates/kernel", "candidate/input_projection/kernel"):
        glorot_ok(gv[name])  # one Glorot bound per matrix
    assert float(gv["candidate/hidden_projection/kernel"].detach().abs().max()) <= math.sqrt(6 / 16)
    assert bool((gv["gates/bias"] == 1.0).all())
    for p in (lv["bias"], rv["bias"], gv["candidate/input_projection/bias"]):
        assert bool((p == 0).all())
    assert bool((gv["candidate/hidden_projection/bias"] == 0).all())

    torch.manual_seed(0)
    again = CudnnCompatibleLSTMCell(units)
    again.build(depth)
    assert torch.equal(again.tf_variables()["kernel"], lv["kernel"])  # torch's default RNG


def test_gru_kernel_initializer() -> None:
    seen: list[tuple[tuple[int, ...], torch.dtype]] = []

    def init(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        seen.append((shape, dtype))
        return torch.full(shape, 0.25, dtype=torch.float32)

    cell = CudnnCompatibleGRUCell(2, kernel_initializer=init, dtype=F64)
    cell.build(3)
    assert seen == [((5, 4), F64), ((3, 2), F64), ((2, 2), F64)]
    for name, p in cell.tf_variables().items():
        want = 0.25 if name.endswith("kernel") else (1.0 if name == "gates/bias" else 0.0)
        assert p.dtype == F64 and bool((p == want).all()), name


@pytest.mark.parametrize("dtype,tol", [(torch.float16, 5e-3), (torch.bfloat16, 3e-2)])
@pytest.mark.parametrize("mode", MODES)
def test_half_precision_follows_float64(mode: str, dtype: torch.dtype, tol: float) -> None:
    torch.manual_seed(4)
    half, full = make_cell(mode, 3, dtype), make_cell(mode, 3)
    half.build(2)
    full.build(2)
    with torch.no_grad():
        for name, p in half.tf_variables().items():
            full.tf_variables()[name].copy_(p)
    x = torch.rand(4, 2, 2).to(dtype)
    out, _ = dynamic_rnn(half, x, sequence_length=[4, 3], time_major=True)
    want, _ = dynamic_rnn(full, x.double(), sequence_length=[4, 3], time_major=True)
    assert out.dtype == dtype
    torch.testing.assert_close(out.double(), want, atol=tol, rtol=0)


def test_first_call_under_inference_mode_makes_trainable_variables() -> None:
    cell = CudnnCompatibleGRUCell(2)
    with torch.inference_mode():
        cell(torch.ones(1, 3), cell.zero_state(1))
    out, _ = cell(torch.ones(1, 3), cell.zero_state(1))
    out.sum().backward()
    assert all(p.grad is not None for p in cell.parameters())


def test_dtype_and_device() -> None:
    cell = BasicRNNCell(2, dtype="float64", device="cpu")
    h, _ = cell(torch.ones(1, 3, dtype=F64), torch.zeros(1, 2, dtype=F64))
    assert cell.dtype == h.dtype == F64 and cell.device == torch.device("cpu")
    cell.float()
    assert cell.dtype == torch.float32  # follows the parameters once built


# -- checkpoints --------------------------------------------------------------------------------

LSTM_2X2 = [
    "rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/kernel",
    "rnn/multi_rnn_cell/cell_1/cudnn_compatible_lstm_cell/kernel",
    "rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/bias",
    "rnn/multi_rnn_cell/cell_1/cudnn_compatible_lstm_cell/bias",
]


@pytest.mark.parametrize("scope,prefix", [(None, ""), ("", ""), ("main", "main/")])
def test_multi_rnn_cell_checkpoint_names(scope: str | None, prefix: str) -> None:
    stack = MultiRNNCell([CudnnCompatibleLSTMCell(2), CudnnCompatibleLSTMCell(2)], scope=scope)
    assert isinstance(stack, Checkpointable)
    assert stack.checkpoint_shapes() == {
        prefix + LSTM_2X2[0]: (None, 8),
        prefix + LSTM_2X2[1]: (4, 8),
        prefix + LSTM_2X2[2]: (8,),
        prefix + LSTM_2X2[3]: (8,),
    }
    stack.build(3)
    entries = stack.checkpoint_entries()
    assert list(entries) == [prefix + n for n in LSTM_2X2]
    assert [tuple(t.shape) for t in entries.values()] == [(5, 8), (4, 8), (8,), (8,)]
    assert all(not t.requires_grad for t in entries.values())
    assert torch.equal(entries[prefix + LSTM_2X2[0]], stack._layers[0].tf_variables()["kernel"])


def test_gru_and_rnn_checkpoint_names() -> None:
    stack = MultiRNNCell([CudnnCompatibleGRUCell(2), BasicRNNCell(3)])
    stack.build(1)
    gru = "rnn/multi_rnn_cell/cell_0/cudnn_compatible_gru_cell/"
    rnn = "rnn/multi_rnn_cell/cell_1/basic_rnn_cell/"
    assert {k: tuple(v.shape) for k, v in stack.checkpoint_entries().items()} == {
        gru + "gates/kernel": (3, 4),
        gru + "candidate/input_projection/kernel": (1, 2),
        gru + "candidate/hidden_projection/kernel": (2, 2),
        rnn + "kernel": (5, 3),
        gru + "gates/bias": (4,),
        gru + "candidate/input_projection/bias": (2,),
        gru + "candidate/hidden_projection/bias": (2,),
        rnn + "bias": (3,),
    }
    assert list(stack.checkpoint_entries())[3] == rnn + "kernel"  # kernels first


@pytest.mark.parametrize("scope,prefix", [(None, ""), ("s", "s/")])
def test_bidirectional_stack_checkpoint_names(scope: str | None, prefix: str) -> None:
    stack = BidirectionalStack(
        [CudnnCompatibleLSTMCell(2), CudnnCompatibleLSTMCell(2)],
        [CudnnCompatibleLSTMCell(2), CudnnCompatibleLSTMCell(2)],
        scope=scope,
    )
    names = [
        "stack_bidirectional_rnn/cell_0/bidirectional_rnn/fw/cudnn_compatible_lstm_cell/kernel",
        "stack_bidirectional_rnn/cell_0/bidirectional_rnn/bw/cudnn_compatible_lstm_cell/kernel",
        "stack_bidirectional_rnn/cell_1/bidirectional_rnn/fw/cudnn_compatible_lstm_cell/kernel",
        "stack_bidirectional_rnn/cell_1/bidirectional_rnn/bw/cudnn_compatible_lstm_cell/kernel",
        "stack_bidirectional_rnn/cell_0/bidirectional_rnn/fw/cudnn_compatible_lstm_cell/bias",
        "stack_bidirectional_rnn/cell_0/bidirectional_rnn/bw/cudnn_compatible_lstm_cell/bias",
        "stack_bidirectional_rnn/cell_1/bidirectional_rnn/fw/cudnn_compatible_lstm_cell/bias",
        "stack_bidirectional_rnn/cell_1/bidirectional_rnn/bw/cudnn_compatible_lstm_cell/bias",
    ]
    shapes = [(None, 8), (None, 8), (6, 8), (6, 8), (8,), (8,), (8,), (8,)]
    want = {prefix + n: shape for n, shape in zip(names, shapes)}
    assert list(stack.checkpoint_shapes().items()) == list(want.items())
    stack.build(3)
    assert list(stack.checkpoint_entries()) == list(want)
    assert list(stack.checkpoint_shapes().values())[:4] == [(5, 8), (5, 8), (6, 8), (6, 8)]


def test_checkpoint_spec() -> None:
    stack = MultiRNNCell([BasicRNNCell(2, "relu"), CudnnCompatibleGRUCell(3)], scope="m")
    stack.build(4)
    spec = stack.checkpoint_spec()
    assert spec == {
        "kind": "multi_rnn_cell",
        "scope": "m",
        "cells": [
            {
                "cell": "basic_rnn_cell",
                "mode": "rnn_relu",
                "num_units": 2,
                "input_depth": 4,
                "dtype": "float32",
            },
            {
                "cell": "cudnn_compatible_gru_cell",
                "mode": "gru",
                "num_units": 3,
                "input_depth": 2,
                "dtype": "float32",
            },
        ],
    }
    bi = BidirectionalStack([CudnnCompatibleLSTMCell(1)], [CudnnCompatibleLSTMCell(1)])
    bi_spec = bi.checkpoint_spec()
    assert bi_spec["kind"] == "stack_bidirectional_rnn" and bi_spec["scope"] is None
    assert bi_spec["cells_bw"][0]["input_depth"] is None
    assert json.loads(json.dumps(spec)) == spec and json.loads(json.dumps(bi_spec)) == bi_spec


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["multi", "bidirectional"])
def test_checkpoint_load_builds_unbuilt_cells(mode: str, kind: str) -> None:
    def model() -> MultiRNNCell | BidirectionalStack:
        if kind == "multi":
            return MultiRNNCell([make_cell(mode, 3), make_cell(mode, 3)], scope="x")
        return BidirectionalStack(
            [make_cell(mode, 3), make_cell(mode, 3)], [make_cell(mode, 3), make_cell(mode, 3)]
        )

    rng = np.random.default_rng(5)
    src, dst = model(), model()
    src.build(4)
    named = [cell for _, cell, _ in src._named_cells()]
    randomize(named, rng)
    assert not dst.built
    dst.checkpoint_load(src.checkpoint_entries())
    assert dst.built
    for name, value in src.checkpoint_entries().items():
        assert torch.equal(dst.checkpoint_entries()[name], value), name
    x = torch.from_numpy(rng.uniform(-1, 1, (3, 2, 4)))
    if isinstance(src, MultiRNNCell):
        assert isinstance(dst, MultiRNNCell)
        out_src = dynamic_rnn(src, x, time_major=True)[0]
        out_dst = dynamic_rnn(dst, x, time_major=True)[0]
    else:
        out_src, out_dst = src(x, time_major=True)[0], dst(x, time_major=True)[0]
    assert torch.equal(out_src, out_dst)
    snapshot = {k: v.clone() for k, v in dst.checkpoint_entries().items()}
    with torch.no_grad():  # the load copied: changing the source leaves dst alone
        for p in src.parameters():
            p.add_(1.0)
    assert all(torch.equal(dst.checkpoint_entries()[k], v) for k, v in snapshot.items())
    dst.checkpoint_load(src.checkpoint_entries())  # into built cells too
    for name, value in src.checkpoint_entries().items():
        assert torch.equal(dst.checkpoint_entries()[name], value), name


def test_checkpoint_load_errors_change_nothing() -> None:
    src = MultiRNNCell([CudnnCompatibleGRUCell(2), CudnnCompatibleGRUCell(2)])
    src.build(3)
    good = src.checkpoint_entries()
    dst = MultiRNNCell([CudnnCompatibleGRUCell(2), CudnnCompatibleGRUCell(2)])

    bad = dict(good)
    first = "rnn/multi_rnn_cell/cell_0/cudnn_compatible_gru_cell/"
    del bad[first + "gates/bias"]
    bad["rnn/extra"] = torch.zeros(1)
    bad["rnn/multi_rnn_cell/cell_1/cudnn_compatible_gru_cell/gates/kernel"] = torch.zeros(5, 4)
    with pytest.raises(
        ValueError,
        match=r"MultiRNNCell\.checkpoint_load: the tensors do not fit this model; missing: "
        r"rnn/multi_rnn_cell/cell_0/cudnn_compatible_gru_cell/gates/bias; unexpected: rnn/extra; "
        r"misshapen: rnn/multi_rnn_cell/cell_1/cudnn_compatible_gru_cell/gates/kernel \(5, 4\) "
        r"\(expected \(4, 4\)\)\.",
    ):
        dst.checkpoint_load(bad)
    assert not dst.built

    inconsistent = dict(good)
    inconsistent[first + "candidate/input_projection/kernel"] = torch.zeros(4, 2)
    with pytest.raises(
        ValueError,
        match=r"MultiRNNCell\.checkpoint_load: the tensors of rnn/multi_rnn_cell/cell_0/"
        r"cudnn_compatible_gru_cell imply no single input depth >= 1 for a cell with "
        r"num_units=2: .*gates/kernel \(5, 4\), .*input_projection/kernel \(4, 2\)",
    ):
        dst.checkpoint_load(inconsistent)
    assert not dst.built

    built = MultiRNNCell([CudnnCompatibleGRUCell(2), CudnnCompatibleGRUCell(2)])
    built.build(1)
    with pytest.raises(
        ValueError,
        match=r"MultiRNNCell\.checkpoint_load: the tensors do not fit this model; misshapen: "
        r"rnn/multi_rnn_cell/cell_0/cudnn_compatible_gru_cell/gates/kernel \(5, 4\) "
        r"\(expected \(3, 4\)\), .*input_projection/kernel \(3, 2\) \(expected \(1, 2\)\)\.",
    ):
        built.checkpoint_load(good)

    with pytest.raises(
        RuntimeError,
        match=r"MultiRNNCell: rnn/multi_rnn_cell/cell_0/cudnn_compatible_gru_cell has no "
        r"variables yet .* call build\(input_depth\) before saving\.",
    ):
        dst.checkpoint_entries()


# -- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [CudnnCompatibleLSTMCell, CudnnCompatibleGRUCell, BasicRNNCell])
def test_bad_num_units(cls: type[Cell]) -> None:
    name = cls.__name__
    with pytest.raises(ValueError, match=rf"^{name}: num_units must be an int >= 1, got 0\.$"):
        cls(0)
    with pytest.raises(TypeError, match=rf"^{name}: num_units must be an int >= 1, got float 2\.5"):
        cls(2.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=rf"{name}: num_units must be an int >= 1, got bool True"):
        cls(True)
    with pytest.raises(ValueError, match=rf"{name}: only float16, bfloat16, float32 and float64"):
        cls(2, dtype=torch.int32)


@pytest.mark.parametrize("activation", ["sigmoid", torch.sigmoid, "", ["tanh"]])
def test_bad_activation(activation: Any) -> None:
    with pytest.raises(
        ValueError,
        match=r"BasicRNNCell: activation must be 'tanh' or 'relu' \(or torch\.tanh / "
        r"torch\.relu; None means tanh\), the two that cuDNN has, got ",
    ):
        BasicRNNCell(2, activation=activation)


def test_bad_kernel_initializer() -> None:
    with pytest.raises(
        TypeError, match=r"CudnnCompatibleGRUCell: kernel_initializer must be None or a callable"
    ):
        CudnnCompatibleGRUCell(2, kernel_initializer=1.0)  # type: ignore[arg-type]
    cell = CudnnCompatibleGRUCell(2, kernel_initializer=lambda s, d: torch.zeros(1))
    with pytest.raises(
        ValueError,
        match=r"CudnnCompatibleGRUCell: kernel_initializer returned shape \(1,\) for "
        r"'gates/kernel', expected \(5, 4\)\.",
    ):
        cell.build(3)
    assert not cell.built
    cell = CudnnCompatibleGRUCell(2, kernel_initializer=lambda s, d: np.zeros(s))  # type: ignore
    with pytest.raises(
        TypeError, match=r"kernel_initializer must return a torch\.Tensor, got ndarray"
    ):
        cell.build(3)


@pytest.mark.parametrize(
    "state,error,message",
    [
        (
            torch.zeros(2, 3),
            ValueError,
            r"CudnnCompatibleLSTMCell: Expecting state to be a tuple with length 2 \(c, h\), "
            r"got a tensor of shape \(2, 3\); use LSTMStateTuple\(c, h\)",
        ),
        (
            (torch.zeros(2, 3),) * 3,
            ValueError,
            r"Expecting state to be a tuple with length 2 \(c, h\), got a tuple of length 3",
        ),
        (
            (torch.zeros(2, 3), torch.zeros(2, 4)),
            ValueError,
            r"CudnnCompatibleLSTMCell: state\.h must have shape \[batch, num_units\] = \(2, 3\), "
            r"got \(2, 4\)\.",
        ),
        (
            (torch.zeros(2, 3), 0.0),
            TypeError,
            r"CudnnCompatibleLSTMCell: state\.h must be a tensor \[batch, num_units\], got float",
        ),
    ],
)
def test_bad_lstm_state(state: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        CudnnCompatibleLSTMCell(3)(torch.zeros(2, 1), state)


def test_bad_gru_and_rnn_state() -> None:
    for cell in (CudnnCompatibleGRUCell(3), BasicRNNCell(3)):
        name = type(cell).__name__
        with pytest.raises(
            TypeError,
            match=rf"{name}: state must be a tensor \[batch, num_units\], got a tuple of length 1",
        ):
            cell(torch.zeros(2, 1), (torch.zeros(2, 3),))
        with pytest.raises(ValueError, match=rf"{name}: state must have shape .* = \(2, 3\)"):
            cell(torch.zeros(2, 1), torch.zeros(3, 3))


def test_bad_inputs() -> None:
    cell = CudnnCompatibleLSTMCell(3)
    state = cell.zero_state(2)
    with pytest.raises(
        ValueError,
        match=r"CudnnCompatibleLSTMCell: inputs must be a 2-D tensor \[batch, input_depth\] with "
        r"input_depth >= 1, got shape \(1, 2, 4\)\.",
    ):
        cell(torch.zeros(1, 2, 4), state)
    with pytest.raises(ValueError, match=r"input_depth >= 1, got shape \(2, 0\)\."):
        cell(torch.zeros(2, 0), state)
    with pytest.raises(TypeError, match=r"CudnnCompatibleLSTMCell: inputs must be a torch\.Tensor"):
        cell([[1.0]], state)
    with pytest.raises(
        TypeError,
        match=r"CudnnCompatibleLSTMCell: inputs have dtype torch\.float64 but the cell's variables "
        r"are torch\.float32; convert the inputs with \.to\(torch\.float32\)",
    ):
        cell(torch.zeros(2, 4, dtype=F64), state)
    assert not cell.built
    cell(torch.zeros(2, 4), state)
    with pytest.raises(
        ValueError,
        match=r"CudnnCompatibleLSTMCell: the variables were built for input depth 4, got input "
        r"depth 5; a cell serves one input depth",
    ):
        cell(torch.zeros(2, 5), state)
    with pytest.raises(ValueError, match=r"built for input depth 4, got input depth 2"):
        cell.build(2)
    with pytest.raises(
        ValueError, match=r"CudnnCompatibleLSTMCell\.build: input_depth must be an int >= 1, got 0"
    ):
        CudnnCompatibleLSTMCell(3).build(0)
    with pytest.raises(
        ValueError,
        match=r"CudnnCompatibleLSTMCell\.zero_state: batch_size must be an int >= 1, got 0\.",
    ):
        cell.zero_state(0)
    with pytest.raises(
        RuntimeError,
        match=r"BasicRNNCell: the variables do not exist yet .* call build\(input_depth\) first\.",
    ):
        BasicRNNCell(2).tf_variables()


@pytest.mark.parametrize(
    "lengths,error,message",
    [
        ([0, 3], ValueError, r"must be in \[1, 4\] .* got values from 0 to 3\."),
        ([5, 3], ValueError, r"must be in \[1, 4\] .* got values from 3 to 5\."),
        ([4, 3, 2], ValueError, r"must have shape \[batch\] = \(2,\), got \(3,\)\."),
        (torch.tensor([[4, 3]]), ValueError, r"must have shape \[batch\] = \(2,\), got \(1, 2\)"),
        ([4.0, 3.0], TypeError, r"must be integers .* of dtype float64\."),
        (torch.tensor([4.0, 3.0]), TypeError, r"must hold integers, got dtype torch\.float32\."),
    ],
)
def test_bad_sequence_length(lengths: Any, error: type[Exception], message: str) -> None:
    x = torch.zeros(4, 2, 1)
    with pytest.raises(error, match=r"dynamic_rnn: sequence_length " + message):
        dynamic_rnn(BasicRNNCell(2), x, sequence_length=lengths, time_major=True)
    with pytest.raises(error, match=r"stack_bidirectional_dynamic_rnn: sequence_length " + message):
        stack_bidirectional_dynamic_rnn(
            [BasicRNNCell(2)], [BasicRNNCell(2)], x, None, None, lengths, time_major=True
        )


def test_bad_driver_arguments() -> None:
    cell = BasicRNNCell(2)
    with pytest.raises(
        ValueError,
        match=r"dynamic_rnn: inputs must be a 3-D tensor \[batch, time, depth\] \(time_major="
        r"False\) with at least one step, one sequence and one feature, got shape \(2, 1\)\.",
    ):
        dynamic_rnn(cell, torch.zeros(2, 1), time_major=False)
    with pytest.raises(ValueError, match=r"got shape \(0, 2, 1\)"):
        dynamic_rnn(cell, torch.zeros(0, 2, 1))
    with pytest.raises(TypeError, match=r"dynamic_rnn: time_major must be a bool, got int 1\."):
        dynamic_rnn(cell, torch.zeros(1, 2, 1), time_major=1)  # type: ignore[arg-type]
    with pytest.raises(
        TypeError,
        match=r"dynamic_rnn: cell must be a CudnnCompatibleLSTMCell, CudnnCompatibleGRUCell, "
        r"BasicRNNCell or MultiRNNCell, got GRUCell\.",
    ):
        dynamic_rnn(torch.nn.GRUCell(1, 2), torch.zeros(1, 2, 1))  # type: ignore[arg-type]
    with pytest.raises(
        ValueError,
        match=r"stack_bidirectional_dynamic_rnn: cells_fw and cells_bw must have the same number "
        r"of layers, got 1 and 2\.",
    ):
        stack_bidirectional_dynamic_rnn(
            [cell], [BasicRNNCell(2), BasicRNNCell(2)], torch.zeros(1, 1, 1)
        )
    with pytest.raises(
        ValueError, match=r"cells_fw must hold at least one cell, got an empty list"
    ):
        stack_bidirectional_dynamic_rnn([], [], torch.zeros(1, 1, 1))
    with pytest.raises(TypeError, match=r"cells_bw must be a list of cells, got BasicRNNCell"):
        stack_bidirectional_dynamic_rnn([cell], cell, torch.zeros(1, 1, 1))  # type: ignore
    with pytest.raises(
        ValueError,
        match=r"stack_bidirectional_dynamic_rnn: initial_states_bw must be None or a list with one "
        r"state \(or None\) per layer \(1\), got a list of length 2\.",
    ):
        stack_bidirectional_dynamic_rnn(
            [cell], [BasicRNNCell(2)], torch.zeros(1, 1, 1), None, [None, None]
        )


def test_bad_stacks() -> None:
    cell = CudnnCompatibleLSTMCell(2)
    with pytest.raises(
        ValueError,
        match=r"MultiRNNCell: state_is_tuple=False .* not supported; .* pass state_is_tuple=True",
    ):
        MultiRNNCell([cell], state_is_tuple=False)
    with pytest.raises(ValueError, match=r"MultiRNNCell: cells must hold at least one cell"):
        MultiRNNCell([])
    with pytest.raises(TypeError, match=r"MultiRNNCell: cells must be a list of cells, got"):
        MultiRNNCell(cell)  # type: ignore[arg-type]
    with pytest.raises(
        TypeError,
        match=r"MultiRNNCell: cells\[1\] must be a CudnnCompatibleLSTMCell, "
        r"CudnnCompatibleGRUCell or BasicRNNCell, got LSTMCell\.",
    ):
        MultiRNNCell([cell, torch.nn.LSTMCell(2, 2)])  # type: ignore[list-item]
    with pytest.raises(
        ValueError, match=r"MultiRNNCell: the same cell object appears more than once"
    ):
        MultiRNNCell([cell, cell])
    with pytest.raises(
        ValueError, match=r"BidirectionalStack: the same cell object appears more than once"
    ):
        BidirectionalStack([cell], [cell])
    with pytest.raises(TypeError, match=r"MultiRNNCell: scope must be a str or None, got int 3\."):
        MultiRNNCell([cell], scope=3)  # type: ignore[arg-type]
    with pytest.raises(
        ValueError,
        match=r"BidirectionalStack: cells_fw and cells_bw must have the same number of layers",
    ):
        BidirectionalStack([cell], [CudnnCompatibleLSTMCell(2), CudnnCompatibleLSTMCell(2)])
    stack = MultiRNNCell([cell, CudnnCompatibleLSTMCell(2)])
    with pytest.raises(
        ValueError,
        match=r"MultiRNNCell: state must be a tuple with one entry per cell \(2\), got a tuple of "
        r"length 1\.",
    ):
        stack(torch.zeros(1, 2), (cell.zero_state(1),))
