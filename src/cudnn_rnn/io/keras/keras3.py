"""Keras 3 ``.keras`` files -> RNNs as data, without Keras (or TensorFlow) installed.

``model.save("m.keras")`` in Keras 3 writes a zip archive of three members:

==================  ==========================================================================
member              what it holds
==================  ==========================================================================
``config.json``     the model's config: ``{"class_name": "Sequential" | "Functional", "config":
                    {"name", "layers": [...]}}``, each layer ``{"class_name", "config"}`` (its
                    ``name``, ``units``, ``activation``, ``recurrent_activation``, ``use_bias``,
                    ``go_backwards``, GRU's ``reset_after``; a ``Bidirectional``'s ``layer``,
                    ``backward_layer`` and ``merge_mode``; a nested model's own ``layers``)
``metadata.json``   ``{"keras_version", "date_saved"}``
``model.weights.h5``  every variable, an HDF5 dataset named by its place in the model (below)
==================  ==========================================================================

Keras 3 names a layer's place by its class, not its name: the layers of a model are the group
``layers``, in which each layer is the snake-case form of its class name (``LSTM`` -> ``lstm``,
``SimpleRNN`` -> ``simple_rnn``, ``Sequential`` -> ``sequential``), numbered from the second of
a name on within that model (``lstm``, ``lstm_1``, ...), in the order of the config's list. An
RNN layer keeps its variables in its cell, ``PLACE/cell/vars/0``, ``1``, ``2``: ``kernel [I,
G*H]``, ``recurrent_kernel [H, G*H]`` and, with ``use_bias``, the bias (``[G*H]``; GRU
``reset_after``: ``[2, 3H]``, the input then the recurrent biases), gates in Keras's order (LSTM
i, f, c, o; GRU z, r, h). A ``Bidirectional`` keeps its two layers at
``PLACE/forward_layer/...`` and ``PLACE/backward_layer/...``; a nested model its own layers at
``PLACE/layers/...``. So the model with the layers ``first = LSTM``, ``LSTM``, ``core =
Sequential(GRU)`` keeps them at ``layers/lstm``, ``layers/lstm_1`` and
``layers/sequential/layers/gru``. Recent Keras 3 versions also write each layer's name as the
``name`` attribute of its ``PLACE/vars`` group; where it is there it must be the config's name,
so a place is never taken for another layer's.

An RNN is named, as in :mod:`.h5`, by the path of its layer names (``encoder/core/gru``).
What each layer computes (its mode and :class:`~cudnn_rnn.core.variant.Variant`: activations,
GRU ``reset_after``, ``go_backwards``, a ``Bidirectional``'s ``merge_mode``), and every reason
where we compute no such thing, is the Keras 2 reader's judgement (:mod:`.variants`), as the
Keras that wrote the archive meant it: ``metadata.json``'s ``keras_version`` (Keras 3's
``hard_sigmoid`` is ``relu6(x + 3) / 6``, and its defaults ``recurrent_activation="sigmoid"``,
``reset_after=True``; tf-keras's ``.keras`` files mean Keras 2's; an archive without a version is
read as Keras 3's, with a note where that decides what a layer computes).

The archive is read by the one bounded zip reader (:func:`cudnn_rnn.io.files.open_zip`: every entry
checked before any member is inflated, each inflated to exactly its declared size and checked
against its CRC); ``config.json`` may be at most :data:`MAX_CONFIG` bytes, nesting at most
:data:`cudnn_rnn.io.files.MAX_JSON_DEPTH` deep (:func:`cudnn_rnn.io.files.load_json`). HDF5 trusts
its file's bytes (a corrupt file can make it loop or crash), so ``model.weights.h5`` is copied
to a temporary file and read by the Keras ``.h5`` reader's separate process, under its time and
memory limits (``time_limit=``, see :mod:`.h5`), which looks at exactly the places the
config names and follows no link out of the file; the weights' shapes are checked against the
config before anything is built. Weights saved as ``model.weights.npz`` (a pickle) are
refused. Problems with the file raise :class:`Keras3Error`; an RNN computing what we do not is
refused with a ``ValueError`` naming every reason. ``h5py`` is needed (``pip install
cudnn-rnn[h5]``); Keras is never imported.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from cudnn_rnn.io.files.escaping import escape, quote
from cudnn_rnn.io.files.escaping import names as quoted_names
from cudnn_rnn.io.files.json_loader import load_json
from cudnn_rnn.io.files.opening import FormatError
from cudnn_rnn.io.files.sniffing import ZIP, sniff
from cudnn_rnn.io.files.zip_reader import open_zip
from cudnn_rnn.io.found import FoundRNN, ReadRNN
from cudnn_rnn.io.keras.h5 import _check_sizes, _read, _Stack, found_record, read_record
from cudnn_rnn.io.keras.h5_file import (
    _MISSING,
    KerasH5Error,
    _attribute,
    _child,
    _Dataset,
    _dataset,
    _File,
    _Group,
    _Link,
    _Node,
    _text,
)
from cudnn_rnn.io.keras.h5_layers import (
    _MODEL_CLASSES,
    _WRAPPER,
    _has_rnn,
    _layer_name,
    _model_layers,
)
from cudnn_rnn.io.keras.h5_plans import (
    _Direction,
    _is_rnn_class,
    _Plan,
    _plan_from_config,
    _refusal,
    _Refused,
)
from cudnn_rnn.io.keras.variants import UNKNOWN_KERAS_VERSION, Dialect

__all__ = [
    "CONFIG",
    "KIND",
    "MAX_CONFIG",
    "WEIGHTS",
    "Keras3Error",
    "find_rnns",
    "is_keras3",
    "read",
]

#: How messages name the reader: by its format's name (the registry's), as ``inspect`` does.
OWNER = "keras3"
#: The kind of file :func:`is_keras3` tells (``FoundRNN.format``).
KIND = "keras3"
CONFIG = "config.json"
WEIGHTS = "model.weights.h5"
_NPZ_WEIGHTS = "model.weights.npz"
#: The largest ``config.json`` read (a model of thousands of layers takes a few MiB).
MAX_CONFIG = 64 << 20
METADATA = "metadata.json"
#: The largest ``metadata.json`` read (Keras writes a few dozen bytes).
MAX_METADATA = 1 << 20
_MAX_WEIGHTS = 3  # kernel, recurrent_kernel, bias


class Keras3Error(FormatError):
    """A file that is not a readable Keras 3 ``.keras`` archive (its config or its weights)."""


def is_keras3(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a Keras 3 ``.keras`` file, by content: a zip archive (that the zip
    reader accepts) holding ``config.json`` and ``model.weights.h5`` (or ``.npz``). Nothing is
    inflated."""
    if sniff(path) != ZIP:
        return False
    with open_zip(path) as archive:
        names = set(archive.names())
    return CONFIG in names and bool({WEIGHTS, _NPZ_WEIGHTS} & names)


