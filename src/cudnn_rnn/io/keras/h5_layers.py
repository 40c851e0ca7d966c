"""What a Keras 2 ``.h5`` file holds: its layers, nested models' in their place, and which
layer feeds which.

Two places say it. The weights group (``model_weights`` of a whole-model file, the file itself
for weights only) lists its layers (``layer_names``), each a group listing its weights
(``weight_names``). A whole-model file's ``model_config`` JSON lists the layers with their
classes and settings, nested models' inside theirs (:func:`_config_leaves`), and says which
layer's output goes to which (:func:`_links`, what ``merge_layers`` needs); a weights-only file
has only the names, from which its nested models are guessed (:func:`_weights_only_leaves`).
Each layer that is not a model is a :class:`_Leaf`: its path of names, the group that holds its
weights and its config; what each RNN among them becomes is decided in :mod:`.h5_plans`. The
config's vocabulary (:data:`_MODEL_CLASSES`, :func:`_model_layers`...) serves the Keras 3
reader too.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from cudnn_rnn.io import files
from cudnn_rnn.io.keras.h5_file import (
    _MISSING,
    KerasH5Error,
    _attribute,
    _child,
    _File,
    _Group,
    _names,
    _Node,
    _text,
)

__all__ = ["MAX_CONFIG"]

_WRAPPER = "Bidirectional"
_MODEL_CLASSES = ("Sequential", "Functional", "Model")
#: The largest ``model_config`` read, in bytes (a model of thousands of layers takes a few MiB),
#: as Keras 3's ``config.json``; it nests at most :data:`cudnn_rnn.io.files.MAX_JSON_DEPTH` deep.
MAX_CONFIG = 64 << 20


# -- the weights group -----------------------------------------------------------------------


def _weights_root(h5: _File) -> _Node:
    """The group holding one subgroup per layer: ``model_weights`` of a whole-model file, the
    file itself for weights only."""
    inner = _child(h5, h5.root, "model_weights")
    root = h5.root if inner is None else inner
    if _attribute(h5, root, "layer_names") is _MISSING:
        raise KerasH5Error(
            f"{h5.who} is not a Keras 2 model or weights file (no 'layer_names'); a "
            "Keras 3 .keras file is read by cudnn_rnn.load and cudnn_rnn.find_rnns, and a "
            "Keras 3 .weights.h5 alone records no layers: load it in Keras 3 and use "
            "cudnn_rnn.convert.from_keras."
        )
    return root


def _layer_names(h5: _File, root: _Node) -> list[str]:
    return _names(h5, root, "layer_names", "the weights group")


def _group(h5: _File, root: _Node, layer: str) -> _Group:
    group = _child(h5, root, layer)
    if not isinstance(group, _Group):
        raise KerasH5Error(f"{h5.who}: layer {layer!r} has no weights group.")
    return group


def _weight_names(h5: _File, group: _Group, layer: str) -> list[str]:
    return _names(h5, group, "weight_names", f"layer {layer!r}")


# -- the model config ------------------------------------------------------------------------


def _config_model(h5: _File) -> dict[str, Any] | None:
    """The model's config (``class_name``, ``config``), or None for a weights-only file."""
    who = h5.who
    value = _attribute(h5, h5.root, "model_config")
    if value is _MISSING:
        return None
    text = _text(value, "model_config", who)
    config = files.load_json(
        text, lambda reason: KerasH5Error(f"{who}: model_config {reason}."), max_size=MAX_CONFIG
    )
    if not isinstance(config, dict) or _model_layers(config) is None:
        raise KerasH5Error(f"{who}: model_config has no list of layers (class_name, config).")
    return config


def _model_layers(model: dict[str, Any]) -> list[dict[str, Any]] | None:
    """A model config's layer entries, or None when they are not a list of ``{class_name,
    config}`` (a nested model's config may itself be the list, as Keras 2.0/2.1 wrote a
    Sequential's)."""
    inner = model.get("config")
    layers = inner.get("layers") if isinstance(inner, dict) else inner
    if not isinstance(layers, list):
        return None
    for entry in layers:
        if not isinstance(entry, dict):
            return None
        config = entry.get("config")
        if not isinstance(config, dict) and not (
            entry.get("class_name") in _MODEL_CLASSES and isinstance(config, list)
        ):
            return None
    return layers


