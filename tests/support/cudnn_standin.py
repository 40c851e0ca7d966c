"""A CPU stand-in for aten's cuDNN RNN entry points, so the ``cudnn`` engine runs without a GPU.

It keeps the contracts the engine relies on, as aten's CUDA code has them
(aten/src/ATen/native/cudnn/RNN.cpp), and checks that the engine honours them:

* ``_cudnn_rnn`` reads the weights from ``weight_buf`` (never from the weight list, whose shapes it
  checks), at the offsets its own layout says (optionally with padding before every block, as
  cuDNN may pad: then the engine must copy), takes packed input with ``batch_sizes`` sorted
  by decreasing length, requires contiguous states, applies dropout between layers from the
  dropout state's seed only in training mode and returns a reserve whose length the caller cannot
  predict;
* ``_cudnn_rnn_backward`` checks that ``output`` is what the forward returned for these inputs,
  refuses a reserve a backward already wrote into (cuDNN's backward writes into it) and returns
  the weight gradients as views into one fresh buffer laid out as ``weight_buf``;
* ``_cudnn_rnn_flatten_weight`` copies the weights into a new buffer and leaves them as views
  into it.

The arithmetic is torch's own CPU kernels (``_VF.lstm`` and friends) with autograd for the
backward: independent of our engines, so the tests compare the engine against the NumPy oracle
and torch's CPU math through the stand-in.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from typing import Any

import torch
from torch import _VF, Tensor

from cudnn_rnn.core.layout import Block, layout_of
from cudnn_rnn.core.spec import RNNSpec

MODES = {0: "rnn_relu", 1: "rnn_tanh", 2: "lstm", 3: "gru"}
KERNELS = {"lstm": _VF.lstm, "gru": _VF.gru, "rnn_tanh": _VF.rnn_tanh, "rnn_relu": _VF.rnn_relu}
USED = 0xEE  # what the stand-in's backward writes into the reserve


@dataclasses.dataclass
class StandIn:
    """Drop-in for :class:`cudnn_rnn.engines.cudnn.Aten` on the CPU."""

    pad: int = 0  # elements of padding before every block of the stand-in's buffer
    device_type: str = "cpu"
    calls: list[tuple[str, dict[str, Any]]] = dataclasses.field(default_factory=list)
    masks: dict[tuple[int, tuple[int, ...]], list[Tensor]] = dataclasses.field(default_factory=dict)

    def available(self) -> bool:
        return True

    # -- the stand-in's weight layout --------------------------------------------------------

    def _blocks(self, spec: RNNSpec) -> tuple[int, list[Block]]:
        """(buffer length, the kernel list's blocks): our layout shifted by the padding."""
        layout = layout_of(spec)
        order = sorted(
            range(len(layout.kernel_blocks)), key=lambda i: layout.kernel_blocks[i].offset
        )  # type: ignore[union-attr]
        shift = {i: (k + 1) * self.pad for k, i in enumerate(order)}
        blocks = []
        for i, b in enumerate(layout.kernel_blocks):
            assert b is not None
            blocks.append(Block(b.offset + shift[i], b.shape))
        return layout.size + len(blocks) * self.pad, blocks

    @staticmethod
    def _spec(
        mode: int, input_size: int, hidden: int, proj: int, layers: int, bidi: bool
    ) -> RNNSpec:
        direction = "bidirectional" if bidi else "unidirectional"
        return RNNSpec(
            MODES[mode], layers, hidden, input_size, "linear_input", direction, proj or None
        )

    @staticmethod
    def _views(flat: Tensor, blocks: list[Block]) -> list[Tensor]:
        out = []
        for b in blocks:
            n = 1
            for d in b.shape:
                n *= d
            out.append(flat[b.offset : b.offset + n].view(b.shape))
        return out

    # -- aten's entry points -----------------------------------------------------------------

    def flatten_weight(
        self, weights: list[Tensor], stride0: int, input_size: int, mode: int, hidden: int,
        proj: int, layers: int, batch_first: bool, bidi: bool,
    ) -> Tensor:  # fmt: skip
        spec = self._spec(mode, input_size, hidden, proj, layers, bidi)
        numel, blocks = self._blocks(spec)
        assert stride0 == (5 if proj else 4) and len(weights) == len(blocks)
        buf = weights[0].new_zeros(numel)
        for w, view in zip(weights, self._views(buf, blocks)):
            view.copy_(w)
            w.set_(view)
        self.calls.append(("flatten_weight", {"numel": numel}))
        return buf

    def dropout_state(self, p: float, seed: int, device: torch.device) -> Tensor:
        state = torch.tensor([seed % 2**63], dtype=torch.int64).view(torch.uint8).clone()
        self.calls.append(("dropout_state", {"p": p, "seed": seed}))
        return state.to(device)

    def rnn(
        self, x: Tensor, weights: list[Tensor], stride0: int, buf: Tensor | None, hx: Tensor,
        cx: Tensor | None, mode: int, hidden: int, proj: int, layers: int, batch_first: bool,
        dropout: float, train: bool, bidi: bool, batch_sizes: list[int], state: Tensor | None,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
        assert buf is not None, "the engine hands cuDNN its buffer"
        assert not batch_first and hx.is_contiguous() and (cx is None or cx.is_contiguous())
        self.calls.append(
            ("rnn", {"buf": buf.data_ptr(), "packed": bool(batch_sizes), "train": train})
        )
        spec = self._spec(mode, int(x.shape[-1]), hidden, proj, layers, bidi)
        numel, blocks = self._blocks(spec)
        assert buf.numel() == numel and [tuple(w.shape) for w in weights] == [
            b.shape for b in blocks
        ]
        with torch.no_grad():
            y, hy, cy = self._run(spec, x, buf, blocks, hx, cx, dropout, train, batch_sizes, state)
        reserve = torch.zeros(0, dtype=torch.uint8)
        if train:  # a length the caller cannot know in advance
            reserve = torch.full((int(x.shape[0]) * 3 + 5,), 0x5A, dtype=torch.uint8)
        return y, hy, cy if cy is not None else hx.new_empty(0), reserve, buf

    def rnn_backward(
        self, x: Tensor, weights: list[Tensor], stride0: int, buf: Tensor, hx: Tensor,
        cx: Tensor | None, output: Tensor, dy: Tensor, dhy: Tensor, dcy: Tensor | None,
        mode: int, hidden: int, proj: int, layers: int, batch_first: bool, dropout: float,
        train: bool, bidi: bool, batch_sizes: list[int], state: Tensor | None, reserve: Tensor,
        output_mask: list[bool],
    ) -> tuple[Tensor, Tensor, Tensor, list[Tensor]]:  # fmt: skip
        assert train, "cudnn RNN backward can only be called in training mode"
        assert bool((reserve != USED).all()), "a reserve a backward already wrote into"
        assert output_mask == [True, True, cx is not None, True]
        spec = self._spec(mode, int(x.shape[-1]), hidden, proj, layers, bidi)
        numel, blocks = self._blocks(spec)
        primals = [t.detach() for t in (x, buf, hx)] + ([cx.detach()] if cx is not None else [])
        cotangents = [dy, dhy] + (
            [dcy if dcy is not None else torch.zeros_like(cx)] if cx is not None else []
        )

        def differentiate() -> tuple[Tensor, ...]:
            leaves = [t.clone().requires_grad_() for t in primals]
            c_leaf = leaves[3] if cx is not None else None
            y, hy, cy = self._run(
                spec, leaves[0], leaves[1], blocks, leaves[2], c_leaf, dropout, True,
                batch_sizes, state,
            )  # fmt: skip
            assert torch.equal(y, output), "output is not what the forward gave these inputs"
            outs = [y, hy] + ([cy] if cy is not None else [])
            found = torch.autograd.grad(outs, leaves, cotangents, allow_unused=True)
            return tuple(g if g is not None else torch.zeros_like(t) for g, t in zip(found, leaves))

        # A custom operator runs below autograd on its thread; another thread records a graph.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            grads = pool.submit(differentiate).result()
        # As cuDNN's backward, which writes into it through a raw pointer (no version bump).
        with torch.autograd._unsafe_preserve_version_counter(reserve):
            reserve.fill_(USED)
        dx, dbuf, dhx = grads[:3]
        dw = torch.zeros(numel, dtype=buf.dtype)
        dw.copy_(dbuf)
        views = [dw.new_empty(0).set_(dw.untyped_storage(), b.offset, b.shape) for b in blocks]
        dcx = grads[3] if cx is not None else torch.empty(0)
        return dx, dhx, dcx, views

    # -- the arithmetic: torch's CPU kernels, layer by layer with the dropout masks ----------

    def _run(
        self, spec: RNNSpec, x: Tensor, buf: Tensor, blocks: list[Block], hx: Tensor,
        cx: Tensor | None, dropout: float, train: bool, batch_sizes: list[int],
        state: Tensor | None,
    ) -> tuple[Tensor, Tensor, Tensor | None]:  # fmt: skip
        weights = self._views(buf, blocks)
        per = len(weights) // spec.num_states
        sizes = torch.tensor(batch_sizes, dtype=torch.int64) if batch_sizes else None
        kernel = KERNELS[spec.mode]
        d = spec.num_dirs
        masks = self._masks(spec, x, dropout, train, state)
        data, hs, cs = x, [], []
        for layer in range(spec.num_layers):
            if layer > 0 and masks:
                data = data * masks[layer - 1]
            h = hx[layer * d : (layer + 1) * d]
            hidden: Any = h if cx is None else (h, cx[layer * d : (layer + 1) * d])
            w = weights[layer * d * per : (layer + 1) * d * per]
            if sizes is None:
                out = kernel(data, hidden, w, True, 1, 0.0, train, spec.bidirectional, False)
            else:
                out = kernel(data, sizes, hidden, w, True, 1, 0.0, train, spec.bidirectional)
            data = out[0]
            hs.append(out[1])
            if cx is not None:
                cs.append(out[2])
        return data, torch.cat(hs), (torch.cat(cs) if cs else None)

    def _masks(
        self, spec: RNNSpec, x: Tensor, p: float, train: bool, state: Tensor | None
    ) -> list[Tensor]:
        if not (train and p > 0):
            return []
        assert state is not None, "dropout needs cuDNN's dropout state"
        seed = int(state.view(torch.int64)[0])
        shape = (*x.shape[:-1], spec.num_dirs * spec.output_units)
        if (seed, shape) not in self.masks:
            gen = torch.Generator().manual_seed(seed)
            self.masks[seed, shape] = [
                torch.empty(shape, dtype=x.dtype).bernoulli_(1 - p, generator=gen) / (1 - p)
                for _ in range(spec.num_layers - 1)
            ]
        return self.masks[seed, shape]
