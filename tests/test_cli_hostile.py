"""The cudnn-rnn command on hostile and broken files: whatever the input, exit code 2 and one
stderr line naming the file, and nothing built or allocated from sizes the file claims before
they were checked against its tensors."""

from __future__ import annotations

import datetime
import errno
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from cudnn_rnn import checkpoint
from cudnn_rnn.cli import commands as _commands
from cudnn_rnn.cli import main
from cudnn_rnn.io.detect import detect_models, detect_models_and_skipped
from cudnn_rnn.io.tf1 import bundle as tf1_bundle
from cudnn_rnn.io.tf1 import protos as tf1_protos
from cudnn_rnn.io.tf1 import table as tf1_table
from cudnn_rnn.layers import CudnnLSTM
from tests.support.privileges import DROP_DAC
from tests.support.timing import HANG, child_cpu_seconds

_LSTM = "rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell"


def _assert_one_line(err: str, path: Path) -> None:
    assert err.startswith("cudnn-rnn: error: "), err
    assert err.count("\n") == 1, err
    assert str(path) in err, err


def _cli(args: list[str], *, address_space: int | None = None, timeout: float = 90) -> str:
    """Run the command in a fresh interpreter (optionally with a cap on its memory); a run that
    does not end within ``timeout`` fails the test instead of hanging it. Returns stderr."""
    limit = (
        f"resource.setrlimit(resource.RLIMIT_AS, ({address_space}, {address_space}))\n"
        if address_space
        else ""
    )
    script = f"import resource, sys\n{limit}from cudnn_rnn.cli import main\nsys.exit(main())\n"
    result = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    return result.stderr


def _lstm_state() -> dict[str, torch.Tensor]:
    return dict(torch.nn.LSTM(3, 2).state_dict())


# -- finding 4: claims checked before anything is built -----------------------------------------


def test_pt_with_a_far_layer_key_is_refused_quickly(tmp_path: Path) -> None:
    state = _lstm_state()
    state["bias_ih_l99999999"] = torch.zeros(8)
    src = tmp_path / "far.pt"
    torch.save(state, src)
    # Building 10^8 layers would take minutes of CPU (or all memory); refusing takes the
    # interpreter's start-up. The child's CPU time, not the wall clock a busy machine inflates.
    argv = ["convert", str(src), str(tmp_path / "out.safetensors")]
    cpu, err = child_cpu_seconds(lambda: _cli(argv, timeout=5 * HANG))
    assert cpu < HANG, cpu
    _assert_one_line(err, src)
    assert "names layer 99999999" in err


