"""Dropout: between layers only, in training only, inverted, reproducible, off the global RNG."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cudnn_rnn.core.spec import RNNSpec
from tests.support.helpers import make_case, make_op, run_oracle

MODES = ("lstm", "gru", "rnn_tanh", "rnn_relu")


def _run(
    spec: RNNSpec,
    case: object,
    training: bool,
    seed: int = 0,
    op: object = None,
    grad: bool = False,
) -> list[torch.Tensor]:
    """``grad`` makes the buffer require a gradient: the engines that keep state for backward."""
    op = op or make_op(spec, seed=seed)
    params = op.canonical_to_params(case.weights, case.biases)  # type: ignore[attr-defined]
    params.requires_grad_(grad)
    args = [torch.as_tensor(a) for a in (case.x, case.h0, case.c0) if a is not None]  # type: ignore[attr-defined]
    return list(
        op(
            *args,
            params,
            is_training=training,  # type: ignore[operator]
            sequence_lengths=case.lengths,
            time_major=case.time_major,
        )
    )  # type: ignore[attr-defined]


def _masks(spec: RNNSpec, steps: int, batch: int, seed: int) -> list[np.ndarray]:
    """The documented mask stream: per layer after the first, one Bernoulli(1 - p) draw of shape
    [T, B, D * Hout] in float32 from a torch.Generator seeded with the op's seed, scaled by
    1 / (1 - p)."""
    gen = torch.Generator().manual_seed(seed)
    p = spec.dropout
    out = []
    for _ in range(spec.num_layers - 1):
        keep = torch.empty(steps, batch, spec.num_dirs * spec.output_units).bernoulli_(
            1 - p, generator=gen
        )
        out.append((keep * (0.0 if p == 1 else 1 / (1 - p))).double().numpy())
    return out


@pytest.mark.parametrize("mode", MODES)
def test_inference_does_not_depend_on_dropout(mode: str) -> None:
    results = []
    for p in (0.0, 0.5, 1.0):
        spec = RNNSpec(mode, 3, 3, 2, direction="bidirectional", dropout=p)
        results.append(_run(spec, make_case(spec, 5, 2, seed=1), training=False))
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert torch.equal(a, b)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("direction", ["unidirectional", "bidirectional"])
def test_p_one_zeroes_inter_layer_activations(mode: str, direction: str) -> None:
    spec = RNNSpec(mode, 3, 3, 2, direction=direction, dropout=1.0)
    case = make_case(spec, 5, 2, seed=2)
    got = _run(spec, case, training=True)
    assert all(bool(torch.isfinite(t).all()) for t in got)
    zeros = [np.zeros((5, 2, spec.num_dirs * 3))] * 2
    want = run_oracle(case, dropout_masks=zeros)
    for g, w in zip(got, want):
        assert w is not None
        np.testing.assert_allclose(g.numpy(), w, atol=1e-12)
    # ...and that differs from no dropout: the upper layers really saw zeros.
    assert not np.allclose(_run(spec, case, training=False)[0].numpy(), want[0])


@pytest.mark.parametrize("mode", MODES)
def test_single_layer_is_unaffected(mode: str) -> None:
    spec = RNNSpec(mode, 1, 3, 2, direction="bidirectional", dropout=0.9)
    case = make_case(spec, 5, 2, seed=3)
    for a, b in zip(_run(spec, case, training=True), _run(spec, case, training=False)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("varlen,time_major", [(False, True), (True, True), (True, False)])
def test_training_output_equals_oracle_with_the_seeded_masks(
    mode: str, varlen: bool, time_major: bool, grad: bool
) -> None:
    spec = RNNSpec(mode, 3, 4, 2, direction="bidirectional", dropout=0.4)
    case = make_case(spec, 6, 3, seed=4, varlen=varlen, time_major=time_major)
    got = _run(spec, case, training=True, seed=123, grad=grad)
    want = run_oracle(case, dropout_masks=_masks(spec, 6, 3, seed=123))
    for g, w in zip(got, want):
        assert w is not None
        np.testing.assert_allclose(g.detach().numpy(), w, atol=1e-12)


def test_same_seed_same_masks_and_masks_advance() -> None:
    spec = RNNSpec("lstm", 2, 8, 4, dropout=0.5)
    case = make_case(spec, 10, 4, seed=5)
    a, b, c = (make_op(spec, seed=s) for s in (7, 7, 8))
    first_a, first_b, first_c = (_run(spec, case, True, op=o)[0] for o in (a, b, c))
    assert torch.equal(first_a, first_b)
    assert not torch.equal(first_a, first_c)
    second_a = _run(spec, case, True, op=a)[0]
    assert not torch.equal(first_a, second_a)  # the generator state persists across calls
    assert torch.equal(second_a, _run(spec, case, True, op=b)[0])


def test_global_rng_untouched() -> None:
    spec = RNNSpec("gru", 3, 4, 2, dropout=0.5)
    case = make_case(spec, 5, 2, seed=6)
    state = torch.get_rng_state()
    _run(spec, case, training=True)
    make_op(spec, seed=None)  # a fresh random seed is not drawn from torch either
    assert torch.equal(state, torch.get_rng_state())
