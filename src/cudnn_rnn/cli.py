"""The ``cudnn-rnn`` command: inspect, convert and benchmark RNN models and checkpoints.

``cudnn-rnn inspect PATH`` lists tensors (name, shape, dtype) and the model configuration it
detects, for our safetensors checkpoints, TF1 checkpoints (``PREFIX`` or ``PREFIX.index``), ONNX
models, torch state_dicts (``.pt``/``.pth``) and Keras 2 ``.h5`` files (read only; ``--layer``
picks one RNN layer). ``cudnn-rnn convert SRC DST`` moves one model between those formats; the
destination's format follows its extension (``.safetensors``, ``.onnx``, ``.pt``/``.pth``),
anything else is written as a TF1 checkpoint prefix. ``cudnn-rnn bench MODEL`` times the one
model of any of those files against the same weights in ``torch.nn`` and, where installed,
onnxruntime, OpenVINO and Keras, and prints a table (see :mod:`cudnn_rnn.bench`).

Bad arguments and unreadable files end with exit code 2 and one line that says what to do; so does
every path that cannot be read or written (a name too long, a directory that cannot be searched or
written, a symbolic link loop, a file where a directory should be, a full disk): the line names
the path at fault, the output's when the output cannot be written.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import stat
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from cudnn_rnn import atomic, bench, checkpoint, convert
from cudnn_rnn.core import tf_names
from cudnn_rnn.core.tf_names import TFName
from cudnn_rnn.errors import CudnnRNNError
from cudnn_rnn.layers import LAYER_CLASSES, _CudnnRNN
from cudnn_rnn.saveable import (
    CudnnGRUSaveable,
    CudnnLSTMSaveable,
    CudnnOpaqueParamsSaveable,
    CudnnRNNReluSaveable,
    CudnnRNNTanhSaveable,
)

_TORCH_SUFFIXES = (".pt", ".pth")
_KERAS_H5_SUFFIXES = (".h5", ".hdf5")
_SAVEABLES: dict[str, type[CudnnOpaqueParamsSaveable]] = {
    "lstm": CudnnLSTMSaveable,
    "gru": CudnnGRUSaveable,
    "rnn_tanh": CudnnRNNTanhSaveable,
    "rnn_relu": CudnnRNNReluSaveable,
}


class UsageError(CudnnRNNError):
    """A problem the user can fix; printed as one line, exit code 2."""


class _OutputError(UsageError):
    """The output cannot be written: its line names the output, not the source."""


class _OptionError(UsageError):
    """An option's value is wrong: its line names the option, not the source."""


def detect_models(shapes: dict[str, tuple[int, ...]]) -> list[dict[str, Any]]:
    """Model configurations implied by TF canonical names and shapes (one per scope and stack).

    Names are read by :func:`cudnn_rnn.core.tf_names.parse`. ``basic_rnn_cell`` does not record
    tanh or relu; such models are reported as ``rnn_tanh`` with ``"activation_known": False``.
    Groups of names that do not describe a model (a missing layer-0 tensor, a shape of the wrong
    rank) are left out; :func:`detect_models_and_skipped` also says why.
    """
    return detect_models_and_skipped(shapes)[0]


def detect_models_and_skipped(
    shapes: dict[str, tuple[int, ...]],
) -> tuple[list[dict[str, Any]], list[str]]:
    """:func:`detect_models`, plus one line per group of names it could not interpret."""
    groups: dict[tuple[str, str, str], list[tuple[TFName, tuple[int, ...]]]] = {}
    for name, shape in shapes.items():
        n = tf_names.parse(name)
        if n is None:
            continue
        groups.setdefault((n.scope or "", n.stack, n.cell), []).append((n, shape))
    models, skipped = [], []
    for (scope, stack, cell), members in sorted(groups.items()):
        try:
            models.append(_interpret(scope, stack, cell, members))
        except _Uninterpretable as why:
            where = f"{scope}/{stack}" if scope else stack
            skipped.append(f"{where} ({cell}): {why}")
    return models, skipped


class _Uninterpretable(Exception):
    """A group of canonical names that does not describe a model."""


