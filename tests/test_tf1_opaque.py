"""TF1 training checkpoints: the opaque kernel restored exactly, its optimizer slots into torch.

Fixtures in ``fixtures/tf1_opaque`` were written by real TensorFlow (see the script there): the
opaque variable packed in three cuDNN-like layouts (classic, per pseudo-layer, 16-aligned with
garbage padding), trained by real TF optimizers, with ``.npz`` files of what the packing says
every value is. ``fixtures/cudnn`` holds buffers that cuDNN 9.19 itself laid out on an H200.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

from cudnn_rnn import CudnnGRU, CudnnLSTM, CudnnRNNTanh, checkpoint
from cudnn_rnn.core.gates import CUDNN_GATES
from cudnn_rnn.core.layout import INPUT, INPUT_BIAS, PROJECTION, layout_of
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.formats import tf1_bundle
from cudnn_rnn.formats.cudnn_layout import LayoutNotFound, discover
from cudnn_rnn.layers import _CudnnRNN

HERE = Path(__file__).parent / "fixtures"
FIXTURES = HERE / "tf1_opaque"
CUDNN = HERE / "cudnn" / "cudnn_buffers.safetensors"
LAYOUTS = ("classic", "per_layer", "aligned")

MODELS: dict[str, Callable[..., _CudnnRNN]] = {
    "lstm": lambda **kw: CudnnLSTM(2, 3, input_size=2, scope="model", **kw),
    "gru_bi": lambda **kw: CudnnGRU(1, 3, input_size=2, direction="bidirectional", **kw),
    "tanh": lambda **kw: CudnnRNNTanh(1, 4, input_size=3, scope="enc", **kw),
}
CASES = [(m, lay) for m in MODELS for lay in LAYOUTS]


def _expected(model: str, layout: str) -> dict[str, np.ndarray]:
    return dict(np.load(FIXTURES / f"{model}_{layout}.npz"))


def _prefix(model: str, layout: str) -> Path:
    return FIXTURES / f"{model}_{layout}.ckpt"


#: The epsilon of the resumed steps on both sides: so small that where TF and torch put it
#: (Adam: outside the bias correction or inside; RMSProp: inside the root or outside) changes
#: the result by ~eps/sqrt(v) ~ 1e-14 relative. With 1e-12 the difference is 1e-10.
EPS = 1e-16


def _optimizer(
    kind: str, params: list[torch.nn.Parameter], e: dict[str, np.ndarray]
) -> torch.optim.Optimizer:
    """The torch optimizer that matches TF's (the fixture's hyper-parameters)."""
    if kind == "adam":
        betas = (float(e["adam_beta1"]), float(e["adam_beta2"]))
        return torch.optim.Adam(params, lr=float(e["adam_lr"]), betas=betas, eps=EPS)
    if kind == "momentum":
        return torch.optim.SGD(params, lr=float(e["momentum_lr"]), momentum=float(e["momentum"]))
    if kind == "rmsprop":
        return torch.optim.RMSprop(
            params,
            lr=float(e["rmsprop_lr"]),
            alpha=float(e["rmsprop_decay"]),
            momentum=float(e["rmsprop_momentum"]),
            eps=EPS,
        )
    return torch.optim.Adagrad(params, lr=float(e["adagrad_lr"]), eps=0.0)


# -- weights and both biases --------------------------------------------------------------------


@pytest.mark.parametrize(("model", "layout"), CASES)
def test_opaque_kernel_restores_weights_and_both_biases_exactly(model: str, layout: str) -> None:
    layer = MODELS[model]()
    checkpoint.restore(_prefix(model, layout), layer)
    e = _expected(model, layout)
    got = layer.opaque_kernel.detach()
    assert torch.equal(got, torch.from_numpy(e["ours"]))
    weights, biases = layout_of(layer.spec).unpack(got)
    for k, w in enumerate(weights):
        assert torch.equal(w, torch.from_numpy(e[f"w{k}"])), k
    for k, b in enumerate(biases):
        assert torch.equal(b, torch.from_numpy(e[f"b{k}"])), k
    # The split matters: bW and bR differ, which the canonical tensors alone cannot tell.
    half = MODELS[model]()
    checkpoint.restore(_prefix(model, layout), half, opaque_name=False)
    assert not torch.equal(half.opaque_kernel, layer.opaque_kernel)


def test_padded_layout_is_larger_than_ours() -> None:
    e = _expected("lstm", "aligned")
    assert int(e["opaque_size"]) > e["ours"].size  # 16-aligned regions with garbage between


@pytest.mark.parametrize("layout", LAYOUTS)
def test_float64_layer_gets_the_float32_values(layout: str) -> None:
    layer = MODELS["tanh"](dtype=torch.float64)
    checkpoint.restore(_prefix("tanh", layout), layer)
    want = torch.from_numpy(_expected("tanh", layout)["ours"]).double()
    assert torch.equal(layer.opaque_kernel.detach(), want)


# -- optimizer state ----------------------------------------------------------------------------

SLOT_STATE = {
    "adam": {"exp_avg": "slot_adam_m", "exp_avg_sq": "slot_adam_v"},
    "momentum": {"momentum_buffer": "slot_momentum"},
    "rmsprop": {"square_avg": "slot_rmsprop_ms"},
    "adagrad": {"sum": "slot_adagrad"},
}


@pytest.mark.parametrize("kind", list(SLOT_STATE))
@pytest.mark.parametrize(("model", "layout"), CASES)
def test_optimizer_state_from_tf_slots(model: str, layout: str, kind: str) -> None:
    e = _expected(model, layout)
    layer = MODELS[model]()
    opt = _optimizer(kind, list(layer.parameters()), e)
    checkpoint.restore(_prefix(model, layout), layer, optimizer=opt)
    state = opt.state[layer.opaque_kernel]
    for key, slot in SLOT_STATE[kind].items():
        assert torch.equal(state[key], torch.from_numpy(e[slot])), key
    if kind == "adam":
        assert state["step"].item() == int(e["adam_steps"]) == 3
    if kind == "rmsprop":  # TF's momentum slot holds lr times torch's buffer
        want = torch.from_numpy(e["slot_rmsprop_mom"]) / float(e["rmsprop_lr"])
        assert torch.equal(state["momentum_buffer"], want)


def test_adam_step_count_follows_beta1_power() -> None:
    e = _expected("lstm", "classic")
    beta1 = float(e["adam_beta1"])
    # TF stores the power its next step uses: beta1 ** (t + 1).
    assert float(e["beta1_power"]) == pytest.approx(beta1 ** (int(e["adam_steps"]) + 1), rel=1e-6)


def _tf_steps(kind: str, x: np.ndarray, slots: dict[str, np.ndarray], e, a, b, n: int):
    """TF1's update rules (training_ops.cc), in NumPy float64, for loss sum((a*x+b)**2)."""
    x = x.copy()
    s = {k: v.copy() for k, v in slots.items()}
    t = int(e["adam_steps"])
    for _ in range(n):
        g = 2 * a * (a * x + b)
        if kind == "adam":
            b1, b2, lr = (float(e[k]) for k in ("adam_beta1", "adam_beta2", "adam_lr"))
            t += 1
            lr_t = lr * np.sqrt(1 - b2**t) / (1 - b1**t)
            s["m"] = b1 * s["m"] + (1 - b1) * g
            s["v"] = b2 * s["v"] + (1 - b2) * g * g
            x -= lr_t * s["m"] / (np.sqrt(s["v"]) + EPS)  # TF's epsilon "hat"
        elif kind == "momentum":
            s["acc"] = float(e["momentum"]) * s["acc"] + g
            x -= float(e["momentum_lr"]) * s["acc"]
        elif kind == "rmsprop":
            rho, mu = float(e["rmsprop_decay"]), float(e["rmsprop_momentum"])
            s["ms"] = rho * s["ms"] + (1 - rho) * g * g
            # TF's epsilon is inside the root.
            s["mom"] = mu * s["mom"] + float(e["rmsprop_lr"]) * g / np.sqrt(s["ms"] + EPS)
            x -= s["mom"]
        else:
            s["acc"] += g * g
            x -= float(e["adagrad_lr"]) * g / np.sqrt(s["acc"])
    return x


