"""TF1 checkpoints of TF's standard cells beyond cuDNN's math (issue 47), read as a spec with a
variant: LSTMCell / LSTMBlockCell / LSTMBlockFusedCell with peepholes, cell_clip, a projection
and proj_clip; GRUCell, GRUBlockCell, GRUBlockCellV2 (the reset gate before the product);
``bidirectional_dynamic_rnn`` over two ``MultiRNNCell`` stacks (separate stacks).

The fixtures (tests/fixtures/tf1_variants/, tests/fixtures/VARIANTS.md) were written by TF
2.21's ``tf.compat.v1`` and by TF 1.15.5's own ``tf.contrib.rnn`` cells
(make_tf1_variant_fixtures.py); each npz holds TF's inputs, lengths, outputs and final states.
What a checkpoint cannot say (``forget_bias``, ``cell_clip``, ``proj_clip``, the activation) is
passed to ``cudnn_rnn.load`` as the maker used it, and the listing says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import cudnn_rnn
from cudnn_rnn.cli import main
from cudnn_rnn.converters.options import OptionError
from cudnn_rnn.core.layout import PEEPHOLE, layout_of
from cudnn_rnn.core.variant import Activation, Variant
from cudnn_rnn.errors import UsageError
from cudnn_rnn.io.tf1 import bundle as tf1_bundle
from cudnn_rnn.io.tf1 import cells
from cudnn_rnn.io.tf1.cells import find_cells, read_cells
from tests.support.paths import FIXTURES

HERE = FIXTURES / "tf1_variants"

#: fixture -> (name, mode, num_layers, direction, the variant the file says (as_dict))
FILES: dict[str, tuple[str, str, int, str, dict[str, Any]]] = {
    "peephole": ("rnn", "lstm", 1, "unidirectional", {"peepholes": True}),
    "peephole_proj": ("rnn", "lstm", 1, "unidirectional", {"peepholes": True}),
    "peephole_clip_proj": ("rnn", "lstm", 1, "unidirectional", {"peepholes": True}),
    "peephole_clip_proj_tight": ("rnn", "lstm", 1, "unidirectional", {"peepholes": True}),
    "multi_gru": ("rnn", "gru", 2, "unidirectional", {"reset_after": False}),
    "bidi_multi_lstm": ("bidirectional_rnn", "lstm", 2, "bidirectional", {"stacks": "separate"}),
    "lstm_block_peephole": ("rnn", "lstm", 1, "unidirectional", {"peepholes": True}),
    "lstm_block_peephole_clip": ("rnn", "lstm", 1, "unidirectional", {"peepholes": True}),
    "lstm_fused_peephole": ("lstm_fused_cell", "lstm", 1, "unidirectional", {"peepholes": True}),
    "gru_block_multi": ("rnn", "gru", 2, "unidirectional", {"reset_after": False}),
    "gru_block_v2": ("rnn", "gru", 1, "unidirectional", {"reset_after": False}),
}
#: The fixtures whose maker clipped (the npz says cell_clip, proj_clip).
CLIPPED = ("peephole_clip_proj", "peephole_clip_proj_tight", "lstm_block_peephole_clip")
#: Float32 producers, our float64 run: the distance allowed (measured: 1.1e-7 at most).
ATOL = 2e-6


def _prefix(fixture: str) -> Path:
    return HERE / f"{fixture}.ckpt"


def _expected(fixture: str) -> Mapping[str, Any]:
    with np.load(HERE / f"{fixture}.npz") as npz:
        return {k: npz[k] for k in npz.files}


def _options(expected: Mapping[str, Any]) -> dict[str, Any]:
    """What the maker built the cells with that the checkpoint does not store."""
    options: dict[str, Any] = {"forget_bias": float(expected["forget_bias"])}
    for key in ("cell_clip", "proj_clip"):
        if key in expected:
            options[key] = float(expected[key])
    assert str(expected["activation"]) == "tanh"  # TF's default: nothing to pass
    return options


def _run(layer: Any, expected: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Our layer's outputs and final states, in float64, on TF's input and lengths."""
    layer = layer.double()
    with torch.no_grad():
        outputs, states = layer(
            torch.from_numpy(expected["inputs"]).double(),
            sequence_lengths=torch.from_numpy(expected["lengths"]).long(),
            time_major=bool(expected["time_major"]),
        )
    ours = {"outputs": outputs.numpy(), "h": states[0].numpy()}
    if len(states) > 1:
        ours["c"] = states[1].numpy()
    return ours


