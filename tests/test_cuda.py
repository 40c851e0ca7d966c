"""CUDA checks (skipped without a GPU): the opaque layout is cuDNN's, used in place."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from cudnn_rnn.core.layout import layout_of
from cudnn_rnn.core.spec import RNNSpec
from tests.support.helpers import (
    TORCH_NAMES,
    assert_matches_oracle,
    make_case,
    make_op,
    torch_module,
)

pytestmark = pytest.mark.cuda

SPECS = [
    RNNSpec("lstm", 2, 8, 5, direction="bidirectional"),
    RNNSpec("lstm", 2, 8, 5, direction="bidirectional", num_proj=3),
    RNNSpec("gru", 3, 6, 4),
    RNNSpec("rnn_tanh", 2, 4, 3, direction="bidirectional"),
    RNNSpec("rnn_relu", 1, 4, 3),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.mode}-{s.direction}-{s.num_proj}")
def test_offsets_equal_cudnn_flat_buffer(spec: RNNSpec) -> None:
    """torch.nn's flatten_parameters asks cuDNN for every pointer; our offsets must agree."""
    case = make_case(spec, 2, 1)
    module = torch_module(spec, case.weights, case.biases).cuda()
    module.flatten_parameters()
    flat = module._flat_weights  # views into the buffer cuDNN filled
    base = flat[0].data_ptr()
    layout = layout_of(spec)
    for name, tensor in zip(module._flat_weights_names, flat):
        entries = [
            p
            for p in layout.weights + layout.biases
            if TORCH_NAMES[p.kind] + f"_l{p.layer}{'_reverse' if p.direction else ''}" == name
        ]
        assert (tensor.data_ptr() - base) // tensor.element_size() == entries[0].offset, name


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.mode}-{s.direction}-{s.num_proj}")
def test_cuda_forward_matches_oracle_without_copy(spec: RNNSpec) -> None:
    case = make_case(spec, 5, 3, seed=1, varlen=True)
    op = make_op(spec, torch.float64)
    params = op.canonical_to_params(case.weights, case.biases).cuda()
    args = [torch.as_tensor(a).cuda() for a in (case.x, case.h0, case.c0) if a is not None]
    with warnings.catch_warnings():
        # cuDNN copies weights that are not one contiguous chunk, and says so: make that fail.
        warnings.simplefilter("error")
        got = op(*args, params, sequence_lengths=case.lengths)
    want = make_op(spec, torch.float64)(
        *[a.cpu() for a in args], params.cpu(), sequence_lengths=case.lengths
    )
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.cpu().numpy(), w.numpy(), atol=1e-10)
    assert_matches_oracle(case, torch.float64, atol=1e-10)
