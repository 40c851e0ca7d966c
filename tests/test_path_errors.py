"""A path that cannot be looked at or opened (a symbolic link loop, a name too long, a file where
a folder should be, no permission, nothing there) is one error class, cudnn_rnn.FileAccessError,
through every reader of the file wing: an OSError of the builtin class the operating system gave
(errno, strerror and filename kept) and a CudnnRNNError whose message names the path and says
what to do."""

from __future__ import annotations

import errno
import os
import pickle
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import cudnn_rnn
from cudnn_rnn import checkpoint, convert
from cudnn_rnn.converters.npz import from_numpy_canonical
from cudnn_rnn.errors import CudnnRNNError, FileAccessError
from cudnn_rnn.io import files
from cudnn_rnn.io.torch import file as torch_file
from tests.support import readers
from tests.support.privileges import run_without_dac


def _from_onnx(path: Path) -> None:
    pytest.importorskip("onnx")
    convert.from_onnx(path)


READERS: dict[str, Callable[[Path], object]] = {
    "files.open_regular": files.open_regular,
    "files.regular_size": files.regular_size,
    "files.sniff": files.sniff,
    "files.open_zip": readers.open_zip,
    "convert.find_rnns": convert.find_rnns,
    "convert.from_torch": convert.from_torch,
    "convert.from_onnx": _from_onnx,
    "torch_file.find_rnns": torch_file.find_rnns,
    "torch_file.read_state": torch_file.read_state,
    "torchscript.open_archive": readers.open_archive,
    "npz.open_npz": readers.open_npz,
    "npz.from_numpy_canonical": lambda p: from_numpy_canonical(p, "gru", 1, 2, 2),
    "checkpoint.restore": lambda p: checkpoint.restore(p, cudnn_rnn.CudnnLSTM(1, 2, input_size=2)),
    "checkpoint.load_file": checkpoint.load_file,
    "checkpoint.describe": checkpoint.describe,
    "convert.from_keras_h5": convert.from_keras_h5,
}


@pytest.fixture
def loop(tmp_path: Path) -> Path:
    """``a`` -> ``b`` -> ``a``: a symbolic link loop."""
    if not hasattr(os, "symlink"):
        pytest.skip("needs symbolic links")
    os.symlink(tmp_path / "b", tmp_path / "a")
    os.symlink(tmp_path / "a", tmp_path / "b")
    return tmp_path / "a"


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_symbolic_link_loop_is_a_file_access_error(reader: str, loop: Path) -> None:
    with pytest.raises(
        FileAccessError,
        match=rf"^{loop}: cannot read it: .* \(ELOOP\); symbolic links on the way lead round in "
        r"a loop; fix or remove the link\.$",
    ) as info:
        READERS[reader](loop)
    err = info.value
    assert isinstance(err, OSError) and isinstance(err, CudnnRNNError)
    assert isinstance(err, cudnn_rnn.CudnnRNNError)
    assert err.errno == errno.ELOOP and err.filename == str(loop)
    assert err.strerror == os.strerror(errno.ELOOP)
    assert isinstance(err.__cause__, OSError) and err.__cause__.errno == errno.ELOOP


def test_a_name_too_long_and_a_file_as_a_folder(tmp_path: Path) -> None:
    long = tmp_path / ("n" * 300)
    with pytest.raises(FileAccessError, match=r"\(ENAMETOOLONG\); the path, or a name in it, is"):
        convert.find_rnns(long)
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(NotADirectoryError) as info:
        torch_file.read_state(tmp_path / "file" / "model.pt")
    assert isinstance(info.value, FileAccessError) and info.value.errno == errno.ENOTDIR
    assert "a part of the path is a file where a folder should be" in str(info.value)


def test_nothing_there_is_still_file_not_found(tmp_path: Path) -> None:
    missing = tmp_path / "missing.pt"
    for call in (files.open_regular, files.sniff, torch_file.find_rnns, readers.open_npz):
        with pytest.raises(FileNotFoundError) as info:
            call(missing)
        assert isinstance(info.value, FileAccessError)
        assert info.value.filename == str(missing) and info.value.errno == errno.ENOENT
        assert str(info.value).startswith(f"{missing}: cannot read it: No such file or directory")


@pytest.mark.skipif(sys.platform != "linux", reason="drops Linux capabilities when run as root")
def test_no_permission_is_a_permission_error(tmp_path: Path) -> None:
    """In a child without root's permission override (containers run tests as root)."""
    path = tmp_path / "locked.pt"
    path.write_bytes(b"x")
    path.chmod(0)
    try:
        out = run_without_dac(
            """
            import errno
            from cudnn_rnn.io.files import FileAccessError
            from cudnn_rnn.io.torch import file as torch_file
            try:
                torch_file.find_rnns(sys.argv[1])
            except PermissionError as err:
                assert isinstance(err, FileAccessError) and err.errno == errno.EACCES
                print(err)
            """,
            str(path),
        )
    finally:
        path.chmod(0o600)
    assert re.search(r"ask for read permission", out), out


def test_file_access_errors_survive_pickling(loop: Path) -> None:
    for call in (files.open_regular, files.regular_size):
        with pytest.raises(FileAccessError) as info:
            call(loop)
        back = pickle.loads(pickle.dumps(info.value))
        assert type(back) is type(info.value) and str(back) == str(info.value)
        assert (back.errno, back.strerror, back.filename) == (
            errno.ELOOP,
            os.strerror(40),
            str(loop),
        )
    missing = FileAccessError.from_os_error(FileNotFoundError(errno.ENOENT, "gone", "f"), "f")
    back = pickle.loads(pickle.dumps(missing))
    assert isinstance(back, FileNotFoundError) and str(back) == str(missing)


def test_it_is_public_where_other_readers_find_it() -> None:
    assert files.FileAccessError is FileAccessError
    assert issubclass(FileAccessError, OSError) and issubclass(FileAccessError, CudnnRNNError)
