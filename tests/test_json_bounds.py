"""Every JSON document a reader parses goes through one bounded loader (``files.load_json``): its
size and nesting depth are checked by a linear scan that skips strings, before ``json.loads``;
a hostile document is the reader's ``FormatError`` naming the file, the depth and the bound,
never a ``RecursionError``. TF1's own protobuf parser recurses into nothing it does not know and
parses in linear time.

Hostile inputs are generated here: deep arrays and objects, strings full of brackets (which must
not count), escaped quotes, unterminated strings, long flat documents; documents of random shape
(fixed seed) check the depth scan against the depth of the parsed value.
"""

from __future__ import annotations

import json
import random
import shutil
import struct
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

import cudnn_rnn
from cudnn_rnn import checkpoint
from cudnn_rnn.cli import main
from cudnn_rnn.io.files import MAX_JSON_DEPTH, FormatError, json_depth, load_json
from cudnn_rnn.io.tf1 import bundle as tf1_bundle
from cudnn_rnn.io.tf1 import protobuf_wire, protos
from cudnn_rnn.io.tf1 import writer as tf1_writer
from tests.support.paths import FIXTURES


class _Refused(FormatError):
    """What the tests' ``fail`` raises."""


def _fail(reason: str) -> _Refused:
    return _Refused(f"doc.json {reason}")


def _deep_arrays(n: int) -> bytes:
    return b"[" * n + b"]" * n


def _deep_objects(n: int) -> bytes:
    return b'{"a":' * n + b"1" + b"}" * n


# -- the depth scan against the parsed value -------------------------------------------------


def _depth_of(value: Any) -> int:
    """The oracle: how deep a parsed value's lists and dicts nest."""
    if isinstance(value, list):
        return 1 + max((_depth_of(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth_of(v) for v in value.values()), default=0)
    return 0


_NASTY = ["[", "]", "{", "}", '"', "\\", '\\"', "\\\\", '"]', "é", "\u202e", "\n", "[[[", "}}}"]


def _random_value(rng: random.Random, depth: int) -> Any:
    kind = rng.random()
    if depth <= 0 or kind < 0.3:
        return rng.choice(
            [
                "".join(rng.choice(_NASTY) for _ in range(rng.randrange(6))),
                rng.randrange(-1000, 1000),
                rng.random(),
                None,
                True,
            ]
        )
    count = rng.randrange(4)
    if kind < 0.65:
        return [_random_value(rng, depth - 1) for _ in range(count)]
    keys = ("".join(rng.choice(_NASTY) for _ in range(rng.randrange(4))) for _ in range(count))
    return {k: _random_value(rng, depth - 1) for k in keys}


def test_the_depth_scan_agrees_with_the_parsed_value() -> None:
    rng = random.Random(20240531)
    for _ in range(300):
        value = _random_value(rng, rng.randrange(12))
        for ascii_only in (True, False):
            text = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8")
            assert json_depth(text) == _depth_of(value), text
            assert load_json(text, _fail) == value


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        (b'["' + b"[" * 100_000 + b'"]', 1),  # brackets inside a string do not count
        (b'{"k": "' + b"}{" * 50_000 + b'", "v": [[]]}', 3),
        (b'["\\"[[[[", []]', 2),  # an escaped quote ends no string
        (b'["\\\\", [[]]]', 3),  # an escaped backslash does not escape the quote after it
        (b'["\\u005b\\u005b", [1]]', 2),  # \u005b is "[": inside a string
        (b'"' + b"[" * 1000, 0),  # an unterminated string: the rest is inside it
        (b"[" + b"0," * 100_000 + b"0]", 1),
        (b"", 0),
    ],
)
def test_strings_and_escapes_are_skipped(text: bytes, depth: int) -> None:
    assert json_depth(text) == depth


