"""Which reader reads a file: chosen by the file's content, not its name, so that every front
(:func:`cudnn_rnn.find_rnns`, :func:`cudnn_rnn.load`, the ``cudnn-rnn`` command) sends one file
to the same reader and names its tensors the same way.

The kind is sniffed (:func:`cudnn_rnn.io.files.sniff`, refined by
:func:`kind_of`) and looked up in the one table of formats
(:data:`cudnn_rnn.io.registry.FORMATS`):

=====================================  =======================================================
content                                reader
=====================================  =======================================================
safetensors                            ``safetensors``: our checkpoints
                                       (:mod:`cudnn_rnn.checkpoint`); a torch state_dict saved
                                       as safetensors
TF1 checkpoint (``PREFIX.index``)      ``tf1``: CudnnLSTM-style canonical and opaque models
                                       (:mod:`cudnn_rnn.checkpoint`), TF's standard cells
                                       (:mod:`cudnn_rnn.io.tf1.cells`)
ONNX protobuf                          ``onnx``: :mod:`cudnn_rnn.converters.onnx`
torch.save (zip or legacy), pickle,    ``torch``: state_dicts wherever they are (Lightning
TorchScript, ``.npz``                  checkpoints, ``torch.save(model)``, lists; read without
                                       running anything: :mod:`cudnn_rnn.io.torch.pickled`)
HDF5                                   ``keras_h5``: :mod:`cudnn_rnn.io.keras.h5`
zip of ``config.json`` and             ``keras3``: :mod:`cudnn_rnn.io.keras.keras3`
``model.weights.h5``
other zip                              refused: :class:`UnsupportedFormat` names the kind
unknown                                the reader of the name's extension (the registry's), so
                                       that a truncated or corrupt file is told what is wrong
                                       with it; no such extension: :class:`UnsupportedFormat`
=====================================  =======================================================

What is read to choose (the kind, a checkpoint's header or index and its metadata) is read once
per operation (:func:`cudnn_rnn.io.once.once`), and the finder and the loader reuse it.
"""

from __future__ import annotations

from typing import Any

from cudnn_rnn import checkpoint
from cudnn_rnn.io import registry
from cudnn_rnn.io.files import Claims
from cudnn_rnn.io.files.opening import FormatError
from cudnn_rnn.io.files.sniffing import KINDS, TF1, ZIP, sniff
from cudnn_rnn.io.once import once
from cudnn_rnn.io.torch import file as torch_file

__all__ = ["READERS", "UnsupportedFormat", "kind_of", "reader_of", "tensor_shapes"]


class UnsupportedFormat(FormatError):
    """A file whose format, told by its content, the command cannot read (yet), or whose
    content is of no format it knows and whose name says none either."""


#: Each kind :func:`cudnn_rnn.io.files.sniff` tells -> the reader of its files (the registry's).
READERS = {kind: f.name for f in registry.FORMATS for kind in f.kinds}
#: Each reader -> its files, in words (the registry's titles, without their asides).
_TITLES = {f.name: f.title.split(" (")[0] for f in registry.FORMATS}


def kind_of(path: str) -> str:
    """The kind of ``path`` by its content (a family refined: a Keras 3 zip), sniffed once per
    operation."""
    return once("sniff", path, lambda: _refined(sniff(path), path))  # type: ignore[no-any-return]


def _refined(kind: str, path: str) -> str:
    """The kind of ``path`` where :func:`cudnn_rnn.io.files.sniff`'s ``kind`` is a family: a zip
    holding a Keras 3 model's ``config.json`` and ``model.weights.h5`` is
    :data:`cudnn_rnn.io.registry.KERAS3`."""
    if kind == ZIP:
        from cudnn_rnn.io.keras import keras3

        if keras3.is_keras3(path):
            return registry.KERAS3
    return kind


def _claims(path: str) -> Claims:
    """A checkpoint's tensors as its header or index claims them, parsed once per operation."""
    return once("claims", path, lambda: checkpoint.read_claims(path))  # type: ignore[no-any-return]


def _described(path: str) -> list[dict[str, Any]]:
    """The models our safetensors metadata describes, read once per operation."""
    return once("describe", path, lambda: checkpoint.describe(path))  # type: ignore[no-any-return]


def reader_of(path: str) -> str:
    """The reader of ``path`` (a key of :data:`READERS`'s values), chosen by its content; see
    the module for the rules. Raises :class:`UnsupportedFormat` for a file no reader takes."""
    kind = kind_of(path)
    if kind == TF1 and not checkpoint.is_tf_checkpoint(path):
        raise UnsupportedFormat(
            f"{path}: the index of a TF1 checkpoint, but not named PREFIX.index; give it its "
            "name back (beside its PREFIX.data-* files) and pass PREFIX."
        )
    reader = registry.reader_for_kind(kind)
    if reader is not None:
        return reader
    if kind in registry.NOT_READ:
        raise UnsupportedFormat(f"{path}: {KINDS[kind]}; {registry.NOT_READ[kind]}.")
    if checkpoint.is_tf_checkpoint(path):
        return "tf1"
    by_name = registry.reader_for_name(path)
    if by_name is None:
        raise UnsupportedFormat(
            f"{path}: its content is of no format cudnn-rnn reads ({registry.READ}), nor does "
            "its name say one; if it is one of them, it is truncated or corrupt."
        )
    return by_name


def tensor_shapes(path: str, reader: str) -> dict[str, tuple[tuple[int, ...], str]]:
    """Name -> (shape, dtype name) of every tensor of ``path``, as its ``reader`` sees them.

    Listing reads no data where the format allows it: a header or index (safetensors, TF1),
    the initializers' headers (ONNX), the datasets' descriptions (Keras .h5), the members'
    headers (TorchScript, ``.npz``); a torch.save file is loaded whole (``weights_only``).
    """
    if reader in ("tf1", "safetensors"):
        return dict(_claims(path))
    if reader == "keras_h5":
        from cudnn_rnn.io.keras.h5 import keras_h5_weights

        return keras_h5_weights(path)
    if reader == "keras3":
        from cudnn_rnn.io.keras import keras3

        return keras3.tensor_shapes(path)
    if reader == "onnx":
        from cudnn_rnn.converters import onnx

        return onnx.tensor_shapes(path)
    return torch_file.tensor_shapes(path)
