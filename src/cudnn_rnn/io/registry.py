"""The formats the package reads: one table, from which everything that names them derives.

Each :class:`Format` says which kinds of file :func:`cudnn_rnn.io.files.sniff` tells it by
(content first), which names ask for it when the content proves nothing (a truncated file is
then told what is wrong with it by its own reader), and how messages and help name its files.
:mod:`cudnn_rnn.converters.readers` picks a file's reader from here; one finder per format
(:mod:`cudnn_rnn.converters.finder`), one loader (:mod:`cudnn_rnn.converters.loader`) and its
options (:mod:`cudnn_rnn.converters.options`) cover this table (a test checks that they do); the
command's help and its refusals list the titles; what is written is
:data:`cudnn_rnn.convert.WRITERS`.

Standard library only (and :mod:`cudnn_rnn.io.files`'s constants), so the command's parser reads it
without importing torch.

>>> reader_for_kind("hdf5"), reader_for_name("model.PTH")
('keras_h5', 'torch')
>>> "Keras 2 .h5" in READ
True
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath

from cudnn_rnn.io.files.sniffing import (
    HDF5,
    NPZ,
    ONNX,
    PICKLE,
    SAFETENSORS,
    TF1,
    TORCH_PICKLE,
    TORCH_ZIP,
    TORCHSCRIPT,
    ZIP,
)

__all__ = [
    "FORMATS",
    "KERAS3",
    "NOT_READ",
    "READ",
    "Format",
    "reader_for_kind",
    "reader_for_name",
]


#: The kind of a Keras 3 archive, which :func:`cudnn_rnn.converters.readers.kind_of` tells
#: among zips (this table imports no reader: :class:`cudnn_rnn.io.found.FoundRNN` names a
#: format by it).
KERAS3 = "keras3"


@dataclass(frozen=True)
class Format:
    """One format the package reads (see the module)."""

    name: str  # the reader's name (the key of its finder, loader and options)
    title: str  # its files, in words, for help and messages
    kinds: tuple[str, ...]  # what files.sniff tells it by
    extensions: tuple[str, ...] = ()  # names that ask for it when the content proves nothing


#: Every format read, in the order help lists them.
FORMATS: tuple[Format, ...] = (
    Format("safetensors", "our .safetensors checkpoints", (SAFETENSORS,), (".safetensors",)),
    Format("tf1", "TF1 checkpoints (PREFIX or PREFIX.index)", (TF1,)),
    Format("onnx", "ONNX models", (ONNX,), (".onnx",)),
    Format(
        "torch",
        "torch files (torch.save state_dicts, models and checkpoints, TorchScript archives' "
        "tensors, pickles and .npz of torch names)",
        (TORCH_ZIP, TORCH_PICKLE, TORCHSCRIPT, NPZ, PICKLE),
        (".pt", ".pth", ".pkl", ".pickle"),
    ),
    Format("keras_h5", "Keras 2 .h5 files", (HDF5,), (".h5", ".hdf5")),
    # A zip holding config.json and model.weights.h5 (files.sniff says "zip"; the reader's
    # is_keras3 tells it: see cudnn_rnn.converters.readers.kind_of).
    Format("keras3", "Keras 3 .keras files", (KERAS3,), (".keras",)),
)

#: What the command says of the kinds it recognises but does not read.
NOT_READ = {ZIP: "cudnn-rnn reads no such archive"}

#: Every format read, in words.
READ = "; ".join(f.title for f in FORMATS)

_BY_KIND = {kind: f.name for f in FORMATS for kind in f.kinds}
_BY_EXTENSION = {ext: f.name for f in FORMATS for ext in f.extensions}


def reader_for_kind(kind: str) -> str | None:
    """The reader of a kind :func:`cudnn_rnn.io.files.sniff` tells (None: no format reads it)."""
    return _BY_KIND.get(kind)


def reader_for_name(path: str) -> str | None:
    """The reader a file's name asks for by its extension, in any case (None: none)."""
    return _BY_EXTENSION.get(PurePath(path).suffix.lower())
