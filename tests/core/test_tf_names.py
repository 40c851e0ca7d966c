"""The one module that builds and parses TF's canonical names (``cudnn_rnn.core.tf_names``).

The names are pinned here as literal strings copied from docs/checkpoint_format.md (normative),
never from the module, and against the names TensorFlow 1.15.5's own ``tf.contrib.cudnn_rnn``
gives (``tests/fixtures/tf115/names.json``, which ``make_tf115_fixtures.py`` read off TF 1.15's
layers and saveables). The checkpoints in ``tests/fixtures/tf1`` are no evidence of the names:
real TensorFlow wrote their bytes, but TF 2 has no ``tf.contrib.cudnn_rnn``, so
``make_tf1_fixtures.py`` chose the names, transcribing TF 1.x's source
(shared/reference/tf_cudnn_rnn.md); only the optimizer slots' names in them (``/Adam``,
``beta1_power`` ...) are TF's own. The saveables, the cell stacks and the command line must all
agree with the module, and no other module of the package may spell a name itself.
"""

from __future__ import annotations

import ast
import itertools
import json
from typing import Any

import pytest
import torch

from cudnn_rnn import checkpoint
from cudnn_rnn.cells import (
    BasicRNNCell,
    BidirectionalStack,
    CudnnCompatibleGRUCell,
    CudnnCompatibleLSTMCell,
    MultiRNNCell,
)
from cudnn_rnn.core import tf_names
from cudnn_rnn.core.layout import layout_of
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.core.tf_names import TFName, cell_scope, parse, variable_name
from cudnn_rnn.io.detect import detect_models
from cudnn_rnn.layers import CudnnGRU, CudnnLSTM, CudnnRNNRelu, CudnnRNNTanh
from cudnn_rnn.saveable import (
    CudnnGRUSaveable,
    CudnnLSTMSaveable,
    CudnnOpaqueParamsSaveable,
    CudnnRNNReluSaveable,
    CudnnRNNTanhSaveable,
)
from tests.support.paths import FIXTURES, ROOT

SRC = ROOT / "src" / "cudnn_rnn"
TF115 = json.loads((FIXTURES / "tf115" / "names.json").read_text(encoding="utf-8"))
FIXTURES = FIXTURES / "tf1"
MODES = ("lstm", "gru", "rnn_tanh", "rnn_relu")
LAYERS = {"lstm": CudnnLSTM, "gru": CudnnGRU, "rnn_tanh": CudnnRNNTanh, "rnn_relu": CudnnRNNRelu}
SAVEABLES: dict[str, type[CudnnOpaqueParamsSaveable]] = {
    "lstm": CudnnLSTMSaveable,
    "gru": CudnnGRUSaveable,
    "rnn_tanh": CudnnRNNTanhSaveable,
    "rnn_relu": CudnnRNNReluSaveable,
}
#: docs/checkpoint_format.md: the cell scope and the variables (kernels, then biases) per mode.
CELLS = {
    "lstm": "cudnn_compatible_lstm_cell",
    "gru": "cudnn_compatible_gru_cell",
    "rnn_tanh": "basic_rnn_cell",
    "rnn_relu": "basic_rnn_cell",
}
GRU_KERNELS = [
    "gates/kernel",
    "candidate/input_projection/kernel",
    "candidate/hidden_projection/kernel",
]
GRU_BIASES = ["gates/bias", "candidate/input_projection/bias", "candidate/hidden_projection/bias"]
#: The suffixes TF's optimizers give their slots (TF's own names in the tf1 fixtures).
SLOTS = ("/Adam", "/Adam_1", "/Momentum")


def test_the_tables_are_the_documented_names() -> None:
    assert dict(tf_names.CELL_NAMES) == CELLS
    assert dict(tf_names.CELL_MODES) == {
        "cudnn_compatible_lstm_cell": ("lstm",),
        "cudnn_compatible_gru_cell": ("gru",),
        "basic_rnn_cell": ("rnn_tanh", "rnn_relu"),
    }
    for mode in MODES:
        kernels = GRU_KERNELS if mode == "gru" else ["kernel"]
        biases = GRU_BIASES if mode == "gru" else ["bias"]
        assert list(tf_names.KERNEL_NAMES[mode]) == kernels
        assert list(tf_names.BIAS_NAMES[mode]) == biases
        assert all(tf_names.is_kernel(k) for k in kernels)
        assert not any(tf_names.is_kernel(b) for b in biases)
    assert tf_names.PROJECTION_KERNEL == "projection/kernel"
    assert tf_names.is_kernel(tf_names.PROJECTION_KERNEL)
    # A peephole variant's (our .safetensors only), as TF's LSTMCell names them.
    assert dict(tf_names.PEEPHOLE_NAMES) == {"i": "w_i_diag", "f": "w_f_diag", "o": "w_o_diag"}
    assert not any(tf_names.is_kernel(p) for p in tf_names.PEEPHOLE_NAMES.values())


