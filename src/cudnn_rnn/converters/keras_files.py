"""Keras files -> our layers: the fronts over the Keras readers of :mod:`cudnn_rnn.io.keras`
(which return data) and the one Keras builder (:func:`cudnn_rnn.converters.keras.
layer_of_canonical`: float16 and float64 kept, anything else float32)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from cudnn_rnn.converters.keras import layer_of_canonical
from cudnn_rnn.io.files.escaping import names as quoted_names
from cudnn_rnn.io.keras import h5, keras3
from cudnn_rnn.layers import _CudnnRNN

__all__ = ["from_keras3", "from_keras_h5"]


def from_keras_h5(
    path: str | os.PathLike[str],
    *,
    assume_cudnn_activations: bool = False,
    confirm_keras_version: str | None = None,
    simple_rnn_activation: str | Mapping[str, str] = "tanh",
    layers: Sequence[str] | None = None,
    merge_layers: bool = False,
    time_limit: float | None = None,
) -> dict[str, _CudnnRNN]:
    """Our layers for the RNN layers of a Keras 2 ``.h5`` file: ``{Keras layer name: layer}`` in
    the model's order, one entry per Keras layer (a ``Bidirectional`` wrapper is one
    bidirectional layer; a layer inside a nested model is named by its path, ``outer/inner``).

    Each layer computes what the Keras layer computed, its variant of cuDNN's math included
    (activations, ``reset_after=False``, ``go_backwards``, merge modes:
    :mod:`cudnn_rnn.io.keras.variants`). ``assume_cudnn_activations`` (Keras's default
    activations) and ``simple_rnn_activation`` matter only for plain layers of weights-only
    files, and ``confirm_keras_version`` (sigmoid gates after all) only for the plain LSTM/GRU
    layers of weights-only files written by a Keras older than 2.3, whose default gates were
    hard_sigmoid (see :mod:`cudnn_rnn.io.keras.h5`); ``layers`` picks some layer names (the
    others are not built, nor refused for settings we do not compute; the whole file is still
    checked). Every layer that cannot be read is reported in one error, with every reason.

    ``merge_layers=True`` returns each run of consecutive compatible layers as one multi-layer
    layer of ours named ``"first+second+..."`` (see :mod:`cudnn_rnn.io.keras.h5` for what
    "consecutive" means; it needs the model's config, so a weights-only file is refused).
    Stacked layers otherwise stay separate, each with its own input size.

    Our layers take time-major input by default: call them with ``time_major=False`` for
    Keras's batch-major data, and with ``sequence_lengths`` for what a ``Masking`` layer masked.

    The file is read by a separate process (HDF5 can loop forever or crash on a corrupt file;
    then that process is stopped, or dies, and a :class:`KerasH5Error` says so), which must
    finish within ``time_limit`` seconds: by default ``TIME_LIMIT_BASE`` (30) plus
    ``TIME_LIMIT_PER_MIB`` (0.1) per MiB of the file.
    """
    data = h5.read_layers(
        path,
        assume_cudnn_activations=assume_cudnn_activations,
        confirm_keras_version=confirm_keras_version,
        simple_rnn_activation=simple_rnn_activation,
        layers=layers,
        merge_layers=merge_layers,
        time_limit=time_limit,
    )
    return {name: layer_of_canonical(*canonical, h5.OWNER) for name, canonical in data.items()}


def from_keras3(
    path: str | os.PathLike[str], name: str | None = None, *, time_limit: float | None = None
) -> _CudnnRNN:
    """Our layer (CPU, the file's dtype: float16/float64 kept, else float32) computing what the
    RNN layer ``name`` of a ``.keras`` file computes, its variant of cuDNN's math included
    (:mod:`cudnn_rnn.io.keras.variants`); ``name`` may be left out where the model has one RNN
    layer that can be read. Our layers take time-major input by default: call them with
    ``time_major=False`` for Keras's batch-major data, and with ``sequence_lengths`` for what a
    ``Masking`` layer masked."""
    if name is None:
        found = keras3.find_rnns(path, time_limit=time_limit)
        computable = [f.name for f in found if f.computable]
        if len(computable) != 1:
            names = quoted_names([f.name for f in found]) or "none"
            raise ValueError(
                f"{keras3.OWNER}: {os.fspath(path)!r} holds {len(computable)} RNN layers that "
                f"can be read (its RNN layers: {names}); pick one with name=."
            )
        name = computable[0]
    data = keras3.read(path, name, time_limit=time_limit)
    return layer_of_canonical(data.spec, data.weights, data.biases, keras3.OWNER)
