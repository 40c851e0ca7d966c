"""Find where cuDNN put each canonical tensor in a foreign opaque buffer, from the values alone.

cuDNN calls its weight buffer opaque: the order of its regions and any alignment padding are its
own business and may differ between GPUs and versions (TF #20273: a 3-layer bidirectional LSTM
whose buffer holds 1,315,600 values for 1,312,168 parameters). A buffer written by another program
(TF1's ``opaque_kernel``, its optimizer slots) is therefore never assumed to be in our layout:
:func:`discover` locates it, given the canonical tensors that describe the same model::

    matrices   every stored canonical matrix is found by value: each occurrence of its
               row-major run of bits (so -0.0, NaN payloads and all compare exactly); one
               occurrence each, or, where values repeat (equal or zero matrices, zero
               padding), the one placement that keeps the matrices in canonical order
               (pseudo-layers in order, input before recurrent, gates in order: the
               order of every layout ever observed). Several placements: refused.
    biases     the space left (minus padding) holds the bias vectors, in canonical order:
               per pseudo-layer bW_0..bW_{G-1} then bR_0..bR_{G-1}. Each block of G
               vectors (or each vector) starts at the next free multiple of an alignment
               ``a`` (1, 2, 4, ... elements); every (a, unit) is tried, and a placement
               is kept when each bias pair adds up to the canonical bias and each
               exactly known bias (GRU candidate, legacy checkpoints) matches by value.

A pair "adds up" when ``bW + bR``, computed in the buffer's dtype, is the stored sum or one unit in
the last place away from it. TF saved ``bW + bR`` computed by one IEEE addition in that dtype, so
the sum is exact in practice (it is, in every fixture); the one-ulp slack covers a device that
rounded the addition differently (half precision summed through float32), and garbage cannot pass
it for every element of every bias. Two placements that read different values are ambiguous and
refused.

The result is a :class:`ForeignLayout` whose ``gather`` index maps the foreign buffer, and any
buffer laid out like it (optimizer slots), into ours: ``ours = foreign[gather]``; padding is
dropped. Our own offsets come from :mod:`cudnn_rnn.core.layout`, never from here. NumPy only.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from cudnn_rnn.core.gates import CUDNN_GATES
from cudnn_rnn.core.layout import INPUT_BIAS, RECURRENT_BIAS, Layout, Param, layout_of
from cudnn_rnn.core.spec import RNNSpec

__all__ = ["ForeignLayout", "LayoutNotFound", "discover"]

#: Candidate placements of one matrix verified element by element once this few are left.
_VERIFY_AT = 64
_UNSIGNED = {2: np.uint16, 4: np.uint32, 8: np.uint64}


class LayoutNotFound(ValueError):
    """No layout of the foreign buffer fits the canonical tensors (``problems`` says why)."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


@dataclass(frozen=True)
class ForeignLayout:
    """Where each stored canonical tensor of ``spec`` lives in a foreign buffer of ``size``."""

    spec: RNNSpec
    size: int
    #: Foreign offset of each stored tensor, keyed by its index in ``weights + biases`` of the
    #: layout table.
    offsets: Mapping[int, int]
    #: Bias placement found: alignment in elements, and "block" (G vectors) or "vector".
    alignment: int
    unit: str
    #: ``ours = foreign[gather]``: one foreign index per element of our buffer.
    gather: np.ndarray

    @property
    def padding(self) -> int:
        """Elements of the foreign buffer that hold no parameter."""
        return self.size - len(self.gather)

    def to_ours(self, foreign: np.ndarray) -> np.ndarray:
        """A buffer laid out like the foreign one, in our layout (padding dropped)."""
        if foreign.shape != (self.size,):
            raise ValueError(
                f"ForeignLayout.to_ours: expected a 1-D buffer of {self.size} elements, got "
                f"shape {foreign.shape}."
            )
        out: np.ndarray = foreign[self.gather]
        return out


