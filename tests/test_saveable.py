"""TF canonical converters and saveables: names, exact transforms, round trips, in-place restore.

The expected TF tensors are built here with NumPy straight from the spec's transform table
(cuDNN weights per pseudo-layer: LSTM W_i W_f W_c W_o R_i R_f R_c R_o [W_proj], GRU W_r W_u W_h
R_r R_u R_h, RNN W R; biases in the same order), never with the module's own helpers.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import numpy as np
import pytest
import torch

from cudnn_rnn import ops
from cudnn_rnn.checkpointable import Checkpointable
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.saveable import (
    CudnnGRUSaveable,
    CudnnLSTMSaveable,
    CudnnOpaqueParamsSaveable,
    CudnnParamsFormatConverter,
    CudnnParamsFormatConverterGRU,
    CudnnParamsFormatConverterLSTM,
    CudnnParamsFormatConverterRelu,
    CudnnParamsFormatConverterTanh,
    CudnnRNNReluSaveable,
    CudnnRNNTanhSaveable,
)
from tests.support.helpers import make_op, random_canonical

CONVERTERS: dict[str, type[CudnnParamsFormatConverter]] = {
    "lstm": CudnnParamsFormatConverterLSTM,
    "gru": CudnnParamsFormatConverterGRU,
    "rnn_tanh": CudnnParamsFormatConverterTanh,
    "rnn_relu": CudnnParamsFormatConverterRelu,
}
SAVEABLES: dict[str, type[CudnnOpaqueParamsSaveable]] = {
    "lstm": CudnnLSTMSaveable,
    "gru": CudnnGRUSaveable,
    "rnn_tanh": CudnnRNNTanhSaveable,
    "rnn_relu": CudnnRNNReluSaveable,
}
GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


def _specs() -> list[RNNSpec]:
    """Every mode x layers x direction x input mode (x projection for LSTM), tiny sizes."""
    out = []
    for mode, layers, direction, input_mode in itertools.product(
        GATES, (1, 2, 3), ("unidirectional", "bidirectional"), ("linear_input", "skip_input")
    ):
        units = 3
        in_size = units if input_mode == "skip_input" else 2
        projs: tuple[int | None, ...] = (None, 2) if mode == "lstm" else (None,)
        for proj in projs:
            out.append(RNNSpec(mode, layers, units, in_size, input_mode, direction, proj))
    out.append(RNNSpec("gru", 1, 1, 1))  # sizes of 1
    out.append(RNNSpec("lstm", 1, 1, 1, num_proj=1))
    return out


SPECS = _specs()


def _id(spec: RNNSpec) -> str:
    proj = f"-p{spec.num_proj}" if spec.num_proj else ""
    return f"{spec.mode}-L{spec.num_layers}-{spec.direction[:3]}-{spec.input_mode[:4]}{proj}"


def converter(spec: RNNSpec, **kw: Any) -> CudnnParamsFormatConverter:
    return CONVERTERS[spec.mode](
        spec.num_layers,
        spec.num_units,
        spec.input_size,
        spec.num_proj,
        input_mode=spec.input_mode,
        direction=spec.direction,
        **kw,
    )


def saveable(spec: RNNSpec, opaque: torch.Tensor, **kw: Any) -> CudnnOpaqueParamsSaveable:
    if spec.num_proj is not None:
        kw["num_proj"] = spec.num_proj
    return SAVEABLES[spec.mode](
        opaque,
        spec.num_layers,
        spec.num_units,
        spec.input_size,
        input_mode=spec.input_mode,
        direction=spec.direction,
        **kw,
    )


def random_opaque(spec: RNNSpec, seed: int = 0) -> torch.Tensor:
    """A float64 opaque buffer of canonical U(-0.5, 0.5) tensors (identity where not stored)."""
    weights, biases = random_canonical(spec, np.random.default_rng(seed))
    return make_op(spec).canonical_to_params(weights, biases)  # type: ignore[no-any-return]


def expected_tf(spec: RNNSpec, opaque: torch.Tensor) -> tuple[list[Any], list[Any], list[Any]]:
    """TF (weights, biases, projections) written from the spec's table, in NumPy."""
    weights, biases = make_op(spec).params_to_canonical(opaque)
    weights = [w.numpy() for w in weights]
    biases = [b.numpy() for b in biases]
    g = GATES[spec.mode]
    nw = 2 * g + (spec.num_proj is not None)
    tf_w, tf_b, tf_p = [], [], []
    for k in range(spec.num_layers * spec.num_dirs):
        w, b = weights[k * nw : (k + 1) * nw], biases[k * 2 * g : (k + 1) * 2 * g]
        if spec.mode == "lstm":
            i, f, c, o = 0, 1, 2, 3  # cuDNN order; TF's kernel columns are i, c, f, o
            tf_w.append(np.vstack([np.hstack([w[j], w[4 + j]]) for j in (i, c, f, o)]).T)
            tf_b.append(np.concatenate([b[j] + b[4 + j] for j in (i, c, f, o)]))
            if spec.num_proj is not None:
                tf_p.append(w[8].T)
        elif spec.mode == "gru":
            tf_w += [np.vstack([np.hstack([w[0], w[3]]), np.hstack([w[1], w[4]])]).T]
            tf_w += [w[2].T, w[5].T]
            tf_b += [np.concatenate([b[0] + b[3], b[1] + b[4]]), b[2], b[5]]
        else:
            tf_w.append(np.hstack([w[0], w[1]]).T)
            tf_b.append(b[0] + b[1])
    return tf_w, tf_b, tf_p


