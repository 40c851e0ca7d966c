"""The one zip reader (cudnn_rnn.io.files.zip_archive): every zip-based format (torch.save,
TorchScript, .npz, sniffing) is read through it, a hostile archive is refused before anything is
inflated with one ZipError naming every problem, through every entry point, and archives written
by the real producers (torch.save, torch.jit.save, np.savez, zip64) still load."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from cudnn_rnn import convert
from cudnn_rnn.io import files, npz
from cudnn_rnn.io.files import zip_reader
from cudnn_rnn.io.torch import file as torch_file
from cudnn_rnn.io.torch import torchscript
from tests.support import readers, zips
from tests.support.paths import ROOT

# -- the hostile archives of issue 37 -------------------------------------------------------------

_BOMB = 256 << 20  # the deflated storage: 256 MiB of zeros, about 256 KB in the file


def _torch_members() -> list[zips.Member]:
    """The members of a real torch.save archive of one tensor ("w")."""
    buffer = io.BytesIO()
    torch.save({"w": torch.zeros(4)}, buffer)
    return zips.members_of(buffer.getvalue())


@pytest.fixture(scope="module")
def bomb_storage() -> zips.Member:
    return zips.deflated("archive/data/0", zips.zeros(_BOMB))


def _replace(members: list[zips.Member], member: zips.Member) -> list[zips.Member]:
    return [member if m.name == member.name else m for m in members]


def _duplicated_storage(bomb: zips.Member) -> bytes:
    """The issue's 262 KB torch.save archive: its storage deflated (256 MiB of zeros), and three
    more central directory entries naming other storages that point at the same bytes."""

    def entries(placed: list[zips.Member]) -> list[zips.Member]:
        (storage,) = [m for m in placed if m.name == bomb.name]
        return placed + [
            zips.Member(f"archive/data/{i}", storage.data, storage.size, storage.crc,
                        storage.method, storage.offset)
            for i in (1, 2, 3)
        ]  # fmt: skip

    return zips.archive(_replace(_torch_members(), bomb), entries)


def _overlapping() -> bytes:
    """A member whose bytes hold a whole second member (local header and data), which the
    central directory lists too: the second is read again as part of the first."""
    inner = zips.stored("archive/data/9", b"xyz")
    outer = zips.stored("archive/data/8", zips.local_header(inner) + inner.data + b"tail")

    def entries(placed: list[zips.Member]) -> list[zips.Member]:
        (host,) = [m for m in placed if m.name == outer.name]
        start = host.offset + len(zips.local_header(host))
        return [*placed, zips.Member(inner.name, inner.data, 3, inner.crc, offset=start)]

    return zips.archive([*_torch_members(), outer], entries)


def _declared_past_the_file() -> bytes:
    def entries(placed: list[zips.Member]) -> list[zips.Member]:
        last = placed[-1]
        huge = zips.Member(last.name, b"\0" * (1 << 20), 1 << 20, 0, offset=last.offset)
        return [*placed[:-1], huge]

    return zips.archive(_torch_members(), entries)


def _duplicate_names() -> bytes:
    members = _torch_members()
    return zips.archive([*members, zips.stored(members[-1].name, b"again")])


def _into_the_directory() -> bytes:
    """An entry whose declared data reaches into the central directory."""

    def entries(placed: list[zips.Member]) -> list[zips.Member]:
        last = placed[-1]
        longer = zips.Member(last.name, last.data + bytes(60), len(last.data) + 60, last.crc,
                             offset=last.offset)  # fmt: skip
        return [*placed[:-1], longer]

    return zips.archive(_torch_members(), entries)


def _too_many_entries() -> bytes:
    """An end record that claims 300,000 entries (more than 200,000 are never listed)."""
    return zips.archive(_torch_members(), zip64=True, count=300_000)


def _zip64_disagreeing() -> bytes:
    """A zip64 end record whose entry count is not its end record's."""
    data = bytearray(zips.archive(_torch_members(), zip64=True))
    end = len(data) - 22
    data[end + 8 : end + 12] = (3).to_bytes(2, "little") * 2  # 3 entries, not 0xFFFF
    return bytes(data)


