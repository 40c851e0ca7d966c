"""The formats the package reads: one table, from which everything that names them derives.

Each :class:`Format` says which kinds of file :func:`cudnn_rnn.files.sniff` tells it by
(content first), which names ask for it when the content proves nothing (a truncated file is
then told what is wrong with it by its own reader), and how messages and help name its files.
:mod:`cudnn_rnn.model_files` picks a file's reader from here and keeps one finder and one
loader per format (a test checks that both cover this table); the command's help and its
refusals list the titles; what is written is :data:`cudnn_rnn.convert.WRITERS`.

Standard library only (and :mod:`cudnn_rnn.files`'s constants), so the command's parser reads it
without importing torch.

>>> reader_for_kind("hdf5"), reader_for_name("model.PTH")
('keras_h5', 'torch')
>>> "Keras 2 .h5" in READ
True
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath

from cudnn_rnn import files

__all__ = ["FORMATS", "NOT_READ", "READ", "Format", "reader_for_kind", "reader_for_name"]


@dataclass(frozen=True)
class Format:
    """One format the package reads (see the module)."""

    name: str  # the reader's name (model_files' finder and loader of it)
    title: str  # its files, in words, for help and messages
    kinds: tuple[str, ...]  # what files.sniff tells it by
    extensions: tuple[str, ...] = ()  # names that ask for it when the content proves nothing


#: Every format read, in the order help lists them.
FORMATS: tuple[Format, ...] = (
    Format("safetensors", "our .safetensors checkpoints", (files.SAFETENSORS,), (".safetensors",)),
    Format("tf", "TF1 checkpoints (PREFIX or PREFIX.index)", (files.TF1,)),
    Format("onnx", "ONNX models", (files.ONNX,), (".onnx",)),
    Format(
        "torch",
        "torch files (torch.save state_dicts, TorchScript archives' tensors, .npz of torch names)",
        (files.TORCH_ZIP, files.TORCH_PICKLE, files.TORCHSCRIPT, files.NPZ),
        (".pt", ".pth"),
    ),
    Format("keras_h5", "Keras 2 .h5 files", (files.HDF5,), (".h5", ".hdf5")),
)

#: What the command says of the kinds it recognises but does not read.
NOT_READ = {files.ZIP: "cudnn-rnn reads no such archive"}

#: Every format read, in words.
READ = "; ".join(f.title for f in FORMATS)

_BY_KIND = {kind: f.name for f in FORMATS for kind in f.kinds}
_BY_EXTENSION = {ext: f.name for f in FORMATS for ext in f.extensions}


def reader_for_kind(kind: str) -> str | None:
    """The reader of a kind :func:`cudnn_rnn.files.sniff` tells (None: no format reads it)."""
    return _BY_KIND.get(kind)


def reader_for_name(path: str) -> str | None:
    """The reader a file's name asks for by its extension, in any case (None: none)."""
    return _BY_EXTENSION.get(PurePath(path).suffix.lower())
