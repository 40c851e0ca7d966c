"""torch files that pickle more than tensors, and plain pickles (issue 39, item 3): Lightning
checkpoints, ``torch.save(model)``, state_dicts in lists, tuples and nested dicts, pickled dicts of
NumPy arrays, read by cudnn_rnn.io.torch.pickled without importing or running anything.

Every file is written by its real producer (``torch.save``, legacy ``torch.save``,
``pickle.dump`` at every protocol, and real Lightning for the committed fixtures of
tests/fixtures/torch_pickled/, with the script that wrote them), its classes deleted before it is
read where it has any; each RNN listed is loaded by the name it is listed under and checked
against the producer's own module on packed sequences of several lengths, with non-zero biases:
float64 to 1e-10, float32 to 1e-5. Files whose unpickling would run a command are read without
running it, and the RNNs beside it still load.
"""

from __future__ import annotations

import builtins
import importlib
import os
import pickle
import shutil
import subprocess
import sys
import tracemalloc
import uuid
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.testing
import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import cudnn_rnn
from cudnn_rnn.converters.torch_nn import from_torch
from cudnn_rnn.io import files
from cudnn_rnn.io.torch import contents
from cudnn_rnn.io.torch import pickled as torch_pickle
from cudnn_rnn.io.torch.file import find_rnns, read_group, tensor_shapes
from cudnn_rnn.io.torch.state import TorchFileError
from tests.support.paths import FIXTURES

F64 = torch.float64
LENGTHS = torch.tensor([6, 2, 5, 1])
PICKLED = FIXTURES / "torch_pickled"


# -- the oracle: the producer's module on packed sequences ------------------------------------


def _inputs(module: nn.RNNBase, seed: int = 3) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Time-major inputs for ``module`` (6 steps, batch 4) and its initial states."""
    gen = torch.Generator().manual_seed(seed)
    dtype = module.weight_ih_l0.dtype
    dirs = 2 if module.bidirectional else 1
    x = torch.rand(6, 4, module.input_size, generator=gen, dtype=dtype) * 2 - 1
    out = module.proj_size or module.hidden_size
    shapes = [(module.num_layers * dirs, 4, out)]
    if isinstance(module, nn.LSTM):
        shapes.append((module.num_layers * dirs, 4, module.hidden_size))
    return x, [torch.rand(s, generator=gen, dtype=dtype) * 2 - 1 for s in shapes]


def assert_same_as_module(layer: Any, module: nn.RNNBase, atol: float = 1e-10) -> None:
    """``layer`` with ``sequence_lengths`` and ``module`` on the same packed sequences give the
    same outputs (zeros past each length) and final states."""
    assert any(b.abs().min() > 0 for n, b in module.named_parameters() if "bias" in n)
    x, states = _inputs(module)
    ours, our_states = layer(x, tuple(states), sequence_lengths=LENGTHS)
    packed = pack_padded_sequence(x, LENGTHS, enforce_sorted=False)
    with torch.no_grad():
        theirs, their_states = module(packed, tuple(states) if len(states) == 2 else states[0])
    theirs = pad_packed_sequence(theirs, total_length=x.shape[0])[0]
    their_states = their_states if isinstance(their_states, tuple) else (their_states,)
    for a, b in zip((ours, *our_states), (theirs, *their_states)):
        assert a.shape == b.shape and a.dtype == b.dtype
        torch.testing.assert_close(a, b, rtol=0, atol=atol)


def assert_same_as_cell(layer: Any, cell: nn.RNNCellBase) -> None:
    """``layer`` over 6 steps equals ``cell`` stepped 6 times."""
    gen = torch.Generator().manual_seed(5)
    x = torch.rand(6, 4, cell.input_size, generator=gen, dtype=F64) * 2 - 1
    h = torch.rand(4, cell.hidden_size, generator=gen, dtype=F64) * 2 - 1
    ours, (final,) = layer(x, (h[None],))
    steps = []
    with torch.no_grad():
        for t in range(6):
            h = cell(x[t], h)
            steps.append(h)
    torch.testing.assert_close(ours, torch.stack(steps), rtol=0, atol=1e-10)
    torch.testing.assert_close(final[0], h, rtol=0, atol=1e-10)


@pytest.fixture
def no_imports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The test imports no module while it reads: none of the file's, and nothing else (a
    warm-up read of each kind first loads what the reader itself imports, such as a codec)."""
    folder = tmp_path_factory.mktemp("warm_up")
    state = nn.GRU(1, 1).state_dict()
    torch.save({"x": state}, folder / "zip.pt")
    torch.save({"x": state}, folder / "legacy.pt", _use_new_zipfile_serialization=False)
    (folder / "plain.pkl").write_bytes(pickle.dumps({"x": state}, protocol=5))
    for path in folder.iterdir():
        from_torch(path)
    b"a".decode("cp437")  # the zip reader's codec of names without the UTF-8 flag
    before = set(sys.modules)
    yield
    assert set(sys.modules) - before == set()


