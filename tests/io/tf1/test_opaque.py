"""TF1 training checkpoints: the opaque kernel restored exactly, its optimizer slots into torch.

What each fixture is evidence of (the scripts beside them say how they were made):

* ``fixtures/tf1_opaque``: real TensorFlow (2.21, ``tf.compat.v1``) wrote the files and its
  optimizers trained the opaque variable, so the slots, ``beta1_power`` and ``beta2_power`` are
  TF's; but the buffer's layouts (classic, per pseudo-layer, 16-aligned with garbage padding) and
  the canonical tensors beside it were packed by the script (TF 2 has no ``tf.contrib.cudnn_rnn``
  and a CPU no cuDNN), and the ``.npz`` files say what the script packed where.
* ``fixtures/tf_updates``: TF 2.21's own training kernels (``ApplyAdam``, ``ApplyMomentum``,
  ``ApplyRMSProp``, ``ApplyAdagrad``, what TF1's optimizers run), run on a restored checkpoint's
  values for three more steps: what torch's resumed steps are compared with.
* ``fixtures/cudnn``: buffers that torch's cuDNN path flattened on a GPU (test_cudnn_layout.py
  says what that file proves).
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
from cudnn_rnn.converters import tf1_opaque as tf1_opaque
from cudnn_rnn.core.gates import CUDNN_GATES
from cudnn_rnn.core.layout import INPUT, INPUT_BIAS, PROJECTION, layout_of
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.io import cudnn_layout
from cudnn_rnn.io.cudnn_layout import LayoutNotFound, discover
from cudnn_rnn.io.tf1 import bundle as tf1_bundle
from cudnn_rnn.layers import _CudnnRNN
from tests.support.paths import FIXTURES
from tests.support.timing import cpu_seconds

HERE = FIXTURES
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
    """The torch optimizer that matches TF's (the fixture's hyper-parameters); ``nesterov`` is
    ``MomentumOptimizer(use_nesterov=True)``'s."""
    if kind == "adam":
        betas = (float(e["adam_beta1"]), float(e["adam_beta2"]))
        return torch.optim.Adam(params, lr=float(e["adam_lr"]), betas=betas, eps=EPS)
    if kind in ("momentum", "nesterov"):
        return torch.optim.SGD(
            params,
            lr=float(e["momentum_lr"]),
            momentum=float(e["momentum"]),
            nesterov=kind == "nesterov",
        )
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


with np.load(HERE / "tf_updates" / "resumed_steps.npz") as _npz:
    UPDATES = dict(_npz)
#: TF's slots in fixtures/tf_updates -> the tf1_opaque npz's keys (the start of every run).
TF_SLOTS = {
    "adam": {"m": "slot_adam_m", "v": "slot_adam_v"},
    "momentum": {"accum": "slot_momentum"},
    "nesterov": {"accum": "slot_momentum"},
    "rmsprop": {"ms": "slot_rmsprop_ms", "mom": "slot_rmsprop_mom"},
    "adagrad": {"accum": "slot_adagrad"},
}


def _tf_state(kind: str, state: dict[str, torch.Tensor], lr: float) -> dict[str, np.ndarray]:
    """Torch's optimizer state as TF's slots (docs/migration.md's table: TF's RMSProp ``mom``
    holds ``lr`` times torch's ``momentum_buffer``)."""
    if kind == "adam":
        return {"m": state["exp_avg"].numpy(), "v": state["exp_avg_sq"].numpy()}
    if kind in ("momentum", "nesterov"):
        return {"accum": state["momentum_buffer"].numpy()}
    if kind == "rmsprop":
        return {"ms": state["square_avg"].numpy(), "mom": lr * state["momentum_buffer"].numpy()}
    return {"accum": state["sum"].numpy()}


