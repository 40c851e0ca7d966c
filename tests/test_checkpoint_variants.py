"""Our checkpoints hold a variant (issue 47, item 4).

A layer computing a variant of cuDNN's math (every row of the variant engine's ``GRID``) saves
to our ``.safetensors`` checkpoint (``checkpoint.save``, ``convert.to_file``, ``cudnn-rnn
convert``) and reads back (``cudnn_rnn.load``, ``find_rnns``, ``checkpoint.restore``) as the same
spec, the same buffer bits and the same outputs. The metadata's model entry holds the variant,
an LSTM's peepholes are ``w_i_diag, w_f_diag, w_o_diag`` under the cell scope, and the file is
``format_version`` 2, which a reader of version 1 refuses; a four-mode layer's file is what it
always was (version 1, no ``variant`` key, the same tensors). What cannot hold a variant (TF1's
checkpoints, TF's saver, torch.nn) says so in one line and writes nothing; an edited file whose
variant this version does not know is refused in one line naming the file.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

import cudnn_rnn
from cudnn_rnn import checkpoint, convert
from cudnn_rnn.cli import main
from cudnn_rnn.core import tf_names
from cudnn_rnn.core.layout import INPUT_BIAS, PEEPHOLE, RECURRENT_BIAS, layout_of
from cudnn_rnn.core.variant import Variant
from cudnn_rnn.io import safetensors as st
from cudnn_rnn.layers import CudnnGRU, CudnnLSTM, CudnnRNNRelu, CudnnRNNTanh
from tests.engines.test_variant_engine import GRID, IDS, LAYERS, SIZE, UNITS

Row = tuple[str, int, Variant, dict[str, Any]]
ROWS = pytest.mark.parametrize(("mode", "layers", "variant", "kwargs"), GRID, ids=IDS)


def _layer(mode: str, layers: int, variant: Variant, kwargs: dict[str, Any], seed: int = 0) -> Any:
    """A float64 layer of the row with random weights and, where ``even``, each gate's two
    biases equal: the form a summed bias reads back in (its halves), so the bits round-trip."""
    layer = LAYERS[mode](
        layers, UNITS, input_size=SIZE, dtype=torch.float64, variant=variant, **kwargs
    )
    flat = layer.opaque_kernel
    with torch.no_grad():
        gen = torch.Generator().manual_seed(100 + seed)
        flat.copy_(0.6 * torch.randn(flat.shape, generator=gen, dtype=torch.float64))
    return layer


def _even(layer: Any) -> Any:
    """``layer`` with every recurrent bias set to its gate's input bias."""
    table = layout_of(layer.spec).biases
    where = {(p.layer, p.direction, p.kind, p.gate): p for p in table}
    with torch.no_grad():
        for p in table:
            if p.kind == RECURRENT_BIAS:
                src = where[p.layer, p.direction, INPUT_BIAS, p.gate]
                layer.opaque_kernel[p.offset : p.offset + p.size] = layer.opaque_kernel[
                    src.offset : src.offset + src.size
                ]
    return layer


def _run(layer: Any) -> tuple[torch.Tensor, ...]:
    """The outputs and final states on a fixed input with sequence lengths."""
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(5, 3, SIZE, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        y, states = layer(x, sequence_lengths=torch.tensor([5, 2, 4]))
    return (y, *states)


def _same(a: Any, b: Any) -> None:
    assert b.spec == a.spec
    assert b.dtype == a.dtype == torch.float64
    assert torch.equal(b.opaque_kernel, a.opaque_kernel)
    assert all(torch.equal(p, q) for p, q in zip(_run(a), _run(b), strict=True))


def _header(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + n])  # type: ignore[no-any-return]


def _rewrite(path: Path, out: Path, **metadata: str) -> Path:
    """``path``'s tensors under its metadata changed by ``metadata``."""
    tensors, meta = checkpoint.load_file(path)
    save_file(tensors, out, metadata={**meta, **metadata})
    return out


# -- round trips ----------------------------------------------------------------------------------


