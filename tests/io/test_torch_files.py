"""torch RNNs in files, at any prefix, and torch.nn cells (issue 22, items 2 and 3).

Every file here is written by its real producer (``torch.save``, legacy ``torch.save``,
``torch.jit.save``, ``safetensors.torch.save_file``, ``np.savez``); each RNN is listed by
``find_rnns`` and loaded by ``from_torch``, and the layer is checked against the producer's own
module: float64 to 1e-10 (float32 to 1e-5). The TorchScript archive is read without running its
code (``torch.jit.load`` runs only in the test, as the oracle), and hostile archives are refused
with typed errors before anything they ask for happens.
"""

from __future__ import annotations

import io
import os
import pickle
import struct
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from numpy.lib import format as npy_format
from torch import nn

from cudnn_rnn import ops
from cudnn_rnn.converters.npz import from_numpy_canonical
from cudnn_rnn.converters.torch_nn import from_torch
from cudnn_rnn.core.layout import layout_of
from cudnn_rnn.io.torch import torchscript
from cudnn_rnn.io.torch.file import find_rnns
from cudnn_rnn.io.torch.state import TorchFileError

F64 = torch.float64


def _quiet(make: Callable[[], Any]) -> Any:
    with warnings.catch_warnings():
        # torch.jit is deprecated, and torch.nn says once that oneDNN has no projection: the
        # producers' words, not the code under test.
        warnings.simplefilter("ignore")
        return make()


