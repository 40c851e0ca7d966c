"""The ``cudnn-rnn`` command: demo, inspect, convert and benchmark RNN models and checkpoints.

``cudnn-rnn inspect PATH`` lists tensors (name, shape, dtype) and the model configuration it
detects, for our safetensors checkpoints, TF1 checkpoints (``PREFIX`` or ``PREFIX.index``), ONNX
models and torch state_dicts (``.pt``/``.pth``). ``cudnn-rnn convert SRC DST`` moves one model
between those formats; the destination's format follows its extension (``.safetensors``,
``.onnx``, ``.pt``/``.pth``), anything else is written as a TF1 checkpoint prefix.
``cudnn-rnn demo`` trains a character language model on ``CudnnLSTM`` and checks its checkpoint
in compatible cells and ``torch.nn.LSTM`` (see :mod:`cudnn_rnn.demo`). ``cudnn-rnn bench`` runs
the benchmark suite against ``torch.nn``, onnxruntime, OpenVINO and Keras and writes
``benchmarks.md``, ``.json`` and ``.png`` (see :mod:`cudnn_rnn.bench`).

Bad arguments and unreadable files end with exit code 2 and one line that says what to do.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from cudnn_rnn import checkpoint, convert, demo
from cudnn_rnn.layers import LAYER_CLASSES, _CudnnRNN

_NAME = re.compile(
    r"^(?:(?P<scope>.+)/)?(?P<stack>rnn/multi_rnn_cell|stack_bidirectional_rnn)/cell_(?P<layer>\d+)/"
    r"(?:bidirectional_rnn/(?P<dir>fw|bw)/)?"
    r"(?P<cell>cudnn_compatible_lstm_cell|cudnn_compatible_gru_cell|basic_rnn_cell)/(?P<var>.+)$"
)
_CELL_MODES = {
    "cudnn_compatible_lstm_cell": "lstm",
    "cudnn_compatible_gru_cell": "gru",
    "basic_rnn_cell": "rnn_tanh",
}
_TORCH_SUFFIXES = (".pt", ".pth")


class UsageError(Exception):
    """A problem the user can fix; printed as one line, exit code 2."""


def detect_models(shapes: dict[str, tuple[int, ...]]) -> list[dict[str, Any]]:
    """Model configurations implied by TF canonical names and shapes (one per scope and stack).

    ``basic_rnn_cell`` does not record tanh or relu; such models are reported as ``rnn_tanh``
    with ``"activation_known": False``.
    """
    groups: dict[tuple[str, str, str], dict[str, tuple[int, ...]]] = {}
    for name, shape in shapes.items():
        m = _NAME.match(name)
        if m is None:
            continue
        key = (m["scope"] or "", m["stack"], m["cell"])
        groups.setdefault(key, {})[name] = shape
    models = []
    for (scope, stack, cell), members in sorted(groups.items()):
        parsed = [(_NAME.match(n), s) for n, s in members.items()]
        first = {m["var"]: s for m, s in parsed if m and m["layer"] == "0" and m["dir"] != "bw"}
        mode = _CELL_MODES[cell]
        if mode == "gru":
            units = first["candidate/input_projection/bias"][0]
            input_size = first["candidate/input_projection/kernel"][0]
            proj = None
        else:
            units = first["bias"][0] // (4 if mode == "lstm" else 1)
            proj = first["projection/kernel"][1] if "projection/kernel" in first else None
            input_size = first["kernel"][0] - (proj or units)
        models.append(
            {
                "rnn_mode": mode,
                "scope": scope or None,
                "num_layers": 1 + max(int(m["layer"]) for m, _ in parsed if m),
                "num_units": units,
                "input_size": input_size,
                "num_proj": proj,
                "direction": "bidirectional"
                if stack == "stack_bidirectional_rnn"
                else "unidirectional",
                **({"activation_known": False} if cell == "basic_rnn_cell" else {}),
            }
        )
    return models


def _kind(path: str) -> str:
    if checkpoint.is_tf_checkpoint(path):
        return "tf"
    suffix = Path(path).suffix
    if suffix == ".onnx":
        return "onnx"
    if suffix in _TORCH_SUFFIXES:
        return "torch"
    return "safetensors"


def _tensor_shapes(path: str, kind: str) -> dict[str, tuple[tuple[int, ...], str]]:
    if kind == "tf":
        from cudnn_rnn.formats import tf1_bundle

        return {n: (e.shape, e.dtype) for n, e in tf1_bundle.read_bundle_index(path).items()}
    if kind == "safetensors":
        tensors, _ = checkpoint.load_file(path)
    elif kind == "torch":
        tensors = _torch_state(path)
    else:
        import onnx

        model = onnx.load(path)
        from onnx import numpy_helper

        tensors = {
            i.name: torch.from_numpy(numpy_helper.to_array(i).copy())
            for i in model.graph.initializer
        }
    return {n: (tuple(t.shape), str(t.dtype).replace("torch.", "")) for n, t in tensors.items()}


def _torch_state(path: str) -> dict[str, torch.Tensor]:
    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise UsageError(f"{path}: not a torch state_dict (a dict of tensors).")
    return state


def load_layer(path: str, activation: str | None = None) -> _CudnnRNN:
    """One model from any supported file, as our layer."""
    kind = _kind(path)
    if kind == "onnx":
        return convert.from_onnx(path)  # type: ignore[no-any-return]
    if kind == "torch":
        return convert.from_torch(_torch_module(_torch_state(path), path, activation))  # type: ignore[no-any-return]
    models = (checkpoint.describe(path) if kind == "safetensors" else []) or detect_models(
        {n: s for n, (s, _) in _tensor_shapes(path, kind).items()}
    )
    if len(models) != 1:
        raise UsageError(f"{path}: holds {len(models)} models; convert needs exactly one.")
    config = models[0]
    mode = config["rnn_mode"]
    if config.get("activation_known") is False:
        if activation is None:
            raise UsageError(
                f"{path}: basic_rnn_cell does not say tanh or relu; pass "
                "--activation tanh or --activation relu."
            )
        mode = f"rnn_{activation}"
    kwargs: dict[str, Any] = {"num_proj": config["num_proj"]} if config.get("num_proj") else {}
    layer = LAYER_CLASSES[mode](
        config["num_layers"],
        config["num_units"],
        direction=config["direction"],
        input_size=config["input_size"],
        scope=config.get("scope"),
        **kwargs,
    )
    checkpoint.restore(path, layer)
    return layer


def _torch_module(
    state: dict[str, torch.Tensor], path: str, activation: str | None
) -> torch.nn.RNNBase:
    try:
        w_ih, w_hh = state["weight_ih_l0"], state["weight_hh_l0"]
    except KeyError as err:
        raise UsageError(
            f"{path}: no weight_ih_l0/weight_hh_l0; expected the state_dict of a "
            "torch.nn.LSTM, GRU or RNN."
        ) from err
    layers = 1 + max(int(k.split("_l")[1].split("_")[0]) for k in state if "_l" in k)
    proj = state["weight_hr_l0"].shape[0] if "weight_hr_l0" in state else 0
    units = state["weight_hr_l0"].shape[1] if proj else w_hh.shape[1]
    gates = w_ih.shape[0] // units
    common = dict(
        input_size=w_ih.shape[1],
        hidden_size=units,
        num_layers=layers,
        bias="bias_ih_l0" in state,
        bidirectional="weight_ih_l0_reverse" in state,
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
        torch.save(convert.to_torch(layer).state_dict(), dst)
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
    if kind in ("onnx", "torch"):
        layer = load_layer(args.path, args.activation)
        models = [{"rnn_mode": layer.rnn_mode, **layer.get_config()}]
    else:
        models = (checkpoint.describe(args.path) if kind == "safetensors" else []) or detect_models(
            {n: s for n, (s, _) in shapes.items()}
        )
    print(f"detected {len(models)} model(s):")
    for model in models:
        print("  " + ", ".join(f"{k}={v}" for k, v in model.items()))


def _convert(args: argparse.Namespace) -> None:
    layer = load_layer(args.src, args.activation)
    written = save_layer(layer, args.dst)
    print(
        f"{args.src} -> {args.dst} ({written}): {type(layer).__name__} "
        f"{layer.num_layers} layer(s), {layer.num_units} units, {layer.direction}"
    )


DESCRIPTION = (
    "cudnn-rnn: TensorFlow 1.x's tf.contrib.cudnn_rnn re-created on PyTorch (cuDNN-exact LSTM, "
    "GRU and RNN layers on CPU and GPU). This command trains and verifies a demo model, inspects "
    "and converts RNN checkpoints and models (our safetensors, TF1 checkpoints without "
    "TensorFlow, ONNX, torch state_dicts) and benchmarks the library against its peers."
)
EPILOG = "Run 'cudnn-rnn COMMAND --help' for the options of a command."


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cudnn-rnn", description=DESCRIPTION, epilog=EPILOG)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    demo_cmd = sub.add_parser(
        "demo",
        help="train, save, restore and verify a CudnnLSTM character model",
        description=demo.DESCRIPTION,
        epilog=demo.EPILOG,
    )
    demo.add_arguments(demo_cmd)
    inspect = sub.add_parser(
        "inspect",
        help="list the tensors and the detected model(s) of a file",
        description="List the tensors (name, shape, dtype) of PATH and the model(s) they "
        "describe: our .safetensors, a TF1 checkpoint (PREFIX or PREFIX.index), .onnx, or a "
        "torch state_dict (.pt/.pth).",
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
    for p in (inspect, convert_cmd):
        p.add_argument(
            "--activation",
            choices=("tanh", "relu"),
            help="for plain RNNs, whose files do not record it",
        )
    from cudnn_rnn import bench  # its options; the suite itself runs only in _bench

    bench_cmd = sub.add_parser(
        "bench",
        help="benchmark against torch.nn, onnxruntime, OpenVINO and Keras",
        description=(bench.__doc__ or "").split("\n\n")[0].replace("``", ""),
        epilog="Writes benchmarks.md, benchmarks.json and benchmarks.png into --out (make bench: "
        "docs/). --quick runs tiny shapes: a check of the suite, not a measurement.",
    )
    bench.build_parser(bench_cmd)
    return parser


def _demo(args: argparse.Namespace) -> int:
    try:
        config = demo.config_from_args(args)
    except ValueError as err:
        print(f"cudnn-rnn: error: {err}".splitlines()[0], file=sys.stderr)
        return 2
    try:
        return demo.run(config)
    except OSError as err:  # e.g. the disk filled up under --out
        print(f"cudnn-rnn: error: {err}".splitlines()[0], file=sys.stderr)
        return 2


def _bench(args: argparse.Namespace) -> int:
    from cudnn_rnn import bench

    return bench.run_checked(args, prog="cudnn-rnn")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        return _demo(args)
    if args.command == "bench":
        return _bench(args)
    path = getattr(args, "path", None) or args.src
    if not (Path(path).exists() or Path(path + ".index").exists()):
        print(
            f"cudnn-rnn: error: {path}: no such file (a TF1 checkpoint is named by its "
            "prefix, without .index).",
            file=sys.stderr,
        )
        return 2
    try:
        {"inspect": _inspect, "convert": _convert}[args.command](args)
    except (UsageError, ValueError, TypeError, ImportError, OSError) as err:
        print(f"cudnn-rnn: error: {err}".splitlines()[0], file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