def find_rnns(path: str | os.PathLike[str], *, time_limit: float | None = None) -> list[FoundRNN]:
    """Every RNN layer of the model (nested models' by their path of names), what it becomes
    (its variant in ``details["variant"]`` and its first note) and, where it cannot be read,
    every reason. Weights are looked at (their shapes give the sizes, checked against the
    config), not read."""
    with _errors(), _opened(path) as (layers, weights, shown, dialect):
        h5 = _weights(weights, layers, False, time_limit, shown)
        return [found_record(p.config(), KIND) for p in _plans(h5, layers, dialect)]


def tensor_shapes(path: str | os.PathLike[str]) -> dict[str, tuple[tuple[int, ...], str]]:
    """Name -> (shape, dtype name) of the RNN layers' weights in the archive's
    ``model.weights.h5`` (``layers/lstm/cell/vars/0``...), from their descriptions: no weight
    is read, and nothing else of the file is looked at."""
    with _errors(), _opened(path) as (layers, weights, shown, _):
        h5 = _weights(weights, layers, False, None, shown)
    out: dict[str, tuple[tuple[int, ...], str]] = {}

    def walk(node: _Node, at: str) -> None:
        if isinstance(node, _Dataset):
            out[at] = (node.shape, node.dtype)
        elif isinstance(node, _Group):
            for name, link in node.links.items():
                if isinstance(link, _Link) and link.target is not None:
                    walk(link.target, f"{at}/{name}" if at else name)

    walk(h5.root, "")
    return out


