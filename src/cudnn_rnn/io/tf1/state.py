"""A TF1 checkpoint directory, or its ``checkpoint`` state file, as the latest checkpoint.

TF's ``tf.train.Saver`` writes, beside the bundles it saves (``PREFIX.index`` +
``PREFIX.data-*``), a small text file named ``checkpoint``: a ``CheckpointState`` protobuf in
text format, whose ``model_checkpoint_path`` names the latest bundle's prefix (relative to the
directory, or absolute). ``tf.train.latest_checkpoint(directory)`` reads it, and a TF user hands
the directory, or that file, to anything that reads a checkpoint. :func:`resolve` is that rule
for every entry point (``cudnn_rnn.find_rnns``, ``cudnn_rnn.load``, ``checkpoint.restore``,
the ``cudnn-rnn`` command): a directory means the prefix its ``checkpoint`` file names, and so
does the file itself (told by its content: a text ``CheckpointState``, whatever its name); any
other path is returned as it is. A directory without the file, a file that names no latest
checkpoint, or one that names a prefix whose ``.index`` does not exist is refused with
:class:`CheckpointStateError`, saying which and what to pass instead.

Standard library only (the command's front resolves a path before it imports torch).

>>> import os, tempfile
>>> folder = tempfile.mkdtemp()
>>> for name in ("model.ckpt-200.index", "model.ckpt-200.data-00000-of-00001"):
...     open(os.path.join(folder, name), "wb").close()
>>> with open(os.path.join(folder, "checkpoint"), "w") as f:
...     _ = f.write('model_checkpoint_path: "model.ckpt-200"\\n'
...                 'all_model_checkpoint_paths: "model.ckpt-200"\\n')
>>> resolve(folder) == os.path.join(folder, "model.ckpt-200")
True
>>> resolve(os.path.join(folder, "checkpoint")) == resolve(folder)
True
"""

from __future__ import annotations

import codecs
import os
import re
import stat

from cudnn_rnn.io.files.escaping import quote
from cudnn_rnn.io.files.opening import FormatError, open_regular

__all__ = ["STATE_FILE", "CheckpointStateError", "is_state_file", "latest_checkpoint", "resolve"]

#: The name of the state file ``tf.train.Saver`` writes in a checkpoint directory.
STATE_FILE = "checkpoint"
#: A state file lists a few prefixes and timestamps; anything larger is no state file.
_MAX_SIZE = 1 << 20
#: The fields of TF's ``CheckpointState`` (tensorflow/python/training/checkpoint_state.proto).
_FIELDS = (
    "model_checkpoint_path",
    "all_model_checkpoint_paths",
    "all_model_checkpoint_timestamps",
    "last_preserved_timestamp",
)
_COMMENT = re.compile(r"#[^\n]*")
_FIELD = re.compile(
    r"\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*:\s*"
    r"(?P<value>\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'|[^\s\"']+)\s*"
)


class CheckpointStateError(FormatError):
    """A TF1 checkpoint directory or ``checkpoint`` state file that names no readable latest
    checkpoint (see the module); a ``ValueError`` as every format error."""


def _starts_like_state(text: str) -> bool:
    match = _FIELD.match(_COMMENT.sub("", text))
    return match is not None and match["name"] in _FIELDS


def is_state_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a regular file whose content is a text-format ``CheckpointState``
    (its first field one of the proto's); a TF1 prefix (``PATH.index`` exists) is not one."""
    name = os.fspath(path)
    try:
        info = os.stat(name)
    except (OSError, ValueError):
        return False
    if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_SIZE or _is_prefix(name):
        return False
    try:
        with open_regular(name, max_size=_MAX_SIZE) as f:
            head = f.read(4096)
    except (OSError, FormatError):
        return False
    return _starts_like_state(head.decode("utf-8", "replace"))


def _is_prefix(path: str) -> bool:
    try:
        return os.path.isfile(path + ".index")
    except (OSError, ValueError):
        return False


def latest_checkpoint(state_file: str | os.PathLike[str]) -> str:
    """The prefix the ``checkpoint`` state file ``state_file`` names as the latest checkpoint
    (its ``model_checkpoint_path``, relative to the file's directory unless absolute), checked
    to exist (its ``PREFIX.index``); :class:`CheckpointStateError` where it names none or one
    that does not exist."""
    name = os.fspath(state_file)
    with open_regular(name, max_size=_MAX_SIZE) as f:
        text = f.read().decode("utf-8", "surrogateescape")
    fields = _parse(name, text)
    named = fields.get("model_checkpoint_path")
    if not named:
        raise CheckpointStateError(
            f"{name}: a TF1 checkpoint state file that names no latest checkpoint (no "
            "model_checkpoint_path); pass the checkpoint's PREFIX (the name of its .index "
            "file without .index)."
        )
    directory = os.path.dirname(name)
    prefix = named if os.path.isabs(named) else os.path.join(directory, named)
    if not _is_prefix(prefix):
        raise CheckpointStateError(
            f"{name}: names {quote(named)} as the latest checkpoint, but "
            f"{quote(prefix + '.index')} does not exist; pass the PREFIX of a checkpoint "
            "that is there, or restore the missing files."
        )
    return prefix


def _parse(name: str, text: str) -> dict[str, str]:
    """The string fields of a text-format ``CheckpointState`` (the last of a repeated one)."""
    body = _COMMENT.sub("", text)
    fields: dict[str, str] = {}
    at = 0
    while at < len(body) and not body[at:].isspace():
        match = _FIELD.match(body, at)
        if match is None or match["name"] not in _FIELDS:
            line = body.count("\n", 0, at) + 1
            raise CheckpointStateError(
                f"{name}: not a TF1 checkpoint state file (line {line} is no field of "
                "CheckpointState); pass the checkpoint's PREFIX."
            )
        value = match["value"]
        if value[:1] in "\"'":
            raw = value[1:-1].encode("utf-8", "surrogateescape")
            value = os.fsdecode(codecs.escape_decode(raw)[0])  # C escapes, as text format has
        fields[match["name"]] = value
        at = match.end()
    return fields


def resolve(path: str | os.PathLike[str]) -> str:
    """The checkpoint ``path`` means: for a directory, the latest checkpoint its ``checkpoint``
    state file names; for such a state file, the same; any other path as it is (see the
    module)."""
    name = os.fspath(path)
    try:
        is_directory = os.path.isdir(name)
    except (OSError, ValueError):
        is_directory = False
    if is_directory:
        state = os.path.join(name, STATE_FILE)
        if not os.path.isfile(state):
            raise CheckpointStateError(
                f"{name}: a directory without a TF1 {STATE_FILE!r} state file naming its "
                "latest checkpoint; give a file in it, or a TF1 checkpoint's PREFIX."
            )
        return latest_checkpoint(state)
    if is_state_file(name):
        return latest_checkpoint(name)
    return name
