"""The ``cudnn`` engine: cuDNN itself, through aten's ``_cudnn_rnn`` and ``_cudnn_rnn_backward``.

These are the entry points ``torch.nn.LSTM/GRU/RNN`` reach on CUDA. We call them directly, with
our opaque buffer as cuDNN's flat weight buffer (``weight_buf``): the layout of
:mod:`cudnn_rnn.core.layout` is cuDNN's, so nothing is copied, and the weight gradient comes back
as one buffer in the same layout, which is the gradient of ``params`` as it is.

What aten's call does not do, this module adds around it:

* **The layout is checked, not assumed.** On its first call for a spec, dtype and device the
  engine asks cuDNN where it keeps every stacked tensor (``_cudnn_rnn_flatten_weight`` on fresh
  tensors leaves them as views into cuDNN's buffer) and compares with our layout. Where they
  agree (every GPU seen so far, docs/gpu.md) the buffer is used in place; where cuDNN pads or
  orders differently (TF #20273 saw padding), each call copies the weights into cuDNN's layout
  and the gradient back, with the same results.
* **skip_input.** aten's call has no input mode: it always multiplies layer 0's input by a
  matrix. Under ``skip_input`` the engine gives cuDNN a buffer of the ``linear_input`` model whose
  layer-0 input matrices are stacked identities (``1 * x + 0 * ...`` is exact, so this is the
  input added to every gate as is) and drops their gradient. That buffer is a copy of the weights
  on every call; ``linear_input`` models are the copy-free path.
* **Variable lengths.** cuDNN takes packed sequences sorted by length; the engine sorts the batch
  (stable), packs, runs and unpacks, so outputs past a length are exactly 0 and the final states
  come back in the caller's order. With every length ``T`` nothing is packed.
* **Dropout** between layers is cuDNN's own: the engine makes cuDNN's dropout state from this
  call's seed (the op's seed and its step counter, see :mod:`cudnn_rnn.operator`), so one seed
  gives the same masks on one device, eagerly and compiled. They are not the masks the CPU
  engines draw (as ``torch.nn``'s differ between its CPU and cuDNN kernels). Making the state
  costs a small kernel per training call with dropout.
* **The reserve.** cuDNN keeps what its backward needs in a reserve space whose length only it
  knows: the operator's reserve output, a data-dependent size in the fake implementation.
  cuDNN's backward also writes into it. The reserve is private to the call (nothing but its
  backward reads it), so the backward operator's schema does not declare that write, as aten's
  own ``_cudnn_rnn_backward`` does not: declared, autograd would refuse a second backward and a
  compiled graph could not hand the reserve on. A second backward through the same call
  (``retain_graph=True``, ``gradcheck``, jacobians) is told so by the autograd node (the
  operator's ``again``; the saved reserve comes back as a new tensor object in each backward,
  so its identity alone can miss it) and runs the forward again, from the same inputs and
  dropout seed, for a fresh reserve: the same gradients, at the cost of one forward. A compiled
  backward run twice through one graph does not pass ``again``: only the identity table
  catches that case.

* **float32 is float32.** torch lets cuDNN's float32 RNNs use TF32 by default on Ampere and
  later GPUs; each aten call of this engine runs under :func:`ieee_float32`.

Scope: CUDA, float16/float32/float64 (bfloat16 goes to the next rule: cuDNN's RNN documentation
lists half, float and double), cuDNN available and enabled (``torch.backends.cudnn``), LSTM
projection narrower than the cell (cuDNN turns projection off when ``num_proj == num_units``,
which then goes to the next rule). Everything else of the CPU engines: the four modes, layers,
directions, both input modes, batch-major input (made time-major by the layers), lengths,
dropout, with and without gradient.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import weakref
from collections.abc import Iterator
from typing import Any, NamedTuple

import torch
from torch import Tensor

from cudnn_rnn.core.constants import (
    CUDNN_INPUT_LINEAR_MODE,
)
from cudnn_rnn.core.layout import Block, Layout, layout_of
from cudnn_rnn.core.modes import MODES
from cudnn_rnn.core.spec import RNNSpec
from cudnn_rnn.engines.base import NOTHING, Call, Grads, Inputs, Kept, Outputs, Reserve, Saved
from cudnn_rnn.engines.torch_kernels import stacked_identity

NAME = "cudnn"
#: cuDNN's ``cudnnRNNMode_t`` (the mode table's codes).
MODE_CODES = {name: m.code for name, m in MODES.items()}
DTYPES = (torch.float16, torch.float32, torch.float64)


@contextlib.contextmanager
def ieee_float32(dtype: torch.dtype) -> Iterator[None]:
    """For float32, cuDNN's RNN math in IEEE float32 while the block runs, not TF32.

    torch lets cuDNN's float32 RNNs use TF32 tensor cores by default on Ampere and later GPUs
    (``torch.backends.cudnn.rnn.fp32_precision == "tf32"``): products with 10-bit mantissas,
    about 1e-3 relative error. Our float32 is float32, as TF1's kernels and the CPU engines
    compute it, so the engine asks for IEEE math around each forward and backward call and puts
    the setting back after (it is torch's process-wide setting: another thread's cuDNN RNN
    running at that instant sees it too). Older torch has only the ``allow_tf32`` switch.
    """
    if dtype != torch.float32:
        yield
        return
    getter = getattr(torch._C, "_get_fp32_precision_getter", None)
    if getter is not None:
        setter = torch._C._set_fp32_precision_setter
        before = getter("cuda", "rnn")
        setter("cuda", "rnn", "ieee")
        try:
            yield
        finally:
            setter("cuda", "rnn", before)
    else:  # torch before 2.9
        allowed = torch._C._get_cudnn_allow_tf32()
        torch._C._set_cudnn_allow_tf32(False)
        try:
            yield
        finally:
            torch._C._set_cudnn_allow_tf32(allowed)


class Aten:
    """The aten entry points the engine calls (tests on a CPU put a stand-in here)."""

    device_type = "cuda"

    def available(self) -> bool:
        """cuDNN is there and the user has not switched it off (``torch.backends.cudnn``)."""
        cudnn = torch.backends.cudnn
        return bool(cudnn.is_available() and cudnn.enabled)  # type: ignore[no-untyped-call]

    def rnn(self, *args: Any) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        with ieee_float32(args[0].dtype):
            return torch.ops.aten._cudnn_rnn(*args)  # type: ignore[no-any-return]

    def rnn_backward(self, *args: Any) -> tuple[Tensor, Tensor, Tensor, list[Tensor]]:
        with ieee_float32(args[0].dtype):
            return torch.ops.aten._cudnn_rnn_backward(*args)  # type: ignore[no-any-return]

    def flatten_weight(self, *args: Any) -> Tensor:
        return torch.ops.aten._cudnn_rnn_flatten_weight(*args)  # type: ignore[no-any-return]

    def dropout_state(self, p: float, seed: int, device: torch.device) -> Tensor:
        signed = seed - 2**64 if seed >= 2**63 else seed  # aten takes an int64
        return torch.ops.aten._cudnn_init_dropout_state(  # type: ignore[no-any-return]
            p, True, signed, dtype=torch.uint8, device=device
        )


ATEN = Aten()


# -- where cuDNN keeps the weights --------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Plan:
    """Our buffer against cuDNN's, for one spec, dtype and device.

    ``targets`` are the kernel's tensors (per pseudo-layer ``w_ih, w_hh, b_ih, b_hh(, w_hr)``)
    where cuDNN keeps them, ``sources`` where our buffer keeps each (None: skip_input's
    identity, not stored). ``in_place``: our buffer is cuDNN's, as it is.
    """

    numel: int
    targets: tuple[Block, ...]
    sources: tuple[Block | None, ...]
    in_place: bool
    stride0: int  # tensors per pseudo-layer in the kernel's list: 4, or 5 with projection


def linear_spec(spec: RNNSpec) -> RNNSpec:
    """The ``linear_input`` model whose layer-0 input matrices are identities under skip_input."""
    return spec.with_input(spec.input_size, CUDNN_INPUT_LINEAR_MODE)


_PLANS: dict[tuple[Any, ...], Plan] = {}
_PLANS_LOCK = threading.Lock()


def plan(layout: Layout, dtype: torch.dtype, device: torch.device) -> Plan:
    """The (cached) plan: cuDNN is asked once per spec, dtype and device."""
    key = (layout.spec, dtype, device)
    found = _PLANS.get(key)
    if found is None:
        with _PLANS_LOCK:
            found = _PLANS.get(key)
            if found is None:
                found = _make_plan(layout, dtype, device)
                _PLANS[key] = found
    return found


def _make_plan(layout: Layout, dtype: torch.dtype, device: torch.device) -> Plan:
    spec = layout.spec
    full = layout_of(linear_spec(spec))
    shapes = [b.shape for b in full.kernel_blocks if b is not None]
    fresh = [torch.empty(s, dtype=dtype, device=device) for s in shapes]
    stride0 = 5 if spec.num_proj is not None else 4
    # cuDNN copies them into its buffer and leaves them as views into it: their offsets are
    # where cuDNN keeps each tensor.
    buf = ATEN.flatten_weight(
        fresh, stride0, spec.input_size, MODE_CODES[spec.mode], spec.num_units,
        spec.num_proj or 0, spec.num_layers, False, spec.bidirectional,
    )  # fmt: skip
    base = buf.untyped_storage().data_ptr()
    if any(t.untyped_storage().data_ptr() != base for t in fresh):
        raise RuntimeError(
            "cudnn_rnn: cuDNN did not lay out the weights in one buffer "
            f"(_cudnn_rnn_flatten_weight for {spec}); please report this with docs/gpu.md"
        )
    targets = tuple(Block(int(t.storage_offset()), tuple(t.shape)) for t in fresh)
    sources = layout.kernel_blocks
    in_place = not spec.skip_input and int(buf.numel()) == layout.size and targets == sources
    return Plan(int(buf.numel()), targets, sources, in_place, stride0)


def _view(flat: Tensor, block: Block) -> Tensor:
    n = 1
    for d in block.shape:
        n *= d
    return flat[block.offset : block.offset + n].view(block.shape)


#: cuDNN's weight list per buffer used in place: ``id(buffer) -> (buffer's address, views)``.
#: An entry goes when its buffer does (a weak reference's callback); a buffer whose storage was
#: replaced (``.data = ...``) has a new address, and its views are made again.
_WEIGHTS: dict[int, tuple[int, list[Tensor], weakref.ref[Tensor]]] = {}


def _weight_list(p: Plan, buf: Tensor) -> list[Tensor]:
    """The weight list aten's calls take with ``buf`` (a view per tensor, where cuDNN keeps it).

    Made once per parameter buffer used in place, as torch.nn keeps its ``_flat_weights``: a
    call of a 2-layer bidirectional LSTM would otherwise make 16 views in its forward and 16 in
    its backward.
    """
    if not p.in_place:  # a fresh copy on every call
        return [_view(buf, t) for t in p.targets]
    key, address = id(buf), buf.data_ptr()
    hit = _WEIGHTS.get(key)
    if hit is not None and hit[0] == address and hit[2]() is buf:
        return hit[1]
    alias = buf.detach()  # the views' base: views of ``buf`` itself would keep it alive
    views = [_view(alias, t) for t in p.targets]
    _WEIGHTS[key] = (address, views, weakref.ref(buf, lambda _: _WEIGHTS.pop(key, None)))
    return views


def _cudnn_buffer(p: Plan, params: Tensor, spec: RNNSpec) -> Tensor:
    """cuDNN's buffer of ``params``: itself where the layouts agree, else a copy."""
    if p.in_place:
        return params
    buf = params.new_zeros(p.numel)
    for src, dst in zip(p.sources, p.targets):
        if src is None:  # skip_input: the input added to every gate as is
            _view(buf, dst).copy_(stacked_identity(spec.num_gates, spec.num_units, params))
        else:
            _view(buf, dst).copy_(_view(params, src))
    return buf