TF_SLOTS = {
    "adam": {"m": "slot_adam_m", "v": "slot_adam_v"},
    "momentum": {"acc": "slot_momentum"},
    "rmsprop": {"ms": "slot_rmsprop_ms", "mom": "slot_rmsprop_mom"},
    "adagrad": {"acc": "slot_adagrad"},
}


@pytest.mark.parametrize("kind", list(TF_SLOTS))
@pytest.mark.parametrize("model", list(MODELS))
def test_resumed_training_follows_tf_update_rule(model: str, kind: str) -> None:
    """Three more steps in torch equal three steps of TF's rule from the same checkpoint.

    float64 on both sides; what is left is the epsilon's place (TF Adam: outside the bias
    correction; RMSProp: inside the square root; Adagrad: none, torch eps=0 here), so the
    epsilons are :data:`EPS` on both sides and the tolerance is 1e-12 relative (float64
    rounding); the state mapping itself is exact (test_optimizer_state_from_tf_slots).
    """
    e = _expected(model, "aligned")
    layer = MODELS[model](dtype=torch.float64)
    opt = _optimizer(kind, list(layer.parameters()), e)
    checkpoint.restore(_prefix(model, "aligned"), layer, optimizer=opt)
    rng = np.random.default_rng(7)
    a = rng.uniform(0.5, 1.5, e["ours"].size)
    b = rng.uniform(-0.5, 0.5, e["ours"].size)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    for _ in range(3):
        opt.zero_grad()
        loss = ((ta * layer.opaque_kernel + tb) ** 2).sum()
        loss.backward()
        opt.step()
    slots = {k: e[v].astype(np.float64) for k, v in TF_SLOTS[kind].items()}
    want = _tf_steps(kind, e["ours"].astype(np.float64), slots, e, a, b, 3)
    np.testing.assert_allclose(layer.opaque_kernel.detach().numpy(), want, rtol=1e-12, atol=1e-14)


