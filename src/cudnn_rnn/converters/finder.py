"""Listing a file: every RNN it holds, whatever its format (:func:`find_rnns`, which
``cudnn_rnn.find_rnns`` is), and what ``cudnn-rnn inspect`` says beyond them: where the file
holds none, what its reader looked at (:func:`looked_at`), so that a user can tell it looked in
the right place; a checkpoint's names understood as no model (:func:`unread_groups`).

Each format has one finder here (:data:`_FINDERS`, a row per format of
:data:`cudnn_rnn.io.registry.FORMATS`), a few lines over its reader in :mod:`cudnn_rnn.io`.
A checkpoint's models (ours and TF1's) are listed from its metadata or its names
(:func:`_models`, :func:`_found_model`, :func:`_standard_cells`), and
:mod:`cudnn_rnn.converters.loader` picks the one to load from the same list. Listing reads
names and shapes, no weights, where the format allows it.
"""

from __future__ import annotations

import os
import re
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cudnn_rnn.converters import onnx as onnx_format
from cudnn_rnn.converters.options import PYTHON, _keras_h5_options, check_options
from cudnn_rnn.converters.readers import _claims, _described, kind_of, reader_of, tensor_shapes
from cudnn_rnn.core import tf_names
from cudnn_rnn.core.variant import Variant
from cudnn_rnn.io.detect import detect_models, detect_models_and_skipped
from cudnn_rnn.io.files import Claims
from cudnn_rnn.io.files.escaping import clip, escape, quote
from cudnn_rnn.io.found import FoundRNN
from cudnn_rnn.io.once import once, one_operation
from cudnn_rnn.io.tf1 import state as tf1_state
from cudnn_rnn.io.torch import file as torch_file

__all__ = ["Looked", "find_rnns", "looked_at", "unread_groups"]


def find_rnns(
    path: str | os.PathLike[str], activation: str | None = None, **keras: Any
) -> list[FoundRNN]:
    """Every RNN ``path`` holds, whatever its format (``cudnn_rnn.find_rnns``): one
    :class:`~cudnn_rnn.io.found.FoundRNN` each, with where it is (ONNX nodes at any depth,
    torch state_dict groups at any prefix, Keras layers of nested models too, a checkpoint's
    models), its mode, sizes and direction, and whether cuDNN's math computes it (and if not,
    every reason). Each record's ``name`` is what :func:`cudnn_rnn.load`'s ``name`` takes.
    ``activation`` and ``keras`` (the reader's options) as in :func:`cudnn_rnn.load`, which
    takes the same ones; an option the reader of the file does not take raises
    :class:`~cudnn_rnn.converters.options.OptionError` (options that change only the values
    read, ``forget_bias``, ``cell_clip``, ``proj_clip``, change nothing listed)."""
    path = tf1_state.resolve(path)  # a TF1 checkpoint directory: its latest checkpoint
    with one_operation():
        reader = reader_of(path)
        check_options(
            path, {"activation": activation, **keras}, spelling=PYTHON, call="cudnn_rnn.find_rnns"
        )
        key = f"find {activation} {sorted(keras.items())}"
        found: list[FoundRNN] = once(
            key, path, lambda: _FINDERS[reader](path, reader, activation, keras)
        )
        return list(found)


def _find_keras_h5(
    path: str, reader: str, activation: str | None, keras: dict[str, Any]
) -> list[FoundRNN]:
    from cudnn_rnn.io.keras import h5 as keras_h5

    return keras_h5.find_rnns(path, **{**_keras_h5_options(activation), **keras})


def _find_onnx(
    path: str, reader: str, activation: str | None, keras: dict[str, Any]
) -> list[FoundRNN]:
    return onnx_format.find_rnns(path)


def _find_torch(
    path: str, reader: str, activation: str | None, keras: dict[str, Any]
) -> list[FoundRNN]:
    return torch_file.find_rnns(path, activation=activation)


def _find_checkpoint(
    path: str, reader: str, activation: str | None, keras: dict[str, Any]
) -> list[FoundRNN]:
    """Our checkpoints and TF1's: the models our metadata or TF's names describe, and TF's
    standard cells."""
    kind = kind_of(path)
    claims = _claims(path)
    models = _models(path, reader, claims)
    if reader == "safetensors" and not models:  # a torch state_dict saved as safetensors
        return torch_file.find_rnns(path, activation=activation)
    return [_found_model(i, m, kind) for i, m in enumerate(models)] + _standard_cells(
        reader, claims, kind
    )


