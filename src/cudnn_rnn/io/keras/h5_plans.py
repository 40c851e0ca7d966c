"""What each RNN layer of a Keras file becomes, or every reason it cannot be read.

A :class:`_Plan` is an RNN layer checked: our mode, its Keras class, and its weights (a
:class:`_Direction` each way) checked against what the layer implies. A :class:`_Refused` is one
whose math is not cuDNN's, with a sentence for each setting that says so and what to do;
:func:`_refusal` puts every reason of every refused layer in one message.

A layer with a config is judged by its class and settings (:func:`_judge`,
:func:`_plan_from_config`); a setting the config leaves out takes the defaults of the Keras that
wrote it (:data:`KERAS2_DEFAULTS` here; :mod:`.keras3` judges its layers with these functions
and Keras 3's defaults). A layer of a weights-only file has only its weights' shapes
(:func:`_plan_from_shapes`) and the caller's word for its activations (:class:`_Options`), which
is not enough where the file's ``keras_version`` predates sigmoid gates (the rule below).
:func:`_plans` judges every layer that :mod:`.h5_layers` finds in a Keras 2 file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cudnn_rnn.core.constants import CUDNN_GRU, CUDNN_LSTM, CUDNN_RNN_RELU, CUDNN_RNN_TANH
from cudnn_rnn.core.gates import GATE_ORDERS
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

__all__ = ["KERAS2_DEFAULTS", "SIGMOID_DEFAULT_SINCE", "UNKNOWN_KERAS_VERSION"]

#: Keras class -> (our mode for LSTM/GRU, or None for SimpleRNN; written by a CuDNN layer).
_CLASSES: dict[str, tuple[str | None, bool]] = {
    "CuDNNLSTM": (CUDNN_LSTM, True),
    "CuDNNGRU": (CUDNN_GRU, True),
    "LSTM": (CUDNN_LSTM, False),
    "GRU": (CUDNN_GRU, False),
    "SimpleRNN": (None, False),
}
#: What a Keras 2 reader assumes for a setting its config leaves out: the defaults of the oldest
#: Keras that wrote such files (hard_sigmoid before 2.3, reset_after=False in tf.keras 1.x), so
#: that a config without them is never read as cuDNN's math by mistake.
KERAS2_DEFAULTS: Mapping[str, Any] = {"recurrent_activation": "hard_sigmoid", "reset_after": False}


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
    go_backwards: bool = False  # a layer alone that reads its input backward (see keras.py)

    @property
    def num_units(self) -> int:
        return int(self.directions[0].recurrent.shape[0])

    @property
    def input_size(self) -> int:
        return int(self.directions[0].kernel.shape[0])

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
            **({"go_backwards": True} if self.go_backwards else {}),
        }


@dataclass(frozen=True)
class _Options:
    """What the caller says about what the file does not record."""

    assume: bool  # plain layers of a weights-only file used cuDNN's activations
    confirm: str | None  # ... even though its keras_version defaulted them to hard_sigmoid
    simple_activation: Mapping[str, str]


@dataclass(frozen=True)
class _Found:
    """What each RNN layer becomes, the layers by name, and which layer feeds which (None: a
    weights-only file, which does not record it)."""

    plans: list[_Plan | _Refused]
    leaves: dict[str, _Leaf]
    links: dict[str, str] | None

    def only(self, names: Sequence[str]) -> _Found:
        return _Found([p for p in self.plans if p.name in names], self.leaves, self.links)


# -- the Keras that wrote the file -----------------------------------------------------------
#
# Keras 2.3.0 (September 2019) made "sigmoid" the default recurrent_activation of LSTM and GRU
# ("Change default recurrent activation to sigmoid (from hard_sigmoid) in all RNN layers", its
# release notes); every Keras before it, 1.x included, defaulted to "hard_sigmoid". tf.keras
# followed in TF 2.0 (TF 1.x's tf.keras.layers.LSTM/GRU defaulted to hard_sigmoid). The
# version a file records is ``keras_version``: standalone Keras wrote its own ("2.2.4"), tf.keras
# its own with "-tf" ("2.1.6-tf", "2.2.4-tf" in TF 1.13-1.15, and also in TF 2.0 and 2.1, whose
# layers already defaulted to sigmoid: the file cannot tell those apart, so "2.2.4-tf" counts as
# old), then "2.3.0-tf", "2.4.0"... and tf-keras its package version ("2.21.0"). A version below
# 2.3, one that is not a version number, and no keras_version at all (Keras's own loader takes
# that for a Keras 1 file) mean the plain layers of a weights-only file may have computed
# hard_sigmoid without anyone choosing it. ``backend`` plays no part: the default was the same on
# every backend.

#: The first Keras whose LSTM and GRU defaulted to recurrent_activation="sigmoid".
SIGMOID_DEFAULT_SINCE = (2, 3)
#: ``confirm_keras_version`` for a file without a ``keras_version`` attribute.
UNKNOWN_KERAS_VERSION = "unknown"


def _keras_version(h5: _File, root: _Node) -> str:
    """The ``keras_version`` attribute where Keras's own loader reads it (the weights group),
    else the file's; ``UNKNOWN_KERAS_VERSION`` without one."""
    for node in (root, h5.root):
        value = _attribute(h5, node, "keras_version")
        if value is not _MISSING:
            return _text(value, "keras_version", h5.who)
    return UNKNOWN_KERAS_VERSION


