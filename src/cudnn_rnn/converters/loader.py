"""One RNN from any file we read (``cudnn_rnn.find_rnns``, ``cudnn_rnn.load``, and the
``cudnn-rnn`` command's file handling; :mod:`cudnn_rnn.cli` keeps argument handling only).

The reader is chosen by the file's content (:func:`cudnn_rnn.io.files.sniff`, refined by
:func:`cudnn_rnn.io.registry.refine_kind`), not by its name, from the one table of formats
(:data:`cudnn_rnn.io.registry.FORMATS`):

=====================================  =======================================================
content                                reader
=====================================  =======================================================
safetensors                            ``safetensors``: our checkpoints
                                       (:mod:`cudnn_rnn.checkpoint`); a torch state_dict saved
                                       as safetensors
TF1 checkpoint (``PREFIX.index``)      ``tf``: CudnnLSTM-style canonical and opaque models
                                       (:mod:`cudnn_rnn.checkpoint`), TF's standard cells
                                       (:mod:`cudnn_rnn.io.tf1.cells`)
ONNX protobuf                          ``onnx``: :mod:`cudnn_rnn.converters.onnx`
torch.save (zip or legacy), pickle,    ``torch``: state_dicts wherever they are (Lightning
TorchScript, ``.npz``                  checkpoints, ``torch.save(model)``, lists; read without
                                       running anything: :mod:`cudnn_rnn.io.torch.pickled`)
HDF5                                   ``keras_h5``: :mod:`cudnn_rnn.io.keras.h5`
zip of ``config.json`` and             ``keras3``: :mod:`cudnn_rnn.io.keras.keras3`
``model.weights.h5``
other zip                              refused: :class:`UnsupportedFormat` names the kind
unknown                                the reader of the name's extension (the registry's), so
                                       that a truncated or corrupt file is told what is wrong
                                       with it; no such extension: :class:`UnsupportedFormat`
=====================================  =======================================================

Each format has one finder and one loader here (:data:`_FINDERS`, :data:`_LOADERS`), and one
entry of :data:`_OPTIONS`, the options its reader takes: any other option given to
:func:`load` or :func:`find_rnns` (or the command) is refused (:class:`OptionError`), never
ignored. Where a file holds no RNN, :func:`looked_at` says what its reader looked at. A reader
that returns data (:class:`cudnn_rnn.io.found.ReadRNN`) is built into our layer in one
place, :func:`_built`. One operation (:func:`cudnn_rnn.io.once.one_operation`) sniffs a file and
parses its header or index once. Nothing is built from a file before its tensors were checked
against the model it describes (names, shapes, dtypes, and their bytes inside the file).
"""

from __future__ import annotations

import difflib
import os
import re
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from cudnn_rnn import checkpoint
from cudnn_rnn.converters import onnx as onnx_format
from cudnn_rnn.converters import torch_nn
from cudnn_rnn.core import tf_names
from cudnn_rnn.errors import UsageError
from cudnn_rnn.io import files, registry
from cudnn_rnn.io.detect import detect_models, detect_models_and_skipped
from cudnn_rnn.io.files import Claims, clip, first_line, quote
from cudnn_rnn.io.found import FoundRNN, ReadRNN
from cudnn_rnn.io.once import once, one_operation
from cudnn_rnn.io.torch import file as torch_file
from cudnn_rnn.layers import LAYER_CLASSES, _CudnnRNN
from cudnn_rnn.saveable import (
    CudnnGRUSaveable,
    CudnnLSTMSaveable,
    CudnnOpaqueParamsSaveable,
    CudnnRNNReluSaveable,
    CudnnRNNTanhSaveable,
)

__all__ = [
    "CLI",
    "PYTHON",
    "READERS",
    "Contents",
    "Looked",
    "OptionError",
    "Spelling",
    "UnsupportedFormat",
    "UsageError",
    "check_options",
    "contents",
    "find_rnns",
    "kind_of",
    "load",
    "load_layer",
    "looked_at",
    "reader_of",
    "tensor_shapes",
]


class UnsupportedFormat(files.FormatError):
    """A file whose format, told by its content, the command cannot read (yet), or whose
    content is of no format it knows and whose name says none either."""