def _distance(ours: Mapping[str, np.ndarray], expected: Mapping[str, Any]) -> float:
    assert ours.keys() == {"outputs", "h"} | ({"c"} if "c" in expected else set())
    for key, value in ours.items():
        assert value.shape == expected[key].shape, key
    return max(float(np.abs(value - expected[key]).max()) for key, value in ours.items())


def test_every_fixture_is_tested() -> None:
    assert sorted(FILES) == sorted(p.name[: -len(".ckpt.index")] for p in HERE.glob("*.index"))
    assert all(("cell_clip" in _expected(f)) == (f in CLIPPED) for f in FILES)


# -- listing ----------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", sorted(FILES))
def test_the_listing_states_the_variant_and_what_is_not_stored(fixture: str) -> None:
    name, mode, layers, direction, variant = FILES[fixture]
    (found,) = cudnn_rnn.find_rnns(_prefix(fixture))
    assert (found.name, found.mode, found.num_layers, found.direction) == (
        name,
        mode,
        layers,
        direction,
    )
    assert found.computable and found.reasons == ()
    assert found.details["variant"] == variant
    described = Variant.from_dict(variant).describe()
    assert found.notes[0] == f"it computes {mode} with a variant: {described}"
    not_stored = cells.LSTM_NOT_STORED_NOTE if mode == "lstm" else cells.GRU_NOT_STORED_NOTE
    assert not_stored in found.notes
    line = found.describe()
    assert f"note: it computes {mode} with a variant: {described}" in line
    if mode == "lstm":
        assert "cell_clip, proj_clip and the activation are not stored in a checkpoint" in line


def test_the_listing_names_the_classes_that_write_the_names() -> None:
    classes = {
        f: sorted({c for c in find_cells(_shapes(f), "tf1")[0].details["tf_classes"]})
        for f in ("multi_gru", "gru_block_multi", "gru_block_v2", "lstm_fused_peephole")
    }
    assert classes == {
        "multi_gru": ["GRUCell or GRUBlockCellV2"],
        "gru_block_multi": ["GRUBlockCell"],
        "gru_block_v2": ["GRUCell or GRUBlockCellV2"],
        "lstm_fused_peephole": ["LSTMBlockFusedCell"],
    }


def test_inspect_prints_the_variant_and_the_clip_note(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(_prefix("peephole_clip_proj_tight"))]) == 0
    out = capsys.readouterr().out
    assert "found 1 RNN(s), 1 computable" in out
    assert "note: it computes lstm with a variant: peepholes" in out
    assert f"note: {cells.LSTM_NOT_STORED_NOTE}" in out


# -- loading, run against TF's outputs --------------------------------------------------------


@pytest.mark.parametrize("fixture", sorted(FILES))
def test_load_computes_what_tf_computed(fixture: str) -> None:
    _, mode, layers, direction, variant = FILES[fixture]
    expected = _expected(fixture)
    options = _options(expected)
    notes: list[str] = []
    layer = cudnn_rnn.load(_prefix(fixture), note=notes.append, **options)
    spec = layer.spec
    clips = {k: v for k, v in options.items() if k in ("cell_clip", "proj_clip")}
    assert spec.variant == Variant.from_dict({**variant, **clips})
    assert (spec.mode, spec.num_layers, spec.direction) == (mode, layers, direction)
    assert _distance(_run(layer, expected), expected) < ATOL
    said = f"it computes {mode} with a variant: {spec.variant.describe()}."
    assert any(n.endswith(said) for n in notes), notes


def test_separate_stacks_read_each_direction_s_own_layer_below() -> None:
    layer = cudnn_rnn.load(_prefix("bidi_multi_lstm"))
    spec = layer.spec
    assert spec.variant.stacks == "separate" and spec.layer_input_size(1) == 4
    # TF's upper kernels are [4 + 4, 16]: layer 1 of each direction reads 4 wide.
    table = layout_of(spec)
    assert [p.shape for p in table.weights if p.layer == 1 and p.kind == "input"] == [(4, 4)] * 8
    # The output is TF's (output_fw, output_bw) concatenated; so are the states by layer.
    expected = _expected("bidi_multi_lstm")
    ours = _run(layer, expected)
    assert ours["outputs"].shape == (3, 5, 8)
    assert np.abs(ours["outputs"][..., 4:] - expected["outputs"][..., 4:]).max() < ATOL


