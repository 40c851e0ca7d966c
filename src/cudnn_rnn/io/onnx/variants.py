"""What an ONNX RNN node's attributes say it computes: its mode, direction and
:class:`~cudnn_rnn.core.variant.Variant`, or every reason they say nothing we compute.

=========================  ===================================================================
ONNX attribute             our model
=========================  ===================================================================
``direction``              ``forward``: unidirectional; ``bidirectional``; ``reverse``:
                           unidirectional with ``time="reverse"``
``activations``            per direction LSTM ``f, g, h`` -> ``gate_activation``,
                           ``cell_activation``, ``output_activation``; GRU ``f, g`` -> gate,
                           cell; RNN ``f`` -> cell (``Tanh``: rnn_tanh, ``Relu``: rnn_relu).
                           Names in any case; a bidirectional node's two lists must be equal
                           (a :class:`Variant` has one set); one list for both is taken too
``activation_alpha/beta``  consumed in order, each list by the functions that take it only
                           (:data:`_PARAMETERS`), as onnxruntime does; a value left over is
                           refused
``clip``                   ``gate_clip`` (> 0)
``input_forget``           LSTM: non-zero -> ``input_forget=True``
``linear_before_reset``    GRU: 0 (ONNX's default) -> ``reset_after=False``; non-zero: cuDNN's
``P`` (an input)           LSTM: not all zeros -> ``peepholes=True``
=========================  ===================================================================

A parameter the file leaves out takes onnxruntime's value where it is ONNX's documented default
(HardSigmoid 0.2 and 0.5, LeakyRelu 0.01, Elu 1.0, Affine's beta 0); where the two differ
(Affine's alpha, ScaledTanh's alpha and beta, ThresholdedRelu's alpha: onnxruntime computes
with 0, ONNX documents 1) it is not guessed: the node is refused, naming the attribute. ONNX
stores ``clip`` and the parameters as float32: each is read as the shortest decimal that is
that float32 (``0.3``, not ``0.30000001192092896``), which gives the same float32 back.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from cudnn_rnn.core.constants import CUDNN_RNN_BIDIRECTION, CUDNN_RNN_UNIDIRECTION
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.core.variant import Activation, Variant
from cudnn_rnn.io.files.escaping import quote

__all__ = ["ACTIVATIONS", "ATTRIBUTES", "NodeMath", "node_math"]

#: ONNX's activation names (as the operators' specification spells them; read in any case) ->
#: ours (:data:`cudnn_rnn.core.variant.ACTIVATIONS`).
ACTIVATIONS: Final[Mapping[str, str]] = {
    "Sigmoid": "sigmoid",
    "Tanh": "tanh",
    "Relu": "relu",
    "HardSigmoid": "hard_sigmoid",
    "Affine": "affine",
    "LeakyRelu": "leaky_relu",
    "ThresholdedRelu": "thresholded_relu",
    "ScaledTanh": "scaled_tanh",
    "Elu": "elu",
    "Softsign": "softsign",
    "Softplus": "softplus",
}
_BY_LOWER = {name.lower(): name for name in ACTIVATIONS}
#: The parameters each activation takes from ``activation_alpha`` / ``activation_beta``, with
#: the value a missing one takes (None: ONNX documents 1, onnxruntime computes with 0: refused).
_PARAMETERS: Final[Mapping[str, tuple[tuple[str, float | None], ...]]] = {
    "HardSigmoid": (("alpha", 0.2), ("beta", 0.5)),
    "Affine": (("alpha", None), ("beta", 0.0)),
    "LeakyRelu": (("alpha", 0.01),),
    "ThresholdedRelu": (("alpha", None),),
    "ScaledTanh": (("alpha", None), ("beta", None)),
    "Elu": (("alpha", 1.0),),
}
#: Each operator's activations of one direction (ONNX's letters) -> the Variant's fields.
_ROLES: Final = {
    "LSTM": (("f", "gate_activation"), ("g", "cell_activation"), ("h", "output_activation")),
    "GRU": (("f", "gate_activation"), ("g", "cell_activation")),
    "RNN": (("f", "cell_activation"),),
}
_DEFAULTS: Final = {
    "LSTM": ("Sigmoid", "Tanh", "Tanh"),
    "GRU": ("Sigmoid", "Tanh"),
    "RNN": ("Tanh",),
}
#: The mode each operator computes with its default activations (RNNSpec turns an RNN's Relu
#: into rnn_relu).
_MODES: Final = {"LSTM": "lstm", "GRU": "gru", "RNN": "rnn_tanh"}
_DIRECTIONS: Final = {
    "forward": (CUDNN_RNN_UNIDIRECTION, "forward"),
    "reverse": (CUDNN_RNN_UNIDIRECTION, "reverse"),
    "bidirectional": (CUDNN_RNN_BIDIRECTION, "forward"),
}
#: The attributes :func:`node_math` reads.
ATTRIBUTES: Final = (
    "activation_alpha",
    "activation_beta",
    "activations",
    "clip",
    "direction",
    "input_forget",
    "linear_before_reset",
)


@dataclass(frozen=True)
class NodeMath:
    """What a node computes: ``mode`` and ``variant`` are None where ``reasons`` refuse its
    attributes; ``direction`` is None for a direction ONNX does not define (one is then
    assumed for ``dirs``)."""

    mode: str | None
    direction: str | None
    dirs: int
    variant: Variant | None
    reasons: tuple[str, ...]


def node_math(op: str, attrs: Mapping[str, Any], peepholes: bool) -> NodeMath:
    """The mode, direction and variant of an ``op`` node (``"LSTM"``, ``"GRU"``, ``"RNN"``)
    whose attributes are ``attrs`` (decoded) and whose ``P`` is not all zeros when
    ``peepholes``; each reason a clause that follows the node's label."""
    reasons: list[str] = []
    direction = attrs.get("direction", "forward")
    ours, time = _DIRECTIONS.get(direction if isinstance(direction, str) else "", (None, "forward"))
    if ours is None:
        reasons.append(
            f"has direction={quote(direction)}; ONNX defines 'forward', 'reverse' and "
            "'bidirectional'"
        )
    dirs = 2 if ours == CUDNN_RNN_BIDIRECTION else 1
    fields: dict[str, Any] = {"time": time, "peepholes": peepholes}
    acts = _activations(op, attrs, dirs, reasons)
    if acts is not None:
        fields.update(acts)
    if "clip" in attrs:
        clip = attrs["clip"]
        if not _real(clip) or not 0 < clip < float("inf"):
            reasons.append(f"has clip={quote(clip)}; a clip is a finite float > 0")
        else:
            fields["gate_clip"] = _as_written(clip)
    for name in ("input_forget", "linear_before_reset"):
        if name in attrs and (isinstance(attrs[name], bool) or not isinstance(attrs[name], int)):
            reasons.append(f"has {name}={quote(attrs[name])}; ONNX's {name} is an int, 0 or 1")
    if attrs.get("input_forget") and isinstance(attrs["input_forget"], int):
        if op == "LSTM":
            fields["input_forget"] = True
        else:
            reasons.append(f"has input_forget={attrs['input_forget']}, which only an LSTM has")
    if op == "GRU" and attrs.get("linear_before_reset", 0) == 0:
        fields["reset_after"] = False  # the reset gate before the product: ONNX's default
    if reasons or ours is None:  # each once (both directions may give the same)
        return NodeMath(None, ours, dirs, None, tuple(dict.fromkeys(reasons)))
    try:  # the one rule that normalises a mode's variant (an RNN's Relu is rnn_relu)
        spec = RNNSpec(_MODES[op], 1, 1, 1, direction=ours, variant=Variant(**fields))
    except (TypeError, ValueError) as err:  # the checks above leave none: say it all the same
        return NodeMath(None, ours, dirs, None, (f"has attributes no RNN has: {err}",))
    return NodeMath(spec.mode, ours, dirs, spec.variant, ())


