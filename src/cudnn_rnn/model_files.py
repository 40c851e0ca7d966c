"""One RNN from any file we read (``cudnn_rnn.find_rnns``, ``cudnn_rnn.load``, and the
``cudnn-rnn`` command's file handling; :mod:`cudnn_rnn.cli` keeps argument handling only).

The reader is chosen by the file's content (:func:`cudnn_rnn.files.sniff`, refined by
:func:`cudnn_rnn.formats.registry.refine_kind`), not by its name, from the one table of formats
(:data:`cudnn_rnn.formats.registry.FORMATS`):

=====================================  =======================================================
content                                reader
=====================================  =======================================================
safetensors                            ``safetensors``: our checkpoints
                                       (:mod:`cudnn_rnn.checkpoint`); a torch state_dict saved
                                       as safetensors
TF1 checkpoint (``PREFIX.index``)      ``tf``: CudnnLSTM-style canonical and opaque models
                                       (:mod:`cudnn_rnn.checkpoint`), TF's standard cells
                                       (:mod:`cudnn_rnn.formats.tf1.cells`)
ONNX protobuf                          ``onnx``: :mod:`cudnn_rnn.formats.onnx`
torch.save (zip or legacy), pickle,    ``torch``: state_dicts wherever they are (Lightning
TorchScript, ``.npz``                  checkpoints, ``torch.save(model)``, lists; read without
                                       running anything: :mod:`cudnn_rnn.formats.torch_pickle`)
HDF5                                   ``keras_h5``: :mod:`cudnn_rnn.formats.keras_h5`
zip of ``config.json`` and             ``keras3``: :mod:`cudnn_rnn.formats.keras3`
``model.weights.h5``
other zip                              refused: :class:`UnsupportedFormat` names the kind
unknown                                the reader of the name's extension (the registry's), so
                                       that a truncated or corrupt file is told what is wrong
                                       with it; no such extension: :class:`UnsupportedFormat`
=====================================  =======================================================

Each format has one finder and one loader here (:data:`_FINDERS`, :data:`_LOADERS`); a reader
that returns data (:class:`cudnn_rnn.formats.found.ReadRNN`) is built into our layer in one
place, :func:`_built`. One operation (:func:`cudnn_rnn._once.one_operation`) sniffs a file and
parses its header or index once. Nothing is built from a file before its tensors were checked
against the model it describes (names, shapes, dtypes, and their bytes inside the file).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from cudnn_rnn import checkpoint, files
from cudnn_rnn._once import once, one_operation
from cudnn_rnn.core import tf_names
from cudnn_rnn.errors import UsageError
from cudnn_rnn.files import Claims, clip, first_line, quote
from cudnn_rnn.formats import onnx as onnx_format
from cudnn_rnn.formats import registry, torch_file, torch_nn
from cudnn_rnn.formats.detect import detect_models, detect_models_and_skipped
from cudnn_rnn.formats.found import FoundRNN, ReadRNN
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
    "Spelling",
    "UnsupportedFormat",
    "UsageError",
    "contents",
    "find_rnns",
    "kind_of",
    "load",
    "load_layer",
    "reader_of",
    "tensor_shapes",
]


class UnsupportedFormat(files.FormatError):
    """A file whose format, told by its content, the command cannot read (yet), or whose
    content is of no format it knows and whose name says none either."""


@dataclass(frozen=True)
class Spelling:
    """How a caller spells the choices a message asks for: the ``cudnn-rnn`` command's options
    (:data:`CLI`) or the Python API's arguments (:data:`PYTHON`), so that an error names what
    its reader can type."""

    model: str  # picks one RNN of several
    activation: str  # says tanh or relu where the file does not
    lister: str  # what lists a file's RNNs


CLI = Spelling("--model NAME", "--activation tanh or --activation relu", "cudnn-rnn inspect")
PYTHON = Spelling(
    "name=NAME", 'activation="tanh" or activation="relu"', "cudnn_rnn.find_rnns(path)"
)

#: Each kind :func:`cudnn_rnn.files.sniff` tells -> the reader of its files (the registry's).
READERS = {kind: f.name for f in registry.FORMATS for kind in f.kinds}
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
        from cudnn_rnn.formats.keras_h5 import keras_h5_weights

        return keras_h5_weights(path)
    if reader == "keras3":
        from cudnn_rnn.formats import keras3

        return keras3.tensor_shapes(path)
    if reader == "onnx":
        from cudnn_rnn.formats import onnx

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
        from cudnn_rnn.formats.keras_h5 import describe_keras_h5

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
    :class:`~cudnn_rnn.formats.found.FoundRNN` each, with where it is (ONNX nodes at any depth,
    torch state_dict groups at any prefix, Keras layers of nested models too, a checkpoint's
    models), its mode, sizes and direction, and whether cuDNN's math computes it (and if not,
    every reason). Each record's ``name`` is what :func:`load`'s ``name`` takes.
    ``activation`` as in :func:`load`; ``keras`` are the Keras .h5 reader's options
    (``confirm_keras_version``, ``merge_layers``)."""
    path = os.fspath(path)
    with one_operation():
        reader = reader_of(path)
        key = f"find {activation} {sorted(keras.items())}"
        found: list[FoundRNN] = once(
            key, path, lambda: _FINDERS[reader](path, reader, activation, keras)
        )
        return list(found)


