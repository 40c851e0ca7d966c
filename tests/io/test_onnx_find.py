"""find_rnns and from_onnx(node=): every RNN of an ONNX model at any depth, each loaded alone.

The models are made by the real producer (torch.onnx.export: whole networks, control flow,
weights in Constant nodes, several RNNs) or by onnx.helper where no producer writes the case
(model-local functions, Scan, attributes cuDNN does not compute). Each loaded RNN is checked
against the producer's own output: the torch module it was exported from, and onnxruntime
running the model with the RNN's input and output added as graph outputs.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from cudnn_rnn.converters.onnx import (
    OnnxFormatError,
    find_rnns,
    from_onnx,
    read,
    tensor_shapes,
    to_onnx,
)
from cudnn_rnn.converters.torch_nn import from_torch
from cudnn_rnn.core.variant import Activation, Variant
from cudnn_rnn.io.found import FoundRNN
from tests.converters.test_torch_nn import random_layer

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
helper = onnx.helper
numpy_helper = onnx.numpy_helper
FLOAT = onnx.TensorProto.FLOAT
ATOL = 1e-5


# -- helpers ---------------------------------------------------------------------------------------


def export(module: nn.Module, args: tuple[Any, ...], path: Path, **kwargs: Any) -> Path:
    """torch.onnx.export, the TorchScript exporter unless ``dynamo=True`` is passed; its
    deprecation and tracing notes silenced (warnings are errors in this suite)."""
    kwargs.setdefault("dynamo", False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, str(path), **kwargs)
    return path


def scripted(module: nn.Module) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.jit.script(module)


def run_ort(
    model: Any, feeds: dict[str, np.ndarray], extra: tuple[str, ...] = ()
) -> dict[str, np.ndarray]:
    """onnxruntime's outputs of ``model`` (a ModelProto or a path), by name, with the main-graph
    tensors ``extra`` added as graph outputs."""
    model = onnx.load(str(model)) if isinstance(model, (str, Path)) else model
    model = onnx.shape_inference.infer_shapes(model)
    typed = {v.name: v for v in [*model.graph.value_info, *model.graph.input]}
    for name in extra:
        model.graph.output.append(
            typed.get(name) or helper.make_tensor_value_info(name, FLOAT, None)
        )
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds)))


def close(ours: torch.Tensor, theirs: Any, atol: float = ATOL) -> None:
    theirs = theirs.detach().numpy() if isinstance(theirs, torch.Tensor) else np.asarray(theirs)
    assert tuple(ours.shape) == theirs.shape
    np.testing.assert_allclose(ours.detach().numpy(), theirs, atol=atol, rtol=0)


def node_named(model: Any, name: str) -> Any:
    return next(n for n in model.graph.node if n.name == name)


def flat_y(y: np.ndarray) -> np.ndarray:
    """An RNN node's Y [T, D, B, H] as our layer's output [T, B, D*H]."""
    t, d, b, h = y.shape
    return y.transpose(0, 2, 1, 3).reshape(t, b, d * h)


def by_name(records: list[FoundRNN]) -> dict[str, FoundRNN]:
    return {r.name: r for r in records}


# -- (a) a whole network: Embedding -> 2-layer bidirectional LSTM -> Linear ---------------------


class Tagger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(11, 3)
        self.lstm = nn.LSTM(3, 4, num_layers=2, bidirectional=True)
        self.head = nn.Linear(8, 2)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        y, _ = self.lstm(self.embed(tokens))
        return self.head(y)  # type: ignore[no-any-return]


def tagger_file(tmp_path: Path, **kwargs: Any) -> tuple[Tagger, Path, torch.Tensor]:
    net = Tagger().eval()
    tokens = torch.randint(0, 11, (5, 2))
    path = export(
        net,
        (tokens,),
        tmp_path / "tagger.onnx",
        input_names=["tokens"],
        dynamic_axes={"tokens": {0: "T", 1: "B"}},
        **kwargs,
    )
    return net, path, tokens


STACK = "/lstm/LSTM+/lstm/LSTM_1"


def test_whole_network_lists_its_lstm_as_one_stack(tmp_path: Path) -> None:
    _, path, _ = tagger_file(tmp_path)
    (found,) = find_rnns(path)
    assert found == FoundRNN(
        STACK,
        "LSTM nodes '/lstm/LSTM', '/lstm/LSTM_1' of the main graph",
        "onnx",
        "lstm",
        num_layers=2,
        num_units=4,
        input_size=3,
        direction="bidirectional",
    )
    assert found.details == {
        "nodes": ["/lstm/LSTM", "/lstm/LSTM_1"],
        "op_type": "LSTM",
        "layout": 0,
        "dtype": "float32",
    }
    assert find_rnns(onnx.load(str(path))) == [found]  # a loaded ModelProto too


@torch.no_grad()
def test_whole_network_loads_against_torch_and_onnxruntime(tmp_path: Path) -> None:
    net, path, _ = tagger_file(tmp_path)
    model = onnx.load(str(path))
    first, second = node_named(model, "/lstm/LSTM"), node_named(model, "/lstm/LSTM_1")
    tokens = torch.randint(0, 11, (7, 3))  # other sizes than the export's: dynamic axes
    got = run_ort(
        path,
        {"tokens": tokens.numpy()},
        (first.input[0], first.output[0], second.input[0], second.output[0]),
    )
    x = torch.from_numpy(got[first.input[0]])

    layer = from_onnx(path, node=STACK)
    assert layer.num_layers == 2 and layer.direction == "bidirectional"
    assert torch.equal(layer.opaque_kernel, from_torch(net.lstm).opaque_kernel)  # lossless
    y = layer(x)[0]
    close(y, flat_y(got[second.output[0]]))  # the producer's output in onnxruntime
    close(y, net.lstm(net.embed(tokens))[0])  # and in torch
    close(net.head(y), got[model.graph.output[0].name])  # the whole network's output

    # Each node of the stack alone: that layer.
    layer_0 = from_onnx(path, node="/lstm/LSTM")
    assert layer_0.num_layers == 1
    close(layer_0(x)[0], flat_y(got[first.output[0]]))
    layer_1 = from_onnx(path, node="/lstm/LSTM_1")
    assert layer_1.input_size == 8
    close(layer_1(torch.from_numpy(got[second.input[0]]))[0], flat_y(got[second.output[0]]))


def reversed_nodes(model: Any) -> Any:
    """``model`` with the node list of its main graph reversed (a copy)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    nodes = list(copy.graph.node)[::-1]
    kept = [onnx.NodeProto() for _ in nodes]
    for new, old in zip(kept, nodes):
        new.CopyFrom(old)
    del copy.graph.node[:]
    copy.graph.node.extend(kept)
    return copy


