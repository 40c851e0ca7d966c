"""The fused RNN as a PyTorch operator: compile, export, func, opcheck, autocast, PackedSequence,
determinism, threads, edge sizes (issue 11)."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import cudnn_rnn
from cudnn_rnn import convert, engines, operator
from cudnn_rnn.core.layout import layout_of
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.engines import native
from cudnn_rnn.layers import LAYER_CLASSES
from cudnn_rnn.operator import autograd, implementation
from tests.support.engines import force_engine, ran, watch_engines
from tests.support.helpers import assert_matches_oracle, make_case

needs_native = pytest.mark.skipif(
    not native.available(), reason=f"native engine not loaded: {cudnn_rnn.cpu_engine()}"
)

MODES = ("lstm", "gru", "rnn_tanh", "rnn_relu")


def _layer(mode: str, *, bidi: bool = True, layers: int = 2, size: int = 5, **kw: Any) -> Any:
    cls = LAYER_CLASSES[mode]
    direction = "bidirectional" if bidi else "unidirectional"
    return cls(layers, 4, direction=direction, seed=1, input_size=size, **kw)


class _Model(nn.Module):
    """A small model around one of our layers, as a user would write it."""

    def __init__(self, mode: str, time_major: bool = True, **kw: Any) -> None:
        super().__init__()
        self.rnn = _layer(mode, **kw)
        self.head = nn.Linear(self.rnn.num_dirs * 4, 3)
        self.time_major = time_major

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        out, states = self.rnn(x, sequence_lengths=lengths, time_major=self.time_major)
        return self.head(out).sum() + sum(s.sum() for s in states)  # type: ignore[no-any-return]


def _grads(model: nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("mode", MODES)
def test_compile_fullgraph_training_and_eval_equal_eager(backend: str, mode: str) -> None:
    torch._dynamo.reset()
    model = _Model(mode, time_major=False)
    x = torch.randn(3, 6, 5)  # batch-major
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    # With lengths (our loop engine in training) and without (oneDNN's for the LSTM).
    for train, lengths in ((True, torch.tensor([6, 2, 4])), (False, None), (True, None)):
        model.train(train)
        model.zero_grad()
        want = model(x, lengths)
        want.backward()
        want_grads = _grads(model)
        model.zero_grad()
        got = compiled(x, lengths)
        got.backward()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        for g, w in zip(_grads(model), want_grads):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x, lengths), model(x, lengths))


def _rnn_nodes(layer: Any) -> list[torch.fx.Node]:
    """The operator's nodes in the graph dynamo makes of a no-grad call of ``layer``."""
    torch._dynamo.reset()
    graphs: list[torch.fx.GraphModule] = []

    def backend(gm: torch.fx.GraphModule, inputs: Any) -> Any:
        graphs.append(gm)
        return gm

    with torch.no_grad():
        torch.compile(layer, backend=backend, fullgraph=True)(torch.randn(4, 2, 5))
    return [n for n in graphs[0].graph.nodes if "cudnn_rnn.rnn" in str(n.target)]


def test_compile_shows_one_rnn_node_taking_the_opaque_buffer() -> None:
    calls = _rnn_nodes(_layer("lstm"))
    assert len(calls) == 1
    params = calls[0].args[0]
    assert "opaque_kernel" in str(params)


@pytest.mark.parametrize(
    ("dropout", "train", "counted"), [(0.0, True, False), (0.5, False, False), (0.5, True, True)]
)
def test_the_dropout_counter_reaches_the_graph_only_where_masks_are_drawn(
    dropout: float, train: bool, counted: bool
) -> None:
    """The counter is a CPU tensor: as a graph input it would keep torch.compile's
    "reduce-overhead" from capturing the call in a CUDA graph, so calls that draw no masks
    (no dropout, or eval mode) pass None."""
    layer = _layer("gru", layers=2, dropout=dropout).train(train)
    (call,) = _rnn_nodes(layer)
    step = call.args[5]
    assert (step is not None) is counted, step
    assert int(layer._dropout_step) == int(counted)