def test_pt_keys_must_be_exactly_those_of_the_module(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = _lstm_state()
    state["weight_hh_l0_reverse"] = torch.zeros(8, 2)
    state["weight_ih_l0"] = torch.zeros(8, 5)
    src = tmp_path / "odd.pt"
    torch.save(state, src)
    assert main(["convert", str(src), str(tmp_path / "out.safetensors")]) == 2
    err = capsys.readouterr().err
    _assert_one_line(err, src)
    assert "unexpected weight_hh_l0_reverse" in err


def _claiming_safetensors(path: Path) -> Path:
    """A 2 KB file whose metadata says LSTM 12000 x 12000 (4.6 GB of weights)."""
    layer = CudnnLSTM(1, 2, input_size=2)
    model = {**layer.checkpoint_spec(), "num_units": 12000, "input_size": 12000}
    tensors = {k: v.detach().contiguous() for k, v in layer.checkpoint_entries().items()}
    save_file(
        tensors,
        path,
        metadata={
            "format": checkpoint.FORMAT,
            "format_version": "1",
            "models": json.dumps([model]),
        },
    )
    return path


def test_safetensors_claiming_a_huge_lstm_allocates_nothing(tmp_path: Path) -> None:
    src = _claiming_safetensors(tmp_path / "claims.safetensors")
    assert src.stat().st_size < 4096
    err = _cli(["convert", str(src), str(tmp_path / "out.pt")], address_space=2 << 30)
    _assert_one_line(err, src)
    assert "has shape [4, 8], expected [24000, 48000]" in err


def _index_only(prefix: Path, shapes: dict[str, tuple[int, ...]], data: bytes | None) -> Path:
    """A TF1 index claiming float32 tensors of ``shapes`` (and a data file of ``data``)."""
    # The index is built with the reader module's own encoders, so the claim is well-formed.
    entries: list[tuple[bytes, bytes]] = [(b"", tf1_protos.HEADER)]
    offset = 0
    for name, shape in sorted(shapes.items()):
        size = int(np.prod(shape)) * 4
        entries.append((name.encode(), tf1_protos.encode_entry(1, shape, offset, size, 0)))
        offset += size
    table = tf1_table.build_table(entries, tf1_table.BLOCK_SIZE, tf1_table.RESTART_INTERVAL)
    Path(f"{prefix}.index").write_bytes(table)
    if data is not None:
        Path(f"{prefix}.data-00000-of-00001").write_bytes(data)
    return prefix


@pytest.mark.parametrize("data", [None, bytes(64)], ids=["index-only", "short-data"])
def test_tf1_index_claiming_huge_shapes_builds_nothing(tmp_path: Path, data: bytes | None) -> None:
    shapes = {f"{_LSTM}/kernel": (24000, 48000), f"{_LSTM}/bias": (48000,)}
    prefix = _index_only(tmp_path / "model.ckpt", shapes, data)
    err = _cli(["convert", str(prefix), str(tmp_path / "out.pt")], address_space=2 << 30)
    _assert_one_line(err, prefix)


# -- finding 6: exit 2 and one line, whatever the file ------------------------------------------


def _pickle_refused(path: Path) -> Path:
    torch.save({"weight_ih_l0": torch.zeros(8, 3), "when": datetime.date(2020, 1, 1)}, path)
    return path


def _truncated_pt(path: Path) -> Path:
    torch.save(_lstm_state(), path)
    path.write_bytes(path.read_bytes()[:300])
    return path


def _vector_weight_hh(path: Path) -> Path:
    state = _lstm_state()
    state["weight_hh_l0"] = torch.zeros(8)
    torch.save(state, path)
    return path


def _integer_tensors(path: Path) -> Path:
    torch.save({k: torch.ones(v.shape, dtype=torch.int64) for k, v in _lstm_state().items()}, path)
    return path


def _models_metadata(models: str) -> Callable[[Path], Path]:
    def make(path: Path) -> Path:
        layer = CudnnLSTM(1, 2, input_size=2)
        tensors = {k: v.detach().contiguous() for k, v in layer.checkpoint_entries().items()}
        save_file(tensors, path, metadata={"format": checkpoint.FORMAT, "models": models})
        return path

    return make


def _unexpected_tf1_names(path: Path) -> Path:
    tf1_bundle.write_bundle(
        path, {f"{_LSTM}/weird": np.zeros((2, 2), np.float32), "global_step": np.int64(3)}
    )
    return path


def _corrupt_onnx(path: Path) -> Path:
    path.write_bytes(b"\x08\x07\x12\xff\xff\xff\xff\x0f garbage that is no protobuf")
    return path


def _truncated_onnx(path: Path) -> Path:
    from cudnn_rnn import convert

    convert.to_onnx(CudnnLSTM(1, 2, input_size=2), path)
    path.write_bytes(path.read_bytes()[:100])
    return path


_unknown_mode = json.dumps(
    [
        {
            "rnn_mode": "lstmx",
            "num_layers": 1,
            "num_units": 2,
            "input_size": 2,
            "direction": "unidirectional",
            "num_proj": None,
            "scope": None,
        }
    ]
)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("command", ["inspect", "convert"])
@pytest.mark.parametrize(
    ("name", "make", "says"),
    [
        # its datetime is read as an inert record (issue 39): the lone weight_ih_l0 is refused
        ("refused.pt", _pickle_refused, "must be matrices, got weight_ih_l0 [8, 3]"),
        ("truncated.pt", _truncated_pt, "not a readable torch file"),
        ("vector.pt", _vector_weight_hh, "must be matrices"),
        ("ints.pt", _integer_tensors, "must be float16, bfloat16, float32 or float64"),
        ("empty_model.safetensors", _models_metadata("[{}]"), "entry 0: rnn_mode must be"),
        ("mode.safetensors", _models_metadata(_unknown_mode), "got 'lstmx'"),
        ("not_json.safetensors", _models_metadata("{"), "metadata 'models' is not JSON"),
        ("corrupt.onnx", _corrupt_onnx, ""),
        ("cut.onnx", _truncated_onnx, ""),
    ],
)
def test_broken_files_exit_2_with_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
    name: str,
    make: Callable[[Path], Path],
    says: str,
) -> None:
    src = make(tmp_path / name)
    args = [str(src)] if command == "inspect" else [str(src), str(tmp_path / "out.safetensors")]
    assert main([command, *args]) == 2
    err = capsys.readouterr().err
    _assert_one_line(err, src)
    assert says in err