# -- files whose classes are gone -------------------------------------------------------------

SOURCE = '''
import torch
from torch import nn


class HParams:
    """A user's hyper-parameters object, as Lightning pickles it beside the weights."""

    def __init__(self, hidden, note):
        self.hidden, self.note = hidden, note


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(3, 4, num_layers=2, bidirectional=True, dtype=torch.float64)
        self.cell = nn.GRUCell(3, 2, dtype=torch.float64)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.post = nn.RNN(8, 2, nonlinearity="relu", dtype=torch.float64)
        self.proj = nn.LSTM(8, 5, proj_size=2, dtype=torch.float64)
        self.head = nn.Linear(2, 1, dtype=torch.float64)
        self.register_buffer("steps", torch.tensor(3))
'''


class Deleted:
    """Files written by a model whose module was deleted, and the model itself (its submodules
    are torch.nn's, the oracle)."""

    def __init__(self, folder: Path) -> None:
        self.module_name = f"_deleted_{uuid.uuid4().hex}"
        source = folder / f"{self.module_name}.py"
        source.write_text(SOURCE)
        sys.path.insert(0, str(folder))
        try:
            task = importlib.import_module(self.module_name)
            torch.manual_seed(0)
            self.model = task.Model()
            optimizer = torch.optim.Adam(self.model.parameters(), lr=0.1)
            self.model.head(self.model.post(torch.ones(2, 1, 8, dtype=F64))[0]).sum().backward()
            optimizer.step()  # the optimizer has state; the weights moved off their init
            self.module = folder / "model.pt"
            torch.save(self.model, self.module)
            self.legacy = folder / "model_legacy.pt"
            torch.save(self.model, self.legacy, _use_new_zipfile_serialization=False)
            self.checkpoint = folder / "lightning_like.ckpt"
            torch.save(
                {
                    "epoch": 3,
                    "global_step": 12,
                    "pytorch-lightning_version": "2.5.0",
                    "state_dict": {f"model.{k}": v for k, v in self.model.state_dict().items()},
                    "hyper_parameters": task.HParams(4, "deleted"),
                    "optimizer_states": [optimizer.state_dict()],
                    "lr_schedulers": [],
                    "callbacks": {
                        "EarlyStopping{'monitor': 'val_loss'}": {"wait_count": 1},
                        "Custom": task.HParams(2, "callback"),
                    },
                },
                self.checkpoint,
            )
        finally:
            sys.path.remove(str(folder))
            sys.modules.pop(self.module_name, None)
            source.unlink()
            shutil.rmtree(folder / "__pycache__", ignore_errors=True)


@pytest.fixture(scope="module")
def deleted(tmp_path_factory: pytest.TempPathFactory) -> Deleted:
    return Deleted(tmp_path_factory.mktemp("deleted"))


@pytest.mark.parametrize("which", ["module", "legacy"])
def test_a_whole_module_is_read_without_its_classes(
    deleted: Deleted, which: str, no_imports: None
) -> None:
    path = getattr(deleted, which)
    found = find_rnns(path)
    assert [(f.name, f.mode, f.computable) for f in found] == [
        ("encoder.lstm", "lstm", True),
        ("encoder.cell", "gru", True),
        ("post", "rnn_relu", True),  # the pickled nn.RNN records its nonlinearity
        ("proj", "lstm", True),
    ]
    assert found[0].where == "torch.nn.LSTM 'encoder.lstm' in the pickled module"
    model = deleted.model
    assert_same_as_module(from_torch(path, prefix="encoder.lstm"), model.encoder.lstm)
    assert_same_as_cell(from_torch(path, prefix="encoder.cell"), model.encoder.cell)
    assert_same_as_module(from_torch(path, prefix="post"), model.post)
    assert_same_as_module(from_torch(path, prefix="proj"), model.proj)
    shapes = tensor_shapes(path)
    assert list(shapes) == list(model.state_dict())  # state_dict names and order, buffer too
    assert shapes["steps"] == ((), "int64")
    assert deleted.module_name not in sys.modules