def test_compile_dropout_reproducible_from_seed() -> None:
    torch._dynamo.reset()
    x = torch.randn(5, 2, 5)
    eager = _layer("gru", layers=3, dropout=0.5)
    compiled_layer = _layer("gru", layers=3, dropout=0.5)
    compiled = torch.compile(compiled_layer, backend="aot_eager", fullgraph=True)
    for _ in range(3):  # same seed, same stream of masks, also across calls
        want = eager(x)[0]
        got = compiled(x)[0]
        torch.testing.assert_close(got, want)
    assert int(compiled_layer._dropout_step) == 3


def test_compile_unbuilt_layer_says_to_build_it() -> None:
    torch._dynamo.reset()
    layer = cudnn_rnn.CudnnLSTM(1, 4)
    with pytest.raises(Exception, match=r"not built yet.*build\(input_shape\).*input_size="):
        torch.compile(layer, backend="eager", fullgraph=True)(torch.randn(3, 2, 5))


@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no_grad"])
@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_export_with_dynamic_time_and_batch(mode: str, grad: bool) -> None:
    model = _layer(mode).eval()
    steps, batch = torch.export.Dim("steps", min=2, max=64), torch.export.Dim("batch", min=2)
    with torch.set_grad_enabled(grad):
        program = torch.export.export(
            model, (torch.randn(6, 3, 5),), dynamic_shapes=({0: steps, 1: batch},)
        )
    calls = [n for n in program.graph.nodes if "cudnn_rnn.rnn" in str(n.target)]
    assert len(calls) == 1  # one node, not an unrolled loop
    assert calls[0].args[-2:] == (grad, True)  # need_grad as exported, traced
    for shape in ((9, 4, 5), (2, 7, 5)):
        x = torch.randn(*shape)
        with torch.no_grad():
            got_out, got_states = program.module()(x)
            want_out, want_states = model(x)
        if not grad:  # an inference graph runs the very kernels of an eager no-grad call
            assert torch.equal(got_out, want_out)
        torch.testing.assert_close(got_out, want_out)
        for g, w in zip(got_states, want_states):
            torch.testing.assert_close(g, w)


@pytest.mark.parametrize("mode", MODES)
def test_func_grad_and_functional_call_equal_autograd(mode: str) -> None:
    layer = _layer(mode)
    x = torch.randn(4, 2, 5)
    params = {k: v.detach() for k, v in layer.named_parameters()}

    def loss(p: dict[str, torch.Tensor]) -> torch.Tensor:
        out, _ = torch.func.functional_call(layer, p, (x,))
        return (out * out).sum()

    got = torch.func.grad(loss)(params)["opaque_kernel"]
    layer.zero_grad()
    out, _ = layer(x)
    (out * out).sum().backward()
    torch.testing.assert_close(got, layer.opaque_kernel.grad)


@pytest.mark.parametrize("grad", [False, True])
def test_vmap_equals_a_loop(grad: bool) -> None:
    layer = _layer("gru")
    xs = torch.randn(3, 4, 2, 5)
    with torch.set_grad_enabled(grad):
        got = torch.vmap(lambda x: layer(x)[0])(xs)
        for i in range(3):
            torch.testing.assert_close(got[i], layer(xs[i])[0])


def test_per_sample_gradients_with_vmap_of_grad() -> None:
    layer = _layer("lstm")
    params = {k: v.detach() for k, v in layer.named_parameters()}
    xs = torch.randn(3, 4, 1, 5)  # three samples of [T=4, B=1, I=5]

    def loss(p: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        out, _ = torch.func.functional_call(layer, p, (x,))
        return (out * out).sum()

    got = torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0))(params, xs)["opaque_kernel"]
    for i in range(3):
        want = torch.func.grad(loss)(params, xs[i])["opaque_kernel"]
        torch.testing.assert_close(got[i], want)


