"""The variants in the native engine (issue 47, item 2): the rule table sends CPU float32 calls
of every variant there (:mod:`cudnn_rnn.engines.native_variant`), forward and backward; their
outputs equal the NumPy oracle's (float64) and their gradients autograd's of the variant engine
in float64, to float32's rounding (the merges and separate stacks included, and with dropout
between the layers the two engines agree on the operator's masks); one call gives the same bits
on every thread count and at every instruction set the machine can run (forced); a projection
(the native engine has none) stays on the variant engine.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from cudnn_rnn import CudnnGRU, CudnnLSTM, CudnnRNNRelu, CudnnRNNTanh, engines
from cudnn_rnn.core.layout import layout_of
from cudnn_rnn.core.reference import rnn_forward
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.core.variant import ACTIVATIONS, Activation, Variant
from cudnn_rnn.engines import native
from tests.support.engines import force_engine, ran, watch_engines
from tests.support.isa import isa_params

pytestmark = pytest.mark.skipif(not native.available(), reason="the native engine is not built")

LAYERS = {"lstm": CudnnLSTM, "gru": CudnnGRU, "rnn_tanh": CudnnRNNTanh, "rnn_relu": CudnnRNNRelu}
HS = Activation("hard_sigmoid")

#: (mode, layers, variant, constructor arguments): what the native loops compute.
GRID: list[tuple[str, int, Variant, dict[str, Any]]] = [
    ("gru", 2, Variant(reset_after=False), {}),
    ("gru", 1, Variant(reset_after=False, gate_activation=HS), {}),
    ("gru", 2, Variant(reset_after=False, gate_clip=0.7), {"direction": "bidirectional"}),
    ("gru", 2, Variant(gate_clip=0.8, cell_activation=Activation("relu")), {}),
    ("gru", 1, Variant(reset_after=False, time="reverse"), {}),
    ("gru", 1, Variant(reset_after=False, time="go_backwards"), {"input_mode": "skip_input"}),
    ("lstm", 2, Variant(peepholes=True), {}),
    ("lstm", 1, Variant(peepholes=True, input_forget=True, gate_clip=1.5), {}),
    ("lstm", 2, Variant(peepholes=True, cell_clip=0.3), {"direction": "bidirectional"}),
    ("lstm", 1, Variant(gate_activation=HS), {}),
    (
        "lstm",
        1,
        Variant(
            gate_activation=Activation("hard_sigmoid", 1 / 6, 0.5),
            cell_activation=Activation("elu", 0.7),
            output_activation=Activation("softsign"),
        ),
        {},
    ),
    ("lstm", 1, Variant(time="go_backwards", cell_clip=0.5), {}),
    ("lstm", 2, Variant(time="reverse", input_forget=True), {}),
    ("rnn_tanh", 2, Variant(cell_activation=Activation("leaky_relu", 0.2)), {}),
    ("rnn_tanh", 1, Variant(cell_activation=Activation("sigmoid"), gate_clip=0.5), {}),
    ("rnn_relu", 1, Variant(time="go_backwards"), {}),
    ("rnn_tanh", 2, Variant(time="reverse"), {"input_mode": "skip_input"}),
    ("lstm", 2, Variant(merge="sum", peepholes=True), {"direction": "bidirectional"}),
    ("gru", 3, Variant(merge="mul", reset_after=False), {"direction": "bidirectional"}),
    ("rnn_relu", 2, Variant(merge="ave"), {"direction": "bidirectional"}),
    ("lstm", 3, Variant(stacks="separate"), {"direction": "bidirectional"}),
    ("gru", 2, Variant(stacks="separate", merge="sum"), {"direction": "bidirectional"}),
    (
        "rnn_tanh",
        2,
        Variant(stacks="separate", merge="mul"),
        {"direction": "bidirectional", "input_mode": "skip_input"},
    ),
]
IDS = [f"{m}-L{n}-{v.describe()}-{sorted(kw)}" for m, n, v, kw in GRID]
STEPS, BATCH, SIZE, UNITS = 6, 5, 7, 19  # UNITS: a tail of a vector at every ISA
LENGTHS = torch.tensor([6, 2, 4, 6, 1])


def _layer(mode: str, layers: int, variant: Variant, kwargs: dict[str, Any], scale: float) -> Any:
    size = UNITS if kwargs.get("input_mode") == "skip_input" else SIZE
    layer = LAYERS[mode](layers, UNITS, input_size=size, variant=variant, **kwargs)
    with torch.no_grad():
        gen = torch.Generator().manual_seed(7 + layers)
        layer.opaque_kernel.copy_(scale * torch.randn(layer.opaque_kernel.shape, generator=gen))
    return layer


def _inputs(layer: Any, seed: int) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    spec: RNNSpec = layer.spec
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(STEPS, BATCH, spec.input_size, generator=gen)
    states = [torch.randn(spec.num_states, BATCH, UNITS, generator=gen)]
    if spec.mode == "lstm":
        states.append(torch.randn(spec.num_states, BATCH, UNITS, generator=gen))
    return x, tuple(states)


def _train(layer: Any, x: torch.Tensor, states: tuple[torch.Tensor, ...], lengths: Any) -> list:
    """Outputs and the gradients of every input of one training call."""
    x = x.detach().requires_grad_()
    states = tuple(s.detach().requires_grad_() for s in states)
    y, out = layer(x, states, sequence_lengths=lengths)
    weights = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)
    loss = (y * weights).sum() + sum((o * o).sum() for o in out)
    grads = torch.autograd.grad(loss, [layer.opaque_kernel, x, *states])
    return [y.detach(), *(o.detach() for o in out), *grads]


def _close(got: torch.Tensor, want: Any, what: str, rel: float) -> None:
    want = torch.as_tensor(want, dtype=torch.float64)
    err = float((got.double() - want).abs().max())
    assert err <= rel * (1.0 + float(want.abs().max())), f"{what}: {err:.3g} off"


@pytest.mark.parametrize("with_lengths", [False, True], ids=["full", "lengths"])
@pytest.mark.parametrize(("mode", "layers", "variant", "kwargs"), GRID, ids=IDS)
def test_native_variant_matches_oracle_and_autograd(
    mode: str,
    layers: int,
    variant: Variant,
    kwargs: dict[str, Any],
    with_lengths: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    layer = _layer(mode, layers, variant, kwargs, 0.5)
    x, states = _inputs(layer, 3)
    lengths = LENGTHS if with_lengths else None
    runs = watch_engines(monkeypatch)
    got = _train(layer, x, states, lengths)
    assert ran(runs) == ["native", "native"]
    with torch.no_grad():  # inference runs there too, with the same numbers
        y, _ = layer(x, states, sequence_lengths=lengths)
    assert ran(runs)[-1] == "native"
    assert torch.equal(y, got[0])
    # the oracle (float64 NumPy)
    spec: RNNSpec = layer.spec
    weights, biases = layout_of(spec).unpack(layer.opaque_kernel.detach().double().numpy())
    c0 = states[1].double().numpy() if mode == "lstm" else None
    ry, rh, rc = rnn_forward(
        spec.mode, x.double().numpy(), states[0].double().numpy(), c0, weights, biases,
        num_layers=spec.num_layers, bidirectional=spec.bidirectional, skip_input=spec.skip_input,
        sequence_lengths=None if lengths is None else lengths.numpy(), variant=spec.variant,
    )  # fmt: skip
    _close(got[0], ry, "y", 2e-6)
    _close(got[1], rh, "h_n", 2e-6)
    if rc is not None:
        _close(got[2], rc, "c_n", 2e-6)
    # the gradients: the variant engine's autograd in float64 on the same numbers
    wide = LAYERS[mode](
        layers, UNITS, input_size=spec.input_size, variant=variant, dtype=torch.float64, **kwargs
    )
    with torch.no_grad():
        wide.opaque_kernel.copy_(layer.opaque_kernel.double())
    want = _train(wide, x.double(), tuple(s.double() for s in states), lengths)
    assert ran(runs)[-1] == "variant"
    outs = 3 if mode == "lstm" else 2
    names = ["dparams", "dx", "dh0", "dc0"]
    for name, g, w in zip(names, got[outs:], want[outs:], strict=False):
        _close(g, w, name, 2e-5)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_every_activation_natively_in_every_place(name: str) -> None:
    """Each activation as a plain RNN's, as the LSTM's gates', candidate's and output's, as a
    reset-before GRU's gates' and candidate's: forward and gradients against float64 autograd
    (small weights and clips: exp and the unbounded ones stay finite)."""
    act = Activation(name)
    bounded = {"gate_clip": 0.5}
    cases = [
        ("rnn_tanh", Variant(cell_activation=act, gate_clip=3.0)),
        ("lstm", Variant(cell_activation=act, output_activation=act, cell_clip=2.0)),
        ("lstm", Variant(gate_activation=act, cell_clip=2.0, **bounded)),
        ("gru", Variant(reset_after=False, gate_activation=act, cell_activation=act, **bounded)),
    ]
    for mode, variant in cases:
        spec = RNNSpec(mode, 1, UNITS, SIZE, variant=variant)  # relu: the mode rnn_relu
        layer = _layer(spec.mode, 1, spec.variant, {}, 0.2)
        x, states = _inputs(layer, 5)
        got = _train(layer, x, states, LENGTHS)
        wide = LAYERS[layer.spec.mode](1, UNITS, input_size=SIZE, variant=spec.variant,
                                       dtype=torch.float64)  # fmt: skip
        with torch.no_grad():
            wide.opaque_kernel.copy_(layer.opaque_kernel.double())
        want = _train(wide, x.double(), tuple(s.double() for s in states), LENGTHS)
        for k, (g, w) in enumerate(zip(got, want, strict=True)):
            _close(g, w, f"{mode} {name} output {k}", 2e-5)


#: Variants whose bits are checked across threads and instruction sets (each path of the loops).
BITS = [
    ("gru", 2, Variant(reset_after=False, gate_activation=HS), {"direction": "bidirectional"}),
    ("gru", 1, Variant(gate_clip=0.9, cell_activation=Activation("softsign")), {}),
    ("lstm", 2, Variant(peepholes=True, cell_clip=0.4, input_forget=True), {}),
    ("lstm", 1, Variant(gate_activation=HS, output_activation=Activation("softplus")), {}),
    ("rnn_tanh", 1, Variant(cell_activation=Activation("elu"), time="reverse"), {}),
    ("lstm", 2, Variant(merge="mul", stacks="separate"), {"direction": "bidirectional"}),
    ("gru", 2, Variant(merge="ave"), {"direction": "bidirectional"}),
]


def _bits_call(case: tuple[str, int, Variant, dict[str, Any]], units: int) -> list:
    global UNITS
    mode, layers, variant, kwargs = case
    saved, UNITS = UNITS, units
    try:
        layer = _layer(mode, layers, variant, kwargs, 1 / units**0.5)
        x, states = _inputs(layer, 9)
        return _train(layer, x, states, LENGTHS)
    finally:
        UNITS = saved


@pytest.mark.parametrize("level", isa_params())
def test_same_bits_on_every_thread_count(level: str) -> None:
    threads = torch.get_num_threads()
    try:
        with native.use_level(level):
            for case in BITS:
                torch.set_num_threads(1)
                want = _bits_call(case, 70)
                for n in (2, 3, 5):
                    torch.set_num_threads(n)
                    got = _bits_call(case, 70)
                    for k, (a, b) in enumerate(zip(want, got, strict=True)):
                        assert torch.equal(a, b), (case, level, n, k)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.skipif(
    not {"avx512", "avx2"} <= set(native.level_names()), reason="needs AVX-512 and AVX2"
)
def test_avx2_and_avx512_give_the_same_bits() -> None:
    for case in BITS:
        with native.use_level("avx2"):
            want = _bits_call(case, 70)
        with native.use_level("avx512"):
            got = _bits_call(case, 70)
        for k, (a, b) in enumerate(zip(want, got, strict=True)):
            assert torch.equal(a, b), (case, k)


def test_the_rule_table_sends_what_the_loops_compute_to_native() -> None:
    cpu, f32 = torch.device("cpu"), torch.float32
    for mode, layers, variant, kwargs in GRID:
        spec = _layer(mode, layers, variant, kwargs, 1.0).spec
        for grad in (False, True):
            assert engines.select(spec, cpu, f32, grad, True) == "native"
            assert engines.select(spec, cpu, torch.float64, grad, True) == "variant"
    projected = RNNSpec("lstm", 1, 8, 8, num_proj=4, variant=Variant(proj_clip=1.0))
    assert engines.select(projected, cpu, f32, True, False) == "variant"


def test_the_library_refuses_a_malformed_variant_record() -> None:
    """The C boundary checks the record: an activation code it does not know, a negative clip,
    a field of another mode."""
    from cudnn_rnn.engines import native_variant

    layer = _layer("gru", 1, Variant(reset_after=False), {}, 0.5)
    x, states = _inputs(layer, 1)
    record = native_variant.variant_args(layer.spec)
    assert record is not None
    for field, value in (("gate_act", 99), ("cell_clip", -1.0), ("input_forget", 1)):
        bad = type(record).from_buffer_copy(record)
        setattr(bad, field, value)
        with pytest.raises(RuntimeError, match=r"cudnn_rnn native engine: cr_forward"):
            _forward_with(layer, x, states, bad)
    np.testing.assert_equal(layer(x, states)[0].shape, (STEPS, BATCH, UNITS))


def _forward_with(layer: Any, x: torch.Tensor, states: Any, record: Any) -> None:
    """The engine's forward with ``record`` in place of the spec's own."""
    from unittest import mock

    from cudnn_rnn.engines import native as module

    with mock.patch.object(module, "variant_args", lambda spec: record):
        with torch.no_grad():
            layer(x, states)


@pytest.mark.parametrize("with_lengths", [False, True], ids=["full", "lengths"])
@pytest.mark.parametrize("variant", [Variant(merge="mul"), Variant(stacks="separate", merge="ave")])
def test_dropout_between_merged_layers_agrees_with_the_variant_engine(
    variant: Variant, with_lengths: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two layers of one seed draw the same dropout masks (the operator's), so the native
    engine and the variant engine (forced) agree with dropout too."""
    kwargs: dict[str, Any] = {"direction": "bidirectional", "dropout": 0.4, "seed": 3}
    ours, theirs = (_layer("lstm", 3, variant, kwargs, 0.5) for _ in range(2))
    x, states = _inputs(ours, 4)
    lengths = LENGTHS if with_lengths else None
    runs = watch_engines(monkeypatch)
    got = _train(ours, x, states, lengths)
    assert ran(runs) == ["native", "native"]
    force_engine(monkeypatch, "variant")
    want = _train(theirs, x, states, lengths)
    assert ran(runs)[-2:] == ["variant", "variant"]
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        _close(g, w, f"output {k}", 2e-5)