def _interpret(
    scope: str, stack: str, cell: str, members: list[tuple[TFName, tuple[int, ...]]]
) -> dict[str, Any]:
    if any(n.layer > 999999 for n, _ in members):
        raise _Uninterpretable("a layer number above 999999")
    first = {n.variable: s for n, s in members if n.layer == 0 and n.direction != tf_names.BW}

    def dim(var: str, rank: int, axis: int) -> int:
        shape = first.get(var)
        if shape is None:
            raise _Uninterpretable(f"no layer-0 {var}")
        if len(shape) != rank:
            raise _Uninterpretable(f"layer-0 {var} has shape {list(shape)}, expected rank {rank}")
        return shape[axis]

    modes = tf_names.CELL_MODES[cell]  # basic_rnn_cell: tanh (TF's default) or relu
    mode = modes[0]
    if mode == "gru":
        units = dim(tf_names.CANDIDATE_INPUT_BIAS, 1, 0)
        input_size = dim(tf_names.CANDIDATE_INPUT_KERNEL, 2, 0)
        proj = None
    else:
        units = dim(tf_names.BIAS, 1, 0) // (4 if mode == "lstm" else 1)
        has_proj = tf_names.PROJECTION_KERNEL in first
        proj = dim(tf_names.PROJECTION_KERNEL, 2, 1) if has_proj else None
        input_size = dim(tf_names.KERNEL, 2, 0) - (proj or units)
    if units < 1 or input_size < 1:
        raise _Uninterpretable(
            f"the layer-0 shapes imply {units} units and input size {input_size}"
        )
    return {
        "rnn_mode": mode,
        "scope": scope or None,
        "num_layers": 1 + max(n.layer for n, _ in members),
        "num_units": units,
        "input_size": input_size,
        "num_proj": proj,
        "direction": "bidirectional" if stack == tf_names.BIDIRECTIONAL_STACK else "unidirectional",
        **({"activation_known": False} if len(modes) > 1 else {}),
    }


def _kind(path: str) -> str:
    if checkpoint.is_tf_checkpoint(path):
        return "tf"
    suffix = Path(path).suffix
    if suffix == ".onnx":
        return "onnx"
    if suffix in _TORCH_SUFFIXES:
        return "torch"
    if suffix in _KERAS_H5_SUFFIXES:
        return "keras_h5"
    return "safetensors"


def _tensor_shapes(path: str, kind: str) -> dict[str, tuple[tuple[int, ...], str]]:
    if kind in ("tf", "safetensors"):
        # From the checked header or index alone: listing a file reads none of its data.
        return checkpoint.read_claims(path)
    if kind == "keras_h5":
        from cudnn_rnn.formats.keras_h5 import keras_h5_weights

        return keras_h5_weights(path)  # shapes and dtypes only, no data read
    if kind == "torch":
        tensors = _torch_state(path)
    else:
        from cudnn_rnn.formats.onnx import OnnxFormatError, load_model
        from cudnn_rnn.formats.onnx_graph import import_onnx

        # The checked loader; shapes and dtypes come from the headers, no weight is decoded.
        model = load_model(path)
        numpy_dtype = import_onnx().helper.tensor_dtype_to_np_dtype
        try:
            return {
                i.name: (tuple(int(d) for d in i.dims), numpy_dtype(i.data_type).name)
                for i in model.graph.initializer
            }
        except KeyError as err:
            raise OnnxFormatError(f"{path}: an initializer has no known dtype: {err}") from err
    return {n: (tuple(t.shape), str(t.dtype).replace("torch.", "")) for n, t in tensors.items()}


