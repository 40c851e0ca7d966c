"""Import paths of modules that moved, kept working: one table, old path -> new module.

The package was rearranged (docs/internals/architecture.md, issue 46): file readers and
writers went below the layers into :mod:`cudnn_rnn.io`, the code that turns their data into our
modules above them into :mod:`cudnn_rnn.converters`, the command into :mod:`cudnn_rnn.cli`.
Code written against the old paths keeps working: ``import cudnn_rnn.formats.onnx``,
``from cudnn_rnn.formats.tf1 import bundle`` and ``from cudnn_rnn import files`` give the module
that now lives at the new path (the same object, so a ``monkeypatch`` of either name patches
both). :class:`_Finder`, on ``sys.meta_path`` once :mod:`cudnn_rnn` is imported, answers for the
old names only; nothing in the package imports an old name. Standard library only.

>>> import cudnn_rnn
>>> import cudnn_rnn.formats.tf1.bundle as old
>>> from cudnn_rnn.io.tf1 import bundle as new
>>> old is new
True
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Sequence
from typing import Final

__all__ = ["MOVED", "PACKAGES", "install", "new_name"]

#: Old module path -> the module it is now (paths relative to ``cudnn_rnn``).
MOVED: Final = {
    "files": "io.files",
    "atomic": "io.atomic",
    "pickles": "io.pickles",
    "_once": "io.once",
    "formats.registry": "io.registry",
    "formats.found": "io.found",
    "formats.detect": "io.detect",
    "formats.gate_blocks": "io.gate_blocks",
    "formats.cudnn_layout": "io.cudnn_layout",
    "formats.safetensors": "io.safetensors",
    "formats.npz": "io.npz",
    "formats.tf1.bundle": "io.tf1.bundle",
    "formats.tf1.table": "io.tf1.table",
    "formats.tf1.protobuf_wire": "io.tf1.protobuf_wire",
    "formats.tf1.cells": "io.tf1.cells",
    "formats.tf1.legacy": "converters.tf1_legacy",
    "formats.tf1.opaque": "converters.tf1_opaque",
    "formats.keras_h5": "io.keras.h5",
    "formats._keras_h5_child": "io.keras.h5_child",
    "formats.keras3": "io.keras.keras3",
    "formats.keras": "converters.keras",
    "formats.onnx": "converters.onnx",
    "formats.onnx_file": "io.onnx.file",
    "formats.onnx_eval": "io.onnx.eval",
    "formats.onnx_find": "io.onnx.find",
    "formats.onnx_read": "io.onnx.read",
    "formats.onnx_graph": "io.onnx.graph",
    "formats.torch_file": "io.torch.file",
    "formats.torch_state": "io.torch.state",
    "formats.torch_pickle": "io.torch.pickled",
    "formats.torchscript": "io.torch.torchscript",
    "formats.torch_nn": "converters.torch_nn",
    "formats.canonical": "converters.canonical",
    "model_files": "converters.loader",
    "bench": "cli.bench",
    "_commands": "cli.commands",
    "_console": "cli.console",
    "_runtime_peer": "cli.runtime_peer",
    "_timing": "cli.timing",
}
#: Old packages that are gone: each is an empty package whose submodules are in :data:`MOVED`.
PACKAGES: Final = ("formats", "formats.tf1")

_PREFIX = "cudnn_rnn."


def new_name(old: str) -> str | None:
    """The full name of the module that old full name ``old`` now is (None: not moved)."""
    if not old.startswith(_PREFIX):
        return None
    moved = MOVED.get(old[len(_PREFIX) :])
    return None if moved is None else _PREFIX + moved


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers for the old names: a moved module is the new module itself, an old package an
    empty package (so that its moved submodules can be imported through it)."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        name = fullname[len(_PREFIX) :] if fullname.startswith(_PREFIX) else None
        if name is None or (name not in MOVED and name not in PACKAGES):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=name in PACKAGES)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        new = new_name(spec.name)
        if new is None:  # an old package: empty, its submodules found by their old names
            package = types.ModuleType(spec.name, f"Moved: see {__name__}.")
            package.__path__ = []
            return package
        return importlib.import_module(new)

    def exec_module(self, module: types.ModuleType) -> None:
        """The module is the new one, already run (or the empty package): nothing to run."""


_FINDER = _Finder()


def install() -> None:
    """Put the finder on ``sys.meta_path`` (once)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)