def _inputs(
    width: int, states: list[tuple[int, ...]], dtype: torch.dtype = F64, steps: int = 6
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(7)
    x = torch.rand((steps, 3, width), generator=gen, dtype=dtype) * 2 - 1
    return x, [torch.rand(s, generator=gen, dtype=dtype) * 2 - 1 for s in states]


def assert_same_as_module(layer: Any, module: Any, atol: float = 1e-10) -> None:
    """``layer`` and a torch.nn.LSTM/GRU/RNN (or a scripted one) give the same outputs and
    final states from the same random inputs and initial states."""
    states = [tuple(s) for s in layer.state_shape(3)]
    x, hx = _inputs(layer.input_size, states, layer.dtype)
    ours, ours_states = layer(x, tuple(hx))
    # A loaded scripted nn.LSTM/GRU/RNN holds its overloaded forward as the compiled method
    # forward__0 (tensor input), which only its C++ object exposes.
    methods = module._c._method_names() if isinstance(module, torch.jit.ScriptModule) else []
    run = module._c._get_method("forward__0") if "forward__0" in methods else module
    theirs, their_states = _quiet(lambda: run(x, tuple(hx) if len(hx) == 2 else hx[0]))
    their_states = their_states if isinstance(their_states, tuple) else (their_states,)
    for a, b in zip((ours, *ours_states), (theirs, *their_states)):
        assert a.shape == b.shape and a.dtype == b.dtype
        torch.testing.assert_close(a, b, rtol=0, atol=atol)


def assert_same_as_cell(layer: Any, cell: Any, atol: float = 1e-10) -> None:
    """``layer`` over T steps equals ``cell`` stepped T times (outputs and final states)."""
    x, hx = _inputs(
        layer.input_size, [(3, layer.num_units)] * len(layer.state_shape(3)), layer.dtype
    )
    state: Any = tuple(hx) if layer.rnn_mode == "lstm" else hx[0]
    outputs = []
    for t in range(x.shape[0]):
        state = cell(x[t], state)
        outputs.append(state[0] if isinstance(state, tuple) else state)
    ours, ours_states = layer(x, tuple(h[None] for h in hx))
    torch.testing.assert_close(ours, torch.stack(outputs), rtol=0, atol=atol)
    final = state if isinstance(state, tuple) else (state,)
    for a, b in zip(ours_states, final):
        torch.testing.assert_close(a[0], b, rtol=0, atol=atol)


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(3, 4, num_layers=2, bidirectional=True, dtype=F64)


class Model(nn.Module):
    """An LSTM under ``encoder.rnn``, a GRU, a plain relu RNN and a head: a typical state_dict."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.encoder = Encoder()
        self.decoder = nn.GRU(8, 5, dtype=F64)
        self.post = nn.RNN(5, 2, nonlinearity="relu", dtype=F64)
        self.head = nn.Linear(2, 1, dtype=F64)


# -- state_dicts at a prefix ----------------------------------------------------------------


def test_an_lstm_under_a_prefix_is_found_and_loaded(tmp_path: Path) -> None:
    """The issue's finding: ``encoder.rnn.weight_ih_l0`` was not detected."""
    torch.manual_seed(1)
    model = nn.Module()
    model.encoder = Encoder()
    model.head = nn.Linear(8, 2, dtype=F64)
    path = tmp_path / "model.pt"
    torch.save(model.state_dict(), path)
    (found,) = find_rnns(path)
    assert (found.name, found.mode, found.format, found.computable) == (
        "encoder.rnn",
        "lstm",
        "torch",  # the format's one name, whichever kind of torch file (torch_zip here)
        True,
    )
    assert (found.num_layers, found.num_units, found.input_size, found.direction) == (
        2,
        4,
        3,
        "bidirectional",
    )
    assert found.where == "torch.nn.LSTM 'encoder.rnn' in the state_dict"
    want = model.encoder.rnn
    for source, prefix in (
        (path, None),
        (str(path), "encoder.rnn"),
        (model.state_dict(), "encoder.rnn"),
        (model, None),
        (model, "encoder.rnn"),
    ):
        layer = from_torch(source, prefix)  # type: ignore[arg-type]
        assert layer.dtype == F64 and layer.spec.bidirectional
        assert_same_as_module(layer, want)


def test_several_rnns_are_listed_and_each_loads(tmp_path: Path) -> None:
    model = Model()
    path = tmp_path / "model.pt"
    torch.save(model.state_dict(), path)
    found = find_rnns(path)
    assert [(f.name, f.mode, f.details["torch_class"]) for f in found] == [
        ("encoder.rnn", "lstm", "LSTM"),
        ("decoder", "gru", "GRU"),
        ("post", "rnn_tanh", "RNN"),
    ]
    assert found[2].details["activation_known"] is False
    assert "tanh or relu is not recorded" in found[2].where
    assert find_rnns(path, activation="relu")[2].mode == "rnn_relu"
    with pytest.raises(
        TorchFileError,
        match=r"model\.pt holds 3 RNNs \('encoder\.rnn', 'decoder', 'post'\); pick one with prefix",
    ):
        from_torch(path)
    with pytest.raises(TorchFileError, match=r"no RNN at prefix 'encoder'; it holds 'encoder.rnn'"):
        from_torch(path, "encoder")
    with pytest.raises(ValueError, match=r"'post' is a torch.nn.RNN, whose state_dict does not"):
        from_torch(path, "post")
    assert_same_as_module(from_torch(path, "encoder.rnn"), model.encoder.rnn)
    assert_same_as_module(from_torch(path, "decoder"), model.decoder)
    relu = from_torch(path, "post", activation="relu")
    assert relu.rnn_mode == "rnn_relu"
    assert_same_as_module(relu, model.post)
    # the same from the live module and its state_dict
    assert_same_as_module(from_torch(model, "post"), model.post)
    assert_same_as_module(from_torch(model.state_dict(), "post", activation="relu"), model.post)
    with pytest.raises(ValueError, match=r"Model holds 3 RNNs .*pick one with prefix=NAME"):
        from_torch(model)
    with pytest.raises(ValueError, match=r"records nonlinearity 'relu', but activation='tanh'"):
        from_torch(model, "post", activation="tanh")
    with pytest.raises(ValueError, match=r"activation must be 'tanh' or 'relu', got 'sigmoid'"):
        from_torch(path, "post", activation="sigmoid")


def test_a_checkpoint_dict_nests_the_state_dict(tmp_path: Path) -> None:
    model = Model()
    path = tmp_path / "checkpoint.pt"
    torch.save({"model": model.state_dict(), "epoch": 3, "names": ["a"]}, path)
    assert [f.name for f in find_rnns(path)] == ["model.encoder.rnn", "model.decoder", "model.post"]
    assert_same_as_module(from_torch(path, "model.decoder"), model.decoder)


def test_legacy_pickle_files_load(tmp_path: Path) -> None:
    model = Model()
    path = tmp_path / "legacy.pt"
    torch.save(model.state_dict(), path, _use_new_zipfile_serialization=False)
    assert [f.format for f in find_rnns(path)] == ["torch"] * 3
    assert_same_as_module(from_torch(path, "encoder.rnn"), model.encoder.rnn)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_projection(tmp_path: Path, bidirectional: bool) -> None:
    torch.manual_seed(2)
    owner = nn.Module()
    owner.lstm = nn.LSTM(3, 5, num_layers=2, proj_size=2, bidirectional=bidirectional)
    path = tmp_path / "proj.pt"
    torch.save(owner.state_dict(), path)
    (found,) = find_rnns(path)
    assert (found.name, found.num_units, found.num_proj, found.computable) == ("lstm", 5, 2, True)
    layer = from_torch(path)
    assert layer.num_proj == 2 and layer.dtype == torch.float32
    assert_same_as_module(layer, owner.lstm, atol=1e-5)


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU])
def test_bias_false_is_computable_with_zero_biases(tmp_path: Path, cls: type[nn.RNNBase]) -> None:
    torch.manual_seed(3)
    module = cls(3, 4, num_layers=2, bias=False, dtype=F64)
    path = tmp_path / "nobias.pt"
    torch.save({"rnn": module.state_dict()}, path)
    (found,) = find_rnns(path)
    assert found.computable and found.details["bias"] is False and found.name == "rnn"
    layer = from_torch(path)
    _, biases = layout_of(layer.spec).unpack(layer.opaque_kernel.detach())
    assert all(bool((b == 0).all()) for b in biases)
    assert_same_as_module(layer, module)