# -- the loader's refusals ---------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["arrays", "objects"])
@pytest.mark.parametrize("levels", [MAX_JSON_DEPTH + 1, 100_000])
def test_a_deep_document_is_refused_naming_the_depth_and_the_bound(shape: str, levels: int) -> None:
    text = (_deep_arrays if shape == "arrays" else _deep_objects)(levels)
    with pytest.raises(
        _Refused,
        match=rf"^doc\.json nests too deeply: {levels} levels of arrays and objects, more than "
        rf"the {MAX_JSON_DEPTH} read$",
    ):
        load_json(text, _fail)
    assert load_json(_deep_arrays(MAX_JSON_DEPTH), _fail) is not None  # the bound itself: read


def test_text_is_checked_as_its_utf8_bytes() -> None:
    assert load_json('{"é": ["[["]}', _fail) == {"é": ["[["]}
    with pytest.raises(_Refused, match=r"nests too deeply: 300 levels"):
        load_json("[" * 300 + "]" * 300, _fail)


@pytest.mark.parametrize(
    ("text", "kwargs", "says"),
    [
        (b"[1, 2, 3]", {"max_size": 8}, r"^doc\.json is 9 bytes, more than the 8 read$"),
        (b'{"a": 1', {}, r"^doc\.json is not JSON \(Expecting ',' delimiter: line 1 column 8"),
        (b'["\xff"]', {}, r"^doc\.json is not JSON \(not UTF-8: invalid start byte at byte 2\)$"),
        (b'"' + b"[" * 1000, {}, r"^doc\.json is not JSON \(Unterminated string"),
        (b"[" + b"9" * 5000 + b"]", {}, r"^doc\.json is not JSON \(Exceeds the limit"),
        (b"[[[]]]", {"max_depth": 2}, r"nests too deeply: 3 levels .* more than the 2 read$"),
    ],
)
def test_what_is_not_json_is_the_reader_s_error(
    text: bytes, kwargs: dict[str, int], says: str
) -> None:
    with pytest.raises(_Refused, match=says):
        load_json(text, _fail, **kwargs)


def test_a_caller_deep_in_its_stack_gets_the_reader_s_error() -> None:
    """Within the bound, json.loads may still meet the recursion limit when its caller is deep
    in its own stack: that too is the reader's error, never a RecursionError."""
    import inspect

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + 60)
    try:
        with pytest.raises(_Refused, match=r"nests too deeply for the stack left \(150 levels\)"):
            load_json(_deep_arrays(150), _fail)
    finally:
        sys.setrecursionlimit(limit)


def test_the_scan_is_linear_in_the_document() -> None:
    """CPU time of 4x the text is well under 16x (quadratic): deep, flat and string-heavy text."""
    parts = [b"[" * 50_000 + b"]" * 50_000, b'["' + b"[\\\\" * 50_000 + b'"],', b"[0,1]," * 5000]
    one = b"".join(parts)
    four = one * 4
    json_depth(one)  # first calls
    times = {}
    for name, text in (("one", one), ("four", four)):
        best = float("inf")
        for _ in range(2):
            start = time.process_time()
            json_depth(text)
            best = min(best, time.process_time() - start)
        times[name] = best
    assert times["four"] / times["one"] < 8, times