def as_lists(result: tuple[list[torch.Tensor], ...]) -> tuple[list[Any], list[Any], list[Any]]:
    w, b, *p = result
    return w, b, (p[0] if p else [])


def assert_same(got: list[torch.Tensor], want: list[Any]) -> None:
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert isinstance(g, torch.Tensor)
        np.testing.assert_array_equal(g.detach().numpy(), np.asarray(w), err_msg=f"#{i}")


# -- names and shapes ---------------------------------------------------------------------------


def test_names_bidirectional_gru_scope() -> None:
    s = CudnnGRUSaveable(
        torch.zeros(ops.CudnnGRU(2, 2, 3, direction="bidirectional").params_size()),
        2,
        2,
        3,
        direction="bidirectional",
        scope="m1",
    )
    p = "m1/stack_bidirectional_rnn/cell_%d/bidirectional_rnn/%s/cudnn_compatible_gru_cell/"
    want = []
    for kind in ("kernel", "bias"):
        for layer in (0, 1):
            in_w = 3 if layer == 0 else 4
            shapes = [(in_w + 2, 4), (in_w, 2), (2, 2)] if kind == "kernel" else [(4,), (2,), (2,)]
            for d in ("fw", "bw"):
                names = ["gates/", "candidate/input_projection/", "candidate/hidden_projection/"]
                want += [(p % (layer, d) + n + kind, sh) for n, sh in zip(names, shapes)]
    assert [(x.name, tuple(x.tensor.shape)) for x in s.specs] == want
    assert want[:4] == [
        ("m1/stack_bidirectional_rnn/cell_0/bidirectional_rnn/fw/"
         "cudnn_compatible_gru_cell/gates/kernel", (5, 4)),
        ("m1/stack_bidirectional_rnn/cell_0/bidirectional_rnn/fw/"
         "cudnn_compatible_gru_cell/candidate/input_projection/kernel", (3, 2)),
        ("m1/stack_bidirectional_rnn/cell_0/bidirectional_rnn/fw/"
         "cudnn_compatible_gru_cell/candidate/hidden_projection/kernel", (2, 2)),
        ("m1/stack_bidirectional_rnn/cell_0/bidirectional_rnn/bw/"
         "cudnn_compatible_gru_cell/gates/kernel", (5, 4)),
    ]  # fmt: skip
    assert want[12] == (
        "m1/stack_bidirectional_rnn/cell_0/bidirectional_rnn/fw/cudnn_compatible_gru_cell/"
        "gates/bias",
        (4,),
    )
    assert len(want) == 24 and s._tf_canonical_names() == [n for n, _ in want]
    assert all(x.slice_spec == "" for x in s.specs)


def test_names_unidirectional_lstm_no_scope() -> None:
    s = CudnnLSTMSaveable(torch.zeros(104), 2, 2, 3)
    assert [(x.name, tuple(x.tensor.shape)) for x in s.specs] == [
        ("rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/kernel", (5, 8)),
        ("rnn/multi_rnn_cell/cell_1/cudnn_compatible_lstm_cell/kernel", (4, 8)),
        ("rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/bias", (8,)),
        ("rnn/multi_rnn_cell/cell_1/cudnn_compatible_lstm_cell/bias", (8,)),
    ]
    assert s.scope is None and s.name == "cudnn_rnn_saveable"


