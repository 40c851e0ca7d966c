"""The layout table, params_size and pack/unpack, against independent formulas."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from cudnn_rnn.core.layout import layout_of, params_size
from cudnn_rnn.core.spec import RNNSpec

G = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


def formula(
    mode: str,
    layers: int,
    units: int,
    inp: int,
    bidi: bool,
    skip: bool = False,
    proj: int | None = None,
) -> int:
    """params_size written out from the equations (tf_cudnn_rnn.md section 5)."""
    g, d, h = G[mode], 2 if bidi else 1, units
    hout = proj or h
    total = 0
    for layer in range(layers):
        in_width = inp if layer == 0 else d * hout
        w_in = 0 if (skip and layer == 0) else g * h * in_width
        total += d * (w_in + g * h * hout + (proj or 0) * h * (proj is not None) + 2 * g * h)
    return total


@pytest.mark.parametrize(
    "mode,bidi,input_mode,proj,layers",
    [
        (m, b, im, p, n)
        for m, b, im, n in itertools.product(
            G, (False, True), ("linear_input", "skip_input", "auto_select"), (1, 2, 3)
        )
        for p in ((None, 1, 3, 5) if m == "lstm" else (None,))
    ],
)
def test_params_size_formula(
    mode: str, bidi: bool, input_mode: str, proj: int | None, layers: int
) -> None:
    for units, inp in ((5, 5), (5, 2), (1, 1)):
        if (input_mode == "skip_input" and inp != units) or (proj or 0) > units:
            continue
        spec = RNNSpec(
            mode,
            layers,
            units,
            inp,
            input_mode,
            "bidirectional" if bidi else "unidirectional",
            proj,
        )
        skip = input_mode == "skip_input" or (input_mode == "auto_select" and inp == units)
        assert params_size(spec) == formula(mode, layers, units, inp, bidi, skip, proj)


# The worked table of the reference (elements), TF's ParamsSize test configs.
WORKED = {
    ("lstm", False): (1286400, 1366400, 1206400, 120800, 563200, 1124800),
    ("lstm", True): (3532800, 3692800, 3372800, 241600, 1446400, 2889600),
    ("gru", False): (964800, 1024800, 904800, 90600, 422400, 843600),
    ("gru", True): (2649600, 2769600, 2529600, 181200, 1084800, 2167200),
    ("rnn_tanh", False): (321600, 341600, 301600, 30200, 140800, 281200),
    ("rnn_relu", True): (883200, 923200, 843200, 60400, 361600, 722400),
}
CONFIGS = ((4, 200, 200), (4, 200, 300), (4, 200, 100), (1, 100, 200), (2, 200, 100), (3, 200, 400))


@pytest.mark.parametrize("key", list(WORKED))
def test_params_size_worked_values(key: tuple[str, bool]) -> None:
    mode, bidi = key
    for (layers, units, inp), want in zip(CONFIGS, WORKED[key]):
        spec = RNNSpec(
            mode, layers, units, inp, direction="bidirectional" if bidi else "unidirectional"
        )
        assert params_size(spec) == want


def test_small_worked_values() -> None:
    assert params_size(RNNSpec("lstm", 2, 7, 3)) == 784
    assert params_size(RNNSpec("lstm", 2, 7, 3, direction="bidirectional")) == 1960
    assert params_size(RNNSpec("gru", 2, 7, 3)) == 588
    assert params_size(RNNSpec("rnn_tanh", 2, 7, 3, direction="bidirectional")) == 490
    assert params_size(RNNSpec("lstm", 1, 4, 4, num_proj=2)) == 136
    assert params_size(RNNSpec("lstm", 2, 8, 5, num_proj=3, direction="bidirectional")) == 1440


@pytest.mark.parametrize("bidi", [False, True])
@pytest.mark.parametrize("mode", list(G))
def test_offsets_follow_the_cudnn_formula(mode: str, bidi: bool) -> None:
    """Offsets equal the layout of layouts.md 1.5, written out independently (no projection)."""
    layers, h, i = 3, 4, 3
    d, g = 2 if bidi else 1, G[mode]
    layout = layout_of(
        RNNSpec(mode, layers, h, i, direction="bidirectional" if bidi else "unidirectional")
    )
    in_p = [i if p // d == 0 else d * h for p in range(layers * d)]
    w_sz = [g * h * n for n in in_p]
    matrices_end = sum(w + g * h * h for w in w_sz)
    for p in layout.weights:
        q = p.layer * d + p.direction
        gate = p.index % (2 * g)
        base = sum(w_sz[k] + g * h * h for k in range(q))
        want = (
            base + gate * h * in_p[q] if p.kind == "input" else base + w_sz[q] + (gate - g) * h * h
        )
        assert p.offset == want, p
    for p in layout.biases:
        q = p.layer * d + p.direction
        gate = p.index % (2 * g)
        assert p.offset == matrices_end + q * 2 * g * h + gate * h, p
    assert layout.size == matrices_end + layers * d * 2 * g * h


def test_table_order_and_tags() -> None:
    layout = layout_of(RNNSpec("lstm", 2, 4, 3, direction="bidirectional", num_proj=2))
    kinds = [(p.layer, p.direction, p.kind, p.gate, p.shape) for p in layout.weights[:9]]
    assert kinds == [(0, 0, "input", g, (4, 3)) for g in "ifco"] + [
        (0, 0, "recurrent", g, (4, 2)) for g in "ifco"
    ] + [(0, 0, "projection", None, (2, 4))]
    assert layout.weights[9].direction == 1
    assert layout.weights[18].shape == (4, 4)  # layer 1 input: num_dirs * num_proj
    assert [p.kind for p in layout.biases[:8]] == ["input_bias"] * 4 + ["recurrent_bias"] * 4
    offsets = [p.offset for p in layout.weights + layout.biases]
    assert offsets == sorted(offsets)  # weights first, then biases, back to back
    assert all(b.offset >= w.offset for w in layout.weights for b in layout.biases)  # type: ignore[operator]


@pytest.mark.parametrize(
    "spec",
    [
        RNNSpec("lstm", 2, 3, 2, direction="bidirectional", num_proj=2),
        RNNSpec("gru", 3, 3, 3, input_mode="skip_input", direction="bidirectional"),
        RNNSpec("rnn_relu", 1, 1, 1),
        RNNSpec("lstm", 2, 3, 3, input_mode="auto_select", num_proj=3),
    ],
)
def test_roundtrip_numpy_and_torch_exact(spec: RNNSpec) -> None:
    layout = layout_of(spec)
    flat = np.random.default_rng(0).standard_normal(layout.size)
    weights, biases = layout.unpack(flat)
    np.testing.assert_array_equal(layout.pack(weights, biases), flat)
    t = torch.as_tensor(flat).requires_grad_()
    tw, tb = layout.unpack(t)
    assert torch.equal(layout.pack(tw, tb), t)
    for p, (a, b) in zip(layout.weights, zip(weights, tw)):
        np.testing.assert_array_equal(a, b.detach().numpy())
        if p.offset is None:
            np.testing.assert_array_equal(a, np.eye(p.shape[0]))
        else:  # views, not copies
            assert np.shares_memory(a, flat) and b._base is t
    (sum(w.sum() for w in tw) + sum(b.sum() for b in tb)).backward()
    assert t.grad is not None and bool((t.grad == 1).all())


def test_pack_errors() -> None:
    layout = layout_of(RNNSpec("gru", 1, 2, 2, input_mode="skip_input"))
    w, b = layout.unpack(np.zeros(layout.size))
    with pytest.raises(ValueError, match=r"expected 6 canonical weights .* got 5"):
        layout.pack(w[:5], b, owner="t")
    with pytest.raises(ValueError, match=r"expected 6 canonical biases .* got 7"):
        layout.pack(w, [*b, b[0]], owner="t")
    with pytest.raises(
        ValueError,
        match=r"wrong shape of canonical weights: #4 \(layer 0 fw "
        r"recurrent gate u\) expected \(2, 2\), got \(2, 3\)",
    ):
        layout.pack([*w[:4], np.zeros((2, 3)), *w[5:]], b, owner="t")
    with pytest.raises(ValueError, match=r"#0 \(layer 0 fw input gate r\) must be the identity"):
        layout.pack([np.ones((2, 2)), *w[1:]], b, owner="t")