def _find_keras3(
    path: str, reader: str, activation: str | None, keras: dict[str, Any]
) -> list[FoundRNN]:
    from cudnn_rnn.io.keras import keras3

    return keras3.find_rnns(path, time_limit=keras.get("time_limit"))


#: Each format of the registry -> what lists the RNNs of its files.
_FINDERS: dict[str, Callable[[str, str, str | None, dict[str, Any]], list[FoundRNN]]] = {
    "safetensors": _find_checkpoint,
    "tf1": _find_checkpoint,
    "onnx": _find_onnx,
    "torch": _find_torch,
    "keras_h5": _find_keras_h5,
    "keras3": _find_keras3,
}


def _models(path: str, reader: str, claims: Claims) -> list[dict[str, Any]]:
    """The models a checkpoint describes: our metadata's layers, else what the names imply."""
    if reader == "safetensors":
        described = _described(path)
        # Cell stacks describe cells, not one fused model: their names say what it is.
        if described and all("rnn_mode" in m for m in described):
            return described
    return detect_models({n: s for n, (s, _) in claims.items()})


def _found_model(index: int, config: dict[str, Any], kind: str) -> FoundRNN:
    """A checkpoint's model (our metadata's, or what TF's names imply) as a record; its name is
    its scope, or ``#index`` without one."""
    name = config.get("scope") or f"#{index}"
    mode = config.get("rnn_mode")
    details: dict[str, Any] = {}
    notes: tuple[str, ...] = ()
    if config.get("activation_known") is False:
        mode = None  # a BasicRNNCell: the caller says tanh or relu (--activation)
        details["needs_activation"] = True
    if "variant" in config:  # our metadata's (checked by its reader), as the other readers say it
        details["variant"] = config["variant"]
        notes = (
            f"it computes {mode} with a variant: {Variant.from_dict(config['variant']).describe()}",
        )
    return FoundRNN(
        str(name),
        f"model {index} of the checkpoint" + (f" (scope {name!r})" if config.get("scope") else ""),
        kind,
        mode,
        num_layers=config.get("num_layers"),
        num_units=config.get("num_units"),
        input_size=config.get("input_size"),
        direction=config.get("direction"),
        num_proj=config.get("num_proj") or None,
        details=details,
        notes=notes,
    )


def _standard_cells(reader: str, claims: Claims, kind: str) -> list[FoundRNN]:
    """The RNNs of TF's standard cells a TF1 checkpoint holds (LSTMCell, MultiRNNCell stacks,
    bidirectional pairs...: :mod:`cudnn_rnn.io.tf1.cells`); none in other formats."""
    if reader != "tf1":
        return []
    from cudnn_rnn.io.tf1 import cells

    shapes = {n: s for n, (s, _) in claims.items()}
    return cells.find_cells(shapes, kind, {n: d for n, (_, d) in claims.items()})


# -- beyond the RNNs (cudnn-rnn inspect): what was looked at, names not understood -----------------


@dataclass(frozen=True)
class Looked:
    """What a reader looked at in a file where it found no RNN (``cudnn-rnn inspect`` says it,
    so that a user can tell it looked in the right place): the file ``read_as``, how many
    ``unit`` (nodes, tensors, weights) it holds, of which kinds (an ONNX graph's operators; the
    groups its tensor names start with: modules, scopes, Keras layers without their ``_N``), and
    what was looked for and not found."""

    read_as: str
    count: int
    unit: str
    kinds: dict[str, int]  # most common first
    missing: str

    def line(self, shown: int = 6) -> str:
        """It in one line, the ``shown`` most common kinds named (a name from the file quoted,
        an operator as it is)."""
        nodes = self.unit == "nodes"
        kinds = [
            f"{n} {clip(escape(k), 40)}" if nodes else f"{n} under {quote(k, 40)}"
            for k, n in self.kinds.items()
        ]
        more = len(kinds) - shown
        named = ", ".join(kinds[:shown]) + (
            f" and {more} more kind{'s' if more > 1 else ''}" if more > 0 else ""
        )
        return f"read {self.read_as}: {self.count} {self.unit} ({named or 'none'}); {self.missing}"


