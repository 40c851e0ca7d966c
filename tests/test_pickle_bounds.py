"""The one bounded pickle reader (cudnn_rnn.io.pickles): every pickle the package unpickles or hands
to torch.load is walked first, so a memo index, an opcode count, a nesting or a length that would
make an unpickler allocate or work without bound is refused with its byte named, through every
entry point, before anything is unpickled; the pickles real producers write still read."""

from __future__ import annotations

import collections
import contextlib
import io
import itertools
import pickle
import pickletools
import struct
import tracemalloc
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

import cudnn_rnn
from cudnn_rnn import convert
from cudnn_rnn.io import files, pickles
from cudnn_rnn.io.torch import file as torch_file
from cudnn_rnn.io.torch.file import TorchFileError
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


# -- the depth of what a pickle builds -------------------------------------------------------------


def _deep(opener: bytes, levels: int) -> bytes:
    """A pickle whose object is ``levels`` ``opener`` levels around None (TUPLE1: no MARK)."""
    return b"\x80\x02N" + opener * levels + b"."


def test_containers_are_bounded_at_every_depth_not_only_marks() -> None:
    """TUPLE1 needs no MARK: a key of a million of them passed the old checker, and CPython
    then overflowed its C stack hashing it (tuple hashing has no recursion guard)."""
    assert pickles.MAX_PICKLE_NESTING == pickles.MAX_PICKLE_DEPTH == 1000  # the former name too
    assert pickles.check(_deep(b"\x85", 1000)) == 1004
    for opener, name in ((b"\x85", "TUPLE1"), (b"N\x86", "TUPLE2"), (b"NN\x87", "TUPLE3")):
        data = _deep(opener, 1001)
        at = 3 + 1000 * len(opener) + len(opener) - 1
        with pytest.raises(
            pickles.PickleError,
            match=rf"^the pickle at byte {at}: nests containers more than 1000 deep \(a {name}\); "
            r"an unpickled object that deep exhausts whatever walks it\.$",
        ):
            pickles.check(data)


def _memo_chain(level: bytes, levels: int) -> bytes:
    """None at memo 0, then ``levels`` times ``level`` (which reads the last object as memo 0)
    memoized at 0 again: deep objects of any kind, with one MARK open at most."""
    put, get = b"r\x00\x00\x00\x00", b"j\x00\x00\x00\x00"
    return b"\x80\x04N" + put + b"0" + (level.replace(b"@", get) + put + b"0") * levels + get + b"."