@pytest.mark.parametrize("kind", list(TF_SLOTS))
@pytest.mark.parametrize("model", list(MODELS))
def test_resumed_training_follows_tfs_own_update_kernels(model: str, kind: str) -> None:
    """Three more steps in torch equal three steps of TF's own training kernels from the same
    checkpoint, on the same loss (``fixtures/tf_updates``: TF 2.21's ``ApplyAdam``,
    ``ApplyMomentum`` without and with ``use_nesterov``, ``ApplyRMSProp``, ``ApplyAdagrad``, the
    kernels TF1's optimizers run, float64), and so does the optimizer state after them.

    What still differs is where the epsilon goes (docs/migration.md's table: Adam's outside TF's
    bias correction, RMSProp's inside TF's square root; Adagrad has none, torch eps=0 here), so
    the epsilons are :data:`EPS` on both sides; TF's Adam was fed the powers ``beta ** t`` that
    torch computes from its step count. The tolerance is 1e-12 relative (float64 rounding); the
    state mapping itself is exact (test_optimizer_state_from_tf_slots).
    """
    u = {k[len(model) + 1 :]: v for k, v in UPDATES.items() if k.startswith(f"{model}/")}
    e = _expected(model, "aligned")
    assert float(UPDATES["eps"]) == EPS
    layer = MODELS[model](dtype=torch.float64)
    opt = _optimizer(kind, list(layer.parameters()), e)
    checkpoint.restore(_prefix(model, "aligned"), layer, optimizer=opt)
    # TF's kernels started where the restore put torch.
    assert torch.equal(layer.opaque_kernel.detach(), torch.from_numpy(u["x0"]))
    lr = float(e[f"{'momentum' if kind == 'nesterov' else kind}_lr"])
    for slot, value in _tf_state(kind, opt.state[layer.opaque_kernel], lr).items():
        np.testing.assert_allclose(value, u[f"slot/{TF_SLOTS[kind][slot]}"], rtol=1e-15)
    a, b = torch.from_numpy(u["a"]), torch.from_numpy(u["b"])
    for k in range(1, 4):
        opt.zero_grad()
        loss = ((a * layer.opaque_kernel + b) ** 2).sum()
        loss.backward()
        opt.step()
        got = layer.opaque_kernel.detach().numpy()
        np.testing.assert_allclose(got, u[f"{kind}/x{k}"], rtol=1e-12, atol=1e-14, err_msg=k)
    for slot, value in _tf_state(kind, opt.state[layer.opaque_kernel], lr).items():
        np.testing.assert_allclose(value, u[f"{kind}/{slot}"], rtol=1e-12, atol=1e-14)


def _documented_tf_rules(kind: str, x: np.ndarray, slots: dict[str, np.ndarray], e, a, b, n: int):
    """docs/migration.md's statement of TF1's update rules, transcribed in NumPy float64 (ours,
    not TF's), for loss sum((a*x+b)**2)."""
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
        elif kind in ("momentum", "nesterov"):
            mu, lr = float(e["momentum"]), float(e["momentum_lr"])
            s["accum"] = mu * s["accum"] + g
            x -= lr * (g + mu * s["accum"]) if kind == "nesterov" else lr * s["accum"]
        elif kind == "rmsprop":
            rho, mu = float(e["rmsprop_decay"]), float(e["rmsprop_momentum"])
            s["ms"] = rho * s["ms"] + (1 - rho) * g * g
            # TF's epsilon is inside the root.
            s["mom"] = mu * s["mom"] + float(e["rmsprop_lr"]) * g / np.sqrt(s["ms"] + EPS)
            x -= s["mom"]
        else:
            s["accum"] += g * g
            x -= float(e["adagrad_lr"]) * g / np.sqrt(s["accum"])
    return x, s


