"""The fuzz run of one file format, in its own process under a memory limit (tests/test_fuzz.py).

``python -m tests.support.fuzz_worker FORMAT FOLDER SEED CASES`` writes a valid file of FORMAT
from a small layer, then reads ``CASES`` corrupted copies of it (truncations and byte flips at
seeded random places) and a fixed set of hostile hand-made files, each with the reader a user
would call:

- ``safetensors``: ``checkpoint.restore`` into a layer (and ``checkpoint.describe``);
- ``tf1``: ``checkpoint.restore`` of a TF1 bundle (index and data corrupted in turn);
- ``onnx``: ``convert.from_onnx``;
- ``pt``: the CLI, ``cudnn-rnn inspect`` and ``cudnn-rnn convert`` of a torch state_dict;
- ``discovery``: no file: ``cudnn_layout.discover`` (a TF1 opaque kernel's layout) on random
  foreign buffers, checked against a naive reference of its rules (:func:`fuzz_discovery`);
- ``h5``: ``from_keras_h5`` of a Keras 2 ``.h5`` file (and ``cudnn-rnn inspect`` of the hostile
  ones), where HDF5 itself loops or crashes on some corruptions (:func:`fuzz_h5`).

Every read must either give the original values exactly (where the corruption cannot be noticed:
flips inside tensor bytes that the format does not checksum are not made) or raise the reader's
own error type, leaving the target layer unchanged; the CLI must exit 0 or 2, with one stderr line
naming the file when 2. Anything else (another exception type, a wrong value, a changed target)
is recorded. Before reading, the process limits its address space to what it uses after its
imports plus ``HEADROOM`` bytes, so a reader that allocates from a file's claim fails here with
MemoryError (recorded) instead of swapping the machine.

The last line of stdout is a JSON report: ``{"format", "cases", "outcomes", "bad"}``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import struct
import sys
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cudnn_rnn import CudnnGRU, CudnnLSTM, checkpoint, cli, convert
from cudnn_rnn.converters import keras_files
from cudnn_rnn.converters import onnx as onnx_format
from cudnn_rnn.io.keras import h5 as keras_h5
from cudnn_rnn.io.tf1 import bundle as tf1_bundle
from cudnn_rnn.io.tf1 import protos as tf1_protos
from cudnn_rnn.io.tf1 import table as tf1_table
from tests.support.capped import cap_address_space
from tests.support.paths import FIXTURES

HEADROOM = 1 << 30  # bytes the readers may allocate beyond what the imports took

#: What each format's reader may raise for a bad file.
TYPED: dict[str, tuple[type[BaseException], ...]] = {
    "safetensors": (checkpoint.CheckpointError,),
    "tf1": (tf1_bundle.TF1BundleError, checkpoint.CheckpointError),
    "onnx": tuple(e for e in (getattr(onnx_format, "OnnxFormatError", None),) if e is not None),
}


def source_layer(mode: str = "lstm") -> Any:
    cls = CudnnLSTM if mode == "lstm" else CudnnGRU
    return cls(1, 3, input_size=2, direction="bidirectional", seed=1)


def target_layer(mode: str = "lstm") -> Any:
    cls = CudnnLSTM if mode == "lstm" else CudnnGRU
    return cls(1, 3, input_size=2, direction="bidirectional", seed=7)


# -- mutations -------------------------------------------------------------------------------------


def truncations(data: bytes, rng: random.Random, count: int) -> Iterator[tuple[str, bytes]]:
    ends = {0, 1, 7, 8, 9, len(data) - 1} | {rng.randrange(len(data)) for _ in range(count)}
    for end in sorted(e for e in ends if 0 <= e < len(data)):
        yield f"truncated at {end}", data[:end]


def flips(
    data: bytes, rng: random.Random, count: int, allowed: Callable[[int], bool]
) -> Iterator[tuple[str, bytes]]:
    """``count`` copies with 1-3 bytes set to random values at places ``allowed`` accepts."""
    places = [i for i in range(len(data)) if allowed(i)]
    for _ in range(count):
        out = bytearray(data)
        spots = rng.sample(places, k=min(len(places), rng.randint(1, 3)))
        for spot in spots:
            out[spot] = (out[spot] + rng.randint(1, 255)) % 256
        yield f"bytes {spots} changed", bytes(out)


# -- one read --------------------------------------------------------------------------------------


class Run:
    def __init__(self, fmt: str) -> None:
        self.fmt = fmt
        self.outcomes: Counter[str] = Counter()
        self.bad: list[str] = []
        self.cases = 0

    def check(self, label: str, read: Callable[[], str]) -> None:
        """``read`` returns 'ok' or raises; typed errors count, anything else is bad."""
        self.cases += 1
        try:
            self.outcomes[read()] += 1
        except TYPED.get(self.fmt, ()) as err:
            self.outcomes[type(err).__name__] += 1
        except Exception as err:  # recording what escaped is the point
            where = traceback.extract_tb(err.__traceback__)[-1]
            self.bad.append(
                f"{label}: {type(err).__name__}: {str(err)[:200]} "
                f"(at {Path(where.filename).name}:{where.lineno})"
            )


def restore_read(run: Run, label: str, path: str, source: Any, target: Any) -> None:
    before = target.opaque_kernel.detach().clone()

    def read() -> str:
        try:
            checkpoint.restore(path, target)
        except BaseException:
            if not torch.equal(target.opaque_kernel.detach(), before):
                run.bad.append(f"{label}: the failed restore changed the target")
            raise
        if not torch.equal(target.opaque_kernel.detach(), source.opaque_kernel.detach()):
            run.bad.append(f"{label}: restored without error but with wrong values")
        with torch.no_grad():
            target.opaque_kernel.copy_(before)
        return "ok"

    run.check(label, read)


# -- formats ---------------------------------------------------------------------------------------


def fuzz_safetensors(run: Run, folder: Path, rng: random.Random, cases: int) -> None:
    source, target = source_layer(), target_layer()
    path = folder / "model.safetensors"
    checkpoint.save(path, source)
    data = path.read_bytes()
    header_end = 8 + int.from_bytes(data[:8], "little")
    # safetensors has no checksum: a flip in tensor bytes is a different valid file, not made.
    variants = [
        *truncations(data, rng, cases // 3),
        *flips(data, rng, cases - cases // 3, lambda i: i < header_end),
        *hostile_safetensors(data),
    ]
    for label, blob in variants:
        path.write_bytes(blob)
        restore_read(run, label, str(path), source, target)

        def describe() -> str:
            checkpoint.describe(path)
            return "ok"

        run.check(f"describe, {label}", describe)


def _safetensors(header: dict[str, Any], payload: bytes = b"") -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + payload


def hostile_safetensors(valid: bytes) -> list[tuple[str, bytes]]:
    header = json.loads(valid[8 : 8 + int.from_bytes(valid[:8], "little")])
    name = next(k for k in header if k != "__metadata__")
    meta = header.get("__metadata__", {})

    def with_entry(entry: dict[str, Any]) -> bytes:
        return _safetensors({**header, name: entry}, valid[8 + len(json.dumps(header)) :])

    deep = "[" * 200_000 + "]" * 200_000
    many = {f"t{i}": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]} for i in range(20_000)}

    def entry(shape: list[int], offsets: list[int]) -> bytes:
        return with_entry({"dtype": "F32", "shape": shape, "data_offsets": offsets})

    def with_meta(**values: str) -> bytes:
        return _safetensors({**header, "__metadata__": {**meta, **values}})

    return [
        ("huge shape", entry([2**62, 2**62], [0, 4])),
        ("overflowing count", entry([0, 2**62, 2**62], [0, 0])),
        ("offsets past the end", entry([3], [0, 2**64 + 12])),
        ("negative offsets", entry([3], [-12, 0])),
        ("header length past the end", struct.pack("<Q", 2**63) + valid[8:]),
        ("header not UTF-8", struct.pack("<Q", 4) + b"\xff\xfe{}"),
        ("deep nesting in the header", _safetensors({"x": json.loads("[" * 500 + "]" * 500)})),
        ("deep nesting, raw", struct.pack("<Q", len(deep)) + deep.encode()),
        ("deep nesting in models", with_meta(models=deep)),
        ("models not JSON", with_meta(models="{")),
        ("models a number", with_meta(models="42")),
        ("format_version not ASCII", with_meta(format_version="\u00b2")),
        ("many tensors", _safetensors(many)),
    ]


def fuzz_tf1(run: Run, folder: Path, rng: random.Random, cases: int) -> None:
    source, target = source_layer("gru"), target_layer("gru")
    prefix = folder / "ckpt"
    checkpoint.save(prefix, source, format="tf")
    index_path = Path(f"{prefix}.index")
    data_path = Path(f"{prefix}.data-00000-of-00001")
    index, data = index_path.read_bytes(), data_path.read_bytes()
    half = cases // 2
    anywhere = lambda i: True  # noqa: E731
    variants = [
        *((f"index {label}", blob, data) for label, blob in truncations(index, rng, half // 3)),
        *((f"index {label}", blob, data) for label, blob in flips(index, rng, half, anywhere)),
        # The data file is checksummed per tensor: every flip in it must be noticed.
        *((f"data {label}", index, blob) for label, blob in truncations(data, rng, half // 3)),
        *((f"data {label}", index, blob) for label, blob in flips(data, rng, half, anywhere)),
        *((label, blob, data) for label, blob in hostile_tf1_indexes()),
    ]
    for label, index_blob, data_blob in variants:
        index_path.write_bytes(index_blob)
        data_path.write_bytes(data_blob)
        restore_read(run, label, str(prefix), source, target)
    index_path.write_bytes(index)
    data_path.unlink()
    restore_read(run, "index without its data file", str(prefix), source, target)


def hostile_tf1_indexes() -> list[tuple[str, bytes]]:
    """Indexes whose entries claim what the 40-odd-byte data file cannot hold."""
    name = (
        "stack_bidirectional_rnn/cell_0/bidirectional_rnn/fw/cudnn_compatible_gru_cell/gates/bias"
    )
    float_enum = 1  # DT_FLOAT

    def index(*entries: tuple[str, tuple[int, ...], int, int]) -> bytes:
        rows = [(b"", tf1_protos.HEADER)]
        for key, shape, offset, size in sorted(entries):
            rows.append((key.encode(), tf1_protos.encode_entry(float_enum, shape, offset, size, 0)))
        return tf1_table.build_table(rows, tf1_table.BLOCK_SIZE, tf1_table.RESTART_INTERVAL)

    many = [(f"t{i:06d}", (1,), 0, 4) for i in range(20_000)]
    return [
        ("entry of shape (0, 2**62, 2**62)", index((name, (0, 2**62, 2**62), 0, 0))),
        ("entry of shape (2**62, 2**62)", index((name, (2**62, 2**62), 0, 2**66))),
        ("entry claiming 10**10 floats", index((name, (10**10,), 0, 4 * 10**10))),
        ("entry past the end of the data", index((name, (6,), 2**63, 24))),
        ("20000 entries", index(*many)),
    ]


def fuzz_onnx(run: Run, folder: Path, rng: random.Random, cases: int) -> None:
    import onnx

    source = source_layer("gru")
    path = folder / "model.onnx"
    convert.to_onnx(source, path)
    data = path.read_bytes()
    # Initializer bytes are not checksummed: flips are made only outside them.
    spans = []
    for init in onnx.load(str(path)).graph.initializer:
        start = data.find(init.raw_data) if init.raw_data else -1
        if start >= 0:
            spans.append((start, start + len(init.raw_data)))
    outside = lambda i: not any(a <= i < b for a, b in spans)  # noqa: E731
    variants = [
        *truncations(data, rng, cases // 3),
        *flips(data, rng, cases - cases // 3, outside),
        *hostile_onnx(onnx),
    ]
    for label, blob in variants:
        path.write_bytes(blob)

        def read(label: str = label) -> str:
            layer = convert.from_onnx(path)
            got = layer.opaque_kernel.detach()
            if got.shape != source.opaque_kernel.shape or not torch.equal(
                got, source.opaque_kernel.detach()
            ):
                run.bad.append(f"{label}: read without error but with wrong values")
            return "ok"

        run.check(label, read)


def hostile_onnx(onnx: Any) -> list[tuple[str, bytes]]:
    from onnx import numpy_helper

    h = onnx.helper
    tp = onnx.TensorProto
    hidden, inp = 3, 2

    def lstm_model(nodes: list[Any], inits: list[Any], output: str, domain: str = "") -> bytes:
        x = h.make_tensor_value_info("X", tp.FLOAT, [5, 1, inp])
        y = h.make_tensor_value_info(output, tp.FLOAT, None)
        graph = h.make_graph(nodes, "g", [x], [y], initializer=inits)
        opsets = [h.make_opsetid("", 14)] + ([h.make_opsetid(domain, 1)] if domain else [])
        return h.make_model(graph, opset_imports=opsets).SerializeToString()  # type: ignore[no-any-return]

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((1, 4 * hidden, inp)).astype(np.float32), "W")
    r = numpy_helper.from_array(
        rng.standard_normal((1, 4 * hidden, hidden)).astype(np.float32), "R"
    )
    shape = numpy_helper.from_array(np.array([1, 4 * hidden, 100_000_000], np.int64), "S")
    bomb = [
        h.make_node("ConstantOfShape", ["S"], ["Wbig"]),
        h.make_node("LSTM", ["X", "Wbig", "R"], ["Y"], hidden_size=hidden),
    ]
    custom = [h.make_node("LSTM", ["X", "W", "R"], ["Y"], hidden_size=hidden, domain="my.custom")]
    bypass = [
        h.make_node("LSTM", ["X", "W", "R"], ["Yl"], hidden_size=hidden),
        h.make_node("Identity", ["X"], ["Y"]),
    ]
    return [
        ("ConstantOfShape allocation bomb", lstm_model(bomb, [shape, r], "Y")),
        ("LSTM in a custom domain", lstm_model(custom, [w, r], "Y", domain="my.custom")),
        ("output Identity(X) bypasses the LSTM", lstm_model(bypass, [w, r], "Y")),
    ]


def fuzz_pt(run: Run, folder: Path, rng: random.Random, cases: int) -> None:
    torch.manual_seed(0)
    module = torch.nn.LSTM(2, 3, bidirectional=True)
    path = folder / "model.pt"
    torch.save(module.state_dict(), path)
    data = path.read_bytes()
    variants = [
        *truncations(data, rng, cases // 3),
        *flips(data, rng, cases - cases // 3, lambda i: True),
        *hostile_pt(module.state_dict(), folder),
    ]
    for label, blob in variants:
        path.write_bytes(blob)
        for command in (
            ["inspect", str(path)],
            ["convert", str(path), str(folder / "out.safetensors")],
        ):
            cli_read(run, f"{command[0]}, {label}", command, str(path))


def hostile_pt(state: dict[str, torch.Tensor], folder: Path) -> list[tuple[str, bytes]]:
    def saved(value: Any) -> bytes:
        buffer = io.BytesIO()
        torch.save(value, buffer)
        return buffer.getvalue()

    class Payload:
        def __reduce__(self) -> tuple[Any, ...]:
            return (print, ("pickle payload ran",))

    bad_state = dict(state)
    bad_state["bias_ih_l99999999"] = state["bias_ih_l0"]
    flat = dict(state, weight_hh_l0=state["weight_hh_l0"].reshape(-1))
    ints = {k: v.to(torch.int64) for k, v in state.items()}
    return [
        ("extra key bias_ih_l99999999", saved(bad_state)),
        ("1-D weight_hh_l0", saved(flat)),
        ("integer tensors", saved(ints)),
        ("a pickle weights_only refuses", saved({"x": Payload()})),
        ("not a dict", saved([1, 2, 3])),
    ]


def cli_read(run: Run, label: str, command: list[str], path: str) -> None:
    def read() -> str:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(command)
        lines = err.getvalue().splitlines()
        if "pickle payload ran" in out.getvalue():
            run.bad.append(f"{label}: a pickle payload ran")
        if code == 0:
            return "exit 0"
        if code != 2 or len(lines) != 1 or path not in lines[0]:
            run.bad.append(f"{label}: exit {code}, stderr {lines[:3]!r} (want exit 2, one line)")
        return "exit 2"

    run.check(label, read)


FUZZERS = {"safetensors": fuzz_safetensors, "tf1": fuzz_tf1, "onnx": fuzz_onnx, "pt": fuzz_pt}


# -- the opaque layout discovery -------------------------------------------------------------------


class DiscoveryCase:
    """A cuDNN-like foreign buffer of a random model, what discovery is told, and the truth."""

    def __init__(self, label: str, spec: Any, buffer: np.ndarray, slot: np.ndarray) -> None:
        self.label, self.spec, self.buffer, self.slot = label, spec, buffer, slot
        self.weights: list[np.ndarray] = []
        self.known: list[np.ndarray | None] = []
        self.sums: dict[tuple[int, int, str], np.ndarray] = {}
        self.truth = self.slot_truth = np.zeros(0)
        self.exact = False  # gapless and uncorrupted: only the truth (or an ambiguity) may come
        self.reference = True  # small enough for the naive reference


def fuzz_discovery(run: Run, folder: Path, rng: random.Random, cases: int) -> None:
    """``cudnn_layout.discover`` (what a TF1 opaque kernel's restore calls) on seeded random
    buffers: random models and dtypes, matrices random, zero, periodic, equal or of two values,
    regions in canonical order (classic or per pseudo-layer) at random alignments, gaps of zeros,
    garbage or copies of a matrix, a few values corrupted. Each must place the matrices where a
    naive reference of the rules does and read them exactly (with every bias adding up), or
    refuse with LayoutNotFound where the reference refuses or at the bias step; each within
    DISCOVERY_CPU_LIMIT seconds of CPU time."""
    nprng = np.random.default_rng(rng.randrange(2**32))
    for i in range(cases):
        case = discovery_case(rng, nprng)
        run.check(f"discovery {i} ({case.label})", lambda c=case: discovery_read(run, c))
    # Large degenerate buffers (the kind): bounded time, and the truth.
    for mode, layers, units, kind in [
        ("lstm", 1, 96, "zero"),
        ("lstm", 1, 96, "periodic"),
        ("gru", 2, 48, "zero"),
        ("rnn_tanh", 2, 128, "equal"),
    ]:
        case = discovery_case(rng, nprng, (mode, layers, units, kind))
        run.check(f"discovery {case.label}", lambda c=case: discovery_read(run, c))


def _matrix(kind: str, shape: tuple[int, ...], dtype: np.dtype, nprng: Any) -> np.ndarray:
    if kind == "zero":
        return np.zeros(shape, dtype)
    if kind == "periodic":
        return np.resize(np.array([0.5, -0.25, 0.125], dtype), shape)
    if kind == "binary":
        return nprng.integers(0, 2, shape).astype(dtype)
    return nprng.standard_normal(shape).astype(dtype)


def discovery_case(
    rng: random.Random, nprng: Any, large: tuple[str, int, int, str] | None = None
) -> DiscoveryCase:
    from cudnn_rnn.core.layout import layout_of
    from cudnn_rnn.core.spec import RNNSpec

    if large is None:
        mode = rng.choice(["lstm", "gru", "rnn_tanh", "rnn_relu"])
        units, size = rng.randint(1, 5), rng.randint(1, 5)
        skip = rng.random() < 0.15
        proj = (
            rng.randint(1, units - 1)
            if mode == "lstm" and units > 1 and rng.random() < 0.2
            else None
        )
        spec = RNNSpec(
            mode,
            rng.randint(1, 2),
            units,
            units if skip else size,
            "skip_input" if skip else "linear_input",
            rng.choice(["unidirectional", "bidirectional"]),
            proj,
        )
        dtype = np.dtype(rng.choice(["float16", "float32", "float64"]))
        kind = rng.choice(["random", "zero", "periodic", "equal", "binary"])
    else:
        mode, layers, units, kind = large
        spec = RNNSpec(mode, layers, units, units, direction="bidirectional")
        dtype = np.dtype("float32")
    layout = layout_of(spec)
    first = _matrix("random" if kind == "equal" else kind, layout.weights[0].shape, dtype, nprng)
    weights = [
        np.eye(p.shape[0], dtype=dtype)
        if p.offset is None
        else np.resize(first, p.shape)
        if kind == "equal"
        else _matrix(kind, p.shape, dtype, nprng)
        for p in layout.weights
    ]
    zero_biases = large is None and rng.random() < 0.2
    biases = [
        np.zeros(p.shape, dtype) if zero_biases else nprng.standard_normal(p.shape).astype(dtype)
        for p in layout.biases
    ]
    truth = layout.pack(weights, biases)
    slot_truth = nprng.standard_normal(layout.size).astype(dtype)
    if large is None:
        buffer, slot, gaps, how = foreign_layout(layout, truth, slot_truth, first, rng, nprng)
    else:
        buffer, slot, gaps, how = truth.copy(), slot_truth.copy(), 0, "classic"
    corrupted = large is None and rng.random() < 0.3
    if corrupted:
        for at in nprng.integers(0, buffer.size, rng.randint(1, 3)):
            buffer[at] = rng.choice([0.0, 1.0, float(nprng.standard_normal())])
    label = f"{spec.mode} {spec.num_layers}x{spec.num_units} in {spec.input_size} "
    label += f"{spec.direction[:2]} {spec.input_mode[:4]} proj {spec.num_proj} {dtype} {kind} "
    label += f"{how}{' corrupted' if corrupted else ''}"
    case = DiscoveryCase(label, spec, buffer, slot)
    case.weights, case.truth, case.slot_truth = weights, truth, slot_truth
    case.exact, case.reference = gaps == 0 and not corrupted, large is None
    if large is None and rng.random() < 0.5:  # every bias known exactly (TF 1.3's files)
        case.known = list(biases)
    else:  # only the sums, as TF's canonical tensors hold them
        case.known = [None] * len(biases)
        by = {(p.layer, p.direction, p.kind, p.gate): b for p, b in zip(layout.biases, biases)}
        for p in layout.biases:
            if p.kind == "input_bias":
                r = by[p.layer, p.direction, "recurrent_bias", p.gate]
                case.sums[p.layer, p.direction, str(p.gate)] = (
                    by[p.layer, p.direction, p.kind, p.gate] + r
                )
    return case


def foreign_layout(
    layout: Any,
    truth: np.ndarray,
    slot_truth: np.ndarray,
    first: np.ndarray,
    rng: random.Random,
    nprng: Any,
) -> tuple[np.ndarray, np.ndarray, int, str]:
    """``truth`` and ``slot_truth`` (our layout) laid out as a foreign buffer: every matrix and
    every bias block (or vector) a region, in canonical order, all matrices first (classic) or
    per pseudo-layer, each at the next multiple of its alignment; gaps filled with zeros,
    garbage or copies of ``first``, and a tail of padding. Also: the elements of gaps, a label."""
    per_layer = rng.random() < 0.5
    unit = rng.choice(["block", "vector"])
    align = rng.choice([1, 1, 2, 4, 8, 16])
    matrix_align = rng.choice([1, align])
    fill = rng.choice(["zeros", "garbage", "copies"])
    units: dict[tuple[int, int, str], list[Any]] = {}
    for p in layout.biases:
        units.setdefault((p.layer, p.direction, p.kind), []).append(p)
    bias_regions = [
        (pl[0].layer, pl[0].direction, [pl] if unit == "block" else [[p] for p in pl])
        for pl in units.values()
    ]
    regions: list[tuple[int, int, int, tuple[int, int]]] = []  # (ours, size, alignment, key)
    for p in layout.weights:
        if p.offset is not None:
            regions.append((p.offset, p.size, matrix_align, (p.layer, p.direction)))
    matrices = list(regions)
    biases = []
    for layer, d, groups in bias_regions:
        for group in groups:
            size = sum(p.size for p in group)
            biases.append((group[0].offset, size, align, (layer, d)))
    # Per pseudo-layer: its matrices, then its biases (sorting is stable).
    regions = (
        sorted(matrices + biases, key=lambda r: (r[3], r in biases))
        if per_layer
        else matrices + biases
    )
    tail = rng.choice([0, 0, rng.randint(1, 40)])
    parts: list[tuple[int | None, int]] = []  # (ours or None for a gap, size)
    pos = 0
    for ours, size, a, _ in regions:
        start = -(-pos // a) * a
        if start > pos:
            parts.append((None, start - pos))
        parts.append((ours, size))
        pos = start + size
    if tail:
        parts.append((None, tail))
    gaps = sum(size for ours, size in parts if ours is None)

    def gap(size: int) -> np.ndarray:
        if fill == "zeros":
            return np.zeros(size, truth.dtype)
        if fill == "copies":
            return np.resize(first.reshape(-1), size)
        return nprng.standard_normal(size).astype(truth.dtype)

    buffer = np.concatenate([gap(n) if o is None else truth[o : o + n] for o, n in parts])
    slot = np.concatenate(
        [
            nprng.standard_normal(n).astype(truth.dtype) if o is None else slot_truth[o : o + n]
            for o, n in parts
        ]
    )
    how = f"{'per layer' if per_layer else 'classic'} {unit} align {matrix_align}/{align} {fill}"
    return buffer, slot, gaps, how


def reference_matrices(case: DiscoveryCase) -> tuple[str, list[int]]:
    """The matrix placement by the rules of cudnn_layout's docstring, naively (every window
    compared): ("nowhere" | "order" | "ambiguous" | "ok", offsets)."""
    import itertools

    from numpy.lib.stride_tricks import sliding_window_view

    from cudnn_rnn.core.layout import layout_of

    unsigned = {2: np.uint16, 4: np.uint32, 8: np.uint64}[case.buffer.dtype.itemsize]
    bits = case.buffer.view(unsigned)
    stored = [
        (p, w) for p, w in zip(layout_of(case.spec).weights, case.weights) if p.offset is not None
    ]
    occurrences = []
    for _, w in stored:
        needle = np.ascontiguousarray(w).reshape(-1).view(unsigned)
        windows = sliding_window_view(bits, needle.size)
        occurrences.append(np.flatnonzero((windows == needle).all(axis=1)))
    if any(o.size == 0 for o in occurrences):
        return "nowhere", []
    sizes = [p.size for p, _ in stored]
    if all(o.size == 1 for o in occurrences):
        spans = sorted((int(o[0]), n) for o, n in zip(occurrences, sizes))
        if all(a + n <= b for (a, n), (b, _) in itertools.pairwise(spans)):
            return "ok", [int(o[0]) for o in occurrences]
    left, pos = [], 0
    for o, n in zip(occurrences, sizes):
        at = o[o >= pos]
        if at.size == 0:
            return "order", []
        left.append(int(at[0]))
        pos = left[-1] + n
    right, end = [], bits.size
    for o, n in zip(reversed(occurrences), reversed(sizes)):
        at = o[o + n <= end]
        if at.size == 0:
            return "order", []
        right.append(int(at[-1]))
        end = right[-1]
    return ("ok", left) if left == right[::-1] else ("ambiguous", [])


_REFUSALS = {  # LayoutNotFound's message -> what the reference says of the matrices
    "nowhere in the buffer": "nowhere",
    "not in canonical order": "order",
    "several offsets": "ambiguous",
    "no placement of the biases": "ok",
    "biases fit two placements": "ok",
}


#: CPU seconds one discovery may take: at most 0.05 s seen on a loaded 2-core machine; the
#: blow-up it guards against (work H^4 on degenerate matrices) took minutes.
DISCOVERY_CPU_LIMIT = 2.0


def discovery_read(run: Run, case: DiscoveryCase) -> str:
    import time

    from cudnn_rnn.core.layout import layout_of
    from cudnn_rnn.io.cudnn_layout import LayoutNotFound, discover

    layout = layout_of(case.spec)
    start = time.process_time()  # this process's own: other processes' load does not count
    try:
        found = discover(
            case.spec, case.buffer, case.weights, case.known, case.sums, companions=[case.slot]
        )
    except LayoutNotFound as err:
        took = time.process_time() - start
        if took > DISCOVERY_CPU_LIMIT:
            run.bad.append(f"{case.label}: refused after {took:.2f} s of CPU time")
        why = next((k for k in _REFUSALS if k in str(err)), None)
        if why is None:
            run.bad.append(f"{case.label}: refused for no rule's reason: {err}")
            return "refused"
        if case.reference and reference_matrices(case)[0] != _REFUSALS[why]:
            run.bad.append(
                f"{case.label}: refused ({err}), the reference says {reference_matrices(case)[0]}"
            )
        if case.exact and _REFUSALS[why] == "ok" and "two placements" not in why:
            run.bad.append(f"{case.label}: a gapless, uncorrupted buffer refused: {err}")
        return f"refused: {why}"
    took = time.process_time() - start
    if took > DISCOVERY_CPU_LIMIT:
        run.bad.append(f"{case.label}: found after {took:.2f} s of CPU time")
    stored = [i for i, p in enumerate(layout.weights) if p.offset is not None]
    if case.reference:
        verdict, offsets = reference_matrices(case)
        got = [found.offsets[i] for i in stored]
        if verdict != "ok" or offsets != got:
            run.bad.append(f"{case.label}: matrices at {got}, the reference: {verdict} {offsets}")
    weights, biases = layout.unpack(found.to_ours(case.buffer))
    unsigned = {2: np.uint16, 4: np.uint32, 8: np.uint64}[case.buffer.dtype.itemsize]
    if any(
        not np.array_equal(weights[i].view(unsigned), case.weights[i].view(unsigned))
        for i in stored
    ):
        run.bad.append(f"{case.label}: found, but a matrix reads other values")
    by = {(p.layer, p.direction, p.kind, p.gate): b for p, b in zip(layout.biases, biases)}
    for (layer, d, gate), want in case.sums.items():
        got = by[layer, d, "input_bias", gate] + by[layer, d, "recurrent_bias", gate]
        if not np.all((got == want) | (np.abs(got - want) <= np.spacing(np.abs(want)))):
            run.bad.append(f"{case.label}: found, but the biases of gate {gate} do not add up")
    for value, b in zip(case.known, biases):
        if value is not None and not np.array_equal(value.view(unsigned), b.view(unsigned)):
            run.bad.append(f"{case.label}: found, but a known bias reads another value")
    if case.exact and not (
        np.array_equal(found.to_ours(case.buffer).view(unsigned), case.truth.view(unsigned))
        and np.array_equal(found.to_ours(case.slot).view(unsigned), case.slot_truth.view(unsigned))
    ):
        run.bad.append(f"{case.label}: a gapless, uncorrupted buffer read wrongly")
    return "ok"


FUZZERS["discovery"] = fuzz_discovery


# -- Keras 2 .h5 files -----------------------------------------------------------------------------

#: The h5 reader's time limit here (and the CLI's, through ``TIME_LIMIT_BASE``): a sound read
#: takes about 0.1 s, 0.6 s seen on a loaded 2-core machine (the reader process starts Python,
#: NumPy and h5py); one stopped anyway counts as a KerasH5Error, and the run must have read some
#: files to pass. A variant that makes HDF5 loop costs this much.
H5_TIME_LIMIT = 10.0
#: The limit of the variants known to loop: any limit stops them, a short one costs little.
H5_LOOP_LIMIT = 1.0
KERAS2 = FIXTURES / "keras2"


def fuzz_h5(run: Run, folder: Path, rng: random.Random, cases: int) -> None:
    """``from_keras_h5`` of a Keras 2 whole-model file (the CLI for the hostile ones). The
    oldest HDF5 format, which Keras 2 writes, has no checksums, so a changed byte outside the
    weights' values can make another valid file (a dataset's address, a name, the config);
    such a read counts as ``other file``. What may never happen: a hang, a crash, an error not
    typed."""
    import h5py

    source = KERAS2 / "cudnn_model.h5"
    data = source.read_bytes()
    want = {
        n: x.opaque_kernel.detach().clone() for n, x in keras_files.from_keras_h5(source).items()
    }
    spans: list[tuple[int, int]] = []
    with h5py.File(source, "r") as f:  # the intact fixture, trusted: where the values lie
        for ds in _datasets(f, h5py):
            start = ds.id.get_offset()
            if start is not None:
                spans.append((start, start + ds.id.get_storage_size()))
    outside = lambda i: not any(a <= i < b for a, b in spans)  # noqa: E731
    keras_h5.TIME_LIMIT_BASE = H5_TIME_LIMIT
    path = folder / "model.h5"
    variants = [
        *((label, blob, False) for label, blob in truncations(data, rng, cases // 4)),
        *((label, blob, False) for label, blob in flips(data, rng, cases - cases // 4, outside)),
        *((label, blob, True) for label, blob in hostile_h5(data, folder, h5py)),
    ]
    for label, blob, hostile in variants:
        path.write_bytes(blob)
        h5_read(run, label, path, want, H5_LOOP_LIMIT if "loop" in label else H5_TIME_LIMIT)
        if hostile and "loop" not in label:  # the CLI on a loop: tests/io/test_keras_h5.py
            cli_read(run, f"inspect, {label}", ["inspect", str(path)], str(path))
    if not run.outcomes["ok"]:
        run.bad.append(f"no variant read back: is {H5_TIME_LIMIT} s too short here?")


def _datasets(f: Any, h5py: Any) -> list[Any]:
    found: list[Any] = []
    f.visititems(lambda _, obj: found.append(obj) if isinstance(obj, h5py.Dataset) else None)
    return found


def h5_read(run: Run, label: str, path: Path, want: dict[str, torch.Tensor], limit: float) -> None:
    def read() -> str:
        try:
            layers = keras_files.from_keras_h5(path, time_limit=limit)
        except keras_h5.KerasH5Error:
            raise
        except ValueError as err:  # a changed config can ask for math cuDNN lacks: refused
            if not str(err).startswith(f"from_keras_h5: {str(path)!r}: layer "):
                raise
            return "refused"
        got = {n: x.opaque_kernel.detach() for n, x in layers.items()}
        if got.keys() == want.keys() and all(torch.equal(got[n], want[n]) for n in want):
            return "ok"
        return "other file"

    run.check(label, read)


def hostile_h5(data: bytes, folder: Path, h5py: Any) -> list[tuple[str, bytes]]:
    from tests.support import h5_hostile

    def corrupted(edit: Callable[[bytearray], None]) -> bytes:
        out = bytearray(data)
        edit(out)
        return bytes(out)

    def edited(edit: Callable[[Any], None]) -> bytes:
        copy = folder / "hostile.h5"
        copy.write_bytes(data)
        with h5py.File(copy, "r+") as f:
            edit(f["model_weights/cu_dnnlstm/cu_dnnlstm"])
        return copy.read_bytes()

    fifo = folder / "fifo"
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)  # opened by anything, it would block forever

    def external_link(group: Any) -> None:
        del group["kernel:0"]
        group["kernel:0"] = h5py.ExternalLink(str(fifo), "/kernel")

    def external_storage(group: Any) -> None:
        del group["kernel:0"]
        group.create_dataset("kernel:0", (3, 16), "f4", external=[(str(fifo), 0, 192)])

    def huge_claim(group: Any) -> None:  # never written: the file stays small
        del group["kernel:0"]
        group.create_dataset("kernel:0", (3, 2**40), "f4")

    def cycle(group: Any) -> None:  # a hard link to itself, walked 2000 times
        group["loop"] = group
        names = [
            n.replace("cu_dnnlstm/kernel", "cu_dnnlstm/" + "loop/" * 2000 + "kernel")
            for n in group.parent.attrs["weight_names"]
        ]
        group.parent.attrs["weight_names"] = names

    return [
        ("global heap loop", corrupted(h5_hostile.heap_loop)),
        ("weight_names datatype that crashes HDF5", corrupted(h5_hostile.weight_names_segv)),
        ("weight_names of character set 2", corrupted(h5_hostile.weight_names_encoding)),
        ("kernel an external link to a FIFO", edited(external_link)),
        ("kernel stored in a FIFO", edited(external_storage)),
        ("kernel claiming 3 * 2**40 floats", edited(huge_claim)),
        ("kernel's name through a 2000-deep link cycle", edited(cycle)),
    ]


FUZZERS["h5"] = fuzz_h5
TYPED["h5"] = (keras_h5.KerasH5Error,)


def main(argv: list[str]) -> int:
    fmt, folder, seed, cases = argv[0], Path(argv[1]), int(argv[2]), int(argv[3])
    folder.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    cap_address_space(HEADROOM)
    run = Run(fmt)
    FUZZERS[fmt](run, folder, random.Random(seed), cases)
    report = {"format": fmt, "cases": run.cases, "outcomes": dict(run.outcomes), "bad": run.bad}
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