@pytest.mark.parametrize("need_grad", [False, True])
@pytest.mark.parametrize(
    "spec",
    [
        RNNSpec("lstm", 2, 3, 2, direction="bidirectional"),
        RNNSpec("lstm", 1, 3, 2, num_proj=2),
        RNNSpec("gru", 2, 3, 3, input_mode="skip_input", dropout=0.5),
        RNNSpec("rnn_relu", 1, 2, 2),
    ],
    ids=["lstm-bi", "lstm-proj", "gru-skip-dropout", "relu"],
)
def test_opcheck(spec: RNNSpec, need_grad: bool) -> None:
    op = cudnn_rnn.ops.CudnnLSTM if spec.mode == "lstm" else None
    size = layout_of(spec).size
    params = torch.randn(size, dtype=torch.float64) * 0.3
    x = torch.randn(4, 3, spec.input_size, dtype=torch.float64)
    h0 = torch.randn(spec.num_states, 3, spec.output_units, dtype=torch.float64)
    c0 = torch.randn(spec.num_states, 3, spec.num_units, dtype=torch.float64)
    lengths = torch.tensor([4, 1, 3])
    args = (
        params.requires_grad_(need_grad),
        x,
        h0,
        c0 if op is not None else None,
        lengths if spec.mode == "gru" else None,
        torch.zeros((), dtype=torch.int64),
        *operator.static_of(spec),
        spec.dropout,
        7,
        need_grad,
        False,
    )
    torch.library.opcheck(torch.ops.cudnn_rnn.rnn.default, args)
    out = torch.ops.cudnn_rnn.rnn(*[a.detach() if isinstance(a, torch.Tensor) else a for a in args])
    back = (
        params.detach(), x, h0, args[3], args[4], out[3], out[0], out[1], out[2], out[4], out[5],
        torch.ones_like(out[0]), torch.ones_like(out[1]), torch.ones_like(out[2]),
        *operator.static_of(spec),
        spec.dropout,
        False,
    )  # fmt: skip
    if need_grad:
        torch.library.opcheck(torch.ops.cudnn_rnn.rnn_backward.default, back)


def test_opcheck_onednn_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """The oneDNN engine trains LSTMs where the native engine is not loaded."""
    monkeypatch.setattr(native, "supports", lambda *a: False)
    spec = RNNSpec("lstm", 2, 3, 2, direction="bidirectional")
    assert engines.select(spec, torch.device("cpu"), torch.float32, True, False) == "onednn"
    params = (torch.randn(layout_of(spec).size) * 0.3).requires_grad_()
    states = [torch.randn(4, 3, 3) for _ in range(2)]
    args = (params, torch.randn(5, 3, 2), *states, None, None, *operator.static_of(spec))
    # Not test_aot_dispatch_*: they compare every output bit for bit, and the reserve holds
    # oneDNN's workspace, whose padding oneDNN leaves uninitialised. What the reserve feeds
    # (the gradients) is compared compiled against eager in the compile tests.
    checks = ("test_schema", "test_autograd_registration", "test_faketensor")
    runs = watch_engines(monkeypatch)
    torch.library.opcheck(
        torch.ops.cudnn_rnn.rnn.default, (*args, 0.0, 0, True, False), test_utils=checks
    )
    assert set(ran(runs)) == {"onednn"}, runs


@pytest.mark.parametrize("mode", MODES)
def test_autocast_runs_where_torch_nn_runs(mode: str) -> None:
    layer = _layer(mode)
    peer = convert.to_torch(layer)
    x = torch.randn(4, 2, 5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        lin = nn.Linear(5, 5)
        z = lin(x)  # bfloat16 under autocast, as a real model feeds the RNN
        want = peer(z)[0]
        got = layer(z)[0]
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want.float(), rtol=2e-2, atol=2e-2)
    got.sum().backward()
    assert layer.opaque_kernel.grad is not None


