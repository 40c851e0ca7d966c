"""The ``variant`` engine (issue 47, item 2): every variant of :mod:`cudnn_rnn.core.variant` runs
in our layers, forward and backward, equal to the NumPy oracle in float64; its gradients pass
``gradcheck`` (and the double backward ``gradgradcheck``); the rule table sends every variant
there, and nothing of the four modes changes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from cudnn_rnn import CudnnGRU, CudnnLSTM, CudnnRNNRelu, CudnnRNNTanh, engines
from cudnn_rnn.core.layout import layout_of
from cudnn_rnn.core.reference import rnn_forward
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.core.variant import ACTIVATIONS, Activation, Variant
from tests.support.engines import ran, watch_engines

LAYERS = {"lstm": CudnnLSTM, "gru": CudnnGRU, "rnn_tanh": CudnnRNNTanh, "rnn_relu": CudnnRNNRelu}

#: (mode, layers, variant, constructor arguments): every field, alone and combined.
GRID: list[tuple[str, int, Variant, dict[str, Any]]] = [
    ("gru", 2, Variant(reset_after=False), {}),
    ("gru", 1, Variant(reset_after=False, gate_activation=Activation("hard_sigmoid")), {}),
    ("gru", 2, Variant(gate_clip=0.8, cell_activation=Activation("relu")), {}),
    ("gru", 1, Variant(reset_after=False, time="reverse"), {}),
    ("gru", 2, Variant(reset_after=False, merge="sum"), {"direction": "bidirectional"}),
    ("lstm", 2, Variant(peepholes=True), {}),
    ("lstm", 1, Variant(peepholes=True, input_forget=True, gate_clip=1.5), {}),
    ("lstm", 2, Variant(cell_clip=0.6, proj_clip=0.4), {"num_proj": 3}),
    ("lstm", 1, Variant(peepholes=True, cell_clip=0.5), {"num_proj": 2}),
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
    ("lstm", 1, Variant(time="go_backwards"), {}),
    ("lstm", 2, Variant(merge="mul"), {"direction": "bidirectional"}),
    ("lstm", 2, Variant(merge="ave", stacks="separate"), {"direction": "bidirectional"}),
    ("lstm", 3, Variant(stacks="separate", peepholes=True), {"direction": "bidirectional"}),
    ("rnn_tanh", 2, Variant(cell_activation=Activation("leaky_relu", 0.2)), {}),
    ("rnn_tanh", 1, Variant(cell_activation=Activation("sigmoid"), gate_clip=0.5), {}),
    ("rnn_relu", 1, Variant(time="go_backwards"), {}),
    ("rnn_tanh", 2, Variant(time="reverse"), {"input_mode": "skip_input"}),
]
IDS = [f"{m}-{v.describe()}-{sorted(kw)}" for m, _, v, kw in GRID]
SIZE, UNITS, STEPS, BATCH = 4, 4, 5, 3


def _layer(mode: str, layers: int, variant: Variant, kwargs: dict[str, Any]) -> Any:
    layer = LAYERS[mode](
        layers, UNITS, input_size=SIZE, dtype=torch.float64, variant=variant, **kwargs
    )
    with torch.no_grad():
        gen = torch.Generator().manual_seed(len(IDS[0]) + layers)
        layer.opaque_kernel.copy_(
            0.6 * torch.randn(layer.opaque_kernel.shape, generator=gen, dtype=torch.float64)
        )
    return layer


def _oracle(layer: Any, x: torch.Tensor, h0: torch.Tensor, c0: Any, lengths: Any) -> Any:
    spec: RNNSpec = layer.spec
    weights, biases = layout_of(spec).unpack(layer.opaque_kernel.detach().numpy())
    return rnn_forward(
        spec.mode, x.detach().numpy(), h0.detach().numpy(),
        None if c0 is None else c0.detach().numpy(), weights, biases,
        num_layers=spec.num_layers, bidirectional=spec.bidirectional,
        skip_input=spec.skip_input, num_proj=spec.num_proj,
        sequence_lengths=None if lengths is None else lengths.numpy(), variant=spec.variant,
    )  # fmt: skip


def _states(layer: Any, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor | None]:
    spec: RNNSpec = layer.spec
    h0 = torch.randn(spec.num_states, BATCH, spec.output_units, generator=gen, dtype=torch.float64)
    c0 = (
        torch.randn(spec.num_states, BATCH, spec.num_units, generator=gen, dtype=torch.float64)
        if spec.mode == "lstm"
        else None
    )
    return h0, c0


@pytest.mark.parametrize("with_lengths", [False, True])
@pytest.mark.parametrize(("mode", "layers", "variant", "kwargs"), GRID, ids=IDS)
def test_layer_matches_the_oracle(
    mode: str,
    layers: int,
    variant: Variant,
    kwargs: dict[str, Any],
    with_lengths: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    layer = _layer(mode, layers, variant, kwargs)
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(STEPS, BATCH, SIZE, generator=gen, dtype=torch.float64)
    h0, c0 = _states(layer, gen)
    lengths = torch.tensor([5, 2, 4]) if with_lengths else None
    runs = watch_engines(monkeypatch)
    state = (h0, c0) if c0 is not None else (h0,)
    y, out_state = layer(x, state, sequence_lengths=lengths)
    assert ran(runs) == ["variant"]
    ry, rh, rc = _oracle(layer, x, h0, c0, lengths)
    assert y.shape == ry.shape
    np.testing.assert_allclose(y.detach().numpy(), ry, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(out_state[0].detach().numpy(), rh, rtol=1e-12, atol=1e-13)
    if rc is not None:
        np.testing.assert_allclose(out_state[1].detach().numpy(), rc, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize(("mode", "layers", "variant", "kwargs"), GRID, ids=IDS)
def test_gradcheck(
    mode: str,
    layers: int,
    variant: Variant,
    kwargs: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every gradient (weights, input, initial states) by central differences, with lengths
    (3 and 2: a padded step). Each weight costs two forward calls, so short sequences and at
    most two layers: the second has a layer below it and the first one above it, what a third
    adds (test_layer_matches_the_oracle runs the three-layer row)."""
    layer = _layer(mode, min(layers, 2), variant, kwargs)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(3, 2, SIZE, generator=gen, dtype=torch.float64, requires_grad=True)
    spec: RNNSpec = layer.spec
    h0 = torch.randn(spec.num_states, 2, spec.output_units, generator=gen, dtype=torch.float64)
    h0.requires_grad_()
    c0 = None
    if mode == "lstm":
        c0 = torch.randn(spec.num_states, 2, spec.num_units, generator=gen, dtype=torch.float64)
        c0.requires_grad_()
    lengths = torch.tensor([3, 2])
    params = layer.opaque_kernel

    def run(p: torch.Tensor, x: torch.Tensor, *state: torch.Tensor) -> Any:
        with torch.no_grad():
            params.copy_(p)
        y, out = torch.func.functional_call(
            layer, {"opaque_kernel": p}, (x, tuple(state)), {"sequence_lengths": lengths}
        )
        return (y, *out)

    runs = watch_engines(monkeypatch)
    inputs = (params.detach().clone().requires_grad_(), x, h0) + ((c0,) if c0 is not None else ())
    assert torch.autograd.gradcheck(run, inputs, eps=1e-6, atol=1e-6, rtol=1e-5)
    assert "variant" in ran(runs, "backward")