_MEMORY_PROBE = """
import sys
from cudnn_rnn.io.files import json_depth

def high_water():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM:"))

kind, size = sys.argv[1], int(sys.argv[2])
unit = {"escapes": b'\\\\"[', "quotes": b'"[",', "deep": b"["}[kind]
text = b"[" + unit * (size // len(unit)) + b"]"
before = high_water()
json_depth(text)
print(high_water() - before, len(text))
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc (Linux)")
@pytest.mark.parametrize("kind", ["escapes", "quotes", "deep"])
def test_the_scan_holds_at_most_about_one_copy_of_the_document(kind: str) -> None:
    """Peak RSS (VmHWM) of a process scanning 24 MB of text full of escapes, of strings or of
    brackets grows by at most 1.5 times the text plus 8 MiB (a substitution by regular
    expression held a piece object per match: 75 times the text for escapes)."""
    import subprocess

    run = subprocess.run(
        [sys.executable, "-c", _MEMORY_PROBE, kind, str(24 << 20)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    grown, size = map(int, run.stdout.split())
    assert grown <= 1.5 * size + (8 << 20), (grown, size)


# -- every reader that parses JSON --------------------------------------------------------------


def _safetensors_file(path: Path, header: bytes) -> str:
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    return str(path)


def _keras3_file(path: Path, config: bytes) -> str:
    with zipfile.ZipFile(FIXTURES / "keras3" / "lstm.keras") as z:
        members = {n: z.read(n) for n in z.namelist()}
    members["config.json"] = config
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return str(path)


def _keras_h5_file(path: Path, config: bytes) -> str:
    h5py = pytest.importorskip("h5py")
    shutil.copy(FIXTURES / "keras2" / "cudnn_model.h5", path)
    with h5py.File(path, "r+") as f:
        f.attrs["model_config"] = config.decode("utf-8")
    return str(path)


def _models_metadata(path: Path, models: bytes) -> str:
    metadata = {"format": checkpoint.FORMAT, "models": models.decode("utf-8")}
    save_file({"x": torch.zeros(1)}, str(path), metadata=metadata)
    return str(path)


_DEEP = 100_000
_SAYS = rf"nests too deeply: {_DEEP} levels of arrays and objects, more than the 200 read"
#: reader -> (a file whose JSON nests _DEEP deep, the start of what its error says)
_READERS = {
    "safetensors header": (
        lambda p: _safetensors_file(p / "h.safetensors", b'{"a":' * _DEEP + b"1" + b"}" * _DEEP),
        r"checkpoint .*h\.safetensors: not a readable safetensors file \(its header ",
    ),
    "safetensors models": (
        lambda p: _models_metadata(p / "m.safetensors", _deep_arrays(_DEEP)),
        r"checkpoint .*m\.safetensors: metadata 'models' ",
    ),
    "Keras 3 config.json": (
        lambda p: _keras3_file(p / "c.keras", _deep_objects(_DEEP)),
        r"keras3: '.*c\.keras': its config\.json ",
    ),
    "Keras .h5 model_config": (
        lambda p: _keras_h5_file(p / "c.h5", _deep_arrays(_DEEP)),
        r"from_keras_h5: '.*c\.h5': model_config ",
    ),
}


@pytest.mark.parametrize("reader", sorted(_READERS))
def test_every_reader_refuses_deep_json_with_its_format_error(tmp_path: Path, reader: str) -> None:
    make, says = _READERS[reader]
    path = make(tmp_path)
    for read in (cudnn_rnn.find_rnns, cudnn_rnn.load):
        with pytest.raises(FormatError, match=says + _SAYS):
            read(path)


def test_the_command_says_the_depth_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _READERS["Keras 3 config.json"][0](tmp_path)
    assert main(["inspect", path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and _SAYS.replace("\\", "") in err and "RecursionError" not in err


def test_brackets_in_strings_do_not_stop_a_reader(tmp_path: Path) -> None:
    """A config whose strings hold 100,000 brackets nests no deeper: it is read."""
    with zipfile.ZipFile(FIXTURES / "keras3" / "lstm.keras") as z:
        config = json.loads(z.read("config.json"))
    config["config"]["note"] = "[" * 100_000 + '\\"{' * 1000
    path = _keras3_file(tmp_path / "s.keras", json.dumps(config).encode())
    (found,) = cudnn_rnn.find_rnns(path)
    assert found.computable


def test_nested_models_within_the_bound_are_walked_without_recursion_errors(
    tmp_path: Path,
) -> None:
    """64 Sequentials inside each other (199 levels, the deepest the bound lets through): the
    readers' walks of nested models end in their own error (the weights are not at the nested
    places), not in a RecursionError."""
    with zipfile.ZipFile(FIXTURES / "keras3" / "lstm.keras") as z:
        inner = json.loads(z.read("config.json"))
    for i in range(64):
        inner = {"class_name": "Sequential", "config": {"name": f"s{i}", "layers": [inner]}}
    text = json.dumps(inner).encode()
    assert json_depth(text) <= MAX_JSON_DEPTH
    with pytest.raises(FormatError, match=r"the weights file has no variables at layers/"):
        cudnn_rnn.find_rnns(_keras3_file(tmp_path / "n.keras", text))
    with pytest.raises(FormatError, match=r"model_config|layer"):
        cudnn_rnn.find_rnns(_keras_h5_file(tmp_path / "n.h5", text))


def test_a_header_above_the_format_s_bound_is_refused_before_it_is_read(tmp_path: Path) -> None:
    from cudnn_rnn.io import safetensors

    path = tmp_path / "big.safetensors"
    with open(path, "wb") as f:  # a sparse file: the header is never written, nor read
        f.write(struct.pack("<Q", safetensors.MAX_HEADER + 1) + b"{")
        f.truncate(8 + safetensors.MAX_HEADER + 1)
    with pytest.raises(
        checkpoint.CheckpointError,
        match=rf"its header is {safetensors.MAX_HEADER + 1} bytes, more than the "
        rf"{safetensors.MAX_HEADER} read",
    ):
        checkpoint.describe(path)


# -- TF1's protobuf parser: no recursion, linear time ----------------------------------------


def _nested(levels: int) -> bytes:
    """A message nested ``levels`` deep (field 1 inside field 1 ...)."""
    payload = b""
    for _ in range(levels):
        payload = protobuf_wire.bytes_field(1, payload)
    return payload


def test_the_protobuf_parser_recurses_into_nothing_it_does_not_know(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each entry of a TF1 index carries an unknown field holding a message nested 20,000 deep,
    and its shape's dimension an unknown field as deep: the parser reads only the schema's
    messages (entry -> shape -> dimension; header -> version), a fixed depth, and skips the rest
    as bytes."""
    deep = _nested(20_000)
    encode_entry = protos.encode_entry

    def with_deep_fields(enum: int, shape: Any, offset: int, size: int, crc: int) -> bytes:
        return encode_entry(enum, shape, offset, size, crc) + protobuf_wire.bytes_field(99, deep)

    tensors = {"rnn/lstm_cell/kernel": torch.ones(7, 16).numpy()}
    tensors["rnn/lstm_cell/bias"] = torch.ones(16).numpy()
    with monkeypatch.context() as patch:
        patch.setattr(tf1_writer, "encode_entry", with_deep_fields)
        tf1_bundle.write_bundle(tmp_path / "m.ckpt", tensors)
    (found,) = cudnn_rnn.find_rnns(tmp_path / "m.ckpt")
    assert (found.name, found.num_units, found.input_size) == ("rnn", 4, 3)
    dim = protobuf_wire.varint_field(1, 5) + protobuf_wire.bytes_field(7, deep)
    shape = protobuf_wire.bytes_field(2, dim)
    assert protos.decode_shape(shape, "probe") == (5,)


def test_the_protobuf_parser_is_linear_in_the_message() -> None:
    one = b"".join(protobuf_wire.varint_field(n % 15 + 1, n + 1) for n in range(10_000))
    one += protobuf_wire.bytes_field(3, b"x" * 50_000)
    four = one * 4
    protobuf_wire.parse_message(one, "warm")
    times = {}
    for name, message in (("one", one), ("four", four)):
        best = float("inf")
        for _ in range(2):
            start = time.process_time()
            protobuf_wire.parse_message(message, name)
            best = min(best, time.process_time() - start)
        times[name] = best
    assert times["four"] / times["one"] < 8, times


def test_the_loader_takes_a_view_of_bytes() -> None:
    """(The Keras .h5 reader hands it a view of its reader process's output.)"""
    view = memoryview(bytearray(b'xx{"a": [1]}'))[2:]
    assert load_json(view, _fail) == {"a": [1]}