# -- finding the variable -----------------------------------------------------------------------


def test_found_by_size_under_another_name_and_by_explicit_name() -> None:
    want = torch.from_numpy(_expected("gru_bi", "classic")["ours"])
    layer = MODELS["gru_bi"]()  # named cudnn_gru; the file's is bigru/opaque_kernel
    checkpoint.restore(_prefix("gru_bi", "classic"), layer)
    assert torch.equal(layer.opaque_kernel.detach(), want)
    named = MODELS["gru_bi"]()
    checkpoint.restore(_prefix("gru_bi", "classic"), named, opaque_name="bigru/opaque_kernel")
    assert torch.equal(named.opaque_kernel.detach(), want)


def test_absent_opaque_keeps_the_halved_biases(tmp_path: Path) -> None:
    layer = MODELS["tanh"]()
    prefix = _rewrite(tmp_path, "tanh", "classic", drop=("enc/cudnn_rnn_tanh/opaque_kernel",))
    checkpoint.restore(prefix, layer)
    _, biases = layout_of(layer.spec).unpack(layer.opaque_kernel.detach())
    assert torch.equal(biases[0], biases[1])  # bW = bR = B / 2, as before
    with pytest.raises(checkpoint.CheckpointError, match="no opaque kernel"):
        checkpoint.restore(prefix, layer, optimizer=torch.optim.SGD(layer.parameters(), 0.1, 0.9))


def test_explicit_name_missing(tmp_path: Path) -> None:
    with pytest.raises(checkpoint.CheckpointError, match="opaque_name 'nope' is not in the file"):
        checkpoint.restore(_prefix("lstm", "classic"), MODELS["lstm"](), opaque_name="nope")


def test_several_candidates_refused(tmp_path: Path) -> None:
    arrays = tf1_bundle.read_bundle(str(_prefix("gru_bi", "classic")))
    arrays["other/opaque_kernel"] = arrays["bigru/opaque_kernel"].copy()
    prefix = tmp_path / "two.ckpt"
    tf1_bundle.write_bundle(str(prefix), arrays)
    with pytest.raises(checkpoint.CheckpointError, match="several opaque kernels"):
        checkpoint.restore(prefix, MODELS["gru_bi"]())


