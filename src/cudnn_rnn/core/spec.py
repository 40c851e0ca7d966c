"""The one validated description of a cuDNN RNN: :class:`RNNSpec`.

Everything that differs between models (mode, sizes, input mode, direction, projection) lives in
this frozen object; it is validated once, when it is made, and every other module derives its
counts from it instead of re-checking arguments.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import InitVar, dataclass, replace
from typing import Any

from cudnn_rnn.core.constants import (
    CUDNN_GRU,
    CUDNN_INPUT_AUTO_MODE,
    CUDNN_INPUT_LINEAR_MODE,
    CUDNN_INPUT_SKIP_MODE,
    CUDNN_LSTM,
    CUDNN_RNN_BIDIRECTION,
    CUDNN_RNN_RELU,
    CUDNN_RNN_TANH,
    CUDNN_RNN_UNIDIRECTION,
    DIRECTIONS,
    INPUT_MODES,
    MODES,
)
from cudnn_rnn.core.gates import CUDNN_GATES
from cudnn_rnn.core.variant import CUDNN, Activation, Variant


def _choice(owner: str, name: str, value: object, allowed: tuple[str, ...], consts: str) -> str:
    if not isinstance(value, str):
        raise TypeError(
            f"{owner}: {name} must be a str, one of {_quoted(allowed)}, got {type(value).__name__} "
            f"{value!r}."
        )
    if value not in allowed:
        raise ValueError(
            f"{owner}: invalid {name} {value!r}; expected one of {_quoted(allowed)} "
            f"(the constants cudnn_rnn.{consts})."
        )
    return value


def _quoted(values: tuple[str, ...]) -> str:
    return ", ".join(repr(v) for v in values)


def check_int(owner: str, name: str, value: object, minimum: int) -> int:
    """``value`` as an int >= ``minimum``: TypeError if not an integer, ValueError if smaller."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{owner}: {name} must be an int >= {minimum}, got {type(value).__name__} {value!r}."
        )
    if value < minimum:
        raise ValueError(f"{owner}: {name} must be an int >= {minimum}, got {value}.")
    return int(value)


def check_mode(owner: str, mode: object) -> str:
    return _choice(owner, "rnn_mode", mode, MODES, "CUDNN_LSTM/GRU/RNN_TANH/RNN_RELU")


def check_direction(owner: str, direction: object) -> str:
    return _choice(
        owner, "direction", direction, DIRECTIONS, "CUDNN_RNN_UNIDIRECTION/CUDNN_RNN_BIDIRECTION"
    )


def check_input_mode(owner: str, input_mode: object) -> str:
    return _choice(
        owner, "input_mode", input_mode, INPUT_MODES, "CUDNN_INPUT_LINEAR/SKIP/AUTO_MODE"
    )


def check_dropout(owner: str, dropout: object) -> float:
    if isinstance(dropout, bool) or not isinstance(dropout, numbers.Real):
        raise TypeError(
            f"{owner}: dropout must be a float in [0, 1], got {type(dropout).__name__} {dropout!r}."
        )
    value = float(dropout)
    if not (0.0 <= value <= 1.0) or math.isnan(value):
        raise ValueError(f"{owner}: dropout must be a float in [0, 1], got {value}.")
    return value


