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
:mod:`cudnn_rnn.cli.bench`).

``cudnn-rnn info`` says which engines run here; ``cudnn-rnn completion SHELL`` prints a shell
completion script; ``--version`` the version. ``inspect --json`` prints one JSON object.

The parser (this module) imports no torch, so ``--help``, ``--version`` and completion answer at
once; the commands are :mod:`cudnn_rnn.cli.commands`. Exit status: 0 done; 2 bad input or a bad
file; 1 an internal error (a bug of ours: a short report, the traceback with
``CUDNN_RNN_TRACEBACK=1``); 130 interrupted (Ctrl-C: one line, no traceback); 141 the program
reading the output closed it. Long commands (``bench``) say on stderr what they are doing.

Bad arguments and unreadable files end with exit code 2 and one line that says what to do; so does
every path that cannot be read or written (a name too long, a directory that cannot be searched or
written, a symbolic link loop, a file where a directory should be, a full disk): the line names
the path at fault, the output's when the output cannot be written. An output that is not a
regular file (a directory, a FIFO, a device, a socket, or a symbolic link to one) is refused,
never replaced (:func:`cudnn_rnn.io.atomic.check_replaceable`). An option that the reader of the
file does not take (``--merge-layers`` for an ONNX model) is refused naming those it takes.
``inspect`` of a file that holds no RNN says what it read (the format, how many nodes, tensors
or weights, of which kinds: :func:`cudnn_rnn.converters.finder.looked_at`), exit status 0.

What a file names (tensors, RNNs, layers, nodes) is printed quoted and escaped
(:func:`cudnn_rnn.io.files.quote`), and every line printed, to stdout or stderr, is escaped
(:func:`cudnn_rnn.io.files.escape`): a file cannot drive the terminal (escape sequences), forge a
line (newlines) or reorder one (bidi controls).

This module handles the arguments only: which reader takes a file is
:mod:`cudnn_rnn.converters.readers`, how a model is read :mod:`cudnn_rnn.converters.loader`;
what is written, :data:`cudnn_rnn.convert.WRITERS`.
"""

from __future__ import annotations

import argparse
import errno
import os
import stat
import sys
from collections.abc import Sequence

from cudnn_rnn import __version__, convert
from cudnn_rnn.cli.console import _OptionError, _OutputError, end_progress
from cudnn_rnn.cli.timing import add_timing_arguments
from cudnn_rnn.errors import UsageError
from cudnn_rnn.io import atomic, registry
from cudnn_rnn.io.files.escaping import clip, escape, first_line
from cudnn_rnn.io.files.opening import FormatError
from cudnn_rnn.io.tf1 import state as tf1_state

__all__ = ["DESCRIPTION", "EPILOG", "UsageError", "build_parser", "main"]


def _written() -> str:
    """What convert writes, for its help: each format's name and the names that pick it."""
    return "; ".join(f"{w.name} ({w.shown()})" for w in convert.WRITERS.values())


