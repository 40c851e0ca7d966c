"""Move RNNs between our layers and ``torch.nn``, Keras 3, ONNX and Keras 2 ``.h5`` files.

Every converter is registered here under ``(target, way)`` with a note on what it keeps; the
implementations live in :mod:`cudnn_rnn.formats` and load only when used, so Keras and ONNX stay
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
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CONVERTERS",
    "Converter",
    "converter",
    "find_rnns",
    "from_keras",
    "from_keras_h5",
    "from_numpy_canonical",
    "from_onnx",
    "from_torch",
    "to_keras",
    "to_onnx",
    "to_torch",
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
            "cudnn_rnn.formats.torch_nn",
            "to_torch",
            "lossless; skip_input becomes an identity weight_ih_l0",
        ),
        Converter("torch", "from", "cudnn_rnn.formats.torch_nn", "from_torch", "lossless"),
        Converter(
            "keras",
            "to",
            "cudnn_rnn.formats.keras",
            "to_keras",
            "equal outputs; LSTM/SimpleRNN biases summed",
        ),
        Converter("keras", "from", "cudnn_rnn.formats.keras", "from_keras", "lossless"),
        Converter("onnx", "to", "cudnn_rnn.formats.onnx", "to_onnx", "lossless"),
        Converter("onnx", "from", "cudnn_rnn.formats.onnx", "from_onnx", "lossless"),
        Converter(
            "numpy",
            "from",
            "cudnn_rnn.formats.npz",
            "from_numpy_canonical",
            "lossless (canonical weights and both biases, checked against the configuration)",
        ),
        Converter(
            "keras_h5",
            "from",
            "cudnn_rnn.formats.keras_h5",
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


def to_torch(layer: Any) -> Any:
    """``torch.nn.LSTM/GRU/RNN`` computing what ``layer`` computes."""
    return converter("torch", "to")(layer)


def from_torch(source: Any, **kwargs: Any) -> Any:
    """Our layer computing what a ``torch.nn.LSTM/GRU/RNN`` (or ``LSTMCell``/``GRUCell``/
    ``RNNCell``, a state_dict or a torch file) computes; see
    :func:`cudnn_rnn.formats.torch_nn.from_torch` for ``prefix=`` and ``activation=``."""
    return converter("torch", "from")(source, **kwargs)


def to_keras(layer: Any) -> Any:
    """Keras layers (one per layer) computing what ``layer`` computes (batch-major)."""
    return converter("keras", "to")(layer)


def from_keras(layers: Any) -> Any:
    """Our layer from a Keras LSTM/GRU(reset_after=True)/SimpleRNN/Bidirectional (or a list)."""
    return converter("keras", "from")(layers)


def from_keras_h5(path: Any, **kwargs: Any) -> Any:
    """``{layer name: our layer}`` for the RNN layers of a Keras 2 / tf.keras 1.x ``.h5`` file
    (``CuDNNLSTM``, ``CuDNNGRU``, ``LSTM``, ``GRU(reset_after=True)``, ``SimpleRNN``,
    ``Bidirectional``); see :func:`cudnn_rnn.formats.keras_h5.from_keras_h5` for the options."""
    return converter("keras_h5", "from")(path, **kwargs)


def to_onnx(layer: Any, path: Any, **kwargs: Any) -> Any:
    """Write ``layer`` as an ONNX model with the standard RNN operators."""
    return converter("onnx", "to")(layer, path, **kwargs)


def from_onnx(path: Any, **kwargs: Any) -> Any:
    """Our layer from an ONNX model's standard LSTM/GRU/RNN node (``node=`` picks one of those
    :func:`find_rnns` lists); see :func:`cudnn_rnn.formats.onnx.from_onnx`."""
    return converter("onnx", "from")(path, **kwargs)


def from_numpy_canonical(source: Any, *args: Any, **kwargs: Any) -> Any:
    """Our layer from canonical weights given as NumPy arrays: an ``.npz`` that
    ``np.savez(path, *weights, *biases)`` wrote, or the arrays themselves, with the layer's
    configuration; see :func:`cudnn_rnn.formats.npz.from_numpy_canonical`."""
    return converter("numpy", "from")(source, *args, **kwargs)


def find_rnns(path: Any, **options: Any) -> Any:
    """Every RNN a file holds, whatever its format (told by its content): a list of
    :class:`cudnn_rnn.formats.found.FoundRNN`, each with where it is (an ONNX node's path at any
    depth, a torch state_dict prefix, a Keras layer path, a checkpoint's scope), its mode, sizes
    and direction, and whether cuDNN's math computes it (and if not, every reason). Its ``name``
    picks it for the loaders (``from_onnx(path, node=)``, ``from_torch(path, prefix=)``,
    ``from_keras_h5(path, layers=[...])``, ``cudnn-rnn convert --model``). ``options``:
    ``activation`` (plain RNNs whose files do not say tanh or relu) and the Keras reader's
    ``confirm_keras_version``, ``merge_layers``."""
    from cudnn_rnn import model_files

    return model_files.find_rnns(str(path), **options)