def _params_gradient(p: Plan, grads: list[Tensor], params: Tensor) -> Tensor:
    """The gradient of ``params`` from cuDNN's per-tensor gradients (views into one buffer)."""
    first = grads[0]
    storage = first.untyped_storage()
    if (
        p.in_place
        and storage.nbytes() == p.numel * first.element_size()
        and all(
            g.untyped_storage().data_ptr() == storage.data_ptr()
            and int(g.storage_offset()) == t.offset
            for g, t in zip(grads, p.targets)
        )
    ):
        # cuDNN's gradient buffer is laid out as ours: it is the gradient, as it is.
        return first.new_empty(0).set_(storage, 0, (p.numel,), (1,))
    out = torch.empty_like(params)  # every stored block is written below
    for src, g in zip(p.sources, grads):
        if src is not None:  # skip_input's identity is not a parameter: its gradient is dropped
            _view(out, src).copy_(g.reshape(src.shape))
    return out


# -- variable lengths ---------------------------------------------------------------------------


class Packing(NamedTuple):
    """How a padded time-major batch with lengths becomes cuDNN's packed input and back."""

    order: Tensor  # batch indices sorted by decreasing length (stable), on the device
    unorder: Tensor  # its inverse
    lengths: Tensor  # the sorted lengths (CPU int64)
    batch_sizes: Tensor  # per step, how many sequences are still running (CPU int64)
    steps: int

    def pack(self, padded: Tensor) -> Tensor:
        sorted_batch = padded.index_select(1, self.order)
        data, _ = torch._pack_padded_sequence(sorted_batch, self.lengths, False)
        return data

    def unpack(self, data: Tensor) -> Tensor:
        padded, _ = torch._pad_packed_sequence(data, self.batch_sizes, False, 0.0, self.steps)
        return padded.index_select(1, self.unorder)

    def sort(self, state: Tensor) -> Tensor:
        return state.index_select(1, self.order)

    def unsort(self, state: Tensor) -> Tensor:
        return state.index_select(1, self.unorder)