def _rewrite(
    tmp_path: Path,
    model: str,
    layout: str,
    change: Callable[[dict[str, np.ndarray]], None] = lambda a: None,
    drop: tuple[str, ...] = (),
) -> Path:
    arrays = tf1_bundle.read_bundle(str(_prefix(model, layout)))
    for name in drop:
        arrays = {k: v for k, v in arrays.items() if not k.startswith(name)}
    change(arrays)
    prefix = tmp_path / f"{model}_{layout}.ckpt"
    tf1_bundle.write_bundle(str(prefix), arrays)
    return prefix


# -- refusals -----------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_corrupt_matrix_refused_and_layer_unchanged(tmp_path: Path, layout: str) -> None:
    name = "model/cudnn_lstm/opaque_kernel"

    def corrupt(arrays: dict[str, np.ndarray]) -> None:
        buf = arrays[name].copy()
        first = _expected("lstm", layout)["w0"].reshape(-1)[0]
        buf[np.flatnonzero(buf == first)[0]] += 1.0  # the first element of layer 0's W_i
        arrays[name] = buf

    prefix = _rewrite(tmp_path, "lstm", layout, corrupt)
    layer = MODELS["lstm"]()
    before = layer.opaque_kernel.detach().clone()
    with pytest.raises(checkpoint.CheckpointError, match=r"no cuDNN layout .* nowhere in the"):
        checkpoint.restore(prefix, layer)
    assert torch.equal(layer.opaque_kernel.detach(), before)
    checkpoint.restore(prefix, layer, opaque_name=False)  # the way out the message names


def test_bias_that_does_not_add_up_refused(tmp_path: Path) -> None:
    name = "enc/cudnn_rnn_tanh/opaque_kernel"
    e = _expected("tanh", "classic")

    def corrupt(arrays: dict[str, np.ndarray]) -> None:
        buf = arrays[name].copy()
        buf[np.flatnonzero(buf == e["b1"][0])[0]] += 0.5  # bR moved, the canonical sum kept
        arrays[name] = buf

    with pytest.raises(checkpoint.CheckpointError, match="no placement of the biases"):
        checkpoint.restore(_rewrite(tmp_path, "tanh", "classic", corrupt), MODELS["tanh"]())


def test_optimizer_errors(tmp_path: Path) -> None:
    prefix = _prefix("lstm", "classic")
    layer, other = MODELS["lstm"](), MODELS["lstm"]()
    with pytest.raises(checkpoint.CheckpointError, match="does not hold the opaque_kernel"):
        checkpoint.restore(prefix, layer, optimizer=torch.optim.Adam(other.parameters()))
    with pytest.raises(checkpoint.CheckpointError, match="not beta"):
        opt = torch.optim.Adam(layer.parameters(), betas=(0.5, 0.999))
        checkpoint.restore(prefix, layer, optimizer=opt)
    with pytest.raises(checkpoint.CheckpointError, match="no TF1 counterpart"):
        checkpoint.restore(prefix, layer, optimizer=torch.optim.Adamax(layer.parameters()))
    with pytest.raises(checkpoint.CheckpointError, match="momentum > 0"):
        checkpoint.restore(prefix, layer, optimizer=torch.optim.SGD(layer.parameters(), 0.1))
    with pytest.raises(checkpoint.CheckpointError, match="opaque_name=False ignores"):
        opt = torch.optim.Adam(layer.parameters())
        checkpoint.restore(prefix, layer, optimizer=opt, opaque_name=False)
    dropped = _rewrite(tmp_path, "lstm", "classic", drop=("model/cudnn_lstm/opaque_kernel/Adam",))
    with pytest.raises(checkpoint.CheckpointError, match="missing optimizer slot"):
        checkpoint.restore(dropped, layer, optimizer=torch.optim.Adam(layer.parameters()))
    ours = tmp_path / "ours.safetensors"
    checkpoint.save(ours, layer)
    with pytest.raises(checkpoint.CheckpointError, match="not a TF1 checkpoint"):
        checkpoint.restore(ours, layer, optimizer=torch.optim.Adam(layer.parameters()))