@ROWS
def test_save_then_load_gives_the_same_spec_bits_and_outputs(
    mode: str, layers: int, variant: Variant, kwargs: dict[str, Any], tmp_path: Path
) -> None:
    layer = _even(_layer(mode, layers, variant, kwargs))
    path = tmp_path / "m.safetensors"
    checkpoint.save(path, layer)
    meta = _header(path)["__metadata__"]
    assert meta["format_version"] == "2"
    (model,) = json.loads(meta["models"])
    assert Variant.from_dict(model["variant"]) == layer.spec.variant
    assert model["variant"] == layer.spec.variant.as_dict()
    _same(layer, cudnn_rnn.load(path))
    (found,) = cudnn_rnn.find_rnns(path)
    assert found.computable and found.mode == layer.spec.mode
    assert found.details["variant"] == layer.spec.variant.as_dict()
    assert found.notes[0] == (
        f"it computes {layer.spec.mode} with a variant: {layer.spec.variant.describe()}"
    )


@ROWS
def test_restore_into_a_fresh_layer_of_the_same_config(
    mode: str, layers: int, variant: Variant, kwargs: dict[str, Any], tmp_path: Path
) -> None:
    layer = _even(_layer(mode, layers, variant, kwargs))
    path = tmp_path / "m.safetensors"
    checkpoint.save(path, layer)
    fresh = LAYERS[mode](
        layers, UNITS, input_size=SIZE, dtype=torch.float64, variant=variant, seed=5, **kwargs
    )
    assert not torch.equal(fresh.opaque_kernel, layer.opaque_kernel)
    checkpoint.restore(path, fresh)
    _same(layer, fresh)


@ROWS
def test_convert_writes_it_and_reads_it_back(
    mode: str, layers: int, variant: Variant, kwargs: dict[str, Any], tmp_path: Path
) -> None:
    layer = _even(_layer(mode, layers, variant, kwargs))
    first = tmp_path / "first.safetensors"
    assert convert.to_file(layer, first).name == "safetensors"
    second = tmp_path / "second.safetensors"
    assert main(["convert", str(first), str(second)]) == 0
    again = cudnn_rnn.load(second)
    _same(layer, again)
    a, meta_a = checkpoint.load_file(first)
    b, meta_b = checkpoint.load_file(second)
    assert meta_a == meta_b and a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)


@ROWS
def test_a_split_bias_reads_back_as_halves_computing_the_same(
    mode: str, layers: int, variant: Variant, kwargs: dict[str, Any], tmp_path: Path
) -> None:
    """With each gate's two biases apart (the file keeps their sum, as for the four modes), the
    weights and peepholes read back exactly and the outputs to rounding."""
    layer = _layer(mode, layers, variant, kwargs, seed=1)
    path = tmp_path / "m.safetensors"
    checkpoint.save(path, layer)
    again = cudnn_rnn.load(path)
    assert again.spec == layer.spec
    table = layout_of(layer.spec)
    wa, ba = table.unpack(layer.opaque_kernel.detach())
    wb, bb = table.unpack(again.opaque_kernel.detach())
    assert all(torch.equal(p, q) for p, q in zip(wa, wb, strict=True))
    assert all(
        torch.equal(p, q)
        for t, p, q in zip(table.biases, ba, bb, strict=True)
        if t.kind == PEEPHOLE
    )
    for p, q in zip(_run(layer), _run(again), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-12, atol=1e-13)


def test_peepholes_are_named_as_tf_lstm_cell_names_them(tmp_path: Path) -> None:
    layer = _layer("lstm", 2, Variant(peepholes=True), {"direction": "bidirectional"})
    path = tmp_path / "m.safetensors"
    checkpoint.save(path, layer)
    tensors, _ = checkpoint.load_file(path)
    _, biases = layout_of(layer.spec).unpack(layer.opaque_kernel.detach())
    peepholes = [
        (p, b)
        for p, b in zip(layout_of(layer.spec).biases, biases, strict=True)
        if p.kind == PEEPHOLE
    ]
    assert len(peepholes) == 2 * 2 * 3
    for p, value in peepholes:
        d = "bw" if p.direction else "fw"
        name = (
            f"stack_bidirectional_rnn/cell_{p.layer}/bidirectional_rnn/{d}/"
            f"cudnn_compatible_lstm_cell/w_{p.gate}_diag"
        )
        assert torch.equal(tensors[name], value)
    assert dict(tf_names.PEEPHOLE_NAMES) == {"i": "w_i_diag", "f": "w_f_diag", "o": "w_o_diag"}