def read(path: str | os.PathLike[str], name: str, *, time_limit: float | None = None) -> ReadRNN:
    """The RNN layer ``name`` (as :func:`find_rnns` lists it) as pure data: its spec (its
    variant included) and canonical tensors (cuDNN's gate order, the file's dtype), with its
    record's notes. A ``ValueError`` names every reason where we compute no such layer, or lists
    the file's RNN layers where it has none of that name."""
    with _errors(), _opened(path) as (layers, weights, shown, dialect):
        h5 = _weights(weights, layers, True, time_limit, shown)
        plans = _plans(h5, layers, dialect)
        plan = next((p for p in plans if p.name == name), None)
        if plan is None:
            known = [p.name for p in plans]
            raise ValueError(
                f"{h5.who} has no RNN layer {name!r}; its RNN layers: {known or 'none'}."
            )
        if isinstance(plan, _Refused):
            raise ValueError(_refusal(h5, [plan]))
        _check_sizes(h5, [plan])
        return read_record(h5, _Stack((plan,)), KIND)


# -- the archive ----------------------------------------------------------------------------


@contextlib.contextmanager
def _errors() -> Iterator[None]:
    """The Keras .h5 reader's errors, raised on a .keras file's weights, as Keras3Error."""
    try:
        yield
    except KerasH5Error as err:
        raise Keras3Error(str(err)) from err


@contextlib.contextmanager
def _opened(path: str | os.PathLike[str]) -> Iterator[tuple[list[_Layer], str, str, Dialect]]:
    """The RNN layers of the archive's config, the path of a temporary copy of its weights file
    (removed when the block ends), the file as messages show it, and what the Keras that wrote
    it meant (its ``metadata.json``'s ``keras_version``)."""
    shown = f"{os.fspath(path)!r}"
    who = f"{OWNER}: {shown}"
    with open_zip(path, "Keras 3 .keras file") as archive:
        config_entry, weights_entry = archive.get(CONFIG), archive.get(WEIGHTS)
        if config_entry is None or weights_entry is None:
            held = quoted_names(archive.names()) or "no member"
            npz = " (weights saved as model.weights.npz, a pickle, are not read)"
            raise Keras3Error(
                f"{who} is not a Keras 3 .keras file: it holds {held}, not {CONFIG} and "
                f"{WEIGHTS}{npz if archive.get(_NPZ_WEIGHTS) else ''}."
            )
        for entry, limit in ((config_entry, MAX_CONFIG), (archive.get(METADATA), MAX_METADATA)):
            if entry is not None and entry.size > limit:
                raise Keras3Error(
                    f"{who}: its {entry.name} is {entry.size} bytes, more than the {limit} read."
                )
        layers = _rnn_layers(_config(bytes(archive.read(config_entry)), who), who)
        metadata = archive.get(METADATA)
        raw = None if metadata is None else bytes(archive.read(metadata))
        dialect = _dialect(raw, who)
        with tempfile.TemporaryDirectory(prefix="cudnn_rnn_keras3_") as folder:
            weights = os.path.join(folder, WEIGHTS)
            with open(weights, "wb") as out:
                out.write(archive.read(weights_entry))  # CRC-checked, never above its size
            yield layers, weights, shown, dialect


def _dialect(raw: bytes | None, who: str) -> Dialect:
    """What the Keras that wrote the archive meant, by its ``metadata.json``'s
    ``keras_version`` (Keras 3's where it records none: Keras 3 writes it)."""
    if raw is None:
        return Dialect(UNKNOWN_KERAS_VERSION, fallback=3)
    metadata = load_json(
        raw, lambda reason: Keras3Error(f"{who}: its {METADATA} {reason}."), max_size=MAX_METADATA
    )
    version = metadata.get("keras_version") if isinstance(metadata, dict) else None
    return Dialect(version if isinstance(version, str) else UNKNOWN_KERAS_VERSION, fallback=3)