@dataclass(frozen=True)
class RNNSpec:
    """A validated cuDNN RNN configuration (mode, sizes, input mode, direction, projection).

    ``input_mode="auto_select"`` is kept as given; :attr:`skip_input` says what it resolves to
    (skip exactly when ``input_size == num_units``). The fields are normalised (plain ``int``
    and ``float``), so equal configurations compare and hash equal.

    Args:
        mode: ``"lstm"``, ``"gru"``, ``"rnn_tanh"`` or ``"rnn_relu"`` (``CUDNN_LSTM``,
            ``CUDNN_GRU``, ``CUDNN_RNN_TANH``, ``CUDNN_RNN_RELU``).
        num_layers: ``L``, the number of stacked layers: an int >= 1.
        num_units: ``H``, the hidden size of every layer and direction: an int >= 1.
        input_size: ``I``, the inputs' last dimension: an int >= 1.
        input_mode: ``"linear_input"`` (``CUDNN_INPUT_LINEAR_MODE``, the default),
            ``"skip_input"`` (``CUDNN_INPUT_SKIP_MODE``; needs ``input_size == num_units``) or
            ``"auto_select"`` (``CUDNN_INPUT_AUTO_MODE``).
        direction: ``"unidirectional"`` (``CUDNN_RNN_UNIDIRECTION``, the default) or
            ``"bidirectional"`` (``CUDNN_RNN_BIDIRECTION``).
        num_proj: LSTM only: ``P``, the size of the recurrent projection, an int in ``[1,
            num_units]``. Default None: no projection.
        dropout: the probability in ``[0, 1]`` of zeroing a layer's outputs between layers in
            training. Default 0.
        variant: what the model computes beyond the mode's cuDNN math
            (:class:`~cudnn_rnn.core.variant.Variant`: reset placement, activations,
            peepholes, clips, coupled gates, time direction, how directions merge). Default
            :data:`~cudnn_rnn.core.variant.CUDNN`, cuDNN's own.
        owner: (not a field) the caller's name at the start of error messages. Default
            ``"RNNSpec"``.

    Raises:
        TypeError: a mode, input mode or direction that is not a str, a size that is not an
            int (``True`` and ``2.0`` included), a dropout that is not a real number.
        ValueError: a mode, input mode or direction not among the constants, a size below 1,
            ``num_proj`` for another mode than LSTM or above ``num_units``, ``dropout``
            outside ``[0, 1]``, ``"skip_input"`` with ``input_size != num_units``, a variant
            field the mode or direction does not have (:meth:`_check_variant`).

    >>> spec = RNNSpec("lstm", num_layers=2, num_units=8, input_size=3, direction="bidirectional")
    >>> spec.num_gates, spec.num_dirs, spec.layer_input_size(1)
    (4, 2, 16)
    """

    mode: str
    num_layers: int
    num_units: int
    input_size: int
    input_mode: str = CUDNN_INPUT_LINEAR_MODE
    direction: str = CUDNN_RNN_UNIDIRECTION
    num_proj: int | None = None
    dropout: float = 0.0
    variant: Variant = CUDNN
    owner: InitVar[str] = "RNNSpec"

    def __post_init__(self, owner: str) -> None:
        # Normalise in place (frozen: object.__setattr__), so equal configs compare and hash equal.
        values: dict[str, Any] = {
            "mode": check_mode(owner, self.mode),
            "num_layers": check_int(owner, "num_layers", self.num_layers, 1),
            "num_units": check_int(owner, "num_units", self.num_units, 1),
            "input_size": check_int(owner, "input_size", self.input_size, 1),
            "input_mode": check_input_mode(owner, self.input_mode),
            "direction": check_direction(owner, self.direction),
            "dropout": check_dropout(owner, self.dropout),
        }
        if self.num_proj is not None:
            if values["mode"] != CUDNN_LSTM:
                raise ValueError(
                    f"{owner}: num_proj is only supported for rnn_mode 'lstm', got rnn_mode "
                    f"{values['mode']!r} with num_proj={self.num_proj!r}; pass num_proj=None."
                )
            proj = check_int(owner, "num_proj", self.num_proj, 1)
            if proj > values["num_units"]:
                raise ValueError(
                    f"{owner}: num_proj must be in [1, num_units={values['num_units']}], got "
                    f"{proj}; use num_proj=None for no projection."
                )
            values["num_proj"] = proj
        if (
            values["input_mode"] == CUDNN_INPUT_SKIP_MODE
            and values["input_size"] != values["num_units"]
        ):
            raise ValueError(
                f"{owner}: input_mode 'skip_input' adds the input to every gate as is, so it needs "
                f"input_size == num_units, got input_size={values['input_size']} and "
                f"num_units={values['num_units']}; use 'linear_input' or 'auto_select'."
            )
        values["mode"], values["variant"] = _checked_variant(
            owner, values["mode"], self.variant, values
        )
        for key, value in values.items():
            object.__setattr__(self, key, value)

    def with_input(
        self, input_size: int, input_mode: str | None = None, owner: str = "RNNSpec"
    ) -> RNNSpec:
        """The same model for inputs of ``input_size`` (and ``input_mode``), validated again:
        the one way a layer's settings become the spec of a given input.

        >>> RNNSpec("gru", 2, 8, 1).with_input(8, "skip_input").skip_input
        True
        """
        return RNNSpec(
            self.mode,
            self.num_layers,
            self.num_units,
            input_size,
            self.input_mode if input_mode is None else input_mode,
            self.direction,
            self.num_proj,
            self.dropout,
            self.variant,
            owner=owner,
        )

    @property
    def num_gates(self) -> int:
        """G: 4 for LSTM, 3 for GRU, 1 for the plain RNNs."""
        return len(CUDNN_GATES[self.mode])

    @property
    def num_dirs(self) -> int:
        return 2 if self.direction == CUDNN_RNN_BIDIRECTION else 1

    @property
    def bidirectional(self) -> bool:
        return self.direction == CUDNN_RNN_BIDIRECTION

    @property
    def skip_input(self) -> bool:
        """Whether layer 0 adds its input to the gates as is (no input matrices)."""
        if self.input_mode == CUDNN_INPUT_AUTO_MODE:
            return self.input_size == self.num_units
        return self.input_mode == CUDNN_INPUT_SKIP_MODE

    @property
    def output_units(self) -> int:
        """Width of h, and of each direction's output: num_proj if set, else num_units."""
        return self.num_proj if self.num_proj is not None else self.num_units

    @property
    def merges_directions(self) -> bool:
        """Whether the two directions' outputs are summed, multiplied or averaged (a variant's
        ``merge``) rather than concatenated."""
        return self.bidirectional and self.variant.merge != "concat"

    @property
    def output_width(self) -> int:
        """Width of the output sequence: ``num_dirs * output_units`` when the directions are
        concatenated, ``output_units`` when they are summed, multiplied or averaged."""
        return self.output_units if self.merges_directions else self.num_dirs * self.output_units

    @property
    def num_states(self) -> int:
        """First dimension of the state tensors: num_layers * num_dirs."""
        return self.num_layers * self.num_dirs

    @property
    def mask_width(self) -> int:
        """Width of what a layer above the first reads from the one below, where dropout
        masks it: the merged output, or both directions' side by side with separate stacks."""
        if self.variant.stacks == "separate":
            return self.num_dirs * self.output_units
        return self.output_width

    def layer_input_size(self, layer: int) -> int:
        """Input width of ``layer``: input_size for layer 0; after it the merged output of the
        layer below (:attr:`output_width`), or one direction's (``output_units``) when each
        direction is a stack of its own."""
        if layer == 0:
            return self.input_size
        if self.variant.stacks == "separate":
            return self.output_units
        return self.output_width


