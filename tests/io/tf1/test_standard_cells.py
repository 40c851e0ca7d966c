"""TF1 checkpoints of TF's standard cells (LSTMCell, BasicLSTMCell, LSTMBlock(Fused)Cell,
BasicRNNCell, GRUCell, GRUBlockCell; MultiRNNCell, bidirectional_dynamic_rnn,
stack_bidirectional_dynamic_rnn): listed from the index, read as canonical data, and run by our
layer to TF's own outputs and final states. (The variants: peepholes, TF's GRU, separate stacks,
the clips, are tests/io/tf1/test_cell_variants.py's, on TF's own files of them.)

The fixtures were written by real TensorFlow 2.21 through ``tf.compat.v1``
(tests/fixtures/make_tf1_cell_fixtures.py says how and what each one holds); the npz beside each
checkpoint has TF's inputs, lengths, outputs and final states. Most cells are TF 2's own; four
are not, since tf.contrib is gone: ``lstm_block``, ``lstm_fused``, ``gru_block`` (TF 2's kernels
under names and wiring the script transcribed from TF 1.15) and ``stack_bidi`` (the script's
transcription of ``stack_bidirectional_dynamic_rnn``). TensorFlow 1.15.5's own cells restored
those four files and ran them (``fixtures/tf115/cells_*.npz``, make_tf115_fixtures.py):
``test_the_rebuilt_cells_are_tf115s`` holds the fixtures to what they gave. ``old_*`` hold
variables saved under the names TF <= 1.0 wrote, which the script chose (no TF that wrote them
runs here).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from cudnn_rnn.converters.canonical import layer_from_canonical
from cudnn_rnn.io.detect import detect_models
from cudnn_rnn.io.found import FoundRNN, ReadRNN
from cudnn_rnn.io.tf1 import bundle as tf1_bundle
from cudnn_rnn.io.tf1 import cells
from cudnn_rnn.io.tf1.cells import TF1CellsError, find_cells, read_cells
from tests.support.paths import FIXTURES

HERE = FIXTURES / "tf1_cells"

#: fixture -> (name, mode, num_layers, num_units, input_size, direction, num_proj)
COMPUTABLE: dict[str, tuple[str, str, int, int, int, str, int | None]] = {
    "lstm": ("rnn", "lstm", 1, 4, 3, "unidirectional", None),
    "lstm_proj": ("encoder", "lstm", 1, 5, 2, "unidirectional", 3),
    "basic_lstm": ("rnn", "lstm", 1, 3, 2, "unidirectional", None),
    "basic_rnn": ("rnn", "rnn_tanh", 1, 4, 3, "unidirectional", None),
    "basic_rnn_relu": ("rnn", "rnn_tanh", 1, 3, 2, "unidirectional", None),
    "multi_lstm": ("rnn", "lstm", 2, 4, 3, "unidirectional", None),
    "bidi_lstm": ("encoder/bidirectional_rnn", "lstm", 1, 3, 2, "bidirectional", None),
    "stack_bidi": ("stack_bidirectional_rnn", "lstm", 2, 3, 2, "bidirectional", None),
    "lstm_block": ("rnn", "lstm", 1, 4, 3, "unidirectional", None),
    "lstm_fused": ("fused", "lstm", 1, 3, 2, "unidirectional", None),
    "old_multi_basic_lstm": ("rnn", "lstm", 2, 3, 2, "unidirectional", None),
    "old_lstm_proj": ("rnn", "lstm", 1, 4, 3, "unidirectional", 2),
    # Variants of the mode (peepholes; TF's GRU, the reset gate before the product), which
    # cuDNN's math did not compute and our variant engine does.
    "peephole": ("rnn", "lstm", 1, 3, 2, "unidirectional", None),
    "gru": ("rnn", "gru", 1, 3, 2, "unidirectional", None),
    "gru_block": ("rnn", "gru", 1, 3, 2, "unidirectional", None),
}
#: fixture -> the variant it is read with (Variant.as_dict()); cuDNN's math where not listed.
VARIANTS: dict[str, dict[str, Any]] = {
    "peephole": {"peepholes": True},
    "gru": {"reset_after": False},
    "gru_block": {"reset_after": False},
}
CLASSES = {
    "lstm_fused": ["LSTMBlockFusedCell"],
    "basic_lstm": ["BasicLSTMCell"],
    "old_multi_basic_lstm": ["BasicLSTMCell"],
    "basic_rnn": ["BasicRNNCell"],
    "basic_rnn_relu": ["BasicRNNCell"],
    "gru": ["GRUCell or GRUBlockCellV2"],
    "gru_block": ["GRUBlockCell"],
}
OLD_NAMES = ("old_multi_basic_lstm", "old_lstm_proj")


def _prefix(fixture: str) -> str:
    return str(HERE / f"{fixture}.ckpt")


def _shapes(fixture: str) -> dict[str, tuple[int, ...]]:
    return {n: e.shape for n, e in tf1_bundle.read_bundle_index(_prefix(fixture)).items()}


def _expected(fixture: str) -> Mapping[str, Any]:
    with np.load(HERE / f"{fixture}.npz") as npz:
        return {k: npz[k] for k in npz.files}


def _only(fixture: str) -> FoundRNN:
    found = find_cells(_shapes(fixture), "tf1")
    assert len(found) == 1, [f.describe() for f in found]
    return found[0]


# -- listing ----------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", sorted(COMPUTABLE))
def test_find_cells_lists_the_computable_rnn(fixture: str) -> None:
    name, mode, layers, units, inputs, direction, proj = COMPUTABLE[fixture]
    found = _only(fixture)
    assert (found.name, found.mode, found.num_layers, found.num_units) == (
        name,
        mode,
        layers,
        units,
    )
    assert (found.input_size, found.direction, found.num_proj) == (inputs, direction, proj)
    assert found.computable and found.reasons == () and found.format == "tf1"
    # GRUBlockCell's names are of every generation.
    assert found.details["naming"] == (
        "weights/biases (TF 1.0)"
        if fixture in OLD_NAMES
        else None
        if fixture == "gru_block"
        else "kernel/bias"
    )
    classes = CLASSES.get(fixture, ["LSTMCell or LSTMBlockCell"])
    assert found.details["tf_classes"] == classes
    assert found.details.get("variant", {}) == VARIANTS.get(fixture, {})
    if mode == "lstm":
        assert found.details["forget_bias"] == (
            "forget_bias is not stored in a checkpoint: TF's default 1.0 is assumed; pass "
            "forget_bias= to change it"
        )
        assert found.details["not_stored"] == cells.LSTM_NOT_STORED_NOTE
    elif mode == "gru":
        assert found.details["not_stored"] == cells.GRU_NOT_STORED_NOTE
    else:
        assert found.details["activation_known"] is False
        assert "activation='relu'" in found.details["activation"]


def test_optimizer_slots_and_counters_are_not_read_as_cells() -> None:
    shapes = _shapes("multi_lstm")
    assert "rnn/multi_rnn_cell/cell_0/lstm_cell/kernel/Adam_1" in shapes
    assert "beta1_power" in shapes and "global_step" in shapes
    assert _only("multi_lstm").details["cells"] == [
        "rnn/multi_rnn_cell/cell_0/lstm_cell",
        "rnn/multi_rnn_cell/cell_1/lstm_cell",
    ]
    moving = {
        **shapes,
        "rnn/multi_rnn_cell/cell_0/lstm_cell/kernel/ExponentialMovingAverage": (7, 16),
    }
    assert [f.name for f in find_cells(moving, "tf1")] == ["rnn"]


# -- listing, from names and shapes -----------------------------------------------------------


def _lstm(scope: str, inputs: int, units: int, *, old: bool = False) -> dict[str, tuple[int, ...]]:
    kernel, bias = ("weights", "biases") if old else ("kernel", "bias")
    return {f"{scope}/{kernel}": (inputs + units, 4 * units), f"{scope}/{bias}": (4 * units,)}


def test_names_of_cudnn_saveables_are_left_to_detect_models() -> None:
    # A MultiRNNCell of BasicRNNCell under dynamic_rnn has the names of CudnnRNNTanh's
    # saveable; the stacked pairs those of its bidirectional one: detect_models reads them.
    shapes = {
        "rnn/multi_rnn_cell/cell_0/basic_rnn_cell/kernel": (7, 4),
        "rnn/multi_rnn_cell/cell_0/basic_rnn_cell/bias": (4,),
        "rnn/multi_rnn_cell/cell_0/basic_rnn_cell/kernel/Adam": (7, 4),
        "s/stack_bidirectional_rnn/cell_0/bidirectional_rnn/fw/basic_rnn_cell/kernel": (5, 3),
        "s/stack_bidirectional_rnn/cell_0/bidirectional_rnn/fw/basic_rnn_cell/bias": (3,),
        "s/stack_bidirectional_rnn/cell_0/bidirectional_rnn/bw/basic_rnn_cell/kernel": (5, 3),
        "s/stack_bidirectional_rnn/cell_0/bidirectional_rnn/bw/basic_rnn_cell/bias": (3,),
    }
    assert len(detect_models(shapes)) == 2
    assert find_cells(shapes, "tf1") == []
    # dynamic_rnn(scope="encoder") writes no rnn/: not a saveable's name, so it is ours.
    ours = {n.replace("rnn/multi", "encoder/multi"): s for n, s in shapes.items() if "s/" not in n}
    assert detect_models(ours) == []
    assert [(f.name, f.mode, f.num_units) for f in find_cells(ours, "tf1")] == [
        ("encoder", "rnn_tanh", 4)
    ]


def test_a_keras_cell_with_a_recurrent_kernel_is_not_a_tf_cell() -> None:
    shapes = {
        "lstm/lstm_cell/kernel": (3, 16),
        "lstm/lstm_cell/recurrent_kernel": (4, 16),
        "lstm/lstm_cell/bias": (16,),
    }
    assert find_cells(shapes, "tf1") == []


def test_old_gru_names_and_old_bidirectional_pairs() -> None:
    shapes = {
        "rnn/gru_cell/gates/weights": (5, 6),
        "rnn/gru_cell/gates/biases": (6,),
        "rnn/gru_cell/candidate/weights": (5, 3),
        "rnn/gru_cell/candidate/biases": (3,),
        **_lstm("bidirectional_rnn/fw/basic_lstm_cell", 2, 3, old=True),
        **_lstm("bidirectional_rnn/bw/basic_lstm_cell", 2, 3, old=True),
    }
    found = {f.name: f for f in find_cells(shapes, "tf1")}
    assert sorted(found) == ["bidirectional_rnn", "rnn"]
    gru, bidi = found["rnn"], found["bidirectional_rnn"]
    assert (gru.mode, gru.num_units, gru.input_size, gru.computable) == ("gru", 3, 2, True)
    assert gru.details["variant"] == {"reset_after": False}
    assert gru.details["naming"] == "weights/biases (TF 1.0)"
    assert (bidi.mode, bidi.direction, bidi.num_units, bidi.computable) == (
        "lstm",
        "bidirectional",
        3,
        True,
    )


def test_a_multi_rnn_cell_must_be_one_kind_of_cell_of_one_size() -> None:
    shapes = {
        **_lstm("rnn/multi_rnn_cell/cell_0/lstm_cell", 3, 4),
        **_lstm("rnn/multi_rnn_cell/cell_1/lstm_cell", 4, 3),
    }
    (found,) = find_cells(shapes, "tf1")
    assert not found.computable and (found.num_layers, found.num_units) == (2, 4)
    assert found.reasons == ("its cells differ in num_units (3, 4)",)

    shapes = {
        **_lstm("rnn/multi_rnn_cell/cell_0/lstm_cell", 3, 4),
        "rnn/multi_rnn_cell/cell_1/basic_rnn_cell/kernel": (8, 4),
        "rnn/multi_rnn_cell/cell_1/basic_rnn_cell/bias": (4,),
    }
    (found,) = find_cells(shapes, "tf1")
    assert found.mode is None and not found.computable
    assert "several kinds (BasicRNNCell and LSTMCell or LSTMBlockCell)" in found.reasons[0]

    shapes = {
        **_lstm("rnn/multi_rnn_cell/cell_0/lstm_cell", 3, 4),
        **_lstm("rnn/multi_rnn_cell/cell_2/lstm_cell", 4, 4),
    }
    (found,) = find_cells(shapes, "tf1")
    assert found.reasons == ("MultiRNNCell rnn/multi_rnn_cell lacks cell_1",)

    shapes = {
        **_lstm("rnn/multi_rnn_cell/cell_0/lstm_cell", 3, 4),
        **_lstm("rnn/multi_rnn_cell/cell_1/lstm_cell", 5, 4),
    }
    (found,) = find_cells(shapes, "tf1")
    assert found.reasons == (
        "rnn/multi_rnn_cell/cell_1/lstm_cell reads inputs of width 5, but the layer below gives 4",
    )


def test_mixed_lstm_classes_in_one_stack_are_one_lstm() -> None:
    # LSTMCell and BasicLSTMCell compute the same LSTM: cuDNN computes their stack.
    shapes = {
        **_lstm("rnn/multi_rnn_cell/cell_0/lstm_cell", 3, 4),
        **_lstm("rnn/multi_rnn_cell/cell_1/basic_lstm_cell", 4, 4),
    }
    (found,) = find_cells(shapes, "tf1")
    assert found.computable and found.num_layers == 2
    assert found.details["tf_classes"] == ["BasicLSTMCell", "LSTMCell or LSTMBlockCell"]


def test_bidirectional_pair_of_multi_rnn_cell_stacks() -> None:
    shapes = {}
    for d in ("fw", "bw"):
        shapes.update(_lstm(f"bidirectional_rnn/{d}/multi_rnn_cell/cell_0/lstm_cell", 2, 3))
        shapes.update(_lstm(f"bidirectional_rnn/{d}/multi_rnn_cell/cell_1/lstm_cell", 3, 3))
    (found,) = find_cells(shapes, "tf1")
    assert (found.name, found.direction, found.num_layers, found.num_units, found.input_size) == (
        "bidirectional_rnn",
        "bidirectional",
        2,
        3,
        2,
    )
    # Each direction runs its own stack (layer 1 reads its own direction's layer 0, a kernel of
    # [3 + 3, 12]): a variant, separate stacks.
    assert found.computable and found.details["variant"] == {"stacks": "separate"}
    assert found.notes[0] == "it computes lstm with a variant: separate forward and backward stacks"
    assert "(separate fw and bw stacks: MultiRNNCell of 2 x " in found.where
    # One layer a direction is one bidirectional layer of cuDNN's.
    one = {n: s for n, s in shapes.items() if "cell_1" not in n}
    (found,) = find_cells(one, "tf1")
    assert found.computable and (found.num_layers, found.direction) == (1, "bidirectional")
    assert "variant" not in found.details


def test_static_stack_bidirectional_names() -> None:
    # stack_bidirectional_rnn (static) gives each layer's pair the scope cell_<l> itself.
    shapes = {}
    for layer, width in ((0, 2), (1, 6)):
        for d in ("fw", "bw"):
            shapes.update(_lstm(f"m/stack_bidirectional_rnn/cell_{layer}/{d}/lstm_cell", width, 3))
    (found,) = find_cells(shapes, "tf1")
    assert (found.name, found.num_layers, found.direction, found.computable) == (
        "m/stack_bidirectional_rnn",
        2,
        "bidirectional",
        True,
    )
    del shapes["m/stack_bidirectional_rnn/cell_1/bw/lstm_cell/kernel"]
    names = {f.name: f for f in find_cells(shapes, "tf1")}
    assert not names["m/stack_bidirectional_rnn"].computable


def test_projection_wider_than_the_cell_and_bad_shapes_are_reasons() -> None:
    shapes = {
        **_lstm("a/lstm_cell", 3, 2),
        "a/lstm_cell/projection/kernel": (2, 4),
        "b/lstm_cell/kernel": (3, 10),
        "b/lstm_cell/bias": (10,),
        "c/basic_lstm_cell/kernel": (4, 8),
        "d/basic_rnn_cell/kernel": (2, 2),
        "d/basic_rnn_cell/bias": (2,),
    }
    # (a's kernel is [3 + 2, 8] for num_units 2; with num_proj 4 its input would be 1.)
    shapes["a/lstm_cell/kernel"] = (5, 8)
    found = {f.name: f for f in find_cells(shapes, "tf1")}
    assert found["a"].reasons == ("num_proj 4 > num_units 2: cuDNN projects to at most num_units",)
    assert (found["a"].num_units, found["a"].input_size, found["a"].num_proj) == (2, 1, 4)
    assert found["b"].reasons == (
        "b/lstm_cell/kernel has 10 columns and b/lstm_cell/bias 10 entries; LSTMCell or "
        "LSTMBlockCell has 4 x num_units of each",
    )
    assert found["b"].num_units is None
    assert found["c"].reasons == ("c/basic_lstm_cell has no bias",)
    assert found["d"].reasons == (
        "d/basic_rnn_cell/kernel has 2 rows: no room for an input beside the 2 recurrent ones",
    )


def test_names_that_would_read_the_same_get_their_full_paths() -> None:
    shapes = {
        **_lstm("rnn/lstm_cell", 3, 4),
        **_lstm("rnn/multi_rnn_cell/cell_0/lstm_cell", 3, 4),
        **_lstm("lstm_fused_cell", 3, 4),
    }
    assert [f.name for f in find_cells(shapes, "tf1")] == [
        "lstm_fused_cell",
        "rnn/lstm_cell",
        "rnn/multi_rnn_cell",
    ]


def test_early_lstm_block_fused_cell_scope_says_it_clipped() -> None:
    (found,) = find_cells(_lstm("enc/lstm_block_wrapper", 3, 4), "tf1")
    assert found.computable and found.details["tf_classes"] == ["LSTMBlockFusedCell"]
    assert "clipped the cell state to [-3, 3]" in found.details["cell_clip"]


# -- reading, run against TF's outputs --------------------------------------------------------


def _run(read: ReadRNN, expected: Mapping[str, Any]) -> tuple[torch.Tensor, ...]:
    layer = layer_from_canonical(
        read.spec,
        read.weights,
        read.biases,
        dtype=torch.float32,
        device=torch.device("cpu"),
        owner="test",
    )
    inputs = torch.from_numpy(expected["inputs"])
    lengths = torch.from_numpy(expected["lengths"]).long()
    with torch.no_grad():
        outputs, states = layer(
            inputs, sequence_lengths=lengths, time_major=bool(expected["time_major"])
        )
    return (outputs, *states)


def max_difference(fixture: str, **options: Any) -> float:
    """The largest difference between our layer's outputs and final states and TF's."""
    expected = _expected(fixture)
    read = read_cells(_prefix(fixture), _only(fixture).name, **options)
    outputs, h, *c = _run(read, expected)
    pairs = [(outputs, expected["outputs"]), (h, expected["h"])]
    if c:
        pairs.append((c[0], expected["c"]))
    for ours, theirs in pairs:
        assert tuple(ours.shape) == theirs.shape
    return max(float(np.abs(ours.numpy() - theirs).max()) for ours, theirs in pairs)


@pytest.mark.parametrize("fixture", sorted(COMPUTABLE))
def test_read_cells_computes_what_tf_computed(fixture: str) -> None:
    expected = _expected(fixture)
    options: dict[str, Any] = {}
    if float(expected["forget_bias"]) != 1.0:
        options["forget_bias"] = float(expected["forget_bias"])
    if str(expected["activation"]) != "tanh":
        options["activation"] = str(expected["activation"])
    assert max_difference(fixture, **options) < 1e-5
    # TF zeroes the outputs past each row's length; so do we.
    outputs = expected["outputs"]
    row = 2  # length 1
    past = outputs[1:, row] if bool(expected["time_major"]) else outputs[row, 1:]
    assert not past.any()


#: The fixtures make_tf1_cell_fixtures.py rebuilt on TF 2 (tf.contrib is gone).
REBUILT = ("lstm_block", "lstm_fused", "gru_block", "stack_bidi")


@pytest.mark.parametrize("fixture", REBUILT)
def test_the_rebuilt_cells_are_tf115s(fixture: str) -> None:
    """TF 1.15.5's own ``LSTMBlockCell``, ``LSTMBlockFusedCell``, ``GRUBlockCell`` and
    ``stack_bidirectional_dynamic_rnn`` (``fixtures/tf115/cells_*.npz``), restored from these
    files by a Saver that asks for their own variable names, give the outputs and final states
    the fixtures hold (measured: 1.2e-7 at most, float32 rounding), so what our layer is held to
    above and the names the finder reads are TF 1.x's."""
    expected = _expected(fixture)
    with np.load(FIXTURES / "tf115" / f"cells_{fixture}.npz") as npz:
        tf115 = {k: npz[k] for k in npz.files}
    assert sorted(tf115.pop("variables").tolist()) == sorted(_shapes(fixture))
    assert tf115.keys() == {"outputs", "h"} | ({"c"} if "c" in expected else set())
    for key, value in tf115.items():
        np.testing.assert_allclose(expected[key], value, rtol=0, atol=1e-6, err_msg=key)