@pytest.mark.parametrize("enforce_sorted", [True, False])
@pytest.mark.parametrize("mode", MODES)
def test_packed_sequence_in_and_out_equal_torch_nn(mode: str, enforce_sorted: bool) -> None:
    # Seeded: it drew from the global generator, so its inputs depended on the tests before it,
    # and 3 seeds in 200 put an output where float32 rounding exceeded an atol of 1e-6.
    torch.manual_seed(0)
    layer = _layer(mode)
    peer = convert.to_torch(layer)
    lengths = [6, 4, 4, 1] if enforce_sorted else [2, 6, 1, 4]
    x = torch.randn(6, 4, 5)
    packed = pack_padded_sequence(x, lengths, enforce_sorted=enforce_sorted)
    state = tuple(torch.randn(4, 4, 4) for _ in range(2 if mode == "lstm" else 1))
    got, got_states = layer(packed, state)
    want, want_states = peer(packed, state if mode == "lstm" else state[0])
    want_states = want_states if isinstance(want_states, tuple) else (want_states,)
    assert isinstance(got, torch.nn.utils.rnn.PackedSequence)
    assert torch.equal(got.batch_sizes, want.batch_sizes)
    for a, b in (
        (got.sorted_indices, want.sorted_indices),
        (got.unsorted_indices, want.unsorted_indices),
    ):
        assert (a is None and b is None) or torch.equal(a, b)
    torch.testing.assert_close(got.data, want.data, rtol=1e-5, atol=1e-5)
    for g, w in zip(got_states, want_states):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    # The same as sequence_lengths on the padded tensor.
    out, _ = layer(x, state, sequence_lengths=lengths)
    torch.testing.assert_close(pad_packed_sequence(got, total_length=6)[0], out)
    got.data.sum().backward()  # gradients flow through the packed path
    assert layer.opaque_kernel.grad is not None


def test_packed_sequence_with_lengths_is_refused() -> None:
    packed = pack_padded_sequence(torch.randn(3, 2, 5), [3, 2])
    with pytest.raises(ValueError, match="PackedSequence carries its own lengths"):
        _layer("gru")(packed, sequence_lengths=[3, 2])


def test_thirty_no_grad_calls_are_bitwise_equal() -> None:
    layer = _layer("lstm").eval()
    x = torch.randn(7, 3, 5)
    with torch.no_grad():
        first = layer(x)[0]
        assert all(torch.equal(layer(x)[0], first) for _ in range(29))


def test_four_threads_equal_single_threaded() -> None:
    layers = {m: _layer(m).eval() for m in MODES}
    inputs = [torch.randn(5, 3, 5) for _ in range(4)]
    with torch.no_grad():
        want = {(m, i): layers[m](x)[0] for m in MODES for i, x in enumerate(inputs)}
    failures: list[str] = []

    def work(i: int) -> None:
        try:
            with torch.no_grad():
                for _ in range(25):
                    for m in MODES:
                        if not torch.equal(layers[m](inputs[i])[0], want[(m, i)]):
                            failures.append(f"{m} thread {i}")
        except Exception as e:  # pragma: no cover - reported below
            failures.append(repr(e))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_write_through_a_numpy_view_is_seen_by_the_next_call() -> None:
    layer = _layer("gru").eval()
    x = torch.randn(4, 2, 5)
    with torch.no_grad():
        for _ in range(3):
            before = layer(x)[0]
    layer.opaque_kernel.detach().numpy()[1] += 5
    with torch.no_grad():
        after = layer(x)[0]
    fresh = _layer("gru").eval()
    fresh.load_state_dict(layer.state_dict())
    with torch.no_grad():
        assert torch.equal(after, fresh(x)[0])
    assert not torch.equal(after, before)


@pytest.mark.parametrize("mode", MODES)
def test_empty_batch_returns_empty_outputs_like_torch_nn(mode: str) -> None:
    layer = _layer(mode)
    peer = convert.to_torch(layer)
    x = torch.randn(4, 0, 5, requires_grad=True)
    out, states = layer(x)
    want, _ = peer(x)
    assert out.shape == want.shape == (4, 0, 8)
    assert all(s.shape == (4, 0, 4) for s in states)
    out.sum().backward()
    assert layer.opaque_kernel.grad is not None and not layer.opaque_kernel.grad.any()
    with torch.no_grad():
        assert layer(torch.randn(0, 4, 5), time_major=False)[0].shape == (0, 4, 8)


def test_zero_steps_fails_as_in_torch_nn_with_our_message() -> None:
    layer = _layer("lstm")
    with pytest.raises(RuntimeError):
        convert.to_torch(layer)(torch.randn(0, 2, 5))
    with pytest.raises(ValueError, match=r"CudnnLSTM: input_data must have at least one step"):
        layer(torch.randn(0, 2, 5))


