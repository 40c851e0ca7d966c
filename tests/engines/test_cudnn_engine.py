"""The ``cudnn`` engine on the CPU, through a stand-in for aten's cuDNN entry points.

What a GPU adds is checked by the ``cuda``-marked tests (tests/engines/test_cuda_engine.py) and
``make gpu-check``. Here the engine's own work is checked where CI runs: the buffer handed to
cuDNN (ours in place, or a copy where cuDNN pads or under skip_input), packing of variable
lengths, states in cuDNN's batch order, the weight gradient assembled as one buffer, dropout
from the call's seed, the reserve and its data-dependent size through ``torch.compile`` and
``torch.export``, and the refusal of a second backward. Numbers are compared with the NumPy
oracle and with the ``loop`` engine (gradients), both independent of the stand-in's arithmetic
(torch's own CPU kernels).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from cudnn_rnn import CudnnGRU, CudnnLSTM, engines, operator
from cudnn_rnn.cells import CudnnCompatibleLSTMCell, MultiRNNCell, dynamic_rnn
from cudnn_rnn.core.layout import layout_of
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.engines import cudnn, loop
from cudnn_rnn.operator import implementation
from tests.support.cudnn_standin import StandIn
from tests.support.engines import watch_engines
from tests.support.helpers import (
    assert_matches_oracle,
    assert_matches_torch_nn,
    check_export_dynamic,
    make_case,
    make_op,
    run_oracle,
)

F64 = torch.float64


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> Iterator[StandIn]:
    s = StandIn()
    monkeypatch.setattr(cudnn, "ATEN", s)
    monkeypatch.setattr(cudnn, "_PLANS", {})
    yield s


@pytest.fixture
def padded(monkeypatch: pytest.MonkeyPatch) -> Iterator[StandIn]:
    """A stand-in whose buffer has padding before every block: the engine must copy."""
    s = StandIn(pad=3)
    monkeypatch.setattr(cudnn, "ATEN", s)
    monkeypatch.setattr(cudnn, "_PLANS", {})
    yield s


def _specs() -> list[RNNSpec]:
    out = []
    for mode in ("lstm", "gru", "rnn_tanh", "rnn_relu"):
        for layers, direction in ((1, "unidirectional"), (2, "bidirectional")):
            out.append(RNNSpec(mode, layers, 3, 2, direction=direction))
            out.append(RNNSpec(mode, layers, 3, 3, input_mode="skip_input", direction=direction))
    out.append(RNNSpec("lstm", 2, 4, 3, direction="bidirectional", num_proj=2))
    out.append(RNNSpec("lstm", 1, 1, 1))  # sizes of 1
    return out


def _id(s: RNNSpec) -> str:
    return f"{s.mode}-{s.num_layers}-{s.direction[:3]}-{s.input_mode[:4]}-p{s.num_proj}"


def _grads(case: Any, dtype: torch.dtype = F64, engine: str = "cudnn") -> list[torch.Tensor]:
    """Gradients of a fixed weighted sum of every output w.r.t. params, x, h0 (and c0), run
    (and seen to run) on ``engine``: ``cudnn`` (the stand-in, the rule's choice here) or
    ``loop`` (cuDNN refused, the rule table's engine for float64 training)."""
    with pytest.MonkeyPatch.context() as patch:
        if engine != "cudnn":
            patch.setattr(cudnn.Cudnn, "supports", lambda self, call: False)
        runs = watch_engines(patch)
        op = make_op(case.spec, dtype)
        params = op.canonical_to_params(case.weights, case.biases).requires_grad_()
        tensors = [torch.as_tensor(a, dtype=dtype).requires_grad_() for a in (case.x, case.h0)]
        if case.c0 is not None:
            tensors.append(torch.as_tensor(case.c0, dtype=dtype).requires_grad_())
        outs = op(*tensors, params, sequence_lengths=case.lengths, time_major=case.time_major)
        gen = torch.Generator().manual_seed(1)
        loss = sum((o * torch.rand(o.shape, generator=gen, dtype=dtype)).sum() for o in outs)
        grads = list(torch.autograd.grad(loss, [params, *tensors]))
    assert runs == [(engine, "forward"), (engine, "backward")], runs
    return grads


def test_the_rule_table_picks_cudnn_for_what_it_computes(standin: StandIn) -> None:
    cpu = torch.device("cpu")
    spec = RNNSpec("gru", 2, 3, 2)
    for grad in (False, True):
        for lengths in (False, True):
            for traced in (False, True):
                got = engines.select(spec, cpu, F64, grad, lengths, traced)
                assert got == engines.CUDNN
    assert engines.select(spec, cpu, torch.float16, True, False) == engines.CUDNN
    # bfloat16 and a projection as wide as the cell (cuDNN turns it off) take the next rule.
    assert engines.select(spec, cpu, torch.bfloat16, True, False) == engines.LOOP
    wide = RNNSpec("lstm", 1, 3, 2, num_proj=3)
    assert engines.select(wide, cpu, F64, False, False) == engines.TORCH


@pytest.mark.parametrize("spec", _specs(), ids=_id)
@pytest.mark.parametrize("varlen", [False, True], ids=["full", "varlen"])
def test_forward_and_gradients_match_the_oracle_and_the_loop(
    spec: RNNSpec, varlen: bool, standin: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = make_case(spec, 4, 3, seed=2, varlen=varlen)
    for grad in (False, True):
        assert_matches_oracle(case, F64, atol=1e-10, requires_grad=grad)
    assert any(name == "rnn" for name, _ in standin.calls)
    got = _grads(case)
    assert any(name == "rnn" and info["train"] for name, info in standin.calls)
    want = _grads(case, engine="loop")
    _assert_same_grads(got, want)


def _assert_same_grads(got: list[torch.Tensor], want: list[torch.Tensor]) -> None:
    for name, g, w in zip(("params", "x", "h0", "c0"), got, want):
        torch.testing.assert_close(g, w, atol=1e-10, rtol=0, msg=name)


def test_the_agreement_fails_when_the_loop_is_broken(
    standin: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The comparison above earns its trust: the loop's weight gradient off by 1e-3 fails it."""
    case = make_case(RNNSpec("gru", 2, 3, 2, direction="bidirectional"), 4, 3, seed=2)
    got = _grads(case)
    real = loop.ENGINE.backward

    def off(*args: Any, **kwargs: Any) -> Any:
        dparams, *rest = real(*args, **kwargs)
        return (dparams + 1e-3, *rest)

    monkeypatch.setattr(loop.ENGINE, "backward", off)
    with pytest.raises(AssertionError, match="params"):
        _assert_same_grads(got, _grads(case, engine="loop"))


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_unsorted_lengths_pack_sorted_and_come_back_in_order(standin: StandIn, mode: str) -> None:
    spec = RNNSpec(mode, 2, 3, 2, direction="bidirectional")
    case = make_case(spec, 6, 5, seed=3)
    case.lengths = np.array([2, 6, 1, 4, 4])  # unsorted, with a tie (the sort is stable)
    assert_matches_oracle(case, F64, atol=1e-10, requires_grad=True)
    # The oracle's call and torch.nn's gradient comparison: both packed.
    assert [info["packed"] for name, info in standin.calls if name == "rnn"] == [True, True]
    case.lengths = np.array([6, 6, 6, 6, 6])  # every sequence full: cuDNN's unpacked input
    assert_matches_oracle(case, F64, atol=1e-10)
    assert [info["packed"] for name, info in standin.calls if name == "rnn"][-1] is False


def test_the_buffer_is_handed_to_cudnn_in_place_and_its_gradient_comes_back_as_one(
    standin: StandIn,
) -> None:
    spec = RNNSpec("lstm", 2, 3, 2, direction="bidirectional")
    case = make_case(spec, 4, 2)
    op = make_op(spec)
    params = op.canonical_to_params(case.weights, case.biases).requires_grad_()
    x, h, c = (torch.as_tensor(a) for a in (case.x, case.h0, case.c0))
    out = op(x, h, c, params)[0]
    assert [i["buf"] for n, i in standin.calls if n == "rnn"] == [params.data_ptr()]
    storages: list[int] = []
    real = standin.rnn_backward

    def spy(*args: Any) -> Any:
        result = real(*args)
        storages.append(result[3][0].untyped_storage().data_ptr())
        return result

    standin.rnn_backward = spy  # type: ignore[method-assign]
    out.sum().backward()
    assert params.grad is not None
    # The gradient is cuDNN's own buffer of weight gradients, not a copy of it.
    assert params.grad.untyped_storage().data_ptr() == storages[0]


@pytest.mark.parametrize("lengths", [None, [4, 2, 3]], ids=["full", "lengths"])
def test_the_outputs_gradient_reaches_cudnn_as_the_caller_made_it(
    standin: StandIn, lengths: list[int] | None
) -> None:
    """The gradient of ``out.sum()`` is one value expanded over the output: aten's backward
    makes it contiguous itself, freed before cuDNN's workspace, so the operator must not hold an
    output-sized copy through the backward (torch.nn's peak memory is the bar)."""
    spec = RNNSpec("gru", 1, 3, 2)
    case = make_case(spec, 4, 3)
    op = make_op(spec)
    params = op.canonical_to_params(case.weights, case.biases).requires_grad_()
    x, h = torch.as_tensor(case.x), torch.as_tensor(case.h0)
    seen: list[torch.Tensor] = []
    real = standin.rnn_backward

    def spy(*args: Any) -> Any:
        seen.append(args[7])  # dy
        return real(*args)

    standin.rnn_backward = spy  # type: ignore[method-assign]
    grads = []
    for loss in (lambda y: y.sum(), lambda y: (y * torch.ones_like(y)).sum()):
        params.grad = None
        loss(op(x, h, params, sequence_lengths=lengths)[0]).backward()
        assert params.grad is not None
        grads.append(params.grad)
    if lengths is None:
        assert seen[0].stride() == (0, 0, 0)  # the expanded gradient, not a copy
    assert seen[1].is_contiguous()
    torch.testing.assert_close(grads[0], grads[1], atol=0, rtol=0)
    # The engines that need it contiguous still get it so (the native engine refuses others).
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cudnn.Cudnn, "supports", lambda self, call: False)
        runs = watch_engines(patch)
        params.grad = None
        op(x, h, params, sequence_lengths=lengths)[0].sum().backward()
        assert runs == [("loop", "forward"), ("loop", "backward")], runs
        torch.testing.assert_close(params.grad, grads[0], atol=1e-12, rtol=0)
    assert cudnn.plan(layout_of(spec), F64, torch.device("cpu")).in_place


@pytest.mark.parametrize(
    "spec",
    [
        RNNSpec("gru", 2, 3, 2, direction="bidirectional"),
        RNNSpec("lstm", 2, 3, 3, input_mode="skip_input", num_proj=2),
    ],
    ids=_id,
)
def test_a_padded_cudnn_layout_is_copied_into_and_out_of(padded: StandIn, spec: RNNSpec) -> None:
    case = make_case(spec, 4, 3, seed=5, varlen=True)
    assert_matches_oracle(case, F64, atol=1e-10, requires_grad=True)
    p = cudnn.plan(layout_of(spec), F64, torch.device("cpu"))
    assert not p.in_place and p.numel == layout_of(cudnn.linear_spec(spec)).size + 3 * len(
        p.targets
    )
    got = _grads(case)
    want = _grads(case, engine="loop")
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=1e-10, rtol=0)


def test_skip_input_hands_cudnn_identities_and_drops_their_gradient(standin: StandIn) -> None:
    spec = RNNSpec("rnn_tanh", 1, 3, 3, input_mode="skip_input")
    case = make_case(spec, 3, 2)
    op = make_op(spec)
    params = op.canonical_to_params(case.weights, case.biases).requires_grad_()
    op(torch.as_tensor(case.x), torch.as_tensor(case.h0), params)[0]
    assert [i["buf"] for n, i in standin.calls if n == "rnn"] != [params.data_ptr()]
    # Every stored weight's and bias's gradient, at its own offset, is torch.nn's (which holds
    # the identity as a real matrix), and so are the input's and the state's.
    assert_matches_torch_nn(case, F64, atol=1e-10)
    assert [i["train"] for n, i in standin.calls if n == "rnn"] == [True, True]  # cuDNN's both


def test_batch_major_layer_and_time_major_layer_agree(standin: StandIn) -> None:
    torch.manual_seed(0)
    layer = CudnnGRU(2, 4, direction="bidirectional", dtype=F64)
    x = torch.randn(3, 5, 2, dtype=F64)  # [B, T, I]
    lengths = [5, 2, 4]
    got, (h,) = layer(x, sequence_lengths=lengths, time_major=False)
    want, (h_t,) = layer(x.transpose(0, 1), sequence_lengths=lengths)
    torch.testing.assert_close(got, want.transpose(0, 1), atol=0, rtol=0)
    torch.testing.assert_close(h, h_t, atol=0, rtol=0)
    assert bool((got[1, 2:] == 0).all())


def test_dropout_is_cudnns_own_seeded_per_call(standin: StandIn) -> None:
    spec = RNNSpec("lstm", 3, 4, 2, dropout=0.5)
    case = make_case(spec, 4, 3, seed=7)
    op = make_op(spec, seed=11)
    params = op.canonical_to_params(case.weights, case.biases).requires_grad_()
    args = [torch.as_tensor(a) for a in (case.x, case.h0, case.c0)]
    first = op(*args, params, is_training=True)[0]
    second = op(*args, params, is_training=True)[0]
    assert not torch.equal(first, second)  # the step counter moved: new masks
    again = make_op(spec, seed=11)(*args, params, is_training=True)[0]
    assert torch.equal(first, again)  # the same seed: the same masks
    seeds = [i["seed"] for n, i in standin.calls if n == "dropout_state"]
    assert seeds[0] == implementation._call_seed(11, torch.tensor(0)) and seeds[0] != seeds[1]
    # The masks cuDNN drew are the ones the numbers and gradients follow.
    masks = [m.numpy() for m in standin.masks[seeds[0] % 2**63, (4, 3, 4)]]
    want = run_oracle(case, dropout_masks=masks)
    np.testing.assert_allclose(first.detach().numpy(), want[0], atol=1e-10)
    first.sum().backward()  # the backward gets the dropout state of its own forward
    assert params.grad is not None and bool(params.grad.isfinite().all())
    # Inference applies none; training without gradient still does (cuDNN's training mode).
    plain = op(*args, params.detach(), is_training=False)[0]
    np.testing.assert_allclose(plain.numpy(), run_oracle(case)[0], atol=1e-10)
    with torch.no_grad():
        dropped = op(*args, params, is_training=True)[0]
    assert not torch.equal(dropped, plain)
    assert [i["train"] for n, i in standin.calls if n == "rnn"][-1] is True


@pytest.mark.parametrize("dropout", [0.0, 0.5])
@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh"])
def test_a_second_backward_through_one_call_makes_a_fresh_reserve(
    standin: StandIn, dropout: float, mode: str
) -> None:
    """cuDNN's backward writes into its reserve (the stand-in refuses a used one): a second
    backward (retain_graph, gradcheck) runs the forward again for a fresh reserve, with the same
    dropout masks, and gives the same gradients."""
    from cudnn_rnn.layers import LAYER_CLASSES

    torch.manual_seed(0)
    layer = LAYER_CLASSES[mode](2, 3, dropout=dropout, dtype=F64)
    x = torch.randn(4, 2, 2, dtype=F64, requires_grad=True)
    out, _ = layer(x, sequence_lengths=[4, 3])
    first = torch.autograd.grad(out.sum(), [layer.opaque_kernel, x], retain_graph=True)
    runs = sum(1 for n, _ in standin.calls if n == "rnn")
    second = torch.autograd.grad(out.sum(), [layer.opaque_kernel, x])
    assert sum(1 for n, _ in standin.calls if n == "rnn") == runs + 1  # the forward, again
    for a, b in zip(first, second):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_a_second_backward_is_known_from_the_autograd_node(standin: StandIn) -> None:
    """The saved reserve comes back as a new tensor object in every backward once the first
    one is gone (autograd unpacks saved outputs afresh), so a table of tensor identities can
    miss a second backward; the autograd node tells the engine instead."""
    from cudnn_rnn.engines import cudnn

    torch.manual_seed(0)
    layer = CudnnGRU(2, 3, dtype=F64)
    x = torch.randn(4, 2, 2, dtype=F64, requires_grad=True)
    out, _ = layer(x)
    first = torch.autograd.grad(out.sum(), [layer.opaque_kernel, x], retain_graph=True)
    runs = sum(1 for n, _ in standin.calls if n == "rnn")
    cudnn._USED.clear()  # what the death of the first backward's tensor objects does
    second = torch.autograd.grad(out.sum(), [layer.opaque_kernel, x])
    assert sum(1 for n, _ in standin.calls if n == "rnn") == runs + 1  # the forward, again
    for a, b in zip(first, second):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_gradcheck_differentiates_one_call_many_times(standin: StandIn) -> None:
    spec = RNNSpec("gru", 2, 3, 2, direction="bidirectional")
    op = make_op(spec)
    params = (torch.randn(layout_of(spec).size, dtype=F64) * 0.5).requires_grad_()
    x = torch.randn(3, 2, 2, dtype=F64, requires_grad=True)
    h = torch.randn(4, 2, 3, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda p, x, h: op(x, h, p, sequence_lengths=[3, 1]), (params, x, h)
    )


def test_batch_zero_and_the_kept_reserve(standin: StandIn) -> None:
    layer = CudnnLSTM(2, 3, dtype=F64)
    out, (h, c) = layer(torch.randn(4, 0, 2, dtype=F64))
    assert out.shape == (4, 0, 3) and h.shape == c.shape == (2, 0, 3)
    spec = RNNSpec("gru", 2, 3, 2)
    p = torch.randn(layout_of(spec).size, dtype=F64)
    args = (p, torch.randn(4, 2, 2, dtype=F64), torch.zeros(2, 2, 3, dtype=F64), None, None)
    static = operator.static_of(spec)
    out = torch.ops.cudnn_rnn.rnn(*args, None, *static, 0.5, 3, True, False)
    assert out[3].numel() == 0  # cuDNN keeps its own masks: none drawn by the operator
    # cuDNN's reserve, its dropout state and the call's seed (to make both again if needed)
    assert len(out[5]) == 3 and out[5][0].dtype == torch.uint8 and out[5][2].dtype == torch.int64
    out = torch.ops.cudnn_rnn.rnn(*args, None, *static, 0.0, 3, False, False)
    assert out[5] == []  # no gradient: nothing kept


def test_opcheck(standin: StandIn) -> None:
    spec = RNNSpec("lstm", 2, 3, 2, direction="bidirectional")
    states = [torch.randn(4, 3, 3, dtype=F64) for _ in range(2)]
    static = operator.static_of(spec)
    for need_grad in (False, True):
        params = (torch.randn(layout_of(spec).size, dtype=F64) * 0.3).requires_grad_(need_grad)
        x = torch.randn(5, 3, 2, dtype=F64)
        args = (params, x, *states, torch.tensor([5, 2, 4]), None, *static, 0.0, 0, need_grad)
        torch.library.opcheck(torch.ops.cudnn_rnn.rnn.default, (*args, False))
    out = torch.ops.cudnn_rnn.rnn(params.detach(), *args[1:], False)
    back = (
        params.detach(), x, *states, args[4], out[3], out[0], out[1], out[2], out[4], out[5],
        torch.ones_like(out[0]), torch.ones_like(out[1]), torch.ones_like(out[2]), *static, 0.0,
        False,
    )  # fmt: skip
    # Not test_schema: cuDNN's backward writes into the reserve, which the schema does not
    # declare on purpose (the engine's docstring says why; the tests above check the effect).
    torch.library.opcheck(
        torch.ops.cudnn_rnn.rnn_backward.default, back, test_utils=("test_faketensor",)
    )


def _loss(layer: torch.nn.Module, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    out, (h, c) = layer(x, sequence_lengths=lengths)
    return (out * out).sum() + h.sum() + c.sum()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_training_fullgraph_equals_eager(standin: StandIn, backend: str) -> None:
    torch._dynamo.reset()
    layer = CudnnLSTM(2, 4, direction="bidirectional", dtype=F64)
    x = torch.randn(5, 3, 2, dtype=F64, requires_grad=True)
    runs = []
    for fn in (_loss, torch.compile(_loss, backend=backend, fullgraph=True)):
        layer.zero_grad()
        x.grad = None
        loss = fn(layer, x, torch.tensor([5, 2, 4]))
        loss.backward()
        runs.append((loss.detach(), layer.opaque_kernel.grad.clone(), x.grad.clone()))
    for g, w in zip(runs[1], runs[0]):
        torch.testing.assert_close(g, w, atol=1e-12, rtol=0)
    assert sum(1 for n, i in standin.calls if n == "rnn" and i["train"]) >= 2


def test_export_with_dynamic_steps_and_batch(standin: StandIn) -> None:
    layer = CudnnGRU(1, 3, dtype=F64)
    x = torch.randn(5, 3, 2, dtype=F64)
    layer(x)  # builds it

    check_export_dynamic(layer, x, torch.randn(7, 4, 2, dtype=F64), atol=0.0)


def test_the_fake_gives_cudnns_reserve_a_data_dependent_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On fake CUDA tensors (no GPU needed) the real rule table picks cuDNN, whose reserve has a
    size only the kernel knows: an unbacked symbol, where a graph break is allowed or not."""
    from torch._subclasses.fake_tensor import DynamicOutputShapeException, FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv, free_unbacked_symbols

    monkeypatch.setattr(cudnn.Aten, "available", lambda self: True)
    spec = RNNSpec("lstm", 2, 3, 2)
    static = operator.static_of(spec)
    for allow in (True, False):
        with FakeTensorMode(shape_env=ShapeEnv(allow_dynamic_output_shape_ops=allow)):
            p = torch.empty(layout_of(spec).size, device="cuda")
            x, h = torch.empty(5, 3, 2, device="cuda"), torch.empty(2, 3, 3, device="cuda")
            args = (p, x, h, torch.empty(2, 3, 3, device="cuda"), None, None, *static, 0.0, 0)
            assert engines.select(spec, x.device, x.dtype, True, False, True) == engines.CUDNN
            if not allow:  # torch.compile without fullgraph: the graph breaks at the RNN
                with pytest.raises(DynamicOutputShapeException):
                    torch.ops.cudnn_rnn.rnn(*args, True, True)
                continue
            out = torch.ops.cudnn_rnn.rnn(*args, True, True)
            (reserve,) = out[5]
            assert reserve.dtype == torch.uint8 and free_unbacked_symbols(reserve.shape[0])
            assert out[4].numel() == 0 and out[3].numel() == 0  # no workspace, no masks
            inference = torch.ops.cudnn_rnn.rnn(*args, False, True)
            assert inference[5] == []


def test_the_fused_cell_drivers_run_through_the_operator(standin: StandIn) -> None:
    cell = MultiRNNCell([CudnnCompatibleLSTMCell(3, dtype=F64) for _ in range(2)])
    x = torch.randn(2, 4, 5, dtype=F64)  # [B, T, I]
    out, _ = dynamic_rnn(cell, x, sequence_length=[4, 2])
    assert sum(1 for n, _ in standin.calls if n == "rnn") == 1  # two layers, one call
    out.sum().backward()
    assert all(v.grad is not None for v in cell.parameters())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_float32_calls_run_in_ieee_float32_and_put_the_setting_back(
    dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch lets cuDNN's float32 RNNs use TF32 by default; the engine's aten calls ask for IEEE
    float32 while they run (float32 only) and leave torch's setting as they found it."""
    getter = torch._C._get_fp32_precision_getter
    seen: list[str] = []

    def fake(*args: Any) -> tuple[()]:
        seen.append(getter("cuda", "rnn"))
        return ()

    monkeypatch.setattr(torch.ops.aten, "_cudnn_rnn", fake)
    monkeypatch.setattr(torch.ops.aten, "_cudnn_rnn_backward", fake)
    before = getter("cuda", "rnn")
    x = torch.zeros(1, dtype=dtype)
    cudnn.Aten().rnn(x)
    cudnn.Aten().rnn_backward(x)
    assert seen == (["ieee"] * 2 if dtype == torch.float32 else [before] * 2)
    assert getter("cuda", "rnn") == before

    def broken(*args: Any) -> None:
        raise RuntimeError("cuDNN failed")

    monkeypatch.setattr(torch.ops.aten, "_cudnn_rnn", broken)
    with pytest.raises(RuntimeError, match="cuDNN failed"):
        cudnn.Aten().rnn(x)
    assert getter("cuda", "rnn") == before


def test_the_weight_list_is_made_once_per_buffer(standin: StandIn) -> None:
    """aten's calls get cuDNN's weight list as views of the parameter; the engine makes them
    once per buffer (as torch.nn keeps its flat weights), again when the storage is replaced,
    and lets them go with the layer."""
    import gc

    lists: list[int] = []
    real = standin.rnn

    def spy(*args: Any) -> Any:
        lists.append(id(args[1]))
        return real(*args)

    standin.rnn = spy  # type: ignore[method-assign]
    layer = CudnnLSTM(2, 4, input_size=3, direction="bidirectional", dtype=F64)
    x = torch.randn(5, 2, 3, dtype=F64)
    first = layer(x)[0].detach()
    layer(x)[0].sum().backward()
    with torch.no_grad():
        layer(x)
    assert len(set(lists)) == 1
    with torch.no_grad():
        layer.opaque_kernel.data = layer.opaque_kernel.data * 2  # a new storage
    second = layer(x)[0].detach()
    assert len(set(lists)) == 2 and not torch.equal(first, second)
    key = id(layer.opaque_kernel)
    assert key in cudnn._WEIGHTS
    del layer
    gc.collect()
    assert key not in cudnn._WEIGHTS
