"""The native CPU engine: our C time loops (``cudnn_rnn/_native``) under torch's GEMMs.

Per pseudo-layer the C library, on the tensors' data pointers, runs ``torch.get_num_threads()``
threads (torch's own OpenMP threads), each owning a slice of the hidden units with all gates'
rows of ``W`` and ``R`` for them: it makes its slice of the input projection (``x @ W^T``)
in passes of a few hundred rows that stay in its cache (:func:`projection_pass_rows`; without
lengths each pass just before the steps it serves), and runs the time loop with the gate math
fused after each step's product, one barrier per step (from a zero initial state, what served
models start from, the first step has no product to make: ``R h0`` is zero). Each matrix is
packed into the thread's scratch once per call, or read where it is when few rows multiply it (R
for a batch of one or a call of one step, W for a projection of at most 128 rows;
:func:`in_place_limits`), since packing costs several products of one row: by dot products below
32 rows, from 32 through the packed product's micro-kernels over the matrix's rows, with the
packed product's bits (:func:`in_place_rows_form`); at AVX-512 the
packed products' micro-kernel is 6 rows by 4 vectors, or from a batch of 7 on 8 rows by 3
(:func:`micro_kernel`; the same bits either way). A bidirectional
layer's two directions go to C in one call, which runs them at once on half the threads each
where :func:`directions_together` says so. The backward loop does the same in reverse, and the
products over all steps (the weight gradients, which reduce over the rows, the biases' sums and
the input gradient: :func:`~cudnn_rnn.engines.common.weight_grads`' two halves) are C's too
(``cr_gemm``, :func:`~cudnn_rnn.engines.native_boundary._gemm`), not a vendor's: MKL and oneDNN
split a product's sums across threads in ways that follow the thread count (MKL at AVX2 changed
the weight gradients between 1 and 2 threads, and at AVX-512 a GRU's); a layer above the first
makes its input gradient in chunks that give the gates' pages back as it goes.

Scope: CPU, float32, no projection; all four modes, any layers, both directions,
``sequence_lengths``, ``skip_input``, dropout masks from the operator, and the variants
(:mod:`~cudnn_rnn.engines.native_variant`: activations, clips, peepholes, coupled gates, the
GRU's reset gate before the product, reverse time, merges and separate stacks). Everything else
runs on the other engines (see :mod:`cudnn_rnn.engines`).

Workspace (laid out by :mod:`~cudnn_rnn.engines.native_workspace`): what each loop made, in the
input's time order, and the output of each layer below the last, which the forward writes straight
into its slot (before dropout, as the next layer's input); not the state each step started from,
which the backward reads back out of the layer's output (the operator saves the last layer's), or
``h0`` at a row's first step. With lengths, an eager training call keeps only the valid steps' rows
(:func:`_compact`). The backward writes the gates' gradients over the gates (and the GRU's ``dghn``
over ``ghn``), so it needs no second buffer of that size, the LSTM's states for ``dR`` over its cell
states once C has read them, and gives the large parts of a layer above the first back to the OS
once it has finished with them (:func:`_release`); a second backward through the same call
(``retain_graph``, gradcheck) sees the last element set and runs the forward again first.

Bits: every element, in the loops and in the backward's products, is computed the same way
whichever thread owns it (one chain of multiply-adds in increasing k for a product), so a call
gives the same bits on any number of threads, and repeats exactly (the packed and the in-place
products of the forward sum in different orders, and the rule picks one from the call's sizes,
so a sequence run alone gets bits that differ in the last place from those it gets in a larger
batch). AVX-512 and AVX2 give the same bits (both contract to FMA); the x86-64 baseline may
differ in the last place. ``CUDNN_RNN_NATIVE_ISA=avx2`` (or ``base``) runs the engine at a lower
instruction set than the machine's best (tests/engines/test_same_bits.py runs a machine without
AVX-512 that way).

Loading: the library is built by ``pip install`` (``setup.py``, optional). If it is missing or
cannot load, or ``CUDNN_RNN_NATIVE=0`` is set, :func:`available` is false and the dispatch
rule falls back to torch's kernels; a missing library is reported once with a
:class:`NativeEngineWarning`. :func:`describe` says which engine runs and why.

Modules: this one runs the loops (:func:`forward`, :func:`backward`, the rule table's
:data:`ENGINE`); :mod:`~cudnn_rnn.engines.native_library` loads and calls the library,
:mod:`~cudnn_rnn.engines.native_settings` asks and overrides its rules,
:mod:`~cudnn_rnn.engines.native_boundary` checks every tensor on its way to C (and runs the
backward's products), :mod:`~cudnn_rnn.engines.native_workspace` lays out the workspace and gives
its memory back, :mod:`~cudnn_rnn.engines.native_step` makes one step of one layer (a cell's
call), or a one-layer call without gradient (a layer's planned call), with the library's argument
records filled once. Their public names are this module's
too.
"""