@pytest.mark.parametrize("cls", [CudnnRNNTanhSaveable, CudnnRNNReluSaveable])
def test_names_basic_rnn(cls: type[CudnnOpaqueParamsSaveable]) -> None:
    s = cls(torch.zeros(20), 1, 2, 1, direction="bidirectional", scope="a/b/")
    assert s.checkpoint_shapes() == {
        "a/b/stack_bidirectional_rnn/cell_0/bidirectional_rnn/fw/basic_rnn_cell/kernel": (3, 2),
        "a/b/stack_bidirectional_rnn/cell_0/bidirectional_rnn/bw/basic_rnn_cell/kernel": (3, 2),
        "a/b/stack_bidirectional_rnn/cell_0/bidirectional_rnn/fw/basic_rnn_cell/bias": (2,),
        "a/b/stack_bidirectional_rnn/cell_0/bidirectional_rnn/bw/basic_rnn_cell/bias": (2,),
    }
    assert list(s.checkpoint_shapes()) == s._tf_canonical_names()
    assert s.scope == "a/b"


def test_names_lstm_projection() -> None:
    n = ops.CudnnLSTM(2, 4, 3, direction="bidirectional", num_proj=2).params_size()
    s = CudnnLSTMSaveable(torch.zeros(n), 2, 4, 3, direction="bidirectional", num_proj=2)
    p = "stack_bidirectional_rnn/cell_{}/bidirectional_rnn/{}/cudnn_compatible_lstm_cell/"
    assert [(x.name, tuple(x.tensor.shape)) for x in s.specs] == [
        (p.format(0, "fw") + "kernel", (5, 16)),
        (p.format(0, "fw") + "projection/kernel", (4, 2)),
        (p.format(0, "bw") + "kernel", (5, 16)),
        (p.format(0, "bw") + "projection/kernel", (4, 2)),
        (p.format(1, "fw") + "kernel", (6, 16)),
        (p.format(1, "fw") + "projection/kernel", (4, 2)),
        (p.format(1, "bw") + "kernel", (6, 16)),
        (p.format(1, "bw") + "projection/kernel", (4, 2)),
        (p.format(0, "fw") + "bias", (16,)),
        (p.format(0, "bw") + "bias", (16,)),
        (p.format(1, "fw") + "bias", (16,)),
        (p.format(1, "bw") + "bias", (16,)),
    ]


@pytest.mark.parametrize("scope", [None, "", "/"])
def test_empty_scope_means_no_prefix(scope: str | None) -> None:
    s = CudnnRNNTanhSaveable(torch.zeros(4), 1, 1, 1, scope=scope)
    assert s._tf_canonical_names()[0] == "rnn/multi_rnn_cell/cell_0/basic_rnn_cell/kernel"
    assert s.scope is None and s.checkpoint_spec()["scope"] is None


# -- exact transforms ----------------------------------------------------------------------------


@pytest.mark.parametrize("spec", SPECS, ids=_id)
def test_opaque_to_tf_matches_numpy(spec: RNNSpec) -> None:
    opaque = random_opaque(spec)
    got = as_lists(converter(spec).opaque_to_tf_canonical(opaque))
    want = expected_tf(spec, opaque)
    for g, w in zip(got, want):
        assert_same(g, w)
    # NumPy input gives the same tensors.
    again = as_lists(converter(spec).opaque_to_tf_canonical(opaque.numpy()))
    for g, a in zip(got, again):
        assert_same(a, [t.numpy() for t in g])


def test_skip_input_kernels_hold_identity_blocks() -> None:
    spec = RNNSpec("lstm", 1, 2, 2, "skip_input")
    kernel = converter(spec).opaque_to_tf_canonical(random_opaque(spec))[0][0]
    for block in kernel[:2].split(2, dim=1):  # input rows of the four gate column blocks
        assert torch.equal(block, torch.eye(2, dtype=torch.float64))


