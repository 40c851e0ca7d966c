"""The RNNs beyond cuDNN's four modes, as data: :class:`Variant` and its :class:`Activation`.

A file may hold an RNN whose math is a mode's with something changed: a GRU that applies its
reset gate before the recurrent product (Keras 2's default, TF's ``GRUCell``, ONNX's default), a
hard-sigmoid or other activation, peepholes, clipping, coupled input and forget gates, another
time direction, another way of merging a bidirectional pair. A :class:`Variant` says which; the
default, :data:`CUDNN`, is cuDNN's math and changes nothing. It is a field of
:class:`~cudnn_rnn.core.spec.RNNSpec`, so every layer, engine, reader and writer sees it in the
one description of a model; the equations are :mod:`cudnn_rnn.core.reference`'s.

=================  ==========  ===================================================================
field              modes       meaning (default first)
=================  ==========  ===================================================================
gate_activation    lstm, gru   the gates' activation (ONNX's ``f``): sigmoid
cell_activation    all         the candidate's (LSTM ``c'``, GRU ``h'``) or the plain RNN's
                               activation (ONNX's ``g``; an RNN's ``f``): the mode's own
output_activation  lstm        applied to the cell state for the output (ONNX's ``h``): tanh
reset_after        gru         True: ``r * (R h + b_R)`` (cuDNN, Keras ``reset_after=True``);
                               False: ``R (r * h) + b_R`` (TF's ``GRUCell``, ONNX's default)
peepholes          lstm        False; True: ``i``, ``f`` see ``c_{t-1}`` and ``o`` sees ``c_t``
                               through diagonal weights (3 vectors a layer and direction)
gate_clip          lstm, gru,  None; c: every activation's input clipped to ``[-c, c]`` (ONNX)
                   rnn_*
cell_clip          lstm        None; c: the new cell state clipped to ``[-c, c]`` (TF)
proj_clip          lstm        None; c: the projected output clipped to ``[-c, c]`` (TF)
input_forget       lstm        False; True: the forget gate is ``1 - i`` (ONNX, TF's coupled cell)
time               uni         "forward"; "reverse": over ``t = T-1..0``, outputs aligned with
                               the input (ONNX); "go_backwards": the same, outputs in processing
                               order (Keras)
merge              bi          "concat" (``[fw, bw]``); "sum", "mul", "ave" (Keras)
stacks             bi          "layers": every layer bidirectional, the next reads the merge
                               (cuDNN); "separate": a forward stack and a backward stack each of
                               ``num_layers`` layers, merged at the top (TF's
                               ``bidirectional_dynamic_rnn`` over two ``MultiRNNCell``)
=================  ==========  ===================================================================

>>> v = Variant(reset_after=False, gate_activation=Activation("hard_sigmoid", 0.2, 0.5))
>>> v.is_cudnn, CUDNN.is_cudnn
(False, True)
>>> v.describe()
'gates hard_sigmoid(0.2, 0.5), reset before the product'
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Final

__all__ = [
    "ACTIVATIONS",
    "CUDNN",
    "MERGES",
    "STACKS",
    "TIMES",
    "Activation",
    "Variant",
    "activation_of",
    "mode_string",
    "parse_mode_string",
]

#: Activation name -> (its parameters' names, their defaults (ONNX's where it has one), formula).
ACTIVATIONS: Final[Mapping[str, tuple[tuple[str, ...], tuple[float, ...], str]]] = {
    "sigmoid": ((), (), "1 / (1 + exp(-x))"),
    "tanh": ((), (), "tanh(x)"),
    "relu": ((), (), "max(0, x)"),
    "hard_sigmoid": (("alpha", "beta"), (0.2, 0.5), "min(max(alpha x + beta, 0), 1)"),
    "affine": (("alpha", "beta"), (1.0, 0.0), "alpha x + beta"),
    "leaky_relu": (("alpha",), (0.01,), "x if x >= 0 else alpha x"),
    "thresholded_relu": (("alpha",), (1.0,), "x if x > alpha else 0"),
    "scaled_tanh": (("alpha", "beta"), (1.0, 1.0), "alpha tanh(beta x)"),
    "elu": (("alpha",), (1.0,), "x if x >= 0 else alpha (exp(x) - 1)"),
    "softsign": ((), (), "x / (1 + |x|)"),
    "softplus": ((), (), "log(1 + exp(x))"),
    "selu": ((), (), "scale (x if x > 0 else alpha (exp(x) - 1)), Keras's constants"),
    "exponential": ((), (), "exp(x)"),
    "silu": ((), (), "x / (1 + exp(-x))"),
}
TIMES: Final = ("forward", "reverse", "go_backwards")
MERGES: Final = ("concat", "sum", "mul", "ave")
STACKS: Final = ("layers", "separate")


@dataclass(frozen=True)
class Activation:
    """One activation function with its parameters (see :data:`ACTIVATIONS`).

    ``alpha`` and ``beta`` are None for a function without them and default to ONNX's values
    for one that has them, so equal functions compare equal.

    >>> Activation("hard_sigmoid")
    Activation(name='hard_sigmoid', alpha=0.2, beta=0.5)
    >>> Activation("leaky_relu", 0.1).describe()
    'leaky_relu(0.1)'
    """

    name: str
    alpha: float | None = None
    beta: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or self.name not in ACTIVATIONS:
            raise ValueError(
                f"Activation: unknown activation {self.name!r}; expected one of "
                f"{', '.join(ACTIVATIONS)}."
            )
        names, defaults, _ = ACTIVATIONS[self.name]
        given = (self.alpha, self.beta)
        values: list[float | None] = [None, None]
        for k, value in enumerate(given):
            if k >= len(names):
                if value is not None:
                    raise ValueError(
                        f"Activation: {self.name} takes "
                        f"{'no parameter' if not names else 'only ' + ', '.join(names)}, got "
                        f"{('alpha', 'beta')[k]}={value!r}."
                    )
                continue
            values[k] = defaults[k] if value is None else _finite(names[k], value)
        object.__setattr__(self, "alpha", values[0])
        object.__setattr__(self, "beta", values[1])

    def describe(self) -> str:
        """``name`` or ``name(alpha, beta)``."""
        params = [repr(v) for v in (self.alpha, self.beta) if v is not None]
        return f"{self.name}({', '.join(params)})" if params else self.name

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "alpha": self.alpha, "beta": self.beta}


def activation_of(value: object) -> Activation:
    """An :class:`Activation` from itself, a name or a ``{"name", "alpha", "beta"}`` mapping."""
    if isinstance(value, Activation):
        return value
    if isinstance(value, str):
        return Activation(value)
    if isinstance(value, Mapping) and set(value) <= {"name", "alpha", "beta"}:
        return Activation(str(value.get("name")), value.get("alpha"), value.get("beta"))
    raise TypeError(
        f"an activation is an Activation, a name or a mapping of name, alpha and beta; got "
        f"{type(value).__name__} {value!r}."
    )


SIGMOID: Final = Activation("sigmoid")
TANH: Final = Activation("tanh")


@dataclass(frozen=True)
class Variant:
    """What an RNN computes beyond its mode's cuDNN math (the module's table). The default is
    :data:`CUDNN`; :class:`~cudnn_rnn.core.spec.RNNSpec` checks which fields its mode and
    direction allow."""

    gate_activation: Activation = SIGMOID
    cell_activation: Activation | None = None
    output_activation: Activation = TANH
    reset_after: bool = True
    peepholes: bool = False
    gate_clip: float | None = None
    cell_clip: float | None = None
    proj_clip: float | None = None
    input_forget: bool = False
    time: str = "forward"
    merge: str = "concat"
    stacks: str = "layers"

    def __post_init__(self) -> None:
        for name in ("gate_activation", "output_activation"):
            object.__setattr__(self, name, activation_of(getattr(self, name)))
        if self.cell_activation is not None:
            object.__setattr__(self, "cell_activation", activation_of(self.cell_activation))
        for name in ("reset_after", "peepholes", "input_forget"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"Variant: {name} must be a bool, got {getattr(self, name)!r}.")
        for name in ("gate_clip", "cell_clip", "proj_clip"):
            value = getattr(self, name)
            if value is not None:
                clip = _finite(name, value)
                if clip <= 0:
                    raise ValueError(f"Variant: {name} must be > 0 (or None: no clip), got {clip}.")
                object.__setattr__(self, name, clip)
        for name, allowed in (("time", TIMES), ("merge", MERGES), ("stacks", STACKS)):
            if getattr(self, name) not in allowed:
                raise ValueError(
                    f"Variant: {name} must be one of {', '.join(map(repr, allowed))}, got "
                    f"{getattr(self, name)!r}."
                )

    @property
    def is_cudnn(self) -> bool:
        """Whether this is cuDNN's own math (every field at its default)."""
        return self == CUDNN

    def changed(self) -> dict[str, Any]:
        """The fields that differ from :data:`CUDNN`, by name."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if getattr(self, f.name) != getattr(CUDNN, f.name)
        }

    def describe(self) -> str:
        """The changes in words, for listings and messages ("" for :data:`CUDNN`)."""
        words: dict[str, Callable[[Any], str]] = {
            "gate_activation": lambda a: f"gates {a.describe()}",
            "cell_activation": lambda a: f"candidate {a.describe()}",
            "output_activation": lambda a: f"output {a.describe()}",
            "reset_after": lambda _: "reset before the product",
            "peepholes": lambda _: "peepholes",
            "gate_clip": lambda c: f"gates clipped to {c:g}",
            "cell_clip": lambda c: f"cell state clipped to {c:g}",
            "proj_clip": lambda c: f"projection clipped to {c:g}",
            "input_forget": lambda _: "forget gate 1 - input gate",
            "time": lambda t: {"reverse": "reverse time", "go_backwards": "go_backwards"}[t],
            "merge": lambda m: f"directions merged by {m}",
            "stacks": lambda _: "separate forward and backward stacks",
        }
        changed = self.changed()
        order = [f.name for f in fields(self)]
        return ", ".join(words[name](changed[name]) for name in order if name in changed)

    def as_dict(self) -> dict[str, Any]:
        """The changed fields as JSON-ready values (for checkpoints' metadata)."""
        return {
            name: value.as_dict() if isinstance(value, Activation) else value
            for name, value in self.changed().items()
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Variant:
        """The variant :meth:`as_dict` wrote; ValueError for a field we do not know."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(
                f"Variant: unknown field(s) {', '.join(map(repr, unknown))}; this version knows "
                f"{', '.join(sorted(known))}."
            )
        return replace(CUDNN, **dict(data))


def _finite(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}.")
    out = float(value)
    if not math.isfinite(out):
        raise ValueError(f"{name} must be finite, got {out}.")
    return out


#: cuDNN's own math: the variant of the four modes.
CUDNN: Final = Variant()


def mode_string(mode: str, variant: Variant) -> str:
    """One string for a mode and its variant: the mode itself for :data:`CUDNN`, else
    ``mode`` then ``:`` and the variant's changed fields as compact JSON with sorted keys. The
    operator's schema carries the model's math in its ``rnn_mode`` argument this way, so the
    four modes' calls (and the graphs that hold them) are what they were.

    >>> mode_string("gru", Variant(reset_after=False))
    'gru:{"reset_after":false}'
    >>> parse_mode_string('gru:{"reset_after":false}') == ("gru", Variant(reset_after=False))
    True
    """
    if variant.is_cudnn:
        return mode
    return mode + ":" + json.dumps(variant.as_dict(), sort_keys=True, separators=(",", ":"))


def parse_mode_string(text: str) -> tuple[str, Variant]:
    """The ``(mode, variant)`` of a :func:`mode_string`."""
    mode, sep, rest = text.partition(":")
    return mode, (Variant.from_dict(json.loads(rest)) if sep else CUDNN)