@torch.no_grad()
def test_nodes_out_of_topological_order_are_read_sorted(tmp_path: Path) -> None:
    """onnx's checker refuses a graph whose nodes are not sorted topologically, which
    onnxruntime runs: the tagger's node list reversed is read as the file in order, from a path
    and from a loaded model (which is left as it was)."""
    net, path, _ = tagger_file(tmp_path)
    model = reversed_nodes(onnx.load(str(path)))
    with pytest.raises(onnx.checker.ValidationError, match="must be topologically sorted"):
        onnx.checker.check_model(model)
    unsorted = tmp_path / "unsorted.onnx"
    onnx.save_model(model, str(unsorted))
    tokens = torch.randint(0, 11, (7, 3))
    out = model.graph.output[0].name
    assert np.array_equal(
        run_ort(unsorted, {"tokens": tokens.numpy()})[out],
        run_ort(path, {"tokens": tokens.numpy()})[out],
    )  # onnxruntime runs it
    assert find_rnns(unsorted) == find_rnns(path)
    layer = from_onnx(unsorted, node=STACK)
    assert torch.equal(layer.opaque_kernel, from_torch(net.lstm).opaque_kernel)
    close(layer(net.embed(tokens))[0], net.lstm(net.embed(tokens))[0])
    before = model.SerializeToString()
    assert find_rnns(model) == find_rnns(path)
    assert model.SerializeToString() == before


def test_a_whole_stack_out_of_order_is_read_sorted(tmp_path: Path) -> None:
    """Our own 2-layer model with its nodes reversed, read whole (strict shape inference runs
    on the sorted model): the layer it was written from."""
    layer = random_layer("gru", 2, "bidirectional", dtype=torch.float32)
    to_onnx(layer, tmp_path / "m.onnx")
    path = tmp_path / "unsorted.onnx"
    onnx.save_model(reversed_nodes(onnx.load(str(tmp_path / "m.onnx"))), str(path))
    assert torch.equal(from_onnx(path).opaque_kernel, layer.opaque_kernel)


