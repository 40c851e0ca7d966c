"""A reader's peak memory is bounded by its file: at most twice the file's bytes (its external
data included) plus a constant, whatever the file holds.

Each read runs in a fresh interpreter that first imports onnx and torch and reads a tiny model
the same way (what the first read of a process costs once: lazy imports, allocator pools), then
reads a file of some tens of MB. The growth of its peak resident size is what the read took:
Linux's ``VmHWM``, reset just before the read (``ru_maxrss`` would also count the process that
started the interpreter). Files: an RNN beside a large initializer that is no RNN weight, an
LSTM whose weights are nearly all of the file, and the same LSTM with its weights in an
external data file. No time is measured: reading is linear, but a test of it would be flaky.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.support.paths import ROOT

onnx = pytest.importorskip("onnx")
if not sys.platform.startswith("linux"):
    pytest.skip("the peak is read from Linux's /proc/self/status", allow_module_level=True)
helper, numpy_helper = onnx.helper, onnx.numpy_helper

MIB = 1 << 20
#: What a read may take besides its file: its own small structures and allocator slack.
SLACK = 40 * MIB


def lstm_model(hidden: int, input_size: int, extra: int = 0) -> object:
    """One LSTM node (random weights), and with ``extra`` an initializer of that many float32
    values that an ``Add`` beside the LSTM uses (a graph output of its own)."""
    rng = np.random.default_rng(0)
    tensors = [
        numpy_helper.from_array(rng.standard_normal(shape, dtype=np.float32), name)
        for name, shape in (
            ("W", (1, 4 * hidden, input_size)),
            ("R", (1, 4 * hidden, hidden)),
            ("B", (1, 8 * hidden)),
        )
    ]
    nodes = [helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y"], "lstm", hidden_size=hidden)]
    outputs = [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, ["T", 1, "B", hidden])]
    if extra:
        tensors.append(numpy_helper.from_array(rng.standard_normal(extra, np.float32), "E"))
        nodes.append(helper.make_node("Add", ["E", "E"], ["Z"], "add"))
        outputs.append(helper.make_tensor_value_info("Z", onnx.TensorProto.FLOAT, [extra]))
    x = helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, ["T", "B", input_size])
    graph = helper.make_graph(nodes, "bounded", [x], outputs, tensors)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def write(model: object, path: Path, *, external: bool = False) -> int:
    """Save ``model`` at ``path`` (its tensors in ``path.bin`` when ``external``); its bytes."""
    onnx.save_model(
        model,
        str(path),
        save_as_external_data=external,
        location=path.name + ".bin",
        size_threshold=0,
    )
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


#: file -> (model, external data); the LSTM's weights are 32 MiB, the extra initializer 48 MiB.
FILES: dict[str, tuple[Callable[[], object], bool]] = {
    "extra": (lambda: lstm_model(4, 3, extra=12 * MIB), False),
    "lstm": (lambda: lstm_model(1024, 1024), False),
    "external": (lambda: lstm_model(1024, 1024), True),
}

#: What each read runs: (file, call, at most this many times the file's bytes).
READS = {
    "tensor_shapes-extra": ("extra", "onnx.tensor_shapes(PATH)", 2),
    "find_rnns-extra": ("extra", "onnx.find_rnns(PATH)", 2),
    "find_rnns-lstm": ("lstm", "onnx.find_rnns(PATH)", 2),
    "read-lstm": ("lstm", "onnx.read(PATH)", 2),
    "read-external": ("external", "onnx.read(PATH, 'lstm')", 2),
    # Building the layer from the data read (cudnn_rnn.converters.canonical.layer_from_canonical)
    # holds the canonical tensors, the new layer's initial kernel, the initial values packed
    # and the given ones packed at once: twice more than the read. (It was 10 times.)
    "from_onnx-lstm": ("lstm", "onnx.from_onnx(PATH)", 4),
}

SCRIPT = """
import ctypes, gc, re
import numpy, torch, onnx.reference
from cudnn_rnn.converters import onnx

def status(key):
    with open("/proc/self/status") as f:
        return int(re.search(key + r":\\s+(\\d+) kB", f.read()).group(1)) * 1024

CALL = {call!r}
PATH = {tiny!r}
exec(CALL)
for PATH in {paths!r}:
    gc.collect()
    ctypes.CDLL(None).malloc_trim(0)  # what earlier reads freed leaves the resident size
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # the peak (VmHWM) starts again from the resident size now
    except OSError:
        print("no-reset")
        raise SystemExit(0)
    base = status("VmRSS")
    exec(CALL)
    print(status("VmHWM") - base)
"""


def peak_growth(call: str, tiny: Path, path: Path) -> int:
    """The growth of the peak resident size of a fresh interpreter while it runs ``call`` on
    ``path``, after it ran it on ``tiny``."""
    (grew,) = peak_growths(call, tiny, [path])
    return grew


def peak_growths(call: str, tiny: Path, paths: list[Path]) -> list[int]:
    """:func:`peak_growth` of each of ``paths`` in turn, in one fresh interpreter (one import
    of torch); before each, what the one before freed is handed back to the system, so that
    each read's peak is counted from the resident size it starts from."""
    script = SCRIPT.format(tiny=str(tiny), paths=[str(p) for p in paths], call=call)
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    if done.stdout.split() == ["no-reset"]:
        pytest.skip("this system cannot reset a process's peak resident size")
    return [int(v) for v in done.stdout.split()]


@pytest.mark.parametrize("name", list(READS))
def test_a_read_takes_at_most_twice_its_file_plus_a_constant(name: str, tmp_path: Path) -> None:
    which, call, times = READS[name]
    make, external = FILES[which]
    tiny = tmp_path / "tiny" / "m.onnx"
    big = tmp_path / "big" / "m.onnx"
    tiny.parent.mkdir()
    big.parent.mkdir()
    small = lstm_model(4, 3, extra=16) if which == "extra" else lstm_model(4, 4)
    write(small, tiny, external=external)
    size = write(make(), big, external=external)
    assert size > 30 * MIB
    grew = peak_growth(call, tiny, big)
    assert grew <= times * size + SLACK, (
        f"{name}: the read's peak grew {grew / MIB:.1f} MiB for a {size / MIB:.1f} MiB file "
        f"(at most {(times * size + SLACK) / MIB:.1f})"
    )