def _layer_name(entry: dict[str, Any]) -> str:
    config = entry["config"]
    name = config.get("name", entry.get("name")) if isinstance(config, dict) else entry.get("name")
    return name if isinstance(name, str) else ""


def _has_rnn(entry: Any) -> bool:
    """Whether a (nested) config holds an RNN layer class anywhere."""
    if isinstance(entry, dict):
        cls = entry.get("class_name")
        if isinstance(cls, str) and cls not in _MODEL_CLASSES and cls != "TimeDistributed":
            if cls == _WRAPPER or any(token in cls for token in ("LSTM", "GRU", "RNN")):
                return True
        return any(_has_rnn(v) for v in entry.values())
    if isinstance(entry, list):
        return any(_has_rnn(v) for v in entry)
    return False


# -- which layers the file holds -------------------------------------------------------------


@dataclass(frozen=True)
class _Leaf:
    """A layer that is not a model: its name (``outer/inner`` inside nested models), the
    top-level layer group holding its weights, the nested models above it, its own name, its
    config (None in a weights-only file) and, in a weights-only file, its weight names."""

    name: str
    group: str
    scope: tuple[str, ...]
    own: str
    entry: dict[str, Any] | None
    weights: tuple[str, ...] = ()
    twin: bool = False  # another layer under the same group has its own name


def _config_leaves(
    h5: _File, layers: list[dict[str, Any]], group: str | None, scope: tuple[str, ...]
) -> list[_Leaf]:
    """The layers of a model config, nested models' layers in their place. Keras writes a
    nested model's weights, all its layers' (however deep) flattened, under the top-level
    layer's group, each weight name starting with its own layer's name."""
    out: list[_Leaf] = []
    for entry in layers:
        own = _layer_name(entry)
        path = "/".join((*scope, own))
        if entry.get("class_name") in _MODEL_CLASSES:
            inner = _model_layers(entry)
            if inner is None and not _has_rnn(entry):
                continue  # nothing of ours in it: skipped like any other layer
            if inner is None:
                raise KerasH5Error(
                    f"{h5.who}: the config of nested model {path!r} has no list of "
                    "layers (class_name, config)."
                )
            out.extend(_config_leaves(h5, inner, group or own, (*scope, own)))
        else:
            out.append(_Leaf(path, group or own, scope, own, entry))
    if group is None:  # the top: mark nested layers whose weights a name cannot tell apart
        seen: defaultdict[tuple[str, str], int] = defaultdict(int)
        for leaf in out:
            seen[leaf.group, leaf.own] += 1 if leaf.scope else 0
        out = [
            _Leaf(leaf.name, leaf.group, leaf.scope, leaf.own, leaf.entry, twin=True)
            if leaf.scope and seen[leaf.group, leaf.own] > 1
            else leaf
            for leaf in out
        ]
    return out


def _owned(leaf: _Leaf, weights: list[str]) -> list[str]:
    """The weight names of a nested layer among its group's: those whose scope starts with its
    own name, after any names of the models above it (which some Keras versions put first)."""
    out = []
    for weight in weights:
        scope = weight.split("/")[:-1]
        while len(scope) > 1 and scope[0] in leaf.scope and scope[0] != leaf.own:
            scope = scope[1:]
        if scope and scope[0] == leaf.own:
            out.append(weight)
    return out


def _weights_only_leaves(h5: _File, root: _Node, names: list[str]) -> list[_Leaf]:
    out = []
    for layer in names:
        weights = _weight_names(h5, _group(h5, root, layer), layer)
        for own, owned in _split_nested(layer, weights):
            if own is None:
                out.append(_Leaf(layer, layer, (), layer, None, tuple(owned)))
            else:
                out.append(_Leaf(f"{layer}/{own}", layer, (layer,), own, None, tuple(owned)))
    return out