#: name -> (the archive, what its ZipError says).
HOSTILE: dict[str, tuple[Callable[[zips.Member], bytes], str]] = {
    "one storage read four times": (
        _duplicated_storage,
        r"members 'archive/data/0' \(bytes \d+-\d+\) and 'archive/data/[123]' \(bytes \d+-\d+\) "
        r"overlap",
    ),
    "a huge compression ratio": (
        lambda bomb: zips.archive(_replace(_torch_members(), bomb)),
        r"member 'archive/data/0' inflates \d+ bytes to 268435456, a ratio of 10\d\d:1; at most "
        r"100:1 beyond the first 64 MiB is read",
    ),
    "overlapping entries": (
        lambda bomb: _overlapping(),
        r"members 'archive/data/8' \(bytes \d+-\d+\) and 'archive/data/9' \(bytes \d+-\d+\) "
        r"overlap",
    ),
    "declared sizes past the file": (
        lambda bomb: _declared_past_the_file(),
        r"member 'archive/.data/serialization_id' has its 1048576 bytes from byte \d+ run into "
        r"the central directory",
    ),
    "a name twice": (lambda bomb: _duplicate_names(), r"the name '.*' is listed twice"),
    "data into the central directory": (
        lambda bomb: _into_the_directory(),
        r"has its \d+ bytes from byte \d+ run into the central directory at byte \d+",
    ),
    "too many entries": (
        lambda bomb: _too_many_entries(),
        r"it lists 300000 entries in \d+ bytes; at most 200000 entries in 64 MiB are read",
    ),
    "zip64 disagreeing": (
        lambda bomb: _zip64_disagreeing(),
        r"its end record says entry count 3, its zip64 end record \d+",
    ),
}


