"""cudnn_rnn.nn on CUDA against torch.nn on cuDNN (the cuda marker: skipped without a GPU;
`make gpu-check` runs them): values and gradients, a compiled training step, the buffer that
cuDNN takes without a copy."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn as tnn

import cudnn_rnn.nn as cnn
from tests.nn.pairs import IN, H, pair

pytestmark = pytest.mark.cuda

KINDS = {
    "lstm": (cnn.LSTM, tnn.LSTM, {}),
    "lstm-proj": (cnn.LSTM, tnn.LSTM, {"proj_size": 3}),
    "gru": (cnn.GRU, tnn.GRU, {}),
    "rnn-relu": (cnn.RNN, tnn.RNN, {"nonlinearity": "relu"}),
    "lstm-cell": (cnn.LSTMCell, tnn.LSTMCell, {}),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_values_and_gradients_equal_torch_nn_on_cudnn(kind: str, dtype: torch.dtype) -> None:
    options = {} if kind.endswith("cell") else {"num_layers": 2, "bidirectional": True}
    a, b = pair(KINDS, kind, device="cuda", dtype=dtype, **options)
    tol = 1e-10 if dtype == torch.float64 else 1e-5
    x = torch.randn(*((3,) if kind.endswith("cell") else (6, 3)), IN, device="cuda", dtype=dtype,
                    requires_grad=True)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "not part of single contiguous chunk" copy
        ra = a(x)
    rb = b(x)
    fa = [ra[0], *(ra[1] if isinstance(ra[1], tuple) else (ra[1],))] if not kind.endswith(
        "cell") else list(ra)  # fmt: skip
    fb = [rb[0], *(rb[1] if isinstance(rb[1], tuple) else (rb[1],))] if not kind.endswith(
        "cell") else list(rb)  # fmt: skip
    for u, v in zip(fa, fb):
        torch.testing.assert_close(u, v, atol=tol, rtol=tol)
    ga = torch.autograd.grad(sum(t.sum() for t in fa), [x, *a.parameters()])
    gb = torch.autograd.grad(sum(t.sum() for t in fb), [x, *b.parameters()])
    for u, v in zip(ga, gb):
        torch.testing.assert_close(u, v, atol=tol * 10, rtol=tol * 10)


def test_a_compiled_training_step_equals_eager_on_cuda() -> None:
    torch._dynamo.reset()
    model = cnn.replace_rnns(
        tnn.Sequential(tnn.LSTM(IN, H, num_layers=2, batch_first=True, device="cuda"))
    )
    x = torch.randn(4, 7, IN, device="cuda")
    compiled = torch.compile(model, fullgraph=True)
    want = model(x)[0]
    want.sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    got = compiled(x)[0]
    got.sum().backward()
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    for p, g in zip(model.parameters(), grads):
        torch.testing.assert_close(p.grad, g, atol=1e-5, rtol=1e-5)
