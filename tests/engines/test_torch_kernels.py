"""The torch-kernel engine is fed views of the opaque buffer: no copy of the parameters."""

from __future__ import annotations

import pytest
import torch

from cudnn_rnn.core.layout import layout_of
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.engines.torch_kernels import kernel_weights


@pytest.mark.parametrize(
    "spec",
    [
        RNNSpec("lstm", 3, 5, 4, direction="bidirectional", num_proj=2),
        RNNSpec("gru", 2, 4, 4, input_mode="skip_input", direction="bidirectional"),
        RNNSpec("rnn_tanh", 1, 3, 2),
    ],
)
def test_kernel_weights_are_views_of_params(spec: RNNSpec) -> None:
    layout = layout_of(spec)
    params = torch.randn(layout.size, requires_grad=True)
    weights = kernel_weights(layout, params)
    base = params.untyped_storage().data_ptr()
    covered = 0
    identity = torch.eye(spec.num_units).repeat(spec.num_gates, 1)
    for w in weights:
        if w.untyped_storage().data_ptr() == base:
            covered += w.numel()
        else:  # only the skip_input identity of layer 0 lives elsewhere (it is not a parameter)
            assert spec.skip_input and torch.equal(w, identity)
    assert covered == layout.size  # every element of the buffer is used in place, once


def test_split_backward_fills_one_buffer() -> None:
    layout = layout_of(RNNSpec("lstm", 2, 3, 2, direction="bidirectional"))
    params = torch.randn(layout.size, requires_grad=True)
    weights = kernel_weights(layout, params)
    sum(w.sum() * (i + 1) for i, w in enumerate(weights[:3])).backward()  # some blocks unused
    assert params.grad is not None
    expected = torch.zeros(layout.size)
    for i, block in enumerate((layout.fused[0].w_ih, layout.fused[0].w_hh, layout.fused[0].b_ih)):
        assert block is not None
        n = block.shape[0] * (block.shape[1] if len(block.shape) > 1 else 1)
        expected[block.offset : block.offset + n] = i + 1
    assert torch.equal(params.grad, expected)


def test_skip_input_identity_made_in_inference_mode_serves_training() -> None:
    from cudnn_rnn import ops

    op = ops.CudnnRNNTanh(1, 5, 5, input_mode="skip_input", dtype=torch.float64)
    params = torch.randn(op.params_size(), dtype=torch.float64, requires_grad=True)
    x, h = torch.randn(3, 2, 5, dtype=torch.float64), torch.zeros(1, 2, 5, dtype=torch.float64)
    with torch.inference_mode():
        op(x, h, params.detach())
    x.requires_grad_()
    op(x, h, params)[0].sum().backward()
    assert params.grad is not None and x.grad is not None