# -- round trips ---------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", SPECS, ids=_id)
def test_tf_to_opaque_to_tf_is_exact(spec: RNNSpec) -> None:
    conv = converter(spec)
    w, b, p = as_lists(conv.opaque_to_tf_canonical(random_opaque(spec)))
    opaque = conv.tf_canonical_to_opaque(w + b, p if spec.num_proj else None)
    assert opaque.dtype == torch.float64 and opaque.shape == (make_op(spec).params_size(),)
    w2, b2, p2 = as_lists(conv.opaque_to_tf_canonical(opaque))
    assert_same(w2 + b2 + p2, [t.numpy() for t in w + b + p])


@pytest.mark.parametrize("mode", list(GATES))
@pytest.mark.parametrize("direction", ["unidirectional", "bidirectional"])
def test_fresh_random_tf_tensors_round_trip(mode: str, direction: str) -> None:
    spec = RNNSpec(mode, 2, 3, 2, direction=direction, num_proj=2 if mode == "lstm" else None)
    conv = converter(spec)
    rng = np.random.default_rng(1)
    shapes = [tuple(t.shape) for t in itertools.chain(*as_lists(conv.opaque_to_tf_canonical(
        random_opaque(spec))))]  # fmt: skip
    fresh = [rng.standard_normal(s) for s in shapes]
    nproj = len(fresh) - (spec.num_layers * spec.num_dirs if spec.num_proj else 0)
    tf, proj = fresh[:nproj], fresh[nproj:]
    opaque = conv.tf_canonical_to_opaque(tf, proj or None)  # NumPy in, torch out
    w, b, p = as_lists(conv.opaque_to_tf_canonical(opaque))
    assert_same(w + b + p, tf + proj)


@pytest.mark.parametrize("spec", SPECS, ids=_id)
def test_cudnn_canonical_save_restore(spec: RNNSpec) -> None:
    rng = np.random.default_rng(2)
    weights, biases = random_canonical(spec, rng)
    op = make_op(spec)
    param = torch.nn.Parameter(op.canonical_to_params(weights, biases))
    s = saveable(spec, param)
    saved = [x.tensor for x in s.specs]
    with torch.no_grad():
        param.zero_()
    s.restore(saved)
    w2, b2 = op.params_to_canonical(param.detach())
    assert_same(w2, weights)
    g = GATES[spec.mode]
    for k in range(spec.num_layers * spec.num_dirs):
        for j in range(g):
            bw_in, bw_rec = biases[k * 2 * g + j], biases[k * 2 * g + g + j]
            got_in, got_rec = b2[k * 2 * g + j].numpy(), b2[k * 2 * g + g + j].numpy()
            if spec.mode == "gru" and j == 2:  # the candidate biases are saved apart: exact
                np.testing.assert_array_equal(got_in, bw_in)
                np.testing.assert_array_equal(got_rec, bw_rec)
            else:
                np.testing.assert_array_equal(got_in, (bw_in + bw_rec) / 2)
                np.testing.assert_array_equal(got_rec, (bw_in + bw_rec) / 2)


def test_restore_writes_in_place_and_optimizer_keeps_working() -> None:
    spec = RNNSpec("lstm", 2, 3, 2, direction="bidirectional")
    param = torch.nn.Parameter(random_opaque(spec))
    ptr = param.data_ptr()
    opt = torch.optim.SGD([param], lr=0.1)
    s = saveable(spec, param)
    tensors = [torch.ones_like(x.tensor) for x in s.specs]
    s.restore(tensors)
    assert s.opaque_params is param and param.data_ptr() == ptr and param.requires_grad
    restored = param.detach().clone()
    assert all(torch.equal(a, x.tensor) for a, x in zip(tensors, s.specs))
    opt.zero_grad()
    (param**2).sum().backward()
    opt.step()
    torch.testing.assert_close(param.detach(), restored - 0.1 * 2 * restored, rtol=0, atol=0)


def test_specs_are_detached_snapshots() -> None:
    spec = RNNSpec("gru", 1, 2, 3)
    param = torch.nn.Parameter(random_opaque(spec))
    s = saveable(spec, param)
    specs = s.specs
    assert not any(x.tensor.requires_grad for x in specs)
    before = [x.tensor.clone() for x in specs]
    with torch.no_grad():
        param.add_(1.0)
    assert all(torch.equal(a, x.tensor) for a, x in zip(before, specs))


