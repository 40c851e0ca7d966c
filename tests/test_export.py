"""Exporting models that hold our layers (cudnn_rnn.export): torch.onnx.export with both exporters
(onnxruntime runs the file: the peer), torch.export.export and torch.jit.trace/save/load.

One export is slow (the dynamo exporter: about 1.5 s, most of it fixed), so each grid model
calls its layer four ways (:class:`Calls`), which covers every pair of sequence lengths given or
not, time- or batch-major input and initial state given or omitted in one file.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from cudnn_rnn import CudnnLSTM
from cudnn_rnn.export import ONNX_OPS
from tests.converters.test_torch_nn import DIRECTIONS, MODES, inputs_for, random_layer

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")  # torch.onnx.export's default (dynamo) exporter needs it

pytestmark = [
    # The TorchScript exporter is deprecated (torch says so on every call, twice).
    pytest.mark.filterwarnings(
        "ignore:You are using the legacy TorchScript-based ONNX export:DeprecationWarning"
    ),
    pytest.mark.filterwarnings(
        "ignore:The feature will be removed. Please remove usage of this function"
        ":DeprecationWarning"
    ),
    # TorchScript's tracer on the layers' argument checks (shapes, lengths in [1, T]): what
    # they read is checked, not computed with, so the trace holds no constant it should not.
    pytest.mark.filterwarnings("ignore:Converting a tensor to a Python:torch.jit.TracerWarning"),
    # torch.export's own deprecation in the dynamo exporter (torch 2.13).
    pytest.mark.filterwarnings(
        r"ignore:`isinstance\(treespec, LeafSpec\)` is deprecated:FutureWarning"
    ),
]

EXPORTERS = {True: "dynamo", False: "torchscript"}
STEPS, BATCH = 5, 3
LENGTHS = (STEPS, 1, 3)


class Calls(nn.Module):
    """One layer called four ways (every pair of: lengths, batch-major input, initial state)."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(
        self, x: torch.Tensor, x_bm: torch.Tensor, lengths: torch.Tensor, *state: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        outs: list[torch.Tensor] = []
        for inputs, kwargs in (
            (x, {}),
            (x, {"initial_state": state, "sequence_lengths": lengths}),
            (x_bm, {"time_major": False, "sequence_lengths": lengths}),
            (x_bm, {"initial_state": state, "time_major": False}),
        ):
            y, states = self.layer(inputs, **kwargs)
            outs += [y, *states]
        return tuple(outs)


def calls_inputs(layer: Any) -> tuple[torch.Tensor, ...]:
    x, states = inputs_for(layer, STEPS, BATCH)
    return (x, x.transpose(0, 1).contiguous(), torch.tensor(LENGTHS), *states)


def export_onnx(
    model: nn.Module, inputs: tuple[Any, ...], path: Path, dynamo: bool, **kw: Any
) -> Any:
    names = [f"in{i}" for i in range(len(inputs))]
    torch.onnx.export(
        model, inputs, str(path), dynamo=dynamo, input_names=names, verbose=False, **kw
    )
    return onnx.load(str(path))


