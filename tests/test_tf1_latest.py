"""A TF1 checkpoint directory, or its ``checkpoint`` state file, means the latest checkpoint (as
``tf.train.latest_checkpoint``), at every entry point: ``find_rnns``, ``load``,
``checkpoint.restore``, ``convert.find_rnns`` and the command's ``inspect`` and ``convert``
(issue 49). The bundles are real TensorFlow's (tests/fixtures/tf1), copied beside a state file
as ``tf.train.Saver`` leaves them."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest
import torch

import cudnn_rnn
from cudnn_rnn import checkpoint, convert
from cudnn_rnn.cli import main
from cudnn_rnn.io.tf1 import state
from cudnn_rnn.io.tf1.state import CheckpointStateError

FIXTURES = Path(__file__).parent / "fixtures" / "tf1"
SUFFIXES = (".index", ".data-00000-of-00001")


def _copy(fixture: str, prefix: Path) -> None:
    for suffix in SUFFIXES:
        shutil.copyfile(FIXTURES / f"{fixture}.ckpt{suffix}", f"{prefix}{suffix}")


def _state_file(folder: Path, latest: str, *older: str) -> Path:
    """The text-format CheckpointState TF's saver writes (TF 1.15: with the timestamps)."""
    lines = [f'model_checkpoint_path: "{latest}"']
    lines += [f'all_model_checkpoint_paths: "{p}"' for p in (*older, latest)]
    lines += [f"all_model_checkpoint_timestamps: {1.6e9 + k}" for k in range(len(older) + 1)]
    lines += ["last_preserved_timestamp: 1599999999.5"]
    path = folder / "checkpoint"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    """A training directory: an older LSTM at step 100, the latest (a bidirectional GRU) at 200,
    and the state file naming the latest."""
    folder = tmp_path / "train"
    folder.mkdir()
    _copy("cudnn_lstm", folder / "model.ckpt-100")
    _copy("cudnn_gru_bidi", folder / "model.ckpt-200")
    _state_file(folder, "model.ckpt-200", "model.ckpt-100")
    return folder


def _listing(path: Path | str) -> list[tuple[str, str | None, str | None, str]]:
    return [(f.name, f.mode, f.direction, f.format) for f in cudnn_rnn.find_rnns(path)]


def test_the_directory_and_its_state_file_mean_the_latest_checkpoint(saved: Path) -> None:
    latest = saved / "model.ckpt-200"
    assert state.resolve(saved) == str(latest)
    assert state.resolve(saved / "checkpoint") == str(latest)
    assert state.resolve(latest) == str(latest)  # a prefix is itself
    want = _listing(latest)
    assert want and want[0][1:3] == ("gru", "bidirectional")
    assert _listing(saved) == _listing(saved / "checkpoint") == want
    assert [(f.name, f.mode) for f in convert.find_rnns(saved)] == [(n, m) for n, m, *_ in want]


def test_load_and_restore_read_the_latest_checkpoint(saved: Path) -> None:
    want = cudnn_rnn.load(saved / "model.ckpt-200")
    for given in (saved, saved / "checkpoint", str(saved)):
        got = cudnn_rnn.load(given)
        assert torch.equal(got.opaque_kernel, want.opaque_kernel)
    # (this test file's opaque kernel fits no cuDNN layout: the canonical tensors are read)
    expected = copy.deepcopy(want)  # the checkpoint's model, under its scope
    checkpoint.restore(saved / "model.ckpt-200", expected, opaque_name=False)
    restored = copy.deepcopy(want)
    for given in (saved, saved / "checkpoint"):
        with torch.no_grad():
            restored.opaque_kernel.zero_()
        checkpoint.restore(given, restored, opaque_name=False)
        assert torch.equal(restored.opaque_kernel, expected.opaque_kernel)


