"""cudnn_rnn.io.safetensors: the reader of our checkpoints, beside cudnn_rnn.checkpoint
(which fits what it reads to objects; tests/test_checkpoint*.py test the two together).

A file of another format given to it is refused naming what it is, not only with the header
length its first bytes make (issue 22: "the header length 578712552184433488 exceeds ...")."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from cudnn_rnn import checkpoint
from cudnn_rnn.io import safetensors
from cudnn_rnn.layers import CudnnGRU


def _torchscript(path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit is deprecated: the producer, not the test
        torch.jit.save(torch.jit.script(torch.nn.Linear(2, 3)), str(path))


def _npz(path: Path) -> None:
    with path.open("wb") as f:
        np.savez(f, x=np.zeros(3))


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda p: torch.save({"x": torch.zeros(2)}, p), "; it is a torch.save archive (zip))."),
        (_torchscript, "; it is a TorchScript archive (torch.jit.save))."),
        (_npz, "; it is a NumPy .npz archive (np.savez))."),
    ],
)
def test_another_format_is_named(make: object, says: str, tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    make(path)  # type: ignore[operator]
    layer = CudnnGRU(1, 2, input_size=2)
    for read in (
        safetensors.load_file,
        safetensors.describe,
        lambda p: checkpoint.restore(p, layer),
    ):
        with pytest.raises(checkpoint.CheckpointError) as info:
            read(path)
        message = str(info.value)
        assert message.startswith(f"checkpoint {path}: not a readable safetensors file (the ")
        assert "header length" in message and message.endswith(says), message


def test_the_error_lives_below_checkpoint_and_is_a_format_error() -> None:
    from cudnn_rnn.io import files

    assert checkpoint.CheckpointError is safetensors.CheckpointError
    assert issubclass(safetensors.CheckpointError, files.FormatError)
    assert checkpoint.load_file is safetensors.load_file
    assert checkpoint.describe is safetensors.describe


def test_open_checked_gives_the_claims_and_reads_what_is_asked(tmp_path: Path) -> None:
    layer = CudnnGRU(1, 2, input_size=3)
    path = tmp_path / "g.safetensors"
    checkpoint.save(path, layer)
    entries = layer.checkpoint_entries()
    with safetensors.open_checked(path) as checked:
        claims = checked.claims()
        assert claims == {n: (tuple(t.shape), "float32") for n, t in entries.items()}
        assert checked.metadata["format"] == safetensors.FORMAT
        name = sorted(entries)[0]
        (got,) = checked.read([name]).values()
    assert torch.equal(got, entries[name])