class OptionError(UsageError, TypeError):
    """An option that no reader of the file takes (a typo, ``forgetbias=0.0``; ``cell_clip=``
    on a TF1 checkpoint; ``merge_layers=`` on an ONNX model): a ``TypeError``, as Python's own
    for an unexpected keyword argument, and a :class:`UsageError`, which the command prints as
    one line (exit 2). Its message names the options the file's reader takes, in the caller's
    words (keyword arguments, or the command's options)."""


@dataclass(frozen=True)
class Spelling:
    """How a caller spells the choices a message asks for: the ``cudnn-rnn`` command's options
    (:data:`CLI`) or the Python API's arguments (:data:`PYTHON`), so that an error names what
    its reader can type."""

    model: str  # picks one RNN of several
    activation: str  # says tanh or relu where the file does not
    lister: str  # what lists a file's RNNs
    flags: bool = False  # options are the command's (--merge-layers), not keywords


CLI = Spelling(
    "--model NAME", "--activation tanh or --activation relu", "cudnn-rnn inspect", flags=True
)
PYTHON = Spelling(
    "name=NAME", 'activation="tanh" or activation="relu"', "cudnn_rnn.find_rnns(path)"
)

#: Each kind :func:`cudnn_rnn.io.files.sniff` tells -> the reader of its files (the registry's).
READERS = {kind: f.name for f in registry.FORMATS for kind in f.kinds}
#: Each reader -> its files, in words (the registry's titles, without their asides).
_TITLES = {f.name: f.title.split(" (")[0] for f in registry.FORMATS}
_SAVEABLES: dict[str, type[CudnnOpaqueParamsSaveable]] = {
    "lstm": CudnnLSTMSaveable,
    "gru": CudnnGRUSaveable,
    "rnn_tanh": CudnnRNNTanhSaveable,
    "rnn_relu": CudnnRNNReluSaveable,
}


def kind_of(path: str) -> str:
    """The kind of ``path`` by its content (a family refined: a Keras 3 zip), sniffed once per
    operation."""
    return once(  # type: ignore[no-any-return]
        "sniff", path, lambda: registry.refine_kind(files.sniff(path), path)
    )


def _claims(path: str) -> Claims:
    return once("claims", path, lambda: checkpoint.read_claims(path))  # type: ignore[no-any-return]


def _described(path: str) -> list[dict[str, Any]]:
    return once("describe", path, lambda: checkpoint.describe(path))  # type: ignore[no-any-return]


def reader_of(path: str) -> str:
    """The reader of ``path`` (a key of :data:`READERS`'s values), chosen by its content; see
    the module for the rules. Raises :class:`UnsupportedFormat` for a file no reader takes."""
    kind = kind_of(path)
    if kind == files.TF1 and not checkpoint.is_tf_checkpoint(path):
        raise UnsupportedFormat(
            f"{path}: the index of a TF1 checkpoint, but not named PREFIX.index; give it its "
            "name back (beside its PREFIX.data-* files) and pass PREFIX."
        )
    reader = registry.reader_for_kind(kind)
    if reader is not None:
        return reader
    if kind in registry.NOT_READ:
        raise UnsupportedFormat(f"{path}: {files.KINDS[kind]}; {registry.NOT_READ[kind]}.")
    if checkpoint.is_tf_checkpoint(path):
        return "tf"
    by_name = registry.reader_for_name(path)
    if by_name is None:
        raise UnsupportedFormat(
            f"{path}: its content is of no format cudnn-rnn reads ({registry.READ}), nor does "
            "its name say one; if it is one of them, it is truncated or corrupt."
        )
    return by_name


