"""cudnn_rnn.io.files: the one safe opener, and formats told apart by content on files made by the
real producers (torch.save, torch.jit.save, np.savez, h5py, safetensors, onnx, TF1), whatever
their names, and on empty, truncated, hostile and special files."""

from __future__ import annotations

import io
import os
import pickle
import shutil
import stat
import struct
import subprocess
import sys
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from cudnn_rnn import checkpoint
from cudnn_rnn.io import files
from cudnn_rnn.io.files import sniffing
from cudnn_rnn.layers import CudnnGRU, CudnnLSTM
from tests.support.paths import FIXTURES

# -- files made by the producers ------------------------------------------------------------------


def _quiet(make: Callable[[], object]) -> None:
    """Run a producer whose own deprecation warnings are not what is tested here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        make()


def _torch_zip(path: Path) -> None:
    torch.save(torch.nn.LSTM(3, 2).state_dict(), path)


def _torch_legacy(path: Path) -> None:
    torch.save(torch.nn.GRU(3, 2).state_dict(), path, _use_new_zipfile_serialization=False)


def _torch_legacy_protocol_4(path: Path) -> None:
    state = torch.nn.GRU(3, 2).state_dict()
    torch.save(state, path, pickle_protocol=4, _use_new_zipfile_serialization=False)


def _pickled_arrays(protocol: int) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        arrays = {k: v.numpy() for k, v in torch.nn.GRU(3, 2).state_dict().items()}
        path.write_bytes(pickle.dumps(arrays, protocol=protocol))  # as pickle.dump writes it

    return make


def _torchscript(path: Path) -> None:
    _quiet(lambda: torch.jit.save(torch.jit.script(torch.nn.Linear(2, 3)), str(path)))


def _torchscript_without_weights(path: Path) -> None:
    _quiet(lambda: torch.jit.save(torch.jit.script(torch.nn.ReLU()), str(path)))


def _npz(path: Path) -> None:
    with path.open("wb") as f:  # np.savez would add ".npz" to a name without it
        np.savez(f, kernel=np.zeros((3, 8), np.float32), bias=np.ones(8, np.float32))


def _npz_compressed(path: Path) -> None:
    with path.open("wb") as f:
        np.savez_compressed(f, np.arange(10))


def _hdf5(path: Path) -> None:
    import h5py

    with h5py.File(path, "w") as f:
        f["w"] = np.zeros((2, 2))


def _hdf5_user_block(path: Path) -> None:
    import h5py

    with h5py.File(path, "w", userblock_size=1024) as f:
        f["w"] = np.zeros(3)
    with path.open("r+b") as f:
        f.write(b"a user block: anything at all " * 4)


def _keras_h5(path: Path) -> None:
    shutil.copyfile(FIXTURES / "keras2" / "cudnn_model.h5", path)


def _safetensors(path: Path) -> None:
    checkpoint.save(path, CudnnLSTM(1, 2, input_size=3))


def _plain_safetensors(path: Path) -> None:
    from safetensors.torch import save_file

    save_file({"x": torch.zeros(2)}, path)


def _onnx(path: Path) -> None:
    pytest.importorskip("onnx")
    from cudnn_rnn import convert

    convert.to_onnx(CudnnGRU(1, 2, input_size=3), path)


def _torch_onnx(path: Path) -> None:
    pytest.importorskip("onnx")
    module = torch.nn.LSTM(3, 2)
    _quiet(lambda: torch.onnx.export(module, (torch.zeros(4, 1, 3),), str(path), dynamo=False))


def _tf1_index(path: Path) -> None:
    checkpoint.save(path.with_suffix(""), CudnnGRU(1, 2, input_size=3), format="tf")


def _tf_fixture_index(path: Path) -> None:
    shutil.copyfile(FIXTURES / "tf1" / "cudnn_lstm.ckpt.index", path)


def _other_zip(path: Path) -> None:
    with zipfile.ZipFile(path, "w") as z:  # a Keras 3 .keras file looks like this
        z.writestr("metadata.json", "{}")
        z.writestr("config.json", "{}")
        z.writestr("model.weights.h5", b"")


PRODUCERS: dict[str, tuple[Callable[[Path], None], str]] = {
    "torch.save": (_torch_zip, files.TORCH_ZIP),
    "torch.save legacy": (_torch_legacy, files.TORCH_PICKLE),
    "torch.save legacy protocol 4": (_torch_legacy_protocol_4, files.TORCH_PICKLE),
    "torch.jit.save": (_torchscript, files.TORCHSCRIPT),
    "torch.jit.save, no weights": (_torchscript_without_weights, files.TORCHSCRIPT),
    "np.savez": (_npz, files.NPZ),
    "np.savez_compressed": (_npz_compressed, files.NPZ),
    "h5py": (_hdf5, files.HDF5),
    "h5py with a user block": (_hdf5_user_block, files.HDF5),
    "keras 2 .h5": (_keras_h5, files.HDF5),
    "checkpoint.save": (_safetensors, files.SAFETENSORS),
    "safetensors.save_file": (_plain_safetensors, files.SAFETENSORS),
    "to_onnx": (_onnx, files.ONNX),
    "torch.onnx.export": (_torch_onnx, files.ONNX),
    "TF1 index (ours)": (_tf1_index, files.TF1),
    "TF1 index (TensorFlow)": (_tf_fixture_index, files.TF1),
    "other zip": (_other_zip, files.ZIP),
    **{f"pickle.dump protocol {p}": (_pickled_arrays(p), files.PICKLE) for p in range(6)},
}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each producer's file, named ``file.index`` for the TF1 ones and ``file`` (no extension)
    for the others."""
    out = {}
    for name, (make, kind) in PRODUCERS.items():
        folder = tmp_path_factory.mktemp("made")
        path = folder / ("file.index" if kind == files.TF1 else "file")
        make(path)
        out[name] = path
    return out