def _predates_sigmoid_default(version: str) -> bool:
    """Whether LSTM and GRU defaulted to hard_sigmoid in the Keras that wrote ``version`` (yes
    for anything that does not start with a major and a minor version number)."""
    numbers = []
    for part in version.split(".")[:2]:
        digits = ""
        for char in part:
            if char not in "0123456789":
                break
            digits += char
        if not digits:
            return True
        numbers.append(int(digits))
    return len(numbers) < 2 or tuple(numbers) < SIGMOID_DEFAULT_SINCE


def _old_keras_problem(version: str) -> str:
    if version == UNKNOWN_KERAS_VERSION:
        who = (
            "this weights-only file has no keras_version attribute (Keras's own loader then "
            "takes it for a Keras 1 file)"
        )
    else:
        who = f"this weights-only file's keras_version is {version!r}"
    return (
        f"recurrent_activation unknown: {who}, and before Keras 2.3 LSTM and GRU defaulted to "
        "recurrent_activation='hard_sigmoid', not cuDNN's 'sigmoid' (the outputs would differ), "
        "so assume_cudnn_activations=True is not enough: if they were built with "
        f"recurrent_activation='sigmoid', say so again with confirm_keras_version={version!r}, "
        "or read the whole-model file, whose config records it."
    )


# -- what each layer becomes -----------------------------------------------------------------


def _plans(h5: _File, options: _Options) -> _Found:
    """The RNN layers in the model's order (nested models' in their place): what each becomes,
    or why it cannot."""
    root = _weights_root(h5)
    names = _layer_names(h5, root)
    model = _config_model(h5)
    version = None
    if model is None or options.confirm is not None:
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
        plan = _plan(h5, root, leaf, names, options, version)
        if plan is not None:
            plans.append(plan)
    return _Found(plans, {leaf.name: leaf for leaf in leaves}, links)


def _plan(
    h5: _File,
    root: _Node,
    leaf: _Leaf,
    names: list[str],
    options: _Options,
    version: str | None,
) -> _Plan | _Refused | None:
    """What a layer becomes; None for a layer that is not an RNN, _Refused for an RNN that
    cannot be read as it is. KerasH5Error for weights that do not fit."""
    where = f"{h5.who}: layer {leaf.name!r}"
    entry = leaf.entry
    if entry is None:
        if not any(_base(w) == "recurrent_kernel" for w in leaf.weights):
            return None
        directions = _read_directions(h5, _group(h5, root, leaf.group), leaf.name, leaf.weights)
        return _plan_from_shapes(leaf.name, directions, where, options, version)
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
    return _plan_from_config(leaf.name, entry, directions, where)


def _is_rnn_class(cls: str, entry: dict[str, Any]) -> bool:
    """Whether a config entry is an RNN layer (ours or one we must refuse, never skip)."""
    if cls == _WRAPPER or cls in _CLASSES:
        return True
    if cls in ("TimeDistributed",):
        return _has_rnn(entry)
    return any(token in cls for token in ("LSTM", "GRU", "RNN"))


def _base(weight_name: str) -> str:
    """``kernel`` for ``lstm/lstm_cell/kernel:0`` (the name's last part, no ``:0``)."""
    return weight_name.rsplit("/", 1)[-1].split(":", 1)[0]