def tensor_shapes(path: str, reader: str) -> dict[str, tuple[tuple[int, ...], str]]:
    """Name -> (shape, dtype name) of every tensor of ``path``, as its ``reader`` sees them.

    Listing reads no data where the format allows it: a header or index (safetensors, TF1),
    the initializers' headers (ONNX), the datasets' descriptions (Keras .h5), the members'
    headers (TorchScript, ``.npz``); a torch.save file is loaded whole (``weights_only``).
    """
    if reader in ("tf", "safetensors"):
        return dict(_claims(path))
    if reader == "keras_h5":
        from cudnn_rnn.io.keras.h5 import keras_h5_weights

        return keras_h5_weights(path)
    if reader == "keras3":
        from cudnn_rnn.io.keras import keras3

        return keras3.tensor_shapes(path)
    if reader == "onnx":
        from cudnn_rnn.converters import onnx

        return onnx.tensor_shapes(path)
    return torch_file.tensor_shapes(path)


@dataclass
class Contents:
    """What a file holds: its reader, its tensors (name -> (shape, dtype name)), the models they
    describe (configurations), and the groups of names not understood as a model."""

    reader: str
    shapes: dict[str, tuple[tuple[int, ...], str]]
    models: list[dict[str, Any]]
    skipped: list[str] = field(default_factory=list)


def contents(path: str, activation: str | None = None) -> Contents:
    """The tensors of ``path`` and the models they describe (what ``cudnn-rnn inspect`` shows);
    ``activation`` as in :func:`load_layer`."""
    reader = reader_of(path)
    shapes = tensor_shapes(path, reader)
    skipped: list[str] = []
    if reader == "keras_h5":
        from cudnn_rnn.io.keras.h5 import describe_keras_h5

        models = describe_keras_h5(path, **_keras_h5_options(activation))
    elif reader in ("onnx", "torch"):
        layer = load_layer(path, activation)
        models = [{"rnn_mode": layer.rnn_mode, **layer.get_config()}]
    else:
        models = _described(path) if reader == "safetensors" else []
        if not models:
            models, skipped = detect_models_and_skipped({n: s for n, (s, _) in shapes.items()})
    return Contents(reader, shapes, models, skipped)


def find_rnns(
    path: str | os.PathLike[str], activation: str | None = None, **keras: Any
) -> list[FoundRNN]:
    """Every RNN ``path`` holds, whatever its format (``cudnn_rnn.find_rnns``): one
    :class:`~cudnn_rnn.io.found.FoundRNN` each, with where it is (ONNX nodes at any depth,
    torch state_dict groups at any prefix, Keras layers of nested models too, a checkpoint's
    models), its mode, sizes and direction, and whether cuDNN's math computes it (and if not,
    every reason). Each record's ``name`` is what :func:`load`'s ``name`` takes.
    ``activation`` and ``keras`` (the reader's options) as in :func:`load`, which takes the
    same ones; an option the reader of the file does not take raises :class:`OptionError`
    (options that change only the values read, ``forget_bias``, change nothing listed)."""
    path = os.fspath(path)
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
    "tf": _find_checkpoint,
    "onnx": _find_onnx,
    "torch": _find_torch,
    "keras_h5": _find_keras_h5,
    "keras3": _find_keras3,
}

#: Each format of the registry -> the options its reader takes, besides ``name`` and ``note``:
#: what :func:`load` and :func:`find_rnns` accept for its files (the same for both; listing
#: ignores those that change only values), and, through :data:`_FLAGS`, the command's. Any
#: other option given is refused (:func:`check_options`), never ignored.
_OPTIONS: dict[str, tuple[str, ...]] = {
    # Our checkpoints' BasicRNNCell models, and a torch state_dict's plain RNNs, do not record
    # tanh or relu.
    "safetensors": ("activation",),
    "tf": ("activation", "forget_bias"),  # TF's standard cells: neither is stored
    "onnx": (),  # the file records every activation; nothing else to choose
    "torch": ("activation",),
    "keras_h5": (
        "activation",
        "confirm_keras_version",
        "merge_layers",
        "time_limit",
        "assume_cudnn_activations",  # (what activation= says, in the reader's own words)
        "simple_rnn_activation",
    ),
    "keras3": ("time_limit",),
}
#: The options the command has, as it spells them.
_FLAGS = {
    "activation": "--activation",
    "forget_bias": "--forget-bias",
    "confirm_keras_version": "--keras-version",
    "merge_layers": "--merge-layers",
}


