"""The ONNX constant evaluator's bounds: bytes, not elements; all the work of one read; depth.

Hostile models whose RNN weights are computed from one large initializer (the file's bytes) by
plumbing that multiplies them: a ``Cast`` to strings (128 bytes an element in NumPy), a chain of
float ``Cast``/``Expand`` nodes (each as large as the old per-node bound allowed, 16 times the
file), ``GatherND`` with indices expanded from one constant (a Python object per index in
onnx.reference), and model-local functions that call each other twice over (a small file that
expands to thousands of RNN nodes). Each is listed in a fresh interpreter whose peak resident
size (Linux's ``VmHWM``, the helper of :mod:`tests.io.test_onnx_bounds`) may grow at most
:data:`K` times the file plus :data:`SLACK`, at two sizes; the work is refused, not done, and
the RNN is listed with the reason.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cudnn_rnn.converters.onnx import OnnxFormatError, find_rnns
from cudnn_rnn.io.onnx import eval as onnx_eval
from cudnn_rnn.io.onnx import file as onnx_file
from tests.io.test_onnx_bounds import peak_growths
from tests.support.timing import cpu_seconds

onnx = pytest.importorskip("onnx")
helper, numpy_helper = onnx.helper, onnx.numpy_helper
TP = onnx.TensorProto
MIB = 1 << 20

#: Peak growth of a listing, in multiples of the file: the model parsed (1x), and the evaluator's
#: work budget (onnx_eval.WORK_FACTOR = 8x), with room for what the budget does not see (1x).
K = 10
#: What a listing may take besides: the budget's constant (16 MiB) and Python's own structures.
SLACK = 64 * MIB

OPSET = [helper.make_opsetid("", 17)]


def _ints(name: str, values: list[int]) -> Any:
    return helper.make_tensor(name, TP.INT64, [len(values)], values)


def _lstm_model(nodes: list[Any], inits: list[Any], **kwargs: Any) -> Any:
    """One LSTM (hidden 1, input 1) whose W is the tensor ``"W"`` that ``nodes`` compute from
    ``inits``: a flat ``"flat"`` of at least 4 values, sliced and reshaped to [1, 4, 1]."""
    tail = [
        helper.make_node("Slice", ["flat", "s0", "s4"], ["w4"]),
        helper.make_node("Reshape", ["w4", "w_shape"], ["W"]),
        helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y"], "lstm", hidden_size=1),
    ]
    fixed = [
        _ints("s0", [0]),
        _ints("s4", [4]),
        _ints("w_shape", [1, 4, 1]),
        helper.make_tensor("R", TP.FLOAT, [1, 4, 1], [0.1] * 4),
        helper.make_tensor("B", TP.FLOAT, [1, 8], [0.0] * 8),
    ]
    graph = helper.make_graph(
        [*nodes, *tail],
        "hostile",
        [helper.make_tensor_value_info("X", TP.FLOAT, ["T", "N", 1])],
        [helper.make_tensor_value_info("Y", TP.FLOAT, ["T", 1, "N", 1])],
        initializer=[*inits, *fixed],
    )
    return helper.make_model(graph, opset_imports=OPSET, **kwargs)


def _big(n: int) -> Any:
    """``n`` float32 values (distinct, so that no compression could hide them)."""
    return numpy_helper.from_array(np.arange(n, dtype=np.float32), "big")


def cast_string(size: int) -> Any:
    """The file's bytes cast to doubles, to strings (128 bytes each in NumPy) and back."""
    data = numpy_helper.from_array(np.arange(size, dtype=np.uint8), "big")
    nodes = [
        helper.make_node("Cast", ["big"], ["wide"], to=TP.DOUBLE),
        helper.make_node("Cast", ["wide"], ["text"], to=TP.STRING),
        helper.make_node("Cast", ["text"], ["flat"], to=TP.FLOAT),
    ]
    return _lstm_model(nodes, [data])


