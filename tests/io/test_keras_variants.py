"""Keras files whose RNNs compute more than cuDNN's math (issue 47): each read as a spec with its
variant, and the layer built from it computing what the producer computed.

The fixtures are tests/fixtures/VARIANTS.md's: tf-keras 2.21's ``.h5`` files (``keras2/``) and
Keras 3.15's ``.keras`` files (``keras3/``), each with the producer's outputs and final states
(float32) in its ``.npz``. Our layers run them in float64 on the producer's own input with
``sequence_lengths`` from its mask (``lengths``), and must match to 2e-6.

What differs at padded steps, and why: a masked step is not computed by either side (its state
is kept), but what it outputs is each one's convention. Our layers output 0 at every step past a
sequence's length. A plain Keras layer repeats its last output there (``zero_output_for_mask``
False), so only the valid steps (``t < length``) are compared; ``Bidirectional`` forces
``zero_output_for_mask`` and outputs 0 there, as ours do, and a ``go_backwards`` layer reverses
its input and mask in time, so its padding comes first (outputs 0) and its valid outputs are the
last ``length`` positions in processing order, which is where ours put them: for both, every step
is compared. Final states are compared whole (those after each row's last real step, on both
sides). An unmasked fixture (no ``lengths``) is compared everywhere.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import cudnn_rnn
from cudnn_rnn.core.variant import CUDNN, Activation, Variant
from cudnn_rnn.layers import _CudnnRNN
from tests.support.keras_edits import edited_config
from tests.support.paths import FIXTURES

h5py = pytest.importorskip("h5py")

from cudnn_rnn.converters.canonical import layer_canonical, layer_from_canonical  # noqa: E402
from cudnn_rnn.converters.keras_files import from_keras3, from_keras_h5  # noqa: E402
from cudnn_rnn.io.keras import h5 as keras_h5  # noqa: E402
from cudnn_rnn.io.keras import keras3  # noqa: E402
from cudnn_rnn.io.keras.variants import Dialect  # noqa: E402

ATOL = 2e-6
HARD2 = Activation("hard_sigmoid", 0.2, 0.5)  # Keras 1/2: clip(0.2 x + 0.5, 0, 1)
HARD3 = Activation("hard_sigmoid", 1 / 6, 0.5)  # Keras 3: relu6(x + 3) / 6
RELU = Activation("relu")
#: file -> {layer: (our mode, its variant)} in the model's order.
CASES: dict[str, dict[str, tuple[str, Variant]]] = {
    "keras2/gru_reset_before_masked_model.h5": {"gru": ("gru", Variant(reset_after=False))},
    "keras2/hard_sigmoid_gates_model.h5": {
        "lstm": ("lstm", Variant(gate_activation=HARD2)),
        "gru": ("gru", Variant(gate_activation=HARD2, reset_after=False)),
    },
    "keras2/activations_model.h5": {
        "lstm": ("lstm", Variant(cell_activation=RELU, output_activation=RELU)),
        "simple_rnn": ("rnn_relu", CUDNN),
        "simple_rnn_1": ("rnn_tanh", Variant(cell_activation=Activation("elu", 1.0))),
        "simple_rnn_2": ("rnn_tanh", Variant(cell_activation=Activation("softsign"))),
    },
    "keras2/go_backwards_masked_model.h5": {"lstm": ("lstm", Variant(time="go_backwards"))},
    **{
        f"keras2/bidi_{merge}_masked_model.h5": {"bidirectional": ("lstm", Variant(merge=merge))}
        for merge in ("sum", "mul", "ave", "concat")
    },
    # The files these readers refused before (their npz oracles are new).
    "keras2/hard_sigmoid_model.h5": {"lstm": ("lstm", Variant(gate_activation=HARD2))},
    "keras2/reset_before_model.h5": {"gru": ("gru", Variant(reset_after=False))},
    "keras2/merge_sum_model.h5": {"bidirectional": ("lstm", Variant(merge="sum"))},
    "keras3/gru_reset_before.keras": {"gru": ("gru", Variant(reset_after=False))},
    "keras3/lstm_hard_sigmoid.keras": {"lstm": ("lstm", Variant(gate_activation=HARD3))},
    "keras3/bidi_sum.keras": {"bidirectional": ("lstm", Variant(merge="sum"))},
    "keras3/go_backwards_masked.keras": {"lstm": ("lstm", Variant(time="go_backwards"))},
}


def _layers(path: Path, **options: Any) -> dict[str, _CudnnRNN]:
    """Every RNN layer of a file, in the model's order, by the format's front."""
    if path.suffix == ".h5":
        return from_keras_h5(path, **options)
    return {f.name: from_keras3(path, f.name) for f in keras3.find_rnns(path)}


def _oracle(path: Path) -> Any:
    return np.load(path.with_suffix(".npz"))


def _valid(layer: _CudnnRNN, lengths: np.ndarray, steps: int) -> np.ndarray:
    """``[B, T]``: the steps compared (see the module): the valid ones of a plain layer, all of
    a Bidirectional or go_backwards one."""
    if layer.direction == "bidirectional" or layer.variant.time == "go_backwards":
        return np.ones((len(lengths), steps), bool)
    return np.arange(steps)[None, :] < lengths[:, None]


def _run(
    layer: _CudnnRNN, keras: Any, name: str
) -> tuple[np.ndarray, tuple[torch.Tensor, ...], np.ndarray]:
    """Our layer in float64 on the producer's input of ``name``, with its lengths: (outputs,
    final states, the steps to compare)."""
    x = keras[f"{name}/input"]
    batch, steps = x.shape[:2]
    lengths = keras["lengths"] if "lengths" in keras.files else np.full(batch, steps)
    with torch.no_grad():
        y, state = layer.double()(
            torch.from_numpy(x).double(),
            time_major=False,
            sequence_lengths=torch.from_numpy(lengths),
        )
    return y.numpy(), state, _valid(layer, lengths, steps)


def _check(layer: _CudnnRNN, keras: Any, name: str) -> None:
    y, state, valid = _run(layer, keras, name)
    want = keras[f"{name}/output"]
    np.testing.assert_allclose(y[valid], want[valid], rtol=0, atol=ATOL, err_msg=name)
    for k, key in enumerate(("h", "c")):
        if f"{name}/{key}" in keras.files:
            got = state[k].numpy()
            np.testing.assert_allclose(got, keras[f"{name}/{key}"], rtol=0, atol=ATOL, err_msg=key)


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_file_reads_its_variants_and_computes_what_the_producer_computed(case: str) -> None:
    path = FIXTURES / case
    layers = _layers(path)
    assert list(layers) == list(CASES[case])  # the model's order
    keras = _oracle(path)
    for name, layer in layers.items():
        mode, variant = CASES[case][name]
        assert (layer.rnn_mode, layer.variant, layer.num_layers) == (mode, variant, 1), name
        _check(layer, keras, name)


def _without(variant: Variant) -> Variant:
    """The variant with what it changes undone (a merge other than concat: another of the same
    width), to see that each fixture needs it."""
    undone = {name: getattr(CUDNN, name) for name in variant.changed()}
    if "merge" in undone:
        undone["merge"] = {"sum": "ave", "ave": "sum", "mul": "sum"}[variant.merge]
    return dataclasses.replace(variant, **undone)


@pytest.mark.parametrize("case", sorted(c for c in CASES if "concat" not in c))
def test_the_variant_is_what_makes_the_outputs_equal(case: str) -> None:
    """The same weights computing cuDNN's math (or another merge) are far from the producer's:
    each comparison above depends on the variant the file was read with."""
    path = FIXTURES / case
    keras = _oracle(path)
    far = 0.0
    for name, layer in _layers(path).items():
        if layer.variant.is_cudnn:
            continue
        spec, weights, biases = layer_canonical(layer, "test")
        spec = dataclasses.replace(spec, variant=_without(spec.variant))
        other = layer_from_canonical(
            spec, weights, biases, owner="test", dtype=torch.float64, device=torch.device("cpu")
        )
        y, _, valid = _run(other, keras, name)
        far = max(far, float(np.abs(y[valid] - keras[f"{name}/output"][valid]).max()))
    assert far > 100 * ATOL


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_one_loader_and_the_listing_say_the_variant(case: str) -> None:
    """cudnn_rnn.load gives each layer the front gives; find_rnns says its variant (in
    ``details`` and in words in its first note, which ``cudnn-rnn inspect`` prints)."""
    path = FIXTURES / case
    front = _layers(path)
    found = cudnn_rnn.find_rnns(path)
    assert [f.name for f in found] == list(front) and all(f.computable for f in found)
    for record in found:
        layer = cudnn_rnn.load(path, record.name)
        assert layer.spec == front[record.name].spec
        torch.testing.assert_close(layer.opaque_kernel, front[record.name].opaque_kernel)
        variant = layer.variant
        assert record.details.get("variant") == (None if variant.is_cudnn else variant.as_dict())
        if not variant.is_cudnn:
            words = f"it computes {layer.rnn_mode} with a variant: {variant.describe()}"
            assert record.notes[0] == words and words in record.describe()
        # What Keras computed needs nothing done to the input: no note says otherwise.
        assert not any("flip" in n or "revers" in n for n in record.notes), record.notes


def test_inspect_shows_the_variant(capsys: pytest.CaptureFixture[str]) -> None:
    from cudnn_rnn.cli import main

    assert main(["inspect", str(FIXTURES / "keras2/hard_sigmoid_gates_model.h5")]) == 0
    out = capsys.readouterr().out
    assert (
        "'gru': gru unidirectional (num_layers=1, num_units=4, input_size=5) at Keras layer "
        "'gru' (GRU); note: it computes gru with a variant: gates hard_sigmoid(0.2, 0.5), reset "
        "before the product"
    ) in out


def test_describe_gives_the_variant_as_data() -> None:
    (entry,) = keras_h5.describe_keras_h5(FIXTURES / "keras2/go_backwards_masked_model.h5")
    assert entry == {
        "layer": "lstm",
        "keras_class": "LSTM",
        "rnn_mode": "lstm",
        "num_units": 5,
        "input_size": 4,
        "direction": "unidirectional",
        "variant": {"time": "go_backwards"},
    }
    data = keras_h5.read(FIXTURES / "keras2/go_backwards_masked_model.h5", "lstm")
    assert data.spec.variant == Variant(time="go_backwards")
    assert data.notes == ("it computes lstm with a variant: go_backwards",)


# -- a multi-layer model: merge_layers merges equal variants only ----------------------------


@pytest.mark.parametrize(
    "case", ["keras2/hard_sigmoid_gates_model.h5", "keras2/activations_model.h5"]
)
def test_merge_layers_keeps_layers_of_different_math_apart(case: str) -> None:
    merged = from_keras_h5(FIXTURES / case, merge_layers=True)
    assert list(merged) == list(CASES[case])


def _edited(tmp_path: Path, src: str, edit: Any) -> Path:
    """A copy of a Keras 2 fixture with its model_config edited (``edit(layers)``)."""
    return edited_config(FIXTURES / src, tmp_path, edit)


def _text(name: str | bytes) -> str:
    return name.decode() if isinstance(name, bytes) else name


def _chained(layers: list[_CudnnRNN], x: torch.Tensor) -> torch.Tensor:
    for layer in layers:
        x = layer(x, time_major=False)[0]
    return x


@pytest.mark.parametrize(
    ("gates", "runs"),
    [
        (["hard_sigmoid", "hard_sigmoid", "hard_sigmoid"], [["lstm", "lstm_1", "lstm_2"]]),
        (["sigmoid", "hard_sigmoid", "hard_sigmoid"], [["lstm"], ["lstm_1", "lstm_2"]]),
    ],
)
def test_merge_layers_merges_runs_of_one_variant(
    tmp_path: Path, gates: list[str], runs: list[list[str]]
) -> None:
    """stack_model.h5's three stacked LSTMs with the gates edited: a run of equal variants is one
    layer of ours computing what the separate layers compute one after the other."""

    def edit(layers: list[dict[str, Any]]) -> None:
        for k, gate in enumerate(gates):
            layers[1 + k]["config"]["recurrent_activation"] = gate  # after the InputLayer

    path = _edited(tmp_path, "keras2/stack_model.h5", edit)
    separate = from_keras_h5(path, layers=["lstm", "lstm_1", "lstm_2"])
    merged = from_keras_h5(path, layers=["lstm", "lstm_1", "lstm_2"], merge_layers=True)
    assert list(merged) == ["+".join(run) for run in runs]
    x = torch.from_numpy(np.load(FIXTURES / "keras2/stack_model.npz")["lstm/input"])
    with torch.no_grad():
        want = _chained(list(separate.values()), x)
        got = _chained(list(merged.values()), x)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    assert merged["+".join(runs[-1])].variant == Variant(gate_activation=HARD2)


def test_merge_layers_stacks_merged_bidirectionals_by_their_width(tmp_path: Path) -> None:
    """stack_model.h5's two Bidirectional GRUs with merge_mode 'sum': the second reads the
    first's summed output (width H, not 2H), as ours do with merge='sum'."""

    def edit(layers: list[dict[str, Any]]) -> None:
        for entry in layers:
            if entry["config"].get("name") in ("bidirectional", "bidirectional_1"):
                entry["config"]["merge_mode"] = "sum"

    path = _edited(tmp_path, "keras2/stack_model.h5", edit)
    names = ["bidirectional", "bidirectional_1"]
    with h5py.File(path, "r+") as f:  # the second one's kernel reads H = 2 inputs now
        group = f["model_weights/bidirectional_1"]
        for weight in map(_text, group.attrs["weight_names"]):
            if weight.endswith("/kernel:0"):
                value = group[weight][()]
                del group[weight]
                group.create_dataset(weight, data=value[:2])
    merged = from_keras_h5(path, layers=names, merge_layers=True)
    assert list(merged) == ["+".join(names)]
    (layer,) = merged.values()
    assert layer.num_layers == 2 and layer.variant == Variant(merge="sum")
    separate = from_keras_h5(path, layers=names)
    x = torch.from_numpy(np.load(FIXTURES / "keras2/stack_model.npz")["bidirectional/input"])
    with torch.no_grad():
        want = _chained(list(separate.values()), x)
        got = layer(x, time_major=False)[0]
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


