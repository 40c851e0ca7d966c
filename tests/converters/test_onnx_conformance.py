"""ONNX's own conformance cases for ``LSTM``, ``GRU`` and ``RNN`` (issue 47) load and compute:
each case's node saved as a model file, ``cudnn_rnn.load`` gives our layer (the reset-before
GRUs, the peephole LSTM and the reverse ones included, which were refused), and the layer
called on the case's input gives the case's expected outputs (computed by the onnx package's
own NumPy helpers), in float32 as the case is."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import cudnn_rnn

onnx = pytest.importorskip("onnx")
from tests.io.test_onnx_variants import save_node  # noqa: E402  (imports onnx)
from tests.support import onnx_nodes  # noqa: E402

CASES = onnx_nodes.conformance_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_conformance_case_loads_and_computes(case: onnx_nodes.Case, tmp_path: Path) -> None:
    layer = cudnn_rnn.load(save_node(case.node, case.inputs, tmp_path / "case.onnx"))
    attrs = onnx_nodes.attributes(case.node)
    padded = list(case.inputs) + [None] * (8 - len(case.inputs))
    x, _w, _r, _b, lengths, h0, c0, _p = padded
    batch_first = bool(attrs.get("layout", 0))
    if batch_first:
        x = np.swapaxes(x, 0, 1)
        h0 = None if h0 is None else np.swapaxes(h0, 0, 1)
        c0 = None if c0 is None else np.swapaxes(c0, 0, 1)
    spec = layer.spec
    batch = x.shape[1]
    h0 = np.zeros((spec.num_states, batch, spec.num_units), np.float32) if h0 is None else h0
    state = (torch.from_numpy(h0),)
    if spec.mode == "lstm":
        c0 = np.zeros_like(h0) if c0 is None else c0
        state = (state[0], torch.from_numpy(c0))
    with torch.no_grad():
        y, out = layer(
            torch.from_numpy(x), state,
            sequence_lengths=None if lengths is None else torch.from_numpy(lengths),
        )  # fmt: skip
    dirs, hidden = spec.num_dirs, spec.num_units
    ours = [y.unflatten(2, (dirs, hidden)).permute(0, 2, 1, 3).numpy(), *(s.numpy() for s in out)]
    if batch_first:
        ours = [np.transpose(ours[0], (2, 0, 1, 3)), *(np.swapaxes(s, 0, 1) for s in ours[1:])]
    named = dict(zip(["Y", "Y_h", "Y_c"], ours, strict=False))
    wanted = [o for o in case.node.output if o]
    assert len(wanted) == len(case.outputs)
    for name, expected in zip(wanted, case.outputs, strict=True):
        np.testing.assert_allclose(named[name], expected, rtol=1e-5, atol=1e-6, err_msg=name)