#: entry point -> (how it is called, the kind of archive its message names).
ENTRY_POINTS: dict[str, tuple[Callable[[Path], object], str]] = {
    "files.sniff": (files.sniff, "zip archive"),
    "convert.find_rnns": (convert.find_rnns, "zip archive"),
    "torch_file.find_rnns": (torch_file.find_rnns, "zip archive"),
    "torch_file.read_state": (torch_file.read_state, r"torch file \(zip archive\)"),
    "torchscript.open_archive": (readers.open_archive, r"TorchScript archive \(torch.jit.save\)"),
    "npz.open_npz": (readers.open_npz, r"\.npz archive \(np.savez\)"),
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_archives_are_refused_by_every_entry_point(
    case: str, entry: str, bomb_storage: zips.Member, tmp_path: Path
) -> None:
    make, says = HOSTILE[case]
    call, what = ENTRY_POINTS[entry]
    path = tmp_path / "hostile.pt"
    path.write_bytes(make(bomb_storage))
    with pytest.raises(files.ZipError, match=rf"hostile\.pt: not a readable {what}: .*{says}"):
        call(path)


def test_the_issues_archive_is_small_and_says_every_problem(
    bomb_storage: zips.Member, tmp_path: Path
) -> None:
    data = _duplicated_storage(bomb_storage)
    assert len(data) < 300_000  # 262 KB in the issue
    path = tmp_path / "bomb.pt"
    path.write_bytes(data)
    with pytest.raises(files.ZipError) as info:
        files.sniff(path)
    err = info.value
    # 3 overlaps (shown first), 4 ratios, 3 local headers of another name, the total
    assert err.count == len(err.problems) == 11
    assert all("overlap" in p for p in err.problems[:3])
    assert sum("a ratio of 1028:1" in p for p in err.problems) == 4
    assert sum("which names another member" in p for p in err.problems) == 3
    assert "its 4 deflated members inflate" in err.problems[-1]
    assert str(err).endswith(
        "and 7 more. The archive is cut, corrupt or made to exhaust its reader; it is not read."
    )


def test_nothing_is_inflated_on_the_way_to_the_refusal(
    bomb_storage: zips.Member, tmp_path: Path
) -> None:
    """Each entry point in a fresh process: its peak memory grows by less than 64 MiB (the
    storage alone inflates to 256 MiB, the issue's listing to 1 GiB)."""
    (tmp_path / "bomb.pt").write_bytes(_duplicated_storage(bomb_storage))
    (tmp_path / "ratio.pt").write_bytes(zips.archive(_replace(_torch_members(), bomb_storage)))
    script = (
        "import json, resource, sys\n"
        "from cudnn_rnn import convert\n"
        "from cudnn_rnn.io import files\n"
        "from cudnn_rnn.io.torch import file as torch_file\n"
        "def peak(): return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10\n"
        "before, out = peak(), {}\n"
        "for name in sys.argv[1:]:\n"
        "    for call in (files.sniff, convert.find_rnns, torch_file.read_state):\n"
        "        try:\n"
        "            call(name)\n"
        "        except files.ZipError as err:\n"
        "            out[f'{call.__name__} {name}'] = err.count\n"
        "print(json.dumps({'grew': peak() - before, 'refused': out}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "bomb.pt"), str(tmp_path / "ratio.pt")],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        cwd=ROOT,
    )
    report = json.loads(result.stdout.splitlines()[-1])
    assert len(report["refused"]) == 6, report
    assert report["grew"] < 64 << 20, report


def test_a_bomb_under_the_grace_still_reads_only_its_declared_size(tmp_path: Path) -> None:
    """A member that inflates past what it declares is cut at its declared size plus one byte
    and refused; one that inflates to less is refused too."""
    real = zips.deflated("x.npy", zips.zeros(1 << 20))
    for size, says in (
        (1000, "inflates to more than the 1000 bytes it declares"),
        ((1 << 20) + 8, "inflates to 1048576 bytes, not the 1048584 declared"),
    ):
        path = tmp_path / "lying.zip"
        path.write_bytes(zips.archive([zips.Member("x.npy", real.data, size, real.crc, 8)]))
        with files.open_zip(path) as archive:
            with pytest.raises(files.ZipError, match=rf"member 'x.npy' {says}"):
                archive.read(archive.entry("x.npy"))


def test_a_crc_mismatch_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "arrays.npz"
    np.savez(path, w=np.arange(6, dtype=np.float32))
    data = bytearray(path.read_bytes())
    data[data.index(b"\x00\x00\x80\x3f")] ^= 1  # a byte of the array (1.0)
    path.write_bytes(bytes(data))
    with npz.open_npz(path) as arrays:
        with pytest.raises(files.ZipError, match=r"member 'w.npy' fails its CRC check"):
            arrays.read(["w"])


def test_too_many_entries_are_refused_before_they_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "many.npz"
    np.savez(path, *[np.zeros(1) for _ in range(11)])
    assert files.sniff(path) == files.NPZ
    monkeypatch.setattr(zip_reader, "MAX_ZIP_ENTRIES", 10)  # where the reader looks it up
    with pytest.raises(files.ZipError, match=r"it lists 11 entries in \d+ bytes; at most 10"):
        files.sniff(path)


def test_an_encrypted_or_bzip2_member_is_refused(tmp_path: Path) -> None:
    members = _torch_members()
    for method, flags, says in ((12, 0, "is compressed with method 12"), (0, 1, "is encrypted")):
        path = tmp_path / "odd.zip"
        data = bytearray(zips.archive(members))
        cd = data.index(b"PK\x01\x02")
        data[cd + 8 : cd + 12] = flags.to_bytes(2, "little") + method.to_bytes(2, "little")
        path.write_bytes(bytes(data))
        with pytest.raises(files.ZipError, match=rf"member 'archive/data.pkl' {says}; only"):
            files.sniff(path)


# -- what other readers see ------------------------------------------------------------------------


def test_the_view_serves_what_was_checked_even_if_the_file_changes(tmp_path: Path) -> None:
    """torch.load reads the archive through ZipArchive.view(): the central directory, the end
    record (its comment left out) and the pinned members come from the bytes that were checked."""
    path = tmp_path / "state.pt"
    torch.save({"w": torch.arange(4.0)}, path)
    comment = b"PK\x05\x06 a comment with a fake end record in it"
    with zipfile.ZipFile(path, "a") as z:
        z.comment = comment
    written = path.read_bytes()
    checked = written[: -len(comment) - 2] + b"\0\0"  # the comment's length: 0
    with files.open_regular(path) as f:
        archive = files.zip_archive(f)
        pickled = archive.read(archive.entry("state/data.pkl"), pin=True)
        with path.open("r+b") as w:  # the file is changed after it was checked
            w.seek(archive.entry("state/data.pkl").data)
            w.write(b"\x00" * len(pickled))
            w.seek(len(written) - 100)
            w.write(b"\xff" * 100)
        seen = archive.view().read()
    assert seen == checked  # the comment is gone, and so are the changes
    assert torch.equal(torch.load(io.BytesIO(seen), weights_only=True)["w"], torch.arange(4.0))


def test_head_inflates_only_what_is_asked(tmp_path: Path) -> None:
    path = tmp_path / "big.npz"
    with path.open("wb") as f:
        np.savez_compressed(f, w=np.zeros(1 << 20, np.float32))
    with files.open_zip(path) as archive:
        entry = archive.entry("w.npy")
        assert entry.method == files.DEFLATED and entry.size > 4 << 20
        head = archive.head(entry, 128)
        assert head.startswith(b"\x93NUMPY") and len(head) == 128
        assert archive.head(entry, 1 << 30) == bytes(archive.read(entry))


# -- real archives still load ----------------------------------------------------------------------


def test_torch_save_files_load(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.LSTM(3, 4, 2), torch.nn.Linear(4, 2))
    big = torch.randn(3_000_000)  # 12 MB, stored
    torch.save({"model": model.state_dict(), "big": big, "step": 3}, tmp_path / "ckpt.pt")
    with files.open_zip(tmp_path / "ckpt.pt") as archive:
        names = {n.split("/", 1)[1] for n in archive.names()}
        assert {"data.pkl", "byteorder", "version", ".data/serialization_id"} <= names
        assert all(e.method == files.STORED for e in archive.entries)
    (found,) = torch_file.find_rnns(tmp_path / "ckpt.pt")
    assert (found.name, found.num_layers) == ("model.0", 2)
    state = torch_file.read_state(_plain(tmp_path, model[0].state_dict()))
    assert all(torch.equal(state[k], v) for k, v in model[0].state_dict().items())
    assert torch.equal(torch_file._torch_load(str(tmp_path / "ckpt.pt"))["big"], big)


def _plain(tmp_path: Path, state: dict[str, torch.Tensor]) -> Path:
    path = tmp_path / "plain.pt"
    torch.save(state, path)
    return path


def test_a_zip64_torch_archive_loads(tmp_path: Path) -> None:
    """torch.save writes zip64 records past 4 GiB; the same archive rebuilt with zip64 extra
    fields and end records reads the same, by us, by zipfile and by torch."""
    module = torch.nn.GRU(3, 2)
    buffer = io.BytesIO()
    torch.save(module.state_dict(), buffer)
    data = zips.archive(zips.members_of(buffer.getvalue()), zip64=True)
    path = tmp_path / "zip64.pt"
    path.write_bytes(data)
    with zipfile.ZipFile(path) as z:
        assert z.infolist()[0].extra.startswith(b"\x01\x00")  # a zip64 extra field
    assert files.sniff(path) == files.TORCH_ZIP
    state = torch_file.read_state(path)
    assert all(torch.equal(state[k], v) for k, v in module.state_dict().items())


def test_scripted_modules_and_npz_files_load(tmp_path: Path) -> None:
    torch.manual_seed(1)
    module = torch.nn.LSTM(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.script(module), str(tmp_path / "scripted.pt"))
    with torchscript.open_archive(tmp_path / "scripted.pt") as archive:
        got = archive.read(list(module.state_dict()))
    assert all(torch.equal(got[k], v) for k, v in module.state_dict().items())
    arrays = {k: v.numpy() for k, v in module.state_dict().items()}
    np.savez(tmp_path / "plain.npz", **arrays)  # zip64 local headers (force_zip64)
    np.savez_compressed(tmp_path / "deflated.npz", **arrays)
    for name in ("plain.npz", "deflated.npz"):
        with npz.open_npz(tmp_path / name) as opened:
            back = opened.read([k for k in arrays])
        assert all(np.array_equal(back[k], v) for k, v in arrays.items())


def test_legacy_pickles_load_through_the_same_check(tmp_path: Path) -> None:
    module = torch.nn.GRU(3, 2, bidirectional=True)
    path = tmp_path / "legacy.pt"
    torch.save(module.state_dict(), path, _use_new_zipfile_serialization=False)
    state = torch_file.read_state(path)
    assert all(torch.equal(state[k], v) for k, v in module.state_dict().items())


def test_every_zip_reader_is_this_one() -> None:
    """No reader of the package parses a central directory or opens a zipfile of its own (the
    zip reader itself, and sniffing, which knows a zip archive by its first signature, aside)."""
    src = ROOT / "src" / "cudnn_rnn"
    mine = {"io/files/zip_reader.py", "io/files/sniffing.py"}
    own = [
        str(p.relative_to(src))
        for p in src.rglob("*.py")
        if p.relative_to(src).as_posix() not in mine and any(
            s in p.read_text(encoding="utf-8")
            for s in ("import zipfile", "PK\\x01\\x02", "PK\\x05\\x06")
        )
    ]  # fmt: skip
    assert not own, own