def test_a_go_backwards_layer_is_never_merged(tmp_path: Path) -> None:
    def edit(layers: list[dict[str, Any]]) -> None:
        for k in (1, 2):
            layers[k]["config"]["go_backwards"] = True  # lstm and lstm_1

    path = _edited(tmp_path, "keras2/stack_model.h5", edit)
    merged = from_keras_h5(path, layers=["lstm", "lstm_1", "lstm_2"], merge_layers=True)
    assert list(merged) == ["lstm", "lstm_1", "lstm_2"]
    assert [m.variant.time for m in merged.values()] == ["go_backwards", "go_backwards", "forward"]


# -- Keras 2.0's names for a Bidirectional's backward weights ---------------------------------


def _keras20_names(tmp_path: Path, config: bool) -> Path:
    """bidi_sum_masked_model.h5 with its Bidirectional's weights named as Keras 2.0 on
    TensorFlow wrote them: both layers built in the wrapper's name scope, so the backward
    layer's are ``kernel_1``, ``recurrent_kernel_1``, ``bias_1``
    (``bidirectional/kernel_1:0``); ``config=False``: without the model's config (read as a
    weights-only file)."""
    path = tmp_path / "keras20.h5"
    shutil.copy(FIXTURES / "keras2/bidi_sum_masked_model.h5", path)
    with h5py.File(path, "r+") as f:
        group = f["model_weights/bidirectional"]
        names = []
        for old in map(_text, group.attrs["weight_names"]):
            side, base = old.split("/")[1], old.rsplit("/", 1)[1]
            new = f"bidirectional/{base.replace(':0', '_1:0') if side.startswith('back') else base}"
            group[new] = group[old][()]
            names.append(new)
        del group["bidirectional/forward_lstm"], group["bidirectional/backward_lstm"]
        group.attrs["weight_names"] = np.array([n.encode() for n in names])
        if not config:
            del f.attrs["model_config"]
    return path


