"""Layer classes: oracle agreement, build, initialisation, torch integration, errors."""

from __future__ import annotations

import io
import itertools
import math

import numpy as np
import pytest
import torch

import cudnn_rnn
from cudnn_rnn.core.reference import rnn_forward as oracle
from cudnn_rnn.layers import CudnnGRU, CudnnLSTM, CudnnRNNRelu, CudnnRNNTanh, layer_of

LAYERS = {"lstm": CudnnLSTM, "gru": CudnnGRU, "rnn_tanh": CudnnRNNTanh, "rnn_relu": CudnnRNNRelu}


def canonical_numpy(layer: torch.nn.Module) -> tuple[list[np.ndarray], list[np.ndarray]]:
    w, b = layer._op.params_to_canonical(layer.opaque_kernel.detach())  # type: ignore[union-attr,operator]
    return [t.double().numpy() for t in w], [t.double().numpy() for t in b]


@pytest.mark.parametrize(
    "mode,layers,direction,varlen,time_major",
    list(
        itertools.product(
            LAYERS, (1, 2, 3), ("unidirectional", "bidirectional"), (False, True), (True, False)
        )
    ),
)
def test_layer_matches_oracle(
    mode: str, layers: int, direction: str, varlen: bool, time_major: bool
) -> None:
    rng = np.random.default_rng(layers)
    layer = LAYERS[mode](
        layers,
        3,
        direction=direction,
        seed=1,
        dtype=torch.float64,
        bias_initializer=lambda s: torch.as_tensor(rng.uniform(-1, 1, s)),
    )
    steps, batch = 5, 3
    x = rng.uniform(-1, 1, (steps, batch, 2) if time_major else (batch, steps, 2))
    lengths = np.array([5, 2, 4]) if varlen else None
    out, state = layer(torch.as_tensor(x), sequence_lengths=lengths, time_major=time_major)
    w, b = canonical_numpy(layer)
    n = layers * layer.num_dirs
    want = oracle(
        mode,
        x,
        np.zeros((n, batch, 3)),
        np.zeros((n, batch, 3)) if mode == "lstm" else None,
        w,
        b,
        num_layers=layers,
        bidirectional=direction == "bidirectional",
        sequence_lengths=lengths,
        time_major=time_major,
    )
    np.testing.assert_allclose(out.detach().numpy(), want[0], atol=1e-10)
    for got, expected in zip(state, want[1:]):
        assert expected is not None
        np.testing.assert_allclose(got.detach().numpy(), expected, atol=1e-10)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"mode": "lstm", "num_layers": 2, "num_units": 5, "input_size": 3, "num_proj": 2},
        {
            "mode": "gru",
            "num_layers": 1,
            "num_units": 4,
            "input_size": 4,
            "input_mode": "skip_input",
            "direction": "bidirectional",
        },
        {"mode": "rnn_relu", "num_layers": 3, "num_units": 2, "input_size": 6, "dropout": 0.5},
    ],
)
def test_layer_of_spec_has_that_spec(kwargs: dict[str, object]) -> None:
    spec = cudnn_rnn.RNNSpec(**kwargs)  # type: ignore[arg-type]
    layer = layer_of(spec, dtype=torch.float64)
    assert type(layer) is LAYERS[spec.mode] and layer.built
    assert layer.spec == spec and layer.opaque_kernel.dtype == torch.float64


def test_build_lazily_and_eagerly() -> None:
    layer = CudnnGRU(2, 4)
    kernel = layer.opaque_kernel  # registered already, sized by the build (test_lazy_build.py)
    assert not layer.built and list(layer.parameters()) == [kernel]
    assert isinstance(kernel, torch.nn.parameter.UninitializedParameter)
    with pytest.raises(
        ValueError,
        match=r"^'input_size' is unknown since layer has not been "
        r"built\.$",
    ):
        _ = layer.input_size
    with pytest.raises(
        RuntimeError,
        match=r"CudnnGRU\.canonical_weight_shapes invoked before "
        r"input shape is known",
    ):
        _ = layer.canonical_weight_shapes
    assert layer.canonical_bias_shapes == [[4]] * 12  # known before build, lists as the original
    layer(torch.zeros(3, 2, 5))
    assert layer.built and layer.input_size == 5 and layer.opaque_kernel is kernel
    assert [name for name, _ in layer.named_parameters()] == ["opaque_kernel"]
    assert layer.canonical_weight_shapes[:4] == [(4, 5), (4, 5), (4, 5), (4, 4)]
    eager = CudnnLSTM(1, 3, input_size=2, num_proj=2, direction="bidirectional")
    assert eager.built and eager.count_params() == eager.opaque_kernel.numel() == 2 * (
        4 * 3 * 2 + 4 * 3 * 2 + 2 * 3 + 8 * 3
    )
    assert eager.state_shape(7) == ([2, 7, 2], [2, 7, 3])
    assert CudnnRNNRelu(3, 5).state_shape(2) == ([3, 2, 5],)


