"""Our opaque layout against buffers that cuDNN itself laid out (no GPU needed).

``tests/fixtures/cudnn/cudnn_buffers.safetensors`` was written on an H200 (cuDNN 9.19) by
``make_cudnn_buffers.py`` beside it: for each case, the flat weight buffer that
``torch.nn.*.cuda().flatten_parameters()`` had cuDNN size and fill, and the module's canonical
parameters. Converting those parameters with ``convert.from_torch`` must give exactly that buffer:
same length, every value at cuDNN's offset, padding (if any) zero.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from cudnn_rnn import convert
from tests.support.paths import FIXTURES

FIXTURE = FIXTURES / "cudnn" / "cudnn_buffers.safetensors"


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


def test_fixture_was_made_by_cudnn() -> None:
    with safe_open(str(FIXTURE), framework="pt") as f:
        meta = f.metadata()
    assert int(meta["cudnn"]) >= 8000 and meta["device"].startswith("NVIDIA")
    assert len(CASES) >= 9


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