@pytest.mark.parametrize("kind", list(TF_SLOTS))
def test_the_documented_tf_rules_are_tfs_kernels(kind: str) -> None:
    """The rules docs/migration.md states for TF1's optimizers (transcribed above) give what TF's
    kernels gave (``fixtures/tf_updates``), so the table's "what still differs" is about TF."""
    model = "lstm"
    u = {k[len(model) + 1 :]: v for k, v in UPDATES.items() if k.startswith(f"{model}/")}
    e = _expected(model, "aligned")
    slots = {k: u[f"slot/{v}"] for k, v in TF_SLOTS[kind].items()}
    x, s = _documented_tf_rules(kind, u["x0"], slots, e, u["a"], u["b"], 3)
    np.testing.assert_allclose(x, u[f"{kind}/x3"], rtol=1e-13)
    for slot, value in s.items():
        np.testing.assert_allclose(value, u[f"{kind}/{slot}"], rtol=1e-13)


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


# -- optimizer state that no training leaves (issue 20, item 6) --------------------------------

_KERNEL = "model/cudnn_lstm/opaque_kernel"


def _set(name: str, value: object) -> Callable[[dict[str, np.ndarray]], None]:
    def change(arrays: dict[str, np.ndarray]) -> None:
        arrays[name] = np.asarray(value)

    return change


def _refused_unchanged(prefix: Path, kind: str, match: str) -> None:
    """restore(..., optimizer=) refuses with ``match``; the layer and the optimizer (which has
    state of its own from one step) are as they were."""
    e = _expected("lstm", "classic")
    layer = MODELS["lstm"]()
    opt = _optimizer(kind, list(layer.parameters()), e)
    layer(torch.ones(2, 1, 2))[0].sum().backward()
    opt.step()
    before = layer.opaque_kernel.detach().clone()
    state = {k: v.clone() for k, v in opt.state[layer.opaque_kernel].items()}
    with pytest.raises(checkpoint.CheckpointError, match=match):
        checkpoint.restore(prefix, layer, optimizer=opt)
    assert torch.equal(layer.opaque_kernel.detach(), before)
    after = opt.state[layer.opaque_kernel]
    assert after.keys() == state.keys()
    assert all(torch.equal(after[k], v) for k, v in state.items())


@pytest.mark.parametrize("which", ["beta1_power", "beta2_power"])
@pytest.mark.parametrize(
    ("value", "shown"),
    [(0.0, "0.0"), (1.0, "1.0"), (-0.5, "-0.5"), (1.5, "1.5"), (np.nan, "nan"), (np.inf, "inf")],
)
def test_beta_power_outside_0_1_refused(tmp_path: Path, which: str, value: float, shown: str):
    prefix = _rewrite(tmp_path, "lstm", "classic", _set(which, np.float32(value)))
    _refused_unchanged(
        prefix, "adam", rf"'{which}' is {shown}, expected a finite value in \(0, 1\)"
    )


@pytest.mark.parametrize(
    ("value", "shown"),
    [(np.full(2, 0.5, np.float32), "float32 \\[2\\]"), (np.int64(0), "int64 \\[\\]")],
)
def test_beta_power_not_a_float_scalar_refused(tmp_path: Path, value: object, shown: str):
    prefix = _rewrite(tmp_path, "lstm", "classic", _set("beta1_power", value))
    _refused_unchanged(prefix, "adam", rf"'beta1_power' is {shown}, expected a float scalar")


@pytest.mark.parametrize("kind", ["rmsprop", "adagrad"])
@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (np.float32(np.nan), "nan"),
        (np.float64(np.inf), "inf"),
        (np.int64(-1), "-1"),
        (np.float32(2.5), "2.5"),
    ],
)
def test_global_step_not_a_step_count_refused(tmp_path: Path, kind: str, value: object, shown):
    prefix = _rewrite(tmp_path, "lstm", "classic", _set("global_step", value))
    _refused_unchanged(
        prefix, kind, rf"'global_step' is {shown}, expected a finite non-negative integer"
    )


@pytest.mark.parametrize("kind", ["rmsprop", "adagrad"])
def test_global_step_not_a_scalar_refused(tmp_path: Path, kind: str) -> None:
    prefix = _rewrite(tmp_path, "lstm", "classic", _set("global_step", np.zeros(2, np.int64)))
    _refused_unchanged(prefix, kind, r"'global_step' is int64 \[2\], expected an integer scalar")