def _checked_variant(
    owner: str, mode: str, variant: object, values: dict[str, Any]
) -> tuple[str, Variant]:
    """``(mode, variant)`` normalised (a candidate activation that is the mode's own is the
    default; a plain RNN's tanh or relu is its mode), or ValueError for a field the mode or the
    direction does not have, so that equal models compare and hash equal."""
    if not isinstance(variant, Variant):
        raise TypeError(
            f"{owner}: variant must be a cudnn_rnn.core.variant.Variant, got "
            f"{type(variant).__name__} {variant!r}."
        )
    own = {CUDNN_RNN_TANH: "tanh", CUDNN_RNN_RELU: "relu"}
    cell = variant.cell_activation
    if cell is not None:
        if mode in own and cell.name in own.values():
            mode = {"tanh": CUDNN_RNN_TANH, "relu": CUDNN_RNN_RELU}[cell.name]
            cell = None
        elif mode not in own and cell == Activation("tanh"):
            cell = None
    variant = replace(variant, cell_activation=cell)
    allowed = {
        CUDNN_LSTM: {"gate_activation", "cell_activation", "output_activation", "peepholes",
                     "gate_clip", "cell_clip", "proj_clip", "input_forget"},
        CUDNN_GRU: {"gate_activation", "cell_activation", "reset_after", "gate_clip"},
        CUDNN_RNN_TANH: {"cell_activation", "gate_clip"},
        CUDNN_RNN_RELU: {"cell_activation", "gate_clip"},
    }[mode] | {"time", "merge", "stacks"}  # fmt: skip
    changed = variant.changed()
    foreign = sorted(set(changed) - allowed)
    if foreign:
        raise ValueError(
            f"{owner}: rnn_mode {mode!r} has no {', '.join(foreign)} (a variant of "
            f"{'an' if mode == CUDNN_LSTM else 'a'} {mode.upper()} may change "
            f"{', '.join(sorted(allowed))})."
        )
    bidirectional = values["direction"] == CUDNN_RNN_BIDIRECTION
    if "time" in changed and bidirectional:
        raise ValueError(
            f"{owner}: time={variant.time!r} is for a unidirectional RNN; a bidirectional one "
            "runs both directions (direction='unidirectional' with time='reverse' runs one "
            "backward)."
        )
    if variant.time == "go_backwards" and values["num_layers"] > 1:
        raise ValueError(
            f"{owner}: time='go_backwards' (Keras) is one layer's setting: its outputs are in "
            "processing order, which the next layer would read reversed; stack layers of "
            "num_layers=1 (or use time='reverse', outputs aligned with the input)."
        )
    for name in ("merge", "stacks"):
        if name in changed and not bidirectional:
            raise ValueError(
                f"{owner}: {name}={changed[name]!r} is for a bidirectional RNN; this one is "
                "unidirectional."
            )
    if variant.proj_clip is not None and values.get("num_proj") is None:
        raise ValueError(
            f"{owner}: proj_clip clips the projection's output, and this LSTM has no "
            "projection (num_proj=None)."
        )
    return mode, variant


