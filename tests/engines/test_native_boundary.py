"""The native engine's one boundary into C, and NaN and infinities through it (issue 20).

Each finding of the issue first: tensors that are not contiguous (lengths expanded or sliced, a
strided parameter view) used to be read by C as if they were, giving wrong numbers or writing
out of bounds; NaN used to come out of sigmoid, tanh and exp as finite numbers. Every check
compares with the same call on torch's engines (``native.supports`` off), which get strides
and NaN right by construction.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from cudnn_rnn import CudnnGRU, ops
from cudnn_rnn.core.layout import layout_of
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.engines import native
from tests.support.isa import isa_params
from tests.support.paths import ROOT

LEVELS = native.level_names()
pytestmark = pytest.mark.skipif(not native.available(), reason="native engine not loaded")


def _without_native(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native.Native, "supports", lambda self, call: False)


# -- the findings: strided tensors reached C by their data pointer ------------------------------


@pytest.mark.parametrize(
    "make_lengths",
    [
        lambda: torch.tensor([6]).expand(4),  # stride 0
        lambda: torch.tensor([6, 0, 3, 0, 5, 0, 2, 0])[::2],  # stride 2
        lambda: torch.tensor([0, 0, 6, 3, 5, 2])[2:],  # an offset into its storage
    ],
    ids=["expanded", "sliced", "offset"],
)
def test_strided_lengths_are_read_as_their_values(
    make_lengths: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.manual_seed(0)
    layer = CudnnGRU(2, 5, direction="bidirectional")
    x = torch.randn(6, 4, 3, requires_grad=True)
    lengths = make_lengths()  # type: ignore[operator]
    got = layer(x, sequence_lengths=lengths)[0]
    got_grad = torch.autograd.grad(got.square().sum(), [x, layer.opaque_kernel])
    want = layer(x, sequence_lengths=lengths.contiguous())[0]
    want_grad = torch.autograd.grad(want.square().sum(), [x, layer.opaque_kernel])
    assert torch.equal(got, want)
    assert all(torch.equal(a, b) for a, b in zip(got_grad, want_grad))
    _without_native(monkeypatch)
    torch.testing.assert_close(got, layer(x, sequence_lengths=lengths.contiguous())[0])


#: What ``boundary`` checks of the caller's: each is checked there once and its address taken
#: without a second check (a layer above the first reads what the engine itself made).
CALLERS = {"params", "x", "h0", "c0", "lengths", "rowmap", "the valid rows"}


@pytest.mark.parametrize("case", ["plain", "lengths", "layers", "skip_input", "workspace"])
def test_a_forward_checks_the_callers_tensors_once_on_their_way_into_c(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``boundary`` checks what the caller gave and ``_checked`` takes its address; ``_ptr``
    checks only what the engine made itself: none of the caller's tensors is checked twice
    (issue 21, item 1). A strided input still reaches C as its values (the tests above)."""
    checked: list[torch.Tensor] = []
    pointed: list[torch.Tensor] = []
    boundary, ptr = native.boundary, native._ptr

    def spy_boundary(t: torch.Tensor, name: str, *args: object, **kwargs: object) -> torch.Tensor:
        out = boundary(t, name, *args, **kwargs)  # type: ignore[arg-type]
        if name in CALLERS:
            checked.append(out)
        return out

    def spy_ptr(t: torch.Tensor | None, offset: int = 0) -> int | None:
        if t is not None:
            pointed.append(t)
        return ptr(t, offset)

    monkeypatch.setattr(native, "boundary", spy_boundary)
    monkeypatch.setattr(native, "_ptr", spy_ptr)
    torch.manual_seed(2)
    layers = 3 if case == "layers" else 2 if case == "skip_input" else 1
    mode = "skip_input" if case == "skip_input" else "linear_input"
    x = torch.randn(5, 3, 6)
    if case == "workspace":  # a training forward: the engine's own call, with its workspace
        layout = layout_of(RNNSpec("gru", 2, 6, 6, "linear_input", "bidirectional"))
        h0, params = torch.zeros(4, 3, 6), torch.randn(layout.size)
        native.forward(layout, params, x, h0, None, torch.tensor([5, 2, 4]), None, True)
    else:
        layer = CudnnGRU(layers, 6, input_mode=mode, direction="bidirectional", input_size=6)
        with torch.no_grad():
            layer(x, sequence_lengths=torch.tensor([5, 2, 4]) if case == "lengths" else None)
    assert len(checked) >= 3, "the call did not reach the native engine"
    twice = [t for t in pointed if any(t is c for c in checked)]
    assert not twice, f"{len(twice)} of the caller's tensors were checked again by _ptr"


