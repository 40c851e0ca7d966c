"""What ``convert`` and the library write onto: only regular files are replaced (issue: convert to
``/dev/null --format torch`` as root replaced the machine's /dev/null with a regular file).

Everything here is made inside ``tmp_path``: FIFOs (``os.mkfifo``), sockets (``bind`` on a path
there), directories, symbolic links to each, and a character device node (``os.mknod``) only where
the test runs as root, skipped otherwise; never a real system path. After every refusal the
special file is still there and of its kind, the command exited 2 with one line naming it, and
nothing else was left in its directory.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from cudnn_rnn import checkpoint
from cudnn_rnn.cli import main
from cudnn_rnn.io import atomic
from cudnn_rnn.layers import CudnnLSTM

POSIX = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs and sockets")

#: kind -> (its words in messages, the stat test that it is still one)
_KINDS: dict[str, tuple[str, Callable[[int], bool]]] = {
    "fifo": ("a FIFO (named pipe)", stat.S_ISFIFO),
    "socket": ("a socket", stat.S_ISSOCK),
    "directory": ("a directory", stat.S_ISDIR),
    "device": ("a character device", stat.S_ISCHR),
}


@contextlib.contextmanager
def _inside(folder: Path) -> Iterator[None]:
    """Work in ``folder`` for a while: a socket's path must be short (108 bytes), so it is bound
    by a relative name."""
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def _make(kind: str, path: Path) -> None:
    """Make a special file of ``kind`` at ``path`` (inside tmp_path); skip where it cannot be."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        with _inside(path.parent), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.bind(path.name)  # the socket file stays after close
    elif kind == "directory":
        path.mkdir()
    else:  # a device node: only root may make one; the null device's numbers, in tmp_path
        try:
            os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        except (PermissionError, OSError) as err:
            pytest.skip(f"cannot make a device node here ({err})")


def _special(kind: str, path: Path, *, linked: bool) -> str:
    """A special file of ``kind`` at ``path``, or a symbolic link there to one beside it; the
    words a refusal must say about it."""
    words = _KINDS[kind][0]
    if not linked:
        _make(kind, path)
        return f"{path} is {words}"
    real = path.with_name(path.name + ".real")
    _make(kind, real)
    path.symlink_to(real)
    return f"{path} is a symbolic link to {words} ({real})"


def _assert_still_there(kind: str, path: Path, *, linked: bool) -> None:
    if linked:
        assert os.path.islink(path), "the link was replaced"
    assert _KINDS[kind][1](os.stat(path).st_mode), f"{path} is no longer {kind}"


def _source(folder: Path) -> Path:
    folder.mkdir()
    src = folder / "source.pt"
    torch.save(torch.nn.LSTM(2, 3).state_dict(), src)
    return src


# (dst name, the file of it that is special, extra arguments)
_OUTPUTS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "pt": ("m.pt", "m.pt", ()),
    "safetensors": ("m.safetensors", "m.safetensors", ()),
    "onnx": ("m.onnx", "m.onnx", ()),
    "torch, named by --format": ("sink", "sink", ("--format", "torch")),
    "tf index": ("m.ckpt", "m.ckpt.index", ()),
    "tf data": ("m.ckpt", "m.ckpt.data-00000-of-00001", ()),
}


