"""One call gives the same bits on any thread count, at every instruction set the machine can run.

Through the public op API (the path users take): outputs, final states, the input's and the
initial states' gradients and the weight gradients (the opaque buffer's), every mode, uni- and
bidirectional, two layers, with and without lengths, on 1 to 16 threads, at each instruction set
the native engine can run here, forced (so an AVX-512 machine runs the AVX2 paths too). A child
process then runs the same check as an AVX2-only machine would: the engine, MKL and oneDNN all
limited to AVX2 by their environment variables. The backward's products are the engine's own
(engine.c's ``cr_gemm``), checked here against float64 matmul and across threads and ISAs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cudnn_rnn import ops
from cudnn_rnn.engines import native, native_boundary, native_library
from tests.support.isa import isa_params, threads_kept

LEVELS = native.level_names()
ROOT = Path(__file__).resolve().parents[2]
THREADS = (1, 2, 3, 4, 7, 16)
CLASSES = {"lstm": ops.CudnnLSTM, "gru": ops.CudnnGRU, "rnn_tanh": ops.CudnnRNNTanh,
           "rnn_relu": ops.CudnnRNNRelu}  # fmt: skip

needs_engine = pytest.mark.skipif(not LEVELS, reason="the native engine is not built")


def _one_call(mode: str, direction: str, lengths: bool) -> list[torch.Tensor]:
    """Outputs and every gradient of one training call, sizes at which the time loops and the
    backward's products both split their work over the threads."""
    g = torch.Generator().manual_seed(11)
    units, steps, batch, inputs = 96, 9, 8, 40
    op = CLASSES[mode](2, units, inputs, direction=direction)
    dirs = 2 if direction == "bidirectional" else 1
    params = (torch.randn(op.params_size(), generator=g) / units**0.5).requires_grad_()
    x = torch.randn(steps, batch, inputs, generator=g).requires_grad_()
    h0 = torch.randn(2 * dirs, batch, units, generator=g).requires_grad_()
    c0 = torch.randn(2 * dirs, batch, units, generator=g).requires_grad_()
    seq = torch.tensor([9, 3, 7, 1, 9, 5, 2, 8]) if lengths else None
    if mode == "lstm":
        out = op(x, h0, c0, params, sequence_lengths=seq)
        leaves = [x, h0, c0, params]
    else:
        out = op(x, h0, params, sequence_lengths=seq)
        leaves = [x, h0, params]
    weights = [torch.randn(o.shape, generator=g) for o in out]
    loss = sum((o * w).sum() for o, w in zip(out, weights))
    grads = torch.autograd.grad(loss, leaves)
    return [o.detach() for o in out] + list(grads)


def _same_on_every_thread_count(mode: str, direction: str, lengths: bool) -> None:
    with threads_kept():
        torch.set_num_threads(1)
        want = _one_call(mode, direction, lengths)
        for n in THREADS[1:]:
            torch.set_num_threads(n)
            got = _one_call(mode, direction, lengths)
            names = ["y", "h", "c", "dx", "dh0", "dc0", "dparams"]
            if mode != "lstm":
                names = ["y", "h", "dx", "dh0", "dparams"]
            for name, a, b in zip(names, want, got):
                assert torch.equal(a, b), (
                    f"{name} differs on {n} threads from 1",
                    native.describe(),
                )


@needs_engine
@pytest.mark.parametrize("level", isa_params())
@pytest.mark.parametrize("mode", list(CLASSES))
def test_one_call_gives_the_same_bits_on_1_to_16_threads(mode: str, level: str) -> None:
    with native.use_level(level):
        for direction in ("unidirectional", "bidirectional"):
            for lengths in (False, True):
                _same_on_every_thread_count(mode, direction, lengths)