@pytest.mark.parametrize("config", [True, False], ids=["model", "weights-only"])
def test_keras20_backward_weight_names_are_read(tmp_path: Path, config: bool) -> None:
    path = _keras20_names(tmp_path, config)
    with h5py.File(path, "r") as f:
        assert "bidirectional/recurrent_kernel_1:0" in f["model_weights/bidirectional"]
    options = {} if config else {"assume_cudnn_activations": True}
    (layer,) = from_keras_h5(path, **options).values()
    assert layer.direction == "bidirectional"
    if not config:  # a weights-only file does not say how the directions merge: concat
        assert layer.variant.is_cudnn
        spec, weights, biases = layer_canonical(layer, "test")
        spec = dataclasses.replace(spec, variant=Variant(merge="sum"))
        cpu, dtype = torch.device("cpu"), torch.float64
        layer = layer_from_canonical(spec, weights, biases, owner="test", dtype=dtype, device=cpu)
    _check(layer, _oracle(FIXTURES / "keras2/bidi_sum_masked_model.h5"), "bidirectional")


# -- what the Keras that wrote the file meant -------------------------------------------------


def _with_version(tmp_path: Path, src: str, version: str | None) -> Path:
    path = tmp_path / Path(src).name
    shutil.copy(FIXTURES / src, path)
    with h5py.File(path, "r+") as f:
        for group in (f, f.get("model_weights")):
            if group is not None:
                group.attrs.pop("keras_version", None)
                if version is not None:
                    group.attrs["keras_version"] = version
    return path