#: What an option's default means, "not given": None, or False for the switches. An option
#: some reader takes, given at that value, asks for nothing and is never refused; one that no
#: reader takes (a typo) is refused whatever its value.
_UNSET: dict[str, object] = {
    **{o: None for takes in _OPTIONS.values() for o in takes},
    "merge_layers": False,
    "assume_cudnn_activations": False,
}


def check_options(
    path: str,
    options: Mapping[str, Any],
    *,
    spelling: Spelling = PYTHON,
    call: str = "cudnn_rnn.load",
) -> None:
    """Refuse the ``options`` (name -> value; one at its default, :data:`_UNSET`, gives
    nothing) that the reader of ``path`` does not take (:data:`_OPTIONS`): :class:`OptionError`
    naming them, the options it takes and, for each, the files that take it or the option it
    resembles (a typo); in the caller's words (``spelling``: keyword arguments of ``call``, or
    the command's options)."""
    reader = reader_of(path)
    takes = _OPTIONS[reader]
    given = [o for o, v in options.items() if o not in _UNSET or v is not _UNSET[o]]
    unknown = [o for o in given if o not in takes]
    if not unknown:
        return
    hints = "; ".join(h for h in (_option_hint(o, reader, spelling) for o in unknown) if h)
    hints = f" ({hints})" if hints else ""
    if spelling.flags:
        own = [_FLAGS[o] for o in takes if o in _FLAGS]
        what = ", ".join(own) if own else "none of " + ", ".join(_FLAGS.values())
        flags = ", ".join(_FLAGS.get(o, o) for o in unknown)
        verb = "does" if len(unknown) == 1 else "do"
        raise OptionError(
            f"{path}: {flags} {verb} not apply: the reader of {_TITLES[reader]} takes "
            f"{what}{hints}."
        )
    plural = "s" if len(unknown) > 1 else ""
    named = ", ".join(quote(o) for o in unknown)
    what = ", ".join(takes) if takes else "no options"
    raise OptionError(
        f"{call}() got an unexpected keyword argument{plural} {named} for {path}: the reader of "
        f"{_TITLES[reader]} takes {what}{hints}."
    )


def _option_hint(option: str, reader: str, spelling: Spelling) -> str | None:
    """Which files take ``option``, or which option it may be a misspelling of."""
    readers = [r for r, takes in _OPTIONS.items() if option in takes and r != reader]
    shown = _FLAGS.get(option, option) if spelling.flags else quote(option)
    if readers:
        titles = " and ".join(_TITLES[r] for r in readers)
        return f"{shown} is for {titles}"
    known = sorted({o for takes in _OPTIONS.values() for o in takes} | {"name", "note"})
    close = difflib.get_close_matches(option, known, n=1, cutoff=0.75)
    return f"did you mean {quote(close[0])}?" if close else None


def _standard_cells(reader: str, claims: Claims, kind: str) -> list[FoundRNN]:
    """The RNNs of TF's standard cells a TF1 checkpoint holds (LSTMCell, MultiRNNCell stacks,
    bidirectional pairs...: :mod:`cudnn_rnn.io.tf1.cells`); none in other formats."""
    if reader != "tf":
        return []
    from cudnn_rnn.io.tf1 import cells

    shapes = {n: s for n, (s, _) in claims.items()}
    return cells.find_cells(shapes, kind, {n: d for n, (_, d) in claims.items()})


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
            f"{n} {files.clip(files.escape(k), 40)}" if nodes else f"{n} under {files.quote(k, 40)}"
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
    "tf": (
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
    if reader not in ("tf", "safetensors") or (reader == "safetensors" and _described(path)):
        return []
    shapes = {n: s for n, (s, _) in _claims(path).items()}
    return detect_models_and_skipped(shapes)[1]


def _found_model(index: int, config: dict[str, Any], kind: str) -> FoundRNN:
    """A checkpoint's model (our metadata's, or what TF's names imply) as a record; its name is
    its scope, or ``#index`` without one."""
    name = config.get("scope") or f"#{index}"
    mode = config.get("rnn_mode")
    if config.get("activation_known") is False:
        mode = None  # a BasicRNNCell: the caller says tanh or relu (--activation)
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
        details={"needs_activation": True} if config.get("activation_known") is False else {},
    )