def _read_directions(
    h5: _File, group: _Group, layer: str, names: Sequence[str]
) -> tuple[_Direction, ...]:
    """One or two (kernel, recurrent_kernel[, bias]) triples, in the order of ``names``."""
    where = f"{h5.who}: layer {layer!r}"
    runs: list[list[str]] = []
    for w in names:
        if _base(w) == "kernel":
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
        bases = [_base(w) for w in run]
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
    version: str | None,
) -> _Plan | _Refused:
    gates, cudnn, variant = _shape_family(directions, where)
    mode = {4: CUDNN_LSTM, 3: CUDNN_GRU}.get(gates, f"rnn_{options.simple_activation[name]}")
    if cudnn:  # a CuDNN layer: no activation to choose, whatever Keras wrote it
        cls = "CuDNNLSTM" if mode == CUDNN_LSTM else "CuDNNGRU"
        return _Plan(name, cls, mode, True, directions)
    cls = {CUDNN_LSTM: "LSTM", CUDNN_GRU: "GRU"}.get(mode, "SimpleRNN")
    if variant == "reset_before":  # refused whatever the activations were
        return _Refused(
            name,
            None,
            (
                "a GRU bias of shape [3H] means GRU(reset_after=False), which applies the reset "
                "gate before the recurrent matmul; cuDNN applies it after, so the outputs would "
                "differ. Retrain with GRU(reset_after=True) (or CuDNNGRU).",
            ),
        )
    problems = []
    if not options.assume:
        used = {
            "LSTM": "tanh with sigmoid gates",
            "GRU": "tanh with sigmoid gates and reset_after=True",
            "SimpleRNN": "tanh, or relu with simple_rnn_activation='relu'",
        }[cls]
        problems.append(
            f"a weights-only file does not record the activations of plain {cls} layers; if "
            f"they used cuDNN's ({used}), pass assume_cudnn_activations=True (cudnn-rnn: "
            "--activation tanh|relu), or read the whole-model file."
        )
    old = version is not None and _predates_sigmoid_default(version)
    if cls != "SimpleRNN" and old and options.confirm is None:
        problems.append(_old_keras_problem(str(version)))
    if problems:
        return _Refused(name, None, tuple(problems))
    if len(directions) == 2:
        cls = f"{_WRAPPER}({cls})"
    elif cudnn is None and cls != "SimpleRNN":
        cls = f"{cls} (no bias)"
    return _Plan(name, cls, mode, False, directions)


def _plan_from_config(
    name: str,
    entry: dict[str, Any],
    directions: tuple[_Direction, ...],
    where: str,
    defaults: Mapping[str, Any] = KERAS2_DEFAULTS,
) -> _Plan | _Refused:
    """What a layer with a config becomes, its weights checked against the config (a
    KerasH5Error where they disagree). ``defaults`` as :func:`_judge`'s."""
    cls = entry["class_name"]
    config = entry["config"]
    shown = files.escape(cls)  # the file's class names are shown escaped
    problems: list[str] = []
    sides: list[tuple[str, dict[str, Any], bool | None, str]] = [(cls, config, None, "")]
    if cls == _WRAPPER:
        merge = config.get("merge_mode", "concat")
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
        if merge != "concat":
            problems.append(
                f"merge_mode {merge!r} is not supported; cuDNN concatenates the two directions "
                "(merge_mode='concat'): retrain with it, or merge the halves of our output "
                "yourself."
            )
        sides = [(inner[0]["class_name"], inner[0]["config"], False, "")]
        if backward is None:  # Keras builds the backward layer from the forward one
            sides.append((sides[0][0], sides[0][1], False, ""))
        else:
            sides.append((inner[1]["class_name"], inner[1]["config"], True, "backward layer: "))
    modes = []
    for side_cls, side_config, is_backward, prefix in sides:
        judged, found = _judge(side_cls, side_config, is_backward, defaults)
        modes.append(judged)
        problems.extend(prefix + p for p in found if prefix + p not in problems)
    known = [m for m in modes if m is not None]
    if len(known) == len(modes) and len(set(known)) > 1:
        problems.append(
            f"its two directions compute different modes {sorted(m[0] for m in known)}; cuDNN "
            "runs one mode both ways."
        )
    if problems or not known:
        return _Refused(name, shown, tuple(problems))
    wanted = 2 if cls == _WRAPPER else 1
    if len(directions) != wanted:
        raise KerasH5Error(f"{where} ({cls}): weights of {len(directions)} direction(s).")
    mode, cudnn = known[0]
    gates, shape_cudnn, variant = _shape_family(directions, where)
    expected_gates = len(GATE_ORDERS["keras"][mode])
    inner_cls = sides[0][0]
    if gates != expected_gates or (shape_cudnn is not None and shape_cudnn != cudnn):
        raise KerasH5Error(
            f"{where}: its config says {inner_cls} but its weights are those of another layer "
            f"({gates} gate(s), {'CuDNN' if shape_cudnn else 'plain'} bias)."
        )
    if shape_cudnn is None and cudnn:
        raise KerasH5Error(f"{where}: a {inner_cls} always has a bias; the file has none.")
    if variant == "reset_before":
        raise KerasH5Error(
            f"{where}: its config says GRU(reset_after=True) but its bias is [3H] (reset_after"
            "=False's)."
        )
    units = {c.get("units") for _, c, _, _ in sides}
    if units != {int(directions[0].recurrent.shape[0])}:
        raise KerasH5Error(
            f"{where}: config units {sorted(map(str, units))} differ from the weights' "
            f"{int(directions[0].recurrent.shape[0])}."
        )
    go_backwards = cls != _WRAPPER and bool(config.get("go_backwards", False))
    return _Plan(name, shown, mode, cudnn, directions, go_backwards)


