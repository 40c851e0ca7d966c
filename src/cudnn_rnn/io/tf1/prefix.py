"""A checkpoint prefix and its files, and the crash-safe overwrite's pairs.

``PREFIX`` names a bundle's index ``PREFIX.index`` and its data shards
``PREFIX.data-00000-of-0000N``. No rename replaces two files at once, so
:func:`~cudnn_rnn.io.tf1.writer.write_bundle` stages the new pair and backs the old one up under
side prefixes beside it. This module is that protocol (docs/checkpoint_format.md, "Crash
safety"), in one place for the reader and the writer: which pair holds the checkpoint whenever a
writer died (:func:`readable_prefix`, the reading rule, applied without changing the directory),
and the moves that swap a staged pair in (:func:`swap_in`) and settle what an interrupted write
left (:func:`settle`), on the atomic writer's primitives (:mod:`cudnn_rnn.io.atomic`).
"""

from __future__ import annotations

import os
import re

from cudnn_rnn.io import atomic

__all__ = [
    "BACKUP",
    "STAGED",
    "bundle_prefix",
    "data_path",
    "readable_prefix",
    "settle",
    "side_prefix",
    "swap_in",
]

_SUFFIX = re.compile(r"\.(index|data-\d{5,}-of-\d{5,})$")


def bundle_prefix(path: str | os.PathLike[str]) -> str:
    """The checkpoint prefix of ``path``: ``path`` itself, or, for an existing ``PREFIX.index``
    or ``PREFIX.data-00000-of-00001`` file, ``PREFIX``.

    >>> bundle_prefix("/nonexistent/model.ckpt")
    '/nonexistent/model.ckpt'
    """
    p = os.fspath(path)
    match = _SUFFIX.search(p)
    if match and os.path.isfile(p) and not os.path.isfile(p + ".index"):
        return p[: match.start()]
    return p


def data_path(prefix: str, shard: int, num_shards: int) -> str:
    """The path of data shard ``shard`` of ``num_shards`` of the checkpoint ``prefix``."""
    return f"{prefix}.data-{shard:05d}-of-{num_shards:05d}"


#: An overwrite stages the new pair and keeps the old one under these prefixes until it is done;
#: both are bundles of their own.
STAGED, BACKUP = "cudnn-rnn-new", "cudnn-rnn-old"


def side_prefix(prefix: str, kind: str) -> str:
    """The hidden prefix of ``prefix``'s :data:`STAGED` or :data:`BACKUP` pair."""
    directory, base = os.path.split(prefix)
    return os.path.join(directory, f".{base}.{kind}")


def _data_files(prefix: str) -> list[str]:
    """The data shards of ``prefix`` that exist, whatever their number."""
    directory, base = os.path.split(prefix)
    pattern = re.compile(re.escape(base) + r"\.data-\d{5,}-of-\d{5,}\Z")
    try:
        names = sorted(e.name for e in os.scandir(directory or "."))
    except OSError:
        return []
    return [os.path.join(directory, n) for n in names if pattern.match(n)]


def readable_prefix(prefix: str) -> str:
    """The prefix whose files hold a whole checkpoint: ``prefix``, or its backup pair while an
    interrupted overwrite is between backing up the old pair and renaming the new index into place
    (then the staged new index still exists and the live data may already be the new one)."""
    backup, staged = side_prefix(prefix, BACKUP), side_prefix(prefix, STAGED)
    if os.path.isfile(backup + ".index") and os.path.lexists(staged + ".index"):
        return backup
    return prefix


def swap_in(prefix: str, staged: str) -> None:
    """Move the staged pair onto ``prefix``, keeping the old pair as a backup until it is done.

    The backup index is linked last (so it implies complete backup data) and the live index is
    renamed last: from the backup index's creation to that rename, :func:`readable_prefix` reads
    the backup; before and after, the live pair, old or new, is whole.
    """
    live_index, live_data = prefix + ".index", data_path(prefix, 0, 1)
    backup = side_prefix(prefix, BACKUP)
    if os.path.isfile(live_index) and os.path.lexists(live_data):
        for path in _data_files(prefix):
            atomic.link_or_copy(path, backup + path[len(prefix) :])
        atomic.link_or_copy(live_index, backup + ".index")
    atomic.replace(data_path(staged, 0, 1), live_data)
    atomic.replace(staged + ".index", live_index)  # the commit point
    _remove_pair(backup)


def settle(prefix: str) -> None:
    """Finish what an interrupted :func:`~cudnn_rnn.io.tf1.writer.write_bundle` of ``prefix``
    left: make the pair that :func:`readable_prefix` reads the live one, then remove the staged
    and backup files."""
    backup, staged = side_prefix(prefix, BACKUP), side_prefix(prefix, STAGED)
    if readable_prefix(prefix) == backup:  # stopped before the commit: roll the data back
        for path in _data_files(backup):
            atomic.link_or_copy(path, prefix + path[len(backup) :])
    _remove_pair(staged)  # from here on readers read the live pair
    _remove_pair(backup)


def _remove_pair(prefix: str) -> None:
    """Remove a staged or backup pair, index first, and the temporary files of its names."""
    for path in (prefix + ".index", *_data_files(prefix)):
        atomic.remove(path)
    for path in (prefix + ".index", data_path(prefix, 0, 1)):
        atomic.remove_leftovers(path)
    atomic.fsync_directory(os.path.dirname(os.path.abspath(prefix)))