@pytest.mark.parametrize("kind", ["rmsprop", "adagrad"])
@pytest.mark.parametrize("value", [np.int64(41), np.float32(41.0)])
def test_global_step_gives_the_step(tmp_path: Path, kind: str, value: object) -> None:
    prefix = _rewrite(tmp_path, "lstm", "classic", _set("global_step", value))
    layer = MODELS["lstm"]()
    opt = _optimizer(kind, list(layer.parameters()), _expected("lstm", "classic"))
    checkpoint.restore(prefix, layer, optimizer=opt)
    assert opt.state[layer.opaque_kernel]["step"].item() == 41


def _poke(slot: str, value: float, at: str = "w0") -> Callable[[dict[str, np.ndarray]], None]:
    """Set ``slot``'s value at the foreign place of the first element of canonical ``at``."""

    def change(arrays: dict[str, np.ndarray]) -> None:
        e = _expected("lstm", "classic")
        where = int(np.flatnonzero(arrays[_KERNEL] == e[at].reshape(-1)[0])[0])
        arrays[slot] = arrays[slot].copy()
        arrays[slot][where] = value

    return change


SECOND_MOMENTS = [("adam", "Adam_1"), ("rmsprop", "RMSProp"), ("adagrad", "Adagrad")]


@pytest.mark.parametrize(("kind", "slot"), SECOND_MOMENTS)
@pytest.mark.parametrize(
    ("value", "what"),
    [
        (-0.25, r"1 negative value\(s\) \(first: -0.25\)"),
        (np.nan, r"1 non-finite"),
        (np.inf, r"1 non-fin"),
    ],
)
def test_bad_second_moment_slot_refused(tmp_path: Path, kind: str, slot: str, value, what):
    name = f"{_KERNEL}/{slot}"
    prefix = _rewrite(tmp_path, "lstm", "classic", _poke(name, value))
    _refused_unchanged(prefix, kind, rf"optimizer slot '{name}' holds {what}")


@pytest.mark.parametrize(("kind", "slot"), [("adam", "Adam"), ("momentum", "Momentum")])
def test_non_finite_first_moment_refused(tmp_path: Path, kind: str, slot: str) -> None:
    name = f"{_KERNEL}/{slot}"
    prefix = _rewrite(tmp_path, "lstm", "classic", _poke(name, np.nan))
    _refused_unchanged(prefix, kind, rf"optimizer slot '{name}' holds 1 non-finite value")


@pytest.mark.parametrize(("kind", "slot"), [("adam", "Adam"), ("momentum", "Momentum")])
def test_first_moment_may_be_negative(tmp_path: Path, kind: str, slot: str) -> None:
    prefix = _rewrite(tmp_path, "lstm", "classic", _poke(f"{_KERNEL}/{slot}", -0.75))
    layer = MODELS["lstm"]()
    opt = _optimizer(kind, list(layer.parameters()), _expected("lstm", "classic"))
    checkpoint.restore(prefix, layer, optimizer=opt)
    state = opt.state[layer.opaque_kernel]
    assert state["exp_avg" if kind == "adam" else "momentum_buffer"][0].item() == -0.75


def test_garbage_in_a_slots_padding_is_not_looked_at(tmp_path: Path) -> None:
    """The aligned layout's padding holds no parameter: NaN or negative there is no problem."""
    e = _expected("lstm", "aligned")
    spec = MODELS["lstm"]().spec
    n = len(layout_of(spec).weights)
    weights = [e[f"w{k}"] for k in range(n)]
    biases = [e[f"b{k}"] for k in range(len(layout_of(spec).biases))]
    buffer = tf1_bundle.read_bundle(str(_prefix("lstm", "aligned")), [_KERNEL])[_KERNEL]
    found = discover(spec, buffer, weights, biases, {})
    padding = np.setdiff1d(np.arange(buffer.size), found.gather)
    assert padding.size > 1

    def change(arrays: dict[str, np.ndarray]) -> None:
        for slot in ("Adam", "Adam_1"):
            arrays[f"{_KERNEL}/{slot}"] = arrays[f"{_KERNEL}/{slot}"].copy()
            arrays[f"{_KERNEL}/{slot}"][padding[0::2]] = np.nan
            arrays[f"{_KERNEL}/{slot}"][padding[1::2]] = -1.0

    prefix = _rewrite(tmp_path, "lstm", "aligned", change)
    layer = MODELS["lstm"]()
    opt = _optimizer("adam", list(layer.parameters()), e)
    checkpoint.restore(prefix, layer, optimizer=opt)
    assert torch.equal(
        opt.state[layer.opaque_kernel]["exp_avg_sq"], torch.from_numpy(e["slot_adam_v"])
    )


