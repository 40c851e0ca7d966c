"""The onnxruntime inference path: when it is taken, that it computes the oracle's numbers, and
that its session cache never serves stale weights."""

from __future__ import annotations

import copy
import itertools
import pickle
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

import cudnn_rnn
from cudnn_rnn import inference
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.inference import SessionCache
from tests.helpers import make_case, make_op, run_oracle

pytest.importorskip("onnxruntime")


@pytest.fixture(autouse=True)
def _auto_backend() -> Any:
    with inference.inference_backend("auto"):
        yield


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bool, bool]]:
    """Records every session build as ``(use_lengths, states)``."""
    calls: list[tuple[bool, bool]] = []
    original = SessionCache._build

    def spy(self: SessionCache, params: torch.Tensor, use_lengths: bool, states: bool) -> Any:
        calls.append((use_lengths, states))
        return original(self, params, use_lengths, states)

    monkeypatch.setattr(SessionCache, "_build", spy)
    return calls


def _call(op: Any, case: Any, params: torch.Tensor) -> tuple[torch.Tensor, ...]:
    t = lambda a: torch.as_tensor(a, dtype=torch.float32)  # noqa: E731
    states = [t(case.h0)] + ([t(case.c0)] if case.c0 is not None else [])
    with torch.no_grad():
        out = op(
            t(case.x),
            *states,
            params,
            is_training=False,
            sequence_lengths=case.lengths,
            time_major=case.time_major,
        )
    return tuple(out)


MODES = ("lstm", "gru", "rnn_tanh", "rnn_relu")


@pytest.mark.parametrize(
    ("mode", "layers", "direction", "varlen", "time_major", "input_mode"),
    [
        (m, n, d, v, tm, im)
        for m, n, d, v, tm, im in itertools.product(
            MODES,
            (1, 3),
            ("unidirectional", "bidirectional"),
            (False, True),
            (True, False),
            ("linear_input", "skip_input"),
        )
        if not (im == "skip_input" and (n == 3 and not v))  # keep the grid small
    ],
)
def test_matches_oracle_and_torch_path(
    mode: str,
    layers: int,
    direction: str,
    varlen: bool,
    time_major: bool,
    input_mode: str,
    builds: list[tuple[bool, bool]],
) -> None:
    units = 5
    spec = RNNSpec(
        mode, layers, units, units if input_mode == "skip_input" else 4, input_mode, direction
    )
    case = make_case(spec, 6, 3, seed=layers, varlen=varlen, time_major=time_major)
    op = make_op(spec, torch.float32)
    params = op.canonical_to_params(case.weights, case.biases)
    first = _call(op, case, params)  # new weights: torch's kernels
    assert builds == []
    second = _call(op, case, params)  # same weights again: onnxruntime
    assert len(builds) == 1
    assert builds[0][0] == (case.lengths is not None and int(np.min(case.lengths)) < 6)
    expected = run_oracle(case)
    for ours, torch_path, want in zip(second, first, expected):
        assert want is not None
        np.testing.assert_allclose(ours.numpy(), want, atol=2e-6, rtol=0)
        np.testing.assert_allclose(ours.numpy(), torch_path.numpy(), atol=2e-6, rtol=0)
        assert ours.dtype == torch.float32 and ours.shape == torch_path.shape
    if case.lengths is not None:  # padded outputs are exactly 0, as on the torch path
        y = second[0] if time_major else second[0].transpose(0, 1)
        for b, n in enumerate(case.lengths):
            assert bool((y[n:, b] == 0).all())


def test_layer_eval_uses_session_and_results_are_writable(builds: list[Any]) -> None:
    layer = cudnn_rnn.CudnnGRU(2, 8, input_size=3).eval()
    x = torch.randn(4, 2, 3)
    with torch.no_grad():
        want = layer(x)[0].clone()
        out, (h,) = layer(x)
    assert len(builds) == 1
    torch.testing.assert_close(out, want, atol=2e-6, rtol=0)
    out += 1  # a normal, writable tensor
    assert out.requires_grad is False and h.shape == (2, 2, 8)