# -- cells ------------------------------------------------------------------------------------

CELLS = [
    pytest.param(lambda: nn.LSTMCell(3, 4, dtype=F64), "lstm", None, id="LSTMCell"),
    pytest.param(lambda: nn.GRUCell(3, 4, dtype=F64), "gru", None, id="GRUCell"),
    pytest.param(lambda: nn.RNNCell(3, 4, dtype=F64), "rnn_tanh", "tanh", id="RNNCell-tanh"),
    pytest.param(
        lambda: nn.RNNCell(3, 4, nonlinearity="relu", dtype=F64), "rnn_relu", "relu", id="relu"
    ),
    pytest.param(
        lambda: nn.LSTMCell(3, 4, bias=False, dtype=F64), "lstm", None, id="LSTMCell-no-bias"
    ),
    pytest.param(lambda: nn.GRUCell(4, 4, bias=False, dtype=F64), "gru", None, id="GRUCell-4-4"),
]


@pytest.mark.parametrize(("make", "mode", "activation"), CELLS)
def test_cells_are_one_layer_stepped(
    tmp_path: Path, make: Callable[[], nn.RNNCellBase], mode: str, activation: str | None
) -> None:
    torch.manual_seed(4)
    cell = make()
    # from the module: one unidirectional layer, stepped as the cell is
    layer = from_torch(cell)
    assert (layer.rnn_mode, layer.num_layers, layer.direction) == (mode, 1, "unidirectional")
    assert layer.training == cell.training
    assert_same_as_cell(layer, cell)
    # one step: T = 1 is the cell's step exactly
    x, hx = _inputs(cell.input_size, [(3, 4), (3, 4)], steps=1)
    step = cell(x[0], tuple(hx) if mode == "lstm" else hx[0])
    _, states = layer(x, tuple(h[None] for h in (hx if mode == "lstm" else hx[:1])))
    for ours, theirs in zip(states, step if isinstance(step, tuple) else (step,)):
        torch.testing.assert_close(ours[0], theirs, rtol=0, atol=1e-12)
    # from a file, under a prefix
    holder = nn.Module()
    holder.step = cell
    path = tmp_path / "cell.pt"
    torch.save(holder.state_dict(), path)
    (found,) = find_rnns(path, activation=activation)
    assert (found.name, found.mode, found.num_layers, found.computable) == ("step", mode, 1, True)
    assert found.details["torch_class"] == type(cell).__name__
    assert_same_as_cell(from_torch(path, activation=activation), cell)


def test_an_rnn_cell_state_dict_needs_the_activation(tmp_path: Path) -> None:
    path = tmp_path / "cell.pt"
    torch.save(nn.RNNCell(3, 2).state_dict(), path)
    (found,) = find_rnns(path)
    assert found.name == "." and found.details["activation_known"] is False
    assert found.where.startswith("torch.nn.RNNCell at the top level in the state_dict")
    with pytest.raises(TorchFileError, match=r"RNNCell at the top level is a torch.nn.RNNCell"):
        from_torch(path)


# -- safetensors and .npz of torch names ------------------------------------------------------


