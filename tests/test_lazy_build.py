"""A layer made without ``input_size``: its ``opaque_kernel`` exists from construction as an
``UninitializedParameter`` (as ``nn.LazyLinear``'s) and the build materialises that same object,
so whatever took hold of it before the first call (an optimizer, ``.to()``, a copy) still holds it.
"""

from __future__ import annotations

import copy
import io
import pickle
from collections.abc import Callable

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parameter import UninitializedParameter, is_lazy

from cudnn_rnn.layers import CudnnGRU, CudnnLSTM, CudnnRNNRelu, CudnnRNNTanh, _CudnnRNN

F64 = torch.float64
CLASSES = (CudnnLSTM, CudnnGRU, CudnnRNNTanh, CudnnRNNRelu)


class Model(nn.Module):
    """A lazy layer under a head: the layer's state_dict keys get the prefix ``rnn.``."""

    rnn: _CudnnRNN

    def __init__(self, layer: _CudnnRNN) -> None:
        super().__init__()
        self.rnn = layer
        self.head = nn.Linear(3, 1, dtype=F64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(x)[0]).sum()  # type: ignore[no-any-return]


def _inputs() -> torch.Tensor:
    return torch.randn(4, 2, 5, dtype=F64, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("cls", CLASSES)
def test_unbuilt_layer_holds_an_uninitialized_parameter(cls: type[_CudnnRNN]) -> None:
    layer = cls(2, 3)
    kernel = layer.opaque_kernel
    assert isinstance(kernel, UninitializedParameter) and not layer.built
    assert list(layer.parameters()) == [kernel] and kernel.requires_grad
    assert [name for name, _ in layer.named_parameters()] == ["opaque_kernel"]
    assert list(layer.state_dict()) == ["opaque_kernel"]  # the parameter itself, as torch's
    assert is_lazy(layer.state_dict()["opaque_kernel"])
    assert "input_size=?" in repr(layer)
    with pytest.raises(
        RuntimeError, match=rf"^{cls.__name__}\.saveable invoked before input shape is known"
    ):
        _ = layer.saveable
    layer(torch.zeros(2, 1, 4))
    assert layer.opaque_kernel is kernel and not is_lazy(kernel)
    assert layer.built and "input_size=4" in repr(layer)
    assert layer.saveable.opaque_params is kernel


def _sgd(p: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    return p - 0.1 * g


def _adam(p: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    # Adam's first step: both moments' bias corrections cancel, leaving lr * g / (|g| + eps).
    return p - 0.1 * g / (g.abs() + 1e-8)


OPTIMIZERS: dict[str, tuple[Callable[..., torch.optim.Optimizer], Callable[..., torch.Tensor]]] = {
    "sgd": (lambda params: torch.optim.SGD(params, lr=0.1), _sgd),
    "adam": (lambda params: torch.optim.Adam(params, lr=0.1), _adam),
}


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_an_optimizer_made_before_the_first_call_trains_the_kernel(name: str) -> None:
    make, reference = OPTIMIZERS[name]
    model = Model(CudnnGRU(1, 3, seed=0, dtype=F64))
    optimizer = make(model.parameters())  # before the layer knows its input size
    loss = model(_inputs())  # builds the layer
    kernel = model.rnn.opaque_kernel
    assert any(p is kernel for p in optimizer.param_groups[0]["params"])
    before = kernel.detach().clone()
    optimizer.zero_grad()
    loss.backward()
    assert kernel.grad is not None and kernel.grad.abs().sum() > 0
    want = reference(before, kernel.grad)
    optimizer.step()
    assert not torch.equal(kernel.detach(), before)
    torch.testing.assert_close(kernel.detach(), want, rtol=1e-12, atol=1e-12)


def test_load_state_dict_into_an_unbuilt_layer_builds_it_with_those_values() -> None:
    source = Model(CudnnLSTM(2, 3, seed=1, dtype=F64, input_size=5))
    with torch.no_grad():
        source.rnn.opaque_kernel.uniform_(-1, 1, generator=torch.Generator().manual_seed(2))
    target = Model(CudnnLSTM(2, 3, dtype=F64))
    kernel = target.rnn.opaque_kernel
    optimizer = torch.optim.SGD(target.parameters(), lr=0.1)  # before the load builds it
    target.load_state_dict(source.state_dict())
    assert target.rnn.built and target.rnn.input_size == 5
    assert target.rnn.opaque_kernel is kernel
    assert torch.equal(kernel, source.rnn.opaque_kernel)  # exactly those values
    optimizer.zero_grad()
    target(_inputs()).backward()
    assert kernel.grad is not None
    want = _sgd(source.rnn.opaque_kernel.detach(), kernel.grad)
    optimizer.step()
    torch.testing.assert_close(kernel.detach(), want, rtol=1e-12, atol=1e-12)


def test_an_unbuilt_layers_state_dict_loads_into_an_unbuilt_layer_only() -> None:
    unbuilt = CudnnGRU(1, 3).state_dict()
    target = CudnnGRU(1, 3)
    target.load_state_dict(unbuilt)
    assert not target.built and is_lazy(target.opaque_kernel)
    built = CudnnGRU(1, 3, input_size=2)
    with pytest.raises(
        RuntimeError,
        match=r"^CudnnGRU: the state_dict's opaque_kernel is uninitialised \(saved from a layer "
        r"that was not built\) and this layer is built; load it into an unbuilt layer, or save "
        r"the source layer after its first call\.$",
    ):
        built.load_state_dict(unbuilt)


def test_to_before_the_build_gives_the_kernel_its_dtype_and_device() -> None:
    moved = CudnnLSTM(1, 3, seed=0)
    kernel = moved.opaque_kernel
    moved.double()
    assert moved.dtype == F64 and is_lazy(kernel) and moved.opaque_kernel is kernel
    moved(torch.zeros(2, 1, 4, dtype=F64))
    made = CudnnLSTM(1, 3, seed=0, dtype=F64, input_size=4)
    assert kernel.dtype == F64 and torch.equal(kernel, made.opaque_kernel)  # drawn alike
    meta = CudnnGRU(1, 3).to("meta")
    meta.build((None, None, 2))
    assert meta.opaque_kernel.device.type == "meta" and meta.opaque_kernel.shape == (63,)
    on_meta = CudnnGRU(1, 3, device="meta", input_size=2)
    assert on_meta.opaque_kernel.device.type == "meta"


def test_the_build_materialises_a_kernel_torch_swapped_to_a_plain_parameter() -> None:
    # With this torch option, .to() swaps in a converted tensor: an empty Parameter, no longer
    # uninitialised. The build still fills that same object.
    layer = CudnnRNNTanh(1, 3, seed=0)
    kernel = layer.opaque_kernel
    swap = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        layer.double()
    finally:
        torch.__future__.set_swap_module_params_on_conversion(swap)
    layer(torch.zeros(2, 1, 4, dtype=F64))
    assert layer.opaque_kernel is kernel and kernel.dtype == F64
    assert torch.equal(kernel, CudnnRNNTanh(1, 3, seed=0, dtype=F64, input_size=4).opaque_kernel)


@pytest.mark.parametrize("how", ["deepcopy", "pickle", "torch.save"])
def test_a_copy_of_an_unbuilt_layer_stays_unbuilt_in_its_dtype(how: str) -> None:
    layer = CudnnGRU(1, 3, seed=0).half()
    if how == "deepcopy":
        twin = copy.deepcopy(layer)
    elif how == "pickle":
        twin = pickle.loads(pickle.dumps(layer))
    else:
        buffer = io.BytesIO()
        torch.save(layer, buffer)
        buffer.seek(0)
        twin = torch.load(buffer, weights_only=False)
    assert is_lazy(twin.opaque_kernel) and twin.opaque_kernel is not layer.opaque_kernel
    assert twin.dtype == torch.float16  # torch alone would bring it back as float32
    twin(torch.zeros(2, 1, 4, dtype=torch.float16))
    assert not layer.built and twin.opaque_kernel.dtype == torch.float16
    made = CudnnGRU(1, 3, seed=0, dtype=torch.float16, input_size=4)
    assert torch.equal(twin.opaque_kernel, made.opaque_kernel)


def test_a_build_that_fails_leaves_the_layer_unbuilt() -> None:
    layer = CudnnGRU(1, 2, input_mode="skip_input")
    kernel = layer.opaque_kernel
    with pytest.raises(ValueError, match=r"input_mode 'skip_input'"):
        layer(torch.zeros(2, 1, 3))
    assert not layer.built and is_lazy(kernel)
    layer(torch.zeros(2, 1, 2))
    assert layer.built and layer.opaque_kernel is kernel
    bad = CudnnLSTM(1, 2, kernel_initializer=lambda s: torch.zeros(1))
    with pytest.raises(ValueError, match=r"kernel_initializer returned shape"):
        bad.build((None, None, 3))
    assert not bad.built and is_lazy(bad.opaque_kernel)


def test_a_lazily_built_layer_refuses_another_input_size() -> None:
    layer = CudnnLSTM(1, 2)
    layer(torch.zeros(2, 1, 3))
    with pytest.raises(
        ValueError,
        match=r"CudnnLSTM: input_data must be a 3-D tensor .* input_size=3 .* got shape "
        r"\(2, 1, 4\)",
    ):
        layer(torch.zeros(2, 1, 4))


def test_compile_after_the_first_eager_call() -> None:
    torch._dynamo.reset()
    model = Model(CudnnLSTM(2, 3, seed=0, dtype=F64))
    x = _inputs()
    eager = model(x)  # builds
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(x), eager, rtol=1e-12, atol=1e-12)


# Dynamo itself looks at .grad of non-leaf tensors while it tries a graph break (fullgraph=False).
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf:UserWarning")
@pytest.mark.parametrize("fullgraph", [True, False])
def test_compile_of_an_unbuilt_layer_says_so_first(fullgraph: bool) -> None:
    """The advice is the error's message, not a line of dynamo's "Developer debug context"
    (issue 49); a RuntimeError, alone or inside a model."""
    advice = (
        "CudnnGRU: the layer is not built yet, and torch.compile cannot create its parameter "
        "while tracing; call it once before compiling, call build(input_shape) or pass "
        "input_size= to the constructor."
    )
    for module in (CudnnGRU(1, 3), nn.Sequential(nn.Linear(4, 4), CudnnGRU(1, 3))):
        torch._dynamo.reset()
        compiled = torch.compile(module, backend="eager", fullgraph=fullgraph)
        with pytest.raises(RuntimeError) as info:
            compiled(torch.zeros(2, 1, 4))
        assert str(info.value).startswith(advice), str(info.value)
        assert "Developer debug context" not in str(info.value)


def test_distributed_data_parallel_refuses_an_unbuilt_layer() -> None:
    # Before, the kernel did not exist when DDP was made, so it was silently never synchronised.
    store = dist.HashStore()  # type: ignore[attr-defined]
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        layer = CudnnLSTM(1, 3, dtype=F64)
        with pytest.raises(RuntimeError):  # torch's refusal (its words are its own)
            nn.parallel.DistributedDataParallel(layer)
        layer(torch.zeros(2, 1, 4, dtype=F64))  # built: the same call now succeeds
        wrapped = nn.parallel.DistributedDataParallel(layer)
        assert wrapped(torch.zeros(2, 1, 4, dtype=F64))[0].shape == (2, 1, 3)
        del wrapped  # the reducer released while its group is alive (see tests/nn/test_surgery.py)
    finally:
        dist.destroy_process_group()