def packing(lengths: Tensor | None, steps: int, device: torch.device) -> Packing | None:
    """None where every sequence runs all ``steps`` (cuDNN's unpacked input serves)."""
    if lengths is None or int(lengths.min()) >= steps:
        return None
    sorted_lengths, order = torch.sort(lengths, descending=True, stable=True)
    longest = int(sorted_lengths[0])
    batch_sizes = (torch.arange(longest)[:, None] < sorted_lengths[None, :]).sum(1)
    both = torch.stack([order, torch.argsort(order)])  # the order and its inverse, on the CPU
    if device.type != "cpu":
        # One copy from page-locked memory, queued behind the stream's work: a copy from
        # pageable memory would wait for the GPU to finish everything queued before it (a
        # host synchronisation on every call with lengths). torch's host allocator keeps the
        # page-locked block until the copy has run.
        both = both.pin_memory().to(device, non_blocking=True)
    return Packing(both[0], both[1], sorted_lengths, batch_sizes, steps)


def _states(pk: Packing | None, *states: Tensor | None) -> list[Tensor | None]:
    """States in cuDNN's batch order, contiguous (as aten requires)."""
    return [None if s is None else (s if pk is None else pk.sort(s)).contiguous() for s in states]


# -- the engine ---------------------------------------------------------------------------------

