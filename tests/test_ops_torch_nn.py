"""The same canonical weights in torch.nn.LSTM/GRU/RNN: same outputs, states and gradients."""

from __future__ import annotations

import itertools

import pytest
import torch

from cudnn_rnn.core.spec import RNNSpec
from tests.support.helpers import assert_matches_torch_nn, make_case

CONFIGS = [
    (mode, layers, direction, input_mode, proj, varlen)
    for mode, layers, direction, input_mode, varlen in itertools.product(
        ("lstm", "gru", "rnn_tanh", "rnn_relu"),
        (1, 3),
        ("unidirectional", "bidirectional"),
        ("linear_input", "skip_input"),
        (False, True),
    )
    for proj in ((None, 2) if mode == "lstm" else (None,))
]


@pytest.mark.parametrize("mode,layers,direction,input_mode,proj,varlen", CONFIGS)
def test_same_outputs_states_and_gradients(
    mode: str, layers: int, direction: str, input_mode: str, proj: int | None, varlen: bool
) -> None:
    spec = RNNSpec(
        mode, layers, 3, 3 if input_mode == "skip_input" else 2, input_mode, direction, proj
    )
    case = make_case(spec, 5, 4, seed=11, varlen=varlen)
    assert_matches_torch_nn(case, torch.float64, atol=1e-12)