def _lstm_case(seed: int = 0) -> tuple[Any, Any, torch.Tensor]:
    spec = RNNSpec("lstm", 2, 6, 3, "linear_input", "unidirectional")
    case = make_case(spec, 5, 2, seed=seed)
    op = make_op(spec, torch.float32)
    return op, case, op.canonical_to_params(case.weights, case.biases)


def _expected(op: Any, case: Any, params: torch.Tensor) -> torch.Tensor:
    with inference.inference_backend("torch"):
        return _call(op, case, params)[0]


@pytest.mark.parametrize(
    "change",
    ["optimizer step", "copy_ under no_grad", "write through .data", "swap .data", "new tensor"],
)
def test_weight_changes_rebuild_the_session(change: str, builds: list[Any]) -> None:
    op, case, params = _lstm_case()
    params = torch.nn.Parameter(params)
    for _ in range(3):
        _call(op, case, params)
    assert len(builds) == 1
    if change == "optimizer step":
        params.grad = torch.ones_like(params)
        torch.optim.SGD([params], lr=0.1).step()
    elif change == "copy_ under no_grad":
        with torch.no_grad():
            params.copy_(params * 0.5)
    elif change == "write through .data":  # not seen by the version counter
        params.data.mul_(0.5)
    elif change == "swap .data":
        params.data = params.data * 0.5
    else:
        params = torch.nn.Parameter(params.detach() * 0.5)
    got = [_call(op, case, params)[0] for _ in range(2)]
    assert len(builds) == 2  # rebuilt at the second call with the new weights
    want = _expected(op, case, params)
    for g in got:
        torch.testing.assert_close(g, want, atol=2e-6, rtol=0)
    assert not torch.allclose(want, _call(op, case, params * 2)[0])


def test_clear_sessions_after_a_partial_data_write(builds: list[Any]) -> None:
    op, case, params = _lstm_case()
    for _ in range(2):
        _call(op, case, params)
    params.data[1] += 1.0  # one element that the sample may miss, bypassing the version
    inference.clear_sessions()
    for _ in range(2):
        got = _call(op, case, params)[0]
    assert len(builds) == 2
    torch.testing.assert_close(got, _expected(op, case, params), atol=2e-6, rtol=0)


def test_not_taken_when_a_gradient_or_torch_math_is_needed(builds: list[Any]) -> None:
    op, case, params = _lstm_case()
    t = lambda a: torch.as_tensor(a, dtype=torch.float32)  # noqa: E731
    p = params.clone().requires_grad_()
    for _ in range(3):  # grad mode on and params require grad
        out = op(t(case.x), t(case.h0), t(case.c0), p, is_training=False)[0]
    assert builds == [] and out.requires_grad
    spec64 = RNNSpec("lstm", 1, 4, 3, "linear_input", "unidirectional")
    op64 = make_op(spec64, torch.float64)
    p64 = torch.zeros(op64.params_size(), dtype=torch.float64)
    x64, h64 = torch.zeros(2, 1, 3, dtype=torch.float64), torch.zeros(1, 1, 4, dtype=torch.float64)
    proj = cudnn_rnn.ops.CudnnLSTM(1, 4, 3, num_proj=2)
    pp = torch.zeros(proj.params_size())
    drop = cudnn_rnn.ops.CudnnGRU(2, 4, 3, dropout=0.5)
    pd = torch.zeros(drop.params_size())
    with torch.no_grad():
        for _ in range(3):
            op64(x64, h64, h64, p64)  # float64
            proj(torch.zeros(2, 1, 3), torch.zeros(1, 1, 2), torch.zeros(1, 1, 4), pp)
            drop(torch.zeros(2, 1, 3), torch.zeros(2, 1, 4), pd, is_training=True)  # dropout
    assert builds == []
    with torch.no_grad():  # the same dropout op in inference does take it
        for _ in range(2):
            drop(torch.zeros(2, 1, 3), torch.zeros(2, 1, 4), pd, is_training=False)
    assert len(builds) == 1