def test_hard_sigmoid_of_an_h5_without_a_version_is_keras2_s_with_a_note(tmp_path: Path) -> None:
    path = _with_version(tmp_path, "keras2/hard_sigmoid_model.h5", None)
    (found,) = cudnn_rnn.find_rnns(path)
    assert found.notes[1] == (
        "recurrent_activation hard_sigmoid(0.2, 0.5): the file records no keras_version, so it "
        "is read as Keras 2's"
    )
    _check(cudnn_rnn.load(path), _oracle(FIXTURES / "keras2/hard_sigmoid_model.h5"), "lstm")


def test_hard_sigmoid_of_an_h5_saved_by_keras3_is_keras3_s(tmp_path: Path) -> None:
    """Keras 3 saves the legacy .h5 format too, with its own keras_version."""
    path = _with_version(tmp_path, "keras2/hard_sigmoid_model.h5", "3.15.1")
    layer = cudnn_rnn.load(path)
    assert layer.variant == Variant(gate_activation=HARD3)
    assert cudnn_rnn.find_rnns(path)[0].notes == (
        "it computes lstm with a variant: gates hard_sigmoid(0.16666666666666666, 0.5)",
    )


def _with_metadata(tmp_path: Path, src: str, metadata: dict[str, Any] | None) -> Path:
    """A copy of a .keras fixture with its metadata.json replaced (None: left out)."""
    path = tmp_path / Path(src).name
    with zipfile.ZipFile(FIXTURES / src) as old, zipfile.ZipFile(path, "w") as new:
        for item in old.infolist():
            if item.filename != keras3.METADATA:
                new.writestr(item, old.read(item))
        if metadata is not None:
            new.writestr(keras3.METADATA, json.dumps(metadata))
    return path