def _torch_state(path: str) -> dict[str, torch.Tensor]:
    import pickle

    with checkpoint.open_regular(path) as f, warnings.catch_warnings():  # never a FIFO
        # A corrupt file can make torch's unpickler warn on its way to refusing it; the CLI's
        # answer is the one line below, not the warning.
        warnings.simplefilter("ignore")
        try:
            state = torch.load(f, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as err:
            raise UsageError(
                f"{path}: torch.load(weights_only=True) refuses it: it holds objects other than "
                "tensors; save a plain torch.save(module.state_dict(), path)."
            ) from err
        except Exception as err:  # a truncated or corrupt file fails in many ways
            raise UsageError(
                f"{path}: not a readable torch file ({type(err).__name__}: "
                f"{_clip(_first_line(err))}); save it with torch.save(module.state_dict(), path)."
            ) from err
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise UsageError(f"{path}: not a torch state_dict (a dict of names to tensors).")
    return state


#: The floating dtypes a model's tensors may have (what every converter casts from).
_FLOATING = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_TORCH_KEY = re.compile(
    r"^(?:weight_ih|weight_hh|bias_ih|bias_hh|weight_hr)_l(\d{1,9})(?:_reverse)?$"
)
_GATES_MODE = {4: "lstm", 3: "gru", 1: "rnn_tanh"}


def load_layer(
    path: str, activation: str | None = None, layer_name: str | None = None
) -> _CudnnRNN:
    """One model from any supported file, as our layer (``layer_name``: which RNN layer of a Keras
    ``.h5`` file, needed when it holds several).

    Nothing is built before the file's tensors were checked against the model it describes
    (names, shapes, dtypes, and their bytes inside the file).
    """
    kind = _kind(path)
    if kind == "keras_h5":
        return _keras_h5_layer(path, activation, layer_name)
    if kind == "onnx":
        return convert.from_onnx(path)  # type: ignore[no-any-return]
    if kind == "torch":
        return convert.from_torch(_torch_module(_torch_state(path), path, activation))  # type: ignore[no-any-return]
    claims = checkpoint.read_claims(path)
    models = _models(path, kind, claims)
    if len(models) != 1:
        raise UsageError(f"{path}: holds {len(models)} models; convert needs exactly one.")
    config = models[0]
    mode = config["rnn_mode"]
    if config.get("activation_known") is False:
        if activation is None:
            raise UsageError(
                f"{path}: {tf_names.BASIC_RNN_CELL} does not say tanh or relu; pass "
                "--activation tanh or --activation relu."
            )
        mode = f"rnn_{activation}"
    expected = _expected_shapes(path, mode, config, len(claims))
    # Checked against the header or index, and the file must hold every byte, before anything
    # is built. A safetensors file is read here; a TF1 checkpoint by restore (once) below.
    tensors: dict[str, torch.Tensor] = {}
    if kind == "tf":
        checkpoint.check_expected(path, expected)
    else:
        tensors = checkpoint.read_expected(path, expected, strict=True)
    kwargs: dict[str, Any] = {"num_proj": config["num_proj"]} if config.get("num_proj") else {}
    layer = LAYER_CLASSES[mode](
        config["num_layers"],
        config["num_units"],
        direction=config["direction"],
        input_size=config["input_size"],
        scope=config.get("scope"),
        **kwargs,
    )
    if kind == "tf":
        # restore also reads what only it reads: a TF1 training checkpoint's opaque kernel
        # (both biases of every gate exact).
        try:
            checkpoint.restore(path, layer)
            return layer
        except checkpoint.CheckpointError as err:  # an opaque kernel that does not fit
            tensors = checkpoint.read_expected(path, expected)  # raises for a corrupt file
            reason = str(err).splitlines()[-1].strip()
            print(
                f"note: {path}: its opaque kernel is not used ({_clip(reason)}); each gate's "
                "two biases are the canonical sum split in half."
            )
    checkpoint.load_into(path, [layer], tensors)
    return layer


def _keras_h5_options(activation: str | None) -> dict[str, Any]:
    """``--activation`` for a Keras .h5 file: given, it says the plain layers of a weights-only
    file used cuDNN's activations, its SimpleRNNs this one."""
    return {
        "assume_cudnn_activations": activation is not None,
        "simple_rnn_activation": activation or "tanh",
    }


def _keras_h5_layer(path: str, activation: str | None, name: str | None) -> _CudnnRNN:
    from cudnn_rnn.formats.keras_h5 import describe_keras_h5, from_keras_h5

    options = _keras_h5_options(activation)
    if name is None:
        found = [m["layer"] for m in describe_keras_h5(path, **options)]
        if len(found) != 1:
            raise UsageError(
                f"{path}: holds {len(found)} RNN layers"
                + (f" ({_listed(found)}); pick one with --layer NAME." if found else ".")
            )
        name = str(found[0])
    layer: _CudnnRNN = from_keras_h5(path, layers=[name], **options)[name]
    return layer


def _models(path: str, kind: str, claims: checkpoint.Claims) -> list[dict[str, Any]]:
    """The models a checkpoint describes: our metadata's layers, else what the names imply."""
    if kind == "safetensors":
        described = checkpoint.describe(path)
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
            f"{path}: the model it describes is not valid ({_clip(_first_line(err))})."
        ) from err
    return saveable.checkpoint_shapes()