def _weights(
    path: str, layers: list[_Layer], values: bool, time_limit: float | None, shown: str
) -> _File:
    """What the reader process saw of the weights file at the layers' places (and their values
    when ``values``); its messages name the archive."""
    h5 = _read(
        path, values, time_limit, paths=_places(layers), owner=OWNER, shown=f"{shown} ({WEIGHTS})"
    )
    return dataclasses.replace(h5, who=f"{OWNER}: {shown}")


def _config(raw: bytes, who: str) -> dict[str, Any]:
    config = load_json(
        raw, lambda reason: Keras3Error(f"{who}: its {CONFIG} {reason}."), max_size=MAX_CONFIG
    )
    if not isinstance(config, dict) or config.get("class_name") not in _MODEL_CLASSES:
        cls = config.get("class_name") if isinstance(config, dict) else None
        raise Keras3Error(
            f"{who}: its {CONFIG} describes no Sequential or Functional model (class "
            f"{quote(cls)}); the layers of a subclassed model are not listed in its "
            "config, so its RNNs cannot be found."
        )
    if _model_layers(config) is None:
        raise Keras3Error(f"{who}: its {CONFIG} has no list of layers (class_name, config).")
    return config


# -- where each layer's weights are ---------------------------------------------------------


def snake_case(class_name: str) -> str:
    """Keras 3's name for a layer of class ``class_name`` in a weights file (``SimpleRNN`` ->
    ``simple_rnn``): characters other than letters, digits and ``_`` dropped; an ``_`` put
    before each capital that starts a capitalized word (a capital then lower-case letters) and
    is not the first character, and between a lower-case letter and a capital; lower case."""
    name = re.sub(r"\W+", "", class_name)
    out = []
    for i, char in enumerate(name):
        starts_word = char.isupper() and i + 1 < len(name) and name[i + 1].islower()
        after_lower = char.isupper() and i > 0 and name[i - 1].islower()
        if i > 0 and (starts_word or after_lower):
            out.append("_")
        out.append(char)
    return "".join(out).lower()


@dataclass(frozen=True)
class _Layer:
    """A layer that is not a model: its path of names, its place in the weights file, its
    config entry."""

    name: str
    place: str
    entry: dict[str, Any]

    @property
    def sides(self) -> list[tuple[str, dict[str, Any]]]:
        """The place and config of each RNN whose cell holds the layer's weights: the layer's
        own, or a Bidirectional's two (Keras builds the backward one from the forward one's
        config where the config has none)."""
        config = self.entry["config"]
        if self.entry.get("class_name") != _WRAPPER:
            return [(self.place, config)]
        forward = config.get("layer")
        backward = config.get("backward_layer") or forward
        return [
            (f"{self.place}/{side}", inner.get("config", {}) if isinstance(inner, dict) else {})
            for side, inner in (("forward_layer", forward), ("backward_layer", backward))
        ]


def _layers(
    entries: list[dict[str, Any]], scope: tuple[str, ...], place: str, who: str
) -> list[_Layer]:
    """The layers of a model's config, nested models' layers in their place (see the module)."""
    out: list[_Layer] = []
    used: dict[str, int] = {}
    for entry in entries:
        cls = entry.get("class_name")
        group = snake_case(cls) if isinstance(cls, str) else ""
        count = used.get(group)
        used[group] = 0 if count is None else count + 1
        own = f"{place}/{group}" + ("" if count is None else f"_{count + 1}")
        name = (*scope, _layer_name(entry))
        if cls not in _MODEL_CLASSES:
            out.append(_Layer("/".join(name), own, entry))
            continue
        inner = _model_layers(entry)
        if inner is None and _has_rnn(entry):
            raise Keras3Error(
                f"{who}: the config of nested model {'/'.join(name)!r} has no list of layers "
                "(class_name, config)."
            )
        out.extend(_layers(inner or [], name, f"{own}/layers", who))
    return out


def _rnn_layers(config: dict[str, Any], who: str) -> list[_Layer]:
    """The RNN layers of the model (and the layers Keras 2's reader takes for ones to refuse)."""
    return [
        layer
        for layer in _layers(_model_layers(config) or [], (), "layers", who)
        if isinstance(layer.entry.get("class_name"), str)
        and _is_rnn_class(layer.entry["class_name"], layer.entry)
    ]