@pytest.mark.parametrize(
    ("metadata", "gates", "note"),
    [
        ({"keras_version": "3.15.1"}, HARD3, None),
        ({"keras_version": "2.15.0"}, HARD2, None),  # tf-keras's .keras format
        (None, HARD3, "the file records no keras_version, so it is read as Keras 3's"),
        ({"keras_version": 3}, HARD3, "the file records no keras_version"),
    ],
    ids=["keras3", "tf-keras", "no-metadata", "not-text"],
)
def test_hard_sigmoid_of_a_keras_archive_follows_its_metadata(
    tmp_path: Path, metadata: dict[str, Any] | None, gates: Activation, note: str | None
) -> None:
    path = _with_metadata(tmp_path, "keras3/lstm_hard_sigmoid.keras", metadata)
    (found,) = keras3.find_rnns(path)
    assert keras3.read(path, "lstm").spec.variant == Variant(gate_activation=gates)
    assert len(found.notes) == (1 if note is None else 2)
    assert note is None or note in found.notes[1]


@pytest.mark.parametrize(
    ("version", "old", "major"),
    [
        ("2.2.4", True, 2),
        ("2.2.4-tf", True, 2),  # TF 1.13-1.15 (hard_sigmoid), also TF 2.0/2.1: unknowable
        ("2", True, 2),
        ("unknown", True, 2),
        ("2.3.0-tf", False, 2),
        ("2.21.0", False, 2),
        ("3.8.0", False, 3),
    ],
)
def test_the_rule_of_versions(version: str, old: bool, major: int) -> None:
    dialect = Dialect(version)
    assert (dialect.predates_sigmoid, dialect.major) == (old, major)
    assert dialect.hard_sigmoid == (HARD3 if major == 3 else HARD2)
    assert dialect.reset_after is (major == 3)


