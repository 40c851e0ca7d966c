"""What each RNN layer of a Keras file becomes, or every reason it cannot be read.

A :class:`_Plan` is an RNN layer checked: our mode and :class:`~cudnn_rnn.core.variant.Variant`,
its Keras class, and its weights (a :class:`_Direction` each way) checked against what the layer
implies. A :class:`_Refused` is one that computes something we do not, with a sentence for each
setting that says so and what to do; :func:`_refusal` puts every reason of every refused layer in
one message.

A layer with a config is judged by its class and settings (:func:`.variants.judge`,
:func:`_plan_from_config`), as the Keras that wrote it meant them (a
:class:`~.variants.Dialect`: which ``hard_sigmoid``, the defaults of a setting the config leaves
out). A layer of a weights-only file has only its weights' shapes (:func:`_plan_from_shapes`) and
the caller's word for its activations (:class:`_Options`): Keras's defaults, which depend on the
file's ``keras_version`` (hard_sigmoid gates before Keras 2.3). :func:`_plans` judges every layer
that :mod:`.h5_layers` finds in a Keras 2 file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from cudnn_rnn.core.constants import CUDNN_GRU, CUDNN_LSTM
from cudnn_rnn.core.gates import GATE_ORDERS
from cudnn_rnn.core.variant import CUDNN, Activation, Variant
from cudnn_rnn.io import files
from cudnn_rnn.io.keras.h5_file import (
    _MISSING,
    KerasH5Error,
    _attribute,
    _Dataset,
    _dataset,
    _File,
    _Group,
    _Node,
    _text,
)
from cudnn_rnn.io.keras.h5_layers import (
    _WRAPPER,
    _config_leaves,
    _config_model,
    _group,
    _has_rnn,
    _layer_names,
    _Leaf,
    _links,
    _model_layers,
    _owned,
    _weight_names,
    _weights_only_leaves,
    _weights_root,
)
from cudnn_rnn.io.keras.variants import (
    CLASSES,
    SIGMOID_DEFAULT_SINCE,
    UNKNOWN_KERAS_VERSION,
    Dialect,
    Judged,
    judge,
    merged,
)

__all__ = ["SIGMOID_DEFAULT_SINCE", "UNKNOWN_KERAS_VERSION"]


@dataclass(frozen=True)
class _Direction:
    """One direction's weights, as dataset descriptions."""

    kernel: _Dataset
    recurrent: _Dataset
    bias: _Dataset | None


@dataclass(frozen=True)
class _Refused:
    """An RNN layer of the file that cannot be read, with every reason why: each a sentence that
    names the setting and says what to do."""

    name: str
    shown: str | None  # the Keras class as shown ("LSTM", "Bidirectional(GRU)"); None: unknown
    problems: tuple[str, ...]

    @property
    def label(self) -> str:
        return f"{self.name!r}" + (f" ({self.shown})" if self.shown else "")

    def config(self) -> dict[str, Any]:
        return {"layer": self.name, "refused": " ".join(self.problems), "reasons": self.problems}


@dataclass(frozen=True)
class _Plan:
    """One RNN layer of the file, checked: what it becomes and where its weights are."""

    name: str
    keras_class: str
    mode: str
    cudnn: bool
    directions: tuple[_Direction, ...]
    variant: Variant = CUDNN
    notes: tuple[str, ...] = ()  # what the file leaves to a default a user should know

    @property
    def num_units(self) -> int:
        return int(self.directions[0].recurrent.shape[0])

    @property
    def input_size(self) -> int:
        return int(self.directions[0].kernel.shape[0])

    @property
    def output_width(self) -> int:
        """The width of its output: both directions' side by side, or merged into one."""
        dirs = len(self.directions) if self.variant.merge == "concat" else 1
        return dirs * self.num_units

    @property
    def dtypes(self) -> set[str]:
        weights = [ds for d in self.directions for ds in (d.kernel, d.recurrent, d.bias)]
        return {ds.dtype for ds in weights if ds is not None}

    def config(self) -> dict[str, Any]:
        return {
            "layer": self.name,
            "keras_class": self.keras_class,
            "rnn_mode": self.mode,
            "num_units": self.num_units,
            "input_size": self.input_size,
            "direction": "bidirectional" if len(self.directions) == 2 else "unidirectional",
            **({} if self.variant.is_cudnn else {"variant": self.variant.as_dict()}),
            **({"notes": list(self.notes)} if self.notes else {}),
        }