def float_chain(size: int) -> Any:
    """The file's floats cast to double and back, 30 times."""
    nodes, last = [], "big"
    for k in range(30):
        to = TP.DOUBLE if k % 2 == 0 else TP.FLOAT
        nodes.append(helper.make_node("Cast", [last], [f"c{k}"], to=to))
        last = f"c{k}"
    nodes.append(helper.make_node("Identity", [last], ["flat"]))
    return _lstm_model(nodes, [_big(size // 4)])


def expand_chain(size: int) -> Any:
    """The file's floats expanded 8 times, a row sliced out, expanded again, 4 times."""
    n = size // 4
    nodes, last = [], "big"
    for k in range(4):
        nodes += [
            helper.make_node("Expand", [last, "eight"], [f"e{k}"]),
            helper.make_node("Slice", [f"e{k}", "s0", "s1", "s0"], [f"r{k}"]),
        ]
        last = f"r{k}"
    nodes.append(helper.make_node("Reshape", [last, "minus1"], ["flat"]))
    inits = [_big(n), _ints("eight", [8, n]), _ints("s1", [1]), _ints("minus1", [-1])]
    return _lstm_model(nodes, inits)


def gather_nd(size: int) -> Any:
    """GatherND with 2x the file's bytes of indices, expanded from one constant index (the
    reference implementation makes Python objects per index). The file's bytes are an unused
    initializer."""
    m = size // 2
    nodes = [
        helper.make_node("Expand", ["zero", "m_1"], ["indices"]),
        helper.make_node("GatherND", ["four", "indices"], ["flat"]),
    ]
    inits = [
        _big(size // 4),
        helper.make_tensor("zero", TP.INT64, [1, 1], [0]),
        _ints("m_1", [m, 1]),
        helper.make_tensor("four", TP.FLOAT, [4], [1.0, 2.0, 3.0, 4.0]),
    ]
    return _lstm_model(nodes, inits)


def fan_out(depth: int) -> Any:
    """Model-local functions ``f0`` .. ``f{depth}``, each calling the next twice; the last holds
    an LSTM whose weights are Constant nodes: 2**depth LSTM nodes in a file of a few KB."""
    local = [*OPSET, helper.make_opsetid("local", 1)]
    w = numpy_helper.from_array(np.full((1, 4, 1), 0.5, np.float32), "w")
    r = numpy_helper.from_array(np.full((1, 4, 1), 0.1, np.float32), "r")
    last = helper.make_function(
        "local",
        f"f{depth}",
        ["x"],
        ["y"],
        [
            helper.make_node("Constant", [], ["w"], value=w),
            helper.make_node("Constant", [], ["r"], value=r),
            helper.make_node("LSTM", ["x", "w", "r"], ["y"], "lstm", hidden_size=1),
        ],
        local,
    )
    functions = [last]
    for k in range(depth - 1, -1, -1):
        body = [
            helper.make_node(f"f{k + 1}", ["x"], ["a"], "first", domain="local"),
            helper.make_node(f"f{k + 1}", ["x"], ["b"], "second", domain="local"),
            helper.make_node("Concat", ["a", "b"], ["y"], axis=0),
        ]
        functions.insert(0, helper.make_function("local", f"f{k}", ["x"], ["y"], body, local))
    graph = helper.make_graph(
        [helper.make_node("f0", ["X"], ["Y"], "top", domain="local")],
        "fan_out",
        [helper.make_tensor_value_info("X", TP.FLOAT, ["T", "N", 1])],
        [helper.make_tensor_value_info("Y", TP.FLOAT, ["A", 1, "N", 1])],
    )
    return helper.make_model(graph, opset_imports=local, functions=functions)


#: Each hostile model at two sizes (bytes of the file's initializer, or call depth).
HOSTILE: dict[str, tuple[Callable[[int], Any], tuple[int, int]]] = {
    "cast_string": (cast_string, (1 * MIB, 4 * MIB)),
    "float_chain": (float_chain, (1 * MIB, 4 * MIB)),
    "expand_chain": (expand_chain, (1 * MIB, 4 * MIB)),
    "gather_nd": (gather_nd, (1 * MIB, 4 * MIB)),
    "fan_out": (fan_out, (10, 14)),
}


def write(model: Any, path: Path) -> int:
    onnx.save_model(model, str(path))
    return path.stat().st_size


LISTING = """\
try:
    onnx.find_rnns(PATH)
except onnx.OnnxFormatError:
    pass"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")
def test_listing_a_hostile_model_takes_at_most_k_times_its_file(tmp_path: Path) -> None:
    """find_rnns on each hostile model at both sizes, in one child process that listed a tiny
    one first (what a first listing costs once: imports, allocator pools): each listing's peak
    grows at most K times its file plus SLACK. Before the budget was in bytes they grew 142x
    (Cast to strings), 48x (float chain), 34x (Expand chain), 28x (GatherND) the 4 MiB file,
    and fan_out(14) 94 MiB for 2 KB."""
    tiny = tmp_path / "tiny.onnx"
    write(cast_string(64), tiny)
    cases = []
    for kind, (make, sizes) in HOSTILE.items():
        for size in sizes:
            path = tmp_path / f"{kind}-{size}.onnx"
            cases.append((kind, path, write(make(size), path)))
    grew = peak_growths(LISTING, tiny, [path for _, path, _ in cases])
    for (kind, _, size), peak in zip(cases, grew):
        assert peak <= K * size + SLACK, (
            f"{kind}: the listing's peak grew {peak / MIB:.1f} MiB for a {size / MIB:.2f} MiB "
            f"file (at most {(K * size + SLACK) / MIB:.1f})"
        )


#: What a refusal for work says, after what would have been done.
OVER = (
    r"would take \d+ bytes of work, more than the \d+ bytes left of the \d+ one operation may "
    r"do with this model \(8 times its \d+ bytes plus 16777216\); refused before it is done"
)
ALLOCATING = (
    r"would make \d+ elements \(\d+ bytes of work\), more than the \d+ bytes left of the \d+ "
    r"one operation may do with this model \(8 times its \d+ bytes plus 16777216\); refused "
    r"before allocating them"
)


def w_reason(model: Any) -> str:
    (found,) = find_rnns(model)
    assert not found.computable
    (reason,) = found.reasons
    return reason


@pytest.mark.parametrize(
    "make,reason",
    [
        (
            cast_string,
            r"its W input 'W' cannot be evaluated: Cast node '' has unusable inputs: it casts to "
            r"strings; nothing an RNN's weights, shapes or indices need is a string, so string "
            r"tensors are not evaluated",
        ),
        (float_chain, r"its W input 'W' cannot be evaluated: Cast node '' " + ALLOCATING),
        (
            expand_chain,
            r"its W input 'W' cannot be evaluated: (Expand|Slice) node '' " + ALLOCATING,
        ),
        (gather_nd, r"its W input 'W' cannot be evaluated: GatherND node '' " + ALLOCATING),
    ],
)
def test_hostile_weights_are_a_reason(make: Callable[[int], Any], reason: str) -> None:
    """At 4 MiB each model asks for more work than its budget: the RNN is listed, with why."""
    assert re.fullmatch(reason, w_reason(make(4 * MIB)))


def test_strings_are_never_evaluated() -> None:
    """A string initializer and a string Constant: refused before NumPy holds them."""
    text = helper.make_tensor("text", TP.STRING, [2], [b"1.5", b"2"])
    nodes = [helper.make_node("Cast", ["text"], ["flat"], to=TP.FLOAT)]
    assert re.fullmatch(
        r"its W input 'W' cannot be evaluated: initializer 'text' cannot be read: it holds "
        r"strings; nothing an RNN's weights, shapes or indices need is a string, so string "
        r"tensors are not evaluated",
        w_reason(_lstm_model(nodes, [text])),
    )
    nodes = [
        helper.make_node("Constant", [], ["text"], value_strings=["1", "2", "3", "4"]),
        helper.make_node("Cast", ["text"], ["flat"], to=TP.FLOAT),
    ]
    assert re.fullmatch(
        r"its W input 'W' cannot be evaluated: Constant node '' has unusable inputs: nothing an "
        r"RNN's weights, shapes or indices need is a string, so string tensors are not evaluated",
        w_reason(_lstm_model(nodes, [])),
    )


def test_a_small_file_that_expands_is_refused_after_bounded_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """fan_out(12) holds 4096 LSTM nodes in 1.8 KB: refused once the work its size allows is
    done. That work (and so the time) is the same for 16 times the nodes: measured as a
    CPU-time ratio, with a smaller budget (the old walk took 16 times longer, until 500,000
    nodes)."""
    with pytest.raises(OnnxFormatError, match=r"^find_rnns: [a-z' ]+ " + OVER + r"\.$"):
        find_rnns(fan_out(12))
    monkeypatch.setattr(onnx_file, "WORK_CONSTANT", 2 * MIB)

    def refused(depth: int) -> Callable[[], None]:
        model = fan_out(depth)

        def run() -> None:
            with pytest.raises(OnnxFormatError, match="refused before it is done"):
                find_rnns(model)

        return run

    small, _ = cpu_seconds(refused(10), repeats=2)
    large, _ = cpu_seconds(refused(14), repeats=2)
    assert large < 3 * small, (small, large)


def test_a_plan_that_meets_a_runtime_input_is_not_walked_again() -> None:
    """W computed from a graph input through 2000 Identity nodes, asked for 200 times (as many
    RNN nodes would): the chain is planned once, not 200 times."""
    chain = [helper.make_node("Identity", ["X"], ["c0"])]
    chain += [helper.make_node("Identity", [f"c{k - 1}"], [f"c{k}"]) for k in range(1, 2000)]
    graph = helper.make_graph(
        chain,
        "chain",
        [helper.make_tensor_value_info("X", TP.FLOAT, [1])],
        [helper.make_tensor_value_info("c1999", TP.FLOAT, [1])],
    )
    loaded = onnx_file.source_model(onnx, helper.make_model(graph, opset_imports=OPSET), "test")
    ev = onnx_eval.Evaluator(onnx, loaded, "test")
    scope = onnx_eval.Scope.main(ev, loaded.model)
    before = loaded.work.left
    assert ev.constant(scope, "c1999") is None
    once = before - loaded.work.left
    assert once >= 2000 * onnx_eval.STEP_COST
    for _ in range(199):
        assert ev.constant(scope, "c1999") is None
    assert before - loaded.work.left < once + 200 * onnx_eval.STEP_COST


def nested(calls: int, ifs: int) -> Any:
    """Model-local functions ``f0`` .. that call the next, ``calls`` deep; the last holds
    ``ifs`` If nodes nested in each other's then_branch."""
    local = [*OPSET, helper.make_opsetid("local", 1)]
    flat = [helper.make_tensor_value_info("y", TP.FLOAT, [1])]
    body = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "leaf", [], flat)
    for k in range(ifs):
        other = helper.make_graph(
            [helper.make_node("Identity", ["x"], [f"e{k}"])],
            f"else{k}",
            [],
            [helper.make_tensor_value_info(f"e{k}", TP.FLOAT, [1])],
        )
        node = helper.make_node("If", ["c"], [f"y{k}"], then_branch=body, else_branch=other)
        out = [helper.make_tensor_value_info(f"y{k}", TP.FLOAT, [1])]
        body = helper.make_graph([node], f"then{k}", [], out)
    inner = [*body.node, helper.make_node("Identity", [body.output[0].name], ["out"])]
    functions = [helper.make_function("local", f"f{calls - 1}", ["x", "c"], ["out"], inner, local)]
    for k in range(calls - 2, -1, -1):
        call = helper.make_node(f"f{k + 1}", ["x", "c"], ["out"], domain="local")
        functions.insert(
            0, helper.make_function("local", f"f{k}", ["x", "c"], ["out"], [call], local)
        )
    graph = helper.make_graph(
        [helper.make_node("f0", ["X", "C"], ["Y"], "top", domain="local")],
        "main",
        [
            helper.make_tensor_value_info("X", TP.FLOAT, [1]),
            helper.make_tensor_value_info("C", TP.BOOL, []),
        ],
        [helper.make_tensor_value_info("Y", TP.FLOAT, [1])],
    )
    return helper.make_model(graph, opset_imports=local, functions=functions)


def test_nesting_is_bounded_before_it_is_walked() -> None:
    """onnx's checker takes function calls 100 deep and protobuf about 31 nested subgraphs, so
    together more than 100: walked up to MAX_NESTING = 100 levels, refused beyond."""
    assert find_rnns(nested(70, 29)) == []  # 99 levels
    model = nested(90, 20)
    onnx.checker.check_model(model)  # valid ONNX
    with pytest.raises(
        OnnxFormatError,
        match=r"^find_rnns: If node '' in f0 'top' \(function 'f0' of domain 'local'\) > .*\.\.\. "
        r"is nested in 100 graphs and function calls, and holds or calls more; at most 100 are "
        r"walked\.$",
    ):
        find_rnns(model)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""

    def varint(value: int) -> bytes:
        out = bytearray()
        while True:
            out.append((value & 0x7F) | (0x80 if value > 0x7F else 0))
            value >>= 7
            if not value:
                return bytes(out)

    return varint(number << 3 | 2) + varint(len(payload)) + payload


def test_protobuf_parses_100_levels_of_messages(tmp_path: Path) -> None:
    """A model of If nodes nested 40 deep (3 message levels each), written as bytes (onnx.helper
    cannot make it: protobuf refuses to parse it): refused as no model, by protobuf's own
    depth limit (100 levels, python's upb and onnx's C++ parser alike), before anything here
    walks it."""
    graph = b""
    for _ in range(40):
        attribute = _field(1, b"then_branch") + _field(6, graph) + bytes([0xA0, 0x01, 5])
        node = _field(1, b"c") + _field(2, b"y") + _field(4, b"If") + _field(5, attribute)
        graph = _field(1, node) + _field(2, b"g")
    opset = _field(1, b"") + bytes([0x10, 17])
    model = bytes([0x08, 8]) + _field(7, graph) + _field(8, opset)
    path = tmp_path / "deep.onnx"
    path.write_bytes(model)
    with pytest.raises(OnnxFormatError, match=r"is not an ONNX model \(DecodeError: "):
        find_rnns(path)
