"""What a file holds: one record per RNN, whatever the format (``convert.find_rnns``).

Every format's lister returns :class:`FoundRNN` records. ``name`` is what the format's loader
takes to pick that RNN (an ONNX node's path, a state_dict prefix, a Keras layer path, a
checkpoint's model index); ``where`` says it in words. ``computable`` is whether cuDNN's math
computes the RNN exactly; where it is not, ``reasons`` lists every reason (an activation cuDNN
has not, a GRU with the reset gate before the product, ...), so a user sees at once what would
have to change. Sizes are None where the file does not say them.

What a file names reaches a terminal only escaped: :meth:`FoundRNN.describe` quotes the name
(:func:`cudnn_rnn.io.files.quote`: ``'lstm_1'``, control and format characters as ``\\x1b``,
``\\n``, ``\\u202e``), and escapes whatever else of the file ``where`` and ``reasons`` repeat.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cudnn_rnn.io import registry
from cudnn_rnn.io.files.escaping import escape, quote

__all__ = ["FoundRNN", "ReadRNN"]


@dataclass(frozen=True)
class FoundRNN:
    """One RNN of a file: where it is, what it is, and whether cuDNN's math computes it."""

    name: str  # what the format's loader takes to pick it (node=, prefix=, layer=, model=)
    where: str  # its place in words: "node 'lstm_1' in If 'cond' > then_branch", ...
    #: The file's format, by the one name the registry gives it (cudnn_rnn.io.registry.FORMATS:
    #: safetensors, tf1, onnx, torch, keras_h5, keras3); a reader may give the kind it sniffed
    #: (cudnn_rnn.io.files.KINDS: hdf5, torch_zip, ...), which is recorded as its format's name.
    format: str
    mode: str | None  # "lstm", "gru", "rnn_tanh", "rnn_relu"; None when cuDNN has no such mode
    num_layers: int | None = None
    num_units: int | None = None
    input_size: int | None = None
    direction: str | None = None  # "unidirectional" or "bidirectional"
    num_proj: int | None = None
    computable: bool = True
    reasons: tuple[str, ...] = ()  # every reason it is not computable (empty when it is)
    details: dict[str, Any] = field(default_factory=dict, compare=False)  # format's own facts
    #: What a user must know to compute what the producer computed, one sentence each (a
    #: Keras go_backwards layer's reversed input; TF's forget_bias, not stored): the listing
    #: shows them, and the record read from the file (ReadRNN.notes) carries them too.
    notes: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        # One name per format (inspect's, convert --format's, the docs'), whichever kind of
        # file of it the reader saw.
        object.__setattr__(self, "format", registry.reader_for_kind(self.format) or self.format)
        if self.computable == bool(self.reasons):
            raise ValueError(
                f"FoundRNN {self.name!r}: computable={self.computable} with reasons "
                f"{list(self.reasons)}; a computable RNN has no reasons, another has at least one."
            )

    def describe(self) -> str:
        """One line: the name (quoted), the model, why not when cuDNN cannot compute it, and the
        notes;
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
            line += "; we cannot compute it: " + "; ".join(self.reasons)
        for note in self.notes:
            line += f"; note: {note}"
        return escape(line)


@dataclass(frozen=True)
class ReadRNN:
    """One RNN of a file read as pure data: what any reader returns, and what
    :func:`cudnn_rnn.load` builds a layer from (no reader builds a module).

    ``spec`` is the model (mode, layers, units, input size, direction, projection).
    ``weights`` and ``biases`` are its canonical tensors in canonical order, cuDNN's gate order
    (:mod:`cudnn_rnn.core.layout`: per pseudo-layer the input matrices of each gate, the
    recurrent ones, the projection; then per pseudo-layer the input biases of each gate and the
    recurrent ones), as CPU tensors of the file's floating dtype. A framework with one bias per
    gate has it as the input bias, the recurrent bias zero (plus what the framework adds at run
    time and does not store, such as TF's ``forget_bias``, which ``notes`` then says).
    ``notes`` are what a user must know to compute what the producer computed, one sentence
    each ("the input must be reversed in time: the layer was go_backwards=True"; "forget_bias
    1.0 (TF's default; not stored in a checkpoint) added to the forget gate's bias").
    ``found`` is the record :func:`cudnn_rnn.find_rnns` lists for it.
    """

    found: FoundRNN
    spec: Any  # cudnn_rnn.core.spec.RNNSpec (typed loosely: this module imports no torch)
    weights: list[Any]  # torch.Tensor
    biases: list[Any]  # torch.Tensor
    notes: tuple[str, ...] = ()
