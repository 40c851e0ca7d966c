"""The four modes as data: the one table every other place derives its facts about a mode from.

A mode's facts are its gates (in cuDNN's order), its code (cuDNN's ``cudnnRNNMode_t``, which the
C engine uses too), whether it has a cell state, its activation, and how each framework names
it and orders its gates. Layers, ops, saveables, the engines' mode codes (the C engine's are
checked against :data:`MODES` when it loads: :mod:`cudnn_rnn.engines.native_library`), the ONNX
mapping and the readers take them from here, so that a reader never infers a mode from its gate
count alone (two modes may one day share a count: the plain RNNs already do).

==========  =========  ====  =====  ==========  ===========  ===========  ===========  =========
mode        gates      code  cell   torch.nn    torch mode   Keras        ONNX         TF1 cell
==========  =========  ====  =====  ==========  ===========  ===========  ===========  =========
lstm        i f c o    2     yes    LSTM        LSTM         LSTM         LSTM         lstm_cell
gru         r u h      3     no     GRU         GRU          GRU          GRU          gru_cell
rnn_tanh    h          1     no     RNN         RNN_TANH     SimpleRNN    RNN (Tanh)   basic_rnn
rnn_relu    h          0     no     RNN         RNN_RELU     SimpleRNN    RNN (Relu)   basic_rnn
==========  =========  ====  =====  ==========  ===========  ===========  ===========  =========

>>> MODES["gru"].num_gates, MODES["gru"].code, mode_of_code(2).name
(3, 3, 'lstm')
>>> MODES["lstm"].gate_orders["onnx"]
('i', 'o', 'f', 'c')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cudnn_rnn.core.constants import CUDNN_GRU, CUDNN_LSTM, CUDNN_RNN_RELU, CUDNN_RNN_TANH

__all__ = ["MODES", "Mode", "mode_of_code"]


@dataclass(frozen=True)
class Mode:
    """One mode's facts (see the module's table)."""

    name: str  # our (TF's) spelling: "lstm", "gru", "rnn_tanh", "rnn_relu"
    gates: tuple[str, ...]  # canonical gate names in cuDNN's order
    code: int  # cuDNN's cudnnRNNMode_t, and the C engine's mode code
    has_cell: bool  # a cell state (c) beside h
    activation: str  # the candidate's (or the plain RNN's) activation
    torch_class: str  # torch.nn's class name
    torch_mode: str  # torch.nn's RNNBase.mode
    keras_class: str  # Keras's layer class
    onnx_op: str  # the ONNX operator
    #: Framework -> the order it stacks this mode's gate blocks in (canonical gate names).
    #: torch.nn: cuDNN's (LSTM i,f,g,o with g = c; GRU r,z,n with z = u, n = h). TF1's canonical
    #: cells: LSTM kernel i, c(j), f, o; the GRU "gates" kernel r, u (h is its own kernel).
    #: Keras: LSTM i,f,c,o; GRU z,r,h. ONNX: LSTM i,o,f,c; GRU z,r,h.
    gate_orders: Mapping[str, tuple[str, ...]]

    @property
    def num_gates(self) -> int:
        """G: 4 for LSTM, 3 for GRU, 1 for the plain RNNs."""
        return len(self.gates)


def _mode(
    name: str,
    gates: str,
    code: int,
    activation: str,
    torch_names: tuple[str, str],
    keras_class: str,
    onnx_op: str,
    others: Mapping[str, str],
) -> Mode:
    own = tuple(gates.split())
    orders = {"cudnn": own, "torch": own, **{k: tuple(v.split()) for k, v in others.items()}}
    return Mode(
        name, own, code, name == CUDNN_LSTM, activation, *torch_names, keras_class, onnx_op,
        orders,
    )  # fmt: skip


#: Our mode -> its facts.
MODES: dict[str, Mode] = {
    m.name: m
    for m in (
        _mode(CUDNN_LSTM, "i f c o", 2, "tanh", ("LSTM", "LSTM"), "LSTM", "LSTM",
              {"tf": "i c f o", "keras": "i f c o", "onnx": "i o f c"}),
        _mode(CUDNN_GRU, "r u h", 3, "tanh", ("GRU", "GRU"), "GRU", "GRU",
              {"tf": "r u", "keras": "u r h", "onnx": "u r h"}),
        _mode(CUDNN_RNN_TANH, "h", 1, "tanh", ("RNN", "RNN_TANH"), "SimpleRNN", "RNN",
              {"tf": "h", "keras": "h", "onnx": "h"}),
        _mode(CUDNN_RNN_RELU, "h", 0, "relu", ("RNN", "RNN_RELU"), "SimpleRNN", "RNN",
              {"tf": "h", "keras": "h", "onnx": "h"}),
    )
}  # fmt: skip


def mode_of_code(code: int) -> Mode:
    """The mode of a cuDNN (and C engine) mode code; KeyError for another code."""
    for mode in MODES.values():
        if mode.code == code:
            return mode
    raise KeyError(f"no mode has the code {code}")