# -- discovery in bounded time (issue 20, item 7) ----------------------------------------------


def _degenerate(kind: str, shape: tuple[int, ...]) -> np.ndarray:
    if kind == "zero":  # as right after a zero initialisation
        return np.zeros(shape, np.float32)
    return np.resize(np.array([0.5, -0.25, 0.125], np.float32), shape)  # a short period


def _degenerate_checkpoint(tmp_path: Path, layer: _CudnnRNN, kind: str) -> np.ndarray:
    """A TF1 training checkpoint of ``layer`` (its canonical tensors and its opaque kernel, in
    our layout) whose matrices are all ``kind`` (or random: ``"random"``); its biases random.
    Returns the buffer."""
    layout = layout_of(layer.spec)
    rng = np.random.default_rng(0)
    weights = [
        rng.standard_normal(p.shape).astype(np.float32)
        if kind == "random"
        else _degenerate(kind, p.shape)
        for p in layout.weights
    ]
    biases = [rng.standard_normal(p.shape).astype(np.float32) for p in layout.biases]
    flat = layout.pack(weights, biases)
    with torch.no_grad():
        layer.opaque_kernel.copy_(torch.from_numpy(flat))
    prefix = str(tmp_path / "degenerate.ckpt")
    checkpoint.save(prefix, layer, format="tf")
    arrays = tf1_bundle.read_bundle(prefix)
    arrays[f"{layer.saveable.scope}/{layer.name}/opaque_kernel".lstrip("/")] = flat
    tf1_bundle.write_bundle(prefix, arrays)
    return flat


DEGENERATE = {  # the cases: 13 s, about 400 s and far more before (H^4)
    "lstm_1x128": lambda: CudnnLSTM(1, 128, input_size=128, scope="m"),
    "lstm_1x256": lambda: CudnnLSTM(1, 256, input_size=256, scope="m"),
    # 1.47M parameters: an 11.8 MB checkpoint, the opaque kernel and the canonical tensors
    "lstm_2x192_bi": lambda: CudnnLSTM(
        2, 192, input_size=192, direction="bidirectional", scope="m"
    ),
}


def _restore_cpu_seconds(tmp_path: Path, model: str, kind: str) -> float:
    """The CPU time of restoring a checkpoint of ``model`` whose matrices are ``kind`` (the
    better of two), after checking what it restored."""
    flat = _degenerate_checkpoint(tmp_path, DEGENERATE[model](), kind)

    def restore() -> _CudnnRNN:
        layer = DEGENERATE[model]()
        checkpoint.restore(tmp_path / "degenerate.ckpt", layer)
        return layer

    cpu, layer = cpu_seconds(restore, 2)
    assert torch.equal(layer.opaque_kernel.detach(), torch.from_numpy(flat))
    return cpu


@pytest.fixture(scope="module")
def random_restore(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], float]:
    """The baseline: the CPU time of restoring a model's checkpoint whose matrices are random
    (measured once per model)."""
    measured: dict[str, float] = {}

    def baseline(model: str) -> float:
        if model not in measured:
            folder = tmp_path_factory.mktemp(model)
            measured[model] = _restore_cpu_seconds(folder, model, "random")
        return measured[model]

    return baseline