@pytest.mark.parametrize("mode", list(GATES))
def test_skip_input_saves_identity_blocks_and_restores(mode: str) -> None:
    spec = RNNSpec(mode, 2, 2, 2, "skip_input", "bidirectional")
    param = torch.nn.Parameter(random_opaque(spec))
    original = param.detach().clone()
    s = saveable(spec, param)
    saved = s.checkpoint_entries()
    cell = "stack_bidirectional_rnn/cell_0/bidirectional_rnn/bw/" + s._rnn_cell_name
    name = f"{cell}/candidate/input_projection/kernel" if mode == "gru" else f"{cell}/kernel"
    assert torch.equal(saved[name][:2, :2], torch.eye(2, dtype=torch.float64))
    with torch.no_grad():
        param.zero_()
    s.checkpoint_load(saved)
    # Weights are exact and the bias sums are kept, so the buffer matches up to the bias split.
    op = make_op(spec)
    assert_same(op.params_to_canonical(param.detach())[0],
                [w.numpy() for w in op.params_to_canonical(original)[0]])  # fmt: skip


# -- numerical invariance ------------------------------------------------------------------------


@pytest.mark.parametrize("spec", SPECS, ids=_id)
def test_outputs_unchanged_by_save_restore(spec: RNNSpec) -> None:
    op = make_op(spec)
    param = torch.nn.Parameter(random_opaque(spec, seed=3))
    original = param.detach().clone()
    s = saveable(spec, param)
    s.restore([x.tensor for x in s.specs])
    assert not torch.equal(param.detach(), original)  # the bias split did change
    rng = np.random.default_rng(4)
    x = torch.as_tensor(rng.uniform(-1, 1, (4, 2, spec.input_size)))
    h = torch.as_tensor(rng.uniform(-1, 1, (spec.num_states, 2, spec.output_units)))
    args = [x, h]
    if spec.mode == "lstm":
        args.append(torch.as_tensor(rng.uniform(-1, 1, (spec.num_states, 2, spec.num_units))))
    want = op(*args, original, is_training=False)
    got = op(*args, param.detach(), is_training=False)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-12)


# -- dtypes --------------------------------------------------------------------------------------


def test_converter_dtypes() -> None:
    spec = RNNSpec("gru", 1, 2, 3)
    opaque = random_opaque(spec)
    w, b, _ = as_lists(converter(spec).opaque_to_tf_canonical(opaque.float()))
    assert {t.dtype for t in w + b} == {torch.float32}
    w, b, _ = as_lists(converter(spec, dtype=torch.float32).opaque_to_tf_canonical(opaque))
    assert {t.dtype for t in w + b} == {torch.float32}
    assert converter(spec, dtype="float64").tf_canonical_to_opaque(w + b).dtype == torch.float64
    assert converter(spec).tf_canonical_to_opaque([t.numpy() for t in w + b]).dtype == (
        torch.float32
    )


def test_restore_casts_to_the_parameter_dtype() -> None:
    spec = RNNSpec("rnn_relu", 1, 2, 3)
    param = torch.nn.Parameter(torch.zeros(make_op(spec).params_size()))
    s = saveable(spec, param)
    s.restore([np.full(x.tensor.shape, 0.25) for x in s.specs])  # float64 arrays
    assert param.dtype == torch.float32
    assert torch.equal(param.detach(), torch.tensor([0.25] * 10 + [0.125] * 4))


# -- Checkpointable ------------------------------------------------------------------------------


def test_checkpointable_protocol() -> None:
    spec = RNNSpec("lstm", 1, 3, 2, num_proj=2)
    param = torch.nn.Parameter(random_opaque(spec))
    s = saveable(spec, param, scope="enc", name="enc/opaque_kernel_saveable")
    assert isinstance(s, Checkpointable)
    entries = s.checkpoint_entries()
    assert list(entries) == s._tf_canonical_names()
    assert {k: tuple(v.shape) for k, v in entries.items()} == s.checkpoint_shapes()
    assert list(s.checkpoint_shapes()) == [
        "enc/rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/kernel",
        "enc/rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/projection/kernel",
        "enc/rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/bias",
    ]
    spec_dict = s.checkpoint_spec()
    assert json.loads(json.dumps(spec_dict)) == {
        "kind": "cudnn_saveable",
        "rnn_mode": "lstm",
        "num_layers": 1,
        "num_units": 3,
        "input_size": 2,
        "input_mode": "linear_input",
        "direction": "unidirectional",
        "num_proj": 2,
        "scope": "enc",
    }
    expected = dict(entries)
    with torch.no_grad():
        param.zero_()
    s.checkpoint_load({**expected, "other/tensor": torch.zeros(1)})  # other objects' names
    assert all(torch.equal(s.checkpoint_entries()[k], v) for k, v in expected.items())


