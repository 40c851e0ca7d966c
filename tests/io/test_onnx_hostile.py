"""from_onnx against hostile and corrupt files: bombs, graphs it does not compute, garbage bytes,
files that are not regular files. Every refusal is one typed error, OnnxFormatError."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from cudnn_rnn.converters.onnx import (
    OnnxFormatError,
    find_rnns,
    from_onnx,
    load_model,
    tensor_shapes,
    to_onnx,
)
from cudnn_rnn.io.onnx import eval as onnx_eval
from cudnn_rnn.io.onnx import file as onnx_file
from tests.converters.test_torch_nn import random_layer
from tests.io.test_onnx import our_model, rnn_nodes
from tests.support.capped import run_capped
from tests.support.helpers import damaged
from tests.support.timing import HANG

onnx = pytest.importorskip("onnx")
helper = onnx.helper
FLOAT, INT64 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64


def lstm_with_w_from(nodes: list[Any], inits: list[Any]) -> Any:
    """A one-layer LSTM model (hidden 2, input 3) whose W is the tensor ``"W"`` that ``nodes``
    compute from ``inits``; R and B are ordinary initializers."""
    r = helper.make_tensor("R", FLOAT, [1, 8, 2], [0.1] * 16)
    b = helper.make_tensor("B", FLOAT, [1, 16], [0.0] * 16)
    lstm = helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y"], "LSTM_0", hidden_size=2)
    graph = helper.make_graph(
        [*nodes, lstm],
        "bomb",
        [helper.make_tensor_value_info("X", FLOAT, ["T", "B", 3])],
        [helper.make_tensor_value_info("Y", FLOAT, ["T", 1, "B", 2])],
        initializer=[*inits, r, b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def shape(name: str, dims: list[int]) -> Any:
    return helper.make_tensor(name, INT64, [len(dims)], dims)


#: 2**28 x 8 float32 zeros: 8 GiB, asked for by models of a few hundred bytes.
HUGE = [1, 8, 2**28]


def bombs() -> dict[str, Any]:
    zero = helper.make_tensor("zero", FLOAT, [1], [0.0])
    return {
        "ConstantOfShape": lstm_with_w_from(
            [helper.make_node("ConstantOfShape", ["shape"], ["W"], value=zero)],
            [shape("shape", HUGE)],
        ),
        "Expand": lstm_with_w_from(
            [helper.make_node("Expand", ["one", "shape"], ["W"])],
            [helper.make_tensor("one", FLOAT, [1, 1, 1], [1.0]), shape("shape", HUGE)],
        ),
        # A product that overflows int64: NumPy would wrap it to a small (or negative) number.
        "overflow": lstm_with_w_from(
            [helper.make_node("ConstantOfShape", ["shape"], ["W"], value=zero)],
            [shape("shape", [2**32, 2**32, 1])],
        ),
    }


@pytest.mark.skipif(sys.platform != "linux", reason="needs /proc and RLIMIT_AS")
def test_allocation_bombs_are_refused_before_allocating(tmp_path: Path) -> None:
    """Each model asks plumbing for gigabytes: refused at once, in a process that cannot even
    map 1 GiB more than it has after its imports (a regression fails with MemoryError)."""
    for name, model in bombs().items():
        onnx.save_model(model, str(tmp_path / f"{name}.onnx"))
        assert (tmp_path / f"{name}.onnx").stat().st_size < 1000
    imports = """
        import sys, time
        from pathlib import Path
        import onnx.reference
        from cudnn_rnn.converters.onnx import OnnxFormatError, from_onnx
        """
    body = f"""
        for path in sorted(Path({str(tmp_path)!r}).glob("*.onnx")):
            start = time.process_time()
            try:
                from_onnx(path)
                print(path.stem, "accepted")
            except OnnxFormatError as err:
                print(path.stem, "OnnxFormatError", round(time.process_time() - start, 3), err)
            except BaseException as err:
                print(path.stem, type(err).__name__, err)
        """
    done = run_capped(imports, body)
    lines = done.stdout.splitlines()
    assert len(lines) == 3, done.stdout + done.stderr
    for line in lines:
        name, outcome, *rest = line.split(" ", 3)
        assert outcome == "OnnxFormatError", line
        assert float(rest[0]) < HANG, line  # CPU seconds: a bomb evaluated takes minutes
        assert "would make" in rest[1] and "refused before allocating" in rest[1], line


def test_plumbing_budget_over_all_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Many nodes each small still may not allocate without end: everything one read evaluates
    shares one budget of work, in bytes (onnx_file.WORK_FACTOR times the model's bytes plus
    WORK_CONSTANT, here 0): the first Expand of 2000 floats fits in it, the 64 do not."""
    monkeypatch.setattr(onnx_file, "WORK_CONSTANT", 0)
    one = helper.make_tensor("one", FLOAT, [1], [1.0])
    size = 2000
    nodes, parts = [], []
    for k in range(64):
        nodes += [
            helper.make_node("Expand", ["one", "n"], [f"e{k}"]),
            helper.make_node("Slice", [f"e{k}", "s0", "s1"], [f"p{k}"]),
        ]
        parts.append(f"p{k}")
    nodes.append(helper.make_node("Concat", parts, ["flat"], axis=0))
    nodes.append(helper.make_node("Reshape", ["flat", "w_shape"], ["W"]))
    inits = [one, shape("n", [size]), shape("s0", [0]), shape("s1", [1])]
    model = lstm_with_w_from(nodes, [*inits, shape("w_shape", [1, 8, 8])])
    # An Expand costs its floats twice (onnx.reference multiplies by ones) and one node's run.
    expand = 2 * 4 * size + onnx_eval.RUN_COST
    assert expand < onnx_file.WORK_FACTOR * model.ByteSize() < 64 * expand
    with pytest.raises(
        OnnxFormatError,
        match=r"(Expand|Slice) node .* would make (1|2000) elements \(\d+ bytes of work\), "
        r"more than the \d+ bytes left of the \d+ one operation may do with this model "
        r"\(8 times its \d+ bytes plus 0\); refused before allocating them",
    ):
        from_onnx(model)


