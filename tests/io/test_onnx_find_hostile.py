"""find_rnns and from_onnx(node=) against hostile and corrupt files: bombs at any depth, deep
nesting, long chains, damaged bytes. A bad RNN is a reason in the listing and an
OnnxFormatError when loaded; a bad file is an OnnxFormatError; nothing else."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from cudnn_rnn.converters.onnx import OnnxFormatError, find_rnns, from_onnx
from tests.io.test_onnx_find import LOCAL, X_INPUT, model_of, tagger_file, value, weights
from tests.support.capped import run_capped
from tests.support.helpers import damaged
from tests.support.timing import HANG, cpu_seconds

onnx = pytest.importorskip("onnx")
helper = onnx.helper
numpy_helper = onnx.numpy_helper

#: 2**28 x 8 float32: 8 GiB, asked for by models of a few hundred bytes.
HUGE = np.array([1, 8, 2**28], np.int64)


def lstm(inputs: list[str], out: str, name: str = "lstm", **attrs: Any) -> Any:
    return helper.make_node("LSTM", inputs, [out], name, hidden_size=2, **attrs)


def bomb_in_branch() -> Any:
    """An If whose branch's LSTM takes W from a ConstantOfShape bomb of the main graph."""
    _, r, b = weights("LSTM", 2, 3)
    body = helper.make_graph([lstm(["X", "W", "R", "B"], "y")], "then", [], [value("y")])
    cond = helper.make_node("If", ["flag"], ["Y"], "cond", then_branch=body, else_branch=body)
    flag = helper.make_tensor_value_info("flag", onnx.TensorProto.BOOL, [])
    nodes = [helper.make_node("ConstantOfShape", ["huge"], ["W"], "bomb"), cond]
    huge = numpy_helper.from_array(HUGE, "huge")
    return model_of(nodes, [X_INPUT, flag], ["Y"], [huge, r, b])


def bomb_in_function() -> Any:
    """A model-local function whose body expands a one-element constant into W."""
    _, r, b = weights("LSTM", 2, 3)
    one = numpy_helper.from_array(np.ones((1, 1, 1), np.float32), "one")
    body = [
        helper.make_node("Constant", [], ["shape"], value=numpy_helper.from_array(HUGE, "s")),
        helper.make_node("Constant", [], ["one"], value=one),
        helper.make_node("Expand", ["one", "shape"], ["w"], "expand"),
        lstm(["x", "w", "r", "b"], "y"),
    ]
    fn = helper.make_function("local", "Block", ["x", "r", "b"], ["y"], body, LOCAL[:1])
    call = helper.make_node("Block", ["X", "R", "B"], ["Y"], "block", domain="local")
    return model_of([call], [X_INPUT], ["Y"], [r, b], opset_imports=LOCAL, functions=[fn])


def bomb_in_state() -> Any:
    """An LSTM whose initial_h is a ConstantOfShape of ones, 8 GiB of them."""
    w, r, b = weights("LSTM", 2, 3)
    one = numpy_helper.from_array(np.ones(1, np.float32), "v")
    nodes = [
        helper.make_node("ConstantOfShape", ["huge"], ["h0"], "bomb", value=one),
        lstm(["X", "W", "R", "B", "", "h0"], "Y"),
    ]
    return model_of(nodes, [X_INPUT], ["Y"], [numpy_helper.from_array(HUGE, "huge"), w, r, b])


def bomb_between_layers() -> Any:
    """Two stacked LSTM nodes whose layout Reshape takes its shape from a bomb: no stack (the
    probe cannot evaluate it), two RNNs."""
    w, r, b = weights("LSTM", 2, 3)
    w1, r1, b1 = weights("LSTM", 2, 2, seed=1)
    for t in (w1, r1, b1):
        t.name += "1"
    nodes = [
        lstm(["X", "W", "R", "B"], "Y0", "first"),
        helper.make_node("ConstantOfShape", ["huge"], ["big"], "bomb"),
        helper.make_node("Shape", ["big"], ["shape"], "shape"),
        helper.make_node("Slice", ["shape", "zero", "three"], ["to_3d"], "slice"),
        helper.make_node("Reshape", ["Y0", "to_3d"], ["X1"], "reshape"),
        lstm(["X1", "W1", "R1", "B1"], "Y", "second"),
    ]
    ints = {"huge": HUGE, "zero": np.array([0]), "three": np.array([3])}
    consts = [numpy_helper.from_array(a, n) for n, a in ints.items()]
    return model_of(nodes, [X_INPUT], ["Y"], [*consts, w, r, b, w1, r1, b1])