def _torch_module(
    state: dict[str, torch.Tensor], path: str, activation: str | None
) -> torch.nn.RNNBase:
    """The torch.nn module of ``state``, built only after every key, shape and dtype of
    ``state`` was checked against the module its layer-0 tensors imply."""
    from cudnn_rnn.core.spec import RNNSpec
    from cudnn_rnn.formats.torch_nn import torch_state_shapes

    w_ih, w_hh = state.get("weight_ih_l0"), state.get("weight_hh_l0")
    if w_ih is None or w_hh is None:
        raise UsageError(
            f"{path}: no weight_ih_l0/weight_hh_l0; expected the state_dict of a "
            "torch.nn.LSTM, GRU or RNN."
        )
    odd = [
        f"{k} ({str(v.dtype).removeprefix('torch.')})"
        for k, v in state.items()
        if v.dtype not in _FLOATING
    ]
    if odd:
        raise UsageError(
            f"{path}: tensors must be float16, bfloat16, float32 or float64, got {_listed(odd)}."
        )
    w_hr = state.get("weight_hr_l0")
    if w_ih.dim() != 2 or w_hh.dim() != 2 or (w_hr is not None and w_hr.dim() != 2):
        raise UsageError(
            f"{path}: weight_ih_l0, weight_hh_l0 (and weight_hr_l0) must be matrices, got "
            f"shapes {list(w_ih.shape)}, {list(w_hh.shape)}"
            f"{'' if w_hr is None else f', {list(w_hr.shape)}'}."
        )
    proj = w_hr.shape[0] if w_hr is not None else 0
    units = w_hr.shape[1] if w_hr is not None else w_hh.shape[1]
    gates = w_ih.shape[0] // units if units else 0
    if gates not in _GATES_MODE or w_ih.shape[0] != gates * units:
        raise UsageError(
            f"{path}: weight_ih_l0 {list(w_ih.shape)} is not 4, 3 or 1 gates of "
            f"{units} units; expected the state_dict of a torch.nn.LSTM, GRU or RNN."
        )
    indices = [m and int(m[1]) for m in map(_TORCH_KEY.match, state)]
    layers = 1 + max((i for i in indices if i is not None), default=0)
    bidirectional = "weight_ih_l0_reverse" in state
    bias = "bias_ih_l0" in state
    # Each layer-direction has at least two tensors: refuse a claim of more layers than the
    # file can hold before naming them all.
    if layers * (2 if bidirectional else 1) * 2 > len(state):
        raise UsageError(
            f"{path}: a key names layer {layers - 1}, but the state_dict holds only "
            f"{len(state)} tensors; it is not the state_dict of one torch.nn module."
        )
    try:
        spec = RNNSpec(
            _GATES_MODE[gates],
            layers,
            units,
            w_ih.shape[1],
            direction="bidirectional" if bidirectional else "unidirectional",
            num_proj=proj or None,
            owner="cudnn-rnn",
        )
    except (TypeError, ValueError) as err:
        raise UsageError(f"{path}: {_clip(_first_line(err))}") from err
    expected = torch_state_shapes(spec, bias=bias)
    problems = [f"missing {k}" for k in expected if k not in state]
    problems += [f"unexpected {k}" for k in state if k not in expected]
    problems += [
        f"{k} has shape {list(state[k].shape)}, expected {list(shape)}"
        for k, shape in expected.items()
        if k in state and tuple(state[k].shape) != shape
    ]
    if problems:
        raise UsageError(
            f"{path}: not the state_dict of the torch.nn module its weight_ih_l0 implies "
            f"({_GATES_MODE[gates]}, {layers} layer(s), {units} units): {_listed(problems)}."
        )
    if proj and proj >= units:
        raise UsageError(f"{path}: weight_hr_l0 has proj_size {proj} >= hidden_size {units}.")
    common = dict(
        input_size=w_ih.shape[1],
        hidden_size=units,
        num_layers=layers,
        bias=bias,
        bidirectional=bidirectional,
        dtype=w_ih.dtype,
    )
    if gates == 4:
        module: torch.nn.RNNBase = torch.nn.LSTM(proj_size=proj, **common)
    elif gates == 3:
        module = torch.nn.GRU(**common)
    else:
        if activation is None:
            raise UsageError(
                f"{path}: a torch.nn.RNN state_dict does not say tanh or relu; pass "
                "--activation tanh or --activation relu."
            )
        module = torch.nn.RNN(nonlinearity=activation, **common)
    module.load_state_dict(state)
    return module