def test_forget_bias_is_what_the_cells_used() -> None:
    # basic_lstm was built with forget_bias=0.5: TF's default 1.0 computes something else.
    assert max_difference("basic_lstm") > 1e-3
    assert max_difference("basic_lstm", forget_bias=0.5) < 1e-5
    read = read_cells(_prefix("basic_lstm"), "rnn", forget_bias=0.5)
    assert any("forget_bias 0.5 (as passed" in n for n in read.notes)


def test_read_cells_data() -> None:
    read = read_cells(_prefix("lstm_proj"), "encoder")
    assert read.spec.mode == "lstm" and read.spec.num_proj == 3 and read.spec.num_units == 5
    assert read.found == _only("lstm_proj")
    assert all(t.dtype == torch.float32 and t.device.type == "cpu" for t in read.weights)
    # The projection is TF's projection/kernel [H, P] transposed; no recurrent bias.
    tensors = tf1_bundle.read_bundle(_prefix("lstm_proj"))
    assert torch.equal(
        read.weights[8], torch.from_numpy(tensors["encoder/lstm_cell/projection/kernel"].T)
    )
    assert all(not b.any() for b in read.biases[4:])
    # The bias is TF's, in cuDNN's gate order (TF: i, j, f, o), plus forget_bias on f.
    bias = tensors["encoder/lstm_cell/bias"].reshape(4, 5)
    for ours, theirs in zip(read.biases[:4], (bias[0], bias[2] + 1.0, bias[1], bias[3])):
        assert torch.allclose(ours, torch.from_numpy(theirs))
    assert any("forget_bias 1.0 (TF's default" in n for n in read.notes)
    assert any("time_major=False" in n for n in read.notes)
    fused = read_cells(_prefix("lstm_fused"), "fused")
    assert any("time-major" in n for n in fused.notes)


