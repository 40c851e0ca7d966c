"""Shared test helpers: random canonical weights, the one oracle comparison, torch.nn mapping."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from cudnn_rnn import ops
from cudnn_rnn.core.layout import (
    INPUT,
    INPUT_BIAS,
    PROJECTION,
    RECURRENT,
    RECURRENT_BIAS,
    layout_of,
)
from cudnn_rnn.core.reference import rnn_forward as oracle_forward
from cudnn_rnn.core.spec import RNNSpec

OPS = {
    "lstm": ops.CudnnLSTM,
    "gru": ops.CudnnGRU,
    "rnn_tanh": ops.CudnnRNNTanh,
    "rnn_relu": ops.CudnnRNNRelu,
}


def make_op(spec: RNNSpec, dtype: torch.dtype = torch.float64, seed: int = 0) -> Any:
    kwargs = {"num_proj": spec.num_proj} if spec.num_proj is not None else {}
    return OPS[spec.mode](
        spec.num_layers,
        spec.num_units,
        spec.input_size,
        input_mode=spec.input_mode,
        direction=spec.direction,
        dtype=dtype,
        dropout=spec.dropout,
        seed=seed,
        **kwargs,
    )


def random_canonical(
    spec: RNNSpec, rng: np.random.Generator, scale: float = 0.5
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Canonical weights and biases in U(-scale, scale); identity where skip_input stores none."""
    layout = layout_of(spec)
    weights = [
        np.eye(p.shape[0]) if p.offset is None else rng.uniform(-scale, scale, p.shape)
        for p in layout.weights
    ]
    biases = [rng.uniform(-scale, scale, p.shape) for p in layout.biases]
    return weights, biases


@dataclass
class Case:
    """A random problem for one spec: inputs, states, canonical weights, lengths."""

    spec: RNNSpec
    x: np.ndarray  # as given to the op (time- or batch-major)
    h0: np.ndarray
    c0: np.ndarray | None
    weights: list[np.ndarray]
    biases: list[np.ndarray]
    lengths: np.ndarray | None
    time_major: bool


def make_case(
    spec: RNNSpec,
    steps: int,
    batch: int,
    *,
    seed: int = 0,
    varlen: bool = False,
    time_major: bool = True,
) -> Case:
    rng = np.random.default_rng(seed)
    weights, biases = random_canonical(spec, rng)
    shape = (steps, batch, spec.input_size) if time_major else (batch, steps, spec.input_size)
    x = rng.uniform(-1, 1, shape)
    h0 = rng.uniform(-1, 1, (spec.num_states, batch, spec.output_units))
    c0 = (
        rng.uniform(-1, 1, (spec.num_states, batch, spec.num_units))
        if spec.mode == "lstm"
        else None
    )
    lengths = None
    if varlen:
        lengths = rng.integers(1, steps + 1, batch)
        lengths[rng.integers(batch)] = steps if batch > 1 else lengths[0]
    return Case(spec, x, h0, c0, weights, biases, lengths, time_major)


