"""What a Keras RNN layer's settings compute: our mode and
:class:`~cudnn_rnn.core.variant.Variant` (or every reason they compute nothing we have), and what
the Keras that wrote a file meant by the names and defaults it used.

=============================  ===================================================================
Keras setting                  our spec
=============================  ===================================================================
``LSTM``, ``GRU``, ``SimpleRNN``  lstm, gru, rnn_tanh (relu: rnn_relu); ``CuDNNLSTM``/``CuDNNGRU``
                               compute cuDNN's math and have no activation to choose
``recurrent_activation``       ``gate_activation`` (LSTM i, f, o; GRU z, r)
``activation``                 LSTM: ``cell_activation`` and ``output_activation`` (Keras applies
                               it to the candidate and to the cell state for the output); GRU:
                               ``cell_activation``; SimpleRNN: ``cell_activation`` (tanh is
                               rnn_tanh and relu rnn_relu, :class:`~cudnn_rnn.core.spec.RNNSpec`'s
                               rule)
``reset_after=False`` (GRU)    ``reset_after=False``: ``h' = act(x W_h + b_h + (r * h) U_h)``; its
                               one bias ``[3H]`` is our input bias, the recurrent bias 0 (ours
                               adds ``b_Rh`` after the product, so 0 there is Keras's math)
``go_backwards=True``          a layer alone: ``time="go_backwards"`` (it reads its input last
                               step first and returns its outputs in that order); inside
                               ``Bidirectional``: the backward direction
``Bidirectional(merge_mode)``  ``merge``: ``"concat"``, ``"sum"``, ``"mul"``, ``"ave"``;
                               ``None`` (a list of the two outputs) is refused
=============================  ===================================================================

Activation names (:data:`KERAS_ACTIVATIONS`): ``sigmoid``, ``tanh``, ``relu``, ``elu`` (alpha 1),
``selu``, ``softsign``, ``softplus``, ``exponential``, ``swish``/``silu``, ``linear`` (affine
1, 0) and ``hard_sigmoid``, which is not the same function in every Keras: Keras 1 and 2 (and
tf.keras) compute ``clip(0.2 x + 0.5, 0, 1)``, Keras 3 ``relu6(x + 3) / 6 = clip(x / 6 + 0.5,
0, 1)``; Keras 3 also has ``leaky_relu`` (slope 0.2) and ``celu`` (alpha 1: elu). Any other name
(``gelu``, ``relu6``, ``hard_silu``, a custom function) is refused, naming it.

The Keras that wrote a file (:class:`Dialect`) says which ``hard_sigmoid`` the file means and the
defaults of a setting a config leaves out (or a weights-only file never records): Keras 2.3.0
(September 2019) made ``"sigmoid"`` the default ``recurrent_activation`` of LSTM and GRU ("Change
default recurrent activation to sigmoid (from hard_sigmoid) in all RNN layers", its release
notes); every Keras before it, 1.x included, defaulted to ``"hard_sigmoid"``. tf.keras followed
in TF 2.0 (TF 1.x's ``tf.keras.layers.LSTM``/``GRU`` defaulted to hard_sigmoid). A file records
``keras_version``: standalone Keras its own (``"2.2.4"``), tf.keras its own with ``"-tf"``
(``"2.1.6-tf"``, ``"2.2.4-tf"`` in TF 1.13-1.15, and also in TF 2.0 and 2.1, whose layers already
defaulted to sigmoid: the file cannot tell those apart, so ``"2.2.4-tf"`` counts as old), then
``"2.3.0-tf"``, ``"2.4.0"``... and tf-keras its package version (``"2.21.0"``); Keras 3 writes
``"3.x"`` in a ``.keras`` file's ``metadata.json`` (and in a legacy ``.h5`` it saves). A version
below 2.3, one that is not a version number, and none at all (Keras's own loader takes an
``.h5`` file without one for a Keras 1 file) take Keras 1/2's defaults; where that decides what
a layer computes and the version is not known, the layer's record says so in a note.
``backend`` plays no part: the defaults were the same on every backend. A GRU's ``reset_after``
defaulted to False before Keras 3 (a config without it was written before the setting existed)
and to True in Keras 3.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from cudnn_rnn.core.constants import CUDNN_GRU, CUDNN_LSTM, CUDNN_RNN_TANH
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.core.variant import CUDNN, MERGES, Activation, Variant
from cudnn_rnn.io import files

__all__ = [
    "CLASSES",
    "KERAS_ACTIVATIONS",
    "SIGMOID_DEFAULT_SINCE",
    "UNKNOWN_KERAS_VERSION",
    "Dialect",
    "Judged",
    "judge",
    "keras_activation",
    "keras_names",
    "merged",
]

#: Keras's activation names -> ours (``hard_sigmoid``: the :class:`Dialect`'s, see the module).
KERAS_ACTIVATIONS: Final[Mapping[str, Activation]] = {
    "sigmoid": Activation("sigmoid"),
    "tanh": Activation("tanh"),
    "relu": Activation("relu"),
    "elu": Activation("elu", 1.0),
    "selu": Activation("selu"),
    "softsign": Activation("softsign"),
    "softplus": Activation("softplus"),
    "exponential": Activation("exponential"),
    "silu": Activation("silu"),
    "swish": Activation("silu"),
    "linear": Activation("affine", 1.0, 0.0),
}
#: Keras 3's own names beyond Keras 2's (with its defaults: ``leaky_relu``'s slope is 0.2).
_KERAS3_ONLY: Final[Mapping[str, Activation]] = {
    "leaky_relu": Activation("leaky_relu", 0.2),
    "celu": Activation("elu", 1.0),
}
_HARD_SIGMOID = {2: Activation("hard_sigmoid", 0.2, 0.5), 3: Activation("hard_sigmoid", 1 / 6, 0.5)}
_HARD_SIGMOID_WORDS = {2: "Keras 2's clip(0.2 x + 0.5, 0, 1)", 3: "Keras 3's relu6(x + 3) / 6"}
#: Keras class -> (our mode, None for SimpleRNN; written by a CuDNN layer).
CLASSES: Final[Mapping[str, tuple[str | None, bool]]] = {
    "CuDNNLSTM": (CUDNN_LSTM, True),
    "CuDNNGRU": (CUDNN_GRU, True),
    "LSTM": (CUDNN_LSTM, False),
    "GRU": (CUDNN_GRU, False),
    "SimpleRNN": (None, False),
}
#: The first Keras whose LSTM and GRU defaulted to recurrent_activation="sigmoid".
SIGMOID_DEFAULT_SINCE = (2, 3)
#: The version of a file that records none (``confirm_keras_version`` for such a file).
UNKNOWN_KERAS_VERSION = "unknown"


@dataclass(frozen=True)
class Dialect:
    """What the Keras that wrote a file meant: its ``hard_sigmoid`` and its defaults.

    ``version`` is what the file records (:data:`UNKNOWN_KERAS_VERSION` where it records none);
    ``fallback`` the Keras (2 or 3) whose meaning a version that is not a number takes: Keras
    1/2's for an ``.h5`` file, Keras 3's for a ``.keras`` file.

    >>> Dialect("2.2.4").recurrent_activation, Dialect("3.15.1").hard_sigmoid.alpha
    ('hard_sigmoid', 0.16666666666666666)
    """

    version: str
    fallback: int = 2

    @property
    def numbers(self) -> tuple[int, int] | None:
        """``(major, minor)`` of the version, or None where it does not start with them."""
        out = []
        for part in self.version.split(".")[:2]:
            digits = ""
            for char in part:
                if char not in "0123456789":
                    break
                digits += char
            if not digits:
                return None
            out.append(int(digits))
        return (out[0], out[1]) if len(out) == 2 else None

    @property
    def known(self) -> bool:
        return self.numbers is not None

    @property
    def major(self) -> int:
        """3 for Keras 3, else 2 (Keras 1 and 2 mean the same by what the readers look at)."""
        numbers = self.numbers
        if numbers is None:
            return self.fallback
        return 3 if numbers[0] >= 3 else 2

    @property
    def predates_sigmoid(self) -> bool:
        """Whether LSTM and GRU defaulted to hard_sigmoid (a version that is not a number: the
        fallback's default, Keras 1/2's hard_sigmoid for an ``.h5`` file)."""
        numbers = self.numbers
        return self.fallback < 3 if numbers is None else numbers < SIGMOID_DEFAULT_SINCE

    @property
    def recurrent_activation(self) -> str:
        return "hard_sigmoid" if self.predates_sigmoid else "sigmoid"

    @property
    def reset_after(self) -> bool:
        return self.major >= 3

    @property
    def hard_sigmoid(self) -> Activation:
        return _HARD_SIGMOID[self.major]

    def unknown_note(self, what: str) -> str:
        """The note of a layer whose ``what`` the version decided, where it is not known."""
        recorded = (
            "records no keras_version"
            if self.version == UNKNOWN_KERAS_VERSION
            else f"records keras_version {files.escape(repr(self.version))}, not a version number"
        )
        return f"{what}: the file {recorded}, so it is read as Keras {self.major}'s"


@dataclass(frozen=True)
class Judged:
    """One Keras RNN layer config, judged: our mode (None: none of ours), whether a CuDNN layer
    wrote it, its variant (direction and merge aside), every reason we cannot compute it, and
    what a user must know (a default the file's version decided and does not say)."""

    mode: str | None
    cudnn: bool = False
    variant: Variant = CUDNN
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def keras_activation(value: Any, dialect: Dialect) -> tuple[Activation | None, str]:
    """Our activation for a Keras config's value (a name, or a serialized function), and the
    value as messages show it (quoted); None where we have no such function."""
    name = _activation_name(value)
    shown = repr(name) if isinstance(name, str) else repr(value)
    if name == "hard_sigmoid":
        return dialect.hard_sigmoid, shown
    table = {**KERAS_ACTIVATIONS, **(_KERAS3_ONLY if dialect.major >= 3 else {})}
    return (table.get(name) if isinstance(name, str) else None), shown


def keras_names(dialect: Dialect) -> dict[Activation, str]:
    """Our activations -> the Keras name that means each in ``dialect`` (the first name of
    :data:`KERAS_ACTIVATIONS` where two mean one: ``silu``, not ``swish``)."""
    table = {**KERAS_ACTIVATIONS, **(_KERAS3_ONLY if dialect.major >= 3 else {})}
    names: dict[Activation, str] = {dialect.hard_sigmoid: "hard_sigmoid"}
    for name, ours in table.items():
        names.setdefault(ours, name)
    return names


def _activation_name(value: Any) -> Any:
    """``"tanh"`` for ``"tanh"`` and for a serialized ``{"config": {"name": "tanh"}}`` or
    ``{"class_name": "function", "config": "tanh"}``."""
    if isinstance(value, dict):
        inner = value.get("config")
        if isinstance(inner, dict):
            return inner.get("name")
        return inner if isinstance(inner, str) else value.get("class_name")
    return value


def judge(cls: str, config: dict[str, Any], backward: bool | None, dialect: Dialect) -> Judged:
    """What one Keras RNN layer config computes, and every setting we cannot compute, each a
    sentence naming the setting. ``backward``: which side of a Bidirectional wrapper the config
    is (None: a layer alone, which reads its input either way: its ``time``, set by the caller);
    ``dialect``: what the Keras that wrote it meant."""
    if cls not in CLASSES:
        return Judged(
            None,
            problems=(
                f"{files.escape(cls)} layers are not supported; only CuDNNLSTM, CuDNNGRU, LSTM, "
                "GRU, SimpleRNN and Bidirectional wrappers of them are.",
            ),
        )
    problems = []
    if backward is not None and bool(config.get("go_backwards", False)) != backward:
        problems.append(
            "go_backwards=False in the backward layer reads the sequence forward; a "
            "bidirectional RNN's backward direction reads it backward. Rebuild it with "
            "go_backwards=True."
            if backward
            else "go_backwards=True in the forward layer of a Bidirectional wrapper reads the "
            "sequence backward; a bidirectional RNN's forward direction reads it forward. "
            "Rebuild it with go_backwards=False."
        )
    mode, cudnn = CLASSES[cls]
    if cudnn:
        return Judged(mode, True, CUDNN, tuple(problems))
    notes: list[str] = []
    act, act_name = keras_activation(config.get("activation", "tanh"), dialect)
    if act is None:
        problems.append(_unknown("activation", act_name, dialect))
    elif act.name == "hard_sigmoid" and not dialect.known:
        notes.append(dialect.unknown_note(f"activation hard_sigmoid is {_words(dialect)}"))
    if mode is None:  # SimpleRNN: its one activation
        if act is None:
            return Judged(None, problems=tuple(problems))
        return _normalised(CUDNN_RNN_TANH, Variant(cell_activation=act), problems, notes)
    given = "recurrent_activation" in config
    rec_value = config.get("recurrent_activation", dialect.recurrent_activation)
    rec, rec_name = keras_activation(rec_value, dialect)
    if rec is None:
        problems.append(_unknown("recurrent_activation", rec_name, dialect))
    elif not dialect.known and (not given or rec.name == "hard_sigmoid"):
        what = f"recurrent_activation {rec.describe()}"
        if not given:
            what += " (the config leaves it out: the default)"
        notes.append(dialect.unknown_note(what))
    if act is None or rec is None:
        return Judged(None, problems=tuple(problems))
    fields: dict[str, Any] = {"gate_activation": rec, "cell_activation": act}
    if mode == CUDNN_LSTM:
        fields["output_activation"] = act
    else:
        fields["reset_after"] = bool(config.get("reset_after", dialect.reset_after))
    return _normalised(mode, Variant(**fields), problems, notes)


def merged(judged: Variant, merge_mode: Any) -> tuple[Variant | None, str | None]:
    """A Bidirectional's variant from its layers' and its ``merge_mode``, or why not."""
    if merge_mode is None:
        return None, (
            "merge_mode=None returns the two directions' outputs as a list of two tensors, and "
            "our layers return one; read it as merge_mode='concat' (the same weights: its "
            "output's two halves are the list's tensors)."
        )
    if not isinstance(merge_mode, str) or merge_mode not in MERGES:
        return None, (
            f"merge_mode {files.escape(repr(merge_mode))} is not one we compute "
            f"({', '.join(map(repr, MERGES))})."
        )
    return replace(judged, merge=merge_mode), None


def _normalised(mode: str, variant: Variant, problems: list[str], notes: list[str]) -> Judged:
    """The mode and variant as :class:`RNNSpec` normalises them (a candidate activation that is
    the mode's own is the default; a plain RNN's relu is rnn_relu)."""
    spec = RNNSpec(mode, 1, 1, 1, variant=variant)
    return Judged(spec.mode, False, spec.variant, tuple(problems), tuple(notes))


def _unknown(setting: str, name: str, dialect: Dialect) -> str:
    names = [*KERAS_ACTIVATIONS, "hard_sigmoid", *(_KERAS3_ONLY if dialect.major >= 3 else ())]
    return (
        f"{setting} {files.escape(name)} is no function we compute (Keras's we do: "
        f"{', '.join(sorted(names))}); retrain with one of them."
    )


def _words(dialect: Dialect) -> str:
    return _HARD_SIGMOID_WORDS[dialect.major]