@needs_native
@pytest.mark.parametrize("mode", MODES)
def test_engines_agree_with_the_oracle_in_training(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gradient-keeping engine of float32 CPU calls (native) matches the oracle."""
    runs = watch_engines(monkeypatch)
    spec = RNNSpec(mode, 2, 3, 2, direction="bidirectional")
    case = make_case(spec, 5, 3, seed=2)
    assert_matches_oracle(case, torch.float32, atol=1e-5, requires_grad=True)
    assert set(ran(runs)) == {"native"} and ("native", "backward") in runs, runs


def _training_with_dropout(monkeypatch: pytest.MonkeyPatch, engine: str) -> list[torch.Tensor]:
    """Outputs and every gradient of one training call of a dropout LSTM, run on ``engine``
    (asserted: the spy sees that engine's forward and backward, and no other)."""
    op = cudnn_rnn.ops.CudnnLSTM(
        3, 4, 4, input_mode="skip_input", direction="bidirectional", dropout=0.5, seed=5
    )
    gen = torch.Generator().manual_seed(3)
    params = (torch.randn(op.params_size(), generator=gen) * 0.3).requires_grad_()
    args = [torch.randn(6, 3, 4, generator=gen, requires_grad=True) for _ in range(3)]
    with monkeypatch.context() as patch:
        force_engine(patch, engine)
        runs = watch_engines(patch)
        op._dropout_step.zero_()  # the same masks for every engine
        out = op(*args, params)
        weights = [torch.linspace(-1, 1, o.numel()).view(o.shape) for o in out]
        loss = sum((o * w).sum() for o, w in zip(out, weights))
        grads = torch.autograd.grad(loss, [params, *args])
    assert runs == [(engine, "forward"), (engine, "backward")], runs
    return [t.detach() for t in (*out, *grads)]


def _assert_agree(results: dict[str, list[torch.Tensor]]) -> None:
    for other in ("onednn", "native"):
        for a, b in zip(results[other], results["loop"]):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5, err_msg=other)


@needs_native
def test_training_engines_agree_with_dropout(monkeypatch: pytest.MonkeyPatch) -> None:
    """oneDNN, the native engine and the loop: the same outputs and gradients (float32)."""
    results = {e: _training_with_dropout(monkeypatch, e) for e in ("onednn", "native", "loop")}
    _assert_agree(results)


@needs_native
@pytest.mark.parametrize("broken", ["onednn", "native", "loop"])
def test_the_engine_agreement_fails_when_one_engine_is_broken(
    broken: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The test above earns its trust: 1e-3 added to one engine's output fails it."""
    (engine,) = [e for e in engines.RULES if e.name == broken]
    real = engine.forward

    def off(call: Any, inputs: Any) -> Any:
        out = real(call, inputs)
        out.y.add_(1e-3)
        return out

    results = {}
    for name in ("onednn", "native", "loop"):
        with monkeypatch.context() as patch:
            if name == broken:
                patch.setattr(engine, "forward", off)
            results[name] = _training_with_dropout(monkeypatch, name)
    with pytest.raises(AssertionError, match="Not equal to tolerance"):
        _assert_agree(results)


def test_a_plain_eager_call_skips_only_the_dispatcher() -> None:
    """Without gradient, plain eager calls run the operator's implementation directly (the
    same engine, the same bits); every observer still sees the one cudnn_rnn::rnn node."""
    from torch.utils._python_dispatch import TorchDispatchMode

    layer = _layer("gru")
    x = torch.randn(4, 2, 5)
    seen: list[str] = []

    class Spy(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    with torch.no_grad():
        direct = layer(x)[0]
        with Spy():
            spied = layer(x)[0]
        with torch.profiler.profile() as prof:
            profiled = layer(x)[0]
    assert torch.equal(direct, spied) and torch.equal(direct, profiled)
    assert any("cudnn_rnn.rnn" in name for name in seen), seen
    assert any(e.name == "cudnn_rnn::rnn" for e in prof.events())
    static = operator.static_of(layer._op.spec)
    h = torch.zeros(4, 2, 4)
    via_op = torch.ops.cudnn_rnn.rnn(
        layer.opaque_kernel.detach(), x, h, None, None, None, *static, 0.0, 0, False, False
    )[0]
    assert torch.equal(direct, via_op)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_plain_eager_training_call_skips_only_the_dispatcher(
    dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With gradient too: plain eager forwards and backwards run the operators'
    implementations directly, with the bits of the dispatched call (seen under the profiler,
    which makes them dispatch), every gradient included."""
    dispatched: list[str] = []
    for name in ("_rnn_op", "_rnn_backward_op"):  # as the Function's forward and backward call them
        real = getattr(autograd, name)

        def spy(*args: Any, _real: Any = real, _name: str = name) -> Any:
            dispatched.append(_name)
            return _real(*args)

        monkeypatch.setattr(autograd, name, spy)
    torch.manual_seed(0)
    layer = _layer("lstm", layers=2, dropout=0.3).to(dtype)
    x = torch.randn(6, 3, 5, dtype=dtype, requires_grad=True)
    lengths = torch.tensor([6, 2, 4])

    def step() -> tuple[torch.Tensor, ...]:
        layer.zero_grad(set_to_none=True)
        x.grad = None
        layer._dropout_step.zero_()  # the same dropout masks in both runs
        out, (h, c) = layer(x, sequence_lengths=lengths)
        (out.square().sum() + h.sum() + c.sum()).backward()
        assert layer.opaque_kernel.grad is not None and x.grad is not None
        return out.detach(), h.detach(), layer.opaque_kernel.grad.clone(), x.grad.clone()

    direct = step()
    assert dispatched == []
    with torch.profiler.profile():
        via_ops = step()
    assert dispatched == ["_rnn_op", "_rnn_backward_op"]
    for a, b in zip(direct, via_ops):
        assert torch.equal(a, b)


# -- the planned call (a layer's call without state, lengths, dropout or gradient) ------------


def _checked(layer: Any, x: torch.Tensor, time_major: bool = True) -> tuple[torch.Tensor, ...]:
    """The same call through the checked path: zero initial states passed explicitly."""
    spec = layer._op.spec
    batch = int(x.shape[1] if time_major else x.shape[0])
    dtype = layer.opaque_kernel.dtype
    zeros = tuple(torch.zeros(s, dtype=dtype) for s in layer.state_shape(batch))
    out, states = layer(x, zeros, time_major=time_major)
    assert len(states) == (2 if spec.mode == "lstm" else 1)
    return (out, *states)


def _planned(layer: Any, x: torch.Tensor, time_major: bool = True) -> tuple[torch.Tensor, ...]:
    out, states = layer(x, time_major=time_major)
    return (out, *states)


@pytest.mark.parametrize("mode", list(LAYER_CLASSES))
@pytest.mark.parametrize(
    ("layers", "bidi", "skip", "time_major", "dtype"),
    [
        (1, False, False, True, torch.float32),
        (1, False, False, False, torch.float32),
        (1, False, True, True, torch.float32),
        (2, True, False, False, torch.float32),
        (3, True, True, True, torch.float32),
        (2, False, False, True, torch.float64),
    ],
)
def test_a_planned_call_gives_the_bits_of_the_checked_path(
    mode: str, layers: int, bidi: bool, skip: bool, time_major: bool, dtype: torch.dtype,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Issue 21, item 1: a layer's call without state or lengths skips the layer's, the op's
    and the operator's checks through a plan kept between calls (the same engine by the same
    rule): the same bits as the checked path, call after call; the checked path runs once."""
    size = 4 if skip else 5
    kw = {"input_mode": "skip_input"} if skip else {}
    layer = _layer(mode, bidi=bidi, layers=layers, size=size, dtype=dtype, dropout=0.5, **kw)
    layer.eval()  # dropout is not in force
    checked_calls: list[int] = []
    real = type(layer._op)._forward

    def spy(*a: Any, **k: Any) -> Any:
        checked_calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(type(layer._op), "_forward", spy)
    g = torch.Generator().manual_seed(3)
    shape = (6, 3, size) if time_major else (3, 6, size)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(shape, generator=g, dtype=dtype)
            got = _planned(layer, x, time_major)
            assert checked_calls == []
            want = _checked(layer, x, time_major)
            assert len(checked_calls) == 1
            checked_calls.clear()
            for a, b in zip(got, want):
                assert a.shape == b.shape and torch.equal(a, b)
    assert layer._op._plan is not None


def test_a_planned_call_sees_every_write_to_the_weights() -> None:
    """Nothing derived from the weights is kept between calls, so in-place torch ops, writes
    through ``.data`` and through a NumPy view, and a new parameter all change the next call
    exactly as the checked path sees them."""
    layer = _layer("lstm", bidi=False, layers=1)
    x = torch.randn(5, 2, 5)
    with torch.no_grad():
        first = _planned(layer, x)[0]

        def check() -> torch.Tensor:
            got = _planned(layer, x)
            for a, b in zip(got, _checked(layer, x)):
                assert torch.equal(a, b)
            assert not torch.equal(got[0], first)
            return got[0]

        layer.opaque_kernel.mul_(1.5)  # an in-place torch op
        check()
        layer.opaque_kernel.data[:7] = 0.25  # through .data
        check()
        layer.opaque_kernel.detach().numpy()[10:20] = -0.5  # through a NumPy view
        check()
        layer.opaque_kernel = nn.Parameter(layer.opaque_kernel.detach().clone() * 0.5)
        check()


def test_a_planned_call_gives_fresh_outputs_and_falls_back_where_it_must(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The outputs are the caller's own (writing the states does not reach the next call);
    a new shape makes a new plan; gradients, dropout in force and autocast take the checked
    path; and the engine is the rule table's on every call."""
    layer = _layer("gru", bidi=True, layers=2, dropout=0.5)
    x = torch.randn(4, 3, 5)
    with torch.no_grad():
        layer.eval()
        y, (h,) = layer(x)
        h.fill_(7.0)
        y.fill_(7.0)
        again = _planned(layer, x)
        assert torch.equal(again[1], _checked(layer, x)[1]) and not torch.equal(again[1], h)
        plan = layer._op._plan
        _planned(layer, torch.randn(2, 3, 5))
        assert layer._op._plan is not plan and layer._op._plan.shape == (2, 3, 5)
        layer.train()  # dropout in force: masks drawn, the counter advanced
        step = int(layer._dropout_step)
        layer(x)
        assert int(layer._dropout_step) == step + 1
        layer.eval()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert layer(x)[0].dtype == torch.float32  # the checked path's cast, not bfloat16
    out = layer(x)[0]  # gradients wanted: the autograd path
    assert out.requires_grad and out.grad_fn is not None
    ran: list[str] = []
    real = engines.engine_for

    def spy(call: Any) -> Any:
        engine = real(call)
        ran.append(engine.name)
        return engine

    monkeypatch.setattr(engines, "engine_for", spy)
    with torch.no_grad():
        native_out = _planned(layer, x)
        monkeypatch.setattr(native, "available", lambda: False)
        other_out = _planned(layer, x)
    if cudnn_rnn.cpu_engine().startswith("native"):  # the rule's next engine once it is off
        assert ran[0] == "native" and ran[1] != "native", ran
    for a, b in zip(native_out, other_out):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", list(LAYER_CLASSES))
def test_a_planned_call_of_one_layer_runs_the_native_record_with_the_checked_bits(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 48: one unidirectional layer's planned call fills the native engine's argument
    record once (the plan's ``loop``) and runs it where the rule table picks that engine: the
    checked path's bits on 1 to 3 threads, at every instruction set, with its own outputs; a new
    buffer gets a record of its own; the rule is asked at every call (the native engine off: the
    next engine's outputs, not the record's)."""
    if not cudnn_rnn.cpu_engine().startswith("native"):
        pytest.skip("the native engine is not the rule's CPU engine here")
    layer = LAYER_CLASSES[mode](1, 64, direction="unidirectional", seed=1, input_size=20)
    g = torch.Generator().manual_seed(5)
    threads = torch.get_num_threads()
    try:
        with torch.no_grad():
            for level in native.level_names():
                for t in (1, 2, 3):
                    torch.set_num_threads(t)
                    with native.use_level(level):
                        x = torch.randn(7, 4, 20, generator=g)
                        got = _planned(layer, x)
                        assert layer._op._plan.loop is not None
                        for a, b in zip(got, _checked(layer, x)):
                            assert a.shape == b.shape and torch.equal(a, b), (level, t)
            again = _planned(layer, x)
            assert all(a.data_ptr() != b.data_ptr() for a, b in zip(got, again))
            record = layer._op._plan.loop
            layer.opaque_kernel = nn.Parameter(layer.opaque_kernel.detach().clone() * 0.5)
            halved = _planned(layer, x)
            assert layer._op._plan.loop is not record
            assert layer._op._plan.loop.base == layer.opaque_kernel.data_ptr()
            for a, b in zip(halved, _checked(layer, x)):
                assert torch.equal(a, b)
            monkeypatch.setattr(native, "available", lambda: False)
            other = _planned(layer, x)
        for a, b in zip(halved, other):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        ran: list[str] = []
        real = engines.engine_for
        monkeypatch.setattr(
            engines, "engine_for", lambda call: ran.append(real(call).name) or real(call)
        )
        with torch.no_grad():
            _planned(layer, x)
        assert ran and ran[0] != "native"
    finally:
        torch.set_num_threads(threads)


@pytest.mark.filterwarnings(r"ignore:`torch\.jit\.trace` is deprecated:DeprecationWarning")
def test_one_rule_picks_the_route_from_who_watches_the_call() -> None:
    """operator.route: plain eager calls skip the dispatcher, anything watching sees the
    operator (a JIT trace, a compile/export, a transform) or standard ONNX nodes."""
    Route = operator.Route
    x = torch.randn(3, 2, 5)
    w = torch.randn(7, requires_grad=True)
    assert operator.route(False, False, w, x) is Route.DIRECT
    assert operator.route(True, False, w, x) is Route.DIRECT_GRAD
    assert operator.route(False, True, w, x) is Route.OP  # torch.compile / torch.export
    assert operator.route(True, True, w, x) is Route.FUNCTION
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False):  # a dispatch mode sees the operator
        assert operator.route(False, False, w, x) is Route.OP
    seen: list[Any] = []

    def traced(t: torch.Tensor) -> torch.Tensor:
        seen.append(operator.route(False, False, w, t))
        return t * 2

    torch.jit.trace(traced, (x,), check_trace=False)
    assert seen == [Route.TRACE]
    seen.clear()
    torch.func.vmap(lambda t: (seen.append(operator.route(True, False, w, t)), t)[1])(x)
    assert seen == [Route.FUNCTION]


def test_lengths_are_checked_once_per_training_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """The layer checks the lengths; neither the operator's forward nor its backward checks
    them again. A call through the dispatcher (a graph, torch.ops) checks them itself."""
    from cudnn_rnn import ops

    counts = {"caller": 0, "operator": 0}

    def counting(name: str, real: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return real(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(ops, "check_lengths", counting("caller", ops.check_lengths))
    monkeypatch.setattr(
        implementation, "_check_lengths", counting("operator", implementation._check_lengths)
    )
    layer = _layer("gru")
    x = torch.randn(6, 3, 5)
    out, _ = layer(x, sequence_lengths=[6, 2, 4])
    out.sum().backward()
    assert counts == {"caller": 1, "operator": 0}
    with torch.no_grad():
        layer(x, sequence_lengths=[6, 2, 4])
    assert counts == {"caller": 2, "operator": 0}
    spec = layer._op._spec
    bad = torch.tensor([7, 2, 4])
    with pytest.raises(ValueError, match=r"sequence_lengths must be in \[1, 6\]"):
        torch.ops.cudnn_rnn.rnn(
            layer.opaque_kernel.detach(), x, torch.zeros(2 * 2, 3, 4), None, bad, None,
            *operator.static_of(spec), 0.0, 0, False, False,
        )  # fmt: skip
    assert counts["operator"] == 1
