"""Every public entry with tensors in every memory layout gives the bits of contiguous copies.

Expanded (stride 0 over the batch or the features), sliced (stride 2), transposed (a batch-major
tensor viewed time-major), at an offset into its storage, channels-last-like (the features not
innermost) and zero-stride tensors, as inputs, states, parameters and lengths, through the op
level, the layers, a compatible cell's step and the ``dynamic_rnn`` driver, in float32 (the
native engine) and float64 (torch's engines and the loop). Each call must give exactly the
outputs and gradients of the same call on contiguous copies (issue 20: the native engine read
strided tensors as if contiguous).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from cudnn_rnn import CudnnLSTM, ops
from cudnn_rnn.cells import (
    CudnnCompatibleGRUCell,
    CudnnCompatibleLSTMCell,
    MultiRNNCell,
    dynamic_rnn,
)

T, B, IN, H = 5, 4, 3, 6
DTYPES = [torch.float32, torch.float64]


def _contiguous(shape: tuple[int, ...], dtype: torch.dtype) -> Tensor:
    return torch.randn(shape, dtype=dtype)


#: name -> a tensor of ``shape`` in that layout (values random, or repeated where a stride is 0).
LAYOUTS: dict[str, Callable[[tuple[int, ...], torch.dtype], Tensor]] = {
    "expanded": lambda s, d: torch.randn((*s[:-2], 1, s[-1]), dtype=d).expand(s),
    "zero-stride": lambda s, d: torch.randn((*s[:-1], 1), dtype=d).expand(s),
    "sliced": lambda s, d: torch.randn((*s[:-1], 2 * s[-1]), dtype=d)[..., ::2],
    "transposed": lambda s, d: torch.randn((s[1], s[0], *s[2:]), dtype=d).transpose(0, 1),
    "offset": lambda s, d: torch.randn(torch.Size(s).numel() + 7, dtype=d)[7:].view(s),
    "channels-last": lambda s, d: torch.randn((s[-1], *s[:-1]), dtype=d).movedim(0, -1),
}


def _strided(name: str, shape: tuple[int, ...], dtype: torch.dtype) -> Tensor:
    t = LAYOUTS[name](shape, dtype)
    assert tuple(t.shape) == shape
    return t


def _same(
    run: Callable[..., tuple[Tensor, ...]], strided: list[Tensor], wrt_extra: list[Tensor]
) -> None:
    """``run`` on ``strided`` and on contiguous copies: equal outputs and gradients, bitwise."""
    results = []
    for tensors in (strided, [t.contiguous() for t in strided]):
        leaves = [t.detach().requires_grad_(t.is_floating_point()) for t in tensors]
        outs = run(*leaves)
        loss = sum((o.double() * (k + 1)).sum() for k, o in enumerate(outs))
        wrt = [t for t in leaves if t.requires_grad] + wrt_extra
        grads = torch.autograd.grad(loss, wrt)
        results.append([o.detach() for o in outs] + list(grads))
    for k, (a, b) in enumerate(zip(*results)):
        assert torch.equal(a, b), f"result {k} differs from the contiguous call"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_op_level(mode: str, layout: str, dtype: torch.dtype) -> None:
    """Input, states and the parameter buffer in the layout; lengths expanded."""
    torch.manual_seed(0)
    op = (ops.CudnnLSTM if mode == "lstm" else ops.CudnnGRU)(
        2, H, IN, direction="bidirectional", dtype=dtype
    )
    n = op.params_size()
    params = {
        "sliced": lambda: torch.randn(2 * n, dtype=dtype)[::2],
        "offset": lambda: torch.randn(n + 5, dtype=dtype)[5:],
    }.get(layout, lambda: torch.randn(n, dtype=dtype))() * 0.5
    x = _strided(layout, (T, B, IN), dtype)
    states = [_strided(layout, (4, B, H), dtype) for _ in range(2 if mode == "lstm" else 1)]
    lengths = torch.tensor([T, 0, 2, 0, 4, 0, 1, 0])[::2]  # sliced: [5, 2, 4, 1]

    def run(x: Tensor, *rest: Tensor) -> tuple[Tensor, ...]:
        *states, p = rest
        return tuple(op(x, *states, p, sequence_lengths=lengths))

    _same(run, [x, *states, params], [])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("time_major", [True, False], ids=["time-major", "batch-major"])
def test_layer(layout: str, dtype: torch.dtype, time_major: bool) -> None:
    torch.manual_seed(1)
    layer = CudnnLSTM(2, H, direction="bidirectional", input_size=IN, dtype=dtype)
    shape = (T, B, IN) if time_major else (B, T, IN)
    x = _strided(layout, shape, dtype)
    h, c = _strided(layout, (4, B, H), dtype), _strided(layout, (4, B, H), dtype)
    lengths = torch.tensor([T]).expand(B)  # zero stride

    def run(x: Tensor, h: Tensor, c: Tensor) -> tuple[Tensor, ...]:
        out, (hn, cn) = layer(x, (h, c), sequence_lengths=lengths, time_major=time_major)
        return out, hn, cn

    _same(run, [x, h, c], [layer.opaque_kernel])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_compatible_cell_step_and_dynamic_rnn(layout: str, dtype: torch.dtype, mode: str) -> None:
    torch.manual_seed(2)
    cls = CudnnCompatibleLSTMCell if mode == "lstm" else CudnnCompatibleGRUCell
    cell = cls(H, dtype=dtype)
    x_t = _strided(layout, (B, IN), dtype)
    state = [_strided(layout, (B, H), dtype) for _ in range(2 if mode == "lstm" else 1)]

    def step(x: Tensor, *s: Tensor) -> tuple[Tensor, ...]:
        out, new = cell(x, tuple(s) if mode == "lstm" else s[0])
        return (out, *(new if mode == "lstm" else (new,)))

    cell(x_t.contiguous(), tuple(t.contiguous() for t in state) if mode == "lstm" else state[0])
    _same(step, [x_t, *state], list(cell.parameters()))

    stack = MultiRNNCell([cls(H, dtype=dtype), cls(H, dtype=dtype)])
    inputs = _strided(layout, (B, T, IN), dtype)  # batch-major, as TF's default
    lengths = torch.tensor([T, 0, 3, 0, 1, 0, 4, 0])[::2]
    dynamic_rnn(stack, inputs.contiguous(), sequence_length=lengths)  # builds the variables

    def run(x: Tensor) -> tuple[Tensor, ...]:
        out, final = dynamic_rnn(stack, x, sequence_length=lengths)
        flat = [t for s in final for t in (s if isinstance(s, tuple) else (s,))]
        return (out, *flat)

    _same(run, [inputs], list(stack.parameters()))
