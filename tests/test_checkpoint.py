"""Canonical safetensors checkpoints: names, metadata, atomicity, all-or-nothing restore."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from cudnn_rnn import checkpoint
from cudnn_rnn.layers import CudnnGRU, CudnnLSTM, CudnnRNNTanh
from cudnn_rnn.saveable import CudnnGRUSaveable


def _header(path: Path) -> dict[str, object]:
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + n])  # type: ignore[no-any-return]


def test_layer_roundtrip_names_and_metadata(tmp_path: Path) -> None:
    a = CudnnGRU(2, 3, direction="bidirectional", input_size=2, seed=1, scope="m1")
    path = tmp_path / "gru.safetensors"
    checkpoint.save(path, a)
    header = _header(path)
    names = [k for k in header if k != "__metadata__"]
    assert sorted(names) == sorted(s.name for s in a.saveable.specs)
    assert (
        "m1/stack_bidirectional_rnn/cell_1/bidirectional_rnn/bw/cudnn_compatible_gru_cell/"
        "candidate/hidden_projection/bias" in names
    )
    assert header[
        "m1/stack_bidirectional_rnn/cell_0/bidirectional_rnn/fw/cudnn_compatible_gru_"
        "cell/gates/kernel"
    ]["shape"] == [5, 6]  # type: ignore[index]
    meta = header["__metadata__"]
    assert meta["format"] == "cudnn_rnn.canonical" and meta["format_version"] == "1"  # type: ignore[index]
    (model,) = checkpoint.describe(path)
    assert model["layer"] == "CudnnGRU" and model["num_layers"] == 2 and model["input_size"] == 2
    assert list(tmp_path.iterdir()) == [path]  # the temporary file was renamed, not left behind

    b = CudnnGRU(2, 3, direction="bidirectional", input_size=2, seed=2, scope="m1")
    checkpoint.restore(path, b)
    x = torch.randn(4, 2, 2)
    np.testing.assert_allclose(b(x)[0].detach().numpy(), a(x)[0].detach().numpy(), atol=1e-6)
    wa, _ = a._op.params_to_canonical(a.opaque_kernel.detach())  # type: ignore[union-attr]
    wb, _ = b._op.params_to_canonical(b.opaque_kernel.detach())  # type: ignore[union-attr]
    assert all(torch.equal(p, q) for p, q in zip(wa, wb))  # weights exact


def test_restore_reports_every_problem_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "lstm.safetensors"
    checkpoint.save(path, CudnnLSTM(2, 4, input_size=3, seed=0))
    target = CudnnLSTM(3, 4, input_size=5, seed=1)
    before = target.opaque_kernel.detach().clone()
    with pytest.raises(checkpoint.CheckpointError) as info:
        checkpoint.restore(path, target)
    problems = info.value.problems
    assert (
        "missing tensor 'rnn/multi_rnn_cell/cell_2/cudnn_compatible_lstm_cell/kernel' "
        "(expected shape [8, 16])" in problems
    )
    assert (
        "tensor 'rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/kernel' has shape "
        "[7, 16], expected [9, 16]" in problems
    )
    assert len(problems) == 3
    assert "nothing was restored" in str(info.value)
    assert torch.equal(target.opaque_kernel, before)
    smaller = CudnnLSTM(1, 4, input_size=3)
    with pytest.raises(
        checkpoint.CheckpointError,
        match=r"unexpected tensor 'rnn/multi_rnn_cell/"
        r"cell_1/cudnn_compatible_lstm_cell/",
    ):
        checkpoint.restore(path, smaller)
    checkpoint.restore(path, smaller, strict=False)  # a subset is fine when asked


def test_several_objects_modules_and_dtype_cast(tmp_path: Path) -> None:
    class Model(torch.nn.Module):
        def __init__(self, dtype: torch.dtype) -> None:
            super().__init__()
            self.encoder = CudnnLSTM(1, 4, input_size=2, scope="enc", dtype=dtype)
            self.decoder = torch.nn.Sequential(
                CudnnRNNTanh(1, 3, input_size=4, scope="dec", dtype=dtype)
            )

    path = tmp_path / "model.safetensors"
    source = Model(torch.float32)
    checkpoint.save(path, source)
    assert len(checkpoint.describe(path)) == 2
    target = Model(torch.float64)
    checkpoint.restore(path, target)
    x = torch.randn(3, 1, 2)
    np.testing.assert_allclose(
        target.encoder(x.double())[0].detach().numpy(),
        source.encoder(x)[0].detach().numpy(),
        atol=1e-6,
    )
    with pytest.raises(
        ValueError,
        match=r"checkpoint: two objects write 'rnn/multi_rnn_cell/"
        r"cell_0/cudnn_compatible_lstm_cell/kernel'; give",
    ):
        checkpoint.save(path, [CudnnLSTM(1, 2, input_size=2), CudnnLSTM(1, 2, input_size=2)])


def test_saveable_objects_and_bias_halving(tmp_path: Path) -> None:
    params = torch.nn.Parameter(torch.randn(CudnnGRU(1, 2, input_size=2).count_params()))
    saveable = CudnnGRUSaveable(params, 1, 2, 2)
    path = tmp_path / "s.safetensors"
    checkpoint.save(path, saveable)
    other = torch.nn.Parameter(torch.zeros_like(params))
    checkpoint.restore(path, CudnnGRUSaveable(other, 1, 2, 2))
    op = CudnnGRU(1, 2, input_size=2)._op
    assert op is not None
    (_, bias_src), (_, bias_dst) = op.params_to_canonical(params), op.params_to_canonical(other)
    for g in range(2):  # r, u: halves of the sum; the candidate's two biases: exact
        half = (bias_src[g] + bias_src[3 + g]) / 2
        assert torch.equal(bias_dst[g], bias_dst[3 + g])
        torch.testing.assert_close(bias_dst[g], half)
    assert torch.equal(bias_dst[2], bias_src[2]) and torch.equal(bias_dst[5], bias_src[5])


def test_bad_files(tmp_path: Path) -> None:
    layer = CudnnLSTM(1, 2, input_size=2)
    with pytest.raises(FileNotFoundError, match=r"nothing\.safetensors: cannot read it: .*ENOENT"):
        checkpoint.restore(tmp_path / "nothing.safetensors", layer)
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a checkpoint at all")
    with pytest.raises(ValueError, match=r"junk\.safetensors: not a readable safetensors file"):
        checkpoint.restore(junk, layer)
    good = tmp_path / "good.safetensors"
    checkpoint.save(good, layer)
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(good.read_bytes()[:-5])
    with pytest.raises(ValueError, match=r"not a readable safetensors file"):
        checkpoint.restore(truncated, layer)
    from safetensors.torch import save_file

    newer = tmp_path / "newer.safetensors"
    save_file(
        {"x": torch.zeros(1)},
        newer,
        metadata={"format": "cudnn_rnn.canonical", "format_version": "3"},
    )
    with pytest.raises(ValueError, match=r"format_version '3' is newer than this library's \(2\)"):
        checkpoint.restore(newer, layer)
    other = tmp_path / "other.safetensors"
    save_file({"x": torch.zeros(1)}, other, metadata={"format": "something"})
    with pytest.raises(ValueError, match=r"format 'something' is not 'cudnn_rnn.canonical'"):
        checkpoint.restore(other, layer)
    with pytest.raises(
        TypeError,
        match=r"checkpoint: no checkpointable object given .* got "
        r"Linear\.",
    ):
        checkpoint.save(good, torch.nn.Linear(2, 2))


def test_failed_write_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.safetensors"
    checkpoint.save(path, CudnnLSTM(1, 2, input_size=2, seed=0))
    before = path.read_bytes()

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        checkpoint.save(path, CudnnLSTM(1, 2, input_size=2, seed=1))
    assert path.read_bytes() == before and list(tmp_path.iterdir()) == [path]


def test_training_survives_save_and_restore(tmp_path: Path) -> None:
    torch.manual_seed(0)
    x, target = torch.randn(6, 4, 3), torch.randn(6, 4, 5)

    def step(layer: CudnnLSTM, opt: torch.optim.Optimizer) -> float:
        opt.zero_grad()
        loss = ((layer(x)[0] - target) ** 2).mean()
        loss.backward()
        opt.step()
        return loss.item()

    layer = CudnnLSTM(2, 5, input_size=3, seed=3, dtype=torch.float64)
    teacher = CudnnLSTM(2, 5, input_size=3, seed=4, dtype=torch.float64)
    x = x.double()
    target = teacher(x)[0].detach()  # a target the student can reach
    opt = torch.optim.SGD(layer.parameters(), lr=2.0)
    first = [step(layer, opt) for _ in range(10)]
    path = tmp_path / "mid.safetensors"
    checkpoint.save(path, layer)
    rest = [step(layer, opt) for _ in range(10)]
    assert rest[-1] < first[0] * 0.5  # it learns

    resumed = CudnnLSTM(2, 5, input_size=3, seed=99, dtype=torch.float64)
    checkpoint.restore(path, resumed)
    opt2 = torch.optim.SGD(resumed.parameters(), lr=2.0)
    again = [step(resumed, opt2) for _ in range(10)]
    # The file keeps bW + bR only (halved on restore); SGD moves both halves by the same
    # gradient, so the function follows the same path up to rounding.
    np.testing.assert_allclose(again, rest, rtol=1e-9)

    # Restoring in place while an optimizer holds the parameter keeps it working.
    param = layer.opaque_kernel
    checkpoint.restore(path, layer)
    assert layer.opaque_kernel is param
    np.testing.assert_allclose([step(layer, opt) for _ in range(10)], rest, rtol=1e-9)