def _listed(items: list[str], limit: int = 3) -> str:
    more = len(items) - limit
    return ", ".join(_clip(i) for i in items[:limit]) + (f" and {more} more" if more > 0 else "")


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return lines[0].strip() if lines else type(err).__name__


def _clip(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def save_layer(layer: _CudnnRNN, dst: str) -> str:
    """Write ``layer`` to ``dst`` in the format its extension names; returns that format."""
    suffix = Path(dst).suffix
    if suffix == ".safetensors":
        checkpoint.save(dst, layer)
        return "safetensors"
    if suffix == ".onnx":
        convert.to_onnx(layer, dst)
        return "onnx"
    if suffix in _TORCH_SUFFIXES:
        state = convert.to_torch(layer).state_dict()
        atomic.write_file(dst, lambda f: torch.save(state, f))
        return "torch state_dict"
    checkpoint.save(dst, layer, format="tf")
    return "TF1 checkpoint"


def _inspect(args: argparse.Namespace) -> None:
    kind = _kind(args.path)
    shapes = _tensor_shapes(args.path, kind)
    print(f"{args.path}: {kind} file, {len(shapes)} tensor(s)")
    width = max((len(n) for n in shapes), default=0)
    for name, (shape, dtype) in sorted(shapes.items()):
        print(f"  {name:<{width}}  {list(shape)!s:<14} {dtype}")
    skipped: list[str] = []
    if kind == "keras_h5":
        from cudnn_rnn.formats.keras_h5 import describe_keras_h5

        models = describe_keras_h5(args.path, **_keras_h5_options(args.activation))
    elif kind in ("onnx", "torch"):
        layer = load_layer(args.path, args.activation)
        models = [{"rnn_mode": layer.rnn_mode, **layer.get_config()}]
    else:
        models = checkpoint.describe(args.path) if kind == "safetensors" else []
        if not models:
            models, skipped = detect_models_and_skipped({n: s for n, (s, _) in shapes.items()})
    print(f"detected {len(models)} model(s):")
    for model in models:
        print("  " + ", ".join(f"{k}={v}" for k, v in model.items()))
    if skipped:
        print(f"names not understood as a model ({len(skipped)}):")
        for line in skipped[:20]:
            print(f"  {line}")


def _convert(args: argparse.Namespace) -> None:
    dst: str = args.dst
    if dst.endswith(tuple(sep for sep in (os.sep, os.altsep) if sep)):
        raise _OutputError(
            f"{dst}: names a directory, not a file; give the output's file name (for example "
            f"{dst}model.safetensors)."
        )
    layer = load_layer(args.src, args.activation, args.layer)
    try:
        written = save_layer(layer, dst)
    except OSError as err:  # anything the writers meet on the way to dst
        raise _OutputError(f"{dst}: cannot write it: {atomic.write_problem(dst, err)}.") from err
    print(
        f"{args.src} -> {args.dst} ({written}): {type(layer).__name__} "
        f"{layer.num_layers} layer(s), {layer.num_units} units, {layer.direction}"
    )


DESCRIPTION = (
    "cudnn-rnn: TensorFlow 1.x's tf.contrib.cudnn_rnn re-created on PyTorch (cuDNN-exact LSTM, "
    "GRU and RNN layers on CPU and GPU). This command inspects and converts RNN checkpoints and "
    "models (our safetensors, TF1 checkpoints without TensorFlow, ONNX, torch state_dicts, "
    "Keras 2 .h5 files) and times one against torch.nn and the other runtimes installed."
)
EPILOG = "Run 'cudnn-rnn COMMAND --help' for the options of a command."


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cudnn-rnn", description=DESCRIPTION, epilog=EPILOG)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    inspect = sub.add_parser(
        "inspect",
        help="list the tensors and the detected model(s) of a file",
        description="List the tensors (name, shape, dtype) of PATH and the model(s) they "
        "describe: our .safetensors, a TF1 checkpoint (PREFIX or PREFIX.index), .onnx, a "
        "torch state_dict (.pt/.pth), or a Keras 2 .h5 model or weights file (its RNN layers).",
    )
    inspect.add_argument("path")
    convert_cmd = sub.add_parser(
        "convert",
        help="convert one model between safetensors, TF1, ONNX, torch",
        description="Convert the one model in SRC to DST; DST's extension picks the format "
        "(.safetensors, .onnx, .pt/.pth; anything else: a TF1 checkpoint prefix).",
    )
    convert_cmd.add_argument("src")
    convert_cmd.add_argument("dst")
    bench_cmd = sub.add_parser(
        "bench",
        help="time a model against torch.nn, onnxruntime, OpenVINO and Keras",
        description="Time the one model of MODEL (any file convert reads) on a seeded random "
        "input [T, B, input size] against the same weights in torch.nn and, where installed, "
        "onnxruntime, OpenVINO and Keras (CPU, float32); print milliseconds per call, ours over "
        "each, and how far each output is from ours.",
        epilog="Times are medians of timed blocks that alternate between the implementations, "
        "after an untimed warm-up; ours / it below 1 means ours is faster.",
    )
    bench_cmd.add_argument("path", metavar="MODEL")
    bench_cmd.add_argument(
        "--steps", type=int, default=100, help="time steps T of the input (default: 100)"
    )
    bench_cmd.add_argument(
        "--batch", type=int, default=16, help="sequences B of the input (default: 16)"
    )
    bench_cmd.add_argument(
        "--training",
        action="store_true",
        help="also time a training step (forward and backward) against torch.nn",
    )
    bench_cmd.add_argument(
        "--no-peers", action="store_true", help="only ours and torch.nn (no runtimes, no Keras)"
    )
    bench.add_timing_arguments(bench_cmd)
    for p in (convert_cmd, bench_cmd):
        p.add_argument(
            "--layer",
            metavar="NAME",
            help="which RNN layer of a Keras .h5 file to take (when it holds several)",
        )
    for p in (inspect, convert_cmd, bench_cmd):
        p.add_argument(
            "--activation",
            choices=("tanh", "relu"),
            help="for plain RNNs, whose files do not record it (Keras .h5 weights-only files: "
            "the plain layers used cuDNN's activations, SimpleRNNs this one)",
        )
    return parser


