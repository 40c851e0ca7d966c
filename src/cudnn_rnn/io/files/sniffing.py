"""Telling formats apart by their content, never by the file's name.

:func:`sniff` reads a bounded prefix, the end of the file, and a zip archive's central directory
(through the one zip reader, which checks it as every reader does):

=============  ==============================================================================
kind           rule
=============  ==============================================================================
tf1            ``PATH.index`` (or ``PATH`` itself) ends with the magic number of TensorFlow's
               table format: a TF1 checkpoint, named by its prefix or its ``.index``
hdf5           HDF5's signature at offset 0, 512, 1024, 2048, ... (a user block may precede it)
torch_zip      a zip archive (local header first, end record found) holding ``DIR/data.pkl``
               and no TorchScript code: ``torch.save``
torchscript    a zip archive holding ``DIR/constants.pkl`` or ``DIR/code/``: ``torch.jit.save``
npz            a zip archive of ``.npy`` members only: ``np.savez``
zip            any other zip archive (a Keras 3 ``.keras`` file, for example)
torch_pickle   a pickle whose first object is torch's magic number: legacy ``torch.save``
               (``_use_new_zipfile_serialization=False``)
pickle         a plain pickle (``pickle.dump``): protocol 2 to 5 (its ``PROTO`` opcode first),
               or 0 and 1 starting with a dict or list (``(dp0``, ``(lp0``, ``}q``, ``]q``,
               ``}(``, ``](``), and the file's last byte its ``STOP`` (``.``); after the kinds
               above, so a safetensors header length that looks like ``PROTO`` stays one
safetensors    an 8-byte little-endian header length that fits in the file, then ``{``
onnx           protobuf fields of an ``onnx.ModelProto``: ``ir_version`` first, every field a
               known one with its wire type (or an unknown number, as protobuf allows), each
               length inside the file, and a ``graph``; at most 64 fields are read
unknown        none of these: empty, truncated, corrupt, or another format
=============  ==============================================================================

A kind is given only where the content shows it: a zip archive cut before its end record (or
whose end record points outside the file), a safetensors file cut inside its header or an ONNX
model cut inside a field is ``unknown``, and the caller may still hand it to the reader its name
suggests, whose error says what is wrong (as it does for a file whose signature survived the
cut: HDF5, a legacy pickle, a safetensors header that fits). A zip archive whose end record is
found is checked as every reader checks it, and refused
(:class:`~cudnn_rnn.io.files.zip_reader.ZipError`) as they would refuse it. What is read is
bounded: 64 bytes at the start, the last 64 KiB + 22 bytes (a zip archive's end record), a zip
archive's central directory (at most 64 MiB) and its entries' local headers (at most 200,000),
a few bytes at each offset HDF5 allows and at each of 64 protobuf fields.
Standard library only.

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "weights")
>>> with open(path, "wb") as f:
...     _ = f.write(b"\\x89HDF\\r\\n\\x1a\\n" + bytes(100))
>>> sniff(path), KINDS[sniff(path)]
('hdf5', 'an HDF5 file')
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from typing import Final

from cudnn_rnn.io.files.opening import open_regular, read_at, size_of
from cudnn_rnn.io.files.zip_reader import checked_zip

__all__ = [
    "HDF5",
    "KINDS",
    "NPZ",
    "ONNX",
    "PICKLE",
    "SAFETENSORS",
    "TF1",
    "TF_TABLE_MAGIC",
    "TORCHSCRIPT",
    "TORCH_PICKLE",
    "TORCH_ZIP",
    "UNKNOWN",
    "ZIP",
    "sniff",
    "sniff_file",
]

SAFETENSORS: Final = "safetensors"
TORCH_ZIP: Final = "torch_zip"
TORCHSCRIPT: Final = "torchscript"
TORCH_PICKLE: Final = "torch_pickle"
PICKLE: Final = "pickle"
NPZ: Final = "npz"
ZIP: Final = "zip"
HDF5: Final = "hdf5"
ONNX: Final = "onnx"
TF1: Final = "tf1"
UNKNOWN: Final = "unknown"

#: Every kind :func:`sniff` returns -> what it is, in words (for messages).
KINDS: Mapping[str, str] = {
    SAFETENSORS: "a safetensors file",
    TORCH_ZIP: "a torch.save archive (zip)",
    TORCHSCRIPT: "a TorchScript archive (torch.jit.save)",
    TORCH_PICKLE: "a legacy torch.save file (pickle)",
    PICKLE: "a plain pickle (pickle.dump)",
    NPZ: "a NumPy .npz archive (np.savez)",
    ZIP: "a zip archive that is no torch, TorchScript or .npz archive",
    HDF5: "an HDF5 file",
    ONNX: "an ONNX model (protobuf)",
    TF1: "a TF1 checkpoint",
    UNKNOWN: "of no format recognised by its content",
}

#: The magic number that ends a TensorFlow table (a TF1 checkpoint's ``.index``), little-endian.
TF_TABLE_MAGIC = 0xDB4775248B80FB57
_TABLE_FOOTER = 48
_HEAD = 64
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_TORCH_MAGIC = b"\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little")  # a pickled long
_PICKLE_PROTOCOLS = range(2, 6)
#: How a protocol 0 or 1 pickle of a dict or list starts (its first opcodes).
_OLD_PICKLE_STARTS = (b"(dp", b"(lp", b"}q", b"]q", b"}(", b"](")


def sniff(path: str | os.PathLike[str]) -> str:
    """The kind of file at ``path`` (one of :data:`KINDS`), by its content (see the module).

    A TF1 checkpoint is named by its prefix (``PATH.index`` exists) or by its ``.index``. Raises
    as :func:`open_regular` does for a path that is no regular file (a prefix whose ``.index``
    is no table while ``PATH`` does not exist: ``unknown``).
    """
    name = os.fspath(path)
    index = name + ".index"
    if not name.endswith(".index") and os.path.isfile(index):
        with open_regular(index) as f:
            if _is_table(f, size_of(f)):
                return TF1
        if not os.path.lexists(name):
            return UNKNOWN
    with open_regular(name) as f:
        return sniff_file(f)


def sniff_file(f: io.BufferedReader) -> str:
    """The kind of the open file ``f`` by its content, as :func:`sniff` tells it (a TF1
    checkpoint by its ``.index`` alone); ``f`` is left at an unspecified position."""
    size = size_of(f)
    head = read_at(f, 0, _HEAD)
    if head.startswith(_HDF5_SIGNATURE):
        return HDF5
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return _zip_kind(f)
    if len(head) > 1 and head[0] == 0x80 and head[1] in _PICKLE_PROTOCOLS and _TORCH_MAGIC in head:
        return TORCH_PICKLE
    if len(head) >= 10:
        header_length = int.from_bytes(head[:8], "little")
        if 2 <= header_length <= size - 8 and head[8:9] == b"{":
            return SAFETENSORS
    if _is_pickle(f, head, size):
        return PICKLE
    if _is_table(f, size):
        return TF1
    if _has_hdf5_user_block(f, size):
        return HDF5
    if _is_onnx(f, size):
        return ONNX
    return UNKNOWN


def _is_table(f: io.BufferedReader, size: int) -> bool:
    return size >= _TABLE_FOOTER and read_at(f, size - 8, 8) == TF_TABLE_MAGIC.to_bytes(8, "little")


def _is_pickle(f: io.BufferedReader, head: bytes, size: int) -> bool:
    """A plain pickle's first opcodes, and its STOP as the file's last byte."""
    proto = len(head) > 2 and head[0] == 0x80 and head[1] in _PICKLE_PROTOCOLS
    if not (proto or head.startswith(_OLD_PICKLE_STARTS)):
        return False
    return read_at(f, size - 1, 1) == b"."


def _has_hdf5_user_block(f: io.BufferedReader, size: int) -> bool:
    offset = 512
    while offset + len(_HDF5_SIGNATURE) <= size:
        if read_at(f, offset, len(_HDF5_SIGNATURE)) == _HDF5_SIGNATURE:
            return True
        offset *= 2
    return False


def _zip_kind(f: io.BufferedReader) -> str:
    archive = checked_zip(f)
    if archive is None:
        return UNKNOWN
    names = archive.names()
    if names and all(n.endswith(".npy") for n in names):
        return NPZ
    inside = [n.split("/", 1)[1] for n in names if "/" in n]
    if any(n == "constants.pkl" or n.startswith("code/") for n in inside):
        return TORCHSCRIPT
    return TORCH_ZIP if "data.pkl" in inside else ZIP


# -- ONNX: the first fields of a ModelProto --------------------------------------------------------

#: ModelProto's field numbers -> wire type (0: varint, 2: length-delimited), from onnx.proto.
_MODEL_FIELDS = {1: 0, 2: 2, 3: 2, 4: 2, 5: 0, 6: 2, 7: 2, 8: 2, 14: 2, 20: 2, 25: 2, 26: 2}
_IR_VERSION, _GRAPH = 1, 7
_MAX_IR_VERSION = 1000
_MAX_FIELDS = 64
_FIXED_SIZES = {1: 8, 5: 4}  # wire types of fixed-size fields


def _is_onnx(f: io.BufferedReader, size: int) -> bool:
    """Whether the file starts as an ONNX model: ``ir_version`` first, then fields of
    ModelProto (or unknown numbers, as protobuf allows) whose lengths stay in the file, a
    ``graph`` among them; only the fields' keys and lengths are read, at most 64 of them."""
    pos = 0
    seen: set[int] = set()
    for _ in range(_MAX_FIELDS):
        if pos == size:
            break
        key = _varint(f, pos)
        if key is None:
            return False
        pos = key[1]
        number, wire = key[0] >> 3, key[0] & 7
        if number == 0 or _MODEL_FIELDS.get(number, wire) != wire:
            return False
        if not seen and number != _IR_VERSION:
            return False
        if wire in _FIXED_SIZES:
            pos += _FIXED_SIZES[wire]
        elif wire in (0, 2):
            value = _varint(f, pos)
            if value is None:
                return False
            pos = value[1] + (value[0] if wire == 2 else 0)
            if number == _IR_VERSION and not 1 <= value[0] <= _MAX_IR_VERSION:
                return False
        else:  # groups (3, 4) are not in ONNX; 6 and 7 are no wire types
            return False
        if pos > size:
            return False
        seen.add(number)
    return _GRAPH in seen


def _varint(f: io.BufferedReader, pos: int) -> tuple[int, int] | None:
    """(value, position after it) of the varint at ``pos``, or None if there is none."""
    data = read_at(f, pos, 10)
    value = 0
    for i, byte in enumerate(data):
        value |= (byte & 0x7F) << (7 * i)
        if byte < 0x80:
            return value, pos + i + 1
    return None