def test_default_initialisation() -> None:
    a = CudnnLSTM(2, 8, seed=3, input_size=5, direction="bidirectional")
    b = CudnnLSTM(2, 8, seed=3, input_size=5, direction="bidirectional")
    c = CudnnLSTM(2, 8, seed=4, input_size=5, direction="bidirectional")
    assert torch.equal(a.opaque_kernel, b.opaque_kernel)
    assert not torch.equal(a.opaque_kernel, c.opaque_kernel)
    w, bias = canonical_numpy(a)
    assert all((x == 0).all() for x in bias)
    for m in w:  # Glorot-uniform per canonical matrix, drawn separately
        limit = math.sqrt(6 / (m.shape[0] + m.shape[1]))
        assert np.abs(m).max() <= limit and np.abs(m).max() > 0.8 * limit
    assert not np.array_equal(w[0], w[1])  # equal shapes, different draws (TF1 would repeat)
    state = torch.get_rng_state()
    CudnnGRU(1, 4, seed=1, input_size=2)
    assert torch.equal(state, torch.get_rng_state())  # a seed never touches the global RNG


def test_initializers_apply_per_canonical_tensor() -> None:
    shapes: list[tuple[int, ...]] = []

    def kernel(shape: tuple[int, ...]) -> torch.Tensor:
        shapes.append(shape)
        return torch.full(shape, 0.25)

    layer = CudnnGRU(
        2,
        3,
        input_mode="skip_input",
        input_size=3,
        kernel_initializer=kernel,
        bias_initializer=lambda s: np.full(s, 1.5),
    )
    w, b = canonical_numpy(layer)
    assert shapes == [(3, 3)] * 9  # layer 0's input matrices are the skip identity, not drawn
    np.testing.assert_array_equal(w[0], np.eye(3))
    assert all((x == 0.25).all() for x in w[3:])
    assert all((x == 1.5).all() for x in b)
    with pytest.raises(
        ValueError,
        match=r"CudnnGRU: kernel_initializer returned shape \(2,\) "
        r"for shape \(3, 3\)\.",
    ):
        CudnnGRU(1, 3, input_size=3, kernel_initializer=lambda s: torch.zeros(2))
    with pytest.raises(TypeError, match=r"CudnnGRU: kernel_initializer must be a callable"):
        CudnnGRU(1, 3, kernel_initializer=0.5)  # type: ignore[arg-type]


def test_errors() -> None:
    layer = CudnnLSTM(1, 2)
    with pytest.raises(
        TypeError,
        match=r"CudnnLSTM: invalid initial_state type: list, "
        r"expecting tuple\.",
    ):
        layer(torch.zeros(2, 1, 3), [torch.zeros(1, 1, 2), torch.zeros(1, 1, 2)])  # type: ignore[arg-type]
    with pytest.raises(
        ValueError,
        match=r"CudnnLSTM: initial_state must be a tuple of 2 "
        r"tensor\(s\) \(\(h, c\)\), got 1\.",
    ):
        layer(torch.zeros(2, 1, 3), (torch.zeros(1, 1, 2),))
    with pytest.raises(ValueError, match=r"CudnnLSTM: expecting input_shape with 3 dims, got 2"):
        CudnnLSTM(1, 2).build((2, 3))
    with pytest.raises(ValueError, match=r"the last dimension of the inputs should be defined"):
        CudnnLSTM(1, 2).build((2, 3, None))
    with pytest.raises(
        ValueError,
        match=r"CudnnLSTM: expecting inputs with 3 dims, got shape "
        r"\(2, 3\)\.",
    ):
        CudnnLSTM(1, 2)(torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"CudnnLSTM: invalid direction 'both'"):
        CudnnLSTM(1, 2, direction="both")
    with pytest.raises(ValueError, match=r"CudnnGRU: invalid input_mode 'skip'"):
        CudnnGRU(1, 2, input_mode="skip")
    with pytest.raises(
        ValueError,
        match=r"CudnnRNNTanh: only float16, bfloat16, float32 and "
        r"float64 are supported, provided torch\.int64\.",
    ):
        CudnnRNNTanh(1, 2, dtype=torch.int64)
    with pytest.raises(
        ValueError,
        match=r"CudnnGRU: input_mode 'skip_input' .* input_size=3 and "
        r"num_units=2",
    ):
        CudnnGRU(1, 2, input_mode="skip_input")(torch.zeros(2, 1, 3))
    built = CudnnLSTM(1, 2, input_size=3)
    with pytest.raises(
        ValueError,
        match=r"CudnnLSTM: input_data must be a 3-D tensor .* "
        r"input_size=3 .* got shape \(2, 1, 4\)",
    ):
        built(torch.zeros(2, 1, 4))
    with pytest.raises(TypeError, match=r"CudnnLSTM: input_data must have dtype torch\.float32"):
        built(torch.zeros(2, 1, 3, dtype=torch.float64))
    with pytest.raises(
        ValueError,
        match=r"CudnnLSTM: set_weights expects an array of shape "
        r"\(56,\), got \(3,\)\.",
    ):
        built.set_weights([np.zeros(3)])
    with pytest.raises(RuntimeError, match=r"CudnnGRU\.get_weights invoked before input shape"):
        CudnnGRU(1, 2).get_weights()


