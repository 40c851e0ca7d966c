"""The parameter layout: the only place that knows where each canonical tensor lives.

Canonical order (what ``params_to_canonical`` returns) is all weights, then all biases; inside
each, pseudo-layers ``p = layer * num_dirs + dir`` in order. For one pseudo-layer with ``G`` gates
(LSTM i f c o, GRU r u h, RNN h), ``H = num_units``, ``P = num_proj``, ``Hout = P or H``::

    weights:  W_0 .. W_{G-1}    [H, in_l]   input matrices   (in_0 = input_size, in_l = D*Hout)
              R_0 .. R_{G-1}    [H, Hout]   recurrent matrices
              W_proj            [P, H]      LSTM with num_proj only
    biases:   bW_0 .. bW_{G-1}  [H]         input biases
              bR_0 .. bR_{G-1}  [H]         recurrent biases
              P_i, P_f, P_o     [H]         LSTM with peepholes only (a variant)

The opaque buffer is these tensors flattened row-major, back to back, in canonical order::

    | p0: W.. R.. [Wp] | p1: W.. R.. [Wp] | ... | p0: bW.. bR.. [P..] | p1: ... | ... |
    '------------- all weight matrices ----------'--------------- all biases --------------'

A variant's layer above the first reads the width :meth:`RNNSpec.layer_input_size` says (one
direction's output when the directions are summed or are stacks of their own); the peepholes,
which cuDNN does not have, sit after their pseudo-layer's biases.

(cuDNN's own layout as far as public evidence shows; see docs). With ``skip_input`` layer 0 has no
input matrices: they take no space in the buffer (their entries have ``offset=None``), and
:meth:`Layout.unpack` returns identity matrices in their place so the canonical form always
describes the full math. Because the ``G`` matrices of one kind are adjacent, each run is also one
``[G*H, width]`` block: exactly the stacked tensor that torch's fused kernels (and cuDNN) take,
which :meth:`Layout.fused` describes.

Pack and unpack work on NumPy arrays and torch tensors alike, by slicing and reshaping only; this
module never imports torch.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cudnn_rnn.core.gates import CUDNN_GATES
from cudnn_rnn.core.spec import RNNSpec

INPUT = "input"
RECURRENT = "recurrent"
PROJECTION = "projection"
INPUT_BIAS = "input_bias"
RECURRENT_BIAS = "recurrent_bias"
PEEPHOLE = "peephole"
#: The gates a peephole feeds, in the order of the canonical list (ONNX's ``P`` is ``i, o, f``).
PEEPHOLE_GATES = ("i", "f", "o")


@dataclass(frozen=True)
class Param:
    """One canonical tensor: where it belongs in the model and where it lives in the buffer."""

    index: int  # position in its canonical list (weights or biases)
    layer: int
    direction: int  # 0 forward, 1 backward
    kind: str  # INPUT, RECURRENT, PROJECTION, INPUT_BIAS, RECURRENT_BIAS or PEEPHOLE
    gate: str | None  # canonical gate name; None for the projection
    shape: tuple[int, ...]
    offset: int | None  # element offset in the opaque buffer; None when not stored (skip_input)

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class Block:
    """A contiguous run of the buffer viewed as one tensor of ``shape``."""

    offset: int
    shape: tuple[int, ...]


@dataclass(frozen=True)
class FusedParams:
    """One pseudo-layer's tensors in the stacked form torch.nn / cuDNN use.

    ``w_ih`` is None under skip_input (layer 0 has no input matrices); ``w_hr`` is None without
    projection; ``peephole`` (``[3 * H]``: ``P_i, P_f, P_o``) is None without peepholes.
    """

    w_ih: Block | None
    w_hh: Block
    b_ih: Block
    b_hh: Block
    w_hr: Block | None
    peephole: Block | None = None


@dataclass(frozen=True)
class Layout:
    """The table of every canonical tensor of a spec, with the opaque buffer's size."""

    spec: RNNSpec
    weights: tuple[Param, ...]
    biases: tuple[Param, ...]
    size: int
    #: Stacked blocks per pseudo-layer (``layer * num_dirs + dir``), for the fused kernels.
    fused: tuple[FusedParams, ...]
    #: The same blocks in buffer order; they tile the buffer exactly.
    blocks: tuple[Block, ...]

    @property
    def kernel_blocks(self) -> tuple[Block | None, ...]:
        """The fused kernels' tensor list (torch's and cuDNN's): per pseudo-layer ``w_ih, w_hh,
        b_ih, b_hh`` and, with projection, ``w_hr``; None where not stored (skip_input)."""
        out: list[Block | None] = []
        for f in self.fused:
            out += [f.w_ih, f.w_hh, f.b_ih, f.b_hh]
            if f.w_hr is not None:
                out.append(f.w_hr)
        return tuple(out)

    @property
    def kernel_order(self) -> tuple[int, ...]:
        """Indices into :attr:`kernel_blocks` of the stored blocks, in buffer order: the flat
        tensors concatenated in this order are the opaque buffer."""
        stored = [(b.offset, i) for i, b in enumerate(self.kernel_blocks) if b is not None]
        return tuple(i for _, i in sorted(stored))

    def unpack(self, flat: Any) -> tuple[list[Any], list[Any]]:
        """Canonical (weights, biases) of a 1-D buffer, as views (identity where not stored)."""

        def view(p: Param) -> Any:
            if p.offset is None:
                return _eye_like(flat, p.shape[0])
            return flat[p.offset : p.offset + p.size].reshape(p.shape)

        return [view(p) for p in self.weights], [view(p) for p in self.biases]

    def pack(self, weights: Sequence[Any], biases: Sequence[Any], owner: str = "pack") -> Any:
        """The 1-D buffer of canonical (weights, biases); arrays or tensors of one kind.

        Checks counts and shapes, and that matrices with no storage (skip_input) are identity.
        """
        for name, given, table in (
            ("weights", weights, self.weights),
            ("biases", biases, self.biases),
        ):
            if len(given) != len(table):
                raise ValueError(
                    f"{owner}: expected {len(table)} canonical {name} for {_describe(self.spec)}, "
                    f"got {len(given)}."
                )
            bad = [
                f"#{p.index} ({_label(p)}) expected {p.shape}, got {tuple(t.shape)}"
                for p, t in zip(table, given)
                if tuple(t.shape) != p.shape
            ]
            if bad:
                raise ValueError(
                    f"{owner}: wrong shape of canonical {name}: " + "; ".join(bad) + "."
                )
        ref = weights[0]
        out = (
            np.empty(self.size, ref.dtype)
            if isinstance(ref, np.ndarray)
            else ref.new_empty(self.size)
        )
        for p, t in zip(self.weights + self.biases, list(weights) + list(biases)):
            if p.offset is None:
                if not _is_identity(t):
                    raise ValueError(
                        f"{owner}: canonical weight #{p.index} ({_label(p)}) must be the identity "
                        "matrix: with skip_input layer 0 adds its input to each gate as is and "
                        "stores no input matrices."
                    )
                continue
            out[p.offset : p.offset + p.size] = t.reshape(-1)
        return out