def discover(
    spec: RNNSpec,
    buffer: np.ndarray,
    weights: Sequence[np.ndarray],
    biases: Sequence[np.ndarray | None],
    sums: Mapping[tuple[int, int, str], np.ndarray],
    *,
    companions: Sequence[np.ndarray] = (),
) -> ForeignLayout:
    """The layout of ``buffer`` (1-D, float16/32/64), a cuDNN buffer of the model ``spec``.

    ``weights``: our canonical weights (``layout_of(spec).weights`` order; those not stored,
    skip_input's, are ignored). ``biases``: the value of each canonical bias where it is known
    exactly, else None. ``sums``: ``bW_g + bR_g`` by (layer, direction, gate) for each pair whose
    values are not known. ``companions``: buffers laid out like ``buffer`` (optimizer slots) that
    must read the same under every placement that fits, for an ambiguity to be harmless.
    Raises :class:`LayoutNotFound` when no placement fits or several read different values.
    """
    layout = layout_of(spec)
    if buffer.ndim != 1 or buffer.dtype.itemsize not in _UNSIGNED or buffer.dtype.kind != "f":
        raise LayoutNotFound([f"the buffer must be 1-D float16/32/64, got {buffer.dtype}"])
    if buffer.size < layout.size:
        raise LayoutNotFound(
            [f"the buffer holds {buffer.size} values, fewer than the {layout.size} parameters"]
        )
    bits = buffer.view(_UNSIGNED[buffer.dtype.itemsize])
    stored = [(i, p) for i, p in enumerate(layout.weights) if p.offset is not None]
    matrices = _place_matrices(bits, [(p, weights[i]) for i, p in stored], buffer.dtype)
    found_w = {i: off for (i, _), off in zip(stored, matrices)}
    free = _free_runs(buffer.size, [(off, p.size) for (_, p), off in zip(stored, matrices)])
    nw = len(layout.weights)
    fits: list[tuple[int, str, dict[int, int]]] = []
    tried: list[str] = []
    for unit in ("block", "vector"):
        for a in _alignments(buffer.size):
            placed = _place_biases(layout, free, a, unit)
            if placed is None:
                continue
            why = _bias_mismatch(layout, buffer, placed, biases, sums)
            if why is None:
                fits.append((a, unit, placed))
            elif not tried:
                tried.append(why)
    if not fits:
        raise LayoutNotFound(
            [
                "the matrices were found, but no placement of the biases in the space left "
                f"adds up to the canonical biases (packed: {tried[0] if tried else 'no room'})"
            ]
        )
    results = []
    for a, unit, placed in fits:
        offsets = {**found_w, **{nw + j: off for j, off in placed.items()}}
        results.append(ForeignLayout(spec, buffer.size, offsets, a, unit, _gather(layout, offsets)))
    first = results[0]
    for other in results[1:]:
        for arr in (buffer, *companions):
            if not np.array_equal(
                arr[first.gather].view(bits.dtype), arr[other.gather].view(bits.dtype)
            ):
                raise LayoutNotFound(
                    [
                        f"the biases fit two placements (alignment {first.alignment} per "
                        f"{first.unit} and {other.alignment} per {other.unit}) that read "
                        "different values; the layout is ambiguous"
                    ]
                )
    return first


def _label(p: Param) -> str:
    gate = f" gate {p.gate}" if p.gate else ""
    return f"layer {p.layer} {'bw' if p.direction else 'fw'} {p.kind} matrix{gate} {p.shape}"


def _occurrences(bits: np.ndarray, needle: np.ndarray) -> np.ndarray:
    """Every start where ``needle`` (a 1-D run of bits) occurs in ``bits``, ascending."""
    n = needle.size
    cands = np.flatnonzero(bits[: bits.size - n + 1] == needle[0])
    j = 1
    while j < n and cands.size > _VERIFY_AT:
        cands = cands[bits[cands + j] == needle[j]]
        j += 1
    if j < n and cands.size:
        keep = [c for c in cands.tolist() if np.array_equal(bits[c + j : c + n], needle[j:])]
        cands = np.asarray(keep, dtype=np.int64)
    return cands