def load_layer(
    path: str,
    activation: str | None = None,
    layer_name: str | None = None,
    *,
    model: str | None = None,
    note: Callable[[str], None] | None = None,
    spelling: Spelling = CLI,
    forget_bias: float | None = None,
    **keras: Any,
) -> _CudnnRNN:
    """One model from any supported file, as our layer.

    ``activation`` (``"tanh"``/``"relu"``) says what a plain RNN's file does not record;
    ``model`` picks one of the RNNs :func:`find_rnns` lists (needed where the file holds
    several); ``layer_name`` is its older name for a Keras ``.h5`` layer. ``keras`` are the
    Keras reader's options (``confirm_keras_version``, ``merge_layers``).
    ``note`` is told, in one line, of what was read otherwise than asked (a TF1 opaque kernel
    that does not fit, whose biases are then split in halves; what a TF1 standard cell's
    checkpoint does not store). ``spelling``: how messages name the choices (the command's
    options, or the Python API's arguments). ``forget_bias``: what TF's LSTM cells added to the
    forget gate at run time (not stored in a checkpoint; TF's default 1.0 where not given).
    An option that the reader of the file does not take (:data:`_OPTIONS`; one at its default
    asks for nothing) raises :class:`OptionError`, in ``spelling``'s words.
    """
    with one_operation():
        call = "cudnn_rnn.load" if spelling == PYTHON else "load_layer"
        given = {"activation": activation, "forget_bias": forget_bias, **keras}
        check_options(path, given, spelling=spelling, call=call)
        return _load_layer(path, activation, layer_name, model, note, spelling, forget_bias, keras)


def _load_layer(
    path: str,
    activation: str | None,
    layer_name: str | None,
    model: str | None,
    note: Callable[[str], None] | None,
    spelling: Spelling,
    forget_bias: float | None,
    keras: dict[str, Any],
) -> _CudnnRNN:
    reader = reader_of(path)
    if model is not None and layer_name is not None and model != layer_name:
        raise UsageError(f"{path}: --model {model!r} and --layer {layer_name!r} differ; give one.")
    model = model if model is not None else layer_name
    ask = _Request(path, reader, model, activation, spelling, note, forget_bias, keras)
    return _LOADERS[reader](ask)


@dataclass(frozen=True)
class _Request:
    """What :func:`load_layer` was asked, as each format's loader takes it."""

    path: str
    reader: str
    model: str | None
    activation: str | None
    spelling: Spelling
    note: Callable[[str], None] | None
    forget_bias: float | None
    keras: dict[str, Any]


def _load_keras_h5(ask: _Request) -> _CudnnRNN:
    return _keras_h5_layer(ask.path, ask.activation, ask.model, ask.keras, ask.spelling, ask.note)


def _load_onnx(ask: _Request) -> _CudnnRNN:
    model = ask.model
    if model is None:
        # The one RNN the file holds, wherever it is in the graph (a graph that is more than
        # RNN nodes is read by the node's name).
        model = _only_one(ask.path, onnx_format.find_rnns(ask.path), ask.spelling)
    return _built(onnx_format.read(ask.path, model), ask.note, ask.path)


def _load_torch(ask: _Request) -> _CudnnRNN:
    return _torch_layer(ask.path, ask.model, ask.activation, ask.spelling)