def params_size(spec: RNNSpec) -> int:
    """Number of elements of the opaque buffer of ``spec``."""
    return layout_of(spec).size


@functools.lru_cache(maxsize=256)
def layout_of(spec: RNNSpec) -> Layout:
    """The (cached) layout table of ``spec``."""
    gates = CUDNN_GATES[spec.mode]
    h, hout = spec.num_units, spec.output_units
    weights: list[Param] = []
    biases: list[Param] = []
    offset = 0

    def add(
        table: list[Param],
        layer: int,
        d: int,
        kind: str,
        gate: str | None,
        shape: tuple[int, ...],
        stored: bool = True,
    ) -> None:
        nonlocal offset
        table.append(Param(len(table), layer, d, kind, gate, shape, offset if stored else None))
        if stored:
            offset += math.prod(shape)

    for layer in range(spec.num_layers):
        for d in range(spec.num_dirs):
            stored = not (layer == 0 and spec.skip_input)
            for g in gates:
                add(weights, layer, d, INPUT, g, (h, spec.layer_input_size(layer)), stored)
            for g in gates:
                add(weights, layer, d, RECURRENT, g, (h, hout))
            if spec.num_proj is not None:
                add(weights, layer, d, PROJECTION, None, (spec.num_proj, h))
    for layer in range(spec.num_layers):
        for d in range(spec.num_dirs):
            for kind in (INPUT_BIAS, RECURRENT_BIAS):
                for g in gates:
                    add(biases, layer, d, kind, g, (h,))
            if spec.variant.peepholes:
                for g in PEEPHOLE_GATES:
                    add(biases, layer, d, PEEPHOLE, g, (h,))
    fused = _fused(spec, weights + biases)
    blocks = sorted(
        (
            b
            for f in fused
            for b in (f.w_ih, f.w_hh, f.w_hr, f.b_ih, f.b_hh, f.peephole)
            if b is not None
        ),
        key=lambda b: b.offset,
    )
    ends = [b.offset + math.prod(b.shape) for b in blocks]
    if [b.offset for b in blocks] != [0, *ends[:-1]] or ends[-1] != offset:
        raise AssertionError(f"layout: the stacked blocks of {spec} do not tile the buffer")
    return Layout(spec, tuple(weights), tuple(biases), offset, fused, tuple(blocks))


