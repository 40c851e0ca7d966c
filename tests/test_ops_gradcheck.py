"""torch.autograd.gradcheck (float64) with respect to inputs, initial states and params."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from cudnn_rnn.core.spec import RNNSpec
from tests.support.helpers import make_case, make_op

CASES = [
    # mode, layers, direction, input_mode, proj, varlen, time_major, dropout
    ("lstm", 2, "bidirectional", "linear_input", None, True, True, 0.0),
    ("lstm", 2, "unidirectional", "linear_input", 2, False, False, 0.0),
    ("lstm", 1, "bidirectional", "skip_input", 3, True, True, 0.0),  # num_proj == num_units
    ("gru", 2, "bidirectional", "skip_input", None, True, False, 0.0),
    ("gru", 3, "unidirectional", "linear_input", None, False, True, 0.5),
    ("rnn_tanh", 2, "bidirectional", "auto_select", None, True, True, 0.0),
    ("rnn_relu", 2, "unidirectional", "linear_input", None, True, True, 0.3),
    ("lstm", 2, "bidirectional", "linear_input", 1, True, False, 0.5),
]


@pytest.mark.parametrize("mode,layers,direction,input_mode,proj,varlen,time_major,dropout", CASES)
def test_gradcheck(
    mode: str,
    layers: int,
    direction: str,
    input_mode: str,
    proj: int | None,
    varlen: bool,
    time_major: bool,
    dropout: float,
) -> None:
    spec = RNNSpec(
        mode,
        layers,
        3,
        3 if input_mode != "linear_input" else 2,
        input_mode,
        direction,
        proj,
        dropout,
    )
    case = make_case(spec, 4, 3, seed=5, varlen=varlen, time_major=time_major)
    base = make_op(spec)
    params = base.canonical_to_params(case.weights, case.biases).requires_grad_()
    leaves: list[Any] = [
        torch.tensor(a, requires_grad=True) for a in (case.x, case.h0, case.c0) if a is not None
    ]

    def fn(*args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        # A fresh op with the same seed per evaluation, so dropout masks stay fixed.
        op = make_op(spec, seed=1)
        return tuple(
            op(*args, is_training=True, sequence_lengths=case.lengths, time_major=time_major)
        )

    assert torch.autograd.gradcheck(fn, (*leaves, params), eps=1e-6, atol=1e-7)
