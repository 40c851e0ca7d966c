"""Move RNNs between our layers and ``torch.nn``, Keras 3, ONNX and Keras 2 ``.h5`` files.

Every converter is registered here under ``(target, way)`` with a note on what it keeps; the
implementations live in :mod:`cudnn_rnn.io` and load only when used, so Keras and ONNX stay
optional dependencies.

============  ======  =====================================================================
target        way     what is kept
============  ======  =====================================================================
torch         to      lossless (skip_input: identity ``weight_ih_l0``; no num_proj == H)
torch         from    lossless (both biases; ``bias=False`` gives zero biases)
keras         to      outputs equal; LSTM/SimpleRNN store ``bW + bR`` (GRU both, exact)
keras         from    lossless (one Keras bias becomes ``bW``, ``bR = 0``)
keras_h5      from    lossless (Keras 2 ``.h5``: CuDNNLSTM/CuDNNGRU, LSTM, GRU, SimpleRNN)
onnx          to      lossless (standard LSTM/GRU/RNN nodes; no projection)
onnx          from    lossless (ours and ``torch.onnx.export``'s models)
============  ======  =====================================================================

>>> sorted(CONVERTERS)[:2]
[('keras', 'from'), ('keras', 'to')]

Files are written by :func:`to_file` in the formats of :data:`WRITERS`, the one table from which
``cudnn-rnn convert`` takes its ``--format`` choices, its rule for names and its messages. A
name's extension picks the format (in any case); a name with none is a TF1 checkpoint prefix, as
is one ending in ``.ckpt`` or ``.ckpt-STEP`` (``model.ckpt-1000``, what TF's saver writes);
any other extension is refused, naming what is written, unless ``format=`` chooses the format
(only an extension of another format is then refused, so the name never lies):

===========  =================  =======================  ================================
format       extensions         what is written          how
===========  =================  =======================  ================================
safetensors  ``.safetensors``   our checkpoint           ``checkpoint.save``
onnx         ``.onnx``          an ONNX model            :func:`to_onnx`
torch        ``.pt``, ``.pth``  a torch state_dict       ``torch.save`` of :func:`to_torch`'s
tf1          none, ``.ckpt``,   a TF1 checkpoint:        ``checkpoint.save(format="tf1")``
             ``.ckpt-STEP``     ``PREFIX.index``, ...
===========  =================  =======================  ================================

>>> writer_for("model.ckpt-1000").name, writer_for("out.PT").name
('tf1', 'torch')
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from cudnn_rnn.io.files.escaping import quote

if TYPE_CHECKING:  # for the annotations only: importing this module imports no torch
    import torch

    from cudnn_rnn.io.found import FoundRNN
    from cudnn_rnn.layers import CudnnGRU, CudnnLSTM, CudnnRNNRelu, CudnnRNNTanh, _CudnnRNN

__all__ = [
    "CONVERTERS",
    "WRITERS",
    "Converter",
    "Writer",
    "converter",
    "find_rnns",
    "from_keras",
    "from_keras_h5",
    "from_numpy_canonical",
    "from_onnx",
    "from_torch",
    "to_file",
    "to_keras",
    "to_onnx",
    "to_torch",
    "writer_for",
]


@dataclass(frozen=True)
class Converter:
    """One registered conversion: where its code lives and what it keeps."""

    target: str
    way: str  # "to" (our layer -> target) or "from" (target -> our layer)
    module: str
    function: str
    keeps: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        impl = getattr(importlib.import_module(self.module), self.function)
        return impl(*args, **kwargs)


CONVERTERS: dict[tuple[str, str], Converter] = {
    (c.target, c.way): c
    for c in (
        Converter(
            "torch",
            "to",
            "cudnn_rnn.converters.torch_nn",
            "to_torch",
            "lossless; skip_input becomes an identity weight_ih_l0",
        ),
        Converter("torch", "from", "cudnn_rnn.converters.torch_nn", "from_torch", "lossless"),
        Converter(
            "keras",
            "to",
            "cudnn_rnn.converters.keras",
            "to_keras",
            "equal outputs; LSTM/SimpleRNN biases summed",
        ),
        Converter("keras", "from", "cudnn_rnn.converters.keras", "from_keras", "lossless"),
        Converter("onnx", "to", "cudnn_rnn.converters.onnx", "to_onnx", "lossless"),
        Converter("onnx", "from", "cudnn_rnn.converters.onnx", "from_onnx", "lossless"),
        Converter(
            "numpy",
            "from",
            "cudnn_rnn.converters.npz",
            "from_numpy_canonical",
            "lossless (canonical weights and both biases, checked against the configuration)",
        ),
        Converter(
            "keras_h5",
            "from",
            "cudnn_rnn.converters.keras_files",
            "from_keras_h5",
            "lossless; refuses what cuDNN's math cannot compute (hard_sigmoid, reset_after=False)",
        ),
    )
}


def converter(target: str, way: str) -> Converter:
    """The registered converter for ``(target, way)``; the error lists the ones that exist."""
    found = CONVERTERS.get((target, way))
    if found is None:
        known = ", ".join(f"{t}/{w}" for t, w in sorted(CONVERTERS))
        raise ValueError(f"convert: no converter {way!r} {target!r}; available: {known}.")
    return found


@overload
def to_torch(layer: CudnnLSTM) -> torch.nn.LSTM: ...
@overload
def to_torch(layer: CudnnGRU) -> torch.nn.GRU: ...
@overload
def to_torch(layer: CudnnRNNTanh | CudnnRNNRelu) -> torch.nn.RNN: ...
@overload
def to_torch(layer: _CudnnRNN) -> torch.nn.RNNBase: ...
def to_torch(layer: _CudnnRNN) -> torch.nn.RNNBase:
    """``torch.nn.LSTM/GRU/RNN`` computing what ``layer`` computes (a ``CudnnLSTM`` gives a
    ``torch.nn.LSTM``, a ``CudnnGRU`` a ``torch.nn.GRU``, the plain RNNs a ``torch.nn.RNN``)."""
    module: torch.nn.RNNBase = converter("torch", "to")(layer)
    return module


def from_torch(
    source: torch.nn.Module | Mapping[str, Any] | str | os.PathLike[str], **kwargs: Any
) -> _CudnnRNN:
    """Our layer computing what a ``torch.nn.LSTM/GRU/RNN`` (or ``LSTMCell``/``GRUCell``/
    ``RNNCell``, a state_dict or a torch file) computes; see
    :func:`cudnn_rnn.converters.torch_nn.from_torch` for ``prefix=`` and ``activation=``."""
    layer: _CudnnRNN = converter("torch", "from")(source, **kwargs)
    return layer


def to_keras(layer: _CudnnRNN) -> list[Any]:
    """Keras layers (one per layer) computing what ``layer`` computes (batch-major)."""
    made: list[Any] = converter("keras", "to")(layer)
    return made


def from_keras(layers: Any) -> _CudnnRNN:
    """Our layer from a Keras LSTM/GRU(reset_after=True)/SimpleRNN/Bidirectional (or a list)."""
    layer: _CudnnRNN = converter("keras", "from")(layers)
    return layer


def from_keras_h5(path: str | os.PathLike[str], **kwargs: Any) -> dict[str, _CudnnRNN]:
    """``{layer name: our layer}`` for the RNN layers of a Keras 2 / tf.keras 1.x ``.h5`` file
    (``CuDNNLSTM``, ``CuDNNGRU``, ``LSTM``, ``GRU(reset_after=True)``, ``SimpleRNN``,
    ``Bidirectional``); see :func:`cudnn_rnn.converters.keras_files.from_keras_h5` for the
    options."""
    layers: dict[str, _CudnnRNN] = converter("keras_h5", "from")(path, **kwargs)
    return layers


def to_onnx(layer: _CudnnRNN, path: str | os.PathLike[str], **kwargs: Any) -> None:
    """Write ``layer`` as an ONNX model with the standard RNN operators."""
    converter("onnx", "to")(layer, path, **kwargs)


def from_onnx(path: Any, **kwargs: Any) -> _CudnnRNN:
    """Our layer from an ONNX model's standard LSTM/GRU/RNN node (``node=`` picks one of those
    :func:`find_rnns` lists); see :func:`cudnn_rnn.converters.onnx.from_onnx`."""
    layer: _CudnnRNN = converter("onnx", "from")(path, **kwargs)
    return layer


def from_numpy_canonical(
    source: str | os.PathLike[str] | Sequence[Any], *args: Any, **kwargs: Any
) -> _CudnnRNN:
    """Our layer from canonical weights given as NumPy arrays: an ``.npz`` that
    ``np.savez(path, *weights, *biases)`` wrote, or the arrays themselves, with the layer's
    configuration; see :func:`cudnn_rnn.converters.npz.from_numpy_canonical`."""
    layer: _CudnnRNN = converter("numpy", "from")(source, *args, **kwargs)
    return layer


def find_rnns(path: str | os.PathLike[str], **options: Any) -> list[FoundRNN]:
    """Every RNN a file holds, whatever its format (told by its content): a list of
    :class:`cudnn_rnn.io.found.FoundRNN`, each with where it is (an ONNX node's path at any
    depth, a torch state_dict prefix, a Keras layer path, a checkpoint's scope), its mode, sizes
    and direction, and whether cuDNN's math computes it (and if not, every reason). Its ``name``
    picks it for :func:`cudnn_rnn.load` (``name=``, every format) and the format's own loaders
    (``from_onnx(path, node=)``, ``from_torch(path, prefix=)``,
    ``from_keras_h5(path, layers=[...])``, ``cudnn-rnn convert --model``). The same as
    :func:`cudnn_rnn.find_rnns`. ``options``:
    ``activation`` (plain RNNs whose files do not say tanh or relu) and the Keras reader's
    ``confirm_keras_version``, ``merge_layers``."""
    from cudnn_rnn.converters import finder

    return finder.find_rnns(str(path), **options)


# -- files ---------------------------------------------------------------------------------------


def _write_safetensors(layer: Any, path: str) -> None:
    from cudnn_rnn import checkpoint

    checkpoint.save(path, layer)


def _write_tf1(layer: Any, path: str) -> None:
    from cudnn_rnn import checkpoint

    checkpoint.save(path, layer, format="tf1")


def _write_torch(layer: Any, path: str) -> None:
    import torch

    from cudnn_rnn.io import atomic

    state = to_torch(layer).state_dict()
    atomic.write_file(path, lambda f: torch.save(state, f))


@dataclass(frozen=True)
class Writer:
    """One format :func:`to_file` writes: its name (``format=``, ``--format``), what it is in
    words, the extensions that pick it (``""``: a name with none) and its writer."""

    name: str
    what: str
    extensions: tuple[str, ...]
    write: Callable[[Any, str], None]

    def shown(self) -> str:
        """The names that pick it, in words."""
        words = [e or "no extension" for e in self.extensions]
        return ", ".join(words[:-1]) + f" or {words[-1]}" if len(words) > 1 else words[0]


#: Every format :func:`to_file` writes, by ``format=`` name; the first that lists a name's
#: extension writes it (see the module).
WRITERS: dict[str, Writer] = {
    w.name: w
    for w in (
        Writer("safetensors", "safetensors", (".safetensors",), _write_safetensors),
        Writer("onnx", "onnx", (".onnx",), lambda layer, path: to_onnx(layer, path)),
        Writer("torch", "torch state_dict", (".pt", ".pth"), _write_torch),
        Writer("tf1", "TF1 checkpoint", ("", ".ckpt", ".ckpt-STEP"), _write_tf1),
    )
}
_STEP = re.compile(r"\.ckpt-[0-9]+")


def _extension(path: str) -> str:
    """The extension of the name's last part, in lower case; ``.ckpt-1000`` is ``.ckpt-STEP``."""
    suffix = Path(path).suffix.lower()
    return ".ckpt-STEP" if _STEP.fullmatch(suffix) else suffix


def writer_for(
    path: str | os.PathLike[str], format: str | None = None, *, option: str = "format="
) -> Writer:
    """The writer of ``path``: the one ``format`` names, else the one its extension picks (see
    the module). Raises ``ValueError`` naming every format written, and ``option``, how the
    caller chooses one (``"--format "`` for the command), for an unknown ``format``, a name of
    no format without one, and a name of another format than the one given."""
    name = os.fspath(path)
    extension = _extension(name)
    by_name = next((w for w in WRITERS.values() if extension in w.extensions), None)
    ends = f"{quote(name)} ends in {quote(Path(name).suffix)}"
    formats = ", ".join(WRITERS)
    if format is None:
        if by_name is None:
            written = "; ".join(f"{w.shown()}: {w.what}" for w in WRITERS.values())
            raise ValueError(
                f"convert: {ends}, which names no format written ({written}); rename it, or "
                f"choose the format with {option}NAME ({formats})."
            )
        return by_name
    chosen = WRITERS.get(format)
    if chosen is None:
        raise ValueError(f"convert: {option}NAME takes {formats}, got {quote(format)}.")
    if by_name is not None and extension and by_name is not chosen:
        raise ValueError(
            f"convert: {ends}, the extension of {by_name.what} files, but {option}{format} "
            "was asked for; rename it."
        )
    return chosen


def to_file(layer: Any, path: str | os.PathLike[str], format: str | None = None) -> Writer:
    """Write ``layer`` to ``path`` in ``format`` (a name of :data:`WRITERS`), or the format
    its extension picks (see the module); returns the writer used. A name that picks no format
    is refused before anything is written (:func:`writer_for`)."""
    writer = writer_for(path, format)
    writer.write(layer, os.fspath(path))
    return writer