def test_tf1_names_that_describe_no_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = _unexpected_tf1_names(tmp_path / "odd.ckpt")
    assert main(["inspect", str(prefix)]) == 0
    out = capsys.readouterr().out
    assert "found 0 RNN(s), 0 computable" in out
    assert "rnn/multi_rnn_cell (cudnn_compatible_lstm_cell): no layer-0 bias" in out
    assert main(["convert", str(prefix), str(tmp_path / "x.pt")]) == 2
    err = capsys.readouterr().err
    _assert_one_line(err, prefix)
    assert "holds no RNN (cudnn-rnn inspect shows what it holds)" in err


def test_detect_models_skips_what_it_cannot_read() -> None:
    shapes = {
        f"{_LSTM}/kernel": (5, 8),
        f"{_LSTM}/bias": (),  # rank 0
        "a/rnn/multi_rnn_cell/cell_0/cudnn_compatible_gru_cell/gates/kernel": (5, 4),
        "b/rnn/multi_rnn_cell/cell_0/basic_rnn_cell/kernel": (4, 2),
        "b/rnn/multi_rnn_cell/cell_0/basic_rnn_cell/bias": (2,),
    }
    models, skipped = detect_models_and_skipped(shapes)
    assert [m["scope"] for m in models] == ["b"]
    assert skipped == [
        "rnn/multi_rnn_cell (cudnn_compatible_lstm_cell): layer-0 bias has shape [], expected "
        "rank 1",
        "a/rnn/multi_rnn_cell (cudnn_compatible_gru_cell): no layer-0 "
        "candidate/input_projection/bias",
    ]
    assert detect_models(shapes) == models


def test_any_failure_is_still_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "m.safetensors"
    checkpoint.save(src, CudnnLSTM(1, 2, input_size=2))
    for error in (MemoryError(), RecursionError("maximum recursion depth"), KeyError("x\ny")):

        def boom(args: object, error: BaseException = error) -> None:
            raise error

        monkeypatch.setitem(_commands.COMMANDS, "inspect", boom)
        bug = isinstance(error, KeyError)  # ours, not the file's: exit 1 and a short report
        assert main(["inspect", str(src)]) == (1 if bug else 2)
        err = capsys.readouterr().err
        if bug:
            assert err.startswith("cudnn-rnn: internal error: KeyError: 'x\\ny'\n"), err
            assert err.count("\n") == 3 and "please report it" in err
        else:
            _assert_one_line(err, src)
        assert type(error).__name__ in err


def test_directory_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "folder.safetensors"
    folder.mkdir()
    assert main(["inspect", str(folder)]) == 2
    err = capsys.readouterr().err
    _assert_one_line(err, folder)
    # (a TF1 checkpoint directory would be read: the latest checkpoint its state file names)
    assert "a directory without a TF1 'checkpoint' state file" in err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("name", ["pipe.safetensors", "pipe.pt"])
def test_fifo_exits_2_without_blocking(tmp_path: Path, name: str) -> None:
    fifo = tmp_path / name
    os.mkfifo(fifo)
    err = _cli(["inspect", str(fifo)], timeout=60)  # a blocked open fails by the timeout
    _assert_one_line(err, fifo)
    assert "not a regular file" in err


# -- issue 20, item 8: every path error is exit 2 and one line naming the path -------------------

_LONG = "n" * 300  # one name over the 255 bytes a name may have on Linux and macOS file systems


def _long_name(d: Path, name: str) -> tuple[Path, str]:
    return d / (_LONG + name), f"is {300 + len(name)} bytes, more than the 255 a name may have"


def _long_directory(d: Path, name: str) -> tuple[Path, str]:
    return d / _LONG / name, "is 300 bytes, more than the 255 a name may have"


def _loop(d: Path, name: str) -> tuple[Path, str]:
    loop = d / "loop"
    loop.symlink_to(loop)
    return loop, f"{loop} is a symbolic link loop"


def _loop_directory(d: Path, name: str) -> tuple[Path, str]:
    loop = d / "loop"
    loop.symlink_to(loop)
    return loop / name, f"{loop} is a symbolic link loop"


def _through_a_file(d: Path, name: str) -> tuple[Path, str]:
    plain = d / "plain.txt"
    plain.write_text("")
    return plain / name, f"{plain} is not a directory"