from __future__ import annotations

import ctypes

import torch
from torch import Tensor

from cudnn_rnn.core.constants import CUDNN_GRU, CUDNN_LSTM
from cudnn_rnn.core.layout import Layout
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.engines.base import NOTHING, Call, Grads, Inputs, Kept, Outputs, Saved
from cudnn_rnn.engines.common import (
    WorkspaceEngine,
    input_grads,
    pseudo_layers,
    recurrent_grads,
)
from cudnn_rnn.engines.native_boundary import _OURS, _checked, _ptr, activation, boundary
from cudnn_rnn.engines.native_library import (
    ABI_VERSION,
    ENV,
    ISA_ENV,
    LIBRARY_ENV,
    MODE_CODES,
    NativeEngineWarning,
    _BackwardArgs,
    _call,
    _ForwardArgs,
    available,
    built_level_names,
    describe,
    level_names,
    library_path,
)
from cudnn_rnn.engines.native_settings import (
    BACKWARD_PRODUCTS,
    MICRO_KERNELS,
    PRODUCTS,
    directions_together,
    in_place_limits,
    in_place_rows_form,
    micro_kernel,
    projection_pass_rows,
    use_backward_products,
    use_level,
    use_micro_kernel,
    use_products,
    use_projection_passes,
)
from cudnn_rnn.engines.native_variant import (
    candidate_input,
    go_backwards,
    reverses,
    variant_args,
)
from cudnn_rnn.engines.native_workspace import (
    HUGE_BYTES,
    INPUT_GRAD_CHUNK_BYTES,
    RELEASE_BYTES,
    _advise_huge,
    _compact,
    _input_grad_releasing,
    _release,
    _split,
    _state_before,
    _workspace_numel,
)
from cudnn_rnn.engines.variant import merged as variant_merged

__all__ = [
    "ABI_VERSION",
    "BACKWARD_PRODUCTS",
    "ENGINE",
    "ENV",
    "HUGE_BYTES",
    "INPUT_GRAD_CHUNK_BYTES",
    "ISA_ENV",
    "LIBRARY_ENV",
    "MICRO_KERNELS",
    "MODE_CODES",
    "NAME",
    "PRODUCTS",
    "RELEASE_BYTES",
    "NativeEngineWarning",
    "activation",
    "available",
    "backward",
    "boundary",
    "built_level_names",
    "describe",
    "directions_together",
    "forward",
    "in_place_limits",
    "in_place_rows_form",
    "level_names",
    "library_path",
    "micro_kernel",
    "projection_pass_rows",
    "supports",
    "use_backward_products",
    "use_level",
    "use_micro_kernel",
    "use_products",
    "use_projection_passes",
]

NAME = "native"


def supports(spec: RNNSpec, device: torch.device, dtype: torch.dtype) -> bool:
    """What the native engine computes: CPU, float32, no projection, cuDNN's math or any
    variant (and it is loaded)."""
    return device.type == "cpu" and dtype == torch.float32 and spec.num_proj is None and available()


