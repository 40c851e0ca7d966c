"""TF1 tensor-bundle checkpoints without TensorFlow: TF's own files, exact bytes, hostile input.

The fixtures in ``fixtures/tf1/`` were written by real TensorFlow (``make_tf1_fixtures.py``, which
also records what TensorFlow read from a file our writer made); TensorFlow is not needed here.
They are evidence of TF's bundle format (bytes, dtypes, blocks, partitions); the names and values
in the model files were chosen by that script (see test_checkpoint_tf1.py).
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cudnn_rnn.io.tf1 import protos
from cudnn_rnn.io.tf1 import table as tf1_table
from cudnn_rnn.io.tf1 import writer as tf1_writer
from cudnn_rnn.io.tf1.bundle import (
    SUPPORTED_DTYPES,
    TF1BundleError,
    crc32c,
    masked_crc32c,
    read_bundle,
    read_bundle_index,
    write_bundle,
)
from cudnn_rnn.io.tf1.protobuf_wire import bytes_field, encode_varint
from tests.support.paths import FIXTURES

FIXTURES = FIXTURES / "tf1"
TF_FIXTURES = [
    "cudnn_lstm",
    "cudnn_gru_bidi",
    "cudnn_rnn_tanh",
    "cudnn_rnn_relu_bidi",
    "dtypes",
    "partitioned",
]
DATA = ".data-00000-of-00001"


def expected_of(name: str) -> tuple[dict[str, np.ndarray], set[str]]:
    """What TensorFlow read from fixture ``name`` (bfloat16 as uint16 bits) and the bf16 names."""
    with np.load(FIXTURES / f"{name}.npz", allow_pickle=False) as npz:
        arrays = {key: npz[key] for key in npz.files}
    bfloat16 = {str(n) for n in arrays.pop("__bfloat16__")}
    return arrays, bfloat16


def assert_same(got: np.ndarray, want: np.ndarray, name: str = "") -> None:
    """Equal dtype, shape and bytes (so NaN payloads and -0.0 count)."""
    assert got.dtype == want.dtype, (name, got.dtype, want.dtype)
    assert got.shape == want.shape, (name, got.shape, want.shape)
    assert got.tobytes() == want.tobytes(), name


# ---------------------------------------------------------------------------------------------
# files written by real TensorFlow


@pytest.mark.parametrize("name", TF_FIXTURES)
def test_reads_tensorflow_fixture_exactly(name: str) -> None:
    prefix = str(FIXTURES / f"{name}.ckpt")
    expected, bfloat16 = expected_of(name)
    index = read_bundle_index(prefix)
    assert list(index) == sorted(expected)
    readable = [n for n, e in index.items() if e.readable]
    got = read_bundle(prefix, readable, bfloat16="bits")
    widened = read_bundle(prefix, readable)
    for n in readable:
        assert index[n].shape == expected[n].shape
        assert_same(got[n], expected[n], n)
        if n in bfloat16:
            assert index[n].dtype == "bfloat16"
            want = (expected[n].astype(np.uint32) << 16).view(np.float32)
            assert_same(widened[n], want, n)
        else:
            assert index[n].dtype == expected[n].dtype.name
            assert_same(widened[n], expected[n], n)


def test_model_fixture_has_canonical_and_unrelated_names() -> None:
    index = read_bundle_index(FIXTURES / "cudnn_lstm.ckpt")
    cell = "model/rnn/multi_rnn_cell/cell_{}/cudnn_compatible_lstm_cell/{}"
    assert index[cell.format(0, "kernel")].shape == (5, 12)
    assert index[cell.format(1, "kernel")].shape == (6, 12)
    assert index[cell.format(1, "bias")].shape == (12,)
    assert index["model/cudnn_lstm/opaque_kernel"].shape == (180,)
    assert index["global_step"].dtype == "int64" and index["global_step"].shape == ()
    for unrelated in ("model/cudnn_lstm/opaque_kernel/Adam_1", cell.format(0, "kernel/Adam")):
        assert unrelated in index
    gru = read_bundle_index(FIXTURES / "cudnn_gru_bidi.ckpt")
    bw = "stack_bidirectional_rnn/cell_0/bidirectional_rnn/bw/cudnn_compatible_gru_cell/"
    assert gru[bw + "gates/kernel"].shape == (5, 6)
    assert gru[bw + "candidate/input_projection/kernel"].shape == (2, 3)
    assert gru[bw + "candidate/hidden_projection/bias"].shape == (3,)


def test_partitioned_variable_is_listed_but_refused() -> None:
    prefix = FIXTURES / "partitioned.ckpt"
    index = read_bundle_index(prefix)
    assert list(index) == ["part", "plain"]  # the slices' own keys are not listed
    assert index["part"].num_slices == 2 and not index["part"].readable
    with pytest.raises(TF1BundleError, match=r"cannot read 'part' \(a partitioned variable in 2"):
        read_bundle(prefix)
    assert list(read_bundle(prefix, ["plain"])) == ["plain"]


@pytest.mark.parametrize("name", [n for n in TF_FIXTURES if n != "partitioned"])
def test_writer_reproduces_tensorflow_bytes(name: str, tmp_path: Path) -> None:
    prefix = str(FIXTURES / f"{name}.ckpt")
    _, bfloat16 = expected_of(name)
    write_bundle(tmp_path / "copy", read_bundle(prefix, bfloat16="bits"), bfloat16=bfloat16)
    assert (tmp_path / "copy.index").read_bytes() == Path(prefix + ".index").read_bytes()
    assert (tmp_path / f"copy{DATA}").read_bytes() == Path(prefix + DATA).read_bytes()


def json_arrays() -> tuple[dict[str, np.ndarray], list[str]]:
    """The tensors TensorFlow read from ``ours.ckpt``, rebuilt from its JSON report."""
    report = json.loads((FIXTURES / "ours_read_by_tf.json").read_text())
    arrays = {}
    for name, item in report["tensors"].items():
        dtype = "float32" if item["dtype"] == "bfloat16" else item["dtype"]
        values = np.array(item["values"], dtype=np.float64 if "complex" in dtype else dtype)
        if "complex" in dtype:
            values = (values[..., 0] + 1j * values[..., 1]).astype(dtype)
        arrays[name] = values.reshape(item["shape"])
    return arrays, report["bfloat16"]


def test_our_file_as_tensorflow_read_it(tmp_path: Path) -> None:
    """ours.ckpt (our writer) as TF read it; rewriting TF's view gives the same bytes again."""
    want, bfloat16 = json_arrays()
    got = read_bundle(FIXTURES / "ours.ckpt")
    assert list(got) == sorted(want)
    for name, array in want.items():
        assert_same(got[name], array, name)
    assert {read_bundle_index(FIXTURES / "ours.ckpt")[n].dtype for n in bfloat16} == {"bfloat16"}
    write_bundle(tmp_path / "again", want, bfloat16=bfloat16)
    assert (tmp_path / "again.index").read_bytes() == (FIXTURES / "ours.ckpt.index").read_bytes()
    assert (tmp_path / f"again{DATA}").read_bytes() == (FIXTURES / f"ours.ckpt{DATA}").read_bytes()


