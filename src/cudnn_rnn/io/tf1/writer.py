"""Writing a TF1 tensor bundle: NumPy arrays to the one-shard checkpoint TensorFlow writes.

Each tensor is checked and put in its stored form (TF's ``DataType``, little-endian bytes; bfloat16
by name, as exact bits), the data shard is written in key order with each tensor's checksum, and the
index is built byte for byte as TensorFlow's ``TableBuilder`` builds it
(:mod:`cudnn_rnn.io.tf1.table`) from the entries of :mod:`cudnn_rnn.io.tf1.protos`. The new pair
replaces an old one through the crash-safe protocol of :mod:`cudnn_rnn.io.tf1.prefix`, every file
by the one atomic writer (:mod:`cudnn_rnn.io.atomic`). Reading is :mod:`cudnn_rnn.io.tf1.bundle`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection, Mapping
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from cudnn_rnn.io import atomic
from cudnn_rnn.io.tf1.prefix import STAGED, data_path, settle, side_prefix, swap_in
from cudnn_rnn.io.tf1.protos import (
    DT_BFLOAT16,
    ENUM_OF_CODE,
    HEADER,
    SUPPORTED_DTYPES,
    encode_entry,
)

# The table's builder and TensorFlow's table settings, looked up here when a bundle is written (a
# test shrinks BLOCK_SIZE to make the writer produce many blocks).
from cudnn_rnn.io.tf1.table import BLOCK_SIZE, RESTART_INTERVAL, build_table, masked_crc32c

__all__ = ["write_bundle"]

Array = npt.NDArray[Any]


def _stored_form(name: str, value: object, as_bfloat16: bool) -> tuple[int, Array]:
    """(DataType enum, C-contiguous little-endian array of the bytes to store) of one tensor."""
    if isinstance(value, np.generic):
        value = np.asarray(value)
    if not isinstance(value, np.ndarray):
        raise TypeError(
            f"write_bundle: tensor {name!r} must be a numpy array, got {type(value).__name__} "
            "(convert a torch tensor with .detach().cpu().numpy())."
        )
    array: Array = value
    if as_bfloat16 or array.dtype.name == "bfloat16":  # ml_dtypes.bfloat16 arrays count too
        if array.dtype.name == "bfloat16" or array.dtype == np.uint16:
            bits = array.view(np.uint16)
        elif array.dtype == np.float32:
            # Not ml_dtypes' cast: it rounds, and turns every NaN into the one quiet NaN (with a
            # RuntimeWarning). Values bfloat16 holds exactly are float32 words with a zero low
            # half, and their bfloat16 bits are the high half, NaN payloads included.
            words = array.view(np.uint32)
            if np.any(words & 0xFFFF):
                raise ValueError(
                    f"write_bundle: tensor {name!r} has float32 values that bfloat16 cannot hold "
                    "exactly; round them to bfloat16 first (e.g. torch's .bfloat16())."
                )
            bits = (words >> 16).astype(np.uint16)
        else:
            raise TypeError(
                f"write_bundle: bfloat16 tensor {name!r} must be given as uint16 bit patterns or "
                f"float32 values, got {array.dtype}."
            )
        return DT_BFLOAT16, np.asarray(bits, dtype="<u2", order="C")
    code = array.dtype.newbyteorder("<").str
    if code not in ENUM_OF_CODE:
        raise TypeError(
            f"write_bundle: tensor {name!r} has dtype {array.dtype}, which TF checkpoints "
            f"written here cannot hold; supported: {', '.join(SUPPORTED_DTYPES)}."
        )
    return ENUM_OF_CODE[code], np.asarray(array, dtype=code, order="C")


def _check_name(name: object) -> bytes:
    if not isinstance(name, str):
        raise TypeError(f"write_bundle: tensor names must be str, got {type(name).__name__}.")
    if not name or name.startswith("\x00"):
        raise ValueError(
            f"write_bundle: tensor name {name!r} is reserved (the empty key is the header, "
            "keys starting with NUL are slices)."
        )
    try:
        return name.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(f"write_bundle: tensor name {name!r} is not valid Unicode.") from err


def write_bundle(
    prefix: str | os.PathLike[str],
    tensors: Mapping[str, Array],
    *,
    bfloat16: Collection[str] = (),
) -> None:
    """Write ``tensors`` as a one-shard TF checkpoint (``PREFIX.index``, ``PREFIX.data-*``).

    The files are what TensorFlow's own writer produces for the same tensors (keys sorted, data in
    key order, checksums written); ``tf.train.load_checkpoint`` reads them. Names in ``bfloat16``
    are stored as bfloat16 (give ``uint16`` bit patterns, or float32 values bfloat16 holds
    exactly). New files get the umask's permissions, overwritten ones keep theirs.

    The write is crash-safe: until the new pair is complete,
    :func:`~cudnn_rnn.io.tf1.bundle.read_bundle` (and ``checkpoint.restore``) read the old
    checkpoint, whenever the process dies; the next write of the prefix rolls an interrupted one
    back and removes its files. Writers of one directory are serialised by a lock. The protocol is
    :mod:`cudnn_rnn.io.tf1.prefix` (docs/checkpoint_format.md, "Crash safety").
    Only regular files are replaced: a directory, FIFO, device or socket at ``PREFIX.index`` or
    ``PREFIX.data-00000-of-00001`` (or a symbolic link to one) is refused before anything is
    written, with :class:`cudnn_rnn.io.atomic.NotRegularTarget` naming it.
    """
    bf16 = set(bfloat16)
    unknown = sorted(bf16 - set(tensors))
    if unknown:
        raise ValueError(f"write_bundle: bfloat16 names {unknown} are not among the tensors.")
    items = []
    for name, value in tensors.items():
        key = _check_name(name)
        enum, stored = _stored_form(name, value, name in bf16)
        items.append((key, enum, stored))
    items.sort(key=lambda item: item[0])

    prefix_str = os.fspath(prefix)
    directory = os.path.dirname(os.path.abspath(prefix_str))
    os.makedirs(directory, exist_ok=True)
    entries: list[tuple[bytes, bytes]] = [(b"", HEADER)]

    def write_data(f: BinaryIO) -> None:
        offset = 0
        for key, enum, stored in items:
            raw = stored.reshape(-1).view(np.uint8).data
            f.write(raw)
            crc = masked_crc32c(raw)
            entries.append((key, encode_entry(enum, stored.shape, offset, len(raw), crc)))
            offset += len(raw)

    staged = side_prefix(prefix_str, STAGED)
    with atomic.directory_lock(directory):
        settle(prefix_str)
        # Before anything is written or backed up: only regular files are replaced (a FIFO,
        # a device or a directory there, or a link to one, is refused naming it).
        for path in (prefix_str + ".index", data_path(prefix_str, 0, 1)):
            atomic.check_replaceable(path)
        try:
            live_data = data_path(prefix_str, 0, 1)
            atomic.write_file(data_path(staged, 0, 1), write_data, mode_of=live_data)
            table = build_table(entries, BLOCK_SIZE, RESTART_INTERVAL)
            atomic.write_file(staged + ".index", table, mode_of=prefix_str + ".index")
            swap_in(prefix_str, staged)
        except BaseException:
            with contextlib.suppress(OSError):
                settle(prefix_str)  # back to the old pair, and no staged or backup file left
            raise
