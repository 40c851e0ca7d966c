"""What a user finds without reading the source (issue 40 item 3): dir(cudnn_rnn) is the public
surface and nothing else, and every public class documents its constructor's arguments where
help() shows them."""

from __future__ import annotations

import inspect
import os
import pydoc
import re
import subprocess
import sys
import textwrap
import typing
from pathlib import Path

import pytest
import torch

import cudnn_rnn
import cudnn_rnn.nn
import cudnn_rnn.ops


def test_dir_lists_the_public_surface_only() -> None:
    names = dir(cudnn_rnn)
    assert names == sorted(cudnn_rnn.__all__)
    for private in ("Any", "TYPE_CHECKING", "importlib", "annotations"):
        assert private not in names
    for lazy in ("CudnnLSTM", "load", "find_rnns", "nn", "ops", "convert", "checkpoint"):
        assert lazy in names
    assert all(getattr(cudnn_rnn, name) is not None for name in names)


def _public_classes() -> list[type]:
    found = []
    for module, names in (
        (cudnn_rnn, cudnn_rnn.__all__),
        (cudnn_rnn.nn, cudnn_rnn.nn.__all__),
        (cudnn_rnn.ops, cudnn_rnn.ops.__all__),
    ):
        for name in names:
            obj = getattr(module, name)
            if inspect.isclass(obj) and not issubclass(obj, BaseException):
                found.append(obj)
    return found


@pytest.mark.parametrize("cls", _public_classes(), ids=lambda c: c.__qualname__)
def test_help_shows_every_constructor_argument(cls: type) -> None:
    init = inspect.getdoc(cls.__init__) or ""
    assert "Initialize internal Module state" not in init, cls
    text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    params = [
        p.name
        for p in inspect.signature(cls).parameters.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if hasattr(cls, "_torch_class"):  # cudnn_rnn.nn: torch.nn's constructor, documented
        params = _torch_parameters(cls._torch_class)
        assert {"input_size", "hidden_size", "device", "dtype"} <= set(params), params
    doc = (inspect.getdoc(cls) or "") + "\n" + init
    # ``name`` in prose, or an entry ``name: ...`` at the start of a line (an "Args:" section).
    missing = [
        p for p in params if f"``{p}``" not in doc and not re.search(rf"^\s*{p}:", doc, re.M)
    ]
    assert not missing, (cls, missing)
    assert text


def _torch_parameters(torch_class: type) -> list[str]:
    """The constructor's parameters of a torch.nn class. torch.nn.LSTM/GRU/RNN take ``*args,
    **kwargs`` and give their parameters in ``typing.overload`` signatures (listed from Python
    3.11) and in ``RNNBase``'s (all but its ``mode``)."""
    inits = [torch_class.__init__]
    if hasattr(typing, "get_overloads"):
        inits += typing.get_overloads(torch_class.__init__)
    if issubclass(torch_class, torch.nn.RNNBase):
        inits.append(torch.nn.RNNBase.__init__)
    found: list[str] = []
    for init in inits:
        for p in inspect.signature(init).parameters.values():
            if p.name not in ("self", "mode") and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                found += [p.name] if p.name not in found else []
    return found


def test_forward_is_typed_for_a_user_s_mypy() -> None:
    hints = inspect.signature(cudnn_rnn.CudnnLSTM.forward).return_annotation
    assert "Any" not in str(hints), hints
    assert "Tensor" in str(hints)
    assert "Any" not in str(inspect.signature(cudnn_rnn.convert.to_torch).return_annotation)


#: A user's script: what mypy infers for each ``reveal_type``, in order.
_USER_SCRIPT = """
    import torch
    from torch.nn.utils.rnn import pack_sequence

    import cudnn_rnn
    from cudnn_rnn import convert, ops

    layer = cudnn_rnn.CudnnLSTM(num_layers=2, num_units=4)
    y, (h, c) = layer(torch.ones(5, 3, 2))
    reveal_type(y)
    reveal_type(h)
    reveal_type(y.sum())
    reveal_type(h.shape)
    packed, states = layer(pack_sequence([torch.ones(3, 2)]))
    reveal_type(packed)
    reveal_type(states)
    out, (h_gru,) = cudnn_rnn.CudnnGRU(1, 3).forward(torch.ones(4, 2, 5))
    reveal_type(out)
    reveal_type(h_gru)
    op_out, op_h = ops.CudnnGRU(1, 2, 3)(torch.ones(1, 1, 3), torch.zeros(1, 1, 2), torch.zeros(30))
    reveal_type(op_out)
    reveal_type(convert.to_torch(layer))
    reveal_type(convert.from_torch(torch.nn.GRU(3, 4)))
    cell = cudnn_rnn.CudnnCompatibleGRUCell(2)
    reveal_type(cell(torch.ones(5, 3), cell.zero_state(5)))
"""
_REVEALED = [
    "torch._tensor.Tensor",
    "torch._tensor.Tensor",
    "torch._tensor.Tensor",
    "torch._C.Size",
    "PackedSequence",
    "tuple[torch._tensor.Tensor, ...]",
    "torch._tensor.Tensor",
    "torch._tensor.Tensor",
    "torch._tensor.Tensor",
    "torch.nn.modules.rnn.LSTM",
    "cudnn_rnn.layer_base._CudnnRNN",
    "tuple[torch._tensor.Tensor, torch._tensor.Tensor]",
]


def test_mypy_sees_tensors_in_a_user_s_script(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """mypy on a script that uses the layers as a user does infers tensors, never ``Any``
    (torch types ``Module.__call__`` as returning ``Any``; a call is ``forward``)."""
    pytest.importorskip("mypy")
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent(_USER_SCRIPT))
    # Checking torch's stubs takes a while: a cache that outlives the run (unless pytest has
    # no cache, -p no:cacheprovider).
    provider = getattr(request.config, "cache", None)
    cache = provider.mkdir("mypy-user-script") if provider else tmp_path / "mypy-cache"
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file=", "--cache-dir", str(cache), script.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "MYPY_FORCE_COLOR": "0"},
        timeout=600,
    )
    revealed = [
        line.split("Revealed type is ", 1)[1].strip('"')
        for line in run.stdout.splitlines()
        if "Revealed type is" in line
    ]
    assert run.returncode == 0, run.stdout + run.stderr
    assert len(revealed) == len(_REVEALED), run.stdout
    for got, expected in zip(revealed, _REVEALED):
        assert "Any" not in got, run.stdout
        assert expected in got, (expected, got)