# -- graphs it does not compute ------------------------------------------------------------------


def custom_domain_layer(model: Any) -> None:
    rnn_nodes(model)[1].domain = "com.example"
    model.opset_import.append(helper.make_opsetid("com.example", 1))


def identity_bypass(model: Any) -> None:
    model.graph.node.append(helper.make_node("Identity", ["X"], ["X_copy"]))
    model.graph.output[0].name = "X_copy"


def states_plus_constant(model: Any) -> None:
    model.graph.initializer.append(helper.make_tensor("pad", FLOAT, [1, 1, 4], [1.0] * 4))
    concat = next(n for n in model.graph.node if list(n.output) == ["Y_h"])
    concat.input.append("pad")


def expanded_output(model: Any) -> None:
    model.graph.initializer.append(shape("twice", [2, 1, 1, 1]))
    reshape = next(n for n in model.graph.node if list(n.output) == ["Y"])
    reshape.output[0] = "Y_once"
    model.graph.node.append(helper.make_node("Expand", ["Y_once", "twice"], ["Y"]))


def first_layer_output(model: Any) -> None:
    model.graph.node.append(helper.make_node("Identity", ["X_1"], ["Y_first"]))
    model.graph.output[0].name = "Y_first"


def states_out_of_order(model: Any) -> None:
    concat = next(n for n in model.graph.node if list(n.output) == ["Y_h"])
    concat.input.reverse()


def input_padded(model: Any) -> None:
    model.graph.initializer.append(helper.make_tensor("bias_x", FLOAT, [1, 1, 3], [0.5] * 3))
    model.graph.node.insert(0, helper.make_node("Concat", ["X", "bias_x"], ["X_padded"], axis=0))
    rnn_nodes(model)[0].input[0] = "X_padded"