# -- weights-only files: Keras's defaults, as the file's version had them ---------------------


def test_weights_only_reset_before_gru_with_keras_defaults() -> None:
    """reset_before_weights.h5 holds reset_before_model.h5's weights without the config: the
    [3H] bias says reset before the product; the activations are the caller's word."""
    path = FIXTURES / "keras2/reset_before_weights.h5"
    with pytest.raises(ValueError, match=r"does not record the activations of plain GRU layers"):
        from_keras_h5(path)
    (layer,) = from_keras_h5(path, assume_cudnn_activations=True).values()
    assert layer.variant == Variant(reset_after=False)
    _check(layer, _oracle(FIXTURES / "keras2/reset_before_model.h5"), "gru")


# -- what is still refused --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (
            lambda c: c.update(merge_mode=None),
            r"merge_mode=None returns the two directions' outputs as a list of two tensors, and "
            r"our layers return one; read it as merge_mode='concat'",
        ),
        (
            lambda c: c["layer"]["config"].update(activation="gelu"),
            r"activation 'gelu' is no function we compute \(Keras's we do: elu, exponential, "
            r"hard_sigmoid, linear, relu, selu, sigmoid, silu, softplus, softsign, swish, "
            r"tanh\); retrain with one of them\.",
        ),
    ],
    ids=["merge-none", "gelu"],
)
def test_what_we_do_not_compute_is_refused_in_one_line(
    tmp_path: Path, edit: Any, match: str
) -> None:
    def edited(layers: list[dict[str, Any]]) -> None:
        edit(layers[-1]["config"])  # the Bidirectional, after the Masking layer

    path = _edited(tmp_path, "keras2/bidi_sum_masked_model.h5", edited)
    with pytest.raises(
        ValueError, match=rf"layer 'bidirectional' \(Bidirectional\(LSTM\)\): {match}"
    ):
        from_keras_h5(path)
    (found,) = cudnn_rnn.find_rnns(path)
    assert not found.computable and len(found.reasons) == 1