def check_variant_mode(owner: str, mode: str, spec: RNNSpec) -> None:
    """ValueError where ``spec`` (made for ``mode``) became another mode: a plain RNN whose
    variant's activation is the other plain mode's (a class of one mode cannot hold it)."""
    if spec.mode != mode:
        raise ValueError(
            f"{owner}: cell_activation {spec.mode.removeprefix('rnn_')!r} is rnn_mode "
            f"{spec.mode!r}, not {mode!r}: make that mode's layer (or leave cell_activation at "
            "its default)."
        )


class SpecProperties:
    """The original's read-only configuration properties, derived from one :class:`RNNSpec`.

    Classes that describe a model (op level, layers, saveables) mix this in and implement
    ``_described_spec``; the properties are then written once, here.
    """

    def _described_spec(self) -> RNNSpec:
        raise NotImplementedError

    @property
    def rnn_mode(self) -> str:
        return self._described_spec().mode

    @property
    def num_layers(self) -> int:
        return self._described_spec().num_layers

    @property
    def num_units(self) -> int:
        return self._described_spec().num_units

    @property
    def input_size(self) -> int:
        return self._described_spec().input_size

    @property
    def input_mode(self) -> str:
        return self._described_spec().input_mode

    @property
    def direction(self) -> str:
        return self._described_spec().direction

    @property
    def num_dirs(self) -> int:
        return self._described_spec().num_dirs

    @property
    def num_proj(self) -> int | None:
        return self._described_spec().num_proj

    @property
    def dropout(self) -> float:
        return self._described_spec().dropout

    @property
    def variant(self) -> Variant:
        """What the model computes beyond its mode's cuDNN math (:class:`Variant`)."""
        return self._described_spec().variant
