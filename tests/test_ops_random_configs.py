"""Randomly drawn configurations of moderate size (seeded), float64, against the oracle."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cudnn_rnn.core.spec import RNNSpec
from tests.support.helpers import assert_matches_oracle, make_case


def _draw(seed: int) -> tuple[RNNSpec, int, int, bool, bool]:
    rng = np.random.default_rng(seed)
    mode = str(rng.choice(["lstm", "gru", "rnn_tanh", "rnn_relu"]))
    units = int(rng.integers(1, 24))
    input_mode = str(rng.choice(["linear_input", "skip_input", "auto_select"]))
    inp = units if input_mode == "skip_input" or rng.random() < 0.2 else int(rng.integers(1, 24))
    proj = int(rng.integers(1, units + 1)) if mode == "lstm" and rng.random() < 0.5 else None
    spec = RNNSpec(
        mode,
        int(rng.integers(1, 5)),
        units,
        inp,
        input_mode,
        str(rng.choice(["unidirectional", "bidirectional"])),
        proj,
    )
    return (
        spec,
        int(rng.integers(1, 40)),
        int(rng.integers(1, 9)),
        bool(rng.random() < 0.6),
        bool(rng.random() < 0.5),
    )


@pytest.mark.parametrize("seed", range(40))
def test_random_configuration(seed: int) -> None:
    spec, steps, batch, varlen, time_major = _draw(seed)
    case = make_case(spec, steps, batch, seed=seed, varlen=varlen, time_major=time_major)
    assert_matches_oracle(case, torch.float64, atol=1e-9)
