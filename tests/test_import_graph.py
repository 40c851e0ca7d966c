"""The package's imports point one way: no cycle, and no module imports one above it.

The house (DESIGN.md, docs/internals/architecture.md), bottom to top: ``core`` (pure Python +
NumPy) and ``errors``; ``io`` (bytes <-> data: every reader and writer); the operator, its
``engines`` and the argument checks; the modules (``ops``, ``layers``, ``cells``, ``nn``, the
saveables); ``converters`` (data <-> modules) with their fronts ``convert`` and
``checkpoint``; ``cli``. An import may point to its own level or one below, never above
(:data:`LEVELS`). Inside ``io``, the safe-file layer (``io.files``, standard library only, on
``errors`` alone) is the bottom, and the TF1 format's layers import downward. Every module
under ``src/cudnn_rnn`` is parsed with ``ast`` (never imported, so nothing here depends on
torch or on import order), and every import of ``cudnn_rnn.*`` counts: module-level, inside
functions, under ``TYPE_CHECKING``. A lazy import is still a dependency; it only changes when
the dependency bites.

Edges go to the module that is named: ``from cudnn_rnn.x import y`` is an edge to
``cudnn_rnn.x.y`` when that is a module, else to ``cudnn_rnn.x``. The parent packages that Python
also runs on the way are not edges: ``cudnn_rnn/__init__.py`` re-exports the whole public surface
(lazily at run time, statically under ``TYPE_CHECKING``), so if every ``from cudnn_rnn.core...``
counted as an import of it, every module would sit on a cycle and the test would say nothing.
Edges *from* the ``__init__`` modules do count: a facade sits above what it re-exports, so a
re-exported module that imports the ``cudnn_rnn`` package itself (not one of its modules) imports
upward, and that shows here as a cycle through ``cudnn_rnn``.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = "cudnn_rnn"
SRC = Path(__file__).resolve().parents[1] / "src"


def _names(*names: str) -> tuple[str, ...]:
    return tuple(f"{PACKAGE}.{name}" for name in names)


#: The levels of the house, bottom first (a module or package and everything in it): a module
#: imports its own level or one below, never one above. ``cudnn_rnn._moved`` (the old import
#: paths, standard library only) stands at the bottom.
LEVELS: tuple[tuple[str, ...], ...] = (
    _names("core", "errors", "_moved"),
    _names("io"),
    _names(
        "validation",
        "initializers",
        "constant_result",
        "unbuilt",
        "operator",
        "export",
        "engines",
    ),
    _names("ops", "layer_base", "layers", "cells", "nn", "saveable", "checkpointable"),
    _names("converters", "convert", "checkpoint"),
    _names("cli"),
)
#: The folders beside the package (the benchmark suite, the GPU check, the demo) and the tests:
#: they import the package, never the other way round (nor are they in the wheel).
BESIDE = ("benchmarks", "tools", "examples", "tests")
CORE = f"{PACKAGE}.core"
IO = f"{PACKAGE}.io"
#: The saveables convert an opaque buffer through the layout table (core); they stand beside the
#: op level, not on it, and never build runtime op objects.
SAVEABLES = _names("saveable", "checkpointable")
RUNTIME = _names("operator", "engines", "ops", "layer_base", "layers", "cells")
#: What core may import besides the standard library and itself: it is pure Python + NumPy.
CORE_THIRD_PARTY = frozenset({"numpy"})
#: The cells package, one concern a module, lowest first: the cells, the drivers that run them,
#: the stacks that own cells and name them (``BidirectionalStack.forward`` is a driver). A module
#: imports only those before it, never the package's facade.
CELLS = f"{PACKAGE}.cells"
CELLS_ORDER = tuple(f"{CELLS}.{name}" for name in ("compatible", "drivers", "stacks"))
#: The one module that builds and parses TF's canonical names: pure, so in core, below every
#: module that names tensors (the cells, the saveables, the readers).
TF_NAMES = f"{CORE}.tf_names"
#: The package's error base (``errors``, standard library only) sits below everything, and the
#: file layer's bottom (``io.files``: safe opening, sniffing, the format error base) on it.
ERRORS = f"{PACKAGE}.errors"
FILES = f"{IO}.files"
#: The TF1 checkpoint format's layers, top to bottom, and what else of the package each may
#: import: a layer imports only the layers below it (bundle -> writer -> prefix -> protos ->
#: SSTable -> protobuf wire format).
TF1 = f"{IO}.tf1"
TF1_LAYERS: dict[str, frozenset[str]] = {
    f"{TF1}.bundle": frozenset({FILES, ERRORS}),
    f"{TF1}.writer": frozenset({f"{IO}.atomic", ERRORS}),
    f"{TF1}.prefix": frozenset({f"{IO}.atomic", ERRORS}),
    f"{TF1}.protos": frozenset({ERRORS}),
    f"{TF1}.table": frozenset({FILES, ERRORS}),
    f"{TF1}.protobuf_wire": frozenset({ERRORS}),
}


def level_of(module: str) -> int | None:
    """The level of ``module`` in :data:`LEVELS` (None: the package's facade)."""
    for level, prefixes in enumerate(LEVELS):
        if any(in_package(module, p) for p in prefixes):
            return level
    return None


@dataclass(frozen=True)
class Import:
    """One import statement's target, where it is written."""

    target: str  # a dotted module name as written (absolute, relative ones resolved)
    names: tuple[str, ...]  # the names of a ``from ... import``; () for ``import``
    line: int


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    where: str  # "path:line"


def in_package(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def discover(root: Path = SRC / PACKAGE) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of the package (packages by their
    ``__init__``)."""
    out: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imports_of(source: str, module: str, is_package: bool) -> list[Import]:
    """Every import statement of ``source`` (the code of ``module``), at any depth."""
    out: list[Import] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [Import(alias.name, (), node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:  # relative: from the module's package, one level up per extra dot
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, *([target] if target else [])])
            names = tuple(alias.name for alias in node.names)
            out.append(Import(target, names, node.lineno))
    return out


def resolve(imp: Import, modules: Iterable[str]) -> list[str]:
    """The package modules an import names: each ``from x import y`` that is a module, else
    ``x`` itself (or its nearest existing parent, for a module that is not there)."""
    known = set(modules)
    if not in_package(imp.target, PACKAGE):
        return []
    submodules = [f"{imp.target}.{n}" for n in imp.names if f"{imp.target}.{n}" in known]
    if submodules and len(submodules) == len(imp.names):
        return submodules
    target = imp.target
    while target not in known and "." in target:
        target = target.rsplit(".", 1)[0]
    return [*submodules, target]


def build_graph(modules: Mapping[str, Path]) -> list[Edge]:
    edges: list[Edge] = []
    for module, path in modules.items():
        for imp in imports_of(path.read_text(encoding="utf-8"), module, is_package(path)):
            where = f"{path.relative_to(SRC.parent)}:{imp.line}"
            edges += [
                Edge(module, target, where) for target in resolve(imp, modules) if target != module
            ]
    return edges


def find_cycles(edges: Iterable[Edge]) -> list[list[Edge]]:
    """One shortest cycle per strongly connected component that has one (Tarjan, then BFS)."""
    graph: dict[str, dict[str, Edge]] = {}
    for e in edges:
        graph.setdefault(e.source, {}).setdefault(e.target, e)
        graph.setdefault(e.target, {})
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def strongconnect(v: str) -> None:  # recursion depth is bounded by the package's size
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component: set[str] = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    cycles: list[list[Edge]] = []
    for component in components:
        start = min(component)
        # Shortest path start -> ... -> start inside the component.
        parents: dict[str, Edge] = {}
        frontier = [start]
        while start not in parents:
            nxt: list[str] = []
            for v in frontier:
                for w, e in sorted(graph[v].items()):
                    if w in component and w not in parents:
                        parents[w] = e
                        nxt.append(w)
            frontier = nxt
        path = [parents[start]]
        while path[-1].source != start:
            path.append(parents[path[-1].source])
        cycles.append(path[::-1])
    return cycles


def describe(cycle: list[Edge]) -> str:
    steps = "\n".join(f"    {e.source} -> {e.target}   ({e.where})" for e in cycle)
    return f"  {' -> '.join([cycle[0].source, *(e.target for e in cycle)])}\n{steps}"


@pytest.fixture(scope="module")
def modules() -> dict[str, Path]:
    found = discover()
    # A parser that sees nothing passes every rule: make sure it saw the package.
    expected = {PACKAGE, CORE, f"{CORE}.layout", f"{CORE}.spec", TF_NAMES, CELLS, *CELLS_ORDER}
    assert expected <= set(found), sorted(expected - set(found))
    return found


@pytest.fixture(scope="module")
def edges(modules: dict[str, Path]) -> list[Edge]:
    return build_graph(modules)


def test_the_package_has_no_import_cycle(edges: list[Edge]) -> None:
    assert any(e.target == f"{CORE}.layout" for e in edges), "no edge found: the parser is broken"
    cycles = find_cycles(edges)
    assert not cycles, "import cycles in the package (each import is listed with its line):\n" + (
        "\n".join(describe(c) for c in cycles)
    )


def test_core_imports_only_core_the_standard_library_and_numpy(modules: dict[str, Path]) -> None:
    bad = []
    for module, path in modules.items():
        if not in_package(module, CORE):
            continue
        for imp in imports_of(path.read_text(encoding="utf-8"), module, is_package(path)):
            top = imp.target.split(".")[0]
            outside = in_package(imp.target, PACKAGE) and not in_package(imp.target, CORE)
            foreign = top != PACKAGE and top not in sys.stdlib_module_names
            if outside or (foreign and top not in CORE_THIRD_PARTY):
                where = f"{path.relative_to(SRC.parent)}:{imp.line}"
                bad.append(f"{module} imports {imp.target} ({where})")
    assert not bad, "core is pure (Python + NumPy, nothing above it, never torch):\n" + "\n".join(
        bad
    )


def test_every_module_has_a_level(modules: dict[str, Path]) -> None:
    homeless = sorted(m for m in modules if m != PACKAGE and level_of(m) is None)
    assert not homeless, f"modules in no level of LEVELS (give each a room): {homeless}"


def test_no_module_imports_a_level_above_its_own(edges: list[Edge]) -> None:
    bad = []
    for e in edges:
        source, target = level_of(e.source), level_of(e.target)
        if source is not None and target is not None and target > source:
            bad.append(
                f"{e.source} (level {source}) imports {e.target} (level {target}) ({e.where})"
            )
    assert not bad, "an import points up the house (even a lazy one):\n" + "\n".join(bad)


def test_the_package_never_imports_what_stands_beside_it(modules: dict[str, Path]) -> None:
    bad = [
        f"{module} imports {imp.target} ({path.relative_to(SRC.parent)}:{imp.line})"
        for module, path in modules.items()
        for imp in imports_of(path.read_text(encoding="utf-8"), module, is_package(path))
        if imp.target.split(".")[0] in BESIDE
    ]
    assert not bad, (
        "the package imports a script beside it (benchmarks/, tools/, examples/) or the tests; "
        "move what both need into the package:\n" + "\n".join(bad)
    )
    # The parser sees such an import wherever it is written.
    source = "def f():\n    from benchmarks import suite\n    import examples.demo\n"
    targets = [i.target for i in imports_of(source, f"{PACKAGE}.bench", is_package=False)]
    assert [t.split(".")[0] for t in targets] == ["benchmarks", "examples"]


def test_saveables_use_the_layout_not_the_op_level(edges: list[Edge]) -> None:
    bad = [
        f"{e.source} imports {e.target} ({e.where})"
        for e in edges
        if any(in_package(e.source, s) for s in SAVEABLES)
        and any(in_package(e.target, r) for r in RUNTIME)
    ]
    assert not bad, (
        "a saveable imports the op level; pack and unpack through core.layout instead:\n"
        + "\n".join(bad)
    )


def test_tf1_format_layers_import_only_downward(
    modules: dict[str, Path], edges: list[Edge]
) -> None:
    assert set(TF1_LAYERS) <= set(modules), sorted(set(TF1_LAYERS) - set(modules))
    layers = list(TF1_LAYERS)
    bad = [
        f"{e.source} imports {e.target} ({e.where})"
        for e in edges
        if e.source in TF1_LAYERS
        and e.target not in layers[layers.index(e.source) + 1 :]
        and not any(in_package(e.target, allowed) for allowed in TF1_LAYERS[e.source])
    ]
    assert not bad, (
        "a TF1 format layer imports a layer above it, or beside it "
        "(bundle -> writer -> prefix -> protos -> table -> wire):\n" + "\n".join(bad)
    )


def test_the_error_base_imports_nothing_of_the_package(
    modules: dict[str, Path], edges: list[Edge]
) -> None:
    """``errors`` is the bottom: every module may derive its errors from it."""
    assert ERRORS in modules
    bad = [f"{e.target} ({e.where})" for e in edges if e.source == ERRORS]
    assert not bad, "cudnn_rnn.errors imports the package: " + ", ".join(bad)


def test_files_imports_nothing_of_the_package_but_errors(
    modules: dict[str, Path], edges: list[Edge]
) -> None:
    """``files`` is the bottom of the file wing: every reader and writer may stand on it."""
    assert FILES in modules
    bad = [
        f"{e.source} imports {e.target} ({e.where})"
        for e in edges
        if in_package(e.source, FILES) and not in_package(e.target, FILES) and e.target != ERRORS
    ]
    assert not bad, "cudnn_rnn.io.files imports the package beyond errors: " + ", ".join(bad)


def test_files_imports_only_the_standard_library(modules: dict[str, Path]) -> None:
    assert FILES in modules
    foreign = [
        f"{imp.target} ({path.relative_to(SRC.parent)}:{imp.line})"
        for module, path in modules.items()
        if in_package(module, FILES)
        for imp in imports_of(path.read_text(encoding="utf-8"), module, is_package(path))
        if imp.target.split(".")[0] not in (*sys.stdlib_module_names, PACKAGE)
    ]
    assert not foreign, "cudnn_rnn.io.files is standard library only: " + ", ".join(foreign)


def test_the_readers_never_import_modules(edges: list[Edge]) -> None:
    """io holds readers and writers of data: it never imports the operator, the modules, the
    converters (checkpoint and convert included) or the command, even lazily."""
    assert any(e.source == f"{PACKAGE}.checkpoint" and in_package(e.target, IO) for e in edges)
    above = [p for level in LEVELS[2:] for p in level]
    bad = [
        f"{e.source} imports {e.target} ({e.where})"
        for e in edges
        if in_package(e.source, IO) and any(in_package(e.target, a) for a in above)
    ]
    assert not bad, "a reader imports a module above io:\n" + "\n".join(bad)


def test_the_cells_package_imports_point_down(edges: list[Edge]) -> None:
    rank = {module: i for i, module in enumerate(CELLS_ORDER)}
    bad = [
        f"{e.source} imports {e.target} ({e.where})"
        for e in edges
        if e.source in rank
        and (e.target == CELLS or (e.target in rank and rank[e.target] >= rank[e.source]))
    ]
    assert not bad, (
        "inside cudnn_rnn.cells, compatible <- drivers <- stacks, and no module imports the "
        "package's facade:\n" + "\n".join(bad)
    )


def test_every_module_that_names_tensors_uses_tf_names(edges: list[Edge]) -> None:
    users = {e.source for e in edges if e.target == TF_NAMES}
    namers = {
        f"{PACKAGE}.saveable.format_converters",
        f"{PACKAGE}.saveable.saveables",
        f"{IO}.detect",
        f"{PACKAGE}.converters.loader",
        f"{PACKAGE}.converters.finder",
        *CELLS_ORDER,
    }
    assert namers <= users, f"not built with {TF_NAMES}: {sorted(namers - users)}"


# -- the checker itself ----------------------------------------------------------------------------


def test_imports_are_seen_at_any_depth_and_resolved_to_modules() -> None:
    source = """
from __future__ import annotations
import cudnn_rnn.core.layout
from typing import TYPE_CHECKING
from cudnn_rnn import ops, __version__
from . import gates
from .spec import RNNSpec
if TYPE_CHECKING:
    from cudnn_rnn.layers import CudnnLSTM
def lazy():
    from cudnn_rnn.converters import onnx
"""
    known = [
        PACKAGE,
        "cudnn_rnn.ops",
        "cudnn_rnn.layers",
        "cudnn_rnn.converters",
        "cudnn_rnn.converters.onnx",
        "cudnn_rnn.core",
        "cudnn_rnn.core.layout",
        "cudnn_rnn.core.gates",
        "cudnn_rnn.core.spec",
    ]
    imports = imports_of(source, "cudnn_rnn.core.demo", is_package=False)
    targets = [t for imp in imports for t in resolve(imp, known)]
    assert targets == [
        "cudnn_rnn.core.layout",
        "cudnn_rnn.ops",
        PACKAGE,  # __version__ is a name of the package, not a module
        "cudnn_rnn.core.gates",
        "cudnn_rnn.core.spec",
        "cudnn_rnn.layers",
        "cudnn_rnn.converters.onnx",
    ]


def test_a_cycle_is_reported_with_its_path() -> None:
    edges = [
        Edge("cudnn_rnn.ops", "cudnn_rnn.core.layout", "ops.py:1"),
        Edge("cudnn_rnn.ops", "cudnn_rnn.inference", "ops.py:2"),
        Edge("cudnn_rnn.inference", "cudnn_rnn.converters.onnx", "inference.py:3"),
        Edge("cudnn_rnn.converters.onnx", "cudnn_rnn.layers", "onnx.py:4"),
        Edge("cudnn_rnn.layers", "cudnn_rnn.ops", "layers.py:5"),
        Edge("cudnn_rnn.cli", "cudnn_rnn.layers", "cli.py:6"),
    ]
    (cycle,) = find_cycles(edges)
    assert (
        describe(cycle).splitlines()[0].split()
        == (
            "cudnn_rnn.converters.onnx -> cudnn_rnn.layers -> cudnn_rnn.ops -> cudnn_rnn.inference "
            "-> cudnn_rnn.converters.onnx"
        ).split()
    )
    assert find_cycles(edges[:1] + edges[2:]) == []