@pytest.mark.parametrize("metadata", [None, {"format": "pt"}])
def test_safetensors_of_an_lstm_state_dict(tmp_path: Path, metadata: Any) -> None:
    """The issue's finding: "detected 0 model(s)" while the same tensors in a .pt were found."""
    from safetensors.torch import save_file

    torch.manual_seed(5)
    module = nn.LSTM(3, 4, num_layers=2, dtype=F64)
    path = tmp_path / "lstm.safetensors"
    save_file(module.state_dict(), str(path), metadata=metadata)
    (found,) = find_rnns(path)
    assert (found.name, found.mode, found.format, found.num_layers) == (
        ".",
        "lstm",
        "safetensors",
        2,
    )
    assert_same_as_module(from_torch(path), module)
    model = Model()
    save_file(model.state_dict(), str(tmp_path / "model.safetensors"))
    # save_file writes its header's names sorted: the groups come in that order
    assert [f.name for f in find_rnns(tmp_path / "model.safetensors")] == [
        "decoder",
        "encoder.rnn",
        "post",
    ]
    assert_same_as_module(from_torch(tmp_path / "model.safetensors", "decoder"), model.decoder)


def test_npz_of_torch_names(tmp_path: Path) -> None:
    model = Model()
    path = tmp_path / "model.npz"
    np.savez(path, **{k: v.numpy() for k, v in model.state_dict().items()})
    assert [(f.name, f.format) for f in find_rnns(path)][:2] == [
        ("encoder.rnn", "torch"),
        ("decoder", "torch"),
    ]
    assert_same_as_module(from_torch(path, "encoder.rnn"), model.encoder.rnn)
    compressed = tmp_path / "compressed.npz"
    np.savez_compressed(compressed, **{k: v.numpy() for k, v in model.state_dict().items()})
    assert_same_as_module(from_torch(compressed, "post", activation="relu"), model.post)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_numpy_canonical_weights(tmp_path: Path, dtype: torch.dtype) -> None:
    """np.savez(path, *weights, *biases) of params_to_canonical, loaded back exactly."""
    torch.manual_seed(6)
    module = nn.LSTM(3, 5, num_layers=2, bidirectional=True, proj_size=2, dtype=dtype)
    layer = from_torch(module)
    op = ops.CudnnLSTM(2, 5, 3, direction="bidirectional", num_proj=2, dtype=dtype)
    weights, biases = op.params_to_canonical(layer.opaque_kernel.detach())
    arrays = [t.numpy() for t in (*weights, *biases)]
    path = tmp_path / "canonical.npz"
    np.savez(path, *arrays)
    for source in (path, arrays):
        back = from_numpy_canonical(source, "lstm", 2, 5, 3, direction="bidirectional", num_proj=2)  # type: ignore[arg-type]
        assert back.dtype == dtype
        assert torch.equal(back.opaque_kernel, layer.opaque_kernel)
    assert_same_as_module(back, module, atol=1e-10 if dtype == F64 else 1e-5)


def test_numpy_canonical_weights_are_checked(tmp_path: Path) -> None:
    op = ops.CudnnGRU(1, 4, 3, dtype=F64)
    weights, biases = op.params_to_canonical(torch.zeros(op.params_size(), dtype=F64))
    arrays = [t.numpy() for t in (*weights, *biases)]
    path = tmp_path / "gru.npz"
    np.savez(path, *arrays[:-1], np.zeros(3))
    with pytest.raises(
        TorchFileError,
        match=r"gru\.npz: not the 12 canonical arrays of a 1-layer unidirectional gru of 4 "
        r"units on inputs of 3 \(np\.savez\(path, \*weights, \*biases\)\): arr_11 has shape \[3\], "
        r"expected \[4\]\.",
    ):
        from_numpy_canonical(path, "gru", 1, 4, 3)
    np.savez(path, *arrays, extra=np.zeros(2))
    with pytest.raises(TorchFileError, match=r"unexpected 'extra'"):
        from_numpy_canonical(path, "gru", 1, 4, 3)
    with pytest.raises(ValueError, match=r"from_numpy_canonical: .*: 11 arrays given"):
        from_numpy_canonical(arrays[:-1], "gru", 1, 4, 3)
    with pytest.raises(ValueError, match=r"#0 has dtype int64, not float16, float32 or float64"):
        from_numpy_canonical([a.astype(np.int64) for a in arrays], "gru", 1, 4, 3)
    with pytest.raises(TypeError, match=r"expected a path or a sequence of arrays"):
        from_numpy_canonical(arrays[0], "gru", 1, 4, 3)


