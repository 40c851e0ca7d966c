"""The engine protocol: what the operator hands an engine and what it gets back.

Every engine is one object with the same four entry points, so the operator
(:mod:`cudnn_rnn.operator`) runs whichever the rule table (:mod:`cudnn_rnn.engines`) picks
without knowing which it is:

* ``supports(call)``: whether the engine computes this call (the rule table asks the engines in
  order and takes the first that says yes);
* ``kept(call)``: what the engine keeps for its backward pass, as sizes the operator's fake
  implementation can allocate without running anything (symbolic sizes work);
* ``forward(call, inputs)``: the whole stack over time-major ``x``;
* ``backward(call, saved, grads)``: ``(dparams, dx, dh0, dc0 or None)`` from what ``forward``
  kept.

and one fact, ``strided_dy``: whether its backward takes the output's gradient with the
caller's strides (the gradient of ``out.sum()`` is one value expanded over the output: no
memory). Every other tensor an engine gets is C-contiguous; where ``strided_dy`` is False the
operator makes ``dy`` so too, and where it is True the engine's kernel makes its own contiguous
copy where it needs one, which it frees before its largest allocation (aten's cuDNN backward
does), rather than an output-sized copy the operator would hold through the whole backward.

``batch == 0`` never reaches an engine: the operator answers it once, from ``kept``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import torch
from torch import Tensor

from cudnn_rnn.core.layout import Layout
from cudnn_rnn.core.spec import RNNSpec


class Call(NamedTuple):
    """What is fixed about one call before it runs: all the rule table may look at.

    (A named tuple: it is made on every call, and costs a tenth of a frozen dataclass.)
    """

    layout: Layout
    device: torch.device
    dtype: torch.dtype
    steps: Any  # int, or a SymInt in the fake implementation
    batch: Any
    need_grad: bool  # the engine must keep what its backward needs
    lengths: bool  # sequence_lengths are given
    traced: bool  # the call is being compiled or exported
    dropout: float = 0.0  # the probability in force (0 outside training or with one layer)
    seed: int = 0  # this call's dropout seed (the op's seed and its step counter combined)

    @property
    def spec(self) -> RNNSpec:
        return self.layout.spec


@dataclass(frozen=True)
class Reserve:
    """One tensor of an engine's reserve list, as the fake implementation must make it.

    ``shape`` None: bytes whose count only the kernel knows (``uint8``, a data-dependent size
    in the fake). Otherwise a tensor of that shape in ``dtype`` (None: the input's dtype).
    """

    shape: tuple[Any, ...] | None = None
    dtype: torch.dtype | None = None

    def make(self, like: Tensor, dynamic_size: Any) -> Tensor:
        """The tensor, with ``dynamic_size`` (an int or a SymInt) as the length of bytes."""
        if self.shape is None:
            return like.new_empty(dynamic_size, dtype=torch.uint8)
        return like.new_empty(self.shape, dtype=self.dtype or like.dtype)


@dataclass(frozen=True)
class Kept:
    """What an engine keeps between forward and backward, sized before anything runs."""

    #: Elements of one buffer in the input's dtype (symbolic sizes work); None: a length only
    #: the values know (the native engine's with lengths: the valid steps), data-dependent in
    #: the fake.
    workspace: Any = 0
    reserve: tuple[Reserve, ...] = ()
    #: Whether the engine takes the dropout masks the operator draws from the op's seed (and
    #: keeps them for its backward); False: it draws its own (cuDNN keeps them in its reserve).
    masks: bool = True


NOTHING = Kept()


class Inputs(NamedTuple):
    """The forward's tensors; ``lengths`` a CPU int64 ``[B]`` in ``[1, T]`` or None, ``masks``
    the operator's dropout masks ``[L-1, T, B, D*Hout]`` or None."""

    params: Tensor
    x: Tensor
    h0: Tensor
    c0: Tensor | None
    lengths: Tensor | None
    masks: Tensor | None


@dataclass
class Outputs:
    """The forward's results; ``workspace`` and ``reserve`` as :class:`Kept` describes them."""

    y: Tensor
    hy: Tensor
    cy: Tensor | None
    workspace: Tensor | None = None
    reserve: list[Tensor] = field(default_factory=list)


class Saved(NamedTuple):
    """What the backward gets: the forward's inputs and outputs and what the engine kept."""

    params: Tensor
    x: Tensor
    h0: Tensor
    c0: Tensor | None
    lengths: Tensor | None
    masks: Tensor | None
    y: Tensor
    hy: Tensor
    cy: Tensor | None
    workspace: Tensor
    reserve: list[Tensor]
    #: Whether a backward through the same call ran before (autograd's node says so; a
    #: compiled backward does not know and passes False).
    again: bool = False
    #: Whether the input's gradient is wanted (False: the engine may return zeros for it).
    need_dx: bool = True


class Grads(NamedTuple):
    """Gradients of the forward's outputs (zeros where the caller used none); ``dy`` with the
    caller's strides for an engine whose ``strided_dy`` is True, the others contiguous."""

    dy: Tensor
    dhy: Tensor
    dcy: Tensor | None


class Engine(Protocol):
    """One way of computing the fused RNN (see the module docstring)."""

    name: str
    strided_dy: bool

    def supports(self, call: Call) -> bool: ...

    def kept(self, call: Call) -> Kept: ...

    def forward(self, call: Call, inputs: Inputs) -> Outputs: ...

    def backward(
        self, call: Call, saved: Saved, grads: Grads
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]: ...


def no_backward(name: str) -> RuntimeError:
    """The error of an engine that keeps nothing, asked for gradients (a broken rule table)."""
    return RuntimeError(
        f"cudnn_rnn::rnn_backward: the {name!r} engine computes calls without gradient only; "
        "the rule table chose it for a call that needs one"
    )
