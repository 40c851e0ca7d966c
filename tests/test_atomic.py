"""The one atomic writer (``cudnn_rnn.io.atomic``) and the crash-safe TF1 bundle overwrite.

Every file the library writes gets the permissions ``open()`` would give it and keeps those of a
file it overwrites; a write that fails leaves the old file and no temporary file; a writer killed
with SIGKILL at any step leaves the old checkpoint or the new one (never an error, never a mix),
and the next save cleans up after it.
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import io
import json
import os
import signal
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from cudnn_rnn import checkpoint, cli, convert
from cudnn_rnn.converters import loader as model_files
from cudnn_rnn.io import atomic
from cudnn_rnn.io.tf1 import bundle as tf1_bundle
from cudnn_rnn.io.tf1 import writer as tf1_writer
from cudnn_rnn.layers import CudnnLSTM
from examples import demo

ROOT = Path(__file__).resolve().parents[1]
POSIX = pytest.mark.skipif(os.name != "posix", reason="POSIX permissions, fork and signals")


def tiny(seed: int) -> CudnnLSTM:
    return CudnnLSTM(1, 3, input_size=2, seed=seed)


def entries(layer: CudnnLSTM) -> dict[str, torch.Tensor]:
    return {name: t.detach().clone() for name, t in layer.checkpoint_entries().items()}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)


def tf_files(prefix: Path) -> list[str]:
    return sorted([prefix.name + ".data-00000-of-00001", prefix.name + ".index"])


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


# -- every writer, by name: (write layer into directory) -> the files it wrote --------------------


def _safetensors(layer: CudnnLSTM, d: Path) -> list[Path]:
    checkpoint.save(d / "m.safetensors", layer)
    return [d / "m.safetensors"]


def _tf(layer: CudnnLSTM, d: Path) -> list[Path]:
    checkpoint.save(d / "m.ckpt", layer, format="tf")
    return [d / name for name in tf_files(d / "m.ckpt")]


def _onnx(layer: CudnnLSTM, d: Path) -> list[Path]:
    pytest.importorskip("onnx")
    convert.to_onnx(layer, d / "m.onnx")
    return [d / "m.onnx"]


def _cli_pt(layer: CudnnLSTM, d: Path) -> list[Path]:
    # what `cudnn-rnn convert` calls
    assert convert.to_file(layer, d / "m.pt").what == "torch state_dict"
    return [d / "m.pt"]


def _demo(layer: CudnnLSTM, d: Path) -> list[Path]:
    model = demo.CharModel(4, 2, 3, 1, seed=layer.seed or 0)
    lstm_path, head_path = demo.save_model(model, "abcd", d)
    written = [lstm_path, head_path]
    if demo.plot_losses([3.0, 2.0, 1.5], d / "loss.png", "loss"):
        written.append(d / "loss.png")
    return written


def _raw(layer: CudnnLSTM, d: Path) -> list[Path]:
    atomic.write_file(d / "raw.bin", b"x" * (layer.seed or 1))
    return [d / "raw.bin"]


WRITERS: dict[str, Callable[[CudnnLSTM, Path], list[Path]]] = {
    "safetensors": _safetensors,
    "tf": _tf,
    "onnx": _onnx,
    "cli-pt": _cli_pt,
    "demo": _demo,
    "atomic": _raw,
}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def leftovers(d: Path) -> list[str]:
    """Hidden files: temporary, staged or backup files."""
    return sorted(p.name for p in d.iterdir() if p.name.startswith("."))


@POSIX
@pytest.mark.parametrize("mask", [0o022, 0o002])
@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_new_files_get_the_umask_mode(writer: str, mask: int, tmp_path: Path) -> None:
    with umask(mask):
        written = WRITERS[writer](tiny(1), tmp_path)
    assert {p.name: oct(mode(p)) for p in written} == {p.name: oct(0o666 & ~mask) for p in written}
    assert leftovers(tmp_path) == []


@POSIX
@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_overwrite_keeps_the_existing_mode(writer: str, tmp_path: Path) -> None:
    with umask(0o022):
        written = WRITERS[writer](tiny(1), tmp_path)
        for p in written:
            os.chmod(p, 0o640)
        again = WRITERS[writer](tiny(2), tmp_path)
    assert again == written
    assert {p.name: oct(mode(p)) for p in written} == {p.name: oct(0o640) for p in written}
    assert leftovers(tmp_path) == []


# -- failures leave the old file and no temporary file ---------------------------------------------


class Boom(Exception):
    pass


def test_a_write_that_raises_midway_leaves_the_target_and_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    atomic.write_file(path, b"old")

    def half(f: object) -> None:
        f.write(b"new, half")  # type: ignore[attr-defined]
        raise Boom

    with pytest.raises(Boom):
        atomic.write_file(path, half)
    with pytest.raises(KeyboardInterrupt):  # BaseException too
        atomic.write_file(path, lambda f: (_ for _ in ()).throw(KeyboardInterrupt))
    assert path.read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["f.bin"]


@pytest.mark.parametrize("writer", ["safetensors", "onnx", "cli-pt"])
def test_a_failing_rename_leaves_the_target_and_no_temp(
    writer: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (written,) = WRITERS[writer](tiny(1), tmp_path)
    before = written.read_bytes()
    names = sorted(os.listdir(tmp_path))

    def full(src: object, dst: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError, match="No space"):
        WRITERS[writer](tiny(2), tmp_path)
    assert written.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == names


def test_a_directory_in_the_way_leaves_no_temp(tmp_path: Path) -> None:
    (tmp_path / "m.safetensors").mkdir()
    with pytest.raises(OSError):
        checkpoint.save(tmp_path / "m.safetensors", tiny(1))
    assert sorted(os.listdir(tmp_path)) == ["m.safetensors"]
    (tmp_path / "m.ckpt.index").mkdir()
    with pytest.raises(IsADirectoryError, match=r"m\.ckpt\.index is a directory"):
        checkpoint.save(tmp_path / "m.ckpt", tiny(1), format="tf")
    assert sorted(os.listdir(tmp_path)) == ["m.ckpt.index", "m.safetensors"]


# -- a failed write names the file it was writing, never its temporary file (issue 20, item 8) --


def _unwritable(case: str, d: Path) -> tuple[Path, type[OSError], str]:
    """A target that cannot be written, the error it gives and the words that say why."""
    if case == "missing directory":
        return d / "nowhere" / "f.bin", FileNotFoundError, f"the directory {d / 'nowhere'} does not"
    if case == "through a file":
        (d / "plain").write_bytes(b"")
        return d / "plain" / "f.bin", NotADirectoryError, f"{d / 'plain'} is not a directory"
    if case == "a directory":
        (d / "f.bin").mkdir()
        return d / "f.bin", IsADirectoryError, f"{d / 'f.bin'} is a directory; remove it"
    if case == "name too long":
        clipped = "n" * 37 + "..."
        return d / ("n" * 300), OSError, f"the name {clipped!r} is 300 bytes, more than the 255"
    (d / "loop").symlink_to(d / "loop")
    return d / "loop" / "f.bin", OSError, f"{d / 'loop'} is a symbolic link loop"


@POSIX
@pytest.mark.parametrize(
    "case", ["missing directory", "through a file", "a directory", "name too long", "loop"]
)
def test_a_failed_write_names_the_target_and_says_why(case: str, tmp_path: Path) -> None:
    target, kind, why = _unwritable(case, tmp_path)
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(kind) as info:
        atomic.write_file(target, b"data")
    assert info.value.filename == str(target)
    assert f"cannot write: {why}" in str(info.value) and ".tmp" not in str(info.value)
    assert sorted(os.listdir(tmp_path)) == before


def test_a_full_disk_names_the_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as info:
        atomic.write_file(tmp_path / "f.bin", b"data")
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(tmp_path / "f.bin")
    assert str(info.value) == (
        f"[Errno {errno.ENOSPC}] cannot write: {os.strerror(errno.ENOSPC)}; free some space or "
        f"write elsewhere: {str(tmp_path / 'f.bin')!r}"
    )
    assert os.listdir(tmp_path) == []


def test_an_error_about_another_file_is_not_renamed(tmp_path: Path) -> None:
    def read_missing(f: object) -> None:
        (tmp_path / "missing.txt").read_bytes()

    with pytest.raises(FileNotFoundError) as info:
        atomic.write_file(tmp_path / "f.bin", read_missing)
    assert info.value.filename == str(tmp_path / "missing.txt")
    assert os.listdir(tmp_path) == []


def test_replace_names_the_destination(tmp_path: Path) -> None:
    (tmp_path / ".staged").write_bytes(b"new")
    (tmp_path / "live").mkdir()
    with pytest.raises(IsADirectoryError) as info:
        atomic.replace(tmp_path / ".staged", tmp_path / "live")
    assert info.value.filename == str(tmp_path / "live")
    assert f"cannot write: {tmp_path / 'live'} is a directory" in str(info.value)


@POSIX
def test_a_long_legal_name_is_written_and_its_leftovers_removed(tmp_path: Path) -> None:
    """A name of 250 bytes is legal, though its temporary file's name, 40 bytes longer, is not:
    the temporary name is shortened, and the next write still finds a dead writer's leftovers."""
    name = "\u00e9" * 125  # 250 bytes in UTF-8: shortening must not split a character
    atomic.write_file(tmp_path / name, b"old")
    assert os.listdir(tmp_path) == [name]
    temp = atomic._temp_name(name)
    assert len(os.fsencode(temp)) <= 255 and temp.startswith(".") and temp.endswith(".tmp")
    dead = temp.replace(f"-{os.getpid()}-", f"-{dead_pid()}-")
    (tmp_path / dead).write_bytes(b"partial")
    atomic.write_file(tmp_path / name, b"new")
    assert os.listdir(tmp_path) == [name] and (tmp_path / name).read_bytes() == b"new"
    stem = temp.split(f".cudnn-rnn-{os.getpid()}-")[0]
    assert atomic._temp_name(name + "x").split(f".cudnn-rnn-{os.getpid()}-")[0] != stem