def test_prefix_may_be_given_as_a_file_of_the_bundle() -> None:
    want = read_bundle(FIXTURES / "cudnn_rnn_tanh.ckpt")
    for suffix in (".index", DATA):
        got = read_bundle(str(FIXTURES / "cudnn_rnn_tanh.ckpt") + suffix)
        assert got.keys() == want.keys()


# ---------------------------------------------------------------------------------------------
# round trips


def sample(dtype: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.startswith(("int", "uint")):
        info = np.iinfo(dtype)
        values = rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
        return np.asarray(values, dtype=dtype)
    if dtype.startswith("complex"):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    values = rng.standard_normal(shape).astype(dtype)
    special = np.array([np.nan, -0.0, np.inf, -np.inf], dtype=dtype)
    flat = values.reshape(-1)
    flat[: min(4, flat.size)] = special[: min(4, flat.size)]
    return values


NUMPY_DTYPES = [d for d in SUPPORTED_DTYPES if d != "bfloat16"]
SHAPES = [(), (0,), (2, 0, 3), (1,), (3, 4), (2, 1, 3)]


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_roundtrip_every_dtype_and_shape(dtype: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(len(dtype))
    tensors = {f"t/{i}": sample(dtype, shape, rng) for i, shape in enumerate(SHAPES)}
    write_bundle(tmp_path / "x.ckpt", tensors)
    index = read_bundle_index(tmp_path / "x.ckpt")
    got = read_bundle(tmp_path / "x.ckpt")
    for name, array in tensors.items():
        assert index[name].dtype == dtype and index[name].shape == array.shape
        assert_same(got[name], array, name)
        assert got[name].flags.writeable and got[name].flags.c_contiguous


def test_roundtrip_big_endian_strided_and_scalar_inputs(tmp_path: Path) -> None:
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    tensors = {
        "big_endian": base.astype(">i4"),
        "strided": base[::2, ::3],
        "transposed": base.T,
        "numpy_scalar": np.float32(2.5),
    }
    write_bundle(tmp_path / "x", tensors)
    got = read_bundle(tmp_path / "x")
    assert_same(got["big_endian"], base.astype(np.int32))
    assert_same(got["strided"], np.ascontiguousarray(base[::2, ::3]))
    assert_same(got["transposed"], np.ascontiguousarray(base.T))
    assert_same(got["numpy_scalar"], np.array(2.5, dtype=np.float32))


def test_bfloat16_as_bits_float32_or_ml_dtypes(tmp_path: Path) -> None:
    bits = np.array([[0x3F80, 0xC020], [0x7FC0, 0x8001]], dtype=np.uint16)
    exact = (bits.astype(np.uint32) << 16).view(np.float32)
    write_bundle(tmp_path / "a", {"w": bits}, bfloat16=["w"])
    write_bundle(tmp_path / "b", {"w": exact}, bfloat16=["w"])
    assert (tmp_path / "a.index").read_bytes() == (tmp_path / "b.index").read_bytes()
    assert read_bundle_index(tmp_path / "a")["w"].dtype == "bfloat16"
    assert_same(read_bundle(tmp_path / "a", bfloat16="bits")["w"], bits)
    assert_same(read_bundle(tmp_path / "a")["w"], exact)
    with pytest.raises(ValueError, match=r"tensor 'w' has float32 values that bfloat16 cannot"):
        write_bundle(tmp_path / "c", {"w": np.array([0.1], dtype=np.float32)}, bfloat16=["w"])
    with pytest.raises(TypeError, match=r"bfloat16 tensor 'w' must be given as uint16 bit"):
        write_bundle(tmp_path / "c", {"w": np.array([1.0])}, bfloat16=["w"])
    with pytest.raises(ValueError, match=r"bfloat16 names \['v'\] are not among the tensors"):
        write_bundle(tmp_path / "c", {"w": bits}, bfloat16=["v"])
    ml_dtypes = pytest.importorskip("ml_dtypes")
    write_bundle(tmp_path / "d", {"w": bits.view(ml_dtypes.bfloat16)})
    assert (tmp_path / "d.index").read_bytes() == (tmp_path / "a.index").read_bytes()


def test_many_blocks_and_oversized_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tf1_writer, "BLOCK_SIZE", 64)
    monkeypatch.setattr(tf1_writer, "RESTART_INTERVAL", 2)
    names = [f"layer_{i:03d}/" + "k" * (i % 7) * 30 for i in range(60)]  # some >= 2 blocks long
    tensors = {n: np.full((2,), i, dtype=np.int16) for i, n in enumerate(names)}
    write_bundle(tmp_path / "x", tensors)
    data = (tmp_path / "x.index").read_bytes()
    assert len(tf1_table.read_table(data)) == 61  # the header and 60 tensors
    footer = data[-48:]
    _, _, pos = tf1_table.read_handle(footer, 0, 40, "footer")
    offset, size, _ = tf1_table.read_handle(footer, pos, 40, "footer")
    index_block = tf1_table.read_block(data, offset, size, len(data) - 48, "index block")
    assert len(tf1_table.parse_block(index_block, "index block")) > 20  # as many data blocks
    got = read_bundle(tmp_path / "x")
    assert list(got) == sorted(names)
    for name, array in tensors.items():
        assert_same(got[name], array, name)


def test_write_is_atomic_and_respects_umask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_bundle(tmp_path / "x", {"a": np.ones(3, dtype=np.float32)})
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    umask = os.umask(0)
    os.umask(umask)
    for p in tmp_path.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o666 & ~umask
    with pytest.raises(TypeError, match=r"tensor 'b' has dtype object"):
        write_bundle(tmp_path / "x", {"a": np.zeros(3), "b": np.array([None])})

    def fail(*args: object) -> bytes:
        raise OSError("disk full")

    monkeypatch.setattr(tf1_writer, "build_table", fail)
    with pytest.raises(OSError, match="disk full"):
        write_bundle(tmp_path / "x", {"a": np.zeros(3)})
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # no temp files left
    monkeypatch.undo()
    write_bundle(tmp_path / "x", {"a": np.zeros(3)})  # an overwrite
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(before)
    assert_same(read_bundle(tmp_path / "x")["a"], np.zeros(3))


@pytest.mark.parametrize(
    ("tensors", "error", "match"),
    [
        ({"a": [1.0, 2.0]}, TypeError, r"tensor 'a' must be a numpy array, got list"),
        ({"a": np.array(["x"])}, TypeError, r"tensor 'a' has dtype <U1, which TF checkpoints"),
        ({"a": np.zeros(1, "M8[s]")}, TypeError, r"has dtype datetime64\[s\]"),
        ({"": np.zeros(1)}, ValueError, r"tensor name '' is reserved"),
        ({"\x00a": np.zeros(1)}, ValueError, r"tensor name '\\x00a' is reserved"),
        ({"\ud800": np.zeros(1)}, ValueError, r"is not valid Unicode"),
        ({3: np.zeros(1)}, TypeError, r"tensor names must be str, got int"),
    ],
)
def test_writer_rejects_bad_input(tensors: Any, error: type, match: str, tmp_path: Path) -> None:
    with pytest.raises(error, match=match):
        write_bundle(tmp_path / "x", tensors)
    assert list(tmp_path.iterdir()) == []


def test_reader_argument_errors(tmp_path: Path) -> None:
    prefix = FIXTURES / "cudnn_rnn_tanh.ckpt"
    with pytest.raises(TF1BundleError, match=r"no tensor\(s\) 'nope', 'neither' \(it holds 4\)"):
        read_bundle(prefix, ["global_step", "nope", "neither"])
    with pytest.raises(TypeError, match=r"names must be a list of names, got the string"):
        read_bundle(prefix, "global_step")
    with pytest.raises(ValueError, match=r"bfloat16 must be 'float32' or 'bits', got 'f16'"):
        read_bundle(prefix, bfloat16="f16")
    missing = tmp_path / "missing.ckpt"
    with pytest.raises(FileNotFoundError, match=re.escape(f"no index file {missing}.index")):
        read_bundle(missing)
    write_bundle(tmp_path / "x", {"a": np.zeros(2)})
    (tmp_path / f"x{DATA}").unlink()
    with pytest.raises(FileNotFoundError, match=re.escape(f"no data shard {tmp_path / 'x'}{DATA}")):
        read_bundle(tmp_path / "x")
    assert read_bundle_index(tmp_path / "x")["a"].size == 16  # the index alone is enough


# ---------------------------------------------------------------------------------------------
# crc32c


def crc32c_bitwise(data: bytes) -> int:
    """An independent oracle: the Castagnoli CRC one bit at a time."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_crc32c_known_values() -> None:
    # RFC 3720 (iSCSI) B.4 test vectors, and the usual check value.
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"") == 0
    assert crc32c(bytes(32)) == 0x8A9136AA
    assert crc32c(b"\xff" * 32) == 0x62A8AB43
    assert crc32c(bytes(range(32))) == 0x46DD794E
    assert crc32c(bytes(range(31, -1, -1))) == 0x113FDB5C
    assert masked_crc32c(b"") == 0xA282EAD8  # what TF stores for an empty tensor
    for value in (0, 1, 0xE3069283, 0xFFFFFFFF):
        masked = ((((value >> 15) | (value << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
        assert tf1_table.unmask_crc32c(masked) == value


@pytest.mark.parametrize("size", [1, 1000, (1 << 20) - 1, 1 << 20, (2 << 20) + 5])
def test_crc32c_of_any_buffer_and_continued(size: int) -> None:
    """google-crc32c takes only bytes: other buffers (tensors read into a bytearray, NumPy
    arrays) go through in slices; the result is the same, whatever the buffer and its length."""
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    want = crc32c(data)
    if size <= 1000:
        assert want == crc32c_bitwise(data)
    assert crc32c(bytearray(data)) == want
    assert crc32c(memoryview(data)) == want
    assert crc32c(np.frombuffer(data, dtype=np.uint8).reshape(-1, 1).data) == want
    cut = size // 3
    assert crc32c(data[cut:], crc32c(data[:cut])) == want
    assert crc32c(bytearray(data[cut:]), crc32c(data[:cut])) == want


# ---------------------------------------------------------------------------------------------
# corrupt, truncated and hostile files


def small_bundle(tmp_path: Path) -> tuple[str, dict[str, np.ndarray]]:
    tensors = {
        "model/kernel": np.arange(6, dtype=np.float32).reshape(2, 3),
        "global_step": np.array(42, dtype=np.int64),
        "mask": np.array([True, False, True, True]),
    }
    prefix = str(tmp_path / "small.ckpt")
    write_bundle(prefix, tensors)
    return prefix, tensors


def flip(path: str, position: int) -> None:
    data = bytearray(Path(path).read_bytes())
    data[position] ^= 0x01
    Path(path).write_bytes(bytes(data))


def test_flipped_data_byte_fails_the_tensor_crc(tmp_path: Path) -> None:
    prefix, _ = small_bundle(tmp_path)
    offset = read_bundle_index(prefix)["model/kernel"].offset
    flip(prefix + DATA, offset + 5)
    with pytest.raises(TF1BundleError, match=r"tensor 'model/kernel': crc32c mismatch \(stored"):
        read_bundle(prefix)
    assert list(read_bundle(prefix, ["mask", "global_step"])) == ["mask", "global_step"]


def test_flipped_index_byte_fails_the_block_crc(tmp_path: Path) -> None:
    prefix, _ = small_bundle(tmp_path)
    flip(prefix + ".index", 20)
    with pytest.raises(TF1BundleError, match=r"small.ckpt.index: data block at offset 0 .*crc32c"):
        read_bundle_index(prefix)


def test_every_truncation_of_the_index_is_an_error(tmp_path: Path) -> None:
    prefix, _ = small_bundle(tmp_path)
    data = Path(prefix + ".index").read_bytes()
    for length in range(len(data)):
        Path(prefix + ".index").write_bytes(data[:length])
        with pytest.raises(TF1BundleError, match=r"too short for a table|bad magic number"):
            read_bundle_index(prefix)


def test_truncated_data_file(tmp_path: Path) -> None:
    prefix, tensors = small_bundle(tmp_path)
    data = Path(prefix + DATA).read_bytes()
    Path(prefix + DATA).write_bytes(data[:-1])
    with pytest.raises(
        TF1BundleError,
        match=r"tensor 'model/kernel' \(offset 12, 24 bytes\) runs past the end of the file \(35",
    ):
        read_bundle(prefix)
    Path(prefix + DATA).write_bytes(data + b"trailing junk is ignored, like TF does")
    got = read_bundle(prefix)
    for name, array in tensors.items():
        assert_same(got[name], array, name)


def write_index(prefix: Path, entries: list[tuple[bytes, bytes]]) -> None:
    """An index holding ``entries`` (sorted), every block checksum valid."""
    Path(f"{prefix}.index").write_bytes(tf1_table.build_table(entries, 262144, 16))


HEADER = protos.HEADER


def entry(
    dtype: int = 1,
    shape: tuple[int, ...] = (2,),
    offset: int = 0,
    size: int = 8,
    crc: int = 0,
    extra: bytes = b"",
) -> bytes:
    return protos.encode_entry(dtype, shape, offset, size, crc) + extra


def varint_field(number: int, value: int) -> bytes:
    return encode_varint(number << 3) + encode_varint(value % (1 << 64))


@pytest.mark.parametrize(
    ("entries", "match"),
    [
        ([(b"w", entry())], r"no header entry \(the empty key\)"),
        ([(b"", b"\x08\x00")], r"num_shards is 0, expected at least 1"),
        ([(b"", HEADER + varint_field(2, 2))], r"endianness is 2, expected 0 \(little\)"),
        ([(b"", b"\x08\x01\x1a\x02\x10\x05")], r"newer bundle format \(min_consumer 5"),
        ([(b"", b"\x08\x01\x1a\x03\x1a\x01\x01")], r"bad_consumers \[1\]"),
        ([(b"", HEADER), (b"w", entry(size=12))], r"size is 12 bytes, but a float32 .* takes 8"),
        (
            [(b"", HEADER), (b"w", entry(shape=(1 << 40, 1 << 40), size=8))],
            r"shape \[1099511627776, 1099511627776\] takes",
        ),
        ([(b"", HEADER), (b"w", entry(extra=varint_field(3, 1)))], r"shard 1 of a 1-shard"),
        ([(b"", HEADER), (b"w", entry(extra=varint_field(4, -5)))], r"offset is negative \(-5\)"),
        ([(b"", HEADER), (b"w", entry(extra=varint_field(3, 1 << 40)))], r"out of range for int32"),
        ([(b"", HEADER), (b"w", b"\x08" + b"\xff" * 11)], r"varint longer than a 64-bit"),
        ([(b"", HEADER), (b"w", b"\x08\xff\xff")], r"entry 'w': truncated varint"),
        ([(b"", HEADER), (b"w", b"\x08\x01\x13")], r"unsupported protobuf wire type 3"),
        ([(b"", HEADER), (b"w", b"\x12\xff\x01ab")], r"field 2 declares 255 bytes, only 2"),
        ([(b"", HEADER), (b"w", b"\x00\x01")], r"protobuf field number 0"),
        ([(b"", HEADER), (b"w", b"\x0a\x00")], r"field 1 has wire type 2, expected a varint"),
        ([(b"", HEADER), (b"w", entry() + b"\x30\x01")], r"crc32c field has wire type 0"),
        ([(b"", HEADER), (b"w", b"\x08\x01\x12\x02\x18\x01")], r"shape has unknown rank"),
        (
            [
                (b"", HEADER),
                (b"w", b"\x08\x01" + bytes_field(2, bytes_field(2, varint_field(1, -1)))),
            ],
            r"shape has a dimension of size -1",
        ),
        (
            [(b"", HEADER), (b"w", entry(shape=(1,) * 255, size=4))],
            r"shape has 255 dimensions, at most 254",
        ),
        ([(b"", HEADER), (b"\xff\xfe", entry())], r"tensor name b'\\xff\\xfe' is not UTF-8"),
    ],
)
def test_hostile_index_entries(
    entries: list[tuple[bytes, bytes]], match: str, tmp_path: Path
) -> None:
    write_index(tmp_path / "x", entries)
    with pytest.raises(TF1BundleError, match=match):
        read_bundle_index(tmp_path / "x")


def test_hostile_offsets_and_sizes_fail_before_allocating(tmp_path: Path) -> None:
    (tmp_path / f"x{DATA}").write_bytes(bytes(16))
    huge = 1 << 40  # a 4 TiB float32 tensor: allocating it would fail or hang
    cases = [
        (entry(shape=(huge,), size=4 * huge), r"'w' \(offset 0, 4398046511104 bytes\) runs past"),
        (entry(offset=(1 << 63) - 1), r"offset 9223372036854775807, 8 bytes\) runs past"),
        (entry(offset=12), r"'w' \(offset 12, 8 bytes\) runs past the end of the file \(16"),
    ]
    for value, match in cases:
        write_index(tmp_path / "x", [(b"", HEADER), (b"w", value)])
        with pytest.raises(TF1BundleError, match=match):
            read_bundle(tmp_path / "x")


def test_unsupported_dtypes_are_listed_not_read(tmp_path: Path) -> None:
    (tmp_path / f"x{DATA}").write_bytes(np.ones(2, np.float32).tobytes())
    crc = masked_crc32c(np.ones(2, np.float32).tobytes())
    write_index(
        tmp_path / "x",
        [
            (b"", HEADER),
            (b"a", entry(dtype=7, size=5)),  # a string tensor: no size rule applies
            (b"b", entry(dtype=99)),
            (b"c", entry(crc=crc)),
        ],
    )
    index = read_bundle_index(tmp_path / "x")
    assert [index[n].dtype for n in "abc"] == ["string", "DataType(99)", "float32"]
    with pytest.raises(
        TF1BundleError, match=r"cannot read 'a' \(dtype string is not supported\), "
    ):
        read_bundle(tmp_path / "x")
    assert_same(read_bundle(tmp_path / "x", ["c"])["c"], np.ones(2, np.float32))


def test_bool_bytes_other_than_0_and_1(tmp_path: Path) -> None:
    raw = b"\x00\x01\x02"
    (tmp_path / f"x{DATA}").write_bytes(raw)
    write_index(
        tmp_path / "x", [(b"", HEADER), (b"m", entry(10, (3,), size=3, crc=masked_crc32c(raw)))]
    )
    with pytest.raises(TF1BundleError, match=r"bool tensor 'm' holds bytes other than 0 and 1"):
        read_bundle(tmp_path / "x")


def test_big_endian_bundle(tmp_path: Path) -> None:
    want = {"f": np.array([1.5, -2.0], np.float32), "i": np.array([[1, -2]], np.int64)}
    data, entries = b"", [(b"", HEADER + varint_field(2, 1))]  # endianness BIG
    dtypes = {"f": 1, "i": 9}
    for name, array in want.items():
        raw = array.astype(array.dtype.newbyteorder(">")).tobytes()
        entries.append(
            (
                name.encode(),
                entry(dtypes[name], array.shape, len(data), len(raw), masked_crc32c(raw)),
            )
        )
        data += raw
    (tmp_path / f"x{DATA}").write_bytes(data)
    write_index(tmp_path / "x", entries)
    got = read_bundle(tmp_path / "x")
    for name, array in want.items():
        assert_same(got[name], array, name)


def block(entries: list[tuple[int, bytes, bytes]], restarts: list[int] | None = None) -> bytes:
    """A raw block of (shared, key suffix, value) entries with the given restart offsets."""
    out = b"".join(
        encode_varint(s) + encode_varint(len(k)) + encode_varint(len(v)) + k + v
        for s, k, v in entries
    )
    restarts = [0] if restarts is None else restarts
    return tf1_table.finish_block(bytearray(out), restarts)


def table(blocks: list[bytes], index: Callable[[list[bytes]], bytes] | None = None) -> bytes:
    """An SSTable of raw data ``blocks`` (valid checksums); ``index`` builds the index block
    from their handles (default: one entry each, keyed by a very large key)."""
    out = b""
    handles = []
    for contents in blocks:
        handles.append(encode_varint(len(out)) + encode_varint(len(contents)))
        out += contents + b"\x00" + masked_crc32c(contents + b"\x00").to_bytes(4, "little")
    meta = encode_varint(len(out)) + encode_varint(8)
    empty = block([], [0])
    out += empty + b"\x00" + masked_crc32c(empty + b"\x00").to_bytes(4, "little")
    if index is None:
        contents = block([(0, b"\xff" * (i + 1), h) for i, h in enumerate(handles)])
    else:
        contents = index(handles)
    index_handle = encode_varint(len(out)) + encode_varint(len(contents))
    out += contents + b"\x00" + masked_crc32c(contents + b"\x00").to_bytes(4, "little")
    footer = meta + index_handle
    return out + footer + bytes(40 - len(footer)) + tf1_table.MAGIC.to_bytes(8, "little")


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (table([block([(0, b"", HEADER), (0, b"b", b""), (0, b"a", b"")])]), r"strictly incr"),
        (table([block([(0, b"", HEADER), (0, b"a", b""), (1, b"", b"")])]), r"strictly incr"),
        (table([block([(0, b"", HEADER), (3, b"a", b"")])]), r"shares 3 bytes of a 0-byte key"),
        (table([block([(0, b"", HEADER)])[:-4] + b"\xe8\x03\x00\x00"]), r"1000 restart points do"),
        (table([block([(0, b"", HEADER), (0, b"a", b"")], [0, 3])]), r"restart point 3 is not"),
        (table([block([(0, b"", HEADER), (0, b"a", b"")], [])]), r"first entry is not a restart"),
        (
            table([tf1_table.finish_block(bytearray(b"\x00\x00\x64" + HEADER), [0])]),
            r"entry at 0 runs past the end of the block",
        ),
        (table([b"\x00\x01"]), r"2 bytes is too short for a block"),
        (
            table(
                [block([(0, b"", HEADER)]), block([(0, b"a", b"")])],
                lambda h: block([(0, b"a", h[0]), (0, b"b", h[0])]),
            ),
            r"data block at offset 0 overlaps the one before",
        ),
        (
            table(
                [block([(0, b"", HEADER), (0, b"z", b"")])],
                lambda h: block([(0, b"m", h[0])]),
            ),
            r"key b'z' lies outside its index range",
        ),
        (
            table([block([(0, b"", HEADER)])], lambda h: block([(0, b"m", h[0] + b"\x00")])),
            r"trailing bytes after the block handle",
        ),
        (
            table([block([(0, b"", HEADER)])], lambda h: block([(0, b"m", b"\x00\xff\xff\x03")])),
            r"data block at offset 0 \(offset 0, 65535 bytes",
        ),
    ],
)
def test_hostile_table_structure(data: bytes, match: str, tmp_path: Path) -> None:
    (tmp_path / "x.index").write_bytes(data)
    with pytest.raises(TF1BundleError, match=match):
        read_bundle_index(tmp_path / "x")


def test_hostile_footer_and_compression(tmp_path: Path) -> None:
    prefix, _ = small_bundle(tmp_path)
    good = Path(prefix + ".index").read_bytes()

    def check(data: bytes, match: str) -> None:
        Path(prefix + ".index").write_bytes(data)
        with pytest.raises(TF1BundleError, match=match):
            read_bundle_index(prefix)

    check(good[:-1] + b"\x00", r"bad magic number 0x00477524")
    footer = len(good) - 48
    check(good[:footer] + b"\xff" * 40 + good[-8:], r"footer: varint longer than a 64-bit")
    handle = encode_varint(1 << 62) + encode_varint(8)
    check(good[:footer] + handle * 2 + bytes(40 - 2 * len(handle)) + good[-8:], r"metaindex")
    for kind, match in [
        (1, r"is snappy-compressed; TensorFlow writes"),
        (7, r"compression type 7"),
    ]:
        blk = block([(0, b"", HEADER)])
        data = table([blk])
        data = data.replace(blk + b"\x00", blk + bytes([kind]), 1)
        start = data.index(blk) + len(blk)
        crc = masked_crc32c(blk + bytes([kind])).to_bytes(4, "little")
        check(data[: start + 1] + crc + data[start + 5 :], match)


def test_prefix_sharing_bomb_is_refused_quickly(tmp_path: Path) -> None:
    """Each key shares a 60 KB prefix and adds a byte: keys keep growing, the block stays small."""
    entries = [(0, b"", HEADER), (0, b"a" * 60000, b"")]
    entries += [(60000 + i, b"b", b"") for i in range(100000)]
    (tmp_path / "x.index").write_bytes(table([block(entries)]))
    with pytest.raises(TF1BundleError, match=r"keys are implausibly long for the block's size"):
        read_bundle_index(tmp_path / "x")


# ---------------------------------------------------------------------------------------------
# fuzzing: a mutated or truncated bundle reads exactly or fails with TF1BundleError


mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(1, 255)),
    st.tuples(st.just("set"), st.integers(0, 10**6), st.integers(0, 255)),
    st.tuples(st.just("truncate"), st.integers(0, 10**6), st.just(0)),
    st.tuples(st.just("insert"), st.integers(0, 10**6), st.integers(0, 255)),
    st.tuples(st.just("delete"), st.integers(0, 10**6), st.just(0)),
)


def mutate(data: bytes, ops: list[tuple[str, int, int]]) -> bytes:
    out = bytearray(data)
    for op, position, value in ops:
        if not out:
            break
        i = position % len(out)
        if op == "flip":
            out[i] ^= value
        elif op == "set":
            out[i] = value
        elif op == "truncate":
            del out[i:]
        elif op == "insert":
            out.insert(i, value)
        else:
            del out[i]
    return bytes(out)


@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    target=st.sampled_from([".index", DATA]),
    ops=st.lists(mutation, min_size=1, max_size=4),
)
def test_fuzz_mutated_bundle(tmp_path: Path, target: str, ops: list[tuple[str, int, int]]) -> None:
    prefix = str(tmp_path / "fuzz.ckpt")
    tensors = {
        "model/kernel": np.arange(6, dtype=np.float32).reshape(2, 3),
        "global_step": np.array(42, dtype=np.int64),
        "mask": np.array([True, False, True, True]),
        "empty": np.zeros((0, 2), dtype=np.float16),
    }
    write_bundle(prefix, tensors)
    path = Path(prefix + target)
    path.write_bytes(mutate(path.read_bytes(), ops))
    try:
        got = read_bundle(prefix)
    except TF1BundleError:
        return
    assert list(got) == sorted(tensors)
    for name, array in tensors.items():
        assert_same(got[name], array, name)


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops=st.lists(mutation, min_size=1, max_size=4))
def test_fuzz_checksummed_block_mutations(tmp_path: Path, ops: list[tuple[str, int, int]]) -> None:
    """Mutate the data block of the index and fix its checksum, so the parser sees the damage:
    the result may be another valid bundle (a renamed key, say), or a missing data file (the
    header's shard count changed), but never another exception."""
    prefix = str(tmp_path / "fuzz.ckpt")
    write_bundle(prefix, {"kernel": np.ones((2, 3), np.float32), "step": np.array(7)})
    data = Path(prefix + ".index").read_bytes()
    meta_offset = tf1_table.read_handle(data[-48:], 0, 40, "footer")[0]
    size = meta_offset - 5  # the one data block, at offset 0, right before the metaindex
    Path(prefix + ".index").write_bytes(table([mutate(data[:size], ops)]))
    try:
        got = read_bundle(prefix)
    except (TF1BundleError, FileNotFoundError):
        return
    raw = Path(prefix + DATA).read_bytes()
    for array in got.values():
        assert array.tobytes() in raw


def test_module_works_without_torch(tmp_path: Path) -> None:
    script = f"""
import sys

class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is blocked in this test")
        return None

sys.meta_path.insert(0, NoTorch())
import numpy as np
from cudnn_rnn.io.tf1.bundle import read_bundle, write_bundle
write_bundle({str(tmp_path / "x")!r}, {{"a": np.arange(3)}})
assert read_bundle({str(tmp_path / "x")!r})["a"].tolist() == [0, 1, 2]
assert not any(m == "torch" or m.startswith("torch.") for m in sys.modules)
print("ok")
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_index_without_its_footer_magic_is_refused_before_its_bulk_is_read(tmp_path: Path) -> None:
    """A 2.6 GB sparse index (no disk cost): the footer is read from the end first, so it is
    refused at once, without reading (or holding) the 2.6 GB."""
    from cudnn_rnn import checkpoint
    from cudnn_rnn.layers import CudnnGRU

    prefix, _ = small_bundle(tmp_path)
    with open(prefix + ".index", "r+b") as f:
        f.truncate(2_600_000_000)  # zeros after the table: the magic is no longer last
    start = time.process_time()
    tracemalloc.start()
    try:
        with pytest.raises(TF1BundleError, match=r"bad magic number 0x0000000000000000 \(expe"):
            read_bundle_index(prefix)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    layer = CudnnGRU(1, 2, input_size=2)
    with pytest.raises(checkpoint.CheckpointError, match=r"small.ckpt.index: bad magic"):
        checkpoint.restore(prefix, layer)
    # CPU time: about 0.02 s; reading the 2.6 GB takes seconds of it (3.6 s seen, in the kernel).
    assert time.process_time() - start < 1.0
    assert peak < 1 << 20, peak


def test_footer_handles_outside_a_large_index_are_refused_before_reading(tmp_path: Path) -> None:
    prefix, _ = small_bundle(tmp_path)
    good = Path(prefix + ".index").read_bytes()
    handle = encode_varint(1 << 40) + encode_varint(8)
    footer = handle * 2 + bytes(40 - 2 * len(handle)) + good[-8:]
    with open(prefix + ".index", "r+b") as f:
        f.truncate(2_600_000_000)
        f.seek(2_600_000_000 - 48)
        f.write(footer)
    tracemalloc.start()
    try:
        with pytest.raises(TF1BundleError, match=r"metaindex block \(offset 1099511627776, 8 b"):
            read_bundle_index(prefix)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak
