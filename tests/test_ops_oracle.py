"""Our op against the NumPy oracle over the grid of every feature, on tiny sizes that include 1."""

from __future__ import annotations

import itertools
import zlib

import pytest
import torch

from cudnn_rnn.core.spec import RNNSpec
from tests.support.helpers import assert_matches_oracle, make_case

MODES = ("lstm", "gru", "rnn_tanh", "rnn_relu")
# (steps, batch, input_size, num_units): sizes of 1 everywhere, then a small general shape.
SIZES = ((1, 1, 1, 1), (4, 3, 2, 3))


def _grid() -> list[tuple[object, ...]]:
    cases = []
    for mode, layers, direction, input_mode, varlen, time_major, sizes in itertools.product(
        MODES,
        (1, 2, 3),
        ("unidirectional", "bidirectional"),
        ("linear_input", "skip_input", "auto_select"),
        (False, True),
        (True, False),
        SIZES,
    ):
        steps, batch, in_size, units = sizes
        if input_mode == "skip_input":
            in_size = units
        projs: tuple[int | None, ...] = (None,)
        if mode == "lstm" and units > 1:
            projs = (None, 1, units)  # a true projection and the num_proj == num_units edge
        for proj in projs:
            cases.append(
                (
                    mode,
                    layers,
                    direction,
                    input_mode,
                    proj,
                    varlen,
                    time_major,
                    steps,
                    batch,
                    in_size,
                    units,
                )
            )
    return cases


GRID = _grid()


def _id(case: tuple[object, ...]) -> str:
    return "-".join(str(v) for v in case)


@pytest.mark.parametrize("case", GRID, ids=[_id(c) for c in GRID])
@pytest.mark.parametrize("dtype,atol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_matches_oracle(
    case: tuple[object, ...], dtype: torch.dtype, atol: float, grad: bool
) -> None:
    """Inference (torch's kernels) and training engines (oneDNN, our loop) alike."""
    mode, layers, direction, input_mode, proj, varlen, time_major, steps, batch, i, h = case
    spec = RNNSpec(mode, layers, h, i, input_mode, direction, proj)  # type: ignore[arg-type]
    c = make_case(
        spec,
        steps,
        batch,
        seed=zlib.crc32(_id(case).encode()),
        varlen=bool(varlen),  # type: ignore[arg-type]
        time_major=bool(time_major),
    )
    assert_matches_oracle(c, dtype, atol=atol, requires_grad=grad)


def test_grid_covers_every_feature() -> None:
    """The grid above really contains each feature (guards against a filter that empties it)."""
    fields = list(zip(*GRID))
    assert set(fields[0]) == set(MODES)
    assert set(fields[1]) == {1, 2, 3}
    assert {p for p in fields[4] if p is not None} == {1, 3}
    assert set(fields[5]) == {False, True} and set(fields[6]) == {False, True}


# Half types: the oracle runs in float64 on the same values rounded to the half type, so what is
# left is the rounding inside the computation: each step rounds the gate pre-activations and the
# new states to the half type (unit roundoff u = 2^-11 for float16, 2^-8 for bfloat16; the matmuls
# accumulate in float32), and the nonlinearities have slope <= 1, so errors stay a few u on these
# T = 6, L = 2 problems. Measured over 80 configurations (4 modes x directions x lengths x 5 seeds):
# worst 3.0 u (float16) and 3.3 u (bfloat16). We allow 8 u: 0.0039 and 0.031 absolute.
HALF = [(torch.float16, 8 * 2.0**-11), (torch.bfloat16, 8 * 2.0**-8)]


@pytest.mark.parametrize("dtype,atol", HALF)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("direction", ["unidirectional", "bidirectional"])
@pytest.mark.parametrize("varlen", [False, True])
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_half_types_match_oracle(
    dtype: torch.dtype, atol: float, mode: str, direction: str, varlen: bool, grad: bool
) -> None:
    proj = 2 if mode == "lstm" else None
    spec = RNNSpec(mode, 2, 4, 3, direction=direction, num_proj=proj)
    case = make_case(spec, 6, 3, seed=7, varlen=varlen)
    assert_matches_oracle(case, dtype, atol=atol, requires_grad=grad)
