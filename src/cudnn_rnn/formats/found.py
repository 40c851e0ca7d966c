"""What a file holds: one record per RNN, whatever the format (``convert.find_rnns``).

Every format's lister returns :class:`FoundRNN` records. ``name`` is what the format's loader
takes to pick that RNN (an ONNX node's path, a state_dict prefix, a Keras layer path, a
checkpoint's model index); ``where`` says it in words. ``computable`` is whether cuDNN's math
computes the RNN exactly; where it is not, ``reasons`` lists every reason (an activation cuDNN
has not, a GRU with the reset gate before the product, ...), so a user sees at once what would
have to change. Sizes are None where the file does not say them.

What a file names reaches a terminal only escaped: :meth:`FoundRNN.describe` quotes the name
(:func:`cudnn_rnn.files.quote`: ``'lstm_1'``, control and format characters as ``\\x1b``,
``\\n``, ``\\u202e``), and escapes whatever else of the file ``where`` and ``reasons`` repeat.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cudnn_rnn.files import escape, quote

__all__ = ["FoundRNN"]


@dataclass(frozen=True)
class FoundRNN:
    """One RNN of a file: where it is, what it is, and whether cuDNN's math computes it."""

    name: str  # what the format's loader takes to pick it (node=, prefix=, layer=, model=)
    where: str  # its place in words: "node 'lstm_1' in If 'cond' > then_branch", ...
    format: str  # the file's kind (cudnn_rnn.files.KINDS)
    mode: str | None  # "lstm", "gru", "rnn_tanh", "rnn_relu"; None when cuDNN has no such mode
    num_layers: int | None = None
    num_units: int | None = None
    input_size: int | None = None
    direction: str | None = None  # "unidirectional" or "bidirectional"
    num_proj: int | None = None
    computable: bool = True
    reasons: tuple[str, ...] = ()  # every reason it is not computable (empty when it is)
    details: dict[str, Any] = field(default_factory=dict, compare=False)  # format's own facts

    def __post_init__(self) -> None:
        if self.computable == bool(self.reasons):
            raise ValueError(
                f"FoundRNN {self.name!r}: computable={self.computable} with reasons "
                f"{list(self.reasons)}; a computable RNN has no reasons, another has at least one."
            )

    def describe(self) -> str:
        """One line: the name (quoted), the model, and why not when cuDNN cannot compute it;
        nothing of the file in it can drive a terminal or start a line (see the module)."""
        sizes = ", ".join(
            f"{k}={v}"
            for k, v in (
                ("num_layers", self.num_layers),
                ("num_units", self.num_units),
                ("input_size", self.input_size),
                ("num_proj", self.num_proj),
            )
            if v is not None
        )
        what = " ".join(p for p in (self.mode or "not a cuDNN mode", self.direction or "") if p)
        line = f"{quote(self.name, None)}: {what}" + (f" ({sizes})" if sizes else "")
        line += f" at {self.where}"
        if not self.computable:
            line += "; cuDNN's math does not compute it: " + "; ".join(self.reasons)
        return escape(line)