@pytest.mark.parametrize("kind", ["zero", "repetitive"])
@pytest.mark.parametrize("model", list(DEGENERATE))
def test_degenerate_matrices_restore_about_as_fast_as_random_ones(
    tmp_path: Path, model: str, kind: str, random_restore: Callable[[str], float]
) -> None:
    """As a ratio of CPU times measured in this process (the machine's speed and other
    processes' load cancel): about 1x measured; 13 s, about 400 s and far more against well
    under a second before (H^4)."""
    cpu = _restore_cpu_seconds(tmp_path, model, kind)
    assert cpu < 10 * random_restore(model), (cpu, random_restore(model))


@pytest.mark.parametrize("kind", ["zero", "repetitive"])
def test_discovery_work_is_of_the_order_of_the_buffer(kind: str) -> None:
    spec = RNNSpec("lstm", 2, 48, 20, direction="bidirectional")
    layout = layout_of(spec)
    weights = [_degenerate(kind, p.shape) for p in layout.weights]
    rng = np.random.default_rng(1)
    biases = [rng.standard_normal(p.shape).astype(np.float32) for p in layout.biases]
    flat = layout.pack(weights, biases)
    found = discover(spec, flat, weights, biases, {})
    assert np.array_equal(found.to_ours(flat), flat)
    assert 0 < found.work <= 16 * flat.size, found.work


def test_discovery_past_its_work_budget_is_refused(tmp_path: Path, monkeypatch) -> None:
    spec = RNNSpec("rnn_tanh", 1, 16, 16)
    layout = layout_of(spec)
    weights = [np.zeros(p.shape, np.float32) for p in layout.weights]
    biases = [np.ones(p.shape, np.float32) for p in layout.biases]
    flat = layout.pack(weights, biases)
    with pytest.raises(
        LayoutNotFound,
        match=r"the layout could not be determined within the work budget \(100 elements hashed "
        r"or compared, for a buffer of 544 values\)",
    ):
        discover(spec, flat, weights, biases, {}, budget=100)
    # Through restore: a CheckpointError that names the way out.
    layer = CudnnRNNTanh(1, 16, input_size=16, scope="m")
    _degenerate_checkpoint(tmp_path, layer, "zero")
    monkeypatch.setattr(cudnn_layout, "WORK_PER_ELEMENT", 0)
    monkeypatch.setattr(cudnn_layout, "WORK_FLOOR", 10)
    before = layer.opaque_kernel.detach().clone()
    with pytest.raises(
        checkpoint.CheckpointError, match=r"within the work budget .*opaque_name=False"
    ):
        checkpoint.restore(tmp_path / "degenerate.ckpt", layer)
    assert torch.equal(layer.opaque_kernel.detach(), before)


def test_windows_whose_keys_collide_are_told_apart_by_value() -> None:
    """A Thue-Morse run and its complement have equal keys whatever the hash's salt and base
    (their polynomial difference vanishes modulo 2**64 from length 2**11): the key only proposes
    a place, the values decide."""
    spec = RNNSpec("rnn_tanh", 1, 32, 64)
    layout = layout_of(spec)
    thue_morse = np.array([bin(i).count("1") % 2 for i in range(2048)])
    w = np.where(thue_morse == 0, 0.5, -0.5).astype(np.float32).reshape(32, 64)
    r = np.random.default_rng(3).standard_normal((32, 32)).astype(np.float32)
    biases = [np.full(32, k + 1.0, np.float32) for k in range(2)]
    decoy = -w.reshape(-1)  # every element differs
    work = cudnn_layout._Work(1 << 30, 4096)
    with np.errstate(over="ignore"):
        (proposed,) = cudnn_layout._candidates(
            np.concatenate([decoy, w.reshape(-1)]).view(np.uint32),
            2048,
            [w.reshape(-1).view(np.uint32)],
            work,
        )
    assert 0 in proposed and 2048 in proposed  # the decoy's key is the matrix's
    packed = layout.pack([w, r], biases)
    found = discover(spec, np.concatenate([packed, decoy]), [w, r], biases, {})
    assert found.offsets[0] == 0 and found.padding == 2048
    with pytest.raises(LayoutNotFound, match=r"1 of 2 matrices are nowhere in the buffer: layer 0"):
        discover(spec, np.concatenate([decoy, packed[2048:]]), [w, r], biases, {})