def test_a_strided_params_view_is_read_as_its_values(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(1)
    op = ops.CudnnLSTM(1, 4, 3)
    storage = torch.randn(2 * op.params_size()) * 0.5
    params = storage[::2]  # what a user slicing a bigger buffer hands the op
    assert not params.is_contiguous()
    x, h, c = torch.randn(5, 2, 3), torch.randn(1, 2, 4), torch.randn(1, 2, 4)
    got = op(x, h, c, params)
    assert all(torch.equal(a, b) for a, b in zip(got, op(x, h, c, params.contiguous())))
    _without_native(monkeypatch)
    for a, b in zip(got, op(x, h, c, params)):
        torch.testing.assert_close(a, b)


def test_sliced_lengths_on_a_bidirectional_layer_cannot_write_out_of_bounds() -> None:
    """It died with SIGSEGV: run in a child, so a regression fails here instead of the suite."""
    code = textwrap.dedent(
        """
        import torch
        from cudnn_rnn import CudnnLSTM
        torch.manual_seed(0)
        layer = CudnnLSTM(2, 64, direction="bidirectional")
        x = torch.randn(50, 16, 32, requires_grad=True)
        lengths = torch.tensor([50, 10**6] * 16)[::2]   # every other one a wild value
        out = layer(x, sequence_lengths=lengths)[0]
        out.sum().backward()
        print("ok", bool(torch.isfinite(out).all()))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["ok", "True"]


# -- NaN and infinities ---------------------------------------------------------------------------

SPECIAL = torch.tensor(
    [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 88.5, 89.0, -88.5, -89.0, -104.0, 1.0]
)
TORCH_FN = {"sigmoid": torch.sigmoid, "tanh": torch.tanh, "exp": torch.exp}


@pytest.mark.parametrize("level", isa_params())
@pytest.mark.parametrize("kind", ["sigmoid", "tanh", "exp"])
def test_every_activation_of_every_isa_keeps_nan_and_infinities(level: str, kind: str) -> None:
    with native.use_level(level):
        got = native.activation(kind, SPECIAL)
    want = TORCH_FN[kind](SPECIAL)
    assert torch.equal(got.isnan(), want.isnan()), (got, want)
    # NaN and the infinities give exactly torch's (0, 1, -1, inf); past float's range the
    # sigmoid's 0 and 1 and exp's inf too. Within range the ulp tests (tests/engines/test_native.py)
    # bound the values.
    exact = SPECIAL.isnan() | SPECIAL.isinf() | (SPECIAL.abs() > 88.8)
    exact &= ~want.isnan()
    if kind == "exp":
        exact &= SPECIAL > 0  # exp(-89) and exp(-104) are subnormal: flushed to 0 only below -87
    assert torch.equal(got[exact], want[exact]), (got, want)


def _poison(t: torch.Tensor, value: float, where: tuple[int, ...]) -> torch.Tensor:
    t = t.clone()
    t[where] = value
    return t


def _run(
    layer: torch.nn.Module, x: torch.Tensor, h: tuple[torch.Tensor, ...]
) -> list[torch.Tensor]:
    x = x.detach().requires_grad_()
    out, states = layer(x, initial_state=h)
    loss = out.sum() + sum(s.sum() for s in states)
    grads = torch.autograd.grad(loss, [x, layer.opaque_kernel], allow_unused=True)
    return [out.detach(), *(s.detach() for s in states), *grads]


@pytest.mark.parametrize("level", isa_params())
@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh", "rnn_relu"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")], ids=str)
@pytest.mark.parametrize("where", ["input", "state", "weight"])
def test_nan_and_inf_propagate_as_in_torch(
    level: str, mode: str, value: float, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cudnn_rnn import layers

    torch.manual_seed(3)
    layer = layers.LAYER_CLASSES[mode](2, 8, direction="bidirectional", input_size=5)
    x = torch.randn(6, 3, 5)
    states = tuple(torch.randn(4, 3, 8) for _ in range(2 if mode == "lstm" else 1))
    if where == "input":
        x = _poison(x, value, (2, 1, 3))
    elif where == "state":
        states = (_poison(states[0], value, (1, 2, 4)), *states[1:])
    else:
        with torch.no_grad():
            layer.opaque_kernel[7] = value
    with native.use_level(level):
        got = _run(layer, x, states)
    _without_native(monkeypatch)
    want = _run(layer, x, states)
    for name, g, w in zip(("out", "h", "c or dx", "dx or dparams", "dparams"), got, want):
        assert torch.equal(g.isnan(), w.isnan()), f"{name}: NaN where torch has none or not"
        assert torch.equal(g.isposinf(), w.isposinf()) and torch.equal(g.isneginf(), w.isneginf())
        finite = g.isfinite()
        torch.testing.assert_close(g[finite], w[finite], atol=1e-4, rtol=1e-4, msg=name)
