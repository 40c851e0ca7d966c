"""The one bounded pickle reader (cudnn_rnn.pickles): every pickle the package unpickles or hands
to torch.load is walked first, so a memo index, an opcode count, a nesting or a length that would
make an unpickler allocate or work without bound is refused with its byte named, through every
entry point, before anything is unpickled; the pickles real producers write still read."""

from __future__ import annotations

import collections
import io
import pickle
import pickletools
import struct
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from cudnn_rnn import convert, files, pickles
from cudnn_rnn.formats import torch_file
from cudnn_rnn.formats.torch_file import TorchFileError
from tests.support import readers, zips


def _memo_bomb(index: int) -> bytes:
    """PROTO 2, EMPTY_LIST, LONG_BINPUT index, STOP: the C unpickler grows its memo to index."""
    return b"\x80\x02]r" + struct.pack("<I", index) + b"."


def _torchscript(path: Path, pickled: bytes) -> Path:
    """A TorchScript archive (it sniffs as one) whose data.pkl is ``pickled``."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("m/data.pkl", pickled)
        z.writestr("m/code/__torch__.py", "")
        z.writestr("m/constants.pkl", b"\x80\x02).")
        z.writestr("m/version", "3")
    return path


TORCHSCRIPT_ENTRY_POINTS: dict[str, Callable[[Path], object]] = {
    "torchscript.open_archive": readers.open_archive,
    "torch_file.find_rnns": torch_file.find_rnns,
    "convert.find_rnns": convert.find_rnns,
    "convert.from_torch": convert.from_torch,
}


@pytest.mark.parametrize("entry", sorted(TORCHSCRIPT_ENTRY_POINTS))
@pytest.mark.parametrize("power", [26, 30])
def test_a_torchscript_memo_bomb_is_refused(entry: str, power: int, tmp_path: Path) -> None:
    path = _torchscript(tmp_path / "bomb.pt", _memo_bomb(1 << power))
    assert path.stat().st_size < 600 and files.sniff(path) == files.TORCHSCRIPT
    with pytest.raises(
        TorchFileError,
        match=rf"bomb\.pt: data\.pkl is refused before it is unpickled: stores memo index "
        rf"{1 << power} \(LONG_BINPUT\) after only 2 opcodes; an unpickler would allocate a "
        r"memo of that many entries \(byte 3\)",
    ) as info:
        TORCHSCRIPT_ENTRY_POINTS[entry](path)
    assert isinstance(info.value.__cause__, pickles.PickleError)
    assert info.value.__cause__.offset == 3


def test_the_memo_bombs_leave_memory_alone(tmp_path: Path) -> None:
    """Reading both bombs through every entry point allocates less than 16 MiB at its peak
    (tracemalloc sees the unpickler's memo), while pickle's own unpickler, given a memo index of
    2**23, allocates 64 MiB or more (so the measure sees a memo; 2**26 would be 1 GiB, 2**30
    16 GiB)."""
    bombs = [_torchscript(tmp_path / f"bomb{p}.pt", _memo_bomb(1 << p)) for p in (26, 30)]
    calls = [*TORCHSCRIPT_ENTRY_POINTS.values(), torch_file.read_state]
    refused = 0
    tracemalloc.start()
    try:
        for path in bombs:
            for call in calls:
                with pytest.raises(TorchFileError, match=r"stores memo index"):
                    call(path)
                refused += 1
        _, ours = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        pickle.loads(_memo_bomb(1 << 23))
        _, theirs = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert refused == 10
    assert ours < 16 << 20, ours
    assert theirs >= 64 << 20, theirs


def _saved(state: object, **options: object) -> bytes:
    buffer = io.BytesIO()
    torch.save(state, buffer, **options)  # type: ignore[arg-type]
    return buffer.getvalue()


def test_a_torch_save_archive_whose_data_pkl_is_a_bomb_is_refused(tmp_path: Path) -> None:
    members = zips.members_of(_saved({"w": torch.zeros(2)}))
    bomb = zips.stored("archive/data.pkl", _memo_bomb(1 << 26))
    path = tmp_path / "state.pt"
    path.write_bytes(zips.archive([bomb if m.name == bomb.name else m for m in members]))
    bomb = r"archive/data\.pkl at byte 3: stores memo index 67108864 \(LONG_BINPUT\) after only 2"
    says = {  # read_state hands what it checked to torch.load; the others unpickle it themselves
        torch_file.read_state: rf"state\.pt: torch\.load\(weights_only=True\) refuses it: {bomb}",
        torch_file.find_rnns: rf"state\.pt: refused before anything is unpickled: {bomb}",
        convert.find_rnns: rf"state\.pt: refused before anything is unpickled: {bomb}",
    }
    for call, message in says.items():
        with pytest.raises(TorchFileError, match=message) as info:
            call(path)
        assert isinstance(info.value.__cause__, pickles.PickleError)


def test_a_legacy_file_whose_object_pickle_is_a_bomb_is_refused(tmp_path: Path) -> None:
    """A legacy torch.save file is five pickles (magic number, protocol, system info, the
    object, its storages' keys) and the storages' bytes: all five are walked first."""
    legacy = _saved({"w": torch.zeros(2)}, _use_new_zipfile_serialization=False)
    three = pickles.check(legacy, count=3)
    four = pickles.check(legacy, count=4)
    path = tmp_path / "legacy.pt"
    path.write_bytes(legacy[:three] + _memo_bomb(1 << 30) + legacy[four:])
    assert files.sniff(path) == files.TORCH_PICKLE
    bomb = rf"its pickles at byte {three + 3}: stores memo index 1073741824"
    says = {
        torch_file.read_state: rf"legacy\.pt: torch\.load\(weights_only=True\) refuses it: {bomb}",
        torch_file.find_rnns: rf"legacy\.pt: refused before anything is unpickled: {bomb}",
        convert.find_rnns: rf"legacy\.pt: refused before anything is unpickled: {bomb}",
    }
    for call, message in says.items():
        with pytest.raises(TorchFileError, match=message):
            call(path)


def test_a_legacy_file_with_a_long_pickle_still_loads(tmp_path: Path) -> None:
    """The leading pickles are read 1 MiB first, then more as they need (up to 64 MiB)."""
    state = torch.nn.GRU(2, 3).state_dict()
    note = "n" * (3 << 20)  # a str of 3 MiB in the object's pickle
    path = tmp_path / "long.pt"
    path.write_bytes(_saved({"rnn": state, "note": note}, _use_new_zipfile_serialization=False))
    loaded = torch_file._torch_load(str(path))
    assert loaded["note"] == note and torch.equal(loaded["rnn"]["weight_hh_l0"],
                                                  state["weight_hh_l0"])  # fmt: skip
    assert [f.name for f in torch_file.find_rnns(path)] == ["rnn"]


# -- each bound, through the TorchScript reader ----------------------------------------------------


def _frame(length: int) -> bytes:
    return b"\x95" + struct.pack("<Q", length)


@pytest.mark.parametrize(
    ("pickled", "says"),
    [
        (b"\x80\x02" + b"(" * 1001 + b".", r"nests MARKs more than 1000 deep \(byte 1002\)"),
        (b"\x80\x02\x8d" + struct.pack("<Q", 1 << 40) + b"x.",
         r"expected 1099511627776 bytes in a unicodestring8, but only 2 remain \(byte 2\)"),
        (b"\x80\x04" + _frame(1 << 20) + b"N.", r"frames 1048576 bytes; only 2 remain \(byte 2\)"),
        (b"\x80\x02c" + b"m" * 70_000 + b"\nx\n.", r"has a line over 65536 bytes \(a GLOBAL"),
        (b"\x80\x02p2\n.", r"stores memo index 2 \(PUT\) after only 1 opcode;"),
        (b"\x80\x06N.", r"is of protocol 6; at most 5 is read \(byte 0\)"),
        (b"\x80\x02Nt.", r"has a TUPLE with no MARK before it \(byte 3\)"),
        (b"\x80\x02N", r"ends before its STOP opcode \(byte 3\)"),
        (b"\x80\x02\xff.", r"has byte 0xff, which is no pickle opcode \(byte 2\)"),
    ],
    ids=lambda v: None if isinstance(v, bytes) else v[:24],
)  # fmt: skip
def test_each_bound_is_refused_naming_its_byte(pickled: bytes, says: str, tmp_path: Path) -> None:
    path = _torchscript(tmp_path / "hostile.pt", pickled)
    with pytest.raises(TorchFileError, match=rf"hostile\.pt: data\.pkl is refused before .*{says}"):
        readers.open_archive(path)


def test_too_many_opcodes_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pickled = pickle.dumps(list(range(100)), protocol=2)
    path = _torchscript(tmp_path / "long.pt", pickled)
    monkeypatch.setattr(pickles, "MAX_PICKLE_OPCODES", 50)
    with pytest.raises(TorchFileError, match=r"data\.pkl is refused .*holds more than 50 opcodes"):
        readers.open_archive(path)
    with pytest.raises(pickles.PickleError, match=r"the pickle at byte \d+: holds more than 50"):
        pickles.check(pickled)


def test_a_forbidden_opcode_is_named_as_the_reader_names_it(tmp_path: Path) -> None:
    path = _torchscript(tmp_path / "obj.pt", b"\x80\x02(cos\nsystem\nX\x01\x00\x00\x00xo.")
    with pytest.raises(TorchFileError, match=r"obj\.pt: data\.pkl asks for the pickle opcode OBJ"):
        readers.open_archive(path)


# -- what real producers write ---------------------------------------------------------------------


def _objects() -> list[object]:
    cyclic: list[object] = [(1,)]
    cyclic.append(cyclic)
    inner: list[object] = []
    recursive_tuple = (inner, inner)
    inner.append(recursive_tuple)
    return [
        {"a": [1, 2.5, "x", b"y", None, True, (1, 2), frozenset({1}), {3}, bytearray(b"z")]},
        collections.OrderedDict(a=1, b=[[[]]]),
        list(range(3000)),
        {i: str(i) for i in range(2000)},
        10**100,
        "\u00e9" * 300,
        cyclic,
        recursive_tuple,
    ]


@pytest.mark.parametrize("protocol", range(6))
def test_pythons_pickles_are_walked_whole(protocol: int) -> None:
    for obj in _objects():
        data = pickle.dumps(obj, protocol=protocol)
        assert pickles.check(data) == len(data)
        optimized = pickletools.optimize(data)
        assert pickles.check(optimized) == len(optimized)


def test_torchs_pickles_are_walked_whole(tmp_path: Path) -> None:
    module = torch.nn.LSTM(3, 4, 2)
    with zipfile.ZipFile(io.BytesIO(_saved(module.state_dict()))) as z:
        data = z.read("archive/data.pkl")
    assert pickles.check(data) == len(data)
    legacy = _saved(module.state_dict(), _use_new_zipfile_serialization=False)
    assert 0 < pickles.check(legacy, count=5) < len(legacy)
    ends = pickles.ends(legacy, count=5)  # each of the five pickles, where check says
    assert ends == [pickles.check(legacy, count=n) for n in range(1, 6)]
    assert pickle.loads(legacy[ends[0] : ends[1]]) == 1001  # the protocol version, alone


def test_the_unpickler_base_reads_no_global() -> None:
    data = pickle.dumps(collections.OrderedDict(), protocol=2)
    with pytest.raises(pickle.UnpicklingError, match=r"x: the global collections.OrderedDict is"):
        pickles.Unpickler(data, what="x").load()
    assert pickles.Unpickler(pickle.dumps([1, {"a": b"b"}]), what="x").load() == [1, {"a": b"b"}]


def test_pickle_errors_survive_pickling() -> None:
    err = pickles.PickleError("x", "why", 3, "OBJ", True)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err) and str(back) == str(err) and vars(back) == vars(err)