def test_backends(builds: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    op, case, params = _lstm_case()
    with inference.inference_backend("torch"):
        for _ in range(3):
            _call(op, case, params)
    assert builds == []
    with inference.inference_backend("onnxruntime"):
        _call(op, case, params)  # the first call already
    assert len(builds) == 1
    assert inference.get_inference_backend() == "auto"
    with pytest.raises(ValueError, match=r"set_inference_backend: the inference backend must be"):
        inference.set_inference_backend("cuda")
    monkeypatch.setattr(inference, "_ort_module", [None])  # as if not installed
    _, case2, params2 = _lstm_case(seed=1)
    for _ in range(2):
        _call(op, case2, params2)  # auto: quietly torch
    with (
        inference.inference_backend("onnxruntime"),
        pytest.raises(ImportError, match="pip install onnx onnxruntime"),
    ):
        _call(op, case2, params2)


def test_env_var_sets_the_initial_backend() -> None:
    code = "from cudnn_rnn import inference; print(inference.get_inference_backend())"
    env = {"CUDNN_RNN_INFERENCE": "torch", "PATH": ""}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "torch"
    env["CUDNN_RNN_INFERENCE"] = "bogus"
    bad = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert bad.returncode != 0 and "$CUDNN_RNN_INFERENCE" in bad.stderr


def test_build_failure_falls_back_to_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any) -> Any:
        raise RuntimeError("no session today")

    monkeypatch.setattr(SessionCache, "_build", broken)
    op, case, params = _lstm_case()
    got = [_call(op, case, params)[0] for _ in range(3)]
    for g in got:
        torch.testing.assert_close(g, _expected(op, case, params), atol=0, rtol=0)
    with (
        inference.inference_backend("onnxruntime"),
        pytest.raises(RuntimeError, match="no session today"),
    ):
        _call(make_op(op.spec, torch.float32), case, params)


def test_states_fed_or_left_out(builds: list[Any]) -> None:
    layer = cudnn_rnn.CudnnLSTM(1, 6, input_size=3).eval()
    x = torch.randn(4, 2, 3)
    h = torch.randn(1, 2, 6)
    c = torch.randn(1, 2, 6)
    with torch.no_grad(), inference.inference_backend("torch"):
        want_zero, want_given = layer(x)[0], layer(x, (h, c))[0]
    with torch.no_grad(), inference.inference_backend("onnxruntime"):
        got_zero, got_given = layer(x)[0], layer(x, (h, c))[0]
        layer(x, (torch.zeros_like(h), torch.zeros_like(c)))  # given zeros: fed like any state
    assert builds == [(False, False), (False, True)]  # zero states of the layer: not fed
    torch.testing.assert_close(got_zero, want_zero, atol=2e-6, rtol=0)
    torch.testing.assert_close(got_given, want_given, atol=2e-6, rtol=0)
    assert not torch.allclose(got_zero, got_given)


def test_copies_and_pickles_drop_sessions(builds: list[Any]) -> None:
    layer = cudnn_rnn.CudnnRNNTanh(1, 4, input_size=2).eval()
    x = torch.randn(3, 1, 2)
    with torch.no_grad():
        on_torch = layer(x)[0]
        on_ort = layer(x)[0]
        twin = copy.deepcopy(layer)
        revived = pickle.loads(pickle.dumps(layer))
        for other in (twin, revived):  # new objects: torch first, then their own session
            torch.testing.assert_close(other(x)[0], on_torch, atol=0, rtol=0)
            torch.testing.assert_close(other(x)[0], on_ort, atol=0, rtol=0)
    assert len(builds) == 3


