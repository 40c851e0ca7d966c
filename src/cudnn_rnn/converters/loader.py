"""One RNN of any file we read, as our layer (:func:`load`, which ``cudnn_rnn.load`` is, and
:func:`load_layer`, the command's), and what a file holds (:func:`contents`).

The file's reader is chosen by its content (:mod:`cudnn_rnn.converters.readers`), the options
given are checked against those it takes (:mod:`cudnn_rnn.converters.options`: any other is
refused, never ignored), and the RNN to load is one that the file's listing names
(:mod:`cudnn_rnn.converters.finder`, whose :func:`find_rnns` is ``cudnn_rnn.find_rnns``): the
one that cuDNN's math computes, or the one ``name`` picks. Each format has one loader here
(:data:`_LOADERS`). A reader that returns data (:class:`cudnn_rnn.io.found.ReadRNN`) is built
into our layer in one place, :func:`_built` (on the one builder,
:func:`cudnn_rnn.converters.canonical.layer_from_canonical`). One operation
(:func:`cudnn_rnn.io.once.one_operation`) sniffs a file and parses its header or index once.
Nothing is built from a file before its tensors were checked against the model it describes
(names, shapes, dtypes, and their bytes inside the file).

The names of the modules above are importable from here too, as they were when this module held
them all.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from cudnn_rnn import checkpoint
from cudnn_rnn.converters import onnx as onnx_format
from cudnn_rnn.converters import torch_nn
from cudnn_rnn.converters.finder import (
    Looked,
    _found_model,
    _models,
    _standard_cells,
    find_rnns,
    looked_at,
)
from cudnn_rnn.converters.options import (
    CLI,
    PYTHON,
    OptionError,
    Spelling,
    _keras_h5_options,
    check_options,
)
from cudnn_rnn.converters.readers import (
    READERS,
    UnsupportedFormat,
    _claims,
    _described,
    kind_of,
    reader_of,
    tensor_shapes,
)
from cudnn_rnn.core import tf_names
from cudnn_rnn.core.constants import CUDNN_INPUT_LINEAR_MODE
from cudnn_rnn.core.variant import Variant
from cudnn_rnn.errors import UsageError
from cudnn_rnn.io.detect import detect_models_and_skipped
from cudnn_rnn.io.files import Claims, escaping
from cudnn_rnn.io.files.escaping import clip, first_line, quote
from cudnn_rnn.io.found import FoundRNN, ReadRNN
from cudnn_rnn.io.once import one_operation
from cudnn_rnn.io.tf1 import state as tf1_state
from cudnn_rnn.io.torch import file as torch_file
from cudnn_rnn.layers import LAYER_CLASSES, _CudnnRNN
from cudnn_rnn.saveable.saveables import (
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


_SAVEABLES: dict[str, type[CudnnOpaqueParamsSaveable]] = {
    "lstm": CudnnLSTMSaveable,
    "gru": CudnnGRUSaveable,
    "rnn_tanh": CudnnRNNTanhSaveable,
    "rnn_relu": CudnnRNNReluSaveable,
}


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
    path = tf1_state.resolve(path)
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


def load_layer(
    path: str,
    activation: str | None = None,
    layer_name: str | None = None,
    *,
    model: str | None = None,
    note: Callable[[str], None] | None = None,
    spelling: Spelling = CLI,
    forget_bias: float | None = None,
    cell_clip: float | None = None,
    proj_clip: float | None = None,
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
    forget gate at run time (not stored in a checkpoint; TF's default 1.0 where not given);
    ``cell_clip``, ``proj_clip``: how TF's LSTM cells clipped (not stored either; None: no
    clip). An option that the reader of the file does not take
    (:data:`cudnn_rnn.converters.options._OPTIONS`; one at its default asks for nothing) raises
    :class:`OptionError`, in ``spelling``'s words.
    """
    path = tf1_state.resolve(path)  # a TF1 checkpoint directory: its latest checkpoint
    with one_operation():
        call = "cudnn_rnn.load" if spelling == PYTHON else "load_layer"
        clips = {"cell_clip": cell_clip, "proj_clip": proj_clip}
        given = {"activation": activation, "forget_bias": forget_bias, **clips, **keras}
        check_options(path, given, spelling=spelling, call=call)
        return _load_layer(
            path, activation, layer_name, model, note, spelling, forget_bias, keras, clips=clips
        )