def run_ort(path: Path, inputs: tuple[Any, ...]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feeds = {i.name: np.asarray(v) for i, v in zip(session.get_inputs(), inputs)}
    assert len(feeds) == len(inputs), "the exported model lost an input"
    return list(session.run(None, feeds))


def assert_ort_matches(got: list[np.ndarray], ours: tuple[torch.Tensor, ...]) -> None:
    assert len(got) == len(ours)
    for k, (a, b) in enumerate(zip(got, ours)):
        assert a.shape == tuple(b.shape), f"output {k}"
        np.testing.assert_allclose(a, b.detach().numpy(), rtol=0, atol=1e-5, err_msg=f"output {k}")


def rnn_nodes(model: Any) -> list[Any]:
    ops = {op.op_type for op in ONNX_OPS.values()}
    return [n for n in model.graph.node if n.op_type in ops]


def attributes(node: Any) -> dict[str, Any]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


#: (dynamo, mode, layers, direction, input_mode): the TorchScript exporter over the whole grid;
#: the dynamo one (about 2 s an export) once per mode, with 1 and 2 layers, uni- and
#: bidirectional, and skip_input (the identity W, made in the graph) among them.
LINEAR, SKIP = "linear_input", "skip_input"
GRID = [
    *((False, m, n, d, LINEAR) for m in MODES for n in (1, 2) for d in DIRECTIONS),
    (True, "lstm", 2, "bidirectional", LINEAR),
    (True, "gru", 1, "bidirectional", LINEAR),
    (True, "rnn_tanh", 1, "unidirectional", LINEAR),
    (True, "rnn_relu", 2, "unidirectional", SKIP),
    *((False, m, 2, "bidirectional", SKIP) for m in MODES),
]


class Joined(nn.Module):
    """Models side by side, each on its own slice of the inputs: one export for several."""

    def __init__(self, models: list[nn.Module], arity: list[int]) -> None:
        super().__init__()
        self.models = nn.ModuleList(models)
        self.arity = arity

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outs: list[torch.Tensor] = []
        for model, n in zip(self.models, self.arity):
            outs += model(*inputs[:n])
            inputs = inputs[n:]
        return tuple(outs)


Row = tuple[bool, str, int, str, str]
#: per grid row: the exported file, the row's RNN nodes, onnxruntime's outputs and ours
Exported = tuple[Any, list[Any], list[np.ndarray], tuple[torch.Tensor, ...]]


def export_rows(rows: list[Row], path: Path, dynamo: bool) -> dict[Row, Exported]:
    """The grid rows' models (:class:`Calls`) exported in one file (:class:`Joined` where
    there are several), split back into each row's nodes and outputs (in the call order)."""
    models = []
    for _, mode, layers, direction, input_mode in rows:
        size = 4 if input_mode == SKIP else 3
        layer = random_layer(
            mode, layers, direction, dtype=torch.float32, units=4, input_size=size,
            input_mode=input_mode,
        )  # fmt: skip
        models.append(Calls(layer).eval())
    inputs = [calls_inputs(m.layer) for m in models]
    flat = tuple(t for each in inputs for t in each)
    model = models[0] if len(models) == 1 else Joined(models, [len(i) for i in inputs]).eval()
    exported = export_onnx(model, flat, path, dynamo)
    nodes, got = rnn_nodes(exported), run_ort(path, flat)
    split = {}
    for row, m, each in zip(rows, models, inputs):
        want, count = m(*each), 4 * row[2]  # one node per layer and call
        split[row] = (exported, nodes[:count], got[: len(want)], want)
        nodes, got = nodes[count:], got[len(want) :]
    assert not nodes and not got, (len(nodes), len(got))
    return split


@pytest.fixture(scope="module")
def dynamo_rows(tmp_path_factory: pytest.TempPathFactory) -> dict[Row, Exported]:
    """The grid's dynamo rows in one export (about 4 s each, most of it fixed)."""
    rows = [row for row in GRID if row[0]]
    return export_rows(rows, tmp_path_factory.mktemp("dynamo") / "m.onnx", dynamo=True)


@pytest.mark.parametrize(
    "dynamo,mode,layers,direction,input_mode",
    GRID,
    ids=[f"{EXPORTERS[g[0]]}-{'-'.join(map(str, g[1:]))}" for g in GRID],
)
def test_onnx_export_writes_standard_nodes_that_onnxruntime_runs_as_we_do(
    dynamo: bool,
    mode: str,
    layers: int,
    direction: str,
    input_mode: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    row = (dynamo, mode, layers, direction, input_mode)
    if dynamo:
        exported, nodes, got, want = request.getfixturevalue("dynamo_rows")[row]
    else:
        exported, nodes, got, want = export_rows([row], tmp_path / "m.onnx", dynamo)[row]
    # One standard node per layer and call, both directions in it; nothing of ours in the file.
    assert len(nodes) == 4 * layers
    assert {n.domain for n in exported.graph.node} <= {""}
    op = ONNX_OPS[mode]
    dirs = 2 if direction == "bidirectional" else 1
    for node in nodes:
        got_attributes = attributes(node)
        assert node.op_type == op.op_type
        assert got_attributes["hidden_size"] == 4
        assert got_attributes["direction"] == (b"bidirectional" if dirs == 2 else b"forward")
        assert got_attributes["activations"] == [a.encode() for a in op.activations] * dirs
        assert got_attributes.get("linear_before_reset", 0) == (1 if mode == "gru" else 0)
    assert_ort_matches(got, want)


class Tagger(nn.Module):
    """Our LSTM among torch modules: token ids -> embedding -> batch-major bi-LSTM -> Linear."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(11, 4)
        self.rnn = CudnnLSTM(2, 5, direction="bidirectional", input_size=4, seed=1)
        with torch.no_grad():
            self.rnn.opaque_kernel.uniform_(-0.5, 0.5)  # biases too (they start at zero)
        self.out = nn.Linear(10, 3)

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        y, _ = self.rnn(self.embed(tokens), sequence_lengths=lengths, time_major=False)
        return self.out(y)


def tagger_inputs(batch: int, steps: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 11, (batch, steps), generator=gen)
    lengths = torch.randint(1, steps + 1, (batch,), generator=gen)
    lengths[0] = steps
    return tokens, lengths


@pytest.mark.filterwarnings(  # the dynamo exporter on one Dim used by two inputs
    "ignore:# The axis name. batch will not be used, since it shares:UserWarning"
)
@pytest.mark.parametrize("dynamo", (True, False), ids=EXPORTERS.get)
def test_a_model_around_the_rnn_exports_with_dynamic_batch_and_time(
    dynamo: bool, tmp_path: Path
) -> None:
    model = Tagger().eval()
    inputs = tagger_inputs(3, 4, seed=0)
    if dynamo:
        batch, steps = torch.export.Dim("batch", min=2), torch.export.Dim("steps", min=2)
        dynamic: dict[str, Any] = {
            "dynamic_shapes": {"tokens": {0: batch, 1: steps}, "lengths": {0: batch}}
        }
    else:
        dynamic = {"dynamic_axes": {"in0": {0: "batch", 1: "steps"}, "in1": {0: "batch"}}}
    exported = export_onnx(model, inputs, tmp_path / "t.onnx", dynamo, **dynamic)
    assert [n.op_type for n in rnn_nodes(exported)] == ["LSTM", "LSTM"]
    for other in (inputs, tagger_inputs(6, 9, seed=1)):  # the export's shapes, then others
        assert_ort_matches(run_ort(tmp_path / "t.onnx", other), (model(*other),))


@pytest.mark.parametrize("dynamo", (True, False), ids=EXPORTERS.get)
def test_lstm_projection_is_refused_naming_what_works(dynamo: bool, tmp_path: Path) -> None:
    layer = random_layer("lstm", 1, "unidirectional", dtype=torch.float32, num_proj=2)
    model = Calls(layer).eval()
    # The dynamo exporter reports what stopped its first capture inside its own error.
    error = torch.onnx.OnnxExporterError if dynamo else ValueError
    with pytest.raises(
        error,
        match=r"torch.onnx.export: a cudnn_rnn LSTM with num_proj=2 \(projection\) cannot be "
        r"exported to ONNX: ONNX's LSTM operator has no projection .* use torch.export.export "
        r"\(it keeps the cudnn_rnn::rnn operator\) or torch.jit.trace",
    ):
        export_onnx(model, calls_inputs(layer), tmp_path / "p.onnx", dynamo)


@pytest.mark.filterwarnings("ignore:Exporting a model while it is in training mode:UserWarning")
def test_the_exported_graph_is_inference_dropout_left_out(tmp_path: Path) -> None:
    """The dynamo exporter keeps the model in training mode: the file still computes the
    inference (as the TorchScript exporter's default, eval mode), and nothing is drawn."""
    model = random_layer("gru", 3, "unidirectional", dtype=torch.float32, dropout=0.5, seed=3)
    x, _ = inputs_for(model, STEPS, BATCH)
    step = model._dropout_step.clone()
    export_onnx(model.train(), (x,), tmp_path / "d.onnx", dynamo=True)
    assert torch.equal(model._dropout_step, step)
    y, (h,) = model.eval()(x)
    assert_ort_matches(run_ort(tmp_path / "d.onnx", (x,)), (y, h))


@pytest.mark.parametrize("strict", (False, True), ids=("non-strict", "strict"))
def test_torch_export_keeps_the_operator(strict: bool) -> None:
    layer = random_layer("gru", 2, "bidirectional", dtype=torch.float32)
    model = Calls(layer).eval()
    inputs = calls_inputs(layer)
    program = torch.export.export(model, inputs, strict=strict)
    targets = [  # strict mode nests some calls in a grad-mode region's submodule
        str(n.target)
        for module in program.graph_module.modules()
        if isinstance(module, torch.fx.GraphModule)
        for n in module.graph.nodes
        if n.op == "call_function"
    ]
    assert targets.count("cudnn_rnn.rnn.default") == 4
    for got, want in zip(program.module()(*inputs), model(*inputs)):
        assert torch.equal(got, want)


#: torch 2.13 deprecates TorchScript: its tracer says so on every call.
JIT_DEPRECATED = pytest.mark.filterwarnings(
    r"ignore:`torch\.jit\.\w+` is deprecated:DeprecationWarning"
)


def traced_lstm() -> tuple[Calls, tuple[torch.Tensor, ...], torch.jit.ScriptModule]:
    layer = random_layer("lstm", 2, "bidirectional", dtype=torch.float32)
    model = Calls(layer)
    inputs = calls_inputs(layer)
    traced = torch.jit.trace(model, inputs)  # checks its trace again, under no_grad
    return model, inputs, traced


@JIT_DEPRECATED
def test_jit_trace_records_the_operator_and_the_saved_module_trains(tmp_path: Path) -> None:
    model, inputs, traced = traced_lstm()
    kinds = [n.kind() for n in traced.inlined_graph.nodes()]
    assert kinds.count("cudnn_rnn::rnn") == 4 and "prim::PythonOp" not in kinds
    torch.jit.save(traced, str(tmp_path / "t.pt"))
    loaded = torch.jit.load(str(tmp_path / "t.pt"))
    outs, want = loaded(*inputs), model(*inputs)
    for got, expected in zip(outs, want):
        assert torch.equal(got, expected)
    # Differentiable as the layer is: the operator's registered autograd.
    sum(o.sum() for o in outs).backward()
    sum(o.sum() for o in want).backward()
    (param,) = loaded.parameters()
    torch.testing.assert_close(param.grad, model.layer.opaque_kernel.grad, rtol=0, atol=1e-6)


@JIT_DEPRECATED
def test_a_saved_trace_loads_in_a_process_that_imported_the_operator(tmp_path: Path) -> None:
    model, inputs, traced = traced_lstm()
    torch.jit.save(traced, str(tmp_path / "t.pt"))
    with torch.no_grad():
        torch.save({"inputs": inputs, "outputs": model(*inputs)}, tmp_path / "io.pt")
    script = textwrap.dedent(
        """
        import sys
        import torch
        folder = sys.argv[1]
        try:
            torch.jit.load(folder + "/t.pt")
        except RuntimeError as err:
            print("refused:", str(err).strip().splitlines()[0])
        import cudnn_rnn.operator  # registers cudnn_rnn::rnn
        data = torch.load(folder + "/io.pt")
        with torch.no_grad():
            outs = torch.jit.load(folder + "/t.pt")(*data["inputs"])
        print("equal:", all(torch.equal(a, b) for a, b in zip(outs, data["outputs"])))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "refused: Unknown builtin op: cudnn_rnn::rnn.",
        "equal: True",
    ]


class TorchNNModel(nn.Module):
    """A torch.nn model with every kind of RNN in it: a batch-major 2-layer bidirectional
    LSTM, a GRU and an RNN on its output, and an LSTMCell and a GRUCell on one step."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(20, 6)
        self.lstm = nn.LSTM(6, 5, num_layers=2, bidirectional=True, batch_first=True)
        self.gru = nn.GRU(10, 4, batch_first=True)
        self.rnn = nn.RNN(4, 3, nonlinearity="relu", batch_first=True)
        self.lstm_cell = nn.LSTMCell(3, 4)
        self.gru_cell = nn.GRUCell(3, 4)
        self.out = nn.Linear(4, 2)

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y, (h, _) = self.lstm(self.embed(tokens))
        y = self.rnn(self.gru(y)[0])[0]
        h1, _ = self.lstm_cell(y[:, -1])
        h2 = self.gru_cell(y[:, 0], h1)
        return self.out(h1 + h2), h


def replaced_pair() -> tuple[nn.Module, nn.Module, torch.Tensor]:
    """torch.nn's model and the same weights after ``replace_rnns``, in eval mode."""
    from cudnn_rnn.nn import replace_rnns

    torch.manual_seed(4)
    theirs = TorchNNModel().eval()
    ours = replace_rnns(TorchNNModel()).eval()
    ours.load_state_dict(theirs.state_dict())
    tokens = torch.randint(0, 20, (3, 6), generator=torch.Generator().manual_seed(5))
    return ours, theirs, tokens


@pytest.mark.parametrize("dynamo", (True, False), ids=EXPORTERS.get)
def test_a_replaced_torch_nn_model_exports_to_onnx_as_torch_nn_computes(
    dynamo: bool, tmp_path: Path
) -> None:
    ours, theirs, tokens = replaced_pair()
    exported = export_onnx(ours, (tokens,), tmp_path / "r.onnx", dynamo)
    # One node per layer (the LSTM has two) and cell (a one-step node); nothing of ours.
    assert sorted(n.op_type for n in rnn_nodes(exported)) == ["GRU", "GRU", *["LSTM"] * 3, "RNN"]
    assert {n.domain for n in exported.graph.node} <= {""}
    assert_ort_matches(run_ort(tmp_path / "r.onnx", (tokens,)), theirs(tokens))


def test_the_torchscript_exporter_warns_of_nothing_of_ours(tmp_path: Path) -> None:
    """``torch.onnx.export(dynamo=False)`` traces the drop-ins without a TracerWarning from our
    files (issue 49: three were printed): what they read of a traced tensor's sizes comes from
    the layout, and the trace holds no constant it should not, as the exported model shows at
    another batch size and length."""
    import warnings

    import cudnn_rnn

    ours, theirs, tokens = replaced_pair()
    package = str(Path(cudnn_rnn.__file__).parent)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        export_onnx(
            ours,
            (tokens,),
            tmp_path / "w.onnx",
            dynamo=False,
            dynamic_axes={"in0": {0: "batch", 1: "steps"}},
        )
    tracer = [w for w in caught if w.category.__name__ == "TracerWarning"]
    mine = [f"{w.filename}:{w.lineno}: {w.message}" for w in tracer if package in w.filename]
    assert not mine, "\n".join(mine)
    other = torch.randint(0, 20, (5, 9), generator=torch.Generator().manual_seed(6))
    for given in (tokens, other):
        assert_ort_matches(run_ort(tmp_path / "w.onnx", (given,)), theirs(given))


@JIT_DEPRECATED
def test_a_replaced_torch_nn_model_traces_saves_exports_and_trains(tmp_path: Path) -> None:
    ours, theirs, tokens = replaced_pair()
    want = theirs(tokens)
    traced = torch.jit.trace(ours, (tokens,))  # checks its trace again, under no_grad
    kinds = [n.kind() for n in traced.inlined_graph.nodes()]
    assert kinds.count("cudnn_rnn::rnn") == 5 and "prim::PythonOp" not in kinds
    torch.jit.save(traced, str(tmp_path / "r.pt"))
    loaded = torch.jit.load(str(tmp_path / "r.pt"))
    got = loaded(tokens)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    # The trace reads the parameters (not a copy of them taken at trace time): it trains.
    sum(t.sum() for t in got).backward()
    sum(t.sum() for t in want).backward()
    grads = dict(theirs.named_parameters())
    for name, param in loaded.named_parameters():
        torch.testing.assert_close(param.grad, grads[name].grad, rtol=0, atol=1e-5, msg=name)
    program = torch.export.export(ours, (tokens,))
    for a, b in zip(program.module()(tokens), want):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_a_bare_layer_exports_with_the_torchscript_exporter(tmp_path: Path) -> None:
    """torch.onnx.export(layer, (x,), dynamo=False) passes forward's defaults (time_major,
    training) to the trace as 0-d tensors: they are read as the flags they are."""
    layer = random_layer("gru", 2, "bidirectional", dtype=torch.float32)
    x, _ = inputs_for(layer, STEPS, BATCH)
    export_onnx(layer.eval(), (x,), tmp_path / "bare.onnx", dynamo=False)
    y, (h,) = layer(x)
    assert_ort_matches(run_ort(tmp_path / "bare.onnx", (x,)), (y, h))


@pytest.mark.parametrize("dynamo", (True, False), ids=EXPORTERS.get)
def test_an_exported_model_reads_back_with_the_one_loader(dynamo: bool, tmp_path: Path) -> None:
    """What torch.onnx.export wrote of our layer reads back as the same RNN (the dynamo
    exporter reorders the gates with GatherND, which the reader evaluates)."""
    import cudnn_rnn

    torch.manual_seed(3)
    model = Tagger().eval()
    with torch.no_grad():
        model.rnn = CudnnLSTM(1, 32, direction="bidirectional", input_size=4, seed=2)
        model.rnn.opaque_kernel.uniform_(-0.5, 0.5)
        model.out = nn.Linear(64, 3)
    inputs = tagger_inputs(3, 6, seed=0)
    export_onnx(model, inputs, tmp_path / "t.onnx", dynamo)
    (found,) = cudnn_rnn.find_rnns(tmp_path / "t.onnx")
    assert found.computable, found.reasons
    back = cudnn_rnn.load(tmp_path / "t.onnx")
    x = torch.randn(6, 3, 4)
    with torch.no_grad():
        torch.testing.assert_close(back(x)[0], model.rnn(x)[0], rtol=0, atol=1e-6)