@pytest.mark.parametrize("name", sorted(PRODUCERS))
@pytest.mark.parametrize("suffix", ["", ".safetensors", ".pt", ".onnx", ".h5", ".npz"])
def test_the_kind_is_told_by_content_whatever_the_name(
    made: dict[str, Path], name: str, suffix: str, tmp_path: Path
) -> None:
    expected = PRODUCERS[name][1]
    if expected == files.TF1:
        assert files.sniff(made[name]) == expected
        assert files.sniff(made[name].with_suffix("")) == expected  # the prefix names it too
        return
    path = tmp_path / f"model{suffix}"
    shutil.copyfile(made[name], path)
    assert files.sniff(path) == expected
    assert expected in files.KINDS


def test_every_tf1_fixture_is_a_tf1_checkpoint() -> None:
    prefixes = sorted((FIXTURES / "tf1").glob("*.ckpt.index"))
    assert len(prefixes) >= 5
    for index in prefixes:
        assert files.sniff(str(index)[: -len(".index")]) == files.TF1, index
        assert files.sniff(index) == files.TF1, index


def test_a_prefix_names_the_checkpoint_even_beside_a_file_of_its_name(tmp_path: Path) -> None:
    prefix = tmp_path / "model"
    checkpoint.save(prefix, CudnnGRU(1, 2, input_size=3), format="tf")
    checkpoint.save(prefix, CudnnGRU(1, 2, input_size=3))  # safetensors at the prefix itself
    assert files.sniff(prefix) == files.TF1
    Path(f"{prefix}.index").write_bytes(b"not a table" * 10)
    assert files.sniff(prefix) == files.SAFETENSORS  # the index is none: the file's content
    prefix.unlink()
    assert files.sniff(prefix) == files.UNKNOWN  # a prefix whose index is no table


def test_every_kind_has_words() -> None:
    kinds = {
        files.SAFETENSORS,
        files.TORCH_ZIP,
        files.TORCHSCRIPT,
        files.TORCH_PICKLE,
        files.NPZ,
        files.ZIP,
        files.PICKLE,
        files.HDF5,
        files.ONNX,
        files.TF1,
        files.UNKNOWN,
    }
    assert set(files.KINDS) == kinds
    assert {kind for _, kind in PRODUCERS.values()} == kinds - {files.UNKNOWN}