def _load_checkpoint(ask: _Request) -> _CudnnRNN:
    """Our checkpoints and TF1's (see :func:`_find_checkpoint`)."""
    path, reader, model, activation = ask.path, ask.reader, ask.model, ask.activation
    spelling, note, forget_bias = ask.spelling, ask.note, ask.forget_bias
    claims = _claims(path)
    models = _models(path, reader, claims)
    if reader == "safetensors" and not models:  # a torch state_dict saved as safetensors
        return _torch_layer(path, model, activation, spelling)
    kind = kind_of(path)
    cells = _standard_cells(reader, claims, kind)
    if cells:
        found = [_found_model(i, m, kind) for i, m in enumerate(models)] + cells
        if model is None:
            model = _only_one(path, found, spelling)
        if model in {c.name for c in cells}:
            return _cells_layer(path, model, activation, forget_bias, note)
    if forget_bias is not None:
        raise UsageError(
            f"{path}: forget_bias is for TF's standard LSTM cells, which this file's model is "
            "not (a cuDNN model stores its biases whole)."
        )
    config = _pick_model(path, models, model, kind, spelling)
    mode = config["rnn_mode"]
    if config.get("activation_known") is False:
        if activation is None:
            raise UsageError(
                f"{path}: {tf_names.BASIC_RNN_CELL} does not say tanh or relu; pass "
                f"{spelling.activation}."
            )
        mode = f"rnn_{activation}"
    expected = _expected_shapes(path, mode, config, len(claims))
    # Checked against the header or index, and the file must hold every byte, before anything
    # is built. A safetensors file is read here; a TF1 checkpoint by restore (once) below.
    tensors: dict[str, torch.Tensor] = {}
    if reader == "tf":
        checkpoint.check_expected(path, expected)
    else:
        # The file's other models' tensors are expected there when one model is picked.
        tensors = checkpoint.read_expected(path, expected, strict=len(models) == 1)
    kwargs: dict[str, Any] = {"num_proj": config["num_proj"]} if config.get("num_proj") else {}
    layer = LAYER_CLASSES[mode](
        config["num_layers"],
        config["num_units"],
        direction=config["direction"],
        input_size=config["input_size"],
        scope=config.get("scope"),
        **kwargs,
    )
    if reader == "tf":
        # restore also reads what only it reads: a TF1 training checkpoint's opaque kernel
        # (both biases of every gate exact).
        try:
            checkpoint.restore(path, layer)
            return layer
        except checkpoint.CheckpointError as err:  # an opaque kernel that does not fit
            tensors = checkpoint.read_expected(path, expected)  # raises for a corrupt file
            if note is not None:
                reason = str(err).splitlines()[-1].strip()
                note(
                    f"{path}: its opaque kernel is not used ({clip(reason)}); each gate's two "
                    "biases are the canonical sum split in half."
                )
    checkpoint.load_into(path, [layer], tensors)
    return layer


def _load_keras3(ask: _Request) -> _CudnnRNN:
    from cudnn_rnn.io.keras import keras3

    model, time_limit = ask.model, ask.keras.get("time_limit")
    if model is None:
        found = keras3.find_rnns(ask.path, time_limit=time_limit)
        model = _only_one(ask.path, found, ask.spelling)
        if model is None:
            raise UsageError(f"{ask.path}: holds no RNN layer.")
    return _built(keras3.read(ask.path, model, time_limit=time_limit), ask.note, ask.path)


def _built(read: ReadRNN, note: Callable[[str], None] | None, path: str) -> _CudnnRNN:
    """The one place a reader's data becomes our layer: CPU, the data's floating dtype
    (float16 and float64 kept, else float32); each of its notes told."""
    from cudnn_rnn.converters.canonical import layer_from_canonical

    if note is not None:
        for line in read.notes:
            note(f"{path}: {line}")
    dtype = read.weights[0].dtype
    if dtype not in (torch.float16, torch.float64):
        dtype = torch.float32
    return layer_from_canonical(
        read.spec, read.weights, read.biases, dtype=dtype, device=torch.device("cpu"),
        owner="cudnn_rnn.load",
    )  # fmt: skip


#: Each format of the registry -> what loads one RNN of its files as our layer.
_LOADERS: dict[str, Callable[[_Request], _CudnnRNN]] = {
    "safetensors": _load_checkpoint,
    "tf": _load_checkpoint,
    "onnx": _load_onnx,
    "torch": _load_torch,
    "keras_h5": _load_keras_h5,
    "keras3": _load_keras3,
}


def _cells_layer(
    path: str,
    name: str,
    activation: str | None,
    forget_bias: float | None,
    note: Callable[[str], None] | None,
) -> _CudnnRNN:
    """The RNN of TF's standard cells named ``name``, read as data and built as our layer."""
    from cudnn_rnn.io.tf1 import cells

    index = checkpoint._tf_bundle(path)  # (parsed once in this operation)
    read = cells.read_cells(
        index, name, forget_bias=1.0 if forget_bias is None else forget_bias, activation=activation
    )
    return _built(read, note, path)


