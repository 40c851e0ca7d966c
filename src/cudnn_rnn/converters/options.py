"""The options each reader takes, and the refusal of any other: an option no reader of the file
takes (a typo, another format's) is refused by :func:`check_options` with
:class:`OptionError`, never ignored, so that a caller learns at once that it asked for nothing.

One table, :data:`_OPTIONS` (a row per format of :data:`cudnn_rnn.io.registry.FORMATS`), says
what :func:`cudnn_rnn.load`, :func:`cudnn_rnn.find_rnns` and the command accept for a file;
:data:`_FLAGS` how the command spells them. Messages are worded for their reader
(:class:`Spelling`: keyword arguments, or the command's options).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cudnn_rnn.converters.readers import _TITLES, reader_of
from cudnn_rnn.errors import UsageError
from cudnn_rnn.io.files.escaping import quote

__all__ = ["CLI", "PYTHON", "OptionError", "Spelling", "check_options"]


class OptionError(UsageError, TypeError):
    """An option that no reader of the file takes (a typo, ``forgetbias=0.0``; ``cell_clip=``
    on a torch file; ``merge_layers=`` on an ONNX model): a ``TypeError``, as Python's own
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

#: Each format of the registry -> the options its reader takes, besides ``name`` and ``note``:
#: what :func:`cudnn_rnn.load` and :func:`cudnn_rnn.find_rnns` accept for its files (the same
#: for both; listing ignores those that change only values), and, through :data:`_FLAGS`, the
#: command's. Any other option given is refused (:func:`check_options`), never ignored.
_OPTIONS: dict[str, tuple[str, ...]] = {
    # Our checkpoints' BasicRNNCell models, and a torch state_dict's plain RNNs, do not record
    # tanh or relu.
    "safetensors": ("activation",),
    # TF's standard cells: none is stored (the activation: any of ours for those cells, tanh or
    # relu for a cuDNN model's BasicRNNCell names).
    "tf1": ("activation", "forget_bias", "cell_clip", "proj_clip"),
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
    "cell_clip": "--cell-clip",
    "proj_clip": "--proj-clip",
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


def _keras_h5_options(activation: str | None) -> dict[str, Any]:
    """``activation`` for a Keras .h5 file: given, it says the plain layers of a weights-only
    file used Keras's default activations (of the file's version), its SimpleRNNs this one."""
    return {
        "assume_cudnn_activations": activation is not None,
        "simple_rnn_activation": activation or "tanh",
    }
