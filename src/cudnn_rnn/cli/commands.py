"""The ``cudnn-rnn`` command's commands: what runs once :mod:`cudnn_rnn.cli` has parsed the
arguments. Apart from the light front so that ``--help``, ``--version`` and completion do not
import torch (this module imports it, and the readers).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Callable
from typing import Any

import torch

from cudnn_rnn import convert
from cudnn_rnn.cli import bench
from cudnn_rnn.cli.console import _OptionError, _OutputError, progress, say
from cudnn_rnn.converters.finder import Looked, find_rnns, looked_at, unread_groups
from cudnn_rnn.converters.loader import load_layer
from cudnn_rnn.converters.options import CLI, check_options
from cudnn_rnn.converters.readers import kind_of, reader_of, tensor_shapes
from cudnn_rnn.errors import UsageError
from cudnn_rnn.io import atomic
from cudnn_rnn.io.files.escaping import quote
from cudnn_rnn.io.files.sniffing import NPZ, ONNX
from cudnn_rnn.io.found import FoundRNN
from cudnn_rnn.io.once import one_operation
from cudnn_rnn.layers import _CudnnRNN

__all__ = ["COMMANDS"]


def _inspect(args: argparse.Namespace) -> None:
    options = _keras_options(args)
    given = {"activation": args.activation, **options}
    check_options(args.path, given, spelling=CLI)  # in its words
    shapes = tensor_shapes(args.path, reader_of(args.path))
    rnns = find_rnns(args.path, args.activation, **options)
    # Where nothing is found, what was looked at: the user can tell it was the right place.
    looked = None if rnns else looked_at(args.path, shapes)
    if args.json:
        _inspect_json(args.path, shapes, rnns, looked)
        return
    say(f"{args.path}: {reader_of(args.path)} file, {len(shapes)} tensor(s)")
    names = {name: quote(name, None) for name in shapes}
    width = max(map(len, names.values()), default=0)
    for name, (shape, dtype) in sorted(shapes.items()):
        say(f"  {names[name]:<{width}}  {list(shape)!s:<14} {dtype}")
    computable = sum(r.computable for r in rnns)
    say(f"found {len(rnns)} RNN(s), {computable} computable (--model NAME):")
    if looked is not None:
        say(f"  {looked.line()}")
        for line in _nothing_found(args.path, shapes):
            say(f"  {line}")
    for rnn in rnns:
        say(f"  {rnn.describe()}")
    skipped = unread_groups(args.path)
    if skipped:
        say(f"names not understood as a model ({len(skipped)}):")
        for line in skipped[:20]:
            say(f"  {line}")
    if rnns and not computable:  # nothing in it can be converted: say why, as a failure
        raise UsageError(
            f"{args.path}: holds no RNN that we compute: " + "; ".join(r.describe() for r in rnns)
        )


def _inspect_json(
    path: str,
    shapes: dict[str, tuple[tuple[int, ...], str]],
    rnns: list[FoundRNN],
    looked: Looked | None,
) -> None:
    """``inspect --json``: one JSON object (ASCII: whatever a file names is escaped by JSON).
    ``looked_at`` is what was read where no RNN was found (:class:`Looked`'s
    fields), else null."""
    document = {
        "path": path,
        "format": reader_of(path),
        "kind": kind_of(path),
        "tensors": [
            {"name": name, "shape": list(shape), "dtype": dtype}
            for name, (shape, dtype) in sorted(shapes.items())
        ],
        "rnns": [_record(r) for r in rnns],
        "looked_at": None if looked is None else dataclasses.asdict(looked),
    }
    print(json.dumps(document, indent=2, ensure_ascii=True, default=str))


def _record(found: FoundRNN) -> dict[str, Any]:
    """A FoundRNN's fields as JSON values (its details too, where JSON can say them)."""
    record = dataclasses.asdict(found)
    record["reasons"] = list(found.reasons)
    return record


#: What ``info`` says computes the variants (cudnn_rnn.core.variant), on every device.
VARIANT_ENGINE = (
    "native on CPU in float32 without a projection (every variant: activations, clips, "
    "peepholes, coupled gates, the GRU's reset before the product, time directions, merges, "
    "separate stacks); variant (torch operators, the backward by autograd) on CUDA, in other "
    "dtypes and with a projection"
)