def _pick_model(
    path: str, models: list[dict[str, Any]], name: str | None, kind: str, spelling: Spelling
) -> dict[str, Any]:
    """The model ``name`` picks (its scope or ``#index``), or the only one."""
    found = [_found_model(i, m, kind) for i, m in enumerate(models)]
    if name is None:
        only = _only_one(path, found, spelling)
        if only is None:
            raise UsageError(f"{path}: holds no RNN ({spelling.lister} shows what it holds).")
        return models[[f.name for f in found].index(only)]
    names = [f.name for f in found]
    if name not in names:
        held = files.names(names) or "none"
        raise UsageError(f"{path}: no model {quote(name)}; it holds {held}.")
    return models[names.index(name)]


def _only_one(path: str, found: list[FoundRNN], spelling: Spelling) -> str | None:
    """The name of the one RNN of ``found`` that cuDNN's math computes (or of the only RNN,
    whose reader then says why it cannot be read), where no name picks one; None where the
    file holds no RNN at all (its reader then says what it holds instead). A file of several
    is refused, naming them and how to pick one."""
    computable = [f for f in found if f.computable]
    if len(computable) == 1:
        return computable[0].name
    if len(found) == 1:
        return found[0].name  # not computable: its reader says why, in its own words
    if not found:
        return None
    shown = files.names([f.name for f in (computable or found)])  # (a module at the top is '')
    if not computable:
        raise UsageError(
            f"{path}: holds no RNN that cuDNN's math computes ({shown}; {spelling.lister} "
            "says why)."
        )
    raise UsageError(
        f"{path}: holds {len(computable)} RNNs that cuDNN's math computes ({shown}); pick one "
        f"with {spelling.model} ({spelling.lister} lists them)."
    )


def _torch_layer(
    path: str, model: str | None, activation: str | None, spelling: Spelling
) -> _CudnnRNN:
    if model is None:  # the file is read twice then: names are the CLI's, not from_torch's
        model = _only_one(path, torch_file.find_rnns(path, activation=activation), spelling)
    return torch_nn.from_torch(path, prefix=model, activation=activation)


def _keras_h5_options(activation: str | None) -> dict[str, Any]:
    """``activation`` for a Keras .h5 file: given, it says the plain layers of a weights-only
    file used cuDNN's activations, its SimpleRNNs this one."""
    return {
        "assume_cudnn_activations": activation is not None,
        "simple_rnn_activation": activation or "tanh",
    }


def _keras_h5_layer(
    path: str,
    activation: str | None,
    name: str | None,
    keras: dict[str, Any],
    spelling: Spelling,
    note: Callable[[str], None] | None = None,
) -> _CudnnRNN:
    from cudnn_rnn.io.keras import h5 as keras_h5

    options = {**_keras_h5_options(activation), **keras}
    if name is None:
        name = _only_one(path, keras_h5.find_rnns(path, **options), spelling)
        if name is None:
            raise UsageError(f"{path}: holds no RNN layer.")
    return _built(keras_h5.read(path, name, **options), note, path)


def _models(path: str, reader: str, claims: Claims) -> list[dict[str, Any]]:
    """The models a checkpoint describes: our metadata's layers, else what the names imply."""
    if reader == "safetensors":
        described = _described(path)
        # Cell stacks describe cells, not one fused model: their names say what it is.
        if described and all("rnn_mode" in m for m in described):
            return described
    return detect_models({n: s for n, (s, _) in claims.items()})


