"""The original's configuration properties, on every class that describes a model."""

from __future__ import annotations

import pytest
import torch

import cudnn_rnn
from cudnn_rnn import ops

NAMES = (
    "rnn_mode",
    "num_layers",
    "num_units",
    "input_size",
    "input_mode",
    "direction",
    "num_dirs",
    "num_proj",
)
WANT = ("lstm", 2, 4, 3, "auto_select", "bidirectional", 2, 2)


@pytest.mark.parametrize(
    "make",
    [
        lambda: ops.CudnnLSTM(2, 4, 3, "auto_select", "bidirectional", num_proj=2),
        lambda: cudnn_rnn.CudnnLSTM(2, 4, "auto_select", "bidirectional", input_size=3, num_proj=2),
        lambda: cudnn_rnn.CudnnLSTMSaveable(
            torch.zeros(
                ops.CudnnLSTM(2, 4, 3, direction="bidirectional", num_proj=2).params_size()
            ),
            2,
            4,
            3,
            "auto_select",
            "bidirectional",
            num_proj=2,
        ),
        lambda: cudnn_rnn.CudnnParamsFormatConverterLSTM(
            2, 4, 3, 2, input_mode="auto_select", direction="bidirectional"
        ),
    ],
    ids=["ops", "layer", "saveable", "converter"],
)
def test_properties(make: object) -> None:
    obj = make()  # type: ignore[operator]
    assert tuple(getattr(obj, n) for n in NAMES) == WANT


def test_unbuilt_layer_knows_all_but_input_size() -> None:
    layer = cudnn_rnn.CudnnGRU(
        3, 5, input_mode="skip_input", direction="bidirectional", dropout=0.25
    )
    assert (
        layer.rnn_mode,
        layer.num_layers,
        layer.num_units,
        layer.input_mode,
        layer.direction,
        layer.num_dirs,
        layer.num_proj,
        layer.dropout,
    ) == ("gru", 3, 5, "skip_input", "bidirectional", 2, None, 0.25)