def test_failed_optimizer_restore_changes_nothing() -> None:
    layer = MODELS["lstm"]()
    before = layer.opaque_kernel.detach().clone()
    opt = torch.optim.Adam(layer.parameters(), amsgrad=True)
    with pytest.raises(checkpoint.CheckpointError, match="amsgrad"):
        checkpoint.restore(_prefix("lstm", "classic"), layer, optimizer=opt)
    assert torch.equal(layer.opaque_kernel.detach(), before)
    assert not opt.state


# -- discovery itself ---------------------------------------------------------------------------


def _cudnn_cases() -> list[str]:
    with safe_open(CUDNN, "np") as f:
        return sorted(k for k in f.metadata() if k not in ("cudnn", "device", "torch"))


_MODES = {"LSTM": "lstm", "GRU": "gru", "RNN": "rnn_tanh", "RNN_RELU": "rnn_relu"}


def _canonical_of_torch(
    spec: RNNSpec, get: Callable[[str], np.ndarray]
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Our canonical weights and biases (exact) from torch.nn's parameters, ``get(name)``."""
    layout, h = layout_of(spec), spec.num_units
    gates = CUDNN_GATES[spec.mode]

    def part(p, weight: bool) -> np.ndarray:
        suffix = f"_l{p.layer}" + ("_reverse" if p.direction else "")
        if p.kind == PROJECTION:
            return get(f"weight_hr{suffix}")
        kind = ("weight_" if weight else "bias_") + (
            "ih" if p.kind in (INPUT, INPUT_BIAS) else "hh"
        )
        g = gates.index(p.gate)
        return np.ascontiguousarray(get(f"{kind}{suffix}")[g * h : (g + 1) * h])

    return [part(p, True) for p in layout.weights], [part(p, False) for p in layout.biases]


def _torch_case(case: str):
    """spec, buffer, our canonical weights and biases (exact) of one real cuDNN buffer."""
    with safe_open(CUDNN, "np") as f:
        m = json.loads(f.metadata()[case])
        spec = RNNSpec(
            _MODES[m["module"]],
            m["num_layers"],
            m["hidden_size"],
            m["input_size"],
            "linear_input",
            "bidirectional" if m["bidirectional"] else "unidirectional",
            m["proj_size"] or None,
        )
        weights, biases = _canonical_of_torch(spec, lambda name: f.get_tensor(f"{case}/{name}"))
        return spec, f.get_tensor(f"{case}/buffer"), weights, biases


def _sums(spec: RNNSpec, biases: list[np.ndarray]) -> dict[tuple[int, int, str], np.ndarray]:
    table = layout_of(spec).biases
    by = {(p.layer, p.direction, p.kind, p.gate): b for p, b in zip(table, biases)}
    return {
        (p.layer, p.direction, str(p.gate)): by[p.layer, p.direction, INPUT_BIAS, p.gate]
        + by[p.layer, p.direction, "recurrent_bias", p.gate]
        for p in table
        if p.kind == INPUT_BIAS
    }


@pytest.mark.parametrize("case", _cudnn_cases())
def test_discovery_finds_real_cudnn_layouts(case: str) -> None:
    """Told only the matrices and the bias sums, discovery splits torch's b_ih/b_hh exactly."""
    spec, buffer, weights, biases = _torch_case(case)
    found = discover(spec, buffer, weights, [None] * len(biases), _sums(spec, biases))
    assert found.padding == 0
    assert np.array_equal(found.to_ours(buffer), layout_of(spec).pack(weights, biases))


LIVE = [  # (spec, torch dtype): larger and odd sizes than the fixture, half precision too
    (RNNSpec("lstm", 3, 64, 33, direction="bidirectional"), torch.float32),
    (RNNSpec("lstm", 2, 17, 5, num_proj=7), torch.float32),
    (RNNSpec("gru", 2, 48, 30, direction="bidirectional"), torch.float16),
    (RNNSpec("rnn_tanh", 1, 129, 3), torch.float64),
    (RNNSpec("rnn_relu", 2, 9, 4, direction="bidirectional"), torch.float32),
]


@pytest.mark.cuda
@pytest.mark.parametrize("spec,dtype", LIVE, ids=lambda v: getattr(v, "mode", str(v)))
def test_discovery_finds_the_buffer_cudnn_flattens_now(spec: RNNSpec, dtype: torch.dtype) -> None:
    """On a GPU: the buffer torch.nn.*.cuda().flatten_parameters() has cuDNN lay out, found."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    torch.manual_seed(0)
    args = (spec.input_size, spec.num_units, spec.num_layers)
    bi = spec.direction == "bidirectional"
    module: torch.nn.RNNBase
    if spec.mode == "lstm":
        module = torch.nn.LSTM(*args, bidirectional=bi, proj_size=spec.num_proj or 0)
    elif spec.mode == "gru":
        module = torch.nn.GRU(*args, bidirectional=bi)
    else:
        module = torch.nn.RNN(*args, bidirectional=bi, nonlinearity=spec.mode[4:])
    with torch.no_grad():
        for p in module.parameters():
            p.uniform_(-1.0, 1.0)
    module = module.to("cuda", dtype)
    module.flatten_parameters()
    params = {n: p.detach() for n, p in module.named_parameters()}
    storage = next(iter(params.values())).untyped_storage()
    buffer = torch.empty(0, dtype=dtype, device="cuda").set_(storage).cpu().numpy()
    weights, biases = _canonical_of_torch(spec, lambda name: params[name].cpu().numpy())
    sums = {k: v.astype(buffer.dtype) for k, v in _sums(spec, biases).items()}
    found = discover(spec, buffer, weights, [None] * len(biases), sums)
    assert np.array_equal(found.to_ours(buffer), layout_of(spec).pack(weights, biases))


@pytest.mark.parametrize("align", [8, 64])
def test_discovery_of_a_real_buffer_with_padding_inserted(align: int) -> None:
    spec, buffer, weights, biases = _torch_case("lstm_3_5_2bi")
    layout = layout_of(spec)
    rng = np.random.default_rng(align)
    parts, blocks = (
        [],
        sorted((b.offset, int(np.prod(b.shape))) for b in layout.blocks),
    )  # cuDNN's regions (ours, as the case above shows), each moved to an aligned offset
    pos = 0
    for offset, n in blocks:
        gap = -pos % align
        parts += [rng.standard_normal(gap).astype(np.float32), buffer[offset : offset + n]]
        pos += gap + n
    padded = np.concatenate(parts)
    found = discover(spec, padded, weights, [None] * len(biases), _sums(spec, biases))
    assert found.padding == padded.size - buffer.size
    assert np.array_equal(found.to_ours(padded), layout.pack(weights, biases))


def test_equal_matrices_placed_by_canonical_order() -> None:
    spec = RNNSpec("lstm", 1, 2, 2)  # I == H: all 8 matrices equal, as TF1's seeded init makes
    layout = layout_of(spec)
    m = np.array([[1, 2], [3, 4]], np.float32)
    weights = [m] * 8
    rng = np.random.default_rng(0)
    biases = [rng.standard_normal(2).astype(np.float32) for _ in layout.biases]
    flat = layout.pack(weights, biases)
    found = discover(spec, flat, weights, [None] * 8, _sums(spec, biases))
    assert np.array_equal(found.to_ours(flat), flat)


def test_ambiguous_zero_matrix_refused() -> None:
    spec = RNNSpec("rnn_tanh", 1, 2, 2)
    w, r = np.zeros((2, 2), np.float32), np.array([[1, 2], [3, 4]], np.float32)
    bw, br = np.array([0.5, 0.25], np.float32), np.array([1.5, -1.0], np.float32)
    # Zero padding before the zero input matrix: it could sit at 0 or at 4.
    buffer = np.concatenate([np.zeros(4, np.float32), w.ravel(), r.ravel(), bw, br])
    with pytest.raises(LayoutNotFound, match=r"several offsets .* ambiguous"):
        discover(spec, buffer, [w, r], [None, None], {(0, 0, "h"): bw + br})