BOMBS = {
    "bomb_in_branch": (bomb_in_branch, "cond/then_branch/lstm"),
    "bomb_in_function": (bomb_in_function, "block/lstm"),
    "bomb_in_state": (bomb_in_state, "lstm"),
    "bomb_between_layers": (bomb_between_layers, "second"),
}


@pytest.mark.skipif(sys.platform != "linux", reason="needs /proc and RLIMIT_AS")
def test_bombs_at_any_depth_are_reasons_not_allocations(tmp_path: Path) -> None:
    """Each model asks plumbing for gigabytes somewhere the listing evaluates: a reason in the
    listing, an OnnxFormatError when loaded, at once, in a process that cannot even map 1 GiB
    more than it has after its imports (a regression fails with MemoryError)."""
    for name, (make, _) in BOMBS.items():
        onnx.save_model(make(), str(tmp_path / f"{name}.onnx"))
        assert (tmp_path / f"{name}.onnx").stat().st_size < 2000
    nodes = {name: node for name, (_, node) in BOMBS.items()}
    imports = """
        import json, time
        from pathlib import Path
        import onnx.reference
        from cudnn_rnn.converters.onnx import OnnxFormatError, find_rnns, from_onnx
        """
    body = f"""
        for path in sorted(Path({str(tmp_path)!r}).glob("*.onnx")):
            start = time.process_time()
            found = {{r.name: list(r.reasons) for r in find_rnns(path)}}
            try:
                from_onnx(path, node={nodes!r}[path.stem])
                outcome = "accepted"
            except OnnxFormatError as err:
                outcome = str(err)
            print(json.dumps([path.stem, found, outcome, time.process_time() - start]))
        """
    done = run_capped(imports, body)
    assert done.returncode == 0, done.stderr[-3000:]
    results = {r[0]: r[1:] for r in map(json.loads, done.stdout.splitlines())}
    assert set(results) == set(BOMBS)
    for name, (found, outcome, seconds) in results.items():
        node = nodes[name]
        assert seconds < HANG, (name, seconds)  # CPU seconds: a bomb evaluated takes minutes
        if name == "bomb_between_layers":  # both layers computable, not one stack
            assert found == {"first": [], "second": []}, found
            assert outcome == "accepted"
            continue
        (reason,) = found[node]
        if name == "bomb_in_state":  # its value attribute says non-zero: never evaluated
            assert reason.startswith("its initial_h comes from output 0 ('h0') of ConstantOf")
            assert "a non-zero constant" in reason and reason in outcome, (reason, outcome)
            continue
        assert "would make" in reason and "refused before allocating" in reason, reason
        assert "would make" in outcome and outcome.startswith("from_onnx: "), outcome


def test_deeply_nested_subgraphs() -> None:
    """An LSTM 30 If nodes deep (protobuf parses 100 levels of messages, 3 per If): walked
    without recursion, named by its path."""
    w, r, b = weights("LSTM", 2, 3)
    flag = helper.make_tensor_value_info("flag", onnx.TensorProto.BOOL, [])
    node = lstm(["X", "W", "R", "B"], "y")
    for depth in range(30):
        out = f"y{depth}"
        then = helper.make_graph([node], f"then{depth}", [], [value(node.output[0])])
        copy = helper.make_node("Identity", ["X"], [f"x{depth}"])
        other = helper.make_graph([copy], f"else{depth}", [], [value(f"x{depth}")])
        node = helper.make_node(
            "If", ["flag"], [out], f"if{depth}", then_branch=then, else_branch=other
        )
    model = model_of([node], [X_INPUT, flag], [node.output[0]], [w, r, b])
    (found,) = find_rnns(model)
    assert found.name == "/".join(f"if{d}/then_branch" for d in range(29, -1, -1)) + "/lstm"
    assert found.computable