def _place_matrices(
    bits: np.ndarray, wanted: Sequence[tuple[Param, np.ndarray]], dtype: np.dtype
) -> list[int]:
    """One foreign offset per matrix, unique or forced by canonical order."""
    found: list[np.ndarray] = []
    missing = []
    for p, w in wanted:
        if w.dtype != dtype or w.shape != p.shape:
            raise LayoutNotFound(
                [f"{_label(p)}: canonical value has {w.dtype} {w.shape}, expected {dtype}"]
            )
        occ = _occurrences(bits, np.ascontiguousarray(w).reshape(-1).view(bits.dtype))
        if occ.size == 0:
            missing.append(_label(p))
        found.append(occ)
    if missing:
        more = f" and {len(missing) - 2} more" if len(missing) > 2 else ""
        raise LayoutNotFound(
            [
                f"{len(missing)} of {len(wanted)} matrices are nowhere in the buffer: "
                f"{'; '.join(missing[:2])}{more}"
            ]
        )
    sizes = [p.size for p, _ in wanted]
    if all(f.size == 1 for f in found):
        offsets = [int(f[0]) for f in found]
        spans = sorted(zip(offsets, sizes))
        if all(a + n <= b for (a, n), (b, _) in itertools.pairwise(spans)):
            return offsets
    # Values repeat: the matrices must keep canonical order; the leftmost and the rightmost
    # such placements bound every other, so they agree exactly when the placement is forced.
    left: list[int] = []
    pos = 0
    for f, n in zip(found, sizes):
        at = f[f >= pos]
        if at.size == 0:
            left = []
            break
        left.append(int(at[0]))
        pos = left[-1] + n
    right: list[int] = []
    end = bits.size
    for f, n in zip(reversed(found), reversed(sizes)):
        at = f[f + n <= end]
        if at.size == 0:
            right = []
            break
        right.append(int(at[-1]))
        end = right[-1]
    right.reverse()
    if not left or not right:
        raise LayoutNotFound(["the matrices are in the buffer, but not in canonical order"])
    if left != right:
        k = next(i for i, (a, b) in enumerate(zip(left, right)) if a != b)
        raise LayoutNotFound(
            [
                f"{_label(wanted[k][0])} matches at several offsets ({left[k]} and {right[k]} "
                "among them) that keep the canonical order; the layout is ambiguous"
            ]
        )
    return left


def _free_runs(size: int, used: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The [start, end) runs of the buffer that no matrix occupies, in order."""
    runs, pos = [], 0
    for start, n in sorted(used):
        if start > pos:
            runs.append((pos, start))
        pos = max(pos, start + n)
    if pos < size:
        runs.append((pos, size))
    return runs


def _alignments(size: int) -> list[int]:
    out, a = [], 1
    while a <= size:
        out.append(a)
        a *= 2
    return out


def _bias_units(layout: Layout, unit: str) -> list[list[int]]:
    """Indices into ``layout.biases`` of each unit placed as one run, in canonical order."""
    groups: dict[tuple[int, int, str], list[int]] = {}
    for j, p in enumerate(layout.biases):
        groups.setdefault((p.layer, p.direction, p.kind), []).append(j)
    blocks = list(groups.values())
    return blocks if unit == "block" else [[j] for block in blocks for j in block]


def _place_biases(
    layout: Layout, free: Sequence[tuple[int, int]], a: int, unit: str
) -> dict[int, int] | None:
    """Bias index -> foreign offset, each unit at the next free multiple of ``a``."""
    placed: dict[int, int] = {}
    pos, run = 0, 0
    for members in _bias_units(layout, unit):
        length = sum(layout.biases[j].size for j in members)
        while run < len(free):
            start, end = free[run]
            at = -(-max(start, pos) // a) * a
            if at + length <= end:
                break
            run += 1
        else:
            return None
        for j in members:
            placed[j] = at
            at += layout.biases[j].size
        pos = at
    return placed


def _bias_mismatch(
    layout: Layout,
    buffer: np.ndarray,
    placed: Mapping[int, int],
    biases: Sequence[np.ndarray | None],
    sums: Mapping[tuple[int, int, str], np.ndarray],
) -> str | None:
    """Why the placed biases do not fit the canonical ones, or None when they do."""
    by_key = {(p.layer, p.direction, p.kind, p.gate): j for j, p in enumerate(layout.biases)}

    def at(j: int) -> np.ndarray:
        return buffer[placed[j] : placed[j] + layout.biases[j].size]

    for j, value in enumerate(biases):
        if value is not None and not np.array_equal(
            at(j).view(np.uint8), np.ascontiguousarray(value, buffer.dtype).view(np.uint8)
        ):
            p = layout.biases[j]
            return f"layer {p.layer} {p.kind} gate {p.gate} differs from its known value"
    for layer in range(layout.spec.num_layers):
        for d in range(layout.spec.num_dirs):
            for g in CUDNN_GATES[layout.spec.mode]:
                want = sums.get((layer, d, g))
                if want is None:
                    continue
                w = at(by_key[layer, d, INPUT_BIAS, g])
                r = at(by_key[layer, d, RECURRENT_BIAS, g])
                want = np.asarray(want, buffer.dtype)
                got = w + r
                if not np.all((got == want) | (np.abs(got - want) <= np.spacing(np.abs(want)))):
                    return f"layer {layer} gate {g}: bW + bR is not the canonical bias"
    return None


def _gather(layout: Layout, offsets: Mapping[int, int]) -> np.ndarray:
    gather = np.empty(layout.size, dtype=np.int64)
    for i, p in enumerate(layout.weights + layout.biases):
        if p.offset is not None:
            gather[p.offset : p.offset + p.size] = np.arange(offsets[i], offsets[i] + p.size)
    return gather