@dataclass(frozen=True)
class _Options:
    """What the caller says about what the file does not record."""

    assume: bool  # plain layers of a weights-only file used Keras's default activations
    confirm: str | None  # ... but sigmoid gates, where the file's Keras defaulted to hard_sigmoid
    simple_activation: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Found:
    """What each RNN layer becomes, the layers by name, and which layer feeds which (None: a
    weights-only file, which does not record it)."""

    plans: list[_Plan | _Refused]
    leaves: dict[str, _Leaf]
    links: dict[str, str] | None

    def only(self, names: Sequence[str]) -> _Found:
        return _Found([p for p in self.plans if p.name in names], self.leaves, self.links)


# -- the Keras that wrote the file (its rules: .variants) ----------------------------------


def _keras_version(h5: _File, root: _Node) -> str:
    """The ``keras_version`` attribute where Keras's own loader reads it (the weights group),
    else the file's; ``UNKNOWN_KERAS_VERSION`` without one."""
    for node in (root, h5.root):
        value = _attribute(h5, node, "keras_version")
        if value is not _MISSING:
            return _text(value, "keras_version", h5.who)
    return UNKNOWN_KERAS_VERSION


def _default_gates(dialect: Dialect, confirm: str | None) -> tuple[Activation, tuple[str, ...]]:
    """The gates' activation of a weights-only file's plain LSTM and GRU layers built with
    Keras's defaults, and the note that says so where that default was hard_sigmoid."""
    if confirm is not None or not dialect.predates_sigmoid:
        return Activation("sigmoid"), ()
    version = files.escape(repr(dialect.version))  # the file's text, shown escaped
    if dialect.version == UNKNOWN_KERAS_VERSION:
        who = (
            "this weights-only file has no keras_version attribute (Keras's own loader then "
            "takes it for a Keras 1 file)"
        )
    else:
        who = f"this weights-only file's keras_version is {version}"
    return dialect.hard_sigmoid, (
        f"recurrent_activation {dialect.hard_sigmoid.describe()}, Keras's default before 2.3: "
        f"{who}, and the file does not record the activation; if the layers were built with "
        f"recurrent_activation='sigmoid', pass confirm_keras_version={version}.",
    )


# -- what each layer becomes -----------------------------------------------------------------


def _plans(h5: _File, options: _Options) -> _Found:
    """The RNN layers in the model's order (nested models' in their place): what each becomes,
    or why it cannot."""
    root = _weights_root(h5)
    names = _layer_names(h5, root)
    model = _config_model(h5)
    version = _keras_version(h5, root)
    if options.confirm is not None and options.confirm != version:
        raise ValueError(
            f"{h5.who}: confirm_keras_version={options.confirm!r}, but the file's "
            f"keras_version is {version!r}: confirm the version the file records."
        )
    if model is None:
        leaves = _weights_only_leaves(h5, root, names)
        links = None
    else:
        leaves = _config_leaves(h5, _model_layers(model) or [], None, ())
        links = _links(model)
    plans: list[_Plan | _Refused] = []
    for leaf in leaves:
        plan = _plan(h5, root, leaf, names, options, Dialect(version))
        if plan is not None:
            plans.append(plan)
    return _Found(plans, {leaf.name: leaf for leaf in leaves}, links)