#: Reserves a backward has written into (cuDNN's backward does), by ``id``.
_USED: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()
_USED_LOCK = threading.Lock()


def _first_use(reserve: Tensor) -> bool:
    """Whether no backward has used ``reserve`` yet (and mark it used)."""
    with _USED_LOCK:
        if _USED.get(id(reserve)) is reserve:
            return False
        _USED[id(reserve)] = reserve
        return True


def _sizes(spec: RNNSpec) -> tuple[int, int, int, int, bool]:
    """aten's ``mode, hidden_size, proj_size, num_layers, batch_first`` (always time-major)."""
    return MODE_CODES[spec.mode], spec.num_units, spec.num_proj or 0, spec.num_layers, False


def _signed(seed: int) -> int:
    return seed - 2**64 if seed >= 2**63 else seed


class Cudnn:
    """The engine object of the rule table (see :mod:`cudnn_rnn.engines.base`)."""

    name = NAME
    #: aten's backward makes ``dy`` contiguous itself and frees that copy before cuDNN's
    #: workspace is allocated, as for torch.nn: one output-sized buffer less at the peak.
    strided_dy = True

    def supports(self, call: Call) -> bool:
        spec = call.spec
        return (
            call.device.type == ATEN.device_type
            and call.dtype in DTYPES
            and (spec.num_proj is None or spec.num_proj < spec.num_units)
            and ATEN.available()
        )

    def kept(self, call: Call) -> Kept:
        if not call.need_grad:
            return NOTHING
        if call.dropout == 0:
            return Kept(reserve=(Reserve(),), masks=False)  # cuDNN's reserve
        # ... then the dropout state its backward restores and the call's seed (int64), which
        # makes that state again should the reserve have to be made again.
        return Kept(reserve=(Reserve(), Reserve(), Reserve((1,), torch.int64)), masks=False)

    @staticmethod
    def _run(
        call: Call,
        p: Plan,
        buf: Tensor,
        x: Tensor,
        hx: Tensor | None,
        cx: Tensor | None,
        pk: Packing | None,
        state: Tensor | None,
        train: bool,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        spec = call.spec
        return ATEN.rnn(
            x if pk is None else pk.pack(x), _weight_list(p, buf), p.stride0, buf,
            hx, cx, *_sizes(spec), call.dropout, train, spec.bidirectional,
            [] if pk is None else pk.batch_sizes.tolist(), state,
        )  # fmt: skip

    def forward(self, call: Call, inputs: Inputs) -> Outputs:
        params, x, h0, c0, lengths, _masks = inputs
        p = plan(call.layout, params.dtype, params.device)
        buf = _cudnn_buffer(p, params, call.spec)
        state = ATEN.dropout_state(call.dropout, call.seed, x.device) if call.dropout else None
        pk = packing(lengths, int(x.shape[0]), x.device)
        hx, cx = _states(pk, h0, c0)
        # cuDNN applies its dropout only in training mode, which also keeps the reserve.
        train = call.need_grad or call.dropout > 0
        y, hy, cy, reserve, _ = self._run(call, p, buf, x, hx, cx, pk, state, train)
        if pk is not None:
            y, hy = pk.unpack(y), pk.unsort(hy)
            cy = pk.unsort(cy) if c0 is not None else cy
        kept: list[Tensor] = []
        if call.need_grad:
            kept.append(reserve)
            if state is not None:
                kept += [state, torch.tensor([_signed(call.seed)], device=x.device)]
        return Outputs(y, hy, cy if c0 is not None else None, None, kept)

    def backward(
        self, call: Call, saved: Saved, grads: Grads
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        s = saved
        spec = call.spec
        p = plan(call.layout, s.params.dtype, s.params.device)
        buf = _cudnn_buffer(p, s.params, spec)
        pk = packing(s.lengths, int(s.x.shape[0]), s.x.device)
        hx, cx, dhy, dcy = _states(pk, s.h0, s.c0, grads.dhy, grads.dcy)
        reserve, *rest = s.reserve
        state = rest[0] if rest else None
        if not _first_use(reserve) or s.again:
            # A second backward through this call (retain_graph, gradcheck, jacobians): cuDNN's
            # first one wrote into the reserve, so the forward runs again to make a fresh one,
            # from the same inputs and the same dropout seed.
            if state is not None:
                state = ATEN.dropout_state(call.dropout, int(rest[1]) % 2**64, s.x.device)
            reserve = self._run(call, p, buf, s.x, hx, cx, pk, state, True)[3]
        has_c = s.c0 is not None

        def packed(t: Tensor) -> Tensor:  # x and y are contiguous; dy as the caller made it
            return t if pk is None else pk.pack(t)

        dx, dhx, dcx, dws = ATEN.rnn_backward(
            packed(s.x), _weight_list(p, buf), p.stride0, buf, hx, cx,
            packed(s.y), packed(grads.dy), dhy, dcy if has_c else None, *_sizes(spec),
            call.dropout, True, spec.bidirectional,
            [] if pk is None else pk.batch_sizes.tolist(), state, reserve,
            [True, True, has_c, True],
        )  # fmt: skip
        dparams = _params_gradient(p, list(dws), s.params)
        if pk is not None:
            dx, dhx = pk.unpack(dx), pk.unsort(dhx)
            dcx = pk.unsort(dcx) if has_c else dcx
        return dparams, dx, dhx, (dcx if has_c else None)


ENGINE = Cudnn()