def restored(path: Path) -> dict[str, torch.Tensor]:
    probe = tiny(99)
    checkpoint.restore(path, probe)
    return entries(probe)


def save_failing_at_commit(
    prefix: Path, error: BaseException, monkeypatch: pytest.MonkeyPatch
) -> CudnnLSTM:
    """Save an old checkpoint at ``prefix``, then overwrite it with ``os.replace`` raising
    ``error`` on the rename onto ``PREFIX.index`` (the commit); returns the old layer."""
    old = tiny(1)
    checkpoint.save(prefix, old, format="tf")
    real_replace = os.replace

    def fail_the_commit(src: str, dst: str) -> None:
        if str(dst) == f"{prefix}.index":
            raise error
        real_replace(src, dst)

    with monkeypatch.context() as patch:
        patch.setattr(os, "replace", fail_the_commit)
        with pytest.raises(type(error)):
            checkpoint.save(prefix, tiny(2), format="tf")
    return old


def test_tf_index_rename_failing_keeps_the_old_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = tmp_path / "m.ckpt"
    checkpoint.save(prefix, tiny(1), format="tf")
    old_bytes = {n: (tmp_path / n).read_bytes() for n in tf_files(prefix)}
    old = save_failing_at_commit(prefix, OSError(errno.ENOSPC, "No space"), monkeypatch)
    assert sorted(os.listdir(tmp_path)) == tf_files(prefix)  # no temp, staged or backup file
    assert {n: (tmp_path / n).read_bytes() for n in tf_files(prefix)} == old_bytes
    assert same(restored(prefix), entries(old))