@needs_engine
@pytest.mark.skipif("avx2" not in LEVELS, reason="the machine cannot run AVX2")
def test_an_avx2_only_machine_gives_the_same_bits_on_every_thread_count() -> None:
    """A child process set up as a machine without AVX-512: the engine at AVX2
    (``CUDNN_RNN_NATIVE_ISA``), MKL and oneDNN limited to AVX2, every mode, both directions,
    with and without lengths."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from cudnn_rnn.engines import native\n"
        "import test_same_bits as t\n"
        "assert native.describe().startswith('native (avx2,'), native.describe()\n"
        "for mode in t.CLASSES:\n"
        "    for direction in ('unidirectional', 'bidirectional'):\n"
        "        for lengths in (False, True):\n"
        "            t._same_on_every_thread_count(mode, direction, lengths)\n"
        "print('same bits')\n"
    )
    env = {**os.environ, native.ISA_ENV: "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
           "ONEDNN_MAX_CPU_ISA": "AVX2", "DNNL_MAX_CPU_ISA": "AVX2"}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-c", code, str(Path(__file__).parent)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0 and "same bits" in proc.stdout, proc.stderr[-3000:]


@needs_engine
def test_an_unknown_instruction_set_in_the_environment_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The engine does not load (torch's kernels run, NativeEngineWarning says why)."""
    monkeypatch.setenv(native.ISA_ENV, "neon")
    state = native_library._Library()
    assert state.lib is None
    assert state.reason.startswith("CUDNN_RNN_NATIVE_ISA='neon' is not an instruction set")
    assert f"choose one of {LEVELS} or unset it" in state.reason


# ---- the backward's products ----------------------------------------------------------------

SHAPES = [  # m, n, k: one of each edge (ones, a k of 0, no columns, column tails, many chunks)
    (1, 1, 1), (7, 5, 3), (13, 130, 1000), (200, 17, 0), (5, 0, 9), (97, 33, 513), (300, 64, 40),
]  # fmt: skip


@needs_engine
@pytest.mark.parametrize("level", isa_params())
def test_the_backward_products_match_float64_and_repeat_on_every_thread_count(level: str) -> None:
    """``c (+)= a @ b`` and ``c = a.T @ b`` with ``a``'s column sums: within float32 rounding
    of float64 matmul, and the same bits on 1, 2, 3 and 5 threads; a slice of columns (rows
    apart) reads and writes only its own elements."""
    g = torch.Generator().manual_seed(4)
    with threads_kept():
        with native.use_level(level):
            for m, n, k in SHAPES:
                for at in (False, True):
                    for accumulate in (False, True):
                        a = torch.randn((k, m) if at else (m, k), generator=g)
                        b = torch.randn(k, n, generator=g)
                        start = torch.randn(m, n, generator=g)
                        want = (a.double().t() if at else a.double()) @ b.double()
                        want += start.double() if accumulate else 0
                        results = []
                        for t in (1, 2, 3, 5):
                            torch.set_num_threads(t)
                            c = start.clone()
                            sums = torch.full((m,), float("nan")) if at else None
                            native_boundary._gemm(at, a, b, c, accumulate=accumulate, colsum=sums)
                            results.append(c)
                            if sums is not None:
                                torch.testing.assert_close(
                                    sums.double(), a.double().sum(0), atol=1e-5 * (k + 1), rtol=0
                                )
                        where = (m, n, k, at, accumulate)
                        assert all(torch.equal(results[0], r) for r in results[1:]), where
                        torch.testing.assert_close(
                            results[0].double(), want, atol=1e-5 * (k + 1), rtol=1e-5
                        )
            a, b = torch.randn(50, 70, generator=g), torch.randn(50, 30, generator=g)
            wide = torch.zeros(70, 45)
            native_boundary._gemm(True, a[:, 10:60], b, wide[10:60, 5:35])
            torch.testing.assert_close(wide[10:60, 5:35], a[:, 10:60].t() @ b)
            wide[10:60, 5:35] = 0
            assert not wide.any()  # nothing written outside the slice


@needs_engine
@pytest.mark.parametrize("level", isa_params())
def test_the_backward_products_give_the_same_bits_packed_and_direct(level: str) -> None:
    """``cr_gemm`` packs B by rule only where it pays (``use_backward_products``): the direct way
    reads both operands where they are, and each element is still one chain in increasing k, so
    the two agree bitwise, on 1 to 3 threads, with column tails, accumulation, and operands that
    are slices of wider matrices (row strides above their widths)."""
    g = torch.Generator().manual_seed(6)
    shapes = [*SHAPES, (600, 70, 300), (40, 256, 1024), (96, 48, 130), (513, 20, 129)]
    with threads_kept():
        with native.use_level(level):
            for m, n, k in shapes:
                for at in (False, True):
                    wide_a = torch.randn((k, m + 3) if at else (m, k + 5), generator=g)
                    a = wide_a[:, 2 : m + 2] if at else wide_a[:, 3 : k + 3]
                    b = torch.randn(k, n + 4, generator=g)[:, 1 : n + 1]
                    start = torch.randn(m, n, generator=g)
                    got = {}
                    for way in ("packed", "direct"):
                        for t in (1, 2, 3):
                            torch.set_num_threads(t)
                            c = start.clone()
                            sums = torch.empty(m) if at else None
                            with native.use_backward_products(way):
                                native_boundary._gemm(at, a, b, c, accumulate=True, colsum=sums)
                            got[way, t] = (c, sums)
                    first = got["packed", 1]
                    for key, (c, sums) in got.items():
                        assert torch.equal(c, first[0]), (m, n, k, at, key)
                        assert sums is None or torch.equal(sums, first[1]), (m, n, k, at, key)


@needs_engine
@pytest.mark.parametrize("level", isa_params())
@pytest.mark.parametrize("mode", list(CLASSES))
def test_the_backward_reads_r_in_place_with_the_packed_bits(level: str, mode: str) -> None:
    """The backward's product on R (dh = dg @ R) reads R where it is for one step (a cell's
    call) and packs it for more, by rule. Forced each way in the backward of the same forward
    (made by the rule each time: a second backward of one graph re-runs the forward, whose
    products the forcing would change), every gradient agrees bitwise, one step and three, units
    a whole number of vectors or not, on 1 to 3 threads."""
    g = torch.Generator().manual_seed(7)
    lstm = mode == "lstm"
    with threads_kept():
        with native.use_level(level):
            for steps, units in ((1, 256), (3, 32), (1, 20)):
                op = CLASSES[mode](1, units, 24)
                params = (torch.randn(op.params_size(), generator=g) / units).requires_grad_()
                x = torch.randn(steps, 5, 24, generator=g).requires_grad_()
                h0 = torch.randn(1, 5, units, generator=g).requires_grad_()
                c0 = torch.randn(1, 5, units, generator=g).requires_grad_()
                leaves = [x, h0, c0, params] if lstm else [x, h0, params]
                weights = [torch.randn(1, 5, units, generator=g) for _ in range(3)]
                got = []
                for way in ("packed", "in_place_rows"):
                    for t in (1, 2, 3):
                        torch.set_num_threads(t)
                        out = op(x, h0, c0, params) if lstm else op(x, h0, params)
                        loss = sum((o[-1:] * w).sum() for o, w in zip(out, weights))
                        with native.use_products(r=way):
                            got.append(torch.autograd.grad(loss, leaves))
                for grads in got[1:]:
                    for a, b in zip(got[0], grads):
                        assert torch.equal(a, b), (mode, steps, units)