def _places(layers: list[_Layer]) -> list[str]:
    """Every object of the weights file the reader process looks at."""
    out = []
    for layer in layers:
        out.append(f"{layer.place}/vars")
        for side, _ in layer.sides:
            out.extend(f"{side}/cell/vars/{i}" for i in range(_MAX_WEIGHTS + 1))
    return out


def _plans(h5: _File, layers: list[_Layer], dialect: Dialect) -> list[_Plan | _Refused]:
    """What each RNN layer becomes, or why it cannot."""
    out: list[_Plan | _Refused] = []
    for layer in layers:
        where = f"{h5.who}: layer {layer.name!r}"
        _check_place(h5, layer, where)
        # What the config says first: a layer refused for its settings needs no weights.
        refused = _keras2_only(layer) or _judged(layer, where, dialect)
        if refused is not None:
            out.append(refused)
            continue
        directions = tuple(_direction(h5, side, c, layer, where) for side, c in layer.sides)
        out.append(_plan_from_config(layer.name, layer.entry, directions, where, dialect))
    return out


def _judged(layer: _Layer, where: str, dialect: Dialect) -> _Refused | None:
    """The layer refused for its config alone, or None where its weights must be looked at."""
    try:
        plan = _plan_from_config(layer.name, layer.entry, (), where, dialect)
    except KerasH5Error:  # no weights given: the config asks for them
        return None
    return plan if isinstance(plan, _Refused) else None


def _keras2_only(layer: _Layer) -> _Refused | None:
    """CuDNNLSTM and CuDNNGRU, which only Keras 2 has, refused (their weights are not laid out
    as Keras 3 lays out any of its own)."""
    cls = str(layer.entry.get("class_name"))
    inner = layer.entry["config"].get("layer") if cls == _WRAPPER else None
    classes = [cls, inner.get("class_name") if isinstance(inner, dict) else None]
    if not any(isinstance(c, str) and c.startswith("CuDNN") for c in classes):
        return None
    return _Refused(
        layer.name,
        escape(cls),
        (
            "CuDNNLSTM and CuDNNGRU are Keras 2 layers, which Keras 3 does not have; rebuild "
            "the model with LSTM or GRU(reset_after=True), which compute the same math.",
        ),
    )


def _check_place(h5: _File, layer: _Layer, where: str) -> None:
    """Where the weights file names the layer at its place, the name must be the config's."""
    group = _child(h5, h5.root, f"{layer.place}/vars")
    value = _attribute(h5, group, "name") if group is not None else _MISSING
    if value is _MISSING:
        return
    own = layer.name.rsplit("/", 1)[-1]
    stored = _text(value, f"the name of {layer.place!r}", h5.who)
    if stored != own:
        raise Keras3Error(
            f"{where}: the weights file holds layer {stored!r} at {layer.place!r}, where the "
            "config puts this one; the file is inconsistent (or written by a Keras that "
            "places layers otherwise)."
        )


def _direction(
    h5: _File, side: str, config: dict[str, Any], layer: _Layer, where: str
) -> _Direction:
    """One direction's weights at ``side``, as many as its config's ``use_bias`` says."""
    group = _child(h5, h5.root, f"{side}/cell/vars")
    if not isinstance(group, _Group):
        raise Keras3Error(f"{where}: the weights file has no variables at {side}/cell/vars.")
    names = [str(i) for i in range(_MAX_WEIGHTS + 1) if _child(h5, group, str(i)) is not None]
    wanted = ["0", "1", "2"] if config.get("use_bias", True) else ["0", "1"]
    if names != wanted:
        raise Keras3Error(
            f"{where}: {side}/cell/vars holds the variables {names}, not {wanted}: kernel, "
            "recurrent_kernel and, with use_bias, bias."
        )
    kernel, recurrent, *bias = (_dataset(h5, group, n, layer.name) for n in names)
    return _Direction(kernel, recurrent, bias[0] if bias else None)