def test_a_lightning_like_checkpoint_is_read_without_its_classes(
    deleted: Deleted, no_imports: None
) -> None:
    path = deleted.checkpoint
    found = find_rnns(path, activation="relu")
    assert [f.name for f in found] == [
        "state_dict.model.encoder.lstm",
        "state_dict.model.encoder.cell",
        "state_dict.model.post",
        "state_dict.model.proj",
    ]
    assert found[0].where == "torch.nn.LSTM 'state_dict.model.encoder.lstm' in the state_dict"
    model = deleted.model
    assert_same_as_module(from_torch(path, "state_dict.model.encoder.lstm"), model.encoder.lstm)
    assert_same_as_cell(from_torch(path, "state_dict.model.encoder.cell"), model.encoder.cell)
    post = from_torch(path, "state_dict.model.post", activation="relu")
    assert_same_as_module(post, model.post)
    assert_same_as_module(from_torch(path, "state_dict.model.proj"), model.proj)
    with pytest.raises(TorchFileError, match=r"'state_dict\.model\.post' is a torch\.nn\.RNN, who"):
        from_torch(path, "state_dict.model.post")
    shapes = tensor_shapes(path)
    kept = [n for n in shapes if n.startswith("optimizer_states[0].state[")]
    assert kept and all(n.endswith(("exp_avg", "exp_avg_sq", "step")) for n in kept), kept
    assert deleted.module_name not in sys.modules


def test_the_public_loader_reads_them(deleted: Deleted) -> None:
    listed = cudnn_rnn.find_rnns(deleted.checkpoint)
    assert "state_dict.model.proj" in [f.name for f in listed]
    layer = cudnn_rnn.load(deleted.checkpoint, name="state_dict.model.proj")
    assert_same_as_module(layer, deleted.model.proj)
    assert_same_as_module(cudnn_rnn.load(deleted.module, name="post"), deleted.model.post)


# -- the committed files of real Lightning ----------------------------------------------------


def _fixture_rnns() -> dict[str, np.ndarray]:
    with np.load(PICKLED / "expected.npz") as data:
        return dict(data)


@pytest.mark.parametrize(
    ("name", "prefix"),
    [
        ("lightning.ckpt", "state_dict."),  # Trainer.save_checkpoint
        ("lightning_module.pt", ""),  # torch.save(LightningModule)
    ],
)
def test_real_lightning_files_equal_their_producer(
    name: str, prefix: str, no_imports: None
) -> None:
    """Written by tests/fixtures/torch_pickled/make_fixtures.py with real Lightning, whose
    classes (and the task's) this process has never imported."""
    path = PICKLED / name
    assert files.sniff(path) == files.TORCH_ZIP
    found = find_rnns(path)
    assert [(f.name, f.mode, f.direction, f.num_layers) for f in found] == [
        (f"{prefix}lstm", "lstm", "bidirectional", 2),
        (f"{prefix}gru", "gru", "unidirectional", 1),
    ]
    expected = _fixture_rnns()
    lengths = torch.from_numpy(expected["lengths"])
    for rnn in ("lstm", "gru"):
        layer = from_torch(path, prefix=f"{prefix}{rnn}")
        states = [torch.from_numpy(expected[f"{rnn}_h0"])]
        want = [expected[f"{rnn}_y"], expected[f"{rnn}_h"]]
        if rnn == "lstm":
            states.append(torch.from_numpy(expected["lstm_c0"]))
            want.append(expected["lstm_c"])
        x = torch.from_numpy(expected[f"{rnn}_x"])
        y, got = layer(x, tuple(states), sequence_lengths=lengths)
        for a, b in zip((y, *got), want):
            np.testing.assert_allclose(a.detach().numpy(), b, rtol=0, atol=1e-5)
    assert not any(m.startswith(("lightning", "_cudnn_rnn_fixture")) for m in sys.modules)