def test_training_flag_follows_module_mode() -> None:
    layer = CudnnGRU(3, 4, dropout=0.5, seed=0, input_size=2)
    x = torch.randn(6, 2, 2)
    layer.eval()
    a, b = layer(x)[0], layer(x)[0]
    assert torch.equal(a, b)  # no dropout in eval mode
    assert torch.equal(a, layer(x, training=False)[0])
    layer.train()
    assert not torch.equal(a, layer(x)[0])  # training=None -> self.training -> dropout
    assert torch.equal(a, layer(x, training=False)[0])


def test_optimizer_to_dtype_state_dict_and_weights() -> None:
    layer = CudnnLSTM(2, 4, seed=0, input_size=3)
    opt = torch.optim.Adam(layer.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(0)  # not the global RNG: other tests' draws move it
    x, target = torch.randn(8, 4, 3, generator=gen), torch.randn(8, 4, 4, generator=gen)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = ((layer(x)[0] - target) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]

    buffer = io.BytesIO()
    torch.save(layer.state_dict(), buffer)
    buffer.seek(0)
    fresh = CudnnLSTM(2, 4)  # unbuilt: built from the stored buffer's length
    fresh.load_state_dict(torch.load(buffer))
    assert fresh.input_size == 3 and torch.equal(fresh(x)[0], layer(x)[0])

    param = layer.opaque_kernel
    layer.double()
    assert layer.opaque_kernel is param and layer.dtype == torch.float64
    out64 = layer(x.double())[0]
    np.testing.assert_allclose(out64.detach().numpy(), fresh(x)[0].detach().numpy(), atol=1e-5)

    other = CudnnLSTM(2, 4, input_size=3)
    other.set_weights(fresh.get_weights())
    assert torch.equal(other.opaque_kernel, fresh.opaque_kernel)
    clone = CudnnLSTM.from_config(fresh.get_config())
    assert clone.get_config() == fresh.get_config()


def test_bfloat16_and_float16_layers() -> None:
    for dtype in (torch.float16, torch.bfloat16):
        layer = CudnnGRU(2, 4, dtype=dtype, seed=0)
        out, (h,) = layer(torch.randn(3, 2, 2).to(dtype))
        assert out.dtype == h.dtype == dtype
        assert layer.get_weights()[0].dtype == np.float32 if dtype == torch.bfloat16 else True


def test_torch_compile_eager_backend() -> None:
    layer = CudnnLSTM(2, 3, seed=0, input_size=2)
    compiled = torch.compile(layer, backend="eager")
    x = torch.randn(4, 2, 2)
    # Compiled training-mode calls keep our loop's workspace, eager ones oneDNN's (engines/).
    torch.testing.assert_close(compiled(x)[0], layer(x)[0], rtol=1e-5, atol=1e-6)
    with torch.no_grad():  # the same kernel: the same bits
        assert torch.equal(compiled(x)[0], layer(x)[0])


def test_public_names() -> None:
    assert cudnn_rnn.CudnnLSTM is CudnnLSTM and cudnn_rnn.CudnnRNNRelu is CudnnRNNRelu
    assert CudnnLSTM(1, 2).name == "cudnn_lstm" and CudnnRNNTanh(1, 2).name == "cudnn_rnn_tanh"


def test_every_public_name_resolves() -> None:
    for name in cudnn_rnn.__all__:
        assert getattr(cudnn_rnn, name) is not None, name
    with pytest.raises(AttributeError, match="module 'cudnn_rnn' has no attribute 'Nope'"):
        _ = cudnn_rnn.Nope  # type: ignore[attr-defined]
