"""The native CPU engine: dispatch, numerics at every instruction set, bits, threads, fallback.

The full oracle grid (tests/test_ops_oracle.py) runs its float32 cases on this engine (asserted
below); here: what is particular to the engine.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import cudnn_rnn
from cudnn_rnn import engines
from cudnn_rnn.core.layout import layout_of
from cudnn_rnn.core.modes import MODES as MODE_FACTS
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.engines import loop, native, native_library, native_workspace
from cudnn_rnn.engines.common import workspace_numel
from tests.support.engines import ran, watch_engines
from tests.support.helpers import (
    assert_matches_oracle,
    make_case,
    make_op,
    run_oracle,
    run_ours,
    torch_module,
)
from tests.support.isa import isa_params
from tests.support.paths import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import sanitize  # the compiler lookup tools/sanitize.py uses (as tests/engines/test_sanitize.py)

MODES = ("lstm", "gru", "rnn_tanh", "rnn_relu")
LEVELS = native.level_names()
RELEASE_FLOATS = native_workspace.RELEASE_BYTES // 4


def test_engine_is_built_where_a_compiler_is() -> None:
    """`make test` builds the engine from source: with a C compiler here, it must have loaded."""
    if native.ENV in os.environ or not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler here, or the engine is switched by CUDNN_RNN_NATIVE")
    assert native.available(), cudnn_rnn.cpu_engine()


@pytest.fixture(params=isa_params())
def every_isa(request: pytest.FixtureRequest) -> Iterator[str]:
    """Runs a bit-equality test at each instruction set this machine can run, forced (an
    AVX-512 machine runs the AVX2 and baseline paths too): a developer on one ISA sees the
    failures of the others."""
    with native.use_level(request.param):
        yield request.param


needs_engine = pytest.mark.skipif(
    not native.available(), reason=f"native engine not loaded: {cudnn_rnn.cpu_engine()}"
)


def _spy(
    monkeypatch: pytest.MonkeyPatch, module: Any, name: str, calls: list[str], tag: str
) -> None:
    """Replaces ``module.name`` by a wrapper that appends ``tag`` to ``calls`` on each call."""
    real = getattr(module, name)

    def spy(*a: Any, **k: Any) -> Any:
        calls.append(tag)
        return real(*a, **k)

    monkeypatch.setattr(module, name, spy)


@pytest.fixture
def count_native(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Records every native forward/backward call."""
    calls: list[str] = []
    _spy(monkeypatch, native, "forward", calls, "forward")
    _spy(monkeypatch, native, "backward", calls, "backward")
    yield calls


@needs_engine
def test_cpu_float32_runs_native_by_rule() -> None:
    spec = RNNSpec("gru", 1, 4, 3)
    cpu = torch.device("cpu")
    assert cudnn_rnn.cpu_engine().startswith("native (")
    for grad in (False, True):
        for lengths in (False, True):
            for traced in (False, True):
                got = engines.select(spec, cpu, torch.float32, grad, lengths, traced)
                assert got == engines.NATIVE
    # float64 and projection keep torch's kernels (and the loop for training).
    assert engines.select(spec, cpu, torch.float64, False, False) == engines.TORCH
    proj = RNNSpec("lstm", 1, 4, 3, num_proj=2)
    assert engines.select(proj, cpu, torch.float32, True, False) == engines.LOOP


@needs_engine
def test_oracle_grid_float32_goes_through_native(count_native: list[str]) -> None:
    spec = RNNSpec("lstm", 2, 3, 2, "linear_input", "bidirectional")
    case = make_case(spec, 4, 3, seed=1, varlen=True, time_major=False)
    assert_matches_oracle(case, torch.float32, atol=1e-5, requires_grad=True)
    # The oracle's forward, then torch.nn's comparison of the gradients: forward and backward.
    assert count_native == ["forward", "forward", "backward"]


def _grid() -> list[tuple[Any, ...]]:
    cases = []
    for mode in MODES:
        for layers, direction, input_mode, varlen, time_major in (
            (1, "unidirectional", "linear_input", False, True),
            (2, "bidirectional", "skip_input", True, False),
            (2, "bidirectional", "linear_input", True, True),
            (3, "unidirectional", "skip_input", False, False),
        ):
            cases.append((mode, layers, direction, input_mode, varlen, time_major))
    return cases


#: The forward's two ways of making a product (both matrices forced one way) and the rule.
WAYS = ("rule", "packed", "in_place")


@needs_engine
@pytest.mark.parametrize("level", isa_params())
@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("case", _grid(), ids=lambda c: "-".join(map(str, c)))
@pytest.mark.parametrize(
    # (T, B, input, units): ones; tails of every vector width; two threads and several row
    # blocks of the micro-kernel (B > 6) with a partial last vector (units 40); one sequence
    # with dot products longer than a vector of 16 and a tail (input 35, units 21).
    "sizes",
    [(1, 1, 1, 1), (5, 3, 2, 19), (4, 13, 7, 40), (3, 1, 35, 21)],
    ids=["ones", "tails", "threads", "dot-tails"],
)
def test_every_isa_matches_oracle(
    level: str,
    way: str,
    case: tuple[Any, ...],
    sizes: tuple[int, int, int, int],
    count_native: list[str],
) -> None:
    mode, layers, direction, input_mode, varlen, time_major = case
    steps, batch, in_size, units = sizes
    if input_mode == "skip_input":
        in_size = units
    spec = RNNSpec(mode, layers, units, in_size, input_mode, direction)
    c = make_case(spec, steps, batch, seed=zlib.crc32(repr(case).encode()), varlen=varlen,
                  time_major=time_major)  # fmt: skip
    with native.use_level(level), native.use_products(way, way):
        assert_matches_oracle(c, torch.float32, atol=1e-5, rtol=1e-5, requires_grad=True)
    assert count_native == ["forward", "forward", "backward"]


def _problem(
    mode: str,
    seed: int = 0,
    sizes: tuple[int, int, int, int] = (72, 72, 6, 9),
    lengths: tuple[int, ...] | None = (6, 2, 3, 6, 1, 4, 6, 5, 2),
) -> tuple[Any, ...]:
    """A two-layer bidirectional problem of ``sizes`` (units, inputs, steps, batch), by default
    with lengths and big enough for two threads."""
    g = torch.Generator().manual_seed(seed)
    units, inputs, steps, batch = sizes
    spec = RNNSpec(mode, 2, units, inputs, "linear_input", "bidirectional")
    layout = layout_of(spec)
    params = torch.randn(layout.size, generator=g) / units**0.5
    x = torch.randn(steps, batch, inputs, generator=g)
    h0 = torch.randn(4, batch, units, generator=g)
    c0 = torch.randn(4, batch, units, generator=g) if mode == "lstm" else None
    return layout, params, x, h0, c0, None if lengths is None else torch.tensor(lengths)


def _run(engine: Any, problem: tuple[Any, ...]) -> list[torch.Tensor]:
    layout, params, x, h0, c0, lengths = problem
    if engine is native:
        y, hn, cn, ws = native.forward(layout, params, x, h0, c0, lengths, None, True)
    else:
        y, hn, cn, ws = engine.forward(layout, params, x, h0, c0, lengths, None)
    g = torch.Generator().manual_seed(7)
    dy = torch.randn(y.shape, generator=g)
    dhy = torch.randn(hn.shape, generator=g)
    dcy = torch.randn(cn.shape, generator=g) if cn is not None else None
    grads = engine.backward(layout, params, x, h0, c0, lengths, None, ws, y, dy, dhy, dcy)
    return [t for t in (y, hn, cn, *grads) if t is not None]


@needs_engine
@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("mode", MODES)
def test_same_bits_every_call_every_thread_count_avx2_and_avx512(
    mode: str, way: str, every_isa: str
) -> None:
    """The claims of the docs: repeatable, independent of the threads (count, pool) at every
    instruction set; AVX-512 == AVX2 (both contract to FMA); for the packed products and the
    dot products alike."""
    with native.use_products(way, way):
        _same_bits_every_way(mode, every_isa)


def _same_bits_every_way(mode: str, level: str) -> None:
    problem = _problem(mode)
    threads = torch.get_num_threads()
    reference = _run(native, problem)
    try:
        results = []
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            results.append(_run(native, problem))
        if level == "avx2" and "avx512" in LEVELS:
            with native.use_level("avx512"):
                results.append(_run(native, problem))
        lib = native_library._library().lib
        assert lib is not None
        lib.cr_use_openmp(None)  # our own thread team instead of torch's OpenMP pool
        try:
            results.append(_run(native, problem))
        finally:
            native_library._share_torch_threads(lib)
    finally:
        torch.set_num_threads(threads)
    for result in results:
        assert all(torch.equal(a, b) for a, b in zip(reference, result))


