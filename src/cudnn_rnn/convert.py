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
    "from_keras",
    "from_keras_h5",
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


def from_torch(module: Any) -> Any:
    """Our layer computing what a ``torch.nn.LSTM/GRU/RNN`` computes."""
    return converter("torch", "from")(module)


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


def from_onnx(path: Any) -> Any:
    """Our layer from an ONNX model of standard LSTM/GRU/RNN nodes."""
    return converter("onnx", "from")(path)