def test_tf_save_failing_at_every_step_leaves_old_or_new_and_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = tmp_path / "m.ckpt"
    old, new = tiny(1), tiny(2)
    outcomes = []
    for k in range(100):
        checkpoint.save(prefix, old, format="tf")
        calls: list[str] = []

        def fail(label: str, k: int = k, calls: list[str] = calls) -> None:
            calls.append(label)
            if len(calls) == k + 1:
                raise Boom(label)

        monkeypatch.setattr(atomic, "_BOUNDARY", fail)
        try:
            checkpoint.save(prefix, new, format="tf")
            failed = False
        except Boom:
            failed = True
        monkeypatch.setattr(atomic, "_BOUNDARY", None)
        assert sorted(os.listdir(tmp_path)) == tf_files(prefix), (k, calls)
        got = restored(prefix)
        assert same(got, entries(old)) or same(got, entries(new)), k
        outcomes.append("old" if same(got, entries(old)) else "new")
        if not failed:
            break
    # Before the index rename (the commit) a failure rolls back; after it the new pair stays.
    assert outcomes[-1] == "new" and "old" in outcomes
    assert outcomes == sorted(outcomes, key=["old", "new"].index)


# -- crashed writers: reading an interrupted overwrite, on a read-only directory -----------------


@POSIX
def test_reading_an_interrupted_tf_overwrite_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = tmp_path / "m.ckpt"
    monkeypatch.setattr(tf1_writer, "settle", lambda prefix: None)  # as if the process died
    old = save_failing_at_commit(prefix, KeyboardInterrupt(), monkeypatch)
    monkeypatch.undo()
    names = sorted(os.listdir(tmp_path))
    assert ".m.ckpt.cudnn-rnn-new.index" in names and ".m.ckpt.cudnn-rnn-old.index" in names
    live = tmp_path / "m.ckpt.data-00000-of-00001"
    backup = tmp_path / ".m.ckpt.cudnn-rnn-old.data-00000-of-00001"
    assert live.read_bytes() != backup.read_bytes()  # the live pair is a mix: new data, old index
    os.chmod(tmp_path, 0o555)
    try:
        assert same(restored(prefix), entries(old))
        assert tf1_bundle.read_bundle_index(f"{prefix}.index").keys() == entries(old).keys()
    finally:
        os.chmod(tmp_path, 0o755)
    assert sorted(os.listdir(tmp_path)) == names
    new = tiny(3)
    checkpoint.save(prefix, new, format="tf")
    assert sorted(os.listdir(tmp_path)) == tf_files(prefix)
    assert same(restored(prefix), entries(new))


