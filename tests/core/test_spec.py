"""RNNSpec validation: every error path with its message, and the derived counts."""

from __future__ import annotations

import numpy as np
import pytest

import cudnn_rnn
from cudnn_rnn.core.spec import RNNSpec


def test_derived_counts() -> None:
    s = RNNSpec("lstm", 3, 8, 5, direction=cudnn_rnn.CUDNN_RNN_BIDIRECTION, num_proj=2)
    assert (s.num_gates, s.num_dirs, s.output_units, s.num_states) == (4, 2, 2, 6)
    assert [s.layer_input_size(layer) for layer in range(3)] == [5, 4, 4]
    assert RNNSpec("gru", 1, 3, 3).num_gates == 3
    assert RNNSpec("rnn_relu", 1, 3, 3).num_gates == 1


def test_auto_select_resolves_on_sizes() -> None:
    assert RNNSpec("gru", 1, 4, 4, cudnn_rnn.CUDNN_INPUT_AUTO_MODE).skip_input
    assert not RNNSpec("gru", 1, 4, 3, "auto_select").skip_input
    assert RNNSpec("gru", 1, 4, 4, "skip_input").skip_input
    assert not RNNSpec("gru", 1, 4, 4, "linear_input").skip_input


def test_normalises_and_hashes() -> None:
    a = RNNSpec("gru", np.int64(2), 3, 4, dropout=1)  # type: ignore[arg-type]
    b = RNNSpec("gru", 2, 3, 4, dropout=1.0)
    assert a == b and hash(a) == hash(b) and type(a.num_layers) is int


@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        (
            dict(mode="LSTM"),
            ValueError,
            r"X: invalid rnn_mode 'LSTM'; expected one of 'lstm', 'gru', "
            r"'rnn_tanh', 'rnn_relu'",
        ),
        (dict(mode=3), TypeError, r"X: rnn_mode must be a str, one of .*got int 3"),
        (dict(num_layers=0), ValueError, r"X: num_layers must be an int >= 1, got 0\."),
        (dict(num_layers=1.0), TypeError, r"X: num_layers must be an int >= 1, got float 1\.0\."),
        (dict(num_layers=True), TypeError, r"X: num_layers must be an int >= 1, got bool True\."),
        (dict(num_units=-1), ValueError, r"X: num_units must be an int >= 1, got -1\."),
        (dict(input_size=0), ValueError, r"X: input_size must be an int >= 1, got 0\."),
        (
            dict(input_mode="skip"),
            ValueError,
            r"X: invalid input_mode 'skip'; expected one of "
            r"'linear_input', 'skip_input', 'auto_select'",
        ),
        (
            dict(direction="bi"),
            ValueError,
            r"X: invalid direction 'bi'; expected one of "
            r"'unidirectional', 'bidirectional'",
        ),
        (dict(direction=None), TypeError, r"X: direction must be a str"),
        (dict(dropout=1.5), ValueError, r"X: dropout must be a float in \[0, 1\], got 1\.5\."),
        (dict(dropout=-0.1), ValueError, r"X: dropout must be a float in \[0, 1\], got -0\.1\."),
        (
            dict(dropout=float("nan")),
            ValueError,
            r"X: dropout must be a float in \[0, 1\], got nan",
        ),
        (
            dict(dropout="0.5"),
            TypeError,
            r"X: dropout must be a float in \[0, 1\], got str '0\.5'\.",
        ),
        (
            dict(mode="gru", num_proj=2),
            ValueError,
            r"X: num_proj is only supported for rnn_mode "
            r"'lstm', got rnn_mode 'gru' with num_proj=2",
        ),
        (dict(num_proj=0), ValueError, r"X: num_proj must be an int >= 1, got 0\."),
        (
            dict(num_proj=5),
            ValueError,
            r"X: num_proj must be in \[1, num_units=4\], got 5; use "
            r"num_proj=None",
        ),
        (
            dict(input_mode="skip_input", input_size=3),
            ValueError,
            r"X: input_mode 'skip_input' .* needs input_size == num_units, got input_size=3 and "
            r"num_units=4; use 'linear_input' or 'auto_select'\.",
        ),
    ],
)
def test_errors(kwargs: dict[str, object], error: type[Exception], message: str) -> None:
    args: dict[str, object] = dict(mode="lstm", num_layers=1, num_units=4, input_size=4)
    args.update(kwargs)
    with pytest.raises(error, match=message):
        RNNSpec(**args, owner="X")  # type: ignore[arg-type]