def test_double_backward_of_a_variant() -> None:
    layer = _layer("gru", 1, Variant(reset_after=False, gate_clip=3.0), {})
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(3, 2, SIZE, generator=gen, dtype=torch.float64, requires_grad=True)

    def run(x: torch.Tensor) -> torch.Tensor:
        return layer(x)[0]

    assert torch.autograd.gradgradcheck(run, (x,), eps=1e-6, atol=1e-5)


def test_float32_and_dropout_run_on_the_variant_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """(With a projection: the native engine, which computes the rest in float32, has none.)"""
    layer = CudnnLSTM(
        3, 6, input_size=5, dropout=0.5, seed=1, direction="bidirectional", num_proj=4,
        variant=Variant(merge="sum", peepholes=True),
    )  # fmt: skip
    runs = watch_engines(monkeypatch)
    x = torch.randn(7, 2, 5, requires_grad=True)
    y, (h, c) = layer(x)
    (y.sum() + h.sum() + c.sum()).backward()
    assert y.shape == (7, 2, 4) and y.dtype == torch.float32
    assert ran(runs) == ["variant", "variant"]
    assert x.grad is not None and torch.isfinite(x.grad).all()
    # the same seed and step give the same masks: eval mode is deterministic and differs
    layer.eval()
    assert torch.equal(layer(x)[0], layer(x)[0])