DESCRIPTION = (
    "cudnn-rnn: TensorFlow 1.x's tf.contrib.cudnn_rnn re-created on PyTorch (cuDNN-exact LSTM, "
    "GRU and RNN layers on CPU and GPU). This command inspects and converts RNN checkpoints and "
    f"models ({registry.READ}) and times one against torch.nn and the other runtimes "
    "installed. Exit "
    "status: 0 done, 2 bad input or a bad file (one line says what to do), 1 an internal error "
    "(a bug: please report it), 130 interrupted."
)
EPILOG = "Run 'cudnn-rnn COMMAND --help' for the options of a command."


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cudnn-rnn", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"cudnn-rnn {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    info = sub.add_parser(
        "info",
        help="which engines run here: CPU engine, instruction set, threads, versions",
        description="Print what runs a call here: the CPU engine (ours, with its instruction "
        "set and threads, or torch's kernels and why), CUDA and cuDNN, and the versions of "
        "cudnn-rnn, torch and the optional packages.",
    )
    info.add_argument("--json", action="store_true", help="one JSON object instead of lines")
    completion = sub.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh or tcsh)",
        description="Print the completion script of SHELL: for bash, "
        "'cudnn-rnn completion bash > ~/.local/share/bash-completion/completions/cudnn-rnn'; "
        "for zsh, write it as _cudnn-rnn into a directory of your fpath.",
    )
    completion.add_argument("shell", choices=("bash", "zsh", "tcsh"))
    inspect = sub.add_parser(
        "inspect",
        help="list the tensors of a file and every RNN it holds",
        description="List the tensors (name, shape, dtype) of PATH and every RNN in it, by the "
        "name --model takes, with whether cuDNN's math computes it (and if not, why). The "
        f"format is told by the content: {registry.READ}. Exits 2 when it holds RNNs but none "
        "that cuDNN's math computes.",
    )
    inspect.add_argument("path")
    inspect.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object: the file, its format, its tensors and one object per RNN "
        "with the fields of cudnn_rnn.io.found.FoundRNN",
    )
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
    add_timing_arguments(bench_cmd)
    for p in (convert_cmd, bench_cmd):
        p.add_argument(
            "--model",
            metavar="NAME",
            help="which RNN of the file to take, by the name `inspect` lists (an ONNX node's "
            "path, a state_dict prefix, a Keras layer path, a checkpoint's scope); needed when "
            "the file holds several",
        )
        p.add_argument("--layer", metavar="NAME", help="the older name of --model (Keras .h5)")
        p.add_argument(
            "--forget-bias",
            type=float,
            metavar="VALUE",
            help="TF1 checkpoints of TF's standard LSTM cells: the forget_bias the cells added "
            "at run time, which a checkpoint does not store (default: TF's 1.0)",
        )
        for option, what in (("cell_clip", "cell state"), ("proj_clip", "projected output")):
            p.add_argument(
                "--" + option.replace("_", "-"),
                type=float,
                metavar="VALUE",
                help=f"TF1 checkpoints of TF's standard LSTM cells: the cells' {option} (the "
                f"{what} clipped to [-VALUE, VALUE]), which a checkpoint does not store "
                "(default: TF's, no clip)",
            )
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
            "the plain layers used Keras's default activations, SimpleRNNs this one)",
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; its exit status: 0 done, 2 bad input or a bad file, 1 an internal error
    (a short report), 130 interrupted (Ctrl-C), 141 the reader closed our output."""
    try:
        return _main(argv)
    except BrokenPipeError:  # (the completion script, help text)
        return _closed_pipe()
    except KeyboardInterrupt:
        end_progress()
        print("cudnn-rnn: interrupted", file=sys.stderr)
        return 130
    finally:
        end_progress()


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "completion":
        return _completion(parser, args.shell)
    path = getattr(args, "path", None) or getattr(args, "src", None)
    if path is not None:
        try:  # a TF1 checkpoint directory, or its state file: the latest checkpoint
            path = tf1_state.resolve(path)
        except (OSError, FormatError) as err:
            return _fail(_one_line(err))
        args.__dict__["path" if getattr(args, "path", None) else "src"] = path
        problem = _source_problem(path)
        if problem is not None:
            return _fail(problem)
    try:
        from cudnn_rnn.cli.commands import COMMANDS

        COMMANDS[args.command](args)
    except BrokenPipeError:  # `cudnn-rnn inspect f | head -3`: the reader has all it wants
        return _closed_pipe()
    except (_OutputError, _OptionError) as err:  # one line of ours, ending with what to do
        return _fail(str(err))
    except OSError as err:
        return _fail(_read_problem(err), path)
    except (UsageError, FormatError, ValueError, TypeError, ImportError) as err:
        return _fail(_one_line(err), path)
    except (MemoryError, RecursionError) as err:  # what a hostile file can drive us to
        return _fail(
            f"failed with {type(err).__name__} ({clip(first_line(err))}); the file is corrupt "
            "or hostile.",
            path,
        )
    except Exception as err:  # a bug of ours: a short report, exit 1
        return _internal_error(err, args)
    return 0


#: Set to see the traceback of an internal error.
TRACEBACK_ENV = "CUDNN_RNN_TRACEBACK"


def _internal_error(err: Exception, args: argparse.Namespace) -> int:
    """Report a bug of ours in a few lines (the traceback too where ``CUDNN_RNN_TRACEBACK``
    is set) and return exit status 1."""
    if os.environ.get(TRACEBACK_ENV):
        import traceback

        traceback.print_exception(err, file=sys.stderr)
    lines = [
        f"cudnn-rnn: internal error: {type(err).__name__}: {clip(first_line(err))}",
        f"  while running: cudnn-rnn {args.command} (cudnn-rnn {__version__}, Python "
        f"{sys.version.split()[0]})",
        "  This is a bug in cudnn-rnn, not in your file or command: please report it, with the "
        f"command, 'cudnn-rnn info' and the traceback ({TRACEBACK_ENV}=1 prints it).",
    ]
    for line in lines:
        print(escape(line), file=sys.stderr)
    return 1


def _completion(parser: argparse.ArgumentParser, shell: str) -> int:
    """Print the completion script of ``shell`` (shtab's, from this parser)."""
    try:
        import shtab
    except ImportError:
        return _fail("shell completion needs shtab: pip install shtab")
    print(shtab.complete(parser, shell=shell))  # our own text: printed as it is
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
        if registry.reader_for_name(path) is not None or path.endswith(".index"):
            return f"{path}: no such file; check the path."
        # A name of no format's extension may be a TF1 prefix: neither file is there.
        return f"{path}: no such file, nor a TF1 checkpoint {path}.index; check the path."
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