# -- TorchScript ------------------------------------------------------------------------------


class Scripted(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(8)
        self.enc = nn.LSTM(3, 4, num_layers=2, bidirectional=True, dtype=F64)
        self.cell = nn.GRUCell(8, 5, dtype=F64)
        self.post = nn.RNN(5, 2, nonlinearity="relu", dtype=F64)
        self.steps = nn.ModuleList([nn.RNNCell(2, 2, nonlinearity="relu", dtype=F64)])
        self.norm = nn.BatchNorm1d(2, dtype=F64)  # an int64 buffer beside the RNNs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.enc(x)
        h = self.cell(y[-1])
        z, _ = self.post(h[None])
        for step in self.steps:
            z = step(z[0])[None]
        return self.norm(z[0])


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("jit") / "model.pt"
    _quiet(lambda: torch.jit.save(torch.jit.script(Scripted()), str(path)))
    return path


def test_torchscript_lists_every_rnn_without_running_code(
    scripted: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the reader must not load the archive with torch")

    monkeypatch.setattr(torch.jit, "load", refuse)
    monkeypatch.setattr(torch, "load", refuse)
    found = find_rnns(scripted)
    assert [(f.name, f.mode, f.format) for f in found] == [
        ("enc", "lstm", "torch"),
        ("cell", "gru", "torch"),
        ("post", "rnn_relu", "torch"),  # nn.RNN records its nonlinearity
        ("steps.0", "rnn_relu", "torch"),  # nn.RNNCell: a constant of its class's code
    ]
    assert all(f.computable for f in found)
    assert found[2].details["activation_known"] is True
    assert found[0].where == "torch.nn.LSTM 'enc' in the TorchScript module tree"
    for f in found:
        from_torch(scripted, f.name)


def test_a_class_scripted_again_in_one_process_is_still_named_plainly(tmp_path: Path) -> None:
    """TorchScript renames a class it compiles a second time (``___torch_mangle_N.LSTM``); the
    listing names the standard class whatever ran before."""
    paths = [tmp_path / "first.pt", tmp_path / "second.pt"]
    for path in paths:
        holder = torch.nn.Module()
        holder.rnn = torch.nn.LSTM(3, 2)
        _quiet(lambda: torch.jit.save(torch.jit.script(holder), str(path)))  # noqa: B023
    with torchscript.open_archive(paths[1]) as archive:
        assert "___torch_mangle_" in archive.modules["rnn"].qualname  # what makes it a test
    for path in paths:
        (found,) = find_rnns(path)
        assert found.where == "torch.nn.LSTM 'rnn' in the TorchScript module tree"


def test_torchscript_rnns_equal_the_scripted_modules(scripted: Path) -> None:
    module = _quiet(lambda: torch.jit.load(str(scripted)))  # the oracle, in the test only
    assert_same_as_module(from_torch(scripted, "enc"), module.enc)
    assert_same_as_module(from_torch(scripted, "post"), module.post)
    assert_same_as_cell(from_torch(scripted, "cell"), module.cell)
    assert_same_as_cell(from_torch(scripted, "steps.0"), getattr(module.steps, "0"))
    with pytest.raises(TorchFileError, match=r"records nonlinearity 'relu', but activation='tanh'"):
        from_torch(scripted, "post", activation="tanh")
    with pytest.raises(TorchFileError, match=r"holds 4 RNNs \('enc', 'cell', 'post', 'steps.0'\)"):
        from_torch(scripted)


def test_torchscript_tensors_equal_torch_jit_load(scripted: Path) -> None:
    module = _quiet(lambda: torch.jit.load(str(scripted)))
    want = module.state_dict()
    with torchscript.open_archive(scripted) as archive:
        assert list(archive.tensors) == list(want)
        got = archive.read(list(archive.tensors))
    for name, value in want.items():
        assert got[name].dtype == value.dtype and torch.equal(got[name], value), name


# -- hostile files ----------------------------------------------------------------------------
# data.pkl is assembled from protocol-2 opcodes, as TorchScript's pickler writes them, so that a
# test says exactly what the archive asks for.


def _s(text: str) -> bytes:
    data = text.encode()
    return b"X" + struct.pack("<I", len(data)) + data


def _i(value: int) -> bytes:
    if -(1 << 31) <= value < 1 << 31:
        return b"J" + struct.pack("<i", value)
    return b"\x8a\x08" + value.to_bytes(8, "little", signed=True)  # LONG1


def _global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _tuple(*items: bytes) -> bytes:
    return b"(" + b"".join(items) + b"t"


def _tensor(key: str, numel: int, size: tuple[int, ...], stride: tuple[int, ...]) -> bytes:
    storage = _tuple(_s("storage"), _global("torch", "FloatStorage"), _s(key), _s("cpu"), _i(numel))
    hooks = _global("collections", "OrderedDict") + b")R"
    args = _tuple(
        storage + b"Q", _i(0), _tuple(*map(_i, size)), _tuple(*map(_i, stride)), b"\x89", hooks
    )
    return _global("torch._utils", "_rebuild_tensor_v2") + args + b"R"


def _module(attributes: dict[str, bytes], cls: str = "M") -> bytes:
    items = b"".join(_s(k) + v for k, v in attributes.items())
    return _global("__torch__", cls) + b")\x81}(" + items + b"ub"


def _archive(path: Path, pickled: bytes, storages: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("m/data.pkl", b"\x80\x02" + pickled + b".")
        for key, data in storages.items():
            z.writestr(f"m/data/{key}", data)
        z.writestr("m/code/__torch__.py", "")
        z.writestr("m/version", "3")
    return path


def _gru_archive(path: Path, module: nn.GRU) -> Path:
    state = module.state_dict()
    tensors = {
        name: _tensor(str(i), t.numel(), tuple(t.shape), t.stride())
        for i, (name, t) in enumerate(state.items())
    }
    storages = {str(i): t.numpy().tobytes() for i, t in enumerate(state.values())}
    return _archive(path, _module({"rnn": _module(tensors, "GRU")}), storages)


def test_the_assembled_archive_reads_as_torch_writes_it(tmp_path: Path) -> None:
    torch.manual_seed(9)
    module = nn.GRU(3, 2)
    path = _gru_archive(tmp_path / "ok.pt", module)
    (found,) = find_rnns(path)
    assert (found.name, found.mode, found.where) == (
        "rnn",
        "gru",
        "torch.nn.GRU 'rnn' (class __torch__.GRU) in the TorchScript module tree",
    )
    assert_same_as_module(from_torch(path), module, atol=1e-5)


class _Evil:
    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, (f"touch {self.target}",))

    def __init__(self, target: Path) -> None:
        self.target = target


def test_a_data_pkl_asking_for_os_system_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    evil = pickle.dumps(_Evil(marker), protocol=2)  # what an attacker's pickle.dumps writes
    path = _archive(tmp_path / "evil.pt", evil[2:-1], {})
    with pytest.raises(TorchFileError, match=r"evil\.pt: data\.pkl asks for the global 'posix\.s"):
        find_rnns(path)
    with pytest.raises(TorchFileError, match=r"the global 'posix\.system', which this reader does"):
        from_torch(path)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("pickled", "says"),
    [
        (_global("builtins", "eval") + _tuple(_s("1")) + b"R", "the global 'builtins.eval'"),
        (_global("torch.jit", "load") + _tuple(_s("x")) + b"R", "the global 'torch.jit.load'"),
        (_global("torch", "load") + _tuple(_s("x")) + b"R", "the global 'torch.load'"),
        (_global("__builtin__", "getattr"), "the global '__builtin__.getattr'"),
        (b"(" + _global("os", "system") + _s("true") + b"o", "the pickle opcode OBJ"),
        (b"(" + b"ios\nsystem\n", "the pickle opcode INST"),
        (b"\x82\x01", "the pickle opcode EXT1"),
        (b"\x96" + struct.pack("<Q", 3) + b"abc", "the pickle opcode BYTEARRAY8"),
        (b"P0\n", "the pickle opcode PERSID"),
        # a BUILD on one of the reader's own functions, which would set its attributes
        (_global("collections", "OrderedDict") + b"}b", "a BUILD on collections.OrderedDict"),
        (_module({"x": b"N"}) + b"}b", "a second BUILD on a '__torch__.M'"),
        (_global("__torch__", "M") + _tuple(_i(1)) + b"\x81", "'__torch__.M' made with arguments"),
        (_s("just a string"), "a str at the top, not a module"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_hostile_pickles_are_refused(tmp_path: Path, pickled: bytes, says: str) -> None:
    path = _archive(tmp_path / "hostile.pt", pickled, {})
    with pytest.raises(TorchFileError, match=r"hostile\.pt: data\.pkl asks for ") as info:
        find_rnns(path)
    assert says in str(info.value)


@pytest.mark.parametrize(
    ("numel", "size", "stride", "data", "says"),
    [
        (1 << 40, (4,), (1,), bytes(16), "storage '0' of 1099511627776 float32 elements, whose"),
        (4, (4,), (1,), bytes(8), "storage '0' of 4 float32 elements, whose member holds 8"),
        (4, (5,), (1,), bytes(16), "a tensor of size [5], stride [1] and offset 0 that reaches"),
        (4, (2, 2), (1, 3), bytes(16), "that reaches past its storage of 4 elements"),
        (4, (2,), (-1,), bytes(16), "a tensor stride -1, not a non-negative integer"),
    ],
)
def test_tensor_claims_are_checked_against_the_file(
    tmp_path: Path,
    numel: int,
    size: tuple[int, ...],
    stride: tuple[int, ...],
    data: bytes,
    says: str,
) -> None:
    pickled = _module({"w": _tensor("0", numel, size, stride)})
    path = _archive(tmp_path / "claims.pt", pickled, {"0": data})
    with pytest.raises(TorchFileError, match=r"claims\.pt: data\.pkl asks for ") as info:
        find_rnns(path)
    assert says in str(info.value)


def test_an_expanded_tensor_is_listed_but_not_read(tmp_path: Path) -> None:
    """A stride-0 view claiming more elements than its storage would allocate more than the
    file holds: listing shows its shape, reading it is refused."""
    w_ih = _tensor("0", 1, (3, 2), (0, 0))
    w_hh = _tensor("0", 1, (3, 1), (0, 0))
    path = _archive(
        tmp_path / "expanded.pt",
        _module({"rnn": _module({"weight_ih_l0": w_ih, "weight_hh_l0": w_hh})}),
        {"0": bytes(4)},
    )
    (found,) = find_rnns(path)
    assert (found.mode, found.num_units, found.input_size) == ("gru", 1, 2)
    with pytest.raises(TorchFileError, match=r"has more elements than its storage \(1\)"):
        from_torch(path)


def test_a_huge_data_pkl_is_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _gru_archive(tmp_path / "big.pt", nn.GRU(3, 2))
    monkeypatch.setattr(torchscript, "MAX_PICKLE_BYTES", 64)
    with pytest.raises(TorchFileError, match=r"member 'm/data.pkl' claims \d+ bytes .* at most 64"):
        find_rnns(path)


def test_an_archive_of_another_byte_order_is_refused(tmp_path: Path) -> None:
    path = _gru_archive(tmp_path / "big_endian.pt", nn.GRU(3, 2))
    with zipfile.ZipFile(path, "a") as z:
        z.writestr("m/byteorder", "big")
    with pytest.raises(TorchFileError, match=r"written on a machine of another byte order"):
        find_rnns(path)


def test_a_far_layer_index_is_listed_as_not_computable(tmp_path: Path) -> None:
    state = nn.LSTM(3, 2).state_dict()
    state["bias_ih_l99999999"] = torch.zeros(8)
    path = tmp_path / "far.pt"
    torch.save({"enc": state}, path)
    (found,) = find_rnns(path)
    assert not found.computable and found.mode == "lstm"
    assert found.reasons == (
        "not the state of one torch.nn.LSTM 'enc': a name names layer 99999999, but the group "
        "holds only 5 tensors",
    )
    with pytest.raises(
        TorchFileError,
        match=r"far\.pt: torch\.nn\.LSTM 'enc' in the state_dict "
        r"is not the state of one such module: a name names layer 99999999",
    ):
        from_torch(path)


def test_malformed_groups_say_every_problem(tmp_path: Path) -> None:
    state = {f"rnn.{k}": v for k, v in nn.GRU(3, 2, num_layers=2).state_dict().items()}
    state["rnn.weight_hh_l1"] = torch.zeros(6, 3)
    del state["rnn.bias_hh_l0"]
    state["rnn.weight_hr_l1"] = torch.zeros(1, 2)
    torch.save(state, tmp_path / "malformed.pt")
    (found,) = find_rnns(tmp_path / "malformed.pt")
    assert found.reasons == tuple(
        f"not the state of one torch.nn.GRU 'rnn': {p}"
        for p in (
            "missing bias_hh_l0",
            "unexpected weight_hr_l1",
            "weight_hh_l1 has shape [6, 3], expected [6, 2]",
        )
    )
    with pytest.raises(ValueError, match=r"GRU 'rnn' is not the state of one such module: miss"):
        from_torch(state)
    ints = {k: v.to(torch.int64) for k, v in nn.GRU(3, 2).state_dict().items()}
    with pytest.raises(
        ValueError, match=r"must be float16, bfloat16, float32 or float64, got bias"
    ):
        from_torch(ints)


def test_npz_claims_are_checked_before_reading(tmp_path: Path) -> None:
    """A .npy header claiming [9, 9] over 6 elements' bytes: refused before any is read."""
    member = io.BytesIO()
    npy_format.write_array_header_1_0(
        member, {"descr": "<f4", "fortran_order": False, "shape": (9, 9)}
    )
    path = tmp_path / "claims.npz"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("weight_ih_l0.npy", member.getvalue() + bytes(24))
    with pytest.raises(
        TorchFileError,
        match=r"member 'weight_ih_l0\.npy' of shape \[9, 9\] and dtype float32 needs \d+ bytes, "
        r"but holds \d+",
    ):
        find_rnns(path)


def test_a_huge_bytearray_claim_is_refused_unread(tmp_path: Path) -> None:
    path = _archive(tmp_path / "claim.pt", b"\x96" + struct.pack("<Q", 1 << 40), {})
    with pytest.raises(TorchFileError, match=r"expected 1099511627776 bytes in a bytearray8, but"):
        find_rnns(path)


def test_other_files_are_refused_naming_their_kind(tmp_path: Path) -> None:
    path = tmp_path / "model.h5"
    path.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(100))
    with pytest.raises(TorchFileError, match=r"model\.h5: an HDF5 file; torch state_dicts are"):
        find_rnns(path)
    torch.save([torch.zeros(2)], tmp_path / "list.pt")
    assert find_rnns(tmp_path / "list.pt") == []  # a list is read (issue 39): no RNN in it
    with pytest.raises(
        TorchFileError,
        match=r"list\.pt holds no torch\.nn LSTM, GRU, RNN or RNN cell state \(names such as "
        r"weight_ih_l0 or weight_ih, under any prefix\); it holds a list of 1 item \(\[0\]: a "
        r"tensor\); 1 tensor in all\.",
    ):
        from_torch(tmp_path / "list.pt")
    assert find_rnns(_npz_other(tmp_path / "other.npz")) == []


def _npz_other(path: Path) -> Path:
    np.savez(path, kernel=np.zeros((3, 8), np.float32))
    return path


@pytest.mark.cuda
def test_cuda_cells_and_state_dicts_stay_on_the_gpu() -> None:
    torch.manual_seed(10)
    cell = nn.LSTMCell(3, 4, device="cuda")
    layer = from_torch(cell)
    assert layer.opaque_kernel.is_cuda
    model = Model().cuda()
    from_state = from_torch(model.state_dict(), "decoder")
    assert from_state.opaque_kernel.is_cuda
    assert torch.equal(from_state.opaque_kernel, from_torch(model.decoder).opaque_kernel)


def test_arrays_under_names_of_their_own_load_through_convert() -> None:
    """A GRU kept as NumPy arrays with torch's layout under other names (as g2p_en's .npz):
    its w_ih/w_hh/b_ih/b_hh split into gates are the canonical list, and the layer computes
    what torch.nn.GRU computes with them."""
    from cudnn_rnn import convert

    torch.manual_seed(1)
    gru = torch.nn.GRU(6, 5)
    w_ih, w_hh, b_ih, b_hh = (p.detach().numpy() for p in gru.parameters())
    arrays = [*np.split(w_ih, 3), *np.split(w_hh, 3), *np.split(b_ih, 3), *np.split(b_hh, 3)]
    layer = convert.from_numpy_canonical(arrays, "gru", 1, 5, 6)
    x = torch.randn(7, 2, 6)
    with torch.no_grad():
        torch.testing.assert_close(layer(x)[0], gru(x)[0], rtol=1e-5, atol=1e-6)
    assert convert.converter("numpy", "from").function == "from_numpy_canonical"