@pytest.mark.parametrize(
    "edit,message",
    [
        (custom_domain_layer, r"node 'LSTM_1' is 'LSTM' of domain 'com.example', not a standard"),
        (identity_bypass, r"graph output 'X_copy' comes from the graph input 'X'; our layer"),
        (
            states_plus_constant,
            r"graph output 'Y_h' comes from output 1 \('Y_h_0'\) of LSTM node 'LSTM_0', .*"
            r"the initializer 'pad'",
        ),
        (expanded_output, r"graph output 'Y' comes from output 0 \('Y'\) of Expand node"),
        (first_layer_output, r"graph output 'Y_first' comes from output 0 \('Y_0'\) of LSTM"),
        (states_out_of_order, r"graph output 'Y_h' comes from .*'Y_h_1'.*'Y_h_0'"),
        (input_padded, r"the input X of LSTM node 'LSTM_0' comes from the graph input 'X', the"),
    ],
)
def test_graphs_it_does_not_compute_are_refused(
    edit: Callable[[Any], None], message: str, tmp_path: Path
) -> None:
    model = our_model(tmp_path, "lstm", layers=2)
    from_onnx(model)  # the model as written is read
    edit(model)
    onnx.checker.check_model(model)  # valid ONNX, just not our layer
    with pytest.raises(OnnxFormatError, match="from_onnx: " + message):
        from_onnx(model)


# -- corrupt bytes -------------------------------------------------------------------------------


def test_corrupt_and_truncated_files(tmp_path: Path) -> None:
    """Truncations and byte flips of a valid file: each one is refused with OnnxFormatError or
    read as a layer that computes what the damaged model computes (a flip in a weight's bytes
    is still a valid model), never another exception."""
    reference = pytest.importorskip("onnx.reference")
    layer = random_layer("lstm", 2, "bidirectional", dtype=torch.float32)
    path = tmp_path / "good.onnx"
    to_onnx(layer, path, sequence_lens=False, initial_state=False)
    good = path.read_bytes()
    x = torch.rand(4, 2, 3) * 2 - 1
    rng = np.random.default_rng(0)
    reading, outcomes = 0.0, {"refused": 0, "read": 0, "cannot run": 0}
    for case in range(100):
        bad = tmp_path / f"bad{case}.onnx"
        bad.write_bytes(damaged(good, case, rng))
        start = time.process_time()
        try:
            back = from_onnx(bad)
        except OnnxFormatError:
            outcomes["refused"] += 1
            continue
        finally:
            reading += time.process_time() - start
        outcomes["read"] += 1
        model = onnx.load(str(bad))
        feeds = {model.graph.input[0].name: x.numpy()}
        try:
            with np.errstate(all="ignore"):  # a flipped exponent makes huge weights
                theirs = reference.ReferenceEvaluator(model).run(None, feeds)
        except ValueError:
            # A Reshape target damaged into numbers that fit no input: a model that runs on
            # no input at all. from_onnx does not evaluate the layout ops after the RNN nodes
            # (it checks which ops they are, and shape inference their axes), so it reads the
            # intact RNN nodes; nothing to compare with.
            outcomes["cannot run"] += 1
            continue
        y, states = back(x)
        # The same values, whatever layout ops the damage may have changed after the RNN.
        ours = [t.detach().numpy() for t in (y, *states)][: len(theirs)]
        if not all(np.isfinite(a).all() for a in [*ours, *theirs]):
            continue  # a flipped exponent: weights near 1e38, where the two may overflow apart
        for a, b in zip(ours, theirs):
            np.testing.assert_allclose(
                np.sort(a, axis=None), np.sort(b, axis=None), rtol=1e-4, atol=1e-5
            )
    assert outcomes["refused"] > 50 and outcomes["cannot run"] <= 2, outcomes
    assert reading < HANG  # CPU seconds for the 100 reads (about 1 s)