def _load_layer(
    path: str,
    activation: str | None,
    layer_name: str | None,
    model: str | None,
    note: Callable[[str], None] | None,
    spelling: Spelling,
    forget_bias: float | None,
    keras: dict[str, Any],
    *,
    clips: dict[str, float | None] | None = None,
) -> _CudnnRNN:
    reader = reader_of(path)
    if model is not None and layer_name is not None and model != layer_name:
        raise UsageError(f"{path}: --model {model!r} and --layer {layer_name!r} differ; give one.")
    model = model if model is not None else layer_name
    ask = _Request(path, reader, model, activation, spelling, note, forget_bias, keras, clips or {})
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
    #: TF's LSTM cells' cell_clip and proj_clip (TF1 checkpoints of TF's standard cells).
    clips: dict[str, float | None] = field(default_factory=dict)


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
    """Our checkpoints and TF1's (see :func:`cudnn_rnn.converters.finder._find_checkpoint`)."""
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
            return _cells_layer(path, model, activation, forget_bias, note, ask.clips)
    if forget_bias is not None:
        raise UsageError(
            f"{path}: forget_bias is for TF's standard LSTM cells, which this file's model is "
            "not (a cuDNN model stores its biases whole)."
        )
    clipped = [k for k, v in ask.clips.items() if v is not None]
    if clipped:
        raise UsageError(
            f"{path}: {' and '.join(clipped)} {'is' if len(clipped) == 1 else 'are'} for TF's "
            "standard LSTM cells, which this file's model is not (a cuDNN model does not clip)."
        )
    config = _pick_model(path, models, model, kind, spelling)
    mode = config["rnn_mode"]
    if config.get("activation_known") is False:
        if activation is None:
            raise UsageError(
                f"{path}: {tf_names.BASIC_RNN_CELL} does not say tanh or relu; pass "
                f"{spelling.activation}."
            )
        if activation not in ("tanh", "relu"):
            raise UsageError(
                f"{path}: {tf_names.BASIC_RNN_CELL}'s model is tanh or relu, got activation "
                f"{quote(activation)}; pass {spelling.activation}."
            )
        mode = f"rnn_{activation}"
    expected = _expected_shapes(path, mode, config, len(claims))
    # Checked against the header or index, and the file must hold every byte, before anything
    # is built. A safetensors file is read here; a TF1 checkpoint by restore (once) below.
    tensors: dict[str, torch.Tensor] = {}
    if reader == "tf1":
        checkpoint.check_expected(path, expected)
    else:
        # The file's other models' tensors are expected there when one model is picked.
        tensors = checkpoint.read_expected(path, expected, strict=len(models) == 1)
    kwargs: dict[str, Any] = {"num_proj": config["num_proj"]} if config.get("num_proj") else {}
    if "variant" in config:  # (our metadata's, checked by its reader)
        kwargs["variant"] = Variant.from_dict(config["variant"])
    layer = LAYER_CLASSES[mode](
        config["num_layers"],
        config["num_units"],
        input_mode=config.get("input_mode", CUDNN_INPUT_LINEAR_MODE),
        direction=config["direction"],
        input_size=config["input_size"],
        scope=config.get("scope"),
        dtype=_file_dtype(claims, expected),
        **kwargs,
    )
    if reader == "tf1":
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