# -- what cannot hold a variant -------------------------------------------------------------------

TF1_SAYS = r"TF's cuDNN-compatible cells, which compute cuDNN's math only.*\.safetensors"


@ROWS
def test_the_tf1_format_refuses_in_one_line_and_writes_nothing(
    mode: str,
    layers: int,
    variant: Variant,
    kwargs: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    layer = _layer(mode, layers, variant, kwargs)
    out = tmp_path / "out"
    out.mkdir()
    for call in (
        lambda: checkpoint.save(out / "m", layer, format="tf"),
        lambda: convert.to_file(layer, out / "m.ckpt"),
        lambda: layer.saveable.specs,
    ):
        with pytest.raises(ValueError, match=TF1_SAYS) as info:
            call()
        assert "\n" not in str(info.value) and variant.describe() in str(info.value)
    source = tmp_path / "m.safetensors"
    checkpoint.save(source, layer)
    capsys.readouterr()
    assert main(["convert", str(source), str(out / "m.ckpt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "compute cuDNN's math only" in err and ".safetensors" in err
    assert list(out.iterdir()) == []


def test_torch_state_dict_refuses_in_one_line(tmp_path: Path) -> None:
    layer = _layer("lstm", 1, Variant(peepholes=True), {})
    with pytest.raises(ValueError, match=r"torch\.nn's RNNs compute cuDNN's four modes only") as e:
        convert.to_file(layer, tmp_path / "m.pt")
    assert "\n" not in str(e.value) and list(tmp_path.iterdir()) == []


# -- the format: versions, edited files -----------------------------------------------------------


def test_a_reader_of_version_1_refuses_a_variant_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader that knows version 1 only (the check every release had) refuses the file
    rather than read a variant as cuDNN's math; a four-mode file it still reads."""
    variant = _layer("gru", 1, Variant(reset_after=False), {})
    plain = CudnnGRU(1, UNITS, input_size=SIZE, dtype=torch.float64)
    checkpoint.save(tmp_path / "variant.safetensors", variant)
    checkpoint.save(tmp_path / "plain.safetensors", plain)
    monkeypatch.setattr(st, "FORMAT_VERSION", 1)
    says = r"format_version '2' is newer than this library's \(1\); upgrade cudnn_rnn"
    for call in (checkpoint.describe, cudnn_rnn.load, cudnn_rnn.find_rnns):
        with pytest.raises(checkpoint.CheckpointError, match=says):
            call(tmp_path / "variant.safetensors")
    with pytest.raises(checkpoint.CheckpointError, match=says):
        checkpoint.restore(tmp_path / "variant.safetensors", plain)
    assert cudnn_rnn.load(tmp_path / "plain.safetensors").spec == plain.spec


#: Edited variants, each refused in one line: what it says.
EDITED = [
    ({"reset_after": False, "wobble": 1}, r"variant has field\(s\) 'wobble' that this version"),
    ({"reset_after": "no"}, r"variant .* does not describe a model \(.*reset_after must be a bool"),
    ({"peepholes": True}, r"does not describe a model \(variant: rnn_mode 'gru' has no peepholes"),
    ({"time": "sideways"}, r"does not describe a model \(Variant: time must be one of"),
    ({"gate_activation": {"name": "nope"}}, r"unknown activation 'nope'"),
    ([1, 2], r"variant must be an object of fields, got \[1, 2\]"),
    ({"cell_activation": "tanh"}, r"is not as cudnn_rnn writes it"),
]


@pytest.mark.parametrize(("edit", "says"), EDITED, ids=[str(e) for e, _ in EDITED])
def test_an_edited_variant_is_refused_in_one_line_naming_the_file(
    edit: Any, says: str, tmp_path: Path
) -> None:
    layer = _layer("gru", 1, Variant(reset_after=False), {})
    good = tmp_path / "good.safetensors"
    checkpoint.save(good, layer)
    (model,) = checkpoint.describe(good)
    bad = _rewrite(
        good, tmp_path / "bad.safetensors", models=json.dumps([{**model, "variant": edit}])
    )
    fresh = CudnnGRU(
        1, UNITS, input_size=SIZE, dtype=torch.float64, variant=Variant(reset_after=False)
    )
    for call in (
        checkpoint.describe,
        cudnn_rnn.load,
        cudnn_rnn.find_rnns,
        lambda p: checkpoint.restore(p, fresh),
    ):
        with pytest.raises(checkpoint.CheckpointError, match=says) as info:
            call(bad)
        message = str(info.value)
        assert message.startswith(f"checkpoint {bad}: metadata 'models' entry 0: variant")
        assert "\n" not in message


def test_a_variant_in_a_version_1_file_is_refused(tmp_path: Path) -> None:
    """A version-1 file is cuDNN's math for every reader: one that says otherwise is corrupt."""
    layer = _layer("gru", 1, Variant(reset_after=False), {})
    good = tmp_path / "good.safetensors"
    checkpoint.save(good, layer)
    bad = _rewrite(good, tmp_path / "bad.safetensors", format_version="1")
    with pytest.raises(
        checkpoint.CheckpointError, match=r"variant in a file of format_version 1; a variant needs"
    ) as info:
        cudnn_rnn.load(bad)
    assert "\n" not in str(info.value)


# -- restore compares the math --------------------------------------------------------------------


def test_restore_refuses_another_math(tmp_path: Path) -> None:
    variant = Variant(reset_after=False)
    with_variant = _layer("gru", 1, variant, {})
    plain = CudnnGRU(1, UNITS, input_size=SIZE, dtype=torch.float64)
    checkpoint.save(tmp_path / "variant.safetensors", with_variant)
    checkpoint.save(tmp_path / "plain.safetensors", plain)
    checkpoint.save(tmp_path / "plain", plain, format="tf")
    before = plain.opaque_kernel.detach().clone()
    with pytest.raises(
        checkpoint.CheckpointError,
        match=r"CudnnGRU computes cuDNN's math, and the file's model of its scope and direction "
        r"computes a variant \(reset before the product\)",
    ):
        checkpoint.restore(tmp_path / "variant.safetensors", plain)
    assert torch.equal(plain.opaque_kernel, before)
    with pytest.raises(
        checkpoint.CheckpointError,
        match=r"CudnnGRU computes a variant \(reset before the product\), and the file's model .* "
        r"computes cuDNN's math",
    ):
        checkpoint.restore(tmp_path / "plain.safetensors", with_variant)
    with pytest.raises(
        checkpoint.CheckpointError,
        match=r"CudnnGRU computes a variant .*, and a TF1 checkpoint holds TF's cuDNN-compatible "
        r"cells, which compute cuDNN's math only; restore it from a \.safetensors checkpoint",
    ):
        checkpoint.restore(tmp_path / "plain", with_variant)


def test_models_of_several_scopes_each_keep_their_math(tmp_path: Path) -> None:
    a = _even(_layer("lstm", 1, Variant(peepholes=True), {"scope": "a"}))
    b = _even(_layer("gru", 2, Variant(reset_after=False), {"scope": "b"}, seed=2))
    c = CudnnRNNTanh(1, UNITS, input_size=SIZE, dtype=torch.float64, scope="c")
    path = tmp_path / "m.safetensors"
    checkpoint.save(path, [a, b, c])
    assert [m.get("variant") for m in checkpoint.describe(path)] == [
        {"peepholes": True},
        {"reset_after": False},
        None,
    ]
    for name, layer in (("a", a), ("b", b), ("c", c)):
        again = cudnn_rnn.load(path, name)
        assert again.spec == layer.spec and torch.equal(again.opaque_kernel, layer.opaque_kernel)


# -- the four modes' files are what they were ------------------------------------------------------

#: Files of the four modes as every release wrote them: (layer, its metadata 'models', SHA-256 of
#: the header's tensor entries (sorted JSON) and of the data). The order of the header's keys is
#: not pinned: safetensors' writer does not fix it (it varies between runs).
PINNED = [
    (
        lambda: CudnnLSTM(2, 3, input_size=2, num_proj=2, direction="bidirectional"),
        '[{"direction": "bidirectional", "input_mode": "linear_input", "input_size": 2, "kind": '
        '"layer", "layer": "CudnnLSTM", "num_layers": 2, "num_proj": 2, "num_units": 3, '
        '"rnn_mode": "lstm", "scope": null}]',
        "5aed91f4875b1efcee5723309766386a59e72d4d9673606651a16613bd84d2a2",
        "c8875050a1f0b33e2ddbef742514a7a91f0845a61db05ecbf9827e5d65c4f8a3",
    ),
    (
        lambda: CudnnGRU(2, 3, input_size=2, scope="m"),
        '[{"direction": "unidirectional", "input_mode": "linear_input", "input_size": 2, "kind": '
        '"layer", "layer": "CudnnGRU", "num_layers": 2, "num_proj": null, "num_units": 3, '
        '"rnn_mode": "gru", "scope": "m"}]',
        "374fe20be04f15091535dfbe73a14aadcf67972bbd5b7367a787b3bc82d6854b",
        "687292a88920116eb6c1aaab78117aca08413fa12c6a3423cf341ac280dd2c42",
    ),
    (
        lambda: CudnnRNNTanh(
            2, 3, input_size=3, direction="bidirectional", input_mode="skip_input"
        ),
        '[{"direction": "bidirectional", "input_mode": "skip_input", "input_size": 3, "kind": '
        '"layer", "layer": "CudnnRNNTanh", "num_layers": 2, "num_proj": null, "num_units": 3, '
        '"rnn_mode": "rnn_tanh", "scope": null}]',
        "7d9189ddc8f28c029e9e1b45f4309f306b77677bad2d34cf044a895880c0c740",
        "8902103448b7f407528560bed97733f89b184dab12c263277cf7f4c81833b7cd",
    ),
    (
        lambda: CudnnRNNRelu(2, 3, input_size=2, dtype=torch.float64),
        '[{"direction": "unidirectional", "input_mode": "linear_input", "input_size": 2, "kind": '
        '"layer", "layer": "CudnnRNNRelu", "num_layers": 2, "num_proj": null, "num_units": 3, '
        '"rnn_mode": "rnn_relu", "scope": null}]',
        "9b39ebf61546d711a2149119587daa5361aaa2ffb72fbded1d2111a783aef3c1",
        "eef5bf8e21a7a35281e56fa7e419353f91d12ade6de9f84f925ec8f8adb7c5cb",
    ),
]


@pytest.mark.parametrize(
    ("make", "models", "entries", "data"), PINNED, ids=["lstm", "gru", "rnn_tanh", "rnn_relu"]
)
def test_the_four_modes_files_are_what_they_were(
    make: Any, models: str, entries: str, data: str, tmp_path: Path
) -> None:
    layer = make()
    n = layer.opaque_kernel.numel()
    with torch.no_grad():  # exact values: the pin does not depend on an initializer
        layer.opaque_kernel.copy_((torch.arange(n) % 17 - 8).to(layer.dtype) / 8)
    path = tmp_path / "m.safetensors"
    checkpoint.save(path, layer)
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    meta = header.pop("__metadata__")
    assert meta == {"format": "cudnn_rnn.canonical", "format_version": "1", "models": models}
    assert "variant" not in json.loads(meta["models"])[0]
    assert hashlib.sha256(json.dumps(header, sort_keys=True).encode()).hexdigest() == entries
    assert hashlib.sha256(raw[8 + size :]).hexdigest() == data