# -- what proves nothing: unknown ---------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["torch.save", "torch.jit.save", "np.savez", "to_onnx", "torch.onnx.export", "other zip"],
)
def test_a_truncated_file_is_unknown(made: dict[str, Path], name: str, tmp_path: Path) -> None:
    data = made[name].read_bytes()
    for cut in (len(data) // 2, len(data) - 1):
        path = tmp_path / f"cut{cut}"
        path.write_bytes(data[:cut])
        assert files.sniff(path) == files.UNKNOWN, cut


def test_a_safetensors_file_cut_in_its_data_is_still_one(
    made: dict[str, Path], tmp_path: Path
) -> None:
    """Its header still fits: its reader, not the sniffer, says it is truncated."""
    data = made["checkpoint.save"].read_bytes()
    header = 8 + int.from_bytes(data[:8], "little")
    path = tmp_path / "cut"
    path.write_bytes(data[:-1])
    assert files.sniff(path) == files.SAFETENSORS
    with pytest.raises(
        checkpoint.CheckpointError, match=r"not a readable safetensors file \(tensor .* within the"
    ):
        checkpoint.load_file(path)
    path.write_bytes(data[: header - 1])
    assert files.sniff(path) == files.UNKNOWN


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00" * 4,
        b"not a checkpoint at all",
        b"PK\x03\x04 truncated",  # a zip's first bytes, and no end record
        b"\x80\x02}q\x00",  # a pickle cut before its STOP
        b"(not a pickle, though it starts like one).",
        struct.pack("<Q", 1 << 60) + b"{}",  # a safetensors header longer than the file
        b"\x08\x07\x12\xff\xff\xff\xff\x0f garbage that is no protobuf",
        b"\x12\x04abcd:\x00",  # protobuf, but its first field is no ir_version
        b"\x08\x07\x12\x02ab",  # ir_version and a name, but no graph
        bytes(range(256)) * 40,
    ],
)
def test_content_of_no_format_is_unknown(data: bytes, tmp_path: Path) -> None:
    path = tmp_path / "file.onnx"
    path.write_bytes(data)
    assert files.sniff(path) == files.UNKNOWN


def test_a_minimal_model_proto_is_onnx(tmp_path: Path) -> None:
    path = tmp_path / "m"
    graph = b"\x0a\x00"  # GraphProto with one empty node
    path.write_bytes(b"\x08\x07" + b"\x12\x03abc" + b":" + bytes([len(graph)]) + graph)
    assert files.sniff(path) == files.ONNX
    path.write_bytes(b"\x08\x00" + b":\x00")  # ir_version 0: none
    assert files.sniff(path) == files.UNKNOWN


# -- zip archives: the central directory at both ends, zip64 -------------------------------------


def _archive(path: Path, names: list[str], comment: bytes = b"") -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name in names:
            z.writestr(name, b"")
        z.comment = comment


@pytest.mark.parametrize(
    ("names", "kind"),
    [
        # torch.jit.save writes the weights first, its code and constants.pkl last
        ([*(f"m/data/{i}" for i in range(70_000)), "m/data.pkl", "m/constants.pkl"], "torchscript"),
        # torch.save writes data.pkl first
        (["m/data.pkl", *(f"m/data/{i}" for i in range(70_000)), "m/version"], "torch_zip"),
        ([f"arr_{i}.npy" for i in range(70_000)], "npz"),
    ],
)
def test_a_long_central_directory_is_read_at_both_ends(
    names: list[str], kind: str, tmp_path: Path
) -> None:
    path = tmp_path / "big"
    _archive(path, names)  # 70,000 members: zip64's end record, a directory over 2 MiB
    assert path.stat().st_size > 4 << 20
    assert files.sniff(path) == kind


