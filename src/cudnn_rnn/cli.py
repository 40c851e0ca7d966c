"""The ``cudnn-rnn`` command: inspect, convert and benchmark RNN models and checkpoints.

``cudnn-rnn inspect PATH`` lists tensors (name, shape, dtype) and the model configuration it
detects, for our safetensors checkpoints, TF1 checkpoints (``PREFIX`` or ``PREFIX.index``), ONNX
models, torch state_dicts (``torch.save``) and Keras 2 ``.h5`` files (read only; ``--layer``
picks one RNN layer), each told by its content. ``cudnn-rnn convert SRC DST`` moves one model
between those formats; ``--format`` or DST's extension picks what is written, by the rule and
the table of :func:`cudnn_rnn.convert.writer_for` (``.safetensors``, ``.onnx``, ``.pt``/``.pth``;
no extension, ``.ckpt`` or ``.ckpt-STEP``: a TF1 checkpoint prefix); any other extension is
refused before anything is read or written.
``cudnn-rnn bench MODEL`` times the one model of any of those files against the same weights in
``torch.nn`` and, where installed, onnxruntime, OpenVINO and Keras, and prints a table (see
:mod:`cudnn_rnn.bench`).

Bad arguments and unreadable files end with exit code 2 and one line that says what to do; so does
every path that cannot be read or written (a name too long, a directory that cannot be searched or
written, a symbolic link loop, a file where a directory should be, a full disk): the line names
the path at fault, the output's when the output cannot be written.

What a file names (tensors, RNNs, layers, nodes) is printed quoted and escaped
(:func:`cudnn_rnn.files.quote`), and every line printed, to stdout or stderr, is escaped
(:func:`cudnn_rnn.files.escape`): a file cannot drive the terminal (escape sequences), forge a
line (newlines) or reorder one (bidi controls).

This module handles the arguments only: which reader takes a file, and how a model is read, is
:mod:`cudnn_rnn.model_files`; what is written, :data:`cudnn_rnn.convert.WRITERS`.
"""

from __future__ import annotations

import argparse
import errno
import os
import stat
import sys
from collections.abc import Sequence
from typing import Any

import torch

from cudnn_rnn import atomic, bench, convert, files, model_files
from cudnn_rnn.files import clip, escape, first_line, quote
from cudnn_rnn.layers import _CudnnRNN
from cudnn_rnn.model_files import UsageError

__all__ = ["DESCRIPTION", "EPILOG", "UsageError", "build_parser", "main"]


class _OutputError(UsageError):
    """The output cannot be written: its line names the output, not the source."""


class _OptionError(UsageError):
    """An option's value is wrong: its line names the option, not the source."""


def _say(line: str) -> None:
    """Print one line of output, escaped: nothing in it can drive the terminal or break it."""
    print(escape(line))


def _inspect(args: argparse.Namespace) -> None:
    shapes = model_files.tensor_shapes(args.path, model_files.reader_of(args.path))
    rnns = model_files.find_rnns(args.path, args.activation, **_keras_options(args))
    _say(f"{args.path}: {model_files.reader_of(args.path)} file, {len(shapes)} tensor(s)")
    names = {name: quote(name, None) for name in shapes}
    width = max(map(len, names.values()), default=0)
    for name, (shape, dtype) in sorted(shapes.items()):
        _say(f"  {names[name]:<{width}}  {list(shape)!s:<14} {dtype}")
    computable = sum(r.computable for r in rnns)
    _say(f"found {len(rnns)} RNN(s), {computable} computable by cuDNN's math (--model NAME):")
    if not rnns:
        for line in _nothing_found(args.path, shapes):
            _say(f"  {line}")
    for rnn in rnns:
        _say(f"  {rnn.describe()}")
    skipped = model_files.unread_groups(args.path)
    if skipped:
        _say(f"names not understood as a model ({len(skipped)}):")
        for line in skipped[:20]:
            _say(f"  {line}")
    if rnns and not computable:  # nothing in it can be converted: say why, as a failure
        raise model_files.UsageError(
            f"{args.path}: holds no RNN that cuDNN's math computes: "
            + "; ".join(r.describe() for r in rnns)
        )