def _info(args: argparse.Namespace) -> None:
    """``info``: what runs a call here, and the versions."""
    import importlib.metadata
    import platform

    from cudnn_rnn import __version__, cpu_engine
    from cudnn_rnn.engines import native
    from cudnn_rnn.nn import _step_node

    cuda = torch.cuda.is_available()
    versions: dict[str, str | None] = {"cudnn-rnn": __version__, "torch": torch.__version__}
    for package in ("numpy", "safetensors", "onnx", "onnxruntime", "h5py", "keras", "openvino"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    document = {
        "cpu_engine": cpu_engine(),
        "variant_engine": VARIANT_ENGINE,
        "native_library": native.library_path(),
        "cell_step": _step_node.describe(),
        "threads": torch.get_num_threads(),
        "cuda": torch.version.cuda if cuda else None,
        "cuda_devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        if cuda
        else [],
        "cudnn": torch.backends.cudnn.version() if cuda else None,  # type: ignore[no-untyped-call]
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
    }
    if args.json:
        print(json.dumps(document, indent=2))
        return
    say(f"cudnn-rnn {__version__} on Python {document['python']}, {document['platform']}")
    say(f"CPU engine: {document['cpu_engine']}")
    say(f"  library: {document['native_library'] or 'not built'}")
    say(f"  cells' step: {document['cell_step']}")
    say(f"variants: {VARIANT_ENGINE}")
    if cuda:
        devices = ", ".join(document["cuda_devices"])  # type: ignore[arg-type]
        say(f"CUDA {document['cuda']}, cuDNN {document['cudnn']}: {devices} (engine: cudnn)")
    else:
        say("CUDA: not available (torch " + torch.__version__ + ")")
    say("packages: " + ", ".join(f"{k} {v or '(not installed)'}" for k, v in versions.items()))


def _nothing_found(path: str, shapes: dict[str, tuple[tuple[int, ...], str]]) -> list[str]:
    """What to tell a user whose file holds no RNN we read, beyond what was looked at: where
    its RNN may still be."""
    from cudnn_rnn.io.torch.state import find_groups

    kind = kind_of(path)
    groups = [g for g in find_groups(shapes) if g.torch_class and not g.problems]
    if kind == ONNX and groups:
        names = ", ".join(g.describe() for g in groups[:3])
        return [
            f"no LSTM, GRU or RNN operator; the initializers are named like {names}, which the "
            "graph computes with other operators (not read as an RNN).",
            "to load those weights: save them as a state_dict (torch.save) and read it with "
            "cudnn-rnn convert or convert.from_torch(path, prefix=...).",
        ]
    if kind == NPZ:
        return [
            "no tensors named like a torch.nn RNN. An .npz of canonical weights "
            "(np.savez(path, *weights, *biases), the order of params_to_canonical) loads with "
            "convert.from_numpy_canonical; other arrays can be given to it as a list in that "
            "order (docs/migration.md).",
        ]
    return []  # what was looked at says it


def _convert(args: argparse.Namespace) -> None:
    dst: str = args.dst
    if dst.endswith(tuple(sep for sep in (os.sep, os.altsep) if sep)):
        raise _OutputError(
            f"{dst}: names a directory, not a file; give the output's file name (for example "
            f"{dst}model.safetensors)."
        )
    try:  # before the source is read: a name that picks no format writes nothing
        writer = convert.writer_for(dst, args.format, option="--format ")
    except ValueError as err:
        raise _OutputError(str(err)) from None
    layer = _load(args.src, args)
    try:
        writer.write(layer, dst)
    except OSError as err:  # anything the writers meet on the way to dst
        raise _OutputError(f"{dst}: cannot write it: {atomic.write_problem(dst, err)}.") from err
    say(
        f"{args.src} -> {args.dst} ({writer.what}): {type(layer).__name__} "
        f"{layer.num_layers} layer(s), {layer.num_units} units, {layer.direction}"
    )


def _bench(args: argparse.Namespace) -> None:
    try:
        bench.check_timing_arguments(args)
    except ValueError as err:
        raise _OptionError(str(err)) from None
    for option, value in (("--steps", args.steps), ("--batch", args.batch)):
        if value < 1:
            raise _OptionError(f"{option} must be an integer >= 1, got {value}.")
    layer = _load(args.path, args).to(args.device)
    batches = bench.random_batches(args.batch, layer.input_size, [args.steps])
    dtype = str(layer.dtype).removeprefix("torch.")
    proj = f", projection {layer.num_proj}" if layer.num_proj else ""
    say(
        f"{args.path}: {type(layer).__name__}, {layer.num_layers} layer(s), {layer.num_units} "
        f"units{proj}, {layer.direction}, input size {layer.input_size}, {dtype}"
    )
    say(
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
        progress=progress,
    )
    for line in bench.report(measured):
        say(line)


def _keras_options(args: argparse.Namespace) -> dict[str, Any]:
    """The Keras .h5 reader's options given on the command line."""
    options: dict[str, Any] = {}
    if args.keras_version is not None:
        options["confirm_keras_version"] = args.keras_version
    if args.merge_layers:
        options["merge_layers"] = True
    return options


def _load(path: str, args: argparse.Namespace) -> _CudnnRNN:
    return load_layer(
        path,
        args.activation,
        args.layer,
        model=args.model,
        note=lambda text: say(f"note: {text}"),
        forget_bias=args.forget_bias,
        cell_clip=args.cell_clip,
        proj_clip=args.proj_clip,
        **_keras_options(args),
    )


def _engine(device: str) -> str:
    """Our engine in words: ``cpu_engine()`` on a CPU; on CUDA the rule's usual pick."""
    if torch.device(device).type == "cpu":
        from cudnn_rnn import cpu_engine

        return cpu_engine()
    return "cudnn for float16/32/64, by the engines' rule"


def _one_operation(command: Callable[[argparse.Namespace], None]) -> Callable[..., None]:
    """``command`` opening and parsing each file once (:func:`one_operation`)."""

    def run(args: argparse.Namespace) -> None:
        with one_operation():
            command(args)

    return run


#: Command name -> what runs it.
COMMANDS = {
    name: _one_operation(command)
    for name, command in (
        ("inspect", _inspect), ("convert", _convert), ("bench", _bench), ("info", _info)
    )
}  # fmt: skip
