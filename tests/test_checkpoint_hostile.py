"""Hostile and inconsistent checkpoint files: every failure is one CheckpointError naming the
file, raised before anything is changed or allocated from the file's claims."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from cudnn_rnn import checkpoint
from cudnn_rnn.layers import CudnnGRU, CudnnLSTM
from tests.support.timing import HANG, cpu_seconds


def _write_raw(path: Path, header: dict[str, Any] | bytes, data: bytes = b"") -> Path:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


def _entries(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone().contiguous() for k, v in tensors.items()}


# -- finding 3: all-or-nothing over several objects ---------------------------------------------


def test_int_dtype_in_the_second_object_changes_nothing(tmp_path: Path) -> None:
    a = CudnnLSTM(1, 3, input_size=2, seed=1, scope="a")
    b = CudnnGRU(1, 2, input_size=2, seed=2, scope="b")
    tensors = _entries({**a.checkpoint_entries(), **b.checkpoint_entries()})
    name = next(n for n in tensors if n.startswith("b/") and n.endswith("gates/kernel"))
    tensors[name] = torch.ones_like(tensors[name], dtype=torch.int64)
    path = tmp_path / "mixed.safetensors"
    save_file(tensors, path)
    a2 = CudnnLSTM(1, 3, input_size=2, seed=3, scope="a")
    b2 = CudnnGRU(1, 2, input_size=2, seed=4, scope="b")
    before = a2.opaque_kernel.detach().clone(), b2.opaque_kernel.detach().clone()
    with pytest.raises(checkpoint.CheckpointError) as info:
        checkpoint.restore(path, [a2, b2])
    assert info.value.problems == [
        f"tensor {name!r} has dtype int64, expected a floating dtype "
        "(float16, bfloat16, float32, float64)"
    ]
    assert str(path) in str(info.value) and "nothing was restored" in str(info.value)
    assert torch.equal(a2.opaque_kernel, before[0]) and torch.equal(b2.opaque_kernel, before[1])


def test_an_object_refusing_its_tensors_puts_the_earlier_ones_back(tmp_path: Path) -> None:
    # A skip_input layer's checkpoint holds identity blocks for its layer-0 input matrices; any
    # other values pass every name/shape/dtype check, and only its load can refuse them.
    a = CudnnLSTM(1, 3, input_size=2, seed=1, scope="a")
    b = CudnnLSTM(1, 2, input_size=2, input_mode="skip_input", seed=2, scope="b")
    tensors = _entries({**a.checkpoint_entries(), **b.checkpoint_entries()})
    kernel = "b/rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/kernel"
    tensors[kernel][0, :] = 5.0  # not an identity block any more
    path = tmp_path / "skip.safetensors"
    save_file(tensors, path)
    a2 = CudnnLSTM(1, 3, input_size=2, seed=3, scope="a")
    b2 = CudnnLSTM(1, 2, input_size=2, input_mode="skip_input", seed=4, scope="b")
    before = a2.opaque_kernel.detach().clone(), b2.opaque_kernel.detach().clone()
    with pytest.raises(checkpoint.CheckpointError, match=r"CudnnLSTM refused the tensors: "):
        checkpoint.restore(path, [a2, b2])
    assert torch.equal(a2.opaque_kernel, before[0]) and torch.equal(b2.opaque_kernel, before[1])


def test_the_message_lists_20_problems_and_counts_the_rest(tmp_path: Path) -> None:
    layer = CudnnLSTM(1, 2, input_size=2)
    tensors = _entries(layer.checkpoint_entries())
    tensors.update({f"extra_{i:02d}": torch.zeros(1) for i in range(25)})
    path = tmp_path / "extra.safetensors"
    save_file(tensors, path)
    with pytest.raises(checkpoint.CheckpointError) as info:
        checkpoint.restore(path, layer)
    message = str(info.value)
    assert info.value.count == 25 and len(info.value.problems) == 20  # the rest counted only
    assert message.count("unexpected tensor") == 20 and message.endswith("\n  ... and 5 more")
    assert "25 problem(s), nothing was restored" in message


# -- finding 7: describe() --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({"models": "not json ["}, r"metadata 'models' is not JSON"),
        ({"models": "[" * 200_000 + "]" * 200_000}, r"metadata 'models' nests too deeply"),
        ({"models": "42"}, r"metadata 'models' is not a JSON list of objects"),
        ({"models": "[{}]"}, r"entry 0: rnn_mode must be one of lstm, gru, rnn_tanh, rnn_relu"),
        (
            {"models": json.dumps([{"rnn_mode": "lstm", "direction": "unidirectional"}])},
            r"entry 0: num_layers must be an integer >= 1, got None",
        ),
        (
            {"models": '[{"kind": "multi_rnn_cell", "cells": 3}]'},
            r"entry 0: cells must be a list of objects",
        ),
        ({"format_version": "²"}, r"format_version '²' is not a number"),
        ({"format_version": "9" * 5000}, r"format_version '9999.* is not a number"),
    ],
)
def test_describe_refuses_bad_metadata(
    tmp_path: Path, metadata: dict[str, str], message: str
) -> None:
    path = tmp_path / "meta.safetensors"
    save_file({"x": torch.zeros(1)}, path, metadata={"format": checkpoint.FORMAT, **metadata})
    with pytest.raises(checkpoint.CheckpointError, match=message) as info:
        checkpoint.describe(path)
    assert str(info.value).startswith(f"checkpoint {path}: ")
    assert len(str(info.value)) < 1000


def test_describe_still_reads_good_metadata(tmp_path: Path) -> None:
    path = tmp_path / "good.safetensors"
    checkpoint.save(path, CudnnLSTM(2, 3, input_size=2, num_proj=2))
    (model,) = checkpoint.describe(path)
    assert model["num_proj"] == 2 and model["rnn_mode"] == "lstm"


# -- finding 10: the safetensors header is checked whole, fast ------------------------------------

_GOOD = {"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}


@pytest.mark.parametrize(
    ("header", "data", "message"),
    [
        (b"[1, 2]", b"", r"its header is not a JSON object"),
        (b"{" * 100_000, b"", r"its header (nests too deeply|is not JSON)"),
        (b"\xff\xfe", b"", r"its header is not JSON"),
        ({"x": {"dtype": "Q7", "shape": [2], "data_offsets": [0, 8]}}, bytes(8), r"unknown dtype"),
        ({"x": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, bytes(8), r"has shape"),
        ({"x": {"dtype": "F32", "shape": [True], "data_offsets": [0, 4]}}, bytes(4), "has shape"),
        ({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 80]}}, bytes(8), r"data_offs"),
        ({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, bytes(8), r"needs 12 b"),
        (
            {"x": {"dtype": "F32", "shape": [10**40, 10**40], "data_offsets": [0, 8]}},
            bytes(8),
            r"needs more bytes than the file holds, but its data_offsets span 8",
        ),
        (
            {
                "x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "y": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]},
            },
            bytes(8),
            r"overlaps the tensor before it",
        ),
        (
            {"x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}},
            bytes(8),
            r"leaves a gap",
        ),
        (_GOOD, bytes(12), r"its tensors end at byte"),
        ({"x": {"dtype": "F32", "shape": [2]}}, bytes(8), r"is not an object of dtype, shape"),
        ({**_GOOD, "__metadata__": {"format": 1}}, bytes(8), r"__metadata__ is not an object"),
    ],
)
def test_hostile_headers_are_one_checkpoint_error(
    tmp_path: Path, header: dict[str, Any] | bytes, data: bytes, message: str
) -> None:
    path = _write_raw(tmp_path / "bad.safetensors", header, data)
    layer = CudnnLSTM(1, 2, input_size=2)
    for read in (checkpoint.load_file, checkpoint.describe, lambda p: checkpoint.restore(p, layer)):
        with pytest.raises(checkpoint.CheckpointError, match=message) as info:
            read(path)
        assert str(info.value).startswith(f"checkpoint {path}: not a readable safetensors file")
        assert len(str(info.value)) < 1000


def test_a_header_longer_than_the_file_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "long.safetensors"
    path.write_bytes(struct.pack("<Q", 1 << 60) + b"{}")
    with pytest.raises(checkpoint.CheckpointError, match=r"header length 1152921504606846976 "):
        checkpoint.load_file(path)


def test_200k_tensor_header_is_fast_and_its_error_short(tmp_path: Path) -> None:
    entry = '{"dtype":"F32","shape":[0],"data_offsets":[0,0]}'
    header = "{" + ",".join(f'"t{i:07d}":{entry}' for i in range(200_000)) + "}"
    path = _write_raw(tmp_path / "many.safetensors", header.encode())
    assert path.stat().st_size > 10_000_000
    layer = CudnnLSTM(1, 2, input_size=2)

    def restore() -> pytest.ExceptionInfo[checkpoint.CheckpointError]:
        with pytest.raises(checkpoint.CheckpointError) as info:
            checkpoint.restore(path, layer)
        return info

    # Linear work takes a second or two; work per pair of entries would take hours (HANG).
    cpu, info = cpu_seconds(restore)
    assert info.value.count == 200_000 + 2  # 2 missing, 200000 unexpected
    assert len(info.value.problems) == 20  # no 200k strings made
    assert len(str(info.value)) < 5_000 and str(info.value).endswith("... and 199982 more")
    assert cpu < HANG, f"restore took {cpu:.2f} s of CPU time"
    cpu, described = cpu_seconds(lambda: checkpoint.describe(path))
    assert described == [] and cpu < HANG, f"describe took {cpu:.2f} s of CPU time"


def test_truncated_data_is_caught_by_the_header_check(tmp_path: Path) -> None:
    good = tmp_path / "good.safetensors"
    checkpoint.save(good, CudnnLSTM(1, 2, input_size=2))
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(good.read_bytes()[:-4])
    with pytest.raises(checkpoint.CheckpointError, match=r"data_offsets .* within the 156 data"):
        checkpoint.load_file(cut)


def test_load_file_reads_what_it_checked(tmp_path: Path) -> None:
    path = tmp_path / "mixed.safetensors"
    tensors = {
        "f": torch.arange(6, dtype=torch.float32).reshape(2, 3),
        "b": torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
        "e": torch.zeros(0, 4, dtype=torch.float64),
        "i": torch.tensor([7], dtype=torch.int8),
    }
    save_file(tensors, path, metadata={"k": "v"})
    got, metadata = checkpoint.load_file(path)
    assert metadata == {"k": "v"} and set(got) == set(tensors)
    assert all(torch.equal(got[n], t) and got[n].dtype == t.dtype for n, t in tensors.items())


# -- special files: refused before anything opens them ------------------------------------------


def test_directory_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "dir.safetensors"
    folder.mkdir()
    with pytest.raises(checkpoint.CheckpointError, match=r"a directory, not a regular file"):
        checkpoint.load_file(folder)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.safetensors"
    os.mkfifo(fifo)
    script = (
        "import sys\n"
        "from cudnn_rnn import checkpoint\n"
        "for read in (checkpoint.load_file, checkpoint.describe):\n"
        "    try:\n"
        "        read(sys.argv[1])\n"
        "    except checkpoint.CheckpointError as err:\n"
        "        print(err)\n"
    )
    # A reader that opened the FIFO would block forever: the timeout turns that into a failure.
    result = subprocess.run(
        [sys.executable, "-c", script, str(fifo)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    # The one guard (cudnn_rnn.io.files) names a special file as every reader does.
    assert result.stdout.count("a FIFO (named pipe), not a regular file") == 2