def test_a_long_chain_of_plumbing() -> None:
    """W computed through 1500 Identity nodes inside a Loop body: evaluated without recursion."""
    w, r, b = weights("LSTM", 2, 3)
    chain = [helper.make_node("Identity", ["W"], ["w0"], "id0")]
    chain += [
        helper.make_node("Identity", [f"w{k - 1}"], [f"w{k}"], f"id{k}") for k in range(1, 1500)
    ]
    body_nodes = [
        *chain,
        lstm(["x_in", "w1499", "R", "B"], "y"),
        helper.make_node("Identity", ["c"], ["c_out"]),
    ]
    body = helper.make_graph(
        body_nodes,
        "body",
        [
            helper.make_tensor_value_info("i", onnx.TensorProto.INT64, []),
            helper.make_tensor_value_info("c", onnx.TensorProto.BOOL, []),
            value("x_in", 3),
        ],
        [helper.make_tensor_value_info("c_out", onnx.TensorProto.BOOL, []), value("y")],
    )
    loop = helper.make_node("Loop", ["n", "", "X"], ["Y"], "loop", body=body)
    n = helper.make_tensor_value_info("n", onnx.TensorProto.INT64, [])
    model = model_of([loop], [X_INPUT, n], ["Y"], [w, r, b])
    cpu, (found,) = cpu_seconds(lambda: find_rnns(model))
    assert found.name == "loop/body/lstm" and found.computable, found
    assert cpu < HANG


def test_corrupt_whole_network_files(tmp_path: Path) -> None:
    """Truncations and byte flips of a torch-exported whole network: find_rnns and
    from_onnx(node=) give records and layers or an OnnxFormatError, never another exception."""
    _, path, _ = tagger_file(tmp_path)
    good = path.read_bytes()
    rng = np.random.default_rng(0)
    outcomes = {"refused": 0, "listed": 0, "loaded": 0}
    start = time.process_time()
    for case in range(120):
        bad = tmp_path / f"bad{case}.onnx"
        bad.write_bytes(damaged(good, case, rng))
        try:
            found = find_rnns(bad)
        except OnnxFormatError:
            outcomes["refused"] += 1
            continue
        outcomes["listed"] += 1
        for record in found:
            try:
                layer = from_onnx(bad, node=record.name)
            except OnnxFormatError:
                assert not record.computable, record
                continue
            assert record.computable, record
            outcomes["loaded"] += 1
            with torch.no_grad(), np.errstate(all="ignore"):
                layer(torch.zeros(2, 1, layer.input_size))
    assert outcomes["refused"] > 30 and outcomes["loaded"] > 10, outcomes
    assert time.process_time() - start < HANG


def test_names_that_are_not_utf8(tmp_path: Path) -> None:
    """A file whose names are not UTF-8 (protobuf hands them over as bytes): listed and loaded
    by paths of text, or refused with an OnnxFormatError."""
    _, path, _ = tagger_file(tmp_path)
    data = path.read_bytes()
    for old, new in (
        (b"/lstm/Transpose", b"/lstm/Transpos\xff"),
        (b"/lstm/LSTM_1", b"/lstm/LST\xff_1"),
    ):
        assert old in data
        data = data.replace(old, new)
    (tmp_path / "bytes.onnx").write_bytes(data)
    found = find_rnns(tmp_path / "bytes.onnx")
    (stack,) = found
    assert stack.name == "/lstm/LSTM+/lstm/LST\ufffd_1", stack
    assert from_onnx(tmp_path / "bytes.onnx", node=stack.name).num_layers == 2
    for name in stack.details["nodes"]:
        assert from_onnx(tmp_path / "bytes.onnx", node=name).num_layers == 1