def _plan(
    h5: _File,
    root: _Node,
    leaf: _Leaf,
    names: list[str],
    options: _Options,
    dialect: Dialect,
) -> _Plan | _Refused | None:
    """What a layer becomes; None for a layer that is not an RNN, _Refused for an RNN that
    cannot be read as it is. KerasH5Error for weights that do not fit."""
    where = f"{h5.who}: layer {leaf.name!r}"
    entry = leaf.entry
    if entry is None:
        if not any(_base(w) == "recurrent_kernel" for w in leaf.weights):
            return None
        directions = _read_directions(h5, _group(h5, root, leaf.group), leaf.name, leaf.weights)
        return _plan_from_shapes(leaf.name, directions, where, options, dialect)
    cls = entry.get("class_name")
    if not isinstance(cls, str) or not _is_rnn_class(cls, entry):
        return None
    shown = f"{where} ({files.escape(cls)})"  # the file's class: any text with LSTM, GRU, RNN
    if leaf.twin:
        raise KerasH5Error(
            f"{shown}: another layer inside {leaf.group!r} is also named {leaf.own!r}, "
            "and Keras names a nested layer's weights by its own name, so theirs cannot be told "
            "apart; rename one in Keras and save the model again."
        )
    if leaf.group not in names:
        raise KerasH5Error(f"{shown} has no weights in the file.")
    group = _group(h5, root, leaf.group)
    weights = _weight_names(h5, group, leaf.group)
    if leaf.scope:
        weights = _owned(leaf, weights)
        if not weights:
            raise KerasH5Error(
                f"{shown} has no weights in the file (no weight of {leaf.group!r} is "
                f"named {leaf.own}/...)."
            )
    directions = _read_directions(h5, group, leaf.name, weights)
    return _plan_from_config(leaf.name, entry, directions, where, dialect)


def _is_rnn_class(cls: str, entry: dict[str, Any]) -> bool:
    """Whether a config entry is an RNN layer (ours or one we must refuse, never skip)."""
    if cls == _WRAPPER or cls in CLASSES:
        return True
    if cls in ("TimeDistributed",):
        return _has_rnn(entry)
    return any(token in cls for token in ("LSTM", "GRU", "RNN"))


def _base(weight_name: str) -> str:
    """``kernel`` for ``lstm/lstm_cell/kernel:0`` (the name's last part, no ``:0``)."""
    return weight_name.rsplit("/", 1)[-1].split(":", 1)[0]


#: A weight's role by its base name. Keras 2.0 built a Bidirectional's two layers in one name
#: scope, so TensorFlow named the backward layer's weights ``kernel_1``, ``recurrent_kernel_1``
#: and ``bias_1`` (``bidirectional_1/kernel_1:0``).
_ROLES = {
    **{role: role for role in ("kernel", "recurrent_kernel", "bias")},
    **{f"{role}_1": role for role in ("kernel", "recurrent_kernel", "bias")},
}


def _read_directions(
    h5: _File, group: _Group, layer: str, names: Sequence[str]
) -> tuple[_Direction, ...]:
    """One or two (kernel, recurrent_kernel[, bias]) triples, in the order of ``names``."""
    where = f"{h5.who}: layer {layer!r}"
    runs: list[list[str]] = []
    for w in names:
        if _ROLES.get(_base(w)) == "kernel":
            runs.append([])
        if not runs:
            raise KerasH5Error(f"{where}: weight {w!r} comes before any kernel.")
        runs[-1].append(w)
    if len(runs) not in (1, 2):
        raise KerasH5Error(
            f"{where}: {len(runs)} kernels; an RNN layer has one per direction (1 or 2)."
        )
    out = []
    for run in runs:
        bases = [_ROLES.get(_base(w), _base(w)) for w in run]
        if bases not in (["kernel", "recurrent_kernel"], ["kernel", "recurrent_kernel", "bias"]):
            raise KerasH5Error(
                f"{where}: weights {bases}, expected kernel, recurrent_kernel and bias (or no "
                "bias)."
            )
        ds = [_dataset(h5, group, w, layer) for w in run]
        out.append(_Direction(ds[0], ds[1], ds[2] if len(ds) == 3 else None))
    return tuple(out)


def _shape_family(
    directions: tuple[_Direction, ...], where: str
) -> tuple[int, bool | None, str | None]:
    """(gates, written by a CuDNN layer (None: no bias says nothing), GRU reset variant) implied
    by the shapes, which must agree across directions."""
    found = set()
    for d in directions:
        k, r = d.kernel.shape, d.recurrent.shape
        if len(k) != 2 or len(r) != 2 or r[0] < 1 or k[0] < 1 or k[1] != r[1] or r[1] % r[0]:
            raise KerasH5Error(
                f"{where}: kernel {list(k)} and recurrent_kernel {list(r)} are not [in, G*H] "
                "and [H, G*H]."
            )
        h, gates = r[0], r[1] // r[0]
        if gates not in (1, 3, 4):
            raise KerasH5Error(
                f"{where}: recurrent_kernel {list(r)} holds {gates} gates; LSTM has 4, GRU 3, "
                "SimpleRNN 1."
            )
        b = None if d.bias is None else d.bias.shape
        cudnn: bool | None = None
        variant = None
        if b is None:
            pass
        elif b == (2 * gates * h,) and gates > 1:
            cudnn = True
        elif b == (gates * h,):
            cudnn = False
            variant = "reset_before" if gates == 3 else None
        elif b == (2, gates * h) and gates == 3:
            cudnn, variant = False, "reset_after"
        else:
            raise KerasH5Error(
                f"{where}: bias {list(b)} fits no Keras RNN of {gates} gate(s) and {h} units."
            )
        found.add((tuple(k), tuple(r), b, gates, cudnn, variant))
    if len(found) != 1:
        raise KerasH5Error(f"{where}: its two directions have different weight shapes.")
    (_, _, _, gates, cudnn, variant) = found.pop()
    return gates, cudnn, variant


