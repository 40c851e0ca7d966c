"""The bottom of the file wing: safe opening, the one bounded zip reader, telling formats apart
by content, the one bounded JSON loader, how messages show what a file gave, one base error.

One module an idea, lowest first:

- :mod:`~cudnn_rnn.io.files.escaping`: how a message shows a name or value a file gave
  (:func:`escape`, :func:`quote`, :func:`clip`, :func:`listed`, :func:`names`,
  :func:`first_line`);
- :mod:`~cudnn_rnn.io.files.opening`: the one opener (:func:`open_regular`: only regular files,
  a size bound), reads at an offset (:func:`read_at`, :func:`size_of`), the view of a file handed
  to another reader (:func:`pinned`), and the refusals: :class:`FormatError`, the base of every
  format error, :class:`NotRegularFile`, :class:`FileTooLarge`;
- :mod:`~cudnn_rnn.io.files.zip_reader`: the one bounded zip reader (:func:`zip_archive`,
  :func:`open_zip`, :class:`ZipError`), on the opener;
- :mod:`~cudnn_rnn.io.files.sniffing`: a file's kind by its content (:func:`sniff`,
  :data:`KINDS`), on the opener and the zip reader;
- :mod:`~cudnn_rnn.io.files.json_loader`: the one bounded JSON loader (:func:`load_json`).

This package re-exports their names, so ``from cudnn_rnn.io import files`` and ``files.sniff``
keep working; the package's own modules import each name from its module. A ``monkeypatch`` of
a name here reaches only the code that looks it up here: patch it in the module that uses it
(``sniffing.open_regular``, ``zip_reader.MAX_ZIP_ENTRIES``).

Standard library only: of the package, only :mod:`cudnn_rnn.errors` is imported, so every
module that reads or writes a file can stand on this one.
"""

from __future__ import annotations

from collections.abc import Mapping

from cudnn_rnn.errors import FileAccessError
from cudnn_rnn.io.files.escaping import clip, escape, first_line, listed, names, quote
from cudnn_rnn.io.files.json_loader import MAX_JSON_DEPTH, json_depth, load_json
from cudnn_rnn.io.files.opening import (
    FileTooLarge,
    FormatError,
    NotRegularFile,
    open_regular,
    pinned,
    read_at,
    regular_size,
    size_of,
    special_kind,
)
from cudnn_rnn.io.files.sniffing import (
    HDF5,
    KINDS,
    NPZ,
    ONNX,
    PICKLE,
    SAFETENSORS,
    TF1,
    TF_TABLE_MAGIC,
    TORCH_PICKLE,
    TORCH_ZIP,
    TORCHSCRIPT,
    UNKNOWN,
    ZIP,
    sniff,
    sniff_file,
)
from cudnn_rnn.io.files.zip_reader import (
    DEFLATED,
    MAX_ZIP_DIRECTORY,
    MAX_ZIP_ENTRIES,
    MAX_ZIP_RATIO,
    STORED,
    ZIP_RATIO_GRACE,
    ZipArchive,
    ZipEntry,
    ZipError,
    open_zip,
    zip_archive,
)

__all__ = [
    "DEFLATED",
    "HDF5",
    "KINDS",
    "MAX_JSON_DEPTH",
    "MAX_ZIP_DIRECTORY",
    "MAX_ZIP_ENTRIES",
    "MAX_ZIP_RATIO",
    "NPZ",
    "ONNX",
    "PICKLE",
    "SAFETENSORS",
    "STORED",
    "TF1",
    "TF_TABLE_MAGIC",
    "TORCHSCRIPT",
    "TORCH_PICKLE",
    "TORCH_ZIP",
    "UNKNOWN",
    "ZIP",
    "ZIP_RATIO_GRACE",
    "Claims",
    "FileAccessError",
    "FileTooLarge",
    "FormatError",
    "NotRegularFile",
    "ZipArchive",
    "ZipEntry",
    "ZipError",
    "clip",
    "escape",
    "first_line",
    "json_depth",
    "listed",
    "load_json",
    "names",
    "open_regular",
    "open_zip",
    "pinned",
    "quote",
    "read_at",
    "regular_size",
    "size_of",
    "sniff",
    "sniff_file",
    "special_kind",
    "zip_archive",
]

#: name -> (shape, dtype name): what a file's header or index says, before any data is read.
Claims = Mapping[str, tuple[tuple[int, ...], str]]