def run_ours(
    case: Case, dtype: torch.dtype = torch.float64, requires_grad: bool = False, **kw: Any
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Our op on ``case``; ``requires_grad`` runs the engines that keep state for backward."""
    op = make_op(case.spec, dtype)
    params = op.canonical_to_params(case.weights, case.biases).requires_grad_(requires_grad)
    t = lambda a: torch.as_tensor(a).to(dtype)  # noqa: E731
    args = [t(case.x), t(case.h0)] + ([t(case.c0)] if case.c0 is not None else [])
    res = op(*args, params, sequence_lengths=case.lengths, time_major=case.time_major, **kw)
    return res[0], res[1], (res[2] if len(res) == 3 else None)


def run_oracle(
    case: Case, cast: torch.dtype | None = None, **kw: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The NumPy float64 oracle; ``cast`` first rounds every input to that dtype (half tests)."""

    def r(a: Any) -> Any:
        if a is None or cast is None:
            return a
        return torch.as_tensor(a).to(cast).double().numpy()

    return oracle_forward(
        case.spec.mode,
        r(case.x),
        r(case.h0),
        r(case.c0),
        [r(w) for w in case.weights],
        [r(b) for b in case.biases],
        num_layers=case.spec.num_layers,
        bidirectional=case.spec.bidirectional,
        skip_input=case.spec.skip_input,
        num_proj=case.spec.num_proj,
        sequence_lengths=case.lengths,
        time_major=case.time_major,
        **kw,
    )


def assert_matches_oracle(
    case: Case, dtype: torch.dtype, atol: float, rtol: float = 0.0, requires_grad: bool = False
) -> None:
    """The one comparison of our op with the oracle: outputs and every final state."""
    ours = run_ours(case, dtype, requires_grad)
    expected = run_oracle(case, cast=dtype if dtype in (torch.float16, torch.bfloat16) else None)
    for name, got, want in zip(("output", "h", "c"), ours, expected):
        if want is None:
            assert got is None
            continue
        assert got is not None and got.dtype == dtype, name
        np.testing.assert_allclose(
            got.double().detach().numpy(),
            want,
            atol=atol,
            rtol=rtol,
            err_msg=f"{name} differs from the oracle",
        )
    if case.lengths is not None:  # padded steps are exactly zero, not merely close
        out = ours[0].detach() if case.time_major else ours[0].detach().transpose(0, 1)
        for b, n in enumerate(case.lengths):
            assert bool((out[int(n) :, b] == 0).all())
    # The engine that kept state must also give the right gradients (where torch.nn can hold
    # the model: it refuses a projection as wide as the cell, which gradcheck covers).
    if requires_grad and (case.spec.num_proj or 0) < case.spec.num_units:
        assert_matches_torch_nn(case, dtype, atol=10 * atol, rtol=max(rtol, 1e-5), forward=False)


def assert_matches_torch_nn(
    case: Case, dtype: torch.dtype, atol: float, rtol: float = 0.0, forward: bool = True
) -> None:
    """Our op in ``dtype`` against torch.nn's LSTM/GRU/RNN in float64 holding the same canonical
    weights (a real peer): outputs and final states (``forward``), and the gradients of a
    random weighting of them with respect to the input, the initial states and every stored
    weight and bias (through the canonical form of the buffer's gradient)."""
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    spec = case.spec
    op = make_op(spec, dtype)

    def leaf(a: np.ndarray | None, cast: torch.dtype) -> torch.Tensor | None:
        return None if a is None else torch.tensor(a, dtype=cast, requires_grad=True)

    x, h0, c0 = (leaf(a, dtype) for a in (case.x, case.h0, case.c0))
    x2, h02, c02 = (leaf(a, torch.float64) for a in (case.x, case.h0, case.c0))
    params = op.canonical_to_params(case.weights, case.biases).to(dtype).requires_grad_()
    states = [h0] if c0 is None else [h0, c0]
    lengths = case.lengths
    ours = op(x, *states, params, sequence_lengths=lengths, time_major=case.time_major)
    ours = (*ours, None) if c0 is None else ours

    module = torch_module(spec, case.weights, case.biases)
    assert x2 is not None
    seq = x2 if case.time_major else x2.transpose(0, 1)
    hx = (h02, c02) if c02 is not None else h02
    if lengths is not None:
        packed = pack_padded_sequence(seq, torch.as_tensor(lengths), enforce_sorted=False)
        y, state = module(packed, hx)
        y = pad_packed_sequence(y, total_length=seq.shape[0])[0]
    else:
        y, state = module(seq, hx)
    y = y if case.time_major else y.transpose(0, 1)
    theirs = (y, *state) if isinstance(state, tuple) else (y, state, None)

    # Random cotangents, so that every output element and state matters to the gradients.
    rng = np.random.default_rng(3)
    loss_ours: Any = 0.0
    loss_theirs: Any = 0.0
    for name, a, b in zip(("output", "h", "c"), ours, theirs):
        if b is None:
            assert a is None
            continue
        if forward:
            np.testing.assert_allclose(
                a.detach().double().numpy(), b.detach().numpy(), atol=atol, rtol=rtol,
                err_msg=f"{name} differs from torch.nn",
            )  # fmt: skip
        w = rng.standard_normal(tuple(a.shape))
        loss_ours = loss_ours + (a * torch.as_tensor(w, dtype=dtype)).sum()
        loss_theirs = loss_theirs + (b * torch.as_tensor(w)).sum()
    loss_ours.backward()
    loss_theirs.backward()

    def close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
        np.testing.assert_allclose(
            got.double().numpy(), want.numpy(), atol=atol, rtol=rtol,
            err_msg=f"the gradient of {what} differs from torch.nn's",
        )  # fmt: skip

    for what, mine, peer in (("the input", x, x2), ("h0", h0, h02), ("c0", c0, c02)):
        if mine is not None:
            assert mine.grad is not None and peer is not None and peer.grad is not None
            close(mine.grad, peer.grad, what)
    if lengths is not None:  # padded inputs do not influence anything
        assert x is not None and x.grad is not None
        dx = x.grad if case.time_major else x.grad.transpose(0, 1)
        for b, n in enumerate(lengths):
            assert bool((dx[int(n) :, b] == 0).all())

    # Parameter gradients, tensor by tensor through the canonical form of params.grad.
    assert params.grad is not None
    grads_w, grads_b = op.params_to_canonical(params.grad)
    layout = layout_of(spec)
    for name, parameter in module.named_parameters():
        entries = [
            (p, g)
            for p, g in zip(layout.weights + layout.biases, grads_w + grads_b)
            if TORCH_NAMES[p.kind] + f"_l{p.layer}{'_reverse' if p.direction else ''}" == name
        ]
        assert entries, name
        if entries[0][0].offset is None:  # skip_input: no stored matrix, nothing to train
            continue
        assert parameter.grad is not None
        close(torch.cat([g for _, g in entries]), parameter.grad, name)


TORCH_NAMES = {
    INPUT: "weight_ih",
    RECURRENT: "weight_hh",
    PROJECTION: "weight_hr",
    INPUT_BIAS: "bias_ih",
    RECURRENT_BIAS: "bias_hh",
}


def torch_module(spec: RNNSpec, weights: list[Any], biases: list[Any]) -> torch.nn.RNNBase:
    """A torch.nn.LSTM/GRU/RNN in float64 holding the same canonical weights.

    The mapping is torch's documented one (gates stacked in cuDNN order), written here from the
    layout table's (layer, direction, kind) tags, not from its offsets.
    """
    layout = layout_of(spec)
    common = dict(
        input_size=spec.input_size,
        hidden_size=spec.num_units,
        num_layers=spec.num_layers,
        bidirectional=spec.bidirectional,
        dtype=torch.float64,
    )
    if spec.mode == "lstm":
        module: torch.nn.RNNBase = torch.nn.LSTM(proj_size=spec.num_proj or 0, **common)
    elif spec.mode == "gru":
        module = torch.nn.GRU(**common)
    else:
        module = torch.nn.RNN(nonlinearity=spec.mode[4:], **common)
    groups: dict[str, list[Any]] = {}
    for p, w in zip(layout.weights + layout.biases, list(weights) + list(biases)):
        sfx = f"_l{p.layer}{'_reverse' if p.direction else ''}"
        name = TORCH_NAMES[p.kind] + sfx
        groups.setdefault(name, []).append(torch.as_tensor(w, dtype=torch.float64))
    with torch.no_grad():
        for name, parts in groups.items():
            getattr(module, name).copy_(torch.cat(parts))
    return module


def check_export_dynamic(
    layer: torch.nn.Module, x: torch.Tensor, other: torch.Tensor, atol: float
) -> None:
    """Export ``layer``'s outputs with dynamic T and B at ``x``; the program equals the layer on
    ``other`` (another T and B)."""

    class Outputs(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = layer

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.rnn(x)[0]  # type: ignore[no-any-return]

    dims = {"x": {0: torch.export.Dim("T", min=2), 1: torch.export.Dim("B", min=2)}}
    program = torch.export.export(Outputs(), (x,), dynamic_shapes=dims)
    torch.testing.assert_close(program.module()(other), layer(other)[0], atol=atol, rtol=atol)


def damaged(good: bytes, case: int, rng: np.random.Generator) -> bytes:
    """A damaged copy of a file's bytes for the hostile-input tests: odd cases cut it at a
    random length, even ones flip 1 to 3 random bytes (each by a random non-zero mask)."""
    data = bytearray(good)
    if case % 2:
        return bytes(data[: int(rng.integers(0, len(good)))])
    for at in rng.integers(0, len(good), size=int(rng.integers(1, 4))):
        data[at] ^= int(rng.integers(1, 256))
    return bytes(data)