def _missing_directory(d: Path, name: str) -> tuple[Path, str]:
    return d / "nowhere" / name, f"the directory {d / 'nowhere'} does not exist"


#: (directory, file name) -> (a path that cannot be reached, the words that say why)
_SOURCE_PATHS: dict[str, Callable[[Path, str], tuple[Path, str]]] = {
    "long name": _long_name,
    "long directory": _long_directory,
    "loop": _loop,
    "loop directory": _loop_directory,
    "through a file": _through_a_file,
    "missing directory": _missing_directory,
}
#: A link loop as the output's own name is no error: the writer replaces the link, as mv does.
#: A missing directory is created for .safetensors and TF1 outputs (checkpoint.save does).
_OUTPUT_PATHS = {k: v for k, v in _SOURCE_PATHS.items() if k not in ("loop", "missing directory")}
#: The output's format follows its name; anything without a known extension is a TF1 prefix.
_OUTPUTS = {"safetensors": "m.safetensors", "tf": "m.ckpt", "pt": "m.pt", "onnx": "m.onnx"}


def _source(d: Path) -> Path:
    src = d / "source.safetensors"
    checkpoint.save(src, CudnnLSTM(1, 2, input_size=2))
    return src


def _assert_names_the_output(err: str, dst: Path, src: Path) -> None:
    _assert_one_line(err, dst)
    assert err.startswith(f"cudnn-rnn: error: {dst}: cannot write it: "), err
    assert str(src) not in err, err  # not the source file
    assert ".tmp" not in err and "cudnn-rnn-" not in err, err  # nor the writer's temporary file


@pytest.mark.parametrize("command", ["inspect", "convert"])
@pytest.mark.parametrize("case", sorted(_SOURCE_PATHS))
def test_a_source_path_error_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, case: str
) -> None:
    src, why = _SOURCE_PATHS[case](tmp_path, "m.safetensors")
    dst = tmp_path / "out.pt"
    assert main([command, str(src)] if command == "inspect" else [command, str(src), str(dst)]) == 2
    err = capsys.readouterr().err
    _assert_one_line(err, src)
    assert err.startswith(f"cudnn-rnn: error: {src}: cannot read it: "), err
    assert why in err, err
    assert not dst.exists()


@pytest.mark.parametrize("output", sorted(_OUTPUTS))
@pytest.mark.parametrize("case", sorted(_OUTPUT_PATHS))
def test_an_output_path_error_names_the_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, output: str
) -> None:
    if output == "onnx":
        pytest.importorskip("onnx")
    src = _source(tmp_path)
    dst, why = _OUTPUT_PATHS[case](tmp_path, _OUTPUTS[output])
    assert main(["convert", str(src), str(dst)]) == 2
    err = capsys.readouterr().err
    _assert_names_the_output(err, dst, src)
    assert why in err, err


@pytest.mark.parametrize("output", ["pt", "onnx"])
def test_an_output_in_a_missing_directory_names_the_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], output: str
) -> None:
    if output == "onnx":
        pytest.importorskip("onnx")
    src = _source(tmp_path)
    dst, why = _missing_directory(tmp_path, _OUTPUTS[output])
    assert main(["convert", str(src), str(dst)]) == 2
    err = capsys.readouterr().err
    _assert_names_the_output(err, dst, src)
    assert why in err and "create it" in err, err
    assert sorted(os.listdir(tmp_path)) == [src.name]


@pytest.mark.parametrize("output", sorted(_OUTPUTS))
def test_an_output_that_is_a_directory_names_the_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], output: str
) -> None:
    if output == "onnx":
        pytest.importorskip("onnx")
    src = _source(tmp_path)
    dst = tmp_path / _OUTPUTS[output]
    # A TF1 prefix may share its name with a directory; its index file may not.
    (tmp_path / (dst.name + ".index" if output == "tf" else dst.name)).mkdir()
    before = sorted(os.listdir(tmp_path))
    assert main(["convert", str(src), str(dst)]) == 2
    err = capsys.readouterr().err
    _assert_names_the_output(err, dst, src)
    assert "is a directory; remove it" in err, err
    assert sorted(os.listdir(tmp_path)) == before