#: Each reader -> (what its files are read as, what the listing looked for, in words).
_LOOKED_FOR = {
    "safetensors": (
        "a safetensors file",
        "no tensors named as our checkpoints name a model, nor as a torch.nn LSTM, GRU or RNN "
        "names its own (weight_ih_l0, weight_hh_l0...)",
    ),
    "tf1": (
        "a TF1 checkpoint",
        "no tensors named as tf.contrib.cudnn_rnn's saveables or TF's standard RNN cells name "
        f"theirs (.../{tf_names.LSTM_CELL}/{tf_names.KERNEL}, .../lstm_cell/{tf_names.KERNEL}...)",
    ),
    "onnx": (
        "an ONNX graph (subgraphs and functions included)",
        "no LSTM, GRU or RNN operator",
    ),
    "torch": (
        "a torch file",
        "no tensors named as a torch.nn LSTM, GRU, RNN or RNN cell names its own "
        "(weight_ih_l0, weight_hh_l0...)",
    ),
    "keras_h5": (
        "a Keras .h5 file",
        "no weights of an LSTM, GRU, SimpleRNN, CuDNNLSTM or CuDNNGRU layer (nor one inside a "
        "Bidirectional or a nested model)",
    ),
    "keras3": (
        "a Keras 3 .keras file",
        "no LSTM, GRU or SimpleRNN layer (nor one inside a Bidirectional or a nested model)",
    ),
}
_NUMBERED = re.compile(r"_[0-9]+\Z")  # Keras's second, third... layer of a kind: dense_1


def looked_at(path: str, shapes: Mapping[str, tuple[tuple[int, ...], str]] | None = None) -> Looked:
    """What the reader of ``path`` looked at (see :class:`Looked`): an ONNX model's nodes, at
    any depth, by operator (the model is loaded again for this, as its reader loads it: only
    where nothing was found); the tensors of the other formats, by the group their names start
    with (a Keras layer's kind: its name without ``_N``): ``shapes``, the listing the caller
    already made (:func:`tensor_shapes`), else listed here."""
    reader = reader_of(path)
    read_as, missing = _LOOKED_FOR[reader]
    if reader == "onnx":
        kinds = _onnx_operators(path)
        return Looked(read_as, sum(kinds.values()), "nodes", kinds, missing)
    if shapes is None:
        shapes = tensor_shapes(path, reader)
    groups: Counter[str] = Counter()
    for name in shapes:
        parts = [p for p in re.split(r"[/.]", name) if p]
        if reader == "keras3" and len(parts) > 1 and parts[0] == "layers":
            parts = parts[1:]  # layers/dense_1/vars/0: the place of a layer
        head = parts[0] if parts else name
        groups[_NUMBERED.sub("", head) if reader.startswith("keras") else head] += 1
    unit = "weights" if reader.startswith("keras") else "tensors"
    return Looked(read_as, len(shapes), unit, dict(groups.most_common()), missing)


def _onnx_operators(path: str) -> dict[str, int]:
    """Operator -> how many nodes of the model compute it: its graph, every subgraph and every
    model-local function's body (an explicit stack: no recursion), most common first; an
    operator of another domain than ONNX's is named ``domain.op``."""
    from cudnn_rnn.io.onnx import file as onnx_file

    model = onnx_file.load_checked(path, "inspect").model
    ops: Counter[str] = Counter()  # (ties in the order first met)
    bodies = deque([model.graph.node, *(f.node for f in model.functions)])
    while bodies:
        for node in bodies.popleft():
            standard = node.domain in onnx_file.STANDARD_DOMAINS
            ops[node.op_type if standard else f"{node.domain}.{node.op_type}"] += 1
            for a in node.attribute:
                if a.type == onnx_file.GRAPH:
                    bodies.append(a.g.node)
                elif a.type == onnx_file.GRAPHS:
                    bodies.extend(g.node for g in a.graphs)
    return dict(ops.most_common())


def unread_groups(path: str) -> list[str]:
    """The groups of a checkpoint's names not understood as a model (what they lack), for
    ``cudnn-rnn inspect``; empty for other formats and for files whose metadata says it."""
    reader = reader_of(path)
    if reader not in ("tf1", "safetensors") or (reader == "safetensors" and _described(path)):
        return []
    shapes = {n: s for n, (s, _) in _claims(path).items()}
    return detect_models_and_skipped(shapes)[1]