def test_a_zip_comment_and_a_lying_end_record(tmp_path: Path) -> None:
    path = tmp_path / "z"
    _archive(path, ["x.npy"], comment=b"PK\x05\x06 a comment that looks like an end record")
    assert files.sniff(path) == files.NPZ
    data = bytearray(path.read_bytes())
    end = len(data) - 22 - len(b"PK\x05\x06 a comment that looks like an end record")
    assert data[end : end + 4] == b"PK\x05\x06"
    data[end + 16 : end + 20] = struct.pack("<I", len(data))  # the directory past the end
    path.write_bytes(bytes(data))
    assert files.sniff(path) == files.UNKNOWN


def test_sniffing_reads_a_bounded_part_of_a_large_file(tmp_path: Path) -> None:
    path = tmp_path / "sparse"
    with path.open("wb") as f:
        f.write(b"\x08\x07")  # looks like the start of an ONNX model
        f.truncate(3 << 30)  # 3 GiB, sparse: reading it all would take seconds and memory
    reads: list[int] = []
    real = files.open_regular

    class Counting(io.BufferedReader):
        def read(self, size: int | None = -1) -> bytes:
            reads.append(-1 if size is None else size)
            return super().read(size)

    def counted(path: str | os.PathLike[str], **kwargs: int) -> io.BufferedReader:
        return Counting(real(path, **kwargs).detach())  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sniffing, "open_regular", counted)  # where sniff looks it up
        assert files.sniff(path) == files.UNKNOWN
    assert reads and all(0 <= n <= 1 << 17 for n in reads), reads


# -- opening: regular files only, bounded ----------------------------------------------------------


def test_open_regular_reads_a_regular_file_and_bounds_its_size(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"12345")
    with files.open_regular(path) as f:
        assert f.read() == b"12345"
    with files.open_regular(path, max_size=5) as f:
        assert f.read() == b"12345"
    with pytest.raises(files.FileTooLarge, match=r"f is 5 bytes, more than the 4 its reader"):
        files.open_regular(path, max_size=4)
    assert files.regular_size(path) == 5


def test_the_refusals_survive_pickling(tmp_path: Path) -> None:
    import pickle

    for err in (files.NotRegularFile(tmp_path, "a socket"), files.FileTooLarge("f", 9, 8)):
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err) and str(back) == str(err) and vars(back) == vars(err)


def test_missing_and_directories(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as info:
        files.open_regular(tmp_path / "none")
    assert info.value.filename == str(tmp_path / "none")  # the command line names it
    for call in (files.open_regular, files.regular_size, files.sniff):
        with pytest.raises(files.NotRegularFile, match=r"is a directory, not a regular file"):
            call(tmp_path)
    assert files.special_kind(os.stat(tmp_path).st_mode) == "a directory"
    assert files.special_kind(os.stat(os.devnull).st_mode) == "a character device"
    assert files.special_kind(stat.S_IFREG | 0o644) is None


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifos_are_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    os.mkfifo(tmp_path / "prefix.index")
    script = (
        "import sys\n"
        "from cudnn_rnn.io import files\n"
        "for call in (files.open_regular, files.sniff, files.regular_size):\n"
        "    try:\n"
        "        call(sys.argv[1])\n"
        "    except files.NotRegularFile as err:\n"
        "        print(err.kind)\n"
        "try:\n"
        "    files.sniff(sys.argv[2])\n"  # its .index is a FIFO: the prefix is looked at itself
        "except FileNotFoundError:\n"
        "    print('no prefix file')\n"
    )
    # A reader that opened a FIFO would block forever: the timeout turns that into a failure.
    result = subprocess.run(
        [sys.executable, "-c", script, str(fifo), str(tmp_path / "prefix")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["a FIFO (named pipe)"] * 3 + ["no prefix file"]


# -- message helpers ------------------------------------------------------------------------------


def test_message_helpers() -> None:
    assert files.quote("x" * 200) == repr("x" * 200)[:120] + "..."
    assert files.quote("ab") == "'ab'"
    assert files.clip("abcdef", 5) == "ab..." and files.clip("abc", 5) == "abc"
    assert files.listed(["a", "b", "c", "d", "e"]) == "a, b, c and 2 more"
    assert files.first_line(ValueError("\n  one\ntwo")) == "one"
    assert files.first_line(ValueError()) == "ValueError"