def _plan_from_shapes(
    name: str,
    directions: tuple[_Direction, ...],
    where: str,
    options: _Options,
    dialect: Dialect,
) -> _Plan | _Refused:
    """What a layer of a weights-only file becomes: a CuDNN layer by its bias, a plain one with
    Keras's default activations where the caller says it used them (``assume``)."""
    gates, cudnn, reset = _shape_family(directions, where)
    if cudnn:  # a CuDNN layer: no activation to choose, whatever Keras wrote it
        mode = CUDNN_LSTM if gates == 4 else CUDNN_GRU
        return _Plan(name, "CuDNNLSTM" if gates == 4 else "CuDNNGRU", mode, True, directions)
    cls = {4: "LSTM", 3: "GRU"}.get(gates, "SimpleRNN")
    if not options.assume:
        used = {
            "LSTM": "activation='tanh' and recurrent_activation='sigmoid' ('hard_sigmoid' "
            "before Keras 2.3, as the file's keras_version says)",
            "GRU": "activation='tanh' and recurrent_activation='sigmoid' ('hard_sigmoid' "
            "before Keras 2.3, as the file's keras_version says)",
            "SimpleRNN": "activation='tanh', or 'relu' with simple_rnn_activation='relu'",
        }[cls]
        return _Refused(
            name,
            None,
            (
                f"a weights-only file does not record the activations of plain {cls} layers; "
                f"if they used Keras's defaults ({used}), pass assume_cudnn_activations=True "
                "(cudnn-rnn: --activation tanh|relu), or read the whole-model file.",
            ),
        )
    notes: tuple[str, ...] = ()
    if cls == "SimpleRNN":
        mode, variant = f"rnn_{options.simple_activation[name]}", CUDNN
    else:
        mode = CUDNN_LSTM if cls == "LSTM" else CUDNN_GRU
        gate, notes = _default_gates(dialect, options.confirm)
        # A GRU's bias says where its reset gate is ([3H]: before the product); without one,
        # Keras 2.x's tf.keras default (reset_after=True).
        fields: dict[str, Any] = {"gate_activation": gate}
        if mode == CUDNN_GRU:
            fields["reset_after"] = reset != "reset_before"
        variant = Variant(**fields)
    if len(directions) == 2:
        cls = f"{_WRAPPER}({cls})"
    elif cudnn is None and cls != "SimpleRNN":
        cls = f"{cls} (no bias)"
    return _Plan(name, cls, mode, False, directions, variant, notes)