def _nothing_found(path: str, shapes: dict[str, tuple[tuple[int, ...], str]]) -> list[str]:
    """What to tell a user whose file holds no RNN we read: where its RNN may still be."""
    from cudnn_rnn.formats.torch_state import find_groups

    kind = files.sniff(path)
    groups = [g for g in find_groups(shapes) if g.torch_class and not g.problems]
    if kind == files.ONNX and groups:
        names = ", ".join(g.describe() for g in groups[:3])
        return [
            f"no LSTM, GRU or RNN operator; the initializers are named like {names}, which the "
            "graph computes with other operators (not read as an RNN).",
            "to load those weights: save them as a state_dict (torch.save) and read it with "
            "cudnn-rnn convert or convert.from_torch(path, prefix=...).",
        ]
    if kind == files.NPZ:
        return [
            "no tensors named like a torch.nn RNN. An .npz of canonical weights "
            "(np.savez(path, *weights, *biases), the order of params_to_canonical) loads with "
            "convert.from_numpy_canonical; other arrays can be given to it as a list in that "
            "order (docs/migration.md).",
        ]
    return ["no RNN operator, layer or tensors named like one (see 'cudnn-rnn inspect --help')."]


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
    _say(
        f"{args.src} -> {args.dst} ({writer.what}): {type(layer).__name__} "
        f"{layer.num_layers} layer(s), {layer.num_units} units, {layer.direction}"
    )


def _written() -> str:
    """What convert writes, for its help: each format's name and the names that pick it."""
    return "; ".join(f"{w.name} ({w.shown()})" for w in convert.WRITERS.values())


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
        help="list the tensors of a file and every RNN it holds",
        description="List the tensors (name, shape, dtype) of PATH and every RNN in it, by the "
        "name --model takes, with whether cuDNN's math computes it (and if not, why): our "
        ".safetensors, a TF1 checkpoint (PREFIX or PREFIX.index), .onnx (RNN nodes at any "
        "depth of a whole network), a torch state_dict (torch.save), a TorchScript archive, "
        ".npz of torch names, or a Keras 2 .h5 model or weights file (its RNN layers). Exits 2 "
        "when it holds RNNs but none that cuDNN's math computes.",
    )
    inspect.add_argument("path")
    convert_cmd = sub.add_parser(
        "convert",
        help="convert one model between safetensors, TF1, ONNX, torch",
        description="Convert one RNN of SRC (the only one, or --model NAME) to DST, in the "
        f"format DST's extension picks (in any case): {_written()}. A TF1 checkpoint is "
        "written as PREFIX.index and PREFIX.data-00000-of-00001. Any other extension is "
        "refused (exit 2) before anything is read or written, unless --format says what to "
        "write.",
    )
    convert_cmd.add_argument("src")
    convert_cmd.add_argument("dst")
    convert_cmd.add_argument(
        "--format",
        choices=tuple(convert.WRITERS),
        help="what to write, whatever DST's extension (one of another format is still refused)",
    )
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
            "--model",
            metavar="NAME",
            help="which RNN of the file to take, by the name `inspect` lists (an ONNX node's "
            "path, a state_dict prefix, a Keras layer path, a checkpoint's scope); needed when "
            "the file holds several",
        )
        p.add_argument("--layer", metavar="NAME", help="the older name of --model (Keras .h5)")
    for p in (inspect, convert_cmd, bench_cmd):
        p.add_argument(
            "--keras-version",
            metavar="VERSION",
            help="Keras .h5 weights-only files written before Keras 2.3 (hard_sigmoid was the "
            "default): repeat the file's keras_version to confirm its LSTM/GRU used sigmoid",
        )
        p.add_argument(
            "--merge-layers",
            action="store_true",
            help="Keras .h5: consecutive compatible RNN layers become one multi-layer model",
        )
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
    layer = _load(args.path, args).to(args.device)
    batches = bench.random_batches(args.batch, layer.input_size, [args.steps])
    dtype = str(layer.dtype).removeprefix("torch.")
    proj = f", projection {layer.num_proj}" if layer.num_proj else ""
    _say(
        f"{args.path}: {type(layer).__name__}, {layer.num_layers} layer(s), {layer.num_units} "
        f"units{proj}, {layer.direction}, input size {layer.input_size}, {dtype}"
    )
    _say(
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
    for line in bench.report(measured):
        _say(line)


def _keras_options(args: argparse.Namespace) -> dict[str, Any]:
    """The Keras .h5 reader's options given on the command line."""
    options: dict[str, Any] = {}
    if args.keras_version is not None:
        options["confirm_keras_version"] = args.keras_version
    if args.merge_layers:
        options["merge_layers"] = True
    return options


def _load(path: str, args: argparse.Namespace) -> _CudnnRNN:
    return model_files.load_layer(
        path,
        args.activation,
        args.layer,
        model=args.model,
        note=lambda text: _say(f"note: {text}"),
        **_keras_options(args),
    )


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
            f"{path}: failed with {type(err).__name__} ({clip(first_line(err))}); the file is "
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
    return clip(" ".join([*parts[:1], "; ".join(parts[1:])] if parts[1:] else parts), 400)


def _fail(message: str, path: str | None = None) -> int:
    """Print ``message`` as the one error line (naming ``path``), escaped (a newline in it is
    ``\\n``, never a line of its own), and return exit code 2."""
    message = message or "failed"
    if path is not None and path not in message:
        message = f"{path}: {message}"
    print(f"cudnn-rnn: error: {escape(message)}", file=sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