def test_properties() -> None:
    param = torch.nn.Parameter(torch.zeros(ops.CudnnGRU(2, 2, 2, "skip_input").params_size()))
    s = CudnnGRUSaveable(param, 2, 2, 2, "skip_input", "unidirectional")
    assert (s.num_layers, s.num_units, s.input_size, s.input_mode, s.direction, s.num_dirs) == (
        2,
        2,
        2,
        "skip_input",
        "unidirectional",
        1,
    )
    assert s.rnn_mode == "gru" and s.num_proj is None and s.opaque_params is param
    assert isinstance(s.format_converter, CudnnParamsFormatConverterGRU)
    assert s.format_converter.spec == s.spec


# -- errors --------------------------------------------------------------------------------------


@pytest.fixture
def lstm_saveable() -> tuple[CudnnOpaqueParamsSaveable, torch.nn.Parameter]:
    spec = RNNSpec("lstm", 2, 2, 3, direction="bidirectional")
    param = torch.nn.Parameter(random_opaque(spec))
    return saveable(spec, param, scope="m"), param


def test_restore_wrong_count_changes_nothing(lstm_saveable: Any) -> None:
    s, param = lstm_saveable
    before = param.detach().clone()
    tensors = [x.tensor for x in s.specs]
    with pytest.raises(
        ValueError,
        match=r"CudnnLSTMSaveable: expected 8 restored tensors \(one per entry of "
        r"specs, in that order\) for lstm \(num_layers=2, num_units=2, input_size=3, "
        r"linear_input, bidirectional\), got 7\.",
    ):
        s.restore(tensors[:-1])
    assert torch.equal(param.detach(), before)


def test_restore_wrong_shapes_lists_all_and_changes_nothing(lstm_saveable: Any) -> None:
    s, param = lstm_saveable
    before = param.detach().clone()
    tensors = [x.tensor + 1 for x in s.specs]
    tensors[0] = torch.zeros(4, 8, dtype=torch.float64)
    tensors[7] = torch.zeros(9, dtype=torch.float64)
    with pytest.raises(
        ValueError,
        match=r"CudnnLSTMSaveable: wrong shape of restored tensors: "
        r"m/stack_bidirectional_rnn/cell_0/bidirectional_rnn/fw/cudnn_compatible_lstm_cell/kernel"
        r" expected \(5, 8\), got \(4, 8\); "
        r"m/stack_bidirectional_rnn/cell_1/bidirectional_rnn/bw/cudnn_compatible_lstm_cell/bias"
        r" expected \(8,\), got \(9,\)\.",
    ):
        s.restore(tensors)
    assert torch.equal(param.detach(), before)


def test_restore_bad_types(lstm_saveable: Any) -> None:
    s, param = lstm_saveable
    before = param.detach().clone()
    tensors: list[Any] = [x.tensor for x in s.specs]
    with pytest.raises(
        TypeError, match=r"CudnnLSTMSaveable: restored_tensors must be a list of tensors or arrays"
    ):
        s.restore(tensors[0])
    tensors[3] = np.zeros(tensors[3].shape, dtype=np.int64)
    with pytest.raises(
        TypeError,
        match=r"CudnnLSTMSaveable: restored_tensors\[3\] \(m/stack_bidirectional_rnn/cell_1/"
        r".*/bw/cudnn_compatible_lstm_cell/kernel\) must be a float16/float32/float64 array, "
        r"got dtype int64\.",
    ):
        s.restore(tensors)
    tensors[3] = [[0.0]]
    with pytest.raises(TypeError, match=r"must be a torch\.Tensor or numpy\.ndarray, got list\."):
        s.restore(tensors)
    assert torch.equal(param.detach(), before)


def test_restore_skip_input_needs_identity_blocks() -> None:
    spec = RNNSpec("rnn_tanh", 1, 2, 2, "skip_input")
    param = torch.nn.Parameter(random_opaque(spec))
    before = param.detach().clone()
    s = saveable(spec, param)
    tensors = [torch.ones_like(x.tensor) for x in s.specs]
    with pytest.raises(
        ValueError,
        match=r"CudnnParamsFormatConverterTanh: the TF canonical tensors do not fit the model: "
        r".*canonical weight #0 \(layer 0 fw input gate h\) must be the identity matrix",
    ):
        s.restore(tensors)
    assert torch.equal(param.detach(), before)