def forward(
    layout: Layout,
    params: Tensor,
    x: Tensor,
    h0: Tensor,
    c0: Tensor | None,
    lengths: Tensor | None,
    masks: Tensor | None,
    need_grad: bool,
    compact: bool = False,
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
    """The stack over time-major ``x``; returns ``(y, h_n, c_n, workspace)`` (None w/o grad).

    ``compact``: with lengths below ``steps``, the workspace keeps only the valid steps' rows
    (:func:`_ws_rows` says how many; the backward tells the two layouts apart by length).
    """
    spec = layout.spec
    steps, batch, units = int(x.shape[0]), int(x.shape[1]), spec.num_units
    dirs, gates = spec.num_dirs, spec.num_gates
    states = (spec.num_states, batch, units)
    params = boundary(params, "params", (layout.size,))
    x = boundary(x, "x", (steps, batch, spec.input_size))
    h0 = boundary(h0, "h0", states)
    c0 = boundary(c0, "c0", states) if c0 is not None else None
    lengths = boundary(lengths, "lengths", (batch,), torch.int64) if lengths is not None else None
    valid = _valid_rows(lengths, steps, batch)  # the projection skips padded steps' rows
    kept_rows = int(valid[0].numel()) if compact and valid is not None else steps * batch
    ws = x.new_empty(_workspace_numel(spec, kept_rows, 1)) if need_grad else None
    saved: list[list[Tensor]] = []
    inputs: list[Tensor] = []
    if ws is not None:
        _advise_huge(ws)
        ws[-1] = 0.0  # not used by a backward yet
        saved, inputs = _split(ws, spec, steps, batch, kept_rows)
    hn = torch.empty_like(h0)
    cn = torch.empty_like(c0) if c0 is not None else None
    common = _ForwardArgs(
        mode=MODE_CODES[spec.mode], steps=steps, batch=batch, units=units,
        threads=torch.get_num_threads(), gi_st=batch * gates * units, gi_sb=gates * units,
        lengths=_checked(lengths), y_st=batch * dirs * units, y_sb=dirs * units,
    )  # fmt: skip
    gru = spec.mode == CUDNN_GRU
    rowmap = None if valid is None else _checked(valid[1])
    common.rows = 0 if valid is None else int(valid[0].numel())
    compacted = need_grad and kept_rows < steps * batch
    if compacted:
        common.ws_rows, common.wsmap = kept_rows, rowmap
    variant = variant_args(spec)  # kept alive until the loops return
    common.variant = None if variant is None else ctypes.addressof(variant)
    # Addresses: each tensor's once, its blocks by their offsets (no views are made).
    base, h0_at, hn_at = _checked(params), _checked(h0), _ptr(hn)
    c0_at, cn_at = _checked(c0), _ptr(cn)
    assert base is not None and h0_at is not None and hn_at is not None
    layer_input = x
    merge, merged = spec.variant.merge, spec.merges_directions
    separate = spec.variant.stacks == "separate"
    for layer in range(spec.num_layers):
        # The layer's input: x; above it the layer below's output, both directions side by
        # side, or their merge (a sum, product or mean: a variant); with separate stacks each
        # direction reads its own direction's half.
        width = spec.input_size if layer == 0 else spec.mask_width
        # A compact workspace holds a layer's input as its valid rows, [rows, 1, width].
        shape = (kept_rows, 1, width) if compacted and layer > 0 else (steps, batch, width)
        if layer > 0 and merged and not separate:
            layer_input = _merged(layer_input, merge)
        if layer > 0 and masks is not None:  # the workspace keeps the output before dropout
            layer_input = layer_input * _layer_mask(masks, layer, valid if compacted else None)
        if layer > 0:  # (the first layer's is x, checked above with this shape)
            layer_input = boundary(layer_input, "the layer input", shape)
        # With a gradient, a layer below the last writes its output straight into the
        # workspace, where the backward finds it as the next layer's input (no second copy);
        # a compact workspace keeps its valid rows, gathered after the layer. The last layer's
        # is kept too where its directions are merged (kept_outputs).
        last = layer == spec.num_layers - 1
        keep = need_grad and (not last or len(inputs) == spec.num_layers)
        direct = keep and not compacted
        if direct:  # a view into the workspace: checked like any tensor C writes
            y = boundary(inputs[layer], "y", (steps, batch, dirs * units), output=True)
            y_at = _checked(y)
        else:  # made here
            y = x.new_empty(steps, batch, dirs * units)
            y_at = _ptr(y)
        assert y_at is not None
        reads = [layer_input] * dirs
        if separate and layer > 0:
            half = (*shape[:-1], units)
            halves = layer_input.chunk(2, -1)
            reads = [boundary(h.contiguous(), "the layer input", half) for h in halves]
        sources = [
            _source(layout, layer, d, read, valid, compacted) for d, read in enumerate(reads)
        ]
        loops = []  # one per direction: C runs them at once
        for d in range(dirs):
            source_at = sources[d][1] if separate else sources[0][1]
            p = layer * dirs + d
            f = layout.fused[p]
            # (a single loop fills in `common` itself: every field set below is set again by
            # any later loop, but two loops at once need structures of their own)
            args = common if spec.num_layers * dirs == 1 else _ForwardArgs.from_buffer_copy(common)
            # LSTM and RNN add both biases to the input term (C sums them once per call, as
            # torch's add would); the GRU's bR_h sits inside r * (...), so it goes apart. The
            # loop makes the input projection itself, each thread for its own units (torch's
            # matmul ran it at 95-130 GFLOP/s on our AMD machine, our micro-kernel at the
            # loop's rate).
            args.bi = base + 4 * f.b_ih.offset
            args.bi2 = None if gru else base + 4 * f.b_hh.offset
            if f.w_ih is None:  # skip_input: the input itself goes into every gate
                args.gi, args.x, args.w, args.rowmap = source_at, None, None, None
            else:
                args.gi, args.x, args.w = None, source_at, base + 4 * f.w_ih.offset
                args.input_size, args.rowmap = spec.layer_input_size(layer), rowmap
            args.reverse = reverses(spec, d)
            args.r = base + 4 * f.w_hh.offset
            args.br = base + 4 * f.b_hh.offset if gru else None
            args.peep = None if f.peephole is None else base + 4 * f.peephole.offset
            state = 4 * p * batch * units  # where pseudo-layer p's [B, H] state starts
            args.h0, args.hn = h0_at + state, hn_at + state
            args.c0 = None if c0_at is None else c0_at + state
            args.cn = None if cn_at is None else cn_at + state
            args.y = y_at + 4 * d * units
            if need_grad:  # no hseq: the backward reads each step's state out of the output
                kept = saved[p]
                args.ws_gates = _ptr(kept[0])
                args.ws_extra = _ptr(kept[1]) if len(kept) > 1 else None
            loops.append(args)
        _call("cr_forward", *loops)
        del sources
        layer_input = y
        if compacted and keep and valid is not None:  # kept (the next layer's input): valid rows
            slot = inputs[layer].view(kept_rows, dirs * units)
            torch.index_select(y.view(steps * batch, -1), 0, valid[0], out=slot)
            layer_input = inputs[layer] if not last else y
    if merged:  # a variant: the directions summed, multiplied, averaged
        layer_input = _merged(layer_input, merge)
    if go_backwards(spec):  # (a spec of one layer) its output in the loop's order
        layer_input = layer_input.flip(0)
    return layer_input, hn, cn, ws


def _source(
    layout: Layout,
    layer: int,
    d: int,
    read: Tensor,
    valid: tuple[Tensor, Tensor] | None,
    compacted: bool,
) -> tuple[Tensor, int | None]:
    """What direction ``d`` of ``layer`` reads, kept alive, and its address: the input itself in
    every gate (skip_input), or the rows the projection runs over (with lengths: the valid
    ones)."""
    if layout.fused[layer * layout.spec.num_dirs + d].w_ih is None:
        source = read.repeat(1, 1, layout.spec.num_gates)
        return source, _ptr(source)
    if valid is not None and not (compacted and layer > 0):
        source = _gather_rows(read, valid[0])  # else already the valid rows
    else:  # the layer input, or (_gather_rows) its valid rows: both from boundary
        source = read
    return source, _checked(source)


def _merged(both: Tensor, merge: str) -> Tensor:
    """A layer's output from its two directions' side by side (the variant engine's merge)."""
    return variant_merged(list(both.chunk(2, -1)), merge)


def _unmerged(grad: Tensor, both: Tensor, merge: str) -> Tensor:
    """The gradient of the two directions' outputs side by side from that of their merge."""
    if merge == "sum":
        return torch.cat([grad, grad], -1)
    if merge == "ave":
        half = grad / 2
        return torch.cat([half, half], -1)
    fw, bw = both.chunk(2, -1)  # mul
    return torch.cat([grad * bw, grad * fw], -1)


def _valid_rows(lengths: Tensor | None, steps: int, batch: int) -> tuple[Tensor, Tensor] | None:
    """With lengths below ``steps``: the rows ``t * B + b`` of valid steps, in order, and the
    row map C reads (``[T*B]`` int64, each row's place among them or -1); else None."""
    if lengths is None or int(lengths.min()) >= steps:
        return None
    valid = (torch.arange(steps)[:, None] < lengths[None, :]).reshape(-1)
    index = valid.nonzero().squeeze(1)
    rowmap = torch.full((steps * batch,), -1, dtype=torch.int64)
    rowmap[index] = torch.arange(index.numel())
    return index, boundary(rowmap, "rowmap", (steps * batch,), torch.int64)


def _gather_rows(layer_input: Tensor, index: Tensor) -> Tensor:
    """The valid steps' rows of a layer's input ``[T, B, I]``, as ``[rows, I]``."""
    width = int(layer_input.shape[-1])
    rows = layer_input.reshape(-1, width).index_select(0, index)
    return boundary(rows, "the valid rows", (int(index.numel()), width))


def _layer_mask(masks: Tensor, layer: int, valid: tuple[Tensor, Tensor] | None) -> Tensor:
    """Dropout's mask on layer ``layer``'s input ``[T, B, w]``, or its valid rows ``[rows, 1,
    w]`` where the workspace keeps only those (``valid``)."""
    mask = masks[layer - 1]
    if valid is None:
        return mask
    width = int(mask.shape[-1])
    return mask.reshape(-1, width).index_select(0, valid[0]).view(-1, 1, width)


def backward(
    layout: Layout,
    params: Tensor,
    x: Tensor,
    h0: Tensor,
    c0: Tensor | None,
    lengths: Tensor | None,
    masks: Tensor | None,
    ws: Tensor,
    y: Tensor,
    dy: Tensor,
    dhy: Tensor,
    dcy: Tensor | None,
    need_dx: bool = True,
) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """Gradients ``(dparams, dx, dh0, dc0)`` from the workspace of :func:`forward` and its
    output ``y`` (``dx`` zeros without ``need_dx``: its product is not made)."""
    spec = layout.spec
    steps, batch, units = int(x.shape[0]), int(x.shape[1]), spec.num_units
    dirs = spec.num_dirs
    states = (spec.num_states, batch, units)
    params = boundary(params, "params", (layout.size,))
    h0 = boundary(h0, "h0", states)
    c0 = boundary(c0, "c0", states) if c0 is not None else None
    lengths = boundary(lengths, "lengths", (batch,), torch.int64) if lengths is not None else None
    if go_backwards(spec):  # the loop's time order: the forward flipped its output
        y, dy = y.flip(0), dy.flip(0)
    y = boundary(y, "y", (steps, batch, spec.output_width))
    valid = _valid_rows(lengths, steps, batch)
    kept_rows = steps * batch  # the forward kept every row, or (compact) the valid ones
    if valid is not None and ws.numel() == _workspace_numel(spec, int(valid[0].numel()), 1):
        kept_rows = int(valid[0].numel())
    compacted = kept_rows < steps * batch
    ws = boundary(ws, "workspace", (_workspace_numel(spec, kept_rows, 1),))
    if bool(ws[-1] != 0):
        # A second backward through one call (retain_graph, gradcheck, jacobians): the first
        # wrote the gates' gradients over the gates (and the LSTM's states over its cell
        # states), so the forward runs again (the same inputs and masks: the same workspace,
        # bit for bit).
        fresh = forward(layout, params, x, h0, c0, lengths, masks, True, compacted)[3]
        assert fresh is not None
        ws = fresh
    ws.data[-1] = 1.0  # used from here on (.data: no version bump, which a retained graph's
    # saved workspace would then refuse)
    dhy = boundary(dhy, "dh_n", states)
    dcy = boundary(dcy, "dc_n", states) if dcy is not None else None
    # Views of .data: what the backward writes over (the gates' gradients, the LSTM's states)
    # must not move the saved workspace's version, as C's writes do not.
    saved, inputs = _split(ws.data, spec, steps, batch, kept_rows)
    weights = pseudo_layers(layout, params)
    dparams = torch.empty_like(params)  # every stored block is written below
    grads = pseudo_layers(layout, dparams)
    dh0 = torch.empty_like(dhy)
    dc0 = torch.empty_like(dcy) if dcy is not None else None
    gru = spec.mode == CUDNN_GRU
    before = candidate_input(spec)  # the GRU's second part is r * h_prev, not ghn
    variant = variant_args(spec)  # kept alive until the loops return
    common = _BackwardArgs(
        mode=MODE_CODES[spec.mode], steps=steps, batch=batch, units=units,
        threads=torch.get_num_threads(), lengths=_checked(lengths),
        dy_st=batch * dirs * units, dy_sb=dirs * units, hout_rs=dirs * units,
    )  # fmt: skip
    common.variant = None if variant is None else ctypes.addressof(variant)
    if compacted and valid is not None:
        common.ws_rows, common.wsmap = kept_rows, _checked(valid[1])
    kept_index = valid[0] if compacted and valid is not None else None
    full_lengths = None if valid is None else lengths  # None: every sequence has T steps
    # Merged directions: the workspace keeps the last layer's two outputs too (kept_outputs).
    merge, merged = spec.variant.merge, spec.merges_directions
    separate = spec.variant.stacks == "separate"

    def both(layer: int) -> Tensor:
        """Layer ``layer``'s two directions' outputs side by side, ``[T, B, 2H]``."""
        kept = inputs[layer]
        if not compacted or valid is None:
            return kept
        full = kept.new_zeros(steps * batch, dirs * units)
        return full.index_copy_(0, valid[0], kept.view(kept_rows, -1)).view(steps, batch, -1)

    if merged:  # the gradient of the last layer's directions from that of their merge
        dy = _unmerged(dy, both(spec.num_layers - 1), merge)
    d_out = boundary(dy, "dy", (steps, batch, dirs * units))
    for layer in reversed(range(spec.num_layers)):
        u = x if layer == 0 else inputs[layer - 1]
        if compacted and layer == 0 and valid is not None:  # the rows the kept ones pair with
            u = x.reshape(steps * batch, -1).index_select(0, valid[0]).view(kept_rows, 1, -1)
        if layer > 0 and merged and not separate:  # what the forward read: the merge
            u = _merged(u, merge)
        if layer > 0 and masks is not None:  # the input after dropout, as the forward used it
            u = u * _layer_mask(masks, layer, valid if compacted else None)
        # separate stacks: each direction read its own direction's half
        reads = list(u.chunk(2, -1)) if separate and layer > 0 else [u] * dirs
        # This layer's output: the states each step started from are read out of it.
        out = inputs[layer] if layer < len(inputs) else y
        out_compact = out is not y and compacted
        out_map = valid[1] if out_compact and valid is not None else None
        loops = []  # one per direction: C runs them at once
        for d in range(dirs):
            p = layer * dirs + d
            kept = saved[p]
            # The gates' gradients overwrite the gates, and the GRU's dghn its ghn, in place
            # (C reads each row before it writes it; see the check of ws[-1] above).
            dgi = kept[0]
            dghn = kept[1] if gru and not before else None
            args = _BackwardArgs.from_buffer_copy(common)
            args.reverse = reverses(spec, d)
            f = layout.fused[p]
            if f.peephole is not None:
                args.peep = _ptr(params, f.peephole.offset)
                args.dpeep = _ptr(dparams, f.peephole.offset)
            args.r = _ptr(weights[p].r)
            args.gates = _ptr(kept[0])
            args.extra = _ptr(kept[1]) if len(kept) > 1 else None
            args.hout, args.hout_compact = _ptr(out, d * units), int(out_compact)
            args.h0 = _ptr(h0, p * batch * units)
            args.c0 = None if c0 is None else _ptr(c0[p])
            args.dy = _ptr(d_out, d * units)
            args.dhy, args.dh0 = _ptr(dhy[p]), _ptr(dh0[p])
            args.dcy = None if dcy is None else _ptr(dcy[p])
            args.dc0 = None if dc0 is None else _ptr(dc0[p])
            args.dgi, args.dghn = _ptr(dgi), _ptr(dghn)
            loops.append(args)
        _call("cr_backward", *loops)
        d_in: Tensor | None = None
        halves: list[Tensor] = []
        for d in range(dirs):
            p = layer * dirs + d
            kept = saved[p]
            dgi = kept[0]
            # The gradient of R h' + bR in the candidate's third: the GRU's dghn, or with the
            # reset gate before the product dgi's own third, whose rows of R multiply r * h_prev
            # (which the workspace keeps in place of ghn) instead of h_prev.
            dghn = (dgi[..., 2 * units :] if before else kept[1]) if gru else None
            cand = kept[1] if before else None
            # The states each step started from, for dR: the LSTM's cell states were read by
            # C alone, so they go there (no buffer at the peak); else a transient, freed
            # before the input's gradient is made.
            own = out[..., d * units : (d + 1) * units]
            into = kept[1] if spec.mode == CUDNN_LSTM else None
            back = reverses(spec, d)
            h_prev = _state_before(own, h0[p], back, full_lengths, kept_index, out_map, into)
            recurrent_grads(spec, grads[p], h_prev, dgi, dghn, _OURS, cand)
            del h_prev
            if layer > 0 and len(kept) > 1:  # finished with: the states, or the GRU's dghn
                _release(kept[1])
            if layer > 0:  # the input's gradient as the gates' gradients are given back
                input_grads(spec, weights[p], grads[p], reads[d], dgi, None, False, _OURS)  # dW
                if separate:  # each direction's own half of the input
                    halves.append(_input_grad_releasing(weights[p], dgi, None))
                else:
                    d_in = _input_grad_releasing(weights[p], dgi, d_in)
            else:
                d_in = input_grads(spec, weights[p], grads[p], u, dgi, d_in, need_dx, _OURS)
        if halves:
            d_in = torch.cat(halves, -1)
        if 0 < layer < spec.num_layers - 1:  # this layer's output, read for its states
            _release(inputs[layer])
        if d_in is None:  # layer 0 and nothing wants the input's gradient
            return dparams, torch.zeros_like(x), dh0, dc0
        if compacted and valid is not None:  # back to [T, B, width]: padded steps' rows are 0
            width = int(d_in.shape[-1])
            full = d_in.new_zeros(steps, batch, width)
            full.view(steps * batch, width).index_copy_(0, valid[0], d_in.view(kept_rows, width))
            d_in = full
        if layer > 0 and masks is not None:
            d_in = d_in * masks[layer - 1]
        if layer > 0 and merged and not separate:  # from the merge's gradient to both halves'
            d_in = _unmerged(d_in, both(layer - 1), merge)
        if layer > 0:  # the next C call reads it as the gradient of layer - 1's output
            d_in = boundary(d_in, "the layer output's gradient", (steps, batch, dirs * units))
        d_out = d_in
    return dparams, d_out, dh0, dc0


class Native(WorkspaceEngine):
    """The engine object of the rule table (see :mod:`cudnn_rnn.engines.base`)."""

    name = NAME

    def supports(self, call: Call) -> bool:
        return supports(call.spec, call.device, call.dtype)

    def forward(self, call: Call, inputs: Inputs) -> Outputs:
        p, x, h0, c0, lengths, masks = inputs
        compact = _compact(call)
        y, hy, cy, ws = forward(call.layout, p, x, h0, c0, lengths, masks, call.need_grad, compact)
        return Outputs(y, hy, cy, ws)

    def kept(self, call: Call) -> Kept:
        if not call.need_grad:
            return NOTHING
        if _compact(call):  # the valid steps' rows: a length the lengths' values decide
            return Kept(workspace=None)
        return Kept(workspace=_workspace_numel(call.spec, call.steps * call.batch, 1))

    def backward(
        self, call: Call, saved: Saved, grads: Grads
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        s = saved
        # The module's function, looked up at each call (a test's spy there sees it).
        return backward(
            call.layout, s.params, s.x, s.h0, s.c0, s.lengths, s.masks, s.workspace, s.y,
            *grads, need_dx=s.need_dx,
        )  # fmt: skip


ENGINE = Native()
