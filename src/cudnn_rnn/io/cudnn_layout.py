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

The search costs about the buffer's size, whatever its values (all-zero or periodic matrices
included), where narrowing candidate offsets one element at a time cost its square. Every window
of the buffer as long as a matrix gets a 64-bit key: of its elements' hashes ``h`` (a salted
mix of their bits), the sum and the polynomial ``sum h_k * B**k`` modulo 2**64 (``B`` odd), each
a difference of running prefix sums; one pass per distinct matrix size (at most four), memory
bounded by a chunk of windows. Salt and base are drawn per discovery. A window whose key is a
matrix's is a candidate, verified bit for bit only where the placement needs it: a matrix's
first occurrence, whether it has a second, and the leftmost and rightmost placements in
canonical order (random probes first, so a window that only collides costs a few comparisons;
equal matrices share one search). Natural buffers need about 2 hashings per element per matrix
size plus at most 4 comparisons (3 per element measured with one size, 5 with two). The work
(elements hashed or compared) is counted and reported as ``ForeignLayout.work``; past
:data:`WORK_PER_ELEMENT` per element of the buffer plus :data:`WORK_FLOOR` (only a buffer built
to collide gets there) discovery is refused with :class:`LayoutNotFound`. The bias step tries
two units times a logarithmic number of alignments, each in time linear in the biases.

The result is a :class:`ForeignLayout` whose ``gather`` index maps the foreign buffer, and any
buffer laid out like it (optimizer slots), into ours: ``ours = foreign[gather]``; padding is
dropped. Our own offsets come from :mod:`cudnn_rnn.core.layout`, never from here. NumPy only.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from cudnn_rnn.core.gates import CUDNN_GATES
from cudnn_rnn.core.layout import INPUT_BIAS, RECURRENT_BIAS, Layout, Param, layout_of
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.io.files.opening import FormatError

__all__ = ["WORK_FLOOR", "WORK_PER_ELEMENT", "ForeignLayout", "LayoutNotFound", "discover"]

#: The work budget of one discovery, in elements hashed or compared per element of the buffer,
#: plus a floor for small buffers; past it the layout is refused as too costly to determine.
WORK_PER_ELEMENT = 32
WORK_FLOOR = 1 << 20
_UNSIGNED = {2: np.uint16, 4: np.uint32, 8: np.uint64}
#: Windows keyed per chunk: the memory of a search does not grow with the matrices' size.
_CHUNK = 1 << 18
#: Elements of a candidate compared (at random places) before the whole matrix is.
_PROBES = 16