def _expected_shapes(
    path: str, mode: str, config: dict[str, Any], count: int
) -> dict[str, tuple[int | None, ...]]:
    """The canonical names and shapes of ``config``'s model, computed without building it."""
    from cudnn_rnn.core.layout import layout_of
    from cudnn_rnn.core.spec import RNNSpec

    dirs = 2 if config["direction"] == "bidirectional" else 1
    # Every layer-direction has at least two tensors: a bigger claim cannot fit this file, and
    # is refused before its (possibly huge) table is computed.
    if config["num_layers"] * dirs * 2 > count:
        raise UsageError(
            f"{path}: describes {config['num_layers']} layer(s) in {dirs} direction(s) but "
            f"holds only {count} tensor(s); the file is inconsistent."
        )
    proj = config.get("num_proj") or None
    try:
        spec = RNNSpec(
            mode,
            config["num_layers"],
            config["num_units"],
            config["input_size"],
            direction=config["direction"],
            num_proj=proj,
            owner="cudnn-rnn",
        )
        # A meta tensor has a size and no storage: the saveable names the tensors, allocating
        # nothing.
        opaque = torch.empty(layout_of(spec).size, device="meta")
        saveable = _SAVEABLES[mode](
            opaque,
            spec.num_layers,
            spec.num_units,
            spec.input_size,
            direction=spec.direction,
            scope=config.get("scope"),
            num_proj=proj,
        )
    except (TypeError, ValueError, RuntimeError, OverflowError) as err:
        raise UsageError(
            f"{path}: the model it describes is not valid ({clip(first_line(err))})."
        ) from err
    return saveable.checkpoint_shapes()


def load(
    path: str | os.PathLike[str],
    name: str | None = None,
    *,
    activation: str | None = None,
    forget_bias: float | None = None,
    note: Callable[[str], None] | None = None,
    **options: Any,
) -> _CudnnRNN:
    """One RNN of a file, whatever its format, as our layer (``cudnn_rnn.load``).

    ``path`` is any file :func:`find_rnns` reads: our safetensors checkpoints, TF1 checkpoints
    (a ``PREFIX``), ONNX models, torch files (``torch.save`` state_dicts and models), Keras 2
    ``.h5`` files; the format is told by the content. ``name`` picks one of the RNNs
    :func:`cudnn_rnn.find_rnns` lists (its ``name``); it is needed only where the file holds
    several that cuDNN's math computes, and the refusal then lists them.
    ``activation`` (``"tanh"``/``"relu"``) says what a plain RNN's file does not record;
    ``forget_bias`` what a TF1 checkpoint of TF's standard LSTM cells (``LSTMCell``,
    ``BasicLSTMCell``, ``LSTMBlockCell``...) does not store (TF's default 1.0 where not given).
    ``note`` is told, in one line each, of anything read otherwise than asked and of what a
    user must know to compute what the producer computed. ``options`` go to the format's
    reader (Keras .h5: ``confirm_keras_version``, ``merge_layers``, ``time_limit``,
    ``assume_cudnn_activations``, ``simple_rnn_activation``; Keras 3: ``time_limit``). An
    option that the reader of the file does not take raises :class:`OptionError` (a
    ``TypeError``) naming those it takes: per format, ``safetensors`` and torch files take
    ``activation``; TF1 checkpoints ``activation`` and ``forget_bias``; ONNX models none; Keras
    .h5 files ``activation`` and their reader's options; Keras 3 files ``time_limit``. An
    option that some reader takes,
    given at its default (None; False for ``merge_layers``), asks for nothing and is accepted
    for any file.

    The layer is built, on the CPU, in the file's floating dtype, holding the file's weights
    exactly (both biases of a gate where the format stores them). Raises
    :class:`UsageError` for a choice to make (a name, an activation) and
    :class:`cudnn_rnn.io.files.FormatError` (or a subclass) for a file that cannot be read.

    >>> import tempfile, os, torch, cudnn_rnn
    >>> folder = tempfile.mkdtemp()
    >>> torch.save(torch.nn.GRU(3, 4).state_dict(), os.path.join(folder, "gru.pt"))
    >>> [r.name for r in cudnn_rnn.find_rnns(os.path.join(folder, "gru.pt"))]
    ['']
    >>> cudnn_rnn.load(os.path.join(folder, "gru.pt")).num_units
    4
    """
    with one_operation():
        return load_layer(
            os.fspath(path), activation, model=name, note=note, spelling=PYTHON,
            forget_bias=forget_bias, **options,
        )  # fmt: skip