def _fused(spec: RNNSpec, table: list[Param]) -> tuple[FusedParams, ...]:
    def block(params: list[Param]) -> Block | None:
        if not params or params[0].offset is None:
            return None
        start = params[0].offset
        # The stacked view is only valid because same-kind gate tensors are adjacent.
        if any(p.offset != start + i * params[0].size for i, p in enumerate(params)):
            raise AssertionError(f"layout: tensors of {_label(params[0])} are not contiguous")
        return Block(start, (sum(p.shape[0] for p in params), *params[0].shape[1:]))

    def required(params: list[Param]) -> Block:
        found = block(params)
        if found is None:
            raise AssertionError("layout: recurrent matrices and biases are always stored")
        return found

    # Grouped once: a scan of the table per layer-direction would make a layout of N layers
    # cost O(N^2) (a MultiRNNCell of thousands of layers).
    groups: dict[tuple[int, int, str], list[Param]] = {}
    for p in table:
        groups.setdefault((p.layer, p.direction, p.kind), []).append(p)

    def of(layer: int, d: int, kind: str) -> list[Param]:
        return groups.get((layer, d, kind), [])

    out = []
    for layer in range(spec.num_layers):
        for d in range(spec.num_dirs):
            out.append(
                FusedParams(
                    w_ih=block(of(layer, d, INPUT)),
                    w_hh=required(of(layer, d, RECURRENT)),
                    b_ih=required(of(layer, d, INPUT_BIAS)),
                    b_hh=required(of(layer, d, RECURRENT_BIAS)),
                    w_hr=block(of(layer, d, PROJECTION)),
                    peephole=block(of(layer, d, PEEPHOLE)),
                )
            )
    return tuple(out)


def _label(p: Param) -> str:
    gate = f" gate {p.gate}" if p.gate else ""
    return f"layer {p.layer} {'bw' if p.direction else 'fw'} {p.kind}{gate}"


def _describe(spec: RNNSpec) -> str:
    proj = f", num_proj={spec.num_proj}" if spec.num_proj is not None else ""
    return (
        f"{spec.mode} (num_layers={spec.num_layers}, num_units={spec.num_units}, "
        f"input_size={spec.input_size}, {spec.direction}{proj})"
    )


def _eye_like(ref: Any, n: int) -> Any:
    if isinstance(ref, np.ndarray):
        return np.eye(n, dtype=ref.dtype)
    return ref.new_zeros((n, n)).fill_diagonal_(1)


def _is_identity(t: Any) -> bool:
    n = t.shape[0]
    return bool((t.diagonal() == 1).all()) and int((t != 0).sum()) == n