def _bench(args: argparse.Namespace) -> None:
    try:
        bench.check_timing_arguments(args)
    except ValueError as err:
        raise _OptionError(str(err)) from None
    for option, value in (("--steps", args.steps), ("--batch", args.batch)):
        if value < 1:
            raise _OptionError(f"{option} must be an integer >= 1, got {value}.")
    layer = load_layer(args.path, args.activation, args.layer).to(args.device)
    batches = bench.random_batches(args.batch, layer.input_size, [args.steps])
    dtype = str(layer.dtype).removeprefix("torch.")
    proj = f", projection {layer.num_proj}" if layer.num_proj else ""
    print(
        f"{args.path}: {type(layer).__name__}, {layer.num_layers} layer(s), {layer.num_units} "
        f"units{proj}, {layer.direction}, input size {layer.input_size}, {dtype}"
    )
    print(
        f"input: T {args.steps}, B {args.batch} (seeded normal, time-major) on {args.device}; "
        f"our engine: {_engine(args.device)}"
    )
    timing = bench.Timing(args.repeats, args.block, args.warmup)
    peers = not args.no_peers
    measured = bench.measure(
        layer,
        batches,
        device=args.device,
        timing=timing,
        training=args.training,
        keras=peers,
        runtimes=peers,
        label=args.path,
    )
    print("\n".join(bench.report(measured)))