def _split_nested(layer: str, weights: list[str]) -> list[tuple[str | None, list[str]]]:
    """A weights-only file's layer group as ``[(None, its weight names)]`` for one layer, or
    ``[(inner layer, its weight names), ...]`` for a nested model.

    A layer's weight names all start with one name (its own: ``lstm/lstm_cell/kernel:0``;
    a Bidirectional's then go on with ``forward_...`` and ``backward_...``). A nested model's
    start with its layers' names (``lstm/...``, ``dense/...``), or with its own name and then
    theirs (``encoder/lstm_1/kernel:0``, as graph-mode Keras scoped them). A nested model whose
    only layer with weights is an RNN cannot be told from that layer: it is read under the
    outer name.
    """
    scopes = [w.split("/")[:-1] for w in weights]

    def names_at(depth: int) -> list[str]:
        return list(dict.fromkeys(s[depth] if len(s) > depth else "" for s in scopes))

    firsts = names_at(0)
    depth = None
    if len(firsts) > 1 and "" not in firsts:
        depth = 0
    elif firsts == [layer]:
        seconds = names_at(1)
        is_pair = len(seconds) == 2 and seconds[0].startswith("forward_")
        is_pair = is_pair and seconds[1].startswith("backward_")
        if len(seconds) > 1 and "" not in seconds and not is_pair:
            depth = 1
    if depth is None:
        return [(None, weights)]
    return [
        (inner, [w for w, s in zip(weights, scopes) if s[depth] == inner])
        for inner in names_at(depth)
    ]


def _links(config: dict[str, Any], scope: tuple[str, ...] = ()) -> dict[str, str]:
    """``{A: B}`` (path names) for each layer A whose output goes to layer B alone, B taking
    nothing else, in the same model: the next layer of a Sequential, or in a Functional model
    the one layer whose only input is A's first output (no ``initial_state``, no other call
    arguments), A called once and its outputs used nowhere else (not even as the model's)."""
    layers = _model_layers(config) or []
    names = [_layer_name(entry) for entry in layers]
    path = {name: "/".join((*scope, name)) for name in names}
    out: dict[str, str] = {}
    for entry, name in zip(layers, names):
        if entry.get("class_name") in _MODEL_CLASSES:
            out.update(_links(entry, (*scope, name)))
    if config.get("class_name") == "Sequential":
        out.update((path[names[i - 1]], path[names[i]]) for i in range(1, len(names)))
        return out
    uses: defaultdict[str, int] = defaultdict(int)
    fed_by: dict[str, str] = {}
    called_once = set()
    for entry, name in zip(layers, names):
        nodes = entry.get("inbound_nodes")
        if not isinstance(nodes, list):
            continue
        inputs = [t for node in nodes if isinstance(node, list) for t in node]
        for t in inputs:
            if isinstance(t, list) and t and isinstance(t[0], str):
                uses[t[0]] += 1
        called_once.update([name] if len(nodes) == 1 else [])
        if len(nodes) == 1 and len(inputs) == 1 and isinstance(inputs[0], list):
            source = inputs[0]
            kwargs = source[3] if len(source) == 4 else {}
            if len(source) in (3, 4) and source[1:3] == [0, 0] and kwargs in ({}, None):
                fed_by[name] = str(source[0])
    inner = config.get("config")
    outputs = inner.get("output_layers", []) if isinstance(inner, dict) else []
    if isinstance(outputs, list) and outputs and isinstance(outputs[0], str):
        outputs = [outputs]  # one output, written flat by some Keras versions
    for t in outputs if isinstance(outputs, list) else []:
        if isinstance(t, list) and t and isinstance(t[0], str):
            uses[t[0]] += 1
    for b, a in fed_by.items():
        if a in path and uses[a] == 1 and a in called_once:
            out[path[a]] = path[b]
    return out