def test_a_name_a_subgraph_uses_orders_its_node() -> None:
    """An If whose branch reads ``w``, listed before the node that computes ``w``: sorted
    after it (a subgraph's names are its node's inputs too), and the branch's LSTM is read."""
    w, r, b = weights("LSTM", 2, 3)
    branch = helper.make_graph(
        [helper.make_node("LSTM", ["X", "w", "R", "B"], ["y"], "lstm", hidden_size=2)],
        "then",
        [],
        [value("y")],
    )
    nodes = [
        helper.make_node("If", ["flag"], ["Y"], "cond", then_branch=branch, else_branch=branch),
        helper.make_node("Identity", ["W"], ["w"], "copy"),
    ]
    flag = helper.make_tensor_value_info("flag", onnx.TensorProto.BOOL, [])
    graph = helper.make_graph(nodes, "g", [X_INPUT, flag], [value("Y")], initializer=[w, r, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(onnx.checker.ValidationError, match="must be topologically sorted"):
        onnx.checker.check_model(model)
    found = find_rnns(model)
    assert [(f.name, f.computable) for f in found] == [
        ("cond/else_branch/lstm", True),  # (make_node sorts attributes by name)
        ("cond/then_branch/lstm", True),
    ]


def test_a_cycle_is_still_refused(tmp_path: Path) -> None:
    """Nodes that compute each other: no order mends that; the checker's refusal stands."""
    w, r, b = weights("LSTM", 2, 3)
    nodes = [
        helper.make_node("Identity", ["b"], ["a"], "first"),
        helper.make_node("Identity", ["a"], ["b"], "second"),
        helper.make_node("LSTM", ["X", "W", "R", "B"], ["y"], "lstm", hidden_size=2),
    ]
    graph = helper.make_graph(nodes, "g", [X_INPUT], [value("y")], initializer=[w, r, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save_model(model, str(tmp_path / "cycle.onnx"))
    for source in (tmp_path / "cycle.onnx", model):
        with pytest.raises(
            OnnxFormatError,
            match=r"the model is not valid ONNX: Nodes in a graph must be topologically sorted",
        ):
            find_rnns(source)


def test_whole_network_without_node_is_refused_naming_its_rnns(tmp_path: Path) -> None:
    """Decided: a graph that computes more than the RNN is refused even when it holds one RNN
    (the layer would compute a part of the model, silently); the message names the part."""
    _, path, _ = tagger_file(tmp_path)
    with pytest.raises(
        OnnxFormatError,
        match=r"the graph also computes with \['Add', 'MatMul'\].* pass its name: "
        r"from_onnx\(path, node=NAME\) .*it has 1: '/lstm/LSTM\+/lstm/LSTM_1' \(lstm "
        r"bidirectional, 2 layer\(s\), num_units=4, input_size=3: LSTM nodes",
    ):
        from_onnx(path)


@torch.no_grad()
def test_whole_network_without_constant_folding(tmp_path: Path) -> None:
    """do_constant_folding=False: the weights reach the LSTM nodes through Unsqueeze, Slice and
    Concat of the module's parameters, which are evaluated (bounded)."""
    net, path, tokens = tagger_file(tmp_path, do_constant_folding=False)
    model = onnx.load(str(path))
    inits = {t.name for t in model.graph.initializer}
    assert node_named(model, "/lstm/LSTM").input[1] not in inits  # computed, not stored
    (found,) = find_rnns(path)
    assert found.name == STACK and found.computable
    layer = from_onnx(path, node=STACK)
    assert torch.equal(layer.opaque_kernel, from_torch(net.lstm).opaque_kernel)
    close(layer(net.embed(tokens))[0], net.lstm(net.embed(tokens))[0])


@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
@torch.no_grad()
def test_whole_network_of_the_dynamo_exporter(tmp_path: Path) -> None:
    """The torch.export-based exporter bakes the export's sizes into its Reshape nodes: the
    layout between the two layers is checked at the sizes the model declares."""
    pytest.importorskip("onnxscript")
    net = Tagger().eval()
    tokens = torch.randint(0, 11, (5, 2))
    path = export(net, (tokens,), tmp_path / "d.onnx", dynamo=True, verbose=False)
    (found,) = find_rnns(path)
    assert found.num_layers == 2 and found.computable, found
    layer = from_onnx(path, node=found.name)
    assert torch.equal(layer.opaque_kernel, from_torch(net.lstm).opaque_kernel)
    (logits,) = run_ort(
        path, {next(iter(onnx.load(str(path)).graph.input)).name: tokens.numpy()}
    ).values()
    close(net.head(layer(net.embed(tokens))[0]), logits)


# -- (b) control flow: If (a scripted if, torch.cond) and Loop ----------------------------------


class Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.lstm = nn.LSTM(3, 4)
        self.gru = nn.GRU(3, 4, bidirectional=True)

    def forward(self, x: torch.Tensor, flag: torch.Tensor) -> torch.Tensor:
        if bool(flag.sum() > 0):
            y, _ = self.lstm(x)
        else:
            y, _ = self.gru(x)
            y = y[..., :4]
        return y


def branchy_file(tmp_path: Path) -> tuple[Branchy, Path]:
    net = Branchy().eval()
    x = torch.randn(5, 2, 3)
    path = export(scripted(net), (x, torch.ones(1)), tmp_path / "if.onnx", input_names=["x", "f"])
    return net, path


def test_rnns_inside_if_branches_are_listed(tmp_path: Path) -> None:
    _, path = branchy_file(tmp_path)
    lstm, gru = find_rnns(path)
    assert (lstm.name, lstm.where) == (
        "/If/then_branch//LSTM",
        "LSTM node '/LSTM' in If '/If' > then_branch",
    )
    assert (lstm.mode, lstm.direction, lstm.num_units, lstm.input_size) == (
        "lstm",
        "unidirectional",
        4,
        3,
    )
    assert (gru.name, gru.where) == (
        "/If/else_branch//GRU",
        "GRU node '/GRU' in If '/If' > else_branch",
    )
    assert (gru.mode, gru.direction, gru.computable) == ("gru", "bidirectional", True)
    with pytest.raises(
        OnnxFormatError,
        match=r"the main graph has no LSTM, GRU or RNN node \(it has .*'If'.*\); the ones in its "
        r"subgraphs or functions are read one at a time, by name\. .*it has 2: "
        r"'/If/then_branch//LSTM' .*'/If/else_branch//GRU'",
    ):
        from_onnx(path)


@torch.no_grad()
def test_rnns_inside_if_branches_load_against_the_model(tmp_path: Path) -> None:
    net, path = branchy_file(tmp_path)
    x = torch.randn(5, 2, 3)  # the sizes of the export (its input shapes are static)
    lstm = from_onnx(path, node="/If/then_branch//LSTM")
    gru = from_onnx(path, node="/If/else_branch//GRU")
    assert torch.equal(lstm.opaque_kernel, from_torch(net.lstm).opaque_kernel)
    assert torch.equal(gru.opaque_kernel, from_torch(net.gru).opaque_kernel)
    (then,) = run_ort(path, {"x": x.numpy(), "f": np.ones(1, np.float32)}).values()
    (other,) = run_ort(path, {"x": x.numpy(), "f": -np.ones(1, np.float32)}).values()
    close(lstm(x)[0], then)
    close(gru(x)[0][..., :4], other)
    close(gru(x)[0], net.gru(x)[0])


@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
@torch.no_grad()
def test_torch_cond_branches(tmp_path: Path) -> None:
    """torch.cond, exported by the torch.export-based exporter: an If with an LSTM in one branch
    and a GRU in the other, their weights initializers of the main graph."""
    pytest.importorskip("onnxscript")

    class Cond(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(2)
            self.lstm = nn.LSTM(3, 4)
            self.gru = nn.GRU(3, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            def then(x: torch.Tensor) -> torch.Tensor:
                return self.lstm(x)[0]  # type: ignore[no-any-return]

            def other(x: torch.Tensor) -> torch.Tensor:
                return self.gru(x)[0]  # type: ignore[no-any-return]

            return torch.cond(x.sum() > 0, then, other, (x,))  # type: ignore[no-any-return]

    net = Cond().eval()
    x = torch.randn(5, 2, 3)
    path = export(net, (x,), tmp_path / "cond.onnx", dynamo=True, verbose=False)
    found = find_rnns(path)
    assert [(r.mode, r.where.split(" in ")[1].split(" > ")[1]) for r in found] == [
        ("lstm", "then_branch"),
        ("gru", "else_branch"),
    ]
    lstm, gru = (from_onnx(path, node=r.name) for r in found)
    input_name = onnx.load(str(path)).graph.input[0].name
    for sign, layer, module in ((1.0, lstm, net.lstm), (-1.0, gru, net.gru)):
        xs = x.abs() * sign
        (y,) = run_ort(path, {input_name: xs.numpy()}).values()
        close(layer(xs)[0], y)
        close(layer(xs)[0], module(xs)[0])  # (torch.cond runs eagerly only when compiled)


class Loopy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.gru = nn.GRU(4, 4)

    def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
        for _ in range(n):
            x, _ = self.gru(x)
        return x


@torch.no_grad()
def test_rnn_inside_a_loop_body(tmp_path: Path) -> None:
    """A scripted for loop: a Loop whose body holds the GRU; the body's initial state is an
    Expand of an outer-scope zero constant to a run-time shape (zeros: computable)."""
    net = Loopy().eval()
    x = torch.randn(5, 2, 4)
    path = export(scripted(net), (x, 3), tmp_path / "loop.onnx", input_names=["x", "n"])
    (found,) = find_rnns(path)
    assert (found.name, found.where, found.computable) == (
        "/Loop/body//GRU",
        "GRU node '/GRU' in Loop '/Loop' > body",
        True,
    )
    layer = from_onnx(path, node=found.name)
    (y,) = run_ort(path, {"x": x.numpy(), "n": np.array(2)}).values()
    close(layer(layer(x)[0])[0], y)
    close(layer(x)[0], net(x, 1))


# -- (c) weights in Constant nodes --------------------------------------------------------------


def test_weights_in_outer_constant_nodes(tmp_path: Path) -> None:
    """The scripted export keeps every parameter in a Constant node of the main graph, which
    the branches slice, concatenate and unsqueeze into W, R and B: outer names, evaluated."""
    net, path = branchy_file(tmp_path)
    model = onnx.load(str(path))
    assert not model.graph.initializer
    constants = [n for n in model.graph.node if n.op_type == "Constant"]
    shapes = tensor_shapes(path)  # the inspect listing: Constant nodes' tensors, from headers
    assert all(shapes[n.output[0]][1] in ("float32", "int64") for n in constants)
    assert sorted(s for s, _ in shapes.values() if len(s) == 2 and s[0] == 16) == [(16, 3), (16, 4)]
    lstm = from_onnx(path, node="/If/then_branch//LSTM")
    assert torch.equal(lstm.opaque_kernel, from_torch(net.lstm).opaque_kernel)


def to_constant_nodes(model: Any) -> Any:
    """``model`` with every initializer of its main graph moved into a Constant node."""
    moved = onnx.ModelProto()
    moved.CopyFrom(model)
    nodes = [
        helper.make_node("Constant", [], [t.name], f"const_{t.name}", value=t)
        for t in moved.graph.initializer
    ]
    del moved.graph.initializer[:]
    kept = [i for i in moved.graph.input if i.name not in {n.output[0] for n in nodes}]
    del moved.graph.input[:]
    moved.graph.input.extend(kept)
    old = list(moved.graph.node)
    del moved.graph.node[:]
    moved.graph.node.extend([*nodes, *old])
    onnx.checker.check_model(moved)
    return moved


@torch.no_grad()
def test_weights_moved_into_constant_nodes(tmp_path: Path) -> None:
    net, path, tokens = tagger_file(tmp_path)
    model = to_constant_nodes(onnx.load(str(path)))
    assert find_rnns(model) == find_rnns(path)
    layer = from_onnx(model, node=STACK)
    assert torch.equal(layer.opaque_kernel, from_torch(net.lstm).opaque_kernel)
    (logits,) = run_ort(model, {"tokens": tokens.numpy()}).values()
    close(net.head(layer(net.embed(tokens))[0]), logits)
    onnx.save(model, str(tmp_path / "c.onnx"))
    assert len(tensor_shapes(tmp_path / "c.onnx")) >= len(onnx.load(str(path)).graph.initializer)


# -- (d) several RNNs in one graph --------------------------------------------------------------


class Several(nn.Module):
    """An encoder GRU, a 2-layer decoder LSTM after a Linear, a relu RNN beside them, and two
    1-layer LSTMs one after the other (the same math as one 2-layer LSTM)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(4)
        self.enc = nn.GRU(3, 5, bidirectional=True)
        self.mid = nn.Linear(10, 6)
        self.dec = nn.LSTM(6, 4, num_layers=2)
        self.side = nn.RNN(3, 2, nonlinearity="relu")
        self.a = nn.LSTM(3, 3)
        self.b = nn.LSTM(3, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        e, _ = self.enc(x)
        d, _ = self.dec(torch.tanh(self.mid(e)))
        s, _ = self.side(x)
        c, _ = self.b(self.a(x)[0])
        return d, s, c


@torch.no_grad()
def test_several_rnns_in_one_graph(tmp_path: Path) -> None:
    net = Several().eval()
    x = torch.randn(5, 2, 3)
    path = export(
        net, (x,), tmp_path / "s.onnx", input_names=["x"], dynamic_axes={"x": {0: "T", 1: "B"}}
    )
    found = find_rnns(path)
    assert [
        (r.name, r.mode, r.num_layers, r.num_units, r.input_size, r.direction) for r in found
    ] == [
        ("/enc/GRU", "gru", 1, 5, 3, "bidirectional"),
        ("/dec/LSTM+/dec/LSTM_1", "lstm", 2, 4, 6, "unidirectional"),
        ("/side/RNN", "rnn_relu", 1, 2, 3, "unidirectional"),
        ("/a/LSTM+/b/LSTM", "lstm", 2, 3, 3, "unidirectional"),
    ]
    assert all(r.computable for r in found)
    enc, dec, side, ab = (from_onnx(path, node=r.name) for r in found)
    x = torch.randn(7, 3, 3)
    model = onnx.load(str(path))
    enc_node = node_named(model, "/enc/GRU")
    got = run_ort(path, {"x": x.numpy()}, (enc_node.output[0],))
    d, s, c = (got[o.name] for o in model.graph.output)
    e = enc(x)[0]
    close(e, flat_y(got[enc_node.output[0]]))
    close(dec(torch.tanh(net.mid(e)))[0], d)
    close(side(x)[0], s)
    close(ab(x)[0], c)
    for layer, module in ((enc, net.enc), (dec, net.dec), (side, net.side)):
        assert torch.equal(layer.opaque_kernel, from_torch(module).opaque_kernel)
    # Each of the two LSTMs alone is its module.
    close(from_onnx(path, node="/a/LSTM")(x)[0], net.a(x)[0])
    close(from_onnx(path, node="/b/LSTM")(x)[0], net.b(x)[0])


class Packed(nn.Module):
    """A GRU over packed sequences: the export's sequence_lens is a Cast of the lengths input."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(5)
        self.gru = nn.GRU(3, 4, bidirectional=True)
        self.head = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths)
        y, _ = nn.utils.rnn.pad_packed_sequence(self.gru(packed)[0], total_length=x.shape[0])
        return self.head(y)  # type: ignore[no-any-return]


@torch.no_grad()
def test_sequence_lengths_computed_at_run_time(tmp_path: Path) -> None:
    net = Packed().eval()
    x, lengths = torch.randn(5, 3, 3), torch.tensor([5, 3, 2])
    axes = {"x": {0: "T", 1: "B"}, "lengths": {0: "B"}}
    path = export(
        net, (x, lengths), tmp_path / "p.onnx", input_names=["x", "lengths"], dynamic_axes=axes
    )
    (found,) = find_rnns(path)
    assert (found.name, found.computable) == ("/gru/GRU", True)
    layer = from_onnx(path, node=found.name)
    x, lengths = torch.randn(6, 4, 3), torch.tensor([6, 4, 4, 1])
    ours = net.head(layer(x, sequence_lengths=lengths.tolist())[0])
    (theirs,) = run_ort(path, {"x": x.numpy(), "lengths": lengths.numpy()}).values()
    close(ours, theirs)
    close(ours, net(x, lengths))


def test_our_own_model_lists_as_one_stack(tmp_path: Path) -> None:
    layer = random_layer("gru", 3, "bidirectional", dtype=torch.float32)
    to_onnx(layer, tmp_path / "g.onnx", sequence_lens=True, initial_state=True)
    (found,) = find_rnns(tmp_path / "g.onnx")
    assert found.name == "GRU_0+GRU_1+GRU_2" and found.num_layers == 3 and found.computable
    back = from_onnx(tmp_path / "g.onnx", node=found.name)
    assert torch.equal(back.opaque_kernel, layer.opaque_kernel)


def test_a_wrong_layout_between_two_nodes_is_no_stack(tmp_path: Path) -> None:
    """Y [T, D, B, H] transposed to [T, B, H, D] and reshaped to [T, B, H*D] interleaves the
    two directions: valid shapes, another layout; the probe sees it, and the two nodes are two
    RNNs (each computable alone)."""
    layer = random_layer("lstm", 2, "bidirectional", dtype=torch.float32)
    to_onnx(layer, tmp_path / "m.onnx")
    model = onnx.load(str(tmp_path / "m.onnx"))
    transpose = next(n for n in model.graph.node if n.op_type == "Transpose")
    del transpose.attribute[:]
    transpose.attribute.append(helper.make_attribute("perm", [0, 2, 3, 1]))
    found = find_rnns(model)
    assert [r.name for r in found] == ["LSTM_0", "LSTM_1"]
    x = torch.randn(4, 3, 3)
    got = run_ort(model, {"X": x.numpy()}, ("X_1",))
    with torch.no_grad():
        close(from_onnx(model, node="LSTM_1")(torch.from_numpy(got["X_1"]))[0], got["Y"])


# -- graphs made with onnx.helper: functions, Scan, layout=1 -------------------------------------


def weights(op: str, hidden: int, inputs: int, dirs: int = 1, seed: int = 0) -> list[Any]:
    """Random W, R, B initializers (named W, R, B) of an ONNX RNN node."""
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    rng = np.random.default_rng(seed)
    shapes = {
        "W": (dirs, gates * hidden, inputs),
        "R": (dirs, gates * hidden, hidden),
        "B": (dirs, 2 * gates * hidden),
    }
    return [
        numpy_helper.from_array(rng.uniform(-0.5, 0.5, s).astype(np.float32), n)
        for n, s in shapes.items()
    ]


def value(name: str, rank: int = 4, dtype: int = FLOAT) -> Any:
    """A graph input or output of ``rank`` symbolic dimensions."""
    return helper.make_tensor_value_info(name, dtype, [f"{name}_{k}" for k in range(rank)])


def model_of(
    nodes: list[Any], inputs: list[Any], outputs: list[Any], inits: list[Any], **kwargs: Any
) -> Any:
    """A checked model of one graph; ``outputs`` are names (rank 4) or value infos."""
    outputs = [value(o) if isinstance(o, str) else o for o in outputs]
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    kwargs.setdefault("opset_imports", [helper.make_opsetid("", 17)])
    model = helper.make_model(graph, **kwargs)
    onnx.checker.check_model(model)
    return model


X_INPUT = helper.make_tensor_value_info("X", FLOAT, ["T", "B", 3])
LOCAL = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]


def function_model() -> Any:
    """A model-local function holding a GRU whose W and R are its inputs, whose B is a Constant
    node with the value of the call's ``bias`` attribute, and whose hidden_size is the call's
    ``hidden``; called twice with different weights."""
    ref = helper.make_attribute_ref
    bias = helper.make_node("Constant", [], ["b"], "bias_const")
    bias.attribute.append(ref("value", onnx.AttributeProto.TENSOR, ref_attr_name="bias"))
    gru = helper.make_node("GRU", ["x", "w", "r", "b"], ["y"], "gru", linear_before_reset=1)
    gru.attribute.append(ref("hidden_size", onnx.AttributeProto.INT, ref_attr_name="hidden"))
    fn = helper.make_function(
        "local", "RnnBlock", ["x", "w", "r"], ["y"], [bias, gru], LOCAL[:1], ["bias", "hidden"]
    )
    inits, calls = [], []
    for k, name in enumerate(("block_a", "block_b")):
        w, r, b = weights("GRU", 2, 3, seed=k)
        w.name, r.name = f"W_{k}", f"R_{k}"
        inits += [w, r]
        call = helper.make_node(
            "RnnBlock", ["X", w.name, r.name], [f"Y_{k}"], name, domain="local", hidden=2
        )
        call.attribute.append(helper.make_attribute("bias", b))
        calls.append(call)
    return model_of(calls, [X_INPUT], ["Y_0", "Y_1"], inits, opset_imports=LOCAL, functions=[fn])


@torch.no_grad()
def test_rnns_inside_model_local_functions() -> None:
    model = function_model()
    found = find_rnns(model)
    where = "GRU node 'gru' in RnnBlock '{}' (function 'RnnBlock' of domain 'local')"
    assert [(r.name, r.where, r.num_units, r.computable) for r in found] == [
        ("block_a/gru", where.format("block_a"), 2, True),
        ("block_b/gru", where.format("block_b"), 2, True),
    ]
    x = torch.randn(5, 2, 3)
    got = run_ort(model, {"X": x.numpy()})
    for k, record in enumerate(found):
        layer = from_onnx(model, node=record.name)
        close(layer(x)[0], flat_y(got[f"Y_{k}"]))
    with pytest.raises(
        OnnxFormatError,
        match=r"node 'block_a' is 'RnnBlock' of domain 'local'.* it has 2: 'block_a/gru'",
    ):
        from_onnx(model)


def test_a_function_that_calls_itself_is_refused() -> None:
    again = helper.make_node("Again", ["x"], ["y"], "again", domain="local")
    fn = helper.make_function("local", "Again", ["x"], ["y"], [again], LOCAL[:1])
    call = helper.make_node("Again", ["X"], ["Y"], "call", domain="local")
    graph = helper.make_graph([call], "g", [X_INPUT], [value("Y", 3)])
    model = helper.make_model(graph, opset_imports=LOCAL, functions=[fn])
    with pytest.raises(OnnxFormatError, match=r"'Again' of domain 'local' calls itself|not valid"):
        find_rnns(model)


def doubling_calls(levels: int) -> Any:
    """Functions F1..Fn that each call the one before twice: 2**n RNN nodes from a small file."""
    w, r, _ = weights("RNN", 2, 3)
    rnn = helper.make_node("RNN", ["x", "w", "r"], ["y"], "rnn", hidden_size=2)
    fns = [helper.make_function("local", "F0", ["x", "w", "r"], ["y"], [rnn], LOCAL)]
    for k in range(1, levels + 1):
        nodes = [
            helper.make_node(f"F{k - 1}", ["x", "w", "r"], [out], name, domain="local")
            for out, name in (("h", "first"), ("y", "second"))
        ]
        fns.append(helper.make_function("local", f"F{k}", ["x", "w", "r"], ["y"], nodes, LOCAL))
    call = helper.make_node(f"F{levels}", ["X", "W", "R"], ["Y"], "top", domain="local")
    return model_of([call], [X_INPUT], ["Y"], [w, r], opset_imports=LOCAL, functions=fns)


def test_function_calls_are_walked_within_a_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk counts each call's nodes, and stops at a bound (monkeypatched small here)."""
    import cudnn_rnn.io.onnx.find as onnx_find

    model = doubling_calls(11)
    found = find_rnns(model)
    assert len(found) == 2**11 and found[0].name == "top/" + "first/" * 11 + "rnn"
    monkeypatch.setattr(onnx_find, "MAX_WALK", 1000)
    with pytest.raises(
        OnnxFormatError,
        match=r"find_rnns: the model's graphs, subgraphs and function calls hold more than 1000 "
        r"nodes in all \(a function's nodes count once per call\); refused",
    ):
        find_rnns(model)


@torch.no_grad()
def test_rnn_inside_a_scan_body() -> None:
    """A Scan over a leading axis whose body runs an LSTM with the outer graph's weights."""
    w, r, b = weights("LSTM", 2, 3, dirs=2)
    lstm = helper.make_node(
        "LSTM", ["x_n", "W", "R", "B"], ["y_n"], "lstm", hidden_size=2, direction="bidirectional"
    )
    body = helper.make_graph([lstm], "body", [value("x_n", 3)], [value("y_n")])
    scan = helper.make_node("Scan", ["XS"], ["YS"], "scan", body=body, num_scan_inputs=1)
    model = model_of([scan], [value("XS")], [value("YS", 5)], [w, r, b])
    (found,) = find_rnns(model)
    assert (found.name, found.where, found.direction) == (
        "scan/body/lstm",
        "LSTM node 'lstm' in Scan 'scan' > body",
        "bidirectional",
    )
    layer = from_onnx(model, node=found.name)
    xs = torch.randn(3, 5, 2, 3)
    (ys,) = run_ort(model, {"XS": xs.numpy()}).values()
    for n in range(3):
        close(layer(xs[n])[0], flat_y(ys[n]))


@torch.no_grad()
def test_batch_major_layout() -> None:
    """layout=1 (X [B, T, I], Y [B, T, D, H]): computable; the layer is called batch-major.
    onnxruntime's CPU kernels refuse layout=1, so onnx's reference evaluator runs the model."""
    from onnx.reference import ReferenceEvaluator

    w, r, b = weights("GRU", 2, 3, dirs=2)
    attrs = {"hidden_size": 2, "direction": "bidirectional", "linear_before_reset": 1}
    gru = helper.make_node("GRU", ["X", "W", "R", "B"], ["Y"], "gru", layout=1, **attrs)
    model = model_of([gru], [X_INPUT], ["Y"], [w, r, b])
    (found,) = find_rnns(model)
    assert found.computable and found.details["layout"] == 1
    layer = from_onnx(model, node="gru")
    x = torch.randn(2, 5, 3)
    (y,) = ReferenceEvaluator(model).run(None, {"X": x.numpy()})
    batch, steps, dirs, hidden = y.shape
    close(layer(x, time_major=False)[0], y.reshape(batch, steps, dirs * hidden))


# -- what cuDNN's math does not compute: every reason, and the variants now read (issue 47) -------

#: name -> (op, inputs after X (W, R, B, sequence_lens, initial_h, initial_c, P), attributes)
SIDE_BY_SIDE: dict[str, tuple[str, list[str], dict[str, Any]]] = {
    "ok": ("LSTM", ["lw", "lr", "lb"], {}),
    "hard": (
        "LSTM",
        ["lw", "lr", "lb"],
        {"clip": 3.0, "input_forget": 1, "activations": ["HardSigmoid", "Tanh", "Tanh"]},
    ),
    "gru0": ("GRU", ["gw", "gr", "gb"], {}),
    "reverse": ("RNN", ["rw", "rr", "rb"], {"direction": "reverse"}),
    "sigmoid": ("RNN", ["rw", "rr", "rb"], {"activations": ["Sigmoid"]}),
    "peepholes": ("LSTM", ["lw", "lr", "lb", "", "", "", "P"], {}),
    "foreign": (
        "LSTM",
        ["lw", "lr", "lb"],
        {"clip": -3.0, "activations": ["HardSigmoid", "Swish", "Tanh"]},
    ),
    "runtime_w": ("LSTM", ["W_in", "lr", "lb"], {}),
    "learned_h": ("LSTM", ["lw", "lr", "lb", "", "h_half"], {}),
    "fixed_lens": ("LSTM", ["lw", "lr", "lb", "lens_const"], {}),
    "short_b": ("LSTM", ["lw", "lr", "B_short"], {}),
    "fed": ("LSTM", ["lw", "lr", "lb", "lens", "h_in", "h_zero"], {}),
    "huge_w": ("LSTM", ["W_huge", "lr", "lb"], {}),
}

EXPECTED_REASONS = {
    "ok": (),
    # Refused as other math before issue 47; variants now (EXPECTED_VARIANTS).
    "hard": (),
    "gru0": (),
    "reverse": (),
    "sigmoid": (),
    "peepholes": (),
    "foreign": (
        "has activations=['HardSigmoid', 'Swish', 'Tanh']; 'Swish' is not one of ONNX's RNN "
        "activations (Sigmoid, Tanh, Relu, HardSigmoid, Affine, LeakyRelu, ThresholdedRelu, "
        "ScaledTanh, Elu, Softsign, Softplus)",
        "has clip=-3.0; a clip is a finite float > 0",
    ),
    "runtime_w": (
        "its W input 'W_in' is computed from the graph's run-time inputs, not from constants; "
        "only constant weights can be read",
    ),
    "learned_h": (
        "its initial_h comes from the initializer 'h_half', a non-zero constant (a learned "
        "initial state), which our layer does not hold (it takes initial_state when called)",
    ),
    "fixed_lens": (
        "its sequence_lens comes from the initializer 'lens_const', a constant: lengths the "
        "model holds, which our layer does not (it takes sequence_lengths when called)",
    ),
    "short_b": ("has misshapen weights: B (1, 6) (expected (1, 16))",),
    "fed": (),  # states and lengths from graph inputs, a zero initial_c: the caller's to pass
}


#: The nodes once refused as other math: their mode and variant, in words (Variant.describe).
EXPECTED_VARIANTS = {
    "hard": (
        "lstm",
        "gates hard_sigmoid(0.2, 0.5), gates clipped to 3, forget gate 1 - input gate",
    ),
    "gru0": ("gru", "reset before the product"),
    "reverse": ("rnn_tanh", "reverse time"),
    "sigmoid": ("rnn_tanh", "candidate sigmoid"),
    "peepholes": ("lstm", "peepholes"),
}


def reasons_model() -> Any:
    """RNN nodes side by side on X, each with what cuDNN does not compute (or a near miss)."""
    tensors = []
    for op, prefix in (("LSTM", "l"), ("GRU", "g"), ("RNN", "r")):
        for t in weights(op, 2, 3):
            t.name = prefix + t.name.lower()
            tensors.append(t)
    arrays = {
        "P": np.full((1, 6), 0.5, np.float32),
        "h_half": np.full((1, 2, 2), 0.5, np.float32),
        "h_zero": np.zeros((1, 2, 2), np.float32),
        "lens_const": np.array([5, 3], np.int32),
        "B_short": np.zeros((1, 6), np.float32),
        "huge": np.array([1, 8, 2**28], np.int64),
    }
    tensors += [numpy_helper.from_array(a, n) for n, a in arrays.items()]
    nodes = [helper.make_node("ConstantOfShape", ["huge"], ["W_huge"], "bomb")]
    for name, (op, inputs, attrs) in SIDE_BY_SIDE.items():
        nodes.append(
            helper.make_node(op, ["X", *inputs], [f"y_{name}"], name, hidden_size=2, **attrs)
        )
    runtime = [
        value("W_in", 3),
        helper.make_tensor_value_info("lens", onnx.TensorProto.INT32, ["B"]),
        value("h_in", 3),
    ]
    return model_of(nodes, [X_INPUT, *runtime], [f"y_{n}" for n in SIDE_BY_SIDE], tensors)


def test_every_reason_is_listed() -> None:
    found = by_name(find_rnns(reasons_model()))
    assert list(found) == list(SIDE_BY_SIDE)
    for name, reasons in EXPECTED_REASONS.items():
        assert found[name].reasons == reasons, name
        assert found[name].computable == (not reasons)
    for name, (mode, words) in EXPECTED_VARIANTS.items():
        assert found[name].mode == mode and found[name].direction == "unidirectional", name
        assert found[name].notes == (f"it computes {mode} with a variant: {words}",), name
        assert "; note: it computes" in found[name].describe()
    assert found["foreign"].mode == "lstm" and not found["foreign"].notes
    (bomb,) = found["huge_w"].reasons
    assert bomb.startswith("its W input 'W_huge' cannot be evaluated: ConstantOfShape node 'bomb'")
    assert "would make 2147483648 elements" in bomb and "refused before allocating" in bomb
    assert found["ok"].describe() == (
        "'ok': lstm unidirectional (num_layers=1, num_units=2, input_size=3) at LSTM node 'ok' of "
        "the main graph"
    )


def test_a_node_cudnn_does_not_compute_is_refused_with_every_reason() -> None:
    with pytest.raises(
        OnnxFormatError,
        match=r"from_onnx: 'foreign' \(LSTM node 'foreign' of the main graph\) is not computed "
        r"by cuDNN's math or a variant of it \(cudnn_rnn.core.variant\), so our layers cannot "
        r"hold it: LSTM node 'foreign' has activations=\['HardSigmoid', 'Swish', 'Tanh'\]; "
        r"'Swish' is not one of ONNX's RNN activations \(.*\); LSTM node 'foreign' has "
        r"clip=-3.0; a clip is a finite float > 0\.$",
    ):
        from_onnx(reasons_model(), node="foreign")
    with pytest.raises(OnnxFormatError, match=r"LSTM node 'huge_w': its W input 'W_huge' cannot"):
        from_onnx(reasons_model(), node="huge_w")
    layer = from_onnx(reasons_model(), node="fed")  # run-time states and lengths: computable
    assert layer.num_units == 2


def test_a_node_of_a_variant_is_read_by_name() -> None:
    """Once refused as other math, "hard" reads as an LSTM variant (issue 47)."""
    data = read(reasons_model(), "hard")
    assert (data.spec.mode, data.spec.variant) == (
        "lstm",
        Variant(gate_activation=Activation("hard_sigmoid"), gate_clip=3.0, input_forget=True),
    )
    # End to end: a layer of the variant (this needs the engines that compute variants,
    # issue 47 item 2, in progress alongside this reader; with cuDNN's math only, the layer's
    # variant would be lost).
    assert from_onnx(reasons_model(), node="hard").spec == data.spec


# -- names ---------------------------------------------------------------------------------------


def names_model() -> Any:
    """LSTM nodes side by side on X whose names cannot all be steps of a path: repeated, empty,
    with ``+`` or a leading ``#``, and one whose name reads as the path of a node in an If."""
    w, r, b = weights("LSTM", 2, 3)

    def lstm(name: str, out: str) -> Any:
        return helper.make_node("LSTM", ["X", "W", "R", "B"], [out], name, hidden_size=2)

    def branch(out: str) -> Any:
        return helper.make_graph([lstm("inner", out)], out, [], [value(out)])

    flag = helper.make_tensor_value_info("flag", onnx.TensorProto.BOOL, [])
    branches = {"then_branch": branch("then_y"), "else_branch": branch("else_y")}
    nodes = [
        lstm("dup", "y0"),
        lstm("dup", "y1"),
        lstm("", "y2"),
        lstm("a+b", "y3"),
        lstm("#x", "y4"),
        helper.make_node("If", ["flag"], ["y5"], "cond", **branches),
        lstm("cond/then_branch/inner", "y6"),
        lstm("/lstm/LSTM", "y7"),
    ]
    return model_of(nodes, [X_INPUT, flag], [f"y{k}" for k in range(8)], [w, r, b])


def test_names_are_unique_paths() -> None:
    found = find_rnns(names_model())
    assert [(r.name, r.where) for r in found] == [
        ("#0", "LSTM node #0 ('dup') of the main graph"),
        ("#1", "LSTM node #1 ('dup') of the main graph"),
        ("#2", "LSTM node #2 of the main graph"),
        ("#3", "LSTM node #3 ('a+b') of the main graph"),
        ("#4", "LSTM node #4 ('#x') of the main graph"),
        # helper.make_node writes attributes sorted: else_branch first (graphs in file order)
        ("cond/else_branch/inner", "LSTM node 'inner' in If 'cond' > else_branch"),
        ("#5/then_branch/#0", "LSTM node 'inner' in If 'cond' > then_branch"),
        ("#6", "LSTM node 'cond/then_branch/inner' of the main graph"),
        ("/lstm/LSTM", "LSTM node '/lstm/LSTM' of the main graph"),
    ]
    x = torch.randn(4, 2, 3)
    with torch.no_grad():
        ys = [from_onnx(names_model(), node=r.name)(x)[0] for r in found]
    assert all(torch.equal(y, ys[0]) for y in ys)  # the same weights everywhere


def test_unknown_names_and_types() -> None:
    with pytest.raises(
        OnnxFormatError,
        match=r"from_onnx: the model has no RNN named 'dup'\. To read one RNN of this model, pass "
        r"its name: .*it has 9: '#0' \(lstm unidirectional, 1 layer\(s\), num_units=2, "
        r"input_size=3: LSTM node #0 \('dup'\) of the main graph\), .* and 1 more\.",
    ):
        from_onnx(names_model(), node="dup")
    relu = helper.make_node("Relu", ["X"], ["Y"])
    no_rnn = model_of([relu], [X_INPUT], [value("Y", 3)], [])
    assert find_rnns(no_rnn) == []
    with pytest.raises(
        OnnxFormatError,
        match=r"the model has no RNN named 'x'\. It has no LSTM, GRU or RNN node at any depth\.",
    ):
        from_onnx(no_rnn, node="x")
    with pytest.raises(TypeError, match=r"from_onnx: node must be a str, a name find_rnns lists"):
        from_onnx(no_rnn, node=0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"find_rnns: expected a path or an onnx.ModelProto"):
        find_rnns(3)


def test_find_rnns_refuses_what_the_loader_refuses(tmp_path: Path) -> None:
    (tmp_path / "bad.onnx").write_bytes(b"\x08\x07garbage")
    with pytest.raises(OnnxFormatError, match=r"find_rnns: '.*bad.onnx' is not an ONNX model"):
        find_rnns(tmp_path / "bad.onnx")
    with pytest.raises(FileNotFoundError):
        find_rnns(tmp_path / "missing.onnx")