# -- an opaque kernel picked by size alone that does not fit (issue 22) --------------------------


def _foreign_kernel(tmp_path: Path) -> Path:
    """The gru_bi file with its kernel moved to another path and its first matrix corrupted:
    a kernel of the right size that nothing names this layer's, and that does not fit."""
    e = _expected("gru_bi", "classic")

    def move(arrays: dict[str, np.ndarray]) -> None:
        buf = arrays.pop("bigru/opaque_kernel").copy()
        buf[np.flatnonzero(buf == e["w0"].reshape(-1)[0])[0]] += 1.0
        arrays["some_other_model/opaque_kernel"] = buf

    return _rewrite(tmp_path, "gru_bi", "classic", move)


def test_a_kernel_picked_by_size_that_does_not_fit_is_skipped_with_a_warning(
    tmp_path: Path,
) -> None:
    prefix = _foreign_kernel(tmp_path)
    layer = MODELS["gru_bi"]()
    with pytest.warns(tf1_opaque.OpaqueKernelSkipped, match=r"skipped 'some_other_model/opaque"):
        checkpoint.restore(prefix, layer)
    canonical = MODELS["gru_bi"]()
    checkpoint.restore(prefix, canonical, opaque_name=False)
    assert torch.equal(layer.opaque_kernel.detach(), canonical.opaque_kernel.detach())
    # Named, it must fit; and the optimizer's slots need it, so it refuses then too.
    with pytest.raises(checkpoint.CheckpointError, match="no cuDNN layout"):
        checkpoint.restore(prefix, MODELS["gru_bi"](), opaque_name="some_other_model/opaque_kernel")
    other = MODELS["gru_bi"]()
    with pytest.raises(checkpoint.CheckpointError, match="nothing was restored"):
        checkpoint.restore(prefix, other, optimizer=torch.optim.Adam(other.parameters()))


def test_a_restore_writes_each_buffer_once() -> None:
    """The final buffer (both biases of every gate from the opaque kernel) is computed first and
    written once: the parameter's version counter moves by one."""
    layer = MODELS["lstm"]()
    before = layer.opaque_kernel._version
    checkpoint.restore(_prefix("lstm", "classic"), layer)
    assert layer.opaque_kernel._version == before + 1
    want = torch.from_numpy(_expected("lstm", "classic")["ours"])
    assert torch.equal(layer.opaque_kernel.detach(), want)


def test_a_strict_restore_expects_the_opaque_kernel_and_slots_it_uses() -> None:
    """strict=True refuses what the restore does not use, and only that: the opaque kernel it
    takes every value from, and with Adam that kernel's Adam slots and beta powers, are
    expected (they were once refused as "unexpected" while being used)."""
    prefix = str(HERE / "tf1_opaque" / "lstm_aligned.ckpt")
    unused = ["Adagrad", "Momentum", "RMSProp", "RMSProp_1"]
    for optimizer in (False, True):
        layer = CudnnLSTM(2, 3, input_size=2, scope="model")
        adam = torch.optim.Adam(layer.parameters(), lr=0.01) if optimizer else None
        with pytest.raises(checkpoint.CheckpointError) as info:
            checkpoint.restore(prefix, layer, strict=True, optimizer=adam)
        named = sorted(
            p.split("'")[1] for p in info.value.problems if p.startswith("unexpected tensor")
        )
        kernel = "model/cudnn_lstm/opaque_kernel"
        extra = [] if optimizer else ["beta1_power", "beta2_power"]
        slots = unused if optimizer else ["Adam", "Adam_1", *unused]
        assert named == sorted(extra + [f"{kernel}/{s}" for s in slots]), named
