"""Variants written to ONNX (issue 47, item 4): ``convert.to_onnx`` and ``torch.onnx.export``
(both exporters) write the standard attributes and inputs of a variant (activations with
their alpha and beta, ``clip``, ``input_forget``, ``linear_before_reset=0``,
``direction="reverse"``, the peepholes ``P``), and onnxruntime, running the file, gives our
layer's outputs; a variant the nodes cannot hold is refused in one line; a written file reads
back as the same spec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import cudnn_rnn
from cudnn_rnn import CudnnGRU, CudnnLSTM, CudnnRNNTanh
from cudnn_rnn.converters.onnx import to_onnx
from cudnn_rnn.core.variant import Activation, Variant

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from tests.test_export import (  # noqa: E402
    assert_ort_matches,
    export_onnx,
    rnn_nodes,
    run_ort,
)
from tests.test_export import pytestmark as _export_warnings  # noqa: E402

pytest.importorskip("onnxscript")  # torch.onnx.export's default (dynamo) exporter needs it
#: The exporters' own deprecation warnings, as tests/test_export.py filters them.
pytestmark = list(_export_warnings)

LAYERS = {"lstm": CudnnLSTM, "gru": CudnnGRU, "rnn_tanh": CudnnRNNTanh}
WRITABLE: list[tuple[str, int, Variant, dict[str, Any]]] = [
    ("gru", 2, Variant(reset_after=False), {}),
    ("gru", 1, Variant(gate_activation=Activation("hard_sigmoid"), gate_clip=1.2), {}),
    ("lstm", 2, Variant(peepholes=True), {"direction": "bidirectional"}),
    (
        "lstm",
        1,
        Variant(
            peepholes=True,
            input_forget=True,
            gate_activation=Activation("hard_sigmoid", 0.3, 0.4),
            cell_activation=Activation("scaled_tanh", 0.9, 1.1),
            output_activation=Activation("softsign"),
        ),
        {},
    ),
    ("rnn_tanh", 1, Variant(time="reverse", cell_activation=Activation("leaky_relu", 0.2)), {}),
    ("gru", 1, Variant(time="reverse", reset_after=False), {}),
]
IDS = [f"{m}-{v.describe()}" for m, _, v, _kw in WRITABLE]


def _layer(mode: str, layers: int, variant: Variant, kwargs: dict[str, Any]) -> Any:
    torch.manual_seed(0)
    layer = LAYERS[mode](layers, 4, input_size=3, variant=variant, **kwargs)
    with torch.no_grad():
        layer.opaque_kernel.normal_(0, 0.5)
    return layer.eval()


@pytest.mark.parametrize(("mode", "layers", "variant", "kwargs"), WRITABLE, ids=IDS)
def test_to_onnx_runs_in_onnxruntime_and_reads_back(
    mode: str, layers: int, variant: Variant, kwargs: dict[str, Any], tmp_path: Path
) -> None:
    layer = _layer(mode, layers, variant, kwargs)
    path = tmp_path / "v.onnx"
    to_onnx(layer, path, sequence_lens=True)
    x = torch.randn(5, 2, 3)
    lengths = torch.tensor([5, 3])
    with torch.no_grad():
        y, states = layer(x, sequence_lengths=lengths)
    got = run_ort(path, (x.numpy(), lengths.to(torch.int32).numpy()))
    assert_ort_matches(got, (y, *states))
    again = cudnn_rnn.load(path)
    assert again.spec.variant == layer.spec.variant
    assert again.spec.mode == layer.spec.mode and again.spec.num_layers == layers


class _Holder(nn.Module):
    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y, states = self.layer(x, sequence_lengths=lengths)
        return (y, *states)


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize(("mode", "layers", "variant", "kwargs"), WRITABLE[1:4], ids=IDS[1:4])
def test_torch_onnx_export_writes_the_variant(
    mode: str, layers: int, variant: Variant, kwargs: dict[str, Any], dynamo: bool,
    tmp_path: Path,
) -> None:  # fmt: skip
    model = _Holder(_layer(mode, layers, variant, kwargs)).eval()
    x = torch.randn(5, 2, 3)
    lengths = torch.tensor([5, 3])
    written = export_onnx(model, (x, lengths), tmp_path / "m.onnx", dynamo)
    nodes = rnn_nodes(written)
    assert len(nodes) == layers
    with torch.no_grad():
        ours = model(x, lengths)
    assert_ort_matches(run_ort(tmp_path / "m.onnx", (x.numpy(), lengths.numpy())), ours)


@pytest.mark.parametrize(
    ("mode", "kwargs", "variant", "words"),
    [
        ("lstm", {"direction": "bidirectional"}, Variant(merge="sum"), "merged by sum"),
        ("lstm", {}, Variant(time="go_backwards"), "go_backwards"),
        ("gru", {}, Variant(cell_activation=Activation("selu")), "selu"),
        ("lstm", {}, Variant(cell_clip=0.5), "a cell clip"),
    ],
)
def test_what_onnx_cannot_hold_is_refused_in_one_line(
    mode: str, kwargs: dict[str, Any], variant: Variant, words: str, tmp_path: Path
) -> None:
    layer = _layer(mode, 1, variant, kwargs)
    with pytest.raises(ValueError, match=words) as refused:
        to_onnx(layer, tmp_path / "no.onnx")
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "no.onnx").exists()
    model = _Holder(layer)
    with pytest.raises(Exception, match=words):
        export_onnx(model, (torch.randn(3, 2, 3), torch.tensor([3, 2])), tmp_path / "m.onnx", False)


def test_the_four_modes_write_what_they_wrote() -> None:
    from cudnn_rnn.core.spec import RNNSpec
    from cudnn_rnn.io.onnx.layout import node_attributes

    assert node_attributes(RNNSpec("gru", 1, 4, 3)) == {
        "hidden_size": 4,
        "direction": "forward",
        "linear_before_reset": 1,
        "activations": ["Sigmoid", "Tanh"],
    }
    assert np.array_equal(
        node_attributes(RNNSpec("lstm", 1, 4, 3, direction="bidirectional"))["activations"],
        ["Sigmoid", "Tanh", "Tanh"] * 2,
    )
