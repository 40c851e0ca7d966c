"""Tests for the NumPy reference RNN (the oracle), checked against torch.nn in float64."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from cudnn_rnn.core.reference import rnn_forward

GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
MODES = tuple(GATES)
TOL = 1e-12


# --------------------------------------------------------------------------- helpers


def make_params(
    rng: np.random.Generator,
    mode: str,
    num_layers: int,
    num_dirs: int,
    input_size: int,
    hidden: int,
    proj: int | None = None,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Random parameters in canonical order (layer, direction, W_g..., R_g..., W_proj)."""
    g = GATES[mode]
    h_out = proj or hidden
    weights: list[np.ndarray] = []
    biases: list[np.ndarray] = []
    for layer in range(num_layers):
        in_size = input_size if layer == 0 else num_dirs * h_out
        for _ in range(num_dirs):
            weights += [rng.uniform(-1, 1, (hidden, in_size)) for _ in range(g)]
            weights += [rng.uniform(-1, 1, (hidden, h_out)) for _ in range(g)]
            if proj:
                weights.append(rng.uniform(-1, 1, (proj, hidden)))
            biases += [rng.uniform(-1, 1, hidden) for _ in range(2 * g)]
    return weights, biases


def make_case(
    rng: np.random.Generator,
    mode: str,
    *,
    num_layers: int,
    bidirectional: bool,
    T: int,
    B: int,
    I: int,  # noqa: E741
    H: int,
    proj: int | None = None,
) -> dict[str, Any]:
    """Random positional arguments + keywords for rnn_forward (time-major inputs)."""
    d = 2 if bidirectional else 1
    h_out = proj or H
    weights, biases = make_params(rng, mode, num_layers, d, I, H, proj)
    return {
        "mode": mode,
        "inputs": rng.uniform(-2, 2, (T, B, I)),
        "h0": rng.uniform(-1, 1, (num_layers * d, B, h_out)),
        "c0": rng.uniform(-1, 1, (num_layers * d, B, H)) if mode == "lstm" else None,
        "weights": weights,
        "biases": biases,
        "num_layers": num_layers,
        "bidirectional": bidirectional,
        "num_proj": proj,
    }


def call(case: dict[str, Any], **overrides: Any) -> tuple[Any, Any, Any]:
    kw = {**case, **overrides}
    return rnn_forward(
        kw.pop("mode"),
        kw.pop("inputs"),
        kw.pop("h0"),
        kw.pop("c0"),
        kw.pop("weights"),
        kw.pop("biases"),
        **kw,
    )


def torch_module(
    mode: str,
    weights: list[np.ndarray],
    biases: list[np.ndarray],
    *,
    input_size: int,
    num_layers: int,
    bidirectional: bool,
    proj: int | None,
    batch_first: bool,
) -> Any:
    """A float64 torch.nn.{LSTM,GRU,RNN} loaded with canonical parameters."""
    torch = pytest.importorskip("torch")
    hidden = biases[0].shape[0]
    common = {
        "input_size": input_size,
        "hidden_size": hidden,
        "num_layers": num_layers,
        "bidirectional": bidirectional,
        "batch_first": batch_first,
        "dtype": torch.float64,
    }
    if mode == "lstm":
        module = torch.nn.LSTM(proj_size=proj or 0, **common)
    elif mode == "gru":
        module = torch.nn.GRU(**common)
    else:
        module = torch.nn.RNN(nonlinearity=mode.removeprefix("rnn_"), **common)
    g = GATES[mode]
    d = 2 if bidirectional else 1
    per_block = 2 * g + (1 if proj else 0)
    with torch.no_grad():
        for block in range(num_layers * d):
            layer, direction = divmod(block, d)
            sfx = f"l{layer}" + ("_reverse" if direction else "")
            ws = weights[block * per_block : (block + 1) * per_block]
            bs = biases[block * 2 * g : (block + 1) * 2 * g]
            # torch's gate orders (LSTM i,f,g,o; GRU r,z,n) equal cuDNN's (i,f,c,o; r,u,h).
            getattr(module, f"weight_ih_{sfx}").copy_(torch.from_numpy(np.vstack(ws[:g])))
            getattr(module, f"weight_hh_{sfx}").copy_(torch.from_numpy(np.vstack(ws[g : 2 * g])))
            getattr(module, f"bias_ih_{sfx}").copy_(torch.from_numpy(np.concatenate(bs[:g])))
            getattr(module, f"bias_hh_{sfx}").copy_(torch.from_numpy(np.concatenate(bs[g:])))
            if proj:
                getattr(module, f"weight_hr_{sfx}").copy_(torch.from_numpy(ws[2 * g]))
    return module