@pytest.mark.parametrize("scope", [None, "", "s", "a/b"])
def test_built_names(scope: str | None) -> None:
    prefix = f"{scope}/" if scope else ""
    assert cell_scope(0, "basic_rnn_cell", scope=scope) == (
        f"{prefix}rnn/multi_rnn_cell/cell_0/basic_rnn_cell"
    )
    assert variable_name(12, "cudnn_compatible_gru_cell", "gates/bias", scope=scope) == (
        f"{prefix}rnn/multi_rnn_cell/cell_12/cudnn_compatible_gru_cell/gates/bias"
    )
    for d in ("fw", "bw"):
        assert variable_name(
            1, "cudnn_compatible_lstm_cell", "projection/kernel", direction=d, scope=scope
        ) == (
            f"{prefix}stack_bidirectional_rnn/cell_1/bidirectional_rnn/{d}/"
            "cudnn_compatible_lstm_cell/projection/kernel"
        )


@pytest.mark.parametrize(
    "layer, cell, direction, match",
    [
        (-1, "basic_rnn_cell", None, "layer must be an int >= 0, got -1"),
        (True, "basic_rnn_cell", None, "layer must be an int >= 0, got True"),
        (0, "lstm_cell", None, "cell must be one of cudnn_compatible_lstm_cell, .*'lstm_cell'"),
        (0, "basic_rnn_cell", "forward", "direction must be None, 'fw' or 'bw', got 'forward'"),
    ],
)
def test_building_refuses_what_is_no_name(
    layer: int, cell: str, direction: str | None, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        cell_scope(layer, cell, direction=direction)


def _saveable(
    mode: str, layers: int, direction: str, scope: str | None, proj: int | None
) -> CudnnOpaqueParamsSaveable:
    spec = RNNSpec(mode, layers, 3, 2, direction=direction, num_proj=proj)
    opaque = torch.empty(layout_of(spec).size, device="meta")
    return SAVEABLES[mode](opaque, layers, 3, 2, direction=direction, scope=scope, num_proj=proj)


GRID = [
    (mode, direction, scope, proj)
    for mode, direction, scope in itertools.product(
        MODES, ("unidirectional", "bidirectional"), (None, "m")
    )
    for proj in ((None, 2) if mode == "lstm" else (None,))
]


@pytest.mark.parametrize("mode, direction, scope, proj", GRID)
def test_saveable_names_are_the_documented_ones_and_parse_back(
    mode: str, direction: str, scope: str | None, proj: int | None
) -> None:
    saveable = _saveable(mode, 2, direction, scope, proj)
    prefix = f"{scope}/" if scope else ""
    dirs = ["fw", "bw"] if direction == "bidirectional" else [None]

    def stem(layer: int, d: str | None) -> str:
        if d is None:
            return f"{prefix}rnn/multi_rnn_cell/cell_{layer}/{CELLS[mode]}"
        return f"{prefix}stack_bidirectional_rnn/cell_{layer}/bidirectional_rnn/{d}/{CELLS[mode]}"

    kernels = GRU_KERNELS if mode == "gru" else ["kernel"] + (["projection/kernel"] * bool(proj))
    biases = GRU_BIASES if mode == "gru" else ["bias"]
    pseudo = [(layer, d) for layer in range(2) for d in dirs]
    want = [f"{stem(*p)}/{v}" for vs in (kernels, biases) for p in pseudo for v in vs]
    names = saveable._tf_canonical_names()
    assert names == want
    for name in names:
        parsed = parse(name)
        assert parsed is not None and str(parsed) == name
        assert (parsed.scope, parsed.cell) == (scope or None, CELLS[mode])
        assert parsed.bidirectional == (direction == "bidirectional")


def _cells(mode: str, n: int) -> list[Any]:
    if mode == "lstm":
        return [CudnnCompatibleLSTMCell(3) for _ in range(n)]
    if mode == "gru":
        return [CudnnCompatibleGRUCell(3) for _ in range(n)]
    return [BasicRNNCell(3, activation=mode.removeprefix("rnn_")) for _ in range(n)]


@pytest.mark.parametrize("mode, direction, scope, proj", [g for g in GRID if g[3] is None])
def test_cell_stacks_name_their_variables_as_the_saveables(
    mode: str, direction: str, scope: str | None, proj: None
) -> None:
    if direction == "bidirectional":
        stack: Any = BidirectionalStack(_cells(mode, 2), _cells(mode, 2), scope=scope)
    else:
        stack = MultiRNNCell(_cells(mode, 2), scope=scope)
    names = list(stack.checkpoint_shapes())
    assert names == _saveable(mode, 2, direction, scope, proj)._tf_canonical_names()


@pytest.mark.parametrize("how", ["built", "called"])
@pytest.mark.parametrize("config", sorted(TF115["configs"]))
def test_saveable_names_are_tf115s(config: str, how: str) -> None:
    """Our saveable's names, in order, are those of TF 1.15.5's own saveable, and our layer's
    opaque kernel is named as TF 1.15's layer names its variable.

    ``built``: TF's layer built by ``layer.build()`` inside ``variable_scope(scope)`` (as TF's own
    tests build it): the saveable takes that scope, as our ``scope=`` does. ``called``: built by
    its first call, which tf.layers runs inside the layer's own scope, so TF's saveable takes
    ``<scope>/<layer name>``: such a checkpoint restores with ``scope="<scope>/cudnn_lstm"``
    (test_checkpoint_tf1.py).
    """
    c = TF115["configs"][config]
    tf = TF115["names"][how][config]
    mode, scope = c["mode"], c["scope"]
    assert tf["saveable"].endswith("." + SAVEABLES[mode].__name__)
    assert tf["layer"].endswith("." + LAYERS[mode].__name__)
    size = (c["num_layers"], c["num_units"])
    layer = LAYERS[mode](*size, input_size=c["input_size"], direction=c["direction"], scope=scope)
    prefix = f"{scope}/" if scope else ""
    assert tf["variables"] == [f"{prefix}{layer.name}/opaque_kernel"]
    if how == "called":
        scope = f"{prefix}{layer.name}"
    spec = RNNSpec(mode, *size, c["input_size"], direction=c["direction"])
    opaque = torch.empty(layout_of(spec).size, device="meta")
    saveable = SAVEABLES[mode](
        opaque, *size, c["input_size"], direction=c["direction"], scope=scope
    )
    assert saveable._tf_canonical_names() == tf["specs"]
    if how == "built":
        assert layer.saveable._tf_canonical_names() == tf["specs"]


@pytest.mark.parametrize("prefix", [n for n in TF115["configs"] if n.startswith("cudnn_")])
def test_the_tf1_fixtures_hold_tf115s_names(prefix: str) -> None:
    """make_tf1_fixtures.py chose the names of the ``cudnn_*`` checkpoints: they are the names
    TF 1.15's layer built in the fixture's scope gives (its opaque kernel and its saveable's)."""
    tf = TF115["names"]["built"][prefix]
    names = set(checkpoint.read_claims(str(FIXTURES / f"{prefix}.ckpt")))
    canonical = {n for n in names if parse(n) is not None and not n.endswith(SLOTS)}
    assert canonical == set(tf["specs"])
    assert {n for n in names if n.endswith("opaque_kernel")} == set(tf["variables"])


@pytest.mark.parametrize(
    "prefix", sorted(p.name[: -len(".index")] for p in FIXTURES.glob("*.index"))
)
def test_names_in_the_tf1_fixtures_parse_back_to_themselves(prefix: str) -> None:
    """Every name in the tf1 fixtures parses back to itself (or is no canonical name).

    Of these names TensorFlow chose only the optimizers' (slots, ``beta1_power``,
    ``global_step``); make_tf1_fixtures.py chose the rest (see the module docstring), which
    test_the_tf1_fixtures_hold_tf115s_names checks against TF 1.15.
    """
    names = list(checkpoint.read_claims(str(FIXTURES / prefix)))
    for name in names:
        parsed = parse(name)
        assert parsed is None or str(parsed) == name
        if parsed is not None and not parsed.variable.endswith(SLOTS):
            modes = tf_names.CELL_MODES[parsed.cell]
            known = {*tf_names.KERNEL_NAMES[modes[0]], *tf_names.BIAS_NAMES[modes[0]]}
            assert parsed.variable in known | {tf_names.PROJECTION_KERNEL}, name
    canonical = [n for n in names if "_cell/" in n]
    assert all(parse(n) is not None for n in canonical)


def test_parse_takes_a_name_apart() -> None:
    name = "a/rnn/multi_rnn_cell/cell_0/x/stack_bidirectional_rnn/cell_7/bidirectional_rnn/bw/"
    name += "cudnn_compatible_gru_cell/gates/kernel"
    # The last stack is the stack; what comes before it is the scope.
    assert parse(name) == TFName(
        "a/rnn/multi_rnn_cell/cell_0/x", 7, "bw", "cudnn_compatible_gru_cell", "gates/kernel"
    )
    parsed = parse("rnn/multi_rnn_cell/cell_3/basic_rnn_cell/kernel/Adam")
    assert parsed == TFName(None, 3, None, "basic_rnn_cell", "kernel/Adam")
    assert parsed.stack == "rnn/multi_rnn_cell" and not parsed.bidirectional


@pytest.mark.parametrize(
    "name",
    [
        "global_step",
        "model/cudnn_lstm/opaque_kernel",
        "rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell",  # no variable
        "rnn/multi_rnn_cell/cell_0/lstm_cell/kernel",  # not a cell of ours
        "rnn/multi_rnn_cell/cell_01/basic_rnn_cell/kernel",  # TF writes cell_1
        "rnn/multi_rnn_cell/cell_/basic_rnn_cell/kernel",
        "rnn/multi_rnn_cell/cell_1234567890123456789/basic_rnn_cell/kernel",  # 19 digits
        "/rnn/multi_rnn_cell/cell_0/basic_rnn_cell/kernel",  # an empty scope
        "rnn/multi_rnn_cell/cell_0/basic_rnn_cell/kernel\n",
        "rnn/multi_rnn_cell/cell_0/bidirectional_rnn/fw/basic_rnn_cell/kernel",
        "stack_bidirectional_rnn/cell_0/basic_rnn_cell/kernel",  # no direction
        "stack_bidirectional_rnn/cell_0/bidirectional_rnn/up/basic_rnn_cell/kernel",
    ],
)
def test_parse_refuses_what_tf_does_not_write(name: str) -> None:
    assert parse(name) is None


def test_the_command_line_reads_names_with_the_module() -> None:
    """``detect_models`` sees a model in the names the saveables build, and only there."""
    for mode, direction, scope, proj in GRID:
        saveable = _saveable(mode, 3, direction, scope, proj)
        shapes = {k: tuple(int(d or 0) for d in v) for k, v in saveable.checkpoint_shapes().items()}
        (model,) = detect_models({**shapes, "global_step": ()})
        assert model["rnn_mode"] == ("rnn_tanh" if mode == "rnn_relu" else mode)
        assert (model["num_layers"], model["num_units"], model["input_size"]) == (3, 3, 2)
        assert (model["direction"], model["scope"], model["num_proj"]) == (direction, scope, proj)
        assert model.get("activation_known", True) == (mode in ("lstm", "gru"))


# -- no other module spells a name --------------------------------------------------------------

#: Pieces of canonical names that only core/tf_names.py may write in code. The metadata ``kind``
#: values ``multi_rnn_cell`` and ``stack_bidirectional_rnn`` (docs/checkpoint_format.md) are
#: words of our own format, not names, and are not matched.
MARKERS = (
    "multi_rnn_cell/",
    "bidirectional_rnn/",
    "/cell_",
    "cudnn_compatible_",
    "basic_rnn_cell",
    "projection/",
    "gates/",
)


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def test_no_module_but_tf_names_spells_a_name() -> None:
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        if path == SRC / "core" / "tf_names.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = _docstrings(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and any(m in node.value for m in MARKERS)
            ):
                bad.append(f"{path.relative_to(SRC.parent)}:{node.lineno}: {node.value!r}")
    assert not bad, "build or parse names with cudnn_rnn.core.tf_names:\n" + "\n".join(bad)