# -- files that are not regular files ------------------------------------------------------------


class Unblocker:
    """A regression that opens a FIFO waits for a writer: from ``seconds`` on, be that writer
    (the read then ends, late) and say so in ``unblocked``, so that the test fails instead of
    hanging, and by what happened rather than by how long it took."""

    def __init__(self, path: Path, seconds: float) -> None:
        self.unblocked = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._write, args=(path, seconds), daemon=True)
        self._thread.start()

    def _write(self, path: Path, seconds: float) -> None:
        self._stop.wait(seconds)
        while not self._stop.is_set():
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:  # nobody is reading it: nothing to unblock (yet)
                self._stop.wait(0.1)
                continue
            self.unblocked = True
            return

    def cancel(self) -> None:
        self._stop.set()
        self._thread.join()


def unblock_after(path: Path, seconds: float) -> Unblocker:
    return Unblocker(path, seconds)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("kind", ["fifo", "folder", "device"])
def test_non_regular_files_are_refused_before_opening(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:
        path = Path(os.devnull)
    timer = unblock_after(path, 5.0) if kind == "fifo" else None
    try:
        with pytest.raises(
            OnnxFormatError, match=r"is (a folder|not a regular file); only regular files"
        ):
            from_onnx(path)
    finally:
        if timer is not None:
            timer.cancel()
    assert timer is None or not timer.unblocked, "the FIFO was opened"


def test_cli_reads_shapes_through_the_checked_loader(tmp_path: Path) -> None:
    from cudnn_rnn.converters import loader as model_files

    layer = random_layer("gru", 1, "unidirectional", dtype=torch.float32)
    to_onnx(layer, tmp_path / "g.onnx")
    shapes = model_files.tensor_shapes(str(tmp_path / "g.onnx"), "onnx")
    assert shapes["W_0"] == ((1, 12, 3), "float32") and shapes["B_0"] == ((1, 24), "float32")
    os.mkfifo(tmp_path / "f.onnx")
    timer = unblock_after(tmp_path / "f.onnx", 5.0)
    try:
        with pytest.raises(OnnxFormatError, match=r"not a regular file"):
            model_files.tensor_shapes(str(tmp_path / "f.onnx"), "onnx")
    finally:
        timer.cancel()
    assert not timer.unblocked, "the FIFO was opened"
    (tmp_path / "t.onnx").write_bytes((tmp_path / "g.onnx").read_bytes()[:100])
    with pytest.raises(OnnxFormatError, match=r"is not an ONNX model \(DecodeError"):
        model_files.tensor_shapes(str(tmp_path / "t.onnx"), "onnx")


# -- external data -------------------------------------------------------------------------------


def external_model(tmp_path: Path) -> tuple[Path, Any]:
    """A model whose weights are in ``w.bin`` beside it, and the model (external data unread)."""
    model = our_model(tmp_path, "gru")
    path = tmp_path / "ext.onnx"
    onnx.save_model(
        model, str(path), save_as_external_data=True, location="w.bin", size_threshold=0
    )
    from_onnx(path)  # readable as saved
    return path, onnx.load(str(path), load_external_data=False)


def external_entries(model: Any, name: str) -> dict[str, str]:
    tensor = next(t for t in model.graph.initializer if t.name == name)
    return {e.key: e.value for e in tensor.external_data}


def set_external(model: Any, name: str, **entries: Any) -> None:
    tensor = next(t for t in model.graph.initializer if t.name == name)
    for entry in tensor.external_data:
        if entry.key in entries:
            entry.value = str(entries.pop(entry.key))
    for key, value in entries.items():
        tensor.external_data.add(key=key, value=str(value))


@pytest.mark.parametrize(
    "edit,message",
    [
        (
            lambda m, d: set_external(m, "W_0", location="pipe"),
            r"tensor 'W_0' keeps its data in 'pipe', which is not a regular file",
        ),
        (
            lambda m, d: set_external(m, "W_0", location="../w.bin"),
            r"tensor 'W_0' keeps its data in '../w.bin', which is not a file in the model's",
        ),
        (
            lambda m, d: set_external(m, "R_0", length=10**9),
            r"tensor 'R_0' keeps its data in 'w.bin' at bytes \[\d+, \d+\), but that file has",
        ),
        (
            lambda m, d: set_external(m, "R_0", **external_entries(m, "W_0")),
            r"tensors '[RW]_0' and '[RW]_0' claim overlapping bytes of 'w.bin'",
        ),
        (
            lambda m, d: set_external(m, "R_0", length=8),
            r"tensor 'R_0' keeps its data in 'w.bin': 8 bytes, but its shape \[1, 12, 4\] needs "
            r"192\.",
        ),
        (
            lambda m, d: (
                os.symlink("w.bin", d / "link.bin"),
                set_external(m, "R_0", location="link.bin"),
            ),
            r"tensor 'R_0' keeps its data in 'link\.bin', which is a symbolic link; external "
            r"data is read from regular files only\.",
        ),
    ],
)
def test_hostile_external_data(
    edit: Callable[[Any, Path], None], message: str, tmp_path: Path
) -> None:
    path, model = external_model(tmp_path)
    os.mkfifo(tmp_path / "pipe")
    edit(model, tmp_path)
    onnx.save_model(model, str(path))
    timer = unblock_after(tmp_path / "pipe", 5.0)
    try:
        with pytest.raises(OnnxFormatError, match=message):
            load_model(path)
    finally:
        timer.cancel()
    assert not timer.unblocked, "the FIFO was opened"


def test_external_data_is_read_when_needed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Of the tensors kept in external files, a read reads those it evaluates (the RNN's
    weights), the shapes come from the headers, and a load reads them all."""
    model = our_model(tmp_path, "gru")
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.ones(64, np.float32), "E"))
    path = tmp_path / "ext.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, size_threshold=0)
    read: list[str] = []
    reader = onnx_file._external_bytes

    def recording(onnx: Any, tensor: Any, *args: Any) -> bytes:
        read.append(tensor.name)
        return reader(onnx, tensor, *args)

    monkeypatch.setattr(onnx_file, "_external_bytes", recording)
    shapes = tensor_shapes(path)
    assert read == [] and shapes["W_0"] == ((1, 12, 3), "float32")
    find_rnns(path)
    assert sorted(read) == ["B_0", "R_0", "W_0"]
    read.clear()
    load_model(path)
    assert sorted(read) == ["B_0", "E", "R_0", "W_0"]


def test_a_stack_with_every_tensor_external_is_read_whole(tmp_path: Path) -> None:
    """Shape inference needs the values of the shapes and starts between the layers: those
    small tensors are read in from their external file for it, the weights are not."""
    layer = random_layer("lstm", 2, "bidirectional", dtype=torch.float32)
    to_onnx(layer, tmp_path / "m.onnx", sequence_lens=True, initial_state=True)
    model = onnx.load(str(tmp_path / "m.onnx"))
    for t in model.graph.initializer:  # raw data, which save_as_external_data moves out
        t.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(t), t.name))
    path = tmp_path / "ext.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, size_threshold=0)
    stored = onnx.load(str(path), load_external_data=False).graph.initializer
    assert {t.name for t in stored if t.data_location == t.EXTERNAL} >= {"shape_T_B_minus1"}
    assert torch.equal(from_onnx(path).opaque_kernel, layer.opaque_kernel)


def test_a_file_changed_while_it_is_read_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """onnx's checker reads the file by its path before it is read here: a file replaced in
    between is refused, not read unchecked."""
    path = tmp_path / "m.onnx"
    onnx.save_model(our_model(tmp_path, "gru"), str(path))
    checker = onnx.checker.check_model

    def replace_after_check(model: Any, *args: Any, **kwargs: Any) -> None:
        checker(model, *args, **kwargs)
        other = tmp_path / "other.onnx"
        onnx.save_model(our_model(tmp_path, "lstm"), str(other))
        os.replace(other, path)

    monkeypatch.setattr(onnx.checker, "check_model", replace_after_check)
    with pytest.raises(OnnxFormatError, match=r"m\.onnx' changed while it was read"):
        find_rnns(path)


def test_a_loaded_model_with_external_data_is_refused(tmp_path: Path) -> None:
    _, model = external_model(tmp_path)
    with pytest.raises(OnnxFormatError, match=r"keep their data in external files.* path"):
        from_onnx(model)


# -- initial states and lengths the layer would not see --------------------------------------------


def _state_model(tmp_path: Path, what: str, value: np.ndarray) -> Any:
    """Our 1-layer LSTM model (all inputs declared) with its graph input ``what``
    (sequence_lens or initial_h) replaced by a constant of ``value``."""
    from onnx import numpy_helper

    model = our_model(tmp_path, "lstm")
    model.graph.initializer.append(numpy_helper.from_array(value, what))
    del model.graph.input[[i.name for i in model.graph.input].index(what)]
    return model


def test_zero_initial_state_constant_is_accepted(tmp_path: Path) -> None:
    model = _state_model(tmp_path, "initial_h", np.zeros((1, 3, 4), np.float32))
    layer = from_onnx(model)
    assert layer.num_units == 4


def test_non_zero_initial_state_constant_is_refused(tmp_path: Path) -> None:
    model = _state_model(tmp_path, "initial_h", np.full((1, 3, 4), 0.5, np.float32))
    with pytest.raises(OnnxFormatError, match=r"the initial_h of LSTM node .* not from graph"):
        from_onnx(model)


def test_constant_sequence_lens_is_refused(tmp_path: Path) -> None:
    model = _state_model(tmp_path, "sequence_lens", np.array([5, 2, 1], np.int32))
    with pytest.raises(OnnxFormatError, match=r"the sequence_lens of LSTM node .* a graph input"):
        from_onnx(model)


def test_torch_export_zero_states_are_accepted(tmp_path: Path) -> None:
    """torch.onnx.export of an nn.LSTM called without states makes them with ConstantOfShape
    of a shape computed from X's: zeros, which our layer starts from too."""
    import warnings

    module = torch.nn.LSTM(3, 4, 2, bidirectional=True)
    path = tmp_path / "t.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module, (torch.randn(5, 2, 3),), str(path), dynamo=False, input_names=["X"],
            dynamic_axes={"X": {0: "T", 1: "B"}},
        )  # fmt: skip
    layer = from_onnx(path)
    x = torch.randn(6, 2, 3)
    with torch.no_grad():
        assert torch.allclose(layer(x)[0], module(x)[0], atol=1e-6)


def test_a_file_over_2_gib_is_refused_from_its_size(tmp_path: Path) -> None:
    """A protobuf cannot exceed 2 GiB: a 2.6 GB sparse file (no disk cost) is refused from its
    size at once, before a byte is read."""
    import tracemalloc

    path = tmp_path / "big.onnx"
    to_onnx(random_layer("gru", 1, "unidirectional", dtype=torch.float32), path)
    os.truncate(path, 2_600_000_000)
    tracemalloc.start()
    start = time.process_time()
    try:
        with pytest.raises(
            OnnxFormatError,
            match=r"big.onnx' is 2600000000 bytes, more than the 2147483647 a protobuf can hold",
        ):
            from_onnx(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # CPU time: about 0.01 s; reading the 2.6 GB takes seconds of it (3.6 s seen, in the kernel).
    assert time.process_time() - start < 1.0
    assert peak < 1 << 20, peak