# -- leftover temporary files ---------------------------------------------------------------------


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@POSIX
def test_the_next_save_removes_leftovers_of_dead_writers_only(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        dead, me = dead_pid(), os.getpid()
        names = {
            "dead": f".m.safetensors.cudnn-rnn-{dead}-0123456789abcdef.tmp",
            "live": f".m.safetensors.cudnn-rnn-{sleeper.pid}-0123456789abcdef.tmp",
            "mine, in flight": f".m.safetensors.cudnn-rnn-{me}-00000000000000aa.tmp",
            "mine, abandoned": f".m.safetensors.cudnn-rnn-{me}-00000000000000bb.tmp",
            "other target": f".n.safetensors.cudnn-rnn-{dead}-0123456789abcdef.tmp",
            "not ours": ".m.safetensors.12345.tmp",
        }
        for name in names.values():
            (tmp_path / name).write_bytes(b"partial")
        with atomic._in_flight_lock:
            atomic._in_flight.add(names["mine, in flight"])
        try:
            checkpoint.save(path, tiny(1))
        finally:
            with atomic._in_flight_lock:
                atomic._in_flight.discard(names["mine, in flight"])
        kept = {k for k, name in names.items() if (tmp_path / name).exists()}
        assert kept == {"live", "mine, in flight", "other target", "not ours"}
    finally:
        sleeper.kill()
        sleeper.wait()


def test_concurrent_saves_of_one_path_leave_one_whole_checkpoint(tmp_path: Path) -> None:
    layers = [tiny(seed) for seed in range(4)]
    wanted = [entries(layer) for layer in layers]
    errors: list[BaseException] = []

    def work(layer: CudnnLSTM) -> None:
        try:
            for _ in range(5):
                checkpoint.save(tmp_path / "m.safetensors", layer)
                checkpoint.save(tmp_path / "m.ckpt", layer, format="tf")
        except BaseException as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(layer,)) for layer in layers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(os.listdir(tmp_path)) == sorted(["m.safetensors", *tf_files(tmp_path / "m.ckpt")])
    for path in (tmp_path / "m.safetensors", tmp_path / "m.ckpt"):
        got = restored(path)
        assert any(same(got, w) for w in wanted)


# -- kill tests: SIGKILL at every step of a save ---------------------------------------------------