def test_the_rule_table_sends_variants_to_their_engine() -> None:
    """Every variant the native engine does not compute (another dtype, a projection;
    tests/engines/test_native_variants.py has the rest) runs here."""
    for mode in LAYERS:
        plain = RNNSpec(mode, 1, 4, 4)
        assert engines.select(plain, torch.device("cpu"), torch.float32, True, False) != "variant"
        changed = RNNSpec(mode, 1, 4, 4, variant=Variant(time="reverse"))
        projected = RNNSpec(
            "lstm", 1, 4, 4, num_proj=2, variant=Variant(merge="sum"), direction="bidirectional"
        )
        for grad in (False, True):
            for dtype in (torch.float16, torch.float64):
                name = engines.select(changed, torch.device("cpu"), dtype, grad, True)
                assert name == "variant"
            assert engines.select(projected, torch.device("cpu"), torch.float32, grad, True) == (
                "variant"
            )


def test_every_activation_runs_as_the_oracle_says() -> None:
    for name in sorted(ACTIVATIONS):
        variant = Variant(cell_activation=Activation(name))
        layer = _layer("rnn_relu" if name == "relu" else "rnn_tanh", 1, variant, {})
        with torch.no_grad():  # small weights: exp and the unbounded ones stay finite
            layer.opaque_kernel.mul_(0.2)
        gen = torch.Generator().manual_seed(2)
        x = torch.randn(3, 2, SIZE, generator=gen, dtype=torch.float64)
        h0 = torch.zeros(1, 2, UNITS, dtype=torch.float64)
        y, _ = layer(x, (h0,))
        ry, _, _ = _oracle(layer, x, h0, None, None)
        np.testing.assert_allclose(y.detach().numpy(), ry, rtol=1e-12, atol=1e-13, err_msg=name)


def test_a_plain_rnn_with_the_other_modes_activation_is_that_mode() -> None:
    spec = RNNSpec("rnn_tanh", 1, 4, 4, variant=Variant(cell_activation=Activation("relu")))
    assert spec.mode == "rnn_relu" and spec.variant.is_cudnn
    with pytest.raises(ValueError, match="CudnnRNNTanh: cell_activation 'relu' is rnn_mode"):
        CudnnRNNTanh(1, 4, variant=Variant(cell_activation=Activation("relu")))


def test_config_round_trips_the_variant() -> None:
    layer = _layer("lstm", 2, Variant(peepholes=True, gate_clip=2.0), {})
    again = CudnnLSTM.from_config(layer.get_config())
    assert again.spec == layer.spec
    assert "peepholes" in repr(layer)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize(("mode", "layers", "variant", "kwargs"), GRID[::3], ids=IDS[::3])
def test_cuda_equals_cpu(mode: str, layers: int, variant: Variant, kwargs: dict[str, Any]) -> None:
    """On CUDA the rule table picks the variant engine (cuDNN has none of these) and trains."""
    layer = _layer(mode, layers, variant, kwargs)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(STEPS, BATCH, SIZE, generator=gen, dtype=torch.float64, requires_grad=True)
    y, _ = layer(x, sequence_lengths=torch.tensor([5, 2, 4]))
    (gx,) = torch.autograd.grad(y.square().sum(), x)
    gpu = layer.to("cuda")
    xg = x.detach().cuda().requires_grad_()
    yg, _ = gpu(xg, sequence_lengths=torch.tensor([5, 2, 4]))
    (ggx,) = torch.autograd.grad(yg.square().sum(), xg)
    torch.testing.assert_close(yg.cpu(), y, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(ggx.cpu(), gx, rtol=1e-10, atol=1e-12)


def test_formats_that_cannot_hold_a_variant_say_so_in_one_line(tmp_path: Path) -> None:
    """TF1's checkpoints (TF's cuDNN-compatible cells) and torch.nn cannot hold a variant: each
    says so in one line, naming what can (tests/test_checkpoint_variants.py: .safetensors)."""
    from cudnn_rnn import checkpoint
    from cudnn_rnn.converters.torch_nn import to_torch

    layer = _layer("gru", 1, Variant(reset_after=False), {})
    says = r"TF's cuDNN-compatible cells, which compute cuDNN's math only.*\.safetensors"
    with pytest.raises(ValueError, match=says) as e:
        checkpoint.save(tmp_path / "m.ckpt", layer, format="tf")
    assert "\n" not in str(e.value) and not list(tmp_path.iterdir())
    with pytest.raises(ValueError, match=says) as e:
        _ = layer.saveable.specs
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match=r"torch\.nn's RNNs compute cuDNN's four modes only"):
        to_torch(layer)