def test_converter_keeps_the_tensors_device_and_refuses_two() -> None:
    # The meta device stands in for a GPU: the rule is about devices, not about CUDA.
    conv = CudnnParamsFormatConverterTanh(1, 2, 3)
    meta = [torch.zeros(5, 2, device="meta"), torch.zeros(2, device="meta")]
    assert conv.tf_canonical_to_opaque(meta).device.type == "meta"
    with pytest.raises(
        ValueError,
        match=r"CudnnParamsFormatConverterTanh: tf_canonicals and weights_proj must be on one "
        r"device, got \['cpu', 'meta'\]\.",
    ):
        conv.tf_canonical_to_opaque([torch.zeros(5, 2), meta[1]])


def test_checkpoint_load_errors(lstm_saveable: Any) -> None:
    s, _ = lstm_saveable
    entries = s.checkpoint_entries()
    del entries[
        "m/stack_bidirectional_rnn/cell_1/bidirectional_rnn/fw/cudnn_compatible_lstm_cell/bias"
    ]
    with pytest.raises(
        ValueError,
        match=r"CudnnLSTMSaveable: missing tensors: m/stack_bidirectional_rnn/cell_1/"
        r"bidirectional_rnn/fw/cudnn_compatible_lstm_cell/bias\.",
    ):
        s.checkpoint_load(entries)
    with pytest.raises(TypeError, match=r"CudnnLSTMSaveable: checkpoint_load needs a mapping"):
        s.checkpoint_load(list(entries.values()))


@pytest.mark.parametrize(
    "opaque,error,message",
    [
        (
            torch.zeros(55),
            ValueError,
            r"CudnnLSTMSaveable: opaque_params must be a 1-D buffer of 56 elements \(the "
            r"params_size of lstm \(num_layers=1, num_units=2, input_size=3, linear_input, "
            r"unidirectional\)\), got shape \(55,\)\.",
        ),
        (torch.zeros(56, 1), ValueError, r"got shape \(56, 1\)\."),
        (
            np.zeros(56),
            TypeError,
            r"CudnnLSTMSaveable: opaque_params must be a 1-D torch\.Tensor or nn\.Parameter of "
            r"56 elements, got ndarray; wrap it with torch\.nn\.Parameter\.",
        ),
        ([0.0] * 56, TypeError, r"got list\."),
        (
            torch.zeros(56, dtype=torch.int32),
            TypeError,
            r"CudnnLSTMSaveable: opaque_params must have a float16, bfloat16, float32 or float64 "
            r"dtype, got torch\.int32\.",
        ),
    ],
)
def test_bad_opaque(opaque: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        CudnnLSTMSaveable(opaque, 1, 2, 3)


def test_bad_saveable_arguments() -> None:
    with pytest.raises(
        TypeError, match=r"CudnnGRUSaveable: scope must be a str or None, got int 3; pass the"
    ):
        CudnnGRUSaveable(torch.zeros(42), 1, 2, 3, scope=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"CudnnGRUSaveable: name must be a str, got NoneType"):
        CudnnGRUSaveable(torch.zeros(42), 1, 2, 3, name=None)  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=r"CudnnGRUSaveable: num_proj is only supported for rnn_mode 'lstm'"
    ):
        CudnnGRUSaveable(torch.zeros(42), 1, 2, 3, num_proj=1)
    with pytest.raises(ValueError, match=r"CudnnRNNTanhSaveable: invalid direction 'both'"):
        CudnnRNNTanhSaveable(torch.zeros(42), 1, 2, 3, direction="both")
    with pytest.raises(
        TypeError,
        match=r"CudnnOpaqueParamsSaveable is abstract; use CudnnLSTMSaveable, CudnnGRUSaveable",
    ):
        CudnnOpaqueParamsSaveable(torch.zeros(42), 1, 2, 3)