def test_the_checkpoint_keeps_what_lightning_pickled_beside_the_weights() -> None:
    shapes = tensor_shapes(PICKLED / "lightning.ckpt")
    assert "state_dict.head.weight" in shapes
    assert any(n.startswith("optimizer_states[0].state[") for n in shapes)
    with torch_pickle.open_pickled(PICKLED / "lightning.ckpt", files.TORCH_ZIP) as pickled:
        assert pickled.holds.startswith("a dict of 10 entries ('epoch': a int, ")
        assert pickled.holds.endswith(
            "'state_dict': a dict of 22 entries, 'loops': a dict of 4 entries, 'callbacks': a "
            "dict of 2 entries, 4 more); 93 tensors in all"
        )


# -- files that would run a command ---------------------------------------------------------


class _System:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


class _Eval(_System):
    def __reduce__(self) -> tuple[Any, ...]:
        return (builtins.eval, (f"open({str(self.marker)!r}, 'w').close()",))


class _Call(_System):
    def __reduce__(self) -> tuple[Any, ...]:
        return (subprocess.call, (["touch", str(self.marker)],))


class _SetState(_System):
    """Its BUILD would run its class's __setstate__."""

    def __getstate__(self) -> dict[str, Any]:
        return {"marker": str(self.marker)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        Path(state["marker"]).touch()


PAYLOADS = (_System, _Eval, _Call, _SetState)


def _evil(folder: Path) -> tuple[dict[str, Any], list[Path], nn.LSTM]:
    torch.manual_seed(4)
    lstm = nn.LSTM(3, 4, num_layers=2, bidirectional=True, dtype=F64)
    markers = [folder / f"pwned_{cls.__name__}" for cls in PAYLOADS]
    payloads = [cls(m) for cls, m in zip(PAYLOADS, markers)]
    return (
        {"before": payloads[:2], "model": {"rnn": lstm.state_dict()}, "after": payloads[2:]},
        (markers),
        lstm,
    )


@pytest.mark.parametrize(
    "write",
    [
        lambda obj, path: torch.save(obj, path),
        lambda obj, path: torch.save(obj, path, _use_new_zipfile_serialization=False),
        *(
            lambda obj, path, p=p: path.write_bytes(pickle.dumps(obj, protocol=p))
            for p in (0, 2, 5)
        ),
    ],
    ids=["torch.save", "legacy", "pickle0", "pickle2", "pickle5"],
)
def test_a_file_that_would_run_commands_runs_none(
    tmp_path: Path, write: Callable[[Any, Path], None], no_imports: None
) -> None:
    obj, markers, lstm = _evil(tmp_path)
    path = tmp_path / "evil.pkl"
    write(obj, path)
    assert b"system" in path.read_bytes() and b"eval" in path.read_bytes()
    (found,) = find_rnns(path)
    assert found.name == "model.rnn" and found.computable
    assert_same_as_module(from_torch(path, prefix="model.rnn"), lstm)
    with torch_pickle.open_pickled(path, files.sniff(path)) as pickled:
        assert "a list of 2 items" in pickled.holds
    assert not any(m.exists() for m in markers)


def test_the_payloads_are_real(tmp_path: Path) -> None:
    """The control: pickle's own unpickler runs every payload of those files."""
    obj, markers, _ = _evil(tmp_path)
    pickle.loads(pickle.dumps(obj, protocol=2))
    assert all(m.exists() for m in markers)


# -- state_dicts inside lists, tuples and dicts --------------------------------------------


def _rnns(seed: int) -> tuple[nn.LSTM, nn.GRU]:
    torch.manual_seed(seed)
    return nn.LSTM(3, 4, dtype=F64), nn.GRU(2, 3, num_layers=2, dtype=F64)


def test_a_list_of_state_dicts(tmp_path: Path) -> None:
    lstm, gru = _rnns(1)
    path = tmp_path / "list.pt"
    torch.save([{f"lstm.{k}": v for k, v in lstm.state_dict().items()}, gru.state_dict()], path)
    assert [f.name for f in find_rnns(path)] == ["[0].lstm", "[1]"]
    assert_same_as_module(from_torch(path, prefix="[0].lstm"), lstm)
    assert_same_as_module(from_torch(path, prefix="[1]"), gru)
    with pytest.raises(
        TorchFileError, match=r"list\.pt holds 2 RNNs \('\[0\]\.lstm', '\[1\]'\); pi"
    ):
        from_torch(path)


def test_a_tuple_and_nested_dicts(tmp_path: Path) -> None:
    lstm, gru = _rnns(2)
    path = tmp_path / "tuple.pt"
    torch.save((lstm.state_dict(), {"inner": {"deep": gru.state_dict()}, 7: "x"}), path)
    assert [f.name for f in find_rnns(path)] == ["[0]", "[1].inner.deep"]
    assert_same_as_module(from_torch(path, prefix="[0]"), lstm)
    assert_same_as_module(from_torch(path, prefix="[1].inner.deep"), gru)


def test_a_plain_state_dict_reads_as_before(tmp_path: Path) -> None:
    lstm, _ = _rnns(3)
    path = tmp_path / "plain.pt"
    torch.save({f"encoder.rnn.{k}": v for k, v in lstm.state_dict().items()}, path)
    (found,) = find_rnns(path)
    assert (found.name, found.where) == (
        "encoder.rnn",
        "torch.nn.LSTM 'encoder.rnn' in the state_dict",
    )
    assert_same_as_module(from_torch(path), lstm)


def test_cycles_and_depth_are_bounded(tmp_path: Path) -> None:
    lstm, _ = _rnns(4)
    cyclic: list[Any] = [lstm.state_dict()]
    cyclic.append(cyclic)
    deep: dict[str, Any] = lstm.state_dict()
    for _ in range(150):  # past the former bound (100); past today's: test_pickle_hostile.py
        deep = {"d": deep}
    path = tmp_path / "cyclic.pt"
    torch.save({"cyclic": cyclic, "deep": deep}, path)
    assert [f.name for f in find_rnns(path)] == ["cyclic[0]", "deep" + ".d" * 150]


# -- pickled NumPy arrays (g2pM's np_ckpt.pkl) -----------------------------------------------


class G2P(nn.Module):
    """g2pM's layout: an embedding, a bidirectional LSTM and a head, kept as NumPy arrays."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(6)
        self.embedding = nn.Embedding(10, 4, dtype=F64)
        self.lstm = nn.LSTM(4, 5, bidirectional=True, dtype=F64)
        self.fc = nn.Linear(10, 3, dtype=F64)


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_a_pickled_dict_of_numpy_arrays(tmp_path: Path, protocol: int, no_imports: None) -> None:
    model = G2P()
    arrays = {k: v.numpy() for k, v in model.state_dict().items()}
    path = tmp_path / "np_ckpt.pkl"
    with path.open("wb") as f:
        pickle.dump(arrays, f, protocol=protocol)
    assert files.sniff(path) == files.PICKLE
    (found,) = find_rnns(path)
    assert (found.name, found.format, found.mode) == ("lstm", "torch", "lstm")
    assert_same_as_module(from_torch(path), model.lstm)
    assert tensor_shapes(path)["embedding.weight"] == ((10, 4), "float64")


def test_numpy_orders_byte_orders_and_dtypes(tmp_path: Path) -> None:
    torch.manual_seed(7)
    gru = nn.GRU(3, 2, dtype=torch.float32)
    state = {k: v.numpy() for k, v in gru.state_dict().items()}
    arrays = {
        "weight_ih_l0": np.asfortranarray(state["weight_ih_l0"]),
        "weight_hh_l0": state["weight_hh_l0"].astype(">f4"),
        "bias_ih_l0": state["bias_ih_l0"],
        "bias_hh_l0": state["bias_hh_l0"].astype(">f4"),
        "labels": np.array(["a", "b"]),  # a dtype not rebuilt: left out
        "scalar": np.float32(2.5),
        "mask": np.array([True, False]),
    }
    for protocol in (2, 5):
        path = tmp_path / f"orders{protocol}.pkl"
        path.write_bytes(pickle.dumps(arrays, protocol=protocol))
        shapes = tensor_shapes(path)
        assert shapes["weight_hh_l0"] == ((6, 2), "float32")
        assert shapes["scalar"] == ((), "float32") and shapes["mask"] == ((2,), "bool")
        assert "labels" not in shapes
        _, _, tensors = read_group(path)
        for name, value in gru.state_dict().items():
            assert torch.equal(tensors[name], value), name
        assert_same_as_module(from_torch(path), gru, atol=1e-5)


# -- tensors as torch pickles them: views, dtypes, shared storages -----------------------------


def _views(dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """A GRU's state as views of one storage: offsets, a transpose, a stride of 3."""
    base = (torch.arange(200, dtype=torch.float64) / 97 - 1).to(dtype)
    return {
        "rnn.weight_ih_l0": base[10:28].view(6, 3),
        "rnn.weight_hh_l0": base[40:52].view(2, 6).t(),
        "rnn.bias_ih_l0": base[60::3][:6],
        "rnn.bias_hh_l0": base[100:106],
        "rnn_again.weight_ih_l0": base[10:28].view(6, 3),  # the same storage and view again
        "rnn_again.weight_hh_l0": base[40:52].view(2, 6).t(),
    }


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("how", ["torch.save", "legacy", "pickle.dumps"])
def test_views_of_one_storage_read_exactly(tmp_path: Path, dtype: torch.dtype, how: str) -> None:
    state = _views(dtype)
    path = tmp_path / "views.pt"
    if how == "pickle.dumps":  # each tensor's storage a legacy torch.save file in the pickle
        path.write_bytes(pickle.dumps({"hold": [state]}, protocol=2))
    else:
        torch.save({"hold": [state]}, path, _use_new_zipfile_serialization=how == "torch.save")
    assert [f.name for f in find_rnns(path)] == ["hold[0].rnn", "hold[0].rnn_again"]
    group, _, tensors = read_group(path, "hold[0].rnn")
    assert group.dtype == str(dtype).removeprefix("torch.")
    for own in group.members:
        assert tensors[own].dtype == dtype and torch.equal(tensors[own], state[f"rnn.{own}"])
        assert tensors[own].is_contiguous()


# -- refusals ---------------------------------------------------------------------------------


def test_a_file_without_an_rnn_says_what_it_holds(tmp_path: Path) -> None:
    path = tmp_path / "other.pt"
    torch.save({"epoch": 3, "weights": {"w": torch.zeros(2)}, "names": ["a"]}, path)
    assert find_rnns(path) == []
    with pytest.raises(
        TorchFileError,
        match=r"other\.pt holds no torch\.nn LSTM, GRU, RNN or RNN cell state \(names such as "
        r"weight_ih_l0 or weight_ih, under any prefix\); it holds a dict of 3 entries \('epoch': "
        r"a int, 'weights': a dict of 1 entry, 'names': a list of 1 item\); 1 tensor in all\.$",
    ):
        from_torch(path)
    with pytest.raises(TorchFileError, match=r"holds no RNN at prefix 'x'; it holds none \(a dict"):
        from_torch(path, prefix="x")


def _rewritten(path: Path, change: Callable[[str, bytes], bytes | None]) -> None:
    """The zip archive at ``path`` with each member changed (None: left out)."""
    with zipfile.ZipFile(path) as z:
        members = [(i.filename, z.read(i)) for i in z.infolist()]
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members:
            new = change(name, data)
            if new is not None:
                z.writestr(name, new)


def test_a_missing_or_short_storage_is_refused(tmp_path: Path) -> None:
    lstm, _ = _rnns(5)
    path = tmp_path / "missing.pt"
    torch.save({"rnn": lstm.state_dict(), "x": _Eval(tmp_path / "pwned")}, path)
    _rewritten(path, lambda name, data: None if name.endswith("data/1") else data)
    with pytest.raises(
        TorchFileError,
        match=r"missing\.pt: it asks for storage '1', which the archive does not hold, which",
    ):
        find_rnns(path)
    torch.save(lstm.state_dict(), path)
    _rewritten(path, lambda name, data: data[:-4] if name.endswith("data/0") else data)
    with pytest.raises(TorchFileError, match=r"storage '0' of 48 float64 elements, whose member"):
        find_rnns(path)


def test_a_legacy_storage_of_another_size_is_refused(tmp_path: Path) -> None:
    lstm, _ = _rnns(6)
    path = tmp_path / "legacy.pt"
    torch.save(lstm.state_dict(), path, _use_new_zipfile_serialization=False)
    data = bytearray(path.read_bytes())
    end = len(data) - sum(t.numel() * 8 + 8 for t in lstm.state_dict().values())
    data[end : end + 8] = (999).to_bytes(8, "little")  # the first storage's element count
    path.write_bytes(bytes(data))
    with pytest.raises(TorchFileError, match=r"storage '\d+' of \d+ elements, whose data says 999"):
        find_rnns(path)
    path.write_bytes(bytes(data[: end + 100]))
    with pytest.raises(TorchFileError, match=r"past the end of the file"):
        find_rnns(path)


def test_a_tensor_past_its_storage_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "past.pt"
    torch.save({"w": torch.zeros(4)}, path)
    _rewritten(
        path,
        lambda name, data: (
            data.replace(b"K\x04\x85", b"K\x05\x85") if name.endswith("data.pkl") else data
        ),
    )
    with pytest.raises(TorchFileError, match=r"a tensor of size \[5\], stride \[1\] and offset 0"):
        find_rnns(path)


def test_out_of_band_buffers_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "oob.pkl"
    path.write_bytes(pickle.dumps({"w": np.zeros(3)}, protocol=5, buffer_callback=lambda b: False))
    with pytest.raises(TorchFileError, match=r"oob\.pkl: the pickle uses the pickle opcode NEXT_B"):
        find_rnns(path)


def test_a_pickle_bomb_is_refused_before_it_is_unpickled(tmp_path: Path) -> None:
    path = tmp_path / "bomb.pkl"
    path.write_bytes(b"\x80\x02]r" + (1 << 30).to_bytes(4, "little") + b".")
    with pytest.raises(
        TorchFileError,
        match=r"bomb\.pkl: refused before anything is unpickled: the pickle at byte 3: stores "
        r"memo index 1073741824",
    ):
        find_rnns(path)


# -- bounds -----------------------------------------------------------------------------------


def _peak(call: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_listing_reads_no_storage_and_a_pickle_is_held_once(tmp_path: Path) -> None:
    """A torch.save file's 32 MB tensor beside an RNN is not read to list or load the RNN; a
    32 MB plain pickle is held with its bytes objects, under 2.5 times its size."""
    lstm, _ = _rnns(7)
    path = tmp_path / "big.pt"
    torch.save({"rnn": lstm.state_dict(), "big": torch.zeros(4 << 20, dtype=F64)}, path)
    assert path.stat().st_size > 32 << 20
    assert _peak(lambda: find_rnns(path)) < 4 << 20
    assert _peak(lambda: from_torch(path, prefix="rnn")) < 4 << 20
    pkl = tmp_path / "big.pkl"
    arrays = {k: v.numpy() for k, v in lstm.state_dict().items()}
    pkl.write_bytes(pickle.dumps({"rnn": arrays, "big": np.zeros(4 << 20)}, protocol=4))
    size = pkl.stat().st_size
    assert size < _peak(lambda: find_rnns(pkl)) < 2.5 * size


def test_names_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A memo reference repeated costs the pickle two bytes a name: the names it would make
    are bounded in count and in characters, and an overlong path is left out."""
    lstm, _ = _rnns(8)
    weight = torch.zeros(2)
    path = tmp_path / "names.pkl"
    path.write_bytes(pickle.dumps({"x" * 2000: lstm.state_dict(), "w": [weight] * 200}))
    assert find_rnns(path) == []  # the RNN's path is over MAX_NAME characters
    assert len(tensor_shapes(path)) == 200
    monkeypatch.setattr(contents, "MAX_TENSORS", 100)
    with pytest.raises(TorchFileError, match=r"names\.pkl: names more than 100 tensors; it is no"):
        find_rnns(path)
    monkeypatch.setattr(contents, "MAX_NAME_CHARACTERS", 500)
    with pytest.raises(TorchFileError, match=r"come to more than 500 characters; it is not read"):
        find_rnns(path)