def _file_dtype(claims: Claims, expected: dict[str, Any]) -> torch.dtype:
    """The dtype a checkpoint's model is built in: its tensors', where they are all float16 or
    all float64, else float32 (as :func:`_built` does)."""
    found = {claims[name][1] for name in expected if name in claims}
    if len(found) == 1 and found <= {"float16", "float64"}:
        return getattr(torch, found.pop())  # type: ignore[no-any-return]
    return torch.float32


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
    "tf1": _load_checkpoint,
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
    clips: dict[str, float | None],
) -> _CudnnRNN:
    """The RNN of TF's standard cells named ``name``, read as data and built as our layer."""
    from cudnn_rnn.io.tf1 import cells

    index = checkpoint._tf_bundle(path)  # (parsed once in this operation)
    read = cells.read_cells(
        index,
        name,
        forget_bias=1.0 if forget_bias is None else forget_bias,
        activation=activation,
        cell_clip=clips.get("cell_clip"),
        proj_clip=clips.get("proj_clip"),
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
        held = escaping.names(names) or "none"
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
    shown = escaping.names([f.name for f in (computable or found)])
    if not computable:
        raise UsageError(
            f"{path}: holds no RNN that we compute ({shown}; {spelling.lister} says why)."
        )
    raise UsageError(
        f"{path}: holds {len(computable)} RNNs that we compute ({shown}); pick one "
        f"with {spelling.model} ({spelling.lister} lists them)."
    )


def _torch_layer(
    path: str, model: str | None, activation: str | None, spelling: Spelling
) -> _CudnnRNN:
    if model is None:  # the file is read twice then: names are the CLI's, not from_torch's
        model = _only_one(path, torch_file.find_rnns(path, activation=activation), spelling)
    return torch_nn.from_torch(path, prefix=model, activation=activation)


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
            config.get("input_mode", CUDNN_INPUT_LINEAR_MODE),
            direction=config["direction"],
            num_proj=proj,
            variant=Variant.from_dict(config.get("variant", {})),
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
            spec.input_mode,
            spec.direction,
            scope=config.get("scope"),
            num_proj=proj,
            variant=spec.variant,
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
    cell_clip: float | None = None,
    proj_clip: float | None = None,
    note: Callable[[str], None] | None = None,
    **options: Any,
) -> _CudnnRNN:
    """One RNN of a file, whatever its format, as our layer (``cudnn_rnn.load``).

    ``path`` is any file :func:`find_rnns` reads: our safetensors checkpoints, TF1 checkpoints
    (a ``PREFIX``; a checkpoint directory, or its ``checkpoint`` file, means the latest one, as
    ``tf.train.latest_checkpoint``), ONNX models, torch files (``torch.save`` state_dicts and
    models), Keras 2 ``.h5`` files; the format is told by the content. ``name`` picks one of the
    RNNs :func:`cudnn_rnn.find_rnns` lists (its ``name``); it is needed only where the file holds
    several that cuDNN's math computes, and the refusal then lists them.
    ``activation`` (``"tanh"``/``"relu"``) says what a plain RNN's file does not record (a TF1
    checkpoint of TF's standard cells: the cells' ``activation``, any name of
    :data:`cudnn_rnn.core.variant.ACTIVATIONS`; TF's default tanh where not given);
    ``forget_bias``, ``cell_clip`` and ``proj_clip`` what a TF1 checkpoint of TF's standard LSTM
    cells (``LSTMCell``, ``BasicLSTMCell``, ``LSTMBlockCell``...) does not store (TF's defaults
    where not given: 1.0, no clip, no clip; ``proj_clip`` with ``num_proj`` only).
    ``note`` is told, in one line each, of anything read otherwise than asked and of what a
    user must know to compute what the producer computed. ``options`` go to the format's
    reader (Keras .h5: ``confirm_keras_version``, ``merge_layers``, ``time_limit``,
    ``assume_cudnn_activations``, ``simple_rnn_activation``; Keras 3: ``time_limit``). An
    option that the reader of the file does not take raises :class:`OptionError` (a
    ``TypeError``) naming those it takes: per format, ``safetensors`` and torch files take
    ``activation``; TF1 checkpoints ``activation``, ``forget_bias``, ``cell_clip`` and
    ``proj_clip``; ONNX models none; Keras
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
    >>> [r.name for r in cudnn_rnn.find_rnns(os.path.join(folder, "gru.pt"))]  # the top level
    ['.']
    >>> cudnn_rnn.load(os.path.join(folder, "gru.pt")).num_units
    4
    """
    with one_operation():
        return load_layer(
            os.fspath(path), activation, model=name, note=note, spelling=PYTHON,
            forget_bias=forget_bias, cell_clip=cell_clip, proj_clip=proj_clip, **options,
        )  # fmt: skip