def _judge(
    cls: str,
    config: dict[str, Any],
    backward: bool | None,
    defaults: Mapping[str, Any] = KERAS2_DEFAULTS,
) -> tuple[tuple[str, bool] | None, list[str]]:
    """(our mode, written by a CuDNN layer) for one Keras RNN layer config (None: no mode of
    ours), and every setting of it cuDNN cannot compute, each a sentence naming the setting.
    ``backward``: which side of a Bidirectional wrapper the config is (None: a layer alone, which
    may read its input either way); ``defaults``: the settings a config may leave out."""
    if cls not in _CLASSES:
        return None, [
            f"{files.escape(cls)} layers are not supported; only CuDNNLSTM, CuDNNGRU, LSTM, "
            "GRU(reset_after=True), SimpleRNN and Bidirectional wrappers of them are."
        ]
    problems = []
    if backward is not None and bool(config.get("go_backwards", False)) != backward:
        problems.append(
            "go_backwards=False in the backward layer reads the sequence forward; cuDNN's "
            "backward direction reads it backward. Rebuild it with go_backwards=True."
            if backward
            else "go_backwards=True in the forward layer of a Bidirectional wrapper reads the "
            "sequence backward; cuDNN's forward direction reads it forward. Rebuild it with "
            "go_backwards=False."
        )
    mode, cudnn = _CLASSES[cls]
    if cudnn:
        return (str(mode), True), problems
    act = _activation_name(config.get("activation", "tanh"))
    if mode is None:
        if act not in ("tanh", "relu"):
            problems.append(
                f"activation {act!r} has no cuDNN mode; SimpleRNN must use 'tanh' or 'relu' "
                "(retrain with one of them)."
            )
            return None, problems
        return (CUDNN_RNN_TANH if act == "tanh" else CUDNN_RNN_RELU, False), problems
    if act != "tanh":
        problems.append(
            f"activation {act!r} is not cuDNN's 'tanh'; the outputs would differ (retrain with "
            "activation='tanh')."
        )
    rec = _activation_name(config.get("recurrent_activation", defaults["recurrent_activation"]))
    if rec != "sigmoid":
        problems.append(
            f"recurrent_activation {rec!r} is not cuDNN's 'sigmoid' (Keras before 2.3 defaulted "
            "to 'hard_sigmoid'); the outputs would differ (retrain with "
            "recurrent_activation='sigmoid')."
        )
    if mode == CUDNN_GRU and not config.get("reset_after", defaults["reset_after"]):
        problems.append(
            "reset_after=False applies the reset gate before the recurrent matmul; cuDNN "
            "applies it after, so the outputs would differ. Retrain with "
            "GRU(reset_after=True) (or CuDNNGRU)."
        )
    return (mode, False), problems


def _activation_name(value: Any) -> Any:
    """``"tanh"`` for ``"tanh"`` and for a serialized ``{"config": {"name": "tanh"}}``."""
    if isinstance(value, dict):
        inner = value.get("config")
        return inner.get("name") if isinstance(inner, dict) else value.get("class_name")
    return value


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