def _find_keras_h5(
    path: str, reader: str, activation: str | None, keras: dict[str, Any]
) -> list[FoundRNN]:
    from cudnn_rnn.formats import keras_h5

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
    from cudnn_rnn.formats import keras3

    return keras3.find_rnns(path)


#: Each format of the registry -> what lists the RNNs of its files.
_FINDERS: dict[str, Callable[[str, str, str | None, dict[str, Any]], list[FoundRNN]]] = {
    "safetensors": _find_checkpoint,
    "tf": _find_checkpoint,
    "onnx": _find_onnx,
    "torch": _find_torch,
    "keras_h5": _find_keras_h5,
    "keras3": _find_keras3,
}


def _standard_cells(reader: str, claims: Claims, kind: str) -> list[FoundRNN]:
    """The RNNs of TF's standard cells a TF1 checkpoint holds (LSTMCell, MultiRNNCell stacks,
    bidirectional pairs...: :mod:`cudnn_rnn.formats.tf1.cells`); none in other formats."""
    if reader != "tf":
        return []
    from cudnn_rnn.formats.tf1 import cells

    return cells.find_cells({n: s for n, (s, _) in claims.items()}, kind)


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
    """
    with one_operation():
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
    if forget_bias is not None and reader != "tf":
        raise UsageError(
            f"{path}: forget_bias is for TF1 checkpoints of TF's standard LSTM cells, which "
            "this file is not."
        )
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
    from cudnn_rnn.formats import keras3

    model = ask.model
    if model is None:
        model = _only_one(ask.path, keras3.find_rnns(ask.path), ask.spelling)
        if model is None:
            raise UsageError(f"{ask.path}: holds no RNN layer.")
    return _built(keras3.read(ask.path, model), ask.note, ask.path)


def _built(read: ReadRNN, note: Callable[[str], None] | None, path: str) -> _CudnnRNN:
    """The one place a reader's data becomes our layer: CPU, the data's floating dtype
    (float16 and float64 kept, else float32); each of its notes told."""
    from cudnn_rnn.formats.canonical import layer_from_canonical

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
    from cudnn_rnn.formats.tf1 import cells

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
    from cudnn_rnn.formats import keras_h5

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
    reader (Keras .h5: ``confirm_keras_version``, ``merge_layers``).

    The layer is built, on the CPU, in the file's floating dtype, holding the file's weights
    exactly (both biases of a gate where the format stores them). Raises
    :class:`UsageError` for a choice to make (a name, an activation) and
    :class:`cudnn_rnn.files.FormatError` (or a subclass) for a file that cannot be read.

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