def _activations(
    op: str, attrs: Mapping[str, Any], dirs: int, reasons: list[str]
) -> dict[str, Activation] | None:
    """The Variant's activation fields of a node's ``activations``, ``activation_alpha`` and
    ``activation_beta``, or None with the reasons added."""
    roles = _ROLES[op]
    names = attrs.get("activations") or list(_DEFAULTS[op])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        reasons.append(f"has activations={quote(names)}; ONNX's activations are a list of names")
        return None
    per = len(roles)
    if len(names) not in (per, per * dirs):
        letters = ", ".join(letter for letter, _ in roles)
        reasons.append(
            f"has activations={quote(names)}; {op} takes {per} per direction ({letters}), one "
            "list per direction"
        )
        return None
    unknown = [n for n in names if n.lower() not in _BY_LOWER]
    if unknown:
        reasons.append(
            f"has activations={quote(names)}; {quote(unknown[0])} is not one of ONNX's RNN "
            f"activations ({', '.join(ACTIVATIONS)})"
        )
        return None
    spelled = [_BY_LOWER[n.lower()] for n in names] * (per * dirs // len(names))
    streams = {"alpha": attrs.get("activation_alpha", []), "beta": attrs.get("activation_beta", [])}
    for which, values in streams.items():
        if not isinstance(values, list) or not all(_real(v) for v in values):
            reasons.append(
                f"has activation_{which}={quote(values)}; ONNX's activation_{which} is a list of "
                "floats"
            )
    if reasons:
        return None
    left = {which: iter(values) for which, values in streams.items()}
    acts = [_activation(name, left, reasons) for name in spelled]
    for which, rest in left.items():
        extra = len(list(rest))
        if extra:
            takers = ", ".join(n for n, ps in _PARAMETERS.items() if any(p == which for p, _ in ps))
            reasons.append(
                f"has activation_{which}={quote(streams[which])}, {extra} value(s) more than its "
                f"activations take (only {takers} take one, in order)"
            )
    if reasons or any(a is None for a in acts):
        return None
    forward, backward = acts[:per], acts[per:] or acts[:per]
    if forward != backward:

        def said(group: list[Activation | None]) -> str:
            return ", ".join(a.describe() for a in group if a is not None)

        reasons.append(
            f"has activations that differ between its directions (forward {said(forward)}, "
            f"backward {said(backward)}); our variants give both directions one set"
        )
        return None
    return {field: act for (_, field), act in zip(roles, forward) if act is not None}


def _activation(name: str, left: dict[str, Iterator[Any]], reasons: list[str]) -> Activation | None:
    """``name``'s Activation, its parameters taken from the streams ``left`` (each one it takes
    consumed, whatever is refused)."""
    values: dict[str, float] = {}
    missing = []
    for param, default in _PARAMETERS.get(name, ()):
        value = next(left[param], None)
        if value is None and default is None:
            missing.append(param)
        else:
            values[param] = _as_written(value) if value is not None else default or 0.0
    for param in missing:
        reasons.append(
            f"has activations with {name}, to which activation_{param} gives no {param}: ONNX "
            "documents 1.0, onnxruntime computes with 0, so it is not guessed"
        )
    if missing:
        return None
    try:
        return Activation(ACTIVATIONS[name], values.get("alpha"), values.get("beta"))
    except (TypeError, ValueError) as err:  # a parameter that is not finite
        refused = str(err).rstrip(".")
        reasons.append(f"has a {name} activation whose parameters {values} are refused: {refused}")
        return None


def _as_written(value: float) -> float:
    """A float32 attribute as the shortest decimal that is that float32 (module docstring)."""
    with np.errstate(over="ignore"):  # an int attribute past float32's range: kept as is
        single = np.float32(value)
    return float(str(single)) if np.isfinite(single) else float(value)


def _real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)