def torch_forward(
    case: dict[str, Any],
    *,
    time_major: bool = True,
    lengths: list[int] | None = None,
    weights: list[np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Run the same case through torch.nn; ``case['inputs']`` in the layout of time_major."""
    torch = pytest.importorskip("torch")
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    x = case["inputs"]
    T = x.shape[0] if time_major else x.shape[1]
    module = torch_module(
        case["mode"],
        case["weights"] if weights is None else weights,
        case["biases"],
        input_size=x.shape[-1],
        num_layers=case["num_layers"],
        bidirectional=case["bidirectional"],
        proj=case["num_proj"],
        batch_first=not time_major,
    )
    h0 = torch.from_numpy(case["h0"])
    hx = (h0, torch.from_numpy(case["c0"])) if case["mode"] == "lstm" else h0
    xt = torch.from_numpy(x)
    with torch.no_grad():
        if lengths is None:
            out, state = module(xt, hx)
        else:
            packed = pack_padded_sequence(
                xt,
                torch.as_tensor(lengths, dtype=torch.int64),
                batch_first=not time_major,
                enforce_sorted=False,
            )
            packed_out, state = module(packed, hx)
            out, _ = pad_packed_sequence(packed_out, batch_first=not time_major, total_length=T)
    if case["mode"] == "lstm":
        return out.numpy(), state[0].numpy(), state[1].numpy()
    return out.numpy(), state.numpy(), None


def assert_same(
    got: tuple[Any, Any, Any], want: tuple[Any, Any, Any], *, atol: float = TOL
) -> None:
    for name, g, w in zip(("outputs", "h_n", "c_n"), got, want, strict=True):
        if w is None:
            assert g is None, name
            continue
        assert isinstance(g, np.ndarray), name
        assert g.dtype == np.float64, name
        assert g.shape == w.shape, (name, g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=0, atol=atol, err_msg=name)


def mode_proj_grid() -> list[tuple[str, bool]]:
    return [(m, False) for m in MODES] + [("lstm", True)]


# ------------------------------------------------------------------ torch comparison


@pytest.mark.parametrize("time_major", [True, False], ids=["tmajor", "bmajor"])
@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bi"])
@pytest.mark.parametrize("num_layers", [1, 2, 3])
@pytest.mark.parametrize(("mode", "with_proj"), mode_proj_grid())
def test_matches_torch_grid(
    mode: str, with_proj: bool, num_layers: int, bidirectional: bool, time_major: bool
) -> None:
    rng = np.random.default_rng(1234)
    # Projection needs P < H in torch, so H starts at 2 there and P = H - 1 (covers P = 1).
    hiddens = (2, 3) if with_proj else (1, 3)
    for T, B, I, H in itertools.product((1, 4), (1, 3), (1, 3), hiddens):  # noqa: E741
        proj = H - 1 if with_proj else None
        case = make_case(
            rng,
            mode,
            num_layers=num_layers,
            bidirectional=bidirectional,
            T=T,
            B=B,
            I=I,
            H=H,
            proj=proj,
        )
        if not time_major:
            case["inputs"] = np.ascontiguousarray(case["inputs"].transpose(1, 0, 2))
        got = call(case, time_major=time_major)
        want = torch_forward(case, time_major=time_major)
        assert_same(got, want)
        d = 2 if bidirectional else 1
        expected_out = (T, B, d * (proj or H)) if time_major else (B, T, d * (proj or H))
        assert got[0].shape == expected_out


@pytest.mark.parametrize("time_major", [True, False], ids=["tmajor", "bmajor"])
@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bi"])
@pytest.mark.parametrize(("mode", "with_proj"), mode_proj_grid())
def test_variable_lengths_match_packed_torch(
    mode: str, with_proj: bool, bidirectional: bool, time_major: bool
) -> None:
    rng = np.random.default_rng(99)
    T, B, I, H = 5, 4, 3, 3  # noqa: E741
    proj = 2 if with_proj else None
    # Unsorted lengths including 1 and T; the second set has max < T (trailing padding).
    for lengths in ([5, 1, 3, 5], [2, 4, 1, 3]):
        case = make_case(
            rng, mode, num_layers=2, bidirectional=bidirectional, T=T, B=B, I=I, H=H, proj=proj
        )
        if not time_major:
            case["inputs"] = np.ascontiguousarray(case["inputs"].transpose(1, 0, 2))
        got = call(case, time_major=time_major, sequence_lengths=np.array(lengths))
        want = torch_forward(case, time_major=time_major, lengths=lengths)
        assert_same(got, want)
        out_tm = got[0] if time_major else got[0].transpose(1, 0, 2)
        for b, n in enumerate(lengths):
            # Padded positions are exactly zero, not merely close.
            assert np.all(out_tm[n:, b] == 0.0)


def test_full_lengths_equal_no_lengths() -> None:
    rng = np.random.default_rng(5)
    case = make_case(rng, "lstm", num_layers=2, bidirectional=True, T=4, B=3, I=2, H=3)
    got = call(case, sequence_lengths=[4, 4, 4])
    want = call(case)
    assert_same(got, want, atol=0.0)


def test_lengths_only_touch_valid_steps() -> None:
    # Garbage (even non-finite) input beyond n_b must not influence anything.
    rng = np.random.default_rng(6)
    case = make_case(rng, "gru", num_layers=2, bidirectional=True, T=4, B=2, I=2, H=3)
    lengths = [2, 4]
    clean = call(case, sequence_lengths=lengths)
    dirty_inputs = case["inputs"].copy()
    dirty_inputs[2:, 0] = 1e300
    dirty = call(case, inputs=dirty_inputs, sequence_lengths=lengths)
    assert_same(dirty, clean, atol=0.0)


# ----------------------------------------------------------------------- skip_input


@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bi"])
@pytest.mark.parametrize(("mode", "with_proj"), mode_proj_grid())
def test_skip_input_matches_torch_with_identity(
    mode: str, with_proj: bool, bidirectional: bool, num_layers: int
) -> None:
    rng = np.random.default_rng(7)
    H = 3
    proj = 2 if with_proj else None
    case = make_case(
        rng,
        mode,
        num_layers=num_layers,
        bidirectional=bidirectional,
        T=4,
        B=3,
        I=H,
        H=H,
        proj=proj,
    )
    # torch gets identity layer-0 input matrices; the oracle keeps the random ones, which
    # skip_input must ignore.
    g = GATES[mode]
    per_block = 2 * g + (1 if proj else 0)
    identity_weights = list(case["weights"])
    for direction in range(2 if bidirectional else 1):
        for k in range(g):
            identity_weights[direction * per_block + k] = np.eye(H)
    got = call(case, skip_input=True)
    want = torch_forward(case, weights=identity_weights)
    assert_same(got, want)
    # And the random layer-0 input matrices really are ignored.
    assert_same(call(case, skip_input=True, weights=identity_weights), got, atol=0.0)


def test_skip_input_by_hand() -> None:
    rng = np.random.default_rng(8)
    H = 3
    case = make_case(rng, "rnn_tanh", num_layers=1, bidirectional=False, T=1, B=2, I=H, H=H)
    case["h0"] = np.zeros_like(case["h0"])
    x = case["inputs"][0]
    b_w, b_r = case["biases"]
    out, h_n, c_n = call(case, skip_input=True)
    expected = np.tanh(x + b_w + b_r)  # from h = 0 the recurrent matrix drops out
    np.testing.assert_allclose(out[0], expected, rtol=0, atol=TOL)
    np.testing.assert_allclose(h_n[0], expected, rtol=0, atol=TOL)
    assert c_n is None


# -------------------------------------------------------------------- dropout masks


def split_layer(
    case: dict[str, Any], layer: int, num_dirs: int, inputs: np.ndarray
) -> dict[str, Any]:
    """A one-layer case made of ``layer``'s parameters and initial states."""
    g = GATES[case["mode"]]
    per_block = 2 * g + (1 if case["num_proj"] else 0)
    lo, hi = layer * num_dirs, (layer + 1) * num_dirs
    return {
        **case,
        "inputs": inputs,
        "h0": case["h0"][lo:hi],
        "c0": None if case["c0"] is None else case["c0"][lo:hi],
        "weights": case["weights"][lo * per_block : hi * per_block],
        "biases": case["biases"][lo * 2 * g : hi * 2 * g],
        "num_layers": 1,
    }


@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bi"])
@pytest.mark.parametrize(("mode", "with_proj"), mode_proj_grid())
def test_zero_dropout_masks_feed_zeros(mode: str, with_proj: bool, bidirectional: bool) -> None:
    rng = np.random.default_rng(9)
    T, B, I, H = 4, 3, 2, 3  # noqa: E741
    proj = 2 if with_proj else None
    d = 2 if bidirectional else 1
    h_out = proj or H
    case = make_case(
        rng, mode, num_layers=2, bidirectional=bidirectional, T=T, B=B, I=I, H=H, proj=proj
    )
    out, h_n, c_n = call(case, dropout_masks=[np.zeros((T, B, d * h_out))])
    # Layer 1 alone on an all-zero input sequence.
    l1_out, l1_h, l1_c = call(split_layer(case, 1, d, np.zeros((T, B, d * h_out))))
    # Layer 0 alone on the real input: its states are never masked.
    _, l0_h, l0_c = call(split_layer(case, 0, d, case["inputs"]))
    np.testing.assert_allclose(out, l1_out, rtol=0, atol=TOL)
    np.testing.assert_allclose(h_n, np.concatenate([l0_h, l1_h]), rtol=0, atol=TOL)
    if mode == "lstm":
        np.testing.assert_allclose(c_n, np.concatenate([l0_c, l1_c]), rtol=0, atol=TOL)
    else:
        assert c_n is None


@pytest.mark.parametrize("time_major", [True, False], ids=["tmajor", "bmajor"])
@pytest.mark.parametrize(("mode", "with_proj"), mode_proj_grid())
def test_random_dropout_masks_match_torch_layer_by_layer(
    mode: str, with_proj: bool, time_major: bool
) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(10)
    T, B, I, H, L = 4, 3, 2, 3, 3  # noqa: E741
    proj = 2 if with_proj else None
    d = 2
    h_out = proj or H
    case = make_case(rng, mode, num_layers=L, bidirectional=True, T=T, B=B, I=I, H=H, proj=proj)
    # Scaled inverted-dropout style masks (keep prob 0.5 -> values 0 or 2), time-major.
    masks = [2.0 * (rng.uniform(size=(T, B, d * h_out)) < 0.5) for _ in range(L - 1)]
    lengths = [4, 2, 3]
    inputs = case["inputs"] if time_major else case["inputs"].transpose(1, 0, 2)
    got = call(
        case, inputs=inputs, time_major=time_major, dropout_masks=masks, sequence_lengths=lengths
    )

    # torch, one single-layer module per layer, masks applied by hand in between.
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    x = case["inputs"]
    hs, cs = [], []
    for layer in range(L):
        sub = split_layer(case, layer, d, x)
        module = torch_module(
            mode,
            sub["weights"],
            sub["biases"],
            input_size=x.shape[-1],
            num_layers=1,
            bidirectional=True,
            proj=proj,
            batch_first=False,
        )
        h0 = torch.from_numpy(sub["h0"])
        hx = (h0, torch.from_numpy(sub["c0"])) if mode == "lstm" else h0
        with torch.no_grad():
            packed = pack_padded_sequence(
                torch.from_numpy(x), torch.tensor(lengths), enforce_sorted=False
            )
            packed_out, state = module(packed, hx)
            y = pad_packed_sequence(packed_out, total_length=T)[0].numpy()
        if mode == "lstm":
            hs.append(state[0].numpy())
            cs.append(state[1].numpy())
        else:
            hs.append(state.numpy())
        x = y * masks[layer] if layer < L - 1 else y
    want_out = x if time_major else x.transpose(1, 0, 2)
    want = (want_out, np.concatenate(hs), np.concatenate(cs) if mode == "lstm" else None)
    assert_same(got, want)


def test_all_ones_masks_are_a_no_op() -> None:
    rng = np.random.default_rng(11)
    case = make_case(rng, "rnn_relu", num_layers=3, bidirectional=True, T=3, B=2, I=2, H=2)
    ones = [np.ones((3, 2, 4)), np.ones((3, 2, 4))]
    assert_same(call(case, dropout_masks=ones), call(case), atol=0.0)


# ------------------------------------------------------------------ misc behaviour


def test_accepts_lists_and_does_not_mutate() -> None:
    rng = np.random.default_rng(12)
    case = make_case(rng, "lstm", num_layers=2, bidirectional=True, T=3, B=2, I=2, H=3, proj=2)
    snapshot = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in case.items()}
    weights_copy = [w.copy() for w in case["weights"]]
    ref = call(case)
    as_lists = call(
        case,
        inputs=case["inputs"].tolist(),
        h0=case["h0"].tolist(),
        c0=case["c0"].tolist(),
        weights=[w.tolist() for w in case["weights"]],
        biases=[b.tolist() for b in case["biases"]],
    )
    assert_same(as_lists, ref, atol=0.0)
    for k in ("inputs", "h0", "c0"):
        np.testing.assert_array_equal(case[k], snapshot[k])
    for w, w0 in zip(case["weights"], weights_copy, strict=True):
        np.testing.assert_array_equal(w, w0)


def test_float32_inputs_are_promoted() -> None:
    rng = np.random.default_rng(13)
    case = make_case(rng, "gru", num_layers=1, bidirectional=False, T=2, B=2, I=2, H=2)
    case32 = {**case, "inputs": case["inputs"].astype(np.float32)}
    out, h_n, c_n = call(case32)
    assert out.dtype == np.float64
    assert h_n.dtype == np.float64
    assert c_n is None
    # Same result as feeding the float32-rounded values as float64.
    exact = call(case, inputs=case["inputs"].astype(np.float32).astype(np.float64))[0]
    np.testing.assert_array_equal(out, exact)


def test_no_overflow_warnings_for_huge_preactivations() -> None:
    rng = np.random.default_rng(14)
    case = make_case(rng, "lstm", num_layers=1, bidirectional=False, T=2, B=2, I=2, H=2)
    with np.errstate(over="raise", divide="raise", invalid="raise"):
        out, _, _ = call(case, inputs=case["inputs"] * 1e4)
    assert np.all(np.isfinite(out))


# ------------------------------------------------------------------------ ValueError


def _base() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    # T=3, B=2, I=2, H=3, two bidirectional LSTM layers with projection P=2.
    return make_case(rng, "lstm", num_layers=2, bidirectional=True, T=3, B=2, I=2, H=3, proj=2)


def _base_gru() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    return make_case(rng, "gru", num_layers=1, bidirectional=False, T=3, B=2, I=3, H=3)


def _replace(seq: list[np.ndarray], idx: int, value: np.ndarray) -> list[np.ndarray]:
    out = list(seq)
    out[idx] = value
    return out


ERROR_CASES: list[tuple[str, Callable[[], dict[str, Any]], str]] = [
    ("mode", lambda: {**_base(), "mode": "lstmx"}, "unknown mode"),
    ("layers0", lambda: {**_base(), "num_layers": 0}, "num_layers must be a positive int"),
    ("layers_float", lambda: {**_base(), "num_layers": 2.0}, "num_layers must be a positive int"),
    ("proj_neg", lambda: {**_base(), "num_proj": -1}, r"num_proj must be >= 0"),
    ("proj_gru", lambda: {**_base_gru(), "num_proj": 2}, "num_proj is only supported"),
    ("bias_count", lambda: {**_base(), "biases": _base()["biases"][:-1]}, "expected 32 bias"),
    ("count_layers", lambda: {**_base(), "num_layers": 3}, "expected 54 weight matrices"),
    ("bias_2d", lambda: {**_base(), "biases": [np.zeros((3, 1))] * 32}, r"biases\[0\] must"),
    (
        "bias_shape",
        lambda: {**_base(), "biases": _replace(_base()["biases"], 10, np.zeros(4))},
        r"biases\[10\] \(layer 0, direction 1, b_Wc\) has shape \(4,\), expected \(3,\)",
    ),
    (
        "weight_count",
        lambda: {**_base(), "weights": _base()["weights"][:-1]},
        "expected 36 weight matrices",
    ),
    (
        "weight_count_no_proj",
        lambda: {**_base(), "num_proj": None},
        r"expected 32 weight matrices",
    ),
    (
        "w_in_shape",
        lambda: {**_base(), "weights": _replace(_base()["weights"], 19, np.zeros((3, 3)))},
        r"weights\[19\] \(layer 1, direction 0, W_f\) has shape \(3, 3\), expected \(3, 4\)",
    ),
    (
        "w_rec_shape",
        lambda: {**_base(), "weights": _replace(_base()["weights"], 4, np.zeros((3, 3)))},
        r"weights\[4\] \(layer 0, direction 0, R_i\) has shape \(3, 3\), expected \(3, 2\)",
    ),
    (
        "w_proj_shape",
        lambda: {**_base(), "weights": _replace(_base()["weights"], 17, np.zeros((3, 3)))},
        r"weights\[17\] \(layer 0, direction 1, W_proj\)",
    ),
    ("inputs_2d", lambda: {**_base(), "inputs": np.zeros((3, 2))}, "inputs must be 3-D"),
    ("inputs_empty", lambda: {**_base(), "inputs": np.zeros((0, 2, 2))}, "T, B, I >= 1"),
    ("h0_shape", lambda: {**_base(), "h0": np.zeros((4, 2, 3))}, r"h0 has shape \(4, 2, 3\)"),
    (
        "h0_batch_major",
        lambda: {**_base(), "time_major": False, "inputs": np.zeros((3, 2, 2))},
        r"h0 has shape \(4, 2, 2\), expected \(4, 3, 2\)",
    ),
    ("c0_shape", lambda: {**_base(), "c0": np.zeros((4, 2, 2))}, r"c0 has shape"),
    ("c0_missing", lambda: {**_base(), "c0": None}, "c0 is required for mode 'lstm'"),
    ("c0_for_gru", lambda: {**_base_gru(), "c0": np.zeros((1, 2, 3))}, "c0 must be None"),
    (
        "skip_input_size",
        lambda: {**_base(), "skip_input": True},
        r"skip_input requires input size == num_units, got I=2, H=3",
    ),
    ("len_shape", lambda: {**_base(), "sequence_lengths": [3, 3, 3]}, "sequence_lengths has"),
    ("len_2d", lambda: {**_base(), "sequence_lengths": [[3, 3]]}, "sequence_lengths has"),
    ("len_zero", lambda: {**_base(), "sequence_lengths": [0, 3]}, r"must lie in \[1, T=3\]"),
    ("len_big", lambda: {**_base(), "sequence_lengths": [3, 4]}, r"must lie in \[1, T=3\]"),
    ("len_neg", lambda: {**_base(), "sequence_lengths": [-1, 2]}, r"must lie in \[1, T=3\]"),
    ("len_frac", lambda: {**_base(), "sequence_lengths": [1.5, 2]}, "must be integers"),
    ("len_bool", lambda: {**_base(), "sequence_lengths": [True, True]}, "must be integers"),
    ("masks_count", lambda: {**_base(), "dropout_masks": []}, "expected 1 dropout masks"),
    (
        "masks_shape",
        lambda: {**_base(), "dropout_masks": [np.ones((2, 3, 4))]},
        r"dropout_masks\[0\] \(time-major\) has shape \(2, 3, 4\), expected \(3, 2, 4\)",
    ),
]


@pytest.mark.parametrize(
    ("make", "match"), [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES]
)
def test_value_errors(make: Callable[[], dict[str, Any]], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call(make())


def test_error_base_cases_are_valid() -> None:
    # Guards the error tests: the unmodified base calls must succeed.
    out, h_n, c_n = call(_base())
    assert out.shape == (3, 2, 4)
    assert h_n.shape == (4, 2, 2)
    assert c_n is not None
    assert c_n.shape == (4, 2, 3)
    assert call(_base(), sequence_lengths=np.array([1.0, 3.0]))[0].shape == (3, 2, 4)
    assert call(_base_gru(), skip_input=True)[2] is None