def _virtual_clock(
    monkeypatch: pytest.MonkeyPatch,
    torch_cost: Callable[[list[str]], float],
    ort_cost: Callable[[list[str]], float],
) -> list[str]:
    """Each path advances a virtual clock by its cost (given the paths run so far); returns
    the list of paths run, in order."""
    now = [0.0]
    ran: list[str] = []
    run_session = inference._run_session
    rnn_forward = cudnn_rnn.ops.rnn_forward

    def timed_session(*args: Any) -> Any:
        now[0] += ort_cost(ran)
        ran.append("onnxruntime")
        return run_session(*args)

    def timed_torch(*args: Any, **kwargs: Any) -> Any:
        now[0] += torch_cost(ran)
        ran.append("torch")
        return rnn_forward(*args, **kwargs)

    monkeypatch.setattr(inference, "_clock", lambda: now[0])
    monkeypatch.setattr(inference, "_run_session", timed_session)
    monkeypatch.setattr(cudnn_rnn.ops, "rnn_forward", timed_torch)
    return ran


@pytest.mark.parametrize("slow_block", [0, 1])
def test_a_burst_of_load_during_one_block_does_not_decide(
    slow_block: int, builds: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch is faster, but one of its trial blocks runs 10x slow (another process's burst)."""

    def torch_cost(ran: list[str]) -> float:
        timed = ran.count("torch") - 1  # the first use is untimed
        return 10.0 if timed // inference.TRIAL_BLOCK == slow_block else 1.0

    ran = _virtual_clock(monkeypatch, torch_cost, lambda _: 2.0)
    op, case, params = _lstm_case()
    for _ in range(1 + 2 + 2 * inference.TRIALS):
        _call(op, case, params)
    ran.clear()
    for _ in range(3):
        _call(op, case, params)
    assert ran == ["torch"] * 3


@pytest.mark.parametrize("faster", ["torch", "onnxruntime"])
def test_auto_settles_each_size_on_the_faster_path(
    faster: str, builds: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A virtual clock makes one path look faster; after the trials every call takes it."""
    torch_cost, ort_cost = (1.0, 10.0) if faster == "torch" else (10.0, 1.0)
    ran = _virtual_clock(monkeypatch, lambda _: torch_cost, lambda _: ort_cost)
    op, case, params = _lstm_case()
    want = _expected(op, case, params)
    ran.clear()
    calls = 1 + 2 + 2 * inference.TRIALS  # first use, warm-up, trials
    for _ in range(calls):
        torch.testing.assert_close(_call(op, case, params)[0], want, atol=2e-6, rtol=0)
    block = inference.TRIAL_BLOCK
    rounds = inference.TRIALS // block
    assert rounds >= 2 and inference.TRIALS % block == 0
    trials = (["torch"] * block + ["onnxruntime"] * block) * rounds
    assert ran == ["torch"] + ["onnxruntime"] * 2 + trials
    ran.clear()
    for _ in range(4):
        torch.testing.assert_close(_call(op, case, params)[0], want, atol=2e-6, rtol=0)
    assert ran == [faster] * 4
    # The choice belongs to the size: new weights keep it (no session when torch won) ...
    _, case2, params2 = _lstm_case(seed=3)
    ran.clear()
    for _ in range(3):
        _call(op, case2, params2)
    assert ran == (
        ["torch", "onnxruntime", "onnxruntime"] if faster == "onnxruntime" else ["torch"] * 3
    )
    assert len(builds) == (2 if faster == "onnxruntime" else 1)
    # ... and another batch size is measured afresh.
    case3 = make_case(op.spec, 5, 4, seed=1)
    ran.clear()
    for _ in range(3):
        _call(op, case3, params2)
    # Warm-up of the new size's trial (after the first use of weights that had no session yet).
    if faster == "onnxruntime":
        assert ran == ["onnxruntime", "onnxruntime", "torch"]
    else:
        assert ran == ["torch", "onnxruntime", "onnxruntime"]