class LayoutNotFound(FormatError):
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
    #: Elements hashed or compared to find the matrices (bounded by the work budget).
    work: int = 0

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
    budget: int | None = None,
) -> ForeignLayout:
    """The layout of ``buffer`` (1-D, float16/32/64), a cuDNN buffer of the model ``spec``.

    ``weights``: our canonical weights (``layout_of(spec).weights`` order; those not stored,
    skip_input's, are ignored). ``biases``: the value of each canonical bias where it is known
    exactly, else None. ``sums``: ``bW_g + bR_g`` by (layer, direction, gate) for each pair whose
    values are not known. ``companions``: buffers laid out like ``buffer`` (optimizer slots) that
    must read the same under every placement that fits, for an ambiguity to be harmless.
    ``budget``: the work allowed (elements hashed or compared); by default
    ``WORK_PER_ELEMENT * buffer.size + WORK_FLOOR``.
    Raises :class:`LayoutNotFound` when no placement fits, several read different values, or
    the budget is spent first.
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
    limit = WORK_PER_ELEMENT * buffer.size + WORK_FLOOR if budget is None else budget
    work = _Work(limit, buffer.size)
    matrices = _place_matrices(bits, [(p, weights[i]) for i, p in stored], buffer.dtype, work)
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
    # The fits share the matrices' offsets: only their biases can read differently.
    a0, unit0, placed0 = fits[0]
    reads = _bias_gather(layout, placed0)
    for a, unit, placed in fits[1:]:
        other = _bias_gather(layout, placed)
        for arr in (buffer, *companions):
            if not np.array_equal(arr[reads].view(bits.dtype), arr[other].view(bits.dtype)):
                raise LayoutNotFound(
                    [
                        f"the biases fit two placements (alignment {a0} per {unit0} and {a} per "
                        f"{unit}) that read different values; the layout is ambiguous"
                    ]
                )
    offsets = {**found_w, **{nw + j: off for j, off in placed0.items()}}
    return ForeignLayout(
        spec, buffer.size, offsets, a0, unit0, _gather(layout, offsets), work.spent
    )


def _label(p: Param) -> str:
    gate = f" gate {p.gate}" if p.gate else ""
    return f"layer {p.layer} {'bw' if p.direction else 'fw'} {p.kind} matrix{gate} {p.shape}"


class _Work:
    """Elements hashed or compared so far, against the budget of one discovery."""

    def __init__(self, limit: int, size: int) -> None:
        self.limit, self.size, self.spent = limit, size, 0

    def spend(self, n: int) -> None:
        self.spent += n
        if self.spent > self.limit:
            raise LayoutNotFound(
                [
                    "the layout could not be determined within the work budget "
                    f"({self.limit} elements hashed or compared, for a buffer of {self.size} "
                    "values): its values repeat in a way that makes the search too costly"
                ]
            )


_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_MOD = 1 << 64


def _mix(x: np.ndarray, salt: np.uint64) -> np.ndarray:
    """A 64-bit hash of each element: SplitMix64's finaliser of ``x + salt``."""
    z = x.astype(np.uint64) + salt
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    out: np.ndarray = z ^ (z >> np.uint64(31))
    return out


def _powers(base: int, start: int, count: int) -> np.ndarray:
    """``base ** [start, start + count)`` modulo 2**64 (uint64 products wrap modulo 2**64)."""
    run = np.full(count, base, np.uint64)
    if count:
        run[0] = pow(base, start, _MOD)
    out: np.ndarray = np.cumprod(run, dtype=np.uint64)
    return out


class _Hash:
    """A window's key: ``sum h(x_k)`` and the polynomial ``sum h(x_k) * B**k``, modulo 2**64, of
    its elements' hashes ``h``. The salt of ``h`` and the odd base ``B`` are drawn per
    discovery, so no file can be made of windows whose keys collide with a matrix's."""

    def __init__(self) -> None:
        self.salt = np.uint64(secrets.randbits(64))
        self.base = secrets.randbits(64) | 1
        self.inverse = pow(self.base, -1, _MOD)

    def key(self, s1: np.ndarray, s2: np.ndarray) -> np.ndarray:
        out: np.ndarray = s1 ^ _mix(s2, self.salt)
        return out

    def of(self, needle: np.ndarray) -> int:
        """The key of the window that holds ``needle``."""
        h = _mix(needle, self.salt)
        s1 = np.cumsum(h, dtype=np.uint64)[-1:]
        s2 = np.cumsum(h * _powers(self.base, 0, h.size), dtype=np.uint64)[-1:]
        return int(self.key(s1, s2)[0])