def test_relu_is_read_when_asked() -> None:
    read = read_cells(_prefix("basic_rnn_relu"), "rnn", activation="relu")
    assert read.spec.mode == "rnn_relu" and read.found.mode == "rnn_relu"
    assert read.found.details["activation_known"] is True
    assert max_difference("basic_rnn_relu") > 1e-3  # tanh, TF's default, is not what it used


def test_read_cells_reads_only_the_rnn_and_takes_an_open_index(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[list[str]] = []
    real = tf1_bundle.read_bundle

    def spy(source: Any, names: Any = None, **kw: Any) -> Any:
        asked.append(sorted(names))
        return real(source, names, **kw)

    monkeypatch.setattr(tf1_bundle, "read_bundle", spy)
    index = tf1_bundle.open_bundle(_prefix("multi_lstm"))
    read_cells(index, "rnn")
    assert asked == [
        [f"rnn/multi_rnn_cell/cell_{k}/lstm_cell/{v}" for k in (0, 1) for v in ("bias", "kernel")]
    ]


def test_read_cells_keeps_the_checkpoints_float_dtype(tmp_path: Path) -> None:
    tensors = tf1_bundle.read_bundle(_prefix("lstm"))
    prefix = str(tmp_path / "f64")
    tf1_bundle.write_bundle(prefix, {n: t.astype(np.float64) for n, t in tensors.items()})
    read = read_cells(prefix, "rnn")
    assert all(t.dtype == torch.float64 for t in read.weights + read.biases)
    prefix = str(tmp_path / "ints")
    tf1_bundle.write_bundle(prefix, {n: t.astype(np.int32) for n, t in tensors.items()})
    with pytest.raises(TF1CellsError, match=r"the RNN's tensors are int32; expected one of"):
        read_cells(prefix, "rnn")


# -- refusals ---------------------------------------------------------------------------------


def test_a_name_not_held_is_refused_naming_those_held() -> None:
    with pytest.raises(
        TF1CellsError, match=r"holds no RNN of TF's standard cells named 'encoder'; it holds 'rnn'"
    ):
        read_cells(_prefix("lstm"), "encoder")


def test_what_cannot_be_read_is_refused_with_the_reasons(tmp_path: Path) -> None:
    shapes = {
        **_lstm("rnn/multi_rnn_cell/cell_0/lstm_cell", 3, 4),
        **_lstm("rnn/multi_rnn_cell/cell_1/lstm_cell", 4, 3),
    }
    prefix = str(tmp_path / "uneven")
    tf1_bundle.write_bundle(prefix, {n: np.zeros(s, np.float32) for n, s in shapes.items()})
    says = r"^read_cells: TF1 checkpoint .*: 'rnn': .*its cells differ in num_units \(3, 4\)"
    with pytest.raises(TF1CellsError, match=says):
        read_cells(prefix, "rnn")


def test_bad_options_are_refused() -> None:
    with pytest.raises(
        ValueError,
        match=r"activation must be None \(TF's default tanh\) or one of 'sigmoid', 'tanh', "
        r"'relu', .*, got 'gelu'",
    ):
        read_cells(_prefix("basic_rnn"), "rnn", activation="gelu")
    with pytest.raises(TypeError, match=r"forget_bias must be a float, got str '1'"):
        read_cells(_prefix("lstm"), "rnn", forget_bias="1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"forget_bias must be finite, got nan"):
        read_cells(_prefix("lstm"), "rnn", forget_bias=float("nan"))


def test_module_lists_its_notes() -> None:
    assert cells.FORGET_BIAS_NOTE.startswith("forget_bias is not stored in a checkpoint")
