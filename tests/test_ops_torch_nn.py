"""The same canonical weights in torch.nn.LSTM/GRU/RNN: same outputs, states and gradients."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from cudnn_rnn.core.layout import layout_of
from cudnn_rnn.core.spec import RNNSpec
from tests.support.helpers import TORCH_NAMES, make_case, make_op, torch_module

CONFIGS = [
    (mode, layers, direction, input_mode, proj, varlen)
    for mode, layers, direction, input_mode, varlen in itertools.product(
        ("lstm", "gru", "rnn_tanh", "rnn_relu"),
        (1, 3),
        ("unidirectional", "bidirectional"),
        ("linear_input", "skip_input"),
        (False, True),
    )
    for proj in ((None, 2) if mode == "lstm" else (None,))
]


@pytest.mark.parametrize("mode,layers,direction,input_mode,proj,varlen", CONFIGS)
def test_same_outputs_states_and_gradients(
    mode: str, layers: int, direction: str, input_mode: str, proj: int | None, varlen: bool
) -> None:
    spec = RNNSpec(
        mode, layers, 3, 3 if input_mode == "skip_input" else 2, input_mode, direction, proj
    )
    case = make_case(spec, 5, 4, seed=11, varlen=varlen)
    op = make_op(spec)
    module = torch_module(spec, case.weights, case.biases)

    def leaf(a: np.ndarray | None) -> torch.Tensor | None:
        return None if a is None else torch.tensor(a, requires_grad=True)

    x, h0, c0 = leaf(case.x), leaf(case.h0), leaf(case.c0)
    x2, h02, c02 = leaf(case.x), leaf(case.h0), leaf(case.c0)
    params = op.canonical_to_params(case.weights, case.biases).requires_grad_()

    ours = (
        op(x, h0, c0, params, sequence_lengths=case.lengths)
        if c0 is not None
        else (*op(x, h0, params, sequence_lengths=case.lengths), None)
    )
    hx = (h02, c02) if c02 is not None else h02
    if case.lengths is not None:
        packed = pack_padded_sequence(x2, torch.as_tensor(case.lengths), enforce_sorted=False)
        y, state = module(packed, hx)
        y = pad_packed_sequence(y, total_length=x2.shape[0])[0]
    else:
        y, state = module(x2, hx)
    theirs = (y, *state) if isinstance(state, tuple) else (y, state, None)

    # Random cotangents so that every output element and state matters to the gradients.
    rng = np.random.default_rng(3)
    loss_ours = loss_theirs = 0.0
    for a, b in zip(ours, theirs):
        if b is None:
            assert a is None
            continue
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), atol=1e-12)
        w = torch.as_tensor(rng.standard_normal(tuple(a.shape)))
        loss_ours = loss_ours + (a * w).sum()
        loss_theirs = loss_theirs + (b * w).sum()
    loss_ours.backward()  # type: ignore[union-attr]
    loss_theirs.backward()  # type: ignore[union-attr]

    for ours_leaf, their_leaf in ((x, x2), (h0, h02), (c0, c02)):
        if ours_leaf is not None:
            assert ours_leaf.grad is not None and their_leaf is not None
            np.testing.assert_allclose(ours_leaf.grad.numpy(), their_leaf.grad.numpy(), atol=1e-12)
    if case.lengths is not None:  # padded inputs do not influence anything
        assert x is not None and x.grad is not None
        for b, n in enumerate(case.lengths):
            assert bool((x.grad[int(n) :, b] == 0).all())

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
        expected = torch.cat([g for _, g in entries])
        assert parameter.grad is not None
        np.testing.assert_allclose(
            expected.numpy(), parameter.grad.numpy(), atol=1e-12, err_msg=name
        )