def test_an_output_ending_in_a_separator_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = _source(tmp_path)
    dst = f"{tmp_path / 'out'}{os.sep}"
    assert main(["convert", str(src), dst]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"cudnn-rnn: error: {dst}: names a directory, not a file; give the output's file name "
        f"(for example {dst}model.safetensors).\n"
    )
    assert sorted(os.listdir(tmp_path)) == [src.name]


@pytest.mark.parametrize("output", sorted(_OUTPUTS))
def test_a_full_disk_names_the_output(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    output: str,
) -> None:
    if output == "onnx":
        pytest.importorskip("onnx")
    src = _source(tmp_path)
    dst = tmp_path / _OUTPUTS[output]

    def full(fd: int) -> None:  # what a full disk does to the writer's fsync
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    assert main(["convert", str(src), str(dst)]) == 2
    err = capsys.readouterr().err
    _assert_names_the_output(err, dst, src)
    assert f"{os.strerror(errno.ENOSPC)}; free some space or write elsewhere" in err, err
    assert sorted(os.listdir(tmp_path)) == [src.name]


def test_a_legal_long_name_is_read_and_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """250 bytes is a legal name: the TF1 probe (NAME.index) and the writer's temporary file
    (.NAME.cudnn-rnn-PID-TOKEN.tmp) are longer, and neither may make it fail."""
    src = _source(tmp_path)
    long_src = tmp_path / ("s" * (250 - len(".safetensors")) + ".safetensors")
    src.rename(long_src)
    dst = tmp_path / ("d" * (250 - len(".pt")) + ".pt")
    assert main(["inspect", str(long_src)]) == 0
    assert main(["convert", str(long_src), str(dst)]) == 0
    assert main(["inspect", str(dst)]) == 0
    assert ": lstm unidirectional (num_layers=1, num_units=2, input_size=2) at torch.nn.LSTM" in (
        capsys.readouterr().out
    )
    assert sorted(os.listdir(tmp_path)) == sorted([long_src.name, dst.name])


# Root passes every permission check: the command runs in a child that drops them
# (tests/support/privileges.py), so 0o000 and 0o555 bite as they do for everyone else.
_WITHOUT_DAC = (
    DROP_DAC
    + """
import contextlib, io, json
from cudnn_rnn.cli import main
results = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        results.append((main(argv), err.getvalue()))
print(json.dumps(results))
"""
)


@pytest.mark.skipif(sys.platform != "linux", reason="drops Linux capabilities when run as root")
def test_permission_errors_exit_2_with_one_line(tmp_path: Path) -> None:
    src = _source(tmp_path)
    locked, read_only = tmp_path / "locked", tmp_path / "read-only"
    locked.mkdir()
    read_only.mkdir()
    hidden = locked / "m.safetensors"
    checkpoint.save(hidden, CudnnLSTM(1, 2, input_size=2))
    unreadable = tmp_path / "unreadable.safetensors"
    checkpoint.save(unreadable, CudnnLSTM(1, 2, input_size=2))
    outputs = {k: v for k, v in _OUTPUTS.items() if k != "onnx" or _has_onnx()}
    cases: list[tuple[list[str], Path, str]] = [
        (["inspect", str(hidden)], hidden, f"the directory {locked} cannot be searched"),
        (["convert", str(hidden), str(tmp_path / "o.pt")], hidden, "cannot be searched"),
        (["inspect", str(unreadable)], unreadable, f"{unreadable} is not readable"),
    ]
    for name in outputs.values():
        cases.append((["convert", str(src), str(locked / name)], locked / name, "searched"))
        cases.append((["convert", str(src), str(read_only / name)], read_only / name, "writable"))
    os.chmod(locked, 0)
    os.chmod(read_only, 0o555)
    os.chmod(unreadable, 0)
    try:
        run = subprocess.run(
            [sys.executable, "-c", _WITHOUT_DAC, json.dumps([argv for argv, _, _ in cases])],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        os.chmod(locked, 0o755)
        os.chmod(read_only, 0o755)
        os.chmod(unreadable, 0o644)
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads(run.stdout.strip().splitlines()[-1])
    for (argv, path, why), (code, err) in zip(cases, results, strict=True):
        assert code == 2, (argv, err)
        _assert_one_line(err, path)
        assert "permission denied" in err and why in err, (argv, err)
        if argv[0] == "convert" and path != hidden:
            _assert_names_the_output(err, path, src)
    assert os.listdir(read_only) == [] and os.listdir(locked) == [hidden.name]


def _has_onnx() -> bool:
    import importlib.util

    return importlib.util.find_spec("onnx") is not None