@pytest.mark.parametrize("fixture", CLIPPED)
def test_a_clip_not_passed_computes_something_else(fixture: str) -> None:
    """The checkpoint does not store the clips: without them the outputs differ (VARIANTS.md:
    by 0.036 to 0.11), which is why the listing says it."""
    expected = _expected(fixture)
    options = _options(expected)
    plain = {k: v for k, v in options.items() if k not in ("cell_clip", "proj_clip")}
    layer = cudnn_rnn.load(_prefix(fixture), **plain)
    assert layer.spec.variant == Variant(peepholes=True)
    assert _distance(_run(layer, expected), expected) > 1e-2
    assert _distance(_run(cudnn_rnn.load(_prefix(fixture), **options), expected), expected) < ATOL


def test_each_clip_matters_where_it_binds() -> None:
    # peephole_clip_proj_tight: both clips bind; each alone is not what TF computed.
    expected = _expected("peephole_clip_proj_tight")
    for left_out in ("cell_clip", "proj_clip"):
        options = {k: v for k, v in _options(expected).items() if k != left_out}
        layer = cudnn_rnn.load(_prefix("peephole_clip_proj_tight"), **options)
        assert _distance(_run(layer, expected), expected) > 1e-2, left_out
    # peephole_clip_proj: its projection never reaches 0.3 (the maker says so): the cell clip
    # alone computes it.
    expected = _expected("peephole_clip_proj")
    layer = cudnn_rnn.load(_prefix("peephole_clip_proj"), cell_clip=0.5)
    assert _distance(_run(layer, expected), expected) < ATOL


def test_the_old_fixtures_of_variants_compute_too() -> None:
    """tests/fixtures/tf1_cells' peephole, gru and gru_block (refused before issue 47)."""
    old = FIXTURES / "tf1_cells"
    for fixture, variant in (
        ("peephole", Variant(peepholes=True)),
        ("gru", Variant(reset_after=False)),
        ("gru_block", Variant(reset_after=False)),
    ):
        with np.load(old / f"{fixture}.npz") as npz:
            expected = {k: npz[k] for k in npz.files}
        layer = cudnn_rnn.load(old / f"{fixture}.ckpt")
        assert layer.spec.variant == variant
        assert _distance(_run(layer, expected), expected) < ATOL, fixture


def test_the_peepholes_and_the_gru_s_tensors_are_tf_s() -> None:
    tensors = tf1_bundle.read_bundle(str(_prefix("peephole_proj")))
    read = read_cells(str(_prefix("peephole_proj")), "rnn")
    table = layout_of(read.spec)
    peep = {p.gate: read.biases[p.index] for p in table.biases if p.kind == PEEPHOLE}
    for gate in "ifo":
        assert torch.equal(peep[gate], torch.from_numpy(tensors[f"rnn/lstm_cell/w_{gate}_diag"]))
    # GRUBlockCell: w_ru [K, 2H] (r, u), w_c [K, H]; b_ru, b_c the input biases, no recurrent.
    tensors = tf1_bundle.read_bundle(str(_prefix("gru_block_v2")))
    read = read_cells(str(_prefix("gru_block_v2")), "rnn")
    gates = tensors["rnn/gru_cell/gates/kernel"]  # [3 + 4, 8]
    candidate = tensors["rnn/gru_cell/candidate/kernel"]  # [3 + 4, 4]
    tf = [gates[:, :4], gates[:, 4:], candidate]  # cuDNN's r, u, h
    expected = [k[:3].T for k in tf] + [k[3:].T for k in tf]  # W_r, W_u, W_h, R_r, R_u, R_h
    assert len(read.weights) == 6
    for ours, theirs in zip(read.weights, expected, strict=True):
        assert torch.equal(ours, torch.from_numpy(theirs.copy()))
    bias = np.concatenate(
        [tensors["rnn/gru_cell/gates/bias"], tensors["rnn/gru_cell/candidate/bias"]]
    )
    assert torch.equal(torch.cat(read.biases[:3]), torch.from_numpy(bias))
    assert not torch.cat(read.biases[3:]).any()


# -- from names and shapes --------------------------------------------------------------------


def _shapes(fixture: str) -> dict[str, tuple[int, ...]]:
    return {n: e.shape for n, e in tf1_bundle.read_bundle_index(str(_prefix(fixture))).items()}


def _lstm(scope: str, inputs: int, units: int) -> dict[str, tuple[int, ...]]:
    return {f"{scope}/kernel": (inputs + units, 4 * units), f"{scope}/bias": (4 * units,)}