@needs_engine
@pytest.mark.parametrize("level", isa_params())
def test_the_forward_in_place_by_rows_gives_the_packed_bits(level: str) -> None:
    """From 32 rows the forward reads a matrix in place through the packed product's
    micro-kernels over its rows (engine.c's in_place_form). Forced that way for R and W, a
    training call gives the packed products' bits: outputs, states and every gradient, one step
    and several, batches of one vector, of a tail and of more than the 128 rows it takes at a
    time, units a whole number of vectors or not, the GRU whose reset gate comes before R (a
    second product on R a step), lengths, both directions, on 1 to 3 threads."""
    from cudnn_rnn.core.variant import Variant
    from cudnn_rnn.layers import LAYER_CLASSES

    cases = [  # mode, variant, (steps, batch, input, units)
        ("lstm", None, (1, 40, 24, 96)),
        ("gru", None, (3, 45, 24, 20)),
        ("rnn_tanh", None, (1, 130, 17, 33)),
        ("rnn_relu", None, (2, 13, 35, 21)),
        ("gru", Variant(reset_after=False), (1, 33, 24, 40)),
    ]
    g = torch.Generator().manual_seed(4)
    with threads_kept(), native.use_level(level):
        for mode, variant, (steps, batch, inputs, units) in cases:
            kw = {"variant": variant} if variant else {}
            layer = LAYER_CLASSES[mode](
                1, units, input_size=inputs, direction="bidirectional", **kw
            )
            with torch.no_grad():
                layer.opaque_kernel.copy_(torch.randn(layer.opaque_kernel.shape, generator=g))
                layer.opaque_kernel.mul_(units**-0.5)
            x = torch.randn(steps, batch, inputs, generator=g).requires_grad_()
            states = [torch.randn(2, batch, units, generator=g).requires_grad_()]
            if mode == "lstm":
                states.append(torch.randn(2, batch, units, generator=g).requires_grad_())
            lengths = torch.randint(1, steps + 1, (batch,), generator=g)
            got = []
            for way in ("packed", "in_place_rows"):
                for t in (1, 2, 3):
                    torch.set_num_threads(t)
                    with native.use_products(way, way):
                        y, out = layer(x, tuple(states), sequence_lengths=lengths)
                        loss = (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum()
                        loss = loss + sum((o * o).sum() for o in out)
                        leaves = [layer.opaque_kernel, x, *states]
                        grads = torch.autograd.grad(loss, leaves)
                    got.append([y.detach(), *(o.detach() for o in out), *grads])
            for other in got[1:]:
                for k, (a, b) in enumerate(zip(got[0], other, strict=True)):
                    assert torch.equal(a, b), (mode, variant, steps, batch, k)


@needs_engine
@pytest.mark.skipif(not {"avx2", "avx512"} <= set(LEVELS), reason="needs AVX-512")
def test_the_backward_products_give_avx2s_bits_at_avx512() -> None:
    """Both contract to FMA and sum each element in one chain, so the two ISAs agree bitwise
    (the x86-64 baseline has no FMA and may differ in the last place)."""
    g = torch.Generator().manual_seed(5)
    for m, n, k in SHAPES:
        for at in (False, True):
            a = torch.randn((k, m) if at else (m, k), generator=g)
            b = torch.randn(k, n, generator=g)
            got = []
            for level in ("avx2", "avx512"):
                c = torch.empty(m, n)
                with native.use_level(level):
                    native_boundary._gemm(at, a, b, c)
                got.append(c)
            assert torch.equal(*got), (m, n, k, at)


@needs_engine
def test_the_products_refuse_bad_arguments() -> None:
    args = native_library._GemmArgs(at=0, m=2, n=2, k=2, lda=2, ldb=2, ldc=1)  # ldc below n
    with pytest.raises(RuntimeError, match=r"cr_gemm refused its sizes or a missing pointer"):
        native_library._call("cr_gemm", args)
    a = torch.zeros(3, 4)
    with pytest.raises(RuntimeError, match=r"the product's output c .* is not a CPU float32"):
        native_boundary._gemm(False, a, torch.zeros(4, 5), torch.zeros(5, 3).t())
    with pytest.raises(RuntimeError, match=r"b has shape \(4, 5\), expected"):
        native_boundary._gemm(False, a, torch.zeros(4, 5), torch.zeros(3, 6))