def _kill_harness(kind: str, directory: str) -> list[dict[str, object]]:
    """Run in a child process (one torch import): for k = 0, 1, ... save the old checkpoint, fork
    a writer of the new one that SIGKILLs itself at its k-th step, and record what restore reads,
    whether a save afterwards works and what files remain; stop when the writer finishes."""
    torch.set_num_threads(1)  # no thread pool to inherit across fork
    d = Path(directory)
    path = d / ("m.ckpt" if kind.endswith("tf") else FINAL[kind][0])  # a TF1 prefix
    old, new, newer = tiny(1), tiny(2), tiny(3)
    want = {"old": entries(old), "new": entries(new)}
    sources = d.parent / f"{kind}-sources"  # what `cudnn-rnn convert` reads, kept out of d
    if kind.startswith("cli-"):
        sources.mkdir()
        for layer in (old, new, newer):
            checkpoint.save(sources / f"{layer.seed}.safetensors", layer)

    def save(layer: CudnnLSTM) -> None:
        if kind.startswith("cli-"):
            argv = ["convert", str(sources / f"{layer.seed}.safetensors"), str(path)]
            err = io.StringIO()
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                code = cli.main(argv)
            if code != 0:
                raise RuntimeError(f"cudnn-rnn {' '.join(argv)}: exit {code}: {err.getvalue()}")
        elif kind == "onnx":
            convert.to_onnx(layer, path)
        else:
            checkpoint.save(path, layer, format="tf" if kind == "tf" else "safetensors")

    def read() -> dict[str, torch.Tensor]:
        if kind.startswith("cli-"):
            with contextlib.redirect_stdout(io.StringIO()):
                return entries(model_files.load_layer(str(path)))
        return entries(convert.from_onnx(path)) if kind == "onnx" else restored(path)

    results = []
    for k in range(100):
        save(old)
        pid = os.fork()
        if pid == 0:  # the writer
            steps: list[str] = []

            def die(label: str, k: int = k, steps: list[str] = steps) -> None:
                steps.append(label)
                if len(steps) == k + 1:
                    os.kill(os.getpid(), signal.SIGKILL)

            atomic._BOUNDARY = die
            code = 1
            try:
                save(new)
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        try:
            got = read()
            seen = next((name for name, w in want.items() if same(got, w)), "a mix")
        except Exception as err:
            seen = f"error: {err}"
        after_crash = sorted(os.listdir(d))
        save(newer)
        results.append(
            {
                "k": k,
                "killed": killed,
                "exit": status,
                "seen": seen,
                "left": after_crash,
                "then": sorted(os.listdir(d)),
                "resaved": same(read(), entries(newer)),
            }
        )
        if not killed:
            break
    return results


#: Each writer's files once it is done: the library's savers, and `cudnn-rnn convert` to each
#: format it writes (the kinds named cli-FORMAT).
FINAL = {
    "safetensors": ["m.safetensors"],
    "tf": tf_files(Path("m.ckpt")),
    "onnx": ["m.onnx"],
    "cli-safetensors": ["m.safetensors"],
    "cli-tf": tf_files(Path("m.ckpt")),
    "cli-pt": ["m.pt"],
    "cli-onnx": ["m.onnx"],
}
KINDS = tuple(FINAL)


def _kill_harnesses(root: str) -> None:
    """All kinds in one child process, so that torch is imported once."""
    results = {}
    for kind in KINDS:
        if kind.endswith("onnx") and importlib.util.find_spec("onnx") is None:
            continue
        directory = os.path.join(root, kind)
        os.mkdir(directory)
        results[kind] = _kill_harness(kind, directory)
    print(json.dumps(results))


@pytest.fixture(scope="module")
def kill_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, object]]]:
    root = tmp_path_factory.mktemp("kill")
    code = f"from tests.test_atomic import _kill_harnesses; _kill_harnesses({str(root)!r})"
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    run = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": path},
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    results: dict[str, list[dict[str, object]]] = json.loads(run.stdout.strip().splitlines()[-1])
    return results


@POSIX
@pytest.mark.parametrize("kind", KINDS)
def test_a_writer_killed_at_any_step_leaves_old_or_new(
    kind: str, kill_results: dict[str, list[dict[str, object]]]
) -> None:
    if kind.endswith("onnx"):
        pytest.importorskip("onnx")
    results = kill_results[kind]
    final = FINAL[kind]
    *crashes, done = results
    assert done["exit"] == 0 and done["seen"] == "new"
    assert len(crashes) >= (12 if kind.endswith("tf") else 3)
    for r in crashes:
        assert r["killed"], r
        assert r["seen"] in ("old", "new"), r  # never an error, never a mix
        assert r["then"] == final and r["resaved"], r  # the next save cleans up
    seen = [str(r["seen"]) for r in results]
    assert seen == sorted(seen, key=["old", "new"].index)  # old until the commit, then new
    assert any(r["left"] != final for r in crashes)  # some kills did leave files to clean