def _engine(device: str) -> str:
    """Our engine in words: ``cpu_engine()`` on a CPU; on CUDA the rule's usual pick."""
    if torch.device(device).type == "cpu":
        from cudnn_rnn import cpu_engine

        return cpu_engine()
    return "cudnn for float16/32/64, by the engines' rule"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    path = getattr(args, "path", None) or args.src
    problem = _source_problem(path)
    if problem is not None:
        return _fail(problem)
    try:
        {"inspect": _inspect, "convert": _convert, "bench": _bench}[args.command](args)
    except BrokenPipeError:  # `cudnn-rnn inspect f | head -3`: the reader has all it wants
        return _closed_pipe()
    except (_OutputError, _OptionError) as err:  # one line of ours, ending with what to do
        return _fail(str(err))
    except OSError as err:
        return _fail(_read_problem(err), path)
    except (UsageError, ValueError, TypeError, ImportError) as err:
        return _fail(_one_line(err), path)
    except Exception as err:  # MemoryError, RecursionError, a bug: still one line and exit 2
        return _fail(
            f"{path}: failed with {type(err).__name__} ({_clip(_first_line(err))}); the file is "
            "corrupt or hostile, or this is a bug in cudnn-rnn: please report it.",
            path,
        )
    return 0


def _closed_pipe() -> int:
    """End quietly when the program reading our output closed the pipe, as a Unix tool killed by
    SIGPIPE does (exit status 128 + 13), with nothing on stderr. Standard output goes to
    /dev/null first, so that the interpreter's last flush does not fail on the pipe again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)
    return 128 + 13


def _source_problem(path: str) -> str | None:
    """Why ``path`` cannot be read as a file or a TF1 prefix (one line naming it), or ``None``.

    A FIFO would block the reader and a device never end: they are refused before any open.
    """
    for candidate in (path, path + ".index"):
        try:
            if stat.S_ISREG(os.stat(candidate).st_mode):
                return None
        except (OSError, ValueError):  # missing, or the .index name is one byte too long
            continue
    problem = atomic.path_problem(path)
    if problem is not None:
        return f"{path}: cannot read it: {problem}."
    if os.path.islink(path) and not os.path.exists(path):
        return f"{path}: a symbolic link to a missing {os.readlink(path)}; fix the link."
    if not os.path.exists(path):
        return f"{path}: no such file (a TF1 checkpoint is named by its prefix, without .index)."
    return f"{path}: not a regular file; give a checkpoint or model file, or a TF1 prefix."


def _read_problem(err: OSError) -> str:
    """One line for an ``OSError`` met reading the source: it names the file the error names (the
    source, or a file of it: a TF1 checkpoint's data file)."""
    name = os.fsdecode(err.filename) if isinstance(err.filename, (str, bytes)) else None
    if err.errno is None or name is None:
        return _one_line(err)  # a message of ours
    problem = atomic.path_problem(name)
    if problem is None and err.errno in (errno.EACCES, errno.EPERM):
        problem = f"{name} is not readable (permission denied); ask for read permission on it"
    return f"{name}: cannot read it: {problem or err.strerror or err}."


def _one_line(err: BaseException) -> str:
    """An error's message as one line (a CheckpointError's problem list joined)."""
    parts = [part.strip() for part in str(err).splitlines() if part.strip()]
    return _clip(" ".join([*parts[:1], "; ".join(parts[1:])] if parts[1:] else parts), 400)


def _fail(message: str, path: str | None = None) -> int:
    """Print ``message`` as the one error line (naming ``path``) and return exit code 2."""
    message = message or "failed"
    if path is not None and path not in message:
        message = f"{path}: {message}"
    print(f"cudnn-rnn: error: {message}".replace("\n", " "), file=sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