def test_a_stack_where_some_cells_have_peepholes_gives_the_others_zeros(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    shapes = {
        **_lstm("rnn/multi_rnn_cell/cell_0/lstm_cell", 3, 4),
        **_lstm("rnn/multi_rnn_cell/cell_1/lstm_cell", 4, 4),
        **{f"rnn/multi_rnn_cell/cell_0/lstm_cell/w_{g}_diag": (4,) for g in "ifo"},
    }
    tensors = {n: rng.uniform(-0.5, 0.5, s).astype(np.float32) for n, s in shapes.items()}
    prefix = str(tmp_path / "some")
    tf1_bundle.write_bundle(prefix, tensors)
    read = read_cells(prefix, "rnn")
    assert read.spec.variant == Variant(peepholes=True) and read.spec.num_layers == 2
    table = layout_of(read.spec)
    peep = {(p.layer, p.gate): read.biases[p.index] for p in table.biases if p.kind == PEEPHOLE}
    for gate in "ifo":
        given = tensors[f"rnn/multi_rnn_cell/cell_0/lstm_cell/w_{gate}_diag"]
        assert torch.equal(peep[0, gate], torch.from_numpy(given))
        assert not peep[1, gate].any()


def test_peepholes_that_do_not_fit_are_reasons() -> None:
    shapes = {**_lstm("a/lstm_cell", 3, 4), "a/lstm_cell/w_i_diag": (4,)}
    shapes.update({**_lstm("b/lstm_cell", 3, 4), **{f"b/lstm_cell/w_{g}_diag": (4,) for g in "if"}})
    shapes["b/lstm_cell/w_o_diag"] = (5,)
    found = {f.name: f for f in find_cells(shapes, "tf1")}
    assert found["a"].reasons == ("a/lstm_cell has w_i_diag but not w_f_diag, w_o_diag",)
    assert found["b"].reasons == ("b/lstm_cell/w_o_diag has 5 entries, expected num_units = 4",)


def test_separate_stacks_must_agree() -> None:
    def pair(fw: tuple[int, ...], bw: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
        shapes: dict[str, tuple[int, ...]] = {}
        for d, units in (("fw", fw), ("bw", bw)):
            width = 3
            for layer, h in enumerate(units):
                shapes.update(
                    _lstm(f"bidirectional_rnn/{d}/multi_rnn_cell/cell_{layer}/lstm_cell", width, h)
                )
                width = h
        return shapes

    (found,) = find_cells(pair((4, 4), (4, 4)), "tf1")
    assert found.computable and found.details["variant"] == {"stacks": "separate"}
    (found,) = find_cells(pair((4, 4), (4,)), "tf1")
    assert found.reasons == ("fw has 2 layers, bw 1",)
    (found,) = find_cells(pair((4, 4), (5, 5)), "tf1")
    assert found.reasons == ("its cells differ in num_units (4, 5)",)
    # A layer reading what its own direction's layer below does not give.
    shapes = pair((4, 4), (4, 4))
    shapes["bidirectional_rnn/bw/multi_rnn_cell/cell_1/lstm_cell/kernel"] = (12, 16)
    (found,) = find_cells(shapes, "tf1")
    assert found.reasons == (
        "bidirectional_rnn/bw/multi_rnn_cell/cell_1/lstm_cell reads inputs of width 8, but the "
        "layer below gives 4",
    )


# -- the options ------------------------------------------------------------------------------


def test_the_activation_is_the_cells_candidate_and_output_activation() -> None:
    read = read_cells(str(_prefix("peephole")), "rnn", activation="relu")
    relu = Activation("relu")
    assert read.spec.variant == Variant(
        peepholes=True, cell_activation=relu, output_activation=relu
    )
    assert any("activation relu" in n for n in read.notes)
    read = read_cells(str(_prefix("multi_gru")), "rnn", activation=Activation("hard_sigmoid"))
    assert read.spec.variant == Variant(
        reset_after=False, cell_activation=Activation("hard_sigmoid")
    )
    # tanh is TF's default: cuDNN's math where nothing else changes.
    assert read_cells(
        str(FIXTURES / "tf1_cells" / "lstm.ckpt"), "rnn", activation="tanh"
    ).spec.variant.is_cudnn
    # A BasicRNNCell's relu is rnn_relu; another activation a variant of rnn_tanh.
    basic = str(FIXTURES / "tf1_cells" / "basic_rnn.ckpt")
    assert read_cells(basic, "rnn", activation="relu").spec.mode == "rnn_relu"
    elu = read_cells(basic, "rnn", activation="elu").spec
    assert (elu.mode, elu.variant) == ("rnn_tanh", Variant(cell_activation=Activation("elu")))
    # TF's default activation computed what TF computed; relu does not.
    expected = _expected("peephole")
    layer = cudnn_rnn.load(_prefix("peephole"), activation="relu")
    assert _distance(_run(layer, expected), expected) > 1e-2


def test_bad_clips_are_refused() -> None:
    peephole = str(_prefix("peephole"))
    with pytest.raises(TypeError, match=r"^read_cells: cell_clip must be a float > 0 or None"):
        read_cells(peephole, "rnn", cell_clip="1")  # type: ignore[arg-type]
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match=r"^read_cells: proj_clip must be a finite float > 0"):
            read_cells(peephole, "rnn", proj_clip=bad)
    with pytest.raises(
        ValueError,
        match=r"^read_cells: proj_clip clips the projection's output, and 'rnn' has no "
        r"projection \(TF's LSTMCell ignores proj_clip without num_proj\): pass None\.$",
    ):
        read_cells(peephole, "rnn", proj_clip=0.5)
    with pytest.raises(
        ValueError,
        match=r"^read_cells: cell_clip is TF's LSTM cells'; 'rnn' is a GRU of TF's cells: pass "
        r"None\.$",
    ):
        read_cells(str(_prefix("multi_gru")), "rnn", cell_clip=1.0)
    with pytest.raises(
        ValueError, match=r"cell_clip and proj_clip are TF's LSTM cells'; 'rnn' is an RNN"
    ):
        read_cells(
            str(FIXTURES / "tf1_cells" / "basic_rnn.ckpt"), "rnn", cell_clip=1.0, proj_clip=1.0
        )


def test_the_clips_are_tf1_options_only(tmp_path: Path) -> None:
    # A cuDNN model in a TF1 checkpoint does not clip.
    with pytest.raises(UsageError, match=r"cell_clip is for TF's standard LSTM cells, which this"):
        cudnn_rnn.load(FIXTURES / "tf1" / "cudnn_lstm.ckpt", cell_clip=1.0)
    # Another format's reader does not take them (the options table).
    path = tmp_path / "gru.pt"
    torch.save(torch.nn.GRU(2, 3).state_dict(), path)
    with pytest.raises(
        OptionError,
        match=r"argument 'proj_clip' .*takes activation \('proj_clip' is for TF1 checkpoints\)",
    ):
        cudnn_rnn.load(path, proj_clip=1.0)


def test_the_command_takes_the_clips(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from cudnn_rnn.cli import commands

    seen: list[dict[str, Any]] = []
    real = commands.load_layer

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append({k: kwargs.get(k) for k in ("forget_bias", "cell_clip", "proj_clip")})
        return real(*args, **kwargs)

    monkeypatch.setattr(commands, "load_layer", spy)
    src = str(_prefix("peephole_clip_proj_tight"))
    argv = ["convert", src, str(tmp_path / "m.onnx"), "--cell-clip", "0.25", "--proj-clip", "0.1"]
    main(argv)  # (read, then written where a writer holds the variant: the load is tested)
    assert seen == [{"forget_bias": None, "cell_clip": 0.25, "proj_clip": 0.1}]
    out = capsys.readouterr().out
    assert "variant: peepholes, cell state clipped to 0.25, projection clipped to 0.1." in out
    path = tmp_path / "gru.pt"
    torch.save(torch.nn.GRU(2, 3).state_dict(), path)
    assert main(["convert", str(path), str(tmp_path / "x.onnx"), "--cell-clip", "1"]) == 2
    assert "--cell-clip does not apply: the reader of torch files takes --activation " in (
        capsys.readouterr().err
    )


def test_a_cudnn_models_basic_rnn_cell_names_take_tanh_or_relu_only() -> None:
    """``activation=`` names any of our activations for TF's cells; a cuDNN model's
    BasicRNNCell names (CudnnRNNTanh/Relu's saveable) are one of its two modes."""
    prefix = FIXTURES / "tf1" / "cudnn_rnn_tanh.ckpt"
    assert cudnn_rnn.load(prefix, activation="tanh").rnn_mode == "rnn_tanh"
    with pytest.raises(
        UsageError,
        match=r"cudnn_rnn_tanh\.ckpt: basic_rnn_cell's model is tanh or relu, got activation "
        r"'elu'; pass activation=\"tanh\" or activation=\"relu\"\.$",
    ):
        cudnn_rnn.load(prefix, activation="elu")