def _grads(module: Any, dtype: torch.dtype, case: Any, ours: bool) -> torch.Tensor:
    """Gradients of every input and parameter of a weighted sum of the output, flattened."""
    x = torch.as_tensor(case.x).to(dtype).requires_grad_()
    h0 = torch.as_tensor(case.h0).to(dtype).requires_grad_()
    if ours:
        params = module.canonical_to_params(case.weights, case.biases).to(dtype)
        params.requires_grad_()
        out = module(x, h0, params)[0]
        leaves = [x, h0, params]
    else:
        out = module(x, h0)[0]
        leaves = [x, h0, *module.parameters()]
    weight = torch.linspace(-1, 1, out.numel(), dtype=torch.float64).view(out.shape)
    grads = torch.autograd.grad((out * weight.to(dtype)).sum(), leaves)
    return torch.cat([g.flatten() for g in grads]).double()


@needs_engine
@pytest.mark.parametrize("mode", ["gru", "rnn_tanh", "rnn_relu"])
def test_gradients_within_float32_rounding_of_torch(mode: str) -> None:
    """Our float32 gradients are as close to float64 as torch.nn's float32 ones.

    Each float32 result is compared with the same implementation in float64 (our float64 runs
    the loop engine, torch.nn its own kernels); the relative errors are float32 rounding, and
    ours must not be larger than torch's by more than a small factor. (LSTM: torch's float32
    is oneDNN, whose error is of the same size; covered by the oracle grid's gradients.)
    """
    spec = RNNSpec(mode, 2, 48, 20, "linear_input", "bidirectional")
    case = make_case(spec, 12, 5, seed=3)
    errors = {}
    for name in ("ours", "torch"):
        ours = name == "ours"

        def build(dtype: torch.dtype, ours: bool = ours) -> Any:
            if ours:
                return make_op(spec, dtype)
            return torch_module(spec, case.weights, case.biases).to(dtype)

        g64 = _grads(build(torch.float64), torch.float64, case, ours)
        g32 = _grads(build(torch.float32), torch.float32, case, ours)
        errors[name] = ((g32 - g64).abs().max() / g64.abs().max()).item()
    assert 0 < errors["ours"] <= 4 * errors["torch"] + 1e-7, errors


@needs_engine
@pytest.mark.parametrize("kind,bound", [("sigmoid", 3.0), ("tanh", 2.0), ("exp", 1.5)])
@pytest.mark.parametrize("level", isa_params())
def test_activation_accuracy_in_ulp(kind: str, bound: float, level: str) -> None:
    """docs/design_notes.md states these bounds: over [-87, 87] in float32, against float64."""
    x = np.concatenate(
        [
            np.linspace(-30, 30, 600_001),
            np.geomspace(1e-30, 1, 50_001),
            -np.geomspace(1e-30, 1, 50_001),
            np.linspace(-87, 87, 50_001),
            [0.0, -0.0, 0.625, -0.625, np.nextafter(np.float32(0.625), np.float32(0))],
        ]
    ).astype(np.float32)
    reference = {
        "sigmoid": lambda v: 1.0 / (1.0 + np.exp(-v)),
        "tanh": np.tanh,
        "exp": np.exp,
    }[kind]
    with native.use_level(level):
        got = native.activation(kind, torch.from_numpy(x)).numpy().astype(np.float64)
    want = reference(x.astype(np.float64))
    ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    errors = np.abs(got - want) / ulp
    assert errors.max() <= bound, (x[np.argmax(errors)], errors.max())
    assert errors.max() > 0.1  # the comparison sees rounding at all
    if kind == "tanh":  # odd and exact at 0, and saturates exactly
        edges = torch.tensor([0.0, -0.0, 20.0, -20.0, 1e30, -1e30])
        got_edges = native.activation(kind, edges)
        assert got_edges.tolist() == [0.0, 0.0, 1.0, -1.0, 1.0, -1.0]
        assert torch.equal(torch.signbit(got_edges), torch.signbit(edges))


@needs_engine
def test_concurrent_calls_give_the_same_bits(every_isa: str) -> None:
    """Calls from several Python threads: one gets the team, the others run on their own thread
    (results do not depend on the count)."""
    problem = _problem("lstm", seed=5)
    want = _run(native, problem)
    failures: list[str] = []

    def worker() -> None:
        for _ in range(5):
            got = _run(native, problem)
            if not all(torch.equal(a, b) for a, b in zip(want, got)):
                failures.append("differs")

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert failures == []


@needs_engine
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_starts_its_own_team() -> None:
    """Our own team (used where torch has no GNU OpenMP runtime to share): the parent's workers
    do not exist in a forked child, so a two-thread call there must start a team of its own.
    (The child calls the C library only: torch's OpenMP pool, and the engine on it, cannot run
    in a child forked after it ran, as with any torch operator.)"""
    lib = native_library._library().lib
    assert lib is not None
    lib.cr_use_openmp(None)
    try:
        _fork_and_call()
    finally:
        native_library._share_torch_threads(lib)
    assert lib.cr_threading() == 1


def _fork_and_call() -> None:
    units, batch, steps = 128, 8, 5  # B * H * H over the engine's one-thread threshold
    g = torch.Generator().manual_seed(0)
    gi = torch.randn(steps, batch, units, generator=g)
    r = torch.randn(units, units, generator=g) / units**0.5
    h0 = torch.zeros(batch, units)
    bias = torch.zeros(units)
    outs = [torch.empty(steps, batch, units) for _ in range(2)]
    hns = [torch.empty(batch, units) for _ in range(2)]

    def args(k: int) -> Any:
        return native_library._ForwardArgs(
            mode=native.MODE_CODES["rnn_tanh"], steps=steps, batch=batch, units=units,
            threads=2, gi=gi.data_ptr(), gi_st=batch * units, gi_sb=units, bi=bias.data_ptr(),
            r=r.data_ptr(), h0=h0.data_ptr(), y=outs[k].data_ptr(), y_st=batch * units, y_sb=units,
            hn=hns[k].data_ptr(),
        )  # fmt: skip

    native_library._call("cr_forward", args(0))  # the parent's team exists now
    pid = os.fork()
    if pid == 0:  # the child: exit code 0 when the call finished and agrees
        try:
            native_library._call("cr_forward", args(1))
            same = outs[0].numpy().tobytes() == outs[1].numpy().tobytes()
            os._exit(0 if same else 3)
        finally:
            os._exit(4)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail("the forked child's call did not finish in 60 s")


@needs_engine
def test_agrees_with_the_loop_engine_on_large_sizes() -> None:
    """Several threads, row blocks and column blocks; both training engines, float32."""
    for mode in MODES:
        problem = _problem(mode, seed=11)
        ours, theirs = _run(native, problem), _run(loop, problem)
        for a, b in zip(ours, theirs):
            scale = b.abs().max().item() + 1e-6
            assert (a - b).abs().max().item() <= 2e-5 * scale, mode


