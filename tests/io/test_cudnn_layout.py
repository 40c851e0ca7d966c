"""Our opaque layout against buffers that cuDNN laid out (no GPU needed).

``tests/fixtures/cudnn/cudnn_buffers.safetensors`` was written by ``make_cudnn_buffers.py``
beside it, which runs only with CUDA: for each case, the flat weight buffer that
``torch.nn.*.cuda().flatten_parameters()`` had cuDNN size and fill, and the module's canonical
parameters. Converting those parameters with ``convert.from_torch`` must give exactly that buffer:
same length, every value at cuDNN's offset, padding (if any) zero.

That the buffers are cuDNN's rests on that script and the GPU run that made the file (an H200,
cuDNN 9.19, by its metadata, which the script wrote): no CPU test can tell cuDNN's layout from
ours, since the file shows they are the same (no case has padding). On a CPU we check that the
file is the script's output and holds nothing else; on a GPU (``make gpu-check``),
``test_cudnn_flattens_these_buffers_now`` asks cuDNN again.
"""

from __future__ import annotations

import importlib.util
import json
from types import ModuleType

import pytest
import torch
from safetensors import safe_open

from cudnn_rnn import convert
from tests.support.paths import FIXTURES

FIXTURE = FIXTURES / "cudnn" / "cudnn_buffers.safetensors"


def _script() -> ModuleType:
    """make_cudnn_buffers.py, the script that wrote the fixture (it needs CUDA only in main())."""
    path = FIXTURES / "cudnn" / "make_cudnn_buffers.py"
    spec = importlib.util.spec_from_file_location("make_cudnn_buffers", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cases() -> dict[str, dict]:
    with safe_open(str(FIXTURE), framework="pt") as f:
        meta = f.metadata()
    return {k: json.loads(v) for k, v in meta.items() if k not in ("torch", "cudnn", "device")}


CASES = _cases()


def _module(case: dict) -> torch.nn.RNNBase:
    kind, args = case["module"], (case["input_size"], case["hidden_size"], case["num_layers"])
    bi = case["bidirectional"]
    if kind == "LSTM":
        return torch.nn.LSTM(*args, bidirectional=bi, proj_size=case["proj_size"])
    if kind == "GRU":
        return torch.nn.GRU(*args, bidirectional=bi)
    return torch.nn.RNN(*args, bidirectional=bi, nonlinearity="relu" if "RELU" in kind else "tanh")


def _drawn(script: ModuleType) -> dict[str, dict[str, torch.Tensor]]:
    """Each case's parameters as the script draws them (on the CPU, before ``.cuda()``)."""
    drawn = {}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(20261123)  # the script's seed
        for name, args in script.CASES.items():
            module = script.build(*args)
            with torch.no_grad():
                for p in module.parameters():
                    p.uniform_(-1.0, 1.0)
            drawn[name] = {n: p.detach() for n, p in module.named_parameters()}
    return drawn


def test_fixture_is_the_scripts_output_and_nothing_else() -> None:
    """The file holds what make_cudnn_buffers.py writes and no value of another origin.

    Its parameters are the values the script's seed draws (torch's CPU generator, drawn again
    here); each buffer has exactly the parameters' size and holds each parameter at the offset
    the metadata names, so no value in it was put there by hand or by another layout. This does
    not show that cuDNN laid the buffers out: the metadata (``cudnn``, ``device``) are strings the
    script recorded on the GPU run; see the module docstring.
    """
    script = _script()
    assert sorted(CASES) == sorted(script.CASES)
    drawn = _drawn(script)
    with safe_open(str(FIXTURE), framework="pt") as f:
        meta = f.metadata()
        for name, params in drawn.items():
            buffer = f.get_tensor(f"{name}/buffer")
            case = CASES[name]
            assert buffer.numel() == case["buffer_numel"] == case["canonical_numel"], name
            covered = torch.zeros(buffer.numel(), dtype=torch.int64)
            for pname, value in params.items():
                assert torch.equal(f.get_tensor(f"{name}/{pname}"), value), (name, pname)
                at = case["offsets"][pname]
                assert torch.equal(buffer[at : at + value.numel()], value.reshape(-1)), pname
                covered[at : at + value.numel()] += 1
            assert bool((covered == 1).all()), name  # every value placed once, no gap
    # What the script recorded of the run (not evidence of cuDNN, see above).
    assert meta["device"] == "NVIDIA H200" and meta["cudnn"] == "91900"


@pytest.mark.cuda
def test_cudnn_flattens_these_buffers_now() -> None:
    """On a GPU: cuDNN, asked again through torch's flatten_parameters() as the script asks it,
    lays the same parameters out as the committed buffers, value for value."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    script = _script()
    drawn = _drawn(script)
    with safe_open(str(FIXTURE), framework="pt") as f:
        for name, args in script.CASES.items():
            module = script.build(*args)
            module.load_state_dict(drawn[name])
            module = module.cuda()
            module.flatten_parameters()
            params = dict(module.named_parameters())
            storage = next(iter(params.values())).untyped_storage()
            assert all(
                p.untyped_storage().data_ptr() == storage.data_ptr() for p in params.values()
            )
            buffer = torch.empty(0, dtype=torch.float32, device="cuda").set_(storage).cpu()
            assert torch.equal(buffer, f.get_tensor(f"{name}/buffer")), name


@pytest.mark.parametrize("name", sorted(CASES))
def test_from_torch_gives_cudnns_own_buffer(name: str) -> None:
    case = CASES[name]
    with safe_open(str(FIXTURE), framework="pt") as f:
        buffer = f.get_tensor(f"{name}/buffer")
        params = {k.split("/", 1)[1]: f.get_tensor(k) for k in f.keys() if k.startswith(name + "/")}
    del params["buffer"]
    module = _module(case)
    module.load_state_dict(params)
    layer = convert.from_torch(module)
    ours = layer.opaque_kernel.detach()
    assert ours.dtype == torch.float32 and ours.shape == buffer.shape, (ours.shape, buffer.shape)
    assert torch.equal(ours, buffer)
    # Each parameter where cuDNN put it (the same statement, read per tensor).
    for pname, offset in case["offsets"].items():
        flat = params[pname].reshape(-1)
        assert torch.equal(buffer[offset : offset + flat.numel()], flat), pname