def _plan_from_config(
    name: str,
    entry: dict[str, Any],
    directions: tuple[_Direction, ...],
    where: str,
    dialect: Dialect,
) -> _Plan | _Refused:
    """What a layer with a config becomes (:func:`.variants.judge`, as ``dialect`` means it),
    its weights checked against the config (a KerasH5Error where they disagree)."""
    cls = entry["class_name"]
    config = entry["config"]
    shown = files.escape(cls)  # the file's class names are shown escaped
    problems: list[str] = []
    sides: list[tuple[str, dict[str, Any], bool | None, str]] = [(cls, config, None, "")]
    if cls == _WRAPPER:
        backward = config.get("backward_layer")
        inner = [config.get("layer"), backward or config.get("layer")]
        if not all(
            isinstance(i, dict)
            and isinstance(i.get("config"), dict)
            and isinstance(i.get("class_name"), str)
            for i in inner
        ):
            raise KerasH5Error(f"{where} (Bidirectional): its config has no inner layer.")
        shown = f"{cls}({files.escape(inner[0]['class_name'])})"
        sides = [(inner[0]["class_name"], inner[0]["config"], False, "")]
        if backward is None:  # Keras builds the backward layer from the forward one
            sides.append((sides[0][0], sides[0][1], False, ""))
        else:
            sides.append((inner[1]["class_name"], inner[1]["config"], True, "backward layer: "))
    judged: list[Judged] = []
    notes: list[str] = []
    for side_cls, side_config, is_backward, prefix in sides:
        one = judge(side_cls, side_config, is_backward, dialect)
        judged.append(one)
        problems.extend(prefix + p for p in one.problems if prefix + p not in problems)
        notes.extend(n for n in one.notes if n not in notes)
    known = [j for j in judged if j.mode is not None]
    if len(known) == len(judged) and len({(j.mode, j.cudnn, j.variant) for j in known}) > 1:
        problems.append(
            f"its two directions compute different math ({'; '.join(map(_math, known))}); a "
            "bidirectional RNN of ours runs one mode and variant both ways."
        )
    variant = known[0].variant if known else CUDNN
    if cls == _WRAPPER:
        merge, why = merged(variant, config.get("merge_mode", "concat"))
        problems.extend([why] if why else [])
        variant = merge or variant
    if problems or not known:
        return _Refused(name, shown, tuple(problems))
    wanted = 2 if cls == _WRAPPER else 1
    if len(directions) != wanted:
        raise KerasH5Error(f"{where} ({cls}): weights of {len(directions)} direction(s).")
    mode, cudnn = str(known[0].mode), known[0].cudnn
    gates, shape_cudnn, reset = _shape_family(directions, where)
    expected_gates = len(GATE_ORDERS["keras"][mode])
    inner_cls = sides[0][0]
    if gates != expected_gates or (shape_cudnn is not None and shape_cudnn != cudnn):
        raise KerasH5Error(
            f"{where}: its config says {inner_cls} but its weights are those of another layer "
            f"({gates} gate(s), {'CuDNN' if shape_cudnn else 'plain'} bias)."
        )
    if shape_cudnn is None and cudnn:
        raise KerasH5Error(f"{where}: a {inner_cls} always has a bias; the file has none.")
    if reset is not None and mode == CUDNN_GRU and (reset == "reset_after") != variant.reset_after:
        said, bias = ("True", "[3H] (reset_after=False's)")
        if not variant.reset_after:
            said, bias = ("False", "[2, 3H] (reset_after=True's)")
        raise KerasH5Error(
            f"{where}: its config says GRU(reset_after={said}) but its bias is {bias}."
        )
    units = {c.get("units") for _, c, _, _ in sides}
    if units != {int(directions[0].recurrent.shape[0])}:
        raise KerasH5Error(
            f"{where}: config units {sorted(map(str, units))} differ from the weights' "
            f"{int(directions[0].recurrent.shape[0])}."
        )
    if cls != _WRAPPER and bool(config.get("go_backwards", False)):
        variant = replace(variant, time="go_backwards")
    return _Plan(name, shown, mode, cudnn, directions, variant, tuple(notes))


def _math(judged: Judged) -> str:
    """A side's math in words: ``lstm``, ``gru with gates hard_sigmoid(0.2, 0.5)``..."""
    words = judged.variant.describe()
    return f"{judged.mode}" + (f" with {words}" if words else "")


def _refusal(h5: _File, refused: list[_Refused]) -> str:
    """One message for every layer that cannot be read: each problem once, with the layers it
    concerns, numbered when there are several."""
    concerns: dict[str, list[_Refused]] = {}
    for layer in refused:
        for problem in layer.problems:
            concerns.setdefault(problem, []).append(layer)
    parts = [
        f"layer{'s' if len(layers) > 1 else ''} {', '.join(r.label for r in layers)}: {problem}"
        for problem, layers in concerns.items()
    ]
    if len(parts) == 1:
        return f"{h5.who}: {parts[0]}"
    layers = f"{len(refused)} RNN layer{'s' if len(refused) > 1 else ''}"
    numbered = " ".join(f"({i}) {part}" for i, part in enumerate(parts, 1))
    return f"{h5.who}: {len(parts)} problems in {layers}: {numbered}"