class _Prefix:
    """Walks the prefix sums of a buffer's element hashes, ``P1[i] = sum h[:i]`` and
    ``P2[i] = sum h[j] * B**j for j < i`` (modulo 2**64), handing out consecutive ranges."""

    def __init__(self, bits: np.ndarray, hashing: _Hash) -> None:
        self.bits, self.hashing, self.at = bits, hashing, 0
        self.t1, self.t2 = np.zeros(1, np.uint64), np.zeros(1, np.uint64)

    def take(self, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """``P1`` and ``P2`` at positions ``[at, stop)`` (``stop`` at most ``size + 1``); then
        ``at = stop``."""
        h = _mix(self.bits[self.at : stop], self.hashing.salt)
        if h.size < stop - self.at:  # P[size], the sum of all: nothing past the end adds to it
            h = np.concatenate([h, np.zeros(stop - self.at - h.size, np.uint64)])
        hb = h * _powers(self.hashing.base, self.at, h.size)
        c1, c2 = np.cumsum(h, dtype=np.uint64), np.cumsum(hb, dtype=np.uint64)
        p1, p2 = self.t1 + c1 - h, self.t2 + c2 - hb
        if h.size:
            self.t1 += c1[-1]
            self.t2 += c2[-1]
        self.at = stop
        return p1, p2


def _candidates(
    bits: np.ndarray, n: int, needles: Sequence[np.ndarray], work: _Work
) -> list[np.ndarray]:
    """For each needle (``n`` elements), the ascending starts of every window of ``bits`` whose
    key is the needle's: each occurrence among them (maybe others, which verification drops).

    Two prefix-sum walks, one ``n`` ahead of the other, key every window in one pass of about
    twice the buffer, ``_CHUNK`` windows at a time: window ``i`` has ``P1[i + n] - P1[i]`` and
    ``(P2[i + n] - P2[i]) * B**-i`` (B is odd: it has an inverse modulo 2**64).
    """
    windows = bits.size - n + 1
    if windows <= 0:
        return [np.zeros(0, np.int64) for _ in needles]
    work.spend(2 * windows + n)
    hashing = _Hash()
    keys = np.array([hashing.of(nd) for nd in needles], dtype=np.uint64)
    unique, which_needle = np.unique(keys, return_inverse=True)
    lag, lead = _Prefix(bits, hashing), _Prefix(bits, hashing)
    lead.take(n)
    index = np.int32 if bits.size < 2**31 else np.int64
    found: list[list[np.ndarray]] = [[] for _ in unique]
    for s in range(0, windows, _CHUNK):
        e = min(s + _CHUNK, windows)
        lo1, lo2 = lag.take(e)
        hi1, hi2 = lead.take(e + n)
        key = hashing.key(hi1 - lo1, (hi2 - lo2) * _powers(hashing.inverse, s, e - s))
        at = np.minimum(np.searchsorted(unique, key), unique.size - 1)
        hit = np.flatnonzero(unique[at] == key)
        if unique.size == 1:
            found[0].append((hit + s).astype(index))
            continue
        who = at[hit]
        order = np.argsort(who, kind="stable")  # by key, each group still ascending
        cuts = np.cumsum(np.bincount(who, minlength=unique.size))[:-1]
        for u, part in enumerate(np.split((hit[order] + s).astype(index), cuts)):
            found[u].append(part)
    groups = [np.concatenate(parts) for parts in found]
    return [groups[u] for u in which_needle]  # needles with equal keys share one array


class _Matches:
    """The occurrences of one needle among its candidates, each verified once when asked for."""

    def __init__(self, bits: np.ndarray, needle: np.ndarray, cands: np.ndarray, work: _Work):
        self.bits, self.needle, self.cands, self.work = bits, needle, cands, work
        # Probes at places drawn per discovery: a window made to differ elsewhere cannot
        # count on passing them.
        rng = np.random.default_rng(secrets.randbits(64))
        self.probes = np.unique(rng.integers(0, needle.size, _PROBES))
        self.known: dict[int, bool] = {}

    def _verify(self, start: int) -> bool:
        known = self.known.get(start)
        if known is None:
            n = self.needle.size
            self.work.spend(self.probes.size)
            known = bool(np.array_equal(self.bits[start + self.probes], self.needle[self.probes]))
            if known:
                self.work.spend(n)
                known = bool(np.array_equal(self.bits[start : start + n], self.needle))
            self.known[start] = known
        return known

    def first(self, at_least: int) -> int | None:
        """The first occurrence starting at ``at_least`` or after."""
        for k in range(int(np.searchsorted(self.cands, at_least)), self.cands.size):
            if self._verify(int(self.cands[k])):
                return int(self.cands[k])
        return None

    def last(self, at_most: int) -> int | None:
        """The last occurrence starting at ``at_most`` or before."""
        for k in range(int(np.searchsorted(self.cands, at_most, side="right")) - 1, -1, -1):
            if self._verify(int(self.cands[k])):
                return int(self.cands[k])
        return None


def _place_matrices(
    bits: np.ndarray, wanted: Sequence[tuple[Param, np.ndarray]], dtype: np.dtype, work: _Work
) -> list[int]:
    """One foreign offset per matrix, unique or forced by canonical order."""
    needles: list[np.ndarray] = []
    for p, w in wanted:
        if w.dtype != dtype or w.shape != p.shape:
            raise LayoutNotFound(
                [f"{_label(p)}: canonical value has {w.dtype} {w.shape}, expected {dtype}"]
            )
        needles.append(np.ascontiguousarray(w).reshape(-1).view(bits.dtype))
    # Equal matrices (a zero initialisation makes many) share one search and its verifications.
    distinct: dict[bytes, int] = {}
    which = [distinct.setdefault(nd.tobytes(), len(distinct)) for nd in needles]
    unique = [needles[which.index(u)] for u in range(len(distinct))]
    by_size: dict[int, list[int]] = {}
    for u, nd in enumerate(unique):
        by_size.setdefault(nd.size, []).append(u)
    matches: list[_Matches | None] = [None] * len(unique)
    with np.errstate(over="ignore"):  # the keys are sums modulo 2**64
        for n, us in by_size.items():
            for u, cands in zip(us, _candidates(bits, n, [unique[u] for u in us], work)):
                matches[u] = _Matches(bits, unique[u], cands, work)
    found = [m for m in (matches[u] for u in which) if m is not None]
    firsts = [m.first(0) for m in found]
    missing = [_label(p) for (p, _), f in zip(wanted, firsts) if f is None]
    if missing:
        more = f" and {len(missing) - 2} more" if len(missing) > 2 else ""
        raise LayoutNotFound(
            [
                f"{len(missing)} of {len(wanted)} matrices are nowhere in the buffer: "
                f"{'; '.join(missing[:2])}{more}"
            ]
        )
    sizes = [p.size for p, _ in wanted]
    offsets = [int(f) for f in firsts if f is not None]
    if all(m.first(f + 1) is None for m, f in zip(found, offsets)):  # one occurrence each
        spans = sorted(zip(offsets, sizes))
        if all(a + n <= b for (a, n), (b, _) in itertools.pairwise(spans)):
            return offsets
    # Values repeat: the matrices must keep canonical order; the leftmost and the rightmost
    # such placements bound every other, so they agree exactly when the placement is forced.
    left: list[int] = []
    pos = 0
    for m, n in zip(found, sizes):
        at = m.first(pos)
        if at is None:
            left = []
            break
        left.append(at)
        pos = at + n
    right: list[int] = []
    end = bits.size
    for m, n in zip(reversed(found), reversed(sizes)):
        at = m.last(end - n)
        if at is None:
            right = []
            break
        right.append(at)
        end = at
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


def _bias_gather(layout: Layout, placed: Mapping[int, int]) -> np.ndarray:
    """The foreign index of each bias element, in our order of the biases."""
    parts = [np.arange(placed[j], placed[j] + p.size) for j, p in enumerate(layout.biases)]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def _gather(layout: Layout, offsets: Mapping[int, int]) -> np.ndarray:
    gather = np.empty(layout.size, dtype=np.int64)
    for i, p in enumerate(layout.weights + layout.biases):
        if p.offset is not None:
            gather[p.offset : p.offset + p.size] = np.arange(offsets[i], offsets[i] + p.size)
    return gather