@POSIX
@pytest.mark.parametrize("linked", [False, True], ids=["itself", "a link to it"])
@pytest.mark.parametrize("kind", sorted(_KINDS))
@pytest.mark.parametrize("output", sorted(_OUTPUTS))
def test_convert_refuses_to_replace_what_is_not_a_regular_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], output: str, kind: str, linked: bool
) -> None:
    if output == "onnx":
        pytest.importorskip("onnx")
    src = _source(tmp_path / "in")
    out = tmp_path / "out"
    out.mkdir()
    name, special, extra = _OUTPUTS[output]
    says = _special(kind, out / special, linked=linked)
    before = sorted(os.listdir(out))
    assert main(["convert", str(src), str(out / name), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cudnn-rnn: error: {out / name}: cannot write it: {says}"), err
    assert err.count("\n") == 1 and ".tmp" not in err and "cudnn-rnn-" not in err, err
    _assert_still_there(kind, out / special, linked=linked)
    assert sorted(os.listdir(out)) == before  # no temporary, staged or backup file left


# -- the writer itself ----------------------------------------------------------------------


@POSIX
@pytest.mark.parametrize("linked", [False, True], ids=["itself", "a link to it"])
@pytest.mark.parametrize("kind", sorted(_KINDS))
def test_every_write_step_refuses_what_is_not_a_regular_file(
    tmp_path: Path, kind: str, linked: bool
) -> None:
    target = tmp_path / "target"
    says = _special(kind, target, linked=linked)
    staged = tmp_path / "staged"
    staged.write_bytes(b"new")
    before = sorted(os.listdir(tmp_path))
    steps: dict[str, Callable[[], None]] = {
        "write_file": lambda: atomic.write_file(target, b"new"),
        "write_file of a callable": lambda: atomic.write_file(target, lambda f: f.write(b"new")),
        "link_or_copy": lambda: atomic.link_or_copy(staged, target),
        "replace": lambda: atomic.replace(staged, target),
    }
    for step, run in steps.items():
        with pytest.raises(atomic.NotRegularTarget) as info:
            run()
        assert str(info.value).startswith(f"cannot write: {says}, not a regular file; ") or (
            kind == "directory"
            and str(info.value) == f"cannot write: {says}; remove it or choose another name"
        ), (step, str(info.value))
        assert info.value.filename == str(target) and info.value.errno is None, step
        assert isinstance(info.value, IsADirectoryError) == (kind == "directory"), step
        _assert_still_there(kind, target, linked=linked)
        assert sorted(os.listdir(tmp_path)) == before, step
    assert staged.read_bytes() == b"new"


@POSIX
def test_a_device_is_never_told_to_be_removed(tmp_path: Path) -> None:
    """The advice for a FIFO, socket or device is another name, never "remove it"."""
    for kind in ("fifo", "socket", "device"):
        target = tmp_path / kind
        _make(kind, target)
        with pytest.raises(atomic.NotRegularTarget) as info:
            atomic.write_file(target, b"x")
        assert info.value.problem == (
            f"{target} is {_KINDS[kind][0]}, not a regular file; only a regular file is "
            "replaced: choose another name"
        )
        assert atomic.write_problem(target, info.value) == info.value.problem


@POSIX
def test_a_special_file_made_while_the_content_is_written_is_not_replaced(tmp_path: Path) -> None:
    """The target is looked at again just before the rename."""
    target = tmp_path / "late.bin"

    def content(f: object) -> None:
        os.mkfifo(target)  # something else puts a FIFO there meanwhile
        f.write(b"data")  # type: ignore[attr-defined]

    with pytest.raises(atomic.NotRegularTarget, match=r"late\.bin is a FIFO \(named pipe\)"):
        atomic.write_file(target, content)
    assert stat.S_ISFIFO(os.lstat(target).st_mode)
    assert os.listdir(tmp_path) == ["late.bin"]


def test_a_link_to_a_regular_file_is_replaced_and_the_file_it_named_kept(tmp_path: Path) -> None:
    (tmp_path / "real.bin").write_bytes(b"old")
    (tmp_path / "link.bin").symlink_to(tmp_path / "real.bin")
    atomic.write_file(tmp_path / "link.bin", b"new")
    assert not os.path.islink(tmp_path / "link.bin")
    assert (tmp_path / "link.bin").read_bytes() == b"new"
    assert (tmp_path / "real.bin").read_bytes() == b"old"


def test_a_dangling_link_and_a_link_loop_are_replaced(tmp_path: Path) -> None:
    """Nothing lies behind them to lose: the new file takes the name, as asked."""
    (tmp_path / "dangling.bin").symlink_to(tmp_path / "missing")
    (tmp_path / "loop.bin").symlink_to(tmp_path / "loop.bin")
    for name in ("dangling.bin", "loop.bin"):
        atomic.write_file(tmp_path / name, b"new")
        assert not os.path.islink(tmp_path / name) and (tmp_path / name).read_bytes() == b"new"
    assert sorted(os.listdir(tmp_path)) == ["dangling.bin", "loop.bin"]


@POSIX
def test_link_or_copy_copies_only_a_regular_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where hard links fail the source is copied: a FIFO would block the copy, a device never
    end it. (A socket stands for them: opening one fails at once, so a broken check shows as
    another message, not as a hang.)"""
    with _inside(tmp_path), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind("src")

    def no_links(src: object, dst: object) -> None:
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))

    monkeypatch.setattr(os, "link", no_links)
    with pytest.raises(OSError, match=r"cannot copy .*src: it is a socket, not a regular file"):
        atomic.link_or_copy(tmp_path / "src", tmp_path / "dst")
    assert sorted(os.listdir(tmp_path)) == ["src"]


@POSIX
@pytest.mark.parametrize("special", ["m.ckpt.index", "m.ckpt.data-00000-of-00001"])
def test_a_tf1_checkpoint_refuses_before_anything_is_written(tmp_path: Path, special: str) -> None:
    """The bundle writer looks at both files before it writes, backs up or stages anything; an
    existing checkpoint beside the FIFO is left whole."""
    layer = CudnnLSTM(1, 2, input_size=2)
    os.mkfifo(tmp_path / special)
    with pytest.raises(atomic.NotRegularTarget, match=rf"{special} is a FIFO \(named pipe\)"):
        checkpoint.save(tmp_path / "m.ckpt", layer, format="tf")
    assert os.listdir(tmp_path) == [special]
    assert stat.S_ISFIFO(os.lstat(tmp_path / special).st_mode)