def test_disabled_by_environment_runs_torch_kernels() -> None:
    """CUDNN_RNN_NATIVE=0: no warning, torch's kernels, the same numbers."""
    code = (
        "import warnings, torch, cudnn_rnn; warnings.simplefilter('error');"
        "from tests.support.helpers import make_case, run_ours, run_oracle;"
        "from cudnn_rnn.core.spec import RNNSpec;"
        "from cudnn_rnn import engines;"
        "spec = RNNSpec('gru', 2, 5, 3, direction='bidirectional');"
        "c = make_case(spec, 4, 3, seed=0, varlen=True);"
        "y = run_ours(c, torch.float32, True)[0].detach().double().numpy();"
        "import numpy as np; np.testing.assert_allclose(y, run_oracle(c)[0], atol=1e-5);"
        "assert engines.select(spec, torch.device('cpu'), torch.float32, True, True) == 'loop';"
        "print(cudnn_rnn.cpu_engine())"
    )
    env = {**os.environ, native.ENV: "0"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "torch (disabled by CUDNN_RNN_NATIVE=0)"


@needs_engine
def test_missing_library_falls_back_and_says_so_once(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_library() -> Any:
        raise OSError("the native engine is not built (simulated)")

    monkeypatch.setattr(native_library, "_load", no_library)
    native_library._reload()
    try:
        spec = RNNSpec("rnn_relu", 1, 3, 2)
        case = make_case(spec, 3, 2, seed=4)
        with pytest.warns(native.NativeEngineWarning, match="not built .simulated.") as record:
            for grad in (False, True):
                assert_matches_oracle(case, torch.float32, atol=1e-5, requires_grad=grad)
        assert len(record) == 1
        assert cudnn_rnn.cpu_engine() == "torch (the native engine is not built (simulated))"
        cpu = torch.device("cpu")
        assert engines.select(spec, cpu, torch.float32, True, False) == engines.LOOP
    finally:
        monkeypatch.undo()
        native_library._reload()
    assert native.available()


@needs_engine
def test_use_level_refuses_unknown_instruction_sets() -> None:
    with pytest.raises(ValueError, match="instruction set 'neon' is not available here"):
        native.use_level("neon")


@needs_engine
def test_run_ours_and_oracle_agree_at_batch_one_step_one() -> None:
    for mode in MODES:
        case = make_case(RNNSpec(mode, 1, 1, 1), 1, 1, seed=9)
        got = run_ours(case, torch.float32)[0].double().numpy()
        np.testing.assert_allclose(got, run_oracle(case)[0], atol=1e-6)


@needs_engine
def test_library_refuses_bad_sizes_and_missing_pointers() -> None:
    x, r, y, hn = torch.zeros(4), torch.zeros(4, 4), torch.zeros(4), torch.zeros(4)  # alive
    good = dict(mode=1, steps=1, batch=1, units=4, threads=1, gi=x.data_ptr(), gi_st=4, gi_sb=4,
                bi=x.data_ptr(), r=r.data_ptr(), h0=x.data_ptr(), y=y.data_ptr(), y_st=4, y_sb=4,
                hn=hn.data_ptr())  # fmt: skip
    native_library._call("cr_forward", native_library._ForwardArgs(**good))
    # A cell state given to a mode without one is ignored (it crashed once).
    c = torch.full((4,), 7.0)
    native_library._call(
        "cr_forward", native_library._ForwardArgs(**good, c0=c.data_ptr(), cn=c.data_ptr())
    )
    assert c.tolist() == [7.0] * 4
    # Strides that would make rows overlap or run short are refused too.
    for bad in (
        {"bi": None}, {"steps": 0}, {"mode": 7}, {"mode": 3},  # mode 3: the GRU's bR
        {"gi_sb": 2}, {"gi_st": 0}, {"y_sb": 3}, {"y_st": 2, "batch": 2},
    ):  # fmt: skip
        with pytest.raises(RuntimeError, match="cr_forward refused its sizes or a missing pointer"):
            native_library._call("cr_forward", native_library._ForwardArgs(**{**good, **bad}))
    # Lengths outside [0, steps] are refused before any step reads them.
    for length in (-1, 2, 2**40):
        lengths = torch.tensor([length])
        with pytest.raises(RuntimeError, match=r"lengths outside \[0, steps\]"):
            native_library._call(
                "cr_forward", native_library._ForwardArgs(**good, lengths=lengths.data_ptr())
            )


@needs_engine
def test_library_backward_refuses_bad_strides_and_lengths() -> None:
    units = 4
    buf = [torch.zeros(units * units) for _ in range(6)]  # alive for the call
    good = dict(
        mode=1, steps=1, batch=1, units=units, threads=1, r=buf[0].data_ptr(),
        gates=buf[1].data_ptr(), hout=buf[2].data_ptr(), dy=buf[3].data_ptr(), dy_st=units,
        dy_sb=units, dgi=buf[4].data_ptr(), dh0=buf[5].data_ptr(), hout_rs=units,
    )  # fmt: skip
    native_library._call("cr_backward", native_library._BackwardArgs(**good))
    for bad in ({"dy_sb": units - 1}, {"dy_st": 0}, {"dy": None}, {"hout_rs": units - 1}):
        with pytest.raises(RuntimeError, match="cr_backward refused its sizes or a missing"):
            native_library._call("cr_backward", native_library._BackwardArgs(**{**good, **bad}))
    lengths = torch.tensor([3])
    with pytest.raises(RuntimeError, match=r"cr_backward refused sequence lengths outside"):
        native_library._call(
            "cr_backward", native_library._BackwardArgs(**good, lengths=lengths.data_ptr())
        )


@needs_engine
@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("mode", MODES)
def test_a_padded_batch_gives_each_sequence_the_bits_it_has_alone(
    mode: str, way: str, every_isa: str
) -> None:
    """With lengths, the input projection and the steps skip padded rows: each sequence's
    outputs and final state are bitwise those of the same sequence run alone, unpadded, when
    both make their products the same way. By rule a sequence alone reads the weights in
    place and the batch packs them (in another order of the sums): then they agree to
    float32 rounding."""
    from cudnn_rnn.layers import LAYER_CLASSES

    torch.manual_seed(5)
    layer = LAYER_CLASSES[mode](2, 24, direction="bidirectional", input_size=7)
    lengths = [9, 3, 7, 1, 9, 30, 30, 30]  # the projection's rows: 119, then 2 * 24 wide
    x = torch.randn(30, len(lengths), 7)
    same = torch.equal if way != "rule" else lambda a, b: torch.allclose(a, b, atol=1e-6)
    with torch.no_grad(), native.use_products(way, way):
        out, states = layer(x, sequence_lengths=lengths)
        for b, n in enumerate(lengths):
            alone, alone_states = layer(x[:n, b : b + 1])
            assert same(out[:n, b : b + 1], alone)
            assert bool((out[n:, b] == 0).all())
            for s, a in zip(states, alone_states):
                assert same(s[:, b : b + 1], a)


@needs_engine
@pytest.mark.parametrize("mode", MODES)
def test_products_by_rule_in_place_for_one_sequence_and_few_rows(mode: str) -> None:
    """The rule (docs/design_notes.md): R in place for a batch of one or a call of one step,
    packed above, except that a batch of one with at most 128 units packs R for a sequence of
    at least units // 16 + 4 steps; W in place for a projection of at most 128 rows (with
    lengths: the valid ones), packed above. In place, a product of fewer than 32 rows (the
    batch for R, the projection's rows for W) takes dot products, from 32 on the micro-kernels
    over the matrix's rows, which give the packed product's bits.
    Each call gives bitwise what forcing that way gives; dot products differ from the other two
    (so the test sees where they ran), which agree bit for bit."""
    from cudnn_rnn.layers import LAYER_CLASSES

    assert native.in_place_limits() == (1, 128)
    assert native.in_place_rows_form() == 32
    torch.manual_seed(3)
    layers = {units: LAYER_CLASSES[mode](1, units, input_size=24) for units in (40, 128, 129)}

    def run(batch: int, steps: int, lengths: list[int] | None = None, r: str = "rule",
            w: str = "rule", units: int = 40) -> torch.Tensor:  # fmt: skip
        g = torch.Generator().manual_seed(batch * 1000 + steps)
        x = torch.randn(steps, batch, 24, generator=g)
        # (one step from a zero state makes no product on R: start elsewhere, as a cell does)
        n = 2 if mode == "lstm" else 1
        state = tuple(torch.randn(1, batch, units, generator=g) for _ in range(n))
        with torch.no_grad(), native.use_products(r, w):
            out = layers[units](x, state if steps == 1 else None, sequence_lengths=lengths)
            return out[0]

    dot, rows, packed = "in_place", "in_place_rows", "packed"
    for batch, steps, lengths, expected, units in (
        (1, 5, None, (dot, dot), 40),  # 40 // 16 + 4 = 6 steps pack R
        (1, 6, None, (packed, dot), 40),
        (1, 31, None, (packed, dot), 40),
        (1, 32, None, (packed, rows), 40),
        (1, 128, None, (packed, rows), 40),
        (1, 129, None, (packed, packed), 40),
        (1, 11, None, (dot, dot), 128),  # 12 steps pack R
        (1, 12, None, (packed, dot), 128),
        (1, 129, None, (dot, packed), 129),  # more than 128 units: in place
        (16, 1, None, (dot, dot), 40),  # one step: R serves one product
        (31, 1, None, (dot, dot), 40),
        (32, 1, None, (rows, rows), 40),
        (128, 1, None, (rows, rows), 40),
        (129, 1, None, (packed, packed), 40),
        (15, 2, None, (packed, dot), 40),
        (16, 2, None, (packed, rows), 40),
        (2, 64, None, (packed, rows), 40),
        (2, 65, None, (packed, packed), 40),
        (3, 60, [60, 60, 8], (packed, rows), 40),  # 128 valid rows of 180
        (3, 60, [60, 60, 9], (packed, packed), 40),
        (3, 10, [10, 10, 1], (packed, dot), 40),  # 21 valid rows of 30
    ):
        by_rule = run(batch, steps, lengths, units=units)
        assert torch.equal(by_rule, run(batch, steps, lengths, *expected, units=units))
        for i in range(2):
            for way in (dot, rows, packed):
                forced = list(expected)
                forced[i] = way
                other = run(batch, steps, lengths, *forced, units=units)
                if (way == dot) == (expected[i] == dot):  # the same sums in the same order
                    assert torch.equal(by_rule, other), (batch, steps, expected, forced)
                else:
                    assert not torch.equal(by_rule, other), (batch, steps, expected, forced)
                    torch.testing.assert_close(by_rule, other)


@needs_engine
@pytest.mark.parametrize("mode", MODES)
def test_from_32_rows_a_step_gives_the_bits_of_the_same_step_in_a_sequence(mode: str) -> None:
    """From 32 rows the in-place products keep the packed product's order, so stepping a layer
    one call per step (as a cell does: R and W in place) gives the bits of one call over the
    sequence (R packed, W in place or packed by its rows); below 32 the steps' dot products
    differ in the last place."""
    from cudnn_rnn.layers import LAYER_CLASSES

    torch.manual_seed(5)
    layer = LAYER_CLASSES[mode](1, 40, input_size=24)
    for batch, steps in ((32, 5), (50, 3), (16, 5)):
        x = torch.randn(steps, batch, 24)
        states = tuple(torch.randn(1, batch, 40) for _ in range(2 if mode == "lstm" else 1))
        with torch.no_grad():
            whole = layer(x, states)[0]
            stepped, s = [], states
            for t in range(steps):
                y, s = layer(x[t : t + 1], s)
                stepped.append(y)
        if batch >= native.in_place_rows_form():
            assert torch.equal(whole, torch.cat(stepped)), batch
        else:
            assert not torch.equal(whole, torch.cat(stepped))
            torch.testing.assert_close(whole, torch.cat(stepped))


@needs_engine
@pytest.mark.parametrize("mode", MODES)
def test_the_projection_in_passes_gives_the_bits_of_one_pass(mode: str, every_isa: str) -> None:
    """The packed input projection runs in passes (engine.c's pass_rows), without lengths each
    just before the steps it serves: however the rows are cut (a row a pass, a pass ending
    inside a step, a step's rows, all at once, the rule), the forward with and without a
    workspace and the backward give the same bits, both directions, with and without
    lengths, on 1 to 3 threads."""
    batch = 5
    threads = torch.get_num_threads()
    try:  # 65 rows: W is packed (and so in passes) by force only
        with native.use_products("packed", "packed"):
            for lengths in (None, (13, 4, 9, 1, 13)):
                problem = _problem(mode, 11, (24, 20, 13, batch), lengths)
                args = (*problem, None, False)
                with native.use_projection_passes(10**6):
                    reference = _run(native, problem)
                    inference = native.forward(*args)[:3]
                for n in (1, 2, 3):
                    torch.set_num_threads(n)
                    for rows in (1, 3, batch, 2 * batch + 1, None):
                        with native.use_projection_passes(rows) if rows else nullcontext():
                            result = _run(native, problem)
                            no_grad = native.forward(*args)[:3]
                        where = (lengths is not None, n, rows)
                        assert all(torch.equal(a, b) for a, b in zip(reference, result)), where
                        assert all(
                            (a is None and b is None) or torch.equal(a, b)
                            for a, b in zip(inference, no_grad)
                        ), where
                        assert torch.equal(no_grad[0], reference[0]), where
    finally:
        torch.set_num_threads(threads)


@needs_engine
def test_a_projection_in_passes_by_rule_matches_the_oracle() -> None:
    """The rule: a pass's input and projections within 1 MiB each, where that holds 256 rows
    or more, else one pass. A bidirectional LSTM whose projection (280 rows of 1024 inputs)
    is made by rule in two passes, the second inside the time loop, matches the NumPy oracle,
    with its gradients' forward (the workspace) too."""
    assert native.projection_pass_rows(1024, 64) == 256
    assert native.projection_pass_rows(256, 512) == 512
    assert native.projection_pass_rows(20, 96) == 2730
    assert native.projection_pass_rows(1025, 64) is None
    assert native.projection_pass_rows(512, 1536) is None
    with native.use_projection_passes(7):
        assert native.projection_pass_rows(512, 1536) == 7
    spec = RNNSpec("lstm", 1, 8, 1024, "linear_input", "bidirectional")
    case = make_case(spec, 70, 4, seed=3)
    assert_matches_oracle(case, torch.float32, atol=1e-5, requires_grad=False)
    assert_matches_oracle(case, torch.float32, atol=1e-5, requires_grad=True)


@needs_engine
@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("sizes", [(1, 1), (1, 13), (5, 1), (5, 13)], ids=str)
def test_a_zero_initial_state_skips_the_first_product_and_matches_the_oracle(
    mode: str, way: str, sizes: tuple[int, int]
) -> None:
    """From a zero state (either sign) the first step makes no product: the loop writes zeros
    where R h0 would go, and a loop of one step does not pack R. A state that is zero but for
    one element (the last row's last unit, or the first's first: all of the state is looked at,
    not a thread's slice) makes the product. Each matches the NumPy oracle; the two signs of
    zero give the same bits."""
    steps, batch = sizes
    spec = RNNSpec(mode, 1, 40, 7, "linear_input", "bidirectional")  # 40 units: two threads
    case = make_case(spec, steps, batch, seed=11, varlen=batch > 1)
    zero = np.zeros_like(case.h0)
    last, first = zero.copy(), zero.copy()
    last[:, -1, -1], first[:, 0, 0] = 0.75, -0.5
    outputs = {}
    with native.use_products(way, way):
        for name, h0 in (("+0", zero), ("-0", -zero), ("last", last), ("first", first)):
            assert name != "-0" or bool(np.signbit(h0).all())
            state = dataclasses.replace(case, h0=h0)
            assert_matches_oracle(state, torch.float32, atol=1e-5, rtol=1e-5)
            outputs[name] = run_ours(state, torch.float32)
    for got, want in zip(outputs["-0"], outputs["+0"]):
        assert (got is None and want is None) or torch.equal(got, want)


@needs_engine
@pytest.mark.parametrize("rows", [None, 7])
def test_shared_projection_tasks_give_the_bits_of_one_thread(
    rows: int | None, every_isa: str
) -> None:
    """The projection's column blocks are tasks any thread of the team takes (a thread behind
    the others has its blocks taken). Eight threads on this machine's cores fall behind one
    another all the time, so the blocks change hands from call to call: every call, in the
    rule's one pass or in passes of seven rows (a step a pass in the loop, or before it with
    lengths), with slices of unequal widths, gives the bits of one thread, forward and
    backward."""
    g = torch.Generator().manual_seed(8)
    spec = RNNSpec("lstm", 1, 96, 40, "linear_input", "bidirectional")
    layout = layout_of(spec)
    params = torch.randn(layout.size, generator=g) / 96**0.5
    problems = []
    for steps, batch, lengths in ((30, 9, None), (12, 25, [12, 3, 7, 12, 1] * 5)):
        x = torch.randn(steps, batch, 40, generator=g)
        h0, c0 = (torch.randn(2, batch, 96, generator=g) for _ in range(2))
        problems.append(
            (layout, params, x, h0, c0, None if lengths is None else torch.tensor(lengths))
        )
    threads = torch.get_num_threads()
    try:
        with native.use_projection_passes(rows) if rows else nullcontext():
            torch.set_num_threads(1)
            reference = [_run(native, p) for p in problems]
            torch.set_num_threads(8)
            for _ in range(5):
                for problem, want in zip(problems, reference):
                    got = _run(native, problem)
                    assert all(torch.equal(a, b) for a, b in zip(want, got))
    finally:
        torch.set_num_threads(threads)


@needs_engine
@pytest.mark.skipif("avx512" not in LEVELS, reason="no AVX-512 here: one micro-kernel")
@pytest.mark.parametrize("mode", MODES)
def test_the_two_avx512_micro_kernels_give_the_same_bits(mode: str) -> None:
    """At AVX-512 the packed products run micro-kernels of 6 rows by 4 vectors, or from a batch
    of 7 on of 8 rows by 3 (its own build of the loops): every element is one chain of
    multiply-adds in increasing k in both, so the forward (with and without a workspace) and
    the backward (every gradient) give the same bits with either, at batches that cut into
    blocks of every size (1 to 17 rows; the projection's rows in blocks of 6 or 8), with and
    without lengths, on 1 and 3 threads (slices of 48 or 64 columns end inside a block)."""
    assert native.micro_kernel(1) == native.micro_kernel(6) == (6, 4)
    assert native.micro_kernel(7) == native.micro_kernel(64) == (8, 3)
    with native.use_micro_kernel("6x4"):
        assert native.micro_kernel(64) == (6, 4)
    with native.use_micro_kernel("8x3"):
        assert native.micro_kernel(1) == (8, 3)
    with native.use_level("avx2"):
        assert native.micro_kernel(64) == (4, 3)
    threads = torch.get_num_threads()
    try:
        for batch in (1, 4, 7, 8, 13, 17):
            lengths = tuple(1 + (5 * b) % 6 for b in range(batch)) if batch % 2 else None
            problem = _problem(mode, batch, (72, 40, 6, batch), lengths)
            args = (*problem, None, False)
            with native.use_products("packed", "packed"):  # W too: the projection's blocks
                made = {}
                for shape in ("6x4", "8x3"):
                    for n in (1, 3):
                        torch.set_num_threads(n)
                        with native.use_micro_kernel(shape):
                            made[shape, n] = (_run(native, problem), native.forward(*args)[:3])
            want_train, want_infer = made["6x4", 1]
            for key, (train, infer) in made.items():
                assert all(torch.equal(a, b) for a, b in zip(want_train, train)), (batch, key)
                assert all(
                    (a is None and b is None) or torch.equal(a, b)
                    for a, b in zip(want_infer, infer)
                ), (batch, key)
    finally:
        torch.set_num_threads(threads)


def test_use_micro_kernel_refuses_unknown_shapes() -> None:
    with pytest.raises(ValueError, match=r"use_micro_kernel: shape must be one of .*got '4x4'"):
        native.use_micro_kernel("4x4")


def test_use_projection_passes_refuses_rows_below_one() -> None:
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="use_projection_passes: rows must be a positive"):
            native.use_projection_passes(bad)  # type: ignore[arg-type]


def test_use_products_refuses_unknown_ways() -> None:
    with pytest.raises(ValueError, match=r"use_products: w must be one of .*got 'fast'"):
        native.use_products("rule", "fast")


@needs_engine
def test_library_refuses_a_row_map_that_does_not_match_the_lengths() -> None:
    units, steps, batch = 4, 2, 2
    bufs = [torch.zeros(64) for _ in range(6)]
    lengths = torch.tensor([2, 1])
    good = dict(
        mode=1, steps=steps, batch=batch, units=units, threads=1, bi=bufs[0].data_ptr(),
        r=bufs[1].data_ptr(), h0=bufs[2].data_ptr(), y=bufs[3].data_ptr(), y_st=batch * units,
        y_sb=units, hn=bufs[4].data_ptr(), x=bufs[5].data_ptr(), w=bufs[1].data_ptr(),
        input_size=units, lengths=lengths.data_ptr(), rows=3,
    )  # fmt: skip
    maps = {"good": [0, 1, 2, -1], "short": [0, 1, 2, 3], "order": [1, 0, 2, -1]}
    keep = {k: torch.tensor(v) for k, v in maps.items()}
    native_library._call(
        "cr_forward", native_library._ForwardArgs(**good, rowmap=keep["good"].data_ptr())
    )
    for name in ("short", "order"):
        with pytest.raises(RuntimeError, match="cr_forward refused its sizes"):
            native_library._call(
                "cr_forward", native_library._ForwardArgs(**good, rowmap=keep[name].data_ptr())
            )
    with pytest.raises(RuntimeError, match="cr_forward refused its sizes"):
        bad = {**good, "rows": 2}
        native_library._call(
            "cr_forward", native_library._ForwardArgs(**bad, rowmap=keep["good"].data_ptr())
        )


@needs_engine
def test_library_runs_a_packed_projection_of_no_rows() -> None:
    """Lengths of 0 everywhere leave the projection no rows (the Python side never asks this;
    a direct caller may): with W packed by force and rows wider than a pass of the rule (one
    pass of all rows, none), the call finishes, keeps the states and writes zero outputs."""
    units, steps, batch, inputs = 16, 3, 2, 1100
    g = torch.Generator().manual_seed(1)
    w = torch.randn(4 * units * inputs, generator=g)
    r, bi = torch.randn(4 * units * units, generator=g), torch.randn(4 * units, generator=g)
    h0, c0 = torch.randn(batch * units, generator=g), torch.randn(batch * units, generator=g)
    y = torch.full((steps * batch * units,), 5.0)
    hn, cn, x = torch.zeros(batch * units), torch.zeros(batch * units), torch.zeros(8)
    lengths, rowmap = torch.zeros(batch, dtype=torch.int64), torch.full((steps * batch,), -1)
    args = native_library._ForwardArgs(
        mode=2, steps=steps, batch=batch, units=units, threads=2, bi=bi.data_ptr(),
        r=r.data_ptr(), h0=h0.data_ptr(), c0=c0.data_ptr(), y=y.data_ptr(),
        y_st=batch * units, y_sb=units, hn=hn.data_ptr(), cn=cn.data_ptr(), x=x.data_ptr(),
        w=w.data_ptr(), input_size=inputs, lengths=lengths.data_ptr(), rows=0,
        rowmap=rowmap.data_ptr(),
    )  # fmt: skip
    assert native.projection_pass_rows(inputs, 4 * units) is None
    with native.use_products("packed", "packed"):
        native_library._call("cr_forward", args)
    assert torch.equal(hn, h0) and torch.equal(cn, c0)
    assert bool((y == 0).all())


@needs_engine
@pytest.mark.parametrize("accumulate", [False, True])
def test_input_gradient_in_chunks_gives_back_the_gates(
    monkeypatch: pytest.MonkeyPatch, accumulate: bool
) -> None:
    """A layer above the first makes its input gradient ``dgi @ W`` in chunks of rows and gives
    back the gates' gradients' whole pages as it goes (the peak of the LSTM with lengths was
    that product, made while both directions' gates were held): the gradient is dgi @ W (plus
    the other direction's, summed in place) to float32 rounding, every whole page of ``dgi``
    reads as zeros afterwards (each was read first), and nothing outside it is touched."""
    from cudnn_rnn.engines.common import Weights

    size = os.sysconf("SC_PAGE_SIZE")
    chunk_bytes = 3 * size // 4  # 8 rows of gates a chunk with 4 KiB pages
    monkeypatch.setattr(native_workspace, "INPUT_GRAD_CHUNK_BYTES", chunk_bytes)
    released: list[tuple[int, int]] = []  # each chunk gives back what it has read
    release = native_workspace._release_bytes

    def spy(start: int, end: int) -> None:
        released.append((start, end))
        release(start, end)

    monkeypatch.setattr(native_workspace, "_release_bytes", spy)
    g = torch.Generator().manual_seed(5)
    steps, batch, gates, width = 9, 7, 96, 40  # 63 rows, 24 KiB of gates: 8 chunks
    numel = steps * batch * gates
    buf = torch.full((numel + 3 * size,), 7.0)
    offset = size // 4 + 5  # dgi starts and ends mid-page
    dgi = buf[offset : offset + numel].view(steps, batch, gates)
    dgi.copy_(torch.randn(steps, batch, gates, generator=g))
    w = torch.randn(gates, width, generator=g)
    wt = Weights(w, torch.empty(gates, 1), torch.empty(gates), torch.empty(gates), None)
    into = torch.randn(steps, batch, width, generator=g) if accumulate else None
    want = dgi.double().reshape(-1, gates) @ w.double()
    if into is not None:
        want += into.double().reshape(-1, width)
    got = native_workspace._input_grad_releasing(wt, dgi, into)
    assert got.shape == (steps, batch, width)
    chunk = -(-chunk_bytes // (4 * gates))  # rows
    assert len(released) == -(-steps * batch // chunk)  # one release a chunk
    torch.testing.assert_close(got.double().reshape(-1, width), want, rtol=1e-5, atol=1e-4)
    if into is not None:
        assert got.data_ptr() == into.data_ptr()
    start, end = dgi.data_ptr(), dgi.data_ptr() + 4 * numel
    first, last = -(-start // size) * size, end // size * size
    address = buf.data_ptr() + 4 * torch.arange(buf.numel())
    inside = (address >= first) & (address < last)
    assert int(inside.sum()) >= numel - 2 * size // 4
    assert torch.all(buf[inside] == 0)
    outside = (address < start) | (address >= end)
    assert torch.all(buf[outside] == 7.0)


def _vm_flags(address: int) -> list[str] | None:
    """The VmFlags of the mapping holding ``address`` (/proc/self/smaps), None where unknown."""
    try:
        with open("/proc/self/smaps") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    inside = False
    for line in lines:
        head = line.split()[0] if line else ""
        if "-" in head and ":" not in head:
            lo, hi = (int(v, 16) for v in head.split("-"))
            inside = lo <= address < hi
        elif inside and line.startswith("VmFlags:"):
            return line.split()[1:]
    return None


@needs_engine
def test_a_large_workspace_asks_for_huge_pages() -> None:
    """``cr_advise_huge`` (a training forward's fresh workspace, before it is written): the
    whole 2 MiB blocks inside the buffer are marked for transparent huge pages (the mapping's
    ``hg`` flag) and no value moves; a null or short range is refused by no one and changes
    nothing. Whether the kernel then hands out huge pages is its own business."""
    lib = native_library._library().lib
    assert lib is not None
    t = torch.arange(native_workspace.HUGE_BYTES // 4 * 2, dtype=torch.float32)  # 16 MiB, written
    want = t.clone()
    assert lib.cr_advise_huge(None, 1 << 30) == 0
    assert lib.cr_advise_huge(t.data_ptr() + 4, 1024) == 0  # no whole block inside
    rc = lib.cr_advise_huge(t.data_ptr(), t.numel() * 4)
    assert torch.equal(t, want)
    if rc != 0:
        pytest.skip("this kernel has no transparent huge pages (madvise refused)")
    block = -(-t.data_ptr() // (2 << 20)) * (2 << 20)  # the first whole 2 MiB block
    flags = _vm_flags(block)
    if flags is None:
        pytest.skip("no /proc/self/smaps")
    assert "hg" in flags
    fresh = torch.empty(native_workspace.HUGE_BYTES // 4 * 2)
    native_workspace._advise_huge(fresh)  # the engine's own call, above HUGE_BYTES
    flags = _vm_flags(-(-fresh.data_ptr() // (2 << 20)) * (2 << 20))
    assert flags is not None and "hg" in flags


@needs_engine
def test_release_gives_back_only_whole_pages_inside_the_part() -> None:
    """``cr_release`` (the backward's way of freeing finished parts of the workspace): the
    whole pages inside the part read as zeros afterwards and leave the resident set (give or
    take the kernel's per-CPU counting); every element outside them, also in the part's first
    and last partial pages, is kept."""
    size = os.sysconf("SC_PAGE_SIZE")
    page = size // 4
    buf = torch.full((4096 * page,), 7.0)  # 16 MiB with 4 KiB pages
    part = buf[page // 2 + 3 : 2560 * page + 5]  # starts and ends mid-page
    before = _rss_kib()
    native_workspace._release(part)  # 10 MiB: above RELEASE_BYTES
    after = _rss_kib()
    start, end = part.data_ptr(), part.data_ptr() + 4 * part.numel()
    first, last = -(-start // size) * size, end // size * size  # the whole pages within it
    address = buf.data_ptr() + 4 * torch.arange(buf.numel())
    inside = (address >= first) & (address < last)
    assert int(inside.sum()) >= 2558 * page
    assert torch.all(buf[inside] == 0)
    assert torch.all(buf[~inside] == 7.0)
    if before is not None and after is not None:
        assert before - after >= 2000 * size // 1024  # most of the 2559 pages left
    native_workspace._release(buf[:5])  # below RELEASE_BYTES: nothing given back, nothing touched
    assert torch.all(buf[:5] == 7.0)
    small = torch.full((RELEASE_FLOATS // 2,), 7.0)
    native_workspace._release(small)
    assert torch.all(small == 7.0)
    lib = native_library._library().lib
    assert lib is not None
    lib.cr_release(buf.data_ptr() + 3, 100)  # less than a page: nothing to give back
    assert torch.all(buf[1:30] == 7.0)


def _rss_kib() -> int | None:
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    except OSError:
        return None


@needs_engine
@pytest.mark.parametrize("mode", MODES)
def test_gradients_of_a_deep_stack_with_dropout_lengths_and_a_second_backward(mode: str) -> None:
    """3 layers, bidirectional, dropout and lengths: the backward reads the states each step
    started from out of the forward's outputs (the LSTM's into its cell states' place); the
    gradients equal the loop engine's (which keeps every state), and a second backward
    (retain_graph) gives the first's bits."""
    from cudnn_rnn.layers import LAYER_CLASSES

    torch.manual_seed(11)
    # A seed of its own: without one the masks' seed comes from the OS, and each run would
    # check other masks.
    layer = LAYER_CLASSES[mode](
        3, 64, direction="bidirectional", input_size=24, dropout=0.3, seed=3
    )
    x = torch.randn(30, 12, 24, requires_grad=True)
    lengths = torch.tensor([30, 29, 17, 30, 1, 8, 22, 30, 5, 13, 26, 2])
    leaves = [x, *layer.parameters()]

    def grads(retain: bool = False) -> list[tuple[torch.Tensor, ...]]:
        layer._dropout_step.zero_()  # the first call's masks, for both engines
        out: torch.Tensor = layer(x, sequence_lengths=lengths, training=True)[0]
        loss = (out * torch.linspace(-1, 1, out.numel()).view(out.shape)).sum()
        first = torch.autograd.grad(loss, leaves, retain_graph=retain)
        return [first, torch.autograd.grad(loss, leaves)] if retain else [first]

    with pytest.MonkeyPatch.context() as mp:
        runs = watch_engines(mp)
        ours = grads(retain=True)
        assert set(ran(runs)) == {"native"}, runs
    for a, b in zip(*ours):
        assert torch.equal(a, b)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(native, "available", lambda: False)  # the loop engine
        runs = watch_engines(mp)
        theirs = grads()[0]
        assert runs == [("loop", "forward"), ("loop", "backward")], runs
    for a, b in zip(ours[0], theirs):
        # Float32 rounding in two summation orders, scaled by the gradient's size (up to ~400
        # for the ReLU stack): within 1.3e-6 of its largest element over 30 masks each mode
        # (measured); a wrong state is off by ~0.1.
        scale = b.abs().max().item()
        torch.testing.assert_close(a, b, rtol=1e-4, atol=4e-6 * scale)


@needs_engine
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dropout", [0.0, 0.4])
def test_a_second_backward_through_one_call_gives_the_same_gradients(
    mode: str, dropout: float, count_native: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backward writes the gates' gradients over the gates it kept (no second buffer of
    that size). A second backward through the same call (retain_graph) finds them used and runs
    the forward again: the same gradients, bit for bit; without dropout also those of a fresh
    call, and within float32 rounding of the loop engine's."""
    from cudnn_rnn.layers import LAYER_CLASSES

    torch.manual_seed(7)
    layer = LAYER_CLASSES[mode](2, 16, direction="bidirectional", input_size=5, dropout=dropout)
    x = torch.randn(8, 3, 5, requires_grad=True)
    lengths = torch.tensor([8, 5, 2])
    leaves = [x, *layer.parameters()]

    def call() -> torch.Tensor:
        out: torch.Tensor = layer(x, sequence_lengths=lengths, training=True)[0]
        return (out * torch.linspace(-1, 1, out.numel()).view(out.shape)).sum()

    loss = call()
    first = torch.autograd.grad(loss, leaves, retain_graph=True)
    second = torch.autograd.grad(loss, leaves)
    # The call; its backward; the second backward, which runs the forward again inside it.
    assert count_native == ["forward", "backward", "backward", "forward"]
    for a, b in zip(first, second):
        assert torch.equal(a, b)
    if dropout:
        return  # a fresh call draws other masks
    fresh = torch.autograd.grad(call(), leaves)
    for a, c in zip(first, fresh):
        assert torch.equal(a, c)
    monkeypatch.setattr(native, "available", lambda: False)  # the rule table's next engine
    theirs = torch.autograd.grad(call(), leaves)
    assert count_native[6:] == []  # the loop engine ran it
    for a, b in zip(first, theirs):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5)


@needs_engine
@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_same_bits_on_up_to_sixteen_threads(mode: str, every_isa: str) -> None:
    """Nothing assumes two threads (team size, scratch per thread, row blocks): 256 units give
    16 slices of 16 at AVX-512, and 1, 4, 8 and 16 threads give the bits of one, forward and
    backward (threads beyond the cores only share them)."""
    g = torch.Generator().manual_seed(2)
    units, batch, steps = 256, 3, 4
    spec = RNNSpec(mode, 1, units, 8, "linear_input", "bidirectional")
    layout = layout_of(spec)
    params = torch.randn(layout.size, generator=g) / units**0.5
    x = torch.randn(steps, batch, 8, generator=g)
    h0 = torch.randn(2, batch, units, generator=g)
    c0 = torch.randn(2, batch, units, generator=g) if mode == "lstm" else None
    problem = (layout, params, x, h0, c0, torch.tensor([4, 1, 3]))
    threads = torch.get_num_threads()
    try:
        for way in WAYS:
            with native.use_products(way, way):
                torch.set_num_threads(1)
                reference = _run(native, problem)
                for n in (4, 8, 16):
                    torch.set_num_threads(n)
                    result = _run(native, problem)
                    assert all(torch.equal(a, b) for a, b in zip(reference, result)), (way, n)
    finally:
        torch.set_num_threads(threads)


@needs_engine
def test_directions_together_by_rule() -> None:
    """Two threads: the directions take turns; with a team of two or more each and R's slices
    within a quarter of the L2, at once; never for one direction."""
    lstm = RNNSpec("lstm", 1, 64, 8, "linear_input", "bidirectional")
    assert not native.directions_together(lstm, 2) and not native.directions_together(lstm, 3)
    assert native.directions_together(lstm, 4) and native.directions_together(lstm, 16)
    big = RNNSpec("lstm", 1, 4096, 8, "linear_input", "bidirectional")  # 256 MiB of R
    assert not native.directions_together(big, 16)
    uni = RNNSpec("lstm", 1, 64, 8, "linear_input", "unidirectional")
    assert not native.directions_together(uni, 16)


@needs_engine
@pytest.mark.parametrize("mode", MODES)
def test_directions_at_once_give_the_bits_of_directions_in_turn(
    mode: str, monkeypatch: pytest.MonkeyPatch, every_isa: str
) -> None:
    """A bidirectional stack with lengths, forward and every gradient, on 4 and 16 threads
    (where the rule runs both directions at once), on torch's OpenMP pool and on our own team:
    bitwise what one call per direction gives."""
    problem = _problem(mode)
    spec = problem[0].spec
    threads = torch.get_num_threads()
    one_by_one = native._call  # the name the loops' calls are looked up by
    lib = native_library._library().lib
    assert lib is not None

    def in_turn(fn_name: str, *args: Any) -> None:
        for a in args:
            one_by_one(fn_name, a)

    try:
        for n in (4, 16):
            torch.set_num_threads(n)
            assert native.directions_together(spec)
            together = _run(native, problem)
            lib.cr_use_openmp(None)  # our own thread team instead of torch's OpenMP pool
            try:
                own_team = _run(native, problem)
            finally:
                native_library._share_torch_threads(lib)
            monkeypatch.setattr(native, "_call", in_turn)
            in_turns = _run(native, problem)
            monkeypatch.setattr(native, "_call", one_by_one)
            for result in (together, own_team):
                assert all(torch.equal(a, b) for a, b in zip(result, in_turns)), n
    finally:
        torch.set_num_threads(threads)


def test_library_refuses_a_bad_group_of_loops() -> None:
    lib = native_library._library().lib
    if lib is None:
        pytest.skip("the native engine is not built")
    assert lib.cr_forward_many(None, 2) == 2
    pointers = (ctypes.c_void_p * 9)()
    assert lib.cr_forward_many(pointers, 9) == 2  # more than a group holds
    assert lib.cr_backward_many(pointers, 2) == 2  # missing loops
    assert lib.cr_forward_many(pointers, 0) == 2


@pytest.mark.parametrize("onednn", [True, False])
def test_backward_products_by_rule(monkeypatch: pytest.MonkeyPatch, onednn: bool) -> None:
    """The weight gradients' products: where oneDNN is the machine's product (see
    ``test_onednn_or_mkl_by_vendor``), oneDNN for CPU float32 operands without gaps whose
    temporary is no larger than an operand, torch's matmul otherwise (a slice of a matrix's
    columns took oneDNN 80 s); both within float32 rounding of float64."""
    from cudnn_rnn.engines import common

    calls: list[tuple[int, ...]] = []
    real = (
        getattr(torch.ops.mkldnn, "_linear_pointwise", None)
        if onednn and torch.backends.mkldnn.is_available()  # type: ignore[no-untyped-call]
        else None
    )
    if onednn and real is None:
        pytest.skip("torch is built without oneDNN")
    monkeypatch.setattr(common, "_ONEDNN_LINEAR", None)

    class Spy:
        def __call__(self, a: torch.Tensor, *rest: Any) -> Any:
            calls.append(tuple(a.shape))
            return real(a, *rest)

        def binary(self, a: torch.Tensor, *rest: Any) -> Any:
            calls.append(tuple(a.shape))
            return real.binary(a, *rest)

    if real is not None:
        monkeypatch.setattr(common, "_ONEDNN_LINEAR", Spy())
    g = torch.Generator().manual_seed(0)
    gates, x = torch.randn(300, 96, generator=g), torch.randn(300, 40, generator=g)
    want = gates.double().t() @ x.double()
    for g_op, dst_shape in ((gates, (96, 40)), (gates[:, :64], (64, 40))):
        dst = torch.empty(dst_shape)
        common.reduce_rows(dst, g_op, x)
        torch.testing.assert_close(dst.double(), want[: dst_shape[0]], rtol=1e-5, atol=1e-4)
    wide = torch.randn(30, 96, generator=g)  # m > rows: no weight-sized temporary
    dst = torch.empty(96, 40)
    common.reduce_rows(dst, wide, x[:30])
    torch.testing.assert_close(
        dst.double(), wide.double().t() @ x[:30].double(), rtol=1e-5, atol=1e-4
    )
    w = torch.randn(96, 40, generator=g)
    add = torch.randn(300, 40, generator=g)
    want_out = gates.double() @ w.double() + add.double()
    out = common.product_t(gates, w.t(), add)
    torch.testing.assert_close(out.double(), want_out, rtol=1e-5, atol=1e-4)
    if real is not None:  # the whole matrix and the product with add went to oneDNN, the rest not
        assert calls == [(40, 300), (300, 96)]
    else:  # torch's matmul made the sum in ``add``
        assert calls == [] and out.data_ptr() == add.data_ptr()


@pytest.mark.parametrize(
    ("vendor", "mkl", "native"),
    [
        ("GenuineIntel", True, True),
        ("GenuineIntel", False, False),
        ("AuthenticAMD", True, False),
        ("", True, False),
    ],
)
def test_onednn_or_mkl_by_vendor(
    monkeypatch: pytest.MonkeyPatch, vendor: str, mkl: bool, native: bool
) -> None:
    """The backward's products take torch's matmul where it is MKL on an Intel CPU (MKL's
    AVX-512 path beat oneDNN's transposed-operand products there) and oneDNN elsewhere (MKL
    takes its AVX2 path on AMD); the machine decides, never a timing."""
    from cudnn_rnn.engines import common

    monkeypatch.setattr(common, "cpu_vendor", lambda: vendor)
    monkeypatch.setattr(torch.backends.mkl, "is_available", lambda: mkl)
    assert common._mkl_native() is native


def test_cpu_vendor_reads_the_kernels_report() -> None:
    from cudnn_rnn.engines import common

    vendor = common.cpu_vendor()
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        assert vendor == ""
        return
    lines = [ln for ln in text.splitlines() if ln.startswith("vendor_id")]
    assert vendor == (lines[0].split(":", 1)[1].strip() if lines else "")


@needs_engine
@pytest.mark.parametrize("mode", MODES)
def test_with_lengths_the_workspace_keeps_only_the_valid_steps(mode: str) -> None:
    """An eager training call with lengths keeps the valid steps' rows alone (issue 21, item 5):
    the same outputs bit for bit, the same gradients within float32 rounding (the weight
    gradients' sums drop the padded rows' zeros), as the workspace of every row."""
    layout, params, x, h0, c0, lengths = _problem(mode, seed=4)
    spec = layout.spec
    full = native.forward(layout, params, x, h0, c0, lengths, None, True)
    compact = native.forward(layout, params, x, h0, c0, lengths, None, True, True)
    rows = int(lengths.sum())
    assert full[3] is not None and compact[3] is not None
    assert full[3].numel() == workspace_numel(spec, 6, 9, hseq=False) + 1
    assert compact[3].numel() == workspace_numel(spec, rows, 1, hseq=False) + 1 < full[3].numel()
    for a, b in zip(full[:3], compact[:3]):
        assert a is None or torch.equal(a, b)
    g = torch.Generator().manual_seed(5)
    dy = torch.randn(full[0].shape, generator=g)
    dhy = torch.randn(full[1].shape, generator=g)
    dcy = torch.randn(full[2].shape, generator=g) if full[2] is not None else None
    common = (layout, params, x, h0, c0, lengths, None)
    want = native.backward(*common, full[3], full[0], dy, dhy, dcy)
    got = native.backward(*common, compact[3], compact[0], dy, dhy, dcy)
    for a, b in zip(want, got):
        if a is not None and b is not None:
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    dx = got[1]
    padded = torch.arange(6)[:, None] >= lengths[None, :]
    assert bool((dx[padded] == 0).all())  # no gradient reaches a padded step's input


@needs_engine
def test_the_rule_keeps_a_traced_call_s_workspace_whole() -> None:
    """The fake implementation needs a length that follows from the shapes when compiling or
    exporting: traced calls keep every row; eager calls with lengths have a data-dependent one."""
    spec = RNNSpec("gru", 2, 8, 4, "linear_input", "bidirectional")
    call = engines.base.Call(
        layout_of(spec), torch.device("cpu"), torch.float32, 5, 3, True, True, False
    )
    assert native.ENGINE.kept(call).workspace is None
    traced = call._replace(traced=True)
    assert native.ENGINE.kept(traced).workspace == workspace_numel(spec, 5, 3, hseq=False) + 1
    no_lengths = call._replace(lengths=False)
    assert native.ENGINE.kept(no_lengths).workspace == workspace_numel(spec, 5, 3, hseq=False) + 1


@needs_engine
@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_the_input_gradient_is_made_only_when_asked_for(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An input that needs no gradient (raw features into the first layer) costs no input
    gradient product: the weights' and the state's gradients are bit for bit those of the
    same call whose input needs one."""
    from cudnn_rnn.engines import common
    from cudnn_rnn.layers import LAYER_CLASSES

    torch.manual_seed(3)
    layer = LAYER_CLASSES[mode](2, 16, direction="bidirectional", input_size=5)
    x = torch.randn(7, 3, 5)
    h0 = torch.randn(4, 3, 16, requires_grad=True)
    state = (h0, torch.randn(4, 3, 16)) if mode == "lstm" else (h0,)
    lengths = torch.tensor([7, 4, 2])
    # Per direction: layer 1's dW alone, then its input gradient in chunks; layer 0's dW, with
    # its input gradient ("whole") only where asked for ("dW" alone otherwise).
    made: list[str] = []
    _spy(monkeypatch, native, "_input_grad_releasing", made, "chunk")
    real = common.input_grads

    def input_grads(*a: Any) -> Any:
        made.append("whole" if a[6] else "dW")
        return real(*a)

    monkeypatch.setattr(native, "input_grads", input_grads)

    def grads(x: torch.Tensor) -> list[torch.Tensor]:
        out = layer(x, state, sequence_lengths=lengths, training=True)[0]
        loss = (out * torch.linspace(-1, 1, out.numel()).view(out.shape)).sum()
        return list(torch.autograd.grad(loss, [layer.opaque_kernel, h0]))

    without = grads(x)
    assert made == ["dW", "chunk", "dW", "chunk", "dW", "dW"]
    made.clear()
    with_dx = grads(x.clone().requires_grad_())
    assert made == ["dW", "chunk", "dW", "chunk", "whole", "whole"]
    for a, b in zip(without, with_dx):
        assert torch.equal(a, b)


# -- the portable build ---------------------------------------------------------------------------

_PORTABLE_CHILD = """
import sys
import torch
from cudnn_rnn.engines import native
from tests.engines.test_native import MODES, _problem, _run
assert native.level_names() == ["base"], native.level_names()
out = {}
for mode in MODES:
    for way in ("packed", "in_place"):
        with native.use_products(way, way):
            out[f"{mode} {way}"] = _run(native, _problem(mode))
torch.save(out, sys.argv[1])
"""


@needs_engine
@pytest.mark.skipif(
    platform.machine() != "x86_64" or "base" not in LEVELS, reason="compares with x86's baseline"
)
def test_the_portable_build_gives_the_x86_baselines_bits(tmp_path: Any) -> None:
    """Where the machine is not x86 (ARM), the engine is only its portable code: kernel.inc's
    generic vectors, min/max by compare and blend, no register hints. CI has no such machine,
    so this compiles the engine here as if it were not x86 and checks that it gives bitwise
    what the x86 baseline gives (neither contracts to FMA), packed and in place, outputs and
    gradients of every mode."""
    cc = sanitize.compiler()
    if cc is None:
        pytest.skip("no C compiler")
    engine_c = Path(native.__file__).resolve().parents[1] / "_native" / "engine.c"
    wrapper = tmp_path / "portable.c"
    # engine.c's system headers first, as x86 (they are the system's), then the engine as not
    headers = re.findall(r"^#include <[^>]+>$", engine_c.read_text(), re.MULTILINE)
    assert headers
    wrapper.write_text("\n".join([*headers, "#undef __x86_64__", f'#include "{engine_c}"', ""]))
    library = tmp_path / "portable.so"
    flags = ["-std=gnu11", "-O3", "-pthread", "-fvisibility=default", "-fPIC", "-shared"]
    built = subprocess.run(
        [cc, *flags, "-Werror", "-Wall", str(wrapper), "-o", str(library), "-ldl"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    saved = tmp_path / "portable.pt"
    proc = subprocess.run(
        [sys.executable, "-c", _PORTABLE_CHILD, str(saved)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, native.LIBRARY_ENV: str(library)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = torch.load(saved)
    with native.use_level("base"):
        for mode in MODES:
            for way in ("packed", "in_place"):
                with native.use_products(way, way):
                    want = _run(native, _problem(mode))
                assert len(got[f"{mode} {way}"]) == len(want)
                for a, b in zip(got[f"{mode} {way}"], want):
                    assert torch.equal(a, b), (mode, way)


@needs_engine
@pytest.mark.parametrize("mode", ["rnn_tanh", "lstm", "gru"])
def test_a_step_alone_gives_the_teams_bits_and_is_not_taken_where_h0_is_written(mode: str) -> None:
    """A forward of one step runs its threads without a barrier, reading h0 where it is
    (engine.c's step_alone), unless h0 shares memory with what the threads write: then the
    team copies h0 first, as every longer call does. Both give the same bits; an output written
    over h0 is the value computed from h0 as it was."""
    lib = native_library._library().lib
    assert lib is not None
    # (declared here: the package does not call it, so an engine of an earlier revision, as
    # tools/engine_ab.py loads, need not have it)
    step_alone = lib.cr_step_alone
    step_alone.argtypes = [ctypes.POINTER(native_library._ForwardArgs)]
    units, batch = 128, 16  # two threads: B * H * H at least engine.c's 2 ** 18 for one step
    gates = MODE_FACTS[mode].num_gates
    g = torch.Generator().manual_seed(3)
    gi = torch.randn(batch, gates * units, generator=g)
    r = torch.randn(gates * units, units, generator=g) / units**0.5
    bias, br = torch.randn(gates * units, generator=g), torch.randn(gates * units, generator=g)
    state = torch.randn(batch, units, generator=g)
    c0 = torch.randn(batch, units, generator=g)

    def call(h0: torch.Tensor, hn: torch.Tensor, y: torch.Tensor) -> bool:
        cn = torch.empty(batch, units)
        args = native_library._ForwardArgs(
            mode=native.MODE_CODES[mode], steps=1, batch=batch, units=units, threads=2,
            gi=gi.data_ptr(), gi_st=batch * gates * units, gi_sb=gates * units,
            bi=bias.data_ptr(), r=r.data_ptr(), br=br.data_ptr() if mode == "gru" else None,
            h0=h0.data_ptr(), y=y.data_ptr(), y_st=batch * units, y_sb=units, hn=hn.data_ptr(),
            c0=c0.data_ptr() if mode == "lstm" else None,
            cn=cn.data_ptr() if mode == "lstm" else None,
        )  # fmt: skip
        alone = bool(step_alone(ctypes.byref(args)))
        native_library._call("cr_forward", args)
        return alone

    h0, hn, y = state.clone(), torch.empty(batch, units), torch.empty(batch, units)
    assert call(h0, hn, y)
    expected = hn.clone()
    assert torch.equal(y, expected) and torch.equal(h0, state)
    over = state.clone()  # hn written over h0
    assert not call(over, over, torch.empty(batch, units))
    assert torch.equal(over, expected)
    over = state.clone()  # the output written over h0
    assert not call(over, torch.empty(batch, units), over)
    assert torch.equal(over, expected)
    buffer = torch.empty(2 * batch * units)  # the output's last row over h0's first one
    y_part = buffer[: batch * units].view(batch, units)
    h0_part = buffer[(batch - 1) * units :][: batch * units].view(batch, units)
    h0_part.copy_(state)
    assert not call(h0_part, torch.empty(batch, units), y_part)
    assert torch.equal(y_part, expected)