def test_converter_errors() -> None:
    conv = CudnnParamsFormatConverterLSTM(1, 2, 3, num_proj=1)
    n = ops.CudnnLSTM(1, 2, 3, num_proj=1).params_size()
    w, b, p = as_lists(conv.opaque_to_tf_canonical(torch.zeros(n)))
    with pytest.raises(
        ValueError,
        match=r"CudnnParamsFormatConverterLSTM: opaque must be a 1-D buffer of 50 elements "
        r"\(the params_size of lstm \(num_layers=1, num_units=2, input_size=3, linear_input, "
        r"unidirectional, num_proj=1\)\), got shape \(3,\)\.",
    ):
        conv.opaque_to_tf_canonical(torch.zeros(3))
    with pytest.raises(
        ValueError,
        match=r"CudnnParamsFormatConverterLSTM: expected 2 TF canonical tensors \(1 weights, "
        r"then 1 biases\) for lstm .*, got 3\.",
    ):
        conv.tf_canonical_to_opaque(w + b + p, p)
    with pytest.raises(
        ValueError,
        match=r"CudnnParamsFormatConverterLSTM: num_proj=1 needs weights_proj, the 1 "
        r"projection kernels \[num_units, num_proj\]; got None\.",
    ):
        conv.tf_canonical_to_opaque(w + b)
    with pytest.raises(
        ValueError, match=r"CudnnParamsFormatConverterLSTM: expected 1 weights_proj \(one per "
    ):
        conv.tf_canonical_to_opaque(w + b, p + p)
    with pytest.raises(
        ValueError,
        match=r"CudnnParamsFormatConverterLSTM: wrong shape of TF canonical tensors: "
        r"tf_canonicals\[0\] \(layer 0 fw kernel\) expected \(4, 8\), got \(5, 8\); "
        r"weights_proj\[0\] \(layer 0 fw projection/kernel\) expected \(2, 1\), got \(1, 2\)\.",
    ):
        conv.tf_canonical_to_opaque([torch.zeros(5, 8), b[0]], [p[0].T])
    with pytest.raises(
        TypeError,
        match=r"CudnnParamsFormatConverterLSTM: tf_canonicals and weights_proj mix dtypes "
        r"\['torch\.float32', 'torch\.float64'\]; convert them to one dtype or pass dtype=",
    ):
        conv.tf_canonical_to_opaque([w[0].double(), b[0]], p)
    with pytest.raises(
        TypeError,
        match=r"CudnnParamsFormatConverterLSTM: tf_canonicals must be a list of tensors or "
        r"arrays, got Tensor\.",
    ):
        conv.tf_canonical_to_opaque(w[0])
    plain = CudnnParamsFormatConverterTanh(1, 2, 3)
    with pytest.raises(
        ValueError,
        match=r"CudnnParamsFormatConverterTanh: weights_proj must be None without num_proj, got "
        r"list; build the converter with num_proj=P\.",
    ):
        plain.tf_canonical_to_opaque([torch.zeros(5, 2), torch.zeros(2)], [])
    with pytest.raises(
        TypeError,
        match=r"CudnnParamsFormatConverterTanh: opaque must have a float16, bfloat16, float32 "
        r"or float64 dtype, got torch\.int64\.",
    ):
        plain.opaque_to_tf_canonical(torch.zeros(14, dtype=torch.int64))
    with pytest.raises(
        TypeError, match=r"CudnnParamsFormatConverterTanh: opaque must be a torch\.Tensor or "
    ):
        plain.opaque_to_tf_canonical([0.0] * 14)  # type: ignore[arg-type]


def test_converter_constructor_errors() -> None:
    with pytest.raises(
        ValueError,
        match=r"CudnnParamsFormatConverterGRU: num_proj is only supported for rnn_mode 'lstm', "
        r"got rnn_mode 'gru' with num_proj=2; pass num_proj=None\.",
    ):
        CudnnParamsFormatConverterGRU(1, 4, 3, 2)
    with pytest.raises(
        ValueError, match=r"CudnnParamsFormatConverterRelu: invalid input_mode 'skip'"
    ):
        CudnnParamsFormatConverterRelu(1, 4, 3, input_mode="skip")
    with pytest.raises(
        ValueError,
        match=r"CudnnParamsFormatConverterTanh: only float16, bfloat16, float32 and float64 "
        r"are supported, provided torch\.int8\.",
    ):
        CudnnParamsFormatConverterTanh(1, 4, 3, dtype=torch.int8)
    with pytest.raises(
        TypeError,
        match=r"CudnnParamsFormatConverter is abstract; use CudnnParamsFormatConverterLSTM",
    ):
        CudnnParamsFormatConverter(1, 4, 3)