def test_an_absolute_path_in_the_state_file_is_read_as_it_is(saved: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _state_file(elsewhere, str(saved / "model.ckpt-100"))
    assert state.resolve(elsewhere) == str(saved / "model.ckpt-100")
    assert _listing(elsewhere) == _listing(saved / "model.ckpt-100")


def test_the_command_reads_the_latest_checkpoint(
    saved: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    latest = saved / "model.ckpt-200"
    assert main(["inspect", str(latest)]) == 0
    want = capsys.readouterr().out
    assert want.startswith(f"{latest}: tf1 file, ")
    for given in (saved, saved / "checkpoint"):
        assert main(["inspect", str(given)]) == 0
        assert capsys.readouterr().out == want  # the latest checkpoint, by its name
        out = tmp_path / f"from-{given.name}.safetensors"
        assert main(["convert", str(given), str(out)]) == 0
        capsys.readouterr()
        assert torch.equal(cudnn_rnn.load(out).opaque_kernel, cudnn_rnn.load(latest).opaque_kernel)


def test_a_directory_without_a_state_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    says = (
        f"{tmp_path}: a directory without a TF1 'checkpoint' state file naming its latest "
        "checkpoint; give a file in it, or a TF1 checkpoint's PREFIX."
    )
    with pytest.raises(CheckpointStateError) as info:
        cudnn_rnn.find_rnns(tmp_path)
    assert str(info.value) == says
    with pytest.raises(CheckpointStateError):
        cudnn_rnn.load(tmp_path)
    with pytest.raises(CheckpointStateError):
        checkpoint.restore(tmp_path, cudnn_rnn.CudnnLSTM(1, 2, input_size=2))
    assert main(["inspect", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"cudnn-rnn: error: {says}\n"


def test_a_state_file_naming_a_missing_checkpoint_is_refused(
    saved: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _state_file(saved, "model.ckpt-300", "model.ckpt-200")
    says = (
        f"{saved / 'checkpoint'}: names 'model.ckpt-300' as the latest checkpoint, but "
        f"'{saved / 'model.ckpt-300.index'}' does not exist; pass the PREFIX of a checkpoint "
        "that is there, or restore the missing files."
    )
    for given in (saved, saved / "checkpoint"):
        with pytest.raises(CheckpointStateError) as info:
            cudnn_rnn.load(given)
        assert str(info.value) == says
        for command in ("inspect", "convert"):
            args = [command, str(given)] + (["out.safetensors"] if command == "convert" else [])
            assert main(args) == 2
            assert capsys.readouterr().err == f"cudnn-rnn: error: {says}\n"


def test_a_state_file_naming_no_checkpoint_is_refused(saved: Path) -> None:
    (saved / "checkpoint").write_text('all_model_checkpoint_paths: "model.ckpt-200"\n')
    with pytest.raises(
        CheckpointStateError,
        match=r"checkpoint: a TF1 checkpoint state file that names no latest checkpoint \(no "
        r"model_checkpoint_path\); pass the checkpoint's PREFIX",
    ):
        cudnn_rnn.find_rnns(saved)
    (saved / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-200"\nbogus {\n')
    with pytest.raises(
        CheckpointStateError,
        match=r"checkpoint: not a TF1 checkpoint state file \(line 2 is no field of "
        r"CheckpointState\)",
    ):
        cudnn_rnn.find_rnns(saved)


def test_a_state_file_is_told_by_its_content(saved: Path) -> None:
    """Renamed, it is still read; a text file that is not one, named checkpoint, is not taken
    for one (its reader says what it is)."""
    renamed = saved / "latest.txt"
    shutil.copyfile(saved / "checkpoint", renamed)
    assert state.resolve(renamed) == str(saved / "model.ckpt-200")
    (saved / "checkpoint").write_text("some notes\n")
    assert not state.is_state_file(saved / "checkpoint")
    assert state.resolve(saved / "checkpoint") == str(saved / "checkpoint")


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("nope.h5", "nope.h5: no such file; check the path."),
        ("nope.safetensors", "nope.safetensors: no such file; check the path."),
        ("model.ckpt.index", "model.ckpt.index: no such file; check the path."),
        # A name of no format's extension may be a TF1 prefix: neither is there.
        ("model.ckpt", "model.ckpt: no such file, nor a TF1 checkpoint {tmp}/model.ckpt.index"),
    ],
)
def test_a_missing_file_is_told_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, says: str
) -> None:
    """``inspect nope.h5`` gave a TF1-prefix hint (issue 49)."""
    path = tmp_path / name
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cudnn-rnn: error: {tmp_path}/{says.format(tmp=tmp_path)}"), err
    assert err.count("\n") == 1
    if not name.startswith("model.ckpt"):
        assert "TF1" not in err and "prefix" not in err