#: kind -> (a level, the opcode past the bound, the levels a level adds, the depth of the first):
#: a call is one level above its arguments' tuple, which is one above them (so the tuple of the
#: call past the bound is the first past it: a call that did not count would leave it within).
KINDS = {
    "tuple (MARK)": (b"(@t", "TUPLE", 1, 1),
    "list": (b"]@a", "APPEND", 1, 1),
    "dict": (b"}N@s", "SETITEM", 1, 1),
    "set": (b"\x8f(@\x90", "ADDITEMS", 1, 1),
    "frozenset": (b"(@\x91", "FROZENSET", 1, 1),
    "list (MARK)": (b"(@l", "LIST", 1, 1),
    "dict (MARK)": (b"(N@d", "DICT", 1, 1),
    "REDUCE": (b"cm\nf\n@\x85R", "TUPLE1", 2, 2),
    "NEWOBJ": (b"cm\nC\n@\x85\x81", "TUPLE1", 2, 2),
    "NEWOBJ_EX": (b"cm\nC\n@\x85}\x92", "TUPLE1", 2, 2),
    "INST": (b"(@im\nC\n", "INST", 1, 1),
    "OBJ": (b"(cm\nC\n@o", "OBJ", 1, 1),
    "BUILD": (b"cm\nC\n)R@b", "BUILD", 1, 2),
    "a call of a call": (b"@)R", "REDUCE", 1, 2),
    "BINPERSID": (b"@Q", "BINPERSID", 1, 1),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_of_container_counts(kind: str) -> None:
    level, name, step, first = KINDS[kind]
    levels = (1000 - first) // step + 1  # the most within the bound
    assert pickles.check(_memo_chain(level, levels)) > 0
    with pytest.raises(pickles.PickleError, match=rf"more than 1000 deep \(a {name}\)"):
        pickles.check(_memo_chain(level, levels + 1))


def test_a_container_filled_later_is_followed_by_its_memo_entry() -> None:
    """APPEND on a memoized list raises that list's depth, once to one above its deepest item
    (not one a call): appending to it 5000 flat items leaves it at depth 1; appending one
    999 deep makes it 1000, and a tuple of it 1001."""
    head = b"\x80\x04]r\x00\x00\x00\x00" + b"Na" * 5000  # the list at memo 0, 5000 Nones
    deep = b"N" + b"\x85" * 999
    assert pickles.check(head + b".") > 0
    assert pickles.check(head + deep + b"a.") > 0
    with pytest.raises(pickles.PickleError, match=r"byte \d+: nests containers more than 1000 "
                       r"deep \(a TUPLE1\)"):  # fmt: skip
        pickles.check(head + deep + b"a0j\x00\x00\x00\x00\x85.")


@pytest.mark.parametrize(
    ("pickled", "says"),
    [
        (b"\x80\x02h\x07.", r"byte 2: reads memo index 7 \(BINGET\), never stored"),
        (b"\x80\x02]p-1\n.", r"byte 3: has a PUT of the negative memo index -1"),
        (b"\x80\x02a.", r"byte 2: has a APPEND with too few items on the stack"),
        (b"\x80\x02(u.", r"byte 3: has a SETITEMS with too few items on the stack"),
        (b"\x80\x02.", r"byte 2: has a STOP with too few items on the stack"),
        (b"\x80\x020.", r"byte 2: has a POP with too few items on the stack"),
        (b"\x80\x02N(0N.", None),  # POP above a MARK pops the MARK, as pickle does
    ],
)  # fmt: skip
def test_the_stack_is_simulated_as_pickle_runs_it(pickled: bytes, says: str | None) -> None:
    if says is None:
        assert pickles.check(pickled) == len(pickled)
        assert pickle.loads(pickled) is None
        return
    with pytest.raises(pickles.PickleError, match=rf"^the pickle at {says}\.$"):
        pickles.check(pickled)
    with pytest.raises((pickle.UnpicklingError, KeyError, IndexError, ValueError)):
        pickle.loads(pickled)  # pickle refuses them too, only later


def _state_dict_pickle(tensors: int) -> bytes:
    module = torch.nn.Linear(2, 2)
    state = {f"layers.{i}.{k}": v.clone() for i in range(tensors // 2) for k, v in
             module.state_dict().items()}  # fmt: skip
    with zipfile.ZipFile(io.BytesIO(_saved(state))) as z:
        return z.read("archive/data.pkl")


def _cpu_seconds(call: Callable[[], object], repeat: int = 3) -> float:
    import time

    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        call()
        best = min(best, time.process_time() - start)
    return best


def test_the_check_is_linear_in_the_pickle() -> None:
    """Four times the tensors take about four times the CPU time (a ratio, never a time): a
    real state_dict's data.pkl, and wide and deep shapes that a quadratic walk would suffer
    from (a MARK of 40,000 items; 40,000 APPENDs to one deep list)."""
    small, large = _state_dict_pickle(2000), _state_dict_pickle(8000)
    ratio = _cpu_seconds(lambda: pickles.check(large)) / _cpu_seconds(lambda: pickles.check(small))
    assert ratio < 8, ratio  # linear: 4; quadratic: 16
    deep = b"N" + b"\x85" * 999

    def shapes(n: int) -> bytes:
        wide = b"(" + b"N" * n + b"t0"
        appends = b"]r\x00\x00\x00\x00" + deep + b"a" + b"j\x00\x00\x00\x00" * n + b"0" * n
        return b"\x80\x04" + wide + appends + b"."

    one, four = shapes(10_000), shapes(40_000)
    ratio = _cpu_seconds(lambda: pickles.check(four)) / _cpu_seconds(lambda: pickles.check(one))
    assert ratio < 8, ratio


# -- what unpickled data looks like in messages ------------------------------------------------


def test_values_are_shown_bounded_whatever_their_depth_or_size() -> None:
    deep: object = None
    for _ in range(200_000):
        deep = [deep]
    huge = 7**100_000
    shown = pickles.shown({"a": (deep, huge, b"\x1b[2J" * 100), frozenset({1}): set()}, 100)
    assert shown.startswith("{'a': ([[...]], <int of 280736 bits>, b'\\x1b[2J\\x1b[2J")
    assert shown.endswith("...") and len(shown) == 103
    assert pickles.shown({frozenset({1}): set()}) == "{frozenset({1}): set()}"
    assert pickles.shown((1,)) == "(1,)" and pickles.shown(set()) == "set()"
    assert pickles.shown(list(range(100))) == "[0, 1, 2, 3, 4, 5, ...]"
    assert pickles.shown(collections.OrderedDict(a=1)) == "{'a': 1}"


def test_a_deep_key_is_shown_bounded_in_what_the_file_holds(tmp_path: Path) -> None:
    """A dict keyed by a tuple 999 deep (within the bound: it hashes) is named in the message
    of a file holding no RNN, three levels deep: repr() of it would raise RecursionError."""
    path = tmp_path / "key.pkl"
    path.write_bytes(b"\x80\x02}N" + b"\x85" * 999 + b"Ns.")
    assert torch_file.find_rnns(path) == []
    says = r"key\.pkl holds no .* a dict of 1 entry \(\(\(\(\(\.\.\.\),\),\),\): a NoneType\); 0 "
    with pytest.raises(TorchFileError, match=says + r"tensors in all\.$"):
        convert.from_torch(path)


def test_a_recursion_error_never_escapes_a_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last net: whatever walk of the data would still recurse too deep, each reader
    raises its own error naming the file."""
    from cudnn_rnn.io.torch import contents, torchscript

    path = tmp_path / "state.pt"
    torch.save(torch.nn.GRU(2, 3).state_dict(), path)

    def deep(*args: object) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(contents, "_collect", deep)
    says = r"state\.pt: its objects nest too deep to be read; the file is corrupt or made to "
    with pytest.raises(TorchFileError, match=says + r"exhaust its reader\.$"):
        torch_file.find_rnns(path)
    scripted = tmp_path / "scripted.pt"
    with pytest.warns(DeprecationWarning):
        torch.jit.save(torch.jit.script(torch.nn.GRU(2, 3)), scripted)
    monkeypatch.setattr(torchscript, "_walk", deep)
    says = r"scripted\.pt: data\.pkl nests its objects too deep to be read; the archive is "
    with pytest.raises(TorchFileError, match=says + r"corrupt or made to exhaust its reader\.$"):
        torch_file.find_rnns(scripted)


def test_tensors_past_the_longest_path_are_left_out_and_said(tmp_path: Path) -> None:
    path = tmp_path / "long.pt"
    torch.save({"k" * 1100: torch.nn.GRU(2, 3).state_dict()}, path)
    assert torch_file.find_rnns(path) == []
    says = r"0 tensors in all \(1 tensor or container left out: path over 1024 characters, or "
    with pytest.raises(TorchFileError, match=says + r"under a key that is neither a str nor an"):
        convert.from_torch(path)


# -- the budget of what a read rebuilds --------------------------------------------------------


def test_the_budget_is_a_multiple_of_the_pickles_read_plus_a_constant() -> None:
    budget = pickles.Budget()
    budget.allow(1000)
    assert budget.limit == 32 * 1000 + (64 << 20)
    budget.charge(budget.limit)
    with pytest.raises(
        pickles.Budget.Exceeded,
        match=r"^the objects rebuilt from its 1000 bytes of pickle would take more than "
        r"67140864 bytes \(32 a byte of pickle plus 64 MiB\)$",
    ) as info:
        budget.charge(1)
    back = pickle.loads(pickle.dumps(info.value))
    assert str(back) == str(info.value)


def test_real_files_stay_well_within_the_budget(tmp_path: Path) -> None:
    """What real producers write rebuilds 2 to 15 bytes a byte of pickle (measured:
    torch.save(model) of many small modules is the most); the budget allows 32."""
    from cudnn_rnn.io.torch import pickled as torch_pickle

    model = torch.nn.Sequential(*[torch.nn.ReLU() for _ in range(300)], torch.nn.LSTM(2, 3))
    files_ = {"model.pt": model, "state.pt": {"state_dict": model.state_dict(), "epoch": 3}}
    for name, obj in files_.items():
        for new in (True, False):
            path = tmp_path / f"{new}-{name}"
            torch.save(obj, path, _use_new_zipfile_serialization=new)
            with (
                monkeypatched_budget() as budgets,
                torch_pickle.open_pickled(path, files.sniff(path)),
            ):
                pass
            (budget,) = budgets
            assert budget.spent < 16 * budget.pickled, (path.name, budget.spent)


@contextlib.contextmanager
def monkeypatched_budget() -> Iterator[list[pickles.Budget]]:
    """Every Budget made in the block."""
    made: list[pickles.Budget] = []
    original = pickles.Budget.__init__

    def init(self: pickles.Budget) -> None:
        original(self)
        made.append(self)

    pickles.Budget.__init__ = init  # type: ignore[method-assign]
    try:
        yield made
    finally:
        pickles.Budget.__init__ = original  # type: ignore[method-assign]


# -- what older producers wrote --------------------------------------------------------------------


class _Torch10Pickler(pickle.Pickler):
    """pickle's Pickler writing a tensor as torch 1.0 did: ``_rebuild_tensor_v2(storage, offset,
    size, stride, requires_grad, backward_hooks)`` with the tensor's ``_backward_hooks`` as they
    were, None where it has none (torch 1.1 on writes an empty OrderedDict). torch.save's legacy
    writer subclasses it and adds its persistent ids (the storages), as it did in 2019."""

    def reducer_override(self, obj: object) -> object:
        if not isinstance(obj, torch.Tensor) or type(obj) is not torch.Tensor:
            return NotImplemented
        args = (obj._typed_storage(), obj.storage_offset(), tuple(obj.size()), obj.stride())
        return torch._utils._rebuild_tensor_v2, (*args, obj.requires_grad, None)


class _Torch10:
    """What torch.save takes as ``pickle_module``."""

    Pickler = _Torch10Pickler
    dump = staticmethod(pickle.dump)


def _chemnet_like() -> tuple[list[object], list[torch.nn.LSTM]]:
    """The layout of fcd_torch's ChemNet_v0.13_pretrained.pt (2019, a legacy torch.save file): a
    list of (layer name, (state_dict, constructor kwargs, options)), two Conv1d then two
    nn.LSTM(batch_first=True), the LSTMs at [2][1][0] and [3][1][0]; smaller, float64."""
    torch.manual_seed(11)
    convs = [torch.nn.Conv1d(5, 4, 3, bias=False, dtype=torch.float64) for _ in range(2)]
    lstms = [
        torch.nn.LSTM(4, 6, batch_first=True, dtype=torch.float64),
        torch.nn.LSTM(6, 3, batch_first=True, dtype=torch.float64),
    ]
    conv_kwargs = {"in_channels": 5, "out_channels": 4, "kernel_size": 3, "dilation": (1,)}
    obj: list[object] = [
        ("Conv1d", (c.state_dict(), conv_kwargs, {"activation": "selu", "padding": "same"}))
        for c in convs
    ]
    obj += [
        ("LSTM", (m.state_dict(), {"input_size": m.input_size, "hidden_size": m.hidden_size,
                                   "batch_first": True}, {"reverse": True, "last": i == 1}))
        for i, m in enumerate(lstms)
    ]  # fmt: skip
    return obj, lstms


def _assert_computes_as(layer: torch.nn.Module, module: torch.nn.LSTM) -> None:
    """Our (time-major) layer and the torch.nn module on the same input: the same outputs and
    final states."""
    x = torch.rand(5, 2, module.input_size, generator=torch.Generator().manual_seed(3),
                   dtype=torch.float64) * 2 - 1  # fmt: skip
    ours, (h, c) = layer(x)
    with torch.no_grad():
        theirs, (h2, c2) = module(x.transpose(0, 1) if module.batch_first else x)
    theirs = theirs.transpose(0, 1) if module.batch_first else theirs
    for a, b in ((ours, theirs), (h, h2), (c, c2)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


def test_a_legacy_file_of_torch_1_0_is_read_at_any_depth(tmp_path: Path) -> None:
    """torch 1.0 pickled each tensor's ``_backward_hooks`` as they were: None, which the reader
    took for another kind of tensor, so fcd_torch's ChemNet file (legacy, torch 1.0) listed no
    RNN while the same nesting saved by today's torch (zip, legacy or a plain pickle) did."""
    obj, lstms = _chemnet_like()
    path = tmp_path / "chemnet.pt"
    torch.save(obj, path, pickle_module=_Torch10, _use_new_zipfile_serialization=False)
    assert files.sniff(path) == files.TORCH_PICKLE
    # the shape of the real file: hooks None, as torch itself reads them back
    again = torch.load(path, weights_only=False)
    assert again[2][1][0]["weight_ih_l0"]._backward_hooks is None
    ends = pickles.ends(path.read_bytes(), count=5)
    hooks = [
        (op.name, next_op.name)
        for (op, _, _), (next_op, _, _) in itertools.pairwise(
            pickletools.genops(path.read_bytes()[ends[2] : ends[3]])
        )
        if next_op.name == "TUPLE" and op.name in ("NONE", "REDUCE")
    ]
    assert hooks and all(name == "NONE" for name, _ in hooks), hooks
    found = torch_file.find_rnns(path)
    assert [(f.name, f.mode) for f in found] == [("[2][1][0]", "lstm"), ("[3][1][0]", "lstm")]
    for name, module in zip(("[2][1][0]", "[3][1][0]"), lstms):
        _assert_computes_as(cudnn_rnn.load(path, name), module)
    # today's torch.save of the same nesting: found as before
    for new in (True, False):
        today = tmp_path / f"today-{new}.pt"
        torch.save(obj, today, _use_new_zipfile_serialization=new)
        assert [f.name for f in torch_file.find_rnns(today)] == ["[2][1][0]", "[3][1][0]"]


def _torchscript_1_4(module: torch.nn.Module, path: Path) -> int:
    """A real torch.jit.save archive of ``module`` whose data.pkl names its storages as torch 1.3
    to 1.5's TorchScript writer did (torch/csrc/jit/pickler.cpp, ``pushStorageOfTensor``):
    ``MARK "storage" torch.FloatStorage KEY LOCATION NUMEL NONE TUPLE BINPERSID``, a sixth field
    (``view_metadata``, always None) that torch 1.6 dropped, everything else as written today
    (keys, locations, numels, the storages' members and the module's code). The rewrite inserts
    that one NONE before each persistent id's TUPLE; memo indices do not move (nothing is
    memoized between them) and protocol 2 has no frames. torch 2.x's reader takes the first five
    fields and ignores the sixth, so torch.jit.load reads the archive. Returns the ids rewritten."""
    buffer = io.BytesIO()
    with pytest.warns(DeprecationWarning):
        torch.jit.save(torch.jit.script(module), buffer)
    with zipfile.ZipFile(io.BytesIO(buffer.getvalue())) as z:
        members = {info.filename: z.read(info) for info in z.infolist()}
    name = next(n for n in members if n.endswith("/data.pkl"))
    data = members[name]
    ops = list(pickletools.genops(data))
    cuts = [pos for (op, _, pos), (after, _, _) in itertools.pairwise(ops)
            if op.name == "TUPLE" and after.name == "BINPERSID"]  # fmt: skip
    pieces, last = [], 0
    for cut in cuts:
        pieces += [data[last:cut], b"N"]
        last = cut
    members[name] = b"".join([*pieces, data[last:]])
    with zipfile.ZipFile(path, "w") as z:  # stored, as torch writes it
        for member, content in members.items():
            z.writestr(member, content)
    return len(cuts)


def test_a_torchscript_archive_of_torch_1_4_is_read(tmp_path: Path) -> None:
    torch.manual_seed(5)
    module = torch.nn.LSTM(3, 4, num_layers=2, bidirectional=True, dtype=torch.float64)
    path = tmp_path / "old.pt"
    assert _torchscript_1_4(module, path) == 16  # one storage a tensor
    assert files.sniff(path) == files.TORCHSCRIPT
    with pytest.warns(DeprecationWarning):
        loaded = torch.jit.load(str(path))  # torch 2.x reads it, the same tensors
    theirs = loaded.state_dict()
    assert all(torch.equal(theirs[k], v) for k, v in module.state_dict().items())
    _assert_computes_as(cudnn_rnn.load(path), module)


@pytest.mark.parametrize(
    ("sixth", "says"),
    [
        (b"K\x00", r"\('storage', torch\.FloatStorage, '0', 'cpu', 48, 0\)"),
        (b"NN", r"\('storage', torch\.FloatStorage, '0', 'cpu', 48, None, \.\.\.\)"),
    ],
)
def test_an_old_persistent_id_is_checked_as_strictly(
    sixth: bytes, says: str, tmp_path: Path
) -> None:
    """Only None may be the sixth field (a view of a storage was never written by TorchScript),
    and nothing may follow it."""
    path = tmp_path / "old.pt"
    _torchscript_1_4(torch.nn.LSTM(3, 4), path)
    with zipfile.ZipFile(path) as z:
        members = {info.filename: z.read(info) for info in z.infolist()}
    name = next(n for n in members if n.endswith("/data.pkl"))
    assert b"K0Nt" in members[name]  # storage 0's numel (48: BININT1 0x30), its sixth field
    members[name] = members[name].replace(b"K0Nt", b"K0" + sixth + b"t", 1)
    with zipfile.ZipFile(path, "w") as z:
        for member, content in members.items():
            z.writestr(member, content)
    with pytest.raises(TorchFileError, match=rf"data\.pkl asks for the persistent id {says}"):
        torch_file.find_rnns(path)
